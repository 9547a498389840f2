/*
 * test_rules.c: one rule of a valid layout, in one place (planner/layout.c),
 * and the small truths around it.
 *
 *  - the rule table: random layouts (seeded) of models with awkward
 *    vocabularies (50257, 32001) and widths (heads, kv heads, MLP widths
 *    some tp do not divide) on clusters of 8 and 6 GPUs per node: the
 *    rule's verdict == `check`'s (plan_evaluate) == `emit`'s (cg_emit
 *    succeeds exactly when the rule accepts), with the same reason; and
 *    every layout `search` ranks passes `check` and emits;
 *  - each rule alone, with its message;
 *  - the padded vocabulary: params (the real model) and params_padded, the
 *    padded rows in parameters, memory and FLOPs;
 *  - sema: vocab_multiple, the SP-at-tp-1 warning, the SP rows rule as a
 *    diagnostic with the rule's own words, device keys sms and flops_fp32;
 *  - one buffer formula, one device table.
 *
 * Plans are built in C (planner/presets.h) or parsed from text in memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "codegen/codegen.h"
#include "dsl/dsl.h"
#include "planner/cost.h"
#include "planner/layout.h"
#include "planner/memory.h"
#include "planner/model.h"
#include "planner/presets.h"
#include "planner/report.h"
#include "planner/search.h"
#include "planner/sema.h"

#define MAX_BLOCKS 12

/* The models of the rule table: real vocabularies no power of two divides,
 * widths that some tp do not. */
typedef struct {
    const char *name;
    bool        llama;
    int         blocks;
    int64_t     dim, heads, kv_heads, ffn, seq, vocab;
    int64_t     experts, top_k, shared;   /* experts > 0: every MLP a mixture of ffn-wide experts */
} ModelCase;

static const ModelCase MODELS[] = {
    /* GPT-2 widths (12 heads: tp 8 does not divide), vocab 50257, seq 1022
     * (= 2 x 511: sequence parallelism at tp 4 needs an even micro-batch) */
    { "gpt2-odd", false, 4, 768, 12, 12, 3072, 1022, 50257, 0, 0, 0 },
    /* Llama-style GQA: kv heads 6 (tp 4 does not divide), MLP 2050 (tp 3, 6
     * do not), vocab 32001, seq 999 (odd) */
    { "llama-odd", true, 6, 768, 12, 6, 2050, 999, 32001, 0, 0, 0 },
    /* few blocks: pp x chunks runs out of them */
    { "small-odd", false, 5, 384, 6, 6, 1536, 96, 32001, 0, 0, 0 },
    /* a mixture (issue 17): 6 experts (ep 4 does not divide them), each
     * 1000 wide (tp 3 and 6 do not divide it), top 2, one shared */
    { "moe-odd", true, 4, 768, 12, 6, 1000, 1000, 32001, 6, 2, 1 },
};

typedef struct {
    Layer buf[PLAN_PRESET_LAYERS(MAX_BLOCKS)];
    Plan  p;
} Built;

/* A cluster of `nodes` DGX A100 nodes with gpn GPUs each. */
static Cluster cluster(int64_t nodes, int64_t gpn)
{
    Cluster c = plan_preset_dgx_a100(nodes);
    c.gpus_per_node = gpn;
    return c;
}

static void build(Built *b, const ModelCase *mc, Cluster c, Layout l)
{
    Model m;
    if (mc->llama)
        plan_preset_llama(&m, b->buf, mc->name, mc->blocks, mc->dim, mc->heads, mc->kv_heads, mc->ffn,
                          mc->seq, mc->vocab, DTYPE_BF16);
    else
        plan_preset_gpt(&m, b->buf, mc->name, mc->blocks, mc->dim, mc->heads, mc->seq, mc->vocab,
                        DTYPE_BF16);
    for (int i = 0; i < m.n_layers; i++) {
        Layer *y = &b->buf[i];
        if (y->kind != LAYER_MLP) continue;
        y->hidden = mc->ffn;
        if (mc->experts > 0) {
            y->kind = LAYER_MOE;
            y->experts = mc->experts; y->top_k = mc->top_k; y->shared = mc->shared;
        }
    }
    b->p = plan_preset_plan(m, c, l.dp, l.tp, l.pp, l.zero, l.micro_batch, l.global_batch, l.schedule,
                            l.chunks, l.recompute, l.sequence_parallel);
    b->p.layout.ep = l.ep;
}

static FILE *devnull(void)
{
    static FILE *f;
    if (!f) f = fopen("/dev/null", "w");
    assert_non_null(f);
    return f;
}

/* ---- the rule table: rule == check == emit on random layouts ----------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;   /* fixed seed: the same layouts every run */

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int64_t pick(const int64_t *v, int n) { return v[rng() % (uint64_t)n]; }

/* A random, fully set layout for gpus GPUs: mostly consistent, so both
 * verdicts occur often. */
