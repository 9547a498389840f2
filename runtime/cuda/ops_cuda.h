/*
 * ops_cuda.h: what the CUDA build's op files share (private to
 * runtime/cuda/ops_*): the cuBLAS handle, the ops' stream, and the checks
 * every CUDA and cuBLAS call goes through where it is made. A failure is
 * recorded by the op-error path both builds share (runtime/ops/ops_err.h:
 * the first of the step, with the op and the layer) and reported by
 * prt_ops_sync at the end of the step. Ops run on the legacy default
 * stream, in order with each other and with NCCL work queued on it.
 */
#ifndef PRT_OPS_CUDA_H
#define PRT_OPS_CUDA_H

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include "planrt.h"
#include "../ops/ops_err.h"

/* The stream every op, copy and stream-ordered allocation runs on. */
#define PRT_OPS_STREAM ((cudaStream_t)0)

#ifdef __cplusplus
extern "C" {
#endif

/* The handle, created on first use (NULL if creation failed). */
cublasHandle_t prt_cuda_blas(void);
/* Whether a CUDA runtime call succeeded; if not, op's failure is recorded
 * as "CALL failed: cudaErrorName (text)". */
bool prt_cuda_ok(cudaError_t e, const char *op, const char *call);
/* The same for a cuBLAS call: "CALL failed: CUBLAS_STATUS_...". */
bool prt_cublas_ok(cublasStatus_t s, const char *op, const char *call);
/* C = alpha op(A) op(B) + beta C in cuBLAS's column-major terms, bf16 A
 * and B, C of type ct (bf16 or fp32), fp32 accumulation
 * (CUBLAS_COMPUTE_32F), batched with strides (runtime/cuda/ops_gemm.cu);
 * nothing for an empty C. A row-major product is its transpose. */
void prt_cuda_gemm(const char *op, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,
                   size_t k, float alpha, const void *A, size_t lda, long long sa, const void *B,
                   size_t ldb, long long sb, float beta, void *C, cudaDataType ct, size_t ldc,
                   long long sc, size_t batch);

/* Destroy the FP8 GEMM's cuBLASLt handle and workspace, if made
 * (runtime/cuda/ops_fp8.cu; prt_ops_finalize). */
void prt_cuda_fp8_finalize(void);

#ifdef __cplusplus
}
#endif

/* After each launch: a bad configuration shows up here, not later (an
 * earlier kernel's fault may surface here too: the record says which op
 * saw it, the step's sync says the step failed). */
#define PRT_CUDA_LAUNCHED(op) ((void)prt_cuda_ok(cudaGetLastError(), op, "kernel launch"))

#endif
