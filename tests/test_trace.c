/*
 * test_trace.c: cmocka tests of trace/ — the pictures must show the
 * Program the planner built and the times the simulator gave it.
 *
 * The SVG is read back the way a person reads it: boxes are counted per
 * stage row and idle time is measured from their drawn x and width (the
 * root element gives the axis origin and scale), then compared with the
 * Program's op counts and the simulator's bubble. Programs come from
 * hand-written cost tables (exact closed-form bubbles: GPipe and 1F1B
 * (p-1)/m, interleaved (p-1)/(v m)) and from a real plan under every
 * schedule. Well-formedness (XML and JSON parsers) and the goldens are
 * checked by tests/trace/run.sh on planc's own output.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "dsl/dsl.h"
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/layout.h"
#include "planner/presets.h"
#include "planner/search.h"
#include "planner/sema.h"
#include "trace/trace.h"

#define MAX_ST 64

/* What one panel of an SVG timeline shows, measured from the drawing. */
typedef struct {
    int    stages;
    int    boxes[MAX_ST];     /* op boxes per stage row */
    double busy_px[MAX_ST];   /* drawn width of forward/backward boxes */
    double wait_px[MAX_ST];   /* drawn waits for other stages: receive-wait boxes, and the
                                 gap before a tied-embedding or gradient-norm all-reduce */
    double end_px[MAX_ST];    /* right edge of the row's last box */
    double pipe_end_px;       /* right edge of the last forward/backward box */
    double x0, px_per_ms;
    int    labels, tooltips;
} Drawn;

/* Whether s starts with prefix (a plain loop: sanitizer-intercepted
 * strstr/strlen would make a scan of a 7 MB picture quadratic). */
static bool starts(const char *s, const char *prefix)
{
    while (*prefix && *s == *prefix) { s++; prefix++; }
    return *prefix == 0;
}

/* The number after name="..." inside the tag at tag (up to its '>'). */
static double attr(const char *tag, const char *name)
{
    for (const char *c = tag; *c && *c != '>'; c++)
        if (starts(c, name)) return strtod(c + strlen(name), NULL);
    fail_msg("attribute %s missing", name);
    return 0;
}

static bool is_compute_class(const char *cls)
{
    return starts(cls, "FWD ") || starts(cls, "FWD\"") || starts(cls, "BWD");
}

/* Measure panel `which` (0 first) of svg, in one pass over the text. */
static Drawn measure(const char *svg, int which)
{
    Drawn d;
    memset(&d, 0, sizeof d);
    const char *root = strchr(strstr(svg, "<svg "), '<');
    d.x0 = attr(root, "data-x0=\"");
    d.px_per_ms = attr(root, "data-px-per-ms=\"");
    double right = d.x0;
    int panel = -1, s = -1;
    for (const char *c = svg; *c; c++) {
        if (*c != '<') continue;
        if (starts(c, "<g class=\"legend\"")) break;
        if (starts(c, "<g class=\"panel\"")) { panel++; s = -1; continue; }
        if (panel != which) continue;
        if (starts(c, "<g class=\"stage\"")) {
            s = (int)attr(c, " data-stage=\"");
            assert_true(s >= 0 && s < MAX_ST);
            if (s + 1 > d.stages) d.stages = s + 1;
        } else if (starts(c, "</g>")) {
            s = -1;
        } else if (starts(c, "<text class=\"lbl\"")) {
            assert_true(s >= 0);
            d.labels++;
        } else if (starts(c, "<rect class=\"op ")) {
            assert_true(s >= 0);
            const char *cls = c + strlen("<rect class=\"op ");
            double x = attr(c, " x=\""), w = attr(c, " width=\"");
            d.boxes[s]++;
            if (is_compute_class(cls)) {
                d.busy_px[s] += w;
                right = fmax(right, x + w);
            }
            bool recv = false;
            for (const char *q = cls; *q && *q != '"' && !recv; q++) recv = starts(q, " recv");
            if (recv) d.wait_px[s] += w;
            if ((starts(cls, "EMBR") || starts(cls, "NRMR")) && d.end_px[s] > 0 && x > d.end_px[s])
                d.wait_px[s] += x - d.end_px[s];
            if (d.end_px[s] == 0) d.end_px[s] = d.x0;
            d.end_px[s] = fmax(d.end_px[s], x + w);
            const char *close = strchr(c, '>');
            if (close && starts(close + 1, "<title>")) d.tooltips++;
        }
    }
    assert_int_equal(panel >= which, true);
    d.pipe_end_px = right;
    return d;
}

/* The bubble as drawn (planner/simulate.h's definition): on the row that
 * ends last (the first within a pixel's rounding), its waits for other
 * stages over its compute width. */
static double drawn_bubble(const Drawn *d)
{
    double end = 0;
    for (int s = 0; s < d->stages; s++) end = fmax(end, d->end_px[s]);
    int crit = 0;
    while (crit + 1 < d->stages && d->end_px[crit] < end - 1e-2) crit++;
    return d->busy_px[crit] > 0 ? d->wait_px[crit] / d->busy_px[crit] : 0;
}

