/*
 * emit.c: Plan -> one C/CUDA program.
 *
 * The program is written in the order a reader needs it: what was planned
 * and predicted (header comment: memory from the planner, time from
 * plan_simulate of the very Program below), the constants of the layout,
 * the parameter table, the layer table, the layers' forward and backward
 * passes (sections of codegen/program_template.c, where every TP
 * collective is spelled out), one forward and one backward function per
 * model chunk listing its layers, the op dispatcher, one step function per
 * pipeline stage that is that stage's op list from the Program, in order,
 * and main.
 *
 * The program is of its plan alone: the template's #if lines name the
 * features a plan fixes (set_features: sequence parallelism, recompute
 * mode, split backward, norm and activation kinds, RoPE, the Program's op
 * kinds, biases) and section() keeps the branches the plan takes, without the
 * directives. Train settings come from Plan.train only (sema fills the
 * documented defaults).
 *
 * This file never decides a schedule: the step functions are a straight
 * transcription of plan_lower()'s ops; a regular schedule's rounds are
 * written as loops (loop_pieces), kept only when they expand back to the
 * op list exactly (pieces_expand_to), and ZB-H1 is listed op by op. It
 * adds four kinds of bookkeeping
 * lines the Program implies: POST_RECV_ACT / POST_RECV_GRAD before the op
 * that posts the sends queued there, for a receive the Program posts early
 * (its `prepost`: NCCL's rules, planner/p2p_order.c); REDUCE_DURING before the compute op a
 * REDUCE_GRADS drains (its `pair`), so the reduction starts bucket by
 * bucket inside that backward; RELEASE_PARAMS after the op a ZeRO-3 gather
 * feeds (its `pair`); and FREE_SLOT after the last op that touches a
 * (micro-batch, chunk), which is when its activations may be reused.
 *
 * It reads as docs/codegen.md describes it: every comment names a layer
 * by its block ("block 3 attention", layer_title; the code and the
 * checkpoint names keep the layer's index), a layer table row holds only
 * the fields its kind reads (designated initialisers), a convention is
 * stated where it is used (RoPE's pairs at ROPE_PARAMS, (out, in) weights
 * at the parameter table), and the first line names the file as it is
 * saved (MODEL.c, or the name emit -o or build gives it).
 *
 * Text from the .plan (the model name, the file and data paths) is made
 * safe before it is written: comments cannot be closed early, string
 * literals are escaped. Output is deterministic: no times, no addresses.
 */
#include "codegen/codegen.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "planner/fp8.h"
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/model.h"
#include "planner/layout.h"
#include "planner/program.h"
#include "planner/simulate.h"
#include "planner/stacks.h"

extern const char cg_program_template[];   /* codegen/program_template.c, built into $(BUILD)/gen */

/* ---- text safety --------------------------------------------------------- */

void cg_comment_text(const char *s, char *buf, size_t n)
{
    size_t j = 0;
    for (; s && *s && j + 2 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch < 0x20 || ch > 0x7e) ch = '?';
        char prev = j > 0 ? buf[j - 1] : '\0';
        /* neither the end of the comment nor "/" "*" (a nested opening, an
         * error under -Werror=comment): a space between */
        if ((ch == '/' && prev == '*') || (ch == '*' && prev == '/')) buf[j++] = ' ';
        buf[j++] = (char)ch;
    }
    buf[j < n ? j : n - 1] = '\0';
}

void cg_string_literal(const char *s, char *buf, size_t n)
{
    size_t j = 0;
    for (; s && *s && j + 5 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') { buf[j++] = '\\'; buf[j++] = (char)ch; }
        else if (ch < 0x20 || ch > 0x7e || ch == '?') {   /* '?': no trigraphs */
            snprintf(buf + j, n - j, "\\%03o", ch);
            j += 4;
        } else buf[j++] = (char)ch;
    }
    buf[j < n ? j : n - 1] = '\0';
}

/* ---- output ------------------------------------------------------------------ */

/* A feature of the plan the template's #if lines test (program_template.c). */
typedef struct {
    char name[32];
    bool on;
} CgFeature;

#define CG_MAX_FEATURES 80

typedef struct {
    FILE       *f;
    const Plan *p;
    Layout      l;
    PlanProgram prog;
    PlanChunk  *chunk;     /* [pp * chunks] */
    int         nv;        /* pp * chunks */
    int        *layer_vs;  /* [n_layers] virtual stage of each layer */
    int        *pfirst;    /* [n_layers] first parameter id of each layer */
    int        *param_ep;  /* [n_params] ep > 1: the EP rank holding a routed expert's tensor,
                              -1 for the rest (EXPERT_EP); NULL while counting */
    int         n_params;
    int         tie;       /* the tie column of the next parameter row */
    size_t      logical;   /* the logical-rows column of the next row (V of a padded
                              vocabulary; 0: every row is the model's) */
    uint64_t   *stage_numel; /* [pp] elements of each stage's flat buffer (one TP rank) */
    uint64_t    hash;      /* FNV-1a of the checkpointed tensors' names and shapes */
    CgFeature   feat[CG_MAX_FEATURES];   /* what the plan fixes, for the template's #if lines */
    int         n_feat;
    char        bad[160];  /* a template line emit could not resolve (a bug of the template) */
    char        name[256]; /* the file's name in the first comment line (comment-safe) */
} Cg;

/* FNV-1a (64-bit) of n bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const void *buf, size_t n)
{
    const unsigned char *b = (const unsigned char *)buf;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static void out(Cg *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(Cg *g, const char *fmt, ...)
{
    if (!g->f) return;   /* counting pass */
    va_list ap;
    va_start(ap, fmt);
    vfprintf(g->f, fmt, ap);
    va_end(ap);
}

/* One line of code, padded, with a comment at column 44. */
static void col(Cg *g, const char *fmt, const char *comment, ...) __attribute__((format(printf, 2, 4)));
static void col(Cg *g, const char *fmt, const char *comment, ...)
{
    char code[256];
    va_list ap;
    va_start(ap, comment);
    vsnprintf(code, sizeof code, fmt, ap);
    va_end(ap);
    out(g, "%-43s /* %s */\n", code, comment);
}

/* The value of feature `name` (n bytes), -1 when the plan has no such one. */
static int feature(const Cg *g, const char *name, size_t n)
{
    for (int i = 0; i < g->n_feat; i++)
        if (strlen(g->feat[i].name) == n && !strncmp(g->feat[i].name, name, n)) return g->feat[i].on;
    return -1;
}

/* A template condition: NAME or !NAME joined by && and || (&& binds
 * tighter), as the compiler reads it; -1 on a name no feature has. */
static int condition(const Cg *g, const char *e, const char *end)
{
    bool any = false, all = true;   /* || of && terms */
    while (e < end) {
        while (e < end && (*e == ' ' || *e == '\t')) e++;
        bool neg = e < end && *e == '!';
        if (neg) e++;
        const char *w = e;
        while (e < end && (*e == '_' || (*e >= 'A' && *e <= 'Z') || (*e >= '0' && *e <= '9'))) e++;
        int v = feature(g, w, (size_t)(e - w));
        if (v < 0) return -1;
        all = all && (neg ? !v : v);
        while (e < end && (*e == ' ' || *e == '\t')) e++;
        if (e + 1 < end && e[0] == '|' && e[1] == '|') { any = any || all; all = true; e += 2; }
        else if (e + 1 < end && e[0] == '&' && e[1] == '&') e += 2;
        else if (e < end) return -1;
    }
    return any || all;
}

/* Write one template line, replacing @KEY@ from keys/vals. */
static void template_line(Cg *g, const char *s, const char *e, const char *const *keys,
                          const char *const *vals, int nk)
{
    while (s < e) {
        const char *at = memchr(s, '@', (size_t)(e - s));
        if (!at) { fwrite(s, 1, (size_t)(e - s), g->f); break; }
        fwrite(s, 1, (size_t)(at - s), g->f);
        int k = 0;
        for (; k < nk; k++) {
            size_t kl = strlen(keys[k]);
            if (at + kl + 2 <= e && !strncmp(at + 1, keys[k], kl) && at[kl + 1] == '@') break;
        }
        if (k < nk) { fputs(vals[k], g->f); s = at + strlen(keys[k]) + 2; }
        else { fputc('@', g->f); s = at + 1; }
    }
}

/* Whether line [s, e) is the directive d ("#if", "#elif", ...), and where
 * its condition starts. */
static bool directive(const char *s, const char *e, const char *d, const char **cond)
{
    size_t n = strlen(d);
    if ((size_t)(e - s) < n || strncmp(s, d, n)) return false;
    if (s + n < e && s[n] != ' ' && s[n] != '\n') return false;
    *cond = s + n;
    return true;
}

/* Write section `name` of the template: its #if/#elif/#else/#endif lines
 * resolved against the plan's features (the lines of the branches the
 * plan takes are copied, the directives themselves are not, and never two
 * blank lines in a row), @KEY@ replaced from keys/vals. A condition on an unknown name sets g->bad.
 * #ifdef / #ifndef blocks (the build target's: PRT_CUDA, which the
 * compiler defines, not the plan) are copied with their #else and #endif,
 * so one program source serves both targets. */
static void section(Cg *g, const char *name, const char *const *keys, const char *const *vals,
                    int nk)
{
    char mark[64];
    snprintf(mark, sizeof mark, "//@@ %s\n", name);
    const char *s = strstr(cg_program_template, mark);
    if (!s) { snprintf(g->bad, sizeof g->bad, "the template has no section %s", name); return; }
    s += strlen(mark);
    const char *e = strstr(s, "\n//@@ ");
    e = e ? e + 1 : s + strlen(s);
    struct { bool taking, taken, pass; } st[16];   /* one per open #if; pass: an #ifdef copied */
    int depth = 0, off = 0;                  /* off: open levels not taken */
    bool blank_prev = false;
    while (s < e) {
        const char *nl = memchr(s, '\n', (size_t)(e - s));
        const char *le = nl ? nl + 1 : e, *c;
        const char *ce = nl ? nl : e;
        int v = 0;
        bool pass_end = depth && st[depth - 1].pass &&
                        (directive(s, ce, "#else", &c) || directive(s, ce, "#endif", &c));
        if (directive(s, ce, "#ifdef", &c) || directive(s, ce, "#ifndef", &c) || pass_end) {
            if (depth == 16) goto bad;
            if (!pass_end) st[depth++] = (typeof(st[0])){ .taking = true, .taken = true, .pass = true };
            else if (directive(s, ce, "#endif", &c)) depth--;
            if (!off) { template_line(g, s, le, keys, vals, nk); blank_prev = false; }
        } else if (directive(s, ce, "#if", &c)) {
            if (depth == 16 || (v = condition(g, c, ce)) < 0) goto bad;
            st[depth].taking = st[depth].taken = v;
            st[depth].pass = false;
            off += !v;
            depth++;
        } else if (directive(s, ce, "#elif", &c)) {
            if (!depth || (v = condition(g, c, ce)) < 0) goto bad;
            off -= !st[depth - 1].taking;
            st[depth - 1].taking = !st[depth - 1].taken && v;
            st[depth - 1].taken = st[depth - 1].taken || v;
            off += !st[depth - 1].taking;
        } else if (directive(s, ce, "#else", &c)) {
            if (!depth) goto bad;
            off -= !st[depth - 1].taking;
            st[depth - 1].taking = !st[depth - 1].taken;
            st[depth - 1].taken = true;
            off += !st[depth - 1].taking;
        } else if (directive(s, ce, "#endif", &c)) {
            if (!depth) goto bad;
            depth--;
            off -= !st[depth].taking;
        } else if (!off) {
            bool blank = ce == s;
            if (!(blank && blank_prev)) template_line(g, s, le, keys, vals, nk);   /* one blank line where a dropped branch leaves two */
            blank_prev = blank;
        }
        s = le;
        continue;
    bad:
        snprintf(g->bad, sizeof g->bad, "template section %s: cannot resolve '%.*s'", name,
                 (int)(ce - s) > 80 ? 80 : (int)(ce - s), s);
        return;
    }
    if (depth) snprintf(g->bad, sizeof g->bad, "template section %s: an #if is not closed", name);
}

/* A float literal C and C++ accept: "0.02f", "1.0f", "1e-08f". */
static const char *flt(char *buf, double v)
{
    snprintf(buf, 40, "%.9g", v);
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    strcat(buf, "f");
    return buf;
}

/* The RoPE parameters as one named constant, ROPE_PARAMS (prt_rope, prt_ops.h):
 * the embedding's rope_theta and rope_scaling, doubles printed exactly
 * (%.17g); a field its kind does not read is written as sema leaves it. */
static void emit_rope(Cg *g, const Model *m)
{
    static const char *const kinds[] = { "PRT_ROPE_DEFAULT", "PRT_ROPE_LINEAR", "PRT_ROPE_LLAMA3",
                                         "PRT_ROPE_YARN" };   /* ORDER RopeScalingKind, prt_rope_kind */
    RopeScaling r = plan_rope_scaling(m);
    if (r.kind == ROPE_SCALING_NONE)   /* sema's defaults; prt_rope_inv_freq reads none of them */
        r = (RopeScaling){ .kind = ROPE_SCALING_NONE, .factor = 1, .low_freq_factor = 1, .high_freq_factor = 4,
                           .beta_fast = 32, .beta_slow = 1, .mscale = 1 };
    out(g, "/* RoPE (embedding rope_theta, rope_scaling): kind, base, factor, low_freq_factor,\n"
           " * high_freq_factor, beta_fast, beta_slow, original_max_position (tokens), yarn's\n"
           " * mscale and mscale_all_dim (DeepSeek's pair: prt_rope_mscale on cos and sin,\n"
           " * prt_rope_mla_softmax_mscale on kind mla's softmax scale).\n"
           " * Convention: planc rotates interleaved pairs (2i, 2i+1) of each q and k head,\n"
           " * as Meta's Llama; Hugging Face rotates halves (i, i + d/2) (rotate_half), so\n"
           " * export-hf and --init-from permute q and k's rows within each head between\n"
           " * the two (runtime/ckpt/hf.c). At token t pair i turns by t times\n"
           " * prt_rope_inv_freq(&ROPE_PARAMS, i, d) radians (base^(-2i/d) unscaled). */\n");
    out(g, "static const prt_rope ROPE_PARAMS = { %s, %.17g, %.17g, %.17g, %.17g, %.17g, %.17g, %.17g, "
           "%.17g, %.17g };\n", kinds[r.kind], plan_rope_theta(m), r.factor, r.low_freq_factor,
        r.high_freq_factor, r.beta_fast, r.beta_slow, (double)r.original_max_position, r.mscale, r.mscale_all_dim);
    if (feature(g, "ROPE_LOCAL", 10) != 1) return;
    out(g, "/* The local (sliding-window) layers' RoPE (embedding rope_local_theta, Gemma 3's\n"
           " * rope_local_base_freq): that base, unscaled (rope_of) */\n");
    out(g, "static const prt_rope ROPE_LOCAL_PARAMS = { PRT_ROPE_DEFAULT, %.17g, 1, 1, 4, 32, 1, 0, 1, 0 };\n",
        plan_rope_local_theta(m));
}

static const char *kind_name(LayerKind k)
{
    static const char *n[] = { "embedding", "attention", "mlp", "norm", "lm_head", "moe" };  /* ORDER LayerKind */
    return (unsigned)k < 6 ? n[k] : "?";
}

/* The block that layer i belongs to: blocks start at their attention layer
 * (plan_split's rule), so block b is the (b+1)-th attention and what follows
 * it up to the next one; -1 for the layers outside every block (the
 * embedding before the first, the final norm and the head after the last). */
static int layer_block(const Model *m, int i)
{
    int b = -1;
    for (int j = 0; j <= i; j++) b += m->layers[j].kind == LAYER_ATTENTION;
    LayerKind k = m->layers[i].kind;
    return k == LAYER_ATTENTION || k == LAYER_MLP || k == LAYER_MOE ? b : -1;
}

/* What a reader calls layer i: "embedding", "block 3 attention", "block 3
 * mlp", "block 3 moe", "final norm", "lm_head" (the program's comments;
 * the layer table's index stays the program's own numbering). */
static void layer_title(const Model *m, int i, char *buf, size_t n)
{
    LayerKind k = m->layers[i].kind;
    int b = layer_block(m, i);
    if (b >= 0) snprintf(buf, n, "block %d %s", b, kind_name(k));
    else snprintf(buf, n, "%s", k == LAYER_NORM ? "final norm" : kind_name(k));
}

/* The layers [first, end) by what they are: "embedding, blocks 0-1",
 * "block 2", "blocks 2-3, final norm, lm_head". */
static void span_title(const Model *m, int first, int end, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = first; i < end && at + 1 < n; i++) {
        int b = layer_block(m, i), last = b;
        char part[64];
        if (b < 0) {
            layer_title(m, i, part, sizeof part);
        } else {   /* a run of blocks: the layers up to the last one in the span */
            while (i + 1 < end && layer_block(m, i + 1) >= 0) last = layer_block(m, ++i);
            if (last == b) snprintf(part, sizeof part, "block %d", b);
            else snprintf(part, sizeof part, "blocks %d-%d", b, last);
        }
        int k = snprintf(buf + at, n - at, "%s%s", at ? ", " : "", part);
        at += k > 0 ? (size_t)k : 0;
        if (at >= n) at = n - 1;
    }
}

/* What each block holds, when every block holds the same: "attention,
 * mlp" (its layers' kinds in order); "" when the blocks differ. */
