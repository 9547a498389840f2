/*
 * ops_cp.cu: the CUDA build's per-block compute of context-parallel
 * attention (issue 26): runtime/par/cp_internal.h's prtp_cp_* functions,
 * whose CPU twin is runtime/par/cp_cpu.c. runtime/par/cp.c runs the ring
 * steps, the exchanges and the buffers (device memory here); this file only
 * computes on what it is handed, on the ops' stream, in the order cp.c
 * calls it (NCCL's transfers are queued on the same stream).
 *
 * Storage is bf16 (prt_act), arithmetic fp32. The products are cuBLAS
 * (prt_cuda_gemm: bf16 in, fp32 accumulate), written below in the CPU
 * file's row-major terms through rgemm; the scores are bf16 as
 * prt_attention_fwd's. The log-sum-exp and the dK, dV accumulators are
 * fp32 (cuBLAS writes dK, dV straight into fp32). The masks, the
 * online-softmax merge and the softmax backward are one warp per query
 * row, with the column ranges of cp_internal.h's cp_seen_cols (the CPU's
 * rule, compiled for the device). One (b, h) at a time, as the contract's
 * scratch (one head's scores) allows; a skipped sub-block is never
 * multiplied, and its scores are never read (its probabilities are
 * written 0).
 *
 * Ops are void and asynchronous: a failed launch or cuBLAS call is
 * recorded and reported by the step's prt_ops_sync (ops_cuda.h).
 */
#include <math.h>

#include "ops_kernels.cuh"
#include "../par/cp_internal.h"

static const char OP[] = "prt_cp_attention";

/* Row-major C (M, N) = alpha op(A) op(B) + beta C, op a transpose where tA
 * (tB); A, B bf16, C of type ct; batched with strides sa, sb, sc. */
static void rgemm(bool tA, bool tB, size_t M, size_t N, size_t K, float alpha, const bf *A, size_t lda,
                  long long sa, const bf *B, size_t ldb, long long sb, float beta, void *C, cudaDataType ct,
                  size_t ldc, long long sc, size_t batch)
{
    /* row-major C is column-major C^T = op(B)^T op(A)^T */
    prt_cuda_gemm(OP, tB ? CUBLAS_OP_T : CUBLAS_OP_N, tA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, alpha, B, ldb,
                  sb, A, lda, sa, beta, C, ct, ldc, sc, batch);
}

/* The columns of key chunk kc of ring member owner that query position q
 * sees, and whether column j of the block (Tl columns) is one of them. */
static __device__ __forceinline__ bool seen(const Cp *x, size_t q, int owner, size_t j)
{
    size_t lo, hi, jj = j % x->C;
    cp_seen_cols(x, q, cp_chunk_of(x, owner, j / x->C) * x->C, &lo, &hi);
    return jj >= lo && jj < hi;
}

__global__ static void k_fill(float *p, float v, size_t n)
{
    size_t i = gtid();
    if (i < n) p[i] = v;
}

/* ---- K, V blocks ------------------------------------------------------------ */

extern "C" void prtp_cp_pack_kv(const Cp *x, prt_act *kv, const prt_act *qkv)
{
    /* B Tl rows of KV elements out of rows of R, from column HD */
    prt_cuda_ok(cudaMemcpy2DAsync(kv, x->KV * sizeof(bf), CBF(qkv) + x->HD, x->R * sizeof(bf),
                                  x->KV * sizeof(bf), x->B * x->Tl, cudaMemcpyDeviceToDevice, PRT_OPS_STREAM),
                OP, "cudaMemcpy2DAsync");
}

__global__ static void k_unpack_dkv(bf *dqkv, const float *dkv, size_t rows, size_t R, size_t HD, size_t KV)
{
    size_t i = gtid();
    if (i < rows * KV) dqkv[(i / KV) * R + HD + i % KV] = to_bf(dkv[i]);
}

extern "C" void prtp_cp_unpack_dkv(const Cp *x, prt_act *dqkv, const float *dkv)
{
    PRT_LAUNCH(OP, grid_for(x->B * x->Tl * x->KV), 0, k_unpack_dkv, BF(dqkv), dkv, x->B * x->Tl, x->R, x->HD,
               x->KV);
}

