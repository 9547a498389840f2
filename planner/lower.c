/*
 * lower.c: Plan + cost table + schedule -> Program.
 *
 * The schedule (schedule.c) gives every stage its order of compute
 * micro-steps; this file expands each step into ops — a ZeRO-3 parameter
 * gather before the step, a receive before a step that needs a
 * neighbour's data, the compute op, a send after a step that produces
 * data for a neighbour, the gradient reduction after the steps
 * plan_reduce_after names — and closes each stage's list with its tail:
 * reductions that waited for the flush, then the step-level collectives
 * (the TP all-reduce of sequence-parallel norm gradients, the tied
 * word-embedding all-reduce between the first and the last stage, the
 * all-ranks all-reduce of the squared gradient norm), the optimizer step
 * and, under ZeRO-1/2, the all-gather of the updated shards.
 *
 * The expansion is public (plan_expand_step, plan_expand_tail) because it
 * is the one rule of how a micro-step becomes ops: the simulator's fast
 * path (simulate.c, plan_simulate_costs) runs the ops it returns without
 * keeping them, so the fast path and the simulated Program cannot drift.
 */
#include "planner/program.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "planner/cost.h"
#include "planner/layout.h"
#include "planner/schedule.h"

const char *plan_op_name(PlanOpKind k)
{
    static const char *names[] = {   /* ORDER PlanOpKind */
        "FWD", "BWD", "BWD_INPUT", "BWD_WEIGHT", "SEND_ACT", "RECV_ACT", "SEND_GRAD",
        "RECV_GRAD", "GATHER_PARAMS", "REDUCE_GRADS", "OPT_STEP", "SYNC_PARAMS",
        "SP_NORM_REDUCE", "EMBED_REDUCE", "NORM_REDUCE", "EP_ALL_TO_ALL", "TP_COLL",
        "CP_COLL" };
    return (unsigned)k < PLAN_N_OPKINDS ? names[k] : "?";
}

/* ---- the cost table the ops read ------------------------------------- */

bool plan_op_costs_alloc(PlanOpCosts *c, int pp, int chunks)
{
    size_t n = (size_t)pp * (size_t)chunks;
    memset(c, 0, sizeof *c);
    c->pp = pp;
    c->chunks = chunks;
    double **d[] = { &c->fwd, &c->bwd, &c->bwd_input, &c->bwd_weight, &c->p2p, &c->p2p_bytes,
                     &c->reduce, &c->gather, &c->sync, &c->weight_bytes, &c->red_bytes, &c->fwd_ep,
                     &c->bwd_ep, &c->fwd_ep_bytes, &c->bwd_ep_bytes, &c->fwd_tp, &c->bwd_tp, &c->rc,
                     &c->fwd_ep_hidden, &c->bwd_ep_hidden, &c->fwd_cp, &c->bwd_cp, &c->fwd_cp_bytes,
                     &c->bwd_cp_bytes };
    bool ok = true;
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) ok &= (*d[i] = calloc(n, sizeof(double))) != NULL;
    ok &= (c->first_layer = calloc(n, sizeof(int))) != NULL;
    ok &= (c->end_layer = calloc(n, sizeof(int))) != NULL;
    ok &= (c->layers = calloc(n, sizeof(int))) != NULL;
    double **st[] = { &c->opt, &c->sp_norm, &c->sp_norm_bytes, &c->embed, &c->embed_bytes };
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
        ok &= (*st[i] = calloc((size_t)pp, sizeof(double))) != NULL;
    return ok;
}

void plan_op_costs_free(PlanOpCosts *c)
{
    free(c->fwd); free(c->bwd); free(c->bwd_input); free(c->bwd_weight); free(c->p2p);
    free(c->p2p_bytes); free(c->reduce); free(c->gather); free(c->sync); free(c->weight_bytes);
    free(c->red_bytes);
    free(c->fwd_ep); free(c->bwd_ep); free(c->fwd_ep_bytes); free(c->bwd_ep_bytes);
    free(c->fwd_tp); free(c->bwd_tp); free(c->rc);
    free(c->fwd_ep_hidden); free(c->bwd_ep_hidden);
    free(c->fwd_cp); free(c->bwd_cp); free(c->fwd_cp_bytes); free(c->bwd_cp_bytes);
    free(c->first_layer); free(c->end_layer); free(c->layers); free(c->opt);
    free(c->sp_norm); free(c->sp_norm_bytes); free(c->embed); free(c->embed_bytes);
    memset(c, 0, sizeof *c);
}

/* ---- emitting ops ------------------------------------------------------ */

