/*
 * test_calib.c: the cost model on a calibrated device (planc calibrate's
 * profile keys, plan.h) reproduces the profile's own points, and a device
 * without a profile keeps the analytic model.
 *
 *  - every measured GEMM shape of every pass is predicted at its measured
 *    time (times its batch); a shape between points lies between them;
 *  - elementwise streams take bytes / stream + kernels * launch;
 *  - a measured collective on its measured group is latency + factor * M /
 *    bus bandwidth, and a link without figures keeps the alpha-beta model;
 *  - the overlap factors slow the DP reduction (the collective beside
 *    compute) and the compute beside it, so the step grows by what they say;
 *  - the per-step overhead lands in the optimizer step.
 * No timing of this machine here: that is the benchmark's (make validate).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "planner/comm.h"
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/presets.h"

/* A profile of points that no roofline would give (rates differ by pass
 * and shape), so only a lookup of the table can reproduce them. */
static const PlanGemmPoint POINTS[] = {
    { PLAN_GEMM_FWD, 256, 768, 256, 1.25e-3 },
    { PLAN_GEMM_FWD, 256, 1024, 256, 2.5e-3 },
    { PLAN_GEMM_FWD, 2048, 2048, 2048, 0.21 },
    { PLAN_GEMM_DX, 256, 768, 256, 1.75e-3 },
    { PLAN_GEMM_DX, 64, 64, 64, 3.3e-6 },
    { PLAN_GEMM_DW, 256, 768, 256, 0.5e-3 },
    { PLAN_GEMM_DW, 128, 4096, 32, 7.7e-4 },
};
#define N_POINTS ((int)(sizeof POINTS / sizeof POINTS[0]))

static Device profiled(void)
{
    Device d = *plan_device_preset("cpu");
    d.gemm = POINTS;
    d.n_gemm = N_POINTS;
    d.stream = 3e9;
    d.launch = 4e-6;
    return d;
}

static void test_gemm_points_reproduced(void **state)
{
    (void)state;
    Device d = profiled();
    for (int i = 0; i < N_POINTS; i++) {
        const PlanGemmPoint *q = &POINTS[i];
        for (double batch = 1; batch <= 8; batch *= 2) {
            double t = plan_gemm_pass_time(&d, d.flops_fp32, 4, q->pass, q->m, q->n, q->k, batch);
            if (fabs(t - batch * q->seconds) > 1e-12 * batch * q->seconds) {
                fprintf(stderr, "point %d batch %g: predicted %.9g s, measured %.9g s\n", i, batch, t,
                        batch * q->seconds);
                fail();
            }
        }
    }
    /* plan_gemm_time is the forward pass */
    assert_true(plan_gemm_time(&d, d.flops_fp32, 4, 256, 768, 256, 1) == 1.25e-3);
    /* between the two forward points of n 768 and 1024 the rate lies between theirs */
    double t = plan_gemm_pass_time(&d, d.flops_fp32, 4, PLAN_GEMM_FWD, 256, 896, 256, 1);
    double r = 2.0 * 256 * 896 * 256 / t, r0 = 2.0 * 256 * 768 * 256 / 1.25e-3, r1 = 2.0 * 256 * 1024 * 256 / 2.5e-3;
    assert_true(r < fmax(r0, r1) && r > fmin(r0, r1));
}

static void test_no_profile_is_analytic(void **state)
{
    (void)state;
    Device d = *plan_device_preset("a100-sxm-80gb");
    /* the passes of a device without points: the roofline with each pass's own shape */
    static const double shapes[][3] = { { 4096, 12288, 4096 }, { 2048, 128, 2048 }, { 300, 5000, 77 } };
    for (int i = 0; i < 3; i++) {
        double m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        assert_true(plan_gemm_pass_time(&d, d.flops_16, 2, PLAN_GEMM_FWD, m, n, k, 1) ==
                    plan_gemm_time(&d, d.flops_16, 2, m, n, k, 1));
        assert_true(plan_gemm_pass_time(&d, d.flops_16, 2, PLAN_GEMM_DX, m, n, k, 1) ==
                    plan_gemm_time(&d, d.flops_16, 2, m, k, n, 1));
    }
    assert_true(plan_stream_time(&d, 1e9, 3) == 1e9 / (d.hbm * PLAN_HBM_EFF) + 3 * PLAN_KERNEL_GAP);
    Device p = profiled();
    assert_true(plan_stream_time(&p, 6e6, 5) == 6e6 / 3e9 + 5 * 4e-6);
}

