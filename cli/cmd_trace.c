/*
 * cmd_trace.c: planc trace — draw the simulated training step.
 *
 *     planc trace FILE -o OUT.svg|OUT.json [--schedule S] [--chunks V]
 *                      [--compare MEASURED.json]
 *
 * Loads and checks the plan, lowers it to its Program, simulates one step
 * and hands the Program and its spans to trace/ for drawing; the output's
 * extension chooses SVG or a Chrome/Perfetto trace. --schedule and
 * --chunks replace the plan's own, so one plan can be seen under every
 * schedule. --compare draws a measured trace (same JSON format) beneath the
 * predicted one on one time axis.
 *
 * Exit status as docs/DESIGN.md: 0 written; 1 the layout is invalid for the
 * cluster or does not fit in memory (the picture is still written when the
 * layout is valid); 2 bad input, bad usage or an unwritable output.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/layout.h"
#include "planner/program.h"
#include "planner/simulate.h"
#include "trace/trace.h"

static const char TRACE_HELP[] =
    "usage: planc trace FILE -o OUT.svg|OUT.json [options]\n"
    "\n"
    "Simulate one training step of FILE's layout and draw it: one row per\n"
    "pipeline stage, a box per op of the Program (forward, backward, sends,\n"
    "receive waits, ZeRO gathers, gradient reductions, optimizer) on a time\n"
    "axis in ms; idle time (the bubble) is left empty. OUT.json is the same\n"
    "timeline as a Chrome trace (open it in https://ui.perfetto.dev or\n"
    "chrome://tracing).\n"
    "\n"
    "  -o OUT                   output file; .svg or .json chooses the format\n"
    "  --schedule S             draw under schedule S instead of the plan's\n"
    "                           (gpipe | 1f1b | interleaved | zb-h1)\n"
    "  --chunks V               model chunks per stage; V > 1 implies interleaved\n"
    "  --compare MEASURED.json  draw a measured trace (the executable's --trace\n"
    "                           output) beneath the prediction; SVG only\n"
    "\n"
    "exit status: 0 written, 1 layout invalid for the cluster or does not fit\n"
    "in memory, 2 bad input or usage.\n";

typedef struct {
    const char *file, *out, *compare;
    int         schedule, chunks;
    bool        json;
} TraceArgs;

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int schedule_named(const char *s)
{
    for (int k = SCHED_GPIPE; k <= SCHED_ZB_H1; k++)
        if (strcmp(plan_schedule_name(k), s) == 0) return k;
    return -1;
}

/* Parse the command line into a; returns -1 to go on, else an exit status. */
static int parse_args(int argc, char **argv, TraceArgs *a)
{
    *a = (TraceArgs){ .schedule = PLAN_AUTO, .chunks = PLAN_AUTO };
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (planc_is_help(o)) {
            fputs(TRACE_HELP, stdout);
            return 0;
        } else if (!strcmp(o, "-o") || !strcmp(o, "--compare") || !strcmp(o, "--schedule") ||
                   !strcmp(o, "--chunks")) {
            const char *meta = !strcmp(o, "-o") ? "OUT.svg" : !strcmp(o, "--compare") ? "MEASURED.json"
                             : !strcmp(o, "--schedule") ? "1f1b" : "V";
            const char *v = planc_option_value("trace", argc, argv, &i, meta);
            if (!v) return 2;
            if (!strcmp(o, "-o")) a->out = v;
            else if (!strcmp(o, "--compare")) a->compare = v;
            else if (!strcmp(o, "--schedule")) {
                if ((a->schedule = schedule_named(v)) < 0)
                    return planc_usage_error("trace", "unknown schedule '%s' (gpipe, 1f1b, interleaved, zb-h1)", v);
            } else {
                char *end;
                long c = strtol(v, &end, 10);
                if (*end || c < 1 || c > PLAN_MAX_VSTAGES) return planc_usage_error("trace", "bad --chunks '%s'", v);
                a->chunks = (int)c;
            }
        } else if (o[0] == '-' && o[1]) {
            return planc_usage_error("trace", "unknown option '%s'", o);
        } else if (a->file) {
            return planc_usage_error("trace", "more than one file ('%s')", o);
        } else {
            a->file = o;
        }
    }
    if (!a->file) return planc_usage_error("trace", "%sneeds a FILE", "");
    if (!a->out) return planc_usage_error("trace", "%sneeds -o OUT.svg or -o OUT.json", "");
    a->json = ends_with(a->out, ".json");
    if (!a->json && !ends_with(a->out, ".svg"))
        return planc_usage_error("trace", "cannot tell the format of '%s' (use .svg or .json)", a->out);
    if (a->json && a->compare) return planc_usage_error("trace", "%s--compare draws an SVG; use -o OUT.svg", "");
    if (a->chunks > 1 && a->schedule != PLAN_AUTO && a->schedule != SCHED_INTERLEAVED)
        return planc_usage_error("trace", "--chunks > 1 needs --schedule interleaved, not %s", plan_schedule_name(a->schedule));
    return -1;
}

