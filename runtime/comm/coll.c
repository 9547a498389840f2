/*
 * coll.c: the public collectives — check the call, choose who runs it, run
 * it now or hand back a request.
 *
 * Every operation goes through run(): validate() rejects what would
 * otherwise be truncated or undefined (a root out of range, a count MPI
 * cannot carry, buffers that overlap without being in place) with a message
 * in prt_comm_last_error(); then the group's algorithm decides: an own
 * algorithm (algos.c) becomes a schedule that the backend runs, anything
 * else is the backend's native call.  A blocking call is the asynchronous
 * one ended by prtc_backend_block() (MPI: prt_wait; NCCL: the compute
 * stream waits for it, the host does not), except a native call on a
 * backend whose blocking calls only enqueue (NCCL, whatever the deadline)
 * or without a deadline (PLANRT_TIMEOUT_S unset), which calls the blocking
 * MPI/NCCL function directly so that "native" costs exactly what the
 * library costs.
 *
 * A group of one rank (TP 1, PP 1, DP 1 all make them) moves nothing: its
 * collectives are local copies, or nothing at all in place — no
 * communicator call, no event, no wait — and their _async forms hand back
 * a NULL request, complete already (prt_wait(NULL) is a no-op).  Only
 * send/recv to oneself still go to the backend, which matches them (MPI).
 *
 * In rendezvous mode (PLANRT_P2P=rendezvous) a blocking call always goes
 * through a request, so that it takes its place in the rank's FIFO.
 *
 * Groups (prt_group_start/end, NCCL's ncclGroupStart/End): a
 * point-to-point call between them is checked at once and given its
 * request, and all of them go to the backend together at the outermost
 * prt_group_end, which then waits for the blocking ones.
 *
 * This file is identical for both backends; it never touches MPI or CUDA.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "comm_internal.h"

/* ORDER COLL_KIND */
static const char *const coll_name[COLL_KIND_COUNT] = {
    "prt_broadcast", "prt_scatter", "prt_gather", "prt_reduce", "prt_all_gather",
    "prt_reduce_scatter", "prt_all_reduce", "prt_all_to_all", "prt_all_to_all_v", "prt_barrier",
    "prt_send", "prt_recv",
};

const char *prtc_coll_name(coll_kind k)
{
    return (unsigned)k < COLL_KIND_COUNT ? coll_name[k] : "?";
}

static bool has_root(coll_kind k)
{
    return k == COLL_BROADCAST || k == COLL_SCATTER || k == COLL_GATHER || k == COLL_REDUCE;
}

static bool reduces(coll_kind k)
{
    return k == COLL_REDUCE || k == COLL_REDUCE_SCATTER || k == COLL_ALL_REDUCE;
}

/* Bytes of the send and receive buffers and the offset of this rank's block
 * in the big one, so that aliasing can be checked. */
typedef struct {
    size_t send, recv;    /* bytes this rank reads / writes (0: unused) */
    size_t mine;          /* offset of my block in the big buffer */
    bool   big_is_recv;   /* all-gather/gather: recvbuf is the big buffer */
    bool   blocky;        /* in place means "my block", not "same pointer" */
} extent;

static extent extents(const prt_comm *g, const coll_args *a, size_t total)
{
    const size_t es = prt_dtype_size(a->type), n = a->n;
    const int r = g->rank;
    const bool root = has_root(a->kind) && r == a->root;
    size_t mine = a->uneven ? 0 : (size_t)r * n;
    for (int i = 0; a->uneven && i < r; i++)
        mine += a->counts[i];
    size_t myn = a->uneven ? a->counts[r] : n;
    switch (a->kind) {
    case COLL_SCATTER:
        return (extent){ root ? total * es : 0, n * es, mine * es, false, true };
    case COLL_GATHER:
        return (extent){ n * es, root ? total * es : 0, mine * es, true, true };
    case COLL_ALL_GATHER:
        return (extent){ myn * es, total * es, mine * es, true, true };
    case COLL_REDUCE_SCATTER:
        return (extent){ total * es, myn * es, mine * es, false, true };
    case COLL_REDUCE:
        return (extent){ n * es, root ? n * es : 0, 0, false, false };
    case COLL_ALL_REDUCE: case COLL_ALL_TO_ALL:
        return (extent){ total * es, total * es, 0, false, false };
    default:
        return (extent){ 0, 0, 0, false, false };
    }
}

/* Sum of P counts into *total, false on overflow of the bytes or of the
 * int displacements MPI takes. */
