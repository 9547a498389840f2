/*
 * validate.c: `make validate` — the planner's predictions beside published
 * measurements, with the error in percent; `--bench` times the fast path.
 *
 * Rows: Narayanan et al. 2021 ("Efficient Large-Scale Language Model
 * Training on GPU Clusters Using Megatron-LM"), Table 1: GPT models on DGX
 * A100 (80 GB) nodes, fp16, seq 2048, vocab 51,200, full activation
 * recomputation; the published TFLOP/s per GPU count the recomputed
 * forward: 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs per step. The paper gives
 * no micro-batch size or schedule for these rows; planc assumes micro-batch
 * 1 and the non-interleaved 1F1B schedule, ZeRO 0.
 *
 * What the software of those runs did, per row (Row.reduce_after_flush),
 * is modelled as such, not as a correction factor: Megatron-LM as of the
 * paper (v2, 2021; its local DDP, `--DDP-impl local`) all-reduced the data-
 * parallel gradients in `train_step` after `forward_backward_func`
 * returned, i.e. after the pipeline flush, with nothing to overlap them
 * (Narayanan et al. 2021 Sec. 3.3 and 5; megatron/training.py of that
 * release). Overlapping them with the backward came later (Megatron-Core's
 * --overlap-grad-reduce, 2023). planc's own programs overlap (the default,
 * Plan.grad_reduce_after_flush false). The same release's pipeline sends
 * blocked the sender (p2p_communication.py: batch_isend_irecv, wait, then
 * torch.cuda.synchronize() against a race): Plan.p2p_blocking. The tied embedding's gradient
 * all-reduce between the first and last stage and the A100's 108 SMs
 * (wave quantisation) come from the general model (cost.c, presets.c).
 * And the ZeRO paper
 * (Rajbhandari et al. 2020, Fig. 1): 7.5B parameters, DP 64, model states
 * per GPU 120 GB without ZeRO and 31.4 GB with ZeRO-1.
 *
 * Nothing here is fitted: the rows run through the same model as every
 * other plan.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/layout.h"
#include "planner/memory.h"
#include "planner/presets.h"
#include "planner/program.h"
#include "planner/simulate.h"

typedef struct {
    const char *name;
    int heads, hidden, layers, tp, pp, gpus, batch;
    double published;    /* TFLOP/s per GPU */
    bool   reduce_after_flush;   /* the run's DP all-reduce followed the pipeline flush */
} Row;

static const Row ROWS[] = {
    /* all four: Megatron-LM 2021, DP all-reduce after the flush (see above) */
    { "1.7B",    24,  2304,  24, 1,  1,   32,  512, 137, true },
    { "18.4B",   48,  6144,  40, 8,  1,  256, 1024, 135, true },
    { "145.6B",  96, 12288,  80, 8,  8, 1536, 2304, 148, true },
    { "1008B",  160, 25600, 128, 8, 64, 3072, 3072, 163, true },
};

/* Narayanan et al. 2021, Sec. 5.1: FLOPs per step with recomputation. */
static double megatron_flops(double B, double s, double l, double h, double V)
{
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
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

static int validate(void)
{
    const double s = 2048, V = 51200;
    int worst = 0;
    double max_err = 0;
    printf("# Narayanan et al. 2021, Table 1: GPT on DGX A100, fp16, seq 2048, full recompute,\n"
           "# micro-batch 1, 1F1B (assumed); DP all-reduce after the pipeline flush and blocking\n"
           "# pipeline sends (Megatron-LM 2021);\n"
           "# A100 108 SMs; tied-embedding all-reduce. TFLOP/s per GPU as the paper counts them.\n");
    printf("%-8s %3s %3s %5s %5s %10s %10s %10s %8s %8s %7s\n", "model", "tp", "pp", "gpus",
           "batch", "published", "simulated", "fast", "error%", "bubble", "mfu");
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const Row *r = &ROWS[i];
        Layer *buf = calloc((size_t)PLAN_PRESET_LAYERS(r->layers), sizeof *buf);
        Model m;
        plan_preset_gpt(&m, buf, r->name, r->layers, r->hidden, r->heads, (int64_t)s,
                        (int64_t)V, DTYPE_FP16);
        int dp = r->gpus / (r->tp * r->pp);
        Plan p = plan_preset_plan(m, plan_preset_dgx_a100(r->gpus / 8), dp, r->tp, r->pp, 0, 1,
                                  r->batch, SCHED_1F1B, 1, RECOMPUTE_FULL, 0);
        p.grad_reduce_after_flush = r->reduce_after_flush;
        p.p2p_blocking = r->reduce_after_flush;   /* the same software: Megatron-LM 2021 */
        PlanEval ev;
        plan_evaluate(&p, &ev);
        double bubble = NAN, step = simulated_step(&p, &bubble);
        double f = megatron_flops(r->batch, s, r->layers, r->hidden, V);
        double sim = f / step / r->gpus / 1e12, closed = f / ev.step_time / r->gpus / 1e12;
        double err = 100 * (sim - r->published) / r->published;
        if (fabs(err) > max_err) { max_err = fabs(err); worst = (int)i; }
        printf("%-8s %3d %3d %5d %5d %10.1f %10.1f %10.1f %+8.1f %8.3f %7.3f\n", r->name,
               r->tp, r->pp, r->gpus, r->batch, r->published, sim, closed, err, bubble, ev.mfu);
        plan_eval_free(&ev);
        free(buf);
    }
    printf("# largest error: %.1f %% (%s); goal +-10 %%\n\n", max_err, ROWS[worst].name);

    printf("# Rajbhandari et al. 2020 (ZeRO), Fig. 1: 7.5B parameters, DP 64, mixed-precision AdamW\n");
    printf("%-10s %12s %12s %8s\n", "stage", "published", "predicted", "error%");
    const double psi = 7.5e9, pub[] = { 120.0, 31.4 };
    for (int z = 0; z <= 1; z++) {
        uint64_t a, b, c;
        plan_model_states((uint64_t)psi, DTYPE_FP16, z, 64, &a, &b, &c);
        double gb = (double)(a + b + c) / 1e9;
        printf("%-10s %9.1f GB %9.1f GB %+8.1f\n", z ? "ZeRO-1" : "no ZeRO", pub[z], gb,
               100 * (gb - pub[z]) / pub[z]);
    }
    return 0;
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
    return validate();
}
