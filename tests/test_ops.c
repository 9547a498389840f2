/*
 * test_ops.c: the CPU compute ops against references (cmocka).
 *
 * Every backward is checked against central finite differences of a
 * scalar loss L = sum(out * r) (r fixed random) evaluated in double, and
 * every forward against a naive double-precision reference. Mismatches
 * are printed as llm.c's validate_result does: the first few, with the
 * tolerance atol + rtol * |ref|.
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

/* ---- helpers ------------------------------------------------------------ */

#define TEST_RAND_SEED 42
#include "tests/test_rand.h"

/* Count and print (the first 5) mismatches beyond atol + rtol*|ref|. */
static int validate(const char *name, const float *got, const double *ref, size_t n,
                    double atol, double rtol)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = atol + rtol * fabs(ref[i]);
        if (!(fabs((double)got[i] - ref[i]) <= tol)) {
            if (bad < 5)
                print_message("  %s mismatch at %zu: ref %.7g got %.7g (tol %.3g)\n",
                              name, i, ref[i], (double)got[i], tol);
            bad++;
        }
    }
    if (bad)
        print_message("  %s: %d of %zu mismatches\n", name, bad, n);
    return bad;
}

static int validate_f(const char *name, const float *got, const float *ref, size_t n,
                      double atol, double rtol)
{
    double *r = malloc(n * sizeof *r + 8);
    for (size_t i = 0; i < n; i++)
        r[i] = ref[i];
    int bad = validate(name, got, r, n, atol, rtol);
    free(r);
    return bad;
}

/* ---- finite differences ---------------------------------------------------
 * A case runs its forward on the current inputs; the loss is sum(out * r)
 * in double. grad is what the backward gave for a tensor; we perturb up to
 * 40 of its elements by +-h and compare. */
typedef struct {
    const char *name;
    float *x, *grad;
    size_t n;
} FdTensor;

typedef void (*FwdFn)(void *ctx);

static double fd_loss(FwdFn f, void *ctx, const float *out, const float *r, size_t nout)
{
    f(ctx);
    double s = 0.0;
    for (size_t i = 0; i < nout; i++)
        s += (double)out[i] * r[i];
    return s;
}

static int fd_check(FwdFn f, void *ctx, const float *out, const float *r, size_t nout,
                    FdTensor *ts, int nt, double h, double atol, double rtol)
{
    int bad = 0;
    for (int t = 0; t < nt; t++) {
        size_t n = ts[t].n, stride = n > 40 ? n / 40 : 1, cnt = 0;
        float *got = malloc(n * sizeof *got);
        double *ref = malloc(n * sizeof *ref);
        for (size_t i = (size_t)t % stride; i < n; i += stride, cnt++) {
            float x0 = ts[t].x[i];
            ts[t].x[i] = (float)(x0 + h);
            double lp = fd_loss(f, ctx, out, r, nout);
            ts[t].x[i] = (float)(x0 - h);
            double lm = fd_loss(f, ctx, out, r, nout);
            ts[t].x[i] = x0;
            ref[cnt] = (lp - lm) / (2.0 * h);
            got[cnt] = ts[t].grad[i];
        }
        bad += validate(ts[t].name, got, ref, cnt, atol, rtol);
        free(got);
        free(ref);
    }
    f(ctx);   /* leave the unperturbed forward in out */
    return bad;
}

/* ---- linear --------------------------------------------------------------- */

typedef struct { float *out, *x, *w, *b; size_t N, K, O; } LinCtx;
static void lin_fwd(void *p) { LinCtx *c = p; prt_linear_fwd(c->out, c->x, c->w, c->b, c->N, c->K, c->O); }

static void test_linear(void **state)
{
    (void)state;
    LinCtx c = {.N = 6, .K = 5, .O = 7};
    c.x = rnd(c.N * c.K, 1); c.w = rnd(c.O * c.K, 1); c.b = rnd(c.O, 1);
    c.out = zeros(c.N * c.O);
    lin_fwd(&c);
    double *ref = malloc(c.N * c.O * sizeof *ref);
    for (size_t i = 0; i < c.N; i++)
        for (size_t o = 0; o < c.O; o++) {
            double s = c.b[o];
            for (size_t k = 0; k < c.K; k++)
                s += (double)c.x[i * c.K + k] * c.w[o * c.K + k];
            ref[i * c.O + o] = s;
        }
    assert_int_equal(validate("linear fwd", c.out, ref, c.N * c.O, 1e-5, 1e-5), 0);
    float *r = rnd(c.N * c.O, 1), *dx = zeros(c.N * c.K), *dw = zeros(c.O * c.K), *db = zeros(c.O);
    prt_linear_bwd(dx, dw, db, r, c.x, c.w, c.N, c.K, c.O);
    FdTensor ts[] = {{"linear dx", c.x, dx, c.N * c.K}, {"linear dw", c.w, dw, c.O * c.K},
                     {"linear db", c.b, db, c.O}};
    assert_int_equal(fd_check(lin_fwd, &c, c.out, r, c.N * c.O, ts, 3, 1e-2, 1e-3, 1e-3), 0);
    /* weight and bias gradients accumulate */
    float db1[7];
    memcpy(db1, db, sizeof db1);
    prt_linear_bwd_weight(dw, db, r, c.x, c.N, c.K, c.O);
    for (size_t i = 0; i < c.O; i++)
        assert_float_equal(db[i], 2 * db1[i], 1e-6);
    free(ref); free(r); free(dx); free(dw); free(db);
    free(c.x); free(c.w); free(c.b); free(c.out);
}

/* ---- norms ------------------------------------------------------------------ */

