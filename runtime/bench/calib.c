/*
 * calib.c: planrt-calib, the measuring half of `planc calibrate`.
 *
 *   mpirun -np N build/bin/planrt-calib OUT [--quick]        (CPU: OpenBLAS + Open MPI)
 *   mpirun -np N build/bin/planrt-calib-cuda OUT [--quick]   (CUDA: cuBLAS bf16 + NCCL)
 *   build/bin/planrt-calib-cuda --probe                      (is a CUDA device usable?)
 *
 * One source, the two builds of planrt (prt_ops.h: "two builds, one
 * API"): compiled against libplanrt.a it times the CPU kernels in fp32,
 * against libplanrt_cuda.a (-DPRT_CUDA) the CUDA kernels in bf16 on one
 * GPU per rank, with a device synchronisation closing each timed run.
 * Every rank runs the same measurement at the same time (a barrier before
 * each), so each figure is what one rank gets while N share the machine,
 * as the ranks of a training run do. It times planrt's own kernels and
 * collectives, the ones a generated program calls:
 *  - GEMMs: prt_linear_fwd, prt_linear_bwd_input and prt_linear_bwd_weight
 *    over a grid of forward shapes (m x k)(k x n), in the build's compute
 *    dtype (`dtype`: fp32 or bf16); CUDA: also one fp32 cuBLAS GEMM of the
 *    largest shape (`flops_fp32`), and the device's memory
 *    (cudaMemGetInfo) and SM count;
 *  - elementwise kernels (GeLU, residual add, LayerNorm, AdamW) over
 *    sizes, fitted to t = launch + bytes / stream: stream from the largest
 *    size, launch from the smallest (a least-squares intercept is at the
 *    mercy of the noise of the large sizes); on a GPU a run is several
 *    launches back to back, so `launch` is the gap a kernel costs in a
 *    stream, not a synchronisation;
 *  - the kernels that compute more than they move: GeLU forward and
 *    backward per element, and the attention's softmax per score element
 *    (prt_attention_fwd/bwd less their GEMMs, timed alone), each beyond
 *    what its bytes take at the stream rate;
 *  - collectives (all-reduce, all-gather, reduce-scatter, broadcast) on
 *    groups of every size g >= 2 that divides N (the group sizes a layout
 *    on N ranks forms), all N/g groups of consecutive ranks at once, and a
 *    p2p send/recv pair over message sizes, each fitted to t = latency +
 *    busfactor * M / busbw (nccl-tests' factors), the same way;
 *  - overlap: a GEMM loop alone, a run of all-reduces alone, then both at
 *    once (CPU: the all-reduces issued asynchronously and tested between
 *    GEMMs, as the program's MPI progress; GPU: NCCL on planrt's
 *    communication stream beside the GEMMs on the compute stream), giving
 *    the slowdown of each beside the other;
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

#ifdef PRT_CUDA
#include <cuda_runtime.h>
#include <cublas_v2.h>
#define GPU 1
#else
#define GPU 0
#endif

static int me, P;
static double stream_s_per_byte;   /* the fitted stream rate's inverse (bench_stream) */
static prt_comm *world;
static const double ACT = sizeof(prt_act);   /* bytes of an activation element: 4 (fp32) or 2 (bf16) */

static double now(void) { return MPI_Wtime(); }

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- buffers of either build: host memory (CPU), device memory (CUDA) -- */

/* A pattern of small values, so no kernel meets denormals or overflow. */
static float *host_pattern(size_t n, float scale, int period)
{
    float *h = malloc(n * sizeof *h);
    if (h) for (size_t i = 0; i < n; i++) h[i] = scale * (float)(i % (size_t)period);
    return h;
}

/* n fp32 elements holding scale * (i % period); NULL when out of memory. */
static float *f32_new(size_t n, float scale, int period)
{
    float *h = host_pattern(n, scale, period);
    if (!h) return NULL;
    if (!GPU) return h;
    float *d = prt_alloc(n * sizeof *d);
    if (d && prt_copy_to_device(d, h, n * sizeof *d) != PRT_OK) { prt_free(d); d = NULL; }
    free(h);
    return d;
}

