/*
 * cmd_search.c: `planc search FILE [options]` — rank every layout of the
 * file's model on its cluster (planner/search.h), print the best K as a
 * table or JSON, and optionally write the best back as a .plan file.
 *
 * The write-back re-emits the user's own file through the front end's
 * canonical printer (dsl_format) with only the plan block's layout
 * replaced (its software keys — overlap_*, flash_attention, ... — kept), so
 * comments, the model, the cluster and the train block stay as written.
 * Includes are kept as include statements; when OUT is in another folder
 * than FILE, each relative include path is rewritten to the included
 * file's absolute path so it still resolves. `planc check OUT` then gives
 * the same step time and memory, to the last digit, as the search did.
 *
 * This file parses options and prints; it never exits.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "dsl/dsl.h"
#include "planner/export.h"
#include "planner/search.h"
#include "planner/stacks.h"
#include "trace/trace.h"

#define SEARCH_STR_(x) #x
#define SEARCH_STR(x) SEARCH_STR_(x)   /* the defaults, from search.h */

static const char SEARCH_HELP[] =
    "usage: planc search FILE [--top K] [--json] [--write OUT.plan] [--svg OUT.svg]\n"
    "                         [--max-tp N] [--tp-in-node | --no-tp-in-node]\n"
    "                         [--max-layouts N] [--for megatron|torchtitan|deepspeed]\n"
    "\n"
    "Rank every parallel layout of FILE's model on FILE's cluster: dp x tp x pp\n"
    "(= the GPUs), ZeRO 0-3, micro-batch, schedule (gpipe, 1f1b, zb-h1,\n"
    "interleaved with v chunks), recomputation and sequence parallelism. Fields\n"
    "the plan block sets are constraints; missing or `auto` ones are searched.\n"
    "global_batch must be set. The search is exhaustive; bounds only skip\n"
    "layouts that provably cannot change the result.\n"
    "\n"
    "  --top K            show the best K layouts (default 10)\n"
    "  --json             print {\"evaluated\", \"feasible\", \"search_time_s\", \"results\"}\n"
    "  --write OUT.plan   write FILE with the best layout as its plan block\n"
    "  --svg OUT.svg      plot every layout: step time against memory per GPU\n"
    "  --max-tp N         largest tensor-parallel degree to consider\n"
    "  --tp-in-node       TP groups never span nodes (default, as Megatron)\n"
    "  --no-tp-in-node    also consider tp that does not divide the GPUs per node\n"
    "  --max-layouts N    refuse (exit 2) a space of more than N layouts' work (its\n"
    "                     layouts, plus the chunk sums of deep interleaving, " SEARCH_STR(PLAN_SEARCH_SUMS_PER_LAYOUT) "\n"
    "                     to a layout), counted before any is built (default\n"
    "                     " SEARCH_STR(PLAN_SEARCH_MAX_LAYOUTS) "; 0: no limit)\n"
    "  --for F            rank only the layouts framework F can run (the rules\n"
    "                     `planc export --to F` refuses by), with F's software\n"
    "                     stack (software megatron-core, torchtitan, deepspeed)\n"
    "                     where the plan names none; --write writes it\n"
    "\n"
    "Rows are distinct layouts: at pp 1 the schedule is not searched (1F1B,\n"
    "shown as '-'), at dp 1 nor is ZeRO (stage 0), and layouts identical in\n"
    "every figure are folded into the simplest.\n"
    "\n"
    "exit status: 0 a layout fits, 1 nothing fits (the closest layout and its\n"
    "shortfall are named), 2 bad input or usage, or a space over --max-layouts.\n";

/* A positive integer option value, or -1. */
static long positive(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno || *end || v < 1 || v > 1000000 ? -1 : v;
}

/* ---- write-back ------------------------------------------------------- */

/* Whether comment c lies strictly between the braces of block s. */
static bool inside(const DslStmt *s, const DslComment *c)
{
    int l = c->loc.line, k = c->loc.col;
    bool after_open = l > s->open.line || (l == s->open.line && k > s->open.col);
    bool before_close = l < s->close.line || (l == s->close.line && k < s->close.col);
    return after_open && before_close;
}