/* ---- RING --------------------------------------------------------------------- */

extern "C" void prtp_cp_ring_start(const Cp *x, prt_act *out, float *lse)
{
    prt_cuda_ok(cudaMemsetAsync(out, 0, x->B * x->Tl * x->HD * sizeof(bf), PRT_OPS_STREAM), OP,
                "cudaMemsetAsync");
    size_t n = x->B * x->H * x->Tl;
    PRT_LAUNCH(OP, grid_for(n), 0, k_fill, lse, -INFINITY, n);
}

/* The online-softmax merge of one block's scores S (Tl, Tl) into the
 * normalised output rows out (ld HD) and their log-sum-exp (cp.c's essay):
 * M = max(L, max S), tot = exp(L - M) + sum exp(S - M), O <- O exp(L - M)
 * / tot (P V is added after), L <- M + log tot; S becomes exp(S - M) / tot
 * on the columns seen, 0 elsewhere. A row that sees nothing of the block
 * keeps its O and L. One warp per row. */
__global__ static void k_ring_merge(Cp x, int owner, bf *S, bf *out, float *lse)
{
    size_t i = gwarp();
    int lane = threadIdx.x % 32;
    if (i >= x.Tl) return;
    size_t q = cp_pos_of(&x, x.ri, i);
    bf *s = S + i * x.Tl;
    float mb = -INFINITY;
    for (size_t kc = 0; kc < x.nch; kc++) {
        size_t lo, hi;
        cp_seen_cols(&x, q, cp_chunk_of(&x, owner, kc) * x.C, &lo, &hi);
        for (size_t j = lo + lane; j < hi; j += 32) mb = fmaxf(mb, ld(s, kc * x.C + j));
    }
    mb = warp_max(mb);
    if (mb == -INFINITY) {   /* nothing of this block is seen by row i */
        for (size_t j = lane; j < x.Tl; j += 32) s[j] = to_bf(0.0f);
        return;
    }
    float L = lse[i], M = fmaxf(L, mb), sum = 0.0f;
    for (size_t kc = 0; kc < x.nch; kc++) {
        size_t lo, hi;
        cp_seen_cols(&x, q, cp_chunk_of(&x, owner, kc) * x.C, &lo, &hi);
        for (size_t j = lo + lane; j < hi; j += 32) sum += expf(ld(s, kc * x.C + j) - M);
    }
    sum = warp_sum(sum);
    float old = expf(L - M), tot = old + sum, inv = 1.0f / tot;   /* L -inf: old 0 */
    for (size_t j = lane; j < x.Tl; j += 32)
        s[j] = to_bf(seen(&x, q, owner, j) ? expf(ld(s, j) - M) * inv : 0.0f);
    bf *o = out + i * x.HD;
    for (size_t d = lane; d < x.D; d += 32) o[d] = to_bf(ld(o, d) * old * inv);
    if (lane == 0) lse[i] = M + logf(tot);
}

/* S (or dP) sub-blocks [qa][kc] = alpha A_qa B_kc^T for those not skipped. */
static void sub_scores(const Cp *x, const CpBlk *k, bf *S, float alpha, const bf *A, size_t lda, const bf *Bm,
                       size_t ldb)
{
    for (size_t qa = 0; qa < x->nch; qa++)
        for (size_t kc = 0; kc < x->nch; kc++)
            if (k->kind[qa * x->nch + kc] != SUB_SKIP)
                rgemm(false, true, x->C, x->C, x->D, alpha, A + qa * x->C * lda, lda, 0, Bm + kc * x->C * ldb,
                      ldb, 0, 0.0f, S + qa * x->C * x->Tl + kc * x->C, CUDA_R_16BF, x->Tl, 0, 1);
}

