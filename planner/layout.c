/*
 * layout.c: defaults for `auto` layout fields, layout validity, and the
 * split of the model's layers into pipeline chunks.
 *
 * This is the only place that decides which layers a stage runs; the
 * memory model, the cost model and the lowering all read plan_split().
 * It is also the only place that says which layouts are valid: every rule
 * is one predicate below, and plan_layout_check() asks them all; sema
 * (diagnostics on the fields a plan block fixes), the search, `check` and
 * the code generator ask the same functions and nothing else.
 */
#include "planner/layout.h"
#include "planner/fp8.h"
#include "planner/model.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

const char *plan_schedule_name(int s)
{
    switch (s) {   /* ORDER Schedule */
    case SCHED_GPIPE:       return "gpipe";
    case SCHED_1F1B:        return "1f1b";
    case SCHED_INTERLEAVED: return "interleaved";
    case SCHED_ZB_H1:       return "zb-h1";
    }
    return "auto";
}

const char *plan_recompute_name(int r)
{
    switch (r) {   /* ORDER Recompute */
    case RECOMPUTE_NONE:      return "none";
    case RECOMPUTE_SELECTIVE: return "selective";
    case RECOMPUTE_FULL:      return "full";
    case RECOMPUTE_SELECTIVE_OP: return "selective_op";
    }
    return "auto";
}

const char *plan_cp_comm_name(int c)
{
    static const char *const names[] = { "ring", "all_to_all", "all_gather",
                                         "hierarchical" };   /* ORDER PlanCpComm */
    return c >= 0 && c < PLAN_N_CP_COMMS ? names[c] : "ring";
}

const char *plan_recompute_module_name(int m)
{
    static const char *const names[] = { "core_attn", "layernorm", "mlp", "moe_act", "moe",
                                         "shared_experts", "mla_up_proj" };   /* ORDER PlanRecomputeModule */
    return m >= 0 && m < PLAN_N_RECOMPUTE_MODULES ? names[m] : "?";
}

void plan_recompute_describe(const Layout *L, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s", plan_recompute_name(L->recompute));
    if (L->recompute == RECOMPUTE_SELECTIVE && L->recompute_modules) {
        for (int m = 0, k = 0; m < PLAN_N_RECOMPUTE_MODULES && n < len; m++)
            if (L->recompute_modules & PLAN_RC_BIT(m))
                n += (size_t)snprintf(buf + n, len - n, "%s%s", k++ ? " " : " (modules ", plan_recompute_module_name(m));
        if (n < len) snprintf(buf + n, len - n, ")");
    } else if (L->recompute == RECOMPUTE_FULL && L->recompute_layers > 0 &&
               L->recompute_method == PLAN_RC_METHOD_UNIFORM) {
        snprintf(buf + n, len - n, " (every block, in units of %d)", L->recompute_layers);
    } else if (L->recompute == RECOMPUTE_FULL && L->recompute_layers > 0) {
        snprintf(buf + n, len - n, " (the first %d blocks of each chunk)", L->recompute_layers);
    } else if (L->recompute == RECOMPUTE_FULL && L->recompute_every > 0) {
        snprintf(buf + n, len - n, " (every %d%s block of each rank)", L->recompute_every,
                 L->recompute_every == 1 ? "st" : L->recompute_every == 2 ? "nd" : L->recompute_every == 3 ? "rd" : "th");
    }
}

int plan_recompute_unit(const Layout *L)
{
    bool uniform = L->recompute == RECOMPUTE_FULL && L->recompute_method == PLAN_RC_METHOD_UNIFORM;
    return uniform && L->recompute_layers > 1 ? L->recompute_layers : 1;
}

bool plan_recompute_partial(const Layout *L)
{
    bool block = L->recompute_layers > 0 && L->recompute_method != PLAN_RC_METHOD_UNIFORM;
    return L->recompute == RECOMPUTE_FULL && (block || L->recompute_every > 0);
}

bool plan_block_recomputed(const Layout *L, int chunk_block, int rank_block)
{
    if (L->recompute != RECOMPUTE_FULL) return false;
    if (L->recompute_method == PLAN_RC_METHOD_UNIFORM) return true;
    if (L->recompute_layers > 0) return chunk_block < L->recompute_layers;
    if (L->recompute_every > 0) return (rank_block + 1) % L->recompute_every == 0;
    return true;
}

