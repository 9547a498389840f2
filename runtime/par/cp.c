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
 * The CUDA build compiles this file for the argument checks and the saved
 * sizes; its forward and backward refuse (PRT_ERR_ARG) until the device
 * kernels exist.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "par_internal.h"

#ifndef PRT_CUDA
#include <cblas.h>
#endif

/* One call's shapes; sizes in elements. */
typedef struct {
    prt_comm   *g;
    prt_cp_form form;
    int         cp, r;             /* CP group size, this rank in it */
    /* The ring: rn members of rk consecutive CP ranks each (RING: rk 1;
     * HIERARCHICAL: a node's ranks, whose tokens the node's all-to-all
     * joined), this rank's member ri, and the CP ranks it sends to, takes from */
    int         rk, rn, ri, next, prev;
    size_t      B, Tl, T, C;       /* sequences, tokens of a ring member (plain forms: the
                                      local tokens), global tokens, chunk T / (2 cp) */
    size_t      nch;               /* chunks of a ring member's tokens: 2 rk */
    size_t      H, Hkv, D, W, G;   /* heads, kv heads, head size, window, group H / Hkv */
    size_t      R, HD, KV;         /* row widths: qkv (H+2Hkv)D, out HD, K|V block 2 Hkv D */
    float       scale;             /* 1 / sqrt(D) */
} Cp;

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
    case PRT_CP_RING:         /* log-sum-exp per (b, h, query row) */
        return mul3(out, B, H, Tl);
    case PRT_CP_ALL_GATHER:   /* probabilities (B, H, Tl, T) */
        return mul4(out, B, H, Tl, T);
    case PRT_CP_ALL_TO_ALL:   /* head-split qkv, head-split output, probabilities */
        if (H % (size_t)cp || Hkv % (size_t)cp) return false;
        return mul4(&a, B, T, H / (size_t)cp + 2 * (Hkv / (size_t)cp), D) &&
               mul4(&b, B, T, H / (size_t)cp, D) && mul4(&c, B, H / (size_t)cp, T, T) &&
               !__builtin_add_overflow(a, b, out) && !__builtin_add_overflow(*out, c, out);
    case PRT_CP_HIERARCHICAL: /* the node's head-split qkv and output, the ring's lse */
        return mul4(&a, B, Tl, H + 2 * Hkv, D) && mul4(&b, B, Tl, H, D) && mul3(&c, B, H, Tl) &&
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
#ifdef PRT_CUDA
    return prtp_fail(PRT_ERR_ARG, "context parallelism: not in the CUDA build yet (%s, cp_comm %s)",
                     who, form_name(form));
#endif
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
    if (T > INT_MAX || (H + 2 * Hkv) * D > INT_MAX)   /* BLAS takes int sizes and strides */
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

#ifndef PRT_CUDA

/* ---- positions and masks ---------------------------------------------- */

/* Global chunk index of chunk a (0 .. nch-1) of ring member m: its CP rank
 * m rk + a / 2 holds chunks cr and 2cp-1-cr (prt_cp_pos). */
static size_t chunk_of(const Cp *x, int m, size_t a)
{
    size_t cr = (size_t)m * (size_t)x->rk + a / 2;
    return a % 2 == 0 ? cr : 2 * (size_t)x->cp - 1 - cr;
}

/* Global position of token t of ring member m (with rk 1: prt_cp_pos). */
static size_t pos_of(const Cp *x, int m, size_t t)
{
    return chunk_of(x, m, t / x->C) * x->C + t % x->C;
}

/* The keys of a chunk (C tokens from position k0) that query position q
 * sees: [lo, hi) of the chunk, a range since a chunk's positions are
 * consecutive (the mask rule of prt_window_first: k <= q, k > q - W). */
static void seen_cols(const Cp *x, size_t q, size_t k0, size_t *lo, size_t *hi)
{
    size_t first = prt_window_first(q, x->W);
    size_t b = q >= k0 ? prtp_min(q - k0 + 1, x->C) : 0;
    size_t a = first > k0 ? prtp_min(first - k0, b) : 0;
    *lo = a;
    *hi = b;
}

/* One row's chunk of scores s (C of them): masked columns 0, seen ones
 * exp(s - M); returns their sum. */
static float exp_chunk(float *s, size_t C, size_t lo, size_t hi, float M)
{
    float sum = 0.0f;
    for (size_t j = 0; j < lo; j++) s[j] = 0.0f;
    for (size_t j = lo; j < hi; j++) sum += s[j] = expf(s[j] - M);
    for (size_t j = hi; j < C; j++) s[j] = 0.0f;
    return sum;
}

static float max_chunk(const float *s, size_t lo, size_t hi, float m)
{
    for (size_t j = lo; j < hi; j++) m = fmaxf(m, s[j]);
    return m;
}

/* ---- K, V blocks: (B, Tl, 2 Hkv D), per row the K heads then the V heads */

static void pack_kv(const Cp *x, float *kv, const float *qkv)
{
    for (size_t i = 0; i < x->B * x->Tl; i++)
        memcpy(kv + i * x->KV, qkv + i * x->R + x->HD, x->KV * sizeof *kv);
}

