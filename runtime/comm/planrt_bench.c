/*
 * planrt_bench.c: planrt-bench, a collective benchmark modelled on
 * nccl-tests (github.com/NVIDIA/nccl-tests), so its numbers read the same:
 *
 *   mpirun -np 4 build/bin/planrt-bench -c allreduce -b 1K -e 64M -f 4 \
 *                                        -a mpi-raw,native,ring,tree
 *
 * For each collective, message size and algorithm it times -n iterations
 * (after -w warm-up ones) and prints
 *
 *   size  count  type  time(us)  algbw(GB/s)  busbw(GB/s)  #wrong
 *
 * time is the mean time of one call, the maximum over ranks (the slowest
 * rank finishes the collective); with several algorithms their batches of
 * calls alternate (time_algos) so that varying load hits them alike.  algbw = size / time.  busbw = algbw x
 * the nccl-tests factor (docs/PERFORMANCE.md), which makes the number
 * comparable with the hardware link bandwidth whatever the rank count:
 *
 *   all-reduce 2(P-1)/P, reduce-scatter and all-gather (P-1)/P,
 *   all-to-all (P-1)/P, broadcast and reduce 1.
 *
 * size follows nccl-tests too: the whole buffer for all-reduce, broadcast
 * and reduce; the whole output of all-gather; the whole input of
 * reduce-scatter; one rank's send buffer for all-to-all.  #wrong is the
 * number of wrong elements, over all ranks, of one checked call on known
 * inputs.  "mpi-raw" calls MPI directly (no planrt) as the reference; with
 * several algorithms the sizes are interleaved (each size runs every
 * algorithm in turn, so load from other processes hits them alike) and the
 * last line gives each algorithm's busbw at the largest size as a ratio to
 * mpi-raw's.  All ranks must be started with the same arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planrt.h"
#include "runtime/comm/comm_internal.h"

/* The collectives. ORDER BENCH_COLL: keep the tables below in step. */
typedef enum { B_ALLREDUCE, B_ALLGATHER, B_REDUCESCATTER, B_BROADCAST, B_REDUCE,
               B_ALLTOALL, B_NCOLL } bcoll;
static const char *const bcoll_name[B_NCOLL] = {
    "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall" };

/* busbw / algbw for P ranks (nccl-tests, docs/PERFORMANCE.md). */
static double bus_factor(bcoll k, int P)
{
    switch (k) {
    case B_ALLREDUCE:                                   return 2.0 * (P - 1) / P;
    case B_ALLGATHER: case B_REDUCESCATTER: case B_ALLTOALL: return (double)(P - 1) / P;
    case B_BROADCAST: case B_REDUCE: case B_NCOLL:      return 1.0;
    }
    return 1.0;
}

enum { ALGO_RAW = -2 };   /* beside prt_algo: MPI without planrt */
#define MAX_ALGOS 4

typedef struct {
    bcoll     colls[B_NCOLL];
    int       ncoll;
    int       algos[MAX_ALGOS];
    int       nalgo;
    size_t    min_bytes, max_bytes;
    double    factor;
    int       iters, warmup;
    prt_dtype type;
    prt_redop op;
    bool      in_place, check;
} options;

static int P, me;

static void usage(void)
{
    if (me == 0)
        fprintf(stderr,
            "usage: mpirun -np N planrt-bench [-c allreduce|allgather|reducescatter|broadcast|\n"
            "         reduce|alltoall|all] [-b MIN] [-e MAX] [-f FACTOR] [-a ALGO[,ALGO...]]\n"
            "         [-d fp32|fp16|bf16|int32|int64] [-o sum|avg|max|min] [-n ITERS]\n"
            "         [-w WARMUP] [-p 0|1 in place] [-k 0|1 check]\n"
            "  ALGO: native, ring, tree, mpi-raw (MPI without planrt)\n"
            "  sizes take K, M, G suffixes (powers of 1024)\n");
}

/* "64M" -> 67108864. */
static bool parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double m = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
             : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
    if (end == s || v < 0 || (m > 1 && end[1]) || (m == 1 && *end))
        return false;
    *out = (size_t)(v * m);
    return true;
}

