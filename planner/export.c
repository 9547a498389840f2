/*
 * export.c: a checked Plan as another framework's configuration.
 *
 * The plan is resolved (auto fields take planc's defaults) and evaluated
 * first: a layout that is invalid for the cluster, or a stage that does
 * not fit, is not exported, so what a user runs elsewhere is what `planc
 * check` judged. Then one writer per framework prints the settings that
 * framework has, and a note on `notes` for each plan setting it has not
 * (named with the nearest it has). No setting is invented.
 *
 * Names were checked against the frameworks' sources: Megatron-LM's
 * megatron/training/arguments.py, torchtitan's torchtitan/config/
 * job_config.py and torch.distributed.pipelining's schedule names,
 * DeepSpeed's config documentation (README, "planc -> Megatron-LM /
 * torchtitan / DeepSpeed", says which were verified).
 *
 * The run's software (the plan block's overlap_* keys, the model's dropout)
 * is written where the target has a setting for it, else said in a note
 * (torchtitan: a comment in the file too). Checked against:
 *  - Megatron-LM megatron/training/arguments.py: --overlap-grad-reduce,
 *    --overlap-param-gather (asserts --use-distributed-optimizer),
 *    --no-overlap-p2p-communication, --tp-comm-overlap (validate_args:
 *    "overlap can happen only when sequence parallelism is enabled"),
 *    --attention-dropout and --hidden-dropout (both default 0.1, so 0 is
 *    written too);
 *  - DeepSpeed docs/_pages/config-json.md: zero_optimization.overlap_comm
 *    ("Attempts to overlap the reduction of the gradients with backward
 *    computation", default false; stage 1 ignores it, microsoft/DeepSpeed
 *    PR 1246);
 *  - torchtitan torchtitan/config/job_config.py: [parallelism]
 *    enable_async_tensor_parallel ("currently only effective when compile
 *    is enabled"); FSDP2 and DDP overlap their reductions and prefetch
 *    their gathers with no setting, and its models have no dropout.
 *
 * Context parallelism (issue 26), checked against:
 *  - Megatron-LM megatron/training/arguments.py: --context-parallel-size
 *    ("Degree of context parallelism"), --cp-comm-type ("p2p, a2a,
 *    allgather or a2a+p2p"), --hierarchical-context-parallel-sizes (the
 *    a2a and p2p tiers of a2a+p2p);
 *  - torchtitan torchtitan/config/job_config.py: [parallelism]
 *    context_parallel_degree and context_parallel_rotate_method, "the
 *    collective to use in context parallel SDPA for kv shards exchange":
 *    "allgather" (all-gather the kv shards) or "alltoall" (shuffle them
 *    round the ranks: the ring); its CP is ring attention under either
 *    rotation, with no Ulysses (head all-to-all) form; FSDP shards over
 *    dp_shard x cp, as planc's ZeRO over dp x cp;
 *  - DeepSpeed ds_config "sequence_parallel_size" (DeepSpeed-Ulysses,
 *    Jacobs et al. 2023: the all-to-all form; deepspeed/runtime/config.py),
 *    its only context parallelism.
 *
 * What this file must not do: decide validity (layout.c does) or count
 * memory (memory.c, through evaluate.c).
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "planner/comm.h"
#include "planner/fp8.h"
#include "planner/evaluate.h"
#include "planner/export.h"
#include "planner/layout.h"
#include "planner/model.h"
#include "planner/stacks.h"

static const char *const TARGETS[] = { "megatron", "torchtitan", "deepspeed" };   /* ORDER PlanExportTarget */

int plan_export_target(const char *s)
{
    for (int i = 0; i < (int)(sizeof TARGETS / sizeof TARGETS[0]); i++)
        if (strcmp(s, TARGETS[i]) == 0) return i;
    return -1;
}

/* What the writers need, read once from the plan. */
typedef struct {
    const Plan  *p;
    const Model *m;
    Layout       l;
    int64_t      n_micro;     /* micro-batches per step per pipeline */
    const Layer *att, *mlp;   /* the first block's sublayers (shapes of every block); mlp is
                                 the first feed-forward sublayer, an MLP or a mixture */
    const Layer *moe;         /* the first mixture of experts, or NULL (a dense model) */
    FILE        *notes;
    const char  *target;
} Ex;

static void note(const Ex *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const Ex *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(x->notes, "planc: note: %s: ", x->target);
    vfprintf(x->notes, fmt, ap);
    fputc('\n', x->notes);
    va_end(ap);
}

/* The shortest text of v that reads back as v (TOML and JSON numbers);
 * whole numbers without an exponent, since some arguments are integers
 * (Megatron-LM's --rotary-base is type=int). */
static void put_num(FILE *o, double v)
{
    char buf[40];
    if (v == (double)(int64_t)v && v > -1e15 && v < 1e15) {
        fprintf(o, "%lld", (long long)v);
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        double back;
        if (sscanf(buf, "%lf", &back) == 1 && back == v) break;
    }
    /* TOML and JSON both need a digit before the exponent and accept "1e-05" */
    fputs(buf, o);
}

/* Every block is built alike by all three frameworks: say where planc's
 * model differs from its first block. */
static void check_uniform(const Ex *x)
{
    const Model *m = x->m;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *a = &m->layers[i];
        const Layer *b = a->kind == LAYER_ATTENTION ? x->att
                       : a->kind == LAYER_MLP || a->kind == LAYER_MOE ? x->mlp : NULL;
        if (!b || a == b) continue;
        if (a->kind != b->kind) {
            note(x, "layer %d is %s where the first block has %s: the framework builds every block alike "
                    "(Megatron-LM: --moe-layer-freq, not written)", i + 1, plan_layer_kind_name(a->kind),
                 plan_layer_kind_name(b->kind));
            return;
        }
        bool same = a->kind == LAYER_ATTENTION
                        ? a->heads == b->heads && a->kv_heads == b->kv_heads && a->bias == b->bias &&
                              a->norm == b->norm && a->head_dim == b->head_dim && a->window == b->window &&
                              a->qkv_bias_only == b->qkv_bias_only
                        : a->hidden == b->hidden && a->act == b->act && a->bias == b->bias && a->norm == b->norm &&
                              a->experts == b->experts && a->top_k == b->top_k && a->shared == b->shared;
        if (!same) {
            note(x, "layer %d differs from the first block; the framework builds every block alike, "
                    "as the first", i + 1);
            return;
        }
    }
    /* Megatron-LM: --disable-bias-linear covers every linear layer, and
       --add-qkv-bias puts them back on Q, K, V alone (Qwen2's bias qkv) */
    bool att_linear = x->att && x->att->bias && !x->att->qkv_bias_only;
    if (x->att && x->mlp && att_linear != x->mlp->bias)
        note(x, "attention bias %s but mlp bias %s: one setting covers both; written: the attention's",
             att_linear ? "true" : "false", x->mlp->bias ? "true" : "false");
}

