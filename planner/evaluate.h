/*
 * evaluate.h: the evaluation of one layout — what `planc check` prints and
 * `planc search` ranks: validity, memory per stage, the step time and
 * where it goes, throughput.
 *
 * The driver of the planner core (see the call graph in evaluate.c): it
 * checks the layout (layout.h), builds the cost table (cost.h), the memory
 * per stage (memory.h), and times the step with the fast path of the
 * simulator (simulate.h) over the schedule (schedule.h) — the same figures
 * as lowering the plan into its Program (program.h) and simulating that.
 */
#ifndef PLANC_EVALUATE_H
#define PLANC_EVALUATE_H

#include <stdbool.h>
#include <stdint.h>
#include "planner/plan.h"
#include "planner/memory.h"

/* Where one step goes on the critical stage (the one that ends last),
 * seconds. compute + tp + ep + p2p + dp_exposed + gather_exposed + sp_norm +
 * embed + norm + optimizer + sync + bubble = the step time (up to
 * rounding): each is booked by the simulator (simulate.h, PlanStageTimes). */
typedef struct {
    double compute;          /* forward + backward GEMMs and kernels (incl. recompute, and the
                                slowdown of compute beside DP/ZeRO collectives, Link.overlap_compute) */
    double recompute;        /* of which recomputation */
    double tp;               /* TP collectives, exposed (synchronous) */
    double ep;               /* EP all-to-alls of the mixtures (dispatch, combine), synchronous */
    double cp, cp_total;     /* the CP attention's transfers (cp > 1): exposed (what the compute
                                waits for), and all of them (the ring's overlapped too) */
    double p2p;              /* PP sends holding the compute stream (blocking sends) */
    double dp_total, dp_exposed;        /* DP gradient reduce: total, waited for */
    double gather_total, gather_exposed;/* ZeRO-3 parameter all-gathers: total, waited for */
    double sync;             /* ZeRO-1/2 parameter all-gather after the step */
    double sp_norm;          /* TP all-reduce of sequence-parallel norm gradients */
    double embed;            /* tied-embedding gradient all-reduce (first and last stage) */
    double norm;             /* gradient-norm all-reduce over all ranks */
    double optimizer;        /* AdamW */
    double bubble;           /* pipeline bubble: waiting for other stages (simulate.h) */
} PlanTimes;

/* Everything `check` reports about one layout. */
typedef struct {
    bool       valid;          /* layout is legal for model and cluster */
    bool       feasible;       /* valid and every stage fits */
    char       why[256];       /* reason when not valid or not feasible */
    Layout     layout;
    int64_t    n_micro;
    uint64_t   params;         /* total, exact */
    uint64_t   active_params;  /* what one token passes (MoE: router + top_k + shared experts) */
    int        pp;
    PlanStageMem *stages;      /* [pp] */
    int        worst_stage;    /* stage with the least headroom */
    uint64_t   peak_memory;    /* bytes, largest stage total */
    double     step_time;      /* s */
    double     bubble_fraction;/* times.bubble / the critical stage's compute time (simulate.h) */
    int        critical;       /* the stage whose last op ends last */
    double     tokens_per_s;
    double     tflops_per_gpu; /* model FLOPs / step / GPU / 1e12 */
    double     mfu, hfu;       /* model / hardware FLOPs utilisation */
    double     model_flops;    /* per step, all GPUs */
    double     hw_flops;       /* per step, all GPUs, with recomputation */
    PlanTimes  times;
} PlanEval;

/* The fast path: resolve defaults, check, cost, memory and step time (the
 * simulated Program's, without building it) of plan p. Always fills ev
 * (valid=false with a reason when the layout is illegal). Free with
 * plan_eval_free. */
void plan_evaluate(const Plan *p, PlanEval *ev);
/* The same for an explicit resolved layout (used by search). */
void plan_evaluate_layout(const Plan *p, const Layout *l, PlanEval *ev);
/* The same with the shape index of p's model built once by the caller
 * (cost.h, plan_shapes_build; NULL: built for the call), so a search's
 * evaluations cost O(distinct shapes + chunks) each, not O(layers). */
struct PlanShapes;
void plan_evaluate_layout_shaped(const Plan *p, const struct PlanShapes *sh, const Layout *l, PlanEval *ev);
void plan_eval_free(PlanEval *ev);

#endif /* PLANC_EVALUATE_H */