typedef struct { float *out, *mean, *rstd, *x, *w, *b; size_t N, C; bool rms; } NormCtx;
static void norm_fwd(void *p)
{
    NormCtx *c = p;
    if (c->rms)
        prt_rmsnorm_fwd(c->out, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
    else
        prt_layernorm_fwd(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, 1e-5f);
}

static void check_norm(bool rms)
{
    NormCtx c = {.N = 4, .C = 9, .rms = rms};
    c.x = rnd(c.N * c.C, 2); c.w = rnd(c.C, 1); c.b = rnd(c.C, 1);
    c.out = zeros(c.N * c.C); c.mean = zeros(c.N); c.rstd = zeros(c.N);
    norm_fwd(&c);
    double *ref = malloc(c.N * c.C * sizeof *ref);
    for (size_t i = 0; i < c.N; i++) {
        double m = 0, v = 0;
        for (size_t k = 0; k < c.C; k++)
            m += c.x[i * c.C + k];
        m = rms ? 0.0 : m / c.C;
        for (size_t k = 0; k < c.C; k++)
            v += (c.x[i * c.C + k] - m) * (c.x[i * c.C + k] - m);
        double s = 1.0 / sqrt(v / c.C + 1e-5);
        for (size_t k = 0; k < c.C; k++)
            ref[i * c.C + k] = (c.x[i * c.C + k] - m) * s * c.w[k] + (rms ? 0.0 : c.b[k]);
    }
    assert_int_equal(validate(rms ? "rmsnorm fwd" : "layernorm fwd", c.out, ref, c.N * c.C, 1e-5, 1e-4), 0);
    float *r = rnd(c.N * c.C, 1), *dx = zeros(c.N * c.C), *dw = zeros(c.C), *db = zeros(c.C);
    if (rms)
        prt_rmsnorm_bwd(dx, dw, r, c.x, c.w, c.rstd, c.N, c.C);
    else
        prt_layernorm_bwd(dx, dw, db, r, c.x, c.w, c.mean, c.rstd, c.N, c.C);
    FdTensor ts[] = {{"norm dx", c.x, dx, c.N * c.C}, {"norm dw", c.w, dw, c.C}, {"norm db", c.b, db, c.C}};
    assert_int_equal(fd_check(norm_fwd, &c, c.out, r, c.N * c.C, ts, rms ? 2 : 3, 1e-2, 2e-3, 2e-3), 0);
    free(ref); free(r); free(dx); free(dw); free(db);
    free(c.x); free(c.w); free(c.b); free(c.out); free(c.mean); free(c.rstd);
}

static void test_layernorm(void **state) { (void)state; check_norm(false); }
static void test_rmsnorm(void **state) { (void)state; check_norm(true); }

/* ---- activations ------------------------------------------------------------ */

typedef struct { float *out, *x; size_t n, N, F; int kind; } ActCtx;  /* 0 gelu 1 relu 2 swiglu 3 geglu */
static void act_fwd(void *p)
{
    ActCtx *c = p;
    if (c->kind == 0) prt_gelu_fwd(c->out, c->x, c->n);
    else if (c->kind == 1) prt_relu_fwd(c->out, c->x, c->n);
    else if (c->kind == 2) prt_swiglu_fwd(c->out, c->x, c->N, c->F);
    else prt_geglu_fwd(c->out, c->x, c->N, c->F);
}

static void check_act(int kind)
{
    ActCtx c = {.N = 3, .F = 8, .kind = kind};
    size_t nin = kind >= 2 ? c.N * 2 * c.F : c.N * c.F, nout = c.N * c.F;
    c.n = nout;
    c.x = rnd(nin, 3);
    for (size_t i = 0; i < nin; i++)   /* keep ReLU's kink away from the probes */
        if (fabsf(c.x[i]) < 0.05f)
            c.x[i] = 0.3f;
    c.out = zeros(nout);
    act_fwd(&c);
    double *ref = malloc(nout * sizeof *ref);
    for (size_t i = 0; i < nout; i++) {
        if (kind == 0) {
            double v = c.x[i];
            ref[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        } else if (kind == 1) {
            ref[i] = c.x[i] > 0 ? c.x[i] : 0;
        } else {
            size_t row = i / c.F, j = i % c.F;
            double g = c.x[row * 2 * c.F + j], u = c.x[row * 2 * c.F + c.F + j];
            ref[i] = kind == 2 ? g / (1 + exp(-g)) * u
                               : 0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * u;
        }
    }
    const char *names[] = {"gelu", "relu", "swiglu", "geglu"};
    assert_int_equal(validate(names[kind], c.out, ref, nout, 1e-5, 1e-4), 0);
    float *r = rnd(nout, 1), *dx = zeros(nin);
    if (kind == 0) prt_gelu_bwd(dx, c.x, r, nout);
    else if (kind == 1) prt_relu_bwd(dx, c.x, r, nout);
    else if (kind == 2) prt_swiglu_bwd(dx, c.x, r, c.N, c.F);
    else prt_geglu_bwd(dx, c.x, r, c.N, c.F);
    FdTensor ts[] = {{names[kind], c.x, dx, nin}};
    assert_int_equal(fd_check(act_fwd, &c, c.out, r, nout, ts, 1, 1e-2, 1e-3, 2e-3), 0);
    free(ref); free(r); free(dx); free(c.x); free(c.out);
}

static void test_gelu(void **state) { (void)state; check_act(0); }
static void test_relu(void **state) { (void)state; check_act(1); }
static void test_swiglu(void **state) { (void)state; check_act(2); }
static void test_geglu(void **state) { (void)state; check_act(3); }

static void test_residual(void **state)
{
    (void)state;
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {.5f, -1, 0, 2, 1};
    prt_residual_add(a, a, b, 5);   /* in place */
    float want[5] = {1.5f, 1, 3, 6, 6};
    assert_int_equal(validate_f("residual", a, want, 5, 0, 0), 0);
    prt_add_inplace(a, b, 5);
    assert_float_equal(a[3], 8.0f, 0);
}

/* prt_affine (issue 28): Gemma's gain 1 + w and sqrt(dim) scale are exact
 * in their roles: a * x + b with a = 1 is x + b rounded once, with b = 0
 * it is a * x rounded once. */
static void test_affine(void **state)
{
    (void)state;
    float w[4] = {0.0f, -0.25f, 1e-3f, 3.0f}, g[4], x[4] = {1, -2, 0.1f, 7};
    prt_affine(g, w, 1.0f, 1.0f, 4);   /* the gain 1 + w */
    for (int i = 0; i < 4; i++) assert_true(g[i] == 1.0f + w[i]);
    float s = sqrtf(64.0f), y[4];
    memcpy(y, x, sizeof y);
    prt_affine(y, y, s, 0.0f, 4);      /* in place: the embedding scale */
    for (int i = 0; i < 4; i++) assert_true(y[i] == x[i] * s);
}

/* ---- embeddings and RoPE ------------------------------------------------------ */

typedef struct { float *out, *wte, *wpe; int32_t *tok; size_t B, T, C, v0, Vl; } EmbCtx;
static void emb_fwd(void *p)
{
    EmbCtx *c = p;
    prt_embedding_fwd(c->out, c->tok, c->wte, c->B * c->T, c->C, c->v0, c->Vl);
    prt_position_fwd(c->out, c->wpe, c->B, c->T, c->C);
}

static void test_embedding(void **state)
{
    (void)state;
    EmbCtx c = {.B = 2, .T = 4, .C = 3, .v0 = 5, .Vl = 4};   /* slice [5, 9) of a vocab */
    int32_t tok[8] = {5, 8, 2, 6, 6, 9, 7, 5};
    c.tok = tok;
    c.wte = rnd(c.Vl * c.C, 1); c.wpe = rnd(c.T * c.C, 1); c.out = zeros(8 * c.C);
    emb_fwd(&c);
    double ref[24];
    for (size_t i = 0; i < 8; i++)
        for (size_t k = 0; k < 3; k++) {
            bool in = tok[i] >= 5 && tok[i] < 9;
            ref[i * 3 + k] = (in ? c.wte[(tok[i] - 5) * 3 + k] : 0.0) + c.wpe[(i % 4) * 3 + k];
        }
    assert_int_equal(validate("embedding fwd", c.out, ref, 24, 0, 1e-6), 0);
    float *r = rnd(24, 1), *dwte = zeros(c.Vl * c.C), *dwpe = zeros(c.T * c.C);
    prt_embedding_bwd(dwte, tok, r, 8, c.C, c.v0, c.Vl);
    prt_position_bwd(dwpe, r, c.B, c.T, c.C);
    FdTensor ts[] = {{"dwte", c.wte, dwte, c.Vl * c.C}, {"dwpe", c.wpe, dwpe, c.T * c.C}};
    assert_int_equal(fd_check(emb_fwd, &c, c.out, r, 24, ts, 2, 1e-2, 1e-4, 1e-3), 0);
    free(r); free(dwte); free(dwpe); free(c.wte); free(c.wpe); free(c.out);
}

typedef struct { float *qkv, *in; size_t B, T, H, Hkv, D; } RopeCtx;
static void rope_fwd(void *p)
{
    RopeCtx *c = p;
    size_t n = c->B * c->T * (c->H + 2 * c->Hkv) * c->D;
    memcpy(c->qkv, c->in, n * sizeof *c->qkv);
    prt_rope_fwd(c->qkv, c->B, c->T, c->H, c->Hkv, c->D, &PRT_ROPE_PLAIN(100.0f));
}

static void test_rope(void **state)
{
    (void)state;
    RopeCtx c = {.B = 2, .T = 5, .H = 4, .Hkv = 2, .D = 6};   /* GQA shapes */
    size_t R = (c.H + 2 * c.Hkv) * c.D, n = c.B * c.T * R;
    c.in = rnd(n, 1); c.qkv = zeros(n);
    rope_fwd(&c);
    double *ref = malloc(n * sizeof *ref);
    for (size_t row = 0; row < c.B * c.T; row++) {
        size_t t = row % c.T;
        for (size_t j = 0; j < R; j++) {
            size_t head = j / c.D, d = j % c.D, i = d / 2;
            const float *x = c.in + row * R + head * c.D;
            if (head >= c.H + c.Hkv) {   /* values are not rotated */
                ref[row * R + j] = c.in[row * R + j];
                continue;
            }
            double a = t * pow(100.0, -2.0 * i / c.D);   /* complex multiply by e^{ia} */
            double re = x[2 * i], im = x[2 * i + 1];
            ref[row * R + j] = d % 2 == 0 ? re * cos(a) - im * sin(a) : re * sin(a) + im * cos(a);
        }
    }
    assert_int_equal(validate("rope fwd", c.qkv, ref, n, 1e-6, 1e-5), 0);
    float *r = rnd(n, 1), *d = malloc(n * sizeof *d);
    memcpy(d, r, n * sizeof *d);
    prt_rope_bwd(d, c.B, c.T, c.H, c.Hkv, c.D, &PRT_ROPE_PLAIN(100.0f));
    FdTensor ts[] = {{"rope dx", c.in, d, n}};
    assert_int_equal(fd_check(rope_fwd, &c, c.qkv, r, n, ts, 1, 1e-2, 1e-4, 1e-3), 0);
    free(ref); free(r); free(d); free(c.in); free(c.qkv);
}

/* RoPE's scaled frequencies against numbers computed apart from the
 * runtime: tests/rope/inv_freq_ref.py (transformers v4.46's
 * modeling_rope_utils.py written again in Python's stdlib, double
 * precision) printed them. linear: Llama 2-style theta 1e4, D 128, factor
 * 4; llama3: Llama 3.1's theta 5e5, D 128, factor 8, low 1, high 4, 8192
 * tokens (pairs 0-28 kept, 29-34 smooth, 35- divided by 8); yarn: theta
 * 1e4, D 64, factor 40, beta 32 / 1, 4096 tokens (correction dims 10.47 and
 * 22.51: pairs <= 10 kept, >= 23 divided by 40, a ramp between) and its
 * mscale 0.1 ln 40 + 1. */
#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))
static void test_rope_inv_freq(void **state)
{
    (void)state;
    typedef struct { size_t i; double want; } Row;
    static const Row lin[] = { {0, 0.25}, {1, 0.21649108084001634}, {17, 0.021649108084001636},
                               {63, 2.8869549617236455e-05} };
    static const Row l3[] = { {0, 1}, {28, 0.0032114459947525913}, {29, 0.0021665707635033591},
                              {31, 0.00085675141291963208}, {34, 0.00017850781276799638},
                              {35, 9.5562123539646833e-05}, {63, 3.0689259889145111e-07} };
    static const Row ya[] = { {0, 1}, {5, 0.23713737056616555}, {10, 0.056234132519034905},
                              {11, 0.039006926567143857}, {15, 0.0083345089510207769},
                              {20, 0.00079056941504209452}, {31, 3.3338035804083101e-06} };
    const prt_rope rl = { PRT_ROPE_LINEAR, 10000, 4, 1, 4, 32, 1, 0, 1, 0 };
    const prt_rope r3 = { PRT_ROPE_LLAMA3, 500000, 8, 1, 4, 32, 1, 8192, 1, 0 };
    const prt_rope ry = { PRT_ROPE_YARN, 10000, 40, 1, 4, 32, 1, 4096, 1, 0 };
    struct { const prt_rope *r; size_t D; const Row *rows; size_t n; } sets[] = {
        { &rl, 128, lin, N_ELEMS(lin) }, { &r3, 128, l3, N_ELEMS(l3) }, { &ry, 64, ya, N_ELEMS(ya) } };
    for (size_t s = 0; s < N_ELEMS(sets); s++)
        for (size_t k = 0; k < sets[s].n; k++) {
            double got = prt_rope_inv_freq(sets[s].r, sets[s].rows[k].i, sets[s].D);
            double want = sets[s].rows[k].want;
            if (fabs(got - want) > 1e-12 * want)
                fail_msg("rope kind %d pair %zu: inv_freq %.17g, want %.17g", (int)sets[s].r->kind,
                         sets[s].rows[k].i, got, want);
        }
    assert_true(fabs(prt_rope_mscale(&ry) - 1.3688879454113936) < 1e-15);
    assert_true(prt_rope_mscale(&r3) == 1.0 && prt_rope_mscale(&rl) == 1.0);
    /* plain RoPE: theta^(-2i/D) */
    assert_true(fabs(prt_rope_inv_freq(&PRT_ROPE_PLAIN(10000), 17, 128) - 4 * 0.021649108084001636) < 1e-15);
}

/* YaRN's attention factors with DeepSeek's mscale pair against numbers
 * computed apart from the runtime: tests/rope/mscale_ref.py (transformers'
 * _compute_yarn_parameters and DeepseekV3Attention's softmax scale written
 * again in Python's stdlib) printed them. Cases: V2-Lite's 0.707 / 0.707
 * and V3's 1 / 1 at factor 40 (cos and sin 1, the softmax m^2), planc's
 * defaults 1 / 0 (0.1 ln 40 + 1 on cos and sin, none on the softmax), a
 * pair that differs at factor 4, factor 1 (no scaling at all), mscale
 * left out (0, transformers' None) beside mscale_all_dim 1. Each factor
 * is also checked apart from the kind: 1 for a non-yarn rope. */
static void test_rope_yarn_mscale(void **state)
{
    (void)state;
    static const struct { double factor, mscale, all, cos_sin, softmax; } cases[] = {
        { 40, 0.707, 0.707, 1, 1.5896261651208736 },
        { 40, 1.0, 1.0, 1, 1.8738542070926265 },
        { 40, 1.0, 0, 1.3688879454113936, 1 },
        { 4, 0.8, 0.5, 1.0388929752217428, 1.143433966251171 },
        { 1, 0.707, 0.707, 1, 1 },
        { 40, 0, 1.0, 1.3688879454113936, 1.8738542070926265 },
    };
    for (size_t k = 0; k < N_ELEMS(cases); k++) {
        prt_rope r = { PRT_ROPE_YARN, 10000, cases[k].factor, 1, 4, 32, 1, 4096, cases[k].mscale, cases[k].all };
        double m = prt_rope_mscale(&r), s = prt_rope_mla_softmax_mscale(&r);
        if (fabs(m - cases[k].cos_sin) > 1e-15 * cases[k].cos_sin || fabs(s - cases[k].softmax) > 1e-15 * cases[k].softmax)
            fail_msg("yarn factor %g mscale %g mscale_all_dim %g: cos/sin %.17g (want %.17g), softmax %.17g "
                     "(want %.17g)", cases[k].factor, cases[k].mscale, cases[k].all, m, cases[k].cos_sin, s,
                     cases[k].softmax);
        r.kind = PRT_ROPE_LINEAR;
        assert_true(prt_rope_mscale(&r) == 1.0 && prt_rope_mla_softmax_mscale(&r) == 1.0);
    }
    /* a prt_rope that leaves the pair out (0, 0) is YaRN without it */
    const prt_rope old = { .kind = PRT_ROPE_YARN, .theta = 10000, .factor = 40, .beta_fast = 32, .beta_slow = 1,
                           .original_max_position = 4096 };
    assert_true(prt_rope_mscale(&old) == 0.1 * log(40.0) + 1.0 && prt_rope_mla_softmax_mscale(&old) == 1.0);
}

/* Forward and backward of the scaled kinds on GQA shapes: the forward
 * against the rotation written out at prt_rope_inv_freq's angles times
 * prt_rope_mscale (YaRN: 1.1386 for factor 4; 1.0389 with DeepSeek's
 * mscale 0.8, mscale_all_dim 0.5), the backward against
 * finite differences. yarn: theta 100, D 8, factor 4, 16 tokens (pair 0
 * kept, 1-3 divided by 4); llama3: theta 100, D 8, 16 tokens, low 1,
 * high 4 (pair 0, wavelength 2 pi, smooth; 1-3 divided by 4). */
typedef struct { float *qkv, *in; size_t B, T, H, Hkv, D; prt_rope rope; } RopeScaledCtx;
static void rope_scaled_fwd(void *p)
{
    RopeScaledCtx *c = p;
    size_t n = c->B * c->T * (c->H + 2 * c->Hkv) * c->D;
    memcpy(c->qkv, c->in, n * sizeof *c->qkv);
    prt_rope_fwd(c->qkv, c->B, c->T, c->H, c->Hkv, c->D, &c->rope);
}

static void test_rope_scaled(void **state)
{
    (void)state;
    const prt_rope kinds[] = { { PRT_ROPE_YARN, 100, 4, 1, 4, 32, 1, 16, 1, 0 },
                               { PRT_ROPE_LLAMA3, 100, 4, 1, 4, 32, 1, 16, 1, 0 },
                               { PRT_ROPE_LINEAR, 100, 2, 1, 4, 32, 1, 0, 1, 0 },
                               { PRT_ROPE_YARN, 100, 4, 1, 4, 32, 1, 16, 0.8, 0.5 } };
    for (size_t k = 0; k < N_ELEMS(kinds); k++) {
        RopeScaledCtx c = {.B = 2, .T = 5, .H = 4, .Hkv = 2, .D = 8, .rope = kinds[k]};
        size_t R = (c.H + 2 * c.Hkv) * c.D, n = c.B * c.T * R;
        c.in = rnd(n, 1); c.qkv = zeros(n);
        rope_scaled_fwd(&c);
        double m = prt_rope_mscale(&c.rope), *ref = malloc(n * sizeof *ref);
        if (c.rope.kind == PRT_ROPE_YARN)   /* 0.1 ln 4 + 1; with DeepSeek's pair m(4, 0.8) / m(4, 0.5) */
            assert_true(fabs(m - (c.rope.mscale_all_dim == 0 ? 1.138629436111989 : 1.0388929752217428)) < 1e-12);
        for (size_t row = 0; row < c.B * c.T; row++)
            for (size_t j = 0; j < R; j++) {
                size_t head = j / c.D, d = j % c.D, i = d / 2;
                const float *x = c.in + row * R + head * c.D;
                if (head >= c.H + c.Hkv) { ref[row * R + j] = c.in[row * R + j]; continue; }
                double a = (double)(row % c.T) * prt_rope_inv_freq(&c.rope, i, c.D);
                double re = x[2 * i], im = x[2 * i + 1];
                ref[row * R + j] = m * (d % 2 == 0 ? re * cos(a) - im * sin(a) : re * sin(a) + im * cos(a));
            }
        assert_int_equal(validate("rope scaled fwd", c.qkv, ref, n, 1e-6, 1e-5), 0);
        float *r = rnd(n, 1), *d = malloc(n * sizeof *d);
        memcpy(d, r, n * sizeof *d);
        prt_rope_bwd(d, c.B, c.T, c.H, c.Hkv, c.D, &c.rope);
        FdTensor ts[] = {{"rope scaled dx", c.in, d, n}};
        assert_int_equal(fd_check(rope_scaled_fwd, &c, c.qkv, r, n, ts, 1, 1e-2, 1e-4, 1e-3), 0);
        free(ref); free(r); free(d); free(c.in); free(c.qkv);
    }
    /* the small shapes' frequencies, from the formulas by hand: yarn pair 1
     * 100^(-1/4) / 4 (ramp 1); llama3 pair 1: wavelength 2 pi 100^(1/4) =
     * 19.87 > 16 / low 1, so divided by 4; pair 0: wavelength 2 pi between
     * 16 / 4 and 16, s = (16 / 2 pi - 1) / 3, (1 - s) / 4 + s */
    assert_true(fabs(prt_rope_inv_freq(&kinds[0], 1, 8) - pow(100, -0.25) / 4) < 1e-15);
    assert_true(fabs(prt_rope_inv_freq(&kinds[0], 0, 8) - 1) < 1e-15);
    assert_true(fabs(prt_rope_inv_freq(&kinds[1], 1, 8) - pow(100, -0.25) / 4) < 1e-15);
    double s0 = (16 / (2 * M_PI) - 1) / 3;
    assert_true(fabs(prt_rope_inv_freq(&kinds[1], 0, 8) - ((1 - s0) / 4 + s0)) < 1e-15);
}

/* q/k norm (Qwen3: the gain w, w0 0; Gemma 3: 1 + w, w0 1): the forward
 * against the RMSNorm of each head written out in double (queries by w0 +
 * wq, keys by w0 + wk, values untouched), the backward (dx in place, dwq
 * and dwk) against finite differences; GQA 4/2 heads of 6. */
typedef struct { float *qkv, *in, *xin, *rstd, *wq, *wk, w0; size_t N, H, Hkv, D; } QkNormCtx;
static void qk_norm_fwd(void *p)
{
    QkNormCtx *c = p;
    memcpy(c->qkv, c->in, c->N * (c->H + 2 * c->Hkv) * c->D * sizeof *c->qkv);
    prt_qk_norm_fwd(c->qkv, c->xin, c->rstd, c->wq, c->wk, c->w0, c->N, c->H, c->Hkv, c->D, 1e-5f);
}

static void qk_norm_case(float w0)
{
    QkNormCtx c = {.N = 6, .H = 4, .Hkv = 2, .D = 6, .w0 = w0};
    size_t R = (c.H + 2 * c.Hkv) * c.D, n = c.N * R, heads = c.H + c.Hkv;
    c.in = rnd(n, 1); c.qkv = zeros(n); c.xin = zeros(c.N * heads * c.D); c.rstd = zeros(c.N * heads);
    c.wq = rnd(c.D, 1); c.wk = rnd(c.D, 1);
    qk_norm_fwd(&c);
    double *ref = malloc(n * sizeof *ref);
    for (size_t i = 0; i < c.N; i++)
        for (size_t h = 0; h < c.H + 2 * c.Hkv; h++) {
            const float *x = c.in + i * R + h * c.D, *w = h < c.H ? c.wq : c.wk;
            double ss = 0;
            for (size_t k = 0; k < c.D; k++) ss += (double)x[k] * x[k];
            double s = 1 / sqrt(ss / (double)c.D + 1e-5);
            for (size_t k = 0; k < c.D; k++)
                ref[i * R + h * c.D + k] = h < heads ? x[k] * s * ((double)w0 + w[k]) : x[k];
        }
    assert_int_equal(validate("qk_norm fwd", c.qkv, ref, n, 1e-6, 1e-5), 0);
    float *r = rnd(n, 1), *d = malloc(n * sizeof *d), *dwq = zeros(c.D), *dwk = zeros(c.D);
    memcpy(d, r, n * sizeof *d);
    prt_qk_norm_bwd(d, dwq, dwk, c.xin, c.wq, c.wk, c.w0, c.rstd, c.N, c.H, c.Hkv, c.D);
    FdTensor ts[] = {{"qk_norm dx", c.in, d, n}, {"qk_norm dwq", c.wq, dwq, c.D}, {"qk_norm dwk", c.wk, dwk, c.D}};
    assert_int_equal(fd_check(qk_norm_fwd, &c, c.qkv, r, n, ts, 3, 1e-2, 1e-4, 1e-3), 0);
    free(ref); free(r); free(d); free(dwq); free(dwk);
    free(c.in); free(c.qkv); free(c.xin); free(c.rstd); free(c.wq); free(c.wk);
}

static void test_qk_norm(void **state)
{
    (void)state;
    qk_norm_case(0.0f);   /* Qwen3 */
    qk_norm_case(1.0f);   /* Gemma 3 */
}

/* OLMo-2's q/k norm of the whole projection: the forward against an
 * RMSNorm over each row's whole q and whole k written out in double
 * (values untouched), the backward (dx in place, dwq, dwk) against finite
 * differences; GQA 4/2 heads of 6. */
typedef struct { float *qkv, *in, *xin, *rstd, *wq, *wk; size_t N, H, Hkv, D; } QkProjCtx;
static void qk_proj_fwd(void *p)
{
    QkProjCtx *c = p;
    memcpy(c->qkv, c->in, c->N * (c->H + 2 * c->Hkv) * c->D * sizeof *c->qkv);
    prt_qk_proj_sumsq(c->rstd, c->qkv, c->N, c->H, c->Hkv, c->D);   /* rstd aliases ss */
    prt_qk_proj_norm_fwd(c->qkv, c->xin, c->rstd, c->rstd, c->wq, c->wk, c->N, c->H, c->Hkv, c->D, c->H * c->D,
                         c->Hkv * c->D, 1e-5f);
}

static void qk_proj_bwd(float *d, float *dwq, float *dwk, const QkProjCtx *c)
{
    float *dot = zeros(2 * c->N);
    prt_qk_proj_dot(dot, d, c->xin, c->wq, c->wk, c->rstd, c->N, c->H, c->Hkv, c->D);
    prt_qk_proj_norm_bwd(d, dwq, dwk, c->xin, c->wq, c->wk, c->rstd, dot, c->N, c->H, c->Hkv, c->D, c->H * c->D,
                         c->Hkv * c->D);
    free(dot);
}

/* c's random input and gains, its buffers, and the forward over them. */
static void qk_proj_start(QkProjCtx *c)
{
    size_t n = c->N * (c->H + 2 * c->Hkv) * c->D, Cq = c->H * c->D, Ck = c->Hkv * c->D;
    c->in = rnd(n, 1); c->qkv = zeros(n); c->xin = zeros(c->N * (Cq + Ck)); c->rstd = zeros(2 * c->N);
    c->wq = rnd(Cq, 1); c->wk = rnd(Ck, 1);
    qk_proj_fwd(c);
}

static void test_qk_proj_norm(void **state)
{
    (void)state;
    QkProjCtx c = {.N = 5, .H = 4, .Hkv = 2, .D = 6};
    size_t R = (c.H + 2 * c.Hkv) * c.D, n = c.N * R, Cq = c.H * c.D, Ck = c.Hkv * c.D;
    qk_proj_start(&c);
    double *ref = malloc(n * sizeof *ref);
    for (size_t i = 0; i < c.N; i++) {
        const float *x = c.in + i * R;
        double sq = 0, sk = 0;
        for (size_t k = 0; k < Cq; k++) sq += (double)x[k] * x[k];
        for (size_t k = Cq; k < Cq + Ck; k++) sk += (double)x[k] * x[k];
        sq = 1 / sqrt(sq / (double)Cq + 1e-5); sk = 1 / sqrt(sk / (double)Ck + 1e-5);
        for (size_t k = 0; k < R; k++)
            ref[i * R + k] = k < Cq ? x[k] * sq * c.wq[k] : k < Cq + Ck ? x[k] * sk * c.wk[k - Cq] : x[k];
    }
    assert_int_equal(validate("qk_proj fwd", c.qkv, ref, n, 1e-6, 1e-5), 0);
    float *r = rnd(n, 1), *d = malloc(n * sizeof *d), *dwq = zeros(Cq), *dwk = zeros(Ck);
    memcpy(d, r, n * sizeof *d);
    qk_proj_bwd(d, dwq, dwk, &c);
    FdTensor ts[] = {{"qk_proj dx", c.in, d, n}, {"qk_proj dwq", c.wq, dwq, Cq}, {"qk_proj dwk", c.wk, dwk, Ck}};
    assert_int_equal(fd_check(qk_proj_fwd, &c, c.qkv, r, n, ts, 3, 1e-2, 1e-4, 1e-3), 0);
    free(ref); free(r); free(d); free(dwq); free(dwk);
    free(c.in); free(c.qkv); free(c.xin); free(c.rstd); free(c.wq); free(c.wk);
}

/* The same norm split over 2 TP ranks as the program runs it: each rank
 * holds half the query and half the key heads (and their gain slices);
 * its sums of squares and backward dots, summed over the two ranks (the
 * program's all-reduce over TP), give exactly the whole's outputs, dx
 * and gain gradients; the rank's own sums alone (no all-reduce) do not. */
static void qk_proj_shard(float *dst, const float *src, size_t N, size_t H, size_t Hkv, size_t D, int r)
{
    size_t R = (H + 2 * Hkv) * D, Rl = (H / 2 + Hkv) * D;   /* whole and shard rows */
    for (size_t i = 0; i < N; i++) {
        memcpy(dst + i * Rl, src + i * R + r * H / 2 * D, H / 2 * D * sizeof *dst);
        for (size_t p = 0; p < 2; p++)   /* k then v: this rank's half of each */
            memcpy(dst + i * Rl + (H / 2 + p * Hkv / 2) * D, src + i * R + (H + p * Hkv + r * Hkv / 2) * D,
                   Hkv / 2 * D * sizeof *dst);
    }
}

static int qk_proj_tp2(const QkProjCtx *w, const float *dy, const float *dx, const float *dwq, const float *dwk,
                       bool reduce)
{
    size_t N = w->N, H = w->H, Hkv = w->Hkv, D = w->D, Rl = (H / 2 + Hkv) * D;
    size_t hq = H / 2 * D, hk = Hkv / 2 * D, Cq = H * D, Ck = Hkv * D;
    float *y[2], *g[2], *xin[2], *ss[2], *dot[2], *gq[2], *gk[2], *sub[2];
    for (int r = 0; r < 2; r++) {
        y[r] = zeros(N * Rl); g[r] = zeros(N * Rl); sub[r] = zeros(N * Rl);
        xin[r] = zeros(N * (hq + hk)); ss[r] = zeros(2 * N); dot[r] = zeros(2 * N);
        gq[r] = zeros(hq); gk[r] = zeros(hk);
        qk_proj_shard(y[r], w->in, N, H, Hkv, D, r);
        qk_proj_shard(g[r], dy, N, H, Hkv, D, r);
        prt_qk_proj_sumsq(ss[r], y[r], N, H / 2, Hkv / 2, D);
    }
    for (size_t k = 0; reduce && k < 2 * N; k++) ss[0][k] = ss[1][k] = ss[0][k] + ss[1][k];   /* all-reduce */
    for (int r = 0; r < 2; r++) {
        prt_qk_proj_norm_fwd(y[r], xin[r], ss[r], ss[r], w->wq + r * hq, w->wk + r * hk, N, H / 2, Hkv / 2, D, Cq,
                             Ck, 1e-5f);
        prt_qk_proj_dot(dot[r], g[r], xin[r], w->wq + r * hq, w->wk + r * hk, ss[r], N, H / 2, Hkv / 2, D);
    }
    for (size_t k = 0; reduce && k < 2 * N; k++) dot[0][k] = dot[1][k] = dot[0][k] + dot[1][k];
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        prt_qk_proj_norm_bwd(g[r], gq[r], gk[r], xin[r], w->wq + r * hq, w->wk + r * hk, ss[r], dot[r], N, H / 2,
                             Hkv / 2, D, Cq, Ck);
        qk_proj_shard(sub[r], w->qkv, N, H, Hkv, D, r);   /* the whole's outputs, this rank's part */
        bad += validate_f("qk_proj tp2 y", y[r], sub[r], N * Rl, 1e-6, 1e-5) != 0;
        qk_proj_shard(sub[r], dx, N, H, Hkv, D, r);
        bad += validate_f("qk_proj tp2 dx", g[r], sub[r], N * Rl, 1e-6, 1e-5) != 0;
        bad += validate_f("qk_proj tp2 dwq", gq[r], dwq + r * hq, hq, 1e-6, 1e-5) != 0;
        bad += validate_f("qk_proj tp2 dwk", gk[r], dwk + r * hk, hk, 1e-6, 1e-5) != 0;
        void *f[] = {y[r], g[r], xin[r], ss[r], dot[r], gq[r], gk[r], sub[r]};
        for (size_t i = 0; i < 8; i++) free(f[i]);
    }
    return bad;
}

static void test_qk_proj_norm_tp2(void **state)
{
    (void)state;
    QkProjCtx c = {.N = 5, .H = 4, .Hkv = 2, .D = 6};
    size_t R = (c.H + 2 * c.Hkv) * c.D, n = c.N * R, Cq = c.H * c.D, Ck = c.Hkv * c.D;
    qk_proj_start(&c);
    float *dy = rnd(n, 1), *dx = malloc(n * sizeof *dx), *dwq = zeros(Cq), *dwk = zeros(Ck);
    memcpy(dx, dy, n * sizeof *dx);
    qk_proj_bwd(dx, dwq, dwk, &c);
    assert_int_equal(qk_proj_tp2(&c, dy, dx, dwq, dwk, true), 0);
    fprintf(stderr, "(the same without the all-reduce must differ:)\n");
    assert_true(qk_proj_tp2(&c, dy, dx, dwq, dwk, false) > 0);
    free(dy); free(dx); free(dwq); free(dwk);
    free(c.in); free(c.qkv); free(c.xin); free(c.rstd); free(c.wq); free(c.wk);
}

/* Context parallelism (issue 26): CP rank r of cp holds, of each sequence
 * of T tokens, chunks r and 2cp-1-r of 2cp (prt_cp_pos). The position and
 * RoPE ops on its T/cp local rows must give exactly the whole-sequence
 * ops' rows at those positions, every position on exactly one rank, and
 * the ranks' learned-position gradients must sum to the whole one's. */
static void test_cp_positions(void **state)
{
    (void)state;
    const size_t B = 2, T = 8, C = 3, H = 2, Hkv = 1, D = 4, R = (H + 2 * Hkv) * D;
    for (int cp = 1; cp <= 4; cp *= 2) {
        size_t Tl = T / (size_t)cp;
        float *wpe = rnd(T * C, 1), *x = rnd(B * T * C, 1), *full = malloc(B * T * C * sizeof *full);
        memcpy(full, x, B * T * C * sizeof *full);
        prt_position_fwd(full, wpe, B, T, C);
        float *q = rnd(B * T * R, 1), *qfull = malloc(B * T * R * sizeof *qfull);
        memcpy(qfull, q, B * T * R * sizeof *qfull);
        prt_rope_fwd(qfull, B, T, H, Hkv, D, &PRT_ROPE_PLAIN(100.0f));
        float *g = rnd(B * T * C, 1), *dfull = zeros(T * C), *dsum = zeros(T * C);
        prt_position_bwd(dfull, g, B, T, C);
        int seen[8] = {0};
        for (int r = 0; r < cp; r++) {
            float *xl = malloc(B * Tl * C * sizeof *xl), *gl = malloc(B * Tl * C * sizeof *gl);
            float *ql = malloc(B * Tl * R * sizeof *ql), *qback = malloc(B * Tl * R * sizeof *qback);
            for (size_t b = 0; b < B; b++)
                for (size_t t = 0; t < Tl; t++) {
                    size_t pos = prt_cp_pos(t, T, cp, r);
                    if (b == 0) seen[pos]++;
                    memcpy(xl + (b * Tl + t) * C, x + (b * T + pos) * C, C * sizeof *xl);
                    memcpy(gl + (b * Tl + t) * C, g + (b * T + pos) * C, C * sizeof *gl);
                    memcpy(ql + (b * Tl + t) * R, q + (b * T + pos) * R, R * sizeof *ql);
                }
            memcpy(qback, ql, B * Tl * R * sizeof *ql);
            prt_position_cp_fwd(xl, wpe, B, Tl, C, T, cp, r);
            prt_rope_cp_fwd(ql, B, Tl, H, Hkv, D, &PRT_ROPE_PLAIN(100.0f), T, cp, r);
            prt_position_cp_bwd(dsum, gl, B, Tl, C, T, cp, r);
            for (size_t b = 0; b < B; b++)
                for (size_t t = 0; t < Tl; t++) {
                    size_t pos = prt_cp_pos(t, T, cp, r);
                    for (size_t k = 0; k < C; k++)
                        assert_float_equal(xl[(b * Tl + t) * C + k], full[(b * T + pos) * C + k], 0);
                    for (size_t k = 0; k < R; k++)
                        assert_float_equal(ql[(b * Tl + t) * R + k], qfull[(b * T + pos) * R + k], 1e-6);
                }
            prt_rope_cp_bwd(ql, B, Tl, H, Hkv, D, &PRT_ROPE_PLAIN(100.0f), T, cp, r);   /* the inverse rotation */
            for (size_t i = 0; i < B * Tl * R; i++) assert_float_equal(ql[i], qback[i], 1e-5);
            free(xl); free(gl); free(ql); free(qback);
        }
        for (size_t pos = 0; pos < T; pos++) assert_int_equal(seen[pos], 1);
        for (size_t i = 0; i < T * C; i++) assert_float_equal(dsum[i], dfull[i], 1e-6);
        free(wpe); free(x); free(full); free(q); free(qfull); free(g); free(dfull); free(dsum);
    }
}

/* ---- multi-head latent attention ---------------------------------------------- */

/* One MLA case: dims, weights (allocated together), what the forward keeps. */
typedef struct {
    prt_mla_dims d;
    prt_rope rope;
    float *x, *o, *ws;
    float *wqa, *bqa, *gqa, *wqb, *wkva, *bkva, *gkva, *wkvb;
    prt_mla_w w;
    prt_mla_kept k;
} MlaCtx;

static void mla_fwd(void *p)
{
    MlaCtx *c = p;
    prt_mla_fwd(c->o, &c->k, c->ws, c->x, &c->w, &c->d);
}

/* Random weights and buffers for dims d (q_lora 0: q_proj in wqb); biases
 * only when `bias`. Gains near 1 as trained ones start. */
static void mla_setup(MlaCtx *c, prt_mla_dims d, bool bias)
{
    memset(c, 0, sizeof *c);
    c->d = d;
    c->d.rope_params = &c->rope;
    size_t N = d.B * d.T, H = d.H, dq = d.nope + d.rope, D = dq > d.v ? dq : d.v, R = d.kv_lora + d.rope;
    size_t qin = d.q_lora ? d.q_lora : d.C;
    c->x = rnd(N * d.C, 1);
    c->o = zeros(N * H * d.v);
    c->ws = zeros(prt_mla_ws_elems(&c->d));
    if (d.q_lora) {
        c->wqa = rnd(d.q_lora * d.C, 0.5f);
        c->gqa = rnd(d.q_lora, 0.2f);
        for (size_t i = 0; i < d.q_lora; i++) c->gqa[i] += 1.0f;
        if (bias) c->bqa = rnd(d.q_lora, 0.3f);
    }
    c->wqb = rnd(H * dq * qin, 0.5f);
    c->wkva = rnd(R * d.C, 0.5f);
    c->gkva = rnd(d.kv_lora, 0.2f);
    for (size_t i = 0; i < d.kv_lora; i++) c->gkva[i] += 1.0f;
    if (bias) c->bkva = rnd(R, 0.3f);
    c->wkvb = rnd(H * (d.nope + d.v) * d.kv_lora, 0.5f);
    c->w = (prt_mla_w){ c->wqa, c->bqa, c->gqa, c->wqb, c->wkva, c->bkva, c->gkva, c->wkvb };
    c->k = (prt_mla_kept){ zeros(N * d.q_lora), zeros(N * d.q_lora), zeros(N), zeros(N * R),
                           zeros(N * d.kv_lora), zeros(N * d.kv_lora), zeros(N), zeros(N * 3 * H * D),
                           zeros(d.B * H * d.T * d.T), zeros(N * H * D) };
}

static void mla_free(MlaCtx *c)
{
    float *p[] = { c->x, c->o, c->ws, c->wqa, c->bqa, c->gqa, c->wqb, c->wkva, c->bkva, c->gkva, c->wkvb,
                   c->k.qa, c->k.qn, c->k.qr, c->k.kva, c->k.kvl, c->k.kvn, c->k.kvr, c->k.qkv, c->k.att,
                   c->k.opad };
    for (size_t i = 0; i < N_ELEMS(p); i++) free(p[i]);
}

/* y (O) = W (O, K) x (K) + b, in double. */
static void ref_lin(double *y, const double *x, const float *w, const float *b, size_t K, size_t O)
{
    for (size_t o = 0; o < O; o++) {
        double a = b ? b[o] : 0;
        for (size_t j = 0; j < K; j++) a += (double)w[o * K + j] * x[j];
        y[o] = a;
    }
}

static void ref_rms(double *x, const float *g, size_t C, double eps)
{
    double ss = 0;
    for (size_t j = 0; j < C; j++) ss += x[j] * x[j];
    double s = 1.0 / sqrt(ss / (double)C + eps);
    for (size_t j = 0; j < C; j++) x[j] *= s * g[j];
}

/* Interleaved pairs of p (r values) rotated by t * inv_freq, times the mscale. */
static void ref_rope(double *p, size_t r, size_t t, const prt_rope *rope)
{
    double m = prt_rope_mscale(rope);
    for (size_t i = 0; i < r / 2; i++) {
        double a = (double)t * prt_rope_inv_freq(rope, i, r), re = p[2 * i], im = p[2 * i + 1];
        p[2 * i] = m * (re * cos(a) - im * sin(a));
        p[2 * i + 1] = m * (re * sin(a) + im * cos(a));
    }
}

/* MLA as DeepseekV2Attention computes it, in double, with no padding:
 * scores q.k / sqrt(nope + rope) (times DeepSeek's YaRN softmax factor),
 * causal softmax, values of v. */
static void mla_ref(double *out, const MlaCtx *c)
{
    const prt_mla_dims *d = &c->d;
    size_t N = d->B * d->T, H = d->H, n = d->nope, r = d->rope, dq = n + r, KV = n + d->v, R = d->kv_lora + r;
    double *q = malloc(N * H * dq * sizeof *q), *k = malloc(N * H * dq * sizeof *k), *v = malloc(N * H * d->v * sizeof *v);
    double xs[64], a[64], kva[64], kvh[256], pe[16], p[16];
    /* DeepseekV3Attention: the scale times (0.1 mscale_all_dim ln factor + 1)^2 */
    const prt_rope *ro = &c->rope;
    double mall = ro->kind == PRT_ROPE_YARN && ro->mscale_all_dim != 0 && ro->factor > 1
                      ? 0.1 * ro->mscale_all_dim * log(ro->factor) + 1 : 1, soft = mall * mall;
    for (size_t i = 0; i < N; i++) {
        size_t t = i % d->T;
        for (size_t j = 0; j < d->C; j++) xs[j] = c->x[i * d->C + j];
        if (d->q_lora) {
            ref_lin(a, xs, c->wqa, c->bqa, d->C, d->q_lora);
            ref_rms(a, c->gqa, d->q_lora, d->eps);
            ref_lin(q + i * H * dq, a, c->wqb, NULL, d->q_lora, H * dq);
        } else {
            ref_lin(q + i * H * dq, xs, c->wqb, NULL, d->C, H * dq);
        }
        ref_lin(kva, xs, c->wkva, c->bkva, d->C, R);
        ref_rms(kva, c->gkva, d->kv_lora, d->eps);   /* the latent part only */
        ref_lin(kvh, kva, c->wkvb, NULL, d->kv_lora, H * KV);
        memcpy(pe, kva + d->kv_lora, r * sizeof *pe);
        ref_rope(pe, r, t, &c->rope);
        for (size_t h = 0; h < H; h++) {
            ref_rope(q + i * H * dq + h * dq + n, r, t, &c->rope);
            for (size_t j = 0; j < n; j++) k[i * H * dq + h * dq + j] = kvh[h * KV + j];
            for (size_t j = 0; j < r; j++) k[i * H * dq + h * dq + n + j] = pe[j];
            for (size_t j = 0; j < d->v; j++) v[i * H * d->v + h * d->v + j] = kvh[h * KV + n + j];
        }
    }
    for (size_t b = 0; b < d->B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t t = 0; t < d->T; t++) {
                size_t i = b * d->T + t;
                double m = -INFINITY, sum = 0;
                for (size_t u = 0; u <= t; u++) {
                    double dot = 0;
                    for (size_t j = 0; j < dq; j++) dot += q[i * H * dq + h * dq + j] * k[(b * d->T + u) * H * dq + h * dq + j];
                    p[u] = dot * soft / sqrt((double)dq);
                    m = fmax(m, p[u]);
                }
                for (size_t u = 0; u <= t; u++) sum += p[u] = exp(p[u] - m);
                for (size_t j = 0; j < d->v; j++) {
                    double o = 0;
                    for (size_t u = 0; u <= t; u++) o += p[u] / sum * v[(b * d->T + u) * H * d->v + h * d->v + j];
                    out[i * H * d->v + h * d->v + j] = o;
                }
            }
    free(q); free(k); free(v);
}

/* MLA's forward against the reference and its backward against finite
 * differences of every input: DeepSeek-V3's form (a query latent, d_v <
 * d_q: V padded) with biases and YaRN, and V2-Lite's (q_proj) with d_v >
 * d_q (q, k padded, the queries rescaled); each again with DeepSeek's
 * mscale pair (0.8, 0.5 at factor 4: cos and sin times 1.0389, the
 * softmax scale times 1.1434). */
static void test_mla(void **state)
{
    (void)state;
    const struct { prt_mla_dims d; bool bias; prt_rope rope; } cases[] = {
        { { .B = 2, .T = 5, .H = 2, .C = 12, .q_lora = 10, .kv_lora = 8, .rope = 4, .nope = 6, .v = 5, .eps = 1e-6f },
          true, { PRT_ROPE_YARN, 100, 4, 1, 4, 32, 1, 16, 1, 0 } },
        { { .B = 2, .T = 5, .H = 3, .C = 12, .q_lora = 0, .kv_lora = 6, .rope = 2, .nope = 3, .v = 7, .eps = 1e-6f },
          false, { PRT_ROPE_DEFAULT, 100, 1, 1, 4, 32, 1, 0, 1, 0 } },
        { { .B = 2, .T = 5, .H = 2, .C = 12, .q_lora = 10, .kv_lora = 8, .rope = 4, .nope = 6, .v = 5, .eps = 1e-6f },
          true, { PRT_ROPE_YARN, 100, 4, 1, 4, 32, 1, 16, 0.8, 0.5 } },
        { { .B = 2, .T = 5, .H = 3, .C = 12, .q_lora = 0, .kv_lora = 6, .rope = 2, .nope = 3, .v = 7, .eps = 1e-6f },
          false, { PRT_ROPE_YARN, 100, 4, 1, 4, 32, 1, 16, 0.8, 0.5 } },
    };
    for (size_t k = 0; k < N_ELEMS(cases); k++) {
        MlaCtx c;
        mla_setup(&c, cases[k].d, cases[k].bias);
        c.rope = cases[k].rope;
        const prt_mla_dims *d = &c.d;
        size_t N = d->B * d->T, H = d->H, dq = d->nope + d->rope, R = d->kv_lora + d->rope;
        size_t qin = d->q_lora ? d->q_lora : d->C, nout = N * H * d->v;
        mla_fwd(&c);
        double *ref = malloc(nout * sizeof *ref);
        mla_ref(ref, &c);
        assert_int_equal(validate("mla fwd", c.o, ref, nout, 1e-5, 1e-4), 0);
        float *r = rnd(nout, 1), *dx = zeros(N * d->C);
        prt_mla_grad g = { zeros(d->q_lora * d->C), zeros(d->q_lora), zeros(d->q_lora), zeros(H * dq * qin),
                           zeros(R * d->C), zeros(R), zeros(d->kv_lora), zeros(H * (d->nope + d->v) * d->kv_lora) };
        prt_mla_bwd(dx, &g, c.ws, r, c.x, &c.k, &c.w, d);
        FdTensor ts[] = { {"mla dx", c.x, dx, N * d->C}, {"mla d q_b / q_proj", c.wqb, g.wqb, H * dq * qin},
                          {"mla d kv_a", c.wkva, g.wkva, R * d->C}, {"mla d kv_a norm", c.gkva, g.gkva, d->kv_lora},
                          {"mla d kv_b", c.wkvb, g.wkvb, H * (d->nope + d->v) * d->kv_lora},
                          {"mla d q_a", c.wqa, g.wqa, d->q_lora * d->C}, {"mla d q_a norm", c.gqa, g.gqa, d->q_lora},
                          {"mla d q_a bias", c.bqa, g.bqa, d->q_lora}, {"mla d kv_a bias", c.bkva, g.bkva, R} };
        int nt = d->q_lora ? (cases[k].bias ? 9 : 7) : 5;
        assert_int_equal(fd_check(mla_fwd, &c, c.o, r, nout, ts, nt, 1e-2, 1e-3, 2e-3), 0);
        free(ref); free(r); free(dx);
        float *gp[] = { g.wqa, g.bqa, g.gqa, g.wqb, g.wkva, g.bkva, g.gkva, g.wkvb };
        for (size_t i = 0; i < N_ELEMS(gp); i++) free(gp[i]);
        mla_free(&c);
    }
}

/* MLA under TP 2 (planc's rule): each rank holds half the heads of q_b and
 * kv_b and the down projections and latent norms whole; its output is the
 * one-rank output's columns of its heads, and the sum over the ranks of dx
 * and of the replicated weights' gradients is the one-rank gradient. */
static void test_mla_tp(void **state)
{
    (void)state;
    prt_mla_dims d = { .B = 2, .T = 4, .H = 4, .C = 8, .q_lora = 6, .kv_lora = 6, .rope = 2, .nope = 4, .v = 3,
                       .eps = 1e-6f };
    MlaCtx one;
    mla_setup(&one, d, true);
    one.rope = PRT_ROPE_PLAIN(100.0);
    size_t N = d.B * d.T, dq = d.nope + d.rope, KV = d.nope + d.v, R = d.kv_lora + d.rope, Hl = d.H / 2;
    mla_fwd(&one);
    float *r = rnd(N * d.H * d.v, 1), *dx1 = zeros(N * d.C);
    prt_mla_grad g1 = { zeros(d.q_lora * d.C), zeros(d.q_lora), zeros(d.q_lora), zeros(d.H * dq * d.q_lora),
                        zeros(R * d.C), zeros(R), zeros(d.kv_lora), zeros(d.H * KV * d.kv_lora) };
    prt_mla_bwd(dx1, &g1, one.ws, r, one.x, &one.k, &one.w, &one.d);
    float *dxs = zeros(N * d.C), *gqa = zeros(d.q_lora * d.C), *gkva = zeros(R * d.C), *ggk = zeros(d.kv_lora);
    int bad = 0;
    for (size_t rank = 0; rank < 2; rank++) {
        prt_mla_dims dl = d;
        dl.H = Hl;
        MlaCtx c;
        mla_setup(&c, dl, true);
        c.rope = one.rope;
        memcpy(c.x, one.x, N * d.C * sizeof *c.x);
        memcpy(c.wqa, one.wqa, d.q_lora * d.C * sizeof *c.wqa);
        memcpy(c.bqa, one.bqa, d.q_lora * sizeof *c.bqa);
        memcpy(c.gqa, one.gqa, d.q_lora * sizeof *c.gqa);
        memcpy(c.wkva, one.wkva, R * d.C * sizeof *c.wkva);
        memcpy(c.bkva, one.bkva, R * sizeof *c.bkva);
        memcpy(c.gkva, one.gkva, d.kv_lora * sizeof *c.gkva);
        /* the rank's heads: row blocks of q_b and kv_b */
        memcpy(c.wqb, one.wqb + rank * Hl * dq * d.q_lora, Hl * dq * d.q_lora * sizeof *c.wqb);
        memcpy(c.wkvb, one.wkvb + rank * Hl * KV * d.kv_lora, Hl * KV * d.kv_lora * sizeof *c.wkvb);
        mla_fwd(&c);
        float *ro = malloc(N * Hl * d.v * sizeof *ro), *oo = malloc(N * Hl * d.v * sizeof *oo);
        for (size_t i = 0; i < N; i++) {
            memcpy(ro + i * Hl * d.v, r + i * d.H * d.v + rank * Hl * d.v, Hl * d.v * sizeof *ro);
            memcpy(oo + i * Hl * d.v, one.o + i * d.H * d.v + rank * Hl * d.v, Hl * d.v * sizeof *oo);
        }
        bad += validate_f("mla tp output", c.o, oo, N * Hl * d.v, 1e-6, 1e-5);
        float *dx = zeros(N * d.C);
        prt_mla_grad g = { gqa, zeros(d.q_lora), zeros(d.q_lora), zeros(Hl * dq * d.q_lora), gkva, zeros(R), ggk,
                           zeros(Hl * KV * d.kv_lora) };
        prt_mla_bwd(dx, &g, c.ws, ro, c.x, &c.k, &c.w, &c.d);
        prt_add_inplace(dxs, dx, N * d.C);
        bad += validate_f("mla tp d q_b rows", g.wqb, g1.wqb + rank * Hl * dq * d.q_lora, Hl * dq * d.q_lora, 1e-5, 1e-4);
        free(ro); free(oo); free(dx); free(g.bqa); free(g.gqa); free(g.wqb); free(g.bkva); free(g.wkvb);
        mla_free(&c);
    }
    bad += validate_f("mla tp dx (sum over ranks)", dxs, dx1, N * d.C, 1e-5, 1e-4);
    bad += validate_f("mla tp d q_a (sum)", gqa, g1.wqa, d.q_lora * d.C, 1e-5, 1e-4);
    bad += validate_f("mla tp d kv_a (sum)", gkva, g1.wkva, R * d.C, 1e-5, 1e-4);
    bad += validate_f("mla tp d kv_a norm (sum)", ggk, g1.gkva, d.kv_lora, 1e-5, 1e-4);
    assert_int_equal(bad, 0);
    float *gp[] = { g1.wqa, g1.bqa, g1.gqa, g1.wqb, g1.wkva, g1.bkva, g1.gkva, g1.wkvb, r, dx1, dxs, gqa, gkva, ggk };
    for (size_t i = 0; i < N_ELEMS(gp); i++) free(gp[i]);
    mla_free(&one);
}

/* ---- attention ---------------------------------------------------------------- */

typedef struct {
    float *out, *att, *qkv;
    size_t B, T, H, Hkv, D, W;   /* W: window, 0 full */
    bool scored;                 /* through prt_attention_scores_* with sc */
    prt_attn_scores sc;
} AttCtx;
static void att_fwd(void *p)
{
    AttCtx *c = p;
    if (c->scored)
        prt_attention_scores_fwd(c->out, c->att, c->qkv, c->B, c->T, c->H, c->Hkv, c->D, c->W, c->sc);
    else
        prt_attention_fwd(c->out, c->att, c->qkv, c->B, c->T, c->H, c->Hkv, c->D, c->W);
}

/* Naive causal attention in double, element by element; with W > 0 query
 * t sees keys t - W + 1 .. t only (keys before 0 do not exist); scores
 * q.k * scale, then with cap > 0 cap tanh(score / cap) (Gemma 2). */
static void att_ref(double *out, const float *qkv, size_t B, size_t T, size_t H,
                    size_t Hkv, size_t D, size_t W, double scale, double cap)
{
    size_t R = (H + 2 * Hkv) * D, G = H / Hkv;
    double *p = malloc(T * sizeof *p);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t t = 0; t < T; t++) {
                const float *q = qkv + (b * T + t) * R + h * D;
                double m = -INFINITY, s = 0;
                size_t j0 = (W == 0 || t < W) ? 0 : t - (W - 1);
                for (size_t j = j0; j <= t; j++) {
                    const float *k = qkv + (b * T + j) * R + (H + h / G) * D;
                    double dot = 0;
                    for (size_t d = 0; d < D; d++)
                        dot += (double)q[d] * k[d];
                    p[j] = dot * scale;
                    if (cap > 0) p[j] = cap * tanh(p[j] / cap);
                    m = fmax(m, p[j]);
                }
                for (size_t j = j0; j <= t; j++)
                    s += p[j] = exp(p[j] - m);
                for (size_t d = 0; d < D; d++) {
                    double o = 0;
                    for (size_t j = j0; j <= t; j++)
                        o += p[j] / s * qkv[(b * T + j) * R + (H + Hkv + h / G) * D + d];
                    out[(b * T + t) * H * D + h * D + d] = o;
                }
            }
    free(p);
}

