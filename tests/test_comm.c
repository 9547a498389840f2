/*
 * test_comm.c: the collectives of planrt against values computed locally,
 * run under real mpirun (tests: `make test-comm` runs it on 1, 2, 3, 4, 5
 * and 8 ranks).
 *
 * One launch covers every operation x element type x reduction x algorithm
 * (native and each own one the operation has) x mode (out of place, in
 * place, asynchronous) x count {0, 1, 7}, trimmed as wanted() says, and for
 * a subset (big_case(): every operation and algorithm in fp32, plus async
 * and bf16) the count 1000003, which no rank count above 1 divides — so the
 * uneven blocks of the ring algorithms are exercised at size.  For the block
 * collectives (per-rank counts) 1000003 is the whole buffer: each rank
 * contributes 1000003 / P elements (the v variants P-1 more in all).
 * Inputs are small integers (-5..5), so sums are exact in every type and
 * the check can be tight: |got - want| <= atol + rtol |want| per type.
 *
 * Also checked: the groups of every dp x tp x pp layout of the world size
 * (for 8 ranks this includes dp2 x tp2 x pp2) carry exactly the ranks of
 * rank = tp + TP*(dp + DP*pp), and the embedding group the first and the
 * last stage only; collectives on sub-groups; several requests in
 * flight at once; point-to-point (blocking and async); and the errors a
 * caller must get (wrong world size, bad root, overlapping buffers).
 *
 * A group of one rank moves nothing: every operation on one (the TP group
 * of a dp = world layout) gives its input back in every mode, type,
 * reduction, algorithm and deadline, and makes no MPI call — counted by
 * PMPI wrappers of every MPI communication call planrt makes (the MPI
 * profiling interface: this program's MPI_Allreduce is the one planrt
 * calls, and it calls PMPI_Allreduce).  prtc_agree, the start-up agreement
 * behind the NCCL unique id's broadcast, is checked with one rank failing.
 *
 * A case fails when it fails on any rank; rank 0 prints the failures and
 * the closing line "N passed, N failed".  Exit status 1 on any failure.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planrt.h"
#include "runtime/comm/comm_internal.h"   /* fp16/bf16 conversions */

/* The operations under test. ORDER TOP: keep top_name in step. */
typedef enum {
    T_BCAST, T_SCATTER, T_GATHER, T_REDUCE, T_ALL_GATHER, T_REDUCE_SCATTER,
    T_ALL_REDUCE, T_ALL_TO_ALL, T_ALL_GATHER_V, T_REDUCE_SCATTER_V, T_COUNT
} top;
static const char *const top_name[T_COUNT] = {
    "broadcast", "scatter", "gather", "reduce", "all_gather", "reduce_scatter",
    "all_reduce", "all_to_all", "all_gather_v", "reduce_scatter_v",
};
enum { M_OUT, M_IN, M_ASYNC, M_COUNT };  /* out of place, in place, async */
static const char *const mode_name[M_COUNT] = { "out-of-place", "in-place", "async" };
static const char *const type_name[] = { "fp32", "fp16", "bf16", "int32", "int64" };

/* Results of every case, per rank, reduced at the end. */
#define MAX_CASES 20000
static unsigned char failed[MAX_CASES];
static char names[MAX_CASES][96];
static int ncases;
static int world_rank, world_size;

/* ---- MPI calls, counted (PMPI): what a one-rank collective must not make */
static long mpi_calls;

#define COUNTED(name, params, args) \
    int MPI_##name params { mpi_calls++; return PMPI_##name args; }
#define B_  const void *sb, int sn, MPI_Datatype st, void *rb, int rn, MPI_Datatype rt
#define BA_ sb, sn, st, rb, rn, rt
#define R_  const void *sb, void *rb, int n, MPI_Datatype t, MPI_Op op
#define RA_ sb, rb, n, t, op
#define V_  const void *sb, const int *sc, const int *sd, MPI_Datatype st, void *rb, \
            const int *rc, const int *rd, MPI_Datatype rt, MPI_Comm c
#define VA_ sb, sc, sd, st, rb, rc, rd, rt, c
#define GV_ const void *sb, int sn, MPI_Datatype st, void *rb, const int *rc, const int *rd, \
            MPI_Datatype rt, MPI_Comm c
#define GVA_ sb, sn, st, rb, rc, rd, rt, c
typedef MPI_Request *Req_;
COUNTED(Bcast, (void *b, int n, MPI_Datatype t, int root, MPI_Comm c), (b, n, t, root, c))
COUNTED(Ibcast, (void *b, int n, MPI_Datatype t, int root, MPI_Comm c, Req_ q), (b, n, t, root, c, q))
COUNTED(Scatter, (B_, int root, MPI_Comm c), (BA_, root, c))
COUNTED(Iscatter, (B_, int root, MPI_Comm c, Req_ q), (BA_, root, c, q))
COUNTED(Gather, (B_, int root, MPI_Comm c), (BA_, root, c))
COUNTED(Igather, (B_, int root, MPI_Comm c, Req_ q), (BA_, root, c, q))
COUNTED(Reduce, (R_, int root, MPI_Comm c), (RA_, root, c))
COUNTED(Ireduce, (R_, int root, MPI_Comm c, Req_ q), (RA_, root, c, q))
COUNTED(Allreduce, (R_, MPI_Comm c), (RA_, c))
COUNTED(Iallreduce, (R_, MPI_Comm c, Req_ q), (RA_, c, q))
COUNTED(Reduce_scatter_block, (R_, MPI_Comm c), (RA_, c))
COUNTED(Ireduce_scatter_block, (R_, MPI_Comm c, Req_ q), (RA_, c, q))
COUNTED(Reduce_scatter, (const void *sb, void *rb, const int *rc, MPI_Datatype t, MPI_Op op,
                         MPI_Comm c), (sb, rb, rc, t, op, c))
COUNTED(Ireduce_scatter, (const void *sb, void *rb, const int *rc, MPI_Datatype t, MPI_Op op,
                          MPI_Comm c, Req_ q), (sb, rb, rc, t, op, c, q))
COUNTED(Allgather, (B_, MPI_Comm c), (BA_, c))
COUNTED(Iallgather, (B_, MPI_Comm c, Req_ q), (BA_, c, q))
COUNTED(Allgatherv, (GV_), (GVA_))
COUNTED(Iallgatherv, (GV_, Req_ q), (GVA_, q))
COUNTED(Alltoall, (B_, MPI_Comm c), (BA_, c))
COUNTED(Ialltoall, (B_, MPI_Comm c, Req_ q), (BA_, c, q))
COUNTED(Alltoallv, (V_), (VA_))
COUNTED(Ialltoallv, (V_, Req_ q), (VA_, q))
COUNTED(Barrier, (MPI_Comm c), (c))
COUNTED(Ibarrier, (MPI_Comm c, Req_ q), (c, q))
COUNTED(Send, (const void *b, int n, MPI_Datatype t, int to, int tag, MPI_Comm c),
        (b, n, t, to, tag, c))
COUNTED(Isend, (const void *b, int n, MPI_Datatype t, int to, int tag, MPI_Comm c, Req_ q),
        (b, n, t, to, tag, c, q))
