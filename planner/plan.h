/*
 * plan.h: the checked Plan, the contract between the front end and the rest.
 *
 * planner/sema.c turns the AST of a .plan file into a Plan: every name is
 * resolved, every unit converted to SI base units (bytes, bytes/s, FLOP/s,
 * seconds), every `repeat` expanded, every value range-checked. Everything
 * after sema (memory and cost models, lowering to the Program, search,
 * codegen) reads only this struct and never the AST, so it can also be built
 * directly in C (tests and the search do exactly that).
 *
 * Units: sizes in bytes (uint64_t), bandwidths in bytes per second, compute
 * in FLOP/s, times in seconds (double). Counts are int64_t.
 */
#ifndef PLANC_PLAN_H
#define PLANC_PLAN_H

#include <stdbool.h>
#include <stdint.h>

/* A field of the plan block that the user left out or wrote as `auto`:
 * the search fills it; `check` needs it set (or uses the stated default). */
#define PLAN_AUTO (-1)

typedef enum {
    DTYPE_FP32,     /* 4 bytes */
    DTYPE_BF16,     /* 2 bytes, mixed precision with fp32 master weights */
    DTYPE_FP16,     /* 2 bytes, mixed precision with fp32 master weights */
} PlanDtype;

typedef enum {
    LAYER_EMBEDDING,   /* token embedding (+ learned positions) */
    LAYER_ATTENTION,   /* pre-norm causal self-attention sublayer + residual */
    LAYER_MLP,         /* pre-norm MLP sublayer + residual */
    LAYER_NORM,        /* final norm */
    LAYER_LM_HEAD,     /* logits over the vocabulary (tied or not) */
    LAYER_MOE,         /* pre-norm mixture-of-experts sublayer + residual, where
                          an MLP may stand (Switch Transformer, Mixtral) */
} LayerKind;

typedef enum { POS_LEARNED, POS_ROPE, POS_NONE } PosKind;
typedef enum { NORM_LAYERNORM, NORM_RMSNORM } NormKind;
/* attention's normalisation of the queries and keys before RoPE
 * (`qk_norm`, Qwen3 / Gemma 3): QK_NORM_RMSNORM is an RMSNorm over each
 * head's D values, one gain vector of D for the query heads and one for
 * the key heads, shared by the heads (transformers' Qwen3Attention q_norm,
 * k_norm). ORDER QK_NORM_NAMES in planner/sema.c. */
typedef enum {
    QK_NORM_NONE,
    QK_NORM_RMSNORM,       /* each head's d values, gains of d shared by the heads (Qwen3) */
    QK_NORM_RMSNORM_PROJ,  /* the whole q projection (heads x d) and the whole k projection
                              (kv_heads x d), one gain per element (OLMo-2: Olmo2Attention's
                              q_norm, k_norm); split over TP with the heads, its statistics
                              summed over the TP shards; counted and predicted, not emitted */
} QkNormKind;
/* Where an attention, MLP or MoE sublayer's norm stands (`norm_position`,
 * issue 29), with f the sublayer and x the residual stream:
 * NORM_POS_PRE x + f(norm(x)) (GPT-2, Llama: the default);
 * NORM_POS_POST x + norm(f(x)) (OLMo-2: transformers' Olmo2DecoderLayer,
 * post_attention_layernorm / post_feedforward_layernorm, no input norm);
 * NORM_POS_SANDWICH x + post_norm(f(pre_norm(x))) (Gemma 2 and 3: two
 * norms of the same kind, two sets of gains). BERT's norm(x + f(x)) is
 * none of these and is not offered. ORDER NORM_POSITION_NAMES in
 * planner/sema.c. */
typedef enum { NORM_POS_PRE, NORM_POS_POST, NORM_POS_SANDWICH } NormPosition;
/* attention's kind (`attention { kind }`). ATTN_MLA is multi-head latent
 * attention (DeepSeek-V2, Liu et al. 2024, Sec. 2.1; transformers'
 * DeepseekV2Attention): x -> q_a_proj (h x q_lora) -> q_a_layernorm ->
 * q_b_proj (q_lora x a(nope + rope)), or q_proj (h x a(nope + rope))
 * without q_lora; x -> kv_a_proj_with_mqa (h x (kv_lora + rope)), its
 * kv_lora part -> kv_a_layernorm -> kv_b_proj (kv_lora x a(nope + v)), its
 * rope part one key RoPE shared by every head; attention over qk dim
 * nope + rope and v dim v_head_dim; o_proj (a v x h). ORDER
 * ATTN_KIND_NAMES in planner/sema.c. */
typedef enum { ATTN_MHA, ATTN_MLA } AttnKind;
/* ACT_GEGLU: the gated form of GELU (Shazeer 2020, as Gemma): like SwiGLU
 * with tanh-GELU in place of SiLU; appended so the order of the others holds. */
typedef enum { ACT_GELU, ACT_RELU, ACT_SWIGLU, ACT_GEGLU } ActKind;

/* RoPE's frequency scaling for long context (the embedding's
 * `rope_scaling { ... }`, transformers' config.rope_scaling). ORDER
 * ROPE_SCALING_NAMES in planner/sema.c. It changes no shape and no cost:
 * the rotation angles of the low frequencies are stretched. */
