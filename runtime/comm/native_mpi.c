/*
 * native_mpi.c: the CPU backend — collectives handed to Open MPI, and the
 * executor that runs planc's own schedules over MPI_Isend / MPI_Irecv.
 *
 * "native" is a thin layer: one MPI call per operation (MPI_Allreduce,
 * MPI_Reduce_scatter_block, ... or their MPI_I* twins for _async), plus
 * what MPI lacks: fp16 and bf16 (2-byte datatypes with user-defined
 * reductions), PRT_AVG (a sum, then a division on the host), and NCCL's
 * in-place convention for reduce-scatter (MPI puts the block at the start of
 * the buffer; we move it to the rank's own block).  So native all-reduce
 * costs what MPI_Allreduce costs, which planrt-bench checks against raw MPI.
 *
 * Own schedules run round by round: post the round's sends and receives,
 * MPI_Testall them from prt_test/prt_wait, then do the round's local steps
 * (reductions) and post the next round.  Errors come back as PRT_ERR_MPI
 * with MPI's message (the groups use MPI_ERRORS_RETURN).
 *
 * PLANRT_P2P=rendezvous changes three things here, so that MPI hides no
 * deadlock NCCL would hit: sends are MPI_Issend (complete only once
 * matched), a native receive takes MPI_ANY_TAG and checks on arrival that
 * the tag and the count are the ones it named (NCCL has no tags: messages
 * between two ranks match in issue order), and every request goes through
 * the rank's FIFO (stream_mpi.c) instead of starting at once.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

static MPI_Datatype dt_fp16 = MPI_DATATYPE_NULL, dt_bf16 = MPI_DATATYPE_NULL;
static MPI_Op half_ops[4];   /* ORDER PRT_REDOP: user reductions for fp16/bf16 */

/* MPI calls the user reduction for fp16/bf16 buffers: inout = op(inout, in). */
static void half_apply(void *in, void *inout, int *len, MPI_Datatype *dt, prt_redop op)
{
    prtc_reduce(inout, inout, in, (size_t)*len, *dt == dt_bf16 ? PRT_BF16 : PRT_FP16, op);
}
static void half_sum(void *in, void *io, int *n, MPI_Datatype *dt) { half_apply(in, io, n, dt, PRT_SUM); }
static void half_max(void *in, void *io, int *n, MPI_Datatype *dt) { half_apply(in, io, n, dt, PRT_MAX); }
static void half_min(void *in, void *io, int *n, MPI_Datatype *dt) { half_apply(in, io, n, dt, PRT_MIN); }

static MPI_Datatype mpi_type(prt_dtype t)
{
    switch (t) {
    case PRT_FP32:  return MPI_FLOAT;
    case PRT_FP16:  return dt_fp16;
    case PRT_BF16:  return dt_bf16;
    case PRT_INT32: return MPI_INT32_T;
    case PRT_INT64: return MPI_INT64_T;
    }
    return MPI_DATATYPE_NULL;
}

/* PRT_AVG is a sum here; the division follows the call. */
static MPI_Op mpi_op(prt_redop op, prt_dtype t)
{
    if (t == PRT_FP16 || t == PRT_BF16)
        return half_ops[op == PRT_AVG ? PRT_SUM : op];
    switch (op) {
    case PRT_SUM: case PRT_AVG: return MPI_SUM;
    case PRT_MAX:               return MPI_MAX;
    case PRT_MIN:               return MPI_MIN;
    }
    return MPI_OP_NULL;
}

prt_status prtc_backend_init(prt_ctx *c)
{
    (void)c;
    if (dt_fp16 != MPI_DATATYPE_NULL)
        return PRT_OK;
    MPI_Type_contiguous(1, MPI_UINT16_T, &dt_fp16);
    MPI_Type_commit(&dt_fp16);
    MPI_Type_contiguous(1, MPI_UINT16_T, &dt_bf16);
    MPI_Type_commit(&dt_bf16);
    MPI_Op_create(half_sum, 1, &half_ops[PRT_SUM]);
    MPI_Op_create(half_max, 1, &half_ops[PRT_MAX]);
    MPI_Op_create(half_min, 1, &half_ops[PRT_MIN]);
    half_ops[PRT_AVG] = half_ops[PRT_SUM];
    return PRT_OK;
}

