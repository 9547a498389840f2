/*
 * test_ops_cuda.c: every CUDA op against the CPU op on random inputs, and
 * the time of a GPT-2-small training step; run by tests/gpu/check-ops.sh
 * on a machine with a GPU.
 *
 * Built with PRT_CUDA against libplanrt_cuda.a. The CPU ops come from
 * libplanrt_ref.a: the CPU objects with every prt_ symbol renamed ref_prt_
 * (objcopy), declared by a header generated from prt_ops.h the same way,
 * so both builds of one op live in one program. Inputs are drawn in fp32
 * and rounded to bf16 first, so both sides see the same numbers; outputs
 * are compared with a bf16 tolerance and the first mismatches printed as
 * llm.c's validate_result does.
 *
 * Without a GPU it stops at start with a message and exit status 77
 * ("skipped"), which is how `make test` checks that the CUDA ops link.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "planrt.h"
#include "prt_ops_ref.h"
#include "test_ops_gpt.h"

static int failures, checks;

/* ---- bf16 on the host ---------------------------------------------------- */

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

static uint64_t rng = 0x1234567;

static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* Random host values, already rounded to bf16. */
static float *hrand(size_t n, float scale)
{
    float *p = malloc(n * sizeof *p + 4);
    for (size_t i = 0; i < n; i++)
        p[i] = bf2f(f2bf(frand() * scale));
    return p;
}

static float *hzeros(size_t n) { return calloc(n + 1, sizeof(float)); }

/* A transfer or the ops' recorded status: a failure fails the test, and
 * what it would have copied is never compared. */
static bool ok(prt_status st, const char *what)
{
    if (st == PRT_OK)
        return true;
    printf("  %s failed: %s: %s\n", what, prt_status_str(st), prt_ops_last_error());
    return false;
}

/* An input that never reached the device: every later check would compare
 * stale memory, so the test stops here. */
static void *uploaded(void *d, const void *h, size_t bytes, const char *what)
{
    if (!d || !ok(prt_copy_to_device(d, h, bytes), what)) {
        printf("test_ops_cuda: %s: %s; stopped\n", what, d ? "upload failed" : "out of device memory");
        exit(1);
    }
    return d;
}

/* A device bf16 copy of host values. */
static prt_act *dact(const float *h, size_t n)
{
    uint16_t *tmp = malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++)
        tmp[i] = f2bf(h[i]);
    prt_act *d = uploaded(prt_alloc(n * 2), tmp, n * 2, "bf16 input upload");
    free(tmp);
    return d;
}

static float *dfloat(const float *h, size_t n)
{
    return uploaded(prt_alloc(n * 4), h, n * 4, "fp32 input upload");
}

static void *dbytes(const void *h, size_t bytes)
{
    return uploaded(prt_alloc(bytes), h, bytes, "input upload");
}

/* bytes of device memory into host memory, after the ops that wrote them:
 * false (and the check counted failed) when they or the copy failed. */
static bool fetched(const char *name, void *host, const void *dev, size_t bytes)
{
    if (ok(prt_ops_sync(), name) && ok(prt_copy_to_host(host, dev, bytes), name))
        return true;
    checks++;
    failures++;
    printf("%-28s %9s           COPY FAILED\n", name, "");
    return false;
}

/* Compare n device values (bf16 if act, else fp32) with the CPU result. */
static void validate(const char *name, const void *dev, bool act, const float *ref, size_t n,
                     double atol, double rtol)
{
    float *got = malloc(n * sizeof *got + 4);
    if (act) {
        uint16_t *tmp = malloc(n * 2 + 2);
        bool copied = fetched(name, tmp, dev, n * 2);
        for (size_t i = 0; copied && i < n; i++)
            got[i] = bf2f(tmp[i]);
        free(tmp);
        if (!copied) { free(got); return; }
    } else if (!fetched(name, got, dev, n * 4)) {
        free(got);
        return;
    }
    int bad = 0;
    double maxerr = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]), tol = atol + rtol * fabs(ref[i]);
        maxerr = err > maxerr ? err : maxerr;
        if (!(err <= tol)) {
            if (bad < 5)
                printf("  %s mismatch at %zu: cpu %.6g gpu %.6g (tol %.3g)\n", name, i,
                       (double)ref[i], (double)got[i], tol);
            bad++;
        }
    }
    checks++;
    if (bad)
        failures++;
    printf("%-28s %9zu elements  max |err| %.3g  %s\n", name, n, maxerr,
           bad ? "MISMATCH" : "ok");
    free(got);
}

/* Two masks, the CPU's and the device's, byte for byte. */
static void check_mask(const char *name, const uint8_t *ref, const void *dev, size_t n)
{
    uint8_t *got = malloc(n + 1);
    if (fetched(name, got, dev, n)) {
        checks++;
        if (memcmp(ref, got, n)) { failures++; printf("%-28s %9zu masks  MISMATCH\n", name, n); }
        else printf("%-28s %9zu masks  identical\n", name, n);
    }
    free(got);
}

#define ATOL 2e-2
#define RTOL 2e-2

/* ---- the checks ------------------------------------------------------------ */

static void check_linear(size_t N, size_t K, size_t O)
{
    float *x = hrand(N * K, 1), *w = hrand(O * K, 0.2f), *b = hrand(O, 1), *g = hrand(N * O, 1);
    float *out = hzeros(N * O), *dx = hzeros(N * K), *dw = hzeros(O * K), *db = hzeros(O);
    ref_prt_linear_fwd(out, x, w, b, N, K, O);
    ref_prt_linear_bwd(dx, dw, db, g, x, w, N, K, O);
    prt_act *dx_d = dact(dx, N * K), *x_d = dact(x, N * K), *w_d = dact(w, O * K);
    prt_act *b_d = dact(b, O), *g_d = dact(g, N * O), *out_d = prt_alloc(N * O * 2);
    float *dw_d = prt_alloc(O * K * 4), *db_d = prt_alloc(O * 4);
    prt_linear_fwd(out_d, x_d, w_d, b_d, N, K, O);
    prt_linear_bwd(dx_d, dw_d, db_d, g_d, x_d, w_d, N, K, O);
    validate("linear fwd", out_d, true, out, N * O, ATOL, RTOL);
    validate("linear bwd dx", dx_d, true, dx, N * K, ATOL, RTOL);
    validate("linear bwd dw (fp32)", dw_d, false, dw, O * K, 1e-2 * sqrt((double)N), RTOL);
    validate("linear bwd db (fp32)", db_d, false, db, O, 1e-3 * N, RTOL);
    void *p[] = {x, w, b, g, out, dx, dw, db};
    for (size_t i = 0; i < 8; i++) free(p[i]);
    void *d[] = {dx_d, x_d, w_d, b_d, g_d, out_d, dw_d, db_d};
    for (size_t i = 0; i < 8; i++) prt_free(d[i]);
}

/* q/k norm (Qwen3: w0 0; Gemma 3: w0 1, the gain 1 + w) against the CPU
 * build: the normalised q and k heads (values untouched), the saved
 * pre-norm heads and scales, dx in place and the two gains' gradients. */
static void check_qk_norm(size_t N, size_t H, size_t Hkv, size_t D, float w0)
{
    size_t n = N * (H + 2 * Hkv) * D, nx = N * (H + Hkv) * D, nr = N * (H + Hkv);
    float *x = hrand(n, 2), *wq = hrand(D, 1), *wk = hrand(D, 1), *g = hrand(n, 1);
    float *xin = hzeros(nx), *rstd = hzeros(nr), *dwq = hzeros(D), *dwk = hzeros(D);
    prt_act *x_d = dact(x, n), *wq_d = dact(wq, D), *wk_d = dact(wk, D), *g_d = dact(g, n);
    prt_act *xin_d = prt_alloc(nx * 2);
    float *rstd_d = prt_alloc(nr * 4), *dwq_d = prt_alloc(D * 4), *dwk_d = prt_alloc(D * 4);
    prt_zero(dwq_d, D * 4);
    prt_zero(dwk_d, D * 4);
    ref_prt_qk_norm_fwd(x, xin, rstd, wq, wk, w0, N, H, Hkv, D, 1e-6f);
    prt_qk_norm_fwd(x_d, xin_d, rstd_d, wq_d, wk_d, w0, N, H, Hkv, D, 1e-6f);
    validate("qk_norm fwd", x_d, true, x, n, ATOL, RTOL);
    validate("qk_norm saved heads", xin_d, true, xin, nx, ATOL, RTOL);
    validate("qk_norm rstd", rstd_d, false, rstd, nr, 1e-3, 1e-3);
    ref_prt_qk_norm_bwd(g, dwq, dwk, xin, wq, wk, w0, rstd, N, H, Hkv, D);
    prt_qk_norm_bwd(g_d, dwq_d, dwk_d, xin_d, wq_d, wk_d, w0, rstd_d, N, H, Hkv, D);
    validate("qk_norm dx", g_d, true, g, n, 2e-2, 2e-2);
    validate("qk_norm dwq", dwq_d, false, dwq, D, 1e-2 * N, 1e-2);
    validate("qk_norm dwk", dwk_d, false, dwk, D, 1e-2 * N, 1e-2);
    free(x); free(wq); free(wk); free(g); free(xin); free(rstd); free(dwq); free(dwk);
    void *d[] = {x_d, wq_d, wk_d, g_d, xin_d, rstd_d, dwq_d, dwk_d};
    for (size_t i = 0; i < 8; i++) prt_free(d[i]);
}

