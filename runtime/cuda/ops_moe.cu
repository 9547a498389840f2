/*
 * ops_moe.cu: the mixture-of-experts pieces of the CUDA build (issue 17):
 * router, top-k, routing with per-sequence capacity, dispatch, combine,
 * the Switch load-balancing loss and their backwards.
 *
 * The same functions, layouts and rules as runtime/ops/moe.c (prt_ops.h's
 * MoE section), which is the reference test_ops_cuda checks them against
 * on a GPU. Determinism is the point, so nothing here uses atomics: every
 * sum has one thread (or one warp, in a fixed shuffle order) and runs in
 * the CPU's order where the order matters for the result's layout
 * invariance (a token's k rows in k order). Top-k ties go to the lower
 * expert index exactly as on the CPU, so both builds route alike. The
 * router's GEMMs are plain loops (E is small: 8-256), one thread per
 * output, with fp32 sums of bf16 inputs.
 */
#include "ops_kernels.cuh"

/* The most experts the per-thread arrays of the aux loss hold
 * (DeepSeek-V3 routes over 256). */
enum { MOE_MAX_E = 256 };

/* ---- router -------------------------------------------------------------- */

__global__ static void k_router_fwd(float *logits, const bf *x, const bf *wr, size_t N, size_t C,
                                    size_t E)
{
    size_t idx = gtid();
    if (idx >= N * E) return;
    size_t t = idx / E, e = idx % E;
    float s = 0.0f;
    for (size_t c = 0; c < C; c++) s += ld(x, t * C + c) * ld(wr, e * C + c);
    logits[idx] = s;
}

__global__ static void k_router_bwd_input(bf *dx, const float *dl, const bf *wr, size_t N, size_t C,
                                          size_t E)
{
    size_t idx = gtid();
    if (idx >= N * C) return;
    size_t t = idx / C, c = idx % C;
    float s = ld(dx, idx);
    for (size_t e = 0; e < E; e++) s += dl[t * E + e] * ld(wr, e * C + c);
    dx[idx] = to_bf(s);
}

__global__ static void k_router_bwd_weight(float *dwr, const float *dl, const bf *x, size_t N, size_t C,
                                           size_t E)
{
    size_t idx = gtid();
    if (idx >= E * C) return;
    size_t e = idx / C, c = idx % C;
    float s = 0.0f;
    for (size_t t = 0; t < N; t++) s += dl[t * E + e] * ld(x, t * C + c);
    dwr[idx] += s;
}

extern "C" void prt_moe_router_fwd(float *logits, const prt_act *x, const prt_act *wr, size_t N,
                                   size_t C, size_t E)
{
    PRT_OP_ENTER("prt_moe_router_fwd");
    PRT_LAUNCH("prt_moe_router_fwd", grid_for(N * E), 0, k_router_fwd, logits, CBF(x), CBF(wr), N, C, E);
}

extern "C" void prt_moe_router_bwd(prt_act *dx, float *dwr, const float *dlogits, const prt_act *x,
                                   const prt_act *wr, size_t N, size_t C, size_t E)
{
    PRT_OP_ENTER("prt_moe_router_bwd");
    if (dx) PRT_LAUNCH("prt_moe_router_bwd", grid_for(N * C), 0, k_router_bwd_input,
                       BF(dx), dlogits, CBF(wr), N, C, E);
    PRT_LAUNCH("prt_moe_router_bwd", grid_for(E * C), 0, k_router_bwd_weight,
               dwr, dlogits, CBF(x), N, C, E);
}

/* ---- top-k and its gate ------------------------------------------------ */

/* Larger first, ties to the lower index: moe.c's ranks_before. */
static __device__ __forceinline__ bool ranks_before(float a, size_t ia, float b, size_t ib)
{
    return a > b || (a == b && ia < ib);
}

/* moe.c's gate_score: sigmoid, or softmax's unnormalised exp(l - mx). */
static __device__ __forceinline__ float gate_score(float l, float mx, int gate)
{
    return (gate & PRT_MOE_SIGMOID) ? 1.0f / (1.0f + expf(-l)) : expf(l - mx);
}

/* moe.c's gate_denominator: the selected scores' sum under PRT_MOE_NORM,
 * else softmax's sum over all E, or 1 for sigmoid. */
