/*
 * comm_internal.h: what the files of runtime/comm share, and the seam
 * between the generic part and a backend.  Not installed, not included by
 * users (they include planrt.h).
 *
 * The generic part (context.c, coll.c, algos.c, sched.c) validates calls,
 * picks an algorithm and describes planc's own algorithms as *schedules*: a
 * list of rounds, each a set of sends and receives that may run at once,
 * followed by local steps (reduce a received block, copy, scale).  A backend
 * runs them:
 *
 *   CPU (native_mpi.c, reduce_cpu.c):  rounds are MPI_Isend/MPI_Irecv, advanced
 *        round by round by prt_test/prt_wait; local steps are C loops.
 *   GPU (runtime/cuda/comm_nccl.c, comm_kernels.cu): every round is enqueued at
 *        once on the NCCL stream as ncclSend/ncclRecv groups and kernels;
 *        completion is a CUDA event.
 *
 * "native" operations go straight to the backend (MPI collectives, NCCL).
 */
#ifndef PRT_COMM_INTERNAL_H
#define PRT_COMM_INTERNAL_H

#include <mpi.h>
#include "planrt.h"

/* The collectives, for dispatch and messages. ORDER COLL_KIND. */
typedef enum {
    COLL_BROADCAST,      /* root's buf to all */
    COLL_SCATTER,        /* root's blocks to each */
    COLL_GATHER,         /* each block to root */
    COLL_REDUCE,         /* op to root */
    COLL_ALL_GATHER,     /* blocks to all (counts[] per rank) */
    COLL_REDUCE_SCATTER, /* op, block r to rank r (counts[] per rank) */
    COLL_ALL_REDUCE,     /* op to all */
    COLL_ALL_TO_ALL,     /* block j to rank j */
    COLL_ALL_TO_ALL_V,   /* uneven blocks: counts[j] to rank j, rcounts[i] from i */
    COLL_BARRIER,        /* nothing moves */
    COLL_SEND,           /* point to point */
    COLL_RECV,           /* point to point */
    COLL_KIND_COUNT
} coll_kind;

/* One call, as the user made it. */
typedef struct {
    coll_kind    kind;
    const void  *sendbuf;
    void        *recvbuf;
    size_t       n;       /* elements (per rank for the block collectives) */
    const size_t *counts; /* per-rank counts (all-gather, reduce-scatter; all-to-all-v:
                             what goes to each rank), else NULL */
    const size_t *rcounts; /* all-to-all-v: what comes from each rank */
    bool         uneven;  /* counts[] came from the user (v variant) */
    prt_dtype    type;
    prt_redop    op;
    int          root;    /* or peer for send/recv */
    int          tag;     /* send/recv */
} coll_args;

struct prt_comm {
    prt_ctx  *ctx;
    MPI_Comm  mpi;          /* native collectives and user send/recv */
    MPI_Comm  own;          /* messages of planc's own algorithms */
    int       rank, size;
    int      *world_ranks;  /* (size) world rank of each group rank */
    prt_algo  algo;         /* default for calls on this group */
    unsigned  seq;          /* own collectives started: message tags */
    void     *scratch;      /* reused work buffer of own algorithms */
    size_t    scratch_bytes;
    bool      scratch_busy; /* held by a request in flight */
    void     *backend;      /* ncclComm_t on GPU; NULL for a group of one rank,
                               whose collectives never reach the backend */
};

/* One step of a schedule. ORDER STEP_KIND. */
typedef enum {
    STEP_SEND,   /* send n elements of src to peer */
    STEP_RECV,   /* receive n elements from peer into dst */
    STEP_REDUCE, /* dst[i] = op(src[i], src2[i]); dst may be src */
    STEP_COPY,   /* dst[i] = src[i] */
    STEP_SCALE,  /* dst[i] /= group size (PRT_AVG) */
} step_kind;

typedef struct {
    step_kind   kind;
    int         peer;   /* group rank (send/recv) */
    void       *dst;
    const void *src;
    const void *src2;   /* second operand of STEP_REDUCE */
    size_t      n;      /* elements */
} sched_step;