static bool count_total(const size_t *counts, int P, size_t es, size_t *total)
{
    *total = 0;
    for (int i = 0; i < P; i++) {
        if (counts[i] > SIZE_MAX / es - *total || *total + counts[i] > INT_MAX)
            return false;
        *total += counts[i];
    }
    return true;
}

/* The all-to-all-v's own rules: both count arrays, totals an int, and
 * buffers that do not overlap at all (rows cannot be exchanged in place). */
static prt_status validate_a2av(const prt_comm *g, const coll_args *a, size_t *total_out)
{
    const char *who = coll_name[a->kind];
    const size_t es = prt_dtype_size(a->type);
    size_t sent, got;
    if (!a->counts || !a->rcounts)
        return prtc_error(PRT_ERR_ARG, g, "%s: sendcounts or recvcounts is NULL", who);
    if (!count_total(a->counts, g->size, es, &sent) || !count_total(a->rcounts, g->size, es, &got))
        return prtc_error(PRT_ERR_ARG, g, "%s: counts exceed the 2^31-1 elements of one "
                          "MPI/NCCL call\n  hint: split the rows", who);
    if ((sent && !a->sendbuf) || (got && !a->recvbuf))
        return prtc_error(PRT_ERR_ARG, g, "%s: a buffer is NULL", who);
    if (ranges_overlap(a->sendbuf, sent * es, a->recvbuf, got * es))
        return prtc_error(PRT_ERR_ARG, g, "%s: send and receive buffers overlap (it has no "
                          "in-place form)", who);
    *total_out = sent;
    return PRT_OK;
}

/* Reject what cannot run correctly, saying why. */
static prt_status validate(const prt_comm *g, const coll_args *a, size_t *total_out)
{
    const char *who = coll_name[a->kind];
    if (a->kind == COLL_ALL_TO_ALL_V && (unsigned)a->type <= PRT_INT64)
        return validate_a2av(g, a, total_out);
    if ((unsigned)a->type > PRT_INT64)
        return prtc_error(PRT_ERR_ARG, g, "%s: unknown element type %d", who, (int)a->type);
    if (reduces(a->kind) && (unsigned)a->op > PRT_MIN)
        return prtc_error(PRT_ERR_ARG, g, "%s: unknown reduction %d", who, (int)a->op);
    if (has_root(a->kind) && (a->root < 0 || a->root >= g->size))
        return prtc_error(PRT_ERR_ARG, g, "%s: root %d is not a rank of this group of %d",
                          who, a->root, g->size);
    if (a->kind == COLL_SEND || a->kind == COLL_RECV) {
        if (a->root < 0 || a->root >= g->size)
            return prtc_error(PRT_ERR_ARG, g, "%s: peer %d is not a rank of this group of %d",
                              who, a->root, g->size);
        if (a->tag < 0 || a->tag > 32767)
            return prtc_error(PRT_ERR_ARG, g, "%s: tag %d outside 0..32767", who, a->tag);
    }
    /* Totals, with overflow checked: a count times the group size times the
     * element size must fit in memory, and each MPI message in an int. */
    size_t total = a->n, es = prt_dtype_size(a->type);
    if (a->uneven) {
        if (!a->counts)
            return prtc_error(PRT_ERR_ARG, g, "%s: counts is NULL", who);
        total = 0;
        for (int i = 0; i < g->size; i++) {
            if (a->counts[i] > SIZE_MAX / es - total)
                return prtc_error(PRT_ERR_ARG, g, "%s: counts overflow", who);
            total += a->counts[i];
        }
    } else if (a->kind == COLL_SCATTER || a->kind == COLL_GATHER ||
               a->kind == COLL_ALL_GATHER || a->kind == COLL_REDUCE_SCATTER ||
               a->kind == COLL_ALL_TO_ALL) {
        if (a->n > SIZE_MAX / es / (size_t)g->size)
            return prtc_error(PRT_ERR_ARG, g, "%s: %zu x %d ranks overflows", who, a->n,
                              g->size);
        total = a->n * (size_t)g->size;
    }
    if (a->n > INT_MAX)
        return prtc_error(PRT_ERR_ARG, g, "%s: count %zu exceeds the 2^31-1 elements one "
                          "MPI/NCCL call carries\n  hint: split the buffer", who, a->n);
    /* Aliasing: either exactly in place or not overlapping at all. */
    extent e = extents(g, a, total);
    const char *in_place_rule = e.blocky ? "the rank's own block of the big buffer" : "the same pointer";
    if (e.send && e.recv && ranges_overlap(a->sendbuf, e.send, a->recvbuf, e.recv)) {
        const char *big = e.big_is_recv ? a->recvbuf : a->sendbuf;
        const char *small = e.big_is_recv ? a->sendbuf : a->recvbuf;
        bool in_place = e.blocky ? small == big + e.mine : a->sendbuf == a->recvbuf;
        if (!in_place)
            return prtc_error(PRT_ERR_ARG, g, "%s: send and receive buffers overlap but are "
                              "not in place (in place means %s)", who, in_place_rule);
    }
    if ((e.send && !a->sendbuf) || (e.recv && !a->recvbuf) ||
        ((a->kind == COLL_BROADCAST || a->kind == COLL_RECV) && a->n && !a->recvbuf) ||
        (a->kind == COLL_SEND && a->n && !a->sendbuf))
        return prtc_error(PRT_ERR_ARG, g, "%s: a buffer is NULL", who);
    *total_out = total;
    return PRT_OK;
}

