/*
 * moe_ep.c: expert parallelism's data path (issue 17): the all-to-all of a
 * MoE layer's rows between the ranks of an EP group, counts first.
 *
 * EP rank r holds experts [r el, (r+1) el). A rank's dispatched rows are
 * sorted by global expert (prt_moe_route), so its block for EP rank r is
 * contiguous: the rows of r's experts. prt_moe_ep_plan exchanges the
 * per-expert counts (an all-to-all of el ints per rank) and builds the
 * receiver's permutation (prt_moe_recv_order); the exchanges are then one
 * prt_all_to_all_v and one row permutation each way. The rows of a local
 * expert end up in (source rank, token, k) order, which is the order of
 * the single-rank run when sources are consecutive DP ranks: the expert
 * GEMMs and their weight-gradient sums see the same rows in the same
 * order whatever ep is (the layout-invariance rule).
 *
 * It computes nothing and owns nothing past prt_moe_ep_free: the send and
 * receive buffers are the layer's (its dispatched rows, its experts'
 * input); tmp is the one transient buffer, counted as a communication
 * buffer (PRT_MEM_BUFFERS).
 */
#include <stdlib.h>
#include <string.h>

#include "par_internal.h"

void prt_moe_ep_free(prt_moe_ep *x)
{
    if (!x) return;
    free(x->send);
    free(x->cnt);
    free(x->local);
    prt_mem_free(x->perm);
    prt_mem_free(x->tmp);
    memset(x, 0, sizeof *x);
}

/* cnt[s * el + le] = EP rank s's rows for this rank's local expert le:
 * each rank sends the el counts of rank r's experts to rank r. */
static prt_status exchange_counts(prt_moe_ep *x, const int32_t *counts)
{
    size_t n = (size_t)x->ep * x->el;
    int32_t *d = prtp_stage_buf(2 * n * sizeof *d + sizeof *d);   /* kept for the run: no per-layer cudaMalloc */
    prt_status st = d ? PRT_OK : prtp_fail(PRT_ERR_NOMEM, "prt_moe_ep_plan: out of memory");
    if (!st) st = prt_comm_upload(d, counts, n * sizeof *d);
    if (!st) st = prtp_check(prt_all_to_all(x->g, d, d + n, x->el, PRT_INT32), "MoE count all-to-all");
    if (!st) st = prt_comm_download(x->cnt, d + n, n * sizeof *d);
    return st;
}

prt_status prt_moe_ep_plan(prt_moe_ep *x, prt_comm *ep, const int32_t *counts, size_t E, size_t C)
{
    prtp_clear();
    memset(x, 0, sizeof *x);
    int P = prt_comm_size(ep);
    if (E % (size_t)P)
        return prtp_fail(PRT_ERR_ARG, "prt_moe_ep_plan: %zu experts are not a multiple of ep %d", E, P);
    x->g = ep;
    x->ep = P;
    x->el = E / (size_t)P;
    x->C = C;
    x->send = calloc(2 * (size_t)P, sizeof *x->send);
    x->cnt = calloc(E + 1, sizeof *x->cnt);
    x->local = calloc(x->el + 1, sizeof *x->local);
    if (!x->send || !x->cnt || !x->local) {
        prt_moe_ep_free(x);
        return prtp_fail(PRT_ERR_NOMEM, "prt_moe_ep_plan: out of memory");
    }
    x->recv = x->send + P;
    prt_status st = exchange_counts(x, counts);
    for (int r = 0; !st && r < P; r++) {
        size_t out = 0, in = 0;
        for (size_t le = 0; le < x->el; le++) {
            out += (size_t)counts[(size_t)r * x->el + le];
            in += (size_t)x->cnt[(size_t)r * x->el + le];
            x->local[le] += x->cnt[(size_t)r * x->el + le];
        }
        x->send[r] = out * C;
        x->recv[r] = in * C;
        x->rows_out += out;
        x->rows_in += in;
    }
    int32_t *perm = st ? NULL : malloc((x->rows_in + 1) * sizeof *perm);
    if (!st && !perm) st = prtp_fail(PRT_ERR_NOMEM, "prt_moe_ep_plan: out of memory");
    if (!st) {
        prt_moe_recv_order(perm, x->cnt, (size_t)P, x->el);
        x->perm = prt_mem_alloc(PRT_MEM_BUFFERS, (x->rows_in + 1) * sizeof *perm);
        x->tmp = prt_mem_alloc(PRT_MEM_BUFFERS, (x->rows_in * C + 1) * sizeof *x->tmp);
        if (!x->perm || !x->tmp) st = prtp_fail(PRT_ERR_NOMEM, "prt_moe_ep_plan: out of memory");
    }
    if (!st) st = prt_copy_to_device(x->perm, perm, x->rows_in * sizeof *perm);
    free(perm);
    if (st) prt_moe_ep_free(x);
    return st;
}

prt_status prt_moe_ep_to_experts(prt_moe_ep *x, const prt_act *src, prt_act *dst)
{
    prtp_clear();
    prt_status st = prtp_check(prt_all_to_all_v(x->g, src, x->send, x->tmp, x->recv, PRT_ACT),
                               "MoE dispatch all-to-all");
    if (!st) prt_moe_sort_rows(dst, x->tmp, x->perm, x->rows_in, x->C);   /* expert-major */
    return st;
}

prt_status prt_moe_ep_to_sources(prt_moe_ep *x, const prt_act *src, prt_act *dst)
{
    prtp_clear();
    prt_moe_unsort_rows(x->tmp, src, x->perm, x->rows_in, x->C);       /* arrival order */
    return prtp_check(prt_all_to_all_v(x->g, x->tmp, x->recv, dst, x->send, PRT_ACT),
                      "MoE combine all-to-all");
}