extern "C" void prtp_cp_ring_block_fwd(const Cp *x, const CpBlk *k, prt_act *S_)
{
    bf *S = BF(S_);
    sub_scores(x, k, S, x->scale, CBF(k->Q), x->R, CBF(k->K), x->KV);
    PRT_LAUNCH(OP, grid_rows(x->Tl), 0, k_ring_merge, *x, k->owner, S, BF(k->out), k->lse);
    for (size_t qa = 0; qa < x->nch; qa++)   /* O_qa += P_qa,kc V_kc */
        for (size_t kc = 0; kc < x->nch; kc++)
            if (k->kind[qa * x->nch + kc] != SUB_SKIP)
                rgemm(false, false, x->C, x->D, x->C, 1.0f, S + qa * x->C * x->Tl + kc * x->C, x->Tl, 0,
                      CBF(k->V) + kc * x->C * x->KV, x->KV, 0, 1.0f, BF(k->out) + qa * x->C * x->HD,
                      CUDA_R_16BF, x->HD, 0, 1);
}

/* P = exp(S - L) over S and dS = P (dP - rowsum(dO O)) / sqrt(D) over dP
 * (the rowsum equals rowsum(P dP): FlashAttention-2 Sec. 3.1.2); columns
 * not seen are 0 in both. One warp per row. */
__global__ static void k_ring_softmax_bwd(Cp x, int owner, bf *S, bf *dP, const bf *O, const bf *dO,
                                          const float *lse)
{
    size_t i = gwarp();
    int lane = threadIdx.x % 32;
    if (i >= x.Tl) return;
    size_t q = cp_pos_of(&x, x.ri, i);
    float rs = 0.0f;
    for (size_t d = lane; d < x.D; d += 32) rs += ld(dO, i * x.HD + d) * ld(O, i * x.HD + d);
    rs = warp_sum(rs);
    float L = lse[i];
    bf *s = S + i * x.Tl, *g = dP + i * x.Tl;
    for (size_t j = lane; j < x.Tl; j += 32) {
        bool v = seen(&x, q, owner, j);
        float p = v ? expf(ld(s, j) - L) : 0.0f;
        g[j] = to_bf(v ? p * (ld(g, j) - rs) * x.scale : 0.0f);
        s[j] = to_bf(p);
    }
}

extern "C" void prtp_cp_ring_block_bwd(const Cp *x, const CpBlk *k, prt_act *S_, prt_act *dP_)
{
    bf *S = BF(S_), *dP = BF(dP_);
    sub_scores(x, k, S, x->scale, CBF(k->Q), x->R, CBF(k->K), x->KV);
    sub_scores(x, k, dP, 1.0f, CBF(k->dO), x->HD, CBF(k->V), x->KV);
    PRT_LAUNCH(OP, grid_rows(x->Tl), 0, k_ring_softmax_bwd, *x, k->owner, S, dP, CBF(k->O), CBF(k->dO), k->lse);
    for (size_t qa = 0; qa < x->nch; qa++)
        for (size_t kc = 0; kc < x->nch; kc++) {
            if (k->kind[qa * x->nch + kc] == SUB_SKIP) continue;
            size_t so = qa * x->C * x->Tl + kc * x->C, qo = qa * x->C, ko = kc * x->C;
            /* dQ += dS K (bf16), dK += dS^T Q, dV += P^T dO (fp32) */
            rgemm(false, false, x->C, x->D, x->C, 1.0f, dP + so, x->Tl, 0, CBF(k->K) + ko * x->KV, x->KV, 0,
                  1.0f, BF(k->dQ) + qo * x->R, CUDA_R_16BF, x->R, 0, 1);
            rgemm(true, false, x->C, x->D, x->C, 1.0f, dP + so, x->Tl, 0, CBF(k->Q) + qo * x->R, x->R, 0,
                  1.0f, k->dK + ko * x->KV, CUDA_R_32F, x->KV, 0, 1);
            rgemm(true, false, x->C, x->D, x->C, 1.0f, S + so, x->Tl, 0, CBF(k->dO) + qo * x->HD, x->HD, 0,
                  1.0f, k->dV + ko * x->KV, CUDA_R_32F, x->KV, 0, 1);
        }
}

/* ---- ALL_GATHER ------------------------------------------------------------------ */

/* Masked softmax of one (b, h)'s rows P (Tl, T) over the gathered keys:
 * column chunk cc is chunk cc % 2 of rank cc / 2. One warp per row. */
