/*
 * test_search.c: planner/search.c — the pruned search against brute force
 * (every layout evaluated in full) over a table of small cases; the
 * estimates against the exact figures, layout by layout; results that
 * re-check identically; constraints; nothing-fits; and, given the path of
 * planc as argv[1], the command line: --json, --write then `planc check`
 * to the digit, exit 1 with the shortfall named.
 *
 * Run from the repository root (make test-search does).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "planner/cost.h"
#include "planner/layout.h"
#include "planner/presets.h"
#include "planner/search.h"

static const char *planc_path;   /* argv[1], for the command-line tests */

/* ---- the cases -------------------------------------------------------- */

#define MAXB 48
typedef struct {
    const char *name;
    int   kind;          /* 0 GPT (tied head), 1 Llama (GQA, untied), 2 Llama with every MLP a
                            mixture of 8 experts of ffn, top 2 (Mixtral), 3 of 4 experts, top 1
                            and one shared expert (issue 17: ep searched) */
    int   blocks;
    int64_t dim, heads, kv, ffn, seq, vocab;
    int   nodes;         /* DGX A100 (kind 0) or H100 (kind 1) nodes */
    int64_t gb;
    double mem_gib;      /* device memory override; 0 keeps the preset's */
    int   top;
} Case;

static const Case CASES[] = {
    /* GPT-2 medium-ish on 2 nodes: tied head across stages, deep pipelines */
    { "gpt-24x1024 / 16 A100, 12 GiB", 0, 24, 1024, 16, 16, 4096, 1024, 50304, 2, 64, 12, 10 },
    /* 10 blocks: uneven splits, interleaving with few chunks */
    { "gpt-10x512 / 8 A100", 0, 10, 512, 8, 8, 2048, 512, 32000, 1, 32, 0, 5 },
    { "gpt-10x2048 / 8 A100, 5 GiB", 0, 10, 2048, 16, 16, 8192, 2048, 32000, 1, 32, 5, 5 },
    /* an 8B-class Llama on 32 H100 with tight memory: most layouts do not fit */
    { "llama-32x4096 / 32 H100, 24 GiB", 1, 32, 4096, 32, 8, 14336, 4096, 128256, 4, 64, 24, 10 },
    /* top 1 and a large top K */
    { "llama-16x2048 / 16 H100 top 1", 1, 16, 2048, 16, 4, 5632, 2048, 32000, 2, 96, 0, 1 },
    { "llama-16x2048 / 16 H100 top 40, 20 GiB", 1, 16, 2048, 16, 4, 5632, 2048, 32000, 2, 96, 20, 40 },
    /* fits nowhere: the closest layout must match */
    { "llama-32x8192 / 8 H100, 16 GiB", 1, 32, 8192, 64, 8, 28672, 4096, 128256, 1, 16, 16, 5 },
    /* mixtures: ep over the divisors of dp that the experts allow */
    { "moe-8x1024, 8 experts / 16 H100, 10 GiB", 2, 8, 1024, 16, 8, 2816, 2048, 32000, 2, 64, 10, 10 },
    { "moe-12x2048, 4+1 experts / 32 H100, 20 GiB", 3, 12, 2048, 16, 4, 2816, 2048, 32000, 4, 64, 20, 5 },
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

static Layer layers[N_CASES][PLAN_PRESET_LAYERS(MAXB)];

static Plan case_plan(int i)
{
    const Case *c = &CASES[i];
    Model m;
    Cluster cl;
    if (c->kind == 0) {
        plan_preset_gpt(&m, layers[i], c->name, c->blocks, c->dim, c->heads, c->seq, c->vocab, DTYPE_BF16);
        cl = plan_preset_dgx_a100(c->nodes);
    } else {
        plan_preset_llama(&m, layers[i], c->name, c->blocks, c->dim, c->heads, c->kv, c->ffn, c->seq,
                          c->vocab, DTYPE_BF16);
        cl = plan_preset_dgx_h100(c->nodes);
        for (int k = 0; c->kind >= 2 && k < m.n_layers; k++) {
            Layer *l = &layers[i][k];
            if (l->kind != LAYER_MLP) continue;
            l->kind = LAYER_MOE;
            l->experts = c->kind == 2 ? 8 : 4;
            l->top_k = c->kind == 2 ? 2 : 1;
            l->shared = c->kind == 2 ? 0 : 1;
        }
    }
    if (c->mem_gib > 0) cl.device.memory = (uint64_t)(c->mem_gib * 1073741824.0);
    Plan p = plan_preset_plan(m, cl, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, c->gb,
                              PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO);
    p.layout.ep = PLAN_AUTO;   /* searched */
    return p;
}

static void run(const Plan *p, int top, bool prune, bool rec, PlanSearch *s)
{
    PlanSearchOptions o = plan_search_defaults();
    o.top = top;
    o.prune = prune;
    o.record = rec;
    char why[256];
    bool ok = plan_search(p, &o, s, why, sizeof why);
    if (!ok) fprintf(stderr, "search failed: %s\n", why);
    assert_true(ok);
    assert_int_equal(s->space, s->considered);   /* the count before = the layouts built */
}

static bool same_layout(const Layout *a, const Layout *b)
{
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->zero == b->zero &&
           a->micro_batch == b->micro_batch && a->global_batch == b->global_batch &&
           a->schedule == b->schedule && a->chunks == b->chunks && a->recompute == b->recompute &&
           a->sequence_parallel == b->sequence_parallel && plan_ep(a) == plan_ep(b);
}

/* ---- pruned == brute force -------------------------------------------- */

static void test_pruned_equals_brute(void **state)
{
    (void)state;
    for (int i = 0; i < N_CASES; i++) {
        Plan p = case_plan(i);
        PlanSearch b, s;
        run(&p, CASES[i].top, false, false, &b);
        run(&p, CASES[i].top, true, false, &s);
        printf("  %-36s %6lld layouts %5lld feasible: brute %6lld evaluated, pruned %5lld\n",
               CASES[i].name, (long long)b.considered, (long long)b.feasible,
               (long long)b.evaluated, (long long)s.evaluated);
        assert_true(b.considered > 0);
        assert_int_equal(s.considered, b.considered);
        assert_int_equal(b.space, b.considered);               /* counted first, exactly */
        assert_int_equal(s.space, s.considered);
        assert_int_equal(s.collapsed, b.collapsed);            /* folding is exact */
        assert_false(s.capped || b.capped);
        assert_int_equal(b.evaluated, b.considered);           /* brute force: every layout */
        assert_int_equal(s.feasible, b.feasible);
        assert_int_equal(s.dropped.memory, b.dropped.memory);
        assert_int_equal(s.dropped.invalid, b.dropped.invalid);
        assert_int_equal(s.bound_violations, 0);
        assert_int_equal(s.n_results, b.n_results);
        for (int k = 0; k < s.n_results; k++) {
            assert_true(same_layout(&s.results[k].layout, &b.results[k].layout));
            assert_true(s.results[k].step_time == b.results[k].step_time);
            assert_true(s.results[k].peak_memory == b.results[k].peak_memory);
            if (k) assert_true(s.results[k - 1].step_time <= s.results[k].step_time);
        }
        assert_int_equal(s.has_closest, b.has_closest);
        if (s.has_closest) {
            assert_int_equal(s.n_results, 0);
            assert_true(same_layout(&s.closest.layout, &b.closest.layout));
            assert_true(s.closest.peak_memory == b.closest.peak_memory);
        }
        if (b.feasible > 0) assert_true(s.evaluated < b.evaluated);   /* the bounds did prune */
        plan_search_free(&b);
        plan_search_free(&s);
    }
}

/* ---- distinct rows ---------------------------------------------------- */

/* Whether two results print the same figures (the table's and check's). */
static bool same_row(const PlanEval *a, const PlanEval *b)
{
    return a->step_time == b->step_time && a->peak_memory == b->peak_memory &&
           a->bubble_fraction == b->bubble_fraction && a->hfu == b->hfu &&
           a->times.dp_exposed == b->times.dp_exposed && a->times.sync == b->times.sync &&
           a->times.gather_exposed == b->times.gather_exposed;
}

/* Every row a distinct layout: at pp 1 one schedule (1F1B), at dp 1 one
 * ZeRO stage (0), no two rows with the same figures; brute force and the
 * pruned search alike, with a top K large enough to hold ties. */
static void test_distinct_rows(void **state)
{
    (void)state;
    int pp1 = 0;
    for (int i = 0; i < N_CASES; i++) {
        Plan p = case_plan(i);
        for (int prune = 0; prune < 2; prune++) {
            PlanSearch s;
            run(&p, 40, prune, false, &s);
            for (int k = 0; k < s.n_results; k++) {
                const Layout *l = &s.results[k].layout;
                if (l->pp == 1) {
                    pp1++;
                    assert_int_equal(l->schedule, SCHED_1F1B);
                    assert_int_equal(l->chunks, 1);
                }
                if (l->dp == 1) assert_int_equal(l->zero, 0);
                for (int j = 0; j < k; j++) {
                    if (same_row(&s.results[j], &s.results[k]))
                        fprintf(stderr, "  %s: rows %d and %d have the same figures\n", CASES[i].name, j + 1, k + 1);
                    assert_false(same_row(&s.results[j], &s.results[k]));
                    assert_false(same_layout(&s.results[j].layout, l));
                }
            }
            plan_search_free(&s);
        }
    }
    assert_true(pp1 > 0);            /* the cases do rank pp 1 layouts */
}

/* The fold keeps the simplest layout of a tie: a plan whose figures do not
 * depend on recomputation nor ZeRO stage would be one row. Here: a search
 * constrained to one layout but for the schedule at pp 1 is one row. */
static void test_pp1_one_row(void **state)
{
    (void)state;
    Plan p = case_plan(1);           /* 8 GPUs */
    p.layout.dp = 8; p.layout.tp = 1; p.layout.pp = 1; p.layout.zero = 1;
    p.layout.micro_batch = 2; p.layout.recompute = RECOMPUTE_NONE;
    PlanSearch s;
    run(&p, 10, true, false, &s);
    assert_int_equal(s.space, 1);
    assert_int_equal(s.considered, 1);
    assert_int_equal(s.n_results, 1);
    assert_int_equal(s.results[0].layout.schedule, SCHED_1F1B);
    plan_search_free(&s);
}

/* ---- bounded work ----------------------------------------------------- */

/* The space is counted before anything is built; over --max-layouts the
 * search refuses, naming the count and what to fix; at the count it runs. */
static void test_refuse_large_space(void **state)
{
    (void)state;
    Plan p = case_plan(3);
    PlanSearchOptions o = plan_search_defaults();
    PlanSearch s;
    char why[512];
    assert_true(plan_search(&p, &o, &s, why, sizeof why));
    int64_t space = s.space, work = (int64_t)ceil(s.space_work);
    assert_true(space > 100);
    assert_int_equal(space, s.considered);
    assert_true(s.space_work >= (double)space && s.space_sums > 0);
    plan_search_free(&s);
    o.max_layouts = work - 1;
    assert_false(plan_search(&p, &o, &s, why, sizeof why));
    assert_true(s.refused);
    assert_int_equal(s.considered, 0);         /* nothing was enumerated */
    assert_int_equal(s.evaluated, 0);
    assert_int_equal(s.space, space);
    assert_non_null(strstr(why, "more than --max-layouts"));
    assert_non_null(strstr(why, "the space has"));
    assert_non_null(strstr(why, "tp"));
    assert_non_null(strstr(why, "pass --max-layouts N"));
    plan_search_free(&s);
    o.max_layouts = work;
    assert_true(plan_search(&p, &o, &s, why, sizeof why));
    assert_false(s.refused);
    plan_search_free(&s);
    o.max_layouts = 0;                          /* no limit */
    assert_true(plan_search(&p, &o, &s, why, sizeof why));
    plan_search_free(&s);
}

/* A layout whose step has more micro-steps than the search simulates is
 * counted, never evaluated; when every layout is one, the search says how
 * to constrain it. */
static void test_too_many_micro_steps(void **state)
{
    (void)state;
    Plan p = case_plan(1);           /* 8 GPUs, 10 blocks */
    p.layout.micro_batch = 1;
    p.layout.global_batch = (int64_t)1 << 28;   /* >= 2^25 micro-batches per DP rank */
    PlanSearchOptions o = plan_search_defaults();
    PlanSearch s;
    char why[512];
    assert_false(plan_search(&p, &o, &s, why, sizeof why));
    assert_false(s.refused);
    assert_true(s.dropped.too_large > 0);
    assert_int_equal(s.evaluated, 0);
    assert_non_null(strstr(why, "micro-steps"));
    assert_non_null(strstr(why, "micro_batch"));
    plan_search_free(&s);
    /* a micro-batch 1024 times larger: nothing is too large */
    p.layout.micro_batch = 1024;
    assert_true(plan_search(&p, &o, &s, why, sizeof why));
    assert_int_equal(s.dropped.too_large, 0);
    assert_true(s.n_results > 0);
    plan_search_free(&s);
}

/* ---- the estimates, layout by layout ---------------------------------- */

/* Every layout: the memory estimate within the slack of the exact peak,
 * feasibility identical, the time bound below the exact step time. */
static void test_estimates_bound_exact(void **state)
{
    (void)state;
    for (int i = 0; i < N_CASES; i++) {
        Plan p = case_plan(i);
        PlanSearch b, s;
        run(&p, 3, false, true, &b);
        run(&p, 3, true, true, &s);
        assert_int_equal(s.n_points, b.n_points);
        int64_t bad = 0;
        for (int64_t k = 0; k < b.n_points; k++) {
            const PlanSearchPoint *x = &b.points[k], *e = &s.points[k];
            assert_true(x->exact);
            assert_true(same_layout(&x->layout, &e->layout));
            double d = (double)x->peak_memory - (double)e->peak_memory;
            if (d < 0) d = -d;
            bool ok = e->feasible == x->feasible && d <= 1e-9 * (double)x->peak_memory + 64 &&
                      e->step_time <= x->step_time;
            if (!ok && bad++ < 5)
                fprintf(stderr, "  layout %lld: exact %llu B %.9g s fits %d, estimate %llu B %.9g s fits %d\n",
                        (long long)k, (unsigned long long)x->peak_memory, x->step_time, x->feasible,
                        (unsigned long long)e->peak_memory, e->step_time, e->feasible);
        }
        assert_int_equal(bad, 0);
        plan_search_free(&b);
        plan_search_free(&s);
    }
}

/* ---- ep is searched (issue 17) ----------------------------------------- */

/* On a mixture every ep the rules allow is enumerated jointly with the
 * rest (ep divides dp and the experts), and the results carry theirs; on
 * a dense model ep stays 1. */
static void test_ep_searched(void **state)
{
    (void)state;
    for (int i = 0; i < N_CASES; i++) {
        Plan p = case_plan(i);
        PlanSearch s;
        run(&p, CASES[i].top, true, true, &s);
        bool seen[9] = { false };
        for (int64_t k = 0; k < s.n_points; k++) {
            const Layout *l = &s.points[k].layout;
            int ep = plan_ep(l);
            assert_true(ep >= 1 && ep <= 8);
            assert_int_equal(l->dp % ep, 0);
            seen[ep] = true;
        }
        int kinds = 0;
        for (int e = 1; e <= 8; e++) kinds += seen[e];
        printf("  %-36s %lld points, ep seen: %d%d%d%d%d%d%d%d\n", CASES[i].name, (long long)s.n_points, seen[1],
               seen[2], seen[3], seen[4], seen[5], seen[6], seen[7], seen[8]);
        if (CASES[i].kind < 2) assert_int_equal(kinds, 1);
        else if (CASES[i].kind == 2) assert_true(seen[1] && seen[2] && seen[4] && seen[8] && kinds == 4);
        else assert_true(seen[1] && seen[2] && seen[4] && kinds == 3);   /* 4 experts: not 8 */
        plan_search_free(&s);
    }
}

/* ---- results re-check ------------------------------------------------- */

/* Each result is what plan_evaluate (check's evaluation) says of a plan
 * whose plan block is that layout, bit for bit. */
static void test_results_recheck(void **state)
{
    (void)state;
    for (int i = 0; i < N_CASES; i++) {
        Plan p = case_plan(i);
        PlanSearch s;
        run(&p, CASES[i].top, true, false, &s);
        for (int k = 0; k < s.n_results; k++) {
            Plan q = p;
            q.layout = s.results[k].layout;
            PlanEval ev;
            plan_evaluate(&q, &ev);
            assert_true(ev.valid && ev.feasible);
            assert_true(same_layout(&ev.layout, &s.results[k].layout));
            assert_true(ev.step_time == s.results[k].step_time);
            assert_true(ev.peak_memory == s.results[k].peak_memory);
            plan_eval_free(&ev);
        }
        plan_search_free(&s);
    }
}

/* ---- recomputation is given ------------------------------------------ */

/* The parts a plan's recompute covers are given, never searched: every
 * result carries them (torchtitan's selective_op, Megatron's modules,
 * recompute_layers in either method, recompute_every), each is what
 * plan_evaluate says of that layout bit for bit, and the pruned search
 * equals brute force (for the per-block settings it evaluates every
 * layout: a block's cost depends on where it sits in its chunk). */
static void test_recompute_given(void **state)
{
    (void)state;
    static const struct { int rec, mods, layers, method, every; } R[] = {
        { RECOMPUTE_SELECTIVE_OP, 0, 0, 0, 0 },
        { RECOMPUTE_SELECTIVE, PLAN_RC_BIT(PLAN_RC_CORE_ATTN) | PLAN_RC_BIT(PLAN_RC_MLP), 0, 0, 0 },
        { RECOMPUTE_FULL, 0, 1, PLAN_RC_METHOD_BLOCK, 0 },
        { RECOMPUTE_FULL, 0, 2, PLAN_RC_METHOD_UNIFORM, 0 },
        { RECOMPUTE_FULL, 0, 0, 0, 2 },
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        Plan p = case_plan(0);
        p.layout.recompute = R[i].rec;
        p.layout.recompute_modules = R[i].mods;
        p.layout.recompute_layers = R[i].layers;
        p.layout.recompute_method = R[i].method;
        p.layout.recompute_every = R[i].every;
        PlanSearch s, b;
        run(&p, 5, true, false, &s);
        run(&p, 5, false, false, &b);
        assert_true(s.n_results > 0);
        assert_int_equal(s.n_results, b.n_results);
        for (int k = 0; k < s.n_results; k++) {
            const Layout *l = &s.results[k].layout;
            assert_int_equal(l->recompute, R[i].rec);
            assert_int_equal(l->recompute_modules, R[i].mods);
            assert_int_equal(l->recompute_layers, R[i].layers);
            assert_int_equal(l->recompute_method, R[i].method);
            assert_int_equal(l->recompute_every, R[i].every);
            assert_true(same_layout(l, &b.results[k].layout));
            assert_true(s.results[k].step_time == b.results[k].step_time);
            Plan q = p;
            q.layout = *l;
            PlanEval ev;
            plan_evaluate(&q, &ev);
            assert_true(ev.valid && ev.feasible);
            assert_true(ev.step_time == s.results[k].step_time);
            assert_true(ev.peak_memory == s.results[k].peak_memory);
            plan_eval_free(&ev);
        }
        plan_search_free(&s);
        plan_search_free(&b);
    }
}

/* ---- the software is given ------------------------------------------- */

/* The plan's software settings (overlap_*, grad_accum_fusion) are given, not
 * searched: under Megatron-LM 2021's (reductions after the flush, blocking
 * sends, weight gradients accumulated apart) and
 * Megatron-Core's (everything overlapped), the pruned search equals brute
 * force (the bounds hold for every setting), and each result is what
 * plan_evaluate says of that layout with that software, bit for bit; the
 * settings move some result's time against planc's defaults. */
static void test_software_given(void **state)
{
    (void)state;
    static const Software sw[] = {
        { .overlap_grad_reduce = false, .overlap_param_gather = false, .overlap_p2p = false, .overlap_tp = false,
          .grad_accum_fusion = false },
        { .overlap_grad_reduce = true, .overlap_param_gather = true, .overlap_p2p = true, .overlap_tp = true,
          .grad_accum_fusion = true },
    };
    for (int i = 0; i < 4; i++) {
        Plan base = case_plan(i);
        PlanSearch d;
        run(&base, CASES[i].top, true, false, &d);
        for (size_t w = 0; w < sizeof sw / sizeof sw[0]; w++) {
            Plan p = base;
            p.software = sw[w];
            PlanSearch b, s;
            run(&p, CASES[i].top, false, false, &b);
            run(&p, CASES[i].top, true, false, &s);
            assert_int_equal(s.bound_violations, 0);
            assert_int_equal(s.n_results, b.n_results);
            bool moved = s.n_results != d.n_results;
            for (int k = 0; k < s.n_results; k++) {
                assert_true(same_layout(&s.results[k].layout, &b.results[k].layout));
                assert_true(s.results[k].step_time == b.results[k].step_time);
                Plan q = p;
                q.layout = s.results[k].layout;
                PlanEval ev;
                plan_evaluate(&q, &ev);
                assert_true(ev.step_time == s.results[k].step_time);
                plan_eval_free(&ev);
                if (k < d.n_results) moved = moved || s.results[k].step_time != d.results[k].step_time;
            }
            if (d.n_results > 0) assert_true(moved);
            plan_search_free(&b);
            plan_search_free(&s);
        }
        plan_search_free(&d);
    }
}

/* ---- constraints ------------------------------------------------------ */

/* Whether l lies inside constraints c; with `searched`, l is a layout of
 * the unconstrained space, where pp 1 has no schedule choice (1F1B) and
 * dp 1 no ZeRO choice (stage 0): there a fixed field may not match. */
static bool matches_in(const Layout *c, const Layout *l, bool searched)
{
    bool any_sched = searched && l->pp == 1 && c->schedule != SCHED_INTERLEAVED;
    bool any_zero = searched && l->dp == 1;
    return (c->dp == PLAN_AUTO || c->dp == l->dp) && (c->tp == PLAN_AUTO || c->tp == l->tp) &&
           (c->pp == PLAN_AUTO || c->pp == l->pp) && (c->zero == PLAN_AUTO || any_zero || c->zero == l->zero) &&
           (c->micro_batch == PLAN_AUTO || c->micro_batch == l->micro_batch) &&
           (c->schedule == PLAN_AUTO || any_sched || c->schedule == l->schedule) &&
           (c->chunks == PLAN_AUTO || c->chunks == l->chunks) &&
           (c->recompute == PLAN_AUTO || c->recompute == l->recompute) &&
           (c->sequence_parallel == PLAN_AUTO || c->sequence_parallel == l->sequence_parallel);
}

static bool matches(const Layout *c, const Layout *l) { return matches_in(c, l, false); }

/* A constrained search is the unconstrained space filtered: same count,
 * every result inside the constraints, the same best. */
static void test_constraints(void **state)
{
    (void)state;
    Plan p = case_plan(0);
    PlanSearch all;
    run(&p, 1, false, true, &all);
    Layout cons[] = {
        { .dp = PLAN_AUTO, .tp = 2, .pp = PLAN_AUTO, .zero = 1, .micro_batch = PLAN_AUTO, .global_batch = 64,
          .schedule = PLAN_AUTO, .chunks = PLAN_AUTO, .recompute = PLAN_AUTO, .sequence_parallel = PLAN_AUTO },
        { .dp = PLAN_AUTO, .tp = PLAN_AUTO, .pp = 4, .zero = PLAN_AUTO, .micro_batch = 2, .global_batch = 64,
          .schedule = SCHED_INTERLEAVED, .chunks = PLAN_AUTO, .recompute = RECOMPUTE_FULL,
          .sequence_parallel = PLAN_AUTO },
        { .dp = 2, .tp = PLAN_AUTO, .pp = PLAN_AUTO, .zero = PLAN_AUTO, .micro_batch = PLAN_AUTO,
          .global_batch = 64, .schedule = SCHED_ZB_H1, .chunks = 1, .recompute = RECOMPUTE_SELECTIVE,
          .sequence_parallel = PLAN_AUTO },
    };
    for (int c = 0; c < (int)(sizeof cons / sizeof cons[0]); c++) {
        Plan q = p;
        q.layout = cons[c];
        PlanSearch s;
        run(&q, 5, true, false, &s);
        /* n: the layouts of the constrained space, one for one (a fixed
         * schedule at pp 1 or ZeRO stage at dp 1 stands in for the
         * searched one); feasibility and the best among the strict matches */
        int64_t n = 0, feas = 0, best = -1;
        for (int64_t k = 0; k < all.n_points; k++) {
            const PlanSearchPoint *x = &all.points[k];
            if (!matches_in(&cons[c], &x->layout, true)) continue;
            n++;
            if (!x->feasible || !matches(&cons[c], &x->layout)) continue;
            feas++;
            if (best < 0 || x->step_time < all.points[best].step_time ||
                (x->step_time == all.points[best].step_time && x->peak_memory < all.points[best].peak_memory))
                best = k;
        }
        assert_int_equal(s.considered, n);
        assert_true(s.feasible >= feas && s.feasible <= n);
        assert_true(s.n_results > 0 && best >= 0);
        for (int k = 0; k < s.n_results; k++) assert_true(matches(&cons[c], &s.results[k].layout));
        assert_true(s.results[0].step_time <= all.points[best].step_time);
        if (s.results[0].layout.pp > 1 && s.results[0].layout.dp > 1)
            assert_true(same_layout(&s.results[0].layout, &all.points[best].layout));
        plan_search_free(&s);
    }
    plan_search_free(&all);
    /* sequence parallelism asked for: every layout with tp > 1 has it; at
     * tp 1 it means nothing and is off (planner/layout.h) */
    Plan q = p;
    q.layout.sequence_parallel = 1;
    PlanSearch s;
    run(&q, 50, true, false, &s);
    assert_true(s.n_results == 50);
    for (int k = 0; k < s.n_results; k++)
        assert_int_equal(s.results[k].layout.sequence_parallel, s.results[k].layout.tp > 1);
    plan_search_free(&s);
}

/* Options: --max-tp and TP inside a node. */
static void test_options(void **state)
{
    (void)state;
    Plan p = case_plan(0);
    PlanSearchOptions o = plan_search_defaults();
    o.max_tp = 2;
    PlanSearch s;
    char why[256];
    assert_true(plan_search(&p, &o, &s, why, sizeof why));
    for (int k = 0; k < s.n_results; k++) assert_true(s.results[k].layout.tp <= 2);
    plan_search_free(&s);
    /* without a global batch there is nothing to rank */
    p.layout.global_batch = PLAN_AUTO;
    assert_false(plan_search(&p, &o, &s, why, sizeof why));
    assert_non_null(strstr(why, "global_batch"));
    plan_search_free(&s);
}

/* ---- the command line ------------------------------------------------- */

static const char CLUSTER_FILE[] =
    "cluster c {\n"
    "    nodes 2; gpus_per_node 8\n"
    "    device a100-sxm-80gb\n"
    "    link intra { bandwidth 300 GB/s; latency 2 us }\n"
    "    link inter { bandwidth 200 Gb/s; latency 5 us }\n"
    "}\n";

static const char PLAN_FILE[] =
    "# a searched plan\n"
    "include \"cl/c.plan\"\n"
    "model m {\n"
    "    vocab 32000; seq 1024; dtype bf16\n"
    "    embedding { dim 1024 }\n"
    "    repeat 16 { attention { heads 16 }; mlp { hidden 4096 } }\n"
    "    norm {}\n"
    "    lm_head { tied true }\n"
    "}\n"
    "plan {\n"
    "    global_batch 64   # sequences per step\n"
    "    %s\n"
    "}\n";

static char *slurp(const char *cmd)
{
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    pclose(f);
    return buf;
}

/* The text after "key": up to the next ',' or '}' in a JSON line. */
static void json_value(const char *json, const char *key, char *out, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    assert_non_null(p);
    p += strlen(pat);
    size_t n = strcspn(p, ",}\n");
    if (n >= len) n = len - 1;
    memcpy(out, p, n);
    out[n] = 0;
}

/* dir/in.plan including dir/cl/c.plan */
static void write_plan(const char *dir, const char *path, const char *extra)
{
    char cl[512];
    snprintf(cl, sizeof cl, "%s/cl", dir);
    mkdir(cl, 0755);
    snprintf(cl, sizeof cl, "%s/cl/c.plan", dir);
    FILE *f = fopen(cl, "w");
    assert_non_null(f);
    fputs(CLUSTER_FILE, f);
    fclose(f);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, PLAN_FILE, extra);
    fclose(f);
}

