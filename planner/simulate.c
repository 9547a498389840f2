/*
 * simulate.c: time a Program, op by op, over all stages.
 *
 * Each stage has three streams: compute (forward/backward kernels with
 * their synchronous TP collectives, receive waits, optimizer), comm
 * (DP and ZeRO collectives, which overlap compute) and p2p (pipeline
 * sends, asynchronous). Ops of a stage are issued in list order; an op
 * starts when its stream is free and its inputs are there:
 *  - a RECV_ACT/RECV_GRAD ends when the matching SEND's data has arrived
 *    (send start + transfer), and the compute stream waits for it;
 *  - a GATHER_PARAMS is issued when the compute stream reaches it and runs
 *    in `buckets` equal pieces; layer j of the compute op it feeds starts
 *    only after piece j has arrived (ZeRO-3 prefetch, layer by layer);
 *  - a REDUCE_GRADS runs in `buckets` pieces; piece j may start once layer
 *    j of the op it drains has produced its gradients (DDP / ZeRO bucket
 *    overlap with the backward);
 *  - OPT_STEP waits for all of the stage's reductions; SYNC_PARAMS follows it.
 *
 * The simulator advances every stage as far as it can and repeats until
 * all ops ran; a pass that moves nothing means a deadlock.
 *
 * plan_simulate_costs() is the same simulation for the fast path: it runs
 * each stage's micro-steps (lower.c's schedule orders) through exactly the
 * ops expand() would make of them, with the same arithmetic (fed(),
 * drain()), keeping only the streams' clocks and the arrival tables — no
 * op list, no timeline. tests/test_planner.c holds the two equal on
 * thousands of random layouts.
 */
#include "planner/simulate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "planner/plan.h"

/* fmax without the NaN handling (no time here is NaN), inlined. */
static inline double later(double a, double b) { return a > b ? a : b; }

typedef struct {
    int    pc;                     /* next op */
    double t_comp, t_comm, t_p2p;  /* when each stream is free */
} StageState;

/* Index of a (vstage, mb) send in the arrival tables. */
static size_t slot(const PlanProgram *p, int vstage, int mb)
{
    return (size_t)vstage * (size_t)p->n_micro + (size_t)mb;
}

static bool is_compute(PlanOpKind k)
{
    return k == OP_FWD || k == OP_BWD || k == OP_BWD_INPUT || k == OP_BWD_WEIGHT;
}

/* End of a compute op of `dur` seconds starting no earlier than `start`,
 * whose layer j (of n) may start only after piece j of a gather that
 * started at g0 and lasts gdur has arrived. Layer j ends at
 * max(t_{j-1}, g0 + (j+1) gdur/n) + dur/n; unrolled, the maximum is at
 * j = 0 or j = n-1 (the terms are linear in j). */
static double fed(double start, double dur, double g0, double gdur, int n)
{
    if (n < 1) n = 1;
    return later(start + dur, later(g0 + gdur / n + dur, g0 + gdur + dur / n));
}

static double fed_end(double start, double dur, const PlanOp *g, const PlanSpan *gs)
{
    return fed(start, dur, gs->start, g->dur, g->buckets);
}

/* Start and end of a reduction of rdur seconds in n buckets draining
 * compute span c: bucket j starts once layer j has produced its gradients
 * and the previous bucket is done; unrolled as in fed(). */
static PlanSpan drain(double comm_free, double rdur, int n, PlanSpan c)
{
    if (n < 1) n = 1;
    double layer = (c.end - c.start) / n;
    return (PlanSpan){ later(comm_free, c.start + layer),
                       later(comm_free + rdur, later(c.start + layer + rdur, c.end + rdur / n)) };
}

static PlanSpan drained(double comm_free, const PlanOp *r, PlanSpan c)
{
    return drain(comm_free, r->dur, r->buckets, c);
}

