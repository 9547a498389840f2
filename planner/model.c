/*
 * model.c: parameters, FLOPs and activation bytes of every layer.
 *
 * This file counts; it never times. For each layer kind it lists the GEMMs
 * one GPU runs in the forward pass (the backward GEMMs are the two
 * transposed products of each), the elementwise kernels' HBM traffic, the
 * tensors kept for the backward pass and the tensor-parallel collectives.
 *
 * Sources:
 *  - FLOPs: Narayanan et al. 2021 ("Efficient Large-Scale Language Model
 *    Training on GPU Clusters Using Megatron-LM"), Appendix: every GEMM costs
 *    2mnk, the attention score (QK^T) and context (PV) GEMMs are counted,
 *    the logits GEMM is counted, backward = 2 x forward.
 *  - Activations: Korthikanti et al. 2022 ("Reducing Activation
 *    Recomputation in Large Transformer Models"), Sec. 4.1: per transformer
 *    layer sbh(34 + 5as/h) bytes with 16-bit activations and dropout;
 *    replicated parts 10sbh, tensor-parallel parts 24sbh + 5as^2b; here the
 *    same inventory is written per tensor so GQA, SwiGLU, RMSNorm and fp32
 *    fall out of the same lines.
 *  - Recomputation: what each of Megatron-Core's recompute_modules drops
 *    from that inventory and re-runs (megatron/core/transformer/
 *    transformer_config.py, recompute_modules, Megatron-LM main at
 *    002526d8), torchtitan's op-level save list (torchtitan/models/llama3/
 *    infra/parallelize.py, _save_list, torchtitan at 81c12433), full
 *    recomputation; resolve_redo is the one rule of what a cut keeps
 *    (act_kept) and re-runs (redo).
 *
 * Notation in comments: s sequence, b micro-batch, h width, a heads,
 * d head dim (h/a unless head_dim is given), h_q = a*d the query width
 * (= h unless head_dim), h_kv = kv_heads*d, s_k = min(s, W) the keys a
 * query is scored against (W the sliding window; s without one), f MLP width, V vocab (padded to a
 * multiple of vocab_multiple * t: the embedding and the head hold, and the
 * logits GEMM computes, the padded rows), t TP degree, e bytes per element
 * of the dtype, T = b*s tokens.
 */
#include "planner/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int64_t plan_vocab_padded(const Model *m, int tp)
{
    int64_t mult = (m->vocab_multiple > 0 ? m->vocab_multiple : 1) * (tp > 0 ? tp : 1);
    return (m->vocab + mult - 1) / mult * mult;
}

int plan_dtype_bytes(PlanDtype d)
{
    return d == DTYPE_FP32 ? 4 : 2;
}

int64_t plan_head_dim(const Model *m, const Layer *l)
{
    if (l->attn == ATTN_MLA) return l->qk_nope_dim + l->qk_rope_dim;   /* q and k; v: v_head_dim */
    if (l->head_dim > 0) return l->head_dim;
    return l->heads > 0 ? m->dim / l->heads : m->dim;
}

int64_t plan_attention_keys(const Model *m, const Layer *l)
{
    return l->window > 0 && l->window < m->seq ? l->window : m->seq;
}

double plan_rope_theta(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_EMBEDDING && m->layers[i].rope_theta > 0)
            return m->layers[i].rope_theta;
    return PLAN_ROPE_THETA_DEFAULT;
}

double plan_rope_local_theta(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_EMBEDDING) return m->layers[i].rope_local_theta;
    return 0;
}

bool plan_layer_rope_local(const Model *m, const Layer *l)
{
    return l->kind == LAYER_ATTENTION && l->window > 0 && plan_rope_local_theta(m) > 0;
}

RopeScaling plan_rope_scaling(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_EMBEDDING) return m->layers[i].rope_scaling;
    return (RopeScaling){ .kind = ROPE_SCALING_NONE, .factor = 1 };
}

double plan_norm_eps(const Model *m)
{
    return m->norm_eps > 0 ? m->norm_eps : PLAN_NORM_EPS_DEFAULT;
}

bool plan_act_gated(ActKind a)
{
    return a == ACT_SWIGLU || a == ACT_GEGLU;
}

bool plan_layer_same_shape(const Layer *a, const Layer *b)
{
    return a->kind == b->kind && a->heads == b->heads && a->kv_heads == b->kv_heads &&
           a->head_dim == b->head_dim && a->window == b->window && a->qk_norm == b->qk_norm &&
           a->softcap == b->softcap && a->query_scalar == b->query_scalar &&
           a->attn == b->attn && a->q_lora_rank == b->q_lora_rank && a->kv_lora_rank == b->kv_lora_rank &&
           a->qk_rope_dim == b->qk_rope_dim && a->qk_nope_dim == b->qk_nope_dim && a->v_head_dim == b->v_head_dim &&
           a->hidden == b->hidden && a->act == b->act && a->norm == b->norm && a->norm_pos == b->norm_pos &&
           a->bias == b->bias && a->qkv_bias_only == b->qkv_bias_only && a->tied == b->tied &&
           a->position == b->position && a->rope_theta == b->rope_theta &&
           a->experts == b->experts && a->top_k == b->top_k && a->shared == b->shared &&
           a->aux_loss == b->aux_loss && a->capacity_factor == b->capacity_factor &&
           a->score == b->score && a->topk_unnormalised == b->topk_unnormalised &&
           a->shared_hidden == b->shared_hidden && a->shared_gate == b->shared_gate &&
           a->route_groups == b->route_groups && a->route_top_groups == b->route_top_groups &&
           plan_routed_scale(a) == plan_routed_scale(b) && a->expert_bias == b->expert_bias &&
           a->route_group_score == b->route_group_score &&
           a->bias_update_rate == b->bias_update_rate &&
           a->fp8_exempt == b->fp8_exempt;
}

bool plan_model_dropout(const Model *m)
{
    return m->dropout > 0;
}

bool plan_model_has_moe(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_MOE) return true;
    return false;
}

bool plan_model_has_rmsnorm(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++) {
        LayerKind k = m->layers[i].kind;
        bool normed = k == LAYER_ATTENTION || k == LAYER_MLP || k == LAYER_MOE || k == LAYER_NORM;
        if (normed && m->layers[i].norm == NORM_RMSNORM) return true;
    }
    return false;
}

bool plan_model_has_rope(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_EMBEDDING) return m->layers[i].position == POS_ROPE;
    return false;
}

bool plan_model_has_gated(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *l = &m->layers[i];
        if ((l->kind == LAYER_MLP || l->kind == LAYER_MOE) && plan_act_gated(l->act)) return true;
    }
    return false;
}

const char *plan_layer_kind_name(LayerKind k)
{
    switch (k) {   /* ORDER LayerKind */
    case LAYER_EMBEDDING: return "embedding";
    case LAYER_ATTENTION: return "attention";
    case LAYER_MLP:       return "mlp";
    case LAYER_NORM:      return "norm";
    case LAYER_LM_HEAD:   return "lm_head";
    case LAYER_MOE:       return "moe";
    }
    return "?";
}

/* ---- exact parameter counts ----------------------------------------- */

static uint64_t mul(uint64_t a, uint64_t b, bool *ovf)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) { *ovf = true; return UINT64_MAX; }
    return r;
}

static uint64_t add(uint64_t a, uint64_t b, bool *ovf)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) { *ovf = true; return UINT64_MAX; }
    return r;
}

/* A weight split over t ranks (column or row parallel); Megatron pads an
 * uneven split, so a rank holds the ceiling. */
static uint64_t split(uint64_t n, int t)
{
    return (n + (uint64_t)t - 1) / (uint64_t)t;
}

static uint64_t norm_params(const Model *m, NormKind k)
{
    return (uint64_t)m->dim * (k == NORM_LAYERNORM ? 2u : 1u);   /* gain (+ bias) */
}

bool plan_layer_pre_norm(const Layer *l)
{
    return l->norm_pos != NORM_POS_POST;
}

bool plan_layer_post_norm(const Layer *l)
{
    bool sub = l->kind == LAYER_ATTENTION || l->kind == LAYER_MLP || l->kind == LAYER_MOE;
    return sub && l->norm_pos != NORM_POS_PRE;
}

/* The norms of an attention, MLP or MoE sublayer: one, or two (sandwich). */
static uint64_t sublayer_norms(const Layer *l)
{
    return (uint64_t)plan_layer_pre_norm(l) + (uint64_t)plan_layer_post_norm(l);
}

/* Parameters of a sublayer's norms: the gain (+ bias) of each, replicated
 * over TP (the pre-norm's, the post-norm's, or both under sandwich). */
static uint64_t sublayer_norm_params(const Model *m, const Layer *l)
{
    return sublayer_norms(l) * norm_params(m, l->norm);
}

int64_t plan_shared_hidden(const Layer *l)
{
    return l->shared_hidden > 0 ? l->shared_hidden : l->hidden;
}

double plan_routed_scale(const Layer *l)
{
    return l->routed_scale > 0 ? l->routed_scale : 1.0;
}

uint64_t plan_expert_bias_bytes(const Model *m)
{
    uint64_t n = 0, e = 0;
    bool on = false;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_MOE) {
            n++;
            e = (uint64_t)m->layers[i].experts > e ? (uint64_t)m->layers[i].experts : e;
            on = on || m->layers[i].expert_bias;
        }
    return on ? 2 * n * e * sizeof(float) : 0;   /* the program's BIAS and COUNTS, (MOE_LAYERS, MAX_EXPERTS) */
}

/* One MLP's weights (and biases) f wide without its norm, on one of tp
 * ranks: an MLP layer's, or one expert's of a mixture. */
static uint64_t ffn_params(const Model *m, const Layer *l, uint64_t f, int tp, bool *ovf)
{
    uint64_t h = (uint64_t)m->dim;
    uint64_t mats = plan_act_gated(l->act) ? 3u : 2u;             /* (gate,) up, down */
    uint64_t n = split(mul(mats, mul(h, f, ovf), ovf), tp);
    if (l->bias) n = add(n, add(split(mul(mats - 1u, f, ovf), tp), h, ovf), ovf);
    return n;
}

/* An MLP layer's or one routed expert's (hidden wide). */
static uint64_t expert_params(const Model *m, const Layer *l, int tp, bool *ovf)
{
    return ffn_params(m, l, (uint64_t)l->hidden, tp, ovf);
}

/* MLA's down projections, their biases (`bias true`: DeepSeek's
 * attention_bias on q_a_proj and kv_a_proj_with_mqa) and the latent norms
 * (of the layer's norm kind): replicated over TP, every rank holds them
 * whole (Megatron-Core's linear_q_down_proj / linear_kv_down_proj,
 * parallel_mode 'duplicated'). */
static uint64_t mla_replicated_params(const Layer *l, bool *ovf)
{
    uint64_t ql = (uint64_t)l->q_lora_rank, kv = add((uint64_t)l->kv_lora_rank, (uint64_t)l->qk_rope_dim, ovf);
    uint64_t per = l->norm == NORM_LAYERNORM ? 2u : 1u;          /* gain (+ bias) per latent element */
    uint64_t n = 0;
    if (ql) n = add(n, add(ql * per, l->bias ? ql : 0, ovf), ovf);                 /* q_a_layernorm, q_a bias */
    n = add(n, add(mul((uint64_t)l->kv_lora_rank, per, ovf), l->bias ? kv : 0, ovf), ovf); /* kv_a_layernorm, bias */
    return n;
}

