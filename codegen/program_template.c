/*
 * program_template.c: the fixed text of every generated program, as one C
 * file that compiles (make test-codegen compiles it with -Wall -Wextra
 * -Werror against planrt.h, once per feature combination).
 *
 * codegen/emit.c copies its sections (`//@@ NAME` lines start them) into
 * the program between the parts it writes itself (constants, tables, model
 * chunks, step functions). Sections named check-* are not copied: they
 * stand in for those parts so that this file compiles on its own.
 *
 * Features the plan fixes are resolved at emit time, not at run time:
 * `#if NAME`, `#elif NAME`, `#else` and `#endif` lines whose NAME is one
 * of emit.c's features (SP, RECOMPUTE_SELECTIVE, RECOMPUTE_LN, RECOMPUTE_FULL, RECOMPUTE_SOME, SPLIT_BWD,
 * NORM_MIXED, NORM_RMS, NORM_PLUS_ONE, EMBED_SCALE, MLP_ACTS_MIXED, MLP_SWIGLU, MLP_RELU, MLP_GEGLU,
 * SLIDING_WINDOW, ROPE, ROPE_LOCAL, DROPOUT, CONTEXT_PARALLEL, FP8, FP8_DELAYED, QK_NORM, QK_PROJ, ATTN_SCORES,
 * LOGIT_SOFTCAP, POST_NORM, MLA, LEARNED_POS, HAS_MLP, HAS_MOE, EXPERT_PARALLEL, MOE_SHARED_GATE, EXPERT_BIAS,
 * HAS_FINAL_NORM, HAS_BIAS, PIPELINE, USES_<op kind>; `!`, `&&` and `||`
 * allowed, no parentheses) keep or drop the lines between them, and the
 * program holds only the code of its plan. Every other preprocessor line
 * is copied as it is. @KEY@ (in comments only, so this file stays C) is
 * replaced by emit.c's text for KEY.
 */
//@@ check-prelude
#include "planrt.h"

/* Feature defaults for compiling this file alone (-DSP=1 etc. to vary). */
#ifndef SP
#define SP 0
#endif
#ifndef RECOMPUTE_SELECTIVE
#define RECOMPUTE_SELECTIVE 0
#endif
#ifndef RECOMPUTE_FULL
#define RECOMPUTE_FULL 0
#endif
#ifndef RECOMPUTE_SOME
#define RECOMPUTE_SOME 0
#endif
#ifndef RECOMPUTE_LN
#define RECOMPUTE_LN 0
#endif
#ifndef SPLIT_BWD
#define SPLIT_BWD 0
#endif
#ifndef NORM_MIXED
#define NORM_MIXED 0
#endif
#ifndef NORM_RMS
#define NORM_RMS 0
#endif
#ifndef NORM_PLUS_ONE
#define NORM_PLUS_ONE 0
#endif
#ifndef EMBED_SCALE
#define EMBED_SCALE 0
#endif
#ifndef MLP_ACTS_MIXED
#define MLP_ACTS_MIXED 0
#endif
#ifndef MLP_SWIGLU
#define MLP_SWIGLU 0
#endif
#ifndef MLP_RELU
#define MLP_RELU 0
#endif
#ifndef MLP_GEGLU
#define MLP_GEGLU 0
#endif
#ifndef SLIDING_WINDOW
#define SLIDING_WINDOW 0
#endif
#ifndef ROPE
#define ROPE 0
#endif
#ifndef LEARNED_POS
#define LEARNED_POS 1
#endif
#ifndef HAS_MLP
#define HAS_MLP 1
#endif
#ifndef HAS_MOE
#define HAS_MOE 0
#endif
#ifndef EXPERT_PARALLEL
#define EXPERT_PARALLEL 0
#endif
#ifndef MOE_SHARED_GATE
#define MOE_SHARED_GATE 0
#endif
#ifndef HAS_FINAL_NORM
#define HAS_FINAL_NORM 1
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 1
#endif
#ifndef PIPELINE
#define PIPELINE 0
#endif
#ifndef DROPOUT
#define DROPOUT 0
#endif
#ifndef CONTEXT_PARALLEL
#define CONTEXT_PARALLEL 0
#endif
#ifndef FP8
#define FP8 0
#endif
#ifndef FP8_DELAYED
#define FP8_DELAYED 0
#endif
#ifndef EXPERT_BIAS
#define EXPERT_BIAS 0
#endif
#ifndef QK_NORM
#define QK_NORM 0
#endif
#ifndef QK_PROJ
#define QK_PROJ 0
#endif
#ifndef ROPE_LOCAL
#define ROPE_LOCAL 0
#endif
#ifndef ATTN_SCORES
#define ATTN_SCORES 0
#endif
#ifndef LOGIT_SOFTCAP
#define LOGIT_SOFTCAP 0
#endif
#ifndef POST_NORM
#define POST_NORM 0
#endif
#ifndef MLA
#define MLA 0
#endif
#define USES_BWD (!SPLIT_BWD)
#define USES_BWD_INPUT SPLIT_BWD
#define USES_BWD_WEIGHT SPLIT_BWD
#define USES_SEND_ACT PIPELINE
#define USES_RECV_ACT PIPELINE
#define USES_SEND_GRAD PIPELINE
#define USES_RECV_GRAD PIPELINE
#ifndef USES_GATHER_PARAMS
#define USES_GATHER_PARAMS 0
#endif
#define USES_RELEASE_PARAMS USES_GATHER_PARAMS
#ifndef USES_REDUCE_GRADS
#define USES_REDUCE_GRADS 1
#endif
#define USES_REDUCE_DURING USES_REDUCE_GRADS
#ifndef USES_SYNC_PARAMS
#define USES_SYNC_PARAMS 0
#endif
#define USES_SP_NORM_REDUCE SP
#ifndef USES_EMBED_REDUCE
#define USES_EMBED_REDUCE 0
#endif

/* What emit.c writes before the first section: the layout's constants. */
enum { DP = 1, TP = 1, PP = 1, CHUNKS = 1, EARLY_RECVS = 0, ZERO = 0, N_MICRO = 1, N_LAYERS = 5, N_PARAMS = 1 };
static const size_t B = 1, T = 8, N = 8, NL = 8, C = 8, V = 16, VL = 16, GLOBAL_BATCH = 1,
                    MAX_WIDTH = 24, MAX_INNER = 32;
#if !CONTEXT_PARALLEL
static const size_t MAX_HEADS = 1;   /* the score buffers' heads (CP: its own saved sizes) */
#endif
#if ROPE
static const prt_rope ROPE_PARAMS = { PRT_ROPE_DEFAULT, 10000, 1, 1, 4, 32, 1, 0, 1, 0 };
#endif
#if ROPE && ROPE_LOCAL
static const prt_rope ROPE_LOCAL_PARAMS = { PRT_ROPE_DEFAULT, 100, 1, 1, 4, 32, 1, 0, 1, 0 };
#endif
#if DROPOUT
static const float DROPOUT_P = 0.1f;
#endif
static const float NORM_EPS = 1e-5f;
#if CONTEXT_PARALLEL
enum { CP = 2 };
static const size_t SEQ = 16;
static const prt_cp_form CP_FORM = PRT_CP_RING;
#endif
#if EXPERT_PARALLEL
enum { EP = 2 };
static const int EXPERT_EP[N_PARAMS] = { -1 };
#endif
#if HAS_MOE
static const size_t MAX_EXPERTS = 4, MAX_TOPK = 2, MOE_LAYERS = 1;
#if RECOMPUTE_FULL
static const size_t MAX_SHARED = 1;
#endif
#endif
static const long STEPS = 1;
static const char *const DATA = 0;
static const uint64_t SEED = 0;
static const char *const BANNER = "template\n";
static const char *const MODEL_NAME = "template";
static const char *const PLAN_HASH = "fnv1a64:0";
static const char *const MODEL_CONFIG = "{}";
static const char *const INIT_FROM = 0;
static const float EMBED_SCALE_F = 8.0f;
static const double MODEL_FLOPS = 1, PEAK_FLOPS = 1;
static const prt_adamw_cfg ADAMW = { 1e-3f, 1e-4f, 0, 1, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f };
static const prt_param PARAMS[] = {
    { "w", 0, 0, 8, 8, PRT_REPLICATED, 0, { 0, 0, 0 }, PRT_INIT_NORMAL, 0.02f, true, false, -1, 0 },
};

//@@ types
/* ---- the model's layers ----------------------------------------------------
 * One entry per layer of the model, in order, with this TP rank's share of
 * it: heads and MLP width are local (global / TP). A block is an attention
 * layer and the layers after it up to the next attention (its MLP or MoE);
 * the comments name each layer by its block. */
typedef enum { EMBEDDING, ATTENTION, MLP, NORM, LM_HEAD } LayerKind;
typedef enum { NORM_LAYERNORM, NORM_RMSNORM } NormKind;   /* pre-norms and the final norm */
typedef enum { ACT_GELU, ACT_RELU, ACT_SWIGLU, ACT_GEGLU } ActKind;   /* the MLP's activation */

typedef struct {
    LayerKind kind;
    int w1, b1;        /* first linear's weight and bias, ids in PARAMS (embedding: wte; lm_head: the
                          head's weight; -1: none) */
    int w2, b2;        /* second linear's weight and bias (embedding: wpe, learned positions only) */
    int ln_w, ln_b;    /* attention, mlp: the pre-norm's gain and bias; norm: the final norm's (-1: none) */
    NormKind norm;     /* the kind of that norm */
    int h, hkv, d;     /* attention: this rank's query and key/value heads, head size */
    size_t window;     /* attention: the sliding window in tokens, 0 (left out): full causal */
    int f;             /* mlp: this rank's hidden width */
    ActKind act;       /* mlp: its activation */
    size_t width;      /* attention, mlp: rows of the first linear's weight here (its outputs):
                          (h + 2 hkv) d, or f (SwiGLU, GeGLU: 2 f) */
    size_t inner;      /* attention, mlp: columns of the second linear's weight here: h d, or f */
#if HAS_MOE
    /* moe (w1, b1, w2, b2 above are routed expert 0's; f, width, inner each expert's) */
    int router;        /* the router's weight (E, C), replicated over TP, no bias */
    int ex_stride;     /* parameter ids per expert: expert e's are expert 0's + e * ex_stride */
    int shared0;       /* the first shared expert's up weight (its others at expert 0's offsets) */
    int experts, top_k, shared;   /* routed experts E (all on this rank: ep 1), k, shared experts */
    float aux;         /* load-balancing loss coefficient (Switch), 0: off */
    float capf;        /* capacity factor (GShard, per sequence), 0: dropless */
    int gate;          /* the router's gate: PRT_MOE_SIGMOID (else softmax), PRT_MOE_NORM
                          (the top-k weights renormalised: norm_topk_prob) */
    int sgate;         /* the shared experts' gate weight (1, C), replicated over TP; -1: none */
    int sf;            /* the shared experts' width here (their own: shared_hidden / TP) */
    size_t swidth, sinner;   /* their first linear's columns and second's rows here */
    size_t groups, top_groups;   /* grouped routing: the experts of a token's top_groups best of
                                    groups (DeepSeek-V3's n_group, topk_group); 1, 1: none */
    float rscale;      /* the routed experts' weights times this (routed_scale: DeepSeek's
                          routed_scaling_factor); 1: none */
    float brate;       /* expert_bias: its bias's step per training step (bias_update_rate); 0: none */
#endif
} LayerSpec;
#if MLA
/* Multi-head latent attention (the model's `attention { kind mla }`): each
 * attention layer's parameter ids (-1: none) and widths, global */
typedef struct {
    int wqa, bqa, gqa;        /* q_a_proj (q_lora, C), its bias, q_a_layernorm (q_lora) */
    int wqb;                  /* q_b_proj (H (nope + rope), q_lora) or q_proj (H (nope + rope), C), by heads */
    int wkva, bkva, gkva;     /* kv_a_proj_with_mqa (kv_lora + rope, C), its bias, kv_a_layernorm (kv_lora) */
    int wkvb;                 /* kv_b_proj (H (nope + v), kv_lora), by heads */
    size_t q_lora, kv_lora, rope, nope, v;
} MlaSpec;
#endif
#if HAS_MOE
#define MOE ((LayerKind)(LM_HEAD + 1))   /* LayerKind's sixth (ORDER LayerKind): a mixture-of-experts sublayer */
#endif

//@@ check-tables
#if HAS_MOE
static const LayerSpec LAYERS[N_LAYERS] = {
    { EMBEDDING, 0, -1, -1, -1, -1, -1, NORM_LAYERNORM, 0, 0, 0, 0, 0, ACT_GELU, 0, 0, -1, 0, -1, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 1, 1, 1.0f, 0 },
    { ATTENTION, 0, -1, 0, -1, 0, 0, NORM_LAYERNORM, 1, 1, 8, 0, 0, ACT_GELU, 24, 8, -1, 0, -1, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 1, 1, 1.0f, 0 },
    { MOE, 0, -1, 0, -1, 0, 0, NORM_LAYERNORM, 0, 0, 0, 0, 32, ACT_GELU, 32, 32, 0, 2, 0, 4, 2, 1, 0.01f, 0, PRT_MOE_NORM, 0, 16, 16, 16, 2, 1, 1.0f, 0 },
    { NORM, -1, -1, -1, -1, 0, 0, NORM_LAYERNORM, 0, 0, 0, 0, 0, ACT_GELU, 0, 0, -1, 0, -1, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 1, 1, 1.0f, 0 },
    { LM_HEAD, 0, -1, -1, -1, -1, -1, NORM_LAYERNORM, 0, 0, 0, 0, 0, ACT_GELU, 0, 0, -1, 0, -1, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 1, 1, 1.0f, 0 },
};
#else
static const LayerSpec LAYERS[N_LAYERS] = {
    { EMBEDDING, 0, -1, -1, -1, -1, -1, NORM_LAYERNORM, 0, 0, 0, 0, 0, ACT_GELU, 0, 0 },
    { ATTENTION, 0, -1, 0, -1, 0, 0, NORM_LAYERNORM, 1, 1, 8, 0, 0, ACT_GELU, 24, 8 },
    { MLP, 0, -1, 0, -1, 0, 0, NORM_LAYERNORM, 0, 0, 0, 0, 32, ACT_GELU, 32, 32 },
    { NORM, -1, -1, -1, -1, 0, 0, NORM_LAYERNORM, 0, 0, 0, 0, 0, ACT_GELU, 0, 0 },
    { LM_HEAD, 0, -1, -1, -1, -1, -1, NORM_LAYERNORM, 0, 0, 0, 0, 0, ACT_GELU, 0, 0 },
};
#endif
static const int VSTAGE_FIRST[1] = { 0 };
static const int VSTAGE_END[1] = { 5 };
#if RECOMPUTE_SOME
static const bool REBUILT[N_LAYERS] = { false, true, true, false, false };
#endif
#if FP8
enum { FP8_HYBRID = 1, FP8_LAYOUTS = 2 };
static const prt_fp8_recipe FP8_RECIPE = PRT_FP8_TENSORWISE;
static const bool FP8_LINEAR[N_LAYERS] = { false, true, true, false, false };
#if FP8_DELAYED
enum { FP8_AMAX_HISTORY_LEN = 16 };
#endif
#endif
#if QK_NORM
static const int QK_NORM_W[N_LAYERS] = { -1, 0, -1, -1, -1 };
#endif
#if QK_PROJ
static const bool QK_PROJ_OF[N_LAYERS] = { false, true, false, false, false };
#endif
#if ATTN_SCORES
static const prt_attn_scores ATTN_SCORES_OF[N_LAYERS] = { { 0, 0 }, { 0.25f, 50.0f }, { 0, 0 }, { 0, 0 }, { 0, 0 } };
#endif
#if LOGIT_SOFTCAP
static const float LOGIT_CAP = 30.0f;
#endif
#if POST_NORM
static const int POST_NORM_W[N_LAYERS] = { -1, 0, 0, -1, -1 };
#endif
#if MLA
static const MlaSpec MLA_OF[N_LAYERS] = { { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0 },
                                          { -1, -1, -1, 0, 0, -1, 0, 0, 0, 4, 2, 2, 2 } };
#endif

//@@ runtime
/* ---- what a micro-batch keeps -------------------------------------------- */

/* The buffers of one layer for one (micro-batch, chunk): what its forward
 * leaves for its backward. */
typedef struct {
    prt_act *x;                       /* (NL, C) the layer's input, the residual stream */
    prt_act *ln; float *mean, *rstd;  /* (NL, C), (NL), (NL) pre-norm output and statistics */
    prt_act *h;                       /* (N, width) first linear's output */
#if CONTEXT_PARALLEL
    prt_act *att;                     /* the CP attention's saved tensors (prt_cp_saved_numel) */
#else
    prt_act *att;                     /* (B, h, T, T) softmax probabilities */
#endif
    prt_act *a;                       /* (N, inner) second linear's input */
#if MLA
    float   *mr;                      /* (2N) MLA: the latent norms' fp32 rstd (q's, kv's); its other
                                         kept tensors lie in h (mla_kept) */
#endif
#if MLA && SPLIT_BWD
    float   *gml;                     /* zb-h1, MLA: the B pass's gradients of the layer's weights but
                                         o_proj's (mla_grad_numel), fp32, kept aside until W adds
                                         them: the bucket stays closed from B to W */
#endif
#if QK_NORM
    prt_act *qkin; float *qkr;        /* (N, (h + hkv) d), (N, h + hkv): the q/k norm's input and
                                         fp32 rstd (attention with qk_norm; else NULL); OLMo-2's
                                         norm of the whole projection: rstd (N, 2), q's and k's */
#endif
#if POST_NORM
    prt_act *po; float *pmean, *prstd; /* (NL, C), (NL), (NL): the post-norm's input, the branch
                                         output summed over TP, and its statistics (norm_position
                                         post|sandwich; pmean LayerNorm's only; else NULL) */
#endif
#if SPLIT_BWD
    prt_act *dh, *dy;                 /* zb-h1: output gradients kept for the weight pass */
    float   *gln;                     /* zb-h1: the B pass's norm gradients (gain, bias), fp32,
                                       * kept aside until W adds them: its layer's gradient
                                       * bucket stays closed from B to W */
#endif
    prt_act *logits;                  /* (N, VL) lm_head: this rank's vocabulary slice */
    float   *mx, *se, *tgt, *loss;    /* (N) lm_head: cross-entropy pieces (se, tgt adjacent) */
    int32_t *tok;                     /* (N) embedding: tokens; lm_head: targets */
#if DROPOUT
    uint8_t *mask;                    /* (NL, C) dropout mask of the output branch (embedding, attention, MLP) */
    prt_act *attd;                    /* (B, h, T, T) the probabilities after dropout */
    uint8_t *att_mask;                /* (B, h, T, T) their dropout mask */
#endif
#if HAS_MOE
    float   *rl, *wk;                 /* moe: (N, E) router logits fp32; (N, k) top-k weights */
    int32_t *idx, *row, *cnt;         /* moe: (N, k) experts chosen and their rows in xe (-1:
                                         dropped); (E) rows per expert */
    prt_act *xe, *he, *ae, *ye;       /* moe: (N k, C), (N k, width), (N k, inner), (N k, C):
                                         the dispatched rows through their experts */
    prt_act *hs, *as;                 /* moe: (shared N, swidth), (shared N, sinner): the shared experts' */
#if MOE_SHARED_GATE
    float   *sg;                      /* moe: (N) fp32 the shared gate's sigmoid */
    prt_act *ysum;                    /* moe: (N, C) the shared experts' sum before the gate (a partial
                                         sum over TP: the gate's backward dots it with dy) */
#endif
#endif
#if EXPERT_PARALLEL
    prt_moe_ep ep;                    /* moe: this micro-batch's exchange (counts, order) */
    prt_act *xr, *hr, *ar, *yr;       /* moe: (rows_in, C|width|inner|C) the rows this EP rank's
                                         experts received, through them (sized as they came) */
#endif
} LayerActs;

/* Everything one rank holds while it trains. */
static struct {
    prt_ctx   *c;      /* rank, coordinates, the DP / TP / PP groups */
    prt_model *m;      /* parameters, gradients, AdamW state (ZeRO-sharded) */
#if EXPERT_PARALLEL
    prt_model *me;     /* the experts this EP rank holds: their own group, reduced and
                          ZeRO-sharded over expert-DP (R.ce: c with c->edp as its DP) */
    prt_ctx    ce;
    prt_param *tab_d, *tab_e;   /* PARAMS as each model sees it: the other's tensors at vstage -1 */
#endif
    prt_pipe  *pipe;   /* activations per (micro-batch, chunk) and their transfers */
    prt_batch *data;   /* this DP rank's sequences */
    prt_log   *log;
    prt_args   args;
    prt_adamw_cfg opt; /* ADAMW, its cosine decay ending with the run (--steps) */
    long       step;   /* 0-based */
    long       step0;  /* the first step this run computes (a resumed run's is not 0) */
    int        mb;     /* the micro-batch being computed */
    double     loss_sum;
} R;

/* Backward scratch shared by all layers. */
static struct {
    prt_act *dln, *dlnf, *da, *dh, *datt, *tmp;
#if NORM_PLUS_ONE
    prt_act *gain;         /* (C) an RMSNorm's gain 1 + w (Gemma), made before each use */
#endif
#if QK_PROJ
    float   *qkdot;        /* (N, 2) the q/k norm of the projection's backward dots, summed over TP */
#endif
#if SP
    prt_act *full, *dyf;   /* all-rows partial sums of a row-parallel linear; the gathered output gradient */
    prt_act *rows;         /* (N, C) a column-parallel linear's input gathered over TP: no layer
                              keeps it, each pass that reads it gathers it again */
#endif
#if RECOMPUTE_SELECTIVE && CONTEXT_PARALLEL
    prt_act *att;          /* the CP attention's saved tensors, rebuilt in each backward */
#elif RECOMPUTE_SELECTIVE
    prt_act *att;          /* the attention scores, rebuilt in each backward */
#endif
#if RECOMPUTE_LN
    prt_act *lnr;          /* (NL, C) every pre-norm's output, rebuilt in each backward */
#endif
#if RECOMPUTE_SELECTIVE && DROPOUT
    prt_act *attd;         /* ... after dropout, and their mask, redrawn in each backward */
    uint8_t *att_mask;
#endif
#if RECOMPUTE_FULL
    LayerActs rc;          /* the one layer's buffers full recomputation rebuilds */
#endif
#if HAS_MOE
    prt_act *dye, *dxe, *ys;   /* (N k, C) expert output / input gradients; (N, C) a shared expert's */
#if MOE_SHARED_GATE
    prt_act *dys;              /* (N, C) the gated shared sum's gradient g dy */
    float   *dz;               /* (N) fp32 the shared gate's logits, then their gradient */
#endif
#if EXPERT_PARALLEL
    prt_act *xs;               /* (N k, C) the rows a forward sends out: read by no backward */
#endif
    float   *dwk, *dlogits;    /* (N, k) top-k weight gradients; (N, E) router logit gradients */
    float   *auxb, *aux_host;  /* (B) the aux loss per sequence, and its host copy */
    int32_t *cnt_host;         /* (E) rows per expert, on the host: the experts' GEMM sizes */
    bool     recomputing;      /* full recomputation's forward: the aux loss is counted once */
#endif
    float *loss_host;
} S;

#if EXPERT_PARALLEL
/* The model holding parameter i: the experts' group for a routed expert's
 * tensors (EXPERT_EP >= 0), else the dense one. */
static prt_model *holder_of(int i) { return i >= 0 && EXPERT_EP[i] >= 0 ? R.me : R.m; }
#define W(i) prt_w(holder_of(i), (i))   /* compute copy of parameter i (this rank's slice; -1: NULL) */
#define G(i) prt_g(holder_of(i), (i))   /* its fp32 gradient */
#else
#define W(i) prt_w(R.m, (i))   /* compute copy of parameter i (this rank's slice; -1: NULL) */
#define G(i) prt_g(R.m, (i))   /* its fp32 gradient */
#endif
#define CHECK(call) check((call), #call)   /* a failed call ends every rank */

static void check(prt_status st, const char *call)
{
    if (st != PRT_OK) prt_run_fail(R.c, call, st);
}

/* Layer L's pass begins: a failed op is reported as "layer L (PASS): OP: ..."
 * (prt_ops_where, a store), at the step's end (prt_ops_sync in main). */