static Layout random_layout(int64_t gpus)
{
    static const int64_t TP[] = { 1, 2, 3, 4, 6, 8, 12, 16 };
    static const int64_t PP[] = { 1, 2, 3, 4, 6 };
    static const int64_t MB[] = { 1, 2, 3, 4 };
    static const int64_t K[] = { 1, 2, 3, 4, 6, 8 };
    Layout l;
    l.tp = (int)pick(TP, 8);
    l.pp = (int)pick(PP, 5);
    int64_t mp = (int64_t)l.tp * l.pp;
    l.dp = gpus % mp == 0 && rng() % 8 ? (int)(gpus / mp) : (int)(1 + rng() % 4);
    l.zero = (int)(rng() % 4);
    l.micro_batch = pick(MB, 4);
    l.global_batch = (int64_t)l.dp * l.micro_batch * pick(K, 6) + (rng() % 10 == 0);
    l.schedule = (int)(rng() % 4);
    l.chunks = l.schedule == SCHED_INTERLEAVED ? (int)(1 + rng() % 3) : (rng() % 10 == 0 ? 2 : 1);
    l.recompute = (int)(rng() % 3);
    l.sequence_parallel = (int)(rng() % 2);
    return l;
}

/* The three verdicts on one plan; returns the rule's. */
static bool verdicts_agree(const Plan *p, int *padded)
{
    char why_rule[256] = "", why_emit[256] = "";
    Layout l = plan_layout_defaults(p);
    bool rule = plan_layout_check(p, &l, why_rule, sizeof why_rule);
    PlanEval ev;
    plan_evaluate(p, &ev);                  /* what `check` decides */
    bool emit = cg_emit(p, devnull(), why_emit, sizeof why_emit);
    /* until the runtime runs mixtures (h-moert), emit refuses a valid MoE
     * layout for that reason alone (runtime_honours), after the rules */
    static const char MOE_REFUSED[] = "moe: planc's runtime cannot honour it";
    if (rule && !emit && plan_model_has_moe(&p->model) && !strncmp(why_emit, MOE_REFUSED, sizeof MOE_REFUSED - 1))
        emit = true;
    if (ev.valid != rule || emit != rule) {
        print_error("%s dp %d tp %d pp %d zero %d mb %lld gb %lld %s chunks %d rec %d sp %d ep %d: rule %d (%s), "
                    "check %d (%s), emit %d (%s)\n", p->model.name, l.dp, l.tp, l.pp, l.zero,
                    (long long)l.micro_batch, (long long)l.global_batch, plan_schedule_name(l.schedule),
                    l.chunks, l.recompute, l.sequence_parallel, l.ep, rule, why_rule, ev.valid, ev.why, emit,
                    why_emit);
        fail();
    }
    if (!rule) {   /* one rule, one message */
        assert_string_equal(ev.why, why_rule);
        assert_string_equal(why_emit, why_rule);
    }
    if (rule && p->model.vocab % l.tp) (*padded)++;
    plan_eval_free(&ev);
    return rule;
}

static void test_rule_check_emit_agree(void **state)
{
    (void)state;
    const Cluster clusters[] = { cluster(2, 8), cluster(2, 6) };
    int accepted = 0, refused = 0, padded = 0;
    for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; mi++)
        for (int ci = 0; ci < 2; ci++)
            for (int k = 0; k < 150; k++) {
                Built b;
                const Cluster *c = &clusters[ci];
                Layout l = random_layout(c->nodes * c->gpus_per_node);
                static const int64_t EP[] = { 1, 2, 3, 4, 6, 8 };
                l.ep = MODELS[mi].experts ? (int)pick(EP, 6) : 1;   /* (dense: no draw, the same layouts) */
                build(&b, &MODELS[mi], *c, l);
                if (verdicts_agree(&b.p, &padded)) accepted++;
                else refused++;
            }
    print_message("rule table: %d layouts accepted (%d with a padded vocabulary), %d refused\n", accepted,
                  padded, refused);
    /* the table tests both sides, and padding makes vocabularies valid */
    assert_true(accepted >= 50 && refused >= 50 && padded >= 20);
}

/* Whatever search ranks, check accepts and emit generates. */
static void test_search_results_pass_check(void **state)
{
    (void)state;
    const Cluster clusters[] = { cluster(2, 8), cluster(2, 6) };
    int ranked = 0, padded = 0, counted = 0;
    for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; mi++)
        for (int ci = 0; ci < 2; ci++) {
            Built b;
            Layout a = plan_layout_auto();
            a.global_batch = 48;
            build(&b, &MODELS[mi], clusters[ci], a);
            PlanSearchOptions o = plan_search_defaults();
            o.top = 12;
            PlanSearch s;
            char why[256];
            assert_true(plan_search(&b.p, &o, &s, why, sizeof why));
            assert_true(s.n_results > 0);
            for (int r = 0; r < s.n_results; r++) {
                Plan q = b.p;
                q.layout = s.results[r].layout;
                assert_true(verdicts_agree(&q, &padded));
                ranked++;
            }
            plan_search_free(&s);
            /* and every layout it counts as feasible (ranked or ruled out
             * by a bound) is one the rule accepts */
            o.record = true;
            assert_true(plan_search(&b.p, &o, &s, why, sizeof why));
            for (int64_t k = 0; k < s.n_points; k++) {
                const PlanSearchPoint *pt = &s.points[k];
                if (!pt->feasible) continue;
                if (!plan_layout_check(&b.p, &pt->layout, why, sizeof why)) {
                    print_error("%s: search counts a layout feasible that the rule refuses: %s\n",
                                MODELS[mi].name, why);
                    fail();
                }
                counted++;
            }
            plan_search_free(&s);
        }
    print_message("search: %d ranked layouts pass check and emit (%d with a padded vocabulary); %d counted "
                  "feasible pass the rule\n", ranked, padded, counted);
    assert_true(padded > 0);
}

/* ---- each rule, with its message --------------------------------------- */