static bool parse_algos(char *s, options *o)
{
    o->nalgo = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        prt_algo a;
        if (o->nalgo == MAX_ALGOS)
            return false;
        if (strcmp(tok, "mpi-raw") == 0)
            o->algos[o->nalgo++] = ALGO_RAW;
        else if (prt_algo_parse(tok, &a) == PRT_OK)
            o->algos[o->nalgo++] = a;
        else
            return false;
    }
    return o->nalgo > 0;
}

static bool parse_args(int argc, char **argv, options *o)
{
    static const char *const types[] = { "fp32", "fp16", "bf16", "int32", "int64" };
    *o = (options){ .colls = { B_ALLREDUCE }, .ncoll = 1, .algos = { PRT_ALGO_NATIVE },
                    .nalgo = 1, .min_bytes = 1024, .max_bytes = 64u << 20, .factor = 4,
                    .iters = 20, .warmup = 3, .type = PRT_FP32, .op = PRT_SUM, .check = true };
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v || f[0] != '-' || !f[1] || f[2])
            return false;
        i++;
        switch (f[1]) {
        case 'c':
            o->ncoll = 0;
            for (int k = 0; k < B_NCOLL; k++)
                if (strcmp(v, "all") == 0 || strcmp(v, bcoll_name[k]) == 0)
                    o->colls[o->ncoll++] = (bcoll)k;
            if (!o->ncoll)
                return false;
            break;
        case 'b': if (!parse_size(v, &o->min_bytes)) return false; break;
        case 'e': if (!parse_size(v, &o->max_bytes)) return false; break;
        case 'f': o->factor = atof(v); if (o->factor <= 1) return false; break;
        case 'n': o->iters = atoi(v); if (o->iters < 1) return false; break;
        case 'w': o->warmup = atoi(v); if (o->warmup < 0) return false; break;
        case 'p': o->in_place = atoi(v) != 0; break;
        case 'k': o->check = atoi(v) != 0; break;
        case 'a': {
            char buf[128];
            snprintf(buf, sizeof buf, "%s", v);
            if (!parse_algos(buf, o)) return false;
            break;
        }
        case 'd': {
            int t = -1;
            for (int k = 0; k < 5; k++)
                if (strcmp(v, types[k]) == 0)
                    t = k;
            if (t < 0) return false;
            o->type = (prt_dtype)t;
            break;
        }
        case 'o': {
            int op = -1;
            for (int k = PRT_SUM; k <= PRT_MIN; k++)
                if (strcmp(v, prt_redop_name((prt_redop)k)) == 0)
                    op = k;
            if (op < 0) return false;
            o->op = (prt_redop)op;
            break;
        }
        default:
            return false;
        }
    }
    return o->min_bytes <= o->max_bytes;
}

static const char *type_name(prt_dtype t)
{
    static const char *const n[] = { "fp32", "fp16", "bf16", "int32", "int64" };
    return n[t];
}

static const char *algo_label(int a) { return a == ALGO_RAW ? "mpi-raw" : prt_algo_name((prt_algo)a); }

/* ORDER BENCH_COLL: the library's name for each collective. */
static const coll_kind bcoll_kind[B_NCOLL] = {
    COLL_ALL_REDUCE, COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_BROADCAST, COLL_REDUCE,
    COLL_ALL_TO_ALL };

/* What actually runs: planrt falls back to native where it has no own
 * variant, and the header says so. */
static const char *runs_as(bcoll k, int a)
{
    if (a == ALGO_RAW || a == PRT_ALGO_NATIVE || prtc_algo_exists(bcoll_kind[k], (prt_algo)a))
        return "";
    return " (no own variant: runs native)";
}

/* ---- one call ------------------------------------------------------------ */

/* Elements per rank (n) and the buffers' lengths for a size in bytes. */
typedef struct { size_t n, send, recv, bytes; } shape;

static shape shape_of(bcoll k, size_t bytes, size_t es)
{
    size_t total = bytes / es, per = total / (size_t)P;
    switch (k) {
    case B_ALLGATHER:     return (shape){ per, per, per * P, per * P * es };
    case B_REDUCESCATTER: return (shape){ per, per * P, per, per * P * es };
    case B_ALLTOALL:      return (shape){ per, per * P, per * P, per * P * es };
    default:              return (shape){ total, total, total, total * es };
    }
}

