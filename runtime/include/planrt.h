/*
 * planrt.h: the planc runtime, the only header a generated program includes.
 *
 * libplanrt implements what a training step needs beyond the step's own
 * order of operations: collectives over MPI (CPU) or NCCL (GPU), the layers'
 * forward and backward passes over OpenBLAS or cuBLAS, AdamW, initialisation
 * and data loading. It never includes dsl/, planner/ or codegen/ headers.
 *
 * The same API is built twice: build/lib/libplanrt.a (CPU: fp32, Open MPI,
 * OpenBLAS; pointers are host pointers) and build/lib/libplanrt_cuda.a
 * (CUDA: bf16 compute with fp32 master weights, NCCL, cuBLAS; tensor
 * pointers are device pointers). PRT_CUDA is defined in the latter.
 *
 * Conventions: every public symbol starts with prt_; functions that can fail
 * return prt_status (PRT_OK == 0) and never exit; counts are size_t elements.
 */
#ifndef PLANRT_H
#define PLANRT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. ORDER PRT_STATUS: keep prt_status_str() in step. */
typedef enum {
    PRT_OK = 0,          /* success */
    PRT_ERR_ARG,         /* invalid argument (count, root, type, op) */
    PRT_ERR_MPI,         /* the MPI library reported an error */
    PRT_ERR_CUDA,        /* CUDA, cuBLAS or NCCL reported an error */
    PRT_ERR_NOMEM,       /* allocation failed */
    PRT_ERR_IO,          /* a file could not be read or written */
    PRT_ERR_FORMAT,      /* a file is malformed (bad magic, truncated) */
    PRT_ERR_TIMEOUT,     /* a peer did not answer in time */
    PRT_ERR_UNSUPPORTED, /* not available in this build (e.g. bf16 on CPU) */
    PRT_ERR_OP,          /* a compute op failed (prt_ops_sync: a fault PLANRT_FAULT injected) */
} prt_status;

/* Element types. ORDER PRT_DTYPE: keep prt_dtype_size() in step. */
typedef enum {
    PRT_FP32,   /* float */
    PRT_FP16,   /* IEEE half */
    PRT_BF16,   /* bfloat16 (GPU backend) */
    PRT_INT32,  /* int32_t */
    PRT_INT64,  /* int64_t */
} prt_dtype;

const char *prt_status_str(prt_status s);
size_t      prt_dtype_size(prt_dtype t);

#ifdef __cplusplus
}
#endif

/* The two halves of the runtime. */
#include "prt_comm.h"   /* context, groups, collectives, point-to-point */
#include "prt_ops.h"    /* layers, optimizer, initialisation, data */
#include "prt_par.h"    /* ZeRO sharding, TP splits, pipeline transfers */
#include "prt_ckpt.h"   /* safetensors checkpoints */
#include "prt_trace.h"  /* measured traces of a step (Chrome trace format) */

#endif /* PLANRT_H */
