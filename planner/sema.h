/*
 * sema.h: from the syntax tree of a .plan file to a checked Plan.
 *
 * plan_sema resolves every key of the model, cluster, plan and train blocks,
 * converts units to SI base units, fills defaults, expands `repeat`, looks
 * up device presets and checks ranges and the divisibility the layout needs.
 * Every problem is reported to the DslDiag (all of them, in one run); the
 * layout not matching the cluster's GPU count is reported with class
 * DSL_ERR_CLUSTER (exit 1), everything else with DSL_ERR_INPUT (exit 2).
 */
#ifndef PLANC_SEMA_H
#define PLANC_SEMA_H

#include "dsl/dsl.h"
#include "planner/plan.h"

/* Limits on what a .plan file may ask for, so nothing can hang or wrap. */
#define PLAN_MAX_LAYERS   100000       /* flattened layers, after repeat */
#define PLAN_MAX_REPEAT   100000       /* one repeat count */

/* Check the loaded file f and fill *out (names and layers live in arena a).
 * Returns the number of errors reported; *out is only meaningful when it
 * returns 0. */
int plan_sema(const DslFile *f, DslDiag *d, DslArena *a, Plan *out);

/* Where a checked file wrote `key` inside its top-level `block` (the first
 * value, else the key itself), *found true; where the key is absent (its
 * default holds), the block's own key and *found false; no such block: the
 * file's first line. For diagnostics about a valid plan that a later stage
 * refuses (build --target cpu refuses the model's dtype). */
DslLoc plan_sema_key_loc(const DslFile *f, const char *block, const char *key, bool *found);

/* The device presets (plan_device_preset) live in planner/presets.h. */
#include "planner/presets.h"

#endif /* PLANC_SEMA_H */
