/*
 * emit.c: Plan -> one C/CUDA program.
 *
 * The program is written in the order a reader needs it: what was planned
 * and predicted (header comment), the constants of the layout, the
 * parameter table, the layer table, the layers' forward and backward
 * passes (fixed text from codegen/program.in, where every TP collective
 * is spelled out), one forward and one backward function per model chunk
 * listing its layers, the op dispatcher, one step function per pipeline
 * stage that is that stage's op list from the Program, in order, and main.
 *
 * This file never decides a schedule: the step functions are a straight
 * transcription of plan_lower()'s ops. It adds three kinds of bookkeeping
 * lines the Program implies: REDUCE_DURING before the compute op a
 * REDUCE_GRADS drains (its `pair`), so the reduction starts bucket by
 * bucket inside that backward; RELEASE_PARAMS after the op a ZeRO-3 gather
 * feeds (its `pair`); and FREE_SLOT after the last op that touches a
 * (micro-batch, chunk), which is when its activations may be reused.
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
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/model.h"
#include "planner/layout.h"
#include "planner/program.h"

extern const char cg_program_template[];   /* codegen/program.in, built into $(BUILD)/gen */

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

typedef struct {
    FILE       *f;
    const Plan *p;
    Layout      l;
    PlanProgram prog;
    PlanChunk  *chunk;     /* [pp * chunks] */
    int         nv;        /* pp * chunks */
    int        *layer_vs;  /* [n_layers] virtual stage of each layer */
    int        *pfirst;    /* [n_layers] first parameter id of each layer */
    int         n_params;
    int         tie;       /* the tie column of the next parameter row */
    size_t      logical;   /* the logical-rows column of the next row (V of a padded
                              vocabulary; 0: every row is the model's) */
    uint64_t   *stage_numel; /* [pp] elements of each stage's flat buffer (one TP rank) */
    uint64_t    hash;      /* FNV-1a of the checkpointed tensors' names and shapes */
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

/* Write section `name` of the template, replacing @KEY@ from keys/vals. */
static void section(Cg *g, const char *name, const char *const *keys, const char *const *vals,
                    int nk)
{
    char mark[64];
    snprintf(mark, sizeof mark, "//@@ %s\n", name);
    const char *s = strstr(cg_program_template, mark);
    if (!s) return;
    s += strlen(mark);
    const char *e = strstr(s, "\n//@@ ");
    e = e ? e + 1 : s + strlen(s);
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

/* A float literal C and C++ accept: "0.02f", "1.0f", "1e-08f". */
static const char *flt(char *buf, double v)
{
    snprintf(buf, 40, "%.9g", v);
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    strcat(buf, "f");
    return buf;
}

static const char *kind_name(LayerKind k)
{
    static const char *n[] = { "embedding", "attention", "mlp", "norm", "lm_head" };  /* ORDER LayerKind */
    return (unsigned)k < 5 ? n[k] : "?";
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
    out(g, "/* %s.cu: generated by planc from %s. Do not edit: change the plan.\n *\n", name, file);
    out(g, " * model     %s: %d layers (%d blocks), dim %lld, vocab %lld, seq %lld, %llu parameters\n",
        name, m->n_layers, m->n_blocks, (long long)m->dim, (long long)m->vocab, (long long)m->seq,
        (unsigned long long)ev.params);
    out(g, " * layout    dp %d x tp %d x pp %d = %d ranks, ZeRO-%d, %s", l->dp, l->tp, l->pp,
        l->dp * l->tp * l->pp, l->zero, sched_title(l->schedule));
    if (l->schedule == SCHED_INTERLEAVED) out(g, " (%d chunks per stage)", l->chunks);
    out(g, ",\n *           %lld micro-batches of %lld sequences per DP rank, global batch %lld,\n",
        (long long)g->prog.n_micro, (long long)l->micro_batch, (long long)l->global_batch);
    out(g, " *           recompute %s, sequence parallel %s\n", plan_recompute_name(l->recompute),
        l->sequence_parallel == 1 ? "on" : "off");
    out(g, " * predicted by planc for cluster %s%s\n", cl, ev.valid ? ":" : ": (layout not valid there)");
    if (ev.valid) {
        for (int s = 0; s < ev.pp; s++)
            out(g, " *   stage %d: %.1f MiB per rank (params %.1f, grads %.1f, optimizer %.1f, "
                "activations %.1f)\n", s, mib(ev.stages[s].total_bytes),
                mib(ev.stages[s].params_bytes), mib(ev.stages[s].grads_bytes),
                mib(ev.stages[s].optimizer_bytes), mib(ev.stages[s].activations_bytes));
        out(g, " *   step %.3f ms, pipeline bubble %.1f %%, %.0f tokens/s\n", 1e3 * ev.step_time,
            100.0 * ev.bubble_fraction, ev.tokens_per_s);
    }
    plan_eval_free(&ev);
    out(g, " *\n"
           " * How to read it: the parameter table (every tensor, its global shape and\n"
           " * how TP splits it), the layer table, the layers' forward and backward\n"
           " * passes (every TP collective is a call you can see), one forward and one\n"
           " * backward per model chunk, then step_stageN: pipeline stage N's ops for\n"
           " * one training step, in the order planc scheduled them. Ranks are\n"
           " * rank = tp + TP*(dp + DP*pp); every rank of a stage runs its step.\n"
           " */\n#include \"planrt.h\"\n\n");
}

/* ---- constants and tables ----------------------------------------------------- */

static int local_heads(const Layer *L, int tp) { return (int)(L->heads / tp); }

static void emit_constants(Cg *g)
{
    const Plan *p = g->p;
    const Model *m = &p->model;
    const Layout *l = &g->l;
    int64_t max_width = 1, max_inner = 1, max_heads = 1;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        int64_t tp = l->tp;
        if (L->kind == LAYER_ATTENTION) {
            int64_t d = m->dim / L->heads, w = (L->heads + 2 * L->kv_heads) / tp * d;
            if (w > max_width) max_width = w;
            if (L->heads / tp * d > max_inner) max_inner = L->heads / tp * d;
            if (L->heads / tp > max_heads) max_heads = L->heads / tp;
        } else if (L->kind == LAYER_MLP) {
            int64_t f = L->hidden / tp, w = L->act == ACT_SWIGLU ? 2 * f : f;
            if (w > max_width) max_width = w;
            if (f > max_inner) max_inner = f;
        }
    }
    long long B = l->micro_batch, T = m->seq, sp = l->sequence_parallel == 1 ? l->tp : 1;
    out(g, "/* ---- the layout -------------------------------------------------------- */\n");
    out(g, "enum {\n");
    col(g, "    DP = %d, TP = %d, PP = %d,", "data-, tensor-, pipeline-parallel degrees", l->dp, l->tp, l->pp);
    col(g, "    CHUNKS = %d,", "model chunks per pipeline stage", l->chunks);
    col(g, "    ZERO = %d,", "ZeRO stage", l->zero);
    col(g, "    N_MICRO = %lld,", "micro-batches per step on each pipeline", (long long)g->prog.n_micro);
    col(g, "    N_LAYERS = %d, N_PARAMS = %d,", "layers of the model, tensors of PARAMS", m->n_layers, g->n_params);
    col(g, "    SP = %d,", "sequence parallel", l->sequence_parallel == 1);
    col(g, "    RECOMPUTE = %d,", "0 none, 1 selective (attention scores), 2 full", l->recompute);
    col(g, "    SPLIT_BWD = %d,", "zb-h1: backward split into input and weight halves",
        l->schedule == SCHED_ZB_H1);
    out(g, "};\n/* sizes as size_t, so products of them never overflow an int */\nstatic const size_t\n");
    col(g, "    B = %lld, T = %lld, N = %lld,", "sequences per micro-batch, tokens each, rows B*T", B, T, B * T);
    col(g, "    NL = %lld,", "rows of the residual stream here (SP: N/TP)", B * T / sp);
    col(g, "    C = %lld, V = %lld, VL = %lld,", "width, vocabulary, this rank's slice Vp/TP (Vp: V padded)",
        (long long)m->dim, (long long)m->vocab, (long long)(plan_vocab_padded(m, l->tp) / l->tp));
    col(g, "    GLOBAL_BATCH = %lld,", "sequences per step, all DP ranks together", (long long)l->global_batch);
    col(g, "    MAX_WIDTH = %lld, MAX_INNER = %lld, MAX_HEADS = %lld;", "widest layer, this rank",
        (long long)max_width, (long long)max_inner, (long long)max_heads);
    out(g, "\n");
    char data[1024], name[256];
    cg_string_literal(p->has_train && p->train.data ? p->train.data : "", data, sizeof data);
    cg_comment_text(m->name, name, sizeof name);
    char lit[300];
    cg_string_literal(name, lit, sizeof lit);
    const Train *t = &p->train;
    long steps = p->has_train ? (long)t->steps : 10;
    out(g, "static const long  STEPS = %ld;                 /* default of --steps */\n", steps);
    if (data[0]) out(g, "static const char *const DATA = \"%s\"; /* default of --data, relative to the working directory */\n", data);
    else out(g, "static const char *const DATA = 0;              /* the plan names no data: --data is required */\n");
    out(g, "static const uint64_t SEED = %lluULL;           /* initialisation and data order */\n",
        (unsigned long long)(p->has_train ? t->seed : 0));
    out(g, "static const char *const BANNER = \"%s: dp %d x tp %d x pp %d, ZeRO-%d, %s\\n\";\n", lit,
        l->dp, l->tp, l->pp, l->zero, sched_title(l->schedule));
    out(g, "static const char *const MODEL_NAME = \"%s\";   /* a resume checks the checkpoint's */\n", lit);
    out(g, "static const char *const PLAN_HASH = \"fnv1a64:%016llx\"; /* of the tensors' names and shapes, "
           "recorded in checkpoints */\n", (unsigned long long)g->hash);
    /* MFU's numerator and denominator (planner/model.h, planner/cost.c) */
    const Device *dev = &p->cluster.device;
    double peak = m->dtype == DTYPE_FP32 ? dev->flops_fp32 : dev->flops_16;
    out(g, "static const double MODEL_FLOPS = %.6g;  /* model FLOPs of one step, all ranks (Megatron counting) */\n",
        plan_model_flops_step(m, l->global_batch));
    char devname[128];
    cg_comment_text(dev->name ? dev->name : "device", devname, sizeof devname);
    out(g, "static const double PEAK_FLOPS = %.6g;   /* dense peak FLOP/s of one device, %s (%s): MFU's denominator */\n",
        peak, devname, m->dtype == DTYPE_FP32 ? "fp32" : "16-bit");
    double lr = p->has_train ? t->lr : 1e-3;
    out(g, "/* AdamW: lr, min_lr (lr/10), warm-up, cosine horizon (train.steps; main sets --steps), beta1, beta2,\n"
           " * eps, weight decay (matrices only), clip (global gradient norm; 0 off) */\n");
    char f[7][48];
    out(g, "static const prt_adamw_cfg ADAMW = { %s, %s, %ld, %ld, %s, %s, %s, %s, %s };\n\n",
        flt(f[0], lr), flt(f[1], lr / 10), (long)(p->has_train ? t->warmup : 0), steps,
        flt(f[2], p->has_train ? t->beta1 : 0.9), flt(f[3], p->has_train ? t->beta2 : 0.95),
        flt(f[4], p->has_train ? t->eps : 1e-8), flt(f[5], p->has_train ? t->weight_decay : 0.0),
        flt(f[6], p->has_train ? t->grad_clip : 1.0));
}

/* One row of the parameter table. */
static void param_row(Cg *g, int *id, const char *name, int layer, size_t rows, size_t cols,
                      const char *split, int nparts, const size_t *part, const char *init,
                      double std)
{
    /* under SP a norm's gain and bias see this rank's rows only */
    bool tp_sum = g->l.sequence_parallel == 1 && g->l.tp > 1 && strstr(name, "norm.") != NULL;
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
    int dp = g->l.dp;
    out(g, "/* Flat buffer of one rank (its TP slices, chunk by chunk, layer by layer):\n");
    for (int s = 0; s < g->l.pp; s++) {
        uint64_t n = g->stage_numel[s], q = n / (uint64_t)dp, rem = n % (uint64_t)dp;
        out(g, " *   stage %d: %llu elements", s, (unsigned long long)n);
        if (g->l.zero == 0 || dp == 1) { out(g, ", replicated over DP\n"); continue; }
        out(g, "; ZeRO-%d shard of DP rank r:", g->l.zero);
        for (int r = 0; r < dp && r < 4; r++) {
            uint64_t ur = (uint64_t)r, off = ur * q + (ur < rem ? ur : rem), cnt = q + (ur < rem);
            out(g, " %d [%llu, %llu)", r, (unsigned long long)off, (unsigned long long)(off + cnt));
        }
        out(g, "%s\n", dp > 4 ? " ..." : "");
    }
    out(g, " */\n\n");
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
           " * slices out in one flat buffer per stage; ZeRO-%d then %s. */\n",
           g->l.zero, g->l.zero == 0 ? "replicates everything over DP"
           : g->l.zero == 1 ? "shards the AdamW state over DP (prt_shard of the flat buffer)"
           : g->l.zero == 2 ? "shards the AdamW state and the gradients over DP"
           : "shards parameters, gradients and AdamW state over DP");
    out(g, "static const prt_param PARAMS[] = {\n"
           "    /* name, layer, vstage, rows, cols, TP split, row groups, init, std, decay, tp_sum, tie,\n"
           "     * logical rows (a padded vocabulary: rows Vp, the model's V; the padding rows\n"
           "     * after V stay 0 and are not checkpointed) */\n");
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        size_t one[3] = { 0, 0, 0 };
        g->pfirst[i] = id;
        bool ln = L->norm == NORM_LAYERNORM;
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
        case LAYER_ATTENTION: {
            size_t d = C / (size_t)L->heads, q = (size_t)L->heads * d, kv = (size_t)L->kv_heads * d;
            size_t parts[3] = { q, kv, kv };
            snprintf(nm, sizeof nm, "layers.%d.attn_norm.weight", i);
            param_row(g, &id, nm, i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ONES", 0);
            if (ln) { snprintf(nm, sizeof nm, "layers.%d.attn_norm.bias", i);
                      param_row(g, &id, nm, i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ZEROS", 0); }
            snprintf(nm, sizeof nm, "layers.%d.attn.qkv.weight", i);
            param_row(g, &id, nm, i, q + 2 * kv, C, "PRT_SPLIT_ROWS", 3, parts, "PRT_INIT_NORMAL", s);
            if (L->bias) { snprintf(nm, sizeof nm, "layers.%d.attn.qkv.bias", i);
                           param_row(g, &id, nm, i, q + 2 * kv, 1, "PRT_SPLIT_ROWS", 3, parts, "PRT_INIT_ZEROS", 0); }
            snprintf(nm, sizeof nm, "layers.%d.attn.out.weight", i);
            param_row(g, &id, nm, i, C, q, "PRT_SPLIT_COLS", 0, one, "PRT_INIT_NORMAL", sr);
            if (L->bias) { snprintf(nm, sizeof nm, "layers.%d.attn.out.bias", i);
                           param_row(g, &id, nm, i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ZEROS", 0); }
            break;
        }
        case LAYER_MLP: {
            size_t f = (size_t)L->hidden, fu = L->act == ACT_SWIGLU ? 2 * f : f;
            size_t parts[3] = { f, f, 0 };
            int np = L->act == ACT_SWIGLU ? 2 : 1;
            snprintf(nm, sizeof nm, "layers.%d.mlp_norm.weight", i);
            param_row(g, &id, nm, i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ONES", 0);
            if (ln) { snprintf(nm, sizeof nm, "layers.%d.mlp_norm.bias", i);
                      param_row(g, &id, nm, i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ZEROS", 0); }
            snprintf(nm, sizeof nm, "layers.%d.mlp.up.weight", i);
            param_row(g, &id, nm, i, fu, C, "PRT_SPLIT_ROWS", np, parts, "PRT_INIT_NORMAL", s);
            if (L->bias) { snprintf(nm, sizeof nm, "layers.%d.mlp.up.bias", i);
                           param_row(g, &id, nm, i, fu, 1, "PRT_SPLIT_ROWS", np, parts, "PRT_INIT_ZEROS", 0); }
            snprintf(nm, sizeof nm, "layers.%d.mlp.down.weight", i);
            param_row(g, &id, nm, i, C, f, "PRT_SPLIT_COLS", 0, one, "PRT_INIT_NORMAL", sr);
            if (L->bias) { snprintf(nm, sizeof nm, "layers.%d.mlp.down.bias", i);
                           param_row(g, &id, nm, i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ZEROS", 0); }
            break;
        }
        case LAYER_NORM:
            param_row(g, &id, "norm.weight", i, C, 1, "PRT_REPLICATED", 0, one, "PRT_INIT_ONES", 0);
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
    emit_shards(g);
    g->f = keep;
    return id;
}

/* The layer table: parameter ids by role and this rank's dimensions. */
static void emit_layers(Cg *g)
{
    const Model *m = &g->p->model;
    int tp = g->l.tp, wte = -1;
    out(g, "static const LayerSpec LAYERS[N_LAYERS] = {\n"
           "    /* kind, w1, b1, w2, b2, ln_w, ln_b, rms, h, hkv, d, f, act, rope */\n");
    bool rope = false;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *L = &m->layers[i];
        int p = g->pfirst[i], w1 = -1, b1 = -1, w2 = -1, b2 = -1, lw = -1, lb = -1, h = 0, hkv = 0,
            d = 0, f = 0, act = 0;
        bool ln = L->norm == NORM_LAYERNORM;
        switch (L->kind) {
        case LAYER_EMBEDDING:
            w1 = wte = p;
            if (L->position == POS_LEARNED) w2 = p + 1;
            rope = L->position == POS_ROPE;
            break;
        case LAYER_ATTENTION: case LAYER_MLP:
            lw = p++;
            if (ln) lb = p++;
            w1 = p++;
            if (L->bias) b1 = p++;
            w2 = p++;
            if (L->bias) b2 = p++;
            if (L->kind == LAYER_ATTENTION) {
                h = local_heads(L, tp);
                hkv = (int)(L->kv_heads / tp);
                d = (int)(m->dim / L->heads);
            } else {
                f = (int)(L->hidden / tp);
                act = L->act == ACT_SWIGLU ? 2 : L->act == ACT_RELU ? 1 : 0;
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
        static const char *kinds[] = { "EMBEDDING", "ATTENTION", "MLP", "NORM", "LM_HEAD" }; /* ORDER LayerKind */
        out(g, "    { %-9s, %2d, %2d, %2d, %2d, %2d, %2d, %d, %d, %d, %d, %d, %d, %d }, /* layer %d: %s */\n",
            kinds[L->kind], w1, b1, w2, b2, lw, lb, L->norm == NORM_RMSNORM ? 1 : 0, h, hkv, d, f,
            act, L->kind == LAYER_ATTENTION && rope ? 1 : 0, i, kind_name(L->kind));
    }
    out(g, "};\n\n/* The layers [first, end) of each virtual stage (chunk * PP + stage). */\n");
    out(g, "static const int VSTAGE_FIRST[%d] = {", g->nv);
    for (int k = 0; k < g->nv; k++) out(g, "%s%d", k ? ", " : " ", g->chunk[k].first);
    out(g, " };\nstatic const int VSTAGE_END[%d] = {", g->nv);
    for (int k = 0; k < g->nv; k++) out(g, "%s%d", k ? ", " : " ", g->chunk[k].end);
    out(g, " };\n\n");
}

/* ---- chunks ------------------------------------------------------------------ */

static void emit_chunks(Cg *g)
{
    const Model *m = &g->p->model;
    static const char *fn[] = { "embedding", "attention", "mlp", "final_norm", "lm_head" }; /* ORDER LayerKind */
    out(g, "/* ---- model chunks ------------------------------------------------------------\n"
           " * Virtual stage k = chunk * PP + stage runs layers [VSTAGE_FIRST[k],\n"
           " * VSTAGE_END[k]). Each layer's output is the next one's input. */\n");
    for (int k = 0; k < g->nv; k++) {
        int a = g->chunk[k].first, e = g->chunk[k].end;
        out(g, "\n/* virtual stage %d (stage %d, chunk %d): layers %d-%d */\n", k, k % g->l.pp,
            k / g->l.pp, a, e - 1);
        out(g, "static void fwd_v%d(prt_slot *s, LayerActs *a)\n{\n", k);
        for (int i = a; i < e; i++) {
            char y[32];
            if (i + 1 < e) snprintf(y, sizeof y, "a[%d].x", i + 1 - a);
            else snprintf(y, sizeof y, m->layers[i].kind == LAYER_LM_HEAD ? "NULL" : "s->y");
            out(g, "    %s_fwd(&LAYERS[%d], &a[%d], %s);\n", fn[m->layers[i].kind], i, i - a, y);
        }
        if (m->layers[e - 1].kind == LAYER_LM_HEAD) out(g, "    (void)s;\n");
        out(g, "}\n\nstatic void bwd_v%d(prt_slot *s, LayerActs *a, int part)\n{\n", k);
        for (int i = e - 1; i >= a; i--) {
            out(g, "    %s_bwd(&LAYERS[%d], &a[%d], s->d, part);\n", fn[m->layers[i].kind], i, i - a);
            out(g, "    grads_done(%d, part);\n", i);
        }
        out(g, "}\n");
    }
    out(g, "\nstatic void chunk_fwd(int chunk, prt_slot *s)\n{\n"
           "    LayerActs *a = ((SlotActs *)s->acts)->a;\n"
           "    switch (chunk * PP + R.c->coord.pp) {\n");
    for (int k = 0; k < g->nv; k++) out(g, "    case %d: fwd_v%d(s, a); break;\n", k, k);
    out(g, "    }\n}\n\nstatic void chunk_bwd(int chunk, prt_slot *s, int part)\n{\n"
           "    LayerActs *a = ((SlotActs *)s->acts)->a;\n"
           "    switch (chunk * PP + R.c->coord.pp) {\n");
    for (int k = 0; k < g->nv; k++) out(g, "    case %d: bwd_v%d(s, a, part); break;\n", k, k);
    out(g, "    }\n}\n\n");
}

/* ---- stage step functions ---------------------------------------------------- */

static bool uses_slot(PlanOpKind k)
{
    return k == OP_FWD || k == OP_BWD || k == OP_BWD_INPUT || k == OP_BWD_WEIGHT ||
           k == OP_SEND_ACT || k == OP_RECV_ACT || k == OP_SEND_GRAD || k == OP_RECV_GRAD;
}

static const char *reduce_text(int zero)
{
    switch (zero) {
    case 0: return "DP: all-reduce (sum) the chunk's gradients, layer by layer, async";
    case 1: return "ZeRO-1: reduce-scatter the chunk's gradients over DP into this rank's shard, async";
    case 2: return "ZeRO-2: reduce-scatter this micro-batch's gradients into the shard, layer by layer, async; the full buffer is freed";
    default: return "ZeRO-3: reduce-scatter this micro-batch's gradients into the shard, layer by layer, async; the full buffer is freed";
    }
}

static void op_comment(Cg *g, const PlanOp *o, char *buf, size_t n)
{
    switch (o->kind) {
    case OP_FWD: snprintf(buf, n, "forward   mb %d, chunk %d (layers %d-%d)", o->mb, o->chunk,
                          o->first_layer, o->end_layer - 1); break;
    case OP_BWD: snprintf(buf, n, "backward  mb %d, chunk %d", o->mb, o->chunk); break;
    case OP_BWD_INPUT: snprintf(buf, n, "backward  mb %d, chunk %d: input gradients (B)", o->mb, o->chunk); break;
    case OP_BWD_WEIGHT: snprintf(buf, n, "backward  mb %d, chunk %d: weight gradients (W)", o->mb, o->chunk); break;
    case OP_SEND_ACT: snprintf(buf, n, "activation of mb %d -> stage %d", o->mb, o->peer); break;
    case OP_RECV_ACT: snprintf(buf, n, "activation of mb %d <- stage %d", o->mb, o->peer); break;
    case OP_SEND_GRAD: snprintf(buf, n, "input gradient of mb %d -> stage %d", o->mb, o->peer); break;
    case OP_RECV_GRAD: snprintf(buf, n, "output gradient of mb %d <- stage %d", o->mb, o->peer); break;
    case OP_GATHER_PARAMS: snprintf(buf, n, "ZeRO-3: all-gather chunk %d's parameters over DP (%d layers)",
                                    o->chunk, o->buckets); break;
    case OP_REDUCE_GRADS: snprintf(buf, n, "%s", g->l.dp > 1 ? reduce_text(g->l.zero) : "dp 1: nothing to reduce"); break;
    case OP_OPT_STEP: snprintf(buf, n, "clip, AdamW on %s", g->l.zero ? "this rank's shard" : "all of this rank's parameters"); break;
    case OP_SYNC_PARAMS: snprintf(buf, n, "ZeRO-%d: all-gather the updated shards over DP", g->l.zero); break;
    case OP_SP_NORM_REDUCE: snprintf(buf, n, "sequence parallel: sum the norm-weight gradients over TP"); break;
    case OP_EMBED_REDUCE: snprintf(buf, n, "tied embedding: sum the word-embedding gradient of the first and last stage"); break;
    case OP_NORM_REDUCE: snprintf(buf, n, "global gradient norm: sum the squares over all ranks"); break;
    }
}

/* The generated OpKind names are the planner's own (ORDER PlanOpKind). */
static const char *op_enum(PlanOpKind k) { return plan_op_name(k); }

static void emit_stage(Cg *g, int s)
{
    const PlanStageProgram *sp = &g->prog.stages[s];
    int warm = 0, fwd = 0, bwd = 0;
    bool seen_b = false;
    for (int i = 0; i < sp->n_ops; i++) {
        PlanOpKind k = sp->ops[i].kind;
        if (k == OP_FWD) { fwd++; if (!seen_b) warm++; }
        if (k == OP_BWD || k == OP_BWD_INPUT) { bwd++; seen_b = true; }
    }
    out(g, "/* Stage %d of %d under %s: %d forwards and %d backwards of (micro-batch,\n"
           " * chunk), %d forwards before the first backward. %d ops. */\n",
        s, g->l.pp, sched_title(g->l.schedule), fwd, bwd, warm, sp->n_ops);
    out(g, "static void step_stage%d(void)\n{\n", s);
    for (int i = 0; i < sp->n_ops; i++) {
        const PlanOp *o = &sp->ops[i];
        char c[256], call[96];
        for (int j = i + 1; j < sp->n_ops && g->l.dp > 1; j++)
            if (sp->ops[j].kind == OP_REDUCE_GRADS && sp->ops[j].pair == i) {
                snprintf(call, sizeof call, "op(REDUCE_DURING, %d, %d, -1);", o->mb, o->chunk);
                out(g, "    %-30s /* its reduction below starts layer by layer inside the next op */\n", call);
            }
        op_comment(g, o, c, sizeof c);
        snprintf(call, sizeof call, "op(%s, %d, %d, %d);", op_enum(o->kind), o->mb, o->chunk, o->peer);
        out(g, "    %-30s /* %s */\n", call, c);
        for (int j = 0; j < sp->n_ops; j++)
            if (sp->ops[j].kind == OP_GATHER_PARAMS && sp->ops[j].pair == i) {
                snprintf(call, sizeof call, "op(RELEASE_PARAMS, %d, %d, -1);", o->mb, o->chunk);
                out(g, "    %-30s /* ZeRO-3: free chunk %d's gathered parameters */\n", call, o->chunk);
            }
        if (!uses_slot(o->kind)) continue;
        bool last = true;
        for (int j = i + 1; j < sp->n_ops && last; j++)
            if (uses_slot(sp->ops[j].kind) && sp->ops[j].mb == o->mb && sp->ops[j].chunk == o->chunk)
                last = false;
        if (last) {
            snprintf(call, sizeof call, "op(FREE_SLOT, %d, %d, -1);", o->mb, o->chunk);
            out(g, "    %-30s /* mb %d, chunk %d: activations may be reused */\n", call, o->mb, o->chunk);
        }
    }
    out(g, "}\n\n");
}

static void emit_steps(Cg *g)
{
    out(g, "/* ---- one training step per pipeline stage ----------------------------------\n"
           " * Each is the Program planc scheduled for that stage (plan_lower), op by op;\n"
           " * `planc trace` draws the same list. op(kind, micro-batch, chunk, peer stage). */\n\n");
    for (int s = 0; s < g->l.pp; s++) emit_stage(g, s);
    out(g, "static void train_step(void)\n{\n    switch (R.c->coord.pp) {\n");
    for (int s = 0; s < g->l.pp; s++) out(g, "    case %d: step_stage%d(); break;\n", s, s);
    out(g, "    }\n}\n\n");
}

/* ---- driver ------------------------------------------------------------------- */

bool cg_emit(const Plan *p, FILE *f, char *why, size_t len)
{
    Cg g;
    memset(&g, 0, sizeof g);
    g.f = f;
    g.p = p;
    g.l = plan_layout_defaults(p);
    /* the one rule (planner/layout.c) that `check` and `search` ask too:
     * what they accept, this emits */
    if (!plan_layout_check(p, &g.l, why, len)) return false;
    if (!plan_lower(p, &g.prog, why, len)) return false;
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
        g.n_params = emit_params(&g, false);
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
        snprintf(opt, sizeof opt, "%s", g.l.zero && g.l.dp > 1 ? "ZeRO: AdamW on this rank's shard only"
                                                               : "AdamW on every parameter this rank holds");
        const char *vals[] = { g.l.dp > 1 ? reduce_text(g.l.zero) : "dp 1: no reduction", opt };
        section(&g, "dispatch", keys, vals, 2);
        out(&g, "\n");
        emit_steps(&g);
        section(&g, "main", NULL, NULL, 0);
        if (ferror(f)) { snprintf(why, len, "write error"); ok = false; }
    }
    free(g.chunk);
    free(g.layer_vs);
    free(g.pfirst);
    free(g.stage_numel);
    plan_program_free(&g.prog);
    return ok;
}
