/*
 * test_cp_attention.c: context-parallel attention (issue 26) equals the
 * whole-sequence attention, under real mpirun (`make test-cp-attention`:
 * 1, 2 and 4 ranks, cp = the world size, both PLANRT_P2P modes).
 *
 * Every rank draws the same global qkv (B, T, (H+2Hkv)D) and output
 * gradient and computes the reference with prt_attention_fwd/bwd on the
 * whole sequence. Then each CP rank takes its chunks (prt_cp_pos: chunks r
 * and 2cp-1-r) and runs prt_cp_attention_fwd/bwd in each form: its output
 * rows and every gradient row (dQ, dK, dV) must equal the reference's rows
 * at the same global positions within 1e-6 + 1e-5 |ref|. Shapes: B 2, D 8,
 * T 32 and 64, H 4 with Hkv 2 (GQA) and 1 (MQA), H 8 with Hkv 4, window 0
 * and 5 (not a multiple of the chunk). Where cp does not divide the heads
 * the all-to-all form must refuse with PRT_ERR_ARG and a message naming
 * it; the hierarchical form refuses too (not in planrt yet).
 *
 * Memory: after each call no PRT_MEM_BUFFERS byte is live, and the
 * buffers' high-water mark is max(previous mark, the form's own buffers as
 * prt_par.h counts them) — exact whenever a call raises the mark.
 * Exit status 1 on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

#include "planrt.h"
#define TEST_RAND_SEED 26
#include "test_rand.h"

static int nfail, ncase, world_rank, world_size;
static double worst_out, worst_grad;   /* largest |got - ref| / (1e-6 + 1e-5 |ref|) seen */
static double worst_abs;               /* largest |got - ref| seen */

/* A case fails if it fails on any rank; rank 0 says which. */
static void record(bool ok, const char *name)
{
    int bad = !ok, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ncase++;
    nfail += any;
    if (world_rank == 0 && any) printf("FAIL %s\n", name);
}

/* Worst ratio of error to tolerance over n values; prints the first
 * mismatch (llm.c's validate_result). */
static double compare(const float *got, const float *ref, size_t n, const char *what, const char *name)
{
    double worst = 0.0;
    bool said = false;
    for (size_t i = 0; i < n; i++) {
        double tol = 1e-6 + 1e-5 * fabs((double)ref[i]), e = fabs((double)got[i] - ref[i]) / tol;
        if (!(e <= 1.0) && !said) {
            fprintf(stderr, "rank %d %s: %s[%zu] = %g, reference %g\n", world_rank, name, what, i,
                    got[i], ref[i]);
            said = true;
        }
        worst = isnan(e) ? INFINITY : fmax(worst, e);
        worst_abs = fmax(worst_abs, fabs((double)got[i] - ref[i]));
    }
    return worst;
}

typedef struct {
    prt_cp_form form;
    size_t      T, H, Hkv, W;
    int         node;   /* HIERARCHICAL: PLANRT_CP_NODE_RANKS (0: unset, the hosts decide) */
} Case;

static const char *FORM[] = { "ring", "all_to_all", "all_gather", "hierarchical" };   /* ORDER PRT_CP_FORM */

enum { B = 2, D = 8 };

/* Rows of the global (B, T, w) tensor at this rank's positions -> (B, Tl, w). */
static void take_rows(float *dst, const float *src, size_t T, size_t w, int cp, int r)
{
    size_t Tl = T / (size_t)cp;
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < Tl; t++)
            memcpy(dst + (b * Tl + t) * w, src + (b * T + prt_cp_pos(t, T, cp, r)) * w, w * sizeof *dst);
}

/* The form's own buffers (elements) as prt_par.h counts them, forward or
 * backward; all_gather's backward also holds one (Tl, T) score gradient. */
static size_t contract_buffers(const Case *k, int cp, bool bwd)
{
    size_t Tl = k->T / (size_t)cp, KVb = B * Tl * 2 * k->Hkv * D;
    switch (k->form) {
    case PRT_CP_RING: return bwd ? 4 * KVb + 2 * Tl * Tl : 2 * KVb + Tl * Tl;
    case PRT_CP_ALL_GATHER: return bwd ? 2 * KVb * (size_t)cp + Tl * k->T : KVb * (size_t)cp;
    case PRT_CP_ALL_TO_ALL: return bwd ? prt_cp_saved_numel(k->form, cp, B, Tl, k->H, k->Hkv, D) : 0;
    case PRT_CP_HIERARCHICAL: {
        /* forward: the qkv exchange's send blocks, then the ring's buffers
         * for blocks of n Tl tokens; backward: the output gradient and the
         * qkv gradient (head-split) beside the ring's buffers */
        size_t n = k->node ? (size_t)k->node : (size_t)cp;   /* one host here: one node */
        size_t R = (k->H + 2 * k->Hkv) * D, HD = k->H * D, nT = n * Tl;
        size_t f = 2 * KVb + nT * nT;
        return bwd ? B * Tl * (HD + R) + 4 * KVb + 2 * nT * nT : (B * Tl * R > f ? B * Tl * R : f);
    }
    }
    return 0;
}

