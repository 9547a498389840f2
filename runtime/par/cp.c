/*
 * cp.c: context parallelism's attention (issue 26): one causal attention
 * call over a sequence split across the CP group, in the forms of
 * prt_par.h ("context parallelism"), whose contract this file keeps: what
 * each form saves between forward and backward, and what it allocates for
 * itself while it runs (PRT_MEM_BUFFERS, freed before it returns).
 *
 * CP rank r holds chunks r and 2cp-1-r of the 2cp chunks of C = T / (2cp)
 * tokens (prt_cp_pos), so every mask is by global position: key position
 * j is seen by query position i when j <= i and, under a window W > 0,
 * j > i - W (prt_window_first's rule, written as j + W > i).
 *
 *  - ALL_GATHER: K, V of every rank gathered (in rank-block order: block s
 *    holds rank s's Tl tokens, positions prt_cp_pos(t, T, cp, s)), the
 *    local queries against all T keys, probabilities saved (B, H, Tl, T)
 *    in that key order; the backward reduce-scatters dK, dV so each rank
 *    gets the sums for its own block, i.e. its own two chunks.
 *  - RING: step s holds rank (r - s) mod cp's KV block, posts its send to
 *    r+1 and the receive of the next from r-1 before computing on it.
 *    Flash-style (Dao et al. 2022, Alg. 1; Liu et al. 2023, ring
 *    attention): the output is kept normalised together with the running
 *    log-sum-exp L of each query row; a block with scores S and reference
 *    M = max(L, max S) adds P = exp(S - M), tot = exp(L - M) + sum P, and
 *    O <- (O exp(L - M) + P V) / tot, L <- M + log(tot). The block is done
 *    as sub-blocks of C x C (query chunk, key chunk; 2 x 2 of them, nodes
 *    of k ranks under HIERARCHICAL 2k x 2k): one wholly in
 *    the future (or, under a window, wholly too old) is skipped, one wholly
 *    visible is not masked, and a mask is a column range per row.
 *    Under the load-balanced split half of every non-diagonal step is
 *    skipped. The backward rebuilds P = exp(S - L)
 *    from the saved L, uses rowsum(dO * O) for the softmax Jacobian's
 *    rowsum(P * dP) (they are equal, FlashAttention-2 Sec. 3.1.2), and
 *    sends dK, dV (fp32) round the ring behind K, V: after cp steps they
 *    are at rank r+1 of their owner, one more hop brings them home.
 *  - ALL_TO_ALL (DeepSpeed-Ulysses, Jacobs et al. 2023): qkv goes from
 *    (local tokens, all heads) to (all T tokens in global order, this
 *    rank's H/cp query heads and Hkv/cp kv heads: rank j takes query heads
 *    [j H/cp, (j+1) H/cp) and kv heads [j Hkv/cp, (j+1) Hkv/cp), which are
 *    exactly their GQA groups), prt_attention_fwd/bwd run on whole
 *    sequences, and the output comes back. The all-to-alls are in place:
 *    the send layout is packed into the buffer the collective then
 *    overwrites, and the received rank-major blocks are permuted in place
 *    into the layout wanted (one bit per unit of host memory marks the
 *    cycles), so the form needs no buffer beyond the contract's.
 *  - HIERARCHICAL (Megatron-Core / Transformer Engine's "a2a+p2p"): the
 *    all-to-all of ALL_TO_ALL inside each node (rk consecutive CP ranks),
 *    then the ring over the nodes with blocks of 2 rk chunks, then the
 *    node's all-to-all of the output; the backward reverses it. Saved: the
 *    node's head-split qkv and output and the ring's log-sum-exp.
 *
 * This file is the one orchestration of both builds: the ring's steps and
 * transfers, the exchanges, the buffers (prt_mem_alloc, PRT_MEM_BUFFERS:
 * device memory on CUDA) and the order of it all. What is computed on a
 * block (scores, masks, the online-softmax merge, P V, the backward's
 * block step, the all-to-alls' reorders) is cp_internal.h's prtp_cp_*
 * interface: cp_cpu.c (fp32, OpenBLAS) or runtime/cuda/ops_cp.cu (bf16
 * storage, cuBLAS with fp32 accumulation). On CUDA the log-sum-exp and
 * the dK, dV accumulators stay fp32 (the saved buffer and the dK, dV
 * buffers hold them at 2 bf16 elements a value), and the all-to-alls'
 * unpacking reorders are out of place (ALL_TO_ALL then takes one buffer of
 * the exchanged size while each exchange runs): prt_par.h counts both.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "cp_internal.h"
#include "par_internal.h"

static const char *form_name(prt_cp_form f)
{
    switch (f) {   /* ORDER PRT_CP_FORM */
    case PRT_CP_RING: return "ring";
    case PRT_CP_ALL_TO_ALL: return "all_to_all";
    case PRT_CP_ALL_GATHER: return "all_gather";
    case PRT_CP_HIERARCHICAL: return "hierarchical";
    }
    return "?";
}

