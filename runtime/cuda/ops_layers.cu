/*
 * ops_layers.cu: the elementwise and row-wise layers of the CUDA build:
 * embeddings, positions, RoPE, LayerNorm, RMSNorm, GeLU, ReLU, SwiGLU,
 * residual add, dropout, the cross-entropy pieces and the fp32 <-> bf16
 * casts.
 *
 * Same functions, same layouts, same gradient conventions as the CPU
 * build (runtime/ops/layers.c), which is the reference they are checked
 * against on a GPU (tests/gpu/check-ops.sh). Activations are bf16; every
 * sum is fp32; parameter gradients are fp32 and accumulated with atomics,
 * per block first where many rows hit the same column (norm weights).
 * Row-wise kernels give one warp to a row.
 */
#include "ops_kernels.cuh"

/* ---- embeddings ------------------------------------------------------------ */

__global__ static void k_embedding_fwd(bf *out, const int32_t *tok, const bf *wte, size_t N,
                                       size_t C, size_t v0, size_t Vl)
{
    size_t idx = gtid();
    if (idx >= N * C) return;
    size_t i = idx / C, c = idx % C;
    long long local = (long long)tok[i] - (long long)v0;
    out[idx] = (local >= 0 && (size_t)local < Vl) ? wte[(size_t)local * C + c] : to_bf(0.0f);
}

__global__ static void k_embedding_bwd(float *dwte, const int32_t *tok, const bf *dout, size_t N,
                                       size_t C, size_t v0, size_t Vl)
{
    size_t idx = gtid();
    if (idx >= N * C) return;
    size_t i = idx / C, c = idx % C;
    long long local = (long long)tok[i] - (long long)v0;
    if (local >= 0 && (size_t)local < Vl)
        atomicAdd(&dwte[(size_t)local * C + c], ld(dout, idx));
}

/* x (B, Tl, C) += wpe at each local row's global position (prt_cp_pos;
 * cp 1: Tl == T and the position is the row). */
__global__ static void k_position_fwd(bf *x, const bf *wpe, size_t B, size_t Tl, size_t C, size_t T,
                                      int cp, int r)
{
    size_t idx = gtid();
    if (idx >= B * Tl * C) return;
    size_t t = (idx / C) % Tl, c = idx % C;
    x[idx] = to_bf(ld(x, idx) + ld(wpe, prt_cp_pos(t, T, cp, r) * C + c));
}

/* One thread per local (row, column): each global position is one local
 * row's, so no two threads add into the same dwpe element. */
__global__ static void k_position_bwd(float *dwpe, const bf *dx, size_t B, size_t Tl, size_t C,
                                      size_t T, int cp, int r)
{
    size_t idx = gtid();
    if (idx >= Tl * C) return;
    size_t t = idx / C, c = idx % C;
    float s = 0.0f;
    for (size_t b = 0; b < B; b++)
        s += ld(dx, b * Tl * C + idx);
    dwpe[prt_cp_pos(t, T, cp, r) * C + c] += s;
}

extern "C" void prt_embedding_fwd(prt_act *out, const int32_t *tokens, const prt_act *wte,
                                  size_t N, size_t C, size_t v0, size_t Vl)
{
    PRT_OP_ENTER("prt_embedding_fwd");
    PRT_LAUNCH("prt_embedding_fwd", grid_for(N * C), 0, k_embedding_fwd,
               BF(out), tokens, CBF(wte), N, C, v0, Vl);
}

extern "C" void prt_embedding_bwd(float *dwte, const int32_t *tokens, const prt_act *dout,
                                  size_t N, size_t C, size_t v0, size_t Vl)
{
    PRT_OP_ENTER("prt_embedding_bwd");
    PRT_LAUNCH("prt_embedding_bwd", grid_for(N * C), 0, k_embedding_bwd,
               dwte, tokens, CBF(dout), N, C, v0, Vl);
}

extern "C" void prt_position_fwd(prt_act *x, const prt_act *wpe, size_t B, size_t T, size_t C)
{
    PRT_OP_ENTER("prt_position_fwd");
    PRT_LAUNCH("prt_position_fwd", grid_for(B * T * C), 0, k_position_fwd, BF(x), CBF(wpe), B, T, C,
               T, 1, 0);
}

extern "C" void prt_position_bwd(float *dwpe, const prt_act *dx, size_t B, size_t T, size_t C)
{
    PRT_OP_ENTER("prt_position_bwd");
    PRT_LAUNCH("prt_position_bwd", grid_for(T * C), 0, k_position_bwd, dwpe, CBF(dx), B, T, C, T, 1, 0);
}

extern "C" void prt_position_cp_fwd(prt_act *x, const prt_act *wpe, size_t B, size_t Tl, size_t C,
                                    size_t T, int cp, int r)
{
    PRT_OP_ENTER("prt_position_cp_fwd");
    PRT_LAUNCH("prt_position_cp_fwd", grid_for(B * Tl * C), 0, k_position_fwd, BF(x), CBF(wpe), B, Tl,
               C, T, cp, r);
}

extern "C" void prt_position_cp_bwd(float *dwpe, const prt_act *dx, size_t B, size_t Tl, size_t C,
                                    size_t T, int cp, int r)
{
    PRT_OP_ENTER("prt_position_cp_bwd");
    PRT_LAUNCH("prt_position_cp_bwd", grid_for(Tl * C), 0, k_position_bwd, dwpe, CBF(dx), B, Tl, C,
               T, cp, r);
}

/* ---- RoPE -------------------------------------------------------------------- */

