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
 * additions, not a pass over the model. The work is bounded before it
 * starts (PlanSearchOptions.max_layouts and the micro-step limits below):
 * a space too large is refused, never half searched, and a search whose
 * simulation budget runs out says so (PlanSearch.capped).
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
    int64_t max_layouts; /* refuse a space of more layouts (counted before any is
                            evaluated); 0: no limit */
    /* NULL, or which layouts may be ranked at all (`search --for`: those a
     * framework can run): a layout it refuses is counted in
     * PlanSearchDrops.refused and never evaluated; the first reason is
     * kept in PlanSearch.refused_why */
    bool (*admit)(const Plan *p, const Layout *l, void *ctx, char *why, size_t len);
    void   *admit_ctx;
} PlanSearchOptions;

/* The defaults of `planc search`: top 10, no tp limit, TP in a node, pruning
 * on, at most PLAN_SEARCH_MAX_LAYOUTS layouts. */
PlanSearchOptions plan_search_defaults(void);

/* The default of --max-layouts. The work of a space is its layouts plus
 * the chunk costs their estimates add up (pp x chunks per layout shape:
 * deep interleaving of a model of thousands of blocks), counted as one
 * layout per PLAN_SEARCH_SUMS_PER_LAYOUT sums (measured on one core: a
 * layout 3-4 us, a sum about 5 ns). 1.5 million is at most about 6 s and
 * 300 MiB of enumeration (tests/test_search_bench.c measures it). */
#define PLAN_SEARCH_MAX_LAYOUTS     1500000
#define PLAN_SEARCH_SUMS_PER_LAYOUT 512

/* Micro-steps (forward, backward or weight pass of one micro-batch on one
 * chunk) the search simulates at most: per layout (plan_evaluate_layout
 * holds up to about 30 bytes and 20-100 ns per micro-step: 2^23 is under
 * 0.25 GiB and 1 s) and over the whole search (2^24: 0.3-1.7 s). A layout over the first is not
 * evaluated (PlanSearchDrops.too_large); once the second is spent the
 * search stops evaluating and says so (PlanSearch.capped). */
#define PLAN_SEARCH_MAX_STEPS_LAYOUT (1ll << 23)
#define PLAN_SEARCH_MAX_STEPS_TOTAL  (1ll << 24)

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
    int64_t too_large;     /* feasible or not, a Program of more than
                              PLAN_SEARCH_MAX_STEPS_LAYOUT micro-steps: not simulated */
    int64_t refused;       /* PlanSearchOptions.admit said no (not evaluated) */
} PlanSearchDrops;

typedef struct PlanSearch {
    int64_t          space;        /* layouts in the space, counted before enumerating
                                      (= considered when the search ran) */
    double           space_sums;   /* chunk sums its estimates take (counted with it) */
    double           space_work;   /* space + space_sums / PLAN_SEARCH_SUMS_PER_LAYOUT: what
                                      --max-layouts bounds */
    int64_t          considered;   /* layouts in the space (JSON "evaluated") */
    bool             refused;      /* space > max_layouts: nothing was enumerated */
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
    int64_t          collapsed;    /* layouts identical in every figure to a result
                                      shown, folded into it (see plan_search) */
    char             refused_why[512]; /* the first layout admit refused, and why */
    bool             capped;       /* PLAN_SEARCH_MAX_STEPS_TOTAL ran out: the results
                                      are the best of the layouts evaluated, not proven */
    /* context parallelism (issue 26): whether cp > 1 was searched, why not
     * (cp_skip), and the best evaluated layout with cp 1 and with cp > 1
     * ([0] and [1]), for the line that says why the search chose either */
    bool             cp_searched;
    char             cp_skip[160];
    bool             cp_has[2];
    PlanEval         cp_best[2];   /* step_time and layout only (no stages) */
    bool             cp_fit[2];    /* some layout of the class may fit (its memory estimate) */
    /* when nothing fits: the layout with the smallest peak memory */
    bool             has_closest;
    PlanEval         closest;
    /* every layout (only with PlanSearchOptions.record) */
    int64_t          n_points;
    PlanSearchPoint *points;
} PlanSearch;

/* Search the layouts of plan p, honouring every field its plan block sets
 * (the rest are searched). The results are distinct layouts: at pp 1 the
 * schedule is not searched (1F1B; the plan block may fix another), at dp
 * 1 nor is ZeRO (stage 0: nothing to shard), and a layout whose every
 * figure equals a result's is folded into it, keeping the simplest (lowest
 * zero, fewest chunks, least recomputation, sequence parallelism off).
 * The space is counted first; when its work (PlanSearch.space_work) is
 * over o->max_layouts the search refuses.
 * Returns false (reason in why) when the space is empty, too large, or the
 * constraints contradict each other; true otherwise, even if nothing fits
 * (n_results 0, has_closest set). Free with plan_search_free. */
/* The one line that says why the best result has cp 1 or cp > 1 (the
 * best layout of the other kind and its step time, or that none fits, or
 * why cp > 1 was not searched), into buf; false when there is nothing to
 * say (no result). */
bool plan_search_cp_note(const PlanSearch *s, char *buf, size_t len);

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

/* Whether `key` of a plan block is one the layout block above sets (the
 * layout a search decides); the others (the run's software) are given. */
bool plan_search_layout_key(const char *key);

#endif /* PLANC_SEARCH_H */