typedef struct {
    const char *name;
    int64_t     nodes, gpn;   /* the cluster */
    Layout      l;
    int64_t     kv_heads;     /* > 0: the first attention layer's kv heads (a bad model) */
    const char *msg;          /* NULL: valid */
} RuleCase;

static void test_each_rule(void **state)
{
    (void)state;
    /* llama-odd: layer 1 attention (12 heads, 6 kv heads), layer 2 MLP 2050,
     * seq 999, 6 blocks, vocab 32001 */
#define L(dp_, tp_, pp_, z, mb, gb, sc, ch, sp) { .dp = dp_, .tp = tp_, .pp = pp_, .zero = z, .micro_batch = mb, \
        .global_batch = gb, .schedule = sc, .chunks = ch, .recompute = RECOMPUTE_NONE, .sequence_parallel = sp, .ep = 1 }
    const RuleCase cases[] = {
        { "valid, vocab padded", 2, 8, L(4, 2, 2, 1, 2, 32, SCHED_1F1B, 1, 0), 0, NULL },
        { "kv heads", 2, 8, L(2, 4, 2, 1, 2, 32, SCHED_1F1B, 1, 0), 0,
          "tp 4 does not divide kv_heads 6 (layer 1)" },
        { "heads", 2, 8, L(1, 8, 2, 1, 2, 32, SCHED_1F1B, 1, 0), 0,
          "tp 8 does not divide heads 12 (layer 1)" },
        { "mlp width", 2, 6, L(2, 3, 2, 1, 2, 32, SCHED_1F1B, 1, 0), 0,
          "tp 3 does not divide mlp hidden 2050 (layer 2)" },
        { "sp rows", 2, 8, L(4, 2, 2, 1, 1, 32, SCHED_1F1B, 1, 1), 0,
          "sequence_parallel needs tp 2 to divide the 999 rows of a micro-batch (micro_batch 1 x seq 999)" },
        { "sp rows even", 2, 8, L(4, 2, 2, 1, 2, 32, SCHED_1F1B, 1, 1), 0, NULL },
        { "tp in node", 2, 8, L(1, 16, 1, 1, 2, 32, SCHED_1F1B, 1, 0), 0,
          "tp 16 is more than the 8 GPUs of a node of cluster dgx-a100 (tensor parallelism stays inside a node)" },
        { "ranks", 2, 8, L(2, 2, 2, 1, 2, 32, SCHED_1F1B, 1, 0), 0,
          "dp 2 x tp 2 x pp 2 = 8 ranks, but cluster dgx-a100 has 16 GPUs (2 nodes x 8)" },
        { "pp blocks", 2, 8, L(1, 2, 8, 1, 2, 32, SCHED_1F1B, 1, 0), 0,
          "pp 8 is more than the 6 transformer blocks of model llama-odd" },
        { "pp x chunks", 2, 8, L(2, 2, 4, 1, 2, 32, SCHED_INTERLEAVED, 2, 0), 0,
          "pp 4 x chunks 2 = 8 is more than the 6 transformer blocks of model llama-odd" },
        { "chunks schedule", 2, 8, L(4, 2, 2, 1, 2, 32, SCHED_1F1B, 2, 0), 0,
          "chunks 2 needs schedule interleaved (got 1f1b)" },
        { "interleaved pp 1", 2, 8, L(8, 2, 1, 1, 2, 32, SCHED_INTERLEAVED, 1, 0), 0,
          "schedule interleaved needs pp of at least 2" },
        { "batch", 2, 8, L(4, 2, 2, 1, 2, 30, SCHED_1F1B, 1, 0), 0,
          "global_batch 30 is not a multiple of dp 4 x micro_batch 2 = 8" },
        { "interleaved batches", 2, 8, L(4, 2, 2, 1, 2, 24, SCHED_INTERLEAVED, 2, 0), 0,
          "interleaved 1F1B needs the 3 micro-batches to be a multiple of pp 2" },
        { "zero", 2, 8, L(4, 2, 2, 4, 2, 32, SCHED_1F1B, 1, 0), 0, "zero 4 is not 0..3" },
        { "degrees", 2, 8, L(0, 2, 2, 1, 2, 32, SCHED_1F1B, 1, 0), 0,
          "dp, tp, pp, chunks, micro_batch and global_batch must be at least 1" },
        { "model shape", 2, 8, L(4, 2, 2, 1, 2, 32, SCHED_1F1B, 1, 0), 5,
          "kv_heads 5 does not divide heads 12 (layer 1)" },
    };
#undef L
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const RuleCase *c = &cases[i];
        Built b;
        build(&b, &MODELS[1], cluster(c->nodes, c->gpn), c->l);
        if (c->kv_heads) b.buf[1].kv_heads = c->kv_heads;
        char why[256] = "";
        bool ok = plan_layout_check(&b.p, &c->l, why, sizeof why);
        if (ok != (c->msg == NULL) || (c->msg && strcmp(why, c->msg) != 0)) {
            print_error("%s: got %s '%s', want %s\n", c->name, ok ? "valid" : "invalid", why,
                        c->msg ? c->msg : "valid");
            fail();
        }
        int padded = 0;
        if (c->l.dp >= 1) assert_int_equal(verdicts_agree(&b.p, &padded), ok);
    }
}

/* Expert parallelism's rules (issue 17) on moe-odd (layer 2 a mixture of
 * 6 experts of 1000), each with its message, and check and emit agree. */
