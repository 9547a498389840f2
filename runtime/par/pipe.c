/*
 * pipe.c: pipeline slots and the point-to-point transfers between stages.
 *
 * A slot holds what one (micro-batch, chunk) keeps from its forward to its
 * backward: its input x, received straight into it (the kept activation
 * itself, no copy beside it), and the layers' part. Slots come from a
 * per-chunk pool: taken on the first op that names (mb, chunk) in a step
 * (its receive or its forward), given back after its backward, so a
 * schedule holds as many slots as it has micro-batches in flight (1F1B:
 * p - s on stage s; GPipe: all m).
 *
 * The output y and the gradient d are not kept: y is made by the forward
 * (prt_pipe_fwd_slot; the last virtual stage has none), d by the gradient's
 * receive or the backward (prt_pipe_bwd_slot), and a send takes its buffer
 * out of the slot into the outbox, where it is freed as soon as the send
 * has completed (Megatron-LM's deallocate_output_tensor in
 * megatron/core/pipeline_parallel/schedules.py: the output's storage goes
 * once sent, only its grad_fn is kept). The first virtual stage sends no
 * gradient: its d goes at prt_pipe_done. The outbox is tested (reap) at
 * every transfer call and at prt_pipe_post, never waited for mid-step, so
 * a slow receiver can never deadlock the sender; planner/memory.c counts
 * a send's buffer until the first such test after it is posted
 * (plan_pipe_xfer_bufs; --dry-run frees it exactly there).
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
    struct out_send {                 /* a send's buffer, out of its slot: freed once sent */
        prt_act     *buf;             /* (count) y or d */
        prt_request *req;
        bool         posted;
    }               **outs;
    int               n_outs, cap_outs;
    bool              dry;            /* --dry-run (prt_mem_dry): no transfer moves; a posted
                                         send is done at the next test */
    struct queued_send {              /* sends and early receives not posted yet, in issue
                                         order (receives: posted after the sends) */
        prt_slot *s;                  /* a gradient's receive: its slot */
        struct out_send *o;           /* a send: its buffer */
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
    p->dry = prt_mem_dry();
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
    prt_wait(s->rreq);
    if (p->free_fn) p->free_fn(s, s->chunk, p->user);
    prt_mem_free(s->x); prt_mem_free(s->y); prt_mem_free(s->d);
    free(s);
}

void prt_pipe_free(prt_pipe *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_pool; i++) free_slot(p, p->pool[i]);
    for (int i = 0; i < p->n_outs; i++) {
        prt_wait(p->outs[i]->req);
        prt_mem_free(p->outs[i]->buf);
        free(p->outs[i]);
    }
    free(p->outs);
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

/* A slot of chunk ch that is free now (its sends took their buffers
 * along); one that still has its layers' part first (no allocation then). */
static prt_slot *idle_slot(prt_pipe *p, int ch)
{
    for (int i = 0; i < 2 * p->n_pool; i++) {
        prt_slot *s = p->pool[i % p->n_pool];
        if (s->busy || s->chunk != ch || (i < p->n_pool && !s->acts)) continue;
        return s;
    }
    return NULL;
}

