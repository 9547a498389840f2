/*
 * algos.c: planc's own collective algorithms, written as schedules of
 * send / receive / reduce steps over the backend's point-to-point layer.
 *
 * They exist to teach and to compare with MPI's and NCCL's tuned ones, so
 * each is the textbook version in a few lines.  Costs use the usual
 * alpha-beta model (Thakur, Rabenseifner & Gropp, "Optimization of
 * Collective Communication Operations in MPICH", IJHPCA 2005): alpha =
 * latency per message (s), beta = seconds per byte, N = message bytes,
 * P = ranks.  The bus-bandwidth factor is the one nccl-tests uses to turn
 * algbw = N / t into busbw (docs/PERFORMANCE.md of nccl-tests).
 *
 *   ring reduce-scatter   (P-1) alpha + (P-1)/P N beta      busbw = algbw (P-1)/P
 *   ring all-gather       (P-1) alpha + (P-1)/P N beta      busbw = algbw (P-1)/P
 *   ring all-reduce       2(P-1) alpha + 2(P-1)/P N beta    busbw = algbw 2(P-1)/P
 *   recursive doubling    log2 P alpha + log2 P N beta      (all-reduce, small N)
 *   binomial broadcast    log2 P (alpha + N beta)           busbw = algbw
 *   binomial reduce       log2 P (alpha + N beta)           busbw = algbw
 *   ring broadcast        scatter + ring all-gather: P alpha + 2(P-1)/P N beta
 *   ring reduce           ring reduce-scatter + gather: P alpha + 2(P-1)/P N beta
 *
 * Blocks: a buffer of n elements is cut into P blocks with prt_shard (the
 * first n % P blocks one element longer), so no count is ever truncated;
 * all-gather and reduce-scatter take the user's per-rank counts.  Rank r
 * ends a reduce-scatter owning block r, the layout all-gather starts from.
 * PRT_AVG reduces with a sum and divides once at the end, on the block the
 * rank owns when possible.  Reductions are commutative, and every rank
 * receives each final element from the one rank that computed it, so all
 * ranks hold bit-identical results.
 */
#include <stdlib.h>

#include "comm_internal.h"

#define MOD(a, p) ((((a) % (p)) + (p)) % (p))

/* Offsets of the blocks described by counts[P], and the largest block. */
typedef struct {
    size_t *cnt;  /* (P) elements of block i */
    size_t *off;  /* (P) first element of block i */
    size_t  max;  /* largest block */
    size_t  total;
} blocks;

static bool blocks_from_counts(blocks *b, const size_t *counts, int P)
{
    b->cnt = malloc(2 * (size_t)P * sizeof(size_t));
    if (!b->cnt)
        return false;
    b->off = b->cnt + P;
    b->max = b->total = 0;
    for (int i = 0; i < P; i++) {
        b->cnt[i] = counts[i];
        b->off[i] = b->total;
        b->total += counts[i];
        if (counts[i] > b->max)
            b->max = counts[i];
    }
    return true;
}

/* n elements cut into P near-equal blocks. */
static bool blocks_even(blocks *b, size_t n, int P)
{
    b->cnt = malloc(2 * (size_t)P * sizeof(size_t));
    if (!b->cnt)
        return false;
    b->off = b->cnt + P;
    for (int i = 0; i < P; i++)
        prt_shard(n, P, i, &b->off[i], &b->cnt[i]);
    b->max = b->cnt[0];
    b->total = n;
    return true;
}

static bool averaging(const prt_request *q) { return q->op == PRT_AVG && q->g->size > 1; }

/* Ring reduce-scatter whose result lands in place in buf: at step k rank r
 * sends block r-k-1 to r+1 and receives block r-k-2 from r-1, adding it to
 * its own contribution; after P-1 steps block r is complete.  src holds the
 * contributions (src == buf in place); every block but r-1 is written before
 * it is read from buf, so an out-of-place call needs no copy. */