/* OLMo-2's q/k norm of the whole projection against the CPU build (one
 * rank: the sums are whole, no all-reduce between the kernels). */
static void check_qk_proj_norm(size_t N, size_t H, size_t Hkv, size_t D)
{
    size_t n = N * (H + 2 * Hkv) * D, Cq = H * D, Ck = Hkv * D, nx = N * (Cq + Ck);
    float *x = hrand(n, 2), *wq = hrand(Cq, 1), *wk = hrand(Ck, 1), *g = hrand(n, 1);
    float *xin = hzeros(nx), *rstd = hzeros(2 * N), *dot = hzeros(2 * N), *dwq = hzeros(Cq), *dwk = hzeros(Ck);
    prt_act *x_d = dact(x, n), *wq_d = dact(wq, Cq), *wk_d = dact(wk, Ck), *g_d = dact(g, n);
    prt_act *xin_d = prt_alloc(nx * 2);
    float *rstd_d = prt_alloc(2 * N * 4), *dot_d = prt_alloc(2 * N * 4), *dwq_d = prt_alloc(Cq * 4),
          *dwk_d = prt_alloc(Ck * 4);
    prt_zero(dwq_d, Cq * 4);
    prt_zero(dwk_d, Ck * 4);
    ref_prt_qk_proj_sumsq(rstd, x, N, H, Hkv, D);
    ref_prt_qk_proj_norm_fwd(x, xin, rstd, rstd, wq, wk, N, H, Hkv, D, Cq, Ck, 1e-6f);
    prt_qk_proj_sumsq(rstd_d, x_d, N, H, Hkv, D);
    prt_qk_proj_norm_fwd(x_d, xin_d, rstd_d, rstd_d, wq_d, wk_d, N, H, Hkv, D, Cq, Ck, 1e-6f);
    validate("qk_proj fwd", x_d, true, x, n, ATOL, RTOL);
    validate("qk_proj saved q, k", xin_d, true, xin, nx, ATOL, RTOL);
    validate("qk_proj rstd", rstd_d, false, rstd, 2 * N, 1e-3, 1e-3);
    ref_prt_qk_proj_dot(dot, g, xin, wq, wk, rstd, N, H, Hkv, D);
    ref_prt_qk_proj_norm_bwd(g, dwq, dwk, xin, wq, wk, rstd, dot, N, H, Hkv, D, Cq, Ck);
    prt_qk_proj_dot(dot_d, g_d, xin_d, wq_d, wk_d, rstd_d, N, H, Hkv, D);
    validate("qk_proj dot", dot_d, false, dot, 2 * N, 2e-2 * sqrt((double)Cq), 2e-2);
    prt_qk_proj_norm_bwd(g_d, dwq_d, dwk_d, xin_d, wq_d, wk_d, rstd_d, dot_d, N, H, Hkv, D, Cq, Ck);
    validate("qk_proj dx", g_d, true, g, n, 2e-2, 2e-2);
    validate("qk_proj dwq", dwq_d, false, dwq, Cq, 1e-2 * N, 1e-2);
    validate("qk_proj dwk", dwk_d, false, dwk, Ck, 1e-2 * N, 1e-2);
    free(x); free(wq); free(wk); free(g); free(xin); free(rstd); free(dot); free(dwq); free(dwk);
    void *d[] = {x_d, wq_d, wk_d, g_d, xin_d, rstd_d, dot_d, dwq_d, dwk_d};
    for (size_t i = 0; i < 9; i++) prt_free(d[i]);
}

static void check_norm(bool rms, size_t N, size_t C)
{
    float *x = hrand(N * C, 2), *w = hrand(C, 1), *b = hrand(C, 1), *g = hrand(N * C, 1);
    float *out = hzeros(N * C), *mean = hzeros(N), *rstd = hzeros(N);
    float *dx = hrand(N * C, 1), *dw = hzeros(C), *db = hzeros(C);
    prt_act *x_d = dact(x, N * C), *w_d = dact(w, C), *b_d = dact(b, C), *g_d = dact(g, N * C);
    prt_act *dx_d = dact(dx, N * C), *out_d = prt_alloc(N * C * 2);   /* dx accumulates */
    float *mean_d = prt_alloc(N * 4), *rstd_d = prt_alloc(N * 4);
    float *dw_d = prt_alloc(C * 4), *db_d = prt_alloc(C * 4);
    if (rms) {
        ref_prt_rmsnorm_fwd(out, rstd, x, w, N, C, 1e-5f);
        ref_prt_rmsnorm_bwd(dx, dw, g, x, w, rstd, N, C);
        prt_rmsnorm_fwd(out_d, rstd_d, x_d, w_d, N, C, 1e-5f);
        prt_rmsnorm_bwd(dx_d, dw_d, g_d, x_d, w_d, rstd_d, N, C);
    } else {
        ref_prt_layernorm_fwd(out, mean, rstd, x, w, b, N, C, 1e-5f);
        ref_prt_layernorm_bwd(dx, dw, db, g, x, w, mean, rstd, N, C);
        prt_layernorm_fwd(out_d, mean_d, rstd_d, x_d, w_d, b_d, N, C, 1e-5f);
        prt_layernorm_bwd(dx_d, dw_d, db_d, g_d, x_d, w_d, mean_d, rstd_d, N, C);
        validate("layernorm mean", mean_d, false, mean, N, 1e-4, 1e-4);
        validate("layernorm db", db_d, false, db, C, 1e-3 * N, 1e-3);
    }
    validate(rms ? "rmsnorm fwd" : "layernorm fwd", out_d, true, out, N * C, ATOL, RTOL);
    validate(rms ? "rmsnorm rstd" : "layernorm rstd", rstd_d, false, rstd, N, 1e-4, 1e-4);
    validate(rms ? "rmsnorm bwd dx" : "layernorm bwd dx", dx_d, true, dx, N * C, 5e-2, RTOL);
    validate(rms ? "rmsnorm bwd dw" : "layernorm bwd dw", dw_d, false, dw, C, 1e-3 * N, 1e-2);
    void *p[] = {x, w, b, g, out, mean, rstd, dx, dw, db};
    for (size_t i = 0; i < 10; i++) free(p[i]);
    void *d[] = {x_d, w_d, b_d, g_d, dx_d, out_d, mean_d, rstd_d, dw_d, db_d};
    for (size_t i = 0; i < 10; i++) prt_free(d[i]);
}

