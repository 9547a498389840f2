/*
 * test_fp8.c: planrt's FP8 numerics (runtime/ops/fp8.c, prt_ops.h's
 * codec) against hand-made cases and double-precision references
 * (cmocka). The bit-for-bit comparison with ml_dtypes on a million values
 * is tests/fp8/ref_check.py; this file holds the rules one can state:
 * every code round-trips, ties go to even, subnormals, saturation, each
 * recipe's scales, the quantisation error bound and the scaled GEMM.
 */
#include <float.h>
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

#define TEST_RAND_SEED 27
#include "tests/test_rand.h"

static const prt_fp8_format FORMATS[] = { PRT_FP8_E4M3, PRT_FP8_E5M2 };
static const char *const FMT_NAME[] = { "e4m3", "e5m2" };

static bool is_nan_code(uint8_t c, prt_fp8_format f)
{
    return f == PRT_FP8_E4M3 ? (c & 0x7F) == 0x7F : (c & 0x7F) > 0x7C;
}

/* ---- the codec ----------------------------------------------------------- */

/* decode -> encode gives the code back for all 256 codes of both formats
 * and both modes; NaN codes give a NaN code; E5M2's inf gives inf
 * (non-saturating) or max (saturating). */
static void test_roundtrip_all_codes(void **state)
{
    (void)state;
    for (size_t fi = 0; fi < 2; fi++) {
        prt_fp8_format f = FORMATS[fi];
        int nan_codes = 0, finite = 0;
        for (int c = 0; c < 256; c++) {
            float v = prt_fp8_decode((uint8_t)c, f);
            uint8_t ns = prt_fp8_encode(v, f, PRT_FP8_NONSAT);
            uint8_t sa = prt_fp8_encode(v, f, PRT_FP8_SAT);
            if (is_nan_code((uint8_t)c, f)) {
                assert_true(isnan(v));
                assert_true(is_nan_code(ns, f) && is_nan_code(sa, f));
                nan_codes++;
            } else if (isinf(v)) {
                assert_int_equal(f, PRT_FP8_E5M2);
                assert_int_equal(ns, c);
                assert_int_equal(sa, (c & 0x80) | 0x7B);
            } else {
                assert_int_equal(ns, c);
                assert_int_equal(sa, c);
                finite++;
            }
        }
        print_message("  %s: %d finite codes round-trip, %d NaN codes\n", FMT_NAME[fi], finite,
                      nan_codes);
        /* OFP8 table 1: E4M3 has 2 NaN codes (S.1111.111), E5M2 6 (S.11111.{01,10,11}) */
        assert_int_equal(nan_codes, f == PRT_FP8_E4M3 ? 2 : 6);
        assert_int_equal(finite, f == PRT_FP8_E4M3 ? 254 : 248);
    }
}

/* Decoded values from OFP8 rev. 1.0 table 1 (max, min normal, min
 * subnormal, one) and the order of codes: positive codes increase. */
static void test_decode_values(void **state)
{
    (void)state;
    assert_true(prt_fp8_decode(0x7E, PRT_FP8_E4M3) == 448.0f);
    assert_true(prt_fp8_decode(0x08, PRT_FP8_E4M3) == ldexpf(1, -6));
    assert_true(prt_fp8_decode(0x01, PRT_FP8_E4M3) == ldexpf(1, -9));
    assert_true(prt_fp8_decode(0x07, PRT_FP8_E4M3) == 7 * ldexpf(1, -9));
    assert_true(prt_fp8_decode(0x38, PRT_FP8_E4M3) == 1.0f);
    assert_true(prt_fp8_decode(0xB8, PRT_FP8_E4M3) == -1.0f);
    assert_true(signbit(prt_fp8_decode(0x80, PRT_FP8_E4M3)));
    assert_true(prt_fp8_decode(0x7B, PRT_FP8_E5M2) == 57344.0f);
    assert_true(prt_fp8_decode(0x04, PRT_FP8_E5M2) == ldexpf(1, -14));
    assert_true(prt_fp8_decode(0x01, PRT_FP8_E5M2) == ldexpf(1, -16));
    assert_true(prt_fp8_decode(0x3C, PRT_FP8_E5M2) == 1.0f);
    assert_true(isinf(prt_fp8_decode(0x7C, PRT_FP8_E5M2)));
    assert_true(prt_fp8_decode(0xFC, PRT_FP8_E5M2) < 0);
    for (size_t fi = 0; fi < 2; fi++)
        for (int c = 1; c < 0x7F; c++) {
            float a = prt_fp8_decode((uint8_t)(c - 1), FORMATS[fi]);
            float b = prt_fp8_decode((uint8_t)c, FORMATS[fi]);
            if (!isnan(b))
                assert_true(a < b);
        }
}

typedef struct {
    prt_fp8_format f;
    prt_fp8_mode mode;
    float x;
    uint8_t want;
    const char *why;
} encode_case;

#define CASE(F, M, X, W, WHY) \
    { .f = PRT_FP8_##F, .mode = PRT_FP8_##M, .x = (X), .want = (W), .why = (WHY) }

static void run_encode_cases(const encode_case *cs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t got = prt_fp8_encode(cs[i].x, cs[i].f, cs[i].mode);
        if (got != cs[i].want)
            print_message("  %s: x %.9g: want 0x%02x got 0x%02x\n", cs[i].why, (double)cs[i].x,
                          cs[i].want, got);
        assert_int_equal(got, cs[i].want);
    }
}

