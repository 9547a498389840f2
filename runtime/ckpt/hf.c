/*
 * hf.c: Hugging Face model directories out of a planc checkpoint and into
 * a run (issue 28).
 *
 * A planc checkpoint holds planc's tensors (fused QKV and gate/up, RoPE on
 * interleaved pairs, (out, in) weights, the model's V rows of a padded
 * vocabulary) and, since issue 28, the model's hyperparameters as planc's
 * JSON ("model_config", written by the generated program). This file maps
 * such a model onto one Hugging Face architecture, exactly or not at all:
 *
 *   - which architecture (hf_arch): Llama, Mistral (sliding window), Qwen2
 *     (biases on Q, K, V), Qwen3 (q/k norm), Mixtral (routed experts), Qwen3-MoE and
 *     Qwen2-MoE (q/k norm or Q, K, V biases, routed experts, renormalised or
 *     not, Qwen2-MoE's gated shared expert), GPT-2 (learned
 *     positions, LayerNorm, GELU, biases), Gemma (GeGLU, sqrt(hidden)
 *     embedding, x*(1+w) RMSNorm), Gemma 2 (Gemma's with sandwich norms,
 *     soft-caps, query_pre_attn_scalar, every other block sliding), Gemma 3
 *     (Gemma 2's block with Gemma's q/k norm by 1 + w, every K-th block
 *     global, the local blocks' own RoPE base) or OLMo-2 (post-norms, q/k
 *     norm over the whole projections); anything else is refused with the
 *     feature named;
 *   - config.json (hf_fields): every field the model uses, with
 *     transformers' default for a field a config may leave out, so that
 *     one table writes the file and checks one;
 *   - the tensors (hf_map): each Hugging Face tensor is a run of rows of
 *     one planc tensor (a Seg), possibly permuted per head (RoPE: planc
 *     rotates pairs (2i, 2i+1), transformers' rotate_half pairs (i, i+D/2),
 *     the inverse of Meta's convert_llama_weights_to_hf.py `permute`; Qwen3's
 *     and Gemma 3's q_norm and k_norm gains act on a head's D values before
 *     RoPE, so their D rows take the same within-head permutation) or
 *     transposed (GPT-2's Conv1D holds (in, out)).
 *
 * Export reads whole planc tensors from the checkpoint (prt_ckpt_read) and
 * writes safetensors files (st_header, st_out: atomic, like every file of
 * runtime/ckpt). Import opens the directory's files with prt_st_open (the
 * one safetensors parser) and reads, row by row, just the rectangle a
 * rank asks for. Values are copied, never recomputed: fp32 -> fp32 and
 * bf16 -> fp32 -> bf16 are exact, so HF -> planc -> HF is bit-identical.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ckpt_internal.h"
#include "prt_ckpt.h"

/* ---- the model, as the checkpoint's model_config describes it ------------- */

typedef struct {
    int64_t vocab, seq, dim, blocks, heads, kv, hd, window, hidden, experts, top_k, shared;
    double  rope_theta, eps, dropout, cap, aux;
    bool    rope_scaling, ffn_bias, tied, moe;
    bool    embed_scale, norm_plus_one;   /* Gemma's sqrt(dim) normalizer and x*(1+w) RMSNorm */
    bool    qk_norm;                      /* Qwen3's and Gemma 3's q_norm, k_norm ("qk_norm": "rmsnorm") */
    bool    qk_proj;                      /* OLMo-2's, over the whole projections ("rmsnorm_projection") */
    int64_t window_every;                 /* `sliding_window W every K`: K (0: every block alike) */
    double  rope_local;                   /* Gemma 3's local blocks' RoPE base; 0: none */
    double  attn_softcap, query_scalar, logit_softcap;   /* Gemma 2's; 0: none (absent before them) */
    char    norm_pos[2][16];              /* attention's and the MLP's norm_position ("pre" when absent) */
    char    score[16];                    /* a mixture's router scores: softmax | sigmoid */
    int64_t shared_hidden;                /* its shared experts' width (absent: hidden) */
    bool    shared_gate;                  /* their sigmoid gate (Qwen2-MoE's shared_expert_gate) */
    int64_t route_groups;                 /* grouped routing's groups (absent or 1: none) */
    double  routed_scale;                 /* the routed weights' scale (absent: 1) */
    bool    expert_bias;                  /* aux-loss-free balancing's routing bias (absent: none) */
    bool    norm_topk;                    /* its top-k weights renormalised (norm_topk_prob) */
    char    position[16], attn_norm[16], attn_bias[8], act[16], ffn_norm[16], final_norm[16];
    char    uniform[256];
} HfModel;

static const char *js_s(const js_doc *d, int i) { return i >= 0 && d->n[i].kind == JS_STR ? d->n[i].str : NULL; }

/* Key k of object 0 as a number; false if absent or not one. */
static bool num_of(const js_doc *d, const char *k, double *v)
{
    int i = js_get(d, 0, k);
    if (i < 0 || d->n[i].kind != JS_NUM) return false;
    char t[64];
    snprintf(t, sizeof t, "%.*s", (int)(d->n[i].len < 63 ? d->n[i].len : 63), d->n[i].str);
    *v = strtod(t, NULL);
    return true;
}

/* Key k of object 0 as a boolean; def if absent or not one (the keys
 * model_config gained later, absent from older checkpoints). */
static bool bool_of(const js_doc *d, const char *k, bool def)
{
    int i = js_get(d, 0, k);
    return i >= 0 && d->n[i].kind == JS_BOOL ? d->n[i].count != 0 : def;
}

static prt_status parse_model(const char *config, HfModel *m)
{
    js_doc d = {0};
    memset(m, 0, sizeof *m);
    if (js_parse(config, strlen(config), "model_config", &d)) return PRT_ERR_FORMAT;
    struct { const char *k; int64_t *v; } ints[] = {
        {"vocab", &m->vocab}, {"seq", &m->seq}, {"dim", &m->dim}, {"blocks", &m->blocks},
        {"heads", &m->heads}, {"kv_heads", &m->kv}, {"head_dim", &m->hd}, {"window", &m->window},
        {"hidden", &m->hidden}, {"experts", &m->experts}, {"top_k", &m->top_k}, {"shared", &m->shared}};
    struct { const char *k; double *v; } dbl[] = {
        {"rope_theta", &m->rope_theta}, {"norm_eps", &m->eps}, {"dropout", &m->dropout},
        {"capacity_factor", &m->cap}, {"aux_loss", &m->aux}};
    struct { const char *k; char *v; size_t cap; } str[] = {
        {"position", m->position, sizeof m->position}, {"attn_norm", m->attn_norm, sizeof m->attn_norm},
        {"attn_bias", m->attn_bias, sizeof m->attn_bias}, {"act", m->act, sizeof m->act},
        {"ffn_norm", m->ffn_norm, sizeof m->ffn_norm}, {"final_norm", m->final_norm, sizeof m->final_norm},
        {"uniform", m->uniform, sizeof m->uniform}, {"ffn", NULL, 0}};
    prt_status st = PRT_OK;
    double v;
    for (size_t i = 0; !st && i < sizeof ints / sizeof ints[0]; i++) {
        if (!num_of(&d, ints[i].k, &v)) st = ckpt_fail(PRT_ERR_FORMAT, "model_config: no number \"%s\"", ints[i].k);
        else *ints[i].v = (int64_t)v;
    }
    for (size_t i = 0; !st && i < sizeof dbl / sizeof dbl[0]; i++)
        if (!num_of(&d, dbl[i].k, dbl[i].v)) st = ckpt_fail(PRT_ERR_FORMAT, "model_config: no number \"%s\"", dbl[i].k);
    for (size_t i = 0; !st && i < sizeof str / sizeof str[0]; i++) {
        const char *s = js_s(&d, js_get(&d, 0, str[i].k));
        if (!s) st = ckpt_fail(PRT_ERR_FORMAT, "model_config: no string \"%s\"", str[i].k);
        else if (str[i].v) snprintf(str[i].v, str[i].cap, "%s", s);
        else m->moe = !strcmp(s, "moe");
    }
    const char *bk[] = {"rope_scaling", "ffn_bias", "tied"};
    bool *bv[] = {&m->rope_scaling, &m->ffn_bias, &m->tied};
    for (int i = 0; !st && i < 3; i++) {
        int n = js_get(&d, 0, bk[i]);
        if (n < 0 || d.n[n].kind != JS_BOOL) st = ckpt_fail(PRT_ERR_FORMAT, "model_config: no boolean \"%s\"", bk[i]);
        else *bv[i] = d.n[n].count != 0;
    }
    m->embed_scale = bool_of(&d, "embed_scale", false);       /* absent: false (written since Gemma) */
    m->norm_plus_one = bool_of(&d, "norm_plus_one", false);
    const char *qk = js_s(&d, js_get(&d, 0, "qk_norm"));   /* absent: none (written since Qwen3) */
    if (!st && qk && strcmp(qk, "none") && strcmp(qk, "rmsnorm") && strcmp(qk, "rmsnorm_projection"))
        st = ckpt_fail(PRT_ERR_FORMAT, "model_config: qk_norm \"%s\" is none, rmsnorm or rmsnorm_projection", qk);
    m->qk_norm = qk && !strcmp(qk, "rmsnorm");
    m->qk_proj = qk && !strcmp(qk, "rmsnorm_projection");
    if (num_of(&d, "window_every", &v)) m->window_every = (int64_t)v;   /* absent: 0 (written since Gemma 2's export) */
    if (!num_of(&d, "rope_local_theta", &m->rope_local)) m->rope_local = 0;   /* absent: none (issue 29) */
    const char *g2[] = {"attn_softcap", "query_scalar", "logit_softcap"};   /* absent: 0 (written since Gemma 2) */
    double *g2v[] = {&m->attn_softcap, &m->query_scalar, &m->logit_softcap};
    for (int i = 0; i < 3; i++)
        if (!num_of(&d, g2[i], g2v[i])) *g2v[i] = 0;
    const char *pk[] = {"attn_norm_position", "ffn_norm_position"};   /* absent: pre (written since issue 29) */
    for (int i = 0; i < 2; i++) {
        const char *s = js_s(&d, js_get(&d, 0, pk[i]));
        snprintf(m->norm_pos[i], sizeof m->norm_pos[i], "%s", s ? s : "pre");
    }
    const char *sc = js_s(&d, js_get(&d, 0, "score"));   /* absent: softmax, normalised (Mixtral's) */
    snprintf(m->score, sizeof m->score, "%s", sc ? sc : "softmax");
    m->norm_topk = bool_of(&d, "norm_topk_prob", true);
    double sh = 0;   /* absent (written before issue 29): the experts' width, no gate */
    m->shared_hidden = num_of(&d, "shared_hidden", &sh) ? (int64_t)sh : m->hidden;
    double rg = 1;
    m->route_groups = num_of(&d, "route_groups", &rg) ? (int64_t)rg : 1;
    double rs = 1;
    m->routed_scale = num_of(&d, "routed_scale", &rs) ? rs : 1;
    m->expert_bias = bool_of(&d, "expert_bias", false);
    m->shared_gate = bool_of(&d, "shared_gate", false);
    js_free(&d);
    return st;
}