Software plan_software_defaults(void)
{
    /* what planc's runtime does: DP reductions drain the backward bucket by
     * bucket (prt_zero_layer_done), pipeline sends are asynchronous
     * (runtime/par/pipe.c), ZeRO-1/2's all-gather follows the optimizer
     * step and ZeRO-3 prefetches the next layer (plan_param_overlap), TP
     * collectives are synchronous; gradients in fp32 for a bf16 model,
     * in the model's dtype otherwise (plan_grad_dtype), accumulated by the
     * weight-gradient GEMM itself (runtime/cuda/ops_gemm.cu: beta = 1 into
     * fp32), the loss from the logits in their own dtype (prt_xent_*) */
    return (Software){ .overlap_grad_reduce = true, .overlap_param_gather = PLAN_AUTO,
                       .overlap_p2p = true, .overlap_tp = false, .grad_accum_dtype = PLAN_AUTO,
                       .grad_accum_fusion = true, .cross_entropy_fusion = true,
                       /* MoE (issue 25): the runtime's all-to-alls are blocking
                        * (runtime/par/moe_ep.c), one per EP group (alltoall);
                        * the planner assumes uniform routing */
                       .overlap_moe_a2a = false, .moe_dispatcher = PLAN_MOE_ALLTOALL, .moe_imbalance = 1.0 };
}

double plan_moe_imbalance(const Software *w)
{
    return w->moe_imbalance > 1 ? w->moe_imbalance : 1.0;
}

int plan_warmup_extra(const Plan *p, const Layout *l)
{
    /* Megatron-Core, schedules.py (get_pp_rank_microbatches): "if
     * config.overlap_moe_expert_parallel_comm: num_warmup_microbatches += 1"
     * under interleaving, so that each steady step's forward and backward
     * are of different micro-batches; without a pipeline the combined
     * 1F1B (combined_1f1b_schedule_for_no_pipelining) runs F(0), then F(i+1)
     * with B(i): one warm-up forward, the same */
    if (!p->software.overlap_moe_a2a || plan_ep(l) <= 1 || !plan_model_has_moe(&p->model)) return 0;
    return l->schedule == SCHED_INTERLEAVED || (l->schedule == SCHED_1F1B && l->pp == 1) ? 1 : 0;
}

