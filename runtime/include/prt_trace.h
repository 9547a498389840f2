/*
 * prt_trace.h: measured traces of one training step (runtime/par/trace.c).
 *
 * A generated executable run with `--trace OUT.json [--trace-step K]`
 * records, on every rank, the start and end of each op of the Program
 * during step K (default: the last step), gathers every rank's records to
 * rank 0 at the end of the run and writes them in the Chrome Trace Event
 * Format that `planc trace` writes for its prediction, so that
 * `planc trace --compare OUT.json FILE -o OUT.svg` draws the two together.
 *
 * The generated program's op dispatcher calls prt_trace_begin and
 * prt_trace_end around every op; both return at once when tracing is off
 * or the op is not in the traced step. Op kinds are the Program's
 * (ORDER PlanOpKind): 0 FWD .. 14 NORM_REDUCE. Other kinds (the program's
 * own bookkeeping, numbered after them) are neither recorded nor counted,
 * so the n-th recorded op of a stage is op n of the stage's op list.
 */
#ifndef PRT_TRACE_H
#define PRT_TRACE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Program op kinds a trace records, in PlanOpKind's order. */
#define PRT_TRACE_N_KINDS 15

/* Set tracing up from the command line, before MPI starts: path NULL turns
 * it off; step NULL traces the last of `steps` steps. PRT_ERR_ARG with the
 * reason in why (a step that is no number or not below `steps`). prog is
 * the executable's name, written into the file. Every rank must pass the
 * same values. */
prt_status prt_trace_setup(const char *path, const char *step, long steps, const char *prog,
                           char *why, size_t len);

/* The op (kind, mb, chunk) of step `step` starts / ended. The first op of
 * the traced step waits at a barrier of all ranks: the common origin of
 * every rank's clock. On CUDA both calls synchronize the device while the
 * traced step runs, so an op's interval covers its kernels. */
void prt_trace_begin(long step, int kind, int mb, int chunk);
void prt_trace_end(void);

/* Gather every rank's records to rank 0, which writes the file. Collective
 * over all ranks of c; PRT_OK at once when tracing is off. On failure the
 * reason is in prt_trace_last_error() (on the rank that failed). */
prt_status prt_trace_write(prt_ctx *c);
const char *prt_trace_last_error(void);

/* "FWD", "BWD", ... for kind 0 .. PRT_TRACE_N_KINDS-1 (plan_op_name's). */
const char *prt_trace_kind_name(int kind);

#ifdef __cplusplus
}
#endif

#endif /* PRT_TRACE_H */