/* ---- Megatron-LM ---------------------------------------------------------- */

static void arg(FILE *o, bool *first, const char *flag)
{
    fprintf(o, "%s%s", *first ? "" : " ", flag);
    *first = false;
}

static void arg_int(FILE *o, bool *first, const char *flag, int64_t v)
{
    arg(o, first, flag);
    fprintf(o, " %lld", (long long)v);
}

static void arg_num(FILE *o, bool *first, const char *flag, double v)
{
    arg(o, first, flag);
    fputc(' ', o);
    put_num(o, v);
}

/* The kernels as Megatron-Core's flags (arguments.py, core_v0.19.0):
 * --attention-backend (AttnBackend: fused is TransformerEngine's cuDNN
 * FusedAttention, flash its FlashAttention, unfused the scores in HBM),
 * --no-rope-fusion and --no-bias-swiglu-fusion where the model has them;
 * an unfused norm and a torch.optim optimizer have no flag (its TE layers
 * fuse the norm into the GEMM, its Adam is TE's or Apex's FusedAdam). */
static void megatron_kernels(const Ex *x, FILE *o, bool *first)
{
    const Software *w = &x->p->software;
    static const char *const backend[] = { "unfused", "flash", "flash", "fused" };   /* ORDER PlanAttnKernel */
    arg(o, first, "--attention-backend");
    fprintf(o, " %s", backend[w->attention_kernel]);
    if (w->attention_kernel == PLAN_ATTN_FA3)
        note(x, "attention_kernel fa3: --attention-backend flash runs FlashAttention-3 where TransformerEngine "
                "finds flash_attn_interface (flash-attn 3) installed, else FlashAttention-2");
    if (w->unfused_rope && plan_model_has_rope(x->m)) arg(o, first, "--no-rope-fusion");
    if (w->unfused_swiglu && plan_model_has_gated(x->m)) arg(o, first, "--no-bias-swiglu-fusion");
    if (w->unfused_norm && plan_model_has_rmsnorm(x->m))
        note(x, "fused_norm false: no flag; Megatron-Core's TransformerEngine layers fuse the norm into the "
                "next GEMM (TELayerNormColumnParallelLinear)");
    if (w->optimizer != PLAN_OPTIM_FUSED)
        note(x, "optimizer %s: no flag; Megatron-Core's Adam is TransformerEngine's (or Apex's) FusedAdam",
             plan_optimizer_names[w->optimizer]);
}

/* The run's software as Megatron-LM's flags (arguments.py): its overlap
 * switches, fp32 gradients of a 16-bit model (planc's default for bf16;
 * the flag is written though Megatron-LM sets it for --bf16 itself), and
 * the dropout it defaults to 0.1
 * (so 0 is written too). */
static void megatron_software(const Ex *x, FILE *o, bool *first)
{
    const Software *w = &x->p->software;
    const Layout *l = &x->l;
    if (x->m->dtype != DTYPE_FP32 && plan_grad_dtype(x->p) == DTYPE_FP32)
        arg(o, first, "--accumulate-allreduce-grads-in-fp32");
    if (x->m->dtype == DTYPE_BF16 && plan_grad_dtype(x->p) == DTYPE_BF16)
        arg(o, first, "--grad-reduce-in-bf16");   /* core_v0.14.0 on: bf16 main_grad */
    if (x->m->dtype == DTYPE_FP32 && plan_grad_dtype(x->p) != DTYPE_FP32)
        note(x, "grad_accum_dtype %s: Megatron-LM keeps an fp32 model's gradients in fp32 (not written)",
             plan_grad_dtype(x->p) == DTYPE_BF16 ? "bf16" : "fp16");
    arg_num(o, first, "--attention-dropout", x->m->dropout);
    arg_num(o, first, "--hidden-dropout", x->m->dropout);
    if (w->overlap_grad_reduce) arg(o, first, "--overlap-grad-reduce");
    if (l->zero >= 1 && plan_param_overlap(x->p, l->zero)) arg(o, first, "--overlap-param-gather");
    if (!w->overlap_p2p && l->pp > 1) arg(o, first, "--no-overlap-p2p-communication");
    if (!w->grad_accum_fusion) arg(o, first, "--no-gradient-accumulation-fusion");
    if (w->cross_entropy_fusion) arg(o, first, "--cross-entropy-loss-fusion");
    megatron_kernels(x, o, first);
    if (w->overlap_tp && l->tp > 1) {
        arg(o, first, "--tp-comm-overlap");
        if (l->sequence_parallel != 1)
            note(x, "overlap_tp true: Megatron-LM's --tp-comm-overlap needs --sequence-parallel "
                    "(it refuses to start without it)");
    }
}

/* One line of pretrain_gpt.py arguments (Megatron-LM's arguments.py). */
/* A mixture of experts in Megatron-Core's flags (arguments.py's MoE group;
 * its default routing is planc's: softmax after the top-k, unless
 * --moe-router-pre-softmax): the experts, top-k, their width, shared
 * experts as one MLP of S x F, the aux-loss coefficient, the capacity, EP,
 * expert TP, the dispatcher (alltoall, planc's runtime's; deepep:
 * --moe-token-dispatcher-type flex --moe-enable-deepep) and the 1F1B
 * all-to-all overlap (--overlap-moe-expert-parallel-comm, with
 * --delay-wgrad-compute). moe_imbalance is a prediction, no flag. */
static void write_megatron_moe(const Ex *x, FILE *o, bool *first)
{
    const Layer *e = x->moe;
    arg_int(o, first, "--num-experts", e->experts);
    arg_int(o, first, "--moe-router-topk", e->top_k);
    arg_int(o, first, "--moe-ffn-hidden-size", e->hidden);
    if (e->shared > 0) arg_int(o, first, "--moe-shared-expert-intermediate-size", e->shared * e->hidden);
    if (e->aux_loss > 0) {
        arg(o, first, "--moe-router-load-balancing-type");
        fprintf(o, " aux_loss");
        arg_num(o, first, "--moe-aux-loss-coeff", e->aux_loss);
    } else {
        arg(o, first, "--moe-router-load-balancing-type");
        fprintf(o, " none");
    }
    if (e->capacity_factor > 0) arg_num(o, first, "--moe-expert-capacity-factor", e->capacity_factor);
    const Software *w = &x->p->software;
    arg(o, first, "--moe-token-dispatcher-type");
    fprintf(o, w->moe_dispatcher == PLAN_MOE_DEEPEP ? " flex" : " alltoall");
    if (w->moe_dispatcher == PLAN_MOE_DEEPEP) arg(o, first, "--moe-enable-deepep");
    arg(o, first, "--moe-grouped-gemm");
    if (plan_ep(&x->l) > 1) arg_int(o, first, "--expert-model-parallel-size", plan_ep(&x->l));
    if (plan_etp(&x->l) != x->l.tp) arg_int(o, first, "--expert-tensor-parallel-size", plan_etp(&x->l));
    if (w->overlap_moe_a2a) {
        arg(o, first, "--overlap-moe-expert-parallel-comm");
        arg(o, first, "--delay-wgrad-compute");
    }
}