static void block_parts(const Model *m, char *buf, size_t n)
{
    char first[128] = "", cur[128] = "";
    int b = -1;
    buf[0] = '\0';
    for (int i = 0; i <= m->n_layers; i++) {
        LayerKind k = i < m->n_layers ? m->layers[i].kind : LAYER_LM_HEAD;
        bool starts = i < m->n_layers && k == LAYER_ATTENTION,
             in = i < m->n_layers && (starts || k == LAYER_MLP || k == LAYER_MOE);
        if ((starts || !in) && cur[0]) {   /* block b ends before layer i */
            if (b == 0) snprintf(first, sizeof first, "%s", cur);
            else if (strcmp(first, cur)) return;
            cur[0] = '\0';
        }
        b += starts;
        if (in && b >= 0) {
            size_t at = strlen(cur);
            snprintf(cur + at, sizeof cur - at, "%s%s", at ? ", then " : "", kind_name(k));
        }
    }
    snprintf(buf, n, "%s", first);
}

static const char *sched_title(int s)
{
    switch (s) {
    case SCHED_GPIPE: return "GPipe";
    case SCHED_1F1B: return "1F1B";
    case SCHED_INTERLEAVED: return "interleaved 1F1B";
    case SCHED_ZB_H1: return "ZB-H1";
    }
    return "?";
}

/* ---- what the plan fixes ------------------------------------------------- */

static void set_feature(Cg *g, const char *name, bool on)
{
    if (g->n_feat == CG_MAX_FEATURES) return;
    snprintf(g->feat[g->n_feat].name, sizeof g->feat[0].name, "%s", name);
    g->feat[g->n_feat++].on = on;
}

/* Whether attention layer L forms its scores otherwise than planc's
 * default, scale 1/sqrt(head_dim) and no cap (Gemma 2's softcap,
 * query_pre_attn_scalar): the program then calls prt_attention_scores_*. */
static bool attn_scored(const Layer *L)
{
    return L->softcap > 0 || L->query_scalar > 0;
}

/* Whether any stage's Program has an op of kind k. */
static bool program_uses(const Cg *g, PlanOpKind k)
{
    for (int s = 0; s < g->prog.pp; s++)
        for (int i = 0; i < g->prog.stages[s].n_ops; i++)
            if (g->prog.stages[s].ops[i].kind == k) return true;
    return false;
}

/* The features the template's #if lines test, from the layout, the model's
 * layers and the Program's op kinds (USES_<kind>). */
/* Whether attention layer L has a q/k norm of either kind: `rmsnorm`
 * (Qwen3, each head) or `rmsnorm_projection` (OLMo-2, the whole q and k
 * projections). */
static bool layer_qk_norm(const Layer *L)
{
    return L->kind == LAYER_ATTENTION && L->attn != ATTN_MLA && L->qk_norm != QK_NORM_NONE;
}

static void set_features(Cg *g)
{
    const Model *m = &g->p->model;
    const Layout *l = &g->l;
    int rms = 0, ln = 0, act[ACT_GEGLU + 1] = { 0 }, mlp = 0, moe = 0, final_norm = 0, pos = POS_NONE,
        bias = 0, window = 0, qk_norm = 0, qk_proj = 0, scores = 0, logit_cap = 0, post_norm = 0, pre_norms = 0,
        moe_gated = 0, moe_biased = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        qk_norm += layer_qk_norm(L);
        qk_proj += layer_qk_norm(L) && L->qk_norm == QK_NORM_RMSNORM_PROJ;
        bool sub = L->kind == LAYER_ATTENTION || L->kind == LAYER_MLP || L->kind == LAYER_MOE;
        post_norm += sub && plan_layer_post_norm(L);
        pre_norms += sub && plan_layer_pre_norm(L);
        bool ffn = L->kind == LAYER_MLP || L->kind == LAYER_MOE;   /* the MLP's activation code */
        if (L->kind == LAYER_EMBEDDING) pos = L->position;
        if (L->kind == LAYER_ATTENTION || ffn || L->kind == LAYER_NORM)
            *(L->norm == NORM_RMSNORM ? &rms : &ln) += 1;
        if (ffn) act[L->act]++;
        if (L->kind == LAYER_MLP) mlp++;
        if (L->kind == LAYER_MOE) moe++;
        if (L->kind == LAYER_MOE && L->shared_gate) moe_gated++;
        if (L->kind == LAYER_MOE && L->expert_bias) moe_biased++;
        if (L->kind == LAYER_NORM) final_norm++;
        if ((L->kind == LAYER_ATTENTION || ffn) && L->bias) bias++;
        /* a window no shorter than the sequence masks nothing: full causal */
        if (L->kind == LAYER_ATTENTION && plan_attention_keys(m, L) < m->seq) window++;
        if (L->kind == LAYER_ATTENTION && attn_scored(L)) scores++;
        if (L->kind == LAYER_LM_HEAD && L->softcap > 0) logit_cap++;
    }
    int kinds = (act[ACT_GELU] > 0) + (act[ACT_RELU] > 0) + (act[ACT_SWIGLU] > 0) + (act[ACT_GEGLU] > 0);
    g->n_feat = 0;
    set_feature(g, "SP", l->sequence_parallel == 1 && l->tp > 1);   /* tp 1: nothing to split */
    /* selective: Megatron's modules the runtime runs, the attention core
     * and the pre-norms' outputs (recompute_honoured refuses the others) */
    int mods = plan_recompute_modules(l);
    set_feature(g, "RECOMPUTE_SELECTIVE", (mods & PLAN_RC_BIT(PLAN_RC_CORE_ATTN)) != 0);
    /* the pre-norms' outputs rebuilt: none to rebuild where every sublayer's
     * norm is a post-norm (norm_position post keeps its input instead) */
    set_feature(g, "RECOMPUTE_LN", (mods & PLAN_RC_BIT(PLAN_RC_LAYERNORM)) != 0 && pre_norms > 0);
    set_feature(g, "RECOMPUTE_FULL", l->recompute == RECOMPUTE_FULL);
    set_feature(g, "RECOMPUTE_SOME", plan_recompute_partial(l));   /* some blocks only: REBUILT[] */
    set_feature(g, "SPLIT_BWD", program_uses(g, OP_BWD_INPUT));
    set_feature(g, "NORM_MIXED", rms > 0 && ln > 0);
    set_feature(g, "NORM_RMS", rms > 0 && ln == 0);
    set_feature(g, "MLP_ACTS_MIXED", kinds > 1);
    set_feature(g, "MLP_SWIGLU", kinds == 1 && act[ACT_SWIGLU] > 0);
    set_feature(g, "MLP_RELU", kinds == 1 && act[ACT_RELU] > 0);
    set_feature(g, "MLP_GEGLU", kinds == 1 && act[ACT_GEGLU] > 0);
    set_feature(g, "SLIDING_WINDOW", window > 0);
    set_feature(g, "ROPE", pos == POS_ROPE);
    set_feature(g, "ROPE_LOCAL", pos == POS_ROPE && plan_rope_local_theta(m) > 0);   /* ROPE_LOCAL_PARAMS */
    set_feature(g, "LEARNED_POS", pos == POS_LEARNED);
    set_feature(g, "EMBED_SCALE", m->n_layers > 0 && m->layers[0].embed_scale);   /* Gemma: x sqrt(dim) */
    set_feature(g, "NORM_PLUS_ONE", m->norm_plus_one);   /* Gemma: RMSNorm's gain 1 + w */
    set_feature(g, "HAS_MLP", mlp > 0);
    set_feature(g, "HAS_MOE", moe > 0);
    set_feature(g, "EXPERT_PARALLEL", moe > 0 && plan_ep(l) > 1);
    set_feature(g, "MOE_SHARED_GATE", moe_gated > 0);   /* Qwen2-MoE's gate on the shared experts */
    set_feature(g, "EXPERT_BIAS", moe_biased > 0);       /* aux-loss-free balancing: BIAS[], its step */
    set_feature(g, "HAS_FINAL_NORM", final_norm > 0);
    set_feature(g, "HAS_BIAS", bias > 0);
    set_feature(g, "PIPELINE", l->pp > 1);
    set_feature(g, "DROPOUT", plan_model_dropout(m));   /* planner/model.c counts its masks: the same rule */
    set_feature(g, "CONTEXT_PARALLEL", plan_cp(l) > 1);   /* attention over the CP group (prt_cp_attention_*) */
    set_feature(g, "FP8", plan_fp8_on(&g->p->software));   /* planner/fp8.c: FP8_LINEAR[] */
    set_feature(g, "FP8_DELAYED", plan_fp8_on(&g->p->software) &&   /* amax histories (FP8_HISTORY[]) */
                g->p->software.fp8.recipe == PLAN_FP8_DELAYED);
    set_feature(g, "QK_NORM", qk_norm > 0);   /* some attention's q/k norm: QK_NORM_W[] */
    set_feature(g, "QK_PROJ", qk_proj > 0);   /* ... of the whole projection (OLMo-2): QK_PROJ_OF[] */
    set_feature(g, "ATTN_SCORES", scores > 0);   /* Gemma 2's scale or soft-cap: ATTN_SCORES_OF[] */
    set_feature(g, "LOGIT_SOFTCAP", logit_cap > 0);   /* Gemma 2's final-logit cap: LOGIT_CAP */
    set_feature(g, "POST_NORM", post_norm > 0);   /* norm_position post|sandwich somewhere: POST_NORM_W[] */
    set_feature(g, "MLA", cg_model_has_mla(m));   /* every attention layer MLA (mla_runtime_key): MLA_OF[] */
    for (int k = 0; k < PLAN_N_OPKINDS; k++) {
        char n[32];
        snprintf(n, sizeof n, "USES_%s", plan_op_name((PlanOpKind)k));
        set_feature(g, n, program_uses(g, (PlanOpKind)k));
    }
}

/* ---- the header comment -------------------------------------------------- */

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

static void emit_header(Cg *g)
{
    const Plan *p = g->p;
    const Model *m = &p->model;
    const Layout *l = &g->l;
    char name[128], file[512], cl[128];
    cg_comment_text(m->name, name, sizeof name);
    cg_comment_text(p->file ? p->file : "(no file)", file, sizeof file);
    cg_comment_text(p->cluster.name, cl, sizeof cl);
    PlanEval ev;
    plan_evaluate(p, &ev);
    out(g, "/* %s: generated by planc from %s. Do not edit: change the plan.\n *\n", g->name, file);
    out(g, " * model     %s: %d blocks, dim %lld, vocab %lld, seq %lld, %llu parameters\n",
        name, m->n_blocks, (long long)m->dim, (long long)m->vocab, (long long)m->seq,
        (unsigned long long)ev.params);
    char span[256], parts[128];
    span_title(m, 0, m->n_layers, span, sizeof span);
    block_parts(m, parts, sizeof parts);
    out(g, " *           %d layers: %s%s%s%s\n", m->n_layers, span, parts[0] ? " (each block: " : "", parts,
        parts[0] ? ")" : "");
    if (plan_model_dropout(m))
        out(g, " *           dropout %g (attention probabilities, residual branches, embedding)\n", m->dropout);
    int cp = plan_cp(l);
    if (cp > 1)
        out(g, " * layout    dp %d x tp %d x cp %d x pp %d = %d ranks, ZeRO-%d, %s", l->dp, l->tp, cp, l->pp,
            l->dp * l->tp * cp * l->pp, l->zero, sched_title(l->schedule));
    else
        out(g, " * layout    dp %d x tp %d x pp %d = %d ranks, ZeRO-%d, %s", l->dp, l->tp, l->pp,
            l->dp * l->tp * l->pp, l->zero, sched_title(l->schedule));
    if (l->schedule == SCHED_INTERLEAVED) out(g, " (%d chunks per stage)", l->chunks);
    out(g, ",\n *           %lld micro-batches of %lld sequences per DP rank, global batch %lld,\n",
        (long long)g->prog.n_micro, (long long)l->micro_batch, (long long)l->global_batch);
    out(g, " *           recompute %s, sequence parallel %s\n", plan_recompute_name(l->recompute),
        l->sequence_parallel == 1 ? "on" : "off");
    if (cp > 1)
        out(g, " * context   cp %d, cp_comm %s: each sequence of %lld tokens in %d chunks, CP rank r\n"
               " *           holding chunks r and %d-r (%lld tokens); gradients and ZeRO over dp x cp\n",
            cp, plan_cp_comm_name(plan_cp_comm(l)), (long long)m->seq, 2 * cp, 2 * cp - 1,
            (long long)m->seq / cp);
    out(g, " * predicted by planc for cluster %s%s\n", cl, ev.valid ? ":" : ": (layout not valid there)");
    if (ev.valid) {
        for (int s = 0; s < ev.pp; s++)
            out(g, " *   stage %d: %.1f MiB per rank (params %.1f, grads %.1f, optimizer %.1f, "
                "activations %.1f)\n", s, mib(ev.stages[s].total_bytes),
                mib(ev.stages[s].params_bytes), mib(ev.stages[s].grads_bytes),
                mib(ev.stages[s].optimizer_bytes), mib(ev.stages[s].activations_bytes));
        /* time: the simulation of the very Program this file transcribes */
        PlanSimResult sim;
        memset(&sim, 0, sizeof sim);
        if (plan_simulate(&g->prog, &sim) && sim.step_time > 0)
            out(g, " *   step %.3f ms, pipeline bubble %.1f %%, %.0f tokens/s (the simulated Program "
                "below)\n", 1e3 * sim.step_time, 100.0 * sim.bubble_fraction,
                (double)l->global_batch * (double)m->seq / sim.step_time);
        plan_sim_free(&sim);
    }
    plan_eval_free(&ev);
    out(g, " *\n"
           " * How to read it: the parameter table (every tensor, its global shape and\n"
           " * how TP splits it), the layer table (one row per layer, named by its\n"
           " * block: \"block 0 attention\"), the layers' forward and backward passes\n"
           " * (every TP collective is a call you can see), one forward and one\n"
           " * backward per model chunk, then step_stageN: pipeline stage N's ops for\n"
           " * one training step, in the order planc scheduled them (rounds of a\n"
           " * regular schedule as loops), every collective of the step among them.\n"
           " * Ranks are rank = %s; every rank of a stage runs its\n"
           " * step. The code is this plan's alone: features it does not use are not\n"
           " * in it. The text is C and CUDA alike: planc build compiles it as EXE.c\n"
           " * with mpicc (--target cpu) or as EXE.cu with nvcc (--target cuda).\n"
           " */\n#include \"planrt.h\"\n\n", cp > 1 ? "tp + TP*(cp + CP*(dp + DP*pp))" : "tp + TP*(dp + DP*pp)");
    /* a 16-bit plan's program compiled for the CPU would train in fp32
     * beside a header that predicts 16-bit memory: it stops the compiler
     * (the same rule as build --target cpu, cg_target_dtype) */
    char why[512];
    if (!cg_target_dtype(p, CG_TARGET_CPU, why, sizeof why)) {
        char msg[800], lit[900];
        snprintf(msg, sizeof msg, "dtype %s: %s; %s", p->model.dtype == DTYPE_FP16 ? "fp16" : "bf16", why,
                 cg_target_dtype_hint);
        cg_string_literal(msg, lit, sizeof lit);
        out(g, "#ifndef PRT_CUDA\n#error \"%s\"\n#endif\n\n", lit);
    }
    /* and an FP8 recipe or shape the CUDA build's GEMMs do not take stops
     * nvcc (build --target cuda refuses it first, cg_target_fp8) */
    if (!cg_target_fp8(p, CG_TARGET_CUDA, why, sizeof why)) {
        char lit[900];
        cg_string_literal(why, lit, sizeof lit);
        out(g, "#ifdef PRT_CUDA\n#error \"%s\"\n#endif\n\n", lit);
    }
}

const char cg_target_dtype_hint[] = "write `dtype fp32` in the model block to build for the CPU, or build "
                                   "--target cuda (bf16 compute, fp32 master weights)";

bool cg_target_dtype(const Plan *p, CgTarget t, char *why, size_t len)
{
    static const char *const names[] = { "fp32", "bf16", "fp16" };   /* ORDER PlanDtype */
    PlanDtype d = p->model.dtype;
    if (t != CG_TARGET_CPU || d == DTYPE_FP32) return true;
    const char *dn = (unsigned)d < 3 ? names[d] : "16-bit";
    snprintf(why, len, "the CPU target computes in fp32 (libplanrt.a holds activations and weights as float), "
             "so its program would train in fp32 while planc predicts %s memory", dn);
    return false;
}

/* ---- constants and tables ----------------------------------------------------- */

static int local_heads(const Layer *L, int tp) { return (int)(L->heads / tp); }

/* The gradient group's ranks: weights are replicated over dp and cp alike,
 * so gradients are reduced and ZeRO shards over dp x cp (planner/layout.c's
 * rule, which the memory and cost models count by). */
static int grad_ranks(const Layout *l) { return plan_dp_cp(l); }

/* Issue 28: why the model is not one repeated block (the same attention
 * and the same MLP or MoE after the embedding, then an optional final norm
 * and the head), into why; "" when it is. A Hugging Face architecture
 * describes a model by one block's settings, so only such models map. */