/* Ties go to the even mantissa, on normals and subnormals. */
static void test_ties_and_subnormals(void **state)
{
    (void)state;
    const float u4 = ldexpf(1, -9), u5 = ldexpf(1, -16);  /* the smallest subnormals */
    const encode_case cs[] = {
        CASE(E4M3, NONSAT, 1.0625f, 0x38, "tie 1 | 1.125 -> 1 (even)"),
        CASE(E4M3, NONSAT, 1.1875f, 0x3A, "tie 1.125 | 1.25 -> 1.25 (even)"),
        CASE(E4M3, NONSAT, nextafterf(1.0625f, 2), 0x39, "past the tie"),
        CASE(E4M3, NONSAT, nextafterf(1.0625f, 0), 0x38, "before the tie"),
        CASE(E4M3, NONSAT, -1.1875f, 0xBA, "negative tie"),
        CASE(E4M3, NONSAT, 0.5f * u4, 0x00, "half the min subnormal -> 0 (even)"),
        CASE(E4M3, NONSAT, nextafterf(0.5f * u4, 1), 0x01, "just past it"),
        CASE(E4M3, NONSAT, 1.5f * u4, 0x02, "tie 1 | 2 subnormal units -> 2"),
        CASE(E4M3, NONSAT, 2.5f * u4, 0x02, "tie 2 | 3 units -> 2"),
        CASE(E4M3, NONSAT, 7.5f * u4, 0x08, "tie max subnormal | min normal"),
        CASE(E4M3, NONSAT, 1e-30f, 0x00, "far below"),
        CASE(E4M3, NONSAT, -1e-30f, 0x80, "far below, negative: -0"),
        CASE(E4M3, NONSAT, 1e-40f, 0x00, "an fp32 subnormal"),
        CASE(E5M2, NONSAT, 1.125f, 0x3C, "tie 1 | 1.25 -> 1"),
        CASE(E5M2, NONSAT, 1.375f, 0x3E, "tie 1.25 | 1.5 -> 1.5"),
        CASE(E5M2, NONSAT, 0.5f * u5, 0x00, "half the min subnormal"),
        CASE(E5M2, NONSAT, 1.5f * u5, 0x02, "tie 1 | 2 units"),
        CASE(E5M2, NONSAT, 3.5f * u5, 0x04, "tie max subnormal | min normal"),
        CASE(E5M2, NONSAT, 3.0f * u5, 0x03, "a subnormal exactly"),
    };
    run_encode_cases(cs, sizeof cs / sizeof cs[0]);
}

/* Beyond max: the saturating mode clamps (inf too), the plain one rounds
 * to E4M3's NaN or E5M2's inf past the last tie. */
static void test_saturation(void **state)
{
    (void)state;
    const encode_case cs[] = {
        CASE(E4M3, SAT, 449.0f, 0x7E, "sat: just past max"),
        CASE(E4M3, SAT, 1e30f, 0x7E, "sat: far past"),
        CASE(E4M3, SAT, -1e30f, 0xFE, "sat: negative"),
        CASE(E4M3, SAT, INFINITY, 0x7E, "sat: inf -> max"),
        CASE(E4M3, SAT, -INFINITY, 0xFE, "sat: -inf -> -max"),
        CASE(E4M3, SAT, NAN, 0x7F, "sat: NaN stays NaN"),
        CASE(E4M3, NONSAT, 464.0f, 0x7E, "tie 448 | (480) -> 448 (even)"),
        CASE(E4M3, NONSAT, nextafterf(464.0f, 1e9f), 0x7F, "past: NaN"),
        CASE(E4M3, NONSAT, INFINITY, 0x7F, "inf: NaN (no inf in E4M3)"),
        CASE(E4M3, NONSAT, -INFINITY, 0xFF, "-inf: -NaN"),
        CASE(E5M2, SAT, 60000.0f, 0x7B, "sat e5m2"),
        CASE(E5M2, SAT, -INFINITY, 0xFB, "sat e5m2 -inf"),
        CASE(E5M2, NONSAT, 61440.0f, 0x7C, "tie 57344 | (65536) -> inf (even)"),
        CASE(E5M2, NONSAT, nextafterf(61440.0f, 0), 0x7B, "before it: max"),
        CASE(E5M2, NONSAT, -INFINITY, 0xFC, "-inf"),
        CASE(E5M2, NONSAT, -NAN, 0xFE, "-NaN"),
    };
    run_encode_cases(cs, sizeof cs / sizeof cs[0]);
}

/* ---- scales -------------------------------------------------------------- */

static void test_tensorwise_scales(void **state)
{
    (void)state;
    prt_fp8_cfg c4 = prt_fp8_cfg_default(PRT_FP8_TENSORWISE, PRT_FP8_E4M3, false);
    prt_fp8_cfg c5 = prt_fp8_cfg_default(PRT_FP8_TENSORWISE, PRT_FP8_E5M2, false);
    assert_false(c4.pow2);
    assert_true(prt_fp8_scale_from_amax(0.0f, &c4) == 1.0f);          /* zero tensor */
    assert_true(prt_fp8_scale_from_amax(2.0f, &c4) == 224.0f);        /* 448 / 2 */
    assert_true(prt_fp8_scale_from_amax(3.0f, &c4) == 448.0f / 3.0f);
    assert_true(prt_fp8_scale_from_amax(4.0f, &c5) == 14336.0f);      /* 57344 / 4 */
    assert_true(prt_fp8_scale_from_amax(INFINITY, &c4) == 1.0f);
    assert_true(prt_fp8_scale_from_amax(NAN, &c4) == 1.0f);
    assert_true(prt_fp8_scale_from_amax(1e-38f, &c4) == FLT_MAX);     /* 448e38 overflows */
    c4.pow2 = c5.pow2 = true;
    assert_true(prt_fp8_scale_from_amax(2.0f, &c4) == 128.0f);        /* 224 down to 2^7 */
    assert_true(prt_fp8_scale_from_amax(4.0f, &c5) == 8192.0f);
    assert_true(prt_fp8_scale_from_amax(1e-38f, &c4) == ldexpf(1, 127));
    assert_true(prt_fp8_scale_from_amax(0.0f, &c4) == 1.0f);
    c4.amax_eps = 1e-12f;   /* TE amax_epsilon floors amax before dividing */
    c4.pow2 = false;
    assert_true(prt_fp8_scale_from_amax(0.0f, &c4) == 448.0f / 1e-12f);

    /* one scale over the whole tensor, whichever direction K runs */
    float x[6] = { 0.5f, -2.0f, 1.0f, 0.0f, 0.25f, 1.5f };
    uint8_t q[6];
    float si;
    prt_fp8_tensor t = { .q = q, .scale_inv = &si };
    float amax;
    prt_fp8_cfg c = prt_fp8_cfg_default(PRT_FP8_TENSORWISE, PRT_FP8_E4M3, false);
    assert_int_equal(prt_fp8_quantize(&t, x, &c, PRT_FP8_K_ROWS, 2, 3, NULL, &amax), PRT_OK);
    assert_int_equal(prt_fp8_nblocks(&t.g), 1);
    assert_true(amax == 2.0f);
    assert_true(si == 1.0f / 224.0f);
    assert_int_equal(q[1], prt_fp8_encode(-448.0f, PRT_FP8_E4M3, PRT_FP8_SAT));
}