void prtc_backend_finalize(prt_ctx *c) { (void)c; }

prt_status prtc_backend_comm_init(prt_comm *g)
{
    MPI_Comm_set_errhandler(g->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(g->own, MPI_ERRORS_RETURN);
    return PRT_OK;
}

void prtc_backend_comm_free(prt_comm *g) { (void)g; }

void *prtc_backend_alloc(size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}

void prtc_backend_free(void *p) { free(p); }

/* Host memory: scratch is plain memory, no stream to order it on. */
void *prtc_backend_scratch_alloc(prt_comm *g, size_t bytes)
{
    (void)g;
    return prtc_backend_alloc(bytes);
}

void prtc_backend_scratch_free(prt_comm *g, void *p)
{
    (void)g;
    prtc_backend_free(p);
}

/* MPI's blocking calls block: with a deadline they must be waited for in
 * prt_wait, which can give up. */
bool prtc_backend_blocking_enqueues(void) { return false; }

prt_status prtc_backend_block(prt_request *r) { return prt_wait(r); }

/* Host memory is ordered by program order: a copy is a memcpy. */
prt_status prtc_backend_copy(prt_comm *g, void *dst, const void *src, size_t bytes)
{
    (void)g;
    memcpy(dst, src, bytes);
    return PRT_OK;
}

prt_status prt_comm_upload(void *dst, const void *host, size_t bytes)
{
    memcpy(dst, host, bytes);
    return PRT_OK;
}

prt_status prt_comm_download(void *host, const void *src, size_t bytes)
{
    memcpy(host, src, bytes);
    return PRT_OK;
}

const char *prt_comm_backend(void) { return "mpi"; }

/* Host memory is ordered by program order: nothing to do. */
void prt_comm_set_compute_stream(prt_ctx *c, void *stream)
{
    (void)c;
    (void)stream;
}

/* Turn an MPI error code into PRT_ERR_MPI with MPI's own words. */
static prt_status mpi_fail(const prt_comm *g, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return prtc_error(PRT_ERR_MPI, g, "%s: %s", what, msg);
}

/* ---- native collectives ------------------------------------------------ */

/* What to do on the host once MPI is done: divide for PRT_AVG, move the
 * reduce-scatter block to its in-place position. */
typedef struct {
    void  *scale;      size_t scale_n;
    void  *move_dst;   const void *move_src; size_t move_n;
} post_work;

static void post_run(const post_work *w, prt_comm *g, prt_dtype t)
{
    if (w->move_n && w->move_dst != w->move_src)
        memmove(w->move_dst, w->move_src, w->move_n * prt_dtype_size(t));
    if (w->scale_n)
        prtc_scale(w->scale, w->scale_n, t, g->size);
}

/* int counts and displacements for the v variants, checked against INT_MAX. */
static int *int_counts(const prt_comm *g, const size_t *counts, int **displs)
{
    int P = g->size;
    int *c = malloc(2 * (size_t)P * sizeof(int));
    if (!c)
        return NULL;
    size_t off = 0;
    for (int i = 0; i < P; i++) {
        if (counts[i] > INT_MAX || off > INT_MAX) {
            free(c);
            return NULL;
        }
        c[i] = (int)counts[i];
        c[P + i] = (int)off;
        off += counts[i];
    }
    *displs = c + P;
    return c;
}

/* MPI_Alltoallv's four int arrays in one allocation (MPI reads them until
 * completion, so they live in the request's aux): send counts and
 * displacements, then receive counts and displacements. Counts were checked
 * against INT_MAX in coll.c. */
static int *a2av_arrays(const prt_comm *g, const coll_args *a)
{
    const int P = g->size;
    int *v = malloc(4 * (size_t)P * sizeof *v);
    if (!v)
        return NULL;
    for (int half = 0; half < 2; half++) {
        const size_t *cnt = half ? a->rcounts : a->counts;
        int *c = v + 2 * half * P, *d = c + P, off = 0;
        for (int i = 0; i < P; i++) {
            c[i] = (int)cnt[i];
            d[i] = off;
            off += c[i];
        }
    }
    return v;
}

/* The blocking MPI function or its MPI_I twin with the request last. */
#define CALL(block, nonblock, ...) (mr ? nonblock(__VA_ARGS__, mr) : block(__VA_ARGS__))

/* One MPI call for the operation a; blocking when mr is NULL.  *aux gets
 * memory MPI reads until completion, *post the host work to do after. */
static int native_call(prt_comm *g, const coll_args *a, MPI_Request *mr, void **aux,
                       post_work *post)
{
    const MPI_Datatype dt = mpi_type(a->type);
    const MPI_Op op = mpi_op(a->op, a->type);
    const size_t es = prt_dtype_size(a->type), n = a->n;
    const int P = g->size, r = g->rank, in = (int)n;
    const bool avg = a->op == PRT_AVG && P > 1;
    const char *rbuf_r = (const char *)a->recvbuf + (size_t)r * n * es; /* my block */
    const void *sb = a->sendbuf;
    void *rb = a->recvbuf;
    MPI_Comm c = g->mpi;

    switch (a->kind) {
    case COLL_BROADCAST:
        return CALL(MPI_Bcast, MPI_Ibcast, rb, in, dt, a->root, c);
    case COLL_SCATTER:
        if (r == a->root && rb == (const char *)sb + (size_t)r * n * es)
            rb = MPI_IN_PLACE;
        return CALL(MPI_Scatter, MPI_Iscatter, sb, in, dt, rb, in, dt, a->root, c);
    case COLL_GATHER:
        if (r == a->root && sb == rbuf_r)
            sb = MPI_IN_PLACE;
        return CALL(MPI_Gather, MPI_Igather, sb, in, dt, rb, in, dt, a->root, c);
    case COLL_REDUCE:
        if (r == a->root && sb == rb)
            sb = MPI_IN_PLACE;
        if (avg && r == a->root)
            *post = (post_work){ .scale = rb, .scale_n = n };
        return CALL(MPI_Reduce, MPI_Ireduce, sb, rb, in, dt, op, a->root, c);
    case COLL_ALL_REDUCE:
        if (sb == rb)
            sb = MPI_IN_PLACE;
        if (avg)
            *post = (post_work){ .scale = rb, .scale_n = n };
        return CALL(MPI_Allreduce, MPI_Iallreduce, sb, rb, in, dt, op, c);
    case COLL_ALL_TO_ALL:
        if (sb == rb)
            sb = MPI_IN_PLACE;
        return CALL(MPI_Alltoall, MPI_Ialltoall, sb, in, dt, rb, in, dt, c);
    case COLL_ALL_TO_ALL_V: {
        int *v = a2av_arrays(g, a);
        if (!v)
            return MPI_ERR_NO_MEM;
        *aux = v;
        return CALL(MPI_Alltoallv, MPI_Ialltoallv, sb, v, v + P, dt, rb, v + 2 * P, v + 3 * P,
                    dt, c);
    }
    case COLL_BARRIER:
        return mr ? MPI_Ibarrier(c, mr) : MPI_Barrier(c);
    case COLL_SEND:
        if (mr && prtc_rendezvous())   /* complete only once matched, as NCCL's */
            return MPI_Issend(sb, in, dt, a->root, a->tag, c, mr);
        return mr ? MPI_Isend(sb, in, dt, a->root, a->tag, c, mr)
                  : MPI_Send(sb, in, dt, a->root, a->tag, c);
    case COLL_RECV:
        if (mr && prtc_rendezvous())   /* no tags: the next message from root */
            return MPI_Irecv(rb, in, dt, a->root, MPI_ANY_TAG, c, mr);
        return mr ? MPI_Irecv(rb, in, dt, a->root, a->tag, c, mr)
                  : MPI_Recv(rb, in, dt, a->root, a->tag, c, MPI_STATUS_IGNORE);
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
        break;
    case COLL_KIND_COUNT:
        return MPI_ERR_OTHER;
    }

    /* The block collectives: per-rank counts, even or not. */
    int *cnt = NULL, *displs = NULL;
    if (a->uneven) {
        if (!(cnt = int_counts(g, a->counts, &displs)))
            return MPI_ERR_COUNT;
        *aux = cnt;   /* MPI reads the arrays until completion */
    }
    size_t mine_off = a->uneven ? (size_t)displs[r] : (size_t)r * n;
    size_t mine_n = a->uneven ? a->counts[r] : n;
    if (a->kind == COLL_ALL_GATHER) {
        if (sb == (const char *)rb + mine_off * es)
            sb = MPI_IN_PLACE;
        return a->uneven ? CALL(MPI_Allgatherv, MPI_Iallgatherv, sb, (int)mine_n, dt, rb, cnt, displs, dt, c)
                         : CALL(MPI_Allgather, MPI_Iallgather, sb, in, dt, rb, in, dt, c);
    }
    /* Reduce-scatter.  NCCL's in-place (recvbuf is my block of sendbuf)
     * becomes MPI's (whole buffer in, my block out at its start), then a
     * move to where the caller expects it. */
    void *out = rb;
    if (rb == (const char *)sb + mine_off * es) {
        out = (void *)sb;
        sb = MPI_IN_PLACE;
        *post = (post_work){ .move_dst = rb, .move_src = out, .move_n = mine_n };
    }
    if (avg) {
        post->scale = rb;
        post->scale_n = mine_n;
    }
    return a->uneven ? CALL(MPI_Reduce_scatter, MPI_Ireduce_scatter, sb, out, cnt, dt, op, c)
                     : CALL(MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, sb, out, in, dt, op, c);
}

static prt_status native_fail(const prt_comm *g, int rc)
{
    return rc == MPI_ERR_COUNT
        ? prtc_error(PRT_ERR_ARG, g, "counts exceed the 2^31-1 elements of one MPI call")
        : mpi_fail(g, rc, "native collective");
}

/* Post the native call a into r: round 0 is the MPI request followed by
 * the host post-work. */
prt_status prtc_mpi_arm(prt_request *r, const coll_args *a)
{
    prt_comm *g = r->g;
    post_work post = { 0 };
    if (!r->mreq) {
        if (!(r->mreq = malloc(sizeof *r->mreq)))
            return prtc_error(PRT_ERR_NOMEM, g, "out of memory for a request");
        r->mreq_cap = 1;
    }
    r->native = true;
    r->call = *a;
    int rc = native_call(g, a, &r->mreq[0], &r->aux, &post);
    if (rc != MPI_SUCCESS)
        return native_fail(g, rc);
    r->nmreq = 1;
    r->posted = true;
    sch_copy(r, post.move_dst, post.move_src, post.move_n);
    sch_scale(r, post.scale, post.scale_n);
    sch_end_round(r);
    if (r->failed_alloc) {  /* the request would be leaked in flight: wait it out */
        MPI_Wait(&r->mreq[0], MPI_STATUS_IGNORE);
        post_run(&post, g, a->type);
        r->nmreq = 0;
        r->nrounds = 0;
    }
    return PRT_OK;
}

/* Rendezvous mode: the call waits in the FIFO with its arguments (the
 * counts copied: an _async caller may free its arrays) until it starts. */
static prt_status queue_native(prt_comm *g, const coll_args *a, prt_request **req)
{
    prt_request *r = sch_new(g, a->kind, a->type, a->op);
    if (!r)
        return prtc_error(PRT_ERR_NOMEM, g, "out of memory for a request");
    r->native = true;
    r->call = *a;
    int P = g->size, arrays = (a->counts != NULL) + (a->rcounts != NULL);
    if (arrays && !(r->held = malloc((size_t)arrays * (size_t)P * sizeof *r->held))) {
        sch_free(r);
        return prtc_error(PRT_ERR_NOMEM, g, "out of memory for a request");
    }
    size_t *h = r->held;
    if (a->counts) {
        memcpy(h, a->counts, (size_t)P * sizeof *h);
        r->call.counts = h;
        h += P;
    }
    if (a->rcounts) {
        memcpy(h, a->rcounts, (size_t)P * sizeof *h);
        r->call.rcounts = h;
    }
    prt_request *one[1] = { r };
    prt_status s = prtc_fifo_push(one, 1);
    if (s != PRT_OK) {   /* not queued: still ours */
        sch_free(r);
        return s;
    }
    *req = r;
    return PRT_OK;
}

/* Native collective: blocking when req is NULL, else a request. */
prt_status prtc_backend_native(prt_comm *g, const coll_args *a, prt_request **req)
{
    if (prtc_rendezvous()) {
        prt_request *r = NULL;
        prt_status s = queue_native(g, a, &r);
        if (s != PRT_OK || !req)
            return s != PRT_OK ? s : prt_wait(r);
        *req = r;
        return PRT_OK;
    }
    post_work post = { 0 };
    void *aux = NULL;
    if (!req) {
        int rc = native_call(g, a, NULL, &aux, &post);
        free(aux);
        if (rc != MPI_SUCCESS)
            return native_fail(g, rc);
        post_run(&post, g, a->type);
        return PRT_OK;
    }
    prt_request *r = sch_new(g, a->kind, a->type, a->op);
    if (!r)
        return prtc_error(PRT_ERR_NOMEM, g, "out of memory for a request");
    prt_status s = prtc_mpi_arm(r, a);
    if (s != PRT_OK) {
        sch_free(r);
        return s;
    }
    *req = r;
    return PRT_OK;
}

/* ---- the schedule executor -------------------------------------------- */

/* Post the sends and receives of round r->cur. */
static prt_status post_round(prt_request *r)
{
    int start = r->cur ? r->round_end[r->cur - 1] : 0, end = r->round_end[r->cur];
    if (r->mreq_cap < end - start) {
        MPI_Request *m = realloc(r->mreq, (size_t)(end - start) * sizeof *m);
        if (!m)
            return prtc_error(PRT_ERR_NOMEM, r->g, "out of memory for MPI requests");
        r->mreq = m;
        r->mreq_cap = end - start;
    }
    MPI_Datatype dt = mpi_type(r->type);
    const bool rendezvous = prtc_rendezvous();   /* a round is an NCCL group: synchronous sends */
    r->nmreq = 0;
    for (int i = start; i < end; i++) {
        const sched_step *s = &r->steps[i];
        if (s->kind != STEP_SEND && s->kind != STEP_RECV)
            continue;
        if (s->n > INT_MAX)
            return prtc_error(PRT_ERR_ARG, r->g, "a block of %zu elements exceeds the 2^31-1 "
                              "of one MPI message", s->n);
        MPI_Request *m = &r->mreq[r->nmreq++];
        int rc = s->kind == STEP_RECV ? MPI_Irecv(s->dst, (int)s->n, dt, s->peer, r->tag, r->g->own, m)
               : rendezvous ? MPI_Issend(s->src, (int)s->n, dt, s->peer, r->tag, r->g->own, m)
                            : MPI_Isend(s->src, (int)s->n, dt, s->peer, r->tag, r->g->own, m);
        if (rc != MPI_SUCCESS)
            return mpi_fail(r->g, rc, s->kind == STEP_SEND ? "MPI_Isend" : "MPI_Irecv");
    }
    r->posted = true;
    return PRT_OK;
}

/* The local steps of round i, in order. */
static void run_locals(prt_request *r, int i)
{
    int start = i ? r->round_end[i - 1] : 0, end = r->round_end[i];
    for (int k = start; k < end; k++) {
        const sched_step *s = &r->steps[k];
        switch (s->kind) {
        case STEP_REDUCE: prtc_reduce(s->dst, s->src, s->src2, s->n, r->type, r->op); break;
        case STEP_COPY:   memmove(s->dst, s->src, s->n * r->esize); break;
        case STEP_SCALE:  prtc_scale(s->dst, s->n, r->type, r->g->size); break;
        case STEP_SEND: case STEP_RECV: break;
        }
    }
}

prt_status prtc_backend_start(prt_request *r)
{
    if (prtc_rendezvous()) {
        prt_request *one[1] = { r };
        return prtc_fifo_push(one, 1);
    }
    bool done;
    return prtc_mpi_exec(r, &done);
}

/* Rendezvous mode: a native receive took MPI_ANY_TAG; what arrived must be
 * what the caller named, else NCCL (which matches in issue order, without
 * tags) would have paired these two messages differently. */
static prt_status check_arrival(prt_request *r, int rc, const MPI_Status *st)
{
    const coll_args *a = &r->call;
    int got = -1, cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    bool truncated = cls == MPI_ERR_TRUNCATE;
    if (rc == MPI_SUCCESS)
        MPI_Get_count(st, mpi_type(r->type), &got);
    if (rc != MPI_SUCCESS && !truncated)
        return mpi_fail(r->g, rc, "MPI_Test");
    if (!truncated && st->MPI_TAG == a->tag && got == (int)a->n)
        return PRT_OK;
    char count[32];
    if (truncated)
        snprintf(count, sizeof count, "more than %zu", a->n);
    else
        snprintf(count, sizeof count, "%d", got);
    return prtc_error(PRT_ERR_MPI, r->g,
                      "prt_recv from rank %d (tag %d, %zu elements) got the next message from "
                      "it: tag %d, %s elements; NCCL, which has no tags, would have matched "
                      "these two out of order%s (PLANRT_P2P=rendezvous)\n  hint: issue the "
                      "sends and receives between two ranks in the same order on both",
                      a->root, a->tag, a->n, st->MPI_TAG, count,
                      truncated ? " and truncated the message" : "");
}

/* Advance r as far as its messages allow without blocking. */
prt_status prtc_mpi_exec(prt_request *r, bool *done)
{
    for (;;) {
        if (!r->posted) {
            if (r->cur >= r->nrounds) {
                *done = true;
                return PRT_OK;
            }
            prt_status s = post_round(r);
            if (s != PRT_OK)
                return s;
        }
        if (r->nmreq > 0) {
            int flag = 0, rc;
            MPI_Status st;
            bool checked = r->native && r->kind == COLL_RECV && prtc_rendezvous();
            if (checked)
                rc = MPI_Test(&r->mreq[0], &flag, &st);
            else
                rc = MPI_Testall(r->nmreq, r->mreq, &flag, MPI_STATUSES_IGNORE);
            if (checked && (flag || rc != MPI_SUCCESS)) {
                prt_status s = check_arrival(r, rc, &st);
                if (s != PRT_OK)
                    return s;
            } else if (rc != MPI_SUCCESS)
                return mpi_fail(r->g, rc, "MPI_Testall");
            if (!flag) {
                *done = false;
                return PRT_OK;
            }
            r->nmreq = 0;
        }
        if (r->cur < r->nrounds)
            run_locals(r, r->cur);
        r->cur++;
        r->posted = false;
    }
}

prt_status prtc_backend_progress(prt_request *r, bool *done)
{
    return prtc_rendezvous() ? prtc_fifo_progress(r, done) : prtc_mpi_exec(r, done);
}
