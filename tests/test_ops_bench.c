/*
 * test_ops_bench.c: `make bench-ops`, the CPU training step against the
 * machine's own GEMM speed, measured in the same run.
 *
 * Model: GPT-2 style, dim 512, 4 layers, 8 heads, MLP 2048, seq 256,
 * micro-batch 8, byte vocabulary (256), one rank, one BLAS thread.
 * Reference: cblas_sgemm on 1024^3 (2*1024^3 FLOP per call). The figure is
 * achieved model FLOP/s (PaLM's 6N + 12LHDT per token, no recomputation
 * counted) over that reference; the goal is >= 0.5. Both are the best of
 * several runs (the machine may be shared). The table after it says where
 * the step's time goes, by kind of op.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "test_ops_gpt.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of `reps` timed 1024^3 products, in FLOP/s. */
static double sgemm_rate(int reps)
{
    int n = 1024;
    float *a = prt_alloc((size_t)n * n * 4), *b = prt_alloc((size_t)n * n * 4);
    float *c = prt_alloc((size_t)n * n * 4);
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
                    0.0f, c, n);
        double dt = now() - t0;
        if (dt < best)
            best = dt;
    }
    prt_free(a); prt_free(b); prt_free(c);
    return 2.0 * n * (double)n * n / best;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    Recompute rc = argc > 2 ? (Recompute)atoi(argv[2]) : RC_NONE;
    GptConfig c = {.V = 256, .C = 512, .L = 4, .H = 8, .Hkv = 8, .F = 2048, .T = 256, .B = 8,
                   .llama = false, .recompute = rc};
    Gpt *g = gpt_new(&c, 1);
    prt_adamw_cfg cfg = {.lr = 6e-4f, .min_lr = 6e-5f, .warmup = 10, .total = 100,
                         .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                         .clip = 1.0f};
    size_t N = c.B * c.T;
    int32_t *in = malloc(N * sizeof *in), *tg = malloc(N * sizeof *tg);
    for (size_t i = 0; i < N; i++) {
        in[i] = (int32_t)((i * 31) % c.V);
        tg[i] = (int32_t)((i * 31 + 7) % c.V);
    }
    double ref0 = sgemm_rate(3);
    gpt_zero_grad(g);   /* warm-up step: page faults, BLAS buffers */
    gpt_forward_backward(g, in, tg);
    gpt_adamw(g, &cfg, 1);
    gpt_prof_on = true;
    /* best of the timed steps and of the reference products, so a machine
     * shared with other work disturbs the ratio as little as it can */
    float loss = 0;
    double step = 1e30, total = 0;
    for (int s = 0; s < steps; s++) {
        double t0 = now();
        gpt_zero_grad(g);
        loss = gpt_forward_backward(g, in, tg);
        gpt_adamw(g, &cfg, s + 2);
        double dt = now() - t0;
        total += dt;
        step = dt < step ? dt : step;
    }
    double ref1 = sgemm_rate(3);
    double ref = ref0 > ref1 ? ref0 : ref1;
    double flops = gpt_flops_per_step(&c), rate = flops / step;
    static const char *kinds[PROF_COUNT] = {"linear (sgemm)", "attention (sgemm + softmax)",
                                            "norms", "gelu, residual", "cross-entropy",
                                            "embeddings", "adamw + clip"};
    printf("# bench-ops: GPT-2 style, dim %zu, %zu layers, %zu heads, mlp %zu, seq %zu, "
           "micro-batch %zu, vocab %zu, %zu params, recompute %s, 1 rank, 1 BLAS thread\n",
           c.C, c.L, c.H, c.F, c.T, c.B, c.V, gpt_num_params(g),
           rc == RC_NONE ? "none" : rc == RC_SELECTIVE ? "selective" : "full");
    printf("%-28s %12s\n", "quantity", "value");
    printf("%-28s %12.2f\n", "sgemm 1024^3 GFLOP/s", ref / 1e9);
    printf("%-28s %12.1f\n", "step time, best (ms)", step * 1e3);
    printf("%-28s %12.1f\n", "step time, mean (ms)", total / steps * 1e3);
    printf("%-28s %12.2f\n", "model GFLOP per step", flops / 1e9);
    printf("%-28s %12.2f\n", "model GFLOP/s", rate / 1e9);
    printf("%-28s %12.0f\n", "tokens/s", (double)N / step);
    printf("%-28s %12.3f\n", "loss (last step)", loss);
    printf("# where the time goes (share of the step)\n");
    double acc = 0;
    for (int k = 0; k < PROF_COUNT; k++) {
        printf("%-28s %11.1f%%\n", kinds[k], 100.0 * gpt_prof[k] / total);
        acc += gpt_prof[k];
    }
    printf("%-28s %11.1f%%\n", "other (zeroing, glue)", 100.0 * (total - acc) / total);
    printf("# ratio model FLOP/s / sgemm FLOP/s: %.3f (goal >= 0.5)\n", rate / ref);
    free(in); free(tg);
    gpt_free(g);
    return 0;
}