/* Render panels to a string (caller frees). */
static char *render(const TrTimeline *const *panels, int n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_true(tr_write_svg(f, panels, n));
    fclose(f);
    return buf;
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* A Program of p uniform stages from a hand-written cost table:
 * forward F, backward 2F (input F + weight F), no communication cost,
 * a 1 ms optimizer step. */
static void uniform_program(int sched, int p, int v, int m, PlanProgram *out)
{
    PlanOpCosts c;
    assert_true(plan_op_costs_alloc(&c, p, v));
    c.zero = 0;
    c.schedule = sched;
    c.n_micro = m;
    double f = 1e-3 / v;   /* 1 ms of forward per stage and micro-batch */
    for (int k = 0; k < p * v; k++) {
        c.fwd[k] = f; c.bwd[k] = 2 * f; c.bwd_input[k] = f; c.bwd_weight[k] = f;
        c.first_layer[k] = k; c.end_layer[k] = k + 1; c.layers[k] = 1;
    }
    for (int s = 0; s < p; s++) c.opt[s] = 1e-3;   /* after the pipeline: no effect on the bubble */
    assert_true(plan_lower_costs(&c, out));
    out->dp = 1; out->tp = 1;
    plan_op_costs_free(&c);
}

/* Draw program prog; check box counts and that drawn idle == simulated
 * bubble. Returns the drawn bubble. */
static double check_drawn(const PlanProgram *prog, char **svg_out)
{
    PlanSimResult sim;
    assert_true(plan_simulate(prog, &sim));
    TrTimeline t;
    assert_true(tr_from_program(prog, &sim, "t", &t));
    const TrTimeline *panels[] = { &t };
    char *svg = render(panels, 1);
    Drawn d = measure(svg, 0);
    assert_int_equal(d.stages, prog->pp);
    for (int s = 0; s < prog->pp; s++) assert_int_equal(d.boxes[s], prog->stages[s].n_ops);
    double b = drawn_bubble(&d);
    if (fabs(b - sim.bubble_fraction) > 5e-4)
        fail_msg("drawn bubble %.6f, simulated %.6f", b, sim.bubble_fraction);
    assert_true(fabs(tr_bubble_of(&t) - sim.bubble_fraction) < 1e-9);
    tr_timeline_free(&t);
    plan_sim_free(&sim);
    if (svg_out) *svg_out = svg;
    else free(svg);
    return b;
}

/* GPipe and 1F1B both idle (p-1)/m; interleaving divides that by v;
 * ZB-H1 beats 1F1B — each as drawn. */
static void test_uniform_schedules(void **state)
{
    (void)state;
    PlanProgram g, o, il, zb;
    uniform_program(SCHED_GPIPE, 4, 1, 8, &g);
    uniform_program(SCHED_1F1B, 4, 1, 8, &o);
    uniform_program(SCHED_INTERLEAVED, 4, 2, 8, &il);
    uniform_program(SCHED_ZB_H1, 4, 1, 8, &zb);
    double bg = check_drawn(&g, NULL), bo = check_drawn(&o, NULL);
    double bi = check_drawn(&il, NULL), bz = check_drawn(&zb, NULL);
    assert_true(fabs(bg - 3.0 / 8) < 5e-4);
    assert_true(fabs(bo - 3.0 / 8) < 5e-4);
    assert_true(fabs(bi - 3.0 / 16) < 5e-4);
    /* ZB-H1 closed form (p-1)(F+B-W)/(m(F+B+W)) = 3/24; the list
     * scheduler may only do as well or better */
    assert_true(bz <= 3.0 / 24 + 5e-4);
    assert_true(bz < bo);
    plan_program_free(&g); plan_program_free(&o);
    plan_program_free(&il); plan_program_free(&zb);
}

static Plan load(const char *path, DslArena *arena)
{
    DslDiag diag;
    dsl_diag_init(&diag, stderr);
    Plan p;
    DslFile *f = dsl_load(arena, &diag, path);
    assert_non_null(f);
    assert_int_equal(plan_sema(f, &diag, arena, &p), 0);
    return p;
}

/* One real plan (tests/trace/pipe4.plan) under gpipe, 1f1b and zb-h1:
 * boxes per stage == ops, drawn idle == simulated bubble, zb-h1 idles
 * least. */
static void test_plan_schedules(void **state)
{
    (void)state;
    DslArena arena = { 0 };
    Plan p = load("tests/trace/pipe4.plan", &arena);
    int sched[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_ZB_H1 };
    double b[3];
    for (int i = 0; i < 3; i++) {
        p.layout.schedule = sched[i];
        PlanProgram prog;
        char why[256];
        if (!plan_lower(&p, &prog, why, sizeof why)) fail_msg("lower: %s", why);
        b[i] = check_drawn(&prog, NULL);
        plan_program_free(&prog);
    }
    assert_true(b[2] < b[1]);
    assert_true(b[2] < b[0]);
    dsl_arena_free(&arena);
}

/* 64 stages x 256 micro-batches: every box drawn, labels thinned, no
 * per-box tooltips, the file stays a few MB. */
static void test_large(void **state)
{
    (void)state;
    PlanProgram prog;
    uniform_program(SCHED_1F1B, 64, 1, 256, &prog);
    char *svg;
    double b = check_drawn(&prog, &svg);
    assert_true(fabs(b - 63.0 / 256) < 1e-3);
    Drawn d = measure(svg, 0);
    int boxes = 0;
    for (int s = 0; s < 64; s++) boxes += d.boxes[s];
    assert_true(d.labels < boxes / 2);
    assert_int_equal(d.tooltips, 0);
    assert_true(strlen(svg) < 16u << 20);
    free(svg);
    plan_program_free(&prog);
}

/* A small picture keeps a tooltip on every box and labels on the wide ones. */
static void test_small_labels(void **state)
{
    (void)state;
    PlanProgram prog;
    uniform_program(SCHED_1F1B, 2, 1, 4, &prog);
    char *svg;
    check_drawn(&prog, &svg);
    Drawn d = measure(svg, 0);
    int boxes = d.boxes[0] + d.boxes[1];
    assert_int_equal(d.tooltips, boxes);
    assert_int_equal(d.labels, 2 * 8 + 2);   /* every F and B, and "opt" on each stage */
    assert_non_null(strstr(svg, ">opt</text>"));
    free(svg);
    plan_program_free(&prog);
}

static void timeline_of(int sched, int p, int v, int m, TrTimeline *t, const char *name)
{
    PlanProgram prog;
    PlanSimResult sim;
    uniform_program(sched, p, v, m, &prog);
    assert_true(plan_simulate(&prog, &sim));
    assert_true(tr_from_program(&prog, &sim, name, t));
    plan_sim_free(&sim);
    plan_program_free(&prog);
}

static char *write_tmp(const char *text, char *path)
{
    strcpy(path, "/tmp/planc-trace-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

/* Chrome trace out and back in: the same boxes, times to 1 ns. */
static void test_chrome_round_trip(void **state)
{
    (void)state;
    TrTimeline t, back;
    timeline_of(SCHED_INTERLEAVED, 4, 2, 8, &t, "rt \"quoted\"");
    char path[64], why[128];
    strcpy(path, "/tmp/planc-trace-XXXXXX");
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    assert_true(tr_write_chrome(f, &t));
    fclose(f);
    assert_true(tr_read_chrome(path, &back, why, sizeof why));
    unlink(path);
    assert_int_equal(back.n_boxes, t.n_boxes);
    assert_int_equal(back.pp, t.pp);
    assert_int_equal(back.chunks, 2);
    assert_string_equal(back.name, "rt \"quoted\"");
    assert_string_equal(back.source, "predicted");
    for (int i = 0; i < t.n_boxes; i++) {
        assert_int_equal(back.boxes[i].stage, t.boxes[i].stage);
        assert_int_equal(back.boxes[i].op, t.boxes[i].op);
        assert_int_equal(back.boxes[i].kind, t.boxes[i].kind);
        assert_int_equal(back.boxes[i].mb, t.boxes[i].mb);
        assert_int_equal(back.boxes[i].chunk, t.boxes[i].chunk);
        assert_true(fabs(back.boxes[i].start - t.boxes[i].start) < 1e-9);
        assert_true(fabs(back.boxes[i].end - t.boxes[i].end) < 1e-9);
    }
    assert_true(fabs(back.bubble_fraction - t.bubble_fraction) < 1e-6);
    /* --compare: both panels drawn, each with the Program's boxes */
    const TrTimeline *panels[] = { &t, &back };
    char *svg = render(panels, 2);
    for (int k = 0; k < 2; k++) {
        Drawn d = measure(svg, k);
        assert_int_equal(d.stages, 4);
        int n = 0;
        for (int s = 0; s < 4; s++) n += d.boxes[s];
        assert_int_equal(n, t.n_boxes);
    }
    assert_non_null(strstr(svg, "rt &quot;quoted&quot;"));
    free(svg);
    tr_timeline_free(&t);
    tr_timeline_free(&back);
}

/* A measured trace as an executable would write it: several ranks per
 * stage (the lowest is kept), clock offset (removed), metadata and
 * unknown fields (skipped). */
static void test_read_measured(void **state)
{
    (void)state;
    const char *json =
        "{\"traceEvents\": [\n"
        " {\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"stage 0\"}},\n"
        " {\"name\":\"FWD 0\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":5000,\"dur\":1000,"
        "  \"args\":{\"kind\":\"FWD\",\"mb\":0,\"chunk\":0,\"op\":0,\"rank\":2,\"extra\":[1,{\"a\":null}]}},\n"
        " {\"name\":\"FWD 0\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":5010,\"dur\":990,"
        "  \"args\":{\"kind\":\"FWD\",\"mb\":0,\"chunk\":0,\"op\":0,\"rank\":3}},\n"
        " {\"name\":\"BWD 0\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":7000,\"dur\":2000,"
        "  \"args\":{\"kind\":\"BWD\",\"mb\":0,\"chunk\":0,\"op\":2,\"rank\":2}},\n"
        " {\"name\":\"SEND\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":6000,\"dur\":100,"
        "  \"args\":{\"kind\":\"SEND_ACT\",\"mb\":0,\"chunk\":0,\"op\":1,\"rank\":2,\"bytes\":1e6}},\n"
        " {\"name\":\"RECV_ACT 0\",\"ph\":\"X\",\"pid\":1,\"tid\":0,\"ts\":5000,\"dur\":1100,"
        "  \"args\":{\"kind\":\"RECV_ACT\",\"mb\":0,\"chunk\":0,\"op\":0,\"rank\":6}},\n"
        " {\"name\":\"FWD 0\",\"ph\":\"X\",\"pid\":1,\"tid\":0,\"ts\":6100,\"dur\":1000,"
        "  \"args\":{\"kind\":\"FWD\",\"mb\":0,\"chunk\":0,\"op\":1,\"rank\":6}},\n"
        " {\"name\":\"BWD 0\",\"ph\":\"X\",\"pid\":1,\"tid\":0,\"ts\":7100,\"dur\":2000,"
        "  \"args\":{\"kind\":\"BWD\",\"mb\":0,\"chunk\":0,\"op\":2,\"rank\":6}},\n"
        " {\"name\":\"counter\",\"ph\":\"C\",\"pid\":1,\"ts\":1,\"args\":{\"x\":1}},\n"
        " {\"name\":\"mystery\",\"ph\":\"X\",\"pid\":1,\"ts\":1,\"dur\":1,\"args\":{\"kind\":\"NOPE\"}}\n"
        "], \"otherData\": {\"source\": \"measured\", \"name\": \"m\", \"chunks\": 1}}\n";
    char path[64], why[128];
    TrTimeline t;
    write_tmp(json, path);
    bool ok = tr_read_chrome(path, &t, why, sizeof why);
    unlink(path);
    if (!ok) fail_msg("%s", why);
    assert_int_equal(t.pp, 2);
    assert_int_equal(t.n_boxes, 6);
    assert_string_equal(t.source, "measured");
    assert_int_equal(t.boxes[0].kind, OP_FWD);
    assert_true(fabs(t.boxes[0].start) < 1e-12);            /* shifted to 0 */
    assert_true(fabs(t.boxes[0].end - 1e-3) < 1e-12);       /* rank 2's, not rank 3's */
    assert_int_equal(t.boxes[1].kind, OP_SEND_ACT);         /* sorted by op index */
    assert_true(fabs(t.boxes[1].bytes - 1e6) < 1e-6);
    assert_true(fabs(t.step_time - 4.1e-3) < 1e-12);
    /* bubble from the boxes: stage 1 ends last (4.1 ms); it waited 1.1 ms
     * for stage 0's activation, over 3 ms of compute */
    assert_true(fabs(t.bubble_fraction - 1.1 / 3.0) < 1e-9);
    tr_timeline_free(&t);
}

/* Broken input is refused with a reason, never half-read. */
static void test_read_errors(void **state)
{
    (void)state;
    const char *bad[] = {
        "{\"traceEvents\": [ {\"ph\":\"X\",\"pid\":0,\"ts\":1,\"dur\":1,\"args\":{\"kind\":\"FWD\"}}",
        "{\"traceEvents\": [] }",
        "[1, 2]",
        "{\"traceEvents\": [ {\"ph\":\"X\",\"pid\":-1,\"ts\":1,\"dur\":1,\"args\":{\"kind\":\"FWD\"}} ] }",
        "{\"traceEvents\": [ {\"ph\":\"X\" \"pid\":0} ] }",
        "{\"traceEvents\": [ {\"ph\":\"X\",\"pid\":0,\"ts\":1,\"dur\":1,\"args\":{\"kind\":\"FWD\"}} ] } x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[64], why[128] = "";
        TrTimeline t;
        write_tmp(bad[i], path);
        bool ok = tr_read_chrome(path, &t, why, sizeof why);
        unlink(path);
        if (ok) fail_msg("case %zu was accepted", i);
        assert_true(why[0] != 0);
        assert_null(t.boxes);
    }
    char why[128];
    TrTimeline t;
    assert_false(tr_read_chrome("/nonexistent/trace.json", &t, why, sizeof why));
    assert_non_null(strstr(why, "cannot open"));
}

/* The search plot: every point, grey beyond memory, front joined, best named. */
static void test_search_plot(void **state)
{
    (void)state;
    const double G = 1073741824.0;
    TrPoint pts[] = {
        { 0.100, 10 * G, true, true, "A" },
        { 0.050, 20 * G, true, true, "B" },
        { 0.120, 15 * G, true, true, "C dominated" },
        { 0.030, 100 * G, false, true, "D too big" },
        { 0.040, 30 * G, true, false, "E bound" },
        { 0.020, 25 * G, true, true, "F fastest" },
    };
    TrSearchPlot plot = { "t <&>", 80 * G, 6, pts, -1 };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_true(tr_write_search_svg(f, &plot));
    fclose(f);
    assert_int_equal(count(buf, "class=\"pt ok\""), 4);
    assert_int_equal(count(buf, "class=\"pt ok bound\""), 1);
    assert_int_equal(count(buf, "class=\"pt no\""), 1);
    assert_int_equal(count(buf, "class=\"memline\""), 1);
    /* front by memory: A (10 GiB), B (20), F (25): three points */
    const char *pl = strstr(buf, "<polyline class=\"front\" points=\"");
    assert_non_null(pl);
    const char *pe = strchr(pl + 34, '"');
    int commas = 0;
    for (const char *c = pl; c < pe; c++) commas += *c == ',';
    assert_int_equal(commas, 3);
    assert_non_null(strstr(buf, "best: F fastest"));
    assert_non_null(strstr(buf, "t &lt;&amp;&gt;"));
    free(buf);
}

/* tr_search_svg on a real search of pipe4.plan with every point recorded. */
static void test_search_file(void **state)
{
    (void)state;
    DslArena arena = { 0 };
    Plan p = load("tests/trace/pipe4.plan", &arena);
    p.layout.schedule = PLAN_AUTO;
    p.layout.micro_batch = PLAN_AUTO;
    PlanSearchOptions o = plan_search_defaults();
    o.record = true;
    PlanSearch s;
    char why[256], path[512];
    if (!plan_search(&p, &o, &s, why, sizeof why)) fail_msg("search: %s", why);
    assert_true(s.n_points > 1);
    /* kept under $TRACE_OUT (make test-trace) for run.sh's XML check */
    const char *dir = getenv("TRACE_OUT");
    if (dir && snprintf(path, sizeof path, "%s/search.svg", dir) < (int)sizeof path) mkdir(dir, 0777);
    else write_tmp("", path);
    assert_int_equal(tr_search_svg(path, &p, &s), 0);
    FILE *f = fopen(path, "r");
    static char buf[4 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    if (!dir) unlink(path);
    assert_int_equal((int64_t)count(buf, "<circle class=\"pt "), s.n_points);
    assert_non_null(strstr(buf, "best: dp 2 tp 1 pp 4"));
    plan_search_free(&s);
    dsl_arena_free(&arena);
}

/* The step-level collectives are drawn: in the Chrome trace an event per
 * op named for what it sums ("norm" and "all-reduce"; "embed" and
 * "all-reduce"), on the collectives tid, in the SVG a box with that
 * tooltip — the gradient norm on every stage, the tied embedding on the
 * first and the last, the SP norms on every stage. */
static void test_step_collectives_drawn(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)];
    Model m;
    plan_preset_gpt(&m, buf, "g", 8, 512, 8, 1024, 8192, DTYPE_BF16);   /* tied head */
    for (int pp = 1; pp <= 4; pp *= 2) {
        Plan p = plan_preset_plan(m, plan_preset_dgx_a100(1), 4 / pp, 2, pp, 1, 1, 4 * pp, SCHED_1F1B, 1,
                                  RECOMPUTE_NONE, 1);
        PlanProgram prog;
        PlanSimResult sim;
        TrTimeline t;
        char why[256];
        if (!plan_lower(&p, &prog, why, sizeof why)) fail_msg("lower: %s", why);
        assert_true(plan_simulate(&prog, &sim));
        assert_true(tr_from_program(&prog, &sim, "g", &t));
        char *json = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&json, &len);
        assert_true(tr_write_chrome(f, &t));
        fclose(f);
        const TrTimeline *panels[] = { &t };
        char *svg = render(panels, 1);
        size_t norm = count(json, "{\"name\":\"gradient-norm all-reduce (all ranks)\",\"cat\":\"NORM_REDUCE\","
                                  "\"ph\":\"X\",\"pid\":");
        size_t embed = count(json, "{\"name\":\"tied-embedding all-reduce (first + last stage)\","
                                   "\"cat\":\"EMBED_REDUCE\"");
        size_t spn = count(json, "{\"name\":\"SP norm-gradient all-reduce (TP)\",\"cat\":\"SP_NORM_REDUCE\"");
        assert_int_equal(norm, (size_t)pp);
        assert_int_equal(embed, pp > 1 ? 2 : 0);
        assert_int_equal(spn, (size_t)pp);
        assert_int_equal(count(json, "\"cat\":\"NORM_REDUCE\",\"ph\":\"X\",\"pid\":0,\"tid\":2,"), 1);
        assert_int_equal(count(svg, "<title>gradient-norm all-reduce (all ranks)"), (size_t)pp);
        assert_int_equal(count(svg, "<title>tied-embedding all-reduce"), pp > 1 ? 2 : 0);
        assert_int_equal(count(svg, "<title>SP norm-gradient all-reduce"), (size_t)pp);
        free(json);
        free(svg);
        tr_timeline_free(&t);
        plan_sim_free(&sim);
        plan_program_free(&prog);
    }
}

/* A mixture's all-to-alls (issue 17): the Program carries them as the
 * forward's and backward's ep_dur; the timeline draws each as a segment
 * at the end of its pass on the in-pass lane (one per FWD / BWD with
 * ep > 1, none at ep 1), named in the SVG and the Chrome trace. */
static void test_ep_all_to_all_drawn(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Model m;
    plan_preset_llama(&m, buf, "moe", 4, 1024, 8, 8, 2048, 512, 1000, DTYPE_BF16);
    for (int i = 0; i < m.n_layers; i++)
        if (buf[i].kind == LAYER_MLP) { buf[i].kind = LAYER_MOE; buf[i].experts = 8; buf[i].top_k = 2; }
    for (int ep = 1; ep <= 8; ep *= 8) {
        Plan p = plan_preset_plan(m, plan_preset_dgx_h100(1), 8, 1, 1, 1, 1, 16, SCHED_1F1B, 1,
                                  RECOMPUTE_NONE, 0);
        p.layout.ep = ep;
        PlanProgram prog;
        PlanSimResult sim;
        TrTimeline t;
        char why[256];
        if (!plan_lower(&p, &prog, why, sizeof why)) fail_msg("lower: %s", why);
        assert_true(plan_simulate(&prog, &sim));
        assert_true(tr_from_program(&prog, &sim, "moe", &t));
        int passes = 0, segs = 0;
        for (int i = 0; i < t.n_boxes; i++) {
            const TrBox *b = &t.boxes[i];
            passes += b->kind == OP_FWD || b->kind == OP_BWD;
            if (b->kind != OP_EP_ALL_TO_ALL) continue;
            segs++;
            const PlanOp *o = &prog.stages[0].ops[b->op];   /* the pass that carries it */
            assert_true(o->kind == OP_FWD || o->kind == OP_BWD);
            assert_int_equal(tr_lane_of(b->kind), TR_LANE_PASS);
            assert_true(b->end == sim.span[0][b->op].end && b->end - b->start <= o->dur);
            assert_true(fabs((b->end - b->start) - o->ep_dur) <= 1e-12 * o->dur);
            assert_true(b->bytes == o->ep_bytes && b->bytes > 0);
        }
        assert_int_equal(segs, ep > 1 ? passes : 0);
        char *json = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&json, &len);
        assert_true(tr_write_chrome(f, &t));
        fclose(f);
        const TrTimeline *panels[] = { &t };
        char *svg = render(panels, 1);
        assert_int_equal(count(json, "\"cat\":\"EP_ALL_TO_ALL\",\"ph\":\"X\",\"pid\":0,\"tid\":3,"), (size_t)segs);
        assert_int_equal(count(json, "\"tid\":3,\"args\":{\"name\":\"EP all-to-alls (inside the passes)"),
                         ep > 1 ? 1 : 0);
        assert_int_equal(count(svg, "<title>EP dispatch + combine all-to-alls"), (size_t)segs);
        assert_int_equal(count(svg, ".EPA2A{"), ep > 1 ? 1 : 0);   /* its style only where drawn */
        free(json);
        free(svg);
        tr_timeline_free(&t);
        plan_sim_free(&sim);
        plan_program_free(&prog);
    }
}

