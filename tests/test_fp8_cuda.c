/*
 * test_fp8_cuda.c: the CUDA build's FP8 casts (runtime/cuda/ops_fp8.cu)
 * against the CPU build's (runtime/ops/fp8.c, linked renamed ref_prt_ from
 * libplanrt_ref.a), byte for byte: per-block amax, scales and codes of
 * bf16 and fp32 tensors under each recipe and format. Both builds take the same
 * inline rules, so any difference is a bug, not a tolerance.
 *
 * Without a GPU it stops at start with a message and status 77 (the CUDA
 * casts linked); `make test-fp8-cuda-link` counts that as passed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planrt.h"
#include "prt_ops_ref.h"

static uint64_t rng = 27;

static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static uint16_t f2bf(float f)   /* round to nearest even */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct {
    const char *name;
    prt_fp8_recipe recipe;
    prt_fp8_format fmt;
    bool pow2, weight;
    prt_fp8_kdim k;
    size_t rows, cols;
    bool f32;   /* an fp32 tensor (prt_fp8_*_f32), else bf16 */
} cast_case;

static const cast_case CASES[] = {
    { .name = "tensorwise e4m3", .recipe = PRT_FP8_TENSORWISE, .fmt = PRT_FP8_E4M3,
      .k = PRT_FP8_K_COLS, .rows = 300, .cols = 520 },
    { .name = "tensorwise e5m2", .recipe = PRT_FP8_TENSORWISE, .fmt = PRT_FP8_E5M2,
      .k = PRT_FP8_K_ROWS, .rows = 300, .cols = 520 },
    { .name = "rowwise e4m3", .recipe = PRT_FP8_ROWWISE, .fmt = PRT_FP8_E4M3, .pow2 = true,
      .k = PRT_FP8_K_COLS, .rows = 300, .cols = 520 },
    { .name = "rowwise e5m2 cols", .recipe = PRT_FP8_ROWWISE, .fmt = PRT_FP8_E5M2, .pow2 = true,
      .k = PRT_FP8_K_ROWS, .rows = 300, .cols = 520 },
    { .name = "blockwise 1x128", .recipe = PRT_FP8_BLOCKWISE, .fmt = PRT_FP8_E4M3, .pow2 = true,
      .k = PRT_FP8_K_COLS, .rows = 300, .cols = 520 },
    { .name = "blockwise 128x128", .recipe = PRT_FP8_BLOCKWISE, .fmt = PRT_FP8_E4M3, .pow2 = true,
      .weight = true, .k = PRT_FP8_K_COLS, .rows = 300, .cols = 520 },
    { .name = "blockwise fp32 scales", .recipe = PRT_FP8_BLOCKWISE, .fmt = PRT_FP8_E5M2,
      .k = PRT_FP8_K_ROWS, .rows = 300, .cols = 520 },
    { .name = "mxfp8 e4m3", .recipe = PRT_FP8_MXFP8, .fmt = PRT_FP8_E4M3, .pow2 = true,
      .k = PRT_FP8_K_COLS, .rows = 300, .cols = 520 },
    { .name = "mxfp8 e5m2", .recipe = PRT_FP8_MXFP8, .fmt = PRT_FP8_E5M2, .pow2 = true,
      .k = PRT_FP8_K_ROWS, .rows = 300, .cols = 520 },
    { .name = "fp32 tensorwise e4m3", .recipe = PRT_FP8_TENSORWISE, .fmt = PRT_FP8_E4M3,
      .weight = true, .k = PRT_FP8_K_COLS, .rows = 300, .cols = 520, .f32 = true },
    { .name = "fp32 blockwise 128x128", .recipe = PRT_FP8_BLOCKWISE, .fmt = PRT_FP8_E4M3,
      .pow2 = true, .weight = true, .k = PRT_FP8_K_ROWS, .rows = 300, .cols = 520, .f32 = true },
    { .name = "fp32 mxfp8 e5m2", .recipe = PRT_FP8_MXFP8, .fmt = PRT_FP8_E5M2, .pow2 = true,
      .k = PRT_FP8_K_COLS, .rows = 300, .cols = 520, .f32 = true },
};

/* Count the bytes that differ, print the first. */
static size_t diff(const char *what, const void *a, const void *b, size_t n)
{
    const uint8_t *x = a, *y = b;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i] && bad++ < 3)
            printf("    %s: byte %zu: cuda 0x%02x cpu 0x%02x\n", what, i, x[i], y[i]);
    return bad;
}

