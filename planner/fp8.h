/*
 * fp8.h: FP8 training (issue 27) in the planner — the recipes' names and
 * defaults, the one rule of what may run them, which GEMMs run in FP8, at
 * what rate, what their casts cost and what they change in memory.
 *
 * The recipes are Transformer Engine's and torchao's (plan.h,
 * PlanFp8Recipe). Only the linear layers' three GEMMs (forward, dX, dW:
 * Float8Linear, te.Linear) run in FP8; attention's QK^T and PV stay bf16
 * (FlashAttention/cuDNN in bf16, TE's default; TE's fp8 attention, a
 * separate option, is not modelled), the LM head stays bf16 (torchtitan's
 * float8 filter skips the output layer), and first_last_bf16 keeps the
 * first and last block's linears in bf16 (Megatron's --first-last-layers-bf16).
 *
 * The software decides where the casts and copies go: torchao (software
 * torchtitan) casts both operands of every GEMM from the bf16 tensors it
 * saves; Transformer Engine (every other stack, planc's own model of a
 * Megatron-style program) casts each tensor once into the layouts its
 * GEMMs need, saves the FP8 input of each linear for the weight gradient
 * and keeps the FP8 weights (and, on Hopper, their transposes) for the
 * step. cost.c and memory.c call these functions; nothing here is timed
 * elsewhere.
 */
#ifndef PLANC_FP8_H
#define PLANC_FP8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "planner/plan.h"
#include "planner/model.h"
#include "planner/comm.h"
#include "planner/layout.h"

/* The names of the recipes and formats as the plan block writes them.
 * ORDER PlanFp8Recipe, PlanFp8Format. */
extern const char *const plan_fp8_recipe_names[PLAN_N_FP8_RECIPES];
extern const char *const plan_fp8_format_names[2];

/* TE's DelayedScaling amax_history_len default
 * (transformer_engine/common/recipe.py, DelayedScaling(amax_history_len=1024)). */
#define PLAN_FP8_AMAX_HISTORY 1024

/* The settings a recipe has when the plan names only the recipe: format
 * hybrid (E4M3 forward, E5M2 gradients) for tensorwise and delayed (TE's
 * DelayedScaling and Float8CurrentScaling default Format.HYBRID; torchao's
 * tensorwise casts grad_output to e5m2), e4m3 for rowwise, blockwise and
 * mxfp8 (torchao's rowwise recipe casts all three to e4m3fn; TE's
 * Float8BlockScaling and MXFP8BlockScaling default Format.E4M3);
 * amax_history 1024; all_gather false (torchao's
 * enable_fsdp_float8_all_gather and Megatron's --fp8-param-gather are off
 * by default); first_last_bf16 false. */
PlanFp8 plan_fp8_defaults(int recipe);

/* Whether the plan trains in FP8. */
static inline bool plan_fp8_on(const Software *w)
{
    return w->fp8.recipe > PLAN_FP8_OFF && w->fp8.recipe < PLAN_N_FP8_RECIPES;
}

/* The one rule of FP8 (sema at the block, plan_layout_check for Plans
 * built in C): the device has FP8 tensor cores (Device.flops_fp8 > 0;
 * TE's check_fp8_support: compute capability 8.9 or newer); mxfp8 needs
 * Blackwell (sm_100: TE's check_mxfp8_support); under another stack's
 * software the model trains in a 16-bit dtype (their FP8 GEMMs take bf16
 * inputs and a model fp32 has no bf16 tensors to cast), while planc's
 * runtime casts fp32 tensors and takes an fp32 model too (its CPU target
 * computes in fp32 only); no mixture of experts (their grouped GEMMs in FP8 are
 * not modelled); the amax history applies to recipe delayed alone; torchao
 * (software torchtitan) all-gathers FP8 weights under tensorwise scaling
 * only (Float8LinearConfig.__post_init__) and has no blockwise or delayed
 * recipe in torchtitan's float8 converter. */
bool plan_rule_fp8(const Plan *p, const PlanFp8 *f, char *why, size_t len);

/* Whether layer l's linears run in FP8 under the plan: an attention or
 * MLP sublayer not marked fp8_exempt. */
bool plan_fp8_layer(const Plan *p, const Layer *l);

/* Whether GEMM g of layer l runs in FP8 (a linear's, not the attention core's). */
bool plan_fp8_gemm(const Plan *p, const Layer *l, const PlanGemm *g);

/* The fraction of flops_fp8 an FP8 GEMM of `flops` FLOPs reaches on d in
 * short runs: the measured cuBLASLt rates on H100 (kernel-rates.md:
 * Azure's ND_H100_v5 after 10,000 warm-up iterations, 1290 TFLOP/s at
 * 8192^3, 1377 at 16384^3, 65 / 70 % of 1979), interpolated in log FLOPs
 * and held at the ends, over the H100's sustained fraction (they are
 * sustained figures; layer costs multiply by the device's own
 * plan_sustained, as for bf16). The GEMM's shape then costs it its tile
 * and wave quantisation (cost.c). */
