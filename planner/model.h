/*
 * model.h: the arithmetic of one model — parameters, FLOPs, GEMM shapes,
 * elementwise memory traffic and stored activations, layer by layer.
 *
 * Everything here is a pure function of the Model and of how one layer is
 * cut (micro-batch, tensor-parallel degree, sequence parallelism,
 * recomputation). Nothing here knows about time, links or schedules: the
 * cost model (cost.h) turns this work into seconds, the memory model
 * (memory.h) into bytes per stage.
 *
 * Parameter counts are exact uint64_t with checked arithmetic (a model of
 * 10^13 parameters must not wrap); FLOPs and byte traffic are doubles.
 */
#ifndef PLANC_MODEL_H
#define PLANC_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include "planner/plan.h"

/* How one layer is cut on one GPU. */
typedef struct {
    int64_t micro_batch;    /* b: sequences per micro-batch */
    int     tp;             /* t: tensor-parallel degree */
    bool    sp;             /* sequence parallelism (Korthikanti et al. 2022) */
    int     recompute;      /* Recompute */
    int     ep;             /* expert-parallel degree (MoE layers); 0 means 1 */
    bool    flash;          /* fused attention (plan_flash(Software)) */
    bool    xent_fp32;      /* the loss on an fp32 copy of the logits, Megatron-LM's
                               VocabParallelCrossEntropy (!Software.cross_entropy_fusion) */
    /* RMSNorm, RoPE, the gated activation as eager PyTorch's separate
     * kernels (Software.unfused_*); false: one fused kernel each (planc) */
    bool    unfused_norm, unfused_rope, unfused_swiglu;
    int     modules;        /* recompute selective: the PLAN_RC_BIT()s recomputed
                               (plan_recompute_modules); 0 reads as core_attn alone */
    /* MoE (issue 25) */
    int     etp;            /* expert-tensor-parallel degree; 0 means tp (plan_etp) */
    double  imbalance;      /* the busiest EP rank's rows over the mean (>= 1; 0 means 1) */
    /* context parallelism (issue 26) */
    int     cp;             /* context-parallel degree: each rank holds seq / cp tokens of
                               every sequence; 0 means 1 */
    int     cp_comm;        /* PlanCpComm: how attention sees the other ranks' keys */
    int     cp_local;       /* ranks of the CP group in one NVLink domain (hierarchical's
                               all-to-all tier); 0 means cp */
} PlanCut;

/* One GEMM on one GPU: C (m x n) = A (m x k) * B (k x n), `batch` times. */
typedef struct {
    double m, n, k, batch;
    bool   core;            /* attention score/context GEMM (selective recompute) */
    bool   flash;           /* of a fused attention kernel (PlanCut.flash): causal tiles
                               skipped, the scores GEMM recomputed in the backward */
} PlanGemm;

#define PLAN_MAX_GEMMS 7   /* MLA: q_a, q_b, kv_a, kv_b, scores, context, o_proj */

/* Tensor-parallel collectives of one layer, each moving the full activation
 * tensor b*s*h elements (Megatron's f and g conjugate operators; with
 * sequence parallelism an all-reduce becomes a reduce-scatter or an
 * all-gather, Korthikanti et al. 2022 Sec. 4.2.2). */
typedef struct {
    int ar, ag, rs;
} PlanTpColls;

/* What recomputing one part of a layer re-runs in its backward: fractions
 * of the forward GEMMs (gemm[i] of PlanLayerWork.gemm[i]), elementwise
 * traffic, launches and TP collectives; `whole` is the layer's whole
 * forward (its TP and EP collectives too). cost.c turns it into seconds. */
typedef struct {
    double      gemm[PLAN_MAX_GEMMS];
    double      flops;          /* forward GEMM FLOPs re-run (HFU counts them) */
    double      ew;             /* elementwise bytes re-run */
    int         kernels;        /* their launches */
    PlanTpColls tp;             /* TP collectives re-run, of tp_bytes each */
    double      act_rows;       /* rows of the MLP activation re-run (Device.act_fwd) */
    bool        softmax;        /* the attention softmax re-run (Device.softmax_fwd) */
    bool        whole;
} PlanRedo;

