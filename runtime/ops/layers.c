/*
 * layers.c: the elementwise and row-wise layers of the CPU build (fp32):
 * embeddings, learned positions, RoPE, LayerNorm, RMSNorm, GeLU, ReLU,
 * SwiGLU, residual add and the pieces of softmax cross-entropy.
 *
 * These are memory-bound loops; the GEMM-shaped work (linear, attention)
 * lives in linear.c and attention.c and goes through cblas_sgemm. Every
 * function works on the slice of a layer one rank holds, with the
 * dimensions it is given, and keeps the conventions of prt_ops.h:
 * parameter gradients and norm input gradients accumulate, other input
 * gradients overwrite. Formulas follow llm.c (train_gpt2.c) unless a
 * comment names another source.
 */
#include <math.h>
#include <string.h>
#include "ops_err.h"

/* ---- embeddings ---------------------------------------------------------- */

void prt_embedding_fwd(prt_act *out, const int32_t *tokens, const prt_act *wte,
                       size_t N, size_t C, size_t v0, size_t Vl)
{
    PRT_OP_ENTER("prt_embedding_fwd");
    for (size_t i = 0; i < N; i++) {
        float *o = out + i * C;
        int64_t local = (int64_t)tokens[i] - (int64_t)v0;
        if (local >= 0 && (size_t)local < Vl)
            memcpy(o, wte + (size_t)local * C, C * sizeof *o);
        else
            memset(o, 0, C * sizeof *o);
    }
}

void prt_embedding_bwd(float *dwte, const int32_t *tokens, const prt_act *dout,
                       size_t N, size_t C, size_t v0, size_t Vl)
{
    PRT_OP_ENTER("prt_embedding_bwd");
    for (size_t i = 0; i < N; i++) {
        int64_t local = (int64_t)tokens[i] - (int64_t)v0;
        if (local < 0 || (size_t)local >= Vl)
            continue;
        float *d = dwte + (size_t)local * C;
        const float *g = dout + i * C;
        for (size_t c = 0; c < C; c++)
            d[c] += g[c];
    }
}

/* x (B, Tl, C) += the rows of wpe at each local token's global position
 * (prt_cp_pos: CP rank r of cp holds chunks r and 2cp-1-r of sequences of
 * T tokens; cp 1 is every position in order). */
static void position_add(prt_act *x, const prt_act *wpe, size_t B, size_t Tl, size_t C, size_t T,
                         int cp, int r)
{
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < Tl; t++) {
            float *row = x + (b * Tl + t) * C;
            const float *p = wpe + prt_cp_pos(t, T, cp, r) * C;
            for (size_t c = 0; c < C; c++)
                row[c] += p[c];
        }
}

static void position_grad(float *dwpe, const prt_act *dx, size_t B, size_t Tl, size_t C, size_t T,
                          int cp, int r)
{
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < Tl; t++) {
            const float *g = dx + (b * Tl + t) * C;
            float *d = dwpe + prt_cp_pos(t, T, cp, r) * C;
            for (size_t c = 0; c < C; c++)
                d[c] += g[c];
        }
}

void prt_position_fwd(prt_act *x, const prt_act *wpe, size_t B, size_t T, size_t C)
{
    PRT_OP_ENTER("prt_position_fwd");
    position_add(x, wpe, B, T, C, T, 1, 0);
}

void prt_position_bwd(float *dwpe, const prt_act *dx, size_t B, size_t T, size_t C)
{
    PRT_OP_ENTER("prt_position_bwd");
    position_grad(dwpe, dx, B, T, C, T, 1, 0);
}

void prt_position_cp_fwd(prt_act *x, const prt_act *wpe, size_t B, size_t Tl, size_t C, size_t T,
                         int cp, int r)
{
    PRT_OP_ENTER("prt_position_cp_fwd");
    position_add(x, wpe, B, Tl, C, T, cp, r);
}

void prt_position_cp_bwd(float *dwpe, const prt_act *dx, size_t B, size_t Tl, size_t C, size_t T,
                         int cp, int r)
{
    PRT_OP_ENTER("prt_position_cp_bwd");
    position_grad(dwpe, dx, B, Tl, C, T, cp, r);
}