/* With scored, through prt_attention_scores_fwd/bwd with sc (scale, cap). */
static void check_attention_scored(size_t H, size_t Hkv, bool recompute, size_t W, bool scored,
                                   prt_attn_scores sc)
{
    AttCtx c = {.B = 2, .T = 5, .H = H, .Hkv = Hkv, .D = 4, .W = W, .scored = scored, .sc = sc};
    double scale = scored ? sc.scale : 1.0 / sqrt((double)c.D), cap = scored ? sc.cap : 0.0;
    size_t R = (H + 2 * Hkv) * c.D, N = c.B * c.T, nout = N * H * c.D;
    size_t natt = c.B * H * c.T * c.T;
    c.qkv = rnd(N * R, 1.5f); c.out = zeros(nout); c.att = zeros(natt);
    att_fwd(&c);
    double *ref = malloc(nout * sizeof *ref);
    att_ref(ref, c.qkv, c.B, c.T, H, Hkv, c.D, W, scale, cap);
    assert_int_equal(validate("attention fwd", c.out, ref, nout, 1e-5, 1e-4), 0);
    float *r = rnd(nout, 1), *dqkv = zeros(N * R), *datt = zeros(natt);
    if (recompute)
        memset(c.att, 0, natt * sizeof *c.att);   /* backward must rebuild it */
    if (scored)
        prt_attention_scores_bwd(dqkv, datt, r, c.qkv, c.att, recompute, c.B, c.T, H, Hkv, c.D, W, sc);
    else
        prt_attention_bwd(dqkv, datt, r, c.qkv, c.att, recompute, c.B, c.T, H, Hkv, c.D, W);
    /* the window's masked probabilities are exact zeros, kept for backward
       (with a cap the backward leaves the raw scores in att instead) */
    for (size_t bh = 0; W && cap == 0 && bh < c.B * H; bh++)
        for (size_t t = 0; t < c.T; t++)
            for (size_t j = 0; j + W <= t; j++)
                assert_true(c.att[(bh * c.T + t) * c.T + j] == 0.0f);
    FdTensor ts[] = {{"attention dqkv", c.qkv, dqkv, N * R}};
    assert_int_equal(fd_check(att_fwd, &c, c.out, r, nout, ts, 1, 1e-2, 1e-3, 2e-3), 0);
    free(ref); free(r); free(dqkv); free(datt); free(c.qkv); free(c.out); free(c.att);
}

