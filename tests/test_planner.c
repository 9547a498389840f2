/*
 * test_planner.c: the planner's formulas against hand-computed cases, the
 * schedules' op lists, the simulator against the closed forms, the ZeRO
 * paper's figures and the check report.
 *
 * Plans are built in C (planner/presets.h); no parser is involved.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <fcntl.h>
#include <unistd.h>

#include "planner/comm.h"
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/fp8.h"
#include "planner/layout.h"
#include "planner/memory.h"
#include "planner/model.h"
#include "planner/presets.h"
#include "planner/program.h"
#include "planner/report.h"
#include "planner/schedule.h"
#include "planner/simulate.h"

/* |got - want| <= atol + rtol * |want|, printing the mismatch (llm.c style). */
#define assert_close(got, want, atol, rtol) do {                                  \
        double g_ = (got), w_ = (want);                                            \
        if (!(fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_))) {                      \
            print_error("%s = %.12g, want %.12g (atol %g rtol %g)\n", #got, g_, w_,  \
                        (double)(atol), (double)(rtol));                           \
            fail();                                                                \
        }                                                                          \
    } while (0)

/* A GPT plan on DGX A100 nodes; buf must hold PLAN_PRESET_LAYERS(blocks). */
static Plan gpt_plan(Layer *buf, int blocks, int64_t h, int64_t heads, int64_t nodes, int dp,
                     int tp, int pp, int zero, int64_t mb, int64_t gb, int sched, int chunks,
                     int rec, int sp)
{
    Model m;
    plan_preset_gpt(&m, buf, "gpt", blocks, h, heads, 2048, 51200, DTYPE_FP16);
    return plan_preset_plan(m, plan_preset_dgx_a100(nodes), dp, tp, pp, zero, mb, gb, sched,
                            chunks, rec, sp);
}

/* ---- model arithmetic ------------------------------------------------- */

static void test_params_known_models(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(80)];
    Model m;
    uint64_t n;
    /* GPT-2 small (HF: 124,439,808 with tied head) */
    plan_preset_gpt(&m, buf, "gpt2", 12, 768, 12, 1024, 50257, DTYPE_BF16);
    assert_true(plan_model_params(&m, &n));
    assert_int_equal(n, 124439808ull);
    /* Llama 3 8B: 8,030,261,248; 70B: 70,553,706,496 (Meta's model cards) */
    plan_preset_llama(&m, buf, "l8", 32, 4096, 32, 8, 14336, 8192, 128256, DTYPE_BF16);
    assert_true(plan_model_params(&m, &n));
    assert_int_equal(n, 8030261248ull);
    plan_preset_llama(&m, buf, "l70", 80, 8192, 64, 8, 28672, 8192, 128256, DTYPE_BF16);
    assert_true(plan_model_params(&m, &n));
    assert_int_equal(n, 70553706496ull);
}

/* ---- mixtures of experts (issue 17) ------------------------------------ */

/* Every MLP of m becomes a mixture of E experts of width f, top_k k, S
 * shared experts (a Llama preset turned into Mixtral or DeepSeek-MoE). */
static void moeify(Model *m, int64_t E, int64_t k, int64_t S, int64_t f)
{
    for (int i = 0; i < m->n_layers; i++) {
        Layer *l = (Layer *)&m->layers[i];
        if (l->kind != LAYER_MLP) continue;
        l->kind = LAYER_MOE;
        l->experts = E; l->top_k = k; l->shared = S; l->hidden = f;
    }
}

/* qk_norm rmsnorm (issue 29, Qwen3): two gain vectors of head_dim per
 * attention layer, replicated over TP. Qwen3-8B by hand: 36 blocks of
 * (4096 + 4096 x (4096 + 2 x 1024) + 4096 x 4096 + 2 x 128) attention +
 * (4096 + 3 x 4096 x 12288) MLP = 192,946,432, the final norm 4096, two
 * tables of 151936 x 4096: 8,190,735,360 (the figure issue 29 cites); per
 * TP rank of 8 each attention layer holds 1/8 of its linears, the whole
 * pre-norm and both q/k gains; the layer has two more tensors. */
static void test_qk_norm_params(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(36)];
    Model m;
    uint64_t n;
    bool ovf = false;
    plan_preset_llama(&m, buf, "qwen3-8b", 36, 4096, 32, 8, 12288, 4096, 151936, DTYPE_BF16);
    const Layer *att = NULL;
    for (int i = 0; i < m.n_layers && !att; i++)
        if (m.layers[i].kind == LAYER_ATTENTION) att = &m.layers[i];
    assert_non_null(att);
    int tensors = plan_layer_tensors(&m, att);
    uint64_t tp8 = plan_layer_params(&m, att, 8, &ovf);
    for (int i = 0; i < m.n_layers; i++)
        if (m.layers[i].kind == LAYER_ATTENTION) m.layers[i].qk_norm = QK_NORM_RMSNORM;
    assert_true(plan_model_params(&m, &n));
    assert_int_equal(n, 8190735360ull);
    assert_int_equal(plan_layer_params(&m, att, 8, &ovf), tp8 + 2 * 128);
    assert_int_equal(plan_layer_params(&m, att, 1, &ovf),
                     4096 + 4096ull * (4096 + 2 * 1024) + 4096ull * 4096 + 2 * 128);
    assert_int_equal(plan_layer_tensors(&m, att), tensors + 2);
    assert_false(ovf);
}

/* norm_position (issue 29): post moves the norm (the same count), sandwich
 * adds one per sublayer (dim, or 2 dim for a LayerNorm), replicated over
 * TP, one tensor (two) more; the sublayer's norm parameters (the TP
 * all-reduce's under SP) cover both. A post layer keeps the post-norm's
 * input and rstd in place of the pre-norm's output: with RMSNorm, 4 bytes
 * a row more; sandwich keeps e T h + 4 T more. qk_norm rmsnorm_projection
 * (OLMo-2) has a gain per element of the q and k projections, split over
 * TP with the heads. */
static void test_norm_position_params(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(32)];
    Model m;
    uint64_t pre, post, sand;
    bool ovf = false;
    plan_preset_llama(&m, buf, "llama", 32, 4096, 32, 8, 14336, 4096, 128256, DTYPE_BF16);
    Layer *att = NULL, *mlp = NULL;
    for (int i = 0; i < m.n_layers; i++) {
        if (m.layers[i].kind == LAYER_ATTENTION && !att) att = &m.layers[i];
        if (m.layers[i].kind == LAYER_MLP && !mlp) mlp = &m.layers[i];
    }
    assert_non_null(att);
    assert_non_null(mlp);
    PlanCut c = { 0 };
    c.micro_batch = 1; c.tp = 1; c.cp = 1; c.flash = true;
    PlanLayerWork w_pre, w_post, w_sand;
    plan_layer_work(&m, att, NULL, &c, &w_pre);
    assert_true(plan_model_params(&m, &pre));
    int t_pre = plan_layer_tensors(&m, att);
    uint64_t a8 = plan_layer_params(&m, att, 8, &ovf);
    for (int i = 0; i < m.n_layers; i++) m.layers[i].norm_pos = NORM_POS_POST;
    plan_layer_work(&m, att, NULL, &c, &w_post);
    assert_true(plan_model_params(&m, &post));
    assert_int_equal(post, pre);
    assert_int_equal(plan_layer_tensors(&m, att), t_pre);
    assert_int_equal(plan_layer_norm_params(&m, att), 4096);
    double T = 4096;   /* tokens of the micro-batch */
    assert_true(fabs(w_post.act_none - w_pre.act_none - 4 * T) < 1e-6);
    for (int i = 0; i < m.n_layers; i++) m.layers[i].norm_pos = NORM_POS_SANDWICH;
    plan_layer_work(&m, att, NULL, &c, &w_sand);
    assert_true(plan_model_params(&m, &sand));
    assert_int_equal(sand, pre + 2u * 32u * 4096u);   /* a second norm in each of 64 sublayers */
    assert_int_equal(plan_layer_tensors(&m, att), t_pre + 1);
    assert_int_equal(plan_layer_params(&m, att, 8, &ovf), a8 + 4096);
    assert_int_equal(plan_layer_norm_params(&m, mlp), 2 * 4096);
    assert_true(fabs(w_sand.act_none - w_pre.act_none - (2 * T * 4096 + 4 * T)) < 1e-6);
    assert_true(fabs(w_sand.act_split - w_pre.act_split - 4.0 * 4096) < 1e-6);   /* zb-h1's gains */
    att->qk_norm = QK_NORM_RMSNORM_PROJ;
    assert_int_equal(plan_layer_params(&m, att, 8, &ovf), a8 + 4096 + (4096 + 1024) / 8);
    assert_int_equal(plan_layer_qk_norm_params(&m, att), 0);   /* split over TP: not a TP sum */
    /* its rows' two fp32 sums, all-reduced over TP each way (8 T bytes);
     * zb-h1 keeps this rank's gain slices' gradients, 4 (h_q + h_kv) / t */
    PlanLayerWork w_qk;
    c.tp = 8;
    plan_layer_work(&m, att, NULL, &c, &w_qk);
    assert_true(fabs(w_qk.tp_stat_bytes - 8 * T) < 1e-6);
    PlanLayerWork w_sand8;
    att->qk_norm = QK_NORM_NONE;
    plan_layer_work(&m, att, NULL, &c, &w_sand8);
    assert_true(fabs(w_qk.act_split - w_sand8.act_split - 4.0 * (4096 + 1024) / 8) < 1e-6);
    assert_true(w_sand8.tp_stat_bytes == 0);
    assert_false(ovf);
}

/* OLMo-2's q/k norm of the projection under TP: the step's exposed TP time
 * grows by the program's all-reduces of each row's two sums (forward and
 * backward) against Qwen3's per-head norm, whose gains' TP sum is booked
 * apart (sp_norm); without TP neither has any. */
static void test_qk_proj_tp_time(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)];
    PlanEval head, proj;
    for (int tp = 1; tp <= 2; tp++) {
        Plan p = gpt_plan(buf, 8, 2048, 16, 1, 8 / tp, tp, 1, 0, 1, 64, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
        for (int i = 0; i < p.model.n_layers; i++)
            if (p.model.layers[i].kind == LAYER_ATTENTION) p.model.layers[i].qk_norm = QK_NORM_RMSNORM;
        plan_evaluate(&p, &head);
        for (int i = 0; i < p.model.n_layers; i++)
            if (p.model.layers[i].kind == LAYER_ATTENTION) p.model.layers[i].qk_norm = QK_NORM_RMSNORM_PROJ;
        plan_evaluate(&p, &proj);
        if (!head.valid || !proj.valid) fail_msg("invalid: %s / %s", head.why, proj.why);
        if (tp == 1) assert_true(proj.times.tp == 0 && head.times.tp == 0);
        else assert_true(proj.times.tp > head.times.tp);
        plan_eval_free(&head);
        plan_eval_free(&proj);
    }
}

/* Turn every attention layer of m into MLA (kind mla) of these widths. */
static void mlaify(Model *m, int64_t q_lora, int64_t kv_lora, int64_t rope, int64_t nope, int64_t v)
{
    for (int i = 0; i < m->n_layers; i++) {
        Layer *l = &m->layers[i];
        if (l->kind != LAYER_ATTENTION) continue;
        l->attn = ATTN_MLA;
        l->kv_heads = l->heads;
        l->head_dim = 0;
        l->q_lora_rank = q_lora;
        l->kv_lora_rank = kv_lora;
        l->qk_rope_dim = rope;
        l->qk_nope_dim = nope;
        l->v_head_dim = v;
    }
}

static const Layer *first_attention(const Model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_ATTENTION) return &m->layers[i];
    return NULL;
}

/* MLA's parameters (issue 29) as transformers' DeepseekV2Attention lays
 * them out, by hand from the published config.json files:
 *  - DeepSeek-V2-Lite (hidden 2048, 16 heads, q_lora_rank null,
 *    kv_lora_rank 512, qk_rope 64, qk_nope 128, v 128): the pre-norm 2048,
 *    q_proj 2048 x 16 x 192 = 6,291,456, kv_a_proj_with_mqa 2048 x 576 =
 *    1,179,648, kv_a_layernorm 512, kv_b_proj 512 x 16 x 256 = 2,097,152,
 *    o_proj 16 x 128 x 2048 = 4,194,304: 13,765,120;
 *  - DeepSeek-V3 (hidden 7168, 128 heads, q_lora_rank 1536, the rest as
 *    Lite's): pre-norm 7168, q_a_proj 7168 x 1536 = 11,010,048,
 *    q_a_layernorm 1536, q_b_proj 1536 x 128 x 192 = 37,748,736, kv_a
 *    7168 x 576 = 4,128,768, kv_a_layernorm 512, kv_b 512 x 128 x 256 =
 *    16,777,216, o_proj 128 x 128 x 7168 = 117,440,512: 187,114,496.
 * Per TP rank the up projections and o_proj are split by heads, the
 * pre-norm, down projections and latent norms whole; those last are
 * partial over TP (tp_partial). Tensors: V3 norm, q_a, q_a norm, q_b, kv_a,
 * kv_a norm, kv_b, o = 8; Lite 6; with bias the two down projections'
 * and o_proj's. */
static void test_mla_params(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(2)];
    Model m;
    bool ovf = false;
    plan_preset_llama(&m, buf, "v2-lite", 2, 2048, 16, 16, 10944, 4096, 102400, DTYPE_BF16);
    mlaify(&m, 0, 512, 64, 128, 128);
    const Layer *att = first_attention(&m);
    assert_int_equal(plan_layer_params(&m, att, 1, &ovf), 13765120);
    assert_int_equal(plan_layer_params(&m, att, 2, &ovf), 2048 + 1179648 + 512 + (6291456 + 2097152 + 4194304) / 2);
    assert_int_equal(plan_layer_tp_partial_params(&m, att), 1179648 + 512);
    assert_int_equal(plan_layer_tensors(&m, att), 6);
    assert_int_equal(plan_head_dim(&m, att), 192);
    plan_preset_llama(&m, buf, "v3", 2, 7168, 128, 128, 18432, 4096, 129280, DTYPE_BF16);
    mlaify(&m, 1536, 512, 64, 128, 128);
    att = first_attention(&m);
    assert_int_equal(plan_layer_params(&m, att, 1, &ovf), 187114496);
    assert_int_equal(plan_layer_params(&m, att, 8, &ovf),
                     7168 + 11010048 + 1536 + 4128768 + 512 + (37748736 + 16777216 + 117440512) / 8);
    assert_int_equal(plan_layer_tp_partial_params(&m, att), 11010048 + 1536 + 4128768 + 512);
    assert_int_equal(plan_layer_tensors(&m, att), 8);
    buf[1].bias = true;   /* attention_bias: q_a 1536, kv_a 576, o_proj 7168 (whole on every rank) */
    assert_int_equal(plan_layer_params(&m, &buf[1], 1, &ovf), 187114496 + 1536 + 576 + 7168);
    assert_int_equal(plan_layer_tensors(&m, &buf[1]), 11);
    assert_false(ovf);
}

/* MLA's work for one micro-batch, by hand for a small layer (h 256, a 4,
 * c_q 96, c_kv 64, r 16, n 32, d_v 32, b 2, s 128, bf16): the seven
 * GEMMs' FLOPs, the kept activations with and without mla_up_proj, the
 * TP collectives of the MHA (one all-reduce each way), and the
 * recomputed module's FLOPs (q_b and kv_b again). */
static void test_mla_work(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(2)];
    Model m;
    plan_preset_llama(&m, buf, "mla", 2, 256, 4, 4, 512, 128, 1000, DTYPE_BF16);
    mlaify(&m, 96, 64, 16, 32, 32);
    const Layer *l = first_attention(&m);
    double h = 256, a = 4, cq = 96, ckv = 64, r = 16, n = 32, dq = 48, dv = 32, b = 2, s = 128, T = b * s, e = 2;
    for (int tp = 1; tp <= 2; tp++) {
        PlanCut c = { .micro_batch = 2, .tp = tp, .recompute = RECOMPUTE_NONE };
        PlanLayerWork w;
        plan_layer_work(&m, l, l - 1, &c, &w);
        double t = tp;
        double want = 2 * T * (h * cq + h * (ckv + r)) +                          /* down: every rank */
                      2 * T * (cq * a * dq + ckv * a * (n + dv) + a * dv * h) / t +  /* up, o_proj */
                      2 * b * a / t * s * s * (dq + dv);                             /* scores, context */
        assert_int_equal(w.n_gemm, 7);
        assert_close(w.flops_fwd, want, 0, 1e-12);
        assert_close(w.flops_core, 2 * b * a / t * s * s * (dq + dv), 0, 1e-12);
        double D = dq;   /* the heads padded to max(d_q, d_v) (prt_mla_kept) */
        double kept = 2 * e * T * h + e * T * (2 * cq + 3 * ckv + r) + 4 * 2 * T + e * T * a * (4 * D + dv) / t +
                      e * b * a / t * s * s;
        assert_close(w.act_none, kept, 0, 1e-12);
        assert_int_equal(w.tp_fwd.ar, tp > 1);
        assert_int_equal(w.tp_bwd.ar, tp > 1);
        c.recompute = RECOMPUTE_SELECTIVE;
        c.modules = PLAN_RC_BIT(PLAN_RC_MLA_UP_PROJ);
        plan_layer_work(&m, l, l - 1, &c, &w);
        assert_close(w.act_kept, kept - e * T * a * 3 * D / t, 0, 1e-12);
        assert_close(w.redo.flops, 2 * T * (cq * a * dq + ckv * a * (n + dv)) / t, 0, 1e-12);
        assert_close(w.redo.gemm[1] + w.redo.gemm[3], 2, 0, 0);
        assert_close(w.redo.gemm[0] + w.redo.gemm[2] + w.redo.gemm[6], 0, 0, 0);
    }
}

/* FP8 with MLA: the FP8 linears' weights are the layer's parameters less
 * the pre-norm and the two latent norms (DeepSeek-V3 per TP rank of 8:
 * q_a 11,010,048, kv_a 4,128,768, 1/8 of q_b, kv_b, o_proj), and the
 * layer has five linears (q_a, q_b, kv_a, kv_b, o_proj), four without a
 * query latent. */
static void test_mla_fp8(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(1)];
    Plan p;
    memset(&p, 0, sizeof p);
    plan_preset_llama(&p.model, buf, "v3", 1, 7168, 128, 128, 18432, 4096, 129280, DTYPE_BF16);
    mlaify(&p.model, 1536, 512, 64, 128, 128);
    p.software.fp8.recipe = PLAN_FP8_TENSORWISE;
    int a = (int)(first_attention(&p.model) - p.model.layers);
    PlanFp8Params q;
    plan_fp8_params(&p, a, a + 1, 8, &q);
    assert_close(q.params, 11010048.0 + 4128768.0 + (37748736.0 + 16777216.0 + 117440512.0) / 8, 0, 0);
    assert_int_equal(q.linears, 5);
    p.model.layers[a].q_lora_rank = 0;
    plan_fp8_params(&p, a, a + 1, 8, &q);
    assert_int_equal(q.linears, 4);
}

/* Total and active parameters: Mixtral 8x7B (Mistral AI: 46.7B total,
 * 12.9B active) and a DeepSeek-MoE-like model with shared experts,
 * counted by hand below; a dense model's active count is its total. */
static void test_moe_params(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(32)];
    Model m;
    uint64_t n, a;
    plan_preset_llama(&m, buf, "mixtral", 32, 4096, 32, 8, 14336, 4096, 32000, DTYPE_BF16);
    assert_true(plan_model_active_params(&m, &a));
    assert_true(plan_model_params(&m, &n));
    assert_int_equal(a, n);                                  /* dense: equal */
    moeify(&m, 8, 2, 0, 14336);
    assert_true(plan_model_params(&m, &n));
    assert_true(plan_model_active_params(&m, &a));
    assert_int_equal(n, 46702792704ull);
    assert_int_equal(a, 12879925248ull);
    /* DeepSeek-MoE-like: 28 blocks, dim 2048, 16 heads (MHA), 64 experts of
     * 1408 (SwiGLU, 3 x 2048 x 1408 = 8,650,752 each), 2 shared, top 6,
     * vocab 102400, untied, RMSNorm. Per block: attention 2048 (norm) +
     * 4 x 2048^2 = 16,779,264; mixture 2048 (norm) + 2048 x 64 (router)
     * + 66 x 8,650,752 = 571,082,752. Total 28 x 587,862,016 + 2 x
     * 102400 x 2048 + 2048 (final norm) = 16,879,568,896. Active: each
     * mixture skips 58 routed experts, 501,743,616: 28 x 86,118,400 +
     * 419,432,448 = 2,830,747,648. */
    plan_preset_llama(&m, buf, "dsmoe", 28, 2048, 16, 16, 1408, 4096, 102400, DTYPE_BF16);
    moeify(&m, 64, 6, 2, 1408);
    assert_true(plan_model_params(&m, &n));
    assert_true(plan_model_active_params(&m, &a));
    assert_int_equal(n, 16879568896ull);
    assert_int_equal(a, 2830747648ull);
}

/* FLOPs count what a token runs (router + top_k routed + shared experts),
 * whatever ep or the capacity's padding; the expert GEMMs are grouped,
 * E/ep of R ep/E rows each under uniform routing, R the padded rows with
 * a capacity factor. */
static void test_moe_work(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(2)];
    Model m;
    plan_preset_llama(&m, buf, "moe", 2, 1024, 8, 8, 2048, 512, 1000, DTYPE_BF16);
    moeify(&m, 8, 2, 1, 2048);
    const Layer *l = &m.layers[2];
    assert_int_equal(l->kind, LAYER_MOE);
    double h = 1024, f = 2048, T = 2 * 512, E = 8, k = 2, S = 1;
    /* router 2ThE, routed 2 T k 3hf, shared 2 T S 3hf */
    double want = 2 * T * h * E + 2 * T * k * 3 * h * f + 2 * T * S * 3 * h * f;
    const int EP[] = { 1, 2, 8 };
    const double CF[] = { 0, 1.25, 0.5 };
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            buf[2].capacity_factor = CF[j];
            PlanCut c = { .micro_batch = 2, .tp = 1, .sp = false, .recompute = RECOMPUTE_NONE, .ep = EP[i] };
            PlanLayerWork w;
            plan_layer_work(&m, l, &m.layers[1], &c, &w);
            assert_close(w.flops_fwd, want, 0, 1e-12);
            /* C = ceil(1.25 x 512 x 2 / 8) = 160 rows per expert and
             * sequence, more than the 128 each gets under uniform routing:
             * all T k rows run; C = ceil(0.5 x 512 x 2 / 8) = 64: 64 of
             * the 128 kept per expert and sequence (nothing is padded) */
            double R = CF[j] == 0.5 ? 2 * E * 64 : T * k;
            assert_close(plan_moe_rows(&m, l, 2), R, 0, 0);
            const PlanGemm *g = &w.gemm[1];   /* the experts' up GEMM */
            assert_close(g->batch, E / EP[i], 0, 0);
            assert_close(g->m, R * EP[i] / E, 0, 0);
            /* all-to-alls only across ranks: e R h bytes, 2 each way */
            assert_close(w.ep_bytes, EP[i] > 1 ? 2 * R * h : 0, 0, 0);
            assert_int_equal(w.ep_fwd, EP[i] > 1 ? 2 : 0);
            assert_int_equal(w.ep_bwd, EP[i] > 1 ? 2 : 0);
        }
    buf[2].capacity_factor = 0;
    /* the model's FLOPs per step are 3 x the forward's, as for a dense model */
    PlanCut c1 = { .micro_batch = 1, .tp = 1, .sp = false, .recompute = RECOMPUTE_NONE, .ep = 1 };
    double per_seq = 0;
    for (int i = 0; i < m.n_layers; i++) {
        PlanLayerWork w;
        plan_layer_work(&m, &m.layers[i], i ? &m.layers[i - 1] : NULL, &c1, &w);
        per_seq += w.flops_fwd;
    }
    assert_close(plan_model_flops_step(&m, 16), 3 * per_seq * 16, 0, 1e-12);
}

/* Memory: each GPU holds E/ep experts; expert states are ZeRO-sharded over
 * the dp/ep ranks of the expert-DP group, dense ones over dp; the
 * all-to-all buffers (2 e R h) count while ep > 1. */
