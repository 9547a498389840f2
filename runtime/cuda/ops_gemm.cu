/*
 * ops_gemm.cu: the GEMM-shaped layers of the CUDA build, linear and
 * attention, through cuBLAS (bf16 inputs, fp32 accumulation
 * (CUBLAS_COMPUTE_32F); weight gradients written straight into fp32).
 *
 * cuBLAS is column-major; a row-major (M, N) matrix is its column-major
 * transpose, so every product below is the row-major formula of the CPU
 * build (runtime/ops/linear.c, attention.c) with operands swapped, as in
 * llm.c's matmul_forward_cublaslt. Attention reads Q, K, V in place from
 * the fused qkv rows (leading dimension (H+2Hkv)D) and runs one strided
 * batched GEMM per query head over the B sequences, so grouped-query
 * heads need no copies; the causal softmax and its backward are kernels.
 */
#include "ops_kernels.cuh"

/* C = alpha op(A) op(B) + beta C, column-major, batched with strides
 * (ops_cuda.h; runtime/cuda/ops_cp.cu uses it too). */
extern "C" void prt_cuda_gemm(const char *op, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,
                 size_t k, float alpha, const void *A, size_t lda, long long sa, const void *B,
                 size_t ldb, long long sb, float beta, void *C, cudaDataType ct, size_t ldc,
                 long long sc, size_t batch)
{
    if (!m || !n || !batch)
        return;   /* an empty C: nothing to compute (and a leading dimension of 0 is invalid) */
    cublasHandle_t h = prt_cuda_blas();
    if (!h)
        return;
    prt_cublas_ok(cublasGemmStridedBatchedEx(h, ta, tb, (int)m, (int)n, (int)k, &alpha,
                                             A, CUDA_R_16BF, (int)lda, sa,
                                             B, CUDA_R_16BF, (int)ldb, sb, &beta,
                                             C, ct, (int)ldc, sc, (int)batch,
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  op, "cublasGemmStridedBatchedEx");
}

/* ---- linear -------------------------------------------------------------------- */

__global__ static void k_add_bias(bf *out, const bf *b, size_t N, size_t O)
{
    size_t idx = gtid();
    if (idx < N * O) out[idx] = to_bf(ld(out, idx) + ld(b, idx % O));
}

/* db (O) += column sums of dout (N, O): a thread sums 256 rows of one
 * column, then one atomic. */
__global__ static void k_bias_grad(float *db, const bf *dout, size_t N, size_t O)
{
    size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x, r0 = (size_t)blockIdx.y * 256;
    if (o >= O) return;
    float s = 0.0f;
    for (size_t r = r0; r < r0 + 256 && r < N; r++)
        s += ld(dout, r * O + o);
    atomicAdd(&db[o], s);
}

extern "C" void prt_linear_fwd(prt_act *out, const prt_act *x, const prt_act *w, const prt_act *b,
                               size_t N, size_t K, size_t O)
{
    PRT_OP_ENTER("prt_linear_fwd");
    /* out^T (O, N) = W (O, K) x^T (K, N) */
    prt_cuda_gemm("prt_linear_fwd", CUBLAS_OP_T, CUBLAS_OP_N, O, N, K, 1.0f, w, K, 0, x, K, 0, 0.0f,
         out, CUDA_R_16BF, O, 0, 1);
    if (b) {
        PRT_LAUNCH("prt_linear_fwd", grid_for(N * O), 0, k_add_bias, BF(out), CBF(b), N, O);
    }
}

extern "C" void prt_linear_bwd_input(prt_act *dx, const prt_act *dout, const prt_act *w,
                                     size_t N, size_t K, size_t O)
{
    PRT_OP_ENTER("prt_linear_bwd_input");
    /* dx^T (K, N) = W^T (K, O) dout^T (O, N) */
    prt_cuda_gemm("prt_linear_bwd_input", CUBLAS_OP_N, CUBLAS_OP_N, K, N, O, 1.0f, w, K, 0, dout, O, 0,
         0.0f, dx, CUDA_R_16BF, K, 0, 1);
}

extern "C" void prt_linear_bwd_weight(float *dw, float *db, const prt_act *dout, const prt_act *x,
                                      size_t N, size_t K, size_t O)
{
    PRT_OP_ENTER("prt_linear_bwd_weight");
    /* dW^T (K, O) += x^T (K, N) dout (N, O), into fp32 */
    prt_cuda_gemm("prt_linear_bwd_weight", CUBLAS_OP_N, CUBLAS_OP_T, K, O, N, 1.0f, x, K, 0, dout, O, 0,
         1.0f, dw, CUDA_R_32F, K, 0, 1);
    if (db) {
        dim3 grid(grid_for(O), (unsigned)((N + 255) / 256));
        PRT_LAUNCH("prt_linear_bwd_weight", grid, 0, k_bias_grad, db, CBF(dout), N, O);
    }
}

extern "C" void prt_bias_add(prt_act *out, const prt_act *b, size_t N, size_t O)
{
    PRT_OP_ENTER("prt_bias_add");
    PRT_LAUNCH("prt_bias_add", grid_for(N * O), 0, k_add_bias, BF(out), CBF(b), N, O);
}

extern "C" void prt_bias_grad(float *db, const prt_act *dout, size_t N, size_t O)
{
    PRT_OP_ENTER("prt_bias_grad");
    dim3 grid(grid_for(O), (unsigned)((N + 255) / 256));
    PRT_LAUNCH("prt_bias_grad", grid, 0, k_bias_grad, db, CBF(dout), N, O);
}

extern "C" void prt_linear_bwd(prt_act *dx, float *dw, float *db, const prt_act *dout,
                               const prt_act *x, const prt_act *w, size_t N, size_t K, size_t O)
{
    PRT_OP_ENTER("prt_linear_bwd");
    if (dx)
        prt_linear_bwd_input(dx, dout, w, N, K, O);
    prt_linear_bwd_weight(dw, db, dout, x, N, K, O);
}

/* ---- attention ------------------------------------------------------------------ */

/* A score as the softmax takes it: soft-capped when cap > 0 (Gemma 2). */
__device__ static float capped(bf s, float cap)
{
    float x = __bfloat162float(s);
    return cap > 0.0f ? prt_softcap(x, cap) : x;
}

/* Causal softmax in place over rows of S (B*H*T rows of T); row r is
 * query position r % T and keeps keys [prt_window_first(t, W), t] (W 0:
 * all of [0, t]). The scale is already in S; the cap (0: none) is applied
 * to each score as it is read. */
__global__ static void k_softmax_causal(bf *S, size_t rows, size_t T, size_t W, float cap)
{
    size_t row = gwarp();
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    size_t t = row % T, j0 = prt_window_first(t, W);
    bf *r = S + row * T;
    float m = -INFINITY, s = 0.0f;
    for (size_t j = j0 + lane; j <= t; j += 32)
        m = fmaxf(m, capped(r[j], cap));
    m = warp_max(m);
    for (size_t j = j0 + lane; j <= t; j += 32)
        s += expf(capped(r[j], cap) - m);
    float inv = 1.0f / warp_sum(s);
    for (size_t j = lane; j < T; j += 32)
        r[j] = to_bf(j >= j0 && j <= t ? expf(capped(r[j], cap) - m) * inv : 0.0f);
}

/* dS *= 1 - tanh^2(S_raw / cap) on each row's band (the soft-cap's
 * derivative; S_raw recomputed into Sr), masked keys stay 0. */
__global__ static void k_softcap_scores_bwd(bf *dS, const bf *Sr, size_t n, size_t T, size_t W, float cap)
{
    size_t i = gtid();
    if (i >= n) return;
    size_t t = (i / T) % T, j = i % T;
    if (j >= prt_window_first(t, W) && j <= t)
        dS[i] = to_bf(__bfloat162float(dS[i]) * prt_softcap_grad(__bfloat162float(Sr[i]), cap));
}

/* dS = P (dP - rowsum(P dP)) * scale, in place over dP; masked keys 0. */
__global__ static void k_softmax_bwd(bf *dP, const bf *P, size_t rows, size_t T, float scale, size_t W)
{
    size_t row = gwarp();
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    size_t t = row % T, j0 = prt_window_first(t, W);
    bf *d = dP + row * T;
    const bf *p = P + row * T;
    float dot = 0.0f;
    for (size_t j = j0 + lane; j <= t; j += 32)
        dot += __bfloat162float(p[j]) * __bfloat162float(d[j]);
    dot = warp_sum(dot);
    for (size_t j = lane; j < T; j += 32)
        d[j] = to_bf(j >= j0 && j <= t ? __bfloat162float(p[j]) * (__bfloat162float(d[j]) - dot) * scale
                                       : 0.0f);
}

/* S_raw = scale Q K^T of every (b, h) into att (B, H, T, T). */
static void scores(bf *att, const bf *qkv, size_t B, size_t T, size_t H, size_t Hkv, size_t D,
                   prt_attn_scores sc, const char *op)
{
    size_t R = (H + 2 * Hkv) * D, G = H / Hkv;
    for (size_t h = 0; h < H; h++)   /* S^T (T, T) = K (T, D) Q^T (D, T), per sequence */
        prt_cuda_gemm(op, CUBLAS_OP_T, CUBLAS_OP_N, T, T, D, sc.scale, qkv + (H + h / G) * D, R,
             (long long)(T * R), qkv + h * D, R, (long long)(T * R), 0.0f, att + h * T * T,
             CUDA_R_16BF, T, (long long)(H * T * T), B);
}

/* Scores and causal (windowed, capped) softmax of every (b, h) into att (B, H, T, T). */
static void scores_softmax(bf *att, const bf *qkv, size_t B, size_t T, size_t H, size_t Hkv,
                           size_t D, size_t W, prt_attn_scores sc, const char *op)
{
    scores(att, qkv, B, T, H, Hkv, D, sc, op);
    PRT_LAUNCH(op, grid_rows(B * H * T), 0, k_softmax_causal, att, B * H * T, T, W, sc.cap);
}

extern "C" prt_attn_scores prt_attn_default(size_t D)
{
    prt_attn_scores sc = { 1.0f / sqrtf((float)D), 0.0f };
    return sc;
}

static void attention_fwd(const char *op, prt_act *out, prt_act *att, const prt_act *qkv, size_t B,
                          size_t T, size_t H, size_t Hkv, size_t D, size_t W, prt_attn_scores sc)
{
    size_t R = (H + 2 * Hkv) * D, G = H / Hkv, HD = H * D;
    scores_softmax(BF(att), CBF(qkv), B, T, H, Hkv, D, W, sc, op);
    for (size_t h = 0; h < H; h++)   /* O^T (D, T) = V^T (D, T) P^T (T, T) */
        prt_cuda_gemm(op, CUBLAS_OP_N, CUBLAS_OP_N, D, T, T, 1.0f,
             CBF(qkv) + (H + Hkv + h / G) * D, R, (long long)(T * R),
             CBF(att) + h * T * T, T, (long long)(H * T * T), 0.0f,
             BF(out) + h * D, CUDA_R_16BF, HD, (long long)(T * HD), B);
}

extern "C" void prt_attention_fwd(prt_act *out, prt_act *att, const prt_act *qkv,
                                  size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t W)
{
    PRT_OP_ENTER("prt_attention_fwd");
    attention_fwd("prt_attention_fwd", out, att, qkv, B, T, H, Hkv, D, W, prt_attn_default(D));
}

extern "C" void prt_attention_scores_fwd(prt_act *out, prt_act *att, const prt_act *qkv, size_t B, size_t T,
                                         size_t H, size_t Hkv, size_t D, size_t W, prt_attn_scores sc)
{
    PRT_OP_ENTER("prt_attention_scores_fwd");
    attention_fwd("prt_attention_scores_fwd", out, att, qkv, B, T, H, Hkv, D, W, sc);
}

/* dP^T (T, T) = V (T, D) dO^T (D, T) per head, then (with a mask) through
 * the dropout, then the softmax Jacobian; dV from Pd (P' with dropout,
 * else P); with a cap, S_raw recomputed into att (P is spent) and dS times
 * the cap's derivative; dQ, dK from dS. */
static void attention_bwd(const char *op, prt_act *dqkv, prt_act *datt, const prt_act *dout,
                          const prt_act *qkv, prt_act *att, bool recompute, const prt_act *attd,
                          const uint8_t *mask, float pdrop, size_t B, size_t T, size_t H, size_t Hkv,
                          size_t D, size_t W, prt_attn_scores sc)
{
    size_t R = (H + 2 * Hkv) * D, G = H / Hkv, HD = H * D;
    long long sq = (long long)(T * R), so = (long long)(T * HD), ss = (long long)(H * T * T);
    const bf *q = CBF(qkv), *dO = CBF(dout);
    bf *P = BF(att), *dP = BF(datt), *dq = BF(dqkv);
    const bf *Pd = mask ? CBF(attd) : P;
    if (recompute)
        scores_softmax(P, q, B, T, H, Hkv, D, W, sc, op);
    prt_cuda_ok(cudaMemsetAsync(dqkv, 0, B * T * R * sizeof(bf), PRT_OPS_STREAM), op, "cudaMemsetAsync");
    for (size_t h = 0; h < H; h++)   /* dP^T (T, T) = V (T, D) dO^T (D, T) */
        prt_cuda_gemm(op, CUBLAS_OP_T, CUBLAS_OP_N, T, T, D, 1.0f, q + (H + Hkv + h / G) * D, R, sq,
             dO + h * D, HD, so, 0.0f, dP + h * T * T, CUDA_R_16BF, T, ss, B);
    if (mask)
        prt_dropout_bwd(datt, datt, mask, pdrop, B * H * T * T);
    PRT_LAUNCH(op, grid_rows(B * H * T), 0, k_softmax_bwd, dP, P, B * H * T, T, sc.scale, W);
    for (size_t h = 0; h < H; h++)   /* dV^T (D, T) += dO^T (D, T) Pd (T, T) */
        prt_cuda_gemm(op, CUBLAS_OP_N, CUBLAS_OP_T, D, T, T, 1.0f, dO + h * D, HD, so, Pd + h * T * T, T, ss,
             1.0f, dq + (H + Hkv + h / G) * D, CUDA_R_16BF, R, sq, B);
    if (sc.cap > 0.0f) {   /* P is spent: S_raw into its place, then the cap's derivative */
        scores(P, q, B, T, H, Hkv, D, sc, op);
        PRT_LAUNCH(op, grid_for(B * H * T * T), 0, k_softcap_scores_bwd, dP, P, B * H * T * T, T, W, sc.cap);
    }
    for (size_t h = 0; h < H; h++) {
        size_t kq = (H + h / G) * D;
        /* dQ^T (D, T) = K^T (D, T) dS^T (T, T) */
        prt_cuda_gemm(op, CUBLAS_OP_N, CUBLAS_OP_N, D, T, T, 1.0f, q + kq, R, sq, dP + h * T * T, T, ss,
             0.0f, dq + h * D, CUDA_R_16BF, R, sq, B);
        /* dK^T (D, T) += Q^T (D, T) dS (T, T) */
        prt_cuda_gemm(op, CUBLAS_OP_N, CUBLAS_OP_T, D, T, T, 1.0f, q + h * D, R, sq, dP + h * T * T, T, ss,
             1.0f, dq + kq, CUDA_R_16BF, R, sq, B);
    }
}

extern "C" void prt_attention_bwd(prt_act *dqkv, prt_act *datt, const prt_act *dout,
                                  const prt_act *qkv, prt_act *att, bool recompute,
                                  size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t W)
{
    PRT_OP_ENTER("prt_attention_bwd");
    attention_bwd("prt_attention_bwd", dqkv, datt, dout, qkv, att, recompute, NULL, NULL, 0.0f,
                  B, T, H, Hkv, D, W, prt_attn_default(D));
}

extern "C" void prt_attention_scores_bwd(prt_act *dqkv, prt_act *datt, const prt_act *dout,
                                         const prt_act *qkv, prt_act *att, bool recompute, size_t B,
                                         size_t T, size_t H, size_t Hkv, size_t D, size_t W,
                                         prt_attn_scores sc)
{
    PRT_OP_ENTER("prt_attention_scores_bwd");
    attention_bwd("prt_attention_scores_bwd", dqkv, datt, dout, qkv, att, recompute, NULL, NULL, 0.0f,
                  B, T, H, Hkv, D, W, sc);
}

/* The two halves of prt_attention_fwd, for dropout between them. */
extern "C" void prt_attention_probs_fwd(prt_act *att, const prt_act *qkv, size_t B, size_t T, size_t H,
                                        size_t Hkv, size_t D, size_t W)
{
    PRT_OP_ENTER("prt_attention_probs_fwd");
    scores_softmax(BF(att), CBF(qkv), B, T, H, Hkv, D, W, prt_attn_default(D), "prt_attention_probs_fwd");
}

extern "C" void prt_attention_context_fwd(prt_act *out, const prt_act *attd, const prt_act *qkv, size_t B,
                                          size_t T, size_t H, size_t Hkv, size_t D)
{
    PRT_OP_ENTER("prt_attention_context_fwd");
    size_t R = (H + 2 * Hkv) * D, G = H / Hkv, HD = H * D;
    for (size_t h = 0; h < H; h++)   /* O^T (D, T) = V^T (D, T) P'^T (T, T) */
        prt_cuda_gemm("prt_attention_context_fwd", CUBLAS_OP_N, CUBLAS_OP_N, D, T, T, 1.0f,
             CBF(qkv) + (H + Hkv + h / G) * D, R, (long long)(T * R),
             CBF(attd) + h * T * T, T, (long long)(H * T * T), 0.0f,
             BF(out) + h * D, CUDA_R_16BF, HD, (long long)(T * HD), B);
}

extern "C" void prt_attention_dropout_bwd(prt_act *dqkv, prt_act *datt, const prt_act *dout,
                                          const prt_act *qkv, const prt_act *att, const prt_act *attd,
                                          const uint8_t *mask, float p, size_t B, size_t T, size_t H,
                                          size_t Hkv, size_t D, size_t W)
{
    PRT_OP_ENTER("prt_attention_dropout_bwd");
    attention_bwd("prt_attention_dropout_bwd", dqkv, datt, dout, qkv, (prt_act *)att, false, attd, mask, p,
                  B, T, H, Hkv, D, W, prt_attn_default(D));
}