/* a * b * c ... without wrapping; false on overflow. */
static bool mul3(size_t *out, size_t a, size_t b, size_t c)
{
    size_t t;
    return !__builtin_mul_overflow(a, b, &t) && !__builtin_mul_overflow(t, c, out);
}

static bool mul4(size_t *out, size_t a, size_t b, size_t c, size_t d)
{
    size_t t;
    return mul3(&t, a, b, c) && !__builtin_mul_overflow(t, d, out);
}

/* The saved elements of one call, or false when they do not fit a size_t. */
static bool saved_numel(size_t *out, prt_cp_form form, int cp, size_t B, size_t Tl, size_t H,
                        size_t Hkv, size_t D)
{
    size_t T, a, b, c;
    if (cp < 1 || __builtin_mul_overflow(Tl, (size_t)cp, &T)) return false;
    switch (form) {
    case PRT_CP_RING:         /* fp32 log-sum-exp per (b, h, query row) */
        return mul4(out, B, H, Tl, CP_F32_ACT);
    case PRT_CP_ALL_GATHER:   /* probabilities (B, H, Tl, T) */
        return mul4(out, B, H, Tl, T);
    case PRT_CP_ALL_TO_ALL:   /* head-split qkv, head-split output, probabilities */
        if (H % (size_t)cp || Hkv % (size_t)cp) return false;
        return mul4(&a, B, T, H / (size_t)cp + 2 * (Hkv / (size_t)cp), D) &&
               mul4(&b, B, T, H / (size_t)cp, D) && mul4(&c, B, H / (size_t)cp, T, T) &&
               !__builtin_add_overflow(a, b, out) && !__builtin_add_overflow(*out, c, out);
    case PRT_CP_HIERARCHICAL: /* the node's head-split qkv and output, the ring's lse */
        return mul4(&a, B, Tl, H + 2 * Hkv, D) && mul4(&b, B, Tl, H, D) && mul4(&c, B, H, Tl, CP_F32_ACT) &&
               !__builtin_add_overflow(a, b, out) && !__builtin_add_overflow(*out, c, out);
    }
    return false;
}

size_t prt_cp_saved_numel(prt_cp_form form, int cp, size_t B, size_t Tl, size_t H, size_t Hkv, size_t D)
{
    size_t n;   /* 0 for a shape the form refuses: its forward says why */
    return saved_numel(&n, form, cp, B, Tl, H, Hkv, D) ? n : 0;
}

/* Check one call's arguments and fill x; the message names the fix. */
static prt_status cp_setup(Cp *x, const char *who, prt_comm *g, prt_cp_form form, size_t B,
                           size_t Tl, size_t H, size_t Hkv, size_t D, size_t W)
{
    prtp_clear();
    if (!g)
        return prtp_fail(PRT_ERR_ARG, "%s: no CP group", who);
    if ((unsigned)form > PRT_CP_HIERARCHICAL)
        return prtp_fail(PRT_ERR_ARG, "%s: unknown cp_comm form %d", who, (int)form);
    int cp = prt_comm_size(g);
    if (!B || !Tl || !H || !Hkv || !D)
        return prtp_fail(PRT_ERR_ARG, "%s: empty shape (B %zu, Tl %zu, H %zu, Hkv %zu, D %zu)", who,
                         B, Tl, H, Hkv, D);
    if (H % Hkv)
        return prtp_fail(PRT_ERR_ARG, "%s: kv heads %zu do not divide heads %zu", who, Hkv, H);
    if (Tl % 2)
        return prtp_fail(PRT_ERR_ARG, "%s: %zu local tokens are not two equal chunks "
                         "(seq must be a multiple of 2 cp = %d)", who, Tl, 2 * cp);
    if (form == PRT_CP_ALL_TO_ALL && (H % (size_t)cp || Hkv % (size_t)cp))
        return prtp_fail(PRT_ERR_ARG, "%s: cp_comm all_to_all needs cp %d to divide this rank's "
                         "%zu query heads and %zu kv heads (use ring or all_gather)", who, cp, H, Hkv);
    size_t n, T, qkv_all, scores;   /* the largest buffers any form makes */
    if (!saved_numel(&n, form, cp, B, Tl, H, Hkv, D) || __builtin_mul_overflow(Tl, (size_t)cp, &T) ||
        !mul4(&qkv_all, B, T, H + 2 * Hkv, D) || !mul3(&scores, 2 * Tl, T, sizeof(float)) || !mul3(&scores, 2 * T, T, sizeof(float)) ||
        qkv_all > SIZE_MAX / sizeof(float) || n > SIZE_MAX / sizeof(float))
        return prtp_fail(PRT_ERR_ARG, "%s: shape too large (B %zu, T %zu, H %zu, D %zu) for size_t", who,
                         B, Tl * (size_t)cp, H, D);
    if (T > INT_MAX || (H + 2 * Hkv) * D > INT_MAX)   /* BLAS and cuBLAS take int sizes and strides */
        return prtp_fail(PRT_ERR_ARG, "%s: seq %zu or row width %zu beyond BLAS's int", who, T,
                         (H + 2 * Hkv) * D);
    *x = (Cp){
        .g = g, .form = form, .cp = cp, .r = prt_comm_rank(g),
        .rk = 1, .rn = cp, .ri = prt_comm_rank(g),
        .next = (prt_comm_rank(g) + 1) % cp, .prev = (prt_comm_rank(g) + cp - 1) % cp,
        .B = B, .Tl = Tl, .T = Tl * (size_t)cp, .C = Tl / 2, .nch = 2,
        .H = H, .Hkv = Hkv, .D = D, .W = W, .G = H / Hkv,
        .R = (H + 2 * Hkv) * D, .HD = H * D, .KV = 2 * Hkv * D,
        .scale = 1.0f / sqrtf((float)D),
    };
    return PRT_OK;
}

