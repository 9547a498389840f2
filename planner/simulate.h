/*
 * simulate.h: event simulation of a Program over all pipeline stages.
 *
 * Gives the step time, the pipeline bubble and a timeline (per stage, per
 * op: start, end and stream) that `planc trace` draws.
 */
#ifndef PLANC_SIMULATE_H
#define PLANC_SIMULATE_H

#include <stdbool.h>
#include "planner/program.h"

typedef struct {
    double start, end;      /* seconds from the start of the step */
} PlanSpan;

typedef struct {
    int        pp;
    double     step_time;       /* s: last op of any stage ends */
    double     pipeline_time;   /* s: last forward/backward of any stage ends */
    double     busy_max;        /* s: largest per-stage sum of forward/backward durations */
    double     bubble_fraction; /* (pipeline_time - busy_max) / busy_max */
    double    *busy;            /* [pp] per-stage compute (fwd/bwd) seconds */
    PlanSpan **span;            /* [pp][n_ops of the stage]: when each op ran */
} PlanSimResult;

/* Run the Program. Compute ops run in list order on the stage's compute
 * stream; a RECV waits for its matching SEND's data; sends run on a p2p
 * stream; DP/ZeRO collectives on a comm stream, a GATHER feeding its
 * compute op layer by layer, a REDUCE draining its compute op's gradients
 * bucket by bucket; OPT_STEP waits for every reduction. Returns false if
 * the Program deadlocks (a RECV whose SEND never comes). */
bool plan_simulate(const PlanProgram *p, PlanSimResult *out);
void plan_sim_free(PlanSimResult *r);

/* The figures of a simulation without its timeline. */
typedef struct {
    double step_time, pipeline_time, busy_max, bubble_fraction;   /* as PlanSimResult */
    int    critical;        /* the stage whose last op ends last */
    double reduce_wait;     /* s: how long that stage's optimizer step waits,
                               after its last compute op, for its reductions */
} PlanSimSummary;

/* The same simulation, step for step, of the Program plan_lower_costs(c)
 * would build, without building it: the fast path's step time (cost.c),
 * equal to plan_simulate's up to rounding and linear in the number of
 * micro-steps. False on a deadlock or out of memory. */
bool plan_simulate_costs(const PlanOpCosts *c, PlanSimSummary *out);

#endif /* PLANC_SIMULATE_H */