/* One thread per rotated pair; the angle in double, as the CPU build, at
 * the row's global position (prt_cp_pos of local row t of Tl), its
 * frequency prt_rope_inv_freq and scale prt_rope_mscale (prt_ops.h: the
 * same inline function the CPU build calls). The parameters by value. */
__global__ static void k_rope(bf *qkv, size_t B, size_t Tl, size_t H, size_t Hkv, size_t D,
                              prt_rope rope, float sign, size_t T, int cp, int r)
{
    size_t half = D / 2, heads = H + Hkv, idx = gtid();
    if (idx >= B * Tl * heads * half) return;
    size_t i = idx % half, hh = (idx / half) % heads, row = idx / (half * heads);
    size_t t = row % Tl;
    double a = (double)prt_cp_pos(t, T, cp, r) * prt_rope_inv_freq(&rope, i, D);
    double m = prt_rope_mscale(&rope);
    float co = (float)(m * cos(a)), si = sign * (float)(m * sin(a));
    bf *x = qkv + row * (H + 2 * Hkv) * D + hh * D + 2 * i;
    float x0 = __bfloat162float(x[0]), x1 = __bfloat162float(x[1]);
    x[0] = to_bf(x0 * co - x1 * si);
    x[1] = to_bf(x0 * si + x1 * co);
}

extern "C" void prt_rope_fwd(prt_act *qkv, size_t B, size_t T, size_t H, size_t Hkv,
                             size_t D, const prt_rope *rope)
{
    PRT_OP_ENTER("prt_rope_fwd");
    PRT_LAUNCH("prt_rope_fwd", grid_for(B * T * (H + Hkv) * (D / 2)), 0, k_rope,
               BF(qkv), B, T, H, Hkv, D, *rope, 1.0f, T, 1, 0);
}

extern "C" void prt_rope_bwd(prt_act *dqkv, size_t B, size_t T, size_t H, size_t Hkv,
                             size_t D, const prt_rope *rope)
{
    PRT_OP_ENTER("prt_rope_bwd");
    PRT_LAUNCH("prt_rope_bwd", grid_for(B * T * (H + Hkv) * (D / 2)), 0, k_rope,
               BF(dqkv), B, T, H, Hkv, D, *rope, -1.0f, T, 1, 0);
}

extern "C" void prt_rope_cp_fwd(prt_act *qkv, size_t B, size_t Tl, size_t H, size_t Hkv, size_t D,
                                const prt_rope *rope, size_t T, int cp, int r)
{
    PRT_OP_ENTER("prt_rope_cp_fwd");
    PRT_LAUNCH("prt_rope_cp_fwd", grid_for(B * Tl * (H + Hkv) * (D / 2)), 0, k_rope,
               BF(qkv), B, Tl, H, Hkv, D, *rope, 1.0f, T, cp, r);
}

extern "C" void prt_rope_cp_bwd(prt_act *dqkv, size_t B, size_t Tl, size_t H, size_t Hkv, size_t D,
                                const prt_rope *rope, size_t T, int cp, int r)
{
    PRT_OP_ENTER("prt_rope_cp_bwd");
    PRT_LAUNCH("prt_rope_cp_bwd", grid_for(B * Tl * (H + Hkv) * (D / 2)), 0, k_rope,
               BF(dqkv), B, Tl, H, Hkv, D, *rope, -1.0f, T, cp, r);
}

/* ---- norms --------------------------------------------------------------------- */

__global__ static void k_layernorm_fwd(bf *out, float *mean, float *rstd, const bf *x,
                                       const bf *w, const bf *b, size_t N, size_t C, float eps)
{
    size_t row = gwarp();
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const bf *xi = x + row * C;
    float s = 0.0f;
    for (size_t c = lane; c < C; c += 32)
        s += ld(xi, c);
    float m = warp_sum(s) / (float)C, v = 0.0f;
    for (size_t c = lane; c < C; c += 32) {
        float d = ld(xi, c) - m;
        v += d * d;
    }
    float r = rsqrtf(warp_sum(v) / (float)C + eps);
    for (size_t c = lane; c < C; c += 32)
        out[row * C + c] = to_bf((ld(xi, c) - m) * r * ld(w, c) + (b ? ld(b, c) : 0.0f));
    if (lane == 0) {
        if (mean) mean[row] = m;
        rstd[row] = r;
    }
}

/* LayerNorm (mean != NULL) or RMSNorm backward. Weight and bias
 * gradients gather in shared memory per block (when C fits), then one
 * atomic per column per block. */