static void enter(const LayerSpec *L, const char *pass) { prt_ops_where(pass, (int)(L - LAYERS)); }

static prt_act *act_alloc(size_t n)
{
    prt_act *p = (prt_act *)prt_mem_alloc(PRT_MEM_ACTIVATIONS, n * sizeof(prt_act));
    if (!p) prt_run_fail(R.c, "prt_alloc (activations)", PRT_ERR_NOMEM);
    return p;
}

static float *f32_alloc(size_t n)
{
    float *p = (float *)prt_mem_alloc(PRT_MEM_ACTIVATIONS, n * sizeof(float));
    if (!p) prt_run_fail(R.c, "prt_alloc (statistics)", PRT_ERR_NOMEM);
    return p;
}

#if DROPOUT
/* A dropout mask: one byte an element (planner/model.c counts it so). */
static uint8_t *mask_alloc(size_t n)
{
    uint8_t *p = (uint8_t *)prt_mem_alloc(PRT_MEM_ACTIVATIONS, n);
    if (!p) prt_run_fail(R.c, "prt_alloc (dropout mask)", PRT_ERR_NOMEM);
    return p;
}
#endif

/* The first row of this rank's vocabulary slice. */
static size_t vocab0(void) { return (size_t)R.c->coord.tp * VL; }

#if CONTEXT_PARALLEL
/* Elements the CP attention of layer L saves for its backward (prt_par.h's
 * contract, which planner/model.c counts too); 0 is a shape the form
 * refuses: one element then, so that its forward says why. */
static size_t cp_saved_numel(const LayerSpec *L)
{
    size_t n = prt_cp_saved_numel(CP_FORM, CP, B, T, (size_t)L->h, (size_t)L->hkv, (size_t)L->d);
    return n ? n : 1;
}

#if RECOMPUTE_SELECTIVE || RECOMPUTE_FULL
/* The most any attention layer saves: the shared buffer a rebuild uses. */
static size_t cp_saved_max(void)
{
    size_t n = 1;
    for (int i = 0; i < N_LAYERS; i++)
        if (LAYERS[i].kind == ATTENTION && cp_saved_numel(&LAYERS[i]) > n) n = cp_saved_numel(&LAYERS[i]);
    return n;
}
#endif
#endif

//@@ layers
/* ---- layers ------------------------------------------------------------------
 * Row counts: N rows (B*T tokens) pass through the linears and attention;
 * the residual stream, the norms and the pipeline transfers hold NL rows.
#if SP
 * Sequence parallel (Korthikanti et al. 2022): NL = N/TP, this TP rank's
 * rows, all-gathered before a column-parallel linear and reduce-scattered
 * (instead of all-reduced) after a row-parallel one.
#else
 * NL = N: every TP rank holds every row.
#endif
 */

#if NORM_PLUS_ONE
/* Gemma's RMSNorm scales by 1 + w (w starts at 0): the gain, in fp32 as
 * transformers' GemmaRMSNorm makes it, into S.gain for one call; the
 * gradient of the gain is the gradient of w. */
static const prt_act *gain(int w)
{
    prt_affine(S.gain, W(w), 1.0f, 1.0f, C);
    return S.gain;
}
#define GAIN(w) gain(w)
#else
#define GAIN(w) W(w)
#endif

/* Layer L's norm of the kind it has, with gain w and bias b (-1: none). */
static void norm_fwd_w(const LayerSpec *L, int w, int b, prt_act *out, float *mean, float *rstd, const prt_act *x)
{
#if NORM_MIXED
    if (L->norm == NORM_RMSNORM) prt_rmsnorm_fwd(out, rstd, x, W(w), NL, C, NORM_EPS);
    else prt_layernorm_fwd(out, mean, rstd, x, W(w), W(b), NL, C, NORM_EPS);
#elif NORM_RMS
    (void)L; (void)mean; (void)b;
    prt_rmsnorm_fwd(out, rstd, x, GAIN(w), NL, C, NORM_EPS);                 /* RMSNorm */
#else
    (void)L;
    prt_layernorm_fwd(out, mean, rstd, x, W(w), W(b), NL, C, NORM_EPS);      /* LayerNorm */
#endif
}

/* Layer L's pre-norm (or the final norm). */
static void norm_fwd(const LayerSpec *L, prt_act *out, float *mean, float *rstd, const prt_act *x)
{
    norm_fwd_w(L, L->ln_w, L->ln_b, out, mean, rstd, x);
}

#if SP
/* dx accumulates: the residual stream's gradient flows through the norm.
 * The gain's gradient covers this rank's rows only; the step sums it over
 * TP once (SP_NORM_REDUCE, PARAMS: tp_sum). */
#else
/* dx accumulates: the residual stream's gradient flows through the norm. */
#endif
#if USES_BWD || SPLIT_BWD || HAS_MOE
/* The backward of layer L's norm with gain w, its gain and bias
 * gradients accumulated into dw, db. */
static void norm_bwd_to_w(const LayerSpec *L, int w, prt_act *dx, const prt_act *dout, const prt_act *x,
                          const float *mean, const float *rstd, float *dw, float *db)
{
#if NORM_MIXED
    if (L->norm == NORM_RMSNORM) prt_rmsnorm_bwd(dx, dw, dout, x, W(w), rstd, NL, C);
    else prt_layernorm_bwd(dx, dw, db, dout, x, W(w), mean, rstd, NL, C);
#elif NORM_RMS
    (void)L; (void)mean; (void)db;
    prt_rmsnorm_bwd(dx, dw, dout, x, GAIN(w), rstd, NL, C);
#else
    (void)L;
    prt_layernorm_bwd(dx, dw, db, dout, x, W(w), mean, rstd, NL, C);
#endif
}

/* The pre-norm's (or the final norm's) backward, its gain and bias
 * gradients accumulated into dw, db. */
static void norm_bwd_to(const LayerSpec *L, prt_act *dx, const prt_act *dout, const prt_act *x,
                        const float *mean, const float *rstd, float *dw, float *db)
{
    norm_bwd_to_w(L, L->ln_w, dx, dout, x, mean, rstd, dw, db);
}

#endif

#if USES_BWD || HAS_MOE
static void norm_bwd(const LayerSpec *L, prt_act *dx, const prt_act *dout, const prt_act *x,
                     const float *mean, const float *rstd)
{
    norm_bwd_to(L, dx, dout, x, mean, rstd, G(L->ln_w), G(L->ln_b));
}
#endif

#if POST_NORM
/* ---- norm_position post and sandwich (issue 29) -----------------------------
 * post (OLMo-2): x + norm(f(x)) with no pre-norm: the sublayer's first
 * linear reads x itself (L->ln_w is -1, a->ln is a->x); sandwich (Gemma
 * 2): x + post_norm(f(pre_norm(x))), two norms of the layer's kind, two
 * sets of gains. The post-norm normalises the branch output once it is
 * summed over TP (under SP reduce-scattered: this rank's NL rows, so its
 * gain gradients are partial over TP and the step's SP_NORM_REDUCE sums
 * them as the pre-norms'; PARAMS: tp_sum); without SP every TP rank
 * normalises every row alike. It keeps its input (a->po) and statistics
 * (a->pmean, a->prstd), which planner/model.c counts. */

/* The id of layer L's post-norm gain, -1: none; its bias (LayerNorm) the next. */
static int post_gain(const LayerSpec *L) { return POST_NORM_W[L - LAYERS]; }
static int post_bias(const LayerSpec *L)
{
    return post_gain(L) >= 0 && L->norm == NORM_LAYERNORM ? post_gain(L) + 1 : -1;
}

/* Where the branch's output is summed over TP: the post-norm's kept input,
 * or y itself when L has no post-norm. */
static prt_act *branch_out(const LayerSpec *L, LayerActs *a, prt_act *y) { return post_gain(L) >= 0 ? a->po : y; }

/* The pre-norm (pre, sandwich) of the input x into a->ln; none under post. */
static void pre_norm_fwd(const LayerSpec *L, LayerActs *a)
{
    if (L->ln_w >= 0) norm_fwd(L, a->ln, a->mean, a->rstd, a->x);      /* pre-norm */
}

/* y (NL, C) = the post-norm of the branch output a->po, before the
 * residual add (dropout, where the model has it, after it). */
static void post_norm_fwd(const LayerSpec *L, LayerActs *a, prt_act *y)
{
    if (post_gain(L) < 0) return;
    norm_fwd_w(L, post_gain(L), post_bias(L), y, a->pmean, a->prstd, a->po);   /* post-norm of the branch */
}

/* The branch output's gradient from g, the gradient of the post-norm's
 * output (NL rows), into dst (zeroed first: the norm's backward
 * accumulates), the gain and bias gradients into dw, db; g itself where
 * L has no post-norm. */
static const prt_act *post_norm_bwd_to(const LayerSpec *L, const LayerActs *a, const prt_act *g, prt_act *dst,
                                       float *dw, float *db)
{
    if (post_gain(L) < 0) return g;
    CHECK(prt_zero(dst, NL * C * sizeof(prt_act)));
    norm_bwd_to_w(L, post_gain(L), dst, g, a->po, a->pmean, a->prstd, dw, db);
    return dst;
}

#if USES_BWD || HAS_MOE
static const prt_act *post_norm_bwd(const LayerSpec *L, const LayerActs *a, const prt_act *g, prt_act *dst)
{
    if (post_gain(L) < 0) return g;
    return post_norm_bwd_to(L, a, g, dst, G(post_gain(L)), post_bias(L) >= 0 ? G(post_bias(L)) : NULL);
}

/* dx accumulates the input gradient: through the pre-norm from dln, or
 * under post (the linear read x itself) dln as it is. */
static void pre_norm_bwd(const LayerSpec *L, LayerActs *a, prt_act *dx, const prt_act *dln)
{
    if (L->ln_w >= 0) norm_bwd(L, dx, dln, a->x, a->mean, a->rstd);
    else prt_residual_add(dx, dx, dln, NL * C);                         /* no pre-norm: x fed the linear */
}
#endif
#endif

#if QK_NORM
/* ---- q/k norm (Qwen3's q_norm and k_norm, the model's `qk_norm rmsnorm`):
 * an RMSNorm of each query and key head's d values (epsilon NORM_EPS)
 * between the QKV projection and RoPE, one gain of d for the query heads
 * and one for the key heads, shared by all of them. Every TP rank holds
 * both gains whole and normalises its own heads only, so its gain
 * gradients are partial sums over TP: PARAMS marks them tp_sum and the
 * step's SP_NORM_REDUCE sums them (as sequence parallelism's norms). */
/* OLMo-2's (`qk_norm rmsnorm_projection`) normalises each row's whole q
 * projection and, apart, its whole k projection, a gain per element split
 * over TP with the heads: each rank's gain gradients are whole for its
 * slice, but the mean of squares (forward) and the backward's dot(dy w,
 * x rstd) span the TP ranks, so the program all-reduces each row's two
 * partial sums over TP, 8 bytes a row each way (planner/model.c
 * tp_stat_bytes). */

/* The id of layer L's q gain (its k gain's is the next), -1: no q/k norm. */
static int qk_gain(const LayerSpec *L) { return QK_NORM_W[L - LAYERS]; }

/* What the runtime adds to a per-head q/k gain: Gemma 3's q_norm and
 * k_norm scale by 1 + w (Gemma3RMSNorm, in fp32; w starts at 0), Qwen3's
 * by w. */
#if NORM_PLUS_ONE
#define QK_W0 1.0f
#else
#define QK_W0 0.0f
#endif

#if QK_PROJ
/* Whether layer L's q/k norm is OLMo-2's, of the whole q projection and
 * the whole k projection (`qk_norm rmsnorm_projection`): a gain per
 * element, this rank's heads' slice of it (split over TP with the heads),
 * one rstd per row for q and one for k, whose sums of squares span the
 * TP ranks. */
static bool qk_proj(const LayerSpec *L) { return QK_PROJ_OF[L - LAYERS]; }
#else
static bool qk_proj(const LayerSpec *L) { (void)L; return false; }
#endif

#if SPLIT_BWD
/* Elements of layer L's q gain (k: its k gain) on this rank: d (Qwen3's,
 * shared by the heads) or this rank's heads' h d (hkv d) (OLMo-2's). */
static size_t qk_gain_numel(const LayerSpec *L, bool k)
{
    return qk_proj(L) ? (size_t)(k ? L->hkv : L->h) * (size_t)L->d : (size_t)L->d;
}

/* Both gains' gradients: what zb-h1 keeps aside in a->gln. */
static size_t qk_grad_numel(const LayerSpec *L)
{
    return qk_gain(L) >= 0 ? qk_gain_numel(L, false) + qk_gain_numel(L, true) : 0;
}
#endif

/* The rstd a row keeps: one per head (Qwen3), or q's and k's (OLMo-2). */
static size_t qk_stats(const LayerSpec *L) { return qk_proj(L) ? 2 : (size_t)(L->h + L->hkv); }

/* Elements of the pre-norm q and k layer L keeps: N rows of (h + hkv) d. */
static size_t qk_numel(const LayerSpec *L)
{
    return qk_gain(L) >= 0 ? N * (size_t)(L->h + L->hkv) * (size_t)L->d : 0;
}

#if RECOMPUTE_FULL
/* The largest of them, or (stats) of their rstd, N qk_stats: the
 * buffers a rebuilt layer shares (1: none). */
static size_t qk_numel_max(bool stats)
{
    size_t n = 1;
    for (int i = 0; i < N_LAYERS; i++) {
        const LayerSpec *L = &LAYERS[i];
        size_t k = L->kind == ATTENTION ? qk_numel(L) : 0;
        if (stats && k) k = N * qk_stats(L);
        if (k > n) n = k;
    }
    return n;
}
#endif

/* In place on qkv (a->h) after the QKV projection; keeps the input and
 * rstd in a->qkin, a->qkr. */
static void qk_norm_fwd(const LayerSpec *L, LayerActs *a)
{
    int q = qk_gain(L);
    if (q < 0) return;
    size_t h = (size_t)L->h, hkv = (size_t)L->hkv, d = (size_t)L->d;
    if (!qk_proj(L)) {
        prt_qk_norm_fwd(a->h, a->qkin, a->qkr, W(q), W(q + 1), QK_W0, N, h, hkv, d, NORM_EPS);   /* per head */
        return;
    }
    prt_qk_proj_sumsq(a->qkr, a->h, N, h, hkv, d);                      /* this rank's heads' sums of squares */
    if (TP > 1) CHECK(prt_all_reduce(R.c->tp, a->qkr, a->qkr, 2 * N, PRT_FP32, PRT_SUM));   /* TP: the whole's */
    prt_qk_proj_norm_fwd(a->h, a->qkin, a->qkr, a->qkr, W(q), W(q + 1), N, h, hkv, d, h * d * TP, hkv * d * TP,
                         NORM_EPS);                                     /* q/k norm, whole projection */
}

/* In place on dqkv's q and k parts (after RoPE's backward); the gains'
 * gradients (this rank's heads) accumulate into dwq, dwk. */
static void qk_norm_bwd_to(const LayerSpec *L, const LayerActs *a, prt_act *dqkv, float *dwq, float *dwk)
{
    int q = qk_gain(L);
    size_t h = (size_t)L->h, hkv = (size_t)L->hkv, d = (size_t)L->d;
    if (!qk_proj(L)) {
        prt_qk_norm_bwd(dqkv, dwq, dwk, a->qkin, W(q), W(q + 1), QK_W0, a->qkr, N, h, hkv, d);
        return;
    }
#if QK_PROJ
    prt_qk_proj_dot(S.qkdot, dqkv, a->qkin, W(q), W(q + 1), a->qkr, N, h, hkv, d);
    if (TP > 1) CHECK(prt_all_reduce(R.c->tp, S.qkdot, S.qkdot, 2 * N, PRT_FP32, PRT_SUM));   /* TP: the whole's */
    prt_qk_proj_norm_bwd(dqkv, dwq, dwk, a->qkin, W(q), W(q + 1), a->qkr, S.qkdot, N, h, hkv, d, h * d * TP,
                         hkv * d * TP);                                 /* gains: this rank's slices, whole */
#endif
}

#if USES_BWD
static void qk_norm_bwd(const LayerSpec *L, const LayerActs *a, prt_act *dqkv)
{
    int q = qk_gain(L);
    if (q >= 0) qk_norm_bwd_to(L, a, dqkv, G(q), G(q + 1));
}
#endif
#endif

#if SPLIT_BWD
/* Elements of a layer's norm gradients: the gain's C, the bias's C if it
 * has one (planner/model.c's zb-h1 act_split counts 4 bytes each). */
static size_t norm_grad_numel(const LayerSpec *L) { return L->ln_w < 0 ? 0 : L->ln_b >= 0 ? 2 * C : C; }

#if QK_NORM && POST_NORM
/* ... and a->gln's whole: the q and k gains' d each after them, then the
 * post-norm's (post_grad_at). */
static size_t post_grad_at(const LayerSpec *L) { return norm_grad_numel(L) + qk_grad_numel(L); }
#elif POST_NORM
/* ... and a->gln's whole: the post-norm's gain and bias after them. */
static size_t post_grad_at(const LayerSpec *L) { return norm_grad_numel(L); }
#endif
#if POST_NORM
static size_t post_grad_numel(const LayerSpec *L) { return post_gain(L) < 0 ? 0 : post_bias(L) >= 0 ? 2 * C : C; }
static size_t gln_numel(const LayerSpec *L) { return post_grad_at(L) + post_grad_numel(L); }

/* zb-h1's B: the post-norm's backward (post_norm_bwd_to), its gain and
 * bias gradients into a->gln after the others (the bucket stays closed
 * until W). */
static const prt_act *post_norm_bwd_kept(const LayerSpec *L, LayerActs *a, const prt_act *g, prt_act *dst)
{
    if (post_gain(L) < 0) return g;
    float *gp = a->gln + post_grad_at(L);
    CHECK(prt_zero(gp, post_grad_numel(L) * sizeof(float)));
    return post_norm_bwd_to(L, a, g, dst, gp, post_bias(L) >= 0 ? gp + C : NULL);
}
#endif

#if QK_NORM
#if !POST_NORM
/* ... and a->gln's whole: the q and k gains' after them (qk_grad_numel). */
static size_t gln_numel(const LayerSpec *L) { return norm_grad_numel(L) + qk_grad_numel(L); }
#endif

/* zb-h1's B: the q/k norm's backward, its gain gradients into a->gln
 * after the norm's (the bucket stays closed until W). */
static void qk_norm_bwd_kept(const LayerSpec *L, LayerActs *a, prt_act *dqkv)
{
    if (qk_gain(L) < 0) return;
    float *g = a->gln + norm_grad_numel(L);
    CHECK(prt_zero(g, qk_grad_numel(L) * sizeof(float)));
    qk_norm_bwd_to(L, a, dqkv, g, g + qk_gain_numel(L, false));
}
#elif !POST_NORM
static size_t gln_numel(const LayerSpec *L) { return norm_grad_numel(L); }
#endif

/* zb-h1's B: the norm's backward with its gain and bias gradients into
 * a->gln, not the gradient bucket: writing the bucket in B would open it
 * until W, every bucket of the stage at once under ZeRO >= 2. */
static void norm_bwd_kept(const LayerSpec *L, LayerActs *a, prt_act *dx, const prt_act *dout)
{
#if POST_NORM
    if (L->ln_w < 0) {   /* norm_position post: no pre-norm, x fed the linear */
        prt_residual_add(dx, dx, dout, NL * C);
        return;
    }
#endif
    CHECK(prt_zero(a->gln, norm_grad_numel(L) * sizeof(float)));
    norm_bwd_to(L, dx, dout, a->x, a->mean, a->rstd, a->gln, L->ln_b >= 0 ? a->gln + C : NULL);
}

/* zb-h1's W: the kept norm gradients added into the layer's gradients. */
static void norm_grads_add(const LayerSpec *L, const LayerActs *a)
{
#if POST_NORM
    if (post_gain(L) >= 0) {   /* the post-norm's */
        const float *gp = a->gln + post_grad_at(L);
        prt_grad_add(G(post_gain(L)), gp, C);
        if (post_bias(L) >= 0) prt_grad_add(G(post_bias(L)), gp + C, C);
    }
    if (L->ln_w >= 0) prt_grad_add(G(L->ln_w), a->gln, C);
#else
    prt_grad_add(G(L->ln_w), a->gln, C);
#endif
    if (L->ln_b >= 0) prt_grad_add(G(L->ln_b), a->gln + C, C);
#if QK_NORM
    if (L->kind == ATTENTION && qk_gain(L) >= 0) {   /* the q and k gains' */
        const float *g = a->gln + norm_grad_numel(L);
        prt_grad_add(G(qk_gain(L)), g, qk_gain_numel(L, false));
        prt_grad_add(G(qk_gain(L) + 1), g + qk_gain_numel(L, false), qk_gain_numel(L, true));
    }
#endif
}
#endif

#if RECOMPUTE_LN
/* recompute_modules layernorm (Megatron-Core's output-discarding
 * checkpoint of the pre-norms): the norm's output was not kept (every
 * layer writes the shared S.lnr), so the backward runs the norm again
 * from the kept input x before a GEMM reads it. */
static void norm_rebuilt(const LayerSpec *L, LayerActs *a)
{
#if POST_NORM
    if (L->ln_w < 0) return;   /* norm_position post: no pre-norm (the post-norm's input is kept) */
#endif
    norm_fwd(L, a->ln, a->mean, a->rstd, a->x);                         /* layernorm recomputed */
}
#endif

#if SP
/* Rows `mine` (NL, C) of every TP rank gathered into the shared S.rows
 * (N, C). No layer keeps the gathered rows: a layer keeps its own NL rows
 * and its backward gathers them again (Megatron-LM's sequence parallelism,
 * Korthikanti et al. 2022 Sec. 4.2.2: one all-gather more per backward for
 * (t - 1) e N C / t bytes less per layer and micro-batch in flight;
 * planner/model.c counts both). */
static const prt_act *gather_rows(const prt_act *mine)
{
    CHECK(prt_all_gather(R.c->tp, mine, S.rows, NL * C, PRT_ACT));   /* SP: gather the rows over TP */
    return S.rows;
}

/* The (N, C) input of a column-parallel linear: the norm's output rows of
 * every TP rank. */
static const prt_act *all_rows(LayerActs *a) { return gather_rows(a->ln); }

/* What a backward reads as that input: under full recomputation the
 * rebuilt forward has just gathered it; else it is gathered again. */
static const prt_act *rows_in(const LayerActs *a)
{
#if RECOMPUTE_SOME
    /* a rebuilt block's buffers are the shared S.rc's (slot_alloc) */
    return a->h == S.rc.h ? S.rows : gather_rows(a->ln);
#elif RECOMPUTE_FULL
    (void)a;
    return S.rows;
#else
    return gather_rows(a->ln);
#endif
}

/* Where a row-parallel linear writes its (N, C) partial sums. */
static prt_act *partials(prt_act *y) { (void)y; return S.full; }

/* Finish a row-parallel linear's partial sums p (N, C) into y (NL, C). */
static void sum_partials(prt_act *p, prt_act *y)
{
    CHECK(prt_reduce_scatter(R.c->tp, p, y, NL * C, PRT_ACT, PRT_SUM));   /* SP: sum over TP, keep my rows */
}

/* The output gradient d (NL, C) of every row, for a row-parallel backward,
 * into full (N, C). */
static const prt_act *grad_rows(const prt_act *d, prt_act *full)
{
    CHECK(prt_all_gather(R.c->tp, d, full, NL * C, PRT_ACT));            /* SP: gather the rows over TP */
    return full;
}

/* The partial input gradient dp (N, C) of a column-parallel linear into
 * dx (NL, C). */
static void sum_input_grad(prt_act *dp, prt_act *dx)
{
    CHECK(prt_reduce_scatter(R.c->tp, dp, dx, NL * C, PRT_ACT, PRT_SUM)); /* SP: sum over TP, keep my rows */
}
#else
/* The (N, C) input of a column-parallel linear: the norm's output. */
static const prt_act *all_rows(LayerActs *a) { return a->ln; }

/* What a backward reads as that input. */
static const prt_act *rows_in(const LayerActs *a) { return a->ln; }