/* ---- RoPE ---------------------------------------------------------------- */

/* Rotate every (2i, 2i+1) pair of the query and key heads by +angle
 * (forward) or -angle (backward: the rotation is orthogonal, so its
 * transpose is its inverse) and scale it by YaRN's mscale (1 otherwise;
 * a scalar, its own transpose). Angles p * prt_rope_inv_freq(rope, i, D),
 * p the token's global position (prt_cp_pos of local row t of Tl, CP rank
 * r of cp, sequences of T); each angle's cos and sin are computed once,
 * in double, for all sequences and heads. */
static void rope_apply(float *qkv, size_t B, size_t Tl, size_t H, size_t Hkv,
                       size_t D, const prt_rope *rope, float sign, size_t T, int cp, int r)
{
    size_t half = D / 2, row = (H + 2 * Hkv) * D, heads = H + Hkv;
    double m = prt_rope_mscale(rope);
    for (size_t t = 0; t < Tl; t++)
        for (size_t i = 0; i < half; i++) {
            double pos = (double)prt_cp_pos(t, T, cp, r);
            double a = pos * prt_rope_inv_freq(rope, i, D);
            float co = (float)(m * cos(a)), si = sign * (float)(m * sin(a));
            for (size_t b = 0; b < B; b++) {
                float *x0p = qkv + (b * Tl + t) * row + 2 * i;
                for (size_t h = 0; h < heads; h++) {   /* q heads then k heads */
                    float *x = x0p + h * D, x0 = x[0], x1 = x[1];
                    x[0] = x0 * co - x1 * si;
                    x[1] = x0 * si + x1 * co;
                }
            }
        }
}

void prt_rope_fwd(prt_act *qkv, size_t B, size_t T, size_t H, size_t Hkv,
                  size_t D, const prt_rope *rope)
{
    PRT_OP_ENTER("prt_rope_fwd");
    rope_apply(qkv, B, T, H, Hkv, D, rope, 1.0f, T, 1, 0);
}

void prt_rope_bwd(prt_act *dqkv, size_t B, size_t T, size_t H, size_t Hkv,
                  size_t D, const prt_rope *rope)
{
    PRT_OP_ENTER("prt_rope_bwd");
    rope_apply(dqkv, B, T, H, Hkv, D, rope, -1.0f, T, 1, 0);
}

void prt_rope_cp_fwd(prt_act *qkv, size_t B, size_t Tl, size_t H, size_t Hkv, size_t D,
                     const prt_rope *rope, size_t T, int cp, int r)
{
    PRT_OP_ENTER("prt_rope_cp_fwd");
    rope_apply(qkv, B, Tl, H, Hkv, D, rope, 1.0f, T, cp, r);
}

void prt_rope_cp_bwd(prt_act *dqkv, size_t B, size_t Tl, size_t H, size_t Hkv, size_t D,
                     const prt_rope *rope, size_t T, int cp, int r)
{
    PRT_OP_ENTER("prt_rope_cp_bwd");
    rope_apply(dqkv, B, Tl, H, Hkv, D, rope, -1.0f, T, cp, r);
}

/* ---- norms --------------------------------------------------------------- */

/* LayerNorm (Ba et al. 2016); mean and rstd are kept so the backward
 * need not recompute the row statistics. */
void prt_layernorm_fwd(prt_act *out, float *mean, float *rstd, const prt_act *x,
                       const prt_act *w, const prt_act *b, size_t N, size_t C, float eps)
{
    PRT_OP_ENTER("prt_layernorm_fwd");
    for (size_t i = 0; i < N; i++) {
        const float *xi = x + i * C;
        float *o = out + i * C;
        float m = 0.0f, v = 0.0f;
        for (size_t c = 0; c < C; c++)
            m += xi[c];
        m /= (float)C;
        for (size_t c = 0; c < C; c++)
            v += (xi[c] - m) * (xi[c] - m);
        v /= (float)C;
        float s = 1.0f / sqrtf(v + eps);
        for (size_t c = 0; c < C; c++)
            o[c] = (xi[c] - m) * s * w[c] + (b ? b[c] : 0.0f);
        mean[i] = m;
        rstd[i] = s;
    }
}