static int emit(PlanStageProgram *sp, PlanOp op)
{
    if (sp->n_ops == sp->cap) {
        int cap = sp->cap ? 2 * sp->cap : 64;
        PlanOp *n = realloc(sp->ops, (size_t)cap * sizeof *n);
        if (!n) return -1;
        sp->ops = n;
        sp->cap = cap;
    }
    sp->ops[sp->n_ops] = op;
    return sp->n_ops++;
}

/* The op builders write each field in place: the fast path builds every
 * op of every micro-step, and building a struct on the stack to copy it
 * (or a memset read back whole) stalls the store buffer — it was more
 * than half of the search's time. */

/* An op of (mb, chunk) on stage s with the chunk's layer range filled in. */
static inline void set_op(PlanOp *o, const PlanOpCosts *c, PlanOpKind kind, int s, int mb, int chunk)
{
    int k = chunk * c->pp + s;
    o->kind = kind; o->mb = mb; o->chunk = chunk; o->vstage = k; o->peer = -1;
    o->first_layer = c->first_layer[k]; o->end_layer = c->end_layer[k];
    o->coll = COLL_ALL_REDUCE; o->group = GROUP_TP; o->bytes = 0; o->buckets = 0; o->pair = -1;
    o->stream = STREAM_COMPUTE; o->dur = 0; o->ep_dur = 0; o->ep_bytes = 0; o->prepost = 0;
    o->tp_dur = 0; o->rc_dur = 0; o->cp_dur = 0; o->cp_bytes = 0;
}

/* A DP/ZeRO collective of the chunk, one bucket per layer. */
static inline void set_comm(PlanOp *o, const PlanOpCosts *c, PlanOpKind kind, int s, int mb, int chunk,
                            PlanCollective coll, double bytes, double dur)
{
    set_op(o, c, kind, s, mb, chunk);
    int layers = c->layers[chunk * c->pp + s];
    o->stream = STREAM_COMM; o->coll = coll; o->group = GROUP_DP; o->bytes = bytes;
    o->buckets = layers > 0 ? layers : 1; o->dur = dur;
}

/* A pipeline send (its transfer time) or receive (0: the wait is simulated). */
static inline void set_p2p(PlanOp *o, const PlanOpCosts *c, PlanOpKind kind, int s, int mb, int chunk,
                           int peer, double bytes, double dur)
{
    set_op(o, c, kind, s, mb, chunk);
    bool send = kind == OP_SEND_ACT || kind == OP_SEND_GRAD;
    o->stream = send && !c->p2p_blocking ? STREAM_P2P : STREAM_COMPUTE;
    o->peer = peer; o->coll = COLL_P2P; o->group = GROUP_PP; o->bytes = bytes;
    o->dur = send ? dur : 0;
}

static PlanOp op_of(const PlanOpCosts *c, PlanOpKind kind, int s, int mb, int chunk)
{
    PlanOp o;
    set_op(&o, c, kind, s, mb, chunk);
    return o;
}

static PlanOp comm_op(const PlanOpCosts *c, PlanOpKind kind, int s, int mb, int chunk,
                      PlanCollective coll, double bytes, double dur)
{
    PlanOp o;
    set_comm(&o, c, kind, s, mb, chunk, coll, bytes, dur);
    return o;
}

typedef PlanStep Step;

/* ---- one micro-step, one tail ----------------------------------------- */

/* Append op to out[*n]; its index. */
static int put(PlanOp *out, int *n, PlanOp op)
{
    out[*n] = op;
    return (*n)++;
}

