/*
 * evaluate.c: the evaluation driver — plan_evaluate, what `check` prints
 * and `search` ranks.
 *
 * The planner core runs one way: each file calls only files on rows below
 * its own, so no two files call each other.
 *
 *     row 4   evaluate.c       (called by search.c, report.c, validate.c,
 *                                cli/cmd_trace.c, codegen/emit.c)
 *     row 3   simulate.c
 *     row 2   lower.c
 *     row 1   schedule.c   memory.c
 *     row 0   cost.c
 *     base    model.c   comm.c   layout.c
 *
 * and the calls, each downwards:
 *
 *   evaluate.c -> simulate.c (plan_simulate_costs), lower.c
 *                 (plan_op_costs_fill), memory.c, cost.c, layout.c (check),
 *                 model.c (the parameter count)
 *   simulate.c -> lower.c (plan_expand_step, plan_expand_tail), schedule.c
 *   lower.c    -> schedule.c (step orders, plan_reduce_after); cost.c and
 *                 layout.c (plan_lower builds the table of a Plan)
 *   memory.c   -> model.c (it reads the cost table's fields, calls nothing of it)
 *   schedule.c -> nothing (it reads the tables' durations)
 *   cost.c     -> model.c, comm.c, layout.c
 *
 *   - cost.c: the cost table only (per-chunk seconds and bytes, per-stage
 *     optimizer and step-level collectives); calls model.c and comm.c.
 *   - schedule.c: the step orders of every schedule, ZB-H1's list
 *     scheduler, where the reductions go, the closed forms and the search's
 *     bound; calls nothing of the planner.
 *   - lower.c: Plan + cost table + schedule -> Program; its expansion of a
 *     micro-step into ops (plan_expand_step, plan_expand_tail) is the one
 *     rule the simulator's fast path reuses. Calls cost.c and schedule.c.
 *   - simulate.c: times a Program (plan_simulate) or, op for op, the ops
 *     lower.c's expansion makes of the schedule's steps without keeping
 *     them (plan_simulate_costs): equal doubles. Calls lower.c's expansion
 *     and schedule.c.
 *   - evaluate.c (this file): layout check, cost table, memory, the fast
 *     path's simulation and the breakdown of the step into PlanTimes.
 *
 * The step time is the simulated time of the very Program `check` lowers
 * and `emit` writes; the breakdown is of the stage that ends last, each
 * item as the simulator booked it (simulate.h, PlanStageTimes), so the
 * items add up to the step and the bubble is the one the README states.
 */
#include "planner/evaluate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "planner/cost.h"
#include "planner/layout.h"
#include "planner/memory.h"
#include "planner/model.h"
#include "planner/program.h"
#include "planner/schedule.h"
#include "planner/simulate.h"

/* Seconds of chunk v's all-to-alls that overlap_moe_a2a hides on stage s
 * over a step: what each paired step of the schedule hides (lower.c);
 * the schedule walked only when something is hidden. */
static double paired_hidden(const PlanCosts *c, int s, int v, const PlanChunkCost *k)
{
    const Layout *l = &c->layout;
    if (k->fwd_ep_hidden <= 0 && k->bwd_ep_hidden <= 0) return 0;
    if (l->schedule != SCHED_1F1B && l->schedule != SCHED_INTERLEAVED) return 0;
    int n = (int)(2 * c->n_micro * (l->schedule == SCHED_INTERLEAVED ? l->chunks : 1));
    double h = 0;
    for (int i = 0; i < n; i++) {
        PlanStep st = plan_schedule_step_x(l->schedule, l->pp, s, c->n_micro, l->chunks, c->warmup_extra, i);
        if (st.paired && st.chunk == v) h += st.kind == PLAN_STEP_F ? k->fwd_ep_hidden : k->bwd_ep_hidden;
    }
    return h;
}

/* Why: the step time is the simulated time of the Program `check` lowers
 * — no closed form covers uneven chunks, m < p, ZeRO-3's gathers queueing
 * behind reductions and zb-h1's list-scheduled weight passes at once —
 * computed by plan_simulate_costs() without building the ops. The
 * breakdown is of the stage that ends last: its compute split into GEMMs,
 * recomputation and TP collectives from the cost table, the rest as the
 * simulator booked it. */
static bool step_times(const PlanCosts *c, PlanEval *ev)
{
    const Layout *l = &c->layout;
    int p = l->pp;
    double m = (double)c->n_micro;
    PlanOpCosts oc;
    PlanSimSummary sm;
    bool ok = plan_op_costs_alloc(&oc, p, l->chunks);
    if (ok) {
        plan_op_costs_fill(c, &oc);
        ok = plan_simulate_costs(&oc, &sm);
    }
    plan_op_costs_free(&oc);
    if (!ok) return false;
    ev->step_time = sm.step_time;
    ev->bubble_fraction = sm.bubble_fraction;
    ev->critical = sm.critical;

    int crit = sm.critical;
    PlanTimes *t = &ev->times;
    memset(t, 0, sizeof *t);
    for (int v = 0; v < l->chunks; v++) {
        const PlanChunkCost *k = &c->cost[v * p + crit];
        t->compute += m * (k->fwd - k->fwd_tp - k->fwd_ep - k->fwd_cp + k->bwd - k->bwd_tp - k->bwd_ep - k->bwd_cp);
        t->cp += m * (k->fwd_cp + k->bwd_cp);
        t->cp_total += m * (k->fwd_cp_total + k->bwd_cp_total);
        t->recompute += m * (k->recompute);
        t->tp += m * (k->fwd_tp + k->bwd_tp);
        t->ep += m * (k->fwd_ep + k->bwd_ep) - paired_hidden(c, crit, v, k);
        t->dp_total += (l->zero >= 2 ? m : 1) * k->reduce;
        t->gather_total += 2 * m * k->gather;
    }
    const PlanStageTimes *st = &sm.times;
    t->p2p = st->p2p;
    t->dp_exposed = st->comm_wait;
    t->gather_exposed = st->stall;
    t->compute += st->slowed;   /* compute slowed by the collectives beside it (measured factor) */
    t->sync = st->sync;
    t->sp_norm = st->sp_norm;
    t->embed = st->embed;
    t->norm = st->norm;
    t->optimizer = st->opt;
    t->bubble = st->bubble;
    return true;
}

