/*
 * timeline.c: a Program and its simulated spans -> the boxes to draw.
 *
 * This file copies; it does not schedule. Every box is one op of the
 * Program with exactly the start and end the simulator gave it, so the
 * picture shows the very step the planner predicts (and the code generator
 * emits). Lanes follow the op's stream: compute kernels on the stage's
 * main row, pipeline sends and receive waits on a thin p2p lane, DP/ZeRO
 * collectives on a thin lane beneath. The collectives a pass waits for
 * inside it (TP all-reduces, EP all-to-alls) are no ops of their own: they
 * are the PlanOp's tp_dur / ep_dur, drawn as segments of the pass on the
 * in-pass lane. Each stage's summary (where its step went) is the
 * simulator's books of it split by the same per-op figures.
 */
#include "trace/trace.h"

#include "planner/comm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/layout.h"

bool tr_is_compute(PlanOpKind k)
{
    return k == OP_FWD || k == OP_BWD || k == OP_BWD_INPUT || k == OP_BWD_WEIGHT;
}

/* Lanes follow the simulator's streams, except that receive waits, which
 * block the compute stream, are drawn beside the sends they wait for. */
TrLane tr_lane_of(PlanOpKind k)
{
    switch (k) {   /* ORDER PlanOpKind */
    case OP_FWD: case OP_BWD: case OP_BWD_INPUT: case OP_BWD_WEIGHT: case OP_OPT_STEP:
        return TR_LANE_COMPUTE;
    case OP_SEND_ACT: case OP_RECV_ACT: case OP_SEND_GRAD: case OP_RECV_GRAD:
        return TR_LANE_P2P;
    case OP_GATHER_PARAMS: case OP_REDUCE_GRADS: case OP_SYNC_PARAMS:
    case OP_SP_NORM_REDUCE: case OP_EMBED_REDUCE: case OP_NORM_REDUCE:
        return TR_LANE_COLL;
    case OP_EP_ALL_TO_ALL: case OP_TP_COLL: case OP_CP_COLL:
        return TR_LANE_PASS;
    }
    return TR_LANE_COMPUTE;
}

const char *tr_op_title(PlanOpKind k)
{
    switch (k) {
    case OP_SP_NORM_REDUCE: return "SP norm-gradient all-reduce (TP)";
    case OP_EMBED_REDUCE:   return "tied-embedding all-reduce (first + last stage)";
    case OP_NORM_REDUCE:    return "gradient-norm all-reduce (all ranks)";
    case OP_EP_ALL_TO_ALL:  return "EP dispatch + combine all-to-alls (inside the pass)";
    case OP_TP_COLL:        return "TP collectives (inside the pass)";
    case OP_CP_COLL:        return "CP attention transfers (inside the pass)";
    default:                return plan_op_name(k);
    }
}

const char *tr_item_name(TrItem i)
{
    static const char *const names[TR_N_ITEMS] = {   /* ORDER TrItem */
        "forward", "backward", "recomputation", "exposed TP", "exposed EP", "exposed DP/ZeRO",
        "compute slowed by DP", "p2p sends", "step all-reduces", "optimizer", "bubble",
        "gaps between ops", "exposed CP" };
    return (unsigned)i < TR_N_ITEMS ? names[i] : "?";
}

/* Stage s's summary: the simulator's books (PlanStageTimes) with the
 * forward/backward time split by the ops' own figures, so that the bar
 * and the in-pass segments show the same seconds. */
static void summarise_stage(const PlanStageProgram *sp, const PlanStageTimes *st, TrStageSummary *out)
{
    memset(out, 0, sizeof *out);
    double *it = out->item;
    for (int i = 0; i < sp->n_ops; i++) {
        const PlanOp *o = &sp->ops[i];
        if (!tr_is_compute(o->kind)) continue;
        double kernels = o->dur - o->tp_dur - o->ep_dur - o->cp_dur;
        it[TR_ITEM_TP] += o->tp_dur;
        it[TR_ITEM_CP] += o->cp_dur;
        it[TR_ITEM_EP] += o->ep_dur;
        it[TR_ITEM_RECOMPUTE] += o->rc_dur;
        it[o->kind == OP_FWD ? TR_ITEM_FWD : TR_ITEM_BWD] += kernels - o->rc_dur;
    }
    it[TR_ITEM_DP] = st->comm_wait + st->stall + st->sync;
    it[TR_ITEM_SLOWED] = st->slowed;
    it[TR_ITEM_P2P] = st->p2p;
    it[TR_ITEM_STEPCOLL] = st->sp_norm + st->embed + st->norm;
    it[TR_ITEM_OPT] = st->opt;
    it[TR_ITEM_BUBBLE] = st->bubble;
    out->end = st->end;
}

/* The segments of pass b (op o) on the in-pass lane, written to out: its
 * EP all-to-alls and TP collectives run layer by layer inside it; each is
 * drawn as one segment of their summed time at the pass's end (EP last,
 * TP before it). Returns how many. */
