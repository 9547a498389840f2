/*
 * commands.h: the subcommands of planc that live in their own files.
 *
 * cli/planc.c parses the command name and hands the rest of the command
 * line (argv[0] is the first argument after the command) to one of these.
 * Each returns the exit status of docs/DESIGN.md (0, 1, 2) and never exits.
 */
#ifndef PLANC_CLI_COMMANDS_H
#define PLANC_CLI_COMMANDS_H

#include <stdbool.h>

#include "dsl/dsl.h"
#include "planner/plan.h"

/* Parse FILE with its includes and check it into *plan, allocating from
 * arena; diagnostics go to d. Returns 0, or the exit status to give
 * (1: layout invalid for the cluster only, 2: bad input). */
int planc_load_plan(const char *file, DslArena *arena, DslDiag *d, Plan *plan);
/* The same, and the checked syntax tree in *tree (in arena), for a later
 * diagnostic about a valid plan at the key it concerns. */
int planc_load_plan_tree(const char *file, DslArena *arena, DslDiag *d, Plan *plan, const DslFile **tree);

/* Report a usage error of subcommand cmd (fmt has one %s for arg) with
 * a pointer to its --help; returns 2, the exit status of bad usage. */
int planc_usage_error(const char *cmd, const char *fmt, const char *arg);

/* True for -h and --help: every subcommand prints its usage on stdout and
 * exits 0. */
bool planc_is_help(const char *arg);

/* The value of the option argv[*i] (then *i points at it), or NULL after
 * the usage error "option '-o' needs a value (planc emit -o OUT.c)" when
 * there is none: no next argument, or the next is a long option. meta
 * names the value in that example ("OUT.c"). */
const char *planc_option_value(const char *cmd, int argc, char **argv, int *i, const char *meta);

int planc_cmd_search(int argc, char **argv);   /* cli/cmd_search.c */
int planc_cmd_trace(int argc, char **argv);    /* cli/cmd_trace.c */
int planc_cmd_emit(int argc, char **argv);     /* cli/cmd_emit.c */
int planc_cmd_build(int argc, char **argv);    /* cli/cmd_emit.c */
int planc_cmd_import(int argc, char **argv);   /* cli/cmd_import.c */
int planc_cmd_export(int argc, char **argv);   /* cli/cmd_export.c */
int planc_cmd_calibrate(int argc, char **argv); /* cli/cmd_calibrate.c */

#endif
