/*
 * test_search_bench.c: `make bench-search` — how fast `planc search` covers
 * its whole space on the cases of the issue, as one table:
 *
 *   case  gpus  layouts  feasible  evaluated  time(s)  layouts/s  goal(s)
 *
 * `layouts` is every layout of the space (nothing sampled); `evaluated`
 * how many of them needed the full evaluation of `planc check`, the rest
 * being settled by the memoised bounds (search.c); `time` is the search
 * (the goal) in wall-clock seconds, `cpu` the same in CPU
 * seconds of the one core it ran on (what the goal means on a loaded
 * machine), `sim-K` the lowering and simulation of the K results shown
 * afterwards, as `check` would simulate them. Each case runs a few
 * times and reports the fastest run (the machine is shared); with
 * --strict the exit status is 1 when a case's CPU time misses its goal.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/presets.h"
#include "planner/search.h"

typedef struct {
    const char *name;
    Plan        plan;
    double      goal;      /* s, the target on one core */
} Case;

static Layer l405[PLAN_PRESET_LAYERS(126)], l1t[PLAN_PRESET_LAYERS(128)],
             l530[PLAN_PRESET_LAYERS(105)], l70[PLAN_PRESET_LAYERS(80)];

static Plan auto_plan(Model m, Cluster c, int64_t global_batch)
{
    return plan_preset_plan(m, c, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO,
                            global_batch, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO);
}

int main(int argc, char **argv)
{
    bool strict = argc > 1 && strcmp(argv[1], "--strict") == 0;
    Model m405, m1t, m530, m70;
    /* Llama 3 405B (Meta, "The Llama 3 Herd of Models", 2024, Table 3) */
    plan_preset_llama(&m405, l405, "llama3-405b", 126, 16384, 128, 8, 53248, 8192, 128256, DTYPE_BF16);
    /* GPT 1T (Narayanan et al. 2021, Table 1: 128 layers, h 25600, 160 heads) */
    plan_preset_gpt(&m1t, l1t, "gpt-1t", 128, 25600, 160, 2048, 51200, DTYPE_FP16);
    /* Megatron-Turing NLG 530B (Smith et al. 2022: 105 layers, h 20480, 128 heads) */
    plan_preset_gpt(&m530, l530, "turing-530b", 105, 20480, 128, 2048, 51200, DTYPE_FP16);
    plan_preset_llama(&m70, l70, "llama3-70b", 80, 8192, 64, 8, 28672, 8192, 128256, DTYPE_BF16);
    Case cases[] = {
        { "llama3-405b / 16384 H100", auto_plan(m405, plan_preset_dgx_h100(2048), 2048), 1.0 },
        { "gpt-1t / 3072 A100", auto_plan(m1t, plan_preset_dgx_a100(384), 3072), 0.2 },
        { "turing-530b / 4480 A100", auto_plan(m530, plan_preset_dgx_a100(560), 1920), 0 },
        { "llama3-70b / 128 H100", auto_plan(m70, plan_preset_dgx_h100(16), 512), 0 },
    };
    int n = (int)(sizeof cases / sizeof cases[0]), missed = 0;
    PlanSearchOptions o = plan_search_defaults();
    printf("# planc search benchmark: exhaustive, one core, best of 3 runs; top %d kept\n", o.top);
    printf("# %-26s %6s %9s %9s %9s %8s %8s %10s %8s %9s  %s\n", "case", "gpus", "layouts", "feasible",
           "evaluated", "time(s)", "cpu(s)", "layouts/s", "goal(s)", "sim-K(s)", "best layout");
    for (int i = 0; i < n; i++) {
        PlanSearch best = { 0 };
        double tmin = 1e30;
        for (int r = 0; r < 3; r++) {
            PlanSearch s;
            char why[256];
            if (!plan_search(&cases[i].plan, &o, &s, why, sizeof why)) {
                fprintf(stderr, "%s: %s\n", cases[i].name, why);
                return 2;
            }
            if (s.search_time_s < tmin) {
                tmin = s.search_time_s;
                plan_search_free(&best);
                best = s;
            } else {
                plan_search_free(&s);
            }
        }
        char lay[128] = "nothing fits";
        if (best.n_results) {
            const Layout *l = &best.results[0].layout;
            snprintf(lay, sizeof lay, "dp %d tp %d pp %d zero %d mb %lld %s:%d %s sp %d, %.3f s",
                     l->dp, l->tp, l->pp, l->zero, (long long)l->micro_batch,
                     plan_schedule_name(l->schedule), l->chunks, plan_recompute_name(l->recompute),
                     l->sequence_parallel, best.results[0].step_time);
        }
        const Cluster *c = &cases[i].plan.cluster;
        char goal[16] = "-";
        if (cases[i].goal > 0) snprintf(goal, sizeof goal, "%.1f", cases[i].goal);
        printf("  %-26s %6lld %9lld %9lld %9lld %8.3f %8.3f %10.0f %8s %9.3f  %s\n", cases[i].name,
               (long long)(c->nodes * c->gpus_per_node), (long long)best.considered,
               (long long)best.feasible, (long long)best.evaluated, tmin, best.search_cpu_s,
               tmin > 0 ? best.considered / tmin : 0, goal, best.simulate_time_s, lay);
        if (best.bound_violations) {
            fprintf(stderr, "%s: %lld bound violations\n", cases[i].name, (long long)best.bound_violations);
            missed++;
        }
        if (cases[i].goal > 0 && best.search_cpu_s > cases[i].goal) missed++;
        plan_search_free(&best);
    }
    return strict && missed ? 1 : 0;
}
