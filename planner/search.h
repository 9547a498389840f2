/*
 * search.h: `planc search` — every DP x TP x PP layout of a model on a
 * cluster (with ZeRO stage, micro-batch, schedule, model chunks,
 * recomputation and sequence parallelism), ranked by the same memory and
 * cost model `planc check` uses.
 *
 * The search is exhaustive: every layout of the space is accounted for,
 * either evaluated in full with plan_evaluate_layout() (cost.h) or
 * discarded by a bound that is proven never to discard a layout that would
 * have been kept (a lower bound on its step time above the K-th best, or a
 * lower bound on its memory above the device's capacity). Bounds come from
 * per-block costs memoised once per way of cutting a layer (tp, sequence
 * parallelism, micro-batch, recomputation), so each layout costs a few
 * additions, not a pass over the model.
 */
#ifndef PLANC_SEARCH_H
#define PLANC_SEARCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "planner/plan.h"
#include "planner/cost.h"
#include "planner/evaluate.h"

typedef struct {
    int  top;          /* K: results kept, best first (>= 1) */
    int  max_tp;       /* largest tensor-parallel degree; 0: no limit */
    bool tp_in_node;   /* a TP group never spans nodes (tp divides gpus_per_node) */
    bool prune;        /* use the bounds (false: evaluate every layout; tests) */
    bool record;       /* keep every layout of the space in PlanSearch.points */
} PlanSearchOptions;

/* The defaults of `planc search`: top 10, no tp limit, TP in a node, pruning on. */
PlanSearchOptions plan_search_defaults(void);

/* One layout of the space, as the search saw it (PlanSearchOptions.record). */
typedef struct {
    Layout   layout;
    bool     exact;       /* evaluated in full; false: known by its bounds only */
    bool     feasible;    /* fits in memory (exact or certain from the bounds) */
    double   step_time;   /* s: exact, or the lower bound that pruned it */
    uint64_t peak_memory; /* bytes: exact, or the estimate from memoised costs */
} PlanSearchPoint;

/* Why layouts were dropped. */
typedef struct {
    int64_t memory;        /* some stage over the device's capacity */
    int64_t invalid;       /* rejected by plan_layout_check (should be 0) */
} PlanSearchDrops;

typedef struct PlanSearch {
    int64_t          considered;   /* layouts in the space (JSON "evaluated") */
    int64_t          feasible;     /* of which fit in memory */
    int64_t          evaluated;    /* of which evaluated in full (JSON "evaluated_in_full") */
    int64_t          pruned;       /* feasible layouts a time bound ruled out of the top K */
    PlanSearchDrops  dropped;
    int64_t          bound_violations; /* full evaluations that contradicted a bound
                                          (0 unless the cost model changed under the
                                          search; then it reran without pruning) */
    double           search_time_s;  /* s: wall time of the search (enumeration, bounds,
                                        full evaluations, ranking) */
    double           search_cpu_s;   /* s: CPU time of the same (one core, whatever the load) */
    double           simulate_time_s;/* s: then lowering and simulating the top K */
    int              n_results;
    PlanEval        *results;      /* [n_results] best first: step time, then peak memory */
    double          *sim_step;     /* [n_results] s: the step time `check` reports, the
                                      result's Program simulated (= results[i].step_time,
                                      the same simulation over the micro-steps) */
    double          *sim_bubble;   /* [n_results] the simulated bubble fraction */
    int              top;          /* K asked for */
    /* when nothing fits: the layout with the smallest peak memory */
    bool             has_closest;
    PlanEval         closest;
    /* every layout (only with PlanSearchOptions.record) */
    int64_t          n_points;
    PlanSearchPoint *points;
} PlanSearch;

/* Search the layouts of plan p, honouring every field its plan block sets
 * (the rest are searched). Returns false (reason in why) when the space is
 * empty or the constraints contradict each other; true otherwise, even if
 * nothing fits (n_results 0, has_closest set). Free with plan_search_free. */
bool plan_search(const Plan *p, const PlanSearchOptions *o, PlanSearch *s,
                 char *why, size_t len);
void plan_search_free(PlanSearch *s);

/* The largest part of a result's step ("compute", "bubble", "TP comm", ...). */
const char *plan_search_dominant(const PlanEval *e);

/* Print the counts and the table of the top results (README, search). */
void plan_search_print(FILE *out, const Plan *p, const PlanSearch *s);

/* Print {"evaluated", "feasible", "search_time_s", "results": [...]}, each
 * result the object `check --json` prints for its layout. */
void plan_search_json(FILE *out, const Plan *p, const PlanSearch *s);

/* Print the plan block of layout l (`plan { dp 8; ... }`), as `planc fmt`
 * would write it. */
void plan_search_print_layout_block(FILE *out, const Layout *l);

#endif /* PLANC_SEARCH_H */
