/*
 * moe.c: the mixture-of-experts pieces of the CPU build (issue 17): the
 * router, top-k and its gate (the softmax over the selected logits of
 * Mixtral, Jiang et al. 2024; the full softmax's top-k of Qwen2-MoE; the
 * sigmoid scores of DeepSeek-V3, normalised or not), the routing plan with per-sequence capacity (GShard,
 * Lepikhin et al. 2020), dispatch (tokens -> expert-sorted rows), combine
 * (rows -> tokens, weighted), the load-balancing loss (Switch Transformer,
 * Fedus et al. 2021, eq. 4) and every backward.
 *
 * The experts themselves are plain MLPs run by the caller with
 * prt_linear_* on each expert's block of rows (the grouped GEMM as a loop),
 * and the all-to-all between EP ranks is prt_all_to_all_v: this file moves
 * rows only inside one rank. What it must keep is determinism: top-k ties
 * go to the lower expert index, rows of an expert are in (token, k) order,
 * and every sum over a token's k rows runs in k order, so a token's result
 * does not depend on where its experts live (the layout-invariance rule).
 *
 * The agreed semantics (h-moeplan predicts them, DESIGN.md issue 17):
 * capacity is per expert per *sequence*, C = ceil(X * T * k / E); tokens
 * beyond it, in token order, are dropped for that expert (they pass through
 * the residual only). f_e in the aux loss counts the top-k assignments
 * before the capacity drop, as Switch's dispatch mask before its capacity.
 */
#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include "ops_err.h"

/* logits (N, E) fp32 = x (N, C) Wr^T, Wr (E, C), no bias. */
void prt_moe_router_fwd(float *logits, const prt_act *x, const prt_act *wr,
                        size_t N, size_t C, size_t E)
{
    PRT_OP_ENTER("prt_moe_router_fwd");
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)E, (int)C,
                1.0f, x, (int)C, wr, (int)C, 0.0f, logits, (int)E);
}

/* dx (N, C) += dlogits Wr; dWr (E, C) += dlogits^T x. */
void prt_moe_router_bwd(prt_act *dx, float *dwr, const float *dlogits, const prt_act *x,
                        const prt_act *wr, size_t N, size_t C, size_t E)
{
    PRT_OP_ENTER("prt_moe_router_bwd");
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, (int)C, (int)E,
                    1.0f, dlogits, (int)E, wr, (int)C, 1.0f, dx, (int)C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)E, (int)C, (int)N,
                1.0f, dlogits, (int)E, x, (int)C, 1.0f, dwr, (int)C);
}

/* Is logit a (expert ia) ranked before b (expert ib)? Larger first, ties to
 * the lower index: the one order both builds select by. */
static int ranks_before(float a, size_t ia, float b, size_t ib)
{
    return a > b || (a == b && ia < ib);
}

/* The router's score of one logit under gate (PRT_MOE_SIGMOID or softmax's
 * unnormalised exp(l - mx)); both rise with the logit, so the top-k by
 * logit is the top-k by score. */
static float gate_score(float l, float mx, int gate)
{
    return (gate & PRT_MOE_SIGMOID) ? 1.0f / (1.0f + expf(-l)) : expf(l - mx);
}