typedef enum {
    ROPE_SCALING_NONE,
    ROPE_SCALING_LINEAR,  /* every frequency / factor (position interpolation, Chen et al. 2023) */
    ROPE_SCALING_LLAMA3,  /* Llama 3.1's: wavelengths above original_max_position /
                             low_freq_factor divided by factor, below
                             original_max_position / high_freq_factor kept, smooth
                             between (transformers modeling_rope_utils.py,
                             _compute_llama3_parameters) */
    ROPE_SCALING_YARN,    /* YaRN (Peng et al. 2023): ramp between beta_fast and
                             beta_slow rotations, cos and sin scaled by 0.1 ln(factor) + 1,
                             or DeepSeek's m(factor, mscale) / m(factor, mscale_all_dim) */
} RopeScalingKind;

typedef struct {
    RopeScalingKind kind;
    double  factor;                 /* > 1 for a longer context; 1 with kind NONE */
    double  low_freq_factor;        /* llama3 (Llama 3.1: 1) */
    double  high_freq_factor;       /* llama3 (Llama 3.1: 4) */
    double  beta_fast, beta_slow;   /* yarn (defaults 32, 1) */
    int64_t original_max_position;  /* llama3, yarn: the pre-training context (8192 for Llama 3.1) */
    /* yarn: DeepSeek-V2/V3's pair (transformers' rope_scaling mscale,
     * mscale_all_dim; m(f, x) = 0.1 x ln f + 1). With mscale_all_dim > 0
     * cos and sin are times m(factor, mscale) / m(factor, mscale_all_dim)
     * and kind mla's softmax scale times m(factor, mscale_all_dim)^2
     * (DeepseekV3Attention; standard attention has no such factor, as
     * LlamaAttention); with mscale_all_dim 0 cos and sin are times
     * m(factor, 1). sema's defaults 1, 0; a RopeScaling built in C with
     * both 0 rotates the same (prt_rope_mscale). */
    double  mscale, mscale_all_dim;
} RopeScaling;

/* One layer of the flattened model (repeat blocks are expanded). Only the
 * fields of its kind are meaningful; the rest are zero. */
/* A MoE router's scores of its logits (Layer.score). ORDER sema.c's
 * SCORE_NAMES; the program's gate flags are PRT_MOE_SIGMOID (prt_ops.h). */
typedef enum {
    MOE_SCORE_SOFTMAX,   /* softmax over the E logits (Mixtral, Qwen-MoE) */
    MOE_SCORE_SIGMOID,   /* each logit's sigmoid on its own (DeepSeek-V3) */
} MoeScore;

/* How grouped routing ranks a group (Layer.route_group_score). ORDER
 * sema.c's GROUP_SCORE_NAMES; the program's gate flag PRT_MOE_GROUP_MAX. */
typedef enum {
    MOE_GROUP_TOP_SUM,   /* the sum of its top_k / route_top_groups largest scores (DeepSeek-V3,
                            Megatron-Core's group_limited_topk) */
    MOE_GROUP_MAX,       /* its largest score (DeepSeek-V2's group_limited_greedy) */
} MoeGroupScore;

