/*
 * attention.c: causal multi-head and grouped-query attention of the CPU
 * build, one cblas_sgemm per head and product.
 *
 * For each sequence b and query head h (key/value head g = h / (H/Hkv)):
 *   S = Q K^T * scale          (T, T)   sgemm; scale 1/sqrt(D), or the
 *                                       caller's (prt_attn_scores)
 *   S = cap tanh(S / cap)               Gemma 2's soft-capping, when cap > 0
 *   P = causal softmax(S)      (T, T)   row loop, kept in att; under a
 *                                       sliding window W row t keeps
 *                                       columns [t - W + 1, t] only
 *   O = P V                    (T, D)   sgemm
 * Q, K, V are read in place from the fused qkv rows (leading dimension
 * (H+2Hkv)*D), O is written in place into (N, H*D), so nothing is permuted.
 * The backward (Vaswani et al. 2017; softmax Jacobian as in llm.c):
 *   dP = dO V^T, dS = P (dP - rowsum(P dP)) / sqrt(D),
 *   dQ = dS K, dK += dS^T Q, dV += P^T dO
 * where dK, dV accumulate over the G query heads that share them. With a
 * cap, dS is further multiplied by 1 - tanh^2(S_raw / cap), the derivative
 * of cap tanh(x / cap); S_raw is recomputed (one more Q K^T GEMM) into att
 * once P has served dV and the softmax Jacobian, so nothing more is kept
 * (att leaves the backward holding S_raw, not P). Under
 * selective recomputation the backward first rebuilds P from qkv. With
 * dropout on P (prt_attention_probs_fwd, prt_dropout_probs_fwd,
 * prt_attention_context_fwd) O = P' V, and the backward takes dV from P'
 * and passes dP' through the mask before the softmax Jacobian.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include "ops_err.h"

/* S_raw = scale Q K^T of one (b, h) into S (T, T): the scores before the
 * cap and the mask. */
static void scores(float *S, const float *Q, const float *K, size_t ld, size_t T, size_t D,
                   prt_attn_scores sc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)D,
                sc.scale, Q, (int)ld, K, (int)ld, 0.0f, S, (int)T);
}

/* Scores and causal softmax of one (b, h) into S (T, T); row t keeps
 * columns [prt_window_first(t, W), t], the rest are exact zeros. */
static void scores_softmax(float *S, const float *Q, const float *K, size_t ld,
                           size_t T, size_t D, size_t W, prt_attn_scores sc)
{
    scores(S, Q, K, ld, T, D, sc);
    for (size_t t = 0; t < T; t++) {
        float *r = S + t * T, m = -INFINITY, sum = 0.0f;
        size_t j0 = prt_window_first(t, W);
        if (sc.cap > 0.0f)
            for (size_t j = j0; j <= t; j++)
                r[j] = prt_softcap(r[j], sc.cap);
        for (size_t j = j0; j <= t; j++)
            m = fmaxf(m, r[j]);
        for (size_t j = j0; j <= t; j++) {
            r[j] = expf(r[j] - m);
            sum += r[j];
        }
        float inv = 1.0f / sum;
        for (size_t j = j0; j <= t; j++)
            r[j] *= inv;
        for (size_t j = 0; j < j0; j++)
            r[j] = 0.0f;
        for (size_t j = t + 1; j < T; j++)
            r[j] = 0.0f;
    }
}

/* dS *= 1 - tanh^2(S_raw / cap) on the band of row t (the masked zeros
 * stay zeros): the soft-cap's derivative, S_raw recomputed into Sr. */
static void softcap_scores_bwd(float *dS, const float *Sr, size_t T, size_t W, float cap)
{
    for (size_t t = 0; t < T; t++)
        for (size_t j = prt_window_first(t, W); j <= t; j++)
            dS[t * T + j] *= prt_softcap_grad(Sr[t * T + j], cap);
}

prt_attn_scores prt_attn_default(size_t D)
{
    return (prt_attn_scores){ 1.0f / sqrtf((float)D), 0.0f };
}

static void attention_fwd(prt_act *out, prt_act *att, const prt_act *qkv, size_t B, size_t T,
                          size_t H, size_t Hkv, size_t D, size_t W, prt_attn_scores sc)
{
    size_t R = (H + 2 * Hkv) * D, G = H / Hkv, HD = H * D;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++) {
            const float *base = qkv + b * T * R;
            const float *Q = base + h * D, *K = base + (H + h / G) * D;
            const float *V = base + (H + Hkv + h / G) * D;
            float *S = att + (b * H + h) * T * T;
            scores_softmax(S, Q, K, R, T, D, W, sc);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T,
                        1.0f, S, (int)T, V, (int)R, 0.0f, out + b * T * HD + h * D, (int)HD);
        }
}

void prt_attention_fwd(prt_act *out, prt_act *att, const prt_act *qkv,
                       size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t W)
{
    PRT_OP_ENTER("prt_attention_fwd");
    attention_fwd(out, att, qkv, B, T, H, Hkv, D, W, prt_attn_default(D));
}

void prt_attention_scores_fwd(prt_act *out, prt_act *att, const prt_act *qkv, size_t B, size_t T,
                              size_t H, size_t Hkv, size_t D, size_t W, prt_attn_scores sc)
{
    PRT_OP_ENTER("prt_attention_scores_fwd");
    attention_fwd(out, att, qkv, B, T, H, Hkv, D, W, sc);
}