static void model_uniform(const Model *m, char *why, size_t cap)
{
    const Layer *L = m->layers, *a0 = NULL, *f0 = NULL;
    int n = m->n_layers, i = 1;
    why[0] = '\0';
    if (n < 2 || L[0].kind != LAYER_EMBEDDING || L[n - 1].kind != LAYER_LM_HEAD) {
        snprintf(why, cap, "the model does not start with an embedding and end with an lm_head");
        return;
    }
    for (; i + 1 < n && L[i].kind == LAYER_ATTENTION; i += 2) {
        const Layer *a = &L[i], *f = &L[i + 1];
        if (f->kind != LAYER_MLP && f->kind != LAYER_MOE) {
            snprintf(why, cap, "layer %d (%s) follows an attention layer: blocks must be attention + mlp or moe",
                     i + 1, kind_name(f->kind));
            return;
        }
        if (a->attn == ATTN_MLA) {   /* its rows are DeepseekV2Attention's (mla_rows), not yet mapped */
            snprintf(why, cap, "attention layer %d is kind mla, whose DeepseekV2Attention tensors export-hf and "
                     "--init-from do not map yet", i);
            return;
        }
        if (!a0) { a0 = a; f0 = f; continue; }
        /* `sliding_window W every K` (Gemma 2): block (i - 1) / 2 slides over the first
           block's W unless it is a K-th one (sema's resolve_window_every); such a
           pattern is one block's description in Hugging Face's configs */
        int block = (i - 1) / 2;
        int64_t want_window = a0->window_every && (block + 1) % a0->window_every == 0 ? 0 : a0->window;
        if (a->heads != a0->heads || a->kv_heads != a0->kv_heads || a->head_dim != a0->head_dim ||
            a->window != want_window || a->window_every != a0->window_every || a->norm != a0->norm ||
            a->bias != a0->bias ||
            a->qkv_bias_only != a0->qkv_bias_only || a->qk_norm != a0->qk_norm || a->softcap != a0->softcap ||
            a->query_scalar != a0->query_scalar || a->norm_pos != a0->norm_pos) {
            snprintf(why, cap, "attention layer %d differs from the first block's", i);
            return;
        }
        if (f->kind != f0->kind || f->hidden != f0->hidden || f->act != f0->act || f->norm != f0->norm ||
            f->bias != f0->bias || f->experts != f0->experts || f->top_k != f0->top_k ||
            f->shared != f0->shared || f->capacity_factor != f0->capacity_factor || f->aux_loss != f0->aux_loss ||
            f->norm_pos != f0->norm_pos ||
            f->score != f0->score || f->topk_unnormalised != f0->topk_unnormalised ||
            f->shared_hidden != f0->shared_hidden || f->shared_gate != f0->shared_gate ||
            f->route_groups != f0->route_groups || f->route_top_groups != f0->route_top_groups ||
            plan_routed_scale(f) != plan_routed_scale(f0) || f->expert_bias != f0->expert_bias ||
            f->route_group_score != f0->route_group_score ||
            f->bias_update_rate != f0->bias_update_rate) {
            snprintf(why, cap, "%s layer %d differs from the first block's", kind_name(f->kind), i + 1);
            return;
        }
    }
    if (!a0) { snprintf(why, cap, "the model has no attention block"); return; }
    if (i < n - 1 && L[i].kind == LAYER_NORM) i++;
    if (i != n - 1) snprintf(why, cap, "layer %d (%s) is not part of a block", i, kind_name(L[i].kind));
}

/* Issue 28: MODEL_CONFIG, the model's hyperparameters as a JSON object in
 * planc's own terms, recorded in every checkpoint ("model_config") so that
 * `planrt-ckpt export-hf` can write a Hugging Face config.json and
 * --init-from can check one. Numbers print with 17 digits: they read back
 * as the same doubles. Keys are documented in docs/pending/hfout.md. */
static void emit_model_config(Cg *g)
{
    const Model *m = &g->p->model;
    const Layer *E = &m->layers[0], *A = NULL, *F = NULL, *N = NULL, *H = &m->layers[m->n_layers - 1];
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *l = &m->layers[i];
        if (l->kind == LAYER_ATTENTION && !A) A = l;
        if ((l->kind == LAYER_MLP || l->kind == LAYER_MOE) && !F) F = l;
        if (l->kind == LAYER_NORM) N = l;
    }
    char why[200];
    model_uniform(m, why, sizeof why);
    static const char *const pos[] = { "learned", "rope", "none" };            /* ORDER PosKind */
    static const char *const norm[] = { "layernorm", "rmsnorm" };              /* ORDER NormKind */
    static const char *const act[] = { "gelu", "relu", "swiglu", "geglu" };     /* ORDER ActKind */
    static const char *const dt[] = { "fp32", "bf16", "fp16", "fp8" };
    char j[4096];
    int k = snprintf(j, sizeof j,
        "{\"format\": 1, \"vocab\": %lld, \"seq\": %lld, \"dim\": %lld, \"dtype\": \"%s\", \"blocks\": %d, "
        "\"position\": \"%s\", \"rope_theta\": %.17g, \"rope_scaling\": %s, ",
        (long long)m->vocab, (long long)m->seq, (long long)m->dim,
        (unsigned)m->dtype < 4 ? dt[m->dtype] : "?", m->n_blocks, pos[E->position],
        plan_rope_theta(m), E->rope_scaling.kind != ROPE_SCALING_NONE ? "true" : "false");
    if (plan_rope_local_theta(m) > 0)   /* Gemma 3's local RoPE base (written only where set) */
        k += snprintf(j + k, sizeof j - (size_t)k, "\"rope_local_theta\": %.17g, ", plan_rope_local_theta(m));
    if (A)
        k += snprintf(j + k, sizeof j - (size_t)k,
            "\"heads\": %lld, \"kv_heads\": %lld, \"head_dim\": %lld, \"window\": %lld, \"attn_norm\": \"%s\", "
            "\"attn_bias\": \"%s\", \"qk_norm\": \"%s\", ",
            (long long)A->heads, (long long)A->kv_heads, (long long)plan_head_dim(m, A), (long long)A->window,
            norm[A->norm], !A->bias ? "none" : A->qkv_bias_only ? "qkv" : "all",
            A->qk_norm == QK_NORM_RMSNORM ? "rmsnorm" : A->qk_norm == QK_NORM_RMSNORM_PROJ ? "rmsnorm_projection"
                                                                                          : "none");
    /* `sliding_window W every K`: "window" is block 0's W (a local block), every K-th
       block global; written only where set (absent: every block alike) */
    if (A && A->window_every)
        k += snprintf(j + k, sizeof j - (size_t)k, "\"window_every\": %lld, ", (long long)A->window_every);
    if (F)
        k += snprintf(j + k, sizeof j - (size_t)k,
            "\"ffn\": \"%s\", \"hidden\": %lld, \"act\": \"%s\", \"ffn_norm\": \"%s\", \"ffn_bias\": %s, "
            "\"experts\": %lld, \"top_k\": %lld, \"shared\": %lld, \"capacity_factor\": %.17g, \"aux_loss\": %.17g, ",
            kind_name(F->kind), (long long)F->hidden, act[F->act], norm[F->norm], F->bias ? "true" : "false",
            (long long)F->experts, (long long)F->top_k, (long long)F->shared, F->capacity_factor, F->aux_loss);
    /* norm_position (issue 29), written only where a sublayer's is not pre
       (absent: pre, as in every config written before it) */
    static const char *const npos[] = { "pre", "post", "sandwich" };         /* ORDER NormPosition */
    if ((A && A->norm_pos != NORM_POS_PRE) || (F && F->norm_pos != NORM_POS_PRE))
        k += snprintf(j + k, sizeof j - (size_t)k, "\"attn_norm_position\": \"%s\", \"ffn_norm_position\": \"%s\", ",
                      npos[A ? A->norm_pos : NORM_POS_PRE], npos[F ? F->norm_pos : NORM_POS_PRE]);
    if (F && F->kind == LAYER_MOE)   /* the router's gate (absent: softmax, normalised: Mixtral's) */
        k += snprintf(j + k, sizeof j - (size_t)k, "\"score\": \"%s\", \"norm_topk_prob\": %s, "
                      "\"shared_hidden\": %lld, \"shared_gate\": %s, \"route_groups\": %lld, \"routed_scale\": %.17g, "
                      "\"expert_bias\": %s, ",
                      F->score == MOE_SCORE_SIGMOID ? "sigmoid" : "softmax", F->topk_unnormalised ? "false" : "true",
                      (long long)plan_shared_hidden(F), F->shared_gate ? "true" : "false",
                      (long long)(F->route_groups > 1 && F->route_top_groups < F->route_groups ? F->route_groups : 1),
                      plan_routed_scale(F), F->expert_bias ? "true" : "false");
    char w[240];
    cg_string_literal(why, w, sizeof w);   /* a reason holds no quote; escaped all the same */
    k += snprintf(j + k, sizeof j - (size_t)k,
        "\"final_norm\": \"%s\", \"tied\": %s, \"norm_eps\": %.17g, \"dropout\": %.17g, "
        "\"embed_scale\": %s, \"norm_plus_one\": %s, \"attn_softcap\": %.17g, \"query_scalar\": %.17g, "
        "\"logit_softcap\": %.17g, \"uniform\": \"%s\"}",
        N ? norm[N->norm] : "none", H->tied ? "true" : "false", plan_norm_eps(m), m->dropout,
        E->embed_scale ? "true" : "false", m->norm_plus_one ? "true" : "false", A ? A->softcap : 0,
        A ? A->query_scalar : 0, H->softcap, w);
    char lit[8192];
    cg_string_literal(j, lit, sizeof lit);
    out(g, "/* the model's hyperparameters (planc's JSON), recorded in checkpoints: planrt-ckpt export-hf\n"
           " * writes a Hugging Face config.json from them, --init-from checks one against them */\n");
    out(g, "static const char *const MODEL_CONFIG = \"%s\";\n", lit);
}

static void emit_constants(Cg *g)
{
    const Plan *p = g->p;
    const Model *m = &p->model;
    const Layout *l = &g->l;
    /* the scratch's sizes: the planner's (plan_bwd_scratch_bytes counts it) */
    PlanWidest wide;
    plan_widest(m, l->tp, &wide);
    int64_t max_width = wide.width, max_inner = wide.inner, max_heads = wide.heads;
    int64_t max_e = 1, max_k = 1, max_s = 0, n_moe = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        if (L->kind == LAYER_MOE) {
            n_moe++;
            if (L->experts > max_e) max_e = L->experts;
            if (L->top_k > max_k) max_k = L->top_k;
            if (L->shared > max_s) max_s = L->shared;
        }
    }
    /* under cp > 1 every token-wise op runs on this CP rank's T = seq/cp
     * tokens of each sequence (plan_rule_cp: 2cp divides seq) */
    int cp = plan_cp(l);
    long long B = l->micro_batch, T = m->seq / cp, sp = feature(g, "SP", 2) == 1 ? l->tp : 1;
    out(g, "/* ---- the layout -------------------------------------------------------- */\n");
    out(g, "enum {\n");
    col(g, "    DP = %d, TP = %d, PP = %d,", "data-, tensor-, pipeline-parallel degrees", l->dp, l->tp, l->pp);
    if (cp > 1) col(g, "    CP = %d,", "context-parallel degree: each sequence over CP ranks", cp);
    if (feature(g, "EXPERT_PARALLEL", 15) == 1)
        col(g, "    EP = %d,", "expert-parallel degree: DP ranks per EP group", plan_ep(l));
    col(g, "    CHUNKS = %d,", "model chunks per pipeline stage", l->chunks);
    col(g, "    EARLY_RECVS = %d,", "activation receives posted early at once (NCCL's rules)",
        plan_pipe_early_recvs(l->schedule, l->pp));
    col(g, "    ZERO = %d,", "ZeRO stage", l->zero);
    col(g, "    N_MICRO = %lld,", "micro-batches per step on each pipeline", (long long)g->prog.n_micro);
    col(g, "    N_LAYERS = %d, N_PARAMS = %d,", "layers of the model, tensors of PARAMS", m->n_layers, g->n_params);
    out(g, "};\n/* sizes as size_t, so products of them never overflow an int */\nstatic const size_t\n");
    if (cp > 1)
        col(g, "    B = %lld, SEQ = %lld, T = %lld, N = %lld,", "sequences per micro-batch, tokens each, "
            "this CP rank's SEQ/CP of them, rows B*T", B, (long long)m->seq, T, B * T);
    else
        col(g, "    B = %lld, T = %lld, N = %lld,", "sequences per micro-batch, tokens each, rows B*T", B, T, B * T);
    col(g, "    NL = %lld,", sp > 1 ? "rows of the residual stream here: sequence parallel, N/TP"
                                      : "rows of the residual stream here: all of them", B * T / sp);
    col(g, "    C = %lld, V = %lld, VL = %lld,", "width, vocabulary, this rank's slice Vp/TP (Vp: V padded)",
        (long long)m->dim, (long long)m->vocab, (long long)(plan_vocab_padded(m, l->tp) / l->tp));
    col(g, "    GLOBAL_BATCH = %lld,", "sequences per step, all DP ranks together", (long long)l->global_batch);
    if (cp > 1)   /* no score buffers: the CP attention sizes its own (cp_saved_numel) */
        col(g, "    MAX_WIDTH = %lld, MAX_INNER = %lld;", "widest layer, this rank",
            (long long)max_width, (long long)max_inner);
    else
        col(g, "    MAX_WIDTH = %lld, MAX_INNER = %lld, MAX_HEADS = %lld;", "widest layer, this rank",
            (long long)max_width, (long long)max_inner, (long long)max_heads);
    if (feature(g, "HAS_MOE", 7) == 1) {
        col(g, "static const size_t MAX_EXPERTS = %lld, MAX_TOPK = %lld, MOE_LAYERS = %lld;",
            "the largest MoE layer; the aux loss averages over the layers", (long long)max_e,
            (long long)max_k, (long long)n_moe);
        if (l->recompute == RECOMPUTE_FULL)
            col(g, "static const size_t MAX_SHARED = %lld;", "the most shared experts of a MoE layer",
                (long long)max_s);
    }
    if (cp > 1) {
        static const char *const forms[] = { "PRT_CP_RING", "PRT_CP_ALL_TO_ALL", "PRT_CP_ALL_GATHER",
                                             "PRT_CP_HIERARCHICAL" };   /* ORDER PlanCpComm, prt_cp_form */
        out(g, "static const prt_cp_form CP_FORM = %s;   /* cp_comm %s: how attention sees the other "
               "ranks' keys */\n", forms[plan_cp_comm(l)], plan_cp_comm_name(plan_cp_comm(l)));
    }
    if (feature(g, "ROPE", 4) == 1) emit_rope(g, m);
    if (feature(g, "DROPOUT", 7) == 1) {
        char pr[48];
        out(g, "static const float DROPOUT_P = %s;    /* the model's dropout: probability an element is dropped */\n",
            flt(pr, m->dropout));
    }
    if (feature(g, "EMBED_SCALE", 11) == 1) {
        char sc[48];
        out(g, "static const float EMBED_SCALE_F = %s; /* embedding scale sqrt_dim: sqrt(%lld), as an fp32 */\n",
            flt(sc, (double)sqrtf((float)m->dim)), (long long)m->dim);
    }
    char eps[48];
    out(g, "static const float NORM_EPS = %s;     /* every norm's epsilon (model norm_eps) */\n",
        flt(eps, plan_norm_eps(m)));
    out(g, "\n");
    char data[1024], name[256];
    cg_string_literal(p->train.data ? p->train.data : "", data, sizeof data);
    cg_comment_text(m->name, name, sizeof name);
    char lit[300];
    cg_string_literal(name, lit, sizeof lit);
    const Train *t = &p->train;   /* sema fills the documented defaults, train block or not */
    long steps = (long)t->steps;
    out(g, "static const long  STEPS = %ld;                 /* default of --steps */\n", steps);
    if (data[0]) out(g, "static const char *const DATA = \"%s\"; /* default of --data, relative to the working directory */\n", data);
    else out(g, "static const char *const DATA = 0;              /* the plan names no data: --data is required */\n");
    if (t->init) {
        char init[16400];   /* 4 bytes per escaped byte of at most 3999 */
        cg_string_literal(t->init, init, sizeof init);
        out(g, "static const char *const INIT_FROM = \"%s\"; /* train.init: the default of --init-from */\n", init);
    } else {
        out(g, "static const char *const INIT_FROM = 0;         /* the plan starts from no Hugging Face directory */\n");
    }
    out(g, "static const uint64_t SEED = %lluULL;           /* initialisation and data order */\n",
        (unsigned long long)t->seed);
    if (cp > 1)
        out(g, "static const char *const BANNER = \"%s: dp %d x tp %d x cp %d x pp %d, ZeRO-%d, %s\\n\";\n", lit,
            l->dp, l->tp, cp, l->pp, l->zero, sched_title(l->schedule));
    else
        out(g, "static const char *const BANNER = \"%s: dp %d x tp %d x pp %d, ZeRO-%d, %s\\n\";\n", lit,
            l->dp, l->tp, l->pp, l->zero, sched_title(l->schedule));
    out(g, "static const char *const MODEL_NAME = \"%s\";   /* a resume checks the checkpoint's */\n", lit);
    out(g, "static const char *const PLAN_HASH = \"fnv1a64:%016llx\"; /* of the tensors' names and shapes, "
           "recorded in checkpoints */\n", (unsigned long long)g->hash);
    emit_model_config(g);
    /* MFU's numerator and denominator (planner/model.h, planner/cost.c) */
    const Device *dev = &p->cluster.device;
    double peak = m->dtype == DTYPE_FP32 ? dev->flops_fp32 : dev->flops_16;
    out(g, "static const double MODEL_FLOPS = %.6g;  /* model FLOPs of one step, all ranks (Megatron counting) */\n",
        plan_model_flops_step(m, l->global_batch));
    char devname[128];
    cg_comment_text(dev->name ? dev->name : "device", devname, sizeof devname);
    out(g, "static const double PEAK_FLOPS = %.6g;   /* dense peak FLOP/s of one device, %s (%s): MFU's denominator */\n",
        peak, devname, m->dtype == DTYPE_FP32 ? "fp32" : "16-bit");
    double lr = t->lr;
    out(g, "/* AdamW: lr, min_lr (lr/10), warm-up, cosine horizon (train.steps; main sets --steps), beta1, beta2,\n"
           " * eps, weight decay (matrices only), clip (global gradient norm; 0 off) */\n");
    char f[7][48];
    out(g, "static const prt_adamw_cfg ADAMW = { %s, %s, %ld, %ld, %s, %s, %s, %s, %s };\n\n",
        flt(f[0], lr), flt(f[1], plan_min_lr(t)), (long)t->warmup, steps, flt(f[2], t->beta1),
        flt(f[3], t->beta2), flt(f[4], t->eps), flt(f[5], t->weight_decay), flt(f[6], t->grad_clip));
}

