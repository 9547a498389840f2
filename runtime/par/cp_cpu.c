/*
 * cp_cpu.c: the CPU build's per-block compute of context-parallel attention
 * (cp_internal.h's prtp_cp_* functions), fp32 with OpenBLAS. cp.c runs the
 * ring steps, the exchanges and the buffers; this file only computes on
 * what it is handed, one (b, h) at a time (the contract's scratch is one
 * head's scores). The CUDA build's twin is runtime/cuda/ops_cp.cu.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cp_internal.h"
#include "par_internal.h"

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

void prtp_cp_pack_kv(const Cp *x, prt_act *kv, const prt_act *qkv)
{
    for (size_t i = 0; i < x->B * x->Tl; i++)
        memcpy(kv + i * x->KV, qkv + i * x->R + x->HD, x->KV * sizeof *kv);
}

void prtp_cp_unpack_dkv(const Cp *x, prt_act *dqkv, const float *dkv)
{
    for (size_t i = 0; i < x->B * x->Tl; i++)
        memcpy(dqkv + i * x->R + x->HD, dkv + i * x->KV, x->KV * sizeof *dkv);
}

/* ---- ALL_GATHER --------------------------------------------------------- */

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
        size_t q = cp_pos_of(x, x->r, i);
        for (size_t cc = 0; cc < nc; cc++) {
            cp_seen_cols(x, q, cp_chunk_of(x, (int)(cc / 2), cc % 2) * x->C, &lo, &hi);
            m = max_chunk(p + cc * x->C, lo, hi, m);
        }
        for (size_t cc = 0; cc < nc; cc++) {
            cp_seen_cols(x, q, cp_chunk_of(x, (int)(cc / 2), cc % 2) * x->C, &lo, &hi);
            sum += exp_chunk(p + cc * x->C, x->C, lo, hi, m);
        }
        float inv = 1.0f / sum;   /* the diagonal key is always seen: sum >= exp(0) */
        for (size_t c = 0; c < x->T; c++) p[c] *= inv;
    }
}

void prtp_cp_gather_head_fwd(const Cp *x, size_t b, size_t h, prt_act *out, prt_act *P_all,
                             const prt_act *qkv, const prt_act *kv)
{
    int Tl = (int)x->Tl, T = (int)x->T, D = (int)x->D, R = (int)x->R, KV = (int)x->KV;
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

void prtp_cp_gather_head_bwd(const Cp *x, size_t b, size_t h, prt_act *dqkv, float *dkv, prt_act *dS,
                             const prt_act *dout, const prt_act *qkv, const prt_act *P_all,
                             const prt_act *kv)
{
    int Tl = (int)x->Tl, T = (int)x->T, D = (int)x->D, R = (int)x->R, KV = (int)x->KV, HD = (int)x->HD;
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

/* ---- RING ----------------------------------------------------------------- */

void prtp_cp_ring_start(const Cp *x, prt_act *out, float *lse)
{
    memset(out, 0, x->B * x->Tl * x->HD * sizeof *out);
    for (size_t i = 0; i < x->B * x->H * x->Tl; i++) lse[i] = -INFINITY;
}

/* S[qa][kc] = A_qa B_kc^T * alpha (C x C sub-blocks of the (Tl, Tl) S) for
 * the sub-blocks not skipped. */
static void sub_gemm_abt(const Cp *x, const CpBlk *k, float *S, float alpha, const float *A, int lda,
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
static bool blk_cols(const Cp *x, const CpBlk *k, size_t i, size_t kc, size_t *lo, size_t *hi)
{
    SubKind s = k->kind[(i / x->C) * x->nch + kc];
    if (s == SUB_SKIP) return false;
    if (s == SUB_FULL) {   /* wholly seen: no mask */
        *lo = 0;
        *hi = x->C;
    } else {
        cp_seen_cols(x, cp_pos_of(x, x->ri, i), cp_chunk_of(x, k->owner, kc) * x->C, lo, hi);
    }
    return true;
}

/* Online-softmax merge of one block into the normalised output rows and
 * their log-sum-exp (cp.c's essay); S becomes P / tot. */
static void ring_merge_rows(const Cp *x, const CpBlk *k, float *S)
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

void prtp_cp_ring_block_fwd(const Cp *x, const CpBlk *k, prt_act *S)
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
static void ring_softmax_bwd(const Cp *x, const CpBlk *k, float *S, float *dP)
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

void prtp_cp_ring_block_bwd(const Cp *x, const CpBlk *k, prt_act *S, prt_act *dP)
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

/* ---- the all-to-alls' moves ------------------------------------------------- */

/* Copy units: local (src) -> blocks by destination (dst). */
static void local_to_blocks(const Cp *x, const Heads *hd, float *dst, const float *src)
{
    size_t D = x->D;
    for (int j = 0; j < hd->ng; j++)
        for (size_t bt = 0; bt < x->B * x->Tl; bt++)
            for (size_t u = 0; u < hd->rowj; u++)
                memcpy(dst + (((size_t)j * x->B * x->Tl + bt) * hd->rowj + u) * D,
                       src + (bt * hd->row + cp_local_col(hd, j, u)) * D, D * sizeof *dst);
}

/* Copy rows: joined (src) -> blocks by the tokens' group rank (dst). */
static void joined_to_blocks(const Cp *x, const Heads *hd, float *dst, const float *src)
{
    size_t w = hd->rowj * x->D;
    for (int s = 0; s < hd->ng; s++)
        for (size_t b = 0; b < x->B; b++)
            for (size_t t = 0; t < x->Tl; t++)
                memcpy(dst + (((size_t)s * x->B + b) * x->Tl + t) * w,
                       src + cp_joined_row(x, hd, s, b, t) * w, w * sizeof *dst);
}

/* Where unit i of a buffer must go. */
typedef size_t (*dest_fn)(const Cp *x, const Heads *hd, size_t i);

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
        return prtp_fail(PRT_ERR_NOMEM, "cp all-to-all: out of memory");
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

static size_t dest_joined(const Cp *x, const Heads *hd, size_t i) { return cp_dest_joined(x, hd, i); }
static size_t dest_local(const Cp *x, const Heads *hd, size_t i) { return cp_dest_local(x, hd, i); }

prt_status prtp_cp_move(const Cp *x, const Heads *hd, CpMove m, prt_act *dst, const prt_act *src)
{
    bool unpack = m == CP_BLOCKS_TO_JOINED || m == CP_BLOCKS_TO_LOCAL;
    if (unpack && dst != src)   /* out of place (PRT_CP_OUT_OF_PLACE): then in place on dst */
        memcpy(dst, src, x->B * x->Tl * hd->row * x->D * sizeof *dst);
    switch (m) {
    case CP_LOCAL_TO_BLOCKS: local_to_blocks(x, hd, dst, src); return PRT_OK;
    case CP_JOINED_TO_BLOCKS: joined_to_blocks(x, hd, dst, src); return PRT_OK;
    case CP_BLOCKS_TO_JOINED:
        return permute(x, hd, dst, x->B * x->Tl * (size_t)hd->ng, hd->rowj * x->D, dest_joined);
    case CP_BLOCKS_TO_LOCAL:
        return permute(x, hd, dst, x->B * x->Tl * hd->row, x->D, dest_local);
    }
    return prtp_fail(PRT_ERR_ARG, "prtp_cp_move: unknown move %d", (int)m);
}