static void test_moe_memory(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Model m;
    plan_preset_llama(&m, buf, "moe", 4, 1024, 8, 8, 2048, 512, 1000, DTYPE_BF16);
    moeify(&m, 8, 2, 0, 2048);
    bool ovf = false;
    uint64_t expert = plan_layer_expert_params(&m, &m.layers[2], 1, &ovf) * 4;   /* 4 mixtures */
    uint64_t total;
    assert_true(plan_model_params(&m, &total));
    assert_false(ovf);
    const int EP[] = { 1, 2, 4, 8 };
    for (int z = 0; z <= 3; z++)
        for (int i = 0; i < 4; i++) {
            Plan p = plan_preset_plan(m, plan_preset_dgx_h100(1), 8, 1, 1, z, 1, 16, SCHED_1F1B, 1,
                                      RECOMPUTE_NONE, 0);
            p.layout.ep = EP[i];
            PlanEval ev;
            plan_evaluate(&p, &ev);
            assert_true(ev.valid);
            uint64_t local = expert / (uint64_t)EP[i], dense = total - expert;
            assert_int_equal(ev.stages[0].params, dense + local);
            uint64_t pb, gb, ob, pe, ge, oe;
            /* a bf16 model's gradients are fp32 (plan_grad_dtype) */
            plan_model_states(dense, DTYPE_BF16, DTYPE_FP32, z, 8, &pb, &gb, &ob);
            /* ep 8: an expert-DP group of one rank, which shards nothing */
            plan_model_states(local, DTYPE_BF16, DTYPE_FP32, EP[i] < 8 ? z : 0, 8 / EP[i], &pe, &ge, &oe);
            assert_int_equal(ev.stages[0].params_bytes, pb + pe);
            assert_int_equal(ev.stages[0].grads_bytes, gb + ge);
            assert_int_equal(ev.stages[0].optimizer_bytes, ob + oe);
            /* buffers: ZeRO's (as a dense model's) + the all-to-all's */
            Plan q = p;
            q.layout.ep = 1;
            PlanEval e1;
            plan_evaluate(&q, &e1);
            double a2a = EP[i] > 1 ? 2.0 * 2 * (512 * 2) * 1024 : 0;
            if (z < 2)   /* (ZeRO >= 2's buckets are of the largest layer, which ep shrinks) */
                assert_int_equal(ev.stages[0].buffers_bytes, e1.stages[0].buffers_bytes + (uint64_t)a2a);
            plan_eval_free(&e1);
            plan_eval_free(&ev);
        }
}

/* A mixture's own buffers, alive while it runs whatever is recomputed
 * (codegen/program_template.c's moe_scratch_alloc and experts_bwd, counted
 * by hand here): the backward's expert output and input gradients e T k h
 * each, a shared expert's output e T h, the top-k weights' and logits'
 * gradients 4 T k + 4 T E; under ep > 1 also the forward's rows sent out
 * e T k h and the experts' side of the backward for the R rows that
 * arrived (uniform routing): output and input gradients 2 e R h, the
 * gated up and activation gradients e R (2 + 1) f. They enter the stage's
 * activations once, beside the micro-batches kept: under no recomputation
 * the rebuild term is this scratch alone. */
static void test_moe_scratch(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(2)];
    Model m;
    plan_preset_llama(&m, buf, "moe", 2, 1024, 8, 8, 2048, 512, 1000, DTYPE_BF16);
    moeify(&m, 8, 2, 1, 2048);
    double e = 2, h = 1024, f = 2048, T = 2 * 512, E = 8, k = 2, R = T * k;
    const int EP[] = { 1, 2, 8 };
    const Recompute RC[] = { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL };
    for (int i = 0; i < 3; i++) {
        double want = e * (2 * T * k + T) * h + 4 * T * k + 4 * T * E;
        if (EP[i] > 1) want += e * T * k * h + e * R * (2 * h + 3 * f);
        for (int j = 0; j < 3; j++) {
            PlanCut c = { .micro_batch = 2, .tp = 1, .sp = false, .recompute = RC[j], .ep = EP[i] };
            PlanLayerWork w;
            plan_layer_work(&m, &m.layers[2], &m.layers[1], &c, &w);
            assert_close(w.act_scratch, want, 0, 1e-12);
        }
        Plan p = plan_preset_plan(m, plan_preset_dgx_h100(1), 8, 1, 1, 1, 2, 16, SCHED_1F1B, 1,
                                  RECOMPUTE_NONE, 0);
        p.layout.ep = EP[i];
        PlanCosts pc;
        assert_true(plan_costs(&p, &p.layout, &pc));
        /* beside it the scratch every layer shares: the residual stream's
         * two N x C, the widest first linear's output gradient (an expert's
         * gate and up, 2f) and second linear's input (f), the scores of the
         * 8 heads (plan_bwd_scratch_bytes; codegen's scratch_alloc) */
        double shared = e * (2 * T * h + T * 2 * f + T * f + 2 * 8 * 512.0 * 512);
        assert_close(pc.cost[0].act_layer_max, want + shared, 0, 1e-12);
        plan_costs_free(&pc);
    }
}

/* The backward scratch every layer shares (codegen's scratch_alloc, sized
 * by plan_widest): a GPT of width C, heads H, MLP 4C on tp 2 — the widest
 * first linear is the MLP's up (2C per rank), the widest second linear's
 * input too (2C), the heads H/2; the residual stream's buffers 2 N x C,
 * 6 under SP; the score gradients unless attention is fused. */
static void test_bwd_scratch(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(2)];
    Model m;
    plan_preset_gpt(&m, buf, "g", 2, 256, 8, 128, 64, DTYPE_BF16);
    PlanWidest w;
    plan_widest(&m, 2, &w);
    assert_int_equal(w.width, 512);
    assert_int_equal(w.inner, 512);
    assert_int_equal(w.heads, 4);
    double e = 2, N = 3 * 128.0, C = 256;
    static const struct { bool sp, flash; double rows, scores; } T[] = {
        { false, false, 2, 1 }, { true, false, 6, 1 }, { false, true, 2, 0 }, { true, true, 6, 0 },
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        PlanCut c = { .micro_batch = 3, .tp = 2, .sp = T[i].sp, .recompute = RECOMPUTE_NONE, .flash = T[i].flash };
        double want = e * (T[i].rows * N * C + N * 512 + N * 512 + T[i].scores * 3 * 4 * 128.0 * 128);
        assert_close(plan_bwd_scratch_bytes(&m, &c, &w), want, 0, 1e-12);
    }
}

/* The all-to-alls: on the critical path, times.ep 0 at ep 1; at ep 8 in
 * one node each mixture's forward is two all-to-alls of e R h plus the
 * counts, the backward two, over NVLink; at tp 2 the EP group (tp apart)
 * spans two nodes and the inter-node link. The Program carries them as
 * the compute ops' ep_dur, which the simulator does not re-time. */
static void test_moe_all_to_all(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Model m;
    plan_preset_llama(&m, buf, "moe", 4, 1024, 8, 8, 2048, 512, 1000, DTYPE_BF16);
    moeify(&m, 8, 2, 0, 2048);
    Cluster cl = plan_preset_dgx_h100(2);
    double e = 2, R = 512 * 2, h = 1024, bytes = e * R * h;
    const struct { int dp, tp, ep; bool inter; } T[] = {
        { 16, 1, 1, false }, { 16, 1, 8, false }, { 8, 2, 8, true }, { 8, 2, 4, false },
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        Plan p = plan_preset_plan(m, cl, T[i].dp, T[i].tp, 1, 1, 1, 32, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
        p.layout.ep = T[i].ep;
        PlanCosts c;
        assert_true(plan_costs(&p, &p.layout, &c));
        PlanGroup g = plan_group_shape(cl.gpus_per_node, T[i].tp, T[i].ep);
        assert_int_equal(g.nodes > 1, T[i].inter);
        double one = plan_comm_cost(&cl, COLL_ALL_TO_ALL, ALGO_AUTO, g, bytes).time;
        double counts = plan_comm_cost(&cl, COLL_ALL_TO_ALL, ALGO_AUTO, g, 4 * 8).time;
        assert_close(c.cost[0].fwd_ep, T[i].ep > 1 ? 4 * (2 * one + counts) : 0, 0, 1e-12);
        assert_close(c.cost[0].bwd_ep, T[i].ep > 1 ? 4 * 2 * one : 0, 0, 1e-12);
        PlanEval ev;
        plan_evaluate(&p, &ev);
        assert_close(ev.times.ep, (double)ev.n_micro * (c.cost[0].fwd_ep + c.cost[0].bwd_ep), 0, 1e-12);
        assert_true(T[i].ep > 1 ? ev.times.ep > 0 : ev.times.ep == 0);
        PlanProgram pr;
        char why[256];
        assert_true(plan_lower(&p, &pr, why, sizeof why));
        int carried = 0;
        for (int k = 0; k < pr.stages[0].n_ops; k++) {
            const PlanOp *o = &pr.stages[0].ops[k];
            if (o->kind == OP_FWD) assert_close(o->ep_dur, c.cost[0].fwd_ep, 0, 0);
            if (o->kind == OP_BWD) assert_close(o->ep_dur, c.cost[0].bwd_ep, 0, 0);
            carried += o->ep_dur > 0 && o->ep_dur <= o->dur;
        }
        assert_int_equal(carried, T[i].ep > 1 ? 2 * ev.n_micro : 0);
        plan_program_free(&pr);
        plan_eval_free(&ev);
        plan_costs_free(&c);
    }
}

/* overlap_moe_a2a (issue 25): the hand case of the formula; per block the
 * forward's all-to-alls hide behind the backward's compute and the
 * reverse; only the steady state's paired steps run shorter (warm-up and
 * cool-down keep them), and the step is shorter than with blocking
 * all-to-alls. 32 H100s, pp 2 interleaved x 2 chunks, dp 16 x ep 16: the
 * EP group spans the stage's two nodes. */
static void test_moe_overlap(void **state)
{
    (void)state;
    assert_close(plan_a2a_hidden(3, 2, 0.1), 3 - (1 + 0.1 * 2), 0, 1e-15);   /* the compute covers 2 of 3 */
    assert_close(plan_a2a_hidden(1, 5, 0.1), 1 - 0.1, 0, 1e-15);             /* all covered: the slowdown */
    assert_close(plan_a2a_hidden(1, 0, 0.1), 0, 0, 0);                       /* nothing to hide behind */
    assert_close(plan_a2a_hidden(1, 5, 2.0), 0, 0, 0);                       /* never below 0 */
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Model m;
    plan_preset_llama(&m, buf, "moe", 4, 1024, 8, 8, 2048, 512, 1000, DTYPE_BF16);
    moeify(&m, 16, 2, 0, 2048);
    Cluster cl = plan_preset_dgx_h100(4);
    Plan p = plan_preset_plan(m, cl, 16, 1, 2, 1, 1, 64, SCHED_INTERLEAVED, 2, RECOMPUTE_NONE, 0);
    p.layout.ep = 16;
    PlanCosts base, ov;
    assert_true(plan_costs(&p, &p.layout, &base));
    p.software.overlap_moe_a2a = true;
    assert_true(plan_costs(&p, &p.layout, &ov));
    PlanGroup g = plan_ep_group(&cl, 1, 16);
    assert_int_equal(g.nodes, 2);
    double slow = plan_overlap_compute(&cl, g) - 1;
    for (int k = 1; k <= 2; k++) {   /* the middle chunks hold one block each, no embedding, no head */
        const PlanChunkCost *c = &ov.cost[k];
        assert_true(c->fwd_ep > 0 && c->bwd_ep > 0);
        assert_close(c->fwd_ep_hidden, plan_a2a_hidden(c->fwd_ep, c->bwd - c->bwd_ep, slow), 0, 1e-12);
        assert_close(c->bwd_ep_hidden, plan_a2a_hidden(c->bwd_ep, c->fwd - c->fwd_ep, slow), 0, 1e-12);
        assert_true(c->fwd_ep_hidden > 0 && c->bwd_ep_hidden > 0);
        assert_close(c->fwd, base.cost[k].fwd, 0, 0);   /* the table's passes stay the blocking ones */
        assert_close(base.cost[k].fwd_ep_hidden, 0, 0, 0);
    }
    PlanProgram pr;
    char why[256];
    assert_true(plan_lower(&p, &pr, why, sizeof why));
    int paired = 0, alone = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < pr.stages[s].n_ops; i++) {
            const PlanOp *o = &pr.stages[s].ops[i];
            if (o->kind != OP_FWD && o->kind != OP_BWD) continue;
            const PlanChunkCost *c = &ov.cost[o->vstage];
            double full = o->kind == OP_FWD ? c->fwd : c->bwd, hid = o->kind == OP_FWD ? c->fwd_ep_hidden : c->bwd_ep_hidden;
            if (o->dur == full) alone++;
            else { assert_close(o->dur, full - hid, 0, 1e-15); paired++; }
        }
    /* stage s runs 2 m v = 16 steps, w = 2(p - s - 1) + (v - 1) p + 1 of
     * them warm-up forwards (the overlap's extra one, Megatron-Core's, so
     * that every steady pair is of two micro-batches) and as many
     * cool-down backwards: stage 0 5 + 5, stage 1 3 + 3 alone */
    assert_int_equal(ov.warmup_extra, 1);
    assert_int_equal(alone, 10 + 6);
    assert_int_equal(paired, 2 * 16 - alone);
    /* one more micro-batch in flight, as the Program holds them */
    for (int s = 0; s < 2; s++)
        assert_close(plan_program_in_flight(&pr, s), plan_in_flight_x(SCHED_INTERLEAVED, 2, s, 4, 2, 1), 0, 1e-12);
    assert_close(plan_in_flight_x(SCHED_INTERLEAVED, 2, 1, 4, 2, 1), plan_in_flight(SCHED_INTERLEAVED, 2, 1, 4, 2) + 0.5,
                 0, 1e-12);
    plan_program_free(&pr);
    PlanEval e0, e1;
    p.software.overlap_moe_a2a = false;
    plan_evaluate(&p, &e0);
    p.software.overlap_moe_a2a = true;
    plan_evaluate(&p, &e1);
    assert_true(e1.step_time < e0.step_time);
    assert_true(e1.times.ep < e0.times.ep);
    plan_eval_free(&e0);
    plan_eval_free(&e1);
    plan_costs_free(&base);
    plan_costs_free(&ov);
}

/* DeepEP's hierarchical dispatch (issue 25), bytes per tier by hand: an EP
 * group of 32 over 4 nodes of 8, 128 experts top 8. alltoall: every row on
 * its own, 7/32 in the node, 24/32 across; deepep: a token once per remote
 * node holding one of its experts, 3 (1 - P0), P0 = C(96, 8) / C(128, 8),
 * and NVLink the node's own rows plus the forwarded ones less the
 * forwarder's own. Inside one node both are the all-to-all. */