/* The work of one layer for one micro-batch on one GPU. */
typedef struct {
    PlanGemm    gemm[PLAN_MAX_GEMMS];  /* forward GEMMs; backward are derived */
    int         n_gemm;
    double      flops_fwd;      /* forward GEMM FLOPs, 2mnk each (Megatron counting) */
    double      flops_core;     /* of which attention score + context */
    double      ew_fwd;         /* elementwise HBM traffic, forward, bytes */
    double      ew_bwd;         /* elementwise HBM traffic, backward, bytes */
    double      ew_core_fwd;    /* of ew_fwd: softmax + attention dropout */
    int         ew_kernels;     /* elementwise kernels in the forward */
    int         ew_kernels_bwd; /* ... in the backward (autograd's, where unfused) */
    double      act_none;       /* activation bytes kept for backward, no recompute */
    double      act_selective;  /* ... with selective recomputation of cut.modules */
    double      act_full;       /* ... with full recomputation (layer input only) */
    double      act_op;         /* ... under torchtitan's op-level selective AC */
    double      act_kept;       /* the one of the four that cut.recompute selects */
    PlanRedo    redo;           /* what the backward re-runs under cut.recompute (model.c's
                                   module[] and op summed as the cut says) */
    PlanRedo    module[PLAN_N_RECOMPUTE_MODULES];  /* ... each of Megatron's modules alone */
    PlanRedo    op;             /* ... torchtitan's op-level selective AC */
    double      act_split;      /* zb-h1: output gradients kept from B to W, on top of act_kept
                                   whatever is recomputed (memory.c adds it for that schedule) */
    double      tp_bytes;       /* bytes of one TP collective (b*s*h*e) */
    PlanTpColls tp_fwd, tp_bwd; /* TP collectives in forward / backward */
    double      tp_stat_bytes;  /* one all-reduce over TP of per-row fp32 statistics, once each way
                                   (OLMo-2's q/k norm of the projection: 8 b s; 0: none) */
    bool        recomputed;     /* full recompute re-runs this layer's forward */
    /* a mixture of experts under ep > 1: all-to-alls inside the EP group */
    double      ep_bytes;       /* bytes one rank sends in one dispatch or combine (e R h) */
    double      etp_bytes;      /* 1 < etp < tp: the rows the experts run, gathered over the
                                   etp expert-TP ranks, e R h (one all-gather and one
                                   reduce-scatter of it each way); 0 otherwise */
    double      ep_count_bytes; /* the token counts exchanged before the dispatch (E int32) */
    int         ep_fwd, ep_bwd; /* all-to-alls of ep_bytes in forward / backward */
    double      a2a_bytes;      /* transient send + receive buffers during the layer */
    double      ep_token_bytes; /* the tokens this rank dispatches, once each (e T h; the busiest
                                   rank's under Software.moe_imbalance): what a hierarchical
                                   dispatcher sends across nodes once per node (comm.c) */
    double      act_scratch;    /* activation bytes alive only while the layer runs, whatever is
                                   recomputed (a MoE layer's backward scratch): in the rebuild term */
    /* context parallelism (cp > 1, attention layers; plan_cp_attention_numel) */
    double      cp_buf_bytes;   /* what the CP attention allocates for itself while it runs (its
                                   backward's, the larger): PRT_MEM_BUFFERS, freed after */
    double      cp_kv_bytes;    /* one KV block of the local tokens, e b (s/cp) 2 h_kv / t: a ring
                                   step's transfer (and its dKV) */
    double      cp_qkv_bytes;   /* the local q, k, v, e b (s/cp) (h_q + 2h_kv) / t: all-to-all in */
    double      cp_out_bytes;   /* the local output, e b (s/cp) h_q / t: all-to-all back */
} PlanLayerWork;

