/*
 * fp8.c: FP8 training's numerics on the CPU (issue 27): the block grids
 * and scales of each recipe, quantisation to E4M3 / E5M2 codes, and the
 * scaled GEMM, so a CPU run computes what an FP8 run on a GPU computes.
 *
 * The scalar codec and the scale rule live in prt_ops.h (inline, shared
 * with the CUDA kernels of runtime/cuda/ops_fp8.cu), the recipes' grids
 * and delayed scaling's history in fp8_recipe.c (both builds); this file
 * applies them to matrices in host memory. What the recipes do is
 * taken from the libraries that define them, named at each rule:
 * Transformer Engine (transformer_engine/common/recipe/__init__.py,
 * recipe_common.cuh, delayed_scaling.cu), torchao
 * (torchao/float8/float8_utils.py), the OCP MX v1.0 specification and
 * the DeepSeek-V3 technical report (arXiv 2412.19437, section 3.3).
 *
 * It must not decide which GEMMs run in FP8 or with which recipe: that
 * is the planner's (prt_fp8_cfg comes from the plan); nor reduce amaxes
 * across ranks: the caller all-reduces prt_fp8_amax's output where a
 * tensor is sharded, then calls prt_fp8_scale_from_amax and prt_fp8_cast.
 */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ops_err.h"

/* ---- amax and scales ------------------------------------------------------- */

void prt_fp8_amax(float *amax, const prt_act *x, const prt_fp8_grid *g)
{
    for (size_t b = 0; b < prt_fp8_nblocks(g); b++)
        amax[b] = 0.0f;
    for (size_t r = 0; r < g->rows; r++) {
        float *row_amax = amax + (r / g->br) * g->nbc;
        for (size_t c = 0; c < g->cols; c++) {
            float a = fabsf(x[r * g->cols + c]);
            float *m = row_amax + c / g->bc;
            if (a > *m || isnan(a))   /* NaN sticks: a later a > NaN is false */
                *m = isnan(*m) ? *m : a;
        }
    }
}

void prt_fp8_scales(float *scale, const float *amax, size_t n, const prt_fp8_cfg *cfg)
{
    for (size_t b = 0; b < n; b++)
        scale[b] = prt_fp8_scale_from_amax(amax[b], cfg);
}

/* ---- cast, quantise, dequantise --------------------------------------------- */

void prt_fp8_cast(prt_fp8_tensor *t, const prt_act *x, const float *scale, prt_fp8_mode mode)
{
    const prt_fp8_grid *g = &t->g;
    for (size_t r = 0; r < g->rows; r++) {
        const float *s = scale + (r / g->br) * g->nbc;
        for (size_t c = 0; c < g->cols; c++)
            t->q[r * g->cols + c] = prt_fp8_encode(x[r * g->cols + c] * s[c / g->bc], t->fmt, mode);
    }
    /* after the codes, so scale may be t->scale_inv itself (cast in place) */
    for (size_t b = 0; b < prt_fp8_nblocks(g); b++)
        t->scale_inv[b] = 1.0f / scale[b];
}

prt_status prt_fp8_device_check(prt_fp8_recipe r, char *buf, size_t len)
{
    (void)r;
    if (len) buf[0] = '\0';   /* the CPU build emulates FP8: any host runs it */
    return PRT_OK;
}

void prt_fp8_amax_f32(float *amax, const float *x, const prt_fp8_grid *g)
{
    prt_fp8_amax(amax, x, g);
}

void prt_fp8_cast_f32(prt_fp8_tensor *t, const float *x, const float *scale, prt_fp8_mode mode)
{
    prt_fp8_cast(t, x, scale, mode);
}