static void check_pointwise(size_t N, size_t F)
{
    size_t n = N * F;
    float *x = hrand(2 * n, 3), *g = hrand(2 * n, 1), *out = hzeros(2 * n), *dx = hzeros(2 * n);
    prt_act *x_d = dact(x, 2 * n), *g_d = dact(g, 2 * n), *o_d = prt_alloc(4 * n), *dx_d = prt_alloc(4 * n);
    const char *names[4][2] = {{"gelu fwd", "gelu bwd"}, {"relu fwd", "relu bwd"},
                               {"swiglu fwd", "swiglu bwd"}, {"geglu fwd", "geglu bwd"}};
    for (int k = 0; k < 4; k++) {
        if (k == 0) {
            ref_prt_gelu_fwd(out, x, n); ref_prt_gelu_bwd(dx, x, g, n);
            prt_gelu_fwd(o_d, x_d, n); prt_gelu_bwd(dx_d, x_d, g_d, n);
        } else if (k == 1) {
            ref_prt_relu_fwd(out, x, n); ref_prt_relu_bwd(dx, x, g, n);
            prt_relu_fwd(o_d, x_d, n); prt_relu_bwd(dx_d, x_d, g_d, n);
        } else if (k == 2) {
            ref_prt_swiglu_fwd(out, x, N, F); ref_prt_swiglu_bwd(dx, x, g, N, F);
            prt_swiglu_fwd(o_d, x_d, N, F); prt_swiglu_bwd(dx_d, x_d, g_d, N, F);
        } else {
            ref_prt_geglu_fwd(out, x, N, F); ref_prt_geglu_bwd(dx, x, g, N, F);
            prt_geglu_fwd(o_d, x_d, N, F); prt_geglu_bwd(dx_d, x_d, g_d, N, F);
        }
        validate(names[k][0], o_d, true, out, n, ATOL, RTOL);
        validate(names[k][1], dx_d, true, dx, k >= 2 ? 2 * n : n, ATOL, RTOL);
    }
    ref_prt_residual_add(out, x, g, 2 * n);
    prt_residual_add(o_d, x_d, g_d, 2 * n);
    validate("residual add", o_d, true, out, 2 * n, ATOL, RTOL);
    free(x); free(g); free(out); free(dx);
    prt_free(x_d); prt_free(g_d); prt_free(o_d); prt_free(dx_d);
}

static void check_embedding(size_t B, size_t T, size_t C, size_t V)
{
    size_t N = B * T, v0 = V / 4, Vl = V / 2;   /* a TP slice of the vocabulary */
    int32_t *tok = malloc(N * sizeof *tok);
    for (size_t i = 0; i < N; i++)
        tok[i] = (int32_t)((i * 7919) % V);
    float *wte = hrand(Vl * C, 1), *wpe = hrand(T * C, 1), *g = hrand(N * C, 1);
    float *out = hzeros(N * C), *dwte = hzeros(Vl * C), *dwpe = hzeros(T * C);
    ref_prt_embedding_fwd(out, tok, wte, N, C, v0, Vl);
    ref_prt_position_fwd(out, wpe, B, T, C);
    ref_prt_embedding_bwd(dwte, tok, g, N, C, v0, Vl);
    ref_prt_position_bwd(dwpe, g, B, T, C);
    int32_t *tok_d = dbytes(tok, N * 4);
    prt_act *wte_d = dact(wte, Vl * C), *wpe_d = dact(wpe, T * C), *g_d = dact(g, N * C);
    prt_act *out_d = prt_alloc(N * C * 2);
    float *dwte_d = prt_alloc(Vl * C * 4), *dwpe_d = prt_alloc(T * C * 4);
    prt_embedding_fwd(out_d, tok_d, wte_d, N, C, v0, Vl);
    prt_position_fwd(out_d, wpe_d, B, T, C);
    prt_embedding_bwd(dwte_d, tok_d, g_d, N, C, v0, Vl);
    prt_position_bwd(dwpe_d, g_d, B, T, C);
    validate("embedding+position fwd", out_d, true, out, N * C, ATOL, RTOL);
    validate("embedding bwd (fp32)", dwte_d, false, dwte, Vl * C, 1e-4, 1e-4);
    validate("position bwd (fp32)", dwpe_d, false, dwpe, T * C, 1e-4, 1e-4);
    free(tok); free(wte); free(wpe); free(g); free(out); free(dwte); free(dwpe);
    void *d[] = {tok_d, wte_d, wpe_d, g_d, out_d, dwte_d, dwpe_d};
    for (size_t i = 0; i < 7; i++) prt_free(d[i]);
}

static void check_rope_theta(size_t B, size_t T, size_t H, size_t Hkv, size_t D, float theta)
{
    size_t n = B * T * (H + 2 * Hkv) * D;
    float *x = hrand(n, 1), *r = malloc(n * 4);
    memcpy(r, x, n * 4);
    prt_act *x_d = dact(x, n);
    ref_prt_rope_fwd(r, B, T, H, Hkv, D, &REF_ROPE_PLAIN(theta));
    prt_rope_fwd(x_d, B, T, H, Hkv, D, &PRT_ROPE_PLAIN(theta));
    validate("rope fwd theta", x_d, true, r, n, 1e-2, 1e-2);
    free(x); free(r); prt_free(x_d);
}

static void check_rope(size_t B, size_t T, size_t H, size_t Hkv, size_t D)
{
    size_t n = B * T * (H + 2 * Hkv) * D;
    float *x = hrand(n, 1), *r = malloc(n * 4);
    memcpy(r, x, n * 4);
    prt_act *x_d = dact(x, n);
    ref_prt_rope_fwd(r, B, T, H, Hkv, D, &REF_ROPE_PLAIN(10000.0f));
    prt_rope_fwd(x_d, B, T, H, Hkv, D, &PRT_ROPE_PLAIN(10000.0f));
    validate("rope fwd", x_d, true, r, n, 1e-2, 1e-2);
    ref_prt_rope_bwd(r, B, T, H, Hkv, D, &REF_ROPE_PLAIN(10000.0f));   /* back to x */
    prt_rope_bwd(x_d, B, T, H, Hkv, D, &PRT_ROPE_PLAIN(10000.0f));
    validate("rope bwd", x_d, true, r, n, 2e-2, 2e-2);
    free(x); free(r); prt_free(x_d);
}

/* The scaled RoPE kinds (prt_rope_inv_freq, YaRN's mscale: the same inline
 * function on both sides), whole sequences and CP rank r of cp, forward and
 * backward, against the CPU build. kind: PRT_ROPE_LINEAR, _LLAMA3, _YARN;
 * mscale, mscale_all_dim: YaRN's DeepSeek pair (1, 0: none). */
static void check_rope_scaled(size_t B, size_t T, size_t H, size_t Hkv, size_t D, int kind, int cp, int r,
                              double mscale, double mscale_all_dim)
{
    const prt_rope g = { (prt_rope_kind)kind, 10000, 4, 1, 4, 32, 1, 16, mscale, mscale_all_dim };
    const ref_prt_rope c = { (ref_prt_rope_kind)kind, 10000, 4, 1, 4, 32, 1, 16, mscale, mscale_all_dim };
    size_t Tl = T / (size_t)cp, n = B * Tl * (H + 2 * Hkv) * D;
    float *x = hrand(n, 1), *ref = malloc(n * 4);
    memcpy(ref, x, n * 4);
    prt_act *x_d = dact(x, n);
    ref_prt_rope_cp_fwd(ref, B, Tl, H, Hkv, D, &c, T, cp, r);
    prt_rope_cp_fwd(x_d, B, Tl, H, Hkv, D, &g, T, cp, r);
    validate("rope scaled fwd", x_d, true, ref, n, 1e-2, 1e-2);
    ref_prt_rope_cp_bwd(ref, B, Tl, H, Hkv, D, &c, T, cp, r);
    prt_rope_cp_bwd(x_d, B, Tl, H, Hkv, D, &g, T, cp, r);
    validate("rope scaled bwd", x_d, true, ref, n, 2e-2, 2e-2);
    if (cp == 1) {
        ref_prt_rope_fwd(ref, B, T, H, Hkv, D, &c);
        prt_rope_fwd(x_d, B, T, H, Hkv, D, &g);
        validate("rope scaled fwd (plain op)", x_d, true, ref, n, 2e-2, 2e-2);
        ref_prt_rope_bwd(ref, B, T, H, Hkv, D, &c);
        prt_rope_bwd(x_d, B, T, H, Hkv, D, &g);
        validate("rope scaled bwd (plain op)", x_d, true, ref, n, 3e-2, 3e-2);
    }
    free(x); free(ref); prt_free(x_d);
}

/* prt_copy_blocks, the layout moves of composed ops: a strided copy with
 * a scale, and a sum over j into one block (dj 0) on top of dst. */
