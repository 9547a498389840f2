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
 *  - the gemm points time the models of the element size they were
 *    measured in only (gemm_dtype: bf16 points a bf16 model's GEMMs, the
 *    CPU's fp32 points an fp32 model's), the others keep the roofline;
 *  - collectives measured per group size: a measured size is its own
 *    point, a size between two is interpolated in log size, one beyond
 *    takes the nearest's per-round latency and bus bandwidth;
 *  - a GPU profile (synthetic measurement as planrt-calib-cuda writes it)
 *    goes through planc calibrate's reader and writer (cli/calib_profile.c),
 *    `planc fmt`'s formatter and sema, and comes out as the figures it went
 *    in with: 16-bit flops from the GEMMs, flops_fp32, memory, sms,
 *    gemm_dtype bf16, every point and every collective of every size.
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

#include "cli/calib_profile.h"
#include "dsl/dsl.h"
#include "planner/comm.h"
#include "planner/cost.h"
#include "planner/evaluate.h"
#include "planner/presets.h"
#include "planner/sema.h"

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
    /* the preset's BabelStream rate (presets.c); a device without one: PLAN_HBM_EFF of its HBM */
    assert_true(plan_stream_time(&d, 1e9, 3) == 1e9 / d.stream + 3 * PLAN_KERNEL_GAP);
    Device bare = d;
    bare.stream = 0;
    assert_true(plan_stream_time(&bare, 1e9, 3) == 1e9 / (d.hbm * PLAN_HBM_EFF) + 3 * PLAN_KERNEL_GAP);
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
    static const PlanCollPoint table[] = {
        { COLL_ALL_REDUCE, 2, 30e-6, 1.5e9 }, { COLL_ALL_GATHER, 2, 20e-6, 2.5e9 },
        { COLL_REDUCE_SCATTER, 2, 25e-6, 0.6e9 }, { COLL_BROADCAST, 2, 9e-6, 4e9 }, { COLL_P2P, 2, 3e-6, 5e9 },
    };
    c.intra.coll = table;
    c.intra.n_coll = 5;
    for (int i = 0; i < 5; i++)
        for (double m = 1024; m <= 64e6; m *= 16) {
            PlanCollective k = (PlanCollective)table[i].coll;
            double want = table[i].latency + plan_bus_factor(k, 2) * m / table[i].busbw;
            double got = plan_comm_cost(&c, k, ALGO_AUTO, g, m).time;
            assert_true(fabs(got - want) <= 1e-12 * want);
        }
    /* a group of 4 on a node of 4: the latency scales with the ring's rounds */
    c.gpus_per_node = 4;
    PlanGroup g4 = plan_group_shape(4, 1, 4);
    double want = 30e-6 * 6 / 2 + plan_bus_factor(COLL_ALL_REDUCE, 4) * M / 1.5e9;
    assert_true(fabs(plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_AUTO, g4, M).time - want) <= 1e-12 * want);
}

/* Rounds of a ring collective on n ranks (comm.c's latency model). */
static double ring_rounds(PlanCollective c, int n)
{
    return c == COLL_ALL_REDUCE ? 2.0 * (n - 1) : n - 1;
}

