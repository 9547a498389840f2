/*
 * sched.c: schedules — how planc's own algorithms are written down — and the
 * one wait loop every request goes through.
 *
 * An algorithm (algos.c) does not move data itself: it appends steps to a
 * request (send, receive, reduce, copy, scale) and closes rounds.  All
 * messages of a round may be in flight together; the local steps of a round
 * run once its messages have completed.  The backend then runs the schedule
 * (native_mpi.c: round by round on MPI requests; comm_nccl.c: all rounds
 * queued on a CUDA stream).  Writing algorithms as data keeps them short,
 * makes every one asynchronous for free, and lets one wait loop (prt_wait)
 * hold the deadline of PLANRT_TIMEOUT_S, so a dead peer turns into
 * PRT_ERR_TIMEOUT instead of a hang.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

/* A new, empty schedule for one collective on g.  Each one gets its own
 * message tag (a counter that every rank advances in the same order), so
 * several collectives can be in flight on one group. */
prt_request *sch_new(prt_comm *g, coll_kind k, prt_dtype t, prt_redop op)
{
    prt_request *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->g = g;
    r->kind = k;
    r->type = t;
    r->op = op;
    r->esize = prt_dtype_size(t);
    r->tag = (int)(g->seq++ % 32000u);  /* MPI guarantees tags up to 32767 */
    return r;
}

void sch_free(prt_request *r)
{
    if (!r)
        return;
    prtc_backend_request_free(r);
    if (r->scratch_owned)
        prtc_backend_scratch_free(r->g, r->scratch);
    else if (r->scratch)
        r->g->scratch_busy = false;
    free(r->aux);
    free(r->held);
    free(r->failed_msg);
    free(r->steps);
    free(r->round_end);
    free(r->mreq);
    free(r);
}

/* Work memory for r: the group's cached buffer when free (no allocation in
 * the steady state of a training loop), else a buffer of its own. */
void *sch_scratch(prt_request *r, size_t bytes)
{
    prt_comm *g = r->g;
    if (bytes == 0)
        bytes = 1;
    if (!g->scratch_busy) {
        if (g->scratch_bytes < bytes) {
            prtc_backend_scratch_free(g, g->scratch);
            g->scratch = prtc_backend_scratch_alloc(g, bytes);
            g->scratch_bytes = g->scratch ? bytes : 0;
        }
        if (g->scratch) {
            g->scratch_busy = true;
            r->scratch = g->scratch;
            return r->scratch;
        }
    }
    r->scratch = prtc_backend_scratch_alloc(g, bytes);
    r->scratch_owned = r->scratch != NULL;
    if (!r->scratch)
        r->failed_alloc = true;
    return r->scratch;
}

/* Append one step; growth failures are remembered and reported once. */
static void push(prt_request *r, sched_step s)
{
    if (r->nsteps == r->steps_cap) {
        int cap = r->steps_cap ? 2 * r->steps_cap : 16;
        sched_step *p = realloc(r->steps, (size_t)cap * sizeof *p);
        if (!p) {
            r->failed_alloc = true;
            return;
        }
        r->steps = p;
        r->steps_cap = cap;
    }
    r->steps[r->nsteps++] = s;
}

/* Zero-length messages are dropped: both sides compute the same counts, so
 * both drop them. */
void sch_send(prt_request *r, int peer, const void *src, size_t n)
{
    if (n)
        push(r, (sched_step){ .kind = STEP_SEND, .peer = peer, .src = src, .n = n });
}

void sch_recv(prt_request *r, int peer, void *dst, size_t n)
{
    if (n)
        push(r, (sched_step){ .kind = STEP_RECV, .peer = peer, .dst = dst, .n = n });
}

void sch_reduce(prt_request *r, void *dst, const void *a, const void *b, size_t n)
{
    if (n)
        push(r, (sched_step){ .kind = STEP_REDUCE, .dst = dst, .src = a, .src2 = b, .n = n });
}

void sch_copy(prt_request *r, void *dst, const void *src, size_t n)
{
    if (n && dst != src)
        push(r, (sched_step){ .kind = STEP_COPY, .dst = dst, .src = src, .n = n });
}

void sch_scale(prt_request *r, void *dst, size_t n)
{
    if (n)
        push(r, (sched_step){ .kind = STEP_SCALE, .dst = dst, .n = n });
}

