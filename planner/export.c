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

/* The versions each writer targets, the default first (ORDER
 * PlanExportTarget). Each is the release whose sources the writer was
 * checked against:
 *  - megatron core-0.14: Megatron-LM tag core_v0.14.0,
 *    megatron/training/arguments.py (the first with --use-megatron-fsdp
 *    and --data-parallel-sharding-strategy; core_v0.13.0 has neither);
 *  - torchtitan 0.2: tag v0.2.2, torchtitan/config/job_config.py and
 *    manager.py (_dict_to_dataclass raises on a field the dataclass lacks);
 *  - deepspeed 0.17: tag v0.17.0, deepspeed/runtime/config.py and
 *    deepspeed/runtime/lr_schedules.py. */
static const char *const VERSIONS[][2] = {
    { "core-0.14", NULL },
    { "0.2", NULL },
    { "0.17", NULL },
};

const char *plan_export_version(PlanExportTarget t, const char *v, char *why, size_t len)
{
    if (!v || !*v) return VERSIONS[t][0];
    for (int i = 0; i < 2 && VERSIONS[t][i]; i++)
        if (strcmp(v, VERSIONS[t][i]) == 0) return VERSIONS[t][i];
    if (t == EXPORT_TORCHTITAN && strncmp(v, "0.3", 3) == 0)
        snprintf(why, len, "torchtitan@%s is not a target: torchtitan 0.3 reads no TOML job file (its jobs are "
                 "Python config functions); supported: torchtitan@0.2 (the default)", v);
    else
        snprintf(why, len, "%s@%s is not a target version; supported: %s@%s (the default)", TARGETS[t], v,
                 TARGETS[t], VERSIONS[t][0]);
    return NULL;
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
    const char  *version;     /* plan_export_version's */
    char        *why;         /* the first refusal, or "" */
    size_t       why_len;
    bool        *refused;     /* set by refuse(): nothing is written */
} Ex;

/* A setting the target cannot hold: the export is refused (exit 2), the
 * first reason kept; what a user would run elsewhere is never a layout or
 * a model other than the one `planc check` judged. */
static void refuse(const Ex *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(const Ex *x, const char *fmt, ...)
{
    if (*x->refused) return;
    *x->refused = true;
    int n = snprintf(x->why, x->why_len, "%s@%s: ", x->target, x->version);
    if (n < 0 || (size_t)n >= x->why_len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->why + n, x->why_len - (size_t)n, fmt, ap);
    va_end(ap);
}

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

/* The shortest text of v that reads back as the same float: a value the
 * runtime holds in fp32 (the schedule's floor, lr/10), so 3e-05 rather
 * than 3.0000000000000004e-05. */
static void put_num_f32(FILE *o, double v)
{
    char buf[40];
    float f = (float)v;
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        float back;
        if (sscanf(buf, "%f", &back) == 1 && back == f) break;
    }
    fputs(buf, o);
}

/* Every block is built alike by all three frameworks: say where planc's
 * model differs from its first block. */
/* norm_position's words (ORDER NormPosition). */
static const char *const NORM_POSITION_WORDS[] = { "pre", "post", "sandwich" };

/* The first block's sublayer whose norm is not a pre-norm (norm_position
 * post or sandwich), or NULL: what a framework without such norms refuses. */
static const Layer *norm_position_layer(const Ex *x)
{
    if (x->att && x->att->norm_pos != NORM_POS_PRE) return x->att;
    if (x->mlp && x->mlp->norm_pos != NORM_POS_PRE) return x->mlp;
    return NULL;
}

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
                              a->qkv_bias_only == b->qkv_bias_only && a->qk_norm == b->qk_norm &&
                              a->softcap == b->softcap && a->query_scalar == b->query_scalar &&
                              a->norm_pos == b->norm_pos &&
                              a->attn == b->attn && a->q_lora_rank == b->q_lora_rank &&
                              a->kv_lora_rank == b->kv_lora_rank && a->qk_rope_dim == b->qk_rope_dim &&
                              a->qk_nope_dim == b->qk_nope_dim && a->v_head_dim == b->v_head_dim
                        : a->hidden == b->hidden && a->act == b->act && a->bias == b->bias && a->norm == b->norm &&
                              a->experts == b->experts && a->top_k == b->top_k && a->shared == b->shared &&
                              a->norm_pos == b->norm_pos &&
                              a->score == b->score && a->topk_unnormalised == b->topk_unnormalised;
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

/* ---- the train block's settings -------------------------------------------
 *
 * Where each key of the train block (planner/sema.c TRAIN_KEYS, ADAMW_KEYS)
 * goes in each target (ORDER PlanExportTarget). An entry that begins
 * "script:" is a setting no configuration of that framework holds (its
 * training script's); the export says so in a note naming the key. A key
 * sema accepts and this table lacks fails `make test-bridges`, which walks
 * sema.c's lists, changes each key and requires every export to change
 * (or to name the key in a note, for a "script:" entry). */
typedef struct {
    const char *key;
    const char *where[3];
} ExportSetting;

static const ExportSetting TRAIN_SETTINGS[] = {
    { "steps",        { "--train-iters, --lr-decay-iters", "[training] steps", "scheduler.params.total_num_steps" } },
    { "lr",           { "--lr, --min-lr (lr/10)", "[optimizer] lr", "optimizer.params.lr" } },
    { "warmup",       { "--lr-warmup-iters", "[lr_scheduler] warmup_steps", "scheduler.params.warmup_num_steps" } },
    { "seed",         { "--seed", "[debug] seed", "script: deepspeed.runtime.utils.set_random_seed" } },
    { "grad_clip",    { "--clip-grad", "[training] max_norm", "gradient_clipping" } },
    { "optimizer",    { "--optimizer adam (Megatron's default, decoupled decay: AdamW)", "[optimizer] name",
                        "optimizer.type" } },
    { "data",         { "script: --data-path (Megatron's indexed .bin/.idx)",
                        "script: [training] dataset, dataset_path (a Hugging Face dataset)",
                        "script: the training script's data loader" } },
    { "init",         { "script: convert the directory to a Megatron checkpoint (Megatron-Bridge) and --load it",
                        "script: [checkpoint] initial_load_path with initial_load_in_hf (not verified here)",
                        "script: the training script's from_pretrained" } },
    { "beta1",        { "--adam-beta1", "[optimizer] beta1", "optimizer.params.betas" } },
    { "beta2",        { "--adam-beta2", "[optimizer] beta2", "optimizer.params.betas" } },
    { "eps",          { "--adam-eps", "[optimizer] eps", "optimizer.params.eps" } },
    { "weight_decay", { "--weight-decay", "[optimizer] weight_decay", "optimizer.params.weight_decay" } },
};

