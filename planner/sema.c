/*
 * sema.c: semantic analysis, the AST of a .plan file -> a checked Plan.
 *
 * The parser accepted any `key values { ... }` shape; this pass gives it a
 * meaning. For each block it knows the keys, their value types, units,
 * ranges and defaults (the tables below, mirrored by the README's language
 * section), and reports:
 *   - unknown keys, with "did you mean" by edit distance;
 *   - duplicates, missing required keys, a value of the wrong kind or unit
 *     kind (`memory 80 GB/s`), out-of-range values, sizes that overflow
 *     64 bits;
 *   - the model's structure (embedding first, lm_head last, repeat limits);
 *   - the divisibility the layout needs: tp against heads, kv_heads and the
 *     MLP width, sequence-parallel rows, pp against the transformer blocks,
 *     global_batch against dp x micro_batch; and dp x tp x pp against the
 *     cluster's GPUs (class DSL_ERR_CLUSTER: a valid plan for another
 *     cluster, exit 1). These are planner/layout.c's rules, asked of the
 *     fields the plan block fixes: this file only points at the field, so
 *     its words are `check`'s words;
 *   - warnings that change no exit code (sequence_parallel with tp 1; link
 *     figures no hardware has, a unit slip most likely).
 * All errors are reported in one run. Fields of the plan block that are left
 * out or `auto` stay PLAN_AUTO; filling them is the planner's job, not this
 * file's. It must not compute memory or time either.
 *
 * Units: sizes in bytes, bandwidths in bytes/s, compute in FLOP/s, times in
 * seconds (plan.h).
 */
#include "planner/sema.h"

#include "planner/fp8.h"
#include "planner/layout.h"
#include "planner/model.h"
#include "planner/presets.h"
#include "planner/stacks.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds on counts, generous but small enough that products of a few of
 * them stay far from int64 overflow. */
#define MAX_DIM       (1 << 20)
#define MAX_HEADS     (1 << 16)
#define MAX_HIDDEN    (1 << 24)
#define MAX_EXPERTS   (1 << 16)
#define MAX_WINDOW    ((1ll << 31) - 1) /* sliding_window, tokens */
#define MAX_SOFTCAP   1e6             /* softcap; Gemma 2's are 50 and 30 */
#define MAX_ROPE_THETA 1e12           /* RoPE base; published ones reach 1e6 */
#define MAX_VOCAB     ((1ll << 31) - 1)
#define MAX_VOCAB_MULTIPLE (1 << 20)
#define MAX_SMS       (1 << 16)
#define MAX_SEQ       (1 << 24)
#define MAX_NODES     (1 << 20)
#define MAX_GPN       1024
#define MAX_PAR       (1 << 20)       /* dp, tp, pp */
#define MAX_BATCH     (1ll << 40)
#define MAX_CHUNKS    1024

#define N_ELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct {
    DslDiag  *d;
    DslArena *a;
    /* a device written from scratch without flops_fp32 (NULL if none):
     * an error once the model turns out to train in fp32 */
    const DslStmt *device_no_fp32;
    /* the model's positions (its embedding's, read before the blocks):
     * an MLA attention needs rope (sema_mla) */
    PosKind position;
} Sema;

/* ---- statements and values -------------------------------------------- */

/* A block's statements by key, for blocks whose keys appear at most once.
 * Each key table is checked against MAX_KEYS where it is written
 * (KEYS_FIT), so a key added to a block cannot overrun slot[]. */
#define MAX_KEYS 40
#define KEYS_FIT(t) _Static_assert(sizeof(t) / sizeof((t)[0]) <= MAX_KEYS, #t " has more keys than MAX_KEYS")
typedef struct {
    const char        *what;            /* "plan", "attention", ... */
    const char *const *keys;
    int                n;
    const DslStmt     *slot[MAX_KEYS];
} Fields;

/* Suggest a key for an unknown one, or list the valid keys. */
static void unknown_key(Sema *S, const DslStmt *st, const char *what, const char *const *keys, int n)
{
    if (S->d->n_errors > DSL_MAX_PRINTED_ERRORS) {
        /* Not printed any more: count it without the costly suggestion. */
        dsl_error(S->d, st->key_loc, "unknown key '%s' in %s", st->key, what);
        return;
    }
    const char *hint = dsl_suggest(st->key, keys, n);
    if (hint) {
        dsl_error(S->d, st->key_loc, "unknown key '%s' in %s; did you mean '%s'?", st->key, what, hint);
        return;
    }
    char list[512] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list - 40; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", keys[i]);
    dsl_error(S->d, st->key_loc, "unknown key '%s' in %s (expected one of: %s)", st->key, what, list);
}

static int key_index(const char *key, const char *const *keys, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(key, keys[i]) == 0) return i;
    return -1;
}

/* Sort the statements of a block into F's slots: unknown keys and
 * duplicates are errors. */
static void collect(Sema *S, Fields *F, const DslStmt *body)
{
    for (const DslStmt *st = body; st; st = st->next) {
        int k = key_index(st->key, F->keys, F->n);
        if (k < 0) {
            unknown_key(S, st, F->what, F->keys, F->n);
        } else if (F->slot[k]) {
            dsl_error(S->d, st->key_loc, "duplicate '%s' in %s (first set at line %d)", st->key, F->what,
                      F->slot[k]->key_loc.line);
        } else {
            F->slot[k] = st;
        }
    }
}

static const DslStmt *field(const Fields *F, const char *key)
{
    int k = key_index(key, F->keys, F->n);
    return k >= 0 ? F->slot[k] : NULL;
}

/* The value of `key value`, or NULL after reporting what is wrong. */
static const DslValue *entry_value(Sema *S, const DslStmt *st)
{
    if (st->kind == DSL_STMT_BLOCK) {
        dsl_error(S->d, st->open, "'%s' takes a value, not a block", st->key);
        return NULL;
    }
    if (st->n_args == 0) {
        dsl_error(S->d, st->key_loc, "'%s' needs a value", st->key);
        return NULL;
    }
    if (st->n_args > 1) {
        dsl_error(S->d, st->args->next->loc, "'%s' takes one value, got %d", st->key, st->n_args);
        return NULL;
    }
    return st->args;
}

/* The value as written, for messages. */
static const char *shown(Sema *S, const DslValue *v)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return "?";
    dsl_value_print(m, v);
    fclose(m);
    char *out = dsl_arena_strdup(S->a, buf);
    free(buf);
    return out;
}

static bool is_auto(const DslValue *v)
{
    return v->kind == DSL_VAL_WORD && strcmp(v->text, "auto") == 0;
}

/* An integer in [lo, hi] (or `auto` -> PLAN_AUTO when allowed). */
static bool get_int(Sema *S, const DslStmt *st, int64_t lo, int64_t hi, bool allow_auto, int64_t *out)
{
    const DslValue *v = entry_value(S, st);
    if (!v) return false;
    if (allow_auto && is_auto(v)) {
        *out = PLAN_AUTO;
        return true;
    }
    if (v->kind != DSL_VAL_NUMBER) {
        dsl_error(S->d, v->loc, "'%s' expects an integer%s, got %s", st->key, allow_auto ? " or auto" : "",
                  shown(S, v));
        return false;
    }
    if (v->overflow) return false;   /* reported by the scanner */
    if (v->unit) {
        dsl_error(S->d, v->loc, "'%s' takes a plain integer, not a %s (%s)", st->key,
                  dsl_unit_kind_name(v->unit->kind), shown(S, v));
        return false;
    }
    if (!v->is_int) {
        dsl_error(S->d, v->loc, "'%s' must be an integer, got %s", st->key, v->text);
        return false;
    }
    if (v->i < lo || v->i > hi) {
        dsl_error(S->d, v->loc, "'%s' must be between %" PRId64 " and %" PRId64 ", got %" PRId64, st->key, lo, hi,
                  v->i);
        return false;
    }
    *out = v->i;
    return true;
}

/* A plain number in the range described by lo/hi (open or closed ends). */
static bool get_real(Sema *S, const DslStmt *st, double lo, bool lo_open, double hi, bool hi_open, double *out)
{
    const DslValue *v = entry_value(S, st);
    if (!v) return false;
    if (v->kind != DSL_VAL_NUMBER) {
        dsl_error(S->d, v->loc, "'%s' expects a number, got %s", st->key, shown(S, v));
        return false;
    }
    if (v->overflow) return false;
    if (v->unit) {
        dsl_error(S->d, v->loc, "'%s' takes a plain number, not a %s (%s)", st->key,
                  dsl_unit_kind_name(v->unit->kind), shown(S, v));
        return false;
    }
    double x = v->d;
    bool below = lo_open ? !(x > lo) : !(x >= lo);
    bool above = hi_open ? !(x < hi) : !(x <= hi);
    if (below || above) {
        dsl_error(S->d, v->loc, "'%s' must be in %c%g, %g%c, got %s", st->key, lo_open ? '(' : '[', lo, hi,
                  hi_open ? ')' : ']', v->text);
        return false;
    }
    *out = x;
    return true;
}

/* Units of each kind, for messages. ORDER UNITKIND */
static const char *const UNIT_LISTS[] = {
    "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB",
    "B/s, KB/s, MB/s, GB/s, TB/s, Gb/s, Tb/s",
    "GFLOPS, TFLOPS, PFLOPS",
    "ns, us, ms, s",
};
static const char *const UNIT_EXAMPLES[] = { "80 GiB", "300 GB/s", "312 TFLOPS", "5 us" };

/* A quantity of the given unit kind in base units; sizes also exactly in
 * bytes (*bytes, may be NULL). Negative values are errors, and so is zero
 * unless zero_ok. */
static bool get_quantity(Sema *S, const DslStmt *st, DslUnitKind kind, bool zero_ok, double *out, uint64_t *bytes)
{
    const DslValue *v = entry_value(S, st);
    if (!v) return false;
    if (v->kind != DSL_VAL_NUMBER) {
        dsl_error(S->d, v->loc, "'%s' expects a %s such as %s, got %s", st->key, dsl_unit_kind_name(kind),
                  UNIT_EXAMPLES[kind], shown(S, v));
        return false;
    }
    if (v->overflow) return false;
    if (!v->unit) {
        dsl_error(S->d, v->loc, "'%s' needs a unit: a %s such as %s", st->key, dsl_unit_kind_name(kind),
                  UNIT_EXAMPLES[kind]);
        return false;
    }
    if (v->unit->kind != kind) {
        dsl_error(S->d, v->loc, "'%s' expects a %s (%s), got a %s (%s)", st->key, dsl_unit_kind_name(kind),
                  UNIT_LISTS[kind], dsl_unit_kind_name(v->unit->kind), shown(S, v));
        return false;
    }
    if (v->d < 0 || (!zero_ok && v->d == 0)) {
        dsl_error(S->d, v->loc, "'%s' must be %s, got %s", st->key, zero_ok ? "zero or more" : "positive",
                  shown(S, v));
        return false;
    }
    double x = v->d * v->unit->scale;
    if (kind == DSL_UNIT_SIZE) {
        uint64_t b;
        if (v->is_int && v->unit->iscale) {
            if ((uint64_t)v->i > UINT64_MAX / v->unit->iscale) {
                dsl_error(S->d, v->loc, "'%s' %s does not fit in 64 bits", st->key, shown(S, v));
                return false;
            }
            b = (uint64_t)v->i * v->unit->iscale;
        } else {
            if (!(x < 18446744073709551616.0)) {
                dsl_error(S->d, v->loc, "'%s' %s does not fit in 64 bits", st->key, shown(S, v));
                return false;
            }
            b = (uint64_t)llround(x);
        }
        if (bytes) *bytes = b;
    }
    if (!isfinite(x)) {
        dsl_error(S->d, v->loc, "'%s' %s is out of range", st->key, shown(S, v));
        return false;
    }
    *out = x;
    return true;
}

/* One of a list of names (or `auto` -> PLAN_AUTO when allowed). */
/* Names from other software that mean one of ours, tried before the
 * spelling distance: transformers' hidden_act "silu" on a Llama MLP is our
 * swiglu (silu on the gate), not the nearer-spelt gelu. The hint is given
 * only where the enum has the name it points to. */
static const char *enum_alias(const char *word, const char *const *names, int n)
{
    static const struct { const char *alias, *ours; } ALIASES[] = {
        { "silu", "swiglu" }, { "swish", "swiglu" }, { "gelu_new", "gelu" }, { "gelu_pytorch_tanh", "gelu" },
        { "rms", "rmsnorm" }, { "rms_norm", "rmsnorm" }, { "layer_norm", "layernorm" },
        { "p2p", "ring" }, { "a2a", "all_to_all" }, { "allgather", "all_gather" }, { "a2a+p2p", "hierarchical" },
    };
    for (size_t i = 0; i < N_ELEMS(ALIASES); i++)
        if (strcmp(word, ALIASES[i].alias) == 0 && key_index(ALIASES[i].ours, names, n) >= 0) return ALIASES[i].ours;
    return NULL;
}

static bool get_enum(Sema *S, const DslStmt *st, const char *const *names, int n, bool allow_auto, int *out)
{
    const DslValue *v = entry_value(S, st);
    if (!v) return false;
    if (allow_auto && is_auto(v)) {
        *out = PLAN_AUTO;
        return true;
    }
    if (v->kind == DSL_VAL_WORD || v->kind == DSL_VAL_NUMBER) {
        int k = key_index(v->text, names, n);   /* `zero`-like enums may be numbers */
        if (k >= 0 && !(v->kind == DSL_VAL_NUMBER && v->unit)) {
            *out = k;
            return true;
        }
    }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? (i == n - 1 && !allow_auto ? " or " : ", ") : "",
                                names[i]);
    if (allow_auto) snprintf(list + len, sizeof list - len, " or auto");
    const char *hint = v->kind == DSL_VAL_WORD ? enum_alias(v->text, names, n) : NULL;
    if (!hint && v->kind == DSL_VAL_WORD) hint = dsl_suggest(v->text, names, n);
    if (hint)
        dsl_error(S->d, v->loc, "unknown %s %s (expected %s); did you mean '%s'?", st->key, shown(S, v), list, hint);
    else
        dsl_error(S->d, v->loc, "unknown %s %s (expected %s)", st->key, shown(S, v), list);
    return false;
}

/* true/false (or `auto` -> PLAN_AUTO when allowed). */
static bool get_bool(Sema *S, const DslStmt *st, bool allow_auto, int *out)
{
    const DslValue *v = entry_value(S, st);
    if (!v) return false;
    if (allow_auto && is_auto(v)) {
        *out = PLAN_AUTO;
        return true;
    }
    if (v->kind != DSL_VAL_BOOL) {
        dsl_error(S->d, v->loc, "'%s' expects true or false%s, got %s", st->key, allow_auto ? " or auto" : "",
                  shown(S, v));
        return false;
    }
    *out = v->b;
    return true;
}

/* A non-empty string (the scanner has already refused control characters). */
static bool get_string(Sema *S, const DslStmt *st, const char **out)
{
    const DslValue *v = entry_value(S, st);
    if (!v) return false;
    if (v->kind != DSL_VAL_STRING) {
        dsl_error(S->d, v->loc, "'%s' expects a double-quoted string, got %s", st->key, shown(S, v));
        return false;
    }
    if (!v->text[0]) {
        dsl_error(S->d, v->loc, "'%s' must not be empty", st->key);
        return false;
    }
    *out = v->text;
    return true;
}

/* A block statement's body; `key` alone (no braces) counts as an empty
 * block. Reports values where none are allowed. */
