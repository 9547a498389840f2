/*
 * test_fp8_cuda.c: the CUDA build's FP8 casts (runtime/cuda/ops_fp8.cu)
 * against the CPU build's (runtime/ops/fp8.c, linked renamed ref_prt_ from
 * libplanrt_ref.a), byte for byte: per-block amax, scales and codes of
 * bf16 and fp32 tensors under each recipe and format. Both builds take the same
 * inline rules, so any difference is a bug, not a tolerance.
 * Then the FP8 GEMM (cuBLASLt, prt_fp8_gemm_tn) against the CPU build's
 * prt_fp8_gemm on the same codes and scales, for each recipe the device
 * runs (prt_fp8_device_check: tensorwise, rowwise's outer-vector scales,
 * blockwise's 1 x 128 and 128 x 128 blocks on Hopper, mxfp8's E8M0 blocks
 * on Blackwell): a linear's forward (E4M3 x E4M3 into bf16), dX (E5M2 x
 * the weight's transpose, prt_fp8_transpose, scales and all) and dW (both
 * operands transposed, accumulated into fp32 with beta 1), within the bf16
 * output's rounding (8e-3 relative + 1e-3 of the largest |C|; fp32 output
 * 1e-4); the refusals of a per-row tensor beside a per-tensor one, two
 * E5M2 operands and K not a multiple of 16.
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

/* ---- the FP8 GEMM ------------------------------------------------------------ */

/* A (rows, cols) tensor of values in six decades quantised on the CPU
 * (recipe r, a weight's blocks when weight, fmt, blocks along k) into t's
 * host codes and scales. */
static void host_quantize(ref_prt_fp8_tensor *t, prt_fp8_recipe r, bool weight, prt_fp8_format fmt,
                          prt_fp8_kdim k, size_t rows, size_t cols, float spread)
{
    float *x = malloc(rows * cols * sizeof *x);
    for (size_t i = 0; i < rows * cols; i++) x[i] = frand() * ldexpf(1.0f, (int)(spread * frand()));
    ref_prt_fp8_cfg cfg = ref_prt_fp8_cfg_default((ref_prt_fp8_recipe)r, (ref_prt_fp8_format)fmt, weight);
    ref_prt_fp8_grid g;
    ref_prt_fp8_grid_of(&g, &cfg, rows, cols, (ref_prt_fp8_kdim)k);
    t->q = malloc(rows * cols);
    t->scale_inv = malloc(ref_prt_fp8_nblocks(&g) * sizeof(float));
    if (ref_prt_fp8_quantize(t, x, &cfg, (ref_prt_fp8_kdim)k, rows, cols, NULL, NULL) != PRT_OK)
        printf("  host quantise refused\n");
    free(x);
}

/* The device copy of a host-quantised tensor (prt_alloc'd; dev_free). */
static prt_fp8_tensor to_device(const ref_prt_fp8_tensor *h)
{
    size_t n = h->g.rows * h->g.cols, sb = ref_prt_fp8_nblocks(&h->g) * sizeof(float);
    prt_fp8_tensor d = { .q = prt_alloc(n), .scale_inv = prt_alloc(sb), .fmt = (prt_fp8_format)h->fmt };
    memcpy(&d.g, &h->g, sizeof d.g);   /* the same layout of fields (the header renamed) */
    if (d.q && d.scale_inv) {
        prt_copy_to_device(d.q, h->q, n);
        prt_copy_to_device(d.scale_inv, h->scale_inv, sb);
    }
    return d;
}

/* Device room for the transpose of h (codes and its scales). */
static prt_fp8_tensor dev_like(const ref_prt_fp8_tensor *h)
{
    return (prt_fp8_tensor){ .q = prt_alloc(h->g.rows * h->g.cols),
                             .scale_inv = prt_alloc(ref_prt_fp8_nblocks(&h->g) * sizeof(float)) };
}

static void dev_free(prt_fp8_tensor *d) { prt_free(d->q), prt_free(d->scale_inv); }

/* |g - r| > rtol |r| + atol max|r| over n values: the count, the first printed. */
static size_t near(const char *what, const float *g, const float *r, size_t n, float rtol, float atol)
{
    float big = 0;
    for (size_t i = 0; i < n; i++) big = fmaxf(big, fabsf(r[i]));
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)g[i] - r[i]);
        worst = fmax(worst, e / (fabs((double)r[i]) + atol * big));
        if (e > rtol * fabsf(r[i]) + atol * big && bad++ < 3)
            printf("    %s[%zu]: gpu %.8g cpu %.8g\n", what, i, g[i], r[i]);
    }
    printf("  %-32s %7zu values, largest |gpu - cpu| / (|cpu| + %g max|cpu|) %.2e, %zu beyond %g\n", what, n, atol,
           worst, bad, rtol);
    return bad;
}

