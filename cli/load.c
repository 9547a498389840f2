/*
 * load.c: the front half every subcommand shares — parse a .plan file and
 * its includes, then check it into a Plan.
 */
#include "cli/commands.h"
#include "planner/sema.h"

int planc_load_plan(const char *file, DslArena *arena, DslDiag *d, Plan *plan)
{
    DslFile *f = dsl_load(arena, d, file);
    if (f && plan_sema(f, d, arena, plan) == 0) return 0;
    int rc = dsl_diag_exit_code(d);
    return rc ? rc : 2;
}