prt_status prt_fp8_quantize(prt_fp8_tensor *t, const float *x, const prt_fp8_cfg *cfg,
                            prt_fp8_kdim k, size_t rows, size_t cols, prt_fp8_history *h,
                            float *amax_out)
{
    if (cfg->recipe == PRT_FP8_DELAYED && !h)
        return PRT_ERR_ARG;
    prt_status st = prt_fp8_grid_of(&t->g, cfg, rows, cols, k);
    if (st != PRT_OK)
        return st;
    t->fmt = cfg->fmt;
    size_t nb = prt_fp8_nblocks(&t->g);
    float *amax = malloc(2 * nb * sizeof *amax);
    if (!amax)
        return PRT_ERR_NOMEM;
    float *scale = amax + nb;
    prt_fp8_amax(amax, x, &t->g);
    if (cfg->recipe == PRT_FP8_DELAYED)
        scale[0] = h->scale;
    else
        prt_fp8_scales(scale, amax, nb, cfg);
    prt_fp8_cast(t, x, scale, cfg->mode);
    float whole = 0.0f;
    for (size_t b = 0; b < nb; b++)
        whole = isnan(amax[b]) || isnan(whole) ? NAN : fmaxf(whole, amax[b]);
    if (cfg->recipe == PRT_FP8_DELAYED)
        prt_fp8_history_record(h, whole);
    if (amax_out)
        *amax_out = whole;
    free(amax);
    return PRT_OK;
}

void prt_fp8_dequantize(float *x, const prt_fp8_tensor *t)
{
    const prt_fp8_grid *g = &t->g;
    for (size_t r = 0; r < g->rows; r++) {
        const float *si = t->scale_inv + (r / g->br) * g->nbc;
        for (size_t c = 0; c < g->cols; c++)
            x[r * g->cols + c] = prt_fp8_decode(t->q[r * g->cols + c], t->fmt) * si[c / g->bc];
    }
}

/* ---- scaled GEMM ------------------------------------------------------------- */

static bool is_pow2(float s)
{
    uint32_t u = prt_f32_bits(s);
    if (!(s > 0.0f) || isinf(s))
        return false;
    return (u >> 23) ? (u & 0x7FFFFFu) == 0 : (u & (u - 1)) == 0;
}

static bool all_pow2(const prt_fp8_tensor *t)
{
    for (size_t b = 0; b < prt_fp8_nblocks(&t->g); b++)
        if (!is_pow2(t->scale_inv[b]))
            return false;
    return true;
}

/* The block extent along K of a tensor's grid. */
static size_t k_extent(const prt_fp8_tensor *t)
{
    return t->g.k == PRT_FP8_K_COLS ? t->g.bc : t->g.br;
}

/* scale_inv of the element of op(A) at (i, kk) or of op(B) at (kk, j):
 * the operand's stored coordinates are (other, k) for K_COLS and (k, other)
 * for K_ROWS. */
static float scale_at(const prt_fp8_tensor *t, size_t other, size_t kk)
{
    size_t r = t->g.k == PRT_FP8_K_COLS ? other : kk;
    size_t c = t->g.k == PRT_FP8_K_COLS ? kk : other;
    return t->scale_inv[(r / t->g.br) * t->g.nbc + c / t->g.bc];
}

/* Elements of A, B and extra together, 0 if the count (in floats) would
 * overflow size_t. */
static size_t sum_elems(const prt_fp8_tensor *A, const prt_fp8_tensor *B, size_t extra)
{
    size_t na = A->g.rows * A->g.cols, nb = B->g.rows * B->g.cols;  /* checked by grid_of */
    if (na > SIZE_MAX / sizeof(float) - nb || na + nb > SIZE_MAX / sizeof(float) - extra)
        return 0;
    return na + nb + extra;
}

/* The decoded codes alone (no scale), exact in fp32. */
static void decode_all(float *x, const prt_fp8_tensor *t)
{
    size_t n = t->g.rows * t->g.cols;
    for (size_t i = 0; i < n; i++)
        x[i] = prt_fp8_decode(t->q[i], t->fmt);
}

