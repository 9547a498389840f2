/*
 * cmd_export.c: `planc export FILE --to megatron|torchtitan|deepspeed
 * [-o OUT]`: the plan's model and layout as that framework's arguments,
 * TOML job file or JSON config (planner/export.h), on stdout or in OUT;
 * what the framework cannot say goes to stderr as notes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "planner/export.h"

static const char EXPORT_HELP[] =
    "usage: planc export FILE --to TARGET[@VERSION] [-o OUT]\n"
    "\n"
    "Write the plan's model and layout for another framework: megatron, one\n"
    "line of pretrain_gpt.py arguments; torchtitan, a TOML job file; deepspeed,\n"
    "a ds_config.json. Fields left auto take planc's defaults (run `planc search\n"
    "--write` first to export the best layout). What the framework cannot\n"
    "express is said on stderr, with the nearest setting it has.\n"
    "\n"
    "  --to T    megatron[@core-0.14], torchtitan[@0.2] or deepspeed[@0.17]; the\n"
    "            version each writes for (the default shown; torchtitan 0.3 has no\n"
    "            TOML job file and is refused)\n"
    "  -o OUT    write there instead of stdout\n"
    "  --settings  print where each train-block key goes in each target (TSV)\n"
    "\n"
    "exit status: 0; 1 the layout is invalid for the cluster or does not fit\n"
    "(nothing is written); 2 bad input or usage, or the target cannot run the\n"
    "layout or hold a setting planc trains with (named, with the framework's\n"
    "rule; nothing is written).\n";

int planc_cmd_export(int argc, char **argv)
{
    const char *file = NULL, *out = NULL, *to = NULL;
    for (int i = 0; i < argc; i++) {
        if (planc_is_help(argv[i])) {
            fputs(EXPORT_HELP, stdout);
            return 0;
        } else if (strcmp(argv[i], "--settings") == 0) {
            plan_export_settings(stdout);
            return 0;
        } else if (strcmp(argv[i], "-o") == 0) {
            if (!(out = planc_option_value("export", argc, argv, &i, "OUT"))) return 2;
        } else if (strcmp(argv[i], "--to") == 0) {
            if (!(to = planc_option_value("export", argc, argv, &i, "megatron"))) return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return planc_usage_error("export", "unknown option '%s'", argv[i]);
        } else if (file) {
            return planc_usage_error("export", "more than one file ('%s')", argv[i]);
        } else {
            file = argv[i];
        }
    }
    if (!file) return planc_usage_error("export", "%sneeds a FILE", "");
    if (!to) return planc_usage_error("export", "%sneeds --to megatron|torchtitan|deepspeed", "");
    /* --to NAME[@VERSION] */
    char name[32], vwhy[256] = "";
    const char *at = strchr(to, '@');
    size_t n = at ? (size_t)(at - to) : strlen(to);
    snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), to);
    int target = n < sizeof name ? plan_export_target(name) : -1;
    if (target < 0)
        return planc_usage_error("export", "unknown target '%s' (expected megatron, torchtitan or deepspeed)", to);
    const char *version = plan_export_version((PlanExportTarget)target, at ? at + 1 : NULL, vwhy, sizeof vwhy);
    if (!version) {
        fprintf(stderr, "planc: error: export: %s\n", vwhy);
        return 2;
    }

    DslArena arena = { 0 };
    DslDiag diag;
    dsl_diag_init(&diag, stderr);
    Plan plan;
    int rc = planc_load_plan(file, &arena, &diag, &plan);
    if (rc == 0) {
        /* written to memory first, so a plan that is not exported leaves no OUT */
        /* the notes too: a refused export says only why */
        char *text = NULL, *notes = NULL, why[512] = "";
        size_t len = 0, nlen = 0;
        FILE *mem = open_memstream(&text, &len), *nmem = open_memstream(&notes, &nlen);
        rc = mem && nmem ? plan_export(&plan, (PlanExportTarget)target, version, mem, nmem, why, sizeof why) : 2;
        if (mem) fclose(mem);
        if (nmem) fclose(nmem);
        if (rc == 0 && notes) fputs(notes, stderr);
        free(notes);
        if (rc == 1 || (rc == 2 && why[0])) {
            fprintf(stderr, "planc: error: export: %s: %s\n", file, why);
        } else if (rc == 0) {
            FILE *o = out && strcmp(out, "-") ? fopen(out, "w") : stdout;
            if (!o || fwrite(text, 1, len, o) != len || (o != stdout && fclose(o) != 0)) {
                fprintf(stderr, "planc: error: export: cannot write %s: %s\n", out ? out : "stdout", strerror(errno));
                rc = 2;
            }
        }
        free(text);
    }
    dsl_arena_free(&arena);
    return rc;
}
