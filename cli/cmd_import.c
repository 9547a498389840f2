/*
 * cmd_import.c: `planc import CONFIG.json [-o OUT.plan] [--name NAME]`:
 * a Hugging Face `config.json` -> a `model NAME { ... }` block.
 *
 * The config is read with Jansson (strict RFC 8259, duplicate keys
 * rejected); a malformed or truncated file, a key of the wrong type or a
 * missing key is exit 2 with a GCC-style diagnostic that names the key and
 * what was expected. Each architecture family has its own small function
 * that reads its key names (GPT-2 spells the width `n_embd`, the others
 * `hidden_size`) into one ImportModel; one writer turns that into .plan
 * text, which is parsed back and printed by dsl_format, so the output is in
 * canonical form by construction and is known to parse.
 *
 * Nothing that changes a shape or the compute is left out (issue 29):
 * every top-level key is read into the model (the norms' epsilon as
 * norm_eps, rope_scaling as the embedding's rope_scaling, the dropout
 * keys as the model's dropout), or is on a list of keys that change
 * nothing (token ids, hub bookkeeping: listed in one note), or is refused,
 * exit 2, naming it — an unknown key too, since it may change the model.
 * `architectures` must be the model_type's causal LM; torch_dtype is how
 * the checkpoint is stored, not the training dtype (bf16, said in a note).
 * It never guesses a shape: a family it does not know is exit 2, and a
 * key the language cannot write yet is refused naming it; DeepSeek-V2/V3's
 * attention is imported as `kind mla`, and the first key of their mixture
 * (or of their YaRN, or V3's multi-token prediction) that planc cannot
 * express is refused naming it. A Mixtral becomes `moe { }` blocks
 * (issue 17's mixtures of experts); Qwen2-MoE and Qwen3-MoE too, with
 * their gate (norm_topk_prob), experts of moe_intermediate_size, Qwen2-
 * MoE's gated shared expert, and their dense blocks (mlp_only_layers,
 * decoder_sparse_step) as repeats of their own.
 *
 * Sources of the key names and defaults: the transformers configuration
 * classes (LlamaConfig, MistralConfig, Qwen2Config, GemmaConfig,
 * GPT2Config) and the published config.json files of the models.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/commands.h"
#include "planner/model.h"

static const char IMPORT_HELP[] =
    "usage: planc import CONFIG.json [-o OUT.plan] [--name NAME]\n"
    "\n"
    "Read a Hugging Face config.json and print a `model NAME { ... }` block in\n"
    "canonical form (or write it to OUT.plan). Architectures (model_type):\n"
    "llama (Llama 1-3.x, rope_scaling included), mistral, mixtral (its sparse\n"
    "MoE as `moe { }`), qwen2, qwen3 (qk_norm rmsnorm), qwen2_moe, qwen3_moe\n"
    "(their dense blocks as repeats of their own), olmo2 (norm_position\n"
    "post, qk_norm rmsnorm_projection), gemma, gemma2 (softcap, sliding_window\n"
    "W every 2, norm_position sandwich), gemma3_text (rope_local_theta; counted,\n"
    "not emitted: its q/k norm by 1 + w), gpt2, phi3,\n"
    "deepseek_v2 and deepseek_v3 (multi-head latent attention as `kind mla`;\n"
    "their mixture where `moe { }` expresses it, else refused naming the key).\n"
    "seq is the config's max_position_embeddings (n_positions for GPT-2):\n"
    "lower it to the length you train at. dtype is bf16 (torch_dtype is the\n"
    "checkpoint's storage).\n"
    "Every key is imported exactly, or listed on stderr as changing nothing\n"
    "(token ids, ...), or refused naming it: an import never drops a key that\n"
    "could change a shape or the compute.\n"
    "\n"
    "  -o OUT.plan   write there instead of stdout\n"
    "  --name NAME   the model's name (default: the config's _name_or_path,\n"
    "                else its folder, else model_type)\n"
    "\n"
    "exit status: 0, or 2 for a malformed config, a missing key or one of the\n"
    "wrong type, a key planc cannot express, or an architecture it cannot.\n";

/* Where the config came from and what has been read of it. */
typedef struct {
    DslDiag         *d;
    const DslSource *src;
    json_t          *root;          /* the top-level object */
    const char      *used[64];      /* top-level keys read (for the left-out note) */
    int              n_used;
    bool             failed;        /* a key error was reported */
} HfConfig;

/* The model as the import understood it; one writer prints it. */
typedef enum { IMP_BIAS_NONE, IMP_BIAS_ALL, IMP_BIAS_QKV } ImportBias;

typedef struct {
    const char *family;             /* model_type */
    int64_t     vocab, seq, dim, layers, heads, kv_heads, head_dim, hidden;
    const char *dtype;              /* fp32 | bf16 | fp16 */
    const char *position;           /* learned | rope */
    double      rope_theta;         /* 0: the language's default */
    double      rope_local_theta;   /* Gemma 3's local blocks' base (rope_local_theta); 0: none */
    const char *norm;               /* layernorm | rmsnorm */
    const char *act;                /* gelu | swiglu | geglu */
    ImportBias  attn_bias;
    bool        mlp_bias;
    bool        tied;
    int64_t     window;             /* sliding window in tokens, 0: none */
    int64_t     window_from;        /* first layer that slides (Qwen2's max_window_layers) */
    int64_t     experts, top_k;     /* Mixtral: routed experts per MoE layer and per token; 0: dense */
    double      aux_loss;           /* Mixtral's router_aux_loss_coef */
    double      norm_eps;           /* rms_norm_eps / layer_norm_epsilon; 0: the language's default */
    double      dropout;            /* the one dropout probability of the model, 0: none */
    RopeScaling rope_scaling;       /* kind NONE: none */
    const char *qk_norm;            /* NULL, or the qk_norm word: rmsnorm (Qwen3: each query and key
                                       head), rmsnorm_projection (OLMo-2: the whole projections) */
    const char *norm_position;      /* NULL (pre), or post (OLMo-2) */
    bool        mla;                /* DeepSeek-V2/V3: multi-head latent attention (kind mla) */
    int64_t     q_lora, kv_lora, qk_rope, qk_nope, v_head;   /* its widths; q_lora 0: no query latent */
    int64_t     moe_hidden;         /* the experts' width when it is not the dense MLP's; 0: hidden
                                       (Qwen-MoE's and DeepSeek's moe_intermediate_size) */
    bool        topk_raw;           /* norm_topk_prob false: the top-k weights not renormalised */
    bool        sigmoid;            /* DeepSeek-V3's scoring_func sigmoid (`score sigmoid`) */
    int64_t     shared_hidden;      /* Qwen2-MoE's shared expert's width, 0: no gated shared expert */
    int64_t     sparse_step;        /* Qwen-MoE: block i is a mixture when (i + 1) % step == 0 ... */
    const json_t *mlp_only;         /* ... and i is not in mlp_only_layers (an array; NULL: none) */
    int64_t     shared;             /* shared experts of the mixture (moe_hidden each) */
    int64_t     route_groups;       /* DeepSeek's n_group when it narrows the choice (topk_group <
                                       n_group); 0: every expert competes */
    int64_t     route_top_groups;   /* its topk_group */
    bool        group_max;          /* groups ranked by their largest score (V2's group_limited_greedy) */
    bool        expert_bias;        /* V3's noaux_tc: e_score_correction_bias in the choice */
    double      routed_scale;       /* routed_scaling_factor where DeepSeek's gate applies it; 0: none */
    int64_t     dense_first;        /* blocks with a dense MLP before the first mixture (DeepSeek's
                                       first_k_dense_replace); the rest are mixtures */
    bool        gemma;              /* Gemma's (1 + w) RMSNorm and sqrt(hidden) embedding scale
                                       (norm_plus_one, embedding scale sqrt_dim; issue 28) */
    int64_t     window_every;       /* Gemma 2/3: block i global when (i + 1) % K == 0, the others
                                       slide (`sliding_window W every K`); 0: every block alike */
    double      attn_softcap;       /* Gemma 2's attn_logit_softcapping; 0: none */
    double      logit_softcap;      /* Gemma 2's final_logit_softcapping; 0: none */
    double      query_scalar;       /* Gemma 2/3's query_pre_attn_scalar; 0: head_dim's scale */
    const char *needs;              /* what the language cannot write yet (Gemma 2/3's
                                       sandwich norms): refused naming it once all is read */
} ImportModel;

/* ---- locating and reading keys ------------------------------------------ */

/* The location of top-level key `key` in the source: a scan that skips
 * strings and counts nesting, so a nested key of the same name (inside
 * rope_scaling) is not taken. Jansson keeps no positions of values. */
static DslLoc key_loc(const HfConfig *c, const char *key)
{
    DslLoc loc = { c->src, 1, 1, 1, 1 };
    const char *s = c->src->text, *e = s + c->src->len;
    size_t klen = strlen(key);
    int depth = 0, line = 1, col = 1;
    for (const char *p = s; p < e; p++, col++) {
        if (*p == '\n') { line++; col = 0; continue; }
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') depth--;
        else if (*p == '"') {
            const char *q = p + 1;
            while (q < e && *q != '"') q += (*q == '\\') ? 2 : 1;
            if (depth == 1 && (size_t)(q - p - 1) == klen && memcmp(p + 1, key, klen) == 0) {
                const char *r = q + 1;
                while (r < e && (*r == ' ' || *r == '\t' || *r == '\r' || *r == '\n')) r++;
                if (r < e && *r == ':') {
                    loc.line = loc.end_line = line;
                    loc.col = col;
                    loc.end_col = col + (int)klen + 1;
                    return loc;
                }
            }
            if (q >= e) break;
            col += (int)(q - p);
            p = q;
        }
    }
    return loc;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:  return "an object";
    case JSON_ARRAY:   return "an array";
    case JSON_STRING:  return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL:    return "a number with a fraction";
    case JSON_TRUE:
    case JSON_FALSE:   return "a boolean";
    case JSON_NULL:    return "null";
    }
    return "a value";
}

/* The value of top-level key `key` (recorded as read), or NULL. */
static json_t *hf_get(HfConfig *c, const char *key)
{
    if (c->n_used < (int)(sizeof c->used / sizeof c->used[0])) c->used[c->n_used++] = key;
    return json_object_get(c->root, key);
}

