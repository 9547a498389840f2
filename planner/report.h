/*
 * report.h: what `planc check` prints about a checked Plan.
 */
#ifndef PLANC_REPORT_H
#define PLANC_REPORT_H

#include <stdbool.h>
#include <stdio.h>
#include "planner/plan.h"
#include "planner/evaluate.h"

/* Print the model, cluster and layout tables (and, as the planner grows,
 * memory per stage and the predicted step) of a checked plan, as text or as
 * one JSON object, on out; why a stage does not fit or the layout is invalid
 * (`FILE: error: ...`) on err (`planc check`: stderr). Returns the exit
 * status of `planc check`: 0 when the plan fits, 1 when a stage does not fit
 * or the layout is invalid for the cluster. */
int plan_check_report(FILE *out, FILE *err, const Plan *p, bool json);

/* One layout's JSON object, the keys of DESIGN.md's `check --json`: the
 * figures of ev with the rates taken at the simulated step time `step`
 * and its `bubble`; `error` (or NULL) adds "error", `dominant` (or NULL)
 * adds the dominant cost. `compact` prints it on one line without a
 * newline (an element of `search --json`), else indented. The one JSON
 * printer of a layout: check and search both call it. */
void plan_report_json(FILE *out, const Plan *p, const PlanEval *ev, double step, double bubble,
                      const char *error, const char *dominant, bool compact);

#endif
