/*
 * test_moe_ep.c: a MoE layer trained expert-parallel equals the one-rank
 * layer (issue 17), under real mpirun (`make test-moe-ep`: 1, 2 and 4
 * ranks, ep = the world size).
 *
 * Every rank computes the reference: the whole layer on all sequences with
 * every expert (router, top-k, route, dispatch, SwiGLU experts, combine,
 * and the backward of all of it). Then the same layer expert-parallel:
 * rank r routes its own sequences, sends each row to the EP rank holding
 * its expert (prt_moe_ep_plan: counts first; prt_moe_ep_to_experts:
 * prt_all_to_all_v), runs its el local experts on the rows they received,
 * sends the outputs back (prt_moe_ep_to_sources), combines; and the
 * backward through the same exchanges. Its outputs and input gradients
 * must match the reference's rows of its sequences, its experts' weight
 * gradients the reference's for those experts, and the router gradient
 * summed over ranks the reference's: within 1e-5 relative (the rows of an
 * expert arrive in the one-rank order, so in practice they are equal).
 * Cases: dropless top-2, capacity 1 (tokens dropped), top-1, a rank that
 * receives nothing for an expert, and the gates without norm and sigmoid. Exit status 1 on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

#include "planrt.h"

static int nfail, ncase, world_rank, world_size;

/* Deterministic on every rank: the same model everywhere. */
static uint64_t rng = 99;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static float *rnd(size_t n, float scale)
{
    float *p = malloc(n * sizeof *p + 4);
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

static float *zeros(size_t n) { return calloc(n + 1, sizeof(float)); }

/* The first mismatch beyond 1e-6 + 1e-5 |ref|, or -1. */
static long mismatch(const float *got, const float *ref, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - ref[i]) <= 1e-6 + 1e-5 * fabs((double)ref[i]))) return (long)i;
    return -1;
}

/* A case fails if it fails on any rank; rank 0 says which. */
static void record(bool ok, const char *what, const char *name)
{
    int bad = !ok, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ncase++;
    nfail += any;
    if (world_rank == 0) printf("%s %s: %s\n", any ? "FAIL" : "ok  ", name, what);
}

typedef struct { const char *name; size_t k; double factor; bool skew; int gate; } Case;

typedef struct {
    size_t B, T, C, E, F, k, cap;
    int gate;                        /* PRT_MOE_* flags */
    const float *wr, *w1, *w2;       /* router (E, C); per expert (2F, C), (C, F) */
} Moe;

/* One expert's forward on n rows and its backward (weight gradients add). */
static void expert_fwd(const Moe *m, size_t e, float *y, float *h, float *a, const float *x, size_t n)
{
    prt_linear_fwd(h, x, m->w1 + e * 2 * m->F * m->C, NULL, n, m->C, 2 * m->F);
    prt_swiglu_fwd(a, h, n, m->F);
    prt_linear_fwd(y, a, m->w2 + e * m->C * m->F, NULL, n, m->F, m->C);
}

static void expert_bwd(const Moe *m, size_t e, float *dx, float *dw1, float *dw2, const float *dy,
                       const float *x, const float *h, const float *a, size_t n)
{
    float *da = zeros(n * m->F), *dh = zeros(n * 2 * m->F);
    prt_linear_bwd(da, dw2, NULL, dy, a, m->w2 + e * m->C * m->F, n, m->F, m->C);
    prt_swiglu_bwd(dh, h, da, n, m->F);
    prt_linear_bwd(dx, dw1, NULL, dh, x, m->w1 + e * 2 * m->F * m->C, n, m->C, 2 * m->F);
    free(da);
    free(dh);
}

/* Gradients of one run: input, router, every expert's (zeros for the
 * experts a rank does not hold). */
typedef struct { float *out, *dx, *dwr, *dw1, *dw2; } Result;

static Result result_new(const Moe *m, size_t N)
{
    Result r = { zeros(N * m->C), zeros(N * m->C), zeros(m->E * m->C), zeros(m->E * 2 * m->F * m->C),
                 zeros(m->E * m->C * m->F) };
    return r;
}