static void wrong_type(HfConfig *c, const char *key, const char *want, const json_t *v)
{
    if (json_is_number(v))   /* the right kind, a value out of range: say the value */
        dsl_error(c->d, key_loc(c, key), "'%s': expected %s, got %.17g", key, want, json_number_value(v));
    else
        dsl_error(c->d, key_loc(c, key), "'%s': expected %s, got %s", key, want, json_kind(v));
    c->failed = true;
}

static void missing(HfConfig *c, const char *key, const char *want)
{
    DslLoc loc = { c->src, 1, 1, 1, 1 };
    dsl_error(c->d, loc, "missing key '%s' (%s)", key, want);
    c->failed = true;
}

/* A positive integer key. def != 0: its value when absent or null
 * (absent keys of a transformers config take the class default; a
 * negative def marks an optional key); def == 0: required. */
static int64_t hf_int(HfConfig *c, const char *key, int64_t def, const char *what)
{
    json_t *v = hf_get(c, key);
    char want[160];
    snprintf(want, sizeof want, "a positive integer: %s", what);
    if (!v || json_is_null(v)) {
        if (def != 0) return def;
        if (!v) missing(c, key, want);
        else wrong_type(c, key, want, v);
        return 0;
    }
    if (!json_is_integer(v)) {
        wrong_type(c, key, want, v);
        return 0;
    }
    json_int_t x = json_integer_value(v);
    if (x <= 0) {
        dsl_error(c->d, key_loc(c, key), "'%s': expected %s, got %lld", key, want, (long long)x);
        c->failed = true;
        return 0;
    }
    return (int64_t)x;
}

/* A boolean key with its default when absent. */
static bool hf_bool(HfConfig *c, const char *key, bool def)
{
    json_t *v = hf_get(c, key);
    if (!v || json_is_null(v)) return def;
    if (!json_is_boolean(v)) {
        wrong_type(c, key, "true or false", v);
        return def;
    }
    return json_is_true(v);
}

/* A positive number key (integer or not), def when absent. */
static double hf_num(HfConfig *c, const char *key, double def, const char *what)
{
    json_t *v = hf_get(c, key);
    if (!v || json_is_null(v)) return def;
    char want[160];
    snprintf(want, sizeof want, "a positive number: %s", what);
    if (!json_is_number(v) || !(json_number_value(v) > 0)) {
        wrong_type(c, key, want, v);
        return def;
    }
    return json_number_value(v);
}

/* A number key that may be 0 (a coefficient that switches its term off),
 * def when absent or null. */
static double hf_num0(HfConfig *c, const char *key, double def, const char *what)
{
    json_t *v = hf_get(c, key);
    if (!v || json_is_null(v)) return def;
    char want[160];
    snprintf(want, sizeof want, "a number >= 0: %s", what);
    if (!json_is_number(v) || !(json_number_value(v) >= 0)) {
        wrong_type(c, key, want, v);
        return def;
    }
    return json_number_value(v);
}

/* A string key, def when absent (NULL def: required). */
static const char *hf_str(HfConfig *c, const char *key, const char *def, const char *what)
{
    json_t *v = hf_get(c, key);
    if (!v || json_is_null(v)) {
        if (def) return def;
        missing(c, key, what);
        return NULL;
    }
    if (!json_is_string(v)) {
        wrong_type(c, key, what, v);
        return def;
    }
    return json_string_value(v);
}

/* The value of `key` is one of the names in `ok` (NULL-terminated). */
static bool hf_one_of(HfConfig *c, const char *key, const char *val, const char *const *ok, const char *want)
{
    for (int i = 0; ok[i]; i++)
        if (strcmp(val, ok[i]) == 0) return true;
    dsl_error(c->d, key_loc(c, key), "'%s': expected %s, got \"%s\"", key, want, val);
    c->failed = true;
    return false;
}

/* The plan's compute dtype: bf16 always (mixed precision with fp32 master
 * weights, what these models are trained in). torch_dtype is the dtype the
 * checkpoint is stored in — a float32 upload is not a float32 training run
 * — so it is checked and said as a note, never taken as the training dtype. */
static const char *hf_dtype(HfConfig *c)
{
    const char *t = hf_str(c, "torch_dtype", "", "a torch dtype name such as \"bfloat16\"");
    DslLoc none = { 0 };
    if (!t) return "bf16";
    if (!*t) {
        dsl_note(c->d, none, "import: dtype bf16 (mixed precision with fp32 master weights); the config names no "
                 "torch_dtype");
        return "bf16";
    }
    static const char *const names[] = { "float32", "bfloat16", "float16", NULL };
    if (hf_one_of(c, "torch_dtype", t, names, "\"float32\", \"bfloat16\" or \"float16\"") && strcmp(t, "bfloat16"))
        dsl_note(c->d, key_loc(c, "torch_dtype"), "import: torch_dtype %s is how the checkpoint is stored; the plan "
                 "trains in bf16 (mixed precision with fp32 master weights): write `dtype fp32` to train in fp32", t);
    return "bf16";
}

/* The norms' epsilon from `key` (rms_norm_eps, layer_norm_epsilon): it
 * changes every norm's output, so it is imported, not left out. */
static void hf_norm_eps(HfConfig *c, ImportModel *m, const char *key, double def)
{
    json_t *v = hf_get(c, key);
    m->norm_eps = def;
    if (!v || json_is_null(v)) return;
    if (!json_is_number(v) || !(json_number_value(v) > 0) || !(json_number_value(v) < 1)) {
        wrong_type(c, key, "a number between 0 and 1: the norms' epsilon", v);
        return;
    }
    m->norm_eps = json_number_value(v);
}

/* A dropout probability key: 0 <= p < 1. */
static double hf_prob(HfConfig *c, const char *key, double def)
{
    json_t *v = hf_get(c, key);
    if (!v || json_is_null(v)) return def;
    if (!json_is_number(v) || json_number_value(v) < 0 || !(json_number_value(v) < 1)) {
        wrong_type(c, key, "a probability 0 <= p < 1", v);
        return 0;
    }
    return json_number_value(v);
}

/* The model's one dropout from the config's dropout keys: planc drops with
 * one probability after the attention probabilities, on every residual
 * branch and on the embedding (GPT-2's attn_pdrop, resid_pdrop and
 * embd_pdrop alike; Megatron's --attention-dropout and --hidden-dropout
 * alike), so the keys must agree (an absent key is the config class's
 * default, def); keys that differ are refused, naming them. */
static void hf_dropout(HfConfig *c, ImportModel *m, const char *const *keys, int n, double def)
{
    const char *first = NULL;
    for (int i = 0; i < n; i++) {
        double p = hf_prob(c, keys[i], def);
        if (!first) {
            first = keys[i];
            m->dropout = p;
        } else if (p != m->dropout) {
            dsl_error(c->d, key_loc(c, keys[i]), "'%s' %g differs from '%s' %g: planc's model has one dropout "
                      "probability for the attention probabilities, the residual branches and the embedding",
                      keys[i], p, first, m->dropout);
            c->failed = true;
            return;
        }
    }
}

/* A number inside rope_scaling. */
static bool rs_num(HfConfig *c, json_t *rs, const char *key, double lo, double *out, bool required)
{
    json_t *v = json_object_get(rs, key);
    if (!v || json_is_null(v)) {
        if (required) {
            dsl_error(c->d, key_loc(c, "rope_scaling"), "rope_scaling: missing '%s'", key);
            c->failed = true;
        }
        return false;
    }
    if (!json_is_number(v) || !(json_number_value(v) >= lo)) {
        dsl_error(c->d, key_loc(c, "rope_scaling"), "rope_scaling '%s': expected a number >= %g, got %s", key, lo,
                  json_kind(v));
        c->failed = true;
        return false;
    }
    *out = json_number_value(v);
    return true;
}

/* rope_scaling (transformers' modeling_rope_utils.py, ROPE_INIT_FUNCTIONS):
 * null or rope_type "default" is none; "linear", "llama3" and "yarn" are
 * imported with their keys; any other type (dynamic, longrope, mrope) and
 * any key the type does not have, or one of YaRN's attention-scale
 * overrides, is refused: each changes the rotation. */
static void hf_rope_scaling(HfConfig *c, ImportModel *m)
{
    m->rope_scaling = (RopeScaling){ .kind = ROPE_SCALING_NONE, .factor = 1 };
    json_t *rs = hf_get(c, "rope_scaling");
    if (!rs || json_is_null(rs)) return;
    if (!json_is_object(rs)) {
        wrong_type(c, "rope_scaling", "an object or null", rs);
        return;
    }
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");   /* the older spelling */
    const char *type = t && json_is_string(t) ? json_string_value(t) : NULL;
    if (!type) {
        dsl_error(c->d, key_loc(c, "rope_scaling"), "rope_scaling: expected a string 'rope_type'");
        c->failed = true;
        return;
    }
    static const char *const TYPES[] = { "default", "linear", "llama3", "yarn" };   /* ORDER RopeScalingKind */
    static const char *const KEYS[][6] = {
        { NULL },
        { "factor", NULL },
        { "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", NULL },
        { "factor", "original_max_position_embeddings", "beta_fast", "beta_slow", NULL },
    };
    int k = -1;
    for (int i = 0; i < (int)(sizeof TYPES / sizeof *TYPES); i++)
        if (strcmp(type, TYPES[i]) == 0) k = i;
    if (k < 0) {
        dsl_error(c->d, key_loc(c, "rope_scaling"), "rope_scaling type \"%s\" changes the rotation in a way planc "
                  "cannot express: expected default, linear, llama3 or yarn", type);
        c->failed = true;
        return;
    }
    const char *key;
    json_t *v;
    json_object_foreach(rs, key, v) {
        bool known = strcmp(key, "rope_type") == 0 || strcmp(key, "type") == 0;
        for (int i = 0; KEYS[k][i] && !known; i++) known = strcmp(key, KEYS[k][i]) == 0;
        if (!known) {
            dsl_error(c->d, key_loc(c, "rope_scaling"), "rope_scaling '%s' (type %s): planc cannot express it", key,
                      type);
            c->failed = true;
        }
    }
    RopeScaling r = { .kind = (RopeScalingKind)k, .factor = 1, .low_freq_factor = 1, .high_freq_factor = 4,
                      .beta_fast = 32, .beta_slow = 1 };
    if (k == ROPE_SCALING_NONE || c->failed) return;
    rs_num(c, rs, "factor", 1, &r.factor, true);
    double omp = 0;
    if (rs_num(c, rs, "original_max_position_embeddings", 1, &omp, k == ROPE_SCALING_LLAMA3))
        r.original_max_position = (int64_t)omp;
    rs_num(c, rs, "low_freq_factor", 0, &r.low_freq_factor, k == ROPE_SCALING_LLAMA3);
    rs_num(c, rs, "high_freq_factor", 0, &r.high_freq_factor, k == ROPE_SCALING_LLAMA3);
    rs_num(c, rs, "beta_fast", 0, &r.beta_fast, false);
    rs_num(c, rs, "beta_slow", 0, &r.beta_slow, false);
    /* YaRN without original_max_position_embeddings: transformers takes
     * max_position_embeddings / factor (modeling_rope_utils.py) */
    if (k == ROPE_SCALING_YARN && !r.original_max_position)
        r.original_max_position = (int64_t)((double)m->seq / r.factor);
    m->rope_scaling = r;
}

