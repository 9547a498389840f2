/*
 * codegen.h: the code generator — a checked Plan in, one readable C/CUDA
 * program out, and the compiler runs that turn it into an executable.
 *
 * cg_emit() lowers the plan to its Program (planner/program.h) and writes
 * one file that includes only planrt.h: a header comment with the layout and
 * planc's predictions (the simulated Program's time), the parameter table,
 * the layers' forward and backward passes of this plan alone (the features
 * it fixes resolved from codegen/program_template.c) with every
 * tensor-parallel collective spelled out, one step function per pipeline
 * stage that is that stage's op list in order (regular rounds as loops,
 * the step-level collectives as lines), and main. The same text compiles
 * as C (CPU target, MODEL.c) and as CUDA (nvcc, MODEL.cu). Emission is
 * deterministic: same plan and name, same bytes.
 *
 * cg_build() starts the compiler with posix_spawnp (never a shell) and
 * returns its status; the compiler's own messages go to the terminal.
 */
#ifndef PLANC_CODEGEN_H
#define PLANC_CODEGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "planner/plan.h"

typedef enum {
    CG_TARGET_CPU,   /* mpicc -x c, libplanrt.a, OpenBLAS */
    CG_TARGET_CUDA,  /* nvcc sm_80 + sm_90, libplanrt_cuda.a, cuBLAS, NCCL, MPI */
} CgTarget;

/* Write the program of plan p to out. Returns false with the reason in
 * why when the plan cannot be emitted (invalid layout, a model the
 * generator does not handle). The first comment line names the file
 * MODEL.c, the CPU target's source (cg_emit_named: another name). */
bool cg_emit(const Plan *p, FILE *out, char *why, size_t len);

/* The same, the first comment line naming the file `name` (its last path
 * component; NULL: MODEL.c). */
bool cg_emit_named(const Plan *p, const char *name, FILE *out, char *why, size_t len);

/* The extension of target t's source: ".c" (compiled as C by mpicc) or
 * ".cu" (nvcc takes a file as CUDA by that name). The program is the same. */
const char *cg_source_ext(CgTarget t);

/* Whether target t's runtime computes in the plan's dtype, the reason in
 * why if not. The CPU runtime (libplanrt.a) is fp32 throughout (prt_act
 * is float), so it runs fp32 plans only: a bf16 or fp16 plan's program
 * there would train in fp32 under a header that predicts 16-bit memory.
 * The CUDA runtime computes in bf16 with fp32 master weights. build
 * --target cpu asks this before it emits; cg_emit writes the same refusal
 * as an #error for a compile without PRT_CUDA into a 16-bit plan's
 * program (emit has no target: its file compiles either way). */
bool cg_target_dtype(const Plan *p, CgTarget t, char *why, size_t len);
/* What to write instead (a note after cg_target_dtype's reason). */
extern const char cg_target_dtype_hint[];

/* Whether target t's runtime runs the plan's FP8 GEMMs, the reason in why
 * if not: the CUDA build takes every recipe with every FP8 GEMM dimension
 * (the micro-batch's tokens, each FP8 linear's widths on a TP rank) a
 * multiple of 16, 32 under mxfp8 and 128 under blockwise (cuBLASLt's). build
 * --target cuda asks this before it emits; cg_emit writes the refusal as
 * an #error for a compile with PRT_CUDA. */
bool cg_target_fp8(const Plan *p, CgTarget t, char *why, size_t len);

/* Whether model m has an attention layer of kind mla: the CPU runtime
 * trains it (prt_mla_*), the CUDA one has no such op, so build --target
 * cuda refuses it and its program stops nvcc with an #error. */
bool cg_model_has_mla(const Model *m);

/* Where the runtime lives: its header directory and library directory. */
typedef struct {
    const char *include_dir;   /* holds planrt.h */
    const char *lib_dir;       /* holds libplanrt.a / libplanrt_cuda.a */
    const char *cuda_home;     /* CUDA target: holds bin/nvcc, lib64 (NULL: nvcc on PATH) */
} CgRuntime;

/* Compile src (a file cg_emit wrote) into exe for target t. Returns the
 * compiler's exit status (0 success); -1 when it could not be started,
 * with the reason in why. */
int cg_build(const char *src, const char *exe, CgTarget t, const CgRuntime *rt,
             char *why, size_t len);

/* Write the sbatch script that runs exe (target t) for plan p: nodes,
 * tasks per node and GPUs per task from the layout and the cluster block,
 * srun with --kill-on-bad-exit, the script's arguments passed on to exe.
 * User text is sanitised (job name) or single-quoted (path); false with
 * the reason in why when the layout does not fit the cluster or the path
 * cannot be quoted. */
bool cg_sbatch(const Plan *p, const char *exe, CgTarget t, FILE *out, char *why, size_t len);

/* Make s safe inside a C comment (no "*" followed by "/", printable ASCII
 * only) or a C string literal (escaped), into buf of n bytes. */
void cg_comment_text(const char *s, char *buf, size_t n);
void cg_string_literal(const char *s, char *buf, size_t n);

#endif
