/*
 * test_ops_dropout.c: the CPU dropout kernels (runtime/ops/dropout.c) and
 * attention with dropout on its probabilities (cmocka).
 *
 * What must hold: the fraction dropped is P within a few sigma; kept
 * elements are scaled by exactly 1/(1-P); the backward is the forward's
 * transpose; a key draws one mask, another key another; and a shard of
 * rows, heads or sequences (what SP, TP and DP hand a rank) draws the
 * very mask the whole tensor does. Attention's backward through the
 * dropped probabilities matches central finite differences.
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

#define TEST_RAND_SEED 7
#include "tests/test_rand.h"

static size_t dropped(const uint8_t *mask, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += mask[i] == 0;
    return d;
}

/* 1e5 elements of a residual site (250 rows of 400 features, T 50): the
 * dropped count is within 5 sigma of n P for each P, every kept element
 * is x / (1 - P) bit for bit, every dropped one 0, and the mask is 0/1. */
static void test_fraction_and_scale(void **state)
{
    (void)state;
    static const float ps[] = { 0.1f, 0.3f, 0.5f, 0.9f };
    size_t rows = 250, C = 400, n = rows * C;
    float *x = rnd(n, 2.0f), *y = malloc(n * sizeof *y);
    uint8_t *mask = malloc(n);
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        prt_dropout_key k = { 42, 3, 5, PRT_DROPOUT_OUTPUT, ps[i] };
        prt_dropout_fwd(y, mask, x, &k, rows, C, 50, 0, 0);
        double mean = (double)n * ps[i], sigma = sqrt((double)n * ps[i] * (1 - ps[i]));
        size_t d = dropped(mask, n);
        if (fabs((double)d - mean) > 5 * sigma)
            fail_msg("P %.2f: dropped %zu of %zu, expected %.0f +- %.0f", ps[i], d, n, mean, 5 * sigma);
        float scale = 1.0f / (1.0f - ps[i]);
        for (size_t j = 0; j < n; j++) {
            assert_true(mask[j] <= 1);
            assert_true(y[j] == (mask[j] ? x[j] * scale : 0.0f));
        }
    }
    /* P 0 keeps everything unscaled */
    prt_dropout_key k0 = { 42, 3, 5, PRT_DROPOUT_OUTPUT, 0.0f };
    prt_dropout_fwd(y, mask, x, &k0, rows, C, 50, 0, 0);
    assert_int_equal(dropped(mask, n), 0);
    assert_memory_equal(y, x, n * sizeof *x);
    free(x); free(y); free(mask);
}

/* The probabilities' site: only keys up to the query are drawn (the rest
 * stay 0 in y and mask), at rate P within 5 sigma over 1e5 causal entries. */
static void test_probs_fraction(void **state)
{
    (void)state;
    size_t B = 2, H = 4, T = 110, n = B * H * T * T, causal = B * H * T * (T + 1) / 2;
    float *att = rnd(n, 1.0f), *y = malloc(n * sizeof *y);
    uint8_t *mask = malloc(n);
    prt_dropout_key k = { 1, 0, 1, PRT_DROPOUT_PROBS, 0.2f };
    prt_dropout_probs_fwd(y, mask, att, &k, B, H, T, 0, 0);
    size_t kept = 0;
    for (size_t bh = 0; bh < B * H; bh++)
        for (size_t t = 0; t < T; t++)
            for (size_t j = 0; j < T; j++) {
                size_t i = (bh * T + t) * T + j;
                if (j > t) { assert_int_equal(mask[i], 0); assert_true(y[i] == 0.0f); }
                else kept += mask[i];
            }
    double mean = causal * 0.8, sigma = sqrt(causal * 0.2 * 0.8);
    if (fabs((double)kept - mean) > 5 * sigma)
        fail_msg("kept %zu of %zu causal probabilities, expected %.0f +- %.0f", kept, causal, mean, 5 * sigma);
    free(att); free(y); free(mask);
}

/* The backward is the transpose of the forward (a diagonal): <dy, D x> ==
 * <D^T dy, x>, and dx is dy * mask / (1 - P) element by element, in place
 * too. */