static void check_attention(size_t H, size_t Hkv, bool recompute, size_t W)
{
    check_attention_scored(H, Hkv, recompute, W, false, prt_attn_default(4));
}

static void test_attention_mha(void **state) { (void)state; check_attention(3, 3, false, 0); }
static void test_attention_gqa(void **state) { (void)state; check_attention(4, 2, false, 0); }
static void test_attention_mqa_recompute(void **state) { (void)state; check_attention(4, 1, true, 0); }
/* sliding windows of 2 and 1 keys (T 5), and one no shorter than T: the
 * last must equal full causal attention */
static void test_attention_window(void **state)
{
    (void)state;
    check_attention(3, 3, false, 2);
    check_attention(4, 2, true, 1);
    check_attention(4, 2, false, 5);
}

/* Gemma 2's score transform: another scale (query_pre_attn_scalar) and a
 * soft-cap small enough that tanh bends the scores (|q.k scale| reaches
 * ~3 here, cap 1.5), with GQA, a window, selective recomputation; and a
 * cap so large it is the identity to float precision. */
static void test_attention_softcap(void **state)
{
    (void)state;
    check_attention_scored(4, 2, false, 0, true, (prt_attn_scores){ 0.8f, 1.5f });
    check_attention_scored(4, 2, true, 3, true, (prt_attn_scores){ 0.8f, 1.5f });
    check_attention_scored(3, 1, false, 2, true, (prt_attn_scores){ 0.3f, 0.0f });   /* scale only */
    check_attention_scored(4, 4, true, 0, true, (prt_attn_scores){ 0.5f, 1e6f });
}

