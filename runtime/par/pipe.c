/*
 * pipe.c: pipeline slots and the point-to-point transfers between stages.
 *
 * A slot holds what one (micro-batch, chunk) keeps from its forward to its
 * backward. Slots come from a per-chunk pool: taken on the first op that
 * names (mb, chunk) in a step (its receive or its forward), given back
 * after its backward once the sends that read it have completed, so a
 * schedule holds as many slots as it has micro-batches in flight (1F1B:
 * p - s on stage s; GPipe: all m). The pool only ever tests a send, never
 * waits on one mid-step, so a slow receiver can never deadlock the sender.
 *
 * Transfers follow NCCL's rules, which PLANRT_P2P=rendezvous enforces on
 * the CPU: a send ends only once its receive is posted, one stream runs a
 * rank's operations in issue order, and there are no tags. In 1F1B's
 * steady state stage s sends an activation and then receives a gradient
 * while stage s+1 sends that gradient and then receives the activation:
 * posted one by one, both sends wait forever. So a send is queued, not
 * posted: the queued sends go in one group (prt_group_start/end) with the
 * next receive — Megatron's send_forward_recv_backward, torch's
 * batch_isend_irecv — or, when another op comes first, alone as a group
 * at prt_pipe_post (which the generated op() calls before every op that is
 * not a transfer or FREE_SLOT) or at prt_pipe_flush. A group's sends and
 * receive start together, so neither side waits for the other. Where that
 * is not enough (the interleaved schedule: both stages post a gradient
 * send alone before a forward), the Program posts the receive the peer's
 * send waits for early, in that group (prt_pipe_post_recv_*, placed by
 * planner/p2p_order.c, which runs every Program under these rules).
 *
 * Without tags, messages between two ranks match in the order they were
 * issued, so both sides must issue them in the same order; the Program's
 * op lists do (planner/lower.c: 1F1B, GPipe, interleaved with the wrap
 * from the last stage to stage 0, zb-h1), and grouping keeps each rank's
 * order. Messages still carry a tag of (micro-batch, receiving virtual
 * stage, direction): MPI's buffered mode matches by it, and rendezvous
 * mode checks it on arrival, so an order that differs between the two
 * sides is an error, not a silent swap. The op list (the Program) decides
 * when each transfer happens; this file only moves the bytes.
 */
#include <stdlib.h>
#include <string.h>
#include "par_internal.h"

#define ACT_DTYPE (sizeof(prt_act) == 4 ? PRT_FP32 : PRT_BF16)

struct prt_pipe {
    prt_ctx          *c;
    int               n_micro, chunks, pp, stage;
    size_t            count;          /* elements of x, y, d: N * C */
    size_t            part, off;      /* elements this rank sends and receives, from offset off:
                                         count / tp at tp rank * count / tp under tp_split, else all */
    bool              split;          /* tp_split: the receiver all-gathers the parts over TP */
    prt_slot_alloc_fn alloc;
    prt_slot_free_fn  free_fn;
    void             *user;
    prt_slot        **map;            /* [n_micro * chunks] slot of (mb, chunk) in this step */
    prt_slot        **pool;           /* every slot made, busy or not */
    int               n_pool, cap;
    struct queued_send {              /* sends and early receives not posted yet, in issue
                                         order (receives: posted after the sends) */
        prt_slot *s;                  /* NULL for an activation's receive posted early */
        int       mb, peer, tag;
        bool      grad, recv;
        int       e;                  /* that receive's buffer in early[], else -1 */
    }                *queued;
    int               n_queued, cap_queued;
    struct early_recv {               /* where an activation's receive posted early lands
                                         (planner/p2p_order.c) until its RECV_ACT takes a
                                         slot: made at start, memory.c counts them */
        prt_act     *buf;             /* (count) */
        prt_request *req;
        int          mb, ch;          /* whose, -1: free */
        bool         queued;          /* not posted yet */
    }                *early;
    int               n_early;
};

