/*
 * simulate.c: time a Program, op by op, over all stages.
 *
 * Each stage has three streams: compute (forward/backward kernels with
 * their synchronous TP collectives, receive waits, the step-level
 * collectives, the optimizer), comm (DP and ZeRO collectives, which
 * overlap compute) and p2p (pipeline sends, asynchronous unless the plan
 * makes them blocking). Ops of a stage are issued in list order; an op
 * starts when its stream is free and its inputs are there:
 *  - a RECV_ACT/RECV_GRAD ends when the matching SEND's data has arrived
 *    (send start + transfer), and the compute stream waits for it;
 *  - a GATHER_PARAMS is issued when the compute stream reaches it and runs
 *    in `buckets` equal pieces; layer j of the compute op it feeds starts
 *    only after piece j has arrived (ZeRO-3 prefetch, layer by layer);
 *  - a REDUCE_GRADS runs in `buckets` pieces; piece j may start once layer
 *    j of the op it drains has produced its gradients (DDP / ZeRO bucket
 *    overlap with the backward);
 *  - SP_NORM_REDUCE, EMBED_REDUCE and NORM_REDUCE need every gradient of
 *    the stage: they start when all three streams are idle, and the last
 *    two, collectives over several stages, when every member stage has
 *    got there (the embedding group's two ends; all stages); they block
 *    the compute stream;
 *  - OPT_STEP waits for all of the stage's reductions; SYNC_PARAMS follows it.
 *
 * One function times one op (run_op) and books where the compute stream's
 * time went (PlanStageTimes: the bubble is its waiting for other stages,
 * see simulate.h). Two drivers feed it:
 *  - plan_simulate walks the Program's op lists and keeps every span;
 *  - plan_simulate_costs, the fast path, walks each stage's micro-steps
 *    (schedule.c) and feeds run_op the ops plan_expand_step and
 *    plan_expand_tail (lower.c) make of them — the very ops
 *    plan_lower_costs puts in the Program — keeping only one step's spans.
 * Both advance every stage as far as it can and repeat until all ops ran
 * (a pass that moves nothing is a deadlock), so their figures are equal
 * doubles; tests/test_planner.c holds them equal with ==.
 */
#include "planner/simulate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "planner/plan.h"
#include "planner/schedule.h"

/* fmax without the NaN handling (no time here is NaN), inlined. */
static inline double later(double a, double b) { return a > b ? a : b; }

/* One stage's streams and its books. */
typedef struct {
    double t_comp, t_comm, t_p2p;  /* when each stream is free */
    double comp_end;               /* the last forward/backward ends */
    PlanStageTimes acc;
} Clock;

/* What the stages share: the arrival of every send, and who has reached
 * each collective over several stages (NaN: not yet). */
typedef struct {
    int     pp;
    size_t  m;                     /* micro-batches: slots per virtual stage */
    double *act, *grad;            /* [pp * chunks * m] when a send's data arrives */
    double *ready[2];              /* [pp] EMBED_REDUCE, NORM_REDUCE: when the stage got there */
    int     arrived[2];            /* members there */
    double  start[2];              /* the latest of their arrivals */
    double  slow;                  /* overlap_compute - 1: compute seconds a DP/ZeRO
                                      collective takes from its stage per second it runs
                                      beside the compute (0: none) */
} Shared;

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

/* A collective of dur seconds that runs beside the stage's compute (a
 * ZeRO-3 gather, a reduction draining a backward) slows it by the measured
 * factor (Link.overlap_compute, planc calibrate): on a CPU the MPI
 * progress and copies take the same cores, on a GPU NCCL's kernels take
 * SMs and HBM bandwidth. The compute stream loses slow * dur seconds,
 * booked as `slowed`. */
static void steal(Clock *c, const Shared *sh, double dur)
{
    if (sh->slow <= 0) return;
    c->t_comp += sh->slow * dur;
    c->acc.slowed += sh->slow * dur;
}

/* When stage s's collective over several stages (0: the embedding group,
 * 1: all stages) may start: once every member has got there; false while
 * one has not. Arriving twice changes nothing (the caller retries). */
static bool meet(Shared *sh, int which, int s, double ready, int members, double *start)
{
    double *r = sh->ready[which];
    if (isnan(r[s])) {
        r[s] = ready;
        sh->arrived[which]++;
        sh->start[which] = later(sh->start[which], ready);
    }
    if (sh->arrived[which] < members) return false;
    *start = sh->start[which];
    return true;
}

