/*
 * calib.c: planrt-calib, the measuring half of `planc calibrate`.
 *
 *   mpirun -np N build/bin/planrt-calib OUT [--quick]
 *
 * Every rank runs the same measurement at the same time (a barrier before
 * each), so each figure is what one rank gets while N share the machine,
 * as the ranks of a training run do. It times planrt's own kernels and
 * collectives, the ones a generated program calls:
 *  - GEMMs: prt_linear_fwd, prt_linear_bwd_input and prt_linear_bwd_weight
 *    over a grid of forward shapes (m x k)(k x n);
 *  - elementwise kernels (GeLU, residual add, LayerNorm, AdamW) over
 *    sizes, fitted to t = launch + bytes / stream: stream from the largest
 *    size, launch from the smallest (a least-squares intercept is at the
 *    mercy of the noise of the large sizes);
 *  - the kernels that compute more than they move: GeLU forward and
 *    backward per element, and the attention's softmax per score element
 *    (prt_attention_fwd/bwd less their GEMMs, timed alone), each beyond
 *    what its bytes take at the stream rate;
 *  - collectives on all N ranks (all-reduce, all-gather, reduce-scatter,
 *    broadcast) and a p2p send/recv pair over message sizes, each fitted
 *    to t = latency + busfactor * M / busbw (nccl-tests' factors), the
 *    same way;
 *  - overlap: a GEMM loop alone, a run of all-reduces alone, then both at
 *    once (the all-reduces issued asynchronously, tested between GEMMs),
 *    giving the slowdown of each beside the other;
 *  - overhead: a barrier over all ranks, the fixed synchronisation of a
 *    step.
 * Each timing is the median of its repetitions, the maximum over ranks.
 * Rank 0 writes OUT as `key value...` lines in SI units (seconds, bytes/s)
 * and prints one progress line per phase on stdout; planc calibrate turns
 * the file into a cluster block. This program knows nothing of the .plan
 * language (runtime/ is standalone).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

#include "planrt.h"

static int me, P;
static double stream_s_per_byte;   /* the fitted stream rate's inverse (bench_stream) */
static prt_comm *world;

static double now(void) { return MPI_Wtime(); }

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median over reps of fn(arg), the maximum over ranks; each rep starts
 * after a barrier so all ranks run it together. */
typedef void (*bench_fn)(void *arg);
static double timed(bench_fn fn, void *arg, int reps)
{
    double t[32];
    if (reps > 32) reps = 32;
    fn(arg);   /* warm-up: caches, pages, BLAS buffers */
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        fn(arg);
        t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    double med = t[reps / 2], mx;
    MPI_Allreduce(&med, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return mx;
}

/* ---- GEMMs ---------------------------------------------------------- */

typedef struct { int pass; size_t m, n, k; float *a, *b, *c; } Gemm;

static void run_gemm(void *arg)
{
    Gemm *g = arg;   /* forward: out (m, n) = x (m, k) W^T, W (n, k) */
    if (g->pass == 0) prt_linear_fwd(g->c, g->a, g->b, NULL, g->m, g->k, g->n);
    else if (g->pass == 1) prt_linear_bwd_input(g->a, g->c, g->b, g->m, g->k, g->n);
    else prt_linear_bwd_weight(g->b, NULL, g->c, g->a, g->m, g->k, g->n);
}

static const char *const PASS[] = { "fwd", "dx", "dw" };

static void bench_gemms(FILE *out, bool quick)
{
    static const size_t full[] = { 32, 128, 512, 2048 }, fast[] = { 64, 512 };
    const size_t *s = quick ? fast : full;
    int ns = quick ? 2 : 4;
    size_t mx = s[ns - 1];
    float *a = calloc(mx * mx, sizeof *a), *b = calloc(mx * mx, sizeof *b), *c = calloc(mx * mx, sizeof *c);
    for (size_t i = 0; i < mx * mx; i++) { a[i] = 0.01f * (float)(i % 13); b[i] = 0.02f * (float)(i % 7); }
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++)
            for (int l = 0; l < ns; l++)
                for (int pass = 0; pass < 3; pass++) {
                    Gemm g = { pass, s[i], s[j], s[l], a, b, c };
                    double fl = 2.0 * (double)(s[i] * s[j] * s[l]);
                    int reps = fl > 4e9 ? 5 : fl > 1e8 ? 9 : 15;
                    double t = timed(run_gemm, &g, reps);
                    if (me == 0) fprintf(out, "gemm %s %zu %zu %zu %.6e\n", PASS[pass], s[i], s[j], s[l], t);
                }
    free(a); free(b); free(c);
}