static void test_forward_backward(void **state)
{
    (void)state;
    size_t rows = 64, C = 96, n = rows * C;
    float *x = rnd(n, 1.0f), *dy = rnd(n, 1.0f), *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx);
    uint8_t *mask = malloc(n);
    prt_dropout_key k = { 9, 1, 2, PRT_DROPOUT_OUTPUT, 0.25f };
    prt_dropout_fwd(y, mask, x, &k, rows, C, 16, 0, 0);
    prt_dropout_bwd(dx, dy, mask, k.p, n);
    double a = 0, b = 0;
    for (size_t i = 0; i < n; i++) {
        a += (double)dy[i] * y[i];
        b += (double)dx[i] * x[i];
        assert_true(dx[i] == (mask[i] ? dy[i] * (1.0f / 0.75f) : 0.0f));
    }
    assert_true(fabs(a - b) <= 1e-5 * (fabs(a) + 1));
    prt_dropout_bwd(dy, dy, mask, k.p, n);   /* in place */
    assert_memory_equal(dy, dx, n * sizeof *dx);
    /* the forward in place draws the same */
    float *z = malloc(n * sizeof *z);
    memcpy(z, x, n * sizeof *z);
    prt_dropout_fwd(z, mask, z, &k, rows, C, 16, 0, 0);
    assert_memory_equal(z, y, n * sizeof *z);
    free(x); free(dy); free(y); free(dx); free(mask); free(z);
}

/* Same key, same mask (a recomputation); a change of seed, step, layer or
 * site draws an independent one: agreement near P^2 + (1-P)^2, not 1. */
static void test_keys(void **state)
{
    (void)state;
    size_t rows = 100, C = 100, n = rows * C;
    float *x = rnd(n, 1.0f), *y = malloc(n * sizeof *y);
    uint8_t *m0 = malloc(n), *m1 = malloc(n);
    const prt_dropout_key base = { 42, 7, 3, PRT_DROPOUT_OUTPUT, 0.5f };
    prt_dropout_fwd(y, m0, x, &base, rows, C, 20, 0, 0);
    prt_dropout_fwd(y, m1, x, &base, rows, C, 20, 0, 0);
    assert_memory_equal(m0, m1, n);
    for (int v = 0; v < 4; v++) {
        prt_dropout_key k = base;
        if (v == 0) k.seed++;
        if (v == 1) k.step++;
        if (v == 2) k.layer++;
        if (v == 3) k.site = PRT_DROPOUT_PROBS;
        prt_dropout_fwd(y, m1, x, &k, rows, C, 20, 0, 0);
        size_t same = 0;
        for (size_t i = 0; i < n; i++)
            same += m0[i] == m1[i];
        /* independent masks at P 0.5 agree on n/2 +- 5 sigma (sigma 50) */
        if (fabs((double)same - n / 2.0) > 250)
            fail_msg("key change %d: %zu of %zu mask bytes agree (independent: ~%zu)", v, same, n, n / 2);
    }
    free(x); free(y); free(m0); free(m1);
}

/* A shard draws the whole tensor's mask: rows [r0, r0 + k) of a micro-batch
 * (sequence parallelism), a micro-batch that starts at global sequence s0
 * (data parallelism: its rows are the whole batch's from s0 * T on), and
 * heads [h0, h0 + k) of the probabilities (tensor parallelism). */
static void test_shards(void **state)
{
    (void)state;
    size_t T = 12, Bg = 4, C = 20, rows = Bg * T, n = rows * C;
    float *x = rnd(n, 1.0f), *y = malloc(n * sizeof *y), *ys = malloc(n * sizeof *ys);
    uint8_t *m = malloc(n), *ms = malloc(n);
    prt_dropout_key k = { 5, 2, 4, PRT_DROPOUT_OUTPUT, 0.3f };
    prt_dropout_fwd(y, m, x, &k, rows, C, T, 0, 0);   /* the whole global batch, one rank */
    /* DP 2 x SP 2: rank (d, t) holds rows [t * T, (t + 1) * T) of the micro-batch of sequences [2d, 2d + 2) */
    for (size_t d = 0; d < 2; d++)
        for (size_t t = 0; t < 2; t++) {
            size_t off = (d * 2 * T + t * T) * C;
            prt_dropout_fwd(ys, ms, x + off, &k, T, C, T, 2 * d, t * T);
            assert_memory_equal(ms, m + off, T * C);
            assert_memory_equal(ys, y + off, T * C * sizeof *ys);
        }
    /* TP 2 on the probabilities: heads [2r, 2r + 2) of 4, sequence 1 of the batch */
    size_t H = 4, na = H * T * T, half = na / 2;
    float *att = rnd(na, 1.0f), *pa = malloc(na * sizeof *pa), *ps = malloc(half * sizeof *ps);
    uint8_t *ma = malloc(na), *mp = malloc(half);
    prt_dropout_key kp = { 5, 2, 4, PRT_DROPOUT_PROBS, 0.3f };
    prt_dropout_probs_fwd(pa, ma, att, &kp, 1, H, T, 1, 0);
    for (size_t r = 0; r < 2; r++) {
        prt_dropout_probs_fwd(ps, mp, att + r * half, &kp, 1, H / 2, T, 1, r * H / 2);
        assert_memory_equal(mp, ma + r * half, half);
        assert_memory_equal(ps, pa + r * half, half * sizeof *ps);
    }
    free(x); free(y); free(ys); free(m); free(ms); free(att); free(pa); free(ps); free(ma); free(mp);
}