/* search --write, then check: the same layout, step time and memory, as
 * printed, digit for digit; the written file is canonical, and its
 * relative include still resolves from another folder. */
static void test_cli_write_recheck(void **state)
{
    (void)state;
    if (!planc_path) skip();
    char dir[] = "/tmp/planc-search-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char in[256], out[256], cmd[1024];
    snprintf(in, sizeof in, "%s/in.plan", dir);
    snprintf(out, sizeof out, "%s/sub", dir);
    mkdir(out, 0755);
    snprintf(out, sizeof out, "%s/sub/best.plan", dir);
    write_plan(dir, in, "tp auto");
    snprintf(cmd, sizeof cmd, "%s search %s --json --top 3 --write %s", planc_path, in, out);
    char *search = slurp(cmd);
    snprintf(cmd, sizeof cmd, "%s check %s --json", planc_path, out);
    char *check = slurp(cmd);
    const char *first = strstr(search, "\"results\": [");
    assert_non_null(first);
    static const char *const keys[] = { "step_time_s", "step_time_closed_form_s", "peak_memory_bytes",
                                        "tokens_per_s", "mfu", "bubble_fraction", "dp", "tp", "pp",
                                        "zero", "micro_batch", "schedule", "chunks", "recompute",
                                        "sequence_parallel" };
    for (int k = 0; k < (int)(sizeof keys / sizeof keys[0]); k++) {
        char a[64], b[64];
        json_value(first, keys[k], a, sizeof a);
        json_value(check, keys[k], b, sizeof b);
        if (strcmp(a, b)) fprintf(stderr, "  %s: search %s, check %s\n", keys[k], a, b);
        assert_string_equal(a, b);
    }
    snprintf(cmd, sizeof cmd, "%s fmt %s | cmp -s - %s", planc_path, out, out);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -q '^# a searched plan' %s && grep -q '^include \"/.*/cl/c.plan\"' %s && "
             "! grep -q 'sequences per step' %s", out, out, out);
    assert_int_equal(system(cmd), 0);
    free(search);
    free(check);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A model too big for the cluster: exit 1, the smallest shortfall named. */
