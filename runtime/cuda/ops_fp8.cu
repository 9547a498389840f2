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

/* Recipe delayed's cast scale on the device: the step's amax so far takes
 * this cast's (fmaxf, as prt_fp8_history_record: a NaN is skipped), then
 * the cast's scale slot holds the history's scale for this step. One
 * thread: two floats. */
__global__ static void k_fp8_delayed_scale(float *s, float *pending, const float *scale)
{
    *pending = fmaxf(*pending, s[0]);
    s[0] = *scale;
}

extern "C" void prt_fp8_delayed_scale(float *s, float *pending, const float *scale)
{
    PRT_LAUNCH("prt_fp8_delayed_scale", 1, 0, k_fp8_delayed_scale, s, pending, scale);
}

/* ---- the FP8 GEMM: cuBLASLt (prt_fp8_gemm_tn) --------------------------------
 * As NVIDIA's CUDALibrarySamples cuBLASLt/LtFp8Matmul: a matmul descriptor
 * of compute type CUBLAS_COMPUTE_32F and scale type CUDA_R_32F, TRANSA T
 * and TRANSB N (the TN layout, the only one Hopper's FP8 kernels take),
 * the operands' dequantisation scales as CUBLASLT_MATMUL_DESC_A/B_SCALE_-
 * POINTER, the first algorithm cublasLtMatmulAlgoGetHeuristic returns for a
 * 32 MiB workspace. cuBLASLt is column-major: the row-major C (M, N) = A
 * B^T is the column-major C^T (N, M) = B_cm^T A_cm, where B_cm (K, N) and
 * A_cm (K, M) are the row-major (N, K) and (M, K) codes read with leading
 * dimension K: cuBLASLt's A is our B (transposed), its B our A. The
 * handle and the workspace are made on first use and kept (no GEMM
 * allocates after the first). A failed CUDA or cuBLASLt call is recorded
 * as every op's and reported by prt_ops_sync.
 *
 * The recipes' scales, as cuBLASLt's scale modes (CUBLASLT_MATMUL_DESC_-
 * A/B_SCALE_MODE, cuBLAS 12.9; TransformerEngine's cublaslt_gemm.cu sets
 * them the same way):
 *   tensorwise, delayed  SCALAR_32F: one float per operand;
 *   rowwise              OUTER_VEC_32F: one float per row of each operand
 *                        (C(i, j) times a_i b_j; torch._scaled_mm's rowwise);
 *   blockwise            VEC128_32F for the 1 x 128 operands, BLK128x128_32F
 *                        for the 128 x 128 weight (never both 128 x 128);
 *   mxfp8                VEC32_UE8M0: one E8M0 byte per 32 along K.
 * planc keeps every scale_inv array row-major over its blocks (block (i,
 * j) at i * nbc + j); the GEMM-ready layouts differ, so the scales are
 * copied into them first (fp8_gemm_scales), into a scratch buffer kept
 * like the workspace: VEC128 as TE's Float8BlockQuantizer's GEMM-ready
 * rowwise scales, (K / 128, pad4(rows)) row-major (the rows contiguous);
 * BLK128x128 as (rows / 128, pad4(K / 128)); MX32 in cuBLAS's 128 x 4
 * tiles (TE tests/cpp/operator/test_swizzle.cu, compute_ref_swizzle).
 * The pads hold scale 1. Written from those sources and cuBLASLt's
 * documentation; no GPU checked it before it was committed: the GPU
 * bundle's check-fp8 (tests/test_fp8_cuda.c) holds every recipe to the
 * CPU build's prt_fp8_gemm on a device. */
#include <cublasLt.h>
#include <stdio.h>

static cublasLtHandle_t fp8_lt;
static void *fp8_lt_ws;
static void *fp8_sc;          /* the GEMM-ready scales of the last GEMM's two operands */
static size_t fp8_sc_bytes;
enum { FP8_LT_WS_BYTES = 32 << 20 };   /* NVIDIA's workspace recommendation for Hopper */

/* What recipe r's GEMMs need of the device, as compute capability x 10:
 * the lowest, and the highest (0: none). FP8 tensor cores from Ada (8.9);
 * outer-vector scales on Hopper and later; 128-element block scales on
 * Hopper alone (on Blackwell TE emulates them through MXFP8: its
 * nvte_swizzle_block_scaling_to_mxfp8_scaling_factors); MX scales on
 * Blackwell (10.0) and later. */
static void fp8_recipe_arch(prt_fp8_recipe r, int *lo, int *hi)
{
    *lo = r == PRT_FP8_MXFP8 ? 100 : r == PRT_FP8_ROWWISE || r == PRT_FP8_BLOCKWISE ? 90 : 89;
    *hi = r == PRT_FP8_BLOCKWISE ? 90 : 0;
}