prt_status prt_pipe_new(prt_ctx *c, int n_micro, int chunks, size_t act_count, bool tp_split,
                        int early_recvs, prt_slot_alloc_fn alloc, prt_slot_free_fn free_fn,
                        void *user, prt_pipe **out)
{
    prtp_clear();
    int tp = c->layout.tp;
    if (tp_split && tp > 1 && act_count % (size_t)tp)
        return prtp_fail(PRT_ERR_ARG, "prt_pipe_new: %zu elements do not split over %d TP ranks",
                         act_count, tp);
    prt_pipe *p = (prt_pipe *)calloc(1, sizeof *p);
    if (!p) return prtp_fail(PRT_ERR_NOMEM, "prt_pipe_new: out of memory");
    p->c = c; p->n_micro = n_micro; p->chunks = chunks; p->count = act_count;
    p->split = tp_split && tp > 1;
    p->part = p->split ? act_count / (size_t)tp : act_count;
    p->off = p->split ? (size_t)c->coord.tp * p->part : 0;
    p->pp = c->layout.pp; p->stage = c->coord.pp;
    p->alloc = alloc; p->free_fn = free_fn; p->user = user;
    p->map = (prt_slot **)calloc((size_t)n_micro * (size_t)chunks, sizeof(prt_slot *));
    p->early = early_recvs > 0 ? (struct early_recv *)calloc((size_t)early_recvs, sizeof *p->early) : NULL;
    bool ok = p->map && (early_recvs <= 0 || p->early);
    for (int e = 0; ok && e < early_recvs; e++) {
        p->early[e].mb = p->early[e].ch = -1;
        ok = (p->early[e].buf = (prt_act *)prt_mem_alloc(PRT_MEM_BUFFERS,
                                                         (act_count ? act_count : 1) * sizeof(prt_act))) != NULL;
        p->n_early = e + 1;
    }
    if (!ok) {
        prt_pipe_free(p);
        return prtp_fail(PRT_ERR_NOMEM, "prt_pipe_new: out of memory");
    }
    *out = p;
    return PRT_OK;
}

static void free_slot(prt_pipe *p, prt_slot *s)
{
    prt_wait(s->req);
    prt_wait(s->rreq);
    if (p->free_fn) p->free_fn(s, s->chunk, p->user);
    prt_mem_free(s->x); prt_mem_free(s->y); prt_mem_free(s->d);
    free(s);
}

void prt_pipe_free(prt_pipe *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_pool; i++) free_slot(p, p->pool[i]);
    for (int e = 0; e < p->n_early; e++) {
        prt_wait(p->early[e].req);
        prt_mem_free(p->early[e].buf);
    }
    free(p->early);
    free(p->pool);
    free(p->map);
    free(p->queued);
    free(p);
}

/* Is a send from s queued (not posted yet)? Its buffer is still to be read. */
static bool send_queued(const prt_pipe *p, const prt_slot *s)
{
    for (int i = 0; i < p->n_queued; i++)
        if (p->queued[i].s == s) return true;
    return false;
}

/* A slot of chunk ch that is free now: not busy and its send delivered;
 * one that still has its layers' part first (no allocation then). */
static prt_slot *idle_slot(prt_pipe *p, int ch)
{
    for (int i = 0; i < 2 * p->n_pool; i++) {
        prt_slot *s = p->pool[i % p->n_pool];
        if (s->busy || s->chunk != ch || (i < p->n_pool && !s->acts) || send_queued(p, s)) continue;
        if (s->req) {
            bool done = false;
            if (prt_test(s->req, &done) != PRT_OK || !done) continue;
            s->req = NULL;
        }
        return s;
    }
    return NULL;
}

/* Make a new slot of chunk ch: the transfer buffers and the layers' part. */
static prt_status new_slot(prt_pipe *p, int ch, prt_slot **out)
{
    prt_slot *s = (prt_slot *)calloc(1, sizeof *s);
    if (!s) return prtp_fail(PRT_ERR_NOMEM, "pipeline slot: out of memory");
    s->chunk = ch;
    size_t bytes = (p->count ? p->count : 1) * sizeof(prt_act);
    /* x is the chunk's first layer's input, kept for its backward; y (the
     * output, sent on) and d (the gradient, received and sent back) are
     * communication buffers */
    s->x = (prt_act *)prt_mem_alloc(PRT_MEM_ACTIVATIONS, bytes);
    s->y = (prt_act *)prt_mem_alloc(PRT_MEM_BUFFERS, bytes);
    s->d = (prt_act *)prt_mem_alloc(PRT_MEM_BUFFERS, bytes);
    prt_status st = s->x && s->y && s->d ? PRT_OK
                  : prtp_fail(PRT_ERR_NOMEM, "pipeline slot: out of memory");
    if (!st && p->alloc) st = p->alloc(s, ch, p->user);
    if (!st && p->n_pool == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        prt_slot **n = (prt_slot **)realloc(p->pool, (size_t)cap * sizeof *n);
        if (!n) st = prtp_fail(PRT_ERR_NOMEM, "pipeline slot: out of memory");
        else { p->pool = n; p->cap = cap; }
    }
    if (st) {
        prt_mem_free(s->x); prt_mem_free(s->y); prt_mem_free(s->d);
        free(s);
        return st;
    }
    p->pool[p->n_pool++] = s;
    *out = s;
    return PRT_OK;
}