/* ---- buffers -------------------------------------------------------------- */

static prt_status cp_alloc(void **p, size_t n, size_t size, const char *who)
{
    *p = prt_mem_alloc(PRT_MEM_BUFFERS, (n ? n : 1) * size);
    return *p ? PRT_OK : prtp_fail(PRT_ERR_NOMEM, "%s: out of memory (%zu elements of %zu bytes)", who, n, size);
}

/* n activations (bf16 on CUDA) */
static prt_status cp_alloc_act(prt_act **p, size_t n, const char *who)
{
    return cp_alloc((void **)p, n, sizeof **p, who);
}

/* n fp32 accumulators */
static prt_status cp_alloc_f32(float **p, size_t n, const char *who)
{
    return cp_alloc((void **)p, n, sizeof **p, who);
}

/* ---- ALL_GATHER --------------------------------------------------------- */

/* Gather every rank's K, V block into kv (cp blocks of B*Tl*KV): this
 * rank's block is packed in place, so the gather is in place. */
static prt_status gather_kv(const Cp *x, prt_act *kv, const prt_act *qkv)
{
    size_t n = x->B * x->Tl * x->KV;
    prtp_cp_pack_kv(x, kv + (size_t)x->r * n, qkv);
    return prtp_check(prt_all_gather(x->g, kv + (size_t)x->r * n, kv, n, PRT_ACT), "cp all-gather of K, V");
}

static prt_status gather_fwd(const Cp *x, prt_act *out, prt_act *P_all, const prt_act *qkv)
{
    prt_act *kv;
    prt_status st = cp_alloc_act(&kv, x->B * x->T * x->KV, "cp all_gather forward");
    if (!st) st = gather_kv(x, kv, qkv);
    for (size_t b = 0; !st && b < x->B; b++)
        for (size_t h = 0; h < x->H; h++) prtp_cp_gather_head_fwd(x, b, h, out, P_all, qkv, kv);
    prt_mem_free(kv);
    return st;
}

/* The fp32 dK, dV of every block are summed over the ranks by one
 * reduce-scatter, so each rank gets its own block's, i.e. its own chunks'. */
static prt_status gather_bwd(const Cp *x, prt_act *dqkv, const prt_act *dout, const prt_act *qkv,
                             const prt_act *P_all)
{
    prt_act *kv = NULL, *dS = NULL;
    float *dkv = NULL;
    size_t n = x->B * x->Tl * x->KV;
    prt_status st = cp_alloc_act(&kv, n * (size_t)x->cp, "cp all_gather backward");
    if (!st) st = cp_alloc_f32(&dkv, n * (size_t)x->cp, "cp all_gather backward");   /* zeroed */
    if (!st) st = cp_alloc_act(&dS, x->Tl * x->T, "cp all_gather backward");
    if (!st) st = gather_kv(x, kv, qkv);
    if (!st) st = prtp_check(prt_zero(dqkv, x->B * x->Tl * x->R * sizeof *dqkv), "cp all_gather backward");
    for (size_t b = 0; !st && b < x->B; b++)
        for (size_t h = 0; h < x->H; h++)
            prtp_cp_gather_head_bwd(x, b, h, dqkv, dkv, dS, dout, qkv, P_all, kv);
    if (!st)
        st = prtp_check(prt_reduce_scatter(x->g, dkv, dkv + (size_t)x->r * n, n, PRT_FP32, PRT_SUM),
                        "cp reduce-scatter of dK, dV");
    if (!st) prtp_cp_unpack_dkv(x, dqkv, dkv + (size_t)x->r * n);
    prt_mem_free(kv);
    prt_mem_free(dkv);
    prt_mem_free(dS);
    return st;
}

/* ---- RING ----------------------------------------------------------------- */