COUNTED(Recv, (void *b, int n, MPI_Datatype t, int from, int tag, MPI_Comm c, MPI_Status *st),
        (b, n, t, from, tag, c, st))
COUNTED(Irecv, (void *b, int n, MPI_Datatype t, int from, int tag, MPI_Comm c, Req_ q),
        (b, n, t, from, tag, c, q))
COUNTED(Testall, (int n, MPI_Request *q, int *flag, MPI_Status *st), (n, q, flag, st))
COUNTED(Wait, (MPI_Request *q, MPI_Status *st), (q, st))

/* Input value of element i on (group) rank r: a small integer. */
static double val(int r, size_t i, int salt)
{
    return (double)((int)((i * 7 + (size_t)r * 13 + (size_t)salt) % 11) - 5);
}

static void put(void *buf, size_t i, prt_dtype t, double v)
{
    switch (t) {
    case PRT_FP32:  ((float *)buf)[i] = (float)v; break;
    case PRT_FP16:  ((uint16_t *)buf)[i] = prtc_float_to_half((float)v); break;
    case PRT_BF16:  ((uint16_t *)buf)[i] = prtc_float_to_bf16((float)v); break;
    case PRT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case PRT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double get(const void *buf, size_t i, prt_dtype t)
{
    switch (t) {
    case PRT_FP32:  return ((const float *)buf)[i];
    case PRT_FP16:  return prtc_half_to_float(((const uint16_t *)buf)[i]);
    case PRT_BF16:  return prtc_bf16_to_float(((const uint16_t *)buf)[i]);
    case PRT_INT32: return ((const int32_t *)buf)[i];
    case PRT_INT64: return (double)((const int64_t *)buf)[i];
    }
    return NAN;
}

/* op over ranks 0..P-1 of val(j, i); PRT_AVG as the library defines it. */
static double reduced(prt_redop op, prt_dtype t, int P, size_t i, int salt)
{
    double acc = val(0, i, salt);
    for (int j = 1; j < P; j++) {
        double v = val(j, i, salt);
        acc = op == PRT_MAX ? fmax(acc, v) : op == PRT_MIN ? fmin(acc, v) : acc + v;
    }
    if (op == PRT_AVG)
        acc = (t == PRT_INT32 || t == PRT_INT64) ? (double)((long long)acc / P) : acc / P;
    return acc;
}

/* First mismatch of got[0..n) against want(i), or -1. */
typedef double (*want_fn)(size_t i, const void *ctx);
static long first_mismatch(const void *got, size_t n, prt_dtype t, want_fn want,
                           const void *ctx, double *g, double *w)
{
    static const double tol[] = { 1e-6, 2e-3, 1.6e-2, 0, 0 };  /* ORDER PRT_DTYPE */
    for (size_t i = 0; i < n; i++) {
        double x = get(got, i, t), y = want(i, ctx);
        if (!(fabs(x - y) <= tol[t] + tol[t] * fabs(y))) {
            *g = x;
            *w = y;
            return (long)i;
        }
    }
    return -1;
}

/* What one case checks: where the result is and what it must be. */
typedef struct {
    prt_redop op; prt_dtype t; int P, salt, root, r;
    size_t n;               /* per-rank count */
    const size_t *counts;   /* v variants */
    size_t base;            /* first element index of the expected block */
    top k;
} expect;

static double want_reduced(size_t i, const void *c)
{
    const expect *e = c;
    return reduced(e->op, e->t, e->P, e->base + i, e->salt);
}
static double want_from_root(size_t i, const void *c)
{
    const expect *e = c;
    return val(e->root, e->base + i, e->salt);
}
/* Concatenated blocks: block j (n elements, or counts[j]) holds rank j's
 * data, element i of it being val(j, i + offset the sender used). */
static double want_blocks(size_t i, const void *c)
{
    const expect *e = c;
    size_t j = 0, off = 0;
    if (e->counts) {
        while (i - off >= e->counts[j])
            off += e->counts[j++];
    } else {
        j = i / e->n;
        off = j * e->n;
    }
    return val((int)j, e->base + (i - off), e->salt);
}

static void record(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void record(bool ok, const char *fmt, ...)
{
    if (ncases >= MAX_CASES) {
        fprintf(stderr, "test_comm: too many cases\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(names[ncases], sizeof names[0], fmt, ap);
    va_end(ap);
    failed[ncases++] = !ok;
}

/* Wait for a request, testing it a few times first as a user overlapping
 * work would. */
static prt_status finish(prt_request *req)
{
    bool done = false;
    for (int i = 0; i < 3 && !done; i++) {
        prt_status s = prt_test(req, &done);
        if (s != PRT_OK)
            return s;
    }
    return done ? PRT_OK : prt_wait(req);
}

#define D(p) dev(&B, (p))
/* Upload the inputs, then (if that worked) make the call. */
#define UPLOADED (s = upload(&B)) != PRT_OK ? s :

/* Host copies and the library's buffers of one case. */
typedef struct {
    char *big, *small;     /* host */
    char *dbig, *dsmall;   /* prt_comm_alloc: what the library sees */
    size_t big_bytes, small_bytes;
} bufs;

/* The buffers of a case, reused from case to case (fresh allocations of
 * tens of MB per case would cost more page faults than the collective). */
static bool buffers(bufs *b, size_t big_bytes, size_t small_bytes)
{
    static bufs pool;
    static size_t big_cap, small_cap;
    if (big_bytes > big_cap) {
        free(pool.big);
        prt_comm_free(pool.dbig);
        pool.big = malloc(big_bytes);
        pool.dbig = prt_comm_alloc(big_bytes);
        big_cap = pool.big && pool.dbig ? big_bytes : 0;
    }
    if (small_bytes > small_cap) {
        free(pool.small);
        prt_comm_free(pool.dsmall);
        pool.small = malloc(small_bytes);
        pool.dsmall = prt_comm_alloc(small_bytes);
        small_cap = pool.small && pool.dsmall ? small_bytes : 0;
    }
    if (!big_cap || !small_cap)
        return false;
    *b = pool;
    b->big_bytes = big_bytes;
    b->small_bytes = small_bytes;
    memset(b->big, 0x7f, big_bytes);   /* unwritten results show */
    memset(b->small, 0x7f, small_bytes);
    return true;
}

/* The library's pointer for a host pointer into big or small. */
static void *dev(const bufs *b, const void *p)
{
    const char *c = p;
    if (c >= b->big && c < b->big + b->big_bytes)
        return b->dbig + (c - b->big);
    if (c >= b->small && c < b->small + b->small_bytes)
        return b->dsmall + (c - b->small);
    return NULL;
}

static prt_status upload(const bufs *b)
{
    prt_status s = prt_comm_upload(b->dbig, b->big, b->big_bytes);
    return s ? s : prt_comm_upload(b->dsmall, b->small, b->small_bytes);
}

static prt_status download(const bufs *b)
{
    prt_status s = prt_comm_download(b->big, b->dbig, b->big_bytes);
    return s ? s : prt_comm_download(b->small, b->dsmall, b->small_bytes);
}

/* Run one case of operation k on group g and check the result on this
 * rank; returns false (and says why) on a mismatch or error. */
static bool run_case(prt_comm *g, top k, prt_dtype t, prt_redop op, int mode, size_t n,
                     int root, int salt, char *why, size_t why_len)
{
    const int P = prt_comm_size(g), r = prt_comm_rank(g);
    const size_t es = prt_dtype_size(t);
    size_t counts[64], cbase = 0, total = n * (size_t)P;
    bool v = k == T_ALL_GATHER_V || k == T_REDUCE_SCATTER_V;
    if (v) {      /* uneven: rank j contributes n + j elements */
        total = 0;
        for (int j = 0; j < P; j++) {
            counts[j] = n + (size_t)j;
            if (j < r)
                cbase += counts[j];
            total += counts[j];
        }
    }
    size_t myn = v ? counts[r] : n;
    /* Inputs are written and results read in host copies (big, small) of
     * the buffers the library sees (device memory in the CUDA build). */
    bool whole = k != T_BCAST && k != T_REDUCE && k != T_ALL_REDUCE;  /* big is n*P */
    size_t big_bytes = (whole ? total : n) * es + 1, small_bytes = (n > myn ? n : myn) * es + 1;
    if (k == T_ALL_TO_ALL)
        small_bytes = big_bytes;
    bufs B;
    if (!buffers(&B, big_bytes, small_bytes)) {
        snprintf(why, why_len, "out of memory");
        return false;
    }
    char *big = B.big, *small = B.small;
    bool in = mode == M_IN;
    prt_request *req = NULL, **rq = mode == M_ASYNC ? &req : NULL;
    expect e = { .op = op, .t = t, .P = P, .salt = salt, .root = root, .r = r, .n = n,
                 .counts = v ? counts : NULL, .k = k };
    const void *res = NULL;   /* where the result is */
    size_t res_n = 0;
    want_fn want = want_reduced;
    prt_status s = PRT_OK;

    switch (k) {
    case T_BCAST:   /* in place by nature */
        for (size_t i = 0; i < n; i++)
            put(small, i, t, r == root ? val(root, i, salt) : -99);
        s = UPLOADED rq ? prt_broadcast_async(g, D(small), n, t, root, rq)
                        : prt_broadcast(g, D(small), n, t, root);
        res = small, res_n = n, want = want_from_root;
        break;
    case T_SCATTER: {
        for (size_t i = 0; i < total; i++)
            put(big, i, t, val(root, i, salt));
        void *out = in && r == root ? big + (size_t)r * n * es : small;
        s = UPLOADED rq ? prt_scatter_async(g, D(big), D(out), n, t, root, rq)
                        : prt_scatter(g, D(big), D(out), n, t, root);
        res = out, res_n = n, want = want_from_root, e.base = (size_t)r * n;
        break;
    }
    case T_GATHER: {
        const void *src = small;
        for (size_t i = 0; i < n; i++)
            put(small, i, t, val(r, i, salt));
        if (in && r == root) {
            src = big + (size_t)r * n * es;
            memcpy(big + (size_t)r * n * es, small, n * es);
        }
        s = UPLOADED rq ? prt_gather_async(g, D(src), D(big), n, t, root, rq)
                        : prt_gather(g, D(src), D(big), n, t, root);
        if (r == root)
            res = big, res_n = total, want = want_blocks;
        break;
    }
    case T_REDUCE: case T_ALL_REDUCE: {
        for (size_t i = 0; i < n; i++)
            put(small, i, t, val(r, i, salt));
        void *out = in ? small : big;
        if (k == T_REDUCE)
            s = UPLOADED rq ? prt_reduce_async(g, D(small), D(out), n, t, op, root, rq)
                            : prt_reduce(g, D(small), D(out), n, t, op, root);
        else
            s = UPLOADED rq ? prt_all_reduce_async(g, D(small), D(out), n, t, op, rq)
                            : prt_all_reduce(g, D(small), D(out), n, t, op);
        if (k == T_ALL_REDUCE || r == root)
            res = out, res_n = n;
        break;
    }
    case T_ALL_GATHER: case T_ALL_GATHER_V: {
        const void *src = small;
        for (size_t i = 0; i < myn; i++)
            put(small, i, t, val(r, i, salt));
        size_t off = v ? cbase : (size_t)r * n;
        if (in) {
            src = big + off * es;
            memcpy(big + off * es, small, myn * es);
        }
        if (v)
            s = UPLOADED rq ? prt_all_gather_v_async(g, D(src), D(big), counts, t, rq)
                            : prt_all_gather_v(g, D(src), D(big), counts, t);
        else
            s = UPLOADED rq ? prt_all_gather_async(g, D(src), D(big), n, t, rq)
                            : prt_all_gather(g, D(src), D(big), n, t);
        res = big, res_n = total, want = want_blocks;
        break;
    }
    case T_REDUCE_SCATTER: case T_REDUCE_SCATTER_V: {
        for (size_t i = 0; i < total; i++)
            put(big, i, t, val(r, i, salt));
        size_t off = v ? cbase : (size_t)r * n;
        void *out = in ? big + off * es : small;
        if (v)
            s = UPLOADED rq ? prt_reduce_scatter_v_async(g, D(big), D(out), counts, t, op, rq)
                            : prt_reduce_scatter_v(g, D(big), D(out), counts, t, op);
        else
            s = UPLOADED rq ? prt_reduce_scatter_async(g, D(big), D(out), n, t, op, rq)
                            : prt_reduce_scatter(g, D(big), D(out), n, t, op);
        res = out, res_n = myn, e.base = off;
        break;
    }
    case T_ALL_TO_ALL: {
        /* rank r sends val(r, j*n + i) to rank j; rank r's block j holds
         * val(j, r*n + i) */
        char *sb = in ? big : small;
        for (size_t i = 0; i < total; i++)
            put(sb, i, t, val(r, i, salt));
        s = UPLOADED rq ? prt_all_to_all_async(g, D(sb), D(big), n, t, rq)
                        : prt_all_to_all(g, D(sb), D(big), n, t);
        res = big, res_n = total, want = want_blocks, e.base = (size_t)r * n;
        break;
    }
    case T_COUNT:
        break;
    }
    if (s == PRT_OK && req)
        s = finish(req);
    if (s == PRT_OK)
        s = download(&B);
    bool ok = s == PRT_OK;
    if (!ok) {
        snprintf(why, why_len, "%s: %s", prt_status_str(s), prt_comm_last_error());
    } else if (res) {
        double got = 0, w = 0;
        long bad = first_mismatch(res, res_n, t, want, &e, &got, &w);
        if (bad >= 0) {
            snprintf(why, why_len, "element %ld of %zu: got %g, want %g", bad, res_n, got, w);
            ok = false;
        }
    }
    return ok;
}

static bool reduces(top k)
{
    return k == T_REDUCE || k == T_ALL_REDUCE || k == T_REDUCE_SCATTER || k == T_REDUCE_SCATTER_V;
}

/* Which cases run at the big count: each operation with each of its
 * algorithms once (fp32 sum, out of place), plus an async ring all-reduce
 * and a bf16 average on the ring — a 4 MB case costs far more than the
 * collective itself in filling and checking, so the subset keeps the whole
 * test within a minute on 2 cores. */
static bool big_case(top k, prt_dtype t, prt_redop op, prt_algo a, int mode)
{
    if (k == T_ALL_REDUCE && a == PRT_ALGO_RING && mode == M_ASYNC)
        return t == PRT_FP32 && op == PRT_SUM;
    if (k == T_ALL_REDUCE && a == PRT_ALGO_RING && t == PRT_BF16 && op == PRT_AVG)
        return mode == M_OUT;
    return t == PRT_FP32 && op == PRT_SUM && mode == M_OUT;
}

/* The cross product, trimmed so that 8 oversubscribed ranks finish in
 * seconds while every dimension is still covered: algorithms an operation
 * does not have (they would run native again) are skipped; count 0 runs out
 * of place only; fp16, bf16 and int64 run max and min out of place only
 * (sum and avg, whose rounding and truncation differ, in every mode); the
 * big count runs the subset of big_case() (the in-place paths are the same
 * code at every size). */
static bool wanted(top k, prt_dtype t, prt_redop op, prt_algo a, int mode, size_t c, bool big,
                   bool full_types)
{
    static const coll_kind kind[T_COUNT] = {   /* ORDER TOP */
        COLL_BROADCAST, COLL_SCATTER, COLL_GATHER, COLL_REDUCE, COLL_ALL_GATHER,
        COLL_REDUCE_SCATTER, COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_ALL_GATHER,
        COLL_REDUCE_SCATTER };
    if (a != PRT_ALGO_NATIVE && !prtc_algo_exists(kind[k], a))
        return false;
    if (!full_types && t != PRT_FP32)
        return false;
    if (c == 3)
        return big && big_case(k, t, op, a, mode);
    if (c == 0 && mode != M_OUT)
        return false;
    if ((t == PRT_FP16 || t == PRT_BF16 || t == PRT_INT64) && op >= PRT_MAX && mode != M_OUT)
        return false;
    return true;
}

/* Every operation x type x reduction x algorithm x mode x count on g. */
static void sweep(prt_comm *g, const char *gname, bool big, bool full_types)
{
    static const size_t counts[] = { 0, 1, 7, 1000003 };
    static const prt_algo algos[] = { PRT_ALGO_NATIVE, PRT_ALGO_RING, PRT_ALGO_TREE };
    const int P = prt_comm_size(g);
    int salt = 0;
    char why[256];
    for (top k = 0; k < T_COUNT; k++)
        for (prt_dtype t = PRT_FP32; t <= PRT_INT64; t++)
            for (prt_redop op = PRT_SUM; op <= (reduces(k) ? PRT_MIN : PRT_SUM); op++)
                for (size_t a = 0; a < 3; a++)
                    for (int m = 0; m < M_COUNT; m++)
                        for (size_t c = 0; c < 4; c++) {
                            if (!wanted(k, t, op, algos[a], m, c, big, full_types))
                                continue;
                            int root = (salt * 5 + 1) % P;
                            /* The big count is the whole buffer: per rank
                             * for the block collectives (else their cost,
                             * checks included, grows as P^2). */
                            bool block = k != T_BCAST && k != T_REDUCE && k != T_ALL_REDUCE;
                            size_t n = c == 3 && block ? counts[c] / (size_t)P : counts[c];
                            salt++;
                            prt_comm_set_algo(g, algos[a]);
                            why[0] = '\0';
                            bool ok = run_case(g, k, t, op, m, n, root, salt, why,
                                               sizeof why);
                            record(ok, "%s %s %s %s %s %s n=%zu root=%d", gname, top_name[k],
                                   type_name[t], reduces(k) ? prt_redop_name(op) : "-",
                                   prt_algo_name(algos[a]), mode_name[m], n, root);
                            if (!ok)
                                fprintf(stderr, "rank %d: FAIL %s: %s\n", world_rank,
                                        names[ncases - 1], why);
                        }
    prt_comm_set_algo(g, PRT_ALGO_NATIVE);
}

/* The groups of layout (dp, tp, pp) hold the ranks DESIGN.md names, and a
 * sum over each group proves they talk. */
static void check_layout(int dp, int tp, int pp)
{
    prt_ctx *c;
    prt_status s = prt_init(NULL, NULL, dp, tp, pp, &c);
    if (s != PRT_OK) {
        record(false, "layout dp%d tp%d pp%d: init", dp, tp, pp);
        return;
    }
    int R = c->rank, x = R % tp, d = (R / tp) % dp, p = R / (tp * dp);
    bool ok = c->coord.tp == x && c->coord.dp == d && c->coord.pp == p &&
              c->layout.dp == dp && c->layout.tp == tp && c->layout.pp == pp &&
              prt_comm_size(c->tp) == tp && prt_comm_size(c->dp) == dp &&
              prt_comm_size(c->pp) == pp && prt_comm_size(c->world) == world_size &&
              prt_comm_rank(c->tp) == x && prt_comm_rank(c->dp) == d && prt_comm_rank(c->pp) == p;
    for (int i = 0; i < tp; i++)
        ok &= prt_comm_world_rank(c->tp, i) == i + tp * (d + dp * p);
    for (int i = 0; i < dp; i++)
        ok &= prt_comm_world_rank(c->dp, i) == x + tp * (i + dp * p);
    for (int i = 0; i < pp; i++)
        ok &= prt_comm_world_rank(c->pp, i) == x + tp * (d + dp * i);
    prt_comm *groups[3] = { c->tp, c->dp, c->pp };
    for (int j = 0; j < 3; j++) {   /* sum of world ranks over the group, ring algorithm */
        int64_t mine = R, sum = -1, want = 0;
        int64_t *d = prt_comm_alloc(2 * sizeof *d);   /* device memory in the CUDA build */
        prt_comm_set_algo(groups[j], PRT_ALGO_RING);
        ok &= d && prt_comm_upload(d, &mine, sizeof mine) == PRT_OK &&
              prt_all_reduce(groups[j], d, d + 1, 1, PRT_INT64, PRT_SUM) == PRT_OK &&
              prt_comm_download(&sum, d + 1, sizeof sum) == PRT_OK;
        prt_comm_free(d);
        for (int i = 0; i < prt_comm_size(groups[j]); i++)
            want += prt_comm_world_rank(groups[j], i);
        ok &= sum == want;
    }
    ok &= c->local_rank >= 0 && c->local_rank < c->local_size;
    record(ok, "layout dp%d tp%d pp%d: groups, coordinates, group sums", dp, tp, pp);
    /* the embedding group: this (tp, dp)'s rank of the first and of the last
     * stage (one rank at pp 1), none on the stages between; a sum proves it */
    bool ends = p == 0 || p == pp - 1, eok = (c->embed != NULL) == ends;
    if (c->embed && eok) {
        int n = pp > 1 ? 2 : 1;
        eok = prt_comm_size(c->embed) == n && prt_comm_rank(c->embed) == (p == 0 ? 0 : 1) &&
              prt_comm_world_rank(c->embed, 0) == x + tp * d &&
              prt_comm_world_rank(c->embed, n - 1) == x + tp * (d + dp * (pp - 1));
        int64_t mine = R, sum = -1;
        int64_t *b = prt_comm_alloc(2 * sizeof *b);
        eok &= b && prt_comm_upload(b, &mine, sizeof mine) == PRT_OK &&
               prt_all_reduce(c->embed, b, b + 1, 1, PRT_INT64, PRT_SUM) == PRT_OK &&
               prt_comm_download(&sum, b + 1, sizeof sum) == PRT_OK &&
               sum == (pp > 1 ? 2 * (x + tp * d) + tp * dp * (pp - 1) : R);
        prt_comm_free(b);
    }
    record(eok, "layout dp%d tp%d pp%d: embedding group (first and last stage)", dp, tp, pp);
    /* expert parallelism, every ep dividing dp: DP rank d is rank d % ep of
     * EP group d / ep; its expert-DP group the dp/ep ranks of the same d % ep */
    for (int ep = 1; ep <= dp; ep++) {
        if (dp % ep) {
            record(prt_ep_init(c, ep) == PRT_ERR_ARG && !c->ep, "layout dp%d: ep %d refused", dp, ep);
            continue;
        }
        bool gok = prt_ep_init(c, ep) == PRT_OK && prt_ep_init(c, ep) == PRT_ERR_ARG &&
                   prt_comm_size(c->ep) == ep && prt_comm_rank(c->ep) == d % ep &&
                   prt_comm_size(c->edp) == dp / ep && prt_comm_rank(c->edp) == d / ep;
        for (int i = 0; gok && i < ep; i++)
            gok &= prt_comm_world_rank(c->ep, i) == x + tp * ((d / ep) * ep + i + dp * p);
        for (int i = 0; gok && i < dp / ep; i++)
            gok &= prt_comm_world_rank(c->edp, i) == x + tp * (i * ep + d % ep + dp * p);
        int64_t mine = R, sum = -1, want = 0;
        int64_t *b = prt_comm_alloc(2 * sizeof *b);
        gok &= b && prt_comm_upload(b, &mine, sizeof mine) == PRT_OK &&
               prt_all_reduce(c->ep, b, b + 1, 1, PRT_INT64, PRT_SUM) == PRT_OK &&
               prt_comm_download(&sum, b + 1, sizeof sum) == PRT_OK;
        prt_comm_free(b);
        for (int i = 0; gok && i < ep; i++) want += prt_comm_world_rank(c->ep, i);
        record(gok && sum == want, "layout dp%d tp%d pp%d: ep %d groups", dp, tp, pp, ep);
        /* a fresh context for the next ep: groups are made once per context */
        prt_finalize(c);
        if (prt_init(NULL, NULL, dp, tp, pp, &c) != PRT_OK) { record(false, "re-init"); return; }
    }
    if (dp == 2 && tp == 2 && pp == 2 && world_size == 8)
        sweep(c->dp, "dp-group", false, false);   /* fp32 cases again on a sub-group */
    prt_finalize(c);
}

/* Does din hold, in block k of n, what rank `from` put in block k of its
 * dout (check_p2p's pattern)? */
static bool p2p_blocks_ok(const float *din, int from, int n, int blocks)
{
    size_t bytes = (size_t)blocks * (size_t)n * sizeof(float);
    float *in = malloc(bytes);
    bool ok = in && prt_comm_download(in, din, bytes) == PRT_OK;
    for (int i = 0; ok && i < blocks * n; i++)
        ok = in[i] == (float)(from * 1000 + i % 997);
    free(in);
    return ok;
}

/* Groups (prt_group_start/end), in both modes: every rank sends to the
 * next first and receives from the previous — which under NCCL's rules
 * only completes grouped — with several messages in issue order; blocking
 * calls inside a group end at prt_group_end; misuse is refused. */
static void check_p2p_group(prt_comm *g, const float *dout, float *din, int n, int tags)
{
    const int P = prt_comm_size(g), r = prt_comm_rank(g);
    const int next = (r + 1) % P, prev = (r + P - 1) % P;
    if (P > 1) {
        memset(din, 0, (size_t)tags * (size_t)n * sizeof(float));
        prt_request *rq[16];
        bool ok = prt_group_start() == PRT_OK;
        for (int tag = 0; tag < tags; tag++)
            ok &= prt_send_async(g, dout + tag * n, (size_t)n, PRT_FP32, next, tag, &rq[tag]) == PRT_OK;
        for (int tag = 0; tag < tags; tag++)
            ok &= prt_recv_async(g, din + tag * n, (size_t)n, PRT_FP32, prev, tag,
                                 &rq[tags + tag]) == PRT_OK;
        ok &= prt_group_end() == PRT_OK;
        ok &= prt_wait_all(rq, 2 * tags) == PRT_OK;
        record(ok && p2p_blocks_ok(din, prev, n, tags),
               "p2p group: %d sends then %d receives on every rank, in issue order", tags, tags);
        memset(din, 0, (size_t)n * sizeof(float));
        ok = prt_group_start() == PRT_OK;
        ok &= prt_send(g, dout, (size_t)n, PRT_FP32, next, 7) == PRT_OK;   /* enqueued only */
        ok &= prt_recv(g, din, (size_t)n, PRT_FP32, prev, 7) == PRT_OK;
        ok &= prt_group_end() == PRT_OK;                                  /* both end here */
        record(ok && p2p_blocks_ok(din, prev, n, 1),
               "p2p group: blocking send and receive complete at prt_group_end");
    }
    float x = 0;
    prt_status s = prt_group_end();
    record(s == PRT_ERR_ARG && strstr(prt_comm_last_error(), "prt_group_start"),
           "error: prt_group_end without prt_group_start");
    prt_group_start();
    s = prt_all_reduce(g, &x, &x, 1, PRT_FP32, PRT_SUM);
    record(s == PRT_ERR_ARG && strstr(prt_comm_last_error(), "only prt_send and prt_recv"),
           "error: a collective inside a group");
    record(prt_group_end() == PRT_OK, "an empty group");
}

/* Rendezvous mode (and NCCL): messages between two ranks match in issue
 * order, without tags. Two receives posted in the other order than the
 * sends — what tags made fine under MPI — are reported on the MPI backend
 * (on NCCL they would silently swap, so this is not run there). */
static void check_p2p_order(prt_comm *g, const float *dout, float *din, int n)
{
    const int P = prt_comm_size(g), r = prt_comm_rank(g);
    const int next = (r + 1) % P, prev = (r + P - 1) % P;
    if (P < 2 || strcmp(prt_comm_backend(), "mpi") != 0)
        return;
    prt_request *rq[4];
    bool ok = prt_group_start() == PRT_OK;
    ok &= prt_send_async(g, dout, (size_t)n, PRT_FP32, next, 1, &rq[0]) == PRT_OK;
    ok &= prt_send_async(g, dout + n, (size_t)n, PRT_FP32, next, 2, &rq[1]) == PRT_OK;
    ok &= prt_recv_async(g, din + n, (size_t)n, PRT_FP32, prev, 2, &rq[2]) == PRT_OK;
    ok &= prt_recv_async(g, din, (size_t)n, PRT_FP32, prev, 1, &rq[3]) == PRT_OK;
    ok &= prt_group_end() == PRT_OK;
    prt_status s0 = prt_wait(rq[0]), s1 = prt_wait(rq[1]);
    prt_status s2 = prt_wait(rq[2]);
    bool said = strstr(prt_comm_last_error(), "out of order") &&
                strstr(prt_comm_last_error(), "tag 1");
    prt_status s3 = prt_wait(rq[3]);
    record(ok && s0 == PRT_OK && s1 == PRT_OK && s2 == PRT_ERR_MPI && said && s3 == PRT_ERR_MPI,
           "rendezvous: receives in another order than the sends are reported (NCCL would "
           "match them out of order)");
    /* a count that differs from the sender's is reported too */
    ok = prt_group_start() == PRT_OK;
    ok &= prt_send_async(g, dout, (size_t)n, PRT_FP32, next, 3, &rq[0]) == PRT_OK;
    ok &= prt_recv_async(g, din, (size_t)n + 1, PRT_FP32, prev, 3, &rq[1]) == PRT_OK;
    ok &= prt_group_end() == PRT_OK;
    s0 = prt_wait(rq[0]);
    s1 = prt_wait(rq[1]);
    record(ok && s0 == PRT_OK && s1 == PRT_ERR_MPI &&
           strstr(prt_comm_last_error(), "100003 elements"),
           "rendezvous: a receive of another count than the send is reported");
}

/* Point to point around a ring: blocking (ordered to avoid deadlock),
 * groups, then (buffered mode only) async with several tags in flight,
 * received in reverse order. */
static void check_p2p(prt_ctx *c)
{
    prt_comm *g = c->world;
    const int P = prt_comm_size(g), r = prt_comm_rank(g);
    const int next = (r + 1) % P, prev = (r + P - 1) % P;
    enum { N = 100003, TAGS = 4 };
    float *out = malloc(TAGS * N * sizeof(float)), *in = malloc(TAGS * N * sizeof(float));
    for (int i = 0; i < TAGS * N; i++)
        out[i] = (float)(r * 1000 + i % 997);
    const size_t bytes = TAGS * N * sizeof(float);
    float *dout = prt_comm_alloc(bytes), *din = prt_comm_alloc(bytes);
    bool ok = dout && din && prt_comm_upload(dout, out, bytes) == PRT_OK;
    if (P > 1) {
        if (r % 2 == 0) {
            ok &= prt_send(g, dout, N, PRT_FP32, next, 7) == PRT_OK;
            ok &= prt_recv(g, din, N, PRT_FP32, prev, 7) == PRT_OK;
        } else {
            ok &= prt_recv(g, din, N, PRT_FP32, prev, 7) == PRT_OK;
            ok &= prt_send(g, dout, N, PRT_FP32, next, 7) == PRT_OK;
        }
        ok &= prt_comm_download(in, din, N * sizeof(float)) == PRT_OK;
        for (int i = 0; i < N; i++)
            ok &= in[i] == (float)(prev * 1000 + i % 997);
    }
    record(ok, "p2p blocking ring");
    check_p2p_group(g, dout, din, N, TAGS);
    if (prt_comm_p2p_mode() == PRT_P2P_RENDEZVOUS) {
        /* NCCL has no tags: receives posted in reverse order would match
         * the wrong messages (checked by check_p2p_order instead) */
        check_p2p_order(g, dout, din, N);
        prt_comm_free(dout);
        prt_comm_free(din);
        free(out);
        free(in);
        return;
    }
    ok = true;
    if (P > 1) {
        prt_request *rq[2 * TAGS];
        for (int tag = 0; tag < TAGS; tag++)
            ok &= prt_send_async(g, dout + tag * N, N, PRT_FP32, next, tag, &rq[tag]) == PRT_OK;
        for (int tag = TAGS - 1; tag >= 0; tag--)
            ok &= prt_recv_async(g, din + tag * N, N, PRT_FP32, prev, tag,
                                 &rq[TAGS + tag]) == PRT_OK;
        ok &= prt_wait_all(rq, 2 * TAGS) == PRT_OK;
        ok &= prt_comm_download(in, din, bytes) == PRT_OK;
        for (int i = 0; i < TAGS * N; i++)
            ok &= in[i] == (float)(prev * 1000 + i % 997);
    }
    record(ok, "p2p async, %d tags in flight", TAGS);
    prt_comm_free(dout);
    prt_comm_free(din);
    free(out);
    free(in);
}

/* Several own-algorithm collectives in flight on one group at once. */
static void check_overlap(prt_ctx *c)
{
    prt_comm *g = c->world;
    const int P = prt_comm_size(g), r = prt_comm_rank(g);
    enum { N = 5003, K = 3 };
    prt_algo algos[K] = { PRT_ALGO_RING, PRT_ALGO_TREE, PRT_ALGO_NATIVE };
    float *x = malloc(K * N * sizeof(float)), *dx = prt_comm_alloc(K * N * sizeof(float));
    prt_request *rq[K];
    for (int k = 0; k < K; k++)
        for (int i = 0; i < N; i++)
            x[k * N + i] = (float)(r + k + i % 13);
    bool ok = dx && prt_comm_upload(dx, x, K * N * sizeof(float)) == PRT_OK;
    for (int k = 0; k < K; k++) {
        prt_comm_set_algo(g, algos[k]);
        ok &= prt_all_reduce_async(g, dx + k * N, dx + k * N, N, PRT_FP32, PRT_SUM, &rq[k]) == PRT_OK;
    }
    prt_comm_set_algo(g, PRT_ALGO_NATIVE);
    for (int k = K - 1; k >= 0; k--)
        ok &= prt_wait(rq[k]) == PRT_OK;
    ok &= prt_comm_download(x, dx, K * N * sizeof(float)) == PRT_OK;
    for (int k = 0; k < K; k++)
        for (int i = 0; i < N; i++)
            ok &= x[k * N + i] == (float)(P * (P - 1) / 2 + P * (k + i % 13));
    record(ok, "3 all-reduces in flight (ring, tree, native), waited in reverse");
    prt_comm_free(dx);
    free(x);
}

/* ---- the uneven all-to-all (MoE dispatch/combine) --------------------------
 * Count patterns: what rank i sends to rank j. Each has zeros somewhere
 * except "uneven" on few ranks; "one sender" leaves most ranks silent and
 * "big" crosses MPI's eager limit. ORDER A2AV_PATTERN. */
enum { A2AV_UNEVEN, A2AV_ZEROS, A2AV_ALL_ZERO, A2AV_ONE_SENDER, A2AV_BIG, A2AV_COUNT };
static const char *const a2av_name[A2AV_COUNT] = {
    "uneven", "zeros", "all zero", "one sender", "big" };

static size_t a2av_count(int pattern, int i, int j)
{
    switch (pattern) {
    case A2AV_UNEVEN:     return (size_t)((i * 3 + j * 5) % 7);
    case A2AV_ZEROS:      return (i + j) % 3 == 0 ? 0 : (size_t)(i + 2 * j + 1);
    case A2AV_ONE_SENDER: return i == 0 ? (size_t)(j + 1) * 3 : 0;
    case A2AV_BIG:        return (size_t)(50003 + 7 * i - 3 * j);
    default:              return 0;
    }
}

/* Element e of what rank i sends to rank j: a small integer (exact in bf16). */
static double a2av_val(int i, int j, size_t e)
{
    return (double)((int)((e * 5 + (size_t)i * 11 + (size_t)j * 3) % 13) - 6);
}

/* Counts first (prt_all_to_all_counts), then the rows, checked element by
 * element on every rank: every pattern x type x blocking/async. */
static void check_all_to_all_v(prt_ctx *c)
{
    prt_comm *g = c->world;
    const int P = prt_comm_size(g), r = prt_comm_rank(g);
    const prt_dtype types[] = { PRT_FP32, PRT_BF16, PRT_INT32 };
    size_t *sc = malloc((size_t)P * sizeof *sc), *rc = malloc((size_t)P * sizeof *rc);
    for (int pat = 0; pat < A2AV_COUNT; pat++) {
        size_t ns = 0, nr = 0;
        bool counts_ok = true;
        for (int j = 0; j < P; j++)
            ns += sc[j] = a2av_count(pat, r, j);
        counts_ok &= prt_all_to_all_counts(g, sc, rc) == PRT_OK;
        for (int i = 0; i < P; i++) {
            counts_ok &= rc[i] == a2av_count(pat, i, r);
            nr += rc[i];
        }
        record(counts_ok, "all_to_all_counts %s", a2av_name[pat]);
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
            for (int async = 0; async < 2; async++) {
                prt_dtype t = types[ti];
                size_t es = prt_dtype_size(t);
                char *hs = malloc(ns * es + 1), *hr = malloc(nr * es + 1);
                void *ds = prt_comm_alloc(ns * es + 1), *dr = prt_comm_alloc(nr * es + 1);
                for (int j = 0, off = 0; j < P; off += (int)sc[j], j++)
                    for (size_t e = 0; e < sc[j]; e++)
                        put(hs, (size_t)off + e, t, a2av_val(r, j, e));
                memset(hr, 0x7f, nr * es + 1);
                bool ok = ds && dr && prt_comm_upload(ds, hs, ns * es) == PRT_OK &&
                          prt_comm_upload(dr, hr, nr * es) == PRT_OK;
                prt_request *req = NULL;
                ok = ok && (async ? prt_all_to_all_v_async(g, ds, sc, dr, rc, t, &req) == PRT_OK &&
                                    finish(req) == PRT_OK
                                  : prt_all_to_all_v(g, ds, sc, dr, rc, t) == PRT_OK);
                ok = ok && prt_comm_download(hr, dr, nr * es) == PRT_OK;
                long bad = -1;
                for (int i = 0, off = 0; ok && i < P; off += (int)rc[i], i++)
                    for (size_t e = 0; e < rc[i] && bad < 0; e++)
                        if (get(hr, (size_t)off + e, t) != a2av_val(i, r, e))
                            bad = off + (long)e;
                record(ok && bad < 0, "all_to_all_v %s %s %s (%zu in, %zu out; first bad %ld)",
                       a2av_name[pat], type_name[t], async ? "async" : "blocking", nr, ns, bad);
                prt_comm_free(ds);
                prt_comm_free(dr);
                free(hs);
                free(hr);
            }
    }
    /* no in-place form: overlapping buffers are refused, saying so */
    for (int j = 0; j < P; j++)
        sc[j] = rc[j] = 2;
    float *buf = prt_comm_alloc(4 * (size_t)P * sizeof *buf);
    prt_status s = prt_all_to_all_v(g, buf, sc, buf + 1, rc, PRT_FP32);
    record(s == PRT_ERR_ARG && strstr(prt_comm_last_error(), "overlap"),
           "error: all_to_all_v with overlapping buffers");
    s = prt_all_to_all_v(g, buf, sc, buf + 2 * P, NULL, PRT_FP32);
    record(s == PRT_ERR_ARG && strstr(prt_comm_last_error(), "NULL"),
           "error: all_to_all_v without recvcounts");
    prt_comm_free(buf);
    free(sc);
    free(rc);
}

/* A group of one rank: every operation x mode x reduction (PRT_AVG the
 * identity) x algorithm, blocking with and without a deadline, gives the
 * input back — the same checks as on any group — and makes no MPI call;
 * its _async forms hand back a NULL request, complete; its all-to-all-v
 * copies the own block, and refuses counts that disagree. */
static void check_alone(prt_comm *g)
{
    static const prt_algo algos[] = { PRT_ALGO_NATIVE, PRT_ALGO_RING, PRT_ALGO_TREE };
    static const prt_dtype types[] = { PRT_FP32, PRT_BF16, PRT_INT32 };
    static const size_t counts[] = { 0, 7, 1003 };
    char why[256];
    int salt = 0;
    for (top k = 0; k < T_COUNT; k++)
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
            for (prt_redop op = PRT_SUM; op <= (reduces(k) ? PRT_MIN : PRT_SUM); op++)
                for (size_t a = 0; a < 3; a++)
                    for (int m = 0; m < M_COUNT; m++)
                        for (size_t c = 0; c < 3; c++)
                            for (int deadline = 0; deadline < 2; deadline++) {
                                if (deadline && m == M_ASYNC)
                                    continue;   /* a deadline changes blocking calls only */
                                double old = prt_comm_set_timeout(deadline ? 30 : 0);
                                prt_comm_set_algo(g, algos[a]);
                                why[0] = '\0';
                                long before = mpi_calls;
                                bool ok = run_case(g, k, types[ti], op, m, counts[c], 0, ++salt,
                                                   why, sizeof why);
                                long made = mpi_calls - before;
                                prt_comm_set_timeout(old);
                                record(ok && made == 0, "one-rank group: %s %s %s %s %s%s "
                                       "n=%zu (%ld MPI calls)", top_name[k],
                                       type_name[types[ti]], reduces(k) ? prt_redop_name(op) : "-",
                                       prt_algo_name(algos[a]), mode_name[m],
                                       deadline ? " deadline" : "", counts[c], made);
                                if (!ok || made)
                                    fprintf(stderr, "rank %d: FAIL %s: %s\n", world_rank,
                                            names[ncases - 1], why);
                            }
    prt_comm_set_algo(g, PRT_ALGO_NATIVE);

    /* async: the request is NULL and prt_test/prt_wait take it as done */
    float *x = prt_comm_alloc(16 * sizeof *x);
    prt_request *rq = (prt_request *)x;   /* anything but NULL */
    bool done = false;
    long before = mpi_calls;
    bool ok = x && prt_all_reduce_async(g, x, x, 16, PRT_FP32, PRT_AVG, &rq) == PRT_OK &&
              rq == NULL && prt_test(rq, &done) == PRT_OK && done && prt_wait(rq) == PRT_OK &&
              prt_barrier_async(g, &rq) == PRT_OK && rq == NULL && prt_barrier(g) == PRT_OK;
    record(ok && mpi_calls == before, "one-rank group: _async gives a NULL request, complete; "
           "barriers free");

    /* all-to-all-v: the own block, blocking and async; unequal counts refused */
    size_t sc = 5, rc = 0;
    float h[10] = { 1, -2, 3, -4, 5 }, back[5];
    prt_request *req = NULL;
    ok = prt_all_to_all_counts(g, &sc, &rc) == PRT_OK && rc == 5 &&
         prt_comm_upload(x, h, 5 * sizeof *h) == PRT_OK &&
         prt_all_to_all_v(g, x, &sc, x + 8, &rc, PRT_FP32) == PRT_OK &&
         prt_all_to_all_v_async(g, x, &sc, x + 8, &rc, PRT_FP32, &req) == PRT_OK && !req &&
         prt_comm_download(back, x + 8, sizeof back) == PRT_OK &&
         memcmp(back, h, sizeof back) == 0;
    record(ok && mpi_calls == before, "one-rank group: all_to_all_counts and all_to_all_v copy the own block");
    rc = 4;
    prt_status s = prt_all_to_all_v(g, x, &sc, x + 8, &rc, PRT_FP32);
    record(s == PRT_ERR_ARG && strstr(prt_comm_last_error(), "expects 4"),
           "one-rank group: all_to_all_v with unequal own counts refused");
    prt_comm_free(x);
}

/* prtc_agree: with the last rank failing (and rank 0 too, with another
 * status), every rank returns the first failure's status and message;
 * with none failing, PRT_OK everywhere. */
static void check_agree(void)
{
    const int last = world_size - 1;
    prtc_clear_error();
    prt_status s = prtc_agree(MPI_COMM_WORLD, PRT_OK);
    record(s == PRT_OK, "prtc_agree: nobody failed, all go on");
    prt_status mine = PRT_OK;
    if (world_rank == last)
        mine = prtc_error(PRT_ERR_CUDA, NULL, "rank %d: no id (a test)", world_rank);
    s = prtc_agree(MPI_COMM_WORLD, mine);
    char want[64];
    snprintf(want, sizeof want, "rank %d: no id (a test)", last);
    record(s == PRT_ERR_CUDA && strcmp(prt_comm_last_error(), want) == 0,
           "prtc_agree: the last rank failed, every rank fails with its message");
    if (world_rank == 0)
        mine = prtc_error(PRT_ERR_ARG, NULL, "rank 0 first");
    s = prtc_agree(MPI_COMM_WORLD, mine);
    record(s == PRT_ERR_ARG && strcmp(prt_comm_last_error(), "rank 0 first") == 0,
           "prtc_agree: two failed, the first one's status and message everywhere");
    prtc_clear_error();
}

/* What a caller must be told, not silently given. */
static void check_errors(prt_ctx *c)
{
    prt_comm *g = c->world;
    const int P = prt_comm_size(g);
    float buf[16] = { 0 };
    prt_status s = prt_broadcast(g, buf, 4, PRT_FP32, P);
    record(s == PRT_ERR_ARG && strstr(prt_comm_last_error(), "root"), "error: root out of range");
    s = prt_all_reduce(g, buf, buf + 1, 4, PRT_FP32, PRT_SUM);
    record(s == PRT_ERR_ARG && strstr(prt_comm_last_error(), "overlap"),
           "error: overlapping all-reduce buffers");
    s = prt_all_reduce(g, buf, buf + 8, (size_t)1 << 31, PRT_FP32, PRT_SUM);
    record(s == PRT_ERR_ARG, "error: count beyond 2^31-1");
    s = prt_send(g, buf, 1, PRT_FP32, 0, -1);
    record(s == PRT_ERR_ARG, "error: negative tag");
    s = prt_all_reduce(g, buf, buf + 8, 4, PRT_FP32, (prt_redop)9);
    record(s == PRT_ERR_ARG, "error: unknown reduction");
    s = prt_barrier(g);
    record(s == PRT_OK, "barrier");
    prt_request *rq;
    s = prt_barrier_async(g, &rq);
    record(s == PRT_OK && prt_wait(rq) == PRT_OK, "barrier async");
    /* A receive whose sender never sends times out instead of hanging;
     * then the message is sent (to self) so the abandoned receive ends.
     * (Not on NCCL: the stuck receive would block its stream for good.) */
    bool mpi = strcmp(prt_comm_backend(), "mpi") == 0;
    float *d = prt_comm_alloc(sizeof(float));
    if (mpi) {
        double old = prt_comm_set_timeout(0.3);
        double t0 = MPI_Wtime();
        s = prt_recv(g, d, 1, PRT_FP32, prt_comm_rank(g), 999);
        double waited = MPI_Wtime() - t0;
        prt_comm_set_timeout(old);
        record(s == PRT_ERR_TIMEOUT && waited >= 0.3 && waited < 5 &&
               strstr(prt_comm_last_error(), "PLANRT_TIMEOUT_S"),
               "timeout: a receive nobody answers");
        if (s == PRT_ERR_TIMEOUT)
            prt_send(g, d, 1, PRT_FP32, prt_comm_rank(g), 999);
    }
    prt_comm_free(d);
    size_t off, cnt, sum = 0;
    bool ok = true;
    for (int i = 0; i < 5; i++) {
        prt_shard(13, 5, i, &off, &cnt);
        ok &= off == sum && cnt == (i < 3 ? 3u : 2u);
        sum += cnt;
    }
    record(ok && sum == 13, "prt_shard splits 13 over 5 as 3 3 3 2 2");
}

int main(int argc, char **argv)
{
    /* A layout that does not match the world size is refused clearly. */
    prt_ctx *bad = NULL;
    prt_status s0 = prt_init(&argc, &argv, 1, 1, 1000, &bad);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    record(s0 == PRT_ERR_ARG && !bad && strstr(prt_comm_last_error(), "1000"),
           "error: world size != dp*tp*pp");

    prt_ctx *c;
    prt_status s = prt_init(&argc, &argv, world_size, 1, 1, &c);
    if (s != PRT_OK) {
        /* The CUDA build on a machine without a GPU ends here, on purpose:
         * 77 is the conventional "skipped" status. */
        fprintf(stderr, "test_comm: prt_init: %s\n", prt_comm_last_error());
        prt_finalize(NULL);
        return s == PRT_ERR_CUDA ? 77 : 1;
    }
    double t0 = MPI_Wtime();
    check_agree();
    check_alone(c->tp);   /* tp 1 */
    check_errors(c);
    check_p2p(c);
    check_overlap(c);
    check_all_to_all_v(c);
    sweep(c->world, "world", true, true);
    for (int dp = 1; dp <= world_size; dp++)
        for (int tp = 1; tp <= world_size / dp; tp++)
            if (world_size % (dp * tp) == 0)
                check_layout(dp, tp, world_size / (dp * tp));

    /* A case failed if it failed anywhere. */
    static unsigned char any[MAX_CASES];
    int n = ncases;
    MPI_Reduce(failed, any, n, MPI_UNSIGNED_CHAR, MPI_MAX, 0, MPI_COMM_WORLD);
    int nfail = 0;
    if (world_rank == 0) {
        for (int i = 0; i < n; i++)
            if (any[i]) {
                if (nfail++ < 20)
                    fprintf(stderr, "FAIL: %s\n", names[i]);
            }
        fprintf(stderr, "test_comm on %d ranks (%s): %.1f s\n", world_size, prt_comm_backend(),
                MPI_Wtime() - t0);
        printf("%d passed, %d failed\n", n - nfail, nfail);
    }
    MPI_Bcast(&nfail, 1, MPI_INT, 0, MPI_COMM_WORLD);
    prt_finalize(c);
    return nfail ? 1 : 0;
}