/* dS = P (dP - rowsum(P dP)) * scale, in place over dP; the masked zeros
 * (outside [prt_window_first(t, W), t]) stay. */
static void softmax_bwd(float *dP, const float *P, size_t T, float scale, size_t W)
{
    for (size_t t = 0; t < T; t++) {
        float *d = dP + t * T, dot = 0.0f;
        const float *p = P + t * T;
        size_t j0 = prt_window_first(t, W);
        for (size_t j = j0; j <= t; j++)
            dot += p[j] * d[j];
        for (size_t j = j0; j <= t; j++)
            d[j] = p[j] * (d[j] - dot) * scale;
        for (size_t j = 0; j < j0; j++)
            d[j] = 0.0f;
        for (size_t j = t + 1; j < T; j++)
            d[j] = 0.0f;
    }
}

/* The backward of one call, with dropout on the probabilities when mask
 * is not NULL: dP' = dO V^T, dP = dP' * mask / (1 - p), dS from P, dV from
 * P' (attd); without it P' is P. */
static void attention_bwd(float *dqkv, float *datt, const float *dout, const float *qkv,
                          float *att, bool recompute, const float *attd, const uint8_t *mask,
                          float p, size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t W,
                          prt_attn_scores sc)
{
    size_t R = (H + 2 * Hkv) * D, G = H / Hkv, HD = H * D;
    memset(dqkv, 0, B * T * R * sizeof *dqkv);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++) {
            size_t g = h / G, o = (b * H + h) * T * T;
            const float *base = qkv + b * T * R;
            const float *Q = base + h * D, *K = base + (H + g) * D;
            const float *V = base + (H + Hkv + g) * D;
            const float *dO = dout + b * T * HD + h * D;
            float *dbase = dqkv + b * T * R;
            float *dQ = dbase + h * D, *dK = dbase + (H + g) * D;
            float *dV = dbase + (H + Hkv + g) * D;
            float *P = att + o, *dP = datt + o;
            const float *Pd = mask ? attd + o : P;
            if (recompute)
                scores_softmax(P, Q, K, R, T, D, W, sc);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)D,
                        1.0f, dO, (int)HD, V, (int)R, 0.0f, dP, (int)T);
            if (mask)
                prt_dropout_bwd(dP, dP, mask + o, p, T * T);
            softmax_bwd(dP, P, T, sc.scale, W);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)D, (int)T,
                        1.0f, Pd, (int)T, dO, (int)HD, 1.0f, dV, (int)R);
            if (sc.cap > 0.0f) {   /* P is spent: S_raw into its place, then the cap's derivative */
                scores(P, Q, K, R, T, D, sc);
                softcap_scores_bwd(dP, P, T, W, sc.cap);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T,
                        1.0f, dP, (int)T, K, (int)R, 0.0f, dQ, (int)R);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)D, (int)T,
                        1.0f, dP, (int)T, Q, (int)R, 1.0f, dK, (int)R);
        }
}

void prt_attention_bwd(prt_act *dqkv, prt_act *datt, const prt_act *dout,
                       const prt_act *qkv, prt_act *att, bool recompute,
                       size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t W)
{
    PRT_OP_ENTER("prt_attention_bwd");
    attention_bwd(dqkv, datt, dout, qkv, att, recompute, NULL, NULL, 0.0f, B, T, H, Hkv, D, W,
                  prt_attn_default(D));
}

void prt_attention_scores_bwd(prt_act *dqkv, prt_act *datt, const prt_act *dout, const prt_act *qkv,
                              prt_act *att, bool recompute, size_t B, size_t T, size_t H, size_t Hkv,
                              size_t D, size_t W, prt_attn_scores sc)
{
    PRT_OP_ENTER("prt_attention_scores_bwd");
    attention_bwd(dqkv, datt, dout, qkv, att, recompute, NULL, NULL, 0.0f, B, T, H, Hkv, D, W, sc);
}

void prt_attention_probs_fwd(prt_act *att, const prt_act *qkv, size_t B, size_t T, size_t H,
                             size_t Hkv, size_t D, size_t W)
{
    PRT_OP_ENTER("prt_attention_probs_fwd");
    size_t R = (H + 2 * Hkv) * D, G = H / Hkv;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++) {
            const float *base = qkv + b * T * R;
            scores_softmax(att + (b * H + h) * T * T, base + h * D, base + (H + h / G) * D, R, T, D, W,
                           prt_attn_default(D));
        }
}

void prt_attention_context_fwd(prt_act *out, const prt_act *attd, const prt_act *qkv, size_t B,
                               size_t T, size_t H, size_t Hkv, size_t D)
{
    PRT_OP_ENTER("prt_attention_context_fwd");
    size_t R = (H + 2 * Hkv) * D, G = H / Hkv, HD = H * D;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T,
                        1.0f, attd + (b * H + h) * T * T, (int)T, qkv + b * T * R + (H + Hkv + h / G) * D,
                        (int)R, 0.0f, out + b * T * HD + h * D, (int)HD);
}

void prt_attention_dropout_bwd(prt_act *dqkv, prt_act *datt, const prt_act *dout, const prt_act *qkv,
                               const prt_act *att, const prt_act *attd, const uint8_t *mask, float p,
                               size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t W)
{
    PRT_OP_ENTER("prt_attention_dropout_bwd");
    attention_bwd(dqkv, datt, dout, qkv, (float *)att, false, attd, mask, p, B, T, H, Hkv, D, W,
                  prt_attn_default(D));
}