__global__ static void k_norm_bwd(bf *dx, float *dw, float *db, const bf *dout, const bf *x,
                                  const bf *w, const float *mean, const float *rstd, size_t N,
                                  size_t C, bool shared_ok)
{
    extern __shared__ float sh[];   /* dw (C), then db (C) */
    float *sdw = sh, *sdb = sh + C;
    if (shared_ok) {
        for (size_t c = threadIdx.x; c < 2 * C; c += blockDim.x)
            sh[c] = 0.0f;
        __syncthreads();
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (size_t row = (size_t)blockIdx.x * WARPS + warp; row < N; row += (size_t)gridDim.x * WARPS) {
        const bf *g = dout + row * C, *xi = x + row * C;
        float m = mean ? mean[row] : 0.0f, s = rstd[row], a = 0.0f, bsum = 0.0f;
        for (size_t c = lane; c < C; c += 32) {
            float norm = (ld(xi, c) - m) * s, dn = ld(g, c) * ld(w, c);
            a += dn;
            bsum += dn * norm;
        }
        float dmean = mean ? warp_sum(a) / (float)C : 0.0f;
        float dnm = warp_sum(bsum) / (float)C;
        for (size_t c = lane; c < C; c += 32) {
            float norm = (ld(xi, c) - m) * s, gc = ld(g, c), dn = gc * ld(w, c);
            dx[row * C + c] = to_bf(ld(dx, row * C + c) + (dn - dmean - norm * dnm) * s);
            if (shared_ok) {
                atomicAdd(&sdw[c], gc * norm);
                if (db) atomicAdd(&sdb[c], gc);
            } else {
                atomicAdd(&dw[c], gc * norm);
                if (db) atomicAdd(&db[c], gc);
            }
        }
    }
    if (shared_ok) {
        __syncthreads();
        for (size_t c = threadIdx.x; c < C; c += blockDim.x) {
            atomicAdd(&dw[c], sdw[c]);
            if (db) atomicAdd(&db[c], sdb[c]);
        }
    }
}

__global__ static void k_rmsnorm_fwd(bf *out, float *rstd, const bf *x, const bf *w, size_t N,
                                     size_t C, float eps)
{
    size_t row = gwarp();
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const bf *xi = x + row * C;
    float ss = 0.0f;
    for (size_t c = lane; c < C; c += 32)
        ss += ld(xi, c) * ld(xi, c);
    float r = rsqrtf(warp_sum(ss) / (float)C + eps);
    for (size_t c = lane; c < C; c += 32)
        out[row * C + c] = to_bf(ld(xi, c) * r * ld(w, c));
    if (lane == 0)
        rstd[row] = r;
}

static void norm_bwd(const char *op, bf *dx, float *dw, float *db, const bf *dout, const bf *x,
                     const bf *w, const float *mean, const float *rstd, size_t N, size_t C)
{
    size_t shmem = 2 * C * sizeof(float);
    bool shared_ok = shmem <= 48 * 1024;
    unsigned blocks = grid_rows(N);
    if (blocks > 1024)
        blocks = 1024;   /* more rows per block: fewer global atomics */
    PRT_LAUNCH(op, blocks, shared_ok ? shmem : 0, k_norm_bwd,
               dx, dw, db, dout, x, w, mean, rstd, N, C, shared_ok);
}

extern "C" void prt_layernorm_fwd(prt_act *out, float *mean, float *rstd, const prt_act *x,
                                  const prt_act *w, const prt_act *b, size_t N, size_t C, float eps)
{
    PRT_OP_ENTER("prt_layernorm_fwd");
    PRT_LAUNCH("prt_layernorm_fwd", grid_rows(N), 0, k_layernorm_fwd,
               BF(out), mean, rstd, CBF(x), CBF(w), CBF(b), N, C, eps);
}

extern "C" void prt_layernorm_bwd(prt_act *dx, float *dw, float *db, const prt_act *dout,
                                  const prt_act *x, const prt_act *w, const float *mean,
                                  const float *rstd, size_t N, size_t C)
{
    PRT_OP_ENTER("prt_layernorm_bwd");
    norm_bwd("prt_layernorm_bwd", BF(dx), dw, db, CBF(dout), CBF(x), CBF(w), mean, rstd, N, C);
}

/* q/k norm: one warp per (row, head) of the query and key heads, the
 * RMSNorm over the head's D values (as the CPU build's qk_head_fwd); the
 * backward's gains accumulate by atomicAdd, one per element and head. */
__global__ static void k_qk_norm_fwd(bf *qkv, bf *xin, float *rstd, const bf *wq, const bf *wk, float w0,
                                     size_t N, size_t H, size_t Hkv, size_t D, float eps)
{
    size_t heads = H + Hkv, idx = gwarp();
    int lane = threadIdx.x % 32;
    if (idx >= N * heads) return;
    size_t row = idx / heads, h = idx % heads;
    bf *y = qkv + row * (H + 2 * Hkv) * D + h * D, *x = xin + idx * D;
    const bf *w = h < H ? wq : wk;
    float ss = 0.0f;
    for (size_t c = lane; c < D; c += 32) {
        x[c] = y[c];
        ss += ld(y, c) * ld(y, c);
    }
    float r = rsqrtf(warp_sum(ss) / (float)D + eps);
    for (size_t c = lane; c < D; c += 32)
        y[c] = to_bf(ld(x, c) * r * (w0 + ld(w, c)));   /* the gain w0 + w in fp32 */
    if (lane == 0) rstd[idx] = r;
}

__global__ static void k_qk_norm_bwd(bf *dqkv, float *dwq, float *dwk, const bf *xin, const bf *wq,
                                     const bf *wk, float w0, const float *rstd, size_t N, size_t H, size_t Hkv,
                                     size_t D)
{
    size_t heads = H + Hkv, idx = gwarp();
    int lane = threadIdx.x % 32;
    if (idx >= N * heads) return;
    size_t row = idx / heads, h = idx % heads;
    bf *g = dqkv + row * (H + 2 * Hkv) * D + h * D;
    const bf *x = xin + idx * D, *w = h < H ? wq : wk;
    float *dw = h < H ? dwq : dwk, s = rstd[idx], dot = 0.0f;
    for (size_t c = lane; c < D; c += 32) dot += ld(g, c) * (w0 + ld(w, c)) * ld(x, c) * s;
    dot = warp_sum(dot) / (float)D;
    for (size_t c = lane; c < D; c += 32) {
        float n = ld(x, c) * s, gc = ld(g, c);
        atomicAdd(&dw[c], gc * n);
        g[c] = to_bf(s * (gc * (w0 + ld(w, c)) - n * dot));
    }
}

extern "C" void prt_qk_norm_fwd(prt_act *qkv, prt_act *xin, float *rstd, const prt_act *wq, const prt_act *wk,
                                float w0, size_t N, size_t H, size_t Hkv, size_t D, float eps)
{
    PRT_OP_ENTER("prt_qk_norm_fwd");
    PRT_LAUNCH("prt_qk_norm_fwd", grid_rows(N * (H + Hkv)), 0, k_qk_norm_fwd,
               BF(qkv), BF(xin), rstd, CBF(wq), CBF(wk), w0, N, H, Hkv, D, eps);
}

extern "C" void prt_qk_norm_bwd(prt_act *dqkv, float *dwq, float *dwk, const prt_act *xin, const prt_act *wq,
                                const prt_act *wk, float w0, const float *rstd, size_t N, size_t H, size_t Hkv,
                                size_t D)
{
    PRT_OP_ENTER("prt_qk_norm_bwd");
    PRT_LAUNCH("prt_qk_norm_bwd", grid_rows(N * (H + Hkv)), 0, k_qk_norm_bwd,
               BF(dqkv), dwq, dwk, CBF(xin), CBF(wq), CBF(wk), w0, rstd, N, H, Hkv, D);
}

/* q/k norm of the whole projection (OLMo-2): one warp per (row, part),
 * part 0 the row's q (H D values), 1 its k (Hkv D after them), as the CPU
 * build's prt_qk_proj_*; the caller all-reduces ss and dot over TP
 * between the two kernels of each pass. */
__device__ static size_t qkp_len(size_t j, size_t H, size_t Hkv, size_t D) { return (j ? Hkv : H) * D; }

__global__ static void k_qk_proj_sumsq(float *ss, const bf *qkv, size_t N, size_t H, size_t Hkv, size_t D)
{
    size_t idx = gwarp(), i = idx / 2, j = idx % 2;
    int lane = threadIdx.x % 32;
    if (idx >= 2 * N) return;
    const bf *x = qkv + i * (H + 2 * Hkv) * D + j * H * D;
    float s = 0.0f;
    for (size_t c = lane; c < qkp_len(j, H, Hkv, D); c += 32) s += ld(x, c) * ld(x, c);
    s = warp_sum(s);
    if (lane == 0) ss[idx] = s;
}

__global__ static void k_qk_proj_norm_fwd(bf *qkv, bf *xin, float *rstd, const float *ss, const bf *wq,
                                          const bf *wk, size_t N, size_t H, size_t Hkv, size_t D, size_t Cq,
                                          size_t Ck, float eps)
{
    size_t idx = gwarp(), i = idx / 2, j = idx % 2;
    int lane = threadIdx.x % 32;
    if (idx >= 2 * N) return;
    bf *y = qkv + i * (H + 2 * Hkv) * D + j * H * D, *x = xin + i * (H + Hkv) * D + j * H * D;
    const bf *w = j ? wk : wq;
    float r = rsqrtf(ss[idx] / (float)(j ? Ck : Cq) + eps);
    __syncwarp();   /* every lane has read ss before lane 0 writes rstd (which may be ss) */
    for (size_t c = lane; c < qkp_len(j, H, Hkv, D); c += 32) {
        x[c] = y[c];
        y[c] = to_bf(ld(x, c) * r * ld(w, c));
    }
    if (lane == 0) rstd[idx] = r;
}

__global__ static void k_qk_proj_dot(float *dot, const bf *dqkv, const bf *xin, const bf *wq, const bf *wk,
                                     const float *rstd, size_t N, size_t H, size_t Hkv, size_t D)
{
    size_t idx = gwarp(), i = idx / 2, j = idx % 2;
    int lane = threadIdx.x % 32;
    if (idx >= 2 * N) return;
    const bf *g = dqkv + i * (H + 2 * Hkv) * D + j * H * D, *x = xin + i * (H + Hkv) * D + j * H * D;
    const bf *w = j ? wk : wq;
    float s = rstd[idx], t = 0.0f;
    for (size_t c = lane; c < qkp_len(j, H, Hkv, D); c += 32) t += ld(g, c) * ld(w, c) * ld(x, c) * s;
    t = warp_sum(t);
    if (lane == 0) dot[idx] = t;
}

__global__ static void k_qk_proj_norm_bwd(bf *dqkv, float *dwq, float *dwk, const bf *xin, const bf *wq,
                                          const bf *wk, const float *rstd, const float *dot, size_t N, size_t H,
                                          size_t Hkv, size_t D, size_t Cq, size_t Ck)
{
    size_t idx = gwarp(), i = idx / 2, j = idx % 2;
    int lane = threadIdx.x % 32;
    if (idx >= 2 * N) return;
    bf *g = dqkv + i * (H + 2 * Hkv) * D + j * H * D;
    const bf *x = xin + i * (H + Hkv) * D + j * H * D, *w = j ? wk : wq;
    float *dw = j ? dwk : dwq, s = rstd[idx], m = dot[idx] / (float)(j ? Ck : Cq);
    for (size_t c = lane; c < qkp_len(j, H, Hkv, D); c += 32) {
        float n = ld(x, c) * s, gc = ld(g, c);
        atomicAdd(&dw[c], gc * n);
        g[c] = to_bf(s * (gc * ld(w, c) - n * m));
    }
}

extern "C" void prt_qk_proj_sumsq(float *ss, const prt_act *qkv, size_t N, size_t H, size_t Hkv, size_t D)
{
    PRT_OP_ENTER("prt_qk_proj_sumsq");
    PRT_LAUNCH("prt_qk_proj_sumsq", grid_rows(2 * N), 0, k_qk_proj_sumsq, ss, CBF(qkv), N, H, Hkv, D);
}

extern "C" void prt_qk_proj_norm_fwd(prt_act *qkv, prt_act *xin, float *rstd, const float *ss, const prt_act *wq,
                                     const prt_act *wk, size_t N, size_t H, size_t Hkv, size_t D, size_t Cq,
                                     size_t Ck, float eps)
{
    PRT_OP_ENTER("prt_qk_proj_norm_fwd");
    PRT_LAUNCH("prt_qk_proj_norm_fwd", grid_rows(2 * N), 0, k_qk_proj_norm_fwd,
               BF(qkv), BF(xin), rstd, ss, CBF(wq), CBF(wk), N, H, Hkv, D, Cq, Ck, eps);
}

extern "C" void prt_qk_proj_dot(float *dot, const prt_act *dqkv, const prt_act *xin, const prt_act *wq,
                                const prt_act *wk, const float *rstd, size_t N, size_t H, size_t Hkv, size_t D)
{
    PRT_OP_ENTER("prt_qk_proj_dot");
    PRT_LAUNCH("prt_qk_proj_dot", grid_rows(2 * N), 0, k_qk_proj_dot,
               dot, CBF(dqkv), CBF(xin), CBF(wq), CBF(wk), rstd, N, H, Hkv, D);
}

extern "C" void prt_qk_proj_norm_bwd(prt_act *dqkv, float *dwq, float *dwk, const prt_act *xin, const prt_act *wq,
                                     const prt_act *wk, const float *rstd, const float *dot, size_t N, size_t H,
                                     size_t Hkv, size_t D, size_t Cq, size_t Ck)
{
    PRT_OP_ENTER("prt_qk_proj_norm_bwd");
    PRT_LAUNCH("prt_qk_proj_norm_bwd", grid_rows(2 * N), 0, k_qk_proj_norm_bwd,
               BF(dqkv), dwq, dwk, CBF(xin), CBF(wq), CBF(wk), rstd, dot, N, H, Hkv, D, Cq, Ck);
}

extern "C" void prt_rmsnorm_fwd(prt_act *out, float *rstd, const prt_act *x, const prt_act *w,
                                size_t N, size_t C, float eps)
{
    PRT_OP_ENTER("prt_rmsnorm_fwd");
    PRT_LAUNCH("prt_rmsnorm_fwd", grid_rows(N), 0, k_rmsnorm_fwd,
               BF(out), rstd, CBF(x), CBF(w), N, C, eps);
}

extern "C" void prt_rmsnorm_bwd(prt_act *dx, float *dw, const prt_act *dout, const prt_act *x,
                                const prt_act *w, const float *rstd, size_t N, size_t C)
{
    PRT_OP_ENTER("prt_rmsnorm_bwd");
    norm_bwd("prt_rmsnorm_bwd", BF(dx), dw, NULL, CBF(dout), CBF(x), CBF(w), NULL, rstd, N, C);
}

/* ---- activations ------------------------------------------------------------------ */

#define GELU_K 0.7978845608028654f   /* sqrt(2/pi) */

__global__ static void k_gelu_fwd(bf *out, const bf *x, size_t n)
{
    size_t i = gtid();
    if (i >= n) return;
    float v = ld(x, i), t = tanhf(GELU_K * (v + 0.044715f * v * v * v));
    out[i] = to_bf(0.5f * v * (1.0f + t));
}

__global__ static void k_gelu_bwd(bf *dx, const bf *x, const bf *dout, size_t n)
{
    size_t i = gtid();
    if (i >= n) return;
    float v = ld(x, i), t = tanhf(GELU_K * (v + 0.044715f * v * v * v));
    float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = to_bf(ld(dout, i) * (0.5f * (1.0f + t) + 0.5f * v * dt));
}

__global__ static void k_relu_fwd(bf *out, const bf *x, size_t n)
{
    size_t i = gtid();
    if (i < n) out[i] = to_bf(fmaxf(ld(x, i), 0.0f));
}

__global__ static void k_relu_bwd(bf *dx, const bf *x, const bf *dout, size_t n)
{
    size_t i = gtid();
    if (i < n) dx[i] = ld(x, i) > 0.0f ? dout[i] : to_bf(0.0f);
}

__global__ static void k_swiglu_fwd(bf *out, const bf *gu, size_t N, size_t F)
{
    size_t idx = gtid();
    if (idx >= N * F) return;
    size_t i = idx / F, j = idx % F;
    float g = ld(gu, i * 2 * F + j), u = ld(gu, i * 2 * F + F + j);
    out[idx] = to_bf(g / (1.0f + expf(-g)) * u);
}

__global__ static void k_swiglu_bwd(bf *dgu, const bf *gu, const bf *dout, size_t N, size_t F)
{
    size_t idx = gtid();
    if (idx >= N * F) return;
    size_t i = idx / F, j = idx % F;
    float g = ld(gu, i * 2 * F + j), u = ld(gu, i * 2 * F + F + j), d = ld(dout, idx);
    float s = 1.0f / (1.0f + expf(-g));
    dgu[i * 2 * F + F + j] = to_bf(d * g * s);
    dgu[i * 2 * F + j] = to_bf(d * u * s * (1.0f + g * (1.0f - s)));
}

__global__ static void k_geglu_fwd(bf *out, const bf *gu, size_t N, size_t F)
{
    size_t idx = gtid();
    if (idx >= N * F) return;
    size_t i = idx / F, j = idx % F;
    float g = ld(gu, i * 2 * F + j), u = ld(gu, i * 2 * F + F + j);
    float t = tanhf(GELU_K * (g + 0.044715f * g * g * g));
    out[idx] = to_bf(0.5f * g * (1.0f + t) * u);
}

__global__ static void k_geglu_bwd(bf *dgu, const bf *gu, const bf *dout, size_t N, size_t F)
{
    size_t idx = gtid();
    if (idx >= N * F) return;
    size_t i = idx / F, j = idx % F;
    float g = ld(gu, i * 2 * F + j), u = ld(gu, i * 2 * F + F + j), d = ld(dout, idx);
    float t = tanhf(GELU_K * (g + 0.044715f * g * g * g));
    float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * g * g);
    dgu[i * 2 * F + F + j] = to_bf(d * 0.5f * g * (1.0f + t));
    dgu[i * 2 * F + j] = to_bf(d * u * (0.5f * (1.0f + t) + 0.5f * g * dt));
}

