/*
 * test_cp_cuda.c: context-parallel attention on the CUDA build (issue 26):
 * prt_cp_attention_fwd/bwd of libplanrt_cuda.a in every form against the
 * whole-sequence attention computed here on the CPU in fp32, under real
 * mpirun with one GPU per rank (cp = the world size; tests/gpu/check-cp.sh
 * runs 1 rank, and 2 and 4 where the machine has the GPUs). With cp 1
 * every form runs its degenerate case on one GPU (the ring of one member,
 * the gather and the all-to-all of one rank, a node of one).
 *
 * Every rank draws the same global qkv (B, T, (H+2Hkv)D) and output
 * gradient, rounded to bf16 so the reference and the device see the same
 * inputs, and computes the reference attention (plain loops, the mask of
 * prt_window_first: causal, and under a window W key j > i - W). Each CP
 * rank uploads its rows (prt_cp_pos: chunks r and 2cp-1-r) and runs each
 * form; its output and dqkv rows must equal the reference's rows at the
 * same global positions within bf16 tolerance, test_ops_cuda's for
 * attention: out 2e-2 + 5e-2 |ref|, dqkv 5e-2 + 5e-2 |ref| (first
 * mismatches printed). After each call no PRT_MEM_BUFFERS byte is live and
 * the buffers' mark is what prt_par.h counts for the CUDA build.
 *
 * Prints one line per case and "# test_cp_cuda: cp N: P passed, F failed;
 * max |err| out X dqkv Y". Exit status 0 passed, 1 failed, 77 no usable
 * GPU (prt_init fails at the device: the build links, nothing is checked).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

#include "planrt.h"
#define TEST_RAND_SEED 2626
#include "test_rand.h"

static int nfail, ncase, world_rank;
static double max_out, max_grad;   /* largest |got - ref| of any case */

enum { B = 2, D = 16 };

/* ---- bf16 on the host (round to nearest even, as __float2bfloat16) ---- */

static uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* n values in [-scale, scale), already bf16 */
static float *rnd_bf(size_t n, float scale)
{
    float *p = rnd(n, scale);
    for (size_t i = 0; i < n; i++) p[i] = bf2f(f2bf(p[i]));
    return p;
}

/* ---- the reference: whole-sequence attention, fp32 ------------------------ */

/* out (B, T, HD), P (B, H, T, T) from qkv (B, T, R). */
static void ref_fwd(float *out, float *P, const float *qkv, size_t T, size_t H, size_t Hkv, size_t W)
{
    size_t R = (H + 2 * Hkv) * D, HD = H * D, G = H / Hkv;
    float scale = 1.0f / sqrtf((float)D);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t i = 0; i < T; i++) {
                const float *q = qkv + (b * T + i) * R + h * D;
                float *p = P + ((b * H + h) * T + i) * T, m = -INFINITY, sum = 0.0f;
                size_t j0 = prt_window_first(i, W);
                for (size_t j = j0; j <= i; j++) {
                    const float *k = qkv + (b * T + j) * R + (H + h / G) * D;
                    float s = 0.0f;
                    for (size_t e = 0; e < D; e++) s += q[e] * k[e];
                    p[j] = s * scale;
                    m = fmaxf(m, p[j]);
                }
                for (size_t j = j0; j <= i; j++) sum += p[j] = expf(p[j] - m);
                float *o = out + (b * T + i) * HD + h * D;
                for (size_t e = 0; e < D; e++) o[e] = 0.0f;
                for (size_t j = j0; j <= i; j++) {
                    const float *v = qkv + (b * T + j) * R + (H + Hkv + h / G) * D;
                    p[j] /= sum;
                    for (size_t e = 0; e < D; e++) o[e] += p[j] * v[e];
                }
            }
}