/* ---- the architecture ------------------------------------------------------- */

/* ORDER HfArch */
typedef enum { ARCH_LLAMA, ARCH_MISTRAL, ARCH_QWEN2, ARCH_MIXTRAL, ARCH_GPT2, ARCH_GEMMA, ARCH_QWEN3,
               ARCH_QWEN3_MOE, ARCH_QWEN2_MOE, ARCH_GEMMA2, ARCH_OLMO2, ARCH_GEMMA3 } HfArch;
static const char *const ARCH_CLASS[] = { "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                          "MixtralForCausalLM", "GPT2LMHeadModel", "GemmaForCausalLM",
                                          "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM",
                                          "Gemma2ForCausalLM", "Olmo2ForCausalLM", "Gemma3ForCausalLM" };
static const char *const ARCH_TYPE[] = { "llama", "mistral", "qwen2", "mixtral", "gpt2", "gemma", "qwen3",
                                         "qwen3_moe", "qwen2_moe", "gemma2", "olmo2", "gemma3_text" };

#define REFUSE(...) return ckpt_fail(PRT_ERR_UNSUPPORTED, __VA_ARGS__)

/* Both sub-blocks' norms stand at pos (norm_position pre, post or sandwich). */
static bool norms_at(const HfModel *m, const char *pos)
{
    return !strcmp(m->norm_pos[0], pos) && !strcmp(m->norm_pos[1], pos);
}

/* Gemma 2 (Gemma2ForCausalLM, transformers' modeling_gemma2): Gemma's
 * layers (GeGLU, the sqrt(hidden) embedding, x*(1+w) RMSNorm, tied head)
 * with an RMSNorm before and after each sub-block (norm_position sandwich),
 * the attention scores soft-capped (attn_logit_softcapping, or null),
 * scaled by query_pre_attn_scalar^-1/2, and the logits soft-capped
 * (final_logit_softcapping, or null). Its layer i slides over
 * sliding_window tokens when i % 2 == 0 and attends to every earlier token
 * otherwise: planc's `sliding_window W every 2` (block i global when
 * (i + 1) % 2 == 0). A model without a window is written with
 * sliding_window = seq, which no context of the model reaches. */
static prt_status gemma2_check(const HfModel *m)
{
    if (!m->embed_scale)
        REFUSE("norm_position sandwich with act geglu but without embedding { scale sqrt_dim }: Gemma 2, the "
               "sandwich-norm architecture, multiplies the embedding by sqrt(hidden_size)");
    if (!m->norm_plus_one)
        REFUSE("norm_position sandwich with act geglu but without norm_plus_one true: Gemma 2, the sandwich-norm "
               "architecture, computes RMSNorm as x*(1+w)");
    if (strcmp(m->position, "rope") || strcmp(m->attn_norm, "rmsnorm") || strcmp(m->ffn_norm, "rmsnorm") ||
        strcmp(m->final_norm, "rmsnorm"))
        REFUSE("norm_position sandwich with %s positions or layernorm: Gemma 2 has RoPE and RMSNorm", m->position);
    if (m->moe) REFUSE("moe with norm_position sandwich: Gemma 2 has no experts");
    if (strcmp(m->attn_bias, "none") || m->ffn_bias) REFUSE("biases with norm_position sandwich: Gemma 2 has none");
    if (m->window_every && m->window_every != 2)
        REFUSE("sliding_window %lld every %lld: Gemma2ForCausalLM slides on blocks 0, 2, 4, ... and attends to "
               "every earlier token on the others (every 2)", (long long)m->window, (long long)m->window_every);
    if (m->window && !m->window_every)
        REFUSE("sliding_window %lld on every block: Gemma2ForCausalLM's blocks 1, 3, 5, ... attend to every earlier "
               "token (sliding_window %lld every 2)", (long long)m->window, (long long)m->window);
    if (m->hd % 2) REFUSE("head_dim %lld is odd: RoPE rotates pairs", (long long)m->hd);
    return PRT_OK;
}

/* Gemma 3 (Gemma3ForCausalLM, model_type gemma3_text, transformers'
 * modeling_gemma3, v4.50 on): Gemma 2's block (gemma2_check's rules but
 * the window's) with q_norm and k_norm, Gemma3RMSNorm's x*(1+w) over each
 * query and key head's head_dim values before RoPE (qk_norm rmsnorm under
 * norm_plus_one). Its layer i is global when (i + 1) % sliding_window_pattern
 * == 0 and slides over sliding_window tokens otherwise: planc's `every K`
 * with K the pattern. The local layers rotate at rope_local_base_freq,
 * unscaled, the global ones at rope_theta (planc's rope_local_theta, or
 * rope_theta on both where the plan has none). Soft-caps are null unless
 * set. A model without a window is written with sliding_window = seq. */
static prt_status gemma3_check(const HfModel *m)
{
    if (m->qk_proj)
        REFUSE("qk_norm rmsnorm_projection with norm_position sandwich: Gemma 3's q/k norm is of each head "
               "(qk_norm rmsnorm); OLMo-2's of the whole projection comes with norm_position post");
    if (!m->embed_scale)
        REFUSE("qk_norm rmsnorm with norm_position sandwich but without embedding { scale sqrt_dim }: Gemma 3, "
               "the sandwich-norm architecture with a q/k norm, multiplies the embedding by sqrt(hidden_size)");
    if (!m->norm_plus_one)
        REFUSE("qk_norm rmsnorm with norm_position sandwich but without norm_plus_one true: Gemma 3 computes "
               "every RMSNorm, q_norm and k_norm included, as x*(1+w)");
    if (strcmp(m->position, "rope") || strcmp(m->attn_norm, "rmsnorm") || strcmp(m->ffn_norm, "rmsnorm") ||
        strcmp(m->final_norm, "rmsnorm"))
        REFUSE("qk_norm rmsnorm with norm_position sandwich and %s positions or layernorm: Gemma 3 has RoPE and "
               "RMSNorm", m->position);
    if (m->moe) REFUSE("moe with norm_position sandwich: Gemma 3 has no experts");
    if (strcmp(m->attn_bias, "none") || m->ffn_bias) REFUSE("biases with norm_position sandwich: Gemma 3 has none");
    if (m->window && !m->window_every)
        REFUSE("sliding_window %lld on every block: Gemma3ForCausalLM's every sliding_window_pattern-th block "
               "attends to every earlier token (sliding_window %lld every K)", (long long)m->window,
               (long long)m->window);
    if (m->hd % 2) REFUSE("head_dim %lld is odd: RoPE rotates pairs", (long long)m->hd);
    return PRT_OK;
}

/* OLMo-2 (Olmo2ForCausalLM, transformers' modeling_olmo2): Llama's block
 * with the RMSNorm of each sub-block after it, on its output
 * (norm_position post), and q_norm / k_norm over the whole q and k
 * projections, before the heads are split and RoPE (qk_norm
 * rmsnorm_projection). attention_bias puts biases on all four projections. */
static prt_status olmo2_check(const HfModel *m)
{
    if (!norms_at(m, "post"))
        REFUSE("qk_norm rmsnorm_projection with norm_position %s on attention and %s on the MLP: Olmo2ForCausalLM, "
               "the whole-projection q/k norm architecture, has norm_position post on both", m->norm_pos[0], m->norm_pos[1]);
    if (!m->qk_proj)
        REFUSE("norm_position post without qk_norm rmsnorm_projection: Olmo2ForCausalLM, the post-norm "
               "architecture, also normalises q and k over the whole projection");
    if (strcmp(m->position, "rope") || strcmp(m->attn_norm, "rmsnorm") || strcmp(m->ffn_norm, "rmsnorm") ||
        strcmp(m->final_norm, "rmsnorm") || strcmp(m->act, "swiglu"))
        REFUSE("norm_position post with %s positions, layernorm or act %s: OLMo-2 has RoPE, RMSNorm and SwiGLU",
               m->position, m->act);
    if (m->embed_scale || m->norm_plus_one) REFUSE("norm_position post with Gemma's embedding scale or x*(1+w) RMSNorm: OLMo-2 has neither");
    if (m->moe) REFUSE("norm_position post with moe: OLMoE is not written");
    if (m->window) REFUSE("sliding_window with norm_position post: OLMo-2 attends to every earlier token");
    if (!strcmp(m->attn_bias, "qkv")) REFUSE("bias qkv with norm_position post: OLMo-2's attention_bias puts biases on Q, K, V and the output");
    if (m->ffn_bias) REFUSE("MLP biases with norm_position post: OLMo-2's MLP has none");
    if (m->attn_softcap > 0 || m->logit_softcap > 0 || m->query_scalar > 0)
        REFUSE("%s with norm_position post: OLMo-2 neither soft-caps nor rescales its scores (Gemma 2 does, with "
               "norm_position sandwich)", m->attn_softcap > 0 ? "attention softcap" : m->logit_softcap > 0
               ? "lm_head softcap" : "query_pre_attn_scalar");
    if (m->hd % 2) REFUSE("head_dim %lld is odd: RoPE rotates pairs", (long long)m->hd);
    return PRT_OK;
}

/* The one architecture that computes exactly what planc's runtime does
 * with this model, or PRT_ERR_UNSUPPORTED naming what has none. */
