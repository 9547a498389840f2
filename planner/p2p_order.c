/*
 * p2p_order.c: the Program's pipeline transfers under NCCL's rules —
 * checked, and made to hold by posting receives early.
 *
 * NCCL (and the MPI backend under PLANRT_P2P=rendezvous) runs a rank's
 * communication in issue order on one stream, a send ends only once its
 * receive is posted, and messages between two ranks match in the order
 * they were issued (no tags). The runtime (runtime/par/pipe.c) posts a
 * stage's transfers in groups: the sends queue up and go, with the
 * receives posted early here, in one group at the next receive (which the
 * host then waits for) or before the next op that is not a transfer. A
 * schedule whose data dependencies are fine can still hang under these
 * rules: stage 0 posts a gradient send alone before a forward, stage 1
 * does the same, and each one's receive of the other's send sits behind
 * its own send (the interleaved schedule on two stages does exactly this).
 *
 * So every Program is run here, transfers only, under the runtime's
 * grouping and NCCL's rules — a model of each stage's host walking its op
 * list and of its stream, with the other ranks of a stage (DP, TP)
 * symmetric — and where it deadlocks, the receive that a blocked send
 * waits for is posted early, in the group at the head of the receiving
 * stage's stream (Megatron's send_forward_backward_recv_forward_backward
 * posts the next receives with the sends for the same reason), and the
 * run goes on from there (move_to_head: the state a run with that receive
 * posted from the start reaches), until every stage ends its list. A
 * gradient's receive is preferred: it lands in a gradient buffer of its
 * slot made at the early post (memory.c's plan_pipe_xfer_bufs counts the
 * ones alive), an activation's in one of the pipe's early buffers. Receives from one
 * peer keep their order: a receive posted early takes the earlier ones
 * from the same peer with it. The result is each RECV op's `prepost`
 * (program.h), which the code generator emits as POST_RECV_* before the
 * op that posts that group.
 *
 * The model is stricter than the runtime where it cannot see inside an
 * op: a compute op with collectives inside (tp > 1: the TP all-reduces;
 * a mixture's all-to-alls) and every blocking collective of the tail wait
 * for the stream to drain, as a blocking collective queued behind the
 * transfers does on NCCL's one stream. Asynchronous DP reductions are
 * left out: every DP rank of a stage issues them at the same point, so
 * they delay the stream but close no cycle.
 */
#include "planner/program.h"

#include <stdio.h>
#include "planner/memory.h"
#include "planner/schedule.h"
#include <stdlib.h>
#include <string.h>

static bool is_send(PlanOpKind k) { return k == OP_SEND_ACT || k == OP_SEND_GRAD; }
static bool is_recv(PlanOpKind k) { return k == OP_RECV_ACT || k == OP_RECV_GRAD; }

/* One stage in the model. Transfers are op indices of its list. */
typedef struct {
    const PlanStageProgram *sp;
    int  *nth;        /* [n_ops] transfers: its place among this stage's transfers with
                         the same peer and direction, in list order (what it matches) */
    int  *cp;         /* [n_ops] transfers: the op at the peer it pairs with */
    int  *item;       /* [n_ops] transfers: the stream entry holding it, -1: not posted */
    int  *posted;     /* transfers in the order posted; entry e is posted[start[e] ..
                         start[e + 1]) */
    int  *start;      /* [entries + 1] */
    int  *extra;      /* transfers moved into the head entry after it was posted (an early
                         receive added where a deadlock showed), n_extra of them */
    int   n_extra;
    int  *headv;      /* scratch: the head entry's transfers */
    bool *matched;    /* [n_ops] */
    int  *pending;    /* transfers queued, not posted yet */
    int   n_pending;
    int  *fifo_at;    /* [entries] the op whose arrival posted entry e */
    int  *fifo_left;  /* [entries] transfers of entry e not matched yet */
    int   n_items, head;
    int   pc;         /* next op the host takes */
    int   wait_recv;  /* the host waits for this receive, -1: does not */
    bool  drain;      /* the host waits for the stream to empty */
    bool  done;
} P2pRank;