static MPI_Datatype raw_type(prt_dtype t)
{
    return t == PRT_FP32 ? MPI_FLOAT : t == PRT_INT32 ? MPI_INT32_T
         : t == PRT_INT64 ? MPI_INT64_T : MPI_DATATYPE_NULL;
}

/* The collective through MPI alone: the reference. */
static int raw_call(bcoll k, const options *o, void *sb, void *rb, size_t n)
{
    MPI_Datatype dt = raw_type(o->type);
    MPI_Op op = o->op == PRT_MAX ? MPI_MAX : o->op == PRT_MIN ? MPI_MIN : MPI_SUM;
    const void *s = o->in_place ? MPI_IN_PLACE : sb;
    int c = (int)n;
    switch (k) {
    case B_ALLREDUCE:     return MPI_Allreduce(s, rb, c, dt, op, MPI_COMM_WORLD);
    case B_ALLGATHER:     return MPI_Allgather(s, c, dt, rb, c, dt, MPI_COMM_WORLD);
    case B_REDUCESCATTER: /* MPI's in place differs from NCCL's: always out of place */
        return MPI_Reduce_scatter_block(sb, rb, c, dt, op, MPI_COMM_WORLD);
    case B_BROADCAST:     return MPI_Bcast(rb, c, dt, 0, MPI_COMM_WORLD);
    case B_REDUCE:        return MPI_Reduce(me == 0 ? s : sb, rb, c, dt, op, 0, MPI_COMM_WORLD);
    case B_ALLTOALL:      return MPI_Alltoall(s, c, dt, rb, c, dt, MPI_COMM_WORLD);
    case B_NCOLL:         break;
    }
    return MPI_ERR_OTHER;
}

/* The collective through planrt.  In place follows NCCL: the rank's block
 * of the big buffer for the block collectives, the same buffer otherwise. */
static prt_status prt_call(prt_comm *g, bcoll k, const options *o, void *sb, void *rb, size_t n)
{
    const size_t es = prt_dtype_size(o->type);
    const int r = prt_comm_rank(g);
    switch (k) {
    case B_ALLREDUCE:
        return prt_all_reduce(g, o->in_place ? rb : sb, rb, n, o->type, o->op);
    case B_ALLGATHER:
        return prt_all_gather(g, o->in_place ? (char *)rb + (size_t)r * n * es : sb, rb, n, o->type);
    case B_REDUCESCATTER:
        return prt_reduce_scatter(g, sb, o->in_place ? (char *)sb + (size_t)r * n * es : rb, n,
                                  o->type, o->op);
    case B_BROADCAST:
        return prt_broadcast(g, rb, n, o->type, 0);
    case B_REDUCE:
        return prt_reduce(g, o->in_place ? rb : sb, rb, n, o->type, o->op, 0);
    case B_ALLTOALL:
        return prt_all_to_all(g, o->in_place ? rb : sb, rb, n, o->type);
    case B_NCOLL:
        break;
    }
    return PRT_ERR_ARG;
}

static bool call(prt_comm *g, int algo, bcoll k, const options *o, void *sb, void *rb, size_t n)
{
    if (algo == ALGO_RAW)
        return raw_call(k, o, sb, rb, n) == MPI_SUCCESS;
    prt_comm_set_algo(g, (prt_algo)algo);
    prt_status s = prt_call(g, k, o, sb, rb, n);
    if (s != PRT_OK)
        fprintf(stderr, "planrt-bench: %s\n", prt_comm_last_error());
    return s == PRT_OK;
}

/* ---- checking ------------------------------------------------------------- */

/* Input element i of rank r: a small integer, exact in every type. */
static double input(int r, size_t i) { return (double)((r + (int)(i % 7)) % 5); }

static void put(void *b, size_t i, prt_dtype t, double v)
{
    switch (t) {
    case PRT_FP32:  ((float *)b)[i] = (float)v; break;
    case PRT_FP16:  ((uint16_t *)b)[i] = prtc_float_to_half((float)v); break;
    case PRT_BF16:  ((uint16_t *)b)[i] = prtc_float_to_bf16((float)v); break;
    case PRT_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
    case PRT_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
    }
}