void plan_export_settings(FILE *o)
{
    fprintf(o, "key\tmegatron\ttorchtitan\tdeepspeed\n");
    for (size_t i = 0; i < sizeof TRAIN_SETTINGS / sizeof TRAIN_SETTINGS[0]; i++)
        fprintf(o, "train.%s\t%s\t%s\t%s\n", TRAIN_SETTINGS[i].key, TRAIN_SETTINGS[i].where[0],
                TRAIN_SETTINGS[i].where[1], TRAIN_SETTINGS[i].where[2]);
}

/* A note for each train key this target leaves to the training script. */
static void train_script_notes(const Ex *x, PlanExportTarget t)
{
    if (!x->p->has_train) return;
    for (size_t i = 0; i < sizeof TRAIN_SETTINGS / sizeof TRAIN_SETTINGS[0]; i++) {
        const char *w = TRAIN_SETTINGS[i].where[t];
        if (strncmp(w, "script: ", 8)) continue;
        const char *key = TRAIN_SETTINGS[i].key;
        if (strcmp(key, "data") == 0 && !x->p->train.data) continue;
        if (strcmp(key, "init") == 0 && !x->p->train.init) continue;
        if (strcmp(key, "data") == 0)
            note(x, "train data \"%s\": not in the configuration; planc's token file is for %s", x->p->train.data,
                 w + 8);
        else if (strcmp(key, "init") == 0)
            note(x, "train init \"%s\": the weights are not in the configuration; %s", x->p->train.init, w + 8);
        else if (strcmp(key, "seed") == 0)
            note(x, "train seed %llu: not in the configuration; set it in the training script (%s)",
                 (unsigned long long)x->p->train.seed, w + 8);
        else
            note(x, "train %s: not in the configuration; set it in the training script (%s)", key, w + 8);
    }
    /* planc decays matrices only (codegen: biases and norms get wd 0) */
    if (t != EXPORT_MEGATRON && x->p->train.weight_decay > 0)
        note(x, "weight_decay %g: planc decays the weight matrices only (not biases or norms); %s decays "
                "every parameter it is given unless the script makes parameter groups", x->p->train.weight_decay,
             t == EXPORT_TORCHTITAN ? "torchtitan's build_optimizers" : "DeepSpeed's optimizer");
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
    if (e->shared > 0)
        arg_int(o, first, "--moe-shared-expert-intermediate-size", e->shared * plan_shared_hidden(e));
    if (e->shared_gate)
        note(x, "moe shared_gate (Qwen2-MoE's sigmoid gate on the shared experts): no flag of Megatron-LM's "
                "arguments sets it; not written");
    if (e->aux_loss > 0) {
        arg(o, first, "--moe-router-load-balancing-type");
        fprintf(o, " aux_loss");
        arg_num(o, first, "--moe-aux-loss-coeff", e->aux_loss);
    } else {
        arg(o, first, "--moe-router-load-balancing-type");
        fprintf(o, " none");
    }
    if (e->capacity_factor > 0) arg_num(o, first, "--moe-expert-capacity-factor", e->capacity_factor);
    /* the gate (issue 29): Megatron-Core's router.py renormalises sigmoid
       scores over the top-k when k > 1, and --moe-router-pre-softmax is the
       full softmax's top-k without renormalising (Qwen2-MoE) */
    if (e->score == MOE_SCORE_SIGMOID) {
        arg(o, first, "--moe-router-score-function");
        fprintf(o, " sigmoid");
        if (e->topk_unnormalised == (e->top_k > 1))
            note(x, "moe norm_topk_prob %s with score sigmoid and top_k %lld: Megatron-Core renormalises "
                    "the sigmoid scores exactly when top_k > 1; not written",
                 e->topk_unnormalised ? "false" : "true", (long long)e->top_k);
    } else if (e->topk_unnormalised) {
        arg(o, first, "--moe-router-pre-softmax");
    }
    if (e->route_groups > 1 && e->route_top_groups < e->route_groups) {   /* grouped routing */
        arg_int(o, first, "--moe-router-num-groups", e->route_groups);
        arg_int(o, first, "--moe-router-group-topk", e->route_top_groups);
        if (e->route_group_score == MOE_GROUP_MAX)   /* moe_utils.py group_limited_topk: topk(k / groups).sum */
            refuse(x, "moe route_group_score max (DeepSeek-V2's group_limited_greedy): Megatron-Core's "
                      "group_limited_topk ranks a group by the sum of its top_k / group_topk largest scores");
    }
    /* routed_scale: moe_utils.py's topk_softmax_with_capacity multiplies the
       routed probabilities by scaling_factor after the gate's normalisation */
    if (plan_routed_scale(e) != 1) arg_num(o, first, "--moe-router-topk-scaling-factor", plan_routed_scale(e));
    /* expert_bias: router.py's expert_bias, moved after each step by
       moe_utils.py's get_updated_expert_bias at the update rate */
    if (e->expert_bias) {
        arg(o, first, "--moe-router-enable-expert-bias");
        arg_num(o, first, "--moe-router-bias-update-rate", e->bias_update_rate);
    }
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


/* Gemma 2's attention soft-cap, query_pre_attn_scalar and final-logit
 * soft-cap: a framework without them would train another model, so each
 * is refused by name; `lacks` says what the target has instead. */
static void gemma2_refusals(const Ex *x, const char *lacks)
{
    const Model *m = x->m;
    const Layer *head = &m->layers[m->n_layers - 1];
    if (x->att && x->att->softcap > 0)
        refuse(x, "attention softcap %g (Gemma 2's attn_logit_softcapping): %s", x->att->softcap, lacks);
    else if (x->att && x->att->query_scalar > 0)
        refuse(x, "query_pre_attn_scalar %g (Gemma 2/3's scores times 1/sqrt of it): %s", x->att->query_scalar,
               lacks);
    else if (head->kind == LAYER_LM_HEAD && head->softcap > 0)
        refuse(x, "lm_head softcap %g (Gemma 2's final_logit_softcapping): %s", head->softcap, lacks);
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
            refuse(x, "rope_scaling llama3 low_freq_factor %g, high_freq_factor %g, original_max_position %lld: "
                      "Megatron-LM's --use-rope-scaling fixes them at 1, 4 and 8192",
                 r.low_freq_factor, r.high_freq_factor, (long long)r.original_max_position);
    } else if (r.kind == ROPE_SCALING_LINEAR && r.factor == floor(r.factor)) {
        arg_num(o, first, "--rotary-seq-len-interpolation-factor", r.factor);
    } else if (r.kind != ROPE_SCALING_NONE) {
        refuse(x, "rope_scaling %s factor %g: no Megatron-LM flag for it on standard attention",
             r.kind == ROPE_SCALING_YARN ? "yarn" : "linear", r.factor);
    }
}