int plan_dp_cp(const Layout *l)
{
    /* <= the cluster's GPUs on a valid layout; an invalid one saturates */
    int64_t n = (int64_t)(l->dp > 0 ? l->dp : 1) * plan_cp(l);
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

int plan_expert_dp(const Layout *l)
{
    /* Megatron-Core folds cp into the expert groups: expert-DP = tp cp dp / (etp ep) */
    int64_t cell = (int64_t)plan_etp(l) * plan_ep(l), dense = (int64_t)l->tp * plan_dp_cp(l);
    return cell > 0 && dense % cell == 0 ? (int)(dense / cell) : 1;
}

PlanDtype plan_grad_dtype(const Plan *p)
{
    int g = p->software.grad_accum_dtype;
    if (g == DTYPE_FP32 || g == DTYPE_BF16 || g == DTYPE_FP16) return (PlanDtype)g;
    /* unset: bf16 gradients are accumulated in fp32 (Megatron-LM sets
     * accumulate_allreduce_grads_in_fp32 for --bf16; DeepSpeed's bf16
     * optimizer keeps fp32 gradients), fp16 ones in fp16 (the ZeRO paper's
     * 2 + 2 + 12 bytes, Megatron-LM's fp16 default) */
    return p->model.dtype == DTYPE_BF16 ? DTYPE_FP32 : p->model.dtype;
}

int plan_grad_bytes(const Plan *p)
{
    return plan_dtype_bytes(plan_grad_dtype(p));
}

bool plan_param_overlap(const Plan *p, int zero)
{
    int g = p->software.overlap_param_gather;
    return g == PLAN_AUTO ? zero == 3 : g != 0;
}

Layout plan_layout_auto(void)
{
    return (Layout){ .dp = PLAN_AUTO, .tp = PLAN_AUTO, .pp = PLAN_AUTO, .zero = PLAN_AUTO,
                     .micro_batch = PLAN_AUTO, .global_batch = PLAN_AUTO, .schedule = PLAN_AUTO,
                     .chunks = PLAN_AUTO, .recompute = PLAN_AUTO, .sequence_parallel = PLAN_AUTO,
                     .ep = PLAN_AUTO, .etp = PLAN_AUTO };
}

Layout plan_layout_defaults(const Plan *p)
{
    Layout l = p->has_layout ? p->layout : plan_layout_auto();
    int64_t gpus = p->cluster.nodes * p->cluster.gpus_per_node;
    if (l.tp == PLAN_AUTO) l.tp = 1;
    if (l.pp == PLAN_AUTO) l.pp = 1;
    if (l.cp == PLAN_AUTO || l.cp < 1) l.cp = 1;
    if (l.cp_comm == PLAN_AUTO || l.cp_comm < 0) l.cp_comm = PLAN_CP_RING;
    if (l.dp == PLAN_AUTO) {
        int64_t mp = (int64_t)l.tp * l.cp * l.pp;
        l.dp = mp > 0 && gpus >= mp ? (int)(gpus / mp) : 1;
    }
    if (l.zero == PLAN_AUTO) l.zero = 0;
    if (l.micro_batch == PLAN_AUTO) l.micro_batch = 1;
    if (l.global_batch == PLAN_AUTO) l.global_batch = (int64_t)l.dp * l.micro_batch;
    if (l.chunks == PLAN_AUTO)
        l.chunks = 1;
    if (l.schedule == PLAN_AUTO)
        l.schedule = l.chunks > 1 ? SCHED_INTERLEAVED : SCHED_1F1B;
    if (l.recompute == PLAN_AUTO) l.recompute = RECOMPUTE_NONE;
    if (l.sequence_parallel == PLAN_AUTO || l.tp == 1) l.sequence_parallel = 0;
    /* expert parallelism splits the experts of the mixtures: a dense
     * model has none, and runs with ep 1 whatever the plan block says */
    if (l.ep == PLAN_AUTO || l.ep < 1 || !plan_model_has_moe(&p->model)) l.ep = 1;
    /* expert TP: tp unless the plan says (Megatron's default); a dense
     * model has no experts to split */
    if (l.etp == PLAN_AUTO || l.etp < 1 || !plan_model_has_moe(&p->model)) l.etp = l.tp;
    return l;
}

int64_t plan_micro_batches(const Layout *l)
{
    int64_t per = (int64_t)l->dp * l->micro_batch;
    return per > 0 ? l->global_batch / per : 0;
}

/* ---- the rules of a layout (one place: see layout.h) ---------------- */

bool plan_refuse(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool set(int64_t v) { return v != PLAN_AUTO; }

static const char *model_name(const Model *m) { return m->name ? m->name : "?"; }

/* "layer at line 14" for a layer from a .plan file, "layer 3" for one built in C. */
static const char *layer_where(const Model *m, int i, char *buf, size_t len)
{
    if (m->layers[i].line > 0) snprintf(buf, len, "layer at line %d", m->layers[i].line);
    else snprintf(buf, len, "layer %d", i);
    return buf;
}

bool plan_rule_model(const Model *m, char *why, size_t len)
{
    char at[48];
    if (m->n_layers < 2 || m->layers[0].kind != LAYER_EMBEDDING ||
        m->layers[m->n_layers - 1].kind != LAYER_LM_HEAD)
        return plan_refuse(why, len, "model %s must start with an embedding and end with an lm_head",
                      model_name(m));
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->kind != LAYER_ATTENTION) continue;
        /* without head_dim the heads split the width; with it Q is heads x
         * head_dim wide, whatever the width */
        if (l->attn == ATTN_MLA) {
            /* the decoupled RoPE rotates pairs of each head's qk_rope_head_dim */
            if (l->heads < 1 || l->qk_rope_dim % 2 || l->kv_heads != l->heads)
                return plan_refuse(why, len, "MLA needs heads >= 1, kv_heads = heads and an even qk_rope_head_dim "
                                   "(%s)", layer_where(m, i, at, sizeof at));
            continue;
        }
        if (l->heads < 1 || (l->head_dim <= 0 && m->dim % l->heads))
            return plan_refuse(why, len, "heads %lld does not divide the model dim %lld (%s)", (long long)l->heads,
                          (long long)m->dim, layer_where(m, i, at, sizeof at));
        /* RoPE rotates pairs (2i, 2i+1) of each head */
        if (m->layers[0].position == POS_ROPE && plan_head_dim(m, l) % 2)
            return plan_refuse(why, len, "head dim %lld is odd; RoPE rotates pairs of a head's elements (%s)",
                          (long long)plan_head_dim(m, l), layer_where(m, i, at, sizeof at));
        if (l->kv_heads < 1 || l->heads % l->kv_heads)
            return plan_refuse(why, len, "kv_heads %lld does not divide heads %lld (%s)", (long long)l->kv_heads,
                          (long long)l->heads, layer_where(m, i, at, sizeof at));
    }
    return true;
}