/* The directory of path, as an absolute canonical path (arena-owned), or NULL. */
static char *abs_dir(DslArena *a, const char *path)
{
    char *copy = dsl_arena_strdup(a, path);
    char buf[PATH_MAX];
    if (!realpath(dirname(copy), buf)) return NULL;
    return dsl_arena_strdup(a, buf);
}

/* Point relative includes at absolute paths when OUT lives elsewhere. */
static bool fix_includes(DslArena *a, DslFile *f, const char *file, const char *out)
{
    char *src_dir = abs_dir(a, file), *out_dir = abs_dir(a, out);
    if (!src_dir || !out_dir) return false;
    if (strcmp(src_dir, out_dir) == 0) return true;
    for (DslStmt *s = f->stmts; s; s = s->next) {
        if (s->kind != DSL_STMT_INCLUDE || !s->args || s->args->kind != DSL_VAL_STRING) continue;
        if (s->args->text[0] == '/') continue;
        char buf[PATH_MAX];
        char *joined = dsl_arena_printf(a, "%s/%s", src_dir, s->args->text);
        s->args->text = dsl_arena_strdup(a, realpath(joined, buf) ? buf : joined);
    }
    return true;
}

/* The searched entries, then the old block's entries that are not the
 * layout's (the run's software: overlap_*, flash_attention,
 * grad_accum_dtype), which `search` took as given and OUT must keep. */
static DslStmt *keep_software(DslStmt *searched, DslStmt *old)
{
    DslStmt **tail = &searched;
    while (*tail) tail = &(*tail)->next;
    for (DslStmt *s = old, *next; s; s = next) {
        next = s->next;
        if (s->key && plan_search_layout_key(s->key)) continue;
        s->next = NULL;
        *tail = s;
        tail = &s->next;
    }
    return searched;
}

/* Why: the new plan block goes through the same parser and printer as
 * the rest of the file, so OUT is canonical `planc fmt` output. */
static int write_back(const char *file, const char *out, const Layout *best, const char *software)
{
    DslArena a = { 0 };
    DslDiag d;
    dsl_diag_init(&d, stderr);
    int rc = 2;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) goto done;
    plan_search_print_layout_block(m, best);
    if (software) {   /* the stack --for applied, inside the block: before its "}\n" */
        fflush(m);
        fseek(m, -2, SEEK_END);
        fprintf(m, "    software %s\n}\n", software);
    }
    fclose(m);
    DslSource *src = dsl_arena_alloc(&a, sizeof *src);
    *src = (DslSource){ "<searched plan>", dsl_arena_strdup(&a, text), len };
    DslFile *blk = dsl_parse_source(&a, &d, src);
    DslFile *f = dsl_parse_file(&a, &d, file);
    if (!blk || !f) goto done;

    DslStmt *plan = NULL;
    for (DslStmt *s = f->stmts; s; s = s->next)
        if (s->kind == DSL_STMT_BLOCK && strcmp(s->key, "plan") == 0) plan = s;
    if (!plan) {
        fprintf(stderr, "planc: error: search: --write needs the plan block in %s itself "
                "(it is in an included file)\n", file);
        goto done;
    }
    /* the new entries sit on the block's first line, so the printer adds
     * no blank lines between them; the old block's comments described the
     * old values and are dropped */
    plan->body = keep_software(blk->stmts->body, plan->body);
    for (DslStmt *s = plan->body; s; s = s->next) {
        s->loc.line = s->loc.end_line = plan->open.line;
        for (DslValue *v = s->args; v; v = v->next) v->loc.line = v->loc.end_line = plan->open.line;
    }
    DslComment **pc = &f->comments;
    while (*pc) {
        if (inside(plan, *pc)) *pc = (*pc)->next;
        else pc = &(*pc)->next;
    }
    if (!fix_includes(&a, f, file, out)) {
        fprintf(stderr, "planc: error: search: cannot resolve the folder of '%s' or '%s': %s\n",
                file, out, strerror(errno));
        goto done;
    }
    FILE *o = fopen(out, "w");
    if (!o) {
        fprintf(stderr, "planc: error: search: cannot write '%s': %s\n", out, strerror(errno));
        goto done;
    }
    dsl_format(o, f);
    rc = fclose(o) == 0 ? 0 : 2;
    if (rc) fprintf(stderr, "planc: error: search: cannot write '%s': %s\n", out, strerror(errno));
