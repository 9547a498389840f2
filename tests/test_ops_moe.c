/*
 * test_ops_moe.c: the mixture-of-experts ops of the CPU build (cmocka).
 *
 * 1. The routing rules against naive references: top-k order and ties,
 *    the softmax over the selected, the expert-sorted rows with per-
 *    sequence capacity, the receiver's (source rank, token, k) order, the
 *    Switch load-balancing loss.
 * 2. The whole MoE layer on one rank (router, top-k, route, dispatch, the
 *    experts' SwiGLU MLPs, combine, shared experts, aux loss) against
 *    central finite differences of L = sum(out * r) + sum_b aux_b, for
 *    every gradient, with capacity and aux loss on and off. Top-k is
 *    piecewise constant in its inputs: a probe whose +-h step changes the
 *    routing is skipped (and the test asks that nearly all probes ran).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "planrt.h"

#define TEST_RAND_SEED 17
#include "tests/test_rand.h"

/* ---- 1. routing rules --------------------------------------------------- */

/* Ties go to the lower index; the weights are the softmax of the k chosen. */
static void test_topk_ties(void **state)
{
    (void)state;
    static const struct {
        float logits[5];
        size_t k;
        int32_t idx[3];
    } cases[] = {
        {{0.5f, 2.0f, 2.0f, -1.0f, 2.0f}, 2, {1, 2}},
        {{1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, 3, {0, 1, 2}},
        {{-3.0f, -1.0f, -2.0f, -1.0f, 0.0f}, 3, {4, 1, 3}},
        {{0.0f, 0.0f, 0.0f, 0.0f, 7.0f}, 1, {4}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int32_t idx[3];
        float w[3], sum = 0.0f;
        prt_moe_topk_fwd(idx, w, cases[c].logits, 1, 5, cases[c].k, PRT_MOE_NORM, 1, 1, NULL, 1.0f);
        double den = 0.0;
        for (size_t j = 0; j < cases[c].k; j++)
            den += exp(cases[c].logits[cases[c].idx[j]]);
        for (size_t j = 0; j < cases[c].k; j++) {
            assert_int_equal(idx[j], cases[c].idx[j]);
            assert_float_equal(w[j], exp(cases[c].logits[idx[j]]) / den, 1e-6);
            sum += w[j];
        }
        assert_float_equal(sum, 1.0f, 1e-6);
    }
}

/* Each gate's weights against a double reading of its rule: scores
 * softmax or sigmoid, divided by the selected ones' sum (norm), else by
 * the sum over all E (softmax) or 1 (sigmoid); the selection is the same. */
static void test_gate_weights(void **state)
{
    (void)state;
    enum { E = 6, K = 3 };
    const float l[E] = {0.3f, -1.2f, 2.1f, 0.9f, 2.1f, -0.4f};
    const int32_t want[K] = {2, 4, 3};
    const int gates[] = {0, PRT_MOE_NORM, PRT_MOE_SIGMOID, PRT_MOE_SIGMOID | PRT_MOE_NORM};
    for (size_t g = 0; g < sizeof gates / sizeof *gates; g++) {
        int gate = gates[g];
        int32_t idx[K];
        float w[K];
        prt_moe_topk_fwd(idx, w, l, 1, E, K, gate, 1, 1, NULL, 1.0f);
        double sc[E], all = 0.0, sel = 0.0;
        for (size_t e = 0; e < E; e++)
            all += sc[e] = (gate & PRT_MOE_SIGMOID) ? 1.0 / (1.0 + exp(-(double)l[e])) : exp((double)l[e]);
        for (size_t j = 0; j < K; j++)
            sel += sc[want[j]];
        double den = (gate & PRT_MOE_NORM) ? sel : (gate & PRT_MOE_SIGMOID) ? 1.0 : all;
        double sum = 0.0;
        for (size_t j = 0; j < K; j++) {
            assert_int_equal(idx[j], want[j]);
            assert_float_equal(w[j], sc[want[j]] / den, 1e-6);
            sum += w[j];
        }
        if (gate & PRT_MOE_NORM)
            assert_float_equal(sum, 1.0, 1e-6);
        else   /* without the norm the k weights sum to less than 1 (softmax) or to 3 sigmoids */
            assert_true(fabs(sum - 1.0) > 0.05);
    }
}

/* Grouped routing against a double reading of the rule: each group's
 * score is the sum of its k/Kg largest scores, the Kg best groups (ties to
 * the lower) hold the top-k, the weights are the gate's over those; and a
 * case whose global top-k spans three groups is confined to two. */
static void test_grouped_routing(void **state)
{
    (void)state;
    enum { E = 8, K = 4, G = 4, KG = 2 };
    /* groups {0,1} {2,3} {4,5} {6,7}: the top-4 logits 7, 6, 5, 4 lie in
     * groups 3, 0, 2, 3. The sigmoids' group sums pick groups 3 and 1
     * (1.98, 1.22 over 1.05, 1.01: two middling scores beat one high), the
     * softmax's groups 3 and 0 */
    static const int32_t by_hand[2][K] = { {6, 7, 2, 3}, {6, 0, 7, 1} };
    const float l[E] = {6.0f, -3.0f, 0.5f, 0.4f, 5.0f, -4.0f, 7.0f, 4.0f};
    const int gates[] = {PRT_MOE_SIGMOID | PRT_MOE_NORM, 0};
    for (size_t gi = 0; gi < 2; gi++) {
        int gate = gates[gi];
        int32_t idx[K];
        float w[K];
        prt_moe_topk_fwd(idx, w, l, 1, E, K, gate, G, KG, NULL, 1.0f);
        double sc[E], gs[G], mx = 7.0;
        for (int e = 0; e < E; e++)
            sc[e] = (gate & PRT_MOE_SIGMOID) ? 1.0 / (1.0 + exp(-(double)l[e])) : exp((double)l[e] - mx);
        for (int g = 0; g < G; g++) {   /* groups of 2, k/Kg = 2: both members */
            gs[g] = sc[2 * g] + sc[2 * g + 1];
        }
        int best[KG], nb = 0;
        for (int j = 0; j < KG; j++) {
            int b = -1;
            for (int g = 0; g < G; g++) {
                bool taken = false;
                for (int i = 0; i < nb; i++) taken = taken || best[i] == g;
                if (!taken && (b < 0 || gs[g] > gs[b])) b = g;
            }
            best[nb++] = b;
        }
        /* the allowed experts by logit, descending */
        int want[K], nw = 0;
        for (int j = 0; j < K; j++) {
            int b = -1;
            for (int e = 0; e < E; e++) {
                bool ok = e / 2 == best[0] || e / 2 == best[1], taken = false;
                for (int i = 0; i < nw; i++) taken = taken || want[i] == e;
                if (ok && !taken && (b < 0 || l[e] > l[b])) b = e;
            }
            want[nw++] = b;
        }
        for (int j = 0; j < K; j++)
            assert_int_equal(want[j], by_hand[gi][j]);
        double den = 0.0, all = 0.0;
        for (int e = 0; e < E; e++) all += sc[e];
        for (int j = 0; j < K; j++) den += sc[want[j]];
        if (!(gate & PRT_MOE_NORM)) den = (gate & PRT_MOE_SIGMOID) ? 1.0 : all;
        for (int j = 0; j < K; j++) {
            assert_int_equal(idx[j], want[j]);
            assert_float_equal(w[j], sc[want[j]] / den, 1e-6);
        }
    }
    /* one group of all, or every group allowed: the plain top-k */
    int32_t a[K], b[K];
    float wa[K], wb[K];
    prt_moe_topk_fwd(a, wa, l, 1, E, K, PRT_MOE_NORM, 1, 1, NULL, 1.0f);
    prt_moe_topk_fwd(b, wb, l, 1, E, K, PRT_MOE_NORM, G, G, NULL, 1.0f);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(a[2], 4);   /* 7, 6, 5, 4: expert 4 in group 2, outside the grouped pick */
}

/* routed_scale: the same experts, every weight times the scale, for
 * each gate; the backward of the scaled weights equals the unscaled one's
 * with dw times the scale (w = S u: dL/du = S dL/dw). */
static void test_routed_scale(void **state)
{
    (void)state;
    enum { E = 6, K = 3 };
    const float l[E] = {0.3f, -1.2f, 2.1f, 0.9f, 1.7f, -0.4f}, dw[K] = {0.7f, -0.3f, 1.1f};
    const int gates[] = {0, PRT_MOE_NORM, PRT_MOE_SIGMOID, PRT_MOE_SIGMOID | PRT_MOE_NORM};
    for (size_t g = 0; g < sizeof gates / sizeof *gates; g++) {
        int32_t a[K], b[K];
        float wa[K], wb[K], dsw[K], da[E], db[E];
        prt_moe_topk_fwd(a, wa, l, 1, E, K, gates[g], 1, 1, NULL, 1.0f);
        prt_moe_topk_fwd(b, wb, l, 1, E, K, gates[g], 1, 1, NULL, 2.5f);
        assert_memory_equal(a, b, sizeof a);
        for (size_t j = 0; j < K; j++) {
            assert_float_equal(wb[j], 2.5f * wa[j], 1e-6);
            dsw[j] = 2.5f * dw[j];
        }
        prt_moe_topk_bwd(da, dsw, wa, a, l, 1, E, K, gates[g], 1.0f);
        prt_moe_topk_bwd(db, dw, wb, b, l, 1, E, K, gates[g], 2.5f);
        for (size_t e = 0; e < E; e++)
            assert_float_equal(db[e], da[e], 1e-6);
    }
}

/* The expert bias (aux-loss-free balancing) picks by score + bias and
 * ranks the groups by it, but the weights are the unbiased scores': a
 * hand-worked case where the bias moves both choices. */
static void test_expert_bias(void **state)
{
    (void)state;
    enum { E = 6, K = 2 };
    const float l[E] = {2.0f, 1.0f, 0.0f, -1.0f, 0.5f, 1.5f};
    /* sigmoids .881 .731 .5 .269 .622 .818; +bias: .881 .731 .9 .269 .622 .818:
     * top-2 by score 0, 5; by score + bias 2, 0 */
    const float bias[E] = {0.0f, 0.0f, 0.4f, 0.0f, 0.0f, 0.0f};
    int32_t idx[K];
    float w[K];
    prt_moe_topk_fwd(idx, w, l, 1, E, K, PRT_MOE_SIGMOID | PRT_MOE_NORM, 1, 1, NULL, 1.0f);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 5);
    prt_moe_topk_fwd(idx, w, l, 1, E, K, PRT_MOE_SIGMOID | PRT_MOE_NORM, 1, 1, bias, 1.0f);
    assert_int_equal(idx[0], 2);
    assert_int_equal(idx[1], 0);
    double s2 = 1.0 / (1.0 + exp(-0.0)), s0 = 1.0 / (1.0 + exp(-2.0));
    assert_float_equal(w[0], s2 / (s2 + s0), 1e-6);   /* the unbiased scores, renormalised */
    assert_float_equal(w[1], s0 / (s2 + s0), 1e-6);
    /* groups {0,1} {2,3} {4,5}, one of three, k/Kg = 2: sums 1.612, .769,
     * 1.440 pick group 0; a bias of .9 on expert 3 (.769 + .9 = 1.669) picks
     * group 1, whose experts are then 3 (1.169) and 2 */
    const float gbias[E] = {0.0f, 0.0f, 0.0f, 0.9f, 0.0f, 0.0f};
    prt_moe_topk_fwd(idx, w, l, 1, E, K, PRT_MOE_SIGMOID | PRT_MOE_NORM, 3, 1, NULL, 1.0f);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 1);
    prt_moe_topk_fwd(idx, w, l, 1, E, K, PRT_MOE_SIGMOID | PRT_MOE_NORM, 3, 1, gbias, 1.0f);
    assert_int_equal(idx[0], 3);
    assert_int_equal(idx[1], 2);
    double s3 = 1.0 / (1.0 + exp(1.0));
    assert_float_equal(w[0], s3 / (s3 + s2), 1e-6);
}