/* ---- cross-entropy ----------------------------------------------------------- */

typedef struct { float *logits, *loss, *mx, *se, *tgt; int32_t *targets; size_t N, V; } XentCtx;
static void xent_fwd(void *p)
{
    XentCtx *c = p;
    prt_xent_max(c->mx, c->logits, c->N, c->V, 0, c->V);
    prt_xent_sumexp(c->se, c->tgt, c->logits, c->mx, c->targets, c->N, c->V, 0, c->V);
    prt_xent_loss(c->loss, c->mx, c->se, c->tgt, c->targets, c->N);
}

static void test_xent(void **state)
{
    (void)state;
    XentCtx c = {.N = 5, .V = 11};
    int32_t targets[5] = {3, 0, 10, -1, 7};   /* -1: ignored position */
    c.targets = targets;
    c.logits = rnd(c.N * c.V, 4); c.loss = zeros(c.N);
    c.mx = zeros(c.N); c.se = zeros(c.N); c.tgt = zeros(c.N);
    xent_fwd(&c);
    double ref[5];
    for (size_t i = 0; i < c.N; i++) {
        double s = 0;
        for (size_t j = 0; j < c.V; j++)
            s += exp(c.logits[i * c.V + j]);
        ref[i] = targets[i] < 0 ? 0 : log(s) - c.logits[i * c.V + targets[i]];
    }
    assert_int_equal(validate("xent loss", c.loss, ref, c.N, 1e-5, 1e-5), 0);
    float *r = rnd(c.N, 1), *dl = zeros(c.N * c.V), *acc = zeros(c.N * c.V);
    for (size_t i = 0; i < c.N; i++) {   /* dL/dlogits with L = sum r_i loss_i */
        prt_xent_bwd(dl, c.logits, c.mx, c.se, c.targets, c.N, c.V, 0, c.V, r[i]);
        for (size_t j = 0; j < c.V; j++)
            acc[i * c.V + j] = dl[i * c.V + j];
    }
    FdTensor ts[] = {{"xent dlogits", c.logits, acc, c.N * c.V}};
    assert_int_equal(fd_check(xent_fwd, &c, c.loss, r, c.N, ts, 1, 1e-2, 3e-4, 1e-3), 0);

    /* vocab-parallel: two slices [0, 4) and [4, 11), combined as the caller
     * would with max and sum all-reduces, give the same loss and gradient */
    size_t cut = 4, Vs[2] = {cut, c.V - cut}, v0s[2] = {0, cut};
    float mx[2][5], se[2][5], tg[2][5], gmx[5], gse[5], gtg[5], loss[5];
    float *sl[2], *dsl[2];
    for (int k = 0; k < 2; k++) {
        sl[k] = zeros(c.N * Vs[k]); dsl[k] = zeros(c.N * Vs[k]);
        for (size_t i = 0; i < c.N; i++)
            memcpy(sl[k] + i * Vs[k], c.logits + i * c.V + v0s[k], Vs[k] * sizeof(float));
        prt_xent_max(mx[k], sl[k], c.N, Vs[k], v0s[k], c.V);
    }
    for (size_t i = 0; i < c.N; i++)
        gmx[i] = fmaxf(mx[0][i], mx[1][i]);
    for (int k = 0; k < 2; k++)
        prt_xent_sumexp(se[k], tg[k], sl[k], gmx, c.targets, c.N, Vs[k], v0s[k], c.V);
    for (size_t i = 0; i < c.N; i++) {
        gse[i] = se[0][i] + se[1][i];
        gtg[i] = tg[0][i] + tg[1][i];
    }
    prt_xent_loss(loss, gmx, gse, gtg, c.targets, c.N);
    assert_int_equal(validate("xent vocab-parallel loss", loss, ref, c.N, 1e-5, 1e-5), 0);
    prt_xent_bwd(dl, c.logits, c.mx, c.se, c.targets, c.N, c.V, 0, c.V, 0.5f);
    for (int k = 0; k < 2; k++) {
        prt_xent_bwd(dsl[k], sl[k], gmx, gse, c.targets, c.N, Vs[k], v0s[k], c.V, 0.5f);
        for (size_t i = 0; i < c.N; i++)
            assert_int_equal(validate_f("xent vocab-parallel dlogits", dsl[k] + i * Vs[k],
                                        dl + i * c.V + v0s[k], Vs[k], 1e-6, 1e-5), 0);
        free(sl[k]); free(dsl[k]);
    }
    free(r); free(dl); free(acc); free(c.logits); free(c.loss); free(c.mx); free(c.se); free(c.tgt);
}