/* The three GEMMs of a linear (x (T, Kx), W (O, Kx), dY (T, O)) under
 * recipe r on the GPU against the CPU: forward out = x W^T, dX = dY W,
 * dW += dY^T x. */
static size_t run_gemms(prt_fp8_recipe r, size_t T, size_t Kx, size_t O)
{
    ref_prt_fp8_tensor x, w, wr, dy, dyr, xr;
    printf("  %s, T %zu, K %zu, O %zu\n", prt_fp8_recipe_name(r), T, Kx, O);
    host_quantize(&x, r, false, PRT_FP8_E4M3, PRT_FP8_K_COLS, T, Kx, 8);
    host_quantize(&w, r, true, PRT_FP8_E4M3, PRT_FP8_K_COLS, O, Kx, 4);
    host_quantize(&wr, r, true, PRT_FP8_E4M3, PRT_FP8_K_ROWS, O, Kx, 4);     /* W along O: dX's */
    host_quantize(&dy, r, false, PRT_FP8_E5M2, PRT_FP8_K_COLS, T, O, 12);
    host_quantize(&dyr, r, false, PRT_FP8_E5M2, PRT_FP8_K_ROWS, T, O, 12);   /* dY along T: dW's */
    host_quantize(&xr, r, false, PRT_FP8_E4M3, PRT_FP8_K_ROWS, T, Kx, 8);    /* x along T: dW's */
    size_t nf = T * O, nx = T * Kx, nw = O * Kx, bad = 0;
    float *rf = calloc(nf, sizeof(float)), *rx = calloc(nx, sizeof(float)), *rw = malloc(nw * sizeof(float));
    float *gf = malloc(nf * sizeof(float)), *gx = malloc(nx * sizeof(float)), *gw = malloc(nw * sizeof(float));
    uint16_t *hb = malloc((nf > nx ? nf : nx) * sizeof *hb);
    for (size_t i = 0; i < nw; i++) rw[i] = frand();   /* dW accumulates onto these */
    prt_fp8_tensor X = to_device(&x), Wd = to_device(&w), Wr = to_device(&wr), DY = to_device(&dy),
                   DYr = to_device(&dyr), Xr = to_device(&xr);
    prt_fp8_tensor Wt = dev_like(&wr), DYt = dev_like(&dyr), Xt = dev_like(&xr);
    void *dout = prt_alloc(nf * sizeof(prt_act)), *ddx = prt_alloc(nx * sizeof(prt_act));
    float *ddw = prt_alloc(nw * sizeof(float));
    prt_copy_to_device(ddw, rw, nw * sizeof(float));
    prt_status st[6] = {
        prt_fp8_gemm_tn(dout, false, &X, &Wd, T, O, Kx, 0.0f),
        prt_fp8_transpose(&Wt, &Wr),                               /* (Kx, O): dX's B */
        prt_fp8_gemm_tn(ddx, false, &DY, &Wt, T, Kx, O, 0.0f),
        prt_fp8_transpose(&DYt, &DYr),                             /* (O, T) */
        prt_fp8_transpose(&Xt, &Xr),                               /* (Kx, T) */
        prt_fp8_gemm_tn(ddw, true, &DYt, &Xt, O, Kx, T, 1.0f),
    };
    prt_status sync = prt_ops_sync();
    for (int i = 0; i < 6; i++)
        if (st[i] != PRT_OK) { printf("  call %d: %s\n", i, prt_status_str(st[i])); bad++; }
    if (sync != PRT_OK) { printf("  %s: %s\n", prt_status_str(sync), prt_ops_last_error()); bad++; }
    if (!bad && prt_copy_to_host(hb, dout, nf * sizeof *hb) == PRT_OK) {
        for (size_t i = 0; i < nf; i++) gf[i] = bf2f(hb[i]);
        ref_prt_fp8_gemm(rf, &x, false, &w, true, T, O, Kx, 0.0f);
        bad += near("forward e4m3 x e4m3 -> bf16", gf, rf, nf, 8e-3f, 1e-3f);
    }
    if (!bad && prt_copy_to_host(hb, ddx, nx * sizeof *hb) == PRT_OK) {
        for (size_t i = 0; i < nx; i++) gx[i] = bf2f(hb[i]);
        ref_prt_fp8_gemm(rx, &dy, false, &wr, false, T, Kx, O, 0.0f);
        bad += near("dX e5m2 x e4m3^T -> bf16", gx, rx, nx, 8e-3f, 1e-3f);
    }
    if (!bad && prt_copy_to_host(gw, ddw, nw * sizeof(float)) == PRT_OK) {
        ref_prt_fp8_gemm(rw, &dyr, true, &xr, false, O, Kx, T, 1.0f);
        bad += near("dW e5m2^T x e4m3^T += fp32", gw, rw, nw, 1e-4f, 1e-5f);
    }
    if (r == PRT_FP8_TENSORWISE) {   /* refusals: a per-row tensor beside a per-tensor one, two
                                      * E5M2 operands, K not a multiple of 16 */
        prt_fp8_tensor rowwise = X;
        rowwise.g.nbr = T;   /* T scales, but its blocks still whole rows of T: no mode takes it */
        ref_prt_fp8_tensor x2, w2;   /* K = 200: not a multiple of 16 */
        host_quantize(&x2, r, false, PRT_FP8_E4M3, PRT_FP8_K_COLS, T, 200, 8);
        host_quantize(&w2, r, true, PRT_FP8_E4M3, PRT_FP8_K_COLS, O, 200, 4);
        prt_fp8_tensor X2 = to_device(&x2), W2 = to_device(&w2);
        bool refused = prt_fp8_gemm_tn(dout, false, &rowwise, &Wd, T, O, Kx, 0.0f) == PRT_ERR_ARG &&
                       prt_fp8_gemm_tn(dout, false, &DY, &DY, T, T, O, 0.0f) == PRT_ERR_ARG &&
                       prt_fp8_gemm_tn(dout, false, &X2, &W2, T, O, 200, 0.0f) == PRT_ERR_ARG;
        dev_free(&X2), dev_free(&W2);
        free(x2.q), free(x2.scale_inv), free(w2.q), free(w2.scale_inv);
        printf("  refusals (mixed scales, e5m2 x e5m2, K %% 16): %s\n", refused ? "ok" : "MISSING");
        bad += !refused;
    }
    dev_free(&X), dev_free(&Wd), dev_free(&Wr), dev_free(&DY), dev_free(&DYr), dev_free(&Xr);
    dev_free(&Wt), dev_free(&DYt), dev_free(&Xt);
    prt_free(dout), prt_free(ddx), prt_free(ddw);
    ref_prt_fp8_tensor *h[] = { &x, &w, &wr, &dy, &dyr, &xr };
    for (int i = 0; i < 6; i++) free(h[i]->q), free(h[i]->scale_inv);
    free(rf), free(rx), free(rw), free(gf), free(gx), free(gw), free(hb);
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
    /* each recipe's shapes: its dimensions multiples of its blocks (cg_target_fp8's rule) */
    static const struct { prt_fp8_recipe r; size_t d[2][3]; } GEMMS[] = {
        { PRT_FP8_TENSORWISE, { { 256, 192, 320 }, { 64, 768, 2304 } } },
        { PRT_FP8_ROWWISE, { { 256, 192, 320 }, { 64, 768, 2304 } } },
        { PRT_FP8_BLOCKWISE, { { 256, 384, 640 }, { 128, 768, 2304 } } },
        { PRT_FP8_MXFP8, { { 256, 192, 320 }, { 64, 768, 2304 } } },
    };
    printf("# CUDA FP8 GEMM (cuBLASLt) vs CPU prt_fp8_gemm, the same codes and scales\n");
    for (size_t i = 0; i < sizeof GEMMS / sizeof GEMMS[0]; i++) {
        char why[320];
        if (prt_fp8_device_check(GEMMS[i].r, why, sizeof why) != PRT_OK) {
            printf("  %s: not on this device (%s); skipped\n", prt_fp8_recipe_name(GEMMS[i].r), why);
            (void)prt_ops_sync();   /* the check recorded its refusal: not the next GEMM's failure */
            continue;
        }
        for (int j = 0; j < 2; j++) bad += run_gemms(GEMMS[i].r, GEMMS[i].d[j][0], GEMMS[i].d[j][1], GEMMS[i].d[j][2]);
    }
    prt_ops_finalize();
    printf("test_fp8_cuda: %s\n", bad ? "FAILED" : "every byte equal, every GEMM within tolerance");
    return bad ? 1 : 0;
}