/* n activation elements (the build's compute dtype) of the same pattern. */
static prt_act *act_new(size_t n, float scale, int period)
{
#ifdef PRT_CUDA
    float *f = f32_new(n, scale, period);
    prt_act *a = f ? prt_alloc(n * sizeof *a) : NULL;
    if (a) prt_to_act(a, f, n);
    prt_free(f);
    return a;
#else
    return f32_new(n, scale, period);
#endif
}

static void buf_free(void *p)
{
    if (GPU) prt_free(p);
    else free(p);
}

/* Stop every rank: what failed, and the CUDA ops' first error if any. */
static void die(const char *what)
{
    const char *why = GPU ? prt_ops_last_error() : "";
    fprintf(stderr, "planrt-calib: rank %d: %s%s%s\n", me, what, why[0] ? ": " : "", why);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Median over reps of fn(arg), the maximum over ranks; each rep starts
 * after a barrier so all ranks run it together and ends when the device
 * has finished (prt_ops_sync; nothing to wait for on a CPU). On a GPU a
 * rep is `inner` calls back to back (kernels queue behind each other, as
 * in a program), and the time is per call. */
typedef void (*bench_fn)(void *arg);
static double timed(bench_fn fn, void *arg, int reps)
{
    const int inner = GPU ? 4 : 1;
    double t[32];
    if (reps > 32) reps = 32;
    fn(arg);   /* warm-up: caches, pages, BLAS buffers, cuBLAS heuristics */
    if (prt_ops_sync() != PRT_OK) die("a kernel failed");
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        for (int i = 0; i < inner; i++) fn(arg);
        prt_ops_sync();
        t[r] = (now() - t0) / inner;
    }
    if (prt_ops_sync() != PRT_OK) die("a kernel failed");
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    double med = t[reps / 2], mx;
    MPI_Allreduce(&med, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return mx;
}

/* ---- GEMMs ---------------------------------------------------------- */

typedef struct { int pass; size_t m, n, k; prt_act *a, *b, *c; float *dw; } Gemm;

static void run_gemm(void *arg)
{
    Gemm *g = arg;   /* forward: out (m, n) = x (m, k) W^T, W (n, k) */
    if (g->pass == 0) prt_linear_fwd(g->c, g->a, g->b, NULL, g->m, g->k, g->n);
    else if (g->pass == 1) prt_linear_bwd_input(g->a, g->c, g->b, g->m, g->k, g->n);
    else prt_linear_bwd_weight(g->dw, NULL, g->c, g->a, g->m, g->k, g->n);
}

static const char *const PASS[] = { "fwd", "dx", "dw" };

#ifdef PRT_CUDA
/* The fp32 rate of the device (FLOP/s): cuBLAS's SGEMM (no TF32: the
 * default math mode) of n^3, the median of 5 runs. */
static double sgemm_rate(size_t n)
{
    float *a = f32_new(n * n, 0.01f, 13), *b = f32_new(n * n, 0.02f, 7), *c = f32_new(n * n, 0, 1);
    cublasHandle_t h;
    if (!a || !b || !c || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) die("cannot set up the fp32 GEMM (memory, cuBLAS)");
    const float one = 1, zero = 0;
    double t[5];
    for (int r = -1; r < 5; r++) {
        cudaDeviceSynchronize();
        double t0 = now();
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &one, a, (int)n, b, (int)n, &zero, c, (int)n);
        cudaDeviceSynchronize();
        if (r >= 0) t[r] = now() - t0;
    }
    cublasDestroy(h);
    buf_free(a); buf_free(b); buf_free(c);
    qsort(t, 5, sizeof *t, cmp_d);
    double rate = 2.0 * (double)n * (double)n * (double)n / t[2], mn;
    MPI_Allreduce(&rate, &mn, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    return mn;
}

/* What a GPU profile needs beside the kernels: the device's memory, its
 * SMs and name (rank 0's device; the ranks of one machine have the same). */
static void bench_device(FILE *out, size_t big)
{
    size_t free_b = 0, total = 0;
    struct cudaDeviceProp prop;
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        die("cudaMemGetInfo / cudaGetDeviceProperties");
    double f32 = sgemm_rate(big);
    if (me == 0) {
        for (char *q = prop.name; *q; q++) if (*q == '\n' || *q == '#') *q = ' ';
        fprintf(out, "gpu %s\nmemory %zu\nsms %d\nflops_fp32 %.6e\n", prop.name, total, prop.multiProcessorCount, f32);
    }
}
#endif

static void bench_gemms(FILE *out, bool quick)
{
    /* the sizes the layers use: a CPU rank's from 32 to 2048, a GPU's
     * from 128 to 8192 (below, a GPU GEMM is launch-bound) */
    static const size_t cpu[] = { 32, 128, 512, 2048 }, cpu_q[] = { 64, 512 };
    static const size_t gpu[] = { 128, 512, 2048, 8192 }, gpu_q[] = { 256, 2048 };
    const size_t *s = GPU ? (quick ? gpu_q : gpu) : (quick ? cpu_q : cpu);
    int ns = quick ? 2 : 4;
    size_t mx = s[ns - 1];
    prt_act *a = act_new(mx * mx, 0.01f, 13), *b = act_new(mx * mx, 0.02f, 7), *c = act_new(mx * mx, 0.01f, 5);
    float *dw = f32_new(mx * mx, 0, 1);
    if (!a || !b || !c || !dw) die("cannot allocate the GEMM buffers");
    if (me == 0) fprintf(out, "dtype %s\n", GPU ? "bf16" : "fp32");
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++)
            for (int l = 0; l < ns; l++)
                for (int pass = 0; pass < 3; pass++) {
                    Gemm g = { pass, s[i], s[j], s[l], a, b, c, dw };
                    double fl = 2.0 * (double)(s[i] * s[j] * s[l]);
                    int reps = GPU ? (fl > 1e11 ? 5 : 9) : fl > 4e9 ? 5 : fl > 1e8 ? 9 : 15;
                    double t = timed(run_gemm, &g, reps);
                    if (me == 0) fprintf(out, "gemm %s %zu %zu %zu %.6e\n", PASS[pass], s[i], s[j], s[l], t);
                }
    buf_free(a); buf_free(b); buf_free(c); buf_free(dw);
#ifdef PRT_CUDA
    bench_device(out, mx);
#endif
}