/* Gemma 2's final-logit soft-cap: loss of cap tanh(raw / cap), its gradient
 * w.r.t. the raw logits from prt_xent_softcap_bwd over the capped logits
 * (in place, as the program calls it), against finite differences and
 * the loss in double; and two vocabulary slices give the full gradient. */
typedef struct { XentCtx x; float *raw; float cap; } CapCtx;
static void cap_fwd(void *p)
{
    CapCtx *c = p;
    memcpy(c->x.logits, c->raw, c->x.N * c->x.V * sizeof *c->raw);
    prt_softcap_fwd(c->x.logits, c->x.N * c->x.V, c->cap);
    xent_fwd(&c->x);
}

static void test_xent_softcap(void **state)
{
    (void)state;
    CapCtx c = {.x = {.N = 5, .V = 11}, .cap = 2.0f};   /* raw logits reach ~4: tanh bends */
    int32_t targets[5] = {3, 0, 10, -1, 7};
    c.x.targets = targets;
    c.raw = rnd(c.x.N * c.x.V, 4); c.x.logits = zeros(c.x.N * c.x.V); c.x.loss = zeros(c.x.N);
    c.x.mx = zeros(c.x.N); c.x.se = zeros(c.x.N); c.x.tgt = zeros(c.x.N);
    cap_fwd(&c);
    double ref[5];
    for (size_t i = 0; i < c.x.N; i++) {
        double s = 0, y[11];
        for (size_t j = 0; j < c.x.V; j++)
            s += exp(y[j] = c.cap * tanh(c.raw[i * c.x.V + j] / c.cap));
        ref[i] = targets[i] < 0 ? 0 : log(s) - y[targets[i]];
    }
    assert_int_equal(validate("softcap xent loss", c.x.loss, ref, c.x.N, 1e-5, 1e-5), 0);
    float *r = rnd(c.x.N, 1), *acc = zeros(c.x.N * c.x.V), *dl = zeros(c.x.N * c.x.V);
    for (size_t i = 0; i < c.x.N; i++) {   /* dL/draw with L = sum r_i loss_i */
        memcpy(dl, c.x.logits, c.x.N * c.x.V * sizeof *dl);
        prt_xent_softcap_bwd(dl, dl, c.x.mx, c.x.se, c.x.targets, c.x.N, c.x.V, 0, c.x.V, r[i], c.cap);
        memcpy(acc + i * c.x.V, dl + i * c.x.V, c.x.V * sizeof *dl);
    }
    FdTensor ts[] = {{"softcap xent draw", c.raw, acc, c.x.N * c.x.V}};
    assert_int_equal(fd_check(cap_fwd, &c, c.x.loss, r, c.x.N, ts, 1, 1e-2, 3e-4, 1e-3), 0);
    /* the cap is elementwise: slices [0, 4) and [4, 11) of the capped
       logits with the full row statistics give the full gradient's slices */
    size_t cut = 4, Vs[2] = {cut, c.x.V - cut}, v0s[2] = {0, cut};
    prt_xent_softcap_bwd(dl, c.x.logits, c.x.mx, c.x.se, c.x.targets, c.x.N, c.x.V, 0, c.x.V, 0.5f, c.cap);
    for (int k = 0; k < 2; k++) {
        float *sl = zeros(c.x.N * Vs[k]);
        for (size_t i = 0; i < c.x.N; i++)
            memcpy(sl + i * Vs[k], c.x.logits + i * c.x.V + v0s[k], Vs[k] * sizeof *sl);
        prt_xent_softcap_bwd(sl, sl, c.x.mx, c.x.se, c.x.targets, c.x.N, Vs[k], v0s[k], c.x.V, 0.5f, c.cap);
        for (size_t i = 0; i < c.x.N; i++)
            assert_int_equal(validate_f("softcap xent sliced", sl + i * Vs[k], dl + i * c.x.V + v0s[k], Vs[k],
                                        0, 0), 0);
        free(sl);
    }
    free(r); free(acc); free(dl); free(c.raw); free(c.x.logits); free(c.x.loss); free(c.x.mx);
    free(c.x.se); free(c.x.tgt);
}