static void unpack_dkv(const Cp *x, float *dqkv, const float *dkv)
{
    for (size_t i = 0; i < x->B * x->Tl; i++)
        memcpy(dqkv + i * x->R + x->HD, dkv + i * x->KV, x->KV * sizeof *dkv);
}

static prt_status cp_alloc(float **p, size_t n, const char *who)
{
    *p = prt_mem_alloc(PRT_MEM_BUFFERS, (n ? n : 1) * sizeof **p);
    return *p ? PRT_OK : prtp_fail(PRT_ERR_NOMEM, "%s: out of memory (%zu floats)", who, n);
}

/* ---- ALL_GATHER --------------------------------------------------------- */

/* Gather every rank's K, V block into kv (cp blocks of B*Tl*KV): this
 * rank's block is packed in place, so the gather is in place. */
static prt_status gather_kv(const Cp *x, float *kv, const float *qkv)
{
    size_t n = x->B * x->Tl * x->KV;
    pack_kv(x, kv + (size_t)x->r * n, qkv);
    return prtp_check(prt_all_gather(x->g, kv + (size_t)x->r * n, kv, n, PRT_ACT), "cp all-gather of K, V");
}

/* K (or V, off = Hkv D) of kv head g, sequence b, rank block s. */
static const float *kv_at(const Cp *x, const float *kv, int s, size_t b, size_t off)
{
    return kv + ((size_t)s * x->B + b) * x->Tl * x->KV + off;
}

/* Masked softmax of one (b, h)'s rows P (Tl, T) over the gathered keys:
 * column chunk cc is chunk cc % 2 of rank cc / 2. */
static void gathered_softmax(const Cp *x, float *P)
{
    size_t nc = 2 * (size_t)x->cp, lo, hi;
    for (size_t i = 0; i < x->Tl; i++) {
        float *p = P + i * x->T, m = -INFINITY, sum = 0.0f;
        size_t q = pos_of(x, x->r, i);
        for (size_t cc = 0; cc < nc; cc++) {
            seen_cols(x, q, chunk_of(x, (int)(cc / 2), cc % 2) * x->C, &lo, &hi);
            m = max_chunk(p + cc * x->C, lo, hi, m);
        }
        for (size_t cc = 0; cc < nc; cc++) {
            seen_cols(x, q, chunk_of(x, (int)(cc / 2), cc % 2) * x->C, &lo, &hi);
            sum += exp_chunk(p + cc * x->C, x->C, lo, hi, m);
        }
        float inv = 1.0f / sum;   /* the diagonal key is always seen: sum >= exp(0) */
        for (size_t c = 0; c < x->T; c++) p[c] *= inv;
    }
}

static prt_status gather_fwd(const Cp *x, float *out, float *P_all, const float *qkv)
{
    float *kv;
    prt_status st = cp_alloc(&kv, x->B * x->T * x->KV, "cp all_gather forward");
    if (!st) st = gather_kv(x, kv, qkv);
    int Tl = (int)x->Tl, T = (int)x->T, D = (int)x->D, R = (int)x->R, KV = (int)x->KV;
    for (size_t b = 0; !st && b < x->B; b++)
        for (size_t h = 0; h < x->H; h++) {
            size_t g = h / x->G;
            const float *Q = qkv + b * x->Tl * x->R + h * x->D;
            float *P = P_all + (b * x->H + h) * x->Tl * x->T, *O = out + b * x->Tl * x->HD + h * x->D;
            for (int s = 0; s < x->cp; s++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tl, Tl, D, x->scale, Q, R,
                            kv_at(x, kv, s, b, g * x->D), KV, 0.0f, P + (size_t)s * x->Tl, T);
            gathered_softmax(x, P);
            for (int s = 0; s < x->cp; s++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tl, D, Tl, 1.0f,
                            P + (size_t)s * x->Tl, T, kv_at(x, kv, s, b, (x->Hkv + g) * x->D), KV,
                            s ? 1.0f : 0.0f, O, (int)x->HD);
        }
    prt_mem_free(kv);
    return st;
}