done:
    free(text);
    dsl_arena_free(&a);
    return rc;
}

/* ---- the command ------------------------------------------------------ */

/* search --for: the export's layout rules (planner/export.h). */
static bool admit_for(const Plan *p, const Layout *l, void *ctx, char *why, size_t len)
{
    return plan_export_layout_ok(p, l, (PlanExportTarget)(intptr_t)ctx, why, len);
}

/* The framework's stack in place of planc's, when the plan names none
 * (its fp8 block kept: a model setting, not the stack's). Returns 0, or
 * 2 when the plan names another framework's stack. label gets "NAME
 * VARIANT" of the stack applied, or "" when the plan's own was kept. */
static int apply_stack(Plan *p, PlanExportTarget t, char *label, size_t len)
{
    label[0] = 0;
    const char *want = plan_export_stack(t);
    if (p->software.stack != 0) {
        if (strcmp(plan_stack_row(p->software.stack)->name, want) == 0) return 0;
        char have[64];
        plan_stack_label(&p->software, have, sizeof have);
        fprintf(stderr, "planc: error: search: --for %s, but the plan names software %s (that framework's is "
                "%s)\n", plan_export_stack(t), have, want);
        return 2;
    }
    int row = plan_stack_find(want, NULL);
    if (row < 0) return 0;
    PlanFp8 fp8 = p->software.fp8;
    p->software = plan_stack_software(row);
    p->software.fp8 = fp8;
    plan_stack_label(&p->software, label, len);
    fprintf(stderr, "planc: note: search: --for: software %s (%s's stack; the plan names none, so its own "
            "software keys are replaced)\n", label, want);
    return 0;
}

/* "best layout still needs 94.1 GiB on stage 0 > 80 GiB", and the layout. */
static void report_shortfall(const PlanSearch *s)
{
    if (!s->has_closest) {
        fprintf(stderr, "planc: no layout fits\n");
        return;
    }
    const PlanEval *e = &s->closest;
    const PlanStageMem *m = &e->stages[e->worst_stage];
    const Layout *l = &e->layout;
    fprintf(stderr, "planc: no layout fits: best layout still needs %.1f GiB on stage %d > %.0f GiB\n",
            m->total_bytes / 1073741824.0, e->worst_stage, m->capacity / 1073741824.0);
    fprintf(stderr, "  closest: dp %d tp %d pp %d zero %d micro_batch %lld schedule %s chunks %d "
            "recompute %s sequence_parallel %s\n", l->dp, l->tp, l->pp, l->zero,
            (long long)l->micro_batch, plan_schedule_name(l->schedule), l->chunks,
            plan_recompute_name(l->recompute), l->sequence_parallel == 1 ? "true" : "false");
    fprintf(stderr, "  %s\n", e->why);
}