/* ---- attention with dropout ---------------------------------------------- */

typedef struct { float *out, *att, *attd, *qkv; uint8_t *mask; prt_dropout_key k; size_t B, T, H, Hkv, D; } Ctx;

static void drop_att_fwd(Ctx *c)
{
    prt_attention_probs_fwd(c->att, c->qkv, c->B, c->T, c->H, c->Hkv, c->D, 0);
    prt_dropout_probs_fwd(c->attd, c->mask, c->att, &c->k, c->B, c->H, c->T, 0, 0);
    prt_attention_context_fwd(c->out, c->attd, c->qkv, c->B, c->T, c->H, c->Hkv, c->D);
}

static double loss(Ctx *c, const float *r, size_t n)
{
    drop_att_fwd(c);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)c->out[i] * r[i];
    return s;
}

/* P 0: the three pieces are prt_attention_fwd and the dropout backward is
 * prt_attention_bwd, bit for bit. P 0.3: dqkv matches central finite
 * differences of sum(out * r) (the mask is a function of the key, not of
 * qkv), tolerance 1e-3 + 2e-3 |ref| as test_ops.c's attention. */
static void test_attention_dropout(void **state)
{
    (void)state;
    Ctx c = { .B = 2, .T = 6, .H = 4, .Hkv = 2, .D = 4 };
    size_t R = (c.H + 2 * c.Hkv) * c.D, N = c.B * c.T, nout = N * c.H * c.D, natt = c.B * c.H * c.T * c.T;
    c.qkv = rnd(N * R, 1.5f);
    c.out = calloc(nout, sizeof *c.out); c.att = calloc(natt, sizeof *c.att);
    c.attd = calloc(natt, sizeof *c.attd); c.mask = malloc(natt);
    float *r = rnd(nout, 1.0f), *dqkv = calloc(N * R, sizeof *dqkv), *datt = calloc(natt, sizeof *datt);
    float *out0 = calloc(nout, sizeof *out0), *att0 = calloc(natt, sizeof *att0);
    float *dqkv0 = calloc(N * R, sizeof *dqkv0), *datt0 = calloc(natt, sizeof *datt0);

    c.k = (prt_dropout_key){ 3, 0, 1, PRT_DROPOUT_PROBS, 0.0f };
    drop_att_fwd(&c);
    prt_attention_fwd(out0, att0, c.qkv, c.B, c.T, c.H, c.Hkv, c.D, 0);
    assert_memory_equal(c.out, out0, nout * sizeof *out0);
    prt_attention_dropout_bwd(dqkv, datt, r, c.qkv, c.att, c.attd, c.mask, 0.0f, c.B, c.T, c.H, c.Hkv, c.D, 0);
    prt_attention_bwd(dqkv0, datt0, r, c.qkv, att0, false, c.B, c.T, c.H, c.Hkv, c.D, 0);
    assert_memory_equal(dqkv, dqkv0, N * R * sizeof *dqkv);

    c.k.p = 0.3f;
    drop_att_fwd(&c);
    assert_true(dropped(c.mask, natt) > natt / 2);   /* the upper triangle and 0.3 of the rest */
    prt_attention_dropout_bwd(dqkv, datt, r, c.qkv, c.att, c.attd, c.mask, c.k.p, c.B, c.T, c.H, c.Hkv, c.D, 0);
    int bad = 0;
    for (size_t i = 0; i < N * R; i += 3) {
        float x0 = c.qkv[i];
        c.qkv[i] = x0 + 1e-2f;
        double lp = loss(&c, r, nout);
        c.qkv[i] = x0 - 1e-2f;
        double lm = loss(&c, r, nout);
        c.qkv[i] = x0;
        double ref = (lp - lm) / 2e-2;
        if (!(fabs(dqkv[i] - ref) <= 1e-3 + 2e-3 * fabs(ref))) {
            if (bad < 5) print_message("  dqkv[%zu]: finite differences %.6g, backward %.6g\n", i, ref, dqkv[i]);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
    free(c.qkv); free(c.out); free(c.att); free(c.attd); free(c.mask); free(r); free(dqkv); free(datt);
    free(out0); free(att0); free(dqkv0); free(datt0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fraction_and_scale),
        cmocka_unit_test(test_probs_fraction),
        cmocka_unit_test(test_forward_backward),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_attention_dropout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