static prt_status hf_arch(const HfModel *m, HfArch *arch)
{
    if (m->uniform[0]) REFUSE("not one repeated block (%s): a Hugging Face config describes every block alike", m->uniform);
    if (m->rope_scaling) REFUSE("rope_scaling: not written to config.json yet, and an export without it would change the model");
    if (!strcmp(m->final_norm, "none")) REFUSE("no final norm: every architecture written here has one");
    if (!strcmp(m->act, "geglu") && norms_at(m, "sandwich") && (m->qk_norm || m->qk_proj)) {   /* Gemma 3 */
        prt_status st = gemma3_check(m);
        if (!st) *arch = ARCH_GEMMA3;
        return st;
    }
    if (m->rope_local > 0)   /* only Gemma3ForCausalLM turns its local blocks at a base of their own */
        REFUSE("rope_local_theta %g without Gemma 3's block (GeGLU, sandwich norms, qk_norm rmsnorm): "
               "Gemma3ForCausalLM is the one architecture written here with the local blocks' own RoPE base, "
               "and an export without it would change the model", m->rope_local);
    if (!strcmp(m->act, "geglu") && norms_at(m, "sandwich")) {
        prt_status st = gemma2_check(m);
        if (!st) *arch = ARCH_GEMMA2;
        return st;
    }
    if (norms_at(m, "post") || m->qk_proj) {
        prt_status st = olmo2_check(m);
        if (!st) *arch = ARCH_OLMO2;
        return st;
    }
    if (strcmp(m->norm_pos[0], "pre") || strcmp(m->norm_pos[1], "pre")) {
        if (norms_at(m, "sandwich"))
            REFUSE("norm_position sandwich with act %s: Gemma2ForCausalLM, the sandwich-norm architecture, is GeGLU "
                   "(with Gemma's embedding scale and x*(1+w) RMSNorm)", m->act);
        REFUSE("norm_position %s on attention and %s on the MLP: Olmo2ForCausalLM has post on both, "
               "Gemma2ForCausalLM sandwich on both", m->norm_pos[0], m->norm_pos[1]);
    }
    if (m->attn_softcap > 0 || m->logit_softcap > 0 || m->query_scalar > 0)
        REFUSE("%s (Gemma 2) without norm_position sandwich: Gemma2ForCausalLM, the one architecture written here "
               "that has it, normalises before and after each sub-block", m->attn_softcap > 0 ? "attention softcap"
               : m->logit_softcap > 0 ? "lm_head softcap" : "query_pre_attn_scalar");
    if (m->window_every)
        REFUSE("sliding_window %lld every %lld without Gemma 2's sandwich norms: no other architecture written here "
               "alternates local and global blocks", (long long)m->window, (long long)m->window_every);
    if (!strcmp(m->act, "geglu")) {   /* Gemma: GeGLU (tanh GELU), sqrt(dim) embedding, x*(1+w) RMSNorm */
        if (!m->embed_scale)
            REFUSE("act geglu without embedding { scale sqrt_dim }: Gemma, the GeGLU architecture, multiplies "
                   "the embedding by sqrt(hidden_size)");
        if (!m->norm_plus_one)
            REFUSE("act geglu without norm_plus_one true: Gemma, the GeGLU architecture, computes RMSNorm as x*(1+w)");
        if (strcmp(m->position, "rope") || strcmp(m->attn_norm, "rmsnorm") || strcmp(m->ffn_norm, "rmsnorm") ||
            strcmp(m->final_norm, "rmsnorm"))
            REFUSE("act geglu with %s positions or layernorm: Gemma has RoPE and RMSNorm", m->position);
        if (m->moe) REFUSE("moe with act geglu: Gemma has no experts");
        if (m->qk_norm || m->qk_proj)
            REFUSE("qk_norm with act geglu and pre-norms: Gemma (1) has no q/k norm (Gemma 3's comes with "
                   "norm_position sandwich)");
        if (strcmp(m->attn_bias, "none") || m->ffn_bias) REFUSE("biases with act geglu: Gemma has none");
        if (m->window) REFUSE("sliding_window with act geglu: Gemma (1) attends to every earlier token");
        if (m->hd % 2) REFUSE("head_dim %lld is odd: RoPE rotates pairs", (long long)m->hd);
        *arch = ARCH_GEMMA;
        return PRT_OK;
    }
    if (m->qk_norm) {   /* Qwen3: Qwen2's block with q/k norm, biases on all four projections or none */
        if (strcmp(m->position, "rope") || strcmp(m->attn_norm, "rmsnorm") || strcmp(m->ffn_norm, "rmsnorm") ||
            strcmp(m->final_norm, "rmsnorm") || strcmp(m->act, "swiglu"))
            REFUSE("qk_norm rmsnorm with %s positions, layernorm or act %s: Qwen3, the q/k norm architecture, "
                   "has RoPE, RMSNorm and SwiGLU", m->position, m->act);
        if (m->embed_scale || m->norm_plus_one)
            REFUSE("qk_norm rmsnorm with Gemma's embedding scale or x*(1+w) RMSNorm: Qwen3 has neither "
                   "(Gemma 3 has GeGLU and norm_position sandwich)");
        if (!strcmp(m->attn_bias, "qkv"))
            REFUSE("qk_norm rmsnorm with bias qkv: Qwen3's attention_bias puts biases on Q, K, V and the output");
        if (m->ffn_bias) REFUSE("qk_norm rmsnorm with MLP biases: Qwen3's MLP has none");
        if (m->hd % 2) REFUSE("head_dim %lld is odd: RoPE rotates pairs", (long long)m->hd);
        *arch = ARCH_QWEN3;
        if (m->moe) {   /* Qwen3-MoE: Qwen3's attention, softmax top-k experts, norm_topk_prob either way */
            if (m->shared)
                REFUSE("shared experts (%lld) with qk_norm: Qwen3-MoE has none (Qwen2-MoE is not written)",
                       (long long)m->shared);
            if (m->cap > 0) REFUSE("capacity_factor %g: Qwen3-MoE drops no tokens", m->cap);
            if (strcmp(m->score, "softmax")) REFUSE("score %s: Qwen3-MoE's router is a softmax", m->score);
            if (strcmp(m->attn_bias, "none")) REFUSE("attention biases with moe: Qwen3-MoE has none");
            *arch = ARCH_QWEN3_MOE;
        }
        return PRT_OK;
    }
    if (m->embed_scale) REFUSE("embedding { scale sqrt_dim } without act geglu: only Gemma scales the embedding");
    if (m->norm_plus_one) REFUSE("norm_plus_one without act geglu: only Gemma's RMSNorm computes x*(1+w)");
    if (!strcmp(m->position, "learned")) {   /* GPT-2 is the one learned-position architecture */
        if (strcmp(m->attn_norm, "layernorm") || strcmp(m->ffn_norm, "layernorm") || strcmp(m->final_norm, "layernorm"))
            REFUSE("learned positions with rmsnorm: GPT-2 (the learned-position architecture) uses LayerNorm");
        if (m->moe) REFUSE("moe with learned positions: GPT-2 has no experts");
        if (strcmp(m->act, "gelu")) REFUSE("act %s with learned positions: GPT-2's MLP is GELU (tanh form)", m->act);
        if (strcmp(m->attn_bias, "all") || !m->ffn_bias) REFUSE("bias %s with learned positions: GPT-2 has biases on every linear", m->attn_bias);
        if (m->kv != m->heads) REFUSE("kv_heads %lld of %lld heads: GPT-2 has no grouped-query attention", (long long)m->kv, (long long)m->heads);
        if (m->hd * m->heads != m->dim) REFUSE("head_dim %lld x %lld heads != dim %lld: GPT-2's heads split the width", (long long)m->hd, (long long)m->heads, (long long)m->dim);
        if (m->window) REFUSE("sliding_window with learned positions: GPT-2 attends to every earlier token");
        *arch = ARCH_GPT2;
        return PRT_OK;
    }
    if (strcmp(m->position, "rope")) REFUSE("position %s: every architecture written here has RoPE or learned positions", m->position);
    if (strcmp(m->attn_norm, "rmsnorm") || strcmp(m->ffn_norm, "rmsnorm") || strcmp(m->final_norm, "rmsnorm"))
        REFUSE("layernorm with RoPE: Llama, Mistral, Qwen2 and Mixtral use RMSNorm");
    if (strcmp(m->act, "swiglu")) REFUSE("act %s with RoPE: Llama, Mistral, Qwen2 and Mixtral use SwiGLU", m->act);
    if (m->hd % 2) REFUSE("head_dim %lld is odd: RoPE rotates pairs", (long long)m->hd);
    if (m->moe && m->route_groups > 1)
        REFUSE("route_groups %lld: grouped routing is DeepSeek-V3's (not written); Mixtral and the Qwen MoE "
               "models route over every expert", (long long)m->route_groups);
    if (m->moe && m->routed_scale != 1)
        REFUSE("routed_scale %g: DeepSeek's routed_scaling_factor (not written); Mixtral and the Qwen MoE "
               "models weigh their experts by the gate alone", m->routed_scale);
    if (m->moe && m->expert_bias)
        REFUSE("expert_bias true: DeepSeek-V3's e_score_correction_bias (not written); Mixtral and the Qwen MoE "
               "models pick their experts by the scores alone");
    if (m->moe && m->shared) {   /* Qwen2-MoE: one gated shared expert, biases on Q, K, V */
        if (m->shared != 1 || !m->shared_gate)
            REFUSE("shared experts (%lld)%s: Mixtral has none and Qwen2-MoE has one behind shared_gate (DeepSeek "
                   "is not written)", (long long)m->shared, m->shared_gate ? "" : " without shared_gate");
        if (strcmp(m->attn_bias, "qkv") || m->ffn_bias)
            REFUSE("a gated shared expert with attention bias %s%s: Qwen2-MoE has biases on Q, K, V alone",
                   m->attn_bias, m->ffn_bias ? " and MLP biases" : "");
        if (m->cap > 0) REFUSE("capacity_factor %g: Qwen2-MoE drops no tokens", m->cap);
        if (strcmp(m->score, "softmax")) REFUSE("score %s: Qwen2-MoE's router is a softmax", m->score);
        *arch = ARCH_QWEN2_MOE;
        return PRT_OK;
    }
    if (m->moe) {
        if (m->shared) REFUSE("shared experts (%lld): Mixtral has none (DeepSeek is not written)", (long long)m->shared);
        if (m->cap > 0) REFUSE("capacity_factor %g: Mixtral drops no tokens", m->cap);
        if (strcmp(m->score, "softmax") || !m->norm_topk)
            REFUSE("score %s, norm_topk_prob %s: Mixtral's router renormalises the softmax over its top-k",
                   m->score, m->norm_topk ? "true" : "false");
        if (strcmp(m->attn_bias, "none") || m->ffn_bias) REFUSE("biases in a mixture-of-experts model: Mixtral has none");
        *arch = ARCH_MIXTRAL;
        return PRT_OK;
    }
    if (!strcmp(m->attn_bias, "qkv")) {
        if (m->ffn_bias) REFUSE("bias qkv with MLP biases: Qwen2 has biases on Q, K, V alone");
        *arch = ARCH_QWEN2;
        return PRT_OK;
    }
    if (m->window) {
        if (strcmp(m->attn_bias, "none") || m->ffn_bias) REFUSE("sliding_window with biases: Mistral has none");
        *arch = ARCH_MISTRAL;
        return PRT_OK;
    }
    *arch = ARCH_LLAMA;   /* attention_bias and mlp_bias cover bias true */
    return PRT_OK;
}

prt_status prt_hf_check(const char *config, const char **arch)
{
    ckpt_clear();
    HfModel m;
    HfArch a = ARCH_LLAMA;
    prt_status st = parse_model(config, &m);
    if (!st) st = hf_arch(&m, &a);
    if (!st && arch) *arch = ARCH_CLASS[a];
    return st;
}

/* ---- config.json: one table that writes it and checks one ------------------ */

/* V_LAYERS: Gemma 3's layer_types, i blocks of which every f-th is
 * "full_attention" and the others "sliding_attention" (f 0: all full). */
typedef enum { V_INT, V_FLT, V_BOOL, V_STR, V_NULL, V_LAYERS } VKind;
typedef enum { CK_EQ, CK_GE, CK_NO } Check;   /* equal; at least the plan's; not checked */

typedef struct {
    VKind       kind;
    int64_t     i;
    double      f;
    bool        b;
    const char *s;
} HfVal;

typedef struct {
    const char *key;
    HfVal       v;
    Check       check;
    bool        has_dflt;   /* a config.json may leave it out: transformers' default is dflt */
    HfVal       dflt;
    bool        null_means_v; /* absent or null stands for v (GPT-2's n_inner of 4 x n_embd) */
} HfField;

#define VI(x) ((HfVal){ V_INT, (x), 0, false, NULL })
#define VF(x) ((HfVal){ V_FLT, 0, (x), false, NULL })
#define VB(x) ((HfVal){ V_BOOL, 0, 0, (x), NULL })
#define VS(x) ((HfVal){ V_STR, 0, 0, false, (x) })
#define VN    ((HfVal){ V_NULL, 0, 0, false, NULL })
#define VLAYERS(blocks, every) ((HfVal){ V_LAYERS, (blocks), (double)(every), false, NULL })