/* dx += rstd (dn - mean(dn) - norm mean(dn norm)), dn = dout w: the
 * LayerNorm Jacobian folded into two row sums (llm.c layernorm_backward). */
void prt_layernorm_bwd(prt_act *dx, float *dw, float *db, const prt_act *dout,
                       const prt_act *x, const prt_act *w, const float *mean,
                       const float *rstd, size_t N, size_t C)
{
    PRT_OP_ENTER("prt_layernorm_bwd");
    for (size_t i = 0; i < N; i++) {
        const float *g = dout + i * C, *xi = x + i * C;
        float *d = dx + i * C, m = mean[i], s = rstd[i];
        float dmean = 0.0f, dnormmean = 0.0f;
        for (size_t c = 0; c < C; c++) {
            float norm = (xi[c] - m) * s, dnorm = g[c] * w[c];
            dmean += dnorm;
            dnormmean += dnorm * norm;
        }
        dmean /= (float)C;
        dnormmean /= (float)C;
        for (size_t c = 0; c < C; c++) {
            float norm = (xi[c] - m) * s, dnorm = g[c] * w[c];
            if (db)
                db[c] += g[c];
            dw[c] += norm * g[c];
            d[c] += (dnorm - dmean - norm * dnormmean) * s;
        }
    }
}

/* RMSNorm, Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * w. */
void prt_rmsnorm_fwd(prt_act *out, float *rstd, const prt_act *x, const prt_act *w,
                     size_t N, size_t C, float eps)
{
    PRT_OP_ENTER("prt_rmsnorm_fwd");
    for (size_t i = 0; i < N; i++) {
        const float *xi = x + i * C;
        float *o = out + i * C, ss = 0.0f;
        for (size_t c = 0; c < C; c++)
            ss += xi[c] * xi[c];
        float s = 1.0f / sqrtf(ss / (float)C + eps);
        for (size_t c = 0; c < C; c++)
            o[c] = xi[c] * s * w[c];
        rstd[i] = s;
    }
}

/* dx += rstd (dn - norm mean(dn norm)): LayerNorm's Jacobian without the
 * mean term. */
void prt_rmsnorm_bwd(prt_act *dx, float *dw, const prt_act *dout, const prt_act *x,
                     const prt_act *w, const float *rstd, size_t N, size_t C)
{
    PRT_OP_ENTER("prt_rmsnorm_bwd");
    for (size_t i = 0; i < N; i++) {
        const float *g = dout + i * C, *xi = x + i * C;
        float *d = dx + i * C, s = rstd[i], dot = 0.0f;
        for (size_t c = 0; c < C; c++)
            dot += g[c] * w[c] * xi[c] * s;
        dot /= (float)C;
        for (size_t c = 0; c < C; c++) {
            float norm = xi[c] * s;
            dw[c] += g[c] * norm;
            d[c] += s * (g[c] * w[c] - norm * dot);
        }
    }
}

/* ---- q/k norm ---------------------------------------------------------------- */

/* One head: y = x s (w0 + w) over D values, s = 1/sqrt(mean(x^2) + eps);
 * the gain w0 + w is formed in fp32 (w0 1: Gemma 3's 1 + w). */
static float qk_head_fwd(float *y, const float *x, const float *w, float w0, size_t D, float eps)
{
    float ss = 0.0f;
    for (size_t c = 0; c < D; c++) ss += x[c] * x[c];
    float s = 1.0f / sqrtf(ss / (float)D + eps);
    for (size_t c = 0; c < D; c++) y[c] = x[c] * s * (w0 + w[c]);
    return s;
}

/* One head's backward, in place: g holds dy and receives dx = s (dy a -
 * n mean(dy a n)), n = x s, a = w0 + w; dw += dy n (RMSNorm's Jacobian,
 * as prt_rmsnorm_bwd; d(w0 + w)/dw = 1). */
static void qk_head_bwd(float *g, float *dw, const float *x, const float *w, float w0, float s, size_t D)
{
    float dot = 0.0f;
    for (size_t c = 0; c < D; c++) dot += g[c] * (w0 + w[c]) * x[c] * s;
    dot /= (float)D;
    for (size_t c = 0; c < D; c++) {
        float n = x[c] * s;
        dw[c] += g[c] * n;
        g[c] = s * (g[c] * (w0 + w[c]) - n * dot);
    }
}