/* Live buffers none, and the mark where the contract puts it. */
static bool memory_ok(uint64_t mark_before, size_t elems, const char *name, const char *when)
{
    prt_mem_stats m;
    prt_mem_stats_get(&m);
    uint64_t want = mark_before > elems * sizeof(float) ? mark_before : elems * sizeof(float);
    bool ok = m.live[PRT_MEM_BUFFERS] == 0 && m.kind_peak[PRT_MEM_BUFFERS] == want;
    if (!ok)
        fprintf(stderr, "rank %d %s %s: buffers live %llu, mark %llu, want mark %llu\n", world_rank, name,
                when, (unsigned long long)m.live[PRT_MEM_BUFFERS],
                (unsigned long long)m.kind_peak[PRT_MEM_BUFFERS], (unsigned long long)want);
    return ok;
}

static uint64_t buffer_mark(void)
{
    prt_mem_stats m;
    prt_mem_stats_get(&m);
    return m.kind_peak[PRT_MEM_BUFFERS];
}

/* A form that must refuse this shape: PRT_ERR_ARG naming why, both ways. */
static bool refused(prt_ctx *c, const Case *k, const char *why)
{
    int cp = prt_cp_size(c);
    size_t Tl = k->T / (size_t)cp, R = (k->H + 2 * k->Hkv) * D;
    float *qkv = zeros(B * Tl * R), *out = zeros(B * Tl * k->H * D), *saved = zeros(1), *dqkv = zeros(B * Tl * R);
    prt_status f = prt_cp_attention_fwd(c->cp, k->form, out, saved, qkv, B, Tl, k->H, k->Hkv, D, k->W);
    bool ok = f == PRT_ERR_ARG && strstr(prt_par_last_error(), why);
    prt_status b = prt_cp_attention_bwd(c->cp, k->form, dqkv, out, qkv, out, saved, B, Tl, k->H, k->Hkv, D, k->W);
    ok = ok && b == PRT_ERR_ARG && strstr(prt_par_last_error(), why);
    if (!ok) fprintf(stderr, "rank %d: expected a refusal naming '%s', got %d '%s'\n", world_rank, why, (int)b,
                     prt_par_last_error());
    free(qkv); free(out); free(saved); free(dqkv);
    return ok;
}

static void check_case(prt_ctx *c, const Case *k)
{
    int cp = prt_cp_size(c), r = c->coord.cp;
    size_t T = k->T, Tl = T / (size_t)cp, H = k->H, Hkv = k->Hkv, R = (H + 2 * Hkv) * D, HD = H * D;
    char name[128];
    snprintf(name, sizeof name, "%s cp %d T %zu H %zu Hkv %zu W %zu node %d", FORM[k->form], cp, T, H,
             Hkv, k->W, k->node);
    if (k->form == PRT_CP_ALL_TO_ALL && (H % (size_t)cp || Hkv % (size_t)cp)) {
        size_t Tl = T / (size_t)cp;
        record(refused(c, k, "all_to_all needs cp") && !prt_cp_saved_numel(k->form, cp, B, Tl, H, Hkv, D), name);
        return;
    }
    size_t n = k->node ? (size_t)k->node : (size_t)cp;
    if (k->form == PRT_CP_HIERARCHICAL && (H % n || Hkv % n)) {
        record(refused(c, k, "CP ranks of a node must divide"), name);
        return;
    }
    rng_state = 1000 + T + 10 * H + Hkv;   /* the same draws on every rank */
    float *qkv = rnd(B * T * R, 1.0f), *dout = rnd(B * T * HD, 1.0f);
    float *out_ref = zeros(B * T * HD), *att = zeros(B * H * T * T), *datt = zeros(B * H * T * T);
    float *dqkv_ref = zeros(B * T * R);
    prt_attention_fwd(out_ref, att, qkv, B, T, H, Hkv, D, k->W);
    prt_attention_bwd(dqkv_ref, datt, dout, qkv, att, false, B, T, H, Hkv, D, k->W);

    float *qkv_l = zeros(B * Tl * R), *dout_l = zeros(B * Tl * HD), *out_l = zeros(B * Tl * HD);
    float *dqkv_l = zeros(B * Tl * R), *ref_l = zeros(B * Tl * R);
    float *saved = zeros(prt_cp_saved_numel(k->form, cp, B, Tl, H, Hkv, D));
    take_rows(qkv_l, qkv, T, R, cp, r);
    take_rows(dout_l, dout, T, HD, cp, r);

    uint64_t mark = buffer_mark();
    prt_status st = prt_cp_attention_fwd(c->cp, k->form, out_l, saved, qkv_l, B, Tl, H, Hkv, D, k->W);
    bool ok = st == PRT_OK;
    if (!ok) fprintf(stderr, "rank %d %s: forward: %s\n", world_rank, name, prt_par_last_error());
    ok = ok && memory_ok(mark, contract_buffers(k, cp, false), name, "forward");
    take_rows(ref_l, out_ref, T, HD, cp, r);
    double e_out = ok ? compare(out_l, ref_l, B * Tl * HD, "out", name) : INFINITY;

    mark = buffer_mark();
    st = ok ? prt_cp_attention_bwd(c->cp, k->form, dqkv_l, dout_l, qkv_l, out_l, saved, B, Tl, H, Hkv, D, k->W)
            : PRT_ERR_ARG;
    if (ok && st) fprintf(stderr, "rank %d %s: backward: %s\n", world_rank, name, prt_par_last_error());
    ok = ok && st == PRT_OK && memory_ok(mark, contract_buffers(k, cp, true), name, "backward");
    take_rows(ref_l, dqkv_ref, T, R, cp, r);
    double e_grad = ok ? compare(dqkv_l, ref_l, B * Tl * R, "dqkv", name) : INFINITY;

    worst_out = fmax(worst_out, e_out);
    worst_grad = fmax(worst_grad, e_grad);
    record(ok && e_out <= 1.0 && e_grad <= 1.0, name);
    free(qkv); free(dout); free(out_ref); free(att); free(datt); free(dqkv_ref);
    free(qkv_l); free(dout_l); free(out_l); free(dqkv_l); free(ref_l); free(saved);
}