/* Elements of what one context-parallel attention call keeps and
 * allocates. flash false (planc's runtime, attention_kernel math): exactly
 * as runtime/include/prt_par.h's contract (section "context parallelism")
 * says planrt does, in prt_act elements. flash true (a fused kernel under
 * CP: Megatron-Core/TransformerEngine's, torchtitan's, Meta's Llama 3 CP):
 * no probabilities or score blocks reach HBM; what the pass keeps is its
 * fp32 log-sum-exp per query row (saved_f32) beside the tensors below.
 * B sequences, Tl = T / cp local
 * tokens, H query and Hkv key/value heads of this TP rank, D the head size;
 * cp_local the ranks of the CP group in one node (hierarchical: the
 * all-to-all over them, the ring over cp / cp_local). `saved` is kept from
 * the forward to the backward (counted as activations), `buf_fwd` and
 * `buf_bwd` are allocated while each pass runs (buffers). The contract
 * names no sizes for hierarchical: it is counted as its two parts (the
 * all-to-all's head-split q, k, v and output, then the ring of
 * cp / cp_local steps on cp_local x Tl tokens and H / cp_local heads),
 * the ring's log-sum-exp in place of the probabilities. planrt keeps the
 * log-sum-exp and the dK, dV accumulators in fp32 on both targets (CUDA's
 * paragraph of the contract), so they are saved_f32 and buf_bwd_f32. */
typedef struct {
    double saved, saved_f32, buf_fwd, buf_bwd;
    double buf_bwd_f32;   /* of buf_bwd's peak, the elements held in fp32 whatever the dtype (the
                             dK, dV accumulators): counted at 4 bytes, the rest at the dtype's */
} PlanCpNumel;
PlanCpNumel plan_cp_attention_numel(int form, int cp, int cp_local, bool flash, double B, double Tl, double H,
                                    double Hkv, double D);
/* The tokens of a sequence one rank holds under cut c: seq / cp. */
double plan_cut_tokens(const Model *m, const PlanCut *c);

/* Rows of the word embedding and the LM head under tensor parallelism tp:
 * the vocabulary rounded up to a multiple of vocab_multiple * tp, so every
 * TP rank holds the same number of rows (Megatron pads the same way). The
 * padding rows are never looked up and their logits are masked out of the
 * softmax, so they change no loss; they count in memory and FLOPs. */
int64_t plan_vocab_padded(const Model *m, int tp);

/* Bytes of one element of the model's dtype (2 for bf16/fp16, 4 for fp32). */
int plan_dtype_bytes(PlanDtype d);

/* Head dimension of an attention layer: its head_dim, or dim / heads. */
int64_t plan_head_dim(const Model *m, const Layer *l);

/* Keys one query of attention layer l is scored against, as counted: the
 * sequence, or the sliding window when it is shorter (model.c says why). */
int64_t plan_attention_keys(const Model *m, const Layer *l);

/* RoPE's base: the embedding's rope_theta, or PLAN_ROPE_THETA_DEFAULT. */
#define PLAN_ROPE_THETA_DEFAULT 10000.0
double plan_rope_theta(const Model *m);
/* RoPE's frequency scaling: the embedding's rope_scaling (kind NONE when
 * the model has none). */
RopeScaling plan_rope_scaling(const Model *m);
/* The windowed (local) attention layers' own RoPE base, unscaled: the
 * embedding's rope_local_theta (Gemma 3's rope_local_base_freq); 0: none,
 * every layer rotates by plan_rope_theta and plan_rope_scaling. */
double plan_rope_local_theta(const Model *m);
/* Whether attention layer l rotates by plan_rope_local_theta, unscaled
 * (Gemma 3's rule: a local block, one with a sliding window, where the
 * model has a local base), not by rope_theta with rope_scaling. */
bool plan_layer_rope_local(const Model *m, const Layer *l);
/* The norms' epsilon: the model's norm_eps, or PLAN_NORM_EPS_DEFAULT
 * (Megatron's --norm-epsilon default and planc's runtime before the key). */
#define PLAN_NORM_EPS_DEFAULT 1e-5
double plan_norm_eps(const Model *m);

/* Whether an MLP activation is gated (SwiGLU, GeGLU): a gate and an up
 * projection, 2 x hidden columns, then the down projection. */
bool plan_act_gated(ActKind a);
/* A mixture's shared experts' width: shared_hidden, or the routed hidden. */
int64_t plan_shared_hidden(const Layer *l);
/* A mixture's routed_scale: 1 where none is written. */
double plan_routed_scale(const Layer *l);
/* Aux-loss-free balancing's state on every rank (expert_bias on some
 * mixture): each mixture's bias and its step's counts, E fp32 each, as the
 * program allocates them (kind buffers); 0 without it. Bytes. */