typedef struct {
    LayerKind kind;
    int       line, col;    /* where the layer was written (0 if built in C) */
    /* LAYER_EMBEDDING */
    PosKind   position;
    double    rope_theta;   /* RoPE base; 0 = the default 10000 (plan_rope_theta) */
    double    rope_local_theta; /* RoPE base of the windowed (local) attention layers, which
                               rotate unscaled (Gemma 3's rope_local_base_freq); 0: they
                               rotate as the others (plan_layer_rope_local) */
    RopeScaling rope_scaling; /* kind NONE: none */
    bool      embed_scale;  /* `scale sqrt_dim`: the output times sqrt(dim), forward and
                               backward (Gemma's normalizer; issue 28) */
    /* LAYER_ATTENTION */
    int64_t   heads;        /* query heads */
    int64_t   kv_heads;     /* key/value heads (== heads unless GQA) */
    int64_t   head_dim;     /* size of one head; 0 = dim / heads (plan_head_dim) */
    int64_t   window;       /* sliding window in tokens, the token itself
                               included (Mistral); 0 = full causal */
    QkNormKind qk_norm;     /* per-head q and k norm; NONE: none */
    int64_t   window_every; /* `sliding_window W every K`: as written (sema has already
                               cleared `window` on every K-th block of the model,
                               transformers' layer_types); 0: not written */
    double    query_scalar; /* scores scaled by 1/sqrt(query_scalar) (Gemma's
                               query_pre_attn_scalar); 0: by 1/sqrt(head_dim) */
    /* LAYER_ATTENTION, LAYER_LM_HEAD */
    double    softcap;      /* cap tanh(x / cap) on the scaled attention scores before
                               the mask (Gemma 2's attn_logit_softcapping), or on the
                               logits before the cross-entropy (final_logit_softcapping);
                               0: none */
    AttnKind  attn;         /* MHA (GQA with kv_heads) or MLA; with MLA kv_heads ==
                               heads (each head has its own k and v from the latent)
                               and head_dim is 0 (plan_head_dim: nope + rope) */
    int64_t   q_lora_rank;  /* MLA: the query's latent width; 0: no query compression
                               (q_proj, DeepSeek-V2-Lite) */
    int64_t   kv_lora_rank; /* MLA: the key/value latent width */
    int64_t   qk_rope_dim;  /* MLA: each head's rotated query/key part (qk_rope_head_dim) */
    int64_t   qk_nope_dim;  /* MLA: each head's unrotated query/key part (qk_nope_head_dim) */
    int64_t   v_head_dim;   /* MLA: each head's value width */
    /* LAYER_MLP, LAYER_MOE */
    int64_t   hidden;       /* MLP inner size (per branch for swiglu); MoE: each expert's */
    ActKind   act;
    /* LAYER_MOE: a router (linear dim -> experts, no bias) picks top_k
     * experts per token by logit and weighs them by their scores (softmax
     * or sigmoid), renormalised over the top_k unless norm_topk_prob false (the
     * softmax over the top_k logits: Mixtral's order); the token's output
     * is their weighted sum plus the shared experts' */
    int64_t   experts;      /* routed experts E */
    int64_t   top_k;        /* experts per token, 1 <= top_k <= experts */
    MoeScore  score;        /* the router's scores (`score`), default softmax */
    int64_t   route_groups; /* grouped routing: the experts in G groups (DeepSeek-V3's n_group);
                               0 or 1: none */
    int64_t   route_top_groups; /* a token's experts come from its Kg best groups (topk_group) */
    MoeGroupScore route_group_score; /* how a group is ranked (`route_group_score`), default top_sum */
    double    routed_scale; /* the routed experts' weights times this after the gate
                               (`routed_scale`: DeepSeek's routed_scaling_factor,
                               Megatron-Core's --moe-router-topk-scaling-factor);
                               0: 1 (plan_routed_scale) */
    bool      expert_bias;  /* aux-loss-free balancing (`expert_bias`: DeepSeek-V3's
                               e_score_correction_bias, Megatron-Core's
                               --moe-router-enable-expert-bias): a per-expert fp32 bias
                               added to the scores for the choice only, moved after each
                               step by bias_update_rate * sign(mean load - load) */
    double    bias_update_rate; /* that step (`bias_update_rate`, default 1e-3:
                               Megatron-Core's --moe-router-bias-update-rate) */
    bool      topk_unnormalised; /* `norm_topk_prob false`: the top_k weights are the scores
                               themselves, not divided by their sum (Qwen2-MoE); default
                               false (renormalised: Mixtral, Qwen3-MoE, DeepSeek-V3) */
    int64_t   shared;       /* shared experts every token passes, default 0 */
    int64_t   shared_hidden; /* each shared expert's width (`shared_hidden`, Qwen2-MoE's
                               shared_expert_intermediate_size); 0: hidden (plan_shared_hidden) */
    bool      shared_gate;  /* the shared experts' sum times sigmoid(x . g), g a (1 x dim)
                               weight replicated over TP (Qwen2-MoE's shared_expert_gate) */
    double    aux_loss;     /* load-balancing loss coefficient (Switch), default 0 */
    double    capacity_factor; /* tokens an expert takes = factor x tokens x top_k /
                               experts, the rest dropped (GShard); 0 = dropless */
    /* LAYER_ATTENTION, LAYER_MLP, LAYER_MOE, LAYER_NORM */
    NormKind  norm;         /* the sublayer's pre-norm, or the final norm */
    NormPosition norm_pos;  /* attention, MLP, MoE: where its norm(s) stand (PRE: default) */
    bool      bias;         /* linear layers carry biases (GPT-2: yes) */
    bool      qkv_bias_only; /* attention with bias: on Q, K, V only, none on
                               the output projection (Qwen2's `bias qkv`) */
    /* LAYER_LM_HEAD */
    bool      tied;         /* shares the embedding matrix */
    /* LAYER_ATTENTION, LAYER_MLP: the linears stay in bf16 under an fp8
     * plan (the first and last block under `fp8 { first_last_bf16 true }`,
     * set by sema; planner/fp8.c). A field of the shape, so the cost memo
     * keeps such blocks in a class of their own. */
    bool      fp8_exempt;
} Layer;

typedef struct {
    const char *name;
    int64_t     vocab;      /* vocabulary size (the real tokens) */
    int64_t     vocab_multiple; /* embedding and head rows are padded to a multiple of
                               vocab_multiple * tp (Megatron's
                               --make-vocab-size-divisible-by); >= 1, default 1 */
    int64_t     seq;        /* sequence length in tokens */
    int64_t     dim;        /* model width h, from the embedding block */
    PlanDtype   dtype;      /* compute dtype */
    Layer      *layers;     /* flattened, in order */
    int         n_layers;
    int         n_blocks;   /* transformer blocks = attention sublayers; the
                               unit a pipeline stage is split by */
    double      dropout;    /* the model block's `dropout P`, 0 <= P < 1: after the
                               attention probabilities and on each residual
                               branch (GPT-2, Megatron); 0 = none, the default */
    double      norm_eps;   /* the model block's `norm_eps E`: the epsilon of every
                               LayerNorm and RMSNorm (Megatron's --norm-epsilon,
                               transformers' rms_norm_eps / layer_norm_epsilon);
                               0 = the default 1e-5 (plan_norm_eps) */
    bool        norm_plus_one; /* the model block's `norm_plus_one true`: every RMSNorm
                               scales by 1 + w and its w starts at 0 (Gemma's
                               GemmaRMSNorm; issue 28); the program keeps the gain
                               1 + w in a C-element scratch (plan_bwd_scratch_bytes) */
} Model;