/* One row of the parameter table. */
static void param_row(Cg *g, int *id, const char *name, int layer, size_t rows, size_t cols,
                      const char *split, int nparts, const size_t *part, const char *init,
                      double std)
{
    /* under SP a norm's gain and bias see this rank's rows only; a q/k
     * norm's replicated gains (Qwen3's) this rank's heads only, under any
     * TP; split gains (OLMo-2's q/k norm of the projection) are this
     * rank's own slice, whole */
    bool qk = strstr(name, ".q_norm.") != NULL || strstr(name, ".k_norm.") != NULL;
    /* MLA's down projections, their biases and latent norms: every rank
     * back-propagates its heads' share of the latents (plan_layer_tp_partial_params) */
    qk = qk || strstr(name, ".q_a_") != NULL || strstr(name, ".kv_a_") != NULL;
    bool repl = !strcmp(split, "PRT_REPLICATED");
    bool tp_sum = g->l.tp > 1 && repl && (qk || (g->l.sequence_parallel == 1 && strstr(name, "norm.") != NULL));
    int tp = g->l.tp;
    char shard[64];
    uint64_t local = (uint64_t)rows * cols / (strcmp(split, "PRT_REPLICATED") ? (uint64_t)tp : 1);
    g->stage_numel[g->layer_vs[layer] % g->l.pp] += local;
    if (!strcmp(split, "PRT_SPLIT_ROWS")) snprintf(shard, sizeof shard, "(%zu, %zu)", rows / (size_t)tp, cols);
    else if (!strcmp(split, "PRT_SPLIT_COLS")) snprintf(shard, sizeof shard, "(%zu, %zu)", rows, cols / (size_t)tp);
    else snprintf(shard, sizeof shard, "all");
    char sd[48], key[160];
    if (g->tie < 0) {   /* what a checkpoint holds: layout-free, so every layout hashes alike */
        int k = snprintf(key, sizeof key, "%s %zu %zu;", name, g->logical ? g->logical : rows, cols);
        g->hash = fnv1a(g->hash, key, (size_t)k < sizeof key ? (size_t)k : sizeof key - 1);
    }
    out(g, "    { \"%s\", %d, %d, %zu, %zu, %s, %d, { %zu, %zu, %zu }, %s, %s, %s, %s, %d, %zu }, /* %d: this rank %s */\n",
        name, layer, g->layer_vs[layer], rows, cols, split, nparts, nparts > 0 ? part[0] : 0,
        nparts > 1 ? part[1] : 0, nparts > 2 ? part[2] : 0, init, flt(sd, std),
        cols > 1 ? "true" : "false", tp_sum ? "true" : "false", g->tie, g->logical, *id, shard);
    (*id)++;
}

/* Whether layer i is a tied lm_head whose embedding is on another stage. */
static bool tied_copy(const Cg *g, int i)
{
    const Model *m = &g->p->model;
    if (m->layers[i].kind != LAYER_LM_HEAD || !m->layers[i].tied) return false;
    for (int e = 0; e < m->n_layers; e++)
        if (m->layers[e].kind == LAYER_EMBEDDING)
            return g->layer_vs[e] % g->l.pp != g->layer_vs[i] % g->l.pp;
    return false;
}

/* A comment with each stage's flat buffer and its DP shards (the rule of
 * prt_shard: the first n % DP ranks hold one element more). */
static void emit_shards(Cg *g)
{
    int dp = grad_ranks(&g->l);
    out(g, "/* Flat buffer of one rank (its TP slices, chunk by chunk, layer by layer):\n");
    for (int s = 0; s < g->l.pp; s++) {
        uint64_t n = g->stage_numel[s], q = n / (uint64_t)dp, rem = n % (uint64_t)dp;
        out(g, " *   stage %d: %llu elements", s, (unsigned long long)n);
        bool cp = plan_cp(&g->l) > 1;
        if (g->l.zero == 0 || dp == 1) { out(g, ", replicated over %s\n", cp ? "DP x CP" : "DP"); continue; }
        out(g, "; ZeRO-%d shard of %s r:", g->l.zero, cp ? "gradient-group rank (cp + CP*dp)" : "DP rank");
        for (int r = 0; r < dp && r < 4; r++) {
            uint64_t ur = (uint64_t)r, off = ur * q + (ur < rem ? ur : rem), cnt = q + (ur < rem);
            out(g, " %d [%llu, %llu)", r, (unsigned long long)off, (unsigned long long)(off + cnt));
        }
        out(g, "%s\n", dp > 4 ? " ..." : "");
    }
    out(g, " */\n\n");
}

/* One expert's rows, as Hugging Face's Mixtral names them (w1 the gate or
 * the up projection, w3 SwiGLU's up, w2 down; the expert's global index, so
 * a checkpoint does not depend on the layout), TP-split like an MLP's. The
 * order is the template's (expert_ids): w1 and w3 adjacent, so this rank's
 * slices of both are one (2F/tp, C) matrix, [gate | up] as prt_swiglu_fwd
 * reads it; then their biases, likewise; then w2 and its bias. */