/* ---- elementwise ---------------------------------------------------- */

typedef struct { int kind; size_t n; prt_act *x, *y, *z; float *p, *g, *m, *v, *stats; } Stream;

/* Bytes per element each kernel moves: gelu reads x and writes y, add
 * reads two and writes one, layernorm reads and writes a row element (its
 * statistics are per row), AdamW reads p, g, m, v and writes p, m, v in
 * fp32. */
static double stream_bytes(int kind)
{
    static const double act_elems[] = { 2, 3, 2 };
    return kind < 3 ? act_elems[kind] * ACT : 28;
}

static void run_stream(void *arg)
{
    Stream *s = arg;
    static prt_adamw_cfg cfg = { 0 };
    cfg.beta1 = 0.9f; cfg.beta2 = 0.95f; cfg.eps = 1e-8f;
    size_t rows = s->n / 256;
    switch (s->kind) {
    case 0: prt_gelu_fwd(s->y, s->x, s->n); break;
    case 1: prt_residual_add(s->z, s->x, s->y, s->n); break;
    case 2: prt_layernorm_fwd(s->y, s->stats, s->stats + rows, s->x, s->z, s->z, rows, 256, 1e-5f); break;
    default: prt_adamw_step(s->p, s->g, s->m, s->v, s->n, &cfg, 1, 1e-4f, 0.0f, 1.0f); break;
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
    /* a GPU's largest sizes lie well beyond its L2 cache (50 MiB on H100) */
    static const size_t cpu[] = { 1 << 12, 1 << 16, 1 << 20, 1 << 22 }, gpu[] = { 1 << 12, 1 << 18, 1 << 22, 1 << 25 };
    static const size_t gpu_q[] = { 1 << 12, 1 << 25 };
    const size_t *sizes = GPU ? (quick ? gpu_q : gpu) : cpu;
    int nsz = quick ? 2 : 4;
    size_t mx = sizes[nsz - 1];
    Stream s = { 0, 0, act_new(mx, 0.001f, 100), act_new(mx, 0.002f, 50), act_new(mx, 1, 1),
                 f32_new(mx, 0.001f, 100), f32_new(mx, 0.0001f, 10), f32_new(mx, 0, 1), f32_new(mx, 0, 1),
                 f32_new(2 * (mx / 256), 1, 1) };
    if (!s.x || !s.y || !s.z || !s.p || !s.g || !s.m || !s.v || !s.stats) die("cannot allocate the elementwise buffers");
    double bx[16], bt[16];
    int np = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < nsz; i++) {
            s.kind = k;
            s.n = sizes[i];
            bx[np] = stream_bytes(k) * (double)sizes[i];
            bt[np] = timed(run_stream, &s, 15);
            np++;
        }
    double a, b;
    fit(bx, bt, np, 4, &a, &b);
    if (me == 0) {
        for (int i = 0; i < np; i++) fprintf(out, "# stream %.0f B %.6e s\n", bx[i], bt[i]);
        fprintf(out, "stream %.6e\nlaunch %.6e\n", b > 0 ? 1.0 / b : 1e12, a > 1e-8 ? a : 1e-8);
    }
    buf_free(s.x); buf_free(s.y); buf_free(s.z); buf_free(s.p); buf_free(s.g); buf_free(s.m); buf_free(s.v);
    buf_free(s.stats);
    stream_s_per_byte = b;
}