int main(int argc, char **argv)
{
    prt_ctx *c;
    MPI_Init(&argc, &argv);   /* ours, so prt_finalize leaves it to us */
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    prt_layout L = { .dp = 1, .tp = 1, .pp = 1, .cp = world_size };
    if (prt_init_layout(&argc, &argv, L, &c) != PRT_OK) {
        fprintf(stderr, "test_cp_attention: %s\n", prt_comm_last_error());
        MPI_Finalize();
        return 1;
    }
    static const prt_cp_form forms[] = { PRT_CP_RING, PRT_CP_ALL_GATHER, PRT_CP_ALL_TO_ALL,
                                         PRT_CP_HIERARCHICAL };
    static const size_t Ts[] = { 32, 64 }, Ws[] = { 0, 5 };
    static const size_t heads[][2] = { { 4, 2 }, { 4, 1 }, { 8, 4 }, { 6, 3 } };
    size_t twocp = 2 * (size_t)world_size;
    for (size_t f = 0; f < 4; f++)
        for (int node = 0; node <= world_size; node++) {   /* HIERARCHICAL: each node size */
            if ((forms[f] != PRT_CP_HIERARCHICAL && node) || (node && world_size % node)) continue;
            char v[12];
            snprintf(v, sizeof v, "%d", node);
            if (node) setenv("PLANRT_CP_NODE_RANKS", v, 1); else unsetenv("PLANRT_CP_NODE_RANKS");
            for (size_t t = 0; t < 2; t++)
                for (size_t h = 0; h < 4; h++)
                    for (size_t w = 0; w < 2; w++) {
                        /* T a multiple of 2 cp: 32 and 64 where it is, rounded up where not */
                        size_t T = (Ts[t] + twocp - 1) / twocp * twocp;
                        Case k = { .form = forms[f], .T = T, .H = heads[h][0], .Hkv = heads[h][1],
                                   .W = Ws[w], .node = node };
                        check_case(c, &k);
                    }
        }
    setenv("PLANRT_CP_NODE_RANKS", "0", 1);
    Case hier = { .form = PRT_CP_HIERARCHICAL, .T = twocp * 4, .H = 4, .Hkv = 2 };
    record(refused(c, &hier, "PLANRT_CP_NODE_RANKS=0"), "a bad PLANRT_CP_NODE_RANKS refused");
    unsetenv("PLANRT_CP_NODE_RANKS");
    Case odd = { .form = PRT_CP_RING, .T = (size_t)(3 * world_size), .H = 4, .Hkv = 2 };
    record(refused(c, &odd, "two equal chunks"), "odd local tokens refused");
    if (world_rank == 0)
        printf("test_cp_attention on %d ranks (cp %d, PLANRT_P2P=%s): %d passed, %d failed; worst error / "
               "tolerance: out %.3g, dqkv %.3g; largest |error| %.3g\n", world_size, world_size,
               prt_p2p_mode_name(prt_comm_p2p_mode()), ncase - nfail, nfail, worst_out, worst_grad, worst_abs);
    prt_finalize(c);
    MPI_Finalize();
    return nfail ? 1 : 0;
}