/* Rowwise: one scale per K-vector, a zero row gets 1. */
static void test_rowwise_scales(void **state)
{
    (void)state;
    float x[3 * 4] = { 1, -4, 2, 0.5f,   0, 0, 0, 0,   3, 1, -0.25f, 2 };
    uint8_t q[12];
    float si[4];
    prt_fp8_tensor t = { .q = q, .scale_inv = si };
    prt_fp8_cfg c = prt_fp8_cfg_default(PRT_FP8_ROWWISE, PRT_FP8_E4M3, false);
    assert_true(c.pow2);   /* torchao's rowwise recipe */
    assert_int_equal(prt_fp8_quantize(&t, x, &c, PRT_FP8_K_COLS, 3, 4, NULL, NULL), PRT_OK);
    assert_int_equal(t.g.nbr, 3);
    assert_int_equal(t.g.nbc, 1);
    assert_true(si[0] == 1.0f / 64.0f);   /* 448/4 = 112 -> 64 */
    assert_true(si[1] == 1.0f);           /* the zero row */
    assert_true(si[2] == 1.0f / 128.0f);  /* 448/3 = 149.3 -> 128 */
    for (int i = 4; i < 8; i++)
        assert_int_equal(q[i], 0);
    /* K along the rows: one scale per column */
    assert_int_equal(prt_fp8_quantize(&t, x, &c, PRT_FP8_K_ROWS, 3, 4, NULL, NULL), PRT_OK);
    assert_int_equal(t.g.nbr, 1);
    assert_int_equal(t.g.nbc, 4);
    assert_true(si[0] == 1.0f / 128.0f);  /* column 0: amax 3 */
    assert_true(si[1] == 1.0f / 64.0f);   /* column 1: amax 4 */
    assert_true(si[2] == 1.0f / 128.0f);  /* column 2: amax 2 -> 224 -> 128 */
    assert_true(si[3] == 1.0f / 128.0f);  /* column 3: amax 2 */
}

/* Blockwise grids: 1 x 128 along K for activations, 128 x 128 for
 * weights, edge blocks cut short; each block its own amax. */
static void test_blockwise_grid(void **state)
{
    (void)state;
    prt_fp8_grid g;
    prt_fp8_cfg a = prt_fp8_cfg_default(PRT_FP8_BLOCKWISE, PRT_FP8_E4M3, false);
    prt_fp8_cfg w = prt_fp8_cfg_default(PRT_FP8_BLOCKWISE, PRT_FP8_E4M3, true);
    assert_int_equal(prt_fp8_grid_of(&g, &a, 2, 300, PRT_FP8_K_COLS), PRT_OK);
    assert_int_equal(g.br, 1);
    assert_int_equal(g.bc, 128);
    assert_int_equal(g.nbr * 10 + g.nbc, 23);
    assert_int_equal(prt_fp8_grid_of(&g, &a, 300, 2, PRT_FP8_K_ROWS), PRT_OK);
    assert_int_equal(g.br * 1000 + g.bc, 128001);
    assert_int_equal(prt_fp8_grid_of(&g, &w, 300, 200, PRT_FP8_K_COLS), PRT_OK);
    assert_int_equal(g.br * 1000 + g.bc, 128128);
    assert_int_equal(g.nbr * 10 + g.nbc, 32);
    prt_fp8_cfg m = prt_fp8_cfg_default(PRT_FP8_MXFP8, PRT_FP8_E4M3, true);
    assert_int_equal(prt_fp8_grid_of(&g, &m, 4, 70, PRT_FP8_K_COLS), PRT_OK);
    assert_int_equal(g.bc * 100 + g.nbc, 3203);
    assert_int_equal(prt_fp8_grid_of(&g, &a, 0, 3, PRT_FP8_K_COLS), PRT_ERR_ARG);

    /* amax per block: a 2 x 300 matrix, the second block of row 1 zero */
    float *x = rnd(600, 1.0f);
    for (size_t c = 128; c < 256; c++)
        x[300 + c] = 0.0f;
    x[5] = 8.0f;           /* row 0, block 0 */
    x[300 + 299] = -0.5f;  /* row 1's edge block: its amax is over 44 elements */
    float amax[6];
    assert_int_equal(prt_fp8_grid_of(&g, &a, 2, 300, PRT_FP8_K_COLS), PRT_OK);
    prt_fp8_amax(amax, x, &g);
    assert_true(amax[0] == 8.0f);
    assert_true(amax[4] == 0.0f);
    assert_true(amax[5] >= 0.5f && amax[5] <= 1.0f);
    assert_true(prt_fp8_scale_from_amax(amax[0], &a) == 32.0f);  /* 56 -> 32 */
    assert_true(prt_fp8_scale_from_amax(amax[4], &a) == 1.0f);
    x[7] = NAN;            /* a NaN makes its block's amax NaN */
    prt_fp8_amax(amax, x, &g);
    assert_true(isnan(amax[0]));
    free(x);
}