/* Try to run the next op of stage s; false if it must wait for a send. */
static bool step_op(const PlanProgram *p, int s, StageState *st, PlanSpan *span,
                    double *act_arr, double *grad_arr, int *feeder)
{
    const PlanStageProgram *sp = &p->stages[s];
    const PlanOp *o = &sp->ops[st->pc];
    PlanSpan *sn = &span[st->pc];
    switch (o->kind) {
    case OP_FWD: case OP_BWD: case OP_BWD_INPUT: case OP_BWD_WEIGHT: {
        sn->start = st->t_comp;
        int g = feeder[st->pc];
        sn->end = g >= 0 ? fed_end(sn->start, o->dur, &sp->ops[g], &span[g]) : sn->start + o->dur;
        st->t_comp = sn->end;
        break;
    }
    case OP_RECV_ACT: case OP_RECV_GRAD: {
        int from = o->kind == OP_RECV_ACT ? o->vstage - 1 : o->vstage + 1;
        double arr = (o->kind == OP_RECV_ACT ? act_arr : grad_arr)[slot(p, from, o->mb)];
        if (isnan(arr)) return false;
        sn->start = st->t_comp;
        sn->end = later(st->t_comp, arr);
        st->t_comp = sn->end;
        break;
    }
    case OP_SEND_ACT: case OP_SEND_GRAD:
        sn->start = later(st->t_comp, st->t_p2p);
        sn->end = sn->start + o->dur;
        st->t_p2p = sn->end;
        if (o->stream == STREAM_COMPUTE) st->t_comp = sn->end;   /* a blocking send */
        (o->kind == OP_SEND_ACT ? act_arr : grad_arr)[slot(p, o->vstage, o->mb)] = sn->end;
        break;
    case OP_GATHER_PARAMS:
        sn->start = later(st->t_comp, st->t_comm);
        sn->end = sn->start + o->dur;
        st->t_comm = sn->end;
        break;
    case OP_REDUCE_GRADS:
        *sn = o->pair >= 0 ? drained(st->t_comm, o, span[o->pair])
                           : (PlanSpan){ later(st->t_comm, st->t_comp), 0 };
        if (o->pair < 0) sn->end = sn->start + o->dur;
        st->t_comm = sn->end;
        break;
    case OP_SP_NORM_REDUCE: case OP_EMBED_REDUCE: case OP_NORM_REDUCE:
        /* blocking step-level collectives: they wait for the reductions
         * and hold the compute stream (the optimizer needs their sums) */
    case OP_OPT_STEP:
        sn->start = later(st->t_comp, st->t_comm);
        sn->end = sn->start + o->dur;
        st->t_comp = sn->end;
        break;
    case OP_SYNC_PARAMS:
        sn->start = later(st->t_comp, st->t_comm);
        sn->end = sn->start + o->dur;
        st->t_comm = st->t_comp = sn->end;
        break;
    }
    st->pc++;
    return true;
}

bool plan_simulate(const PlanProgram *p, PlanSimResult *out)
{
    memset(out, 0, sizeof *out);
    out->pp = p->pp;
    size_t slots = (size_t)p->pp * (size_t)p->chunks * (size_t)p->n_micro;
    double *act = malloc(slots * sizeof *act), *grad = malloc(slots * sizeof *grad);
    StageState *st = calloc((size_t)p->pp, sizeof *st);
    int **feeder = calloc((size_t)p->pp, sizeof *feeder);
    out->span = calloc((size_t)p->pp, sizeof *out->span);
    out->busy = calloc((size_t)p->pp, sizeof *out->busy);
    bool ok = act && grad && st && feeder && out->span && out->busy;
    for (size_t i = 0; ok && i < slots; i++) act[i] = grad[i] = NAN;
    for (int s = 0; ok && s < p->pp; s++) {
        const PlanStageProgram *sp = &p->stages[s];
        out->span[s] = calloc((size_t)sp->n_ops + 1, sizeof **out->span);
        feeder[s] = malloc(((size_t)sp->n_ops + 1) * sizeof **feeder);
        ok = out->span[s] && feeder[s];
        for (int i = 0; ok && i < sp->n_ops; i++) feeder[s][i] = -1;
        for (int i = 0; ok && i < sp->n_ops; i++)
            if (sp->ops[i].kind == OP_GATHER_PARAMS && sp->ops[i].pair >= 0)
                feeder[s][sp->ops[i].pair] = i;
    }
    /* advance every stage until blocked; repeat while anything moves */
    bool moved = true, all = false;
    while (ok && moved && !all) {
        moved = false;
        all = true;
        for (int s = 0; s < p->pp; s++) {
            while (st[s].pc < p->stages[s].n_ops &&
                   step_op(p, s, &st[s], out->span[s], act, grad, feeder[s]))
                moved = true;
            if (st[s].pc < p->stages[s].n_ops) all = false;
        }
    }
    ok = ok && all;
    for (int s = 0; ok && s < p->pp; s++) {
        const PlanStageProgram *sp = &p->stages[s];
        for (int i = 0; i < sp->n_ops; i++) {
            PlanSpan sn = out->span[s][i];
            out->step_time = later(out->step_time, sn.end);
            if (is_compute(sp->ops[i].kind)) {
                out->pipeline_time = later(out->pipeline_time, sn.end);
                out->busy[s] += sp->ops[i].dur;
            }
        }
        out->busy_max = later(out->busy_max, out->busy[s]);
    }
    if (ok && out->busy_max > 0)
        out->bubble_fraction = (out->pipeline_time - out->busy_max) / out->busy_max;
    for (int s = 0; feeder && s < p->pp; s++) free(feeder[s]);
    free(feeder); free(st); free(act); free(grad);
    if (!ok) plan_sim_free(out);
    return ok;
}