/* Where a row-parallel linear writes its (N, C) partial sums: in place. */
static prt_act *partials(prt_act *y) { return y; }

/* Finish a row-parallel linear's partial sums p (N, C) in place (y == p). */
static void sum_partials(prt_act *p, prt_act *y)
{
    (void)y;
    CHECK(prt_all_reduce(R.c->tp, p, p, N * C, PRT_ACT, PRT_SUM));        /* TP: sum the partials */
}

#if SPLIT_BWD
/* The output gradient d (N, C), kept in full for the weight pass. */
static const prt_act *grad_rows(const prt_act *d, prt_act *full)
{
    CHECK(prt_copy(full, d, N * C * sizeof(prt_act)));
    return full;
}
#endif

/* The partial input gradient dp (N, C) of a column-parallel linear, summed
 * over TP, into dx (N, C). */
static void sum_input_grad(prt_act *dp, prt_act *dx)
{
    CHECK(prt_all_reduce(R.c->tp, dp, dp, N * C, PRT_ACT, PRT_SUM));      /* TP: sum the partials */
    if (dx != dp) CHECK(prt_copy(dx, dp, N * C * sizeof(prt_act)));
}
#endif

#if DROPOUT
/* ---- dropout (prt_ops.h): inverted, with masks keyed by (SEED, step,
 * layer, site) and each element's global coordinates, so every layout
 * and every recomputation drops the same elements. */

/* The key of layer L's dropout `site` in this step: the same on every
 * rank that holds the layer, whatever the layout. */
static prt_dropout_key drop_key(const LayerSpec *L, prt_dropout_site site)
{
    prt_dropout_key k = { SEED, (uint64_t)R.step, (uint32_t)(L - LAYERS), site, DROPOUT_P };
    return k;
}

#if SP
/* The first of this rank's NL rows in the micro-batch: SP splits them over TP. */
static size_t row0(void) { return (size_t)R.c->coord.tp * NL; }
#else
/* The first of this rank's NL rows in the micro-batch: all of them are here. */
static size_t row0(void) { return 0; }
#endif

/* y (NL, C) = dropout of a layer's output branch, in place; its mask kept. */
static void drop_output(const LayerSpec *L, prt_act *y, uint8_t *mask)
{
    prt_dropout_key k = drop_key(L, PRT_DROPOUT_OUTPUT);
    prt_dropout_fwd(y, mask, y, &k, NL, C, T, prt_batch_seq0(R.data, R.mb), row0());
}

/* The branch's share of the output gradient d (NL, C): through its mask,
 * into S.tmp (d stays the residual stream's). */
static const prt_act *drop_output_bwd(const prt_act *d, const uint8_t *mask)
{
    prt_dropout_bwd(S.tmp, d, mask, DROPOUT_P, NL * C);
    return S.tmp;
}

/* The attention probabilities att of this rank's heads (global heads from
 * coord.tp * L->h) dropped into attd, with their mask. */
static void drop_probs(const LayerSpec *L, prt_act *attd, uint8_t *mask, const prt_act *att)
{
    prt_dropout_key k = drop_key(L, PRT_DROPOUT_PROBS);
    prt_dropout_probs_fwd(attd, mask, att, &k, B, (size_t)L->h, T, prt_batch_seq0(R.data, R.mb),
                          (size_t)R.c->coord.tp * (size_t)L->h);
}
#endif

/* Token embedding, vocab-parallel (Megatron): this rank holds rows
 * [vocab0, vocab0 + VL) of wte and looks up the tokens that fall in them
 * (zeros elsewhere); summing over TP completes every row. */
static void embedding_fwd(const LayerSpec *L, LayerActs *a, prt_act *y)
{
    enter(L, "embedding forward");
    prt_act *e = partials(y);                                           /* (N, C) */
    CHECK(prt_batch_load(R.data, R.step, R.mb, a->tok, NULL));
    prt_embedding_fwd(e, a->tok, W(L->w1), N, C, vocab0(), VL);
#if EMBED_SCALE
    prt_affine(e, e, EMBED_SCALE_F, 0.0f, N * C);   /* Gemma: x sqrt(dim); each row is one rank's, so exact */
#endif
#if SP
#if LEARNED_POS && CONTEXT_PARALLEL
    if (R.c->coord.tp == 0)   /* learned positions at this CP rank's global positions, once over TP */
        prt_position_cp_fwd(e, W(L->w2), B, T, C, SEQ, CP, R.c->coord.cp);
#elif LEARNED_POS
    if (R.c->coord.tp == 0) prt_position_fwd(e, W(L->w2), B, T, C);    /* learned positions, once over TP */
#endif
    CHECK(prt_reduce_scatter(R.c->tp, e, y, NL * C, PRT_ACT, PRT_SUM));  /* TP+SP: join slices, keep my rows */
#else
    CHECK(prt_all_reduce(R.c->tp, e, e, N * C, PRT_ACT, PRT_SUM));     /* TP: join the vocabulary slices */
#if LEARNED_POS && CONTEXT_PARALLEL
    prt_position_cp_fwd(e, W(L->w2), B, T, C, SEQ, CP, R.c->coord.cp); /* learned positions: CP rank's global ones */
#elif LEARNED_POS
    prt_position_fwd(e, W(L->w2), B, T, C);                            /* learned positions, replicated */
#endif
#endif
#if DROPOUT
    drop_output(L, y, a->mask);                                        /* embedding dropout */
#endif
}

static void embedding_bwd(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    enter(L, "embedding backward");
#if EMBED_SCALE
    prt_affine(d, d, EMBED_SCALE_F, 0.0f, NL * C);   /* the scale's backward; d is read by no one after */
#endif
#if SP && DROPOUT
    const prt_act *dy = grad_rows(drop_output_bwd(d, a->mask), S.full);
#elif SP
    const prt_act *dy = grad_rows(d, S.full);
#elif DROPOUT
    const prt_act *dy = drop_output_bwd(d, a->mask);
#else
    const prt_act *dy = d;
#endif
    prt_embedding_bwd(G(L->w1), a->tok, dy, N, C, vocab0(), VL);        /* rows of this rank's slice */
#if LEARNED_POS && CONTEXT_PARALLEL
    prt_position_cp_bwd(G(L->w2), dy, B, T, C, SEQ, CP, R.c->coord.cp);   /* into this CP rank's rows of wpe */
#elif LEARNED_POS
    prt_position_bwd(G(L->w2), dy, B, T, C);
#endif
}

#if FP8
/* ---- FP8 linears (issue 27) --------------------------------------------------
 * The linears the planner runs in FP8 (FP8_LINEAR[], planner/fp8.c's
 * plan_fp8_layer: attention's QKV and output projection, the MLP's up and
 * down; not QK^T / PV, not the LM head, not the first and last block's
 * under first_last_bf16) quantise both operands of their forward, dX and
 * dW GEMMs from the fp32 values (E4M3; the output gradient in E5M2 under
 * format hybrid) and accumulate in fp32 (prt_fp8_gemm); master weights,
 * gradients, optimizer state and checkpoints stay fp32. prt_linear_* in
 * the layers below are routed here; other layers fall through to them.
 *
 * Layout invariance: a scale is taken over the same elements on every
 * layout. A scale block that a TP split cuts (a tensorwise tensor split
 * over TP; a rowwise row whose K runs across the split) has its amax
 * MAX-all-reduced over the TP group before the cast. Blockwise and MX
 * tiles never straddle a split (emit refuses a shard width that is not a
 * multiple of the tile). Micro-batches are whole on every rank (DP and PP
 * split whole micro-batches, ZeRO-3 gathers whole weights, SP gathers the
 * rows before a GEMM), so a tensorwise scale of an activation is one
 * micro-batch's: the single-rank run must use the same micro_batch.
 * Recipe delayed (FP8_DELAYED) casts with the scale of its tensor role's
 * amax history instead and records the amax of its shard; the step's
 * amaxes are MAX-reduced over every rank at the end of the step (below),
 * so its scales are the whole global batch's on every layout.
 * The CUDA build (PRT_CUDA; `build --target cuda` takes every recipe;
 * delayed's histories are updated on the host, fp8_delayed_scale) runs the GEMMs through
 * cuBLASLt (prt_fp8_gemm_tn, each recipe's scales as a cuBLASLt scale
 * mode), whose FP8 kernels take K-major operands only: the weight's second
 * copy is the transpose of its first under one scale (TE's fp8 weight and
 * transpose, kept even where the plan's device would read either major)
 * and, with per-block scales, the transpose of W quantised along o (the
 * blocks run along each GEMM's K, as the CPU's second copy), and dW's
 * operands, dY and x quantised along the tokens, are transposed, scales
 * and all, before their GEMM; the bias
 * and its gradient are kernels of their own (prt_bias_add, _grad). Every FP8 copy
 * (the kept weights, a GEMM's operands, their scales, the histories) is
 * planrt's allocator's kind fp8, as the planner counts it (fp8_bytes). */
#include <stdlib.h>
#include <string.h>

/* How TP splits one GEMM operand, relative to that GEMM's K. */
typedef enum {
    FP8_WHOLE,     /* every TP rank holds all of it */
    FP8_SPLIT_K,   /* its K extent is this rank's slice */
    FP8_SPLIT_MN,  /* its other extent (rows of the output) is this rank's slice */
} Fp8Split;

/* Whether a block of cfg's recipe spans the TP split of an operand split so. */
static bool fp8_block_spans(const prt_fp8_cfg *cfg, Fp8Split split)
{
    if (TP == 1 || split == FP8_WHOLE) return false;
    if (cfg->recipe == PRT_FP8_TENSORWISE) return true;   /* one block: the whole tensor */
    if (cfg->recipe == PRT_FP8_ROWWISE) return split == FP8_SPLIT_K;   /* one block per K-vector */
    return false;   /* blockwise, mxfp8: tiles inside a shard (emit checks the widths) */
}

#if FP8_DELAYED
/* ---- delayed scaling (recipe delayed) ---------------------------------------
 * Transformer Engine's DelayedScaling (v2.20: transformer_engine/common/
 * recipe/__init__.py and delayed_scaling.cu's amax_and_scale_update):
 * every FP8 tensor has a window of its last amax_history_len amaxes; a
 * step's casts use the scale computed at the end of the step before,
 * (fp8_max * 2^-margin) / max(window) ("max" algorithm, margin 0), the
 * previous scale when that max is 0 or not finite, 1 before any step.
 * Here a tensor is a role of one linear: its input x, its weight W and its
 * output gradient dY (FP8_HISTORY[], index fp8_hist), E4M3 or, for dY
 * under format hybrid, E5M2 (max 448, 57344).
 *
 * Where this differs from TE, for layout invariance: TE reduces a forward
 * amax over its amax_reduction_group (the DP x TP group by default) and
 * updates the histories after every forward (each micro-batch, in
 * autocast's exit). Here a step records the max over all its casts of a
 * role (every micro-batch, the forward's and the backward's casts of the
 * same x or W, every recomputation) and the shards of each rank, and
 * fp8_history_step MAX-reduces those over the whole world once the step is
 * done, before it updates the histories: the amax pushed for step k is the
 * global batch's on every layout (dp, tp, pp, ZeRO and the micro-batch
 * split alike; stages that do not hold a layer add 0), and every rank
 * holds the same histories, which world rank 0 writes into checkpoints
 * (prt_fp8_state_save). Per-step, not per-micro-batch, updates are what
 * makes the micro-batch count of a layout leave the scales unchanged. */
enum { FP8_ROLE_X, FP8_ROLE_W, FP8_ROLE_DY, FP8_ROLES };
/* The histories of the FP8 linears alone, [FP8 layer][first or second
 * linear][role]; their windows from planrt's allocator (kind fp8: the
 * planner's fp8_bytes counts them on every rank). */
static prt_fp8_history FP8_HISTORY[N_LAYERS * 2 * FP8_ROLES];
static int FP8_HIST_AT[N_LAYERS];   /* a layer's first history, -1: not an FP8 layer */
static size_t FP8_N_HIST;           /* in use: 2 linears x 3 roles per FP8 layer */

/* The history of role of L's first (col) or second linear. */
static prt_fp8_history *fp8_hist(const LayerSpec *L, bool col, int role)
{
    return &FP8_HISTORY[FP8_HIST_AT[L - LAYERS] + (col ? 0 : 1) * FP8_ROLES + role];
}

#ifdef PRT_CUDA
/* The CUDA build casts on the device and updates the histories on the host
 * once a step (their windows, counts and heads as the CPU build's, in host
 * memory, as prt_fp8_state_save reads them): a cast's amax and its scale
 * meet on the device, in FP8_PENDING[i] (history i's amax this step so
 * far) and FP8_SCALE[i] (its scale this step), planrt's kind fp8
 * (prt_fp8_delayed_scale); the step's end all-reduces the pending amaxes,
 * copies them back once and the new scales out. */
static float *FP8_PENDING, *FP8_SCALE;

/* Every history's scale to the device (after an update or a resume). */
static void fp8_scales_out(void)
{
    static float scale[N_LAYERS * 2 * FP8_ROLES];
    for (size_t i = 0; i < FP8_N_HIST; i++) scale[i] = FP8_HISTORY[i].scale;
    CHECK(prt_copy_to_device(FP8_SCALE, scale, FP8_N_HIST * sizeof(float)));
}
#define fp8_window_alloc(bytes) malloc(bytes)
#define fp8_window_free(p) free(p)
#else
#define fp8_window_alloc(bytes) prt_mem_alloc(PRT_MEM_FP8, bytes)
#define fp8_window_free(p) prt_mem_free(p)
#endif

/* Empty windows and scale 1, TE's initial amax_history and scale. */
static void fp8_history_init(void)
{
    FP8_N_HIST = 0;
    for (int l = 0; l < N_LAYERS; l++) {
        FP8_HIST_AT[l] = FP8_LINEAR[l] ? (int)FP8_N_HIST : -1;
        for (int i = 0; FP8_LINEAR[l] && i < 2 * FP8_ROLES; i++, FP8_N_HIST++) {
            float *w = (float *)fp8_window_alloc(FP8_AMAX_HISTORY_LEN * sizeof(float));
            if (!w) prt_run_fail(R.c, "fp8 amax history", PRT_ERR_NOMEM);
            CHECK(prt_fp8_history_init(&FP8_HISTORY[FP8_N_HIST], w, FP8_AMAX_HISTORY_LEN));
        }
    }
#ifdef PRT_CUDA
    if (!FP8_N_HIST) return;
    FP8_PENDING = (float *)prt_mem_alloc(PRT_MEM_FP8, FP8_N_HIST * sizeof(float));
    FP8_SCALE = (float *)prt_mem_alloc(PRT_MEM_FP8, FP8_N_HIST * sizeof(float));
    if (!FP8_PENDING || !FP8_SCALE) prt_run_fail(R.c, "prt_mem_alloc (fp8 amaxes and scales)", PRT_ERR_NOMEM);
    CHECK(prt_zero(FP8_PENDING, FP8_N_HIST * sizeof(float)));
    fp8_scales_out();
#endif
}

static void fp8_history_free(void)
{
    for (size_t i = 0; i < FP8_N_HIST; i++) fp8_window_free(FP8_HISTORY[i].amax);
#ifdef PRT_CUDA
    prt_mem_free(FP8_PENDING), prt_mem_free(FP8_SCALE);
    FP8_PENDING = FP8_SCALE = NULL;
#endif
    FP8_N_HIST = 0;
}

/* A delayed cast's scale into s[0], where prt_fp8_amax left the amax of
 * its shard, which history h records (reduced at the step's end). */
static void fp8_delayed_scale(prt_fp8_history *h, float *s)
{
#ifdef PRT_CUDA
    size_t i = (size_t)(h - FP8_HISTORY);
    prt_fp8_delayed_scale(s, FP8_PENDING + i, FP8_SCALE + i);
#else
    prt_fp8_history_record(h, s[0]);
    s[0] = h->scale;
#endif
}

/* The end of a step: every role's amax over the world, pushed, and the
 * next step's scale in its format (the gradient's E5M2 under hybrid). */
static void fp8_history_step(void)
{
    static float amax[N_LAYERS * 2 * FP8_ROLES];
    if (!FP8_N_HIST) return;   /* first_last_bf16 on a model of two blocks */
#ifdef PRT_CUDA
    CHECK(prt_all_reduce(R.c->world, FP8_PENDING, FP8_PENDING, FP8_N_HIST, PRT_FP32, PRT_MAX));
    CHECK(prt_copy_to_host(amax, FP8_PENDING, FP8_N_HIST * sizeof(float)));
    CHECK(prt_zero(FP8_PENDING, FP8_N_HIST * sizeof(float)));
#else
    for (size_t i = 0; i < FP8_N_HIST; i++) amax[i] = FP8_HISTORY[i].pending;
    CHECK(prt_all_reduce(R.c->world, amax, amax, FP8_N_HIST, PRT_FP32, PRT_MAX));
#endif
    prt_fp8_linear_cfg cfg = prt_fp8_linear_default(FP8_RECIPE, FP8_HYBRID);
    for (size_t i = 0; i < FP8_N_HIST; i++) {
        int role = (int)(i % FP8_ROLES);
        FP8_HISTORY[i].pending = amax[i];
        prt_fp8_history_update(&FP8_HISTORY[i], role == FP8_ROLE_X ? &cfg.act : role == FP8_ROLE_W ? &cfg.weight
                                                                                                   : &cfg.grad);
    }
#ifdef PRT_CUDA
    fp8_scales_out();
#endif
}
#else
#define fp8_hist(L, col, role) NULL   /* current scaling: no history */
#endif

/* t = x (rows, cols) quantised with blocks along k; t's codes and scales
 * come from planrt's allocator (kind fp8; fp8_free). The amaxes are taken
 * into t's scale array, reduced over TP where a block spans the split (so
 * each rank casts its slice with the whole block's scale), turned into
 * scales and, by the cast, into their inverses, in place; recipe delayed
 * casts with h's scale and records its shard's amax in h (reduced at the
 * step's end). */
static void fp8_quantize(prt_fp8_tensor *t, const prt_act *x, const prt_fp8_cfg *cfg, prt_fp8_kdim k,
                         size_t rows, size_t cols, Fp8Split split, prt_fp8_history *h)
{
    CHECK(prt_fp8_grid_of(&t->g, cfg, rows, cols, k));
    t->fmt = cfg->fmt;
    size_t nb = prt_fp8_nblocks(&t->g);
    t->q = (uint8_t *)prt_mem_alloc(PRT_MEM_FP8, rows * cols);
    t->scale_inv = (float *)prt_mem_alloc(PRT_MEM_FP8, nb * sizeof(float));
    if (!t->q || !t->scale_inv) prt_run_fail(R.c, "prt_mem_alloc (fp8 operand)", PRT_ERR_NOMEM);
    float *s = t->scale_inv;   /* amaxes, then scales, then (the cast) their inverses */
    prt_fp8_amax(s, x, &t->g);
#if FP8_DELAYED
    if (cfg->recipe == PRT_FP8_DELAYED)   /* one block: the tensor */
        fp8_delayed_scale(h, s);
    else
#endif
    {
        (void)h;
        if (fp8_block_spans(cfg, split)) CHECK(prt_all_reduce(R.c->tp, s, s, nb, PRT_FP32, PRT_MAX));
        prt_fp8_scales(s, s, nb, cfg);
    }
    prt_fp8_cast(t, x, s, cfg->mode);
}

static void fp8_free(prt_fp8_tensor *t)
{
    prt_mem_free(t->q), prt_mem_free(t->scale_inv);
    t->q = NULL, t->scale_inv = NULL;
}

#ifdef PRT_CUDA
/* dst = src transposed, codes and scales, in planrt's allocator (kind
 * fp8): the K-major operand cuBLASLt's FP8 GEMM takes. */
static void fp8_transposed(prt_fp8_tensor *dst, const prt_fp8_tensor *src)
{
    dst->q = (uint8_t *)prt_mem_alloc(PRT_MEM_FP8, src->g.rows * src->g.cols);
    dst->scale_inv = (float *)prt_mem_alloc(PRT_MEM_FP8, prt_fp8_nblocks(&src->g) * sizeof(float));
    if (!dst->q || !dst->scale_inv) prt_run_fail(R.c, "prt_mem_alloc (fp8 transpose)", PRT_ERR_NOMEM);
    CHECK(prt_fp8_transpose(dst, src));
}
#endif

/* Whether L's linear with weight w (its first: column-parallel; else its
 * second: row-parallel) runs in FP8, and which it is. */
static bool fp8_col(const LayerSpec *L, const prt_act *w) { return w == W(L->w1); }

/* ---- the FP8 weights kept for the step ------------------------------------
 * Transformer Engine quantises each module's weight once a step (its
 * first forward) into the layouts its GEMMs take — on Hopper the weight
 * and its transpose, cuBLASLt's FP8 GEMM being TN only; per-block scales
 * run along K, so those recipes need both on any device — and keeps them
 * until the weights change. So does the program: FP8_LAYOUTS copies
 * (planner/fp8_cost.c plan_fp8_layouts: the plan's device), the forward's
 * along k (K_COLS) and dX's along o (K_ROWS), made at the linear's first
 * use in a step (the optimizer has run since the last: R.step moved) and
 * kept, in planrt's allocator (kind fp8). With one layout (tensorwise or
 * delayed on Blackwell) the one copy serves both: a per-tensor scale does
 * not depend on the axis. Under ZeRO-3 over dp > 1 nothing is kept (a
 * layer's weights exist only while gathered): each GEMM quantises the
 * gathered weight it uses and frees it. The planner counts these bytes
 * (planc_memory: the copies kept, one GEMM's operands, the histories). */
enum { FP8_KEEP_W = !(ZERO >= 3 && DP > 1) };
#ifdef PRT_CUDA
enum { FP8_W_COPIES = 2 };             /* cuBLASLt's FP8 GEMM: K-major operands, so W and W^T */
#else
enum { FP8_W_COPIES = FP8_LAYOUTS };
#endif
typedef struct {
    prt_fp8_tensor t[2];   /* along k (forward), along o (dX) */
    long step;             /* R.step + 1 when made; 0: never */
} Fp8Weight;
static Fp8Weight FP8_W[N_LAYERS][2];   /* [layer][first or second linear] */

/* The weight w (o, k) of L's first (col) or second linear quantised along
 * kd: the kept copy (made now if stale), or into *tmp (ZeRO-3: free it). */
static const prt_fp8_tensor *fp8_weight(const LayerSpec *L, bool col, const prt_act *w, size_t o, size_t k,
                                        prt_fp8_kdim kd, prt_fp8_tensor *tmp)
{
    prt_fp8_linear_cfg cfg = prt_fp8_linear_default(FP8_RECIPE, FP8_HYBRID);
    /* the TP split of each layout relative to its GEMM's K (fp8_block_spans) */
    Fp8Split split[2] = { col ? FP8_SPLIT_MN : FP8_SPLIT_K, col ? FP8_SPLIT_K : FP8_SPLIT_MN };
    prt_fp8_kdim kds[2] = { PRT_FP8_K_COLS, PRT_FP8_K_ROWS };
    int j = kd == PRT_FP8_K_COLS ? 0 : 1;
#ifdef PRT_CUDA
    if (!FP8_KEEP_W) {   /* W along k; dX's W^T: W quantised along o, then transposed */
        fp8_quantize(tmp, w, &cfg.weight, kds[j], o, k, split[j], fp8_hist(L, col, FP8_ROLE_W));
        if (j == 1) {
            prt_fp8_tensor q = *tmp;
            fp8_transposed(tmp, &q);
            fp8_free(&q);
        }
        return tmp;
    }
#else
    if (!FP8_KEEP_W) {
        fp8_quantize(tmp, w, &cfg.weight, kd, o, k, split[j], fp8_hist(L, col, FP8_ROLE_W));
        return tmp;
    }
#endif
    Fp8Weight *c = &FP8_W[L - LAYERS][col ? 0 : 1];
    if (c->step != R.step + 1) {   /* stale: the weights changed since (or never made) */
        for (int i = 0; i < FP8_W_COPIES; i++) {
            fp8_free(&c->t[i]);
#ifdef PRT_CUDA
            if (i == 1) {   /* (k, o): W^T — of the first copy under one scale; per-block
                             * scales run along K, so of W quantised along o */
                if (prt_fp8_nblocks(&c->t[0].g) == 1) {
                    fp8_transposed(&c->t[1], &c->t[0]);
                } else {
                    prt_fp8_tensor q;
                    fp8_quantize(&q, w, &cfg.weight, kds[1], o, k, split[1], fp8_hist(L, col, FP8_ROLE_W));
                    fp8_transposed(&c->t[1], &q);
                    fp8_free(&q);
                }
                continue;
            }
#endif
            fp8_quantize(&c->t[i], w, &cfg.weight, kds[i], o, k, split[i], fp8_hist(L, col, FP8_ROLE_W));
        }
        c->step = R.step + 1;
    }
    if (j < FP8_W_COPIES) return &c->t[j];
    *tmp = c->t[0];   /* one layout: the same codes and scale, read along o */
    CHECK(prt_fp8_grid_of(&tmp->g, &cfg.weight, o, k, kd));
    return tmp;
}