__global__ static void k_add(bf *out, const bf *a, const bf *b, size_t n)
{
    size_t i = gtid();
    if (i < n) out[i] = to_bf(ld(a, i) + ld(b, i));
}

extern "C" void prt_gelu_fwd(prt_act *out, const prt_act *x, size_t n)
{
    PRT_OP_ENTER("prt_gelu_fwd");
    PRT_LAUNCH("prt_gelu_fwd", grid_for(n), 0, k_gelu_fwd, BF(out), CBF(x), n);
}

extern "C" void prt_gelu_bwd(prt_act *dx, const prt_act *x, const prt_act *dout, size_t n)
{
    PRT_OP_ENTER("prt_gelu_bwd");
    PRT_LAUNCH("prt_gelu_bwd", grid_for(n), 0, k_gelu_bwd, BF(dx), CBF(x), CBF(dout), n);
}

extern "C" void prt_relu_fwd(prt_act *out, const prt_act *x, size_t n)
{
    PRT_OP_ENTER("prt_relu_fwd");
    PRT_LAUNCH("prt_relu_fwd", grid_for(n), 0, k_relu_fwd, BF(out), CBF(x), n);
}

extern "C" void prt_relu_bwd(prt_act *dx, const prt_act *x, const prt_act *dout, size_t n)
{
    PRT_OP_ENTER("prt_relu_bwd");
    PRT_LAUNCH("prt_relu_bwd", grid_for(n), 0, k_relu_bwd, BF(dx), CBF(x), CBF(dout), n);
}

