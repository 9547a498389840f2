/*
 * report.h: what `planc check` prints about a checked Plan.
 */
#ifndef PLANC_REPORT_H
#define PLANC_REPORT_H

#include <stdbool.h>
#include <stdio.h>
#include "planner/plan.h"

/* Print the model, cluster and layout tables (and, as the planner grows,
 * memory per stage and the predicted step) of a checked plan, as text or as
 * one JSON object. Returns the exit status of `planc check`: 0 when the plan
 * fits, 1 when a stage does not fit or the layout is invalid for the cluster. */
int plan_check_report(FILE *out, const Plan *p, bool json);

#endif