prt_status prt_pipe_slot(prt_pipe *p, int mb, int ch, prt_slot **out)
{
    prtp_clear();
    if (mb < 0 || mb >= p->n_micro || ch < 0 || ch >= p->chunks)
        return prtp_fail(PRT_ERR_ARG, "pipeline slot (mb %d, chunk %d) out of range", mb, ch);
    prt_slot **at = &p->map[mb * p->chunks + ch];
    if (!*at) {
        prt_slot *s = idle_slot(p, ch);
        if (!s) {
            prt_status st = new_slot(p, ch, &s);
            if (st) return st;
        } else if (!s->acts && p->alloc) {   /* its layers' part went at prt_pipe_done */
            prt_status st = p->alloc(s, ch, p->user);
            if (st) return prtp_fail(st, "pipeline slot: out of memory");
        }
        s->mb = mb;
        s->busy = true;
        *at = s;
    }
    *out = *at;
    return PRT_OK;
}

/* A slot whose send is still in flight cannot be reused yet: its layers'
 * part (what the forward kept for the backward) is freed now, so only the
 * micro-batches in flight hold activations (planner/memory.c's count), not
 * the ones whose gradient the previous stage has not received yet. */
void prt_pipe_done(prt_pipe *p, int mb, int ch)
{
    prt_slot **at = &p->map[mb * p->chunks + ch];
    prt_slot *s = *at;
    *at = NULL;
    if (!s) return;
    s->busy = false;
    bool sent = !s->req && !send_queued(p, s);
    if (s->req && prt_test(s->req, &sent) != PRT_OK) sent = false;
    if (sent) s->req = NULL;   /* a finished request is done with (as idle_slot's) */
    if (!sent && p->free_fn && s->acts) p->free_fn(s, s->chunk, p->user);
}

/* Tag of a message to virtual stage `dst` about micro-batch mb. MPI
 * promises tags up to 32767; wrapping is safe because two messages between
 * a pair with equal tags would have to be thousands of micro-batches apart,
 * and at most pp * chunks of them are ever in flight. */
static int tag_of(const prt_pipe *p, int mb, int dst, int grad)
{
    long t = ((long)mb * p->pp * p->chunks + dst) * 2 + grad;
    return (int)(t % 32767);
}

/* The buffer a transfer of slot s reads or writes: a send reads y (the
 * output) or d (the input gradient); a receive writes x (the input) or d
 * (the output gradient). */
static prt_act *xfer_buf(const prt_pipe *p, const prt_slot *s, bool grad, bool recv)
{
    return (grad ? s->d : recv ? s->x : s->y) + p->off;
}

/* Post the queued sends, then the receive into rbuf when there is one,
 * then the early receives in their order, as one group; *rreq gets that
 * receive's request. Between two ranks receives match in the order they
 * were issued, which must be the order of the Program's list: the early
 * ones come from ops after the one that posts them (p2p_order.c). */