/* Multi-head latent attention on one of tp ranks (transformers'
 * DeepseekV2Attention): the pre-norm; q_a_proj h x q_lora and
 * kv_a_proj_with_mqa h x (kv_lora + rope), replicated, with the latent
 * norms (mla_replicated_params); q_b_proj q_lora x a (nope + rope) (or
 * q_proj h x a (nope + rope) without q_lora) and kv_b_proj kv_lora x
 * a (nope + v), column-parallel by heads; o_proj a v x h, row-parallel,
 * its bias h (with `bias true`) whole on every rank as the MHA output's. */
static uint64_t mla_params(const Model *m, const Layer *l, int tp, bool *ovf)
{
    uint64_t h = (uint64_t)m->dim, a = (uint64_t)l->heads, ql = (uint64_t)l->q_lora_rank;
    uint64_t dq = add((uint64_t)l->qk_nope_dim, (uint64_t)l->qk_rope_dim, ovf);
    uint64_t kv = add((uint64_t)l->kv_lora_rank, (uint64_t)l->qk_rope_dim, ovf);
    uint64_t n = add(norm_params(m, l->norm), mla_replicated_params(l, ovf), ovf);
    if (ql) {
        n = add(n, mul(h, ql, ovf), ovf);                                        /* q_a_proj */
        n = add(n, split(mul(ql, mul(a, dq, ovf), ovf), tp), ovf);              /* q_b_proj */
    } else {
        n = add(n, split(mul(h, mul(a, dq, ovf), ovf), tp), ovf);               /* q_proj */
    }
    n = add(n, mul(h, kv, ovf), ovf);                                            /* kv_a_proj_with_mqa */
    uint64_t kv_b = mul(a, add((uint64_t)l->qk_nope_dim, (uint64_t)l->v_head_dim, ovf), ovf);
    n = add(n, split(mul((uint64_t)l->kv_lora_rank, kv_b, ovf), tp), ovf);     /* kv_b_proj */
    n = add(n, split(mul(mul(a, (uint64_t)l->v_head_dim, ovf), h, ovf), tp), ovf); /* o_proj */
    if (l->bias) n = add(n, h, ovf);                                             /* o_proj's bias */
    return n;
}

/* Parameters of layer l on one of tp ranks when the word table has V rows
 * (the real vocabulary, or the padded one that divides by tp). */
static uint64_t layer_params(const Model *m, const Layer *l, int tp, uint64_t V, bool *ovf)
{
    uint64_t h = (uint64_t)m->dim;
    switch (l->kind) {
    case LAYER_EMBEDDING: {
        /* word table V x h, vocab-parallel; learned positions s x h replicated */
        uint64_t n = split(mul(V, h, ovf), tp);
        if (l->position == POS_LEARNED) n = add(n, mul((uint64_t)m->seq, h, ovf), ovf);
        return n;
    }
    case LAYER_ATTENTION: {
        if (l->attn == ATTN_MLA) return mla_params(m, l, tp, ovf);
        uint64_t d = (uint64_t)plan_head_dim(m, l);
        uint64_t hq = mul((uint64_t)l->heads, d, ovf);              /* h_q = a d */
        uint64_t qkv_out = add(hq, mul(2u * (uint64_t)l->kv_heads, d, ovf), ovf); /* h_q + 2h_kv */
        uint64_t n = sublayer_norm_params(m, l);
        n = add(n, split(mul(h, qkv_out, ovf), tp), ovf);          /* QKV, column-parallel */
        n = add(n, split(mul(hq, h, ovf), tp), ovf);               /* output h_q -> h, row-parallel */
        /* biases: Q, K, V (split with their columns), and the output's h
         * unless `bias qkv` (Qwen2) */
        if (l->bias) n = add(n, add(split(qkv_out, tp), l->qkv_bias_only ? 0 : h, ovf), ovf);
        /* qk_norm: the q and k gains, d each, replicated over TP (every
         * rank's heads are normalised by the same two vectors) */
        if (l->qk_norm == QK_NORM_RMSNORM) n = add(n, 2 * d, ovf);
        /* qk_norm rmsnorm_projection: a gain per element of the q and k
         * projections (OLMo-2), split over TP with their heads */
        if (l->qk_norm == QK_NORM_RMSNORM_PROJ)
            n = add(n, split(hq, tp) + split(mul((uint64_t)l->kv_heads, d, ovf), tp), ovf);
        return n;
    }
    case LAYER_MLP:
        return add(sublayer_norm_params(m, l), expert_params(m, l, tp, ovf), ovf);
    case LAYER_MOE: {
        /* the norm(s), the router h x E (replicated, no bias), E routed
         * experts of an MLP's shape each (Mixtral) and S shared ones
         * shared_hidden wide (DeepSeek-MoE; Qwen2-MoE's one of its own
         * width), with the shared gate's h (replicated, no bias) */
        uint64_t n = add(sublayer_norm_params(m, l), mul(h, (uint64_t)l->experts, ovf), ovf);
        n = add(n, mul((uint64_t)l->experts, expert_params(m, l, tp, ovf), ovf), ovf);
        n = add(n, mul((uint64_t)l->shared, ffn_params(m, l, (uint64_t)plan_shared_hidden(l), tp, ovf), ovf), ovf);
        return add(n, l->shared_gate ? h : 0, ovf);
    }
    case LAYER_NORM:
        return norm_params(m, l->norm);
    case LAYER_LM_HEAD:
        return l->tied ? 0 : split(mul(V, h, ovf), tp);
    }
    return 0;
}

uint64_t plan_layer_expert_params(const Model *m, const Layer *l, int tp, bool *ovf)
{
    if (l->kind != LAYER_MOE) return 0;
    return mul((uint64_t)l->experts, expert_params(m, l, tp, ovf), ovf);
}

uint64_t plan_layer_params_ep(const Model *m, const Layer *l, int tp, int etp, int ep, bool *ovf)
{
    uint64_t n = plan_layer_params(m, l, tp, ovf);
    if (l->kind != LAYER_MOE) return n;
    if (etp < 1) etp = tp;
    if (ep <= 1 && etp == tp) return n;
    /* the routed experts split over etp (Megatron's expert TP), the rest
     * (norm, router, shared experts) as the dense layers over tp */
    uint64_t routed = plan_layer_expert_params(m, l, tp, ovf);
    uint64_t mine = plan_layer_expert_params(m, l, etp, ovf);
    return n - routed + mine / (uint64_t)(ep > 1 ? ep : 1);   /* experts % ep == 0 (plan_rule_ep) */
}

bool plan_model_active_params(const Model *m, uint64_t *active)
{
    /* a token passes the router, its top_k routed experts and the shared
     * ones: the total less the experts - top_k routed ones it skips (the
     * total memoised as model_params does; the skipped counted per
     * mixture, and only there: a dense model walks its kinds only) */
    bool ovf = false;
    uint64_t skipped = 0, last = 0;
    const Layer *prev = NULL;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->kind != LAYER_MOE) continue;
        if (!prev || !plan_layer_same_shape(l, prev))
            last = mul((uint64_t)(l->experts - l->top_k), expert_params(m, l, 1, &ovf), &ovf);
        prev = l;
        skipped = add(skipped, last, &ovf);
    }
    uint64_t total;
    if (!plan_model_params(m, &total) || ovf) return false;
    *active = total - skipped;
    return true;
}

uint64_t plan_layer_params(const Model *m, const Layer *l, int tp, bool *ovf)
{
    return layer_params(m, l, tp, (uint64_t)plan_vocab_padded(m, tp), ovf);
}

uint64_t plan_layer_params_real(const Model *m, const Layer *l, bool *ovf)
{
    return layer_params(m, l, 1, (uint64_t)m->vocab, ovf);
}

/* The whole model (every layer unsplit) with a word table of V rows. */
static bool model_params(const Model *m, uint64_t V, uint64_t *total)
{
    bool ovf = false;
    uint64_t n = 0, last[2] = { 0, 0 };
    for (int i = 0; i < m->n_layers; i++) {
        /* a layer like the one two back (the same sublayer of the previous
         * block) has its count: no need to redo the checked products */
        const Layer *a = &m->layers[i], *b = i >= 2 ? &m->layers[i - 2] : NULL;
        uint64_t k = b && plan_layer_same_shape(a, b) ? last[i % 2] : layer_params(m, a, 1, V, &ovf);
        last[i % 2] = k;
        n = add(n, k, &ovf);
    }
    *total = n;
    return !ovf;
}

bool plan_model_params(const Model *m, uint64_t *total)
{
    return model_params(m, (uint64_t)m->vocab, total);
}

bool plan_model_params_padded(const Model *m, int tp, uint64_t *total)
{
    return model_params(m, (uint64_t)plan_vocab_padded(m, tp), total);
}

/* ---- work of one layer ---------------------------------------------- */

static PlanGemm *gemm(PlanLayerWork *w, double m, double n, double k, double batch, bool core)
{
    PlanGemm *g = &w->gemm[w->n_gemm++];
    g->m = m; g->n = n; g->k = k; g->batch = batch; g->core = core; g->flash = false;
    w->flops_fwd += 2.0 * m * n * k * batch;          /* 2mnk FLOPs per GEMM */
    if (core) w->flops_core += 2.0 * m * n * k * batch;
    return g;
}

/* Elementwise kernels: `fwd` and `bwd` bytes of HBM traffic in `kf`
 * forward and `kb` backward launches. */
static void ew_n(PlanLayerWork *w, double fwd, double bwd, int kf, int kb, bool core)
{
    w->ew_fwd += fwd;
    w->ew_bwd += bwd;
    if (core) w->ew_core_fwd += fwd;
    w->ew_kernels += kf;
    w->ew_kernels_bwd += kb;
}

/* One elementwise kernel each way. */
static void ew(PlanLayerWork *w, double fwd, double bwd, bool core)
{
    ew_n(w, fwd, bwd, 1, 1, core);
}

/* The pre-norm of a sublayer (or the final norm) over N = T h r elements
 * (`r` is 1/t under sequence parallelism, else 1); returns the bytes
 * autograd keeps beyond the norm's input, which the caller's inventory
 * counts (e N).
 *  - fused (planc's runtime, TransformerEngine's LayerNormLinear,
 *    Inductor; and LayerNorm always: PyTorch's native_layer_norm is one
 *    kernel eager too): reads x, writes y; backward reads dy, x, writes dx.
 *  - RMSNorm unfused (c->unfused_norm: torchtitan's models/norms.py
 *    RMSNorm, Hugging Face's LlamaRMSNorm, PyTorch 2.5's composite
 *    rms_norm), per element, `cast` the two dtype casts of a 16-bit model
 *    (none in fp32): forward x.float() (e + 4), pow(2) (8), mean (reads 4;
 *    a row out), + eps and rsqrt (a row each: launches only), x * rstd (8),
 *    type_as (4 + e), * weight (2e): 20 + 2e (+ 2(e + 4) cast) bytes in 6
 *    (+ 2) kernels. Backward, autograd's kernels in reverse: * weight
 *    (dy w 2e, dy y 3e, its row sum e), type_as (e + 4), * rstd (dy rstd 8,
 *    dy x 12, its row sum 4), rsqrt (a row), mean (the expand / n, writes
 *    4), pow (x.pow(1) 8, * 2 8, * dy 12: PyTorch's pow_backward), the two
 *    paths' sum (12), x.float() (4 + e): 68 + 6e (+ 2(e + 4)) bytes in 12
 *    (+ 2) kernels. Kept: the fp32 x (pow's and the multiply's input, 4N)
 *    and the normalised y (the weight multiply's, e N) in place of x (e
 *    N): 4N more, in fp32 as in 16 bits (fp32: x itself and y). */