uint64_t plan_expert_bias_bytes(const Model *m);

/* Whether two layers have the same shape, every field that changes a
 * count, a cost or the generated code (their source position aside): the
 * one rule the memo loops and the report's grouping share. */
bool plan_layer_same_shape(const Layer *a, const Layer *b);

/* Whether the model trains with dropout (its `dropout P` > 0): then its
 * masks (one byte an element) and their time are counted, else nothing. */
bool plan_model_dropout(const Model *m);

/* Whether a layer of m is a mixture of experts (LAYER_MOE). */
bool plan_model_has_moe(const Model *m);

/* Whether m has an op the fusion keys change (fused_norm: an RMSNorm;
 * fused_rope: RoPE positions; fused_swiglu: a gated activation), so a key
 * that changes nothing on m is honoured by any program (codegen/emit.c). */
bool plan_model_has_rmsnorm(const Model *m);
bool plan_model_has_rope(const Model *m);
bool plan_model_has_gated(const Model *m);

/* Parameters of one layer held by one tensor-parallel rank, as laid out:
 * the embedding and an untied head hold plan_vocab_padded(m, tp) / tp rows
 * (tp 1: the whole layer, padded to vocab_multiple). A tied LM head holds
 * none (it is the embedding). Sets *overflow when the count does not fit
 * in 64 bits. The memory and cost models count these. */
uint64_t plan_layer_params(const Model *m, const Layer *l, int tp, bool *overflow);

/* Of plan_layer_params, the routed experts' (E of them, each split over
 * tp); 0 for a layer that is no mixture. */
uint64_t plan_layer_expert_params(const Model *m, const Layer *l, int tp, bool *overflow);

/* Parameters of one layer on one GPU under (tp, etp, ep): plan_layer_params
 * with the routed experts split over etp instead of tp and divided over
 * the ep ranks of the EP group. */
uint64_t plan_layer_params_ep(const Model *m, const Layer *l, int tp, int etp, int ep, bool *overflow);

/* Parameters one token passes through (exact; false on overflow): the
 * total minus, per mixture, the experts - top_k routed experts it skips
 * (router and shared experts counted). `check`'s `active_params`; equal
 * to plan_model_params for a dense model. */
bool plan_model_active_params(const Model *m, uint64_t *active);

/* A mixture's capacity C = ceil(capacity_factor x seq x top_k / experts)
 * rows per expert and sequence (GShard, groups = sequences), 0 dropless. */
double plan_moe_capacity(const Model *m, const Layer *l);

/* Rows a mixture's experts run per micro-batch on one GPU under uniform
 * routing: b seq top_k dropless, b E C with a capacity (the padding). */
double plan_moe_rows(const Model *m, const Layer *l, int64_t micro_batch);

/* Parameters of one whole layer of the real model (vocabulary unpadded). */
uint64_t plan_layer_params_real(const Model *m, const Layer *l, bool *overflow);

/* Total parameters of the real model (vocabulary unpadded), exact; false
 * on overflow. This is what `check` reports as `params`. */
bool plan_model_params(const Model *m, uint64_t *total);

/* Total parameters of the model as laid out for tp: the word table (and an
 * untied head) padded to plan_vocab_padded(m, tp) rows. `check` reports it
 * as `params_padded` when it differs from plan_model_params. */
bool plan_model_params_padded(const Model *m, int tp, uint64_t *total);

/* The work of layer `l` of model `m` under cut `c`; `prev` is the layer
 * before it (NULL for the first), which decides what full recomputation
 * keeps. */
void plan_layer_work(const Model *m, const Layer *l, const Layer *prev,
                     const PlanCut *c, PlanLayerWork *w);

/* Parameter tensors of one layer, one per weight matrix, bias and norm
 * gain as Hugging Face and torchtitan name them (q, k, v, o apart; gate,
 * up, down apart; a mixture's experts as grouped tensors, torchtitan's
 * GroupedExperts w1, w2, w3; a tied head none): what a per-tensor
 * optimizer launches kernels for (cost.c, plan_opt_time). */
int plan_layer_tensors(const Model *m, const Layer *l);