static prt_status post_group(prt_pipe *p, prt_act *rbuf, int rpeer, int rtag, prt_request **rreq)
{
    prt_status st = prt_group_start();
    for (int pass = 0; pass < 3 && !st; pass++) {
        if (pass == 1) {
            if (rbuf) st = prt_recv_async(p->c->pp, rbuf + p->off, p->part, ACT_DTYPE, rpeer, rtag, rreq);
            continue;
        }
        for (int i = 0; i < p->n_queued && !st; i++) {
            struct queued_send *q = &p->queued[i];
            if (q->recv != (pass == 2)) continue;
            if (q->recv && q->e >= 0) {      /* into the early buffer */
                struct early_recv *er = &p->early[q->e];
                st = prt_recv_async(p->c->pp, er->buf + p->off, p->part, ACT_DTYPE, q->peer, q->tag, &er->req);
                er->queued = false;
                continue;
            }
            prt_act *buf = xfer_buf(p, q->s, q->grad, q->recv);
            if (q->recv) {
                st = prt_recv_async(p->c->pp, buf, p->part, ACT_DTYPE, q->peer, q->tag, &q->s->rreq);
                q->s->rqueued = false;
            } else {
                st = prt_send_async(p->c->pp, buf, p->part, ACT_DTYPE, q->peer, q->tag, &q->s->req);
            }
        }
    }
    p->n_queued = 0;
    prt_status end = prt_group_end();
    return prtp_check(st ? st : end, rbuf ? "pipeline sends and receive (one group)" : "pipeline sends");
}

/* One more entry in the queue. */
static prt_status enqueue(prt_pipe *p, struct queued_send q)
{
    if (p->n_queued == p->cap_queued) {
        int cap = p->cap_queued ? 2 * p->cap_queued : 4;
        struct queued_send *n = (struct queued_send *)realloc(p->queued, (size_t)cap * sizeof *n);
        if (!n) return prtp_fail(PRT_ERR_NOMEM, "pipeline transfer: out of memory");
        p->queued = n;
        p->cap_queued = cap;
    }
    p->queued[p->n_queued++] = q;
    return PRT_OK;
}

/* A send waits in the queue for the next receive or prt_pipe_post. */
static prt_status send_from(prt_pipe *p, int mb, int ch, int peer, bool grad)
{
    prt_slot *s;
    prt_status st = prt_pipe_slot(p, mb, ch, &s);
    if (st) return st;
    int k = ch * p->pp + p->stage, dst = grad ? k - 1 : k + 1;
    if (send_queued(p, s) && (st = prt_pipe_post(p))) return st;
    prt_wait(s->req);   /* a slot sends its activation, later its gradient */
    s->req = NULL;
    return enqueue(p, (struct queued_send){ s, mb, peer, tag_of(p, mb, dst, grad), grad, false, -1 });
}

/* The early buffer holding (mb, ch)'s activation, -1 if none. */
static int early_of(const prt_pipe *p, int mb, int ch)
{
    for (int e = 0; e < p->n_early; e++)
        if (p->early[e].mb == mb && p->early[e].ch == ch) return e;
    return -1;
}

/* An early receive waits in the queue with the sends (p2p_order.c): a
 * gradient's into its slot (made by the forward), an activation's into a
 * free early buffer (its slot is taken when RECV_ACT runs, as without). */
static prt_status post_recv(prt_pipe *p, int mb, int ch, int peer, bool grad)
{
    prtp_clear();
    if (mb < 0 || mb >= p->n_micro || ch < 0 || ch >= p->chunks)
        return prtp_fail(PRT_ERR_ARG, "pipeline receive (mb %d, chunk %d) out of range", mb, ch);
    int k = ch * p->pp + p->stage, tag = tag_of(p, mb, k, grad);
    if (!grad) {
        int e = early_of(p, -1, -1);
        if (early_of(p, mb, ch) >= 0 || p->map[mb * p->chunks + ch])
            return prtp_fail(PRT_ERR_ARG, "pipeline: the activation of (mb %d, chunk %d) is received "
                             "already", mb, ch);
        if (e < 0)
            return prtp_fail(PRT_ERR_ARG, "pipeline: no early receive buffer free for (mb %d, chunk %d): "
                             "the program made %d", mb, ch, p->n_early);
        p->early[e].mb = mb;
        p->early[e].ch = ch;
        p->early[e].queued = true;
        return enqueue(p, (struct queued_send){ NULL, mb, peer, tag, false, true, e });
    }
    prt_slot *s;
    prt_status st = prt_pipe_slot(p, mb, ch, &s);
    if (st) return st;
    if (s->rreq || s->rqueued)
        return prtp_fail(PRT_ERR_ARG, "pipeline: a receive into (mb %d, chunk %d) is posted already", mb, ch);
    s->rqueued = true;
    return enqueue(p, (struct queued_send){ s, mb, peer, tag, true, true, -1 });
}