void plan_sim_free(PlanSimResult *r)
{
    for (int s = 0; r->span && s < r->pp; s++) free(r->span[s]);
    free(r->span);
    free(r->busy);
    memset(r, 0, sizeof *r);
}

/* ---- the same simulation over the micro-steps ------------------------- */

/* One stage's state in plan_simulate_costs: the three streams of
 * step_op(), the next micro-step, and what the summary needs. */
typedef struct {
    int    next;
    PlanStep cur;                  /* the step at `next` */
    double t_comp, t_comm, t_p2p;
    double busy, comp_end;
} StepState;

/* Why: run one micro-step exactly as step_op() runs the ops expand()
 * (lower.c) makes of it — the gather (ZeRO-3), the receive, the compute
 * op, the send, the reduction — or return false, changing nothing, when
 * its receive's data has not been sent yet. */
static bool run_step(const PlanOpCosts *c, int s, StepState *st, PlanStep x, double *act,
                     double *grad, double *end_max)
{
    int p = c->pp, n = p * c->chunks, k = x.chunk * p + s;
    size_t m = (size_t)c->n_micro;
    bool split = c->schedule == SCHED_ZB_H1;
    bool has_prev = k > 0 && p > 1, has_next = k < n - 1 && p > 1;
    double arr = -INFINITY;
    if (x.kind == PLAN_STEP_F && has_prev) arr = act[(size_t)(k - 1) * m + (size_t)x.mb];
    if (x.kind == PLAN_STEP_B && has_next) arr = grad[(size_t)(k + 1) * m + (size_t)x.mb];
    if (isnan(arr)) return false;
    bool gathers = c->zero >= 3 && x.kind != PLAN_STEP_W;
    double g0 = 0;
    if (gathers) {
        g0 = later(st->t_comp, st->t_comm);
        st->t_comm = g0 + c->gather[k];
    }
    double dur = x.kind == PLAN_STEP_F ? c->fwd[k]
               : x.kind == PLAN_STEP_W ? c->bwd_weight[k]
               : split ? c->bwd_input[k] : c->bwd[k];
    int buckets = c->layers[k] > 0 ? c->layers[k] : 1;
    PlanSpan sp = { later(st->t_comp, arr), 0 };
    sp.end = gathers ? fed(sp.start, dur, g0, c->gather[k], buckets) : sp.start + dur;
    st->t_comp = st->comp_end = sp.end;
    st->busy += dur;
    *end_max = later(*end_max, sp.end);
    if ((x.kind == PLAN_STEP_F && has_next) || (x.kind == PLAN_STEP_B && has_prev)) {
        double e = later(sp.end, st->t_p2p) + c->p2p[k];
        st->t_p2p = e;
        if (c->p2p_blocking) st->t_comp = e;
        (x.kind == PLAN_STEP_F ? act : grad)[(size_t)k * m + (size_t)x.mb] = e;
        *end_max = later(*end_max, e);
    }
    bool drains = x.kind == PLAN_STEP_W || (x.kind == PLAN_STEP_B && !split);
    double rd = drains ? plan_reduce_after(c, k, x.mb) : 0;
    if (rd > 0) {
        st->t_comm = drain(st->t_comm, rd, buckets, sp).end;
        *end_max = later(*end_max, st->t_comm);
    }
    return true;
}

