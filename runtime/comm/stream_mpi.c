/*
 * stream_mpi.c: NCCL's ordering rules on the MPI backend — the FIFO of
 * PLANRT_P2P=rendezvous, and the backend hooks that differ by mode (groups,
 * progress counting, deadlines, draining).
 *
 * NCCL runs every collective and point-to-point call of a rank on one CUDA
 * stream (comm_nccl.c's gpu_ctx.comm, shared by all of the rank's
 * communicators), so an operation starts only once everything issued
 * before it has finished, and a send finishes only once the peer has
 * posted the matching receive.  MPI buffers sends and runs requests side by
 * side, so a program that is correct under MPI can hang under NCCL: two
 * stages that each send before they receive wait for each other forever.
 *
 * Rendezvous mode makes MPI as strict.  Every request of the rank (any
 * group, native or an own schedule, blocking or _async) joins one FIFO in
 * issue order and is started — its MPI calls posted — only when every
 * request before it has completed.  The calls of one prt_group_start/end
 * form one entry and start together (ncclGroupStart/End).  The FIFO moves
 * only when someone waits or tests (prt_wait/prt_test on any request
 * advances it from its head): MPI progresses posted messages by itself,
 * and a rank that neither waits nor tests has nothing queued behind an
 * unstarted operation that could make a peer wait — it issues nothing.
 *
 * A wait that sees no entry complete for the deadline (PLANRT_TIMEOUT_S,
 * in this mode 60 s or PLANRT_DEADLOCK_S when unset) prints the rank's
 * FIFO and returns PRT_ERR_TIMEOUT naming NCCL's rules.  The FIFO is then
 * emptied — its requests are abandoned (prt_finalize frees them) — so a
 * caller that survives the error, a test, can go on.
 *
 * Buffered mode (the default) goes nowhere near the FIFO: the hooks below
 * fall through to what native_mpi.c always did.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

/* The rank's stream: incomplete requests in issue order; the requests of
 * one entry are adjacent. */
static struct {
    prt_request **q;
    int           n, cap;
    unsigned      next_entry;
    unsigned      completed;   /* requests completed: progress, for deadlines */
} F;

/* Queue req[0..n) as one entry. PRT_ERR_NOMEM (nothing queued) when the
 * FIFO cannot grow, so the caller still owns the requests. */
static prt_status fifo_append(prt_request *const *req, int n)
{
    if (F.n + n > F.cap) {
        int cap = F.cap ? F.cap : 16;
        while (cap < F.n + n)
            cap *= 2;
        prt_request **q = realloc(F.q, (size_t)cap * sizeof *q);
        if (!q)
            return prtc_error(PRT_ERR_NOMEM, req[0]->g, "out of memory for the FIFO of "
                              "PLANRT_P2P=rendezvous");
        F.q = q;
        F.cap = cap;
    }
    unsigned e = F.next_entry++;
    for (int i = 0; i < n; i++) {
        req[i]->entry = e;
        req[i]->queued = true;
        F.q[F.n++] = req[i];
    }
    return PRT_OK;
}

/* Take r out of the FIFO (completed, failed, or freed by its owner). */
static void fifo_remove(prt_request *r)
{
    for (int i = 0; i < F.n; i++)
        if (F.q[i] == r) {
            memmove(F.q + i, F.q + i + 1, (size_t)(F.n - i - 1) * sizeof *F.q);
            F.n--;
            break;
        }
    r->queued = false;
}

/* r ended without completing: the status and message its own wait gives. */
static void fail(prt_request *r, prt_status s)
{
    r->failed = s;
    free(r->failed_msg);
    r->failed_msg = strdup(prt_comm_last_error());
}

/* Post r's MPI calls: a native call now; an own schedule posts its first
 * round in prtc_mpi_exec. */
static prt_status start(prt_request *r)
{
    r->started = true;
    return r->native ? prtc_mpi_arm(r, &r->call) : PRT_OK;
}

/* Start and advance the head entry until it is done, then the next, until
 * one is still in flight.  A request that fails is taken out with its error
 * (its own wait reports it); the others go on. */
static void fifo_advance(void)
{
    while (F.n > 0) {
        unsigned head = F.q[0]->entry;
        int k = 0;
        while (k < F.n && F.q[k]->entry == head)
            k++;
        for (int i = 0; i < k; i++)
            if (!F.q[i]->started) {
                prt_status s = start(F.q[i]);
                if (s != PRT_OK)
                    fail(F.q[i], s);
            }
        for (int i = 0; i < k;) {
            prt_request *r = F.q[i];
            bool done = r->failed != PRT_OK;
            prt_status s = done ? PRT_OK : prtc_mpi_exec(r, &done);
            if (s != PRT_OK) {
                fail(r, s);
                done = true;
            }
            if (!done) {
                i++;
                continue;
            }
            r->complete = true;
            fifo_remove(r);
            F.completed++;
            k--;
        }
        if (k > 0)
            return;
    }
}