extern "C" prt_status prt_fp8_device_check(prt_fp8_recipe r, char *buf, size_t len)
{
    int dev = 0, major = 0, minor = 0, lo, hi;
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
    fp8_recipe_arch(r, &lo, &hi);
    int cc = major * 10 + minor;
    if (cc >= lo && (!hi || cc <= hi)) return PRT_OK;
    if (r == PRT_FP8_TENSORWISE || r == PRT_FP8_DELAYED)
        snprintf(buf, len, "FP8 GEMMs need FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper, "
                 "Blackwell); device %d, %s, is %d.%d", dev, name, major, minor);
    else
        snprintf(buf, len, "fp8 recipe %s needs cuBLASLt's %s scales, which run on compute capability %d.%d%s; "
                 "device %d, %s, is %d.%d", prt_fp8_recipe_name(r),
                 r == PRT_FP8_ROWWISE ? "outer-vector" : r == PRT_FP8_BLOCKWISE ? "128-element block" : "MX (E8M0)",
                 lo / 10, lo % 10, hi ? " alone (Hopper)" : " or newer", dev, name, major, minor);
    prt_op_fail(PRT_ERR_CUDA, "prt_fp8_device_check", "%s", buf);   /* prt_run_fail prints it */
    return PRT_ERR_CUDA;
}

/* The handle and workspace, made once; false (recorded) if they cannot be. */
static bool fp8_lt_ready(const char *op)
{
    if (fp8_lt) return true;
    char why[320];
    if (prt_fp8_device_check(PRT_FP8_TENSORWISE, why, sizeof why) != PRT_OK) return false;   /* recorded there */
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
    if (fp8_sc) cudaFree(fp8_sc);
    fp8_lt = NULL;
    fp8_lt_ws = fp8_sc = NULL;
    fp8_sc_bytes = 0;
}