/* ---- padded vocabulary -------------------------------------------------------
 * Vp = V rounded up so that tp divides it (as plan_vocab_padded does): the
 * logits have Vp columns, the last Vp - V of them padding (filled here with
 * large values, so any leak into the softmax shows). Each of tp slices of
 * VL = Vp / tp columns is computed alone and combined as the program's MAX
 * and SUM all-reduces would. The loss and the real columns' gradient must
 * equal, bit for bit, those of the unpadded (N, V) logits cut at the same
 * places (the last real slice narrower, no all-padding slice), and the
 * padding columns' gradient must be exactly 0. */

/* Vocab-parallel cross-entropy over tp slices of width VL of the (N, W)
 * logits (the last slice may be narrower), V real columns: loss (N) and
 * dl (N, W). */
static void xent_sliced(float *loss, float *dl, const float *logits, const int32_t *targets,
                        size_t N, size_t W, size_t V, size_t VL, float scale)
{
    size_t ns = (W + VL - 1) / VL;
    float *mx = zeros(N * ns), *se = zeros(N * ns), *tg = zeros(N * ns);
    float *gmx = zeros(N), *gse = zeros(N), *gtg = zeros(N), *sl = zeros(N * VL);
    for (int pass = 0; pass < 3; pass++)
        for (size_t k = 0; k < ns; k++) {
            size_t v0 = k * VL, w = W - v0 < VL ? W - v0 : VL;
            for (size_t i = 0; i < N; i++)
                memcpy(sl + i * w, logits + i * W + v0, w * sizeof *sl);
            if (pass == 0) {
                prt_xent_max(mx + k * N, sl, N, w, v0, V);
                for (size_t i = 0; i < N; i++)       /* all-reduce MAX over TP */
                    gmx[i] = k ? fmaxf(gmx[i], mx[k * N + i]) : mx[i];
            } else if (pass == 1) {
                prt_xent_sumexp(se + k * N, tg + k * N, sl, gmx, targets, N, w, v0, V);
                for (size_t i = 0; i < N; i++) {     /* all-reduce SUM over TP, rank order */
                    gse[i] = k ? gse[i] + se[k * N + i] : se[i];
                    gtg[i] = k ? gtg[i] + tg[k * N + i] : tg[i];
                }
            } else {
                prt_xent_bwd(sl, sl, gmx, gse, targets, N, w, v0, V, scale);   /* in place */
                for (size_t i = 0; i < N; i++)
                    memcpy(dl + i * W + v0, sl + i * w, w * sizeof *sl);
            }
        }
    prt_xent_loss(loss, gmx, gse, gtg, targets, N);
    free(mx); free(se); free(tg); free(gmx); free(gse); free(gtg); free(sl);
}

static void test_xent_padded(void **state)
{
    (void)state;
    /* V, tp, vocab_multiple: Vp = V rounded up to a multiple of mult * tp */
    static const struct { size_t V, tp, mult; } cases[] = {
        { 11, 1, 8 },    /* one rank, 5 padding columns */
        { 11, 2, 1 },    /* Vp 12: the last slice ends in one padding column */
        { 11, 4, 1 },    /* Vp 12, VL 3: the last slice is 1 real, 2 padding */
        { 9,  4, 2 },    /* Vp 16, VL 4: slice 2 is 1 real, slice 3 all padding */
        { 5,  4, 4 },    /* Vp 16, VL 4: slices 2 and 3 all padding */
    };
    enum { N = 6 };
    int32_t targets[N] = {3, 0, -1, 4, 2, 1};   /* -1: ignored position; all < every V */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t V = cases[c].V, tp = cases[c].tp, mult = cases[c].mult * tp;
        size_t Vp = (V + mult - 1) / mult * mult, VL = Vp / tp;
        targets[N - 1] = (int32_t)V - 1;         /* the last real row */
        float *full = rnd(N * V, 4), *pad = zeros(N * Vp);
        for (size_t i = 0; i < N; i++) {
            memcpy(pad + i * Vp, full + i * V, V * sizeof *pad);
            for (size_t j = V; j < Vp; j++)
                pad[i * Vp + j] = 50.0f + (float)j;   /* would dominate the softmax */
        }
        float ref_loss[N], got_loss[N];
        float *ref_dl = zeros(N * V), *got_dl = zeros(N * Vp);
        xent_sliced(ref_loss, ref_dl, full, targets, N, V, V, VL, 0.25f);
        xent_sliced(got_loss, got_dl, pad, targets, N, Vp, V, VL, 0.25f);
        print_message("  V %zu tp %zu -> Vp %zu, VL %zu\n", V, tp, Vp, VL);
        assert_memory_equal(got_loss, ref_loss, sizeof ref_loss);
        for (size_t i = 0; i < N; i++) {
            assert_memory_equal(got_dl + i * Vp, ref_dl + i * V, V * sizeof(float));
            for (size_t j = V; j < Vp; j++)
                assert_true(got_dl[i * Vp + j] == 0.0f);
        }
        /* and the unpadded reference is the true loss (double precision) */
        double exact[N];
        for (size_t i = 0; i < N; i++) {
            double s = 0;
            for (size_t j = 0; j < V; j++)
                s += exp(full[i * V + j]);
            exact[i] = targets[i] < 0 ? 0 : log(s) - full[i * V + targets[i]];
        }
        assert_int_equal(validate("padded xent loss", got_loss, exact, N, 1e-5, 1e-5), 0);
        free(full); free(pad); free(ref_dl); free(got_dl);
    }
}

/* ---- tensor-parallel composition -------------------------------------------
 * An attention block and an MLP split over tp = 2 ranks the Megatron way
 * (QKV and MLP-up column-parallel, output and MLP-down row-parallel,
 * partial sums added as the all-reduce would) must give the unsplit
 * block's output, and the column-parallel input gradients must add up to
 * the unsplit one. The fused QKV weight is sliced per head: rank r holds
 * [its q heads | its k heads | its v heads]. */

/* Rows [r0, r0+n) of a (rows, cols) matrix appended at dst. */
static float *take_rows(float *dst, const float *src, size_t cols, size_t r0, size_t n)
{
    memcpy(dst, src + r0 * cols, n * cols * sizeof *dst);
    return dst + n * cols;
}

static void take_cols(float *dst, const float *src, size_t rows, size_t cols, size_t c0, size_t n)
{
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * n, src + r * cols + c0, n * sizeof *dst);
}