/* RoPE scaling as Megatron-LM writes it: --use-rope-scaling applies Llama
 * 3.1's rule with --rotary-scaling-factor (megatron/training/arguments.py)
 * and its fixed low_freq_factor 1, high_freq_factor 4 and original context
 * 8192 (megatron/core/models/common/embeddings/rope_utils.py); linear
 * interpolation is --rotary-seq-len-interpolation-factor (an integer).
 * What those flags cannot say is a note, not a silent drop. */
static void megatron_rope_scaling(const Ex *x, FILE *o, bool *first)
{
    RopeScaling r = plan_rope_scaling(x->m);
    if (r.kind == ROPE_SCALING_LLAMA3) {
        arg(o, first, "--use-rope-scaling");
        arg_num(o, first, "--rotary-scaling-factor", r.factor);
        if (r.low_freq_factor != 1 || r.high_freq_factor != 4 || r.original_max_position != 8192)
            note(x, "rope_scaling llama3 low_freq_factor %g, high_freq_factor %g, original_max_position %lld: "
                 "Megatron-LM's --use-rope-scaling fixes them at 1, 4 and 8192 (not written)",
                 r.low_freq_factor, r.high_freq_factor, (long long)r.original_max_position);
    } else if (r.kind == ROPE_SCALING_LINEAR && r.factor == floor(r.factor)) {
        arg_num(o, first, "--rotary-seq-len-interpolation-factor", r.factor);
    } else if (r.kind != ROPE_SCALING_NONE) {
        note(x, "rope_scaling %s factor %g: no Megatron-LM flag for it on standard attention (not written)",
             r.kind == ROPE_SCALING_YARN ? "yarn" : "linear", r.factor);
    }
}

/* --context-parallel-size and --cp-comm-type (ORDER PlanCpComm); the
 * hierarchical form also its tiers: the CP group's ranks in one NVLink
 * domain (the a2a) and the rest (the p2p ring), as planc costs them. */
static void megatron_cp(const Ex *x, FILE *o, bool *first)
{
    static const char *const comm[] = { "p2p", "a2a", "allgather", "a2a+p2p" };   /* ORDER PlanCpComm */
    const Layout *l = &x->l;
    int cp = plan_cp(l), form = plan_cp_comm(l);
    arg_int(o, first, "--context-parallel-size", cp);
    arg(o, first, "--cp-comm-type");
    fprintf(o, " %s", comm[form]);
    if (form == PLAN_CP_HIERARCHICAL) {
        int64_t a = plan_cp_group(&x->p->cluster, l->tp, cp).local;
        if (a < 1 || cp % a) a = 1;
        arg(o, first, "--hierarchical-context-parallel-sizes");
        fprintf(o, " %lld %lld", (long long)a, (long long)(cp / a));
    }
}

/* FP8 (issue 27) as Megatron-LM's Transformer-Engine flags
 * (megatron/training/arguments.py, _add_transformer_engine_args:
 * --fp8-format choices e4m3, hybrid; --fp8-recipe choices tensorwise,
 * delayed, mxfp8, blockwise; --fp8-amax-history-len; --fp8-param-gather;
 * --first-last-layers-bf16). Megatron has no rowwise recipe: a note. */
static void megatron_fp8(const Ex *x, FILE *o, bool *first)
{
    const PlanFp8 *f = &x->p->software.fp8;
    if (!plan_fp8_on(&x->p->software)) return;
    if (f->recipe == PLAN_FP8_ROWWISE) {
        note(x, "fp8 rowwise: Megatron-LM's --fp8-recipe has tensorwise, delayed, mxfp8 and blockwise, no "
                "rowwise (torchao's); not written");
        return;
    }
    arg(o, first, "--fp8-format");
    fprintf(o, " %s", plan_fp8_format_names[f->format]);
    arg(o, first, "--fp8-recipe");
    fprintf(o, " %s", plan_fp8_recipe_names[f->recipe]);
    if (f->recipe == PLAN_FP8_DELAYED) arg_int(o, first, "--fp8-amax-history-len", f->amax_history);
    if (f->all_gather) arg(o, first, "--fp8-param-gather");
    if (f->first_last_bf16) arg(o, first, "--first-last-layers-bf16");
}

