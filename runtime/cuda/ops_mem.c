/*
 * ops_mem.c: setup and memory helpers of the CUDA build (compiled by
 * mpicc with PRT_CUDA, calling the CUDA runtime's C API).
 *
 * One device per process, chosen by prt_ops_init (the caller passes
 * prt_ctx.device, which prt_init picked: the node-local rank modulo the
 * visible devices); one cuBLAS handle; one sticky error that
 * prt_ops_sync reports, so the asynchronous ops can stay void like their
 * CPU twins while a failure still reaches the caller with the op's name.
 */
#include <stdio.h>
#include "ops_cuda.h"

static cublasHandle_t blas;
static char last_error[256];
static bool failed;

void prt_cuda_note(const char *op, const char *what)
{
    if (failed)
        return;
    failed = true;
    snprintf(last_error, sizeof last_error, "%s: %s", op, what);
}

const char *prt_ops_last_error(void) { return last_error; }

cublasHandle_t prt_cuda_blas(void)
{
    if (!blas && cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
        prt_cuda_note("cublasCreate", "cannot create a cuBLAS handle (no GPU, or out of memory?)");
        blas = NULL;
    }
    return blas;
}

prt_status prt_ops_init(int device)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        prt_cuda_note("prt_ops_init", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return PRT_ERR_CUDA;
    }
    if (device < 0 || device >= n) {
        char msg[96];
        snprintf(msg, sizeof msg, "device %d requested, %d present", device, n);
        prt_cuda_note("prt_ops_init", msg);
        return PRT_ERR_ARG;
    }
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        prt_cuda_note("cudaSetDevice", cudaGetErrorString(e));
        return PRT_ERR_CUDA;
    }
    if (!prt_cuda_blas())
        return PRT_ERR_CUDA;
    /* bf16 GEMMs may use tensor cores; accumulation stays fp32 */
    cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH);
    return PRT_OK;
}

void prt_ops_finalize(void)
{
    if (blas)
        cublasDestroy(blas);
    blas = NULL;
}

prt_status prt_ops_sync(void)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        prt_cuda_note("cudaDeviceSynchronize", cudaGetErrorString(e));
    return failed ? PRT_ERR_CUDA : PRT_OK;
}

void *prt_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    if (cudaMemset(p, 0, bytes ? bytes : 1) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

void prt_free(void *p)
{
    if (p)
        cudaFree(p);
}

static prt_status check(cudaError_t e, const char *op)
{
    if (e == cudaSuccess)
        return PRT_OK;
    prt_cuda_note(op, cudaGetErrorString(e));
    return PRT_ERR_CUDA;
}

prt_status prt_zero(void *p, size_t bytes)
{
    return bytes ? check(cudaMemsetAsync(p, 0, bytes, 0), "prt_zero") : PRT_OK;
}

prt_status prt_copy_to_device(void *dst, const void *src, size_t bytes)
{
    return bytes ? check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "prt_copy_to_device")
                 : PRT_OK;
}

prt_status prt_copy_to_host(void *dst, const void *src, size_t bytes)
{
    return bytes ? check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "prt_copy_to_host")
                 : PRT_OK;
}

prt_status prt_copy(void *dst, const void *src, size_t bytes)
{
    return bytes ? check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "prt_copy")
                 : PRT_OK;
}