static void moe_expert_rows(Cg *g, int *id, const char *who, int layer, const Layer *L, int64_t width,
                            double s, double sr, int owner)
{
    int first = *id;
    size_t C = (size_t)g->p->model.dim, f = (size_t)width, one[3] = { f, 0, 0 };
    bool gated = plan_act_gated(L->act);
    char nm[160];
    snprintf(nm, sizeof nm, "%s.w1.weight", who);
    param_row(g, id, nm, layer, f, C, "PRT_SPLIT_ROWS", 1, one, "PRT_INIT_NORMAL", s);
    if (gated) { snprintf(nm, sizeof nm, "%s.w3.weight", who);
                 param_row(g, id, nm, layer, f, C, "PRT_SPLIT_ROWS", 1, one, "PRT_INIT_NORMAL", s); }
    if (L->bias) {
        snprintf(nm, sizeof nm, "%s.w1.bias", who);
        param_row(g, id, nm, layer, f, 1, "PRT_SPLIT_ROWS", 1, one, "PRT_INIT_ZEROS", 0);
        if (gated) { snprintf(nm, sizeof nm, "%s.w3.bias", who);
                     param_row(g, id, nm, layer, f, 1, "PRT_SPLIT_ROWS", 1, one, "PRT_INIT_ZEROS", 0); }
    }
    snprintf(nm, sizeof nm, "%s.w2.weight", who);
    param_row(g, id, nm, layer, C, f, "PRT_SPLIT_COLS", 0, one, "PRT_INIT_NORMAL", sr);
    if (L->bias) { snprintf(nm, sizeof nm, "%s.w2.bias", who);
                   param_row(g, id, nm, layer, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ZEROS", 0); }
    for (int i = first; g->param_ep && i < *id; i++) g->param_ep[i] = owner;
}

/* The router's gate as the program's PRT_MOE_* flags (prt_ops.h): the
 * score, norm_topk_prob and, under grouped routing, route_group_score max;
 * "0" for a layer that is no mixture. */
static const char *moe_gate(const Layer *L)
{
    if (L->kind != LAYER_MOE) return "0";
    static const char *const flags[2][2][2] = {   /* [sigmoid][norm][group max] */
        { { "0", "PRT_MOE_GROUP_MAX" }, { "PRT_MOE_NORM", "PRT_MOE_NORM | PRT_MOE_GROUP_MAX" } },
        { { "PRT_MOE_SIGMOID", "PRT_MOE_SIGMOID | PRT_MOE_GROUP_MAX" },
          { "PRT_MOE_SIGMOID | PRT_MOE_NORM", "PRT_MOE_SIGMOID | PRT_MOE_NORM | PRT_MOE_GROUP_MAX" } },
    };
    bool max = L->route_groups > 1 && L->route_group_score == MOE_GROUP_MAX;
    return flags[L->score == MOE_SCORE_SIGMOID][!L->topk_unnormalised][max];
}

/* Parameter ids per expert, in moe_expert_rows' order. */
static int moe_expert_stride(const Layer *L)
{
    int up = plan_act_gated(L->act) ? 2 : 1;
    return up + (L->bias ? up : 0) + 1 + (L->bias ? 1 : 0);
}

/* A norm gain's start: 1, or 0 under norm_plus_one (Gemma's 1 + w is then 1). */
#define NORM_INIT(m) ((m)->norm_plus_one ? "PRT_INIT_ZEROS" : "PRT_INIT_ONES")

/* The rows of one of layer i's norms, layers.i.WHO.weight (and .bias for
 * a LayerNorm): replicated over TP; the gain starts at 1 (NORM_INIT). */
static void norm_rows(Cg *g, int *id, int i, const char *who, bool ln)
{
    char nm[128];
    size_t one[3] = { 0, 0, 0 }, C = (size_t)g->p->model.dim;
    snprintf(nm, sizeof nm, "layers.%d.%s.weight", i, who);
    param_row(g, id, nm, i, C, 1, "PRT_REPLICATED", 0, one, NORM_INIT(&g->p->model), 0);
    if (ln) { snprintf(nm, sizeof nm, "layers.%d.%s.bias", i, who);
              param_row(g, id, nm, i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ZEROS", 0); }
}

/* An MLA layer's rows, as transformers' DeepseekV2Attention names them
 * (self_attn.*, so export-hf can map them): the pre-norm; q_a_proj (and
 * its bias), q_a_layernorm and q_b_proj, or q_proj without q_lora_rank;
 * kv_a_proj_with_mqa (and its bias), kv_a_layernorm, kv_b_proj; o_proj
 * (and its bias). The up projections are split by heads (head-major rows,
 * DeepSeek's view(heads, ...)), o_proj by input columns; the down
 * projections and latent norms are whole (tp_sum: param_row). Emitted in
 * this order: mla_ids counts the same. */
static void mla_rows(Cg *g, int *id, int i, const Layer *L, double s, double sr)
{
    size_t C = (size_t)g->p->model.dim, a = (size_t)L->heads, dq = (size_t)(L->qk_nope_dim + L->qk_rope_dim);
    size_t cq = (size_t)L->q_lora_rank, ckv = (size_t)L->kv_lora_rank, r = (size_t)L->qk_rope_dim;
    size_t kvb = a * (size_t)(L->qk_nope_dim + L->v_head_dim), one[3] = { 0, 0, 0 };
    char nm[128];
    norm_rows(g, id, i, "attn_norm", false);
#define MLA_ROW(who, rows, cols, split, init, std) \
    (snprintf(nm, sizeof nm, "layers.%d.self_attn.%s", i, who), \
     param_row(g, id, nm, i, rows, cols, split, 0, one, init, std))
    if (cq) {
        MLA_ROW("q_a_proj.weight", cq, C, "PRT_REPLICATED", "PRT_INIT_NORMAL", s);
        if (L->bias) MLA_ROW("q_a_proj.bias", cq, 1, "PRT_REPLICATED", "PRT_INIT_ZEROS", 0);
        MLA_ROW("q_a_layernorm.weight", cq, 1, "PRT_REPLICATED", NORM_INIT(&g->p->model), 0);
        MLA_ROW("q_b_proj.weight", a * dq, cq, "PRT_SPLIT_ROWS", "PRT_INIT_NORMAL", s);
    } else {
        MLA_ROW("q_proj.weight", a * dq, C, "PRT_SPLIT_ROWS", "PRT_INIT_NORMAL", s);
    }
    MLA_ROW("kv_a_proj_with_mqa.weight", ckv + r, C, "PRT_REPLICATED", "PRT_INIT_NORMAL", s);
    if (L->bias) MLA_ROW("kv_a_proj_with_mqa.bias", ckv + r, 1, "PRT_REPLICATED", "PRT_INIT_ZEROS", 0);
    MLA_ROW("kv_a_layernorm.weight", ckv, 1, "PRT_REPLICATED", NORM_INIT(&g->p->model), 0);
    MLA_ROW("kv_b_proj.weight", kvb, ckv, "PRT_SPLIT_ROWS", "PRT_INIT_NORMAL", s);
    MLA_ROW("o_proj.weight", C, a * (size_t)L->v_head_dim, "PRT_SPLIT_COLS", "PRT_INIT_NORMAL", sr);
    if (L->bias) MLA_ROW("o_proj.bias", C, 1, "PRT_REPLICATED", "PRT_INIT_ZEROS", 0);
#undef MLA_ROW
}

/* The ids mla_rows gave layer i's tensors (-1: none): into M, o_proj's
 * and its bias's into *wo, *bo. */
typedef struct { int wqa, bqa, gqa, wqb, wkva, bkva, gkva, wkvb; } MlaIds;
static MlaIds mla_ids(const Cg *g, int i, int *wo, int *bo)
{
    const Layer *L = &g->p->model.layers[i];
    int p = g->pfirst[i] + 1;   /* after the RMSNorm pre-norm's gain */
    MlaIds M = { -1, -1, -1, -1, -1, -1, -1, -1 };
    if (L->q_lora_rank) {
        M.wqa = p++;
        if (L->bias) M.bqa = p++;
        M.gqa = p++;
    }
    M.wqb = p++;
    M.wkva = p++;
    if (L->bias) M.bkva = p++;
    M.gkva = p++;
    M.wkvb = p++;
    *wo = p++;
    *bo = L->bias ? p : -1;
    return M;
}

/* Elements a row of what the MLA op keeps (the program's a->h; mla_kept's
 * order in the template): qa, qn, kva, kvl, kvn, the padded q, k, v and
 * the padded output, on tp ranks. planner/model.c counts the same. */
static long long mla_kept_row(const Layer *L, int tp)
{
    long long h = L->heads / tp, dq = L->qk_nope_dim + L->qk_rope_dim, D = dq > L->v_head_dim ? dq : L->v_head_dim;
    return 2LL * L->q_lora_rank + 3LL * L->kv_lora_rank + L->qk_rope_dim + 4 * h * D;
}

/* Walk the model's tensors in order; with write false only count them. */
static int emit_params(Cg *g, bool write)
{
    const Model *m = &g->p->model;
    FILE *keep = g->f;
    if (!write) g->f = NULL;
    int id = 0, wte = -1;
    g->tie = -1;
    g->hash = 14695981039346656037ULL;   /* FNV-1a offset basis */
    memset(g->stage_numel, 0, sizeof(uint64_t) * (size_t)g->l.pp);
    double s = 0.02, sr = 0.02 / sqrt(2.0 * (m->n_blocks > 0 ? m->n_blocks : 1));
    size_t C = (size_t)m->dim;
    char nm[128];
    out(g, "/* ---- the parameter table -------------------------------------------------\n"
           " * Every tensor by global name and global (rows, cols), the layer (gradient\n"
           " * bucket) and virtual pipeline stage that hold it, how TP splits it, and\n"
           " * how it starts: normal(0, std) from (seed, id, element index), so every\n"
           " * layout starts from the same numbers. prt_model_new lays this rank's\n"
           " * slices out in one flat buffer per stage.\n"
           " * ZeRO-%d then %s.\n"
           " * A linear's weight is (out, in), row-major: y = x W^T + b, as torch.nn.Linear.\n"
           " * Names are the checkpoint's: layers.L.* are layer L's of the layer table\n"
           " * (LAYERS[L]; the comment above each group names its block); Hugging Face\n"
           " * names block b model.layers.b (GPT-2: transformer.h.b), and export-hf and\n"
           " * --init-from map the one to the other. */\n",
           g->l.zero, g->l.zero == 0 ? "replicates everything over DP"
           : g->l.zero == 1 ? "shards the AdamW state over DP (prt_shard of the flat buffer)"
           : g->l.zero == 2 ? "shards the AdamW state and the gradients over DP"
           : "shards parameters, gradients and AdamW state over DP");
    out(g, "static const prt_param PARAMS[] = {\n"
           "    /* name, layer, vstage, rows, cols, TP split, row groups, init, std, decay, tp_sum, tie,\n"
           "     * logical rows (a padded vocabulary: rows Vp, the model's V; the padding rows\n"
           "     * after V stay 0 and are not checkpointed). Row groups: the rows of a\n"
           "     * PRT_SPLIT_ROWS tensor in parts (QKV: q's heads, k's, v's; a gated up: gate's,\n"
           "     * up's), each TP rank holding its 1/TP of every part */\n");
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        size_t one[3] = { 0, 0, 0 };
        g->pfirst[i] = id;
        bool ln = L->norm == NORM_LAYERNORM;
        char title[64];
        layer_title(m, i, title, sizeof title);
        if (L->kind == LAYER_LM_HEAD && L->tied && !tied_copy(g, i))
            out(g, "    /* layer %d: %s, tied: it reads wte.weight, no tensor of its own */\n", i, title);
        else
            out(g, "    /* layer %d: %s */\n", i, title);
        switch (L->kind) {
        case LAYER_EMBEDDING:
            one[0] = (size_t)plan_vocab_padded(m, g->l.tp);
            wte = id;
            g->logical = (size_t)m->vocab;
            param_row(g, &id, "wte.weight", i, one[0], C, "PRT_SPLIT_ROWS", 1, one, "PRT_INIT_NORMAL", s);
            g->logical = 0;
            if (L->position == POS_LEARNED)
                param_row(g, &id, "wpe.weight", i, (size_t)m->seq, C, "PRT_REPLICATED", 0, one, "PRT_INIT_NORMAL", s);
            break;
        case LAYER_MOE: {
            if (plan_layer_pre_norm(L)) norm_rows(g, &id, i, "moe_norm", ln);
            snprintf(nm, sizeof nm, "layers.%d.block_sparse_moe.gate.weight", i);
            param_row(g, &id, nm, i, (size_t)L->experts, C, "PRT_REPLICATED", 0, one, "PRT_INIT_NORMAL", s);
            for (int64_t e = 0; e < L->experts + L->shared; e++) {
                char who[96];
                if (e < L->experts) snprintf(who, sizeof who, "layers.%d.block_sparse_moe.experts.%lld", i, (long long)e);
                else snprintf(who, sizeof who, "layers.%d.block_sparse_moe.shared_experts.%lld", i,
                              (long long)(e - L->experts));
                /* EP rank r holds routed experts [r E/ep, (r+1) E/ep); shared ones are dense,
                   of their own width */
                int owner = e < L->experts ? (int)(e / (L->experts / plan_ep(&g->l))) : -1;
                moe_expert_rows(g, &id, who, i, L, e < L->experts ? L->hidden : plan_shared_hidden(L), s, sr, owner);
            }
            if (L->shared_gate) {   /* Qwen2-MoE's shared_expert_gate: (1, C), replicated as the router */
                snprintf(nm, sizeof nm, "layers.%d.block_sparse_moe.shared_expert_gate.weight", i);
                param_row(g, &id, nm, i, 1, C, "PRT_REPLICATED", 0, one, "PRT_INIT_NORMAL", s);
            }
            if (plan_layer_post_norm(L)) norm_rows(g, &id, i, "moe_post_norm", ln);   /* the layer's last */
            break;
        }
        case LAYER_ATTENTION: {
            if (L->attn == ATTN_MLA) {
                mla_rows(g, &id, i, L, s, sr);
                break;
            }
            size_t d = (size_t)plan_head_dim(m, L), q = (size_t)L->heads * d, kv = (size_t)L->kv_heads * d;
            size_t parts[3] = { q, kv, kv };
            if (plan_layer_pre_norm(L)) norm_rows(g, &id, i, "attn_norm", ln);
            snprintf(nm, sizeof nm, "layers.%d.attn.qkv.weight", i);
            param_row(g, &id, nm, i, q + 2 * kv, C, "PRT_SPLIT_ROWS", 3, parts, "PRT_INIT_NORMAL", s);
            if (L->bias) { snprintf(nm, sizeof nm, "layers.%d.attn.qkv.bias", i);
                           param_row(g, &id, nm, i, q + 2 * kv, 1, "PRT_SPLIT_ROWS", 3, parts, "PRT_INIT_ZEROS", 0); }
            snprintf(nm, sizeof nm, "layers.%d.attn.out.weight", i);
            param_row(g, &id, nm, i, C, q, "PRT_SPLIT_COLS", 0, one, "PRT_INIT_NORMAL", sr);
            if (L->bias && !L->qkv_bias_only) { snprintf(nm, sizeof nm, "layers.%d.attn.out.bias", i);
                           param_row(g, &id, nm, i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ZEROS", 0); }
            if (L->qk_norm == QK_NORM_RMSNORM) {
                /* Qwen3's q_norm, k_norm: (d) gains, start at 1; Gemma 3's
                 * (norm_plus_one) at 0, its gain being 1 + w */
                snprintf(nm, sizeof nm, "layers.%d.attn.q_norm.weight", i);
                param_row(g, &id, nm, i, d, 1, "PRT_REPLICATED", 0, one, NORM_INIT(m), 0);
                snprintf(nm, sizeof nm, "layers.%d.attn.k_norm.weight", i);
                param_row(g, &id, nm, i, d, 1, "PRT_REPLICATED", 0, one, NORM_INIT(m), 0);
            } else if (L->qk_norm == QK_NORM_RMSNORM_PROJ) {
                /* OLMo-2's q_norm (heads d), k_norm (kv_heads d): a gain per
                 * element, start at 1, split over TP with the heads */
                snprintf(nm, sizeof nm, "layers.%d.attn.q_norm.weight", i);
                param_row(g, &id, nm, i, q, 1, "PRT_SPLIT_ROWS", 0, one, "PRT_INIT_ONES", 0);
                snprintf(nm, sizeof nm, "layers.%d.attn.k_norm.weight", i);
                param_row(g, &id, nm, i, kv, 1, "PRT_SPLIT_ROWS", 0, one, "PRT_INIT_ONES", 0);
            }
            if (plan_layer_post_norm(L)) norm_rows(g, &id, i, "attn_post_norm", ln);   /* the layer's last */
            break;
        }
        case LAYER_MLP: {
            size_t f = (size_t)L->hidden, fu = plan_act_gated(L->act) ? 2 * f : f;
            size_t parts[3] = { f, f, 0 };
            int np = plan_act_gated(L->act) ? 2 : 1;
            if (plan_layer_pre_norm(L)) norm_rows(g, &id, i, "mlp_norm", ln);
            snprintf(nm, sizeof nm, "layers.%d.mlp.up.weight", i);
            param_row(g, &id, nm, i, fu, C, "PRT_SPLIT_ROWS", np, parts, "PRT_INIT_NORMAL", s);
            if (L->bias) { snprintf(nm, sizeof nm, "layers.%d.mlp.up.bias", i);
                           param_row(g, &id, nm, i, fu, 1, "PRT_SPLIT_ROWS", np, parts, "PRT_INIT_ZEROS", 0); }
            snprintf(nm, sizeof nm, "layers.%d.mlp.down.weight", i);
            param_row(g, &id, nm, i, C, f, "PRT_SPLIT_COLS", 0, one, "PRT_INIT_NORMAL", sr);
            if (L->bias) { snprintf(nm, sizeof nm, "layers.%d.mlp.down.bias", i);
                           param_row(g, &id, nm, i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ZEROS", 0); }
            if (plan_layer_post_norm(L)) norm_rows(g, &id, i, "mlp_post_norm", ln);   /* the layer's last */
            break;
        }
        case LAYER_NORM:
            param_row(g, &id, "norm.weight", i, C, 1, "PRT_REPLICATED", 0, one, NORM_INIT(m), 0);
            if (ln) param_row(g, &id, "norm.bias", i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ZEROS", 0);
            break;
        case LAYER_LM_HEAD:
            one[0] = (size_t)plan_vocab_padded(m, g->l.tp);
            if (tied_copy(g, i)) {   /* the embedding lives on another stage */
                out(g, "    /* lm_head is tied to wte, which another stage holds: this copy starts\n"
                       "     * from wte's values and is summed with it every step (tie column) */\n");
                g->tie = wte;
            }
            g->logical = (size_t)m->vocab;
            if (!L->tied || tied_copy(g, i))
                param_row(g, &id, "lm_head.weight", i, one[0], C, "PRT_SPLIT_ROWS", 1, one, "PRT_INIT_NORMAL", s);
            g->tie = -1;
            g->logical = 0;
            break;
        }
    }
    out(g, "};\n");
    if (g->param_ep && feature(g, "EXPERT_PARALLEL", 15) == 1) {
        out(g, "/* The EP rank holding each routed expert's tensor (its own parameter group, reduced\n"
               " * and ZeRO-sharded over expert-DP); -1: dense, every rank of its stage */\n"
               "static const int EXPERT_EP[N_PARAMS] = {");
        for (int i = 0; i < id; i++) out(g, "%s%s%d", i ? "," : "", i % 24 ? " " : "\n    ", g->param_ep[i]);
        out(g, "\n};\n");
    }
    emit_shards(g);
    g->f = keep;
    return id;
}

/* Which layers full recomputation rebuilds when it covers some blocks
 * only (recompute_layers, recompute_every): the attention and MLP layers
 * of the blocks plan_block_recomputed names, counted as cost.c counts
 * them (the block's place in its chunk, and among its rank's blocks). */
static void emit_rebuilt(Cg *g)
{
    const Model *m = &g->p->model;
    int rank_blocks[PLAN_MAX_VSTAGES];   /* [stage] blocks of its earlier chunks */
    for (int s = 0; s < g->l.pp; s++) rank_blocks[s] = 0;
    out(g, "/* The layers full recomputation rebuilds in the backward (%s); the\n"
           " * others keep what their backward reads. */\n", g->l.recompute_layers
               ? "recompute_layers: the first blocks of each chunk" : "recompute_every: every N-th block of a rank");
    out(g, "static const bool REBUILT[N_LAYERS] = {");
    for (int k = 0; k < g->nv; k++) {   /* the chunks hold the layers in order */
        int cb = -1, *rb = &rank_blocks[k % g->l.pp];
        for (int i = g->chunk[k].first; i < g->chunk[k].end; i++) {
            LayerKind kind = m->layers[i].kind;
            if (kind == LAYER_ATTENTION) cb++;
            bool r = cb >= 0 && (kind == LAYER_ATTENTION || kind == LAYER_MLP) &&
                     plan_block_recomputed(&g->l, cb, *rb + cb);
            out(g, "%s%s", i ? ", " : " ", r ? "true" : "false");
        }
        *rb += cb + 1;
    }
    out(g, " };\n\n");
}

/* FP8 (issue 27): the recipe and format of the plan, and which layers'
 * linears run in FP8, asked of the planner's one rule (plan_fp8_layer). */
static void emit_fp8(Cg *g)
{
    static const char *const prt_recipes[PLAN_N_FP8_RECIPES] = {   /* ORDER PlanFp8Recipe */
        "?", "PRT_FP8_TENSORWISE", "PRT_FP8_ROWWISE", "PRT_FP8_BLOCKWISE", "PRT_FP8_MXFP8", "PRT_FP8_DELAYED" };
    const PlanFp8 *f = &g->p->software.fp8;
    const Model *m = &g->p->model;
    out(g, "/* fp8 %s, %s:\n"
           " * the linears of the layers marked here quantise both operands of their three\n"
           " * GEMMs (planner/fp8.c: attention and MLP linears%s) */\n",
        plan_fp8_recipe_names[f->recipe], f->format == PLAN_FP8_HYBRID ? "hybrid (E4M3 forward, E5M2 gradients)"
                                                                      : "E4M3 everywhere",
        f->first_last_bf16 ? ", not the first and last block's" : "");
    out(g, "/* the FP8 weights' copies kept for the step: the layouts the plan's device's GEMMs take */\n"
           "enum { FP8_HYBRID = %d, FP8_LAYOUTS = %d };\n", f->format == PLAN_FP8_HYBRID, plan_fp8_layouts(g->p));
    out(g, "static const prt_fp8_recipe FP8_RECIPE = %s;\n", prt_recipes[f->recipe]);
    out(g, "static const bool FP8_LINEAR[N_LAYERS] = {");
    for (int i = 0; i < m->n_layers; i++)
        out(g, "%s%s", i ? ", " : " ", plan_fp8_layer(g->p, &m->layers[i]) ? "true" : "false");
    out(g, " };\n");
    if (f->recipe == PLAN_FP8_DELAYED)   /* the template's FP8_HISTORY[]: amaxes kept per tensor role */
        out(g, "/* recipe delayed: each linear's x, W and dY keep their last amax_history amaxes */\n"
               "enum { FP8_AMAX_HISTORY_LEN = %lld };\n", (long long)f->amax_history);
    out(g, "\n");
}

/* MLA_OF: each MLA layer's parameter ids (mla_ids) and global widths. */
static void emit_mla(Cg *g)
{
    const Model *m = &g->p->model;
    out(g, "/* Each MLA layer's tensors (ids, -1: none) and widths: q_a, its bias, q_a_layernorm, q_b (or\n"
           " * q_proj), kv_a, its bias, kv_a_layernorm, kv_b; q_lora, kv_lora, rope, nope, v */\n"
           "static const MlaSpec MLA_OF[N_LAYERS] = {\n");
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        if (L->kind != LAYER_ATTENTION || L->attn != ATTN_MLA) {
            out(g, "    { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0 },\n");
            continue;
        }
        int wo, bo;
        MlaIds M = mla_ids(g, i, &wo, &bo);
        out(g, "    { %d, %d, %d, %d, %d, %d, %d, %d, %lld, %lld, %lld, %lld, %lld }, /* layer %d */\n", M.wqa, M.bqa,
            M.gqa, M.wqb, M.wkva, M.bkva, M.gkva, M.wkvb, (long long)L->q_lora_rank, (long long)L->kv_lora_rank,
            (long long)L->qk_rope_dim, (long long)L->qk_nope_dim, (long long)L->v_head_dim, i);
    }
    out(g, "};\n\n");
}

/* The q/k norm (`qk_norm rmsnorm` or `rmsnorm_projection`): each layer's
 * q gain id, its k gain the next (emit_params' order: after the output
 * projection's weight and bias); -1 where the layer has none. With some
 * `rmsnorm_projection`, QK_PROJ_OF[] says which layers norm the whole
 * projection (OLMo-2) rather than each head (Qwen3). */
static void emit_qk_norm(Cg *g)
{
    const Model *m = &g->p->model;
    out(g, "/* The q gain of each attention layer's q/k norm (its k gain: the next id); -1: none */\n"
           "static const int QK_NORM_W[N_LAYERS] = {");
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        int id = -1;
        if (layer_qk_norm(L)) {
            int pre = plan_layer_pre_norm(L) ? 1 + (L->norm == NORM_LAYERNORM) : 0;   /* the pre-norm's rows */
            id = g->pfirst[i] + pre + 1 + (L->bias ? 1 : 0) + 1 + (L->bias && !L->qkv_bias_only ? 1 : 0);
        }
        out(g, "%s%d", i ? ", " : " ", id);
    }
    out(g, " };\n\n");
    if (feature(g, "QK_PROJ", 7) != 1) return;
    out(g, "/* Whether each layer's q/k norm is of the whole q and k projections (OLMo-2) */\n"
           "static const bool QK_PROJ_OF[N_LAYERS] = {");
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        out(g, "%s%s", i ? ", " : " ", layer_qk_norm(L) && L->qk_norm == QK_NORM_RMSNORM_PROJ ? "true" : "false");
    }
    out(g, " };\n\n");
}

/* Each layer's score transform (prt_attn_scores: scale, cap) for
 * prt_attention_scores_*: 1/sqrt(query_pre_attn_scalar or head_dim) and
 * the soft-cap (0: none); zeros on layers that are not attention. */
static void emit_attn_scores(Cg *g)
{
    const Model *m = &g->p->model;
    out(g, "/* Each attention layer's scores: scale (1/sqrt(query_pre_attn_scalar or head_dim)) and soft-cap\n"
           " * (0: none), Gemma 2's; prt_attention_scores_* */\n"
           "static const prt_attn_scores ATTN_SCORES_OF[N_LAYERS] = {");
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        double scale = 0, cap = 0;
        if (L->kind == LAYER_ATTENTION) {
            double q = L->query_scalar > 0 ? L->query_scalar : (double)plan_head_dim(m, L);
            scale = (float)(1.0 / sqrt(q));
            cap = L->softcap;
        }
        char a[48], b[48];
        out(g, "%s{ %s, %s }", i ? ", " : " ", flt(a, scale), flt(b, cap));
    }
    out(g, " };\n\n");
}

/* The post-norm (`norm_position post|sandwich`): each layer's post-norm
 * gain id (its bias, under LayerNorm, the next), -1 where it has none.
 * The post-norm's rows are its layer's last (emit_params), so they end
 * where the next layer's begin (a sublayer is never the model's last). */
static void emit_post_norm(Cg *g)
{
    const Model *m = &g->p->model;
    out(g, "/* The post-norm gain of each sublayer (norm_position post or sandwich; its bias under\n"
           " * LayerNorm: the next id); -1: none */\n"
           "static const int POST_NORM_W[N_LAYERS] = {");
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        int id = plan_layer_post_norm(L) && i + 1 < m->n_layers
                     ? g->pfirst[i + 1] - 1 - (L->norm == NORM_LAYERNORM) : -1;
        out(g, "%s%d", i ? ", " : " ", id);
    }
    out(g, " };\n\n");
}

/* The lm_head's soft-cap of the logits (Gemma 2's final_logit_softcapping). */
static void emit_logit_cap(Cg *g)
{
    const Model *m = &g->p->model;
    char a[48];
    out(g, "/* the logits' soft-cap, cap tanh(l / cap) before the cross-entropy (Gemma 2) */\n"
           "static const float LOGIT_CAP = %s;\n\n", flt(a, m->layers[m->n_layers - 1].softcap));
}

/* The layer table: parameter ids by role and this rank's dimensions. */
static void emit_layers(Cg *g)
{
    const Model *m = &g->p->model;
    int tp = g->l.tp, wte = -1;
    out(g, "/* Each row names the fields its kind reads; the rest are left out (zero).\n"
           " * g++ (under nvcc) warns of the fields a designated initialiser leaves out,\n"
           " * gcc's C does not: the warning is off for the table alone. */\n"
           "#pragma GCC diagnostic push\n"
           "#pragma GCC diagnostic ignored \"-Wmissing-field-initializers\"\n"
           "static const LayerSpec LAYERS[N_LAYERS] = {\n");
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        int p = g->pfirst[i], w1 = -1, b1 = -1, w2 = -1, b2 = -1, lw = -1, lb = -1, h = 0, hkv = 0,
            d = 0, f = 0;
        long long window = 0;
        long long width = 0, inner = 0;
        bool ln = L->norm == NORM_LAYERNORM;
        int router = -1, stride = 0, shared0 = -1, sgate = -1, sf = 0;
        long long swidth = 0;
        switch (L->kind) {
        case LAYER_EMBEDDING:
            w1 = wte = p;
            if (L->position == POS_LEARNED) w2 = p + 1;
            break;
        case LAYER_MOE: {   /* w1, b1, w2, b2: routed expert 0's (moe_expert_rows' order) */
            int up = plan_act_gated(L->act) ? 2 : 1;
            if (plan_layer_pre_norm(L)) {   /* norm_position post: none (-1) */
                lw = p++;
                if (ln) lb = p++;
            }
            router = p++;
            stride = moe_expert_stride(L);
            w1 = p;
            if (L->bias) b1 = p + up;
            w2 = p + up + (L->bias ? up : 0);
            if (L->bias) b2 = w2 + 1;
            shared0 = p + (int)L->experts * stride;
            if (L->shared_gate) sgate = shared0 + (int)L->shared * stride;
            sf = (int)(plan_shared_hidden(L) / tp);
            swidth = plan_act_gated(L->act) ? 2LL * sf : sf;
            f = (int)(L->hidden / tp);
            width = plan_act_gated(L->act) ? 2LL * f : f;
            inner = f;
            break;
        }
        case LAYER_ATTENTION: case LAYER_MLP:
            if (plan_layer_pre_norm(L)) {   /* norm_position post: none (-1) */
                lw = p++;
                if (ln) lb = p++;
            }
            w1 = p++;
            if (L->bias) b1 = p++;
            w2 = p++;
            /* `bias qkv` (Qwen2): no output-projection bias */
            if (L->bias && !(L->kind == LAYER_ATTENTION && L->qkv_bias_only)) b2 = p++;
            if (L->kind == LAYER_ATTENTION && L->attn == ATTN_MLA) {
                /* mla_attention_*: w1 the query's up projection (its ids: MLA_OF), w2, b2 o_proj's; h
                   heads of the padded size d; width the op's kept elements a row (a->h), inner o_proj's
                   input */
                MlaIds M = mla_ids(g, i, &w2, &b2);
                lw = g->pfirst[i];
                w1 = M.wqb;
                b1 = -1;
                h = hkv = local_heads(L, tp);
                int dq = (int)(L->qk_nope_dim + L->qk_rope_dim);
                d = dq > L->v_head_dim ? dq : (int)L->v_head_dim;
                window = plan_attention_keys(m, L) < m->seq ? (long long)L->window : 0;
                width = mla_kept_row(L, tp);
                inner = (long long)h * L->v_head_dim;
            } else if (L->kind == LAYER_ATTENTION) {
                h = local_heads(L, tp);
                hkv = (int)(L->kv_heads / tp);
                d = (int)plan_head_dim(m, L);
                /* 0: full causal (a window no shorter than seq masks nothing) */
                window = plan_attention_keys(m, L) < m->seq ? (long long)L->window : 0;
                width = (long long)(h + 2 * hkv) * d;
                inner = (long long)h * d;
            } else {
                f = (int)(L->hidden / tp);
                width = plan_act_gated(L->act) ? 2LL * f : f;
                inner = f;
            }
            break;
        case LAYER_NORM:
            lw = p;
            if (ln) lb = p + 1;
            break;
        case LAYER_LM_HEAD:
            w1 = L->tied && !tied_copy(g, i) ? wte : p;
            break;
        }
        static const char *kinds[] = { "EMBEDDING", "ATTENTION", "MLP", "NORM", "LM_HEAD", "MOE" }; /* ORDER LayerKind */
        static const char *acts[] = { "ACT_GELU", "ACT_RELU", "ACT_SWIGLU", "ACT_GEGLU" }; /* ORDER ActKind */
        const char *norm = L->norm == NORM_RMSNORM ? "NORM_RMSNORM" : "NORM_LAYERNORM";
        char row[768], title[64];
        int at = snprintf(row, sizeof row, ".kind = %s", kinds[L->kind]);
#define ROW(...) (at += snprintf(row + at, sizeof row - (size_t)at, __VA_ARGS__))
        /* the fields its kind reads, in LayerSpec's order (C++ wants that
         * order); ids of roles it has but this layer lacks are -1 */
        switch (L->kind) {
        case LAYER_EMBEDDING:
            ROW(", .w1 = %d", w1);
            if (w2 >= 0) ROW(", .w2 = %d", w2);
            break;
        case LAYER_ATTENTION: case LAYER_MLP: case LAYER_MOE:
            ROW(", .w1 = %d, .b1 = %d, .w2 = %d, .b2 = %d, .ln_w = %d, .ln_b = %d, .norm = %s",
                w1, b1, w2, b2, lw, lb, norm);
            if (L->kind == LAYER_ATTENTION) {
                ROW(", .h = %d, .hkv = %d, .d = %d", h, hkv, d);
                if (window) ROW(", .window = %lld", window);
            } else {
                ROW(", .f = %d, .act = %s", f, acts[L->act]);
            }
            ROW(", .width = %lld, .inner = %lld", width, inner);
            if (L->kind == LAYER_MOE) {
                char aux[48], capf[48], rs[48], br[48];
                bool grouped = L->route_groups > 1;
                ROW(", .router = %d, .ex_stride = %d, .shared0 = %d, .experts = %lld, .top_k = %lld, "
                    ".shared = %lld, .aux = %s, .capf = %s", router, stride, shared0, (long long)L->experts,
                    (long long)L->top_k, (long long)L->shared, flt(aux, L->aux_loss), flt(capf, L->capacity_factor));
                /* the router's gate, the shared experts' gate and width, grouped routing (1, 1: none) */
                ROW(", .gate = %s, .sgate = %d, .sf = %d, .swidth = %lld, .sinner = %d, .groups = %lld, "
                    ".top_groups = %lld", moe_gate(L), sgate, sf, swidth, sf,
                    grouped ? (long long)L->route_groups : 1LL, grouped ? (long long)L->route_top_groups : 1LL);
                ROW(", .rscale = %s, .brate = %s", flt(rs, plan_routed_scale(L)),   /* routed_scale (1: none), */
                    flt(br, L->expert_bias ? L->bias_update_rate : 0));      /* expert_bias's rate (0: none) */
            }
            break;
        case LAYER_NORM:
            ROW(", .ln_w = %d, .ln_b = %d, .norm = %s", lw, lb, norm);
            break;
        case LAYER_LM_HEAD:
            ROW(", .w1 = %d", w1);
            break;
        }
#undef ROW
        layer_title(m, i, title, sizeof title);
        out(g, "    { %s }, /* layer %d: %s */\n", row, i, title);
    }
    out(g, "};\n#pragma GCC diagnostic pop\n\n/* The layers [first, end) of each virtual stage (chunk * PP + stage). */\n");
    out(g, "static const int VSTAGE_FIRST[%d] = {", g->nv);
    for (int k = 0; k < g->nv; k++) out(g, "%s%d", k ? ", " : " ", g->chunk[k].first);
    out(g, " };\nstatic const int VSTAGE_END[%d] = {", g->nv);
    for (int k = 0; k < g->nv; k++) out(g, "%s%d", k ? ", " : " ", g->chunk[k].end);
    out(g, " };\n\n");
    if (feature(g, "RECOMPUTE_SOME", 14) == 1) emit_rebuilt(g);
    if (feature(g, "FP8", 3) == 1) emit_fp8(g);
    if (feature(g, "QK_NORM", 7) == 1) emit_qk_norm(g);
    if (feature(g, "ATTN_SCORES", 11) == 1) emit_attn_scores(g);
    if (feature(g, "LOGIT_SOFTCAP", 13) == 1) emit_logit_cap(g);
    if (feature(g, "POST_NORM", 9) == 1) emit_post_norm(g);
    if (feature(g, "MLA", 3) == 1) emit_mla(g);
}

/* ---- chunks ------------------------------------------------------------------ */

/* The layers' functions by kind (ORDER LayerKind): forward, whole
 * backward, zb-h1's input half and weight half (NULL: the kind has no
 * such half). Only W writes a layer's gradient bucket (B keeps the norm
 * gradients aside; the embedding's whole backward is its W, from the
 * slot's d), so ZeRO >= 2 holds two buckets; a MoE layer's is whole in B. */
static const char *const FN_FWD[] = { "embedding_fwd", "attention_fwd", "mlp_fwd", "final_norm_fwd", "lm_head_fwd",
                                      "moe_fwd" };
static const char *const FN_BWD[] = { "embedding_bwd", "attention_bwd", "mlp_bwd", "final_norm_bwd", "lm_head_bwd",
                                      "moe_bwd" };
static const char *const FN_BWD_INPUT[] = { NULL, "attention_bwd_input", "mlp_bwd_input",
                                            "final_norm_bwd_input", "lm_head_bwd_input", "moe_bwd" };
static const char *const FN_BWD_WEIGHT[] = { "embedding_bwd", "attention_bwd_weight", "mlp_bwd_weight",
                                             "final_norm_bwd_weight", "lm_head_bwd_weight", NULL };

/* The backward of virtual stage k, the layers in reverse: `fn` per kind,
 * grads_done after each unless `input` (zb-h1's B: the W half says when
 * a layer's gradients are final). */
static void emit_chunk_bwd(Cg *g, int k, const char *name, const char *const *fn, bool input)
{
    const Model *m = &g->p->model;
    int a = g->chunk[k].first, e = g->chunk[k].end, uses = 0;
    bool weight = fn == FN_BWD_WEIGHT;
    out(g, "\nstatic void %s_v%d(prt_slot *s, LayerActs *a)\n{\n", name, k);
    if (weight) out(g, "    (void)s;   /* the embedding's W only */\n");
    for (int i = e - 1; i >= a; i--) {
        const char *f = fn[m->layers[i].kind];
        bool with_d = !weight || m->layers[i].kind == LAYER_EMBEDDING;
        char call[128], title[64];
        layer_title(m, i, title, sizeof title);
        if (f && !with_d) snprintf(call, sizeof call, "%s(&LAYERS[%d], &a[%d]);", f, i, i - a);
        else if (f) snprintf(call, sizeof call, "%s(&LAYERS[%d], &a[%d], s->d);", f, i, i - a);
        if (f) { out(g, "    %-48s /* %s */\n", call, title); uses++; }
        if (!input) out(g, "    grads_done(%d);\n", i);
    }
    if (!uses) out(g, "    (void)s; (void)a;\n");
    out(g, "}\n");
}

/* One dispatcher: chunk (on this stage) -> its virtual stage's function. */
static void emit_chunk_switch(Cg *g, const char *name, const char *args, const char *pass)
{
    out(g, "\nstatic void %s(int chunk, prt_slot *s%s)\n{\n"
           "    LayerActs *a = ((SlotActs *)s->acts)->a;\n"
           "    switch (chunk * PP + R.c->coord.pp) {\n", name, args);
    for (int k = 0; k < g->nv; k++) out(g, "    case %d: %s_v%d(%s); break;\n", k, name, k, pass);
    out(g, "    }\n}\n");
}

static void emit_chunks(Cg *g)
{
    const Model *m = &g->p->model;
    bool full = feature(g, "USES_BWD", 8) == 1, split = feature(g, "SPLIT_BWD", 9) == 1;
    out(g, "/* ---- model chunks ------------------------------------------------------------\n"
           " * Virtual stage k = chunk * PP + stage runs layers [VSTAGE_FIRST[k],\n"
           " * VSTAGE_END[k]). Each layer's output is the next one's input. */\n");
    for (int k = 0; k < g->nv; k++) {
        int a = g->chunk[k].first, e = g->chunk[k].end;
        char span[256];
        span_title(m, a, e, span, sizeof span);
        out(g, "\n/* virtual stage %d (stage %d, chunk %d): layers %d-%d, %s */\n", k, k % g->l.pp,
            k / g->l.pp, a, e - 1, span);
        out(g, "static void chunk_fwd_v%d(prt_slot *s, LayerActs *a)\n{\n", k);
        for (int i = a; i < e; i++) {
            LayerKind kind = m->layers[i].kind;
            char y[32], call[128], title[64];
            layer_title(m, i, title, sizeof title);
            if (kind == LAYER_LM_HEAD) snprintf(call, sizeof call, "%s(&LAYERS[%d], &a[%d]);", FN_FWD[kind], i, i - a);
            else {
                if (i + 1 < e) snprintf(y, sizeof y, "a[%d].x", i + 1 - a);
                else snprintf(y, sizeof y, "s->y");
                snprintf(call, sizeof call, "%s(&LAYERS[%d], &a[%d], %s);", FN_FWD[kind], i, i - a, y);
            }
            out(g, "    %-48s /* %s */\n", call, title);
        }
        if (m->layers[e - 1].kind == LAYER_LM_HEAD) out(g, "    (void)s;\n");
        out(g, "}\n");
        if (full) emit_chunk_bwd(g, k, "chunk_bwd", FN_BWD, false);
        if (split) {
            emit_chunk_bwd(g, k, "chunk_bwd_input", FN_BWD_INPUT, true);
            emit_chunk_bwd(g, k, "chunk_bwd_weight", FN_BWD_WEIGHT, false);
        }
    }
    emit_chunk_switch(g, "chunk_fwd", "", "s, a");
    if (full) emit_chunk_switch(g, "chunk_bwd", "", "s, a");
    if (split) {
        emit_chunk_switch(g, "chunk_bwd_input", "", "s, a");
        emit_chunk_switch(g, "chunk_bwd_weight", "", "s, a");
    }
    out(g, "\n");
}

/* ---- stage step functions ---------------------------------------------------- */

static bool uses_slot(PlanOpKind k)
{
    return k == OP_FWD || k == OP_BWD || k == OP_BWD_INPUT || k == OP_BWD_WEIGHT ||
           k == OP_SEND_ACT || k == OP_RECV_ACT || k == OP_SEND_GRAD || k == OP_RECV_GRAD;
}

static const char *reduce_text(int zero, int cp)
{
    if (cp > 1) switch (zero) {   /* the gradient group is dp x cp (c->dpcp) */
    case 0: return "DP x CP: all-reduce (sum) the chunk's gradients, layer by layer, async";
    case 1: return "ZeRO-1: reduce-scatter the chunk's gradients over DP x CP into this rank's shard, async";
    case 2: return "ZeRO-2: reduce-scatter this micro-batch's gradients over DP x CP into the shard, layer by layer, async; the full buffer is freed";
    default: return "ZeRO-3: reduce-scatter this micro-batch's gradients over DP x CP into the shard, layer by layer, async; the full buffer is freed";
    }
    switch (zero) {
    case 0: return "DP: all-reduce (sum) the chunk's gradients, layer by layer, async";
    case 1: return "ZeRO-1: reduce-scatter the chunk's gradients over DP into this rank's shard, async";
    case 2: return "ZeRO-2: reduce-scatter this micro-batch's gradients into the shard, layer by layer, async; the full buffer is freed";
    default: return "ZeRO-3: reduce-scatter this micro-batch's gradients into the shard, layer by layer, async; the full buffer is freed";
    }
}

/* The program's bookkeeping kinds, numbered after PlanOpKind as the
 * template's OpKind numbers them. */
enum { CG_RELEASE_PARAMS = PLAN_N_OPKINDS, CG_REDUCE_DURING, CG_FREE_SLOT, CG_POST_RECV_ACT,
       CG_POST_RECV_GRAD };

/* One op(kind, mb, chunk, peer) line of a step function. */
typedef struct { int kind, mb, chunk, peer; } CgLine;

/* A piece of a step function: lines [start, start + k), once (r = 1), or
 * r times with every micro-batch d higher each time (a loop). */
typedef struct { int start, k, r, d; } CgPiece;

#define CG_MAX_BODY 512   /* lines in a loop body, at most */

static const char *line_kind(int k)
{
    if (k == CG_RELEASE_PARAMS) return "RELEASE_PARAMS";
    if (k == CG_REDUCE_DURING) return "REDUCE_DURING";
    if (k == CG_FREE_SLOT) return "FREE_SLOT";
    if (k == CG_POST_RECV_ACT) return "POST_RECV_ACT";
    if (k == CG_POST_RECV_GRAD) return "POST_RECV_GRAD";
    return plan_op_name((PlanOpKind)k);
}

/* What line l of stage s does; mb is the micro-batch as the code writes it. */
static void line_comment(Cg *g, int s, const CgLine *l, const char *mb, char *buf, size_t n)
{
    const PlanChunk *ch = l->chunk >= 0 ? &g->chunk[l->chunk * g->l.pp + s] : NULL;
    int ranks = g->l.dp * g->l.tp * plan_cp(&g->l) * g->l.pp;
    switch (l->kind) {
    case OP_FWD: {
        char span[128];
        span_title(&g->p->model, ch->first, ch->end, span, sizeof span);
        snprintf(buf, n, "forward   mb %s, chunk %d (%s)", mb, l->chunk, span);
        break;
    }
    case OP_BWD: snprintf(buf, n, "backward  mb %s, chunk %d", mb, l->chunk); break;
    case OP_BWD_INPUT: snprintf(buf, n, "backward  mb %s, chunk %d: input gradients (B)", mb, l->chunk); break;
    case OP_BWD_WEIGHT: snprintf(buf, n, "backward  mb %s, chunk %d: weight gradients (W)", mb, l->chunk); break;
    case OP_SEND_ACT: snprintf(buf, n, "activation of mb %s -> stage %d", mb, l->peer); break;
    case OP_RECV_ACT: snprintf(buf, n, "activation of mb %s <- stage %d", mb, l->peer); break;
    case OP_SEND_GRAD: snprintf(buf, n, "input gradient of mb %s -> stage %d", mb, l->peer); break;
    case OP_RECV_GRAD: snprintf(buf, n, "output gradient of mb %s <- stage %d", mb, l->peer); break;
    case OP_GATHER_PARAMS: snprintf(buf, n, "ZeRO-3: all-gather chunk %d's parameters over DP (%d layers)",
                                    l->chunk, ch->end - ch->first); break;
    case OP_REDUCE_GRADS: snprintf(buf, n, "%s", grad_ranks(&g->l) > 1 ? reduce_text(g->l.zero, plan_cp(&g->l)) : "dp 1: nothing to reduce"); break;
    case OP_OPT_STEP: snprintf(buf, n, "AdamW on %s, clipped by the norm above",
                               g->l.zero && grad_ranks(&g->l) > 1 ? "this rank's shard" : "all of this rank's parameters"); break;
    case OP_SYNC_PARAMS: snprintf(buf, n, "ZeRO-%d: all-gather the updated shards over DP", g->l.zero); break;
    case OP_SP_NORM_REDUCE:
        if (g->l.sequence_parallel != 1)   /* the Program has it for the q/k norm alone */
            snprintf(buf, n, "TP (%d ranks): all-reduce the q/k norm gains' gradients: each TP rank "
                     "normalised only its own heads", g->l.tp);
        else
            snprintf(buf, n, "TP (%d ranks): all-reduce the norm weights' gradients: under sequence "
                     "parallelism each TP rank saw only its 1/%d of the rows", g->l.tp, g->l.tp);
        break;
    case OP_EMBED_REDUCE:
        snprintf(buf, n, "first + last stage (2 ranks): all-reduce the tied word-embedding gradient, "
                 "so wte and its lm_head copy take the same update"); break;
    case OP_NORM_REDUCE:
        snprintf(buf, n, "all %d ranks: all-reduce the squared gradient norm: it clips, is logged, "
                 "and a NaN or Inf stops the run here", ranks); break;
    case CG_RELEASE_PARAMS: snprintf(buf, n, "ZeRO-3: free chunk %d's gathered parameters", l->chunk); break;
    case CG_REDUCE_DURING: snprintf(buf, n, "its reduction below starts layer by layer inside the next op"); break;
    case CG_FREE_SLOT: snprintf(buf, n, "mb %s, chunk %d: activations may be reused", mb, l->chunk); break;
    case CG_POST_RECV_ACT:
        snprintf(buf, n, "post the receive of mb %s's activation <- stage %d now, with the sends "
                 "before it (NCCL: a send ends only once its receive is posted)", mb, l->peer); break;
    case CG_POST_RECV_GRAD:
        snprintf(buf, n, "post the receive of mb %s's output gradient <- stage %d now, with the "
                 "sends before it (NCCL: a send ends only once its receive is posted)", mb, l->peer); break;
    default: snprintf(buf, n, "?"); break;
    }
}

/* Stage s's step as lines: its Program op for op, with the bookkeeping
 * the Program implies (REDUCE_DURING before the op a REDUCE_GRADS drains,
 * RELEASE_PARAMS after the op a ZeRO-3 gather feeds, FREE_SLOT after the
 * last op of a (micro-batch, chunk)). *n receives the count; NULL when out
 * of memory. */
static CgLine *stage_lines(Cg *g, int s, int *n)
{
    const PlanStageProgram *sp = &g->prog.stages[s];
    CgLine *L = malloc(sizeof *L * (size_t)(4 * sp->n_ops + 1));   /* + one early receive an op */
    *n = 0;
    if (!L) return NULL;
    int *last = calloc((size_t)sp->n_ops + 1, sizeof(int));   /* op i is its slot's last use */
    int *release = malloc(sizeof(int) * ((size_t)sp->n_ops + 1)); /* the gather that feeds op i */
    bool *during = calloc((size_t)sp->n_ops + 1, sizeof(bool));
    if (!last || !release || !during) { free(L); free(last); free(release); free(during); return NULL; }
    for (int i = 0; i < sp->n_ops; i++) release[i] = -1;
    for (int j = 0; j < sp->n_ops; j++) {
        const PlanOp *o = &sp->ops[j];
        if (o->kind == OP_GATHER_PARAMS && o->pair >= 0) release[o->pair] = j;
        if (o->kind == OP_REDUCE_GRADS && o->pair >= 0 && grad_ranks(&g->l) > 1) during[o->pair] = true;
    }
    /* the last op of each (mb, chunk): scan backwards, first seen wins */
    for (int i = sp->n_ops - 1; i >= 0; i--) {
        const PlanOp *o = &sp->ops[i];
        if (!uses_slot(o->kind)) continue;
        bool later = false;
        for (int j = i + 1; j < sp->n_ops && !later; j++)
            later = uses_slot(sp->ops[j].kind) && sp->ops[j].mb == o->mb && sp->ops[j].chunk == o->chunk;
        last[i] = !later;
    }
    for (int i = 0; i < sp->n_ops; i++) {
        const PlanOp *o = &sp->ops[i];
        /* receives posted early (p2p_order.c) go before the op that posts the
         * sends queued there, and before a REDUCE_DURING that would post them first */
        for (int j = i; j < sp->n_ops; j++) {
            const PlanOp *q = &sp->ops[j];
            if (q->prepost == i + 1)
                L[(*n)++] = (CgLine){ q->kind == OP_RECV_ACT ? CG_POST_RECV_ACT : CG_POST_RECV_GRAD,
                                      q->mb, q->chunk, q->peer };
        }
        if (during[i]) L[(*n)++] = (CgLine){ CG_REDUCE_DURING, o->mb, o->chunk, -1 };
        L[(*n)++] = (CgLine){ (int)o->kind, o->mb, o->chunk, o->peer };
        if (release[i] >= 0) L[(*n)++] = (CgLine){ CG_RELEASE_PARAMS, o->mb, o->chunk, -1 };
        if (last[i]) L[(*n)++] = (CgLine){ CG_FREE_SLOT, o->mb, o->chunk, -1 };
    }
    free(last); free(release); free(during);
    return L;
}

/* Whether b is a with its micro-batch `shift` higher (step-level ops,
 * mb -1, stay as they are). */
static bool shifted(const CgLine *a, const CgLine *b, int shift)
{
    return a->kind == b->kind && a->chunk == b->chunk && a->peer == b->peer &&
           b->mb == (a->mb < 0 ? a->mb : a->mb + shift);
}

/* The longest run at i of the k lines there repeated with the micro-batch
 * d higher each time: its repeat count (1: no loop), d in *d. */
static int repeats(const CgLine *L, int n, int i, int k, int *d)
{
    int u = 0;
    while (u < k && L[i + u].mb < 0) u++;
    if (u == k || i + 2 * k > n) return 1;
    *d = L[i + k + u].mb - L[i + u].mb;
    if (*d < 1) return 1;
    int r = 1;
    for (; i + (r + 1) * k <= n; r++) {
        bool same = true;
        for (int v = 0; v < k && same; v++) same = shifted(&L[i + v], &L[i + r * k + v], r * *d);
        if (!same) break;
    }
    return r;
}

/* Cut lines L[0, n) into pieces: at each line the loop that covers most
 * lines (shortest body on a tie; at least two rounds and four lines), else
 * the line alone. Returns the number of pieces. */
static int loop_pieces(const CgLine *L, int n, CgPiece *out)
{
    int np = 0;
    for (int i = 0; i < n;) {
        CgPiece best = { i, 1, 1, 0 };
        for (int k = 1; k <= CG_MAX_BODY && i + 2 * k <= n; k++) {
            int d = 0, r = repeats(L, n, i, k, &d);
            if (r >= 2 && r * k >= 4 && r * k > best.r * best.k) best = (CgPiece){ i, k, r, d };
        }
        out[np++] = best;
        i += best.k * best.r;
    }
    return np;
}

/* The pieces expanded back into lines equal L, line for line: the check
 * that a loop form says exactly what the Program says. */
static bool pieces_expand_to(const CgPiece *pc, int np, const CgLine *L, int n)
{
    int at = 0;
    for (int p = 0; p < np; p++)
        for (int r = 0; r < pc[p].r; r++)
            for (int u = 0; u < pc[p].k; u++, at++)
                if (at >= n || !shifted(&L[pc[p].start + u], &L[at], r * pc[p].d)) return false;
    return at == n;
}

/* The micro-batch of a loop line as C: base + d * i. */
static void mb_text(char *buf, size_t n, int mb, int d, bool loop)
{
    if (!loop || mb < 0) snprintf(buf, n, "%d", mb);
    else if (mb == 0) snprintf(buf, n, d == 1 ? "i" : "%d * i", d);
    else if (d == 1) snprintf(buf, n, "%d + i", mb);
    else snprintf(buf, n, "%d + %d * i", mb, d);
}

static void emit_line(Cg *g, int s, const CgLine *l, int d, bool loop)
{
    char mb[48], c[256], call[128];
    mb_text(mb, sizeof mb, l->mb, d, loop);
    line_comment(g, s, l, mb, c, sizeof c);
    snprintf(call, sizeof call, "op(%s, %s, %d, %d);", line_kind(l->kind), mb, l->chunk, l->peer);
    out(g, "%s%-30s /* %s */\n", loop ? "        " : "    ", call, c);
}

/* A loop's title: warm-up (forwards only, before the first backward),
 * steady state (forwards and backwards), cool-down (backwards only). */
static const char *loop_title(const CgLine *L, const CgPiece *pc, bool seen_bwd)
{
    int f = 0, b = 0;
    for (int u = 0; u < pc->k; u++) {
        int k = L[pc->start + u].kind;
        f += k == OP_FWD;
        b += k == OP_BWD || k == OP_BWD_INPUT || k == OP_BWD_WEIGHT;
    }
    if (f && b) return "steady state";
    if (f) return seen_bwd ? "forwards" : "warm-up";
    if (b) return "cool-down";
    return "repeated";
}

static void emit_stage(Cg *g, int s)
{
    const PlanStageProgram *sp = &g->prog.stages[s];
    int warm = 0, fwd = 0, bwd = 0, n = 0, np = 0;
    bool seen_b = false;
    for (int i = 0; i < sp->n_ops; i++) {
        PlanOpKind k = sp->ops[i].kind;
        if (k == OP_FWD) { fwd++; if (!seen_b) warm++; }
        if (k == OP_BWD || k == OP_BWD_INPUT) { bwd++; seen_b = true; }
    }
    CgLine *L = stage_lines(g, s, &n);
    CgPiece *pc = L ? malloc(sizeof *pc * (size_t)(n + 1)) : NULL;
    if (!pc) { snprintf(g->bad, sizeof g->bad, "out of memory"); free(L); return; }
    /* ZB-H1 is list-scheduled: its order has no regular rounds, so it is
     * listed op by op; so is any list whose loop form would not expand to
     * exactly the Program */
    bool loops = g->l.schedule != SCHED_ZB_H1;
    if (loops) np = loop_pieces(L, n, pc);
    if (!loops || !pieces_expand_to(pc, np, L, n)) {
        for (int i = 0; i < n; i++) pc[i] = (CgPiece){ i, 1, 1, 0 };
        np = n;
        loops = false;
    }
    out(g, "/* Stage %d of %d under %s: %d forwards and %d backwards of (micro-batch,\n"
           " * chunk), %d before the first backward. %d ops%s. */\n",
        s, g->l.pp, sched_title(g->l.schedule), fwd, bwd, warm, sp->n_ops,
        loops ? "; the loops are rounds of the\n * same ops, the micro-batch one round further each time"
              : ", listed one by one");
    out(g, "static void step_stage%d(void)\n{\n", s);
    seen_b = false;
    for (int p = 0; p < np; p++) {
        if (pc[p].r == 1) {
            for (int u = 0; u < pc[p].k; u++) emit_line(g, s, &L[pc[p].start + u], 0, false);
        } else {
            out(g, "    /* %s: %d rounds */\n", loop_title(L, &pc[p], seen_b), pc[p].r);
            out(g, "    for (int i = 0; i < %d; i++) {\n", pc[p].r);
            for (int u = 0; u < pc[p].k; u++) emit_line(g, s, &L[pc[p].start + u], pc[p].d, true);
            out(g, "    }\n");
        }
        for (int u = 0; u < pc[p].k; u++) {
            int k = L[pc[p].start + u].kind;
            seen_b = seen_b || k == OP_BWD || k == OP_BWD_INPUT;
        }
    }
    out(g, "}\n\n");
    free(pc);
    free(L);
}

static void emit_steps(Cg *g)
{
    out(g, "/* ---- one training step per pipeline stage ----------------------------------\n"
           " * Each is the Program planc scheduled for that stage (plan_lower), in order;\n"
           " * `planc trace` draws the same list. op(kind, micro-batch, chunk, peer stage).\n"
           " * Every collective of the step is a line here or inside the layers above. */\n\n");
    for (int s = 0; s < g->l.pp; s++) emit_stage(g, s);
    out(g, "static void train_step(void)\n{\n    switch (R.c->coord.pp) {\n");
    for (int s = 0; s < g->l.pp; s++) out(g, "    case %d: step_stage%d(); break;\n", s, s);
    out(g, "    }\n}\n\n");
}

/* ---- driver ------------------------------------------------------------------- */

/* The recomputation the runtime runs: none, selective (the attention core,
 * Megatron's core_attn: RECOMPUTE_SELECTIVE; the pre-norms' outputs,
 * layernorm: RECOMPUTE_LN) and full (RECOMPUTE_FULL),
 * of every block or, without a mixture, of the blocks
 * plan_block_recomputed names (REBUILT[]). Else *key names what it
 * cannot (in buf) and *what why. */
static void recompute_honoured(const Plan *p, const Layout *l, const char **key, const char **what,
                               char *buf, size_t len)
{
    int mods = plan_recompute_modules(l) & ~(PLAN_RC_BIT(PLAN_RC_CORE_ATTN) | PLAN_RC_BIT(PLAN_RC_LAYERNORM));
    if (l->recompute == RECOMPUTE_SELECTIVE_OP) {
        *key = "recompute selective_op";
        *what = "it keeps no per-op save list: none, selective (the attention core) or full";
    } else if (mods) {
        int m = 0;
        while (!(mods & PLAN_RC_BIT(m))) m++;
        snprintf(buf, len, "recompute_modules %s", plan_recompute_module_name(m));
        *key = buf;
        *what = "its selective recomputation rebuilds the attention core and the pre-norms only, Megatron's "
                "core_attn and layernorm";
    } else if (plan_recompute_unit(l) > 1) {
        *key = "recompute_method uniform";
        *what = "its full recomputation rebuilds one block at a time, not units of recompute_layers";
    } else if (plan_recompute_partial(l) && plan_model_has_moe(&p->model)) {
        *key = l->recompute_layers ? "recompute_layers" : "recompute_every";
        *what = "a mixture's buffers are rebuilt in every block or none";
    }
}

/* Whether planc's runtime does what the plan's software settings and
 * model knobs say, on the resolved layout l; if not, the key it cannot
 * honour goes to why. `check` and `search` model every setting (they
 * predict other software too); the program must do what it says. A setting
 * that changes nothing on this layout (overlap_tp with tp 1) is honoured.
 * The runtime honours overlap_grad_reduce both ways (false: the Program's
 * reductions wait for the flush, and no REDUCE_DURING is emitted) and the
 * defaults of the others (planner/layout.c, plan_software_defaults), and the
 * model's dropout (runtime/ops/dropout.c: the masks planner/model.c counts).
 * Gradients: the runtime accumulates, reduces and holds them in fp32 on both
 * targets (runtime/par/model.c), so a plan whose gradients are 16-bit
 * (plan_grad_dtype: a bf16 model's default) is refused with the key that
 * makes it fp32, which memory and cost then count at 4 bytes. */
/* The MoE settings planc's runtime cannot run (issue 25), its key and why
 * into *key / *what; none: left as they are. moe_imbalance is the
 * prediction's assumption about routing, which the runtime runs as the
 * router decides: nothing to honour. */
static void moe_runtime_key(const Plan *p, const Layout *l, const char **key, const char **what)
{
    const Software *w = &p->software;
    if (!plan_model_has_moe(&p->model)) return;
    if (w->overlap_moe_a2a && plan_ep(l) > 1) {
        *key = "overlap_moe_a2a true";
        *what = "its all-to-alls are synchronous inside the layer, one micro-batch at a time (runtime/par/moe_ep.c)";
    } else if (w->moe_dispatcher == PLAN_MOE_DEEPEP && plan_ep(l) > 1) {
        *key = "moe_dispatcher deepep";
        *what = "it dispatches with one all-to-all over the EP group (prt_all_to_all_v)";
    } else if (plan_etp(l) != l->tp) {
        *key = "etp";
        *what = "its experts are split over the dense layers' tp (prt_ep_init)";
    }
}

/* Context parallelism (issue 26) runs as planrt's CP attention
 * (runtime/par/cp.c) with the rest token-wise on T/cp rows; what it does
 * not run yet is refused with its key. */
/* Whether some attention layer of m forms its scores as Gemma 2 (attn_scored). */
static bool model_attn_scored(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_ATTENTION && attn_scored(&m->layers[i])) return true;
    return false;
}

static void cp_runtime_key(const Plan *p, const Layout *l, const char **key, const char **what,
                           char *keybuf, size_t len)
{
    int cp = plan_cp(l);
    if (plan_model_dropout(&p->model)) {
        snprintf(keybuf, len, "dropout %g with cp %d", p->model.dropout, cp);
        *key = keybuf;
        *what = "its CP attention drops no probabilities (prt_cp_attention_fwd has no dropout)";
    } else if (plan_model_has_moe(&p->model)) {
        snprintf(keybuf, len, "moe with cp %d", cp);
        *key = keybuf;
        *what = "its experts' gradients are reduced over expert-DP alone, not expert-DP x cp";
    } else if (model_attn_scored(&p->model)) {
        snprintf(keybuf, len, "softcap or query_pre_attn_scalar with cp %d", cp);
        *key = keybuf;
        *what = "its CP attention forms the scores as Q K^T / sqrt(head_dim), uncapped (runtime/par/cp.c)";
    } else if (plan_fp8_on(&p->software)) {
        snprintf(keybuf, len, "fp8 with cp %d", cp);
        *key = keybuf;
        *what = "its FP8 scales are reduced over the TP group alone: a tensorwise activation scale would "
                "be taken over this CP rank's tokens, not the micro-batch's";
    }
}

/* The first width of layer L's FP8 linears on one of tp ranks that is not
 * a multiple of q: the query heads' and the kv heads' pieces of QKV (heads
 * times head size), or the MLP slice (each half of a gated one); 0 when
 * all are. */
static long long fp8_shard_width_off(const Model *m, const Layer *L, int tp, long long q)
{
    long long d = L->kind == LAYER_ATTENTION ? (long long)plan_head_dim(m, L) : 1;
    long long w[2] = { L->kind == LAYER_ATTENTION ? local_heads(L, tp) * d : (long long)(L->hidden / tp),
                       L->kind == LAYER_ATTENTION ? (long long)(L->kv_heads / tp) * d : q };
    for (int j = 0; j < 2; j++)
        if (w[j] % q) return w[j];
    return 0;
}

/* FP8 (issue 27) as the program runs it: every recipe (delayed with its
 * amax histories, one scale per tensor as tensorwise), weights gathered
 * in the compute dtype (all_gather false), and
 * blockwise / mxfp8 tiles that never straddle a TP split (a tile cut by
 * the split would take its scale over part of itself on each rank, and
 * layouts would scale apart): each TP shard's width, a QKV piece (q, k
 * or v heads times head size) or an MLP slice (each half of a gated one),
 * a multiple of the tile. Names the first layer that does not fit. */
static void fp8_runtime_key(const Plan *p, const Layout *l, const char **key, const char **what,
                            char *keybuf, size_t len)
{
    const PlanFp8 *f = &p->software.fp8;
    if (!plan_fp8_on(&p->software)) return;
    if (f->all_gather) {   /* the planner would time and count gathers of 1-byte weights */
        *key = "fp8 all_gather";
        *what = "its ZeRO gathers move the weights in the compute dtype (no FP8 parameter all-gather)";
        return;
    }
    long long tile = f->recipe == PLAN_FP8_BLOCKWISE ? 128 : f->recipe == PLAN_FP8_MXFP8 ? 32 : 0;
    if (!tile || l->tp == 1) return;
    const Model *m = &p->model;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        if (!plan_fp8_layer(p, L)) continue;
        long long w = fp8_shard_width_off(m, L, l->tp, tile);
        if (w) {
            snprintf(keybuf, len, "fp8 %s with tp %d", plan_fp8_recipe_names[f->recipe], l->tp);
            *key = keybuf;
            static char why[200];
            snprintf(why, sizeof why, "layer %d (%s) has a TP shard %lld wide, not a multiple of the "
                     "%lld-element tile, so a tile would straddle the split", i,
                     L->kind == LAYER_ATTENTION ? "attention" : "mlp", w, tile);
            *what = why;
            return;
        }
    }
}