bool plan_rule_tp_split(const Model *m, int tp, char *why, size_t len)
{
    if (!set(tp) || tp <= 1) return true;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *l = &m->layers[i];
        const char *what = NULL;
        int64_t n = 0;
        if (l->kind == LAYER_ATTENTION && l->heads % tp) what = "heads", n = l->heads;
        else if (l->kind == LAYER_ATTENTION && l->kv_heads % tp) what = "kv_heads", n = l->kv_heads;
        else if (l->kind == LAYER_MLP && l->hidden % tp) what = "mlp hidden", n = l->hidden;
        else if (l->kind == LAYER_MOE && l->hidden % tp) what = "moe hidden", n = l->hidden;
        else if (l->kind == LAYER_MOE && l->shared > 0 && plan_shared_hidden(l) % tp)
            what = "moe shared_hidden", n = plan_shared_hidden(l);   /* shared experts split over tp */
        if (what) {
            char at[48];
            return plan_refuse(why, len, "tp %d does not divide %s %lld (%s)", tp, what, (long long)n,
                          layer_where(m, i, at, sizeof at));
        }
    }
    return true;
}

bool plan_rule_sp_rows(const Model *m, int tp, int64_t micro_batch, int sp, char *why, size_t len)
{
    if (sp != 1 || !set(tp) || tp <= 1 || !set(micro_batch)) return true;
    /* rows mod tp from the factors: micro_batch (<= 2^40 in sema) times
     * seq (<= 2^24) may not fit in 64 bits, their residues (< 2^20) do */
    if ((micro_batch % tp) * (m->seq % tp) % tp == 0) return true;
    int64_t rows;
    if (__builtin_mul_overflow(micro_batch, m->seq, &rows))
        return plan_refuse(why, len, "sequence_parallel needs tp %d to divide the rows of a micro-batch "
                      "(micro_batch %lld x seq %lld)", tp, (long long)micro_batch, (long long)m->seq);
    return plan_refuse(why, len, "sequence_parallel needs tp %d to divide the %lld rows of a micro-batch "
                  "(micro_batch %lld x seq %lld)", tp, (long long)rows, (long long)micro_batch,
                  (long long)m->seq);
}

bool plan_rule_ep(const Model *m, int dp, int tp, int etp, int ep, char *why, size_t len)
{
    bool ep_set = set(ep) && ep > 1, etp_set = set(etp) && set(tp) && etp != tp;
    if (!ep_set && !etp_set) return true;
    int e = ep_set ? ep : 1;
    /* the expert layout re-factors a stage's tp x dp ranks as etp x ep x
     * expert-DP, etp fastest (Megatron-Core parallel_state.py,
     * initialize_model_parallel: expert_decoder_rank_generator(tp=etp,
     * ep=ep, dp=expert_data_parallel_size, order "tp-ep-dp-pp"), and
     * "world_size ... is not divisible by
     * expert_tensor_model_pipeline_parallel size" is its error). At etp =
     * tp that is: EP groups of ep consecutive DP ranks, ep divides dp. */
    if (!etp_set && set(dp) && dp % e)
        return plan_refuse(why, len, "ep %d does not divide dp %d", e, dp);
    if (etp_set && set(dp) && ((int64_t)tp * dp) % ((int64_t)etp * e))
        return plan_refuse(why, len, "ep %d x etp %d = %lld does not divide the tp %d x dp %d = %lld ranks of a stage",
                      e, etp, (long long)etp * e, tp, dp, (long long)tp * dp);
    char at[48];
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->kind == LAYER_MOE && l->experts % e)
            return plan_refuse(why, len, "experts %lld not a multiple of ep %d (%s)", (long long)l->experts, e,
                          layer_where(m, i, at, sizeof at));
        /* each routed expert's GEMMs split over etp as an MLP's over tp */
        if (l->kind == LAYER_MOE && etp_set && etp > 1 && l->hidden % etp)
            return plan_refuse(why, len, "etp %d does not divide moe hidden %lld (%s)", etp, (long long)l->hidden,
                          layer_where(m, i, at, sizeof at));
    }
    return true;
}

