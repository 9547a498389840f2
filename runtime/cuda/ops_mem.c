/*
 * ops_mem.c: setup, memory and error helpers of the CUDA build (compiled
 * by mpicc with PRT_CUDA, calling the CUDA runtime's C API).
 *
 * One device per process, chosen by prt_ops_init (the caller passes
 * prt_ctx.device, which prt_init picked: the node-local rank modulo the
 * visible devices); one cuBLAS handle with a workspace made at start;
 * failures go to the op-error path both builds share (runtime/ops/
 * errors.c), which prt_ops_sync reports once per step.
 *
 * Memory is stream-ordered: cudaMallocAsync / cudaFreeAsync on the ops'
 * stream, from the device's default pool with its release threshold raised
 * so that freed blocks stay in the pool for the next step. cudaMalloc and
 * cudaFree synchronise the whole device; inside a step (a pipeline slot's
 * activations freed and made again, ZeRO-3's gathered layers, MoE rows
 * sized by what arrived) that would stall a rank while NCCL kernels on
 * the communication stream wait for peers, and can hang the job.
 */
#include <stdint.h>
#include <stdio.h>
#include "ops_cuda.h"

static cublasHandle_t blas;
static void *blas_workspace;
/* cuBLAS's workspace, made once at start so no GEMM allocates inside a
 * step (NVIDIA's recommendation for Hopper: 32 MiB). */
enum { BLAS_WORKSPACE_BYTES = 32 << 20 };

bool prt_cuda_ok(cudaError_t e, const char *op, const char *call)
{
    if (e == cudaSuccess)
        return true;
    prt_op_fail(PRT_ERR_CUDA, op, "%s failed: %s (%s)", call, cudaGetErrorName(e), cudaGetErrorString(e));
    return false;
}

bool prt_cublas_ok(cublasStatus_t s, const char *op, const char *call)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return true;
    prt_op_fail(PRT_ERR_CUDA, op, "%s failed: %s", call, cublasGetStatusName(s));
    return false;
}

cublasHandle_t prt_cuda_blas(void)
{
    if (!blas && !prt_cublas_ok(cublasCreate(&blas), "prt_ops_init", "cublasCreate"))
        blas = NULL;
    return blas;
}

/* Freed memory stays in the default pool (threshold: all of it), so a
 * step's frees and allocations reuse blocks instead of returning them to
 * the driver and asking again. */
static bool keep_freed_memory(int device)
{
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    return prt_cuda_ok(cudaDeviceGetDefaultMemPool(&pool, device), "prt_ops_init",
                       "cudaDeviceGetDefaultMemPool") &&
           prt_cuda_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                       "prt_ops_init", "cudaMemPoolSetAttribute(ReleaseThreshold)");
}

prt_status prt_ops_init(int device)
{
    prt_status st = prt_op_setup();   /* PLANRT_FAULT */
    if (st)
        return st;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (e == cudaSuccess)
            prt_op_fail(PRT_ERR_CUDA, "prt_ops_init", "no CUDA device");
        else
            prt_cuda_ok(e, "prt_ops_init", "cudaGetDeviceCount");
        return prt_op_take();
    }
    if (device < 0 || device >= n) {
        prt_op_fail(PRT_ERR_ARG, "prt_ops_init", "device %d requested, %d present", device, n);
        return prt_op_take();
    }
    if (!prt_cuda_ok(cudaSetDevice(device), "prt_ops_init", "cudaSetDevice") || !keep_freed_memory(device) ||
        !prt_cuda_blas() ||
        !prt_cuda_ok(cudaMalloc(&blas_workspace, BLAS_WORKSPACE_BYTES), "prt_ops_init", "cudaMalloc (cuBLAS workspace)") ||
        !prt_cublas_ok(cublasSetWorkspace(blas, blas_workspace, BLAS_WORKSPACE_BYTES), "prt_ops_init",
                       "cublasSetWorkspace") ||
        /* bf16 GEMMs may use tensor cores; accumulation stays fp32 */
        !prt_cublas_ok(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "prt_ops_init", "cublasSetMathMode"))
        return prt_op_take();
    return PRT_OK;
}

void prt_ops_finalize(void)
{
    prt_cuda_fp8_finalize();
    if (blas)
        prt_cublas_ok(cublasDestroy(blas), "prt_ops_finalize", "cublasDestroy");
    if (blas_workspace)
        prt_cuda_ok(cudaFree(blas_workspace), "prt_ops_finalize", "cudaFree (cuBLAS workspace)");
    blas = NULL;
    blas_workspace = NULL;
}

/* The step's one wait for the device: a kernel that faulted after its
 * launch was accepted shows up here, then the first failure recorded. */
prt_status prt_ops_sync(void)
{
    prt_cuda_ok(cudaDeviceSynchronize(), "prt_ops_sync", "cudaDeviceSynchronize (a kernel of the step failed)");
    return prt_op_take();
}

void *prt_alloc(size_t bytes)
{
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    if (!prt_cuda_ok(cudaMallocAsync(&p, n, PRT_OPS_STREAM), "prt_alloc", "cudaMallocAsync"))
        return NULL;
    if (!prt_cuda_ok(cudaMemsetAsync(p, 0, n, PRT_OPS_STREAM), "prt_alloc", "cudaMemsetAsync")) {
        prt_cuda_ok(cudaFreeAsync(p, PRT_OPS_STREAM), "prt_alloc", "cudaFreeAsync");
        return NULL;
    }
    return p;
}

void prt_free(void *p)
{
    if (p)
        prt_cuda_ok(cudaFreeAsync(p, PRT_OPS_STREAM), "prt_free", "cudaFreeAsync");
}

/* A copy's status, recorded for the step's sync as well when it failed. */
static prt_status copied(cudaError_t e, const char *op, const char *call)
{
    return prt_cuda_ok(e, op, call) ? PRT_OK : PRT_ERR_CUDA;
}

prt_status prt_zero(void *p, size_t bytes)
{
    return bytes ? copied(cudaMemsetAsync(p, 0, bytes, PRT_OPS_STREAM), "prt_zero", "cudaMemsetAsync")
                 : PRT_OK;
}

prt_status prt_copy_to_device(void *dst, const void *src, size_t bytes)
{
    return bytes ? copied(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "prt_copy_to_device",
                          "cudaMemcpy")
                 : PRT_OK;
}

prt_status prt_copy_to_host(void *dst, const void *src, size_t bytes)
{
    return bytes ? copied(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "prt_copy_to_host",
                          "cudaMemcpy")
                 : PRT_OK;
}

prt_status prt_copy(void *dst, const void *src, size_t bytes)
{
    return bytes ? copied(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, PRT_OPS_STREAM),
                          "prt_copy", "cudaMemcpyAsync")
                 : PRT_OK;
}
