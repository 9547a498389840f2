/*
 * comm.c: what a collective costs on a cluster's links — NCCL's own cost
 * model on GPU clusters, alpha-beta on MPI (the CPU target), and the
 * third tier (pods) on top of either.
 *
 * GPU clusters (Device.sms > 0) run NCCL, so a collective costs what
 * NCCL's tuner predicts for the algorithm and protocol it picks, the
 * cheapest (src/graph/tuning.cc, ncclTopoTuneModel / ncclTopoGetAlgoTime,
 * NCCL 2.19; the tables below are its figures):
 *  - algorithms: ring (any collective; a ring spanning nodes runs at the
 *    smaller of NVLink and the node's rails in use, min(local, NICs) NICs),
 *    tree (all-reduce: chains inside nodes, a double binary tree across
 *    them), NVLS (all-reduce inside one NVSwitch node with Device.nvls);
 *  - protocols LL, LL128, Simple, each with its own base latency, per-hop
 *    latency (NVLink or network) and bandwidth factor and cap: the ring's
 *    LL takes 1/4 of the bandwidth (1/3 for a one-node gather), LL128
 *    0.92 (0.7 with one rank per node), the tree 0.92 of it and LL 1/3.8,
 *    each capped per channel (PLAN_NCCL_CHANNELS);
 *  - time = latency + M / algbw, algbw = busbw * n / steps (ring), busbw
 *    / 2 (tree), busbw * 5/6 (NVLS); the tree's bandwidth corrected for
 *    mid-size messages, the multi-node Simple ring's latency x1.4 (its
 *    "plateau"), and the chunk pipeline filling: + 2 sqrt(a M / algbw),
 *    a = PLAN_NCCL_FILL (comm.h), so bus bandwidth rises with message size
 *    as nccl-tests shows it.
 * The line rates are derated by the measured busbw / line rate of
 * nccl-tests (PLAN_NCCL_EFF_*, comm.h): the nVidia figures are per
 * channel of NCCL's topology search, ours per GPU of the link; and capped
 * as the tuner caps them by architecture (235 GB/s Ampere, 370 Hopper). A
 * tree on two nodes runs at NVLink's busbw up to twice the rails' (its one
 * network hop carries the data once each way; search.cc, tuning.cc).
 *
 * MPI (the CPU target) keeps the alpha-beta model: each link is a latency
 * alpha and a per-GPU, per-direction bandwidth derated by PLAN_LINK_EFF_*,
 *
 *     t = steps * alpha + factor * M / (eff * bandwidth)
 *
 * `factor` the nccl-tests bus-bandwidth factor (all-reduce 2(n-1)/n,
 * all-gather and reduce-scatter (n-1)/n, broadcast and reduce 1,
 * all-to-all (n-1)/n), `steps` the rounds (ring all-reduce 2(n-1), tree
 * 2 log2 n); the hierarchical algorithm reduce-scatters inside the node,
 * all-reduces 1/local of the data across nodes and all-gathers inside.
 *
 * Pods (Cluster.nodes_per_pod): a group spanning P pods runs
 * hierarchically — inside each pod (the two-tier model above), across
 * pods on the pod link (one ring of P per member, on M / members-per-pod
 * bytes, alpha-beta), and inside again — and never costs less than the
 * cut bound, the bytes that must cross between pods over the pod links'
 * total bandwidth (plan_cut_bound). PP sends between pods pay the pod link.
 *
 * A link calibrated on this machine (`planc calibrate`) carries, per
 * collective and group size, the latency and bus bandwidth measured with
 * planrt's own collectives (all groups of that size at once); a
 * collective on a measured size costs that latency plus factor * M over
 * that bus bandwidth; another size interpolates the two measured sizes
 * around it in log n (latency per round of the algorithm: 2(n-1) for
 * all-reduce, n-1 for the others), or takes the nearest one's outside:
 * the analytic figures are the profile a link has when none was measured,
 * one code path.
 *
 * Sources: NCCL src/graph/tuning.cc (v2.19: baseLat, hwLat, llMaxBws,
 * perChMax*Bws, treeCorrectionFactor, the ring plateau, the busBw caps;
 * bwIntra on <= 2 nodes) and search.cc (a tree's bwIntra up to 2 x
 * bwInter); nccl-tests
 * doc/PERFORMANCE.md (bus-bandwidth factors); NVIDIA dgxc-benchmarking
 * `nccl` README and nccl-tests issue #290 (measured bus bandwidths);
 * Thakur, Rabenseifner, Gropp 2005 (ring and tree costs, MPI).
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
    static const char *names[] = { "auto", "ring", "tree", "hierarchical", "nvls" };   /* ORDER PlanAlgo */
    return names[a];
}