static cudaDataType fp8_type(prt_fp8_format f) { return f == PRT_FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

/* How one operand's scales reach cuBLASLt (ORDER: as the modes above). */
typedef enum { SC_SCALAR, SC_OUTER, SC_VEC128, SC_BLK128, SC_MX32, SC_BAD } fp8_scaling;

static bool grid_is(const prt_fp8_grid *g, size_t br, size_t bc) { return g->br == br && g->bc == bc; }

/* The modes of a TN GEMM's two K_COLS operands (a (M, K), b (N, K)), from
 * their grids: one scale each; blocks of 128 along K, one operand's
 * possibly 128 x 128; one scale per row; blocks of 32. A grid may fit
 * two (a row of 128 is one block of 128): the first that fits both is
 * taken, so the pair always agrees. SC_BAD when none does, or K is not a
 * multiple of the blocks. */
static void fp8_modes(const prt_fp8_grid *a, const prt_fp8_grid *b, size_t K, fp8_scaling *ma, fp8_scaling *mb)
{
    *ma = *mb = SC_BAD;
    if (prt_fp8_nblocks(a) == 1 && prt_fp8_nblocks(b) == 1) {
        *ma = *mb = SC_SCALAR;
    } else if (K % 128 == 0 && (grid_is(a, 1, 128) || grid_is(a, 128, 128)) &&
               (grid_is(b, 1, 128) || grid_is(b, 128, 128)) && !(grid_is(a, 128, 128) && grid_is(b, 128, 128))) {
        *ma = a->br == 128 ? SC_BLK128 : SC_VEC128;
        *mb = b->br == 128 ? SC_BLK128 : SC_VEC128;
    } else if (a->br == 1 && a->nbc == 1 && b->br == 1 && b->nbc == 1) {
        *ma = *mb = SC_OUTER;
    } else if (K % 32 == 0 && grid_is(a, 1, 32) && grid_is(b, 1, 32)) {
        *ma = *mb = SC_MX32;
    }
}

static size_t pad_to(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* An operand's GEMM-ready scales: rows x cols of elem bytes, row-major
 * (elem 0: its own scale_inv serves). */
typedef struct { size_t rows, cols, elem; } fp8_sc_shape;

static fp8_sc_shape fp8_sc_shape_of(fp8_scaling m, const prt_fp8_grid *g)
{
    switch (m) {
    case SC_VEC128: return (fp8_sc_shape){ g->nbc, pad_to(g->rows, 4), sizeof(float) };   /* (K/128, pad4(rows)) */
    case SC_BLK128: return (fp8_sc_shape){ g->nbr, pad_to(g->nbc, 4), sizeof(float) };    /* (rows/128, pad4(K/128)) */
    case SC_MX32:   return (fp8_sc_shape){ pad_to(g->rows, 128), pad_to(g->nbc, 4), 1 };  /* E8M0 bytes in tiles */
    default:        return (fp8_sc_shape){ 0, 0, 0 };
    }
}

static size_t fp8_sc_size(fp8_scaling m, const prt_fp8_grid *g)
{
    fp8_sc_shape s = fp8_sc_shape_of(m, g);
    return s.rows * s.cols * s.elem;
}

/* VEC128: out (nkb, ld) from in (rows, nkb); pads 1. */
__global__ static void k_fp8_sc_vec128(float *out, const float *in, size_t rows, size_t nkb, size_t ld)
{
    size_t i = gtid();
    if (i >= nkb * ld) return;
    size_t kb = i / ld, r = i % ld;
    out[i] = r < rows ? in[r * nkb + kb] : 1.0f;
}

/* BLK128x128: out (nrb, ld) from in (nrb, nkb); pads 1. */
__global__ static void k_fp8_sc_blk128(float *out, const float *in, size_t nrb, size_t nkb, size_t ld)
{
    size_t i = gtid();
    if (i >= nrb * ld) return;
    size_t rb = i / ld, kb = i % ld;
    out[i] = kb < nkb ? in[rb * nkb + kb] : 1.0f;
}

/* The E8M0 code of a power of two (prt_e8m0_encode's rule, on the device). */
static __device__ __forceinline__ uint8_t e8m0(float pow2)
{
    if (!(pow2 > 0.0f) || isinf(pow2)) return 0xFFu;
    int e = prt_f32_floor_log2(pow2);
    return (uint8_t)(e < -127 ? 0 : e > 127 ? 254 : e + 127);
}

/* MX32: the E8M0 codes of in (rows, nkb) in 128 x 4 tiles of 512 bytes:
 * scale (r, k) of a (R, Kp) padded grid (R a multiple of 128, Kp of 4) at
 * (r / 128) * 128 * Kp + (k / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + k % 4;
 * pads 127 (scale 1). */
__global__ static void k_fp8_sc_mx32(uint8_t *out, const float *in, size_t rows, size_t nkb, size_t R, size_t Kp)
{
    size_t i = gtid();
    if (i >= R * Kp) return;
    size_t r = i / Kp, k = i % Kp;
    size_t o = (r / 128) * 128 * Kp + (k / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + k % 4;
    out[o] = r < rows && k < nkb ? e8m0(in[r * nkb + k]) : (uint8_t)127;
}

/* The scale pointer cuBLASLt reads for operand t (mode m): its own
 * scale_inv, or its GEMM-ready copy at dst (fp8_sc_size bytes). */
static const void *fp8_gemm_scales(const char *op, fp8_scaling m, const prt_fp8_tensor *t, void *dst)
{
    const prt_fp8_grid *g = &t->g;
    fp8_sc_shape s = fp8_sc_shape_of(m, g);
    size_t n = s.rows * s.cols;
    switch (m) {
    case SC_VEC128:
        PRT_LAUNCH(op, grid_for(n), 0, k_fp8_sc_vec128, (float *)dst, t->scale_inv, g->rows, g->nbc, s.cols);
        return dst;
    case SC_BLK128:
        PRT_LAUNCH(op, grid_for(n), 0, k_fp8_sc_blk128, (float *)dst, t->scale_inv, g->nbr, g->nbc, s.cols);
        return dst;
    case SC_MX32:
        PRT_LAUNCH(op, grid_for(n), 0, k_fp8_sc_mx32, (uint8_t *)dst, t->scale_inv, g->rows, g->nbc, s.rows,
                   s.cols);
        return dst;
    default:
        return t->scale_inv;
    }
}

/* The scratch of the GEMM-ready scales, at least bytes (kept; grown by a
 * fresh cudaMalloc, which waits for the GEMMs that read the old one). */
static bool fp8_sc_reserve(const char *op, size_t bytes)
{
    if (bytes <= fp8_sc_bytes) return true;
    if (fp8_sc) cudaFree(fp8_sc);
    fp8_sc = NULL;
    fp8_sc_bytes = 0;
    if (!prt_cuda_ok(cudaMalloc(&fp8_sc, bytes), op, "cudaMalloc (GEMM-ready FP8 scales)")) return false;
    fp8_sc_bytes = bytes;
    return true;
}

static cublasLtMatmulMatrixScale_t lt_scale_mode(fp8_scaling m)
{
    switch (m) {
    case SC_OUTER:  return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case SC_VEC128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case SC_BLK128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    case SC_MX32:   return CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    default:        return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    }
}

/* Whether t is an (rows, cols) operand with its blocks along K (its cols). */
static bool fp8_tn_operand(const prt_fp8_tensor *t, size_t rows, size_t cols)
{
    return t->g.rows == rows && t->g.cols == cols && (t->g.k == PRT_FP8_K_COLS || prt_fp8_nblocks(&t->g) == 1);
}

extern "C" prt_status prt_fp8_gemm_tn(void *C, bool c_fp32, const prt_fp8_tensor *A, const prt_fp8_tensor *B,
                                      size_t M, size_t N, size_t K, float beta)
{
    const char *op = "prt_fp8_gemm";
    if (prt_op_fault(op)) return PRT_OK;   /* PLANRT_FAULT's injected failure, reported at the sync */
    fp8_scaling ma = SC_BAD, mb = SC_BAD;
    if (M && N && K && fp8_tn_operand(A, M, K) && fp8_tn_operand(B, N, K)) fp8_modes(&A->g, &B->g, K, &ma, &mb);
    if (ma == SC_BAD || K % 16 || (A->fmt == PRT_FP8_E5M2 && B->fmt == PRT_FP8_E5M2) || (!c_fp32 && beta != 0.0f) ||
        M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return PRT_ERR_ARG;
    if (!fp8_lt_ready(op)) return PRT_ERR_CUDA;   /* recorded too: the step's sync reports it */
    /* the GEMM-ready scales: our B's (cuBLASLt's A) first, 256-byte aligned */
    size_t nb = pad_to(fp8_sc_size(mb, &B->g), 256), na = fp8_sc_size(ma, &A->g);
    if (nb + na && !fp8_sc_reserve(op, nb + na)) return PRT_OK;   /* recorded */
    const void *sa = fp8_gemm_scales(op, mb, B, fp8_sc);   /* cuBLASLt's A is our B */
    const void *sb = fp8_gemm_scales(op, ma, A, (char *)fp8_sc + nb);
    cublasLtMatmulMatrixScale_t mode_a = lt_scale_mode(mb), mode_b = lt_scale_mode(ma);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
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
              prt_cublas_ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a,
                                                           sizeof mode_a),
                            op, "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)") &&
              prt_cublas_ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b,
                                                           sizeof mode_b),
                            op, "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)") &&
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
    static const char *const MODE[] = { "per-tensor", "per-row", "1x128-block", "128x128-block", "MX" };
    if (ok && !found) {
        prt_op_fail(PRT_ERR_CUDA, op, "cuBLASLt has no FP8 algorithm for M %zu N %zu K %zu (%s %s x %s %s -> %s)",
                    M, N, K, A->fmt == PRT_FP8_E4M3 ? "e4m3" : "e5m2", MODE[ma],
                    B->fmt == PRT_FP8_E4M3 ? "e4m3" : "e5m2", MODE[mb], c_fp32 ? "fp32" : "bf16");
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

/* dst (nbc, nbr) = src (nbr, nbc)^T: a grid's scales, transposed. */
__global__ static void k_fp8_scale_transpose(float *dst, const float *src, size_t nbr, size_t nbc)
{
    size_t i = gtid();
    if (i >= nbr * nbc) return;
    size_t r = i / nbc, c = i % nbc;
    dst[c * nbr + r] = src[i];
}

extern "C" prt_status prt_fp8_transpose(prt_fp8_tensor *dst, const prt_fp8_tensor *src)
{
    const char *op = "prt_fp8_transpose";
    const prt_fp8_grid s = src->g;
    size_t nb = prt_fp8_nblocks(&s);
    if (!s.rows || !s.cols || (nb > 1 && dst->scale_inv == src->scale_inv)) return PRT_ERR_ARG;
    size_t rows = s.rows, cols = s.cols;
    dst->fmt = src->fmt;
    /* the grid transposed: its blocks now lie along dst's columns where
     * they lay along src's rows; one scale has no axis, and is the TN
     * GEMM's K_COLS operand whatever src's was */
    dst->g = (prt_fp8_grid){ .rows = cols, .cols = rows, .br = s.bc, .bc = s.br, .nbr = s.nbc, .nbc = s.nbr,
                             .k = nb == 1 || s.k == PRT_FP8_K_ROWS ? PRT_FP8_K_COLS : PRT_FP8_K_ROWS };
    if (prt_op_fault(op)) return PRT_OK;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32)), block(32, 8);
    k_fp8_transpose<<<grid, block, 0, PRT_OPS_STREAM>>>(dst->q, src->q, rows, cols);
    PRT_CUDA_LAUNCHED(op);
    if (nb > 1)
        PRT_LAUNCH(op, grid_for(nb), 0, k_fp8_scale_transpose, dst->scale_inv, src->scale_inv, s.nbr, s.nbc);
    else if (dst->scale_inv != src->scale_inv)
        prt_cuda_ok(cudaMemcpyAsync(dst->scale_inv, src->scale_inv, sizeof(float), cudaMemcpyDeviceToDevice,
                                    PRT_OPS_STREAM),
                    op, "cudaMemcpyAsync (scale_inv)");
    return PRT_OK;
}