static void fp8_weights_free(void)
{
    for (int l = 0; l < N_LAYERS; l++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) fp8_free(&FP8_W[l][i].t[j]);
}

/* out (n, o) = x (n, k) w^T + b, as prt_linear_fwd. */
static void fp8_linear_fwd(const LayerSpec *L, prt_act *out, const prt_act *x, const prt_act *w,
                           const prt_act *b, size_t n, size_t k, size_t o)
{
    if (!FP8_LINEAR[L - LAYERS]) { prt_linear_fwd(out, x, w, b, n, k, o); return; }
    bool col = fp8_col(L, w);
    prt_fp8_linear_cfg cfg = prt_fp8_linear_default(FP8_RECIPE, FP8_HYBRID);
    prt_fp8_tensor A, tmp;
    memset(&tmp, 0, sizeof tmp);   /* fp8_weight fills it only when no copy is kept */
    fp8_quantize(&A, x, &cfg.act, PRT_FP8_K_COLS, n, k, col ? FP8_WHOLE : FP8_SPLIT_K, fp8_hist(L, col, FP8_ROLE_X));
    const prt_fp8_tensor *Bw = fp8_weight(L, col, w, o, k, PRT_FP8_K_COLS, &tmp);
#ifdef PRT_CUDA
    CHECK(prt_fp8_gemm_tn(out, false, &A, Bw, n, o, k, 0.0f));
#else
    CHECK(prt_fp8_gemm(out, &A, false, Bw, true, n, o, k, 0.0f));
#endif
    fp8_free(&A);
    if (!FP8_KEEP_W) fp8_free(&tmp);
    if (b) prt_bias_add(out, b, n, o);   /* the bias in fp32 after the GEMM (TE's epilogue) */
}

/* dx (n, k) = dout (n, o) w (o, k): this GEMM's K is o. */
static void fp8_linear_bwd_input(const LayerSpec *L, prt_act *dx, const prt_act *dout, const prt_act *w,
                                 size_t n, size_t k, size_t o)
{
    if (!FP8_LINEAR[L - LAYERS]) { prt_linear_bwd_input(dx, dout, w, n, k, o); return; }
    bool col = fp8_col(L, w);
    prt_fp8_linear_cfg cfg = prt_fp8_linear_default(FP8_RECIPE, FP8_HYBRID);
    prt_fp8_tensor A, tmp;
    memset(&tmp, 0, sizeof tmp);   /* fp8_weight fills it only when no copy is kept */
    fp8_quantize(&A, dout, &cfg.grad, PRT_FP8_K_COLS, n, o, col ? FP8_SPLIT_K : FP8_WHOLE,
                 fp8_hist(L, col, FP8_ROLE_DY));
    const prt_fp8_tensor *Bw = fp8_weight(L, col, w, o, k, PRT_FP8_K_ROWS, &tmp);
#ifdef PRT_CUDA
    CHECK(prt_fp8_gemm_tn(dx, false, &A, Bw, n, k, o, 0.0f));   /* Bw: W^T (k, o) */
#else
    CHECK(prt_fp8_gemm(dx, &A, false, Bw, false, n, k, o, 0.0f));
#endif
    fp8_free(&A);
    if (!FP8_KEEP_W) fp8_free(&tmp);
}

/* dw (o, k) += dout^T x: this GEMM's K is n, the tokens; db += the
 * column sums of dout in fp32. col: the first (column-parallel) linear. */
static void fp8_dw(const LayerSpec *L, bool col, float *dw, float *db, const prt_act *dout, const prt_act *x,
                   size_t n, size_t k, size_t o)
{
    prt_fp8_linear_cfg cfg = prt_fp8_linear_default(FP8_RECIPE, FP8_HYBRID);
    prt_fp8_tensor A, Bx;
    (void)L;   /* its histories alone (recipe delayed) */
    fp8_quantize(&A, dout, &cfg.grad, PRT_FP8_K_ROWS, n, o, col ? FP8_SPLIT_MN : FP8_WHOLE,
                 fp8_hist(L, col, FP8_ROLE_DY));
#ifdef PRT_CUDA
    prt_fp8_tensor At, Bt;   /* dY^T (o, n), x^T (k, n): K-major along the tokens */
    fp8_transposed(&At, &A);
    fp8_free(&A);
    fp8_quantize(&Bx, x, &cfg.act, PRT_FP8_K_ROWS, n, k, col ? FP8_WHOLE : FP8_SPLIT_MN,
                 fp8_hist(L, col, FP8_ROLE_X));
    fp8_transposed(&Bt, &Bx);
    fp8_free(&Bx);
    CHECK(prt_fp8_gemm_tn(dw, true, &At, &Bt, o, k, n, 1.0f));
    fp8_free(&At), fp8_free(&Bt);
#else
    fp8_quantize(&Bx, x, &cfg.act, PRT_FP8_K_ROWS, n, k, col ? FP8_WHOLE : FP8_SPLIT_MN,
                 fp8_hist(L, col, FP8_ROLE_X));
    CHECK(prt_fp8_gemm(dw, &A, true, &Bx, false, o, k, n, 1.0f));
    fp8_free(&A), fp8_free(&Bx);
#endif
    if (db) prt_bias_grad(db, dout, n, o);
}

#if SPLIT_BWD
static void fp8_linear_bwd_weight(const LayerSpec *L, float *dw, float *db, const prt_act *dout,
                                  const prt_act *x, size_t n, size_t k, size_t o)
{
    if (!FP8_LINEAR[L - LAYERS]) { prt_linear_bwd_weight(dw, db, dout, x, n, k, o); return; }
    fp8_dw(L, dw == G(L->w1), dw, db, dout, x, n, k, o);
}
#endif

#if USES_BWD
static void fp8_linear_bwd(const LayerSpec *L, prt_act *dx, float *dw, float *db, const prt_act *dout,
                           const prt_act *x, const prt_act *w, size_t n, size_t k, size_t o)
{
    if (!FP8_LINEAR[L - LAYERS]) { prt_linear_bwd(dx, dw, db, dout, x, w, n, k, o); return; }
    if (dx) fp8_linear_bwd_input(L, dx, dout, w, n, k, o);
    fp8_dw(L, fp8_col(L, w), dw, db, dout, x, n, k, o);
}
#endif

/* The layers' linears from here on, with their layer L in scope. */
#define prt_linear_fwd(out, x, w, b, n, k, o) fp8_linear_fwd(L, out, x, w, b, n, k, o)
#define prt_linear_bwd_input(dx, dout, w, n, k, o) fp8_linear_bwd_input(L, dx, dout, w, n, k, o)
#define prt_linear_bwd_weight(dw, db, dout, x, n, k, o) fp8_linear_bwd_weight(L, dw, db, dout, x, n, k, o)
#define prt_linear_bwd(dx, dw, db, dout, x, w, n, k, o) fp8_linear_bwd(L, dx, dw, db, dout, x, w, n, k, o)
#endif

#if SLIDING_WINDOW
/* The keys a query attends to: the layer's sliding window, itself
 * included (Mistral; 0 on a layer without one: all keys before it). */
static size_t window_of(const LayerSpec *L) { return L->window; }
#else
/* Every query attends to all keys before it: full causal attention. */
static size_t window_of(const LayerSpec *L) { (void)L; return 0; }
#endif

#if ROPE && ROPE_LOCAL
/* Gemma 3's rule (embedding rope_local_theta): a layer with a sliding
 * window (a local block) rotates by ROPE_LOCAL_PARAMS, unscaled; the
 * global ones by ROPE_PARAMS, with rope_scaling. */
static const prt_rope *rope_of(const LayerSpec *L) { return L->window > 0 ? &ROPE_LOCAL_PARAMS : &ROPE_PARAMS; }
#elif ROPE
/* Every layer rotates by ROPE_PARAMS. */
static const prt_rope *rope_of(const LayerSpec *L) { (void)L; return &ROPE_PARAMS; }
#endif

#if ATTN_SCORES
/* Gemma 2's scores (ATTN_SCORES_OF: scale 1/sqrt(query_pre_attn_scalar),
 * soft-cap cap tanh(s / cap) before the mask): every attention call below
 * is the prt_attention_scores_* one with the layer L's transform. */
#define prt_attention_fwd(out, att, qkv, b, t, h, hkv, d, w) \
    prt_attention_scores_fwd(out, att, qkv, b, t, h, hkv, d, w, ATTN_SCORES_OF[L - LAYERS])
#define prt_attention_bwd(dqkv, datt, dout, qkv, att, rc, b, t, h, hkv, d, w) \
    prt_attention_scores_bwd(dqkv, datt, dout, qkv, att, rc, b, t, h, hkv, d, w, ATTN_SCORES_OF[L - LAYERS])
#endif

#if MLA
/* ---- multi-head latent attention (DeepSeek-V2; the model's `attention {
 * kind mla }`): prt_mla_fwd / prt_mla_bwd (runtime/ops/mla.c) between the
 * pre-norm and o_proj. TP as the planner's rule (planner/model.c,
 * mla_work): the up projections q_b (or q_proj) and kv_b are split by
 * heads, o_proj by its input columns (row-parallel, summed over TP as the
 * MHA's output); the down projections q_a and kv_a, their biases and the
 * latent norms are whole on every rank, which back-propagates only its
 * heads' share of the latents: PARAMS marks them tp_sum and the step's
 * SP_NORM_REDUCE sums their gradients over TP. The layer's kept tensors
 * (prt_mla_kept) lie in a->h, L->width elements a row (mla_kept's order;
 * planner/model.c counts the same), the o_proj input in a->a, the
 * probabilities in a->att, the latent norms' rstd in a->mr; the op's
 * workspace is the backward scratch S.dh (MAX_WIDTH a row: plan_widest
 * counts prt_mla_ws_elems' per row). */

/* The op's shapes for layer L on this rank. */
static prt_mla_dims mla_dims(const LayerSpec *L)
{
    const MlaSpec *M = &MLA_OF[L - LAYERS];
    prt_mla_dims d = { B, T, (size_t)L->h, C, M->q_lora, M->kv_lora, M->rope, M->nope, M->v,
                       window_of(L), NORM_EPS, &ROPE_PARAMS };
    return d;
}

/* Layer L's weights (this rank's slices). */
static prt_mla_w mla_weights(const LayerSpec *L)
{
    const MlaSpec *M = &MLA_OF[L - LAYERS];
    prt_mla_w w = { W(M->wqa), W(M->bqa), W(M->gqa), W(M->wqb), W(M->wkva), W(M->bkva), W(M->gkva), W(M->wkvb) };
    return w;
}

#if USES_BWD
/* Their fp32 gradients. */
static prt_mla_grad mla_grads(const LayerSpec *L)
{
    const MlaSpec *M = &MLA_OF[L - LAYERS];
    prt_mla_grad g = { G(M->wqa), G(M->bqa), G(M->gqa), G(M->wqb), G(M->wkva), G(M->bkva), G(M->gkva), G(M->wkvb) };
    return g;
}
#endif

/* The kept tensors in a->h, N rows each: qa, qn (q_lora), kva (kv_lora +
 * rope), kvl, kvn (kv_lora), qkv (3 h D), opad (h D), D = max(nope +
 * rope, v): emit.c's width for the layer is their sum. att: the
 * probabilities (a->att, or the shared S.att under selective
 * recomputation). */
static prt_mla_kept mla_kept(const LayerSpec *L, const LayerActs *a, prt_act *att)
{
    const MlaSpec *M = &MLA_OF[L - LAYERS];
    size_t H = (size_t)L->h, D = M->nope + M->rope > M->v ? M->nope + M->rope : M->v;
    prt_mla_kept k;
    prt_act *p = a->h;
    k.qa = p; p += N * M->q_lora;
    k.qn = p; p += N * M->q_lora;
    k.kva = p; p += N * (M->kv_lora + M->rope);
    k.kvl = p; p += N * M->kv_lora;
    k.kvn = p; p += N * M->kv_lora;
    k.qkv = p; p += N * 3 * H * D;
    k.opad = p;
    k.qr = a->mr; k.kvr = a->mr + N;
    k.att = att;
    return k;
}

static void mla_attention_fwd(const LayerSpec *L, LayerActs *a, prt_act *y)
{
    enter(L, "attention (mla) forward");
#if RECOMPUTE_SELECTIVE
    prt_act *att = S.att;      /* selective recomputation: the backward rebuilds the probabilities */
#else
    prt_act *att = a->att;
#endif
    prt_act *p = partials(y);
    norm_fwd(L, a->ln, a->mean, a->rstd, a->x);
    const prt_act *in = all_rows(a);
    prt_mla_kept k = mla_kept(L, a, att);
    prt_mla_w w = mla_weights(L);
    prt_mla_dims d = mla_dims(L);
    prt_mla_fwd(a->a, &k, S.dh, in, &w, &d);                            /* latents, up projections, core */
    prt_linear_fwd(p, a->a, W(L->w2), R.c->coord.tp == 0 ? W(L->b2) : NULL, N, L->inner, C); /* o_proj:
                                                                           row-parallel partial sums */
    sum_partials(p, y);
    prt_residual_add(y, a->x, y, NL * C);
}

/* The op's kept tensors, for its backward: under selective recomputation
 * the attention core runs again on the kept padded q, k, v first (its
 * probabilities into the shared S.att; opad again, bit for bit). */
static prt_mla_kept mla_kept_bwd(const LayerSpec *L, const LayerActs *a)
{
#if RECOMPUTE_SELECTIVE
    prt_mla_kept k = mla_kept(L, a, S.att);
    prt_attention_fwd(k.opad, S.att, k.qkv, B, T, (size_t)L->h, (size_t)L->h, (size_t)L->d,
                      window_of(L));                                    /* the core again: its probabilities */
#else
    prt_mla_kept k = mla_kept(L, a, a->att);
#endif
    return k;
}

#if USES_BWD
/* The whole backward. */
static void mla_attention_bwd(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    enter(L, "attention (mla) backward");
#if SP
    const prt_act *dy = grad_rows(d, S.dyf);
#else
    const prt_act *dy = d;
#endif
    prt_linear_bwd(S.da, G(L->w2), G(L->b2), dy, a->a, W(L->w2), N, L->inner, C); /* o_proj: no comm */
    prt_mla_kept k = mla_kept_bwd(L, a);
#if RECOMPUTE_LN
    norm_rebuilt(L, a);                                                 /* layernorm: its output again */
#endif
    prt_mla_w w = mla_weights(L);
    prt_mla_grad g = mla_grads(L);
    prt_mla_dims dm = mla_dims(L);
    prt_mla_bwd(S.dlnf, &g, S.dh, S.da, rows_in(a), &k, &w, &dm);       /* replicated weights: partial over TP */
    sum_input_grad(S.dlnf, S.dln);     /* this rank's heads' share of the input gradient: summed over TP */
    norm_bwd(L, d, S.dln, a->x, a->mean, a->rstd);
}
#endif

#if SPLIT_BWD
/* zb-h1 with MLA: the op computes its input and weight gradients in one
 * pass, so B runs all of it but o_proj's weight gradient, the weights'
 * gradients into the slot's a->gml (not the bucket, which stays closed
 * until W); W computes o_proj's from the kept output gradient a->dy and
 * adds a->gml and the pre-norm's gln. planner/model.c's act_split counts
 * a->dy, a->gml and gln. */

/* Elements of a->gml: this rank's slices of the layer's MLA tensors. */
static size_t mla_grad_numel(const LayerSpec *L)
{
    const MlaSpec *M = &MLA_OF[L - LAYERS];
    const int id[] = { M->wqa, M->bqa, M->gqa, M->wqb, M->wkva, M->bkva, M->gkva, M->wkvb };
    size_t n = 0;
    for (size_t i = 0; i < sizeof id / sizeof id[0]; i++)
        if (id[i] >= 0) n += prt_param_rows(R.m, id[i]) * prt_param_cols(R.m, id[i]);
    return n;
}

/* Walk a->gml in MLA_OF's order: with add false point g into it, with
 * add true add each part into its tensor's gradient. */
static void mla_grads_aside(const LayerSpec *L, const LayerActs *a, prt_mla_grad *g, bool add)
{
    const MlaSpec *M = &MLA_OF[L - LAYERS];
    const int id[] = { M->wqa, M->bqa, M->gqa, M->wqb, M->wkva, M->bkva, M->gkva, M->wkvb };
    float **at[] = { &g->wqa, &g->bqa, &g->gqa, &g->wqb, &g->wkva, &g->bkva, &g->gkva, &g->wkvb };
    float *p = a->gml;
    for (size_t i = 0; i < sizeof id / sizeof id[0]; i++) {
        *at[i] = NULL;
        if (id[i] < 0) continue;
        size_t n = prt_param_rows(R.m, id[i]) * prt_param_cols(R.m, id[i]);
        if (add) prt_grad_add(G(id[i]), p, n);
        else *at[i] = p;
        p += n;
    }
}

static void mla_attention_bwd_input(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    enter(L, "attention (mla) backward, input half");
    grad_rows(d, a->dy);                                                /* kept for o_proj's weight pass */
    prt_linear_bwd_input(S.da, a->dy, W(L->w2), N, L->inner, C);
    prt_mla_kept k = mla_kept_bwd(L, a);
#if RECOMPUTE_LN
    norm_rebuilt(L, a);                                                 /* layernorm: its output again */
#endif
    prt_mla_w w = mla_weights(L);
    prt_mla_grad g;
    mla_grads_aside(L, a, &g, false);
    CHECK(prt_zero(a->gml, mla_grad_numel(L) * sizeof(float)));
    prt_mla_dims dm = mla_dims(L);
    prt_mla_bwd(S.dlnf, &g, S.dh, S.da, rows_in(a), &k, &w, &dm);       /* weights' gradients aside */
    sum_input_grad(S.dlnf, S.dln);     /* this rank's heads' share of the input gradient: summed over TP */
    norm_bwd_kept(L, a, d, S.dln);
}

static void mla_attention_bwd_weight(const LayerSpec *L, LayerActs *a)
{
    enter(L, "attention (mla) backward, weight half");
    prt_linear_bwd_weight(G(L->w2), G(L->b2), a->dy, a->a, N, L->inner, C);
    prt_mla_grad g;
    mla_grads_aside(L, a, &g, true);
    norm_grads_add(L, a);
}
#endif
#endif

/* Attention sublayer, tensor-parallel as Megatron-LM (Shoeybi et al.
 * 2019): QKV is column-parallel (this rank computes its L->h query and
 * L->hkv key/value heads without communication), the output projection is
 * row-parallel (a partial sum over this rank's heads), summed over TP.
#if HAS_BIAS
 * The output bias is added on TP rank 0 only, so the sum holds it once.
#endif
 */
static void attention_fwd(const LayerSpec *L, LayerActs *a, prt_act *y)
{
#if MLA
    mla_attention_fwd(L, a, y);   /* every attention layer of the model is MLA (emit.c) */
    return;
#endif
    enter(L, "attention forward");
#if CONTEXT_PARALLEL && RECOMPUTE_SELECTIVE
    prt_act *att = S.att;      /* selective recomputation: the backward runs the CP attention again */
#elif CONTEXT_PARALLEL
    prt_act *att = a->att;     /* what the CP attention saves for its backward */
#elif RECOMPUTE_SELECTIVE && DROPOUT
    prt_act *att = S.att, *attd = S.attd;   /* selective recomputation: the backward rebuilds them */
    uint8_t *att_mask = S.att_mask;
#elif RECOMPUTE_SELECTIVE
    prt_act *att = S.att;      /* selective recomputation: the backward rebuilds the scores */
#elif DROPOUT
    prt_act *att = a->att, *attd = a->attd;
    uint8_t *att_mask = a->att_mask;
#else
    prt_act *att = a->att;
#endif
#if POST_NORM
    prt_act *o = branch_out(L, a, y), *p = partials(o);                 /* o: the branch output */
    pre_norm_fwd(L, a);
#else
    prt_act *p = partials(y);
    norm_fwd(L, a->ln, a->mean, a->rstd, a->x);
#endif
    const prt_act *in = all_rows(a);
    prt_linear_fwd(a->h, in, W(L->w1), W(L->b1), N, C, L->width);       /* column-parallel QKV */
#if QK_NORM
    qk_norm_fwd(L, a);                                                  /* q/k norm, before RoPE */
#endif
#if ROPE && CONTEXT_PARALLEL
    /* rotary on q and k at global positions, interleaved pairs (2i, 2i+1): ROPE_PARAMS says more */
    prt_rope_cp_fwd(a->h, B, T, (size_t)L->h, (size_t)L->hkv, (size_t)L->d, rope_of(L), SEQ, CP,
                    R.c->coord.cp);
#elif ROPE
    /* rotary positions on q and k, interleaved pairs (2i, 2i+1): ROPE_PARAMS says why not HF's halves */
    prt_rope_fwd(a->h, B, T, (size_t)L->h, (size_t)L->hkv, (size_t)L->d, rope_of(L));
#endif
#if CONTEXT_PARALLEL
    /* CP: this rank's queries against the whole sequence's keys, from the CP group (cp_comm) */
    CHECK(prt_cp_attention_fwd(R.c->cp, CP_FORM, a->a, att, a->h, B, T, (size_t)L->h, (size_t)L->hkv,
                               (size_t)L->d, window_of(L)));
#elif DROPOUT
    prt_attention_probs_fwd(att, a->h, B, T, (size_t)L->h, (size_t)L->hkv, (size_t)L->d, window_of(L));
    drop_probs(L, attd, att_mask, att);                                 /* attention dropout */
    prt_attention_context_fwd(a->a, attd, a->h, B, T, (size_t)L->h, (size_t)L->hkv, (size_t)L->d);
#else
    prt_attention_fwd(a->a, att, a->h, B, T, (size_t)L->h, (size_t)L->hkv, (size_t)L->d, window_of(L));
#endif
#if HAS_BIAS
    prt_linear_fwd(p, a->a, W(L->w2), R.c->coord.tp == 0 ? W(L->b2) : NULL, N, L->inner, C); /* row-parallel: partial sums */
#else
    prt_linear_fwd(p, a->a, W(L->w2), NULL, N, L->inner, C);             /* row-parallel: partial sums */
#endif
#if POST_NORM
    sum_partials(p, o);
    post_norm_fwd(L, a, y);                                             /* post-norm (post, sandwich) */
#else
    sum_partials(p, y);
#endif
#if DROPOUT
    drop_output(L, y, a->mask);                                         /* residual-branch dropout */
#endif
    prt_residual_add(y, a->x, y, NL * C);
}

#if DROPOUT
/* dqkv from da, the gradient of the context: through the dropped
 * probabilities (redrawn first under selective recomputation: the same
 * key draws the same mask). */
static void attention_core_bwd(const LayerSpec *L, LayerActs *a, prt_act *dqkv, size_t h, size_t hkv,
                               size_t hs)
{
#if RECOMPUTE_SELECTIVE
    prt_attention_probs_fwd(S.att, a->h, B, T, h, hkv, hs, window_of(L));   /* scores recomputed */
    drop_probs(L, S.attd, S.att_mask, S.att);
    prt_attention_dropout_bwd(dqkv, S.datt, S.da, a->h, S.att, S.attd, S.att_mask, DROPOUT_P,
                              B, T, h, hkv, hs, window_of(L));
#else
    prt_attention_dropout_bwd(dqkv, S.datt, S.da, a->h, a->att, a->attd, a->att_mask, DROPOUT_P,
                              B, T, h, hkv, hs, window_of(L));
#endif
}
#endif

