/*
 * validate.c: `make validate` — the planner's predictions beside published
 * measurements, with the error in percent; `--bench` times the fast path.
 *
 * planc-validate FILE.plan... [--other FILE.plan...]: each file is an
 * ordinary .plan file (validation/NAME.plan) that writes one published run —
 * its model, cluster, layout and the software it ran (the plan block's
 * overlap_* keys, the model's dropout) — with its published figure in one
 * comment line (planner/published.h reads it), a throughput
 *     # published: 137 TFLOP/s per GPU, counted as 96 B s l h^2 (...)
 * with how the source counted its FLOPs (96: Narayanan et al. 2021, Sec.
 * 5.1, the recomputed forward included; 72: Megatron-LM's README, without
 * it; 96 when not said; B the global batch, l the blocks, h the width, V the
 * vocabulary), or a measured step time
 *     # published: 1.42 s per step
 * The files before `--other` are the rows of published-runs.md, the
 * calibration target, printed with the goal; those after it
 * (validation/other/) are runs of the same kinds that planc is not
 * calibrated on, printed as a second table with their mean and largest
 * error and no goal: a check that the model is general, not fitted to the
 * first table. Each row is checked and timed as `planc check` would
 * (plan_evaluate, and the Program's simulation); a layout field the source
 * does not state is `auto` in the file, and the row takes the best layout
 * `planc search` finds for it. error% is the throughput's error, + when
 * planc is optimistic: predicted / published TFLOP/s - 1, or published /
 * predicted step - 1. Nothing here is fitted: the rows run through the same
 * model as every other plan, and what differs between rows is written in
 * their files. The exit status is 1 when a file does not load or states no
 * well-formed figure.
 *
 * And the ZeRO paper (Rajbhandari et al. 2020, Fig. 1): 7.5B parameters,
 * DP 64, model states per GPU 120 GB without ZeRO, 31.4 GB with ZeRO-1,
 * 16.6 GB with ZeRO-2 and 1.9 GB with ZeRO-3.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dsl/dsl.h"
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/layout.h"
#include "planner/memory.h"
#include "planner/presets.h"
#include "planner/program.h"
#include "planner/published.h"
#include "planner/search.h"
#include "planner/sema.h"
#include "planner/simulate.h"
#include "planner/stacks.h"

/* FLOPs per step as Megatron-LM's papers count them (Narayanan et al.
 * 2021, Sec. 5.1): `passes` dense passes of the blocks, 24 B s l h^2
 * (1 + s/6h) each (forward 1, backward 2, a recomputed forward 1 more),
 * and the head's 6 B s h V (it is not recomputed). passes 4 is the paper's
 * 96 B s l h^2 (1 + s/6h + V/16lh), passes 3 the 72 B s l h^2 (1 + s/6h +
 * V/12lh) of Megatron-LM's README table. */
static double megatron_flops(double passes, double B, double s, double l, double h, double V)
{
    return passes * 24 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V;
}

static double simulated_step(const Plan *p, double *bubble)
{
    PlanProgram prog;
    PlanSimResult r;
    char why[256];
    *bubble = NAN;
    if (!plan_lower(p, &prog, why, sizeof why)) { fprintf(stderr, "lower: %s\n", why); return NAN; }
    bool ok = plan_simulate(&prog, &r);
    double t = ok ? r.step_time : NAN;
    *bubble = ok ? r.bubble_fraction : NAN;
    if (ok) plan_sim_free(&r);
    plan_program_free(&prog);
    return t;
}

/* Whether a layout field is left to search. */
static bool has_auto(const Layout *l)
{
    return l->dp == PLAN_AUTO || l->tp == PLAN_AUTO || l->pp == PLAN_AUTO || l->zero == PLAN_AUTO ||
           l->micro_batch == PLAN_AUTO || l->global_batch == PLAN_AUTO || l->schedule == PLAN_AUTO ||
           l->chunks == PLAN_AUTO || l->recompute == PLAN_AUTO || l->sequence_parallel == PLAN_AUTO;
}

/* The row's layout: its plan block's, or, where the source does not state
 * some field (`auto`), the best `planc search` finds with the rest fixed
 * (the software keys are given, never searched). False when search finds
 * nothing that fits. */