/* Close the current round (empty rounds are skipped). */
void sch_end_round(prt_request *r)
{
    int start = r->nrounds ? r->round_end[r->nrounds - 1] : 0;
    if (r->nsteps == start)
        return;
    if (r->nrounds == r->rounds_cap) {
        int cap = r->rounds_cap ? 2 * r->rounds_cap : 8;
        int *p = realloc(r->round_end, (size_t)cap * sizeof *p);
        if (!p) {
            r->failed_alloc = true;
            return;
        }
        r->round_end = p;
        r->rounds_cap = cap;
    }
    r->round_end[r->nrounds++] = r->nsteps;
}

/* Requests given up at a timeout. MPI may still complete them, so they are
 * not freed then; prt_finalize frees them (prtc_free_abandoned), so a job
 * that survives a timeout (a test, a caller that retries) leaks nothing. */
static prt_request **abandoned;
static int n_abandoned, cap_abandoned;

void prtc_abandon(prt_request *r)
{
    if (r->abandoned)
        return;
    r->abandoned = true;
    if (n_abandoned == cap_abandoned) {
        int cap = cap_abandoned ? 2 * cap_abandoned : 8;
        prt_request **p = realloc(abandoned, (size_t)cap * sizeof *p);
        if (!p)
            return;   /* out of memory on an error path: let it leak */
        abandoned = p;
        cap_abandoned = cap;
    }
    abandoned[n_abandoned++] = r;
}

void prtc_free_abandoned(void)
{
    for (int i = 0; i < n_abandoned; i++)
        sch_free(abandoned[i]);
    free(abandoned);
    abandoned = NULL;
    n_abandoned = cap_abandoned = 0;
}

/* Seconds since an arbitrary start, for deadlines. */
static double now_s(void) { return MPI_Wtime(); }

prt_status prtc_timeout_error(prt_request *r, double limit)
{
    return prtc_error(PRT_ERR_TIMEOUT, r->g,
                      "no progress for %.1f s (PLANRT_TIMEOUT_S); a peer has probably died\n"
                      "  hint: look for the first rank that failed", limit);
}

/* A request that can no longer complete: abandoned at an earlier deadline
 * (prt_finalize frees it), or failed when it was posted (its message was
 * kept for its wait). PRT_OK for any other. */
static prt_status ended_badly(prt_request *r)
{
    if (r->abandoned)
        return prtc_error(PRT_ERR_TIMEOUT, r->g, "%s: given up at the deadline reported "
                          "before; it will not complete", prtc_coll_name(r->kind));
    if (r->failed != PRT_OK)
        prtc_error(r->failed, NULL, "%s", r->failed_msg ? r->failed_msg : "");
    return r->failed;
}

/* The one place a request is waited for: advance it until done, yielding the
 * core between polls (ranks often outnumber cores), and give up with
 * PRT_ERR_TIMEOUT when nothing has moved for the deadline (the backend's
 * count of completed operations tells it that something did). */
prt_status prt_wait(prt_request *r)
{
    if (!r)
        return PRT_OK;
    if (r->abandoned)
        return ended_badly(r);   /* prt_finalize frees it */
    double limit = prtc_timeout_s(), deadline = limit > 0 ? now_s() + limit : 0;
    unsigned seen = prtc_backend_completed();
    bool done = false;
    prt_status s;
    for (unsigned spins = 0;; spins++) {
        if ((s = prtc_backend_progress(r, &done)) != PRT_OK || done)
            break;
        if (deadline > 0 && (spins & 255) == 0) {
            if (prtc_backend_completed() != seen) {
                seen = prtc_backend_completed();
                deadline = now_s() + limit;
            } else if (now_s() > deadline) {
                s = prtc_backend_timeout(r, limit);
                prtc_abandon(r);   /* MPI may still write into it: freed at prt_finalize */
                return s;
            }
        }
        if (spins > 64)
            sched_yield();
    }
    if (s == PRT_OK)
        s = ended_badly(r);
    sch_free(r);
    return s;
}

prt_status prt_test(prt_request *r, bool *done)
{
    *done = true;
    if (!r)
        return PRT_OK;
    if (r->abandoned)
        return ended_badly(r);
    prt_status s = prtc_backend_progress(r, done);
    if (s == PRT_OK && *done)
        s = ended_badly(r);
    if (s != PRT_OK || *done)
        sch_free(r);
    if (s != PRT_OK)
        *done = true;
    return s;
}

prt_status prt_wait_all(prt_request **r, int n)
{
    prt_status first = PRT_OK;
    for (int i = 0; i < n; i++) {
        prt_status s = prt_wait(r[i]);
        r[i] = NULL;
        if (first == PRT_OK)
            first = s;
    }
    return first;
}