extern "C" void prt_swiglu_fwd(prt_act *out, const prt_act *gu, size_t N, size_t F)
{
    PRT_OP_ENTER("prt_swiglu_fwd");
    PRT_LAUNCH("prt_swiglu_fwd", grid_for(N * F), 0, k_swiglu_fwd, BF(out), CBF(gu), N, F);
}

extern "C" void prt_swiglu_bwd(prt_act *dgu, const prt_act *gu, const prt_act *dout, size_t N, size_t F)
{
    PRT_OP_ENTER("prt_swiglu_bwd");
    PRT_LAUNCH("prt_swiglu_bwd", grid_for(N * F), 0, k_swiglu_bwd, BF(dgu), CBF(gu), CBF(dout), N, F);
}

extern "C" void prt_geglu_fwd(prt_act *out, const prt_act *gu, size_t N, size_t F)
{
    PRT_OP_ENTER("prt_geglu_fwd");
    PRT_LAUNCH("prt_geglu_fwd", grid_for(N * F), 0, k_geglu_fwd, BF(out), CBF(gu), N, F);
}

extern "C" void prt_geglu_bwd(prt_act *dgu, const prt_act *gu, const prt_act *dout, size_t N, size_t F)
{
    PRT_OP_ENTER("prt_geglu_bwd");
    PRT_LAUNCH("prt_geglu_bwd", grid_for(N * F), 0, k_geglu_bwd, BF(dgu), CBF(gu), CBF(dout), N, F);
}