/* Apply --schedule / --chunks to the plan's layout. */
static void override_layout(Plan *p, const TraceArgs *a)
{
    if (a->schedule == PLAN_AUTO && a->chunks == PLAN_AUTO) return;
    if (!p->has_layout) {
        p->layout = plan_layout_auto();
        p->has_layout = true;
    }
    if (a->schedule != PLAN_AUTO) {
        p->layout.schedule = a->schedule;
        if (a->schedule != SCHED_INTERLEAVED && a->chunks == PLAN_AUTO) p->layout.chunks = 1;
    }
    if (a->chunks != PLAN_AUTO) p->layout.chunks = a->chunks;
    if (a->chunks > 1 && a->schedule == PLAN_AUTO) p->layout.schedule = SCHED_INTERLEAVED;
}

/* Write the picture or trace of the panels to a->out. */
static int write_out(const TraceArgs *a, const TrTimeline *const *panels, int n)
{
    FILE *f = fopen(a->out, "w");
    if (!f) {
        fprintf(stderr, "planc: error: cannot write '%s'\n", a->out);
        return 2;
    }
    bool ok = a->json ? tr_write_chrome(f, panels[0]) : tr_write_svg(f, panels, n);
    ok &= fclose(f) == 0;
    if (!ok) {
        fprintf(stderr, "planc: error: cannot write '%s'\n", a->out);
        return 2;
    }
    return 0;
}

/* Simulate the plan and write the output; the exit status. */
static int trace_plan(const Plan *plan, const TraceArgs *a)
{
    char why[256] = "";
    PlanProgram prog;
    PlanSimResult sim;
    if (!plan_lower(plan, &prog, why, sizeof why)) {
        fprintf(stderr, "%s: error: %s\n", a->file, why);
        return 1;
    }
    if (!plan_simulate(&prog, &sim)) {
        fprintf(stderr, "%s: error: the schedule deadlocks (a receive without its send)\n", a->file);
        plan_program_free(&prog);
        return 1;
    }
    TrTimeline pred, meas;
    int rc = 0, n = 1;
    if (!tr_from_program(&prog, &sim, plan->model.name, &pred)) {
        fprintf(stderr, "planc: error: out of memory\n");
        rc = 2;
    } else {
        tr_set_topology(&pred, &plan->cluster, prog.dp, prog.tp, prog.pp);
    }
    if (rc == 0 && a->compare) {
        if (!tr_read_chrome(a->compare, &meas, why, sizeof why)) {
            fprintf(stderr, "%s: error: %s\n", a->compare, why);
            rc = 2;
        } else if (meas.pp != pred.pp) {
            fprintf(stderr, "%s: error: the trace has %d stages, the plan %d\n",
                    a->compare, meas.pp, pred.pp);
            tr_timeline_free(&meas);
            rc = 2;
        } else {
            n = 2;
        }
    }
    if (rc == 0) {
        const TrTimeline *panels[2] = { &pred, &meas };
        rc = write_out(a, panels, n);
        int ops = 0;   /* the Program's ops: the in-pass segments are parts of them */
        for (int i = 0; i < pred.n_boxes; i++) ops += tr_lane_of(pred.boxes[i].kind) != TR_LANE_PASS;
        if (rc == 0)
            printf("wrote %s: %s, %d stages, %d ops, step %.3f ms, bubble %.1f %%\n", a->out,
                   pred.layout, pred.pp, ops, pred.step_time * 1e3, 100 * pred.bubble_fraction);
    }
    if (n == 2) tr_timeline_free(&meas);
    tr_timeline_free(&pred);
    plan_sim_free(&sim);
    plan_program_free(&prog);
    return rc;
}

/* Exit 1 (after drawing) when the layout does not fit in memory. */
static int fit_status(const Plan *plan, const char *file)
{
    PlanEval ev;
    plan_evaluate(plan, &ev);
    int rc = 0;
    if (!ev.valid || !ev.feasible) {
        fprintf(stderr, "%s: warning: %s\n", file, ev.why[0] ? ev.why : "the plan does not fit");
        rc = 1;
    }
    plan_eval_free(&ev);
    return rc;
}

int planc_cmd_trace(int argc, char **argv)
{
    TraceArgs a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    DslArena arena = { 0 };
    DslDiag diag;
    dsl_diag_init(&diag, stderr);
    Plan plan;
    rc = planc_load_plan(a.file, &arena, &diag, &plan);
    if (rc == 0) {
        override_layout(&plan, &a);
        rc = trace_plan(&plan, &a);
        if (rc == 0) rc = fit_status(&plan, a.file);
    }
    dsl_arena_free(&arena);
    return rc;
}
