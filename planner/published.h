/*
 * published.h: the published figure of a validation row — the one
 * `# published:` comment line of a validation row (a .plan file), read for
 * `make validate` (planner/validate.c).
 *
 * Two forms, one line per file:
 *     # published: 137 TFLOP/s per GPU, counted as 96 B s l h^2 (1 + s/6h + V/16lh)
 *     # published: 1.42 s per step
 * The first is a throughput as the source counted its FLOPs: the number
 * after "counted as" is 24 x the dense passes of the blocks it counts (96:
 * forward, backward and the recomputed forward, Narayanan et al. 2021, Sec.
 * 5.1; 72: without the recomputed forward, Megatron-LM's README); the rest of
 * that text is the formula, for the reader. Without ", counted as ..." the
 * count is 96. The second is a measured iteration time (Korthikanti et al.
 * 2022, Table 5), which needs no FLOP count.
 */
#ifndef PLANC_PUBLISHED_H
#define PLANC_PUBLISHED_H

#include <stdbool.h>
#include "dsl/diag.h"

typedef enum {
    PLAN_PUB_TFLOPS,        /* TFLOP/s per GPU, as the source counted FLOPs */
    PLAN_PUB_STEP_S,        /* seconds per training step (iteration) */
} PlanPublishedUnit;

typedef struct {
    double            value;    /* TFLOP/s per GPU or seconds per step, > 0 */
    PlanPublishedUnit unit;
    double            passes;   /* PLAN_PUB_TFLOPS: dense passes counted (C/24) */
    int               line;     /* the line of the comment, from 1 */
} PlanPublished;

/* Read src's `# published:` line into *out. False, with an error in d at
 * the offending column, when the file has none, has two, or its line is
 * not one of the two forms; a file's other comments may say "published"
 * freely (only a comment that starts with `published:` is the figure). */
bool plan_published_read(const DslSource *src, DslDiag *d, PlanPublished *out);

#endif
