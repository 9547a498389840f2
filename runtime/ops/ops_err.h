/*
 * ops_err.h: the op-error path both builds share (private to runtime/ops
 * and runtime/cuda/ops_*; runtime/ops/errors.c implements it).
 *
 * Ops are void (asynchronous on CUDA), so a failure is recorded, not
 * returned: the first one since the last prt_ops_sync wins, with the op's
 * name and the layer the program said it was in (prt_ops_where), and
 * prt_ops_sync reports it once, at the end of the step. PLANRT_FAULT
 * injects such a failure into one call of one op, so the path is tested
 * on machines without a GPU. (The names carry prt_ although private, so
 * that libplanrt_ref.a's renaming, runtime/ops.mk, gives the CPU copy its
 * own record beside the CUDA build's.)
 */
#ifndef PRT_OPS_ERR_H
#define PRT_OPS_ERR_H

#include <stdbool.h>
#include "planrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record a failure of op (st: PRT_ERR_CUDA for what CUDA or cuBLAS
 * reported); dropped if one is already pending this step. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void prt_op_fail(prt_status st, const char *op, const char *fmt, ...);
/* Whether this call of op is PLANRT_FAULT's: if so the failure is
 * recorded and the op must do nothing, as a launch that failed. */
bool prt_op_fault(const char *op);
/* Read PLANRT_FAULT (once): PRT_ERR_ARG, with the reason as the last
 * error, for a name that is no op of the list or a bad count. */
prt_status prt_op_setup(void);
/* The step's status (PRT_OK, or the first failure's), cleared for the
 * next step; the failure's text stays readable (prt_ops_last_error). */
prt_status prt_op_take(void);

#ifdef __cplusplus
}
#endif

/* First line of every op: PLANRT_FAULT's call returns at once. */
#define PRT_OP_ENTER(op) do { if (prt_op_fault(op)) return; } while (0)

#endif