static void test_ep_rules(void **state)
{
    (void)state;
#define L(dp_, tp_, ep_) { .dp = dp_, .tp = tp_, .pp = 1, .zero = 1, .micro_batch = 1, .global_batch = 48, \
        .schedule = SCHED_1F1B, .chunks = 1, .recompute = RECOMPUTE_NONE, .sequence_parallel = 0, .ep = ep_ }
    const RuleCase cases[] = {
        { "ep 2 of dp 8", 2, 8, L(8, 2, 2), 0, NULL },
        { "ep 6 of dp 8", 2, 8, L(8, 2, 6), 0, "ep 6 does not divide dp 8" },
        { "ep 3 of dp 8", 2, 8, L(8, 2, 3), 0, "ep 3 does not divide dp 8" },
        { "experts", 2, 8, L(8, 2, 4), 0, "experts 6 not a multiple of ep 4 (layer 2)" },
        { "expert width", 2, 6, L(4, 3, 2), 0, "tp 3 does not divide moe hidden 1000 (layer 2)" },
        { "ep 6 of dp 6", 2, 6, L(6, 2, 6), 0, NULL },
    };
#undef L
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const RuleCase *c = &cases[i];
        Built b;
        build(&b, &MODELS[3], cluster(c->nodes, c->gpn), c->l);
        char why[256] = "";
        bool ok = plan_layout_check(&b.p, &c->l, why, sizeof why);
        if (ok != (c->msg == NULL) || (c->msg && strcmp(why, c->msg) != 0)) {
            print_error("%s: got %s '%s', want %s\n", c->name, ok ? "valid" : "invalid", why,
                        c->msg ? c->msg : "valid");
            fail();
        }
        int padded = 0;
        assert_int_equal(verdicts_agree(&b.p, &padded), ok);
    }
    /* expert TP (issue 25): the stage's tp x dp ranks as etp x ep x
     * expert-DP, so ep may exceed dp; each expert's width split over etp.
     * (emit refuses etp != tp, a runtime limit, so check alone judges) */
#define LE(dp_, tp_, ep_, etp_) { .dp = dp_, .tp = tp_, .pp = 1, .zero = 1, .micro_batch = 1, .global_batch = 48, \
        .schedule = SCHED_1F1B, .chunks = 1, .recompute = RECOMPUTE_NONE, .sequence_parallel = 0, .ep = ep_, .etp = etp_ }
    const RuleCase etp_cases[] = {
        { "ep 6 over tp 2 x dp 3 at etp 1", 1, 6, LE(3, 2, 6, 1), 0, NULL },
        { "ep 6 of dp 3 at etp = tp", 1, 6, LE(3, 2, 6, 2), 0, "ep 6 does not divide dp 3" },
        { "ep x etp", 1, 8, LE(4, 2, 6, 1), 0,
          "ep 6 x etp 1 = 6 does not divide the tp 2 x dp 4 = 8 ranks of a stage" },
        { "etp width", 1, 6, LE(3, 2, 2, 3), 0, "etp 3 does not divide moe hidden 1000 (layer 2)" },
    };
#undef LE
    for (size_t i = 0; i < sizeof etp_cases / sizeof etp_cases[0]; i++) {
        const RuleCase *c = &etp_cases[i];
        Built b;
        build(&b, &MODELS[3], cluster(c->nodes, c->gpn), c->l);
        char why[256] = "";
        bool ok = plan_layout_check(&b.p, &c->l, why, sizeof why);
        if (ok != (c->msg == NULL) || (c->msg && strcmp(why, c->msg) != 0)) {
            print_error("%s: got %s '%s', want %s\n", c->name, ok ? "valid" : "invalid", why,
                        c->msg ? c->msg : "valid");
            fail();
        }
    }
    /* overlap_moe_a2a's rule (Megatron-Core's combined 1F1B): 1f1b
     * without a pipeline or interleaved, no full recomputation; unset
     * fields constrain nothing, and without the key nothing is refused */
    Software w = plan_software_defaults();
    char why[256];
    w.overlap_moe_a2a = true;
    assert_true(plan_rule_moe_overlap(&w, SCHED_INTERLEAVED, 4, RECOMPUTE_SELECTIVE, NULL, 0));
    assert_true(plan_rule_moe_overlap(&w, SCHED_1F1B, 1, RECOMPUTE_NONE, NULL, 0));
    assert_true(plan_rule_moe_overlap(&w, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, NULL, 0));
    assert_false(plan_rule_moe_overlap(&w, SCHED_1F1B, 4, RECOMPUTE_NONE, why, sizeof why));
    assert_string_equal(why, "overlap_moe_a2a with pp 4 needs schedule interleaved (got 1f1b; Megatron-Core's "
                             "combined 1F1B runs under the interleaved schedule)");
    assert_false(plan_rule_moe_overlap(&w, SCHED_ZB_H1, 1, RECOMPUTE_NONE, why, sizeof why));
    assert_string_equal(why, "overlap_moe_a2a needs schedule 1f1b or interleaved (got zb-h1)");
    assert_false(plan_rule_moe_overlap(&w, SCHED_INTERLEAVED, 4, RECOMPUTE_FULL, NULL, 0));
    w.overlap_moe_a2a = false;
    assert_true(plan_rule_moe_overlap(&w, SCHED_ZB_H1, 4, RECOMPUTE_FULL, NULL, 0));
    /* the predicate alone: PLAN_AUTO constrains nothing */
    Built b;
    build(&b, &MODELS[3], cluster(2, 8), plan_layout_auto());
    assert_true(plan_rule_ep(&b.p.model, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, 2, NULL, 0));
    assert_false(plan_rule_ep(&b.p.model, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, 4, NULL, 0));
    assert_true(plan_rule_ep(&b.p.model, 8, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, NULL, 0));
    /* a dense model runs with ep 1 whatever the layout says */
    Layout l = { .dp = 8, .tp = 2, .pp = 1, .zero = 1, .micro_batch = 1, .global_batch = 32, .schedule = SCHED_1F1B,
                 .chunks = 1, .recompute = RECOMPUTE_NONE, .sequence_parallel = 0, .ep = 4 };
    build(&b, &MODELS[1], cluster(2, 8), l);
    assert_int_equal(plan_layout_defaults(&b.p).ep, 1);
    build(&b, &MODELS[3], cluster(2, 8), (Layout){ .dp = 8, .tp = 2, .pp = 1, .zero = 1, .micro_batch = 1,
                                                   .global_batch = 32, .schedule = SCHED_1F1B, .chunks = 1,
                                                   .recompute = RECOMPUTE_NONE, .sequence_parallel = 0, .ep = 2 });
    assert_int_equal(plan_layout_defaults(&b.p).ep, 2);
}