extern "C" void prt_residual_add(prt_act *out, const prt_act *a, const prt_act *b, size_t n)
{
    PRT_OP_ENTER("prt_residual_add");
    PRT_LAUNCH("prt_residual_add", grid_for(n), 0, k_add, BF(out), CBF(a), CBF(b), n);
}

extern "C" void prt_add_inplace(prt_act *dst, const prt_act *src, size_t n)
{
    PRT_OP_ENTER("prt_add_inplace");
    PRT_LAUNCH("prt_add_inplace", grid_for(n), 0, k_add, BF(dst), CBF(dst), CBF(src), n);
}

__global__ static void k_affine(bf *out, const bf *x, float a, float b, size_t n)
{
    size_t i = gtid();
    if (i < n) out[i] = to_bf(a * ld(x, i) + b);
}

/* One thread per (i, c) walks j in order (prt_copy_blocks): no two
 * threads write one element, and a sum over j (dj 0) runs in the CPU's
 * order in fp32, rounded to bf16 once. */
__global__ static void k_copy_blocks(bf *dst, size_t dn, size_t dj, const bf *src, size_t sn, size_t sj,
                                     size_t n, size_t m, size_t len, float scale, bool acc)
{
    size_t t = gtid();
    if (t >= n * len) return;
    size_t i = t / len, c = t % len;
    if (dj == 0) {
        float s = acc ? ld(dst, i * dn + c) : 0.0f;
        for (size_t j = 0; j < m; j++) s += scale * ld(src, i * sn + j * sj + c);
        dst[i * dn + c] = to_bf(s);
        return;
    }
    for (size_t j = 0; j < m; j++) {
        size_t d = i * dn + j * dj + c;
        dst[d] = to_bf((acc ? ld(dst, d) : 0.0f) + scale * ld(src, i * sn + j * sj + c));
    }
}