/* The sub-block kinds of ring member owner's block (kinds: nch^2). */
static void blk_init(const Cp *x, CpBlk *k, SubKind *kinds, int owner)
{
    *k = (CpBlk){ .owner = owner, .kind = kinds };
    for (size_t qa = 0; qa < x->nch; qa++)
        for (size_t kc = 0; kc < x->nch; kc++) kinds[qa * x->nch + kc] = cp_sub_kind(x, qa, owner, kc);
}

static void blk_point(const Cp *x, CpBlk *k, size_t b, size_t h, const prt_act *qkv, const prt_act *kv)
{
    size_t g = h / x->G;
    k->Q = qkv + b * x->Tl * x->R + h * x->D;
    k->K = kv + b * x->Tl * x->KV + g * x->D;
    k->V = kv + b * x->Tl * x->KV + (x->Hkv + g) * x->D;
}

/* Post the block's send to r+1 and the receive of the next from r-1, as one
 * group (both sides issue send first: NCCL's rule); n elements of t. */
static prt_status ring_shift(const Cp *x, const void *send, void *recv, size_t n, prt_dtype t, int tag,
                             prt_request *req[2])
{
    prt_status st = prtp_check(prt_group_start(), "cp ring");
    if (!st) st = prtp_check(prt_send_async(x->g, send, n, t, x->next, tag, &req[0]), "cp ring send");
    if (!st) st = prtp_check(prt_recv_async(x->g, recv, n, t, x->prev, tag, &req[1]), "cp ring receive");
    prt_status e = prtp_check(prt_group_end(), "cp ring");
    return st ? st : e;
}

static prt_status ring_wait(prt_request *req[2])
{
    prt_status st = prtp_check(prt_wait_all(req, 2), "cp ring wait");
    req[0] = req[1] = NULL;
    return st;
}

static prt_status ring_fwd(const Cp *x, prt_act *out, float *lse, const prt_act *qkv)
{
    size_t n = x->B * x->Tl * x->KV;
    prt_act *kv = NULL, *S = NULL;
    prt_request *req[2] = { NULL, NULL };
    SubKind *kinds = malloc(x->nch * x->nch * sizeof *kinds);
    prt_status st = kinds ? PRT_OK : prtp_fail(PRT_ERR_NOMEM, "cp ring forward: out of memory");
    if (!st) st = cp_alloc_act(&kv, 2 * n, "cp ring forward");   /* the block in hand, the one arriving */
    if (!st) st = cp_alloc_act(&S, x->Tl * x->Tl, "cp ring forward");
    if (!st) prtp_cp_ring_start(x, out, lse);
    if (!st) prtp_cp_pack_kv(x, kv, qkv);
    for (int s = 0; !st && s < x->rn; s++) {
        const prt_act *cur = kv + (size_t)(s % 2) * n;
        if (s + 1 < x->rn) st = ring_shift(x, cur, kv + (size_t)((s + 1) % 2) * n, n, PRT_ACT, s, req);
        CpBlk k;
        blk_init(x, &k, kinds, (x->ri - s + x->rn) % x->rn);
        for (size_t b = 0; !st && b < x->B; b++)
            for (size_t h = 0; h < x->H; h++) {
                blk_point(x, &k, b, h, qkv, cur);
                k.out = out + b * x->Tl * x->HD + h * x->D;
                k.lse = lse + (b * x->H + h) * x->Tl;
                prtp_cp_ring_block_fwd(x, &k, S);
            }
        if (s + 1 < x->rn) {
            prt_status e = ring_wait(req);
            if (!st) st = e;
        }
    }
    prt_mem_free(kv);
    prt_mem_free(S);
    free(kinds);
    return st;
}