/* dqkv (B, T, R), zeroed here, from dout and the forward's P. */
static void ref_bwd(float *dqkv, const float *dout, const float *qkv, const float *P, size_t T, size_t H,
                    size_t Hkv, size_t W)
{
    size_t R = (H + 2 * Hkv) * D, HD = H * D, G = H / Hkv;
    float scale = 1.0f / sqrtf((float)D), *dS = malloc(T * sizeof *dS);
    memset(dqkv, 0, B * T * R * sizeof *dqkv);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t i = 0; i < T; i++) {
                const float *q = qkv + (b * T + i) * R + h * D, *dO = dout + (b * T + i) * HD + h * D;
                const float *p = P + ((b * H + h) * T + i) * T;
                float *dq = dqkv + (b * T + i) * R + h * D, dot = 0.0f;
                size_t j0 = prt_window_first(i, W);
                for (size_t j = j0; j <= i; j++) {   /* dP = dO V^T, dV += P^T dO */
                    const float *v = qkv + (b * T + j) * R + (H + Hkv + h / G) * D;
                    float *dv = dqkv + (b * T + j) * R + (H + Hkv + h / G) * D, s = 0.0f;
                    for (size_t e = 0; e < D; e++) {
                        s += dO[e] * v[e];
                        dv[e] += p[j] * dO[e];
                    }
                    dS[j] = s;
                    dot += p[j] * s;
                }
                for (size_t j = j0; j <= i; j++) {   /* dS = P (dP - rowsum(P dP)) / sqrt(D) */
                    const float *k = qkv + (b * T + j) * R + (H + h / G) * D;
                    float *dk = dqkv + (b * T + j) * R + (H + h / G) * D, g = p[j] * (dS[j] - dot) * scale;
                    for (size_t e = 0; e < D; e++) {
                        dq[e] += g * k[e];
                        dk[e] += g * q[e];
                    }
                }
            }
    free(dS);
}

/* ---- device helpers -------------------------------------------------------- */

/* Rows of the global (B, T, w) tensor at CP rank r's positions -> bf16 (B, Tl, w). */
static uint16_t *take_rows_bf(const float *src, size_t T, size_t w, int cp, int r)
{
    size_t Tl = T / (size_t)cp;
    uint16_t *dst = malloc(B * Tl * w * sizeof *dst + 2);
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < Tl; t++)
            for (size_t c = 0; c < w; c++)
                dst[(b * Tl + t) * w + c] = f2bf(src[(b * T + prt_cp_pos(t, T, cp, r)) * w + c]);
    return dst;
}

static void *upload(const void *host, size_t bytes)
{
    void *d = prt_alloc(bytes ? bytes : 2);
    if (d && bytes && prt_copy_to_device(d, host, bytes) != PRT_OK) {
        prt_free(d);
        return NULL;
    }
    return d;
}

/* Max |got - ref| over this rank's rows of the global (B, T, w) ref, the
 * device tensor dev (B, Tl, w) bf16; -1 (and the first mismatches printed)
 * when any is beyond atol + rtol |ref| or the copy failed. */
static double compare(const void *dev, const float *ref, size_t T, size_t w, int cp, int r, double atol,
                      double rtol, const char *what, const char *name)
{
    size_t Tl = T / (size_t)cp, n = B * Tl * w;
    uint16_t *got = malloc(n * sizeof *got + 2);
    if (prt_ops_sync() != PRT_OK || prt_copy_to_host(got, dev, n * sizeof *got) != PRT_OK) {
        fprintf(stderr, "rank %d %s: %s: the device failed: %s\n", world_rank, name, what, prt_ops_last_error());
        free(got);
        return -1.0;
    }
    double worst = 0.0;
    int bad = 0;
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < Tl; t++)
            for (size_t c = 0; c < w; c++) {
                double g = bf2f(got[(b * Tl + t) * w + c]), f = ref[(b * T + prt_cp_pos(t, T, cp, r)) * w + c];
                double e = fabs(g - f);
                if (!(e <= atol + rtol * fabs(f))) {
                    if (bad++ < 3)
                        fprintf(stderr, "rank %d %s: %s mismatch at b %zu t %zu col %zu: cpu %.6g gpu %.6g\n",
                                world_rank, name, what, b, t, c, f, g);
                    e = isnan(e) ? INFINITY : e;
                }
                worst = fmax(worst, e);
            }
    free(got);
    return bad ? -1.0 : worst;
}

typedef struct {
    prt_cp_form form;
    size_t      T, H, Hkv, W;
    int         node;   /* HIERARCHICAL: PLANRT_CP_NODE_RANKS (0: the hosts decide) */
} Case;

static const char *FORM[] = { "ring", "all_to_all", "all_gather", "hierarchical" };   /* ORDER PRT_CP_FORM */

/* The form's own buffers in bytes, forward or backward, as prt_par.h
 * counts them for the CUDA build (bf16 elements; fp32 dK, dV twice). */
