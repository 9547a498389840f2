/*
 * prt_ops.h: the runtime's compute half: layers (forward and backward),
 * AdamW, initialisation, data loading and memory helpers.
 *
 * Generated code calls these once per layer with the shapes one rank holds,
 * so every function takes explicit dimensions and never assumes it holds a
 * whole layer: a tensor-parallel rank passes its local heads, its slice of
 * the MLP and its slice of the vocabulary. Combining partial results across
 * ranks (the all-reduce after a row-parallel linear, the max and sum
 * all-reduces of vocab-parallel cross-entropy) is the caller's job, done
 * with prt_comm.h.
 *
 * Two builds, one API:
 *   CPU  (libplanrt.a)      prt_act is float; GEMMs are cblas_sgemm.
 *   CUDA (libplanrt_cuda.a) prt_act is bf16 in device memory; GEMMs are
 *        cuBLAS with fp32 accumulation; master weights, weight gradients,
 *        AdamW state and the statistics of norms and cross-entropy are fp32.
 * Pointers to tensors are device pointers in the CUDA build; int32 token
 * arrays passed to layers too. Data loading and initialisation helpers say
 * where their output lives.
 *
 * Layout conventions (row-major everywhere; N = B*T rows):
 *   activations     (N, C)
 *   linear weight   (out, in), as PyTorch: y = x W^T + b
 *   qkv             (N, (H + 2*Hkv) * D): per row the H query heads, then
 *                   the Hkv key heads, then the Hkv value heads, D each
 *   attention probs (B, H, T, T)
 *   swiglu input    (N, 2*F): per row the gate half, then the up half
 *   logits          (N, Vl): the local vocabulary slice [v0, v0+Vl)
 * Gradient conventions: weight and bias gradients are fp32 and accumulate
 * (+=), so micro-batches add up without copies; input gradients overwrite,
 * except the norms', which accumulate into dx so the residual stream's
 * gradient flows through them (as llm.c). Activations may not alias unless
 * a function says so.
 */
#ifndef PRT_OPS_H
#define PRT_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The element type of activations and of the weights a layer reads. */
#ifdef PRT_CUDA
typedef struct { uint16_t bits; } prt_bf16;  /* bfloat16, fp32's top half */
typedef prt_bf16 prt_act;
#else
typedef float prt_act;
#endif

/* ---- setup, errors and memory -------------------------------------------
 * prt_ops_init binds the device (CUDA: cudaSetDevice, cuBLAS handle and
 * workspace, the memory pool; CPU: nothing) and reads PLANRT_FAULT (an
 * unknown op name is PRT_ERR_ARG). Ops are void and asynchronous on CUDA:
 * a failure (a launch, a cuBLAS status, a copy, PLANRT_FAULT's injected
 * one) is recorded where it happens, the first since the last
 * prt_ops_sync kept, as "layer L (WHAT): OP: WHY" (prt_ops_where says
 * where the caller is). prt_ops_sync waits for the device (CUDA:
 * cudaDeviceSynchronize; CPU: returns at once) and returns the recorded
 * failure's status (PRT_ERR_CUDA, or PRT_ERR_OP for an injected one),
 * then clears the record: one call per training step. */
prt_status prt_ops_init(int device);
void       prt_ops_finalize(void);
prt_status prt_ops_sync(void);
const char *prt_ops_last_error(void);   /* text of the failure pending or just reported, or "" */
/* The layer the program is in (what: a string literal such as "attention
 * backward", kept by pointer; layer: its index in the model, -1 none;
 * what NULL: outside the layers): a store, nothing more. */
void       prt_ops_where(const char *what, int layer);

/* Device memory on CUDA, zeroed; NULL on failure. Stream-ordered on CUDA
 * (cudaMallocAsync / cudaFreeAsync on the ops' stream, from a pool that
 * keeps freed memory): neither synchronises the device, so buffers made
 * and freed inside a step never stall a rank while its collectives wait
 * on peers. A buffer may be freed once the ops' stream is ordered after
 * its last use (every collective's completion orders it so). */
void      *prt_alloc(size_t bytes);
void       prt_free(void *p);
prt_status prt_zero(void *p, size_t bytes);
prt_status prt_copy_to_device(void *dst, const void *src_host, size_t bytes);
prt_status prt_copy_to_host(void *dst_host, const void *src, size_t bytes);
prt_status prt_copy(void *dst, const void *src, size_t bytes);  /* device to device */
/* fp32 master weights -> compute copy, and back (CPU: a copy; may alias) */
void       prt_to_act(prt_act *dst, const float *src, size_t n);
void       prt_from_act(float *dst, const prt_act *src, size_t n);

/* ---- embeddings -------------------------------------------------------- */
/* out (N, C) = wte[tok - v0] for tokens in [v0, v0+Vl), else zeros. */
void prt_embedding_fwd(prt_act *out, const int32_t *tokens, const prt_act *wte,
                       size_t N, size_t C, size_t v0, size_t Vl);
/* dwte (Vl, C) += rows of dout for tokens in the slice. Rows of a padded
 * vocabulary (>= V, see prt_xent_*) are never looked up, since every token
 * is < V (prt_data_open checks): their gradient stays 0. */
void prt_embedding_bwd(float *dwte, const int32_t *tokens, const prt_act *dout,
                       size_t N, size_t C, size_t v0, size_t Vl);
/* x (B, T, C) += wpe (T, C), the learned positions; in place. */
void prt_position_fwd(prt_act *x, const prt_act *wpe, size_t B, size_t T, size_t C);
/* dwpe (T, C) += sum over the batch of dx. */
void prt_position_bwd(float *dwpe, const prt_act *dx, size_t B, size_t T, size_t C);
/* RoPE's frequencies (Su et al. 2021) and their long-context scaling, as
 * transformers' ROPE_INIT_FUNCTIONS (modeling_rope_utils.py, v4.46: the
 * default, _compute_linear_scaling_rope_parameters,
 * _compute_llama3_parameters, _compute_yarn_parameters with YaRN's
 * correction range floored and ceiled, i.e. the `truncate true` that
 * later versions made the default). ORDER RopeScalingKind (planner/plan.h). */
typedef enum { PRT_ROPE_DEFAULT, PRT_ROPE_LINEAR, PRT_ROPE_LLAMA3, PRT_ROPE_YARN } prt_rope_kind;
typedef struct {
    prt_rope_kind kind;
    double theta;                   /* the base (rope_theta) */
    double factor;                  /* linear, llama3, yarn: context stretch (> 1) */
    double low_freq_factor;         /* llama3 */
    double high_freq_factor;        /* llama3 (> low_freq_factor) */
    double beta_fast, beta_slow;    /* yarn: rotations bounding the ramp (32, 1) */
    double original_max_position;   /* llama3, yarn: the pre-training context, tokens */
    double mscale, mscale_all_dim;  /* yarn: DeepSeek's pair (transformers' rope_scaling mscale,
                                       mscale_all_dim; 0 as None: prt_rope_mscale) */
} prt_rope;
/* Unscaled RoPE of base theta. */
#define PRT_ROPE_PLAIN(th) ((prt_rope){ .kind = PRT_ROPE_DEFAULT, .theta = (th), .factor = 1 })

#ifndef PRT_HOST_DEVICE
#ifdef __CUDACC__
#define PRT_HOST_DEVICE __host__ __device__
#else
#define PRT_HOST_DEVICE
#endif
#endif
#include <math.h>
/* YaRN's dimension (of D) whose wavelength turns n times in L tokens
 * (transformers' find_correction_dim). */
static inline PRT_HOST_DEVICE double prt_rope_yarn_dim(double n, double D, double base, double L)
{
    return D * log(L / (n * 2.0 * 3.14159265358979323846)) / (2.0 * log(base));
}
/* Inverse frequency (radians per token) of pair i of a head of D: the one
 * function every RoPE site (CPU and CUDA, plain and context-parallel,
 * forward and backward) rotates with. */
