/*
 * mem.c: setup and memory helpers of the CPU build.
 *
 * On the CPU every "device" pointer is a host pointer, so these are plain
 * malloc and memcpy; they exist so generated code reads the same for both
 * targets (runtime/cuda/ops_mem.c is the CUDA twin). Nothing here fails
 * except allocation; errors.c records the ops' failures for prt_ops_sync.
 */
#include <stdlib.h>
#include <string.h>
#include "ops_err.h"

prt_status prt_ops_init(int device)
{
    (void)device;
    return prt_op_setup();   /* PLANRT_FAULT */
}

void prt_ops_finalize(void) {}

/* Nothing to wait for: the step's recorded failure (an injected one; CPU
 * ops have no other), a flag test. */
prt_status prt_ops_sync(void) { return prt_op_take(); }

/* 64-byte alignment keeps AVX loads and BLAS packing on cache lines. */
void *prt_alloc(size_t bytes)
{
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p)
        memset(p, 0, rounded ? rounded : 64);
    return p;
}

void prt_free(void *p) { free(p); }

prt_status prt_zero(void *p, size_t bytes)
{
    if (!p && bytes)
        return PRT_ERR_ARG;
    if (bytes)
        memset(p, 0, bytes);
    return PRT_OK;
}

prt_status prt_copy_to_device(void *dst, const void *src, size_t bytes)
{
    if ((!dst || !src) && bytes)
        return PRT_ERR_ARG;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    return PRT_OK;
}

prt_status prt_copy_to_host(void *dst, const void *src, size_t bytes)
{
    return prt_copy_to_device(dst, src, bytes);
}

prt_status prt_copy(void *dst, const void *src, size_t bytes)
{
    return prt_copy_to_device(dst, src, bytes);
}

void prt_to_act(prt_act *dst, const float *src, size_t n)
{
    PRT_OP_ENTER("prt_to_act");
    if (dst != src)
        memmove(dst, src, n * sizeof *dst);
}

void prt_from_act(float *dst, const prt_act *src, size_t n)
{
    PRT_OP_ENTER("prt_from_act");
    if (dst != src)
        memmove(dst, src, n * sizeof *dst);
}