typedef struct {
    const PlanProgram *p;
    P2pRank *r;
    bool  heavy;      /* compute ops have collectives inside (tp > 1) */
} P2pModel;

/* Where receive o is posted: before op prepost - 1, or at itself. */
static int post_point(const PlanOp *o, int i) { return o->prepost ? o->prepost - 1 : i; }

static int counterpart(const P2pModel *m, int s, int o) { return m->r[s].cp[o]; }

/* The queued transfers become one stream entry, posted at op `at`. */
static void flush(P2pRank *r, int at)
{
    if (!r->n_pending) return;
    int e = r->n_items++, b = r->start[e];
    r->fifo_at[e] = at;
    r->fifo_left[e] = r->n_pending;
    for (int i = 0; i < r->n_pending; i++) {
        r->item[r->pending[i]] = e;
        r->posted[b + i] = r->pending[i];
    }
    r->start[e + 1] = b + r->n_pending;
    r->n_pending = 0;
}

/* The transfers of r's head entry into r->headv; how many. A transfer
 * moved to an earlier entry is skipped where it was first posted. */
static int head_ops(P2pRank *r)
{
    int n = 0, e = r->head;
    for (int x = r->start[e]; x < r->start[e + 1]; x++)
        if (r->item[r->posted[x]] == e) r->headv[n++] = r->posted[x];
    for (int x = 0; x < r->n_extra; x++) r->headv[n++] = r->extra[x];
    return n;
}

/* Does op o make the host wait for the stream to drain? */
static bool is_barrier(const P2pModel *m, const PlanOp *o)
{
    switch (o->kind) {
    case OP_FWD: case OP_BWD: case OP_BWD_INPUT: case OP_BWD_WEIGHT:
        return m->heavy || o->ep_bytes > 0;
    case OP_REDUCE_GRADS:
        return false;                   /* asynchronous */
    default:
        return !is_send(o->kind);       /* the tail's blocking collectives, ZeRO gathers */
    }
}

/* The host of stage s goes as far as it can; true if it moved. */
static bool advance_host(P2pModel *m, int s)
{
    P2pRank *r = &m->r[s];
    bool moved = false;
    for (;;) {
        if (r->done) return moved;
        if (r->wait_recv >= 0) {
            if (!r->matched[r->wait_recv]) return moved;
            r->wait_recv = -1;
            r->drain = m->heavy;        /* tp > 1: the TP all-gather of the parts queues next */
            r->pc++;
            moved = true;
        }
        if (r->drain) {
            if (r->head < r->n_items) return moved;
            r->drain = false;
            moved = true;
        }
        int i = r->pc, n = r->sp->n_ops;
        if (i >= n) {                   /* prt_pipe_flush: the sends still queued go; wait */
            flush(r, n);
            if (r->head < r->n_items) { r->drain = true; return moved; }
            r->done = true;
            return true;
        }
        /* (receives posted early before op i are in their entry already:
         * move_to_head puts them there when the host has passed op i) */
        const PlanOp *o = &r->sp->ops[i];
        moved = true;
        if (is_send(o->kind)) {
            r->pending[r->n_pending++] = i;
            r->pc++;
        } else if (is_recv(o->kind)) {
            if (!o->prepost) r->pending[r->n_pending++] = i;
            flush(r, i);
            r->wait_recv = i;
        } else {
            flush(r, i);
            r->drain = is_barrier(m, o);
            r->pc++;
        }
    }
}

