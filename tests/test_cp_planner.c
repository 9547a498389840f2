/*
 * test_cp_planner.c: context parallelism in the planner (issue 26).
 *
 * The memory of each CP form against numbers worked by hand from the
 * contract in runtime/include/prt_par.h (section "context parallelism");
 * token-wise work and activations divided by cp; the model states over
 * dp x cp; cp 1 written out equal to a Layout without it; the ring's
 * exposed time zero when a block's compute covers its transfer and
 * positive when it does not; the blocking forms all exposed; the CP
 * group's tier; and the search: CP layouts for a 128K-token Llama 3 8B
 * on two nodes (none without CP fits), cp 1 for a 2K-token plan with the
 * reason said.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "planner/comm.h"
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/layout.h"
#include "planner/memory.h"
#include "planner/model.h"
#include "planner/presets.h"
#include "planner/search.h"

/* |got - want| <= atol + rtol * |want|, printing the mismatch (llm.c style). */
#define assert_close(got, want, atol, rtol) do {                                  \
        double g_ = (got), w_ = (want);                                            \
        if (!(fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_))) {                      \
            print_error("%s = %.12g, want %.12g (atol %g rtol %g)\n", #got, g_, w_,  \
                        (double)(atol), (double)(rtol));                           \
            fail();                                                                \
        }                                                                          \
    } while (0)

/* ---- the contract's numbers, by hand ----------------------------------- */

/* B 2, Tl 16 local tokens (T 64 at cp 4), H 4 query and Hkv 2 key/value
 * heads of this TP rank, D 8. One KV block: B Tl 2 Hkv D = 2*16*2*2*8 =
 * 1024 elements.
 *  ring: saved B H Tl = 128; forward 2 blocks + Tl^2 = 2048 + 256 = 2304;
 *        backward 4 blocks + 2 Tl^2 = 4096 + 512 = 4608;
 *  all_to_all: q, k, v head-split B T (H + 2Hkv) D / cp = 2*64*8*8/4 =
 *        2048, output B T H D / cp = 1024, probabilities B (H/cp) T^2 =
 *        2*1*64*64 = 8192: saved 11264, backward buffers the same, forward
 *        none;
 *  all_gather: probabilities B H Tl T = 2*4*16*64 = 8192; gathered K, V
 *        B T 2 Hkv D = 4096 forward, 8192 with dK, dV backward. */