/* ---- compute-bound elementwise: activation, softmax ------------------ */

typedef struct { int kind; size_t B, T, H, D; prt_act *x, *y, *z, *att, *datt; } Act;

static void run_act(void *arg)
{
    Act *a = arg;
    size_t n = a->B * a->T * a->H * a->D;   /* the GeLU's elements */
    switch (a->kind) {
    case 0: prt_gelu_fwd(a->y, a->x, n); break;
    case 1: prt_gelu_bwd(a->z, a->x, a->y, n); break;
    case 2: prt_attention_fwd(a->y, a->att, a->x, a->B, a->T, a->H, a->H, a->D, 0); break;
    case 3: prt_attention_bwd(a->z, a->datt, a->y, a->x, a->att, false, a->B, a->T, a->H, a->H, a->D, 0); break;
    case 4:   /* the attention's two forward GEMMs of one head: S = Q K^T, O = P V, of one
               * sequence on a CPU (a loop over them), of the B sequences on a GPU (one
               * batched GEMM per head: the same FLOPs as one of B*T rows) */
    {
        size_t rows = GPU ? a->B * a->T : a->T;
        prt_linear_fwd(a->att, a->x, a->y, NULL, rows, a->D, a->T);
        prt_linear_fwd(a->z, a->att, a->y, NULL, rows, a->T, a->D);
        break;
    }
    }
}

/* Seconds per element beyond the element's bytes at the stream rate
 * (forward reads one element and writes one, backward reads two and
 * writes one, as planner/model.c counts them). */
static void bench_act(FILE *out, bool quick)
{
    size_t B = 2, T = quick ? 64 : 128, H = 4, D = 64, n = B * T * 3 * H * D;
    size_t na = B * H * T * T;
    Act a = { 0, B, T, H, D, act_new(n, 0.001f, 97), act_new(n, 0.001f, 89), act_new(n, 0, 1), act_new(na, 0, 1),
              act_new(na, 0, 1) };
    if (!a.x || !a.y || !a.z || !a.att || !a.datt) die("cannot allocate the attention buffers");
    double t[5];
    for (int k = 0; k < 5; k++) { a.kind = k; t[k] = timed(run_act, &a, 9); }
    double ne = (double)(B * T * H * D), ns = (double)na, s = stream_s_per_byte;
    double af = fmax(0, t[0] / ne - 2 * ACT * s), ab = fmax(0, t[1] / ne - 3 * ACT * s);
    double gem = (double)(GPU ? H : B * H) * t[4];   /* forward GEMMs; the backward has twice as many */
    double sf = fmax(0, (t[2] - gem) / ns - 2 * ACT * s), sb = fmax(0, (t[3] - 2 * gem) / ns - 3 * ACT * s);
    if (me == 0)
        fprintf(out, "# gelu %.0f elements %.6e / %.6e s; attention %.0f scores %.6e / %.6e s, GEMMs %.6e s\n"
                     "activation %.6e %.6e\nsoftmax %.6e %.6e\n", ne, t[0], t[1], ns, t[2], t[3], gem,
                af, ab, sf, sb);
    buf_free(a.x); buf_free(a.y); buf_free(a.z); buf_free(a.att); buf_free(a.datt);
}

/* ---- collectives ---------------------------------------------------- */