/* Why one function: both simulators time every op here, so the fast path
 * and the Program's simulation cannot disagree. Run op o of stage s on
 * clock c, writing its span; `feeder` is the gather feeding it (compute
 * ops, or NULL) with its span, `pair` the span of the compute op a
 * REDUCE_GRADS drains. False, changing nothing that matters, when it must
 * wait for another stage (a send not made yet, a member not arrived). */
static bool run_op(const PlanOp *o, int s, Clock *c, Shared *sh, const PlanOp *feeder,
                   const PlanSpan *feeder_span, const PlanSpan *pair, PlanSpan *sn)
{
    PlanStageTimes *a = &c->acc;
    switch (o->kind) {
    case OP_FWD: case OP_BWD: case OP_BWD_INPUT: case OP_BWD_WEIGHT:
        sn->start = c->t_comp;
        sn->end = feeder ? fed(sn->start, o->dur, feeder_span->start, feeder->dur, feeder->buckets)
                         : sn->start + o->dur;
        a->busy += o->dur;
        if (feeder) a->stall += later(0, sn->end - sn->start - o->dur);   /* (not rounding) */
        c->t_comp = c->comp_end = sn->end;
        break;
    case OP_RECV_ACT: case OP_RECV_GRAD: {
        int from = o->kind == OP_RECV_ACT ? o->vstage - 1 : o->vstage + 1;
        double arr = (o->kind == OP_RECV_ACT ? sh->act : sh->grad)[(size_t)from * sh->m + (size_t)o->mb];
        if (isnan(arr)) return false;
        sn->start = c->t_comp;
        sn->end = later(c->t_comp, arr);
        a->bubble += sn->end - sn->start;
        c->t_comp = sn->end;
        break;
    }
    case OP_SEND_ACT: case OP_SEND_GRAD:
        sn->start = later(c->t_comp, c->t_p2p);
        sn->end = sn->start + o->dur;
        if (o->stream == STREAM_COMPUTE) {   /* a blocking send */
            a->p2p += sn->end - c->t_comp;
            c->t_comp = sn->end;
        }
        c->t_p2p = sn->end;
        (o->kind == OP_SEND_ACT ? sh->act : sh->grad)[(size_t)o->vstage * sh->m + (size_t)o->mb] = sn->end;
        break;
    case OP_GATHER_PARAMS:
        sn->start = later(c->t_comp, c->t_comm);
        sn->end = sn->start + o->dur;
        c->t_comm = sn->end;
        steal(c, sh, o->dur);
        break;
    case OP_REDUCE_GRADS:
        if (pair) {
            *sn = drain(c->t_comm, o->dur, o->buckets, *pair);
            steal(c, sh, o->dur);
        } else {   /* after the flush: the whole of it, once the compute is done */
            sn->start = later(c->t_comm, c->t_comp);
            sn->end = sn->start + o->dur;
        }
        c->t_comm = sn->end;
        break;
    case OP_SP_NORM_REDUCE: case OP_EMBED_REDUCE: case OP_NORM_REDUCE: {
        double own = later(c->t_comp, c->t_comm), ready = later(own, c->t_p2p), start = ready;
        if (o->kind == OP_EMBED_REDUCE && !meet(sh, 0, s, ready, 2, &start)) return false;
        if (o->kind == OP_NORM_REDUCE && !meet(sh, 1, s, ready, sh->pp, &start)) return false;
        sn->start = start;
        sn->end = start + o->dur;
        a->comm_wait += own - c->t_comp;
        a->p2p += ready - own;
        a->bubble += start - ready;
        *(o->kind == OP_SP_NORM_REDUCE ? &a->sp_norm : o->kind == OP_EMBED_REDUCE ? &a->embed
                                                                                  : &a->norm) += o->dur;
        c->t_comp = sn->end;
        break;
    }
    case OP_OPT_STEP: case OP_SYNC_PARAMS:
        sn->start = later(c->t_comp, c->t_comm);
        sn->end = sn->start + o->dur;
        a->comm_wait += sn->start - c->t_comp;
        *(o->kind == OP_OPT_STEP ? &a->opt : &a->sync) += o->dur;
        c->t_comp = sn->end;
        if (o->kind == OP_SYNC_PARAMS) c->t_comm = sn->end;
        break;
    case OP_EP_ALL_TO_ALL: case OP_TP_COLL: case OP_CP_COLL:   /* never in a list: part of a compute op's dur */
        sn->start = sn->end = c->t_comp;
        break;
    }
    return true;
}