static void test_moe_deepep_bytes(void **state)
{
    (void)state;
    PlanGroup g = { 32, 8, 4, 1 };
    double rows = 8e6, tok = 1e6;   /* bytes: T k rows of e h, T tokens */
    PlanMoeTierBytes a = plan_moe_dispatch_bytes(g, PLAN_MOE_ALLTOALL, rows, tok, 128, 8);
    assert_close(a.nvlink, rows * 7 / 32, 0, 1e-15);
    assert_close(a.network, rows * 24 / 32, 0, 1e-15);
    double P0 = 1;
    for (int i = 0; i < 8; i++) P0 *= (96.0 - i) / (128.0 - i);
    PlanMoeTierBytes d = plan_moe_dispatch_bytes(g, PLAN_MOE_DEEPEP, rows, tok, 128, 8);
    assert_close(d.network, tok * 3 * (1 - P0), 0, 1e-12);
    assert_close(d.nvlink, rows * (7.0 / 32 + 24.0 / 32 * 7 / 8), 0, 1e-12);
    assert_true(d.network < a.network / 2);   /* 2.72 remote nodes a token instead of 6 rows */
    PlanGroup one = { 8, 8, 1, 1 };
    PlanMoeTierBytes x = plan_moe_dispatch_bytes(one, PLAN_MOE_DEEPEP, rows, tok, 128, 8);
    PlanMoeTierBytes y = plan_moe_dispatch_bytes(one, PLAN_MOE_ALLTOALL, rows, tok, 128, 8);
    assert_close(x.nvlink, y.nvlink, 0, 0);
    assert_close(x.network, 0, 0, 0);
    /* the time: both tiers at once, each with its latency; on the cost
     * table, each mixture's forward two dispatches of it plus the counts */
    Cluster cl = plan_preset_dgx_h100(4);
    double in = cl.intra.bandwidth * PLAN_NCCL_EFF_NVLINK, net = cl.inter.bandwidth * PLAN_NCCL_EFF_NET;
    double want = fmax(cl.intra.latency + d.nvlink / in, cl.inter.latency + cl.intra.latency + d.network / net);
    assert_close(plan_moe_dispatch_time(&cl, g, d), want, 0, 1e-15);
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Model m;
    plan_preset_llama(&m, buf, "moe", 4, 1024, 8, 8, 2048, 512, 1000, DTYPE_BF16);
    moeify(&m, 32, 8, 0, 1024);
    Plan p = plan_preset_plan(m, cl, 32, 1, 1, 1, 1, 64, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    p.layout.ep = 32;
    p.software.moe_dispatcher = PLAN_MOE_DEEPEP;
    PlanCosts c;
    assert_true(plan_costs(&p, &p.layout, &c));
    PlanGroup eg = plan_ep_group(&cl, 1, 32);
    double e = 2, h = 1024, T = 512, k = 8;
    PlanMoeTierBytes b = plan_moe_dispatch_bytes(eg, PLAN_MOE_DEEPEP, e * T * k * h, e * T * h, 32, 8);
    double counts = plan_comm_cost(&cl, COLL_ALL_TO_ALL, ALGO_AUTO, eg, 4 * 32).time;
    assert_close(c.cost[0].fwd_ep, 4 * (2 * plan_moe_dispatch_time(&cl, eg, b) + counts), 0, 1e-12);
    assert_close(c.cost[0].bwd_ep, 4 * 2 * plan_moe_dispatch_time(&cl, eg, b), 0, 1e-12);
    plan_costs_free(&c);
}

/* Expert TP (issue 25): the routed experts split over etp, the rest over
 * tp; at etp 1 < tp 2 each rank routes its own T/2 rows, and its expert
 * GEMMs are whole experts of those rows, the same FLOPs per GPU as etp =
 * tp; at 1 < etp < tp the rows are gathered over the expert-TP ranks.
 * The expert-DP group is tp dp / (etp ep). */
static void test_moe_etp(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Model m;
    plan_preset_llama(&m, buf, "moe", 4, 1024, 8, 8, 2048, 512, 1000, DTYPE_BF16);
    moeify(&m, 16, 4, 1, 1536);
    const Layer *l = &m.layers[2];
    assert_int_equal(l->kind, LAYER_MOE);
    bool ovf = false;
    uint64_t h = 1024, f = 1536, E = 16, one = 3 * h * f;   /* SwiGLU, no bias */
    uint64_t rest = h + h * E + one / 2;                    /* norm, router, the shared expert over tp 2 */
    assert_int_equal(plan_layer_params_ep(&m, l, 2, 2, 4, &ovf), rest + E * one / 2 / 4);
    assert_int_equal(plan_layer_params_ep(&m, l, 2, 1, 4, &ovf), rest + E * one / 4);
    assert_int_equal(plan_layer_params_ep(&m, l, 2, 1, 1, &ovf), rest + E * one);
    assert_false(ovf);
    PlanCut a = { .micro_batch = 2, .tp = 2, .sp = true, .recompute = RECOMPUTE_NONE, .ep = 4, .etp = 2 };
    PlanCut b = a;
    b.etp = 1;
    PlanLayerWork wa, wb;
    plan_layer_work(&m, l, l - 1, &a, &wa);
    plan_layer_work(&m, l, l - 1, &b, &wb);
    double T = 2 * 512, R = T * 4;                           /* tokens, rows of a micro-batch */
    assert_close(wa.gemm[1].m, R * 4 / 16, 0, 0);             /* etp 2: every TP rank routes all T */
    assert_close(wa.gemm[1].n, 2.0 * 1536 / 2, 0, 0);
    assert_close(wb.gemm[1].m, R / 2 * 4 / 16, 0, 0);         /* etp 1: its own T/2, whole experts */
    assert_close(wb.gemm[1].n, 2.0 * 1536, 0, 0);
    double ga = 2 * wa.gemm[1].m * wa.gemm[1].n * wa.gemm[1].k * wa.gemm[1].batch;
    double gb = 2 * wb.gemm[1].m * wb.gemm[1].n * wb.gemm[1].k * wb.gemm[1].batch;
    assert_close(ga, gb, 0, 1e-12);
    assert_close(wb.ep_bytes, wa.ep_bytes / 2, 0, 1e-12);
    /* 1 < etp 2 < tp 4: the rows the experts run gathered over the two
     * expert-TP ranks (all-gather and reduce-scatter of e R h each way);
     * none at etp = tp or etp 1 */
    PlanCut c = a;
    c.tp = 4;
    PlanLayerWork wc;
    plan_layer_work(&m, l, l - 1, &c, &wc);
    assert_close(wc.etp_bytes, 2.0 * wc.gemm[1].m * wc.gemm[1].batch * 1024, 0, 1e-12);
    assert_close(wc.gemm[1].m, R / 4 * 2 * 4 / 16, 0, 0);    /* its own T/4, gathered over 2 */
    assert_true(wa.etp_bytes == 0 && wb.etp_bytes == 0);
    Layout L = { .dp = 8, .tp = 2, .ep = 16, .etp = 1 };
    assert_int_equal(plan_expert_dp(&L), 1);
    L.ep = 4;
    assert_int_equal(plan_expert_dp(&L), 4);
    L.etp = 2;
    assert_int_equal(plan_expert_dp(&L), 2);   /* etp = tp: dp / ep */
    L.etp = 0;
    assert_int_equal(plan_etp(&L), 2);
}

/* moe_imbalance (issue 25): the busiest EP rank's rows, imb x the mean,
 * in its expert GEMMs and its all-to-all bytes; the model's FLOPs stay
 * the tokens' (MFU honest); at ep 1 no rank is busier; a capacity caps it. */
static void test_moe_imbalance(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Model m;
    plan_preset_llama(&m, buf, "moe", 4, 1024, 8, 8, 2048, 512, 1000, DTYPE_BF16);
    moeify(&m, 8, 2, 0, 2048);
    Layer *l = (Layer *)&m.layers[2];
    PlanCut c = { .micro_batch = 1, .tp = 1, .recompute = RECOMPUTE_NONE, .ep = 4, .imbalance = 1 };
    PlanLayerWork u, b;
    plan_layer_work(&m, l, l - 1, &c, &u);
    c.imbalance = 1.5;
    plan_layer_work(&m, l, l - 1, &c, &b);
    assert_close(b.gemm[1].m, 1.5 * u.gemm[1].m, 0, 1e-15);
    assert_close(b.gemm[2].m, 1.5 * u.gemm[2].m, 0, 1e-15);
    assert_close(b.ep_bytes, 1.5 * u.ep_bytes, 0, 1e-15);
    assert_close(b.flops_fwd, u.flops_fwd, 0, 1e-12);
    c.ep = 1;
    plan_layer_work(&m, l, l - 1, &c, &b);
    assert_close(b.gemm[1].m, u.gemm[1].m / 4, 0, 1e-15);   /* ep 1: E experts of R/E rows, none busier */
    assert_close(b.ep_bytes, 0, 0, 0);
    /* a capacity of 1.25 keeps at most 1.25 x the mean per expert */
    l->capacity_factor = 1.25;
    c.ep = 4;
    c.imbalance = 2;
    plan_layer_work(&m, l, l - 1, &c, &b);
    assert_close(b.gemm[1].m, ceil(1.25 * 512 * 2 / 8) * 4, 0, 1e-12);   /* C rows of each of the ep sources */
    l->capacity_factor = 0;
    /* the cost table's all-to-alls grow with it */
    Cluster cl = plan_preset_dgx_h100(2);
    Plan p = plan_preset_plan(m, cl, 16, 1, 1, 1, 1, 32, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    p.layout.ep = 8;
    PlanCosts c1, c2;
    assert_true(plan_costs(&p, &p.layout, &c1));
    p.software.moe_imbalance = 1.3;
    assert_true(plan_costs(&p, &p.layout, &c2));
    assert_true(c2.cost[0].fwd_ep > c1.cost[0].fwd_ep && c2.cost[0].fwd > c1.cost[0].fwd);
    assert_close(c2.cost[0].fwd_ep_bytes, 1.3 * c1.cost[0].fwd_ep_bytes - 0.3 * 4 * 4 * 8, 0, 1e-12);
    plan_costs_free(&c1);
    plan_costs_free(&c2);
}

/* 10^13 parameters stay exact; 2^64 overflows and is reported. */
static void test_params_exact_and_overflow(void **state)
{
    (void)state;
    Layer *buf = calloc(PLAN_PRESET_LAYERS(1000), sizeof *buf);
    Model m;
    uint64_t n;
    const uint64_t l = 1000, h = 28672, V = 51200, s = 2048;
    plan_preset_gpt(&m, buf, "huge", (int)l, (int64_t)h, 224, (int64_t)s, (int64_t)V, DTYPE_BF16);
    assert_true(plan_model_params(&m, &n));
    /* per block: QKV 3h^2 + 3h, out h^2 + h, MLP 8h^2 + 5h, 2 LayerNorms 4h */
    uint64_t want = V * h + s * h + l * (12 * h * h + 13 * h) + 2 * h;
    assert_int_equal(n, want);
    assert_true(n > 9000000000000ull);
    plan_preset_gpt(&m, buf, "overflow", 1000, 4000000000ll, 1000, 2048, 51200, DTYPE_BF16);
    assert_false(plan_model_params(&m, &n));
    free(buf);
}

/* Narayanan et al. 2021: with full recomputation the hardware FLOPs are
 * 96 B s l h^2 (1 + s/6h + V/16lh); the model FLOPs are 72 B s l h^2 (1 +
 * s/6h) + 6 B s h V. */
static void test_flops_megatron(void **state)
{
    (void)state;
    const int L[] = { 24, 40, 80 };
    const int64_t H[] = { 2304, 6144, 12288 }, A[] = { 24, 48, 96 };
    for (int i = 0; i < 3; i++) {
        Layer buf[PLAN_PRESET_LAYERS(80)];
        Model m;
        plan_preset_gpt(&m, buf, "g", L[i], H[i], A[i], 2048, 51200, DTYPE_FP16);
        double B = 512, s = 2048, l = L[i], h = (double)H[i], V = 51200;
        double hw = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
        double model = 72 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V;
        assert_close(plan_model_flops_step(&m, 512), model, 0, 1e-12);
        assert_close(plan_model_flops_step(&m, 512) +
                     plan_recompute_flops_step(&m, 512, RECOMPUTE_FULL), hw, 0, 1e-12);
        /* selective adds only the attention score and context GEMMs: 4 B s^2 h l */
        assert_close(plan_recompute_flops_step(&m, 512, RECOMPUTE_SELECTIVE),
                     4 * B * s * s * h * l, 0, 1e-12);
    }
}

/* Each recomputed part's bytes and FLOPs, by hand, on a GPT block of
 * h 64, a 4 (d 16), f 4h = 256, s 32, b 2 (T 64), bf16 (e 2), tp 1, no
 * dropout, the attention's scores in HBM (attention_kernel math):
 *  attention keeps (Korthikanti Sec. 4.1's inventory): norm input and QKV
 *    input 2 e T h = 16384; Q, K, V and the output projection's input
 *    e T (h + 2h + h) = 32768; the softmax output e b a s^2 = 16384:
 *    65536. core_attn drops the last (49152), layernorm the QKV input
 *    e T h = 8192 too (40960). torchtitan's op list keeps the block input
 *    e T h = 8192, Q, V and the SDPA output e T 3h = 24576 and the
 *    log-sum-exp 4 b a s = 1024: 33792.
 *  MLP keeps norm input and up input 16384, the activation's input and
 *    output 2 e T f = 65536: 81920; mlp drops the last (16384), with
 *    layernorm 8192; torchtitan's (ungated: mm 5 kept, mm 6 re-run) the
 *    up projection's output e T f = 32768.
 *  FLOPs re-run: core_attn the score and context GEMMs 2 x 2 b a s^2 d =
 *    524288; mlp both GEMMs 2 x 2 T h f = 4194304; op-level the K third
 *    of QKV and the output projection 2 T h h + 2 T h h = 1048576 and the
 *    MLP's down projection 2 T f h = 2097152; layernorm none (no GEMM). */
static void test_recompute_modules_exact(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(1)];
    Model m;
    plan_preset_gpt(&m, buf, "g", 1, 64, 4, 32, 256, DTYPE_BF16);
    const Layer *att = &m.layers[1], *mlp = &m.layers[2];
    static const struct { int rec, mods; double att, mlp, att_flops, mlp_flops; } T[] = {
        { RECOMPUTE_NONE, 0, 65536, 81920, 0, 0 },
        { RECOMPUTE_SELECTIVE, 0, 49152, 81920, 524288, 0 },   /* core_attn, Megatron's default */
        { RECOMPUTE_SELECTIVE, PLAN_RC_BIT(PLAN_RC_CORE_ATTN), 49152, 81920, 524288, 0 },
        { RECOMPUTE_SELECTIVE, PLAN_RC_BIT(PLAN_RC_LAYERNORM), 57344, 73728, 0, 0 },
        { RECOMPUTE_SELECTIVE, PLAN_RC_BIT(PLAN_RC_MLP), 65536, 16384, 0, 4194304 },
        { RECOMPUTE_SELECTIVE, PLAN_RC_BIT(PLAN_RC_CORE_ATTN) | PLAN_RC_BIT(PLAN_RC_LAYERNORM) |
                               PLAN_RC_BIT(PLAN_RC_MLP), 40960, 8192, 524288, 4194304 },
        { RECOMPUTE_SELECTIVE_OP, 0, 33792, 32768, 1048576, 2097152 },
        { RECOMPUTE_FULL, 0, 8192, 0, 2621440, 4194304 },   /* the block input; every GEMM */
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        PlanCut c = { .micro_batch = 2, .tp = 1, .recompute = T[i].rec, .modules = T[i].mods };
        PlanLayerWork wa, wm;
        plan_layer_work(&m, att, &m.layers[0], &c, &wa);
        plan_layer_work(&m, mlp, att, &c, &wm);
        if (wa.act_kept != T[i].att || wm.act_kept != T[i].mlp || wa.redo.flops != T[i].att_flops ||
            wm.redo.flops != T[i].mlp_flops)
            fprintf(stderr, "case %zu: kept %.0f %.0f, re-run %.0f %.0f FLOPs\n", i, wa.act_kept, wm.act_kept,
                    wa.redo.flops, wm.redo.flops);
        assert_true(wa.act_kept == T[i].att && wm.act_kept == T[i].mlp);
        assert_true(wa.redo.flops == T[i].att_flops && wm.redo.flops == T[i].mlp_flops);
    }
    /* A mixture in the MLP's place (Llama's: SwiGLU f 128, RMSNorm; E 4,
     * top_k 2, one shared expert, dropless: R = T k = 128 rows), h 64:
     * keeps norm input and output 2 e T h = 16384; per row of the routed
     * (128) and shared (64) experts the gate-and-up output and the down
     * input 3 e f: 147456; router logits 4 T E = 1024, top-k 12 T k =
     * 1536, dispatched and combined rows e (R + R) h = 32768: 199168.
     * moe keeps its input alone (16384); moe_act drops the routed rows'
     * activation output e R f = 32768 (166400); shared_experts the shared
     * rows' 3 e T f = 49152 (150016), re-running their GEMMs 2 T 3f h =
     * 3145728 FLOPs; moe re-runs the whole forward: router 2 T E h = 32768,
     * experts 2 R 3f h = 6291456, shared 3145728: 9469952. */
    Layer lb[PLAN_PRESET_LAYERS(1)];
    Model mm;
    plan_preset_llama(&mm, lb, "moe", 1, 64, 4, 4, 128, 32, 256, DTYPE_BF16);
    Layer *moe = &lb[2];
    moe->kind = LAYER_MOE;
    moe->experts = 4; moe->top_k = 2; moe->shared = 1;
    static const struct { int mods; double kept, flops; } M[] = {
        { 0, 199168, 0 },
        { PLAN_RC_BIT(PLAN_RC_MOE), 16384, 9469952 },
        { PLAN_RC_BIT(PLAN_RC_MOE_ACT), 166400, 0 },
        { PLAN_RC_BIT(PLAN_RC_SHARED_EXPERTS), 150016, 3145728 },
        { PLAN_RC_BIT(PLAN_RC_MOE_ACT) | PLAN_RC_BIT(PLAN_RC_SHARED_EXPERTS) | PLAN_RC_BIT(PLAN_RC_LAYERNORM),
          199168 - 32768 - 49152 - 8192, 3145728 },
        { PLAN_RC_BIT(PLAN_RC_MOE) | PLAN_RC_BIT(PLAN_RC_SHARED_EXPERTS), 16384, 9469952 },   /* once */
    };
    for (size_t i = 0; i < sizeof M / sizeof M[0]; i++) {
        PlanCut c = { .micro_batch = 2, .tp = 1, .recompute = RECOMPUTE_SELECTIVE, .modules = M[i].mods };
        PlanLayerWork w;
        plan_layer_work(&mm, moe, &lb[1], &c, &w);
        if (w.act_kept != M[i].kept || w.redo.flops != M[i].flops)
            fprintf(stderr, "moe case %zu: kept %.0f, re-run %.0f FLOPs\n", i, w.act_kept, w.redo.flops);
        assert_true(w.act_kept == M[i].kept && w.redo.flops == M[i].flops);
    }
    /* HFU counts the same redo per step: one sequence is half of b 2 */
    assert_close(plan_recompute_flops_step(&m, 1, RECOMPUTE_SELECTIVE_OP), (1048576.0 + 2097152) / 2, 0, 1e-15);
}

/* Full recomputation of some blocks: recompute_layers N rebuilds the first
 * N of each chunk, recompute_every N each N-th of a rank; the others keep
 * what recompute none keeps. Four blocks of the model above on one stage:
 * each recomputed block keeps its input e T h = 8192 instead of 65536 +
 * 81920, and re-runs its forward, 2621440 + 4194304 FLOPs. */
static void test_recompute_some_blocks(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Model m;
    plan_preset_gpt(&m, buf, "g", 4, 64, 4, 32, 256, DTYPE_BF16);
    Plan p = plan_preset_plan(m, plan_preset_dgx_a100(1), 1, 1, 1, 0, 2, 2, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    PlanCosts none, c;
    assert_true(plan_costs(&p, &p.layout, &none));
    static const struct { int layers, every, rebuilt; } T[] = { { 1, 0, 1 }, { 3, 0, 3 }, { 4, 0, 4 },
                                                                { 9, 0, 4 }, { 0, 2, 2 }, { 0, 3, 1 },
                                                                { 0, 1, 4 }, { 0, 0, 4 } };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        Layout l = p.layout;
        l.recompute = RECOMPUTE_FULL;
        l.recompute_layers = T[i].layers;
        l.recompute_every = T[i].every;
        assert_true(plan_costs(&p, &l, &c));
        double k = T[i].rebuilt;
        assert_close(c.cost[0].act_kept, none.cost[0].act_kept - k * (65536 + 81920 - 8192), 0, 1e-12);
        assert_close(c.cost[0].flops_recompute, k * (2621440.0 + 4194304), 0, 1e-12);
        plan_costs_free(&c);
    }
    /* Megatron's uniform method, units of 2 blocks: every block re-runs its
     * forward; blocks 2 and 4 keep no input (2 x 8192 less than full), and
     * a unit's backward holds both blocks rebuilt and the second's input:
     * the rebuild grows from 65536 + 81920 - 8192 to twice that + 8192,
     * by 147456 */
    PlanCosts full;
    Layout lf = p.layout;
    lf.recompute = RECOMPUTE_FULL;
    assert_true(plan_costs(&p, &lf, &full));
    lf.recompute_layers = 2;
    lf.recompute_method = PLAN_RC_METHOD_UNIFORM;
    assert_true(plan_costs(&p, &lf, &c));
    assert_close(c.cost[0].act_kept, full.cost[0].act_kept - 2 * 8192, 0, 1e-12);
    assert_close(c.cost[0].act_layer_max, full.cost[0].act_layer_max + 147456, 0, 1e-12);
    assert_close(c.cost[0].flops_recompute, full.cost[0].flops_recompute, 0, 1e-12);
    plan_costs_free(&c);
    plan_costs_free(&full);
    plan_costs_free(&none);
    /* interleaved, pp 2 x 2 chunks of one block: every 2nd block of a rank
     * is its second chunk's; the first N of each chunk is every chunk's */
    Layout l = plan_preset_plan(m, plan_preset_dgx_a100(1), 2, 1, 2, 0, 1, 4, SCHED_INTERLEAVED, 2, RECOMPUTE_FULL, 0).layout;
    l.recompute_every = 2;
    assert_true(plan_costs(&p, &l, &c));
    assert_true(c.cost[0].flops_recompute == 0 && c.cost[1].flops_recompute == 0);
    assert_true(c.cost[2].flops_recompute > 0 && c.cost[3].flops_recompute > 0);
    plan_costs_free(&c);
    l.recompute_every = 0;
    l.recompute_layers = 1;
    assert_true(plan_costs(&p, &l, &c));
    for (int k = 0; k < 4; k++)   /* micro_batch 1: half of b 2 */
        assert_close(c.cost[k].flops_recompute, (2621440.0 + 4194304) / 2, 0, 1e-12);
    plan_costs_free(&c);
}

/* Korthikanti et al. 2022, Table 2, per transformer layer (attention + MLP),
 * which counts dropout 0.1's masks; without dropout (the model's default)
 * the attention-probability mask (a s^2 b bytes) and dropped copy (2 a s^2
 * b) and the two residual masks (s b h each) are not kept. */
static void test_activations_korthikanti(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(2)];
    Model m;
    plan_preset_gpt(&m, buf, "g", 2, 6144, 48, 2048, 51200, DTYPE_FP16);
    const double s = 2048, b = 2, h = 6144, a = 48;
    {
        PlanCut c = { .micro_batch = 2, .tp = 1, .sp = false, .recompute = RECOMPUTE_NONE };
        PlanLayerWork att, mlp;
        assert_true(m.dropout == 0);
        plan_layer_work(&m, &m.layers[1], &m.layers[0], &c, &att);
        plan_layer_work(&m, &m.layers[2], &m.layers[1], &c, &mlp);
        assert_close(att.act_kept + mlp.act_kept, s * b * h * (32 + 2 * a * s / h), 0, 1e-12);
    }
    m.dropout = 0.1;
    struct { int t; bool sp; int rec; double want; } cases[] = {
        { 1, false, RECOMPUTE_NONE,      s * b * h * (34 + 5 * a * s / h) },
        { 8, false, RECOMPUTE_NONE,      s * b * h * (10 + 24.0 / 8 + 5 * a * s / (h * 8)) },
        { 8, true,  RECOMPUTE_NONE,      s * b * h / 8 * (34 + 5 * a * s / h) },
        { 8, false, RECOMPUTE_SELECTIVE, s * b * h * (10 + 24.0 / 8) },
        { 8, true,  RECOMPUTE_SELECTIVE, 34 * s * b * h / 8 },
        { 8, false, RECOMPUTE_FULL,      2 * s * b * h },
        { 4, true,  RECOMPUTE_FULL,      2 * s * b * h / 4 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PlanCut c = { .micro_batch = 2, .tp = cases[i].t, .sp = cases[i].sp,
                      .recompute = cases[i].rec };
        PlanLayerWork att, mlp;
        plan_layer_work(&m, &m.layers[1], &m.layers[0], &c, &att);
        plan_layer_work(&m, &m.layers[2], &m.layers[1], &c, &mlp);
        assert_close(att.act_kept + mlp.act_kept, cases[i].want, 0, 1e-12);
    }
}

/* ZB-H1 keeps, from B to W, each attention's QKV-output gradient (e T 3h/t
 * for MHA) and block-output gradient (e T h), each MLP's up-projection
 * gradient (e T 4h/t) and block-output gradient (e T h), whatever is
 * recomputed (codegen's slot dh, dy); only that schedule counts them. */
static void test_zb_h1_kept(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(2)];
    Model m;
    plan_preset_gpt(&m, buf, "g", 2, 6144, 48, 2048, 51200, DTYPE_BF16);
    const double s = 2048, b = 2, h = 6144, e = 2;
    static const struct { int t; bool sp; int rec; } cases[] = {
        { 1, false, RECOMPUTE_NONE }, { 8, false, RECOMPUTE_SELECTIVE }, { 4, true, RECOMPUTE_FULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PlanCut c = { .micro_batch = 2, .tp = cases[i].t, .sp = cases[i].sp, .recompute = cases[i].rec };
        PlanLayerWork att, mlp, fin;
        const Layer *fl = &m.layers[m.n_layers - 2];   /* the final LayerNorm */
        assert_int_equal(fl->kind, LAYER_NORM);
        plan_layer_work(&m, &m.layers[1], &m.layers[0], &c, &att);
        plan_layer_work(&m, &m.layers[2], &m.layers[1], &c, &mlp);
        plan_layer_work(&m, fl, fl - 1, &c, &fin);
        double t = cases[i].t;
        /* the GEMM inputs' gradients, and the pre-norm's fp32 gain and bias
         * gradients B keeps aside for W (4 bytes x 2h, replicated over TP) */
        assert_close(att.act_split, e * s * b * (3 * h / t + h) + 4 * 2 * h, 0, 1e-12);
        assert_close(mlp.act_split, e * s * b * (4 * h / t + h) + 4 * 2 * h, 0, 1e-12);
        assert_close(fin.act_split, 4 * 2 * h, 0, 1e-12);
        assert_close(plan_act_kept(SCHED_ZB_H1, att.act_kept, att.act_split),
                     att.act_kept + att.act_split, 0, 1e-12);
        for (int sc = SCHED_GPIPE; sc <= SCHED_INTERLEAVED; sc++)
            if (sc != SCHED_ZB_H1) assert_close(plan_act_kept(sc, mlp.act_kept, mlp.act_split), mlp.act_kept, 0, 0);
    }
}

/* Hand count of one GPT attention sublayer's GEMMs (Narayanan Appendix). */
static void test_layer_gemm_flops(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(1)];
    Model m;
    plan_preset_gpt(&m, buf, "g", 1, 1024, 16, 512, 1000, DTYPE_BF16);
    PlanCut c = { .micro_batch = 4, .tp = 2, .sp = false, .recompute = RECOMPUTE_NONE };
    PlanLayerWork w;
    plan_layer_work(&m, &m.layers[1], &m.layers[0], &c, &w);
    double T = 4 * 512, h = 1024, s = 512;
    /* QKV 6Th^2 + scores 2Tsh + context 2Tsh + out 2Th^2, all / t */
    assert_close(w.flops_fwd, (8 * T * h * h + 4 * T * s * h) / 2, 0, 1e-12);
    assert_close(w.flops_core, 4 * T * s * h / 2, 0, 1e-12);
    assert_int_equal(w.tp_fwd.ar, 1);
    assert_int_equal(w.tp_bwd.ar, 1);
    plan_layer_work(&m, &m.layers[2], &m.layers[1], &c, &w);
    assert_close(w.flops_fwd, 16 * T * h * h / 2, 0, 1e-12);
}

/* GEMM efficiency falls for small or thin matrices. */
static void test_gemm_efficiency(void **state)
{
    (void)state;
    Cluster c = plan_preset_dgx_a100(1);
    double peak = c.device.flops_16;
    double big = 2.0 * 8192 * 8192 * 8192 / plan_gemm_time(&c.device, peak, 2, 8192, 8192, 8192, 1);
    /* the preset's measured ceiling, less the epilogue that follows an
     * A100 GEMM's mainloop (8192 x 8192 bf16 written: 1.7 % of its time) */
    assert_close(big / peak, plan_gemm_eff(&c.device), 0, 0.025);
    double small = 2.0 * 256 * 256 * 256 / plan_gemm_time(&c.device, peak, 2, 256, 256, 256, 1);
    assert_true(small / peak < 0.1);
    double thin = 2.0 * 2048 * 2048 * 64 / plan_gemm_time(&c.device, peak, 2, 2048, 2048, 64, 1);
    assert_true(thin < big * 0.8);
}

/* Wave quantisation by the device's SM count: on 108 SMs a GEMM of 217
 * tiles takes three waves and one of 216 two; at the fallback of 128
 * tiles per wave both take two. */
static void test_wave_sms(void **state)
{
    (void)state;
    Device d = plan_preset_dgx_a100(1).device;
    assert_int_equal(d.sms, 108);
    assert_int_equal(plan_preset_dgx_h100(1).device.sms, 132);
    double peak = d.flops_16;
    /* 7 x 31 = 217 tiles and 8 x 27 = 216 tiles, k 8192: compute-bound */
    double t217 = plan_gemm_time(&d, peak, 2, 7 * 128, 31 * 128, 8192, 1);
    double t216 = plan_gemm_time(&d, peak, 2, 8 * 128, 27 * 128, 8192, 1);
    assert_close(t217 / t216, 1.5, 0, 0.01);
    d.sms = 0;
    t217 = plan_gemm_time(&d, peak, 2, 7 * 128, 31 * 128, 8192, 1);
    t216 = plan_gemm_time(&d, peak, 2, 8 * 128, 27 * 128, 8192, 1);
    assert_close(t217 / t216, 1.0, 0, 0.01);
}

/* ---- communication ------------------------------------------------------ */

static void test_bus_factors(void **state)
{
    (void)state;
    assert_close(plan_bus_factor(COLL_ALL_REDUCE, 8), 2.0 * 7 / 8, 0, 1e-15);
    assert_close(plan_bus_factor(COLL_ALL_GATHER, 8), 7.0 / 8, 0, 1e-15);
    assert_close(plan_bus_factor(COLL_REDUCE_SCATTER, 4), 3.0 / 4, 0, 1e-15);
    assert_close(plan_bus_factor(COLL_BROADCAST, 8), 1, 0, 1e-15);
    assert_close(plan_bus_factor(COLL_REDUCE, 8), 1, 0, 1e-15);
    assert_close(plan_bus_factor(COLL_ALL_TO_ALL, 16), 15.0 / 16, 0, 1e-15);
}

static void test_group_shapes(void **state)
{
    (void)state;
    Cluster c = plan_preset_dgx_a100(16);
    PlanGroup g = plan_layout_group(&c, 16, 8, 1, GROUP_TP);
    assert_int_equal(g.local, 8); assert_int_equal(g.nodes, 1);
    g = plan_layout_group(&c, 16, 8, 1, GROUP_DP);            /* stride 8: one per node */
    assert_int_equal(g.local, 1); assert_int_equal(g.nodes, 16);
    g = plan_layout_group(&c, 32, 2, 2, GROUP_DP);            /* stride 2: 4 per node */
    assert_int_equal(g.local, 4); assert_int_equal(g.nodes, 8);
    g = plan_layout_group(&c, 2, 2, 32, GROUP_PP);            /* stride 4: 2 per node */
    assert_int_equal(g.local, 2); assert_int_equal(g.nodes, 16);
    g = plan_layout_group(&c, 1, 2, 4, GROUP_PP);             /* all in one node */
    assert_int_equal(g.local, 4); assert_int_equal(g.nodes, 1);
}