__global__ static void k_gather_softmax(Cp x, bf *P)
{
    size_t i = gwarp();
    int lane = threadIdx.x % 32;
    if (i >= x.Tl) return;
    size_t q = cp_pos_of(&x, x.r, i), nc = 2 * (size_t)x.cp;
    bf *p = P + i * x.T;
    float m = -INFINITY, sum = 0.0f;
    for (size_t cc = 0; cc < nc; cc++) {
        size_t lo, hi;
        cp_seen_cols(&x, q, cp_chunk_of(&x, (int)(cc / 2), cc % 2) * x.C, &lo, &hi);
        for (size_t j = lo + lane; j < hi; j += 32) m = fmaxf(m, ld(p, cc * x.C + j));
    }
    m = warp_max(m);
    for (size_t cc = 0; cc < nc; cc++) {
        size_t lo, hi;
        cp_seen_cols(&x, q, cp_chunk_of(&x, (int)(cc / 2), cc % 2) * x.C, &lo, &hi);
        for (size_t j = lo + lane; j < hi; j += 32) sum += expf(ld(p, cc * x.C + j) - m);
    }
    float inv = 1.0f / warp_sum(sum);   /* the diagonal key is always seen: sum >= exp(0) */
    for (size_t j = lane; j < x.T; j += 32) {
        size_t cc = j / x.C, lo, hi, jj = j % x.C;
        cp_seen_cols(&x, q, cp_chunk_of(&x, (int)(cc / 2), cc % 2) * x.C, &lo, &hi);
        p[j] = to_bf(jj >= lo && jj < hi ? expf(ld(p, j) - m) * inv : 0.0f);
    }
}

/* dS = P (dP - rowsum(P dP)) * scale in place over dP (rows of n); P is 0
 * where masked, so dS is too. One warp per row. */
__global__ static void k_rows_softmax_bwd(bf *dP, const bf *P, size_t rows, size_t n, float scale)
{
    size_t i = gwarp();
    int lane = threadIdx.x % 32;
    if (i >= rows) return;
    bf *d = dP + i * n;
    const bf *p = P + i * n;
    float dot = 0.0f;
    for (size_t j = lane; j < n; j += 32) dot += ld(p, j) * ld(d, j);
    dot = warp_sum(dot);
    for (size_t j = lane; j < n; j += 32) d[j] = to_bf(ld(p, j) * (ld(d, j) - dot) * scale);
}

extern "C" void prtp_cp_gather_head_fwd(const Cp *x, size_t b, size_t h, prt_act *out, prt_act *P_all,
                                        const prt_act *qkv, const prt_act *kv)
{
    size_t g = h / x->G;
    long long sblk = (long long)(x->B * x->Tl * x->KV);   /* from rank block s to s + 1 */
    const bf *Q = CBF(qkv) + b * x->Tl * x->R + h * x->D, *K0 = CBF(kv) + b * x->Tl * x->KV + g * x->D;
    const bf *V0 = CBF(kv) + b * x->Tl * x->KV + (x->Hkv + g) * x->D;
    bf *P = BF(P_all) + (b * x->H + h) * x->Tl * x->T, *O = BF(out) + b * x->Tl * x->HD + h * x->D;
    /* P_s (Tl, Tl of the T columns) = Q K_s^T / sqrt(D), every block s at once */
    rgemm(false, true, x->Tl, x->Tl, x->D, x->scale, Q, x->R, 0, K0, x->KV, sblk, 0.0f, P, CUDA_R_16BF, x->T,
          (long long)x->Tl, (size_t)x->cp);
    PRT_LAUNCH(OP, grid_rows(x->Tl), 0, k_gather_softmax, *x, P);
    for (int s = 0; s < x->cp; s++)   /* O = sum_s P_s V_s */
        rgemm(false, false, x->Tl, x->D, x->Tl, 1.0f, P + (size_t)s * x->Tl, x->T, 0, V0 + s * sblk, x->KV, 0,
              s ? 1.0f : 0.0f, O, CUDA_R_16BF, x->HD, 0, 1);
}