void prt_qk_norm_fwd(prt_act *qkv, prt_act *xin, float *rstd, const prt_act *wq, const prt_act *wk, float w0,
                     size_t N, size_t H, size_t Hkv, size_t D, float eps)
{
    PRT_OP_ENTER("prt_qk_norm_fwd");
    size_t heads = H + Hkv, row = (H + 2 * Hkv) * D;
    for (size_t i = 0; i < N; i++)
        for (size_t h = 0; h < heads; h++) {   /* q heads then k heads */
            float *y = qkv + i * row + h * D, *x = xin + (i * heads + h) * D;
            memcpy(x, y, D * sizeof *x);
            rstd[i * heads + h] = qk_head_fwd(y, x, h < H ? wq : wk, w0, D, eps);
        }
}

void prt_qk_norm_bwd(prt_act *dqkv, float *dwq, float *dwk, const prt_act *xin, const prt_act *wq,
                     const prt_act *wk, float w0, const float *rstd, size_t N, size_t H, size_t Hkv, size_t D)
{
    PRT_OP_ENTER("prt_qk_norm_bwd");
    size_t heads = H + Hkv, row = (H + 2 * Hkv) * D;
    for (size_t i = 0; i < N; i++)
        for (size_t h = 0; h < heads; h++)
            qk_head_bwd(dqkv + i * row + h * D, h < H ? dwq : dwk, xin + (i * heads + h) * D,
                        h < H ? wq : wk, w0, rstd[i * heads + h], D);
}

/* ---- q/k norm of the whole projection (OLMo-2) -------------------------------- */

/* Row i's q part (j = 0: H D values from the row's start) or k part (j =
 * 1: Hkv D values after the q part) in qkv, and the same in xin. */
static size_t qkp_len(size_t j, size_t H, size_t Hkv, size_t D) { return (j ? Hkv : H) * D; }

void prt_qk_proj_sumsq(float *ss, const prt_act *qkv, size_t N, size_t H, size_t Hkv, size_t D)
{
    PRT_OP_ENTER("prt_qk_proj_sumsq");
    size_t row = (H + 2 * Hkv) * D;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < 2; j++) {
            const float *x = qkv + i * row + j * H * D;
            float s = 0.0f;
            for (size_t c = 0; c < qkp_len(j, H, Hkv, D); c++) s += x[c] * x[c];
            ss[2 * i + j] = s;
        }
}

void prt_qk_proj_norm_fwd(prt_act *qkv, prt_act *xin, float *rstd, const float *ss, const prt_act *wq,
                          const prt_act *wk, size_t N, size_t H, size_t Hkv, size_t D, size_t Cq, size_t Ck,
                          float eps)
{
    PRT_OP_ENTER("prt_qk_proj_norm_fwd");
    size_t row = (H + 2 * Hkv) * D, xrow = (H + Hkv) * D;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < 2; j++) {
            size_t n = qkp_len(j, H, Hkv, D);
            float *y = qkv + i * row + j * H * D, *x = xin + i * xrow + j * H * D;
            const float *w = j ? wk : wq;
            float s = 1.0f / sqrtf(ss[2 * i + j] / (float)(j ? Ck : Cq) + eps);
            memcpy(x, y, n * sizeof *x);
            for (size_t c = 0; c < n; c++) y[c] = x[c] * s * w[c];
            rstd[2 * i + j] = s;   /* after ss's read: rstd may be ss */
        }
}

void prt_qk_proj_dot(float *dot, const prt_act *dqkv, const prt_act *xin, const prt_act *wq, const prt_act *wk,
                     const float *rstd, size_t N, size_t H, size_t Hkv, size_t D)
{
    PRT_OP_ENTER("prt_qk_proj_dot");
    size_t row = (H + 2 * Hkv) * D, xrow = (H + Hkv) * D;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < 2; j++) {
            const float *g = dqkv + i * row + j * H * D, *x = xin + i * xrow + j * H * D, *w = j ? wk : wq;
            float s = rstd[2 * i + j], t = 0.0f;
            for (size_t c = 0; c < qkp_len(j, H, Hkv, D); c++) t += g[c] * w[c] * x[c] * s;
            dot[2 * i + j] = t;
        }
}