/* One case: the device's amax, scales and cast against the CPU's. */
static size_t run_case(const cast_case *c)
{
    size_t n = c->rows * c->cols;
    uint16_t *hb = malloc(n * sizeof *hb);
    float *hx = malloc(n * sizeof *hx);
    for (size_t i = 0; i < n; i++) {   /* six decades, some zero rows */
        float v = (i / c->cols) % 37 == 5 ? 0.0f : frand() * ldexpf(1.0f, (int)(20 * frand()));
        hb[i] = f2bf(v);
        hx[i] = c->f32 ? v : bf2f(hb[i]);
    }
    prt_fp8_cfg cfg = prt_fp8_cfg_default(c->recipe, c->fmt, c->weight);
    cfg.pow2 = c->pow2;
    ref_prt_fp8_cfg rcfg = ref_prt_fp8_cfg_default((ref_prt_fp8_recipe)c->recipe,
                                                   (ref_prt_fp8_format)c->fmt, c->weight);
    rcfg.pow2 = c->pow2;
    prt_fp8_grid g;
    ref_prt_fp8_grid rg;
    if (prt_fp8_grid_of(&g, &cfg, c->rows, c->cols, c->k) != PRT_OK ||
        ref_prt_fp8_grid_of(&rg, &rcfg, c->rows, c->cols, (ref_prt_fp8_kdim)c->k) != PRT_OK) {
        printf("  %s: grid refused\n", c->name);
        return 1;
    }
    size_t nb = prt_fp8_nblocks(&g);
    /* device */
    void *dx = prt_alloc(n * (c->f32 ? sizeof(float) : sizeof(prt_act)));
    float *damax = prt_alloc(nb * sizeof *damax), *dscale = prt_alloc(nb * sizeof *dscale);
    prt_fp8_tensor t = { .q = prt_alloc(n), .scale_inv = prt_alloc(nb * sizeof(float)), .g = g,
                         .fmt = c->fmt };
    size_t bad = 1;
    uint8_t *gq = malloc(n), *rq = malloc(n);
    float *gv = malloc(3 * nb * sizeof *gv), *rv = malloc(3 * nb * sizeof *rv);
    if (dx && damax && dscale && t.q && t.scale_inv &&
        (c->f32 ? prt_copy_to_device(dx, hx, n * sizeof *hx)
                : prt_copy_to_device(dx, hb, n * sizeof *hb)) == PRT_OK) {
        if (c->f32)
            prt_fp8_amax_f32(damax, dx, &g);
        else
            prt_fp8_amax(damax, dx, &g);
        prt_fp8_scales(dscale, damax, nb, &cfg);
        if (c->f32)
            prt_fp8_cast_f32(&t, dx, dscale, cfg.mode);
        else
            prt_fp8_cast(&t, dx, dscale, cfg.mode);
        prt_status st = prt_ops_sync();
        if (st == PRT_OK && prt_copy_to_host(gq, t.q, n) == PRT_OK &&
            prt_copy_to_host(gv, damax, nb * sizeof(float)) == PRT_OK &&
            prt_copy_to_host(gv + nb, dscale, nb * sizeof(float)) == PRT_OK &&
            prt_copy_to_host(gv + 2 * nb, t.scale_inv, nb * sizeof(float)) == PRT_OK) {
            /* the CPU build on the same bf16 values */
            ref_prt_fp8_tensor rt = { .q = rq, .scale_inv = rv + 2 * nb, .g = rg,
                                      .fmt = (ref_prt_fp8_format)c->fmt };
            ref_prt_fp8_amax(rv, hx, &rg);
            ref_prt_fp8_scales(rv + nb, rv, nb, &rcfg);
            ref_prt_fp8_cast(&rt, hx, rv + nb, (ref_prt_fp8_mode)cfg.mode);
            bad = diff("amax", gv, rv, nb * sizeof(float)) +
                  diff("scale", gv + nb, rv + nb, nb * sizeof(float)) +
                  diff("scale_inv", gv + 2 * nb, rv + 2 * nb, nb * sizeof(float)) +
                  diff("codes", gq, rq, n);
        } else {
            printf("  %s: %s: %s\n", c->name, prt_status_str(st), prt_ops_last_error());
        }
    }
    printf("  %-24s %7zu codes %5zu blocks  %zu bytes differ\n", c->name, n, nb, bad);
    prt_free(dx), prt_free(damax), prt_free(dscale), prt_free(t.q), prt_free(t.scale_inv);
    free(hb), free(hx), free(gq), free(rq), free(gv), free(rv);
    return bad;
}

int main(void)
{
    prt_status st = prt_ops_init(0);
    if (st != PRT_OK) {
        fprintf(stderr, "test_fp8_cuda: the CUDA FP8 casts linked, but there is no GPU to run "
                        "them on (%s: %s); skipped\n", prt_status_str(st), prt_ops_last_error());
        return 77;
    }
    printf("# CUDA FP8 casts vs CPU, bf16 inputs, byte for byte\n");
    size_t bad = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        bad += run_case(&CASES[i]);
    prt_ops_finalize();
    printf("test_fp8_cuda: %s\n", bad ? "FAILED" : "every byte equal");
    return bad ? 1 : 0;
}