extern "C" void prtp_cp_gather_head_bwd(const Cp *x, size_t b, size_t h, prt_act *dqkv, float *dkv,
                                        prt_act *dS_, const prt_act *dout, const prt_act *qkv,
                                        const prt_act *P_all, const prt_act *kv)
{
    size_t g = h / x->G, ko = g * x->D, vo = (x->Hkv + g) * x->D;
    long long sblk = (long long)(x->B * x->Tl * x->KV);
    const bf *Q = CBF(qkv) + b * x->Tl * x->R + h * x->D, *dO = CBF(dout) + b * x->Tl * x->HD + h * x->D;
    const bf *K0 = CBF(kv) + b * x->Tl * x->KV + ko, *V0 = CBF(kv) + b * x->Tl * x->KV + vo;
    const bf *P = CBF(P_all) + (b * x->H + h) * x->Tl * x->T;
    bf *dQ = BF(dqkv) + b * x->Tl * x->R + h * x->D, *dS = BF(dS_);
    float *dK0 = dkv + b * x->Tl * x->KV + ko, *dV0 = dkv + b * x->Tl * x->KV + vo;
    size_t cp = (size_t)x->cp;
    /* dP_s = dO V_s^T, then dS over the whole row */
    rgemm(false, true, x->Tl, x->Tl, x->D, 1.0f, dO, x->HD, 0, V0, x->KV, sblk, 0.0f, dS, CUDA_R_16BF, x->T,
          (long long)x->Tl, cp);
    PRT_LAUNCH(OP, grid_rows(x->Tl), 0, k_rows_softmax_bwd, dS, P, x->Tl, x->T, x->scale);
    for (size_t s = 0; s < cp; s++)   /* dQ += dS_s K_s */
        rgemm(false, false, x->Tl, x->D, x->Tl, 1.0f, dS + s * x->Tl, x->T, 0, K0 + (long long)s * sblk, x->KV, 0,
              1.0f, dQ, CUDA_R_16BF, x->R, 0, 1);
    /* dK_s += dS_s^T Q, dV_s += P_s^T dO: fp32, every block s at once */
    rgemm(true, false, x->Tl, x->D, x->Tl, 1.0f, dS, x->T, (long long)x->Tl, Q, x->R, 0, 1.0f, dK0, CUDA_R_32F,
          x->KV, sblk, cp);
    rgemm(true, false, x->Tl, x->D, x->Tl, 1.0f, P, x->T, (long long)x->Tl, dO, x->HD, 0, 1.0f, dV0, CUDA_R_32F,
          x->KV, sblk, cp);
}

/* ---- the all-to-alls' moves: out of place, one thread per element --------- */

/* Where element e of dst comes from (packing) or element e of src goes to
 * (unpacking), by cp_internal.h's layout functions. */
__global__ static void k_move(Cp x, Heads hd, int m, bf *dst, const bf *src, size_t n)
{
    size_t e = gtid();
    if (e >= n) return;
    size_t D = x.D, w = hd.rowj * D, bt_n = x.B * x.Tl;
    switch (m) {
    case CP_LOCAL_TO_BLOCKS: {   /* dst unit (j, bt, u) <- src's local unit */
        size_t i = e / D, j = i / (bt_n * hd.rowj), bt = (i / hd.rowj) % bt_n, u = i % hd.rowj;
        dst[e] = src[(bt * hd.row + cp_local_col(&hd, (int)j, u)) * D + e % D];
        break;
    }
    case CP_JOINED_TO_BLOCKS: {  /* dst row (s, b, t) <- src's joined row */
        size_t i = e / w, s = i / bt_n, b = (i / x.Tl) % x.B, t = i % x.Tl;
        dst[e] = src[cp_joined_row(&x, &hd, (int)s, b, t) * w + e % w];
        break;
    }
    case CP_BLOCKS_TO_JOINED:
        dst[cp_dest_joined(&x, &hd, e / w) * w + e % w] = src[e];
        break;
    case CP_BLOCKS_TO_LOCAL:
        dst[cp_dest_local(&x, &hd, e / D) * D + e % D] = src[e];
        break;
    }
}

extern "C" prt_status prtp_cp_move(const Cp *x, const Heads *hd, CpMove m, prt_act *dst, const prt_act *src)
{
    size_t n = x->B * x->Tl * hd->row * x->D;
    PRT_LAUNCH(OP, grid_for(n), 0, k_move, *x, *hd, (int)m, BF(dst), CBF(src), n);
    return PRT_OK;   /* asynchronous: a failure is the step's prt_ops_sync's */
}