static void test_collectives_per_group_size(void **state)
{
    (void)state;
    Cluster c = two_ranks();
    c.gpus_per_node = 16;
    /* figures no single alpha-beta line gives: the bus bandwidth falls and
     * the per-round latency rises with the group, differently per collective */
    static const PlanCollPoint pts[] = {
        { COLL_ALL_REDUCE, 2, 10e-6, 8e9 }, { COLL_ALL_REDUCE, 4, 45e-6, 5e9 }, { COLL_ALL_REDUCE, 8, 200e-6, 2e9 },
        { COLL_ALL_GATHER, 8, 70e-6, 3e9 }, { COLL_ALL_GATHER, 2, 4e-6, 9e9 },
    };
    c.intra.coll = pts;
    c.intra.n_coll = (int)(sizeof pts / sizeof pts[0]);
    double M = 3 << 20;
    /* a measured size is its own point */
    for (int i = 0; i < c.intra.n_coll; i++) {
        PlanCollective k = (PlanCollective)pts[i].coll;
        int n = pts[i].ranks;
        double want = pts[i].latency + plan_bus_factor(k, n) * M / pts[i].busbw;
        double got = plan_comm_cost(&c, k, ALGO_AUTO, plan_group_shape(n, 1, n), M).time;
        if (fabs(got - want) > 1e-12 * want) {
            fprintf(stderr, "point %d (%d ranks): predicted %.9g s, measured %.9g s\n", i, n, got, want);
            fail();
        }
    }
    /* between measured sizes: per-round latency and busbw linear in log n */
    static const struct { PlanCollective k; int n; int lo, hi; } mid[] = {
        { COLL_ALL_REDUCE, 3, 0, 1 }, { COLL_ALL_REDUCE, 6, 1, 2 }, { COLL_ALL_GATHER, 4, 4, 3 },
    };
    for (int i = 0; i < 3; i++) {
        const PlanCollPoint *a = &pts[mid[i].lo], *b = &pts[mid[i].hi];
        int n = mid[i].n;
        double u = log((double)n / a->ranks) / log((double)b->ranks / a->ranks);
        double la = a->latency / ring_rounds(mid[i].k, a->ranks), lb = b->latency / ring_rounds(mid[i].k, b->ranks);
        double want = (la + u * (lb - la)) * ring_rounds(mid[i].k, n) +
                      plan_bus_factor(mid[i].k, n) * M / (a->busbw + u * (b->busbw - a->busbw));
        double got = plan_comm_cost(&c, mid[i].k, ALGO_AUTO, plan_group_shape(n, 1, n), M).time;
        assert_true(fabs(got - want) <= 1e-12 * want);
        /* and it lies between what either neighbour's figures give */
        double ta = la * ring_rounds(mid[i].k, n) + plan_bus_factor(mid[i].k, n) * M / a->busbw;
        double tb = lb * ring_rounds(mid[i].k, n) + plan_bus_factor(mid[i].k, n) * M / b->busbw;
        assert_true(got >= fmin(ta, tb) && got <= fmax(ta, tb));
    }
    /* beyond the largest: its per-round latency and bus bandwidth */
    double want = 200e-6 / 14 * 30 + plan_bus_factor(COLL_ALL_REDUCE, 16) * M / 2e9;
    double got = plan_comm_cost(&c, COLL_ALL_REDUCE, ALGO_AUTO, plan_group_shape(16, 1, 16), M).time;
    assert_true(fabs(got - want) <= 1e-12 * want);
    /* a collective without points keeps the alpha-beta model */
    Cluster bare = two_ranks();
    bare.gpus_per_node = 16;
    PlanGroup g4 = plan_group_shape(4, 1, 4);
    assert_true(plan_comm_cost(&c, COLL_REDUCE_SCATTER, ALGO_AUTO, g4, M).time ==
                plan_comm_cost(&bare, COLL_REDUCE_SCATTER, ALGO_AUTO, g4, M).time);
}