/* A collective of a one-rank group: this rank's block to its place, which
 * is nothing in place; PRT_AVG over one rank is the identity.  a is valid
 * (so the all-to-all-v counts are there). */
static prt_status run_alone(prt_comm *g, const coll_args *a)
{
    switch (a->kind) {
    case COLL_BROADCAST: case COLL_BARRIER:
        return PRT_OK;   /* in place by nature; nothing moves */
    case COLL_ALL_TO_ALL_V:
        if (a->counts[0] != a->rcounts[0])
            return prtc_error(PRT_ERR_ARG, g, "%s: rank 0 sends %zu elements to itself but "
                              "expects %zu", coll_name[a->kind], a->counts[0], a->rcounts[0]);
        break;
    default:
        break;
    }
    /* n is the one block (the v variants: counts[0]); every kind's source
     * and destination of it start at sendbuf and recvbuf, block 0. */
    if (!a->n || a->sendbuf == a->recvbuf)
        return PRT_OK;
    return prtc_backend_copy(g, a->recvbuf, a->sendbuf, a->n * prt_dtype_size(a->type));
}

/* ---- groups ------------------------------------------------------------ */

/* The calls of the open group, in issue order (one thread drives a rank's
 * communication, as one host thread drives NCCL's). */
static struct {
    int          depth;      /* prt_group_start calls not yet ended */
    coll_args   *args;
    prt_request **req;
    bool        *blocking;   /* prt_send/prt_recv: prt_group_end waits for it */
    int          n, cap;
} G;

prt_status prt_group_start(void)
{
    prtc_clear_error();
    G.depth++;
    return PRT_OK;
}

/* Append a checked point-to-point call to the open group. */
static prt_status group_add(prt_comm *g, const coll_args *a, prt_request **req)
{
    if (G.n == G.cap) {
        int cap = G.cap ? 2 * G.cap : 8;
        coll_args *na = realloc(G.args, (size_t)cap * sizeof *na);
        if (na) G.args = na;
        prt_request **nr = na ? realloc(G.req, (size_t)cap * sizeof *nr) : NULL;
        if (nr) G.req = nr;
        bool *nb = nr ? realloc(G.blocking, (size_t)cap * sizeof *nb) : NULL;
        if (!nb)
            return prtc_error(PRT_ERR_NOMEM, g, "%s: out of memory for the group",
                              coll_name[a->kind]);
        G.blocking = nb;
        G.cap = cap;
    }
    prt_request *r = sch_new(g, a->kind, a->type, a->op);
    if (!r)
        return prtc_error(PRT_ERR_NOMEM, g, "%s: out of memory for a request", coll_name[a->kind]);
    r->call = *a;
    G.args[G.n] = *a;
    G.req[G.n] = r;
    G.blocking[G.n] = !req;
    G.n++;
    if (req)
        *req = r;
    return PRT_OK;
}

prt_status prt_group_end(void)
{
    prtc_clear_error();
    if (G.depth == 0)
        return prtc_error(PRT_ERR_ARG, NULL, "prt_group_end without prt_group_start");
    if (--G.depth > 0)
        return PRT_OK;
    int n = G.n;
    G.n = 0;
    prt_status first = prtc_backend_group(G.req, G.args, n);
    for (int i = 0; i < n; i++)
        if (G.blocking[i]) {
            prt_status s = prt_wait(G.req[i]);
            if (first == PRT_OK)
                first = s;
        }
    return first;
}

