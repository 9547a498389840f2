/*
 * comm.h: what a collective costs on a cluster's links (alpha-beta model).
 *
 * A process group is described by its shape on the topology: how many of
 * its members share a node (`local`) and over how many nodes it spreads
 * (`nodes`). The rank layout is Megatron's, rank = tp + TP*(dp + DP*pp), so
 * the TP, DP and PP groups are strided sets of ranks whose shape follows
 * from the strides and the GPUs per node.
 */
#ifndef PLANC_COMM_H
#define PLANC_COMM_H

#include <stdbool.h>
#include <stdint.h>
#include "planner/plan.h"

typedef enum {
    COLL_ALL_REDUCE,      /* bus factor 2(n-1)/n */
    COLL_ALL_GATHER,      /* (n-1)/n, size = the gathered output */
    COLL_REDUCE_SCATTER,  /* (n-1)/n, size = the full input */
    COLL_BROADCAST,       /* 1 */
    COLL_REDUCE,          /* 1 */
    COLL_ALL_TO_ALL,      /* (n-1)/n, size = one rank's send buffer (its pieces for
                             every member, its own included) */
    COLL_P2P,             /* 1: one send to one receiver */
} PlanCollective;         /* ORDER PlanCollective */

typedef enum {
    ALGO_AUTO,            /* the cheapest of the ones below (NCCL's tuner) */
    ALGO_RING,            /* one ring over all members */
    ALGO_TREE,            /* double binary tree (all-reduce only) */
    ALGO_HIER,            /* inside the node, across nodes, inside again */
    ALGO_NVLS,            /* NVSwitch multicast + in-switch reduction inside a node
                             (NCCL's NVLS, all-reduce, devices with Device.nvls) */
} PlanAlgo;               /* ORDER PlanAlgo */

/* NCCL's protocols (src/graph/tuning.cc): LL and LL128 flag every 8 or
 * 128 bytes, low latency and a fraction of the bandwidth; Simple moves
 * whole chunks behind a fence, full bandwidth and the largest latency.
 * Clusters without NCCL (the CPU target on MPI) are PROTO_SIMPLE. */
typedef enum {
    PROTO_LL,
    PROTO_LL128,
    PROTO_SIMPLE,
} PlanProto;              /* ORDER PlanProto */

/* The tiers of the network a group can span. */
typedef enum {
    TIER_NODE,            /* inside one node (NVLink) */
    TIER_POD,             /* across nodes of one pod (InfiniBand) */
    TIER_PODS,            /* across pods (Cluster.pod) */
} PlanTier;               /* ORDER PlanTier */

typedef enum {
    GROUP_TP,             /* the tensor-parallel ranks of a stage */
    GROUP_DP,             /* the data-parallel replicas of a stage's shard */
    GROUP_PP,             /* the stages of one pipeline */
    GROUP_EMBED,          /* Megatron's embedding group: the first and the last stage of a
                             pipeline (same dp and tp rank), which both hold the tied word table */
    GROUP_ALL,            /* every rank (the gradient-norm all-reduce) */
} PlanGroupKind;          /* ORDER PlanGroupKind */

/* A group's shape on the topology. */
typedef struct {
    int64_t size;         /* members */
    int64_t local;        /* members per node */
    int64_t nodes;        /* nodes it spans */
    int64_t pods;         /* pods it spans (0 or 1: one; Cluster.nodes_per_pod) */
} PlanGroup;

typedef struct {
    double   time;        /* seconds */
    double   bus_factor;  /* nccl-tests bus-bandwidth factor of the collective */
    PlanAlgo algo;        /* the algorithm chosen */
    PlanProto proto;      /* the protocol chosen (NCCL's tuner) */
    bool     inter;       /* crosses the inter-node link */
    PlanTier tier;        /* the widest tier it crosses */
} PlanCommCost;

/* MPI (clusters without NCCL: the CPU target): the fraction of a link's
 * bandwidth a collective reaches for large messages; the pod link (TCP
 * or RoCE between pods) takes the inter-node figure. */
#define PLAN_LINK_EFF_INTRA 0.80
#define PLAN_LINK_EFF_INTER 0.90

/* NCCL (GPU clusters), measured bus bandwidth over the line rate:
 *  NVLink ring: nccl-tests all-reduce on one DGX H100 without NVLS,
 *    ~370 GB/s of 450 (published-runs.md); NCCL's tuner caps it at 235
 *    GB/s on Ampere, 370 on Hopper (comm.c nccl_bus_cap);
 *  NVLS: 480 GB/s busbw at 8 GiB on 8 GPUs, algbw 480 / (2 * 7/8) =
 *    274 GB/s = (5/6, NCCL's NVLS ratio) * 0.731 * 450 (NVIDIA
 *    dgxc-benchmarking `nccl` README);
 *  InfiniBand: 46-48 GB/s busbw per 400 Gb/s NDR NIC (nccl-tests issue
 *    #290): 47 / 50. */
#define PLAN_NCCL_EFF_NVLINK (370.0 / 450.0)
#define PLAN_NCCL_EFF_NVLS   0.731
#define PLAN_NCCL_EFF_NET    (47.0 / 50.0)
/* NCCL's NVLS latency and the chunk pipeline's fill, s: the two
 * figures of the model fitted to the dgxc-benchmarking DGX H100 curve
 * (1 MiB 67, 16 MiB 237, 128 MiB 400, 1 GiB 466, 8 GiB 480 GB/s; two
 * parameters, five points, each within 10 %). The fill is the optimally
 * pipelined transfer's 2 sqrt(a M / B) (a chunked collective reaches its
 * bandwidth only once its chunk slots are full; Traff's pipelining bound
 * (sqrt(a) + sqrt(M/B))^2 = a + M/B + 2 sqrt(a M/B)). */