static void ring_reduce_scatter_into(prt_request *q, const void *src, void *buf,
                                     const blocks *b, void *tmp)
{
    const int P = q->g->size, r = q->g->rank;
    const int next = MOD(r + 1, P), prev = MOD(r - 1, P);
    for (int k = 0; k < P - 1; k++) {
        int sb = MOD(r - k - 1, P), rb = MOD(r - k - 2, P);
        const void *from = k == 0 ? src : buf;
        sch_send(q, next, sch_at(q, from, b->off[sb]), b->cnt[sb]);
        sch_recv(q, prev, tmp, b->cnt[rb]);
        sch_reduce(q, sch_at(q, buf, b->off[rb]), sch_at(q, src, b->off[rb]), tmp,
                     b->cnt[rb]);
        sch_end_round(q);
    }
    if (P == 1)
        sch_copy(q, buf, src, b->cnt[0]);
    if (averaging(q))
        sch_scale(q, sch_at(q, buf, b->off[r]), b->cnt[r]);
    sch_end_round(q);
}

/* Ring all-gather in place: rank r starts with block r of buf (or in mine,
 * sent at step 0 and copied into place meanwhile); at step k it forwards
 * block r-k to r+1 and receives block r-k-1 from r-1. */
static void ring_all_gather_into(prt_request *q, const void *mine, void *buf, const blocks *b)
{
    const int P = q->g->size, r = q->g->rank;
    const int next = MOD(r + 1, P), prev = MOD(r - 1, P);
    sch_copy(q, sch_at(q, buf, b->off[r]), mine, b->cnt[r]);
    for (int k = 0; k < P - 1; k++) {
        int sb = MOD(r - k, P), rb = MOD(r - k - 1, P);
        sch_send(q, next, k == 0 ? mine : sch_at(q, buf, b->off[sb]), b->cnt[sb]);
        sch_recv(q, prev, sch_at(q, buf, b->off[rb]), b->cnt[rb]);
        sch_end_round(q);
    }
    sch_end_round(q);
}

/* Ring all-reduce = ring reduce-scatter + ring all-gather (Patarasuk &
 * Yuan 2009): 2(P-1)/P N bytes per rank, the bandwidth optimum. */
static prt_status ring_all_reduce(prt_request *q, const coll_args *a)
{
    blocks b;
    if (!blocks_even(&b, a->n, q->g->size))
        return PRT_ERR_NOMEM;
    void *tmp = sch_scratch(q, b.max * q->esize);
    int r = q->g->rank;
    ring_reduce_scatter_into(q, a->sendbuf, a->recvbuf, &b, tmp);
    ring_all_gather_into(q, sch_at(q, a->recvbuf, b.off[r]), a->recvbuf, &b);
    free(b.cnt);
    return PRT_OK;
}

/* Ring reduce-scatter into a separate output block: partial sums travel in
 * two alternating work blocks, so the input is never written. */
static prt_status ring_reduce_scatter(prt_request *q, const coll_args *a)
{
    const int P = q->g->size, r = q->g->rank;
    const int next = MOD(r + 1, P), prev = MOD(r - 1, P);
    blocks b;
    if (!blocks_from_counts(&b, a->counts, P))
        return PRT_ERR_NOMEM;
    char *t = sch_scratch(q, 2 * b.max * q->esize);
    void *work[2] = { t, t + b.max * q->esize };
    const void *S = a->sendbuf;
    for (int k = 0; k < P - 1; k++) {
        int sb = MOD(r - k - 1, P), rb = MOD(r - k - 2, P);
        sch_send(q, next, k == 0 ? sch_at(q, S, b.off[sb]) : work[(k - 1) % 2], b.cnt[sb]);
        sch_recv(q, prev, work[k % 2], b.cnt[rb]);
        void *dst = k == P - 2 ? a->recvbuf : work[k % 2];  /* last: block r */
        sch_reduce(q, dst, work[k % 2], sch_at(q, S, b.off[rb]), b.cnt[rb]);
        sch_end_round(q);
    }
    if (P == 1)
        sch_copy(q, a->recvbuf, S, b.cnt[0]);
    if (averaging(q))
        sch_scale(q, a->recvbuf, b.cnt[r]);
    sch_end_round(q);
    free(b.cnt);
    return PRT_OK;
}

