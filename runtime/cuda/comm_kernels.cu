/*
 * comm_kernels.cu: the local steps of planc's own collective algorithms on
 * the GPU — dst = op(a, b) element-wise, and the PRT_AVG division — for the
 * five element types.  comm_nccl.c launches them on the communication
 * stream between the NCCL send/receive groups of a schedule.
 *
 * Half types are combined in fp32 and rounded back (as NCCL does).  The
 * kernels are grid-stride loops: memory-bound, one read of each operand and
 * one write per element, which is all a reduction step needs.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* ORDER PRT_DTYPE and ORDER PRT_REDOP, as in planrt.h / prt_comm.h. */
enum { T_FP32, T_FP16, T_BF16, T_INT32, T_INT64 };
enum { OP_SUM, OP_AVG, OP_MAX, OP_MIN };

template <typename T> __device__ float widen(T x) { return (float)x; }
template <> __device__ float widen<__half>(__half x) { return __half2float(x); }
template <> __device__ float widen<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> struct Combine {
    __device__ static T apply(T a, T b, int op)
    {
        return op == OP_MAX ? (a > b ? a : b) : op == OP_MIN ? (a < b ? a : b) : a + b;
    }
};
/* Half types: in fp32, rounded back to nearest. */
template <typename H> struct CombineHalf {
    __device__ static H apply(H a, H b, int op)
    {
        float x = widen(a), y = widen(b);
        return H(op == OP_MAX ? fmaxf(x, y) : op == OP_MIN ? fminf(x, y) : x + y);
    }
};
template <> struct Combine<__half> : CombineHalf<__half> {};
template <> struct Combine<__nv_bfloat16> : CombineHalf<__nv_bfloat16> {};

template <typename T>
__global__ void reduce_kernel(T *dst, const T *a, const T *b, size_t n, int op)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = Combine<T>::apply(a[i], b[i], op);
}

/* Floats multiply by 1/P (one rounding); integers divide, toward zero. */
template <typename T>
__global__ void scale_kernel(T *x, size_t n, int P)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = T(widen(x[i]) * (1.0f / (float)P));
}
template <typename I>
__global__ void scale_int_kernel(I *x, size_t n, int P)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] /= P;
}

/* Enough blocks to fill an H100/H200 several times over, no more. */
static unsigned blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

template <typename T>
static cudaError_t launch_reduce(void *d, const void *a, const void *b, size_t n, int op,
                                 cudaStream_t s)
{
    reduce_kernel<T><<<blocks_for(n), 256, 0, s>>>((T *)d, (const T *)a, (const T *)b, n, op);
    return cudaGetLastError();
}

extern "C" cudaError_t prtc_gpu_reduce(void *dst, const void *a, const void *b, size_t n,
                                       int type, int op, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    switch (type) {
    case T_FP32:  return launch_reduce<float>(dst, a, b, n, op, s);
    case T_FP16:  return launch_reduce<__half>(dst, a, b, n, op, s);
    case T_BF16:  return launch_reduce<__nv_bfloat16>(dst, a, b, n, op, s);
    case T_INT32: return launch_reduce<int32_t>(dst, a, b, n, op, s);
    case T_INT64: return launch_reduce<int64_t>(dst, a, b, n, op, s);
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t prtc_gpu_scale(void *buf, size_t n, int type, int P, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    unsigned nb = blocks_for(n);
    switch (type) {
    case T_FP32:  scale_kernel<float><<<nb, 256, 0, s>>>((float *)buf, n, P); break;
    case T_FP16:  scale_kernel<__half><<<nb, 256, 0, s>>>((__half *)buf, n, P); break;
    case T_BF16:  scale_kernel<__nv_bfloat16><<<nb, 256, 0, s>>>((__nv_bfloat16 *)buf, n, P); break;
    case T_INT32: scale_int_kernel<int32_t><<<nb, 256, 0, s>>>((int32_t *)buf, n, P); break;
    case T_INT64: scale_int_kernel<int64_t><<<nb, 256, 0, s>>>((int64_t *)buf, n, P); break;
    default:      return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