static void test_cp_numel_contract(void **state)
{
    (void)state;
    static const struct { int form; double saved, fwd, bwd; } cases[] = {
        { PLAN_CP_RING, 128, 2304, 4608 },
        { PLAN_CP_ALL_TO_ALL, 11264, 0, 11264 },
        { PLAN_CP_ALL_GATHER, 8192, 4096, 8192 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PlanCpNumel n = plan_cp_attention_numel(cases[i].form, 4, 4, false, 2, 16, 4, 2, 8);
        assert_close(n.saved, cases[i].saved, 0, 0);
        assert_close(n.saved_f32, 0, 0, 0);
        assert_close(n.buf_fwd, cases[i].fwd, 0, 0);
        assert_close(n.buf_bwd, cases[i].bwd, 0, 0);
    }
    /* hierarchical, 2 ranks a node of 4: the all-to-all's q, k, v and
     * output (2048 + 1024) and the ring's log-sum-exp (128); the ring on
     * 2 x 16 tokens: 2 blocks + 32^2 forward (3072), 4 blocks + 2 x 32^2 +
     * the all-to-all's gradients backward (4096 + 2048 + 3072) */
    PlanCpNumel h = plan_cp_attention_numel(PLAN_CP_HIERARCHICAL, 4, 2, false, 2, 16, 4, 2, 8);
    assert_close(h.saved, 3200, 0, 0);
    assert_close(h.buf_fwd, 3072, 0, 0);
    assert_close(h.buf_bwd, 9216, 0, 0);
    /* a fused kernel keeps no probabilities nor score blocks: its fp32
     * log-sum-exp, B H Tl = 128 */
    PlanCpNumel f = plan_cp_attention_numel(PLAN_CP_ALL_GATHER, 4, 4, true, 2, 16, 4, 2, 8);
    assert_close(f.saved, 0, 0, 0);
    assert_close(f.saved_f32, 128, 0, 0);
    f = plan_cp_attention_numel(PLAN_CP_RING, 4, 4, true, 2, 16, 4, 2, 8);
    assert_close(f.buf_bwd, 4096, 0, 0);
    /* cp 1: nothing */
    PlanCpNumel z = plan_cp_attention_numel(PLAN_CP_RING, 1, 1, false, 2, 16, 4, 2, 8);
    assert_close(z.saved + z.buf_fwd + z.buf_bwd, 0, 0, 0);
}

/* ---- a layer's work under cp --------------------------------------------- */

/* A small Llama in fp32 (the CPU target's element: 4 bytes), 1 block. */
static void small_llama(Model *m, Layer *buf, int64_t seq)
{
    plan_preset_llama(m, buf, "l", 1, 64, 4, 2, 128, seq, 256, DTYPE_FP32);
}

/* MLP work and activations halve at cp 2; the attention keeps its
 * token-wise tensors halved plus the ring's saved log-sum-exp in place of
 * the probabilities (planc's math kernel), and its buffers are the
 * contract's backward buffers in bytes. */
static void test_cp_layer_work(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(1)];
    Model m;
    small_llama(&m, buf, 64);
    const Layer *att = &m.layers[1], *mlp = &m.layers[2];
    assert_int_equal(att->kind, LAYER_ATTENTION);
    assert_int_equal(mlp->kind, LAYER_MLP);
    PlanCut c1 = { .micro_batch = 2, .tp = 1 }, c2 = c1;
    c2.cp = 2;
    c2.cp_comm = PLAN_CP_RING;
    PlanLayerWork a, b;
    plan_layer_work(&m, mlp, att, &c1, &a);
    plan_layer_work(&m, mlp, att, &c2, &b);
    assert_close(b.act_none, a.act_none / 2, 0, 1e-12);
    assert_close(b.flops_fwd, a.flops_fwd / 2, 0, 1e-12);
    assert_close(b.cp_buf_bytes, 0, 0, 0);
    plan_layer_work(&m, att, &m.layers[0], &c1, &a);
    plan_layer_work(&m, att, &m.layers[0], &c2, &b);
    /* FLOPs: the causal total / cp (local queries against every key) */
    assert_close(b.flops_fwd, a.flops_fwd / 2, 0, 1e-12);
    assert_close(b.flops_core, a.flops_core / 2, 0, 1e-12);
    /* kept: e = 4, T = b s = 128 tokens at cp 1, h 64, heads 4 of d 16,
     * kv 2: norm input and QKV input 2 e T h, Q K V and the projection
     * input e T (2 h_q + 2 h_kv) = 4*128*(128 + 64), the probabilities
     * e b a s^2 = 4*2*4*64*64; at cp 2 the token-wise halves and the
     * log-sum-exp e b a (s/2) = 4*2*4*32 */
    double e = 4, T = 128, h = 64;
    double repl = 2 * e * T * h, tpart = e * T * (2 * 64 + 2 * 32);
    assert_close(a.act_none, repl + tpart + e * 2 * 4 * 64 * 64, 0, 1e-12);
    assert_close(b.act_none, (repl + tpart) / 2 + e * 2 * 4 * 32, 0, 1e-12);
    /* buffers: 4 KV blocks of b Tl 2 h_kv = 2*32*64 elements and 2 Tl^2 */
    assert_close(b.cp_buf_bytes, e * (4 * 2 * 32 * 64 + 2 * 32 * 32), 0, 1e-12);
    assert_close(b.cp_kv_bytes, e * 2 * 32 * 64, 0, 1e-12);
}

/* ---- a whole layout ----------------------------------------------------- */

/* Llama 3 8B at seq tokens on `nodes` DGX H100 nodes with the layout
 * given (cp, form), zero 1, micro-batch 1. */
static Plan l8_plan(Layer *buf, int64_t seq, int64_t nodes, int dp, int tp, int cp, int form, int64_t gb)
{
    Model m;
    plan_preset_llama(&m, buf, "l8", 32, 4096, 32, 8, 14336, seq, 128256, DTYPE_BF16);
    Plan p = plan_preset_plan(m, plan_preset_dgx_h100(nodes), dp, tp, 1, 1, 1, gb, SCHED_1F1B, 1,
                              RECOMPUTE_NONE, tp > 1);
    p.layout.cp = cp;
    p.layout.cp_comm = form;
    return p;
}