static void test_gemm_points_by_dtype(void **state)
{
    (void)state;
    Device d = *plan_device_preset("h100-sxm-80gb"), bare = d;
    static const PlanGemmPoint bf16[] = {
        { PLAN_GEMM_FWD, 4096, 4096, 4096, 0.31e-3 }, { PLAN_GEMM_DX, 4096, 4096, 4096, 0.33e-3 },
        { PLAN_GEMM_DW, 4096, 4096, 4096, 0.37e-3 },
    };
    d.gemm = bf16;
    d.n_gemm = 3;
    d.gemm_dtype = DTYPE_BF16;
    for (int i = 0; i < 3; i++) {
        const PlanGemmPoint *q = &bf16[i];
        /* a 16-bit model's GEMM is the measured point */
        assert_true(plan_gemm_pass_time(&d, d.flops_16, 2, q->pass, q->m, q->n, q->k, 1) == q->seconds);
        /* an fp32 model's is not: the analytic model at fp32's peak */
        assert_true(plan_gemm_pass_time(&d, d.flops_fp32, 4, q->pass, q->m, q->n, q->k, 1) ==
                    plan_gemm_pass_time(&bare, bare.flops_fp32, 4, q->pass, q->m, q->n, q->k, 1));
    }
    /* the CPU's fp32 points (gemm_dtype unset: fp32) time fp32 models only */
    Device cpu = profiled();
    const PlanGemmPoint *q = &POINTS[0];
    Device cpu_bare = *plan_device_preset("cpu");
    assert_true(plan_gemm_pass_time(&cpu, cpu.flops_fp32, 4, q->pass, q->m, q->n, q->k, 1) == q->seconds);
    assert_true(plan_gemm_pass_time(&cpu, cpu.flops_16, 2, q->pass, q->m, q->n, q->k, 1) ==
                plan_gemm_pass_time(&cpu_bare, cpu_bare.flops_16, 2, q->pass, q->m, q->n, q->k, 1));
}

/* ---- a GPU profile through planc calibrate's writer and sema ----------- */

/* What planrt-calib-cuda would write on a 8-GPU node (SI units). */
static const struct { const char *pass; long m, n, k; double s; } GPU_GEMMS[] = {
    { "fwd", 128, 128, 128, 9.5e-6 }, { "dx", 128, 128, 128, 1.05e-5 }, { "dw", 128, 128, 128, 1.2e-5 },
    { "fwd", 2048, 8192, 2048, 1.05e-4 }, { "dx", 2048, 8192, 2048, 1.15e-4 }, { "dw", 2048, 8192, 2048, 1.3e-4 },
    { "fwd", 8192, 8192, 8192, 1.62e-3 }, { "dx", 8192, 8192, 8192, 1.7e-3 }, { "dw", 8192, 8192, 8192, 1.9e-3 },
};
static const struct { const char *name; int coll; int ranks; double lat, bw; } GPU_COLLS[] = {
    { "all-reduce", COLL_ALL_REDUCE, 2, 1.9e-5, 3.4e11 }, { "all-reduce", COLL_ALL_REDUCE, 4, 2.6e-5, 3.6e11 },
    { "all-reduce", COLL_ALL_REDUCE, 8, 3.8e-5, 3.75e11 }, { "all-gather", COLL_ALL_GATHER, 8, 2.1e-5, 3.5e11 },
    { "reduce-scatter", COLL_REDUCE_SCATTER, 4, 1.7e-5, 3.3e11 }, { "broadcast", COLL_BROADCAST, 2, 1.2e-5, 2.9e11 },
    { "p2p", COLL_P2P, 2, 8e-6, 2.4e11 },
};
#define N_GPU_GEMMS ((int)(sizeof GPU_GEMMS / sizeof GPU_GEMMS[0]))
#define N_GPU_COLLS ((int)(sizeof GPU_COLLS / sizeof GPU_COLLS[0]))

static void write_gpu_measurement(FILE *f)
{
    fprintf(f, "ranks 8\nbackend nccl\ndtype bf16\n");
    for (int i = 0; i < N_GPU_GEMMS; i++)
        fprintf(f, "gemm %s %ld %ld %ld %.6e\n", GPU_GEMMS[i].pass, GPU_GEMMS[i].m, GPU_GEMMS[i].n, GPU_GEMMS[i].k,
                GPU_GEMMS[i].s);
    fprintf(f, "gpu NVIDIA Test GPU 141GB\nmemory %llu\nsms 132\nflops_fp32 5.1e13\n", 150754820096ull);
    fprintf(f, "# stream 1 B 1 s\nstream 3.9e12\nlaunch 2.5e-6\nactivation 1e-12 2e-12\nsoftmax 3e-12 4e-12\n");
    for (int i = 0; i < N_GPU_COLLS; i++)
        fprintf(f, "coll %s %d %.6e %.6e\n", GPU_COLLS[i].name, GPU_COLLS[i].ranks, GPU_COLLS[i].lat, GPU_COLLS[i].bw);
    fprintf(f, "coll made-up 2 1e-6 1e9\noverlap_compute 1.12\noverlap_comm 1.31\noverhead 4.5e-5\n");
}

