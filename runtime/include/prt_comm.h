/*
 * prt_comm.h: the communication half of planrt — the context, the groups of
 * a DP x TP x PP layout, collectives and point-to-point messages.
 *
 * A program starts with prt_init(), which initialises MPI (launched by
 * `mpirun` or `srun`), checks that the world size is dp * tp * cp * pp, and
 * builds one communicator per group this rank belongs to.  Ranks are laid
 * out as in Megatron-Core (DESIGN.md): tp varies fastest, then cp (context
 * parallelism), then dp, then pp,
 *
 *     rank = tp + TP * (cp + CP * (dp + DP * pp))
 *
 * so a TP group is TP consecutive ranks (inside a node), a CP group the
 * ranks with the same (tp, dp, pp), a DP group the ranks with the same
 * (tp, cp, pp), a PP group the ranks with the same (tp, cp, dp), and the
 * gradient group (dpcp: weights are replicated over dp and cp alike, so
 * gradients are reduced and ZeRO shards over both, as Megatron's
 * distributed optimizer over its "dp-cp" group) the ranks with the same
 * (tp, pp).  With cp 1 dpcp is the DP group.  Generated code reads like the
 * step it runs:
 *
 *     prt_all_reduce(c->tp, y, y, n, PRT_FP32, PRT_SUM);          // TP partial sums
 *     prt_reduce_scatter(c->dp, g, shard, n / dp, PRT_FP32, PRT_AVG);  // ZeRO
 *     prt_send(c->pp, act, n, PRT_FP32, c->coord.pp + 1, tag);      // next stage
 *
 * Buffers are host pointers in libplanrt.a (Open MPI) and device pointers in
 * libplanrt_cuda.a (NCCL, bootstrapped over MPI, one GPU per rank: the
 * node-local rank modulo the visible devices).  Counts are elements, never
 * bytes.  Every collective is
 * in-place when sendbuf == recvbuf (for the gathering/scattering ones: when
 * the rank's own block of the big buffer is the small buffer), and has an
 * `_async` twin that returns a request to prt_wait()/prt_test() — the
 * `async_op=True` of torch.distributed — so gradient reductions can overlap
 * the backward pass.  All ranks of a group must call collectives on that
 * group in the same order (MPI's and NCCL's rule).
 *
 * Algorithms: PRT_ALGO_NATIVE hands the operation to the backend (MPI's tuned
 * collectives, NCCL); PRT_ALGO_RING and PRT_ALGO_TREE run planrt's own
 * algorithms built on the backend's send/recv (ring reduce-scatter,
 * all-gather and all-reduce; binomial-tree broadcast and reduce;
 * recursive-doubling all-reduce).  The default comes from the environment
 * variable PLANRT_ALGO=native|ring|tree; prt_comm_set_algo() changes it for
 * the calls that follow on one communicator.  An operation that has no own
 * variant for the chosen algorithm runs natively (README: runtime-comm).
 *
 * Errors: every function returns prt_status; the reason, with the rank and
 * the call, is in prt_comm_last_error().  Nothing is ever silently truncated.
 */
#ifndef PRT_COMM_H
#define PRT_COMM_H