/* Each predicate alone judges only what is set: PLAN_AUTO constrains nothing. */
static void test_rules_ignore_auto(void **state)
{
    (void)state;
    Built b;
    Layout a = plan_layout_auto();
    build(&b, &MODELS[1], cluster(2, 8), a);
    const Model *m = &b.p.model;
    const Cluster *c = &b.p.cluster;
    char why[256];
    assert_true(plan_rule_tp_split(m, PLAN_AUTO, why, sizeof why));
    assert_true(plan_rule_sp_rows(m, 2, PLAN_AUTO, 1, why, sizeof why));
    assert_false(plan_rule_sp_rows(m, 2, 1, 1, NULL, 0));          /* why may be NULL */
    assert_true(plan_rule_sp_rows(m, 2, 1, 0, why, sizeof why));   /* no SP: no rule */
    assert_true(plan_rule_ranks(c, PLAN_AUTO, 2, PLAN_AUTO, PLAN_AUTO, why, sizeof why));
    assert_false(plan_rule_ranks(c, PLAN_AUTO, 3, PLAN_AUTO, PLAN_AUTO, why, sizeof why));
    assert_string_equal(why, "the fixed parallel degrees multiply to 3, which does not divide the 16 GPUs of "
                             "cluster dgx-a100");
    assert_true(plan_rule_pp_blocks(m, PLAN_AUTO, 100, why, sizeof why));
    assert_true(plan_rule_batch(30, PLAN_AUTO, PLAN_AUTO, why, sizeof why));
    assert_false(plan_rule_batch(30, 4, PLAN_AUTO, why, sizeof why));
    assert_string_equal(why, "global_batch 30 is not a multiple of dp 4");
}

/* ---- the padded vocabulary --------------------------------------------- */

static void test_vocab_padded_counts(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(12)];
    Model m;
    plan_preset_gpt(&m, buf, "gpt2", 12, 768, 12, 1024, 50257, DTYPE_BF16);
    uint64_t real, pad;
    assert_true(plan_model_params(&m, &real));
    assert_int_equal(real, 124439808);   /* HF GPT-2: the real model, whatever the layout */
    assert_true(plan_model_params_padded(&m, 1, &pad));
    assert_int_equal(pad, real);          /* tp 1, vocab_multiple 1: no padding */
    /* tp 4: 50260 rows, 3 more than the vocabulary, of 768 each */
    assert_int_equal(plan_vocab_padded(&m, 4), 50260);
    assert_true(plan_model_params_padded(&m, 4, &pad));
    assert_int_equal(pad, real + 3 * 768);
    /* Megatron's default: a multiple of 128 x tp */
    m.vocab_multiple = 128;
    assert_int_equal(plan_vocab_padded(&m, 1), 50304);
    assert_int_equal(plan_vocab_padded(&m, 8), 51200);
    assert_true(plan_model_params(&m, &pad));
    assert_int_equal(pad, real);
    /* per TP rank: the embedding holds its share of the padded rows (plus
     * the replicated positions), the logits GEMM computes them */
    bool ovf = false;
    assert_int_equal(plan_layer_params(&m, &buf[0], 8, &ovf), (51200 / 8 + 1024) * 768);
    assert_int_equal(plan_layer_params_real(&m, &buf[0], &ovf), (50257 + 1024) * 768);
    assert_false(ovf);
    PlanCut cut = { .micro_batch = 1, .tp = 8, .sp = false, .recompute = RECOMPUTE_NONE };
    PlanLayerWork w;
    plan_layer_work(&m, &buf[m.n_layers - 1], &buf[m.n_layers - 2], &cut, &w);
    assert_true(w.gemm[0].n == 51200 / 8);
}

/* A vocabulary and the one padded up from it lay out the same: memory and
 * FLOPs count the padded rows (tied head on the last stage included). */
