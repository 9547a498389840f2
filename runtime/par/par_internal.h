/*
 * par_internal.h: what the files of runtime/par share and nobody else sees:
 * the last-error text and small range arithmetic.
 */
#ifndef PRT_PAR_INTERNAL_H
#define PRT_PAR_INTERNAL_H

#include "planrt.h"

/* Record why a call failed (printf-style); returns st so callers can
 * `return prtp_fail(...)`. */
prt_status prtp_fail(prt_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void       prtp_clear(void);

/* Copy the comm or ops layer's message when a call below us failed. */
prt_status prtp_check(prt_status st, const char *what);

/* A collective on a few host values: staged through a buffer the backend
 * can send (device memory under NCCL), so it works in both builds. */
prt_status prtp_all_reduce_host(prt_comm *g, void *vals, size_t n, prt_dtype t, prt_redop op);
prt_status prtp_broadcast_host(prt_comm *g, void *vals, size_t n, prt_dtype t, int root);
/* Their buffer, at least `bytes` of backend memory kept for the run (NULL:
 * out of memory): steps never allocate one. Valid until the next call;
 * the caller ends its use (a copy back) before anyone else stages. */
void      *prtp_stage_buf(size_t bytes);

/* This rank's own call failed in a collective verdict (not just the others'
 * report of it): prt_run_stop prints its message too, not only rank 0's. */
void       prtp_mark_own_failure(void);

/* A non-finite loss or gradient norm was seen (by every rank alike). */
void       prtp_set_diverged(void);
bool       prtp_diverged(void);

static inline size_t prtp_min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t prtp_max(size_t a, size_t b) { return a > b ? a : b; }

#endif