double plan_fp8_gemm_eff(const Device *d, double flops);

/* Seconds of pass `pass` of a linear's FP8 GEMM whose forward is (m x k)(k
 * x n), `batch` times, on d in a training step (sustained clock):
 * cost.c's roofline at flops_fp8 x plan_fp8_gemm_eff, 1-byte operands. */
double plan_fp8_gemm_time(const Device *d, int pass, double m, double n, double k, double batch);

/* The casts of one FP8 linear (forward GEMM (m x k)(k x n)) in one
 * micro-batch on one GPU: HBM bytes and launches forward and backward,
 * and the tensorwise amax all-reduces over the TP group. */
typedef struct {
    double fwd_bytes, bwd_bytes;
    int    fwd_kernels, bwd_kernels;
    int    fwd_amax, bwd_amax;       /* all-reduces of one fp32 over the TP group */
} PlanFp8Casts;

/* tp: the TP degree; dp: the ZeRO-3 DP degree (the weight is cast on its
 * shard before an fp8 all-gather), 1 otherwise. */
void plan_fp8_casts(const Plan *p, double m, double n, double k, int tp, int dp, int zero, PlanFp8Casts *out);

/* Seconds of those casts (plan_stream_time) and of the amax all-reduces
 * on TP group tpg (latency-bound), forward and backward. */
void plan_fp8_cast_time(const Plan *p, const PlanFp8Casts *c, PlanGroup tpg, double *fwd, double *bwd,
                        double *ar_fwd, double *ar_bwd);

/* Parameters of the FP8 linears among layers [first, end) on one TP rank,
 * their largest layer's, and the FP8 linears' count (for the scales). */
typedef struct {
    double params, layer_max;
    double other_max;   /* the largest layer not in FP8 (embedding, head), parameters per TP rank */
    int    linears;
} PlanFp8Params;

void plan_fp8_params(const Plan *p, int first, int end, int tp, PlanFp8Params *out);

/* What FP8 changes in one stage's memory per GPU, bytes (negative: less):
 * params (TE's fp8 params under all_gather: 1 byte instead of 2), buffers
 * (TE's cached fp8 weights and transposes; the ZeRO-3 gathered layers in
 * fp8 under all_gather; a transient fp8 copy of the computing layer; the
 * scales and amax histories) and activations per micro-batch (TE saves the
 * fp8 input of each linear for the weight gradient, not the bf16 one). */
typedef struct {
    double params, buffers, act_per_mb;
    double copies;      /* of buffers: the FP8 copies themselves (weights, their scales, histories,
                           operands), reported as a stage's fp8_bytes */
    double transient;   /* planc's program: its largest GEMM's quantised operands (a max over
                           chunks, not a sum; plan_fp8_stage_memory adds it) */
} PlanFp8Mem;

void plan_fp8_memory(const Plan *p, const Layout *l, int first, int end, PlanFp8Mem *out);

/* The same summed over stage s's chunks (chunk v * pp + s of `chunks`,
 * plan_split's), as memory.c applies it and check reports it. */
void plan_fp8_stage_memory(const Plan *p, const Layout *l, const PlanChunk *chunks, int s, PlanFp8Mem *out);

/* Bytes of the chunk's weights that its ZeRO all-gathers move, with `params`
 * parameters in the model's dtype of which fp8 run in FP8 linears:
 * the FP8 ones at one byte under all_gather. */
double plan_fp8_gather_bytes(const Plan *p, double params, double fp8_params);

/* Whether the software is torchao's (software torchtitan). */
bool plan_fp8_torchao(const Software *w);

/* Whether the software is planc's own program (software planc): its FP8
 * memory is what the generated program allocates (fp8_cost.c's essay),
 * not Transformer Engine's. */
bool plan_fp8_planc(const Software *w);

/* Layouts each FP8 tensor is quantised into on the plan's device: 2 on
 * Hopper and for per-block scales (TN-only FP8 GEMMs; scales along K), 1
 * for tensorwise and delayed on Blackwell (fp8_cost.c's essay). The
 * generated program keeps this many copies of each FP8 weight. */
int plan_fp8_layouts(const Plan *p);

/* One line for check: "fp8 tensorwise, hybrid (E4M3 forward, E5M2 gradients), ..." */
void plan_fp8_describe(const Plan *p, char *buf, size_t len);

/* The FP8 GEMMs' share of the model's forward GEMM FLOPs (0 without fp8). */
double plan_fp8_gemm_fraction(const Plan *p, const Layout *l);

#endif /* PLANC_FP8_H */