static prt_status gather_bwd(const Cp *x, float *dqkv, const float *dout, const float *qkv,
                             const float *P_all)
{
    float *kv = NULL, *dkv = NULL, *dS = NULL;
    size_t n = x->B * x->Tl * x->KV;
    prt_status st = cp_alloc(&kv, n * (size_t)x->cp, "cp all_gather backward");
    if (!st) st = cp_alloc(&dkv, n * (size_t)x->cp, "cp all_gather backward");
    if (!st) st = cp_alloc(&dS, x->Tl * x->T, "cp all_gather backward");
    if (!st) st = gather_kv(x, kv, qkv);
    memset(dqkv, 0, x->B * x->Tl * x->R * sizeof *dqkv);
    int Tl = (int)x->Tl, T = (int)x->T, D = (int)x->D, R = (int)x->R, KV = (int)x->KV, HD = (int)x->HD;
    for (size_t b = 0; !st && b < x->B; b++)
        for (size_t h = 0; h < x->H; h++) {
            size_t g = h / x->G, ko = g * x->D, vo = (x->Hkv + g) * x->D;
            const float *Q = qkv + b * x->Tl * x->R + h * x->D, *dO = dout + b * x->Tl * x->HD + h * x->D;
            const float *P = P_all + (b * x->H + h) * x->Tl * x->T;
            float *dQ = dqkv + b * x->Tl * x->R + h * x->D;
            for (int s = 0; s < x->cp; s++)   /* dP = dO V^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tl, Tl, D, 1.0f, dO, HD,
                            kv_at(x, kv, s, b, vo), KV, 0.0f, dS + (size_t)s * x->Tl, T);
            for (size_t i = 0; i < x->Tl; i++) {   /* dS = P (dP - rowsum(P dP)) / sqrt(D) */
                float *d = dS + i * x->T, dot = 0.0f;
                const float *p = P + i * x->T;
                for (size_t c = 0; c < x->T; c++) dot += p[c] * d[c];
                for (size_t c = 0; c < x->T; c++) d[c] = p[c] * (d[c] - dot) * x->scale;
            }
            for (int s = 0; s < x->cp; s++) {
                const float *dSs = dS + (size_t)s * x->Tl, *Ps = P + (size_t)s * x->Tl;
                float *dK = dkv + ((size_t)s * x->B + b) * x->Tl * x->KV;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tl, D, Tl, 1.0f, dSs, T,
                            kv_at(x, kv, s, b, ko), KV, 1.0f, dQ, R);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tl, D, Tl, 1.0f, dSs, T, Q, R,
                            1.0f, dK + ko, KV);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tl, D, Tl, 1.0f, Ps, T, dO, HD,
                            1.0f, dK + vo, KV);
            }
        }
    /* every rank's contributions to block r summed into block r: its own chunks */
    if (!st)
        st = prtp_check(prt_reduce_scatter(x->g, dkv, dkv + (size_t)x->r * n, n, PRT_ACT, PRT_SUM),
                        "cp reduce-scatter of dK, dV");
    if (!st) unpack_dkv(x, dqkv, dkv + (size_t)x->r * n);
    prt_mem_free(kv);
    prt_mem_free(dkv);
    prt_mem_free(dS);
    return st;
}

/* ---- RING ----------------------------------------------------------------- */

/* How a (query chunk, key chunk) sub-block is seen. */
typedef enum { SUB_SKIP, SUB_FULL, SUB_MASKED } SubKind;

static SubKind sub_kind(const Cp *x, size_t qa, int owner, size_t kc)
{
    size_t q0 = chunk_of(x, x->ri, qa) * x->C, q1 = q0 + x->C - 1;
    size_t k0 = chunk_of(x, owner, kc) * x->C, k1 = k0 + x->C - 1;
    if (k0 > q1 || (x->W && k1 + x->W <= q0)) return SUB_SKIP;   /* all future, or all too old */
    if (k1 <= q0 && (x->W == 0 || k0 + x->W > q1)) return SUB_FULL;
    return SUB_MASKED;
}

/* The pointers of one (b, h) against one KV block. */
typedef struct {
    const float *Q, *K, *V;   /* ld R, KV, KV */
    const float *dO, *O;      /* ld HD */
    float       *out, *dQ;    /* ld HD, R */
    float       *dK, *dV;     /* ld KV */
    float       *lse;         /* Tl */
    SubKind     *kind;        /* (nch, nch): [query chunk][key chunk] */
    int          owner;
} Blk;

/* S[qa][kc] = A_qa B_kc^T * alpha (C x C sub-blocks of the (Tl, Tl) S) for
 * the sub-blocks not skipped. */
static void sub_gemm_abt(const Cp *x, const Blk *k, float *S, float alpha, const float *A, int lda,
                         const float *Bm, int ldb)
{
    int C = (int)x->C;
    for (size_t qa = 0; qa < x->nch; qa++)
        for (size_t kc = 0; kc < x->nch; kc++)
            if (k->kind[qa * x->nch + kc] != SUB_SKIP)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, C, C, (int)x->D, alpha,
                            A + (size_t)qa * x->C * (size_t)lda, lda, Bm + (size_t)kc * x->C * (size_t)ldb,
                            ldb, 0.0f, S + (size_t)qa * x->C * x->Tl + (size_t)kc * x->C, (int)x->Tl);
}

/* The columns [lo, hi) of key chunk kc that row i sees; a skipped
 * sub-block (whose scores were never computed) gives false. */
static bool blk_cols(const Cp *x, const Blk *k, size_t i, size_t kc, size_t *lo, size_t *hi)
{
    SubKind s = k->kind[(i / x->C) * x->nch + kc];
    if (s == SUB_SKIP) return false;
    if (s == SUB_FULL) {   /* wholly seen: no mask */
        *lo = 0;
        *hi = x->C;
    } else {
        seen_cols(x, pos_of(x, x->ri, i), chunk_of(x, k->owner, kc) * x->C, lo, hi);
    }
    return true;
}

/* Online-softmax merge of one block into the normalised output rows and
 * their log-sum-exp (see the top of the file); S becomes P / tot. */