static bool near(double got, double want) { return fabs(got - want) <= 1e-5 * fabs(want); }

static void test_gpu_profile_round_trip(void **state)
{
    (void)state;
    /* planrt-calib-cuda's file -> planc calibrate's reader and writer */
    char *meas = NULL, *text = NULL;
    size_t mlen = 0, tlen = 0;
    FILE *f = open_memstream(&meas, &mlen);
    write_gpu_measurement(f);
    fclose(f);
    PlancCalibRaw *raw = malloc(sizeof *raw);
    f = fmemopen(meas, mlen, "r");
    assert_true(planc_calib_read(f, raw));
    fclose(f);
    f = open_memstream(&text, &tlen);
    planc_calib_write(f, raw, "gpu8", "planc calibrate --target cuda --ranks 8");
    fclose(f);
    /* fmt keeps the block byte for byte */
    DslArena a = { 0 };
    DslDiag d;
    dsl_diag_init(&d, stderr);
    DslFile *file = dsl_parse_source(&a, &d, dsl_source_from_string(&a, "gpu8.plan", text, strlen(text)));
    assert_non_null(file);
    char *again = NULL;
    size_t alen = 0;
    f = open_memstream(&again, &alen);
    dsl_format(f, file);
    fclose(f);
    assert_int_equal(alen, tlen);
    assert_memory_equal(again, text, tlen);
    /* and sema reads it under a bf16 model on its 8 GPUs */
    static const char model[] = "model m {\n    vocab 256; seq 2048; dtype bf16;\n    embedding { dim 2048 }\n"
                                "    repeat 2 { attention { heads 16 } mlp { hidden 8192 } }\n"
                                "    norm { kind layernorm }\n    lm_head { tied false }\n}\n"
                                "plan { dp 2; tp 4; pp 1; micro_batch 1; global_batch 8; }\n";
    char *full = malloc(tlen + sizeof model);
    memcpy(full, text, tlen);
    memcpy(full + tlen, model, sizeof model);
    file = dsl_parse_source(&a, &d, dsl_source_from_string(&a, "gpu8m.plan", full, strlen(full)));
    assert_non_null(file);
    Plan p;
    assert_int_equal(plan_sema(file, &d, &a, &p), 0);
    const Device *dev = &p.cluster.device;
    assert_int_equal(p.cluster.gpus_per_node, 8);
    assert_int_equal(dev->gemm_dtype, DTYPE_BF16);
    assert_int_equal(dev->sms, 132);
    assert_true(fabs((double)dev->memory - 150754820096.0) <= 1048576.0);   /* to the MiB */
    assert_true(near(dev->flops_16, 2.0 * 8192 * 8192 * 8192 / 1.62e-3));    /* the largest forward GEMM */
    assert_true(near(dev->flops_fp32, 5.1e13));
    assert_true(near(dev->stream, 3.9e12) && near(dev->launch, 2.5e-6) && near(dev->overhead, 4.5e-5));
    assert_true(near(dev->softmax_bwd, 4e-12) && near(dev->act_fwd, 1e-12));
    assert_int_equal(dev->n_gemm, N_GPU_GEMMS);
    for (int i = 0; i < N_GPU_GEMMS; i++) {
        const PlanGemmPoint *q = &dev->gemm[i];
        assert_true(q->m == GPU_GEMMS[i].m && q->n == GPU_GEMMS[i].n && q->k == GPU_GEMMS[i].k);
        assert_true(near(q->seconds, GPU_GEMMS[i].s));
        /* a bf16 model's GEMM of a measured shape takes its measured time */
        assert_true(near(plan_gemm_pass_time(dev, dev->flops_16, 2, q->pass, q->m, q->n, q->k, 1), GPU_GEMMS[i].s));
    }
    const Link *l = &p.cluster.intra;
    assert_int_equal(l->n_coll, N_GPU_COLLS);   /* the unknown collective did not get through */
    assert_true(near(l->overlap_compute, 1.12) && near(l->overlap_comm, 1.31) && l->efficiency == 1);
    for (int i = 0; i < N_GPU_COLLS; i++) {
        bool found = false;
        for (int j = 0; j < l->n_coll; j++)
            if (l->coll[j].coll == GPU_COLLS[i].coll && l->coll[j].ranks == GPU_COLLS[i].ranks) {
                found = true;
                assert_true(near(l->coll[j].latency, GPU_COLLS[i].lat) && near(l->coll[j].busbw, GPU_COLLS[i].bw));
            }
        assert_true(found);
        /* and the cost model prices the measured size with its own figures */
        PlanCollective k = (PlanCollective)GPU_COLLS[i].coll;
        int n = GPU_COLLS[i].ranks;
        double M = 64 << 20, want = GPU_COLLS[i].lat + plan_bus_factor(k, n) * M / GPU_COLLS[i].bw;
        assert_true(near(plan_comm_cost(&p.cluster, k, ALGO_AUTO, plan_group_shape(8, 1, n), M).time, want));
    }
    /* the alpha-beta figures are the largest all-reduce's, per round */
    assert_true(near(l->latency, 3.8e-5 / 14) && near(l->bandwidth, 3.75e11));
    free(meas); free(text); free(again); free(raw); free(full);
    dsl_arena_free(&a);
}

