/*
 * simulate.h: event simulation of a Program over all pipeline stages.
 *
 * Gives the step time, the pipeline bubble, what each stage's compute
 * stream spent its time on, and a timeline (per stage, per op: start, end)
 * that `planc trace` draws. The fast path (plan_simulate_costs) is the same
 * simulation over the ops the lowering's expansion makes (program.h,
 * plan_expand_step), without keeping them: the two give equal doubles.
 *
 * The pipeline bubble, one definition for `check`, `search` and `trace`:
 * the time the compute stream of the critical stage (the one whose last op
 * ends last) waits for another stage — its receive waits, and its wait at
 * a collective over several stages (the tied-embedding and the
 * gradient-norm all-reduce) for the last member to arrive; the bubble
 * fraction is that over the stage's forward/backward compute time
 * (Narayanan et al. 2021: (p-1)/m for 1F1B on uniform stages). With one
 * stage there is nobody to wait for: 0 s, fraction 0.
 */
#ifndef PLANC_SIMULATE_H
#define PLANC_SIMULATE_H

#include <stdbool.h>
#include "planner/program.h"

typedef struct {
    double start, end;      /* seconds from the start of the step */
} PlanSpan;

/* Where one stage's compute stream spent the step, seconds; the items
 * add up to `end` (up to rounding). */
typedef struct {
    double busy;            /* forward/backward op durations (with TP collectives) */
    double bubble;          /* waiting for another stage (see the essay) */
    double stall;           /* ZeRO-3: compute ops waiting for their parameter gathers */
    double slowed;          /* compute lost to DP/ZeRO collectives running beside it
                               (PlanProgram.overlap_compute; 0 without a measured factor) */
    double p2p;             /* blocking sends, and waits for the stage's own sends
                               before the step-level collectives */
    double comm_wait;       /* waits for the stage's own DP reductions (comm stream)
                               before the step-level ops and the optimizer */
    double sp_norm, embed, norm;  /* the step-level collectives (OP_SP_NORM_REDUCE,
                                     OP_EMBED_REDUCE, OP_NORM_REDUCE) */
    double opt, sync;       /* OP_OPT_STEP, OP_SYNC_PARAMS */
    double end;             /* the stage's last op ends */
} PlanStageTimes;

typedef struct {
    int        pp;
    double     step_time;       /* s: last op of any stage ends */
    double     pipeline_time;   /* s: last forward/backward of any stage ends */
    double     busy_max;        /* s: largest per-stage sum of forward/backward durations */
    int        critical;        /* the stage whose last op ends last (the lowest on ties) */
    double     bubble;          /* s: the critical stage's bubble (see the essay) */
    double     bubble_fraction; /* bubble / the critical stage's compute time */
    PlanStageTimes *times;      /* [pp] per stage */
    double    *busy;            /* [pp] per-stage compute (fwd/bwd) seconds */
    PlanSpan **span;            /* [pp][n_ops of the stage]: when each op ran */
} PlanSimResult;

/* Run the Program. Compute ops run in list order on the stage's compute
 * stream; a RECV waits for its matching SEND's data; sends run on a p2p
 * stream (blocking ones on the compute stream); DP/ZeRO collectives on a
 * comm stream, a GATHER feeding its compute op layer by layer, a REDUCE
 * draining its compute op's gradients bucket by bucket; the step-level
 * collectives wait for all of the stage's streams and hold the compute
 * stream, the embedding and gradient-norm ones until every member stage
 * has arrived; OPT_STEP waits for every reduction. Returns false if the
 * Program deadlocks (a RECV whose SEND never comes). */
bool plan_simulate(const PlanProgram *p, PlanSimResult *out);
void plan_sim_free(PlanSimResult *r);

/* The figures of a simulation without its timeline. */
typedef struct {
    double step_time, pipeline_time, busy_max, bubble, bubble_fraction;  /* as PlanSimResult */
    int    critical;
    PlanStageTimes times;   /* of the critical stage */
} PlanSimSummary;

/* The same simulation, op for op, of the Program plan_lower_costs(c) would
 * build, without building it: each stage's micro-steps (schedule.h) are
 * expanded by plan_expand_step / plan_expand_tail and timed by the very
 * code plan_simulate uses, so every figure equals plan_simulate's
 * exactly; memory is linear in the number of micro-steps, not in the
 * ops. False on a deadlock or out of memory. */
bool plan_simulate_costs(const PlanOpCosts *c, PlanSimSummary *out);

#endif /* PLANC_SIMULATE_H */