/* PRT_MOE_GROUP_MAX (DeepSeek-V2's group_limited_greedy): a group ranked
 * by its largest score, where the sum of its two largest picks another. */
static void test_group_max(void **state)
{
    (void)state;
    enum { E = 6, K = 2 };
    /* groups {0,1,2} {3,4,5}: group 0 holds the single largest logit (3),
     * group 1 the two next (2.5, 2.4): top-2 sums rank group 1 first, the
     * max ranks group 0 */
    const float l[E] = {3.0f, -2.0f, -2.0f, 2.5f, 2.4f, 0.0f};
    int32_t idx[K];
    float w[K];
    prt_moe_topk_fwd(idx, w, l, 1, E, K, PRT_MOE_SIGMOID, 2, 1, NULL, 1.0f);
    assert_int_equal(idx[0], 3);
    assert_int_equal(idx[1], 4);
    prt_moe_topk_fwd(idx, w, l, 1, E, K, PRT_MOE_SIGMOID | PRT_MOE_GROUP_MAX, 2, 1, NULL, 1.0f);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 1);
    assert_float_equal(w[0], 1.0 / (1.0 + exp(-3.0)), 1e-6);
    /* softmax: the same groups (the scores rise with the logits) */
    prt_moe_topk_fwd(idx, w, l, 1, E, K, PRT_MOE_GROUP_MAX, 2, 1, NULL, 1.0f);
    assert_int_equal(idx[0], 0);
}