/* The widest layer of a model on one TP rank, per TP rank: the first
 * linear's output columns (QKV; an MLP's up, gate and up under a GLU, one
 * expert's under MoE), the second linear's input columns and the heads. The
 * program sizes the backward scratch every layer shares by it (codegen's
 * MAX_WIDTH, MAX_INNER, MAX_HEADS). */
typedef struct {
    int64_t width, inner, heads;
} PlanWidest;

void plan_widest(const Model *m, int tp, PlanWidest *w);

/* Widen w by layer l (start from plan_widest's { 1, 1, 1 }): the cost
 * table takes one layer per shape class, not every layer. */
void plan_widest_add(const Model *m, const Layer *l, int tp, PlanWidest *w);

/* Bytes of the backward scratch every layer of the program shares, one set
 * per rank whatever its stage (codegen's scratch_alloc): the input and
 * output gradients of the residual stream and a temporary (N x C, N = b s
 * rows), under SP also the all-rows partial sums, the gathered output
 * gradient and the gathered input (4 N x C more), the first linear's
 * output gradient (N x width), the second's input gradient (N x inner)
 * and, unless attention is fused (the scores never materialised), the
 * score gradients (b x heads x s x s). */
double plan_bwd_scratch_bytes(const Model *m, const PlanCut *c, const PlanWidest *w);

/* Model FLOPs of one training step over all GPUs, Megatron counting:
 * forward GEMMs x 3 (backward = 2 x forward), no recomputation. */
double plan_model_flops_step(const Model *m, int64_t global_batch);

/* Extra forward FLOPs per step that recomputation adds (for HFU), every
 * block recomputed as `recompute` says (selective: core_attn alone). */
double plan_recompute_flops_step(const Model *m, int64_t global_batch, int recompute);

/* A short human name for a layer kind ("attention", ...). */
const char *plan_layer_kind_name(LayerKind k);

/* Write a short shape description of layer l into buf ("heads 32 kv 8 d 128"). */
void plan_layer_shape(const Model *m, const Layer *l, char *buf, int len);

/* Parameters of a layer's norms (gain, and bias for LayerNorm), which every
 * TP rank holds whole: of an attention, MLP or MoE sublayer its pre-norm,
 * post-norm or both (norm_position), of a norm layer itself, else 0. The sequence-parallel TP all-reduce sums
 * their gradients (cost.c). */
uint64_t plan_layer_norm_params(const Model *m, const Layer *l);

/* Whether an attention, MLP or MoE sublayer normalises its input (norm_position
 * pre or sandwich) and whether it normalises its branch's output before the
 * residual add (post or sandwich; false for other kinds of layer). */
bool plan_layer_pre_norm(const Layer *l);
bool plan_layer_post_norm(const Layer *l);

/* Parameters of an attention layer's q/k norm (`qk_norm rmsnorm`): the q
 * and k gains, head_dim each, which every TP rank holds whole while it
 * normalises its own heads only, so their gradients are partial sums
 * over TP under any TP (cost.c's TP all-reduce, with SP's norms); else 0. */
uint64_t plan_layer_qk_norm_params(const Model *m, const Layer *l);

/* Parameters every TP rank holds whole but whose gradients are partial
 * sums over TP under any TP (each rank back-propagates its own heads): the
 * q/k norm gains, and MLA's down projections (q_a_proj, kv_a_proj_with_mqa,
 * their biases) and latent norms. cost.c's once-a-step TP all-reduce sums
 * them (with sequence parallelism's norms); else 0. */
uint64_t plan_layer_tp_partial_params(const Model *m, const Layer *l);

/* MLA's latent norms' parameters (q_a_layernorm, kv_a_layernorm: gain, and
 * bias for LayerNorm); 0 for other layers. Norms, not linear weights: the
 * FP8 counts leave them out as they leave the pre-norm. */
uint64_t plan_layer_latent_norm_params(const Model *m, const Layer *l);

/* The linear layers of an attention or dense MLP layer (the FP8 linears'
 * scales and histories): 4 for MHA, 5 for MLA with a query latent, else 4;
 * 3 for a gated MLP, else 2; 0 for other kinds. */
int plan_layer_linears(const Layer *l);

#endif /* PLANC_MODEL_H */