extern "C" void prt_copy_blocks(prt_act *dst, size_t dn, size_t dj, const prt_act *src, size_t sn,
                                size_t sj, size_t n, size_t m, size_t len, float scale, bool acc)
{
    PRT_OP_ENTER("prt_copy_blocks");
    PRT_LAUNCH("prt_copy_blocks", grid_for(n * len), 0, k_copy_blocks, BF(dst), dn, dj, CBF(src), sn, sj,
               n, m, len, scale, acc);
}

extern "C" void prt_affine(prt_act *out, const prt_act *x, float a, float b, size_t n)
{
    PRT_OP_ENTER("prt_affine");
    PRT_LAUNCH("prt_affine", grid_for(n), 0, k_affine, BF(out), CBF(x), a, b, n);
}

__global__ static void k_grad_add(float *dst, const float *src, size_t n)
{
    size_t i = gtid();
    if (i < n) dst[i] += src[i];
}

extern "C" void prt_grad_add(float *dst, const float *src, size_t n)
{
    PRT_OP_ENTER("prt_grad_add");
    PRT_LAUNCH("prt_grad_add", grid_for(n), 0, k_grad_add, dst, src, n);
}

/* ---- dropout ------------------------------------------------------------------------
 * The CPU build's masks exactly (runtime/ops/dropout.c): element (seq,
 * head, row, col) takes word col % 4 of the Philox block (col / 4, row,
 * seq, head) under the site's stream, and is kept iff it reaches the
 * threshold; one thread an element (the block's other words are its
 * neighbours'). */

__device__ static uint8_t dropout_kept(uint64_t stream, uint32_t thresh, size_t col, size_t row,
                                       size_t seq, size_t head)
{
    uint32_t w[4] = { (uint32_t)(col / 4), (uint32_t)row, (uint32_t)seq, (uint32_t)head };
    prt_philox4x32(w, (uint32_t)stream, (uint32_t)(stream >> 32));
    return w[col % 4] >= thresh;
}

__global__ static void k_dropout_fwd(bf *y, uint8_t *mask, const bf *x, uint64_t stream, uint32_t thresh,
                                     float scale, size_t rows, size_t C, size_t T, size_t seq0, size_t row0)
{
    size_t idx = gtid();
    if (idx >= rows * C) return;
    size_t n = row0 + idx / C, c = idx % C;
    uint8_t keep = dropout_kept(stream, thresh, c, n % T, seq0 + n / T, 0);
    mask[idx] = keep;
    y[idx] = to_bf(keep ? ld(x, idx) * scale : 0.0f);
}

__global__ static void k_dropout_probs(bf *y, uint8_t *mask, const bf *att, uint64_t stream, uint32_t thresh,
                                       float scale, size_t B, size_t H, size_t T, size_t seq0, size_t head0)
{
    size_t idx = gtid();
    if (idx >= B * H * T * T) return;
    size_t j = idx % T, t = (idx / T) % T, h = (idx / (T * T)) % H, b = idx / (H * T * T);
    uint8_t keep = j <= t && dropout_kept(stream, thresh, j, t, seq0 + b, head0 + h);
    mask[idx] = keep;
    y[idx] = to_bf(keep ? ld(att, idx) * scale : 0.0f);
}

__global__ static void k_dropout_bwd(bf *dx, const bf *dy, const uint8_t *mask, float scale, size_t n)
{
    size_t i = gtid();
    if (i < n) dx[i] = to_bf(mask[i] ? ld(dy, i) * scale : 0.0f);
}

extern "C" void prt_dropout_fwd(prt_act *y, uint8_t *mask, const prt_act *x, const prt_dropout_key *k,
                                size_t rows, size_t C, size_t T, size_t seq0, size_t row0)
{
    PRT_OP_ENTER("prt_dropout_fwd");
    PRT_LAUNCH("prt_dropout_fwd", grid_for(rows * C), 0, k_dropout_fwd,
               BF(y), mask, CBF(x), prt_dropout_stream(k), prt_dropout_threshold(k->p),
               1.0f / (1.0f - k->p), rows, C, T, seq0, row0);
}

extern "C" void prt_dropout_probs_fwd(prt_act *y, uint8_t *mask, const prt_act *att, const prt_dropout_key *k,
                                      size_t B, size_t H, size_t T, size_t seq0, size_t head0)
{
    PRT_OP_ENTER("prt_dropout_probs_fwd");
    PRT_LAUNCH("prt_dropout_probs_fwd", grid_for(B * H * T * T), 0, k_dropout_probs,
               BF(y), mask, CBF(att), prt_dropout_stream(k), prt_dropout_threshold(k->p),
               1.0f / (1.0f - k->p), B, H, T, seq0, head0);
}

extern "C" void prt_dropout_bwd(prt_act *dx, const prt_act *dy, const uint8_t *mask, float p, size_t n)
{
    PRT_OP_ENTER("prt_dropout_bwd");
    PRT_LAUNCH("prt_dropout_bwd", grid_for(n), 0, k_dropout_bwd,
               BF(dx), CBF(dy), mask, 1.0f / (1.0f - p), n);
}

/* ---- cross-entropy ------------------------------------------------------------------
 * nv = prt_xent_real_cols(Vl, v0, V) of a row's Vl columns are real; the
 * padding after them is outside the softmax and gets a zero gradient. */

__global__ static void k_xent_max(float *mx, const bf *logits, size_t N, size_t Vl, size_t nv)
{
    size_t row = gwarp();
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    float m = -INFINITY;
    for (size_t j = lane; j < nv; j += 32)
        m = fmaxf(m, ld(logits, row * Vl + j));
    m = warp_max(m);
    if (lane == 0) mx[row] = m;
}