bool plan_rule_moe_overlap(const Software *w, int schedule, int pp, int recompute, char *why, size_t len)
{
    if (!w->overlap_moe_a2a) return true;
    /* Megatron-LM arguments.py (validate_args, with
     * --overlap-moe-expert-parallel-comm): "disable full recomputation
     * when enabling overlap_moe_expert_parallel_comm"; the combined 1F1B
     * runs without pipelining or under the interleaved schedule
     * (schedules.py: combined_1f1b_schedule_for_no_pipelining,
     * forward_backward_pipelining_with_interleaving) */
    if (recompute == RECOMPUTE_FULL)
        return plan_refuse(why, len, "overlap_moe_a2a does not run with recompute full (Megatron-Core: disable full "
                      "recomputation when enabling overlap_moe_expert_parallel_comm)");
    if (set(pp) && pp > 1 && set(schedule) && schedule != SCHED_INTERLEAVED)
        return plan_refuse(why, len, "overlap_moe_a2a with pp %d needs schedule interleaved (got %s; Megatron-Core's "
                      "combined 1F1B runs under the interleaved schedule)", pp, plan_schedule_name(schedule));
    if ((!set(pp) || pp == 1) && set(schedule) && schedule != SCHED_1F1B && schedule != SCHED_INTERLEAVED)
        return plan_refuse(why, len, "overlap_moe_a2a needs schedule 1f1b or interleaved (got %s)",
                      plan_schedule_name(schedule));
    return true;
}

bool plan_rule_tp_node(const Cluster *c, int tp, char *why, size_t len)
{
    bool rack = plan_nvlink_domain(c) > c->gpus_per_node;   /* nvlink_domain: NVLink across nodes */
    if (set(tp) && tp > plan_nvlink_domain(c))
        return plan_refuse(why, len, "tp %d is more than the %lld GPUs of %s of cluster %s (tensor "
                      "parallelism stays inside %s)", tp, (long long)plan_nvlink_domain(c),
                      rack ? "an NVLink domain" : "a node", c->name ? c->name : "?",
                      rack ? "an NVLink domain" : "a node");
    return true;
}

bool plan_rule_attention_kernel(const Device *d, int kernel, char *why, size_t len)
{
    if (kernel == PLAN_ATTN_FA3 && d->arch != 0 && d->arch != 90)
        return plan_refuse(why, len, "attention_kernel fa3: FlashAttention-3 runs on Hopper (sm_90) only, and device "
                      "%s is sm_%d; use fa2 or cudnn", d->name ? d->name : "?", d->arch);
    return true;
}

bool plan_rule_ranks(const Cluster *c, int dp, int tp, int cp, int pp, char *why, size_t len)
{
    int64_t gpus = c->nodes * c->gpus_per_node;   /* <= 2^30 */
    int64_t known = 1;
    int n_auto = 0;
    int par[4] = { dp, tp, cp, pp };
    for (int i = 0; i < 4; i++) {
        if (!set(par[i])) n_auto++;
        else if (__builtin_mul_overflow(known, (int64_t)par[i], &known)) known = INT64_MAX;   /* > any cluster */
    }
    const char *name = c->name ? c->name : "?";
    char cps[24] = "";
    if (set(cp) && cp > 1) snprintf(cps, sizeof cps, " x cp %d", cp);
    if (n_auto == 0 && known != gpus)
        return plan_refuse(why, len, "dp %d x tp %d%s x pp %d = %lld ranks, but cluster %s has %lld GPUs (%lld node%s x %lld)",
                      dp, tp, cps, pp, (long long)known, name, (long long)gpus, (long long)c->nodes,
                      c->nodes == 1 ? "" : "s", (long long)c->gpus_per_node);
    if (n_auto > 0 && (known < 1 || gpus % known))
        return plan_refuse(why, len, "the fixed parallel degrees multiply to %lld, which does not divide the %lld "
                      "GPUs of cluster %s", (long long)known, (long long)gpus, name);
    return true;
}