#if CONTEXT_PARALLEL && RECOMPUTE_SELECTIVE
/* dqkv from da through the CP attention. Selective recomputation kept
 * none of its saved tensors: the forward runs again over the CP group
 * first (its output into a->a again, bit for bit the kept one: the same
 * inputs and the same order of operations), as the planner's
 * act_selective drops the core and counts its recomputation. */
static void cp_attention_bwd(const LayerSpec *L, LayerActs *a, prt_act *dqkv, size_t h, size_t hkv,
                             size_t hs)
{
    CHECK(prt_cp_attention_fwd(R.c->cp, CP_FORM, a->a, S.att, a->h, B, T, h, hkv, hs, window_of(L)));
    CHECK(prt_cp_attention_bwd(R.c->cp, CP_FORM, dqkv, S.da, a->h, a->a, S.att, B, T, h, hkv, hs,
                               window_of(L)));                          /* CP: dK, dV back to their owners */
}
#elif CONTEXT_PARALLEL
/* dqkv from da through the CP attention, from what its forward saved. */
static void cp_attention_bwd(const LayerSpec *L, LayerActs *a, prt_act *dqkv, size_t h, size_t hkv,
                             size_t hs)
{
    CHECK(prt_cp_attention_bwd(R.c->cp, CP_FORM, dqkv, S.da, a->h, a->a, a->att, B, T, h, hkv, hs,
                               window_of(L)));                          /* CP: dK, dV back to their owners */
}
#endif

#if USES_BWD
/* d holds the gradient of the sublayer's output and leaves holding that of
 * its input (NL rows). */
static void attention_bwd(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    size_t h = (size_t)L->h, hkv = (size_t)L->hkv, hs = (size_t)L->d;
#if RECOMPUTE_SOME
    if (REBUILT[L - LAYERS]) attention_fwd(L, a, S.tmp);   /* full recomputation of this block: rebuild from x */
#elif RECOMPUTE_FULL
    attention_fwd(L, a, S.tmp);                                         /* full recomputation: rebuild from x */
#endif
#if MLA
    mla_attention_bwd(L, a, d);
    return;
#endif
    enter(L, "attention backward");
#if POST_NORM && DROPOUT
    const prt_act *g = post_norm_bwd(L, a, drop_output_bwd(d, a->mask), S.dln);   /* through the post-norm */
#elif POST_NORM
    const prt_act *g = post_norm_bwd(L, a, d, S.dln);                   /* through the post-norm */
#endif
#if POST_NORM && SP
    const prt_act *dy = grad_rows(g, S.dyf);
#elif POST_NORM
    const prt_act *dy = g;
#elif SP && DROPOUT
    const prt_act *dy = grad_rows(drop_output_bwd(d, a->mask), S.dyf);
#elif SP
    const prt_act *dy = grad_rows(d, S.dyf);
#elif DROPOUT
    const prt_act *dy = drop_output_bwd(d, a->mask);
#else
    const prt_act *dy = d;
#endif
    prt_linear_bwd(S.da, G(L->w2), G(L->b2), dy, a->a, W(L->w2), N, L->inner, C); /* row-parallel: no comm */
#if CONTEXT_PARALLEL
    cp_attention_bwd(L, a, S.dh, h, hkv, hs);
#elif DROPOUT
    attention_core_bwd(L, a, S.dh, h, hkv, hs);
#elif RECOMPUTE_SELECTIVE
    prt_attention_bwd(S.dh, S.datt, S.da, a->h, S.att, true, B, T, h, hkv, hs, window_of(L));  /* scores recomputed */
#else
    prt_attention_bwd(S.dh, S.datt, S.da, a->h, a->att, false, B, T, h, hkv, hs, window_of(L));
#endif
#if ROPE && CONTEXT_PARALLEL
    prt_rope_cp_bwd(S.dh, B, T, h, hkv, hs, rope_of(L), SEQ, CP, R.c->coord.cp);
#elif ROPE
    prt_rope_bwd(S.dh, B, T, h, hkv, hs, rope_of(L));
#endif
#if QK_NORM
    qk_norm_bwd(L, a, S.dh);                                            /* q/k norm: gains partial over TP */
#endif
#if RECOMPUTE_LN
    norm_rebuilt(L, a);                                                 /* layernorm: its output again */
#endif
    prt_linear_bwd(S.dlnf, G(L->w1), G(L->b1), S.dh, rows_in(a), W(L->w1), N, C, L->width);
    sum_input_grad(S.dlnf, S.dln);     /* column-parallel input gradient: a partial sum over TP */
#if POST_NORM
    pre_norm_bwd(L, a, d, S.dln);
#else
    norm_bwd(L, d, S.dln, a->x, a->mean, a->rstd);
#endif
}
#endif

#if SPLIT_BWD
/* zb-h1's first half: the input gradient only; the output gradients the
 * weight half needs are kept in a->dy and a->dh. */
static void attention_bwd_input(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    size_t h = (size_t)L->h, hkv = (size_t)L->hkv, hs = (size_t)L->d;
#if RECOMPUTE_SOME
    if (REBUILT[L - LAYERS]) attention_fwd(L, a, S.tmp);   /* full recomputation of this block: rebuild from x */
#elif RECOMPUTE_FULL
    attention_fwd(L, a, S.tmp);                                         /* full recomputation: rebuild from x */
#endif
#if MLA
    mla_attention_bwd_input(L, a, d);
    return;
#endif
    enter(L, "attention backward, input half");
#if POST_NORM && DROPOUT
    grad_rows(post_norm_bwd_kept(L, a, drop_output_bwd(d, a->mask), S.dln), a->dy);   /* kept for W */
#elif POST_NORM
    grad_rows(post_norm_bwd_kept(L, a, d, S.dln), a->dy);               /* through the post-norm, kept for W */
#elif DROPOUT
    grad_rows(drop_output_bwd(d, a->mask), a->dy);                      /* kept for the weight pass */
#else
    grad_rows(d, a->dy);                                                /* kept for the weight pass */
#endif
    prt_linear_bwd_input(S.da, a->dy, W(L->w2), N, L->inner, C);
#if CONTEXT_PARALLEL
    cp_attention_bwd(L, a, a->dh, h, hkv, hs);
#elif DROPOUT
    attention_core_bwd(L, a, a->dh, h, hkv, hs);
#elif RECOMPUTE_SELECTIVE
    prt_attention_bwd(a->dh, S.datt, S.da, a->h, S.att, true, B, T, h, hkv, hs, window_of(L));  /* scores recomputed */
#else
    prt_attention_bwd(a->dh, S.datt, S.da, a->h, a->att, false, B, T, h, hkv, hs, window_of(L));
#endif
#if ROPE && CONTEXT_PARALLEL
    prt_rope_cp_bwd(a->dh, B, T, h, hkv, hs, rope_of(L), SEQ, CP, R.c->coord.cp);
#elif ROPE
    prt_rope_bwd(a->dh, B, T, h, hkv, hs, rope_of(L));
#endif
#if QK_NORM
    qk_norm_bwd_kept(L, a, a->dh);                                      /* q/k norm: its gains' gradients aside */
#endif
    prt_linear_bwd_input(S.dlnf, a->dh, W(L->w1), N, C, L->width);
    sum_input_grad(S.dlnf, S.dln);     /* column-parallel input gradient: a partial sum over TP */
    norm_bwd_kept(L, a, d, S.dln);
}

/* zb-h1's second half: the weight gradients, from what the first kept. */
static void attention_bwd_weight(const LayerSpec *L, LayerActs *a)
{
#if RECOMPUTE_SOME
    if (REBUILT[L - LAYERS]) attention_fwd(L, a, S.tmp);   /* full recomputation of this block: rebuild from x */
#elif RECOMPUTE_FULL
    attention_fwd(L, a, S.tmp);                                         /* full recomputation: rebuild from x */
#endif
#if MLA
    mla_attention_bwd_weight(L, a);
    return;
#endif
    enter(L, "attention backward, weight half");
    prt_linear_bwd_weight(G(L->w2), G(L->b2), a->dy, a->a, N, L->inner, C);
#if RECOMPUTE_LN
    norm_rebuilt(L, a);                                                 /* layernorm: its output again */
#endif
    prt_linear_bwd_weight(G(L->w1), G(L->b1), a->dh, rows_in(a), N, C, L->width);
    norm_grads_add(L, a);
}
#endif

#if HAS_MLP || HAS_MOE
/* The MLP's (and each expert's) activation on n rows of h. */
static void mlp_act_fwd(const LayerSpec *L, prt_act *out, const prt_act *h, size_t n)
{
#if MLP_ACTS_MIXED
    switch (L->act) {
    case ACT_SWIGLU: prt_swiglu_fwd(out, h, n, (size_t)L->f); break;
    case ACT_GEGLU:  prt_geglu_fwd(out, h, n, (size_t)L->f); break;
    case ACT_RELU:   prt_relu_fwd(out, h, n * (size_t)L->f); break;
    case ACT_GELU:   prt_gelu_fwd(out, h, n * (size_t)L->f); break;
    }
#elif MLP_SWIGLU
    prt_swiglu_fwd(out, h, n, (size_t)L->f);                            /* SwiGLU */
#elif MLP_GEGLU
    prt_geglu_fwd(out, h, n, (size_t)L->f);                             /* GeGLU */
#elif MLP_RELU
    prt_relu_fwd(out, h, n * (size_t)L->f);                             /* ReLU */
#else
    prt_gelu_fwd(out, h, n * (size_t)L->f);                             /* GELU */
#endif
}

static void mlp_act_bwd(const LayerSpec *L, prt_act *dh, const prt_act *h, const prt_act *da, size_t n)
{
#if MLP_ACTS_MIXED
    switch (L->act) {
    case ACT_SWIGLU: prt_swiglu_bwd(dh, h, da, n, (size_t)L->f); break;
    case ACT_GEGLU:  prt_geglu_bwd(dh, h, da, n, (size_t)L->f); break;
    case ACT_RELU:   prt_relu_bwd(dh, h, da, n * (size_t)L->f); break;
    case ACT_GELU:   prt_gelu_bwd(dh, h, da, n * (size_t)L->f); break;
    }
#elif MLP_SWIGLU
    prt_swiglu_bwd(dh, h, da, n, (size_t)L->f);
#elif MLP_GEGLU
    prt_geglu_bwd(dh, h, da, n, (size_t)L->f);
#elif MLP_RELU
    prt_relu_bwd(dh, h, da, n * (size_t)L->f);
#else
    prt_gelu_bwd(dh, h, da, n * (size_t)L->f);
#endif
}
#endif

#if HAS_MLP
/* MLP sublayer, tensor-parallel as Megatron-LM: the up projection is
 * column-parallel (this rank's L->f hidden units; SwiGLU: its slice of
 * both the gate and the up half), the down projection row-parallel,
 * summed over TP. */

static void mlp_fwd(const LayerSpec *L, LayerActs *a, prt_act *y)
{
    enter(L, "mlp forward");
#if POST_NORM
    prt_act *o = branch_out(L, a, y), *p = partials(o);                 /* o: the branch output */
    pre_norm_fwd(L, a);
#else
    prt_act *p = partials(y);
    norm_fwd(L, a->ln, a->mean, a->rstd, a->x);
#endif
    const prt_act *in = all_rows(a);
    prt_linear_fwd(a->h, in, W(L->w1), W(L->b1), N, C, L->width);       /* column-parallel up */
    mlp_act_fwd(L, a->a, a->h, N);
#if HAS_BIAS
    prt_linear_fwd(p, a->a, W(L->w2), R.c->coord.tp == 0 ? W(L->b2) : NULL, N, L->inner, C); /* row-parallel down */
#else
    prt_linear_fwd(p, a->a, W(L->w2), NULL, N, L->inner, C);             /* row-parallel down */
#endif
#if POST_NORM
    sum_partials(p, o);
    post_norm_fwd(L, a, y);                                             /* post-norm (post, sandwich) */
#else
    sum_partials(p, y);
#endif
#if DROPOUT
    drop_output(L, y, a->mask);                                         /* residual-branch dropout */
#endif
    prt_residual_add(y, a->x, y, NL * C);
}

#if USES_BWD
static void mlp_bwd(const LayerSpec *L, LayerActs *a, prt_act *d)
{
#if RECOMPUTE_SOME
    if (REBUILT[L - LAYERS]) mlp_fwd(L, a, S.tmp);   /* full recomputation of this block: rebuild from x */
#elif RECOMPUTE_FULL
    mlp_fwd(L, a, S.tmp);                                               /* full recomputation: rebuild from x */
#endif
    enter(L, "mlp backward");
#if POST_NORM && DROPOUT
    const prt_act *g = post_norm_bwd(L, a, drop_output_bwd(d, a->mask), S.dln);   /* through the post-norm */
#elif POST_NORM
    const prt_act *g = post_norm_bwd(L, a, d, S.dln);                   /* through the post-norm */
#endif
#if POST_NORM && SP
    const prt_act *dy = grad_rows(g, S.dyf);
#elif POST_NORM
    const prt_act *dy = g;
#elif SP && DROPOUT
    const prt_act *dy = grad_rows(drop_output_bwd(d, a->mask), S.dyf);
#elif SP
    const prt_act *dy = grad_rows(d, S.dyf);
#elif DROPOUT
    const prt_act *dy = drop_output_bwd(d, a->mask);
#else
    const prt_act *dy = d;
#endif
    prt_linear_bwd(S.da, G(L->w2), G(L->b2), dy, a->a, W(L->w2), N, L->inner, C);
    mlp_act_bwd(L, S.dh, a->h, S.da, N);
#if RECOMPUTE_LN
    norm_rebuilt(L, a);                                                 /* layernorm: its output again */
#endif
    prt_linear_bwd(S.dlnf, G(L->w1), G(L->b1), S.dh, rows_in(a), W(L->w1), N, C, L->width);
    sum_input_grad(S.dlnf, S.dln);     /* column-parallel input gradient: a partial sum over TP */
#if POST_NORM
    pre_norm_bwd(L, a, d, S.dln);
#else
    norm_bwd(L, d, S.dln, a->x, a->mean, a->rstd);
#endif
}
#endif

#if SPLIT_BWD
static void mlp_bwd_input(const LayerSpec *L, LayerActs *a, prt_act *d)
{
#if RECOMPUTE_SOME
    if (REBUILT[L - LAYERS]) mlp_fwd(L, a, S.tmp);   /* full recomputation of this block: rebuild from x */
#elif RECOMPUTE_FULL
    mlp_fwd(L, a, S.tmp);                                               /* full recomputation: rebuild from x */
#endif
    enter(L, "mlp backward, input half");
#if POST_NORM && DROPOUT
    grad_rows(post_norm_bwd_kept(L, a, drop_output_bwd(d, a->mask), S.dln), a->dy);   /* kept for W */
#elif POST_NORM
    grad_rows(post_norm_bwd_kept(L, a, d, S.dln), a->dy);               /* through the post-norm, kept for W */
#elif DROPOUT
    grad_rows(drop_output_bwd(d, a->mask), a->dy);                      /* kept for the weight pass */
#else
    grad_rows(d, a->dy);                                                /* kept for the weight pass */
#endif
    prt_linear_bwd_input(S.da, a->dy, W(L->w2), N, L->inner, C);
    mlp_act_bwd(L, a->dh, a->h, S.da, N);
    prt_linear_bwd_input(S.dlnf, a->dh, W(L->w1), N, C, L->width);
    sum_input_grad(S.dlnf, S.dln);     /* column-parallel input gradient: a partial sum over TP */
    norm_bwd_kept(L, a, d, S.dln);
}

static void mlp_bwd_weight(const LayerSpec *L, LayerActs *a)
{
#if RECOMPUTE_SOME
    if (REBUILT[L - LAYERS]) mlp_fwd(L, a, S.tmp);   /* full recomputation of this block: rebuild from x */
#elif RECOMPUTE_FULL
    mlp_fwd(L, a, S.tmp);                                               /* full recomputation: rebuild from x */
#endif
    enter(L, "mlp backward, weight half");
    prt_linear_bwd_weight(G(L->w2), G(L->b2), a->dy, a->a, N, L->inner, C);
#if RECOMPUTE_LN
    norm_rebuilt(L, a);                                                 /* layernorm: its output again */
#endif
    prt_linear_bwd_weight(G(L->w1), G(L->b1), a->dh, rows_in(a), N, C, L->width);
    norm_grads_add(L, a);
}
#endif
#endif

#if HAS_MOE
/* Mixture-of-experts sublayer (issue 17; prt_ops.h's MoE section for the
 * pieces and their order rules), ep 1: this rank holds every expert, each
 * expert's GEMMs split over TP like an MLP's (column-parallel up, its w1
 * and w3 slices adjacent in the flat buffer so one GEMM does both; row-
 * parallel down). The input is every row's norm output (all_rows: gathered
 * under SP), so every TP rank routes the same tokens identically; the
 * experts' partial sums are combined with the top-k weights, the shared
 * experts' added, and the whole summed over TP once (reduce-scattered
 * under SP). The router is replicated over TP: its input gradient enters
 * the TP sum on TP rank 0 only. */

/* The ids of the expert whose up weight is base: its b1, w2, b2 sit at
 * routed expert 0's offsets from its w1 (-1: none). */
static void expert_ids(const LayerSpec *L, int base, int *w1, int *b1, int *w2, int *b2)
{
    *w1 = base;
    *b1 = L->b1 < 0 ? -1 : base + (L->b1 - L->w1);
    *w2 = base + (L->w2 - L->w1);
    *b2 = L->b2 < 0 ? -1 : base + (L->b2 - L->w1);
}

/* One expert on n rows: h = x W1^T + b1, a = act(h), y = a W2^T (+ b2 on
 * TP rank 0, so the TP sum holds it once): y is a partial sum over TP. */
static void expert_fwd(const LayerSpec *L, int base, prt_act *y, prt_act *h, prt_act *a,
                       const prt_act *x, size_t n)
{
    int w1, b1, w2, b2;
    expert_ids(L, base, &w1, &b1, &w2, &b2);
    prt_linear_fwd(h, x, W(w1), W(b1), n, C, L->width);                /* column-parallel up */
    mlp_act_fwd(L, a, h, n);
    prt_linear_fwd(y, a, W(w2), R.c->coord.tp == 0 ? W(b2) : NULL, n, L->inner, C); /* row-parallel down */
}

/* Its backward: weight gradients accumulate, dx (n, C) is overwritten with
 * the input gradient's partial sum over TP; da (n, inner) and dh (n, width)
 * are scratch. */
static void expert_bwd(const LayerSpec *L, int base, prt_act *dx, const prt_act *dy,
                       const prt_act *x, const prt_act *h, const prt_act *a, size_t n,
                       prt_act *da, prt_act *dh)
{
    int w1, b1, w2, b2;
    expert_ids(L, base, &w1, &b1, &w2, &b2);
    prt_linear_bwd(da, G(w2), G(b2), dy, a, W(w2), n, L->inner, C);
    mlp_act_bwd(L, dh, h, da, n);
    prt_linear_bwd(dx, G(w1), G(b1), dh, x, W(w1), n, C, L->width);
}

/* The rows each expert received (S.cnt_host, the GEMM sizes), from the
 * routing that prt_moe_route left in a->cnt. */
static void expert_rows(const LayerSpec *L, const LayerActs *a)
{
    CHECK(prt_copy_to_host(S.cnt_host, a->cnt, (size_t)L->experts * sizeof(int32_t)));
}

/* The aux loss's share of the logged loss: the mean over sequences and MoE
 * layers of coeff E sum_e f_e P_e, as loss_sum / (GLOBAL_BATCH T) reads it;
 * once per forward (not again in full recomputation's), on TP rank 0. */
static void moe_aux_fwd(const LayerSpec *L, LayerActs *a)
{
    prt_moe_aux_loss(S.auxb, a->rl, a->idx, B, T, (size_t)L->experts, (size_t)L->top_k, L->aux, L->gate);
    if (S.recomputing || R.c->coord.tp != 0) return;
    CHECK(prt_copy_to_host(S.aux_host, S.auxb, B * sizeof(float)));
    for (size_t b = 0; b < B; b++) R.loss_sum += (double)S.aux_host[b] * (double)T / (double)MOE_LAYERS;
}

#if EXPERT_BIAS
/* Aux-loss-free balancing (moe { expert_bias true }; DeepSeek-V3's
 * e_score_correction_bias, Wang et al. 2024): each mixture's bias (E,
 * fp32) picks the experts beside the scores (prt_moe_topk_fwd) and is
 * state, not a parameter. Every rank holds every mixture's (BIAS, row i for
 * the i-th mixture of the model) and its step's counts (COUNTS): a forward
 * adds its rows per expert, once per micro-batch (not again in a full
 * recomputation's forward) and on TP rank 0 only (the TP ranks route the
 * same tokens); after the step bias_step sums COUNTS over the world (every
 * DP, EP and CP rank routed other tokens; stages without a mixture add 0)
 * and moves each bias by brate * sign(mean - count) (prt_moe_bias_update,
 * Megatron-Core's get_updated_expert_bias): the same counts, so the same
 * biases, on every layout. Both from planrt's allocator (kind buffers:
 * the planner counts 2 MOE_LAYERS E fp32 on every rank); checkpoints hold
 * the biases by their tensor names (prt_moe_bias_save). */
static float *BIAS, *COUNTS;   /* (MOE_LAYERS, MAX_EXPERTS) each */

/* The mixture's row in BIAS and COUNTS: its place among the model's. */
static size_t moe_row(const LayerSpec *L)
{
    size_t i = 0;
    for (const LayerSpec *x = LAYERS; x < L; x++) i += x->kind == MOE;
    return i * MAX_EXPERTS;
}

static void bias_init(void)
{
    size_t bytes = MOE_LAYERS * MAX_EXPERTS * sizeof(float);
    BIAS = (float *)prt_mem_alloc(PRT_MEM_BUFFERS, bytes);
    COUNTS = (float *)prt_mem_alloc(PRT_MEM_BUFFERS, bytes);
    if (!BIAS || !COUNTS) prt_run_fail(R.c, "prt_mem_alloc (expert biases)", PRT_ERR_NOMEM);
    if (R.args.dry_run) return;   /* addresses only */
    CHECK(prt_zero(BIAS, bytes));
    CHECK(prt_zero(COUNTS, bytes));
}

static void bias_free(void)
{
    prt_mem_free(BIAS);
    prt_mem_free(COUNTS);
    BIAS = COUNTS = NULL;
}

/* A forward's rows per expert into the step's counts. */
static void bias_count(const LayerSpec *L, const LayerActs *a)
{
    if (S.recomputing || R.c->coord.tp != 0) return;
    prt_moe_count_add(COUNTS + moe_row(L), a->cnt, (size_t)L->experts);
}

/* The end of a step: the global batch's counts everywhere, each bias moved. */
static void bias_step(void)
{
    CHECK(prt_all_reduce(R.c->world, COUNTS, COUNTS, MOE_LAYERS * MAX_EXPERTS, PRT_FP32, PRT_SUM));
    for (int l = 0; l < N_LAYERS; l++)
        if (LAYERS[l].kind == MOE && LAYERS[l].brate > 0)
            prt_moe_bias_update(BIAS + moe_row(&LAYERS[l]), COUNTS + moe_row(&LAYERS[l]),
                                (size_t)LAYERS[l].experts, LAYERS[l].brate);
}

/* Each mixture's router weight name: the checkpoint names its bias after
 * it (prt_moe_bias_save: gate.e_score_correction_bias, Hugging Face's). */
static const char *BIAS_NAMES[N_LAYERS];   /* the first MOE_LAYERS in use */

static void bias_names(void)
{
    for (int l = 0; l < N_LAYERS; l++)
        if (LAYERS[l].kind == MOE) BIAS_NAMES[moe_row(&LAYERS[l]) / MAX_EXPERTS] = PARAMS[LAYERS[l].router].name;
}

/* Checkpoints: the biases by name, world rank 0 writing a host copy. */
static void bias_save(const char *dir)
{
    size_t bytes = MOE_LAYERS * MAX_EXPERTS * sizeof(float);
    float *host = (float *)prt_host_alloc(bytes);
    if (!host) prt_run_fail(R.c, "prt_host_alloc (expert biases)", PRT_ERR_NOMEM);
    bias_names();
    CHECK(prt_copy_to_host(host, BIAS, bytes));
    CHECK(prt_moe_bias_save(R.c, dir, host, MOE_LAYERS, MAX_EXPERTS, BIAS_NAMES));
    prt_host_free(host);
}

