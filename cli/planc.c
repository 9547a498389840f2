/*
 * planc.c: the driver. It parses the command line, runs the stages in
 * order (dsl -> planner/sema -> planner / search / trace / codegen) and turns
 * their status into the exit code of docs/DESIGN.md:
 *
 *     0  success (the plan fits)
 *     1  the plan does not fit, or its layout is invalid for the cluster
 *     2  bad input (syntax, names, units, ranges, divisibility) or bad usage
 *
 * Diagnostics go to stderr and nothing else does; results go to stdout.
 * Only this file calls exit(); the stages return a status.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dsl/dsl.h"
#include "planner/plan.h"
#include "planner/report.h"
#include "planner/sema.h"
#include "cli/commands.h"

#define PLANC_VERSION "0.1.0"

static const char USAGE[] =
    "usage: planc COMMAND FILE [options]\n"
    "\n"
    "planc compiles a .plan file (model, cluster, parallel layout) into a\n"
    "checked plan, its predicted cost, and a training program.\n"
    "\n"
    "commands:\n"
    "  check FILE [--json]        parse and validate; print the model, cluster and layout\n"
    "  fmt FILE                   print FILE in canonical form\n"
    "  search FILE [--top K] [--json] [--write OUT.plan] [--svg OUT.svg]\n"
    "                             rank every valid layout for the model and cluster\n"
    "  emit FILE [-o OUT.c]       print the generated training program\n"
    "  build FILE -o EXE [--target cpu|cuda] [--launch mpirun|slurm]\n"
    "                             emit and compile it\n"
    "  trace FILE -o OUT.svg|OUT.json [--schedule S] [--chunks V] [--compare M.json]\n"
    "                             draw the simulated step, or write a Chrome trace\n"
    "  import CONFIG.json [-o OUT.plan] [--name NAME]\n"
    "                             a Hugging Face config.json -> a model block\n"
    "  export FILE --to megatron|torchtitan|deepspeed [-o OUT]\n"
    "                             the plan as that framework's arguments / TOML / JSON\n"
    "  calibrate [--ranks N] [--name NAME] [-o FILE] [--quick] [--target cpu|cuda]\n"
    "                             measure this machine; write a cluster block of it\n"
    "\n"
    "options:\n"
    "  -h, --help                 this help; `planc COMMAND --help` for one command\n"
    "  --version                  print the version\n"
    "\n"
    "exit status: 0 success, 1 does not fit or layout invalid for the cluster,\n"
    "2 bad input or usage. Diagnostics: FILE:LINE:COL: error: MESSAGE on stderr.\n";

static const char CHECK_HELP[] =
    "usage: planc check FILE [--json]\n"
    "\n"
    "Parse FILE (and the files it includes), check every key, unit, range and\n"
    "the divisibility the layout needs, then print the resolved model (one row\n"
    "per layer, exact parameter count), the cluster and the layout.\n"
    "\n"
    "  --json    print one JSON object instead of tables\n"
    "\n"
    "exit status: 0 fits, 1 does not fit or dp x tp x pp does not match the\n"
    "cluster, 2 bad input.\n";

static const char FMT_HELP[] =
    "usage: planc fmt FILE\n"
    "\n"
    "Print FILE in canonical form on stdout: one statement per line, four-space\n"
    "indentation, short blocks on one line, comments kept. Includes are not\n"
    "followed. fmt of fmt's output is identical.\n"
    "\n"
    "exit status: 0, or 2 if FILE does not parse.\n";

/* planc check FILE [--json] */
static int cmd_check(int argc, char **argv)
{
    const char *file = NULL;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (planc_is_help(argv[i])) {
            fputs(CHECK_HELP, stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return planc_usage_error("check", "unknown option '%s'", argv[i]);
        } else if (file) {
            return planc_usage_error("check", "more than one file ('%s')", argv[i]);
        } else {
            file = argv[i];
        }
    }
    if (!file) return planc_usage_error("check", "%sneeds a FILE", "");

    DslArena arena = { 0 };
    DslDiag diag;
    dsl_diag_init(&diag, stderr);
    Plan plan;
    int rc;
    DslFile *f = dsl_load(&arena, &diag, file);
    if (!f || plan_sema(f, &diag, &arena, &plan) != 0) {
        rc = dsl_diag_exit_code(&diag);
        if (rc == 0) rc = 2;
    } else {
        fflush(stdout);
        rc = plan_check_report(stdout, stderr, &plan, json);
    }
    dsl_arena_free(&arena);
    return rc;
}

/* planc fmt FILE */
static int cmd_fmt(int argc, char **argv)
{
    const char *file = NULL;
    for (int i = 0; i < argc; i++) {
        if (planc_is_help(argv[i])) {
            fputs(FMT_HELP, stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return planc_usage_error("fmt", "unknown option '%s'", argv[i]);
        } else if (file) {
            return planc_usage_error("fmt", "more than one file ('%s')", argv[i]);
        } else {
            file = argv[i];
        }
    }
    if (!file) return planc_usage_error("fmt", "%sneeds a FILE", "");
    DslArena arena = { 0 };
    DslDiag diag;
    dsl_diag_init(&diag, stderr);
    DslFile *f = dsl_parse_file(&arena, &diag, file);
    int rc = 2;
    if (f) {
        dsl_format(stdout, f);
        rc = 0;
    }
    dsl_arena_free(&arena);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (planc_is_help(cmd) || strcmp(cmd, "help") == 0) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("planc %s\n", PLANC_VERSION);
        return 0;
    }
    if (strcmp(cmd, "check") == 0) return cmd_check(argc - 2, argv + 2);
    if (strcmp(cmd, "fmt") == 0) return cmd_fmt(argc - 2, argv + 2);
    if (strcmp(cmd, "search") == 0) return planc_cmd_search(argc - 2, argv + 2);
    if (strcmp(cmd, "trace") == 0) return planc_cmd_trace(argc - 2, argv + 2);
    if (strcmp(cmd, "emit") == 0) return planc_cmd_emit(argc - 2, argv + 2);
    if (strcmp(cmd, "build") == 0) return planc_cmd_build(argc - 2, argv + 2);
    if (strcmp(cmd, "import") == 0) return planc_cmd_import(argc - 2, argv + 2);
    if (strcmp(cmd, "export") == 0) return planc_cmd_export(argc - 2, argv + 2);
    if (strcmp(cmd, "calibrate") == 0) return planc_cmd_calibrate(argc - 2, argv + 2);
    static const char *const cmds[] = { "check", "fmt", "search", "emit", "build", "trace", "import", "export",
                                        "calibrate" };
    const char *hint = dsl_suggest(cmd, cmds, (int)(sizeof cmds / sizeof cmds[0]));
    fprintf(stderr, "planc: error: unknown command '%s'", cmd);
    if (hint) fprintf(stderr, "; did you mean '%s'?", hint);
    fprintf(stderr, "\n(run 'planc --help' for usage)\n");
    return 2;
}