/* MXFP8: X = 2^(floor(log2 amax) - emax_elem), E8M0-coded. */
static void test_mx_scales(void **state)
{
    (void)state;
    prt_fp8_cfg m4 = prt_fp8_cfg_default(PRT_FP8_MXFP8, PRT_FP8_E4M3, false);
    prt_fp8_cfg m5 = prt_fp8_cfg_default(PRT_FP8_MXFP8, PRT_FP8_E5M2, false);
    assert_true(prt_fp8_scale_from_amax(1.0f, &m4) == 256.0f);     /* X = 2^(0-8) */
    assert_true(prt_fp8_scale_from_amax(1.99f, &m4) == 256.0f);
    assert_true(prt_fp8_scale_from_amax(448.0f, &m4) == 1.0f);     /* 2^(8-8) */
    assert_true(prt_fp8_scale_from_amax(500.0f, &m4) == 1.0f);     /* 500 saturates to 448 */
    assert_true(prt_fp8_scale_from_amax(1.0f, &m5) == 32768.0f);   /* X = 2^-15 */
    assert_true(prt_fp8_scale_from_amax(0.0f, &m4) == 1.0f);
    assert_true(isnan(prt_fp8_scale_from_amax(INFINITY, &m4)));
    assert_true(prt_fp8_scale_from_amax(ldexpf(1, -140), &m4) == ldexpf(1, 127));  /* clamped */
    assert_true(prt_fp8_scale_from_amax(FLT_MAX, &m4) == ldexpf(1, -119));
    assert_int_equal(prt_e8m0_encode(ldexpf(1, -8)), 119);
    assert_int_equal(prt_e8m0_encode(ldexpf(1, -127)), 0);
    assert_int_equal(prt_e8m0_encode(ldexpf(1, 127)), 254);
    assert_int_equal(prt_e8m0_encode(NAN), 255);
    for (int c = 0; c < 255; c++)
        assert_int_equal(prt_e8m0_encode(prt_e8m0_decode((uint8_t)c)), c);
    assert_true(isnan(prt_e8m0_decode(255)));

    /* a block whose amax is just below a power of two: elements past 448 X clamp */
    float x[32] = { 0 };
    x[0] = 511.0f, x[1] = 1.0f, x[2] = -470.0f;
    uint8_t q[32];
    float si;
    prt_fp8_tensor t = { .q = q, .scale_inv = &si };
    assert_int_equal(prt_fp8_quantize(&t, x, &m4, PRT_FP8_K_COLS, 1, 32, NULL, NULL), PRT_OK);
    assert_true(si == 1.0f);
    assert_int_equal(q[0], 0x7E);
    assert_int_equal(q[2], 0xFE);
    assert_int_equal(q[1], 0x38);
}

/* DELAYED: the scale of a step comes from the window of past amaxes. */
static void test_delayed_scales(void **state)
{
    (void)state;
    float buf[3];
    prt_fp8_history h;
    prt_fp8_cfg c = prt_fp8_cfg_default(PRT_FP8_DELAYED, PRT_FP8_E4M3, false);
    assert_int_equal(prt_fp8_history_init(&h, buf, 3), PRT_OK);
    assert_int_equal(prt_fp8_history_init(&h, buf, 0), PRT_ERR_ARG);
    assert_int_equal(prt_fp8_history_init(&h, buf, 3), PRT_OK);
    assert_true(h.scale == 1.0f);
    static const struct { float amax; float scale; } steps[] = {
        { 0.0f, 1.0f },     /* nothing seen: keep 1 */
        { 2.0f, 224.0f },   /* window 0, 2 */
        { 8.0f, 56.0f },    /* 0, 2, 8 */
        { 1.0f, 56.0f },    /* 2, 8, 1 */
        { 1.0f, 56.0f },    /* 8, 1, 1 */
        { 1.0f, 448.0f },   /* 1, 1, 1: 8 left the window */
        { INFINITY, 448.0f }, /* not finite: keep */
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        prt_fp8_history_record(&h, steps[i].amax);
        prt_fp8_history_record(&h, steps[i].amax * 0.5f);  /* a second cast of the step */
        assert_true(prt_fp8_history_update(&h, &c) == steps[i].scale);
    }
    c.margin = 1;   /* TE: (448 / 2^margin) / amax */
    float buf2[2];
    assert_int_equal(prt_fp8_history_init(&h, buf2, 2), PRT_OK);
    prt_fp8_history_record(&h, 4.0f);
    assert_true(prt_fp8_history_update(&h, &c) == 56.0f);

    /* quantise casts with the step's scale and records the amax */
    float x[4] = { 1.0f, -3.0f, 0.5f, 2.0f };
    uint8_t q[4];
    float si;
    prt_fp8_tensor t = { .q = q, .scale_inv = &si };
    assert_int_equal(prt_fp8_quantize(&t, x, &c, PRT_FP8_K_COLS, 2, 2, NULL, NULL), PRT_ERR_ARG);
    assert_int_equal(prt_fp8_quantize(&t, x, &c, PRT_FP8_K_COLS, 2, 2, &h, NULL), PRT_OK);
    assert_true(si == 1.0f / 56.0f);
    assert_true(h.pending == 3.0f);
    assert_int_equal(q[1], prt_fp8_encode(-168.0f, PRT_FP8_E4M3, PRT_FP8_SAT));
}

/* DELAYED against Transformer Engine's kernel written out independently
 * (v2.20, transformer_engine/common/recipe/delayed_scaling.cu,
 * amax_and_scale_update_impl::kernel, amax_compute_algo "max"): TE keeps
 * amax_history[0] as the current step's amax, takes amax = max over all
 * amax_history_len entries, then rolls the array (entry i takes i + 1's,
 * the last takes the current one, entry 0 is zeroed for the next step);
 * scale = (fp8_max * 2^-margin) / amax when amax is finite and > 0, else
 * the previous scale, FLT_MAX when the quotient overflows. The quotient is
 * formed here in double and rounded once (correctly rounded, as fp32's
 * division). 300 steps of random amaxes (zeros, tiny values whose scale
 * overflows, inf, NaN, several casts a step), both formats, margins 0 and
 * 1, windows 1, 5 and 16: every step's scale bit for bit. */
typedef struct { float h[16]; size_t len; float scale; } TeHistory;

static void te_record(TeHistory *t, float amax) { t->h[0] = fmaxf(t->h[0], amax); }

static float te_update(TeHistory *t, float fp8_max, int margin)
{
    float scaled_max = fp8_max * powf(2.0f, (float)-margin), amax = 0.0f, rolled[16];
    for (size_t i = 0; i < t->len; i++) {
        float a = i < t->len - 1 ? t->h[i + 1] : t->h[0];
        amax = fmaxf(amax, a);
        rolled[i] = i > 0 ? a : 0.0f;
    }
    memcpy(t->h, rolled, t->len * sizeof(float));
    float s = isfinite(amax) && amax > 0 ? (float)((double)scaled_max / (double)amax) : t->scale;
    t->scale = isinf(s) ? FLT_MAX : s;
    return t->scale;
}

