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
 * The step orders are public (plan_schedule_step, plan_schedule_steps):
 * the fast path's simulation (simulate.c) walks them without building ops.
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
        "RECV_GRAD", "GATHER_PARAMS", "REDUCE_GRADS", "OPT_STEP", "SYNC_PARAMS",
        "SP_NORM_REDUCE", "EMBED_REDUCE", "NORM_REDUCE" };
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
    o.stream = (kind == OP_SEND_ACT || kind == OP_SEND_GRAD) && !c->p2p_blocking ? STREAM_P2P : STREAM_COMPUTE;
    o.peer = peer;
    o.coll = COLL_P2P;
    o.group = GROUP_PP;
    o.bytes = bytes;
    o.dur = kind == OP_SEND_ACT || kind == OP_SEND_GRAD ? dur : 0;
    return o;
}

typedef PlanStep Step;
#define STEP_F PLAN_STEP_F
#define STEP_B PLAN_STEP_B
#define STEP_W PLAN_STEP_W

/* Whether the gradient reduction of (mb, chunk) follows this step. */
static bool reduces_after(const PlanOpCosts *c, int mb)
{
    return c->zero >= 2 || mb == c->n_micro - 1;
}

double plan_reduce_after(const PlanOpCosts *c, int k, int mb)
{
    if (c->reduce_after_flush || !reduces_after(c, mb)) return 0;
    return c->reduce[k];
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
        double rd = plan_reduce_after(c, k, st.mb);
        if (!split_bwd && rd > 0) {
            PlanOp r = comm_op(c, OP_REDUCE_GRADS, s, st.mb, st.chunk, red, c->grad_bytes[k], rd);
            r.pair = i;
            if (emit(sp, r) < 0) return false;
        }
        return true;
    }
    case STEP_W: {
        PlanOp w = op_of(c, OP_BWD_WEIGHT, s, st.mb, st.chunk);
        w.dur = c->bwd_weight[k];
        if ((i = emit(sp, w)) < 0) return false;
        double rd = plan_reduce_after(c, k, st.mb);
        if (rd > 0) {
            PlanOp r = comm_op(c, OP_REDUCE_GRADS, s, st.mb, st.chunk, red, c->grad_bytes[k], rd);
            r.pair = i;
            if (emit(sp, r) < 0) return false;
        }
        return true;
    }
    }
    return false;
}

/* ---- the schedules as micro-step orders ------------------------------- */

/* Megatron's get_model_chunk_id and micro-batch of micro-step k. */
static Step interleaved_step(int p, int v, int k, bool fwd)
{
    int j = k % (p * v), c = j / p;
    return (Step){ fwd ? STEP_F : STEP_B, (k / (p * v)) * p + k % p, fwd ? c : v - 1 - c };
}

/* GPipe, 1F1B and interleaved 1F1B share one shape: of T forwards, w run
 * in the warm-up, then one forward / one backward T - w times, then w
 * backwards in the cool-down. GPipe: w = T = m; 1F1B: T = m, w =
 * min(p-s-1, m); interleaved: T = m v, w = 2(p-s-1) + (v-1)p (all of them
 * when m == p), at most T. */
PlanStep plan_schedule_step(int schedule, int p, int s, int64_t m, int v, int i)
{
    int T = schedule == SCHED_INTERLEAVED ? (int)m * v : (int)m;
    int w = schedule == SCHED_GPIPE ? T
          : schedule == SCHED_INTERLEAVED ? (m == p ? T : 2 * (p - s - 1) + (v - 1) * p)
          : p - s - 1;
    if (w > T) w = T;
    bool fwd;
    int idx, j = i - w;
    if (i < w) { fwd = true; idx = i; }
    else if (j < 2 * (T - w)) { fwd = !(j & 1); idx = fwd ? w + j / 2 : j / 2; }
    else { fwd = false; idx = T - w + (j - 2 * (T - w)); }
    if (schedule == SCHED_INTERLEAVED) return interleaved_step(p, v, idx, fwd);
    return (Step){ fwd ? STEP_F : STEP_B, idx, 0 };
}

static int one_f_one_b(int p, int s, int m, Step *out)
{
    for (int i = 0; i < 2 * m; i++) out[i] = plan_schedule_step(SCHED_1F1B, p, s, m, 1, i);
    return 2 * m;
}

