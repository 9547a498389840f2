/*
 * cost.h: the planner's fast path — per-chunk costs of a layout and the
 * evaluation of one layout (memory per stage and step time) without
 * building the Program.
 *
 * plan_costs() computes, for every model chunk (virtual pipeline stage),
 * the time of one micro-batch's forward and backward on one GPU, the
 * bytes and times of its collectives and what it keeps in memory. Costs of
 * identical layers are computed once (memoised by layer shape), so a layout
 * costs O(distinct layers + layers) to evaluate. plan_lower() reads the same
 * table to give the Program's ops their durations, and the fast path's
 * step time is the simulation of that same Program over its micro-steps
 * (simulate.h, plan_simulate_costs), so `check` and `search` agree.
 */
#ifndef PLANC_COST_H
#define PLANC_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "planner/plan.h"
#include "planner/layout.h"
#include "planner/memory.h"
#include "planner/program.h"

/* Device efficiency assumptions (README, section planner). Tile and wave
 * quantisation apply to tensor-core devices (16-bit peak > 2 x fp32 peak). */
#define PLAN_GEMM_EFF    0.80   /* fraction of dense peak large cuBLAS GEMMs reach */
#define PLAN_HBM_EFF     0.85   /* fraction of HBM bandwidth streaming kernels reach */
#define PLAN_KERNEL_GAP  2e-6   /* s, launch/ramp gap per kernel */
#define PLAN_TILE_MN     128    /* GEMM output tile edge (cuBLAS/CUTLASS) */
#define PLAN_TILE_K      32     /* GEMM k step */
#define PLAN_WAVE_TILES  128    /* tiles run concurrently when Device.sms is 0 (one per SM) */
#define PLAN_ADAM_BYTES  28.0   /* HBM bytes per parameter of one AdamW step */

/* The cost of one model chunk (virtual stage) for one micro-batch on one GPU. */
typedef struct {
    double   fwd;            /* s: forward compute + TP collectives */
    double   bwd;            /* s: backward (incl. recomputation) + TP collectives */
    double   bwd_input;      /* s: zb-h1 input-gradient part of bwd */
    double   bwd_weight;     /* s: zb-h1 weight-gradient part (bwd = input + weight) */
    double   fwd_tp, bwd_tp; /* s: TP collectives inside fwd / bwd (on the critical path) */
    double   recompute;      /* s: recomputed forward inside bwd */
    double   flops_fwd;      /* model FLOPs of the forward */
    double   flops_recompute;/* FLOPs recomputed in the backward */
    uint64_t params;         /* parameters per TP rank, before ZeRO */
    double   act_kept;       /* bytes kept from forward to backward */
    double   act_layer_max;  /* bytes of the largest layer's full activations */
    uint64_t layer_params_max; /* parameters of the largest layer, per TP rank */
    int      layers;         /* layers in the chunk (the gradient buckets) */
    double   p2p_bytes;      /* activation (or gradient) sent to the neighbour chunk */
    double   p2p;            /* s: its transfer */
    double   grad_bytes;     /* bytes of the chunk's gradients */
    double   reduce;         /* s: DP gradient all-reduce (ZeRO 0) or reduce-scatter */
    double   gather;         /* s: ZeRO-3 parameter all-gather of the chunk */
    double   sync;           /* s: ZeRO-1/2 all-gather of the updated parameters */
    double   embed;          /* s: tied-embedding gradient all-reduce between the first and
                                last stage (pp > 1, tied head), once per step, before the
                                optimizer (counted in PlanCosts.opt of the stage) */
} PlanChunkCost;

/* Costs of one layout. */
typedef struct PlanCosts {
    Layout         layout;    /* resolved (no PLAN_AUTO) */
    int64_t        n_micro;   /* micro-batches per step */
    int            n_chunks;  /* pp * chunks */
    PlanChunk     *chunk;     /* [n_chunks] layer ranges */
    PlanChunkCost *cost;      /* [n_chunks] */
    double        *opt;       /* [pp] s: optimizer step per stage */
    uint64_t      *opt_params;/* [pp] parameters one GPU updates */
    double         peak_flops;/* dense peak of the model dtype */
    uint64_t       params_total; /* parameters of the whole model, exact */
    bool           reduce_after_flush; /* Plan.grad_reduce_after_flush */
    bool           p2p_blocking;       /* Plan.p2p_blocking */
} PlanCosts;