/* alpha-beta costs by hand: the MPI path (a cluster without NCCL, sms 0). */
static void test_comm_costs(void **state)
{
    (void)state;
    Cluster c = plan_preset_dgx_a100(4);
    c.device.sms = 0;
    double M = 1e9, ai = 2e-6, ae = 5e-6;
    double bi = 300e9 * PLAN_LINK_EFF_INTRA, be = 25e9 * PLAN_LINK_EFF_INTER;
    PlanGroup node = { 8, 8, 1, 1 };
    PlanCommCost r = plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_RING, node, M);
    assert_close(r.time, 14 * ai + 2.0 * 7 / 8 * M / bi, 0, 1e-12);
    assert_false(r.inter);
    r = plan_comm_cost(&c, COLL_ALL_GATHER, ALGO_RING, node, M);
    assert_close(r.time, 7 * ai + 7.0 / 8 * M / bi, 0, 1e-12);
    /* 32 GPUs on 4 nodes: flat ring at IB speed vs hierarchical */
    PlanGroup span = { 32, 8, 4, 1 };
    r = plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_RING, span, M);
    assert_close(r.time, 62 * ae + 2.0 * 31 / 32 * M / be, 0, 1e-12);
    assert_true(r.inter);
    double across = fmin(6 * ae + 2.0 * 3 / 4 * (M / 8) / be, 2 * 2 * ae + 2 * (M / 8) / be);
    double hier = 7 * ai + 7.0 / 8 * M / bi + across + 7 * ai + 7.0 / 8 * M / bi;
    r = plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_HIER, span, M);
    assert_close(r.time, hier, 0, 1e-12);
    r = plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_AUTO, span, M);
    assert_int_equal(r.algo, ALGO_HIER);
    assert_close(r.time, hier, 0, 1e-12);
    /* tree wins for tiny messages on many ranks (latency) */
    PlanGroup wide = { 256, 1, 256, 1 };
    r = plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_AUTO, wide, 1024);
    assert_int_equal(r.algo, ALGO_TREE);
    /* p2p across nodes */
    PlanGroup pair = { 2, 1, 2, 1 };
    r = plan_comm_cost(&c, COLL_P2P, ALGO_AUTO, pair, M);
    assert_close(r.time, ae + M / be, 0, 1e-12);
    /* small messages reach a small fraction of the bus bandwidth */
    double t_small = plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_RING, node, 1e4).time;
    assert_true(2.0 * 7 / 8 * 1e4 / t_small < 0.1 * bi);
}

/* ---- memory -------------------------------------------------------------- */

/* ZeRO paper Fig. 1's model (7.5B parameters, DP 64, 2 + 2 + 12 bytes per
 * parameter: fp16 gradients, the default of an fp16 model): 120 GB,
 * ZeRO-1 30 + 90/64 GB (the paper's 31.4: the reduce-scatter writes in
 * place, no shard beside the gradients), ZeRO-2 15 + 105/64 GB (16.6),
 * ZeRO-3 120/64 GB (1.9). With grad_accum_dtype fp32, Megatron-LM's
 * distributed-optimizer table (2 + 4 + 12 = 18 bytes, distributed
 * 6 + 12/dp): 135 GB, 45 + 90/64, 15 + 120/64, 135/64 GB. */
static void test_zero_paper(void **state)
{
    (void)state;
    uint64_t p, g, o;
    const double want16[] = { 120, 30 + 90.0 / 64, 15 + 105.0 / 64, 120.0 / 64 };
    const double want32[] = { 135, 45 + 90.0 / 64, 15 + 120.0 / 64, 135.0 / 64 };
    for (int z = 0; z <= 3; z++) {
        plan_model_states(7500000000ull, DTYPE_FP16, DTYPE_FP16, z, 64, &p, &g, &o);
        assert_close((double)(p + g + o) / 1e9, want16[z], 1e-9, 0);
        plan_model_states(7500000000ull, DTYPE_BF16, DTYPE_FP32, z, 64, &p, &g, &o);
        assert_close((double)(p + g + o) / 1e9, want32[z], 1e-9, 0);
    }
    plan_model_states(7500000000ull, DTYPE_FP16, DTYPE_FP16, 0, 64, &p, &g, &o);
    assert_int_equal(p, 15000000000ull);
    assert_int_equal(g, 15000000000ull);   /* 2 bytes per parameter */
    assert_int_equal(o, 90000000000ull);
    plan_model_states(7500000000ull, DTYPE_BF16, DTYPE_FP32, 0, 64, &p, &g, &o);
    assert_int_equal(g, 30000000000ull);   /* fp32: 4 bytes per parameter */
    plan_model_states(7500000000ull, DTYPE_FP32, DTYPE_FP32, 0, 1, &p, &g, &o);   /* 4 + 4 + 8 */
    assert_int_equal(p + g + o, 120000000000ull);
}

/* The gradients' dtype is the plan's grad_accum_dtype, else fp32 for a bf16
 * model and the model's own otherwise (planner/layout.c's plan_grad_dtype), and every consumer reads it: the
 * memory model's gradients and buckets and the DP reductions' bytes. */
static void test_grad_dtype(void **state)
{
    (void)state;
    static const struct { PlanDtype model; int key; PlanDtype want; } T[] = {
        { DTYPE_BF16, PLAN_AUTO, DTYPE_FP32 }, { DTYPE_FP16, PLAN_AUTO, DTYPE_FP16 },
        { DTYPE_FP32, PLAN_AUTO, DTYPE_FP32 }, { DTYPE_BF16, DTYPE_FP32, DTYPE_FP32 },
        { DTYPE_FP32, DTYPE_BF16, DTYPE_BF16 }, { DTYPE_BF16, DTYPE_FP16, DTYPE_FP16 },
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        Layer buf[PLAN_PRESET_LAYERS(4)];
        Model m;
        plan_preset_gpt(&m, buf, "g", 4, 512, 8, 256, 1024, T[i].model);
        for (int z = 0; z <= 3; z++) {
            Plan p = plan_preset_plan(m, plan_preset_dgx_h100(1), 8, 1, 1, z, 1, 16, SCHED_1F1B, 1,
                                      RECOMPUTE_NONE, 0);
            p.software.grad_accum_dtype = T[i].key;
            assert_int_equal(plan_grad_dtype(&p), T[i].want);
            int ge = plan_dtype_bytes(T[i].want);
            assert_int_equal(plan_grad_bytes(&p), ge);
            PlanEval ev;
            plan_evaluate(&p, &ev);
            assert_true(ev.valid);
            uint64_t psi = ev.stages[0].params, pb, gb, ob;
            plan_model_states(psi, T[i].model, T[i].want, z, 8, &pb, &gb, &ob);
            assert_int_equal(ev.stages[0].grads_bytes, gb);
            /* ZeRO-0: the full gradients, ge bytes each */
            if (z == 0) assert_int_equal(gb, (uint64_t)ge * psi);
            PlanCosts c;
            assert_true(plan_costs(&p, &ev.layout, &c));
            assert_close(c.cost[0].red_bytes, (double)ge * (double)c.cost[0].params, 0, 0);
            plan_costs_free(&c);
            plan_eval_free(&ev);
        }
    }
}

/* Byte counts saturate instead of wrapping: 2*10^18 parameters need 2.4e19
 * bytes of optimizer state, more than 2^64; ZeRO's division keeps a
 * saturated count saturated; the headroom reads "does not fit". */
static void test_bytes_saturate(void **state)
{
    (void)state;
    uint64_t p, g, o;
    plan_model_states(2000000000000000000ull, DTYPE_BF16, DTYPE_FP32, 1, 64, &p, &g, &o);
    /* ZeRO-1: the full fp32 gradients, reduced in place */
    assert_true(p == 4000000000000000000ull && g == 2 * p);
    assert_true(o == UINT64_MAX);
    plan_model_states(UINT64_MAX / 2 + 1, DTYPE_BF16, DTYPE_FP32, 3, 7, &p, &g, &o);   /* 2 x 2^63 */
    assert_true(p == UINT64_MAX && g == UINT64_MAX && o == UINT64_MAX);
    plan_model_states(10, DTYPE_BF16, DTYPE_FP32, 3, 3, &p, &g, &o);   /* ceil(20 / 3), ceil(40 / 3), ceil(120 / 3) */
    assert_true(p == 7 && g == 14 && o == 40);
    plan_model_states(10, DTYPE_BF16, DTYPE_BF16, 3, 3, &p, &g, &o);   /* ceil(20 / 3) twice, ceil(120 / 3) */
    assert_true(p == 7 && g == 7 && o == 40);
    assert_true(plan_bytes(1e30) == UINT64_MAX && plan_bytes(-1) == 0 && plan_bytes(NAN) == 0);
    assert_true(plan_bytes(2.5) == 3);
    assert_true(plan_bytes_add(UINT64_MAX - 1, 5) == UINT64_MAX);
    assert_true(plan_headroom(80, UINT64_MAX) == INT64_MIN);
    assert_true(plan_headroom(80, 100) == -20 && plan_headroom(100, 80) == 20);
    assert_true(plan_headroom(UINT64_MAX, 0) == INT64_MAX);
}

static void test_in_flight_formulas(void **state)
{
    (void)state;
    assert_close(plan_in_flight(SCHED_GPIPE, 4, 0, 16, 1), 16, 0, 0);
    assert_close(plan_in_flight(SCHED_1F1B, 4, 0, 16, 1), 4, 0, 0);
    assert_close(plan_in_flight(SCHED_1F1B, 4, 3, 16, 1), 1, 0, 0);
    assert_close(plan_in_flight(SCHED_1F1B, 8, 0, 3, 1), 3, 0, 0);
    assert_close(plan_in_flight(SCHED_ZB_H1, 4, 1, 16, 1), 4, 0, 0);
    /* Megatron interleaved, stage 0: p (1 + (p-1)/(pv)) micro-batches */
    assert_close(plan_in_flight(SCHED_INTERLEAVED, 4, 0, 16, 2), 4 * (1 + 3.0 / 8), 0, 1e-12);
}

/* Memory moves the right way with each knob; and the stage items add up. */
static void test_memory_knobs(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(24)];
    PlanEval a, b;
    Plan p = gpt_plan(buf, 24, 2304, 24, 4, 32, 1, 1, 0, 4, 512, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    plan_evaluate(&p, &a);
    assert_true(a.valid);
    const PlanStageMem *m = &a.stages[0];
    assert_int_equal(m->total_bytes, m->params_bytes + m->grads_bytes + m->optimizer_bytes +
                                     m->activations_bytes + m->buffers_bytes + m->reserve_bytes);
    assert_int_equal(m->params_bytes, 2 * a.params);         /* pp 1, tp 1, tied head */
    for (int z = 1; z <= 3; z++) {
        p.layout.zero = z;
        plan_evaluate(&p, &b);
        assert_true(b.stages[0].optimizer_bytes < a.stages[0].optimizer_bytes);
        if (z >= 2) assert_true(b.stages[0].grads_bytes < a.stages[0].grads_bytes);
        if (z >= 3) assert_true(b.stages[0].params_bytes < a.stages[0].params_bytes);
        plan_eval_free(&b);
    }
    p.layout.zero = 0;
    p.layout.recompute = RECOMPUTE_FULL;
    plan_evaluate(&p, &b);
    assert_true(b.stages[0].activations_bytes < a.stages[0].activations_bytes / 4);
    plan_eval_free(&b);
    plan_eval_free(&a);
}

/* An infeasible plan names the stage and the item. */
static void test_infeasible(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(96)];
    Plan p = gpt_plan(buf, 96, 12288, 96, 1, 2, 4, 1, 0, 1, 64, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    PlanEval ev;
    plan_evaluate(&p, &ev);
    assert_true(ev.valid);
    assert_false(ev.feasible);
    assert_non_null(strstr(ev.why, "stage 0 does not fit"));
    assert_non_null(strstr(ev.why, "optimizer state"));
    plan_eval_free(&ev);
    /* an invalid layout: 3 x 1 x 1 != 8 GPUs */
    p.layout.dp = 3; p.layout.tp = 1;
    plan_evaluate(&p, &ev);
    assert_false(ev.valid);
    assert_non_null(strstr(ev.why, "GPUs"));
    plan_eval_free(&ev);
}

static void test_layout_defaults(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Plan p = gpt_plan(buf, 4, 256, 4, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    p.has_layout = false;
    Layout l = plan_layout_defaults(&p);
    assert_int_equal(l.tp, 1); assert_int_equal(l.pp, 1); assert_int_equal(l.dp, 16);
    assert_int_equal(l.zero, 0); assert_int_equal(l.micro_batch, 1);
    assert_int_equal(l.global_batch, 16); assert_int_equal(l.schedule, SCHED_1F1B);
    assert_int_equal(l.chunks, 1); assert_int_equal(l.recompute, RECOMPUTE_NONE);
    assert_int_equal(l.sequence_parallel, 0);
    p.has_layout = true;
    p.layout = (Layout){ .dp = PLAN_AUTO, .tp = 2, .pp = 4, .zero = PLAN_AUTO, .micro_batch = 2, .global_batch = PLAN_AUTO,
                         .schedule = PLAN_AUTO, .chunks = 2, .recompute = PLAN_AUTO, .sequence_parallel = PLAN_AUTO,
                         .ep = PLAN_AUTO };
    l = plan_layout_defaults(&p);
    assert_int_equal(l.dp, 2); assert_int_equal(l.global_batch, 4);
    assert_int_equal(l.schedule, SCHED_INTERLEAVED);
}

/* Uneven splits: every layer in exactly one chunk, in order, embedding
 * first, head last, block counts differ by at most one. */
static void test_split(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(10)];
    Model m;
    plan_preset_gpt(&m, buf, "g", 10, 256, 4, 128, 1000, DTYPE_BF16);
    for (int n = 1; n <= 10; n++) {
        PlanChunk ch[10];
        assert_true(plan_split(&m, n, 1, ch));
        int blocks = 0;
        for (int k = 0; k < n; k++) {
            assert_int_equal(ch[k].first, k ? ch[k - 1].end : 0);
            assert_true(ch[k].end > ch[k].first);
            assert_true(ch[k].blocks == 10 / n || ch[k].blocks == 10 / n + 1);
            blocks += ch[k].blocks;
            int att = 0;
            for (int i = ch[k].first; i < ch[k].end; i++) att += m.layers[i].kind == LAYER_ATTENTION;
            assert_int_equal(att, ch[k].blocks);
        }
        assert_int_equal(blocks, 10);
        assert_int_equal(ch[n - 1].end, m.n_layers);
        if (n == 4) {   /* 10 = 2 + 3 + 3 + 2: the ends carry embedding and head */
            assert_int_equal(ch[0].blocks, 2); assert_int_equal(ch[1].blocks, 3);
            assert_int_equal(ch[2].blocks, 3); assert_int_equal(ch[3].blocks, 2);
        }
    }
    PlanChunk ch[11];
    assert_false(plan_split(&m, 11, 1, ch));
}

/* ---- the Program ----------------------------------------------------------- */

/* Uniform synthetic costs: F per micro-batch per stage, B = backward, W of
 * it the weight part, p2p zero. */
static bool synthetic(PlanOpCosts *c, int p, int v, int64_t m, int sched, int zero,
                      double F, double B, double W)
{
    if (!plan_op_costs_alloc(c, p, v)) return false;
    c->zero = zero; c->schedule = sched; c->n_micro = m;
    for (int k = 0; k < p * v; k++) {
        c->fwd[k] = F / v; c->bwd[k] = B / v;
        c->bwd_weight[k] = W / v; c->bwd_input[k] = (B - W) / v;
        c->first_layer[k] = k; c->end_layer[k] = k + 1; c->layers[k] = 1;
        c->p2p_bytes[k] = 1;
    }
    return true;
}

/* Structural checks of one Program: forward before backward per (mb,
 * chunk), each exactly once, W after B, sends match receives. */
static void check_program(const PlanProgram *pr)
{
    int p = pr->pp, v = pr->chunks, m = (int)pr->n_micro;
    size_t n = (size_t)p * v * m;
    int *f = calloc(n, sizeof *f), *b = calloc(n, sizeof *b), *w = calloc(n, sizeof *w);
    int *sa = calloc(n, sizeof *sa), *ra = calloc(n, sizeof *ra);
    int *sg = calloc(n, sizeof *sg), *rg = calloc(n, sizeof *rg);
    bool zb = pr->schedule == SCHED_ZB_H1;
    for (int s = 0; s < p; s++) {
        const PlanStageProgram *sp = &pr->stages[s];
        for (int i = 0; i < sp->n_ops; i++) {
            const PlanOp *o = &sp->ops[i];
            if (o->mb < 0) continue;
            assert_int_equal(o->vstage, o->chunk * p + s);
            size_t k = (size_t)o->vstage * m + (size_t)o->mb;
            switch (o->kind) {
            case OP_FWD: assert_int_equal(f[k]++, 0); break;
            case OP_BWD: case OP_BWD_INPUT:
                assert_int_equal(f[k], 1);               /* forward came first */
                assert_int_equal(b[k]++, 0);
                assert_true(zb == (o->kind == OP_BWD_INPUT));
                break;
            case OP_BWD_WEIGHT: assert_int_equal(b[k], 1); assert_int_equal(w[k]++, 0); break;
            case OP_SEND_ACT:
                assert_int_equal(o->peer, (o->vstage + 1) % p); sa[k]++; break;
            case OP_RECV_ACT:
                assert_int_equal(o->peer, (o->vstage - 1) % p); ra[k]++;
                assert_int_equal(f[k], 0); break;
            case OP_SEND_GRAD:
                assert_int_equal(o->peer, (o->vstage - 1) % p); sg[k]++; break;
            case OP_RECV_GRAD:
                assert_int_equal(o->peer, (o->vstage + 1) % p); rg[k]++;
                assert_int_equal(b[k], 0); break;
            default: break;
            }
        }
    }
    for (int k = 0; k < p * v; k++)
        for (int j = 0; j < m; j++) {
            size_t i = (size_t)k * m + j;
            assert_int_equal(f[i], 1);
            assert_int_equal(b[i], 1);
            assert_int_equal(w[i], zb ? 1 : 0);
            if (p > 1 && k + 1 < p * v) {            /* a send for every receive */
                assert_int_equal(sa[i], 1);
                assert_int_equal(ra[i + m], 1);
                assert_int_equal(rg[i], 1);
                assert_int_equal(sg[i + m], 1);
            }
        }
    free(f); free(b); free(w); free(sa); free(ra); free(sg); free(rg);
}

static void test_schedules_structure(void **state)
{
    (void)state;
    int scheds[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1 };
    for (int si = 0; si < 4; si++)
        for (int p = 1; p <= 8; p *= 2)
            for (int m = p; m <= 4 * p; m += p) {
                int v = scheds[si] == SCHED_INTERLEAVED ? 2 : 1;
                PlanOpCosts c;
                PlanProgram pr;
                assert_true(synthetic(&c, p, v, m, scheds[si], 1, 1, 2, 1));
                for (int k = 0; k < p * v; k++) c.reduce[k] = 0.1;
                assert_true(plan_lower_costs(&c, &pr));
                check_program(&pr);
                for (int s = 0; s < p; s++) {
                    /* in flight as the formulas state */
                    assert_close(plan_program_in_flight(&pr, s),
                                 plan_in_flight(scheds[si], p, s, m, v), 0, 1e-12);
                    /* ZeRO-1: one reduction per chunk, then the step */
                    const PlanStageProgram *sp = &pr.stages[s];
                    int red = 0;
                    for (int i = 0; i < sp->n_ops; i++) red += sp->ops[i].kind == OP_REDUCE_GRADS;
                    assert_int_equal(red, v);
                    assert_int_equal(sp->ops[sp->n_ops - 1].kind, OP_OPT_STEP);
                }
                PlanSimResult r;
                assert_true(plan_simulate(&pr, &r));
                plan_sim_free(&r);
                plan_program_free(&pr);
                plan_op_costs_free(&c);
            }
}

/* The pipeline's transfer buffers (issue 25): memory.c's count per stage
 * (plan_pipe_xfer_bufs) against the walk of the Program the code
 * generator emits (plan_pipe_xfer_peak: runtime/par/pipe.c's buffers,
 * made by a forward, a backward or a receive and freed once sent; the
 * --dry-run frees them where the walk does, tests/mem's x check) over
 * every schedule, pp, chunks, micro-batches, ZeRO stage, dp and tp:
 * never below, and equal where no op posts the queued sends between a
 * stage's transfers (ZeRO-3's gathers, ZeRO-2's reductions over dp > 1
 * can leave one fewer alive). */
static void test_pipe_xfer_bufs(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(64)];
    int scheds[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1 };
    int runs = 0, bad = 0;
    for (int si = 0; si < 4; si++)
        for (int pp = 1; pp <= 16; pp *= 2)
            for (int v = 1; v <= (scheds[si] == SCHED_INTERLEAVED ? 3 : 1); v++)
                for (int mm = 1; mm <= 3; mm++)
                    for (int zero = 0; zero <= 3; zero++)
                        for (int dp = 1; dp <= 2; dp++)
                            for (int tp = 1; tp <= 8; tp *= 2) {
                                int n = dp * tp * pp;
                                if ((scheds[si] == SCHED_INTERLEAVED && (v < 2 || pp < 2)) || n % 8 || n > 64 ||
                                    (pp == 16 && (v > 2 || mm > 2)))
                                    continue;
                                int64_t m = scheds[si] == SCHED_INTERLEAVED ? pp * mm : 2 * mm + (mm & 1);
                                Plan p = gpt_plan(buf, 64, 1024, 16, n / 8, dp, tp, pp, zero, 1, dp * m,
                                                  scheds[si], v, RECOMPUTE_NONE, 0);
                                PlanProgram pr;
                                char why[256];
                                bool ok = plan_lower(&p, &pr, why, sizeof why);
                                if (!ok) print_message("lower: %s\n", why);
                                assert_true(ok);
                                runs++;
                                for (int s = 0; s < pp; s++) {
                                    int w = plan_pipe_xfer_peak(&pr.stages[s], pp, v, m);
                                    double c = plan_pipe_xfer_bufs(scheds[si], pp, s, m, v, zero, dp);
                                    bool posts = zero >= 3 || (zero >= 2 && dp > 1);
                                    if (w > c || (!posts && w != c)) {
                                        if (bad++ < 8)
                                            print_message("sched %d pp %d v %d m %lld zero %d dp %d tp %d stage %d: "
                                                          "the program holds %d, memory.c counts %g\n", scheds[si],
                                                          pp, v, (long long)m, zero, dp, tp, s, w, c);
                                    }
                                }
                                plan_program_free(&pr);
                            }
    assert_true(runs > 200);
    assert_int_equal(bad, 0);
}

/* Narayanan et al. 2021's 1T row (GPT 1008B: tp 8, pp 64, full
 * recomputation, micro-batch 1, global batch 3072 on 3072 A100 80 GB)
 * under the interleaved schedule (2 chunks) fits, as Megatron trained it,
 * now that no stage keeps a send and a receive buffer for each of its ~95
 * micro-batches in flight (before: buffers 37 GiB, 99.5 GiB of 80). */
static void test_1t_interleaved_fits(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(128)];
    Plan p = gpt_plan(buf, 128, 25600, 160, 384, 6, 8, 64, 0, 1, 3072, SCHED_INTERLEAVED, 2, RECOMPUTE_FULL, 0);
    PlanEval ev;
    plan_evaluate(&p, &ev);
    assert_true(ev.valid);
    if (!ev.feasible) print_message("%s\n", ev.why);
    assert_true(ev.feasible);
    for (int s = 0; s < 64; s++) {
        const PlanStageMem *m = &ev.stages[s];
        if (s == 0) print_message("stage 0: %.2f GiB of %.2f, buffers %.2f GiB, %.1f in flight\n",
                                  m->total_bytes / 1073741824.0, m->capacity / 1073741824.0,
                                  m->buffers_bytes / 1073741824.0, m->in_flight);
        assert_true(m->headroom > 0);
        /* two or three activations (2048 x 25600 fp16: 100 MiB) and the early buffer,
         * not 2 x ~190 of them */
        assert_true(m->buffers_bytes < (uint64_t)4 * 2048 * 25600 * 2 + (2ull << 30));
    }
    assert_true(ev.stages[0].in_flight > 90);   /* 2 (p - 1) + p + 1 chunk forwards of 2 */
    /* and the program holds what memory.c counts, stage by stage (2 each) */
    PlanProgram pr;
    char why[256];
    assert_true(plan_lower(&p, &pr, why, sizeof why));
    for (int s = 0; s < 64; s++)
        assert_int_equal(plan_pipe_xfer_peak(&pr.stages[s], 64, 2, ev.n_micro),
                         (int)plan_pipe_xfer_bufs(SCHED_INTERLEAVED, 64, s, ev.n_micro, 2, 0, 6));
    plan_program_free(&pr);
    plan_eval_free(&ev);
}