/* ---- elementwise ---------------------------------------------------- */

typedef struct { int kind; size_t n; float *x, *y, *z, *w; } Stream;
static const double STREAM_BYTES[] = { 8, 12, 8, 28 };   /* per element: gelu, add, layernorm, adamw */

static void run_stream(void *arg)
{
    Stream *s = arg;
    static prt_adamw_cfg cfg = { 0 };
    cfg.beta1 = 0.9f; cfg.beta2 = 0.95f; cfg.eps = 1e-8f;
    switch (s->kind) {
    case 0: prt_gelu_fwd(s->y, s->x, s->n); break;
    case 1: prt_residual_add(s->z, s->x, s->y, s->n); break;
    case 2: prt_layernorm_fwd(s->y, s->z, s->z + s->n / 256, s->x, s->w, s->w, s->n / 256, 256, 1e-5f); break;
    default: prt_adamw_step(s->x, s->y, s->z, s->w, s->n, &cfg, 1, 1e-4f, 0.0f, 1.0f); break;
    }
}

/* The line t = a + b x through n points of `groups` series, each of
 * sizes ascending: b (s per byte) from the largest point of every series
 * (total time over total bytes), a (s) the median over series of the
 * smallest point's time beyond its bytes, at least 0. */
static void fit(const double *x, const double *t, int n, int groups, double *a, double *b)
{
    int per = n / groups;
    double X = 0, T = 0, rest[16];
    for (int g = 0; g < groups; g++) { X += x[g * per + per - 1]; T += t[g * per + per - 1]; }
    *b = X > 0 ? T / X : 0;
    for (int g = 0; g < groups; g++) rest[g] = fmax(0, t[g * per] - *b * x[g * per]);
    qsort(rest, (size_t)groups, sizeof *rest, cmp_d);
    *a = rest[groups / 2];
}

static void bench_stream(FILE *out, bool quick)
{
    static const size_t sizes[] = { 1 << 12, 1 << 16, 1 << 20, 1 << 22 };
    int nsz = quick ? 2 : 4;
    size_t mx = sizes[nsz - 1];
    float *x = calloc(mx, 4), *y = calloc(mx, 4), *z = calloc(mx, 4), *w = calloc(mx, 4);
    for (size_t i = 0; i < mx; i++) { x[i] = 0.001f * (float)(i % 100); w[i] = 1; }
    double bx[16], bt[16];
    int np = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < nsz; i++) {
            Stream s = { k, sizes[i], x, y, z, w };
            bx[np] = STREAM_BYTES[k] * (double)sizes[i];
            bt[np] = timed(run_stream, &s, 15);
            np++;
        }
    double a, b;
    fit(bx, bt, np, 4, &a, &b);
    if (me == 0) {
        for (int i = 0; i < np; i++) fprintf(out, "# stream %.0f B %.6e s\n", bx[i], bt[i]);
        fprintf(out, "stream %.6e\nlaunch %.6e\n", b > 0 ? 1.0 / b : 1e12, a > 1e-8 ? a : 1e-8);
    }
    free(x); free(y); free(z); free(w);
    stream_s_per_byte = b;
}

/* ---- compute-bound elementwise: activation, softmax ------------------ */