static void test_vocab_padded_memory_flops(void **state)
{
    (void)state;
    static const int64_t TP[] = { 2, 4 };   /* (tp 8 does not divide gpt2-odd's 12 heads) */
    for (int i = 0; i < 2; i++) {
        Layout l = { .dp = 16 / TP[i] / 2, .tp = (int)TP[i], .pp = 2, .zero = 1, .micro_batch = 2, .global_batch = 64,
                     .schedule = SCHED_1F1B, .chunks = 1, .recompute = RECOMPUTE_NONE, .sequence_parallel = 0, .ep = 1 };
        ModelCase a = MODELS[0], b = MODELS[0];
        Built x, y;
        build(&x, &a, cluster(2, 8), l);
        b.vocab = plan_vocab_padded(&x.p.model, (int)TP[i]);
        assert_true(b.vocab > a.vocab);
        build(&y, &b, cluster(2, 8), l);
        PlanEval ex, ey;
        plan_evaluate(&x.p, &ex);
        plan_evaluate(&y.p, &ey);
        assert_true(ex.valid && ey.valid);
        assert_int_equal(ex.peak_memory, ey.peak_memory);
        for (int s = 0; s < 2; s++) assert_int_equal(ex.stages[s].total_bytes, ey.stages[s].total_bytes);
        assert_true(ex.model_flops == ey.model_flops);
        assert_true(ex.step_time == ey.step_time);
        assert_true(ex.params < ey.params);   /* `params` is the real model */
        plan_eval_free(&ex);
        plan_eval_free(&ey);
    }
}

/* check --json: params is the real model; params_padded only when it differs. */
static void test_report_params_padded(void **state)
{
    (void)state;
    static const struct { int tp; int64_t mult; const char *want; } cases[] = {
        { 1, 1, NULL },
        { 4, 1, "\"params_padded\": 124442112" },
        { 1, 128, "\"params_padded\": 124475904" },
    };
    for (int i = 0; i < 3; i++) {
        Layer buf[PLAN_PRESET_LAYERS(12)];
        Model m;
        plan_preset_gpt(&m, buf, "gpt2", 12, 768, 12, 1024, 50257, DTYPE_BF16);
        m.vocab_multiple = cases[i].mult;
        Plan p = plan_preset_plan(m, plan_preset_dgx_a100(1), 8 / cases[i].tp, cases[i].tp, 1, 0, 1,
                                  8 / cases[i].tp, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
        char *text = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&text, &n);
        assert_int_equal(plan_check_report(f, stderr, &p, true), 0);
        fclose(f);
        assert_non_null(strstr(text, "\"params\": 124439808,"));
        if (cases[i].want) assert_non_null(strstr(text, cases[i].want));
        else assert_null(strstr(text, "params_padded"));
        free(text);
    }
}

/* ---- sema: the keys and diagnostics of this part ----------------------- */

typedef struct {
    DslArena a;
    DslDiag  d;
    Plan     p;
    char    *diag;
    size_t   diag_len;
    int      errors;
} Run;

static void run(Run *r, const char *model_extra, const char *device, const char *dtype, const char *plan)
{
    char text[4096];
    snprintf(text, sizeof text,
             "model m {\n"                                       /* 1 */
             "    vocab 50257; seq 999; dtype %s%s\n"            /* 2 */
             "    embedding { dim 256 }\n"                       /* 3 */
             "    repeat 4 { attention { heads 8 }; mlp {} }\n"  /* 4 */
             "    norm {}\n"
             "    lm_head\n"
             "}\n"
             "cluster c {\n"                                     /* 8 */
             "    nodes 1; gpus_per_node 8\n"
             "    device %s\n"                                   /* 10 */
             "    link intra { bandwidth 300 GB/s; latency 2 us }\n"
             "}\n"
             "plan { %s }\n",                                    /* 13 */
             dtype, model_extra, device, plan);
    memset(r, 0, sizeof *r);
    FILE *m = open_memstream(&r->diag, &r->diag_len);
    dsl_diag_init(&r->d, m);
    DslSource *src = dsl_source_from_string(&r->a, "t.plan", text, strlen(text));
    DslFile *f = dsl_parse_source(&r->a, &r->d, src);
    r->errors = f ? plan_sema(f, &r->d, &r->a, &r->p) : -1;
    fclose(m);
}

static void done(Run *r)
{
    free(r->diag);
    dsl_arena_free(&r->a);
}

static void test_sema_vocab_multiple(void **state)
{
    (void)state;
    Run r;
    run(&r, "; vocab_multiple 128", "a100-sxm-80gb", "bf16", "tp 8; global_batch 8");
    assert_int_equal(r.errors, 0);
    assert_int_equal(r.p.model.vocab_multiple, 128);
    assert_int_equal(plan_vocab_padded(&r.p.model, 8), 51200);
    done(&r);
    run(&r, "", "a100-sxm-80gb", "bf16", "tp 8; global_batch 8");
    assert_int_equal(r.errors, 0);
    assert_int_equal(r.p.model.vocab_multiple, 1);    /* the default */
    done(&r);
    static const char *const bad[] = { "0", "-2" };
    for (int i = 0; i < 2; i++) {
        char extra[64];
        snprintf(extra, sizeof extra, "; vocab_multiple %s", bad[i]);
        run(&r, extra, "a100-sxm-80gb", "bf16", "tp 8; global_batch 8");
        assert_int_equal(r.errors, 1);
        assert_non_null(strstr(r.diag, "t.plan:2:"));
        assert_non_null(strstr(r.diag, "'vocab_multiple' must be between 1 and"));
        done(&r);
    }
}

/* sequence_parallel with tp 1: a warning, exit unchanged, and off. */
static void test_sema_sp_tp1_warning(void **state)
{
    (void)state;
    Run r;
    run(&r, "", "a100-sxm-80gb", "bf16", "tp 1; sequence_parallel true");
    assert_int_equal(r.errors, 0);
    assert_int_equal(dsl_diag_exit_code(&r.d), 0);
    assert_non_null(strstr(r.diag, "t.plan:13:32: warning: sequence_parallel has no effect with tp 1\n"));
    assert_int_equal(r.p.layout.sequence_parallel, 0);
    Layout l = plan_layout_defaults(&r.p);
    assert_int_equal(l.sequence_parallel, 0);
    done(&r);
    run(&r, "", "a100-sxm-80gb", "bf16", "tp 2; sequence_parallel true; micro_batch 2");
    assert_int_equal(r.errors, 0);
    assert_null(strstr(r.diag, "warning"));
    assert_int_equal(r.p.layout.sequence_parallel, 1);
    done(&r);
}