/* The element multiple cuBLASLt's FP8 GEMMs want of every dimension under
 * recipe r: 16 (the FP8 kernels' 16-byte leading dimensions), 128 for
 * blockwise's 128-element scale blocks, 32 for mxfp8's. */
static long long fp8_cuda_multiple(PlanFp8Recipe r)
{
    return r == PLAN_FP8_BLOCKWISE ? 128 : r == PLAN_FP8_MXFP8 ? 32 : 16;
}

bool cg_target_fp8(const Plan *p, CgTarget t, char *why, size_t len)
{
    const PlanFp8 *f = &p->software.fp8;
    if (t != CG_TARGET_CUDA || !plan_fp8_on(&p->software)) return true;
    PlanEval ev;
    plan_evaluate(p, &ev);
    const Layout *l = &ev.layout;
    const Model *m = &p->model;
    long long q = fp8_cuda_multiple(f->recipe), bad = 0, tokens = (long long)l->micro_batch * m->seq / plan_cp(l);
    const char *what = "the tokens of a micro-batch (dW's K)";
    if (ev.valid && tokens % q) bad = tokens;
    for (int i = 0; ev.valid && !bad && i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        if (!plan_fp8_layer(p, L)) continue;
        /* every FP8 linear reads or writes the model's width, and its TP
         * shards' widths (QKV's pieces add up to its output) */
        bad = m->dim % q ? (long long)m->dim : fp8_shard_width_off(m, L, l->tp, q);
        what = L->kind == LAYER_ATTENTION ? "an attention linear's width on a TP rank" : "an MLP linear's width on a TP rank";
    }
    plan_eval_free(&ev);
    if (!bad) return true;
    snprintf(why, len, "fp8 %s with --target cuda: %s is %lld, not a multiple of %lld, which cuBLASLt's FP8 "
             "GEMMs want of every dimension under this recipe", plan_fp8_recipe_names[f->recipe], what, bad, q);
    return false;
}