typedef struct { int kind; size_t B, T, H, D; float *x, *y, *z, *att, *datt; } Act;

static void run_act(void *arg)
{
    Act *a = arg;
    size_t n = a->B * a->T * a->H * a->D;   /* the GeLU's elements */
    switch (a->kind) {
    case 0: prt_gelu_fwd(a->y, a->x, n); break;
    case 1: prt_gelu_bwd(a->z, a->x, a->y, n); break;
    case 2: prt_attention_fwd(a->y, a->att, a->x, a->B, a->T, a->H, a->H, a->D, 0); break;
    case 3: prt_attention_bwd(a->z, a->datt, a->y, a->x, a->att, false, a->B, a->T, a->H, a->H, a->D, 0); break;
    case 4:   /* the attention's two forward GEMMs of one (sequence, head): S = Q K^T, O = P V */
        prt_linear_fwd(a->att, a->x, a->y, NULL, a->T, a->D, a->T);
        prt_linear_fwd(a->z, a->att, a->y, NULL, a->T, a->T, a->D);
        break;
    }
}

/* Seconds per element beyond the element's bytes at the stream rate
 * (4-byte elements: forward reads one and writes one, backward reads two
 * and writes one, as planner/model.c counts them). */
static void bench_act(FILE *out, bool quick)
{
    size_t B = 2, T = quick ? 64 : 128, H = 4, D = 64, n = B * T * 3 * H * D;
    size_t na = B * H * T * T;
    Act a = { 0, B, T, H, D, calloc(n, 4), calloc(n, 4), calloc(n, 4), calloc(na, 4), calloc(na, 4) };
    for (size_t i = 0; i < n; i++) a.x[i] = 0.001f * (float)(i % 97);
    double t[5];
    for (int k = 0; k < 5; k++) { a.kind = k; t[k] = timed(run_act, &a, 9); }
    double ne = (double)(B * T * H * D), ns = (double)na, s = stream_s_per_byte;
    double af = fmax(0, t[0] / ne - 8 * s), ab = fmax(0, t[1] / ne - 12 * s);
    double gem = (double)(B * H) * t[4];   /* forward GEMMs; the backward has twice as many */
    double sf = fmax(0, (t[2] - gem) / ns - 8 * s), sb = fmax(0, (t[3] - 2 * gem) / ns - 12 * s);
    if (me == 0)
        fprintf(out, "# gelu %.0f elements %.6e / %.6e s; attention %.0f scores %.6e / %.6e s, GEMMs %.6e s\n"
                     "activation %.6e %.6e\nsoftmax %.6e %.6e\n", ne, t[0], t[1], ns, t[2], t[3], gem,
                af, ab, sf, sb);
    free(a.x); free(a.y); free(a.z); free(a.att); free(a.datt);
}

/* ---- collectives ---------------------------------------------------- */

typedef struct { int coll; size_t n; float *s, *r; } Coll;
/* ORDER PlanCollective (planner/comm.h) for the names planc reads */
static const char *const COLL[] = { "all-reduce", "all-gather", "reduce-scatter", "broadcast", "p2p" };

static double coll_factor(int c)
{
    if (c == 0) return 2.0 * (P - 1) / P;
    if (c == 1 || c == 2) return (double)(P - 1) / P;
    return 1.0;
}

static void run_coll(void *arg)
{
    Coll *c = arg;
    size_t per = c->n / (size_t)P;
    switch (c->coll) {
    case 0: prt_all_reduce(world, c->s, c->r, c->n, PRT_FP32, PRT_SUM); break;
    case 1: prt_all_gather(world, c->s, c->r, per, PRT_FP32); break;
    case 2: prt_reduce_scatter(world, c->s, c->r, per, PRT_FP32, PRT_SUM); break;
    case 3: prt_broadcast(world, c->s, c->n, PRT_FP32, 0); break;
    default:   /* one message 0 -> 1 and back: half the round trip */
        if (me == 0) { prt_send(world, c->s, c->n, PRT_FP32, 1, 7); prt_recv(world, c->r, c->n, PRT_FP32, 1, 8); }
        else if (me == 1) { prt_recv(world, c->r, c->n, PRT_FP32, 0, 7); prt_send(world, c->s, c->n, PRT_FP32, 0, 8); }
        break;
    }
}