/* The state of zb-h1's list scheduler. */
typedef struct {
    int     p, m;
    double *act;            /* [p*m] input of F(mb) at stage s arrives */
    double *grad;           /* [p*m] output gradient of B(mb) at stage s arrives */
    int    *nf, *nb, *nw;   /* [p] forwards, input and weight passes done */
    int    *pos;            /* [p] next step of the stage's 1F1B order */
    double *free_t;         /* [p] when the stage's compute is free */
    Step   *fb;             /* [p][2m] each stage's 1F1B order of F and B */
    double *key;            /* [p] when the stage can act next (INFINITY: never) */
    bool   *take;           /* [p] whether that action is its next F/B (else a W) */
    int    *heap, *where;   /* min-heap of stages by (key, stage) and its inverse */
} Zb;

/* When stage t can act next and whether that is its next F/B (else a W):
 * a pending weight pass runs as soon as the stage is free, unless its next
 * F/B is ready by then and would not put more than p micro-batches
 * between forward and weight pass. */
static double zb_at(const Zb *z, int t, bool *take_x)
{
    int m = z->m;
    *take_x = false;
    if (z->nw[t] >= m) return INFINITY;
    const Step *x = z->pos[t] < 2 * m ? &z->fb[(size_t)t * 2 * m + z->pos[t]] : NULL;
    double tx = !x ? INFINITY : x->kind == STEP_F ? z->act[t * m + x->mb] : z->grad[t * m + x->mb];
    bool forced = x && x->kind == STEP_F && z->nf[t] - z->nw[t] >= z->p;
    bool pending = z->nb[t] > z->nw[t];
    double at = pending || z->free_t[t] > tx ? z->free_t[t] : tx;
    *take_x = x && !forced && tx <= at;
    return at;
}

static bool zb_less(const Zb *z, int a, int b)
{
    return z->key[a] < z->key[b] || (z->key[a] == z->key[b] && a < b);
}

static void zb_swap(Zb *z, int i, int j)
{
    int a = z->heap[i], b = z->heap[j];
    z->heap[i] = b; z->heap[j] = a;
    z->where[b] = i; z->where[a] = j;
}

/* Recompute stage t's key and restore the heap order around it. */
static void zb_fix(Zb *z, int t)
{
    z->key[t] = zb_at(z, t, &z->take[t]);
    int i = z->where[t];
    while (i > 0 && zb_less(z, z->heap[i], z->heap[(i - 1) / 2])) { zb_swap(z, i, (i - 1) / 2); i = (i - 1) / 2; }
    for (;;) {
        int l = 2 * i + 1, r = l + 1, s = i;
        if (l < z->p && zb_less(z, z->heap[l], z->heap[s])) s = l;
        if (r < z->p && zb_less(z, z->heap[r], z->heap[s])) s = r;
        if (s == i) break;
        zb_swap(z, i, s);
        i = s;
    }
}

/* ZB-H1 by list scheduling over all stages at once (see the essay): each
 * stage runs its forwards and input-gradient passes in 1F1B order, and
 * slots a weight pass in whenever the next F/B is not ready yet, or when a
 * forward would put more than p micro-batches between forward and weight
 * pass (1F1B's peak, that of its stage 0). Why a scheduler and not a fixed
 * pattern: the best place for each W depends on F, B and W's costs. The
 * stage that can act first (the lowest on ties) acts next; its action
 * changes only its own key and its neighbours', so a heap keeps the choice
 * O(log p) per step. */