static prt_status ring_all_gather(prt_request *q, const coll_args *a)
{
    blocks b;
    if (!blocks_from_counts(&b, a->counts, q->g->size))
        return PRT_ERR_NOMEM;
    ring_all_gather_into(q, a->sendbuf, a->recvbuf, &b);
    free(b.cnt);
    return PRT_OK;
}

/* Ring broadcast (van de Geijn): the root scatters P blocks, then a ring
 * all-gather assembles them everywhere — 2(P-1)/P N bytes through the
 * root's link instead of N log2 P. */
static prt_status ring_broadcast(prt_request *q, const coll_args *a)
{
    const int P = q->g->size, r = q->g->rank;
    blocks b;
    if (!blocks_even(&b, a->n, P))
        return PRT_ERR_NOMEM;
    void *buf = a->recvbuf;
    for (int i = 0; i < P; i++)
        if (r == a->root && i != r)
            sch_send(q, i, sch_at(q, buf, b.off[i]), b.cnt[i]);
    if (r != a->root)
        sch_recv(q, a->root, sch_at(q, buf, b.off[r]), b.cnt[r]);
    sch_end_round(q);
    ring_all_gather_into(q, sch_at(q, buf, b.off[r]), buf, &b);
    free(b.cnt);
    return PRT_OK;
}

/* Ring reduce (Rabenseifner): ring reduce-scatter, then every rank sends its
 * finished block to the root. */
static prt_status ring_reduce(prt_request *q, const coll_args *a)
{
    const int P = q->g->size, r = q->g->rank;
    blocks b;
    if (!blocks_even(&b, a->n, P))
        return PRT_ERR_NOMEM;
    bool root = r == a->root;
    char *s = sch_scratch(q, (b.max + (root ? 0 : a->n)) * q->esize);
    void *tmp = s, *work = root ? a->recvbuf : s + b.max * q->esize;
    ring_reduce_scatter_into(q, a->sendbuf, work, &b, tmp);
    for (int i = 0; i < P; i++)
        if (root && i != r)
            sch_recv(q, i, sch_at(q, work, b.off[i]), b.cnt[i]);
    if (!root)
        sch_send(q, a->root, sch_at(q, work, b.off[r]), b.cnt[r]);
    sch_end_round(q);
    free(b.cnt);
    return PRT_OK;
}

/* Binomial-tree broadcast: in round j the ranks that have the data (relative
 * ranks below 2^j) send it 2^j further; log2 P rounds. */
static prt_status tree_broadcast(prt_request *q, const coll_args *a)
{
    const int P = q->g->size, vr = MOD(q->g->rank - a->root, P);
    int mask = 1;
    for (; mask < P; mask <<= 1)
        if (vr & mask) {
            sch_recv(q, MOD(vr - mask + a->root, P), a->recvbuf, a->n);
            sch_end_round(q);
            break;
        }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < P)
            sch_send(q, MOD(vr + mask + a->root, P), a->recvbuf, a->n);
    sch_end_round(q);
    return PRT_OK;
}

/* Binomial-tree reduce: the mirror image of the broadcast — each rank adds
 * its children's partial results (relative ranks vr + 2^j) to its own, then
 * passes the sum to its parent. */
static prt_status tree_reduce(prt_request *q, const coll_args *a)
{
    const int P = q->g->size, vr = MOD(q->g->rank - a->root, P);
    char *s = sch_scratch(q, (vr == 0 ? 1 : 2) * a->n * q->esize);
    void *tmp = s, *acc = vr == 0 ? a->recvbuf : s + a->n * q->esize;
    const void *mine = a->sendbuf;   /* my partial result so far */
    for (int mask = 1; mask < P; mask <<= 1) {
        if (vr & mask) {
            sch_send(q, MOD(vr - mask + a->root, P), mine, a->n);
            sch_end_round(q);
            break;
        }
        if (vr + mask < P) {
            sch_recv(q, MOD(vr + mask + a->root, P), tmp, a->n);
            sch_reduce(q, acc, mine, tmp, a->n);
            mine = acc;
            sch_end_round(q);
        }
    }
    if (vr == 0) {
        sch_copy(q, a->recvbuf, mine, a->n);  /* P == 1 */
        if (averaging(q))
            sch_scale(q, a->recvbuf, a->n);
        sch_end_round(q);
    }
    return PRT_OK;
}