/* The values prt_rope_inv_freq divides and takes logarithms by (sema
 * checks them in a .plan; a Plan built in C is checked again here). */
static bool rope_scaling_honoured(RopeScaling r)
{
    if (!(r.factor >= 1 && isfinite(r.factor))) return false;
    if (r.kind == ROPE_SCALING_LLAMA3)
        return r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor && r.original_max_position > 0;
    if (r.kind == ROPE_SCALING_YARN)   /* the mscale pair: 0 or above (0 is transformers' None) */
        return r.beta_slow > 0 && r.beta_fast > r.beta_slow && r.original_max_position > 0 &&
               r.mscale >= 0 && isfinite(r.mscale) && r.mscale_all_dim >= 0 && isfinite(r.mscale_all_dim);
    return true;
}

/* Attention layers of kind mla, and of kind mha (all others). */
static int model_attention_of(const Model *m, bool mla)
{
    int n = 0;
    for (int i = 0; i < m->n_layers; i++)
        n += m->layers[i].kind == LAYER_ATTENTION && (m->layers[i].attn == ATTN_MLA) == mla;
    return n;
}

bool cg_model_has_mla(const Model *m) { return model_attention_of(m, true) > 0; }

/* What the program's MLA (prt_mla_fwd / prt_mla_bwd through mla_attention_*)
 * does not do yet, by key: a model mixing MLA and MHA layers (the program's
 * MLA feature makes every attention layer MLA), LayerNorm latents (the op's
 * latent norms are RMSNorms), dropout (the op has no dropped
 * probabilities), a post or sandwich norm, Gemma 2's score transform, FP8
 * (the op's linears are prt_linear_*). */