/* Which of a linear layer's three GEMMs a measured point is (`gemm`
 * entries of a calibrated device). ORDER PlanGemmPass */
typedef enum {
    PLAN_GEMM_FWD,          /* C(m,n) = A(m,k) B(k,n): the forward */
    PLAN_GEMM_DX,           /* dA(m,k) = dC(m,n) B^T: the input gradient */
    PLAN_GEMM_DW,           /* dB(k,n) += A^T dC(m,n): the weight gradient, accumulated */
} PlanGemmPass;
#define PLAN_N_GEMM_PASSES 3

/* One measured GEMM of `planc calibrate`: the forward GEMM's shape
 * (m x k)(k x n), the pass, and the seconds one call took. */
typedef struct {
    int    pass;            /* PlanGemmPass */
    double m, n, k;
    double seconds;
} PlanGemmPoint;

/* The device's profile. Every field past `sms` is measured by `planc
 * calibrate`; 0 (a hand-written or preset device) means the analytic
 * figure of cost.c (roofline GEMMs, HBM streams, PLAN_KERNEL_GAP). */
typedef struct {
    const char *name;       /* preset name, or "custom" */
    uint64_t    memory;     /* bytes of device memory */
    double      flops_fp32; /* dense peak FLOP/s in fp32 */
    double      flops_16;   /* dense peak FLOP/s in bf16/fp16 (no sparsity) */
    double      hbm;        /* memory bandwidth, bytes/s */
    int         sms;        /* streaming multiprocessors, 0 = unknown */
    const PlanGemmPoint *gemm; /* measured GEMMs (n_gemm of them), or NULL */
    int         n_gemm;
    double      stream;     /* bytes/s the elementwise kernels reach; 0: hbm * PLAN_HBM_EFF */
    double      launch;     /* s per kernel launch; 0: PLAN_KERNEL_GAP */
    double      overhead;   /* s of fixed work per training step; 0: none */
    /* s per element beyond the stream's bytes/s, forward and backward,
     * of the kernels that compute more than they move (0: none): the MLP
     * activation (per element of the hidden activation) and the attention
     * softmax (per score element, b a s^2 / t) */
    double      act_fwd, act_bwd, softmax_fwd, softmax_bwd;
    /* the GPU's collective hardware, for comm.c's NCCL model (presets.c
     * fills them for the presets; `device { ... }` may override): */
    double      gemm_eff;   /* fraction of flops_16 the best-shaped GEMM reaches (the
                               maximum achievable matmul FLOPS); 0: PLAN_GEMM_EFF */
    double      attn_eff;   /* fraction of flops_16 a fused attention kernel (flash_attention)
                               reaches forward and backward together, FLOPs of the causal
                               blocks it runs; 0: gemm_eff's (cost.c) */
    int         arch;       /* compute capability x 10 (80 Ampere, 90 Hopper), the row of
                               NCCL's per-architecture tables; 0: unknown (Ampere's) */
    bool        nvls;       /* NVSwitch with multicast and in-switch reduction, so NCCL
                               runs its NVLS all-reduce inside a node (HGX H100/H200) */
    PlanDtype   gemm_dtype; /* what the gemm points were measured in (`gemm_dtype`,
                               default fp32: the CPU target's); they time the GEMMs
                               of models of that element size only (cost.c) */
    double      flops_fp8;  /* dense peak FLOP/s in FP8 (E4M3/E5M2 tensor cores); 0: none */
    /* the fraction of its short-run rate a compute-bound kernel (GEMM,
     * fused attention) keeps when the GPU runs them back to back for a
     * training step, at its power limit: the clock drops under sustained
     * load (presets.c cites each); 0: 1 (gemm_eff is already sustained) */
    double      sustained;
} Device;

/* The collectives a link may carry measured figures for. ORDER
 * PlanCollective (planner/comm.h): all-reduce, all-gather,
 * reduce-scatter, broadcast, reduce, all-to-all, p2p. */
#define PLAN_N_COLLS 7

/* One collective measured by `planc calibrate` on groups of `ranks`
 * ranks (all groups of that size of the machine at once, as a layout's
 * groups run): t(M) = latency + bus_factor(ranks) * M / busbw. */
typedef struct {
    int    coll;            /* PlanCollective */
    int    ranks;           /* group size >= 2 (p2p: 2) */
    double latency;         /* s */
    double busbw;           /* bytes/s */
} PlanCollPoint;

