/*
 * comm.c: alpha-beta cost of collectives over a two-level topology.
 *
 * Each link (NVLink inside a node, InfiniBand between nodes) is a latency
 * alpha and a per-GPU, per-direction bandwidth beta^-1, derated by the
 * fraction of it that NCCL reaches for large messages (PLAN_LINK_EFF_*).
 * A collective of M bytes on n ranks costs
 *
 *     t = steps * alpha + factor * M / (eff * bandwidth)
 *
 * where `factor` is the nccl-tests bus-bandwidth factor (all-reduce
 * 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, broadcast and reduce 1,
 * all-to-all (n-1)/n) and `steps` the sequential message rounds of the
 * algorithm (ring all-reduce 2(n-1), tree 2 log2 n). The latency term is
 * what makes small messages reach a small fraction of the bus bandwidth:
 * busbw(M) = factor*M/t(M). A ring that spans nodes runs at the inter-node
 * link's speed (every GPU's ring neighbour on the next node shares its
 * NIC); the hierarchical algorithm reduce-scatters inside the node over
 * NVLink, all-reduces 1/local of the data across nodes (one ring per local
 * rank, in parallel on their own NICs) and all-gathers inside again.
 * ALGO_AUTO takes the cheapest, as NCCL's tuner does.
 *
 * A link calibrated on this machine (`planc calibrate`) carries, per
 * collective and group size, the latency and bus bandwidth measured with
 * planrt's own collectives (all groups of that size at once); a
 * collective on a measured size costs that latency plus factor * M over
 * that bus bandwidth; another size interpolates the two measured sizes
 * around it in log n (latency per round of the algorithm: 2(n-1) for
 * all-reduce, n-1 for the others), or takes the nearest one's outside. Its `efficiency` (1 when measured) replaces
 * PLAN_LINK_EFF_*: the analytic figures are the profile a link has when
 * none was measured.
 *
 * Sources: Thakur, Rabenseifner, Gropp 2005 (ring and tree costs);
 * nccl-tests doc/PERFORMANCE.md (bus-bandwidth factors).
 */
#include "planner/comm.h"

#include <math.h>
#include <stddef.h>

double plan_bus_factor(PlanCollective c, int64_t n)
{
    double dn = (double)n;
    if (n <= 1) return 0;
    switch (c) {   /* ORDER PlanCollective */
    case COLL_ALL_REDUCE:     return 2.0 * (dn - 1) / dn;
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_TO_ALL:     return (dn - 1) / dn;
    case COLL_BROADCAST:
    case COLL_REDUCE:
    case COLL_P2P:            return 1.0;
    }
    return 0;
}

const char *plan_collective_name(PlanCollective c)
{
    static const char *names[] = { "all-reduce", "all-gather", "reduce-scatter",
                                   "broadcast", "reduce", "all-to-all", "p2p" };
    return names[c];
}

const char *plan_algo_name(PlanAlgo a)
{
    static const char *names[] = { "auto", "ring", "tree", "hierarchical" };
    return names[a];
}

PlanGroup plan_group_shape(int64_t G, int64_t stride, int64_t size)
{
    PlanGroup g = { .size = size, .local = 1, .nodes = size };
    if (size <= 1) { g.nodes = 1; return g; }
    if (stride < G) {
        int64_t per_node = (G + stride - 1) / stride;    /* members a node holds */
        g.local = size < per_node ? size : per_node;
        g.nodes = (size + g.local - 1) / g.local;
    }
    return g;
}

PlanGroup plan_layout_group(const Cluster *cl, int dp, int tp, int pp, PlanGroupKind k)
{
    int64_t G = cl->gpus_per_node;
    switch (k) {   /* rank = tp + TP*(dp + DP*pp) */
    case GROUP_TP: return plan_group_shape(G, 1, tp);
    case GROUP_DP: return plan_group_shape(G, tp, dp);
    case GROUP_PP: return plan_group_shape(G, (int64_t)tp * dp, pp);
    case GROUP_EMBED:   /* two members (pp > 1), tp*dp*(pp-1) ranks apart */
        return pp > 1 ? plan_group_shape(G, (int64_t)tp * dp * (pp - 1), 2) : plan_group_shape(G, 1, 1);
    case GROUP_ALL: return plan_group_shape(G, 1, (int64_t)tp * dp * pp);
    }
    return plan_group_shape(G, 1, 1);
}

/* One link's latency and derated bandwidth. */
typedef struct { double alpha, bw; } Wire;

static Wire wire(const Cluster *cl, bool inter)
{
    Wire w;
    const Link *l = inter ? &cl->inter : &cl->intra;
    double eff = l->efficiency > 0 ? l->efficiency : inter ? PLAN_LINK_EFF_INTER : PLAN_LINK_EFF_INTRA;
    w.alpha = l->latency;
    w.bw = l->bandwidth * eff;
    if (w.bw <= 0) w.bw = 1e-30;
    return w;
}

/* Ring on n ranks over one wire: `steps` rounds of latency, factor*M bytes. */
static double ring(Wire w, double steps, double factor, double bytes)
{
    return steps * w.alpha + factor * bytes / w.bw;
}