int plan_expand_step(const PlanOpCosts *c, int s, PlanStep st, PlanOp out[PLAN_STEP_OPS_MAX])
{
    int p = c->pp, n = p * c->chunks, k = st.chunk * p + s, cnt = 0, g = -1, i;
    int prev = (k - 1 + n) % p, next = (k + 1) % p;
    bool has_prev = k > 0 && prev != s, has_next = k < n - 1 && next != s;
    bool split_bwd = c->schedule == SCHED_ZB_H1;
    PlanCollective red = c->zero == 0 ? COLL_ALL_REDUCE : COLL_REDUCE_SCATTER;
    if (st.kind != PLAN_STEP_W && c->zero >= 3) {
        set_comm(&out[g = cnt++], c, OP_GATHER_PARAMS, s, st.mb, st.chunk, COLL_ALL_GATHER,
                 c->weight_bytes[k], c->gather[k]);
        if (!c->param_overlap) out[g].buckets = 1;   /* no prefetch: the compute waits for all of it */
    }
    /* ZeRO-1/2 with overlap_param_gather: the previous step's all-gather of
     * the updated shards feeds this step's first forward of the chunk
     * layer by layer (steady state: step n's gather under step n+1's
     * forward), instead of the tail's blocking SYNC_PARAMS */
    if (st.kind == PLAN_STEP_F && st.mb == 0 && c->param_overlap && c->sync[k] > 0)
        set_comm(&out[g = cnt++], c, OP_GATHER_PARAMS, s, st.mb, st.chunk, COLL_ALL_GATHER,
                 c->weight_bytes[k], c->sync[k]);
    if (st.kind == PLAN_STEP_F && has_prev)
        set_p2p(&out[cnt++], c, OP_RECV_ACT, s, st.mb, st.chunk, prev, c->p2p_bytes[k], 0);
    if (st.kind == PLAN_STEP_B && has_next)
        set_p2p(&out[cnt++], c, OP_RECV_GRAD, s, st.mb, st.chunk, next, c->p2p_bytes[k], 0);
    PlanOpKind kind = st.kind == PLAN_STEP_F ? OP_FWD : st.kind == PLAN_STEP_W ? OP_BWD_WEIGHT
                    : split_bwd ? OP_BWD_INPUT : OP_BWD;
    set_op(&out[i = cnt++], c, kind, s, st.mb, st.chunk);
    out[i].dur = kind == OP_FWD ? c->fwd[k] : kind == OP_BWD_WEIGHT ? c->bwd_weight[k]
               : kind == OP_BWD_INPUT ? c->bwd_input[k] : c->bwd[k];
    /* the mixtures' all-to-alls inside (the weight pass has none) */
    if (kind != OP_BWD_WEIGHT && c->fwd_ep) {
        out[i].ep_dur = kind == OP_FWD ? c->fwd_ep[k] : c->bwd_ep[k];
        out[i].ep_bytes = kind == OP_FWD ? c->fwd_ep_bytes[k] : c->bwd_ep_bytes[k];
        /* overlap_moe_a2a: a paired step's all-to-alls run beside the
         * other micro-batch's compute, what they hide off its duration */
        bool paired = st.paired && (c->schedule == SCHED_1F1B || c->schedule == SCHED_INTERLEAVED);
        double hid = paired && c->fwd_ep_hidden ? (kind == OP_FWD ? c->fwd_ep_hidden[k] : c->bwd_ep_hidden[k]) : 0;
        if (hid > 0) { out[i].dur -= hid; out[i].ep_dur -= hid; }
    }
    /* its TP collectives and recomputation: the input-gradient side of
     * the backward (zb-h1's weight pass has neither) */
    if (kind != OP_BWD_WEIGHT && c->fwd_tp) {
        out[i].tp_dur = kind == OP_FWD ? c->fwd_tp[k] : c->bwd_tp[k];
        out[i].rc_dur = kind == OP_FWD ? 0 : c->rc[k];
    }
    /* its CP attention transfers (the weight pass has none) */
    if (kind != OP_BWD_WEIGHT && c->fwd_cp) {
        out[i].cp_dur = kind == OP_FWD ? c->fwd_cp[k] : c->bwd_cp[k];
        out[i].cp_bytes = kind == OP_FWD ? c->fwd_cp_bytes[k] : c->bwd_cp_bytes[k];
    }
    if (g >= 0) out[g].pair = i;
    if (st.kind == PLAN_STEP_F && has_next)
        set_p2p(&out[cnt++], c, OP_SEND_ACT, s, st.mb, st.chunk, next, c->p2p_bytes[k], c->p2p[k]);
    if (st.kind == PLAN_STEP_B && has_prev)
        set_p2p(&out[cnt++], c, OP_SEND_GRAD, s, st.mb, st.chunk, prev, c->p2p_bytes[k], c->p2p[k]);
    /* the reduction drains the op that finishes the chunk's gradients:
     * the backward, or zb-h1's weight pass */
    bool drains = st.kind == PLAN_STEP_W || (st.kind == PLAN_STEP_B && !split_bwd);
    double rd = drains ? plan_reduce_after(c, k, st.mb) : 0;
    if (rd > 0) {
        set_comm(&out[cnt], c, OP_REDUCE_GRADS, s, st.mb, st.chunk, red, c->red_bytes[k], rd);
        out[cnt++].pair = i;
    }
    return cnt;
}

/* A step-level op of stage s (no micro-batch, no chunk). */
static PlanOp step_op_of(const PlanOpCosts *c, PlanOpKind kind, int s, PlanCollective coll,
                         PlanGroupKind group, double bytes, double dur)
{
    PlanOp o = op_of(c, kind, s, -1, 0);
    o.chunk = -1; o.vstage = -1;
    o.coll = coll; o.group = group; o.bytes = bytes; o.dur = dur;
    o.buckets = 1;
    return o;
}

