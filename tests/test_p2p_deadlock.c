/*
 * test_p2p_deadlock.c: NCCL's point-to-point rules on the CPU (issue 24).
 * Two ranks, PLANRT_P2P=rendezvous, a short PLANRT_TIMEOUT_S; one pattern
 * per run (argv[1]), each either a deadlock under NCCL that must be
 * reported — PRT_ERR_TIMEOUT naming NCCL's rules on every rank, the pending
 * operations on stderr (tests/p2p_deadlock.sh checks the text) — or the
 * same exchange grouped, which must complete with the right data:
 *
 *   ungrouped  each rank prt_send_async(big) then prt_recv(big): both sends
 *              wait for a receive that is queued behind them (the old
 *              pipeline order)
 *   grouped    the same two calls inside prt_group_start/end
 *   pipe-old   1F1B on 2 stages through prt_pipe_*, each send posted alone
 *              (prt_pipe_post right after it, as pipe.c did before groups)
 *   pipe       the same op order as the generated program issues it: sends
 *              go with the next receive
 *
 * After a reported deadlock each rank receives the message its peer's
 * stuck send still offers, so MPI ends with nothing in flight.
 * Exit 0 when the pattern behaved as expected, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "planrt.h"

enum { N = 1 << 20 };   /* 4 MiB of fp32: far above any eager limit */

static int rank;

static bool says_deadlock(prt_status s)
{
    return s == PRT_ERR_TIMEOUT && strstr(prt_comm_last_error(), "deadlock under NCCL's rules");
}

/* Take the message the peer's abandoned send still offers — once both
 * ranks have reported (the first rank's drain would otherwise unblock the
 * other before its deadline), and before either frees what its own stuck
 * send reads (the second barrier). */
static void drain(prt_comm *g, int peer, float *buf)
{
    MPI_Barrier(MPI_COMM_WORLD);
    prt_recv(g, buf, N, PRT_FP32, peer, 0);   /* its tag may differ: only the bytes matter */
    MPI_Barrier(MPI_COMM_WORLD);
}

static bool filled_by(const float *x, int who)
{
    for (int i = 0; i < N; i++)
        if (x[i] != (float)(who * 100 + i % 89)) return false;
    return true;
}

static bool raw_pair(prt_comm *g, bool grouped, float *out, float *in)
{
    const int peer = 1 - prt_comm_rank(g);
    prt_request *sr = NULL;
    if (grouped) {
        bool ok = prt_group_start() == PRT_OK &&
                  prt_send_async(g, out, N, PRT_FP32, peer, 5, &sr) == PRT_OK &&
                  prt_recv(g, in, N, PRT_FP32, peer, 5) == PRT_OK;
        ok = prt_group_end() == PRT_OK && ok;
        ok = prt_wait(sr) == PRT_OK && ok;
        return ok && filled_by(in, peer);
    }
    prt_status s1 = prt_send_async(g, out, N, PRT_FP32, peer, 5, &sr);
    prt_status s2 = prt_recv(g, in, N, PRT_FP32, peer, 5);
    bool ok = s1 == PRT_OK && says_deadlock(s2);
    if (!ok) fprintf(stderr, "rank %d: send %s, receive %s: %s\n", rank, prt_status_str(s1),
                     prt_status_str(s2), prt_comm_last_error());
    ok = prt_wait(sr) == PRT_ERR_TIMEOUT && ok;   /* abandoned with the FIFO */
    drain(g, peer, in);
    return ok;
}

/* 1F1B on 2 stages, 2 micro-batches (forward and backward are no-ops):
 * stage 0 sends both activations, then receives both gradients; stage 1
 * receives an activation, sends its gradient, and so on. */
static bool pipe_1f1b(prt_ctx *c, bool old, float *in)
{
    prt_pipe *p;
    if (prt_pipe_new(c, 2, 1, N, false, 0, NULL, NULL, NULL, &p) != PRT_OK) return false;
    const int stage = c->coord.pp, peer = 1 - stage;
    prt_status s = PRT_OK;
    bool deadlock = false;   /* the first failure's message, before later calls replace it */
#define STEP(call) do { if (!s) s = (call); if (!s && old) s = prt_pipe_post(p); \
                        if (s && !deadlock) deadlock = says_deadlock(s); } while (0)
    prt_slot *sl;   /* the no-op forward and backward make the buffers they would write */
    if (stage == 0) {
        STEP(prt_pipe_fwd_slot(p, 0, 0, &sl));
        STEP(prt_pipe_send_act(p, 0, 0, peer));
        STEP(prt_pipe_fwd_slot(p, 1, 0, &sl));
        STEP(prt_pipe_send_act(p, 1, 0, peer));
        STEP(prt_pipe_recv_grad(p, 0, 0, peer));
        prt_pipe_done(p, 0, 0);
        STEP(prt_pipe_recv_grad(p, 1, 0, peer));
        prt_pipe_done(p, 1, 0);
    } else {
        STEP(prt_pipe_recv_act(p, 0, 0, peer));
        STEP(prt_pipe_bwd_slot(p, 0, 0, &sl));
        STEP(prt_pipe_send_grad(p, 0, 0, peer));
        prt_pipe_done(p, 0, 0);
        STEP(prt_pipe_recv_act(p, 1, 0, peer));
        STEP(prt_pipe_bwd_slot(p, 1, 0, &sl));
        STEP(prt_pipe_send_grad(p, 1, 0, peer));
        prt_pipe_done(p, 1, 0);
    }
#undef STEP
    bool ok;
    if (old) {
        ok = deadlock;
        if (!ok) fprintf(stderr, "rank %d: old pipeline order gave %s: %s\n", rank,
                         prt_status_str(s), prt_comm_last_error());
        drain(c->pp, peer, in);
    } else {
        ok = s == PRT_OK && prt_pipe_flush(p) == PRT_OK;
        if (!ok) fprintf(stderr, "rank %d: grouped pipeline order: %s\n", rank, prt_comm_last_error());
    }
    prt_pipe_free(p);
    return ok;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    prt_ctx *c;
    if (prt_init(&argc, &argv, 1, 1, 2, &c) != PRT_OK) {
        fprintf(stderr, "test_p2p_deadlock: %s\n", prt_comm_last_error());
        prt_finalize(NULL);
        return 1;
    }
    rank = c->rank;
    if (prt_comm_p2p_mode() != PRT_P2P_RENDEZVOUS) {
        fprintf(stderr, "test_p2p_deadlock: run it under PLANRT_P2P=rendezvous\n");
        prt_finalize(c);
        return 1;
    }
    float *out = prt_comm_alloc(N * sizeof(float)), *in = prt_comm_alloc(N * sizeof(float));
    for (int i = 0; i < N; i++) out[i] = (float)(rank * 100 + i % 89);
    bool ok = false;
    if (strcmp(mode, "ungrouped") == 0 || strcmp(mode, "grouped") == 0)
        ok = raw_pair(c->pp, mode[0] == 'g', out, in);
    else if (strcmp(mode, "pipe-old") == 0 || strcmp(mode, "pipe") == 0)
        ok = pipe_1f1b(c, mode[4] == '-', in);
    else
        fprintf(stderr, "usage: test_p2p_deadlock ungrouped|grouped|pipe-old|pipe\n");
    printf("rank %d: %s %s\n", rank, mode, ok ? "as expected" : "FAILED");
    prt_comm_free(out);
    prt_comm_free(in);
    prt_finalize(c);
    return ok ? 0 : 1;
}