static void write_megatron(const Ex *x, FILE *o)
{
    const Model *m = x->m;
    const Layout *l = &x->l;
    bool first = true;
    arg_int(o, &first, "--num-layers", m->n_blocks);
    arg_int(o, &first, "--hidden-size", m->dim);
    if (x->att) {
        arg_int(o, &first, "--num-attention-heads", x->att->heads);
        if (x->att->kv_heads != x->att->heads) {
            arg(o, &first, "--group-query-attention");
            arg_int(o, &first, "--num-query-groups", x->att->kv_heads);
        }
        if (plan_head_dim(m, x->att) * x->att->heads != m->dim)
            arg_int(o, &first, "--kv-channels", plan_head_dim(m, x->att));
    }
    if (x->mlp) arg_int(o, &first, "--ffn-hidden-size", x->mlp->hidden);
    arg_int(o, &first, "--seq-length", m->seq);
    arg_int(o, &first, "--max-position-embeddings", m->seq);
    arg_int(o, &first, "--make-vocab-size-divisible-by", m->vocab_multiple);
    static const char *const pos[] = { "learned_absolute", "rope", "none" };   /* ORDER PosKind */
    arg(o, &first, "--position-embedding-type");
    fprintf(o, " %s", pos[m->layers[0].position]);
    if (m->layers[0].position == POS_ROPE) arg_num(o, &first, "--rotary-base", plan_rope_theta(m));
    megatron_rope_scaling(x, o, &first);
    arg_num(o, &first, "--norm-epsilon", plan_norm_eps(m));
    static const char *const norms[] = { "LayerNorm", "RMSNorm" };             /* ORDER NormKind */
    arg(o, &first, "--normalization");
    fprintf(o, " %s", norms[x->att ? x->att->norm : m->layers[m->n_layers - 2].norm]);
    if (x->mlp && x->mlp->act == ACT_SWIGLU) arg(o, &first, "--swiglu");
    if (x->mlp && x->mlp->act == ACT_GEGLU)
        note(x, "act geglu: Megatron-LM's gated MLP flag is --swiglu (SiLU); GeGLU is not a flag (not written)");
    if (m->norm_plus_one)   /* issue 28: Gemma's norm */
        note(x, "norm_plus_one (Gemma's RMSNorm x*(1+w)): not written (Megatron-LM's --apply-layernorm-1p "
                "was not verified for RMSNorm)");
    if (m->n_layers > 0 && m->layers[0].embed_scale)
        note(x, "embedding scale sqrt_dim (Gemma): Megatron-LM has no flag for it (not written)");
    if (x->att && x->att->window > 0)
        note(x, "sliding_window %lld: not written; Megatron-core's TransformerConfig.window_size sets it "
                "(its command-line flag was not verified)", (long long)x->att->window);
    if (x->mlp && x->mlp->act == ACT_RELU)
        note(x, "act relu: Megatron-LM has no ReLU MLP flag (GELU unless --swiglu; nearest --squared-relu)");
    if (x->att && (!x->att->bias || x->att->qkv_bias_only)) arg(o, &first, "--disable-bias-linear");
    if (x->att && x->att->bias && x->att->qkv_bias_only) arg(o, &first, "--add-qkv-bias");
    if (!m->layers[m->n_layers - 1].tied) arg(o, &first, "--untie-embeddings-and-output-weights");
    if (m->dtype == DTYPE_BF16) arg(o, &first, "--bf16");
    if (m->dtype == DTYPE_FP16) arg(o, &first, "--fp16");

    if (x->moe) write_megatron_moe(x, o, &first);

    arg_int(o, &first, "--tensor-model-parallel-size", l->tp);
    arg_int(o, &first, "--pipeline-model-parallel-size", l->pp);
    if (plan_cp(l) > 1) megatron_cp(x, o, &first);
    if (l->schedule == SCHED_INTERLEAVED && l->chunks > 1) {
        int64_t vstages = (int64_t)l->pp * l->chunks;
        arg_int(o, &first, "--num-layers-per-virtual-pipeline-stage", m->n_blocks / vstages);
        if (m->n_blocks % vstages)
            note(x, "%d blocks do not divide into %lld chunks: planc gives the middle chunks one more; "
                    "Megatron-LM needs equal chunks", m->n_blocks, (long long)vstages);
    }
    if (l->pp > 1 && l->schedule == SCHED_GPIPE)
        note(x, "schedule gpipe: Megatron-LM has none; it runs 1F1B (the same bubble, less activation memory)");
    if (l->pp > 1 && l->schedule == SCHED_ZB_H1)
        note(x, "schedule zb-h1: Megatron-LM has no zero-bubble schedule; it runs 1F1B (a larger bubble)");
    arg_int(o, &first, "--micro-batch-size", l->micro_batch);
    arg_int(o, &first, "--global-batch-size", l->global_batch);
    if (l->sequence_parallel == 1) arg(o, &first, "--sequence-parallel");
    if (l->zero >= 1) arg(o, &first, "--use-distributed-optimizer");
    if (l->zero == 2)
        note(x, "zero 2: Megatron-LM's distributed optimizer shards the optimizer state and reduce-scatters "
                "the gradients (ZeRO-2's memory)");
    if (l->zero == 3)
        note(x, "zero 3: Megatron-LM's distributed optimizer shards the optimizer state and gradients, "
                "not the parameters (ZeRO-2); written: --use-distributed-optimizer");
    megatron_software(x, o, &first);
    if (l->recompute == RECOMPUTE_SELECTIVE) {
        arg(o, &first, "--recompute-granularity");
        fputs(" selective", o);
        if (l->recompute_modules) {
            arg(o, &first, "--recompute-modules");
            for (int m = 0; m < PLAN_N_RECOMPUTE_MODULES; m++)
                if (l->recompute_modules & PLAN_RC_BIT(m)) fprintf(o, " %s", plan_recompute_module_name(m));
        }
    } else if (l->recompute == RECOMPUTE_FULL && l->recompute_layers > 0) {
        arg(o, &first, "--recompute-granularity");
        fputs(" full", o);
        arg(o, &first, "--recompute-method");
        fputs(l->recompute_method == PLAN_RC_METHOD_UNIFORM ? " uniform" : " block", o);
        arg_int(o, &first, "--recompute-num-layers", l->recompute_layers);
    } else if (l->recompute == RECOMPUTE_SELECTIVE_OP) {
        note(x, "recompute selective_op (torchtitan's op-level save list) has no Megatron-LM flag: none written");
    } else if (l->recompute == RECOMPUTE_FULL) {
        if (l->recompute_every > 0)
            note(x, "recompute_every %d (torchtitan's every N-th block) has no Megatron-LM flag: written as full "
                    "recomputation of every block", l->recompute_every);
        arg(o, &first, "--recompute-granularity");
        fputs(" full", o);
        arg(o, &first, "--recompute-method");
        fputs(" uniform", o);
        arg_int(o, &first, "--recompute-num-layers", 1);
    }
    megatron_fp8(x, o, &first);
    if (x->p->has_train) {
        const Train *t = &x->p->train;
        arg_int(o, &first, "--train-iters", t->steps);
        arg_num(o, &first, "--lr", t->lr);
        arg_int(o, &first, "--lr-warmup-iters", t->warmup);
        arg_int(o, &first, "--seed", (int64_t)t->seed);
        arg_num(o, &first, "--clip-grad", t->grad_clip);
        arg_num(o, &first, "--adam-beta1", t->beta1);
        arg_num(o, &first, "--adam-beta2", t->beta2);
        arg_num(o, &first, "--adam-eps", t->eps);
        arg_num(o, &first, "--weight-decay", t->weight_decay);
    }
    fputc('\n', o);
    note(x, "run on dp x tp x pp = %d GPUs: Megatron-LM takes dp %d from the world size",
         l->dp * l->tp * l->pp, l->dp);
    note(x, "the vocabulary (%lld) comes from the tokenizer (--tokenizer-type, --vocab-file)",
         (long long)m->vocab);
}

/* ---- torchtitan ----------------------------------------------------------- */

/* The software keys torchtitan has no setting for, as comments in the
 * [parallelism] table (and notes): its FSDP2 / DDP overlap the gradient
 * reduction with the backward and prefetch the next all-gather, always;
 * async TP needs torch.compile. */