static void bench_colls(FILE *out, bool quick)
{
    int nsz = quick ? 3 : 7;
    size_t mx = (size_t)1 << (10 + 2 * (nsz - 1));   /* floats: 4 KiB .. 16 MiB (quick: 64 KiB) */
    float *s = prt_comm_alloc(mx * 4), *r = prt_comm_alloc(mx * 4);
    memset(s, 0, mx * 4);
    for (int c = 0; c < 5; c++) {
        double bx[8], bt[8];
        for (int i = 0; i < nsz; i++) {
            Coll k = { c, (size_t)1 << (10 + 2 * i), s, r };
            k.n = (k.n / (size_t)P) * (size_t)P;
            bt[i] = timed(run_coll, &k, 15);
            if (c == 4) bt[i] /= 2;
            bx[i] = coll_factor(c) * 4.0 * (double)k.n;
        }
        double lat, b;
        fit(bx, bt, nsz, 1, &lat, &b);
        double bw = b > 0 ? 1.0 / b : 1e12;
        if (me == 0) {
            for (int i = 0; i < nsz; i++) fprintf(out, "# %s busbytes %.0f %.6e s\n", COLL[c], bx[i], bt[i]);
            fprintf(out, "coll %s %.6e %.6e\n", COLL[c], lat > 0 ? lat : 0, bw);
        }
    }
    prt_comm_free(s); prt_comm_free(r);
}

/* ---- overlap -------------------------------------------------------- */

#define OV_GEMM 384   /* a GEMM of 384^3: ~0.1 GFLOP, a layer-sized piece */
#define OV_BYTES (1u << 22)

typedef struct { float *a, *b, *c; int gemms; float *s, *r; int colls; bool both; double tc, tm; } Ov;

static void run_compute(Ov *o, prt_request **req, int *issued)
{
    for (int i = 0; i < o->gemms; i++) {
        prt_linear_fwd(o->c, o->a, o->b, NULL, OV_GEMM, OV_GEMM, OV_GEMM);
        if (req && *req) {   /* progress the collective between GEMMs, as a program does */
            bool done = false;
            prt_test(*req, &done);
            if (done && *issued < o->colls) {
                (*issued)++;
                *req = NULL;
                if (*issued < o->colls)
                    prt_all_reduce_async(world, o->s, o->r, OV_BYTES / 4, PRT_FP32, PRT_SUM, req);
            }
        }
    }
}

static void run_overlap(void *arg)
{
    Ov *o = arg;
    double t0 = now();
    if (!o->both) {
        if (o->gemms) run_compute(o, NULL, NULL);
        o->tc = now() - t0;
        for (int i = 0; i < o->colls; i++) prt_all_reduce(world, o->s, o->r, OV_BYTES / 4, PRT_FP32, PRT_SUM);
        o->tm = now() - t0 - o->tc;
        return;
    }
    prt_request *req = NULL;
    int issued = 0;
    prt_all_reduce_async(world, o->s, o->r, OV_BYTES / 4, PRT_FP32, PRT_SUM, &req);
    run_compute(o, &req, &issued);
    o->tc = now() - t0;
    while (issued < o->colls) {
        if (req) prt_wait(req);
        req = NULL;
        if (++issued < o->colls) prt_all_reduce_async(world, o->s, o->r, OV_BYTES / 4, PRT_FP32, PRT_SUM, &req);
    }
    o->tm = now() - t0;
}