/* ---- the families --------------------------------------------------------- */

/* The keys the RoPE families (Llama, Mistral, Qwen2, Gemma) share:
 * shapes, positions RoPE, norms RMSNorm. head_def is the head width when
 * the config names none (0: width / heads, as LlamaConfig). */
static void read_rope_family(HfConfig *c, ImportModel *m, int64_t head_def, bool tied_def)
{
    m->vocab = hf_int(c, "vocab_size", 0, "the vocabulary");
    m->dim = hf_int(c, "hidden_size", 0, "the model width");
    m->layers = hf_int(c, "num_hidden_layers", 0, "the transformer blocks");
    m->heads = hf_int(c, "num_attention_heads", 0, "the query heads");
    m->kv_heads = hf_int(c, "num_key_value_heads", m->heads ? m->heads : 1, "the key/value heads");
    m->hidden = hf_int(c, "intermediate_size", 0, "the MLP's inner size");
    m->seq = hf_int(c, "max_position_embeddings", 0, "the context length");
    if (!head_def) head_def = m->heads && m->dim ? m->dim / m->heads : 1;
    m->head_dim = hf_int(c, "head_dim", head_def, "the width of one head");
    m->rope_theta = hf_num(c, "rope_theta", PLAN_ROPE_THETA_DEFAULT, "RoPE's base");
    m->tied = hf_bool(c, "tie_word_embeddings", tied_def);
    m->dtype = hf_dtype(c);
    m->position = "rope";
    m->norm = "rmsnorm";
    hf_norm_eps(c, m, "rms_norm_eps", 1e-6);   /* LlamaConfig's default */
    hf_rope_scaling(c, m);
    static const char *const drop[] = { "attention_dropout" };
    hf_dropout(c, m, drop, 1, 0);   /* LlamaConfig: attention_dropout 0.0 */
}

/* A SwiGLU MLP: hidden_act must be silu (silu on the gate). */
static void read_silu_gated(HfConfig *c, ImportModel *m)
{
    m->act = "swiglu";
    const char *act = hf_str(c, "hidden_act", "silu", "the activation's name");
    static const char *const silu[] = { "silu", "swish", NULL };
    if (act) hf_one_of(c, "hidden_act", act, silu, "\"silu\" (a SwiGLU MLP)");
}

/* What Llama, Mistral and Qwen2 share: LlamaConfig's keys. The MLP is
 * gated (SwiGLU: silu on the gate). */
static void read_llama_like(HfConfig *c, ImportModel *m)
{
    read_rope_family(c, m, 0, false);
    read_silu_gated(c, m);
}

static void read_llama(HfConfig *c, ImportModel *m)
{
    read_llama_like(c, m);
    m->attn_bias = hf_bool(c, "attention_bias", false) ? IMP_BIAS_ALL : IMP_BIAS_NONE;
    m->mlp_bias = hf_bool(c, "mlp_bias", false);
}

/* Mistral: Llama's shapes with a sliding window (null in v0.2 and later:
 * full attention). */
static void read_mistral(HfConfig *c, ImportModel *m)
{
    read_llama_like(c, m);
    m->window = hf_int(c, "sliding_window", -1, "the attention window in tokens, or null");
    if (m->window < 0) m->window = 0;
}

/* Mixtral (MixtralConfig): Mistral's attention, and in each block a sparse
 * MoE of num_local_experts SwiGLU experts of intermediate_size, the top
 * num_experts_per_tok per token, softmax over their logits
 * (MixtralSparseMoeBlock), the load-balancing loss router_aux_loss_coef. */
static void read_mixtral(HfConfig *c, ImportModel *m)
{
    read_mistral(c, m);
    m->experts = hf_int(c, "num_local_experts", 0, "the experts of each MoE layer");
    m->top_k = hf_int(c, "num_experts_per_tok", 0, "the experts each token is routed to");
    m->aux_loss = hf_num0(c, "router_aux_loss_coef", 0.001, "the load-balancing loss coefficient");
    m->moe_hidden = m->hidden;
    if (!c->failed && m->top_k > m->experts) {
        dsl_error(c->d, key_loc(c, "num_experts_per_tok"),
                  "'num_experts_per_tok': expected at most num_local_experts %lld", (long long)m->experts);
        c->failed = true;
    }
}

/* Qwen2's and Qwen3's window: only with use_sliding_window, on the blocks
 * from max_window_layers on. */
static void read_qwen_window(HfConfig *c, ImportModel *m)
{
    bool slide = hf_bool(c, "use_sliding_window", false);
    int64_t w = hf_int(c, "sliding_window", -1, "the attention window in tokens, or null");
    int64_t from = hf_int(c, "max_window_layers", m->layers ? m->layers : 1, "the blocks before the window");
    if (slide && w > 0 && from < m->layers) {
        m->window = w;
        m->window_from = from;
    }
}

/* Qwen2: biases on Q, K and V only (Qwen2Attention), Qwen's window. */
static void read_qwen2(HfConfig *c, ImportModel *m)
{
    read_llama_like(c, m);
    m->attn_bias = IMP_BIAS_QKV;
    read_qwen_window(c, m);
}

/* Qwen3 (Qwen3Config, Qwen3Attention): Qwen2's keys, but head_dim its own
 * (128 when absent), biases only with attention_bias (default false) and
 * an RMSNorm over each query and key head before RoPE (q_norm, k_norm of
 * head_dim, shared by the heads): `qk_norm rmsnorm`. */
static void read_qwen3(HfConfig *c, ImportModel *m)
{
    read_rope_family(c, m, 128, false);
    read_silu_gated(c, m);
    m->attn_bias = hf_bool(c, "attention_bias", false) ? IMP_BIAS_ALL : IMP_BIAS_NONE;
    m->qk_norm = "rmsnorm";
    read_qwen_window(c, m);
}

/* The indices of mlp_only_layers: an array of distinct block indices
 * 0 .. layers-1 (Qwen2MoeConfig, Qwen3MoeConfig; absent or null: none). */
static void read_mlp_only(HfConfig *c, ImportModel *m)
{
    json_t *v = hf_get(c, "mlp_only_layers");
    m->mlp_only = NULL;
    if (!v || json_is_null(v)) return;
    if (!json_is_array(v)) {
        wrong_type(c, "mlp_only_layers", "a list of block indices", v);
        return;
    }
    size_t i, j;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= m->layers) {
            dsl_error(c->d, key_loc(c, "mlp_only_layers"), "'mlp_only_layers': expected block indices 0 .. %lld, "
                      "got %s at position %zu", (long long)(m->layers - 1), json_kind(x), i);
            c->failed = true;
            return;
        }
        for (j = 0; j < i; j++)
            if (json_integer_value(json_array_get(v, j)) == json_integer_value(x)) {
                dsl_error(c->d, key_loc(c, "mlp_only_layers"), "'mlp_only_layers': block %lld twice",
                          (long long)json_integer_value(x));
                c->failed = true;
                return;
            }
    }
    m->mlp_only = v;
}

/* Whether block i is a mixture (Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer:
 * not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0; the others
 * a dense MLP of intermediate_size); DeepSeek's first first_k_dense_replace
 * blocks are dense. Mixtral's blocks are all mixtures. */
static bool block_sparse(const ImportModel *m, int64_t i)
{
    if (m->experts <= 0 || i < m->dense_first) return false;
    if (m->sparse_step > 1 && (i + 1) % m->sparse_step) return false;
    size_t k;
    json_t *x;
    if (m->mlp_only)
        json_array_foreach(m->mlp_only, k, x) if (json_integer_value(x) == i) return false;
    return true;
}

/* The keys Qwen2-MoE and Qwen3-MoE share: num_experts routed experts of
 * moe_intermediate_size, the top num_experts_per_tok, the full softmax's
 * top-k renormalised only under norm_topk_prob (default false, as both
 * config classes), the balance loss, and which blocks are mixtures
 * (decoder_sparse_step, mlp_only_layers). */
static void read_qwen_moe(HfConfig *c, ImportModel *m)
{
    m->experts = hf_int(c, "num_experts", 0, "the routed experts of each MoE layer");
    m->top_k = hf_int(c, "num_experts_per_tok", 0, "the experts each token is routed to");
    m->moe_hidden = hf_int(c, "moe_intermediate_size", 0, "each routed expert's inner size");
    m->topk_raw = !hf_bool(c, "norm_topk_prob", false);
    m->aux_loss = hf_num0(c, "router_aux_loss_coef", 0.001, "the load-balancing loss coefficient");
    m->sparse_step = hf_int(c, "decoder_sparse_step", 1, "every how many blocks a mixture stands");
    read_mlp_only(c, m);
    if (!c->failed && m->top_k > m->experts) {
        dsl_error(c->d, key_loc(c, "num_experts_per_tok"),
                  "'num_experts_per_tok': expected at most num_experts %lld", (long long)m->experts);
        c->failed = true;
    }
}

/* Qwen2-MoE (Qwen2MoeConfig, Qwen2MoeSparseMoeBlock): Qwen2's attention
 * (biases on Q, K, V), Qwen's mixtures, and in each one a shared expert of
 * shared_expert_intermediate_size behind a sigmoid gate per token
 * (shared_expert_gate): `shared 1; shared_hidden N; shared_gate true`. */