void prt_qk_proj_norm_bwd(prt_act *dqkv, float *dwq, float *dwk, const prt_act *xin, const prt_act *wq,
                          const prt_act *wk, const float *rstd, const float *dot, size_t N, size_t H, size_t Hkv,
                          size_t D, size_t Cq, size_t Ck)
{
    PRT_OP_ENTER("prt_qk_proj_norm_bwd");
    size_t row = (H + 2 * Hkv) * D, xrow = (H + Hkv) * D;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < 2; j++) {
            float *g = dqkv + i * row + j * H * D, *dw = j ? dwk : dwq;
            const float *x = xin + i * xrow + j * H * D, *w = j ? wk : wq;
            float s = rstd[2 * i + j], m = dot[2 * i + j] / (float)(j ? Ck : Cq);
            for (size_t c = 0; c < qkp_len(j, H, Hkv, D); c++) {
                float n = x[c] * s;
                dw[c] += g[c] * n;
                g[c] = s * (g[c] * w[c] - n * m);
            }
        }
}

/* ---- activations ----------------------------------------------------------- */

#define GELU_K 0.7978845608028654f   /* sqrt(2/pi), Hendrycks & Gimpel 2016 */

/* exp(x) = 2^n 2^f with n = round(x log2 e), |f| <= 1/2, and 2^f = e^(f ln 2)
 * from its Taylor series to degree 6 (relative error < 2e-7). Branch-free
 * and without a libm call, it takes GeLU from 15 % to 9 % of the CPU
 * training step (bench-ops). Valid for |x| <= 87. */
static inline float exp_approx(float x)
{
    float y = x * 1.44269504088896341f;
    float n = (y + 12582912.0f) - 12582912.0f;   /* round to nearest: 1.5 * 2^23 */
    float l = 0.6931471805599453f * (y - n);
    float p = 1.0f + l * (1.0f + l * (0.5f + l * (1.0f / 6 + l * (1.0f / 24
              + l * (1.0f / 120 + l * (1.0f / 720))))));
    int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* tanh(u) = (e^2u - 1) / (e^2u + 1), clamped where tanh is +-1 in fp32. */
static inline float fast_tanh(float u)
{
    u = u < -15.0f ? -15.0f : (u > 15.0f ? 15.0f : u);
    float e = exp_approx(2.0f * u);
    return (e - 1.0f) / (e + 1.0f);
}

void prt_gelu_fwd(prt_act *out, const prt_act *x, size_t n)
{
    PRT_OP_ENTER("prt_gelu_fwd");
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float t = fast_tanh(GELU_K * (v + 0.044715f * v * v * v));
        out[i] = 0.5f * v * (1.0f + t);
    }
}

/* d/dx of 0.5 x (1 + tanh u), u = k (x + 0.044715 x^3). */
void prt_gelu_bwd(prt_act *dx, const prt_act *x, const prt_act *dout, size_t n)
{
    PRT_OP_ENTER("prt_gelu_bwd");
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float t = fast_tanh(GELU_K * (v + 0.044715f * v * v * v));
        float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
        dx[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
    }
}

