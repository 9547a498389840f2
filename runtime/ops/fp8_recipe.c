/*
 * fp8_recipe.c: the host side of FP8's recipes, for both builds (issue
 * 27): each recipe's defaults and block grid, the E8M0 code of an MX
 * scale and delayed scaling's amax history. The casts, amaxes and the
 * scaled GEMM are runtime/ops/fp8.c (CPU) and runtime/cuda/ops_fp8.cu;
 * the scalar rules (codec, scale from amax) are inline in prt_ops.h so
 * both builds share them.
 */
#include <float.h>
#include <math.h>
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

uint8_t prt_e8m0_encode(float pow2)
{
    if (!(pow2 > 0.0f) || isinf(pow2))
        return 0xFFu;
    int e = prt_f32_floor_log2(pow2);
    return (uint8_t)(e < -127 ? 0 : e > 127 ? 254 : e + 127);
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

/* A linear's three operands, both builds (the generated program's FP8 linears). */
prt_fp8_linear_cfg prt_fp8_linear_default(prt_fp8_recipe r, bool hybrid)
{
    /* TE Format.HYBRID: e4m3 forward, e5m2 for the backward's gradients. */
    return (prt_fp8_linear_cfg){
        .act = prt_fp8_cfg_default(r, PRT_FP8_E4M3, false),
        .weight = prt_fp8_cfg_default(r, PRT_FP8_E4M3, true),
        .grad = prt_fp8_cfg_default(r, hybrid ? PRT_FP8_E5M2 : PRT_FP8_E4M3, false),
    };
}