/* A link, per GPU and per direction. */
typedef struct {
    double bandwidth;       /* bytes/s */
    double latency;         /* seconds */
    double efficiency;      /* fraction of bandwidth large messages reach; 0: PLAN_LINK_EFF_* */
    /* measured collectives per group size (n_coll of them; comm.c picks
     * the measured size or interpolates in log size), or NULL: the
     * link's alpha-beta model */
    const PlanCollPoint *coll;
    int    n_coll;
    /* slowdowns while a collective runs beside compute (>= 1; 0: 1):
     * of the compute, and of the collective */
    double overlap_compute, overlap_comm;
} Link;

typedef struct {
    const char *name;
    int64_t     nodes;
    int64_t     gpus_per_node;
    Device      device;
    Link        intra;      /* inside a node (NVLink) */
    Link        inter;      /* between nodes (InfiniBand), per GPU */
    int64_t     nics_per_node; /* NICs a node has (one rail each); 0: gpus_per_node */
    /* the third tier (the seed's pods of nodes joined by a slower network):
     * nodes_per_pod 0 means one pod (no third tier); `pod` is the link
     * between pods, per GPU and per direction like the others */
    int64_t     nodes_per_pod;
    Link        pod;
    /* GPUs that one NVLink domain joins (the intra link's reach): a node
     * of a DGX/HGX (0: gpus_per_node), or a rack of trays on one NVSwitch
     * fabric (GB200 NVL72: 72 GPUs over 18 trays of 4); a multiple of
     * gpus_per_node. plan_nvlink_domain() reads it. */
    int64_t     nvlink_domain;
} Cluster;

/* The GPUs a group can span on the intra (NVLink) link. */
static inline int64_t plan_nvlink_domain(const Cluster *c)
{
    return c->nvlink_domain > 0 ? c->nvlink_domain : c->gpus_per_node;
}

typedef enum {
    SCHED_GPIPE,        /* all forwards, then all backwards */
    SCHED_1F1B,         /* PipeDream-Flush: warm-up, one-forward-one-backward */
    SCHED_INTERLEAVED,  /* Megatron interleaved 1F1B with `chunks` per rank */
    SCHED_ZB_H1,        /* zero-bubble H1: backward split into input and weight */
} Schedule;

typedef enum {
    RECOMPUTE_NONE,      /* keep every activation */
    RECOMPUTE_SELECTIVE, /* recompute attention scores/softmax (Korthikanti) */
    RECOMPUTE_FULL,      /* keep only each layer's input; recompute the layer */
    RECOMPUTE_SELECTIVE_OP, /* torchtitan's op-level selective AC (mode "selective",
                               selective_ac_option "op"): a block keeps its input and the
                               outputs of its save list (model.c), recomputes the rest */
} Recompute;

/* Megatron-Core's --recompute-modules (recompute selective), as bits of
 * Layout.recompute_modules. ORDER the names in layout.c
 * (plan_recompute_module_name). */
typedef enum {
    PLAN_RC_CORE_ATTN,      /* the attention core: scores, softmax, dropout (Korthikanti) */
    PLAN_RC_LAYERNORM,      /* the pre-norms' outputs, discarded once their linear ran */
    PLAN_RC_MLP,            /* the dense MLP sublayer, from its input */
    PLAN_RC_MOE_ACT,        /* the routed experts' activation output, discarded */
    PLAN_RC_MOE,            /* the mixture-of-experts sublayer, from its input */
    PLAN_RC_SHARED_EXPERTS, /* the shared experts, from their input */
    PLAN_RC_MLA_UP_PROJ,    /* MLA's up projections and RoPE (q_b / q_proj, kv_b), from the latents */
} PlanRecomputeModule;
#define PLAN_N_RECOMPUTE_MODULES 7
enum { PLAN_RC_METHOD_BLOCK, PLAN_RC_METHOD_UNIFORM };   /* Layout.recompute_method */
#define PLAN_RC_BIT(m) (1 << (m))

/* The parallel layout. Any int field may be PLAN_AUTO. */
typedef struct {
    int      dp, tp, pp;
    int      zero;               /* 0..3 */
    int64_t  micro_batch;        /* sequences per micro-batch per DP rank */
    int64_t  global_batch;       /* sequences per step over all DP ranks */
    int      schedule;           /* Schedule or PLAN_AUTO */
    int      chunks;             /* model chunks per pipeline rank (interleaved) */
    int      recompute;          /* Recompute or PLAN_AUTO */
    int      sequence_parallel;  /* 0, 1 or PLAN_AUTO */
    int      ep;                 /* expert-parallel degree, divides dp (MoE models);
                                    PLAN_AUTO: searched; 0 (a Layout built in C
                                    without it) means 1 (plan_ep) */
    /* which parts are recomputed (0 everywhere: the whole of `recompute`);
     * a Layout built in C without them gets the defaults */
    int      recompute_modules;  /* recompute selective: PLAN_RC_BIT()s; 0 = Megatron's
                                    default, core_attn (plan_recompute_modules) */
    int      recompute_layers;   /* recompute full: the first N blocks of each chunk are
                                    recomputed, the others keep everything (Megatron's
                                    --recompute-method block --recompute-num-layers N);
                                    0 = every block */
    int      recompute_method;   /* with recompute_layers: PLAN_RC_METHOD_BLOCK (0, the
                                    default) or PLAN_RC_METHOD_UNIFORM: every block
                                    recomputed, in units of recompute_layers blocks that
                                    keep the first one's input alone (Megatron's
                                    --recompute-method uniform) */
    int      recompute_every;    /* recompute full: every N-th block a rank holds is
                                    recomputed, counted over its chunks in order from 1
                                    (torchtitan's selective_ac_option "N"); 0 = every block */
    /* ---- MoE: expert tensor parallelism (issue 25) ---- */
    int      etp;                /* expert-tensor-parallel degree: each routed expert's
                                    GEMMs split over etp ranks (Megatron-Core's
                                    --expert-tensor-parallel-size); PLAN_AUTO or 0 (a Layout
                                    built in C without it): = tp, Megatron's default (plan_etp) */
    /* ---- context parallelism (issue 26) ---- */
    int      cp;                 /* context-parallel degree: each sequence split over cp
                                    ranks in 2*cp chunks, rank i holding chunks i and
                                    2cp-1-i (the load-balanced causal split). Ranks: tp
                                    fastest, then cp, then dp, then pp (Megatron-Core's
                                    order). PLAN_AUTO: searched; 0 (a Layout built in C
                                    without it) means 1 (plan_cp) */
    int      cp_comm;            /* PlanCpComm: how attention sees the other chunks'
                                    keys and values; PLAN_AUTO or 0: ring */
} Layout;