/* Layer i's type in a V_LAYERS value: transformers' Gemma 3 rule, global
 * when (i + 1) % pattern == 0. */
static const char *layer_type(const HfVal *v, int64_t i)
{
    int64_t k = (int64_t)v->f;
    return k > 0 && (i + 1) % k ? "sliding_attention" : "full_attention";
}
#define REQ(k, v)       (HfField){ k, v, CK_EQ, false, VN, false }
#define OPT(k, v, d)    (HfField){ k, v, CK_EQ, true, d, false }
#define INFO(k, v)      (HfField){ k, v, CK_NO, true, VN, false }

/* A number as JSON writes it: an integer where it is one (Gemma2Config's
 * query_pre_attn_scalar is 256, 144, ...). */
static HfVal num_val(double x)
{
    return x == floor(x) && fabs(x) < 1e15 ? VI((int64_t)x) : VF(x);
}

/* The shape fields Gemma 2's and Gemma 3's configs share, in their
 * order (head_dim 256 where a config leaves it out, as both classes'
 * defaults); the count written. */
static int gemma_shape_fields(const HfModel *m, HfField *out)
{
    int n = 0;
    out[n++] = REQ("vocab_size", VI(m->vocab));
    out[n++] = REQ("hidden_size", VI(m->dim));
    out[n++] = REQ("intermediate_size", VI(m->hidden));
    out[n++] = REQ("num_hidden_layers", VI(m->blocks));
    out[n++] = REQ("num_attention_heads", VI(m->heads));
    out[n++] = REQ("num_key_value_heads", VI(m->kv));
    out[n++] = OPT("head_dim", VI(m->hd), VI(256));
    return n;
}

/* Gemma2ForCausalLM's fields after model_type (gemma2_check's model).
 * The caps absent from a config are Gemma2Config's 50 and 30, and null is
 * none; query_pre_attn_scalar is head_dim where planc's model scales by
 * 1/sqrt(head_dim) (query_scalar 0). */
static int gemma2_fields(const HfModel *m, const char *torch_dtype, HfField *out)
{
    int n = gemma_shape_fields(m, out);
    out[n++] = INFO("hidden_act", VS("gelu_pytorch_tanh"));   /* transformers reads hidden_activation */
    out[n++] = OPT("hidden_activation", VS("gelu_pytorch_tanh"), VS("gelu_pytorch_tanh"));
    out[n++] = (HfField){ "max_position_embeddings", VI(m->seq), CK_GE, true, VI(m->seq), false };
    out[n++] = OPT("rms_norm_eps", VF(m->eps), VF(1e-6));
    out[n++] = OPT("rope_theta", VF(m->rope_theta), VF(10000.0));
    out[n++] = OPT("rope_scaling", VN, VN);
    out[n++] = OPT("tie_word_embeddings", VB(m->tied), VB(true));
    out[n++] = OPT("attention_bias", VB(false), VB(false));
    out[n++] = OPT("query_pre_attn_scalar", num_val(m->query_scalar > 0 ? m->query_scalar : (double)m->hd), VI(256));
    out[n++] = OPT("attn_logit_softcapping", m->attn_softcap > 0 ? VF(m->attn_softcap) : VN, VF(50.0));
    out[n++] = OPT("final_logit_softcapping", m->logit_softcap > 0 ? VF(m->logit_softcap) : VN, VF(30.0));
    if (m->window) out[n++] = OPT("sliding_window", VI(m->window), VI(4096));
    else   /* no window: local blocks over seq tokens attend to every earlier one */
        out[n++] = (HfField){ "sliding_window", VI(m->seq), CK_GE, false, VN, false };
    out[n++] = INFO("cache_implementation", VS("hybrid"));
    out[n++] = INFO("attention_dropout", VF(m->dropout));
    out[n++] = INFO("torch_dtype", VS(torch_dtype));
    return n;
}

/* Gemma3ForCausalLM's fields after model_type (gemma3_check's model):
 * Gemma3TextConfig's defaults where a config may leave a field out (the
 * caps None, query_pre_attn_scalar 256, rope_theta 1e6, the local base
 * 10000, every 6th block global). query_pre_attn_scalar is head_dim where
 * planc's model scales by 1/sqrt(head_dim); without a window every block
 * attends to all (sliding_window = seq) and turns at rope_theta, the
 * local ones too (rope_local_base_freq = rope_theta). */
static int gemma3_fields(const HfModel *m, const char *torch_dtype, HfField *out)
{
    int n = gemma_shape_fields(m, out);
    out[n++] = OPT("hidden_activation", VS("gelu_pytorch_tanh"), VS("gelu_pytorch_tanh"));
    out[n++] = (HfField){ "max_position_embeddings", VI(m->seq), CK_GE, true, VI(m->seq), false };
    out[n++] = OPT("rms_norm_eps", VF(m->eps), VF(1e-6));
    out[n++] = OPT("rope_theta", VF(m->rope_theta), VF(1e6));
    out[n++] = OPT("rope_local_base_freq", VF(m->rope_local > 0 ? m->rope_local : m->rope_theta), VF(10000.0));
    out[n++] = OPT("rope_scaling", VN, VN);
    out[n++] = OPT("tie_word_embeddings", VB(m->tied), VB(true));
    out[n++] = OPT("attention_bias", VB(false), VB(false));
    out[n++] = OPT("query_pre_attn_scalar", num_val(m->query_scalar > 0 ? m->query_scalar : (double)m->hd), VI(256));
    out[n++] = OPT("attn_logit_softcapping", m->attn_softcap > 0 ? VF(m->attn_softcap) : VN, VN);
    out[n++] = OPT("final_logit_softcapping", m->logit_softcap > 0 ? VF(m->logit_softcap) : VN, VN);
    /* the pattern twice: sliding_window_pattern (transformers 4.50-4.52)
     * and layer_types (4.53 on, which read the pattern only without it);
     * a config with layer_types is held to them, and its pattern then not */
    if (m->window) {
        out[n++] = OPT("sliding_window", VI(m->window), VI(4096));
        out[n++] = OPT("sliding_window_pattern", VI(m->window_every), VI(6));
        out[n++] = (HfField){ "layer_types", VLAYERS(m->blocks, m->window_every), CK_EQ, true, VN, true };
    } else {   /* no window: local blocks over seq tokens attend to every earlier one */
        out[n++] = (HfField){ "sliding_window", VI(m->seq), CK_GE, false, VN, false };
        out[n++] = INFO("sliding_window_pattern", VI(6));
        out[n++] = INFO("layer_types", VLAYERS(m->blocks, 6));
    }
    out[n++] = INFO("cache_implementation", VS("hybrid"));
    out[n++] = INFO("attention_dropout", VF(m->dropout));
    out[n++] = INFO("torch_dtype", VS(torch_dtype));
    return n;
}

/* Every config.json field of the model under arch, in the order written;
 * returns how many (out holds 40). torch_dtype is the caller's. */
static int hf_fields(const HfModel *m, HfArch a, const char *torch_dtype, HfField *out)
{
    int n = 0;
    out[n++] = REQ("model_type", VS(ARCH_TYPE[a]));
    if (a == ARCH_GPT2) {
        out[n++] = REQ("vocab_size", VI(m->vocab));
        out[n++] = REQ("n_positions", VI(m->seq));
        out[n++] = REQ("n_embd", VI(m->dim));
        out[n++] = REQ("n_layer", VI(m->blocks));
        out[n++] = REQ("n_head", VI(m->heads));
        out[n++] = REQ("n_inner", VI(m->hidden));
        if (m->hidden == 4 * m->dim) out[n - 1].null_means_v = true;   /* transformers: null is 4 x n_embd */
        out[n++] = OPT("activation_function", VS("gelu_new"), VS("gelu_new"));
        out[n++] = OPT("layer_norm_epsilon", VF(m->eps), VF(1e-5));
        out[n++] = OPT("tie_word_embeddings", VB(m->tied), VB(true));
        out[n++] = INFO("resid_pdrop", VF(m->dropout));
        out[n++] = INFO("embd_pdrop", VF(0.0));
        out[n++] = INFO("attn_pdrop", VF(m->dropout));
        out[n++] = INFO("torch_dtype", VS(torch_dtype));
        return n;
    }
    if (a == ARCH_GEMMA2) return n + gemma2_fields(m, torch_dtype, out + n);
    if (a == ARCH_GEMMA3) return n + gemma3_fields(m, torch_dtype, out + n);
    if (a == ARCH_GEMMA) {
        out[n++] = REQ("vocab_size", VI(m->vocab));
        out[n++] = REQ("hidden_size", VI(m->dim));
        out[n++] = REQ("intermediate_size", VI(m->hidden));
        out[n++] = REQ("num_hidden_layers", VI(m->blocks));
        out[n++] = REQ("num_attention_heads", VI(m->heads));
        out[n++] = REQ("num_key_value_heads", VI(m->kv));
        out[n++] = REQ("head_dim", VI(m->hd));
        out[n++] = INFO("hidden_act", VS("gelu_pytorch_tanh"));   /* transformers reads hidden_activation */
        out[n++] = REQ("hidden_activation", VS("gelu_pytorch_tanh"));
        out[n - 1].null_means_v = true;                          /* null: gelu_pytorch_tanh, with a warning */
        out[n++] = (HfField){ "max_position_embeddings", VI(m->seq), CK_GE, true, VI(m->seq), false };
        out[n++] = OPT("rms_norm_eps", VF(m->eps), VF(1e-6));
        out[n++] = OPT("rope_theta", VF(m->rope_theta), VF(10000.0));
        out[n++] = OPT("rope_scaling", VN, VN);
        out[n++] = OPT("tie_word_embeddings", VB(m->tied), VB(true));
        out[n++] = OPT("attention_bias", VB(false), VB(false));
        out[n++] = INFO("attention_dropout", VF(m->dropout));
        out[n++] = INFO("torch_dtype", VS(torch_dtype));
        return n;
    }
    out[n++] = REQ("vocab_size", VI(m->vocab));
    out[n++] = REQ("hidden_size", VI(m->dim));
    /* Qwen-MoE: intermediate_size is the dense blocks' width; every block is
       a mixture here, so it is written (the experts' width) and not read */
    bool qmoe = a == ARCH_QWEN3_MOE || a == ARCH_QWEN2_MOE;
    out[n++] = qmoe ? INFO("intermediate_size", VI(m->hidden)) : REQ("intermediate_size", VI(m->hidden));
    out[n++] = REQ("num_hidden_layers", VI(m->blocks));
    out[n++] = REQ("num_attention_heads", VI(m->heads));
    out[n++] = m->kv == m->heads ? OPT("num_key_value_heads", VI(m->kv), VI(m->heads))
                                 : REQ("num_key_value_heads", VI(m->kv));
    if (a == ARCH_QWEN3 || a == ARCH_QWEN3_MOE)
        out[n++] = OPT("head_dim", VI(m->hd), VI(128));   /* Qwen3Config's and Qwen3MoeConfig's default */
    else out[n++] = m->hd * m->heads == m->dim ? OPT("head_dim", VI(m->hd), VI(m->hd)) : REQ("head_dim", VI(m->hd));
    out[n++] = OPT("hidden_act", VS("silu"), VS("silu"));
    out[n++] = (HfField){ "max_position_embeddings", VI(m->seq), CK_GE, true, VI(m->seq), false };
    out[n++] = OPT("rms_norm_eps", VF(m->eps), VF(a == ARCH_MIXTRAL || a == ARCH_OLMO2 ? 1e-5 : 1e-6));
    out[n++] = OPT("rope_theta", VF(m->rope_theta), VF(a == ARCH_MIXTRAL ? 1e6 : 10000.0));
    out[n++] = OPT("rope_scaling", VN, VN);
    out[n++] = OPT("tie_word_embeddings", VB(m->tied), VB(false));
    if (a == ARCH_LLAMA) {
        out[n++] = OPT("attention_bias", VB(!strcmp(m->attn_bias, "all")), VB(false));
        out[n++] = OPT("mlp_bias", VB(m->ffn_bias), VB(false));
    }
    if (a == ARCH_QWEN3 || a == ARCH_QWEN3_MOE || a == ARCH_OLMO2)
        out[n++] = OPT("attention_bias", VB(!strcmp(m->attn_bias, "all")), VB(false));
    if (a == ARCH_MISTRAL) out[n++] = OPT("sliding_window", VI(m->window), VI(4096));
    if (a == ARCH_MIXTRAL) out[n++] = m->window ? REQ("sliding_window", VI(m->window)) : OPT("sliding_window", VN, VN);
    if (a == ARCH_QWEN2 || a == ARCH_QWEN3 || qmoe) {   /* Qwen3Config and the MoE ones keep Qwen2's window fields */
        out[n++] = OPT("use_sliding_window", VB(m->window > 0), VB(false));
        if (m->window) {
            out[n++] = OPT("sliding_window", VI(m->window), VI(4096));
            out[n++] = OPT("max_window_layers", VI(0), VI(28));   /* every layer slides */
        } else {
            /* written null so transformers does not take its 4096 and warn on
               every load; not checked: Qwen2's own configs carry a window
               that use_sliding_window false switches off */
            out[n++] = INFO("sliding_window", VN);
        }
    }
    if (a == ARCH_MIXTRAL) {
        out[n++] = REQ("num_local_experts", VI(m->experts));
        out[n++] = REQ("num_experts_per_tok", VI(m->top_k));
        out[n++] = INFO("router_aux_loss_coef", VF(m->aux));
        out[n++] = INFO("output_router_logits", VB(false));
    }
    if (qmoe) {   /* Qwen3MoeConfig, Qwen2MoeConfig: every block a mixture of moe_intermediate_size experts */
        out[n++] = REQ("moe_intermediate_size", VI(m->hidden));
        if (a == ARCH_QWEN2_MOE) out[n++] = REQ("shared_expert_intermediate_size", VI(m->shared_hidden));
        out[n++] = REQ("num_experts", VI(m->experts));
        out[n++] = REQ("num_experts_per_tok", VI(m->top_k));
        out[n++] = OPT("norm_topk_prob", VB(m->norm_topk), VB(false));
        out[n++] = OPT("decoder_sparse_step", VI(1), VI(1));
        out[n++] = OPT("mlp_only_layers", VN, VN);   /* none ([] reads as none) */
        out[n++] = INFO("router_aux_loss_coef", VF(m->aux));
        out[n++] = INFO("output_router_logits", VB(false));
    }
    out[n++] = INFO("attention_dropout", VF(m->dropout));
    out[n++] = INFO("torch_dtype", VS(torch_dtype));
    return n;
}