/* ep on a dense model: a warning at the key's value, and ep 1. */
static void test_sema_ep_dense_warning(void **state)
{
    (void)state;
    Run r;
    run(&r, "", "a100-sxm-80gb", "bf16", "ep 2");
    assert_int_equal(r.errors, 0);
    assert_int_equal(dsl_diag_exit_code(&r.d), 0);
    assert_non_null(strstr(r.diag, "t.plan:13:11: warning: ep 2 has no effect on a dense model (no moe layers)\n"));
    assert_int_equal(r.p.layout.ep, 1);
    done(&r);
}

/* sema's diagnostics on fixed fields are the rules' own words. */
static void test_sema_speaks_the_rules(void **state)
{
    (void)state;
    static const struct { const char *plan; const char *loc; } cases[] = {
        { "tp 2; sequence_parallel true; micro_batch 1", "t.plan:13:32: error: " },
        { "tp 3", "t.plan:13:11: error: " },
        { "pp 5", "t.plan:13:11: error: " },
    };
    for (int i = 0; i < 3; i++) {
        Run r;
        run(&r, "", "a100-sxm-80gb", "bf16", cases[i].plan);
        assert_true(r.errors >= 1);   /* (tp 3, pp 5 also miss the cluster's 8 GPUs) */
        Layout l = r.p.layout;
        char why[256] = "";
        assert_false(plan_rule_tp_split(&r.p.model, l.tp, why, sizeof why) &&
                     plan_rule_sp_rows(&r.p.model, l.tp, l.micro_batch, l.sequence_parallel, why, sizeof why) &&
                     plan_rule_pp_blocks(&r.p.model, l.pp, l.chunks, why, sizeof why));
        char want[512];
        snprintf(want, sizeof want, "%s%s\n", cases[i].loc, why);
        if (!strstr(r.diag, want)) {
            print_error("want '%s' in:\n%s", want, r.diag);
            fail();
        }
        done(&r);
    }
}

static void test_sema_device_keys(void **state)
{
    (void)state;
    Run r;
    run(&r, "", "{ memory 1 GiB; flops 2 TFLOPS; flops_fp32 1 TFLOPS; hbm 100 GB/s; sms 40 }", "bf16", "tp 1");
    assert_int_equal(r.errors, 0);
    assert_int_equal(r.p.cluster.device.sms, 40);
    assert_true(r.p.cluster.device.flops_fp32 == 1e12 && r.p.cluster.device.flops_16 == 2e12);
    done(&r);
    run(&r, "", "h100-sxm-80gb { sms 100 }", "bf16", "tp 1");     /* a preset keeps its figures */
    assert_int_equal(r.errors, 0);
    assert_int_equal(r.p.cluster.device.sms, 100);
    assert_true(r.p.cluster.device.flops_fp32 == 67e12);
    done(&r);
    run(&r, "", "{ memory 1 GiB; flops 2 TFLOPS; hbm 100 GB/s }", "bf16", "tp 1");
    assert_int_equal(r.errors, 0);   /* 16-bit: one rate for both (stated default) */
    assert_int_equal(r.p.cluster.device.sms, 0);
    assert_true(r.p.cluster.device.flops_fp32 == 2e12);
    done(&r);
    run(&r, "", "{ memory 1 GiB; flops 2 TFLOPS; hbm 100 GB/s }", "fp32", "tp 1");
    assert_int_equal(r.errors, 1);   /* fp32 runs at the fp32 peak: it must be written */
    assert_non_null(strstr(r.diag, "t.plan:10:5: error: device needs 'flops_fp32' when model m trains in fp32"));
    done(&r);
    run(&r, "", "{ memory 1 GiB; flops 2 TFLOPS; hbm 100 GB/s; sms 0 }", "bf16", "tp 1");
    assert_int_equal(r.errors, 1);
    assert_non_null(strstr(r.diag, "'sms' must be between 1 and"));
    done(&r);
}

/* ---- one buffer formula, one device table ------------------------------ */