static void check_copy_blocks(size_t n, size_t m, size_t len)
{
    size_t sn = m * (len + 3), sj = len + 3, ns = n * sn, nd = n * (m * len + 5);
    float *src = hrand(ns, 1), *dst = hrand(nd, 1);
    prt_act *src_d = dact(src, ns), *dst_d = dact(dst, nd);
    ref_prt_copy_blocks(dst, m * len + 5, len, src + 1, sn, sj, n, m, len, 0.5f, false);
    prt_copy_blocks(dst_d, m * len + 5, len, src_d + 1, sn, sj, n, m, len, 0.5f, false);
    validate("copy_blocks strided", dst_d, true, dst, nd, 1e-2, 1e-2);
    ref_prt_copy_blocks(dst + 2, m * len + 5, 0, src, sn, sj, n, m, len, 1.0f, true);
    prt_copy_blocks(dst_d + 2, m * len + 5, 0, src_d, sn, sj, n, m, len, 1.0f, true);
    validate("copy_blocks sum over j", dst_d, true, dst, nd, 3e-2, 3e-2);
    free(src); free(dst); prt_free(src_d); prt_free(dst_d);
}

/* Multi-head latent attention (runtime/ops/mla.c, one source for both
 * builds) on the device against the CPU build: o, dx and every weight's
 * gradient, with a query latent (q_lora > 0, V3) or q_proj (V2-Lite). */
static void check_mla(size_t B, size_t T, size_t H, size_t C, size_t q_lora, size_t kv_lora, size_t rope,
                      size_t nope, size_t v)
{
    size_t N = B * T, dq = nope + rope, D = dq > v ? dq : v, R = kv_lora + rope, KV = nope + v;
    size_t qin = q_lora ? q_lora : C;
    const prt_rope rg = PRT_ROPE_PLAIN(10000.0);
    const ref_prt_rope rc = REF_ROPE_PLAIN(10000.0);
    prt_mla_dims dg = { B, T, H, C, q_lora, kv_lora, rope, nope, v, 0, 1e-6f, &rg };
    ref_prt_mla_dims dc = { B, T, H, C, q_lora, kv_lora, rope, nope, v, 0, 1e-6f, &rc };
    /* weights: q_a, its norm, q_b (or q_proj), kv_a, its norm, kv_b */
    size_t wn[6] = { q_lora * C, q_lora, H * dq * qin, R * C, kv_lora, H * KV * kv_lora };
    float *wh[6], *gh[6];
    prt_act *wd[6];
    float *gd[6];
    for (int i = 0; i < 6; i++) {
        wh[i] = hrand(wn[i] ? wn[i] : 1, i == 1 || i == 4 ? 1.0f : 0.2f);
        wd[i] = dact(wh[i], wn[i] ? wn[i] : 1);
        gh[i] = hzeros(wn[i]);
        gd[i] = dfloat(gh[i], wn[i] ? wn[i] : 1);
    }
    /* kept: qa, qn, qr, kva, kvl, kvn, kvr, qkv, att, opad */
    size_t kn[10] = { N * q_lora, N * q_lora, N, N * R, N * kv_lora, N * kv_lora, N, N * 3 * H * D,
                      B * H * T * T, N * H * D };
    float *kh[10];
    void *kd[10];
    for (int i = 0; i < 10; i++) {
        kh[i] = hzeros(kn[i] ? kn[i] : 1);
        kd[i] = prt_alloc((kn[i] ? kn[i] : 1) * (i == 2 || i == 6 ? 4 : 2));
    }
    ref_prt_mla_kept kc = { kh[0], kh[1], kh[2], kh[3], kh[4], kh[5], kh[6], kh[7], kh[8], kh[9] };
    prt_mla_kept kg = { kd[0], kd[1], kd[2], kd[3], kd[4], kd[5], kd[6], kd[7], kd[8], kd[9] };
    ref_prt_mla_w wc = { wh[0], NULL, wh[1], wh[2], wh[3], NULL, wh[4], wh[5] };
    prt_mla_w wg = { wd[0], NULL, wd[1], wd[2], wd[3], NULL, wd[4], wd[5] };
    if (!q_lora) { wc.wqa = wc.gqa = NULL; wg.wqa = wg.gqa = NULL; }
    size_t nw = ref_prt_mla_ws_elems(&dc);
    float *x = hrand(N * C, 1), *dout = hrand(N * H * v, 1), *o = hzeros(N * H * v), *dx = hzeros(N * C);
    float *ws = hzeros(nw);
    prt_act *x_d = dact(x, N * C), *dout_d = dact(dout, N * H * v), *o_d = prt_alloc(N * H * v * 2);
    prt_act *dx_d = prt_alloc(N * C * 2), *ws_d = prt_alloc(prt_mla_ws_elems(&dg) * 2);
    ref_prt_mla_fwd(o, &kc, ws, x, &wc, &dc);
    prt_mla_fwd(o_d, &kg, ws_d, x_d, &wg, &dg);
    validate("mla fwd", o_d, true, o, N * H * v, ATOL, 5e-2);
    ref_prt_mla_grad gc = { gh[0], NULL, gh[1], gh[2], gh[3], NULL, gh[4], gh[5] };
    prt_mla_grad gg = { gd[0], NULL, gd[1], gd[2], gd[3], NULL, gd[4], gd[5] };
    if (!q_lora) { gc.wqa = gc.gqa = NULL; gg.wqa = gg.gqa = NULL; }
    ref_prt_mla_bwd(dx, &gc, ws, dout, x, &kc, &wc, &dc);
    prt_mla_bwd(dx_d, &gg, ws_d, dout_d, x_d, &kg, &wg, &dg);
    validate("mla bwd dx", dx_d, true, dx, N * C, 5e-2, 5e-2);
    static const char *const gname[6] = { "mla bwd d q_a (fp32)", "mla bwd d q_a norm (fp32)",
                                          "mla bwd d q_b (fp32)", "mla bwd d kv_a (fp32)",
                                          "mla bwd d kv_a norm (fp32)", "mla bwd d kv_b (fp32)" };
    for (int i = 0; i < 6; i++)
        if (wn[i]) validate(gname[i], gd[i], false, gh[i], wn[i], 2e-2 * sqrt((double)N), 5e-2);
    free(x); free(dout); free(o); free(dx); free(ws);
    prt_free(x_d); prt_free(dout_d); prt_free(o_d); prt_free(dx_d); prt_free(ws_d);
    for (int i = 0; i < 6; i++) { free(wh[i]); free(gh[i]); prt_free(wd[i]); prt_free(gd[i]); }
    for (int i = 0; i < 10; i++) { free(kh[i]); prt_free(kd[i]); }
}

/* Context parallelism: the position and RoPE kernels on CP rank r's T/cp
 * rows (its chunks r and 2cp-1-r, prt_cp_pos) against the CPU ops. */
static void check_cp_positions(size_t B, size_t T, size_t C, size_t H, size_t Hkv, size_t D, int cp, int r)
{
    size_t Tl = T / (size_t)cp, n = B * Tl * C, q = B * Tl * (H + 2 * Hkv) * D;
    float *wpe = hrand(T * C, 1), *x = hrand(n, 1), *g = hrand(n, 1), *dwpe = hzeros(T * C);
    float *qx = hrand(q, 1), *qr = malloc(q * 4);
    memcpy(qr, qx, q * 4);
    prt_act *wpe_d = dact(wpe, T * C), *x_d = dact(x, n), *g_d = dact(g, n), *q_d = dact(qx, q);
    float *dwpe_d = prt_alloc(T * C * 4);
    prt_zero(dwpe_d, T * C * 4);
    ref_prt_position_cp_fwd(x, wpe, B, Tl, C, T, cp, r);
    ref_prt_position_cp_bwd(dwpe, g, B, Tl, C, T, cp, r);
    ref_prt_rope_cp_fwd(qr, B, Tl, H, Hkv, D, &REF_ROPE_PLAIN(10000.0f), T, cp, r);
    prt_position_cp_fwd(x_d, wpe_d, B, Tl, C, T, cp, r);
    prt_position_cp_bwd(dwpe_d, g_d, B, Tl, C, T, cp, r);
    prt_rope_cp_fwd(q_d, B, Tl, H, Hkv, D, &PRT_ROPE_PLAIN(10000.0f), T, cp, r);
    validate("position fwd, CP rank's rows", x_d, true, x, n, ATOL, RTOL);
    validate("position bwd, CP rank's rows (fp32)", dwpe_d, false, dwpe, T * C, 1e-4, 1e-4);
    validate("rope fwd, CP rank's positions", q_d, true, qr, q, 1e-2, 1e-2);
    ref_prt_rope_cp_bwd(qr, B, Tl, H, Hkv, D, &REF_ROPE_PLAIN(10000.0f), T, cp, r);
    prt_rope_cp_bwd(q_d, B, Tl, H, Hkv, D, &PRT_ROPE_PLAIN(10000.0f), T, cp, r);
    validate("rope bwd, CP rank's positions", q_d, true, qr, q, 2e-2, 2e-2);
    free(wpe); free(x); free(g); free(dwpe); free(qx); free(qr);
    void *d[] = {wpe_d, x_d, g_d, q_d, dwpe_d};
    for (size_t i = 0; i < 5; i++) prt_free(d[i]);
}