static double get(const void *b, size_t i, prt_dtype t)
{
    switch (t) {
    case PRT_FP32:  return ((const float *)b)[i];
    case PRT_FP16:  return prtc_half_to_float(((const uint16_t *)b)[i]);
    case PRT_BF16:  return prtc_bf16_to_float(((const uint16_t *)b)[i]);
    case PRT_INT32: return ((const int32_t *)b)[i];
    case PRT_INT64: return (double)((const int64_t *)b)[i];
    }
    return NAN;
}

/* op over all ranks of input(., i). */
static double reduced(const options *o, size_t i)
{
    double a = input(0, i);
    for (int j = 1; j < P; j++) {
        double v = input(j, i);
        a = o->op == PRT_MAX ? fmax(a, v) : o->op == PRT_MIN ? fmin(a, v) : a + v;
    }
    if (o->op == PRT_AVG)
        a = o->type >= PRT_INT32 ? (double)((long long)a / P) : a / P;
    return a;
}

/* Expected element i of this rank's result, or NAN where nothing is due. */
static double expected(bcoll k, const options *o, size_t n, size_t i)
{
    switch (k) {
    case B_ALLREDUCE:     return reduced(o, i);
    case B_REDUCE:        return me == 0 ? reduced(o, i) : NAN;
    case B_BROADCAST:     return input(0, i);
    case B_ALLGATHER:     return input((int)(i / n), i % n);
    case B_REDUCESCATTER: return reduced(o, (size_t)me * n + i);
    case B_ALLTOALL:      return input((int)(i / n), (size_t)me * n + i % n);
    case B_NCOLL:         break;
    }
    return NAN;
}