/* Match the transfers at the heads of the streams; pop finished heads. */
static bool match_heads(P2pModel *m)
{
    bool moved = false;
    for (int s = 0; s < m->p->pp; s++) {
        P2pRank *r = &m->r[s];
        if (r->head >= r->n_items) continue;
        int nh = head_ops(r);
        for (int x = 0; x < nh; x++) {
            int o = r->headv[x];
            if (r->matched[o]) continue;
            int t = r->sp->ops[o].peer, c = counterpart(m, s, o);
            if (c < 0) continue;
            P2pRank *rt = &m->r[t];
            if (rt->head >= rt->n_items || rt->item[c] != rt->head) continue;
            r->matched[o] = rt->matched[c] = true;
            r->fifo_left[r->head]--;
            rt->fifo_left[rt->head]--;
            moved = true;
        }
    }
    for (int s = 0; s < m->p->pp; s++) {
        P2pRank *r = &m->r[s];
        while (r->head < r->n_items && r->fifo_left[r->head] == 0) {
            r->head++;
            r->n_extra = 0;
            moved = true;
        }
    }
    return moved;
}

static void reset(P2pModel *m)
{
    for (int s = 0; s < m->p->pp; s++) {
        P2pRank *r = &m->r[s];
        int n = r->sp->n_ops;
        for (int i = 0; i < n; i++) { r->item[i] = -1; r->matched[i] = false; }
        r->n_pending = r->n_items = r->head = r->pc = 0;
        r->start[0] = 0;
        r->n_extra = 0;
        r->wait_recv = -1;
        r->drain = r->done = false;
    }
}

static bool post_one_early(P2pModel *m);

/* Run the model to its end, posting receives early where it deadlocks;
 * true when every stage ended its list, false at a deadlock no early
 * receive ends (the model's state then says who waits). */
static bool run(P2pModel *m)
{
    reset(m);
    for (;;) {
        for (bool moved = true; moved;) {
            moved = false;
            for (int s = 0; s < m->p->pp; s++) moved |= advance_host(m, s);
            moved |= match_heads(m);
        }
        bool all = true;
        for (int s = 0; s < m->p->pp; s++) all &= m->r[s].done;
        if (all) return true;
        if (!post_one_early(m)) return false;
    }
}

/* Move receive j of stage t into t's head entry, which op `at` posted:
 * PlanOp.prepost says so to the code generator, and the model's state
 * becomes what a run with it from the start reaches (the entry is still
 * at the head, so nothing matched earlier there could have gone another
 * way). */
static void move_to_head(P2pRank *rt, int j, int at)
{
    PlanOp *q = (PlanOp *)&rt->sp->ops[j];
    q->prepost = at + 1;
    if (rt->item[j] >= 0) rt->fifo_left[rt->item[j]]--;   /* out of a later entry */
    rt->item[j] = rt->head;
    rt->fifo_left[rt->head]++;
    rt->extra[rt->n_extra++] = j;
}

/* A blocked send at a stream's head whose receive is not posted at the
 * peer's head: post that receive (and the earlier ones from the same peer
 * still to come) with the group at the peer's head. False if none. */
static bool post_one_early(P2pModel *m)
{
    /* a gradient's receive first: it writes into the slot its forward
     * made, while an activation's receive posted early needs one of the
     * pipe's few early buffers (plan_pipe_early_recvs) */
    for (int pass = 0; pass < 2; pass++)
    for (int s = 0; s < m->p->pp; s++) {
        P2pRank *r = &m->r[s];
        if (r->head >= r->n_items) continue;
        int nh = head_ops(r);
        for (int x = 0; x < nh; x++) {
            int o = r->headv[x];
            if (r->matched[o] || !is_send(r->sp->ops[o].kind)) continue;
            if (pass == 0 && r->sp->ops[o].kind != OP_SEND_GRAD) continue;
            int t = r->sp->ops[o].peer, c = counterpart(m, s, o);
            P2pRank *rt = &m->r[t];
            if (c < 0 || rt->head >= rt->n_items || rt->item[c] == rt->head) continue;
            int at = rt->fifo_at[rt->head];
            /* back from c to the first receive from s already matched: the
             * ones before it matched too (in order) */
            for (int j = c; j >= 0; j--) {
                const PlanOp *q = &rt->sp->ops[j];
                if (!is_recv(q->kind) || q->peer != s) continue;
                if (rt->matched[j]) break;
                if (rt->item[j] != rt->head && post_point(q, j) > at) move_to_head(rt, j, at);
            }
            return true;
        }
    }
    return false;
}