const char *plan_proto_name(PlanProto p)
{
    static const char *names[] = { "LL", "LL128", "Simple" };   /* ORDER PlanProto */
    return names[p];
}

const char *plan_tier_name(PlanTier t)
{
    static const char *names[] = { "node", "pod", "pods" };   /* ORDER PlanTier */
    return names[t];
}

/* Members of a `size`-member group, `stride` ranks apart, that one block
 * of `span` consecutive ranks (a node, a pod) holds. */
static int64_t per_block(int64_t span, int64_t stride, int64_t size)
{
    if (stride >= span) return 1;
    int64_t per = (span + stride - 1) / stride;
    return size < per ? size : per;
}

PlanGroup plan_group_shape(int64_t G, int64_t stride, int64_t size)
{
    PlanGroup g = { .size = size, .local = 1, .nodes = size, .pods = 1 };
    if (size <= 1) { g.nodes = 1; return g; }
    g.local = per_block(G, stride, size);
    g.nodes = (size + g.local - 1) / g.local;
    return g;
}

/* The group of `size` members `stride` apart, with the pods it spans. */
static PlanGroup cluster_group(const Cluster *cl, int64_t stride, int64_t size)
{
    PlanGroup g = plan_group_shape(plan_nvlink_domain(cl), stride, size);   /* "nodes": NVLink domains */
    int64_t npp = cl->nodes_per_pod;
    if (npp > 0 && cl->nodes > npp && size > 1) {
        int64_t per = per_block(cl->gpus_per_node * npp, stride, size);
        g.pods = (size + per - 1) / per;
    }
    return g;
}

PlanGroup plan_layout_group(const Cluster *cl, int dp, int tp, int pp, PlanGroupKind k)
{
    switch (k) {   /* rank = tp + TP*(dp + DP*pp) */
    case GROUP_TP: return cluster_group(cl, 1, tp);
    case GROUP_DP: return cluster_group(cl, tp, dp);
    case GROUP_PP: return cluster_group(cl, (int64_t)tp * dp, pp);
    case GROUP_EMBED:   /* two members (pp > 1), tp*dp*(pp-1) ranks apart */
        return pp > 1 ? cluster_group(cl, (int64_t)tp * dp * (pp - 1), 2) : cluster_group(cl, 1, 1);
    case GROUP_ALL: return cluster_group(cl, 1, (int64_t)tp * dp * pp);
    }
    return cluster_group(cl, 1, 1);
}

PlanGroup plan_cp_group(const Cluster *cl, int tp, int cp)
{
    return cluster_group(cl, tp > 0 ? tp : 1, cp > 0 ? cp : 1);
}

static int64_t pods_of(PlanGroup g) { return g.pods > 1 ? g.pods : 1; }

PlanGroup plan_pp_pair(const Cluster *cl, int dp, int tp, int pp, int s)
{
    PlanGroup ppg = plan_layout_group(cl, dp, tp, pp, GROUP_PP);
    PlanGroup pair = ppg.local >= 2 ? (PlanGroup){ 2, 2, 1, 1 } : (PlanGroup){ 2, 1, 2, 1 };
    int64_t span = cl->gpus_per_node * cl->nodes_per_pod, stride = (int64_t)tp * dp;
    if (pods_of(ppg) > 1 && span > 0 && pp > 1) {
        int64_t a = (int64_t)s * stride, b = (int64_t)((s + 1) % pp) * stride;
        if (a / span != b / span) pair = (PlanGroup){ 2, 1, 2, 2 };
    }
    return pair;
}

