/*
 * counts.c: the exchange of counts that comes before an uneven all-to-all
 * (MoE dispatch and combine, issue 17: "counts first, then the variable-
 * size exchange").
 *
 * Counts are host data in both builds (the sizes of the rows that follow
 * must be known on the host to post them), so this is one MPI_Alltoall of
 * 64-bit integers on the group's host communicator, the same under Open MPI
 * and NCCL; the rows then go by the backend (prt_all_to_all_v).  It moves
 * nothing else.
 */
#include <stdint.h>
#include <stdlib.h>

#include "comm_internal.h"

prt_status prt_all_to_all_counts(prt_comm *g, const size_t *sendcounts, size_t *recvcounts)
{
    prtc_clear_error();
    if (!g || !sendcounts || !recvcounts)
        return prtc_error(PRT_ERR_ARG, g, "prt_all_to_all_counts: a NULL argument");
    const int P = g->size;
    if (P == 1) {   /* a one-rank group sends its count to itself (coll.c: no call) */
        recvcounts[0] = sendcounts[0];
        return PRT_OK;
    }
    uint64_t *v = malloc(2 * (size_t)P * sizeof *v);
    if (!v)
        return prtc_error(PRT_ERR_NOMEM, g, "prt_all_to_all_counts: out of memory");
    for (int i = 0; i < P; i++)
        v[i] = sendcounts[i];
    /* A host collective on g->mpi, which the native calls queued in
     * rendezvous mode use too: they go first, so every rank posts the two
     * in the same order. */
    prt_status s = prtc_backend_drain(g);
    if (s != PRT_OK) {
        free(v);
        return s;
    }
    int rc = MPI_Alltoall(v, 1, MPI_UINT64_T, v + P, 1, MPI_UINT64_T, g->mpi);
    for (int i = 0; rc == MPI_SUCCESS && i < P; i++)
        recvcounts[i] = (size_t)v[P + i];
    free(v);
    return rc == MPI_SUCCESS ? PRT_OK
                             : prtc_error(PRT_ERR_MPI, g, "prt_all_to_all_counts: MPI_Alltoall "
                                          "failed (code %d)", rc);
}
