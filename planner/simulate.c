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
 */
#include "planner/simulate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
 * whose layer j may start only after gather piece j ends. */
static double fed_end(double start, double dur, const PlanOp *g, const PlanSpan *gs)
{
    int n = g->buckets > 0 ? g->buckets : 1;
    double piece = g->dur / n, layer = dur / n, t = start;
    for (int j = 0; j < n; j++) t = fmax(t, gs->start + (j + 1) * piece) + layer;
    return t;
}

/* Start and end of a bucketed reduction draining compute span c. */
static PlanSpan drained(double comm_free, const PlanOp *r, PlanSpan c)
{
    int n = r->buckets > 0 ? r->buckets : 1;
    double piece = r->dur / n, layer = (c.end - c.start) / n, t = comm_free;
    PlanSpan s = { fmax(comm_free, c.start + layer), 0 };
    for (int j = 0; j < n; j++) t = fmax(t, c.start + (j + 1) * layer) + piece;
    s.end = t;
    return s;
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
        sn->end = fmax(st->t_comp, arr);
        st->t_comp = sn->end;
        break;
    }
    case OP_SEND_ACT: case OP_SEND_GRAD:
        sn->start = fmax(st->t_comp, st->t_p2p);
        sn->end = sn->start + o->dur;
        st->t_p2p = sn->end;
        (o->kind == OP_SEND_ACT ? act_arr : grad_arr)[slot(p, o->vstage, o->mb)] = sn->end;
        break;
    case OP_GATHER_PARAMS:
        sn->start = fmax(st->t_comp, st->t_comm);
        sn->end = sn->start + o->dur;
        st->t_comm = sn->end;
        break;
    case OP_REDUCE_GRADS:
        *sn = o->pair >= 0 ? drained(st->t_comm, o, span[o->pair])
                           : (PlanSpan){ fmax(st->t_comm, st->t_comp), 0 };
        if (o->pair < 0) sn->end = sn->start + o->dur;
        st->t_comm = sn->end;
        break;
    case OP_OPT_STEP:
        sn->start = fmax(st->t_comp, st->t_comm);
        sn->end = sn->start + o->dur;
        st->t_comp = sn->end;
        break;
    case OP_SYNC_PARAMS:
        sn->start = fmax(st->t_comp, st->t_comm);
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
            out->step_time = fmax(out->step_time, sn.end);
            if (is_compute(sp->ops[i].kind)) {
                out->pipeline_time = fmax(out->pipeline_time, sn.end);
                out->busy[s] += sp->ops[i].dur;
            }
        }
        out->busy_max = fmax(out->busy_max, out->busy[s]);
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
