/*
 * comm_nccl.c: the GPU backend of the collectives — NCCL, bootstrapped over
 * MPI, one GPU per rank.  Built into libplanrt_cuda.a (mpicc -DPRT_CUDA);
 * the generic part (runtime/comm/{context,coll,algos,sched}.c) is shared
 * with the CPU build, so the API and the own algorithms are the same.
 *
 * Start-up: each rank takes device (node-local rank mod visible devices)
 * — see pick_device() for why — and creates one stream for communication.
 * Every group of two or more ranks gets an NCCL communicator: its rank 0
 * calls ncclGetUniqueId and MPI_Bcast's the id over the group's MPI
 * communicator, then all call ncclCommInitRank; a group of one rank gets
 * none (coll.c runs its collectives as local copies).  A failure on any
 * rank (no GPU, two ranks on one GPU, rank 0 without an id) stops every
 * rank of the call with the same message (prtc_agree); nothing crashes
 * and nothing hangs.
 *
 * Ordering: collectives run on the communication stream.  Before each one
 * an event recorded on the compute stream (the legacy default stream unless
 * prt_comm_set_compute_stream says otherwise) makes it wait for the kernels
 * that produced its input; after a blocking one the compute stream waits
 * for an event on the communication stream, so the next kernel sees the
 * result without the host waiting — whatever PLANRT_TIMEOUT_S says, since
 * a host wait per collective would be a device sync per collective.  An
 * _async call only records an event: prt_test polls it, prt_wait spins on
 * it (with the deadline of PLANRT_TIMEOUT_S) and then orders the compute
 * stream after it.  The work memory of own algorithms comes from a pool
 * that keeps its memory, allocated and freed in communication-stream
 * order, so no cudaMalloc/cudaFree (a device-wide sync) runs in a step.
 *
 * Own algorithms: a schedule is enqueued whole — each round one
 * ncclGroupStart/ncclSend.../ncclRecv.../ncclGroupEnd, its local steps
 * kernels from comm_kernels.cu — since stream order already serialises the
 * rounds.  NCCL has no message tags: messages between two ranks of a group
 * arrive in the order they were sent, which is what pipelines need.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "../comm/comm_internal.h"

/* comm_kernels.cu */
cudaError_t prtc_gpu_reduce(void *dst, const void *a, const void *b, size_t n, int type,
                            int op, cudaStream_t s);
cudaError_t prtc_gpu_scale(void *buf, size_t n, int type, int P, cudaStream_t s);

/* Per-context GPU state (prt_ctx.impl). */
typedef struct {
    cudaStream_t comm;           /* NCCL and own-algorithm kernels */
    cudaStream_t compute;        /* the stream compute kernels run on */
    cudaEvent_t  compute_done;   /* recorded on compute before each collective */
    cudaEvent_t  comm_done;      /* recorded on comm after each blocking one */
    cudaMemPool_t scratch;       /* own algorithms' work memory; NULL: the device
                                    has no pools, cudaMalloc then */
} gpu_ctx;

static gpu_ctx *gctx(const prt_comm *g) { return g->ctx->impl; }

static prt_status cuda_fail(const prt_comm *g, cudaError_t e, const char *what)
{
    return prtc_error(PRT_ERR_CUDA, g, "%s: %s", what, cudaGetErrorString(e));
}

static prt_status nccl_fail(const prt_comm *g, ncclResult_t e, const char *what)
{
    return prtc_error(PRT_ERR_CUDA, g, "%s: %s", what, ncclGetErrorString(e));
}