static void check_attention(size_t B, size_t T, size_t H, size_t Hkv, size_t D, bool recompute,
                            size_t W)
{
    size_t R = (H + 2 * Hkv) * D, N = B * T, HD = H * D, natt = B * H * T * T;
    float *qkv = hrand(N * R, 1.5f), *g = hrand(N * HD, 1), *out = hzeros(N * HD);
    float *att = hzeros(natt), *datt = hzeros(natt), *dqkv = hzeros(N * R);
    ref_prt_attention_fwd(out, att, qkv, B, T, H, Hkv, D, W);
    ref_prt_attention_bwd(dqkv, datt, g, qkv, att, false, B, T, H, Hkv, D, W);
    prt_act *qkv_d = dact(qkv, N * R), *g_d = dact(g, N * HD), *out_d = prt_alloc(N * HD * 2);
    prt_act *att_d = prt_alloc(natt * 2), *datt_d = prt_alloc(natt * 2), *dqkv_d = prt_alloc(N * R * 2);
    prt_attention_fwd(out_d, att_d, qkv_d, B, T, H, Hkv, D, W);
    if (recompute && !ok(prt_zero(att_d, natt * 2), "attention: clearing the probabilities"))
        failures++;
    prt_attention_bwd(dqkv_d, datt_d, g_d, qkv_d, att_d, recompute, B, T, H, Hkv, D, W);
    char name[64];
    snprintf(name, sizeof name, "attention fwd H%zu/%zu W%zu", H, Hkv, W);
    validate(name, out_d, true, out, N * HD, ATOL, 5e-2);
    snprintf(name, sizeof name, "attention bwd H%zu/%zu W%zu%s", H, Hkv, W, recompute ? " rc" : "");
    validate(name, dqkv_d, true, dqkv, N * R, 5e-2, 5e-2);
    free(qkv); free(g); free(out); free(att); free(datt); free(dqkv);
    void *d[] = {qkv_d, g_d, out_d, att_d, datt_d, dqkv_d};
    for (size_t i = 0; i < 6; i++) prt_free(d[i]);
}

/* Gemma 2's scores, scale and soft-cap (prt_attention_scores_*), against
 * the CPU build's; the backward recomputes the raw scores into att. */
static void check_attention_softcap(size_t B, size_t T, size_t H, size_t Hkv, size_t D, bool recompute,
                                    size_t W, float scale, float cap)
{
    size_t R = (H + 2 * Hkv) * D, N = B * T, HD = H * D, natt = B * H * T * T;
    float *qkv = hrand(N * R, 1.5f), *g = hrand(N * HD, 1), *out = hzeros(N * HD);
    float *att = hzeros(natt), *datt = hzeros(natt), *dqkv = hzeros(N * R);
    ref_prt_attn_scores rsc = { scale, cap };
    prt_attn_scores sc = { scale, cap };
    ref_prt_attention_scores_fwd(out, att, qkv, B, T, H, Hkv, D, W, rsc);
    ref_prt_attention_scores_bwd(dqkv, datt, g, qkv, att, false, B, T, H, Hkv, D, W, rsc);
    prt_act *qkv_d = dact(qkv, N * R), *g_d = dact(g, N * HD), *out_d = prt_alloc(N * HD * 2);
    prt_act *att_d = prt_alloc(natt * 2), *datt_d = prt_alloc(natt * 2), *dqkv_d = prt_alloc(N * R * 2);
    prt_attention_scores_fwd(out_d, att_d, qkv_d, B, T, H, Hkv, D, W, sc);
    if (recompute && !ok(prt_zero(att_d, natt * 2), "attention: clearing the probabilities"))
        failures++;
    prt_attention_scores_bwd(dqkv_d, datt_d, g_d, qkv_d, att_d, recompute, B, T, H, Hkv, D, W, sc);
    char name[96];
    snprintf(name, sizeof name, "attention softcap %g fwd H%zu/%zu W%zu", (double)cap, H, Hkv, W);
    validate(name, out_d, true, out, N * HD, ATOL, 5e-2);
    snprintf(name, sizeof name, "attention softcap %g bwd H%zu/%zu W%zu%s", (double)cap, H, Hkv, W,
             recompute ? " rc" : "");
    validate(name, dqkv_d, true, dqkv, N * R, 5e-2, 5e-2);
    free(qkv); free(g); free(out); free(att); free(datt); free(dqkv);
    void *d[] = {qkv_d, g_d, out_d, att_d, datt_d, dqkv_d};
    for (size_t i = 0; i < 6; i++) prt_free(d[i]);
}

/* Dropout: the CUDA masks are the CPU masks byte for byte (both draw
 * Philox 4x32-10 with prt_ops.h's key and counter), on a residual site
 * (rows [row0, row0 + rows) of sequences from seq0) and on the attention
 * probabilities (global heads from head0); the dropped outputs and the
 * attention's dropout backward within bf16 tolerance. */
static void check_dropout(size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t C)
{
    size_t rows = B * T / 2, n = rows * C, R = (H + 2 * Hkv) * D, N = B * T, HD = H * D, natt = B * H * T * T;
    prt_dropout_key k = { 42, 3, 7, PRT_DROPOUT_OUTPUT, 0.1f };
    float *x = hrand(n, 1), *y = hzeros(n);
    uint8_t *m = malloc(n), *ma = malloc(natt);
    ref_prt_dropout_fwd(y, m, x, (const ref_prt_dropout_key *)&k, rows, C, T, 5, rows);
    prt_act *x_d = dact(x, n), *y_d = prt_alloc(n * 2);
    uint8_t *m_d = prt_alloc(n);
    prt_dropout_fwd(y_d, m_d, x_d, &k, rows, C, T, 5, rows);
    check_mask("dropout mask (residual)", m, m_d, n);
    validate("dropout fwd (residual)", y_d, true, y, n, ATOL, RTOL);

    float *qkv = hrand(N * R, 1.5f), *g = hrand(N * HD, 1), *out = hzeros(N * HD);
    float *att = hzeros(natt), *attd = hzeros(natt), *datt = hzeros(natt), *dqkv = hzeros(N * R);
    prt_dropout_key kp = { 42, 3, 7, PRT_DROPOUT_PROBS, 0.1f };
    ref_prt_attention_probs_fwd(att, qkv, B, T, H, Hkv, D, 0);
    ref_prt_dropout_probs_fwd(attd, ma, att, (const ref_prt_dropout_key *)&kp, B, H, T, 2, H);
    ref_prt_attention_context_fwd(out, attd, qkv, B, T, H, Hkv, D);
    ref_prt_attention_dropout_bwd(dqkv, datt, g, qkv, att, attd, ma, kp.p, B, T, H, Hkv, D, 0);
    prt_act *qkv_d = dact(qkv, N * R), *g_d = dact(g, N * HD), *out_d = prt_alloc(N * HD * 2);
    prt_act *att_d = prt_alloc(natt * 2), *attd_d = prt_alloc(natt * 2), *datt_d = prt_alloc(natt * 2);
    prt_act *dqkv_d = prt_alloc(N * R * 2);
    uint8_t *ma_d = prt_alloc(natt);
    prt_attention_probs_fwd(att_d, qkv_d, B, T, H, Hkv, D, 0);
    prt_dropout_probs_fwd(attd_d, ma_d, att_d, &kp, B, H, T, 2, H);
    prt_attention_context_fwd(out_d, attd_d, qkv_d, B, T, H, Hkv, D);
    prt_attention_dropout_bwd(dqkv_d, datt_d, g_d, qkv_d, att_d, attd_d, ma_d, kp.p, B, T, H, Hkv, D, 0);
    check_mask("dropout mask (probs)", ma, ma_d, natt);
    validate("attention dropout fwd", out_d, true, out, N * HD, ATOL, 5e-2);
    validate("attention dropout bwd", dqkv_d, true, dqkv, N * R, 5e-2, 5e-2);
    free(x); free(y); free(m); free(ma);
    free(qkv); free(g); free(out); free(att); free(attd); free(datt); free(dqkv);
    void *d[] = {x_d, y_d, m_d, qkv_d, g_d, out_d, att_d, attd_d, datt_d, dqkv_d, ma_d};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) prt_free(d[i]);
}