/* Say which transfers of a deadlocked run wait, for the error. */
static void describe(P2pModel *m, char *why, size_t len)
{
    int w = snprintf(why, len, "the pipeline's transfers deadlock under NCCL's rules:");
    for (int s = 0; s < m->p->pp && w > 0 && (size_t)w < len; s++) {
        P2pRank *r = &m->r[s];
        if (r->done || r->head >= r->n_items) continue;
        int nh = head_ops(r);
        for (int x = 0; x < nh && (size_t)w < len; x++)
            if (!r->matched[r->headv[x]]) {
                int o = r->headv[x];
                const PlanOp *x = &r->sp->ops[o];
                w += snprintf(why + w, len - (size_t)w, " stage %d waits in %s mb %d chunk %d %s stage %d;",
                              s, plan_op_name(x->kind), x->mb, x->chunk,
                              is_send(x->kind) ? "to" : "from", x->peer);
            }
    }
}

/* Each transfer's place among its stage's transfers with the same peer
 * and direction; false if a stage's sends and its peer's receives do not
 * pair up. */
static bool number_transfers(P2pModel *m, char *why, size_t len)
{
    const int P = m->p->pp;
    int *count = calloc(2 * (size_t)P, sizeof(int));   /* [peer * 2 + send] */
    if (!count) { snprintf(why, len, "out of memory"); return false; }
    for (int s = 0; s < P; s++) {
        P2pRank *r = &m->r[s];
        memset(count, 0, 2 * (size_t)P * sizeof(int));
        for (int i = 0; i < r->sp->n_ops; i++) {
            const PlanOp *o = &r->sp->ops[i];
            r->cp[i] = -1;
            if ((!is_send(o->kind) && !is_recv(o->kind)) || o->peer < 0 || o->peer >= P) continue;
            r->nth[i] = count[o->peer * 2 + is_send(o->kind)]++;
        }
    }
    free(count);
    /* each stage's receives from each peer in list order (CSR: recv[t] +
     * first[t][peer] .. first[t][peer + 1]), so a send finds its partner
     * at once */
    int **first = calloc((size_t)P, sizeof *first), **recv = calloc((size_t)P, sizeof *recv);
    bool ok = first && recv;
    for (int t = 0; t < P && ok; t++) {
        const PlanStageProgram *sp = m->r[t].sp;
        ok = (first[t] = calloc((size_t)P + 1, sizeof(int))) &&
             (recv[t] = malloc(((size_t)sp->n_ops + 1) * sizeof(int)));
        for (int i = 0; ok && i < sp->n_ops; i++)
            if (is_recv(sp->ops[i].kind) && sp->ops[i].peer >= 0 && sp->ops[i].peer < P)
                first[t][sp->ops[i].peer + 1]++;
        for (int q = 0; ok && q < P; q++) first[t][q + 1] += first[t][q];
        for (int i = 0; ok && i < sp->n_ops; i++) {
            const PlanOp *o = &sp->ops[i];
            if (is_recv(o->kind) && o->peer >= 0 && o->peer < P)
                recv[t][first[t][o->peer] + m->r[t].nth[i]] = i;
        }
    }
    for (int s = 0; s < P && ok; s++)
        for (int i = 0; i < m->r[s].sp->n_ops; i++) {
            const PlanOp *o = &m->r[s].sp->ops[i];
            if (!is_send(o->kind) || o->peer < 0 || o->peer >= P) continue;
            int t = o->peer, k = m->r[s].nth[i];
            if (k < first[t][s + 1] - first[t][s]) {
                int c = recv[t][first[t][s] + k];
                m->r[s].cp[i] = c;
                m->r[t].cp[c] = i;
            }
        }
    for (int t = 0; t < P; t++) {
        if (first) free(first[t]);
        if (recv) free(recv[t]);
    }
    free(first);
    free(recv);
    if (!ok) { snprintf(why, len, "out of memory"); return false; }
    for (int s = 0; s < P; s++)
        for (int i = 0; i < m->r[s].sp->n_ops; i++) {
            PlanOpKind k = m->r[s].sp->ops[i].kind;
            if ((is_send(k) || is_recv(k)) && m->r[s].cp[i] < 0) {
                snprintf(why, len, "stage %d's %s of mb %d has no partner at stage %d", s,
                         plan_op_name(k), m->r[s].sp->ops[i].mb, m->r[s].sp->ops[i].peer);
                return false;
            }
        }
    return true;
}