static bool row_layout(const Plan *p, Layout *out)
{
    if (!p->has_layout || !has_auto(&p->layout)) {
        *out = plan_layout_defaults(p);
        return true;
    }
    PlanSearchOptions o = plan_search_defaults();
    PlanSearch r;
    char why[256];
    o.top = 1;
    bool ok = plan_search(p, &o, &r, why, sizeof why) && r.n_results > 0;
    if (ok) *out = r.results[0].layout;
    else fprintf(stderr, "%s: search: %s\n", p->file, why);
    plan_search_free(&r);
    return ok;
}

/* The row's name: the file's base name without .plan. */
static void row_name(const char *file, char *out, size_t n)
{
    const char *b = strrchr(file, '/');
    snprintf(out, n, "%s", b ? b + 1 : file);
    char *dot = strstr(out, ".plan");
    if (dot) *dot = 0;
}

/* A figure in its unit, 10 characters wide: TFLOP/s per GPU as "%10.1f",
 * seconds per step as "%9.2fs". */
static void print_figure(double x, PlanPublishedUnit unit)
{
    if (unit == PLAN_PUB_STEP_S) printf(" %9.2fs", x);
    else printf(" %10.1f", x);
}

/* Why: a row must test the model, never carry a figure tuned to it. Its
 * device is a preset (presets.c, where every kernel rate cites its
 * microbenchmark), with at most the hardware facts a part states
 * (memory, nvls) written over it; its links carry their bandwidth and
 * latency only — no efficiency, overlap slowdown or measured collective.
 * False, with the reason, when the row sets any other figure. */
static bool row_unfitted(const Plan *p, char *why, size_t n)
{
    const Device *d = &p->cluster.device, *q = d->name ? plan_device_preset(d->name) : NULL;
    if (!q) {
        snprintf(why, n, "device %s is not a preset: a validation row runs on a preset's cited figures",
                 d->name ? d->name : "custom");
        return false;
    }
    /* every figure but what a part states (its memory size, its NVSwitch) */
    bool same = d->flops_fp32 == q->flops_fp32 && d->flops_16 == q->flops_16 && d->flops_fp8 == q->flops_fp8 &&
                d->hbm == q->hbm && d->sms == q->sms && d->n_gemm == q->n_gemm && d->stream == q->stream &&
                d->launch == q->launch && d->overhead == q->overhead && d->act_fwd == q->act_fwd &&
                d->act_bwd == q->act_bwd && d->softmax_fwd == q->softmax_fwd &&
                d->softmax_bwd == q->softmax_bwd && d->gemm_eff == q->gemm_eff && d->attn_eff == q->attn_eff &&
                d->sustained == q->sustained && d->arch == q->arch && d->gemm_dtype == q->gemm_dtype;
    if (!same) {
        snprintf(why, n, "the device block overrides a kernel figure of preset %s (only memory and nvls may "
                 "be written over a preset in a validation row)", q->name);
        return false;
    }
    const Link *links[] = { &p->cluster.intra, &p->cluster.inter, &p->cluster.pod };
    static const char *const names[] = { "intra", "inter", "pod" };
    for (int i = 0; i < 3; i++)
        if (links[i]->efficiency > 0 || links[i]->overlap_compute > 0 || links[i]->overlap_comm > 0 ||
            links[i]->n_coll > 0) {
            snprintf(why, n, "link %s sets an efficiency, an overlap slowdown or measured collectives (a "
                     "validation row gives bandwidth and latency only)", names[i]);
            return false;
        }
    return true;
}

/* The rows of a table by device and software stack, for the summary
 * lines: "h100-sxm-80gb, megatron-core 0.8". */
#define MAX_KINDS 24
#define KIND_LEN  64
typedef struct {
    char        device[MAX_KINDS][KIND_LEN];
    int         rows[MAX_KINDS];
    double      sum[MAX_KINDS], max[MAX_KINDS];
    int         n;
} KindSums;

static void kind_add(KindSums *k, const char *device, double err)
{
    int i = 0;
    while (i < k->n && strcmp(k->device[i], device)) i++;
    if (i == k->n) {
        if (k->n == MAX_KINDS) return;
        snprintf(k->device[k->n++], KIND_LEN, "%s", device);
    }
    k->rows[i]++;
    k->sum[i] += err;
    if (err > k->max[i]) k->max[i] = err;
}

/* One row: load, evaluate, simulate, print. Its |error| in percent, or
 * -1 when the file does not load or states no well-formed figure. */
