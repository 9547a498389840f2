/*
 * fp8.c: FP8 training's recipes: their names, defaults and one rule, and
 * which GEMMs run in FP8 (issue 27; fp8.h says where each rule comes from).
 *
 * The costs and memory of the recipes are planner/fp8_cost.c's (its essay
 * says what is counted); this file holds what sema and the layout rules
 * need: the names, the defaults, the rule, which GEMMs run in FP8.
 */
#include "planner/fp8.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "planner/layout.h"
#include "planner/stacks.h"

const char *const plan_fp8_recipe_names[PLAN_N_FP8_RECIPES] = { "off", "tensorwise", "rowwise", "blockwise",
                                                                 "mxfp8", "delayed" };
const char *const plan_fp8_format_names[2] = { "e4m3", "hybrid" };

PlanFp8 plan_fp8_defaults(int recipe)
{
    bool hybrid = recipe == PLAN_FP8_TENSORWISE || recipe == PLAN_FP8_DELAYED;
    return (PlanFp8){ .recipe = recipe, .format = hybrid ? PLAN_FP8_HYBRID : PLAN_FP8_E4M3,
                      .all_gather = false, .amax_history = PLAN_FP8_AMAX_HISTORY, .first_last_bf16 = false };
}

bool plan_fp8_torchao(const Software *w)
{
    return strcmp(plan_stack_row(w->stack)->name, "torchtitan") == 0;
}

bool plan_fp8_planc(const Software *w)
{
    return strcmp(plan_stack_row(w->stack)->name, "planc") == 0;
}

bool plan_rule_fp8(const Plan *p, const PlanFp8 *f, char *why, size_t len)
{
    if (f->recipe <= PLAN_FP8_OFF || f->recipe >= PLAN_N_FP8_RECIPES) return true;
    const Device *d = &p->cluster.device;
    const char *dn = d->name ? d->name : "?", *rn = plan_fp8_recipe_names[f->recipe];
    if (!(d->flops_fp8 > 0))
        return plan_refuse(why, len, "fp8 %s: device %s has no FP8 tensor cores (flops_fp8 0; FP8 GEMMs need "
                      "compute capability 8.9 or newer: Ada, Hopper, Blackwell)", rn, dn);
    if (f->recipe == PLAN_FP8_MXFP8 && d->arch != 0 && d->arch < 100)
        return plan_refuse(why, len, "fp8 mxfp8: MXFP8's 32-element blocks with e8m0 scales run on Blackwell "
                      "(sm_100: b200-sxm-180gb, gb200), and device %s is sm_%d; use tensorwise, rowwise, blockwise "
                      "or delayed", dn, d->arch);
    /* planc's runtime casts fp32 tensors (prt_fp8_quantize reads float): an
     * fp32 model's FP8 GEMMs are what its CPU program runs, the only dtype
     * the CPU target computes in (codegen's cg_target_dtype) */
    if (p->model.dtype == DTYPE_FP32 && p->software.stack != 0)
        return plan_refuse(why, len, "fp8 %s needs a 16-bit model under software %s: model %s trains in fp32, "
                      "whose GEMMs have no bf16 tensors to cast (write `dtype bf16`)", rn,
                      plan_stack_row(p->software.stack)->name, p->model.name ? p->model.name : "?");
    if (plan_model_has_moe(&p->model))
        return plan_refuse(why, len, "fp8 %s with a mixture of experts is not modelled yet (the experts' grouped "
                      "GEMMs in FP8)", rn);
    if (f->recipe != PLAN_FP8_DELAYED && f->amax_history != PLAN_FP8_AMAX_HISTORY)
        return plan_refuse(why, len, "amax_history applies to recipe delayed (TE's DelayedScaling); fp8 %s takes "
                      "each scale from the tensor it casts", rn);
    if (plan_fp8_torchao(&p->software)) {
        if (f->recipe == PLAN_FP8_BLOCKWISE || f->recipe == PLAN_FP8_DELAYED)
            return plan_refuse(why, len, "fp8 %s: torchtitan's float8 converter (torchao) has the recipes "
                          "tensorwise, rowwise and (under [mx]) mxfp8", rn);
        if (f->all_gather && f->recipe != PLAN_FP8_TENSORWISE)
            return plan_refuse(why, len, "fp8 all_gather: torchao all-gathers FP8 weights under tensorwise "
                          "scaling only (Float8LinearConfig: enable_fsdp_float8_all_gather needs a tensorwise "
                          "weight cast)");
    }
    return true;
}

bool plan_fp8_layer(const Plan *p, const Layer *l)
{
    return plan_fp8_on(&p->software) && (l->kind == LAYER_ATTENTION || l->kind == LAYER_MLP) && !l->fp8_exempt;
}

bool plan_fp8_gemm(const Plan *p, const Layer *l, const PlanGemm *g)
{
    return plan_fp8_layer(p, l) && !g->core && !g->flash;
}

void plan_fp8_describe(const Plan *p, char *buf, size_t len)
{
    const PlanFp8 *f = &p->software.fp8;
    if (!plan_fp8_on(&p->software)) { snprintf(buf, len, "off (bf16 GEMMs)"); return; }
    char hist[48] = "";
    if (f->recipe == PLAN_FP8_DELAYED) snprintf(hist, sizeof hist, ", amax history %lld", (long long)f->amax_history);
    snprintf(buf, len, "%s%s, %s, as %s; the linears' forward, dX and dW GEMMs in FP8%s; attention "
             "(QK^T, PV) and the LM head in bf16; %s all-gathers",
             plan_fp8_recipe_names[f->recipe], hist,
             f->format == PLAN_FP8_HYBRID ? "hybrid (E4M3 forward, E5M2 gradients)" : "E4M3 everywhere",
             plan_fp8_torchao(&p->software) ? "torchao (casts from bf16 per GEMM)"
                                            : "Transformer Engine (fp8 weights cached, fp8 inputs saved)",
             f->first_last_bf16 ? " except the first and last block's" : "",
             f->all_gather ? "fp8 weight" : "bf16 weight");
}