static void mla_runtime_key(const Plan *p, const Layout *l, const char **key, const char **what, char *buf,
                            size_t len)
{
    const Model *m = &p->model;
    (void)l;   /* no layout key is refused with it: cp > 1 is the language's */
    if (!cg_model_has_mla(m)) return;
    const Layer *L = NULL;
    for (int i = 0; !L && i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_ATTENTION && m->layers[i].attn == ATTN_MLA) L = &m->layers[i];
    if (model_attention_of(m, false) > 0) {
        *key = "kind mla beside kind mha";
        *what = "its MLA program makes every attention layer of the model MLA";
    } else if (L->norm != NORM_RMSNORM) {
        *key = "kind mla with norm layernorm";
        *what = "prt_mla_fwd's latent norms (q_a_layernorm, kv_a_layernorm) are RMSNorms";
    } else if (plan_model_dropout(m)) {
        snprintf(buf, len, "dropout %g with kind mla", m->dropout);
        *key = buf;
        *what = "prt_mla_fwd's attention core drops no probabilities";
    } else if (plan_layer_post_norm(L)) {
        *key = "norm_position post|sandwich with kind mla";
        *what = "its MLA layer is pre-norm only";
    } else if (attn_scored(L)) {
        *key = "softcap or query_pre_attn_scalar with kind mla";
        *what = "prt_mla_fwd scales the scores by 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), uncapped";
    } else if (plan_fp8_on(&p->software)) {
        *key = "fp8 with kind mla";
        *what = "prt_mla_fwd's linears are prt_linear_*, not the FP8 GEMMs";
    }
}

static bool runtime_honours(const Plan *p, const Layout *l, char *why, size_t len)
{
    const Software *w = &p->software;
    const char *key = NULL, *what = NULL;
    char keybuf[160];   /* a key written out (the attention kernel's, a recompute module's) */
    mla_runtime_key(p, l, &key, &what, keybuf, sizeof keybuf);
    if (key) {
        /* kind mla's, named above */
    } else if (!w->overlap_p2p && l->pp > 1) {
        key = "overlap_p2p false";
        what = "its pipeline sends are asynchronous (runtime/par/pipe.c)";
    } else if (grad_ranks(l) > 1 && l->zero >= 1 && plan_param_overlap(p, l->zero) != (l->zero == 3)) {
        key = l->zero == 3 ? "overlap_param_gather false" : "overlap_param_gather true";
        what = l->zero == 3 ? "its ZeRO-3 gathers prefetch the next layer"
                            : "its ZeRO-1/2 all-gather follows the optimizer step";
    } else if (w->overlap_tp && l->tp > 1) {
        key = "overlap_tp true";
        what = "its TP collectives are synchronous";
    } else if (plan_flash(w)) {
        snprintf(keybuf, sizeof keybuf, "attention_kernel %s%s", plan_attn_kernel_names[w->attention_kernel],
                 w->attention_kernel == PLAN_ATTN_FA2 ? " (flash_attention true)" : "");
        key = keybuf;
        what = "its attention materialises the scores (runtime/ops)";
    } else if (!w->grad_accum_fusion) {
        key = "grad_accum_fusion false";
        what = "its weight-gradient GEMMs accumulate into the gradients (beta = 1)";
    } else if (!w->cross_entropy_fusion) {
        key = "cross_entropy_fusion false";
        what = "its loss reads the logits in their own dtype, no fp32 copy (prt_xent_*)";
    } else if (plan_grad_dtype(p) != DTYPE_FP32) {
        key = plan_grad_dtype(p) == DTYPE_FP16 ? "grad_accum_dtype fp16" : "grad_accum_dtype bf16";
        what = "it accumulates and reduces gradients in fp32; add `grad_accum_dtype fp32;` to the plan block";
    } else if (w->unfused_norm && plan_model_has_rmsnorm(&p->model)) {
        key = "fused_norm false";
        what = "its RMSNorm is one kernel each way (prt_rmsnorm_*)";
    } else if (w->unfused_rope && plan_model_has_rope(&p->model)) {
        key = "fused_rope false";
        what = "its RoPE is one kernel over q and k (prt_rope_*)";
    } else if (w->unfused_swiglu && plan_model_has_gated(&p->model)) {
        key = "fused_swiglu false";
        what = "its gated activation is one kernel each way";
    } else if (w->optimizer != PLAN_OPTIM_FUSED) {
        key = w->optimizer == PLAN_OPTIM_FOREACH ? "optimizer foreach" : "optimizer forloop";
        what = "its AdamW is one fused pass per tensor (prt_adamw_step)";
    } else {
        recompute_honoured(p, l, &key, &what, keybuf, sizeof keybuf);
    }
    if (!key) moe_runtime_key(p, l, &key, &what);
    if (!key && plan_rope_scaling(&p->model).kind != ROPE_SCALING_NONE &&
        !rope_scaling_honoured(plan_rope_scaling(&p->model))) {
        key = "rope_scaling";
        what = "prt_rope_inv_freq wants factor >= 1, low_freq_factor > 0, high_freq_factor > "
               "low_freq_factor, beta_fast > beta_slow > 0, original_max_position > 0 and "
               "mscale, mscale_all_dim >= 0";
    }
    for (int i = 0; !key && p->model.norm_plus_one && i < p->model.n_layers; i++)
        if (layer_qk_norm(&p->model.layers[i]) && p->model.layers[i].qk_norm == QK_NORM_RMSNORM_PROJ) {
            key = "qk_norm rmsnorm_projection with norm_plus_one";
            what = "its q/k norm of the whole projection scales by the gain w itself (OLMo-2); only the "
                   "per-head one (qk_norm rmsnorm: Qwen3, Gemma 3) takes 1 + w";
        }
    if (!key && plan_model_dropout(&p->model) && model_attn_scored(&p->model)) {
        snprintf(keybuf, sizeof keybuf, "softcap or query_pre_attn_scalar with dropout %g", p->model.dropout);
        key = keybuf;
        what = "its attention with dropout forms the scores as Q K^T / sqrt(head_dim), uncapped "
               "(prt_attention_probs_fwd)";
    }
    if (!key) fp8_runtime_key(p, l, &key, &what, keybuf, sizeof keybuf);
    if (!key && plan_cp(l) > 1) cp_runtime_key(p, l, &key, &what, keybuf, sizeof keybuf);
    /* a stack preset names itself first: the key is what it set */
    char stack[64] = "";
    if (key && w->stack != 0) {
        char label[48];
        plan_stack_label(w, label, sizeof label);
        snprintf(stack, sizeof stack, "software %s sets ", label);
    }
    if (key) snprintf(why, len, "%s%s: planc's runtime cannot honour it (%s); `check` and `search` still "
                      "predict it", stack, key, what);
    return !key;
}

/* The Program must reduce the gradients over the dp x cp group whenever
 * it has more than one rank: a program without REDUCE_GRADS would leave
 * each CP rank with the gradient of its own tokens alone (wrong, not a
 * crash), so it is refused rather than emitted. */
static bool reduces_over_cp(const Cg *g, char *why, size_t len)
{
    if (plan_cp(&g->l) <= 1 || program_uses(g, OP_REDUCE_GRADS)) return true;
    snprintf(why, len, "cp %d: the lowered Program reduces no gradients over dp x cp = %d ranks "
             "(the planner's reductions are over dp %d alone)", plan_cp(&g->l), grad_ranks(&g->l), g->l.dp);
    return false;
}

const char *cg_source_ext(CgTarget t) { return t == CG_TARGET_CUDA ? ".cu" : ".c"; }

bool cg_emit(const Plan *p, FILE *f, char *why, size_t len) { return cg_emit_named(p, NULL, f, why, len); }

bool cg_emit_named(const Plan *p, const char *name, FILE *f, char *why, size_t len)
{
    Cg g;
    memset(&g, 0, sizeof g);
    g.f = f;
    g.p = p;
    char file[sizeof g.name];
    if (name && *name) {   /* its last path component */
        const char *slash = strrchr(name, '/');
        snprintf(file, sizeof file, "%s", slash && slash[1] ? slash + 1 : name);
    } else {
        snprintf(file, sizeof file, "%s%s", p->model.name ? p->model.name : "program", cg_source_ext(CG_TARGET_CPU));
    }
    cg_comment_text(file, g.name, sizeof g.name);
    g.l = plan_layout_defaults(p);
    /* the one rule (planner/layout.c) that `check` and `search` ask too:
     * what they accept, this emits */
    if (!plan_layout_check(p, &g.l, why, len)) return false;
    if (!runtime_honours(p, &g.l, why, len)) return false;
    if (!plan_lower(p, &g.prog, why, len)) return false;
    if (!reduces_over_cp(&g, why, len)) { plan_program_free(&g.prog); return false; }
    const Model *m = &p->model;
    g.nv = g.l.pp * g.l.chunks;
    g.chunk = calloc((size_t)g.nv, sizeof *g.chunk);
    g.layer_vs = calloc((size_t)m->n_layers, sizeof(int));
    g.pfirst = calloc((size_t)m->n_layers, sizeof(int));
    g.stage_numel = calloc((size_t)g.l.pp, sizeof(uint64_t));
    bool ok = g.chunk && g.layer_vs && g.pfirst && g.stage_numel;
    if (!ok) snprintf(why, len, "out of memory");
    if (ok && !(ok = plan_split(m, g.l.pp, g.l.chunks, g.chunk)))
        snprintf(why, len, "%d blocks cannot be cut into %d pipeline chunks", m->n_blocks, g.nv);
    for (int k = 0; ok && k < g.nv; k++)
        for (int i = g.chunk[k].first; i < g.chunk[k].end; i++) g.layer_vs[i] = k;
    if (ok) {
        set_features(&g);
        g.n_params = emit_params(&g, false);
        g.param_ep = calloc((size_t)g.n_params + 1, sizeof(int));
        if (!g.param_ep) { snprintf(why, len, "out of memory"); ok = false; }
    }
    if (ok) {
        for (int i = 0; i < g.n_params; i++) g.param_ep[i] = -1;
        emit_header(&g);
        emit_constants(&g);
        emit_params(&g, true);
        section(&g, "types", NULL, NULL, 0);
        emit_layers(&g);
        section(&g, "runtime", NULL, NULL, 0);
        section(&g, "layers", NULL, NULL, 0);
        section(&g, "slots", NULL, NULL, 0);
        emit_chunks(&g);
        const char *keys[] = { "REDUCE", "OPT" };
        char opt[128];
        snprintf(opt, sizeof opt, "%s", g.l.zero && grad_ranks(&g.l) > 1 ? "ZeRO: AdamW on this rank's shard only"
                                                               : "AdamW on every parameter this rank holds");
        const char *vals[] = { grad_ranks(&g.l) > 1 ? reduce_text(g.l.zero, plan_cp(&g.l)) : "dp 1: no reduction", opt };
        section(&g, "dispatch", keys, vals, 2);
        emit_steps(&g);
        section(&g, "main", NULL, NULL, 0);
        if (g.bad[0]) { snprintf(why, len, "%s", g.bad); ok = false; }
        else if (ferror(f)) { snprintf(why, len, "write error"); ok = false; }
    }
    free(g.chunk);
    free(g.layer_vs);
    free(g.pfirst);
    free(g.param_ep);
    free(g.stage_numel);
    plan_program_free(&g.prog);
    return ok;
}