static double norm_work(PlanLayerWork *w, const PlanCut *c, NormKind kind, double Th, double e, double r)
{
    double N = Th * r;
    if (!c->unfused_norm || kind != NORM_RMSNORM) {
        ew(w, 2 * e * N, 3 * e * N, false);
        return 0;
    }
    bool cast = e < 4;
    double casts = cast ? 2 * (e + 4) : 0;
    ew_n(w, (20 + 2 * e + casts) * N, (68 + 6 * e + casts) * N, 6 + 2 * cast, 12 + 2 * cast, false);
    return 4 * N;
}

/* The norms of an attention, MLP or MoE sublayer at its norm_position
 * over Th = T h elements (r: 1/t under SP): each norm's traffic
 * (norm_work), and the bytes kept for the backward beyond the block's
 * input x: the pre-norm's output, the first linear's input (pre,
 * sandwich: e T h r; under post the linear reads x itself), into
 * *pre_out; and returned, what autograd keeps beyond that (norm_work's
 * eager bytes of each norm) plus the post-norm's input, the branch output
 * summed over TP (e T h r), and its fp32 statistics, rstd and LayerNorm's
 * mean (4 or 8 bytes a row): the program's a->po, a->prstd, a->pmean. */
static double sublayer_norms_work(PlanLayerWork *w, const PlanCut *c, const Layer *l, double Th, double T,
                                  double e, double r, double *pre_out)
{
    double kept = 0;
    *pre_out = 0;
    if (plan_layer_pre_norm(l)) {
        kept += norm_work(w, c, l->norm, Th, e, r);
        *pre_out = e * Th * r;
    }
    if (plan_layer_post_norm(l))
        kept += norm_work(w, c, l->norm, Th, e, r) + e * Th * r + (l->norm == NORM_LAYERNORM ? 8 : 4) * T * r;
    return kept;
}

/* RoPE on E elements of q or k (T h_q / t or T h_kv / t), `n` of them
 * (q and k: 2).
 *  - fused (planc's runtime, Megatron-Core's --apply-rope-fusion): one
 *    kernel over q and k, reads and writes each, 2e both ways.
 *  - unfused (c->unfused_rope): the rotate-half form of Megatron-Core's
 *    unfused _apply_rotary_pos_emb_bshd and Hugging Face's
 *    apply_rotary_pos_emb, t cos + rotate_half(t) sin, per q and per k:
 *    the negated half (e), the cat (2e), two multiplies (2e each; cos and
 *    sin are (s, d) tables), the add (3e): 10e in 5 kernels; backward
 *    dy sin and dy cos (2e each), the negation (e), the halves' cat (2e),
 *    the two paths' sum (3e): 10e in 5. (torchtitan's complex multiply,
 *    float - multiply - type_as, moves the same 20 bytes an element in
 *    bf16 in 3 kernels each way.) Autograd keeps cos and sin only: no
 *    activation. */
static void rope_work(PlanLayerWork *w, const PlanCut *c, double Eq, double Ek, double e)
{
    if (!c->unfused_rope) {
        ew(w, 2 * e * (Eq + Ek), 2 * e * (Eq + Ek), false);
        return;
    }
    ew_n(w, 10 * e * Eq, 10 * e * Eq, 5, 5, false);
    ew_n(w, 10 * e * Ek, 10 * e * Ek, 5, 5, false);
}

/* The MLP activation over F elements (rows x f/t): returns the bytes
 * autograd keeps beyond the inventory's (gate and up, or the input).
 *  - GeLU (and ReLU): one kernel eager too; reads x writes y, backward
 *    reads dy, x, writes dx.
 *  - gated, fused (planc's runtime, Megatron-Core's --bias-swiglu-fusion):
 *    reads gate and up, writes their product; backward reads dy, gate, up
 *    and writes both gradients.
 *  - gated, unfused (c->unfused_swiglu: torchtitan's w2(F.silu(w1(x)) *
 *    w3(x)), Hugging Face's act_fn(gate_proj(x)) * up_proj(x)): silu (2e)
 *    then the multiply (3e), 2 kernels; backward the multiply's two
 *    gradients (3e each) and silu_backward (reads dy and the gate, writes:
 *    3e), 3 kernels; the multiply keeps silu's output, e F more. */
static double act_work(PlanLayerWork *w, const PlanCut *c, bool gated, double F, double e)
{
    if (!gated) {
        ew(w, 2 * e * F, 3 * e * F, false);
        return 0;
    }
    if (!c->unfused_swiglu) {
        ew(w, 3 * e * F, 5 * e * F, false);
        return 0;
    }
    ew_n(w, 5 * e * F, 9 * e * F, 2, 3, false);
    return e * F;
}

/* The pre-norm's forward again (norm_work's forward traffic), in a redo. */
static void norm_redo(PlanRedo *x, double Th, double e, double r)
{
    x->ew += 2 * e * Th * r;
    x->kernels++;
}

/* Residual add with (fused) dropout: reads branch and residual, writes the
 * sum and a 1-byte mask; backward reads the gradient (and mask) and writes
 * the branch gradient. Megatron's bias-dropout-add fusion. */
static void residual_work(PlanLayerWork *w, double Th, double e, double r, bool dropout)
{
    ew(w, (3 * e + (dropout ? 1 : 0)) * Th * r, (2 * e + (dropout ? 1 : 0)) * Th * r, false);
}

/* The vocab-parallel cross-entropy of the head over N logits of e bytes:
 * its traffic, launches and what it keeps (act_*) and holds while it
 * runs (act_scratch).
 *  - fused (planc's runtime, program_template.c: prt_xent_max,
 *    prt_xent_sumexp, prt_xent_loss, prt_xent_bwd): the forward reads the
 *    logits twice (the row max; the sum of exponentials and the target's
 *    logit), the backward reads them and writes the gradient over them,
 *    2e bytes an element each way; it keeps the logits, e N.
 *  - on an fp32 copy (Megatron-LM's VocabParallelCrossEntropy,
 *    megatron/core/tensor_parallel/cross_entropy.py, on logits.float()):
 *    the copy (reads e, writes 4; none for fp32 logits), the row max
 *    (reads 4), the subtraction, exp and division in place (8 each), the
 *    row sum (reads 4): e + 36 bytes forward; backward the multiply by
 *    the loss gradient in place (8) and the cast back (reads 4, writes e):
 *    12 + e. It keeps the fp32 softmax, 4 N (Korthikanti et al. 2022 Sec.
 *    4.3: 4sbv), and the logits in their own dtype live beside their copy
 *    while it runs, e N. */
static void head_xent_work(PlanLayerWork *w, double N, double e, bool fp32_copy)
{
    if (!fp32_copy) {
        ew(w, e * N, 2 * e * N, false);      /* row max; backward: the gradient over the logits */
        ew(w, e * N, 0, false);              /* sum of exponentials, target logit */
        w->act_none = w->act_selective = w->act_full = e * N;
        return;
    }
    double cast = e < 4 ? e + 4 : 0;
    ew(w, cast * N, cast * N, false);        /* the fp32 copy; backward: the cast back */
    ew(w, 4 * N, 8 * N, false);              /* row max; backward: times the loss gradient */
    ew(w, 8 * N, 0, false);                  /* subtract the max */
    ew(w, 8 * N, 0, false);                  /* exp */
    ew(w, 4 * N, 0, false);                  /* row sum */
    ew(w, 8 * N, 0, false);                  /* divide: the softmax */
    w->act_none = w->act_selective = w->act_full = 4 * N;
    if (e < 4) w->act_scratch = e * N;
}

/* Positions are declared on the embedding layer. */
static PosKind model_position(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_EMBEDDING) return m->layers[i].position;
    return POS_NONE;
}

double plan_cut_tokens(const Model *m, const PlanCut *c)
{
    return (double)m->seq / (c->cp > 1 ? c->cp : 1);
}

PlanCpNumel plan_cp_attention_numel(int form, int cp, int cp_local, bool flash, double B, double Tl, double H,
                                    double Hkv, double D)
{
    PlanCpNumel n = { 0, 0, 0, 0, 0 };
    if (cp <= 1) return n;
    double T = Tl * cp, kv = B * Tl * 2 * Hkv * D;   /* one KV block of the local tokens */
    double qkv = B * T * (H + 2 * Hkv) * D / cp, out = B * T * H * D / cp;
    switch (form) {
    case PLAN_CP_ALL_TO_ALL: {
        /* head-split q, k, v and output, the probabilities of H / cp heads
         * over whole sequences; the backward their gradients */
        double probs = B * (H / cp) * T * T;
        n.saved = qkv + out + (flash ? 0 : probs);
        n.saved_f32 = flash ? B * (H / cp) * T : 0;
        n.buf_bwd = n.saved;
        break;
    }
    case PLAN_CP_ALL_GATHER:
        /* the probabilities of the local queries against every key; the
         * gathered K, V (and in the backward the full dK, dV) */
        n.saved = flash ? 0 : B * H * Tl * T;
        n.saved_f32 = flash ? B * H * Tl : 0;
        n.buf_fwd = B * T * 2 * Hkv * D;
        n.buf_bwd = 2 * n.buf_fwd + (flash ? 0 : Tl * T);   /* + one (b, h)'s score gradient */
        n.buf_bwd_f32 = n.buf_fwd;                            /* the full dK, dV */
        break;
    case PLAN_CP_HIERARCHICAL: {
        /* the all-to-all over a = cp_local ranks, then the ring over the
         * rest on a Tl tokens of H / a heads: its KV block is the same
         * B Tl 2 Hkv D elements, its scores block (a Tl)^2 */
        double a = cp_local >= 1 && cp_local <= cp ? cp_local : cp, Ta = a * Tl;
        double sc = flash ? 0 : Ta * Ta;   /* a score block (on chip when fused) */
        n.saved = qkv + out;
        n.saved_f32 = B * H * Tl;   /* the ring's log-sum-exp */
        n.buf_fwd = fmax(qkv, fmax(2 * kv + sc, out));   /* the qkv exchange, the ring, the output's: in turn */
        n.buf_bwd = 4 * kv + 2 * sc + qkv + out;
        n.buf_bwd_f32 = 2 * kv;     /* the ring's dK, dV blocks */
        break;
    }
    default: {   /* PLAN_CP_RING: the log-sum-exp; two KV blocks (+ two dKV backward) and a block's scores */
        double sc = flash ? 0 : Tl * Tl;
        n.saved = 0;
        n.saved_f32 = B * H * Tl;   /* the log-sum-exp, fp32 on both targets */
        n.buf_fwd = 2 * kv + sc;
        n.buf_bwd = 4 * kv + 2 * sc;
        n.buf_bwd_f32 = 2 * kv;     /* the two dK, dV blocks */
        break;
    }
    }
    return n;
}

/* Under cp > 1 the attention core is planrt's CP attention
 * (prt_cp_attention_fwd/bwd): its saved buffer replaces the scores or the
 * log-sum-exp in the kept activations (prt_act elements, e bytes each, as
 * the program allocates it), its own buffers (the larger pass's) are
 * buffers; also the bytes its transfers move (cost.c times them). */