int planc_cmd_search(int argc, char **argv)
{
    const char *file = NULL, *write = NULL, *svg = NULL;
    bool json = false;
    int for_target = -1;
    PlanSearchOptions o = plan_search_defaults();
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (planc_is_help(a)) {
            fputs(SEARCH_HELP, stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--top") == 0 || strcmp(a, "--max-tp") == 0) {
            const char *val = planc_option_value("search", argc, argv, &i, a[2] == 't' ? "K" : "N");
            if (!val) return 2;
            long v = positive(val);
            if (v < 0) return planc_usage_error("search", "%s needs a positive integer", a);
            if (a[2] == 't') o.top = (int)v;
            else o.max_tp = (int)v;
        } else if (strcmp(a, "--max-layouts") == 0) {
            const char *val = planc_option_value("search", argc, argv, &i, "N");
            if (!val) return 2;
            char *end;
            errno = 0;
            long long v = strtoll(val, &end, 10);
            if (errno || *end || end == val || v < 0)
                return planc_usage_error("search", "%s needs a number of layouts (0: no limit)", a);
            o.max_layouts = v;
        } else if (strcmp(a, "--write") == 0) {
            if (!(write = planc_option_value("search", argc, argv, &i, "OUT.plan"))) return 2;
        } else if (strcmp(a, "--svg") == 0) {         /* the search plot (trace/, issue 9) */
            if (!(svg = planc_option_value("search", argc, argv, &i, "OUT.svg"))) return 2;
            o.record = true;
        } else if (strcmp(a, "--for") == 0) {
            const char *val = planc_option_value("search", argc, argv, &i, "megatron");
            if (!val) return 2;
            if ((for_target = plan_export_target(val)) < 0)
                return planc_usage_error("search", "--for: unknown framework '%s' (expected megatron, torchtitan "
                                         "or deepspeed)", val);
        } else if (strcmp(a, "--tp-in-node") == 0) {
            o.tp_in_node = true;
        } else if (strcmp(a, "--no-tp-in-node") == 0) {
            o.tp_in_node = false;
        } else if (a[0] == '-' && a[1]) {
            return planc_usage_error("search", "unknown option '%s'", a);
        } else if (file) {
            return planc_usage_error("search", "more than one file ('%s')", a);
        } else {
            file = a;
        }
    }
    if (!file) return planc_usage_error("search", "%sneeds a FILE", "");
    if (for_target >= 0 && svg)
        return planc_usage_error("search", "%s--svg plots the whole space; it does not take --for", "");

    DslArena arena = { 0 };
    DslDiag diag;
    dsl_diag_init(&diag, stderr);
    Plan plan;
    int rc = planc_load_plan(file, &arena, &diag, &plan);
    if (rc != 0) {
        dsl_arena_free(&arena);
        return rc;
    }
    char stack[64] = "";
    if (for_target >= 0) {
        if ((rc = apply_stack(&plan, (PlanExportTarget)for_target, stack, sizeof stack)) != 0) {
            dsl_arena_free(&arena);
            return rc;
        }
        o.admit = admit_for;
        o.admit_ctx = (void *)(intptr_t)for_target;
    }
    PlanSearch s;
    char why[512];
    if (!plan_search(&plan, &o, &s, why, sizeof why)) {
        fprintf(stderr, "planc: error: search: %s: %s\n", file, why);
        plan_search_free(&s);
        dsl_arena_free(&arena);
        return 2;
    }
    if (json) plan_search_json(stdout, &plan, &s);
    else plan_search_print(stdout, &plan, &s);
    fflush(stdout);
    if (s.dropped.too_large && s.n_results)
        fprintf(stderr, "planc: warning: search: %lld layouts have more than %lld micro-steps per step "
                "and were not simulated; a larger micro_batch avoids them\n",
                (long long)s.dropped.too_large, (long long)PLAN_SEARCH_MAX_STEPS_LAYOUT);
    if (s.capped)
        fprintf(stderr, "planc: warning: search: stopped after simulating %lld micro-steps; the "
                "results are the best evaluated, not proven best (fix micro_batch or pp to shrink "
                "the space)\n", (long long)PLAN_SEARCH_MAX_STEPS_TOTAL);
    if (s.bound_violations)
        fprintf(stderr, "planc: warning: search: %lld layouts contradicted the search's bounds; "
                "the search was redone without them\n", (long long)s.bound_violations);
    rc = s.n_results > 0 ? 0 : 1;
    if (rc == 1) report_shortfall(&s);
    if (for_target >= 0 && s.dropped.refused)
        fprintf(stderr, "planc: note: search: --for %s: %lld layouts it cannot run were not ranked (the first: %s)\n",
                plan_export_target_name((PlanExportTarget)for_target), (long long)s.dropped.refused, s.refused_why);
    if (rc == 0 && write) rc = write_back(file, write, &s.results[0].layout, stack[0] ? stack : NULL);
    if (svg && tr_search_svg(svg, &plan, &s) != 0 && rc == 0) rc = 2;
    plan_search_free(&s);
    dsl_arena_free(&arena);
    return rc;
}