static void read_qwen2_moe(HfConfig *c, ImportModel *m)
{
    read_qwen2(c, m);
    read_qwen_moe(c, m);
    m->shared_hidden = hf_int(c, "shared_expert_intermediate_size", 0, "the shared expert's inner size");
}

/* Qwen3-MoE (Qwen3MoeConfig, Qwen3MoeSparseMoeBlock): Qwen3's attention
 * (q/k norm, head_dim 128 by default), Qwen's mixtures, no shared expert. */
static void read_qwen3_moe(HfConfig *c, ImportModel *m)
{
    read_qwen3(c, m);
    read_qwen_moe(c, m);
}


/* OLMo-2 (Olmo2Config, transformers' modeling_olmo2): Llama's keys and
 * SwiGLU MLP, biases on all four projections only with attention_bias,
 * each sub-block's RMSNorm after it, on its output, and none before
 * (Olmo2DecoderLayer: h = x + post_attention_layernorm(self_attn(x)),
 * post_feedforward_layernorm likewise: norm_position post), and an
 * RMSNorm over the whole q projection (heads x head_dim gains) and the
 * whole k projection (kv_heads x head_dim) before RoPE (Olmo2Attention's
 * q_norm, k_norm: qk_norm rmsnorm_projection, which `check` counts and
 * `emit` refuses by name). */
static void read_olmo2(HfConfig *c, ImportModel *m)
{
    read_llama_like(c, m);
    m->attn_bias = hf_bool(c, "attention_bias", false) ? IMP_BIAS_ALL : IMP_BIAS_NONE;
    m->qk_norm = "rmsnorm_projection";
    m->norm_position = "post";
}

/* Gemma: GeGLU (gelu on the gate), head_dim independent of the width,
 * tied embeddings by default, its (1 + w) RMSNorm (norm_plus_one) and the
 * sqrt(width) scaling of the embedding (scale sqrt_dim), which the runtime
 * computes as transformers does (issue 28). */
static void read_gemma(HfConfig *c, ImportModel *m)
{
    read_rope_family(c, m, 256, true);
    m->attn_bias = hf_bool(c, "attention_bias", false) ? IMP_BIAS_ALL : IMP_BIAS_NONE;
    m->act = "geglu";
    static const char *const gelu[] = { "gelu", "gelu_pytorch_tanh", "gelu_new", NULL };
    /* GemmaConfig reads hidden_activation, and hidden_act when that is null */
    const char *key = json_object_get(c->root, "hidden_activation") &&
                      !json_is_null(json_object_get(c->root, "hidden_activation")) ? "hidden_activation" : "hidden_act";
    hf_get(c, "hidden_activation");
    const char *act = hf_str(c, key, "gelu", "the activation's name");
    if (act) hf_one_of(c, key, act, gelu, "a gelu (a GeGLU MLP)");
    if (strcmp(key, "hidden_act")) hf_get(c, "hidden_act");
    m->gemma = true;   /* written as norm_plus_one true and embedding { scale sqrt_dim } */
}

/* A soft-cap key: a positive number, or null / absent for none (0). */
static double hf_softcap(HfConfig *c, const char *key, double def)
{
    json_t *v = hf_get(c, key);
    if (v && json_is_null(v)) return 0;
    return hf_num(c, key, def, "the soft-cap C of C tanh(x / C), or null");
}

/* Gemma 2's and 3's local and global blocks, as transformers decides
 * them: layer_types when the config has it (one "sliding_attention" or
 * "full_attention" per block, transformers >= 4.53), else block i global
 * when (i + 1) % K == 0, K = every_def (Gemma 2: 2, Gemma2DecoderLayer's
 * is_sliding = not bool(layer_idx % 2)) or sliding_window_pattern (Gemma
 * 3, default 6). Written as `sliding_window W every K`; a list that is no
 * such pattern (nor all one kind) is refused naming it. */
static void read_gemma_window(HfConfig *c, ImportModel *m, int64_t every_def, bool pattern_key)
{
    int64_t w = hf_int(c, "sliding_window", -1, "the local blocks' window in tokens");
    int64_t every = pattern_key ? hf_int(c, "sliding_window_pattern", every_def, "every K-th block is global")
                                : every_def;
    json_t *lt = hf_get(c, "layer_types");
    if (lt && !json_is_null(lt)) {
        size_t n = json_is_array(lt) ? json_array_size(lt) : 0;
        if (!json_is_array(lt) || (int64_t)n != m->layers) {
            dsl_error(c->d, key_loc(c, "layer_types"), "'layer_types': expected a list of num_hidden_layers "
                      "%lld entries, \"sliding_attention\" or \"full_attention\"", (long long)m->layers);
            c->failed = true;
            return;
        }
        int64_t first_full = 0, full = 0;   /* the first global block, 1-based; how many */
        for (size_t i = 0; i < n; i++) {
            const char *t = json_string_value(json_array_get(lt, i));
            bool is_full = t && !strcmp(t, "full_attention");
            if (!t || (!is_full && strcmp(t, "sliding_attention"))) {
                dsl_error(c->d, key_loc(c, "layer_types"), "'layer_types': entry %zu is neither "
                          "\"sliding_attention\" nor \"full_attention\"", i);
                c->failed = true;
                return;
            }
            if (is_full && !first_full) first_full = (int64_t)i + 1;
            full += is_full;
        }
        every = full == (int64_t)n ? 1 : full == 0 ? 0 : first_full;
        for (size_t i = 0; every > 1 && i < n; i++)
            if ((((int64_t)i + 1) % every == 0) != !strcmp(json_string_value(json_array_get(lt, i)), "full_attention")) {
                dsl_error(c->d, key_loc(c, "layer_types"), "'layer_types': block %zu breaks the pattern of a "
                          "global block every %lld (sliding_window W every K writes only that)", i, (long long)every);
                c->failed = true;
                return;
            }
    }
    if (w <= 0 || every == 1) return;   /* no window, or every block global */
    m->window = w;
    m->window_from = 0;
    m->window_every = every >= m->layers + 1 ? 0 : every;   /* no global block in range: all slide */
}

/* Gemma 2 (Gemma2Config, transformers v4.42+): Gemma's keys, and
 * attention and final-logit soft-caps (attn_logit_softcapping 50,
 * final_logit_softcapping 30; null: none), scores scaled by
 * 1/sqrt(query_pre_attn_scalar) (default 224), a window on every other
 * block from block 0 on; and a norm after each sub-block besides the one
 * before (post_attention_layernorm, pre_ and post_feedforward_layernorm:
 * `norm_position sandwich` on both sub-blocks). */
static void read_gemma2(HfConfig *c, ImportModel *m)
{
    read_gemma(c, m);
    m->attn_softcap = hf_softcap(c, "attn_logit_softcapping", 50);
    m->logit_softcap = hf_softcap(c, "final_logit_softcapping", 30);
    m->query_scalar = hf_num(c, "query_pre_attn_scalar", 224, "the scores' scale is 1/sqrt of it");
    read_gemma_window(c, m, 2, false);
    int64_t old = hf_int(c, "sliding_window_size", -1, "the window again (early Gemma 2 configs)");
    if (old > 0 && old != m->window && !c->failed) {
        dsl_error(c->d, key_loc(c, "sliding_window_size"), "'sliding_window_size' %lld differs from "
                  "sliding_window %lld", (long long)old, (long long)m->window);
        c->failed = true;
    }
    m->norm_position = "sandwich";
}

/* Gemma 3's text model (Gemma3TextConfig, transformers v4.50+): Gemma 2's
 * keys (no soft-caps by default), its q/k norm (`qk_norm rmsnorm`, by
 * 1 + w as every Gemma norm), five local blocks to a global one
 * (sliding_window_pattern 6 or layer_types) whose RoPE base is
 * rope_local_base_freq on the local blocks and rope_theta (and
 * rope_scaling) on the global ones (`rope_local_theta`, written where it
 * differs from the global rotation); its sandwich norms as Gemma 2's. */
static void read_gemma3(HfConfig *c, ImportModel *m)
{
    read_gemma(c, m);
    m->attn_softcap = hf_softcap(c, "attn_logit_softcapping", 0);
    m->logit_softcap = hf_softcap(c, "final_logit_softcapping", 0);
    m->query_scalar = hf_num(c, "query_pre_attn_scalar", 256, "the scores' scale is 1/sqrt of it");
    m->qk_norm = "rmsnorm";
    m->norm_position = "sandwich";
    read_gemma_window(c, m, 6, true);
    double local = hf_num(c, "rope_local_base_freq", 10000, "the local blocks' RoPE base");
    bool same = local == (m->rope_theta > 0 ? m->rope_theta : PLAN_ROPE_THETA_DEFAULT) &&
                m->rope_scaling.kind == ROPE_SCALING_NONE;
    if (m->window > 0 && !same) m->rope_local_theta = local;   /* some block is local, and it turns otherwise */
}

/* An integer key of DeepSeek's whose null means "none" (0) and whose
 * absence means the config class's default, def (0: None there too). */
static int64_t hf_int_or_null(HfConfig *c, const char *key, int64_t def, const char *what)
{
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) {
        hf_get(c, key);
        return v ? 0 : def;
    }
    return hf_int(c, key, def, what);
}

/* DeepSeek's YaRN pair, rope_scaling's mscale and mscale_all_dim,
 * imported as written into yarn's mscale and mscale_all_dim. Three
 * readings of it exist: transformers' _compute_yarn_parameters
 * (modeling_rope_utils.py) puts m(factor, mscale) / m(factor,
 * mscale_all_dim) on cos and sin only when both keys are non-zero, else
 * m(factor, 1) (m(f, x) = 0.1 x ln f + 1); DeepSeek's own
 * DeepseekV2YarnRotaryEmbedding (modeling_deepseek.py, defaults mscale 1,
 * mscale_all_dim 0) and Megatron-Core always put the quotient; all three
 * multiply MLA's softmax scale by m(factor, mscale_all_dim)^2 when
 * mscale_all_dim is non-zero (DeepseekV3Attention). planc's language
 * takes the pairs on which they agree (sema_yarn_mscale): mscale_all_dim
 * > 0 beside mscale > 0 (V2-Lite's 0.707 / 0.707, V3's 1 / 1), or
 * mscale_all_dim 0 (or left out) beside mscale 1 (or left out). Any other
 * pair is refused naming it. The two keys are taken out of rope_scaling
 * before the common reader sees it. */