/* Operands with scales that are not all powers of two: per K-block of kb,
 * P = A_dec[:, kblk] B_dec[kblk, :] by sgemm on the decoded codes (exact
 * inputs, fp32 accumulation), then C += (sa * sb) * P elementwise, the
 * product of the two scales taken first as DeepGEMM's promotion does. */
static prt_status gemm_by_kblocks(float *C, const prt_fp8_tensor *A, bool ta,
                                  const prt_fp8_tensor *B, bool tb, size_t M, size_t N,
                                  size_t K, size_t kb, float beta)
{
    size_t n = sum_elems(A, B, M * N);
    float *a = n ? malloc(n * sizeof *a) : NULL;
    if (!a)
        return n ? PRT_ERR_NOMEM : PRT_ERR_ARG;
    float *b = a + A->g.rows * A->g.cols, *p = b + B->g.rows * B->g.cols;
    decode_all(a, A);
    decode_all(b, B);
    for (size_t i = 0; i < M * N; i++)
        C[i] = beta == 0.0f ? 0.0f : beta * C[i];
    size_t lda = ta ? M : K, ldb = tb ? K : N;
    for (size_t k0 = 0; k0 < K; k0 += kb) {
        size_t kn = K - k0 < kb ? K - k0 : kb;
        const float *ak = ta ? a + k0 * lda : a + k0;   /* A stored (K, M) or (M, K) */
        const float *bk = tb ? b + k0 : b + k0 * ldb;   /* B stored (N, K) or (K, N) */
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)M, (int)N, (int)kn, 1.0f, ak, (int)lda, bk, (int)ldb, 0.0f, p, (int)N);
        for (size_t i = 0; i < M; i++) {
            float sa = scale_at(A, i, k0);
            for (size_t j = 0; j < N; j++)
                C[i * N + j] += (sa * scale_at(B, j, k0)) * p[i * N + j];
        }
    }
    free(a);
    return PRT_OK;
}

prt_status prt_fp8_gemm(float *C, const prt_fp8_tensor *A, bool ta, const prt_fp8_tensor *B,
                        bool tb, size_t M, size_t N, size_t K, float beta)
{
    if (A->g.k != (ta ? PRT_FP8_K_ROWS : PRT_FP8_K_COLS) ||
        B->g.k != (tb ? PRT_FP8_K_COLS : PRT_FP8_K_ROWS))
        return PRT_ERR_ARG;   /* the blocks must lie along K */
    if (A->g.rows != (ta ? K : M) || A->g.cols != (ta ? M : K) ||
        B->g.rows != (tb ? N : K) || B->g.cols != (tb ? K : N))
        return PRT_ERR_ARG;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || M > SIZE_MAX / N)
        return PRT_ERR_ARG;   /* cblas takes int dimensions */
    size_t ka = k_extent(A), kb = k_extent(B);
    size_t lo = ka < kb ? ka : kb, hi = ka < kb ? kb : ka;
    if (hi % lo && hi != K)
        return PRT_ERR_ARG;   /* K-blocks that straddle each other */
    if (!(all_pow2(A) && all_pow2(B)))
        return gemm_by_kblocks(C, A, ta, B, tb, M, N, K, lo, beta);
    /* Powers of two: decode(q) * 2^k is exact in fp32 (4 or 3 significant
     * bits; the smallest, 2^-16 * 2^-127, is above fp32's 2^-149; only a
     * product past FLT_MAX, which the kernel's would be too, is not), so
     * dequantise-then-sgemm computes the FP8 kernel's products; only the
     * order of the fp32 sums differs. */
    size_t n = sum_elems(A, B, 0);
    float *a = n ? malloc(n * sizeof *a) : NULL;
    if (!a)
        return n ? PRT_ERR_NOMEM : PRT_ERR_ARG;
    float *b = a + A->g.rows * A->g.cols;
    prt_fp8_dequantize(a, A);
    prt_fp8_dequantize(b, B);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, 1.0f, a, (int)(ta ? M : K), b, (int)(tb ? K : N), beta,
                C, (int)N);
    free(a);
    return PRT_OK;
}