/* Make a new slot of chunk ch: its input and the layers' part. */
static prt_status new_slot(prt_pipe *p, int ch, prt_slot **out)
{
    prt_slot *s = (prt_slot *)calloc(1, sizeof *s);
    if (!s) return prtp_fail(PRT_ERR_NOMEM, "pipeline slot: out of memory");
    s->chunk = ch;
    size_t bytes = (p->count ? p->count : 1) * sizeof(prt_act);
    /* x is the chunk's first layer's input, kept for its backward (the
     * receive writes it); y and d come when a forward or backward needs
     * them (give_buf) */
    s->x = (prt_act *)prt_mem_alloc(PRT_MEM_ACTIVATIONS, bytes);
    prt_status st = s->x ? PRT_OK : prtp_fail(PRT_ERR_NOMEM, "pipeline slot: out of memory");
    if (!st && p->alloc) st = p->alloc(s, ch, p->user);
    if (!st && p->n_pool == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        prt_slot **n = (prt_slot **)realloc(p->pool, (size_t)cap * sizeof *n);
        if (!n) st = prtp_fail(PRT_ERR_NOMEM, "pipeline slot: out of memory");
        else { p->pool = n; p->cap = cap; }
    }
    if (st) {
        prt_mem_free(s->x);
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

/* A transfer buffer of one activation (y or d), made when first needed. */
static prt_status give_buf(const prt_pipe *p, prt_act **b)
{
    if (!*b) *b = (prt_act *)prt_mem_alloc(PRT_MEM_BUFFERS, (p->count ? p->count : 1) * sizeof(prt_act));
    return *b ? PRT_OK : prtp_fail(PRT_ERR_NOMEM, "pipeline transfer buffer: out of memory");
}

/* Is chunk ch of this stage the last virtual stage (the head: no output sent)? */
static bool last_vstage(const prt_pipe *p, int ch)
{
    return ch == p->chunks - 1 && p->stage == p->pp - 1;
}

prt_status prt_pipe_fwd_slot(prt_pipe *p, int mb, int ch, prt_slot **out)
{
    prt_status st = prt_pipe_slot(p, mb, ch, out);
    if (st || last_vstage(p, ch)) return st;
    return give_buf(p, &(*out)->y);
}

prt_status prt_pipe_bwd_slot(prt_pipe *p, int mb, int ch, prt_slot **out)
{
    prt_status st = prt_pipe_slot(p, mb, ch, out);
    return st ? st : give_buf(p, &(*out)->d);
}

/* The backward of (mb, ch) is over: the slot goes back to the pool at
 * once (its sends took their buffers out of it), with a gradient that was
 * not sent (the first virtual stage's) freed. */
void prt_pipe_done(prt_pipe *p, int mb, int ch)
{
    prt_slot **at = &p->map[mb * p->chunks + ch];
    prt_slot *s = *at;
    *at = NULL;
    if (!s) return;
    s->busy = false;
    prt_mem_free(s->y); s->y = NULL;
    if (!s->rreq && !s->rqueued) { prt_mem_free(s->d); s->d = NULL; }
}

/* Free the buffers of the posted sends that have completed (every one in
 * --dry-run): Megatron's deallocate_output_tensor, as soon as it can be. */
static prt_status reap(prt_pipe *p)
{
    prt_status st = PRT_OK;
    int n = 0;
    for (int i = 0; i < p->n_outs; i++) {
        struct out_send *o = p->outs[i];
        bool done = o->posted && !o->req;
        if (o->posted && o->req && !st) st = prtp_check(prt_test(o->req, &done), "pipeline send");
        if (!done) { p->outs[n++] = o; continue; }
        prt_mem_free(o->buf);
        free(o);
    }
    p->n_outs = n;
    return st;
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

/* Post the queued sends, then the receive into rbuf when there is one,
 * then the early receives in their order, as one group; *rreq gets that
 * receive's request. Between two ranks receives match in the order they
 * were issued, which must be the order of the Program's list: the early
 * ones come from ops after the one that posts them (p2p_order.c). A dry
 * pipe moves nothing: its sends count as posted. */
static prt_status post_group(prt_pipe *p, prt_act *rbuf, int rpeer, int rtag, prt_request **rreq)
{
    if (p->dry) {
        for (int i = 0; i < p->n_queued; i++) {
            struct queued_send *q = &p->queued[i];
            if (q->o) q->o->posted = true;
            else if (q->e >= 0) p->early[q->e].queued = false;
            else q->s->rqueued = false;
        }
        p->n_queued = 0;
        return PRT_OK;
    }
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
            } else if (q->recv) {            /* a gradient, into its slot's d */
                st = prt_recv_async(p->c->pp, q->s->d + p->off, p->part, ACT_DTYPE, q->peer, q->tag, &q->s->rreq);
                q->s->rqueued = false;
            } else {
                st = prt_send_async(p->c->pp, q->o->buf + p->off, p->part, ACT_DTYPE, q->peer, q->tag, &q->o->req);
                q->o->posted = true;
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

/* A send takes its buffer (y or d) out of the slot into the outbox and
 * waits in the queue for the next receive or prt_pipe_post. */
static prt_status send_from(prt_pipe *p, int mb, int ch, int peer, bool grad)
{
    prt_status st = reap(p);
    prt_slot *s;
    if (st || (st = prt_pipe_slot(p, mb, ch, &s))) return st;
    int k = ch * p->pp + p->stage, dst = grad ? k - 1 : k + 1;
    prt_act **b = grad ? &s->d : &s->y;
    if (!*b)
        return prtp_fail(PRT_ERR_ARG, "pipeline: (mb %d, chunk %d) has no %s to send", mb, ch,
                         grad ? "input gradient (no backward ran)" : "output (no forward ran)");
    if (p->n_outs == p->cap_outs) {
        int cap = p->cap_outs ? 2 * p->cap_outs : 8;
        struct out_send **n = (struct out_send **)realloc(p->outs, (size_t)cap * sizeof *n);
        if (!n) return prtp_fail(PRT_ERR_NOMEM, "pipeline transfer: out of memory");
        p->outs = n;
        p->cap_outs = cap;
    }
    struct out_send *o = (struct out_send *)calloc(1, sizeof *o);
    if (!o) return prtp_fail(PRT_ERR_NOMEM, "pipeline transfer: out of memory");
    o->buf = *b;
    *b = NULL;
    p->outs[p->n_outs++] = o;
    return enqueue(p, (struct queued_send){ NULL, o, mb, peer, tag_of(p, mb, dst, grad), grad, false, -1 });
}

/* The early buffer holding (mb, ch)'s activation, -1 if none. */
static int early_of(const prt_pipe *p, int mb, int ch)
{
    for (int e = 0; e < p->n_early; e++)
        if (p->early[e].mb == mb && p->early[e].ch == ch) return e;
    return -1;
}

/* An early receive waits in the queue with the sends (p2p_order.c): a
 * gradient's into its slot's d (made now), an activation's into a free
 * early buffer (its slot is taken when RECV_ACT runs, as without). */
static prt_status post_recv(prt_pipe *p, int mb, int ch, int peer, bool grad)
{
    prtp_clear();
    if (mb < 0 || mb >= p->n_micro || ch < 0 || ch >= p->chunks)
        return prtp_fail(PRT_ERR_ARG, "pipeline receive (mb %d, chunk %d) out of range", mb, ch);
    prt_status st = reap(p);
    if (st) return st;
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
        return enqueue(p, (struct queued_send){ NULL, NULL, mb, peer, tag, false, true, e });
    }
    prt_slot *s;
    if ((st = prt_pipe_bwd_slot(p, mb, ch, &s))) return st;
    if (s->rreq || s->rqueued)
        return prtp_fail(PRT_ERR_ARG, "pipeline: a receive into (mb %d, chunk %d) is posted already", mb, ch);
    s->rqueued = true;
    return enqueue(p, (struct queued_send){ s, NULL, mb, peer, tag, true, true, -1 });
}

prt_status prt_pipe_post_recv_act(prt_pipe *p, int mb, int ch, int peer) { return post_recv(p, mb, ch, peer, false); }
prt_status prt_pipe_post_recv_grad(prt_pipe *p, int mb, int ch, int peer) { return post_recv(p, mb, ch, peer, true); }

prt_status prt_pipe_post(prt_pipe *p)
{
    prtp_clear();
    prt_status st = reap(p);
    if (st) return st;
    return p->n_queued ? post_group(p, NULL, -1, 0, NULL) : PRT_OK;
}

/* The receive goes with the queued sends, then is waited for: an
 * activation into the slot's x (the kept input itself), a gradient into
 * its d. */
static prt_status recv_into(prt_pipe *p, int mb, int ch, int peer, bool grad)
{
    prt_status st = reap(p);
    prt_slot *s;
    if (st || (st = grad ? prt_pipe_bwd_slot(p, mb, ch, &s) : prt_pipe_slot(p, mb, ch, &s))) return st;
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
        if (!st && !p->dry)
            st = prtp_check(prt_copy(buf + p->off, er->buf + p->off, p->part * sizeof(prt_act)),
                            "pipeline activation receive (copy from the early buffer)");
    } else if (s->rreq || s->rqueued) {   /* posted early: the queue goes (if it has not), then wait */
        st = s->rqueued ? post_group(p, NULL, -1, 0, NULL) : PRT_OK;
        req = s->rreq;
        s->rreq = NULL;
        if (!st) st = prtp_check(prt_wait(req), "pipeline gradient receive");
    } else {
        st = post_group(p, p->dry ? NULL : buf, peer, tag_of(p, mb, k, grad), &req);
        if (!st)
            st = prtp_check(prt_wait(req), grad ? "pipeline gradient receive" : "pipeline activation receive");
    }
    if (st || !p->split || p->dry) return st;
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
    for (int i = 0; i < p->n_outs; i++) {   /* every send ends with the step */
        prt_status w = prtp_check(prt_wait(p->outs[i]->req), "pipeline send");
        prt_mem_free(p->outs[i]->buf);
        free(p->outs[i]);
        if (!st) st = w;
    }
    p->n_outs = 0;
    for (int i = 0; i < p->n_pool; i++) {
        prt_slot *s = p->pool[i];
        prt_status w = PRT_OK;
        if (s->rreq)   /* posted early and never received: the Program is wrong */
            w = prtp_fail(PRT_ERR_ARG, "pipeline: the receive into (mb %d, chunk %d) posted early was "
                          "never waited for", s->mb, s->chunk);
        prt_wait(s->rreq);
        s->rreq = NULL;
        s->busy = false;
        prt_mem_free(s->y); prt_mem_free(s->d);   /* none left by a whole step */
        s->y = s->d = NULL;
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