static bool block_body(Sema *S, const DslStmt *st, int max_args, const DslStmt **body)
{
    if (st->n_args > max_args) {
        const DslValue *v = st->args;
        for (int i = 0; i < max_args; i++) v = v->next;
        dsl_error(S->d, v->loc, max_args ? "unexpected %s after '%s %s'" : "unexpected %s after '%s'%s", shown(S, v),
                  st->key, max_args ? st->args->text : "");
        return false;
    }
    *body = st->kind == DSL_STMT_BLOCK ? st->body : NULL;
    return true;
}

/* A required key is absent: point at the block and show an example. */
static void missing(Sema *S, const DslStmt *st, const char *key, const char *example)
{
    dsl_error(S->d, st->key_loc, "%s needs '%s' (for example: %s)", st->key, key, example);
}

/* The single name after a block keyword (`model NAME {`). */
static const char *block_name(Sema *S, const DslStmt *st)
{
    if (st->n_args == 0 || st->args->kind != DSL_VAL_WORD) {
        dsl_error(S->d, st->n_args ? st->args->loc : st->key_loc, "%s needs a name: %s NAME { ... }", st->key,
                  st->key);
        return NULL;
    }
    if (st->n_args > 1) {
        dsl_error(S->d, st->args->next->loc, "unexpected %s after '%s %s'", shown(S, st->args->next), st->key,
                  st->args->text);
        return NULL;
    }
    if (st->kind != DSL_STMT_BLOCK) {
        dsl_error(S->d, st->loc, "%s %s needs a block: %s %s { ... }", st->key, st->args->text, st->key,
                  st->args->text);
        return NULL;
    }
    return st->args->text;
}

/* ---- model ------------------------------------------------------------- */

static const char *const POS_NAMES[] = { "learned", "rope", "none" };          /* ORDER PosKind */
static const char *const NORM_NAMES[] = { "layernorm", "rmsnorm" };            /* ORDER NormKind */
static const char *const NORM_POSITION_NAMES[] = { "pre", "post", "sandwich" }; /* ORDER NormPosition */
/* qk_norm's words: `none`, `rmsnorm`, `rmsnorm_projection` (QkNormKind,
 * in its order) and `layernorm`, which is refused by name (no released
 * model normalises each head by a LayerNorm) */
static const char *const QK_NORM_WORDS[] = { "none", "rmsnorm", "rmsnorm_projection", "layernorm" };
static const char *const ATTN_KIND_NAMES[] = { "mha", "mla" };                 /* ORDER AttnKind */
static const char *const ACT_NAMES[] = { "gelu", "relu", "swiglu", "geglu" };  /* ORDER ActKind */
static const char *const SCORE_NAMES[] = { "softmax", "sigmoid" };               /* ORDER MoeScore */
static const char *const GROUP_SCORE_NAMES[] = { "top_sum", "max" };            /* ORDER MoeGroupScore */
static const char *const DTYPE_NAMES[] = { "fp32", "bf16", "fp16" };           /* ORDER PlanDtype */

/* Layers under construction (grown in the arena). */
typedef struct {
    Layer *v;
    int    n, cap;
    bool   too_many;    /* the layer limit was hit (reported once) */
} Layers;

static Layer *layers_push(Sema *S, Layers *L)
{
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 16;
        Layer *v = dsl_arena_calloc(S->a, (size_t)cap, sizeof *v);
        if (L->n) memcpy(v, L->v, (size_t)L->n * sizeof *v);
        L->v = v;
        L->cap = cap;
    }
    return &L->v[L->n++];
}

static void layer_at(Layer *l, LayerKind kind, const DslStmt *st)
{
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->line = st->key_loc.line;
    l->col = st->key_loc.col;
}

static const char *const ROPE_SCALING_NAMES[] = { "none", "linear", "llama3", "yarn" };   /* ORDER RopeScalingKind */

/* yarn's mscale and mscale_all_dim (DeepSeek-V2/V3). Three readings of
 * the pair exist: transformers' _compute_yarn_parameters multiplies cos
 * and sin by m(f, mscale) / m(f, mscale_all_dim) only when both are
 * non-zero, else by m(f, 1); DeepSeek's own YaRN (and Megatron-Core's
 * _yarn_get_concentration_factor) always by the quotient. They agree
 * when mscale_all_dim > 0, or when it is 0 and mscale is 1: the language
 * takes those pairs only, so a .plan means the same to all three. */
static void sema_yarn_mscale(Sema *S, Fields *F, RopeScaling *r)
{
    const DslStmt *ms = field(F, "mscale"), *all = field(F, "mscale_all_dim");
    bool ok = true;
    if (ms) ok &= get_real(S, ms, 0, true, 1e6, false, &r->mscale);
    if (all) ok &= get_real(S, all, 0, false, 1e6, false, &r->mscale_all_dim);
    if (ok && ms && r->mscale != 1 && r->mscale_all_dim == 0)
        dsl_error(S->d, ms->key_loc, "mscale %g is read only beside a non-zero mscale_all_dim (transformers' "
                  "YaRN then scales cos and sin by 0.1 ln(factor) + 1, DeepSeek's by 0.1 mscale ln(factor) + 1); "
                  "give mscale_all_dim, or leave mscale at 1", r->mscale);
}

/* rope_scaling { type llama3; factor 8; low_freq_factor 1; high_freq_factor 4;
 * original_max_position 8192 } (transformers' config.rope_scaling, its
 * rope_type and key names; modeling_rope_utils.py). Each type takes its own
 * keys: another type's key is an error, not ignored. */
static void sema_rope_scaling(Sema *S, const DslStmt *st, RopeScaling *r)
{
    static const char *const keys[] = { "type", "factor", "low_freq_factor", "high_freq_factor",
                                        "original_max_position", "beta_fast", "beta_slow", "mscale",
                                        "mscale_all_dim" };
    /* which types read each key (bit per RopeScalingKind) */
    enum { LIN = 1 << ROPE_SCALING_LINEAR, L3 = 1 << ROPE_SCALING_LLAMA3, YA = 1 << ROPE_SCALING_YARN };
    static const int takes[] = { LIN | L3 | YA, LIN | L3 | YA, L3, L3, L3 | YA, YA, YA, YA, YA };   /* ORDER keys */
    Fields F = { "rope_scaling", keys, N_ELEMS(keys), { 0 } };
    const DslStmt *body, *s;
    *r = (RopeScaling){ .kind = ROPE_SCALING_NONE, .factor = 1, .low_freq_factor = 1, .high_freq_factor = 4,
                        .beta_fast = 32, .beta_slow = 1, .mscale = 1, .mscale_all_dim = 0 };
    if (!block_body(S, st, 0, &body)) return;
    if (st->kind != DSL_STMT_BLOCK) {
        dsl_error(S->d, st->key_loc, "rope_scaling needs a block: rope_scaling { type llama3; factor 8; "
                  "original_max_position 8192 }");
        return;
    }
    collect(S, &F, body);
    int k;
    if (!(s = field(&F, "type"))) {
        missing(S, st, "type", "type llama3");
        return;
    }
    if (!get_enum(S, s, ROPE_SCALING_NAMES, N_ELEMS(ROPE_SCALING_NAMES), false, &k)) return;
    r->kind = (RopeScalingKind)k;
    for (int i = 1; i < N_ELEMS(keys); i++)
        if ((s = field(&F, keys[i])) && !(takes[i] & (1 << k)))
            dsl_error(S->d, s->key_loc, "'%s' is not a key of rope_scaling type %s", keys[i], ROPE_SCALING_NAMES[k]);
    if (r->kind == ROPE_SCALING_NONE) return;
    if ((s = field(&F, "factor"))) get_real(S, s, 1, false, 1e6, false, &r->factor);
    else missing(S, st, "factor", "factor 8");
    if ((s = field(&F, "low_freq_factor"))) get_real(S, s, 0, true, 1e6, false, &r->low_freq_factor);
    if ((s = field(&F, "high_freq_factor"))) get_real(S, s, 0, true, 1e6, false, &r->high_freq_factor);
    if ((s = field(&F, "beta_fast"))) get_real(S, s, 0, true, 1e6, false, &r->beta_fast);
    if ((s = field(&F, "beta_slow"))) get_real(S, s, 0, true, 1e6, false, &r->beta_slow);
    if ((s = field(&F, "original_max_position"))) get_int(S, s, 1, MAX_SEQ, false, &r->original_max_position);
    else if (r->kind != ROPE_SCALING_LINEAR) missing(S, st, "original_max_position", "original_max_position 8192");
    if (r->kind == ROPE_SCALING_LLAMA3 && r->high_freq_factor <= r->low_freq_factor && (s = field(&F, "high_freq_factor")))
        dsl_error(S->d, s->key_loc, "high_freq_factor %g must exceed low_freq_factor %g (wavelengths between "
                  "original_max_position / high and / low are interpolated)", r->high_freq_factor, r->low_freq_factor);
    if (r->kind == ROPE_SCALING_YARN && r->beta_fast <= r->beta_slow && (s = field(&F, "beta_fast")))
        dsl_error(S->d, s->key_loc, "beta_fast %g must exceed beta_slow %g", r->beta_fast, r->beta_slow);
    if (r->kind == ROPE_SCALING_YARN) sema_yarn_mscale(S, &F, r);
}

/* embedding { dim; position; rope_theta; rope_local_theta; rope_scaling { } }:
 * the model width comes from here; rope_theta is RoPE's base (default
 * 10000, Llama 3: 500000) and, with rope_scaling, needs `position rope`;
 * rope_local_theta is the base of the windowed (local) attention layers,
 * unscaled (Gemma 3: 10000 beside rope_theta 1000000). */
static void sema_embedding(Sema *S, const DslStmt *st, Layer *l, int64_t *dim)
{
    static const char *const keys[] = { "dim", "position", "rope_theta", "rope_local_theta", "rope_scaling", "scale" };
    static const char *const scales[] = { "none", "sqrt_dim" };
    Fields F = { "embedding", keys, N_ELEMS(keys), { 0 } };
    const DslStmt *body;
    layer_at(l, LAYER_EMBEDDING, st);
    l->position = POS_LEARNED;
    if (!block_body(S, st, 0, &body)) return;
    collect(S, &F, body);
    const DslStmt *s;
    if ((s = field(&F, "dim"))) get_int(S, s, 1, MAX_DIM, false, dim);
    else missing(S, st, "dim", "embedding { dim 768 }");
    int pos;
    if ((s = field(&F, "position")) && get_enum(S, s, POS_NAMES, N_ELEMS(POS_NAMES), false, &pos))
        l->position = (PosKind)pos;
    int sc;   /* scale sqrt_dim: Gemma multiplies the embedding by sqrt(dim) */
    if ((s = field(&F, "scale")) && get_enum(S, s, scales, N_ELEMS(scales), false, &sc)) l->embed_scale = sc == 1;
    if ((s = field(&F, "rope_theta")) && get_real(S, s, 1, false, MAX_ROPE_THETA, false, &l->rope_theta) &&
        l->position != POS_ROPE)
        dsl_error(S->d, s->key_loc, "rope_theta needs position rope (the model's positions are %s)",
                  POS_NAMES[l->position]);
    if ((s = field(&F, "rope_local_theta")) &&
        get_real(S, s, 1, false, MAX_ROPE_THETA, false, &l->rope_local_theta) && l->position != POS_ROPE)
        dsl_error(S->d, s->key_loc, "rope_local_theta needs position rope (the model's positions are %s)",
                  POS_NAMES[l->position]);
    l->rope_scaling = (RopeScaling){ .kind = ROPE_SCALING_NONE, .factor = 1 };
    if ((s = field(&F, "rope_scaling"))) {
        sema_rope_scaling(S, s, &l->rope_scaling);
        if (l->position != POS_ROPE)
            dsl_error(S->d, s->key_loc, "rope_scaling needs position rope (the model's positions are %s)",
                      POS_NAMES[l->position]);
    }
}

/* `bias true|false`, or for attention also `bias qkv`: biases on the
 * query, key and value projections only (Qwen2). */
static void sema_bias(Sema *S, const DslStmt *st, bool attention, Layer *l)
{
    const DslValue *v = entry_value(S, st);
    int x;
    if (v && v->kind == DSL_VAL_WORD && strcmp(v->text, "qkv") == 0) {
        if (!attention) {
            dsl_error(S->d, v->loc, "'bias qkv' is for attention (biases on Q, K and V); an mlp's bias is "
                      "true or false");
            return;
        }
        l->bias = l->qkv_bias_only = true;
        return;
    }
    if (v && v->kind != DSL_VAL_BOOL && attention) {
        dsl_error(S->d, v->loc, "'bias' expects true, false or qkv, got %s", shown(S, v));
        return;
    }
    if (get_bool(S, st, false, &x)) {
        l->bias = x;
        l->qkv_bias_only = false;
    }
}

/* Shared tail of attention, mlp and moe: the sublayer's norm (its kind and
 * position: pre by default) and biases. */
static void sema_norm_bias(Sema *S, const Fields *F, Layer *l)
{
    const DslStmt *s;
    int x;
    l->norm = NORM_LAYERNORM;
    l->norm_pos = NORM_POS_PRE;
    l->bias = true;
    l->qkv_bias_only = false;
    if ((s = field(F, "norm")) && get_enum(S, s, NORM_NAMES, N_ELEMS(NORM_NAMES), false, &x)) l->norm = (NormKind)x;
    if ((s = field(F, "norm_position")) &&
        get_enum(S, s, NORM_POSITION_NAMES, N_ELEMS(NORM_POSITION_NAMES), false, &x))
        l->norm_pos = (NormPosition)x;
    if ((s = field(F, "bias"))) sema_bias(S, s, l->kind == LAYER_ATTENTION, l);
}

/* sliding_window W [every K]: every block slides over W tokens; with
 * `every K` the K-th, 2K-th, ... block of the model (block i, counted from
 * 0, when (i + 1) % K == 0: transformers' layer_types for Gemma 2, K 2,
 * and Gemma 3's sliding_window_pattern, K 6) attends to all earlier
 * tokens instead (resolve_window_every, once the blocks are counted). */
static void sema_window(Sema *S, const DslStmt *s, Layer *l)
{
    DslStmt w = *s;
    if (s->kind == DSL_STMT_ENTRY && s->n_args == 3) {
        const DslValue *kw = s->args->next;
        if (kw->kind != DSL_VAL_WORD || strcmp(kw->text, "every") != 0) {
            dsl_error(S->d, kw->loc, "'sliding_window' takes W or W every K (sliding_window 4096 every 2), "
                      "got %s", shown(S, kw));
            return;
        }
        DslStmt k = *s;
        k.args = kw->next;
        k.n_args = 1;
        if (!get_int(S, &k, 2, PLAN_MAX_LAYERS, false, &l->window_every)) return;
        w.n_args = 1;
    }
    get_int(S, &w, 1, MAX_WINDOW, false, &l->window);
}

/* Clear the window of every K-th block of `sliding_window W every K`
 * (block i from 0 global when (i + 1) % K == 0; sema_window). */
static void resolve_window_every(Layer *v, int n)
{
    for (int i = 0, block = 0; i < n; i++) {
        if (v[i].kind != LAYER_ATTENTION) continue;
        if (v[i].window_every > 0 && (block + 1) % v[i].window_every == 0) v[i].window = 0;
        block++;
    }
}

/* rope_local_theta (Gemma 3's local RoPE base) applies to the windowed
 * attention layers: a model with none has no local block to apply it to
 * (every window cleared by `every 1`, or none written), which is an error,
 * not a key silently ignored. */