/* The shortest decimal that reads back as v (a float keeps a point). */
static void put_num(sbuf *b, double v, bool flt)
{
    char t[48];
    if (flt && v == floor(v) && fabs(v) < 1e15) {   /* 10000.0, not 1e+04 */
        sb_printf(b, "%.1f", v);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*g", p, v);
        if (strtod(t, NULL) == v) break;
    }
    if (flt && !strpbrk(t, ".en")) strcat(t, ".0");
    sb_printf(b, "%s", t);
}

static void put_val(sbuf *b, const HfVal *v)
{
    switch (v->kind) {
    case V_INT:  sb_printf(b, "%lld", (long long)v->i); break;
    case V_FLT:  put_num(b, v->f, true); break;
    case V_BOOL: sb_printf(b, "%s", v->b ? "true" : "false"); break;
    case V_STR:  sb_json_str(b, v->s); break;
    case V_NULL: sb_printf(b, "null"); break;
    case V_LAYERS:
        sb_printf(b, "[");
        for (int64_t i = 0; i < v->i; i++) sb_printf(b, "%s\"%s\"", i ? ", " : "", layer_type(v, i));
        sb_printf(b, "]");
        break;
    }
}

static void config_json(sbuf *b, HfArch a, const HfField *f, int n)
{
    sb_printf(b, "{\n  \"architectures\": [\"%s\"]", ARCH_CLASS[a]);
    for (int i = 0; i < n; i++) {
        sb_printf(b, ",\n  ");
        sb_json_str(b, f[i].key);
        sb_printf(b, ": ");
        put_val(b, &f[i].v);
    }
    sb_printf(b, "\n}\n");
}

/* A config.json value against the plan's; writes both into why on a mismatch. */
static bool val_matches(const js_doc *d, int i, const HfField *f, char *got, size_t cap)
{
    const js_node *x = &d->n[i];
    double v = 0;
    if (x->kind == JS_NUM) {
        char t[64];
        snprintf(t, sizeof t, "%.*s", (int)(x->len < 63 ? x->len : 63), x->str);
        v = strtod(t, NULL);
        snprintf(got, cap, "%s", t);
    } else if (x->kind == JS_STR) snprintf(got, cap, "\"%s\"", x->str);
    else if (x->kind == JS_BOOL) snprintf(got, cap, "%s", x->count ? "true" : "false");
    else if (x->kind == JS_NULL) snprintf(got, cap, "null");
    else snprintf(got, cap, "%s", x->kind == JS_ARR ? "an array" : "an object");
    if (f->v.kind == V_LAYERS) {   /* each block's type, in order */
        if (x->kind != JS_ARR || x->count != f->v.i) return false;
        int64_t k = 0;
        for (int c = x->first; c >= 0; c = d->n[c].next, k++) {
            const char *t = js_s(d, c);
            if (!t || strcmp(t, layer_type(&f->v, k))) {
                snprintf(got, cap, "\"%s\" at block %lld", t ? t : "?", (long long)k);
                return false;
            }
        }
        return true;
    }
    switch (f->v.kind) {
    case V_INT:  return x->kind == JS_NUM && (f->check == CK_GE ? v >= (double)f->v.i : v == (double)f->v.i);
    case V_FLT:  return x->kind == JS_NUM && fabs(v - f->v.f) <= 1e-6 * fabs(f->v.f);
    case V_BOOL: return x->kind == JS_BOOL && (x->count != 0) == f->v.b;
    case V_STR:  return x->kind == JS_STR && !strcmp(x->str, f->v.s);
    case V_NULL: return x->kind == JS_NULL || (x->kind == JS_ARR && x->count == 0);   /* [] is none */
    case V_LAYERS: return false;   /* above */
    }
    return false;
}

static bool same_val(const HfVal *a, const HfVal *b)
{
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case V_INT:  return a->i == b->i;
    case V_FLT:  return fabs(a->f - b->f) <= 1e-6 * fabs(b->f);
    case V_BOOL: return a->b == b->b;
    case V_STR:  return !strcmp(a->s, b->s);
    case V_NULL: return true;
    case V_LAYERS: return a->i == b->i && a->f == b->f;
    }
    return false;
}

/* config.json (parsed in d) against the plan's model: the architecture,
 * then every checked field. */
static prt_status check_config(const char *path, const js_doc *d, HfArch a, const HfField *f, int n)
{
    if (d->n[0].kind != JS_OBJ) return ckpt_fail(PRT_ERR_FORMAT, "%s: not a JSON object", path);
    int ar = js_get(d, 0, "architectures");
    if (ar >= 0 && d->n[ar].kind == JS_ARR && d->n[ar].count > 0) {
        const char *c = js_s(d, d->n[ar].first);
        if (!c || strcmp(c, ARCH_CLASS[a]))
            return ckpt_fail(PRT_ERR_FORMAT, "%s: architectures is [\"%s\"], the plan's model is %s", path,
                             c ? c : "?", ARCH_CLASS[a]);
    }
    for (int k = 0; k < n; k++) {
        if (f[k].check == CK_NO) continue;
        /* Gemma 3: transformers 4.53 on read layer_types where a config has
         * it (checked as its own field), the pattern only without it */
        if (!strcmp(f[k].key, "sliding_window_pattern") && js_get(d, 0, "layer_types") >= 0) continue;
        char want[768], got[96];
        sbuf w = {0};
        put_val(&w, &f[k].v);
        snprintf(want, sizeof want, "%s", w.s ? w.s : "?");
        free(w.s);
        int i = js_get(d, 0, f[k].key);
        if (f[k].null_means_v && (i < 0 || d->n[i].kind == JS_NULL)) continue;
        if (i < 0) {
            if (!f[k].has_dflt)
                return ckpt_fail(PRT_ERR_FORMAT, "%s: no \"%s\" (the plan's model has %s)", path, f[k].key, want);
            if (f[k].check == CK_GE || same_val(&f[k].dflt, &f[k].v)) continue;
            sbuf g = {0};
            put_val(&g, &f[k].dflt);
            prt_status st = ckpt_fail(PRT_ERR_FORMAT, "%s: %s is %s (left out: transformers' default), "
                                      "the plan's model has %s", path, f[k].key, g.s ? g.s : "?", want);
            free(g.s);
            return st;
        }
        if (!val_matches(d, i, &f[k], got, sizeof got))
            return ckpt_fail(PRT_ERR_FORMAT, "%s: %s is %s, the plan's model has %s%s", path, f[k].key, got,
                             f[k].check == CK_GE ? "at most " : "", want);
    }
    return PRT_OK;
}

/* ---- the tensors --------------------------------------------------------------- */

/* One Hugging Face tensor: rows [p0, p0 + n) of planc's tensor pname. */
typedef struct {
    char   pname[128];
    size_t prows, pcols;   /* planc's checkpoint shape (logical rows); a vector has pcols 1 */
    int    pnd;
    size_t p0, n;
    char   hname[160];
    int    hnd;
    size_t hshape[2];      /* (n, pcols), or (pcols, n) transposed; (n) for a vector */
    size_t perm;           /* head size D: rows permuted per head (RoPE), 0: none */
    bool   T;              /* Conv1D: Hugging Face holds the transpose */
} Seg;

typedef struct {
    Seg *s;
    int  n, cap;
    bool oom;
} Map;