/* A CPU measurement: fp32 points, the host's memory share, no SMs. */
static void test_cpu_profile_keys(void **state)
{
    (void)state;
    static const char meas[] = "ranks 2\nbackend mpi\ndtype fp32\ngemm fwd 512 512 512 2.7e-3\n"
                               "stream 4e9\nlaunch 1e-6\ncoll all-reduce 2 1e-5 3e9\noverhead 1e-5\n";
    PlancCalibRaw *raw = malloc(sizeof *raw);
    FILE *f = fmemopen((void *)meas, sizeof meas - 1, "r");
    assert_true(planc_calib_read(f, raw));
    fclose(f);
    char *text = NULL;
    size_t tlen = 0;
    f = open_memstream(&text, &tlen);
    planc_calib_write(f, raw, "cpu2", "planc calibrate --target cpu --ranks 2");
    fprintf(f, "model m {\n    vocab 256; seq 128; dtype fp32;\n    embedding { dim 256 }\n"
               "    repeat 2 { attention { heads 4 } mlp { hidden 1024 } }\n    norm { kind layernorm }\n"
               "    lm_head { tied false }\n}\nplan { dp 2; tp 1; pp 1; micro_batch 1; global_batch 8; }\n");
    fclose(f);
    DslArena a = { 0 };
    DslDiag d;
    dsl_diag_init(&d, stderr);
    DslFile *file = dsl_parse_source(&a, &d, dsl_source_from_string(&a, "cpu2.plan", text, strlen(text)));
    assert_non_null(file);
    Plan p;
    assert_int_equal(plan_sema(file, &d, &a, &p), 0);
    assert_int_equal(p.cluster.device.gemm_dtype, DTYPE_FP32);
    assert_int_equal(p.cluster.device.sms, 0);
    assert_true(near(p.cluster.device.flops_fp32, 2.0 * 512 * 512 * 512 / 2.7e-3));
    assert_true(p.cluster.device.flops_16 == p.cluster.device.flops_fp32);
    assert_int_equal(p.cluster.intra.n_coll, 1);
    assert_int_equal(p.cluster.intra.coll[0].ranks, 2);
    free(text); free(raw);
    dsl_arena_free(&a);
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
        cmocka_unit_test(test_collectives_per_group_size),
        cmocka_unit_test(test_gemm_points_by_dtype),
        cmocka_unit_test(test_gpu_profile_round_trip),
        cmocka_unit_test(test_cpu_profile_keys),
        cmocka_unit_test(test_overlap_and_overhead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