void prt_relu_fwd(prt_act *out, const prt_act *x, size_t n)
{
    PRT_OP_ENTER("prt_relu_fwd");
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void prt_relu_bwd(prt_act *dx, const prt_act *x, const prt_act *dout, size_t n)
{
    PRT_OP_ENTER("prt_relu_bwd");
    for (size_t i = 0; i < n; i++)
        dx[i] = x[i] > 0.0f ? dout[i] : 0.0f;
}

void prt_swiglu_fwd(prt_act *out, const prt_act *gu, size_t N, size_t F)
{
    PRT_OP_ENTER("prt_swiglu_fwd");
    for (size_t i = 0; i < N; i++) {
        const float *g = gu + i * 2 * F, *u = g + F;
        float *o = out + i * F;
        for (size_t j = 0; j < F; j++)
            o[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
}

/* d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g). */
void prt_swiglu_bwd(prt_act *dgu, const prt_act *gu, const prt_act *dout, size_t N, size_t F)
{
    PRT_OP_ENTER("prt_swiglu_bwd");
    for (size_t i = 0; i < N; i++) {
        const float *g = gu + i * 2 * F, *u = g + F, *d = dout + i * F;
        float *dg = dgu + i * 2 * F, *du = dg + F;
        for (size_t j = 0; j < F; j++) {
            float s = 1.0f / (1.0f + expf(-g[j]));
            du[j] = d[j] * g[j] * s;
            dg[j] = d[j] * u[j] * s * (1.0f + g[j] * (1.0f - s));
        }
    }
}

/* GeGLU: gelu(g) * u with the tanh GELU of prt_gelu_fwd. */
void prt_geglu_fwd(prt_act *out, const prt_act *gu, size_t N, size_t F)
{
    PRT_OP_ENTER("prt_geglu_fwd");
    for (size_t i = 0; i < N; i++) {
        const float *g = gu + i * 2 * F, *u = g + F;
        float *o = out + i * F;
        for (size_t j = 0; j < F; j++) {
            float v = g[j], t = fast_tanh(GELU_K * (v + 0.044715f * v * v * v));
            o[j] = 0.5f * v * (1.0f + t) * u[j];
        }
    }
}

/* du = d gelu(g), dg = d u gelu'(g), gelu' as in prt_gelu_bwd. */
void prt_geglu_bwd(prt_act *dgu, const prt_act *gu, const prt_act *dout, size_t N, size_t F)
{
    PRT_OP_ENTER("prt_geglu_bwd");
    for (size_t i = 0; i < N; i++) {
        const float *g = gu + i * 2 * F, *u = g + F, *d = dout + i * F;
        float *dg = dgu + i * 2 * F, *du = dg + F;
        for (size_t j = 0; j < F; j++) {
            float v = g[j], t = fast_tanh(GELU_K * (v + 0.044715f * v * v * v));
            float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
            du[j] = d[j] * 0.5f * v * (1.0f + t);
            dg[j] = d[j] * u[j] * (0.5f * (1.0f + t) + 0.5f * v * dt);
        }
    }
}

void prt_residual_add(prt_act *out, const prt_act *a, const prt_act *b, size_t n)
{
    PRT_OP_ENTER("prt_residual_add");
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void prt_add_inplace(prt_act *dst, const prt_act *src, size_t n)
{
    PRT_OP_ENTER("prt_add_inplace");
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void prt_copy_blocks(prt_act *dst, size_t dn, size_t dj, const prt_act *src, size_t sn, size_t sj,
                     size_t n, size_t m, size_t len, float scale, bool acc)
{
    PRT_OP_ENTER("prt_copy_blocks");
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < len; c++) {
            if (dj == 0) {   /* the sum over j, in j order, stored once */
                float s = acc ? (float)dst[i * dn + c] : 0.0f;
                for (size_t j = 0; j < m; j++)
                    s += scale * (float)src[i * sn + j * sj + c];
                dst[i * dn + c] = s;
                continue;
            }
            for (size_t j = 0; j < m; j++) {
                prt_act *d = dst + i * dn + j * dj + c;
                *d = (acc ? (float)*d : 0.0f) + scale * (float)src[i * sn + j * sj + c];
            }
        }
}

void prt_affine(prt_act *out, const prt_act *x, float a, float b, size_t n)
{
    PRT_OP_ENTER("prt_affine");
    for (size_t i = 0; i < n; i++)
        out[i] = a * x[i] + b;
}

void prt_grad_add(float *dst, const float *src, size_t n)
{
    PRT_OP_ENTER("prt_grad_add");
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* ---- softmax cross-entropy ------------------------------------------------ */

/* Only the nv = prt_xent_real_cols(...) real columns of a row count: the
 * padding columns after them (global index >= V) are not in the softmax. */
void prt_xent_max(float *mx, const prt_act *logits, size_t N, size_t Vl, size_t v0, size_t V)
{
    PRT_OP_ENTER("prt_xent_max");
    size_t nv = prt_xent_real_cols(Vl, v0, V);
    for (size_t i = 0; i < N; i++) {
        const float *l = logits + i * Vl;
        float m = -INFINITY;   /* an all-padding slice: the MAX all-reduce ignores it */
        for (size_t j = 0; j < nv; j++)
            m = fmaxf(m, l[j]);
        mx[i] = m;
    }
}

/* Sums are taken against the global max so that TP ranks' partial sums
 * can simply be added (Megatron's vocab-parallel cross-entropy). */
void prt_xent_sumexp(float *se, float *tgt, const prt_act *logits, const float *mx,
                     const int32_t *targets, size_t N, size_t Vl, size_t v0, size_t V)
{
    PRT_OP_ENTER("prt_xent_sumexp");
    size_t nv = prt_xent_real_cols(Vl, v0, V);
    for (size_t i = 0; i < N; i++) {
        const float *l = logits + i * Vl;
        float s = 0.0f;
        for (size_t j = 0; j < nv; j++)
            s += expf(l[j] - mx[i]);
        se[i] = s;
        int64_t local = (int64_t)targets[i] - (int64_t)v0;
        tgt[i] = (targets[i] >= 0 && local >= 0 && (size_t)local < nv) ? l[local] : 0.0f;
    }
}

void prt_xent_loss(float *loss, const float *mx, const float *se, const float *tgt,
                   const int32_t *targets, size_t N)
{
    PRT_OP_ENTER("prt_xent_loss");
    for (size_t i = 0; i < N; i++)
        loss[i] = targets[i] < 0 ? 0.0f : logf(se[i]) + mx[i] - tgt[i];
}

/* Each element reads only its own logit before writing, so dlogits may
 * alias logits and the (N, V) buffer is reused, as llm.c does. Padding
 * columns get 0: their weight rows then stay exactly zero. With cap > 0
 * the logits read are the capped y and the gradient is taken through the
 * cap as well, times 1 - (y / cap)^2 (= 1 - tanh^2 of the raw logit). */
static void xent_bwd(prt_act *dlogits, const prt_act *logits, const float *mx, const float *se,
                     const int32_t *targets, size_t N, size_t Vl, size_t v0, size_t V, float scale,
                     float cap)
{
    size_t nv = prt_xent_real_cols(Vl, v0, V);
    for (size_t i = 0; i < N; i++) {
        const float *l = logits + i * Vl;
        float *d = dlogits + i * Vl;
        if (targets[i] < 0) {
            memset(d, 0, Vl * sizeof *d);
            continue;
        }
        float inv = 1.0f / se[i];
        int64_t local = (int64_t)targets[i] - (int64_t)v0;
        for (size_t j = 0; j < nv; j++) {
            float y = l[j], p = expf(y - mx[i]) * inv;
            float g = scale * (p - ((int64_t)j == local ? 1.0f : 0.0f));
            if (cap > 0.0f) {
                float t = y / cap;
                g *= 1.0f - t * t;
            }
            d[j] = g;
        }
        memset(d + nv, 0, (Vl - nv) * sizeof *d);
    }
}

void prt_xent_bwd(prt_act *dlogits, const prt_act *logits, const float *mx,
                  const float *se, const int32_t *targets, size_t N, size_t Vl,
                  size_t v0, size_t V, float scale)
{
    PRT_OP_ENTER("prt_xent_bwd");
    xent_bwd(dlogits, logits, mx, se, targets, N, Vl, v0, V, scale, 0.0f);
}

void prt_xent_softcap_bwd(prt_act *dlogits, const prt_act *logits, const float *mx,
                          const float *se, const int32_t *targets, size_t N, size_t Vl,
                          size_t v0, size_t V, float scale, float cap)
{
    PRT_OP_ENTER("prt_xent_softcap_bwd");
    xent_bwd(dlogits, logits, mx, se, targets, N, Vl, v0, V, scale, cap);
}

void prt_softcap_fwd(prt_act *x, size_t n, float cap)
{
    PRT_OP_ENTER("prt_softcap_fwd");
    for (size_t i = 0; i < n; i++)
        x[i] = prt_softcap(x[i], cap);
}