static inline PRT_HOST_DEVICE double prt_rope_inv_freq(const prt_rope *r, size_t i, size_t D)
{
    const double two_pi = 2.0 * 3.14159265358979323846;
    double f = pow(r->theta, -2.0 * (double)i / (double)D);   /* theta^(-2i/D) */
    switch (r->kind) {
    case PRT_ROPE_DEFAULT: return f;
    case PRT_ROPE_LINEAR: return f / r->factor;
    case PRT_ROPE_LLAMA3: {
        double L = r->original_max_position, wavelen = two_pi / f;
        if (wavelen > L / r->low_freq_factor) return f / r->factor;    /* low frequencies: stretched */
        if (wavelen < L / r->high_freq_factor) return f;               /* high: kept */
        double s = (L / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
        return (1.0 - s) * f / r->factor + s * f;                      /* between: smooth */
    }
    case PRT_ROPE_YARN: {
        double lo = floor(prt_rope_yarn_dim(r->beta_fast, (double)D, r->theta, r->original_max_position));
        double hi = ceil(prt_rope_yarn_dim(r->beta_slow, (double)D, r->theta, r->original_max_position));
        if (lo < 0) lo = 0;
        if (hi > (double)D - 1) hi = (double)D - 1;
        if (lo == hi) hi += 0.001;                                     /* transformers' guard */
        double ramp = ((double)i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        /* ramp 0: extrapolated (kept), 1: interpolated (divided by factor) */
        return f / r->factor * ramp + f * (1.0 - ramp);
    }
    }
    return f;
}
/* YaRN's get_mscale(f, m) = 0.1 m ln f + 1, 1 for f <= 1 (transformers'
 * modeling_rope_utils.py _compute_yarn_parameters, DeepseekV3Attention's
 * yarn_get_mscale). */
static inline PRT_HOST_DEVICE double prt_rope_yarn_get_mscale(double f, double m)
{
    return f <= 1 ? 1.0 : 0.1 * m * log(f) + 1.0;
}
/* YaRN's attention factor on cos and sin (so q.k by its square), as
 * transformers' _compute_yarn_parameters (main; v4.46 knew only the
 * second form): get_mscale(factor, mscale) / get_mscale(factor,
 * mscale_all_dim) when both are non-zero (DeepSeek-V2-Lite's 0.707 and
 * 0.707 give 1), else get_mscale(factor) = 0.1 ln(factor) + 1; 1 for the
 * other kinds. */
static inline PRT_HOST_DEVICE double prt_rope_mscale(const prt_rope *r)
{
    if (r->kind != PRT_ROPE_YARN) return 1.0;
    if (r->mscale != 0 && r->mscale_all_dim != 0)
        return prt_rope_yarn_get_mscale(r->factor, r->mscale) / prt_rope_yarn_get_mscale(r->factor, r->mscale_all_dim);
    return prt_rope_yarn_get_mscale(r->factor, 1.0);
}
/* DeepSeek's attention's factor on its softmax scale qk_head_dim^-0.5
 * (transformers' DeepseekV3Attention.__init__: times
 * yarn_get_mscale(factor, mscale_all_dim)^2 when mscale_all_dim is
 * non-zero; Megatron-Core's MLASelfAttention softmax_scale likewise).
 * Multi-head latent attention applies it (prt_mla_*); standard attention
 * does not (LlamaAttention has no such factor). 1 for the other kinds. */
static inline PRT_HOST_DEVICE double prt_rope_mla_softmax_mscale(const prt_rope *r)
{
    if (r->kind != PRT_ROPE_YARN || r->mscale_all_dim == 0) return 1.0;
    double m = prt_rope_yarn_get_mscale(r->factor, r->mscale_all_dim);
    return m * m;
}

/* RoPE, interleaved pairs (2i, 2i+1) as Meta's Llama, in place on the
 * query and key heads of qkv: pair i at position t rotated by angle
 * t * prt_rope_inv_freq(rope, i, D) and scaled by prt_rope_mscale(rope). */
void prt_rope_fwd(prt_act *qkv, size_t B, size_t T, size_t H, size_t Hkv,
                  size_t D, const prt_rope *rope);
/* The transpose (inverse rotation, same scale), in place on dqkv's query
 * and key parts. */
void prt_rope_bwd(prt_act *dqkv, size_t B, size_t T, size_t H, size_t Hkv,
                  size_t D, const prt_rope *rope);
/* Context parallelism (prt_par.h): the same on a CP rank's Tl = T/cp
 * local rows of each sequence, at their global positions prt_cp_pos(t, T,
 * cp, r) (CP rank r of cp holds chunks r and 2cp-1-r of 2cp): x (B, Tl, C)
 * += wpe rows; dwpe (T, C) += at those rows; RoPE angle pos *
 * prt_rope_inv_freq. With cp 1 they are the ops above. */
void prt_position_cp_fwd(prt_act *x, const prt_act *wpe, size_t B, size_t Tl, size_t C, size_t T,
                         int cp, int r);
void prt_position_cp_bwd(float *dwpe, const prt_act *dx, size_t B, size_t Tl, size_t C, size_t T,
                         int cp, int r);
void prt_rope_cp_fwd(prt_act *qkv, size_t B, size_t Tl, size_t H, size_t Hkv, size_t D,
                     const prt_rope *rope, size_t T, int cp, int r);
void prt_rope_cp_bwd(prt_act *dqkv, size_t B, size_t Tl, size_t H, size_t Hkv, size_t D,
                     const prt_rope *rope, size_t T, int cp, int r);

/* q/k norm (Qwen3's q_norm, k_norm; Gemma 3's; the model's `qk_norm
 * rmsnorm`): in place on the query and key heads of qkv (N rows of (H +
 * 2 Hkv) D; the values untouched), each head's D values x <- x rstd (w0 +
 * w), rstd = 1/sqrt(mean(x^2) + eps), w = wq (D) for the query heads and
 * wk (D) for the key heads; w0 is 0 (Qwen3: the gain is w) or 1 (Gemma
 * 3's Gemma3RMSNorm: 1 + w, formed in fp32). xin (N, (H + Hkv) D)
 * receives the pre-norm q and k and rstd (N, H + Hkv) the fp32 scales,
 * both kept for backward. */
void prt_qk_norm_fwd(prt_act *qkv, prt_act *xin, float *rstd, const prt_act *wq, const prt_act *wk, float w0,
                     size_t N, size_t H, size_t Hkv, size_t D, float eps);
/* In place on dqkv's query and key parts: dy in, dx out; dwq, dwk (D,
 * fp32) accumulate the gradients of w (those of w0 + w: the same) (under
 * TP each rank's sum over its own heads: the caller all-reduces them over
 * TP); w0 as the forward's. */
void prt_qk_norm_bwd(prt_act *dqkv, float *dwq, float *dwk, const prt_act *xin, const prt_act *wq,
                     const prt_act *wk, float w0, const float *rstd, size_t N, size_t H, size_t Hkv, size_t D);

/* OLMo-2's q/k norm (Olmo2Attention's q_norm, k_norm; the model's `qk_norm
 * rmsnorm_projection`): an RMSNorm over each row's whole q projection
 * (heads d values) and, apart, its whole k projection (kv_heads d), one
 * gain per element. Under TP a rank holds H query and Hkv key heads of
 * Cq / D and Ck / D, so the mean of squares spans the ranks: the op comes
 * in two parts each way with the caller's all-reduce (sum) over TP of
 * N x 2 fp32 between (without TP the same calls, no all-reduce).
 * qkv: N rows of (H + 2 Hkv) D, in place on the q and k parts (the values
 * untouched); wq (H D), wk (Hkv D): this rank's slices of the gains.
 * prt_qk_proj_sumsq: ss (N, 2) <- each row's sum of squares of its q
 * part, [2i], and of its k part, [2i + 1], over this rank's heads.
 * prt_qk_proj_norm_fwd, once ss is summed over TP: rstd (N, 2) = 1 /
 * sqrt(ss / Cq + eps) (k: / Ck; rstd may be ss itself), xin (N, (H + Hkv)
 * D) <- the pre-norm q and k, q and k <- x rstd w. xin and rstd are kept
 * for backward. */
void prt_qk_proj_sumsq(float *ss, const prt_act *qkv, size_t N, size_t H, size_t Hkv, size_t D);
void prt_qk_proj_norm_fwd(prt_act *qkv, prt_act *xin, float *rstd, const float *ss, const prt_act *wq,
                          const prt_act *wk, size_t N, size_t H, size_t Hkv, size_t D, size_t Cq, size_t Ck,
                          float eps);
/* Backward. prt_qk_proj_dot: dot (N, 2) <- each row's sum over this
 * rank's q (k) elements of dy w x rstd (dqkv's q and k parts hold dy).
 * prt_qk_proj_norm_bwd, once dot is summed over TP: in place dy -> dx =
 * rstd (dy w - n dot / Cq), n = x rstd (k: / Ck); dwq (H D), dwk (Hkv D)
 * fp32 accumulate sum over rows of dy n: this rank's own gain slices,
 * whole sums (no reduction over TP). */
void prt_qk_proj_dot(float *dot, const prt_act *dqkv, const prt_act *xin, const prt_act *wq, const prt_act *wk,
                     const float *rstd, size_t N, size_t H, size_t Hkv, size_t D);
void prt_qk_proj_norm_bwd(prt_act *dqkv, float *dwq, float *dwk, const prt_act *xin, const prt_act *wq,
                          const prt_act *wk, const float *rstd, const float *dot, size_t N, size_t H, size_t Hkv,
                          size_t D, size_t Cq, size_t Ck);

/* ---- norms --------------------------------------------------------------
 * mean, rstd (N) are fp32 and kept for backward. dx, dw, db accumulate. */
void prt_layernorm_fwd(prt_act *out, float *mean, float *rstd, const prt_act *x,
                       const prt_act *w, const prt_act *b, size_t N, size_t C, float eps);
void prt_layernorm_bwd(prt_act *dx, float *dw, float *db, const prt_act *dout,
                       const prt_act *x, const prt_act *w, const float *mean,
                       const float *rstd, size_t N, size_t C);
void prt_rmsnorm_fwd(prt_act *out, float *rstd, const prt_act *x, const prt_act *w,
                     size_t N, size_t C, float eps);
void prt_rmsnorm_bwd(prt_act *dx, float *dw, const prt_act *dout, const prt_act *x,
                     const prt_act *w, const float *rstd, size_t N, size_t C);

/* ---- linear -------------------------------------------------------------
 * out (N, O) = x (N, K) W^T + b; W (O, K); b (O) or NULL. Column-parallel:
 * O is the local slice; row-parallel: K is, out holds partial sums and b is
 * passed on one TP rank only. bwd_input and bwd_weight are the two halves
 * of the backward (zero-bubble schedules run them apart); prt_linear_bwd
 * skips the input half when dx is NULL. */
void prt_linear_fwd(prt_act *out, const prt_act *x, const prt_act *w, const prt_act *b,
                    size_t N, size_t K, size_t O);
void prt_linear_bwd_input(prt_act *dx, const prt_act *dout, const prt_act *w,
                          size_t N, size_t K, size_t O);
void prt_linear_bwd_weight(float *dw, float *db, const prt_act *dout, const prt_act *x,
                           size_t N, size_t K, size_t O);
void prt_linear_bwd(prt_act *dx, float *dw, float *db, const prt_act *dout,
                    const prt_act *x, const prt_act *w, size_t N, size_t K, size_t O);
/* A linear's bias apart from its GEMM (the FP8 linears': the GEMM's
 * output is the scaled product alone): out (N, O) += b in every row;
 * db (O) += the column sums of dout (N, O), in fp32. */
void prt_bias_add(prt_act *out, const prt_act *b, size_t N, size_t O);
void prt_bias_grad(float *db, const prt_act *dout, size_t N, size_t O);

/* ---- attention ----------------------------------------------------------
 * Causal multi-head / grouped-query attention on the local heads: H query
 * heads, Hkv key/value heads (H % Hkv == 0, group G = H/Hkv), head size D,
 * scale 1/sqrt(D). W is the sliding window (Mistral): query t attends to
 * keys [t - W + 1, t], itself included; W 0 (or >= T) is full causal
 * attention. The masked scores are exact zeros of P, so the T x T buffers
 * are kept whole. out (N, H*D); att (B, H, T, T) receives the softmax
 * probabilities (kept for backward under recompute none; under selective
 * it may be a scratch buffer shared by all layers). Under TP a rank's fused
 * QKV weight is three row blocks of the global one: its query heads, its
 * key heads, its value heads (tests/test_ops.c, test_tp_attention_mlp). */
void prt_attention_fwd(prt_act *out, prt_act *att, const prt_act *qkv,
                       size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t W);
/* dqkv (N, (H+2Hkv)D) is overwritten; datt (B, H, T, T) is scratch. With
 * recompute, att is first rebuilt from qkv (selective recomputation). */
void prt_attention_bwd(prt_act *dqkv, prt_act *datt, const prt_act *dout,
                       const prt_act *qkv, prt_act *att, bool recompute,
                       size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t W);

/* How the scores are formed before the mask and the softmax: S = scale Q
 * K^T, then with cap > 0 S = cap tanh(S / cap) (Gemma 2's
 * attn_logit_softcapping, 50; FlashAttention-2's softcap). scale is
 * 1/sqrt(D) (prt_attn_default) or Gemma's 1/sqrt(query_pre_attn_scalar).
 * prt_attention_fwd/bwd are these with prt_attn_default(D). With a cap the
 * backward recomputes S_raw = scale Q K^T into att once P has been used
 * (one more GEMM, nothing more kept): att leaves it holding S_raw. */
typedef struct {
    float scale;   /* multiplies Q K^T */
    float cap;     /* soft-cap of the scaled scores; 0: none */
} prt_attn_scores;
prt_attn_scores prt_attn_default(size_t D);
void prt_attention_scores_fwd(prt_act *out, prt_act *att, const prt_act *qkv, size_t B, size_t T,
                              size_t H, size_t Hkv, size_t D, size_t W, prt_attn_scores sc);
void prt_attention_scores_bwd(prt_act *dqkv, prt_act *datt, const prt_act *dout, const prt_act *qkv,
                              prt_act *att, bool recompute, size_t B, size_t T, size_t H, size_t Hkv,
                              size_t D, size_t W, prt_attn_scores sc);

/* Attention with dropout on its probabilities, in three pieces: the
 * probabilities alone into att (prt_attention_fwd's first half), then
 * prt_dropout_probs_fwd(attd, mask, att, ...), then the context out = attd V
 * (its second half). The backward reads att (P, for the softmax), attd (P',
 * for dV) and the mask: dV += P'^T dO, dP = (dO V^T) * mask / (1 - p), dS
 * from P and dP. Under selective recomputation the caller rebuilds att,
 * attd and the mask first (the same key draws the same mask). */
void prt_attention_probs_fwd(prt_act *att, const prt_act *qkv, size_t B, size_t T, size_t H,
                             size_t Hkv, size_t D, size_t W);
void prt_attention_context_fwd(prt_act *out, const prt_act *attd, const prt_act *qkv, size_t B,
                               size_t T, size_t H, size_t Hkv, size_t D);
void prt_attention_dropout_bwd(prt_act *dqkv, prt_act *datt, const prt_act *dout, const prt_act *qkv,
                               const prt_act *att, const prt_act *attd, const uint8_t *mask, float p,
                               size_t B, size_t T, size_t H, size_t Hkv, size_t D, size_t W);

/* ---- multi-head latent attention ---------------------------------------
 * DeepSeek-V2's MLA (the model's `attention { kind mla }`) on one TP rank,
 * composed from the linear, RMSNorm, RoPE and attention ops above
 * (runtime/ops/mla.c): from x (N = B T rows of C, the pre-norm's output)
 * to o (N, H v), the o_proj's input. Weights are (O, K) row-major as the
 * linear op's; H the rank's heads. One source for both builds: the
 * layout moves are prt_copy_blocks, the rest the build's own ops. */
typedef struct {
    size_t B, T, H, C;          /* sequences, tokens each, this rank's heads, model width */
    size_t q_lora, kv_lora;     /* latent widths; q_lora 0: q_proj, no query latent */
    size_t rope, nope, v;       /* qk_rope_head_dim, qk_nope_head_dim, v_head_dim */
    size_t W;                   /* sliding window, 0: full causal */
    float eps;                  /* the latent norms' epsilon */
    const prt_rope *rope_params;
} prt_mla_dims;
typedef struct {
    const prt_act *wqa, *bqa, *gqa;     /* q_a_proj (q_lora, C), its bias or NULL, q_a_layernorm (q_lora) */
    const prt_act *wqb;                 /* q_b_proj (H (nope + rope), q_lora), or q_proj (H (nope + rope), C) */
    const prt_act *wkva, *bkva, *gkva;  /* kv_a_proj_with_mqa (kv_lora + rope, C), its bias or NULL,
                                           kv_a_layernorm (kv_lora) */
    const prt_act *wkvb;                /* kv_b_proj (H (nope + v), kv_lora) */
} prt_mla_w;
typedef struct {   /* fp32 gradients of prt_mla_w's tensors, accumulated (bqa, bkva may be NULL) */
    float *wqa, *bqa, *gqa, *wqb, *wkva, *bkva, *gkva, *wkvb;
} prt_mla_grad;
typedef struct {   /* what the forward keeps for the backward; D = max(nope + rope, v) */
    prt_act *qa, *qn;   /* (N, q_lora): q_a's output and its norm's (unused without q_lora) */
    float   *qr;        /* (N): the q latent norm's rstd */
    prt_act *kva;       /* (N, kv_lora + rope): kv_a's output */
    prt_act *kvl, *kvn; /* (N, kv_lora): the latent, and normalised */
    float   *kvr;       /* (N) */
    prt_act *qkv;       /* (N, 3 H D): the heads zero-padded to D, the attention op's input */
    prt_act *att;       /* (B, H, T, T): the probabilities */
    prt_act *opad;      /* (N, H D): the attention's padded output */
} prt_mla_kept;
/* Elements of the workspace ws both passes need (the larger). */
size_t prt_mla_ws_elems(const prt_mla_dims *d);
void prt_mla_fwd(prt_act *o, prt_mla_kept *k, prt_act *ws, const prt_act *x, const prt_mla_w *w,
                 const prt_mla_dims *d);
/* dx (N, C) is overwritten with this rank's share of the input gradient
 * (under TP the caller all-reduces it, and the replicated q_a, kv_a and
 * latent norms' gradients once a step: each rank back-propagates its
 * heads only); the weight gradients accumulate. */
void prt_mla_bwd(prt_act *dx, prt_mla_grad *g, prt_act *ws, const prt_act *dout, const prt_act *x,
                 const prt_mla_kept *k, const prt_mla_w *w, const prt_mla_dims *d);

/* ---- activations and residual (n elements; dx overwrites) -------------- */
void prt_gelu_fwd(prt_act *out, const prt_act *x, size_t n);    /* tanh form, GPT-2 */
void prt_gelu_bwd(prt_act *dx, const prt_act *x, const prt_act *dout, size_t n);
void prt_relu_fwd(prt_act *out, const prt_act *x, size_t n);
void prt_relu_bwd(prt_act *dx, const prt_act *x, const prt_act *dout, size_t n);
/* out (N, F) = silu(gate) * up, gu (N, 2F) = [gate | up] (Shazeer 2020). */
void prt_swiglu_fwd(prt_act *out, const prt_act *gu, size_t N, size_t F);
void prt_swiglu_bwd(prt_act *dgu, const prt_act *gu, const prt_act *dout, size_t N, size_t F);
/* out (N, F) = gelu(gate) * up with prt_gelu_fwd's tanh GELU, gu (N, 2F) =
 * [gate | up]: GeGLU (Shazeer 2020), Gemma's MLP. */
void prt_geglu_fwd(prt_act *out, const prt_act *gu, size_t N, size_t F);
void prt_geglu_bwd(prt_act *dgu, const prt_act *gu, const prt_act *dout, size_t N, size_t F);
/* The soft-cap cap tanh(x / cap) (Gemma 2: attention scores, 50; final
 * logits, 30) and its derivative at x, 1 - tanh^2(x / cap); the one
 * formula both targets' kernels and the tests take (callable from CUDA
 * kernels too). */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline float prt_softcap(float x, float cap)
{
    return cap * tanhf(x / cap);
}
#ifdef __CUDACC__
__host__ __device__
#endif
static inline float prt_softcap_grad(float x, float cap)
{
    float t = tanhf(x / cap);
    return 1.0f - t * t;
}
/* The first key query t attends to under a window of W (0: full causal):
 * the one rule both targets' kernels and the tests take the mask from
 * (callable from CUDA kernels too). */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline size_t prt_window_first(size_t t, size_t W)
{
    return W && t + 1 > W ? t + 1 - W : 0;
}
/* ---- dropout --------------------------------------------------------------
 * Inverted dropout (Srivastava et al. 2014; the kept elements are scaled by
 * 1/(1-p) in training, so nothing changes at inference), as GPT-2 and
 * Megatron-LM place it: on the attention probabilities and on each
 * residual branch (attention and MLP outputs before the residual add, the
 * embedding output). Whether an element is kept is a function of its
 * global coordinates alone, never of the rank that holds it, so every
 * layout (DP, TP with or without SP, PP, ZeRO, recomputation) draws the
 * same mask for the same element and a recomputation redraws it exactly:
 * Philox 4x32-10 (Salmon et al. 2011) with key prt_dropout_stream(seed,
 * step, layer, site) and counter (column / 4, row, global sequence,
 * head); the element takes word column % 4 and is kept iff it is >=
 * prt_dropout_threshold(p) (probability 1 - p to 2^-32). Rows are token
 * positions (residual sites) or query positions (probabilities); columns
 * are features of the full, un-split width (residual) or key positions
 * (probabilities); heads are global heads (probabilities; 0 otherwise).
 * Masks are one byte an element (1 kept, 0 dropped), kept for the
 * backward as planner/model.c counts them. */
typedef enum {
    PRT_DROPOUT_PROBS,   /* an attention layer's softmax probabilities */
    PRT_DROPOUT_OUTPUT,  /* a layer's output branch: attention or MLP before the residual add, embedding */
} prt_dropout_site;

typedef struct {
    uint64_t seed;    /* the run's seed */
    uint64_t step;    /* the training step, 0-based */
    uint32_t layer;   /* the layer's index in the whole model */
    prt_dropout_site site;
    float    p;       /* the drop probability, 0 <= p < 1 */
} prt_dropout_key;

/* One Philox 4x32-10 block in place: 10 rounds of multiply-xor with the
 * constants of Random123 (callable from CUDA kernels too). */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline void prt_philox4x32(uint32_t ctr[4], uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * ctr[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * ctr[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ ctr[1] ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ ctr[3] ^ k1;
        ctr[0] = n0;
        ctr[1] = (uint32_t)p1;
        ctr[2] = n2;
        ctr[3] = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* splitmix64's finaliser (Steele et al. 2014): one 64-bit mixing step. */
static inline uint64_t prt_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The Philox key of one dropout site of one step: (seed, step, layer,
 * site) mixed into 64 bits, so each site draws an independent stream. */
static inline uint64_t prt_dropout_stream(const prt_dropout_key *k)
{
    uint64_t z = prt_mix64(k->seed + 0x9E3779B97F4A7C15ull);
    z = prt_mix64(z ^ k->step);
    return prt_mix64(z ^ ((uint64_t)k->layer << 8 | (uint64_t)k->site));
}

/* The 32-bit threshold a uniform word must reach to keep its element:
 * round(p * 2^32), so p 0 keeps everything. */
static inline uint32_t prt_dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0 + 0.5;
    return t <= 0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

/* y (rows, C) = dropout(x): the rows [row0, row0 + rows) of a micro-batch of
 * T-token sequences whose first is sequence seq0 of the global batch (row
 * n is position n % T of sequence seq0 + n / T); C the full width. mask
 * (rows, C) is written; y may alias x. */
void prt_dropout_fwd(prt_act *y, uint8_t *mask, const prt_act *x, const prt_dropout_key *k,
                     size_t rows, size_t C, size_t T, size_t seq0, size_t row0);
/* The attention probabilities att (B, H, T, T) of global heads [head0,
 * head0 + H) of sequences [seq0, seq0 + B), dropped into y (may alias att);
 * mask (B, H, T, T). Keys after the query are 0 in y and in the mask. */
void prt_dropout_probs_fwd(prt_act *y, uint8_t *mask, const prt_act *att, const prt_dropout_key *k,
                           size_t B, size_t H, size_t T, size_t seq0, size_t head0);
/* dx = dy * mask / (1 - p), n elements; dx may alias dy. */
void prt_dropout_bwd(prt_act *dx, const prt_act *dy, const uint8_t *mask, float p, size_t n);

/* out = a + b; out may alias a or b. Backward: the gradient goes to both. */
void prt_residual_add(prt_act *out, const prt_act *a, const prt_act *b, size_t n);
/* dst += src, for gradients that meet (e.g. tied embeddings, branches). */
void prt_add_inplace(prt_act *dst, const prt_act *src, size_t n);
/* Strided blocks, the layout moves of an op composed from others (MLA's
 * heads padded into the attention op's layout and back): for i < n and
 * c < len, over j < m in order,
 *   dst[i dn + j dj + c] = (acc ? itself : 0) + scale src[i sn + j sj + c]
 * with dj 0 the sum over j lands in one block (in j order, fp32, stored
 * once: both builds round alike), and sj 0 one source block goes to m.
 * Blocks of different (i, j) must not overlap unless dj is 0. */
void prt_copy_blocks(prt_act *dst, size_t dn, size_t dj, const prt_act *src, size_t sn, size_t sj,
                     size_t n, size_t m, size_t len, float scale, bool acc);
/* out = a * x + b, n elements; out may alias x. Gemma's embedding scale
 * (a = sqrt(C), b = 0, forward and backward alike) and its norm gain
 * 1 + w (a = 1, b = 1), both exact in their roles. */
void prt_affine(prt_act *out, const prt_act *x, float a, float b, size_t n);
/* dst += src on fp32 gradients, n elements (zb-h1: a B pass's norm
 * gradients, kept aside, added into the layer's gradients by its W pass). */
void prt_grad_add(float *dst, const float *src, size_t n);

/* ---- softmax cross-entropy, in pieces for vocab-parallel TP --------------
 * This rank holds columns [v0, v0 + Vl) of the (N, Vp) logits; columns with
 * global index >= V (the real vocabulary) are padding (Vp = V rounded up so
 * that TP divides it, Megatron's --make-vocab-size-divisible-by) and are
 * masked: they take no probability and get a zero gradient, so a padded
 * vocabulary trains exactly like the unpadded one. A slice may be all
 * padding (its max is -inf, its sums 0).
 * 1. prt_xent_max: mx (N) = max over the local real logits; all-reduce MAX.
 * 2. prt_xent_sumexp: se (N) = sum exp(l - mx), tgt (N) = the target's
 *    logit if this rank holds it, else 0; all-reduce SUM both.
 * 3. prt_xent_loss: loss (N) = log(se) + mx - tgt (nats).
 * 4. prt_xent_bwd: dlogits = scale * (softmax - onehot), 0 on padding; may
 *    alias logits; scale is usually 1 / (tokens in the global batch).
 * Targets < 0 are ignored (loss 0, gradient 0); targets must be < V. mx,
 * se, tgt, loss are fp32 device arrays on CUDA. */
void prt_xent_max(float *mx, const prt_act *logits, size_t N, size_t Vl, size_t v0, size_t V);
void prt_xent_sumexp(float *se, float *tgt, const prt_act *logits, const float *mx,
                     const int32_t *targets, size_t N, size_t Vl, size_t v0, size_t V);
void prt_xent_loss(float *loss, const float *mx, const float *se, const float *tgt,
                   const int32_t *targets, size_t N);
void prt_xent_bwd(prt_act *dlogits, const prt_act *logits, const float *mx,
                  const float *se, const int32_t *targets, size_t N, size_t Vl,
                  size_t v0, size_t V, float scale);
/* Gemma 2's final_logit_softcapping: logits = cap tanh(logits / cap) in
 * place, n elements, after the lm_head's GEMM and before step 1 (padding
 * columns too: they stay masked). prt_xent_softcap_bwd is prt_xent_bwd
 * followed by the cap's derivative, 1 - (y / cap)^2 with y the capped
 * logit it reads, so nothing more is kept; it may alias logits too. */
void prt_softcap_fwd(prt_act *x, size_t n, float cap);
void prt_xent_softcap_bwd(prt_act *dlogits, const prt_act *logits, const float *mx,
                          const float *se, const int32_t *targets, size_t N, size_t Vl,
                          size_t v0, size_t V, float scale, float cap);
/* The real (unpadded) columns of the slice [v0, v0 + Vl) of a vocabulary of
 * V: min(Vl, V - v0), 0 when the slice is all padding. The one place both
 * targets' kernels take the mask from. */
static inline size_t prt_xent_real_cols(size_t Vl, size_t v0, size_t V)
{
    return V <= v0 ? 0 : V - v0 < Vl ? V - v0 : Vl;
}

/* ---- mixture of experts (issue 17; runtime/ops/moe.c, cuda/ops_moe.cu) --
 * A MoE layer on N = B*T tokens (B whole sequences of T), E experts, top-k:
 *   1. prt_moe_router_fwd: logits (N, E) fp32 = x Wr^T, Wr (E, C), no bias.
 *   2. prt_moe_topk_fwd: idx, w (N, k): the k largest logits, ties to the
 *      lower expert index; w by gate (PRT_MOE_* flags): the scores s =
 *      softmax (exp) or sigmoid of the selected logits, divided under
 *      PRT_MOE_NORM by their sum (softmax|norm: the softmax over those k,
 *      Mixtral's order), else softmax's by the sum over all E (Qwen2-MoE)
 *      and sigmoid's by 1. With groups G > 1 (grouped routing, DeepSeek-V3's
 *      n_group / topk_group) only the experts of the top_groups best of G
 *      groups of E/G compete, a group ranked by the sum of its k/top_groups
 *      (at least 1) largest scores (PRT_MOE_GROUP_MAX: by its largest, as
 *      DeepSeek-V2's group_limited_greedy), ties to the lower group; the
 *      weights and the backward are the gate's as without groups. A bias
 *      (E, fp32; NULL: none; aux-loss-free balancing, DeepSeek-V3's
 *      e_score_correction_bias) is added to the scores for the choice of
 *      experts and the ranking of groups only, never to the weights. Every
 *      weight is then times scale (routed_scale: DeepSeek's
 *      routed_scaling_factor; 1: none); prt_moe_topk_bwd takes the same
 *      scale and the scaled w.
 *   3. prt_moe_route: row (N, k) = the token's row in the expert-sorted
 *      buffer (experts in order, each expert's rows in (token, k) order), or
 *      -1 when capacity dropped it; counts (E) = rows per expert. Capacity
 *      cap (prt_moe_capacity, 0: dropless) is per expert per sequence, the
 *      first cap tokens in token order kept.
 *   4. prt_moe_dispatch: xe (R, C), R = sum counts, gets the token rows.
 *      Under EP the buffer's block of experts [r*E/ep, (r+1)*E/ep) goes to
 *      EP rank r by prt_all_to_all_v (per-expert counts exchanged first);
 *      the receiver puts rows into expert order with prt_moe_sort_rows and
 *      prt_moe_recv_order's permutation, and back with prt_moe_unsort_rows.
 *   5. The experts: the caller's MLP (prt_linear_*) on each expert's rows.
 *   6. prt_moe_combine: out (N, C) = sum_j w_j ye[row_j] (k order; dropped
 *      rows add nothing). Overwrites.
 *   7. prt_moe_aux_loss: loss (B) per sequence = coeff * E * sum_e f_e P_e
 *      (Switch Transformer eq. 4): f_e the fraction of the sequence's T*k
 *      top-k assignments (before capacity) to e, P_e the mean over its
 *      tokens of the full softmax over E (PRT_MOE_SIGMOID: of the E
 *      sigmoids normalised to sum 1, as Megatron-Core).
 * Backward in reverse; dx of dispatch and dye/dw of combine and dlogits of
 * topk overwrite; prt_moe_aux_bwd adds scale * d(sum_b loss_b)/dlogits;
 * prt_moe_router_bwd accumulates into dx (a branch of the layer input) and
 * dWr. logits, w, dw, dlogits, loss are fp32; idx, row, counts int32; all
 * device arrays on CUDA. Every sum over a token's k rows runs in k order,
 * so the result does not depend on which rank holds which expert. */
/* The gate's flags (plan keys score, norm_topk_prob, route_group_score):
 * softmax unless PRT_MOE_SIGMOID; PRT_MOE_NORM divides the top-k scores by
 * their sum; PRT_MOE_GROUP_MAX ranks a group by its largest score. */
enum { PRT_MOE_SIGMOID = 1, PRT_MOE_NORM = 2, PRT_MOE_GROUP_MAX = 4 };
void prt_moe_router_fwd(float *logits, const prt_act *x, const prt_act *wr,
                        size_t N, size_t C, size_t E);
void prt_moe_router_bwd(prt_act *dx, float *dwr, const float *dlogits, const prt_act *x,
                        const prt_act *wr, size_t N, size_t C, size_t E);
void prt_moe_topk_fwd(int32_t *idx, float *w, const float *logits, size_t N, size_t E,
                      size_t k, int gate, size_t groups, size_t top_groups, const float *bias,
                      float scale);
void prt_moe_topk_bwd(float *dlogits, const float *dw, const float *w, const int32_t *idx,
                      const float *logits, size_t N, size_t E, size_t k, int gate, float scale);
void prt_moe_route(int32_t *row, int32_t *counts, const int32_t *idx, size_t B, size_t T,
                   size_t E, size_t k, size_t cap);
void prt_moe_dispatch(prt_act *xe, const prt_act *x, const int32_t *row, size_t N,
                      size_t C, size_t k);
void prt_moe_dispatch_bwd(prt_act *dx, const prt_act *dxe, const int32_t *row, size_t N,
                          size_t C, size_t k);
void prt_moe_combine(prt_act *out, const prt_act *ye, const int32_t *row, const float *w,
                     size_t N, size_t C, size_t k);
void prt_moe_combine_bwd(prt_act *dye, float *dw, const prt_act *dout, const prt_act *ye,
                         const int32_t *row, const float *w, size_t N, size_t C, size_t k);
void prt_moe_aux_loss(float *loss, const float *logits, const int32_t *idx, size_t B,
                      size_t T, size_t E, size_t k, float coeff, int gate);
void prt_moe_aux_bwd(float *dlogits, const float *logits, const int32_t *idx, size_t B,
                     size_t T, size_t E, size_t k, float coeff, float scale, int gate);
/* Aux-loss-free balancing (expert_bias; DeepSeek-V3's e_score_correction_bias,
 * Megatron-Core's --moe-router-enable-expert-bias): the bias (E, fp32) that
 * prt_moe_topk_fwd adds for the choice only is no parameter. Each forward
 * adds its rows per expert to an fp32 accumulator (prt_moe_count_add: acc
 * += counts); after the step the caller sums the accumulators over every
 * rank that routed other tokens, and prt_moe_bias_update moves each bias by
 * rate * sign(mean(c) - c_e) (Megatron-Core's get_updated_expert_bias) and
 * zeroes c. Device arrays on CUDA. */
void prt_moe_count_add(float *acc, const int32_t *counts, size_t E);
void prt_moe_bias_update(float *bias, float *counts, size_t E, float rate);
/* The shared experts' gate (Qwen2-MoE's shared_expert_gate): z (N) fp32
 * the gate's logits (prt_moe_router_fwd with E = 1), g (N) = sigmoid(z),
 * out (N, C) += g_t ys_t with ys the shared experts' sum. Backward: dys
 * (N, C) = g_t dy_t and dz (N) = g (1 - g) sum_c dy ys, both overwritten;
 * with ys a partial sum over TP so is dz (the caller sums it over TP). */
void prt_moe_shared_gate_fwd(float *g, prt_act *out, const prt_act *ys, const float *z, size_t N,
                             size_t C);
void prt_moe_shared_gate_bwd(float *dz, prt_act *dys, const prt_act *dy, const prt_act *ys,
                             const float *g, size_t N, size_t C);
/* out (R, C): out[i] = in[perm[i]]; unsort: out[perm[i]] = in[i]. */
void prt_moe_sort_rows(prt_act *out, const prt_act *in, const int32_t *perm, size_t R,
                       size_t C);
void prt_moe_unsort_rows(prt_act *out, const prt_act *in, const int32_t *perm, size_t R,
                         size_t C);
/* Capacity per expert per sequence (GShard's groups are sequences, so it
 * depends on neither dp nor the micro-batch): ceil(factor * T * k / E)
 * tokens; 0 (dropless) when factor <= 0. Host code of both builds. */
static inline size_t prt_moe_capacity(double factor, size_t T, size_t k, size_t E)
{
    if (!(factor > 0.0) || !E)
        return 0;
    double c = factor * (double)T * (double)k / (double)E;
    size_t f = (size_t)c;
    return (double)f < c ? f + 1 : f;
}
/* The receiver's permutation (host arrays): rows arrive from EP rank s as
 * cnt[s*El + 0 .. El) rows of its local experts in order; perm (R) lists,
 * expert by expert and within an expert by source rank, where each row
 * arrived, so rows of an expert run in (source rank, token, k) order. */
static inline void prt_moe_recv_order(int32_t *perm, const int32_t *cnt, size_t ep,
                                      size_t El)
{
    size_t i = 0;
    for (size_t le = 0; le < El; le++)
        for (size_t s = 0; s < ep; s++) {
            size_t at = 0;   /* source-major offset of (s, le) */
            for (size_t u = 0; u < s * El + le; u++)
                at += (size_t)cnt[u];
            for (int32_t c = 0; c < cnt[s * El + le]; c++)
                perm[i++] = (int32_t)(at + (size_t)c);
        }
}

/* ---- FP8 numerics (issue 27) ----------------------------------------------
 * The two OCP 8-bit formats (OCP 8-bit Floating Point Specification (OFP8)
 * rev. 1.0, 2023, section 5, table 1):
 *   E4M3 ("fn"): bias 7, no infinities, max 448 = 1.75 * 2^8, NaN is
 *        S.1111.111 (0x7F/0xFF), smallest subnormal 2^-9;
 *   E5M2: bias 15, IEEE-like: +-inf S.11111.00, NaNs S.11111.{01,10,11},
 *        max 57344 = 1.75 * 2^15, smallest subnormal 2^-16.
 * Encoding rounds to nearest, ties to even, on normals and subnormals
 * alike. PRT_FP8_SAT clamps what lies beyond +-max (infinities included)
 * to +-max first, as Transformer Engine's casts (__NV_SATFINITE) and
 * torchao's to_fp8_saturated (x.clamp(-max, max) before .to(float8)) do;
 * PRT_FP8_NONSAT is the plain conversion (ml_dtypes, torch's .to()):
 * overflow gives inf (E5M2) or NaN (E4M3, which has no inf). NaN in gives
 * NaN out, its sign kept (E5M2: S.11111.10 whatever the payload, as
 * ml_dtypes). Decoding is exact: every code is an fp32 value. The scalar
 * codec and the scale rule are inline so the CUDA kernels take the same
 * rules (runtime/cuda/ops_fp8.cu); the recipes' host side is
 * runtime/ops/fp8_recipe.c (both builds), the matrices' runtime/ops/fp8.c. */
typedef enum {
    PRT_FP8_E4M3,   /* 4 exponent bits, 3 mantissa bits, "fn" (no inf) */
    PRT_FP8_E5M2,   /* 5 exponent bits, 2 mantissa bits, IEEE inf and NaN */
} prt_fp8_format;

typedef enum {
    PRT_FP8_SAT,    /* beyond +-max (and +-inf) becomes +-max */
    PRT_FP8_NONSAT, /* beyond max rounds to inf (E5M2) or NaN (E4M3) */
} prt_fp8_mode;

#ifdef __CUDACC__
#define PRT_FP8_HD __host__ __device__
#else
#define PRT_FP8_HD
#endif

static inline PRT_FP8_HD uint32_t prt_f32_bits(float f)
{
    union { float f; uint32_t u; } v;
    v.f = f;
    return v.u;
}

static inline PRT_FP8_HD float prt_f32_from_bits(uint32_t u)
{
    union { float f; uint32_t u; } v;
    v.u = u;
    return v.f;
}

/* The largest finite value: 448 (E4M3) or 57344 (E5M2). */
static inline PRT_FP8_HD float prt_fp8_max(prt_fp8_format f)
{
    return f == PRT_FP8_E4M3 ? 448.0f : 57344.0f;
}

/* fp32 -> code: round to nearest even with integer arithmetic on the fp32
 * bits (the 24-bit significand shifted right to the format's 3 or 2
 * bits, further for subnormals, the dropped bits deciding the rounding;
 * a carry out of the mantissa moves into the exponent as it should). */
static inline PRT_FP8_HD uint8_t prt_fp8_encode(float x, prt_fp8_format f, prt_fp8_mode mode)
{
    const int      mbits    = f == PRT_FP8_E4M3 ? 3 : 2;
    const int      bias     = f == PRT_FP8_E4M3 ? 7 : 15;
    const uint32_t max_code = f == PRT_FP8_E4M3 ? 0x7Eu : 0x7Bu;  /* 448, 57344 */
    const uint32_t big_code = f == PRT_FP8_E4M3 ? 0x7Fu : 0x7Cu;  /* overflow: NaN, inf */
    uint32_t bits = prt_f32_bits(x);
    uint32_t sign = (bits >> 24) & 0x80u;
    uint32_t abs  = bits & 0x7FFFFFFFu;
    if (abs > 0x7F800000u)     /* NaN: E4M3's only NaN; E5M2's quiet NaN, any payload (ml_dtypes) */
        return (uint8_t)(sign | (f == PRT_FP8_E4M3 ? 0x7Fu : 0x7Eu));
    if (mode == PRT_FP8_SAT && abs > prt_f32_bits(prt_fp8_max(f)))
        return (uint8_t)(sign | max_code);
    if (abs == 0x7F800000u)
        return (uint8_t)(sign | big_code);
    int e = (int)(abs >> 23) - 127;       /* unbiased; fp32 subnormals round to 0 below */
    if (e < -126)
        return (uint8_t)sign;
    int emin = 1 - bias;                  /* the format's smallest normal exponent */
    int shift = 23 - mbits + (e < emin ? emin - e : 0);
    if (shift > 25)                       /* below half the smallest subnormal */
        return (uint8_t)sign;
    uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    uint32_t q = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    uint32_t code = e < emin ? q : ((uint32_t)(e + bias) << mbits) | (q & ((1u << mbits) - 1u));
    if (rest > half || (rest == half && (q & 1u)))
        code++;
    if (code > max_code)                  /* only NONSAT reaches here */
        code = big_code;
    return (uint8_t)(sign | code);
}

/* code -> fp32, exact (subnormals are mant * 2^(emin - mbits)). */
static inline PRT_FP8_HD float prt_fp8_decode(uint8_t c, prt_fp8_format f)
{
    const int mbits = f == PRT_FP8_E4M3 ? 3 : 2;
    const int bias  = f == PRT_FP8_E4M3 ? 7 : 15;
    uint32_t sign = (uint32_t)(c & 0x80u) << 24;
    uint32_t mag  = c & 0x7Fu;
    uint32_t ex   = mag >> mbits, mant = mag & ((1u << mbits) - 1u);
    if (f == PRT_FP8_E4M3 && mag == 0x7Fu)
        return prt_f32_from_bits(sign | 0x7FC00000u);
    if (f == PRT_FP8_E5M2 && ex == 31u)
        return prt_f32_from_bits(sign | 0x7F800000u | (mant ? 0x400000u | mant << 21 : 0u));
    if (ex == 0u) {   /* subnormal: mant * 2^(1 - bias - mbits), a power-of-two product */
        float unit = prt_f32_from_bits((uint32_t)(127 + 1 - bias - mbits) << 23);
        return prt_f32_from_bits(sign | prt_f32_bits((float)mant * unit));
    }
    return prt_f32_from_bits(sign | (ex + 127u - (uint32_t)bias) << 23 | mant << (23 - mbits));
}

/* OCP Microscaling (MX) Formats Specification v1.0 (2023), section 5.4.1:
 * the E8M0 scale is 2^(code - 127), codes 0..254; 255 is NaN. */
static inline PRT_FP8_HD float prt_e8m0_decode(uint8_t c)
{
    if (c == 0xFFu)
        return prt_f32_from_bits(0x7FC00000u);
    return c == 0u ? prt_f32_from_bits(0x00400000u)          /* 2^-127, an fp32 subnormal */
                   : prt_f32_from_bits((uint32_t)c << 23);
}

/* Scaling recipes. A quantised tensor holds codes and one dequantisation
 * multiplier per block, x ~ decode(q) * scale_inv (TE's Float8Tensor
 * _scale_inv; what cuBLASLt's A/B scale pointers take); it was cast as
 * encode(x * scale), scale = 1 / scale_inv. Blocks lie along the GEMM's
 * reduction dimension K of the stored (rows, cols) row-major matrix:
 *   TENSORWISE  one block, scale = max / amax, current amax (TE
 *               Float8CurrentScaling; torchao tensorwise);
 *   DELAYED     one block, scale from the max amax over the last N steps
 *               (TE DelayedScaling, amax_compute_algo "max");
 *   ROWWISE     one block per K-vector: a row when K runs along cols, a
 *               column when along rows (torchao rowwise, axiswise_dim K);
 *   BLOCKWISE   1 x 128 tiles along K (activations, gradients), 128 x 128
 *               blocks for weights (DeepSeek-V3 tech. report, section
 *               3.3.2; TE Float8BlockScaling x/grad_block_scaling_dim 1,
 *               w_block_scaling_dim 2);
 *   MXFP8       1 x 32 along K, E8M0 power-of-two scales (OCP MX v1.0
 *               section 6.3; TE MXFP8BlockScaling).
 * Edge blocks are cut short (their amax is over the elements present).
 * ORDER PRT_FP8_RECIPE: keep prt_fp8_recipe_name() in step. */
typedef enum {
    PRT_FP8_TENSORWISE,  /* one current scale per tensor */
    PRT_FP8_DELAYED,     /* one scale per tensor from an amax history */
    PRT_FP8_ROWWISE,     /* one scale per K-vector */
    PRT_FP8_BLOCKWISE,   /* 1x128 along K, or 128x128 (block2d) */
    PRT_FP8_MXFP8,       /* 1x32 along K, E8M0 scales */
} prt_fp8_recipe;

typedef enum {
    PRT_FP8_K_COLS,      /* K runs along the columns: A (M, K), or B stored (N, K) */
    PRT_FP8_K_ROWS,      /* K runs along the rows: A stored (K, M), or B (K, N) */
} prt_fp8_kdim;

/* How one operand is quantised. */
typedef struct {
    prt_fp8_recipe recipe;
    prt_fp8_format fmt;
    prt_fp8_mode   mode;     /* PRT_FP8_SAT for every recipe of TE and torchao */
    bool  pow2;              /* round scales down to 2^k (torchao round_scales_to_power_of_2, TE power_2_scale) */
    bool  block2d;           /* BLOCKWISE: 128 x 128 blocks (weights) */
    float amax_eps;          /* amax floor (TE amax_epsilon, default 0) */
    int   margin;            /* DELAYED: scale = max / amax / 2^margin (TE margin, default 0) */
} prt_fp8_cfg;

/* The recipe's defaults for an operand of format fmt: pow2 on for
 * ROWWISE (torchao's rowwise recipe) and BLOCKWISE (TE's default
 * power_2_scale unless NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1), off for
 * TENSORWISE and DELAYED; MXFP8's scales are powers of two by format. */
prt_fp8_cfg prt_fp8_cfg_default(prt_fp8_recipe r, prt_fp8_format fmt, bool weight);
const char *prt_fp8_recipe_name(prt_fp8_recipe r);

/* The block grid of a (rows, cols) matrix: one scale per br x bc block,
 * nbr x nbc blocks, block (i, j) at index i * nbc + j. */
typedef struct {
    size_t rows, cols;
    size_t br, bc;
    size_t nbr, nbc;
    prt_fp8_kdim k;
} prt_fp8_grid;

/* PRT_ERR_ARG for a zero dimension or a bad recipe. */
prt_status prt_fp8_grid_of(prt_fp8_grid *g, const prt_fp8_cfg *cfg, size_t rows, size_t cols,
                           prt_fp8_kdim k);
static inline size_t prt_fp8_nblocks(const prt_fp8_grid *g) { return g->nbr * g->nbc; }

/* amax (nblocks) = max |x| over each block; a NaN in a block makes its
 * amax NaN. The caller may all-reduce (MAX) these over the ranks that
 * hold shards of one block, so every layout scales alike. */
void  prt_fp8_amax(float *amax, const prt_act *x, const prt_fp8_grid *g);
/* scale (n) = prt_fp8_scale_from_amax of each amax (n). */
void  prt_fp8_scales(float *scale, const float *amax, size_t n, const prt_fp8_cfg *cfg);
/* floor(log2 a) of a finite a > 0, from its bits (fp32 subnormals too). */
static inline PRT_FP8_HD int prt_f32_floor_log2(float a)
{
    uint32_t u = prt_f32_bits(a) & 0x7FFFFFFFu;
    if (u >> 23)
        return (int)(u >> 23) - 127;
    int lead = 22;
    while (lead > 0 && !(u >> lead))
        lead--;
    return lead - 149;   /* a subnormal is its mantissa times 2^-149 */
}

/* 2^e for e in [-149, 127], exactly. */
static inline PRT_FP8_HD float prt_f32_pow2(int e)
{
    return e >= -126 ? prt_f32_from_bits((uint32_t)(e + 127) << 23)
                     : prt_f32_from_bits(1u << (e + 149));
}

/* The quantisation scale of one block from its amax (host and device, so
 * both builds' casts take it from here). Amax recipes: TE's
 * compute_scale_from_amax (transformer_engine/common/recipe/
 * recipe_common.cuh): amax floored at eps; amax 0, inf or NaN gives 1;
 * max / amax in fp32, correctly rounded (TE's __fdiv_rn; torchao's
 * amax_to_scale divides in fp64 and rounds once to fp32, the same value);
 * an overflow gives FLT_MAX (value_for_inf of an fp32 input); pow2 keeps
 * the sign and exponent bits, rounding down to 2^k (torchao's
 * exp2(floor(log2(scale)))). MXFP8: 1 / X, X = 2^(floor(log2 amax) -
 * emax_elem) clamped to E8M0's [2^-127, 2^127], emax_elem 8 for E4M3 and
 * 15 for E5M2 (OCP MX v1.0 section 6.3); amax 0 gives 1; inf or NaN gives
 * NaN (E8M0's NaN code 0xFF). */
static inline PRT_FP8_HD float prt_fp8_scale_from_amax(float amax, const prt_fp8_cfg *cfg)
{
    uint32_t a = prt_f32_bits(amax) & 0x7FFFFFFFu;
    bool finite = a < 0x7F800000u;
    if (cfg->recipe == PRT_FP8_MXFP8) {
        if (!finite)
            return prt_f32_from_bits(0x7FC00000u);
        if (a == 0u)
            return 1.0f;
        int shared = prt_f32_floor_log2(amax) - (cfg->fmt == PRT_FP8_E4M3 ? 8 : 15);
        shared = shared < -127 ? -127 : shared > 127 ? 127 : shared;
        return prt_f32_pow2(-shared);   /* exact: 2^-127 .. 2^127 */
    }
    if (amax < cfg->amax_eps)
        amax = cfg->amax_eps;
    if (!finite || amax == 0.0f)
        return 1.0f;
    float scale = prt_fp8_max(cfg->fmt) / amax;
    if (prt_f32_bits(scale) == 0x7F800000u)
        scale = prt_f32_from_bits(0x7F7FFFFFu);   /* FLT_MAX */
    if (cfg->pow2)
        scale = prt_f32_from_bits(prt_f32_bits(scale) & 0xFF800000u);
    return scale;
}

/* The E8M0 code of an MXFP8 scale_inv (a power of two), 0xFF for NaN. */
uint8_t prt_e8m0_encode(float pow2);

/* DELAYED scaling's state, as TE's amax_and_scale_update
 * (delayed_scaling.cu): the amaxes of the last len steps (caller memory),
 * the scale every cast of this step uses (1 at the start) and this step's
 * amax so far. A cast records its amax (prt_fp8_history_record, the max
 * over the step's casts of the tensor, so a tensor cast twice, as x for
 * the forward and again for dW, counts once); prt_fp8_history_update ends
 * the step: it pushes that amax into the window and sets the scale for
 * the next step, max / 2^margin / (max over the window), or keeps the
 * previous scale when that max is 0 or not finite (fmaxf: NaNs are
 * skipped, as the kernel's). */
typedef struct {
    float *amax;     /* (len) ring of past amaxes */
    size_t len;      /* window, TE amax_history_len */
    size_t count;    /* steps recorded, capped at len */
    size_t head;     /* the next slot to write */
    float  scale;    /* the scale of this step's casts */
    float  pending;  /* this step's amax so far */
} prt_fp8_history;

prt_status prt_fp8_history_init(prt_fp8_history *h, float *buf, size_t len);
void  prt_fp8_history_record(prt_fp8_history *h, float amax);
float prt_fp8_history_update(prt_fp8_history *h, const prt_fp8_cfg *cfg);

/* A quantised matrix (caller memory, device memory on CUDA as are the
 * amax and scale arrays: q rows*cols bytes, scale_inv nblocks floats). */
typedef struct {
    uint8_t       *q;          /* (rows, cols) codes */
    float         *scale_inv;  /* (nblocks) */
    prt_fp8_grid   g;
    prt_fp8_format fmt;
} prt_fp8_tensor;

/* q = encode(x * scale of its block), scale_inv = 1 / scale (exact for
 * powers of two); the tensor's grid must be set (prt_fp8_grid_of). scale
 * may be t->scale_inv (the scales replaced by their inverses in place). */
void prt_fp8_cast(prt_fp8_tensor *t, const prt_act *x, const float *scale, prt_fp8_mode mode);
/* The same on an fp32 tensor (fp32 master weights cast for an FP8
 * all-gather, TE's fp8 parameter gather); on the CPU build, where prt_act
 * is float, the very functions above. */
void prt_fp8_amax_f32(float *amax, const float *x, const prt_fp8_grid *g);
void prt_fp8_cast_f32(prt_fp8_tensor *t, const float *x, const float *scale, prt_fp8_mode mode);

/* How a linear layer's three FP8 GEMMs quantise their operands (both
 * builds): x and W in the forward format, the backward's gradient dout in
 * E5M2 under TE's HYBRID (else E4M3); weights use cfg.weight (128 x 128
 * under BLOCKWISE, so W and W^T share it). */
typedef struct {
    prt_fp8_cfg act;     /* x */
    prt_fp8_cfg weight;  /* W */
    prt_fp8_cfg grad;    /* dout */
} prt_fp8_linear_cfg;

prt_fp8_linear_cfg prt_fp8_linear_default(prt_fp8_recipe r, bool hybrid);

#ifdef PRT_CUDA
/* The CUDA build's FP8 GEMM (runtime/cuda/ops_fp8.cu), cuBLASLt's:
 * C (M, N) = beta C + A B^T, A (M, K) and B (N, K) both stored K-major
 * (K_COLS grids: Hopper's FP8 tensor cores take only this "TN" layout, so a
 * GEMM along another axis is given a transposed copy, prt_fp8_transpose),
 * their scale_inv applied by cuBLASLt's scale modes: one scale each
 * (tensorwise, delayed), one per row each (rowwise), 1 x 128 blocks with
 * at most one operand of 128 x 128 (blockwise; K a multiple of 128), or
 * 1 x 32 blocks as E8M0 (mxfp8; K a multiple of 32); fp32 accumulation
 * (CUBLAS_COMPUTE_32F, no fast accumulation); C bf16 (c_fp32 false, beta
 * 0: a forward or dX output) or fp32 (beta 0 or 1: dW accumulates). E4M3
 * operands, or one E5M2 (hybrid's gradient; two E5M2 have no cuBLASLt
 * kernel). PRT_ERR_ARG for grids that are none of those pairs, two E5M2
 * operands, a per-block grid that is not K_COLS, or K not a multiple of 16
 * (cuBLASLt's FP8 alignment: leading dimensions of 16 bytes). A device
 * that lacks the recipe's kernels (prt_fp8_device_check), or any failed
 * CUDA or cuBLASLt call, is recorded as every op's failure (prt_ops_sync
 * reports it). */
prt_status prt_fp8_gemm_tn(void *C, bool c_fp32, const prt_fp8_tensor *A, const prt_fp8_tensor *B,
                           size_t M, size_t N, size_t K, float beta);
/* Recipe delayed on the CUDA build, whose histories are updated on the
 * host once a step: *pending = fmaxf(*pending, s[0]) (the step's amax of
 * the history so far takes the one prt_fp8_amax left in s[0]), then s[0]
 * = *scale (its scale this step), so the cast that follows takes it. All
 * three device pointers; one kernel of one thread. */
void prt_fp8_delayed_scale(float *s, float *pending, const float *scale);
/* dst = src transposed: codes (cols, rows) and the scale grid with them
 * (block (i, j) becomes (j, i), so blocks along src's rows lie along dst's
 * columns: the K_COLS operand of a TN GEMM whose K is src's rows, as the
 * weight's copy for dX and dY and x for dW); dst's q and scale_inv
 * (nblocks floats, not src's own when there are several) are device memory
 * of the caller's (TE's cast-transpose, as a second kernel). */
prt_status prt_fp8_transpose(prt_fp8_tensor *dst, const prt_fp8_tensor *src);
#endif
/* PRT_OK when this device runs recipe r's FP8 GEMMs: on the CUDA build
 * compute capability >= 8.9 (Ada, Hopper, Blackwell) for tensorwise and
 * delayed, >= 9.0 for rowwise, 9.0 alone for blockwise (cuBLASLt's
 * 128-element block scales are Hopper's), >= 10.0 for mxfp8; else
 * PRT_ERR_CUDA with why (the device's name and capability) in buf,
 * recorded as an op's failure (prt_ops_last_error); the CPU build
 * emulates them and always says PRT_OK. A program with FP8 linears checks
 * it at start. */
prt_status prt_fp8_device_check(prt_fp8_recipe r, char *buf, size_t len);

/* What follows is the CPU build's alone (runtime/ops/fp8.c; the CUDA
 * build has the amax, scales and cast above and the TN GEMM,
 * runtime/cuda/ops_fp8.cu). */
#ifndef PRT_CUDA
/* amax, scales and cast in one, for every recipe: DELAYED casts with
 * h->scale and records its amax in h (h required then); the others
 * ignore h. amax_out (the tensor's amax) may be NULL. */
prt_status prt_fp8_quantize(prt_fp8_tensor *t, const float *x, const prt_fp8_cfg *cfg,
                            prt_fp8_kdim k, size_t rows, size_t cols, prt_fp8_history *h,
                            float *amax_out);
/* x (rows, cols) = decode(q) * scale_inv of its block. */
void prt_fp8_dequantize(float *x, const prt_fp8_tensor *t);

/* C (M, N) = beta * C + op(A) op(B), fp32 accumulation; op(A) (M, K) is A
 * (M, K) (K_COLS) or A^T of A stored (K, M) (ta, K_ROWS); op(B) (K, N) is
 * B (K, N) (K_ROWS) or B^T of B stored (N, K) (tb, K_COLS). When every
 * scale_inv is a power of two, decoded codes times their scales are exact
 * in fp32, so the operands are dequantised and one sgemm runs. Otherwise
 * the scales are applied as the kernels do: the GEMM runs per K-block
 * and each partial sum is multiplied by scale_inv(A) * scale_inv(B)
 * before it is added (DeepSeek-V3 section 3.3.2's promotion to fp32 on
 * the CUDA cores; with one K-block, the per-tensor or per-row epilogue of
 * cuBLASLt / torch._scaled_mm). PRT_ERR_ARG for shapes or block grids that
 * do not match (the K-extents of the two grids must divide each other),
 * PRT_ERR_NOMEM. */
prt_status prt_fp8_gemm(float *C, const prt_fp8_tensor *A, bool ta, const prt_fp8_tensor *B,
                        bool tb, size_t M, size_t N, size_t K, float beta);

/* A linear layer's three GEMMs in FP8 (prt_linear_*'s shapes): forward
 * x (N, K), W (O, K); the backward's gradient dout (N, O). Every operand
 * is quantised from its fp32 value with blocks along the GEMM's own K
 * (TE: "both versions are computed from the high precision input").
 * h_a, h_b are DELAYED's histories of the two operands (else NULL). */
prt_status prt_fp8_linear_fwd(float *out, const float *x, const float *w, const float *b,
                              size_t N, size_t K, size_t O, const prt_fp8_linear_cfg *cfg,
                              prt_fp8_history *h_x, prt_fp8_history *h_w);
prt_status prt_fp8_linear_bwd_input(float *dx, const float *dout, const float *w,
                                    size_t N, size_t K, size_t O, const prt_fp8_linear_cfg *cfg,
                                    prt_fp8_history *h_dout, prt_fp8_history *h_w);
prt_status prt_fp8_linear_bwd_weight(float *dw, const float *dout, const float *x,
                                     size_t N, size_t K, size_t O, const prt_fp8_linear_cfg *cfg,
                                     prt_fp8_history *h_dout, prt_fp8_history *h_x);
#endif /* !PRT_CUDA */

/* ---- optimizer ---------------------------------------------------------- */
typedef struct {
    float lr;            /* peak learning rate */
    float min_lr;        /* floor of the cosine decay */
    long  warmup;        /* steps of linear warm-up */
    long  total;         /* steps until min_lr (cosine decay after warm-up) */
    float beta1, beta2, eps;
    float weight_decay;  /* decoupled (Loshchilov & Hutter 2019) */
    float clip;          /* max global gradient norm; <= 0 disables */
} prt_adamw_cfg;

/* Learning rate at step (0-based): linear warm-up to lr over `warmup`
 * steps, then cosine decay to min_lr at `total` (as llm.c and nanoGPT). */
float prt_lr_at(const prt_adamw_cfg *cfg, long step);
/* Sum of squares of g (n) in fp64, this rank's part of the global norm;
 * the caller sums it across ranks (the clipping hook). */
double prt_grad_sq_norm(const float *g, size_t n);
/* Factor to multiply gradients by: min(1, clip / sqrt(global_sq)). */
float prt_clip_scale(double global_sq, float clip);
/* One AdamW update of p, m, v (n, fp32) from g * grad_scale, step t >= 1
 * for bias correction. Elementwise, so any [offset, offset+n) slice of a
 * flat buffer gives the same result as the whole (ZeRO shards by offset).
 * wd is the decay for this range (0 for biases and norms, by convention). */
void prt_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
                    const prt_adamw_cfg *cfg, long t, float lr, float wd,
                    float grad_scale);

/* ---- initialisation -----------------------------------------------------
 * Element i of parameter `pid` is a function of (seed, pid, i) alone
 * (Philox 4x32-10, Salmon et al. 2011, counter (i, pid), key seed; Box-
 * Muller), so any shard initialises its slice alone and matches the full
 * tensor bit for bit. dst is fp32 (device memory on CUDA). */
prt_status prt_init_normal(float *dst, size_t n, uint64_t seed, uint64_t pid,
                           uint64_t first_index, float std);
/* The sub-matrix rows [r0, r1), cols [c0, c1) of a global (R, C) matrix,
 * element (r, c) having index r*C + c; dst is (r1-r0, c1-c0). */
prt_status prt_init_normal_2d(float *dst, size_t R, size_t C, size_t r0, size_t r1,
                              size_t c0, size_t c1, uint64_t seed, uint64_t pid, float std);
prt_status prt_init_const(float *dst, size_t n, float value);
/* GPT-2 scale: 0.02, or 0.02/sqrt(2 L) for residual projections. */
float prt_gpt2_std(bool residual_proj, int n_layer);
/* The raw generator, for tests: the normal of element i. */
float prt_philox_normal(uint64_t seed, uint64_t pid, uint64_t i);

/* ---- data ---------------------------------------------------------------
 * Raw text (every byte a token, vocab 256) or an llm.c token shard (256
 * int32 header: magic, version, token count; then the tokens: magic
 * 20240520 version 1 uint16 tokens, or magic 20240801 version 7 uint32
 * tokens, as llm.c writes for Llama 3's 128,256 vocabulary). Sequence s of step k of the global batch starts at a position
 * drawn from (seed, k, s) alone, so a DP rank that owns sequences [a, b)
 * reads exactly those, whatever the layout. */
typedef enum {
    PRT_DATA_AUTO,  /* .bin: llm.c shard; anything else: text */
    PRT_DATA_TEXT,  /* bytes, vocab 256 */
    PRT_DATA_LLMC,  /* llm.c token shard */
} prt_data_format;

typedef struct prt_data prt_data;

/* Open a file for sequences of T tokens (T+1 with the shifted target).
 * A token >= vocab is an error naming the file, the token and its
 * position. On failure err names the file and the problem (missing,
 * empty, truncated, wrong magic or version, too short). */
prt_status prt_data_open(prt_data **out, const char *path, prt_data_format fmt,
                         size_t T, size_t vocab, char *err, size_t errlen);
size_t     prt_data_tokens(const prt_data *d);
/* inputs, targets (n_seq, T) in host memory: the sequences [s0, s0+n_seq)
 * of step `step`'s global batch. */
void       prt_data_batch(const prt_data *d, uint64_t seed, uint64_t step, size_t s0,
                          size_t n_seq, int32_t *inputs, int32_t *targets);
void       prt_data_close(prt_data *d);

#ifdef __cplusplus
}
#endif

#endif /* PRT_OPS_H */
