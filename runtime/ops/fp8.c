/*
 * fp8.c: FP8 training's numerics on the CPU (issue 27): the block grids
 * and scales of each recipe, quantisation to E4M3 / E5M2 codes, and the
 * scaled GEMM, so a CPU run computes what an FP8 run on a GPU computes.
 *
 * The scalar codec lives in prt_ops.h (inline, shared with the CUDA
 * kernels); this file applies it to matrices. What the recipes do is
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

/* ---- recipes -------------------------------------------------------------- */

/* DeepSeek-V3 section 3.3.2 (fine-grained quantisation): 1 x 128 tiles
 * for activations and gradients, 128 x 128 blocks for weights; TE
 * Float8BlockScaling uses the same 128. */
enum { FP8_BLOCK = 128 };
/* OCP MX v1.0 section 5 (table 1, MXFP8): k = 32 elements per scale. */
enum { FP8_MX_BLOCK = 32 };

/* ORDER PRT_FP8_RECIPE */
static const char *const RECIPE_NAMES[] = {
    "tensorwise", "delayed", "rowwise", "blockwise", "mxfp8",
};

const char *prt_fp8_recipe_name(prt_fp8_recipe r)
{
    return (unsigned)r < sizeof RECIPE_NAMES / sizeof RECIPE_NAMES[0] ? RECIPE_NAMES[r] : "?";
}

prt_fp8_cfg prt_fp8_cfg_default(prt_fp8_recipe r, prt_fp8_format fmt, bool weight)
{
    return (prt_fp8_cfg){
        .recipe = r,
        .fmt = fmt,
        .mode = PRT_FP8_SAT,
        /* torchao Float8LinearConfig.from_recipe_name(ROWWISE) sets
         * round_scales_to_power_of_2=True; TE Float8BlockScaling's QParams
         * default power_2_scale=True; tensorwise and delayed keep fp32
         * scales (TE Float8CurrentScaling use_power_2_scales defaults off). */
        .pow2 = r == PRT_FP8_ROWWISE || r == PRT_FP8_BLOCKWISE,
        .block2d = r == PRT_FP8_BLOCKWISE && weight,
        .amax_eps = 0.0f,
        .margin = 0,
    };
}

prt_fp8_linear_cfg prt_fp8_linear_default(prt_fp8_recipe r, bool hybrid)
{
    /* TE Format.HYBRID: e4m3 forward, e5m2 for the backward's gradients. */
    return (prt_fp8_linear_cfg){
        .act = prt_fp8_cfg_default(r, PRT_FP8_E4M3, false),
        .weight = prt_fp8_cfg_default(r, PRT_FP8_E4M3, true),
        .grad = prt_fp8_cfg_default(r, hybrid ? PRT_FP8_E5M2 : PRT_FP8_E4M3, false),
    };
}

/* The block's extent along K and across it, per recipe. */
static bool block_extent(const prt_fp8_cfg *cfg, size_t kdim_len, size_t *along_k,
                         size_t *across_k, size_t other_len)
{
    switch (cfg->recipe) {
    case PRT_FP8_TENSORWISE:
    case PRT_FP8_DELAYED:
        *along_k = kdim_len, *across_k = other_len;
        return true;
    case PRT_FP8_ROWWISE:
        *along_k = kdim_len, *across_k = 1;
        return true;
    case PRT_FP8_BLOCKWISE:
        *along_k = FP8_BLOCK, *across_k = cfg->block2d ? FP8_BLOCK : 1;
        return true;
    case PRT_FP8_MXFP8:
        *along_k = FP8_MX_BLOCK, *across_k = 1;
        return true;
    }
    return false;
}

prt_status prt_fp8_grid_of(prt_fp8_grid *g, const prt_fp8_cfg *cfg, size_t rows, size_t cols,
                           prt_fp8_kdim k)
{
    if (!rows || !cols || (k != PRT_FP8_K_COLS && k != PRT_FP8_K_ROWS))
        return PRT_ERR_ARG;
    if (rows > SIZE_MAX / cols)
        return PRT_ERR_ARG;
    size_t klen = k == PRT_FP8_K_COLS ? cols : rows, olen = k == PRT_FP8_K_COLS ? rows : cols;
    size_t along, across;
    if (!block_extent(cfg, klen, &along, &across, olen))
        return PRT_ERR_ARG;
    along = along < klen ? along : klen;
    across = across < olen ? across : olen;
    *g = (prt_fp8_grid){
        .rows = rows, .cols = cols, .k = k,
        .br = k == PRT_FP8_K_COLS ? across : along,
        .bc = k == PRT_FP8_K_COLS ? along : across,
    };
    g->nbr = (rows + g->br - 1) / g->br;
    g->nbc = (cols + g->bc - 1) / g->bc;
    return PRT_OK;
}

/* ---- amax and scales ------------------------------------------------------- */

void prt_fp8_amax(float *amax, const float *x, const prt_fp8_grid *g)
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