struct prt_request {
    prt_comm   *g;
    coll_kind   kind;
    prt_dtype   type;
    prt_redop   op;
    size_t      esize;      /* bytes per element */
    int         tag;        /* on g->own */
    sched_step *steps;
    int         nsteps, steps_cap;
    int        *round_end;  /* round i is steps [round_end[i-1], round_end[i]) */
    int         nrounds, rounds_cap;
    int         cur;        /* round in progress */
    bool        posted;     /* its messages are posted */
    bool        failed_alloc;
    MPI_Request *mreq;      /* outstanding MPI requests of round cur */
    int         nmreq, mreq_cap;
    void       *scratch;    /* work memory of this request */
    bool        scratch_owned; /* ours to free (else g->scratch) */
    void       *aux;        /* malloc'd arguments MPI keeps until completion */
    void       *backend;    /* cudaEvent_t on GPU */
    coll_args   call;       /* the call as made (for messages; its pointers to counts are
                               the caller's and are not read after the call returns) */
    bool        native;     /* a backend call, not an own schedule */
    bool        abandoned;  /* given up at a deadline: freed by prt_finalize, not by a wait */
    /* rendezvous mode (stream_mpi.c): NCCL's one stream per rank */
    bool        queued;     /* in the rank's FIFO, not yet complete */
    bool        started;    /* its MPI calls are posted */
    bool        complete;   /* done; the caller's wait or test frees it */
    unsigned    entry;      /* FIFO entry: the requests of one group share it */
    size_t     *held;       /* a queued native call's counts, copied (call.counts points here) */
    prt_status  failed;     /* why it ended without completing (PRT_OK otherwise) */
    char       *failed_msg; /* the message that went with it */
};