/* |a - b| within rel of the larger, or within 1e-15 s. */
static bool near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + 1e-15;
}

#define ASSERT_NEAR(a, b, rel) \
    do { if (!near((a), (b), (rel))) fail_msg("%s = %.12g, %s = %.12g", #a, (double)(a), #b, (double)(b)); } while (0)

/* Every stage's summary against the simulator's books of that stage
 * (PlanStageTimes) and against the boxes drawn for it: the items add up
 * to the stage's end, the passes' items to its forward/backward time, and
 * the in-pass segments, optimizer and step-level boxes to their items. */
static void check_summary(const PlanProgram *prog, const PlanSimResult *sim, const TrTimeline *t)
{
    assert_non_null(t->summary);
    assert_int_equal(t->critical, sim->critical);
    for (int s = 0; s < prog->pp; s++) {
        const TrStageSummary *g = &t->summary[s];
        const PlanStageTimes *st = &sim->times[s];
        const double *it = g->item;
        double sum = 0;
        for (int i = 0; i < TR_N_ITEMS; i++) {
            assert_true(it[i] >= -1e-12 * st->end);
            sum += it[i];
        }
        ASSERT_NEAR(g->end, st->end, 0);
        ASSERT_NEAR(sum, st->end, 1e-9);
        ASSERT_NEAR(it[TR_ITEM_FWD] + it[TR_ITEM_BWD] + it[TR_ITEM_RECOMPUTE] + it[TR_ITEM_TP] + it[TR_ITEM_EP],
                    st->busy, 1e-9);
        ASSERT_NEAR(it[TR_ITEM_DP], st->comm_wait + st->stall + st->sync, 1e-12);
        ASSERT_NEAR(it[TR_ITEM_BUBBLE], st->bubble, 0);
        ASSERT_NEAR(it[TR_ITEM_P2P], st->p2p, 0);
        ASSERT_NEAR(it[TR_ITEM_OPT], st->opt, 0);
        ASSERT_NEAR(it[TR_ITEM_SLOWED], st->slowed, 0);
        /* from the drawn boxes */
        double pass = 0, tp = 0, ep = 0, opt = 0, stepc = 0, recv = 0;
        for (int i = 0; i < t->n_boxes; i++) {
            const TrBox *b = &t->boxes[i];
            if (b->stage != s) continue;
            double d = b->end - b->start;
            if (tr_is_compute(b->kind)) pass += d;
            if (b->kind == OP_TP_COLL) tp += d;
            if (b->kind == OP_EP_ALL_TO_ALL) ep += d;
            if (b->kind == OP_OPT_STEP) opt += d;
            if (b->kind == OP_SP_NORM_REDUCE || b->kind == OP_EMBED_REDUCE || b->kind == OP_NORM_REDUCE) stepc += d;
            if (b->kind == OP_RECV_ACT || b->kind == OP_RECV_GRAD) recv += d;
        }
        ASSERT_NEAR(pass, st->busy + st->stall, 1e-9);
        ASSERT_NEAR(tp, it[TR_ITEM_TP], 1e-9);
        ASSERT_NEAR(ep, it[TR_ITEM_EP], 1e-9);
        ASSERT_NEAR(opt, it[TR_ITEM_OPT], 1e-9);
        ASSERT_NEAR(stepc, it[TR_ITEM_STEPCOLL], 1e-9);
        assert_true(recv <= it[TR_ITEM_BUBBLE] * (1 + 1e-9) + 1e-15);
    }
}

/* The passes' items of every stage against the cost table itself, not
 * the Program: per micro-batch and chunk its recomputed kernels
 * (recompute less the collectives it repeats), TP collectives and EP
 * all-to-alls, whatever the schedule splits the backward into. */
static void check_summary_costs(const Plan *p, const TrTimeline *t)
{
    Layout l = plan_layout_defaults(p);
    PlanCosts pc;
    assert_true(plan_costs(p, &l, &pc));
    for (int s = 0; s < l.pp; s++) {
        double rc = 0, tp = 0, ep = 0, m = (double)pc.n_micro;
        for (int v = 0; v < l.chunks; v++) {
            const PlanChunkCost *k = &pc.cost[v * l.pp + s];
            assert_true(k->recompute_coll >= 0 && k->recompute_coll <= k->recompute + 1e-15);
            assert_true(k->recompute_coll <= k->bwd_tp + k->bwd_ep + 1e-15);
            if (l.recompute == RECOMPUTE_FULL && l.tp > 1) assert_true(k->recompute_coll > 0);
            rc += k->recompute - k->recompute_coll;
            tp += k->fwd_tp + k->bwd_tp;
            ep += k->fwd_ep + k->bwd_ep;
        }
        ASSERT_NEAR(t->summary[s].item[TR_ITEM_RECOMPUTE], m * rc, 1e-9);
        ASSERT_NEAR(t->summary[s].item[TR_ITEM_TP], m * tp, 1e-9);
        ASSERT_NEAR(t->summary[s].item[TR_ITEM_EP], m * ep, 1e-9);
    }
    plan_costs_free(&pc);
}

/* The summary bars as drawn: per stage, the rects' widths add up to the
 * stage's end on the time axis and their data-s seconds to the same end
 * as the summary's; returns the bars found. */
static int check_summary_drawn(const char *svg, const TrTimeline *t)
{
    const char *root = strchr(strstr(svg, "<svg "), '<');
    double px_per_ms = attr(root, "data-px-per-ms=\"");
    int bars = 0;
    for (const char *c = strstr(svg, "<g class=\"sumbar\""); c; c = strstr(c + 1, "<g class=\"sumbar\"")) {
        int s = (int)attr(c, " data-stage=\"");
        double end = attr(c, " data-end=\""), w = 0, secs = 0;
        assert_true(s >= 0 && s < t->pp);
        const char *close = strstr(c, "</g>");
        for (const char *r = strstr(c, "<rect class=\"sum "); r && r < close; r = strstr(r + 1, "<rect class=\"sum ")) {
            w += attr(r, " width=\"");
            secs += attr(r, " data-s=\"");
        }
        ASSERT_NEAR(end, t->summary[s].end, 1e-8);
        ASSERT_NEAR(secs, end, 1e-7);
        assert_true(fabs(w - end * 1e3 * px_per_ms) <= 1e-2);
        bars++;
    }
    return bars;
}

/* Where the time goes (issue 25): the summary of every stage of real
 * plans (gpipe, 1f1b, zb-h1, ZeRO-3, interleaved with tp 8 and 128
 * micro-batches, a mixture) is the simulator's and the drawing's; the
 * critical stage's items are the figures `planc check` prints. */
static void test_summary_is_the_simulators(void **state)
{
    (void)state;
    const char *plans[] = { "tests/trace/pipe4.plan", "tests/trace/zb2.plan", "examples/llama3-70b.plan",
                            "examples/mixtral-8x7b.plan", "examples/gpt3-175b.plan",
                            "validation/narayanan2021-gpt-18_4b.plan" };   /* full recompute, tp 8 */
    for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
        DslArena arena = { 0 };
        Plan p = load(plans[k], &arena);
        for (int sched = 0; sched < (k == 0 ? 3 : 1); sched++) {
            static const int scheds[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_ZB_H1 };
            if (k == 0) p.layout.schedule = scheds[sched];
            PlanProgram prog;
            PlanSimResult sim;
            TrTimeline t;
            PlanEval ev;
            char why[256];
            if (!plan_lower(&p, &prog, why, sizeof why)) fail_msg("%s: lower: %s", plans[k], why);
            assert_true(plan_simulate(&prog, &sim));
            assert_true(tr_from_program(&prog, &sim, "t", &t));
            check_summary(&prog, &sim, &t);
            check_summary_costs(&p, &t);
            plan_evaluate(&p, &ev);
            const double *it = t.summary[ev.critical].item;
            assert_int_equal(ev.critical, t.critical);
            ASSERT_NEAR(it[TR_ITEM_TP], ev.times.tp, 1e-9);
            ASSERT_NEAR(it[TR_ITEM_EP], ev.times.ep, 1e-9);
            ASSERT_NEAR(it[TR_ITEM_BUBBLE], ev.times.bubble, 1e-9);
            ASSERT_NEAR(it[TR_ITEM_OPT], ev.times.optimizer, 1e-9);
            ASSERT_NEAR(it[TR_ITEM_FWD] + it[TR_ITEM_BWD] + it[TR_ITEM_RECOMPUTE] + it[TR_ITEM_SLOWED],
                        ev.times.compute, 1e-9);
            ASSERT_NEAR(t.summary[ev.critical].end, ev.step_time, 1e-9);
            const TrTimeline *panels[] = { &t };
            char *svg = render(panels, 1);
            assert_int_equal(check_summary_drawn(svg, &t), prog.pp);
            free(svg);
            plan_eval_free(&ev);
            tr_timeline_free(&t);
            plan_sim_free(&sim);
            plan_program_free(&prog);
        }
        dsl_arena_free(&arena);
    }
}

/* The TP collectives a pass waits for (issue 25): Llama 3 70B at tp 8 and
 * 128 micro-batches draws one TP segment per forward and backward, inside
 * its pass, on the in-pass lane; on the stage that ends last they add up
 * to the exposed TP seconds `planc check` prints (PlanTimes.tp); the SVG
 * and the Chrome trace name every one. */
static void test_tp_collectives_drawn(void **state)
{
    (void)state;
    DslArena arena = { 0 };
    Plan p = load("examples/llama3-70b.plan", &arena);
    PlanProgram prog;
    PlanSimResult sim;
    TrTimeline t;
    PlanEval ev;
    char why[256];
    if (!plan_lower(&p, &prog, why, sizeof why)) fail_msg("lower: %s", why);
    assert_int_equal(prog.tp, 8);
    assert_int_equal(prog.n_micro, 128);   /* global_batch / (dp * micro_batch) */
    assert_true(plan_simulate(&prog, &sim));
    assert_true(tr_from_program(&prog, &sim, "llama3-70b", &t));
    plan_evaluate(&p, &ev);
    assert_true(ev.times.tp > 0.1 * ev.step_time);   /* the 12 s of 47 s the boxes used to hide */
    int segs = 0, passes = 0;
    double *tp = calloc((size_t)prog.pp, sizeof *tp);
    for (int i = 0; i < t.n_boxes; i++) {
        const TrBox *b = &t.boxes[i];
        passes += tr_is_compute(b->kind) && b->kind != OP_BWD_WEIGHT;
        if (b->kind != OP_TP_COLL) continue;
        segs++;
        const PlanOp *o = &prog.stages[b->stage].ops[b->op];   /* the pass that carries it */
        const PlanSpan *sp = &sim.span[b->stage][b->op];
        assert_true(o->kind == OP_FWD || o->kind == OP_BWD);
        assert_int_equal(tr_lane_of(b->kind), TR_LANE_PASS);
        assert_true(b->start >= sp->start && b->end <= sp->end);
        ASSERT_NEAR(b->end - b->start, o->tp_dur, 1e-9);
        tp[b->stage] += b->end - b->start;
    }
    assert_int_equal(segs, passes);
    ASSERT_NEAR(tp[ev.critical], ev.times.tp, 1e-9);
    char *json = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&json, &len);
    assert_true(tr_write_chrome(f, &t));
    fclose(f);
    const TrTimeline *panels[] = { &t };
    char *svg = render(panels, 1);
    assert_int_equal(count(json, "\"cat\":\"TP_COLL\",\"ph\":\"X\""), (size_t)segs);
    assert_int_equal(count(json, "\"tid\":3,\"args\":{\"name\":\"TP collectives (inside the passes)"),
                     (size_t)prog.pp);
    assert_non_null(strstr(json, "\"exposed_tp_s\":"));
    assert_int_equal(count(svg, "<title>TP collectives (inside the pass)"), (size_t)segs);
    assert_int_equal(count(svg, ".TPC{"), 1);
    assert_non_null(strstr(svg, "exposed TP 11.98 s"));
    free(json);
    free(svg);
    free(tp);
    plan_eval_free(&ev);
    tr_timeline_free(&t);
    plan_sim_free(&sim);
    plan_program_free(&prog);
    dsl_arena_free(&arena);
}