static void test_tp_attention_mlp(void **state)
{
    (void)state;
    enum { TP = 2 };
    size_t B = 2, T = 6, C = 16, H = 4, Hkv = 2, D = 4, F = 12, N = B * T;
    size_t R = (H + 2 * Hkv) * D, HD = H * D;
    size_t Hl = H / TP, Hkvl = Hkv / TP, Rl = (Hl + 2 * Hkvl) * D, Fl = F / TP;
    float *x = rnd(N * C, 1), *wqkv = rnd(R * C, 0.3f), *wo = rnd(C * HD, 0.3f);
    float *wup = rnd(2 * F * C, 0.3f), *wdown = rnd(C * F, 0.3f), *g = rnd(N * C, 1);
    /* the unsplit block: attention then SwiGLU MLP, both from x */
    float *qkv = zeros(N * R), *att = zeros(B * H * T * T), *ay = zeros(N * HD);
    float *y = zeros(N * C), *gu = zeros(N * 2 * F), *h = zeros(N * F), *y2 = zeros(N * C);
    prt_linear_fwd(qkv, x, wqkv, NULL, N, C, R);
    prt_rope_fwd(qkv, B, T, H, Hkv, D, &PRT_ROPE_PLAIN(10000.0f));
    prt_attention_fwd(ay, att, qkv, B, T, H, Hkv, D, 0);
    prt_linear_fwd(y, ay, wo, NULL, N, HD, C);
    prt_linear_fwd(gu, x, wup, NULL, N, C, 2 * F);
    prt_swiglu_fwd(h, gu, N, F);
    prt_linear_fwd(y2, h, wdown, NULL, N, F, C);
    /* and its input gradient for upstream gradient g on both outputs */
    float *dh = zeros(N * F), *dgu = zeros(N * 2 * F), *dx = zeros(N * C), *dxa = zeros(N * C);
    float *day = zeros(N * HD), *dqkv = zeros(N * R), *datt = zeros(B * H * T * T);
    float *dwo = zeros(C * HD), *dwq = zeros(R * C), *dwu = zeros(2 * F * C), *dwd = zeros(C * F);
    prt_linear_bwd(dh, dwd, NULL, g, h, wdown, N, F, C);
    prt_swiglu_bwd(dgu, gu, dh, N, F);
    prt_linear_bwd(dx, dwu, NULL, dgu, x, wup, N, C, 2 * F);
    prt_linear_bwd(day, dwo, NULL, g, ay, wo, N, HD, C);
    prt_attention_bwd(dqkv, datt, day, qkv, att, false, B, T, H, Hkv, D, 0);
    prt_rope_bwd(dqkv, B, T, H, Hkv, D, &PRT_ROPE_PLAIN(10000.0f));
    prt_linear_bwd(dxa, dwq, NULL, dqkv, x, wqkv, N, C, R);
    prt_add_inplace(dx, dxa, N * C);

    float *ys = zeros(N * C), *y2s = zeros(N * C), *dxs = zeros(N * C);
    for (size_t r = 0; r < TP; r++) {
        float *wq_l = zeros(Rl * C), *wo_l = zeros(C * Hl * D), *wu_l = zeros(2 * Fl * C);
        float *wd_l = zeros(C * Fl), *p = wq_l;
        p = take_rows(p, wqkv, C, r * Hl * D, Hl * D);                      /* q heads */
        p = take_rows(p, wqkv, C, (H + r * Hkvl) * D, Hkvl * D);            /* k heads */
        take_rows(p, wqkv, C, (H + Hkv + r * Hkvl) * D, Hkvl * D);          /* v heads */
        take_cols(wo_l, wo, C, HD, r * Hl * D, Hl * D);
        p = take_rows(wu_l, wup, C, r * Fl, Fl);                            /* gate slice */
        take_rows(p, wup, C, F + r * Fl, Fl);                               /* up slice */
        take_cols(wd_l, wdown, C, F, r * Fl, Fl);
        float *q_l = zeros(N * Rl), *a_l = zeros(B * Hl * T * T), *ay_l = zeros(N * Hl * D);
        float *part = zeros(N * C), *gu_l = zeros(N * 2 * Fl), *h_l = zeros(N * Fl);
        prt_linear_fwd(q_l, x, wq_l, NULL, N, C, Rl);
        prt_rope_fwd(q_l, B, T, Hl, Hkvl, D, &PRT_ROPE_PLAIN(10000.0f));
        prt_attention_fwd(ay_l, a_l, q_l, B, T, Hl, Hkvl, D, 0);
        prt_linear_fwd(part, ay_l, wo_l, NULL, N, Hl * D, C);
        prt_add_inplace(ys, part, N * C);                                   /* all-reduce */
        prt_linear_fwd(gu_l, x, wu_l, NULL, N, C, 2 * Fl);
        prt_swiglu_fwd(h_l, gu_l, N, Fl);
        prt_linear_fwd(part, h_l, wd_l, NULL, N, Fl, C);
        prt_add_inplace(y2s, part, N * C);
        /* backward: each rank's dx is partial; their sum is the input gradient */
        float *dh_l = zeros(N * Fl), *dgu_l = zeros(N * 2 * Fl), *day_l = zeros(N * Hl * D);
        float *dq_l = zeros(N * Rl), *dat_l = zeros(B * Hl * T * T), *dwl = zeros(2 * Fl * C + Rl * C + C * HD);
        prt_linear_bwd(dh_l, dwl, NULL, g, h_l, wd_l, N, Fl, C);
        prt_swiglu_bwd(dgu_l, gu_l, dh_l, N, Fl);
        prt_linear_bwd(part, dwl, NULL, dgu_l, x, wu_l, N, C, 2 * Fl);
        prt_add_inplace(dxs, part, N * C);
        prt_linear_bwd(day_l, dwl, NULL, g, ay_l, wo_l, N, Hl * D, C);
        prt_attention_bwd(dq_l, dat_l, day_l, q_l, a_l, false, B, T, Hl, Hkvl, D, 0);
        prt_rope_bwd(dq_l, B, T, Hl, Hkvl, D, &PRT_ROPE_PLAIN(10000.0f));
        prt_linear_bwd(part, dwl, NULL, dq_l, x, wq_l, N, C, Rl);
        prt_add_inplace(dxs, part, N * C);
        void *f[] = {wq_l, wo_l, wu_l, wd_l, q_l, a_l, ay_l, part, gu_l, h_l, dh_l, dgu_l,
                     day_l, dq_l, dat_l, dwl};
        for (size_t i = 0; i < sizeof f / sizeof *f; i++)
            free(f[i]);
    }
    assert_int_equal(validate_f("tp attention output", ys, y, N * C, 1e-5, 1e-4), 0);
    assert_int_equal(validate_f("tp mlp output", y2s, y2, N * C, 1e-5, 1e-4), 0);
    assert_int_equal(validate_f("tp input gradient", dxs, dx, N * C, 1e-5, 1e-4), 0);
    void *f[] = {x, wqkv, wo, wup, wdown, g, qkv, att, ay, y, gu, h, y2, dh, dgu, dx, dxa, day,
                 dqkv, datt, dwo, dwq, dwu, dwd, ys, y2s, dxs};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        free(f[i]);
}

/* ---- AdamW ------------------------------------------------------------------- */

static void test_adamw(void **state)
{
    (void)state;
    prt_adamw_cfg cfg = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 2, .total = 10,
                         .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                         .clip = 1.0f};
    size_t n = 37;
    float *p = rnd(n, 1), *m = zeros(n), *v = zeros(n), *ps = malloc(n * sizeof *ps);
    float *ms = zeros(n), *vs = zeros(n);
    double *pr = malloc(n * sizeof *pr), *mr = calloc(n, sizeof *mr), *vr = calloc(n, sizeof *vr);
    memcpy(ps, p, n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        pr[i] = p[i];
    for (long t = 1; t <= 3; t++) {
        float *g = rnd(n, 2);
        float scale = prt_clip_scale(prt_grad_sq_norm(g, n), cfg.clip);
        float lr = prt_lr_at(&cfg, t - 1);
        prt_adamw_step(p, g, m, v, n, &cfg, t, lr, cfg.weight_decay, scale);
        /* the same update on slices [0,10), [10,11), [11,37) */
        size_t cuts[4] = {0, 10, 11, n};
        for (int k = 0; k < 3; k++)
            prt_adamw_step(ps + cuts[k], g + cuts[k], ms + cuts[k], vs + cuts[k],
                           cuts[k + 1] - cuts[k], &cfg, t, lr, cfg.weight_decay, scale);
        for (size_t i = 0; i < n; i++) {   /* reference in double */
            double gi = (double)g[i] * scale;
            mr[i] = 0.9 * mr[i] + 0.1 * gi;
            vr[i] = 0.95 * vr[i] + 0.05 * gi * gi;
            double mh = mr[i] / (1 - pow(0.9, t)), vh = vr[i] / (1 - pow(0.95, t));
            pr[i] -= lr * (mh / (sqrt(vh) + 1e-8) + 0.1 * pr[i]);
        }
        free(g);
    }
    assert_memory_equal(p, ps, n * sizeof *p);
    assert_int_equal(validate("adamw", p, pr, n, 1e-6, 1e-5), 0);
    /* schedule: warm-up, peak, cosine midpoint, floor */
    assert_float_equal(prt_lr_at(&cfg, 0), 5e-3f, 1e-9);
    assert_float_equal(prt_lr_at(&cfg, 2), 1e-2f, 1e-9);
    assert_float_equal(prt_lr_at(&cfg, 6), 5.5e-3f, 1e-7);
    assert_float_equal(prt_lr_at(&cfg, 10), 1e-3f, 1e-9);
    assert_float_equal(prt_clip_scale(4.0, 1.0f), 0.5f, 1e-7);
    assert_float_equal(prt_clip_scale(0.25, 1.0f), 1.0f, 0);
    free(p); free(m); free(v); free(ps); free(ms); free(vs); free(pr); free(mr); free(vr);
}

/* ---- initialisation --------------------------------------------------------- */

static void test_init_shards(void **state)
{
    (void)state;
    size_t R = 12, C = 10;
    float *full = zeros(R * C), *part = zeros(R * C);
    assert_int_equal(prt_init_normal(full, R * C, 7, 3, 0, 0.02f), PRT_OK);
    /* ZeRO-style ranges */
    for (size_t off = 0; off < R * C; off += 17)
        prt_init_normal(part + off, off + 17 > R * C ? R * C - off : 17, 7, 3, off, 0.02f);
    assert_memory_equal(full, part, R * C * sizeof *full);
    /* TP shards: column-parallel (rows) and row-parallel (cols), tp = 2 */
    float *sub = zeros(R * C);
    for (int k = 0; k < 2; k++) {
        prt_init_normal_2d(sub, R, C, 0, R, k * C / 2, (k + 1) * C / 2, 7, 3, 0.02f);
        for (size_t r = 0; r < R; r++)
            assert_memory_equal(sub + r * C / 2, full + r * C + k * C / 2, C / 2 * sizeof *sub);
        prt_init_normal_2d(sub, R, C, k * R / 2, (k + 1) * R / 2, 0, C, 7, 3, 0.02f);
        assert_memory_equal(sub, full + k * R / 2 * C, R / 2 * C * sizeof *sub);
    }
    assert_int_equal(prt_init_normal_2d(sub, R, C, 0, R + 1, 0, C, 7, 3, 0.02f), PRT_ERR_ARG);
    /* a different parameter id or seed gives different values */
    prt_init_normal(part, R * C, 7, 4, 0, 0.02f);
    assert_memory_not_equal(full, part, R * C * sizeof *full);
    prt_init_normal(part, R * C, 8, 3, 0, 0.02f);
    assert_memory_not_equal(full, part, R * C * sizeof *full);
    free(full); free(part); free(sub);
}

static void test_init_statistics(void **state)
{
    (void)state;
    size_t n = 200000;
    float *x = zeros(n);
    prt_init_normal(x, n, 1, 0, 0, 2.0f);
    double m = 0, v = 0;
    for (size_t i = 0; i < n; i++)
        m += x[i];
    m /= n;
    for (size_t i = 0; i < n; i++)
        v += (x[i] - m) * (x[i] - m);
    v /= n;
    assert_true(fabs(m) < 0.02);            /* 4.5 sigma of the mean's error */
    assert_true(fabs(sqrt(v) - 2.0) < 0.02);
    assert_float_equal(prt_gpt2_std(false, 12), 0.02f, 0);
    assert_float_equal(prt_gpt2_std(true, 12), 0.02f / sqrtf(24.0f), 1e-9);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cp_positions),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_geglu),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_affine),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rope_inv_freq),
        cmocka_unit_test(test_rope_yarn_mscale),
        cmocka_unit_test(test_rope_scaled),
        cmocka_unit_test(test_qk_norm),
        cmocka_unit_test(test_qk_proj_norm),
        cmocka_unit_test(test_qk_proj_norm_tp2),
        cmocka_unit_test(test_attention_mha),
        cmocka_unit_test(test_attention_gqa),
        cmocka_unit_test(test_attention_mqa_recompute),
        cmocka_unit_test(test_attention_window),
        cmocka_unit_test(test_attention_softcap),
        cmocka_unit_test(test_mla),
        cmocka_unit_test(test_mla_tp),
        cmocka_unit_test(test_xent),
        cmocka_unit_test(test_xent_padded),
        cmocka_unit_test(test_xent_softcap),
        cmocka_unit_test(test_tp_attention_mlp),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_init_shards),
        cmocka_unit_test(test_init_statistics),
    };
    return cmocka_run_group_tests_name("ops", tests, NULL, NULL);
}