/* ---- context.c ---- */
prt_status prtc_error(prt_status s, const prt_comm *g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void       prtc_clear_error(void);
double     prtc_timeout_s(void);          /* PLANRT_TIMEOUT_S, 0 = none */
/* Collective over comm at start-up: every rank learns whether any failed,
 * and all return the first failing rank's status and message (s and
 * prt_comm_last_error() on each rank), so that a failure on one rank (rank
 * 0 not getting the NCCL id, a rank without a GPU) stops every rank with one
 * message instead of leaving the others in the next collective for good. */
prt_status prtc_agree(MPI_Comm comm, prt_status s);
/* PLANRT_P2P=rendezvous: the MPI backend runs point-to-point as NCCL does
 * (stream_mpi.c). */
bool       prtc_rendezvous(void);
/* "world", "dp", "tp", "pp", "embed", "ep", "edp" or "group", for messages. */
const char *prtc_group_name(const prt_comm *g);

/* ---- coll.c ---- */
const char *prtc_coll_name(coll_kind k);  /* "prt_all_reduce", ... */

/* ---- sched.c: building and running schedules ---- */
prt_request *sch_new(prt_comm *g, coll_kind k, prt_dtype t, prt_redop op);
void         sch_free(prt_request *r);
void         prtc_abandon(prt_request *r);  /* given up: freed at prt_finalize */
void         prtc_free_abandoned(void);   /* requests given up at a timeout */
/* The generic timeout error for a wait on r that lasted `limit` seconds. */
prt_status   prtc_timeout_error(prt_request *r, double limit);
void        *sch_scratch(prt_request *r, size_t bytes);
void         sch_send(prt_request *r, int peer, const void *src, size_t n);
void         sch_recv(prt_request *r, int peer, void *dst, size_t n);
void         sch_reduce(prt_request *r, void *dst, const void *a, const void *b, size_t n);
void         sch_copy(prt_request *r, void *dst, const void *src, size_t n);
void         sch_scale(prt_request *r, void *dst, size_t n);
void         sch_end_round(prt_request *r);
/* Element i of buf, as a byte pointer. */
static inline void *sch_at(const prt_request *r, const void *buf, size_t i)
{
    return (char *)buf + i * r->esize;
}

/* ---- algos.c: planc's own algorithms; false if none for (kind, algo) ---- */
bool       prtc_algo_exists(coll_kind k, prt_algo a);
prt_status prtc_algo_build(prt_request *r, const coll_args *a, prt_algo algo);

/* ---- the backend (native_mpi.c on CPU, runtime/cuda/comm_nccl.c on GPU) ---- */
prt_status prtc_backend_init(prt_ctx *c);
void       prtc_backend_finalize(prt_ctx *c);
prt_status prtc_backend_comm_init(prt_comm *g);
void       prtc_backend_comm_free(prt_comm *g);
/* A native collective; blocking when req is NULL, else *req is filled. */
prt_status prtc_backend_native(prt_comm *g, const coll_args *a, prt_request **req);
/* Start a built schedule; prtc_backend_progress advances it. */
prt_status prtc_backend_start(prt_request *r);
prt_status prtc_backend_progress(prt_request *r, bool *done);
void       prtc_backend_request_free(prt_request *r);
/* The point-to-point calls of one prt_group_start/end (a[i] into the
 * request req[i], made by sch_new), posted together: MPI buffered posts
 * each, MPI rendezvous makes them one FIFO entry, NCCL one ncclGroup. */
prt_status prtc_backend_group(prt_request *const *req, const coll_args *a, int n);
/* Operations completed so far: a wait that sees the count grow is making
 * progress, so its deadline starts again (0 forever where not counted). */
unsigned   prtc_backend_completed(void);
/* A wait on r made no progress for `limit` seconds: the error to return
 * (rendezvous mode also prints the rank's pending operations). */
prt_status prtc_backend_timeout(prt_request *r, double limit);
/* Finish every queued operation before a host-side MPI call that the
 * FIFO does not see (prt_all_to_all_counts); PRT_OK at once elsewhere. */
prt_status prtc_backend_drain(prt_comm *g);
void      *prtc_backend_alloc(size_t bytes);
void       prtc_backend_free(void *p);
/* Work memory of own algorithms (sch_scratch), touched only by g's
 * communication work: on GPU allocated and freed in the order of the
 * communication stream from a pool that keeps its memory, so no
 * cudaMalloc/cudaFree (each a device-wide sync) runs inside a step. */
void      *prtc_backend_scratch_alloc(prt_comm *g, size_t bytes);
void       prtc_backend_scratch_free(prt_comm *g, void *p);
/* Does a blocking call only enqueue its work?  True on NCCL: later kernels
 * wait for it through stream order and the host never does, so a blocking
 * call never takes the wait loop and the deadline applies to prt_wait on
 * requests alone.  False on MPI: a blocking call with a deadline is its
 * non-blocking form plus prt_wait, so a dead peer is reported. */
bool       prtc_backend_blocking_enqueues(void);
/* End a blocking call on the started request r (and free r): MPI waits for
 * it (prt_wait, deadline and all); NCCL orders the compute stream after it,
 * the host going on at once. */
prt_status prtc_backend_block(prt_request *r);
/* dst = src, bytes of the backend's memory (host on CPU, device on GPU),
 * in order with the compute work: a one-rank group's collectives. */
prt_status prtc_backend_copy(prt_comm *g, void *dst, const void *src, size_t bytes);

/* ---- the CPU backend: native_mpi.c and its rendezvous FIFO, stream_mpi.c ---- */
/* Post the native call a into r (whose round 0 is then its MPI request and
 * the host work after it). */
prt_status prtc_mpi_arm(prt_request *r, const coll_args *a);
/* Advance r as far as its messages allow, outside any FIFO. */
prt_status prtc_mpi_exec(prt_request *r, bool *done);
/* Rendezvous mode: queue req[0..n) as one FIFO entry and start what can
 * start; advance the FIFO until r is complete or nothing can move. */
prt_status prtc_fifo_push(prt_request *const *req, int n);
prt_status prtc_fifo_progress(prt_request *r, bool *done);

/* ---- reduce_cpu.c: local arithmetic on the host ---- */
void     prtc_reduce(void *dst, const void *a, const void *b, size_t n, prt_dtype t,
                     prt_redop op);
void     prtc_scale(void *buf, size_t n, prt_dtype t, int P);
float    prtc_half_to_float(uint16_t h);
uint16_t prtc_float_to_half(float x);
float    prtc_bf16_to_float(uint16_t h);
uint16_t prtc_float_to_bf16(float x);

/* ---- helpers shared by both backends ---- */
/* Does the buffer range [p, p+bytes) overlap [q, q+qbytes)? */
static inline bool ranges_overlap(const void *p, size_t bytes, const void *q, size_t qbytes)
{
    const char *a = p, *b = q;
    return bytes && qbytes && a < b + qbytes && b < a + bytes;
}

#endif /* PRT_COMM_INTERNAL_H */