static void test_delayed_vs_te(void **state)
{
    (void)state;
    static const size_t lens[] = { 1, 5, 16 };
    uint64_t x = 12345;
    for (int f = 0; f < 2; f++)
        for (int margin = 0; margin < 2; margin++)
            for (size_t li = 0; li < 3; li++) {
                prt_fp8_format fmt = f ? PRT_FP8_E5M2 : PRT_FP8_E4M3;
                prt_fp8_cfg c = prt_fp8_cfg_default(PRT_FP8_DELAYED, fmt, false);
                c.margin = margin;
                float buf[16];
                prt_fp8_history h;
                assert_int_equal(prt_fp8_history_init(&h, buf, lens[li]), PRT_OK);
                TeHistory te = { .len = lens[li], .scale = 1.0f };
                for (int step = 0; step < 300; step++) {
                    int casts = 1 + step % 3;
                    for (int k = 0; k < casts; k++) {
                        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                        unsigned r = (unsigned)(x >> 40) % 100;
                        float a = r < 8 ? 0.0f : r < 10 ? 1e-38f : r < 11 ? INFINITY : r < 12 ? NAN
                                                                               : ldexpf((float)(x >> 41 & 0xFFFFF) + 1.0f, (int)(x >> 33 & 31) - 30);
                        prt_fp8_history_record(&h, a);
                        te_record(&te, a);
                    }
                    float got = prt_fp8_history_update(&h, &c), want = te_update(&te, prt_fp8_max(fmt), margin);
                    if (memcmp(&got, &want, sizeof got)) {
                        fprintf(stderr, "fmt %d margin %d len %zu step %d: scale %a, TE %a\n", f, margin, lens[li],
                                step, (double)got, (double)want);
                        fail();
                    }
                }
            }
}

/* ---- quantisation error -----------------------------------------------------
 * For y = x * scale, |decode(encode(y)) - y| is at most half an ulp of y in
 * the format (2^-(m+1) |y| for normals, 2^(emin-m-1) below), plus the
 * clamp |y| - max where an MX block saturates; dequantising multiplies by
 * scale_inv. Slack 2^-21 |x| covers the fp32 roundings of x * scale, of 1 /
 * scale and of the product with scale_inv (each 2^-24 relative). */
static double half_ulp(double y, prt_fp8_format f)
{
    int m = f == PRT_FP8_E4M3 ? 3 : 2, emin = f == PRT_FP8_E4M3 ? -6 : -14;
    double a = fabs(y);
    int e;
    frexp(a, &e);   /* a = f * 2^e, f in [0.5, 1): floor(log2 a) = e - 1 */
    e = a > 0 && e - 1 > emin ? e - 1 : emin;
    return ldexp(1.0, e - m - 1);
}

typedef struct {
    const char *name;
    prt_fp8_recipe recipe;
    prt_fp8_format fmt;
    bool pow2, weight;
    prt_fp8_kdim k;
} quant_case;

static const quant_case QCASES[] = {
    { .name = "tensorwise e4m3", .recipe = PRT_FP8_TENSORWISE, .fmt = PRT_FP8_E4M3,
      .k = PRT_FP8_K_COLS },
    { .name = "tensorwise e5m2 pow2", .recipe = PRT_FP8_TENSORWISE, .fmt = PRT_FP8_E5M2,
      .pow2 = true, .k = PRT_FP8_K_ROWS },
    { .name = "rowwise e4m3", .recipe = PRT_FP8_ROWWISE, .fmt = PRT_FP8_E4M3, .pow2 = true,
      .k = PRT_FP8_K_COLS },
    { .name = "rowwise e4m3 fp32 scales", .recipe = PRT_FP8_ROWWISE, .fmt = PRT_FP8_E4M3,
      .k = PRT_FP8_K_ROWS },
    { .name = "blockwise 1x128", .recipe = PRT_FP8_BLOCKWISE, .fmt = PRT_FP8_E4M3, .pow2 = true,
      .k = PRT_FP8_K_COLS },
    { .name = "blockwise 128x128", .recipe = PRT_FP8_BLOCKWISE, .fmt = PRT_FP8_E4M3, .pow2 = true,
      .weight = true, .k = PRT_FP8_K_ROWS },
    { .name = "blockwise e5m2 fp32 scales", .recipe = PRT_FP8_BLOCKWISE, .fmt = PRT_FP8_E5M2,
      .k = PRT_FP8_K_ROWS },
    { .name = "mxfp8 e4m3", .recipe = PRT_FP8_MXFP8, .fmt = PRT_FP8_E4M3, .pow2 = true,
      .k = PRT_FP8_K_COLS },
    { .name = "mxfp8 e5m2", .recipe = PRT_FP8_MXFP8, .fmt = PRT_FP8_E5M2, .pow2 = true,
      .k = PRT_FP8_K_ROWS },
};

static prt_fp8_cfg cfg_of(const quant_case *qc)
{
    prt_fp8_cfg c = prt_fp8_cfg_default(qc->recipe, qc->fmt, qc->weight);
    c.pow2 = qc->pow2;
    return c;
}

/* Values over 6 decades, so tensorwise scales put some into subnormals. */
static float *wide_values(size_t n)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * powf(10.0f, 3.0f * frand());
    return x;
}

