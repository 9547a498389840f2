/*
 * stacks.c: the software stacks as data — one row per framework (and
 * version or mode where it matters), each setting every software key.
 *
 * What a row means: what the framework runs with the flags of its own
 * recommended recipe (the example script or config its repository ships
 * for a Llama-style model on H100), the flags the recipe leaves out at
 * their defaults. Each choice cites the file and flag it is read from;
 * the sources are pinned: Megatron-LM at the tags core_v0.8.0,
 * core_v0.14.0 and core_v0.19.0, torchtitan at commit 3f20451 (2024-12-31,
 * the PyTorch 2.5 release it was tested with), DeepSpeed with a Hugging
 * Face transformers model (the HF Trainer's DeepSpeed integration, the
 * usual way it is run). This file holds no cost: model.c and cost.c count
 * what the keys mean, whichever row set them.
 */
#include "planner/stacks.h"

#include "planner/layout.h"

#include <stdarg.h>
#include <string.h>

const char *const plan_attn_kernel_names[PLAN_N_ATTN_KERNELS] = { "math", "fa2", "fa3", "cudnn" };
const char *const plan_optimizer_names[PLAN_N_OPTIMIZERS] = { "fused", "foreach", "forloop" };

/* Megatron-Core with TransformerEngine (megatron/core/models/gpt/
 * gpt_layer_specs.py, get_gpt_layer_with_transformer_engine_spec): the
 * pre-norms fused into the next GEMM's input (TELayerNormColumnParallelLinear),
 * RoPE fused (arguments.py --no-rope-fusion, store_false: apply_rope_fusion
 * on), SwiGLU fused (--no-bias-swiglu-fusion, store_false: on), the
 * weight-gradient GEMM accumulating into main_grad
 * (--no-gradient-accumulation-fusion, store_false: on), pipeline sends
 * overlapped (--no-overlap-p2p-communication, store_false: on),
 * --tp-comm-overlap off (store_true, in no recipe), the optimizer
 * TransformerEngine's FusedAdam, else Apex's (megatron/core/optimizer/
 * __init__.py: `from transformer_engine.pytorch.optimizers import FusedAdam
 * as Adam`). What the versions change is the recipe's flags, below. */
#define MCORE_COMMON .overlap_p2p = true, .overlap_tp = false, .grad_accum_fusion = true, \
                     .unfused_norm = false, .unfused_rope = false, .unfused_swiglu = false, \
                     .optimizer = PLAN_OPTIM_FUSED

/* examples/llama/train_llama3_8b_h100_fp8.sh (there from core_v0.14.0 to
 * core_v0.19.0, the same flags): --attention-backend fused
 * (TransformerEngine's FusedAttention, cuDNN), --use-distributed-optimizer
 * --overlap-grad-reduce --overlap-param-gather, --grad-reduce-in-bf16
 * (arguments.py then sets accumulate_allreduce_grads_in_fp32 False: bf16
 * main_grad), --cross-entropy-loss-fusion. */
#define MCORE_LLAMA_RECIPE .overlap_grad_reduce = true, .overlap_param_gather = 1, \
                           .grad_accum_dtype = DTYPE_BF16, .attention_kernel = PLAN_ATTN_CUDNN, \
                           .cross_entropy_fusion = true

