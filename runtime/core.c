/*
 * core.c: what every part of the runtime shares: status strings, type sizes.
 */
#include "planrt.h"

/* ORDER PRT_STATUS */
const char *prt_status_str(prt_status s)
{
    switch (s) {
    case PRT_OK:              return "ok";
    case PRT_ERR_ARG:         return "invalid argument";
    case PRT_ERR_MPI:         return "MPI error";
    case PRT_ERR_CUDA:        return "CUDA/NCCL/cuBLAS error";
    case PRT_ERR_NOMEM:       return "out of memory";
    case PRT_ERR_IO:          return "I/O error";
    case PRT_ERR_FORMAT:      return "malformed file";
    case PRT_ERR_TIMEOUT:     return "timed out";
    case PRT_ERR_UNSUPPORTED: return "not supported in this build";
    case PRT_ERR_OP:          return "a compute op failed";
    }
    return "unknown status";
}

/* ORDER PRT_DTYPE */
size_t prt_dtype_size(prt_dtype t)
{
    switch (t) {
    case PRT_FP32:  return 4;
    case PRT_FP16:  return 2;
    case PRT_BF16:  return 2;
    case PRT_INT32: return 4;
    case PRT_INT64: return 8;
    }
    return 0;
}