#define CUDA_TRY(g, call) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) return cuda_fail((g), e_, #call); } while (0)
#define NCCL_TRY(g, call) do { ncclResult_t e_ = (call); \
    if (e_ != ncclSuccess) return nccl_fail((g), e_, #call); } while (0)

static ncclDataType_t nccl_type(prt_dtype t)
{
    switch (t) {
    case PRT_FP32:  return ncclFloat32;
    case PRT_FP16:  return ncclFloat16;
    case PRT_BF16:  return ncclBfloat16;
    case PRT_INT32: return ncclInt32;
    case PRT_INT64: return ncclInt64;
    }
    return ncclFloat32;
}

static ncclRedOp_t nccl_op(prt_redop op)
{
    switch (op) {
    case PRT_SUM: return ncclSum;
    case PRT_AVG: return ncclAvg;
    case PRT_MAX: return ncclMax;
    case PRT_MIN: return ncclMin;
    }
    return ncclSum;
}

const char *prt_comm_backend(void) { return "nccl"; }

/* The device of this rank: its node-local rank modulo the devices it sees.
 * `mpirun -np 8` on an 8-GPU node (8 visible, local ranks 0..7) gives each
 * rank its own; a Slurm job that gives each rank its own
 * CUDA_VISIBLE_DEVICES (1 visible, local size 8) gives device 0 everywhere,
 * which is a different GPU on every rank.  So more ranks on a node than
 * visible devices is no error by itself: two ranks on one physical GPU is
 * (planrt uses one GPU per rank, NCCL refuses duplicates), and
 * one_gpu_per_rank() checks exactly that, by UUID.  *uuid gets the device's. */
static prt_status pick_device(prt_ctx *c, cudaUUID_t *uuid)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        prtc_error(PRT_ERR_CUDA, NULL,
                   "rank %d: no CUDA device visible (%s)\n  hint: run on a GPU node, "
                   "or build with --target cpu (libplanrt.a)", c->rank,
                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return PRT_ERR_CUDA;
    }
    c->device = c->local_rank % ndev;
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, c->device)) != cudaSuccess) {
        prtc_error(PRT_ERR_CUDA, NULL, "rank %d: cudaGetDeviceProperties(%d): %s", c->rank,
                   c->device, cudaGetErrorString(e));
        return PRT_ERR_CUDA;
    }
    *uuid = p.uuid;
    return PRT_OK;
}

/* One rank's entry in the world's device table. */
typedef struct {
    cudaUUID_t uuid;
    int        rank, device;
} rank_gpu;

static int by_uuid(const void *a, const void *b)
{
    const rank_gpu *x = a, *y = b;
    int d = memcmp(&x->uuid, &y->uuid, sizeof x->uuid);
    return d ? d : x->rank - y->rank;
}

/* Refuse two ranks on one physical GPU: every rank's device UUID to all
 * (UUIDs are unique across nodes, so no node table is needed), sorted, and
 * neighbours compared; every rank sees the same table, so all decide the
 * same with the same message.  An all-zero UUID (some virtual devices) says
 * nothing and is skipped. */
static prt_status one_gpu_per_rank(prt_ctx *c, cudaUUID_t uuid)
{
    rank_gpu me = { .uuid = uuid, .rank = c->rank, .device = c->device };
    rank_gpu *all = malloc((size_t)c->size * sizeof *all);
    int ok = all != NULL, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        free(all);
        return prtc_error(PRT_ERR_NOMEM, NULL, "prt_init: out of memory for the device table");
    }
    MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD);
    qsort(all, (size_t)c->size, sizeof *all, by_uuid);
    static const cudaUUID_t zero;
    prt_status s = PRT_OK;
    for (int i = 1; i < c->size && s == PRT_OK; i++)
        if (!memcmp(&all[i].uuid, &all[i - 1].uuid, sizeof zero) &&
            memcmp(&all[i].uuid, &zero, sizeof zero))
            s = prtc_error(PRT_ERR_CUDA, NULL,
                           "ranks %d and %d would share one GPU (their devices %d and %d are "
                           "the same GPU); planrt uses one GPU per rank\n  hint: start at "
                           "most as many ranks per node as it has GPUs, or give each rank its "
                           "own CUDA_VISIBLE_DEVICES", all[i - 1].rank, all[i].rank,
                           all[i - 1].device, all[i].device);
    free(all);
    return s;
}

/* The pool of own algorithms' scratch: device memory that, once freed in
 * stream order, stays with the pool (release threshold: never) for the next
 * step's allocation.  A device without pools gets NULL (cudaMalloc). */
static prt_status make_scratch_pool(prt_ctx *c, gpu_ctx *gc)
{
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, c->device) !=
        cudaSuccess || !pools)
        return PRT_OK;
    struct cudaMemPoolProps props = { 0 };
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = c->device;
    CUDA_TRY(NULL, cudaMemPoolCreate(&gc->scratch, &props));
    uint64_t keep = UINT64_MAX;
    CUDA_TRY(NULL, cudaMemPoolSetAttribute(gc->scratch, cudaMemPoolAttrReleaseThreshold, &keep));
    return PRT_OK;
}