static double cp_attention_work(const Model *m, const Layer *l, const PlanCut *c, double e, PlanLayerWork *w)
{
    double b = (double)c->micro_batch, Tl = plan_cut_tokens(m, c), t = c->tp;
    double H = (double)l->heads / t, Hkv = (double)l->kv_heads / t, D = (double)plan_head_dim(m, l);
    PlanCpNumel n = plan_cp_attention_numel(c->cp_comm, c->cp, c->cp_local, c->flash, b, Tl, H, Hkv, D);
    w->cp_buf_bytes = fmax(e * n.buf_fwd, e * (n.buf_bwd - n.buf_bwd_f32) + 4 * n.buf_bwd_f32);
    w->cp_kv_bytes = e * b * Tl * 2 * Hkv * D;
    w->cp_qkv_bytes = e * b * Tl * (H + 2 * Hkv) * D;
    w->cp_out_bytes = e * b * Tl * H * D;
    return e * n.saved + 4 * n.saved_f32;
}

static void attention_work(const Model *m, const Layer *l, const PlanCut *c,
                           bool dropout, PlanLayerWork *w)
{
    double b = (double)c->micro_batch, s = plan_cut_tokens(m, c), h = (double)m->dim;
    double t = c->tp, e = plan_dtype_bytes(m->dtype);
    double a = (double)l->heads, d = (double)plan_head_dim(m, l);
    double hq = a * d, hkv = (double)l->kv_heads * d;
    double sk = (double)plan_attention_keys(m, l);
    double T = b * s, r = c->sp ? 1.0 / t : 1.0;
    double bat = b * a / t;                  /* (sequence, head) pairs on this GPU */

    /* GEMMs (Narayanan et al. 2021, Appendix): QKV 2T h (h_q + 2h_kv)/t,
     * scores 2 b (a/t) s s_k d, context the same, output 2T h_q h/t. As
     * Narayanan counts the causal mask's upper half (s^2, not s^2/2), a
     * sliding window counts every query against W keys (s_k = min(s, W)):
     * the band a window-aware kernel (FlashAttention's window_size)
     * computes, the first W - 1 rows' shorter rows not subtracted. */
    gemm(w, T, (hq + 2 * hkv) / t, h, 1, false);
    /* The keys the kernel runs a query against: a fused kernel computes a
     * sliding window's band (FlashAttention's window_size); a math
     * attention — planc's runtime (prt_attention_*: T x T score buffers,
     * the band masked) and Megatron's unfused softmax alike — allocates,
     * computes and keeps every query against all s keys. Its GEMMs are
     * timed at that shape; the FLOPs counted stay the band's (the masked
     * part is run, not counted: MFU's numerator is the model's). */
    double skr = c->flash ? sk : (double)m->seq;
    gemm(w, s, skr, d, bat, true)->flash = c->flash;
    gemm(w, s, d, skr, bat, true)->flash = c->flash;
    double masked = 2 * 2.0 * s * (skr - sk) * d * bat;   /* FLOPs: the two core GEMMs' masked part */
    w->flops_fwd -= masked;
    w->flops_core -= masked;
    gemm(w, T, h, hq / t, 1, false);

    double norm_out;   /* the pre-norm's output, kept (0 under norm_position post) */
    double eager = sublayer_norms_work(w, c, l, T * h, T, e, r, &norm_out);
    if (c->flash) {
        /* one fused kernel (FlashAttention-2, Dao 2023, Algorithms 1-2):
         * forward reads Q, K, V and writes O and the fp32 log-sum-exp
         * (4 b a s / t); backward reads Q, K, V, O, dO and the log-sum-exp
         * and writes dQ, dK, dV. Scores, probabilities and the dropout
         * mask (regenerated from the RNG state) never reach HBM. */
        double qkvo = e * T * (2 * hq + 2 * hkv) / t, lse = 4 * bat * s;
        ew(w, qkvo + lse, qkvo + e * T * hq / t + lse + e * T * (hq + 2 * hkv) / t, true);
    } else {
        /* fused scale-mask-softmax: forward reads S writes P; backward reads
         * dP, P and writes dS (s x s keys per head: the whole buffers, a
         * window masked inside them). */
        ew(w, 2 * e * bat * s * skr, 3 * e * bat * s * skr, true);
        if (dropout)   /* attention dropout: P -> P' plus a 1-byte mask */
            ew(w, (2 * e + 1) * bat * s * skr, (2 * e + 1) * bat * s * skr, true);
        /* soft-capped scores (Gemma 2; prt_attention_scores_*): the cap is
         * applied as the softmax reads S (no pass of its own forward); the
         * backward recomputes S_raw = scale Q K^T into the spent P (the
         * score GEMM again: cost.c) and one kernel multiplies dS by
         * 1 - tanh^2(S_raw / cap), reading S_raw and dS, writing dS. Nothing
         * more is kept. FlashAttention-2 (softcap argument) caps on chip. */
        if (l->softcap > 0) ew_n(w, 0, 3 * e * bat * s * skr, 0, 1, true);
    }
    /* q/k norm (`qk_norm rmsnorm`, prt_qk_norm_*): forward reads q and k,
     * writes them normalised and their pre-norm copy; backward reads dy
     * and that copy, writes dx; it keeps the copy, e T (h_q + h_kv)/t, and
     * one fp32 rstd per head and token, 4 T (a + a_kv)/t (the program's
     * a->qkin and a->qkr). */
    double qk = l->qk_norm != QK_NORM_NONE ? T * (hq + hkv) / t : 0;
    double qk_kept = l->qk_norm == QK_NORM_RMSNORM ? e * qk + 4 * T * (a + (double)l->kv_heads) / t : 0;
    /* rmsnorm_projection (OLMo-2): the same copy, and an rstd per token for
     * q and one for k, 8 T, on every TP rank; their sums of squares, and
     * the backward's dots, span the TP shards: the program all-reduces a
     * row's two fp32 partial sums over TP, 8 T bytes, once each way (and
     * again in a rebuilt forward): tp_stat_bytes, timed by cost.c */
    if (l->qk_norm == QK_NORM_RMSNORM_PROJ) {
        qk_kept = e * qk + 8 * T;
        w->tp_stat_bytes = 8 * T;
    }
    if (qk > 0) ew(w, 3 * e * qk, 3 * e * qk, false);
    if (model_position(m) == POS_ROPE) rope_work(w, c, T * hq / t, T * hkv / t, e);
    residual_work(w, T * h, e, r, dropout);

    /* Stored activations (Korthikanti et al. 2022, Sec. 4.1, attention
     * block + its LayerNorm): replicated unless SP — norm input eTh, QKV
     * input eTh, dropout mask Th; split over t — Q eTh, K and V 2eT h_kv,
     * output-projection input eTh; core — softmax output e b a s^2,
     * dropout mask b a s^2, dropout output e b a s^2 (all /t). With e = 2,
     * dropout and h_kv = h this is 13sbh (11sbh + 2sbh LayerNorm) + 5as^2b.
     * With head_dim, Q and the output-projection input are e T h_q; a
     * sliding window keeps them whole, s x s per head (the math attention
     * masks the band inside them; a fused kernel keeps none). */
    double repl = (e + (dropout ? 1 : 0)) * T * h * r + norm_out + eager;
    double tpart = (e * T * hq + 2 * e * T * hkv + e * T * hq) / t + qk_kept;
    double core = (e + (dropout ? 1 + e : 0)) * bat * s * skr;
    if (c->flash) core = 4 * bat * s;   /* the log-sum-exp only (Q, K, V, O are in tpart) */
    if (c->cp > 1) core = cp_attention_work(m, l, c, e, w);   /* the CP form's saved tensors */
    w->act_none = repl + tpart + core;
    w->act_full = e * T * h * r;             /* the block input, 2sbh (Korthikanti) */
    /* Megatron-Core's recompute_modules (transformer_config.py): core_attn
     * drops the core's tensors and re-runs the score and context GEMMs and
     * the softmax (and dropout) kernels; layernorm drops the pre-norm's
     * output (the QKV input, e T h, /t under SP), re-running the norm */
    int mods = c->modules ? c->modules : PLAN_RC_BIT(PLAN_RC_CORE_ATTN);
    w->act_selective = (mods & PLAN_RC_BIT(PLAN_RC_LAYERNORM) ? repl - norm_out : repl) + tpart +
                       (mods & PLAN_RC_BIT(PLAN_RC_CORE_ATTN) ? 0 : core);
    PlanRedo *ca = &w->module[PLAN_RC_CORE_ATTN];
    ca->gemm[1] = ca->gemm[2] = 1;
    ca->flops = w->flops_core;
    ca->ew = w->ew_core_fwd;
    ca->kernels = w->ew_core_fwd > 0 ? 2 : 0;
    ca->softmax = true;
    if (norm_out > 0) norm_redo(&w->module[PLAN_RC_LAYERNORM], T * h, e, r);
    /* torchtitan's op-level selective AC (torchtitan/models/llama3/infra/
     * parallelize.py at 81c12433, _save_list and _custom_policy): a block
     * keeps its input (e T h, /t under SP) and the outputs of the ops in its save
     * list — aten.mm except every second one in the block, the SDPA kernel
     * (output and log-sum-exp), reduce_scatter — and recomputes the rest.
     * Its attention runs wq, wk, wv, wo as four mms: Q (1st) and V (3rd)
     * kept, K (2nd) and the output projection (4th) re-run, with the norm,
     * RoPE and the residual add; the output projection's all-reduce (or,
     * under SP, the norm's all-gather) runs again, the reduce-scatter's
     * output is kept. Dropout masks are not in the list: redrawn. */
    w->act_op = e * T * h * r + e * T * (2 * hq + hkv) / t + 4 * bat * s + (c->sp ? e * T * h * r : 0);
    PlanRedo *op = &w->op;
    op->gemm[0] = hkv / (hq + 2 * hkv);
    op->gemm[3] = 1;
    op->flops = 2 * T * h * hkv / t + 2 * T * hq * h / t;
    norm_redo(op, T * h, e, r);
    if (model_position(m) == POS_ROPE) { op->ew += 2 * e * T * (hq + hkv) / t; op->kernels++; }
    op->ew += 3 * e * T * h * r;             /* the residual add */
    op->kernels++;
    if (c->sp) op->tp.ag = 1;
    else op->tp.ar = 1;
    /* zb-h1 keeps, from B to W, the gradients of the QKV output (e T
     * (h_q + 2h_kv)/t) and of the block output (e T h, all rows): the W
     * pass's GEMM inputs beside the forward's (codegen's slot: dh, dy),
     * and the pre-norm's fp32 gain (+ bias) gradients, kept aside from
     * B to W so B opens no gradient bucket (codegen's gln), the q/k
     * norm gains' with them */
    double qk_proj_gains = l->qk_norm == QK_NORM_RMSNORM_PROJ ? (hq + hkv) / t : 0;   /* OLMo-2's: split */
    w->act_split = e * T * ((hq + 2 * hkv) / t + h) +
                   4.0 * ((double)(plan_layer_norm_params(m, l) + plan_layer_qk_norm_params(m, l)) + qk_proj_gains);
    w->recomputed = true;
    w->tp_bytes = e * T * h;
}

