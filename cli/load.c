/*
 * load.c: what every subcommand shares: parsing a .plan file and its
 * includes and checking it into a Plan, and the usage-error message.
 */
#include <stdio.h>

#include "cli/commands.h"
#include "planner/sema.h"

int planc_load_plan(const char *file, DslArena *arena, DslDiag *d, Plan *plan)
{
    DslFile *f = dsl_load(arena, d, file);
    if (f && plan_sema(f, d, arena, plan) == 0) return 0;
    int rc = dsl_diag_exit_code(d);
    return rc ? rc : 2;
}

int planc_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "planc: error: %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run 'planc %s --help' for usage)\n", cmd);
    return 2;
}