/* Multi-head latent attention as Megatron-Core builds it
 * (MLATransformerConfig, megatron/core/transformer/transformer_config.py;
 * multi_latent_attention.py): --multi-latent-attention with the widths
 * (--q-lora-rank only with a query latent: without it, linear_q_proj),
 * the latent norms of the --normalization kind; --rope-type rope, or yarn
 * with --rotary-scaling-factor, DeepSeek's pair as --mscale and
 * --mscale-all-dim (megatron/training/arguments.py _add_mla_args, main at
 * d98e8a6, defaults 1 and 0; MLASelfAttention's softmax_scale
 * m(f, mscale_all_dim)^2 / sqrt(q_head_dim) and YarnRotaryEmbedding's
 * m(f, mscale) / m(f, mscale_all_dim) on cos and sin: planc's rule on
 * every pair sema takes)
 * and the config's other YaRN fields at their defaults
 * (original_max_position_embeddings 4096, beta_fast 32, beta_slow 1: no
 * flag sets them). Its down projections have no bias (bias=False in
 * MLASelfAttention), so planc's `bias true` on q_a and kv_a is refused. */
static void megatron_mla(const Ex *x, FILE *o, bool *first)
{
    const Layer *a = x->att;
    arg(o, first, "--multi-latent-attention");
    if (a->q_lora_rank > 0) arg_int(o, first, "--q-lora-rank", a->q_lora_rank);
    arg_int(o, first, "--kv-lora-rank", a->kv_lora_rank);
    arg_int(o, first, "--qk-head-dim", a->qk_nope_dim);
    arg_int(o, first, "--qk-pos-emb-head-dim", a->qk_rope_dim);
    arg_int(o, first, "--v-head-dim", a->v_head_dim);
    RopeScaling r = plan_rope_scaling(x->m);
    arg(o, first, "--rope-type");
    fputs(r.kind == ROPE_SCALING_YARN ? " yarn" : " rope", o);
    if (r.kind == ROPE_SCALING_YARN) {
        arg_num(o, first, "--rotary-scaling-factor", r.factor);
        if (r.mscale_all_dim != 0) {   /* else sema's mscale 1 beside 0: Megatron's defaults */
            arg_num(o, first, "--mscale", r.mscale);
            arg_num(o, first, "--mscale-all-dim", r.mscale_all_dim);
            if (r.mscale == 0)   /* a Plan built in C: transformers' None, which Megatron cannot say */
                refuse(x, "kind mla with rope_scaling yarn mscale 0: Megatron-Core's YaRN divides m(f, 0) = 1 by "
                          "m(f, mscale_all_dim), planc's (transformers') reads 0 as no mscale");
        }
        if (r.original_max_position != 4096 || r.beta_fast != 32 || r.beta_slow != 1)
            refuse(x, "kind mla with rope_scaling yarn original_max_position %lld, beta_fast %g, beta_slow %g: "
                      "Megatron-LM has no flags for MLATransformerConfig's original_max_position_embeddings, "
                      "beta_fast, beta_slow (4096, 32, 1)", (long long)r.original_max_position, r.beta_fast,
                   r.beta_slow);
    } else if (r.kind != ROPE_SCALING_NONE) {
        refuse(x, "kind mla with rope_scaling %s: Megatron-Core's MLA rotates by --rope-type rope or yarn only",
               r.kind == ROPE_SCALING_LINEAR ? "linear" : "llama3");
    }
    if (a->bias)
        refuse(x, "kind mla with bias true: Megatron-Core's MLA down projections (linear_q_down_proj, "
                  "linear_kv_down_proj) have no bias");
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

/* An fp32 model's FP8 is planc's own (its runtime casts fp32 tensors:
 * plan_rule_fp8 takes it under software planc only); the framework's FP8
 * is checked by planc on a 16-bit model, so the export says so. */
static void fp8_fp32_note(const Ex *x, const char *stack)
{
    if (x->m->dtype == DTYPE_FP32)
        note(x, "fp8 with dtype fp32: planc runs FP8 GEMMs in an fp32 model under software planc alone; "
                "under `software %s` its FP8 rule wants a 16-bit model (write `dtype bf16` to export that run)",
             stack);
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
        refuse(x, "fp8 rowwise: Megatron-LM's --fp8-recipe has tensorwise, delayed, mxfp8 and blockwise, no "
                  "rowwise (torchao's)");
        return;
    }
    fp8_fp32_note(x, "megatron-core");
    arg(o, first, "--fp8-format");
    fprintf(o, " %s", plan_fp8_format_names[f->format]);
    arg(o, first, "--fp8-recipe");
    fprintf(o, " %s", plan_fp8_recipe_names[f->recipe]);
    if (f->recipe == PLAN_FP8_DELAYED) arg_int(o, first, "--fp8-amax-history-len", f->amax_history);
    if (f->all_gather) arg(o, first, "--fp8-param-gather");
    if (f->first_last_bf16) arg(o, first, "--first-last-layers-bf16");
}

/* planc's schedule (runtime/ops/adamw.c prt_lr_at): linear warm-up over
 * train.warmup steps, then cosine decay to lr/10 at train.steps. In
 * Megatron-LM (arguments.py core_v0.14.0, --lr-decay-style default
 * "linear", --min-lr default 0; megatron/training/
 * optimizer_param_scheduler.py get_lr: the same cosine, over
 * --lr-decay-iters) it is written whole, since every default differs. */
static void megatron_lr_schedule(const Ex *x, FILE *o, bool *first)
{
    const Train *t = &x->p->train;
    arg_int(o, first, "--lr-warmup-iters", t->warmup);
    arg(o, first, "--lr-decay-style");
    fputs(" cosine", o);
    arg_int(o, first, "--lr-decay-iters", t->steps);
    arg(o, first, "--min-lr");
    fputc(' ', o);
    put_num_f32(o, plan_min_lr(t));
    if (t->warmup > 0)
        note(x, "lr schedule: Megatron-LM's warm-up runs lr x k / warmup at step k (optimizer_param_scheduler.py "
                "get_lr, num_steps from 0), planc's (k + 1) / warmup: one step behind; the cosine after it is planc's");
}