static void test_quant_error(void **state)
{
    (void)state;
    const size_t R = 130, C = 300;
    float *x = wide_values(R * C), *dq = malloc(R * C * sizeof *dq);
    uint8_t *q = malloc(R * C);
    float *si = malloc(R * C * sizeof *si);
    for (size_t qi = 0; qi < sizeof QCASES / sizeof QCASES[0]; qi++) {
        const quant_case *qc = &QCASES[qi];
        prt_fp8_cfg cfg = cfg_of(qc);
        prt_fp8_tensor t = { .q = q, .scale_inv = si };
        assert_int_equal(prt_fp8_quantize(&t, x, &cfg, qc->k, R, C, NULL, NULL), PRT_OK);
        prt_fp8_dequantize(dq, &t);
        double fm = prt_fp8_max(qc->fmt), worst = 0, sig = 0, noise = 0;
        int bad = 0;
        for (size_t r = 0; r < R; r++)
            for (size_t c = 0; c < C; c++) {
                size_t b = (r / t.g.br) * t.g.nbc + c / t.g.bc;
                double s = 1.0 / si[b], xv = x[r * C + c], y = xv * s;
                double ay = fabs(y) < fm ? fabs(y) : fm;
                double tol = (half_ulp(ay, qc->fmt) + (fabs(y) > fm ? fabs(y) - fm : 0)) * si[b]
                             + ldexp(fabs(xv), -21);
                double err = fabs(dq[r * C + c] - xv);
                if (!(err <= tol) && bad++ < 3)
                    print_message("  %s (%zu, %zu): x %.7g dq %.7g err %.3g tol %.3g\n", qc->name,
                                  r, c, xv, (double)dq[r * C + c], err, tol);
                worst = fmax(worst, err / tol);
                sig += xv * xv, noise += err * err;
            }
        /* SQNR as torchao's compute_error (float8_utils.py): 20 log10(|x| / |x - dq|) */
        print_message("  %-28s %4zu blocks, max err / bound %.3f, SQNR %.1f dB\n", qc->name,
                      prt_fp8_nblocks(&t.g), worst, 10.0 * log10(sig / noise));
        assert_int_equal(bad, 0);
        assert_true(worst > 0);   /* the cast did round something */
    }
    free(x), free(dq), free(q), free(si);
}

/* Layout invariance: a tensor split over two ranks (rows [0, R/2) and
 * [R/2, R), as a column-parallel weight over TP 2) casts to the codes of
 * the whole when the shards' amaxes are combined first (the MAX
 * all-reduce the caller makes): tensorwise takes the max of the two;
 * 128 x 128 blocks and rowwise scales lie inside a shard when the split
 * falls on a block boundary, so nothing is combined. */
static void test_shard_invariance(void **state)
{
    (void)state;
    const size_t R = 256, C = 192, H = R / 2;
    float *x = wide_values(R * C);
    x[3] = 700.0f;   /* the largest element lies in the first shard only */
    static const prt_fp8_recipe rs[] = { PRT_FP8_TENSORWISE, PRT_FP8_ROWWISE, PRT_FP8_BLOCKWISE };
    uint8_t *qw = malloc(R * C), *qs = malloc(R * C);
    float siw[8], sis[2][8], amax[2][8], scale[8];
    for (size_t ri = 0; ri < 3; ri++) {
        prt_fp8_cfg cfg = prt_fp8_cfg_default(rs[ri], PRT_FP8_E4M3, true);
        float *siw_r = ri == 1 ? malloc(R * sizeof(float)) : siw;
        prt_fp8_tensor whole = { .q = qw, .scale_inv = siw_r };
        assert_int_equal(prt_fp8_quantize(&whole, x, &cfg, PRT_FP8_K_COLS, R, C, NULL, NULL),
                         PRT_OK);
        prt_fp8_grid g;
        assert_int_equal(prt_fp8_grid_of(&g, &cfg, H, C, PRT_FP8_K_COLS), PRT_OK);
        size_t nb = prt_fp8_nblocks(&g);
        for (size_t sh = 0; sh < 2 && rs[ri] != PRT_FP8_ROWWISE; sh++)
            prt_fp8_amax(amax[sh], x + sh * H * C, &g);
        if (rs[ri] == PRT_FP8_TENSORWISE)   /* the all-reduce (MAX) over the two ranks */
            amax[0][0] = amax[1][0] = fmaxf(amax[0][0], amax[1][0]);
        for (size_t sh = 0; sh < 2; sh++) {
            prt_fp8_tensor part = { .q = qs + sh * H * C, .scale_inv = sis[sh], .g = g,
                                    .fmt = cfg.fmt };
            if (rs[ri] == PRT_FP8_ROWWISE) {   /* per row: each shard alone */
                float *si = malloc(H * sizeof *si);
                part.scale_inv = si;
                assert_int_equal(prt_fp8_quantize(&part, x + sh * H * C, &cfg, PRT_FP8_K_COLS, H, C,
                                                  NULL, NULL), PRT_OK);
                assert_memory_equal(si, siw_r + sh * H, H * sizeof *si);
                free(si);
                continue;
            }
            prt_fp8_scales(scale, amax[sh], nb, &cfg);
            prt_fp8_cast(&part, x + sh * H * C, scale, cfg.mode);
            const float *want = rs[ri] == PRT_FP8_TENSORWISE ? siw : siw + sh * nb;
            assert_memory_equal(sis[sh], want, nb * sizeof(float));
        }
        assert_memory_equal(qs, qw, R * C);
        print_message("  %-10s two shards cast to the whole tensor's %zu codes\n",
                      prt_fp8_recipe_name(rs[ri]), R * C);
        if (ri == 1)
            free(siw_r);
    }
    free(x), free(qw), free(qs);
}

/* ---- the scaled GEMM -------------------------------------------------------
 * The reference is the double-precision sum of the dequantised products,
 * decode(a) scale_inv(a) decode(b) scale_inv(b), each exact in double. An
 * fp32 dot product of K terms is within K u sum |a_k b_k| of it (u = 2^-24;
 * Higham, Accuracy and Stability, eq. 3.5); the scale products and the sum
 * over K-blocks add at most 4 u more (two roundings per block product,
 * K/kb <= K further additions already counted in K). Bound: (K + 4) u
 * sum |a_k b_k| + beta C's own rounding. */
typedef struct {
    const char *name;
    prt_fp8_recipe recipe;
    bool pow2, hybrid;
} gemm_case;

static const gemm_case GCASES[] = {
    { .name = "tensorwise fp32 scales", .recipe = PRT_FP8_TENSORWISE, .hybrid = true },
    { .name = "tensorwise pow2", .recipe = PRT_FP8_TENSORWISE, .pow2 = true },
    { .name = "rowwise pow2", .recipe = PRT_FP8_ROWWISE, .pow2 = true },
    { .name = "rowwise fp32 scales", .recipe = PRT_FP8_ROWWISE, .hybrid = true },
    { .name = "blockwise pow2", .recipe = PRT_FP8_BLOCKWISE, .pow2 = true },
    { .name = "blockwise fp32 scales", .recipe = PRT_FP8_BLOCKWISE, .hybrid = true },
    { .name = "mxfp8", .recipe = PRT_FP8_MXFP8, .pow2 = true },
    { .name = "mxfp8 hybrid", .recipe = PRT_FP8_MXFP8, .pow2 = true, .hybrid = true },
};