/* Aux-loss-free balancing's step (Megatron-Core's get_updated_expert_bias):
 * counts summed over micro-batches, then each bias moved by the rate's sign
 * of (mean - count), 0 at the mean; the counts zeroed for the next step. */
static void test_bias_update(void **state)
{
    (void)state;
    enum { E = 4 };
    const int32_t mb1[E] = {3, 0, 1, 4}, mb2[E] = {1, 2, 1, 4};   /* loads 4, 2, 2, 8: mean 4 */
    float acc[E] = {0}, bias[E] = {0.5f, 0.0f, -0.25f, 0.0f};
    prt_moe_count_add(acc, mb1, E);
    prt_moe_count_add(acc, mb2, E);
    assert_float_equal(acc[3], 8.0f, 0);
    prt_moe_bias_update(bias, acc, E, 0.125f);
    const float want[E] = {0.5f, 0.125f, -0.125f, -0.125f};   /* at, below, below, above the mean */
    for (size_t e = 0; e < E; e++) {
        assert_float_equal(bias[e], want[e], 0);
        assert_float_equal(acc[e], 0.0f, 0);
    }
}

/* prt_moe_route against a naive reading of the rule: expert by expert,
 * sequence by sequence, the first cap assignments in token order. */
static void test_route_capacity(void **state)
{
    (void)state;
    static const struct { size_t B, T, E, k; double factor; } cases[] = {
        {2, 8, 4, 2, 0.0}, {2, 8, 4, 2, 0.5}, {3, 5, 3, 1, 1.0}, {1, 16, 8, 2, 1.25},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t B = cases[c].B, T = cases[c].T, E = cases[c].E, k = cases[c].k, N = B * T;
        float *logits = rnd(N * E, 2);
        int32_t *idx = malloc(N * k * sizeof *idx), *row = malloc(N * k * sizeof *row);
        int32_t counts[8];
        float *w = zeros(N * k);
        size_t cap = prt_moe_capacity(cases[c].factor, T, k, E);
        assert_int_equal(cap, cases[c].factor > 0
                         ? (size_t)ceil(cases[c].factor * (double)(T * k) / (double)E) : 0);
        prt_moe_topk_fwd(idx, w, logits, N, E, k, PRT_MOE_NORM, 1, 1, NULL, 1.0f);
        prt_moe_route(row, counts, idx, B, T, E, k, cap);
        int32_t next = 0;
        for (size_t e = 0; e < E; e++) {
            int32_t kept = 0;
            for (size_t b = 0; b < B; b++) {
                size_t in_seq = 0;
                for (size_t i = b * T * k; i < (b + 1) * T * k; i++) {
                    if ((size_t)idx[i] != e)
                        continue;
                    bool keep = !cap || in_seq < cap;
                    in_seq++;
                    assert_int_equal(row[i], keep ? next : -1);
                    next += keep;
                    kept += keep;
                }
            }
            assert_int_equal(counts[e], kept);
        }
        free(logits); free(idx); free(row); free(w);
    }
}