static void torchtitan_software(const Ex *x, FILE *o)
{
    const Software *w = &x->p->software;
    const Layout *l = &x->l;
    if (w->overlap_tp && l->tp > 1) {
        fprintf(o, "# overlap_tp true: enable_async_tensor_parallel takes effect under torch.compile only\n");
        note(x, "overlap_tp true: enable_async_tensor_parallel is effective only with torch.compile enabled");
    }
    if (!w->overlap_grad_reduce && l->dp > 1) {
        fprintf(o, "# overlap_grad_reduce false: no setting; torchtitan's FSDP2 and DDP overlap the reduction\n");
        note(x, "overlap_grad_reduce false: torchtitan has no setting; its FSDP2 and DDP reduce during the backward");
    }
    if (l->zero >= 1 && l->dp > 1 && !plan_param_overlap(x->p, l->zero)) {
        fprintf(o, "# overlap_param_gather false: no setting; torchtitan's FSDP2 prefetches the next all-gather\n");
        note(x, "overlap_param_gather false: torchtitan has no setting; its FSDP2 prefetches the next all-gather");
    }
    if (!w->overlap_p2p && l->pp > 1) {
        fprintf(o, "# overlap_p2p false: no setting in torch.distributed.pipelining\n");
        note(x, "overlap_p2p false: torch.distributed.pipelining has no setting for blocking sends");
    }
    if (plan_flash(w) && w->attention_kernel != PLAN_ATTN_FA2)
        note(x, "attention_kernel %s: torchtitan runs F.scaled_dot_product_attention, whose flash backend "
                "is FlashAttention-2 (no setting; not written)", plan_attn_kernel_names[w->attention_kernel]);
    else if (!plan_flash(w))
        note(x, "attention_kernel math: torchtitan runs F.scaled_dot_product_attention (flash, FlashAttention-2, "
                "on H100; no setting for the math backend)");
    if (w->cross_entropy_fusion)
        note(x, "cross_entropy_fusion true: torchtitan's loss is F.cross_entropy on an fp32 copy of the logits "
                "(no setting)");
    if (w->grad_accum_fusion && x->n_micro > 1)
        note(x, "grad_accum_fusion true: torchtitan's autograd adds each micro-batch's gradients (no setting)");
    if (plan_grad_dtype(x->p) != DTYPE_FP32)
        note(x, "grad_accum_dtype %s: torchtitan reduces in float32 only (mixed_precision_reduce)",
             plan_grad_dtype(x->p) == DTYPE_BF16 ? "bf16" : "fp16");
    if (x->m->dropout > 0) {
        fprintf(o, "# dropout ");
        put_num(o, x->m->dropout);
        fprintf(o, ": no setting; torchtitan's llama3 has no dropout\n");
        note(x, "dropout %g: torchtitan's llama3 has no dropout (not written)", x->m->dropout);
    }
}

/* Whether the plan's fusions are torchtitan's torch.compile ([training]
 * compile): Inductor fuses the norm, RoPE and SwiGLU together, eager
 * runs each unfused (nn.RMSNorm, the complex RoPE, F.silu(w1 x) * w3 x),
 * so a plan that fuses some and not others gets the nearest and a note. */
static bool torchtitan_compile(const Ex *x)
{
    const Software *w = &x->p->software;
    bool fused[] = { !w->unfused_norm || !plan_model_has_rmsnorm(x->m), !w->unfused_rope || !plan_model_has_rope(x->m),
                     !w->unfused_swiglu || !plan_model_has_gated(x->m) };
    static const char *const name[] = { "fused_norm", "fused_rope", "fused_swiglu" };
    int n = fused[0] + fused[1] + fused[2];
    bool compile = n >= 2;
    if (n == 1 || n == 2)
        for (int i = 0; i < 3; i++)
            if (fused[i] != compile)
                note(x, "%s %s: torchtitan fuses the pointwise ops only all at once, under torch.compile; "
                        "nearest compile = %s", name[i], fused[i] ? "true" : "false", compile ? "true" : "false");
    return compile;
}

/* torchtitan's [optimizer] implementation (job_config.py: for-loop,
 * foreach, fused). */
static const char *torchtitan_optimizer(const Ex *x)
{
    static const char *const impl[] = { "fused", "foreach", "for-loop" };   /* ORDER PlanOptimizer */
    return impl[x->p->software.optimizer];
}

/* A TOML job file for torchtitan's train.py (torchtitan/config/job_config.py). */
/* [parallelism] context_parallel_degree and its rotate method: planc's
 * ring is torchtitan's "alltoall" rotation (each KV shard passed on),
 * all_gather its "allgather"; the all-to-all (Ulysses) and hierarchical
 * forms torchtitan has not: the nearest written, and said. */
static void torchtitan_cp(const Ex *x, FILE *o)
{
    const Layout *l = &x->l;
    int form = plan_cp_comm(l);
    fprintf(o, "context_parallel_degree = %d\ncontext_parallel_rotate_method = \"%s\"\n", plan_cp(l),
            form == PLAN_CP_ALL_GATHER ? "allgather" : "alltoall");
    if (form == PLAN_CP_ALL_TO_ALL || form == PLAN_CP_HIERARCHICAL)
        note(x, "cp_comm %s: torchtitan's context parallelism is ring attention only (rotate method "
                "allgather or alltoall), no head-scattering all-to-all (DeepSpeed-Ulysses); written: the "
                "ring, context_parallel_rotate_method = \"alltoall\"", plan_cp_comm_name(form));
}

static void torchtitan_fp8(const Ex *x, FILE *o);