static prt_status ring_bwd(const Cp *x, prt_act *dqkv, const prt_act *dout, const prt_act *qkv,
                           const prt_act *out, const float *lse)
{
    size_t n = x->B * x->Tl * x->KV;
    prt_act *kv = NULL, *S = NULL;
    float *dkv = NULL;
    prt_request *req[2] = { NULL, NULL }, *dreq[2] = { NULL, NULL };
    SubKind *kinds = malloc(x->nch * x->nch * sizeof *kinds);
    prt_status st = kinds ? PRT_OK : prtp_fail(PRT_ERR_NOMEM, "cp ring backward: out of memory");
    if (!st) st = cp_alloc_act(&kv, 2 * n, "cp ring backward");
    if (!st) st = cp_alloc_f32(&dkv, 2 * n, "cp ring backward");   /* fp32 accumulators, zeroed */
    if (!st) st = cp_alloc_act(&S, 2 * x->Tl * x->Tl, "cp ring backward");   /* P and dP */
    if (!st) st = prtp_check(prt_zero(dqkv, x->B * x->Tl * x->R * sizeof *dqkv), "cp ring backward");
    if (!st) prtp_cp_pack_kv(x, kv, qkv);
    for (int s = 0; !st && s < x->rn; s++) {
        const prt_act *cur = kv + (size_t)(s % 2) * n;
        float *dcur = dkv + (size_t)(s % 2) * n;
        if (s + 1 < x->rn) st = ring_shift(x, cur, kv + (size_t)((s + 1) % 2) * n, n, PRT_ACT, 2 * s, req);
        CpBlk k;
        blk_init(x, &k, kinds, (x->ri - s + x->rn) % x->rn);
        for (size_t b = 0; !st && b < x->B; b++)
            for (size_t h = 0; h < x->H; h++) {
                size_t g = h / x->G;
                blk_point(x, &k, b, h, qkv, cur);
                k.dO = dout + b * x->Tl * x->HD + h * x->D;
                k.O = out + b * x->Tl * x->HD + h * x->D;
                k.dQ = dqkv + b * x->Tl * x->R + h * x->D;
                k.dK = dcur + b * x->Tl * x->KV + g * x->D;
                k.dV = dcur + b * x->Tl * x->KV + (x->Hkv + g) * x->D;
                k.lse = (float *)lse + (b * x->H + h) * x->Tl;
                prtp_cp_ring_block_bwd(x, &k, S, S + x->Tl * x->Tl);
            }
        if (s + 1 < x->rn) {
            prt_status e = ring_wait(req);
            if (!st) st = e;
        }
        /* dK, dV follow their block to the next member; after the last step
         * this is the extra hop that brings each member its own, complete. */
        if (!st && x->rn > 1) {
            st = ring_shift(x, dcur, dkv + (size_t)((s + 1) % 2) * n, n, PRT_FP32, 2 * s + 1, dreq);
            prt_status e = ring_wait(dreq);
            if (!st) st = e;
        }
    }
    /* a ring of 1: the block never left; else the last hop landed in buffer rn % 2 */
    if (!st) prtp_cp_unpack_dkv(x, dqkv, x->rn > 1 ? dkv + (size_t)(x->rn % 2) * n : dkv);
    prt_mem_free(kv);
    prt_mem_free(dkv);
    prt_mem_free(S);
    free(kinds);
    return st;
}

/* ---- ALL_TO_ALL and HIERARCHICAL's node all-to-all -------------------------
 * The layouts (local, blocks, joined) are cp_internal.h's. */

static Heads heads_qkv(const Cp *x, int ng, bool node)
{
    return (Heads){ .ng = ng, .node = node, .nparts = 3, .part = { x->H, x->Hkv, x->Hkv },
                    .row = x->H + 2 * x->Hkv, .rowj = (x->H + 2 * x->Hkv) / (size_t)ng };
}

static Heads heads_out(const Cp *x, int ng, bool node)
{
    return (Heads){ .ng = ng, .node = node, .nparts = 1, .part = { x->H }, .row = x->H,
                    .rowj = x->H / (size_t)ng };
}

/* The node's all-to-all of HIERARCHICAL, point to point on the CP group:
 * block j of send (n each) to the node's rank j, block j of recv from it;
 * this rank's own block is copied. */
static prt_status node_exchange(const Cp *x, const Heads *hd, const prt_act *send, prt_act *recv, size_t n,
                                const char *what)
{
    int first = x->r - x->r % hd->ng, me = x->r % hd->ng, np = 0;
    prt_request **req = calloc(2 * (size_t)hd->ng + 1, sizeof *req);
    if (!req) return prtp_fail(PRT_ERR_NOMEM, "%s: out of memory", what);
    prt_status st = prtp_check(prt_copy(recv + (size_t)me * n, send + (size_t)me * n, n * sizeof *recv), what);
    prt_status e = st ? st : prtp_check(prt_group_start(), what);
    st = e;
    for (int j = 0; !st && j < hd->ng; j++) {
        if (j == me) continue;
        st = prtp_check(prt_send_async(x->g, send + (size_t)j * n, n, PRT_ACT, first + j, 100, &req[np++]), what);
        if (!st)
            st = prtp_check(prt_recv_async(x->g, recv + (size_t)j * n, n, PRT_ACT, first + j, 100, &req[np++]),
                            what);
    }
    if (!e) {   /* a group started is ended */
        e = prtp_check(prt_group_end(), what);
        if (!st) st = e;
    }
    e = prtp_check(prt_wait_all(req, np), what);
    free(req);
    return st ? st : e;
}

/* The all-to-all itself, send (blocks by destination) -> recv (blocks by
 * source): ALL_TO_ALL's on the CP group (in place where send == recv),
 * HIERARCHICAL's over the node (send != recv). */
static prt_status exchange(const Cp *x, const Heads *hd, const prt_act *send, prt_act *recv, const char *what)
{
    size_t n = x->B * x->Tl * hd->rowj * x->D;
    if (!hd->node) return prtp_check(prt_all_to_all(x->g, send, recv, n, PRT_ACT), what);
    return node_exchange(x, hd, send, recv, n, what);
}

/* dst <- src through pack, the exchange and unpack. scratch: NULL or a
 * buffer of dst's size (HIERARCHICAL's node exchange is out of place).
 * In place (CPU): pack into scratch or dst, exchange into dst, unpack dst
 * in place. Out of place (CUDA): pack into dst, exchange into scratch (one
 * of dst's size is made where none is given), unpack into dst. */