static void result_free(Result *r) { free(r->out); free(r->dx); free(r->dwr); free(r->dw1); free(r->dw2); }

/* The layer on B sequences (x, dy: (B T, C)). With ep NULL every expert is
 * here; else this rank holds experts [r el, (r+1) el) of the EP group and
 * the rows travel. */
static bool layer(const Moe *m, size_t B, const float *x, const float *dy, prt_comm *ep, Result *res)
{
    size_t N = B * m->T, C = m->C, E = m->E, k = m->k, F = m->F;
    float *logits = zeros(N * E), *w = zeros(N * k), *dw = zeros(N * k), *dl = zeros(N * E);
    int32_t *idx = malloc(N * k * 4 + 4), *row = malloc(N * k * 4 + 4), *cnt = malloc(E * 4);
    prt_moe_router_fwd(logits, x, m->wr, N, C, E);
    prt_moe_topk_fwd(idx, w, logits, N, E, k, m->gate, 1, 1, NULL, 1.0f);
    prt_moe_route(row, cnt, idx, B, m->T, E, k, m->cap);
    size_t R = 0;
    for (size_t e = 0; e < E; e++) R += (size_t)cnt[e];
    float *xs = zeros(R * C), *ys = zeros(R * C), *dys = zeros(R * C), *dxs = zeros(R * C);
    prt_moe_dispatch(xs, x, row, N, C, k);
    prt_moe_ep x_ep;
    size_t e0 = 0, el = E, rin = R;
    const int32_t *local = cnt;
    bool ok = true;
    if (ep) {
        ok = prt_moe_ep_plan(&x_ep, ep, cnt, E, C) == PRT_OK && x_ep.rows_out == R;
        el = x_ep.el;
        e0 = (size_t)prt_comm_rank(ep) * el;
        rin = x_ep.rows_in;
        local = x_ep.local;
    }
    float *xe = ep ? zeros(rin * C) : xs, *ye = ep ? zeros(rin * C) : ys;
    float *dye = ep ? zeros(rin * C) : dys, *dxe = ep ? zeros(rin * C) : dxs;
    float *he = zeros(rin * 2 * F), *ae = zeros(rin * F);
    if (ep && ok) ok = prt_moe_ep_to_experts(&x_ep, xs, xe) == PRT_OK;
    for (size_t le = 0, off = 0; ok && le < el; off += (size_t)local[le], le++)
        if (local[le])
            expert_fwd(m, e0 + le, ye + off * C, he + off * 2 * F, ae + off * F, xe + off * C,
                       (size_t)local[le]);
    if (ep && ok) ok = prt_moe_ep_to_sources(&x_ep, ye, ys) == PRT_OK;
    prt_moe_combine(res->out, ys, row, w, N, C, k);
    /* backward */
    prt_moe_combine_bwd(dys, dw, dy, ys, row, w, N, C, k);
    if (ep && ok) ok = prt_moe_ep_to_experts(&x_ep, dys, dye) == PRT_OK;
    for (size_t le = 0, off = 0; ok && le < el; off += (size_t)local[le], le++)
        if (local[le])
            expert_bwd(m, e0 + le, dxe + off * C, res->dw1 + (e0 + le) * 2 * F * C,
                       res->dw2 + (e0 + le) * C * F, dye + off * C, xe + off * C, he + off * 2 * F,
                       ae + off * F, (size_t)local[le]);
    if (ep && ok) ok = prt_moe_ep_to_sources(&x_ep, dxe, dxs) == PRT_OK;
    prt_moe_dispatch_bwd(res->dx, dxs, row, N, C, k);
    prt_moe_topk_bwd(dl, dw, w, idx, logits, N, E, k, m->gate, 1.0f);
    prt_moe_router_bwd(res->dx, res->dwr, dl, x, m->wr, N, C, E);
    if (ep) {
        prt_moe_ep_free(&x_ep);
        free(xe); free(ye); free(dye); free(dxe);
    }
    free(logits); free(w); free(dw); free(dl); free(idx); free(row); free(cnt);
    free(xs); free(ys); free(dys); free(dxs); free(he); free(ae);
    return ok;
}