static int pass_segments(const TrBox *b, const PlanOp *o, TrBox *out)
{
    int n = 0;
    double t = b->end;
    if (o->ep_dur > 0) {
        TrBox *a = &out[n++];
        *a = *b;
        a->kind = OP_EP_ALL_TO_ALL;
        a->start = fmax(b->start, t - o->ep_dur);
        a->end = t;
        a->bytes = o->ep_bytes;
        t = a->start;
    }
    if (o->tp_dur > 0) {
        TrBox *a = &out[n++];
        *a = *b;
        a->kind = OP_TP_COLL;
        a->start = fmax(b->start, t - o->tp_dur);
        a->end = t;
        a->bytes = 0;   /* the cost table keeps the seconds, not the bytes */
        t = a->start;
    }
    if (o->cp_dur > 0) {   /* the CP attention's transfers, before the TP segment */
        TrBox *a = &out[n++];
        *a = *b;
        a->kind = OP_CP_COLL;
        a->start = fmax(b->start, t - o->cp_dur);
        a->end = t;
        a->bytes = o->cp_bytes;
    }
    return n;
}

/* "dp 2 x tp 2 x pp 2, ZeRO-1, 1f1b, 8 micro-batches" from the Program. */
static void layout_line(const PlanProgram *p, char *buf, size_t len)
{
    char chunks[32] = "", cp[24] = "";
    if (p->chunks > 1) snprintf(chunks, sizeof chunks, " x %d chunks", p->chunks);
    if (p->cp > 1) snprintf(cp, sizeof cp, " x cp %d", p->cp);
    snprintf(buf, len, "dp %d x tp %d%s x pp %d, ZeRO-%d, %s%s, %lld micro-batches",
             p->dp, p->tp, cp, p->pp, p->zero, plan_schedule_name(p->schedule), chunks,
             (long long)p->n_micro);
}

void tr_set_topology(TrTimeline *t, const Cluster *c, int dp, int tp, int pp)
{
    int64_t npp = c->nodes_per_pod > 0 && c->nodes > c->nodes_per_pod ? c->nodes_per_pod : c->nodes;
    t->nodes = c->nodes;
    t->gpus_per_node = c->gpus_per_node;
    t->nodes_per_pod = npp;
    t->pods = (c->nodes + npp - 1) / npp;
    t->link_bw[0] = c->intra.bandwidth;
    t->link_bw[1] = c->inter.bandwidth;
    t->link_bw[2] = t->pods > 1 ? c->pod.bandwidth : 0;
    PlanGroupKind k[3] = { GROUP_TP, GROUP_DP, GROUP_PP };
    for (int i = 0; i < 3; i++) t->tier[i] = (int)plan_group_tier(plan_layout_group(c, dp, tp, pp, k[i]));
}

bool tr_from_program(const PlanProgram *p, const PlanSimResult *r, const char *name,
                     TrTimeline *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name ? name : "plan");
    snprintf(out->source, sizeof out->source, "predicted");
    layout_line(p, out->layout, sizeof out->layout);
    out->pp = p->pp;
    out->chunks = p->chunks > 0 ? p->chunks : 1;
    size_t n = 0;
    for (int s = 0; s < p->pp; s++)
        for (int i = 0; i < p->stages[s].n_ops; i++)
            n += 1 + (p->stages[s].ops[i].ep_dur > 0) + (p->stages[s].ops[i].tp_dur > 0) +
                 (p->stages[s].ops[i].cp_dur > 0);
    out->boxes = calloc(n ? n : 1, sizeof *out->boxes);
    out->summary = calloc((size_t)(p->pp > 0 ? p->pp : 1), sizeof *out->summary);
    if (!out->boxes || !out->summary) { tr_timeline_free(out); return false; }
    out->cap = (int)n;
    for (int s = 0; s < p->pp; s++) {
        const PlanStageProgram *sp = &p->stages[s];
        for (int i = 0; i < sp->n_ops; i++) {
            const PlanOp *o = &sp->ops[i];
            TrBox *b = &out->boxes[out->n_boxes++];
            b->stage = s;
            b->op = i;
            b->kind = o->kind;
            b->mb = o->mb;
            b->chunk = o->chunk;
            b->start = r->span[s][i].start;
            b->end = r->span[s][i].end;
            b->bytes = o->bytes;
            out->step_time = fmax(out->step_time, b->end);
            if (tr_is_compute(o->kind)) out->n_boxes += pass_segments(b, o, b + 1);
        }
        summarise_stage(sp, &r->times[s], &out->summary[s]);
    }
    out->critical = r->critical;
    out->bubble_fraction = r->bubble_fraction;
    return true;
}

void tr_timeline_free(TrTimeline *t)
{
    free(t->boxes);
    free(t->summary);
    memset(t, 0, sizeof *t);
}

/* Why: one bubble definition for predicted and measured timelines
 * (planner/simulate.h): on the stage whose last box ends last (the lowest
 * on ties), the time its compute stream waited for another stage — its
 * receive-wait boxes, and before a collective over several stages (the
 * tied-embedding and gradient-norm all-reduces) the gap since the stage's
 * previous boxes ended — over its forward/backward box time. */
