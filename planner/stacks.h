/*
 * stacks.h: the software stacks a plan may name (`software NAME [VARIANT]`),
 * each a preset of every software key (plan.h, Software), as data.
 *
 * One table (stacks.c) says what each framework does, with the file and
 * flag it is read from; sema applies a row and then the keys the plan
 * writes, `check` prints the resolved row, `export` writes it as the
 * framework's flags, `emit` refuses a row planc's runtime cannot honour.
 */
#ifndef PLANC_STACKS_H
#define PLANC_STACKS_H

#include <stddef.h>
#include <stdio.h>
#include "planner/plan.h"

/* One preset: the NAME and VARIANT a plan writes, and the software. */
typedef struct {
    const char *name;     /* "planc", "megatron-core", "torchtitan", "deepspeed" */
    const char *variant;  /* "0.19", "eager", "compile"; "" where the name has one row */
    const char *source;   /* what the row is read from (a version, a recipe), for check */
    Software    sw;       /* every software key (row 0's: plan_stack_software) */
} PlanStack;

/* The names of the attention kernels (ORDER PlanAttnKernel) and of the
 * optimizers (ORDER PlanOptimizer): sema parses them, check and export
 * print them. */
extern const char *const plan_attn_kernel_names[PLAN_N_ATTN_KERNELS];
extern const char *const plan_optimizer_names[PLAN_N_OPTIMIZERS];

/* Rows of the table; row 0 is planc, what `emit` generates. */
int plan_stack_count(void);
const PlanStack *plan_stack_row(int i);

/* Every software key of row i, its index in .stack: what `software NAME
 * [VARIANT]` sets before the plan's own keys. */
Software plan_stack_software(int i);

/* The row of NAME VARIANT: variant NULL picks the name's default (its
 * first row: the newest version cited, torchtitan's eager). -1 when no
 * row has the name, -2 when the name has no such variant. */
int plan_stack_find(const char *name, const char *variant);

/* The distinct names (n of them at most, in table order), and the
 * variants of one name: for diagnostics and their suggestions. Return
 * how many were written. */
int plan_stack_names(const char **out, int n);
int plan_stack_variants(const char *name, const char **out, int n);

/* The row's name and variant as a plan writes them ("megatron-core 0.19",
 * "planc"). */
void plan_stack_label(const Software *w, char *buf, size_t len);

/* check's line: the stack and every key it resolves to, with the ZeRO
 * stage `zero` deciding overlap_param_gather's default, e.g.
 * "megatron-core 0.19 (attention cudnn; fused norm rope swiglu
 * cross_entropy; optimizer fused; overlap grad_reduce param_gather p2p;
 * gradients bf16, accumulated by the GEMM)". */
void plan_software_describe(const Plan *p, int zero, char *buf, size_t len);

/* The same as one JSON object (check --json's "software"). */
void plan_software_json(FILE *out, const Plan *p, int zero);

#endif /* PLANC_STACKS_H */