static double eff_of(const Link *l, double dflt);

PlanGroup plan_ep_group(const Cluster *cl, int etp, int ep)
{
    return cluster_group(cl, etp > 0 ? etp : 1, ep > 0 ? ep : 1);
}

PlanGroup plan_etp_group(const Cluster *cl, int etp)
{
    return cluster_group(cl, 1, etp > 0 ? etp : 1);
}

PlanGroup plan_expert_dp_group(const Cluster *cl, int etp, int ep, int edp)
{
    return cluster_group(cl, (int64_t)(etp > 0 ? etp : 1) * (ep > 0 ? ep : 1), edp > 0 ? edp : 1);
}

/* The chance that none of a token's k experts, drawn without repetition
 * from E spread evenly over N nodes (uniform routing), lies on one given
 * node: C(E - E/N, k) / C(E, k). */
static double no_expert_on_node(double E, double N, double k)
{
    double q = 1, other = E - E / N;
    for (int i = 0; i < (int)k; i++) {
        if (other - i <= 0) return 0;
        q *= (other - i) / (E - i);
    }
    return q;
}

PlanMoeTierBytes plan_moe_dispatch_bytes(PlanGroup g, int dispatcher, double rows_bytes, double tokens_bytes,
                                         int64_t experts, int64_t top_k)
{
    PlanMoeTierBytes b = { 0, 0 };
    if (g.size <= 1) return b;
    double n = (double)g.size, loc = (double)g.local, N = (double)g.nodes;
    /* every row to the GPU of its expert: (local - 1)/n of them stay in
     * the node, (n - local)/n leave it, each on its own (NCCL's all-to-all,
     * Megatron's alltoall dispatcher) */
    b.nvlink = rows_bytes * (loc - 1) / n;
    b.network = rows_bytes * (n - loc) / n;
    if (dispatcher != PLAN_MOE_DEEPEP || g.nodes <= 1) return b;
    /* DeepEP's internode dispatch (deepseek-ai/DeepEP, README "Normal
     * kernels with NVLink and RDMA forwarding"; DeepSeek-V3 report Sec.
     * 3.2.2): a token crosses the network once per remote node that holds
     * one of its experts, to the GPU of its own rail there, which forwards
     * it over NVLink to the experts' GPUs of that node. Remote nodes per
     * token under uniform routing: (N - 1)(1 - P0), P0 the chance a node
     * holds none of its k experts. NVLink carries the rows for the own
     * node's other GPUs and, by symmetry, as many forwarded rows as the
     * rank's own left it, less the forwarder's own share (1/local). */
    double P0 = no_expert_on_node((double)experts, N, (double)top_k);
    b.network = tokens_bytes * (N - 1) * (1 - P0);
    b.nvlink = rows_bytes * ((loc - 1) / n + (n - loc) / n * (loc - 1) / loc);
    return b;
}

double plan_moe_dispatch_time(const Cluster *cl, PlanGroup g, PlanMoeTierBytes b)
{
    if (g.size <= 1) return 0;
    bool nccl = plan_cluster_nccl(cl);
    double in = cl->intra.bandwidth * eff_of(&cl->intra, nccl ? PLAN_NCCL_EFF_NVLINK : PLAN_LINK_EFF_INTRA);
    double net = cl->inter.bandwidth * eff_of(&cl->inter, nccl ? PLAN_NCCL_EFF_NET : PLAN_LINK_EFF_INTER);
    double t = b.nvlink > 0 ? cl->intra.latency + b.nvlink / (in > 0 ? in : 1e-30) : 0;
    if (g.nodes > 1 && b.network > 0)
        t = fmax(t, cl->inter.latency + cl->intra.latency + b.network / (net > 0 ? net : 1e-30));
    return t;
}