/* The forms of context parallelism (Layout.cp_comm, the plan key `cp_comm`).
 * ORDER CP_COMM_NAMES in planner/sema.c. Megatron-Core's --cp-comm-type in
 * brackets. */
typedef enum {
    PLAN_CP_RING,         /* KV chunks passed round the CP group, each send overlapped
                             with the attention of the chunk in hand (p2p) */
    PLAN_CP_ALL_TO_ALL,   /* DeepSpeed-Ulysses: all-to-all from sequence-split to
                             head-split and back around attention (a2a) */
    PLAN_CP_ALL_GATHER,   /* all-gather the whole sequence's K and V before attention,
                             reduce-scatter dK, dV after (allgather) */
    PLAN_CP_HIERARCHICAL, /* all-to-all inside the node, ring across nodes (a2a+p2p) */
} PlanCpComm;
#define PLAN_N_CP_COMMS 4

/* The context-parallel degree a set layout runs with: cp, or 1 when unset. */
static inline int plan_cp(const Layout *L)
{
    return L->cp >= 1 ? L->cp : 1;
}

/* Its form: cp_comm, or the ring when unset. */
static inline int plan_cp_comm(const Layout *L)
{
    return L->cp_comm >= 0 && L->cp_comm < PLAN_N_CP_COMMS ? L->cp_comm : PLAN_CP_RING;
}

/* The recompute_modules a layout runs with: its bits, or core_attn alone
 * under `recompute selective` when it names none; 0 under any other. */
static inline int plan_recompute_modules(const Layout *L)
{
    if (L->recompute != RECOMPUTE_SELECTIVE) return 0;
    return L->recompute_modules ? L->recompute_modules : PLAN_RC_BIT(PLAN_RC_CORE_ATTN);
}

/* The expert-parallel degree a set layout runs with: ep, or 1 when unset. */
static inline int plan_ep(const Layout *L)
{
    return L->ep >= 1 ? L->ep : 1;
}

/* The expert-tensor-parallel degree a set layout runs with: etp, or tp
 * when unset (Megatron-Core parallel_state.py: "if
 * expert_tensor_parallel_size is None: expert_tensor_parallel_size =
 * tensor_model_parallel_size"). */
static inline int plan_etp(const Layout *L)
{
    return L->etp >= 1 ? L->etp : L->tp >= 1 ? L->tp : 1;
}

typedef struct {
    int64_t     steps;
    double      lr;
    int64_t     warmup;          /* steps of linear warm-up */
    uint64_t    seed;
    double      grad_clip;       /* global-norm clip; 0 = off */
    double      beta1, beta2, eps, weight_decay;   /* AdamW */
    const char *data;            /* path of the training data, or NULL */
    const char *init;            /* `init "DIR"`: a Hugging Face model directory the run
                                    starts from (the default of the executable's
                                    --init-from, issue 28), or NULL */
} Train;

/* The floor of the cosine decay, as a fraction of lr: the runtime's
 * schedule ends at lr/10 (codegen/emit.c ADAMW, runtime/ops/adamw.c
 * prt_lr_at), and every export writes it. */
#define PLAN_MIN_LR_FACTOR 0.1
static inline double plan_min_lr(const Train *t)
{
    return t->lr / 10;   /* = lr x PLAN_MIN_LR_FACTOR, divided as the runtime always has */
}

/* FP8 training (issue 27): the scaling recipe of the linears' GEMMs
 * (Software.fp8, the plan block's `fp8 { ... }`; planner/fp8.c holds the
 * names, the defaults and the rules). ORDER plan_fp8_recipe_names. */