static void test_cli_nothing_fits(void **state)
{
    (void)state;
    if (!planc_path) skip();
    char dir[] = "/tmp/planc-search-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char in[256], cmd[1024];
    snprintf(in, sizeof in, "%s/big.plan", dir);
    FILE *f = fopen(in, "w");
    assert_non_null(f);
    fprintf(f, "cluster c { nodes 1; gpus_per_node 2; device a100-sxm-80gb; "
               "link intra { bandwidth 300 GB/s; latency 2 us } }\n"
               "model m { vocab 32000; seq 2048; dtype bf16; embedding { dim 8192 }\n"
               "    repeat 80 { attention { heads 64 }; mlp { hidden 32768 } }\n"
               "    norm {}; lm_head {} }\n"
               "plan { global_batch 8 }\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s search %s 2>&1; echo \"rc=$?\"", planc_path, in);
    char *o = slurp(cmd);
    assert_non_null(strstr(o, "best layout still needs"));
    assert_non_null(strstr(o, "GiB on stage"));
    assert_non_null(strstr(o, "> 80 GiB"));
    assert_non_null(strstr(o, "rc=1"));
    free(o);
    /* a plan block without global_batch is bad input (exit 2) */
    write_plan(dir, in, "tp 2");
    snprintf(cmd, sizeof cmd, "sed -i 's/global_batch 64//' %s && %s search %s 2>&1; echo \"rc=$?\"",
             in, planc_path, in);
    o = slurp(cmd);
    assert_non_null(strstr(o, "global_batch"));
    assert_non_null(strstr(o, "rc=2"));
    free(o);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Every example searches (its plan block fixes the layout: one result,
 * the example's own layout). */
static void test_cli_examples(void **state)
{
    (void)state;
    if (!planc_path) skip();
    static const char *const ex[] = { "examples/tiny.plan", "examples/gpt2-small.plan",
                                      "examples/llama3-8b.plan", "examples/llama3-70b.plan",
                                      "examples/gpt3-175b.plan" };
    for (int i = 0; i < (int)(sizeof ex / sizeof ex[0]); i++) {
        if (access(ex[i], R_OK)) continue;
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s search %s --json >/dev/null 2>&1", planc_path, ex[i]);
        int rc = system(cmd);
        if (rc) fprintf(stderr, "  %s: exit %d\n", ex[i], rc);
        assert_int_equal(rc, 0);
    }
}

/* The table: no closed-form column, '-' for the schedule at pp 1; --json
 * keeps the closed-form figure and counts the folded layouts;
 * --max-layouts refuses with exit 2 and the count. */
static void test_cli_rows_and_refusal(void **state)
{
    (void)state;
    if (!planc_path) skip();
    char dir[] = "/tmp/planc-search-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char in[256], cmd[1024];
    snprintf(in, sizeof in, "%s/in.plan", dir);
    write_plan(dir, in, "tp 1; pp 1");
    snprintf(cmd, sizeof cmd, "%s search %s --top 50 2>&1; echo \"rc=$?\"", planc_path, in);
    char *o = slurp(cmd);
    assert_null(strstr(o, "closed"));
    assert_non_null(strstr(o, " -   "));
    assert_null(strstr(o, "gpipe"));
    assert_null(strstr(o, "zb-h1"));
    assert_non_null(strstr(o, "rc=0"));
    free(o);
    snprintf(cmd, sizeof cmd, "%s search %s --json 2>&1", planc_path, in);
    o = slurp(cmd);
    assert_non_null(strstr(o, "\"step_time_closed_form_s\""));
    assert_non_null(strstr(o, "\"collapsed\": "));
    assert_non_null(strstr(o, "\"schedule\": \"1f1b\""));
    free(o);
    write_plan(dir, in, "tp auto");
    snprintf(cmd, sizeof cmd, "%s search %s --max-layouts 10 2>&1; echo \"rc=$?\"", planc_path, in);
    o = slurp(cmd);
    assert_non_null(strstr(o, "more than --max-layouts 10"));
    assert_non_null(strstr(o, "rc=2"));
    free(o);
    snprintf(cmd, sizeof cmd, "%s search --help 2>&1; echo \"rc=$?\"", planc_path);
    o = slurp(cmd);
    assert_non_null(strstr(o, "--max-layouts N"));
    assert_non_null(strstr(o, "rc=0"));
    free(o);
    snprintf(cmd, sizeof cmd, "%s search %s --max-layouts x 2>&1; echo \"rc=$?\"", planc_path, in);
    o = slurp(cmd);
    assert_non_null(strstr(o, "--max-layouts needs"));
    assert_non_null(strstr(o, "rc=2"));
    free(o);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv)
{
    if (argc > 1) planc_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pruned_equals_brute),
        cmocka_unit_test(test_ep_searched),
        cmocka_unit_test(test_distinct_rows),
        cmocka_unit_test(test_pp1_one_row),
        cmocka_unit_test(test_refuse_large_space),
        cmocka_unit_test(test_too_many_micro_steps),
        cmocka_unit_test(test_estimates_bound_exact),
        cmocka_unit_test(test_results_recheck),
        cmocka_unit_test(test_software_given),
        cmocka_unit_test(test_recompute_given),
        cmocka_unit_test(test_constraints),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_cli_write_recheck),
        cmocka_unit_test(test_cli_nothing_fits),
        cmocka_unit_test(test_cli_examples),
        cmocka_unit_test(test_cli_rows_and_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