/* Multi-head latent attention (DeepSeek-V2 Sec. 2.1; transformers'
 * DeepseekV2Attention; Megatron-Core's MLASelfAttention, megatron/core/
 * transformer/multi_latent_attention.py at 003b4ce2). Notation beyond the
 * file's: a heads, n qk_nope_head_dim, r qk_rope_head_dim, d_q = n + r the
 * query/key head, d_v v_head_dim, c_q q_lora_rank (0: none), c_kv
 * kv_lora_rank.
 * TP rule (planc's): the pre-norm's output is all the sublayer needs whole
 * (the MHA's all-reduce or SP all-gather and reduce-scatter, of e T h, as
 * sublayer_tp_colls says); every rank runs the down projections q_a
 * (h -> c_q) and kv_a (h -> c_kv + r) on all T rows with replicated
 * weights, the up projections q_b (c_q -> a d_q / t; or q_proj h ->
 * a d_q / t) and kv_b (c_kv -> a (n + d_v) / t) column-split by heads,
 * o_proj (a d_v / t -> h) row-split. In the backward each rank's heads
 * give a partial gradient of the latents, so the down projections' and
 * latent norms' gradients are summed over TP once a step
 * (plan_layer_tp_partial_params) and the input gradient is all-reduced
 * as the MHA's. */
static void mla_work(const Model *m, const Layer *l, const PlanCut *c, bool dropout, PlanLayerWork *w)
{
    double b = (double)c->micro_batch, s = plan_cut_tokens(m, c), h = (double)m->dim;
    double t = c->tp, e = plan_dtype_bytes(m->dtype);
    double a = (double)l->heads, n = (double)l->qk_nope_dim, rd = (double)l->qk_rope_dim;
    double dq = n + rd, dv = (double)l->v_head_dim;
    double cq = (double)l->q_lora_rank, ckv = (double)l->kv_lora_rank;
    double sk = (double)plan_attention_keys(m, l);
    double T = b * s, r = c->sp ? 1.0 / t : 1.0;
    double bat = b * a / t;
    double qo = a * dq / t, kvo = a * (n + dv) / t;   /* the up projections' outputs per row */

    /* GEMMs, 2mnk each (Narayanan et al. 2021 counting): q_a 2 T h c_q
     * and kv_a 2 T h (c_kv + r) on every rank, q_b 2 T c_q a d_q / t (or
     * q_proj 2 T h a d_q / t), kv_b 2 T c_kv a (n + d_v) / t, scores
     * 2 b (a/t) s s_k d_q, context 2 b (a/t) s s_k d_v, o_proj
     * 2 T a d_v h / t. Index 0-1 the query's (one without c_q), then kv_a,
     * kv_b, the core's two, o_proj. */
    if (cq > 0) gemm(w, T, cq, h, 1, false);
    gemm(w, T, qo, cq > 0 ? cq : h, 1, false);
    int gq = w->n_gemm;                          /* kv_a's index */
    gemm(w, T, ckv + rd, h, 1, false);
    gemm(w, T, kvo, ckv, 1, false);
    gemm(w, s, sk, dq, bat, true)->flash = c->flash;
    gemm(w, s, dv, sk, bat, true)->flash = c->flash;
    gemm(w, T, h, a * dv / t, 1, false);

    /* the pre-norm, the latent norms (of the layer's norm kind: DeepSeek's
     * RMSNorm), the core, RoPE on the queries' rotated part (T a r / t)
     * and the one shared key part (T r), the assembly of each head's q
     * and k from their parts (reads and writes T a d_q / t each; the
     * backward splits the gradients: the same), the residual add */
    double eager = norm_work(w, c, l->norm, T * h, e, r);
    double lat = cq + ckv;
    eager += norm_work(w, c, l->norm, T * lat, e, 1);
    if (c->flash) {
        double qkvo = e * T * a * (2 * dq + 2 * dv) / t, lse = 4 * bat * s;
        ew(w, qkvo + lse, qkvo + e * T * a * dv / t + lse + e * T * a * (2 * dq + dv) / t, true);
    } else {
        ew(w, 2 * e * bat * s * sk, 3 * e * bat * s * sk, true);
        if (dropout) ew(w, (2 * e + 1) * bat * s * sk, (2 * e + 1) * bat * s * sk, true);
    }
    rope_work(w, c, T * a * rd / t, T * rd, e);
    ew(w, 2 * e * T * 2 * qo, 2 * e * T * 2 * qo, false);
    residual_work(w, T * h, e, r, dropout);

    /* Stored activations, the MHA inventory (Korthikanti et al. 2022 Sec.
     * 4.1) with MLA's tensors as planc's op keeps them (prt_mla_kept,
     * runtime/ops/mla.c; the program's a->h, a->a, a->att, a->mr):
     * replicated unless SP — the pre-norm's input and output (the down
     * projections' and q_proj's input), the residual dropout mask; on
     * every rank whole — the down projections' outputs, e T (c_q + c_kv +
     * r), the kv latent again apart from its key part and both latents
     * normalised, e T (c_q + 2 c_kv), and the latent norms' fp32 rstd, 4 T
     * each (both kept with or without c_q); split over t — each head's q,
     * k and v zero-padded to D = max(d_q, d_v) (the attention op's one head
     * size), e T a 3D / t, the padded output, e T a D / t, and the o_proj
     * input, e T a d_v / t; the core as the MHA's, T x T scores (a math
     * attention runs the whole square: attention_work). */
    double D = fmax(dq, dv);
    double repl = (2 * e + (dropout ? 1 : 0)) * T * h * r + eager;
    double latent = e * T * (2 * cq + 3 * ckv + rd) + 4 * 2 * T;
    double up = e * T * a * 3 * D / t;                 /* Q, K, V: what mla_up_proj drops */
    double tpart = up + e * T * a * (D + dv) / t;
    double skr = c->flash ? sk : (double)m->seq;
    double core = (e + (dropout ? 1 + e : 0)) * bat * s * skr;
    if (c->flash) core = 4 * bat * s;
    w->act_none = repl + latent + tpart + core;
    w->act_full = e * T * h * r;
    /* recompute_modules: core_attn and layernorm as the MHA's; mla_up_proj
     * (Megatron-Core's recompute_up_proj: CheckpointWithoutOutput around
     * qkv_up_proj_and_rope_apply, its outputs discarded once the core has
     * run) drops Q, K, V and re-runs the up projections and RoPE from the
     * kept latents before the core's backward */
    int mods = c->modules ? c->modules : PLAN_RC_BIT(PLAN_RC_CORE_ATTN);
    double norm_out = e * T * h * r;
    w->act_selective = (mods & PLAN_RC_BIT(PLAN_RC_LAYERNORM) ? repl - norm_out : repl) + latent +
                       (mods & PLAN_RC_BIT(PLAN_RC_MLA_UP_PROJ) ? tpart - up : tpart) +
                       (mods & PLAN_RC_BIT(PLAN_RC_CORE_ATTN) ? 0 : core);
    PlanRedo *ca = &w->module[PLAN_RC_CORE_ATTN];
    int gc = w->n_gemm - 3;                      /* the scores GEMM's index */
    ca->gemm[gc] = ca->gemm[gc + 1] = 1;
    ca->flops = w->flops_core;
    ca->ew = w->ew_core_fwd;
    ca->kernels = w->ew_core_fwd > 0 ? 2 : 0;
    ca->softmax = true;
    norm_redo(&w->module[PLAN_RC_LAYERNORM], T * h, e, r);
    PlanRedo *uq = &w->module[PLAN_RC_MLA_UP_PROJ];
    uq->gemm[gq - 1] = uq->gemm[gq + 1] = 1;     /* q_b (or q_proj) and kv_b */
    uq->flops = 2 * T * qo * (cq > 0 ? cq : h) + 2 * T * kvo * ckv;
    uq->ew = 2 * e * (T * a * rd / t + T * rd) + 2 * e * T * 2 * qo;   /* RoPE, the q and k assembly */
    uq->kernels = 2;
    /* torchtitan's op-level save list has no MLA (its deepseek_v3 model is
       another code path): counted as full recomputation of the block */
    w->act_op = e * T * h * r;
    w->op.whole = true;
    w->op.flops = w->flops_fwd;
    /* zb-h1 keeps from B to W, as planc's program splits it (its MLA op
       computes the input and weight gradients in one pass, so B runs all
       of it but o_proj's weight GEMM): o_proj's output gradient, e T h,
       the pre-norm's fp32 gain gradients and the fp32 gradients of this
       rank's MLA weights but o_proj's (codegen's a->dy, gln, a->gml) */
    bool ovf = false;   /* widths <= 2^20 each (sema): no product wraps */
    double aside = (double)(mla_params(m, l, c->tp, &ovf) - norm_params(m, l->norm)) -
                   a * dv * h / t - (l->bias ? h : 0);
    w->act_split = e * T * h + 4.0 * ((double)norm_params(m, l->norm) + aside);
    w->recomputed = true;
    w->tp_bytes = e * T * h;
}

static void mlp_work(const Model *m, const Layer *l, const Layer *prev,
                     const PlanCut *c, bool dropout, PlanLayerWork *w)
{
    double b = (double)c->micro_batch, s = plan_cut_tokens(m, c), h = (double)m->dim;
    double t = c->tp, e = plan_dtype_bytes(m->dtype);
    double f = (double)l->hidden, T = b * s, r = c->sp ? 1.0 / t : 1.0;
    bool glu = plan_act_gated(l->act);

    /* GEMMs: up (and gate, fused) 2T h f/t each, down 2T f h/t. */
    gemm(w, T, (glu ? 2 : 1) * f / t, h, 1, false);
    gemm(w, T, h, f / t, 1, false);

    double norm_out;   /* the pre-norm's output, kept (0 under norm_position post) */
    double eager = sublayer_norms_work(w, c, l, T * h, T, e, r, &norm_out);
    eager += act_work(w, c, glu, T * f / t, e);   /* GeLU, or SwiGLU / GeGLU */
    residual_work(w, T * h, e, r, dropout);

    /* Stored (Korthikanti Sec. 4.1, MLP + LayerNorm): replicated — norm
     * input eTh, up input eTh, dropout mask Th; split — activation input
     * eTf (SwiGLU: gate and up, 2eTf), down input eTf. f = 4h: 21sbh. */
    double repl = (e + (dropout ? 1 : 0)) * T * h * r + norm_out + eager;
    double tpart = ((glu ? 2 : 1) * e * T * f + e * T * f) / t;
    w->act_none = repl + tpart;
    /* recompute_modules: mlp drops what the MLP keeps inside (tpart) and
     * re-runs its GEMMs, activation and TP collectives from its input (the
     * norm's output, which it keeps: Megatron checkpoints self.mlp, after
     * pre_mlp_layernorm); layernorm drops the norm's output */
    int mods = c->modules ? c->modules : PLAN_RC_BIT(PLAN_RC_CORE_ATTN);
    bool ln = mods & PLAN_RC_BIT(PLAN_RC_LAYERNORM), whole = mods & PLAN_RC_BIT(PLAN_RC_MLP);
    w->act_selective = ln && whole ? repl - norm_out : ln ? repl - norm_out + tpart : whole ? repl : repl + tpart;
    PlanRedo *mr = &w->module[PLAN_RC_MLP];
    mr->gemm[0] = mr->gemm[1] = 1;
    mr->flops = w->flops_fwd;
    mr->ew = (glu ? 3 : 2) * e * T * f / t;  /* the activation, as mlp's ew above */
    mr->kernels = 1;
    mr->act_rows = T;
    mr->tp = c->sp ? (PlanTpColls){ 0, 1, 1 } : (PlanTpColls){ 1, 0, 0 };
    if (norm_out > 0) norm_redo(&w->module[PLAN_RC_LAYERNORM], T * h, e, r);
    /* torchtitan's op-level AC (attention_work says the rule): the MLP's
     * mms are the block's 5th, 6th (and 7th): gated, w1 (gate) and w2
     * (down, its partial sums e T h) kept, w3 (up, half of planc's fused
     * GEMM) re-run; ungated, the up projection kept, the down re-run. The
     * norm, the activation and the residual add re-run, as the all-reduce
     * (SP: the norm's all-gather; the reduce-scatter's output kept). The
     * MLP's input is rebuilt from the block's (kept by the attention). */
    w->act_op = e * T * f / t + (glu ? e * T * h : 0) + (c->sp ? e * T * h * r : 0);
    PlanRedo *op = &w->op;
    if (glu) { op->gemm[0] = 0.5; op->flops = 2 * T * h * f / t; }
    else     { op->gemm[1] = 1;   op->flops = 2 * T * f * h / t; }
    norm_redo(op, T * h, e, r);
    op->ew += (glu ? 3 : 2) * e * T * f / t + 3 * e * T * h * r;   /* activation, residual add */
    op->kernels += 2;
    op->act_rows = T;
    if (c->sp) op->tp.ag = 1;
    else op->tp.ar = 1;
    /* under full recomputation a block keeps only its input, at the
     * attention sublayer; a lone MLP keeps its own */
    w->act_full = (prev && prev->kind == LAYER_ATTENTION) ? 0 : e * T * h * r;
    /* zb-h1: the up projection's output gradient (e T f/t, gated 2f) and
     * the block output's (e T h), kept from B to W (codegen's slot: dh, dy),
     * and the pre-norm's fp32 gradients (gln), as attention's */
    w->act_split = e * T * ((glu ? 2 : 1) * f / t + h) + 4.0 * (double)plan_layer_norm_params(m, l);
    w->recomputed = true;
    w->tp_bytes = e * T * h;
}