/* One slice [3, V + pad) of a vocab-parallel split whose last pad columns
 * are padding (global index >= V: masked). */
static void check_xent(size_t N, size_t V, size_t pad)
{
    size_t v0 = 3, Vl = V + pad - 3;
    int32_t *tg = malloc(N * 4);
    for (size_t i = 0; i < N; i++)
        tg[i] = i % 7 == 0 ? -1 : (int32_t)((i * 31) % V);
    float *l = hrand(N * Vl, 4), *mx = hzeros(N), *se = hzeros(N), *t = hzeros(N);
    float *loss = hzeros(N), *dl = hzeros(N * Vl);
    ref_prt_xent_max(mx, l, N, Vl, v0, V);
    ref_prt_xent_sumexp(se, t, l, mx, tg, N, Vl, v0, V);
    ref_prt_xent_loss(loss, mx, se, t, tg, N);
    ref_prt_xent_bwd(dl, l, mx, se, tg, N, Vl, v0, V, 1.0f / (float)N);
    int32_t *tg_d = dbytes(tg, N * 4);
    prt_act *l_d = dact(l, N * Vl);
    float *mx_d = prt_alloc(N * 4), *se_d = prt_alloc(N * 4), *t_d = prt_alloc(N * 4);
    float *loss_d = prt_alloc(N * 4);
    prt_xent_max(mx_d, l_d, N, Vl, v0, V);
    prt_xent_sumexp(se_d, t_d, l_d, mx_d, tg_d, N, Vl, v0, V);
    prt_xent_loss(loss_d, mx_d, se_d, t_d, tg_d, N);
    validate("xent max", mx_d, false, mx, N, 1e-6, 1e-6);
    validate("xent sumexp", se_d, false, se, N, 1e-3, 1e-3);
    validate("xent target logit", t_d, false, t, N, 1e-6, 1e-6);
    validate("xent loss", loss_d, false, loss, N, 1e-3, 1e-3);
    prt_xent_bwd(l_d, l_d, mx_d, se_d, tg_d, N, Vl, v0, V, 1.0f / (float)N);   /* in place */
    validate("xent bwd (in place)", l_d, true, dl, N * Vl, 1e-4 / N, RTOL);
    /* Gemma 2's final-logit soft-cap: the capped logits, then the gradient
       through the cap, in place, from the capped logits */
    float cap = 3.0f;
    ref_prt_softcap_fwd(l, N * Vl, cap);
    for (size_t i = 0; i < N * Vl; i++)
        l[i] = bf2f(f2bf(l[i]));        /* the capped logits as the device holds them */
    ref_prt_xent_max(mx, l, N, Vl, v0, V);
    ref_prt_xent_sumexp(se, t, l, mx, tg, N, Vl, v0, V);
    ref_prt_xent_softcap_bwd(dl, l, mx, se, tg, N, Vl, v0, V, 1.0f / (float)N, cap);
    prt_free(l_d);
    l_d = dact(l, N * Vl);
    prt_xent_max(mx_d, l_d, N, Vl, v0, V);
    prt_xent_sumexp(se_d, t_d, l_d, mx_d, tg_d, N, Vl, v0, V);
    prt_xent_softcap_bwd(l_d, l_d, mx_d, se_d, tg_d, N, Vl, v0, V, 1.0f / (float)N, cap);
    validate("xent softcap bwd (in place)", l_d, true, dl, N * Vl, 1e-4 / N, RTOL);
    free(tg); free(l); free(mx); free(se); free(t); free(loss); free(dl);
    void *d[] = {tg_d, l_d, mx_d, se_d, t_d, loss_d};
    for (size_t i = 0; i < 6; i++) prt_free(d[i]);
}

static void check_adamw_init(size_t n)
{
    prt_adamw_cfg cfg = {.lr = 1e-3f, .min_lr = 1e-4f, .warmup = 2, .total = 10, .beta1 = 0.9f,
                         .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f};
    ref_prt_adamw_cfg rcfg;
    memcpy(&rcfg, &cfg, sizeof cfg);
    float *p = hzeros(n), *m = hzeros(n), *v = hzeros(n), *g = hrand(n, 1);
    ref_prt_init_normal(p, n, 5, 9, 100, 0.02f);
    float *p_d = prt_alloc(n * 4), *m_d = prt_alloc(n * 4), *v_d = prt_alloc(n * 4);
    float *g_d = dfloat(g, n);
    if (ok(prt_init_normal(p_d, n, 5, 9, 100, 0.02f), "init (bit-exact)")) {
        validate("init (bit-exact)", p_d, false, p, n, 0, 0);
    } else {
        checks++;
        failures++;
    }
    double sq = ref_prt_grad_sq_norm(g, n), sq_d = prt_grad_sq_norm(g_d, n);
    printf("%-28s cpu %.9g gpu %.9g  %s\n", "grad sq norm", sq, sq_d,
           fabs(sq - sq_d) <= 1e-9 * sq ? "ok" : "MISMATCH");
    checks++;
    failures += fabs(sq - sq_d) > 1e-9 * sq;
    for (long t = 1; t <= 3; t++) {
        ref_prt_adamw_step(p, g, m, v, n, &rcfg, t, 1e-3f, 0.1f, 0.5f);
        prt_adamw_step(p_d, g_d, m_d, v_d, n, &cfg, t, 1e-3f, 0.1f, 0.5f);
    }
    validate("adamw params", p_d, false, p, n, 1e-6, 1e-5);
    validate("adamw m", m_d, false, m, n, 1e-6, 1e-5);
    validate("adamw v", v_d, false, v, n, 1e-7, 1e-5);
    prt_act *a_d = prt_alloc(n * 2);
    float *back_d = prt_alloc(n * 4);
    prt_to_act(a_d, p_d, n);
    prt_from_act(back_d, a_d, n);
    validate("fp32 -> bf16 -> fp32", back_d, false, p, n, 0, 1.0 / 256);
    free(p); free(m); free(v); free(g);
    void *d[] = {p_d, m_d, v_d, g_d, a_d, back_d};
    for (size_t i = 0; i < 6; i++) prt_free(d[i]);
}

/* ---- GPT-2 small step ------------------------------------------------------ */

/* Issue 17's MoE pieces: each CUDA one against the CPU one on the same
 * inputs (routing on the CPU's logits, so a near-tie cannot make the two
 * sides pick different experts; then idx, rows and counts must be equal). */
static void check_int(const char *name, const void *dev, const int32_t *ref, size_t n)
{
    int32_t *got = malloc(n * sizeof *got + 4);
    if (!fetched(name, got, dev, n * sizeof *got)) { free(got); return; }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != ref[i];
    checks++;
    if (bad) failures++;
    printf("%-28s %9zu elements  %zu differ  %s\n", name, n, bad, bad ? "MISMATCH" : "ok");
    free(got);
}