bool plan_simulate_costs(const PlanOpCosts *c, PlanSimSummary *out)
{
    int p = c->pp, v = c->chunks;
    size_t m = c->n_micro > 0 ? (size_t)c->n_micro : 0, per = 3 * m * (size_t)v;
    memset(out, 0, sizeof *out);
    size_t slots = (size_t)p * (size_t)v * m;
    double *act = malloc((slots + 1) * sizeof *act), *grad = malloc((slots + 1) * sizeof *grad);
    bool zb = c->schedule == SCHED_ZB_H1;   /* list-scheduled: the steps are built first */
    PlanStep *buf = malloc(((zb ? (size_t)p * per : 0) + 1) * sizeof *buf);
    PlanStep **order = malloc((size_t)p * sizeof *order);
    int *len = calloc((size_t)p, sizeof *len);
    StepState *st = calloc((size_t)p, sizeof *st);
    bool ok = m > 0 && act && grad && buf && order && len && st;
    for (int s = 0; ok && s < p; s++) {
        order[s] = zb ? buf + (size_t)s * per : NULL;
        len[s] = 2 * (int)m * (c->schedule == SCHED_INTERLEAVED ? v : 1);
    }
    ok = ok && (!zb || plan_schedule_steps(c, order, len));
    for (int s = 0; ok && s < p; s++)
        st[s].cur = zb ? order[s][0] : plan_schedule_step(c->schedule, p, s, (int64_t)m, v, 0);
    if (ok) {   /* all-ones bytes are a NaN: "not sent yet" */
        memset(act, 0xff, slots * sizeof *act);
        memset(grad, 0xff, slots * sizeof *grad);
    }
    /* advance every stage until blocked; repeat while anything moves */
    double end_max = 0;
    bool moved = true, all = false;
    while (ok && moved && !all) {
        moved = false;
        all = true;
        for (int s = 0; s < p; s++) {
            StepState *t = &st[s];
            while (t->next < len[s] && run_step(c, s, t, t->cur, act, grad, &end_max)) {
                if (++t->next < len[s])
                    t->cur = zb ? order[s][t->next]
                                : plan_schedule_step(c->schedule, p, s, (int64_t)m, v, t->next);
                moved = true;
            }
            if (t->next < len[s]) all = false;
        }
    }
    ok = ok && all;
    for (int s = 0; ok && s < p; s++) {
        StepState *t = &st[s];
        for (int ch = 0; c->reduce_after_flush && ch < v; ch++) {   /* after the flush */
            int k = ch * p + s;
            double d = c->reduce[k];
            if (d > 0) t->t_comm = later(t->t_comm, t->t_comp) + d;
        }
        out->pipeline_time = later(out->pipeline_time, t->comp_end);
        out->busy_max = later(out->busy_max, t->busy);
        /* OPT_STEP waits for every reduction; SYNC_PARAMS follows it */
        double opt0 = later(t->t_comp, t->t_comm), end = opt0 + c->opt[s], sync = 0;
        for (int ch = 0; ch < v; ch++) sync += c->sync[ch * p + s];
        if (sync > 0) end = later(end, t->t_comm) + sync;
        double stage_end = later(end, later(t->t_p2p, t->t_comm));
        if (s == 0 || stage_end > out->step_time) {
            out->step_time = stage_end;
            out->critical = s;
            out->reduce_wait = opt0 - t->t_comp;
        }
    }
    if (ok) out->step_time = later(out->step_time, end_max);
    if (ok && out->busy_max > 0)
        out->bubble_fraction = (out->pipeline_time - out->busy_max) / out->busy_max;
    free(act); free(grad); free(buf); free(order); free(len); free(st);
    return ok;
}