double plan_moe_capacity(const Model *m, const Layer *l)
{
    if (l->kind != LAYER_MOE || !(l->capacity_factor > 0)) return 0;
    return ceil(l->capacity_factor * (double)m->seq * (double)l->top_k / (double)l->experts);
}

double plan_moe_rows(const Model *m, const Layer *l, int64_t micro_batch)
{
    double b = (double)micro_batch, C = plan_moe_capacity(m, l);
    double routed = b * (double)m->seq * (double)l->top_k;      /* top_k rows per token */
    /* with a capacity each expert keeps at most C of a sequence's s k / E
     * rows (uniform routing) and runs those only: the runtime drops the
     * rest and pads nothing (prt_moe_route) */
    return C > 0 ? fmin(routed, b * (double)l->experts * C) : routed;
}

/* A mixture of experts (the agreed semantics of issue 17, which the
 * runtime's moe layer runs): pre-norm, router GEMM T x E over the whole
 * micro-batch on every TP rank (its input gathered over TP as the MLP's),
 * softmax over the top_k logits, R rows dispatched (all-to-all inside the
 * EP group), each of the E/ep local experts a grouped GEMM of R ep / E
 * rows under uniform routing (the planner's assumption: the runtime runs
 * what it receives), split over tp like an MLP, the rows combined back
 * (all-to-all) and summed with their weights, S shared experts on all T
 * tokens, the residual. R = T top_k, or with a capacity C per expert and
 * sequence min(T top_k, b E C) kept rows (plan_moe_rows). */
static void moe_work(const Model *m, const Layer *l, const Layer *prev, const PlanCut *c,
                     bool dropout, PlanLayerWork *w)
{
    double b = (double)c->micro_batch, s = plan_cut_tokens(m, c), h = (double)m->dim;
    double t = c->tp, e = plan_dtype_bytes(m->dtype), ep = c->ep > 1 ? c->ep : 1;
    double f = (double)l->hidden, T = b * s, r = c->sp ? 1.0 / t : 1.0;
    double E = (double)l->experts, k = (double)l->top_k, S = (double)l->shared;
    double fs = (double)plan_shared_hidden(l), G = l->shared_gate ? 1 : 0;   /* shared width, gate */
    /* expert TP (issue 25): each routed expert split over et ranks. At et
     * = t every TP rank routes the whole micro-batch (issue 17's
     * semantics); with et < t each rank routes its own T/t rows (sequence
     * parallel, as Megatron-Core requires for MoE with tp > 1) gathered
     * over its et expert-TP ranks: T et / t tokens */
    double et = c->etp >= 1 ? c->etp : t, Tr = T * et / t;
    double C = plan_moe_capacity(m, l);
    /* under cp each rank routes its own seq / cp tokens of a sequence */
    double q = (double)m->seq / s;
    double R = plan_moe_rows(m, l, c->micro_batch) * et / t / q, Ru = Tr * k;   /* rows run, rows routed */
    /* the busiest EP rank (Software.moe_imbalance) receives imb x the
     * mean rows, at most what its experts' capacity keeps; the step waits
     * for it, so its rows are the GEMMs' and the all-to-alls' (at ep 1
     * every rank holds every expert: no rank is busier) */
    double imb = ep > 1 && c->imbalance > 1 ? c->imbalance : 1;
    double Rb = R * imb;
    if (C > 0) Rb = fmin(Rb, b * E * C * et / t / q);
    /* rows the experts' buffers hold: every routed row's place on this
     * rank (the runtime sizes them N k), under ep > 1 the rows that arrived */
    double Ra = ep > 1 ? Rb : Ru;
    double up = plan_act_gated(l->act) ? 2 : 1;

    /* GEMMs: router 2T h E (fp32 logits, counted as a GEMM of the model
     * dtype); the local experts as grouped GEMMs (Megatron-Core's
     * GroupedMLP): E/ep of Rb ep/E rows each, up (gate fused) and down,
     * f/et wide; the shared experts S of T rows, f/t wide. FLOPs count
     * what the tokens run (Ru rows, not the capacity's padding nor the
     * busiest rank's excess), so MFU is honest. */
    gemm(w, Tr, E, h, 1, false);
    gemm(w, Rb * ep / E, up * f / et, h, E / ep, false);
    gemm(w, Rb * ep / E, h, f / et, E / ep, false);
    if (S > 0) {
        gemm(w, T, up * fs / t, h, S, false);
        gemm(w, T, h, fs / t, S, false);
    }
    if (G > 0) gemm(w, T, 1, h, 1, false);   /* the shared gate's logit (fp32), replicated */
    w->flops_fwd -= 2.0 * (Rb - Ru) * (up + 1) * f / et * h;

    double norm_out;   /* the pre-norm's output, kept (0 under norm_position post) */
    double eager = sublayer_norms_work(w, c, l, T * h, T, e, r, &norm_out);
    /* softmax and top-k over the fp32 logits (reads 4TE, writes the k
     * weights and indices, 8Tk); backward reads the weights' gradient and
     * the logits, writes the logits' gradient */
    ew(w, 4 * Tr * E + 8 * Tr * k, 8 * Tr * E + 8 * Tr * k, false);
    /* permutation into the R dispatched rows and the weighted combine
     * back: each reads one side and writes the other, e R h + e T h */
    ew(w, e * (R + Tr) * h, e * (R + Tr) * h, false);
    ew(w, e * (R + Tr) * h + 4 * Tr * k, 2 * e * (R + Tr) * h, false);
    /* the shared gate: reads the shared sum and the output, writes the
     * output; backward reads the output gradient and the sum, writes the
     * shared sum's gradient and the logit's (prt_moe_shared_gate_*) */
    if (G > 0) ew(w, 3 * e * T * h + 8 * T, 3 * e * T * h + 12 * T, false);
    /* the activation: the routed rows f/et wide, the shared fs/t */
    double act_el = Rb * f / et + T * S * fs / t;
    eager += act_work(w, c, up > 1, act_el, e);
    residual_work(w, T * h, e, r, dropout);

    /* Kept for the backward (the agreed semantics): what an MLP keeps per
     * row — norm input and up input e T h (/t under SP), the dropout mask
     * T h — the activation input (up) e f / et and down input e f / et per
     * row, for the Ra rows of the experts' buffers and T rows per shared
     * expert (f / t); the router's fp32 logits 4 T E; the top-k indices,
     * weights and dispatched rows T k (int32 + fp32 + int32); the experts'
     * input e Ra h (at ep 1 a place for every routed row, T k, whatever the
     * capacity keeps; under ep > 1 on the experts' side the rows that
     * arrived, R under uniform routing, Rb on the busiest rank — the
     * runtime keeps the rows it received) and their output combined back,
     * e T k h on every rank (the top-k weights' gradient reads it); T the
     * rank's routed tokens Tr. The shared gate keeps its fp32 sigmoid 4 T
     * and the shared experts' sum before it e T h (a partial sum over TP:
     * its backward's dot). */
    double repl = (e + (dropout ? 1 : 0)) * T * h * r + norm_out + eager;
    double tpart = (up + 1) * e * (Ra * f / et + T * S * fs / t);
    double inner = 4 * Tr * E + 12 * Tr * k + e * (Ra + Ru) * h + G * (4 * T + e * T * h);
    w->act_none = repl + tpart + inner;
    /* recompute_modules: moe drops all the mixture keeps inside (from its
     * input, the norm's output) and re-runs its forward, all-to-alls
     * included; moe_act the routed experts' activation output (the down
     * projections' input, e Ra f / et; Megatron's output-discarding
     * checkpoint in experts.py); shared_experts the shared experts' two
     * tensors per row (up + 1) e T S f / t, re-running their GEMMs and
     * activation; layernorm the norm's output */
    int mods = c->modules ? c->modules : PLAN_RC_BIT(PLAN_RC_CORE_ATTN);
    int moe_mods = PLAN_RC_BIT(PLAN_RC_MOE_ACT) | PLAN_RC_BIT(PLAN_RC_SHARED_EXPERTS);
    if (mods & PLAN_RC_BIT(PLAN_RC_MOE)) {
        w->act_selective = repl;
    } else if (!(mods & moe_mods)) {
        w->act_selective = w->act_none;
    } else {
        double routed = (up + 1) * e * Ra * f / et, shared = (up + 1) * e * T * S * fs / t;
        if (mods & PLAN_RC_BIT(PLAN_RC_MOE_ACT)) routed = up * e * Ra * f / et;
        if (mods & PLAN_RC_BIT(PLAN_RC_SHARED_EXPERTS)) shared = 0;
        w->act_selective = repl + routed + shared + inner;
    }
    if (mods & PLAN_RC_BIT(PLAN_RC_LAYERNORM)) w->act_selective -= norm_out;
    w->module[PLAN_RC_MOE].whole = true;
    w->module[PLAN_RC_MOE].flops = w->flops_fwd;
    PlanRedo *ma = &w->module[PLAN_RC_MOE_ACT];
    ma->ew = (up > 1 ? 3 : 2) * e * Rb * f / et;   /* the busiest rank's rows, f/et wide */
    ma->kernels = 1;
    ma->act_rows = Rb;
    if (S > 0) {
        PlanRedo *se = &w->module[PLAN_RC_SHARED_EXPERTS];
        se->gemm[3] = se->gemm[4] = 1;
        se->flops = 2.0 * T * (up + 1) * fs / t * h * S;
        se->ew = (up > 1 ? 3 : 2) * e * T * S * fs / t;
        se->kernels = 1;
        se->act_rows = T * S;
    }
    if (norm_out > 0) norm_redo(&w->module[PLAN_RC_LAYERNORM], T * h, e, r);
    w->act_op = w->act_none;   /* selective_op with a mixture: refused by sema */
    w->act_full = (prev && prev->kind == LAYER_ATTENTION) ? 0 : e * T * h * r;
    w->recomputed = true;
    w->tp_bytes = e * T * h;
    /* the layer's own buffers, alive while it runs (the runtime allocates
     * them once, for the largest MoE layer): the backward's expert output
     * and input gradients e T k h each, a shared expert's output e T h,
     * the top-k weights' and the logits' gradients (fp32) 4 T k + 4 T E;
     * under ep > 1 the forward's rows sent out e T k h and the experts'
     * side of the backward, sized by the Rb rows that arrived: their output
     * and input gradients 2 e Rb h, the up and activation gradients
     * e Rb (up + 1) f / et; with the shared gate the shared sum's
     * gradient e T h and the gate logit's fp32 4 T */
    w->act_scratch = e * (2 * Tr * k + T) * h + 4 * Tr * k + 4 * Tr * E + G * (e * T * h + 4 * T);
    if (ep > 1) w->act_scratch += e * Tr * k * h + e * Rb * (2 * h + (up + 1) * f / et);
    /* expert TP below tp: the rows the experts run are gathered over the
     * et expert-TP ranks before them and reduce-scattered back after
     * (Megatron-Core's token dispatchers gather over the expert-TP group,
     * gather_from_sequence_parallel_region, once the all-to-all is done),
     * and the gradients the other way in the backward; at et = 1 each rank
     * runs its own rows, at et = t the TP collectives do it */
    if (et > 1 && et < t) w->etp_bytes = e * Rb * h;
    /* dispatch and combine (forward), their gradients (backward): each an
     * all-to-all of the busiest rank's Rb rows of h, e Rb h bytes; the
     * token counts (E int32) go first in the forward; the send and receive
     * buffers are alive during the layer only */
    if (ep > 1) {
        w->ep_bytes = e * Rb * h;
        w->ep_token_bytes = e * Tr * h * imb;
        w->ep_count_bytes = 4 * E;
        w->ep_fwd = 2;
        w->ep_bwd = 2;
        w->a2a_bytes = 2 * e * Rb * h;
    }
}