static void read_deepseek_yarn(HfConfig *c, ImportModel *m)
{
    json_t *rs = json_object_get(c->root, "rope_scaling");
    double x = 1, y = 0;   /* DeepSeek's defaults */
    if (rs && json_is_object(rs)) {
        json_t *ms = json_object_get(rs, "mscale"), *all = json_object_get(rs, "mscale_all_dim");
        bool num = (!ms || json_is_number(ms)) && (!all || json_is_number(all));
        x = ms && json_is_number(ms) ? json_number_value(ms) : 1;
        y = all && json_is_number(all) ? json_number_value(all) : 0;
        const char *why = NULL;
        if (!num)
            why = "expected numbers";
        else if (x < 0 || y < 0)
            why = "m(f, x) = 0.1 x ln f + 1 of a negative x is no scale DeepSeek's YaRN defines";
        else if (y > 0 && (!ms || x == 0))
            why = "without a non-zero mscale transformers' YaRN puts 0.1 ln(factor) + 1 on cos and sin, DeepSeek's "
                  "and Megatron-Core's m(factor, mscale) / m(factor, mscale_all_dim) (m(f, x) = 0.1 x ln f + 1)";
        else if (y == 0 && x != 1)
            why = "without a non-zero mscale_all_dim transformers' YaRN leaves mscale unread and puts "
                  "0.1 ln(factor) + 1 on cos and sin, DeepSeek's and Megatron-Core's m(factor, mscale) "
                  "(m(f, x) = 0.1 x ln f + 1)";
        if (why) {
            char ms_text[32] = "left out", all_text[32] = "left out";
            if (ms) snprintf(ms_text, sizeof ms_text, json_is_number(ms) ? "%g" : "not a number", x);
            if (all) snprintf(all_text, sizeof all_text, json_is_number(all) ? "%g" : "not a number", y);
            dsl_error(c->d, key_loc(c, "rope_scaling"), "rope_scaling mscale %s, mscale_all_dim %s: %s", ms_text,
                      all_text, why);
            c->failed = true;
        }
        json_object_del(rs, "mscale");
        json_object_del(rs, "mscale_all_dim");
    }
    hf_rope_scaling(c, m);
    if (m->rope_scaling.kind == ROPE_SCALING_YARN) {
        m->rope_scaling.mscale = x;
        m->rope_scaling.mscale_all_dim = y;
    }
}

/* DeepSeek's mixture against planc's `moe { }` (DeepseekV2MoE, MoEGate;
 * transformers' DeepseekV3MoE): the first key, in the order below, that
 * the language cannot express is refused naming it; shared experts
 * (n_shared_experts x moe_intermediate_size, one MLP: the sum of
 * n_shared_experts MLPs of moe_intermediate_size) and the dense first
 * blocks are written as they are. v3: DeepseekV3Config's defaults. */
/* DeepSeek's topk_method (modeling_deepseek.py's MoEGate): V2's greedy
 * (the top_k of all experts) and group_limited_greedy (the experts of the
 * topk_group best of n_group groups, each ranked by its largest score:
 * route_group_score max), V3's noaux_tc (groups ranked by the sum of their
 * two largest scores plus e_score_correction_bias, the choice by score +
 * bias, the weights the unbiased scores': route_groups, expert_bias).
 * NULL, or the key to refuse with its reason in why. */
static const char *read_deepseek_routing(ImportModel *m, bool v3, const char *method, int64_t n_group,
                                         int64_t topk_group, int64_t experts, char *why, size_t cap)
{
    bool greedy = method && !strcmp(method, "greedy"), limited = method && !strcmp(method, "group_limited_greedy"),
         noaux = method && !strcmp(method, "noaux_tc");
    if (greedy && !v3) return NULL;
    if (!(limited && !v3) && !(noaux && v3)) {   /* V3's MoEGate raises NotImplementedError on the others */
        snprintf(why, cap, "%s: DeepSeek-%s's gate knows %s", method ? method : "null", v3 ? "V3" : "V2",
                 v3 ? "noaux_tc" : "greedy and group_limited_greedy");
        return "topk_method";
    }
    if (n_group < 1 || experts % n_group) {
        snprintf(why, cap, "%lld: the groups must divide n_routed_experts %lld", (long long)n_group,
                 (long long)experts);
        return "n_group";
    }
    if (topk_group < 1 || topk_group > n_group || topk_group * (experts / n_group) < m->top_k) {
        snprintf(why, cap, "%lld: 1 .. n_group %lld groups holding at least num_experts_per_tok %lld experts",
                 (long long)topk_group, (long long)n_group, (long long)m->top_k);
        return "topk_group";
    }
    /* V3 ranks a group by its two largest (topk(2)); planc by its
       top_k / topk_group largest: the same where that is 2 */
    if (noaux && topk_group < n_group && m->top_k / topk_group != 2) {
        snprintf(why, cap, "%lld with num_experts_per_tok %lld: noaux_tc ranks a group by its 2 largest scores, "
                 "planc by its top_k / topk_group = %lld largest", (long long)topk_group, (long long)m->top_k,
                 (long long)(m->top_k / topk_group));
        return "topk_group";
    }
    if (topk_group < n_group) {   /* else every group is open: no narrowing to write */
        m->route_groups = n_group;
        m->route_top_groups = topk_group;
        m->group_max = limited;
    }
    m->expert_bias = noaux;
    return NULL;
}

/* routed_scaling_factor (hf_num: a positive number) where DeepSeek's gate
 * applies it: V3 always (after the norm); V2 only when it does not
 * renormalise (top_k 1 or norm_topk_prob false), else read and unused. */
static void read_deepseek_scale(ImportModel *m, bool v3, double scale, bool norm_topk)
{
    bool applied = v3 || !(m->top_k > 1 && norm_topk);
    if (applied && scale != 1) m->routed_scale = scale;
}

static void read_deepseek_moe(HfConfig *c, ImportModel *m, bool v3)
{
    bool failed_before = c->failed;
    m->dense_first = hf_int_or_null(c, "first_k_dense_replace", v3 ? 3 : 0, "the dense blocks before the mixtures");
    int64_t experts = hf_int_or_null(c, "n_routed_experts", v3 ? 256 : 0, "the routed experts, or null");
    int64_t freq = hf_int(c, "moe_layer_freq", 1, "every how many blocks a mixture stands");
    m->shared = hf_int_or_null(c, "n_shared_experts", v3 ? 1 : 0, "the shared experts, or null");
    m->moe_hidden = hf_int(c, "moe_intermediate_size", v3 ? 2048 : 1407, "each expert's inner size");
    m->top_k = hf_int_or_null(c, "num_experts_per_tok", v3 ? 8 : 0, "the experts each token is routed to");
    const char *method = hf_str(c, "topk_method", v3 ? "noaux_tc" : "greedy", "the routing method");
    int64_t n_group = hf_int_or_null(c, "n_group", v3 ? 8 : 0, "the expert groups of grouped routing");
    int64_t topk_group = hf_int_or_null(c, "topk_group", v3 ? 4 : 0, "the groups a token may pick");
    double scale = hf_num(c, "routed_scaling_factor", v3 ? 2.5 : 1.0, "the routed experts' output scale");
    const char *scoring = hf_str(c, "scoring_func", v3 ? "sigmoid" : "softmax", "the router's scores");
    bool norm_topk = hf_bool(c, "norm_topk_prob", v3);
    double alpha = hf_num0(c, "aux_loss_alpha", 0.001, "the balance loss coefficient");
    bool seq_aux = hf_bool(c, "seq_aux", true);
    hf_int(c, "ep_size", 1, "the expert-parallel size of DeepSeek's inference code");   /* deployment only */
    if (c->failed && !failed_before) return;   /* a MoE key of the wrong type, said */
    bool moe = experts > 0 && m->dense_first < m->layers;
    if (!moe) {   /* every block dense: the MoE keys change nothing */
        m->dense_first = 0;
        m->shared = 0;
        m->moe_hidden = 0;
        m->top_k = 0;
        return;
    }
    read_deepseek_scale(m, v3, scale, norm_topk);   /* routed_scaling_factor: routed_scale */
    const char *key = NULL, *why = NULL;
    char buf[320];
    if (freq != 1)
        key = "moe_layer_freq", why = "a mixture every moe_layer_freq blocks (planc writes every block after the dense ones)";
    else if ((key = read_deepseek_routing(m, v3, method, n_group, topk_group, experts, buf, sizeof buf)))
        why = buf;
    else if (!scoring || (strcmp(scoring, "softmax") && strcmp(scoring, "sigmoid")))
        key = "scoring_func", why = "expected softmax or sigmoid (planc's `score`)";
    else if (alpha > 0 && !seq_aux)
        key = "seq_aux", why = "false: DeepSeek's balance loss over the whole batch (one f_i and P_i of all "
                               "its tokens); planc's aux_loss is taken per sequence (seq_aux true)";
    if (key) {
        dsl_error(c->d, key_loc(c, key), "'%s': %s; planc's language cannot express DeepSeek's mixture yet", key, why);
        c->failed = true;
        return;
    }
    m->experts = experts;
    m->sigmoid = strcmp(scoring, "sigmoid") == 0;
    m->topk_raw = !norm_topk && m->top_k > 1;   /* softmax: over all E (MoEGate); sigmoid: raw */
    /* DeepSeek's seq_aux loss (MoEGate.forward): per sequence b and layer,
     * alpha sum_e (count_e / (T k / E)) P_e = alpha E sum_e f_e P_e, the
     * mean over sequences, each layer's added to the loss (AddAuxiliaryLoss).
     * planc's aux_loss C is the same per-sequence term averaged over the
     * mixtures too (moe_aux_fwd), so C = alpha x the number of mixtures. */
    char num[32];   /* to 15 digits: 0.001 x 26 is 0.026, not the product's last bit */
    snprintf(num, sizeof num, "%.15g", alpha * (double)(m->layers - m->dense_first));
    m->aux_loss = strtod(num, NULL);
    if (alpha > 0)
        dsl_note(c->d, key_loc(c, "aux_loss_alpha"), "import: aux_loss %s is aux_loss_alpha %g times the %lld "
                 "mixtures: DeepSeek adds each mixture's balance loss, planc's aux_loss is their mean", num, alpha,
                 (long long)(m->layers - m->dense_first));
    if (m->top_k > experts) {
        dsl_error(c->d, key_loc(c, "num_experts_per_tok"), "'num_experts_per_tok': expected at most n_routed_experts "
                  "%lld", (long long)experts);
        c->failed = true;
    }
}