static void bias_load(const char *dir)
{
    size_t bytes = MOE_LAYERS * MAX_EXPERTS * sizeof(float);
    float *host = (float *)prt_host_alloc(bytes);
    if (!host) prt_run_fail(R.c, "prt_host_alloc (expert biases)", PRT_ERR_NOMEM);
    bias_names();
    if (prt_moe_bias_load(R.c, dir, host, MOE_LAYERS, MAX_EXPERTS, BIAS_NAMES))   /* refused without them */
        prt_run_stop(R.c);
    CHECK(prt_copy_to_device(BIAS, host, bytes));
    prt_host_free(host);
}
#endif

#if EXPERT_PARALLEL
/* Expert parallelism (issue 17): EP rank r holds experts [r el, (r+1) el)
 * (el = E / EP); the rows sorted by expert go to their EP ranks and back
 * (runtime/par/moe_ep.c: counts first, then prt_all_to_all_v over c->ep,
 * the ranks of this TP rank's DP group with the same d / EP), arriving in
 * (source rank, token, k) order: each expert sees one rank's rows in its
 * order. The buffers on the experts' side are sized by what arrived: xr,
 * hr, ar kept for the backward and freed by it (under full recomputation
 * freed at once and rebuilt by the backward's forward), yr only until the
 * combine (the backward reads the source side's ye). Made and freed inside
 * the step, stream-ordered on CUDA (prt_alloc): no device-wide sync while
 * the EP group's all-to-alls wait on peers. */
static void ep_buffers_free(LayerActs *a)
{
    prt_mem_free(a->xr); prt_mem_free(a->hr); prt_mem_free(a->ar);
    a->xr = a->hr = a->ar = NULL;
    prt_moe_ep_free(&a->ep);
}

/* The first local expert's global index; local experts' GEMMs on their rows. */
static int first_local(const LayerSpec *L) { return prt_ep_rank(R.c, EP) * (L->experts / EP); }

static void experts_fwd(const LayerSpec *L, LayerActs *a)
{
    ep_buffers_free(a);   /* a full recomputation's second forward */
    CHECK(prt_moe_ep_plan(&a->ep, R.c->ep, S.cnt_host, (size_t)L->experts, C));
    size_t rin = a->ep.rows_in;
    a->xr = (prt_act *)prt_mem_alloc(PRT_MEM_ACTIVATIONS, (rin * C + 1) * sizeof(prt_act));
    a->hr = (prt_act *)prt_mem_alloc(PRT_MEM_ACTIVATIONS, (rin * L->width + 1) * sizeof(prt_act));
    a->ar = (prt_act *)prt_mem_alloc(PRT_MEM_ACTIVATIONS, (rin * L->inner + 1) * sizeof(prt_act));
    a->yr = act_alloc(rin * C + 1);
    if (!a->xr || !a->hr || !a->ar) prt_run_fail(R.c, "prt_alloc (expert rows)", PRT_ERR_NOMEM);
    CHECK(prt_moe_ep_to_experts(&a->ep, a->xe, a->xr));               /* EP: dispatch all-to-all */
    for (size_t le = 0, off = 0; le < a->ep.el; off += (size_t)a->ep.local[le], le++)
        if (a->ep.local[le])
            expert_fwd(L, L->w1 + (first_local(L) + (int)le) * L->ex_stride, a->yr + off * C,
                       a->hr + off * L->width, a->ar + off * L->inner, a->xr + off * C,
                       (size_t)a->ep.local[le]);
    CHECK(prt_moe_ep_to_sources(&a->ep, a->yr, a->ye));               /* EP: combine all-to-all */
    prt_mem_free(a->yr);
    a->yr = NULL;
#if RECOMPUTE_FULL
    if (!S.recomputing) ep_buffers_free(a);   /* the backward rebuilds them */
#endif
}

/* dye (this rank's rows, source order) -> dxe, through the experts that
 * hold them; the weight gradients land in the experts' group. */
static void experts_bwd(const LayerSpec *L, LayerActs *a)
{
    /* an expert here may get up to EP N rows: scratch sized by what came */
    size_t rin = a->ep.rows_in;
    prt_act *dyr = act_alloc(rin * C + 1), *dxr = act_alloc(rin * C + 1);
    prt_act *da = act_alloc(rin * L->inner + 1), *dh = act_alloc(rin * L->width + 1);
    CHECK(prt_moe_ep_to_experts(&a->ep, S.dye, dyr));                 /* EP: the output gradients out */
    for (size_t le = 0, off = 0; le < a->ep.el; off += (size_t)a->ep.local[le], le++)
        if (a->ep.local[le])
            expert_bwd(L, L->w1 + (first_local(L) + (int)le) * L->ex_stride, dxr + off * C,
                       dyr + off * C, a->xr + off * C, a->hr + off * L->width, a->ar + off * L->inner,
                       (size_t)a->ep.local[le], da, dh);
    CHECK(prt_moe_ep_to_sources(&a->ep, dxr, S.dxe));                 /* EP: the input gradients back */
    prt_act *tmp[] = { dyr, dxr, da, dh };
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) prt_mem_free(tmp[i]);
    ep_buffers_free(a);
}
#else
/* Every expert here: each one's GEMMs on its block of the sorted rows. */
static void experts_fwd(const LayerSpec *L, LayerActs *a)
{
    for (size_t e = 0, off = 0; e < (size_t)L->experts; off += (size_t)S.cnt_host[e], e++)
        if (S.cnt_host[e])
            expert_fwd(L, L->w1 + (int)e * L->ex_stride, a->ye + off * C, a->he + off * L->width,
                       a->ae + off * L->inner, a->xe + off * C, (size_t)S.cnt_host[e]);
}

static void experts_bwd(const LayerSpec *L, LayerActs *a)
{
    for (size_t e = 0, off = 0; e < (size_t)L->experts; off += (size_t)S.cnt_host[e], e++)
        if (S.cnt_host[e])
            expert_bwd(L, L->w1 + (int)e * L->ex_stride, S.dxe + off * C, S.dye + off * C,
                       a->xe + off * C, a->he + off * L->width, a->ae + off * L->inner,
                       (size_t)S.cnt_host[e], S.da, S.dh);
}
#endif

/* The shared experts' shape: the layer's, with their own width. */
static LayerSpec shared_spec(const LayerSpec *L)
{
    LayerSpec sh = *L;
    sh.f = L->sf;
    sh.width = L->swidth;
    sh.inner = L->sinner;
    return sh;
}

/* The shared experts on every token, added to p (a partial sum over TP).
 * Behind a gate (Qwen2-MoE) their sum is kept in ysum and p gets
 * sigmoid(x . g) times it: a per-token scale, so the partial sums stay
 * partial and the TP sum is the gated whole. */
static void shared_fwd(const LayerSpec *L, LayerActs *a, const prt_act *in, prt_act *p)
{
    LayerSpec sh = shared_spec(L);
    prt_act *sum = p;
#if MOE_SHARED_GATE
    if (L->sgate >= 0) sum = a->ysum;
#endif
    for (int s = 0; s < L->shared; s++) {
        prt_act *y = sum == p || s > 0 ? S.ys : sum;   /* a gate's sum starts as the first's output */
        expert_fwd(&sh, L->shared0 + s * L->ex_stride, y, a->hs + (size_t)s * N * sh.width,
                   a->as + (size_t)s * N * sh.inner, in, N);
        if (y != sum) prt_add_inplace(sum, y, N * C);
    }
#if MOE_SHARED_GATE
    if (L->sgate >= 0) {
        prt_moe_router_fwd(S.dz, in, W(L->sgate), N, C, 1);              /* the gate's logits, fp32 */
        prt_moe_shared_gate_fwd(a->sg, p, a->ysum, S.dz, N, C);           /* p += sigmoid(z) sum */
    }
#endif
}

/* Their backward: dy the layer's output gradient; the input gradient's
 * partial sums add to S.dlnf. The gate's logit gradient dots dy with the
 * partial sum ysum, so it is summed over TP before it reaches the gate's
 * weight (replicated: every TP rank then computes the same gradient) and,
 * on TP rank 0 only, the input. */
static void shared_bwd(const LayerSpec *L, LayerActs *a, const prt_act *in, const prt_act *dy)
{
    LayerSpec sh = shared_spec(L);
    const prt_act *ds = dy;
#if MOE_SHARED_GATE
    if (L->sgate >= 0) {
        prt_moe_shared_gate_bwd(S.dz, S.dys, dy, a->ysum, a->sg, N, C);
        CHECK(prt_all_reduce(R.c->tp, S.dz, S.dz, N, PRT_FP32, PRT_SUM)); /* TP: ysum was a partial sum */
        prt_moe_router_bwd(R.c->coord.tp == 0 ? S.dlnf : NULL, G(L->sgate), S.dz, in, W(L->sgate),
                           N, C, 1);
        ds = S.dys;
    }
#endif
    for (int s = 0; s < L->shared; s++) {
        expert_bwd(&sh, L->shared0 + s * L->ex_stride, S.ys, ds, in, a->hs + (size_t)s * N * sh.width,
                   a->as + (size_t)s * N * sh.inner, N, S.da, S.dh);
        prt_add_inplace(S.dlnf, S.ys, N * C);
    }
}

static void moe_fwd(const LayerSpec *L, LayerActs *a, prt_act *y)
{
    size_t E = (size_t)L->experts, K = (size_t)L->top_k;
    enter(L, "moe forward");
#if POST_NORM
    prt_act *o = branch_out(L, a, y), *p = partials(o);                 /* o: the branch output */
    pre_norm_fwd(L, a);
#else
    prt_act *p = partials(y);
    norm_fwd(L, a->ln, a->mean, a->rstd, a->x);
#endif
    const prt_act *in = all_rows(a);
    prt_moe_router_fwd(a->rl, in, W(L->router), N, C, E);              /* fp32 logits, replicated router */
    /* ties to the lower expert; the weights times routed_scale */
#if EXPERT_BIAS
    prt_moe_topk_fwd(a->idx, a->wk, a->rl, N, E, K, L->gate, L->groups, L->top_groups,
                     L->brate > 0 ? BIAS + moe_row(L) : NULL, L->rscale);   /* the bias: the choice only */
#else
    prt_moe_topk_fwd(a->idx, a->wk, a->rl, N, E, K, L->gate, L->groups, L->top_groups, NULL, L->rscale);
#endif
    prt_moe_route(a->row, a->cnt, a->idx, B, T, E, K, prt_moe_capacity(L->capf, T, K, E));
#if EXPERT_BIAS
    if (L->brate > 0) bias_count(L, a);                                 /* the step's load per expert */
#endif
    prt_moe_dispatch(a->xe, in, a->row, N, C, K);                      /* rows sorted by expert */
    expert_rows(L, a);
    experts_fwd(L, a);
    prt_moe_combine(p, a->ye, a->row, a->wk, N, C, K);                 /* weighted, in k order */
    shared_fwd(L, a, in, p);                                            /* shared experts: every token */
#if POST_NORM
    sum_partials(p, o);
    post_norm_fwd(L, a, y);                                             /* post-norm (post, sandwich) */
#else
    sum_partials(p, y);
#endif
    prt_residual_add(y, a->x, y, NL * C);
    if (L->aux > 0) moe_aux_fwd(L, a);
}

/* The whole backward, weights included (zb-h1 runs it as the B half: the
 * layer has no separate W half, as the embedding). d holds the output's
 * gradient and leaves holding the input's (NL rows). */
static void moe_bwd(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    size_t E = (size_t)L->experts, K = (size_t)L->top_k;
#if RECOMPUTE_FULL
    S.recomputing = true;
    moe_fwd(L, a, S.tmp);                                               /* full recomputation: rebuild from x */
    S.recomputing = false;
#endif
    enter(L, "moe backward");
#if POST_NORM && SP
    const prt_act *dy = grad_rows(post_norm_bwd(L, a, d, S.tmp), S.dyf);   /* through the post-norm */
#elif POST_NORM
    const prt_act *dy = post_norm_bwd(L, a, d, S.tmp);                  /* through the post-norm (S.tmp:
                                                                           S.dln is S.dlnf, written while dy is read) */
#elif SP
    const prt_act *dy = grad_rows(d, S.dyf);
#else
    const prt_act *dy = d;
#endif
#if RECOMPUTE_LN
    norm_rebuilt(L, a);                                                 /* layernorm: its output again */
#endif
    const prt_act *in = rows_in(a);
    prt_moe_combine_bwd(S.dye, S.dwk, dy, a->ye, a->row, a->wk, N, C, K);
    CHECK(prt_all_reduce(R.c->tp, S.dwk, S.dwk, N * K, PRT_FP32, PRT_SUM)); /* TP: ye was a partial sum */
    expert_rows(L, a);
    experts_bwd(L, a);
    prt_moe_dispatch_bwd(S.dlnf, S.dxe, a->row, N, C, K);              /* a partial sum over TP */
    shared_bwd(L, a, in, dy);
    prt_moe_topk_bwd(S.dlogits, S.dwk, a->wk, a->idx, a->rl, N, E, K, L->gate, L->rscale); /* the gate */
    if (L->aux > 0)
        prt_moe_aux_bwd(S.dlogits, a->rl, a->idx, B, T, E, K, L->aux,
                        1.0f / ((float)GLOBAL_BATCH * (float)MOE_LAYERS), L->gate);
    prt_moe_router_bwd(R.c->coord.tp == 0 ? S.dlnf : NULL, G(L->router), S.dlogits, in,
                       W(L->router), N, C, E);                          /* dx: once over TP */
    sum_input_grad(S.dlnf, S.dln);
#if POST_NORM
    pre_norm_bwd(L, a, d, S.dln);
#else
    norm_bwd(L, d, S.dln, a->x, a->mean, a->rstd);
#endif
}
#endif

#if HAS_FINAL_NORM
/* The final norm, on this rank's rows. */
static void final_norm_fwd(const LayerSpec *L, LayerActs *a, prt_act *y)
{
    enter(L, "final norm forward");
    norm_fwd(L, y, a->mean, a->rstd, a->x);
}

#if USES_BWD
static void final_norm_bwd(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    enter(L, "final norm backward");
    CHECK(prt_copy(S.tmp, d, NL * C * sizeof(prt_act)));
    CHECK(prt_zero(d, NL * C * sizeof(prt_act)));
    norm_bwd(L, d, S.tmp, a->x, a->mean, a->rstd);
}
#endif

#if SPLIT_BWD
/* zb-h1: B the input gradient, its gain (and bias) gradients kept aside;
 * W adds them into the layer's gradients. */
static void final_norm_bwd_input(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    enter(L, "final norm backward, input half");
    CHECK(prt_copy(S.tmp, d, NL * C * sizeof(prt_act)));
    CHECK(prt_zero(d, NL * C * sizeof(prt_act)));
    norm_bwd_kept(L, a, d, S.tmp);
}

static void final_norm_bwd_weight(const LayerSpec *L, LayerActs *a)
{
    enter(L, "final norm backward, weight half");
    norm_grads_add(L, a);
}
#endif
#endif

/* --dump-logits PATH: the logits of the first step this run computes (step
 * 1, or a resumed run's next) as this rank computed them, so a test can hold them element by element against another
 * implementation (make test-hf: transformers). Each last-stage rank appends
 * to PATH.rank-RRRRR (its world rank), per micro-batch, a header of 8
 * little-endian uint64 — LOGITS_MAGIC, the global index of the micro-batch's
 * first sequence, B, T, the first vocabulary column of its slice, the slice's
 * columns VL, V, the bytes of an element (sizeof(prt_act): 4 fp32, 2 bf16) —
 * then the (B*T, VL) values, row-major. Columns from V on are padding. The
 * first micro-batch of the step truncates the file, so a run writes it anew. */
#include <stdio.h>
#include <stdlib.h>
#define LOGITS_MAGIC 0x31544f474c545250ull   /* "PRTLGOT1" read as little-endian */
static void dump_logits(const LayerActs *a)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.rank-%05d", R.args.dump_logits, R.c->rank);
    FILE *f = fopen(path, R.mb == 0 ? "wb" : "ab");
    size_t bytes = N * VL * sizeof(prt_act);
    void *host = malloc(bytes);
    const uint64_t head[8] = { LOGITS_MAGIC, prt_batch_seq0(R.data, R.mb), B, T, vocab0(), VL, V,
                               sizeof(prt_act) };
    bool ok = f && host && prt_copy_to_host(host, a->logits, bytes) == PRT_OK &&
              fwrite(head, sizeof head, 1, f) == 1 && fwrite(host, bytes, 1, f) == 1;
    if (f && fclose(f) != 0) ok = false;
    free(host);
    if (!ok) {   /* one rank's failure: it ends the job, naming the file */
        char call[4200];
        snprintf(call, sizeof call, "--dump-logits: writing %s", path);
        prt_run_fail(R.c, call, PRT_ERR_IO);
    }
}

/* Logits and cross-entropy, vocab-parallel (Megatron): this rank computes
 * the logits of its vocabulary slice only; the softmax needs the row
 * maximum and the sum of exponentials over all slices, so two all-reduces
 * over TP (MAX, then SUM of the denominators and the target logits) stand
 * in for gathering the (N, V) logits. Columns from V on (the padding of a
 * vocabulary TP does not divide) are left out of the softmax. */
static void lm_head_fwd(const LayerSpec *L, LayerActs *a)
{
    enter(L, "lm_head forward");
#if SP
    const prt_act *in = gather_rows(a->x);
#else
    const prt_act *in = a->x;
#endif
    CHECK(prt_batch_load(R.data, R.step, R.mb, NULL, a->tok));
    prt_linear_fwd(a->logits, in, W(L->w1), NULL, N, C, VL);            /* (N, VL): this rank's slice */
#if LOGIT_SOFTCAP
    prt_softcap_fwd(a->logits, N * VL, LOGIT_CAP);                      /* Gemma 2: cap tanh(l / cap), in place */
#endif
    if (R.args.dump_logits && R.step == R.step0) dump_logits(a);        /* before xent_bwd overwrites them */
    prt_xent_max(a->mx, a->logits, N, VL, vocab0(), V);                 /* columns >= V: padding, masked */
    CHECK(prt_all_reduce(R.c->tp, a->mx, a->mx, N, PRT_FP32, PRT_MAX)); /* TP: row maximum over all slices */
    prt_xent_sumexp(a->se, a->tgt, a->logits, a->mx, a->tok, N, VL, vocab0(), V);
    CHECK(prt_all_reduce(R.c->tp, a->se, a->se, 2 * N, PRT_FP32, PRT_SUM)); /* TP: sum of exp and target logit */
    prt_xent_loss(a->loss, a->mx, a->se, a->tgt, a->tok, N);
    if (R.c->coord.tp != 0) return;                                      /* every TP rank has the same loss */
    CHECK(prt_copy_to_host(S.loss_host, a->loss, N * sizeof(float)));
    for (size_t i = 0; i < N; i++) R.loss_sum += S.loss_host[i];
}

#if SP
static const prt_act *head_in(const LayerActs *a) { return gather_rows(a->x); }   /* gathered again */
#else
static const prt_act *head_in(const LayerActs *a) { return a->x; }
#endif

#if CONTEXT_PARALLEL
/* The loss is the mean over every token of the global batch, so each
 * micro-batch's gradient is scaled by 1 / (GLOBAL_BATCH * SEQ) and the
 * dp x cp ranks sum (each CP rank holds T = SEQ/CP tokens of a sequence). */
static void xent_bwd(LayerActs *a)
{
#if LOGIT_SOFTCAP
    prt_xent_softcap_bwd(a->logits, a->logits, a->mx, a->se, a->tok, N, VL, vocab0(), V,
                         1.0f / ((float)GLOBAL_BATCH * (float)SEQ), LOGIT_CAP);   /* and through the cap */
#else
    prt_xent_bwd(a->logits, a->logits, a->mx, a->se, a->tok, N, VL, vocab0(), V,
                 1.0f / ((float)GLOBAL_BATCH * (float)SEQ));         /* 0 on padding columns */
#endif
}
#else
/* The loss is the mean over every token of the global batch, so each
 * micro-batch's gradient is scaled by 1 / (GLOBAL_BATCH * T) and DP sums. */
static void xent_bwd(LayerActs *a)
{
#if LOGIT_SOFTCAP
    prt_xent_softcap_bwd(a->logits, a->logits, a->mx, a->se, a->tok, N, VL, vocab0(), V,
                         1.0f / ((float)GLOBAL_BATCH * (float)T), LOGIT_CAP);     /* and through the cap */
#else
    prt_xent_bwd(a->logits, a->logits, a->mx, a->se, a->tok, N, VL, vocab0(), V,
                 1.0f / ((float)GLOBAL_BATCH * (float)T));           /* 0 on padding columns */
#endif
}
#endif

#if USES_BWD
static void lm_head_bwd(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    enter(L, "lm_head backward");
    xent_bwd(a);
    prt_linear_bwd(S.dlnf, G(L->w1), NULL, a->logits, head_in(a), W(L->w1), N, C, VL);
    sum_input_grad(S.dlnf, d);         /* vocab-parallel input gradient: a partial sum over TP */
}
#endif

#if SPLIT_BWD
static void lm_head_bwd_input(const LayerSpec *L, LayerActs *a, prt_act *d)
{
    enter(L, "lm_head backward, input half");
    xent_bwd(a);
    prt_linear_bwd_input(S.dlnf, a->logits, W(L->w1), N, C, VL);
    sum_input_grad(S.dlnf, d);         /* vocab-parallel input gradient: a partial sum over TP */
}

static void lm_head_bwd_weight(const LayerSpec *L, LayerActs *a)
{
    enter(L, "lm_head backward, weight half");
    prt_linear_bwd_weight(G(L->w1), NULL, a->logits, head_in(a), N, C, VL);
}
#endif

/* Layer l's gradients are final for this backward: when the reduction is
 * armed (REDUCE_DURING), its bucket's DP reduction starts now, async,
 * overlapping the backward of the layers before it. */
static void grads_done(int layer)
{
    prt_ops_where(NULL, -1);   /* out of the layer: what follows (a bucket's reduction, the update) names none */
    CHECK(prt_zero_layer_done(R.m, layer));
#if EXPERT_PARALLEL
    CHECK(prt_zero_layer_done(R.me, layer));   /* the experts' bucket, over expert-DP */
#endif
}

//@@ slots
/* ---- activation slots ---------------------------------------------------------
 * prt_pipe hands out one slot per (micro-batch, chunk) in flight; these
 * make and free the layers' part of it, inside the step (its output and
 * gradient buffers are the pipe's: freed once sent). prt_mem_alloc is
 * stream-ordered on CUDA (prt_alloc), so neither waits for the device. */

typedef struct {
    LayerActs *a;       /* one per layer of the chunk */
    void     **mem;     /* everything allocated here, to free */
    int        n_mem;
} SlotActs;

static void *keep(SlotActs *s, void *p)
{
    s->mem[s->n_mem++] = p;
    return p;
}

#define KEEP_ACT(n) ((prt_act *)keep(sa, act_alloc(n)))
#define KEEP_F32(n) ((float *)keep(sa, f32_alloc(n)))
#if DROPOUT
#define KEEP_MASK(n) ((uint8_t *)keep(sa, mask_alloc(n)))
#endif

#if POST_NORM && RECOMPUTE_SOME || POST_NORM && !RECOMPUTE_FULL
/* What a sublayer's norms keep: the pre-norm's output (under RECOMPUTE_LN
 * the shared S.lnr, rebuilt) and statistics, none under norm_position
 * post, whose first linear reads x itself (a->ln is a->x); the post-norm's
 * input and statistics (post, sandwich). planner/model.c counts the same
 * (sublayer_norms_work). */
static void norm_slot(SlotActs *sa, const LayerSpec *L, LayerActs *a)
{
    if (L->ln_w < 0) {
        a->ln = a->x;
    } else {
#if RECOMPUTE_LN
        a->ln = S.lnr;   /* the norm's output: rebuilt */
#else
        a->ln = KEEP_ACT(NL * C);
#endif
        a->mean = KEEP_F32(NL); a->rstd = KEEP_F32(NL);
    }
    if (post_gain(L) >= 0) {
        a->po = KEEP_ACT(NL * C);
        a->pmean = L->norm == NORM_LAYERNORM ? KEEP_F32(NL) : NULL;
        a->prstd = KEEP_F32(NL);
    }
}
#endif