/* The TP collectives of an attention, MLP or MoE sublayer (Megatron's f
 * and g): one all-reduce each way; with SP an all-gather of the norm's
 * rows before the column-parallel GEMM and a reduce-scatter after the
 * row-parallel one, and backward the output gradient gathered and the
 * input gradient reduce-scattered — plus, as no layer keeps the gathered
 * rows (the runtime's gather_rows; Korthikanti et al. 2022 Sec. 4.2.2), a
 * second all-gather of them for the weight gradient, except under full
 * recomputation, whose rebuilt forward has just gathered them (tp_rec). */
static void sublayer_tp_colls(const PlanCut *c, PlanLayerWork *w)
{
    if (c->sp) {
        w->tp_fwd.ag = w->tp_fwd.rs = w->tp_bwd.ag = w->tp_bwd.rs = 1;
        if (c->recompute != RECOMPUTE_FULL) w->tp_bwd.ag = 2;
    } else {
        w->tp_fwd.ar = w->tp_bwd.ar = 1;
    }
}

/* x += y: a redo made of several. */
static void redo_add(PlanRedo *x, const PlanRedo *y)
{
    for (int i = 0; i < PLAN_MAX_GEMMS; i++) x->gemm[i] += y->gemm[i];
    x->flops += y->flops;
    x->ew += y->ew;
    x->kernels += y->kernels;
    x->tp.ar += y->tp.ar; x->tp.ag += y->tp.ag; x->tp.rs += y->tp.rs;
    x->act_rows += y->act_rows;
    x->softmax |= y->softmax;
    x->whole |= y->whole;
}

/* The one rule of what the cut keeps and re-runs: full the layer's input
 * and its whole forward; selective the modules' sum (core_attn alone when
 * none are named); selective_op torchtitan's op list; none nothing. */
static void resolve_redo(const PlanCut *c, PlanLayerWork *w)
{
    memset(&w->redo, 0, sizeof w->redo);
    switch (c->recompute) {
    case RECOMPUTE_SELECTIVE: {
        w->act_kept = w->act_selective;
        if (!w->recomputed) break;
        int mods = c->modules ? c->modules : PLAN_RC_BIT(PLAN_RC_CORE_ATTN);
        for (int k = 0; k < PLAN_N_RECOMPUTE_MODULES; k++)
            if (mods & PLAN_RC_BIT(k)) redo_add(&w->redo, &w->module[k]);
        if (w->redo.whole) w->redo.flops = w->flops_fwd;   /* a whole forward, once */
        break;
    }
    case RECOMPUTE_SELECTIVE_OP:
        w->act_kept = w->act_op;
        if (w->recomputed) w->redo = w->op;
        break;
    case RECOMPUTE_FULL:
        w->act_kept = w->recomputed ? w->act_full : w->act_none;
        if (w->recomputed) { w->redo.whole = true; w->redo.flops = w->flops_fwd; }
        break;
    default:
        w->act_kept = w->act_none;
        break;
    }
}

void plan_layer_work(const Model *m, const Layer *l, const Layer *prev,
                     const PlanCut *c, PlanLayerWork *w)
{
    memset(w, 0, sizeof *w);
    bool dropout = plan_model_dropout(m);
    double b = (double)c->micro_batch, s = plan_cut_tokens(m, c), h = (double)m->dim;
    /* the head computes the padded rows too (their logits are masked out
     * of the softmax): V is the vocabulary padded for tp */
    double t = c->tp, e = plan_dtype_bytes(m->dtype), V = (double)plan_vocab_padded(m, c->tp);
    double T = b * s, r = c->sp ? 1.0 / t : 1.0;

    switch (l->kind) {
    case LAYER_ATTENTION:
        if (l->attn == ATTN_MLA) mla_work(m, l, c, dropout, w);
        else attention_work(m, l, c, dropout, w);
        sublayer_tp_colls(c, w);
        break;
    case LAYER_MLP:
        mlp_work(m, l, prev, c, dropout, w);
        sublayer_tp_colls(c, w);
        break;
    case LAYER_EMBEDDING:
        /* gather rows (write eTh), add positions, dropout; backward
         * scatter-adds eTh into the table. Vocab-parallel: each rank
         * writes its rows then an all-reduce (SP: reduce-scatter) sums. */
        ew(w, 2 * e * T * h, 2 * e * T * h, false);
        if (l->position == POS_LEARNED) ew(w, 3 * e * T * h, 0, false);
        if (dropout) ew(w, (2 * e + 1) * T * h * r, (2 * e + 1) * T * h * r, false);
        w->act_none = w->act_selective = w->act_full = dropout ? T * h * r : 0;
        w->tp_bytes = e * T * h;
        if (c->tp > 1) {
            if (c->sp) { w->tp_fwd.rs = 1; w->tp_bwd.ag = 1; }
            else       { w->tp_fwd.ar = 1; }
        }
        break;
    case LAYER_MOE:
        moe_work(m, l, prev, c, dropout, w);
        /* with expert TP below tp each rank dispatches its own rows: only
         * shared experts (TP-split MLPs) need the TP collectives */
        if (!(c->etp >= 1 && c->etp < c->tp && l->shared == 0)) sublayer_tp_colls(c, w);
        break;
    case LAYER_NORM:
        w->act_none = w->act_selective = w->act_full = e * T * h * r + norm_work(w, c, l->norm, T * h, e, r);
        w->act_split = 4.0 * (double)norm_params(m, l->norm);   /* zb-h1: its fp32 gradients, B to W */
        break;
    case LAYER_LM_HEAD:
        /* logits GEMM 2T h V/t (Narayanan: counted), then the
         * vocab-parallel cross-entropy over this rank's N = T V / t logits
         * (head_xent_work) */
        gemm(w, T, V / t, h, 1, false);
        /* final-logit soft-cap (Gemma 2): one pass over the logits forward,
         * in place (prt_softcap_fwd); its derivative 1 - (y / cap)^2 is taken
         * inside the cross-entropy's backward from the capped logits it
         * reads already (prt_xent_softcap_bwd): no traffic, nothing kept */
        if (l->softcap > 0) ew_n(w, 2 * e * T * V / t, 0, 1, 0, false);
        head_xent_work(w, T * V / t, e, c->xent_fp32);
        /* keeps its input too (e T h, gathered copy unless SP) */
        double kept = w->act_full + e * T * h * r;
        w->act_none = w->act_selective = w->act_full = kept;
        w->tp_bytes = e * T * h;
        if (c->tp > 1) {
            /* SP: the input gathered again for the weight gradient (no
             * layer keeps the gathered rows: sublayer_tp_colls) */
            if (c->sp) { w->tp_fwd.ag = 1; w->tp_bwd.ag = 1; w->tp_bwd.rs = 1; }
            else       { w->tp_bwd.ar = 1; }
        }
        break;
    }
    if (c->tp <= 1) {
        memset(&w->tp_fwd, 0, sizeof w->tp_fwd);
        memset(&w->tp_bwd, 0, sizeof w->tp_bwd);
    }
    if (!w->recomputed) w->act_op = w->act_selective = w->act_none;   /* outside the blocks */
    resolve_redo(c, w);
}

/* ---- the shared backward scratch -------------------------------------- */

void plan_widest_add(const Model *m, const Layer *l, int tp, PlanWidest *w)
{
    if (l->kind == LAYER_ATTENTION && l->attn == ATTN_MLA) {
        /* planc's op's workspace (prt_mla_ws_elems, its backward's: the
           padded heads' output, q, k, v and score gradients, the up and
           rope parts' gradients, the latents', the query side's input
           gradient), a row of N = b s; never narrower than its kept
           tensors a row (a->h: the program's S.rc.h is as wide as the
           widest of those, kept_width_max) */
        int64_t a = l->heads / tp, n = l->qk_nope_dim, r = l->qk_rope_dim, v = l->v_head_dim, dq = n + r;
        int64_t D = dq > v ? dq : v, lat = l->q_lora_rank > l->kv_lora_rank ? l->q_lora_rank : l->kv_lora_rank;
        int64_t ws = 4 * a * D + a * m->seq + a * dq + a * (n + v) + (a + 2) * r + 2 * lat + l->kv_lora_rank + r +
                     m->dim;
        int64_t kept = 2 * l->q_lora_rank + 3 * l->kv_lora_rank + r + 4 * a * D;
        int64_t wq = ws > kept ? ws : kept;
        if (wq > w->width) w->width = wq;
        if (a * l->v_head_dim > w->inner) w->inner = a * l->v_head_dim;
        if (a > w->heads) w->heads = a;
    } else if (l->kind == LAYER_ATTENTION) {
        int64_t d = plan_head_dim(m, l), wq = (l->heads + 2 * l->kv_heads) / tp * d;
        if (wq > w->width) w->width = wq;
        if (l->heads / tp * d > w->inner) w->inner = l->heads / tp * d;
        if (l->heads / tp > w->heads) w->heads = l->heads / tp;
    } else if (l->kind == LAYER_MLP || l->kind == LAYER_MOE) {   /* MoE: each expert's */
        int64_t f = l->hidden / tp, wu = plan_act_gated(l->act) ? 2 * f : f;
        if (wu > w->width) w->width = wu;
        if (f > w->inner) w->inner = f;
        if (l->kind == LAYER_MOE && l->shared > 0) {   /* the shared experts' width */
            f = plan_shared_hidden(l) / tp;
            wu = plan_act_gated(l->act) ? 2 * f : f;
            if (wu > w->width) w->width = wu;
            if (f > w->inner) w->inner = f;
        }
    }
}