/* The largest of one token's E logits. */
static float row_max(const float *l, size_t E)
{
    float mx = l[0];
    for (size_t e = 1; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    return mx;
}

/* Grouped routing (DeepSeek-V3's n_group / topk_group, Megatron-Core's
 * group-limited top-k): the E experts in G groups of E/G; each group's
 * score is the sum of its k/Kg largest choice scores v (at least one), or
 * under PRT_MOE_GROUP_MAX its largest (DeepSeek-V2's group_limited_greedy);
 * ok[e] marks the experts of the Kg best groups (ties to the lower group). */
static void allowed_groups(unsigned char *ok, const float *v, size_t E, size_t k, size_t G, size_t Kg,
                           int gate)
{
    size_t per = E / G, m = (gate & PRT_MOE_GROUP_MAX) ? 1 : k / Kg ? k / Kg : 1;
    float gs[G];
    unsigned char chosen[G];
    for (size_t g = 0; g < G; g++) {
        float top[m];   /* the group's m largest scores, descending: summed in that order */
        size_t n = 0;
        for (size_t e = g * per; e < (g + 1) * per; e++) {
            size_t at = n < m ? n++ : m;
            while (at > 0 && top[at - 1] < v[e]) {
                if (at < m) top[at] = top[at - 1];
                at--;
            }
            if (at < m) top[at] = v[e];
        }
        gs[g] = 0.0f;
        for (size_t i = 0; i < n; i++)
            gs[g] += top[i];
        chosen[g] = 0;
    }
    for (size_t j = 0; j < Kg; j++) {
        size_t best = G;
        for (size_t g = 0; g < G; g++)
            if (!chosen[g] && (best == G || ranks_before(gs[g], g, gs[best], best)))
                best = g;
        chosen[best] = 1;
    }
    for (size_t e = 0; e < E; e++)
        ok[e] = chosen[e / per];
}

/* The k largest logits of one token among the experts ok marks (NULL:
 * all), ties to the lower index, into id. */
static void select_topk(int32_t *id, const float *l, const unsigned char *ok, size_t E, size_t k)
{
    /* k passes of selection: k is small (1-8), E at most a few hundred */
    for (size_t j = 0; j < k; j++) {
        size_t best = E;
        for (size_t e = 0; e < E; e++) {
            int taken = ok && !ok[e];
            for (size_t i = 0; i < j && !taken; i++)
                taken = (size_t)id[i] == e;
            if (!taken && (best == E || ranks_before(l[e], e, l[best], best)))
                best = e;
        }
        id[j] = (int32_t)best;
    }
}

/* The denominator of one token's weights: the selected scores' sum under
 * PRT_MOE_NORM (Mixtral, Qwen3-MoE, DeepSeek-V3), else softmax's sum over
 * all E (Qwen2-MoE: the full softmax's top-k probabilities) or 1 for
 * sigmoid (each score on its own). mx is the largest logit. */
static float gate_denominator(const float *l, const int32_t *id, size_t E, size_t k, float mx,
                              int gate)
{
    float s = 0.0f;
    if (gate & PRT_MOE_NORM) {
        for (size_t j = 0; j < k; j++)
            s += gate_score(l[id[j]], mx, gate);
    } else if (gate & PRT_MOE_SIGMOID) {
        s = 1.0f;
    } else {
        for (size_t e = 0; e < E; e++)
            s += gate_score(l[e], mx, gate);
    }
    return s;
}

/* One token's choice scores v (E): the gate's score plus the expert's
 * bias (aux-loss-free balancing, DeepSeek-V3's e_score_correction_bias;
 * NULL: none). They pick the experts and rank the groups; the weights are
 * the unbiased scores'. */
static void choice_scores(float *v, const float *l, const float *bias, size_t E, float mx, int gate)
{
    for (size_t e = 0; e < E; e++)
        v[e] = gate_score(l[e], mx, gate) + (bias ? bias[e] : 0.0f);
}

void prt_moe_topk_fwd(int32_t *idx, float *w, const float *logits, size_t N, size_t E,
                      size_t k, int gate, size_t groups, size_t top_groups, const float *bias,
                      float scale)
{
    PRT_OP_ENTER("prt_moe_topk_fwd");
    bool grouped = groups > 1 && top_groups < groups, scored = grouped || bias;
    unsigned char ok[grouped ? E : 1];
    float v[scored ? E : 1];
    for (size_t t = 0; t < N; t++) {
        const float *l = logits + t * E;
        int32_t *id = idx + t * k;
        float mx = row_max(l, E);
        if (scored)
            choice_scores(v, l, bias, E, mx, gate);
        if (grouped)
            allowed_groups(ok, v, E, k, groups, top_groups, gate);
        /* without a bias the logits order as the scores do (and tie as they do) */
        select_topk(id, bias ? v : l, grouped ? ok : NULL, E, k);
        float s = gate_denominator(l, id, E, k, mx, gate);
        for (size_t j = 0; j < k; j++)
            w[t * k + j] = gate_score(l[id[j]], mx, gate) / s * scale;
    }
}

/* dlogits (N, E) overwritten with the gate's backward, dot = sum_j w_j dw_j
 * (w here the unscaled weights w / scale, dw the gradient times scale):
 *   softmax, norm:    dl_e = w_j (dw_j - dot) on the selected, 0 elsewhere
 *   softmax, no norm: dl_e = p_e (g_e - dot) on all E (p the full softmax,
 *                     g_e = dw_j where e = idx_j, else 0)
 *   sigmoid, norm:    dl_e = s_e (1 - s_e) (dw_j - dot) / sum_sel s
 *   sigmoid, no norm: dl_e = s_e (1 - s_e) dw_j. */
void prt_moe_topk_bwd(float *dlogits, const float *dw, const float *w, const int32_t *idx,
                      const float *logits, size_t N, size_t E, size_t k, int gate, float scale)
{
    PRT_OP_ENTER("prt_moe_topk_bwd");
    memset(dlogits, 0, N * E * sizeof *dlogits);
    float wt[k ? k : 1], dwt[k ? k : 1];
    for (size_t t = 0; t < N; t++) {
        const float *l = logits + t * E;
        const int32_t *id = idx + t * k;
        float *dl = dlogits + t * E;
        for (size_t j = 0; j < k; j++) {   /* routed_scale: w = scale u, so dL/du = scale dw */
            wt[j] = w[t * k + j] / scale;
            dwt[j] = dw[t * k + j] * scale;
        }
        float dot = 0.0f;
        for (size_t j = 0; j < k; j++)
            dot += wt[j] * dwt[j];
        if (gate & PRT_MOE_SIGMOID) {
            float mx = row_max(l, E), s = gate_denominator(l, id, E, k, mx, gate);
            for (size_t j = 0; j < k; j++) {
                float sj = gate_score(l[id[j]], mx, gate);
                float g = (gate & PRT_MOE_NORM) ? (dwt[j] - dot) / s : dwt[j];
                dl[id[j]] = sj * (1.0f - sj) * g;
            }
        } else if (gate & PRT_MOE_NORM) {
            for (size_t j = 0; j < k; j++)
                dl[id[j]] = wt[j] * (dwt[j] - dot);
        } else {
            float mx = row_max(l, E), s = gate_denominator(l, id, E, k, mx, gate);
            for (size_t e = 0; e < E; e++)
                dl[e] = -gate_score(l[e], mx, gate) / s * dot;
            for (size_t j = 0; j < k; j++)
                dl[id[j]] += wt[j] * dwt[j];   /* p_e g_e: w_j is p of the selected */
        }
    }
}

/* One pass in token order counts each expert's kept rows (capacity per
 * sequence: seq[] restarts at each sequence) and gives each kept row its
 * rank within the expert; a second pass adds the expert's first row. */
void prt_moe_route(int32_t *row, int32_t *counts, const int32_t *idx, size_t B, size_t T,
                   size_t E, size_t k, size_t cap)
{
    PRT_OP_ENTER("prt_moe_route");
    const size_t N = B * T;
    int32_t seq[E ? E : 1], first[E ? E : 1];
    memset(counts, 0, E * sizeof *counts);
    for (size_t b = 0; b < B; b++) {
        memset(seq, 0, sizeof seq);
        for (size_t i = b * T * k; i < (b + 1) * T * k; i++) {
            size_t e = (size_t)idx[i];
            row[i] = -1;
            if (!cap || (size_t)seq[e] < cap) {
                seq[e]++;
                row[i] = counts[e]++;
            }
        }
    }
    for (size_t e = 0, off = 0; e < E; off += (size_t)counts[e], e++)
        first[e] = (int32_t)off;
    for (size_t i = 0; i < N * k; i++)
        if (row[i] >= 0)
            row[i] += first[idx[i]];
}

void prt_moe_dispatch(prt_act *xe, const prt_act *x, const int32_t *row, size_t N,
                      size_t C, size_t k)
{
    PRT_OP_ENTER("prt_moe_dispatch");
    for (size_t t = 0; t < N; t++)
        for (size_t j = 0; j < k; j++)
            if (row[t * k + j] >= 0)
                memcpy(xe + (size_t)row[t * k + j] * C, x + t * C, C * sizeof *xe);
}

void prt_moe_dispatch_bwd(prt_act *dx, const prt_act *dxe, const int32_t *row, size_t N,
                          size_t C, size_t k)
{
    PRT_OP_ENTER("prt_moe_dispatch_bwd");
    for (size_t t = 0; t < N; t++) {
        prt_act *d = dx + t * C;
        memset(d, 0, C * sizeof *d);
        for (size_t j = 0; j < k; j++)   /* k order: the fixed summation order */
            if (row[t * k + j] >= 0) {
                const prt_act *s = dxe + (size_t)row[t * k + j] * C;
                for (size_t c = 0; c < C; c++)
                    d[c] += s[c];
            }
    }
}

void prt_moe_combine(prt_act *out, const prt_act *ye, const int32_t *row, const float *w,
                     size_t N, size_t C, size_t k)
{
    PRT_OP_ENTER("prt_moe_combine");
    for (size_t t = 0; t < N; t++) {
        prt_act *o = out + t * C;
        memset(o, 0, C * sizeof *o);
        for (size_t j = 0; j < k; j++)
            if (row[t * k + j] >= 0) {
                const prt_act *y = ye + (size_t)row[t * k + j] * C;
                float wj = w[t * k + j];
                for (size_t c = 0; c < C; c++)
                    o[c] += wj * y[c];
            }
    }
}

void prt_moe_combine_bwd(prt_act *dye, float *dw, const prt_act *dout, const prt_act *ye,
                         const int32_t *row, const float *w, size_t N, size_t C, size_t k)
{
    PRT_OP_ENTER("prt_moe_combine_bwd");
    for (size_t t = 0; t < N; t++) {
        const prt_act *d = dout + t * C;
        for (size_t j = 0; j < k; j++) {
            int32_t r = row[t * k + j];
            dw[t * k + j] = 0.0f;
            if (r < 0)
                continue;   /* dropped: no row, no weight gradient */
            const prt_act *y = ye + (size_t)r * C;
            prt_act *dy = dye + (size_t)r * C;
            float wj = w[t * k + j], dot = 0.0f;
            for (size_t c = 0; c < C; c++) {
                dy[c] = wj * d[c];
                dot += d[c] * y[c];
            }
            dw[t * k + j] = dot;
        }
    }
}

/* The aux loss's distribution over E of one token into p (E): the full
 * softmax, or under PRT_MOE_SIGMOID the sigmoids normalised to sum 1
 * (Megatron-Core's scores for the aux loss with score sigmoid). dp[e]
 * (optional) gets the factor of d/dl_e: the gradient through p of a sum
 * sum_e g_e p_e is dp_e (g_e - sum_i g_i p_i), dp_e = p_e (softmax) or
 * s_e (1 - s_e) / sum s (sigmoid). */
static void score_row(float *p, float *dp, const float *l, size_t E, int gate)
{
    float mx = l[0], s = 0.0f;
    for (size_t e = 1; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    for (size_t e = 0; e < E; e++)
        s += p[e] = gate_score(l[e], mx, gate);
    for (size_t e = 0; e < E; e++) {
        if (dp)
            dp[e] = (gate & PRT_MOE_SIGMOID) ? p[e] * (1.0f - p[e]) / s : p[e] / s;
        p[e] /= s;
    }
}

/* f (E): the fraction of sequence b's T*k top-k assignments going to e. */
static void seq_fractions(float *f, const int32_t *idx, size_t b, size_t T, size_t E,
                          size_t k)
{
    memset(f, 0, E * sizeof *f);
    for (size_t i = b * T * k; i < (b + 1) * T * k; i++)
        f[idx[i]] += 1.0f;
    for (size_t e = 0; e < E; e++)
        f[e] /= (float)(T * k);
}

void prt_moe_aux_loss(float *loss, const float *logits, const int32_t *idx, size_t B,
                      size_t T, size_t E, size_t k, float coeff, int gate)
{
    PRT_OP_ENTER("prt_moe_aux_loss");
    float f[E], P[E], p[E];
    for (size_t b = 0; b < B; b++) {
        seq_fractions(f, idx, b, T, E, k);
        memset(P, 0, sizeof P);
        for (size_t t = b * T; t < (b + 1) * T; t++) {
            score_row(p, NULL, logits + t * E, E, gate);
            for (size_t e = 0; e < E; e++)
                P[e] += p[e] / (float)T;
        }
        float s = 0.0f;
        for (size_t e = 0; e < E; e++)
            s += f[e] * P[e];
        loss[b] = coeff * (float)E * s;
    }
}

/* d(loss_b)/d l_{t,i} = coeff E / T * dp_i (f_i - sum_e f_e p_e) (score_row's
 * dp: p_i under softmax); f is a count, so it has no gradient (Switch).
 * Accumulates scale times that. */
void prt_moe_aux_bwd(float *dlogits, const float *logits, const int32_t *idx, size_t B,
                     size_t T, size_t E, size_t k, float coeff, float scale, int gate)
{
    PRT_OP_ENTER("prt_moe_aux_bwd");
    float f[E], p[E], dp[E];
    const float g = scale * coeff * (float)E / (float)T;
    for (size_t b = 0; b < B; b++) {
        seq_fractions(f, idx, b, T, E, k);
        for (size_t t = b * T; t < (b + 1) * T; t++) {
            score_row(p, dp, logits + t * E, E, gate);
            float fp = 0.0f;
            for (size_t e = 0; e < E; e++)
                fp += f[e] * p[e];
            for (size_t e = 0; e < E; e++)
                dlogits[t * E + e] += g * dp[e] * (f[e] - fp);
        }
    }
}

void prt_moe_shared_gate_fwd(float *g, prt_act *out, const prt_act *ys, const float *z, size_t N,
                             size_t C)
{
    PRT_OP_ENTER("prt_moe_shared_gate_fwd");
    for (size_t t = 0; t < N; t++) {
        g[t] = 1.0f / (1.0f + expf(-z[t]));
        for (size_t c = 0; c < C; c++)
            out[t * C + c] += g[t] * ys[t * C + c];
    }
}

void prt_moe_shared_gate_bwd(float *dz, prt_act *dys, const prt_act *dy, const prt_act *ys,
                             const float *g, size_t N, size_t C)
{
    PRT_OP_ENTER("prt_moe_shared_gate_bwd");
    for (size_t t = 0; t < N; t++) {
        float dot = 0.0f;
        for (size_t c = 0; c < C; c++) {
            dys[t * C + c] = g[t] * dy[t * C + c];
            dot += dy[t * C + c] * ys[t * C + c];
        }
        dz[t] = g[t] * (1.0f - g[t]) * dot;
    }
}

void prt_moe_sort_rows(prt_act *out, const prt_act *in, const int32_t *perm, size_t R,
                       size_t C)
{
    PRT_OP_ENTER("prt_moe_sort_rows");
    for (size_t i = 0; i < R; i++)
        memcpy(out + i * C, in + (size_t)perm[i] * C, C * sizeof *out);
}

void prt_moe_unsort_rows(prt_act *out, const prt_act *in, const int32_t *perm, size_t R,
                         size_t C)
{
    PRT_OP_ENTER("prt_moe_unsort_rows");
    for (size_t i = 0; i < R; i++)
        memcpy(out + (size_t)perm[i] * C, in + i * C, C * sizeof *out);
}

/* Aux-loss-free balancing (Wang et al. 2024, arXiv 2408.15664; DeepSeek-V3
 * sec. 2.1.2): acc (E, fp32) += counts (E, int32), a micro-batch's rows per
 * expert, summed over the step before the update reads them. */
void prt_moe_count_add(float *acc, const int32_t *counts, size_t E)
{
    PRT_OP_ENTER("prt_moe_count_add");
    for (size_t e = 0; e < E; e++)
        acc[e] += (float)counts[e];
}

/* bias_e += rate * sign(mean(c) - c_e) on the step's global counts c (E),
 * Megatron-Core's moe_utils.py get_updated_expert_bias: an expert below the
 * mean load gains, one above loses, one at it stays; c is then zeroed for
 * the next step. */
void prt_moe_bias_update(float *bias, float *counts, size_t E, float rate)
{
    PRT_OP_ENTER("prt_moe_bias_update");
    double sum = 0.0;   /* counts are whole numbers < 2^24: the sum is exact */
    for (size_t e = 0; e < E; e++)
        sum += counts[e];
    double mean = sum / (double)E;
    for (size_t e = 0; e < E; e++) {
        double off = mean - (double)counts[e];
        bias[e] += off > 0 ? rate : off < 0 ? -rate : 0.0f;
        counts[e] = 0.0f;
    }
}