typedef struct { int coll; size_t n; float *s, *r; prt_comm *g; int peer; } Coll;
/* ORDER PlanCollective (planner/comm.h) for the names planc reads */
static const char *const COLL[] = { "all-reduce", "all-gather", "reduce-scatter", "broadcast", "p2p" };

/* nccl-tests' bus factor of collective c on g ranks (doc/PERFORMANCE.md) */
static double coll_factor(int c, int g)
{
    if (c == 0) return 2.0 * (g - 1) / g;
    if (c == 1 || c == 2) return (double)(g - 1) / g;
    return 1.0;
}

static void run_coll(void *arg)
{
    Coll *c = arg;
    int g = prt_comm_size(c->g), r = prt_comm_rank(c->g);
    size_t per = c->n / (size_t)g;
    switch (c->coll) {
    case 0: prt_all_reduce(c->g, c->s, c->r, c->n, PRT_FP32, PRT_SUM); break;
    case 1: prt_all_gather(c->g, c->s, c->r, per, PRT_FP32); break;
    case 2: prt_reduce_scatter(c->g, c->s, c->r, per, PRT_FP32, PRT_SUM); break;
    case 3: prt_broadcast(c->g, c->s, c->n, PRT_FP32, 0); break;
    default:   /* one message to the peer and back: half the round trip */
        if (c->peer < 0) break;
        if (r < c->peer) {
            prt_send(c->g, c->s, c->n, PRT_FP32, c->peer, 7);
            prt_recv(c->g, c->r, c->n, PRT_FP32, c->peer, 8);
        } else {
            prt_recv(c->g, c->r, c->n, PRT_FP32, c->peer, 7);
            prt_send(c->g, c->s, c->n, PRT_FP32, c->peer, 8);
        }
        break;
    }
}

/* The collectives of one group size: every rank in a group of g (all the
 * machine's groups of that size at once); c_first..c_last of COLL. */
static void bench_group(FILE *out, prt_comm *grp, int peer, int c_first, int c_last, bool quick, float *s, float *r)
{
    /* floats: 4 KiB .. 16 MiB on a CPU (quick: 64 KiB), x4 apart; to 256
     * MiB on a GPU (NVLink's bus bandwidth is reached past 100 MiB; quick:
     * the same range x16 apart) */
    int nsz = GPU ? (quick ? 5 : 9) : (quick ? 3 : 7), step = GPU && quick ? 4 : 2;
    int g = c_first == 4 ? 2 : prt_comm_size(grp);
    for (int c = c_first; c <= c_last; c++) {
        double bx[16], bt[16];
        for (int i = 0; i < nsz; i++) {
            Coll k = { c, (size_t)1 << (10 + step * i), s, r, grp, peer };
            k.n = (k.n / (size_t)g) * (size_t)g;
            bt[i] = timed(run_coll, &k, GPU && k.n > ((size_t)1 << 22) ? 7 : 15);
            if (c == 4) bt[i] /= 2;
            bx[i] = coll_factor(c, g) * 4.0 * (double)k.n;
        }
        double lat, b;
        fit(bx, bt, nsz, 1, &lat, &b);
        double bw = b > 0 ? 1.0 / b : 1e12;
        if (me == 0) {
            for (int i = 0; i < nsz; i++) fprintf(out, "# %s %d ranks busbytes %.0f %.6e s\n", COLL[c], g, bx[i], bt[i]);
            fprintf(out, "coll %s %d %.6e %.6e\n", COLL[c], g, lat > 0 ? lat : 0, bw);
        }
    }
}

/* Every group size g >= 2 dividing P: the groups of g consecutive ranks
 * (a layout's TP groups; on one machine every group of g ranks is alike),
 * measured on a context of layout (P/g) x g, whose TP groups they are;
 * g = P is the world. p2p between the ranks of pairs (all pairs at once)
 * when P is even, else between ranks 0 and 1 alone. */