#if POST_NORM && RECOMPUTE_FULL
/* A rebuilt layer's norms: the post-norm's buffers are the shared S.rc's,
 * and under post the first linear reads the kept x. */
static void norm_rebuilt_slot(const LayerSpec *L, LayerActs *a)
{
    if (L->ln_w < 0) a->ln = a->x;
    if (post_gain(L) >= 0) { a->po = S.rc.po; a->pmean = S.rc.pmean; a->prstd = S.rc.prstd; }
}
#endif

#if HAS_MOE
static int32_t *i32_alloc(size_t n)
{
    int32_t *p = (int32_t *)prt_mem_alloc(PRT_MEM_ACTIVATIONS, n * sizeof(int32_t));
    if (!p) prt_run_fail(R.c, "prt_alloc (routing)", PRT_ERR_NOMEM);
    return p;
}
#define KEEP_I32(n) ((int32_t *)keep(sa, i32_alloc(n)))

/* A MoE layer's buffers: what its backward reads, sized for the most rows
 * its experts can receive (N k: dropless, every token in k experts). Full
 * recomputation keeps x alone and rebuilds the rest in S.rc. */
static void moe_slot(SlotActs *sa, const LayerSpec *L, LayerActs *a)
{
#if RECOMPUTE_FULL && POST_NORM
    (void)sa;
    LayerActs x = *a;
    *a = S.rc;
    a->x = x.x;
    norm_rebuilt_slot(L, a);
#elif RECOMPUTE_FULL
    (void)sa; (void)L;
    LayerActs x = *a;
    *a = S.rc;
    a->x = x.x;
#else
    size_t E = (size_t)L->experts, K = (size_t)L->top_k, S_ = (size_t)L->shared;
#if POST_NORM
    norm_slot(sa, L, a);
#elif RECOMPUTE_LN
    a->ln = S.lnr; a->mean = KEEP_F32(NL); a->rstd = KEEP_F32(NL);   /* the norm's output: rebuilt */
#else
    a->ln = KEEP_ACT(NL * C); a->mean = KEEP_F32(NL); a->rstd = KEEP_F32(NL);
#endif
    a->rl = KEEP_F32(N * E); a->wk = KEEP_F32(N * K);
    a->idx = KEEP_I32(N * K); a->row = KEEP_I32(N * K); a->cnt = KEEP_I32(E);
#if EXPERT_PARALLEL
    a->xe = S.xs; a->ye = KEEP_ACT(N * K * C);   /* this rank's rows out (sent, not kept) and back;
                                                    the experts' side: experts_fwd */
#else
    a->xe = KEEP_ACT(N * K * C); a->he = KEEP_ACT(N * K * L->width);
    a->ae = KEEP_ACT(N * K * L->inner); a->ye = KEEP_ACT(N * K * C);
#endif
    if (S_) { a->hs = KEEP_ACT(S_ * N * L->swidth); a->as = KEEP_ACT(S_ * N * L->sinner); }
#if MOE_SHARED_GATE
    if (L->sgate >= 0) { a->sg = KEEP_F32(N); a->ysum = KEEP_ACT(N * C); }
#endif
#endif
}
#endif

#if QK_NORM && RECOMPUTE_SOME || QK_NORM && !RECOMPUTE_FULL
/* What the q/k norm of an attention layer keeps for its backward
 * (planner/model.c counts the same: e per element, 4 per rstd). */
static void qk_slot(SlotActs *sa, const LayerSpec *L, LayerActs *a)
{
    if (L->kind != ATTENTION || qk_gain(L) < 0) return;
    a->qkin = KEEP_ACT(qk_numel(L));
    a->qkr = KEEP_F32(N * qk_stats(L));
}
#endif

#if RECOMPUTE_SOME
/* A recomputed block's attention or MLP layer: only x is kept, the rest is
 * rebuilt in the shared S.rc (its dropout masks too). */
static void rebuilt_slot(LayerActs *a)
{
    a->ln = S.rc.ln; a->mean = S.rc.mean; a->rstd = S.rc.rstd;
    a->h = S.rc.h; a->att = S.rc.att; a->a = S.rc.a;
#if QK_NORM
    a->qkin = S.rc.qkin; a->qkr = S.rc.qkr;
#endif
#if MLA
    a->mr = S.rc.mr;
#endif
#if DROPOUT
    a->mask = S.rc.mask; a->attd = S.rc.attd; a->att_mask = S.rc.att_mask;
#endif
}

/* A block that is not recomputed keeps what its backward reads, as under
 * recompute none. */
static void kept_slot(SlotActs *sa, const LayerSpec *L, LayerActs *a)
{
#if POST_NORM
    norm_slot(sa, L, a);
#else
    a->ln = KEEP_ACT(NL * C); a->mean = KEEP_F32(NL); a->rstd = KEEP_F32(NL);
#endif
    a->h = KEEP_ACT(N * L->width); a->a = KEEP_ACT(N * L->inner);
#if CONTEXT_PARALLEL
    if (L->kind == ATTENTION) a->att = KEEP_ACT(cp_saved_numel(L));    /* the CP attention's saved */
#else
    if (L->kind == ATTENTION) a->att = KEEP_ACT(B * (size_t)L->h * T * T);
#endif
#if MLA
    if (L->kind == ATTENTION) a->mr = KEEP_F32(2 * N);   /* the latent norms' rstd */
#endif
#if QK_NORM
    qk_slot(sa, L, a);
#endif
#if DROPOUT
    if (L->kind == ATTENTION) {
        a->attd = KEEP_ACT(B * (size_t)L->h * T * T);
        a->att_mask = KEEP_MASK(B * (size_t)L->h * T * T);
    }
#endif
}
#endif

static prt_status slot_alloc(prt_slot *s, int chunk, void *user)
{
    (void)user;
    int k = chunk * PP + R.c->coord.pp, first = VSTAGE_FIRST[k], n = VSTAGE_END[k] - first;
    SlotActs *sa = (SlotActs *)prt_host_alloc(sizeof *sa);
    if (!sa) return PRT_ERR_NOMEM;
    sa->a = (LayerActs *)prt_host_alloc((size_t)n * sizeof(LayerActs));
    sa->mem = (void **)prt_host_alloc(((size_t)n * 20 + 1) * sizeof(void *));
    if (!sa->a || !sa->mem) return PRT_ERR_NOMEM;
    for (int j = 0; j < n; j++) {
        const LayerSpec *L = &LAYERS[first + j];
        LayerActs *a = &sa->a[j];
        a->x = j == 0 ? s->x : KEEP_ACT(NL * C);
        if (L->kind == EMBEDDING) {
            a->tok = (int32_t *)keep(sa, prt_mem_alloc(PRT_MEM_ACTIVATIONS, N * sizeof(int32_t)));
        } else if (L->kind == NORM) {
            a->mean = KEEP_F32(NL); a->rstd = KEEP_F32(NL);
#if HAS_MOE
        } else if (L->kind == MOE) {
            moe_slot(sa, L, a);
#endif
        } else if (L->kind == LM_HEAD) {
            a->logits = KEEP_ACT(N * VL);
            a->mx = KEEP_F32(N); a->se = KEEP_F32(2 * N); a->tgt = a->se + N; a->loss = KEEP_F32(N);
            a->tok = (int32_t *)keep(sa, prt_mem_alloc(PRT_MEM_ACTIVATIONS, N * sizeof(int32_t)));
        } else {
#if RECOMPUTE_SOME
            if (REBUILT[first + j]) rebuilt_slot(a);                   /* this block recomputed */
            else kept_slot(sa, L, a);                                   /* this block keeps its own */
#if POST_NORM
            if (REBUILT[first + j]) norm_rebuilt_slot(L, a);
#endif
#elif RECOMPUTE_FULL
            /* full recomputation: only x is kept, the rest is rebuilt in the shared S.rc */
            a->ln = S.rc.ln; a->mean = S.rc.mean; a->rstd = S.rc.rstd;
            a->h = S.rc.h; a->att = S.rc.att; a->a = S.rc.a;
#if QK_NORM
            a->qkin = S.rc.qkin; a->qkr = S.rc.qkr;
#endif
#if MLA
            a->mr = S.rc.mr;
#endif
#if POST_NORM
            norm_rebuilt_slot(L, a);
#endif
#else
#if POST_NORM
            norm_slot(sa, L, a);   /* the pre-norm's (none under post) and the post-norm's */
#elif RECOMPUTE_LN
            a->ln = S.lnr;   /* the norm's output: rebuilt */
            a->mean = KEEP_F32(NL); a->rstd = KEEP_F32(NL);
#else
            a->ln = KEEP_ACT(NL * C);
            a->mean = KEEP_F32(NL); a->rstd = KEEP_F32(NL);
#endif
            a->h = KEEP_ACT(N * L->width); a->a = KEEP_ACT(N * L->inner);
#if !RECOMPUTE_SELECTIVE && CONTEXT_PARALLEL
            if (L->kind == ATTENTION) a->att = KEEP_ACT(cp_saved_numel(L));   /* the CP attention's saved */
#elif !RECOMPUTE_SELECTIVE
            if (L->kind == ATTENTION) a->att = KEEP_ACT(B * (size_t)L->h * T * T);
#endif
#if MLA
            if (L->kind == ATTENTION) a->mr = KEEP_F32(2 * N);   /* the latent norms' rstd */
#endif
#if QK_NORM
            qk_slot(sa, L, a);
#endif
#if !RECOMPUTE_SELECTIVE && DROPOUT
            if (L->kind == ATTENTION) {
                a->attd = KEEP_ACT(B * (size_t)L->h * T * T);
                a->att_mask = KEEP_MASK(B * (size_t)L->h * T * T);
            }
#endif
#endif
        }
#if DROPOUT && RECOMPUTE_SOME
        if (L->kind == EMBEDDING) a->mask = KEEP_MASK(NL * C);          /* not recomputed: kept */
        if ((L->kind == ATTENTION || L->kind == MLP) && !REBUILT[first + j]) a->mask = KEEP_MASK(NL * C);
#elif DROPOUT && RECOMPUTE_FULL
        if (L->kind == EMBEDDING) a->mask = KEEP_MASK(NL * C);          /* not recomputed: kept */
        if (L->kind == ATTENTION || L->kind == MLP) {                   /* rebuilt by the backward */
            a->mask = S.rc.mask; a->attd = S.rc.attd; a->att_mask = S.rc.att_mask;
        }
#elif DROPOUT
        if (L->kind == EMBEDDING || L->kind == ATTENTION || L->kind == MLP) a->mask = KEEP_MASK(NL * C);
#endif
#if SPLIT_BWD && MLA
        if (L->kind == ATTENTION) {   /* zb-h1, MLA: o_proj's output gradient and the op's weight gradients */
            a->dy = KEEP_ACT(N * C);
            a->gml = KEEP_F32(mla_grad_numel(L));
        }
        if (L->kind == MLP) {
            a->dh = KEEP_ACT(N * L->width);
            a->dy = KEEP_ACT(N * C);
        }
#elif SPLIT_BWD
        if (L->kind == ATTENTION || L->kind == MLP) {   /* zb-h1: kept for the weight pass */
            a->dh = KEEP_ACT(N * L->width);
            a->dy = KEEP_ACT(N * C);
        }
#endif
#if SPLIT_BWD
        if (L->kind == ATTENTION || L->kind == MLP || L->kind == NORM)
            a->gln = KEEP_F32(gln_numel(L));   /* zb-h1: the B pass's norm (and q/k norm) gradients */
#endif
    }
    for (int i = 0; i < sa->n_mem; i++)
        if (!sa->mem[i]) return PRT_ERR_NOMEM;
    s->acts = sa;
    return PRT_OK;
}

static void slot_free(prt_slot *s, int chunk, void *user)
{
    (void)chunk; (void)user;
    SlotActs *sa = (SlotActs *)s->acts;
    if (!sa) return;
    for (int i = 0; i < sa->n_mem; i++) prt_mem_free(sa->mem[i]);
    prt_host_free(sa->mem);
    prt_host_free(sa->a);
    prt_host_free(sa);
    s->acts = NULL;
}

#if HAS_MOE
/* The MoE layers' backward scratch (and, under full recomputation, their
 * rebuilt buffers), sized for the largest: MAX_EXPERTS, MAX_TOPK. */
static void moe_scratch_alloc(void)
{
    S.dye = act_alloc(N * MAX_TOPK * C); S.dxe = act_alloc(N * MAX_TOPK * C); S.ys = act_alloc(N * C);
    S.dwk = f32_alloc(N * MAX_TOPK); S.dlogits = f32_alloc(N * MAX_EXPERTS); S.auxb = f32_alloc(B);
#if EXPERT_PARALLEL
    S.xs = act_alloc(N * MAX_TOPK * C);
#endif
#if MOE_SHARED_GATE
    S.dys = act_alloc(N * C); S.dz = f32_alloc(N);
#endif
    S.aux_host = (float *)prt_host_alloc(B * sizeof(float));
    S.cnt_host = (int32_t *)prt_host_alloc(MAX_EXPERTS * sizeof(int32_t));
#if RECOMPUTE_FULL
    S.rc.rl = f32_alloc(N * MAX_EXPERTS); S.rc.wk = f32_alloc(N * MAX_TOPK);
    S.rc.idx = i32_alloc(N * MAX_TOPK); S.rc.row = i32_alloc(N * MAX_TOPK); S.rc.cnt = i32_alloc(MAX_EXPERTS);
    S.rc.ye = act_alloc(N * MAX_TOPK * C);
#if EXPERT_PARALLEL
    S.rc.xe = S.xs;
#else
    S.rc.xe = act_alloc(N * MAX_TOPK * C);
    S.rc.he = act_alloc(N * MAX_TOPK * MAX_WIDTH); S.rc.ae = act_alloc(N * MAX_TOPK * MAX_INNER);
#endif
    S.rc.hs = MAX_SHARED ? act_alloc(MAX_SHARED * N * MAX_WIDTH) : NULL;
    S.rc.as = MAX_SHARED ? act_alloc(MAX_SHARED * N * MAX_INNER) : NULL;
#if MOE_SHARED_GATE
    S.rc.sg = f32_alloc(N); S.rc.ysum = act_alloc(N * C);
#endif
#endif
}

static void moe_scratch_free(void)
{
    void *p[] = { S.dye, S.dxe, S.ys, S.dwk, S.dlogits, S.auxb,
#if EXPERT_PARALLEL
                  S.xs,
#endif
#if RECOMPUTE_FULL
                  S.rc.rl, S.rc.wk, S.rc.idx, S.rc.row, S.rc.cnt, S.rc.ye, S.rc.he, S.rc.ae,
#if !EXPERT_PARALLEL
                  S.rc.xe,
#endif
                  S.rc.hs, S.rc.as,
#endif
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) if (p[i]) prt_mem_free(p[i]);
    prt_host_free(S.aux_host);
    prt_host_free(S.cnt_host);
}
#endif

#if MLA && RECOMPUTE_FULL
/* The widest a->h of a layer (L->width a row): the rebuilt layer's. With
 * MLA, MAX_WIDTH is the op's workspace (plan_widest_add), wider than what
 * the op keeps, which is all a rebuilt layer needs in S.rc.h. */
static size_t kept_width_max(void)
{
    size_t w = 1;
    for (int i = 0; i < N_LAYERS; i++)
        if ((LAYERS[i].kind == ATTENTION || LAYERS[i].kind == MLP) && LAYERS[i].width > w) w = LAYERS[i].width;
    return w;
}
#endif

/* The scratch every layer shares, sized for the widest layer. */
static void scratch_alloc(void)
{
    S.dln = act_alloc(N * C);
#if SP
    S.dlnf = act_alloc(N * C);   /* the all-rows partial before the reduce-scatter */
    S.full = act_alloc(N * C);
    S.dyf = act_alloc(N * C);
    S.rows = act_alloc(N * C);
#else
    S.dlnf = S.dln;
#endif
    S.tmp = act_alloc(N * C);
#if NORM_PLUS_ONE
    S.gain = act_alloc(C);
#endif
#if QK_PROJ
    S.qkdot = f32_alloc(2 * N);   /* planner/model.c plan_bwd_scratch_bytes: 8 N */
#endif
    S.da = act_alloc(N * MAX_INNER);
    S.dh = act_alloc(N * MAX_WIDTH);
#if CONTEXT_PARALLEL && RECOMPUTE_SELECTIVE
    S.att = act_alloc(cp_saved_max());   /* the CP attention's saved tensors, rebuilt (no score scratch) */
#elif RECOMPUTE_SELECTIVE
    S.datt = act_alloc(B * MAX_HEADS * T * T);
    S.att = act_alloc(B * MAX_HEADS * T * T);
#elif !CONTEXT_PARALLEL
    S.datt = act_alloc(B * MAX_HEADS * T * T);
#endif
#if RECOMPUTE_SELECTIVE && DROPOUT
    S.attd = act_alloc(B * MAX_HEADS * T * T);
    S.att_mask = mask_alloc(B * MAX_HEADS * T * T);
#endif
#if RECOMPUTE_LN
    S.lnr = act_alloc(NL * C);
#endif
    S.loss_host = (float *)prt_host_alloc(N * sizeof(float));
#if RECOMPUTE_FULL
    S.rc.ln = act_alloc(NL * C); S.rc.mean = f32_alloc(NL); S.rc.rstd = f32_alloc(NL);
#if MLA
    S.rc.h = act_alloc(N * kept_width_max()); S.rc.a = act_alloc(N * MAX_INNER);
#else
    S.rc.h = act_alloc(N * MAX_WIDTH); S.rc.a = act_alloc(N * MAX_INNER);
#endif
#if CONTEXT_PARALLEL
    S.rc.att = act_alloc(cp_saved_max());   /* the CP attention's saved tensors, rebuilt */
#else
    S.rc.att = act_alloc(B * MAX_HEADS * T * T);
#endif
#endif
#if RECOMPUTE_FULL && POST_NORM
    S.rc.po = act_alloc(NL * C); S.rc.pmean = f32_alloc(NL); S.rc.prstd = f32_alloc(NL);   /* the post-norm's, rebuilt */
#endif
#if RECOMPUTE_FULL && MLA
    S.rc.mr = f32_alloc(2 * N);   /* MLA's latent norms' rstd, rebuilt */
#endif
#if RECOMPUTE_FULL && QK_NORM
    S.rc.qkin = act_alloc(qk_numel_max(false));   /* the q/k norm's input and rstd, rebuilt */
    S.rc.qkr = f32_alloc(qk_numel_max(true));
#endif
#if RECOMPUTE_FULL && DROPOUT
    S.rc.mask = mask_alloc(NL * C);
    S.rc.attd = act_alloc(B * MAX_HEADS * T * T);
    S.rc.att_mask = mask_alloc(B * MAX_HEADS * T * T);
#endif
#if HAS_MOE
    moe_scratch_alloc();
#endif
}

static void scratch_free(void)
{
    prt_act *p[] = { S.dln, S.tmp, S.da, S.dh, S.datt,
#if NORM_PLUS_ONE
                     S.gain,
#endif
#if SP
                     S.dlnf, S.full, S.dyf, S.rows,
#endif
#if RECOMPUTE_SELECTIVE
                     S.att,
#endif
#if RECOMPUTE_LN
                     S.lnr,
#endif
#if RECOMPUTE_FULL
                     S.rc.ln, S.rc.h, S.rc.a, S.rc.att,
#endif
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) prt_mem_free(p[i]);
#if RECOMPUTE_FULL
    prt_mem_free(S.rc.mean);
    prt_mem_free(S.rc.rstd);
#endif
#if RECOMPUTE_FULL && POST_NORM
    prt_mem_free(S.rc.po);
    prt_mem_free(S.rc.pmean);
    prt_mem_free(S.rc.prstd);
#endif
#if RECOMPUTE_FULL && MLA
    prt_mem_free(S.rc.mr);
#endif
#if RECOMPUTE_FULL && QK_NORM
    prt_mem_free(S.rc.qkin);
    prt_mem_free(S.rc.qkr);
#endif
#if QK_PROJ
    prt_mem_free(S.qkdot);
#endif
#if RECOMPUTE_SELECTIVE && DROPOUT
    prt_mem_free(S.attd);
    prt_mem_free(S.att_mask);
#endif
#if RECOMPUTE_FULL && DROPOUT
    prt_mem_free(S.rc.mask);
    prt_mem_free(S.rc.attd);
    prt_mem_free(S.rc.att_mask);
#endif
    prt_host_free(S.loss_host);
#if HAS_MOE
    moe_scratch_free();
#endif
}

//@@ check-chunks
static void chunk_fwd(int chunk, prt_slot *s)
{
    LayerActs *a = ((SlotActs *)s->acts)->a;
    (void)chunk;
    embedding_fwd(&LAYERS[0], &a[0], a[1].x);
    attention_fwd(&LAYERS[1], &a[1], a[2].x);
#if HAS_MLP
    mlp_fwd(&LAYERS[2], &a[2], a[3].x);
#endif
#if HAS_FINAL_NORM
    final_norm_fwd(&LAYERS[3], &a[3], a[4].x);
#endif
    lm_head_fwd(&LAYERS[4], &a[4]);
}

#if USES_BWD
static void chunk_bwd(int chunk, prt_slot *s)
{
    LayerActs *a = ((SlotActs *)s->acts)->a;
    (void)chunk;
    lm_head_bwd(&LAYERS[4], &a[4], s->d);
#if HAS_FINAL_NORM
    final_norm_bwd(&LAYERS[3], &a[3], s->d);
#endif
#if HAS_MLP
    mlp_bwd(&LAYERS[2], &a[2], s->d);
#endif
    attention_bwd(&LAYERS[1], &a[1], s->d);
    embedding_bwd(&LAYERS[0], &a[0], s->d);
    grads_done(0);
}
#endif

#if SPLIT_BWD
static void chunk_bwd_input(int chunk, prt_slot *s)
{
    LayerActs *a = ((SlotActs *)s->acts)->a;
    (void)chunk;
    lm_head_bwd_input(&LAYERS[4], &a[4], s->d);
#if HAS_FINAL_NORM
    final_norm_bwd_input(&LAYERS[3], &a[3], s->d);
#endif
#if HAS_MLP
    mlp_bwd_input(&LAYERS[2], &a[2], s->d);
#endif
    attention_bwd_input(&LAYERS[1], &a[1], s->d);
}

/* The embedding's gradient too: s->d still holds its output gradient (the
 * first stage sends none back), so B leaves its bucket closed. */
static void chunk_bwd_weight(int chunk, prt_slot *s)
{
    LayerActs *a = ((SlotActs *)s->acts)->a;
    (void)chunk;
    lm_head_bwd_weight(&LAYERS[4], &a[4]);
#if HAS_FINAL_NORM
    final_norm_bwd_weight(&LAYERS[3], &a[3]);
#endif
#if HAS_MLP
    mlp_bwd_weight(&LAYERS[2], &a[2]);
#endif
    attention_bwd_weight(&LAYERS[1], &a[1]);
    embedding_bwd(&LAYERS[0], &a[0], s->d);
    grads_done(0);
}
#endif

//@@ dispatch
/* ---- ops ------------------------------------------------------------------------
 * The op kinds this plan's Program uses, numbered as the planner numbers
 * them (ORDER PlanOpKind: a --trace names them by these numbers), then the
 * program's own bookkeeping. Every op of every stage's step goes through
 * op(), the one place the trace hooks in. */