static bool zb_h1(const PlanOpCosts *c, Step **order, int *len)
{
    int p = c->pp, m = (int)c->n_micro;
    Zb z = { .p = p, .m = m };
    z.act = malloc(sizeof(double) * (size_t)(p * m));
    z.grad = malloc(sizeof(double) * (size_t)(p * m));
    z.nf = calloc((size_t)p, sizeof(int)); z.nb = calloc((size_t)p, sizeof(int));
    z.nw = calloc((size_t)p, sizeof(int)); z.pos = calloc((size_t)p, sizeof(int));
    z.free_t = calloc((size_t)p, sizeof(double));
    z.fb = malloc(sizeof(Step) * (size_t)(2 * m) * (size_t)p);
    z.key = malloc(sizeof(double) * (size_t)p);
    z.take = malloc(sizeof(bool) * (size_t)p);
    z.heap = malloc(sizeof(int) * (size_t)p); z.where = malloc(sizeof(int) * (size_t)p);
    bool ok = z.act && z.grad && z.nf && z.nb && z.nw && z.pos && z.free_t && z.fb && z.key &&
              z.take && z.heap && z.where;
    for (int i = 0; ok && i < p * m; i++) { z.act[i] = INFINITY; z.grad[i] = INFINITY; }
    for (int i = 0; ok && i < m; i++) z.act[i] = 0;        /* stage 0 reads the data */
    for (int t = 0; ok && t < p; t++) one_f_one_b(p, t, m, z.fb + (size_t)t * 2 * m);
    for (int t = 0; ok && t < p; t++) { z.heap[t] = t; z.where[t] = t; z.key[t] = 0; }
    for (int t = 0; ok && t < p; t++) zb_fix(&z, t);
    int done = 0, need = 3 * p * m;
    while (ok && done < need) {
        int s = z.heap[0];
        bool take_x = z.take[s];
        double now = z.key[s];
        if (now == INFINITY) { ok = false; break; }
        Step st = take_x ? z.fb[(size_t)s * 2 * m + z.pos[s]] : (Step){ STEP_W, z.nw[s], 0 };
        int k = s;   /* zb-h1 has one chunk: vstage = stage */
        double dur = st.kind == STEP_F ? c->fwd[k] : st.kind == STEP_B ? c->bwd_input[k]
                                                                       : c->bwd_weight[k];
        double end = now + dur;
        order[s][len[s]++] = st;
        if (st.kind == STEP_F) {
            if (s + 1 < p) z.act[(s + 1) * m + st.mb] = end + c->p2p[k];
            else z.grad[s * m + st.mb] = end;            /* the last stage's loss gradient */
            z.nf[s]++;
            z.pos[s]++;
        } else if (st.kind == STEP_B) {
            if (s > 0) z.grad[(s - 1) * m + st.mb] = end + c->p2p[k];
            z.nb[s]++;
            z.pos[s]++;
        } else {
            z.nw[s]++;
        }
        z.free_t[s] = end;
        done++;
        /* a forward feeds the next stage, a backward the previous one */
        zb_fix(&z, s);
        if (st.kind == STEP_F && s + 1 < p) zb_fix(&z, s + 1);
        if (st.kind == STEP_B && s > 0) zb_fix(&z, s - 1);
    }
    free(z.act); free(z.grad); free(z.nf); free(z.nb); free(z.nw); free(z.pos); free(z.free_t);
    free(z.fb); free(z.key); free(z.take); free(z.heap); free(z.where);
    return ok && done == need;
}

/* The last zb-h1 order built, per thread, and the inputs it depends on:
 * per stage F, B (input part), W and the send time, and m. */
typedef struct {
    int     p, m;
    double *in;       /* [4p] fwd, bwd_input, bwd_weight, p2p of each stage */
    Step   *steps;    /* [p][3m] */
} ZbMemo;

static _Thread_local ZbMemo zb_memo;

static void zb_inputs(const PlanOpCosts *c, double *in)
{
    int p = c->pp;
    for (int s = 0; s < p; s++) {
        in[s] = c->fwd[s]; in[p + s] = c->bwd_input[s];
        in[2 * p + s] = c->bwd_weight[s]; in[3 * p + s] = c->p2p[s];
    }
}

/* Why memoised: the order depends only on F, B, W and the send time of
 * each stage and on m — not on ZeRO, whose stages the search evaluates
 * one after another with the very same order — so an exact match of those
 * inputs reuses the last order (a 64-stage, 512-micro-batch order is
 * 98,000 list-scheduling steps; the copy is one memcpy per stage). */
static bool zb_h1_memo(const PlanOpCosts *c, Step **order, int *len)
{
    int p = c->pp, m = (int)c->n_micro;
    ZbMemo *z = &zb_memo;
    double *in = malloc(sizeof(double) * 4 * (size_t)p);
    if (!in) return false;
    zb_inputs(c, in);
    if (z->steps && z->p == p && z->m == m && !memcmp(z->in, in, sizeof(double) * 4 * (size_t)p)) {
        for (int s = 0; s < p; s++) {
            memcpy(order[s], z->steps + (size_t)s * 3 * m, sizeof(Step) * 3 * (size_t)m);
            len[s] = 3 * m;
        }
        free(in);
        return true;
    }
    if (!zb_h1(c, order, len)) { free(in); return false; }
    Step *steps = malloc(sizeof(Step) * 3 * (size_t)m * (size_t)p);
    if (steps) {   /* remember it (every stage runs 3m steps) */
        for (int s = 0; s < p; s++) memcpy(steps + (size_t)s * 3 * m, order[s], sizeof(Step) * 3 * (size_t)m);
        free(z->in); free(z->steps);
        *z = (ZbMemo){ p, m, in, steps };
    } else {
        free(in);
    }
    return true;
}