/* The table. ORDER: a name's default row first (plan_stack_find). */
static const PlanStack STACKS[] = {
    /* planc's own program: its keys are plan_software_defaults
     * (planner/layout.c), which plan_stack_software returns for row 0 */
    { "planc", "", "planc's runtime (what emit generates)", { 0 } },
    { "megatron-core", "0.19", "Megatron-LM core_v0.19.0, examples/llama/train_llama3_8b_h100_fp8.sh",
      { MCORE_COMMON, MCORE_LLAMA_RECIPE } },
    { "megatron-core", "0.14", "Megatron-LM core_v0.14.0, examples/llama/train_llama3_8b_h100_fp8.sh",
      { MCORE_COMMON, MCORE_LLAMA_RECIPE } },
    /* core_v0.8.0 ships no Llama recipe, and examples/gpt3/
     * train_gpt3_175b_distributed.sh sets none of these flags: their
     * defaults. --overlap-grad-reduce and --overlap-param-gather are
     * store_true (off); --cross-entropy-loss-fusion store_true (off);
     * gradients in fp32 for bf16 (arguments.py: accumulate_allreduce_grads_in_fp32
     * = True under --bf16; fp16 keeps fp16: plan_grad_dtype's default);
     * attention TransformerEngine's default backend, which on Hopper
     * prefers FusedAttention (cuDNN) over FlashAttention
     * (transformer_engine/pytorch/attention.py, get_attention_backend:
     * "give FusedAttention preference on Hopper+"). */
    { "megatron-core", "0.8", "Megatron-LM core_v0.8.0, the flags' defaults (no Llama recipe in that tag)",
      { MCORE_COMMON, .overlap_grad_reduce = false, .overlap_param_gather = 0, .grad_accum_dtype = PLAN_AUTO,
        .attention_kernel = PLAN_ATTN_CUDNN, .cross_entropy_fusion = false } },
    /* torchtitan 3f20451, train_configs/llama3_8b.toml (compile = false)
     * on PyTorch 2.5:
     *  - FSDP2 (fully_shard per block, parallelisms/parallelize_llama.py)
     *    reduce-scatters each block's gradients during the backward and
     *    prefetches the next block's all-gather: both overlaps on;
     *  - reductions in fp32 (config_manager.py --training.mixed_precision_reduce
     *    default "float32", MixedPrecisionPolicy(reduce_dtype));
     *  - attention F.scaled_dot_product_attention(is_causal=True)
     *    (models/llama/model.py), whose flash backend, FlashAttention-2,
     *    PyTorch 2.5 picks on H100 (its fixed priority puts flash first;
     *    cuDNN's by default was reverted, pytorch/pytorch#128539, and is
     *    not chosen unasked, pytorch/pytorch#142132);
     *  - RMSNorm unfused (--model.norm_type default "rmsnorm", models/norms.py:
     *    x.float(), pow(2), mean, + eps, rsqrt, multiply, type_as, * weight,
     *    each an eager kernel); RoPE unfused (apply_rotary_emb: float,
     *    complex multiply, type_as); SwiGLU unfused (w2(F.silu(w1(x)) * w3(x)));
     *  - the loss F.cross_entropy on pred.float() (train.py): on an fp32 copy;
     *  - gradients of each micro-batch added by autograd (AccumulateGrad);
     *  - AdamW foreach (optimizer.py: "foreach": not fused, --optimizer.fused
     *    store_true, off);
     *  - async TP off (--experimental.enable_async_tensor_parallel, compile
     *    only); pipeline sends batch_isend_irecv, waited once the schedule
     *    needs them (torch/distributed/pipelining/schedules.py). */
    { "torchtitan", "eager", "torchtitan 3f20451 (2024-12-31), train_configs/llama3_8b.toml, PyTorch 2.5",
      { .overlap_grad_reduce = true, .overlap_param_gather = 1, .overlap_p2p = true, .overlap_tp = false,
        .grad_accum_dtype = DTYPE_FP32, .attention_kernel = PLAN_ATTN_FA2, .grad_accum_fusion = false,
        .cross_entropy_fusion = false, .unfused_norm = true, .unfused_rope = true, .unfused_swiglu = true,
        .optimizer = PLAN_OPTIM_FOREACH } },
    /* --training.compile: each TransformerBlock torch.compile'd
     * (parallelize_llama.py apply_compile), Inductor fusing the pointwise
     * ops of the norm, RoPE and SwiGLU into its kernels; SDPA stays the
     * flash kernel; the loss is not compiled at that commit */
    { "torchtitan", "compile", "torchtitan 3f20451, --training.compile, PyTorch 2.5",
      { .overlap_grad_reduce = true, .overlap_param_gather = 1, .overlap_p2p = true, .overlap_tp = false,
        .grad_accum_dtype = DTYPE_FP32, .attention_kernel = PLAN_ATTN_FA2, .grad_accum_fusion = false,
        .cross_entropy_fusion = false, .unfused_norm = false, .unfused_rope = false, .unfused_swiglu = false,
        .optimizer = PLAN_OPTIM_FOREACH } },
    /* DeepSpeed's engine around a Hugging Face transformers Llama
     * (models/llama/modeling_llama.py: LlamaRMSNorm in fp32 ops,
     * apply_rotary_pos_emb with rotate_half, act_fn(gate_proj(x)) *
     * up_proj(x), attn_implementation "sdpa" (flash, FlashAttention-2, on
     * H100), the loss on logits.float()), with the ZeRO config of the HF
     * DeepSpeed integration's examples ("overlap_comm": true; DeepSpeed's
     * default is off below stage 3, deepspeed/runtime/zero/config.py);
     * ZeRO-3 prefetches (stage3_prefetch_bucket_size), ZeRO-1/2 gather
     * after the step (plan_param_overlap's default); pipeline sends
     * blocking (deepspeed/runtime/pipe/p2p.py: dist.send); bf16 gradients
     * accumulated in fp32 (the bf16 optimizer; plan_grad_dtype's default);
     * autograd adds each micro-batch's gradient; FusedAdam
     * (deepspeed/ops/adam/fused_adam.py, the engine's AdamW without offload) */
    { "deepspeed", "", "DeepSpeed ZeRO with a Hugging Face transformers model (HF Trainer integration)",
      { .overlap_grad_reduce = true, .overlap_param_gather = PLAN_AUTO, .overlap_p2p = false, .overlap_tp = false,
        .grad_accum_dtype = PLAN_AUTO, .attention_kernel = PLAN_ATTN_FA2, .grad_accum_fusion = false,
        .cross_entropy_fusion = false, .unfused_norm = true, .unfused_rope = true, .unfused_swiglu = true,
        .optimizer = PLAN_OPTIM_FUSED } },
};
#define N_STACKS ((int)(sizeof STACKS / sizeof STACKS[0]))

