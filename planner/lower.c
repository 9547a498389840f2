/*
 * lower.c: Plan -> Program. The one place where pipeline schedules live.
 *
 * Each schedule is first written as the order of compute micro-steps of
 * one stage — F(mb, chunk), B(mb, chunk) and, for ZB-H1, W(mb) — and then
 * expanded into ops: a receive before each step that needs a neighbour's
 * data, a send after each step that produces it, ZeRO-3 parameter gathers
 * before each step, gradient reductions after the last backward of a chunk
 * (every backward under ZeRO-2/3, whose gradients are sharded), then the
 * optimizer step and, under ZeRO-1/2, the all-gather of updated shards.
 *
 * Schedules (p stages, m micro-batches, v chunks, stage s):
 *  - GPipe (Huang et al. 2019): all m forwards, then all m backwards.
 *  - 1F1B (PipeDream-Flush, Narayanan et al. 2021): min(p-s-1, m) warm-up
 *    forwards, then one forward / one backward, then the cool-down.
 *  - interleaved 1F1B (Narayanan et al. 2021 Sec. 2.2.2, Megatron's
 *    forward_backward_pipelining_with_interleaving): warm-up
 *    2(p-s-1) + (v-1)p chunk-steps; micro-step k runs chunk (k mod pv)/p
 *    (backward: v-1 minus that) on micro-batch (k div pv) p + k mod p.
 *  - ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): the
 *    backward is split into B (input gradient, on the critical path) and W
 *    (weight gradient, deferrable). The order is built by list scheduling
 *    with the plan's own durations under ZB-H1's rule: at most p-s
 *    micro-batches between F and W (1F1B's activation memory), B before F
 *    before W, W filling what would otherwise be idle.
 */
#include "planner/program.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "planner/cost.h"
#include "planner/layout.h"

const char *plan_op_name(PlanOpKind k)
{
    static const char *names[] = {   /* ORDER PlanOpKind */
        "FWD", "BWD", "BWD_INPUT", "BWD_WEIGHT", "SEND_ACT", "RECV_ACT", "SEND_GRAD",
        "RECV_GRAD", "GATHER_PARAMS", "REDUCE_GRADS", "OPT_STEP", "SYNC_PARAMS" };
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
                     &c->reduce, &c->gather, &c->sync, &c->grad_bytes };
    bool ok = true;
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) ok &= (*d[i] = calloc(n, sizeof(double))) != NULL;
    ok &= (c->first_layer = calloc(n, sizeof(int))) != NULL;
    ok &= (c->end_layer = calloc(n, sizeof(int))) != NULL;
    ok &= (c->layers = calloc(n, sizeof(int))) != NULL;
    ok &= (c->opt = calloc((size_t)pp, sizeof(double))) != NULL;
    return ok;
}