/* The layouts Megatron-LM (core_v0.14.0) runs: interleaving with equal
 * chunks only. */
static void megatron_layout(const Ex *x)
{
    const Layout *l = &x->l;
    int nb = x->m->n_blocks;
    /* megatron/core/pipeline_parallel/schedules.py: 1F1B, interleaved 1F1B,
       and no pipelining; no GPipe, no zero-bubble schedule */
    if (l->pp > 1 && (l->schedule == SCHED_GPIPE || l->schedule == SCHED_ZB_H1))
        refuse(x, "schedule %s: Megatron-Core's pipeline schedules (pipeline_parallel/schedules.py "
                  "get_forward_backward_func) are 1F1B and interleaved 1F1B only", plan_schedule_name(l->schedule));
    if (l->schedule == SCHED_INTERLEAVED && l->chunks > 1 && nb % ((int64_t)l->pp * l->chunks))
        refuse(x, "schedule interleaved, pp %d x chunks %d: %d blocks do not divide into %lld equal chunks; "
                  "Megatron-LM's validate_args (arguments.py) needs num_layers %% pp == 0 and (num_layers / pp) %% "
                  "--num-layers-per-virtual-pipeline-stage == 0 (planc gives the middle chunks one more)",
               l->pp, l->chunks, nb, (long long)l->pp * l->chunks);
}