static double validate_row(const char *file, char *kind, size_t kind_len)
{
    DslArena arena;
    DslDiag diag;
    Plan p;
    PlanPublished pub;
    const char *why = NULL;
    char name[128];
    row_name(file, name, sizeof name);
    memset(&arena, 0, sizeof arena);
    dsl_diag_init(&diag, stderr);
    DslSource *src = dsl_source_read(&arena, file, &why);
    if (!src) fprintf(stderr, "%s: %s\n", file, why);
    bool has_pub = src && plan_published_read(src, &diag, &pub);
    DslFile *f = has_pub ? dsl_load(&arena, &diag, file) : NULL;
    if (!f || plan_sema(f, &diag, &arena, &p) != 0) {
        if (has_pub) fprintf(stderr, "%s: does not load\n", file);
        dsl_arena_free(&arena);
        return -1;
    }
    char fitted[256];
    if (!row_unfitted(&p, fitted, sizeof fitted)) {
        fprintf(stderr, "%s: error: %s\n", file, fitted);
        dsl_arena_free(&arena);
        return -1;
    }
    /* the stack the row names; a row that names none but writes its
     * software keys (Megatron-LM 2021's, a recipe's) is "keys as written" */
    char stack[48], mine[512], dflt[512];
    plan_stack_label(&p.software, stack, sizeof stack);
    Plan d = p;
    d.software = plan_software_defaults();
    plan_software_describe(&p, p.layout.zero, mine, sizeof mine);
    plan_software_describe(&d, p.layout.zero, dflt, sizeof dflt);
    bool own = p.software.stack == 0 && strcmp(mine, dflt) != 0;
    snprintf(kind, kind_len, "%s, %s", p.cluster.device.name, own ? "keys as written" : stack);
    Layout l;
    if (!row_layout(&p, &l)) {
        dsl_arena_free(&arena);
        return -1;
    }
    p.layout = l;
    p.has_layout = true;
    const Model *m = &p.model;
    PlanEval ev;
    plan_evaluate(&p, &ev);
    double bubble = NAN, step = simulated_step(&p, &bubble);
    double gpus = (double)(p.cluster.nodes * p.cluster.gpus_per_node);
    double sim = step, closed = ev.step_time, err = 100 * (pub.value / step - 1);
    if (pub.unit == PLAN_PUB_TFLOPS) {
        double fl = megatron_flops(pub.passes, (double)l.global_batch, (double)m->seq, m->n_blocks,
                                   (double)m->dim, (double)m->vocab);
        sim = fl / step / gpus / 1e12;
        closed = fl / ev.step_time / gpus / 1e12;
        err = 100 * (sim - pub.value) / pub.value;
    }
    printf("%-28s %3d %3d %4d %5.0f %6" PRId64 " %3" PRId64 " %-11s %-9s", name, l.tp, l.pp, l.dp, gpus,
           l.global_batch, l.micro_batch, plan_schedule_name(l.schedule), plan_recompute_name(l.recompute));
    print_figure(pub.value, pub.unit);
    print_figure(sim, pub.unit);
    print_figure(closed, pub.unit);
    printf(" %+8.1f %8.3f %7.3f\n", err, bubble, ev.mfu);
    plan_eval_free(&ev);
    dsl_arena_free(&arena);
    return isnan(err) ? -1 : fabs(err);
}

/* One table of rows: the column header, a line per row, and the mean and
 * largest |error| with `goal` after them. The number of files that failed. */
static int validate_group(int n, char **files, const char *goal)
{
    double max_err = 0, sum = 0;
    int worst = -1, rows = 0, bad = 0;
    KindSums kinds = { .n = 0 };
    printf("%-28s %3s %3s %4s %5s %6s %3s %-11s %-9s %10s %10s %10s %8s %8s %7s\n", "row", "tp", "pp", "dp",
           "gpus", "batch", "mb", "schedule", "recompute", "published", "simulated", "fast", "error%",
           "bubble", "mfu");
    for (int i = 0; i < n; i++) {
        char kind[KIND_LEN] = "";
        double e = validate_row(files[i], kind, sizeof kind);
        if (e < 0) { bad++; continue; }
        kind_add(&kinds, kind, e);
        rows++;
        sum += e;
        if (e > max_err) { max_err = e; worst = i; }
    }
    for (int i = 0; i < kinds.n && rows; i++)
        printf("#   %-34s %2d rows: mean |error| %5.1f %%, largest %5.1f %%\n", kinds.device[i], kinds.rows[i],
               kinds.sum[i] / kinds.rows[i], kinds.max[i]);
    if (rows)
        printf("# %d rows: mean |error| %.1f %%, largest %.1f %% (%s); %s\n\n", rows, sum / rows, max_err,
               worst >= 0 ? files[worst] : "-", goal);
    return bad;
}