static void add(Map *mp, const char *pname, size_t R, size_t C, int nd, size_t p0, size_t n,
                const char *hname, size_t perm, bool T)
{
    if (mp->n == mp->cap) {
        int cap = mp->cap ? 2 * mp->cap : 64;
        Seg *s = (Seg *)realloc(mp->s, (size_t)cap * sizeof *s);
        if (!s) { mp->oom = true; return; }
        mp->s = s;
        mp->cap = cap;
    }
    Seg *g = &mp->s[mp->n++];
    memset(g, 0, sizeof *g);
    snprintf(g->pname, sizeof g->pname, "%s", pname);
    snprintf(g->hname, sizeof g->hname, "%s", hname);
    g->prows = R, g->pcols = C, g->pnd = nd, g->p0 = p0, g->n = n, g->perm = perm, g->T = T;
    g->hnd = nd;
    g->hshape[0] = T ? C : n;
    g->hshape[1] = T ? n : C;
}

/* A whole vector or matrix, one to one. */
#define ONE(pn, R, C, hn, T) add(mp, pn, R, C, (C) == 1 ? 1 : 2, 0, R, hn, 0, T)

/* Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE, Qwen2-MoE, Gemma,
 * Gemma 2, OLMo-2: one decoder block b (planc layers la, la+1). Qwen3-MoE
 * names Mixtral's router and experts mlp.gate and
 * mlp.experts.E.{gate,up,down}_proj. The norms: planc's pre-norms
 * (attn_norm, mlp_norm) are input_layernorm and post_attention_layernorm,
 * except in Gemma 2, whose four are input_layernorm, post_attention_layernorm
 * (attn_post_norm), pre_feedforward_layernorm (mlp_norm) and
 * post_feedforward_layernorm (mlp_post_norm); OLMo-2 has only the two after
 * (post_attention_layernorm, post_feedforward_layernorm). */
static void map_llama_block(Map *mp, const HfModel *m, HfArch a, int b, int la)
{
    size_t C = (size_t)m->dim, D = (size_t)m->hd, Q = (size_t)m->heads * D, K = (size_t)m->kv * D,
           F = (size_t)m->hidden, QKV = Q + 2 * K;
    char p[128], h[160];
    int lf = la + 1;
#define P(...) (snprintf(p, sizeof p, __VA_ARGS__), p)
#define H(...) (snprintf(h, sizeof h, __VA_ARGS__), h)
    bool pre[2], post[2];   /* attention's and the MLP's norms before and after the sub-block */
    for (int i = 0; i < 2; i++) {
        pre[i] = strcmp(m->norm_pos[i], "post") != 0;
        post[i] = strcmp(m->norm_pos[i], "pre") != 0;
    }
    if (pre[0]) ONE(P("layers.%d.attn_norm.weight", la), C, 1, H("model.layers.%d.input_layernorm.weight", b), false);
    const char *wb[2] = { "weight", "bias" };
    for (int k = 0; k < (strcmp(m->attn_bias, "none") ? 2 : 1); k++) {
        size_t cols = k ? 1 : C;
        int nd = k ? 1 : 2;
        add(mp, P("layers.%d.attn.qkv.%s", la, wb[k]), QKV, cols, nd, 0, Q, H("model.layers.%d.self_attn.q_proj.%s", b, wb[k]), D, false);
        add(mp, p, QKV, cols, nd, Q, K, H("model.layers.%d.self_attn.k_proj.%s", b, wb[k]), D, false);
        add(mp, p, QKV, cols, nd, Q + K, K, H("model.layers.%d.self_attn.v_proj.%s", b, wb[k]), 0, false);
    }
    add(mp, P("layers.%d.attn.out.weight", la), C, Q, 2, 0, C, H("model.layers.%d.self_attn.o_proj.weight", b), 0, false);
    if (!strcmp(m->attn_bias, "all"))
        ONE(P("layers.%d.attn.out.bias", la), C, 1, H("model.layers.%d.self_attn.o_proj.bias", b), false);
    if (m->qk_norm) {   /* Qwen3, Gemma 3: a head's D gains, permuted within the head as q and k's rows are */
        add(mp, P("layers.%d.attn.q_norm.weight", la), D, 1, 1, 0, D, H("model.layers.%d.self_attn.q_norm.weight", b), D, false);
        add(mp, P("layers.%d.attn.k_norm.weight", la), D, 1, 1, 0, D, H("model.layers.%d.self_attn.k_norm.weight", b), D, false);
    }
    if (m->qk_proj) {   /* OLMo-2: gains over the whole q (H x D) and k (Hkv x D), permuted per head as their rows */
        add(mp, P("layers.%d.attn.q_norm.weight", la), Q, 1, 1, 0, Q, H("model.layers.%d.self_attn.q_norm.weight", b), D, false);
        add(mp, P("layers.%d.attn.k_norm.weight", la), K, 1, 1, 0, K, H("model.layers.%d.self_attn.k_norm.weight", b), D, false);
    }
    if (post[0]) ONE(P("layers.%d.attn_post_norm.weight", la), C, 1, H("model.layers.%d.post_attention_layernorm.weight", b), false);
    if (m->moe) {
        ONE(P("layers.%d.moe_norm.weight", lf), C, 1, H("model.layers.%d.post_attention_layernorm.weight", b), false);
        bool q3 = a == ARCH_QWEN3_MOE || a == ARCH_QWEN2_MOE;   /* the Qwen MoE names */
        ONE(P("layers.%d.block_sparse_moe.gate.weight", lf), (size_t)m->experts, C,
            H(q3 ? "model.layers.%d.mlp.gate.weight" : "model.layers.%d.block_sparse_moe.gate.weight", b), false);
        static const char *const w[3] = { "w1", "w3", "w2" };   /* gate, up, down */
        static const char *const q3w[3] = { "gate_proj", "up_proj", "down_proj" };
        for (int64_t e = 0; e < m->experts; e++)
            for (int k = 0; k < 3; k++)
                add(mp, P("layers.%d.block_sparse_moe.experts.%lld.%s.weight", lf, (long long)e, w[k]),
                    k < 2 ? F : C, k < 2 ? C : F, 2, 0, k < 2 ? F : C,
                    q3 ? H("model.layers.%d.mlp.experts.%lld.%s.weight", b, (long long)e, q3w[k])
                       : H("model.layers.%d.block_sparse_moe.experts.%lld.%s.weight", b, (long long)e, w[k]), 0, false);
        if (a == ARCH_QWEN2_MOE) {   /* the shared expert (shared_hidden wide) and its (1, C) gate */
            size_t S = (size_t)m->shared_hidden;
            for (int k = 0; k < 3; k++)
                add(mp, P("layers.%d.block_sparse_moe.shared_experts.0.%s.weight", lf, w[k]),
                    k < 2 ? S : C, k < 2 ? C : S, 2, 0, k < 2 ? S : C,
                    H("model.layers.%d.mlp.shared_expert.%s.weight", b, q3w[k]), 0, false);
            ONE(P("layers.%d.block_sparse_moe.shared_expert_gate.weight", lf), 1, C,
                H("model.layers.%d.mlp.shared_expert_gate.weight", b), false);
        }
        return;
    }
    if (pre[1])
        ONE(P("layers.%d.mlp_norm.weight", lf), C, 1,
            H(post[0] ? "model.layers.%d.pre_feedforward_layernorm.weight" : "model.layers.%d.post_attention_layernorm.weight", b),
            false);
    for (int k = 0; k < (m->ffn_bias ? 2 : 1); k++) {
        size_t cols = k ? 1 : C;
        int nd = k ? 1 : 2;
        add(mp, P("layers.%d.mlp.up.%s", lf, wb[k]), 2 * F, cols, nd, 0, F, H("model.layers.%d.mlp.gate_proj.%s", b, wb[k]), 0, false);
        add(mp, p, 2 * F, cols, nd, F, F, H("model.layers.%d.mlp.up_proj.%s", b, wb[k]), 0, false);
    }
    add(mp, P("layers.%d.mlp.down.weight", lf), C, F, 2, 0, C, H("model.layers.%d.mlp.down_proj.weight", b), 0, false);
    if (m->ffn_bias) ONE(P("layers.%d.mlp.down.bias", lf), C, 1, H("model.layers.%d.mlp.down_proj.bias", b), false);
    if (post[1]) ONE(P("layers.%d.mlp_post_norm.weight", lf), C, 1, H("model.layers.%d.post_feedforward_layernorm.weight", b), false);
}

/* GPT-2: one block b; Conv1D weights are (in, out), the transpose of planc's. */
static void map_gpt2_block(Map *mp, const HfModel *m, int b, int la)
{
    size_t C = (size_t)m->dim, F = (size_t)m->hidden;
    char p[128], h[160];
    int lf = la + 1;
    ONE(P("layers.%d.attn_norm.weight", la), C, 1, H("transformer.h.%d.ln_1.weight", b), false);
    ONE(P("layers.%d.attn_norm.bias", la), C, 1, H("transformer.h.%d.ln_1.bias", b), false);
    ONE(P("layers.%d.attn.qkv.weight", la), 3 * C, C, H("transformer.h.%d.attn.c_attn.weight", b), true);
    ONE(P("layers.%d.attn.qkv.bias", la), 3 * C, 1, H("transformer.h.%d.attn.c_attn.bias", b), false);
    ONE(P("layers.%d.attn.out.weight", la), C, C, H("transformer.h.%d.attn.c_proj.weight", b), true);
    ONE(P("layers.%d.attn.out.bias", la), C, 1, H("transformer.h.%d.attn.c_proj.bias", b), false);
    ONE(P("layers.%d.mlp_norm.weight", lf), C, 1, H("transformer.h.%d.ln_2.weight", b), false);
    ONE(P("layers.%d.mlp_norm.bias", lf), C, 1, H("transformer.h.%d.ln_2.bias", b), false);
    ONE(P("layers.%d.mlp.up.weight", lf), F, C, H("transformer.h.%d.mlp.c_fc.weight", b), true);
    ONE(P("layers.%d.mlp.up.bias", lf), F, 1, H("transformer.h.%d.mlp.c_fc.bias", b), false);
    ONE(P("layers.%d.mlp.down.weight", lf), C, F, H("transformer.h.%d.mlp.c_proj.weight", b), true);
    ONE(P("layers.%d.mlp.down.bias", lf), C, 1, H("transformer.h.%d.mlp.c_proj.bias", b), false);
#undef P
#undef H
}

/* Every tensor of the model under arch a. Block b's attention is planc
 * layer 1 + 2b and its MLP 2 + 2b (model_config's "uniform" holds it). */
static prt_status hf_map(const HfModel *m, HfArch a, Map *mp)
{
    size_t V = (size_t)m->vocab, C = (size_t)m->dim;
    bool g = a == ARCH_GPT2;
    ONE("wte.weight", V, C, g ? "transformer.wte.weight" : "model.embed_tokens.weight", false);
    if (g) ONE("wpe.weight", (size_t)m->seq, C, "transformer.wpe.weight", false);
    for (int b = 0; b < (int)m->blocks; b++) {
        if (g) map_gpt2_block(mp, m, b, 1 + 2 * b);
        else map_llama_block(mp, m, a, b, 1 + 2 * b);
    }
    ONE("norm.weight", C, 1, g ? "transformer.ln_f.weight" : "model.norm.weight", false);
    if (g) ONE("norm.bias", C, 1, "transformer.ln_f.bias", false);
    if (!m->tied) ONE("lm_head.weight", V, C, "lm_head.weight", false);
    return mp->oom ? ckpt_fail(PRT_ERR_NOMEM, "out of memory (tensor map)") : PRT_OK;
}