/* DeepSeek-V2 and V3 (DeepseekV2Config, DeepseekV3Config; modeling_deepseek
 * .py's DeepseekV2Attention): Llama's shapes and SwiGLU with multi-head
 * latent attention — q_lora_rank (null: q_proj, V2-Lite), kv_lora_rank,
 * qk_rope_head_dim, qk_nope_head_dim, v_head_dim, the latents normalised by
 * RMSNorm, biases on q_a, kv_a and o_proj with attention_bias — and
 * DeepSeek's mixture (read_deepseek_moe). num_key_value_heads must be the
 * heads (MLA has no groups). */
static void read_deepseek(HfConfig *c, ImportModel *m, bool v3)
{
    m->vocab = hf_int(c, "vocab_size", 0, "the vocabulary");
    m->dim = hf_int(c, "hidden_size", 0, "the model width");
    m->layers = hf_int(c, "num_hidden_layers", 0, "the transformer blocks");
    m->heads = hf_int(c, "num_attention_heads", 0, "the query heads");
    m->kv_heads = hf_int(c, "num_key_value_heads", m->heads ? m->heads : 1, "the key/value heads");
    m->hidden = hf_int(c, "intermediate_size", 0, "the dense MLP's inner size");
    m->seq = hf_int(c, "max_position_embeddings", 0, "the context length");
    m->rope_theta = hf_num(c, "rope_theta", PLAN_ROPE_THETA_DEFAULT, "RoPE's base");
    m->tied = hf_bool(c, "tie_word_embeddings", false);
    m->dtype = hf_dtype(c);
    m->position = "rope";
    m->norm = "rmsnorm";
    hf_norm_eps(c, m, "rms_norm_eps", 1e-6);
    read_deepseek_yarn(c, m);
    static const char *const drop[] = { "attention_dropout" };
    hf_dropout(c, m, drop, 1, 0);
    read_silu_gated(c, m);
    m->attn_bias = hf_bool(c, "attention_bias", false) ? IMP_BIAS_ALL : IMP_BIAS_NONE;
    m->mla = true;
    m->q_lora = hf_int_or_null(c, "q_lora_rank", 1536, "the query latent's width, or null");
    m->kv_lora = hf_int(c, "kv_lora_rank", 512, "the key/value latent's width");
    m->qk_rope = hf_int(c, "qk_rope_head_dim", 64, "each head's rotated query/key part");
    m->qk_nope = hf_int(c, "qk_nope_head_dim", 128, "each head's unrotated query/key part");
    m->v_head = hf_int(c, "v_head_dim", 128, "each head's value width");
    if (!c->failed && m->kv_heads != m->heads) {
        dsl_error(c->d, key_loc(c, "num_key_value_heads"), "'num_key_value_heads' %lld: multi-head latent attention "
                  "gives every head its own key and value; expected num_attention_heads %lld",
                  (long long)m->kv_heads, (long long)m->heads);
        c->failed = true;
    }
    read_deepseek_moe(c, m, v3);
    /* DeepSeek-V3's multi-token prediction module: transformers'
     * DeepseekV3ForCausalLM does not build it (its weights are skipped) */
    if (v3 && hf_num0(c, "num_nextn_predict_layers", 1, "the multi-token prediction layers") > 0) {
        dsl_error(c->d, key_loc(c, "num_nextn_predict_layers"), "'num_nextn_predict_layers': DeepSeek-V3's "
                  "multi-token prediction module (another block and head, an extra loss) is not in planc's "
                  "language; expected 0 or null");
        c->failed = true;
    }
}

static void read_deepseek_v2(HfConfig *c, ImportModel *m) { read_deepseek(c, m, false); }
static void read_deepseek_v3(HfConfig *c, ImportModel *m) { read_deepseek(c, m, true); }

/* GPT-2: its own key names; learned positions, LayerNorm, biases
 * everywhere, a GELU MLP of n_inner (null: 4 x n_embd), tied head. */
static void read_gpt2(HfConfig *c, ImportModel *m)
{
    m->vocab = hf_int(c, "vocab_size", 0, "the vocabulary");
    m->dim = hf_int(c, "n_embd", 0, "the model width");
    m->layers = hf_int(c, "n_layer", 0, "the transformer blocks");
    m->heads = hf_int(c, "n_head", 0, "the heads");
    m->kv_heads = m->heads;
    m->head_dim = m->heads && m->dim ? m->dim / m->heads : 0;
    m->hidden = hf_int(c, "n_inner", m->dim ? 4 * m->dim : 1, "the MLP's inner size, or null");
    m->seq = hf_int(c, "n_positions", 0, "the learned positions");
    m->tied = hf_bool(c, "tie_word_embeddings", true);
    m->dtype = hf_dtype(c);
    m->position = "learned";
    m->norm = "layernorm";
    m->act = "gelu";
    m->attn_bias = IMP_BIAS_ALL;
    m->mlp_bias = true;
    hf_norm_eps(c, m, "layer_norm_epsilon", 1e-5);   /* GPT2Config's default */
    static const char *const drop[] = { "attn_pdrop", "resid_pdrop", "embd_pdrop" };
    hf_dropout(c, m, drop, 3, 0.1);   /* GPT2Config: 0.1 each */
    static const char *const gelu[] = { "gelu", "gelu_new", "gelu_pytorch_tanh", NULL };
    const char *act = hf_str(c, "activation_function", "gelu_new", "the activation's name");
    if (act) hf_one_of(c, "activation_function", act, gelu, "a gelu");
}

/* Phi-3 (Phi3Config): Llama's shapes and SwiGLU with fused qkv_proj and
 * gate_up_proj weights (planc's own layout), a Mistral-style window, and
 * dropout keys of its own. partial_rotary_factor below 1 (Phi-3.5-MoE,
 * Phi-4-mini) rotates part of each head: not expressible. */
static void read_phi3(HfConfig *c, ImportModel *m)
{
    read_mistral(c, m);
    m->attn_bias = hf_bool(c, "attention_bias", false) ? IMP_BIAS_ALL : IMP_BIAS_NONE;
    static const char *const drop[] = { "attention_dropout", "resid_pdrop", "embd_pdrop" };
    m->dropout = 0;
    hf_dropout(c, m, drop, 3, 0);   /* Phi3Config: 0.0 each */
    double prf = hf_num(c, "partial_rotary_factor", 1, "the rotated fraction of each head");
    if (prf != 1) {
        dsl_error(c->d, key_loc(c, "partial_rotary_factor"), "'partial_rotary_factor' %g: planc's RoPE rotates "
                  "every dimension of a head", prf);
        c->failed = true;
    }
    /* the pre-training context of a longrope model; with rope_scaling null
     * it changes nothing */
    hf_int(c, "original_max_position_embeddings", -1, "the pre-training context");
}

typedef struct {
    const char *model_type;
    void (*read)(HfConfig *, ImportModel *);
    const char *architecture;   /* the causal-LM class its `architectures` names */
} ImportFamily;

static const ImportFamily FAMILIES[] = {
    { "llama",   read_llama,   "LlamaForCausalLM" },
    { "mistral", read_mistral, "MistralForCausalLM" },
    { "mixtral", read_mixtral, "MixtralForCausalLM" },
    { "qwen2",   read_qwen2,   "Qwen2ForCausalLM" },
    { "qwen3",   read_qwen3,   "Qwen3ForCausalLM" },
    { "qwen2_moe", read_qwen2_moe, "Qwen2MoeForCausalLM" },
    { "qwen3_moe", read_qwen3_moe, "Qwen3MoeForCausalLM" },
    { "olmo2",   read_olmo2,   "Olmo2ForCausalLM" },
    { "gemma",   read_gemma,   "GemmaForCausalLM" },
    { "gemma2",  read_gemma2,  "Gemma2ForCausalLM" },
    { "gemma3_text", read_gemma3, "Gemma3ForCausalLM" },
    { "gpt2",    read_gpt2,    "GPT2LMHeadModel" },
    { "phi3",    read_phi3,    "Phi3ForCausalLM" },
    { "deepseek_v2", read_deepseek_v2, "DeepseekV2ForCausalLM" },
    { "deepseek_v3", read_deepseek_v3, "DeepseekV3ForCausalLM" },
};
#define N_FAMILIES ((int)(sizeof FAMILIES / sizeof FAMILIES[0]))

/* Top-level keys that change nothing planc models or trains, for every
 * family: token ids, the tokenizer's and the hub's bookkeeping, what the
 * inference code returns. A key neither read nor here (nor in the
 * family's list below) is refused: it may change a shape or the compute. */
static const char *const INERT[] = {
    "_name_or_path", "architectures", "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id",
    "sep_token_id", "decoder_start_token_id", "use_cache", "output_attentions", "output_hidden_states",
    "return_dict", "torchscript", "tokenizer_class", "id2label", "label2id", "problem_type", "finetuning_task",
    "task_specific_params", "initializer_range", "auto_map", "is_decoder", "is_encoder_decoder",
    "tie_encoder_decoder", "chunk_size_feed_forward", "prefix", "max_length", "min_length",
    /* inference-time sampling defaults (generation_config.json's) */
    "do_sample", "temperature", "top_k", "top_p", "num_beams", "repetition_penalty",
};

/* Keys that change nothing at one value (given as JSON text) and the
 * compute at any other: accepted at that value, refused at others. */
