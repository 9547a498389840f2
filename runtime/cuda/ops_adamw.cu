/*
 * ops_adamw.cu: AdamW and the local squared gradient norm of the CUDA
 * build, on fp32 master weights, gradients and moments (the schedule and
 * the clip factor are host arithmetic, shared from runtime/ops/adamw.c).
 *
 * Elementwise like the CPU version, so any [offset, offset+n) slice of
 * the flat buffers gives the whole buffer's result (ZeRO). The norm is
 * summed in double per block, then atomically, and copied back: a
 * synchronising call, once per step.
 */
#include "ops_kernels.cuh"

__global__ static void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float b1,
                               float b2, float c1, float c2, float eps, float lr, float wd,
                               float scale)
{
    size_t i = gtid();
    if (i >= n) return;
    float gi = g[i] * scale;
    float mi = b1 * m[i] + (1.0f - b1) * gi, vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
}

extern "C" void prt_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
                               const prt_adamw_cfg *cfg, long t, float lr, float wd,
                               float grad_scale)
{
    PRT_OP_ENTER("prt_adamw_step");
    if (!n)
        return;
    float c1 = 1.0f - powf(cfg->beta1, (float)t), c2 = 1.0f - powf(cfg->beta2, (float)t);
    PRT_LAUNCH("prt_adamw_step", grid_for(n), 0, k_adamw,
               p, g, m, v, n, cfg->beta1, cfg->beta2, c1, c2, cfg->eps, lr, wd, grad_scale);
}

__global__ static void k_sq_norm(double *out, const float *g, size_t n)
{
    __shared__ double part[THREADS];
    double s = 0.0;
    for (size_t i = gtid(); i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * (double)g[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned k = THREADS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(out, part[0]);
}

extern "C" double prt_grad_sq_norm(const float *g, size_t n)
{
    if (prt_op_fault("prt_grad_sq_norm"))
        return 0.0;   /* as a kernel that never ran: nothing summed */
    static double *acc;   /* made once, stream-ordered: no device-wide sync inside a step */
    double host = 0.0;
    if (!n)
        return 0.0;
    if (!acc && !prt_cuda_ok(cudaMallocAsync((void **)&acc, sizeof *acc, PRT_OPS_STREAM), "prt_grad_sq_norm",
                             "cudaMallocAsync")) {
        acc = NULL;
        return NAN;
    }
    if (!prt_cuda_ok(cudaMemsetAsync(acc, 0, sizeof *acc, PRT_OPS_STREAM), "prt_grad_sq_norm", "cudaMemsetAsync"))
        return NAN;
    unsigned blocks = grid_for(n);
    PRT_LAUNCH("prt_grad_sq_norm", blocks > 1024 ? 1024 : blocks, 0, k_sq_norm, acc, g, n);
    if (!prt_cuda_ok(cudaMemcpy(&host, acc, sizeof host, cudaMemcpyDeviceToHost), "prt_grad_sq_norm",
                     "cudaMemcpy (the norm to the host)"))
        return NAN;
    return host;
}