static void ring_merge_rows(const Cp *x, const Blk *k, float *S)
{
    size_t lo, hi;
    for (size_t i = 0; i < x->Tl; i++) {
        float *s = S + i * x->Tl, mb = -INFINITY, L = k->lse[i], sum = 0.0f;
        for (size_t kc = 0; kc < x->nch; kc++)
            if (blk_cols(x, k, i, kc, &lo, &hi)) mb = max_chunk(s + kc * x->C, lo, hi, mb);
        if (mb == -INFINITY) {   /* nothing of this block is seen by row i */
            memset(s, 0, x->Tl * sizeof *s);
            continue;
        }
        float M = fmaxf(L, mb);
        for (size_t kc = 0; kc < x->nch; kc++)
            if (blk_cols(x, k, i, kc, &lo, &hi)) sum += exp_chunk(s + kc * x->C, x->C, lo, hi, M);
        float old = expf(L - M), tot = old + sum, inv = 1.0f / tot;   /* L -inf: old 0 */
        for (size_t j = 0; j < x->Tl; j++) s[j] *= inv;
        float *o = k->out + i * x->HD;
        for (size_t d = 0; d < x->D; d++) o[d] *= old * inv;
        k->lse[i] = M + logf(tot);
    }
}

static void ring_block_fwd(const Cp *x, Blk *k, float *S)
{
    int C = (int)x->C, D = (int)x->D;
    sub_gemm_abt(x, k, S, x->scale, k->Q, (int)x->R, k->K, (int)x->KV);
    ring_merge_rows(x, k, S);
    for (size_t qa = 0; qa < x->nch; qa++)   /* O_qa += P_qa,kc V_kc */
        for (size_t kc = 0; kc < x->nch; kc++)
            if (k->kind[qa * x->nch + kc] != SUB_SKIP)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, D, C, 1.0f,
                            S + (size_t)qa * x->C * x->Tl + (size_t)kc * x->C, (int)x->Tl,
                            k->V + (size_t)kc * x->C * x->KV, (int)x->KV, 1.0f,
                            k->out + (size_t)qa * x->C * x->HD, (int)x->HD);
}

/* P = exp(S - L) and dS = P (dP - rowsum(dO O)) / sqrt(D), in place over
 * S and dP; entries not seen are exact zeros in both. */
static void ring_softmax_bwd(const Cp *x, const Blk *k, float *S, float *dP)
{
    size_t lo, hi;
    for (size_t i = 0; i < x->Tl; i++) {
        const float *o = k->O + i * x->HD, *dO = k->dO + i * x->HD;
        float rs = 0.0f, L = k->lse[i];
        for (size_t e = 0; e < x->D; e++) rs += dO[e] * o[e];
        for (size_t kc = 0; kc < x->nch; kc++) {
            if (!blk_cols(x, k, i, kc, &lo, &hi)) continue;   /* skipped: never read */
            float *s = S + i * x->Tl + kc * x->C, *d = dP + i * x->Tl + kc * x->C;
            exp_chunk(s, x->C, lo, hi, L);
            for (size_t j = 0; j < x->C; j++) d[j] = s[j] * (d[j] - rs) * x->scale;
        }
    }
}

static void ring_block_bwd(const Cp *x, Blk *k, float *S, float *dP)
{
    int C = (int)x->C, D = (int)x->D, R = (int)x->R, KV = (int)x->KV, HD = (int)x->HD, Tl = (int)x->Tl;
    sub_gemm_abt(x, k, S, x->scale, k->Q, R, k->K, KV);
    sub_gemm_abt(x, k, dP, 1.0f, k->dO, HD, k->V, KV);
    ring_softmax_bwd(x, k, S, dP);
    for (size_t qa = 0; qa < x->nch; qa++)
        for (size_t kc = 0; kc < x->nch; kc++) {
            if (k->kind[qa * x->nch + kc] == SUB_SKIP) continue;
            size_t so = (size_t)qa * x->C * x->Tl + (size_t)kc * x->C;
            size_t qo = (size_t)qa * x->C, ko = (size_t)kc * x->C;
            /* dQ += dS K, dK += dS^T Q, dV += P^T dO */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, D, C, 1.0f, dP + so, Tl,
                        k->K + ko * x->KV, KV, 1.0f, k->dQ + qo * x->R, R);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, D, C, 1.0f, dP + so, Tl,
                        k->Q + qo * x->R, R, 1.0f, k->dK + ko * x->KV, KV);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, D, C, 1.0f, S + so, Tl,
                        k->dO + qo * x->HD, HD, 1.0f, k->dV + ko * x->KV, KV);
        }
}

/* The sub-block kinds of ring member owner's block (kinds: nch^2). */
static void blk_init(const Cp *x, Blk *k, SubKind *kinds, int owner)
{
    *k = (Blk){ .owner = owner, .kind = kinds };
    for (size_t qa = 0; qa < x->nch; qa++)
        for (size_t kc = 0; kc < x->nch; kc++) kinds[qa * x->nch + kc] = sub_kind(x, qa, owner, kc);
}

static void blk_point(const Cp *x, Blk *k, size_t b, size_t h, const float *qkv, const float *kv)
{
    size_t g = h / x->G;
    k->Q = qkv + b * x->Tl * x->R + h * x->D;
    k->K = kv + b * x->Tl * x->KV + g * x->D;
    k->V = kv + b * x->Tl * x->KV + (x->Hkv + g) * x->D;
}

/* Post the block's send to r+1 and the receive of the next from r-1, as one
 * group (both sides issue send first: NCCL's rule). */