bool plan_schedule_steps(const PlanOpCosts *c, PlanStep **order, int *len)
{
    int p = c->pp, v = c->chunks, m = (int)c->n_micro;
    if (m <= 0) return false;
    for (int s = 0; s < p; s++) len[s] = 0;
    if (c->schedule == SCHED_ZB_H1) return zb_h1_memo(c, order, len);
    int n = 2 * m * (c->schedule == SCHED_INTERLEAVED ? v : 1);
    for (int s = 0; s < p; s++) {
        for (int i = 0; i < n; i++) order[s][i] = plan_schedule_step(c->schedule, p, s, m, v, i);
        len[s] = n;
    }
    return true;
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
    if (ok) ok = plan_schedule_steps(c, order, len);
    for (int s = 0; ok && s < p; s++) {
        PlanStageProgram *sp = &out->stages[s];
        for (int i = 0; ok && i < len[s]; i++)
            ok = expand(c, sp, s, order[s][i], c->schedule == SCHED_ZB_H1);
        /* reductions that wait for the flush: one per chunk, each the
         * whole of it (pair -1: it drains nothing), then the step */
        for (int ch = 0; ok && c->reduce_after_flush && ch < v; ch++) {
            int k = ch * p + s;
            double d = c->reduce[k];
            if (d > 0)
                ok = emit(sp, comm_op(c, OP_REDUCE_GRADS, s, m - 1, ch,
                                      c->zero == 0 ? COLL_ALL_REDUCE : COLL_REDUCE_SCATTER,
                                      c->grad_bytes[k], d)) >= 0;
        }
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

void plan_op_costs_fill(const PlanCosts *pc, PlanOpCosts *oc)
{
    const Layout *l = &pc->layout;
    oc->zero = l->zero; oc->schedule = l->schedule; oc->n_micro = pc->n_micro;
    oc->reduce_after_flush = pc->reduce_after_flush;
    oc->p2p_blocking = pc->p2p_blocking;
    for (int k = 0; k < pc->n_chunks; k++) {
        const PlanChunkCost *cc = &pc->cost[k];
        oc->fwd[k] = cc->fwd; oc->bwd[k] = cc->bwd;
        oc->bwd_input[k] = cc->bwd_input; oc->bwd_weight[k] = cc->bwd_weight;
        oc->p2p[k] = cc->p2p; oc->p2p_bytes[k] = cc->p2p_bytes;
        oc->reduce[k] = cc->reduce; oc->gather[k] = cc->gather; oc->sync[k] = cc->sync;
        oc->grad_bytes[k] = cc->grad_bytes;
        oc->first_layer[k] = pc->chunk[k].first; oc->end_layer[k] = pc->chunk[k].end;
        oc->layers[k] = cc->layers;
    }
    for (int s = 0; s < l->pp; s++) oc->opt[s] = pc->opt ? pc->opt[s] : 0;
}

/* Whether the model's lm_head is tied to its embedding. */
static bool head_tied(const Model *m)
{
    return m->n_layers > 0 && m->layers[m->n_layers - 1].kind == LAYER_LM_HEAD &&
           m->layers[m->n_layers - 1].tied;
}

/* A minimal lowering of the step-level collectives (h-codegen's, until
 * h-core's costed one replaces it): SP_NORM_REDUCE (SP, tp > 1),
 * EMBED_REDUCE (tied head, pp > 1, first and last stage), NORM_REDUCE
 * (every stage), in that order right before each stage's OPT_STEP. Their
 * durations are 0 here. */
static bool add_step_collectives(const Plan *p, const Layout *l, PlanProgram *out)
{
    for (int s = 0; s < out->pp; s++) {
        PlanStageProgram *sp = &out->stages[s];
        int at = 0;
        while (at < sp->n_ops && sp->ops[at].kind != OP_OPT_STEP) at++;
        PlanOpKind add[3];
        int n = 0;
        if (l->sequence_parallel == 1 && l->tp > 1) add[n++] = OP_SP_NORM_REDUCE;
        if (head_tied(&p->model) && l->pp > 1 && (s == 0 || s == l->pp - 1)) add[n++] = OP_EMBED_REDUCE;
        add[n++] = OP_NORM_REDUCE;
        for (int k = 0; k < n; k++) {
            PlanOp o;
            memset(&o, 0, sizeof o);
            o.kind = add[k]; o.mb = -1; o.chunk = -1; o.vstage = -1; o.peer = -1; o.pair = -1;
            o.first_layer = o.end_layer = 0;
            o.coll = COLL_ALL_REDUCE; o.stream = STREAM_COMPUTE;
            o.group = add[k] == OP_SP_NORM_REDUCE ? GROUP_TP : GROUP_PP;
            if (emit(sp, o) < 0) return false;
            memmove(&sp->ops[at + 1], &sp->ops[at], sizeof(PlanOp) * (size_t)(sp->n_ops - 1 - at));
            sp->ops[at++] = o;
        }
    }
    return true;
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
    ok = plan_lower_costs(&oc, out) && add_step_collectives(p, &l, out);
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