/* Rows from EP rank s for local expert le come out expert-major, sources in
 * order within an expert, and unsort undoes sort. */
static void test_recv_order(void **state)
{
    (void)state;
    enum { EP = 3, EL = 2 };
    const int32_t cnt[EP * EL] = {2, 0, 1, 3, 0, 2};   /* (source, local expert) */
    int32_t perm[8];
    prt_moe_recv_order(perm, cnt, EP, EL);
    /* source-major offsets: s0e0 0-1, s1e0 2, s1e1 3-5, s2e1 6-7 */
    const int32_t want[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    /* expert 0: s0 rows 0,1 then s1 row 2; expert 1: s1 rows 3,4,5, s2 6,7 */
    for (int i = 0; i < 8; i++)
        assert_int_equal(perm[i], want[i]);
    const int32_t cnt2[EP * EL] = {1, 2, 2, 0, 1, 1};
    prt_moe_recv_order(perm, cnt2, EP, EL);
    /* offsets: s0e0 0, s0e1 1-2, s1e0 3-4, s2e0 5, s2e1 6 */
    const int32_t want3[7] = {0, 3, 4, 5, 1, 2, 6};
    for (int i = 0; i < 7; i++)
        assert_int_equal(perm[i], want3[i]);
    float in[7 * 2], mid[7 * 2], back[7 * 2];
    for (int i = 0; i < 14; i++)
        in[i] = (float)i;
    prt_moe_sort_rows(mid, in, perm, 7, 2);
    assert_float_equal(mid[2], in[2 * 3], 0);
    prt_moe_unsort_rows(back, mid, perm, 7, 2);
    assert_memory_equal(back, in, sizeof in);
}

/* The Switch loss against a double reference, and its uniform minimum. */
static void test_aux_loss(void **state)
{
    (void)state;
    const size_t B = 2, T = 6, E = 4, k = 2, N = B * T;
    float *logits = rnd(N * E, 2), w[N * k], loss[B];
    int32_t idx[N * k];
    prt_moe_topk_fwd(idx, w, logits, N, E, k, PRT_MOE_NORM, 1, 1, NULL, 1.0f);
    prt_moe_aux_loss(loss, logits, idx, B, T, E, k, 0.01f, PRT_MOE_NORM);
    for (size_t b = 0; b < B; b++) {
        double f[4] = {0}, P[4] = {0};
        for (size_t t = b * T; t < (b + 1) * T; t++) {
            double mx = -1e30, s = 0;
            for (size_t e = 0; e < E; e++)
                mx = fmax(mx, logits[t * E + e]);
            for (size_t e = 0; e < E; e++)
                s += exp(logits[t * E + e] - mx);
            for (size_t e = 0; e < E; e++)
                P[e] += exp(logits[t * E + e] - mx) / s / (double)T;
            for (size_t j = 0; j < k; j++)
                f[idx[t * k + j]] += 1.0 / (double)(T * k);
        }
        double ref = 0;
        for (size_t e = 0; e < E; e++)
            ref += f[e] * P[e];
        assert_float_equal(loss[b], 0.01 * E * ref, 1e-7);
    }
    /* uniform logits: P_e = 1/E, sum f = 1, so the loss is coeff exactly */
    memset(logits, 0, N * E * sizeof *logits);
    for (size_t t = 0; t < N; t++)
        for (size_t j = 0; j < k; j++)
            idx[t * k + j] = (int32_t)((t + j) % E);
    prt_moe_aux_loss(loss, logits, idx, B, T, E, k, 0.5f, PRT_MOE_NORM);
    assert_float_equal(loss[0], 0.5f, 1e-6);
    free(logits);
}

/* ---- 2. the whole layer against finite differences ------------------------ */

typedef struct {
    const char *name;
    size_t B, T, C, E, k, F, shared;
    double factor;   /* capacity factor, 0 dropless */
    float aux;       /* load-balancing coefficient, 0 off */
    int gate;        /* PRT_MOE_SIGMOID, PRT_MOE_NORM flags */
    size_t SF;       /* the shared experts' width (0: F) */
    bool sgate;      /* the shared experts' sigmoid gate (Qwen2-MoE) */
    size_t groups, top_groups;   /* grouped routing (0: none) */
    float scale;                 /* routed_scale (0: 1) */
    const float *bias;           /* the experts' choice bias (E; NULL: none) */
} MoeCase;

/* A case's routed_scale: 1 where it gives none. */
static float case_scale(const MoeCase *m) { return m->scale > 0 ? m->scale : 1.0f; }

typedef struct {
    const MoeCase *mc;
    size_t N, R, cap;
    size_t SF;                          /* the shared experts' width */
    float *x, *wr, *w1, *w2, *s1, *s2;  /* w1 (E, 2F, C), w2 (E, C, F); s* per shared (2SF, C), (C, SF) */
    float *gw, *z, *g, *ysum;           /* the shared gate: weight (1, C), logits, sigmoids (N) and the
                                           shared experts' sum (N, C) */
    float *logits, *w, *xe, *he, *ae, *ye, *out, *hs, *as, *ys, *auxb;
    int32_t *idx, *row, *counts;
} MoeLayer;

/* One expert MLP over n rows: h = x W1^T (n, 2F), a = swiglu(h), y = a W2^T. */
static void mlp_fwd(float *y, float *h, float *a, const float *x, const float *w1,
                    const float *w2, size_t n, size_t C, size_t F)
{
    prt_linear_fwd(h, x, w1, NULL, n, C, 2 * F);
    prt_swiglu_fwd(a, h, n, F);
    prt_linear_fwd(y, a, w2, NULL, n, F, C);
}

static void mlp_bwd(float *dx, float *dw1, float *dw2, const float *dy, const float *x,
                    const float *h, const float *a, const float *w1, const float *w2,
                    size_t n, size_t C, size_t F)
{
    float *da = zeros(n * F), *dh = zeros(n * 2 * F);
    prt_linear_bwd(da, dw2, NULL, dy, a, w2, n, F, C);
    prt_swiglu_bwd(dh, h, da, n, F);
    prt_linear_bwd(dx, dw1, NULL, dh, x, w1, n, C, 2 * F);
    free(da); free(dh);
}

/* The forward; out holds N*C outputs and, last, sum_b aux_b. */
static void moe_fwd(void *p)
{
    MoeLayer *L = p;
    const MoeCase *m = L->mc;
    size_t N = L->N, C = m->C, E = m->E, k = m->k, F = m->F;
    prt_moe_router_fwd(L->logits, L->x, L->wr, N, C, E);
    prt_moe_topk_fwd(L->idx, L->w, L->logits, N, E, k, m->gate, m->groups ? m->groups : 1,
                     m->top_groups ? m->top_groups : 1, m->bias, case_scale(m));
    prt_moe_route(L->row, L->counts, L->idx, m->B, m->T, E, k, L->cap);
    prt_moe_dispatch(L->xe, L->x, L->row, N, C, k);
    for (size_t e = 0, off = 0; e < E; off += (size_t)L->counts[e], e++)
        if (L->counts[e])
            mlp_fwd(L->ye + off * C, L->he + off * 2 * F, L->ae + off * F, L->xe + off * C,
                    L->w1 + e * 2 * F * C, L->w2 + e * C * F, (size_t)L->counts[e], C, F);
    prt_moe_combine(L->out, L->ye, L->row, L->w, N, C, k);
    size_t SF = L->SF;
    float *into = m->sgate ? L->ysum : L->out;   /* gated: the shared sum first */
    if (m->sgate) memset(L->ysum, 0, N * C * sizeof *L->ysum);
    for (size_t s = 0; s < m->shared; s++) {
        mlp_fwd(L->ys, L->hs + s * N * 2 * SF, L->as + s * N * SF, L->x, L->s1 + s * 2 * SF * C,
                L->s2 + s * C * SF, N, C, SF);
        prt_add_inplace(into, L->ys, N * C);
    }
    if (m->sgate) {
        prt_moe_router_fwd(L->z, L->x, L->gw, N, C, 1);
        prt_moe_shared_gate_fwd(L->g, L->out, L->ysum, L->z, N, C);
    }
    float aux = 0.0f;
    if (m->aux > 0) {
        prt_moe_aux_loss(L->auxb, L->logits, L->idx, m->B, m->T, E, k, m->aux, m->gate);
        for (size_t b = 0; b < m->B; b++)
            aux += L->auxb[b];
    }
    L->out[N * C] = aux;
}

typedef struct { const char *name; float *x, *grad; size_t n; } FdTensor;

/* Central differences with h; probes that change the routing are skipped. */
static int fd_moe(MoeLayer *L, const float *r, size_t nout, FdTensor *ts, int nt, double h,
                  double atol, double rtol, int *skipped, int *probes)
{
    size_t nrow = L->N * L->mc->k;
    int32_t *row0 = malloc(nrow * sizeof *row0), *idx0 = malloc(nrow * sizeof *idx0);
    moe_fwd(L);
    memcpy(row0, L->row, nrow * sizeof *row0);
    memcpy(idx0, L->idx, nrow * sizeof *idx0);
    int bad = 0;
    for (int t = 0; t < nt; t++) {
        size_t n = ts[t].n, stride = n > 40 ? n / 40 : 1;
        for (size_t i = (size_t)t % stride; i < n; i += stride) {
            float x0 = ts[t].x[i];
            double l[2];
            bool same = true;
            for (int sgn = 0; sgn < 2; sgn++) {
                ts[t].x[i] = (float)(x0 + (sgn ? -h : h));
                moe_fwd(L);
                same = same && !memcmp(L->row, row0, nrow * sizeof *row0) &&
                       !memcmp(L->idx, idx0, nrow * sizeof *idx0);
                l[sgn] = 0.0;
                for (size_t o = 0; o < nout; o++)
                    l[sgn] += (double)L->out[o] * r[o];
            }
            ts[t].x[i] = x0;
            ++*probes;
            if (!same) {
                ++*skipped;
                continue;
            }
            double ref = (l[0] - l[1]) / (2.0 * h), got = ts[t].grad[i];
            if (!(fabs(got - ref) <= atol + rtol * fabs(ref))) {
                if (bad < 5)
                    print_message("  %s mismatch at %zu: ref %.7g got %.7g\n", ts[t].name, i,
                                  ref, got);
                bad++;
            }
        }
    }
    moe_fwd(L);
    free(row0); free(idx0);
    return bad;
}

static void check_moe_layer(const MoeCase *m)
{
    MoeLayer L = {.mc = m};
    size_t N = L.N = m->B * m->T, C = m->C, E = m->E, k = m->k, F = m->F, S = m->shared;
    size_t SF = L.SF = m->SF ? m->SF : F;
    L.cap = prt_moe_capacity(m->factor, m->T, k, E);
    L.x = rnd(N * C, 1); L.wr = rnd(E * C, 1);
    L.w1 = rnd(E * 2 * F * C, 0.5f); L.w2 = rnd(E * C * F, 0.5f);
    L.s1 = rnd(S * 2 * SF * C + 1, 0.5f); L.s2 = rnd(S * C * SF + 1, 0.5f);
    L.gw = rnd(C, 1); L.z = zeros(N); L.g = zeros(N); L.ysum = zeros(N * C);
    L.logits = zeros(N * E); L.w = zeros(N * k); L.auxb = zeros(m->B);
    L.xe = zeros(N * k * C); L.he = zeros(N * k * 2 * F); L.ae = zeros(N * k * F);
    L.ye = zeros(N * k * C); L.out = zeros(N * C + 1);
    L.hs = zeros(S * N * 2 * SF); L.as = zeros(S * N * SF); L.ys = zeros(N * C);
    L.idx = malloc(N * k * sizeof *L.idx); L.row = malloc(N * k * sizeof *L.row);
    L.counts = malloc(E * sizeof *L.counts);
    moe_fwd(&L);
    size_t R = 0, dropped = 0;
    for (size_t e = 0; e < E; e++)
        R += (size_t)L.counts[e];
    for (size_t i = 0; i < N * k; i++)
        dropped += L.row[i] < 0;
    assert_int_equal(R + dropped, N * k);
    if (L.cap)   /* the case must exercise the drop it claims to */
        assert_true(dropped > 0);
    else
        assert_int_equal(dropped, 0);

    /* backward of L = sum(out * r) + 1 * sum_b aux_b */
    size_t nout = N * C + 1;
    float *r = rnd(nout, 1);
    r[N * C] = 1.0f;
    float *dx = zeros(N * C), *dxs = zeros(N * C), *dwr = zeros(E * C);
    float *dw1 = zeros(E * 2 * F * C), *dw2 = zeros(E * C * F);
    float *ds1 = zeros(S * 2 * SF * C + 1), *ds2 = zeros(S * C * SF + 1);
    float *dgw = zeros(C), *dz = zeros(N), *dys = zeros(N * C);
    const float *dshared = r;   /* the shared experts' output gradient */
    if (m->sgate) {
        moe_fwd(&L);
        prt_moe_shared_gate_bwd(dz, dys, r, L.ysum, L.g, N, C);
        prt_moe_router_bwd(dx, dgw, dz, L.x, L.gw, N, C, 1);
        dshared = dys;
    }
    float *dye = zeros(R * C + 1), *dxe = zeros(R * C + 1), *dw = zeros(N * k);
    float *dlogits = zeros(N * E);
    for (size_t s = 0; s < S; s++) {
        moe_fwd(&L);   /* hs/as hold every shared expert; ys is scratch */
        mlp_bwd(dxs, ds1 + s * 2 * SF * C, ds2 + s * C * SF, dshared, L.x, L.hs + s * N * 2 * SF,
                L.as + s * N * SF, L.s1 + s * 2 * SF * C, L.s2 + s * C * SF, N, C, SF);
        prt_add_inplace(dx, dxs, N * C);
    }
    prt_moe_combine_bwd(dye, dw, r, L.ye, L.row, L.w, N, C, k);
    for (size_t e = 0, off = 0; e < E; off += (size_t)L.counts[e], e++)
        if (L.counts[e])
            mlp_bwd(dxe + off * C, dw1 + e * 2 * F * C, dw2 + e * C * F, dye + off * C,
                    L.xe + off * C, L.he + off * 2 * F, L.ae + off * F, L.w1 + e * 2 * F * C,
                    L.w2 + e * C * F, (size_t)L.counts[e], C, F);
    prt_moe_dispatch_bwd(dxs, dxe, L.row, N, C, k);
    prt_add_inplace(dx, dxs, N * C);
    prt_moe_topk_bwd(dlogits, dw, L.w, L.idx, L.logits, N, E, k, m->gate, case_scale(m));
    if (m->aux > 0)
        prt_moe_aux_bwd(dlogits, L.logits, L.idx, m->B, m->T, E, k, m->aux, 1.0f, m->gate);
    prt_moe_router_bwd(dx, dwr, dlogits, L.x, L.wr, N, C, E);

    FdTensor ts[] = {
        {"dx", L.x, dx, N * C}, {"dWr", L.wr, dwr, E * C},
        {"dW1", L.w1, dw1, E * 2 * F * C}, {"dW2", L.w2, dw2, E * C * F},
        {"dS1", L.s1, ds1, S * 2 * SF * C}, {"dS2", L.s2, ds2, S * C * SF},
        {"dGs", L.gw, dgw, C},
    };
    int skipped = 0, probes = 0;
    print_message("  %s: %zu rows, %zu dropped\n", m->name, R, dropped);
    assert_int_equal(fd_moe(&L, r, nout, ts, m->sgate ? 7 : S ? 6 : 4, 1e-2, 2e-3, 5e-3, &skipped, &probes), 0);
    assert_true(skipped * 10 <= probes);   /* routing changes are rare probes */
    /* the router gradient is not zero when the router matters: top-1 with
     * norm has weight 1 exactly, any other gate weighs by the score */
    double gsum = 0;
    for (size_t i = 0; i < E * C; i++)
        gsum += fabs(dwr[i]);
    assert_true(k > 1 || m->aux > 0 || m->gate != PRT_MOE_NORM ? gsum > 0 : gsum == 0);

    free(r); free(dx); free(dxs); free(dwr); free(dw1); free(dw2); free(ds1); free(ds2);
    free(dye); free(dxe); free(dw); free(dlogits); free(dgw); free(dz); free(dys);
    free(L.gw); free(L.z); free(L.g); free(L.ysum);
    free(L.x); free(L.wr); free(L.w1); free(L.w2); free(L.s1); free(L.s2);
    free(L.logits); free(L.w); free(L.auxb); free(L.xe); free(L.he); free(L.ae);
    free(L.ye); free(L.out); free(L.hs); free(L.as); free(L.ys);
    free(L.idx); free(L.row); free(L.counts);
}

static const MoeCase moe_cases[] = {
    {"dropless top-2", 2, 6, 8, 4, 2, 5, 0, 0.0, 0.0f, PRT_MOE_NORM, 0, false, 0, 0, 0.0f, NULL},
    {"shared + aux", 2, 6, 8, 4, 2, 5, 1, 0.0, 0.05f, PRT_MOE_NORM, 0, false, 0, 0, 0.0f, NULL},
    {"capacity 0.5", 2, 8, 8, 4, 2, 5, 0, 0.5, 0.0f, PRT_MOE_NORM, 0, false, 0, 0, 0.0f, NULL},
    {"top-1 switch, capacity, aux, 2 shared", 2, 8, 6, 4, 1, 4, 2, 1.0, 0.1f, PRT_MOE_NORM, 0, false, 0, 0, 0.0f, NULL},
    /* the other gates: Qwen2-MoE's full softmax without renormalising (top-1
     * too: its weight is not 1), DeepSeek-V3's sigmoid renormalised, the
     * sigmoid alone; with the aux loss over their scores */
    {"softmax, no norm, aux", 2, 6, 8, 6, 2, 5, 0, 0.0, 0.05f, 0, 0, false, 0, 0, 0.0f, NULL},
    {"softmax top-1, no norm", 2, 6, 8, 4, 1, 5, 0, 0.0, 0.0f, 0, 0, false, 0, 0, 0.0f, NULL},
    {"sigmoid, norm, aux", 2, 6, 8, 6, 3, 5, 0, 0.0, 0.05f, PRT_MOE_SIGMOID | PRT_MOE_NORM, 0, false, 0, 0, 0.0f, NULL},
    {"sigmoid, no norm, capacity", 2, 8, 8, 4, 2, 5, 1, 1.0, 0.0f, PRT_MOE_SIGMOID, 0, false, 0, 0, 0.0f, NULL},
    /* shared experts of their own width (DeepSeek: S x its width; Qwen2-MoE:
     * one wider, behind a sigmoid gate per token) */
    {"2 shared of width 3", 2, 6, 8, 4, 2, 5, 2, 0.0, 0.0f, PRT_MOE_NORM, 3, false, 0, 0, 0.0f, NULL},
    {"Qwen2-MoE: gated shared of width 9, no norm", 2, 6, 8, 6, 2, 5, 1, 0.0, 0.05f, 0, 9, true, 0, 0, 0.0f, NULL},
    /* grouped routing (DeepSeek-V3: sigmoid, renormalised, 2 of 4 groups) */
    {"grouped: sigmoid, 2 of 4 groups, top-4", 2, 6, 8, 8, 4, 5, 1, 0.0, 0.05f,
     PRT_MOE_SIGMOID | PRT_MOE_NORM, 0, false, 4, 2, 0.0f, NULL},
    {"grouped: softmax without norm, 1 of 2 groups", 2, 6, 8, 6, 2, 5, 0, 0.0, 0.0f, 0, 0, false, 2, 1, 0.0f, NULL},
    /* DeepSeek's routed_scaling_factor on the routed weights (V3: 2.5 after
     * the norm; V2: 16 on the raw softmax), its expert bias in the choice
     * only (V3's noaux_tc, grouped), V2's groups ranked by their largest */
    {"routed_scale 2.5: sigmoid, norm, aux", 2, 6, 8, 6, 3, 5, 1, 0.0, 0.05f, PRT_MOE_SIGMOID | PRT_MOE_NORM,
     0, false, 0, 0, 2.5f, NULL},
    {"routed_scale 16: softmax, no norm, capacity", 2, 8, 8, 4, 2, 5, 0, 1.0, 0.0f, 0, 0, false, 0, 0, 16.0f, NULL},
    {"bias, grouped 2 of 4, routed_scale 2.5", 2, 6, 8, 8, 4, 5, 1, 0.0, 0.0f, PRT_MOE_SIGMOID | PRT_MOE_NORM,
     0, false, 4, 2, 2.5f, (const float[8]){0.3f, -0.2f, 0.1f, 0.0f, -0.4f, 0.25f, -0.1f, 0.05f}},
    {"groups by their max: softmax, no norm, 2 of 3", 2, 6, 8, 6, 4, 5, 0, 0.0, 0.0f, PRT_MOE_GROUP_MAX, 0, false,
     3, 2, 0.0f, NULL},
};

static void test_moe_layer(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof moe_cases / sizeof *moe_cases; c++)
        check_moe_layer(&moe_cases[c]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk_ties),
        cmocka_unit_test(test_gate_weights),
        cmocka_unit_test(test_grouped_routing),
        cmocka_unit_test(test_routed_scale),
        cmocka_unit_test(test_expert_bias),
        cmocka_unit_test(test_group_max),
        cmocka_unit_test(test_bias_update),
        cmocka_unit_test(test_route_capacity),
        cmocka_unit_test(test_recv_order),
        cmocka_unit_test(test_aux_loss),
        cmocka_unit_test(test_moe_layer),
    };
    return cmocka_run_group_tests_name("ops_moe", tests, NULL, NULL);
}