#define PLAN_NCCL_NVLS_LAT   14e-6
#define PLAN_NCCL_FILL       9.8e-6
/* Channels (one thread block each on its own SM) NCCL runs a collective
 * on: 16 on 8-NIC nodes (two per NIC, NCCL's usual choice; an assumption,
 * not a measurement), the number that caps LL128 and tree bandwidth per
 * channel and that the compute beside it loses (plan_overlap_compute). */
#define PLAN_NCCL_CHANNELS   16

/* nccl-tests bus-bandwidth factor of collective c over n ranks. */
double plan_bus_factor(PlanCollective c, int64_t n);

/* Shape of the group of `size` members whose ranks are `stride` apart. */
PlanGroup plan_group_shape(int64_t gpus_per_node, int64_t stride, int64_t size);

/* Shape of the TP, DP or PP group under layout (dp, tp, pp), pods too. */
PlanGroup plan_layout_group(const Cluster *cl, int dp, int tp, int pp, PlanGroupKind k);

/* The CP group of a layout (issue 26): cp ranks tp apart (rank = tp +
 * TP*(cp + CP*(dp + DP*pp))), inside one NVLink domain while tp x cp
 * fits in it. The gradient group, dp x cp ranks with the same (tp, pp),
 * is the DP group of plan_layout_group called with dp x cp (its ranks are
 * tp apart too): that call gives it, and the PP group's stride, under cp. */
PlanGroup plan_cp_group(const Cluster *cl, int tp, int cp);
/* The pair a pipeline send from stage s to stage (s + 1) % pp runs on:
 * inside a node when the PP group keeps two stages a node (as before),
 * else across nodes, and across pods when the two stages' first ranks
 * lie in different pods (pods 2). */
PlanGroup plan_pp_pair(const Cluster *cl, int dp, int tp, int pp, int s);

/* ---- MoE (issues 17, 25) ---- */

/* The EP group of a layout: ep ranks etp apart (the stage's tp x dp ranks
 * laid out etp x ep x expert-DP, Megatron-Core's expert rank generator;
 * at etp = tp: ep consecutive DP ranks of one TP rank), with its pods. */
PlanGroup plan_ep_group(const Cluster *cl, int etp, int ep);
/* The expert-TP group: etp consecutive ranks (Megatron-Core's expert rank
 * order, tp-ep-dp-pp with etp in tp's place). */
PlanGroup plan_etp_group(const Cluster *cl, int etp);
/* The expert-DP group: the edp ranks holding the same experts, etp x ep
 * apart. */
PlanGroup plan_expert_dp_group(const Cluster *cl, int etp, int ep, int edp);

/* Bytes one rank moves on each tier in one dispatch (or combine) of a
 * mixture over EP group g: rows_bytes of rows sent (every routed row,
 * its own GPU's among them), tokens_bytes of its tokens once each. */
typedef struct {
    double nvlink;        /* inside the group's node (NVLink domain) */
    double network;       /* across nodes, on the rank's own rail */
} PlanMoeTierBytes;
PlanMoeTierBytes plan_moe_dispatch_bytes(PlanGroup g, int dispatcher, double rows_bytes, double tokens_bytes,
                                         int64_t experts, int64_t top_k);
/* Seconds of one DeepEP-style dispatch moving b over g: the network part
 * and the NVLink forwarding run at once (DeepEP's internode kernels:
 * RDMA senders, NVLink forwarders and receivers on their own SMs), one
 * latency of each tier it crosses. */
double plan_moe_dispatch_time(const Cluster *cl, PlanGroup g, PlanMoeTierBytes b);

/* The widest tier group g spans. */
PlanTier plan_group_tier(PlanGroup g);

/* Whether collectives on cl run on NCCL's model (a GPU: Device.sms > 0)
 * rather than MPI's alpha-beta one (the CPU target). */
bool plan_cluster_nccl(const Cluster *cl);

/* The cut bound of collective c of `bytes` over g when it spans pods:
 * the bytes that must cross between pods over the pod links' total
 * bandwidth (the members of one pod, Cluster.pod.bandwidth each), s; 0
 * inside one pod. plan_comm_cost never returns less. */
double plan_cut_bound(const Cluster *cl, PlanCollective c, PlanGroup g, double bytes);

/* The slowdown of compute while a collective on g runs beside it (>= 1):
 * the link's measured Link.overlap_compute where `planc calibrate` gave
 * one, else on a GPU the SMs NCCL's channels take, sms / (sms -
 * PLAN_NCCL_CHANNELS); 1 on a CPU without a measurement. */
double plan_overlap_compute(const Cluster *cl, PlanGroup g);

/* Cost of collective c of `bytes` (see PlanCollective for which size) over
 * group g with algorithm `algo` (ALGO_AUTO picks the cheapest). For
 * COLL_P2P, g.nodes > 1 means the two ends are on different nodes. */
PlanCommCost plan_comm_cost(const Cluster *cl, PlanCollective c, PlanAlgo algo,
                            PlanGroup g, double bytes);

const char *plan_collective_name(PlanCollective c);
const char *plan_algo_name(PlanAlgo a);
const char *plan_proto_name(PlanProto p);
const char *plan_tier_name(PlanTier t);

#endif /* PLANC_COMM_H */