/* A measured trace's summary, from its boxes alone (tr_summarise_boxes):
 * llama3-70b's predicted trace read back as if measured gives, stage by
 * stage, the predicted items to the ns rounding of the format — the
 * backward with its recomputation inside, the compute slowed by the DP
 * collectives as gaps (or as waits before the step-level ops), the waits
 * for the stage's own sends as DP — and a
 * bubble whose share of the passes is the trace's bubble fraction. */
static void test_summary_of_measured(void **state)
{
    (void)state;
    DslArena arena = { 0 };
    Plan p = load("examples/llama3-70b.plan", &arena);
    PlanProgram prog;
    PlanSimResult sim;
    TrTimeline t, m;
    char why[256], path[64];
    if (!plan_lower(&p, &prog, why, sizeof why)) fail_msg("lower: %s", why);
    assert_true(plan_simulate(&prog, &sim));
    assert_true(tr_from_program(&prog, &sim, "l", &t));
    strcpy(path, "/tmp/planc-trace-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_true(tr_write_chrome(f, &t));
    fclose(f);
    if (!tr_read_chrome(path, &m, why, sizeof why)) fail_msg("read: %s", why);
    unlink(path);
    assert_non_null(m.summary);
    assert_int_equal(m.critical, t.critical);
    double tol = 1e-9 * (double)t.n_boxes;   /* ns per event */
    for (int s = 0; s < t.pp; s++) {
        const double *a = t.summary[s].item, *b = m.summary[s].item;
        double sum = 0;
        for (int i = 0; i < TR_N_ITEMS; i++) { assert_true(b[i] >= -tol); sum += b[i]; }
        assert_true(fabs(sum - m.summary[s].end) <= tol);
        assert_true(fabs(m.summary[s].end - t.summary[s].end) <= tol);
        assert_true(fabs(b[TR_ITEM_FWD] - a[TR_ITEM_FWD]) <= tol);
        assert_true(fabs(b[TR_ITEM_BWD] - (a[TR_ITEM_BWD] + a[TR_ITEM_RECOMPUTE])) <= tol);
        assert_true(b[TR_ITEM_RECOMPUTE] == 0 && a[TR_ITEM_TP] > 0);
        assert_true(fabs(b[TR_ITEM_TP] - a[TR_ITEM_TP]) <= tol);
        assert_true(fabs(b[TR_ITEM_BUBBLE] - a[TR_ITEM_BUBBLE]) <= tol);
        assert_true(fabs(b[TR_ITEM_OPT] - a[TR_ITEM_OPT]) <= tol);
        assert_true(fabs(b[TR_ITEM_STEPCOLL] - a[TR_ITEM_STEPCOLL]) <= tol);
        /* slowed compute shows as a gap before a pass, or as a wait before a step-level op */
        assert_true(a[TR_ITEM_GAP] == 0 && b[TR_ITEM_GAP] <= a[TR_ITEM_SLOWED] + tol);
        assert_true(fabs(b[TR_ITEM_GAP] + b[TR_ITEM_DP] - (a[TR_ITEM_SLOWED] + a[TR_ITEM_DP] + a[TR_ITEM_P2P])) <= tol);
    }
    const double *c = m.summary[m.critical].item;
    double passes = c[TR_ITEM_FWD] + c[TR_ITEM_BWD] + c[TR_ITEM_TP] + c[TR_ITEM_EP];
    assert_true(fabs(c[TR_ITEM_BUBBLE] / passes - m.bubble_fraction) <= 1e-9);
    const TrTimeline *panels[] = { &t, &m };
    char *svg = render(panels, 2);
    assert_int_equal(check_summary_drawn(svg, &t), 2 * t.pp);   /* both panels' bars */
    free(svg);
    tr_timeline_free(&m);
    tr_timeline_free(&t);
    plan_sim_free(&sim);
    plan_program_free(&prog);
    dsl_arena_free(&arena);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_schedules),
        cmocka_unit_test(test_plan_schedules),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_small_labels),
        cmocka_unit_test(test_chrome_round_trip),
        cmocka_unit_test(test_read_measured),
        cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_search_plot),
        cmocka_unit_test(test_search_file),
        cmocka_unit_test(test_step_collectives_drawn),
        cmocka_unit_test(test_ep_all_to_all_drawn),
        cmocka_unit_test(test_summary_is_the_simulators),
        cmocka_unit_test(test_tp_collectives_drawn),
        cmocka_unit_test(test_summary_of_measured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