/* The flat algorithms over n ranks on one wire. */
static double flat(PlanCollective c, PlanAlgo a, int64_t n, Wire w, double M)
{
    double dn = (double)n, f = plan_bus_factor(c, n);
    if (n <= 1) return 0;
    switch (c) {
    case COLL_ALL_REDUCE:
        if (a == ALGO_TREE)   /* reduce up + broadcast down, pipelined: 2M per rank */
            return 2.0 * ceil(log2(dn)) * w.alpha + 2.0 * M / w.bw;
        return ring(w, 2 * (dn - 1), f, M);
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_TO_ALL:
        return ring(w, dn - 1, f, M);
    case COLL_BROADCAST:
    case COLL_REDUCE:         /* pipelined chain */
        return ring(w, dn - 1, 1.0, M);
    case COLL_P2P:
        return w.alpha + M / w.bw;
    }
    return 0;
}

/* Hierarchical: inside the node over NVLink, across nodes on 1/local of
 * the data (local rails in parallel), and back inside. */
static double hier(const Cluster *cl, PlanCollective c, PlanGroup g, double M)
{
    Wire in = wire(cl, false), out = wire(cl, true);
    double k = (double)g.local;
    switch (c) {
    case COLL_ALL_REDUCE: {
        double across = fmin(flat(c, ALGO_RING, g.nodes, out, M / k),
                             flat(c, ALGO_TREE, g.nodes, out, M / k));
        return flat(COLL_REDUCE_SCATTER, ALGO_RING, g.local, in, M) + across +
               flat(COLL_ALL_GATHER, ALGO_RING, g.local, in, M);
    }
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
        return flat(c, ALGO_RING, g.local, in, M) + flat(c, ALGO_RING, g.nodes, out, M / k);
    default:
        return INFINITY;
    }
}

/* Sequential message rounds of collective c on n ranks (ring, chain). */
static double rounds(PlanCollective c, int64_t n)
{
    if (c == COLL_P2P) return 1;
    return c == COLL_ALL_REDUCE ? 2.0 * (double)(n - 1) : (double)(n - 1);
}

/* Seconds of c on group g from the link's measured figures, or -1 when
 * the link has none for c. A measured group size is its own point;
 * between two measured sizes the per-round latency and the bus bandwidth
 * are interpolated linearly in log n; beyond them the nearest size's
 * (the ring's model: the latency grows with the rounds, the bus
 * bandwidth stays). */
static double measured(const Link *l, PlanCollective c, PlanGroup g, double M)
{
    int64_t n = c == COLL_P2P ? 2 : g.size;
    const PlanCollPoint *lo = NULL, *hi = NULL;   /* nearest measured sizes <= n, >= n */
    for (int i = 0; i < l->n_coll; i++) {
        const PlanCollPoint *q = &l->coll[i];
        if (q->coll != (int)c || q->busbw <= 0 || q->ranks < 2) continue;
        if (q->ranks <= n && (!lo || q->ranks > lo->ranks)) lo = q;
        if (q->ranks >= n && (!hi || q->ranks < hi->ranks)) hi = q;
    }
    if (!lo && !hi) return -1;
    if (!lo) lo = hi;
    if (!hi) hi = lo;
    double u = hi->ranks > lo->ranks ? log((double)n / lo->ranks) / log((double)hi->ranks / lo->ranks) : 0;
    double la = lo->latency / rounds(c, lo->ranks), lb = hi->latency / rounds(c, hi->ranks);
    double lat = (la + u * (lb - la)) * rounds(c, n);
    double bw = lo->busbw + u * (hi->busbw - lo->busbw);
    return lat + plan_bus_factor(c, n) * M / bw;
}

PlanCommCost plan_comm_cost(const Cluster *cl, PlanCollective c, PlanAlgo algo,
                            PlanGroup g, double bytes)
{
    PlanCommCost r = { .time = 0, .bus_factor = plan_bus_factor(c, c == COLL_P2P ? 2 : g.size),
                       .algo = ALGO_RING, .inter = g.nodes > 1 };
    if (bytes <= 0 || (c != COLL_P2P && g.size <= 1)) return r;
    double mt = measured(r.inter ? &cl->inter : &cl->intra, c, g, bytes);
    if (mt >= 0 && g.nodes <= 1 && (algo == ALGO_AUTO || algo == ALGO_RING)) { r.time = mt; return r; }
    Wire w = wire(cl, r.inter);
    if (c == COLL_P2P) { r.time = flat(c, ALGO_RING, 2, w, bytes); return r; }

    double best = INFINITY;
    PlanAlgo tries[] = { ALGO_RING, ALGO_TREE, ALGO_HIER };
    for (int i = 0; i < 3; i++) {
        PlanAlgo a = tries[i];
        if (algo != ALGO_AUTO && algo != a) continue;
        double t;
        if (a == ALGO_TREE && c != COLL_ALL_REDUCE) continue;
        if (a == ALGO_HIER) {
            if (g.nodes <= 1 || g.local <= 1) continue;
            t = hier(cl, c, g, bytes);
        } else {
            t = flat(c, a, g.size, w, bytes);
        }
        if (t < best) { best = t; r.algo = a; }
    }
    if (best == INFINITY) best = flat(c, ALGO_RING, g.size, w, bytes);  /* asked for N/A: ring */
    r.time = best;
    return r;
}