static const struct { const char *key, *neutral, *why; } NEUTRAL_AT[] = {
    { "pretraining_tp", "1", "Llama's pretraining_tp > 1 splits the linear layers into slices summed in another order" },
    { "router_jitter_noise", "0", "Mixtral's router_jitter_noise multiplies the router's input by noise" },
    { "use_mrope", "false", "Qwen2-VL's multimodal RoPE" },
    { "scale_attn_weights", "true", "GPT-2 without 1/sqrt(d) attention scaling" },
    { "scale_attn_by_inverse_layer_idx", "false", "GPT-2's scores divided by the layer index" },
    { "n_ctx", NULL, NULL },               /* GPT-2's n_positions again */
    { "summary_type", NULL, NULL },        /* GPT-2 double-heads' classifier, not the LM */
    { "summary_use_proj", NULL, NULL },
    { "summary_activation", NULL, NULL },
    { "summary_proj_to_labels", NULL, NULL },
    { "summary_first_dropout", NULL, NULL },
    { "reorder_and_upcast_attn", NULL, NULL },   /* fp32 scores in fp16 GPT-2: planc's softmax is fp32 */
    { "output_router_logits", NULL, NULL },      /* what Mixtral's forward returns; planc's loss adds
                                                    router_aux_loss_coef x the balance loss */
    { "use_sliding_window", NULL, NULL },        /* read by Qwen2; Mistral's and Phi-3's configs carry it */
    { "max_window_layers", NULL, NULL },
    { "cache_implementation", NULL, NULL },      /* Gemma 2/3's "hybrid" KV cache: inference only */
};

/* ---- writing the model block ---------------------------------------------- */

/* A number in the shortest form that reads back as itself; a whole
 * number as one (soft-caps: 50, not 5e+01). */
static void put_num(FILE *o, double x)
{
    char buf[40];
    if (x == floor(x) && fabs(x) < 1e15) {
        fprintf(o, "%.0f", x);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    fputs(buf, o);
}

static void put_attention(FILE *o, const ImportModel *m, bool window)
{
    static const char *const bias[] = { "false", "true", "qkv" };   /* ORDER ImportBias */
    if (m->mla) {
        fprintf(o, "        attention { kind mla; heads %lld; q_lora_rank %lld; kv_lora_rank %lld; qk_rope_head_dim %lld; "
                "qk_nope_head_dim %lld; v_head_dim %lld; norm %s; bias %s }\n", (long long)m->heads,
                (long long)m->q_lora, (long long)m->kv_lora, (long long)m->qk_rope, (long long)m->qk_nope,
                (long long)m->v_head, m->norm, bias[m->attn_bias]);
        return;
    }
    fprintf(o, "        attention { heads %lld", (long long)m->heads);
    if (m->kv_heads != m->heads) fprintf(o, "; kv_heads %lld", (long long)m->kv_heads);
    if (m->head_dim * m->heads != m->dim) fprintf(o, "; head_dim %lld", (long long)m->head_dim);
    if (window) fprintf(o, "; sliding_window %lld", (long long)m->window);
    if (window && m->window_every) fprintf(o, " every %lld", (long long)m->window_every);
    if (m->qk_norm) fprintf(o, "; qk_norm %s", m->qk_norm);
    if (m->attn_softcap > 0) {
        fprintf(o, "; softcap ");
        put_num(o, m->attn_softcap);
    }
    if (m->query_scalar > 0) {
        fprintf(o, "; query_pre_attn_scalar ");
        put_num(o, m->query_scalar);
    }
    if (m->norm_position) fprintf(o, "; norm_position %s", m->norm_position);
    fprintf(o, "; norm %s; bias %s }\n", m->norm, bias[m->attn_bias]);
}

/* One `repeat N { attention; mlp | moe }` of the blocks [from, to), all
 * mixtures (sparse) or all dense. */
static void put_blocks(FILE *o, const ImportModel *m, int64_t from, int64_t to, bool window, bool sparse)
{
    if (to <= from) return;
    fprintf(o, "    repeat %lld {\n", (long long)(to - from));
    put_attention(o, m, window);
    if (sparse) {
        fprintf(o, "        moe { experts %lld; top_k %lld; hidden %lld; act %s; norm %s; bias %s; aux_loss ",
                (long long)m->experts, (long long)m->top_k, (long long)(m->moe_hidden ? m->moe_hidden : m->hidden),
                m->act, m->norm, m->mlp_bias ? "true" : "false");
        put_num(o, m->aux_loss);
        if (m->shared > 0) fprintf(o, "; shared %lld", (long long)m->shared);   /* DeepSeek's, moe_hidden each */
        if (m->sigmoid) fprintf(o, "; score sigmoid");
        if (m->topk_raw) fprintf(o, "; norm_topk_prob false");
        if (m->route_groups > 0)   /* DeepSeek's n_group / topk_group, V2's groups by their largest score */
            fprintf(o, "; route_groups %lld; route_top_groups %lld%s", (long long)m->route_groups,
                    (long long)m->route_top_groups, m->group_max ? "; route_group_score max" : "");
        if (m->routed_scale > 0) fprintf(o, "; routed_scale %.17g", m->routed_scale);   /* routed_scaling_factor */
        if (m->expert_bias) fprintf(o, "; expert_bias true");   /* V3's noaux_tc: e_score_correction_bias */
        if (m->shared_hidden > 0)
            fprintf(o, "; shared 1; shared_hidden %lld; shared_gate true", (long long)m->shared_hidden);
        fprintf(o, " }\n    }\n");
    } else {
        fprintf(o, "        mlp { hidden %lld; act %s; norm %s; bias %s%s%s }\n    }\n", (long long)m->hidden,
                m->act, m->norm, m->mlp_bias ? "true" : "false", m->norm_position ? "; norm_position " : "",
                m->norm_position ? m->norm_position : "");
    }
}

/* The blocks as runs of alike ones: a run ends where the window starts
 * (Qwen's max_window_layers) or a mixture follows a dense block or the
 * reverse (Qwen-MoE's mlp_only_layers, decoder_sparse_step; DeepSeek's
 * first_k_dense_replace): consecutive repeats, the language's way to write
 * blocks that differ. */
static void put_all_blocks(FILE *o, const ImportModel *m)
{
    int64_t slide_from = m->window ? m->window_from : m->layers, first = 0;
    for (int64_t i = 1; i <= m->layers; i++) {
        bool same = i < m->layers && (i >= slide_from) == (first >= slide_from) &&
                    block_sparse(m, i) == block_sparse(m, first);
        if (same) continue;
        put_blocks(o, m, first, i, first >= slide_from, block_sparse(m, first));
        first = i;
    }
}

static void put_rope_scaling(FILE *o, const RopeScaling *r)
{
    static const char *const names[] = { "none", "linear", "llama3", "yarn" };   /* ORDER RopeScalingKind */
    if (r->kind == ROPE_SCALING_NONE) return;
    fprintf(o, "; rope_scaling { type %s; factor ", names[r->kind]);
    put_num(o, r->factor);
    if (r->kind == ROPE_SCALING_LLAMA3) {
        fprintf(o, "; low_freq_factor ");
        put_num(o, r->low_freq_factor);
        fprintf(o, "; high_freq_factor ");
        put_num(o, r->high_freq_factor);
    } else if (r->kind == ROPE_SCALING_YARN) {
        fprintf(o, "; beta_fast ");
        put_num(o, r->beta_fast);
        fprintf(o, "; beta_slow ");
        put_num(o, r->beta_slow);
        if (r->mscale_all_dim != 0) {   /* DeepSeek's pair (read_deepseek_yarn); else sema's 1, 0 */
            fprintf(o, "; mscale ");
            put_num(o, r->mscale);
            fprintf(o, "; mscale_all_dim ");
            put_num(o, r->mscale_all_dim);
        }
    }
    if (r->original_max_position) fprintf(o, "; original_max_position %lld", (long long)r->original_max_position);
    fprintf(o, " }");
}

/* The .plan text of m (then parsed and formatted canonically). The
 * config's path goes into a comment: its control characters (a newline
 * would end the comment) are written as '?'. */
static void put_model(FILE *o, const ImportModel *m, const char *name, const char *config)
{
    fprintf(o, "# %s: imported by planc import from ", name);
    for (const unsigned char *p = (const unsigned char *)config; *p; p++) fputc(*p < 0x20 || *p == 0x7f ? '?' : *p, o);
    fprintf(o, " (model_type %s)\n", m->family);
    fprintf(o, "model %s {\n    vocab %lld\n    seq %lld\n    dtype %s\n", name, (long long)m->vocab,
            (long long)m->seq, m->dtype);
    if (m->norm_eps > 0 && m->norm_eps != PLAN_NORM_EPS_DEFAULT) {
        fprintf(o, "    norm_eps ");
        put_num(o, m->norm_eps);
        fprintf(o, "\n");
    }
    if (m->dropout > 0) {
        fprintf(o, "    dropout ");
        put_num(o, m->dropout);
        fprintf(o, "\n");
    }
    if (m->gemma) fprintf(o, "    norm_plus_one true\n");
    fprintf(o, "    embedding { dim %lld; position %s%s", (long long)m->dim, m->position,
            m->gemma ? "; scale sqrt_dim" : "");
    if (m->rope_theta > 0 && m->rope_theta != PLAN_ROPE_THETA_DEFAULT) {
        if (m->rope_theta == floor(m->rope_theta) && m->rope_theta < 1e15)
            fprintf(o, "; rope_theta %.0f", m->rope_theta);
        else
            fprintf(o, "; rope_theta %.17g", m->rope_theta);
    }
    if (m->rope_local_theta > 0) {
        fprintf(o, "; rope_local_theta ");
        put_num(o, m->rope_local_theta);
    }
    put_rope_scaling(o, &m->rope_scaling);
    fprintf(o, " }\n");
    put_all_blocks(o, m);
    fprintf(o, "    norm { kind %s }\n    lm_head { tied %s", m->norm, m->tied ? "true" : "false");
    if (m->logit_softcap > 0) {
        fprintf(o, "; softcap ");
        put_num(o, m->logit_softcap);
    }
    fprintf(o, " }\n}\n");
}

/* For a refused model that was read whole (m->needs): a note with the
 * attention and head the rest of the config makes, as the model block
 * would hold them, so what was read is on view (and tested). */
static void note_read_blocks(DslDiag *d, HfConfig *c, const ImportModel *m)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) return;
    put_attention(mem, m, m->window > 0);
    fprintf(mem, "lm_head { tied %s", m->tied ? "true" : "false");
    if (m->logit_softcap > 0) {
        fprintf(mem, "; softcap ");
        put_num(mem, m->logit_softcap);
    }
    fprintf(mem, " }");
    fclose(mem);
    char *a = text;
    while (*a == ' ') a++;
    char *nl = strchr(a, '\n');
    if (nl) *nl = ' ';
    dsl_note(d, key_loc(c, "model_type"), "the rest is read: %s", a);
    free(text);
}