/* Set the device up and make the streams and the pool. */
static prt_status gpu_setup(prt_ctx *c)
{
    gpu_ctx *gc = calloc(1, sizeof *gc);
    if (!gc)
        return prtc_error(PRT_ERR_NOMEM, NULL, "prt_init: out of memory");
    c->impl = gc;
    CUDA_TRY(NULL, cudaSetDevice(c->device));
    CUDA_TRY(NULL, cudaStreamCreateWithFlags(&gc->comm, cudaStreamNonBlocking));
    CUDA_TRY(NULL, cudaEventCreateWithFlags(&gc->compute_done, cudaEventDisableTiming));
    CUDA_TRY(NULL, cudaEventCreateWithFlags(&gc->comm_done, cudaEventDisableTiming));
    gc->compute = 0;  /* legacy default stream */
    return make_scratch_pool(c, gc);
}

/* Pick the device, check one GPU per rank, set up; collective over the
 * world, every step agreed, so all ranks stop together on a failure. */
prt_status prtc_backend_init(prt_ctx *c)
{
    cudaUUID_t uuid;
    prt_status s = prtc_agree(MPI_COMM_WORLD, pick_device(c, &uuid));
    if (s == PRT_OK)
        s = one_gpu_per_rank(c, uuid);
    if (s == PRT_OK)
        s = prtc_agree(MPI_COMM_WORLD, gpu_setup(c));
    return s;
}

void prtc_backend_finalize(prt_ctx *c)
{
    gpu_ctx *gc = c->impl;
    if (!gc)
        return;
    if (gc->comm) {
        cudaStreamSynchronize(gc->comm);
        cudaStreamDestroy(gc->comm);
    }
    if (gc->compute_done)
        cudaEventDestroy(gc->compute_done);
    if (gc->comm_done)
        cudaEventDestroy(gc->comm_done);
    if (gc->scratch)
        cudaMemPoolDestroy(gc->scratch);   /* its memory was freed on comm, now idle */
    free(gc);
    c->impl = NULL;
}

void prt_comm_set_compute_stream(prt_ctx *c, void *stream)
{
    if (c && c->impl)
        ((gpu_ctx *)c->impl)->compute = (cudaStream_t)stream;
}

/* One NCCL communicator per group of two or more ranks: the unique id
 * travels by MPI_Bcast, after the group has agreed that rank 0 got one (a
 * rank 0 that failed and left before the broadcast would hang the rest). */
prt_status prtc_backend_comm_init(prt_comm *g)
{
    g->backend = NULL;
    if (g->size == 1)
        return PRT_OK;   /* its collectives are local copies (coll.c) */
    ncclUniqueId id;
    prt_status s = PRT_OK;
    if (g->rank == 0) {
        ncclResult_t e = ncclGetUniqueId(&id);
        if (e != ncclSuccess)
            s = prtc_error(PRT_ERR_CUDA, g, "rank 0 of this group could not get the NCCL unique "
                           "id: %s\n  hint: NCCL_DEBUG=WARN says why (network interfaces, "
                           "NCCL_SOCKET_IFNAME)", ncclGetErrorString(e));
    }
    if ((s = prtc_agree(g->mpi, s)) != PRT_OK)
        return s;
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, g->mpi) != MPI_SUCCESS)
        return prtc_error(PRT_ERR_MPI, g, "MPI_Bcast of the NCCL unique id failed");
    ncclComm_t nc;
    NCCL_TRY(g, ncclCommInitRank(&nc, g->size, id, g->rank));
    g->backend = nc;
    return PRT_OK;
}

void prtc_backend_comm_free(prt_comm *g)
{
    if (g->backend)
        ncclCommDestroy((ncclComm_t)g->backend);
    g->backend = NULL;
}