PlanTier plan_group_tier(PlanGroup g)
{
    return pods_of(g) > 1 ? TIER_PODS : g.nodes > 1 ? TIER_POD : TIER_NODE;
}

bool plan_cluster_nccl(const Cluster *cl)
{
    return cl->device.sms > 0;
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


/* ---- NCCL's tuner (GPU clusters) -------------------------------------- */

enum { NT_TREE, NT_RING };   /* rows of NCCL's tables: Tree, Ring */

/* tuning.cc baseLat, us: { LL, LL128, Simple } */
static const double NCCL_BASE_LAT[2][3] = { { 6.8, 14.0, 0 }, { 6.6, 14.0, 8.4 } };
/* tuning.cc hwLat, us per hop: NVLink and network */
static const double NCCL_LAT_NVL[2][3] = { { .6, 1.25, 28 }, { .6, 1.9, 3.4 } };
static const double NCCL_LAT_NET[2][3] = { { 5.0, 8.5, 28 }, { 2.7, 4.0, 14.0 } };
/* llMaxBws, GB/s: one node (Ampere and Hopper GPUs), 2 nodes, more (x86 hosts) */
static const double NCCL_LL_MAX[3] = { 87.7, 39.0, 20.4 };
/* per-channel caps, GB/s, [Ampere, Hopper][1 node, 2 nodes, more] */
static const double NCCL_RING_LL128_CH[2] = { 20.0, 36.7 };
static const double NCCL_TREE_LL128_CH[2][3] = { { 20.0, 20.0, 20.0 }, { 36.7, 36.7, 29.0 } };
static const double NCCL_TREE_CH[2][3] = { { 24.0, 23.6, 17.8 }, { 38.7, 41.4, 36.0 } };
/* treeCorrectionFactor: by log2(bytes / 64), 64 B to 256 MB */
static const double NCCL_TREE_CORR[3][23] = {
    { 1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0 },
    { 1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0 },
    { .9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9 },
};

static int arch_row(const Device *d) { return d->arch >= 90; }
static int node_col(int64_t nodes) { return nodes <= 1 ? 0 : nodes == 2 ? 1 : 2; }

static int log2i(double x)
{
    int l = 0;
    while (x >= 2) { x /= 2; l++; }
    return l;
}

static double eff_of(const Link *l, double dflt)
{
    return l->efficiency > 0 ? l->efficiency : dflt;
}

/* The bus bandwidth NCCL's tuner allows one GPU's channels, GB/s, by
 * architecture (tuning.cc, 2.12 on: "if (compCapIndex ==
 * AMPERE_COMPCAP_IDX) busBw = std::min(busBw, 235.0f)", Hopper 370; no
 * cap on the others). The A100's 235 GB/s is what nccl-tests measures at
 * 8-10 GB on eight A100 SXM (232-236 GB/s, test_commmodel.c), where the
 * H100's measured fraction of NVLink (PLAN_NCCL_EFF_NVLINK, 82 %) would
 * give 247. */
static double nccl_bus_cap(const Device *d)
{
    if (d->arch >= 80 && d->arch < 90) return 235.0;
    if (d->arch >= 90 && d->arch < 100) return 370.0;
    return INFINITY;
}

/* NVLink's bus bandwidth for NCCL's rings and trees, GB/s: the derated
 * line rate, under the tuner's cap. */
static double nccl_nvlink(const Cluster *cl)
{
    return fmin(cl->intra.bandwidth * eff_of(&cl->intra, PLAN_NCCL_EFF_NVLINK) / 1e9,
                nccl_bus_cap(&cl->device));
}

/* The rails g's members drive across NVLink domains, GB/s: min(local,
 * NICs of the domain) NICs of gpus_per_node / NICs GPUs' share each (a
 * domain of several nodes, an NVL72 rack of trays, has each tray's NICs). */
static double nccl_net(const Cluster *cl, PlanGroup g)
{
    double G = (double)cl->gpus_per_node;
    double nics = cl->nics_per_node > 0 ? (double)cl->nics_per_node : G;
    double domain_nics = nics * (double)plan_nvlink_domain(cl) / G;
    return fmin((double)g.local, domain_nics) * cl->inter.bandwidth * G / nics *
           eff_of(&cl->inter, PLAN_NCCL_EFF_NET) / 1e9;
}

/* The busbw NCCL's rings reach over g for large messages, GB/s
 * (tuning.cc's nChannels * bw): NVLink inside a node; across nodes the
 * smaller of NVLink and the rails (each ring's channel crosses a NIC at
 * the NIC's speed, search.cc sets the ring's bwIntra = bwInter). */
static double nccl_base(const Cluster *cl, PlanGroup g)
{
    double in = nccl_nvlink(cl);
    if (g.nodes <= 1) return in;
    double net = nccl_net(cl, g);
    return g.local > 1 ? fmin(in, net) : net;
}

/* The tree's busbw over g, GB/s. On two nodes each tree's one network hop
 * carries a channel's data once each way while its chain inside the node
 * carries it twice, so NCCL's search raises the tree's bwIntra to up to
 * twice its bwInter ("increase bwIntra for trees (2 nodes or collnet)",
 * search.cc) and the tuner rates trees on <= 2 nodes by bwIntra
 * (tuning.cc: "nNodes <= 2 ? graphs[a]->bwIntra : graphs[a]->bwInter"):
 * min(NVLink, 2 x rails). On more nodes the tree's interior nodes carry
 * it twice on the network too: the ring's figure. */
static double nccl_tree_base(const Cluster *cl, PlanGroup g)
{
    if (g.nodes != 2) return nccl_base(cl, g);
    double net2 = 2 * nccl_net(cl, g);
    return g.local > 1 ? fmin(nccl_nvlink(cl), net2) : net2;
}

/* Seconds of a (latency us, algbw GB/s) estimate on M bytes, with the
 * chunk pipeline's fill (every protocol moves its data through the same
 * NCCL_STEPS slots per channel). */
static double nccl_seconds(double lat_us, double algbw, double M)
{
    double bw = algbw > 0 ? algbw * 1e9 : 1e-30;   /* a link without bandwidth: as the MPI path's wire */
    return lat_us * 1e-6 + M / bw + 2 * sqrt(PLAN_NCCL_FILL * M / bw);
}

/* Ring, protocol p, inside one pod. */
static double nccl_ring(const Cluster *cl, PlanCollective c, PlanGroup g, PlanProto p, double M)
{
    double n = (double)g.size, N = (double)g.nodes, ppn = n / N;
    int row = arch_row(&cl->device), col = node_col(g.nodes);
    bool ar = c == COLL_ALL_REDUCE;
    double steps = ar ? 2 * (n - 1) : n - 1;
    double inter_steps = ar ? (N > 1 ? 2 * N : 0) : N - 1;
    double b = nccl_base(cl, g);
    if (p == PROTO_LL) b = fmin(NCCL_LL_MAX[col], b * ((N > 1 || ar || c == COLL_REDUCE) ? 0.25 : 1.0 / 3));
    if (p == PROTO_LL128) b = fmin(b * (ppn < 2 ? 0.7 : 0.92), PLAN_NCCL_CHANNELS * NCCL_RING_LL128_CH[row]);
    double algbw = b * n / steps;
    double intra = NCCL_LAT_NVL[NT_RING][p], inter = NCCL_LAT_NET[NT_RING][p];
    if (N > 1) intra = fmax(intra, p == PROTO_SIMPLE ? 3.0 : 1.0);   /* getNetOverhead: 1 us, x3 Simple */
    double lat = NCCL_BASE_LAT[NT_RING][p] + fmax(0, steps - inter_steps) * intra + inter_steps * inter;
    if (p == PROTO_SIMPLE && N > 1 && ar && M / (PLAN_NCCL_CHANNELS * n) >= 64) lat *= 1.4;   /* plateau */
    return nccl_seconds(lat, algbw, M);
}

/* Tree (all-reduce), protocol p, inside one pod. */
static double nccl_tree(const Cluster *cl, PlanGroup g, PlanProto p, double M)
{
    int row = arch_row(&cl->device), col = node_col(g.nodes);
    double b = fmin(nccl_tree_base(cl, g) * 0.92, PLAN_NCCL_CHANNELS * NCCL_TREE_CH[row][col]);
    if (p == PROTO_LL) b = fmin(b / 3.8, NCCL_LL_MAX[col]);
    if (p == PROTO_LL128)
        b = fmin(b * (g.nodes == 1 ? 7.0 / 9 : 120.0 / 128), PLAN_NCCL_CHANNELS * NCCL_TREE_LL128_CH[row][col]);
    int ls = log2i(M / 64);
    if (ls < 23) b *= NCCL_TREE_CORR[p][ls];
    double lat = NCCL_BASE_LAT[NT_TREE][p] +
                 2 * ((double)(g.local - 1) * NCCL_LAT_NVL[NT_TREE][p] + log2i((double)g.nodes) * NCCL_LAT_NET[NT_TREE][p]);
    return nccl_seconds(lat, b * 0.5, M);
}

/* NVLS all-reduce inside one NVSwitch node (Simple only). */
static double nccl_nvls(const Cluster *cl, double M)
{
    double b = cl->intra.bandwidth * eff_of(&cl->intra, PLAN_NCCL_EFF_NVLS) / 1e9;
    return nccl_seconds(PLAN_NCCL_NVLS_LAT * 1e6, b * 5.0 / 6, M);
}

/* All-to-all: NCCL runs it as n - 1 concurrent sends and receives; what
 * goes to the other nodes leaves by each GPU's own rail, the rest by
 * NVLink, one ring step's latency. */
static double nccl_all_to_all(const Cluster *cl, PlanGroup g, double M)
{
    double n = (double)g.size, k = (double)g.local;
    double in = cl->intra.bandwidth * eff_of(&cl->intra, PLAN_NCCL_EFF_NVLINK);
    double net = cl->inter.bandwidth * eff_of(&cl->inter, PLAN_NCCL_EFF_NET);
    double lat = NCCL_BASE_LAT[NT_RING][PROTO_SIMPLE] +
                 (g.nodes > 1 ? NCCL_LAT_NET : NCCL_LAT_NVL)[NT_RING][PROTO_SIMPLE];
    double t = lat * 1e-6 + M * (k - 1) / n / in;
    if (g.nodes > 1) t = fmax(t, lat * 1e-6 + M * (n - k) / n / net);
    return t;
}

/* The cheapest of NCCL's algorithms and protocols for c on g inside one
 * pod (or the one asked for; NCCL has no hierarchical algorithm, its ring
 * spans the nodes, so ALGO_HIER asks for the ring, and an algorithm the
 * collective does not have falls back to the ring as NCCL's does). */
static double nccl_best(const Cluster *cl, PlanCollective c, PlanAlgo want, PlanGroup g, double M,
                        PlanAlgo *algo, PlanProto *proto)
{
    double best = INFINITY;
    *algo = ALGO_RING;
    *proto = PROTO_SIMPLE;
    if (c == COLL_ALL_TO_ALL) return nccl_all_to_all(cl, g, M);
    for (int p = 0; p < 3; p++) {
        double t;
        if (want == ALGO_AUTO || want == ALGO_RING || want == ALGO_HIER) {
            t = nccl_ring(cl, c, g, (PlanProto)p, M);
            if (t < best) { best = t; *algo = ALGO_RING; *proto = (PlanProto)p; }
        }
        if (c == COLL_ALL_REDUCE && (want == ALGO_AUTO || want == ALGO_TREE)) {
            t = nccl_tree(cl, g, (PlanProto)p, M);
            if (t < best) { best = t; *algo = ALGO_TREE; *proto = (PlanProto)p; }
        }
    }
    if (c == COLL_ALL_REDUCE && cl->device.nvls && g.nodes <= 1 && (want == ALGO_AUTO || want == ALGO_NVLS)) {
        double t = nccl_nvls(cl, M);
        if (t < best || want == ALGO_NVLS) { best = t; *algo = ALGO_NVLS; *proto = PROTO_SIMPLE; }
    }
    if (best == INFINITY && want != ALGO_RING) return nccl_best(cl, c, ALGO_RING, g, M, algo, proto);
    return best;
}

/* ---- one pod, either model --------------------------------------------- */

/* c on g inside one pod: the measured figures, NCCL's tuner or MPI's
 * alpha-beta. */
static double in_pod(const Cluster *cl, PlanCollective c, PlanAlgo algo, PlanGroup g, double M,
                     PlanAlgo *chosen, PlanProto *proto)
{
    *chosen = ALGO_RING;
    *proto = PROTO_SIMPLE;
    if (M <= 0 || g.size <= 1) return 0;
    double mt = measured(g.nodes > 1 ? &cl->inter : &cl->intra, c, g, M);
    if (mt >= 0 && g.nodes <= 1 && (algo == ALGO_AUTO || algo == ALGO_RING)) return mt;
    if (plan_cluster_nccl(cl)) return nccl_best(cl, c, algo, g, M, chosen, proto);
    Wire w = wire(cl, g.nodes > 1);
    double best = INFINITY;
    PlanAlgo tries[] = { ALGO_RING, ALGO_TREE, ALGO_HIER };
    for (int i = 0; i < 3; i++) {
        PlanAlgo a = tries[i];
        if (algo != ALGO_AUTO && algo != a) continue;
        double t;
        if (a == ALGO_TREE && c != COLL_ALL_REDUCE) continue;
        if (a == ALGO_HIER) {
            if (g.nodes <= 1 || g.local <= 1) continue;
            t = hier(cl, c, g, M);
        } else {
            t = flat(c, a, g.size, w, M);
        }
        if (t < best) { best = t; *chosen = a; }
    }
    if (best == INFINITY) best = flat(c, ALGO_RING, g.size, w, M);   /* asked for N/A: ring */
    return best;
}

/* ---- pods -------------------------------------------------------------- */

double plan_cut_bound(const Cluster *cl, PlanCollective c, PlanGroup g, double bytes)
{
    int64_t P = pods_of(g);
    if (P <= 1 || bytes <= 0 || cl->pod.bandwidth <= 0) return 0;
    double m = (double)g.size / (double)P;   /* members per pod, each with its pod-link share */
    double dp = (double)P;
    switch (c) {   /* bytes that leave one pod / that pod's pod-link bandwidth */
    case COLL_ALL_REDUCE:     return 2 * (dp - 1) / dp * bytes / (m * cl->pod.bandwidth);
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER: return (dp - 1) / dp * bytes / (m * cl->pod.bandwidth);
    case COLL_ALL_TO_ALL:     return (dp - 1) / dp * bytes / cl->pod.bandwidth;
    case COLL_BROADCAST:
    case COLL_REDUCE:         return bytes / (m * cl->pod.bandwidth);
    case COLL_P2P:            return bytes / cl->pod.bandwidth;
    }
    return 0;
}

/* One ring of P members (one per pod) on the pod link, alpha-beta with
 * the link's latency per round and PLAN_LINK_EFF_INTER of its bandwidth. */
static double across_pods(const Cluster *cl, PlanCollective c, int64_t P, double M)
{
    Wire w = { cl->pod.latency, cl->pod.bandwidth * eff_of(&cl->pod, PLAN_LINK_EFF_INTER) };
    if (w.bw <= 0) w.bw = 1e-30;
    return flat(c, ALGO_RING, P, w, M);
}

/* c over a group spanning P pods: inside the pods, across, inside again. */
static double over_pods(const Cluster *cl, PlanCollective c, PlanAlgo algo, PlanGroup g, double M,
                        PlanAlgo *chosen, PlanProto *proto)
{
    int64_t P = pods_of(g), m = (g.size + P - 1) / P;
    PlanGroup pg = { .size = m, .local = g.local < m ? g.local : m, .pods = 1 };   /* one pod's members */
    pg.nodes = (m + pg.local - 1) / pg.local;
    double share = M / (double)m, t;
    switch (c) {
    case COLL_ALL_REDUCE:
        t = in_pod(cl, COLL_REDUCE_SCATTER, algo, pg, M, chosen, proto) + across_pods(cl, c, P, share) +
            in_pod(cl, COLL_ALL_GATHER, algo, pg, M, chosen, proto);
        break;
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
        t = across_pods(cl, c, P, share) + in_pod(cl, c, algo, pg, M, chosen, proto);
        break;
    case COLL_ALL_TO_ALL:
        t = in_pod(cl, c, algo, pg, M / (double)P, chosen, proto) + across_pods(cl, c, P, M);
        break;
    default:
        t = in_pod(cl, c, algo, pg, M, chosen, proto) + across_pods(cl, c, P, M);
        break;
    }
    *chosen = ALGO_HIER;
    return t;
}

double plan_overlap_compute(const Cluster *cl, PlanGroup g)
{
    const Link *l = pods_of(g) > 1 ? &cl->pod : g.nodes > 1 ? &cl->inter : &cl->intra;
    if (l->overlap_compute > 0) return l->overlap_compute > 1 ? l->overlap_compute : 1;
    int sms = cl->device.sms;
    if (!plan_cluster_nccl(cl) || sms <= PLAN_NCCL_CHANNELS) return 1;
    return (double)sms / (double)(sms - PLAN_NCCL_CHANNELS);
}

PlanCommCost plan_comm_cost(const Cluster *cl, PlanCollective c, PlanAlgo algo,
                            PlanGroup g, double bytes)
{
    PlanCommCost r = { .time = 0, .bus_factor = plan_bus_factor(c, c == COLL_P2P ? 2 : g.size),
                       .algo = ALGO_RING, .proto = PROTO_SIMPLE, .inter = g.nodes > 1,
                       .tier = plan_group_tier(g) };
    if (bytes <= 0 || (c != COLL_P2P && g.size <= 1)) return r;
    if (c == COLL_P2P) {   /* one send; NCCL's p2p is not in its tuner: the link's alpha-beta */
        const Link *l = pods_of(g) > 1 ? &cl->pod : g.nodes > 1 ? &cl->inter : &cl->intra;
        double mt = measured(l, c, g, bytes);
        if (mt >= 0 && g.nodes <= 1) { r.time = mt; return r; }
        bool nccl = plan_cluster_nccl(cl) && pods_of(g) <= 1;
        double eff = eff_of(l, nccl ? (g.nodes > 1 ? PLAN_NCCL_EFF_NET : PLAN_NCCL_EFF_NVLINK)
                                    : (g.nodes > 1 || pods_of(g) > 1 ? PLAN_LINK_EFF_INTER : PLAN_LINK_EFF_INTRA));
        Wire w = { l->latency, l->bandwidth * eff };
        if (w.bw <= 0) w.bw = 1e-30;
        r.time = fmax(flat(c, ALGO_RING, 2, w, bytes), plan_cut_bound(cl, c, g, bytes));
        return r;
    }
    if (pods_of(g) > 1)
        r.time = fmax(over_pods(cl, c, algo, g, bytes, &r.algo, &r.proto), plan_cut_bound(cl, c, g, bytes));
    else
        r.time = in_pod(cl, c, algo, g, bytes, &r.algo, &r.proto);
    return r;
}
