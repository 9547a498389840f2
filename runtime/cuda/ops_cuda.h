/*
 * ops_cuda.h: what the CUDA build's op files share (private to
 * runtime/cuda/ops_*): the cuBLAS handle, the sticky error, and the
 * launch check every op ends with. Ops run on the legacy default stream,
 * in order with each other and with NCCL work queued on it.
 */
#ifndef PRT_OPS_CUDA_H
#define PRT_OPS_CUDA_H

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include "planrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The handle, created on first use (NULL if creation failed). */
cublasHandle_t prt_cuda_blas(void);
/* Keep the first failure, with the op that saw it, for prt_ops_sync. */
void prt_cuda_note(const char *op, const char *what);

#ifdef __cplusplus
}
#endif

/* After each launch: a bad configuration shows up here, not later. */
#define PRT_CUDA_LAUNCHED(op) do { cudaError_t e_ = cudaGetLastError();      \
        if (e_ != cudaSuccess) prt_cuda_note(op, cudaGetErrorString(e_)); } while (0)
#define PRT_CUBLAS(op, call) do { cublasStatus_t s_ = (call);               \
        if (s_ != CUBLAS_STATUS_SUCCESS) prt_cuda_note(op, "cuBLAS call failed"); } while (0)

#endif
