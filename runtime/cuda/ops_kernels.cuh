/*
 * ops_kernels.cuh: device helpers shared by the CUDA op files (private):
 * bf16 <-> fp32, warp reductions, launch geometry. Storage is bf16,
 * arithmetic fp32, as llm.c's train_gpt2.cu.
 */
#ifndef PRT_OPS_KERNELS_CUH
#define PRT_OPS_KERNELS_CUH

#include <cuda_bf16.h>
#include "ops_cuda.h"

typedef __nv_bfloat16 bf;

#define BF(p)  reinterpret_cast<bf *>(p)
#define CBF(p) reinterpret_cast<const bf *>(p)

static __device__ __forceinline__ float ld(const bf *p, size_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ bf to_bf(float x) { return __float2bfloat16(x); }

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

enum { THREADS = 256, WARPS = THREADS / 32 };

/* Blocks of THREADS threads covering n items. */
static inline unsigned grid_for(size_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }
/* Blocks of WARPS warps, one warp per row. */
static inline unsigned grid_rows(size_t rows) { return (unsigned)((rows + WARPS - 1) / WARPS); }

/* Launch kernel on `blocks` (a count or a dim3) of THREADS threads with
 * `shmem` bytes of shared memory on the ops' stream, and check the launch;
 * nothing at all when there are no blocks (an op of zero elements: a
 * zero-block launch is itself an error, cudaErrorInvalidConfiguration). */
#define PRT_LAUNCH(op, blocks, shmem, kernel, ...) do {                          \
        dim3 g_ = (blocks);                                                       \
        if (g_.x && g_.y && g_.z) {                                               \
            kernel<<<g_, THREADS, (shmem), PRT_OPS_STREAM>>>(__VA_ARGS__);        \
            PRT_CUDA_LAUNCHED(op);                                                \
        }                                                                         \
    } while (0)

/* The global index of this thread, and of this warp. */
static __device__ __forceinline__ size_t gtid() { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }
static __device__ __forceinline__ size_t gwarp() { return gtid() / 32; }

#endif