/* Recursive-doubling all-reduce: in round j rank r swaps its whole partial
 * result with r XOR 2^j, so log2 P rounds suffice — the latency-optimal
 * choice for small messages.  When P is not a power of two, the first
 * 2*(P - p2) ranks pair up first (even ranks hand their data to the odd
 * neighbour and sit out), and get the result back at the end (Thakur et
 * al. 2005, section 4.4). */
static prt_status rd_all_reduce(prt_request *q, const coll_args *a)
{
    const int P = q->g->size, r = q->g->rank;
    int p2 = 1;
    while (p2 * 2 <= P)
        p2 *= 2;
    const int rem = P - p2;
    void *tmp = sch_scratch(q, a->n * q->esize), *B = a->recvbuf;
    const void *mine = a->sendbuf;
    int vr;                                    /* rank among the p2, or -1 */
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            sch_send(q, r + 1, mine, a->n);
            sch_end_round(q);
            vr = -1;
        } else {
            sch_recv(q, r - 1, tmp, a->n);
            sch_reduce(q, B, mine, tmp, a->n);
            mine = B;
            sch_end_round(q);
            vr = r / 2;
        }
    } else {
        vr = r - rem;
    }
    if (vr >= 0) {
        for (int mask = 1; mask < p2; mask <<= 1) {
            int pv = vr ^ mask, peer = pv < rem ? 2 * pv + 1 : pv + rem;
            sch_send(q, peer, mine, a->n);
            sch_recv(q, peer, tmp, a->n);
            sch_reduce(q, B, mine, tmp, a->n);
            mine = B;
            sch_end_round(q);
        }
        sch_copy(q, B, mine, a->n);  /* P == 1 */
        if (averaging(q))
            sch_scale(q, B, a->n);
        sch_end_round(q);
        if (r < 2 * rem)
            sch_send(q, r - 1, B, a->n);
    } else {
        sch_recv(q, r + 1, B, a->n);
    }
    sch_end_round(q);
    return PRT_OK;
}

/* Which (operation, algorithm) pairs exist; the rest run natively. */
bool prtc_algo_exists(coll_kind k, prt_algo a)
{
    switch (k) {
    case COLL_ALL_REDUCE:
    case COLL_BROADCAST:
    case COLL_REDUCE:
        return a == PRT_ALGO_RING || a == PRT_ALGO_TREE;
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_GATHER:
        return a == PRT_ALGO_RING;
    default:
        return false;
    }
}

/* Append the schedule of (a, algo) to q. */
prt_status prtc_algo_build(prt_request *q, const coll_args *a, prt_algo algo)
{
    bool ring = algo == PRT_ALGO_RING;
    prt_status s;
    switch (a->kind) {
    case COLL_ALL_REDUCE:     s = ring ? ring_all_reduce(q, a) : rd_all_reduce(q, a); break;
    case COLL_BROADCAST:      s = ring ? ring_broadcast(q, a) : tree_broadcast(q, a); break;
    case COLL_REDUCE:         s = ring ? ring_reduce(q, a) : tree_reduce(q, a); break;
    case COLL_REDUCE_SCATTER: s = ring_reduce_scatter(q, a); break;
    case COLL_ALL_GATHER:     s = ring_all_gather(q, a); break;
    default:                  return PRT_ERR_UNSUPPORTED;
    }
    if (s == PRT_OK && q->failed_alloc)
        s = PRT_ERR_NOMEM;
    return s;
}