/* Shared tables for pp stages of `chunks` chunks and m micro-batches. */
static bool shared_init(Shared *sh, int pp, int chunks, int64_t m)
{
    memset(sh, 0, sizeof *sh);
    sh->pp = pp;
    sh->m = m > 0 ? (size_t)m : 0;
    size_t slots = (size_t)pp * (size_t)chunks * sh->m;
    sh->act = malloc((slots + 1) * sizeof *sh->act);
    sh->grad = malloc((slots + 1) * sizeof *sh->grad);
    sh->ready[0] = malloc((size_t)pp * sizeof(double));
    sh->ready[1] = malloc((size_t)pp * sizeof(double));
    if (!sh->act || !sh->grad || !sh->ready[0] || !sh->ready[1]) return false;
    /* all-ones bytes are a NaN: "not sent yet", "not arrived" */
    memset(sh->act, 0xff, slots * sizeof *sh->act);
    memset(sh->grad, 0xff, slots * sizeof *sh->grad);
    memset(sh->ready[0], 0xff, (size_t)pp * sizeof(double));
    memset(sh->ready[1], 0xff, (size_t)pp * sizeof(double));
    return true;
}

static void shared_free(Shared *sh)
{
    free(sh->act); free(sh->grad); free(sh->ready[0]); free(sh->ready[1]);
}

/* The figures both drivers report, from every stage's clock. */
static void summarise(const Clock *c, int pp, PlanSimSummary *out)
{
    memset(out, 0, sizeof *out);
    for (int s = 0; s < pp; s++) {
        const Clock *k = &c[s];
        double end = later(k->t_comp, later(k->t_comm, k->t_p2p));
        out->pipeline_time = later(out->pipeline_time, k->comp_end);
        out->busy_max = later(out->busy_max, k->acc.busy);
        if (s == 0 || end > out->step_time) {
            out->step_time = end;
            out->critical = s;
        }
    }
    out->times = c[out->critical].acc;
    out->times.end = out->step_time;
    out->bubble = out->times.bubble;
    out->bubble_fraction = out->times.busy > 0 ? out->bubble / out->times.busy : 0;
}

/* ---- the Program ------------------------------------------------------ */

bool plan_simulate(const PlanProgram *p, PlanSimResult *out)
{
    memset(out, 0, sizeof *out);
    out->pp = p->pp;
    Shared sh;
    Clock *ck = calloc((size_t)p->pp, sizeof *ck);
    int *pc = calloc((size_t)p->pp, sizeof *pc);
    int **feeder = calloc((size_t)p->pp, sizeof *feeder);
    out->span = calloc((size_t)p->pp, sizeof *out->span);
    out->busy = calloc((size_t)p->pp, sizeof *out->busy);
    out->times = calloc((size_t)p->pp, sizeof *out->times);
    bool ok = shared_init(&sh, p->pp, p->chunks, p->n_micro) && ck && pc && feeder && out->span &&
              out->busy && out->times;
    sh.slow = p->overlap_compute > 1 ? p->overlap_compute - 1 : 0;
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
            const PlanStageProgram *sp = &p->stages[s];
            while (pc[s] < sp->n_ops) {
                const PlanOp *o = &sp->ops[pc[s]];
                int g = feeder[s][pc[s]];
                if (!run_op(o, s, &ck[s], &sh, g >= 0 ? &sp->ops[g] : NULL, g >= 0 ? &out->span[s][g] : NULL,
                            o->kind == OP_REDUCE_GRADS && o->pair >= 0 ? &out->span[s][o->pair] : NULL,
                            &out->span[s][pc[s]]))
                    break;
                pc[s]++;
                moved = true;
            }
            if (pc[s] < sp->n_ops) all = false;
        }
    }
    ok = ok && all;
    if (ok) {
        PlanSimSummary sm;
        summarise(ck, p->pp, &sm);
        out->step_time = sm.step_time;
        out->pipeline_time = sm.pipeline_time;
        out->busy_max = sm.busy_max;
        out->critical = sm.critical;
        out->bubble = sm.bubble;
        out->bubble_fraction = sm.bubble_fraction;
        for (int s = 0; s < p->pp; s++) {
            out->times[s] = ck[s].acc;
            out->times[s].end = later(ck[s].t_comp, later(ck[s].t_comm, ck[s].t_p2p));
            out->busy[s] = ck[s].acc.busy;
        }
    }
    for (int s = 0; feeder && s < p->pp; s++) free(feeder[s]);
    free(feeder); free(ck); free(pc);
    shared_free(&sh);
    if (!ok) plan_sim_free(out);
    return ok;
}

void plan_sim_free(PlanSimResult *r)
{
    for (int s = 0; r->span && s < r->pp; s++) free(r->span[s]);
    free(r->span);
    free(r->busy);
    free(r->times);
    memset(r, 0, sizeof *r);
}

/* ---- the same simulation over the micro-steps ------------------------- */