typedef enum {
    PLAN_FP8_OFF,          /* bf16 GEMMs (no fp8 block) */
    PLAN_FP8_TENSORWISE,   /* one scale per tensor from its current amax (torchao's default,
                              TE's Float8CurrentScaling) */
    PLAN_FP8_ROWWISE,      /* one scale per row (torchao's rowwise) */
    PLAN_FP8_BLOCKWISE,    /* 1x128 activation, 128x128 weight blocks (DeepSeek-V3; TE's
                              Float8BlockScaling) */
    PLAN_FP8_MXFP8,        /* 32-element blocks with e8m0 scales (OCP MX; Blackwell) */
    PLAN_FP8_DELAYED,      /* one scale per tensor from an amax history (TE's DelayedScaling) */
} PlanFp8Recipe;
#define PLAN_N_FP8_RECIPES 6
/* ORDER plan_fp8_format_names */
typedef enum {
    PLAN_FP8_E4M3,         /* E4M3 in every GEMM */
    PLAN_FP8_HYBRID,       /* E4M3 forward, E5M2 for the gradients (TE's Format.HYBRID) */
} PlanFp8Format;

typedef struct {
    int     recipe;          /* PlanFp8Recipe; PLAN_FP8_OFF (0) when the plan has none */
    int     format;          /* PlanFp8Format */
    bool    all_gather;      /* the ZeRO/FSDP parameter all-gathers move fp8 weights (torchao's
                                enable_fsdp_float8_all_gather, Megatron's --fp8-param-gather) */
    int64_t amax_history;    /* delayed: amaxes kept per tensor (TE's amax_history_len) */
    bool    first_last_bf16; /* the first and last transformer block's linears in bf16 */
} PlanFp8;

/* The software that runs the plan: which communication it overlaps with
 * compute. The plan block's overlap_* keys set it; the defaults are what
 * planc's own program does (plan_software_defaults, planner/layout.c, the
 * one place they are written). `check` and `search` model any setting, so
 * they predict other software (Megatron-LM, DeepSpeed) too; `emit` refuses
 * the settings planc's runtime cannot honour (codegen/emit.c). Named after
 * Megatron-LM's flags, which planc export prints from them. */
/* The attention kernels (Software.attention_kernel, the plan key
 * `attention_kernel`). ORDER the names in planner/stacks.c (plan_attn_kernel_names). */
typedef enum {
    PLAN_ATTN_MATH,     /* scores materialised in HBM (planc's runtime) */
    PLAN_ATTN_FA2,      /* FlashAttention-2 */
    PLAN_ATTN_FA3,      /* FlashAttention-3 (Hopper: wgmma, TMA, warp specialisation) */
    PLAN_ATTN_CUDNN,    /* cuDNN's fused attention (TransformerEngine's on Hopper/Blackwell) */
} PlanAttnKernel;
#define PLAN_N_ATTN_KERNELS 4

/* The optimizer's kernels (Software.optimizer, the plan key `optimizer`).
 * ORDER the names in planner/stacks.c (plan_optimizer_names); 0 is planc's. */
typedef enum {
    PLAN_OPTIM_FUSED,   /* one pass per parameter, every tensor at once (planc's runtime:
                           one kernel over the flat shard; TE / Apex FusedAdam) */
    PLAN_OPTIM_FOREACH, /* torch.optim's foreach=True: each step of the update a multi-tensor
                           kernel of its own over all tensors */
    PLAN_OPTIM_FORLOOP, /* torch.optim's foreach=False: each step a kernel per tensor */
} PlanOptimizer;
#define PLAN_N_OPTIMIZERS 3