/* Time breakdown of one step on the critical stage, seconds. */
typedef struct {
    double compute;          /* forward + backward GEMMs and kernels (incl. recompute) */
    double recompute;        /* of which recomputation */
    double tp;               /* TP collectives, exposed (synchronous) */
    double p2p;              /* PP sends on the critical path */
    double dp_total, dp_exposed;        /* DP gradient reduce: total, not hidden */
    double gather_total, gather_exposed;/* ZeRO-3 parameter all-gathers */
    double sync;             /* ZeRO-1/2 parameter all-gather after the step */
    double embed;            /* tied-embedding gradient all-reduce (first and last stage),
                                before the optimizer step, exposed */
    double optimizer;        /* AdamW */
    double bubble;           /* pipeline idle time */
} PlanTimes;

/* Everything `check` reports about one layout. */
typedef struct {
    bool       valid;          /* layout is legal for model and cluster */
    bool       feasible;       /* valid and every stage fits */
    char       why[256];       /* reason when not valid or not feasible */
    Layout     layout;
    int64_t    n_micro;
    uint64_t   params;         /* total, exact */
    int        pp;
    PlanStageMem *stages;      /* [pp] */
    int        worst_stage;    /* stage with the least headroom */
    uint64_t   peak_memory;    /* bytes, largest stage total */
    double     step_time;      /* s */
    double     bubble_fraction;/* pipeline idle / busy of the critical stage */
    double     tokens_per_s;
    double     tflops_per_gpu; /* model FLOPs / step / GPU / 1e12 */
    double     mfu, hfu;       /* model / hardware FLOPs utilisation */
    double     model_flops;    /* per step, all GPUs */
    double     hw_flops;       /* per step, all GPUs, with recomputation */
    PlanTimes  times;
} PlanEval;

/* Build the cost table of layout `l` (resolved and checked); false on
 * overflow of a parameter count. Free with plan_costs_free. */
bool plan_costs(const Plan *p, const Layout *l, PlanCosts *out);
void plan_costs_free(PlanCosts *c);

/* Seconds of one GEMM (m x k)(k x n), `batch` times, `e`-byte elements, on
 * device d at dense peak `peak`: roofline of tile- and wave-quantised
 * compute against HBM traffic, plus a kernel gap. */
double plan_gemm_time(const Device *d, double peak, double e,
                      double m, double n, double k, double batch);

/* A lower bound of the pipeline part of one step (forward/backward only,
 * no DP tail) from per-chunk costs, whatever the collectives cost: every
 * stage runs all its compute, after its first micro-batch's forward came
 * through the stages before it and (all schedules but zb-h1, whose last
 * ops are deferrable weight passes) before the last backward goes back
 * through them; under ZeRO-3 its last pass also waits for every gather
 * and earlier reduction its comm stream runs first. The search prunes with it; it never exceeds the
 * simulated step time of the same table (tests hold it to that). */
double plan_pipeline_time(const PlanCosts *c);

/* Fill c's grad_bytes, reduce, gather and sync (the DP collectives) from
 * its params and layers under layout l, as plan_costs does. */
void plan_chunk_dp_times(const Plan *p, const Layout *l, PlanChunkCost *c);

/* Copy a cost table into the lowering's per-virtual-stage arrays (oc
 * allocated with plan_op_costs_alloc for the same pp and chunks). */
void plan_op_costs_fill(const PlanCosts *pc, PlanOpCosts *oc);

/* The fast path: resolve defaults, check, cost, memory and step time (the
 * simulated Program's, without building it) of plan p. Always fills ev (valid=false with a reason when the
 * layout is illegal). Free with plan_eval_free. */
void plan_evaluate(const Plan *p, PlanEval *ev);
/* The same for an explicit resolved layout (used by search). */
void plan_evaluate_layout(const Plan *p, const Layout *l, PlanEval *ev);
void plan_eval_free(PlanEval *ev);

/* Closed-form bubble fractions of the schedules (uniform stages): GPipe and
 * 1F1B (p-1)/m, interleaved (p-1)/(v m), ZB-H1 (p-1)(F+B-W)/(m(F+B+W)). */
double plan_bubble_closed_form(int schedule, int p, int64_t m, int v,
                               double F, double B, double W);

#endif /* PLANC_COST_H */