/* Check, choose native or own, run; blocking when req is NULL. */
static prt_status run(prt_comm *g, coll_args a, prt_request **req)
{
    prtc_clear_error();
    if (req)
        *req = NULL;
    if (!g)
        return prtc_error(PRT_ERR_ARG, NULL, "%s: the group is NULL", coll_name[a.kind]);
    size_t total;
    prt_status s = validate(g, &a, &total);
    if (s != PRT_OK)
        return s;
    if (G.depth > 0) {
        if (a.kind != COLL_SEND && a.kind != COLL_RECV)
            return prtc_error(PRT_ERR_ARG, g, "%s inside prt_group_start/end: only "
                              "prt_send and prt_recv may be grouped\n  hint: end the group "
                              "first", coll_name[a.kind]);
        return group_add(g, &a, req);
    }
    if (g->size == 1 && a.kind != COLL_SEND && a.kind != COLL_RECV)
        return run_alone(g, &a);   /* *req stays NULL: complete */
    prt_request *r = NULL;
    if (!prtc_algo_exists(a.kind, g->algo)) {
        if (!req && !prtc_rendezvous() &&
            (prtc_timeout_s() <= 0 || prtc_backend_blocking_enqueues()))
            return prtc_backend_native(g, &a, NULL);
        s = prtc_backend_native(g, &a, &r);
    } else {
        size_t *even = NULL;   /* per-rank counts of the even block collectives */
        if (!a.counts && (a.kind == COLL_ALL_GATHER || a.kind == COLL_REDUCE_SCATTER)) {
            if (!(even = malloc((size_t)g->size * sizeof *even)))
                return prtc_error(PRT_ERR_NOMEM, g, "out of memory");
            for (int i = 0; i < g->size; i++)
                even[i] = a.n;
            a.counts = even;
        }
        r = sch_new(g, a.kind, a.type, a.op);
        if (r) {
            r->call = a;
            r->call.counts = r->call.rcounts = NULL;   /* the caller's; not kept */
        }
        s = r ? prtc_algo_build(r, &a, g->algo) : PRT_ERR_NOMEM;
        free(even);
        if (s == PRT_OK)
            s = prtc_backend_start(r);
        if (s != PRT_OK) {
            sch_free(r);
            if (!prt_comm_last_error()[0])
                prtc_error(s, g, "%s: %s", coll_name[a.kind], prt_status_str(s));
            return s;
        }
    }
    if (s != PRT_OK)
        return s;
    if (!req)
        return prtc_backend_block(r);
    *req = r;
    return PRT_OK;
}

/* ---- the API: each operation, blocking and asynchronous --------------- */

#define ARGS(k, ...) ((coll_args){ .kind = (k), __VA_ARGS__ })

prt_status prt_broadcast_async(prt_comm *g, void *buf, size_t n, prt_dtype t, int root,
                               prt_request **req)
{
    return run(g, ARGS(COLL_BROADCAST, .sendbuf = buf, .recvbuf = buf, .n = n, .type = t,
                       .root = root), req);
}

prt_status prt_scatter_async(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                             prt_dtype t, int root, prt_request **req)
{
    return run(g, ARGS(COLL_SCATTER, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .type = t, .root = root), req);
}

prt_status prt_gather_async(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                            prt_dtype t, int root, prt_request **req)
{
    return run(g, ARGS(COLL_GATHER, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .type = t, .root = root), req);
}

prt_status prt_reduce_async(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                            prt_dtype t, prt_redop op, int root, prt_request **req)
{
    return run(g, ARGS(COLL_REDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .type = t, .op = op, .root = root), req);
}

prt_status prt_all_gather_async(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                                prt_dtype t, prt_request **req)
{
    return run(g, ARGS(COLL_ALL_GATHER, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .type = t), req);
}

prt_status prt_reduce_scatter_async(prt_comm *g, const void *sendbuf, void *recvbuf,
                                    size_t n, prt_dtype t, prt_redop op, prt_request **req)
{
    return run(g, ARGS(COLL_REDUCE_SCATTER, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .type = t, .op = op), req);
}

prt_status prt_all_reduce_async(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                                prt_dtype t, prt_redop op, prt_request **req)
{
    return run(g, ARGS(COLL_ALL_REDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .type = t, .op = op), req);
}

prt_status prt_all_to_all_async(prt_comm *g, const void *sendbuf, void *recvbuf, size_t n,
                                prt_dtype t, prt_request **req)
{
    return run(g, ARGS(COLL_ALL_TO_ALL, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .type = t), req);
}

prt_status prt_all_to_all_v_async(prt_comm *g, const void *sendbuf,
                                  const size_t *sendcounts, void *recvbuf,
                                  const size_t *recvcounts, prt_dtype t, prt_request **req)
{
    size_t n = g && sendcounts ? sendcounts[g->rank] : 0;
    return run(g, ARGS(COLL_ALL_TO_ALL_V, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .counts = sendcounts, .rcounts = recvcounts, .uneven = true,
                       .type = t), req);
}