void *prtc_backend_alloc(size_t bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

void prtc_backend_free(void *p)
{
    if (p)
        cudaFree(p);
}

void *prtc_backend_scratch_alloc(prt_comm *g, size_t bytes)
{
    gpu_ctx *gc = gctx(g);
    void *p = NULL;
    if (!gc->scratch)
        return prtc_backend_alloc(bytes);
    return cudaMallocFromPoolAsync(&p, bytes ? bytes : 1, gc->scratch, gc->comm) == cudaSuccess
        ? p : NULL;
}

/* Freed once the communication work queued so far, which may still read
 * or write it, is done: stream order, no host wait. */
void prtc_backend_scratch_free(prt_comm *g, void *p)
{
    gpu_ctx *gc = gctx(g);
    if (!p)
        return;
    if (gc->scratch)
        cudaFreeAsync(p, gc->comm);
    else
        cudaFree(p);
}

/* NCCL calls and kernels are queued; the host does not wait for them. */
bool prtc_backend_blocking_enqueues(void) { return true; }

/* The compute stream waits for r's event; the host goes on.  r's scratch
 * goes back to the group (or the pool) at once: whatever uses it next is
 * queued on the same communication stream, behind r. */
prt_status prtc_backend_block(prt_request *r)
{
    cudaError_t e = cudaStreamWaitEvent(gctx(r->g)->compute, (cudaEvent_t)r->backend, 0);
    prt_comm *g = r->g;
    sch_free(r);
    return e == cudaSuccess ? PRT_OK : cuda_fail(g, e, "cudaStreamWaitEvent");
}

/* A one-rank group's collective: a device copy queued on the compute
 * stream, so it runs after the kernels that wrote src and before those that
 * read dst (cudaMemcpyDefault: a host buffer works too). */
prt_status prtc_backend_copy(prt_comm *g, void *dst, const void *src, size_t bytes)
{
    CUDA_TRY(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, gctx(g)->compute));
    return PRT_OK;
}

prt_status prt_comm_upload(void *dst, const void *host, size_t bytes)
{
    cudaError_t e = cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? PRT_OK : cuda_fail(NULL, e, "prt_comm_upload");
}

prt_status prt_comm_download(void *host, const void *src, size_t bytes)
{
    cudaError_t e = cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? PRT_OK : cuda_fail(NULL, e, "prt_comm_download");
}

/* Make the communication stream wait for the compute stream's work. */
static prt_status after_compute(prt_comm *g)
{
    gpu_ctx *gc = gctx(g);
    CUDA_TRY(g, cudaEventRecord(gc->compute_done, gc->compute));
    CUDA_TRY(g, cudaStreamWaitEvent(gc->comm, gc->compute_done, 0));
    return PRT_OK;
}

/* Finish a call: a request gets an event to poll; a blocking call orders
 * the compute stream after it. */