/* The ZeRO paper's model states beside planc's (memory, not time). */
static void validate_zero(void)
{
    printf("# Rajbhandari et al. 2020 (ZeRO), Fig. 1: 7.5B parameters, DP 64, mixed-precision AdamW\n");
    printf("%-10s %12s %12s %8s\n", "stage", "published", "predicted", "error%");
    const double psi = 7.5e9, pub[] = { 120.0, 31.4, 16.6, 1.9 };
    static const char *const stage[] = { "no ZeRO", "ZeRO-1", "ZeRO-2", "ZeRO-3" };
    for (int z = 0; z <= 3; z++) {
        uint64_t a, b, c;
        plan_model_states((uint64_t)psi, DTYPE_FP16, DTYPE_FP16, z, 64, &a, &b, &c);
        double gb = (double)(a + b + c) / 1e9;
        printf("%-10s %9.1f GB %9.1f GB %+8.1f\n", stage[z], pub[z], gb,
               100 * (gb - pub[z]) / pub[z]);
    }
    printf("# ZeRO-1: the reduce-scatter writes each rank's part of the gradients in place, so\n"
           "# no shard beside them, as the paper counts and Megatron's distributed optimizer runs\n");
}

/* The published-runs.md rows (files[0 .. n_cal)), the ZeRO table, then the
 * rows not calibrated on (after `--other`), each table with its summary. */
static int validate(int n_cal, char **cal, int n_other, char **other)
{
    printf("# published runs (validation/, each with its software in its plan block; fields the\n"
           "# source does not state are `auto`, the best `planc search` finds);\n"
           "# TFLOP/s per GPU counted as each source counts them\n");
    int bad = validate_group(n_cal, cal, "goal +-10 %, mean <= 5 %");
    validate_zero();
    if (other) {
        printf("\n# published runs planc is NOT calibrated on (validation/other/, none of the rows above):\n"
               "# a check that the model holds beyond them, not a target; written the same way; figures in\n"
               "# TFLOP/s per GPU, or seconds per step (s); error%% + = planc optimistic, as above\n");
        bad += validate_group(n_other, other, "a check, not the goal");
    }
    return bad ? 1 : 0;
}

/* --bench: how many layouts per second the fast path evaluates (Llama 3
 * 405B on 16,384 H100s, the search issue's target). */
static int bench(void)
{
    Layer *buf = calloc(PLAN_PRESET_LAYERS(126), sizeof *buf);
    Model m;
    plan_preset_llama(&m, buf, "llama3-405b", 126, 16384, 128, 8, 53248, 8192, 128256,
                      DTYPE_BF16);
    Cluster c = plan_preset_dgx_h100(2048);
    int tps[] = { 1, 2, 4, 8 }, pps[] = { 1, 2, 4, 8, 9, 14, 16, 18, 21, 42, 63, 126 };
    long n = 0, feasible = 0;
    struct timespec t0, t1, c0, c1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 12; b++)
            for (int z = 0; z <= 3; z++)
                for (int sch = 0; sch < 4; sch++)
                    for (int rc = 0; rc < 3; rc++)
                        for (int sp = 0; sp <= 1; sp++)
                            for (int mb = 1; mb <= 4; mb *= 2) {
                                int tp = tps[a], pp = pps[b];
                                if (16384 % (tp * pp)) continue;
                                int dp = 16384 / (tp * pp);
                                int ch = sch == SCHED_INTERLEAVED ? 2 : 1;
                                Plan p = plan_preset_plan(m, c, dp, tp, pp, z, mb,
                                                          (int64_t)dp * mb * 16, sch, ch, rc, sp);
                                PlanEval ev;
                                plan_evaluate(&p, &ev);
                                n++;
                                feasible += ev.feasible;
                                plan_eval_free(&ev);
                            }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double dc = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    printf("# plan_evaluate: Llama 3 405B on 16,384 H100 (cpu: this process's CPU time)\n");
    printf("%10s %10s %12s %12s %14s\n", "layouts", "feasible", "time(s)", "cpu(s)", "layouts/cpu-s");
    printf("%10ld %10ld %12.4f %12.4f %14.0f\n", n, feasible, dt, dc, n / dc);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench();
    int sep = 1;
    while (sep < argc && strcmp(argv[sep], "--other")) sep++;
    if (sep == argc) return validate(argc - 1, argv + 1, 0, NULL);
    return validate(sep - 1, argv + 1, argc - sep - 1, argv + sep + 1);
}