static prt_status reorder_exchange(const Cp *x, const Heads *hd, CpMove pack, CpMove unpack, prt_act *dst,
                                   const prt_act *src, prt_act *scratch, const char *what)
{
#if CP_MOVES_IN_PLACE
    prt_act *sent = scratch ? scratch : dst;
    prt_status st = prtp_cp_move(x, hd, pack, sent, src);
    if (!st) st = exchange(x, hd, sent, dst, what);
    if (!st) st = prtp_cp_move(x, hd, unpack, dst, dst);
    return st;
#else
    prt_act *tmp = NULL;
    prt_status st = scratch ? PRT_OK : cp_alloc_act(&tmp, x->B * x->Tl * hd->row * x->D, what);
    prt_act *recv = scratch ? scratch : tmp;
    if (!st) st = prtp_cp_move(x, hd, pack, dst, src);
    if (!st) st = exchange(x, hd, dst, recv, what);
    if (!st) st = prtp_cp_move(x, hd, unpack, dst, recv);
    prt_mem_free(tmp);
    return st;
#endif
}

/* local rows (src) of this rank's tokens -> joined rows of its heads (dst). */
static prt_status to_heads(const Cp *x, const Heads *hd, prt_act *dst, const prt_act *src, prt_act *scratch,
                           const char *what)
{
    return reorder_exchange(x, hd, CP_LOCAL_TO_BLOCKS, CP_BLOCKS_TO_JOINED, dst, src, scratch, what);
}

/* joined rows of this rank's heads (src) -> local rows of its tokens (dst). */
static prt_status to_tokens(const Cp *x, const Heads *hd, prt_act *dst, const prt_act *src, prt_act *scratch,
                            const char *what)
{
    return reorder_exchange(x, hd, CP_JOINED_TO_BLOCKS, CP_BLOCKS_TO_LOCAL, dst, src, scratch, what);
}

/* The saved buffer of ALL_TO_ALL: head-split qkv, output, probabilities. */
typedef struct { prt_act *qkv, *out, *P; size_t Hq, Hk; } A2aSaved;

static A2aSaved a2a_saved(const Cp *x, const prt_act *saved)
{
    size_t Hq = x->H / (size_t)x->cp, Hk = x->Hkv / (size_t)x->cp;
    prt_act *q = (prt_act *)saved, *o = q + x->B * x->T * (Hq + 2 * Hk) * x->D;
    return (A2aSaved){ .qkv = q, .out = o, .P = o + x->B * x->T * Hq * x->D, .Hq = Hq, .Hk = Hk };
}

static prt_status a2a_fwd(const Cp *x, prt_act *out, prt_act *saved, const prt_act *qkv)
{
    A2aSaved s = a2a_saved(x, saved);
    Heads hq = heads_qkv(x, x->cp, false), ho = heads_out(x, x->cp, false);
    prt_status st = to_heads(x, &hq, s.qkv, qkv, NULL, "cp all-to-all of qkv");
    if (!st) prt_attention_fwd(s.out, s.P, s.qkv, x->B, x->T, s.Hq, s.Hk, x->D, x->W);
    if (!st) st = to_tokens(x, &ho, out, s.out, NULL, "cp all-to-all of the output");
    return st;
}

/* The output gradient's exchange runs before the qkv and score gradients
 * exist, and they are freed before the qkv gradient's: an out-of-place
 * exchange's buffer (CUDA) never meets all three. */
static prt_status a2a_bwd(const Cp *x, prt_act *dqkv, const prt_act *dout, const prt_act *saved)
{
    A2aSaved s = a2a_saved(x, saved);
    Heads hq = heads_qkv(x, x->cp, false), ho = heads_out(x, x->cp, false);
    prt_act *dq = NULL, *dO = NULL, *dP = NULL;
    prt_status st = cp_alloc_act(&dO, x->B * x->T * s.Hq * x->D, "cp all_to_all backward");
    if (!st) st = to_heads(x, &ho, dO, dout, NULL, "cp all-to-all of the output gradient");
    if (!st) st = cp_alloc_act(&dq, x->B * x->T * (s.Hq + 2 * s.Hk) * x->D, "cp all_to_all backward");
    if (!st) st = cp_alloc_act(&dP, x->B * s.Hq * x->T * x->T, "cp all_to_all backward");
    if (!st) prt_attention_bwd(dq, dP, dO, s.qkv, s.P, false, x->B, x->T, s.Hq, s.Hk, x->D, x->W);
    prt_mem_free(dP);
    prt_mem_free(dO);
    if (!st) st = to_tokens(x, &hq, dqkv, dq, NULL, "cp all-to-all of the qkv gradient");
    prt_mem_free(dq);
    return st;
}