static void check_moe(size_t B, size_t T, size_t C, size_t E, size_t k, double factor, int gate, size_t groups,
                      size_t top_groups, bool biased, float scale)
{
    size_t N = B * T, cap = ref_prt_moe_capacity(factor, T, k, E);
    float *x = hrand(N * C, 1), *wr = hrand(E * C, 0.5f), *g = hrand(N * C, 1);
    float *logits = hzeros(N * E), *w = hzeros(N * k), *dw = hzeros(N * k), *dl = hzeros(N * E);
    float *xe = hzeros(N * k * C), *out = hzeros(N * C), *dye = hzeros(N * k * C), *dx = hzeros(N * C);
    float *dwr = hzeros(E * C), *loss = hzeros(B);
    int32_t *idx = malloc(N * k * 4), *row = malloc(N * k * 4), *cnt = malloc(E * 4);
    for (size_t i = 0; i < N * C; i++) { x[i] = bf2f(f2bf(x[i])); g[i] = bf2f(f2bf(g[i])); }
    for (size_t i = 0; i < E * C; i++) wr[i] = bf2f(f2bf(wr[i]));
    ref_prt_moe_router_fwd(logits, x, wr, N, C, E);
    float *bias = hrand(E, 0.1f);   /* the expert bias (aux-loss-free balancing): small against the scores */
    float *bias_d = biased ? dfloat(bias, E) : NULL;
    ref_prt_moe_topk_fwd(idx, w, logits, N, E, k, gate, groups, top_groups, biased ? bias : NULL, scale);
    ref_prt_moe_route(row, cnt, idx, B, T, E, k, cap);
    ref_prt_moe_dispatch(xe, x, row, N, C, k);
    ref_prt_moe_combine(out, xe, row, w, N, C, k);   /* the experts as identities */
    ref_prt_moe_combine_bwd(dye, dw, g, xe, row, w, N, C, k);
    ref_prt_moe_dispatch_bwd(dx, dye, row, N, C, k);
    ref_prt_moe_topk_bwd(dl, dw, w, idx, logits, N, E, k, gate, scale);
    ref_prt_moe_aux_loss(loss, logits, idx, B, T, E, k, 0.01f, gate);
    ref_prt_moe_aux_bwd(dl, logits, idx, B, T, E, k, 0.01f, 0.5f, gate);
    ref_prt_moe_router_bwd(dx, dwr, dl, x, wr, N, C, E);
    size_t R = 0;
    for (size_t e = 0; e < E; e++) R += (size_t)cnt[e];
    prt_act *x_d = dact(x, N * C), *wr_d = dact(wr, E * C), *g_d = dact(g, N * C);
    prt_act *xe_d = prt_alloc(N * k * C * 2), *out_d = prt_alloc(N * C * 2);
    prt_act *dye_d = prt_alloc(N * k * C * 2), *dx_d = prt_alloc(N * C * 2);
    float *lg_d = prt_alloc(N * E * 4), *cpu_lg = dfloat(logits, N * E), *w_d = prt_alloc(N * k * 4);
    float *dw_d = prt_alloc(N * k * 4), *dl_d = prt_alloc(N * E * 4), *dwr_d = prt_alloc(E * C * 4);
    float *loss_d = prt_alloc(B * 4);
    int32_t *idx_d = prt_alloc(N * k * 4), *row_d = prt_alloc(N * k * 4), *cnt_d = prt_alloc(E * 4);
    prt_moe_router_fwd(lg_d, x_d, wr_d, N, C, E);
    validate("moe router fwd (fp32)", lg_d, false, logits, N * E, 1e-3 * sqrt((double)C), 1e-3);
    prt_moe_topk_fwd(idx_d, w_d, cpu_lg, N, E, k, gate, groups, top_groups, bias_d, scale);
    check_int("moe top-k experts", idx_d, idx, N * k);
    validate("moe top-k weights (fp32)", w_d, false, w, N * k, 1e-6, 1e-5);
    prt_moe_route(row_d, cnt_d, idx_d, B, T, E, k, cap);
    check_int("moe route rows", row_d, row, N * k);
    check_int("moe route counts", cnt_d, cnt, E);
    prt_moe_dispatch(xe_d, x_d, row_d, N, C, k);
    validate("moe dispatch", xe_d, true, xe, R * C, 0, 0);
    prt_moe_combine(out_d, xe_d, row_d, w_d, N, C, k);
    validate("moe combine", out_d, true, out, N * C, ATOL, RTOL);
    prt_moe_combine_bwd(dye_d, dw_d, g_d, xe_d, row_d, w_d, N, C, k);
    validate("moe combine bwd rows", dye_d, true, dye, R * C, ATOL, RTOL);
    validate("moe combine bwd w (fp32)", dw_d, false, dw, N * k, 1e-2 * sqrt((double)C), RTOL);
    prt_moe_dispatch_bwd(dx_d, dye_d, row_d, N, C, k);
    /* the router's input gradient adds to the dispatch's: the CPU's dl */
    float *dl_cpu_d = dfloat(dl, N * E);
    prt_moe_router_bwd(dx_d, dwr_d, dl_cpu_d, x_d, wr_d, N, C, E);
    validate("moe dispatch+router bwd dx", dx_d, true, dx, N * C, ATOL, RTOL);
    validate("moe router bwd dWr (fp32)", dwr_d, false, dwr, E * C, 1e-2 * sqrt((double)N), RTOL);
    prt_moe_topk_bwd(dl_d, dw_d, w_d, idx_d, cpu_lg, N, E, k, gate, scale);
    prt_moe_aux_loss(loss_d, cpu_lg, idx_d, B, T, E, k, 0.01f, gate);
    validate("moe aux loss (fp32)", loss_d, false, loss, B, 1e-6, 1e-4);
    prt_moe_aux_bwd(dl_d, cpu_lg, idx_d, B, T, E, k, 0.01f, 0.5f, gate);
    validate("moe top-k+aux bwd (fp32)", dl_d, false, dl, N * E, 1e-2, RTOL);
    free(bias);
    if (bias_d) prt_free(bias_d);
    void *h[] = {x, wr, g, logits, w, dw, dl, xe, out, dye, dx, dwr, loss, idx, row, cnt};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) free(h[i]);
    void *d[] = {x_d, wr_d, g_d, xe_d, out_d, dye_d, dx_d, lg_d, cpu_lg, w_d, dw_d, dl_d, dwr_d,
                 loss_d, idx_d, row_d, cnt_d, dl_cpu_d};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) prt_free(d[i]);
}

/* Aux-loss-free balancing's counts and bias step against the CPU's (exact:
 * whole-number counts, sums of them, +-rate). */
static void check_bias_update(size_t E)
{
    int32_t *cnt = malloc(E * 4);
    float *acc = hzeros(E), *bias = hrand(E, 0.1f);
    for (size_t e = 0; e < E; e++) cnt[e] = (int32_t)((e * 7919) % 13);
    int32_t *cnt_d = prt_alloc(E * 4);
    prt_copy_to_device(cnt_d, cnt, E * 4);
    float *acc_d = dfloat(acc, E), *bias_d = dfloat(bias, E);
    ref_prt_moe_count_add(acc, cnt, E);
    ref_prt_moe_count_add(acc, cnt, E);
    prt_moe_count_add(acc_d, cnt_d, E);
    prt_moe_count_add(acc_d, cnt_d, E);
    validate("moe expert counts (fp32)", acc_d, false, acc, E, 0, 0);
    ref_prt_moe_bias_update(bias, acc, E, 1e-3f);
    prt_moe_bias_update(bias_d, acc_d, E, 1e-3f);
    validate("moe expert bias step (fp32)", bias_d, false, bias, E, 0, 0);
    validate("moe expert counts zeroed", acc_d, false, acc, E, 0, 0);
    free(cnt); free(acc); free(bias);
    prt_free(cnt_d); prt_free(acc_d); prt_free(bias_d);
}

/* The shared experts' gate (Qwen2-MoE): sigmoid of the fp32 logits, the
 * gated sum added to the output, and the backward's two outputs. */