/* One stage of the fast path: its clock, the micro-step being run, the
 * ops the expansion made of it and how far they ran. */
typedef struct {
    Clock    clock;
    int      next;                 /* micro-steps begun; len: the tail */
    PlanOp  *ops;                  /* the current step's (or the tail's) ops */
    PlanSpan *span;
    int      n, at;                /* ops, and the next to run */
} Walker;

/* Expand what stage s runs next into w's ops: micro-step `next`, or after
 * the last one the tail; false when nothing is left. */
static bool walker_load(const PlanOpCosts *c, int s, Walker *w, PlanStep *const *order, int len)
{
    if (w->next > len) return false;
    if (w->next < len) {
        PlanStep st = order ? order[s][w->next]
                            : plan_schedule_step_x(c->schedule, c->pp, s, c->n_micro, c->chunks, c->warmup_extra,
                                                   w->next);
        w->n = plan_expand_step(c, s, st, w->ops);
    } else {
        w->n = plan_expand_tail(c, s, w->ops);
    }
    w->next++;
    w->at = 0;
    return true;
}

/* Run w's loaded ops as far as they go; true when all ran. */
static bool walker_run(Walker *w, int s, Shared *sh, bool *moved)
{
    while (w->at < w->n) {
        const PlanOp *o = &w->ops[w->at];
        const PlanOp *g = NULL;
        const PlanSpan *gs = NULL;
        for (int j = 0; j < w->at && is_compute(o->kind); j++)
            if (w->ops[j].kind == OP_GATHER_PARAMS && w->ops[j].pair == w->at) { g = &w->ops[j]; gs = &w->span[j]; }
        const PlanSpan *pair = o->kind == OP_REDUCE_GRADS && o->pair >= 0 ? &w->span[o->pair] : NULL;
        if (!run_op(o, s, &w->clock, sh, g, gs, pair, &w->span[w->at])) return false;
        w->at++;
        *moved = true;
    }
    return true;
}

bool plan_simulate_costs(const PlanOpCosts *c, PlanSimSummary *out)
{
    int p = c->pp, v = c->chunks;
    memset(out, 0, sizeof *out);
    if (c->n_micro <= 0) return false;
    int len = plan_schedule_len(c), room = PLAN_TAIL_OPS_MAX(v) > PLAN_STEP_OPS_MAX
                                           ? PLAN_TAIL_OPS_MAX(v) : PLAN_STEP_OPS_MAX;
    bool zb = c->schedule == SCHED_ZB_H1;   /* list-scheduled: the steps are built first */
    Shared sh;
    Walker *w = calloc((size_t)p, sizeof *w);
    PlanOp *ops = malloc(sizeof(PlanOp) * (size_t)room * (size_t)p);
    PlanSpan *spans = malloc(sizeof(PlanSpan) * (size_t)room * (size_t)p);
    PlanStep *buf = zb ? malloc(sizeof(PlanStep) * (size_t)len * (size_t)p) : NULL;
    PlanStep **order = zb ? malloc(sizeof(PlanStep *) * (size_t)p) : NULL;
    int *lens = zb ? calloc((size_t)p, sizeof *lens) : NULL;
    bool ok = shared_init(&sh, p, v, c->n_micro) && w && ops && spans && (!zb || (buf && order && lens));
    sh.slow = c->overlap_compute > 1 ? c->overlap_compute - 1 : 0;
    for (int s = 0; ok && zb && s < p; s++) order[s] = buf + (size_t)s * (size_t)len;
    ok = ok && (!zb || plan_schedule_steps(c, order, lens));
    for (int s = 0; ok && s < p; s++) {
        w[s].ops = ops + (size_t)s * (size_t)room;
        w[s].span = spans + (size_t)s * (size_t)room;
        walker_load(c, s, &w[s], order, len);
    }
    /* advance every stage until blocked; repeat while anything moves */
    bool moved = true, all = false;
    while (ok && moved && !all) {
        moved = false;
        all = true;
        for (int s = 0; s < p; s++) {
            bool done = false;
            while (walker_run(&w[s], s, &sh, &moved))
                if (!walker_load(c, s, &w[s], order, len)) { done = true; break; }
            if (!done) all = false;
        }
    }
    ok = ok && all;
    if (ok) {
        Clock *ck = malloc(sizeof *ck * (size_t)p);
        ok = ck != NULL;
        for (int s = 0; ok && s < p; s++) ck[s] = w[s].clock;
        if (ok) summarise(ck, p, out);
        free(ck);
    }
    free(w); free(ops); free(spans); free(buf); free(order); free(lens);
    shared_free(&sh);
    return ok;
}