int plan_expand_tail(const PlanOpCosts *c, int s, PlanOp *out)
{
    int p = c->pp, v = c->chunks, cnt = 0;
    /* reductions that wait for the flush: one per chunk, each the whole
     * of it (pair -1: it drains nothing) */
    for (int ch = 0; c->reduce_after_flush && ch < v; ch++) {
        int k = ch * p + s;
        if (c->reduce[k] > 0)
            put(out, &cnt, comm_op(c, OP_REDUCE_GRADS, s, (int)c->n_micro - 1, ch,
                                   c->zero == 0 ? COLL_ALL_REDUCE : COLL_REDUCE_SCATTER,
                                   c->red_bytes[k], c->reduce[k]));
    }
    /* the step-level collectives, in the order the runtime sums them
     * (the code generator's contract, program.h) */
    if (c->sp_norm_bytes[s] > 0)
        put(out, &cnt, step_op_of(c, OP_SP_NORM_REDUCE, s, COLL_ALL_REDUCE, GROUP_TP,
                                  c->sp_norm_bytes[s], c->sp_norm[s]));
    if (c->embed_bytes[s] > 0) {
        PlanOp e = step_op_of(c, OP_EMBED_REDUCE, s, COLL_ALL_REDUCE, GROUP_EMBED,
                              c->embed_bytes[s], c->embed[s]);
        e.peer = s == 0 ? p - 1 : 0;   /* the other end of the embedding group */
        put(out, &cnt, e);
    }
    put(out, &cnt, step_op_of(c, OP_NORM_REDUCE, s, COLL_ALL_REDUCE, GROUP_ALL, c->norm_bytes,
                              c->norm));
    PlanOp o = op_of(c, OP_OPT_STEP, s, -1, 0);
    o.chunk = -1; o.vstage = -1; o.dur = c->opt[s];
    put(out, &cnt, o);
    double sync = 0, bytes = 0;
    for (int ch = 0; ch < v; ch++) { sync += c->sync[ch * p + s]; bytes += c->weight_bytes[ch * p + s]; }
    if (sync > 0 && !c->param_overlap) {   /* else gathered before the first forwards */
        PlanOp y = comm_op(c, OP_SYNC_PARAMS, s, -1, 0, COLL_ALL_GATHER, bytes, sync);
        y.chunk = -1; y.vstage = -1; y.buckets = 1;
        put(out, &cnt, y);
    }
    return cnt;
}

/* ---- the Program -------------------------------------------------------- */

/* Append the ops of ops[0..n) to sp, pair indices made absolute. */
static bool append(PlanStageProgram *sp, const PlanOp *ops, int n)
{
    int base = sp->n_ops;
    for (int j = 0; j < n; j++) {
        PlanOp o = ops[j];
        if (o.pair >= 0) o.pair += base;
        if (emit(sp, o) < 0) return false;
    }
    return true;
}

bool plan_lower_costs(const PlanOpCosts *c, PlanProgram *out)
{
    int p = c->pp, v = c->chunks, m = (int)c->n_micro;
    memset(out, 0, sizeof *out);
    out->pp = p; out->chunks = v; out->zero = c->zero;
    out->schedule = c->schedule; out->n_micro = c->n_micro;
    out->overlap_compute = c->overlap_compute;
    out->stages = calloc((size_t)p, sizeof *out->stages);
    Step **order = calloc((size_t)p, sizeof *order);
    int *len = calloc((size_t)p, sizeof *len);
    bool ok = out->stages && order && len && m > 0;
    for (int s = 0; ok && s < p; s++) {
        out->stages[s].stage = s;
        ok = (order[s] = malloc(sizeof(Step) * (size_t)(3 * m * v))) != NULL;
    }
    if (ok) ok = plan_schedule_steps(c, order, len);
    PlanOp *tail = malloc(sizeof(PlanOp) * (size_t)PLAN_TAIL_OPS_MAX(v));
    ok = ok && tail;
    for (int s = 0; ok && s < p; s++) {
        PlanStageProgram *sp = &out->stages[s];
        PlanOp ops[PLAN_STEP_OPS_MAX];
        for (int i = 0; ok && i < len[s]; i++)
            ok = append(sp, ops, plan_expand_step(c, s, order[s][i], ops));
        ok = ok && append(sp, tail, plan_expand_tail(c, s, tail));
    }
    free(tail);
    for (int s = 0; order && s < p; s++) free(order[s]);
    free(order);
    free(len);
    if (!ok) plan_program_free(out);
    return ok;
}