static size_t contract_bytes(const Case *k, int cp, bool bwd)
{
    size_t Tl = k->T / (size_t)cp, KVb = B * Tl * 2 * k->Hkv * D, R = (k->H + 2 * k->Hkv) * D, HD = k->H * D;
    size_t e = 0;
    switch (k->form) {
    case PRT_CP_RING: e = bwd ? 6 * KVb + 2 * Tl * Tl : 2 * KVb + Tl * Tl; break;
    case PRT_CP_ALL_GATHER: e = bwd ? 3 * KVb * (size_t)cp + Tl * k->T : KVb * (size_t)cp; break;
    case PRT_CP_ALL_TO_ALL: {
        size_t dq = B * Tl * R, dO = B * Tl * HD, dP = B * (k->H / (size_t)cp) * k->T * k->T;
        e = bwd ? (dq + dO + dP > 2 * dq ? dq + dO + dP : 2 * dq) : dq;
        break;
    }
    case PRT_CP_HIERARCHICAL: {
        size_t n = k->node ? (size_t)k->node : (size_t)cp, nT = n * Tl, f = 2 * KVb + nT * nT;
        e = bwd ? B * Tl * (HD + R) + 6 * KVb + 2 * nT * nT : (B * Tl * R > f ? B * Tl * R : f);
        break;
    }
    }
    return e * sizeof(prt_act);
}

/* No buffer live, and the mark where the contract puts it. */
static bool memory_ok(uint64_t mark_before, size_t bytes, const char *name, const char *when)
{
    prt_mem_stats m;
    prt_mem_stats_get(&m);
    uint64_t want = mark_before > bytes ? mark_before : bytes;
    bool ok = m.live[PRT_MEM_BUFFERS] == 0 && m.kind_peak[PRT_MEM_BUFFERS] == want;
    if (!ok)
        fprintf(stderr, "rank %d %s %s: buffers live %llu, mark %llu, want mark %llu\n", world_rank, name, when,
                (unsigned long long)m.live[PRT_MEM_BUFFERS], (unsigned long long)m.kind_peak[PRT_MEM_BUFFERS],
                (unsigned long long)want);
    return ok;
}

static uint64_t buffer_mark(void)
{
    prt_mem_stats m;
    prt_mem_stats_get(&m);
    return m.kind_peak[PRT_MEM_BUFFERS];
}