/* ---- linear layers ------------------------------------------------------------ */



/* Quantise two operands into one allocation, run the GEMM, free. */
typedef struct {
    const float *x;
    const prt_fp8_cfg *cfg;
    prt_fp8_kdim k;
    size_t rows, cols;
    prt_fp8_history *h;
} fp8_operand;

static prt_status quantize_alloc(prt_fp8_tensor *t, const fp8_operand *o)
{
    prt_fp8_grid g;
    prt_status st = prt_fp8_grid_of(&g, o->cfg, o->rows, o->cols, o->k);
    if (st != PRT_OK)
        return st;
    t->q = malloc(o->rows * o->cols);
    t->scale_inv = malloc(prt_fp8_nblocks(&g) * sizeof *t->scale_inv);
    if (!t->q || !t->scale_inv)
        return PRT_ERR_NOMEM;
    return prt_fp8_quantize(t, o->x, o->cfg, o->k, o->rows, o->cols, o->h, NULL);
}

static prt_status gemm_of(float *C, const fp8_operand *a, bool ta, const fp8_operand *b, bool tb,
                          size_t M, size_t N, size_t K, float beta)
{
    prt_fp8_tensor A = { 0 }, B = { 0 };
    prt_status st = quantize_alloc(&A, a);
    if (st == PRT_OK)
        st = quantize_alloc(&B, b);
    if (st == PRT_OK)
        st = prt_fp8_gemm(C, &A, ta, &B, tb, M, N, K, beta);
    free(A.q), free(A.scale_inv), free(B.q), free(B.scale_inv);
    return st;
}

/* out (N, O) = x (N, K) W^T + b: K along the columns of both. */
prt_status prt_fp8_linear_fwd(float *out, const float *x, const float *w, const float *b,
                              size_t N, size_t K, size_t O, const prt_fp8_linear_cfg *cfg,
                              prt_fp8_history *h_x, prt_fp8_history *h_w)
{
    fp8_operand xa = { x, &cfg->act, PRT_FP8_K_COLS, N, K, h_x };
    fp8_operand wb = { w, &cfg->weight, PRT_FP8_K_COLS, O, K, h_w };
    prt_status st = gemm_of(out, &xa, false, &wb, true, N, O, K, 0.0f);
    if (st == PRT_OK && b)   /* the bias in fp32 after the GEMM, as TE's epilogue */
        for (size_t i = 0; i < N; i++)
            for (size_t o = 0; o < O; o++)
                out[i * O + o] += b[o];
    return st;
}

/* dx (N, K) = dout (N, O) W (O, K): K of this GEMM is O, along dout's
 * columns and W's rows. */
prt_status prt_fp8_linear_bwd_input(float *dx, const float *dout, const float *w,
                                    size_t N, size_t K, size_t O, const prt_fp8_linear_cfg *cfg,
                                    prt_fp8_history *h_dout, prt_fp8_history *h_w)
{
    fp8_operand ga = { dout, &cfg->grad, PRT_FP8_K_COLS, N, O, h_dout };
    fp8_operand wb = { w, &cfg->weight, PRT_FP8_K_ROWS, O, K, h_w };
    return gemm_of(dx, &ga, false, &wb, false, N, K, O, 0.0f);
}

/* dW (O, K) += dout^T x: K of this GEMM is N, along the rows of both. */
prt_status prt_fp8_linear_bwd_weight(float *dw, const float *dout, const float *x,
                                     size_t N, size_t K, size_t O, const prt_fp8_linear_cfg *cfg,
                                     prt_fp8_history *h_dout, prt_fp8_history *h_x)
{
    fp8_operand ga = { dout, &cfg->grad, PRT_FP8_K_ROWS, N, O, h_dout };
    fp8_operand xb = { x, &cfg->act, PRT_FP8_K_ROWS, N, K, h_x };
    return gemm_of(dw, &ga, true, &xb, false, O, K, N, 1.0f);
}