double tr_bubble_of(const TrTimeline *t)
{
    int pp = t->pp > 0 ? t->pp : 1;
    double *busy = calloc((size_t)pp, sizeof *busy), *wait = calloc((size_t)pp, sizeof *wait);
    double *end = calloc((size_t)pp, sizeof *end);
    if (!busy || !wait || !end) { free(busy); free(wait); free(end); return NAN; }
    for (int i = 0; i < t->n_boxes; i++) {   /* a stage's boxes come in op order */
        const TrBox *b = &t->boxes[i];
        if (b->stage < 0 || b->stage >= pp) continue;
        int s = b->stage;
        if (tr_is_compute(b->kind)) busy[s] += b->end - b->start;
        if (b->kind == OP_RECV_ACT || b->kind == OP_RECV_GRAD) wait[s] += b->end - b->start;
        if ((b->kind == OP_EMBED_REDUCE || b->kind == OP_NORM_REDUCE) && b->start > end[s])
            wait[s] += b->start - end[s];
        end[s] = fmax(end[s], b->end);
    }
    int crit = 0;
    for (int s = 1; s < pp; s++) if (end[s] > end[crit]) crit = s;
    double f = busy[crit] > 0 ? wait[crit] / busy[crit] : 0;
    free(busy); free(wait); free(end);
    return f;
}

/* Which item a compute-stream box of kind k is booked to; -1: the box is
 * not on the compute stream (sends, DP collectives, in-pass segments). */
static int compute_stream_item(PlanOpKind k)
{
    switch (k) {
    case OP_FWD:                                          return TR_ITEM_FWD;
    case OP_BWD: case OP_BWD_INPUT: case OP_BWD_WEIGHT:   return TR_ITEM_BWD;
    case OP_RECV_ACT: case OP_RECV_GRAD:                  return TR_ITEM_BUBBLE;
    case OP_OPT_STEP:                                     return TR_ITEM_OPT;
    case OP_SYNC_PARAMS:                                  return TR_ITEM_DP;
    case OP_SP_NORM_REDUCE: case OP_EMBED_REDUCE: case OP_NORM_REDUCE: return TR_ITEM_STEPCOLL;
    default:                                              return -1;
    }
}

bool tr_summarise_boxes(TrTimeline *t)
{
    int pp = t->pp > 0 ? t->pp : 1;
    free(t->summary);
    t->summary = calloc((size_t)pp, sizeof *t->summary);
    if (!t->summary) return false;
    double *cur = calloc((size_t)pp, sizeof *cur), *last = calloc((size_t)pp, sizeof *last);
    int *pass = malloc((size_t)pp * sizeof *pass);
    if (!cur || !last || !pass) { free(cur); free(last); free(pass); return false; }
    for (int s = 0; s < pp; s++) pass[s] = TR_ITEM_FWD;
    for (int i = 0; i < t->n_boxes; i++) {   /* a stage's boxes come in op order */
        const TrBox *b = &t->boxes[i];
        if (b->stage < 0 || b->stage >= pp) continue;
        int s = b->stage;
        double *it = t->summary[s].item, d = b->end - b->start;
        int k = compute_stream_item(b->kind);
        if (b->kind == OP_TP_COLL || b->kind == OP_EP_ALL_TO_ALL || b->kind == OP_CP_COLL) {   /* a part of its pass */
            it[pass[s]] -= d;
            it[b->kind == OP_TP_COLL ? TR_ITEM_TP : b->kind == OP_CP_COLL ? TR_ITEM_CP : TR_ITEM_EP] += d;
        } else if (k >= 0) {
            double idle = fmax(0, b->start - cur[s]);
            if (b->kind == OP_EMBED_REDUCE || b->kind == OP_NORM_REDUCE) {
                double others = fmax(0, b->start - fmax(cur[s], last[s]));   /* other stages */
                it[TR_ITEM_BUBBLE] += others;
                it[TR_ITEM_DP] += idle - others;
            } else {
                it[tr_is_compute(b->kind) || k == TR_ITEM_BUBBLE ? TR_ITEM_GAP : TR_ITEM_DP] += idle;
            }
            it[k] += fmax(0, b->end - fmax(b->start, cur[s]));
            cur[s] = fmax(cur[s], b->end);
            if (tr_is_compute(b->kind)) pass[s] = k;
        }
        last[s] = fmax(last[s], b->end);
    }
    t->critical = 0;
    for (int s = 0; s < pp; s++) {   /* the stage still busy after its compute stream: a gap */
        t->summary[s].item[TR_ITEM_GAP] += fmax(0, last[s] - cur[s]);
        t->summary[s].end = fmax(cur[s], last[s]);
        if (t->summary[s].end > t->summary[t->critical].end) t->critical = s;
    }
    free(cur); free(last); free(pass);
    return true;
}