int plan_stack_count(void)
{
    return N_STACKS;
}

const PlanStack *plan_stack_row(int i)
{
    return &STACKS[i > 0 && i < N_STACKS ? i : 0];
}

Software plan_stack_software(int i)
{
    /* row 0 is planc's defaults, written once (planner/layout.c) */
    Software w = i > 0 && i < N_STACKS ? STACKS[i].sw : plan_software_defaults();
    w.stack = i > 0 && i < N_STACKS ? i : 0;
    return w;
}

int plan_stack_find(const char *name, const char *variant)
{
    bool named = false;
    for (int i = 0; i < N_STACKS; i++) {
        if (strcmp(STACKS[i].name, name) != 0) continue;
        named = true;
        if (!variant || strcmp(STACKS[i].variant, variant) == 0) return i;
    }
    return named ? -2 : -1;
}

int plan_stack_names(const char **out, int n)
{
    int k = 0;
    for (int i = 0; i < N_STACKS && k < n; i++)
        if (k == 0 || strcmp(out[k - 1], STACKS[i].name) != 0) out[k++] = STACKS[i].name;
    return k;
}

int plan_stack_variants(const char *name, const char **out, int n)
{
    int k = 0;
    for (int i = 0; i < N_STACKS && k < n; i++)
        if (strcmp(STACKS[i].name, name) == 0 && STACKS[i].variant[0]) out[k++] = STACKS[i].variant;
    return k;
}

void plan_stack_label(const Software *w, char *buf, size_t len)
{
    const PlanStack *s = plan_stack_row(w->stack);
    snprintf(buf, len, "%s%s%s", s->name, s->variant[0] ? " " : "", s->variant);
}

