/*
 * schedule.c: the pipeline schedules as micro-step orders, and where the
 * gradient reductions go. The one place where schedules live.
 *
 * Each schedule is the order of compute micro-steps of one stage —
 * F(mb, chunk), B(mb, chunk) and, for ZB-H1, W(mb). lower.c expands each
 * step into ops (plan_expand_step); simulate.c's fast path runs the same
 * expansion without keeping the ops.
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
 *
 * Reductions: a chunk's DP gradient reduction follows its last
 * micro-batch's backward (zb-h1: weight pass), or every one under
 * ZeRO-2/3 (sharded gradients); none here when they wait for the flush
 * (lower.c then puts them after the last compute op).
 */
#include "planner/schedule.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the schedules as micro-step orders ------------------------------- */

/* Megatron's get_model_chunk_id and micro-batch of micro-step k. */
static Step interleaved_step(int p, int v, int k, bool fwd)
{
    int j = k % (p * v), c = j / p;
    return (Step){ fwd ? STEP_F : STEP_B, (k / (p * v)) * p + k % p, fwd ? c : v - 1 - c, false };
}

/* GPipe, 1F1B and interleaved 1F1B share one shape: of T forwards, w run
 * in the warm-up, then one forward / one backward T - w times, then w
 * backwards in the cool-down. GPipe: w = T = m; 1F1B: T = m, w =
 * min(p-s-1, m); interleaved: T = m v, w = 2(p-s-1) + (v-1)p (all of them
 * when m == p), at most T. */
PlanStep plan_schedule_step(int schedule, int p, int s, int64_t m, int v, int i)
{
    return plan_schedule_step_x(schedule, p, s, m, v, 0, i);
}

PlanStep plan_schedule_step_x(int schedule, int p, int s, int64_t m, int v, int extra, int i)
{
    int T = schedule == SCHED_INTERLEAVED ? (int)m * v : (int)m;
    int w = schedule == SCHED_GPIPE ? T
          : schedule == SCHED_INTERLEAVED ? (m == p ? T : 2 * (p - s - 1) + (v - 1) * p + extra)
          : p - s - 1 + extra;
    if (w > T) w = T;
    bool fwd;
    int idx, j = i - w;
    if (i < w) { fwd = true; idx = i; }
    else if (j < 2 * (T - w)) { fwd = !(j & 1); idx = fwd ? w + j / 2 : j / 2; }
    else { fwd = false; idx = T - w + (j - 2 * (T - w)); }
    Step st = schedule == SCHED_INTERLEAVED ? interleaved_step(p, v, idx, fwd)
                                            : (Step){ fwd ? STEP_F : STEP_B, idx, 0, false };
    /* the steady state pairs each forward with the backward after it
     * (Megatron-Core's combined 1F1B runs them as one step): both are
     * paired when they are of different (micro-batch, chunk), as the two
     * must be to run at once (1F1B's last stage, w = 0, runs F(i) B(i):
     * no pair) */
    if (schedule != SCHED_GPIPE && i >= w && j < 2 * (T - w)) {
        int jf = j & ~1;   /* the pair's forward step and its backward */
        Step f = schedule == SCHED_INTERLEAVED ? interleaved_step(p, v, w + jf / 2, true)
                                               : (Step){ STEP_F, w + jf / 2, 0, false };
        Step b = schedule == SCHED_INTERLEAVED ? interleaved_step(p, v, jf / 2, false)
                                               : (Step){ STEP_B, jf / 2, 0, false };
        st.paired = f.mb != b.mb || f.chunk != b.chunk;
    }
    return st;
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
        Step st = take_x ? z.fb[(size_t)s * 2 * m + z.pos[s]] : (Step){ STEP_W, z.nw[s], 0, false };
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
        for (int i = 0; i < n; i++) order[s][i] = plan_schedule_step_x(c->schedule, p, s, m, v, c->warmup_extra, i);
        len[s] = n;
    }
    return true;
}