bool plan_rule_cp(const Model *m, int tp, int cp, int cp_comm, char *why, size_t len)
{
    if (!set(cp) || cp <= 1) return true;
    if (m->seq % (2 * (int64_t)cp))
        return plan_refuse(why, len, "cp %d cuts each sequence into 2 x cp = %d chunks (rank i holds chunks i and "
                      "%d-i, balancing causal attention), but seq %lld is not a multiple of %d",
                      cp, 2 * cp, 2 * cp - 1, (long long)m->seq, 2 * cp);
    /* the CP attention (prt_cp_attention_*, plan_cp_attention_numel) has
       one head size for q, k and v; MLA's are d_q and d_v */
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_ATTENTION && m->layers[i].attn == ATTN_MLA) {
            char at[48];
            return plan_refuse(why, len, "cp %d with kind mla: planc's context-parallel attention has one head size "
                               "for queries, keys and values, and MLA's differ (qk_nope_head_dim + qk_rope_head_dim, "
                               "v_head_dim) (%s)", cp, layer_where(m, i, at, sizeof at));
        }
    bool a2a = cp_comm == PLAN_CP_ALL_TO_ALL || cp_comm == PLAN_CP_HIERARCHICAL;
    if (!a2a) return true;
    int64_t tc = (int64_t)(set(tp) ? tp : 1) * cp;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        if (L->kind != LAYER_ATTENTION) continue;
        if (L->heads % tc)
            return plan_refuse(why, len, "cp_comm %s scatters the heads over tp x cp = %lld ranks, but the attention "
                          "layer has %lld query heads", plan_cp_comm_name(cp_comm), (long long)tc,
                          (long long)L->heads);
        if (L->kv_heads % tc)
            return plan_refuse(why, len, "cp_comm %s scatters the heads over tp x cp = %lld ranks, but the attention "
                          "layer has %lld key/value heads", plan_cp_comm_name(cp_comm), (long long)tc,
                          (long long)L->kv_heads);
    }
    return true;
}

bool plan_rule_pp_blocks(const Model *m, int pp, int chunks, char *why, size_t len)
{
    if (!set(pp)) return true;
    int64_t v = set(chunks) ? chunks : 1;
    if (pp > m->n_blocks)
        return plan_refuse(why, len, "pp %d is more than the %d transformer blocks of model %s", pp, m->n_blocks,
                      model_name(m));
    if ((int64_t)pp * v > m->n_blocks)
        return plan_refuse(why, len, "pp %d x chunks %lld = %lld is more than the %d transformer blocks of model %s",
                      pp, (long long)v, (long long)pp * v, m->n_blocks, model_name(m));
    if ((int64_t)pp * v > PLAN_MAX_VSTAGES)
        return plan_refuse(why, len, "pp %d x chunks %lld = %lld pipeline chunks is more than planc handles (%d)",
                      pp, (long long)v, (long long)pp * v, PLAN_MAX_VSTAGES);
    return true;
}

bool plan_rule_schedule(int schedule, int pp, int chunks, char *why, size_t len)
{
    if (set(chunks) && chunks > 1 && set(schedule) && schedule != SCHED_INTERLEAVED)
        return plan_refuse(why, len, "chunks %d needs schedule interleaved (got %s)", chunks,
                      plan_schedule_name(schedule));
    if (schedule == SCHED_INTERLEAVED && pp == 1)
        return plan_refuse(why, len, "schedule interleaved needs pp of at least 2");
    return true;
}

bool plan_rule_batch(int64_t global_batch, int dp, int64_t micro_batch, char *why, size_t len)
{
    if (!set(global_batch)) return true;
    int64_t unit;   /* <= 2^60 from sema; a product past 2^63 exceeds any global_batch */
    if (__builtin_mul_overflow((int64_t)(set(dp) ? dp : 1), set(micro_batch) ? micro_batch : 1, &unit))
        unit = INT64_MAX;
    if (unit <= 1 || global_batch % unit == 0) return true;
    if (set(dp) && set(micro_batch))
        return plan_refuse(why, len, "global_batch %lld is not a multiple of dp %d x micro_batch %lld = %lld",
                      (long long)global_batch, dp, (long long)micro_batch, (long long)unit);
    if (set(dp))
        return plan_refuse(why, len, "global_batch %lld is not a multiple of dp %d", (long long)global_batch, dp);
    return plan_refuse(why, len, "global_batch %lld is not a multiple of micro_batch %lld", (long long)global_batch,
                  (long long)micro_batch);
}

