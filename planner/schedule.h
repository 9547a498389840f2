/*
 * schedule.h: the pipeline schedules as orders of compute micro-steps, and
 * where the gradient reductions go.
 *
 * A schedule is, for every stage, the order of its micro-steps F(mb,
 * chunk), B(mb, chunk) and (ZB-H1) W(mb) (PlanStep, program.h). The
 * lowering (lower.c) expands each step into ops; the simulator's fast path
 * (simulate.c) runs the same expansion without keeping the ops. Nothing
 * else may derive a schedule. This module reads durations (ZB-H1's list
 * scheduler places its weight passes with them) and calls no other module
 * of the planner.
 */
#ifndef PLANC_SCHEDULE_H
#define PLANC_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>
#include "planner/cost.h"
#include "planner/program.h"

/* Every stage's schedule as its order of micro-steps, the order
 * plan_lower_costs expands into ops: order[s] must hold 3 * n_micro *
 * chunks steps; len[s] receives the count. False when n_micro < 1 or
 * out of memory. */
bool plan_schedule_steps(const PlanOpCosts *c, PlanStep **order, int *len);

/* Micro-step i (0 <= i < 2 m, interleaved 2 m v) of stage s of p under a
 * gpipe, 1f1b or interleaved schedule of m micro-batches and v chunks, in
 * O(1) (zb-h1 is list-scheduled: use plan_schedule_steps). */
PlanStep plan_schedule_step(int schedule, int p, int s, int64_t m, int v, int i);
/* The same with `extra` forwards added to the warm-up of 1f1b and
 * interleaved (PlanOpCosts.warmup_extra: overlap_moe_a2a's, Megatron-Core's
 * num_warmup_microbatches + 1), at most all of them. */
PlanStep plan_schedule_step_x(int schedule, int p, int s, int64_t m, int v, int extra, int i);

/* Number of micro-steps of each stage under c's schedule: 2 m (gpipe,
 * 1f1b), 2 m v (interleaved), 3 m (zb-h1). */
int plan_schedule_len(const PlanOpCosts *c);

/* Seconds of the gradient reduction that follows the backward (zb-h1: the
 * weight pass) of micro-batch mb of virtual stage k, 0 for none: the
 * chunk's DP reduction after its last micro-batch (every one under
 * ZeRO-2/3); none when the reductions wait for the pipeline flush. */
double plan_reduce_after(const PlanOpCosts *c, int k, int mb);

/* Closed-form bubble fractions of the schedules (uniform stages, no
 * transfer time): GPipe and 1F1B (p-1)/m, interleaved (p-1)/(v m), ZB-H1
 * (p-1)(F+B-W)/(m(F+B+W)) — idle over compute of a stage, the definition
 * the simulator's bubble_fraction follows (simulate.h). */
double plan_bubble_closed_form(int schedule, int p, int64_t m, int v,
                               double F, double B, double W);

/* A lower bound of the pipeline part of one step (forward/backward only,
 * no DP tail) from per-chunk costs, whatever the collectives cost: every
 * stage runs all its compute, after its first micro-batch's forward came
 * through the stages before it and (all schedules but zb-h1, whose last
 * ops are deferrable weight passes) before the last backward goes back
 * through them; under ZeRO-3 its last pass also waits for every gather
 * and earlier reduction its comm stream runs first; and no schedule beats
 * one micro-batch's chain of passes through every virtual stage with a
 * transfer at each hop (the bubble of many chunks). The search prunes
 * with it; it never exceeds the simulated step time of the same table
 * (tests hold it to that). */
double plan_pipeline_time(const PlanCosts *c);
/* Its ZeRO-3 part alone (the comm stream's gathers and reductions before
 * the last pass), whatever c's ZeRO stage: the search adds it to the bound
 * of the other stages' table instead of recomputing the rest. */
double plan_pipeline_comm_bound(const PlanCosts *c);

/* The same two bounds of a table given as runs of consecutive chunks with
 * equal costs (chunks first .. first + count - 1 all cost *row; c's
 * layout, micro-batches and reduce_after_flush are read, its rows not):
 * O(runs + pp) instead of O(chunks), for the search's tables of thousands
 * of equal chunks. plan_pipeline_time is this over runs of one chunk. */
typedef struct { int first, count; const PlanChunkCost *row; } PlanChunkRun;
double plan_pipeline_time_runs(const PlanCosts *c, const PlanChunkRun *run, int n_run);
double plan_pipeline_comm_bound_runs(const PlanCosts *c, const PlanChunkRun *run, int n_run);

#endif /* PLANC_SCHEDULE_H */