int plan_schedule_len(const PlanOpCosts *c)
{
    int m = (int)c->n_micro;
    if (c->schedule == SCHED_ZB_H1) return 3 * m;
    return 2 * m * (c->schedule == SCHED_INTERLEAVED ? c->chunks : 1);
}

/* ---- closed forms (uniform stages) and bounds ------------------------- */

double plan_bubble_closed_form(int schedule, int p, int64_t m, int v,
                               double F, double B, double W)
{
    double dm = (double)m;
    switch (schedule) {
    case SCHED_INTERLEAVED: return (p - 1) / ((double)v * dm);
    case SCHED_ZB_H1:       return (p - 1) * fmax(F + B - W, 0) / (dm * (F + B + W));
    default:                return (p - 1) / dm;
    }
}

/* Per-stage sums of one field over a table given as runs of equal rows:
 * out[s] sums the chunks k = s mod p. A run of at least p chunks adds its
 * whole cycles to every stage at once, so the work is O(runs + p), not
 * O(chunks). */
static void stage_sums(const PlanChunkRun *run, int n_run, int p, size_t field, double *out)
{
    double all = 0;
    for (int s = 0; s < p; s++) out[s] = 0;
    for (int r = 0; r < n_run; r++) {
        double x = *(const double *)((const char *)run[r].row + field);
        int k = run[r].first, end = k + run[r].count, full = run[r].count / p;
        if (full) { all += full * x; k += full * p; }
        for (; k < end; k++) out[k % p] += x;
    }
    for (int s = 0; s < p; s++) out[s] += all;
}

/* The row of chunk k (k within the table). */
static const PlanChunkCost *row_at(const PlanChunkRun *run, int n_run, int k)
{
    int r = 0;
    while (r < n_run - 1 && run[r].first + run[r].count <= k) r++;
    return run[r].row;
}

/* Why: with many chunks per stage (interleaved v in the thousands) the
 * stage bound misses what dominates, the transfers between virtual
 * stages. One micro-batch's passes form a chain every schedule obeys
 * (lower.c's expansion: a forward receives its input from the virtual
 * stage before it, a backward its gradient from the one after it, each a
 * send of the sender's p2p seconds once the sender's pass has ended): all
 * forwards in order, then all backwards (ZB-H1: input-gradient parts;
 * its weight passes are off the chain) in reverse, with a transfer at
 * every hop between two stages — all of them when pp > 1, as consecutive
 * virtual stages sit on neighbouring stages. Every schedule runs a
 * chunk's forwards, and its backwards, in micro-batch order, so micro-batch
 * j's chain starts after j forwards of virtual stage 0 and its last
 * backward there is followed by m - 1 - j more: the bound takes the larger
 * of the two ends. Seconds. */
/* The shortest a chunk's forward and backward (zb-h1: input part) run:
 * a step paired under overlap_moe_a2a hides fwd_ep_hidden / bwd_ep_hidden
 * (lower.c), so a bound must take them off. */
static double fwd_min(const PlanChunkCost *q) { return q->fwd - q->fwd_ep_hidden; }
static double bwd_min(const PlanChunkCost *q, bool zb)
{
    return (zb ? q->bwd_input : q->bwd) - q->bwd_ep_hidden;
}

static double micro_batch_path(const PlanCosts *c, const PlanChunkRun *run, int n_run)
{
    const Layout *l = &c->layout;
    int n = l->pp * l->chunks;
    bool zb = l->schedule == SCHED_ZB_H1;
    double t = 0, hops = 0;
    for (int r = 0; r < n_run; r++) {
        const PlanChunkCost *q = run[r].row;
        t += run[r].count * (fwd_min(q) + bwd_min(q, zb));
        hops += run[r].count * q->p2p;
    }
    const PlanChunkCost *first = run[0].row, *last = row_at(run, n_run, n - 1);
    if (l->pp > 1) t += 2 * hops - first->p2p - last->p2p;   /* n - 1 sends each way */
    return t + (double)(c->n_micro - 1) * fmax(fwd_min(first), bwd_min(first, zb));
}