/* ---- HIERARCHICAL ------------------------------------------------------------
 * A node is rk consecutive CP ranks on one host (the ranks with CP rank
 * 0's processor name, MPI_Get_processor_name: the host MPI_COMM_TYPE_SHARED
 * groups by; PLANRT_CP_NODE_RANKS=k pretends nodes of k ranks, for tests). The node's all-to-all gives each of its ranks H/rk
 * query and Hkv/rk kv heads of the node's rk Tl tokens; the ring then runs
 * over the cp/rk nodes (rank l of each node with rank l of the others:
 * CP ranks r +- rk), each ring block the node's 2 rk chunks; the output
 * goes back through the node's all-to-all. Megatron-Core / Transformer
 * Engine's cp_comm_type "a2a+p2p" (Transformer Engine,
 * transformer_engine/pytorch/attention/dot_product_attention/
 * context_parallel.py, AttnFuncWithCPAndKVP2P with cp_group a list of the
 * a2a and the p2p group). */

/* The processor name of every CP rank (an all-reduce of slots: the others'
 * are zero), then the nodes: equal blocks of consecutive ranks. */
static prt_status node_ranks_found(const Cp *x, int *k)
{
    enum { W32 = (MPI_MAX_PROCESSOR_NAME + 4) / 4 };
    int32_t *names = calloc((size_t)x->cp * W32, sizeof *names);
    if (!names) return prtp_fail(PRT_ERR_NOMEM, "cp_comm hierarchical: out of memory");
    char me[MPI_MAX_PROCESSOR_NAME + 4] = { 0 };
    int len = 0;
    MPI_Get_processor_name(me, &len);
    memcpy(names + (size_t)x->r * W32, me, sizeof me < W32 * 4 ? sizeof me : W32 * 4);
    prt_status st = prtp_check(prtp_all_reduce_host(x->g, names, (size_t)x->cp * W32, PRT_INT32, PRT_SUM),
                               "cp_comm hierarchical: the nodes' names");
    int n = 0;   /* CP rank 0's node: every rank decides alike */
    for (int j = 0; !st && j < x->cp; j++)
        n += !memcmp(names + (size_t)j * W32, names, W32 * 4);
    for (int j = 0; !st && n > 0 && j < x->cp; j++)
        if (memcmp(names + (size_t)j * W32, names + (size_t)(j - j % n) * W32, W32 * 4) ||
            x->cp % n)
            st = prtp_fail(PRT_ERR_ARG, "cp_comm hierarchical: the CP group's ranks are not in nodes of "
                           "%d consecutive ranks (CP rank %d)", n, j);
    free(names);
    *k = n;
    return st;
}

/* The CP ranks of a node: PLANRT_CP_NODE_RANKS or the hosts'. */
static prt_status node_ranks(const Cp *x, int *k)
{
    const char *env = getenv("PLANRT_CP_NODE_RANKS");
    if (!env || !*env) return node_ranks_found(x, k);
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 1 || v > x->cp || x->cp % v)
        return prtp_fail(PRT_ERR_ARG, "PLANRT_CP_NODE_RANKS=%s: want a number of CP ranks per node that "
                         "divides cp %d", env, x->cp);
    *k = (int)v;
    return PRT_OK;
}

/* Check the heads split over a node and make the ring's shapes: a member
 * is a node, its block the node's k Tl tokens of this rank's heads. */
static prt_status hier_setup(const Cp *x, int *k, Cp *ring)
{
    prt_status st = node_ranks(x, k);
    if (st) return st;
    if (x->H % (size_t)*k || x->Hkv % (size_t)*k)
        return prtp_fail(PRT_ERR_ARG, "cp_comm hierarchical: the %d CP ranks of a node must divide this "
                         "rank's %zu query heads and %zu kv heads (use ring)", *k, x->H, x->Hkv);
    size_t H = x->H / (size_t)*k, Hkv = x->Hkv / (size_t)*k;
    int rn = x->cp / *k, ri = x->r / *k, l = x->r % *k;
    *ring = *x;
    ring->rk = *k;
    ring->rn = rn;
    ring->ri = ri;
    ring->next = ((ri + 1) % rn) * *k + l;
    ring->prev = ((ri + rn - 1) % rn) * *k + l;
    ring->Tl = x->Tl * (size_t)*k;
    ring->nch = 2 * (size_t)*k;
    ring->H = H;
    ring->Hkv = Hkv;
    ring->R = (H + 2 * Hkv) * x->D;
    ring->HD = H * x->D;
    ring->KV = 2 * Hkv * x->D;
    return PRT_OK;
}

/* The saved buffer of HIERARCHICAL: the node's head-split qkv and output
 * (B, k Tl, (H+2Hkv)/k D) and (B, k Tl, H/k D), then the ring's
 * log-sum-exp (B, H/k, k Tl). */
typedef struct { prt_act *qkv, *out; float *lse; } HierSaved;