static void bench_colls(FILE *out, bool quick, int *argc, char ***argv)
{
    size_t mx = (size_t)1 << (GPU ? 26 : 22);
    float *s = prt_comm_alloc(mx * 4), *r = prt_comm_alloc(mx * 4);
    if (!s || !r || prt_zero(s, mx * 4) != PRT_OK || prt_zero(r, mx * 4) != PRT_OK)
        die("cannot allocate the collective buffers");
    for (int g = 2; g <= P; g++) {
        if (P % g) continue;
        prt_ctx *cg = NULL;
        if (g < P && prt_init(argc, argv, P / g, g, 1, &cg) != PRT_OK) {
            fprintf(stderr, "planrt-calib: rank %d: groups of %d: %s\n", me, g, prt_comm_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        prt_comm *grp = g < P ? cg->tp : world;
        bench_group(out, grp, -1, 0, 3, quick, s, r);
        if (g == 2) bench_group(out, grp, prt_comm_rank(grp) ^ 1, 4, 4, quick, s, r);
        if (cg) prt_finalize(cg);
    }
    if (P % 2) bench_group(out, world, me < 2 ? me ^ 1 : -1, 4, 4, quick, s, r);
    prt_comm_free(s); prt_comm_free(r);
}

/* ---- overlap -------------------------------------------------------- */

/* a layer-sized GEMM: 384^3 (~0.1 GFLOP) on a CPU, 4096^3 (~0.14 TFLOP)
 * on a GPU; all-reduces of 4 MiB / 64 MiB */
#define OV_GEMM  ((size_t)(GPU ? 4096 : 384))
#define OV_BYTES ((size_t)(GPU ? 64u << 20 : 4u << 20))
#define OV_MAX_COLLS 64

typedef struct { prt_act *a, *b, *c; int gemms; float *s, *r; int colls; bool both; double tc, tm; } Ov;

static void gemm_loop(Ov *o, prt_request **req, int *issued)
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

#ifdef PRT_CUDA
/* GPU: the all-reduces are queued first on planrt's communication stream
 * (each waits only for the compute stream's work before it: none), then
 * the GEMMs on the compute stream; the host polls both and notes when
 * each finishes, so tc and tm are the two streams' spans side by side. */
static void run_overlap(void *arg)
{
    Ov *o = arg;
    prt_request *req[OV_MAX_COLLS];
    int colls = o->colls < OV_MAX_COLLS ? o->colls : OV_MAX_COLLS, done_m = 0;
    double t0 = now();
    if (!o->both) {
        gemm_loop(o, NULL, NULL);
        cudaStreamSynchronize(0);
        o->tc = now() - t0;
        for (int i = 0; i < colls; i++) prt_all_reduce_async(world, o->s, o->r, OV_BYTES / 4, PRT_FP32, PRT_SUM, &req[i]);
        if (prt_wait_all(req, colls) != PRT_OK) die(prt_comm_last_error());
        o->tm = now() - t0 - o->tc;
        return;
    }
    for (int i = 0; i < colls; i++) prt_all_reduce_async(world, o->s, o->r, OV_BYTES / 4, PRT_FP32, PRT_SUM, &req[i]);
    gemm_loop(o, NULL, NULL);
    o->tc = o->tm = 0;
    while (o->tc == 0 || o->tm == 0) {
        if (o->tc == 0 && cudaStreamQuery(0) == cudaSuccess) o->tc = now() - t0;
        while (o->tm == 0 && done_m < colls) {
            bool done = false;
            if (prt_test(req[done_m], &done) != PRT_OK) die(prt_comm_last_error());
            if (!done) break;
            if (++done_m == colls) o->tm = now() - t0;
        }
        if (colls == 0 && o->tm == 0) o->tm = now() - t0;
    }
}
#else
/* CPU: the all-reduces are issued asynchronously and tested between
 * GEMMs (MPI progresses only inside MPI calls, as in a program). */
static void run_overlap(void *arg)
{
    Ov *o = arg;
    double t0 = now();
    if (!o->both) {
        if (o->gemms) gemm_loop(o, NULL, NULL);
        o->tc = now() - t0;
        for (int i = 0; i < o->colls; i++) prt_all_reduce(world, o->s, o->r, OV_BYTES / 4, PRT_FP32, PRT_SUM);
        o->tm = now() - t0 - o->tc;
        return;
    }
    prt_request *req = NULL;
    int issued = 0;
    prt_all_reduce_async(world, o->s, o->r, OV_BYTES / 4, PRT_FP32, PRT_SUM, &req);
    gemm_loop(o, &req, &issued);
    o->tc = now() - t0;
    while (issued < o->colls) {
        if (req) prt_wait(req);
        req = NULL;
        if (++issued < o->colls) prt_all_reduce_async(world, o->s, o->r, OV_BYTES / 4, PRT_FP32, PRT_SUM, &req);
    }
    o->tm = now() - t0;
}
#endif

/* One run of o, timed by run_overlap itself (not by timed()). */
static void overlap_reps(Ov *o, int reps, double *tc, double *tm)
{
    double c[8], m[8];
    for (int r = -1; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        run_overlap(o);
        prt_ops_sync();
        if (r >= 0) { c[r] = o->tc; m[r] = o->tm; }
    }
    qsort(c, (size_t)reps, sizeof(double), cmp_d);
    qsort(m, (size_t)reps, sizeof(double), cmp_d);
    *tc = c[reps / 2];
    *tm = m[reps / 2];
}

static void bench_overlap(FILE *out)
{
    size_t n = OV_GEMM * OV_GEMM;
    Ov o = { act_new(n, 0.01f, 13), act_new(n, 0.02f, 7), act_new(n, 0, 1), 0, prt_comm_alloc(OV_BYTES),
             prt_comm_alloc(OV_BYTES), 0, false, 0, 0 };
    if (!o.a || !o.b || !o.c || !o.s || !o.r || prt_zero(o.s, OV_BYTES) != PRT_OK || prt_zero(o.r, OV_BYTES) != PRT_OK)
        die("cannot allocate the overlap buffers");
    /* compute alone and collectives alone, sized to take about as long */
    double tc, tm, x, c2, m2;
    o.gemms = 20; o.colls = 0;
    overlap_reps(&o, 5, &tc, &x);
    o.gemms = 0; o.colls = 4;
    overlap_reps(&o, 5, &x, &tm);
    /* every rank must issue as many all-reduces: sized on the slowest */
    double alone[2] = { tc, tm }, slow[2];
    MPI_Allreduce(alone, slow, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    o.colls = (int)fmax(1, fmin(OV_MAX_COLLS, round(4 * slow[0] / (slow[1] > 0 ? slow[1] : slow[0]))));
    overlap_reps(&o, 5, &x, &tm);
    o.gemms = 20; o.both = true;
    overlap_reps(&o, 5, &c2, &m2);
    double v[2] = { c2 / tc, m2 / tm }, mx[2], all[2] = { tc, tm }, amx[2];
    MPI_Allreduce(v, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(all, amx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (me == 0)
        fprintf(out, "# overlap compute alone %.6e s, collectives alone %.6e s, together %.6e / %.6e s\n"
                     "overlap_compute %.4f\noverlap_comm %.4f\n", amx[0], amx[1], c2, m2,
                fmax(1, mx[0]), fmax(1, mx[1]));
    buf_free(o.a); buf_free(o.b); buf_free(o.c); prt_comm_free(o.s); prt_comm_free(o.r);
}

static void run_barrier(void *arg) { (void)arg; prt_barrier(world); }

static void progress(const char *what, double t0)
{
    if (me == 0) { printf("planc calibrate: %-24s %6.1f s\n", what, now() - t0); fflush(stdout); }
}

/* --probe: exit 0 and say what it found when this build can measure
 * here, 1 with the reason otherwise; no MPI, nothing else started. A CPU
 * build can always. */
static int probe(void)
{
#ifdef PRT_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("no CUDA device: %s (%s)\n", e != cudaSuccess ? cudaGetErrorName(e) : "0 devices",
               e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
        return 1;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
        printf("no CUDA device: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
        return 1;
    }
    printf("cuda %d %s\n", n, prop.name);
#else
    printf("cpu\n");
#endif
    return 0;
}

int main(int argc, char **argv)
{
    prt_ctx *ctx = NULL;
    if (argc == 2 && strcmp(argv[1], "--probe") == 0) return probe();
    if (argc < 2) { fprintf(stderr, "usage: planrt-calib OUT [--quick] | planrt-calib --probe\n"); return 2; }
    const char *path = argv[1];
    bool quick = argc > 2 && strcmp(argv[2], "--quick") == 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (prt_init(&argc, &argv, P, 1, 1, &ctx) != PRT_OK || prt_ops_init(ctx->device) != PRT_OK) {
        fprintf(stderr, "planrt-calib: planrt failed to start: %s%s\n", prt_comm_last_error(),
                GPU ? prt_ops_last_error() : "");
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
    if (P > 1) { bench_colls(out, quick, &argc, &argv); progress("collectives", t0); }
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
