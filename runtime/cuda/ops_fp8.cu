/*
 * ops_fp8.cu: FP8's casts on the GPU (issue 27): per-block amax of a bf16
 * or fp32 tensor, the recipe's scales, and the cast to E4M3 / E5M2 codes
 * with their dequantisation scales: the CUDA build's prt_fp8_amax(_f32),
 * prt_fp8_scales and prt_fp8_cast(_f32) (prt_ops.h; the CPU build's are
 * runtime/ops/fp8.c).
 *
 * Every rule is the one the CPU build takes, from prt_ops.h's inline
 * __host__ __device__ functions: prt_fp8_encode (checked bit for bit
 * against ml_dtypes by tests/fp8/ref_check.py) and prt_fp8_scale_from_amax.
 * So a bf16 tensor casts to the same codes on both builds (the CPU build
 * reads the same bf16 values as floats). cuda_fp8.h's __nv_cvt_float_to_fp8
 * (one cvt instruction on sm_89 and later) is not used until a GPU check
 * has compared it with this rule; the cast is memory-bound either way.
 *
 * All arrays are device memory; kernels run on the ops' stream and record
 * failures as every op does (ops_cuda.h). No FP8 GEMM here yet (cuBLASLt
 * with scale pointers is a later part of issue 27).
 */
#include "ops_kernels.cuh"

/* An element as fp32: bf16 widened exactly, or fp32 itself. */
static __device__ __forceinline__ float elem(const bf *x, size_t i) { return ld(x, i); }
static __device__ __forceinline__ float elem(const float *x, size_t i) { return x[i]; }

/* The block of element i of a row-major (rows, cols) matrix. */
static __device__ __forceinline__ size_t block_of(size_t i, size_t cols, size_t br, size_t bc,
                                                  size_t nbc)
{
    return (i / cols / br) * nbc + (i % cols) / bc;
}

/* amax (as fp32 bits, which order like the values for non-negative
 * floats; a NaN's bits exceed inf's, so a NaN sticks as on the CPU).
 * A warp whose elements share one block reduces first and makes one
 * atomic (tensorwise and rowwise: nearly every warp). */
template <typename T>
__global__ static void k_fp8_amax(unsigned *amax, const T *x, size_t n, size_t cols, size_t br,
                                  size_t bc, size_t nbc)
{
    size_t i = gtid();
    bool in = i < n;
    unsigned a = in ? __float_as_uint(elem(x, i)) & 0x7FFFFFFFu : 0u;
    unsigned long long b = in ? (unsigned long long)block_of(i, cols, br, bc, nbc) : ~0ull;
    unsigned long long first = __shfl_sync(0xffffffffu, b, 0);
    if (__all_sync(0xffffffffu, !in || b == first)) {
        unsigned m = __reduce_max_sync(0xffffffffu, a);
        if ((threadIdx.x & 31) == 0 && first != ~0ull)
            atomicMax(amax + first, m);
    } else if (in) {
        atomicMax(amax + b, a);
    }
}

template <typename T>
static void fp8_amax(float *amax, const T *x, const prt_fp8_grid *g)
{
    size_t n = g->rows * g->cols, nb = prt_fp8_nblocks(g);
    if (!prt_cuda_ok(cudaMemsetAsync(amax, 0, nb * sizeof *amax, PRT_OPS_STREAM), "prt_fp8_amax",
                     "cudaMemsetAsync"))
        return;
    PRT_LAUNCH("prt_fp8_amax", grid_for(n), 0, k_fp8_amax<T>, reinterpret_cast<unsigned *>(amax),
               x, n, g->cols, g->br, g->bc, g->nbc);
}

extern "C" void prt_fp8_amax(float *amax, const prt_act *x, const prt_fp8_grid *g)
{
    fp8_amax(amax, CBF(x), g);
}

extern "C" void prt_fp8_amax_f32(float *amax, const float *x, const prt_fp8_grid *g)
{
    fp8_amax(amax, x, g);
}

__global__ static void k_fp8_scales(float *scale, const float *amax, size_t n, prt_fp8_cfg cfg)
{
    size_t b = gtid();
    if (b < n)
        scale[b] = prt_fp8_scale_from_amax(amax[b], &cfg);
}

extern "C" void prt_fp8_scales(float *scale, const float *amax, size_t n, const prt_fp8_cfg *cfg)
{
    PRT_LAUNCH("prt_fp8_scales", grid_for(n), 0, k_fp8_scales, scale, amax, n, *cfg);
}

/* scale_inv = 1 / scale, IEEE-rounded as the CPU's (nvcc's default
 * -prec-div=true; exact for powers of two). */
__global__ static void k_fp8_inv(float *scale_inv, const float *scale, size_t n)
{
    size_t b = gtid();
    if (b < n)
        scale_inv[b] = 1.0f / scale[b];
}

template <typename T>
__global__ static void k_fp8_cast(uint8_t *q, const T *x, const float *scale, size_t n,
                                  size_t cols, size_t br, size_t bc, size_t nbc,
                                  prt_fp8_format fmt, prt_fp8_mode mode)
{
    size_t i = gtid();
    if (i >= n)
        return;
    float s = scale[block_of(i, cols, br, bc, nbc)];
    q[i] = prt_fp8_encode(__fmul_rn(elem(x, i), s), fmt, mode);   /* one fp32 multiply, then the rule */
}

template <typename T>
static void fp8_cast(prt_fp8_tensor *t, const T *x, const float *scale, prt_fp8_mode mode)
{
    const prt_fp8_grid *g = &t->g;
    size_t n = g->rows * g->cols, nb = prt_fp8_nblocks(g);
    /* the codes first, so scale may be t->scale_inv (one stream: in order) */
    PRT_LAUNCH("prt_fp8_cast", grid_for(n), 0, k_fp8_cast<T>, t->q, x, scale, n, g->cols, g->br,
               g->bc, g->nbc, t->fmt, mode);
    PRT_LAUNCH("prt_fp8_cast", grid_for(nb), 0, k_fp8_inv, t->scale_inv, scale, nb);
}

extern "C" void prt_fp8_cast(prt_fp8_tensor *t, const prt_act *x, const float *scale,
                             prt_fp8_mode mode)
{
    fp8_cast(t, CBF(x), scale, mode);
}

extern "C" void prt_fp8_cast_f32(prt_fp8_tensor *t, const float *x, const float *scale,
                                 prt_fp8_mode mode)
{
    fp8_cast(t, x, scale, mode);
}