static prt_status finish(prt_comm *g, prt_request *r)
{
    gpu_ctx *gc = gctx(g);
    if (r) {
        cudaEvent_t ev;
        CUDA_TRY(g, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        r->backend = ev;
        CUDA_TRY(g, cudaEventRecord(ev, gc->comm));
        return PRT_OK;
    }
    CUDA_TRY(g, cudaEventRecord(gc->comm_done, gc->comm));
    CUDA_TRY(g, cudaStreamWaitEvent(gc->compute, gc->comm_done, 0));
    return PRT_OK;
}

/* The collectives NCCL lacks, as grouped sends and receives. */
static prt_status nccl_linear(prt_comm *g, const coll_args *a, cudaStream_t s)
{
    ncclComm_t nc = g->backend;
    ncclDataType_t dt = nccl_type(a->type);
    const size_t es = prt_dtype_size(a->type), n = a->n;
    const int P = g->size, r = g->rank;
    const char *sb = a->sendbuf;
    char *rb = a->recvbuf;
    NCCL_TRY(g, ncclGroupStart());
    for (int j = 0; j < P; j++) {
        switch (a->kind) {
        case COLL_SCATTER:
            if (r == a->root && j != r)
                NCCL_TRY(g, ncclSend(sb + (size_t)j * n * es, n, dt, j, nc, s));
            break;
        case COLL_GATHER:
            if (r == a->root && j != r)
                NCCL_TRY(g, ncclRecv(rb + (size_t)j * n * es, n, dt, j, nc, s));
            break;
        case COLL_ALL_TO_ALL:
            if (j != r) {
                NCCL_TRY(g, ncclSend(sb + (size_t)j * n * es, n, dt, j, nc, s));
                NCCL_TRY(g, ncclRecv(rb + (size_t)j * n * es, n, dt, j, nc, s));
            }
            break;
        default:
            break;
        }
    }
    if (a->kind == COLL_SCATTER && r != a->root)
        NCCL_TRY(g, ncclRecv(rb, n, dt, a->root, nc, s));
    if (a->kind == COLL_GATHER && r != a->root)
        NCCL_TRY(g, ncclSend(sb, n, dt, a->root, nc, s));
    NCCL_TRY(g, ncclGroupEnd());
    /* The rank's own block does not travel. */
    const char *own_src = a->kind == COLL_SCATTER ? sb + (size_t)r * n * es : sb;
    char *own_dst = a->kind == COLL_GATHER ? rb + (size_t)r * n * es : rb;
    if (a->kind == COLL_ALL_TO_ALL) {
        own_src = sb + (size_t)r * n * es;
        own_dst = rb + (size_t)r * n * es;
    }
    bool has_own = a->kind == COLL_ALL_TO_ALL || r == a->root;
    if (has_own && n && own_src != own_dst)
        CUDA_TRY(g, cudaMemcpyAsync(own_dst, own_src, n * es, cudaMemcpyDeviceToDevice, s));
    return PRT_OK;
}

/* The uneven block collectives: one broadcast (all-gather) or reduce
 * (reduce-scatter) per rank's block, in one NCCL group. */
static prt_status nccl_v(prt_comm *g, const coll_args *a, cudaStream_t s)
{
    ncclComm_t nc = g->backend;
    ncclDataType_t dt = nccl_type(a->type);
    const size_t es = prt_dtype_size(a->type);
    const int r = g->rank;
    size_t off = 0;
    NCCL_TRY(g, ncclGroupStart());
    for (int j = 0; j < g->size; j++) {
        size_t c = a->counts[j];
        if (a->kind == COLL_ALL_GATHER) {
            char *dst = (char *)a->recvbuf + off * es;
            NCCL_TRY(g, ncclBroadcast(j == r ? a->sendbuf : dst, dst, c, dt, j, nc, s));
        } else {
            const char *src = (const char *)a->sendbuf + off * es;
            void *dst = j == r ? a->recvbuf : (void *)src;   /* recvbuf matters at root only */
            NCCL_TRY(g, ncclReduce(src, dst, c, dt, nccl_op(a->op), j, nc, s));
        }
        off += c;
    }
    NCCL_TRY(g, ncclGroupEnd());
    return PRT_OK;
}

/* The uneven all-to-all: one ncclSend/ncclRecv pair per peer in one NCCL
 * group at the offsets the counts give; zero counts post nothing, and the
 * rank's own block is a device copy. */
static prt_status nccl_a2av(prt_comm *g, const coll_args *a, cudaStream_t s)
{
    ncclComm_t nc = g->backend;
    ncclDataType_t dt = nccl_type(a->type);
    const size_t es = prt_dtype_size(a->type);
    const int P = g->size, r = g->rank;
    const char *sb = a->sendbuf;
    char *rb = a->recvbuf;
    size_t soff = 0, roff = 0, own_s = 0, own_r = 0;
    NCCL_TRY(g, ncclGroupStart());
    for (int j = 0; j < P; j++) {
        if (j == r) {
            own_s = soff;
            own_r = roff;
        } else {
            if (a->counts[j])
                NCCL_TRY(g, ncclSend(sb + soff * es, a->counts[j], dt, j, nc, s));
            if (a->rcounts[j])
                NCCL_TRY(g, ncclRecv(rb + roff * es, a->rcounts[j], dt, j, nc, s));
        }
        soff += a->counts[j];
        roff += a->rcounts[j];
    }
    NCCL_TRY(g, ncclGroupEnd());
    if (a->counts[r])
        CUDA_TRY(g, cudaMemcpyAsync(rb + own_r * es, sb + own_s * es, a->counts[r] * es,
                                    cudaMemcpyDeviceToDevice, s));
    return PRT_OK;
}

/* An in-place all-to-all cannot send from the buffer it receives into:
 * stage the input in the group's scratch first. */
static prt_status stage_alltoall(prt_comm *g, coll_args *a, prt_request *r, cudaStream_t s)
{
    size_t bytes = a->n * (size_t)g->size * prt_dtype_size(a->type);
    void *tmp = sch_scratch(r, bytes);
    if (!tmp)
        return prtc_error(PRT_ERR_NOMEM, g, "no device memory for in-place all-to-all");
    CUDA_TRY(g, cudaMemcpyAsync(tmp, a->sendbuf, bytes, cudaMemcpyDeviceToDevice, s));
    a->sendbuf = tmp;
    return PRT_OK;
}

/* Enqueue the native form of a on the communication stream. */
static prt_status enqueue_native(prt_comm *g, coll_args a, prt_request *holder)
{
    gpu_ctx *gc = gctx(g);
    cudaStream_t s = gc->comm;
    ncclComm_t nc = g->backend;
    ncclDataType_t dt = nccl_type(a.type);
    ncclRedOp_t op = nccl_op(a.op);
    void *rb = a.recvbuf;
    prt_status st;
    if ((st = after_compute(g)))
        return st;
    switch (a.kind) {
    case COLL_BROADCAST:
        NCCL_TRY(g, ncclBroadcast(rb, rb, a.n, dt, a.root, nc, s));
        return PRT_OK;
    case COLL_REDUCE:
        NCCL_TRY(g, ncclReduce(a.sendbuf, rb ? rb : (void *)a.sendbuf, a.n, dt, op, a.root, nc, s));
        return PRT_OK;
    case COLL_ALL_REDUCE:
        NCCL_TRY(g, ncclAllReduce(a.sendbuf, rb, a.n, dt, op, nc, s));
        return PRT_OK;
    case COLL_ALL_GATHER:
        if (a.uneven)
            return nccl_v(g, &a, s);
        NCCL_TRY(g, ncclAllGather(a.sendbuf, rb, a.n, dt, nc, s));
        return PRT_OK;
    case COLL_REDUCE_SCATTER:
        if (a.uneven)
            return nccl_v(g, &a, s);
        NCCL_TRY(g, ncclReduceScatter(a.sendbuf, rb, a.n, dt, op, nc, s));
        return PRT_OK;
    case COLL_ALL_TO_ALL:
        if (a.sendbuf == a.recvbuf && a.n && (st = stage_alltoall(g, &a, holder, s)))
            return st;
        return nccl_linear(g, &a, s);
    case COLL_ALL_TO_ALL_V:
        return nccl_a2av(g, &a, s);
    case COLL_SCATTER: case COLL_GATHER:
        return nccl_linear(g, &a, s);
    case COLL_SEND:
        NCCL_TRY(g, ncclSend(a.sendbuf, a.n, dt, a.root, nc, s));
        return PRT_OK;
    case COLL_RECV:
        NCCL_TRY(g, ncclRecv(rb, a.n, dt, a.root, nc, s));
        return PRT_OK;
    case COLL_BARRIER:
        /* A host barrier once this rank's queued communication is done. */
        CUDA_TRY(g, cudaStreamSynchronize(s));
        if (MPI_Barrier(g->mpi) != MPI_SUCCESS)
            return prtc_error(PRT_ERR_MPI, g, "MPI_Barrier failed");
        return PRT_OK;
    case COLL_KIND_COUNT:
        break;
    }
    return prtc_error(PRT_ERR_ARG, g, "unknown collective");
}

prt_status prtc_backend_native(prt_comm *g, const coll_args *a, prt_request **req)
{
    if (!g->backend)   /* only send/recv of a one-rank group come here */
        return prtc_error(PRT_ERR_ARG, g, "%s to oneself on a group of one rank: NCCL has no "
                          "communicator for it (a one-rank group moves nothing)",
                          a->kind == COLL_SEND ? "prt_send" : "prt_recv");
    /* A request also holds scratch (in-place all-to-all), so make one even
     * for a blocking call and free it at once: stream order keeps the
     * scratch alive until the copy has run. */
    prt_request *r = sch_new(g, a->kind, a->type, a->op);
    if (!r)
        return prtc_error(PRT_ERR_NOMEM, g, "out of memory for a request");
    prt_status s = enqueue_native(g, *a, r);
    if (s == PRT_OK)
        s = finish(g, req ? r : NULL);
    if (s != PRT_OK || !req) {
        sch_free(r);
        return s;
    }
    *req = r;
    return PRT_OK;
}

/* Enqueue the whole schedule: rounds of grouped sends and receives, each
 * followed by its local steps as kernels. */
prt_status prtc_backend_start(prt_request *r)
{
    prt_comm *g = r->g;
    cudaStream_t s = gctx(g)->comm;
    ncclComm_t nc = g->backend;
    ncclDataType_t dt = nccl_type(r->type);
    prt_status st;
    if ((st = after_compute(g)))
        return st;
    for (int i = 0; i < r->nrounds; i++) {
        int start = i ? r->round_end[i - 1] : 0, end = r->round_end[i];
        bool comm = false;
        for (int k = start; k < end && !comm; k++)
            comm = r->steps[k].kind == STEP_SEND || r->steps[k].kind == STEP_RECV;
        if (comm) {
            NCCL_TRY(g, ncclGroupStart());
            for (int k = start; k < end; k++) {
                const sched_step *p = &r->steps[k];
                if (p->kind == STEP_SEND)
                    NCCL_TRY(g, ncclSend(p->src, p->n, dt, p->peer, nc, s));
                else if (p->kind == STEP_RECV)
                    NCCL_TRY(g, ncclRecv(p->dst, p->n, dt, p->peer, nc, s));
            }
            NCCL_TRY(g, ncclGroupEnd());
        }
        for (int k = start; k < end; k++) {
            const sched_step *p = &r->steps[k];
            switch (p->kind) {
            case STEP_REDUCE:
                CUDA_TRY(g, prtc_gpu_reduce(p->dst, p->src, p->src2, p->n, r->type, r->op, s));
                break;
            case STEP_COPY:
                CUDA_TRY(g, cudaMemcpyAsync(p->dst, p->src, p->n * r->esize,
                                            cudaMemcpyDeviceToDevice, s));
                break;
            case STEP_SCALE:
                CUDA_TRY(g, prtc_gpu_scale(p->dst, p->n, r->type, g->size, s));
                break;
            case STEP_SEND: case STEP_RECV:
                break;
            }
        }
    }
    return finish(g, r);
}

/* Done when the request's event has fired; the compute stream then waits
 * for it, so kernels queued after prt_wait see the result. */
prt_status prtc_backend_progress(prt_request *r, bool *done)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)r->backend);
    if (e == cudaErrorNotReady) {
        *done = false;
        return PRT_OK;
    }
    *done = true;
    if (e != cudaSuccess)
        return cuda_fail(r->g, e, "collective");
    CUDA_TRY(r->g, cudaStreamWaitEvent(gctx(r->g)->compute, (cudaEvent_t)r->backend, 0));
    return PRT_OK;
}