/* A case fails if it fails on any rank; rank 0 prints it. */
static void record(bool ok, const char *name, double e_out, double e_grad)
{
    int bad = !ok, any = 0;
    double e[2] = { e_out, e_grad }, w[2];
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(e, w, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    ncase++;
    nfail += any;
    max_out = fmax(max_out, w[0]);
    max_grad = fmax(max_grad, w[1]);
    if (world_rank == 0)
        printf("%-52s max |err| out %.3g dqkv %.3g  %s\n", name, w[0], w[1], any ? "FAIL" : "ok");
}

static void check_case(prt_ctx *c, const Case *k)
{
    int cp = prt_cp_size(c), r = c->coord.cp;
    size_t T = k->T, Tl = T / (size_t)cp, H = k->H, Hkv = k->Hkv, R = (H + 2 * Hkv) * D, HD = H * D;
    char name[96];
    snprintf(name, sizeof name, "%s cp %d T %zu H %zu/%zu W %zu node %d", FORM[k->form], cp, T, H, Hkv, k->W,
             k->node);
    rng_state = 2000 + T + 10 * H + Hkv;   /* the same draws on every rank */
    float *qkv = rnd_bf(B * T * R, 1.5f), *dout = rnd_bf(B * T * HD, 1.0f);
    float *out_ref = zeros(B * T * HD), *P = zeros(B * H * T * T), *dqkv_ref = zeros(B * T * R);
    ref_fwd(out_ref, P, qkv, T, H, Hkv, k->W);
    ref_bwd(dqkv_ref, dout, qkv, P, T, H, Hkv, k->W);

    uint16_t *qkv_h = take_rows_bf(qkv, T, R, cp, r), *dout_h = take_rows_bf(dout, T, HD, cp, r);
    size_t ns = prt_cp_saved_numel(k->form, cp, B, Tl, H, Hkv, D);
    prt_act *qkv_d = upload(qkv_h, B * Tl * R * 2), *dout_d = upload(dout_h, B * Tl * HD * 2);
    prt_act *out_d = prt_alloc(B * Tl * HD * 2), *dqkv_d = prt_alloc(B * Tl * R * 2), *saved = prt_alloc(ns * 2 + 2);
    bool ok = ns && qkv_d && dout_d && out_d && dqkv_d && saved;
    if (!ok) fprintf(stderr, "rank %d %s: no device memory (or no saved size)\n", world_rank, name);

    uint64_t mark = buffer_mark();
    prt_status st = ok ? prt_cp_attention_fwd(c->cp, k->form, out_d, saved, qkv_d, B, Tl, H, Hkv, D, k->W)
                       : PRT_ERR_ARG;
    if (ok && st) fprintf(stderr, "rank %d %s: forward: %s\n", world_rank, name, prt_par_last_error());
    ok = ok && !st && memory_ok(mark, contract_bytes(k, cp, false), name, "forward");
    double e_out = ok ? compare(out_d, out_ref, T, HD, cp, r, 2e-2, 5e-2, "out", name) : -1.0;

    mark = buffer_mark();
    st = ok ? prt_cp_attention_bwd(c->cp, k->form, dqkv_d, dout_d, qkv_d, out_d, saved, B, Tl, H, Hkv, D, k->W)
            : PRT_ERR_ARG;
    if (ok && st) fprintf(stderr, "rank %d %s: backward: %s\n", world_rank, name, prt_par_last_error());
    ok = ok && !st && memory_ok(mark, contract_bytes(k, cp, true), name, "backward");
    double e_grad = ok ? compare(dqkv_d, dqkv_ref, T, R, cp, r, 5e-2, 5e-2, "dqkv", name) : -1.0;

    record(ok && e_out >= 0 && e_grad >= 0, name, e_out, e_grad);
    free(qkv); free(dout); free(out_ref); free(P); free(dqkv_ref); free(qkv_h); free(dout_h);
    prt_free(qkv_d); prt_free(dout_d); prt_free(out_d); prt_free(dqkv_d); prt_free(saved);
}

int main(int argc, char **argv)
{
    int world_size;
    prt_ctx *c;
    MPI_Init(&argc, &argv);   /* ours, so prt_finalize leaves it to us */
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    prt_layout L = { .dp = 1, .tp = 1, .pp = 1, .cp = world_size };
    prt_status s = prt_init_layout(&argc, &argv, L, &c), o = s ? s : prt_ops_init(c->device);
    if (o != PRT_OK) {
        /* the CUDA build without a usable GPU ends here: 77, "skipped" */
        fprintf(stderr, "test_cp_cuda: cannot start on the GPU: %s\n",
                s ? prt_comm_last_error() : prt_ops_last_error());
        prt_finalize(s ? NULL : c);
        MPI_Finalize();
        return o == PRT_ERR_CUDA ? 77 : 1;
    }
    static const prt_cp_form forms[] = { PRT_CP_RING, PRT_CP_ALL_GATHER, PRT_CP_ALL_TO_ALL,
                                         PRT_CP_HIERARCHICAL };
    static const size_t Ts[] = { 32, 64 }, Ws[] = { 0, 5 };
    static const size_t heads[][2] = { { 4, 2 }, { 4, 1 }, { 8, 4 } };
    size_t twocp = 2 * (size_t)world_size;
    for (size_t f = 0; f < 4; f++)
        for (int node = 0; node <= (forms[f] == PRT_CP_HIERARCHICAL && world_size > 1); node++) {
            /* HIERARCHICAL: one host is one node of cp ranks; node 1 also runs
             * its ring over "nodes" of one rank (PLANRT_CP_NODE_RANKS=1) */
            if (node) setenv("PLANRT_CP_NODE_RANKS", "1", 1); else unsetenv("PLANRT_CP_NODE_RANKS");
            size_t per = node ? 1 : (size_t)world_size;   /* the ranks that split the heads */
            for (size_t t = 0; t < 2; t++)
                for (size_t h = 0; h < 3; h++)
                    for (size_t w = 0; w < 2; w++) {
                        size_t H = heads[h][0], Hkv = heads[h][1];
                        if (forms[f] == PRT_CP_ALL_TO_ALL && (H % (size_t)world_size || Hkv % (size_t)world_size))
                            continue;   /* refused, as test_cp_attention checks on the CPU */
                        if (forms[f] == PRT_CP_HIERARCHICAL && (H % per || Hkv % per)) continue;
                        Case k = { .form = forms[f], .T = (Ts[t] + twocp - 1) / twocp * twocp, .H = H,
                                   .Hkv = Hkv, .W = Ws[w], .node = node };
                        check_case(c, &k);
                    }
        }
    unsetenv("PLANRT_CP_NODE_RANKS");
    if (world_rank == 0)
        printf("# test_cp_cuda: cp %d: %d passed, %d failed; max |err| out %.3g dqkv %.3g\n", world_size,
               ncase - nfail, nfail, max_out, max_grad);
    prt_finalize(c);
    MPI_Finalize();
    return nfail ? 1 : 0;
}