static void write_torchtitan(const Ex *x, FILE *o)
{
    const Model *m = x->m;
    const Layout *l = &x->l;
    if (x->moe)
        note(x, "moe (experts %lld, top_k %lld, ep %d): not written; the job file names a model flavor "
                "whose experts live in torchtitan's model code, and its expert parallelism is "
                "parallelism.expert_parallel_degree in versions that have MoE models",
             (long long)x->moe->experts, (long long)x->moe->top_k, plan_ep(l));
    /* the path goes into a comment: a control character (a newline would
       end it) is written as '?' */
    fprintf(o, "# torchtitan job file written by planc export from ");
    for (const unsigned char *c = (const unsigned char *)(x->p->file ? x->p->file : "(plan)"); *c; c++)
        fputc(*c < 0x20 || *c == 0x7f ? '?' : *c, o);
    fputc('\n', o);
    fprintf(o, "# The model's shapes are a torchtitan flavor (registered in code): dim %lld, n_layers %d",
            (long long)m->dim, m->n_blocks);
    if (x->att)
        fprintf(o, ", n_heads %lld, n_kv_heads %lld", (long long)x->att->heads, (long long)x->att->kv_heads);
    if (x->mlp) fprintf(o, ", ffn hidden %lld", (long long)x->mlp->hidden);
    fprintf(o, ", vocab_size %lld", (long long)m->vocab);
    if (m->layers[0].position == POS_ROPE) {
        fprintf(o, ", rope_theta ");
        put_num(o, plan_rope_theta(m));
    }
    if (x->att && plan_head_dim(m, x->att) * x->att->heads != m->dim)
        fprintf(o, ", head_dim %lld", (long long)plan_head_dim(m, x->att));
    if (x->att && x->att->window > 0) fprintf(o, ", sliding window %lld", (long long)x->att->window);
    fprintf(o, ", norm_eps ");
    put_num(o, plan_norm_eps(m));
    RopeScaling rs = plan_rope_scaling(m);
    if (rs.kind != ROPE_SCALING_NONE) {
        static const char *const kinds[] = { "none", "linear", "llama3", "yarn" };   /* ORDER RopeScalingKind */
        fprintf(o, ", rope_scaling %s factor ", kinds[rs.kind]);
        put_num(o, rs.factor);
        if (rs.kind == ROPE_SCALING_LLAMA3)
            fprintf(o, " low_freq_factor %g high_freq_factor %g original_max_position %lld", rs.low_freq_factor,
                    rs.high_freq_factor, (long long)rs.original_max_position);
    }
    fprintf(o, "\n\n");
    fprintf(o, "[job]\ndescription = \"planc: %s\"\n\n", m->name);
    fprintf(o, "[model]\nname = \"llama3\"\nflavor = \"%s\"\n\n", m->name);
    note(x, "[model] names a flavor \"%s\": register one with the shapes in the file's header", m->name);
    if (x->mlp && x->mlp->act != ACT_SWIGLU)
        note(x, "torchtitan's llama3 has a SwiGLU MLP; planc's model has another activation");
    if (m->norm_plus_one || (m->n_layers > 0 && m->layers[0].embed_scale))
        note(x, "torchtitan's llama3 has neither Gemma's x*(1+w) RMSNorm nor its sqrt(dim) embedding scale "
                "(not written)");
    if (x->att && (x->att->bias || x->att->window > 0))
        note(x, "torchtitan's llama3 has no biases and no sliding window; planc's model has %s",
             x->att->window > 0 ? "a sliding window" : "biases");

    /* without pipelining, torchtitan's gradient accumulation runs micro-batches
       of local_batch_size; with it, pipeline_parallel_microbatch_size */
    int64_t local = l->pp > 1 ? l->micro_batch * x->n_micro : l->micro_batch;
    fprintf(o, "[training]\nlocal_batch_size = %lld\nglobal_batch_size = %lld\nseq_len = %lld\n",
            (long long)local, (long long)l->global_batch, (long long)m->seq);
    if (m->dtype == DTYPE_BF16 || m->dtype == DTYPE_FP32)
        fprintf(o, "mixed_precision_param = \"%s\"\n", m->dtype == DTYPE_BF16 ? "bfloat16" : "float32");
    else
        note(x, "dtype fp16: torchtitan's mixed precision is bfloat16 or float32; nearest bfloat16 (not written)");
    fprintf(o, "compile = %s\n", torchtitan_compile(x) ? "true" : "false");
    if (x->p->has_train) {
        const Train *t = &x->p->train;
        fprintf(o, "steps = %lld\nseed = %llu\nmax_norm = ", (long long)t->steps, (unsigned long long)t->seed);
        put_num(o, t->grad_clip);
        fprintf(o, "\n\n[optimizer]\nname = \"AdamW\"\nlr = ");
        put_num(o, t->lr);
        fprintf(o, "\nbeta1 = ");
        put_num(o, t->beta1);
        fprintf(o, "\nbeta2 = ");
        put_num(o, t->beta2);
        fprintf(o, "\neps = ");
        put_num(o, t->eps);
        fprintf(o, "\nweight_decay = ");
        put_num(o, t->weight_decay);
        fprintf(o, "\nimplementation = \"%s\"", torchtitan_optimizer(x));
        fprintf(o, "\n\n[lr_scheduler]\nwarmup_steps = %lld\n", (long long)t->warmup);
    } else {
        fprintf(o, "\n[optimizer]\nimplementation = \"%s\"\n", torchtitan_optimizer(x));
    }

    /* ZeRO-3 is FSDP (parameters, gradients and optimizer state sharded over
       dp); ZeRO-0 is replication (DDP). */
    int shard = l->zero == 0 ? 1 : l->dp, replicate = l->zero == 0 ? l->dp : 1;
    fprintf(o, "\n[parallelism]\ndata_parallel_replicate_degree = %d\ndata_parallel_shard_degree = %d\n",
            replicate, shard);
    if (l->zero == 1 || l->zero == 2) {
        fprintf(o, "fsdp_reshard_after_forward = \"never\"\n");
        note(x, "zero %d has no torchtitan equivalent; nearest: FSDP over dp %d that keeps the gathered "
                "parameters from forward to backward (fsdp_reshard_after_forward = \"never\"; ZeRO-2 "
                "plus one parameter all-gather per step)", l->zero, l->dp);
    }
    fprintf(o, "tensor_parallel_degree = %d\nenable_async_tensor_parallel = %s\n", l->tp,
            x->p->software.overlap_tp && l->tp > 1 ? "true" : "false");
    if (l->tp > 1 && l->sequence_parallel != 1)
        note(x, "sequence_parallel false: torchtitan's tensor parallelism always shards the norms' sequence");
    fprintf(o, "pipeline_parallel_degree = %d\n", l->pp);
    if (plan_cp(l) > 1) torchtitan_cp(x, o);
    if (l->pp > 1) {
        static const char *const sched[] = { "GPipe", "1F1B", "Interleaved1F1B", "ZBVZeroBubble" };   /* ORDER Schedule */
        fprintf(o, "pipeline_parallel_schedule = \"%s\"\n", sched[l->schedule]);
        fprintf(o, "pipeline_parallel_microbatch_size = %lld\n", (long long)l->micro_batch);
        int64_t stages = l->schedule == SCHED_ZB_H1 ? 2 * (int64_t)l->pp : (int64_t)l->pp * l->chunks;
        if (m->n_blocks % stages == 0)
            fprintf(o, "pipeline_parallel_layers_per_stage = %lld\n", (long long)(m->n_blocks / stages));
        else
            note(x, "%d blocks do not divide into %lld stages: set pipeline_parallel_split_points by hand",
                 m->n_blocks, (long long)stages);
        if (l->schedule == SCHED_ZB_H1)
            note(x, "schedule zb-h1 (one stage per rank) has no torchtitan schedule; nearest ZBVZeroBubble "
                    "(zero bubble, two stages per rank in a V)");
    }
    torchtitan_software(x, o);
    /* torchtitan's [activation_checkpoint]: selective_op is mode
     * "selective" with selective_ac_option "op", recompute_every N is
     * mode "selective" with selective_ac_option "N" */
    static const char *const ac[] = { "none", "selective", "full", "selective" };   /* ORDER Recompute */
    bool every = l->recompute == RECOMPUTE_FULL && l->recompute_every > 0;
    fprintf(o, "\n[activation_checkpoint]\nmode = \"%s\"\n", every ? "selective" : ac[l->recompute]);
    if (every) fprintf(o, "selective_ac_option = \"%d\"\n", l->recompute_every);
    if (l->recompute == RECOMPUTE_SELECTIVE_OP) fprintf(o, "selective_ac_option = \"op\"\n");
    torchtitan_fp8(x, o);
    if (l->recompute == RECOMPUTE_FULL && l->recompute_layers > 0)
        note(x, "recompute_layers %d (Megatron's %s method) has no torchtitan option: written as full "
                "recomputation of every block", l->recompute_layers,
             l->recompute_method == PLAN_RC_METHOD_UNIFORM ? "uniform" : "block");
    if (l->recompute == RECOMPUTE_SELECTIVE) {
        fprintf(o, "selective_ac_option = \"op\"\n");
        note(x, "recompute selective: planc recomputes the attention scores (Korthikanti); torchtitan's "
                "op-level selective checkpointing is the nearest, its memory differs");
    }
}

