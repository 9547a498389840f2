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
 * failures as every op does (ops_cuda.h). The FP8 GEMM (cuBLASLt, per-tensor
 * scales, the TN layout) and the codes' transpose are at the end.
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

/* ---- the FP8 GEMM: cuBLASLt (prt_fp8_gemm_tn) --------------------------------
 * As NVIDIA's CUDALibrarySamples cuBLASLt/LtFp8Matmul: a matmul descriptor
 * of compute type CUBLAS_COMPUTE_32F and scale type CUDA_R_32F, TRANSA T
 * and TRANSB N (the TN layout, the only one Hopper's FP8 kernels take),
 * the operands' dequantisation scales as CUBLASLT_MATMUL_DESC_A/B_SCALE_-
 * POINTER (device floats: D = alpha (a_scale b_scale) op(A) op(B) + beta
 * C), the first algorithm cublasLtMatmulAlgoGetHeuristic returns for a
 * 32 MiB workspace. cuBLASLt is column-major: the row-major C (M, N) = A
 * B^T is the column-major C^T (N, M) = B_cm^T A_cm, where B_cm (K, N) and
 * A_cm (K, M) are the row-major (N, K) and (M, K) codes read with leading
 * dimension K: cuBLASLt's A is our B (transposed), its B our A. The
 * handle and the workspace are made on first use and kept (no GEMM
 * allocates after the first). A failed CUDA or cuBLASLt call is recorded
 * as every op's and reported by prt_ops_sync. Written from the sample and cuBLASLt's
 * documentation; no GPU checked it before it was committed: the GPU
 * bundle's check-fp8 (tests/test_fp8_cuda.c) holds it to the CPU build's
 * prt_fp8_gemm on a device. */
#include <cublasLt.h>
#include <stdio.h>

static cublasLtHandle_t fp8_lt;
static void *fp8_lt_ws;
enum { FP8_LT_WS_BYTES = 32 << 20 };   /* NVIDIA's workspace recommendation for Hopper */

extern "C" prt_status prt_fp8_device_check(char *buf, size_t len)
{
    int dev = 0, major = 0, minor = 0;
    char name[256] = "?";
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        snprintf(buf, len, "no CUDA device to run FP8 GEMMs on");
        prt_op_fail(PRT_ERR_CUDA, "prt_fp8_device_check", "%s", buf);
        return PRT_ERR_CUDA;
    }
    if (cudaGetDeviceProperties(&p, dev) == cudaSuccess) snprintf(name, sizeof name, "%s", p.name);
    if (major * 10 + minor >= 89) return PRT_OK;
    snprintf(buf, len, "FP8 GEMMs need FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper, "
             "Blackwell); device %d, %s, is %d.%d", dev, name, major, minor);
    prt_op_fail(PRT_ERR_CUDA, "prt_fp8_device_check", "%s", buf);   /* prt_run_fail prints it */
    return PRT_ERR_CUDA;
}

/* The handle and workspace, made once; false (recorded) if they cannot be. */
static bool fp8_lt_ready(const char *op)
{
    if (fp8_lt) return true;
    char why[320];
    if (prt_fp8_device_check(why, sizeof why) != PRT_OK) return false;   /* recorded there */
    if (!prt_cublas_ok(cublasLtCreate(&fp8_lt), op, "cublasLtCreate")) {
        fp8_lt = NULL;
        return false;
    }
    if (!prt_cuda_ok(cudaMalloc(&fp8_lt_ws, FP8_LT_WS_BYTES), op, "cudaMalloc (cuBLASLt workspace)")) {
        cublasLtDestroy(fp8_lt);
        fp8_lt = NULL;
        return false;
    }
    return true;
}

extern "C" void prt_cuda_fp8_finalize(void)
{
    if (fp8_lt) cublasLtDestroy(fp8_lt);
    if (fp8_lt_ws) cudaFree(fp8_lt_ws);
    fp8_lt = NULL;
    fp8_lt_ws = NULL;
}

