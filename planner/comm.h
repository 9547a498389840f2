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
    COLL_ALL_TO_ALL,      /* (n-1)/n */
    COLL_P2P,             /* 1: one send to one receiver */
} PlanCollective;         /* ORDER PlanCollective */

typedef enum {
    ALGO_AUTO,            /* the cheapest of the ones below (NCCL's tuner) */
    ALGO_RING,            /* one ring over all members */
    ALGO_TREE,            /* double binary tree (all-reduce only) */
    ALGO_HIER,            /* inside the node, across nodes, inside again */
} PlanAlgo;               /* ORDER PlanAlgo */

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
} PlanGroup;

typedef struct {
    double   time;        /* seconds */
    double   bus_factor;  /* nccl-tests bus-bandwidth factor of the collective */
    PlanAlgo algo;        /* the algorithm chosen */
    bool     inter;       /* crosses the inter-node link */
} PlanCommCost;

/* Fraction of a link's bandwidth a collective reaches for large messages
 * (nccl-tests busbw on DGX A100/H100: ~80 % of NVLink, ~90 % of IB). */
#define PLAN_LINK_EFF_INTRA 0.80
#define PLAN_LINK_EFF_INTER 0.90

/* nccl-tests bus-bandwidth factor of collective c over n ranks. */
double plan_bus_factor(PlanCollective c, int64_t n);

/* Shape of the group of `size` members whose ranks are `stride` apart. */
PlanGroup plan_group_shape(int64_t gpus_per_node, int64_t stride, int64_t size);

/* Shape of the TP, DP or PP group under layout (dp, tp, pp). */
PlanGroup plan_layout_group(const Cluster *cl, int dp, int tp, int pp, PlanGroupKind k);

/* Cost of collective c of `bytes` (see PlanCollective for which size) over
 * group g with algorithm `algo` (ALGO_AUTO picks the cheapest). For
 * COLL_P2P, g.nodes > 1 means the two ends are on different nodes. */
PlanCommCost plan_comm_cost(const Cluster *cl, PlanCollective c, PlanAlgo algo,
                            PlanGroup g, double bytes);

const char *plan_collective_name(PlanCollective c);
const char *plan_algo_name(PlanAlgo a);

#endif /* PLANC_COMM_H */