/* One call on known inputs; returns the wrong elements summed over ranks. */
static long check(prt_comm *g, int algo, bcoll k, const options *o, void *sb, void *rb,
                  shape sh)
{
    const prt_dtype t = o->type;
    const size_t es = prt_dtype_size(t);
    void *hs = malloc(sh.send * es + 1), *hr = malloc(sh.recv * es + 1);
    for (size_t i = 0; i < sh.send; i++)
        put(hs, i, t, input(me, i));
    for (size_t i = 0; i < sh.recv; i++)
        put(hr, i, t, k == B_BROADCAST && me == 0 ? input(0, i) : -1);
    /* In place, the input lives in the result buffer. */
    if (o->in_place && (k == B_ALLREDUCE || k == B_REDUCE || k == B_ALLTOALL))
        memcpy(hr, hs, sh.send * es);
    if (o->in_place && k == B_ALLGATHER)
        memcpy((char *)hr + (size_t)me * sh.n * es, hs, sh.n * es);
    prt_comm_upload(sb, hs, sh.send * es);
    prt_comm_upload(rb, hr, sh.recv * es);
    long wrong = 0;
    if (!call(g, algo, k, o, sb, rb, sh.n))
        wrong = (long)sh.recv + 1;
    const void *res = rb;
    size_t len = sh.recv;
    if (k == B_REDUCESCATTER && o->in_place && algo != ALGO_RAW)  /* in my block of sendbuf */
        prt_comm_download(hs, sb, sh.send * es), res = (char *)hs + (size_t)me * sh.n * es;
    else
        prt_comm_download(hr, rb, sh.recv * es), res = hr;
    static const double tol[] = { 1e-6, 2e-3, 1.6e-2, 0, 0 };  /* ORDER PRT_DTYPE */
    for (size_t i = 0; wrong == 0 && i < len; i++) {
        double w = expected(k, o, sh.n, i), x = get(res, i, t);
        if (!isnan(w) && !(fabs(x - w) <= tol[t] * (1 + fabs(w))))
            wrong++;
    }
    free(hs);
    free(hr);
    long all = 0;
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

/* ---- timing --------------------------------------------------------------- */

/* Seconds for `calls` back-to-back calls, until the device has finished
 * them, the slowest rank's; negative on failure. */
static double time_batch(prt_comm *g, int algo, bcoll k, const options *o, void *sb, void *rb,
                         size_t n, int calls)
{
    /* prt_barrier waits for this rank's queued device work before its host
     * barrier (on NCCL, native calls only enqueue): the clock starts after
     * the warm-up has finished and stops after the last call has. */
    bool ok = prt_barrier(g) == PRT_OK;
    double t0 = MPI_Wtime();
    for (int i = 0; i < calls && ok; i++)
        ok = call(g, algo, k, o, sb, rb, n);
    if (ok && prt_barrier(g) != PRT_OK) {
        fprintf(stderr, "planrt-bench: %s\n", prt_comm_last_error());
        ok = false;
    }
    double t = MPI_Wtime() - t0, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int bad = !ok, anybad;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return anybad ? -1 : tmax;
}

/* Mean seconds per call of each algorithm at one size.  The iterations run
 * in up to 5 rounds, each giving every algorithm a batch in turn (a
 * different one first each round), so that load from other processes,
 * which comes and goes, falls on all alike. */
static void time_algos(prt_comm *g, bcoll k, const options *o, void *sb, void *rb, size_t n,
                       const bool *skip, double *t)
{
    int rounds = o->iters < 5 ? o->iters : 5, done = 0;
    for (int a = 0; a < o->nalgo; a++) {
        t[a] = 0;
        for (int i = 0; i < o->warmup && !skip[a]; i++)
            if (!call(g, o->algos[a], k, o, sb, rb, n))
                t[a] = -1;
    }
    for (int round = 0; round < rounds; round++) {
        int calls = (o->iters - done) / (rounds - round);
        for (int j = 0; j < o->nalgo; j++) {
            int a = (j + round) % o->nalgo;   /* rotate who goes first */
            if (skip[a] || t[a] < 0)
                continue;
            double s = time_batch(g, o->algos[a], k, o, sb, rb, n, calls);
            t[a] = s < 0 ? -1 : t[a] + s;
        }
        done += calls;
    }
    for (int a = 0; a < o->nalgo; a++)
        if (t[a] > 0)
            t[a] /= o->iters;
}

typedef struct { size_t bytes, count; double us, algbw, busbw; long wrong; } row;

/* Run one collective over every size and algorithm, print a table per
 * algorithm; returns the wrong elements (or failed calls), and busbw at the
 * largest size per algorithm in last[]. */
static long bench_coll(prt_comm *g, bcoll k, const options *o, double *last, size_t *last_bytes)
{
    const size_t es = prt_dtype_size(o->type);
    int nsizes = 0;
    for (double b = (double)o->min_bytes; b <= (double)o->max_bytes; b *= o->factor)
        nsizes++;
    row *rows = calloc((size_t)nsizes * o->nalgo, sizeof *rows);
    shape big = shape_of(k, o->max_bytes, es);
    size_t sbytes = (big.send ? big.send : 1) * es, rbytes = (big.recv ? big.recv : 1) * es;
    void *sb = prt_comm_alloc(sbytes), *rb = prt_comm_alloc(rbytes);
    if (!rows || !sb || !rb) {
        if (me == 0)
            fprintf(stderr, "planrt-bench: out of memory for %zu bytes\n", sbytes + rbytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Touch the buffers once so page faults are not timed. */
    void *z = calloc(1, sbytes > rbytes ? sbytes : rbytes);
    prt_comm_upload(sb, z, sbytes);
    prt_comm_upload(rb, z, rbytes);
    free(z);
    int si = 0;
    long wrong = 0;
    for (double b = (double)o->min_bytes; si < nsizes; b *= o->factor, si++) {
        shape sh = shape_of(k, (size_t)b, es);
        bool skip[MAX_ALGOS];
        double times[MAX_ALGOS];
        for (int a = 0; a < o->nalgo; a++)   /* raw MPI: host memory, MPI's types, no avg */
            skip[a] = o->algos[a] == ALGO_RAW && (raw_type(o->type) == MPI_DATATYPE_NULL ||
                                                  o->op == PRT_AVG ||
                                                  strcmp(prt_comm_backend(), "mpi") != 0);
        time_algos(g, k, o, sb, rb, sh.n, skip, times);
        for (int a = 0; a < o->nalgo; a++) {
            row *w = &rows[(size_t)a * nsizes + si];
            w->bytes = sh.bytes;
            w->count = sh.bytes / es;
            if (skip[a]) {
                w->us = -1;
                continue;
            }
            double t = times[a];
            w->wrong = o->check ? check(g, o->algos[a], k, o, sb, rb, sh) : 0;
            w->us = t < 0 ? -1 : t * 1e6;
            wrong += w->wrong + (t < 0);
            w->algbw = t > 0 ? (double)sh.bytes / t / 1e9 : 0;
            w->busbw = w->algbw * bus_factor(k, P);
        }
    }
    for (int a = 0; a < o->nalgo && me == 0; a++) {
        printf("#\n# %s, %d ranks, backend %s, algorithm %s%s, %s %s, %s, %d iterations (%d warm-up)\n",
               bcoll_name[k], P, o->algos[a] == ALGO_RAW ? "mpi (raw)" : prt_comm_backend(),
               algo_label(o->algos[a]), runs_as(k, o->algos[a]), type_name(o->type), prt_redop_name(o->op),
               o->in_place ? "in place" : "out of place", o->iters, o->warmup);
        printf("#%13s %12s %6s %11s %12s %12s %7s\n", "size", "count", "type", "time(us)",
               "algbw(GB/s)", "busbw(GB/s)", "#wrong");
        double sum = 0;
        int nsum = 0;
        for (int s = 0; s < nsizes; s++) {
            const row *w = &rows[(size_t)a * nsizes + s];
            if (w->us < 0) {
                printf(" %13zu %12zu %6s %11s\n", w->bytes, w->count, type_name(o->type), "n/a");
                continue;
            }
            printf(" %13zu %12zu %6s %11.1f %12.3f %12.3f %7ld\n", w->bytes, w->count,
                   type_name(o->type), w->us, w->algbw, w->busbw, w->wrong);
            sum += w->busbw;
            nsum++;
        }
        printf("# Avg bus bandwidth    : %.3f\n", nsum ? sum / nsum : 0.0);
        *last_bytes = rows[(size_t)a * nsizes + nsizes - 1].bytes;
        last[a] = rows[(size_t)a * nsizes + nsizes - 1].us < 0 ? -1
                : rows[(size_t)a * nsizes + nsizes - 1].busbw;
    }
    prt_comm_free(sb);
    prt_comm_free(rb);
    free(rows);
    return wrong;
}

int main(int argc, char **argv)
{
    prt_ctx *c;
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    options o;
    if (!parse_args(argc, argv, &o)) {
        usage();
        MPI_Finalize();
        return 2;
    }
    if (prt_init(&argc, &argv, P, 1, 1, &c) != PRT_OK) {
        fprintf(stderr, "planrt-bench: %s\n", prt_comm_last_error());
        MPI_Finalize();
        return 1;
    }
    if (me == 0)
        printf("# planrt-bench: %d ranks, backend %s, sizes %zu..%zu bytes x%g\n", P,
               prt_comm_backend(), o.min_bytes, o.max_bytes, o.factor);
    long wrong_total = 0;
    for (int i = 0; i < o.ncoll; i++) {
        double last[MAX_ALGOS] = { 0 };
        size_t last_bytes = 0;
        wrong_total += bench_coll(c->world, o.colls[i], &o, last, &last_bytes);
        int raw = -1;
        for (int a = 0; a < o.nalgo; a++)
            if (o.algos[a] == ALGO_RAW)
                raw = a;
        if (me == 0 && raw >= 0 && last[raw] > 0 && o.nalgo > 1) {
            printf("# %s busbw at %zu bytes relative to mpi-raw:", bcoll_name[o.colls[i]],
                   last_bytes);
            for (int a = 0; a < o.nalgo; a++)
                if (a != raw)
                    printf(" %s %.2f", algo_label(o.algos[a]),
                           last[a] > 0 ? last[a] / last[raw] : 0.0);
            printf("\n");
        }
    }
    if (me == 0 && wrong_total)
        fprintf(stderr, "planrt-bench: %ld wrong elements or failed calls\n", wrong_total);
    prt_finalize(c);
    MPI_Finalize();
    return wrong_total ? 1 : 0;
}