void plan_op_costs_fill(const PlanCosts *pc, PlanOpCosts *oc)
{
    const Layout *l = &pc->layout;
    oc->zero = l->zero; oc->schedule = l->schedule; oc->n_micro = pc->n_micro;
    oc->reduce_after_flush = pc->reduce_after_flush;
    oc->p2p_blocking = pc->p2p_blocking;
    oc->param_overlap = pc->param_overlap;
    oc->overlap_compute = pc->overlap_compute;
    oc->warmup_extra = pc->warmup_extra;
    for (int k = 0; k < pc->n_chunks; k++) {
        const PlanChunkCost *cc = &pc->cost[k];
        oc->fwd[k] = cc->fwd; oc->bwd[k] = cc->bwd;
        oc->bwd_input[k] = cc->bwd_input; oc->bwd_weight[k] = cc->bwd_weight;
        oc->p2p[k] = cc->p2p; oc->p2p_bytes[k] = cc->p2p_bytes;
        oc->reduce[k] = cc->reduce; oc->gather[k] = cc->gather; oc->sync[k] = cc->sync;
        oc->weight_bytes[k] = cc->weight_bytes; oc->red_bytes[k] = cc->red_bytes;
        oc->fwd_ep[k] = cc->fwd_ep; oc->bwd_ep[k] = cc->bwd_ep;
        oc->fwd_ep_bytes[k] = cc->fwd_ep_bytes; oc->bwd_ep_bytes[k] = cc->bwd_ep_bytes;
        oc->fwd_tp[k] = cc->fwd_tp; oc->bwd_tp[k] = cc->bwd_tp;
        oc->rc[k] = cc->recompute - cc->recompute_coll;
        oc->fwd_cp[k] = cc->fwd_cp; oc->bwd_cp[k] = cc->bwd_cp;
        oc->fwd_cp_bytes[k] = cc->fwd_cp_bytes; oc->bwd_cp_bytes[k] = cc->bwd_cp_bytes;
        oc->fwd_ep_hidden[k] = cc->fwd_ep_hidden; oc->bwd_ep_hidden[k] = cc->bwd_ep_hidden;
        oc->first_layer[k] = pc->chunk[k].first; oc->end_layer[k] = pc->chunk[k].end;
        oc->layers[k] = cc->layers;
    }
    for (int s = 0; s < l->pp; s++) {
        oc->opt[s] = pc->opt[s];
        oc->sp_norm[s] = pc->sp_norm[s]; oc->sp_norm_bytes[s] = pc->sp_norm_bytes[s];
        oc->embed[s] = pc->embed[s]; oc->embed_bytes[s] = pc->embed_bytes[s];
    }
    oc->norm = pc->norm; oc->norm_bytes = pc->norm_bytes;
}

bool plan_lower(const Plan *p, PlanProgram *out, char *why, size_t len)
{
    Layout l = plan_layout_defaults(p);
    memset(out, 0, sizeof *out);
    if (!plan_layout_check(p, &l, why, len)) return false;
    PlanCosts pc;
    PlanOpCosts oc;
    bool ok = plan_costs(p, &l, &pc) && plan_op_costs_alloc(&oc, l.pp, l.chunks);
    if (!ok) {
        snprintf(why, len, "the cost table could not be built");
        plan_costs_free(&pc);
        return false;
    }
    plan_op_costs_fill(&pc, &oc);
    ok = plan_lower_costs(&oc, out);
    if (ok) { out->dp = l.dp; out->tp = l.tp; out->cp = plan_cp(&l); }
    else snprintf(why, len, "the schedule could not be built (out of memory or deadlock)");
    if (ok && !(ok = plan_program_p2p_order(out, why, len))) plan_program_free(out);
    plan_op_costs_free(&oc);
    plan_costs_free(&pc);
    return ok;
}

void plan_program_free(PlanProgram *p)
{
    for (int s = 0; p->stages && s < p->pp; s++) free(p->stages[s].ops);
    free(p->stages);
    memset(p, 0, sizeof *p);
}

double plan_program_in_flight(const PlanProgram *p, int s)
{
    const PlanStageProgram *sp = &p->stages[s];
    int cur = 0, peak = 0;
    bool split = false;
    for (int i = 0; i < sp->n_ops; i++) split |= sp->ops[i].kind == OP_BWD_WEIGHT;
    for (int i = 0; i < sp->n_ops; i++) {
        PlanOpKind k = sp->ops[i].kind;
        if (k == OP_FWD) { if (++cur > peak) peak = cur; }
        else if ((!split && k == OP_BWD) || (split && k == OP_BWD_WEIGHT)) cur--;
    }
    return (double)peak / (p->chunks > 0 ? p->chunks : 1);
}
