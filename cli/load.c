/*
 * load.c: what every subcommand shares: parsing a .plan file and its
 * includes and checking it into a Plan, and the command line's help
 * option, option values and usage-error message (one wording for all).
 */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "planner/sema.h"

int planc_load_plan_tree(const char *file, DslArena *arena, DslDiag *d, Plan *plan, const DslFile **tree)
{
    DslFile *f = dsl_load(arena, d, file);
    if (tree) *tree = f;
    if (f && plan_sema(f, d, arena, plan) == 0) return 0;
    int rc = dsl_diag_exit_code(d);
    return rc ? rc : 2;
}

int planc_load_plan(const char *file, DslArena *arena, DslDiag *d, Plan *plan)
{
    return planc_load_plan_tree(file, arena, d, plan, NULL);
}

int planc_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "planc: error: %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run 'planc %s --help' for usage)\n", cmd);
    return 2;
}

bool planc_is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

const char *planc_option_value(const char *cmd, int argc, char **argv, int *i, const char *meta)
{
    const char *opt = argv[*i];
    if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) return argv[++*i];
    char msg[256];
    snprintf(msg, sizeof msg, "option '%s' needs a value (planc %s %s %s)", opt, cmd, opt, meta);
    planc_usage_error(cmd, "%s", msg);
    return NULL;
}