static void test_buffer_formula(void **state)
{
    (void)state;
    /* the transfer buffers alive at once, two gathered layers (ZeRO-3,
     * bf16), two buckets in the gradients' dtype (ZeRO >= 2; ZeRO-1
     * reduce-scatters from its full gradient buffer: no buckets) */
    assert_int_equal(plan_memory_buffers(2, 3, 100, 10, DTYPE_BF16, DTYPE_BF16), 2 * 100 + 2 * 10 * 2 + 2 * 10 * 2);
    assert_int_equal(plan_memory_buffers(6, 3, 100, 10, DTYPE_BF16, DTYPE_FP32), 6 * 100 + 2 * 10 * 2 + 2 * 10 * 4);
    assert_int_equal(plan_memory_buffers(0, 0, 100, 10, DTYPE_FP32, DTYPE_FP32), 0);
    assert_int_equal(plan_memory_buffers(2, 1, 100, 10, DTYPE_FP32, DTYPE_FP32), 2 * 100);
    assert_int_equal(plan_memory_buffers(0, 2, 100, 10, DTYPE_FP32, DTYPE_FP32), 2 * 10 * 4);
    /* the slots: one per micro-batch and chunk in flight (1F1B: p - s;
     * interleaved: the warm-up's chunk forwards + 1; pp 1: one) */
    assert_int_equal((int)plan_pipe_slots(SCHED_1F1B, 4, 0, 16, 1), 4);
    assert_int_equal((int)plan_pipe_slots(SCHED_1F1B, 4, 3, 16, 1), 1);
    assert_int_equal((int)plan_pipe_slots(SCHED_1F1B, 1, 0, 16, 1), 1);
    assert_int_equal((int)plan_pipe_slots(SCHED_GPIPE, 2, 1, 8, 1), 8);
    assert_int_equal((int)plan_pipe_slots(SCHED_INTERLEAVED, 4, 0, 16, 2), 2 * 3 + 4 + 1);
    /* the transfer buffers do not grow with the micro-batches in flight:
     * an output is freed once sent (Megatron's deallocate_output_tensor) */
    assert_int_equal((int)plan_pipe_xfer_bufs(SCHED_1F1B, 4, 0, 16, 1, 3, 2), 2);
    assert_int_equal((int)plan_pipe_xfer_bufs(SCHED_1F1B, 4, 3, 16, 1, 3, 2), 1);
    assert_int_equal((int)plan_pipe_xfer_bufs(SCHED_1F1B, 1, 0, 16, 1, 3, 2), 1);
    assert_int_equal((int)plan_pipe_xfer_bufs(SCHED_GPIPE, 2, 1, 8, 1, 3, 2), 2);
    assert_int_equal((int)plan_pipe_xfer_bufs(SCHED_INTERLEAVED, 64, 0, 512, 2, 0, 6), 2);
    assert_int_equal((int)plan_pipe_xfer_bufs(SCHED_INTERLEAVED, 64, 63, 512, 2, 3, 6), 62);   /* early receives */
    /* plan_memory's buffers are that formula */
    Built b;
    Layout l = { .dp = 2, .tp = 2, .pp = 4, .zero = 3, .micro_batch = 2, .global_batch = 64, .schedule = SCHED_1F1B,
                 .chunks = 1, .recompute = RECOMPUTE_NONE, .sequence_parallel = 0, .ep = 1 };
    build(&b, &MODELS[1], cluster(2, 8), l);
    PlanCosts c;
    b.p.software.grad_accum_dtype = DTYPE_BF16;
    assert_true(plan_costs(&b.p, &l, &c));
    PlanStageMem mem[4];
    plan_memory(&b.p, &c, mem);
    for (int s = 0; s < 4; s++) {
        const PlanChunkCost *k = &c.cost[s];
        assert_int_equal(mem[s].buffers_bytes,
                         plan_memory_buffers(plan_pipe_xfer_bufs(SCHED_1F1B, 4, s, c.n_micro, 1, 3, 2), 3, k->p2p_bytes,
                                             (double)k->layer_params_max, DTYPE_BF16, DTYPE_BF16));
    }
    plan_costs_free(&c);
    /* unset (a bf16 model's fp32 gradients) and grad_accum_dtype fp32: the
     * buckets are fp32, the gathered layers stay bf16 */
    b.p.software.grad_accum_dtype = PLAN_AUTO;
    assert_true(plan_costs(&b.p, &l, &c));
    plan_memory(&b.p, &c, mem);
    for (int s = 0; s < 4; s++) {
        const PlanChunkCost *k = &c.cost[s];
        assert_int_equal(mem[s].buffers_bytes,
                         plan_memory_buffers(plan_pipe_xfer_bufs(SCHED_1F1B, 4, s, c.n_micro, 1, 3, 2), 3, k->p2p_bytes,
                                             (double)k->layer_params_max, DTYPE_BF16, DTYPE_FP32));
    }
    plan_costs_free(&c);
}

static void test_device_table(void **state)
{
    (void)state;
    const struct { Cluster c; const char *preset; } cases[] = {
        { plan_preset_dgx_a100(1), "a100-sxm-80gb" },
        { plan_preset_dgx_h100(1), "h100-sxm-80gb" },
    };
    for (int i = 0; i < 2; i++) {
        const Device *d = plan_device_preset(cases[i].preset), *e = &cases[i].c.device;
        assert_non_null(d);
        assert_string_equal(e->name, d->name);
        assert_true(e->memory == d->memory && e->flops_fp32 == d->flops_fp32 && e->flops_16 == d->flops_16 &&
                    e->hbm == d->hbm && e->sms == d->sms);
    }
    assert_null(plan_device_preset("a100"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_check_emit_agree),
        cmocka_unit_test(test_search_results_pass_check),
        cmocka_unit_test(test_each_rule),
        cmocka_unit_test(test_rules_ignore_auto),
        cmocka_unit_test(test_ep_rules),
        cmocka_unit_test(test_vocab_padded_counts),
        cmocka_unit_test(test_vocab_padded_memory_flops),
        cmocka_unit_test(test_report_params_padded),
        cmocka_unit_test(test_sema_vocab_multiple),
        cmocka_unit_test(test_sema_sp_tp1_warning),
        cmocka_unit_test(test_sema_ep_dense_warning),
        cmocka_unit_test(test_sema_speaks_the_rules),
        cmocka_unit_test(test_sema_device_keys),
        cmocka_unit_test(test_buffer_formula),
        cmocka_unit_test(test_device_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