void prtc_backend_request_free(prt_request *r)
{
    if (r->backend)
        cudaEventDestroy((cudaEvent_t)r->backend);
    r->backend = NULL;
}

/* ---- groups, deadlines and draining (the hooks stream_mpi.c has on CPU) ----
 * NCCL is what rendezvous mode imitates: one stream per rank already runs
 * everything in issue order, so there is no FIFO to count, report or drain. */

/* One ncclGroupStart/End around the calls, then one event per request,
 * recorded after the group, for prt_test/prt_wait. */
prt_status prtc_backend_group(prt_request *const *req, const coll_args *a, int n)
{
    if (n == 0)
        return PRT_OK;
    prt_comm *g0 = req[0]->g;
    cudaStream_t s = gctx(g0)->comm;
    prt_status st = after_compute(g0);
    if (st != PRT_OK)
        return st;
    NCCL_TRY(g0, ncclGroupStart());
    ncclResult_t e = ncclSuccess;
    for (int i = 0; i < n && e == ncclSuccess; i++) {
        prt_comm *g = req[i]->g;
        req[i]->native = true;
        req[i]->call = a[i];
        e = a[i].kind == COLL_SEND
            ? ncclSend(a[i].sendbuf, a[i].n, nccl_type(a[i].type), a[i].root, g->backend, s)
            : ncclRecv(a[i].recvbuf, a[i].n, nccl_type(a[i].type), a[i].root, g->backend, s);
    }
    ncclResult_t end = ncclGroupEnd();   /* closed even after a failed call */
    if (e != ncclSuccess || end != ncclSuccess)
        return nccl_fail(g0, e != ncclSuccess ? e : end, "grouped ncclSend/ncclRecv");
    for (int i = 0; i < n; i++)
        if ((st = finish(req[i]->g, req[i])) != PRT_OK)
            return st;
    return PRT_OK;
}

unsigned prtc_backend_completed(void) { return 0; }

prt_status prtc_backend_timeout(prt_request *r, double limit)
{
    return prtc_timeout_error(r, limit);
}

/* The host collective that follows reads host counts only; the stream
 * keeps its own order. */
prt_status prtc_backend_drain(prt_comm *g)
{
    (void)g;
    return PRT_OK;
}