/* (the lse's offset is even: Tl is, so it is 4-byte aligned in a bf16 buffer) */
static HierSaved hier_saved(const Cp *x, prt_act *saved)
{
    prt_act *o = saved + x->B * x->Tl * x->R;
    return (HierSaved){ .qkv = saved, .out = o, .lse = (float *)(o + x->B * x->Tl * x->HD) };
}

static prt_status hier_fwd(const Cp *x, prt_act *out, prt_act *saved, const prt_act *qkv)
{
    int k;
    Cp ring;
    prt_status st = hier_setup(x, &k, &ring);
    if (st) return st;
    HierSaved s = hier_saved(x, saved);
    Heads hq = heads_qkv(x, k, true), ho = heads_out(x, k, true);
    prt_act *scratch = NULL;
    st = cp_alloc_act(&scratch, x->B * x->Tl * x->R, "cp hierarchical forward");
    if (!st) st = to_heads(x, &hq, s.qkv, qkv, scratch, "cp hierarchical: the node's all-to-all of qkv");
    prt_mem_free(scratch);
    if (!st) st = ring_fwd(&ring, s.out, s.lse, s.qkv);
    scratch = NULL;
    if (!st) st = cp_alloc_act(&scratch, x->B * x->Tl * x->HD, "cp hierarchical forward");
    if (!st) st = to_tokens(x, &ho, out, s.out, scratch, "cp hierarchical: the node's all-to-all of the output");
    prt_mem_free(scratch);
    return st;
}

static prt_status hier_bwd(const Cp *x, prt_act *dqkv, const prt_act *dout, const prt_act *saved)
{
    int k;
    Cp ring;
    prt_status st = hier_setup(x, &k, &ring);
    if (st) return st;
    HierSaved s = hier_saved(x, (prt_act *)saved);
    Heads hq = heads_qkv(x, k, true), ho = heads_out(x, k, true);
    prt_act *dO = NULL, *dq = NULL, *scratch = NULL;
    const char *who = "cp hierarchical backward";
    st = cp_alloc_act(&dO, x->B * x->Tl * x->HD, who);
    if (!st) st = cp_alloc_act(&scratch, x->B * x->Tl * x->HD, who);
    if (!st) st = to_heads(x, &ho, dO, dout, scratch, "cp hierarchical: the node's all-to-all of the output gradient");
    prt_mem_free(scratch);
    scratch = NULL;
    if (!st) st = cp_alloc_act(&dq, x->B * x->Tl * x->R, who);
    if (!st) st = ring_bwd(&ring, dq, dO, s.qkv, s.out, s.lse);
    prt_mem_free(dO);
    if (!st) st = cp_alloc_act(&scratch, x->B * x->Tl * x->R, who);
    if (!st) st = to_tokens(x, &hq, dqkv, dq, scratch, "cp hierarchical: the node's all-to-all of the qkv gradient");
    prt_mem_free(scratch);
    prt_mem_free(dq);
    return st;
}

prt_status prt_cp_attention_fwd(prt_comm *cp, prt_cp_form form, prt_act *out, prt_act *saved,
                                const prt_act *qkv, size_t B, size_t Tl, size_t H, size_t Hkv,
                                size_t D, size_t W)
{
    Cp x;
    prt_status st = cp_setup(&x, "prt_cp_attention_fwd", cp, form, B, Tl, H, Hkv, D, W);
    if (st) return st;
    switch (form) {
    case PRT_CP_RING: return ring_fwd(&x, out, (float *)saved, qkv);
    case PRT_CP_ALL_TO_ALL: return a2a_fwd(&x, out, saved, qkv);
    case PRT_CP_ALL_GATHER: return gather_fwd(&x, out, saved, qkv);
    case PRT_CP_HIERARCHICAL: return hier_fwd(&x, out, saved, qkv);
    }
    return prtp_fail(PRT_ERR_ARG, "prt_cp_attention_fwd: cp_comm %s not handled", form_name(form));
}

prt_status prt_cp_attention_bwd(prt_comm *cp, prt_cp_form form, prt_act *dqkv, const prt_act *dout,
                                const prt_act *qkv, const prt_act *out, const prt_act *saved,
                                size_t B, size_t Tl, size_t H, size_t Hkv, size_t D, size_t W)
{
    Cp x;
    prt_status st = cp_setup(&x, "prt_cp_attention_bwd", cp, form, B, Tl, H, Hkv, D, W);
    if (st) return st;
    switch (form) {
    case PRT_CP_RING: return ring_bwd(&x, dqkv, dout, qkv, out, (const float *)saved);
    case PRT_CP_ALL_TO_ALL: (void)qkv; (void)out; return a2a_bwd(&x, dqkv, dout, saved);
    case PRT_CP_ALL_GATHER: (void)out; return gather_bwd(&x, dqkv, dout, qkv, saved);
    case PRT_CP_HIERARCHICAL: return hier_bwd(&x, dqkv, dout, saved);
    }
    return prtp_fail(PRT_ERR_ARG, "prt_cp_attention_bwd: cp_comm %s not handled", form_name(form));
}