bool plan_rule_interleaved_batches(const Layout *l, char *why, size_t len)
{
    if (l->schedule != SCHED_INTERLEAVED || !set(l->pp) || l->pp <= 1 || !set(l->dp) ||
        !set(l->micro_batch) || !set(l->global_batch))
        return true;
    int64_t m = plan_micro_batches(l);
    if (m % l->pp)
        return plan_refuse(why, len, "interleaved 1F1B needs the %lld micro-batches to be a multiple of pp %d",
                      (long long)m, l->pp);
    return true;
}

bool plan_layout_check(const Plan *p, const Layout *l, char *why, size_t len)
{
    const Model *m = &p->model;
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->chunks < 1 || l->micro_batch < 1 || l->global_batch < 1)
        return plan_refuse(why, len, "dp, tp, pp, chunks, micro_batch and global_batch must be at least 1");
    if (l->zero < 0 || l->zero > 3) return plan_refuse(why, len, "zero %d is not 0..3", l->zero);
    return plan_rule_model(m, why, len) &&
           plan_rule_ranks(&p->cluster, l->dp, l->tp, plan_cp(l), l->pp, why, len) &&
           plan_rule_cp(m, l->tp, plan_cp(l), plan_cp_comm(l), why, len) &&
           plan_rule_tp_node(&p->cluster, l->tp, why, len) &&
           plan_rule_tp_split(m, l->tp, why, len) &&
           plan_rule_ep(m, l->dp, l->tp, plan_etp(l), plan_ep(l), why, len) &&
           plan_rule_moe_overlap(&p->software, l->schedule, l->pp, l->recompute, why, len) &&
           plan_rule_sp_rows(m, l->tp, l->micro_batch, l->sequence_parallel, why, len) &&
           plan_rule_batch(l->global_batch, l->dp, l->micro_batch, why, len) &&
           plan_rule_schedule(l->schedule, l->pp, l->chunks, why, len) &&
           plan_rule_pp_blocks(m, l->pp, l->chunks, why, len) &&
           plan_rule_interleaved_batches(l, why, len) &&
           plan_rule_fp8(p, &p->software.fp8, why, len);
}

/* Blocks per chunk of B blocks in n chunks: base, plus one for `extra`
 * chunks taken from the second chunk on, the first and the last chunk
 * last (they carry the embedding and the head). */
static void split_blocks(int B, int n, PlanChunk *out)
{
    int base = B / n, extra = B % n;
    for (int k = 0; k < n; k++) out[k].blocks = base;
    int lo = n > 2 ? 1 : 0, hi = n > 2 ? n - 2 : n - 1;
    for (int k = lo; k <= hi && extra > 0; k++) { out[k].blocks++; extra--; }
    for (int k = 0; k < n && extra > 0; k++)
        if (k < lo || k > hi) { out[k].blocks++; extra--; }
}

bool plan_split(const Model *m, int pp, int chunks, PlanChunk *out)
{
    int n = pp * chunks, B = m->n_blocks;
    if (n < 1 || B < n) return false;
    split_blocks(B, n, out);

    /* walk the layers: a block starts at each attention layer; layers
     * before the first block go to chunk 0, those after the last block
     * (final norm, head) to chunk n-1 */
    int k = 0, cnt = 0;
    out[0].first = 0;
    for (int i = 0; i < m->n_layers; i++) {
        if (m->layers[i].kind != LAYER_ATTENTION) continue;
        if (cnt == out[k].blocks && k < n - 1) {
            out[k].end = i;
            out[++k].first = i;
            cnt = 0;
        }
        cnt++;
    }
    out[k].end = m->n_layers;
    return k == n - 1;
}

bool plan_split_at(const Model *m, const int *block_first, int pp, int chunks, PlanChunk *out)
{
    int n = pp * chunks, B = m->n_blocks;
    if (n < 1 || B < n) return false;
    split_blocks(B, n, out);
    int b = 0;
    for (int k = 0; k < n; k++) {
        out[k].first = k ? block_first[b] : 0;
        b += out[k].blocks;
        out[k].end = k < n - 1 ? block_first[b] : m->n_layers;
    }
    return true;
}