typedef enum {
    FWD = 0,
#if USES_BWD
    BWD = 1,
#endif
#if SPLIT_BWD
    BWD_INPUT = 2, BWD_WEIGHT = 3,
#endif
#if PIPELINE
    SEND_ACT = 4, RECV_ACT = 5, SEND_GRAD = 6, RECV_GRAD = 7,
#endif
#if USES_GATHER_PARAMS
    GATHER_PARAMS = 8,
#endif
#if USES_REDUCE_GRADS
    REDUCE_GRADS = 9,
#endif
    OPT_STEP = 10,
#if USES_SYNC_PARAMS
    SYNC_PARAMS = 11,
#endif
#if USES_SP_NORM_REDUCE
    SP_NORM_REDUCE = 12,
#endif
#if USES_EMBED_REDUCE
    EMBED_REDUCE = 13,
#endif
    NORM_REDUCE = 14,
#if USES_GATHER_PARAMS
    RELEASE_PARAMS = 15, /* ZeRO-3: the gathered parameters of the op before are freed */
#endif
#if USES_REDUCE_GRADS
    REDUCE_DURING = 16,  /* the REDUCE_GRADS after the next backward starts inside it, bucket by bucket */
#endif
    FREE_SLOT = 17,      /* (mb, chunk)'s activations are not needed any more */
#if PIPELINE
    POST_RECV_ACT = 18,  /* the receive of (mb, chunk)'s input posted early, with the sends queued */
    POST_RECV_GRAD = 19, /* ... of its output gradient; the RECV_* op later waits for it */
#endif
} OpKind;

/* The activation slot of (mb, chunk), for a forward (with the output
 * buffer it writes and sends), a backward (with the gradient buffer it
 * reads and writes in place) or a zb-h1 weight pass (neither). */
typedef enum { FOR_FWD, FOR_BWD, FOR_WEIGHT } SlotUse;
static prt_slot *slot_of(int mb, int chunk, SlotUse use)
{
    prt_slot *s = NULL;
    R.mb = mb;
    CHECK(use == FOR_FWD ? prt_pipe_fwd_slot(R.pipe, mb, chunk, &s)
          : use == FOR_BWD ? prt_pipe_bwd_slot(R.pipe, mb, chunk, &s) : prt_pipe_slot(R.pipe, mb, chunk, &s));
    return s;
}

#if PIPELINE
/* A transfer op, run or --dry-run alike (a dry pipe moves nothing but
 * makes and frees the buffers where the real one does). */
static void pipe_xfer(OpKind kind, int mb, int chunk, int peer)
{
    switch (kind) {
    case SEND_ACT:  CHECK(prt_pipe_send_act(R.pipe, mb, chunk, peer)); break;   /* PP: output -> next stage */
    case RECV_ACT:  CHECK(prt_pipe_recv_act(R.pipe, mb, chunk, peer)); break;   /* PP: input <- previous stage */
    case SEND_GRAD: CHECK(prt_pipe_send_grad(R.pipe, mb, chunk, peer)); break;  /* PP: input gradient -> previous */
    case RECV_GRAD: CHECK(prt_pipe_recv_grad(R.pipe, mb, chunk, peer)); break;  /* PP: output gradient <- next */
    case POST_RECV_ACT:  CHECK(prt_pipe_post_recv_act(R.pipe, mb, chunk, peer)); break;   /* PP: NCCL's rules */
    case POST_RECV_GRAD: CHECK(prt_pipe_post_recv_grad(R.pipe, mb, chunk, peer)); break;
    default: break;
    }
}
#endif

#if EXPERT_PARALLEL
/* The experts' group takes the dense model's ZeRO calls too, on its own
 * group (expert-DP): before an op what must precede it (a backward's
 * gradients ready, a ZeRO-3 gather begun), after it the rest. */
static void expert_pre(OpKind kind, int chunk)
{
    switch (kind) {
#if USES_BWD
    case BWD: CHECK(prt_zero_grads(R.me, chunk)); break;
#endif
#if SPLIT_BWD
    case BWD_INPUT: case BWD_WEIGHT: CHECK(prt_zero_grads(R.me, chunk)); break;
#endif
#if USES_GATHER_PARAMS
    case GATHER_PARAMS: CHECK(prt_zero_gather(R.me, chunk)); break;
#endif
    default: break;
    }
}

static void expert_post(OpKind kind, int chunk)
{
    switch (kind) {
#if USES_GATHER_PARAMS
    case RELEASE_PARAMS: prt_zero_release(R.me, chunk); break;
#endif
#if USES_REDUCE_GRADS
    case REDUCE_GRADS:   CHECK(prt_zero_reduce(R.me, chunk)); break;          /* expert-DP */
    case REDUCE_DURING:  CHECK(prt_zero_reduce_during(R.me, chunk)); break;
#endif
    case OPT_STEP:       CHECK(prt_zero_opt_step(R.me, &R.opt, R.step + 1)); break;
#if USES_SYNC_PARAMS
    case SYNC_PARAMS:    CHECK(prt_zero_sync(R.me)); break;
#endif
    default: break;
    }
}

/* --dry-run: the experts' group's allocations, as the dense model's. */
static void expert_dry(OpKind kind, int chunk)
{
    switch (kind) {
    case FWD: CHECK(prt_zero_dry_pass(R.me, chunk, false)); break;
#if USES_BWD
    case BWD: CHECK(prt_zero_grads(R.me, chunk)); CHECK(prt_zero_dry_pass(R.me, chunk, true)); break;
#endif
#if SPLIT_BWD
    case BWD_INPUT: CHECK(prt_zero_grads(R.me, chunk)); break;
    case BWD_WEIGHT: CHECK(prt_zero_grads(R.me, chunk)); CHECK(prt_zero_dry_pass(R.me, chunk, true)); break;
#endif
#if USES_GATHER_PARAMS
    case GATHER_PARAMS:  CHECK(prt_zero_gather(R.me, chunk)); break;
    case RELEASE_PARAMS: prt_zero_release(R.me, chunk); break;
#endif
#if USES_REDUCE_GRADS
    case REDUCE_GRADS:   CHECK(prt_zero_reduce(R.me, chunk)); break;
    case REDUCE_DURING:  CHECK(prt_zero_reduce_during(R.me, chunk)); break;
#endif
    default: break;
    }
}
#endif

/* --dry-run: an op's allocations and frees alone (prt_mem_dry: addresses,
 * not memory): slots, gradient buckets and gathered layers as the real op
 * makes them; nothing computes, nothing moves, nothing is updated. */
static void dry_op(OpKind kind, int mb, int chunk, int peer)
{
#if !PIPELINE
    (void)peer;
#endif
    switch (kind) {
    case FWD: slot_of(mb, chunk, FOR_FWD); CHECK(prt_zero_dry_pass(R.m, chunk, false)); break;
#if USES_BWD
    case BWD:
        slot_of(mb, chunk, FOR_BWD);
        CHECK(prt_zero_grads(R.m, chunk));
        CHECK(prt_zero_dry_pass(R.m, chunk, true));
        break;
#endif
#if SPLIT_BWD
    case BWD_INPUT: slot_of(mb, chunk, FOR_BWD); CHECK(prt_zero_grads(R.m, chunk)); break;
    case BWD_WEIGHT:
        slot_of(mb, chunk, FOR_WEIGHT);
        CHECK(prt_zero_grads(R.m, chunk));
        CHECK(prt_zero_dry_pass(R.m, chunk, true));
        break;
#endif
#if USES_GATHER_PARAMS
    case GATHER_PARAMS:  CHECK(prt_zero_gather(R.m, chunk)); break;
    case RELEASE_PARAMS: prt_zero_release(R.m, chunk); break;
#endif
#if USES_REDUCE_GRADS
    case REDUCE_GRADS:   CHECK(prt_zero_reduce(R.m, chunk)); break;
    case REDUCE_DURING:  CHECK(prt_zero_reduce_during(R.m, chunk)); break;
#endif
    case FREE_SLOT:      prt_pipe_done(R.pipe, mb, chunk); break;
#if PIPELINE
    case SEND_ACT: case RECV_ACT: case SEND_GRAD: case RECV_GRAD: case POST_RECV_ACT: case POST_RECV_GRAD:
        pipe_xfer(kind, mb, chunk, peer);   /* the buffers, not the bytes */
        break;
#endif
    default:             break;   /* step-level collectives, the update */
    }
#if EXPERT_PARALLEL
    expert_dry(kind, chunk);
#endif
}

static void op(OpKind kind, int mb, int chunk, int peer)
{
#if PIPELINE
    /* PP: the queued sends go now, as one group (NCCL: a send ends only once its receive is
     * posted, so a send never waits behind this op); a receive takes them along itself.
     * The sends that completed are freed first (prt_pipe_post) */
    if (kind != SEND_ACT && kind != RECV_ACT && kind != SEND_GRAD && kind != RECV_GRAD && kind != FREE_SLOT &&
        kind != POST_RECV_ACT && kind != POST_RECV_GRAD)
        CHECK(prt_pipe_post(R.pipe));
#endif
    if (R.args.dry_run) { dry_op(kind, mb, chunk, peer); return; }
    prt_trace_begin(R.step, (int)kind, mb, chunk);   /* --trace: the op's start (a flag test otherwise) */
#if EXPERT_PARALLEL
    expert_pre(kind, chunk);
#endif
#if !PIPELINE
    (void)peer;
#endif
    switch (kind) {
    case FWD: chunk_fwd(chunk, slot_of(mb, chunk, FOR_FWD)); break;
#if USES_BWD
    case BWD: {
        prt_slot *s = slot_of(mb, chunk, FOR_BWD);
        CHECK(prt_zero_grads(R.m, chunk));            /* the gradient buffer is free to write */
        chunk_bwd(chunk, s);
        break;
    }
#endif
#if SPLIT_BWD
    case BWD_INPUT: {                                                    /* zb-h1 B: input gradients */
        prt_slot *s = slot_of(mb, chunk, FOR_BWD);
        CHECK(prt_zero_grads(R.m, chunk));            /* embedding and final-norm gradients are written here */
        chunk_bwd_input(chunk, s);
        break;
    }
    case BWD_WEIGHT: {                                                   /* zb-h1 W: weight gradients */
        prt_slot *s = slot_of(mb, chunk, FOR_WEIGHT);
        CHECK(prt_zero_grads(R.m, chunk));            /* the gradient buffer is free to write */
        chunk_bwd_weight(chunk, s);
        break;
    }
#endif
#if PIPELINE
    case SEND_ACT: case RECV_ACT: case SEND_GRAD: case RECV_GRAD: case POST_RECV_ACT: case POST_RECV_GRAD:
        pipe_xfer(kind, mb, chunk, peer);
        break;
#endif
#if USES_GATHER_PARAMS
    case GATHER_PARAMS:  CHECK(prt_zero_gather(R.m, chunk)); break;   /* ZeRO-3: all-gather over DP, layer by layer */
    case RELEASE_PARAMS: prt_zero_release(R.m, chunk); break;         /* ZeRO-3: free the gathered copy */
#endif
#if USES_REDUCE_GRADS
    case REDUCE_GRADS:   CHECK(prt_zero_reduce(R.m, chunk)); break;   /* @REDUCE@ */
    case REDUCE_DURING:  CHECK(prt_zero_reduce_during(R.m, chunk)); break;
#endif
#if USES_SP_NORM_REDUCE
    case SP_NORM_REDUCE: CHECK(prt_zero_sp_norm_reduce(R.m)); break; /* TP: all-reduce the norm gradients */
#endif
#if USES_EMBED_REDUCE
    case EMBED_REDUCE:   CHECK(prt_zero_embed_reduce(R.m)); break;   /* first + last stage: wte gradient */
#endif
#if EXPERT_PARALLEL
    case NORM_REDUCE:    CHECK(prt_zero_norm_reduce_pair(R.m, R.me, R.step + 1)); break; /* all ranks, both groups */
#else
    case NORM_REDUCE:    CHECK(prt_zero_norm_reduce(R.m, R.step + 1)); break; /* all ranks: squared norm */
#endif
    case OPT_STEP:       CHECK(prt_zero_opt_step(R.m, &R.opt, R.step + 1)); break;  /* @OPT@ */
#if USES_SYNC_PARAMS
    case SYNC_PARAMS:    CHECK(prt_zero_sync(R.m)); break;            /* ZeRO-1/2: all-gather updated shards */
#endif
    case FREE_SLOT:      prt_pipe_done(R.pipe, mb, chunk); break;
    }
#if EXPERT_PARALLEL
    expert_post(kind, chunk);
#endif
    prt_trace_end();                                  /* --trace: its end */
}

//@@ check-steps
static void train_step(void)
{
    op(FWD, 0, 0, -1);
#if SPLIT_BWD
    op(BWD_INPUT, 0, 0, -1);
    op(BWD_WEIGHT, 0, 0, -1);
#else
    op(BWD, 0, 0, -1);
#endif
    op(FREE_SLOT, 0, 0, -1);
    op(NORM_REDUCE, -1, -1, -1);
    op(OPT_STEP, -1, -1, -1);
}

//@@ main
/* ---- main ------------------------------------------------------------------------ */

#if EXPERT_PARALLEL
/* The EP and expert-DP groups and the two parameter groups: the dense
 * model (every tensor but the routed experts', over DP) and this EP rank's
 * experts (over expert-DP, R.ce: the context with c->edp as its DP group).
 * Both tables are PARAMS with the other's tensors at vstage -1, so ids and
 * therefore initial values are the single-rank run's; checkpoints hold
 * both (prt_model_save_pair), as global tensors any layout resumes. */
static void expert_groups(void)
{
    if (!R.args.dry_run) CHECK(prt_ep_init(R.c, EP));   /* --dry-run's context has no groups */
    R.tab_d = (prt_param *)prt_host_alloc(N_PARAMS * sizeof(prt_param));
    R.tab_e = (prt_param *)prt_host_alloc(N_PARAMS * sizeof(prt_param));
    if (!R.tab_d || !R.tab_e) prt_run_fail(R.c, "prt_host_alloc (parameter tables)", PRT_ERR_NOMEM);
    int r = prt_ep_rank(R.c, EP);
    for (int i = 0; i < N_PARAMS; i++) {
        R.tab_d[i] = R.tab_e[i] = PARAMS[i];
        if (EXPERT_EP[i] >= 0) R.tab_d[i].vstage = -1;   /* an expert's: the experts' group */
        if (EXPERT_EP[i] != r) R.tab_e[i].vstage = -1;   /* dense, or another EP rank's expert */
    }
    R.ce = *R.c;
    R.ce.dp = R.c->edp;
    R.ce.layout.dp = DP / EP;
    R.ce.coord.dp = prt_edp_rank(R.c, EP);
    CHECK(prt_model_new(R.c, R.tab_d, N_PARAMS, N_LAYERS, CHUNKS, ZERO, SEED, &R.m));
    CHECK(prt_model_new(&R.ce, R.tab_e, N_PARAMS, N_LAYERS, CHUNKS, ZERO, SEED, &R.me));
}
#endif

/* Write a checkpoint of the steps done (R.step) under --save DIR. */
static void save(void)
{
    char dir[4096];
    const prt_save_info info = { SEED, MODEL_NAME, PLAN_HASH, MODEL_CONFIG };
#if EXPERT_PARALLEL
    CHECK(prt_model_save_pair(R.m, R.me, R.args.save, R.step, &info, dir, sizeof dir));   /* both groups */
#else
    CHECK(prt_model_save(R.m, R.args.save, R.step, &info, dir, sizeof dir));
#endif
#if FP8_DELAYED
    CHECK(prt_fp8_state_save(R.c, dir, FP8_HISTORY, FP8_N_HIST));   /* the amax histories, beside the weights */
#endif
#if EXPERT_BIAS
    bias_save(dir);   /* the experts' routing biases, beside the weights */
#endif
    prt_log_note(R.log, "saved %s\n", dir);
}

/* --resume DIR: the weights, AdamW state and step of its newest checkpoint,
 * whatever layout wrote it. A bad or foreign checkpoint stops every rank
 * (rank 0 says why). */
static void resume(void)
{
    char dir[4096];
    const prt_save_info info = { SEED, MODEL_NAME, PLAN_HASH, MODEL_CONFIG };
#if EXPERT_PARALLEL
    if (prt_model_load_pair(R.m, R.me, R.args.resume, &info, &R.step, dir, sizeof dir))
#else
    if (prt_model_load(R.m, R.args.resume, &info, &R.step, dir, sizeof dir))
#endif
        prt_run_stop(R.c);   /* every rank took rank 0's verdict */
#if FP8_DELAYED
    if (prt_fp8_state_load(R.c, dir, FP8_HISTORY, FP8_N_HIST))   /* refused without them: other scales */
        prt_run_stop(R.c);
#ifdef PRT_CUDA
    fp8_scales_out();   /* the resumed scales, where the casts read them */
#endif
#endif
#if EXPERT_BIAS
    bias_load(dir);
#endif
    prt_log_note(R.log, "resumed from %s: %ld steps done\n", dir, R.step);
}

/* --init-from DIR: the weights of a Hugging Face model directory whose
 * config.json matches this model (rank 0 checks it, naming a mismatched
 * field); each rank reads only its own elements. AdamW starts at 0. */
static void init_from(void)
{
    const prt_save_info info = { SEED, MODEL_NAME, PLAN_HASH, MODEL_CONFIG };
#if EXPERT_PARALLEL
    if (prt_model_init_hf(R.m, R.me, R.args.init_from, &info))
#else
    if (prt_model_init_hf(R.m, NULL, R.args.init_from, &info))
#endif
        prt_run_stop(R.c);   /* every rank took rank 0's verdict */
    prt_log_note(R.log, "initialised from %s\n", R.args.init_from);
}

/* Between pipeline stages: with sequence parallelism each TP rank holds
 * rows of its own and sends them whole; without it every TP rank holds the
 * same activation, so each sends a 1/TP part over its own NIC and the
 * receiving stage all-gathers them over TP (prt_pipe_new's tp_split) —
 * when the N x C elements split evenly (planner/cost.c's pp_send_time
 * holds the same rule). */
#if SP
static const bool PIPE_TP_SPLIT = false;
#else
static const bool PIPE_TP_SPLIT = TP > 1 && N * C % TP == 0;
#endif

/* --dry-run: the model laid out, one step's allocations replayed (dry_op),
 * the allocator's peak reported (--mem-report PATH, else stdout). */
static int dry_run(void)
{
#if EXPERT_BIAS
    bias_init();   /* their bytes, as a run holds them */
#endif
    scratch_alloc();
    CHECK(prt_pipe_new(R.c, N_MICRO, CHUNKS, NL * C, PIPE_TP_SPLIT, EARLY_RECVS, slot_alloc, slot_free, NULL, &R.pipe));
    train_step();
    CHECK(prt_pipe_flush(R.pipe));
    CHECK(prt_mem_report(R.c, R.args.mem_report ? R.args.mem_report : "/dev/stdout"));
#if EXPERT_BIAS
    bias_free();
#endif
    prt_pipe_free(R.pipe);
    scratch_free();
    prt_model_free(R.m);
#if EXPERT_PARALLEL
    prt_model_free(R.me);
    prt_host_free(R.tab_d);
    prt_host_free(R.tab_e);
#endif
    prt_run_end(R.c);
    return 0;
}

int main(int argc, char **argv)
{
#if CONTEXT_PARALLEL
    int rc = prt_run_start_layout(&argc, &argv, (prt_layout){ .dp = DP, .tp = TP, .pp = PP, .cp = CP },
                                  STEPS, DATA, BANNER, &R.args, &R.c);
#else
    int rc = prt_run_start(&argc, &argv, DP, TP, PP, STEPS, DATA, BANNER, &R.args, &R.c);
#endif
    if (rc || !R.c) return rc;
    R.opt = ADAMW;
    R.opt.total = R.args.steps;   /* the cosine schedule spans the whole run, resumed or not */
#if EXPERT_PARALLEL
    expert_groups();
#else
    CHECK(prt_model_new(R.c, PARAMS, N_PARAMS, N_LAYERS, CHUNKS, ZERO, SEED, &R.m));
#endif
    if (R.args.dry_run) return dry_run();
#if FP8
    {   /* the CUDA build's FP8 GEMMs need FP8 tensor cores (compute capability 8.9), and the
         * recipe's scale modes theirs (prt_fp8_device_check): say so now */
        char why[320];
        if (prt_fp8_device_check(FP8_RECIPE, why, sizeof why) != PRT_OK) prt_run_fail(R.c, "fp8", PRT_ERR_CUDA);
    }
#endif
    if (R.args.export_hf && prt_model_check_hf(MODEL_CONFIG))   /* refused before the first step, not after the last */
        prt_run_stop(R.c);
    CHECK(prt_log_open(R.c, R.args.log_json, &R.log));
#if FP8_DELAYED
    fp8_history_init();
#endif
#if EXPERT_BIAS
    bias_init();
#endif
    if (R.args.resume) resume();
    if (!R.args.init_from && !R.args.resume) R.args.init_from = INIT_FROM;   /* train.init, if any */
    if (R.args.init_from) init_from();
    R.step0 = R.step;   /* --dump-logits writes this step's logits */
    if (R.args.resume && R.step >= R.args.steps)   /* a run that has nothing to do says so */
        prt_log_note(R.log, "nothing to train: the checkpoint has done %ld steps and --steps is %ld "
                     "(give a larger --steps to continue)\n", R.step, R.args.steps);
    else if (R.args.steps == 0)
        prt_log_note(R.log, "nothing to train: --steps 0 (the weights are only %s)\n",
                     R.args.save || R.args.export_hf ? "saved and exported" : "laid out: give --save DIR to keep them");
#if CONTEXT_PARALLEL
    CHECK(prt_batch_open(R.c, R.args.data, SEQ, V, GLOBAL_BATCH, B, SEED, &R.data));   /* this CP rank's T of SEQ */
#else
    CHECK(prt_batch_open(R.c, R.args.data, T, V, GLOBAL_BATCH, B, SEED, &R.data));
#endif
    prt_log_plan(R.log, R.args.steps, R.step, MODEL_FLOPS, PEAK_FLOPS);
    scratch_alloc();
    CHECK(prt_pipe_new(R.c, N_MICRO, CHUNKS, NL * C, PIPE_TP_SPLIT, EARLY_RECVS, slot_alloc, slot_free, NULL, &R.pipe));
    long saved = R.args.resume ? R.step : -1;
    while (R.step < R.args.steps) {
        prt_log_step_begin(R.log);
        R.loss_sum = 0;
        train_step();
        CHECK(prt_pipe_flush(R.pipe));
        CHECK(prt_ops_sync());   /* the step's one device sync: a failed op ends the run here, naming it */
#if FP8_DELAYED
        fp8_history_step();   /* the step's amaxes over the world into the histories: next step's scales */
#endif
#if EXPERT_BIAS
        bias_step();          /* the step's loads over the world: each expert's bias moved */
#endif
        R.step++;   /* steps done: the data of step k is a function of (SEED, k - 1) */
#if CONTEXT_PARALLEL
        CHECK(prt_log_step_end(R.log, R.step, R.loss_sum, (double)GLOBAL_BATCH * SEQ,
                               prt_model_grad_norm(R.m)));
#else
        CHECK(prt_log_step_end(R.log, R.step, R.loss_sum, (double)GLOBAL_BATCH * T,
                               prt_model_grad_norm(R.m)));
#endif
        if (R.args.save && R.args.save_every && R.step % R.args.save_every == 0) { save(); saved = R.step; }
    }
    if (R.args.save && saved != R.step) save();
    if (R.args.export_path) {   /* the final checkpoint as one safetensors file, model alone */
        CHECK(prt_model_export(R.m, R.args.save, R.step, R.args.export_path));
        prt_log_note(R.log, "exported %s\n", R.args.export_path);
    }
    if (R.args.export_hf) {   /* the final checkpoint as a Hugging Face model directory */
        CHECK(prt_model_export_hf(R.m, R.args.save, R.step, R.args.export_hf, R.args.export_hf_dtype));
        prt_log_note(R.log, "exported %s (Hugging Face)\n", R.args.export_hf);
    }
#if EXPERT_PARALLEL
    if (R.args.dump_params) CHECK(prt_model_dump_pair(R.m, R.me, R.args.dump_params));
#else
    if (R.args.dump_params) CHECK(prt_model_dump(R.m, R.args.dump_params));
#endif
    if (R.args.mem_report) CHECK(prt_mem_report(R.c, R.args.mem_report));   /* the allocator's peak */
#if FP8
    fp8_weights_free();
#endif
#if FP8_DELAYED
    fp8_history_free();
#endif
#if EXPERT_BIAS
    bias_free();
#endif
    prt_pipe_free(R.pipe);
    scratch_free();
    prt_log_close(R.log);
    prt_batch_close(R.data);
    prt_model_free(R.m);
#if EXPERT_PARALLEL
    prt_model_free(R.me);
    prt_host_free(R.tab_d);
    prt_host_free(R.tab_e);
#endif
    prt_run_end(R.c);
    return 0;
}