prt_status prtc_fifo_push(prt_request *const *req, int n)
{
    prt_status s = fifo_append(req, n);
    if (s == PRT_OK)
        fifo_advance();
    return s;
}

prt_status prtc_fifo_progress(prt_request *r, bool *done)
{
    if (!r->complete)
        fifo_advance();
    *done = r->complete;
    return PRT_OK;   /* a failure is r->failed, which the wait reports */
}

/* ---- the backend hooks that depend on the mode ------------------------- */

prt_status prtc_backend_group(prt_request *const *req, const coll_args *a, int n)
{
    if (n == 0)
        return PRT_OK;
    if (prtc_rendezvous()) {
        for (int i = 0; i < n; i++) {
            req[i]->native = true;
            req[i]->call = a[i];
        }
        prt_status s = prtc_fifo_push(req, n);
        for (int i = 0; s != PRT_OK && i < n; i++)
            fail(req[i], s);
        return s;
    }
    /* Buffered: MPI_Isend never waits for its receive, so posting one by
     * one is posting together. */
    prt_status first = PRT_OK;
    for (int i = 0; i < n; i++) {
        prt_status s = prtc_mpi_arm(req[i], &a[i]);
        if (s != PRT_OK) {
            fail(req[i], s);
            if (first == PRT_OK)
                first = s;
        }
    }
    return first;
}

unsigned prtc_backend_completed(void) { return F.completed; }

/* One line per pending request: what NCCL would be stuck on. */
static void print_pending(FILE *out, int rank)
{
    for (int i = 0; i < F.n; i++) {
        const prt_request *r = F.q[i];
        const coll_args *a = &r->call;
        fprintf(out, "planrt: rank %d:   entry %u %-7s %s%s on %s", rank, r->entry,
                r->started ? "started" : "queued", prtc_coll_name(r->kind),
                r->native ? "" : " (own schedule)", prtc_group_name(r->g));
        if (a->kind == COLL_SEND || a->kind == COLL_RECV)
            fprintf(out, ", peer %d (world rank %d), %zu elements, tag %d", a->root,
                    prt_comm_world_rank(r->g, a->root), a->n, a->tag);
        else
            fprintf(out, ", %zu elements", a->n);
        fputc('\n', out);
    }
}

/* A deadlock is reported with the rank's FIFO, then the FIFO is emptied
 * (its MPI requests may still complete: the requests are abandoned). */
static prt_status deadlock(prt_comm *g, double limit)
{
    int rank = g->world_ranks[g->rank];
    fprintf(stderr, "planrt: rank %d: deadlock under NCCL's rules (PLANRT_P2P=rendezvous): no "
            "operation completed for %.1f s; this rank's stream, oldest first:\n", rank, limit);
    print_pending(stderr, rank);
    fflush(stderr);
    int pending = F.n;
    while (F.n > 0) {
        prt_request *r = F.q[0];
        fifo_remove(r);
        prtc_abandon(r);
    }
    return prtc_error(PRT_ERR_TIMEOUT, g,
                      "deadlock under NCCL's rules (PLANRT_P2P=rendezvous): no operation "
                      "completed for %.1f s (PLANRT_TIMEOUT_S, PLANRT_DEADLOCK_S); the %d "
                      "pending operations of this rank are on stderr\n  hint: NCCL runs a "
                      "rank's operations one after another, and a send ends only once its "
                      "receive is posted: post a send together with the receive that follows "
                      "it (prt_group_start/end)", limit, pending);
}

prt_status prtc_backend_timeout(prt_request *r, double limit)
{
    return prtc_rendezvous() ? deadlock(r->g, limit) : prtc_timeout_error(r, limit);
}

prt_status prtc_backend_drain(prt_comm *g)
{
    if (!prtc_rendezvous())
        return PRT_OK;
    double limit = prtc_timeout_s(), deadline = limit > 0 ? MPI_Wtime() + limit : 0;
    unsigned seen = F.completed;
    for (unsigned spins = 0; F.n > 0; spins++) {
        fifo_advance();
        if (F.completed != seen) {
            seen = F.completed;
            deadline = limit > 0 ? MPI_Wtime() + limit : 0;
        }
        if (deadline > 0 && (spins & 255) == 0 && MPI_Wtime() > deadline)
            return deadlock(g, limit);
    }
    return PRT_OK;
}

/* A request freed while still queued (its owner gave up on it) leaves. */
void prtc_backend_request_free(prt_request *r)
{
    if (r->queued)
        fifo_remove(r);
}