static void check_rope_local(Sema *S, const DslStmt *m, const Layer *v, int n)
{
    const Layer *emb = NULL;
    bool local = false;
    for (int i = 0; i < n; i++) {
        if (v[i].kind == LAYER_EMBEDDING) emb = &v[i];
        if (v[i].kind == LAYER_ATTENTION && v[i].window > 0) local = true;
    }
    if (emb && emb->rope_local_theta > 0 && !local)
        dsl_error(S->d, m->key_loc, "rope_local_theta (the embedding at line %d) is the RoPE base of the "
                  "attention layers with a sliding window, and no attention layer has one", emb->line);
}

/* kind mla's keys (MLA, DeepSeek-V2): q_lora_rank (0 or absent: no query
 * compression), and the four widths every MLA has. ORDER the MLA fields
 * of Layer (plan.h). */
static const char *const MLA_KEYS[] = { "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                        "v_head_dim" };

/* attention { kind mla; q_lora_rank; kv_lora_rank; qk_rope_head_dim;
 * qk_nope_head_dim; v_head_dim }: multi-head latent attention. Every head
 * has its own key and value from the latent, so GQA's kv_heads and
 * head_dim have no meaning (refused beside it), nor Qwen3's per-head
 * q/k norm (the latents are normalised instead) or `bias qkv`. */
static void sema_mla(Sema *S, const Fields *F, const DslStmt *st, const DslStmt *kind, Layer *l)
{
    static const char *const foreign[] = { "kv_heads", "head_dim", "qk_norm" };
    static const char *const why[] = {
        "every MLA head has its own key and value, up-projected from the latent",
        "an MLA head is qk_nope_head_dim + qk_rope_head_dim wide in q and k, v_head_dim in v",
        "MLA normalises its latents (q_a_layernorm, kv_a_layernorm), not each head",
    };
    const DslStmt *s;
    for (int i = 0; i < N_ELEMS(foreign); i++)
        if ((s = field(F, foreign[i])))
            dsl_error(S->d, s->key_loc, "%s has no meaning with kind mla: %s", foreign[i], why[i]);
    if (l->bias && l->qkv_bias_only && (s = field(F, "bias")))
        dsl_error(S->d, s->args->loc, "bias qkv has no meaning with kind mla: write bias true (q_a_proj, "
                  "kv_a_proj_with_mqa and o_proj, DeepSeek's attention_bias) or bias false");
    int64_t *dst[] = { &l->q_lora_rank, &l->kv_lora_rank, &l->qk_rope_dim, &l->qk_nope_dim, &l->v_head_dim };
    for (int i = 0; i < N_ELEMS(MLA_KEYS); i++) {
        if ((s = field(F, MLA_KEYS[i]))) get_int(S, s, i == 0 ? 0 : 1, MAX_DIM, false, dst[i]);
        else if (i > 0)
            missing(S, st, MLA_KEYS[i], "attention { kind mla; kv_lora_rank 512; qk_rope_head_dim 64; "
                    "qk_nope_head_dim 128; v_head_dim 128 }");
    }
    /* the decoupled RoPE (DeepSeek-V2 Sec. 2.1.3) rotates qk_rope_head_dim
       of each query and key head */
    if (S->position != POS_ROPE)
        dsl_error(S->d, kind->args->loc, "kind mla needs position rope (its decoupled RoPE rotates "
                  "qk_rope_head_dim of each query and key head; the model's positions are %s)",
                  POS_NAMES[S->position]);
    else if (l->qk_rope_dim % 2 && (s = field(F, "qk_rope_head_dim")))
        dsl_error(S->d, s->args->loc, "qk_rope_head_dim %" PRId64 " is odd; RoPE rotates pairs of a head's "
                  "elements", l->qk_rope_dim);
    l->kv_heads = l->heads;
    l->head_dim = 0;
}

/* attention { kind; heads; kv_heads; head_dim; sliding_window; norm; bias;
 * qk_norm; norm_position; softcap; query_pre_attn_scalar; MLA's keys }:
 * without head_dim, heads must divide the width (head dim = dim / heads);
 * with it, Q and the output projection are heads x head_dim wide (Gemma 7B:
 * 16 x 256 on a 3072 model). kv_heads must divide the heads (GQA groups).
 * sliding_window W: each token attends to the last W tokens, itself
 * included (Mistral). qk_norm rmsnorm: an RMSNorm of each query and key
 * head before RoPE (Qwen3). softcap C: scores C tanh(s / C) before the mask
 * (Gemma 2); query_pre_attn_scalar Q: scores scaled by 1/sqrt(Q), not
 * 1/sqrt(head_dim) (Gemma 2 and 3). kind mla: sema_mla. */
static void sema_attention(Sema *S, const DslStmt *st, Layer *l, int64_t dim)
{
    static const char *const keys[] = { "heads", "kv_heads", "head_dim", "sliding_window", "norm", "bias",
                                        "qk_norm", "softcap", "query_pre_attn_scalar", "norm_position", "kind",
                                        "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                        "v_head_dim" };
    Fields F = { "attention", keys, N_ELEMS(keys), { 0 } };
    const DslStmt *body, *s, *kind;
    layer_at(l, LAYER_ATTENTION, st);
    sema_norm_bias(S, &F, l);
    if (!block_body(S, st, 0, &body)) return;
    collect(S, &F, body);
    sema_norm_bias(S, &F, l);
    int k;
    if ((kind = field(&F, "kind")) && get_enum(S, kind, ATTN_KIND_NAMES, N_ELEMS(ATTN_KIND_NAMES), false, &k))
        l->attn = (AttnKind)k;
    const DslStmt *hs = field(&F, "heads");
    if (!hs) {
        missing(S, st, "heads", "attention { heads 12 }");
        return;
    }
    if (!get_int(S, hs, 1, MAX_HEADS, false, &l->heads)) return;
    if (l->attn == ATTN_MLA) {
        sema_mla(S, &F, st, kind, l);
        if ((s = field(&F, "sliding_window"))) get_int(S, s, 1, MAX_WINDOW, false, &l->window);
        return;
    }
    for (int i = 0; i < N_ELEMS(MLA_KEYS); i++)
        if ((s = field(&F, MLA_KEYS[i])))
            dsl_error(S->d, s->key_loc, "%s needs kind mla (multi-head latent attention: attention { kind mla; "
                      "... })", MLA_KEYS[i]);
    l->kv_heads = l->heads;
    if ((s = field(&F, "kv_heads")) && get_int(S, s, 1, MAX_HEADS, false, &l->kv_heads) && l->heads % l->kv_heads)
        dsl_error(S->d, s->args->loc, "kv_heads %" PRId64 " does not divide heads %" PRId64
                  " (each key/value head serves a group of query heads)", l->kv_heads, l->heads);
    if ((s = field(&F, "sliding_window"))) sema_window(S, s, l);
    if ((s = field(&F, "softcap"))) get_real(S, s, 0, true, MAX_SOFTCAP, false, &l->softcap);
    if ((s = field(&F, "query_pre_attn_scalar"))) get_real(S, s, 0, true, 1e9, false, &l->query_scalar);
    int q;
    if ((s = field(&F, "qk_norm")) && get_enum(S, s, QK_NORM_WORDS, N_ELEMS(QK_NORM_WORDS), false, &q)) {
        if (q == 3)
            dsl_error(S->d, s->args->loc, "qk_norm layernorm is not supported: planc normalises each query "
                      "and key head by an RMSNorm (qk_norm rmsnorm: Qwen3, Gemma 3) or the whole q and k "
                      "projections (qk_norm rmsnorm_projection: OLMo-2)");
        else
            l->qk_norm = (QkNormKind)q;
    }
    if ((s = field(&F, "head_dim"))) {
        get_int(S, s, 1, MAX_DIM, false, &l->head_dim);
        return;
    }
    if (dim > 0 && dim % l->heads)
        dsl_error(S->d, hs->args->loc, "heads %" PRId64 " does not divide the model dim %" PRId64
                  " (or give head_dim)", l->heads, dim);
}

/* The feed-forward keys an MLP and a mixture's experts share (hidden,
 * act, norm, bias) into l, a layer of `kind` with the default activation
 * `act`; hidden defaults to 4 x dim (GPT-2). Returns the block's fields
 * (F, filled) or false when the statement has no block. */
static bool sema_ffn(Sema *S, const DslStmt *st, Layer *l, LayerKind kind, ActKind act, int64_t dim,
                     Fields *F)
{
    const DslStmt *body, *s;
    layer_at(l, kind, st);
    l->hidden = 4 * dim;
    l->act = act;
    sema_norm_bias(S, F, l);
    if (!block_body(S, st, 0, &body)) return false;
    collect(S, F, body);
    sema_norm_bias(S, F, l);
    if ((s = field(F, "hidden"))) get_int(S, s, 1, MAX_HIDDEN, false, &l->hidden);
    int x;
    if ((s = field(F, "act")) && get_enum(S, s, ACT_NAMES, N_ELEMS(ACT_NAMES), false, &x)) l->act = (ActKind)x;
    return true;
}

/* mlp { hidden; act; norm; bias; norm_position }: gelu by default (GPT-2). */
static void sema_mlp(Sema *S, const DslStmt *st, Layer *l, int64_t dim)
{
    static const char *const keys[] = { "hidden", "act", "norm", "bias", "norm_position" };
    Fields F = { "mlp", keys, N_ELEMS(keys), { 0 } };
    sema_ffn(S, st, l, LAYER_MLP, ACT_GELU, dim, &F);
}

/* Grouped routing (DeepSeek-V3's n_group and topk_group): route_groups G
 * divides the experts, route_top_groups Kg (default G: every group) is 1
 * .. G, and the Kg groups hold at least top_k experts; route_group_score
 * top_sum (V3's) or max (V2's group_limited_greedy) only with them. */
static void sema_route_groups(Sema *S, const Fields *F, Layer *l)
{
    const DslStmt *gs = field(F, "route_groups"), *ks = field(F, "route_top_groups"),
                  *ss = field(F, "route_group_score");
    int x;
    if (!gs && (ks || ss)) {
        dsl_error(S->d, (ks ? ks : ss)->key_loc, "%s without route_groups (give route_groups G)",
                  (ks ? ks : ss)->key);
        return;
    }
    if (ss && get_enum(S, ss, GROUP_SCORE_NAMES, N_ELEMS(GROUP_SCORE_NAMES), false, &x))
        l->route_group_score = (MoeGroupScore)x;
    if (!gs || !get_int(S, gs, 1, MAX_EXPERTS, false, &l->route_groups)) return;
    if (l->experts % l->route_groups) {
        dsl_error(S->d, gs->args->loc, "route_groups %" PRId64 " does not divide experts %" PRId64,
                  l->route_groups, l->experts);
        return;
    }
    l->route_top_groups = l->route_groups;
    if (ks && !get_int(S, ks, 1, l->route_groups, false, &l->route_top_groups)) return;
    if (l->route_top_groups * (l->experts / l->route_groups) < l->top_k)
        dsl_error(S->d, (ks ? ks : gs)->args->loc, "route_top_groups %" PRId64 " of %" PRId64 " experts each "
                  "hold fewer than top_k %" PRId64 " experts", l->route_top_groups, l->experts / l->route_groups,
                  l->top_k);
}

/* Aux-loss-free balancing (DeepSeek-V3): expert_bias true on sigmoid
 * scores only (Megatron-Core's TransformerConfig refuses an expert bias
 * with any other score function: a bias beside softmax probabilities is
 * not DeepSeek's rule), bias_update_rate R > 0 (default 1e-3) only with it. */
static void sema_expert_bias(Sema *S, const Fields *F, Layer *l)
{
    const DslStmt *bs = field(F, "expert_bias"), *rs = field(F, "bias_update_rate");
    int x;
    if (bs && get_bool(S, bs, false, &x)) l->expert_bias = x != 0;
    if (rs && !l->expert_bias) {
        dsl_error(S->d, rs->key_loc, "bias_update_rate without expert_bias true (the bias it moves)");
        return;
    }
    if (!l->expert_bias) return;
    l->bias_update_rate = 1e-3;
    if (rs) get_real(S, rs, 0, true, 1, false, &l->bias_update_rate);
    if (l->score != MOE_SCORE_SIGMOID)
        dsl_error(S->d, bs->args->loc, "expert_bias true with score softmax: the aux-loss-free bias is added "
                  "to sigmoid scores (DeepSeek-V3; Megatron-Core refuses it otherwise); give score sigmoid");
}

/* moe { experts; top_k; hidden; act; shared; norm; bias; aux_loss;
 * capacity_factor; score; norm_topk_prob; shared_hidden; shared_gate;
 * route_groups; route_top_groups; route_group_score; norm_position;
 * routed_scale; expert_bias; bias_update_rate }: a mixture of experts
 * in place of an MLP. hidden defaults to 4 x dim as the MLP's, act to
 * swiglu (Mixtral), shared to 0, aux_loss to 0, capacity_factor to none
 * (dropless), score to softmax, norm_topk_prob to true (Mixtral's gate),
 * shared_hidden to hidden, shared_gate to false, routed_scale to 1. */
static void sema_moe(Sema *S, const DslStmt *st, Layer *l, int64_t dim)
{
    static const char *const keys[] = { "experts", "top_k", "hidden", "act", "shared", "norm", "bias",
                                        "aux_loss", "capacity_factor", "score", "norm_topk_prob",
                                        "shared_hidden", "shared_gate", "route_groups", "route_top_groups",
                                        "norm_position", "routed_scale", "expert_bias", "bias_update_rate",
                                        "route_group_score" };
    Fields F = { "moe", keys, N_ELEMS(keys), { 0 } };
    const DslStmt *s, *es, *ks;
    int x;
    if (!sema_ffn(S, st, l, LAYER_MOE, ACT_SWIGLU, dim, &F)) return;
    if ((s = field(&F, "score")) && get_enum(S, s, SCORE_NAMES, N_ELEMS(SCORE_NAMES), false, &x))
        l->score = (MoeScore)x;
    if ((s = field(&F, "norm_topk_prob")) && get_bool(S, s, false, &x)) l->topk_unnormalised = x == 0;
    if ((s = field(&F, "shared"))) get_int(S, s, 0, MAX_EXPERTS, false, &l->shared);
    if ((s = field(&F, "shared_hidden"))) get_int(S, s, 1, MAX_HIDDEN, false, &l->shared_hidden);
    if ((s = field(&F, "shared_gate")) && get_bool(S, s, false, &x)) l->shared_gate = x != 0;
    /* the shared experts' own keys mean nothing without shared experts */
    const DslStmt *own[] = { field(&F, "shared_hidden"), field(&F, "shared_gate") };
    for (size_t i = 0; i < N_ELEMS(own); i++)
        if (own[i] && l->shared == 0)
            dsl_error(S->d, own[i]->key_loc, "%s without shared experts (give shared N, N >= 1)", own[i]->key);
    if ((s = field(&F, "aux_loss"))) get_real(S, s, 0, false, 1e6, false, &l->aux_loss);
    if ((s = field(&F, "capacity_factor"))) get_real(S, s, 0, true, 1e6, false, &l->capacity_factor);
    if ((s = field(&F, "routed_scale"))) get_real(S, s, 0, true, 1e6, false, &l->routed_scale);
    sema_expert_bias(S, &F, l);
    es = field(&F, "experts");
    ks = field(&F, "top_k");
    if (!es) missing(S, st, "experts", "moe { experts 8; top_k 2 }");
    if (!ks) missing(S, st, "top_k", "moe { experts 8; top_k 2 }");
    bool ok_e = es && get_int(S, es, 1, MAX_EXPERTS, false, &l->experts);
    bool ok_k = ks && get_int(S, ks, 1, MAX_EXPERTS, false, &l->top_k);
    if (ok_e && ok_k && l->top_k > l->experts)
        dsl_error(S->d, ks->args->loc, "top_k %" PRId64 " > experts %" PRId64
                  " (each token picks top_k distinct experts)", l->top_k, l->experts);
    if (ok_e && ok_k) sema_route_groups(S, &F, l);
}

/* norm { kind }: the final norm before the head. */
static void sema_final_norm(Sema *S, const DslStmt *st, Layer *l)
{
    static const char *const keys[] = { "kind" };
    Fields F = { "norm", keys, N_ELEMS(keys), { 0 } };
    const DslStmt *body, *s;
    int x;
    layer_at(l, LAYER_NORM, st);
    l->norm = NORM_LAYERNORM;
    if (!block_body(S, st, 0, &body)) return;
    collect(S, &F, body);
    if ((s = field(&F, "kind")) && get_enum(S, s, NORM_NAMES, N_ELEMS(NORM_NAMES), false, &x)) l->norm = (NormKind)x;
}

/* lm_head { tied; softcap }: tied by default, as GPT-2; softcap C: the
 * logits C tanh(l / C) before the cross-entropy (Gemma 2's 30). */
static void sema_lm_head(Sema *S, const DslStmt *st, Layer *l)
{
    static const char *const keys[] = { "tied", "softcap" };
    Fields F = { "lm_head", keys, N_ELEMS(keys), { 0 } };
    const DslStmt *body, *s;
    int x;
    layer_at(l, LAYER_LM_HEAD, st);
    l->tied = true;
    if (!block_body(S, st, 0, &body)) return;
    collect(S, &F, body);
    if ((s = field(&F, "tied")) && get_bool(S, s, false, &x)) l->tied = x;
    if ((s = field(&F, "softcap"))) get_real(S, s, 0, true, MAX_SOFTCAP, false, &l->softcap);
}

static const char *const BLOCK_KEYS[] = { "attention", "mlp", "moe", "repeat" };

/* Append the transformer sublayers of `st` (attention, mlp or a repeat of
 * them) to L, expanding repeat; stops at PLAN_MAX_LAYERS. */
static void expand_blocks(Sema *S, const DslStmt *st, Layers *L, int64_t dim)
{
    if (L->too_many) return;
    if (L->n >= PLAN_MAX_LAYERS) {
        dsl_error(S->d, st->key_loc, "the model has more than %d layers", PLAN_MAX_LAYERS);
        L->too_many = true;
        return;
    }
    if (strcmp(st->key, "attention") == 0) {
        sema_attention(S, st, layers_push(S, L), dim);
        return;
    }
    if (strcmp(st->key, "mlp") == 0) {
        sema_mlp(S, st, layers_push(S, L), dim);
        return;
    }
    if (strcmp(st->key, "moe") == 0) {
        sema_moe(S, st, layers_push(S, L), dim);
        return;
    }
    /* repeat N { ... }: expand the body once, then copy it N-1 times. */
    if (st->n_args != 1 || st->kind != DSL_STMT_BLOCK) {
        dsl_error(S->d, st->key_loc, "repeat needs a count and a block: repeat 12 { attention { ... } mlp { ... } }");
        return;
    }
    int64_t n;
    DslStmt count = *st;
    count.kind = DSL_STMT_ENTRY;
    if (!get_int(S, &count, 1, PLAN_MAX_REPEAT, false, &n)) return;
    int start = L->n;
    for (const DslStmt *b = st->body; b; b = b->next) {
        if (key_index(b->key, BLOCK_KEYS, N_ELEMS(BLOCK_KEYS)) < 0) {
            if (strcmp(b->key, "embedding") == 0 || strcmp(b->key, "norm") == 0 || strcmp(b->key, "lm_head") == 0)
                dsl_error(S->d, b->key_loc, "'%s' is not allowed in repeat (only attention, mlp, moe and repeat)",
                          b->key);
            else
                unknown_key(S, b, "repeat", BLOCK_KEYS, N_ELEMS(BLOCK_KEYS));
            continue;
        }
        expand_blocks(S, b, L, dim);
        if (L->too_many) return;
    }
    int64_t len = L->n - start;
    if (len == 0) {
        dsl_error(S->d, st->key_loc, "empty repeat: put attention and mlp layers inside");
        return;
    }
    if (n - 1 > (PLAN_MAX_LAYERS - L->n) / len) {
        dsl_error(S->d, count.args->loc, "repeat %" PRId64 " makes the model more than %d layers", n,
                  PLAN_MAX_LAYERS);
        L->too_many = true;
        return;
    }
    for (int64_t r = 1; r < n; r++)
        for (int64_t i = 0; i < len; i++) *layers_push(S, L) = L->v[start + i];
}

static const char *const MODEL_KEYS[] = { "vocab", "vocab_multiple", "seq", "dtype", "dropout", "norm_eps",
                                          "norm_plus_one", "embedding", "attention", "mlp", "moe", "repeat", "norm", "lm_head" };
KEYS_FIT(MODEL_KEYS);

/* Where a layer may appear: 0 before the embedding, 1 the blocks, 2 after
 * the final norm, 3 after the lm_head. */
static bool layer_order(Sema *S, const DslStmt *st, int *stage, const DslStmt **seen_embed,
                        const DslStmt **seen_norm, const DslStmt **seen_head)
{
    const char *k = st->key;
    if (strcmp(k, "embedding") == 0) {
        if (*seen_embed) {
            dsl_error(S->d, st->key_loc, "duplicate 'embedding' (first at line %d); a model has one embedding",
                      (*seen_embed)->key_loc.line);
            return false;
        }
        if (*stage > 0 || *seen_norm || *seen_head) {
            dsl_error(S->d, st->key_loc, "'embedding' must be the first layer");
            return false;
        }
        *seen_embed = st;
        *stage = 1;
        return true;
    }
    if (strcmp(k, "norm") == 0 || strcmp(k, "lm_head") == 0) {
        const DslStmt **seen = k[0] == 'n' ? seen_norm : seen_head;
        if (*seen) {
            dsl_error(S->d, st->key_loc, "duplicate '%s' (first at line %d)", k, (*seen)->key_loc.line);
            return false;
        }
        if (k[0] == 'n' && *seen_head) {
            dsl_error(S->d, st->key_loc, "the final 'norm' must come before 'lm_head'");
            return false;
        }
        *seen = st;
        *stage = k[0] == 'n' ? 2 : 3;
        return true;
    }
    /* attention, mlp, repeat */
    if (*stage == 0) {
        dsl_error(S->d, st->key_loc, "'%s' before 'embedding'; the embedding is the first layer", k);
        return false;
    }
    if (*stage > 1) {
        dsl_error(S->d, st->key_loc, "'%s' after the final '%s'", k, *stage == 2 ? "norm" : "lm_head");
        return false;
    }
    return true;
}

/* model NAME { ... }: scalars in any order, layers in the order
 * embedding, blocks, final norm, lm_head; repeat is expanded here. */
static void sema_model(Sema *S, const DslStmt *m, Model *M)
{
    memset(M, 0, sizeof *M);
    M->dtype = DTYPE_BF16;
    M->name = block_name(S, m);
    if (!M->name) return;
    M->name = dsl_arena_strdup(S->a, M->name);

    const DslStmt *vocab = NULL, *vmult = NULL, *seq = NULL, *dtype = NULL, *drop = NULL, *eps = NULL,
                  *plus1 = NULL;
    const DslStmt *embed = NULL, *norm = NULL, *head = NULL;
    int stage = 0;
    int errors_before = S->d->n_errors;   /* to tell whether the model already has an error */
    Layers L = { 0 };
    Layer final_norm, lm_head, embedding;
    for (const DslStmt *st = m->body; st; st = st->next) {
        const DslStmt **scalar = strcmp(st->key, "vocab") == 0 ? &vocab
                               : strcmp(st->key, "vocab_multiple") == 0 ? &vmult
                               : strcmp(st->key, "seq") == 0   ? &seq
                               : strcmp(st->key, "dropout") == 0 ? &drop
                               : strcmp(st->key, "norm_eps") == 0 ? &eps
                               : strcmp(st->key, "norm_plus_one") == 0 ? &plus1
                               : strcmp(st->key, "dtype") == 0 ? &dtype : NULL;
        if (scalar) {
            if (*scalar)
                dsl_error(S->d, st->key_loc, "duplicate '%s' in model (first set at line %d)", st->key,
                          (*scalar)->key_loc.line);
            else
                *scalar = st;
            continue;
        }
        if (key_index(st->key, MODEL_KEYS, N_ELEMS(MODEL_KEYS)) < 0) {
            unknown_key(S, st, "model", MODEL_KEYS, N_ELEMS(MODEL_KEYS));
            continue;
        }
        if (!layer_order(S, st, &stage, &embed, &norm, &head)) continue;
        if (st == embed) {
            sema_embedding(S, st, &embedding, &M->dim);
            S->position = embedding.position;
            *layers_push(S, &L) = embedding;
        } else if (st == norm) {
            sema_final_norm(S, st, &final_norm);
            *layers_push(S, &L) = final_norm;
        } else if (st == head) {
            sema_lm_head(S, st, &lm_head);
            *layers_push(S, &L) = lm_head;
        } else {
            expand_blocks(S, st, &L, M->dim);
        }
    }
    /* embedding and head rows are padded to a multiple of vocab_multiple x
     * tp (Megatron's --make-vocab-size-divisible-by); 1: to tp only */
    M->vocab_multiple = 1;
    if (vmult) get_int(S, vmult, 1, MAX_VOCAB_MULTIPLE, false, &M->vocab_multiple);
    if (vocab) get_int(S, vocab, 1, MAX_VOCAB, false, &M->vocab);
    else missing(S, m, "vocab", "vocab 50257");
    if (seq) get_int(S, seq, 1, MAX_SEQ, false, &M->seq);
    else missing(S, m, "seq", "seq 1024");
    /* dropout P: the probability an element is dropped, 0 <= P < 1 (1 would
     * drop everything and scale by 1/0); 0, no dropout, by default */
    if (drop) get_real(S, drop, 0, false, 1, true, &M->dropout);
    /* norm_eps E, 0 < E < 1: every norm's epsilon (default 1e-5) */
    if (eps) get_real(S, eps, 0, true, 1, true, &M->norm_eps);
    /* norm_plus_one true: RMSNorm's x * (1 + w) (Gemma); a LayerNorm has no such form */
    int p1 = 0;
    if (plus1 && get_bool(S, plus1, false, &p1)) M->norm_plus_one = p1 != 0;
    if (M->norm_plus_one)
        for (int i = 0; i < L.n; i++)
            if ((L.v[i].kind == LAYER_ATTENTION || L.v[i].kind == LAYER_MLP || L.v[i].kind == LAYER_MOE ||
                 L.v[i].kind == LAYER_NORM) && L.v[i].norm != NORM_RMSNORM) {
                dsl_error(S->d, plus1->key_loc, "norm_plus_one needs every norm to be rmsnorm "
                          "(the %s at line %d is layernorm)", L.v[i].kind == LAYER_NORM ? "final norm"
                          : L.v[i].kind == LAYER_ATTENTION ? "attention" : "mlp", L.v[i].line);
                break;
            }
    int x;
    if (dtype && get_enum(S, dtype, DTYPE_NAMES, N_ELEMS(DTYPE_NAMES), false, &x)) M->dtype = (PlanDtype)x;
    if (!embed) missing(S, m, "embedding", "embedding { dim 768 }");
    if (!head) missing(S, m, "lm_head", "lm_head { tied true }");
    resolve_window_every(L.v, L.n);
    check_rope_local(S, m, L.v, L.n);
    M->layers = L.v;
    M->n_layers = L.n;
    for (int i = 0; i < L.n; i++) M->n_blocks += L.v[i].kind == LAYER_ATTENTION;
    /* No blocks because of an error already reported (`repeat 0`, a
       misspelt `repeat`) is that error, not a second one. */
    if (M->n_blocks == 0 && embed && S->d->n_errors == errors_before)
        dsl_error(S->d, m->key_loc, "model %s has no attention layer (write them inside repeat N { ... })",
                  M->name);
}

/* ---- cluster ----------------------------------------------------------- */

static const char *const DEVICE_KEYS[] = { "memory", "flops", "flops_fp32", "hbm", "sms",
                                           "gemm", "gemm_dtype", "stream", "launch", "overhead",
                                           "activation", "softmax", "gemm_efficiency", "nvls",
                                           "attention_efficiency", "flops_fp8", "sustained" };
KEYS_FIT(DEVICE_KEYS);
static const char *const GEMM_PASSES[] = { "fwd", "dx", "dw" };   /* ORDER PlanGemmPass */
#define MAX_GEMM_POINTS 4096
#define MAX_GEMM_DIM    (1 << 24)

/* Argument `i` of a multi-value entry: a positive quantity of `kind`
 * (units as get_quantity), or a positive plain integer when kind < 0. */
static bool arg_number(Sema *S, const DslStmt *st, const DslValue *v, int kind, const char *what, double *out)
{
    if (!v || v->kind != DSL_VAL_NUMBER) {
        dsl_error(S->d, v ? v->loc : st->key_loc, "'%s' needs %s here%s%s", st->key, what, v ? ", got " : "",
                  v ? shown(S, v) : "");
        return false;
    }
    if (v->overflow) return false;
    bool unit_ok = kind < 0 ? v->unit == NULL : v->unit && (int)v->unit->kind == kind;
    if (!unit_ok || !(v->d > 0) || (kind < 0 && (!v->is_int || v->i > MAX_GEMM_DIM))) {
        dsl_error(S->d, v->loc, "'%s' needs %s here, got %s", st->key, what, shown(S, v));
        return false;
    }
    *out = kind < 0 ? (double)v->i : v->d * v->unit->scale;
    return true;
}

/* KEY FWD BWD: two times, zero or more (s per element, planc calibrate). */
static void time_pair(Sema *S, const DslStmt *st, double *fwd, double *bwd)
{
    double x[2];
    const DslValue *v = st->args;
    if (st->kind == DSL_STMT_BLOCK || st->n_args != 2) {
        dsl_error(S->d, st->key_loc, "'%s' takes two times, forward and backward per element (for example: "
                  "%s 4 ns 6 ns)", st->key, st->key);
        return;
    }
    for (int i = 0; i < 2; i++, v = v->next) {
        if (v->kind == DSL_VAL_NUMBER && v->unit && v->unit->kind == DSL_UNIT_TIME && v->d == 0) x[i] = 0;
        else if (!arg_number(S, st, v, DSL_UNIT_TIME, "a time such as 4 ns", &x[i])) return;
    }
    *fwd = x[0];
    *bwd = x[1];
}

/* A measured GEMM (planc calibrate): gemm fwd|dx|dw M N K TIME, the
 * forward GEMM's shape (M x K)(K x N) and the seconds of that pass. */
static bool sema_gemm_point(Sema *S, const DslStmt *st, PlanGemmPoint *g)
{
    if (st->kind == DSL_STMT_BLOCK || st->n_args != 5) {
        dsl_error(S->d, st->key_loc, "gemm takes a pass and four numbers: gemm fwd|dx|dw M N K TIME "
                  "(for example: gemm fwd 1024 768 768 1.2 ms)");
        return false;
    }
    const DslValue *v = st->args;
    int pass = v->kind == DSL_VAL_WORD ? key_index(v->text, GEMM_PASSES, PLAN_N_GEMM_PASSES) : -1;
    if (pass < 0) {
        dsl_error(S->d, v->loc, "gemm pass must be fwd, dx or dw, got %s", shown(S, v));
        return false;
    }
    g->pass = pass;
    return arg_number(S, st, v->next, -1, "the rows M (an integer)", &g->m) &&
           arg_number(S, st, v->next->next, -1, "the columns N (an integer)", &g->n) &&
           arg_number(S, st, v->next->next->next, -1, "the inner size K (an integer)", &g->k) &&
           arg_number(S, st, v->next->next->next->next, DSL_UNIT_TIME, "a time such as 1.2 ms", &g->seconds);
}

/* The device's `gemm` entries (repeatable, unlike its other keys). */
static void sema_gemm_table(Sema *S, const DslStmt *body, Device *D)
{
    int n = 0;
    for (const DslStmt *st = body; st; st = st->next) n += strcmp(st->key, "gemm") == 0;
    if (n == 0) return;
    if (n > MAX_GEMM_POINTS) {
        dsl_error(S->d, body->key_loc, "device has %d gemm points; at most %d", n, MAX_GEMM_POINTS);
        return;
    }
    PlanGemmPoint *g = dsl_arena_alloc(S->a, sizeof *g * (size_t)n);
    int k = 0;
    for (const DslStmt *st = body; st; st = st->next)
        if (strcmp(st->key, "gemm") == 0 && sema_gemm_point(S, st, &g[k])) k++;
    D->gemm = g;
    D->n_gemm = k;
}

/* device PRESET, device { ... } or device PRESET { overrides }. */
static void sema_device(Sema *S, const DslStmt *st, Device *D)
{
    const DslStmt *body = NULL;
    const Device *preset = NULL;
    memset(D, 0, sizeof *D);
    D->name = "custom";
    if (st->n_args > 1) {
        dsl_error(S->d, st->args->next->loc, "unexpected %s after 'device %s'", shown(S, st->args->next),
                  shown(S, st->args));
        return;
    }
    if (st->n_args == 1) {
        const DslValue *v = st->args;
        const char *names[PLAN_N_DEVICES];
        for (int i = 0; i < PLAN_N_DEVICES; i++) names[i] = plan_device_presets[i].name;
        if (v->kind != DSL_VAL_WORD || !(preset = plan_device_preset(v->text))) {
            const char *hint = v->kind == DSL_VAL_WORD ? dsl_suggest(v->text, names, PLAN_N_DEVICES) : NULL;
            if (hint)
                dsl_error(S->d, v->loc, "unknown device %s; did you mean '%s'?", shown(S, v), hint);
            else
                dsl_error(S->d, v->loc, "unknown device %s (presets: a100-sxm-80gb, h100-sxm-80gb, "
                          "h200-sxm-141gb, cpu; or write device { memory ...; flops ...; hbm ... })", shown(S, v));
            return;
        }
        *D = *preset;
    } else if (st->kind != DSL_STMT_BLOCK) {
        dsl_error(S->d, st->key_loc, "device needs a preset name or a block: device h100-sxm-80gb, or "
                  "device { memory 80 GiB; flops 989 TFLOPS; hbm 3.35 TB/s }");
        return;
    }
    if (st->kind == DSL_STMT_BLOCK) body = st->body;
    Fields F = { "device", DEVICE_KEYS, N_ELEMS(DEVICE_KEYS), { 0 } };
    for (const DslStmt *st2 = body; st2; st2 = st2->next) {   /* collect(), gemm repeatable */
        int k = key_index(st2->key, F.keys, F.n);
        if (k < 0) unknown_key(S, st2, F.what, F.keys, F.n);
        else if (strcmp(st2->key, "gemm") == 0) continue;
        else if (F.slot[k])
            dsl_error(S->d, st2->key_loc, "duplicate '%s' in %s (first set at line %d)", st2->key, F.what,
                      F.slot[k]->key_loc.line);
        else F.slot[k] = st2;
    }
    sema_gemm_table(S, body, D);
    const DslStmt *s;
    double x;
    uint64_t b;
    if ((s = field(&F, "memory"))) {
        if (get_quantity(S, s, DSL_UNIT_SIZE, false, &x, &b)) D->memory = b;
    } else if (!preset) {
        missing(S, st, "memory", "memory 80 GiB");
    }
    if ((s = field(&F, "flops"))) {
        if (get_quantity(S, s, DSL_UNIT_COMPUTE, false, &x, NULL)) {
            D->flops_16 = x;
            /* from scratch and no flops_fp32: one rate for both, a device
             * without a separate tensor-core path (as the cpu preset);
             * refused for an fp32 model (plan_sema), which runs at it */
            if (!preset) D->flops_fp32 = x;
        }
    } else if (!preset) {
        missing(S, st, "flops", "flops 312 TFLOPS");
    }
    if ((s = field(&F, "flops_fp32"))) {
        if (get_quantity(S, s, DSL_UNIT_COMPUTE, false, &x, NULL)) D->flops_fp32 = x;
    } else if (!preset) {
        S->device_no_fp32 = st;
    }
    if ((s = field(&F, "hbm"))) {
        if (get_quantity(S, s, DSL_UNIT_BANDWIDTH, false, &x, NULL)) D->hbm = x;
    } else if (!preset) {
        missing(S, st, "hbm", "hbm 2 TB/s");
    }
    /* streaming multiprocessors: the GEMM model's wave size; 0 (the
     * default of a device from scratch) uses PLAN_WAVE_TILES */
    int64_t n;
    if ((s = field(&F, "sms")) && get_int(S, s, 1, MAX_SMS, false, &n)) D->sms = (int)n;
    /* the measured profile (planc calibrate); absent: cost.c's analytic figures */
    if ((s = field(&F, "stream"))) get_quantity(S, s, DSL_UNIT_BANDWIDTH, false, &D->stream, NULL);
    if ((s = field(&F, "launch"))) get_quantity(S, s, DSL_UNIT_TIME, true, &D->launch, NULL);
    if ((s = field(&F, "overhead"))) get_quantity(S, s, DSL_UNIT_TIME, true, &D->overhead, NULL);
    if ((s = field(&F, "activation"))) time_pair(S, s, &D->act_fwd, &D->act_bwd);
    if ((s = field(&F, "softmax"))) time_pair(S, s, &D->softmax_fwd, &D->softmax_bwd);
    /* the best-shaped GEMM's fraction of the peak (presets: measured
     * maximum achievable matmul FLOPS; else PLAN_GEMM_EFF) and whether
     * NCCL's NVLS runs inside a node (presets.c) */
    if ((s = field(&F, "gemm_efficiency"))) get_real(S, s, 0, true, 1, false, &D->gemm_eff);
    /* a fused attention kernel's fraction of the peak (flash_attention) */
    if ((s = field(&F, "attention_efficiency"))) get_real(S, s, 0, true, 1, false, &D->attn_eff);
    /* the FP8 dense peak, and the fraction of their short-run rate the
     * compute-bound kernels keep in a step at the power limit (presets.c) */
    if ((s = field(&F, "flops_fp8"))) get_quantity(S, s, DSL_UNIT_COMPUTE, false, &D->flops_fp8, NULL);
    if ((s = field(&F, "sustained"))) get_real(S, s, 0, true, 1, false, &D->sustained);
    int nv;
    if ((s = field(&F, "nvls")) && get_bool(S, s, false, &nv)) D->nvls = nv;
    int dt;
    if ((s = field(&F, "gemm_dtype")) && get_enum(S, s, DTYPE_NAMES, N_ELEMS(DTYPE_NAMES), false, &dt))
        D->gemm_dtype = (PlanDtype)dt;
}

static const char *const LINK_NAMES[] = { "intra", "inter", "pod" };
/* The link's keys; the collective names follow plan_collective_name
 * (ORDER PlanCollective) from index LINK_COLL0 on. */
static const char *const LINK_KEYS[] = { "bandwidth", "latency", "efficiency", "overlap_compute",
                                         "overlap_comm", "ranks", "all-reduce", "all-gather",
                                         "reduce-scatter", "broadcast", "reduce", "all-to-all", "p2p" };
KEYS_FIT(LINK_KEYS);
#define LINK_COLL0 6

/* A measured collective (planc calibrate): NAME [RANKS] LATENCY BUSBW,
 * measured on groups of RANKS ranks (without it: the link's `ranks`,
 * filled in by sema_link). False after reporting what is wrong. */
static bool sema_link_coll(Sema *S, const DslStmt *st, int c, PlanCollPoint *q)
{
    if (st->kind == DSL_STMT_BLOCK || st->n_args < 2 || st->n_args > 3) {
        dsl_error(S->d, st->key_loc, "'%s' takes a group size, a latency and a bus bandwidth (for example: "
                  "%s 4 12 us 3.5 GB/s)", st->key, st->key);
        return false;
    }
    const DslValue *v = st->args;
    double r = 0;
    q->coll = c;
    if (st->n_args == 3) {
        if (!arg_number(S, st, v, -1, "the group size (an integer)", &r)) return false;
        bool p2p = strcmp(st->key, "p2p") == 0;   /* a send between two ranks */
        if (r < 2 || r > MAX_GPN || (p2p && r != 2)) {
            dsl_error(S->d, v->loc, "'%s' group size must be %s%d, got %s", st->key, p2p ? "" : "2 to ",
                      p2p ? 2 : MAX_GPN, shown(S, v));
            return false;
        }
        v = v->next;
    }
    q->ranks = (int)r;
    bool zero_lat = v->kind == DSL_VAL_NUMBER && v->unit && v->unit->kind == DSL_UNIT_TIME && v->d == 0;
    if (zero_lat) q->latency = 0;
    else if (!arg_number(S, st, v, DSL_UNIT_TIME, "a latency such as 12 us", &q->latency)) return false;
    return arg_number(S, st, v->next, DSL_UNIT_BANDWIDTH, "a bus bandwidth such as 3.5 GB/s", &q->busbw);
}

/* The link's measured collectives (repeatable, one per collective and
 * group size); `ranks` is the group size of those written without one. */
static void sema_link_colls(Sema *S, const DslStmt *st, const DslStmt *body, const DslStmt *ranks, Link *l)
{
    int n = 0;
    int64_t r = 0;
    if (ranks && !get_int(S, ranks, 2, MAX_GPN, false, &r)) return;
    for (const DslStmt *s2 = body; s2; s2 = s2->next)
        n += key_index(s2->key, LINK_KEYS, N_ELEMS(LINK_KEYS)) >= LINK_COLL0;
    if (n == 0) return;
    PlanCollPoint *q = dsl_arena_alloc(S->a, sizeof *q * (size_t)n);
    int k = 0;
    for (const DslStmt *s2 = body; s2; s2 = s2->next) {
        int c = key_index(s2->key, LINK_KEYS, N_ELEMS(LINK_KEYS)) - LINK_COLL0;
        if (c < 0 || !sema_link_coll(S, s2, c, &q[k])) continue;
        if (q[k].ranks == 0 && !(q[k].ranks = (int)r)) {
            missing(S, st, "ranks", "ranks 2 (the group size of the collectives written without one)");
            return;
        }
        bool dup = false;
        for (int j = 0; j < k && !dup; j++) dup = q[j].coll == q[k].coll && q[j].ranks == q[k].ranks;
        if (dup) dsl_error(S->d, s2->key_loc, "duplicate '%s' on %d ranks in link", s2->key, q[k].ranks);
        else k++;
    }
    l->coll = q;
    l->n_coll = k;
}

/* ---- plausible link figures ------------------------------------------ *
 * Warnings, not errors: a cluster may be unusual, but a figure far outside
 * what hardware does is most often a unit slip (Gb/s for GB/s, ms for us)
 * and would make every prediction of the plan wrong. Links are per GPU and
 * per direction (sema_link). The thresholds, each with its source: */
#define LINK_LATENCY_MAX 1e-3    /* s: NCCL's latencies are microseconds (its tuning model,
                                    src/graph/tuning.cc, "Latencies in us": baseLat 4-17 us
                                    a collective, hwLat 0.5-3.4 us an NVLink hop on the ring,
                                    a few us a network hop); a millisecond is a unit slip */
#define LINK_BW_MAX      10e12   /* B/s per GPU per direction: 11 x NVLink 5's 900 GB/s
                                    (B200: 18 links x 50 GB/s); no link of any tier comes near */
#define LINK_INTER_BW_MAX 1.8e12 /* B/s per GPU per direction between nodes: twice NVLink 5's
                                    900 GB/s (which an NVL72 rack spans between its trays);
                                    a NIC per GPU is 400 Gb/s (NDR, 50 GB/s) or 800 Gb/s
                                    (XDR, 100 GB/s) */

static const char *link_name(const DslStmt *st)
{
    return st->n_args >= 1 && st->args->text ? st->args->text : "?";
}

/* A bandwidth above what any link does (LINK_BW_MAX), or between nodes
 * above LINK_INTER_BW_MAX. */
static void link_bw_plausible(Sema *S, const DslStmt *st, const DslStmt *s, const Link *l)
{
    const char *name = link_name(st);
    bool between = strcmp(name, "intra") != 0;   /* inter, pod */
    if (l->bandwidth > LINK_BW_MAX)
        dsl_warning(S->d, s->loc, "link %s bandwidth %.4g TB/s per GPU is implausible: NVLink 5 is 0.9 TB/s "
                    "per direction (a unit slip? GB/s, Gb/s)", name, l->bandwidth / 1e12);
    else if (between && l->bandwidth > LINK_INTER_BW_MAX)
        dsl_warning(S->d, s->loc, "link %s bandwidth %.4g GB/s per GPU is implausible between nodes: an "
                    "InfiniBand NIC is 400 or 800 Gb/s (50 or 100 GB/s), NVLink 5 across a rack 900 GB/s "
                    "(a unit slip? Gb/s)", name, l->bandwidth / 1e9);
}

/* A latency of a millisecond or more (LINK_LATENCY_MAX). */
static void link_latency_plausible(Sema *S, const DslStmt *st, const DslStmt *s, const Link *l)
{
    if (l->latency >= LINK_LATENCY_MAX)
        dsl_warning(S->d, s->loc, "link %s latency %.4g ms is implausible: NCCL's hop latencies are "
                    "microseconds (NCCL's tuning model: 0.5-3.4 us an NVLink hop, 4-17 us a collective's base); did you mean us?",
                    link_name(st), l->latency * 1e3);
}

/* The links of one cluster against each other: inside a node (NVLink,
 * PCIe) is faster than between nodes on any machine planc models; a
 * slower intra link is most often the two swapped. Only where both tiers
 * carry traffic (several GPUs per node, several nodes). */
static void links_plausible(Sema *S, const DslStmt *intra, const Cluster *C)
{
    if (!intra || C->gpus_per_node < 2 || C->nodes < 2) return;
    if (C->intra.bandwidth > 0 && C->inter.bandwidth > C->intra.bandwidth)
        dsl_warning(S->d, intra->loc, "link intra (%.4g GB/s per GPU) is slower than link inter (%.4g GB/s): "
                    "inside a node is NVLink or PCIe, faster than the network between nodes (swapped?)",
                    C->intra.bandwidth / 1e9, C->inter.bandwidth / 1e9);
}

/* link intra|inter { bandwidth; latency }: per GPU and per direction. */
static void sema_link(Sema *S, const DslStmt *st, Link *l)
{
    Fields F = { "link", LINK_KEYS, N_ELEMS(LINK_KEYS), { 0 } };
    const DslStmt *s, *body;
    if (!block_body(S, st, 1, &body)) return;
    if (st->kind != DSL_STMT_BLOCK) {
        dsl_error(S->d, st->loc, "link needs a block: link %s { bandwidth 300 GB/s; latency 5 us }",
                  st->args->text);
        return;
    }
    for (const DslStmt *st2 = body; st2; st2 = st2->next) {   /* collect(), collectives repeatable */
        int k = key_index(st2->key, F.keys, F.n);
        if (k < 0) unknown_key(S, st2, F.what, F.keys, F.n);
        else if (k >= LINK_COLL0) continue;
        else if (F.slot[k])
            dsl_error(S->d, st2->key_loc, "duplicate '%s' in %s (first set at line %d)", st2->key, F.what,
                      F.slot[k]->key_loc.line);
        else F.slot[k] = st2;
    }
    if ((s = field(&F, "bandwidth"))) {
        if (get_quantity(S, s, DSL_UNIT_BANDWIDTH, false, &l->bandwidth, NULL)) link_bw_plausible(S, st, s, l);
    } else missing(S, st, "bandwidth", "bandwidth 300 GB/s");
    if ((s = field(&F, "latency"))) {
        if (get_quantity(S, s, DSL_UNIT_TIME, true, &l->latency, NULL)) link_latency_plausible(S, st, s, l);
    } else missing(S, st, "latency", "latency 5 us");
    /* the measured profile (planc calibrate); absent: comm.c's alpha-beta
     * model derated by PLAN_LINK_EFF_*, no overlap slowdown */
    if ((s = field(&F, "efficiency"))) get_real(S, s, 0, true, 1, false, &l->efficiency);
    if ((s = field(&F, "overlap_compute"))) get_real(S, s, 1, false, 100, false, &l->overlap_compute);
    if ((s = field(&F, "overlap_comm"))) get_real(S, s, 1, false, 100, false, &l->overlap_comm);
    sema_link_colls(S, st, body, field(&F, "ranks"), l);
}

/* nvlink_domain N: the GPUs one NVLink fabric joins, whole nodes of
 * them (GB200 NVL72: gpus_per_node 4, nvlink_domain 72), dividing the
 * cluster's GPUs so every domain is alike. */
static void sema_nvlink_domain(Sema *S, const DslStmt *st, Cluster *C)
{
    int64_t n;
    if (!get_int(S, st, 1, MAX_NODES, false, &n)) return;
    int64_t gpn = C->gpus_per_node, gpus = C->nodes * C->gpus_per_node;
    const DslLoc at = st->args ? st->args->loc : st->key_loc;
    if (gpn > 0 && n % gpn)
        dsl_error(S->d, at, "nvlink_domain %" PRId64 " is not a whole number of nodes of %" PRId64 " GPUs "
                  "(an NVLink domain joins whole nodes or trays)", n, gpn);
    else if (gpus > 0 && gpus % n)
        dsl_error(S->d, at, "nvlink_domain %" PRId64 " does not divide the cluster's %" PRId64 " GPUs", n, gpus);
    else
        C->nvlink_domain = n;
}

static const char *const CLUSTER_KEYS[] = { "nodes", "gpus_per_node", "device", "link", "nodes_per_pod",
                                            "nics_per_node", "nvlink_domain" };
KEYS_FIT(CLUSTER_KEYS);

/* cluster NAME { ... }: links are required only where there is traffic
 * over them (more than one GPU per node, more than one node, more than
 * one pod: nodes > nodes_per_pod). */
static void sema_cluster(Sema *S, const DslStmt *c, Cluster *C)
{
    memset(C, 0, sizeof *C);
    C->name = block_name(S, c);
    if (!C->name) return;
    C->name = dsl_arena_strdup(S->a, C->name);
    const DslStmt *nodes = NULL, *gpn = NULL, *dev = NULL, *npp = NULL, *nics = NULL, *nvd = NULL;
    const DslStmt *links[3] = { NULL, NULL, NULL };   /* ORDER LINK_NAMES */
    for (const DslStmt *st = c->body; st; st = st->next) {
        int k = key_index(st->key, CLUSTER_KEYS, N_ELEMS(CLUSTER_KEYS));
        if (k < 0) {
            unknown_key(S, st, "cluster", CLUSTER_KEYS, N_ELEMS(CLUSTER_KEYS));
            continue;
        }
        const DslStmt **slot = k == 0 ? &nodes : k == 1 ? &gpn : k == 2 ? &dev : k == 4 ? &npp
                             : k == 5 ? &nics : k == 6 ? &nvd : NULL;
        if (!slot) {   /* link intra|inter|pod */
            int li = st->n_args >= 1 && st->args->kind == DSL_VAL_WORD
                         ? key_index(st->args->text, LINK_NAMES, N_ELEMS(LINK_NAMES)) : -1;
            if (li < 0) {
                dsl_error(S->d, st->n_args ? st->args->loc : st->key_loc,
                          "link needs 'intra' (inside a node), 'inter' (between nodes) or 'pod' (between pods)");
                continue;
            }
            slot = &links[li];
        }
        if (*slot) {
            dsl_error(S->d, st->key_loc, "duplicate '%s%s%s' in cluster (first set at line %d)", st->key,
                      k == 3 ? " " : "", k == 3 ? st->args->text : "", (*slot)->key_loc.line);
            continue;
        }
        *slot = st;
    }
    if (nodes) get_int(S, nodes, 1, MAX_NODES, false, &C->nodes);
    else missing(S, c, "nodes", "nodes 4");
    if (gpn) get_int(S, gpn, 1, MAX_GPN, false, &C->gpus_per_node);
    else missing(S, c, "gpus_per_node", "gpus_per_node 8");
    if (dev) sema_device(S, dev, &C->device);
    else missing(S, c, "device", "device h100-sxm-80gb");
    /* NICs a node has (rails): default one per GPU */
    if (nics) get_int(S, nics, 1, MAX_GPN, false, &C->nics_per_node);
    if (nvd) sema_nvlink_domain(S, nvd, C);
    if (links[0]) sema_link(S, links[0], &C->intra);
    else if (C->gpus_per_node > 1)
        dsl_error(S->d, c->key_loc, "cluster %s has %" PRId64 " GPUs per node but no 'link intra { bandwidth ...; "
                  "latency ... }'", C->name, C->gpus_per_node);
    if (links[1]) sema_link(S, links[1], &C->inter);
    else if (C->nodes > 1)
        dsl_error(S->d, c->key_loc, "cluster %s has %" PRId64 " nodes but no 'link inter { bandwidth ...; "
                  "latency ... }'", C->name, C->nodes);
    links_plausible(S, links[0], C);
    /* the third tier: nodes_per_pod N and link pod, which is required
     * when the nodes fill more than one pod */
    if (npp) get_int(S, npp, 1, MAX_NODES, false, &C->nodes_per_pod);
    if (links[2]) sema_link(S, links[2], &C->pod);
    if (links[2] && !npp)
        dsl_error(S->d, links[2]->key_loc, "'link pod' needs 'nodes_per_pod N' (the nodes one pod holds)");
    else if (npp && C->nodes_per_pod > 0 && C->nodes > C->nodes_per_pod && !links[2])
        dsl_error(S->d, c->key_loc, "cluster %s has %" PRId64 " nodes in pods of %" PRId64 " but no 'link pod "
                  "{ bandwidth ...; latency ... }' (between pods, per GPU per direction)", C->name, C->nodes,
                  C->nodes_per_pod);
}

/* ---- plan -------------------------------------------------------------- */

static const char *const PLAN_KEYS[] = { "dp", "tp", "pp", "zero", "micro_batch", "global_batch",
                                         "schedule", "chunks", "recompute", "sequence_parallel",
                                         "overlap_grad_reduce", "overlap_param_gather", "overlap_p2p",
                                         "overlap_tp", "ep", "grad_accum_dtype", "flash_attention",
                                         "grad_accum_fusion", "cross_entropy_fusion", "attention_kernel",
                                         "software", "fused_norm", "fused_rope", "fused_swiglu", "optimizer",
                                         "recompute_modules", "recompute_layers", "recompute_every",
                                         "recompute_method",
                                         /* MoE dispatch (issue 25) */
                                         "etp", "overlap_moe_a2a", "moe_dispatcher", "moe_imbalance",
                                         /* context parallelism (issue 26) */
                                         "cp", "cp_comm",
                                         /* FP8 training (issue 27) */
                                         "fp8" };
KEYS_FIT(PLAN_KEYS);
static const char *const CP_COMM_NAMES[] = { "ring", "all_to_all", "all_gather", "hierarchical" };   /* ORDER PlanCpComm */
_Static_assert(sizeof CP_COMM_NAMES / sizeof *CP_COMM_NAMES == PLAN_N_CP_COMMS, "CP_COMM_NAMES out of step");
static const char *const MOE_DISPATCHER_NAMES[] = { "alltoall", "deepep" };   /* ORDER PlanMoeDispatcher */
static const char *const SCHED_NAMES[] = { "gpipe", "1f1b", "interleaved", "zb-h1" };   /* ORDER Schedule */
static const char *const RECOMPUTE_NAMES[] = { "none", "selective", "full", "selective_op" };   /* ORDER Recompute */
/* Megatron-Core's --recompute-modules names (megatron/core/transformer/
 * transformer_config.py, recompute_modules; NVIDIA/Megatron-LM main at
 * 002526d8). ORDER PlanRecomputeModule */
static const char *const RECOMPUTE_MODULE_NAMES[] = { "core_attn", "layernorm", "mlp", "moe_act", "moe",
                                                      "shared_experts", "mla_up_proj" };
_Static_assert(sizeof RECOMPUTE_MODULE_NAMES / sizeof *RECOMPUTE_MODULE_NAMES == PLAN_N_RECOMPUTE_MODULES,
               "RECOMPUTE_MODULE_NAMES out of step with PlanRecomputeModule");
static const char *const RECOMPUTE_METHOD_NAMES[] = { "block", "uniform" };   /* ORDER PLAN_RC_METHOD_ */
#define ATTN_KERNEL_NAMES plan_attn_kernel_names   /* ORDER PlanAttnKernel (planner/stacks.c) */

/* The plan block's statements, kept for the locations of later checks. */
typedef struct {
    const DslStmt *block;
    Fields         F;
} PlanSrc;

/* `software NAME [VARIANT]`: the stack preset's row of planner/stacks.c
 * replaces every software key (the keys the plan writes then override
 * it). An unknown name or variant is reported with the ones there are. */
static void sema_stack(Sema *S, const DslStmt *st, Software *W)
{
    const char *names[16], *vars[16];
    int nn = plan_stack_names(names, N_ELEMS(names));
    const DslValue *v = st->kind == DSL_STMT_ENTRY ? st->args : NULL;
    if (!v || v->kind != DSL_VAL_WORD || (v->next && v->next->next) ||
        (v->next && v->next->kind != DSL_VAL_WORD && v->next->kind != DSL_VAL_NUMBER)) {
        dsl_error(S->d, v ? v->loc : st->key_loc, "software takes a stack name and an optional variant: "
                  "software planc|megatron-core|torchtitan|deepspeed [VARIANT] (software megatron-core 0.19)");
        return;
    }
    const char *variant = v->next ? v->next->text : NULL;
    int row = plan_stack_find(v->text, variant);
    if (row == -1) {
        /* the nearest by edit distance, else the one the word begins
         * (`megatron` for megatron-core) */
        const char *hint = dsl_suggest(v->text, names, nn);
        for (int i = 0; i < nn && !hint; i++)
            if (strncmp(names[i], v->text, strlen(v->text)) == 0) hint = names[i];
        char list[256] = "";
        for (int i = 0, o = 0; i < nn; i++) o += snprintf(list + o, sizeof list - (size_t)o, "%s%s", i ? ", " : "", names[i]);
        if (hint) dsl_error(S->d, v->loc, "unknown software '%s' (expected %s); did you mean '%s'?", v->text, list, hint);
        else dsl_error(S->d, v->loc, "unknown software '%s' (expected %s)", v->text, list);
        return;
    }
    if (row == -2) {
        int nv = plan_stack_variants(v->text, vars, N_ELEMS(vars));
        const char *hint = dsl_suggest(variant, vars, nv);
        char list[256] = "";
        for (int i = 0, o = 0; i < nv; i++) o += snprintf(list + o, sizeof list - (size_t)o, "%s%s", i ? ", " : "", vars[i]);
        if (!nv) dsl_error(S->d, v->next->loc, "software %s takes no variant (it has one row)", v->text);
        else if (hint) dsl_error(S->d, v->next->loc, "unknown %s variant '%s' (expected %s); did you mean '%s'?",
                                 v->text, variant, list, hint);
        else dsl_error(S->d, v->next->loc, "unknown %s variant '%s' (expected %s)", v->text, variant, list);
        return;
    }
    *W = plan_stack_software(row);
}

static void sema_fp8(Sema *S, const DslStmt *st, Software *W);

/* The MoE software keys (issue 25): overlap_moe_a2a true|false,
 * moe_dispatcher alltoall|deepep, moe_imbalance X >= 1 (no `auto`:
 * search takes them as given); absent keys keep plan_software_defaults. */
static void sema_software_moe(Sema *S, const Fields *F, Software *W)
{
    const DslStmt *s;
    int e;
    if ((s = field(F, "overlap_moe_a2a")) && get_bool(S, s, false, &e)) W->overlap_moe_a2a = e != 0;
    if ((s = field(F, "moe_dispatcher")) && get_enum(S, s, MOE_DISPATCHER_NAMES, N_ELEMS(MOE_DISPATCHER_NAMES),
                                                     false, &e))
        W->moe_dispatcher = e;
    /* the busiest EP rank's tokens over the mean: 1 (uniform) up to every
     * token on one rank, which no plan can exceed (capped at 1e6 as a
     * plain bound) */
    if ((s = field(F, "moe_imbalance"))) get_real(S, s, 1, false, 1e6, false, &W->moe_imbalance);
}

/* The software keys of a plan block (true|false, grad_accum_dtype
 * fp32|bf16|fp16; no `auto`: search takes them as given): first the
 * `software` preset, then each key written overrides it; absent keys keep
 * the preset's, or plan_software_defaults without one. */
static void sema_software(Sema *S, const Fields *F, Software *W)
{
    static const char *const KEYS[] = { "overlap_grad_reduce", "overlap_param_gather", "overlap_p2p",
                                        "overlap_tp", "grad_accum_fusion", "cross_entropy_fusion",
                                        "fused_norm", "fused_rope", "fused_swiglu" };
    bool *slot[] = { &W->overlap_grad_reduce, NULL, &W->overlap_p2p, &W->overlap_tp,
                     &W->grad_accum_fusion, &W->cross_entropy_fusion,
                     &W->unfused_norm, &W->unfused_rope, &W->unfused_swiglu };
    const bool negated[] = { false, false, false, false, false, false, true, true, true };
    const DslStmt *s;
    int e;
    if ((s = field(F, "software"))) sema_stack(S, s, W);
    for (size_t i = 0; i < N_ELEMS(KEYS); i++)
        if ((s = field(F, KEYS[i])) && get_bool(S, s, false, &e)) {
            if (slot[i]) *slot[i] = negated[i] ? !e : e;
            else W->overlap_param_gather = e != 0;   /* int: PLAN_AUTO when absent */
        }
    if ((s = field(F, "optimizer")) &&
        get_enum(S, s, plan_optimizer_names, PLAN_N_OPTIMIZERS, false, &e))   /* ORDER PlanOptimizer */
        W->optimizer = e;
    if ((s = field(F, "grad_accum_dtype")) && get_enum(S, s, DTYPE_NAMES, N_ELEMS(DTYPE_NAMES), false, &e))
        W->grad_accum_dtype = e;   /* PLAN_AUTO when absent: plan_grad_dtype's default */
    /* the attention kernel; `flash_attention true|false`, the older key,
     * says fa2 or math, and the two may not disagree */
    const DslStmt *fa = field(F, "flash_attention"), *ak = field(F, "attention_kernel");
    int flash = -1;
    if (fa && get_bool(S, fa, false, &flash)) W->attention_kernel = flash ? PLAN_ATTN_FA2 : PLAN_ATTN_MATH;
    if (ak && get_enum(S, ak, ATTN_KERNEL_NAMES, N_ELEMS(ATTN_KERNEL_NAMES), false, &e)) {
        if (flash >= 0 && (e != PLAN_ATTN_MATH) != (flash != 0))
            dsl_error(S->d, ak->args ? ak->args->loc : ak->key_loc,
                      "'attention_kernel %s' disagrees with 'flash_attention %s' (fa2, fa3 and cudnn are "
                      "fused kernels, math is not); keep one of the two", ATTN_KERNEL_NAMES[e],
                      flash ? "true" : "false");
        W->attention_kernel = e;
    }
    sema_software_moe(S, F, W);
    if ((s = field(F, "fp8"))) sema_fp8(S, s, W);
}

/* fp8 RECIPE; or fp8 [RECIPE] { recipe R; format e4m3|hybrid; all_gather
 * B; amax_history N; first_last_bf16 B } (issue 27): the recipe's
 * defaults (plan_fp8_defaults) and the keys written over them. Given by
 * the plan, never searched. The keys are Transformer Engine's and
 * torchao's: recipe (TE's recipe class, torchao's recipe_name), format
 * (TE's fp8_format, Megatron's --fp8-format), all_gather (torchao's
 * enable_fsdp_float8_all_gather, Megatron's --fp8-param-gather),
 * amax_history (TE's amax_history_len, --fp8-amax-history-len),
 * first_last_bf16 (Megatron's --first-last-layers-bf16). */
static void sema_fp8(Sema *S, const DslStmt *st, Software *W)
{
    static const char *const KEYS[] = { "recipe", "format", "all_gather", "amax_history", "first_last_bf16" };
    const char *const *names = plan_fp8_recipe_names + 1;   /* "off" is no recipe to write */
    const int n = PLAN_N_FP8_RECIPES - 1;
    const DslStmt *body, *s;
    int e, recipe = PLAN_FP8_TENSORWISE;   /* torchao's Float8LinearConfig default: tensorwise, dynamic */
    if (st->kind != DSL_STMT_BLOCK && st->n_args == 0) {
        dsl_error(S->d, st->key_loc, "fp8 needs a recipe: fp8 tensorwise; or fp8 { recipe delayed; format "
                  "hybrid } (recipes tensorwise, rowwise, blockwise, mxfp8, delayed)");
        return;
    }
    if (!block_body(S, st, 1, &body)) return;
    if (st->n_args == 1) {
        if (st->args->kind == DSL_VAL_WORD && strcmp(st->args->text, "auto") == 0) {
            dsl_error(S->d, st->args->loc, "fp8 is given by the plan, not searched: write a recipe "
                      "(tensorwise, rowwise, blockwise, mxfp8 or delayed)");
            return;
        }
        DslStmt name = *st;
        name.kind = DSL_STMT_ENTRY;
        if (!get_enum(S, &name, names, n, false, &e)) return;
        recipe = e + 1;
    }
    Fields F = { "fp8", KEYS, N_ELEMS(KEYS), { 0 } };
    collect(S, &F, body);
    if ((s = field(&F, "recipe"))) {
        if (st->n_args == 1)
            dsl_error(S->d, s->key_loc, "the recipe is named twice ('fp8 %s' and 'recipe'); keep one",
                      st->args->text);
        else if (get_enum(S, s, names, n, false, &e)) recipe = e + 1;
    }
    PlanFp8 f = plan_fp8_defaults(recipe);
    int64_t x;
    if ((s = field(&F, "format")) && get_enum(S, s, plan_fp8_format_names, 2, false, &e)) f.format = e;
    if ((s = field(&F, "all_gather")) && get_bool(S, s, false, &e)) f.all_gather = e != 0;
    if ((s = field(&F, "first_last_bf16")) && get_bool(S, s, false, &e)) f.first_last_bf16 = e != 0;
    /* TE keeps up to amax_history_len amaxes per tensor (1 .. 2^20 as a
     * plain bound: TE's default is 1024) */
    if ((s = field(&F, "amax_history")) && get_int(S, s, 1, INT64_C(1) << 20, false, &x)) f.amax_history = x;
    if (f.recipe == PLAN_FP8_MXFP8 && field(&F, "format") && f.format == PLAN_FP8_HYBRID)
        dsl_error(S->d, field(&F, "format")->args->loc, "MXFP8 is E4M3 with e8m0 block scales (TE's "
                  "MXFP8BlockScaling takes fp8_format E4M3); write 'format e4m3'");
    W->fp8 = f;
}

/* What a Megatron-Core module recomputes that the language has no layer
 * for (transformer_config.py's list), or NULL. */
static const char *recompute_module_lacks(const char *name)
{
    static const struct { const char *name, *what; } LACKS[] = {
        { "mhc", "hyper-connections' intermediate activations" },
        { "gdn", "a gated delta net (linear attention)" },
        { "gdn_norm_out", "a gated delta net's gated norm output" },
    };
    for (int i = 0; i < N_ELEMS(LACKS); i++)
        if (strcmp(name, LACKS[i].name) == 0) return LACKS[i].what;
    return NULL;
}

/* recompute_modules NAME...: Megatron-Core's modules, each once; names
 * only here (the model's layers are checked in check_layout_model). */
static void sema_recompute_modules(Sema *S, const DslStmt *st, Layout *L)
{
    if (st->kind == DSL_STMT_BLOCK || st->n_args == 0) {
        entry_value(S, st);   /* says what is wrong */
        return;
    }
    for (const DslValue *v = st->args; v; v = v->next) {
        int k = v->kind == DSL_VAL_WORD ? key_index(v->text, RECOMPUTE_MODULE_NAMES, PLAN_N_RECOMPUTE_MODULES) : -1;
        const char *lacks = v->kind == DSL_VAL_WORD ? recompute_module_lacks(v->text) : NULL;
        if (lacks) {
            dsl_error(S->d, v->loc, "recompute_modules %s recomputes %s, and the language has none yet", v->text,
                      lacks);
            continue;
        }
        if (k < 0) {
            const char *hint = v->kind == DSL_VAL_WORD
                                   ? dsl_suggest(v->text, RECOMPUTE_MODULE_NAMES, PLAN_N_RECOMPUTE_MODULES) : NULL;
            dsl_error(S->d, v->loc, "unknown recompute_modules %s (expected core_attn, layernorm, mlp, moe_act, "
                      "moe, shared_experts or mla_up_proj: Megatron-Core's --recompute-modules)%s%s%s", shown(S, v),
                      hint ? "; did you mean '" : "", hint ? hint : "", hint ? "'?" : "");
            continue;
        }
        if (L->recompute_modules & PLAN_RC_BIT(k))
            dsl_error(S->d, v->loc, "recompute_modules names %s twice", v->text);
        L->recompute_modules |= PLAN_RC_BIT(k);
    }
}

/* Which parts `recompute` covers: recompute_modules (with selective, as
 * Megatron's --recompute-modules needs --recompute-granularity selective),
 * recompute_layers N (with full: Megatron's --recompute-method block
 * --recompute-num-layers N, or with recompute_method uniform its units of
 * N blocks) or recompute_every N (with full: torchtitan's
 * selective_ac_option "N", every N-th block), one of the last two. */
static void sema_recompute_parts(Sema *S, const Fields *F, Layout *L)
{
    const DslStmt *mods = field(F, "recompute_modules"), *lay = field(F, "recompute_layers"),
                  *every = field(F, "recompute_every");
    int64_t x;
    if (mods) {
        sema_recompute_modules(S, mods, L);
        if (L->recompute != RECOMPUTE_SELECTIVE)
            dsl_error(S->d, mods->key_loc, "recompute_modules needs 'recompute selective' (Megatron: "
                      "--recompute-modules with --recompute-granularity selective)");
    }
    if (lay && get_int(S, lay, 1, MAX_PAR, false, &x)) {
        L->recompute_layers = (int)x;
        if (L->recompute != RECOMPUTE_FULL)
            dsl_error(S->d, lay->key_loc, "recompute_layers needs 'recompute full' (Megatron: "
                      "--recompute-granularity full --recompute-method block --recompute-num-layers N)");
    }
    const DslStmt *method = field(F, "recompute_method");
    int e;
    if (method && get_enum(S, method, RECOMPUTE_METHOD_NAMES, N_ELEMS(RECOMPUTE_METHOD_NAMES), false, &e)) {
        L->recompute_method = e;
        if (!lay)
            dsl_error(S->d, method->key_loc, "recompute_method needs 'recompute_layers N' (Megatron: "
                      "--recompute-method with --recompute-num-layers)");
    }
    if (every && get_int(S, every, 1, MAX_PAR, false, &x)) {
        L->recompute_every = (int)x;
        if (L->recompute != RECOMPUTE_FULL)
            dsl_error(S->d, every->key_loc, "recompute_every needs 'recompute full' (torchtitan: mode "
                      "\"selective\" with selective_ac_option \"N\" checkpoints every N-th block whole)");
        else if (lay)
            dsl_error(S->d, every->key_loc, "recompute_every and recompute_layers (line %d) each choose the "
                      "blocks full recomputation covers; keep one", lay->key_loc.line);
    }
}

/* plan { ... }: every layout field may be absent or `auto` (PLAN_AUTO);
 * only ranges are checked here, the cross-checks come after model and
 * cluster. The software keys go to W. */
static void sema_layout(Sema *S, const DslStmt *p, Layout *L, Software *W, PlanSrc *src)
{
    const DslStmt *body, *s;
    int64_t x;
    int e;
    L->dp = L->tp = L->pp = L->zero = L->schedule = L->chunks = L->recompute = PLAN_AUTO;
    L->sequence_parallel = PLAN_AUTO;
    L->ep = PLAN_AUTO;
    L->etp = PLAN_AUTO;
    L->cp = L->cp_comm = PLAN_AUTO;
    L->micro_batch = L->global_batch = PLAN_AUTO;
    src->block = p;
    src->F = (Fields){ "plan", PLAN_KEYS, N_ELEMS(PLAN_KEYS), { 0 } };
    if (!block_body(S, p, 0, &body)) return;
    if (p->kind != DSL_STMT_BLOCK) {
        dsl_error(S->d, p->key_loc, "plan needs a block: plan { dp 2; tp 2; pp 2 }");
        return;
    }
    collect(S, &src->F, body);
    const Fields *F = &src->F;
    if ((s = field(F, "dp")) && get_int(S, s, 1, MAX_PAR, true, &x)) L->dp = (int)x;
    if ((s = field(F, "tp")) && get_int(S, s, 1, MAX_PAR, true, &x)) L->tp = (int)x;
    if ((s = field(F, "pp")) && get_int(S, s, 1, MAX_PAR, true, &x)) L->pp = (int)x;
    if ((s = field(F, "zero")) && get_int(S, s, 0, 3, true, &x)) L->zero = (int)x;
    if ((s = field(F, "micro_batch"))) get_int(S, s, 1, MAX_BATCH, true, &L->micro_batch);
    if ((s = field(F, "global_batch"))) get_int(S, s, 1, MAX_BATCH, false, &L->global_batch);
    if ((s = field(F, "schedule")) && get_enum(S, s, SCHED_NAMES, N_ELEMS(SCHED_NAMES), true, &e)) L->schedule = e;
    if ((s = field(F, "chunks")) && get_int(S, s, 1, MAX_CHUNKS, true, &x)) L->chunks = (int)x;
    if ((s = field(F, "recompute")) && get_enum(S, s, RECOMPUTE_NAMES, N_ELEMS(RECOMPUTE_NAMES), true, &e))
        L->recompute = e;
    if ((s = field(F, "sequence_parallel")) && get_bool(S, s, true, &e)) L->sequence_parallel = e;
    if ((s = field(F, "ep")) && get_int(S, s, 1, MAX_PAR, true, &x)) L->ep = (int)x;
    sema_recompute_parts(S, F, L);
    if ((s = field(F, "etp")) && get_int(S, s, 1, MAX_PAR, true, &x)) L->etp = (int)x;
    if ((s = field(F, "cp")) && get_int(S, s, 1, MAX_PAR, true, &x)) L->cp = (int)x;
    if ((s = field(F, "cp_comm")) && get_enum(S, s, CP_COMM_NAMES, N_ELEMS(CP_COMM_NAMES), true, &e)) L->cp_comm = e;
    sema_software(S, F, W);
}

/* Where to point at a plan field's value (or the plan keyword). */
static DslLoc plan_loc(const PlanSrc *src, const char *key)
{
    const DslStmt *s = field(&src->F, key);
    return s && s->args ? s->args->loc : src->block->key_loc;
}

/* Whether the model has a layer of kind k (and, for shared experts, any;
 * for an attention with `special`, an MLA one). */
static bool model_has(const Model *M, LayerKind k, bool special)
{
    for (int i = 0; i < M->n_layers; i++) {
        const Layer *l = &M->layers[i];
        if (l->kind == k && (!special || (k == LAYER_MOE ? l->shared > 0 : l->attn == ATTN_MLA))) return true;
    }
    return false;
}

/* Recomputation against the model: a module must name a part the model
 * has (Megatron ignores it silently; here it is a mistake to say), and
 * torchtitan's op-level rule is counted for dense blocks only. */
static void check_recompute_model(Sema *S, const Layout *L, const Model *M, const PlanSrc *src)
{
    static const struct { int module; LayerKind kind; bool shared; const char *what; } NEEDS[] = {
        { PLAN_RC_MLP, LAYER_MLP, false, "a dense mlp layer" },
        { PLAN_RC_MOE_ACT, LAYER_MOE, false, "a moe layer" },
        { PLAN_RC_MOE, LAYER_MOE, false, "a moe layer" },
        { PLAN_RC_SHARED_EXPERTS, LAYER_MOE, true, "a moe layer with shared experts" },
        { PLAN_RC_MLA_UP_PROJ, LAYER_ATTENTION, true, "an attention of kind mla" },
    };
    for (int i = 0; i < N_ELEMS(NEEDS); i++)
        if ((L->recompute_modules & PLAN_RC_BIT(NEEDS[i].module)) && !model_has(M, NEEDS[i].kind, NEEDS[i].shared))
            dsl_error(S->d, plan_loc(src, "recompute_modules"), "recompute_modules %s needs %s; model %s has none",
                      RECOMPUTE_MODULE_NAMES[NEEDS[i].module], NEEDS[i].what, M->name);
    if (L->recompute == RECOMPUTE_SELECTIVE_OP && plan_model_has_moe(M))
        dsl_error(S->d, plan_loc(src, "recompute"), "recompute selective_op is counted for dense blocks only "
                  "(torchtitan's mixtures run grouped_mm, outside its save list): use selective, full or "
                  "recompute_modules moe");
}

/* The divisibility the layout needs against the model (tp against heads,
 * kv heads and MLP widths, sequence-parallel rows, pp x chunks against the
 * blocks, the schedule, the batch), asked of planner/layout.c's rules for
 * the fields the plan block fixes, so a diagnostic here and `check`'s
 * verdict on the resolved layout say the same words. This pass only picks
 * the field to point at. */
static void check_layout_model(Sema *S, Layout *L, const Model *M, const PlanSrc *src)
{
    char why[512];
    if (!plan_rule_tp_split(M, L->tp, why, sizeof why)) dsl_error(S->d, plan_loc(src, "tp"), "%s", why);
    if (M->n_blocks > 0 && !plan_rule_pp_blocks(M, L->pp, L->chunks, why, sizeof why))
        dsl_error(S->d, plan_loc(src, L->pp > M->n_blocks ? "pp" : "chunks"), "%s", why);
    if (!plan_rule_schedule(L->schedule, L->pp, L->chunks, why, sizeof why))
        dsl_error(S->d, plan_loc(src, L->chunks > 1 && L->schedule != SCHED_INTERLEAVED ? "chunks" : "schedule"),
                  "%s", why);
    if (!plan_rule_batch(L->global_batch, L->dp, L->micro_batch, why, sizeof why))
        dsl_error(S->d, plan_loc(src, "global_batch"), "%s", why);
    else if (!plan_rule_interleaved_batches(L, why, sizeof why))
        dsl_error(S->d, plan_loc(src, "global_batch"), "%s", why);
    if (!plan_rule_sp_rows(M, L->tp, L->micro_batch, L->sequence_parallel, why, sizeof why))
        dsl_error(S->d, plan_loc(src, "sequence_parallel"), "%s", why);
    /* expert parallelism splits a mixture's experts: a dense model runs
     * without it, as sequence parallelism at tp 1 */
    if (L->ep > 1 && !plan_model_has_moe(M)) {
        dsl_warning(S->d, plan_loc(src, "ep"), "ep %d has no effect on a dense model (no moe layers)", L->ep);
        L->ep = 1;
    } else if (!plan_rule_ep(M, L->dp, L->tp, L->etp, L->ep, why, sizeof why)) {
        /* at the key that breaks it: etp where it alone does */
        bool at_etp = field(&src->F, "etp") && plan_rule_ep(M, L->dp, L->tp, PLAN_AUTO, L->ep, NULL, 0);
        dsl_error(S->d, plan_loc(src, at_etp ? "etp" : "ep"), "%s", why);
    }
    if (L->etp != PLAN_AUTO && L->etp != L->tp && !plan_model_has_moe(M)) {
        dsl_warning(S->d, plan_loc(src, "etp"), "etp %d has no effect on a dense model (no moe layers)", L->etp);
        L->etp = PLAN_AUTO;
    }
    check_recompute_model(S, L, M, src);
    if (!plan_rule_cp(M, L->tp, L->cp, L->cp_comm, why, sizeof why)) {
        /* at cp_comm where the form alone breaks it (heads), else at cp */
        bool at_comm = field(&src->F, "cp_comm") && plan_rule_cp(M, L->tp, L->cp, PLAN_CP_RING, NULL, 0);
        dsl_error(S->d, plan_loc(src, at_comm ? "cp_comm" : "cp"), "%s", why);
    }
    /* sequence parallelism cuts the activations over the TP group: with
     * tp 1 there is none, and the layout runs without it */
    if (L->tp == 1 && L->sequence_parallel == 1) {
        dsl_warning(S->d, plan_loc(src, "sequence_parallel"), "sequence_parallel has no effect with tp 1");
        L->sequence_parallel = 0;
    }
}

/* The MoE software keys against the layout (issue 25): the one rule of
 * layout.c (plan_rule_moe_overlap) for overlap_moe_a2a, and warnings for
 * keys a dense model or ep 1 leaves without effect. */
static void check_layout_moe(Sema *S, const Layout *L, const Software *W, const Model *M, const PlanSrc *src)
{
    char why[512];
    if (!plan_rule_moe_overlap(W, L->schedule, L->pp, L->recompute, why, sizeof why))
        dsl_error(S->d, plan_loc(src, "overlap_moe_a2a"), "%s", why);
    static const char *const KEYS[] = { "overlap_moe_a2a", "moe_dispatcher", "moe_imbalance" };
    for (size_t i = 0; i < N_ELEMS(KEYS); i++)
        if (field(&src->F, KEYS[i]) && !plan_model_has_moe(M))
            dsl_warning(S->d, plan_loc(src, KEYS[i]), "%s has no effect on a dense model (no moe layers)", KEYS[i]);
}

/* The layout against the cluster: every GPU gets one rank, and a
 * tensor-parallel group stays inside a node (planner/layout.c's rules).
 * Class DSL_ERR_CLUSTER: a valid plan for another cluster, exit 1. */
static void check_layout_cluster(Sema *S, const Layout *L, const Software *W, const Cluster *C,
                                 const PlanSrc *src)
{
    char why[512];
    if (!plan_rule_attention_kernel(&C->device, W->attention_kernel, why, sizeof why))
        dsl_error_class(S->d, DSL_ERR_CLUSTER, plan_loc(src, "attention_kernel"), "%s", why);
    if (!plan_rule_tp_node(C, L->tp, why, sizeof why))
        dsl_error_class(S->d, DSL_ERR_CLUSTER, plan_loc(src, "tp"), "%s", why);
    /* cp left out is 1 here (a plan that fixes dp, tp and pp means no CP);
     * `cp auto` leaves it to the search */
    int cp = field(&src->F, "cp") ? L->cp : 1;
    if (!plan_rule_ranks(C, L->dp, L->tp, cp, L->pp, why, sizeof why))
        dsl_error_class(S->d, DSL_ERR_CLUSTER, src->block->key_loc, "%s", why);
}

/* FP8 against the model and the device (planner/fp8.c's one rule), and
 * first_last_bf16's mark on the first and last block's layers. The device
 * lacking what the recipe needs is DSL_ERR_CLUSTER (a valid plan for
 * another cluster, exit 1). */
static void check_fp8(Sema *S, Plan *out, const PlanSrc *src)
{
    const PlanFp8 *f = &out->software.fp8;
    if (!plan_fp8_on(&out->software)) return;
    char why[512];
    const Device *d = &out->cluster.device;
    if (!plan_rule_fp8(out, f, why, sizeof why)) {
        bool device = !(d->flops_fp8 > 0) || (f->recipe == PLAN_FP8_MXFP8 && d->arch != 0 && d->arch < 100);
        if (device) dsl_error_class(S->d, DSL_ERR_CLUSTER, plan_loc(src, "fp8"), "%s", why);
        else dsl_error(S->d, plan_loc(src, "fp8"), "%s", why);
        return;
    }
    if (!f->first_last_bf16) return;
    /* a block runs from its attention layer to the next one: the first
     * [first, second), the last [last, the end) */
    Model *m = &out->model;
    int first = -1, second = -1, last = -1;
    for (int i = 0; i < m->n_layers; i++) {
        if (m->layers[i].kind != LAYER_ATTENTION) continue;
        if (first < 0) first = i;
        else if (second < 0) second = i;
        last = i;
    }
    if (first < 0) return;
    if (second < 0) second = m->n_layers;
    for (int i = 0; i < m->n_layers; i++) {
        bool in = (i >= first && i < second) || i >= last;
        if (in && (m->layers[i].kind == LAYER_ATTENTION || m->layers[i].kind == LAYER_MLP))
            m->layers[i].fp8_exempt = true;
    }
}

/* ---- train ------------------------------------------------------------- */

static const char *const TRAIN_KEYS[] = { "steps", "lr", "warmup", "seed", "grad_clip", "optimizer", "data",
                                          "init" };
KEYS_FIT(TRAIN_KEYS);
static const char *const ADAMW_KEYS[] = { "beta1", "beta2", "eps", "weight_decay" };
static const char *const OPTIMIZERS[] = { "adamw" };

/* optimizer adamw { beta1; beta2; eps; weight_decay }. */
static void sema_optimizer(Sema *S, const DslStmt *st, Train *T)
{
    const DslStmt *body, *s;
    int k;
    if (st->n_args == 0) {
        dsl_error(S->d, st->key_loc, "optimizer needs a name: optimizer adamw { ... }");
        return;
    }
    if (!block_body(S, st, 1, &body)) return;
    DslStmt name = *st;
    name.kind = DSL_STMT_ENTRY;
    name.n_args = 1;
    if (!get_enum(S, &name, OPTIMIZERS, N_ELEMS(OPTIMIZERS), false, &k)) return;
    Fields F = { "optimizer adamw", ADAMW_KEYS, N_ELEMS(ADAMW_KEYS), { 0 } };
    collect(S, &F, body);
    if ((s = field(&F, "beta1"))) get_real(S, s, 0, false, 1, true, &T->beta1);
    if ((s = field(&F, "beta2"))) get_real(S, s, 0, false, 1, true, &T->beta2);
    if ((s = field(&F, "eps"))) get_real(S, s, 0, true, 1, false, &T->eps);
    if ((s = field(&F, "weight_decay"))) get_real(S, s, 0, false, 10, false, &T->weight_decay);
}

/* The train defaults, the one place they are written (README's train
 * section): the PyTorch AdamW defaults, a global-norm clip of 1.0, no
 * warm-up, seed 0, no data; steps and lr, which a train block must give,
 * are 10 steps at 1e-3 for a file without one. Plan.train always holds
 * them, so the generated program reads nothing else. */
static void train_defaults(Train *T)
{
    memset(T, 0, sizeof *T);
    T->steps = 10;
    T->lr = 1e-3;
    T->grad_clip = 1.0;
    T->beta1 = 0.9;
    T->beta2 = 0.999;
    T->eps = 1e-8;
    T->weight_decay = 0.01;
}

/* train { init "DIR" }: a directory name the generated program opens (it
 * reaches the program as an escaped C string, never a shell): printable
 * ASCII and UTF-8 only, no control character, shorter than a path. */
static void check_dir_name(Sema *S, const DslStmt *st, const char *dir)
{
    const DslValue *v = entry_value(S, st);
    size_t n = strlen(dir);
    if (n >= 4000) {
        dsl_error(S->d, v ? v->loc : st->key_loc, "init: a path of %zu bytes (at most 3999)", n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)dir[i] < 0x20 || dir[i] == 0x7f) {
            dsl_error(S->d, v ? v->loc : st->key_loc,
                      "init: control character 0x%02x at byte %zu of the directory name", (unsigned char)dir[i], i);
            return;
        }
}

/* train { ... }: steps and lr are required; the rest keep train_defaults. */
static void sema_train(Sema *S, const DslStmt *t, Train *T)
{
    const DslStmt *body, *s;
    int64_t x;
    train_defaults(T);
    if (!block_body(S, t, 0, &body)) return;
    if (t->kind != DSL_STMT_BLOCK) {
        dsl_error(S->d, t->key_loc, "train needs a block: train { steps 100; lr 3e-4 }");
        return;
    }
    Fields F = { "train", TRAIN_KEYS, N_ELEMS(TRAIN_KEYS), { 0 } };
    collect(S, &F, body);
    if ((s = field(&F, "steps"))) get_int(S, s, 1, INT64_C(1) << 40, false, &T->steps);
    else missing(S, t, "steps", "steps 1000");
    if ((s = field(&F, "lr"))) get_real(S, s, 0, true, 10, false, &T->lr);
    else missing(S, t, "lr", "lr 3e-4");
    if ((s = field(&F, "warmup"))) get_int(S, s, 0, INT64_C(1) << 40, false, &T->warmup);
    if ((s = field(&F, "seed")) && get_int(S, s, 0, INT64_MAX, false, &x)) T->seed = (uint64_t)x;
    if ((s = field(&F, "grad_clip"))) get_real(S, s, 0, false, 1e9, false, &T->grad_clip);
    if ((s = field(&F, "optimizer"))) sema_optimizer(S, s, T);
    if ((s = field(&F, "data"))) get_string(S, s, &T->data);
    if ((s = field(&F, "init")) && get_string(S, s, &T->init)) check_dir_name(S, s, T->init);
}

/* ---- the file ---------------------------------------------------------- */

static const char *const TOP_KEYS[] = { "model", "cluster", "plan", "train" };

/* The file: one model and one cluster are required, plan and train are
 * optional; a cross-check runs only when the blocks it reads checked
 * cleanly, so one mistake does not cascade. */
int plan_sema(const DslFile *f, DslDiag *d, DslArena *a, Plan *out)
{
    Sema S = { d, a, NULL, POS_LEARNED };
    int before = d->n_errors;
    memset(out, 0, sizeof *out);
    out->file = f->src->name;
    out->software = plan_software_defaults();

    Fields F = { "the file", TOP_KEYS, N_ELEMS(TOP_KEYS), { 0 } };
    for (const DslStmt *st = f->stmts; st; st = st->next) {
        int k = key_index(st->key, TOP_KEYS, F.n);
        if (k < 0) {
            unknown_key(&S, st, "the file", TOP_KEYS, F.n);
        } else if (F.slot[k]) {
            const DslLoc *first = &F.slot[k]->key_loc;
            dsl_error(d, st->key_loc, "a second %s block; a file has one %s (the first is at %s:%d)", st->key,
                      st->key, first->src->name, first->line);
        } else {
            F.slot[k] = st;
        }
    }
    DslLoc top = { f->src, 1, 1, 1, 1 };
    const DslStmt *m = field(&F, "model"), *c = field(&F, "cluster");
    const DslStmt *p = field(&F, "plan"), *t = field(&F, "train");
    int e0 = d->n_errors;
    if (m) sema_model(&S, m, &out->model);
    else dsl_error(d, top, "no model block (a .plan file needs one model and one cluster)");
    bool model_ok = m && d->n_errors == e0;
    int e1 = d->n_errors;
    if (c) sema_cluster(&S, c, &out->cluster);
    else dsl_error(d, top, "no cluster block (a .plan file needs one model and one cluster)");
    bool cluster_ok = c && d->n_errors == e1;
    if (p) {
        PlanSrc src;
        int e2 = d->n_errors;
        out->has_layout = true;
        sema_layout(&S, p, &out->layout, &out->software, &src);
        if (d->n_errors == e2) {
            if (model_ok) check_layout_model(&S, &out->layout, &out->model, &src);
            if (model_ok) check_layout_moe(&S, &out->layout, &out->software, &out->model, &src);
            if (cluster_ok) check_layout_cluster(&S, &out->layout, &out->software, &out->cluster, &src);
            if (model_ok && cluster_ok) check_fp8(&S, out, &src);
        }
    }
    if (model_ok && cluster_ok && S.device_no_fp32 && out->model.dtype == DTYPE_FP32)
        dsl_error(d, S.device_no_fp32->key_loc, "device needs 'flops_fp32' when model %s trains in fp32 "
                  "(for example: flops_fp32 19.5 TFLOPS)", out->model.name);
    train_defaults(&out->train);
    if (t) {
        out->has_train = true;
        sema_train(&S, t, &out->train);
    }
    return d->n_errors - before;
}

DslLoc plan_sema_key_loc(const DslFile *f, const char *block, const char *key, bool *found)
{
    DslLoc none = { f->src, 1, 1, 1, 1 };
    *found = false;
    for (const DslStmt *st = f->stmts; st; st = st->next) {
        if (strcmp(st->key, block) != 0) continue;
        for (const DslStmt *k = key ? st->body : NULL; k; k = k->next)
            if (strcmp(k->key, key) == 0) {
                *found = true;
                return k->args ? k->args->loc : k->key_loc;
            }
        return st->key_loc;
    }
    return none;
}