prt_status prt_pipe_post_recv_act(prt_pipe *p, int mb, int ch, int peer) { return post_recv(p, mb, ch, peer, false); }
prt_status prt_pipe_post_recv_grad(prt_pipe *p, int mb, int ch, int peer) { return post_recv(p, mb, ch, peer, true); }

prt_status prt_pipe_post(prt_pipe *p)
{
    prtp_clear();
    return p->n_queued ? post_group(p, NULL, -1, 0, NULL) : PRT_OK;
}

/* The receive goes with the queued sends, then is waited for. */
static prt_status recv_into(prt_pipe *p, int mb, int ch, int peer, bool grad)
{
    prt_slot *s;
    prt_status st = prt_pipe_slot(p, mb, ch, &s);
    if (st) return st;
    int k = ch * p->pp + p->stage;
    prt_act *buf = grad ? s->d : s->x;
    prt_request *req = NULL;
    int e = grad ? -1 : early_of(p, mb, ch);
    if (e >= 0) {                  /* into the early buffer: the queue goes (if it has not),
                                      wait, and the part this rank received moves to x */
        struct early_recv *er = &p->early[e];
        st = er->queued ? post_group(p, NULL, -1, 0, NULL) : PRT_OK;
        if (!st) st = prtp_check(prt_wait(er->req), "pipeline activation receive");
        er->req = NULL;
        er->mb = er->ch = -1;
        if (!st) st = prtp_check(prt_copy(buf + p->off, er->buf + p->off, p->part * sizeof(prt_act)),
                                 "pipeline activation receive (copy from the early buffer)");
    } else if (s->rreq || s->rqueued) {   /* posted early: the queue goes (if it has not), then wait */
        st = s->rqueued ? post_group(p, NULL, -1, 0, NULL) : PRT_OK;
        req = s->rreq;
        s->rreq = NULL;
        if (!st) st = prtp_check(prt_wait(req), "pipeline gradient receive");
    } else {
        st = post_group(p, buf, peer, tag_of(p, mb, k, grad), &req);
        if (!st)
            st = prtp_check(prt_wait(req), grad ? "pipeline gradient receive" : "pipeline activation receive");
    }
    if (st || !p->split) return st;
    /* the other TP ranks' parts, over NVLink: the whole tensor in place */
    return prtp_check(prt_all_gather(p->c->tp, buf + p->off, buf, p->part, ACT_DTYPE),
                      grad ? "pipeline gradient all-gather over TP" : "pipeline activation all-gather over TP");
}

prt_status prt_pipe_send_act(prt_pipe *p, int mb, int ch, int peer) { return send_from(p, mb, ch, peer, false); }
prt_status prt_pipe_send_grad(prt_pipe *p, int mb, int ch, int peer) { return send_from(p, mb, ch, peer, true); }
prt_status prt_pipe_recv_act(prt_pipe *p, int mb, int ch, int peer) { return recv_into(p, mb, ch, peer, false); }
prt_status prt_pipe_recv_grad(prt_pipe *p, int mb, int ch, int peer) { return recv_into(p, mb, ch, peer, true); }

prt_status prt_pipe_flush(prt_pipe *p)
{
    prt_status st = prt_pipe_post(p);
    for (int i = 0; i < p->n_pool; i++) {
        prt_slot *s = p->pool[i];
        prt_status w = prtp_check(prt_wait(s->req), "pipeline send");
        s->req = NULL;
        if (s->rreq && !w)   /* posted early and never received: the Program is wrong */
            w = prtp_fail(PRT_ERR_ARG, "pipeline: the receive into (mb %d, chunk %d) posted early was "
                          "never waited for", s->mb, s->chunk);
        prt_wait(s->rreq);
        s->rreq = NULL;
        s->busy = false;
        if (!st) st = w;
    }
    for (int e = 0; e < p->n_early; e++) {   /* every early receive was taken by its RECV_ACT */
        if (p->early[e].mb >= 0 && !st)
            st = prtp_fail(PRT_ERR_ARG, "pipeline: the activation receive of (mb %d, chunk %d) posted "
                           "early was never waited for", p->early[e].mb, p->early[e].ch);
        prt_wait(p->early[e].req);
        p->early[e].req = NULL;
        p->early[e].mb = p->early[e].ch = -1;
    }
    memset(p->map, 0, (size_t)p->n_micro * (size_t)p->chunks * sizeof *p->map);
    return st;
}