/* The order in which stage s posts its receives from each peer is the
 * list's order (so they match the peer's sends, NCCL having no tags):
 * post points never go backwards, and an early one comes after the op
 * that posts it. Returns the number of receives posted early. */
static int check_recv_order(const PlanProgram *pr, int s)
{
    const PlanStageProgram *sp = &pr->stages[s];
    int early = 0;
    for (int peer = 0; peer < pr->pp; peer++) {
        int last = -1;
        for (int i = 0; i < sp->n_ops; i++) {
            const PlanOp *o = &sp->ops[i];
            if ((o->kind != OP_RECV_ACT && o->kind != OP_RECV_GRAD) || o->peer != peer) continue;
            int at = o->prepost ? o->prepost - 1 : i;
            if (o->prepost) { assert_true(at < i); early++; }
            assert_true(at >= last);
            last = at;
        }
    }
    return early;
}

/* NCCL's rules (p2p_order.c): every schedule's Program, with or without
 * collectives inside its compute ops (tp > 1), lowers to transfers that
 * end; GPipe and 1F1B need no receive posted early (the runtime's groups
 * of adjacent transfers are enough), the interleaved schedule on two
 * stages does (the deadlock PLANRT_P2P=rendezvous found), and every early
 * receive keeps the list's order. */
static void test_p2p_order_schedules(void **state)
{
    (void)state;
    int scheds[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_INTERLEAVED, SCHED_INTERLEAVED,
                     SCHED_ZB_H1 };
    int vs[] = { 1, 1, 2, 3, 4, 1 };
    int runs = 0;
    for (int si = 0; si < 6; si++)
        for (int p = 2; p <= 8; p *= 2)
            for (int m = p; m <= 4 * p; m += p)
                for (int tp = 1; tp <= 2; tp++) {
                    PlanOpCosts c;
                    PlanProgram pr;
                    char why[512] = "";
                    assert_true(synthetic(&c, p, vs[si], m, scheds[si], 1, 1, 2, 1));
                    assert_true(plan_lower_costs(&c, &pr));
                    pr.tp = tp;
                    bool ok = plan_program_p2p_order(&pr, why, sizeof why);
                    if (!ok) print_message("sched %d v %d p %d m %d tp %d: %s\n", scheds[si], vs[si], p, m, tp, why);
                    assert_true(ok);
                    int early = 0;
                    for (int s = 0; s < p; s++) {
                        early += check_recv_order(&pr, s);
                        /* only the interleaved schedule posts an activation's receive
                         * early (into the pipe's buffer, memory.c counts it) */
                        const PlanStageProgram *sp = &pr.stages[s];
                        for (int i = 0; i < sp->n_ops; i++)
                            if (sp->ops[i].kind == OP_RECV_ACT && sp->ops[i].prepost)
                                assert_int_equal(plan_pipe_early_recvs(scheds[si], p), 1);
                    }
                    assert_int_equal(early, plan_program_preposts(&pr));
                    if (scheds[si] == SCHED_GPIPE || scheds[si] == SCHED_1F1B) assert_int_equal(early, 0);
                    if (scheds[si] == SCHED_INTERLEAVED && p == 2 && vs[si] == 2 && m == 4)
                        assert_true(early > 0);
                    runs++;
                    plan_program_free(&pr);
                    plan_op_costs_free(&c);
                }
    assert_true(runs == 6 * 3 * 4 * 2);
}

/* Hand-made lists: both stages send, compute, then receive what the
 * other sent (the old pipeline order) — fixed by posting a receive early;
 * both stages receive before they send (a real deadlock of the data) —
 * refused, naming the waiting transfers. */
static void test_p2p_order_hand(void **state)
{
    (void)state;
    PlanOp ops[2][3];
    PlanStageProgram st[2];
    memset(ops, 0, sizeof ops);
    for (int s = 0; s < 2; s++) {
        ops[s][0] = (PlanOp){ .kind = s ? OP_SEND_GRAD : OP_SEND_ACT, .mb = 0, .peer = 1 - s };
        ops[s][1] = (PlanOp){ .kind = OP_FWD, .mb = 1, .peer = -1 };
        ops[s][2] = (PlanOp){ .kind = s ? OP_RECV_ACT : OP_RECV_GRAD, .mb = 0, .peer = 1 - s };
        st[s] = (PlanStageProgram){ .stage = s, .n_ops = 3, .cap = 3, .ops = ops[s] };
    }
    PlanProgram pr = { .pp = 2, .dp = 1, .tp = 1, .chunks = 1, .n_micro = 2, .stages = st };
    char why[512] = "";
    assert_true(plan_program_p2p_order(&pr, why, sizeof why));
    assert_int_equal(plan_program_preposts(&pr), 1);
    for (int s = 0; s < 2; s++) check_recv_order(&pr, s);

    for (int s = 0; s < 2; s++) {   /* receive first on both sides */
        ops[s][0] = (PlanOp){ .kind = s ? OP_RECV_ACT : OP_RECV_GRAD, .mb = 0, .peer = 1 - s };
        ops[s][1] = (PlanOp){ .kind = OP_FWD, .mb = 1, .peer = -1 };
        ops[s][2] = (PlanOp){ .kind = s ? OP_SEND_GRAD : OP_SEND_ACT, .mb = 0, .peer = 1 - s };
    }
    assert_false(plan_program_p2p_order(&pr, why, sizeof why));
    assert_non_null(strstr(why, "deadlock under NCCL's rules"));
    assert_non_null(strstr(why, "stage 0 waits in RECV_GRAD mb 0 chunk 0 from stage 1"));

    ops[1][2].kind = OP_FWD;          /* a send with no receive */
    assert_false(plan_program_p2p_order(&pr, why, sizeof why));
    assert_non_null(strstr(why, "no partner"));
}

/* Bubble of the simulated Program equals the closed forms, many layouts. */
static void test_bubble_sim_vs_closed(void **state)
{
    (void)state;
    int checked = 0;
    for (int p = 1; p <= 16; p *= 2)
        for (int m = p; m <= 8 * p; m += p) {
            int scheds[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_INTERLEAVED };
            int vs[] = { 1, 1, 2, 4 };
            for (int i = 0; i < 4; i++) {
                if (vs[i] > 1 && p == 1) continue;
                PlanOpCosts c;
                PlanProgram pr;
                PlanSimResult r;
                assert_true(synthetic(&c, p, vs[i], m, scheds[i], 0, 1.0, 2.0, 1.0));
                assert_true(plan_lower_costs(&c, &pr));
                assert_true(plan_simulate(&pr, &r));
                double want = plan_bubble_closed_form(scheds[i], p, m, vs[i], 1, 1, 1);
                assert_close(r.bubble_fraction, want, 1e-9, 1e-9);
                assert_close(r.step_time, 3.0 * m * (1 + want), 1e-9, 1e-9);
                checked++;
                plan_sim_free(&r);
                plan_program_free(&pr);
                plan_op_costs_free(&c);
            }
        }
    assert_true(checked > 50);
}

/* ZB-H1: smaller bubble than 1F1B, same activation memory. */
static void test_zb_h1(void **state)
{
    (void)state;
    for (int p = 2; p <= 8; p *= 2)
        for (int m = p; m <= 4 * p; m += p) {
            double bub[2];
            int sch[2] = { SCHED_1F1B, SCHED_ZB_H1 };
            for (int i = 0; i < 2; i++) {
                PlanOpCosts c;
                PlanProgram pr;
                PlanSimResult r;
                assert_true(synthetic(&c, p, 1, m, sch[i], 0, 1.0, 2.0, 1.0));
                assert_true(plan_lower_costs(&c, &pr));
                assert_true(plan_simulate(&pr, &r));
                bub[i] = r.bubble_fraction;
                for (int s = 0; s < p; s++)   /* 1F1B's peak memory */
                    assert_true(plan_program_in_flight(&pr, s) <= p);
                plan_sim_free(&r);
                plan_program_free(&pr);
                plan_op_costs_free(&c);
            }
            print_message("zb-h1 p %d m %d: bubble %.4f (1f1b %.4f, paper %.4f)\n", p, m, bub[1], bub[0],
                          plan_bubble_closed_form(SCHED_ZB_H1, p, m, 1, 1, 1, 1));
            assert_true(bub[1] < bub[0]);
            /* the paper's (p-1)(F+B-W) bubble */
            assert_close(bub[1], plan_bubble_closed_form(SCHED_ZB_H1, p, m, 1, 1, 1, 1), 1e-9, 1e-9);
        }
}

/* A RECV waits for its SEND: a stage's forward cannot start before the
 * previous stage's forward and the transfer. */
static void test_p2p_wait(void **state)
{
    (void)state;
    PlanOpCosts c;
    PlanProgram pr;
    PlanSimResult r;
    assert_true(synthetic(&c, 2, 1, 1, SCHED_1F1B, 0, 1.0, 2.0, 1.0));
    c.p2p[0] = c.p2p[1] = 0.25;
    assert_true(plan_lower_costs(&c, &pr));
    assert_true(plan_simulate(&pr, &r));
    /* F0 [0, 1], send .25, F1 [1.25, 2.25], B1 [2.25, 4.25], send .25, B0 [4.5, 6.5] */
    assert_close(r.step_time, 6.5, 1e-12, 0);
    plan_sim_free(&r);
    plan_program_free(&pr);
    plan_op_costs_free(&c);
}

/* Bucketed DP reduction overlaps the last backward; ZeRO-3 gathers feed
 * the compute layer by layer with overlap_param_gather (prefetch), and
 * without it (planc's runtime) the compute waits for the whole gather. */
static void test_overlap(void **state)
{
    (void)state;
    PlanOpCosts c;
    PlanProgram pr;
    PlanSimResult r;
    assert_true(synthetic(&c, 1, 1, 2, SCHED_1F1B, 0, 1.0, 2.0, 1.0));
    c.layers[0] = 4;
    c.reduce[0] = 1.0;                    /* 4 buckets of .25, one per .5 of backward */
    assert_true(plan_lower_costs(&c, &pr));
    assert_true(plan_simulate(&pr, &r));
    assert_close(r.step_time, 6.0 + 0.25, 1e-12, 0);   /* only the last bucket shows */
    plan_sim_free(&r);
    plan_program_free(&pr);
    plan_op_costs_free(&c);

    assert_true(synthetic(&c, 1, 1, 1, SCHED_1F1B, 3, 1.0, 2.0, 1.0));
    c.layers[0] = 4;
    c.gather[0] = 2.0;                    /* 4 pieces of .5 vs layers of .25 (fwd) */
    for (int prefetch = 0; prefetch <= 1; prefetch++) {
        c.param_overlap = prefetch;
        assert_true(plan_lower_costs(&c, &pr));
        assert_true(plan_simulate(&pr, &r));
        /* prefetch: forward ends at 2 + .25; backward's gather runs
         * [2.25, 4.25], its last layer (.5) after: 4.75. None: gather
         * [0, 2], forward [2, 3], gather [3, 5], backward [5, 7]. */
        assert_close(r.step_time, prefetch ? 4.75 : 7.0, 1e-12, 0);
        plan_sim_free(&r);
        plan_program_free(&pr);
    }
    plan_op_costs_free(&c);
}

/* The fast path gives the very doubles of lowering + simulation on real plans. */
static void test_closed_form_vs_sim_real(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(32)];
    int scheds[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1 };
    int n = 0;
    double worst = 0;
    for (int si = 0; si < 4; si++)
        for (int pp = 1; pp <= 8; pp *= 2)
            for (int tp = 1; tp <= 4; tp *= 2)
                for (int z = 0; z <= 3; z++)
                    for (int rc = 0; rc < 3; rc++) {
                        int v = scheds[si] == SCHED_INTERLEAVED && pp > 1 ? 2 : 1;
                        int sch = scheds[si] == SCHED_INTERLEAVED && pp == 1 ? SCHED_1F1B : scheds[si];
                        int dp = 64 / (pp * tp);
                        Model m;
                        plan_preset_llama(&m, buf, "l", 32, 4096, 32, 8, 14336, 4096, 128256,
                                          DTYPE_BF16);
                        Plan p = plan_preset_plan(m, plan_preset_dgx_h100(8), dp, tp, pp, z, 1,
                                                  (int64_t)dp * 4 * pp, sch, v, rc, tp > 1);
                        PlanEval ev;
                        PlanProgram pr;
                        PlanSimResult r;
                        char why[256];
                        plan_evaluate(&p, &ev);
                        assert_true(ev.valid);
                        assert_true(plan_lower(&p, &pr, why, sizeof why));
                        assert_true(plan_simulate(&pr, &r));
                        double err = fabs(ev.step_time - r.step_time) / r.step_time;
                        if (err > worst) worst = err;
                        if (ev.step_time != r.step_time || ev.bubble_fraction != r.bubble_fraction)
                            print_message("sched %d pp %d tp %d zero %d rec %d: fast %.17g sim %.17g\n",
                                          sch, pp, tp, z, rc, ev.step_time, r.step_time);
                        assert_true(ev.step_time == r.step_time);
                        assert_true(ev.bubble_fraction == r.bubble_fraction);
                        n++;
                        plan_sim_free(&r);
                        plan_program_free(&pr);
                        plan_eval_free(&ev);
                    }
    print_message("fast path vs simulator: %d layouts, worst %.3g %%\n", n, 100 * worst);
}


/* The fast path's FLOPs (from per-GPU chunk costs) equal the model's
 * Megatron count; MFU and HFU differ by the recomputed share. */
static void test_eval_flops(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(24)];
    int recs[] = { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL };
    for (int i = 0; i < 3; i++) {
        Plan p = gpt_plan(buf, 24, 2304, 24, 4, 4, 4, 2, 1, 2, 64, SCHED_1F1B, 1, recs[i], 1);
        PlanEval ev;
        plan_evaluate(&p, &ev);
        assert_true(ev.valid);
        assert_close(ev.model_flops, plan_model_flops_step(&p.model, 64), 0, 1e-9);
        assert_close(ev.hw_flops - ev.model_flops,
                     plan_recompute_flops_step(&p.model, 64, recs[i]), 1, 1e-9);
        assert_close(ev.hfu / ev.mfu, ev.hw_flops / ev.model_flops, 0, 1e-12);
        assert_close(ev.tokens_per_s, 64.0 * 2048 / ev.step_time, 0, 1e-12);
        plan_eval_free(&ev);
    }
}

/* When each item peaks (plan_memory_peaks): activations at the forward
 * that makes the stage's in-flight count (memory.c's plan_in_flight) of
 * live micro-batches, the first op at which that many are alive; the
 * buffers of ZeRO-3 from the first gather, of pp > 1 from the first
 * transfer; weights, gradients and state all step. */
static void test_memory_peaks(void **state)
{
    (void)state;
    static const struct { int pp, zero, sched; int64_t m; } T[] = {
        { 4, 0, SCHED_GPIPE, 8 }, { 4, 1, SCHED_1F1B, 8 }, { 4, 3, SCHED_1F1B, 2 },
        { 2, 2, SCHED_GPIPE, 4 }, { 1, 3, SCHED_1F1B, 4 },
    };
    for (size_t t = 0; t < sizeof T / sizeof T[0]; t++) {
        Layer buf[PLAN_PRESET_LAYERS(8)];
        int dp = 8 / T[t].pp;   /* one DGX A100 node */
        Plan p = gpt_plan(buf, 8, 1024, 16, 1, dp, 1, T[t].pp, T[t].zero, 1, dp * T[t].m, T[t].sched, 1,
                          RECOMPUTE_NONE, 0);
        PlanProgram pr;
        char why[256];
        if (!plan_lower(&p, &pr, why, sizeof why)) fail_msg("row %zu: %s", t, why);
        for (int s = 0; s < pr.pp; s++) {
            const PlanStageProgram *sp = &pr.stages[s];
            int at[PLAN_MEM_KINDS], live = 0;
            plan_memory_peaks(sp, T[t].zero, at);
            assert_true(at[PLAN_MEM_PARAMS] < 0 && at[PLAN_MEM_GRADS] < 0 && at[PLAN_MEM_OPTIMIZER] < 0);
            int a = at[PLAN_MEM_ACTIVATIONS];
            assert_true(a >= 0 && sp->ops[a].kind == OP_FWD);
            for (int i = 0; i <= a; i++)
                live += sp->ops[i].kind == OP_FWD ? 1 : sp->ops[i].kind == OP_BWD ? -1 : 0;
            double want = plan_in_flight(T[t].sched, T[t].pp, s, T[t].m, 1);
            if (live != (int)want) fail_msg("row %zu stage %d: %d alive at the peak, want %g", t, s, live, want);
            int b = at[PLAN_MEM_BUFFERS];
            PlanOpKind k = b >= 0 ? sp->ops[b].kind : OP_FWD;
            if (T[t].pp == 1 && T[t].zero < 2) assert_int_equal(b, -1);
            else if (T[t].pp == 1 && T[t].zero == 3) assert_true(k == OP_BWD);   /* after the first gather */
            else if (T[t].zero < 2) assert_true(k == OP_SEND_ACT || k == OP_RECV_ACT);
            else assert_true(k == OP_BWD || k == OP_GATHER_PARAMS || k == OP_SEND_ACT || k == OP_RECV_ACT);
        }
        plan_program_free(&pr);
    }
}

/* The timeline: on each stage the compute ops run in list order without
 * overlapping; every op has end >= start; an uneven interleaved split
 * lowers and simulates. */
static void test_timeline(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(10)];
    Plan p = gpt_plan(buf, 10, 1024, 16, 1, 2, 1, 4, 1, 1, 16, SCHED_INTERLEAVED, 2,
                      RECOMPUTE_NONE, 0);
    PlanProgram pr;
    PlanSimResult r;
    char why[256];
    assert_true(plan_lower(&p, &pr, why, sizeof why));
    assert_true(plan_simulate(&pr, &r));
    check_program(&pr);
    for (int s = 0; s < pr.pp; s++) {
        double t = 0;
        for (int i = 0; i < pr.stages[s].n_ops; i++) {
            const PlanOp *o = &pr.stages[s].ops[i];
            assert_true(r.span[s][i].end >= r.span[s][i].start);
            assert_true(o->end_layer > o->first_layer || o->chunk < 0);
            if (o->stream == STREAM_COMPUTE) {
                assert_true(r.span[s][i].start >= t - 1e-15);
                t = r.span[s][i].end;
            }
        }
    }
    /* 10 blocks over 8 chunks: virtual stages 1 and 2 carry two blocks
     * (4 layers), the others one; virtual stage 1 is stage 1's chunk 0 */
    for (int s = 0; s < pr.pp; s++)
        for (int i = 0; i < pr.stages[s].n_ops; i++) {
            const PlanOp *o = &pr.stages[s].ops[i];
            if (o->kind != OP_FWD || o->vstage == 0 || o->vstage == 7) continue;
            assert_int_equal(o->end_layer - o->first_layer, o->vstage <= 2 ? 4 : 2);
        }
    plan_sim_free(&r);
    plan_program_free(&pr);
}


/* Per-stage parameters: stage 0 holds the embedding, the last stage the
 * final norm and a copy of the tied word table (Megatron); blocks split
 * by TP; totals add up to the model when pp = tp = 1. */
static void test_stage_params(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)];
    const uint64_t h = 1024, V = 51200, s = 2048, t = 2;
    Plan p = gpt_plan(buf, 8, (int64_t)h, 16, 1, 2, (int)t, 2, 0, 1, 8, SCHED_1F1B, 1,
                      RECOMPUTE_NONE, 0);
    PlanEval ev;
    plan_evaluate(&p, &ev);
    assert_true(ev.valid);
    /* a block per TP rank: QKV (3h^2 + 3h)/t, out h^2/t + h, MLP (8h^2 + 4h)/t + h, 2 norms 4h */
    uint64_t block = (3 * h * h + 3 * h) / t + h * h / t + h + (8 * h * h + 4 * h) / t + h + 4 * h;
    assert_int_equal(ev.stages[0].params, V * h / t + s * h + 4 * block);
    assert_int_equal(ev.stages[1].params, 4 * block + 2 * h + V * h / t);
    plan_eval_free(&ev);
}

/* Hierarchical all-gather and reduce-scatter by hand; sequence
 * parallelism trades each all-reduce for an all-gather + reduce-scatter. */
static void test_comm_hier_and_sp(void **state)
{
    (void)state;
    Cluster c = plan_preset_dgx_h100(4);
    c.device.sms = 0;   /* by hand: the MPI path's alpha-beta model */
    double M = 4e8, ai = 2e-6, ae = 5e-6;
    double bi = 450e9 * PLAN_LINK_EFF_INTRA, be = 50e9 * PLAN_LINK_EFF_INTER;
    PlanGroup g = { 16, 4, 4, 1 };
    double want = 3 * ai + 3.0 / 4 * M / bi + 3 * ae + 3.0 / 4 * (M / 4) / be;
    assert_close(plan_comm_cost(&c, COLL_ALL_GATHER, ALGO_HIER, g, M).time, want, 0, 1e-12);
    assert_close(plan_comm_cost(&c, COLL_REDUCE_SCATTER, ALGO_HIER, g, M).time, want, 0, 1e-12);
    assert_close(plan_comm_cost(&c, COLL_BROADCAST, ALGO_RING, (PlanGroup){ 8, 8, 1, 1 }, M).time,
                 7 * ai + M / bi, 0, 1e-12);

    Layer buf[PLAN_PRESET_LAYERS(2)];
    Model m;
    plan_preset_llama(&m, buf, "l", 2, 4096, 32, 8, 14336, 4096, 32000, DTYPE_BF16);
    PlanCut a = { 1, 4, false, RECOMPUTE_NONE, 1, false, false, false, false, false, 0, 0, 1, 1, 0, 0 },
            b = { 1, 4, true, RECOMPUTE_NONE, 1, false, false, false, false, false, 0, 0, 1, 1, 0, 0 };
    PlanLayerWork wa, wb;
    plan_layer_work(&m, &m.layers[1], &m.layers[0], &a, &wa);
    plan_layer_work(&m, &m.layers[1], &m.layers[0], &b, &wb);
    assert_int_equal(wa.tp_fwd.ar, 1); assert_int_equal(wa.tp_fwd.ag + wa.tp_fwd.rs, 0);
    assert_int_equal(wb.tp_fwd.ar, 0); assert_int_equal(wb.tp_fwd.ag, 1); assert_int_equal(wb.tp_fwd.rs, 1);
    assert_close(wa.tp_bytes, 2.0 * 4096 * 4096, 0, 0);
    assert_true(wb.act_kept < wa.act_kept);
    /* GQA: K and V of width kv*d = 1024 instead of 4096 */
    assert_close(wa.flops_fwd - wa.flops_core,
                 2.0 * 4096 * 4096 * (4096 + 2 * 1024) / 4 + 2.0 * 4096 * 4096 * 4096 / 4, 0, 1e-12);
}


/* Random layouts (fixed seed): GPT and Llama models of 2-40 blocks (most
 * splits uneven), every schedule, ZeRO 0-3, every recomputation, tp and
 * pp 1-8 and interleaving with 2-4 chunks, m from 1 (m < p) to 16 p,
 * a quarter with the reductions after the flush or blocking sends, tied
 * heads (GPT) and sequence parallelism, so the tails hold all three
 * step-level collectives. For each, the fast path (plan_simulate_costs,
 * and check's plan_evaluate through it) must give exactly the doubles of
 * lowering + simulation (step time, bubble, the critical stage and its
 * whole breakdown, bit for bit), the search's bound
 * (plan_pipeline_time) must not exceed it, and in-flight micro-batches
 * must stay within the memory model's counts. Prints the worst case. */
static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

/* Whether the fast path's figures are bit for bit the simulated Program's. */
static bool same_sim(const PlanSimSummary *a, const PlanSimResult *r)
{
    PlanStageTimes t = r->times[r->critical];
    return a->step_time == r->step_time && a->pipeline_time == r->pipeline_time &&
           a->busy_max == r->busy_max && a->bubble == r->bubble &&
           a->bubble_fraction == r->bubble_fraction && a->critical == r->critical &&
           !memcmp(&a->times, &t, sizeof t);
}

/* Whether two cost tables are the same to the bit, printing the first
 * field that differs. */