static __device__ float gate_denominator(const float *l, const int32_t *id, size_t E, size_t k, float mx,
                                         int gate)
{
    float s = 0.0f;
    if (gate & PRT_MOE_NORM) { for (size_t j = 0; j < k; j++) s += gate_score(l[id[j]], mx, gate); }
    else if (gate & PRT_MOE_SIGMOID) s = 1.0f;
    else for (size_t e = 0; e < E; e++) s += gate_score(l[e], mx, gate);
    return s;
}

/* moe.c's row_max. */
static __device__ float row_max(const float *l, size_t E)
{
    float mx = l[0];
    for (size_t e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
    return mx;
}

/* moe.c's allowed_groups: whether group g of E/G experts is among the Kg
 * best, each ranked by the sum of its k/Kg (at least 1) largest choice
 * scores v in descending order, or its largest under PRT_MOE_GROUP_MAX;
 * chosen[G] (G <= MOE_MAX_E). */
static __device__ void allowed_groups(bool *chosen, const float *v, size_t E, size_t k, size_t G, size_t Kg,
                                      int gate)
{
    size_t per = E / G, m = (gate & PRT_MOE_GROUP_MAX) ? 1 : k / Kg ? k / Kg : 1;
    float gs[MOE_MAX_E], top[MOE_MAX_E];
    for (size_t g = 0; g < G; g++) {
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
        for (size_t i = 0; i < n; i++) gs[g] += top[i];
        chosen[g] = false;
    }
    for (size_t j = 0; j < Kg; j++) {
        size_t best = G;
        for (size_t g = 0; g < G; g++)
            if (!chosen[g] && (best == G || ranks_before(gs[g], g, gs[best], best))) best = g;
        chosen[best] = true;
    }
}

/* moe.c's prt_moe_topk_fwd, one thread per token: the choice scores v
 * (score + bias) pick the experts and rank the groups, the weights are the
 * unbiased scores' times scale. */
__global__ static void k_topk_fwd(int32_t *idx, float *w, const float *logits, size_t N, size_t E,
                                  size_t k, int gate, size_t G, size_t Kg, const float *bias, float scale)
{
    size_t t = gtid();
    if (t >= N) return;
    const float *l = logits + t * E;
    int32_t *id = idx + t * k;
    float mx = row_max(l, E), v[MOE_MAX_E];
    bool grouped = G > 1 && Kg < G, chosen[MOE_MAX_E];
    if (grouped || bias)
        for (size_t e = 0; e < E; e++) v[e] = gate_score(l[e], mx, gate) + (bias ? bias[e] : 0.0f);
    if (grouped) allowed_groups(chosen, v, E, k, G, Kg, gate);
    const float *c = bias ? v : l;   /* without a bias the logits order as the scores do */
    for (size_t j = 0; j < k; j++) {
        size_t best = E;
        for (size_t e = 0; e < E; e++) {
            bool taken = grouped && !chosen[e / (E / G)];
            for (size_t i = 0; i < j && !taken; i++) taken = (size_t)id[i] == e;
            if (!taken && (best == E || ranks_before(c[e], e, c[best], best))) best = e;
        }
        id[j] = (int32_t)best;
    }
    float s = gate_denominator(l, id, E, k, mx, gate);
    for (size_t j = 0; j < k; j++) w[t * k + j] = gate_score(l[id[j]], mx, gate) / s * scale;
}

/* moe.c's prt_moe_topk_bwd, one thread per token. */
__global__ static void k_topk_bwd(float *dlogits, const float *dw, const float *w, const int32_t *idx,
                                  const float *logits, size_t N, size_t E, size_t k, int gate, float scale)
{
    size_t t = gtid();
    if (t >= N) return;
    const float *l = logits + t * E;
    const int32_t *id = idx + t * k;
    float *dl = dlogits + t * E;
    float wt[MOE_MAX_E], dwt[MOE_MAX_E];   /* the unscaled weights and their gradient (k <= E) */
    for (size_t j = 0; j < k; j++) { wt[j] = w[t * k + j] / scale; dwt[j] = dw[t * k + j] * scale; }
    float dot = 0.0f;
    for (size_t j = 0; j < k; j++) dot += wt[j] * dwt[j];
    for (size_t e = 0; e < E; e++) dl[e] = 0.0f;
    if (gate & PRT_MOE_SIGMOID) {
        float mx = row_max(l, E), s = gate_denominator(l, id, E, k, mx, gate);
        for (size_t j = 0; j < k; j++) {
            float sj = gate_score(l[id[j]], mx, gate);
            float g = (gate & PRT_MOE_NORM) ? (dwt[j] - dot) / s : dwt[j];
            dl[id[j]] = sj * (1.0f - sj) * g;
        }
    } else if (gate & PRT_MOE_NORM) {
        for (size_t j = 0; j < k; j++) dl[id[j]] = wt[j] * (dwt[j] - dot);
    } else {
        float mx = row_max(l, E), s = gate_denominator(l, id, E, k, mx, gate);
        for (size_t e = 0; e < E; e++) dl[e] = -gate_score(l[e], mx, gate) / s * dot;
        for (size_t j = 0; j < k; j++) dl[id[j]] += wt[j] * dwt[j];
    }
}

extern "C" void prt_moe_topk_fwd(int32_t *idx, float *w, const float *logits, size_t N, size_t E,
                                 size_t k, int gate, size_t groups, size_t top_groups, const float *bias,
                                 float scale)
{
    PRT_OP_ENTER("prt_moe_topk_fwd");
    if (E > MOE_MAX_E && (bias || (groups > 1 && top_groups < groups))) {   /* the choice scores' array */
        prt_op_fail(PRT_ERR_ARG, "prt_moe_topk_fwd", "more than 256 experts with groups or a bias");
        return;
    }
    PRT_LAUNCH("prt_moe_topk_fwd", grid_for(N), 0, k_topk_fwd, idx, w, logits, N, E, k, gate, groups, top_groups,
               bias, scale);
}

extern "C" void prt_moe_topk_bwd(float *dlogits, const float *dw, const float *w, const int32_t *idx,
                                 const float *logits, size_t N, size_t E, size_t k, int gate, float scale)
{
    PRT_OP_ENTER("prt_moe_topk_bwd");
    if (k > MOE_MAX_E) { prt_op_fail(PRT_ERR_ARG, "prt_moe_topk_bwd", "top_k over 256"); return; }
    PRT_LAUNCH("prt_moe_topk_bwd", grid_for(N), 0, k_topk_bwd, dlogits, dw, w, idx, logits, N, E, k, gate, scale);
}

/* ---- routing ---------------------------------------------------------------
 * One thread per expert walks the assignments in token order (the order
 * the capacity keeps by) and ranks its rows; then one thread per
 * assignment adds its expert's first row (the counts of the experts
 * before it). */

__global__ static void k_route_rank(int32_t *row, int32_t *counts, const int32_t *idx, size_t B,
                                    size_t T, size_t E, size_t k, size_t cap)
{
    size_t e = gtid();
    if (e >= E) return;
    int32_t n = 0;
    for (size_t b = 0; b < B; b++) {
        size_t in_seq = 0;
        for (size_t i = b * T * k; i < (b + 1) * T * k; i++) {
            if ((size_t)idx[i] != e) continue;
            if (!cap || in_seq < cap) { in_seq++; row[i] = n++; }
            else row[i] = -1;
        }
    }
    counts[e] = n;
}

__global__ static void k_route_offset(int32_t *row, const int32_t *counts, const int32_t *idx,
                                      size_t n)
{
    size_t i = gtid();
    if (i >= n || row[i] < 0) return;
    int32_t first = 0;
    for (int32_t e = 0; e < idx[i]; e++) first += counts[e];
    row[i] += first;
}

extern "C" void prt_moe_route(int32_t *row, int32_t *counts, const int32_t *idx, size_t B, size_t T,
                              size_t E, size_t k, size_t cap)
{
    PRT_OP_ENTER("prt_moe_route");
    PRT_LAUNCH("prt_moe_route", grid_for(E), 0, k_route_rank, row, counts, idx, B, T, E, k, cap);
    PRT_LAUNCH("prt_moe_route", grid_for(B * T * k), 0, k_route_offset, row, counts, idx, B * T * k);
}

/* ---- dispatch and combine ---------------------------------------------------- */

__global__ static void k_dispatch(bf *xe, const bf *x, const int32_t *row, size_t N, size_t C, size_t k)
{
    size_t idx = gtid();
    if (idx >= N * k * C) return;
    size_t tj = idx / C, c = idx % C;
    int32_t r = row[tj];
    if (r >= 0) xe[(size_t)r * C + c] = x[(tj / k) * C + c];
}

__global__ static void k_dispatch_bwd(bf *dx, const bf *dxe, const int32_t *row, size_t N, size_t C,
                                      size_t k)
{
    size_t idx = gtid();
    if (idx >= N * C) return;
    size_t t = idx / C, c = idx % C;
    float s = 0.0f;
    for (size_t j = 0; j < k; j++) {   /* k order: the CPU's */
        int32_t r = row[t * k + j];
        if (r >= 0) s += ld(dxe, (size_t)r * C + c);
    }
    dx[idx] = to_bf(s);
}

__global__ static void k_combine(bf *out, const bf *ye, const int32_t *row, const float *w, size_t N,
                                 size_t C, size_t k)
{
    size_t idx = gtid();
    if (idx >= N * C) return;
    size_t t = idx / C, c = idx % C;
    float s = 0.0f;
    for (size_t j = 0; j < k; j++) {
        int32_t r = row[t * k + j];
        if (r >= 0) s += w[t * k + j] * ld(ye, (size_t)r * C + c);
    }
    out[idx] = to_bf(s);
}

/* dye: one thread per element; dw: one warp per (token, k), a fixed
 * shuffle tree over its strided partial sums. */
__global__ static void k_combine_bwd_rows(bf *dye, const bf *dout, const int32_t *row, const float *w,
                                          size_t N, size_t C, size_t k)
{
    size_t idx = gtid();
    if (idx >= N * k * C) return;
    size_t tj = idx / C, c = idx % C;
    int32_t r = row[tj];
    if (r >= 0) dye[(size_t)r * C + c] = to_bf(w[tj] * ld(dout, (tj / k) * C + c));
}

__global__ static void k_combine_bwd_weights(float *dw, const bf *dout, const bf *ye, const int32_t *row,
                                             size_t N, size_t C, size_t k)
{
    size_t tj = gwarp(), lane = threadIdx.x % 32;
    if (tj >= N * k) return;
    int32_t r = row[tj];
    float s = 0.0f;
    if (r >= 0)
        for (size_t c = lane; c < C; c += 32) s += ld(dout, (tj / k) * C + c) * ld(ye, (size_t)r * C + c);
    s = warp_sum(s);
    if (lane == 0) dw[tj] = s;
}

extern "C" void prt_moe_dispatch(prt_act *xe, const prt_act *x, const int32_t *row, size_t N, size_t C,
                                 size_t k)
{
    PRT_OP_ENTER("prt_moe_dispatch");
    PRT_LAUNCH("prt_moe_dispatch", grid_for(N * k * C), 0, k_dispatch, BF(xe), CBF(x), row, N, C, k);
}

extern "C" void prt_moe_dispatch_bwd(prt_act *dx, const prt_act *dxe, const int32_t *row, size_t N,
                                     size_t C, size_t k)
{
    PRT_OP_ENTER("prt_moe_dispatch_bwd");
    PRT_LAUNCH("prt_moe_dispatch_bwd", grid_for(N * C), 0, k_dispatch_bwd,
               BF(dx), CBF(dxe), row, N, C, k);
}

extern "C" void prt_moe_combine(prt_act *out, const prt_act *ye, const int32_t *row, const float *w,
                                size_t N, size_t C, size_t k)
{
    PRT_OP_ENTER("prt_moe_combine");
    PRT_LAUNCH("prt_moe_combine", grid_for(N * C), 0, k_combine, BF(out), CBF(ye), row, w, N, C, k);
}

extern "C" void prt_moe_combine_bwd(prt_act *dye, float *dw, const prt_act *dout, const prt_act *ye,
                                    const int32_t *row, const float *w, size_t N, size_t C, size_t k)
{
    PRT_OP_ENTER("prt_moe_combine_bwd");
    PRT_LAUNCH("prt_moe_combine_bwd", grid_for(N * k * C), 0, k_combine_bwd_rows,
               BF(dye), CBF(dout), row, w, N, C, k);
    PRT_LAUNCH("prt_moe_combine_bwd", grid_rows(N * k), 0, k_combine_bwd_weights,
               dw, CBF(dout), CBF(ye), row, N, C, k);
}

/* ---- the load-balancing loss -------------------------------------------------- */

/* moe.c's score_row: the aux loss's distribution p (E) of one token (the
 * softmax, or the sigmoids normalised to sum 1) and, when dp is given, the
 * factor of its backward (p_e, or s_e (1 - s_e) / sum s). */
static __device__ void score_row(float *p, float *dp, const float *l, size_t E, int gate)
{
    float mx = l[0], s = 0.0f;
    for (size_t e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
    for (size_t e = 0; e < E; e++) s += p[e] = gate_score(l[e], mx, gate);
    for (size_t e = 0; e < E; e++) {
        if (dp) dp[e] = (gate & PRT_MOE_SIGMOID) ? p[e] * (1.0f - p[e]) / s : p[e] / s;
        p[e] /= s;
    }
}

/* f (E): sequence b's fraction of its T k assignments per expert. */
static __device__ void seq_fractions(float *f, const int32_t *idx, size_t b, size_t T, size_t E, size_t k)
{
    for (size_t e = 0; e < E; e++) f[e] = 0.0f;
    for (size_t i = b * T * k; i < (b + 1) * T * k; i++) f[idx[i]] += 1.0f;
    for (size_t e = 0; e < E; e++) f[e] /= (float)(T * k);
}

__global__ static void k_aux_loss(float *loss, const float *logits, const int32_t *idx, size_t B, size_t T,
                                  size_t E, size_t k, float coeff, int gate)
{
    size_t b = gtid();
    if (b >= B) return;
    float f[MOE_MAX_E], P[MOE_MAX_E], p[MOE_MAX_E];
    seq_fractions(f, idx, b, T, E, k);
    for (size_t e = 0; e < E; e++) P[e] = 0.0f;
    for (size_t t = b * T; t < (b + 1) * T; t++) {
        score_row(p, NULL, logits + t * E, E, gate);
        for (size_t e = 0; e < E; e++) P[e] += p[e] / (float)T;
    }
    float s = 0.0f;
    for (size_t e = 0; e < E; e++) s += f[e] * P[e];
    loss[b] = coeff * (float)E * s;
}

__global__ static void k_aux_bwd(float *dlogits, const float *logits, const int32_t *idx, size_t B,
                                 size_t T, size_t E, size_t k, float g, int gate)
{
    size_t t = gtid();
    if (t >= B * T) return;
    float f[MOE_MAX_E], p[MOE_MAX_E], dp[MOE_MAX_E];
    seq_fractions(f, idx, t / T, T, E, k);
    score_row(p, dp, logits + t * E, E, gate);
    float fp = 0.0f;
    for (size_t e = 0; e < E; e++) fp += f[e] * p[e];
    for (size_t e = 0; e < E; e++) dlogits[t * E + e] += g * dp[e] * (f[e] - fp);
}

extern "C" void prt_moe_aux_loss(float *loss, const float *logits, const int32_t *idx, size_t B, size_t T,
                                 size_t E, size_t k, float coeff, int gate)
{
    PRT_OP_ENTER("prt_moe_aux_loss");
    if (E > MOE_MAX_E) { prt_op_fail(PRT_ERR_ARG, "prt_moe_aux_loss", "more than 256 experts"); return; }
    PRT_LAUNCH("prt_moe_aux_loss", grid_for(B), 0, k_aux_loss, loss, logits, idx, B, T, E, k, coeff, gate);
}

extern "C" void prt_moe_aux_bwd(float *dlogits, const float *logits, const int32_t *idx, size_t B,
                                size_t T, size_t E, size_t k, float coeff, float scale, int gate)
{
    PRT_OP_ENTER("prt_moe_aux_bwd");
    if (E > MOE_MAX_E) { prt_op_fail(PRT_ERR_ARG, "prt_moe_aux_bwd", "more than 256 experts"); return; }
    float g = scale * coeff * (float)E / (float)T;   /* moe.c's factor */
    PRT_LAUNCH("prt_moe_aux_bwd", grid_for(B * T), 0, k_aux_bwd, dlogits, logits, idx, B, T, E, k, g, gate);
}

/* ---- the shared experts' gate ---------------------------------------------- */

__global__ static void k_shared_gate_sigmoid(float *g, const float *z, size_t N)
{
    size_t t = gtid();
    if (t < N) g[t] = 1.0f / (1.0f + expf(-z[t]));
}

__global__ static void k_shared_gate_fwd(bf *out, const bf *ys, const float *g, size_t N, size_t C)
{
    size_t i = gtid();
    if (i < N * C) out[i] = to_bf(ld(out, i) + g[i / C] * ld(ys, i));
}

__global__ static void k_shared_gate_bwd_rows(bf *dys, const bf *dy, const float *g, size_t N, size_t C)
{
    size_t i = gtid();
    if (i < N * C) dys[i] = to_bf(g[i / C] * ld(dy, i));
}

/* one thread per token: the dot in c order, as the CPU */
__global__ static void k_shared_gate_bwd_logit(float *dz, const bf *dy, const bf *ys, const float *g, size_t N,
                                               size_t C)
{
    size_t t = gtid();
    if (t >= N) return;
    float dot = 0.0f;
    for (size_t c = 0; c < C; c++) dot += ld(dy, t * C + c) * ld(ys, t * C + c);
    dz[t] = g[t] * (1.0f - g[t]) * dot;
}

extern "C" void prt_moe_shared_gate_fwd(float *g, prt_act *out, const prt_act *ys, const float *z, size_t N,
                                        size_t C)
{
    PRT_OP_ENTER("prt_moe_shared_gate_fwd");
    if (!N) return;
    PRT_LAUNCH("prt_moe_shared_gate_fwd", grid_for(N), 0, k_shared_gate_sigmoid, g, z, N);
    PRT_LAUNCH("prt_moe_shared_gate_fwd", grid_for(N * C), 0, k_shared_gate_fwd, BF(out), CBF(ys), g, N, C);
}

extern "C" void prt_moe_shared_gate_bwd(float *dz, prt_act *dys, const prt_act *dy, const prt_act *ys,
                                        const float *g, size_t N, size_t C)
{
    PRT_OP_ENTER("prt_moe_shared_gate_bwd");
    if (!N) return;
    PRT_LAUNCH("prt_moe_shared_gate_bwd", grid_for(N * C), 0, k_shared_gate_bwd_rows, BF(dys), CBF(dy), g, N, C);
    PRT_LAUNCH("prt_moe_shared_gate_bwd", grid_for(N), 0, k_shared_gate_bwd_logit, dz, CBF(dy), CBF(ys), g, N, C);
}

/* ---- the receiver's order -------------------------------------------------------- */

__global__ static void k_sort_rows(bf *out, const bf *in, const int32_t *perm, size_t R, size_t C,
                                   bool unsort)
{
    size_t idx = gtid();
    if (idx >= R * C) return;
    size_t i = idx / C, c = idx % C, p = (size_t)perm[i];
    if (unsort) out[p * C + c] = in[idx];
    else out[idx] = in[p * C + c];
}

extern "C" void prt_moe_sort_rows(prt_act *out, const prt_act *in, const int32_t *perm, size_t R, size_t C)
{
    PRT_OP_ENTER("prt_moe_sort_rows");
    if (!R || !C) return;   /* no rows came: a zero-block launch is an error */
    PRT_LAUNCH("prt_moe_sort_rows", grid_for(R * C), 0, k_sort_rows, BF(out), CBF(in), perm, R, C, false);
}

extern "C" void prt_moe_unsort_rows(prt_act *out, const prt_act *in, const int32_t *perm, size_t R,
                                    size_t C)
{
    PRT_OP_ENTER("prt_moe_unsort_rows");
    if (!R || !C) return;
    PRT_LAUNCH("prt_moe_unsort_rows", grid_for(R * C), 0, k_sort_rows,
               BF(out), CBF(in), perm, R, C, true);
}

/* ---- aux-loss-free balancing: moe.c's prt_moe_count_add / _bias_update ---- */

__global__ static void k_count_add(float *acc, const int32_t *counts, size_t E)
{
    size_t e = gtid();
    if (e < E) acc[e] += (float)counts[e];
}

/* One thread: E is a few hundred, once a step; the sum in expert order as
 * the CPU's (whole numbers, exact either way). */
__global__ static void k_bias_update(float *bias, float *counts, size_t E, float rate)
{
    if (gtid() != 0) return;
    double sum = 0.0;
    for (size_t e = 0; e < E; e++) sum += counts[e];
    double mean = sum / (double)E;
    for (size_t e = 0; e < E; e++) {
        double off = mean - (double)counts[e];
        bias[e] += off > 0 ? rate : off < 0 ? -rate : 0.0f;
        counts[e] = 0.0f;
    }
}

extern "C" void prt_moe_count_add(float *acc, const int32_t *counts, size_t E)
{
    PRT_OP_ENTER("prt_moe_count_add");
    PRT_LAUNCH("prt_moe_count_add", grid_for(E), 0, k_count_add, acc, counts, E);
}

extern "C" void prt_moe_bias_update(float *bias, float *counts, size_t E, float rate)
{
    PRT_OP_ENTER("prt_moe_bias_update");
    PRT_LAUNCH("prt_moe_bias_update", 1, 0, k_bias_update, bias, counts, E, rate);
}