static void write_megatron(const Ex *x, FILE *o)
{
    megatron_layout(x);
    const Model *m = x->m;
    const Layout *l = &x->l;
    bool first = true;
    arg_int(o, &first, "--num-layers", m->n_blocks);
    arg_int(o, &first, "--hidden-size", m->dim);
    if (x->att) {
        arg_int(o, &first, "--num-attention-heads", x->att->heads);
        if (x->att->attn == ATTN_MLA) {
            megatron_mla(x, o, &first);
        } else if (x->att->kv_heads != x->att->heads) {
            arg(o, &first, "--group-query-attention");
            arg_int(o, &first, "--num-query-groups", x->att->kv_heads);
        }
        if (x->att->attn != ATTN_MLA && plan_head_dim(m, x->att) * x->att->heads != m->dim)
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
    if (!x->att || x->att->attn != ATTN_MLA) megatron_rope_scaling(x, o, &first);   /* MLA's: megatron_mla */
    arg_num(o, &first, "--norm-epsilon", plan_norm_eps(m));
    static const char *const norms[] = { "LayerNorm", "RMSNorm" };             /* ORDER NormKind */
    arg(o, &first, "--normalization");
    fprintf(o, " %s", norms[x->att ? x->att->norm : m->layers[m->n_layers - 2].norm]);
    if (x->mlp && x->mlp->act == ACT_SWIGLU) arg(o, &first, "--swiglu");
    if (x->mlp && x->mlp->act == ACT_GEGLU)
        refuse(x, "act geglu: Megatron-LM's gated MLP flag is --swiglu (SiLU); GeGLU is not a flag");
    if (m->norm_plus_one)   /* issue 28: Gemma's norm */
        refuse(x, "norm_plus_one (Gemma's RMSNorm x*(1+w)): not verified against Megatron-LM's "
                  "--apply-layernorm-1p for RMSNorm");
    if (m->n_layers > 0 && m->layers[0].embed_scale)
        refuse(x, "embedding scale sqrt_dim (Gemma): Megatron-LM has no flag for it");
    if (plan_rope_local_theta(m) > 0)   /* issue 29: Gemma 3's local blocks' base */
        refuse(x, "rope_local_theta %g (Gemma 3's rope_local_base_freq): Megatron-LM rotates every layer by one "
                  "--rotary-base", plan_rope_local_theta(m));
    if (x->att && x->att->window > 0)
        refuse(x, "sliding_window %lld: arguments.py (core_v0.14.0) has no flag for it (TransformerConfig.window_size "
                  "is set in code only)", (long long)x->att->window);
    if (x->mlp && x->mlp->act == ACT_RELU)
        refuse(x, "act relu: Megatron-LM has no ReLU MLP flag (GELU unless --swiglu; --squared-relu is another)");
    gemma2_refusals(x, "Megatron-LM's arguments.py (core_v0.14.0) has no flag for it");
    /* --qk-layernorm: Megatron-core's q_layernorm / k_layernorm over each
       head's kv_channels, of the --normalization kind (RMSNorm here) */
    if (x->att && x->att->qk_norm == QK_NORM_RMSNORM_PROJ)
        refuse(x, "qk_norm rmsnorm_projection (OLMo-2): Megatron-LM's --qk-layernorm normalises each head, not "
                  "the whole projection");
    if (x->att && x->att->qk_norm == QK_NORM_RMSNORM) {
        arg(o, &first, "--qk-layernorm");
        if (x->att->norm != NORM_RMSNORM)
            refuse(x, "qk_norm rmsnorm with norm layernorm: Megatron-LM's --qk-layernorm normalises q and k "
                      "with the --normalization kind, LayerNorm here, not RMSNorm");
    }
    /* Megatron-Core's TransformerLayer (core_v0.14.0) normalises each
       sublayer's input (input_layernorm, pre_mlp_layernorm) and has no norm
       of the branch's output; --apply-residual-connection-post-layernorm is
       another thing (the residual taken after the input norm) */
    const Layer *post = norm_position_layer(x);
    if (post)
        refuse(x, "norm_position %s on %s: Megatron-Core's TransformerLayer has no norm of a sublayer's output "
                  "(OLMo-2's post-norm, Gemma 2's sandwich)", NORM_POSITION_WORDS[post->norm_pos],
               plan_layer_kind_name(post->kind));
    if (x->att && (!x->att->bias || x->att->qkv_bias_only)) arg(o, &first, "--disable-bias-linear");
    if (x->att && x->att->bias && x->att->qkv_bias_only) arg(o, &first, "--add-qkv-bias");
    if (!m->layers[m->n_layers - 1].tied) arg(o, &first, "--untie-embeddings-and-output-weights");
    if (m->dtype == DTYPE_BF16) arg(o, &first, "--bf16");
    if (m->dtype == DTYPE_FP16) arg(o, &first, "--fp16");

    if (x->moe) write_megatron_moe(x, o, &first);

    arg_int(o, &first, "--tensor-model-parallel-size", l->tp);
    arg_int(o, &first, "--pipeline-model-parallel-size", l->pp);
    if (plan_cp(l) > 1) megatron_cp(x, o, &first);
    /* arguments.py (core_v0.14.0) validate_args: "number of layers of the
       model must be divisible pipeline model parallel size" and "number of
       layers per pipeline stage must be divisible number of layers per
       virtual pipeline stage"; planc's uneven chunks it cannot take */
    if (l->schedule == SCHED_INTERLEAVED && l->chunks > 1)
        arg_int(o, &first, "--num-layers-per-virtual-pipeline-stage", m->n_blocks / ((int64_t)l->pp * l->chunks));
    arg_int(o, &first, "--micro-batch-size", l->micro_batch);
    arg_int(o, &first, "--global-batch-size", l->global_batch);
    if (l->sequence_parallel == 1) arg(o, &first, "--sequence-parallel");
    /* ZeRO-3 is Megatron-FSDP, sharding parameters, gradients and optimizer
       state (arguments.py core_v0.14.0: --use-megatron-fsdp,
       --data-parallel-sharding-strategy choices no_shard, optim, optim_grads,
       optim_grads_params; validate_args: "Megatron FSDP only supports
       fsdp_dtensor checkpoint format"), never the distributed optimizer,
       which keeps whole parameters on every rank */
    if (l->zero == 3) {
        arg(o, &first, "--use-megatron-fsdp");
        arg(o, &first, "--data-parallel-sharding-strategy");
        fputs(" optim_grads_params", o);
        arg(o, &first, "--ckpt-format");
        fputs(" fsdp_dtensor", o);
    } else if (l->zero >= 1) {
        arg(o, &first, "--use-distributed-optimizer");
    }
    if (l->zero == 2)
        note(x, "zero 2: Megatron-LM's distributed optimizer shards the optimizer state and reduce-scatters "
                "the gradients (ZeRO-2's memory)");
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
        megatron_lr_schedule(x, o, &first);
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

/* planc's schedule (warm-up, cosine to lr/10 at train.steps) as torchtitan
 * 0.2's [lr_scheduler] (job_config.py v0.2.2 LRScheduler warmup_steps,
 * decay_ratio, decay_type "linear" | "sqrt" | "cosine" (default linear),
 * min_lr_factor (default 0); components/lr_scheduler.py
 * linear_warmup_stable_decay: decay over steps - warmup_steps when
 * decay_ratio is unset, with one stable step at warmup_steps): its step k
 * runs (k + 1) / warmup_steps in the warm-up and the cosine of (k -
 * warmup) / (steps - warmup) after it, planc's schedule step for step. */
static void torchtitan_lr_schedule(const Ex *x, FILE *o)
{
    const Train *t = &x->p->train;
    fprintf(o, "\n[lr_scheduler]\nwarmup_steps = %lld\ndecay_type = \"cosine\"\nmin_lr_factor = ",
            (long long)t->warmup);
    put_num(o, PLAN_MIN_LR_FACTOR);
    fputc('\n', o);

}

/* [model] converters: the FP8 linears (components/quantization at v0.2.2
 * registers "quantize.linear.float8" and "quantize.linear.mx"). */
static void torchtitan_converters(const Ex *x, FILE *o)
{
    if (!plan_fp8_on(&x->p->software)) return;
    fprintf(o, "converters = [\"%s\"]\n",
            x->p->software.fp8.recipe == PLAN_FP8_MXFP8 ? "quantize.linear.mx" : "quantize.linear.float8");
}

/* What torchtitan 0.2's llama3 model can be (torchtitan/models/llama3/
 * model/args.py and model.py at v0.2.2: TransformerModelArgs dim, n_layers,
 * n_heads, n_kv_heads, vocab_size, norm_eps, rope_theta, rope_scaling_args;
 * RMSNorm, RoPE, SwiGLU, no biases, no dropout, an output projection of its
 * own). Every other model is refused, never written as a dense llama3:
 * its MoE models (deepseek_v3, llama4, qwen3) route and shape experts their
 * own way, so a planc mixture is not one of them. */
static void torchtitan_model_rules(const Ex *x)
{
    static const char *const ACT_NAMES[] = { "gelu", "relu", "swiglu", "geglu" };   /* ORDER ActKind */
    const Model *m = x->m;
    if (x->moe)
        refuse(x, "moe (experts %lld, top_k %lld): torchtitan 0.2's MoE models (deepseek_v3, llama4, qwen3) "
                  "have their own routers and shapes, and its llama3 is dense; a planc mixture is not written "
                  "as a dense model", (long long)x->moe->experts, (long long)x->moe->top_k);
    if (m->layers[m->n_layers - 1].tied)
        refuse(x, "lm_head tied: torchtitan 0.2's llama3 has an output projection of its own "
                  "(model.py Transformer.output; TransformerModelArgs has no weight tying)");
    if (m->layers[0].position != POS_ROPE)
        refuse(x, "position %s: torchtitan 0.2's llama3 uses RoPE only", m->layers[0].position == POS_LEARNED
               ? "learned" : "none");
    if (x->att && x->att->norm != NORM_RMSNORM)
        refuse(x, "norm layernorm: torchtitan 0.2's llama3 uses RMSNorm only");
    if (x->mlp && x->mlp->act != ACT_SWIGLU && !x->moe)
        refuse(x, "act %s: torchtitan 0.2's llama3 has a SwiGLU MLP only", ACT_NAMES[x->mlp->act]);
    if (x->att && (x->att->bias || (x->mlp && x->mlp->bias)))
        refuse(x, "bias: torchtitan 0.2's llama3 has no biases");
    if (plan_rope_local_theta(m) > 0)
        refuse(x, "rope_local_theta %g (Gemma 3's rope_local_base_freq): torchtitan 0.2's llama3 rotates every "
                  "layer by one rope_theta", plan_rope_local_theta(m));
    if (x->att && x->att->window > 0)
        refuse(x, "sliding_window %lld: torchtitan 0.2's llama3 has no sliding window", (long long)x->att->window);
    if (m->dropout > 0)
        refuse(x, "dropout %g: torchtitan 0.2's llama3 has no dropout", m->dropout);
    gemma2_refusals(x, "torchtitan 0.2's llama3 scales its scores by 1/sqrt(head_dim) and caps nothing");
    if (m->norm_plus_one || (m->n_layers > 0 && m->layers[0].embed_scale))
        refuse(x, "%s: torchtitan 0.2's llama3 has neither Gemma's x*(1+w) RMSNorm nor its sqrt(dim) "
                  "embedding scale", m->norm_plus_one ? "norm_plus_one" : "embedding scale sqrt_dim");
    if (x->att && x->att->qk_norm != QK_NORM_NONE)
        refuse(x, "qk_norm %s: torchtitan 0.2's llama3 has no query and key norm (its qwen3 model, "
                  "which has, is not an export target)",
               x->att->qk_norm == QK_NORM_RMSNORM ? "rmsnorm" : "rmsnorm_projection");
    const Layer *post = norm_position_layer(x);
    if (post)   /* TransformerBlock: h = x + attention(attention_norm(x)); out = h + feed_forward(ffn_norm(h)) */
        refuse(x, "norm_position %s on %s: torchtitan 0.2's llama3 TransformerBlock normalises the sublayers' "
                  "inputs only", NORM_POSITION_WORDS[post->norm_pos], plan_layer_kind_name(post->kind));
    if (x->att && x->att->attn == ATTN_MLA)
        refuse(x, "kind mla: torchtitan 0.2's llama3 has no multi-head latent attention (its deepseek_v3 model, "
                  "which has, is not an export target)");
    RopeScaling r = plan_rope_scaling(m);
    if (r.kind == ROPE_SCALING_LINEAR || r.kind == ROPE_SCALING_YARN)
        refuse(x, "rope_scaling %s: torchtitan 0.2's llama3 scales RoPE by Llama 3.1's rule only "
                  "(RoPEScalingArgs)", r.kind == ROPE_SCALING_YARN ? "yarn" : "linear");
}

/* The layouts torchtitan 0.2 runs (job_config.py v0.2.2 [parallelism]):
 * DDP (replicate) or FSDP2 (shard, ZeRO-3), no ZeRO-1/2; its pipeline
 * schedules (torch.distributed.pipelining: GPipe, 1F1B, Interleaved1F1B,
 * ZBVZeroBubble, whose V puts two stages on a rank: not planc's zb-h1);
 * pipeline_parallel_layers_per_stage splits the blocks evenly. */
static void torchtitan_layout(const Ex *x)
{
    const Layout *l = &x->l;
    if ((l->zero == 1 || l->zero == 2) && l->dp > 1)
        refuse(x, "zero %d: torchtitan 0.2 replicates (DDP, data_parallel_replicate_degree) or shards "
                  "parameters, gradients and optimizer state together (FSDP2, data_parallel_shard_degree: "
                  "ZeRO-3); it has no ZeRO-%d", l->zero, l->zero);
    if (l->pp > 1 && l->schedule == SCHED_ZB_H1)
        refuse(x, "schedule zb-h1: torchtitan's zero-bubble schedule is ZBVZeroBubble (two stages per rank "
                  "in a V), not ZB-H1's one stage per rank");
    int64_t stages = (int64_t)l->pp * (l->schedule == SCHED_INTERLEAVED ? l->chunks : 1);
    if (l->pp > 1 && x->m->n_blocks % stages)
        refuse(x, "%d blocks do not divide into %lld pipeline stages: torchtitan's pipeline_parallel_layers_per_stage "
                  "splits them evenly (planc's stages differ by a block)", x->m->n_blocks, (long long)stages);
}

/* The flavor torchtitan must register for the model (its [model] flavor
 * names one in code): TransformerModelArgs as Python, with norm_eps and
 * the RoPE scaling written whole, since torchtitan 0.2's llama3 applies
 * RoPEScalingArgs() (Llama 3.1's factor 8) to every flavor that does not
 * set it (model.py precompute_freqs_cis); factor 1 is no scaling. */
static void torchtitan_flavor(const Ex *x, FILE *o)
{
    const Model *m = x->m;
    fprintf(o, "# [model] flavor \"%s\" is registered in torchtitan/models/llama3/__init__.py as:\n", m->name);
    fprintf(o, "#   TransformerModelArgs(dim=%lld, n_layers=%d", (long long)m->dim, m->n_blocks);
    if (x->att)
        fprintf(o, ", n_heads=%lld, n_kv_heads=%lld", (long long)x->att->heads, (long long)x->att->kv_heads);
    fprintf(o, ", vocab_size=%lld, norm_eps=", (long long)m->vocab);
    put_num(o, plan_norm_eps(m));
    fprintf(o, ", rope_theta=");
    put_num(o, plan_rope_theta(m));
    RopeScaling r = plan_rope_scaling(m);
    if (r.kind == ROPE_SCALING_LLAMA3) {
        fprintf(o, ",\n#       rope_scaling_args=RoPEScalingArgs(scaling_factor=");
        put_num(o, r.factor);
        fprintf(o, ", low_freq_factor=");
        put_num(o, r.low_freq_factor);
        fprintf(o, ", high_freq_factor=");
        put_num(o, r.high_freq_factor);
        fprintf(o, ", original_max_position_embeddings=%lld)", (long long)r.original_max_position);
    } else {
        fprintf(o, ",\n#       rope_scaling_args=RoPEScalingArgs(scaling_factor=1.0)");
    }
    fprintf(o, ")\n");
    if (x->mlp) fprintf(o, "#   with the SwiGLU hidden size %lld (multiple_of / ffn_dim_multiplier)\n",
                        (long long)x->mlp->hidden);
    if (x->att && plan_head_dim(m, x->att) * x->att->heads != m->dim)
        refuse(x, "head_dim %lld: torchtitan 0.2's llama3 has head_dim = dim / n_heads (%lld)",
               (long long)plan_head_dim(m, x->att), (long long)(m->dim / x->att->heads));
}

static void write_torchtitan(const Ex *x, FILE *o)
{
    const Model *m = x->m;
    const Layout *l = &x->l;
    torchtitan_model_rules(x);
    torchtitan_layout(x);
    /* the path goes into a comment: a control character (a newline would
       end it) is written as '?' */
    fprintf(o, "# torchtitan job file written by planc export from ");
    for (const unsigned char *c = (const unsigned char *)(x->p->file ? x->p->file : "(plan)"); *c; c++)
        fputc(*c < 0x20 || *c == 0x7f ? '?' : *c, o);
    fputc('\n', o);
    torchtitan_flavor(x, o);
    fprintf(o, "\n");
    fprintf(o, "[job]\ndescription = \"planc: %s\"\n\n", m->name);
    fprintf(o, "[model]\nname = \"llama3\"\nflavor = \"%s\"\n", m->name);
    torchtitan_converters(x, o);
    fprintf(o, "\n");
    note(x, "[model] names a flavor \"%s\": register it as the file's header says", m->name);

    /* without pipelining, torchtitan's gradient accumulation runs micro-batches
       of local_batch_size; with it, pipeline_parallel_microbatch_size */
    int64_t local = l->pp > 1 ? l->micro_batch * x->n_micro : l->micro_batch;
    fprintf(o, "[training]\nlocal_batch_size = %lld\nglobal_batch_size = %lld\nseq_len = %lld\n",
            (long long)local, (long long)l->global_batch, (long long)m->seq);
    if (m->dtype == DTYPE_BF16 || m->dtype == DTYPE_FP32)
        fprintf(o, "mixed_precision_param = \"%s\"\n", m->dtype == DTYPE_BF16 ? "bfloat16" : "float32");
    else
        note(x, "dtype fp16: torchtitan's mixed precision is bfloat16 or float32; nearest bfloat16 (not written)");
    bool compile = torchtitan_compile(x);
    if (x->p->has_train) {
        const Train *t = &x->p->train;
        fprintf(o, "steps = %lld\nmax_norm = ", (long long)t->steps);
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
        fprintf(o, "\n");
        torchtitan_lr_schedule(x, o);
        /* job_config.py v0.2.2: the seed is [debug] seed; [training] has none
           (manager.py rejects a field its dataclass lacks) */
        fprintf(o, "\n[debug]\nseed = %llu\n", (unsigned long long)t->seed);
    } else {
        fprintf(o, "\n[optimizer]\nimplementation = \"%s\"\n", torchtitan_optimizer(x));
    }
    /* job_config.py v0.2.2: [compile] enable (Training has no compile) */
    fprintf(o, "\n[compile]\nenable = %s\n", compile ? "true" : "false");

    /* ZeRO-3 is FSDP (parameters, gradients and optimizer state sharded over
       dp); ZeRO-0 is replication (DDP). */
    int shard = l->zero == 0 ? 1 : l->dp, replicate = l->zero == 0 ? l->dp : 1;
    fprintf(o, "\n[parallelism]\ndata_parallel_replicate_degree = %d\ndata_parallel_shard_degree = %d\n",
            replicate, shard);
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
        int64_t stages = (int64_t)l->pp * l->chunks;
        fprintf(o, "pipeline_parallel_layers_per_stage = %lld\n", (long long)(m->n_blocks / stages));
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
    if (l->recompute == RECOMPUTE_FULL && l->recompute_layers > 0)
        note(x, "recompute_layers %d (Megatron's %s method) has no torchtitan option: written as full "
                "recomputation of every block", l->recompute_layers,
             l->recompute_method == PLAN_RC_METHOD_UNIFORM ? "uniform" : "block");
    if (l->recompute == RECOMPUTE_SELECTIVE) {
        fprintf(o, "selective_ac_option = \"op\"\n");
        note(x, "recompute selective: planc recomputes the attention scores (Korthikanti); torchtitan's "
                "op-level selective checkpointing is the nearest, its memory differs");
    }
    torchtitan_fp8(x, o);   /* last: its table must not take the keys above */
}

/* FP8 (issue 27) as torchtitan's tables (torchtitan/config/job_config.py:
 * Float8 enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp,
 * recipe_name "tensorwise" | "rowwise" | "rowwise_with_gw_hp", filter_fqns;
 * MX for mxfp8; at v0.2.2 the tables [quantize.linear.float8] and
 * [quantize.linear.mx]), with the model converter that turns them on
 * ([model] converters, torchtitan_converters; formerly a note: the
 * [model] table is the flavor's). The output layer stays bf16: filter_fqns
 * ["output"]. */
static void torchtitan_fp8(const Ex *x, FILE *o)
{
    const PlanFp8 *f = &x->p->software.fp8;
    if (!plan_fp8_on(&x->p->software)) return;
    if (f->recipe == PLAN_FP8_BLOCKWISE || f->recipe == PLAN_FP8_DELAYED) {
        refuse(x, "fp8 %s: torchtitan 0.2's Float8Linear recipe_name is tensorwise, rowwise or "
                  "rowwise_with_gw_hp (job_config.py v0.2.2)", plan_fp8_recipe_names[f->recipe]);
        return;
    }
    fp8_fp32_note(x, "torchtitan");
    if (f->recipe == PLAN_FP8_MXFP8) {
        fprintf(o, "\n[quantize.linear.mx]\nrecipe_name = \"mxfp8\"\nfilter_fqns = [\"output\"]\n");
    } else {
        fprintf(o, "\n[quantize.linear.float8]\nrecipe_name = \"%s\"\nenable_fsdp_float8_all_gather = %s\n"
                   "precompute_float8_dynamic_scale_for_fsdp = %s\nfilter_fqns = [\"output\"]\n",
                plan_fp8_recipe_names[f->recipe], f->all_gather ? "true" : "false", f->all_gather ? "true" : "false");

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
        refuse(x, "fp8 %s: DeepSpeed has no FP8 training of its own (ds_config has no fp8 section); the "
                  "model's code would run it (Transformer Engine's te.fp8_autocast)",
               plan_fp8_recipe_names[w->fp8.recipe]);
}

/* planc's schedule (warm-up, cosine to lr/10 at train.steps) as DeepSpeed's
 * WarmupCosineLR (deepspeed/runtime/lr_schedules.py, v0.17.0: a ratio of
 * the optimizer's lr, linear warm-up from warmup_min_ratio when
 * warmup_type is "linear" (its default is "log"), then cosine to
 * cos_min_ratio at total_num_steps). WarmupDecayLR decays linearly and
 * WarmupLR not at all, so neither is planc's. Refused where
 * WarmupCosineLR cannot follow it: it warms up over max(2,
 * warmup_num_steps) steps and divides by total_num_steps -
 * warmup_num_steps. */
static void deepspeed_lr_schedule(const Ex *x, FILE *o)
{
    const Train *t = &x->p->train;
    if (t->warmup < 2)
        refuse(x, "train warmup %lld: DeepSpeed's WarmupCosineLR warms up over max(2, warmup_num_steps) steps "
                  "(lr_schedules.py), so planc's schedule cannot be written", (long long)t->warmup);
    if (t->steps <= t->warmup)
        refuse(x, "train steps %lld <= warmup %lld: DeepSpeed's WarmupCosineLR needs total_num_steps > "
                  "warmup_num_steps (it divides by their difference)", (long long)t->steps, (long long)t->warmup);
    fprintf(o, "  \"scheduler\": {\n    \"type\": \"WarmupCosineLR\",\n    \"params\": {\n"
               "      \"total_num_steps\": %lld,\n      \"warmup_min_ratio\": 0,\n"
               "      \"warmup_num_steps\": %lld,\n      \"warmup_type\": \"linear\",\n"
               "      \"cos_min_ratio\": ", (long long)t->steps, (long long)t->warmup);
    put_num(o, PLAN_MIN_LR_FACTOR);
    fprintf(o, "\n    }\n  }");
    note(x, "scheduler: WarmupCosineLR runs lr 0 at steps 0 and 1 and planc's step k - 2 through the warm-up "
            "(measured, DeepSpeed 0.17.0); from step warmup + 1 on, planc's cosine to lr/10 exactly");
}

/* The layouts DeepSpeed can run from a ds_config, with the rule that
 * refuses the others (v0.17.0):
 *  - DeepSpeedConfig counts data ranks as world / sequence_parallel_size
 *    unless the engine is given an mpu (runtime/config.py, then
 *    _batch_assertion: train_batch_size == micro_batch * grad_acc *
 *    world_size); TP needs a Megatron-DeepSpeed mpu, which no ds_config
 *    names, so tp > 1 is refused ("512 != 1 * 32 * 128");
 *  - runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with
 *    pipeline parallelism"; its PipelineModule's grid is the mpu, with
 *    data ranks world / pp;
 *  - its pipeline engine runs TrainSchedule (1F1B) only;
 *  - its only context parallelism is Ulysses (sequence_parallel_size). */
static void deepspeed_layout(const Ex *x)
{
    const Layout *l = &x->l;
    if (plan_cp(l) > 1 && plan_cp_comm(l) != PLAN_CP_ALL_TO_ALL)
        refuse(x, "cp %d, cp_comm %s: DeepSpeed's only context parallelism is Ulysses (sequence_parallel_size, "
                  "the all_to_all form): it has no ring, all-gather or hierarchical form",
               plan_cp(l), plan_cp_comm_name(plan_cp_comm(l)));
    if (l->tp > 1)
        refuse(x, "tp %d: DeepSpeedConfig counts data ranks as world / sequence_parallel_size without an mpu "
                  "(runtime/config.py _batch_assertion: train_batch_size == micro_batch * grad_acc * world_size); "
                  "tensor parallelism needs Megatron-DeepSpeed's mpu, which a ds_config cannot name", l->tp);
    if (l->pp > 1 && l->zero >= 2)
        refuse(x, "zero %d with pp %d: DeepSpeed's pipeline engine asserts \"ZeRO-2 and ZeRO-3 are incompatible "
                  "with pipeline parallelism\" (runtime/pipe/engine.py)", l->zero, l->pp);
    if (l->pp > 1 && l->schedule != SCHED_1F1B)
        refuse(x, "schedule %s: DeepSpeed's pipeline engine runs TrainSchedule, 1F1B only "
                  "(runtime/pipe/schedule.py)", plan_schedule_name(l->schedule));
    if (plan_cp(l) > 1 && l->pp > 1)
        refuse(x, "cp %d with pp %d: DeepSpeed's pipeline grid has no sequence-parallel dimension "
                  "(runtime/pipe/topology.py PipeDataParallelTopology: pipe x data)", plan_cp(l), l->pp);
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
    if (x->att && x->att->attn == ATTN_MLA)
        refuse(x, "kind mla: a ds_config names no model, and DeepSpeed has no multi-head latent attention of its "
                  "own to point to (the attention is the training script's)");
    deepspeed_layout(x);
    /* the batch identity DeepSpeedConfig checks: data ranks are dp (world /
       (pp x cp) through the pipeline grid or sequence_parallel_size) */
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
    /* DeepSpeed's context parallelism is Ulysses: the all-to-all form */
    if (plan_cp(l) > 1) fprintf(o, ",\n  \"sequence_parallel_size\": %d", plan_cp(l));
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
        fprintf(o, "\n    }\n  },\n");
        deepspeed_lr_schedule(x, o);
    }
    fprintf(o, "\n}\n");
    if (l->pp > 1) {
        note(x, "pp %d: DeepSpeed takes the pipeline in code: PipelineModule(layers, num_stages=%d); "
                "its schedule is 1F1B", l->pp, l->pp);
    }
    if (l->sequence_parallel == 1)
        note(x, "sequence_parallel: DeepSpeed has no Megatron-style sequence parallelism in ds_config");
    if (l->recompute != RECOMPUTE_NONE)
        note(x, "recompute %s: DeepSpeed recomputes where the model calls deepspeed.checkpointing.checkpoint",
             plan_recompute_name(l->recompute));
    if (m->dtype == DTYPE_FP32) note(x, "dtype fp32: neither bf16 nor fp16 is enabled");
    deepspeed_software(x);
}

bool plan_export_layout_ok(const Plan *p, const Layout *l, PlanExportTarget t, char *why, size_t len)
{
    bool refused = false;
    Ex x = { .p = p, .m = &p->model, .l = *l, .target = TARGETS[t], .version = VERSIONS[t][0], .why = why,
             .why_len = len, .refused = &refused };
    if (len) why[0] = 0;
    if (t == EXPORT_MEGATRON) megatron_layout(&x);
    if (t == EXPORT_TORCHTITAN) torchtitan_layout(&x);
    if (t == EXPORT_DEEPSPEED) deepspeed_layout(&x);
    return !refused;
}

const char *plan_export_target_name(PlanExportTarget t)
{
    return TARGETS[t];
}

const char *plan_export_stack(PlanExportTarget t)
{
    static const char *const stack[] = { "megatron-core", "torchtitan", "deepspeed" };   /* ORDER PlanExportTarget */
    return stack[t];
}

int plan_export(const Plan *p, PlanExportTarget t, const char *version, FILE *out, FILE *notes, char *why,
                size_t len)
{
    bool refused = false;
    Ex x = { .p = p, .m = &p->model, .notes = notes, .target = TARGETS[t],
             .version = version ? version : VERSIONS[t][0], .why = why, .why_len = len, .refused = &refused };
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
    train_script_notes(&x, t);
    switch (t) {
    case EXPORT_MEGATRON:   write_megatron(&x, out); break;
    case EXPORT_TORCHTITAN: write_torchtitan(&x, out); break;
    case EXPORT_DEEPSPEED:  write_deepspeed(&x, out); break;
    }
    return refused ? 2 : 0;
}