void plan_op_costs_free(PlanOpCosts *c)
{
    free(c->fwd); free(c->bwd); free(c->bwd_input); free(c->bwd_weight); free(c->p2p);
    free(c->p2p_bytes); free(c->reduce); free(c->gather); free(c->sync); free(c->grad_bytes);
    free(c->first_layer); free(c->end_layer); free(c->layers); free(c->opt);
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

/* An op of (mb, chunk) on stage s with the chunk's layer range filled in. */
static PlanOp op_of(const PlanOpCosts *c, PlanOpKind kind, int s, int mb, int chunk)
{
    int k = chunk * c->pp + s;
    PlanOp o;
    memset(&o, 0, sizeof o);
    o.kind = kind; o.mb = mb; o.chunk = chunk; o.vstage = k; o.peer = -1; o.pair = -1;
    o.first_layer = c->first_layer[k]; o.end_layer = c->end_layer[k];
    o.stream = STREAM_COMPUTE;
    return o;
}

static PlanOp comm_op(const PlanOpCosts *c, PlanOpKind kind, int s, int mb, int chunk,
                      PlanCollective coll, double bytes, double dur)
{
    PlanOp o = op_of(c, kind, s, mb, chunk);
    o.stream = STREAM_COMM;
    o.coll = coll;
    o.group = GROUP_DP;
    o.bytes = bytes;
    o.buckets = c->layers[chunk * c->pp + s] > 0 ? c->layers[chunk * c->pp + s] : 1;
    o.dur = dur;
    return o;
}

static PlanOp p2p_op(const PlanOpCosts *c, PlanOpKind kind, int s, int mb, int chunk, int peer,
                     double bytes, double dur)
{
    PlanOp o = op_of(c, kind, s, mb, chunk);
    o.stream = kind == OP_SEND_ACT || kind == OP_SEND_GRAD ? STREAM_P2P : STREAM_COMPUTE;
    o.peer = peer;
    o.coll = COLL_P2P;
    o.group = GROUP_PP;
    o.bytes = bytes;
    o.dur = o.stream == STREAM_P2P ? dur : 0;
    return o;
}

/* A compute micro-step of one stage's schedule. */
typedef enum { STEP_F, STEP_B, STEP_W } StepKind;
typedef struct { StepKind kind; int mb, chunk; } Step;

/* Whether the gradient reduction of (mb, chunk) follows this step. */
static bool reduces_after(const PlanOpCosts *c, int mb)
{
    return c->zero >= 2 || mb == c->n_micro - 1;
}

/* Expand one micro-step into ops. */
static bool expand(const PlanOpCosts *c, PlanStageProgram *sp, int s, Step st, bool split_bwd)
{
    int p = c->pp, n = p * c->chunks, k = st.chunk * p + s;
    int prev = (k - 1 + n) % p, next = (k + 1) % p;
    bool has_prev = k > 0 && prev != s, has_next = k < n - 1 && next != s;
    PlanCollective red = c->zero == 0 ? COLL_ALL_REDUCE : COLL_REDUCE_SCATTER;
    int g = -1, i;
    switch (st.kind) {
    case STEP_F: {
        if (c->zero >= 3 && (g = emit(sp, comm_op(c, OP_GATHER_PARAMS, s, st.mb, st.chunk,
                                                  COLL_ALL_GATHER, c->grad_bytes[k],
                                                  c->gather[k]))) < 0)
            return false;
        if (has_prev && emit(sp, p2p_op(c, OP_RECV_ACT, s, st.mb, st.chunk, prev,
                                        c->p2p_bytes[k], 0)) < 0) return false;
        PlanOp f = op_of(c, OP_FWD, s, st.mb, st.chunk);
        f.dur = c->fwd[k];
        if ((i = emit(sp, f)) < 0) return false;
        if (g >= 0) sp->ops[g].pair = i;
        if (has_next && emit(sp, p2p_op(c, OP_SEND_ACT, s, st.mb, st.chunk, next,
                                        c->p2p_bytes[k], c->p2p[k])) < 0) return false;
        return true;
    }
    case STEP_B: {
        if (c->zero >= 3 && (g = emit(sp, comm_op(c, OP_GATHER_PARAMS, s, st.mb, st.chunk,
                                                  COLL_ALL_GATHER, c->grad_bytes[k],
                                                  c->gather[k]))) < 0)
            return false;
        if (has_next && emit(sp, p2p_op(c, OP_RECV_GRAD, s, st.mb, st.chunk, next,
                                        c->p2p_bytes[k], 0)) < 0) return false;
        PlanOp b = op_of(c, split_bwd ? OP_BWD_INPUT : OP_BWD, s, st.mb, st.chunk);
        b.dur = split_bwd ? c->bwd_input[k] : c->bwd[k];
        if ((i = emit(sp, b)) < 0) return false;
        if (g >= 0) sp->ops[g].pair = i;
        if (has_prev && emit(sp, p2p_op(c, OP_SEND_GRAD, s, st.mb, st.chunk, prev,
                                        c->p2p_bytes[k], c->p2p[k])) < 0) return false;
        if (!split_bwd && reduces_after(c, st.mb) && c->reduce[k] > 0) {
            PlanOp r = comm_op(c, OP_REDUCE_GRADS, s, st.mb, st.chunk, red, c->grad_bytes[k],
                               c->reduce[k]);
            r.pair = i;
            if (emit(sp, r) < 0) return false;
        }
        return true;
    }
    case STEP_W: {
        PlanOp w = op_of(c, OP_BWD_WEIGHT, s, st.mb, st.chunk);
        w.dur = c->bwd_weight[k];
        if ((i = emit(sp, w)) < 0) return false;
        if (reduces_after(c, st.mb) && c->reduce[k] > 0) {
            PlanOp r = comm_op(c, OP_REDUCE_GRADS, s, st.mb, st.chunk, red, c->grad_bytes[k],
                               c->reduce[k]);
            r.pair = i;
            if (emit(sp, r) < 0) return false;
        }
        return true;
    }
    }
    return false;
}

/* ---- the schedules as micro-step orders ------------------------------- */

static int gpipe(int m, Step *out)
{
    int n = 0;
    for (int i = 0; i < m; i++) out[n++] = (Step){ STEP_F, i, 0 };
    for (int i = 0; i < m; i++) out[n++] = (Step){ STEP_B, i, 0 };
    return n;
}

static int one_f_one_b(int p, int s, int m, Step *out)
{
    int w = p - s - 1 < m ? p - s - 1 : m, n = 0;
    for (int i = 0; i < w; i++) out[n++] = (Step){ STEP_F, i, 0 };
    for (int i = 0; i < m - w; i++) {
        out[n++] = (Step){ STEP_F, w + i, 0 };
        out[n++] = (Step){ STEP_B, i, 0 };
    }
    for (int i = m - w; i < m; i++) out[n++] = (Step){ STEP_B, i, 0 };
    return n;
}

/* Megatron's get_model_chunk_id and micro-batch of micro-step k. */
static Step interleaved_step(int p, int v, int k, bool fwd)
{
    int j = k % (p * v), c = j / p;
    return (Step){ fwd ? STEP_F : STEP_B, (k / (p * v)) * p + k % p, fwd ? c : v - 1 - c };
}

static int interleaved(int p, int s, int m, int v, Step *out)
{
    int total = m * v, n = 0;
    int w = m == p ? total : 2 * (p - s - 1) + (v - 1) * p;
    if (w > total) w = total;
    for (int k = 0; k < w; k++) out[n++] = interleaved_step(p, v, k, true);
    for (int i = 0; i < total - w; i++) {
        out[n++] = interleaved_step(p, v, w + i, true);
        out[n++] = interleaved_step(p, v, i, false);
    }
    for (int k = total - w; k < total; k++) out[n++] = interleaved_step(p, v, k, false);
    return n;
}

/* ZB-H1 by list scheduling over all stages at once (see the essay): each
 * stage runs its forwards and input-gradient passes in 1F1B order, and
 * slots a weight pass in whenever the next F/B is not ready yet, or when a
 * forward would put more than p micro-batches between forward and weight
 * pass (1F1B's peak, that of its stage 0). Why a scheduler and not a fixed
 * pattern: the best place for each W depends on F, B and W's costs. */
static bool zb_h1(const PlanOpCosts *c, Step **order, int *len)
{
    int p = c->pp, m = (int)c->n_micro;
    double *act = malloc(sizeof(double) * (size_t)(p * m));   /* input of F(mb) at stage s arrives */
    double *grad = malloc(sizeof(double) * (size_t)(p * m));  /* output grad of B(mb) at s arrives */
    int *nf = calloc((size_t)p, sizeof(int)), *nb = calloc((size_t)p, sizeof(int));
    int *nw = calloc((size_t)p, sizeof(int)), *pos = calloc((size_t)p, sizeof(int));
    double *free_t = calloc((size_t)p, sizeof(double));
    Step *fb = malloc(sizeof(Step) * (size_t)(2 * m) * (size_t)p);
    bool ok = act && grad && nf && nb && nw && pos && free_t && fb;
    for (int i = 0; ok && i < p * m; i++) { act[i] = INFINITY; grad[i] = INFINITY; }
    for (int i = 0; ok && i < m; i++) act[i] = 0;        /* stage 0 reads the data */
    for (int t = 0; ok && t < p; t++) one_f_one_b(p, t, m, fb + (size_t)t * 2 * m);
    int done = 0, need = 3 * p * m;
    while (ok && done < need) {
        /* the stage that can act first; an earlier arrival for it could
         * only come from a stage acting earlier, which would be chosen */
        int s = -1;
        double now = INFINITY;
        bool take_x = false;
        for (int t = 0; t < p; t++) {
            if (nw[t] >= m) continue;
            const Step *x = pos[t] < 2 * m ? &fb[(size_t)t * 2 * m + pos[t]] : NULL;
            double tx = !x ? INFINITY : x->kind == STEP_F ? act[t * m + x->mb] : grad[t * m + x->mb];
            bool forced = x && x->kind == STEP_F && nf[t] - nw[t] >= p;
            bool pending = nb[t] > nw[t];
            double at = pending ? free_t[t] : fmax(free_t[t], tx);
            if (at < now) {
                now = at; s = t;
                take_x = x && !forced && tx <= at;
            }
        }
        if (s < 0 || now == INFINITY) { ok = false; break; }
        Step st = take_x ? fb[(size_t)s * 2 * m + pos[s]] : (Step){ STEP_W, nw[s], 0 };
        int k = s;   /* zb-h1 has one chunk: vstage = stage */
        double dur = st.kind == STEP_F ? c->fwd[k] : st.kind == STEP_B ? c->bwd_input[k]
                                                                       : c->bwd_weight[k];
        double end = now + dur;
        order[s][len[s]++] = st;
        if (st.kind == STEP_F) {
            if (s + 1 < p) act[(s + 1) * m + st.mb] = end + c->p2p[k];
            else grad[s * m + st.mb] = end;            /* the last stage's loss gradient */
            nf[s]++;
            pos[s]++;
        } else if (st.kind == STEP_B) {
            if (s > 0) grad[(s - 1) * m + st.mb] = end + c->p2p[k];
            nb[s]++;
            pos[s]++;
        } else {
            nw[s]++;
        }
        free_t[s] = end;
        done++;
    }
    free(act); free(grad); free(nf); free(nb); free(nw); free(pos); free(free_t); free(fb);
    return ok && done == need;
}

bool plan_lower_costs(const PlanOpCosts *c, PlanProgram *out)
{
    int p = c->pp, v = c->chunks, m = (int)c->n_micro;
    memset(out, 0, sizeof *out);
    out->pp = p; out->chunks = v; out->zero = c->zero;
    out->schedule = c->schedule; out->n_micro = c->n_micro;
    out->stages = calloc((size_t)p, sizeof *out->stages);
    Step **order = calloc((size_t)p, sizeof *order);
    int *len = calloc((size_t)p, sizeof *len);
    bool ok = out->stages && order && len && m > 0;
    for (int s = 0; ok && s < p; s++) {
        out->stages[s].stage = s;
        ok = (order[s] = malloc(sizeof(Step) * (size_t)(3 * m * v))) != NULL;
    }
    if (ok) {
        if (c->schedule == SCHED_ZB_H1) ok = zb_h1(c, order, len);
        else
            for (int s = 0; s < p; s++)
                len[s] = c->schedule == SCHED_GPIPE ? gpipe(m, order[s])
                       : c->schedule == SCHED_INTERLEAVED ? interleaved(p, s, m, v, order[s])
                       : one_f_one_b(p, s, m, order[s]);
    }
    for (int s = 0; ok && s < p; s++) {
        PlanStageProgram *sp = &out->stages[s];
        for (int i = 0; ok && i < len[s]; i++)
            ok = expand(c, sp, s, order[s][i], c->schedule == SCHED_ZB_H1);
        PlanOp o = op_of(c, OP_OPT_STEP, s, -1, 0);
        o.chunk = -1; o.vstage = -1; o.dur = c->opt[s];
        ok = ok && emit(sp, o) >= 0;
        double sync = 0, bytes = 0;
        for (int ch = 0; ch < v; ch++) { sync += c->sync[ch * p + s]; bytes += c->grad_bytes[ch * p + s]; }
        if (ok && sync > 0) {
            PlanOp y = comm_op(c, OP_SYNC_PARAMS, s, -1, 0, COLL_ALL_GATHER, bytes, sync);
            y.chunk = -1; y.vstage = -1; y.buckets = 1;
            ok = emit(sp, y) >= 0;
        }
    }
    for (int s = 0; order && s < p; s++) free(order[s]);
    free(order);
    free(len);
    if (!ok) plan_program_free(out);
    return ok;
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
    oc.zero = l.zero; oc.schedule = l.schedule; oc.n_micro = pc.n_micro;
    for (int k = 0; k < pc.n_chunks; k++) {
        const PlanChunkCost *cc = &pc.cost[k];
        oc.fwd[k] = cc->fwd; oc.bwd[k] = cc->bwd;
        oc.bwd_input[k] = cc->bwd_input; oc.bwd_weight[k] = cc->bwd_weight;
        oc.p2p[k] = cc->p2p; oc.p2p_bytes[k] = cc->p2p_bytes;
        oc.reduce[k] = cc->reduce; oc.gather[k] = cc->gather; oc.sync[k] = cc->sync;
        oc.grad_bytes[k] = cc->grad_bytes;
        oc.first_layer[k] = pc.chunk[k].first; oc.end_layer[k] = pc.chunk[k].end;
        oc.layers[k] = cc->layers;
    }
    for (int s = 0; s < l.pp; s++) oc.opt[s] = pc.opt[s];
    ok = plan_lower_costs(&oc, out);
    if (ok) { out->dp = l.dp; out->tp = l.tp; }
    else snprintf(why, len, "the schedule could not be built (out of memory or deadlock)");
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