static prt_status ring_shift(const Cp *x, const float *send, float *recv, size_t n, int tag,
                             prt_request *req[2])
{
    prt_status st = prtp_check(prt_group_start(), "cp ring");
    if (!st) st = prtp_check(prt_send_async(x->g, send, n, PRT_ACT, x->next, tag, &req[0]), "cp ring send");
    if (!st) st = prtp_check(prt_recv_async(x->g, recv, n, PRT_ACT, x->prev, tag, &req[1]), "cp ring receive");
    prt_status e = prtp_check(prt_group_end(), "cp ring");
    return st ? st : e;
}

static prt_status ring_wait(prt_request *req[2])
{
    prt_status st = prtp_check(prt_wait_all(req, 2), "cp ring wait");
    req[0] = req[1] = NULL;
    return st;
}

static prt_status ring_fwd(const Cp *x, float *out, float *lse, const float *qkv)
{
    size_t n = x->B * x->Tl * x->KV;
    float *kv = NULL, *S = NULL;
    prt_request *req[2] = { NULL, NULL };
    SubKind *kinds = malloc(x->nch * x->nch * sizeof *kinds);
    prt_status st = kinds ? PRT_OK : prtp_fail(PRT_ERR_NOMEM, "cp ring forward: out of memory");
    if (!st) st = cp_alloc(&kv, 2 * n, "cp ring forward");   /* the block in hand, the one arriving */
    if (!st) st = cp_alloc(&S, x->Tl * x->Tl, "cp ring forward");
    memset(out, 0, x->B * x->Tl * x->HD * sizeof *out);
    for (size_t i = 0; i < x->B * x->H * x->Tl; i++) lse[i] = -INFINITY;
    if (!st) pack_kv(x, kv, qkv);
    for (int s = 0; !st && s < x->rn; s++) {
        const float *cur = kv + (size_t)(s % 2) * n;
        if (s + 1 < x->rn) st = ring_shift(x, cur, kv + (size_t)((s + 1) % 2) * n, n, s, req);
        Blk k;
        blk_init(x, &k, kinds, (x->ri - s + x->rn) % x->rn);
        for (size_t b = 0; !st && b < x->B; b++)
            for (size_t h = 0; h < x->H; h++) {
                blk_point(x, &k, b, h, qkv, cur);
                k.out = out + b * x->Tl * x->HD + h * x->D;
                k.lse = lse + (b * x->H + h) * x->Tl;
                ring_block_fwd(x, &k, S);
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

static prt_status ring_bwd(const Cp *x, float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse)
{
    size_t n = x->B * x->Tl * x->KV;
    float *kv = NULL, *dkv = NULL, *S = NULL;
    prt_request *req[2] = { NULL, NULL }, *dreq[2] = { NULL, NULL };
    SubKind *kinds = malloc(x->nch * x->nch * sizeof *kinds);
    prt_status st = kinds ? PRT_OK : prtp_fail(PRT_ERR_NOMEM, "cp ring backward: out of memory");
    if (!st) st = cp_alloc(&kv, 2 * n, "cp ring backward");
    if (!st) st = cp_alloc(&dkv, 2 * n, "cp ring backward");   /* fp32 accumulators, zeroed */
    if (!st) st = cp_alloc(&S, 2 * x->Tl * x->Tl, "cp ring backward");   /* P and dP */
    memset(dqkv, 0, x->B * x->Tl * x->R * sizeof *dqkv);
    if (!st) pack_kv(x, kv, qkv);
    for (int s = 0; !st && s < x->rn; s++) {
        const float *cur = kv + (size_t)(s % 2) * n;
        float *dcur = dkv + (size_t)(s % 2) * n;
        if (s + 1 < x->rn) st = ring_shift(x, cur, kv + (size_t)((s + 1) % 2) * n, n, 2 * s, req);
        Blk k;
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
                ring_block_bwd(x, &k, S, S + x->Tl * x->Tl);
            }
        if (s + 1 < x->rn) {
            prt_status e = ring_wait(req);
            if (!st) st = e;
        }
        /* dK, dV follow their block to the next member; after the last step
         * this is the extra hop that brings each member its own, complete. */
        if (!st && x->rn > 1) {
            st = ring_shift(x, dcur, dkv + (size_t)((s + 1) % 2) * n, n, 2 * s + 1, dreq);
            prt_status e = ring_wait(dreq);
            if (!st) st = e;
        }
    }
    /* a ring of 1: the block never left; else the last hop landed in buffer rn % 2 */
    if (!st) unpack_dkv(x, dqkv, x->rn > 1 ? dkv + (size_t)(x->rn % 2) * n : dkv);
    prt_mem_free(kv);
    prt_mem_free(dkv);
    prt_mem_free(S);
    free(kinds);
    return st;
}

/* ---- ALL_TO_ALL and HIERARCHICAL's node all-to-all -------------------------
 * An all-to-all over ng ranks (ALL_TO_ALL: the CP group; HIERARCHICAL: the
 * node's rk consecutive CP ranks) trades the local tokens of every head for
 * all the group's tokens of 1/ng of the heads. Three layouts of D-element
 * units (one head of one token):
 *   local  (B, Tl, heads):        per token the parts' heads, all ranks' (qkv:
 *                                 H query, Hkv key, Hkv value; out: H)
 *   blocks (ng, B, Tl, heads/ng): block j for / from group rank j, per token
 *                                 its parts' heads [j h/ng, (j+1) h/ng)
 *   joined (B, ng Tl, heads/ng):  this rank's heads, every group rank's
 *                                 tokens: in global order (ALL_TO_ALL), or
 *                                 group rank by group rank (a node's ring
 *                                 block, HIERARCHICAL)
 * The send layout is `blocks` by destination; what arrives is `blocks` by
 * source. */
typedef struct {
    int    ng;         /* ranks of the all-to-all */
    bool   node;       /* joined tokens group rank by group rank, not in global order */
    int    nparts;     /* 3 (q, k, v) or 1 (out) */
    size_t part[3];    /* heads of each part on the whole row (H, Hkv, Hkv) */
    size_t row, rowj;  /* units per token: local, per group rank */
} Heads;

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

/* Unit u (0 .. rowj-1) of group rank j's block -> its unit in the local row. */
static size_t local_col(const Heads *hd, int j, size_t u)
{
    size_t base = 0;
    for (int p = 0; p < hd->nparts; p++) {
        size_t per = hd->part[p] / (size_t)hd->ng;
        if (u < per) return base + (size_t)j * per + u;
        u -= per;
        base += hd->part[p];
    }
    return SIZE_MAX;   /* not reached: u < rowj */
}

/* Copy units: local (src) -> blocks by destination (dst). */
static void local_to_blocks(const Cp *x, const Heads *hd, float *dst, const float *src)
{
    size_t D = x->D;
    for (int j = 0; j < hd->ng; j++)
        for (size_t bt = 0; bt < x->B * x->Tl; bt++)
            for (size_t u = 0; u < hd->rowj; u++)
                memcpy(dst + (((size_t)j * x->B * x->Tl + bt) * hd->rowj + u) * D,
                       src + (bt * hd->row + local_col(hd, j, u)) * D, D * sizeof *dst);
}

/* Joined row of token t of group rank s, sequence b. ALL_TO_ALL's group is
 * the CP group (s is the CP rank); HIERARCHICAL's s is this node's s-th rank. */
static size_t joined_row(const Cp *x, const Heads *hd, int s, size_t b, size_t t)
{
    if (hd->node) return (b * (size_t)hd->ng + (size_t)s) * x->Tl + t;
    return b * x->T + pos_of(x, s, t);
}

/* Copy rows: joined (src) -> blocks by the tokens' group rank (dst). */
static void joined_to_blocks(const Cp *x, const Heads *hd, float *dst, const float *src)
{
    size_t w = hd->rowj * x->D;
    for (int s = 0; s < hd->ng; s++)
        for (size_t b = 0; b < x->B; b++)
            for (size_t t = 0; t < x->Tl; t++)
                memcpy(dst + (((size_t)s * x->B + b) * x->Tl + t) * w,
                       src + joined_row(x, hd, s, b, t) * w, w * sizeof *dst);
}

/* Where unit i of a buffer must go. */
typedef size_t (*dest_fn)(const Cp *x, const Heads *hd, size_t i);

/* blocks by source, rows of rowj units -> joined rows. */
static size_t dest_joined(const Cp *x, const Heads *hd, size_t i)
{
    size_t t = i % x->Tl, b = (i / x->Tl) % x->B;
    return joined_row(x, hd, (int)(i / (x->Tl * x->B)), b, t);
}

/* blocks by group rank, units of D -> local. */
static size_t dest_local(const Cp *x, const Heads *hd, size_t i)
{
    size_t u = i % hd->rowj, bt = (i / hd->rowj) % (x->B * x->Tl);
    int j = (int)(i / (hd->rowj * x->B * x->Tl));
    return bt * hd->row + local_col(hd, j, u);
}

/* Permute n units of w floats in place by following cycles; one bit per
 * unit (host) marks the ones placed. */
static prt_status permute(const Cp *x, const Heads *hd, float *buf, size_t n, size_t w, dest_fn dest)
{
    uint8_t *done = calloc(n / 8 + 1, 1);
    float *a = malloc(2 * w * sizeof *a + 1), *b = a ? a + w : NULL;
    float *base = a;
    if (!done || !a) {
        free(done);
        free(a);
        return prtp_fail(PRT_ERR_NOMEM, "cp %s: out of memory", form_name(x->form));
    }
    for (size_t i = 0; i < n; i++) {
        if (done[i / 8] >> (i % 8) & 1) continue;
        memcpy(a, buf + i * w, w * sizeof *a);   /* a: the unit that was at j */
        for (size_t j = i;;) {
            size_t k = dest(x, hd, j);
            done[k / 8] |= (uint8_t)(1u << (k % 8));
            if (k == i) {
                memcpy(buf + k * w, a, w * sizeof *a);
                break;
            }
            memcpy(b, buf + k * w, w * sizeof *b);
            memcpy(buf + k * w, a, w * sizeof *a);
            float *t = a;
            a = b;
            b = t;
            j = k;
        }
    }
    free(done);
    free(base);
    return PRT_OK;
}

/* The node's all-to-all of HIERARCHICAL, point to point on the CP group:
 * block j of send (n each) to the node's rank j, block j of recv from it;
 * this rank's own block is copied. */
static prt_status node_exchange(const Cp *x, const Heads *hd, const float *send, float *recv, size_t n,
                                const char *what)
{
    int first = x->r - x->r % hd->ng, me = x->r % hd->ng, np = 0;
    prt_request **req = calloc(2 * (size_t)hd->ng + 1, sizeof *req);
    if (!req) return prtp_fail(PRT_ERR_NOMEM, "%s: out of memory", what);
    memcpy(recv + (size_t)me * n, send + (size_t)me * n, n * sizeof *recv);
    prt_status st = prtp_check(prt_group_start(), what);
    for (int j = 0; !st && j < hd->ng; j++) {
        if (j == me) continue;
        st = prtp_check(prt_send_async(x->g, send + (size_t)j * n, n, PRT_ACT, first + j, 100, &req[np++]), what);
        if (!st)
            st = prtp_check(prt_recv_async(x->g, recv + (size_t)j * n, n, PRT_ACT, first + j, 100, &req[np++]),
                            what);
    }
    prt_status e = prtp_check(prt_group_end(), what);
    if (!st) st = e;
    e = prtp_check(prt_wait_all(req, np), what);
    free(req);
    return st ? st : e;
}

/* The all-to-all itself: ALL_TO_ALL's in place on the CP group (scratch
 * NULL: the blocks were packed into dst); HIERARCHICAL's from scratch into
 * dst over the node. */
static prt_status exchange(const Cp *x, const Heads *hd, float *dst, const float *scratch, const char *what)
{
    size_t n = x->B * x->Tl * hd->rowj * x->D;
    if (!scratch) return prtp_check(prt_all_to_all(x->g, dst, dst, n, PRT_ACT), what);
    return node_exchange(x, hd, scratch, dst, n, what);
}

/* local rows (src) of this rank's tokens -> joined rows of its heads (dst).
 * scratch: NULL (in place) or a buffer of dst's size. */
static prt_status to_heads(const Cp *x, const Heads *hd, float *dst, const float *src, float *scratch,
                           const char *what)
{
    local_to_blocks(x, hd, scratch ? scratch : dst, src);
    prt_status st = exchange(x, hd, dst, scratch, what);
    if (!st) st = permute(x, hd, dst, x->B * x->Tl * (size_t)hd->ng, hd->rowj * x->D, dest_joined);
    return st;
}

/* joined rows of this rank's heads (src) -> local rows of its tokens (dst). */
static prt_status to_tokens(const Cp *x, const Heads *hd, float *dst, const float *src, float *scratch,
                            const char *what)
{
    joined_to_blocks(x, hd, scratch ? scratch : dst, src);
    prt_status st = exchange(x, hd, dst, scratch, what);
    if (!st) st = permute(x, hd, dst, x->B * x->Tl * hd->row, x->D, dest_local);
    return st;
}

/* The saved buffer of ALL_TO_ALL: head-split qkv, output, probabilities. */
typedef struct { float *qkv, *out, *P; size_t Hq, Hk; } A2aSaved;

static A2aSaved a2a_saved(const Cp *x, const float *saved)
{
    size_t Hq = x->H / (size_t)x->cp, Hk = x->Hkv / (size_t)x->cp;
    float *q = (float *)saved, *o = q + x->B * x->T * (Hq + 2 * Hk) * x->D;
    return (A2aSaved){ .qkv = q, .out = o, .P = o + x->B * x->T * Hq * x->D, .Hq = Hq, .Hk = Hk };
}

static prt_status a2a_fwd(const Cp *x, float *out, float *saved, const float *qkv)
{
    A2aSaved s = a2a_saved(x, saved);
    Heads hq = heads_qkv(x, x->cp, false), ho = heads_out(x, x->cp, false);
    prt_status st = to_heads(x, &hq, s.qkv, qkv, NULL, "cp all-to-all of qkv");
    if (!st) prt_attention_fwd(s.out, s.P, s.qkv, x->B, x->T, s.Hq, s.Hk, x->D, x->W);
    if (!st) st = to_tokens(x, &ho, out, s.out, NULL, "cp all-to-all of the output");
    return st;
}

static prt_status a2a_bwd(const Cp *x, float *dqkv, const float *dout, const float *saved)
{
    A2aSaved s = a2a_saved(x, saved);
    Heads hq = heads_qkv(x, x->cp, false), ho = heads_out(x, x->cp, false);
    float *dq = NULL, *dO = NULL, *dP = NULL;
    prt_status st = cp_alloc(&dq, x->B * x->T * (s.Hq + 2 * s.Hk) * x->D, "cp all_to_all backward");
    if (!st) st = cp_alloc(&dO, x->B * x->T * s.Hq * x->D, "cp all_to_all backward");
    if (!st) st = cp_alloc(&dP, x->B * s.Hq * x->T * x->T, "cp all_to_all backward");
    if (!st) st = to_heads(x, &ho, dO, dout, NULL, "cp all-to-all of the output gradient");
    if (!st) prt_attention_bwd(dq, dP, dO, s.qkv, s.P, false, x->B, x->T, s.Hq, s.Hk, x->D, x->W);
    if (!st) st = to_tokens(x, &hq, dqkv, dq, NULL, "cp all-to-all of the qkv gradient");
    prt_mem_free(dq);
    prt_mem_free(dO);
    prt_mem_free(dP);
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
typedef struct { float *qkv, *out, *lse; } HierSaved;

static HierSaved hier_saved(const Cp *x, float *saved)
{
    float *o = saved + x->B * x->Tl * x->R;
    return (HierSaved){ .qkv = saved, .out = o, .lse = o + x->B * x->Tl * x->HD };
}

static prt_status hier_fwd(const Cp *x, float *out, float *saved, const float *qkv)
{
    int k;
    Cp ring;
    prt_status st = hier_setup(x, &k, &ring);
    if (st) return st;
    HierSaved s = hier_saved(x, saved);
    Heads hq = heads_qkv(x, k, true), ho = heads_out(x, k, true);
    float *scratch = NULL;
    st = cp_alloc(&scratch, x->B * x->Tl * x->R, "cp hierarchical forward");
    if (!st) st = to_heads(x, &hq, s.qkv, qkv, scratch, "cp hierarchical: the node's all-to-all of qkv");
    prt_mem_free(scratch);
    if (!st) st = ring_fwd(&ring, s.out, s.lse, s.qkv);
    scratch = NULL;
    if (!st) st = cp_alloc(&scratch, x->B * x->Tl * x->HD, "cp hierarchical forward");
    if (!st) st = to_tokens(x, &ho, out, s.out, scratch, "cp hierarchical: the node's all-to-all of the output");
    prt_mem_free(scratch);
    return st;
}

static prt_status hier_bwd(const Cp *x, float *dqkv, const float *dout, const float *saved)
{
    int k;
    Cp ring;
    prt_status st = hier_setup(x, &k, &ring);
    if (st) return st;
    HierSaved s = hier_saved(x, (float *)saved);
    Heads hq = heads_qkv(x, k, true), ho = heads_out(x, k, true);
    float *dO = NULL, *dq = NULL, *scratch = NULL;
    const char *who = "cp hierarchical backward";
    st = cp_alloc(&dO, x->B * x->Tl * x->HD, who);
    if (!st) st = cp_alloc(&scratch, x->B * x->Tl * x->HD, who);
    if (!st) st = to_heads(x, &ho, dO, dout, scratch, "cp hierarchical: the node's all-to-all of the output gradient");
    prt_mem_free(scratch);
    scratch = NULL;
    if (!st) st = cp_alloc(&dq, x->B * x->Tl * x->R, who);
    if (!st) st = ring_bwd(&ring, dq, dO, s.qkv, s.out, s.lse);
    prt_mem_free(dO);
    if (!st) st = cp_alloc(&scratch, x->B * x->Tl * x->R, who);
    if (!st) st = to_tokens(x, &hq, dqkv, dq, scratch, "cp hierarchical: the node's all-to-all of the qkv gradient");
    prt_mem_free(scratch);
    prt_mem_free(dq);
    return st;
}

#endif /* !PRT_CUDA */

prt_status prt_cp_attention_fwd(prt_comm *cp, prt_cp_form form, prt_act *out, prt_act *saved,
                                const prt_act *qkv, size_t B, size_t Tl, size_t H, size_t Hkv,
                                size_t D, size_t W)
{
    Cp x;
    prt_status st = cp_setup(&x, "prt_cp_attention_fwd", cp, form, B, Tl, H, Hkv, D, W);
    if (st) return st;
#ifdef PRT_CUDA
    (void)out; (void)saved; (void)qkv;
    return PRT_ERR_ARG;   /* not reached: cp_setup refuses the CUDA build */
#else
    switch (form) {
    case PRT_CP_RING: return ring_fwd(&x, out, saved, qkv);
    case PRT_CP_ALL_TO_ALL: return a2a_fwd(&x, out, saved, qkv);
    case PRT_CP_ALL_GATHER: return gather_fwd(&x, out, saved, qkv);
    case PRT_CP_HIERARCHICAL: return hier_fwd(&x, out, saved, qkv);
    }
    return prtp_fail(PRT_ERR_ARG, "prt_cp_attention_fwd: cp_comm %s not handled", form_name(form));
#endif
}

prt_status prt_cp_attention_bwd(prt_comm *cp, prt_cp_form form, prt_act *dqkv, const prt_act *dout,
                                const prt_act *qkv, const prt_act *out, const prt_act *saved,
                                size_t B, size_t Tl, size_t H, size_t Hkv, size_t D, size_t W)
{
    Cp x;
    prt_status st = cp_setup(&x, "prt_cp_attention_bwd", cp, form, B, Tl, H, Hkv, D, W);
    if (st) return st;
#ifdef PRT_CUDA
    (void)dqkv; (void)dout; (void)qkv; (void)out; (void)saved;
    return PRT_ERR_ARG;
#else
    switch (form) {
    case PRT_CP_RING: return ring_bwd(&x, dqkv, dout, qkv, out, saved);
    case PRT_CP_ALL_TO_ALL: (void)qkv; (void)out; return a2a_bwd(&x, dqkv, dout, saved);
    case PRT_CP_ALL_GATHER: (void)out; return gather_bwd(&x, dqkv, dout, qkv, saved);
    case PRT_CP_HIERARCHICAL: return hier_bwd(&x, dqkv, dout, saved);
    }
    return prtp_fail(PRT_ERR_ARG, "prt_cp_attention_bwd: cp_comm %s not handled", form_name(form));
#endif
}