/* cp 1 written out is a Layout without it (cp 0, the C default): the
 * same step and memory to the bit. */
static void test_cp_one_unchanged(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(32)];
    Plan p = l8_plan(buf, 8192, 2, 4, 4, 0, 0, 32);
    PlanEval a, b;
    plan_evaluate(&p, &a);
    p.layout.cp = 1;
    p.layout.cp_comm = PLAN_CP_RING;
    plan_evaluate(&p, &b);
    assert_true(a.valid && b.valid);
    assert_true(a.step_time == b.step_time);
    assert_int_equal(a.peak_memory, b.peak_memory);
    assert_true(a.times.cp == 0 && a.times.cp_total == 0);
    plan_eval_free(&a);
    plan_eval_free(&b);
}

/* Weights are replicated over cp: parameters per GPU as without CP at the
 * same tp, the optimizer's ZeRO-1 shard over dp x cp (dp 2 x cp 4 shards
 * like dp 8), the activations of one micro-batch / cp. */
static void test_cp_model_states(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(32)];
    Plan p = l8_plan(buf, 32768, 2, 2, 2, 4, PLAN_CP_RING, 16), q = l8_plan(buf, 32768, 2, 8, 2, 1, 0, 16);
    PlanEval a, b;
    plan_evaluate(&p, &a);
    plan_evaluate(&q, &b);
    assert_true(a.valid && b.valid);
    assert_int_equal(a.stages[0].params_bytes, b.stages[0].params_bytes);
    assert_int_equal(a.stages[0].grads_bytes, b.stages[0].grads_bytes);
    assert_int_equal(a.stages[0].optimizer_bytes, b.stages[0].optimizer_bytes);
    assert_true(a.stages[0].activations_bytes < b.stages[0].activations_bytes / 3);
    assert_true(a.stages[0].buffers_bytes > b.stages[0].buffers_bytes);   /* the ring's blocks */
    plan_eval_free(&a);
    plan_eval_free(&b);
}

/* The ring's exposed time: zero while a block's attention outlasts its
 * transfer (NVLink, 32K tokens: a block of 4K queries x 4K keys against a
 * 2 MiB KV block), positive when the link is slow; without a slowdown of
 * the covered compute (the links measured at overlap 1) the exposed part
 * is exactly what the transfers outlast. The blocking forms are exposed
 * whole. */
static void test_cp_ring_exposed(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(32)];
    Plan p = l8_plan(buf, 32768, 1, 1, 2, 4, PLAN_CP_RING, 8);
    p.cluster.intra.overlap_compute = p.cluster.inter.overlap_compute = 1;
    PlanCosts c;
    assert_true(plan_costs(&p, &p.layout, &c));
    assert_true(c.cost[0].fwd_cp_total > 0 && c.cost[0].bwd_cp_total > 0);
    assert_close(c.cost[0].fwd_cp, 0, 0, 0);
    /* the backward's last hop (dK, dV home) alone is exposed */
    assert_true(c.cost[0].bwd_cp > 0 && c.cost[0].bwd_cp < c.cost[0].bwd_cp_total / 2);
    plan_costs_free(&c);
    p.cluster.intra.bandwidth = 1e8;   /* 0.1 GB/s: every transfer outlasts its block */
    assert_true(plan_costs(&p, &p.layout, &c));
    assert_true(c.cost[0].fwd_cp > 0);
    assert_true(c.cost[0].fwd_cp < c.cost[0].fwd_cp_total);
    plan_costs_free(&c);
    p = l8_plan(buf, 32768, 1, 1, 2, 4, PLAN_CP_ALL_GATHER, 8);
    assert_true(plan_costs(&p, &p.layout, &c));
    assert_true(c.cost[0].fwd_cp > 0);
    assert_close(c.cost[0].fwd_cp, c.cost[0].fwd_cp_total, 0, 1e-12);
    assert_close(c.cost[0].bwd_cp, c.cost[0].bwd_cp_total, 0, 1e-12);
    plan_costs_free(&c);
}