static bool same_costs(const PlanCosts *a, const PlanCosts *b, const char *what)
{
    if (a->n_chunks != b->n_chunks || a->params_total != b->params_total || a->norm != b->norm) {
        print_error("%s: chunks %d / %d, params %llu / %llu\n", what, a->n_chunks, b->n_chunks,
                    (unsigned long long)a->params_total, (unsigned long long)b->params_total);
        return false;
    }
    for (int k = 0; k < a->n_chunks; k++)
        if (memcmp(&a->cost[k], &b->cost[k], sizeof a->cost[k]) ||
            memcmp(&a->chunk[k], &b->chunk[k], sizeof a->chunk[k])) {
            print_error("%s: chunk %d: fwd %.17g / %.17g, bwd %.17g / %.17g, act %.17g / %.17g\n", what, k,
                        a->cost[k].fwd, b->cost[k].fwd, a->cost[k].bwd, b->cost[k].bwd, a->cost[k].act_kept,
                        b->cost[k].act_kept);
            return false;
        }
    int pp = a->layout.pp;
    for (int s = 0; s < pp; s++)
        if (a->opt[s] != b->opt[s] || a->opt_params[s] != b->opt_params[s] || a->sp_norm[s] != b->sp_norm[s] ||
            a->sp_norm_bytes[s] != b->sp_norm_bytes[s] || a->embed[s] != b->embed[s] ||
            a->embed_bytes[s] != b->embed_bytes[s]) {
            print_error("%s: stage %d's optimizer or step-level collectives differ\n", what, s);
            return false;
        }
    return true;
}

/* Memoised by block shape (issue 13): the cost table through the shape
 * index equals, to the bit, the one costed layer by layer without it
 * (plan_costs_reference), on models of identical blocks and of blocks that
 * differ every other or every third block (MLP width, kv heads), and a
 * chunk of n identical blocks costs exactly n times one of them (what
 * makes a layout O(runs), not O(layers): a sum over the blocks one by one
 * rounds differently). Table: model, blocks, tp, pp, chunks, sp, recompute. */
static void test_shape_memo(void **state)
{
    (void)state;
    enum { GPT, LLAMA, MIXED_MLP, MIXED_KV };
    static const struct { int model, blocks, tp, pp, v, sp, rec; } T[] = {
        { GPT, 96, 1, 4, 1, 0, RECOMPUTE_NONE }, { GPT, 96, 2, 4, 3, 1, RECOMPUTE_SELECTIVE },
        { GPT, 1000, 1, 8, 5, 0, RECOMPUTE_FULL }, { LLAMA, 80, 4, 2, 4, 1, RECOMPUTE_FULL },
        { LLAMA, 81, 1, 4, 2, 0, RECOMPUTE_NONE }, { MIXED_MLP, 90, 2, 3, 2, 1, RECOMPUTE_SELECTIVE },
        { MIXED_MLP, 64, 1, 1, 1, 0, RECOMPUTE_NONE }, { MIXED_KV, 60, 2, 5, 2, 0, RECOMPUTE_FULL },
    };
    Layer *buf = calloc(PLAN_PRESET_LAYERS(1000), sizeof *buf);
    assert_non_null(buf);
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        Model m;
        if (T[i].model == GPT)
            plan_preset_gpt(&m, buf, "g", T[i].blocks, 1024, 16, 2048, 50304, DTYPE_BF16);
        else
            plan_preset_llama(&m, buf, "l", T[i].blocks, 2048, 16, 8, 5632, 2048, 32000, DTYPE_BF16);
        for (int j = 0, b = 0; j < m.n_layers; j++) {      /* the mixed models: every 2nd / 3rd block */
            if (m.layers[j].kind == LAYER_ATTENTION) b++;
            if (T[i].model == MIXED_MLP && m.layers[j].kind == LAYER_MLP && b % 2 == 0) m.layers[j].hidden = 2816;
            if (T[i].model == MIXED_KV && m.layers[j].kind == LAYER_ATTENTION && b % 3 == 0) m.layers[j].kv_heads = 4;
        }
        int dp = 8 / (T[i].tp * T[i].pp) > 0 ? 8 / (T[i].tp * T[i].pp) : 1;
        int64_t micro = 2 * T[i].pp;
        Plan p = plan_preset_plan(m, plan_preset_dgx_h100(2), dp, T[i].tp, T[i].pp, 1, 1, dp * micro,
                                  T[i].v > 1 ? SCHED_INTERLEAVED : SCHED_1F1B, T[i].v, T[i].rec, T[i].sp);
        PlanCosts memo, ref;
        assert_true(plan_costs(&p, &p.layout, &memo));
        assert_true(plan_costs_reference(&p, &p.layout, &ref));
        char what[64];
        snprintf(what, sizeof what, "case %zu", i);
        assert_true(same_costs(&memo, &ref, what));
        PlanChunk *split = calloc((size_t)memo.n_chunks, sizeof *split);
        assert_non_null(split);
        assert_true(plan_split(&p.model, T[i].pp, T[i].v, split));
        assert_memory_equal(split, memo.chunk, (size_t)memo.n_chunks * sizeof *split);
        free(split);
        if (T[i].model == GPT) {
            /* one block per chunk: chunk 1 is one middle block */
            Layout one = p.layout;
            one.pp = T[i].blocks;
            one.chunks = 1;
            PlanCosts blk;
            assert_true(plan_costs(&p, &one, &blk));
            for (int k = 1; k < memo.n_chunks - 1; k++) {
                double n = memo.chunk[k].blocks;
                assert_true(memo.cost[k].fwd == n * blk.cost[1].fwd);
                assert_true(memo.cost[k].bwd == n * blk.cost[1].bwd);
                assert_true(memo.cost[k].act_kept == n * blk.cost[1].act_kept);
                assert_true(memo.cost[k].params == (uint64_t)n * blk.cost[1].params);
            }
            plan_costs_free(&blk);
        }
        plan_costs_free(&memo);
        plan_costs_free(&ref);
    }
    free(buf);
}

/* The bound of the pipeline time must cover one micro-batch's chain of
 * passes: every forward, then every backward (zb-h1: input part), with a
 * transfer at each of the 2(pp v - 1) hops between virtual stages. With
 * thousands of chunks (a 10,000-block model interleaved) those hops are
 * most of the bubble; a bound without them is below every layout's time
 * alike and the search cannot prune. Table: schedule, pp, chunks, m per
 * pp; each also stays within the simulated pipeline time. */
static void test_bound_chain(void **state)
{
    (void)state;
    static const struct { int sched, pp, v, m_per_pp; } T[] = {
        { SCHED_INTERLEAVED, 2, 50, 1 }, { SCHED_INTERLEAVED, 2, 100, 1 },
        { SCHED_INTERLEAVED, 4, 25, 1 }, { SCHED_INTERLEAVED, 2, 40, 3 },
        { SCHED_1F1B, 8, 1, 1 }, { SCHED_ZB_H1, 4, 1, 2 }, { SCHED_GPIPE, 2, 1, 4 },
    };
    enum { BLOCKS = 200 };
    Layer *buf = calloc(PLAN_PRESET_LAYERS(BLOCKS), sizeof *buf);
    assert_non_null(buf);
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        Model m;
        plan_preset_gpt(&m, buf, "g", BLOCKS, 256, 4, 2048, 32000, DTYPE_BF16);
        int pp = T[i].pp, v = T[i].v, dp = 8 / pp;
        int64_t micro = (int64_t)pp * T[i].m_per_pp;
        Plan p = plan_preset_plan(m, plan_preset_dgx_h100(1), dp, 1, pp, 0, 1, dp * micro, T[i].sched, v,
                                  RECOMPUTE_NONE, 0);
        PlanCosts c;
        PlanProgram pr;
        PlanSimResult r;
        char why[256];
        assert_true(plan_costs(&p, &p.layout, &c));
        assert_true(plan_lower(&p, &pr, why, sizeof why));
        assert_true(plan_simulate(&pr, &r));
        double chain = 0;
        int n = pp * v;
        for (int k = 0; k < n; k++)
            chain += c.cost[k].fwd + (T[i].sched == SCHED_ZB_H1 ? c.cost[k].bwd_input : c.cost[k].bwd) +
                     (k < n - 1 ? c.cost[k].p2p : 0) + (k > 0 ? c.cost[k].p2p : 0);
        double b = plan_pipeline_time(&c);
        if (b < chain * (1 - 1e-12) || b > r.pipeline_time * (1 + 1e-9))
            print_error("sched %d pp %d v %d m %lld: bound %.9g s, chain %.9g s, simulated %.9g s\n",
                        T[i].sched, pp, v, (long long)micro, b, chain, r.pipeline_time);
        assert_true(b >= chain * (1 - 1e-12));
        assert_true(b <= r.pipeline_time * (1 + 1e-9));   /* rounding of another order */
        plan_sim_free(&r);
        plan_program_free(&pr);
        plan_costs_free(&c);
    }
    free(buf);
}

static void test_random_layouts(void **state)
{
    (void)state;
    enum { N = 3000 };
    Layer *buf = calloc(PLAN_PRESET_LAYERS(40), sizeof *buf);
    uint64_t x = 42;
    int n = 0, by_sched[4] = { 0 }, by_zero[4] = { 0 }, few = 0, many = 0, uneven = 0;
    int tied = 0, sp_norm = 0, differ = 0, moe = 0, ep_ops = 0;
    double bound_over = 0;
    while (n < N) {
        Model m;
        int blocks = 2 + (int)(lcg(&x) % 39);
        bool gpt = lcg(&x) % 2;
        if (gpt)
            plan_preset_gpt(&m, buf, "g", blocks, 1024 * (1 + (int64_t)(lcg(&x) % 4)), 16,
                            1024 << (lcg(&x) % 3), 50304, lcg(&x) % 3 ? DTYPE_BF16 : DTYPE_FP32);
        else
            plan_preset_llama(&m, buf, "l", blocks, 2048 * (1 + (int64_t)(lcg(&x) % 2)), 16, 8,
                              5632 * (1 + (int64_t)(lcg(&x) % 2)), 2048, 32000, DTYPE_BF16);
        int nodes = 1 << (lcg(&x) % 4), gpus = nodes * 8;
        int tp = 1 << (lcg(&x) % 4), pp = 1 << (lcg(&x) % 4);
        if (tp * pp > gpus || pp > blocks) continue;
        int dp = gpus / (tp * pp), sch = (int)(lcg(&x) % 4);
        int v = sch == SCHED_INTERLEAVED ? 2 + (int)(lcg(&x) % 3) : 1;
        if (sch == SCHED_INTERLEAVED && (pp == 1 || pp * v > blocks)) continue;
        int64_t mb = 1 << (lcg(&x) % 2);
        int64_t micro = lcg(&x) % 3 == 0 ? 1 + (int64_t)(lcg(&x) % pp)           /* m <= p */
                                          : 1 + (int64_t)(lcg(&x) % (16 * pp));  /* up to 16 p */
        if (sch == SCHED_INTERLEAVED) micro = pp * (1 + (int64_t)(lcg(&x) % 8));
        Cluster c = lcg(&x) % 2 ? plan_preset_dgx_a100(nodes) : plan_preset_dgx_h100(nodes);
        int zero = (int)(lcg(&x) % 4), rec = (int)(lcg(&x) % 3), sp = tp > 1 ? (int)(lcg(&x) % 2) : 0;
        /* a third of the Llama models are mixtures (issue 17), with ep
         * from what was drawn (no draw of its own: the other layouts stay) */
        bool mixture = !gpt && blocks % 3 == 0;
        if (mixture) moeify(&m, 8, 2, blocks % 2, 5632);
        Plan p = plan_preset_plan(m, c, dp, tp, pp, zero, mb, dp * mb * micro, sch, v, rec, sp);
        if (mixture) p.layout.ep = dp < 8 ? dp : 1 << (blocks % 4);
        p.software.overlap_grad_reduce = lcg(&x) % 4 != 0;   /* Megatron-2021 software, sometimes */
        p.software.overlap_p2p = lcg(&x) % 4 != 0;
        p.software.overlap_param_gather = lcg(&x) % 4 == 0;
        p.software.overlap_tp = lcg(&x) % 4 == 0;
        PlanEval ev;
        plan_evaluate(&p, &ev);
        if (!ev.valid) { plan_eval_free(&ev); continue; }
        PlanProgram pr;
        PlanSimResult r;
        PlanCosts pc;
        PlanOpCosts oc;
        PlanSimSummary sm;
        char why[256];
        assert_true(plan_lower(&p, &pr, why, sizeof why));
        assert_true(plan_simulate(&pr, &r));
        assert_true(plan_costs(&p, &ev.layout, &pc));
        assert_true(plan_op_costs_alloc(&oc, pp, v));
        plan_op_costs_fill(&pc, &oc);
        assert_true(plan_simulate_costs(&oc, &sm));
        for (int s = 0; s < pp; s++)
            assert_true(plan_program_in_flight(&pr, s) <= ev.stages[s].in_flight + 1e-9);
        if (!same_sim(&sm, &r) || ev.step_time != r.step_time || ev.bubble_fraction != r.bubble_fraction) {
            if (!differ++)
                print_error("sched %d pp %d v %d m %lld tp %d dp %d zero %d rec %d blocks %d: fast path "
                            "%.17g s bubble %.17g, simulated %.17g s bubble %.17g\n", sch, pp, v,
                            (long long)ev.n_micro, tp, dp, zero, rec, blocks, sm.step_time, sm.bubble,
                            r.step_time, r.bubble);
        }
        bound_over = fmax(bound_over, plan_pipeline_time(&pc) / r.pipeline_time - 1);
        for (int s = 0; s < pp; s++) {
            const PlanStageProgram *st = &pr.stages[s];
            for (int i = 0; i < st->n_ops; i++) {
                tied += st->ops[i].kind == OP_EMBED_REDUCE;
                sp_norm += st->ops[i].kind == OP_SP_NORM_REDUCE;
                ep_ops += st->ops[i].ep_dur > 0;
            }
        }
        moe += mixture;
        by_sched[sch]++;
        by_zero[zero]++;
        few += ev.n_micro < pp;
        many += ev.n_micro >= 8 * pp;
        uneven += blocks % (pp * v) != 0;
        n++;
        plan_op_costs_free(&oc);
        plan_costs_free(&pc);
        plan_sim_free(&r);
        plan_program_free(&pr);
        plan_eval_free(&ev);
    }
    print_message("random layouts: %d (gpipe %d, 1f1b %d, interleaved %d, zb-h1 %d; zero 0-3: %d %d %d %d; "
                  "m < p %d, m >= 8p %d, uneven splits %d; ops: %d EMBED_REDUCE, %d SP_NORM_REDUCE)\n", n,
                  by_sched[SCHED_GPIPE], by_sched[SCHED_1F1B], by_sched[SCHED_INTERLEAVED],
                  by_sched[SCHED_ZB_H1], by_zero[0], by_zero[1], by_zero[2], by_zero[3], few, many,
                  uneven, tied, sp_norm);
    print_message("  fast path vs simulator: %d layouts differ; search bound above the simulated "
                  "pipeline by at most %.2e %%\n", differ, 100 * fmax(bound_over, 0));
    print_message("  of which %d mixtures of experts (%d compute ops with EP all-to-alls)\n", moe, ep_ops);
    assert_int_equal(differ, 0);
    assert_true(bound_over <= 1e-9);
    for (int i = 0; i < 4; i++) assert_true(by_sched[i] > N / 10 && by_zero[i] > N / 10);
    assert_true(few > N / 20 && many > N / 20 && uneven > N / 4);
    assert_true(tied > N / 10 && sp_norm > N / 10);
    assert_true(moe > N / 20 && ep_ops > 0);
    free(buf);
}

/* The tied embedding's gradient all-reduce between the first and the last
 * stage: only with pp > 1 and a tied head, V h / t elements over the
 * embedding group, once per step, its own op (not inside the optimizer
 * step any more). */
static void test_tied_embedding_allreduce(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)], lb[PLAN_PRESET_LAYERS(8)];
    for (int pp = 1; pp <= 4; pp *= 2) {
        Plan p = gpt_plan(buf, 8, 1024, 16, 4, 16 / pp, 2, pp, 1, 1, 64, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
        Layout l = plan_layout_defaults(&p);
        PlanCosts c;
        assert_true(plan_costs(&p, &l, &c));
        PlanGroup g = plan_layout_group(&p.cluster, l.dp, l.tp, l.pp, GROUP_EMBED);
        double bytes = 2.0 * 51200 * 1024 / 2;
        double want = pp > 1 ? plan_comm_cost(&p.cluster, COLL_ALL_REDUCE, ALGO_AUTO, g, bytes).time : 0;
        assert_true(pp == 1 || want > 0);
        assert_close(c.embed[0], want, 1e-15, 1e-12);
        assert_close(c.embed[pp - 1], want, 1e-15, 1e-12);
        assert_close(c.embed_bytes[0], pp > 1 ? bytes : 0, 0, 0);
        for (int s = 1; s + 1 < pp; s++) assert_true(c.embed[s] == 0 && c.embed_bytes[s] == 0);
        PlanEval ev;
        plan_evaluate(&p, &ev);
        assert_true(ev.valid);
        /* the breakdown is of the stage that ends last: a first or last one
         * pays the all-reduce, a middle one does not */
        bool end_stage = ev.critical == 0 || ev.critical == pp - 1;
        assert_close(ev.times.embed, end_stage ? want : 0, 1e-15, 1e-12);
        if (pp > 1) {   /* not inside stage 0's optimizer step: untying the head
                           (whose parameters are on the last stage) leaves it */
            PlanCosts d;
            Layer *head = &p.model.layers[p.model.n_layers - 1];
            head->tied = false;
            assert_true(plan_costs(&p, &l, &d));
            head->tied = true;
            assert_true(c.opt[0] == d.opt[0]);
            assert_true(d.embed[0] == 0 && d.embed[pp - 1] == 0);
            plan_costs_free(&d);
        }
        plan_eval_free(&ev);
        plan_costs_free(&c);
        /* an untied head (Llama) has nothing to all-reduce */
        Model m;
        plan_preset_llama(&m, lb, "l", 8, 1024, 16, 8, 2816, 2048, 32000, DTYPE_BF16);
        Plan q = plan_preset_plan(m, plan_preset_dgx_h100(4), 16 / pp, 2, pp, 1, 1, 64, SCHED_1F1B, 1,
                                  RECOMPUTE_NONE, 0);
        l = plan_layout_defaults(&q);
        assert_true(plan_costs(&q, &l, &c));
        for (int s = 0; s < pp; s++) assert_true(c.embed[s] == 0 && c.embed_bytes[s] == 0);
        plan_costs_free(&c);
    }
}

/* The code generator's contract (program.h): after each stage's last
 * compute op (and the sends and reductions that follow it) come
 * SP_NORM_REDUCE (sequence parallel, tp > 1; TP; the stage's norm-weight
 * gradient bytes), EMBED_REDUCE (tied head, pp > 1, first and last stage;
 * the embedding group; V h / t elements), NORM_REDUCE (every stage; all
 * ranks; 4 bytes), OPT_STEP, then SYNC_PARAMS (ZeRO-1/2, dp > 1) — each
 * costed by comm.c on its group's link, for a table of layouts. */
static void test_step_collectives_contract(void **state)
{
    (void)state;
    static const struct { bool gpt; int dp, tp, pp, zero, sched, v, sp; } T[] = {
        { true,  8, 1, 1, 0, SCHED_1F1B, 1, 0 },        { true,  4, 2, 1, 1, SCHED_1F1B, 1, 1 },
        { true,  4, 1, 2, 1, SCHED_1F1B, 1, 0 },        { true,  2, 2, 2, 2, SCHED_GPIPE, 1, 1 },
        { true,  1, 2, 4, 3, SCHED_ZB_H1, 1, 1 },       { true,  2, 1, 4, 1, SCHED_INTERLEAVED, 2, 0 },
        { true,  1, 4, 2, 0, SCHED_INTERLEAVED, 2, 1 }, { false, 2, 2, 2, 1, SCHED_1F1B, 1, 1 },
        { false, 1, 2, 4, 2, SCHED_ZB_H1, 1, 0 },       { true, 16, 2, 2, 1, SCHED_1F1B, 1, 1 },
    };
    Layer buf[PLAN_PRESET_LAYERS(8)];
    const int64_t h = 1024, V = 51200;
    for (size_t t = 0; t < sizeof T / sizeof T[0]; t++) {
        Model m;
        if (T[t].gpt) plan_preset_gpt(&m, buf, "g", 8, h, 16, 2048, V, DTYPE_BF16);
        else plan_preset_llama(&m, buf, "l", 8, h, 16, 8, 2816, 2048, V, DTYPE_BF16);
        int gpus = T[t].dp * T[t].tp * T[t].pp;
        Cluster cl = plan_preset_dgx_a100(gpus > 8 ? gpus / 8 : 1);
        Plan p = plan_preset_plan(m, cl, T[t].dp, T[t].tp, T[t].pp, T[t].zero, 1,
                                  (int64_t)T[t].dp * 4 * T[t].pp, T[t].sched, T[t].v, RECOMPUTE_NONE,
                                  T[t].sp);
        PlanProgram pr;
        char why[256];
        if (!plan_lower(&p, &pr, why, sizeof why)) fail_msg("row %zu: %s", t, why);
        int pp = T[t].pp, tp = T[t].tp, dp = T[t].dp;
        PlanGroup all = plan_layout_group(&cl, dp, tp, pp, GROUP_ALL);
        PlanGroup tpg = plan_layout_group(&cl, dp, tp, pp, GROUP_TP);
        PlanGroup eg = plan_layout_group(&cl, dp, tp, pp, GROUP_EMBED);
        assert_int_equal(all.size, gpus);
        assert_int_equal(eg.size, pp > 1 ? 2 : 1);
        for (int s = 0; s < pp; s++) {
            const PlanStageProgram *sp = &pr.stages[s];
            int last = -1, blocks = 0;
            bool final_norm = false;
            for (int i = 0; i < sp->n_ops; i++) {
                const PlanOp *o = &sp->ops[i];
                if (o->kind == OP_FWD || o->kind == OP_BWD || o->kind == OP_BWD_INPUT ||
                    o->kind == OP_BWD_WEIGHT)
                    last = i;
                if (o->kind == OP_FWD && o->mb == 0)   /* the stage's layers, chunk by chunk */
                    for (int l = o->first_layer; l < o->end_layer; l++) {
                        blocks += p.model.layers[l].kind == LAYER_ATTENTION;
                        final_norm |= p.model.layers[l].kind == LAYER_NORM;
                    }
            }
            int i = last + 1;
            while (i < sp->n_ops && (sp->ops[i].kind == OP_SEND_GRAD || sp->ops[i].kind == OP_SEND_ACT ||
                                     sp->ops[i].kind == OP_REDUCE_GRADS))
                i++;
            PlanOpKind want[5];
            int n = 0;
            bool has_sp = T[t].sp && tp > 1, has_embed = T[t].gpt && pp > 1 && (s == 0 || s == pp - 1);
            if (has_sp) want[n++] = OP_SP_NORM_REDUCE;
            if (has_embed) want[n++] = OP_EMBED_REDUCE;
            want[n++] = OP_NORM_REDUCE;
            want[n++] = OP_OPT_STEP;
            if ((T[t].zero == 1 || T[t].zero == 2) && dp > 1) want[n++] = OP_SYNC_PARAMS;
            if (sp->n_ops - i != n) fail_msg("row %zu stage %d: %d ops after the compute, want %d", t, s,
                                             sp->n_ops - i, n);
            for (int j = 0; j < n; j++) {
                const PlanOp *o = &sp->ops[i + j];
                assert_int_equal(o->kind, want[j]);
                if (o->kind == OP_SP_NORM_REDUCE) {
                    /* GPT: two LayerNorms (gain + bias, 2h) per block, the final one 2h */
                    double bytes = 2.0 * (4 * h * blocks + (final_norm ? 2 * h : 0));
                    assert_int_equal(o->group, GROUP_TP);
                    assert_int_equal(o->coll, COLL_ALL_REDUCE);
                    if (T[t].gpt) assert_true(o->bytes == bytes);
                    assert_true(o->dur == plan_comm_cost(&cl, COLL_ALL_REDUCE, ALGO_AUTO, tpg, o->bytes).time);
                }
                if (o->kind == OP_EMBED_REDUCE) {
                    assert_int_equal(o->group, GROUP_EMBED);
                    assert_int_equal(o->peer, s == 0 ? pp - 1 : 0);
                    assert_true(o->bytes == 2.0 * V * h / tp);
                    assert_true(o->dur == plan_comm_cost(&cl, COLL_ALL_REDUCE, ALGO_AUTO, eg, o->bytes).time);
                    assert_true(o->dur > 0);
                }
                if (o->kind == OP_NORM_REDUCE) {
                    assert_int_equal(o->group, GROUP_ALL);
                    assert_true(o->bytes == 4);
                    assert_true(o->dur == plan_comm_cost(&cl, COLL_ALL_REDUCE, ALGO_AUTO, all, 4).time);
                    assert_true((o->dur > 0) == (gpus > 1));
                }
                assert_int_equal(o->mb, -1);
            }
        }
        plan_program_free(&pr);
    }
}