typedef struct {
    /* the stack preset the plan names (`software NAME [VARIANT]`): its row
     * in planner/stacks.c's table, 0 = planc (plan_stack_row); the keys
     * below hold what it set, overridden by the keys the plan writes */
    int  stack;
    /* true (planc): each chunk's DP reduction drains its last backward
     * bucket by bucket; false: all of them run after the pipeline flush,
     * before the optimizer step (Megatron-LM 2021, before
     * --overlap-grad-reduce) */
    bool overlap_grad_reduce;
    /* ZeRO-1/2: true, the all-gather of the updated shards overlaps the
     * next step's forward layer by layer (Megatron's
     * --overlap-param-gather); false (planc): it follows the optimizer
     * step and blocks. ZeRO-3: true (planc), the parameter all-gather is
     * prefetched, a layer's compute starts once its bucket arrived; false:
     * the compute waits for the whole chunk's gather. 1, 0, or PLAN_AUTO
     * when the plan does not say: then planc's own program for the ZeRO
     * stage (plan_param_overlap) */
    int  overlap_param_gather;
    /* true (planc): pipeline sends run on their own stream and the sender
     * computes on; false: a send holds the sender's compute stream until
     * its transfer is done (Megatron-LM 2021's p2p_communication:
     * batch_isend_irecv, wait, torch.cuda.synchronize()) */
    bool overlap_p2p;
    /* true: a layer's TP collectives run beside its GEMMs (Megatron's
     * --tp-comm-overlap) and only what the layer's compute cannot cover is
     * exposed; false (planc): they are synchronous on the compute stream */
    bool overlap_tp;
    /* the dtype gradients are accumulated, reduced and held in (DeepSpeed's
     * data_types.grad_accum_dtype; fp32 is Megatron's
     * --accumulate-allreduce-grads-in-fp32): a PlanDtype, or PLAN_AUTO when
     * the plan does not say — then plan_grad_dtype's default: fp32 for a
     * bf16 model (Megatron-LM's and DeepSpeed's bf16 rule), else the
     * model's (fp16: the ZeRO paper's 2 + 2 + 12 bytes) */
    int  grad_accum_dtype;
    /* the attention kernel (PlanAttnKernel). Any but PLAN_ATTN_MATH is one
     * fused kernel that keeps the s x s_k scores in on-chip memory
     * (FlashAttention, Dao et al. 2022; FlashAttention-2, Dao 2023;
     * FlashAttention-3, Shah et al. 2024; cuDNN's fused attention, which
     * TransformerEngine's DotProductAttention runs on Hopper): no score,
     * probability or dropout-mask tensor in HBM, causal tiles above the
     * diagonal skipped, the backward recomputes the scores; the kernels
     * differ in the rate they reach (cost.c). PLAN_ATTN_MATH (planc):
     * scores materialised, softmax and dropout as kernels of their own
     * (PyTorch's "math" SDPA backend). plan_flash() says which. */
    int  attention_kernel;
    /* true (planc): a weight-gradient GEMM accumulates into the gradient
     * buffer itself (beta = 1; Megatron-LM's --gradient-accumulation-fusion,
     * TransformerEngine's fuse_wgrad_accumulation); false: it writes a
     * fresh gradient that a kernel of its own then adds to the buffer,
     * every micro-batch (PyTorch autograd's AccumulateGrad, Megatron-LM's
     * DDP hook `param.main_grad.add_(param.grad)` before the fusion, 2021) */
    bool grad_accum_fusion;
    /* true (planc): the loss is computed from the logits in their own
     * dtype, the forward reading them twice (row max, then the sum of
     * exponentials), the backward writing the gradient over them, and the
     * logits kept for the backward (program_template.c: prt_xent_*;
     * Megatron-Core's --cross-entropy-loss-fusion); false: Megatron-LM's
     * VocabParallelCrossEntropy on an fp32 copy of them (max, subtract,
     * exp, sum, divide as kernels of their own; the fp32 softmax kept) */
    bool cross_entropy_fusion;
    /* the pointwise ops of a layer that run as eager PyTorch's separate
     * kernels, each reading and writing HBM, with autograd's saved tensors
     * (model.c counts them: norm_work, rope_work, glu_work); false (planc,
     * the plan keys fused_norm, fused_rope, fused_swiglu true): one kernel
     * each (planc's runtime; TransformerEngine's LayerNormLinear,
     * Megatron-Core's --apply-rope-fusion and --bias-swiglu-fusion;
     * torch.compile's generated kernels). RMSNorm only: PyTorch's
     * LayerNorm is one kernel eager too (native_layer_norm) */
    bool unfused_norm, unfused_rope, unfused_swiglu;
    /* the optimizer's kernels (PlanOptimizer): their HBM bytes and
     * launches per step (cost.c, plan_opt_time) */
    int  optimizer;
    /* ---- MoE dispatch as it runs (issue 25); planc's program: blocking
     * all-to-alls, uniform routing ---- */
    /* true: a micro-batch's dispatch and combine run beside another
     * micro-batch's compute in the steady state of 1F1B / interleaved
     * (Megatron-Core's --overlap-moe-expert-parallel-comm with
     * --delay-wgrad-compute: megatron/core/pipeline_parallel/combined_1f1b.py);
     * false (planc): synchronous inside the layer */
    bool   overlap_moe_a2a;
    /* the token dispatcher (PlanMoeDispatcher, the plan key moe_dispatcher) */
    int    moe_dispatcher;
    /* the busiest EP rank's tokens over the mean (>= 1; 1: uniform routing,
     * planc's assumption): its expert GEMMs and all-to-alls, which the
     * step waits for */
    double moe_imbalance;
    /* FP8 training (issue 27): the recipe of the linears' GEMMs; recipe
     * PLAN_FP8_OFF (a Software built in C without it) is bf16 */
    PlanFp8 fp8;
} Software;

/* How a mixture's tokens reach their experts (Software.moe_dispatcher).
 * ORDER the names in sema.c (MOE_DISPATCHER_NAMES). */
typedef enum {
    PLAN_MOE_ALLTOALL,  /* one all-to-all over the EP group, every row on its own
                           (Megatron's --moe-token-dispatcher-type alltoall; planc's runtime) */
    PLAN_MOE_DEEPEP,    /* DeepEP's hierarchical kernels: a token crosses the network once
                           per destination node, then fans out over NVLink (Megatron's
                           --moe-token-dispatcher-type flex --moe-enable-deepep) */
} PlanMoeDispatcher;

/* Whether the plan's attention is one fused kernel (scores on chip). */
static inline bool plan_flash(const Software *w)
{
    return w->attention_kernel != PLAN_ATTN_MATH;
}

typedef struct {
    const char *file;            /* the .plan file it came from */
    Model       model;
    Cluster     cluster;
    bool        has_layout;      /* a plan block was given */
    Layout      layout;
    bool        has_train;       /* a train block was given */
    Train       train;
    Software    software;        /* the plan block's software keys (`software` and the rest) */
} Plan;

#endif /* PLANC_PLAN_H */