typedef struct {
    prt_fp8_tensor t;
    float *dq;   /* its dequantised values */
} qmat;

static void qmat_make(qmat *m, const float *x, const prt_fp8_cfg *cfg, prt_fp8_kdim k,
                      size_t rows, size_t cols)
{
    m->t.q = malloc(rows * cols);
    m->t.scale_inv = malloc(rows * cols * sizeof(float));
    m->dq = malloc(rows * cols * sizeof(float));
    assert_int_equal(prt_fp8_quantize(&m->t, x, cfg, k, rows, cols, NULL, NULL), PRT_OK);
    prt_fp8_dequantize(m->dq, &m->t);
}

static void qmat_free(qmat *m)
{
    free(m->t.q), free(m->t.scale_inv), free(m->dq);
}

/* Check C (M, N) against the reference from A's and B's dequantised values
 * (C0: C before, for beta). Returns the worst error / bound. */
static double check_gemm(const char *name, const float *C, const float *C0, float beta,
                         const qmat *A, bool ta, const qmat *B, bool tb, size_t M, size_t N,
                         size_t K)
{
    double worst = 0;
    int bad = 0;
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double ref = beta * (double)C0[i * N + j], mag = fabs(ref) * 0x1p-24;
            for (size_t k = 0; k < K; k++) {
                double a = ta ? A->dq[k * M + i] : A->dq[i * K + k];
                double b = tb ? B->dq[j * K + k] : B->dq[k * N + j];
                ref += a * b;
                mag += fabs(a * b) * (double)(K + 4) * 0x1p-24;
            }
            double err = fabs(C[i * N + j] - ref);
            if (!(err <= mag + 1e-30) && bad++ < 3)
                print_message("  %s (%zu, %zu): ref %.9g got %.9g bound %.3g\n", name, i, j, ref,
                              (double)C[i * N + j], mag);
            worst = fmax(worst, err / (mag + 1e-30));
        }
    assert_int_equal(bad, 0);
    return worst;
}

/* The three GEMMs of a linear layer (prt_linear_*'s shapes) per recipe:
 * forward x W^T, dX = dout W, dW += dout^T x. */
static void test_scaled_gemm(void **state)
{
    (void)state;
    const size_t Nt = 40, Kin = 300, O = 140;
    float *x = wide_values(Nt * Kin), *w = rnd(O * Kin, 0.05f), *g = rnd(Nt * O, 1e-3f);
    float *C = malloc(O * Kin * sizeof *C), *C0 = rnd(O * Kin, 1.0f);
    for (size_t gi = 0; gi < sizeof GCASES / sizeof GCASES[0]; gi++) {
        const gemm_case *gc = &GCASES[gi];
        prt_fp8_linear_cfg lc = prt_fp8_linear_default(gc->recipe, gc->hybrid);
        lc.act.pow2 = lc.weight.pow2 = lc.grad.pow2 = gc->pow2;
        assert_int_equal(lc.grad.fmt, gc->hybrid ? PRT_FP8_E5M2 : PRT_FP8_E4M3);
        qmat xa, wb, ga, wr, gr, xr;
        qmat_make(&xa, x, &lc.act, PRT_FP8_K_COLS, Nt, Kin);
        qmat_make(&wb, w, &lc.weight, PRT_FP8_K_COLS, O, Kin);
        qmat_make(&ga, g, &lc.grad, PRT_FP8_K_COLS, Nt, O);
        qmat_make(&wr, w, &lc.weight, PRT_FP8_K_ROWS, O, Kin);
        qmat_make(&gr, g, &lc.grad, PRT_FP8_K_ROWS, Nt, O);
        qmat_make(&xr, x, &lc.act, PRT_FP8_K_ROWS, Nt, Kin);
        double w1, w2, w3;
        assert_int_equal(prt_fp8_gemm(C, &xa.t, false, &wb.t, true, Nt, O, Kin, 0.0f), PRT_OK);
        w1 = check_gemm("fwd", C, C0, 0.0f, &xa, false, &wb, true, Nt, O, Kin);
        assert_int_equal(prt_fp8_gemm(C, &ga.t, false, &wr.t, false, Nt, Kin, O, 0.0f), PRT_OK);
        w2 = check_gemm("dX", C, C0, 0.0f, &ga, false, &wr, false, Nt, Kin, O);
        memcpy(C, C0, O * Kin * sizeof *C);
        assert_int_equal(prt_fp8_gemm(C, &gr.t, true, &xr.t, false, O, Kin, Nt, 1.0f), PRT_OK);
        w3 = check_gemm("dW", C, C0, 1.0f, &gr, true, &xr, false, O, Kin, Nt);
        print_message("  %-24s err / bound: fwd %.3f, dX %.3f, dW %.3f\n", gc->name, w1, w2, w3);
        /* 128 x 128 weight blocks are the same blocks for W and W^T */
        if (gc->recipe == PRT_FP8_BLOCKWISE)
            assert_memory_equal(wb.dq, wr.dq, O * Kin * sizeof(float));
        qmat_free(&xa), qmat_free(&wb), qmat_free(&ga), qmat_free(&wr), qmat_free(&gr);
        qmat_free(&xr);
    }
    free(x), free(w), free(g), free(C), free(C0);
}

/* Operands whose blocks do not lie along K, or shapes that do not match,
 * are refused. */
static void test_gemm_refusals(void **state)
{
    (void)state;
    float x[64 * 64];
    for (size_t i = 0; i < 64 * 64; i++)
        x[i] = frand();
    qmat a, b;
    prt_fp8_cfg c = prt_fp8_cfg_default(PRT_FP8_MXFP8, PRT_FP8_E4M3, false);
    qmat_make(&a, x, &c, PRT_FP8_K_COLS, 64, 64);
    qmat_make(&b, x, &c, PRT_FP8_K_COLS, 64, 64);
    float C[64 * 64];
    assert_int_equal(prt_fp8_gemm(C, &a.t, false, &b.t, false, 64, 64, 64, 0.0f), PRT_ERR_ARG);
    assert_int_equal(prt_fp8_gemm(C, &a.t, true, &b.t, true, 64, 64, 64, 0.0f), PRT_ERR_ARG);
    assert_int_equal(prt_fp8_gemm(C, &a.t, false, &b.t, true, 64, 32, 64, 0.0f), PRT_ERR_ARG);
    assert_int_equal(prt_fp8_gemm(C, &a.t, false, &b.t, true, 64, 64, 64, 0.0f), PRT_OK);
    qmat_free(&a), qmat_free(&b);
}