static void check_case(prt_ctx *c, const Case *cs)
{
    const size_t Bg = 4, P = (size_t)world_size;
    Moe m = { .B = Bg, .T = 16, .C = 16, .E = 8, .F = 8, .k = cs->k, .gate = cs->gate };
    m.cap = prt_moe_capacity(cs->factor, m.T, m.k, m.E);
    size_t N = Bg * m.T, C = m.C;
    float *x = rnd(N * C, 1), *dy = rnd(N * C, 1), *wr = rnd(m.E * C, 1);
    float *w1 = rnd(m.E * 2 * m.F * C, 0.5f), *w2 = rnd(m.E * C * m.F, 0.5f);
    if (cs->skew) {   /* expert 7 never wins: its EP rank receives no rows for it */
        for (size_t t = 0; t < N; t++) x[t * C] = 3.0f;
        wr[7 * C] = -5.0f;
    }
    m.wr = wr; m.w1 = w1; m.w2 = w2;
    Result ref = result_new(&m, N), ep = result_new(&m, N / P);
    bool ok = layer(&m, Bg, x, dy, NULL, &ref);
    size_t r = (size_t)world_rank, Bl = Bg / P, Nl = Bl * m.T;
    ok = ok && layer(&m, Bl, x + r * Nl * C, dy + r * Nl * C, c->ep, &ep);
    record(ok, "the exchanges ran", cs->name);
    record(mismatch(ep.out, ref.out + r * Nl * C, Nl * C) < 0, "outputs = one rank's", cs->name);
    record(mismatch(ep.dx, ref.dx + r * Nl * C, Nl * C) < 0, "input gradients = one rank's", cs->name);
    size_t el = m.E / P, n1 = 2 * m.F * C, n2 = C * m.F;
    record(mismatch(ep.dw1 + r * el * n1, ref.dw1 + r * el * n1, el * n1) < 0 &&
           mismatch(ep.dw2 + r * el * n2, ref.dw2 + r * el * n2, el * n2) < 0,
           "local experts' weight gradients = one rank's", cs->name);
    MPI_Allreduce(MPI_IN_PLACE, ep.dwr, (int)(m.E * C), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    record(mismatch(ep.dwr, ref.dwr, m.E * C) < 0, "router gradient summed over ranks = one rank's",
           cs->name);
    result_free(&ref);
    result_free(&ep);
    free(x); free(dy); free(wr); free(w1); free(w2);
}

int main(int argc, char **argv)
{
    prt_ctx *c;
    MPI_Init(&argc, &argv);   /* ours, so prt_finalize leaves it to us */
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (prt_init(&argc, &argv, world_size, 1, 1, &c) != PRT_OK || prt_ep_init(c, world_size) != PRT_OK) {
        fprintf(stderr, "test_moe_ep: %s\n", prt_comm_last_error());
        MPI_Finalize();
        return 1;
    }
    static const Case cases[] = {
        { "dropless top-2", 2, 0.0, false, PRT_MOE_NORM },
        { "capacity 1.0 top-2", 2, 1.0, false, PRT_MOE_NORM },
        { "top-1", 1, 0.0, false, PRT_MOE_NORM },
        { "an expert no token picks", 2, 0.0, true, PRT_MOE_NORM },
        { "softmax without norm (Qwen2-MoE) top-2", 2, 0.0, false, 0 },
        { "sigmoid with norm (DeepSeek-V3) top-2", 2, 0.0, false, PRT_MOE_SIGMOID | PRT_MOE_NORM },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(c, &cases[i]);
    if (world_rank == 0) printf("test_moe_ep on %d ranks (ep %d): %d passed, %d failed\n", world_size,
                                world_size, ncase - nfail, nfail);
    prt_finalize(c);
    MPI_Finalize();
    return nfail ? 1 : 0;
}