/* ---- evaluation ------------------------------------------------------- */

static const char *largest_item(const PlanStageMem *m, uint64_t *bytes)
{
    const char *name = "parameters";
    *bytes = m->params_bytes;
    if (m->grads_bytes > *bytes) { name = "gradients"; *bytes = m->grads_bytes; }
    if (m->optimizer_bytes > *bytes) { name = "optimizer state"; *bytes = m->optimizer_bytes; }
    if (m->activations_bytes > *bytes) { name = "activations"; *bytes = m->activations_bytes; }
    if (m->buffers_bytes > *bytes) { name = "buffers"; *bytes = m->buffers_bytes; }
    return name;
}

void plan_evaluate_layout_shaped(const Plan *p, const struct PlanShapes *sh, const Layout *l, PlanEval *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->layout = *l;
    ev->pp = l->pp;
    PlanCosts c;
    bool legal = plan_layout_check(p, l, ev->why, sizeof ev->why);
    if (!legal || !(sh ? plan_costs_shaped(p, sh, l, &c) : plan_costs(p, l, &c))) {
        if (legal) plan_costs_free(&c);
        if (!plan_model_params(&p->model, &ev->params))
            snprintf(ev->why, sizeof ev->why, "the parameter count overflows 64 bits");
        else if (legal)
            snprintf(ev->why, sizeof ev->why, "the cost table could not be built (out of memory)");
        return;
    }
    ev->params = ev->active_params = c.params_total;
    int moe = 0;   /* (from the cost table: a dense model's evaluation walks no layers) */
    for (int k = 0; k < c.n_chunks; k++) moe += c.cost[k].moe_layers;
    if (moe && !plan_model_active_params(&p->model, &ev->active_params)) ev->active_params = ev->params;
    ev->valid = true;
    ev->n_micro = c.n_micro;
    ev->stages = calloc((size_t)l->pp, sizeof *ev->stages);
    if (!ev->stages) { ev->valid = false; plan_costs_free(&c); return; }
    plan_memory(p, &c, ev->stages);
    ev->feasible = true;
    int64_t worst = INT64_MAX;
    for (int s = 0; s < l->pp; s++) {
        if (ev->stages[s].total_bytes > ev->peak_memory) ev->peak_memory = ev->stages[s].total_bytes;
        if (ev->stages[s].headroom < worst) { worst = ev->stages[s].headroom; ev->worst_stage = s; }
    }
    if (worst < 0) {
        const PlanStageMem *m = &ev->stages[ev->worst_stage];
        uint64_t b;
        const char *item = largest_item(m, &b);
        ev->feasible = false;
        snprintf(ev->why, sizeof ev->why,
                 "stage %d does not fit: needs %.2f GiB of %.2f GiB; largest item: %s %.2f GiB",
                 ev->worst_stage, m->total_bytes / 1073741824.0, m->capacity / 1073741824.0,
                 item, b / 1073741824.0);
    }
    if (!step_times(&c, ev)) {
        ev->valid = ev->feasible = false;
        snprintf(ev->why, sizeof ev->why, "the schedule could not be simulated (out of memory or deadlock)");
        plan_costs_free(&c);
        return;
    }
    double gpus = (double)plan_dp_cp(l) * l->tp * l->pp;
    /* every GEMM is split t ways and every sequence cp ways, so the step's
     * FLOPs are t x cp x dp x m x the per-GPU forward FLOPs of all chunks
     * (x 3: backward = 2 x forward) */
    double fwd = 0, rec = 0;
    for (int k = 0; k < c.n_chunks; k++) { fwd += c.cost[k].flops_fwd; rec += c.cost[k].flops_recompute; }
    double reps = (double)l->tp * plan_dp_cp(l) * (double)c.n_micro;
    ev->model_flops = 3 * fwd * reps;
    ev->hw_flops = ev->model_flops + rec * reps;
    if (ev->step_time > 0) {
        ev->tokens_per_s = (double)l->global_batch * (double)p->model.seq / ev->step_time;
        ev->tflops_per_gpu = ev->model_flops / ev->step_time / gpus / 1e12;
        ev->mfu = ev->model_flops / (ev->step_time * gpus * c.peak_flops);
        ev->hfu = ev->hw_flops / (ev->step_time * gpus * c.peak_flops);
    }
    plan_costs_free(&c);
}

void plan_evaluate_layout(const Plan *p, const Layout *l, PlanEval *ev)
{
    plan_evaluate_layout_shaped(p, NULL, l, ev);
}

void plan_evaluate(const Plan *p, PlanEval *ev)
{
    Layout l = plan_layout_defaults(p);
    plan_evaluate_layout(p, &l, ev);
}

void plan_eval_free(PlanEval *ev)
{
    free(ev->stages);
    ev->stages = NULL;
}