/* The linear wrappers quantise as the recipe says and equal the GEMM on
 * operands quantised by hand, bit for bit; against fp32 prt_linear_fwd the
 * FP8 forward is within E4M3's rounding (4 significant bits). */
static void test_fp8_linear(void **state)
{
    (void)state;
    const size_t N = 16, K = 256, O = 48;
    float *x = rnd(N * K, 1.0f), *w = rnd(O * K, 0.1f), *b = rnd(O, 0.1f), *g = rnd(N * O, 0.01f);
    float *out = malloc(N * O * sizeof *out), *ref = malloc(N * O * sizeof *ref);
    float *dx = malloc(N * K * sizeof *dx), *dw = zeros(O * K), *dw2 = zeros(O * K);
    for (prt_fp8_recipe r = PRT_FP8_TENSORWISE; r <= PRT_FP8_MXFP8; r++) {
        if (r == PRT_FP8_DELAYED)
            continue;
        prt_fp8_linear_cfg lc = prt_fp8_linear_default(r, true);
        assert_int_equal(prt_fp8_linear_fwd(out, x, w, b, N, K, O, &lc, NULL, NULL), PRT_OK);
        qmat xa, wb, ga, wr, gr, xr;
        qmat_make(&xa, x, &lc.act, PRT_FP8_K_COLS, N, K);
        qmat_make(&wb, w, &lc.weight, PRT_FP8_K_COLS, O, K);
        assert_int_equal(prt_fp8_gemm(ref, &xa.t, false, &wb.t, true, N, O, K, 0.0f), PRT_OK);
        for (size_t i = 0; i < N * O; i++)
            ref[i] += b[i % O];
        assert_memory_equal(out, ref, N * O * sizeof *out);
        prt_linear_fwd(ref, x, w, b, N, K, O);
        double num = 0, den = 0;
        for (size_t i = 0; i < N * O; i++)
            num += (out[i] - ref[i]) * (out[i] - ref[i]), den += ref[i] * ref[i];
        print_message("  %-10s forward vs fp32: relative error %.4f\n", prt_fp8_recipe_name(r),
                      sqrt(num / den));
        /* Per element, E4M3 errs by at most half an ulp, 2^-4 relative; MXFP8
         * also clamps the elements in (448 X, 512 X) of a block, up to 1/8
         * relative (OCP MX v1.0 section 6.3). Over K products of random
         * signs the output's error norm stays below the per-element bound
         * (a sanity check of the wrapper, not a proof). */
        double bound = 0x1p-4 + (r == PRT_FP8_MXFP8 ? 0.125 : 0.0);
        assert_true(sqrt(num / den) < bound);
        /* the backward halves: dout in E5M2 (hybrid) */
        assert_int_equal(prt_fp8_linear_bwd_input(dx, g, w, N, K, O, &lc, NULL, NULL), PRT_OK);
        qmat_make(&ga, g, &lc.grad, PRT_FP8_K_COLS, N, O);
        qmat_make(&wr, w, &lc.weight, PRT_FP8_K_ROWS, O, K);
        float *dx2 = malloc(N * K * sizeof *dx2);
        assert_int_equal(prt_fp8_gemm(dx2, &ga.t, false, &wr.t, false, N, K, O, 0.0f), PRT_OK);
        assert_memory_equal(dx, dx2, N * K * sizeof *dx);
        assert_int_equal(ga.t.fmt, PRT_FP8_E5M2);
        assert_int_equal(prt_fp8_linear_bwd_weight(dw, g, x, N, K, O, &lc, NULL, NULL), PRT_OK);
        qmat_make(&gr, g, &lc.grad, PRT_FP8_K_ROWS, N, O);
        qmat_make(&xr, x, &lc.act, PRT_FP8_K_ROWS, N, K);
        assert_int_equal(prt_fp8_gemm(dw2, &gr.t, true, &xr.t, false, O, K, N, 1.0f), PRT_OK);
        assert_memory_equal(dw, dw2, O * K * sizeof *dw);   /* both accumulated once more */
        free(dx2);
        qmat_free(&xa), qmat_free(&wb), qmat_free(&ga), qmat_free(&wr), qmat_free(&gr);
        qmat_free(&xr);
    }
    /* DELAYED needs its histories */
    prt_fp8_linear_cfg ld = prt_fp8_linear_default(PRT_FP8_DELAYED, true);
    assert_int_equal(prt_fp8_linear_fwd(out, x, w, b, N, K, O, &ld, NULL, NULL), PRT_ERR_ARG);
    float hb[2][4];
    prt_fp8_history hx, hw;
    prt_fp8_history_init(&hx, hb[0], 4);
    prt_fp8_history_init(&hw, hb[1], 4);
    assert_int_equal(prt_fp8_linear_fwd(out, x, w, b, N, K, O, &ld, &hx, &hw), PRT_OK);
    assert_true(hx.pending > 0.9f && hw.pending > 0.09f);
    free(x), free(w), free(b), free(g), free(out), free(ref), free(dx), free(dw), free(dw2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_codes),
        cmocka_unit_test(test_decode_values),
        cmocka_unit_test(test_ties_and_subnormals),
        cmocka_unit_test(test_saturation),
        cmocka_unit_test(test_tensorwise_scales),
        cmocka_unit_test(test_rowwise_scales),
        cmocka_unit_test(test_blockwise_grid),
        cmocka_unit_test(test_mx_scales),
        cmocka_unit_test(test_delayed_scales),
        cmocka_unit_test(test_delayed_vs_te),
        cmocka_unit_test(test_quant_error),
        cmocka_unit_test(test_shard_invariance),
        cmocka_unit_test(test_scaled_gemm),
        cmocka_unit_test(test_gemm_refusals),
        cmocka_unit_test(test_fp8_linear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