/* One bubble definition (simulate.h): pp 1 has none (0 s, fraction 0),
 * whatever the network — ZeRO-3 waiting for gathers on a slow link is
 * exposed gather time, not bubble; on uniform stages 1F1B gives
 * Narayanan's (p-1)/m; and everywhere bubble seconds / the critical
 * stage's compute = the fraction, and the breakdown adds up to the step. */
static void test_bubble_definition(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(16)];
    for (int z = 0; z <= 3; z++)
        for (int slow = 0; slow < 2; slow++) {
            Plan p = gpt_plan(buf, 16, 2048, 16, 4, 32, 1, 1, z, 1, 256, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
            if (slow) { p.cluster.inter.bandwidth = 1e8; p.cluster.intra.bandwidth = 1e9; }
            PlanEval ev;
            PlanProgram pr;
            PlanSimResult r;
            char why[256];
            plan_evaluate(&p, &ev);
            assert_true(ev.valid);
            assert_true(plan_lower(&p, &pr, why, sizeof why));
            assert_true(plan_simulate(&pr, &r));
            assert_true(ev.bubble_fraction == 0 && ev.times.bubble == 0);
            assert_true(r.bubble == 0 && r.bubble_fraction == 0);
            if (slow && z == 3) assert_true(ev.times.gather_exposed > ev.times.compute);
            plan_sim_free(&r);
            plan_program_free(&pr);
            plan_eval_free(&ev);
        }
    /* uniform 1F1B: (p-1)/m in seconds and as a fraction */
    for (int pp = 2; pp <= 8; pp *= 2)
        for (int m = pp; m <= 4 * pp; m += pp) {
            PlanOpCosts c;
            PlanSimSummary sm;
            assert_true(synthetic(&c, pp, 1, m, SCHED_1F1B, 0, 1.0, 2.0, 1.0));
            assert_true(plan_simulate_costs(&c, &sm));
            assert_close(sm.bubble_fraction, (pp - 1.0) / m, 0, 1e-12);
            assert_close(sm.bubble, (pp - 1.0) * 3.0, 0, 1e-12);
            plan_op_costs_free(&c);
        }
    /* real layouts, pipelined: seconds and fraction agree, items add up */
    int scheds[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1 };
    for (int si = 0; si < 4; si++)
        for (int pp = 2; pp <= 4; pp *= 2)
            for (int z = 0; z <= 3; z++) {
                int v = scheds[si] == SCHED_INTERLEAVED ? 2 : 1;
                Plan p = gpt_plan(buf, 16, 2048, 16, 2, 16 / (2 * pp), 2, pp, z, 1, 64, scheds[si], v,
                                  RECOMPUTE_SELECTIVE, z % 2);
                /* no contention (a measured factor of 1): the compute the
                 * DP collectives slow is booked in `compute`, not in the
                 * busy time the fraction divides by */
                p.cluster.intra.overlap_compute = p.cluster.inter.overlap_compute = 1;
                PlanEval ev;
                plan_evaluate(&p, &ev);
                assert_true(ev.valid);
                const PlanTimes *t = &ev.times;
                double sum = t->compute + t->tp + t->p2p + t->dp_exposed + t->gather_exposed + t->sp_norm +
                             t->embed + t->norm + t->optimizer + t->sync + t->bubble;
                assert_close(sum, ev.step_time, 0, 1e-9);
                assert_close(t->bubble, ev.bubble_fraction * (t->compute + t->tp), 0, 1e-9);
                assert_true(t->bubble > 0 && t->bubble < ev.step_time);
                plan_eval_free(&ev);
            }
}

/* The two keys that model Megatron-LM 2021 (validation/NAME.plan):
 * overlap_grad_reduce false puts the DP reductions after the flush (each
 * stage's REDUCE_GRADS after its last compute op, draining nothing, one
 * per chunk), overlap_p2p false makes sends blocking (on the compute
 * stream); each only adds time, and the default is neither. */
static void test_megatron_2021_switches(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(16)];
    int scheds[] = { SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1 };
    for (int i = 0; i < 3; i++) {
        int v = scheds[i] == SCHED_INTERLEAVED ? 2 : 1;
        Plan p = gpt_plan(buf, 16, 2048, 16, 4, 4, 2, 4, 1, 1, 64, scheds[i], v, RECOMPUTE_NONE, 0);
        assert_true(p.software.overlap_grad_reduce && p.software.overlap_p2p);
        PlanEval base, late, block;
        plan_evaluate(&p, &base);
        assert_true(base.valid);
        p.software.overlap_grad_reduce = false;
        plan_evaluate(&p, &late);
        PlanProgram pr;
        char why[256];
        assert_true(plan_lower(&p, &pr, why, sizeof why));
        for (int s = 0; s < pr.pp; s++) {
            const PlanStageProgram *sp = &pr.stages[s];
            int last_compute = -1, reduces = 0;
            for (int j = 0; j < sp->n_ops; j++) {
                PlanOpKind k = sp->ops[j].kind;
                if (k == OP_FWD || k == OP_BWD || k == OP_BWD_INPUT || k == OP_BWD_WEIGHT) last_compute = j;
                if (k == OP_REDUCE_GRADS) {
                    assert_true(j > last_compute);
                    assert_int_equal(sp->ops[j].pair, -1);
                    reduces++;
                }
            }
            assert_int_equal(reduces, v);
        }
        plan_program_free(&pr);
        p.software.overlap_grad_reduce = true;
        p.software.overlap_p2p = false;
        plan_evaluate(&p, &block);
        assert_true(plan_lower(&p, &pr, why, sizeof why));
        for (int s = 0; s < pr.pp; s++)
            for (int j = 0; j < pr.stages[s].n_ops; j++)
                if (pr.stages[s].ops[j].kind == OP_SEND_ACT || pr.stages[s].ops[j].kind == OP_SEND_GRAD)
                    assert_int_equal(pr.stages[s].ops[j].stream, STREAM_COMPUTE);
        plan_program_free(&pr);
        assert_true(late.step_time > base.step_time);
        assert_true(block.step_time > base.step_time);
        plan_eval_free(&base); plan_eval_free(&late); plan_eval_free(&block);
    }
}


/* Sum of a chunk table's field over all chunks. */
static double costs_sum(const PlanCosts *c, size_t off)
{
    double t = 0;
    for (int k = 0; k < c->n_chunks; k++) t += *(const double *)((const char *)&c->cost[k] + off);
    return t;
}

/* The cost tables of p's layout l before and after flipping one software
 * key (`knob`, a field of p->software): what the knob-terms tests below
 * compare. The layout is resolved once, so both tables cost the same one. */
static Layout costs_flipped(Plan *p, bool *knob, PlanCosts *before, PlanCosts *after)
{
    Layout l = plan_layout_defaults(p);
    assert_true(plan_costs(p, &l, before));
    *knob = !*knob;
    assert_true(plan_costs(p, &l, after));
    return l;
}

/* overlap_tp changes exactly the TP terms: each layer pass's TP time
 * becomes what outlasts the pass's compute, max(0, tp - compute) — the
 * compute of a 4096-wide block far outlasts its all-reduce on NVLink — and
 * the forward and backward shrink by just the TP time; the DP
 * collectives, the sends and the parameters stay. */
static void test_overlap_tp_terms(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)];
    Plan p = gpt_plan(buf, 8, 4096, 32, 2, 2, 4, 2, 0, 1, 16, SCHED_1F1B, 1, RECOMPUTE_FULL, 0);
    PlanCosts a, b;
    assert_false(p.software.overlap_tp);
    Layout l = costs_flipped(&p, &p.software.overlap_tp, &a, &b);
    double tp_f = costs_sum(&a, offsetof(PlanChunkCost, fwd_tp)), tp_b = costs_sum(&a, offsetof(PlanChunkCost, bwd_tp));
    assert_true(tp_f > 0 && tp_b > 0);
    /* the blocks' all-reduces hide under their GEMMs; what stays exposed
     * is what outlasts a small pass (the vocabulary-parallel embedding's) */
    /* ... plus the slowdown of the GEMMs the collective covers (NCCL's
     * SMs, plan_overlap_compute) */
    double slow = plan_overlap_compute(&p.cluster, plan_layout_group(&p.cluster, l.dp, l.tp, l.pp, GROUP_TP)) - 1;
    assert_true(slow > 0.1 && slow < 0.3);   /* 108 SMs, 16 channels: 0.17 */
    assert_true(costs_sum(&b, offsetof(PlanChunkCost, fwd_tp)) < (slow + 0.2) * tp_f);
    assert_true(costs_sum(&b, offsetof(PlanChunkCost, bwd_tp)) < (slow + 0.2) * tp_b);
    assert_true(costs_sum(&b, offsetof(PlanChunkCost, fwd_tp)) >= slow * tp_f * 0.5);
    for (int k = 0; k < a.n_chunks; k++) {
        /* the compute terms stay: only the TP part of fwd and bwd changes */
        assert_true(fabs((b.cost[k].fwd - b.cost[k].fwd_tp) - (a.cost[k].fwd - a.cost[k].fwd_tp))
                    <= 1e-12 * a.cost[k].fwd);
        assert_true(fabs((b.cost[k].bwd - b.cost[k].bwd_tp) - (a.cost[k].bwd - a.cost[k].bwd_tp))
                    <= 1e-12 * a.cost[k].bwd);
        assert_true(b.cost[k].fwd_tp <= a.cost[k].fwd_tp && b.cost[k].bwd_tp <= a.cost[k].bwd_tp);
        assert_true(b.cost[k].reduce == a.cost[k].reduce && b.cost[k].p2p == a.cost[k].p2p);
        assert_true(b.cost[k].params == a.cost[k].params);
    }
    plan_costs_free(&a);
    plan_costs_free(&b);
}

/* expert_bias (issue 29) adds exactly its state and its all-reduce: every
 * stage's buffers grow by each mixture's bias and counts (2 E fp32 a
 * mixture, on every rank: the program holds all of them), the step's
 * all-ranks all-reduce carries the counts (E fp32 a mixture) beside the
 * norm's fp32, timed as a second all-reduce; the parameters, activations,
 * gradients and the compute stay. */
static void test_expert_bias_terms(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)];
    Plan p = gpt_plan(buf, 8, 1024, 16, 2, 2, 2, 2, 0, 1, 16, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    int moe = 0;
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MLP) {
            Layer *L = &p.model.layers[i];
            L->kind = LAYER_MOE;
            L->experts = 8;
            L->top_k = 2;
            L->score = MOE_SCORE_SIGMOID;
            moe++;
        }
    assert_int_equal(moe, 8);
    Layout l = plan_layout_defaults(&p);
    PlanCosts a, b;
    PlanStageMem ma[2], mb[2];
    assert_true(l.pp == 2);
    assert_true(plan_costs(&p, &l, &a));
    plan_memory(&p, &a, ma);
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MOE) {
            p.model.layers[i].expert_bias = true;
            p.model.layers[i].bias_update_rate = 1e-3;
        }
    assert_true(plan_costs(&p, &l, &b));
    plan_memory(&p, &b, mb);
    double counts = 4.0 * 8 * moe;
    assert_int_equal(plan_expert_bias_bytes(&p.model), 2 * 4 * 8 * moe);
    PlanGroup all = plan_layout_group(&p.cluster, l.dp, l.tp, l.pp, GROUP_ALL);
    assert_true(a.norm_bytes == 4 && b.norm_bytes == 4 + counts);
    assert_true(fabs(b.norm - a.norm - plan_comm_cost(&p.cluster, COLL_ALL_REDUCE, ALGO_AUTO, all, counts).time)
                <= 1e-15);
    for (int s = 0; s < l.pp; s++) {
        assert_true(mb[s].buffers_bytes == ma[s].buffers_bytes + (uint64_t)(2 * counts));
        assert_true(mb[s].params_bytes == ma[s].params_bytes && mb[s].grads_bytes == ma[s].grads_bytes);
        assert_true(mb[s].activations_bytes == ma[s].activations_bytes &&
                    mb[s].optimizer_bytes == ma[s].optimizer_bytes);
    }
    for (int k = 0; k < a.n_chunks; k++)
        assert_true(a.cost[k].fwd == b.cost[k].fwd && a.cost[k].bwd == b.cost[k].bwd &&
                    a.cost[k].params == b.cost[k].params);
    plan_costs_free(&a);
    plan_costs_free(&b);
}

/* grad_accum_fusion false changes exactly the weight-gradient term: each
 * chunk's backward and its W part grow by one streaming pass a micro-batch
 * over its gradients — the fresh gradient read (e bytes a parameter), the
 * buffer read and written (g each) — with at most one launch a layer; the
 * forward, the TP and DP collectives and the parameters stay; the stage
 * holds the largest layer's fresh gradient until it is added. */
static void test_grad_accum_fusion_terms(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)];
    Plan p = gpt_plan(buf, 8, 4096, 32, 2, 2, 4, 2, 0, 1, 16, SCHED_1F1B, 1, RECOMPUTE_FULL, 0);
    PlanCosts a, b;
    assert_true(p.software.grad_accum_fusion);
    Layout l = costs_flipped(&p, &p.software.grad_accum_fusion, &a, &b);
    double per_param = plan_dtype_bytes(p.model.dtype) + 2.0 * plan_grad_bytes(&p);
    for (int k = 0; k < a.n_chunks; k++) {
        const PlanChunkCost *x = &a.cost[k], *y = &b.cost[k];
        double bytes = (double)x->params * per_param, grew = y->bwd - x->bwd;
        assert_true(grew > 0);
        assert_true(fabs((y->bwd_weight - x->bwd_weight) - grew) <= 1e-12 * y->bwd);
        assert_true(grew >= plan_stream_time(&p.cluster.device, bytes, 0) * (1 - 1e-12));
        assert_true(grew <= plan_stream_time(&p.cluster.device, bytes, x->layers) * (1 + 1e-12));
        assert_true(y->fwd == x->fwd && y->fwd_tp == x->fwd_tp && y->bwd_tp == x->bwd_tp);
        assert_true(y->reduce == x->reduce && y->p2p == x->p2p && y->params == x->params);
    }
    /* and the memory holds the largest layer's fresh gradient beside the
     * buffer until the add: the buffers grow by e x its parameters */
    PlanStageMem ma[2], mb[2];
    assert_true(l.pp <= 2);
    p.software.grad_accum_fusion = true;
    plan_memory(&p, &a, ma);
    p.software.grad_accum_fusion = false;
    plan_memory(&p, &b, mb);
    for (int s = 0; s < l.pp; s++) {
        double lmax = 0;
        for (int k = s; k < a.n_chunks; k += l.pp) lmax = fmax(lmax, (double)a.cost[k].layer_params_max);
        assert_true(lmax > 0);
        assert_true(mb[s].buffers_bytes == ma[s].buffers_bytes +
                                           plan_bytes(lmax * plan_dtype_bytes(p.model.dtype)));
        assert_true(mb[s].activations_bytes == ma[s].activations_bytes && mb[s].grads_bytes == ma[s].grads_bytes);
    }
    plan_costs_free(&a);
    plan_costs_free(&b);
}

/* cross_entropy_fusion false changes exactly the head's cross-entropy
 * (model.c's head_xent_work): on the last chunk, of N = T V / t logits of
 * e bytes, the forward moves (e + 36) N bytes in six launches instead of
 * 2e N in two, the backward (12 + e) N instead of 2e N, and the softmax is
 * kept in fp32 (4 N) instead of the logits (e N); the bf16 logits beside
 * their copy raise the largest layer's transient by e N; every other
 * chunk and every collective stays. */
static void test_cross_entropy_fusion_terms(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)];
    Plan p = gpt_plan(buf, 8, 4096, 32, 2, 2, 4, 2, 0, 1, 16, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    p.model.dtype = DTYPE_BF16;
    PlanCosts a, b;
    assert_true(p.software.cross_entropy_fusion);
    Layout l = costs_flipped(&p, &p.software.cross_entropy_fusion, &a, &b);
    const Device *d = &p.cluster.device;
    double e = 2, N = (double)l.micro_batch * (double)p.model.seq *
                      (double)plan_vocab_padded(&p.model, l.tp) / l.tp;
    int last = a.n_chunks - 1;
    for (int k = 0; k < last; k++) {
        assert_true(a.cost[k].fwd == b.cost[k].fwd && a.cost[k].bwd == b.cost[k].bwd);
        assert_true(a.cost[k].act_kept == b.cost[k].act_kept);
    }
    const PlanChunkCost *x = &a.cost[last], *y = &b.cost[last];
    double dfwd = plan_stream_time(d, (e + 36 - 2 * e) * N, 4) - plan_stream_time(d, 0, 0);
    double dbwd = plan_stream_time(d, (12 + e - 2 * e) * N, 4);
    assert_close(y->fwd - x->fwd, dfwd, 0, 1e-9);
    assert_close(y->bwd - x->bwd, dbwd, 0, 1e-9);
    assert_close(y->act_kept - x->act_kept, (4 - e) * N, 0, 1e-12);
    assert_true(y->act_layer_max >= x->act_layer_max);
    assert_true(y->p2p == x->p2p && y->reduce == x->reduce && y->fwd_tp == x->fwd_tp);
    plan_costs_free(&a);
    plan_costs_free(&b);
}

/* FlashAttention-2 (Dao 2023, Sec. 3.1.1) runs, of a causal s x s score
 * matrix in blocks of 128 x 128, the nb (nb + 1) / 2 on or below the
 * diagonal; a sliding window's band is already what it computes. */