/* FP8 (issue 27) as torchtitan's tables (torchtitan/config/job_config.py:
 * Float8 enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp,
 * recipe_name "tensorwise" | "rowwise" | "rowwise_with_gw_hp", filter_fqns;
 * MX for mxfp8), with the model converter that turns them on
 * ([model] converters = ["float8"] or ["mx"], written here as a note: the
 * [model] table is the flavor's). The output layer stays bf16: filter_fqns
 * ["output"]. */
static void torchtitan_fp8(const Ex *x, FILE *o)
{
    const PlanFp8 *f = &x->p->software.fp8;
    if (!plan_fp8_on(&x->p->software)) return;
    if (f->recipe == PLAN_FP8_MXFP8) {
        fprintf(o, "\n[mx]\nrecipe_name = \"mxfp8\"\nfilter_fqns = [\"output\"]\n");
        note(x, "fp8 mxfp8: add \"mx\" to [model] converters (torchao's MXLinear)");
    } else {
        fprintf(o, "\n[float8]\nrecipe_name = \"%s\"\nenable_fsdp_float8_all_gather = %s\n"
                   "precompute_float8_dynamic_scale_for_fsdp = %s\nfilter_fqns = [\"output\"]\n",
                plan_fp8_recipe_names[f->recipe], f->all_gather ? "true" : "false", f->all_gather ? "true" : "false");
        note(x, "fp8 %s: add \"float8\" to [model] converters (torchao's Float8Linear)",
             plan_fp8_recipe_names[f->recipe]);
    }
    if (f->first_last_bf16)
        note(x, "fp8 first_last_bf16: list the first and last block's linears in filter_fqns "
                "(\"layers.0.\", \"layers.%d.\")", x->m->n_blocks - 1);
}

/* ---- DeepSpeed ------------------------------------------------------------ */

/* The software keys ds_config has no setting for, as notes. */
static void deepspeed_software(const Ex *x)
{
    const Software *w = &x->p->software;
    const Layout *l = &x->l;
    if (l->zero < 2 && l->dp > 1 && w->overlap_grad_reduce)
        note(x, "overlap_grad_reduce true: DeepSpeed's zero %d reduces the gradients after the backward "
                "(overlap_comm is read from stage 2 on)", l->zero);
    if ((l->zero == 1 || l->zero == 2) && l->dp > 1 && plan_param_overlap(x->p, l->zero))
        note(x, "overlap_param_gather true: DeepSpeed's zero %d all-gathers the updated partitions after "
                "the step; no setting overlaps it", l->zero);
    if (l->zero == 3 && l->dp > 1 && !plan_param_overlap(x->p, l->zero))
        note(x, "overlap_param_gather false: DeepSpeed's zero 3 prefetches (stage3_prefetch_bucket_size; "
                "not written)");
    if (!w->overlap_p2p && l->pp > 1)
        note(x, "overlap_p2p false: DeepSpeed's pipeline engine has no setting for its sends");
    if (w->overlap_tp && l->tp > 1)
        note(x, "overlap_tp true: DeepSpeed's AutoTP has no setting to overlap its collectives");
    if (x->m->dropout > 0)
        note(x, "dropout %g: DeepSpeed takes dropout from the model's code, not ds_config", x->m->dropout);
    /* the kernels are the model's code (a Hugging Face model: sdpa
     * attention, eager RMSNorm, rotate-half RoPE, SwiGLU; the loss on an
     * fp32 copy; autograd's gradient accumulation) */
    if (w->attention_kernel != PLAN_ATTN_FA2)
        note(x, "attention_kernel %s: the model's code decides (Hugging Face attn_implementation: \"sdpa\" runs "
                "FlashAttention-2 on H100, \"eager\" the scores in HBM)", plan_attn_kernel_names[w->attention_kernel]);
    if ((!w->unfused_norm && plan_model_has_rmsnorm(x->m)) || (!w->unfused_rope && plan_model_has_rope(x->m)) ||
        (!w->unfused_swiglu && plan_model_has_gated(x->m)))
        note(x, "fused_norm / fused_rope / fused_swiglu true: no ds_config setting; the model's code decides "
                "(Hugging Face's Llama runs them unfused; a kernel library such as Liger Kernel fuses them)");
    if (w->cross_entropy_fusion)
        note(x, "cross_entropy_fusion true: the model's code decides (Hugging Face's loss runs on logits.float())");
    if (w->grad_accum_fusion && x->n_micro > 1)
        note(x, "grad_accum_fusion true: DeepSpeed adds each micro-batch's gradients apart (no setting)");
    if (w->optimizer == PLAN_OPTIM_FORLOOP)
        note(x, "optimizer forloop: \"torch_adam\": true runs torch.optim.AdamW, whose default on CUDA is foreach");
    if (plan_fp8_on(w))
        note(x, "fp8 %s: DeepSpeed has no FP8 training of its own (ds_config has no fp8 section); the model's "
                "code runs it, e.g. Transformer Engine's te.Linear under te.fp8_autocast with the recipe; not "
                "written", plan_fp8_recipe_names[w->fp8.recipe]);
}