/* floor(log2 a) of a finite a > 0 from its bits (fp32 subnormals too). */
static int floor_log2(float a)
{
    uint32_t u = prt_f32_bits(a);
    int e = (int)(u >> 23);
    if (e)
        return e - 127;
    int lead = 31 - __builtin_clz(u & 0x7FFFFFu);  /* subnormal: 2^-149 * mantissa */
    return lead - 149;
}

/* 2^e for e in [-149, 127], exactly. */
static float pow2f(int e)
{
    if (e >= -126)
        return prt_f32_from_bits((uint32_t)(e + 127) << 23);
    return prt_f32_from_bits(1u << (e + 149));
}

uint8_t prt_e8m0_encode(float pow2)
{
    if (!(pow2 > 0.0f) || isinf(pow2))
        return 0xFFu;
    int e = floor_log2(pow2);
    return (uint8_t)(e < -127 ? 0 : e > 127 ? 254 : e + 127);
}

/* OCP MX v1.0 section 6.3: shared_exp = floor(log2(max |V_i|)) - emax_elem,
 * X = 2^shared_exp, clamped to E8M0's range; elements are V_i / X. emax_elem
 * is the element format's largest normal exponent: 8 (E4M3), 15 (E5M2). */
static float mx_scale(float amax, prt_fp8_format fmt)
{
    if (isnan(amax) || isinf(amax))
        return prt_f32_from_bits(0x7FC00000u);
    if (amax == 0.0f)
        return 1.0f;
    int shared = floor_log2(amax) - (fmt == PRT_FP8_E4M3 ? 8 : 15);
    shared = shared < -127 ? -127 : shared > 127 ? 127 : shared;
    return pow2f(-shared);   /* 1 / X, exact: 2^-127 .. 2^127 */
}

/* TE compute_scale_from_amax (recipe_common.cuh), value_for_inf FLT_MAX as
 * for an fp32 input; torchao's amax_to_scale computes the same quotient (in
 * fp64, rounded once to fp32: the same value) and rounds down to a power of
 * two with exp2(floor(log2(scale))), which is the mask below. */
static float amax_scale(float amax, float fmax, bool pow2, float eps)
{
    if (amax < eps)
        amax = eps;
    if (isinf(amax) || amax == 0.0f || isnan(amax))
        return 1.0f;
    float scale = fmax / amax;
    if (isinf(scale))
        scale = FLT_MAX;
    if (pow2)
        scale = prt_f32_from_bits(prt_f32_bits(scale) & 0xFF800000u);
    return scale;
}

float prt_fp8_scale_from_amax(float amax, const prt_fp8_cfg *cfg)
{
    if (cfg->recipe == PRT_FP8_MXFP8)
        return mx_scale(amax, cfg->fmt);
    return amax_scale(amax, prt_fp8_max(cfg->fmt), cfg->pow2, cfg->amax_eps);
}

/* ---- delayed scaling --------------------------------------------------------- */

prt_status prt_fp8_history_init(prt_fp8_history *h, float *buf, size_t len)
{
    if (!buf || !len)
        return PRT_ERR_ARG;
    *h = (prt_fp8_history){ .amax = buf, .len = len, .scale = 1.0f };
    return PRT_OK;
}

void prt_fp8_history_record(prt_fp8_history *h, float amax)
{
    h->pending = fmaxf(h->pending, amax);
}

/* TE amax_and_scale_update's kernel: roll the window, amax = max over it
 * ("max" algorithm, fmaxf), scale = (max * 2^-margin) / amax when amax is
 * finite and > 0, else the previous scale; pow2 as compute_scale_from_amax. */
float prt_fp8_history_update(prt_fp8_history *h, const prt_fp8_cfg *cfg)
{
    h->amax[h->head] = h->pending;
    h->head = (h->head + 1) % h->len;
    if (h->count < h->len)
        h->count++;
    h->pending = 0.0f;
    float amax = 0.0f;
    for (size_t i = 0; i < h->count; i++)
        amax = fmaxf(amax, h->amax[i]);
    if (isfinite(amax) && amax > 0.0f) {
        float s = ldexpf(prt_fp8_max(cfg->fmt), -cfg->margin) / amax;
        if (isinf(s))
            s = FLT_MAX;
        if (cfg->pow2)
            s = prt_f32_from_bits(prt_f32_bits(s) & 0xFF800000u);
        h->scale = s;
    }
    return h->scale;
}

/* ---- cast, quantise, dequantise --------------------------------------------- */

void prt_fp8_cast(prt_fp8_tensor *t, const float *x, const float *scale, prt_fp8_mode mode)
{
    const prt_fp8_grid *g = &t->g;
    for (size_t b = 0; b < prt_fp8_nblocks(g); b++)
        t->scale_inv[b] = 1.0f / scale[b];
    for (size_t r = 0; r < g->rows; r++) {
        const float *s = scale + (r / g->br) * g->nbc;
        for (size_t c = 0; c < g->cols; c++)
            t->q[r * g->cols + c] = prt_fp8_encode(x[r * g->cols + c] * s[c / g->bc], t->fmt, mode);
    }
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
        for (size_t b = 0; b < nb; b++)
            scale[b] = prt_fp8_scale_from_amax(amax[b], cfg);
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