__global__ static void k_xent_sumexp(float *se, float *tgt, const bf *logits, const float *mx,
                                     const int32_t *targets, size_t N, size_t Vl, size_t v0,
                                     size_t nv)
{
    size_t row = gwarp();
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    float s = 0.0f, m = mx[row];
    for (size_t j = lane; j < nv; j += 32)
        s += expf(ld(logits, row * Vl + j) - m);
    s = warp_sum(s);
    if (lane == 0) {
        se[row] = s;
        long long local = (long long)targets[row] - (long long)v0;
        tgt[row] = (targets[row] >= 0 && local >= 0 && (size_t)local < nv)
                 ? ld(logits, row * Vl + (size_t)local) : 0.0f;
    }
}

__global__ static void k_xent_loss(float *loss, const float *mx, const float *se, const float *tgt,
                                   const int32_t *targets, size_t N)
{
    size_t i = gtid();
    if (i < N) loss[i] = targets[i] < 0 ? 0.0f : logf(se[i]) + mx[i] - tgt[i];
}

__global__ static void k_xent_bwd(bf *dl, const bf *logits, const float *mx, const float *se,
                                  const int32_t *targets, size_t N, size_t Vl, size_t v0,
                                  size_t nv, float scale, float cap)
{
    size_t idx = gtid();
    if (idx >= N * Vl) return;
    size_t i = idx / Vl, j = idx % Vl;
    if (targets[i] < 0 || j >= nv) {
        dl[idx] = to_bf(0.0f);
        return;
    }
    long long local = (long long)targets[i] - (long long)v0;
    float y = ld(logits, idx), p = expf(y - mx[i]) / se[i];
    float g = scale * (p - ((long long)j == local ? 1.0f : 0.0f));
    if (cap > 0.0f) g *= 1.0f - (y / cap) * (y / cap);   /* through the soft-cap: y is capped */
    dl[idx] = to_bf(g);
}

__global__ static void k_softcap(bf *x, size_t n, float cap)
{
    size_t i = gtid();
    if (i < n) x[i] = to_bf(prt_softcap(ld(x, i), cap));
}

extern "C" void prt_xent_max(float *mx, const prt_act *logits, size_t N, size_t Vl, size_t v0,
                             size_t V)
{
    PRT_OP_ENTER("prt_xent_max");
    PRT_LAUNCH("prt_xent_max", grid_rows(N), 0, k_xent_max,
               mx, CBF(logits), N, Vl, prt_xent_real_cols(Vl, v0, V));
}

extern "C" void prt_xent_sumexp(float *se, float *tgt, const prt_act *logits, const float *mx,
                                const int32_t *targets, size_t N, size_t Vl, size_t v0, size_t V)
{
    PRT_OP_ENTER("prt_xent_sumexp");
    PRT_LAUNCH("prt_xent_sumexp", grid_rows(N), 0, k_xent_sumexp,
               se, tgt, CBF(logits), mx, targets, N, Vl, v0, prt_xent_real_cols(Vl, v0, V));
}

extern "C" void prt_xent_loss(float *loss, const float *mx, const float *se, const float *tgt,
                              const int32_t *targets, size_t N)
{
    PRT_OP_ENTER("prt_xent_loss");
    PRT_LAUNCH("prt_xent_loss", grid_for(N), 0, k_xent_loss, loss, mx, se, tgt, targets, N);
}

extern "C" void prt_xent_bwd(prt_act *dlogits, const prt_act *logits, const float *mx,
                             const float *se, const int32_t *targets, size_t N, size_t Vl,
                             size_t v0, size_t V, float scale)
{
    PRT_OP_ENTER("prt_xent_bwd");
    PRT_LAUNCH("prt_xent_bwd", grid_for(N * Vl), 0, k_xent_bwd,
               BF(dlogits), CBF(logits), mx, se, targets, N, Vl, v0, prt_xent_real_cols(Vl, v0, V),
               scale, 0.0f);
}

extern "C" void prt_xent_softcap_bwd(prt_act *dlogits, const prt_act *logits, const float *mx,
                                     const float *se, const int32_t *targets, size_t N, size_t Vl,
                                     size_t v0, size_t V, float scale, float cap)
{
    PRT_OP_ENTER("prt_xent_softcap_bwd");
    PRT_LAUNCH("prt_xent_softcap_bwd", grid_for(N * Vl), 0, k_xent_bwd,
               BF(dlogits), CBF(logits), mx, se, targets, N, Vl, v0, prt_xent_real_cols(Vl, v0, V),
               scale, cap);
}

extern "C" void prt_softcap_fwd(prt_act *x, size_t n, float cap)
{
    PRT_OP_ENTER("prt_softcap_fwd");
    PRT_LAUNCH("prt_softcap_fwd", grid_for(n), 0, k_softcap, BF(x), n, cap);
}

/* ---- casts ------------------------------------------------------------------------------ */

__global__ static void k_to_act(bf *dst, const float *src, size_t n)
{
    size_t i = gtid();
    if (i < n) dst[i] = to_bf(src[i]);
}

__global__ static void k_from_act(float *dst, const bf *src, size_t n)
{
    size_t i = gtid();
    if (i < n) dst[i] = ld(src, i);
}

extern "C" void prt_to_act(prt_act *dst, const float *src, size_t n)
{
    PRT_OP_ENTER("prt_to_act");
    PRT_LAUNCH("prt_to_act", grid_for(n), 0, k_to_act, BF(dst), src, n);
}

extern "C" void prt_from_act(float *dst, const prt_act *src, size_t n)
{
    PRT_OP_ENTER("prt_from_act");
    PRT_LAUNCH("prt_from_act", grid_for(n), 0, k_from_act, dst, CBF(src), n);
}