/* RoPE's row order within a head of D rows: planc row 2i + k (interleaved
 * pairs) is Hugging Face row k * D/2 + i (rotate_half's halves). */
static size_t hf_row(const Seg *s, size_t j)
{
    if (!s->perm) return j;
    size_t D = s->perm, h = j / D, w = j % D;
    return h * D + (w % 2) * (D / 2) + w / 2;
}

static size_t planc_row(const Seg *s, size_t q)
{
    if (!s->perm) return q;
    size_t D = s->perm, h = q / D, w = q % D;
    return h * D + 2 * (w % (D / 2)) + w / (D / 2);
}

/* ---- dtypes ------------------------------------------------------------------ */

static uint16_t f32_to_bf16(float f)   /* round to nearest even; a NaN stays a NaN */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 31) u = s | 0x7f800000u | (m << 13);
    else if (e) u = s | ((e + 112) << 23) | (m << 13);
    else if (!m) u = s;
    else {   /* subnormal: normalise */
        e = 113;
        while (!(m & 1024)) { m <<= 1; e--; }
        u = s | (e << 23) | ((m & 1023) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- export ---------------------------------------------------------------- */

/* Seg s's tensor in Hugging Face's order and shape, fp32, from the checkpoint. */
static prt_status seg_data(prt_ckpt *ck, const Seg *s, float *out)
{
    size_t C = s->pcols, n = s->n;
    float *buf = (float *)malloc(n * C * sizeof(float) + 4);
    if (!buf) return ckpt_fail(PRT_ERR_NOMEM, "out of memory for %s", s->hname);
    prt_status st = prt_ckpt_read(ck, s->pname, s->p0, s->p0 + n, 0, C, buf);
    if (!st) {
        if (s->T)
            for (size_t j = 0; j < n; j++)
                for (size_t c = 0; c < C; c++) out[c * n + j] = buf[j * C + c];
        else
            for (size_t q = 0; q < n; q++) memcpy(out + q * C, buf + planc_row(s, q) * C, C * sizeof(float));
    }
    free(buf);
    return st;
}

/* The model's map checked against the checkpoint: each planc tensor it
 * names is there with its shape (fp32), and every model tensor of the
 * checkpoint is named. */
static prt_status check_ckpt(const prt_ckpt *ck, const Map *mp)
{
    for (int i = 0; i < mp->n; i++) {
        const Seg *s = &mp->s[i];
        const prt_ckpt_tensor *t = prt_ckpt_find(ck, s->pname);
        if (!t) return ckpt_fail(PRT_ERR_FORMAT, "the checkpoint has no %s (its model_config implies it)", s->pname);
        if (t->rows != s->prows || t->cols != s->pcols || t->dtype != PRT_FP32)
            return ckpt_fail(PRT_ERR_FORMAT, "%s: shape [%zu, %zu] in the checkpoint, [%zu, %zu] by its model_config",
                             s->pname, t->rows, t->cols, s->prows, s->pcols);
    }
    for (int i = 0; i < prt_ckpt_count(ck); i++) {
        const char *nm = prt_ckpt_tensor_at(ck, i)->name;
        if (!strncmp(nm, "opt.", 4)) continue;   /* AdamW's moments: not part of the model */
        bool found = false;
        for (int k = 0; k < mp->n && !found; k++) found = !strcmp(mp->s[k].pname, nm);
        if (!found) REFUSE("tensor %s has no Hugging Face counterpart", nm);
    }
    return PRT_OK;
}

/* Write buf[0..n) to dir/name atomically. */
static prt_status write_text(const char *dir, const char *name, const char *buf, size_t n)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    st_out o = {.fd = -1};
    prt_status st = st_out_open(&o, path);
    if (!st) st = st_out_write(&o, buf, n);
    if (!st) st = st_out_commit(&o);
    else if (o.fd >= 0) st_out_abort(&o);
    return st;
}

/* One safetensors file with tensors [a, b) of the map. */
static prt_status write_shard(prt_ckpt *ck, const Map *mp, int a, int b, bool bf16, const char *path)
{
    st_hdr_entry *e = (st_hdr_entry *)calloc((size_t)(b - a) + 1, sizeof *e);
    if (!e) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path);
    size_t es = bf16 ? 2 : 4;
    for (int i = a; i < b; i++) {
        const Seg *s = &mp->s[i];
        e[i - a] = (st_hdr_entry){ s->hname, bf16 ? "BF16" : "F32", s->hnd, {s->hshape[0], s->hshape[1]},
                                   (uint64_t)s->n * s->pcols * es };
    }
    const char *keys[1] = { "format" }, *vals[1] = { "pt" };
    sbuf h = {0};
    st_out o = {.fd = -1};
    prt_status st = st_header(&h, e, b - a, keys, vals, 1);
    if (!st) st = st_out_open(&o, path);
    if (!st) st = st_out_write(&o, h.s, h.len);
    for (int i = a; i < b && !st; i++) {
        const Seg *s = &mp->s[i];
        size_t n = s->n * s->pcols;
        float *f = (float *)malloc(n * sizeof(float) + 4);
        if (!f) { st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory for %s", path, s->hname); break; }
        st = seg_data(ck, s, f);
        if (!st && bf16) {
            uint16_t *o16 = (uint16_t *)f;   /* in place: element i's 2 bytes after i's 4 are read */
            for (size_t k = 0; k < n; k++) o16[k] = f32_to_bf16(f[k]);
        }
        if (!st) st = st_out_write(&o, f, n * es);
        free(f);
    }
    if (!st) st = st_out_commit(&o);
    else if (o.fd >= 0) st_out_abort(&o);
    free(h.s);
    free(e);
    return st;
}

prt_status prt_hf_export(const char *dir, const char *out_dir, const char *dtype, uint64_t max_shard)
{
    ckpt_clear();
    bool bf16 = dtype && !strcmp(dtype, "bf16");
    if (dtype && !bf16 && strcmp(dtype, "fp32"))
        return ckpt_fail(PRT_ERR_ARG, "--dtype %s: expected fp32 or bf16", dtype);
    if (!max_shard) max_shard = 5000000000ULL;   /* transformers' max_shard_size "5GB" */
    prt_ckpt *ck = NULL;
    prt_status st = prt_ckpt_open(dir, &ck);
    if (st) return st;
    const char *cfg = prt_ckpt_meta_str(ck, "model_config");
    HfModel m;
    HfArch a = ARCH_LLAMA;
    Map mp = {0};
    HfField f[40];
    sbuf cj = {0}, ix = {0};
    if (!cfg) {
        st = ckpt_fail(PRT_ERR_FORMAT, "%s: the checkpoint records no model_config (written before planc "
                       "recorded the model's hyperparameters): rebuild the executable and save again "
                       "(--resume DIR --steps N --save NEW)", dir);
        goto done;
    }
    if ((st = parse_model(cfg, &m))) goto done;
    if ((st = hf_arch(&m, &a))) goto done;
    if ((st = hf_map(&m, a, &mp))) goto done;
    if ((st = check_ckpt(ck, &mp))) goto done;
    if ((st = ckpt_mkdirs(out_dir))) goto done;
    /* shards: a new one when the next tensor would pass max_shard (transformers' rule) */
    int *first = (int *)calloc((size_t)mp.n + 2, sizeof(int)), ns = 0;
    if (!first) { st = ckpt_fail(PRT_ERR_NOMEM, "out of memory"); goto done; }
    uint64_t cur = 0, total = 0, es = bf16 ? 2 : 4;
    for (int i = 0; i < mp.n; i++) {
        uint64_t nb = (uint64_t)mp.s[i].n * mp.s[i].pcols * es;
        if (i == 0 || (cur > 0 && cur + nb > max_shard)) { first[ns++] = i; cur = 0; }
        cur += nb;
        total += nb;
    }
    first[ns] = mp.n;
    char path[4400], name[64];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out_dir);
    if (unlink(path) && errno != ENOENT) st = ckpt_fail(PRT_ERR_IO, "%s: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if (!st && unlink(path) && errno != ENOENT) st = ckpt_fail(PRT_ERR_IO, "%s: %s", path, strerror(errno));
    if (ns > 1) sb_printf(&ix, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {", (unsigned long long)total);
    for (int k = 0; k < ns && !st; k++) {
        if (ns == 1) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, ns);
        snprintf(path, sizeof path, "%s/%s", out_dir, name);
        st = write_shard(ck, &mp, first[k], first[k + 1], bf16, path);
        for (int i = first[k]; ns > 1 && i < first[k + 1]; i++) {
            sb_printf(&ix, "%s\n    ", i ? "," : "");
            sb_json_str(&ix, mp.s[i].hname);
            sb_printf(&ix, ": \"%s\"", name);
        }
    }
    free(first);
    if (ns > 1) sb_printf(&ix, "\n  }\n}\n");
    if (!st && ns > 1) st = ix.oom ? ckpt_fail(PRT_ERR_NOMEM, "out of memory")
                                   : write_text(out_dir, "model.safetensors.index.json", ix.s, ix.len);
    int nf = hf_fields(&m, a, bf16 ? "bfloat16" : "float32", f);
    config_json(&cj, a, f, nf);
    if (!st) st = cj.oom ? ckpt_fail(PRT_ERR_NOMEM, "out of memory") : write_text(out_dir, "config.json", cj.s, cj.len);
    if (!st) {
        /* greedy by default; no max_length (a caller's max_new_tokens decides) and no
         * special tokens: planc's vocabularies name none */
        static const char gen[] = "{\n  \"_from_model_config\": true,\n  \"do_sample\": false\n}\n";
        st = write_text(out_dir, "generation_config.json", gen, sizeof gen - 1);
    }
done:
    free(cj.s);
    free(ix.s);
    free(mp.s);
    prt_ckpt_close(ck);
    return st;
}

/* ---- import ---------------------------------------------------------------- */

typedef struct {
    char    name[256];
    prt_st *f;
} HfFile;

struct prt_hf {
    char    dir[4096];
    bool    tied;                  /* the plan ties the head: a file's lm_head.weight is its copy */
    Map     mp;
    HfFile *files;
    int     nfiles;
    int    *file_of;               /* [mp.n] which file holds Seg i's tensor */
    const prt_st_entry **entry;    /* [mp.n] its entry there */
};

void prt_hf_close(prt_hf *hf)
{
    if (!hf) return;
    for (int i = 0; i < hf->nfiles; i++) prt_st_close(hf->files[i].f);
    free(hf->files);
    free(hf->file_of);
    free(hf->entry);
    free(hf->mp.s);
    free(hf);
}

/* A whole small file into a NUL-terminated buffer. */
static prt_status slurp(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return ckpt_fail(PRT_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) || sb.st_size > (1 << 28)) {
        fclose(f);
        return ckpt_fail(PRT_ERR_FORMAT, "%s: not a file of at most 256 MiB", path);
    }
    char *b = (char *)malloc((size_t)sb.st_size + 1);
    size_t n = b ? fread(b, 1, (size_t)sb.st_size, f) : 0;
    fclose(f);
    if (!b || n != (size_t)sb.st_size) { free(b); return ckpt_fail(PRT_ERR_IO, "%s: cannot read it", path); }
    b[n] = '\0';
    *out = b;
    *len = n;
    return PRT_OK;
}

static int file_index(prt_hf *hf, const char *name)
{
    for (int i = 0; i < hf->nfiles; i++)
        if (!strcmp(hf->files[i].name, name)) return i;
    return -1;
}

/* The directory's files: the index's shards, or model.safetensors. */
static prt_status open_files(prt_hf *hf, js_doc *wm, int *map_obj)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", hf->dir);
    char *txt = NULL;
    size_t len = 0;
    *map_obj = -1;
    struct stat sb;
    prt_status st = PRT_OK;
    if (!stat(path, &sb)) {
        if ((st = slurp(path, &txt, &len))) return st;
        st = js_parse(txt, len, path, wm);
        free(txt);
        if (st) return st;
        *map_obj = js_get(wm, 0, "weight_map");
        if (*map_obj < 0 || wm->n[*map_obj].kind != JS_OBJ)
            return ckpt_fail(PRT_ERR_FORMAT, "%s: no \"weight_map\" object", path);
    }
    int cap = *map_obj >= 0 ? wm->n[*map_obj].count + 1 : 1;
    hf->files = (HfFile *)calloc((size_t)cap, sizeof *hf->files);
    if (!hf->files) return ckpt_fail(PRT_ERR_NOMEM, "out of memory");
    if (*map_obj < 0) {
        snprintf(hf->files[0].name, sizeof hf->files[0].name, "model.safetensors");
        hf->nfiles = 1;
    } else {
        for (int i = wm->n[*map_obj].first; i >= 0; i = wm->n[i].next) {
            const char *fn = js_s(wm, i);
            size_t n = fn ? strlen(fn) : 0;
            if (!fn || !n || n >= 200 || strchr(fn, '/') || fn[0] == '.' || n < 12 || strcmp(fn + n - 12, ".safetensors"))
                return ckpt_fail(PRT_ERR_FORMAT, "%s: weight_map[\"%s\"] is not a file name *.safetensors in the directory",
                                 path, wm->n[i].key);
            if (file_index(hf, fn) < 0) snprintf(hf->files[hf->nfiles++].name, sizeof hf->files[0].name, "%s", fn);
        }
    }
    for (int i = 0; i < hf->nfiles && !st; i++) {
        snprintf(path, sizeof path, "%s/%s", hf->dir, hf->files[i].name);
        st = prt_st_open(path, &hf->files[i].f);
    }
    return st;
}

