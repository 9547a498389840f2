/*
 * layout.h: resolving a plan block's `auto` fields, checking a layout
 * against the model and the cluster, and cutting the model into pipeline
 * chunks.
 */
#ifndef PLANC_LAYOUT_H
#define PLANC_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include "planner/plan.h"

/* The largest pipeline degree times chunks the planner handles. */
#define PLAN_MAX_VSTAGES 4096

/* One model chunk (virtual pipeline stage): layers [first, end). */
typedef struct {
    int first, end;
    int blocks;           /* transformer blocks in it */
} PlanChunk;

/* Fill every PLAN_AUTO field of p's layout (or all of them when the plan
 * has no plan block) with planc's defaults: tp 1, pp 1,
 * dp = GPUs/(tp*pp), zero 0, micro_batch 1, global_batch = dp*micro_batch,
 * schedule 1f1b (interleaved when chunks > 1 is given), chunks 1,
 * recompute none, sequence_parallel off. */
Layout plan_layout_defaults(const Plan *p);

/* Whether a resolved layout can run the model on the cluster; if not,
 * writes the reason to why. */
bool plan_layout_check(const Plan *p, const Layout *l, char *why, size_t len);

/* Micro-batches per step per pipeline: global_batch / (dp * micro_batch). */
int64_t plan_micro_batches(const Layout *l);

/* Cut the model into pp*chunks chunks; chunk k is virtual stage k, run by
 * stage k % pp as its chunk k / pp. Blocks are spread as evenly as
 * possible; when they do not divide, the extra blocks go to the middle
 * chunks first (the first and last carry the embedding and the head).
 * Returns false when there are fewer blocks than chunks. */
bool plan_split(const Model *m, int pp, int chunks, PlanChunk *out);

const char *plan_schedule_name(int s);
const char *plan_recompute_name(int r);

#endif /* PLANC_LAYOUT_H */