prt_status prt_barrier_async(prt_comm *g, prt_request **req)
{
    return run(g, ARGS(COLL_BARRIER, .type = PRT_INT32), req);
}

/* For the v variants n is this rank's count (what MPI sends from it). */
prt_status prt_all_gather_v_async(prt_comm *g, const void *sendbuf, void *recvbuf,
                                  const size_t *counts, prt_dtype t, prt_request **req)
{
    size_t n = g && counts ? counts[g->rank] : 0;
    return run(g, ARGS(COLL_ALL_GATHER, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .counts = counts, .uneven = true, .type = t), req);
}

prt_status prt_reduce_scatter_v_async(prt_comm *g, const void *sendbuf, void *recvbuf,
                                      const size_t *counts, prt_dtype t, prt_redop op,
                                      prt_request **req)
{
    size_t n = g && counts ? counts[g->rank] : 0;
    return run(g, ARGS(COLL_REDUCE_SCATTER, .sendbuf = sendbuf, .recvbuf = recvbuf, .n = n,
                       .counts = counts, .uneven = true, .type = t, .op = op), req);
}

prt_status prt_send_async(prt_comm *g, const void *buf, size_t n, prt_dtype t, int peer,
                          int tag, prt_request **req)
{
    return run(g, ARGS(COLL_SEND, .sendbuf = buf, .n = n, .type = t, .root = peer,
                       .tag = tag), req);
}

prt_status prt_recv_async(prt_comm *g, void *buf, size_t n, prt_dtype t, int peer, int tag,
                          prt_request **req)
{
    return run(g, ARGS(COLL_RECV, .recvbuf = buf, .n = n, .type = t, .root = peer,
                       .tag = tag), req);
}

/* Blocking forms: the same call with no request. */
prt_status prt_broadcast(prt_comm *g, void *buf, size_t n, prt_dtype t, int root)
{
    return prt_broadcast_async(g, buf, n, t, root, NULL);
}
prt_status prt_scatter(prt_comm *g, const void *s, void *r, size_t n, prt_dtype t, int root)
{
    return prt_scatter_async(g, s, r, n, t, root, NULL);
}
prt_status prt_gather(prt_comm *g, const void *s, void *r, size_t n, prt_dtype t, int root)
{
    return prt_gather_async(g, s, r, n, t, root, NULL);
}
prt_status prt_reduce(prt_comm *g, const void *s, void *r, size_t n, prt_dtype t,
                      prt_redop op, int root)
{
    return prt_reduce_async(g, s, r, n, t, op, root, NULL);
}
prt_status prt_all_gather(prt_comm *g, const void *s, void *r, size_t n, prt_dtype t)
{
    return prt_all_gather_async(g, s, r, n, t, NULL);
}
prt_status prt_reduce_scatter(prt_comm *g, const void *s, void *r, size_t n, prt_dtype t,
                              prt_redop op)
{
    return prt_reduce_scatter_async(g, s, r, n, t, op, NULL);
}
prt_status prt_all_reduce(prt_comm *g, const void *s, void *r, size_t n, prt_dtype t,
                          prt_redop op)
{
    return prt_all_reduce_async(g, s, r, n, t, op, NULL);
}
prt_status prt_all_to_all(prt_comm *g, const void *s, void *r, size_t n, prt_dtype t)
{
    return prt_all_to_all_async(g, s, r, n, t, NULL);
}
prt_status prt_all_to_all_v(prt_comm *g, const void *s, const size_t *sendcounts, void *r,
                            const size_t *recvcounts, prt_dtype t)
{
    return prt_all_to_all_v_async(g, s, sendcounts, r, recvcounts, t, NULL);
}
prt_status prt_barrier(prt_comm *g) { return prt_barrier_async(g, NULL); }
prt_status prt_all_gather_v(prt_comm *g, const void *s, void *r, const size_t *counts,
                            prt_dtype t)
{
    return prt_all_gather_v_async(g, s, r, counts, t, NULL);
}
prt_status prt_reduce_scatter_v(prt_comm *g, const void *s, void *r, const size_t *counts,
                                prt_dtype t, prt_redop op)
{
    return prt_reduce_scatter_v_async(g, s, r, counts, t, op, NULL);
}
prt_status prt_send(prt_comm *g, const void *buf, size_t n, prt_dtype t, int peer, int tag)
{
    return prt_send_async(g, buf, n, t, peer, tag, NULL);
}
prt_status prt_recv(prt_comm *g, void *buf, size_t n, prt_dtype t, int peer, int tag)
{
    return prt_recv_async(g, buf, n, t, peer, tag, NULL);
}