static Cluster two_ranks(void)
{
    Cluster c = { .name = "measured", .nodes = 1, .gpus_per_node = 2, .device = profiled(),
                  .intra = { .bandwidth = 2e9, .latency = 5e-6 } };
    return c;
}

static void test_collectives_measured(void **state)
{
    (void)state;
    Cluster c = two_ranks();
    PlanGroup g = plan_group_shape(2, 1, 2);
    double M = 4 << 20;
    /* no figures: the alpha-beta model, derated by PLAN_LINK_EFF_INTRA */
    double ring = 2 * 5e-6 + plan_bus_factor(COLL_ALL_REDUCE, 2) * M / (2e9 * PLAN_LINK_EFF_INTRA);
    assert_true(fabs(plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_AUTO, g, M).time - ring) < 1e-15);
    static const struct { PlanCollective c; double lat, bw; } table[] = {
        { COLL_ALL_REDUCE, 30e-6, 1.5e9 }, { COLL_ALL_GATHER, 20e-6, 2.5e9 },
        { COLL_REDUCE_SCATTER, 25e-6, 0.6e9 }, { COLL_BROADCAST, 9e-6, 4e9 }, { COLL_P2P, 3e-6, 5e9 },
    };
    c.intra.coll_ranks = 2;
    for (int i = 0; i < 5; i++) { c.intra.coll_latency[table[i].c] = table[i].lat; c.intra.coll_bw[table[i].c] = table[i].bw; }
    for (int i = 0; i < 5; i++)
        for (double m = 1024; m <= 64e6; m *= 16) {
            double want = table[i].lat + plan_bus_factor(table[i].c, 2) * m / table[i].bw;
            double got = plan_comm_cost(&c, table[i].c, ALGO_AUTO, g, m).time;
            assert_true(fabs(got - want) <= 1e-12 * want);
        }
    /* a group of 4 on a node of 4: the latency scales with the ring's rounds */
    c.gpus_per_node = 4;
    PlanGroup g4 = plan_group_shape(4, 1, 4);
    double want = 30e-6 * 6 / 2 + plan_bus_factor(COLL_ALL_REDUCE, 4) * M / 1.5e9;
    assert_true(fabs(plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_AUTO, g4, M).time - want) <= 1e-12 * want);
}

/* A small GPT on the two-rank cluster under layout (dp, pp). */
static Plan small_plan(Layer *buf, Cluster c, int dp, int pp)
{
    Model m;
    plan_preset_gpt(&m, buf, "small", 4, 256, 4, 128, 256, DTYPE_FP32);
    return plan_preset_plan(m, c, dp, 1, pp, 0, 2, 8, SCHED_1F1B, 1, RECOMPUTE_NONE, 0);
}

static void test_overlap_and_overhead(void **state)
{
    (void)state;
    Layer buf[PLAN_PRESET_LAYERS(4)];
    Plan p = small_plan(buf, two_ranks(), 2, 1);
    PlanEval a, b, c;
    plan_evaluate(&p, &a);
    assert_true(a.valid);
    p.cluster.intra.overlap_comm = 1.5;
    plan_evaluate(&p, &b);
    assert_true(fabs(b.times.dp_total - 1.5 * a.times.dp_total) <= 1e-12 * b.times.dp_total);
    p.cluster.intra.overlap_compute = 1.25;   /* the compute loses 0.25 s per second of reduction */
    plan_evaluate(&p, &c);
    assert_true(c.step_time > b.step_time);
    assert_true(c.step_time <= b.step_time + 0.25 * b.times.dp_total * (1 + 1e-12));
    plan_eval_free(&b); plan_eval_free(&c);
    /* the per-step overhead adds to the optimizer step, once */
    p = small_plan(buf, two_ranks(), 2, 1);
    p.cluster.device.overhead = 3e-3;
    plan_evaluate(&p, &b);
    assert_true(fabs(b.times.optimizer - a.times.optimizer - 3e-3) < 1e-12);
    assert_true(fabs(b.step_time - a.step_time - 3e-3) < 1e-9);
    plan_eval_free(&a); plan_eval_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_points_reproduced),
        cmocka_unit_test(test_no_profile_is_analytic),
        cmocka_unit_test(test_collectives_measured),
        cmocka_unit_test(test_overlap_and_overhead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