/* Tensors a Hugging Face file may hold that are no weights (buffers of
 * older transformers versions). */
static bool is_buffer(const char *n)
{
    size_t l = strlen(n);
    static const char *const tail[] = { "rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias" };
    for (int i = 0; i < 3; i++) {
        size_t t = strlen(tail[i]);
        if (l >= t && !strcmp(n + l - t, tail[i])) return true;
    }
    return false;
}

/* Find every Seg's tensor, check its dtype and shape, and refuse tensors
 * the model does not have. */
static prt_status bind_tensors(prt_hf *hf, const js_doc *wm, int map_obj)
{
    const Map *mp = &hf->mp;
    hf->file_of = (int *)calloc((size_t)mp->n + 1, sizeof(int));
    hf->entry = (const prt_st_entry **)calloc((size_t)mp->n + 1, sizeof *hf->entry);
    if (!hf->file_of || !hf->entry) return ckpt_fail(PRT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < mp->n; i++) {
        const Seg *s = &mp->s[i];
        int f = 0;
        if (map_obj >= 0) {
            int k = js_get(wm, map_obj, s->hname);
            f = k >= 0 ? file_index(hf, js_s(wm, k)) : -1;
        }
        const prt_st_entry *e = f >= 0 ? prt_st_find(hf->files[f].f, s->hname) : NULL;
        if (!e)
            return ckpt_fail(PRT_ERR_FORMAT, "%s: no tensor %s (the plan's %s, rows %zu..%zu)", hf->dir, s->hname,
                             s->pname, s->p0, s->p0 + s->n);
        bool shape = e->ndim == s->hnd && e->shape[0] == s->hshape[0] && (s->hnd == 1 || e->shape[1] == s->hshape[1]);
        if (!shape) {
            if (e->ndim == 1)
                return ckpt_fail(PRT_ERR_FORMAT, "%s: %s has shape [%zu], the plan's model needs [%zu%s]", hf->dir,
                                 s->hname, e->shape[0], s->hshape[0], s->hnd == 2 ? ", ..." : "");
            return ckpt_fail(PRT_ERR_FORMAT, "%s: %s has shape [%zu, %zu], the plan's model needs [%zu, %zu]", hf->dir,
                             s->hname, e->shape[0], e->ndim > 1 ? e->shape[1] : 0, s->hshape[0], s->hnd == 2 ? s->hshape[1] : 1);
        }
        if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "BF16") && strcmp(e->dtype, "F16"))
            return ckpt_fail(PRT_ERR_FORMAT, "%s: %s is %s: F32, BF16 or F16 expected", hf->dir, s->hname, e->dtype);
        hf->file_of[i] = f;
        hf->entry[i] = e;
    }
    for (int f = 0; f < hf->nfiles; f++)
        for (int k = 0; k < prt_st_count(hf->files[f].f); k++) {
            const char *n = prt_st_entry_at(hf->files[f].f, k)->name;
            bool known = is_buffer(n) || (hf->tied && !strcmp(n, "lm_head.weight"));
            for (int i = 0; i < mp->n && !known; i++) known = !strcmp(mp->s[i].hname, n);
            if (!known)
                return ckpt_fail(PRT_ERR_FORMAT, "%s/%s: tensor %s is not part of the plan's model", hf->dir,
                                 hf->files[f].name, n);
        }
    return PRT_OK;
}

prt_status prt_hf_open(const char *dir, const char *config, prt_hf **out)
{
    ckpt_clear();
    *out = NULL;
    if (!config || !config[0] || !strcmp(config, "{}"))
        return ckpt_fail(PRT_ERR_ARG, "--init-from: the program records no model config (rebuild it with this planc)");
    prt_hf *hf = (prt_hf *)calloc(1, sizeof *hf);
    if (!hf) return ckpt_fail(PRT_ERR_NOMEM, "out of memory");
    snprintf(hf->dir, sizeof hf->dir, "%s", dir);
    HfModel m;
    HfArch a = ARCH_LLAMA;
    HfField f[40];
    js_doc cd = {0}, wm = {0};
    char path[4400], *txt = NULL;
    size_t len = 0;
    int map_obj = -1;
    prt_status st = parse_model(config, &m);
    if (!st) st = hf_arch(&m, &a);
    if (st == PRT_ERR_UNSUPPORTED) st = ckpt_fail(st, "the plan's model has no Hugging Face form: %s", prt_ckpt_last_error());
    if (!st) st = hf_map(&m, a, &hf->mp);
    hf->tied = m.tied;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!st) st = slurp(path, &txt, &len);
    if (!st) st = js_parse(txt, len, path, &cd);
    if (!st) st = check_config(path, &cd, a, f, hf_fields(&m, a, "float32", f));
    if (!st) st = open_files(hf, &wm, &map_obj);
    if (!st) st = bind_tensors(hf, &wm, map_obj);
    free(txt);
    js_free(&cd);
    js_free(&wm);
    if (st) { prt_hf_close(hf); return st; }
    *out = hf;
    return PRT_OK;
}

/* n elements of entry e starting at element `at`, converted to fp32. */
static prt_status read_elems(prt_hf *hf, int i, size_t at, size_t n, float *dst)
{
    const prt_st_entry *e = hf->entry[i];
    prt_st *f = hf->files[hf->file_of[i]].f;
    size_t es = st_dtype_size(e->dtype);
    if (es == 4) return prt_st_read(f, e, at * 4, n * 4, dst);
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    if (!h) return ckpt_fail(PRT_ERR_NOMEM, "out of memory");
    prt_status st = prt_st_read(f, e, at * 2, n * 2, h);
    bool bf = !strcmp(e->dtype, "BF16");
    for (size_t k = 0; !st && k < n; k++) dst[k] = bf ? bf16_to_f32(h[k]) : f16_to_f32(h[k]);
    free(h);
    return st;
}

/* Rows [r0, r1) x cols [c0, c1) of planc's tensor name into dst. */
static prt_status read_rect(prt_hf *hf, const char *name, size_t r0, size_t r1, size_t c0, size_t c1, float *dst)
{
    size_t w = c1 - c0, covered = 0;
    float *col = NULL;
    prt_status st = PRT_OK;
    for (int i = 0; i < hf->mp.n && !st; i++) {
        const Seg *s = &hf->mp.s[i];
        if (strcmp(s->pname, name)) continue;
        if (c1 > s->pcols || r1 > s->prows) return ckpt_fail(PRT_ERR_ARG, "%s: rectangle outside the tensor", name);
        size_t a = r0 > s->p0 ? r0 : s->p0, b = r1 < s->p0 + s->n ? r1 : s->p0 + s->n;
        if (b <= a) continue;
        covered += b - a;
        if (s->T) {   /* planc (r, c) is Hugging Face (c, r - p0): one run of row c per column */
            free(col);
            col = (float *)malloc((b - a) * sizeof(float) + 4);
            if (!col) return ckpt_fail(PRT_ERR_NOMEM, "out of memory");
            for (size_t c = c0; c < c1 && !st; c++) {
                st = read_elems(hf, i, c * s->n + (a - s->p0), b - a, col);
                for (size_t r = a; r < b && !st; r++) dst[(r - r0) * w + (c - c0)] = col[r - a];
            }
        } else {
            for (size_t r = a; r < b && !st; r++)
                st = read_elems(hf, i, hf_row(s, r - s->p0) * s->pcols + c0, w, dst + (r - r0) * w);
        }
    }
    free(col);
    if (!st && covered != r1 - r0)
        return ckpt_fail(PRT_ERR_ARG, "%s: rows %zu..%zu are not all in the Hugging Face map", name, r0, r1);
    if (st) return ckpt_fail(st, "%s: reading %s: %s", hf->dir, name, prt_ckpt_last_error());
    return PRT_OK;
}

prt_status prt_hf_read_flat(prt_hf *hf, const char *name, size_t r0, size_t r1, size_t c0, size_t c1,
                            size_t f0, size_t f1, float *dst)
{
    size_t w = c1 - c0;
    if (f1 <= f0) return PRT_OK;
    if (!w || f1 > (r1 - r0) * w) return ckpt_fail(PRT_ERR_ARG, "%s: flat range outside the rectangle", name);
    size_t ra = r0 + f0 / w, rb = r0 + (f1 + w - 1) / w;
    float *tmp = (float *)malloc((rb - ra) * w * sizeof(float) + 4);
    if (!tmp) return ckpt_fail(PRT_ERR_NOMEM, "out of memory");
    prt_status st = read_rect(hf, name, ra, rb, c0, c1, tmp);
    if (!st) memcpy(dst, tmp + (f0 - (ra - r0) * w), (f1 - f0) * sizeof(float));
    free(tmp);
    return st;
}