static cudaDataType fp8_type(prt_fp8_format f) { return f == PRT_FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

/* Whether t is an (rows, cols) K_COLS tensor of one scale. */
static bool fp8_tn_operand(const prt_fp8_tensor *t, size_t rows, size_t cols)
{
    return t->g.rows == rows && t->g.cols == cols && t->g.k == PRT_FP8_K_COLS && prt_fp8_nblocks(&t->g) == 1;
}

extern "C" prt_status prt_fp8_gemm_tn(void *C, bool c_fp32, const prt_fp8_tensor *A, const prt_fp8_tensor *B,
                                      size_t M, size_t N, size_t K, float beta)
{
    const char *op = "prt_fp8_gemm";
    if (prt_op_fault(op)) return PRT_OK;   /* PLANRT_FAULT's injected failure, reported at the sync */
    if (!M || !N || !K || K % 16 || !fp8_tn_operand(A, M, K) || !fp8_tn_operand(B, N, K) ||
        (A->fmt == PRT_FP8_E5M2 && B->fmt == PRT_FP8_E5M2) || (!c_fp32 && beta != 0.0f) ||
        M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return PRT_ERR_ARG;
    if (!fp8_lt_ready(op)) return PRT_ERR_CUDA;   /* recorded too: the step's sync reports it */
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const float *sa = B->scale_inv, *sb = A->scale_inv;   /* cuBLASLt's A is our B */
    cudaDataType ct = c_fp32 ? CUDA_R_32F : CUDA_R_16BF;
    size_t ws = FP8_LT_WS_BYTES;
    float alpha = 1.0f;
    int found = 0;
    cublasLtMatmulHeuristicResult_t h = {};
    bool ok = prt_cublas_ok(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), op,
                            "cublasLtMatmulDescCreate") &&
              prt_cublas_ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), op,
                            "cublasLtMatmulDescSetAttribute(TRANSA)") &&
              prt_cublas_ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), op,
                            "cublasLtMatmulDescSetAttribute(TRANSB)") &&
              prt_cublas_ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa),
                            op, "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)") &&
              prt_cublas_ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb),
                            op, "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)") &&
              /* column-major: A (K, N) read transposed, B (K, M), C = D (N, M) */
              prt_cublas_ok(cublasLtMatrixLayoutCreate(&la, fp8_type(B->fmt), K, N, K), op, "cublasLtMatrixLayoutCreate(A)") &&
              prt_cublas_ok(cublasLtMatrixLayoutCreate(&lb, fp8_type(A->fmt), K, M, K), op, "cublasLtMatrixLayoutCreate(B)") &&
              prt_cublas_ok(cublasLtMatrixLayoutCreate(&lc, ct, N, M, N), op, "cublasLtMatrixLayoutCreate(C)") &&
              prt_cublas_ok(cublasLtMatmulPreferenceCreate(&pref), op, "cublasLtMatmulPreferenceCreate") &&
              prt_cublas_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                                 sizeof ws),
                            op, "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)") &&
              prt_cublas_ok(cublasLtMatmulAlgoGetHeuristic(fp8_lt, desc, la, lb, lc, lc, pref, 1, &h, &found), op,
                            "cublasLtMatmulAlgoGetHeuristic");
    if (ok && !found) {
        prt_op_fail(PRT_ERR_CUDA, op, "cuBLASLt has no FP8 algorithm for M %zu N %zu K %zu (%s x %s -> %s)", M, N, K,
                    A->fmt == PRT_FP8_E4M3 ? "e4m3" : "e5m2", B->fmt == PRT_FP8_E4M3 ? "e4m3" : "e5m2",
                    c_fp32 ? "fp32" : "bf16");
        ok = false;
    }
    if (ok)
        prt_cublas_ok(cublasLtMatmul(fp8_lt, desc, &alpha, B->q, la, A->q, lb, &beta, C, lc, C, lc, &h.algo,
                                     fp8_lt_ws, ws, PRT_OPS_STREAM),
                      op, "cublasLtMatmul");
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return PRT_OK;   /* a failed call is recorded, as every op's: prt_ops_sync reports it */
}

/* dst (cols, rows) = src (rows, cols)^T, a byte an element, 32 x 32 tiles
 * through shared memory (coalesced reads and writes). */
__global__ static void k_fp8_transpose(uint8_t *dst, const uint8_t *src, size_t rows, size_t cols)
{
    __shared__ uint8_t tile[32][33];
    size_t r0 = (size_t)blockIdx.y * 32, c0 = (size_t)blockIdx.x * 32;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        size_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        size_t c = c0 + i, r = r0 + threadIdx.x;   /* dst row c, column r */
        if (c < cols && r < rows) dst[c * rows + r] = tile[threadIdx.x][i];
    }
}

extern "C" prt_status prt_fp8_transpose(prt_fp8_tensor *dst, const prt_fp8_tensor *src)
{
    const char *op = "prt_fp8_transpose";
    if (prt_fp8_nblocks(&src->g) != 1 || !src->g.rows || !src->g.cols) return PRT_ERR_ARG;
    size_t rows = src->g.rows, cols = src->g.cols;
    dst->fmt = src->fmt;
    /* one block: the whole (cols, rows) matrix */
    dst->g.rows = dst->g.br = cols;
    dst->g.cols = dst->g.bc = rows;
    dst->g.nbr = dst->g.nbc = 1;
    dst->g.k = PRT_FP8_K_COLS;   /* the TN GEMM's operand: its K is src's rows */
    if (prt_op_fault(op)) return PRT_OK;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32)), block(32, 8);
    k_fp8_transpose<<<grid, block, 0, PRT_OPS_STREAM>>>(dst->q, src->q, rows, cols);
    PRT_CUDA_LAUNCHED(op);
    if (dst->scale_inv != src->scale_inv)
        prt_cuda_ok(cudaMemcpyAsync(dst->scale_inv, src->scale_inv, sizeof(float), cudaMemcpyDeviceToDevice,
                                    PRT_OPS_STREAM),
                    op, "cudaMemcpyAsync (scale_inv)");
    return PRT_OK;
}