static void test_flash_causal_fraction(void **state)
{
    (void)state;
    static const struct { double s, sk, want; } cases[] = {
        { 4096, 4096, 33.0 / 64 },   /* nb 32 */
        { 2048, 2048, 17.0 / 32 },   /* nb 16 */
        { 1000, 1000, 9.0 / 16 },    /* nb 8, the last block partial */
        { 128, 128, 1 },             /* one block: the diagonal */
        { 4096, 1024, 1 },           /* a window */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_close(plan_flash_causal_fraction(cases[i].s, cases[i].sk), cases[i].want, 0, 1e-12);
}

/* The fused attention rates are the published figures at their points
 * (FlashAttention-3 paper, Figs. 5-6, H100 at 1830 MHz; FlashAttention-2
 * paper Fig. 4, A100; kernel-rates.md), interpolated between them in log
 * seq and log head dim and held past the ends; the causal backward takes
 * its kernel's causal-to-full forward ratio; FA2 forward and backward at
 * head dim 128, causal, 2k keys, combined as 1 forward + 2.5 backward,
 * lands within 5 % of FA2's own measured fwd+bwd (265 TFLOPS, FA2 paper
 * Fig. 7). A device block's attention_efficiency replaces them all. */
static void test_attention_rates(void **state)
{
    (void)state;
    const Device *h = plan_device_preset("h100-sxm-80gb"), *a = plan_device_preset("a100-sxm-80gb");
    assert_close(plan_attn_rate(h, PLAN_ATTN_FA3, 0, 128, 8192, true), 602.0 / 989, 0, 1e-12);
    assert_close(plan_attn_rate(h, PLAN_ATTN_CUDNN, 0, 64, 2048, false), 395.0 / 989, 0, 1e-12);
    assert_close(plan_attn_rate(h, PLAN_ATTN_FA2, 1, 128, 4096, false), 310.0 / 989, 0, 1e-12);
    /* halfway in log seq (2k..4k: 2896 keys) and in log head dim (90.5) */
    assert_close(plan_attn_rate(h, PLAN_ATTN_FA2, 0, 128, 2048 * sqrt(2), true), (298.0 + 319) / 2 / 989, 0, 1e-9);
    assert_close(plan_attn_rate(h, PLAN_ATTN_FA2, 0, 64 * sqrt(2), 2048, false), (318.0 + 362) / 2 / 989, 0, 1e-9);
    assert_close(plan_attn_rate(h, PLAN_ATTN_FA3, 0, 256, 65536, false), 646.0 / 989, 0, 1e-12);   /* held */
    assert_close(plan_attn_rate(h, PLAN_ATTN_FA3, 1, 128, 4096, true), 542.0 * 579 / 638 / 989, 0, 1e-12);
    double f = plan_attn_rate(h, PLAN_ATTN_FA2, 0, 128, 2048, true), b = plan_attn_rate(h, PLAN_ATTN_FA2, 1, 128, 2048, true);
    double both = 3.5 / (1 / f + 2.5 / b) * 989;
    assert_close(both, 265, 0, 0.05);
    assert_close(plan_attn_rate(a, PLAN_ATTN_FA2, 0, 128, 4096, true), 182.0 / 312, 0, 1e-12);
    assert_close(plan_attn_rate(a, PLAN_ATTN_CUDNN, 1, 64, 8192, false), 189.0 / 312, 0, 1e-12);
    assert_true(plan_attn_rate(a, PLAN_ATTN_MATH, 0, 128, 4096, true) == 0);
    assert_true(plan_attn_rate(plan_device_preset("cpu"), PLAN_ATTN_FA2, 0, 128, 4096, true) == 0);
    Device custom = *h;
    custom.attn_eff = 0.5;
    assert_true(plan_attn_rate(&custom, PLAN_ATTN_CUDNN, 1, 64, 512, false) == 0.5);
}

/* The sustained clock (Device.sustained) slows a step's compute-bound
 * kernels and nothing else: on an H100, a GEMM-bound layer's GEMM seconds
 * grow by 1 / sustained exactly, its memory-bound traffic and the
 * collectives stay; sustained 1 (the A100, whose ceiling is a sustained
 * measurement) changes nothing. */
static void test_sustained_clock(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Plan p = gpt_plan(buf, 4, 4096, 32, 1, 8, 1, 1, 1, 4, 32, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    p.cluster.device = *plan_device_preset("h100-sxm-80gb");
    Layout l = plan_layout_defaults(&p);
    PlanCosts x, y;
    p.cluster.device.sustained = 1;
    assert_true(plan_costs(&p, &l, &x));
    p.cluster.device.sustained = 0.5;
    assert_true(plan_costs(&p, &l, &y));
    for (int k = 0; k < x.n_chunks; k++) {
        assert_true(y.cost[k].fwd > x.cost[k].fwd * 1.5 && y.cost[k].fwd < x.cost[k].fwd * 2);
        assert_true(y.cost[k].reduce == x.cost[k].reduce && y.cost[k].act_kept == x.cost[k].act_kept);
    }
    assert_true(y.opt[0] == x.opt[0]);   /* AdamW streams: memory-bound */
    plan_costs_free(&x);
    plan_costs_free(&y);
    assert_true(plan_sustained(plan_device_preset("a100-sxm-80gb")) == 1);
    assert_close(plan_sustained(plan_device_preset("h100-sxm-80gb")), 720.0 / 792.1, 0, 1e-12);
}

/* nvlink_domain: a group inside one NVLink domain of several nodes is
 * on the intra link (one "node" of the group's shape), the NICs of the
 * domain's nodes serve it across domains; without the key the domain is
 * the node. GB200 NVL72: 4 GPUs a tray, 72 a rack. */
static void test_nvlink_domain(void **state)
{
    (void)state;
    Cluster c = plan_preset_dgx_h100(36);   /* 288 GPUs */
    c.gpus_per_node = 4;
    c.nodes = 72;
    PlanGroup t16 = plan_layout_group(&c, 18, 16, 1, GROUP_TP);
    assert_int_equal(t16.nodes, 4);                       /* 16 GPUs over 4 trays: inter */
    assert_int_equal(plan_group_tier(t16), TIER_POD);
    c.nvlink_domain = 72;
    t16 = plan_layout_group(&c, 18, 16, 1, GROUP_TP);
    assert_int_equal(t16.nodes, 1);                       /* one rack: NVLink */
    assert_int_equal(plan_group_tier(t16), TIER_NODE);
    PlanGroup d = plan_layout_group(&c, 18, 16, 1, GROUP_DP);   /* 18, 16 apart: ceil(72 / 16) a rack */
    assert_int_equal(d.local, 5);
    assert_int_equal(d.nodes, 4);   /* ceil(18 / 5) racks */
    char why[256];
    assert_true(plan_rule_tp_node(&c, 16, why, sizeof why));
    assert_false(plan_rule_tp_node(&c, 144, why, sizeof why));
    assert_non_null(strstr(why, "NVLink domain"));
    /* all-reduce over the 16 of one rack beats the same 16 over 4 trays' IB */
    double big = 1 << 30;
    Cluster tray = c;
    tray.nvlink_domain = 0;
    double in_rack = plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_AUTO, t16, big).time;
    double over_ib = plan_comm_cost(&tray, COLL_ALL_REDUCE, ALGO_AUTO,
                                    plan_layout_group(&tray, 18, 16, 1, GROUP_TP), big).time;
    assert_true(in_rack * 1.5 < over_ib);   /* NVLink 450 GB/s vs 4 NICs of 50 a tray */
}

/* flash_attention changes exactly the attention core's terms: the FLOPs
 * counted stay (Megatron counts the full s^2), the s x s_k softmax and
 * dropout traffic becomes the fused kernel's Q, K, V, O (+ dO, dQ, dK, dV
 * backward) and fp32 log-sum-exp, the kept scores, probabilities and mask
 * become the log-sum-exp; the MLP, the DP collectives, the sends and the
 * parameters stay, and the step's compute gets shorter. */
static void test_flash_attention_terms(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Plan p = gpt_plan(buf, 4, 2048, 16, 1, 2, 2, 2, 0, 2, 16, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    p.model.dropout = 0.1;
    const double s = 2048, b = 2, h = 2048, a = 16, t = 2, e = 2, bat = b * a / t, T = b * s;
    PlanCut c0 = { .micro_batch = 2, .tp = 2, .recompute = RECOMPUTE_NONE }, c1 = c0;
    c1.flash = true;
    PlanLayerWork a0, a1, m0, m1;
    plan_layer_work(&p.model, &p.model.layers[1], &p.model.layers[0], &c0, &a0);
    plan_layer_work(&p.model, &p.model.layers[1], &p.model.layers[0], &c1, &a1);
    plan_layer_work(&p.model, &p.model.layers[2], &p.model.layers[1], &c0, &m0);
    plan_layer_work(&p.model, &p.model.layers[2], &p.model.layers[1], &c1, &m1);
    assert_true(a0.flops_fwd == a1.flops_fwd && a0.flops_core == a1.flops_core);
    double scores_f = (2 * e + 2 * e + 1) * bat * s * s, scores_b = (3 * e + 2 * e + 1) * bat * s * s;
    double qkvo = e * T * 4 * h / t, lse = 4 * bat * s;
    assert_close(a1.ew_fwd, a0.ew_fwd - scores_f + qkvo + lse, 0, 1e-12);
    assert_close(a1.ew_bwd, a0.ew_bwd - scores_b + qkvo + e * T * h / t + lse + e * T * 3 * h / t, 0, 1e-12);
    assert_close(a1.act_none, a0.act_none - (1 + 2 * e) * bat * s * s + lse, 0, 1e-12);
    assert_int_equal(a1.ew_kernels, a0.ew_kernels - 1);
    assert_true(a1.gemm[1].flash && a1.gemm[2].flash && !a1.gemm[0].flash && !a1.gemm[3].flash);
    assert_true(!a0.gemm[1].flash && !a0.gemm[2].flash);
    assert_memory_equal(&m0, &m1, sizeof m0);

    Layout l = plan_layout_defaults(&p);
    PlanCosts x, y;
    assert_true(plan_costs(&p, &l, &x));
    p.software.attention_kernel = PLAN_ATTN_FA2;
    p.cluster.device.attn_eff = 0.6;   /* one rate for both passes (device { attention_efficiency }) */
    assert_true(plan_costs(&p, &l, &y));
    for (int k = 0; k < x.n_chunks; k++) {
        assert_true(y.cost[k].fwd < x.cost[k].fwd && y.cost[k].bwd < x.cost[k].bwd);
        assert_true(y.cost[k].act_kept < x.cost[k].act_kept);
        assert_true(y.cost[k].flops_fwd == x.cost[k].flops_fwd);
        assert_true(y.cost[k].fwd_tp == x.cost[k].fwd_tp && y.cost[k].bwd_tp == x.cost[k].bwd_tp);
        assert_true(y.cost[k].reduce == x.cost[k].reduce && y.cost[k].p2p == x.cost[k].p2p);
        assert_true(y.cost[k].params == x.cost[k].params);
    }
    /* the fused kernel's time is its causal blocks' FLOPs at Device.attn_eff
     * of the peak, forward 1 and backward 2.5 (FlashAttention-2's count):
     * halving attn_eff adds exactly that much again, nothing else */
    PlanCosts z;
    double eff = p.cluster.device.attn_eff;
    assert_true(eff == 0.6);
    p.cluster.device.attn_eff = eff / 2;
    assert_true(plan_costs(&p, &l, &z));
    double core = 2 * (2 * s * s * (h / a) * bat) * plan_flash_causal_fraction(s, s) /
                  (y.peak_flops * plan_sustained(&p.cluster.device) * eff);
    for (int k = 0; k < y.n_chunks; k++) {
        int att = y.chunk[k].blocks;
        assert_true(att > 0);
        assert_close(z.cost[k].fwd - y.cost[k].fwd, att * core, 0, 1e-9);
        assert_close(z.cost[k].bwd - y.cost[k].bwd, 2.5 * att * core, 0, 1e-9);
    }
    plan_costs_free(&x);
    plan_costs_free(&y);
    plan_costs_free(&z);
}

/* The fusion keys change exactly the elementwise terms they name, by the
 * kernels model.c counts (eager PyTorch's, autograd's backward): an
 * unfused RMSNorm over N = T h elements of e = 2 bytes moves (28 + 2e) N
 * more forward and (76 + 5e) N more backward in 7 and 13 more launches and
 * keeps 4N more; unfused RoPE 8e more per element of q and k each way, 9
 * more launches each way; an unfused SwiGLU over F = T f / t elements 2e F
 * more forward, 4e F more backward, 1 and 2 more launches, e F more kept.
 * FLOPs, the TP collectives and full recomputation's input stay; a GPT
 * (LayerNorm, GeLU, learned positions) is one kernel each eager too. */
static void test_fusion_terms(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(2)];
    Model m;
    plan_preset_llama(&m, buf, "llama", 2, 4096, 32, 8, 14336, 4096, 32000, DTYPE_BF16);
    const double e = 2, t = 2, T = 2.0 * 4096, h = 4096, hq = 4096, hkv = 8 * 128, f = 14336;
    PlanCut c0 = { .micro_batch = 2, .tp = 2, .recompute = RECOMPUTE_NONE };
    static const struct { int key, layer; double fwd, bwd; int kf, kb; double act; } cases[] = {
        { 0, 1, (28 + 2 * e) * T * h, (76 + 5 * e) * T * h, 7, 13, 4 * T * h },   /* attention's pre-norm */
        { 0, 2, (28 + 2 * e) * T * h, (76 + 5 * e) * T * h, 7, 13, 4 * T * h },   /* the MLP's */
        { 0, 5, (28 + 2 * e) * T * h, (76 + 5 * e) * T * h, 7, 13, 4 * T * h },   /* the final norm */
        { 1, 1, 8 * e * T * (hq + hkv) / t, 8 * e * T * (hq + hkv) / t, 9, 9, 0 },
        { 2, 2, 2 * e * T * f / t, 4 * e * T * f / t, 1, 2, e * T * f / t },
        { 1, 2, 0, 0, 0, 0, 0 },                                                 /* RoPE: not the MLP's */
        { 2, 1, 0, 0, 0, 0, 0 },                                                 /* SwiGLU: not attention's */
    };
    assert_int_equal(m.layers[5].kind, LAYER_NORM);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PlanCut c1 = c0;
        if (cases[i].key == 0) c1.unfused_norm = true;
        if (cases[i].key == 1) c1.unfused_rope = true;
        if (cases[i].key == 2) c1.unfused_swiglu = true;
        const Layer *l = &m.layers[cases[i].layer], *prev = &m.layers[cases[i].layer - 1];
        PlanLayerWork w0, w1;
        plan_layer_work(&m, l, prev, &c0, &w0);
        plan_layer_work(&m, l, prev, &c1, &w1);
        assert_close(w1.ew_fwd - w0.ew_fwd, cases[i].fwd, 1e-3, 1e-12);
        assert_close(w1.ew_bwd - w0.ew_bwd, cases[i].bwd, 1e-3, 1e-12);
        assert_int_equal(w1.ew_kernels - w0.ew_kernels, cases[i].kf);
        assert_int_equal(w1.ew_kernels_bwd - w0.ew_kernels_bwd, cases[i].kb);
        assert_close(w1.act_none - w0.act_none, cases[i].act, 1e-3, 1e-12);
        assert_close(w1.act_selective - w0.act_selective, cases[i].act, 1e-3, 1e-12);
        assert_true(w1.flops_fwd == w0.flops_fwd && w1.tp_bytes == w0.tp_bytes);
        if (l->kind != LAYER_NORM) assert_true(w1.act_full == w0.act_full);
    }
    Layer gbuf[PLAN_PRESET_LAYERS(2)];
    Model g;
    plan_preset_gpt(&g, gbuf, "gpt", 2, 2048, 16, 2048, 51200, DTYPE_BF16);
    PlanCut all = c0;
    all.unfused_norm = all.unfused_rope = all.unfused_swiglu = true;
    for (int k = 1; k < g.n_layers; k++) {
        PlanLayerWork w0, w1;
        plan_layer_work(&g, &g.layers[k], &g.layers[k - 1], &c0, &w0);
        plan_layer_work(&g, &g.layers[k], &g.layers[k - 1], &all, &w1);
        assert_true(w0.ew_fwd == w1.ew_fwd && w0.ew_bwd == w1.ew_bwd && w0.ew_kernels == w1.ew_kernels &&
                    w0.act_none == w1.act_none);
    }
    /* the plan's keys reach the cost table: the unfused step computes longer, keeps more */
    Plan p = plan_preset_plan(m, plan_preset_dgx_h100(1), 4, 2, 1, 1, 2, 8, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    Layout l = plan_layout_defaults(&p);
    PlanCosts k0, k1;
    assert_true(plan_costs(&p, &l, &k0));
    p.software.unfused_norm = p.software.unfused_rope = p.software.unfused_swiglu = true;
    assert_true(plan_costs(&p, &l, &k1));
    assert_true(k1.cost[0].fwd > k0.cost[0].fwd && k1.cost[0].bwd > k0.cost[0].bwd);
    assert_true(k1.cost[0].act_kept > k0.cost[0].act_kept && k1.cost[0].flops_fwd == k0.cost[0].flops_fwd);
    plan_costs_free(&k0);
    plan_costs_free(&k1);
}

/* The optimizer's kernels: fused is one pass of PLAN_ADAM_BYTES a
 * parameter in one launch; torch.optim's foreach and for-loop run eight
 * passes (84 bytes a parameter), foreach in multi_tensor_apply's launches
 * (per op the larger of ceil(tensors / the max tensors of its depth) and
 * ceil(params / (320 x 65536))), for-loop a launch per tensor per op. The
 * cost table passes each stage's tensors (plan_layer_tensors: Llama's
 * attention 5, MLP 4, embedding, final norm and untied head 1 each). */
static void test_optimizer_kernels(void **state)
{
    (void)state;
    Cluster c = plan_preset_dgx_h100(1);
    const Device *d = &c.device;
    assert_close(plan_opt_time(d, 1000000, PLAN_OPTIM_FUSED, 291), plan_stream_time(d, 28e6, 1), 0, 1e-12);
    /* depths 1 2 1 3 2 1 1 3: ceil(291 / {110, 64, 48}) = 3, 5, 7 */
    assert_close(plan_opt_time(d, 1000000, PLAN_OPTIM_FOREACH, 291), plan_stream_time(d, 84e6, 36), 0, 1e-12);
    /* 1e9 parameters: 48 launches of 320 x 65536 elements per op */
    assert_close(plan_opt_time(d, 1000000000, PLAN_OPTIM_FOREACH, 291), plan_stream_time(d, 84e9, 8 * 48), 0, 1e-12);
    assert_close(plan_opt_time(d, 1000000, PLAN_OPTIM_FORLOOP, 291), plan_stream_time(d, 84e6, 8 * 291), 0, 1e-12);
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Model m;
    plan_preset_llama(&m, buf, "llama", 4, 1024, 16, 4, 2816, 1024, 32000, DTYPE_BF16);
    assert_int_equal(plan_layer_tensors(&m, &m.layers[1]), 5);
    assert_int_equal(plan_layer_tensors(&m, &m.layers[2]), 4);
    Plan p = plan_preset_plan(m, c, 4, 1, 2, 1, 1, 8, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    p.software.optimizer = PLAN_OPTIM_FORLOOP;
    Layout l = plan_layout_defaults(&p);
    PlanCosts k;
    assert_true(plan_costs(&p, &l, &k));
    /* stage 0: the embedding and 2 blocks; stage 1: 2 blocks, the norm, the head */
    assert_close(k.opt[0], plan_opt_time(d, k.opt_params[0], PLAN_OPTIM_FORLOOP, 1 + 2 * 9) + d->overhead, 0, 1e-12);
    assert_close(k.opt[1], plan_opt_time(d, k.opt_params[1], PLAN_OPTIM_FORLOOP, 2 * 9 + 2) + d->overhead, 0, 1e-12);
    plan_costs_free(&k);
}

/* overlap_param_gather: ZeRO-1/2's all-gather of the updated shards
 * leaves the tail (no SYNC_PARAMS) for a gather feeding each chunk's
 * first forward, layer by layer, and the step gets no slower; ZeRO-3's
 * gather is bucketed per layer (prefetch) only with it, one piece the
 * compute waits for without it. Unset, it is planc's runtime: off under
 * ZeRO-1/2, on (prefetch) under ZeRO-3. */
static void test_overlap_param_gather(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)];
    for (int zero = 1; zero <= 3; zero++) {
        Plan p = gpt_plan(buf, 8, 2048, 16, 2, 8, 1, 2, zero, 1, 64, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
        PlanEval off, on;
        PlanProgram pr[2];
        char why[256];
        assert_int_equal(p.software.overlap_param_gather, PLAN_AUTO);
        assert_int_equal(plan_param_overlap(&p, zero), zero == 3);
        p.software.overlap_param_gather = false;
        plan_evaluate(&p, &off);
        assert_true(plan_lower(&p, &pr[0], why, sizeof why));
        p.software.overlap_param_gather = true;
        plan_evaluate(&p, &on);
        assert_true(plan_lower(&p, &pr[1], why, sizeof why));
        assert_true(off.valid && on.valid);
        for (int w = 0; w < 2; w++)
            for (int s = 0; s < pr[w].pp; s++) {
                int syncs = 0, gathers = 0, first_bucket = 0;
                for (int j = 0; j < pr[w].stages[s].n_ops; j++) {
                    const PlanOp *o = &pr[w].stages[s].ops[j];
                    syncs += o->kind == OP_SYNC_PARAMS;
                    if (o->kind == OP_GATHER_PARAMS) {
                        gathers++;
                        if (gathers == 1) first_bucket = o->buckets;
                        PlanOpKind fed = o->pair >= 0 ? pr[w].stages[s].ops[o->pair].kind : OP_OPT_STEP;
                        assert_true(fed == OP_FWD || (zero == 3 && fed == OP_BWD));
                    }
                }
                if (zero < 3) {
                    assert_int_equal(syncs, w ? 0 : 1);
                    assert_int_equal(gathers, w ? 1 : 0);
                } else {
                    assert_int_equal(syncs, 0);
                    assert_true(gathers > 0);
                    assert_true(w ? first_bucket > 1 : first_bucket == 1);
                }
            }
        assert_true(on.step_time < off.step_time);
        plan_program_free(&pr[0]); plan_program_free(&pr[1]);
        plan_eval_free(&off); plan_eval_free(&on);
    }
}

/* ---- report ---------------------------------------------------------------- */

static char *report(const Plan *p, bool json, int *rc)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    /* the report's diagnostics go to stderr: silence them for the call only */
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    *rc = plan_check_report(f, stderr, p, json);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(null);
    fclose(f);
    return buf;
}

/* An interleaved stage holds `chunks` layer ranges: check lists every one
 * (text) and gives them as disjoint [first, end) pairs (JSON) that cover
 * the model exactly once; it used to print 9 of 20 ranges and JSON
 * first/end pairs that overlapped between stages. */
static void test_report_interleaved_ranges(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(40)];
    Plan p = gpt_plan(buf, 40, 1024, 16, 1, 2, 2, 2, 1, 1, 16, SCHED_INTERLEAVED, 20, RECOMPUTE_NONE, 0);
    int rc;
    char *s = report(&p, true, &rc);
    assert_int_equal(rc, 0);
    int covered[PLAN_PRESET_LAYERS(40)] = { 0 };
    int n_ranges = 0;
    for (const char *q = strstr(s, "\"layers\": ["); q; q = strstr(q + 1, "\"layers\": [")) {
        const char *r = q + strlen("\"layers\": [");
        int a, b, used;
        while (sscanf(r, " [%d, %d]%n", &a, &b, &used) == 2) {
            assert_true(a >= 0 && a < b && b <= p.model.n_layers);
            for (int i = a; i < b; i++) covered[i]++;
            n_ranges++;
            r += used;
            if (*r == ',') r++;
        }
    }
    assert_int_equal(n_ranges, 2 * 20);
    for (int i = 0; i < p.model.n_layers; i++) assert_int_equal(covered[i], 1);
    assert_null(strstr(s, "\"first_layer\""));   /* one range per stage only when chunks == 1 */
    free(s);
    s = report(&p, false, &rc);
    const char *list = strstr(s, "layers of each stage");
    assert_non_null(list);
    int commas = 0;
    for (const char *q = strchr(list, '\n') + 1; *q && *q != '\n'; q++) commas += *q == ',';
    assert_int_equal(commas, 20 - 1);   /* stage 0's line names all 20 ranges */
    free(s);
}

static void test_report(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(8)];
    Plan p = gpt_plan(buf, 8, 1024, 16, 1, 2, 2, 2, 1, 2, 16, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE, 1);
    int rc;
    char *s = report(&p, true, &rc);
    assert_int_equal(rc, 0);
    const char *keys[] = { "\"feasible\": true", "\"params\": ", "\"layout\": {\"dp\": 2, \"tp\": 2, \"pp\": 2",
                           "\"peak_memory_bytes\"", "\"step_time_s\"", "\"tokens_per_s\"",
                           "\"tflops_per_gpu\"", "\"mfu\"", "\"hfu\"", "\"bubble_fraction\"",
                           "\"stages\"", "\"params_bytes\"", "\"norm_s\"", "\"sp_norm_s\"", "\"embed_s\"", "\"grads_bytes\"", "\"optimizer_bytes\"",
                           "\"activations_bytes\"", "\"buffers_bytes\"", "\"total_bytes\"",
                           "\"schedule\": \"1f1b\"", "\"recompute\": \"selective\"",
                           "\"sequence_parallel\": true" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (!strstr(s, keys[i])) print_error("missing %s in\n%s\n", keys[i], s);
        assert_non_null(strstr(s, keys[i]));
    }
    free(s);
    s = report(&p, false, &rc);
    assert_non_null(strstr(s, "memory per GPU"));
    assert_non_null(strstr(s, "pipeline bubble"));
    assert_non_null(strstr(s, "MFU"));
    free(s);
    Layer big[PLAN_PRESET_LAYERS(96)];
    p = gpt_plan(big, 96, 12288, 96, 1, 1, 8, 1, 0, 1, 8, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
    s = report(&p, true, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(s, "\"feasible\": false"));
    assert_non_null(strstr(s, "stage 0 does not fit"));
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params_known_models),
        cmocka_unit_test(test_moe_params),
        cmocka_unit_test(test_qk_norm_params),
        cmocka_unit_test(test_norm_position_params),
        cmocka_unit_test(test_qk_proj_tp_time),
        cmocka_unit_test(test_mla_params),
        cmocka_unit_test(test_mla_work),
        cmocka_unit_test(test_mla_fp8),
        cmocka_unit_test(test_moe_work),
        cmocka_unit_test(test_moe_memory),
        cmocka_unit_test(test_moe_scratch),
        cmocka_unit_test(test_bwd_scratch),
        cmocka_unit_test(test_moe_all_to_all),
        cmocka_unit_test(test_moe_overlap),
        cmocka_unit_test(test_moe_deepep_bytes),
        cmocka_unit_test(test_moe_etp),
        cmocka_unit_test(test_moe_imbalance),
        cmocka_unit_test(test_params_exact_and_overflow),
        cmocka_unit_test(test_flops_megatron),
        cmocka_unit_test(test_zb_h1_kept),
        cmocka_unit_test(test_activations_korthikanti),
        cmocka_unit_test(test_recompute_modules_exact),
        cmocka_unit_test(test_recompute_some_blocks),
        cmocka_unit_test(test_layer_gemm_flops),
        cmocka_unit_test(test_gemm_efficiency),
        cmocka_unit_test(test_bus_factors),
        cmocka_unit_test(test_group_shapes),
        cmocka_unit_test(test_comm_costs),
        cmocka_unit_test(test_zero_paper),
        cmocka_unit_test(test_grad_dtype),
        cmocka_unit_test(test_memory_peaks),
        cmocka_unit_test(test_bytes_saturate),
        cmocka_unit_test(test_in_flight_formulas),
        cmocka_unit_test(test_memory_knobs),
        cmocka_unit_test(test_infeasible),
        cmocka_unit_test(test_layout_defaults),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_schedules_structure),
        cmocka_unit_test(test_p2p_order_schedules),
        cmocka_unit_test(test_pipe_xfer_bufs),
        cmocka_unit_test(test_1t_interleaved_fits),
        cmocka_unit_test(test_p2p_order_hand),
        cmocka_unit_test(test_bubble_sim_vs_closed),
        cmocka_unit_test(test_zb_h1),
        cmocka_unit_test(test_p2p_wait),
        cmocka_unit_test(test_overlap_tp_terms),
        cmocka_unit_test(test_grad_accum_fusion_terms),
        cmocka_unit_test(test_cross_entropy_fusion_terms),
        cmocka_unit_test(test_flash_causal_fraction),
        cmocka_unit_test(test_flash_attention_terms),
        cmocka_unit_test(test_attention_rates),
        cmocka_unit_test(test_sustained_clock),
        cmocka_unit_test(test_nvlink_domain),
        cmocka_unit_test(test_fusion_terms),
        cmocka_unit_test(test_optimizer_kernels),
        cmocka_unit_test(test_overlap_param_gather),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_closed_form_vs_sim_real),
        cmocka_unit_test(test_eval_flops),
        cmocka_unit_test(test_timeline),
        cmocka_unit_test(test_stage_params),
        cmocka_unit_test(test_comm_hier_and_sp),
        cmocka_unit_test(test_wave_sms),
        cmocka_unit_test(test_tied_embedding_allreduce),
        cmocka_unit_test(test_step_collectives_contract),
        cmocka_unit_test(test_expert_bias_terms),
        cmocka_unit_test(test_bubble_definition),
        cmocka_unit_test(test_megatron_2021_switches),
        cmocka_unit_test(test_shape_memo),
        cmocka_unit_test(test_bound_chain),
        cmocka_unit_test(test_random_layouts),
        cmocka_unit_test(test_report),
        cmocka_unit_test(test_report_interleaved_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