double plan_pipeline_comm_bound_runs(const PlanCosts *c, const PlanChunkRun *run, int n_run)
{
    const Layout *l = &c->layout;
    int p = l->pp;
    bool zb = l->schedule == SCHED_ZB_H1;
    double m = (double)c->n_micro, bound = 0;
    double *G = malloc(2 * (size_t)p * sizeof *G), *R = G ? G + p : NULL;
    if (!G) return 0;   /* no bound is a safe bound */
    /* the comm stream runs, first in first out, every pass's gather and,
     * before the last backward's gather, every other backward's reduction
     * (not counted under zb-h1, where they follow the deferred weight
     * passes, nor when they wait for the flush); the last pass ends after
     * its gather */
    stage_sums(run, n_run, p, offsetof(PlanChunkCost, gather), G);
    stage_sums(run, n_run, p, offsetof(PlanChunkCost, reduce), R);
    for (int s = 0; s < p; s++)
        bound = fmax(bound, 2 * m * G[s] + (zb || c->reduce_after_flush ? 0
                                            : m * R[s] - row_at(run, n_run, s)->reduce));
    free(G);
    return bound;
}

double plan_pipeline_time_runs(const PlanCosts *c, const PlanChunkRun *run, int n_run)
{
    const Layout *l = &c->layout;
    int p = l->pp;
    bool zb = l->schedule == SCHED_ZB_H1;
    double m = (double)c->n_micro, bound = 0, chain = 0;   /* chain: stages before s, chunk 0 */
    double *F = malloc(4 * (size_t)p * sizeof *F), *B = F ? F + p : NULL;
    if (!F) return 0;
    double *HF = F + 2 * p, *HB = F + 3 * p;   /* what paired steps hide (overlap_moe_a2a) */
    stage_sums(run, n_run, p, offsetof(PlanChunkCost, fwd), F);
    stage_sums(run, n_run, p, offsetof(PlanChunkCost, bwd), B);
    stage_sums(run, n_run, p, offsetof(PlanChunkCost, fwd_ep_hidden), HF);
    stage_sums(run, n_run, p, offsetof(PlanChunkCost, bwd_ep_hidden), HB);
    for (int s = 0; s < p; s++) {
        bound = fmax(bound, chain + m * (F[s] - HF[s] + B[s] - HB[s]));
        const PlanChunkCost *k = row_at(run, n_run, s);
        chain += fwd_min(k) + k->p2p + (zb ? 0 : bwd_min(k, false) + k->p2p);
    }
    free(F);
    if (l->zero >= 3) bound = fmax(bound, plan_pipeline_comm_bound_runs(c, run, n_run));
    return fmax(bound, micro_batch_path(c, run, n_run));
}

/* c's rows as runs of one chunk each (the tables plan_costs builds). */
static PlanChunkRun *rows_as_runs(const PlanCosts *c)
{
    PlanChunkRun *r = malloc((size_t)(c->n_chunks ? c->n_chunks : 1) * sizeof *r);
    for (int k = 0; r && k < c->n_chunks; k++) r[k] = (PlanChunkRun){ k, 1, &c->cost[k] };
    return r;
}

double plan_pipeline_comm_bound(const PlanCosts *c)
{
    PlanChunkRun *r = rows_as_runs(c);
    double t = r ? plan_pipeline_comm_bound_runs(c, r, c->n_chunks) : 0;
    free(r);
    return t;
}

double plan_pipeline_time(const PlanCosts *c)
{
    PlanChunkRun *r = rows_as_runs(c);
    double t = r ? plan_pipeline_time_runs(c, r, c->n_chunks) : 0;
    free(r);
    return t;
}