static void bench_overlap(FILE *out)
{
    size_t n = (size_t)OV_GEMM * OV_GEMM;
    Ov o = { calloc(n, 4), calloc(n, 4), calloc(n, 4), 0, prt_comm_alloc(OV_BYTES), prt_comm_alloc(OV_BYTES),
             0, false, 0, 0 };
    memset(o.s, 0, OV_BYTES);
    /* compute alone and collectives alone, sized to take about as long */
    o.gemms = 20; o.colls = 0;
    double tc = timed(run_overlap, &o, 5);
    o.gemms = 0; o.colls = 4;
    double tm = timed(run_overlap, &o, 5);
    o.colls = (int)fmax(1, fmin(64, round(4 * tc / (tm > 0 ? tm : tc))));
    tm = timed(run_overlap, &o, 5);
    o.gemms = 20; o.both = true;
    double reps_c[5], reps_m[5];
    for (int r = 0; r < 5; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        run_overlap(&o);
        reps_c[r] = o.tc; reps_m[r] = o.tm;
    }
    qsort(reps_c, 5, sizeof(double), cmp_d);
    qsort(reps_m, 5, sizeof(double), cmp_d);
    double c2 = reps_c[2], m2 = reps_m[2], v[2] = { c2 / tc, m2 / tm }, mx[2];
    MPI_Allreduce(v, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (me == 0)
        fprintf(out, "# overlap compute alone %.6e s, collectives alone %.6e s, together %.6e / %.6e s\n"
                     "overlap_compute %.4f\noverlap_comm %.4f\n", tc, tm, c2, m2,
                fmax(1, mx[0]), fmax(1, mx[1]));
    free(o.a); free(o.b); free(o.c); prt_comm_free(o.s); prt_comm_free(o.r);
}

static void run_barrier(void *arg) { (void)arg; prt_barrier(world); }

static void progress(const char *what, double t0)
{
    if (me == 0) { printf("planc calibrate: %-24s %6.1f s\n", what, now() - t0); fflush(stdout); }
}

int main(int argc, char **argv)
{
    prt_ctx *ctx = NULL;
    if (argc < 2) { fprintf(stderr, "usage: planrt-calib OUT [--quick]\n"); return 2; }
    const char *path = argv[1];
    bool quick = argc > 2 && strcmp(argv[2], "--quick") == 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (prt_init(&argc, &argv, P, 1, 1, &ctx) != PRT_OK || prt_ops_init(-1) != PRT_OK) {
        fprintf(stderr, "planrt-calib: planrt failed to start: %s\n", prt_comm_last_error());
        prt_finalize(ctx);
        MPI_Finalize();
        return 1;
    }
    me = ctx->rank;
    world = ctx->world;
    FILE *out = me == 0 ? fopen(path, "w") : NULL;
    int ok = me != 0 || out != NULL, all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (me == 0) fprintf(stderr, "planrt-calib: cannot write %s\n", path);
        prt_finalize(ctx);
        MPI_Finalize();
        return 1;
    }
    double t0 = now();
    if (me == 0) fprintf(out, "ranks %d\nbackend %s\n", P, prt_comm_backend());
    bench_gemms(out, quick);
    progress("GEMMs", t0);
    bench_stream(out, quick);
    progress("elementwise kernels", t0);
    bench_act(out, quick);
    progress("activation, softmax", t0);
    if (P > 1) { bench_colls(out, quick); progress("collectives", t0); }
    if (P > 1) { bench_overlap(out); progress("overlap", t0); }
    double ov = timed(run_barrier, NULL, 15);
    if (me == 0) fprintf(out, "overhead %.6e\n", ov);
    progress("step overhead", t0);
    if (me == 0 && fclose(out) != 0) { fprintf(stderr, "planrt-calib: write error on %s\n", path); ok = 0; }
    prt_ops_finalize();
    prt_finalize(ctx);   /* MPI was initialised here, so it is finalised here */
    MPI_Finalize();
    return ok ? 0 : 1;
}