static void check_shared_gate(size_t N, size_t C)
{
    float *z = hrand(N, 2), *ys = hrand(N * C, 1), *out = hrand(N * C, 1), *dy = hrand(N * C, 1);
    float *g = hzeros(N), *dz = hzeros(N), *dys = hzeros(N * C);
    for (size_t i = 0; i < N * C; i++) {
        ys[i] = bf2f(f2bf(ys[i])); out[i] = bf2f(f2bf(out[i])); dy[i] = bf2f(f2bf(dy[i]));
    }
    prt_act *ys_d = dact(ys, N * C), *out_d = dact(out, N * C), *dy_d = dact(dy, N * C);
    prt_act *dys_d = prt_alloc(N * C * 2);
    float *z_d = dfloat(z, N), *g_d = prt_alloc(N * 4), *dz_d = prt_alloc(N * 4);
    ref_prt_moe_shared_gate_fwd(g, out, ys, z, N, C);
    ref_prt_moe_shared_gate_bwd(dz, dys, dy, ys, g, N, C);
    prt_moe_shared_gate_fwd(g_d, out_d, ys_d, z_d, N, C);
    validate("moe shared gate sigmoid (fp32)", g_d, false, g, N, 1e-6, 1e-5);
    validate("moe shared gate fwd", out_d, true, out, N * C, ATOL, RTOL);
    prt_moe_shared_gate_bwd(dz_d, dys_d, dy_d, ys_d, g_d, N, C);
    validate("moe shared gate bwd rows", dys_d, true, dys, N * C, ATOL, RTOL);
    validate("moe shared gate bwd logit (fp32)", dz_d, false, dz, N, 1e-3 * sqrt((double)C), 1e-3);
    void *h[] = {z, ys, out, dy, g, dz, dys};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) free(h[i]);
    void *d[] = {ys_d, out_d, dy_d, dys_d, z_d, g_d, dz_d};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) prt_free(d[i]);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void time_gpt2_small(size_t B, int steps)
{
    GptConfig c = {.V = 50257, .C = 768, .L = 12, .H = 12, .Hkv = 12, .F = 3072, .T = 1024,
                   .B = B, .llama = false, .recompute = RC_NONE};
    Gpt *g = gpt_new(&c, 1);
    prt_adamw_cfg cfg = {.lr = 6e-4f, .min_lr = 6e-5f, .warmup = 2, .total = 100, .beta1 = 0.9f,
                         .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f};
    size_t N = B * c.T;
    int32_t *in = malloc(N * 4), *tg = malloc(N * 4);
    for (size_t i = 0; i < N; i++) {   /* a repeating pattern the model can learn */
        in[i] = (int32_t)((i * 131) % 5000);
        tg[i] = (int32_t)(((i + 1) * 131) % 5000);
    }
    float first = 0, loss = 0;
    for (int s = 0; s < 2; s++) {   /* warm-up: cuBLAS heuristics, allocations */
        gpt_zero_grad(g);
        loss = gpt_forward_backward(g, in, tg);
        gpt_adamw(g, &cfg, s + 1);
        if (s == 0) first = loss;
    }
    prt_status st = prt_ops_sync();
    double t0 = now();
    for (int s = 0; s < steps; s++) {
        gpt_zero_grad(g);
        loss = gpt_forward_backward(g, in, tg);
        gpt_adamw(g, &cfg, s + 3);
    }
    st = st ? st : prt_ops_sync();
    double dt = (now() - t0) / steps, flops = gpt_flops_per_step(&c);
    printf("# GPT-2 small (124M, vocab 50257, seq 1024, micro-batch %zu, bf16, recompute none)\n", B);
    printf("%-28s %12.1f\n", "step time (ms)", dt * 1e3);
    printf("%-28s %12.0f\n", "tokens/s", (double)N / dt);
    printf("%-28s %12.1f\n", "model TFLOP/s", flops / dt / 1e12);
    printf("%-28s %12.3f -> %.3f\n", "loss", first, loss);
    if (st != PRT_OK || !isfinite(loss) || loss >= first) {
        printf("  GPT-2 step failed: %s, loss %g -> %g\n", prt_ops_last_error(), first, loss);
        failures++;
    }
    checks++;
    /* where the time goes, with a sync around every op */
    gpt_prof_on = true;
    gpt_zero_grad(g);
    t0 = now();
    gpt_forward_backward(g, in, tg);
    gpt_adamw(g, &cfg, steps + 3);
    prt_ops_sync();
    double tot = now() - t0;
    static const char *kinds[PROF_COUNT] = {"linear (cuBLAS)", "attention", "norms",
                                            "gelu, residual", "cross-entropy", "embeddings",
                                            "adamw + clip"};
    printf("# where the time goes (one step, synchronised per op: %.1f ms)\n", tot * 1e3);
    for (int k = 0; k < PROF_COUNT; k++)
        printf("%-28s %11.1f%%\n", kinds[k], 100.0 * gpt_prof[k] / tot);
    gpt_prof_on = false;
    free(in); free(tg);
    gpt_free(g);
}

int main(int argc, char **argv)
{
    prt_status st = prt_ops_init(0);
    if (st != PRT_OK) {
        fprintf(stderr, "test_ops_cuda: the CUDA ops linked, but there is no GPU to run them "
                        "on (%s: %s); skipped\n", prt_status_str(st), prt_ops_last_error());
        return 77;
    }
    size_t B = argc > 1 ? (size_t)atoi(argv[1]) : 8;
    printf("# CUDA ops vs CPU ops, bf16 storage / fp32 accumulation\n");
    check_linear(64, 96, 80);
    check_linear(256, 768, 2304);
    check_norm(false, 64, 768);
    check_norm(true, 64, 768);
    check_qk_norm(64, 4, 2, 128, 0.0f);   /* Qwen3's head_dim */
    check_qk_norm(64, 4, 1, 256, 1.0f);   /* Gemma 3's: 1 + w, head_dim 256, one kv head */
    check_qk_proj_norm(64, 4, 2, 128);   /* OLMo-2: the whole projection */
    check_pointwise(64, 384);
    check_embedding(4, 32, 64, 1000);
    check_rope(2, 16, 4, 2, 64);
    check_cp_positions(2, 32, 64, 4, 2, 16, 2, 1);   /* cp 2, rank 1: chunks 1 and 2 of 4 */
    check_cp_positions(2, 64, 32, 4, 2, 16, 4, 0);   /* cp 4, rank 0: chunks 0 and 7 of 8 */
    check_attention(2, 64, 4, 4, 32, false, 0);
    check_attention(2, 64, 8, 2, 32, false, 0);
    check_attention(2, 100, 4, 1, 64, true, 0);
    check_attention(2, 64, 8, 2, 32, false, 16);   /* sliding windows (Mistral) */
    check_attention(2, 100, 4, 1, 64, true, 33);
    check_attention_softcap(2, 64, 8, 2, 32, false, 16, 0.0625f, 2.0f);   /* Gemma 2: scale, cap, window */
    check_attention_softcap(2, 100, 4, 1, 64, true, 0, 0.125f, 50.0f);
    check_rope_theta(2, 16, 4, 2, 64, 500000.0f);  /* Llama 3's base */
    check_copy_blocks(37, 5, 24);
    check_mla(2, 16, 4, 64, 32, 24, 16, 32, 24);   /* a query latent (DeepSeek-V3's form) */
    check_mla(2, 16, 4, 64, 0, 24, 16, 32, 64);    /* q_proj, v wider than q (D = v) */
    for (int kind = PRT_ROPE_LINEAR; kind <= PRT_ROPE_YARN; kind++) {
        check_rope_scaled(2, 16, 4, 2, 64, kind, 1, 0, 1, 0);
        check_rope_scaled(2, 16, 4, 2, 64, kind, 2, 1, 1, 0);
    }
    check_rope_scaled(2, 16, 4, 2, 64, PRT_ROPE_YARN, 2, 1, 0.8, 0.5);   /* DeepSeek's pair */
    check_dropout(2, 64, 4, 2, 32, 384);
    check_xent(64, 1000, 0);
    check_xent(64, 1000, 24);   /* a padded vocabulary: 24 masked columns */
    check_adamw_init(100003);
    check_moe(4, 64, 96, 8, 2, 0.0, PRT_MOE_NORM, 1, 1, false, 1.0f);     /* dropless, Mixtral's 8 experts top-2 */
    check_moe(4, 64, 96, 8, 2, 1.0, PRT_MOE_NORM, 1, 1, false, 1.0f);     /* capacity 1: tokens dropped */
    check_moe(2, 128, 64, 64, 6, 1.25, PRT_MOE_NORM, 1, 1, false, 1.0f);  /* DeepSeek-like: many small experts */
    check_moe(4, 64, 96, 60, 4, 0.0, 0, 1, 1, false, 1.0f);               /* Qwen2-MoE's gate: the full softmax's top-k */
    check_moe(2, 64, 64, 64, 8, 0.0, PRT_MOE_SIGMOID | PRT_MOE_NORM, 8, 4, false, 1.0f);  /* DeepSeek-V3: grouped sigmoid */
    check_moe(2, 64, 64, 16, 2, 1.0, PRT_MOE_SIGMOID, 1, 1, false, 1.0f); /* the sigmoid alone */
    check_moe(2, 64, 64, 64, 8, 0.0, PRT_MOE_SIGMOID | PRT_MOE_NORM, 8, 4, true, 2.5f);  /* DeepSeek-V3's noaux_tc
                                                                                         and routed_scaling_factor */
    check_moe(2, 64, 64, 32, 6, 0.0, PRT_MOE_GROUP_MAX, 8, 3, false, 16.0f);  /* DeepSeek-V2: groups by max, x 16 */
    check_shared_gate(256, 96);                         /* Qwen2-MoE's shared expert gate */
    check_bias_update(256);                             /* DeepSeek-V3's aux-loss-free balancing */
    st = prt_ops_sync();
    if (st != PRT_OK) {
        printf("CUDA error: %s\n", prt_ops_last_error());
        failures++;
    }
    time_gpt2_small(B, 10);
    printf("# %d of %d checks failed\n", failures, checks);
    prt_ops_finalize();
    return failures ? 1 : 0;
}