static void model_free(P2pModel *m)
{
    for (int s = 0; m->r && s < m->p->pp; s++) {
        P2pRank *r = &m->r[s];
        free(r->nth); free(r->cp); free(r->item); free(r->matched); free(r->pending);
        free(r->posted); free(r->start); free(r->extra); free(r->headv);
        free(r->fifo_at); free(r->fifo_left);
    }
    free(m->r);
}

/* The most activation receives stage s holds posted early at once: each
 * from its post point to its op (planrt gives each a buffer of its own). */
static int early_act_peak(const PlanStageProgram *sp)
{
    int peak = 0, cur = 0;
    int *delta = calloc((size_t)sp->n_ops + 1, sizeof(int));
    if (!delta) return 1 << 30;
    for (int j = 0; j < sp->n_ops; j++)
        if (sp->ops[j].kind == OP_RECV_ACT && sp->ops[j].prepost) {
            delta[sp->ops[j].prepost - 1]++;
            delta[j]--;
        }
    for (int i = 0; i < sp->n_ops; i++) { cur += delta[i]; if (cur > peak) peak = cur; }
    free(delta);
    return peak;
}

bool plan_program_p2p_order(PlanProgram *p, char *why, size_t len)
{
    P2pModel m = { .p = p, .heavy = p->tp > 1 };
    if (p->pp < 2) return true;
    if (!(m.r = calloc((size_t)p->pp, sizeof *m.r))) {
        snprintf(why, len, "out of memory");
        return false;
    }
    bool ok = true;
    for (int s = 0; s < p->pp && ok; s++) {
        P2pRank *r = &m.r[s];
        size_t n = (size_t)p->stages[s].n_ops + 1;
        r->sp = &p->stages[s];
        ok = (r->nth = calloc(n, sizeof(int))) && (r->cp = calloc(n, sizeof(int))) &&
             (r->item = calloc(n, sizeof(int))) && (r->posted = calloc(n, sizeof(int))) &&
             (r->start = calloc(n + 1, sizeof(int))) && (r->extra = calloc(n, sizeof(int))) &&
             (r->headv = calloc(2 * n, sizeof(int))) &&
             (r->matched = calloc(n, sizeof(bool))) && (r->pending = calloc(n, sizeof(int))) &&
             (r->fifo_at = calloc(n, sizeof(int))) && (r->fifo_left = calloc(n, sizeof(int)));
        for (int i = 0; i < p->stages[s].n_ops; i++) {
            p->stages[s].ops[i].prepost = 0;
        }
    }
    if (!ok) snprintf(why, len, "out of memory");
    ok = ok && number_transfers(&m, why, len);
    if (ok && !run(&m)) {
        describe(&m, why, len);
        ok = false;
    }
    /* the early activation receives fit the buffers planrt makes at start */
    for (int s = 0; ok && s < p->pp; s++) {
        int need = early_act_peak(&p->stages[s]), have = plan_pipe_early_recvs(p->schedule, p->pp);
        if (need > have) {
            snprintf(why, len, "stage %d posts %d activation receives early at once under NCCL's "
                     "rules; planrt keeps %d receive buffer%s for them", s, need, have, have == 1 ? "" : "s");
            ok = false;
        }
    }
    model_free(&m);
    return ok;
}

int plan_program_preposts(const PlanProgram *p)
{
    int n = 0;
    for (int s = 0; s < p->pp; s++)
        for (int i = 0; i < p->stages[s].n_ops; i++) n += p->stages[s].ops[i].prepost != 0;
    return n;
}