/* A ds_config.json (DeepSpeed's configuration documentation). */
static void write_deepspeed(const Ex *x, FILE *o)
{
    const Model *m = x->m;
    const Layout *l = &x->l;
    if (x->moe)
        note(x, "moe (experts %lld, top_k %lld, ep %d): not written; DeepSpeed takes experts from the "
                "model code (deepspeed.moe.layer.MoE(num_experts, ep_size, k))",
             (long long)x->moe->experts, (long long)x->moe->top_k, plan_ep(l));
    fprintf(o, "{\n  \"train_batch_size\": %lld,\n  \"train_micro_batch_size_per_gpu\": %lld,\n"
               "  \"gradient_accumulation_steps\": %lld,\n",
            (long long)l->global_batch, (long long)l->micro_batch, (long long)x->n_micro);
    /* overlap_comm: the gradient reduction beside the backward (config-json.md);
       stage 1 ignores it (microsoft/DeepSpeed PR 1246), stage 0 has no ZeRO section to read it */
    if (l->zero >= 2)
        fprintf(o, "  \"zero_optimization\": {\n    \"stage\": %d,\n    \"overlap_comm\": %s\n  },\n", l->zero,
                x->p->software.overlap_grad_reduce ? "true" : "false");
    else
        fprintf(o, "  \"zero_optimization\": {\n    \"stage\": %d\n  },\n", l->zero);
    fprintf(o, "  \"bf16\": {\n    \"enabled\": %s\n  },\n", m->dtype == DTYPE_BF16 ? "true" : "false");
    fprintf(o, "  \"fp16\": {\n    \"enabled\": %s\n  }", m->dtype == DTYPE_FP16 ? "true" : "false");
    /* data_types.grad_accum_dtype (config-json.md): written where it is
       not the model's dtype (so fp32 for a bf16 model, planc's default) */
    if (plan_grad_dtype(x->p) != m->dtype)
        fprintf(o, ",\n  \"data_types\": {\n    \"grad_accum_dtype\": \"%s\"\n  }",
                plan_grad_dtype(x->p) == DTYPE_FP32 ? "fp32" : plan_grad_dtype(x->p) == DTYPE_BF16 ? "bf16" : "fp16");
    if (l->tp > 1) fprintf(o, ",\n  \"tensor_parallel\": {\n    \"autotp_size\": %d\n  }", l->tp);
    /* DeepSpeed's context parallelism is Ulysses: the all-to-all form */
    if (plan_cp(l) > 1 && plan_cp_comm(l) == PLAN_CP_ALL_TO_ALL)
        fprintf(o, ",\n  \"sequence_parallel_size\": %d", plan_cp(l));
    else if (plan_cp(l) > 1)
        note(x, "cp %d, cp_comm %s: not written; DeepSpeed's only context parallelism is Ulysses "
                "(sequence_parallel_size, the all_to_all form): it has no ring, all-gather or hierarchical "
                "form", plan_cp(l), plan_cp_comm_name(plan_cp_comm(l)));
    if (x->p->has_train) {
        const Train *t = &x->p->train;
        fprintf(o, ",\n  \"gradient_clipping\": ");
        put_num(o, t->grad_clip);
        fprintf(o, ",\n  \"optimizer\": {\n    \"type\": \"AdamW\",\n    \"params\": {\n      \"lr\": ");
        put_num(o, t->lr);
        fprintf(o, ",\n      \"betas\": [");
        put_num(o, t->beta1);
        fprintf(o, ", ");
        put_num(o, t->beta2);
        fprintf(o, "],\n      \"eps\": ");
        put_num(o, t->eps);
        fprintf(o, ",\n      \"weight_decay\": ");
        put_num(o, t->weight_decay);
        /* torch.optim.AdamW in place of DeepSpeed's FusedAdam (its default) */
        if (x->p->software.optimizer != PLAN_OPTIM_FUSED) fprintf(o, ",\n      \"torch_adam\": true");
        fprintf(o, "\n    }\n  },\n  \"scheduler\": {\n    \"type\": \"WarmupLR\",\n    \"params\": {\n"
                   "      \"warmup_min_lr\": 0,\n      \"warmup_max_lr\": ");
        put_num(o, t->lr);
        fprintf(o, ",\n      \"warmup_num_steps\": %lld\n    }\n  }", (long long)t->warmup);
    }
    fprintf(o, "\n}\n");
    if (l->pp > 1) {
        note(x, "pp %d: DeepSpeed takes the pipeline in code: PipelineModule(layers, num_stages=%d); "
                "its schedule is 1F1B", l->pp, l->pp);
        if (l->schedule != SCHED_1F1B)
            note(x, "schedule %s: DeepSpeed's pipeline runs 1F1B only", plan_schedule_name(l->schedule));
        if (l->zero >= 2) note(x, "zero %d with pp %d: DeepSpeed's pipeline engine supports ZeRO 0 and 1 only",
                               l->zero, l->pp);
    }
    if (l->tp > 1)
        note(x, "tp %d: DeepSpeed's AutoTP (\"tensor_parallel\": {\"autotp_size\"}) splits the linear "
                "layers; Megatron-style TP needs an mpu", l->tp);
    if (l->sequence_parallel == 1)
        note(x, "sequence_parallel: DeepSpeed has no Megatron-style sequence parallelism in ds_config");
    if (l->recompute != RECOMPUTE_NONE)
        note(x, "recompute %s: DeepSpeed recomputes where the model calls deepspeed.checkpointing.checkpoint",
             plan_recompute_name(l->recompute));
    if (m->dtype == DTYPE_FP32) note(x, "dtype fp32: neither bf16 nor fp16 is enabled");
    deepspeed_software(x);
}

int plan_export(const Plan *p, PlanExportTarget t, FILE *out, FILE *notes, char *why, size_t len)
{
    Ex x = { .p = p, .m = &p->model, .notes = notes, .target = TARGETS[t] };
    x.l = plan_layout_defaults(p);
    if (!plan_layout_check(p, &x.l, why, len)) return 1;
    PlanEval ev;
    plan_evaluate_layout(p, &x.l, &ev);
    bool ok = ev.feasible;
    if (!ok) snprintf(why, len, "%s", ev.why);
    plan_eval_free(&ev);
    if (!ok) return 1;
    x.n_micro = plan_micro_batches(&x.l);
    for (int i = 0; i < x.m->n_layers; i++) {
        const Layer *a = &x.m->layers[i];
        if (a->kind == LAYER_ATTENTION && !x.att) x.att = a;
        if ((a->kind == LAYER_MLP || a->kind == LAYER_MOE) && !x.mlp) x.mlp = a;
        if (a->kind == LAYER_MOE && !x.moe) x.moe = a;
    }
    check_uniform(&x);
    switch (t) {
    case EXPORT_MEGATRON:   write_megatron(&x, out); break;
    case EXPORT_TORCHTITAN: write_torchtitan(&x, out); break;
    case EXPORT_DEEPSPEED:  write_deepspeed(&x, out); break;
    }
    return 0;
}