/* Append to buf at *o (bounded). */
static void put(char *buf, size_t len, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *o, const char *fmt, ...)
{
    if (*o >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *o, len - *o, fmt, ap);
    va_end(ap);
    if (n > 0) *o += (size_t)n;
}

static const char *dtype_name(PlanDtype d)
{
    return d == DTYPE_FP32 ? "fp32" : d == DTYPE_BF16 ? "bf16" : "fp16";
}

/* The keys as (name, on) pairs in one order, for the line and the JSON. */
typedef struct { const char *name; bool on; } Flag;
enum { N_FUSED = 4, N_OVERLAP = 4 };

static void flags(const Plan *p, int zero, Flag *fused, Flag *overlap)
{
    const Software *w = &p->software;
    fused[0] = (Flag){ "norm", !w->unfused_norm };
    fused[1] = (Flag){ "rope", !w->unfused_rope };
    fused[2] = (Flag){ "swiglu", !w->unfused_swiglu };
    fused[3] = (Flag){ "cross_entropy", w->cross_entropy_fusion };
    overlap[0] = (Flag){ "grad_reduce", w->overlap_grad_reduce };
    overlap[1] = (Flag){ "param_gather", plan_param_overlap(p, zero) };
    overlap[2] = (Flag){ "p2p", w->overlap_p2p };
    overlap[3] = (Flag){ "tp", w->overlap_tp };
}

/* " a b c" of the flags that are `on`, or " none". */
static void list_flags(char *buf, size_t len, size_t *o, const Flag *f, int n, bool on)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (f[i].on == on) put(buf, len, o, " %s", f[i].name), k++;
    if (!k) put(buf, len, o, " none");
}

void plan_software_describe(const Plan *p, int zero, char *buf, size_t len)
{
    const Software *w = &p->software;
    Flag fused[N_FUSED], overlap[N_OVERLAP];
    flags(p, zero, fused, overlap);
    size_t o = 0;
    char label[64];
    plan_stack_label(w, label, sizeof label);
    put(buf, len, &o, "%s (attention %s; fused", label, plan_attn_kernel_names[w->attention_kernel]);
    list_flags(buf, len, &o, fused, N_FUSED, true);
    put(buf, len, &o, "; unfused");
    list_flags(buf, len, &o, fused, N_FUSED, false);
    put(buf, len, &o, "; optimizer %s; overlap", plan_optimizer_names[w->optimizer]);
    list_flags(buf, len, &o, overlap, N_OVERLAP, true);
    put(buf, len, &o, "; gradients %s, accumulated %s)", dtype_name(plan_grad_dtype(p)),
        w->grad_accum_fusion ? "by the GEMM" : "by a kernel of their own");
}

void plan_software_json(FILE *out, const Plan *p, int zero)
{
    const Software *w = &p->software;
    const PlanStack *s = plan_stack_row(w->stack);
    Flag fused[N_FUSED], overlap[N_OVERLAP];
    flags(p, zero, fused, overlap);
    fprintf(out, "{\"stack\": \"%s\", \"variant\": \"%s\", \"attention_kernel\": \"%s\", ", s->name, s->variant,
            plan_attn_kernel_names[w->attention_kernel]);
    for (int i = 0; i < 3; i++) fprintf(out, "\"fused_%s\": %s, ", fused[i].name, fused[i].on ? "true" : "false");
    fprintf(out, "\"cross_entropy_fusion\": %s, \"optimizer\": \"%s\", ", w->cross_entropy_fusion ? "true" : "false",
            plan_optimizer_names[w->optimizer]);
    for (int i = 0; i < N_OVERLAP; i++) fprintf(out, "\"overlap_%s\": %s, ", overlap[i].name, overlap[i].on ? "true" : "false");
    fprintf(out, "\"grad_accum_dtype\": \"%s\", \"grad_accum_fusion\": %s}", dtype_name(plan_grad_dtype(p)),
            w->grad_accum_fusion ? "true" : "false");
}