void plan_widest(const Model *m, int tp, PlanWidest *w)
{
    *w = (PlanWidest){ 1, 1, 1 };
    for (int i = 0; i < m->n_layers; i++) plan_widest_add(m, &m->layers[i], tp, w);
}

double plan_bwd_scratch_bytes(const Model *m, const PlanCut *c, const PlanWidest *w)
{
    double e = plan_dtype_bytes(m->dtype), b = (double)c->micro_batch, s = plan_cut_tokens(m, c);
    double N = b * s, C = (double)m->dim;
    double rows = N * C * (c->sp && c->tp > 1 ? 6 : 2);
    /* under cp > 1 the CP attention scores in buffers of its own
     * (plan_cp_attention_numel): no shared score gradients */
    double scores = c->flash || (c->cp > 1) ? 0 : b * (double)w->heads * s * s;
    double gain = m->norm_plus_one ? C : 0;   /* Gemma's 1 + w, made before each norm (S.gain) */
    /* OLMo-2's q/k norm of the projection: its backward's two fp32 dots a
     * row, summed over TP (S.qkdot), where any layer has it */
    double qkdot = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_ATTENTION && m->layers[i].qk_norm == QK_NORM_RMSNORM_PROJ) qkdot = 8 * N;
    return e * (rows + N * (double)w->width + N * (double)w->inner + scores + gain) + qkdot;
}

/* ---- step totals ------------------------------------------------------ */

/* Why memoised: a layer's work depends only on its shape and the layer
 * before it, so the sublayer of each repeated block is worked out once
 * (the one two back, same shape after the same kind of layer, is reused):
 * O(distinct layers) calls to plan_layer_work instead of one per layer. */
static double forward_flops_per_seq(const Model *m, int recompute, bool recomputed_only)
{
    PlanCut c = { .micro_batch = 1, .tp = 1, .sp = false, .recompute = recompute };
    double f = 0;
    PlanLayerWork ring[2];
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *l = &m->layers[i];
        PlanLayerWork *w = &ring[i % 2];
        if (!(i >= 3 && plan_layer_same_shape(l, l - 2) && plan_layer_same_shape(l - 1, l - 3)))
            plan_layer_work(m, l, i ? l - 1 : NULL, &c, w);
        f += recomputed_only ? w->redo.flops : w->flops_fwd;
    }
    return f;
}

double plan_model_flops_step(const Model *m, int64_t global_batch)
{
    return 3.0 * forward_flops_per_seq(m, RECOMPUTE_NONE, false) * (double)global_batch;
}

double plan_recompute_flops_step(const Model *m, int64_t global_batch, int recompute)
{
    if (recompute == RECOMPUTE_NONE || recompute == PLAN_AUTO) return 0;
    return forward_flops_per_seq(m, recompute, true) * (double)global_batch;
}

void plan_layer_shape(const Model *m, const Layer *l, char *buf, int len)
{
    static const char *acts[] = { "gelu", "relu", "swiglu", "geglu" };  /* ORDER ActKind */
    static const char *norms[] = { "layernorm", "rmsnorm" };   /* ORDER NormKind */
    switch (l->kind) {
    case LAYER_EMBEDDING:
        snprintf(buf, (size_t)len, "%lld x %lld%s", (long long)m->vocab, (long long)m->dim,
                 l->position == POS_LEARNED ? " + learned pos" :
                 l->position == POS_ROPE ? ", rope" : "");
        if (l->position == POS_ROPE && l->rope_theta > 0 && l->rope_theta != PLAN_ROPE_THETA_DEFAULT) {
            size_t n = strlen(buf);
            snprintf(buf + n, (size_t)len > n ? (size_t)len - n : 0, " theta %g", l->rope_theta);
        }
        break;
    case LAYER_ATTENTION: {
        char win[40] = "", sc[80] = "";
        if (l->attn == ATTN_MLA) {
            snprintf(buf, (size_t)len, "mla heads %lld, q %lld kv %lld, d %lld+%lld v %lld, %s%s",
                     (long long)l->heads, (long long)l->q_lora_rank, (long long)l->kv_lora_rank,
                     (long long)l->qk_nope_dim, (long long)l->qk_rope_dim, (long long)l->v_head_dim,
                     norms[l->norm], l->bias ? ", bias" : "");
            break;
        }
        if (l->window > 0) snprintf(win, sizeof win, ", window %lld", (long long)l->window);
        if (l->softcap > 0) snprintf(sc, sizeof sc, ", softcap %g", l->softcap);
        if (l->query_scalar > 0)   /* Gemma's query_pre_attn_scalar: scores times 1/sqrt(it) */
            snprintf(sc + strlen(sc), sizeof sc - strlen(sc), ", scale 1/sqrt(%g)", l->query_scalar);
        snprintf(buf, (size_t)len, "heads %lld kv %lld d %lld, %s%s%s%s%s", (long long)l->heads,
                 (long long)l->kv_heads, (long long)plan_head_dim(m, l), norms[l->norm],
                 !l->bias ? "" : l->qkv_bias_only ? ", qkv bias" : ", bias", win,
                 l->qk_norm == QK_NORM_RMSNORM ? ", qk_norm" :
                 l->qk_norm == QK_NORM_RMSNORM_PROJ ? ", qk_norm projection" : "", sc);
        break;
    }
    case LAYER_MLP:
        snprintf(buf, (size_t)len, "%lld -> %lld %s, %s%s", (long long)m->dim,
                 (long long)l->hidden, acts[l->act], norms[l->norm], l->bias ? ", bias" : "");
        break;
    case LAYER_MOE: {
        char sh[64] = "";
        if (l->shared > 0)
            snprintf(sh, sizeof sh, " + %lld shared%s%s", (long long)l->shared,
                     plan_shared_hidden(l) != l->hidden ? " of their own width" : "", l->shared_gate ? ", gated" : "");
        snprintf(buf, (size_t)len, "%lld experts top %lld%s, %lld -> %lld %s, %s%s", (long long)l->experts,
                 (long long)l->top_k, sh, (long long)m->dim, (long long)l->hidden, acts[l->act],
                 norms[l->norm], l->bias ? ", bias" : "");
        break;
    }
    case LAYER_NORM:
        snprintf(buf, (size_t)len, "%s %lld", norms[l->norm], (long long)m->dim);
        break;
    case LAYER_LM_HEAD:
        snprintf(buf, (size_t)len, "%lld -> %lld%s", (long long)m->dim, (long long)m->vocab,
                 l->tied ? ", tied" : "");
        if (l->softcap > 0) {   /* Gemma 2's final-logit soft-cap */
            size_t n = strlen(buf);
            snprintf(buf + n, (size_t)len > n ? (size_t)len - n : 0, ", softcap %g", l->softcap);
        }
        break;
    }
    if (plan_layer_post_norm(l)) {   /* norm_position post or sandwich */
        size_t n = strlen(buf);
        snprintf(buf + n, (size_t)len > n ? (size_t)len - n : 0, ", %s",
                 l->norm_pos == NORM_POS_POST ? "post-norm" : "sandwich norms");
    }
}

uint64_t plan_layer_norm_params(const Model *m, const Layer *l)
{
    bool sub = l->kind == LAYER_ATTENTION || l->kind == LAYER_MLP || l->kind == LAYER_MOE;
    return sub ? sublayer_norm_params(m, l) : l->kind == LAYER_NORM ? norm_params(m, l->norm) : 0;
}

uint64_t plan_layer_qk_norm_params(const Model *m, const Layer *l)
{
    bool on = l->kind == LAYER_ATTENTION && l->qk_norm == QK_NORM_RMSNORM;
    return on ? 2u * (uint64_t)plan_head_dim(m, l) : 0;
}

uint64_t plan_layer_latent_norm_params(const Model *m, const Layer *l)
{
    (void)m;
    if (l->kind != LAYER_ATTENTION || l->attn != ATTN_MLA) return 0;
    uint64_t per = l->norm == NORM_LAYERNORM ? 2u : 1u;
    return per * (uint64_t)(l->q_lora_rank + l->kv_lora_rank);
}

int plan_layer_linears(const Layer *l)
{
    if (l->kind == LAYER_ATTENTION)   /* q, k, v, o; MLA: (q_a, q_b | q_proj), kv_a, kv_b, o_proj */
        return l->attn == ATTN_MLA ? (l->q_lora_rank > 0 ? 5 : 4) : 4;
    if (l->kind == LAYER_MLP) return plan_act_gated(l->act) ? 3 : 2;
    return 0;
}

uint64_t plan_layer_tp_partial_params(const Model *m, const Layer *l)
{
    if (l->kind != LAYER_ATTENTION) return 0;
    if (l->attn != ATTN_MLA) return plan_layer_qk_norm_params(m, l);
    /* every rank runs the down projections on the same rows and back-
       propagates only its heads' share of the latents' gradient */
    bool ovf = false;   /* widths <= 2^20 each (sema): no product wraps */
    uint64_t h = (uint64_t)m->dim, kv = (uint64_t)(l->kv_lora_rank + l->qk_rope_dim);
    return mla_replicated_params(l, &ovf) + h * ((uint64_t)l->q_lora_rank + kv);
}

int plan_layer_tensors(const Model *m, const Layer *l)
{
    (void)m;
    int norm = l->norm == NORM_LAYERNORM ? 2 : 1;       /* gain (+ bias) */
    int mats = 0, biases = 0;
    if (l->kind != LAYER_NORM) norm *= (int)sublayer_norms(l);   /* pre, post or both (sandwich) */
    switch (l->kind) {
    case LAYER_EMBEDDING: return 1 + (l->position == POS_LEARNED);
    case LAYER_LM_HEAD:   return l->tied ? 0 : 1;
    case LAYER_NORM:      return norm;
    case LAYER_ATTENTION:                               /* q, k, v, o */
        if (l->attn == ATTN_MLA) {
            /* L latents (q's when q_lora_rank, kv's): (q_a, q_b | q_proj), kv_a, kv_b, o_proj
               = L + 3 matrices, a norm per latent, biases on the down projections and o_proj */
            int L = l->q_lora_rank > 0 ? 2 : 1;
            return norm + (L + 3) + L * norm + (l->bias ? L + 1 : 0);
        }
        mats = 4;
        biases = l->bias ? (l->qkv_bias_only ? 3 : 4) : 0;
        return norm + mats + biases + (l->qk_norm != QK_NORM_NONE ? 2 : 0);   /* q_norm, k_norm */
    case LAYER_MLP:                                     /* (gate,) up, down */
        mats = plan_act_gated(l->act) ? 3 : 2;
        return norm + mats + (l->bias ? 2 : 0);
    case LAYER_MOE: {                                   /* router, grouped experts, shared */
        int per = plan_act_gated(l->act) ? 3 : 2;
        return norm + 1 + per + (l->shared > 0 ? per : 0) + (l->shared_gate ? 1 : 0);
    }
    }
    return 0;
}