#ifdef __cplusplus
extern "C" {
#endif

/* Reduction operators. ORDER PRT_REDOP: keep prt_redop_name() in step. */
typedef enum {
    PRT_SUM,  /* element-wise sum */
    PRT_AVG,  /* sum divided by the group size (integers: truncated) */
    PRT_MAX,  /* element-wise maximum */
    PRT_MIN,  /* element-wise minimum */
} prt_redop;

/* Who moves the bytes. ORDER PRT_ALGO: keep prt_algo_name() in step. */
typedef enum {
    PRT_ALGO_DEFAULT = -1, /* the communicator's current choice */
    PRT_ALGO_NATIVE  = 0,  /* the backend's own collective (MPI, NCCL) */
    PRT_ALGO_RING,         /* planrt's ring (bandwidth-optimal) */
    PRT_ALGO_TREE,         /* planrt's binomial tree / recursive doubling */
} prt_algo;

typedef struct prt_comm    prt_comm;     /* one group: world, DP, TP or PP */
typedef struct prt_request prt_request;  /* an operation in flight */

/* A layout (group sizes) or a rank's coordinates in it. */
typedef struct {
    int dp; /* data-parallel */
    int tp; /* tensor-parallel, fastest-varying */
    int pp; /* pipeline-parallel, slowest-varying */
    int cp; /* context-parallel, between tp and dp in the rank order; a size of 0
               (a layout written before it existed) means 1 */
} prt_layout;

/* What a rank knows about itself and its groups. Read-only for users. */
typedef struct prt_ctx {
    int rank;           /* world rank, 0 .. size-1 */
    int size;           /* world size = dp * tp * cp * pp */
    int local_rank;     /* rank among the ranks on this node (GPU: this mod the visible ones) */
    int local_size;     /* ranks on this node */
    prt_layout layout;  /* group sizes */
    prt_layout coord;   /* this rank's coordinates: coord.tp is its TP rank */
    prt_comm  *world;   /* every rank */
    prt_comm  *dp;      /* ranks with this (tp, cp, pp): data-parallel replicas */
    prt_comm  *tp;      /* ranks with this (cp, dp, pp): tensor-parallel sums */
    prt_comm  *pp;      /* ranks with this (tp, cp, dp): pipeline send/recv */
    prt_comm  *cp;      /* ranks with this (tp, dp, pp), ordered by cp: the sequence's
                           chunks (ring attention's KV ring, the all-to-all forms) */
    prt_comm  *dpcp;    /* ranks with this (tp, pp), ordered by cp + CP * dp: gradient
                           reductions and ZeRO shards; the DP group itself when cp is 1 */
    prt_comm  *embed;   /* the first and the last stage's ranks with this (tp, cp, dp): the
                           tied-embedding gradient sum (Megatron's embedding group);
                           NULL on the stages between them */
    prt_comm  *ep;      /* expert parallelism (prt_ep_init; NULL before): the ep ranks of
                           this rank's DP group with the same d / ep, ordered by d % ep:
                           MoE dispatch and combine */
    prt_comm  *edp;     /* the dp / ep ranks of the DP group with the same d % ep (the same
                           experts), ordered by d / ep: expert gradients, expert ZeRO */
    int        device;  /* CUDA device used (libplanrt_cuda.a), else -1 */
    void      *impl;    /* backend state */
} prt_ctx;

/* ---- context ----------------------------------------------------------- */

/* Initialise MPI (if not yet) and build the groups of a dp x tp x pp layout;
 * PRT_ERR_ARG with a clear message when the world size is not dp*tp*pp. */
prt_status prt_init(int *argc, char ***argv, int dp, int tp, int pp, prt_ctx **out);
/* The same for any layout, context parallelism included (L.cp 0 means 1):
 * the world size must be dp*tp*cp*pp. */
prt_status prt_init_layout(int *argc, char ***argv, prt_layout L, prt_ctx **out);
/* A rank's coordinates in layout L by the rank order above (L.cp 0 means 1). */
prt_layout prt_layout_coord(prt_layout L, int rank);
/* Free the groups and finalise MPI when prt_init initialised it;
 * prt_finalize(NULL) after a failed prt_init only finalises MPI. */
void       prt_finalize(prt_ctx *c);

/* Expert parallelism (issue 17; Megatron-Core's contiguous layout): inside
 * each DP group, DP rank d is rank d % ep of EP group d / ep, which holds
 * experts [r E/ep, (r+1) E/ep) on its rank r; its expert-DP group is the
 * dp / ep DP ranks with the same d % ep. Builds c->ep and c->edp;
 * PRT_ERR_ARG when ep does not divide dp or the groups exist already.
 * Collective over the world. */
prt_status prt_ep_init(prt_ctx *c, int ep);
/* This rank's EP rank (the rule prt_ep_init builds the groups by; also for
 * a context without groups, as --dry-run's). */
static inline int prt_ep_rank(const prt_ctx *c, int ep) { return c->coord.dp % ep; }
/* The context-parallel degree of a context (1 without CP). */
static inline int prt_cp_size(const prt_ctx *c) { return c->layout.cp > 1 ? c->layout.cp : 1; }
/* Its rank in its expert-DP group. */
static inline int prt_edp_rank(const prt_ctx *c, int ep) { return c->coord.dp / ep; }

/* The rank's place in a group and the group's size. */
int        prt_comm_rank(const prt_comm *g);
int        prt_comm_size(const prt_comm *g);
/* World rank of rank r of group g (for logs and tests). */
int        prt_comm_world_rank(const prt_comm *g, int r);
/* Choose the algorithm for the following calls on g; returns the previous. */
prt_algo   prt_comm_set_algo(prt_comm *g, prt_algo a);
prt_algo   prt_comm_algo(const prt_comm *g);

/* Why the last call on this thread failed ("" after success). */
const char *prt_comm_last_error(void);
const char *prt_algo_name(prt_algo a);   /* "native", "ring", "tree" */
const char *prt_redop_name(prt_redop op); /* "sum", "avg", "max", "min" */
/* Parse "native|ring|tree"; PRT_ERR_ARG otherwise. */
prt_status  prt_algo_parse(const char *s, prt_algo *out);
/* The backend's name: "mpi" or "nccl". */
const char *prt_comm_backend(void);

/* Buffers the backend can send: host memory on CPU, device memory on GPU. */
void      *prt_comm_alloc(size_t bytes);
void       prt_comm_free(void *p);
/* Copy between host memory and a prt_comm_alloc buffer. */
prt_status prt_comm_upload(void *dst, const void *host, size_t bytes);
prt_status prt_comm_download(void *host, const void *src, size_t bytes);

/* GPU: the stream compute kernels run on (default: the legacy default
 * stream).  Collectives wait for it, and it waits for them, through events.
 * No effect on CPU. */
void       prt_comm_set_compute_stream(prt_ctx *c, void *stream);

/* Seconds a wait may last without progress before PRT_ERR_TIMEOUT (a dead
 * peer must not hang the others); 0 waits forever.  prt_init reads
 * PLANRT_TIMEOUT_S (in rendezvous mode, when it is unset, PLANRT_DEADLOCK_S
 * or 60 s).  Returns the previous value. */
double     prt_comm_set_timeout(double seconds);

/* How point-to-point messages behave.  ORDER PRT_P2P: keep
 * prt_p2p_mode_name() in step.  prt_init reads PLANRT_P2P=buffered|
 * rendezvous (anything else is refused); it changes the MPI backend only,
 * and NCCL always behaves as rendezvous (prt_comm_p2p_mode() says so).
 *
 * Rendezvous is NCCL's rules on Open MPI, so that CPU runs find the
 * deadlocks a GPU run would hit: a send completes only once the peer's
 * receive has matched it (MPI_Issend); there are no tags — messages
 * between two ranks of a group match in issue order, and a receive that
 * gets another tag or count than it named fails (PRT_ERR_MPI, "NCCL ...
 * would have matched these two out of order"); and each rank runs its
 * operations as one stream: every call (collectives on any group and
 * point-to-point, blocking or _async) starts only once everything it
 * issued before has completed, except the calls of one group, which start
 * together.  A wait that sees nothing complete for the deadline prints the
 * rank's pending operations on stderr and returns PRT_ERR_TIMEOUT saying it
 * is a deadlock under NCCL's rules. */
typedef enum {
    PRT_P2P_BUFFERED,    /* MPI's: sends buffered, matched by tag (the default) */
    PRT_P2P_RENDEZVOUS,  /* NCCL's: sends end when matched, issue order, one stream */
} prt_p2p_mode;
prt_p2p_mode prt_comm_p2p_mode(void);
const char  *prt_p2p_mode_name(prt_p2p_mode m);   /* "buffered", "rendezvous" */

/* ---- requests ---------------------------------------------------------- */

/* Block until r completes (or the PLANRT_TIMEOUT_S deadline passes), then
 * free it. r == NULL is a no-op. */
prt_status prt_wait(prt_request *r);
/* Advance r; *done = true once complete (then r is freed: do not wait). */
prt_status prt_test(prt_request *r, bool *done);
/* Wait for n requests, in order; returns the first failure. */
prt_status prt_wait_all(prt_request **r, int n);

/* ---- collectives -------------------------------------------------------
 * Notation: P = group size, r = this rank, n = count.  "Per-rank" counts
 * are what NCCL calls recvcount/sendcount: the total is n * P, so
 * divisibility never arises; prt_shard() splits a flat buffer unevenly and
 * the `v` variants take one count per rank. */

/* root's n elements to every rank, in buf. */
prt_status prt_broadcast(prt_comm *g, void *buf, size_t n, prt_dtype t, int root);
/* root's sendbuf (n*P) split: block i to rank i's recvbuf (n). */
prt_status prt_scatter(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                       prt_dtype t, int root);
/* every rank's sendbuf (n) into block r of root's recvbuf (n*P). */
prt_status prt_gather(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                      prt_dtype t, int root);
/* op over every rank's sendbuf (n) into root's recvbuf (n). */
prt_status prt_reduce(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                      prt_dtype t, prt_redop op, int root);
/* every rank's sendbuf (n) into block i of everyone's recvbuf (n*P). */
prt_status prt_all_gather(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                          prt_dtype t);
/* op over everyone's sendbuf (n*P); block r of the result into recvbuf (n). */
prt_status prt_reduce_scatter(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                              prt_dtype t, prt_redop op);
/* op over everyone's sendbuf (n) into everyone's recvbuf (n). */
prt_status prt_all_reduce(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                          prt_dtype t, prt_redop op);
/* block j of sendbuf (n*P) goes to rank j, arriving as block r of its recvbuf. */
prt_status prt_all_to_all(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                          prt_dtype t);
prt_status prt_barrier(prt_comm *g);

/* Uneven blocks: counts[i] elements for rank i, packed without gaps. */
prt_status prt_all_gather_v(prt_comm *g, const void *sendbuf, void *recvbuf,
                            const size_t *counts, prt_dtype t);
prt_status prt_reduce_scatter_v(prt_comm *g, const void *sendbuf, void *recvbuf,
                                const size_t *counts, prt_dtype t, prt_redop op);
/* Uneven all-to-all (MoE dispatch and combine, issue 17): sendcounts[j]
 * elements, packed in rank order in sendbuf, go to rank j and arrive as
 * rank r's block of its recvbuf, which holds recvcounts[i] elements from
 * each rank i packed in rank order. Counts go first: recvcounts are the
 * peers' sendcounts, which prt_all_to_all_counts exchanges (host arrays).
 * Zero counts are allowed; the buffers may not overlap (no in-place form).
 * MPI_Alltoallv on the CPU, grouped ncclSend/ncclRecv on NCCL. */
prt_status prt_all_to_all_v(prt_comm *g, const void *sendbuf, const size_t *sendcounts,
                            void *recvbuf, const size_t *recvcounts, prt_dtype t);
/* recvcounts[i] = rank i's sendcounts[r] (host arrays of P, both builds:
 * an MPI all-to-all on the group's host communicator). */
prt_status prt_all_to_all_counts(prt_comm *g, const size_t *sendcounts, size_t *recvcounts);
/* Rank r's block of n elements split over P ranks: the first n % P ranks get
 * one more; *off is the block's first element. */
void       prt_shard(size_t n, int P, int r, size_t *off, size_t *count);

/* The same, asynchronous: *req receives the handle for prt_wait/prt_test.
 * Buffers must stay untouched until the request completes.  On a group of
 * one rank (a local copy, done before the call returns) *req is NULL,
 * which prt_wait, prt_test and prt_wait_all take as complete. */
prt_status prt_broadcast_async(prt_comm *g, void *buf, size_t n, prt_dtype t, int root,
                               prt_request **req);
prt_status prt_scatter_async(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                             prt_dtype t, int root, prt_request **req);
prt_status prt_gather_async(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                            prt_dtype t, int root, prt_request **req);
prt_status prt_reduce_async(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                            prt_dtype t, prt_redop op, int root, prt_request **req);
prt_status prt_all_gather_async(prt_comm *g, const void *sendbuf, void *recvbuf,
                                size_t n, prt_dtype t, prt_request **req);
prt_status prt_reduce_scatter_async(prt_comm *g, const void *sendbuf, void *recvbuf,
                                    size_t n, prt_dtype t, prt_redop op,
                                    prt_request **req);
prt_status prt_all_reduce_async(prt_comm *g, const void *sendbuf, void *recvbuf,
                                size_t n, prt_dtype t, prt_redop op, prt_request **req);
prt_status prt_all_to_all_async(prt_comm *g, const void *sendbuf, void *recvbuf,
                                size_t n, prt_dtype t, prt_request **req);
prt_status prt_all_to_all_v_async(prt_comm *g, const void *sendbuf,
                                  const size_t *sendcounts, void *recvbuf,
                                  const size_t *recvcounts, prt_dtype t, prt_request **req);
prt_status prt_barrier_async(prt_comm *g, prt_request **req);
prt_status prt_all_gather_v_async(prt_comm *g, const void *sendbuf, void *recvbuf,
                                  const size_t *counts, prt_dtype t, prt_request **req);
prt_status prt_reduce_scatter_v_async(prt_comm *g, const void *sendbuf, void *recvbuf,
                                      const size_t *counts, prt_dtype t, prt_redop op,
                                      prt_request **req);

/* ---- point to point (pipeline stages) ----------------------------------
 * peer is a rank of g; tag >= 0 tells messages between the same pair apart
 * under MPI (buffered mode).  Messages between a pair with the same tag
 * arrive in the order they were sent.  NCCL (and rendezvous mode) have no
 * tags: there the order of issue must match on both sides, and the tag is
 * only checked. */
prt_status prt_send(prt_comm *g, const void *buf, size_t n, prt_dtype t, int peer, int tag);
prt_status prt_recv(prt_comm *g, void *buf, size_t n, prt_dtype t, int peer, int tag);
prt_status prt_send_async(prt_comm *g, const void *buf, size_t n, prt_dtype t, int peer,
                          int tag, prt_request **req);
prt_status prt_recv_async(prt_comm *g, void *buf, size_t n, prt_dtype t, int peer,
                          int tag, prt_request **req);

/* Groups, as NCCL's ncclGroupStart/ncclGroupEnd: the point-to-point calls
 * between them are posted together at the outermost prt_group_end, so a
 * send and a receive that both ranks of a pair issue send-first complete
 * (Megatron's send_forward_recv_backward, torch's batch_isend_irecv).
 * prt_send_async/prt_recv_async inside a group return their request at
 * once; a blocking prt_send/prt_recv inside a group is only enqueued, and
 * prt_group_end waits for it (so its buffer may not be touched before).
 * Groups nest; only point-to-point calls may be grouped (PRT_ERR_ARG
 * otherwise).  MPI buffered mode posts the calls one by one at
 * prt_group_end, rendezvous mode makes them one entry of the rank's
 * stream, NCCL one ncclGroupStart/End with an event per request. */
prt_status prt_group_start(void);
prt_status prt_group_end(void);

#ifdef __cplusplus
}
#endif

#endif /* PRT_COMM_H */