/* The CP group: cp ranks tp apart, inside a node while tp x cp fits in
 * it (DGX H100: 8), across nodes beyond; the gradient group is dp x cp
 * ranks tp apart. */
static void test_cp_group_tier(void **state)
{
    (void)state;
    Cluster cl = plan_preset_dgx_h100(2);
    PlanGroup g = plan_cp_group(&cl, 2, 4);
    assert_int_equal(g.size, 4);
    assert_int_equal(g.local, 4);
    assert_int_equal(plan_group_tier(g), TIER_NODE);
    g = plan_cp_group(&cl, 2, 8);
    assert_int_equal(g.local, 4);
    assert_int_equal(g.nodes, 2);
    assert_int_equal(plan_group_tier(g), TIER_POD);
    g = plan_cp_group(&cl, 1, 8);
    assert_int_equal(plan_group_tier(g), TIER_NODE);
    Layout l = { .dp = 2, .tp = 2, .pp = 1, .cp = 4 };
    assert_int_equal(plan_dp_cp(&l), 8);
    g = plan_layout_group(&cl, plan_dp_cp(&l), l.tp, l.pp, GROUP_DP);
    assert_int_equal(g.size, 8);
    assert_int_equal(g.nodes, 2);
}

/* ---- the search ---------------------------------------------------------- */

/* Llama 3 8B at 128K tokens on 2 nodes, every degree searched: the
 * best is a CP layout, and no layout without CP fits (the line says so);
 * at 2K tokens cp 1 is not searched above 1, and the line says why. */
static void test_cp_search(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(32)];
    Plan p = l8_plan(buf, 131072, 2, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, 16);
    p.layout.pp = p.layout.micro_batch = p.layout.schedule = p.layout.chunks = PLAN_AUTO;
    p.layout.recompute = p.layout.sequence_parallel = PLAN_AUTO;
    PlanSearchOptions o = plan_search_defaults();
    PlanSearch s;
    char why[256], note[256];
    assert_true(plan_search(&p, &o, &s, why, sizeof why));
    assert_true(s.cp_searched);
    assert_true(s.n_results > 0);
    for (int i = 0; i < s.n_results; i++) assert_true(plan_cp(&s.results[i].layout) > 1);
    assert_false(s.cp_has[0]);
    assert_true(plan_search_cp_note(&s, note, sizeof note));
    assert_string_equal(note, "cp > 1: no layout without CP fits in memory");
    assert_int_equal(s.bound_violations, 0);   /* the bounds hold under cp (else it reran brute force) */
    /* pruned == brute force: the same best layout and step */
    PlanSearch b;
    PlanSearchOptions brute = o;
    brute.prune = false;
    assert_true(plan_search(&p, &brute, &b, why, sizeof why));
    assert_true(b.n_results > 0);
    assert_true(b.results[0].step_time == s.results[0].step_time);
    assert_int_equal(plan_cp(&b.results[0].layout), plan_cp(&s.results[0].layout));
    assert_int_equal(b.results[0].layout.tp, s.results[0].layout.tp);
    assert_true(b.feasible == s.feasible);
    plan_search_free(&b);
    plan_search_free(&s);

    Plan q = l8_plan(buf, 2048, 2, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, 64);
    q.layout.pp = q.layout.micro_batch = q.layout.schedule = q.layout.chunks = PLAN_AUTO;
    q.layout.recompute = q.layout.sequence_parallel = PLAN_AUTO;
    assert_true(plan_search(&q, &o, &s, why, sizeof why));
    assert_false(s.cp_searched);
    assert_true(s.n_results > 0);
    for (int i = 0; i < s.n_results; i++) assert_int_equal(plan_cp(&s.results[i].layout), 1);
    assert_true(plan_search_cp_note(&s, note, sizeof note));
    assert_non_null(strstr(note, "cp 1: attention is"));
    assert_non_null(strstr(note, "at seq 2048"));
    plan_search_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cp_numel_contract),
        cmocka_unit_test(test_cp_layer_work),
        cmocka_unit_test(test_cp_one_unchanged),
        cmocka_unit_test(test_cp_model_states),
        cmocka_unit_test(test_cp_ring_exposed),
        cmocka_unit_test(test_cp_group_tier),
        cmocka_unit_test(test_cp_search),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