/* ---- names and notes ------------------------------------------------------ */

/* A .plan name from s: letters, digits, '_', '.', '-' kept, others '-';
 * a leading character that is not a letter or '_' gets an 'm' before it. */
static void plan_name(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    if (!(*s >= 'A' && *s <= 'Z') && !(*s >= 'a' && *s <= 'z') && *s != '_') out[n++] = 'm';
    for (; *s && n + 1 < cap && n < DSL_MAX_NAME; s++) {
        char ch = *s;
        bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                  ch == '_' || ch == '.' || ch == '-';
        out[n++] = ok ? ch : '-';
    }
    out[n] = '\0';
}

/* The default name: _name_or_path's last part, else the folder of a file
 * named config.json, else the file's stem, else model_type. */
static void default_name(char *out, size_t cap, HfConfig *c, const char *path, const char *family)
{
    const char *p = hf_str(c, "_name_or_path", "", "the model's name");
    char buf[512];
    if (p && *p) {
        const char *slash = strrchr(p, '/');
        snprintf(buf, sizeof buf, "%s", slash && slash[1] ? slash + 1 : p);
    } else {
        snprintf(buf, sizeof buf, "%s", path);
        char *base = strrchr(buf, '/');
        if (strcmp(base ? base + 1 : buf, "config.json") == 0) {
            if (base) *base = '\0';
            char *dir = base ? strrchr(buf, '/') : NULL;
            memmove(buf, dir ? dir + 1 : buf, strlen(dir ? dir + 1 : buf) + 1);
            if (!base || !*buf || strcmp(buf, ".") == 0 || strcmp(buf, "..") == 0)
                snprintf(buf, sizeof buf, "%s", family);
        } else {
            if (base) memmove(buf, base + 1, strlen(base + 1) + 1);
            char *dot = strrchr(buf, '.');
            if (dot && dot != buf) *dot = '\0';
        }
    }
    plan_name(out, cap, buf);
}

static bool key_read(const HfConfig *c, const char *key)
{
    for (int i = 0; i < c->n_used; i++)
        if (strcmp(c->used[i], key) == 0) return true;
    return strcmp(key, "model_type") == 0;
}

/* Every top-level key the families did not read must change nothing: in
 * INERT, or in NEUTRAL_AT at its neutral value. The rest are refused
 * (exit 2) one by one, naming them — an import never drops a key that
 * could change a shape or the compute. Returns whether all passed; the
 * inert keys are listed in one note. */
static bool check_unread(HfConfig *c)
{
    char list[1024] = "";
    size_t n = 0;
    bool ok = true;
    const char *key;
    json_t *v;
    json_object_foreach(c->root, key, v) {
        if (key_read(c, key)) continue;
        bool inert = false;
        for (size_t i = 0; i < sizeof INERT / sizeof *INERT && !inert; i++) inert = strcmp(key, INERT[i]) == 0;
        for (size_t i = 0; i < sizeof NEUTRAL_AT / sizeof *NEUTRAL_AT && !inert; i++) {
            if (strcmp(key, NEUTRAL_AT[i].key)) continue;
            if (!NEUTRAL_AT[i].neutral) { inert = true; break; }
            char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            bool same = text && (strcmp(text, NEUTRAL_AT[i].neutral) == 0 ||
                                 (json_is_number(v) && json_number_value(v) == atof(NEUTRAL_AT[i].neutral)));
            free(text);
            if (same) { inert = true; break; }
            dsl_error(c->d, key_loc(c, key), "'%s' changes the model: %s; planc imports it only at %s", key,
                      NEUTRAL_AT[i].why, NEUTRAL_AT[i].neutral);
            ok = false;
            inert = true;   /* reported */
        }
        if (!inert) {
            dsl_error(c->d, key_loc(c, key), "'%s' is not a key planc's import knows for this model_type: it may "
                      "change a shape or the compute, so it is not left out (remove it if it changes neither)", key);
            ok = false;
            continue;
        }
        int w = snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", key);
        if (w > 0 && (size_t)w < sizeof list - n) n += (size_t)w;
    }
    DslLoc none = { 0 };
    if (ok && n) dsl_note(c->d, none, "import: keys that change no shape, cost or compute: %s", list);
    return ok;
}

/* `architectures` names the causal-LM class of the model_type (a config
 * relabelled by hand, or a classifier head, is refused). */
static bool check_architectures(HfConfig *c, const ImportFamily *fam)
{
    json_t *a = hf_get(c, "architectures");
    if (!a || json_is_null(a)) return true;
    if (!json_is_array(a) || json_array_size(a) != 1 || !json_is_string(json_array_get(a, 0))) {
        wrong_type(c, "architectures", "a list of one class name", a);
        return false;
    }
    const char *cls = json_string_value(json_array_get(a, 0));
    if (strcmp(cls, fam->architecture) == 0) return true;
    dsl_error(c->d, key_loc(c, "architectures"), "'architectures' [\"%s\"] does not match model_type \"%s\" "
              "(whose causal LM is %s)", cls, fam->model_type, fam->architecture);
    c->failed = true;
    return false;
}

/* ---- the command ------------------------------------------------------------ */

/* Read, translate and write; returns the exit status. */
static int import_config(const char *path, const char *out_path, const char *name_opt)
{
    DslArena arena = { 0 };
    DslDiag diag;
    dsl_diag_init(&diag, stderr);
    int rc = 2;
    json_t *root = NULL;
    const char *why = NULL;
    DslSource *src = dsl_source_read(&arena, path, &why);
    if (!src) {
        fprintf(stderr, "planc: error: import: cannot read %s: %s\n", path, why);
        goto done;
    }
    json_error_t err;
    root = json_loadb(src->text, src->len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        DslLoc loc = { src, err.line > 0 ? err.line : 1, err.column > 0 ? err.column : 1, 0, 0 };
        loc.end_line = loc.line;
        loc.end_col = loc.col;
        dsl_error(&diag, loc, "malformed JSON: %s (a Hugging Face config.json is one JSON object)", err.text);
        goto done;
    }
    HfConfig c = { .d = &diag, .src = src, .root = root };
    DslLoc top = { src, 1, 1, 1, 1 };
    if (!json_is_object(root)) {
        dsl_error(&diag, top, "expected a JSON object at the top level, got %s", json_kind(root));
        goto done;
    }
    const char *family = hf_str(&c, "model_type", NULL, "the architecture, such as \"llama\"");
    if (!family) goto done;
    const ImportFamily *fam = NULL;
    for (int i = 0; i < N_FAMILIES; i++)
        if (strcmp(family, FAMILIES[i].model_type) == 0) fam = &FAMILIES[i];
    if (!fam) {
        dsl_error(&diag, key_loc(&c, "model_type"),
                  "model_type \"%s\" is not supported: expected llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, "
                  "qwen3_moe, olmo2, gemma, gemma2, gemma3_text, gpt2, phi3, deepseek_v2 or deepseek_v3",
                  family);
        goto done;
    }
    ImportModel m = { .family = fam->model_type };
    fam->read(&c, &m);
    check_architectures(&c, fam);
    if (!c.failed && strcmp(m.family, "gpt2") == 0 && m.dim % m.heads != 0) {
        dsl_error(&diag, key_loc(&c, "n_head"), "'n_head': expected a divisor of n_embd %lld", (long long)m.dim);
        c.failed = true;
    }
    if (!c.failed && m.heads % m.kv_heads != 0) {
        dsl_error(&diag, key_loc(&c, "num_key_value_heads"),
                  "'num_key_value_heads': expected a divisor of num_attention_heads %lld", (long long)m.heads);
        c.failed = true;
    }
    if (!check_unread(&c)) c.failed = true;
    if (!c.failed && m.needs) {   /* read exactly, then refused naming what is missing */
        dsl_error(&diag, key_loc(&c, "model_type"), "model_type \"%s\" needs %s, which planc's language cannot "
                  "write yet", family, m.needs);
        note_read_blocks(&diag, &c, &m);
        c.failed = true;
    }
    if (c.failed) goto done;

    char name[DSL_MAX_NAME + 2];
    if (name_opt) plan_name(name, sizeof name, name_opt);
    else default_name(name, sizeof name, &c, path, fam->model_type);

    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) goto done;
    put_model(mem, &m, name, path);
    fclose(mem);
    DslSource *gen = dsl_source_from_string(&arena, "(import)", text, len);
    free(text);
    DslFile *f = gen ? dsl_parse_source(&arena, &diag, gen) : NULL;
    if (!f) goto done;   /* the writer's text always parses; a diagnostic says otherwise */

    FILE *o = out_path && strcmp(out_path, "-") ? fopen(out_path, "w") : stdout;
    if (!o) {
        fprintf(stderr, "planc: error: import: cannot write %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    dsl_format(o, f);
    if (o != stdout && fclose(o) != 0) {
        fprintf(stderr, "planc: error: import: cannot write %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    const char *ctx = strcmp(m.family, "gpt2") ? "max_position_embeddings" : "n_positions";
    dsl_note(&diag, key_loc(&c, ctx), "seq %lld is %s, the longest context the model supports; set seq to the length you train at",
             (long long)m.seq, ctx);
    rc = 0;
done:
    json_decref(root);
    dsl_arena_free(&arena);
    return rc;
}

int planc_cmd_import(int argc, char **argv)
{
    const char *file = NULL, *out = NULL, *name = NULL;
    for (int i = 0; i < argc; i++) {
        if (planc_is_help(argv[i])) {
            fputs(IMPORT_HELP, stdout);
            return 0;
        } else if (strcmp(argv[i], "-o") == 0) {
            if (!(out = planc_option_value("import", argc, argv, &i, "OUT.plan"))) return 2;
        } else if (strcmp(argv[i], "--name") == 0) {
            if (!(name = planc_option_value("import", argc, argv, &i, "NAME"))) return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return planc_usage_error("import", "unknown option '%s'", argv[i]);
        } else if (file) {
            return planc_usage_error("import", "more than one file ('%s')", argv[i]);
        } else {
            file = argv[i];
        }
    }
    if (!file) return planc_usage_error("import", "%sneeds a CONFIG.json", "");
    return import_config(file, out, name);
}
