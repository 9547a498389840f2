/*
 * trace.c: the measured trace of one training step (`--trace OUT.json`).
 *
 * While step K runs, every rank notes for each op of its stage's Program
 * the op's index in the stage's op list, its kind, micro-batch and chunk,
 * and its start and end on CLOCK_MONOTONIC. At the end of the run the
 * records travel to rank 0 (MPI_Gather of the counts, MPI_Gatherv of the
 * records, on MPI_COMM_WORLD), which writes them in the Chrome Trace Event
 * Format of trace/chrome.c, the format `planc trace --compare` reads:
 * pid = pipeline stage, tid = the stream (0 compute, 1 p2p sends, 2
 * DP/ZeRO collectives), ts and dur in microseconds, args {op, kind, mb,
 * chunk, rank}. A stage with several ranks (DP and TP replicas) has their
 * events on tids 3k + stream, k the replica's place among the stage's
 * ranks in rank order, so the lowest rank keeps tids 0-2 and events on one
 * tid never overlap in Perfetto; the reader draws each stage's lowest rank.
 * `bytes` is not known here and is left out (the reader takes 0).
 *
 * Clocks: the first op of step K on each rank waits at MPI_Barrier over
 * all ranks, and each rank's times count from its own exit of that
 * barrier. So time 0 is the step's common start on every rank, to within
 * the barrier's exit skew (microseconds), whatever node the rank is on and
 * however its clock is offset. The barrier holds ranks that would have
 * started step K early, as the prediction does (every stage starts at 0).
 *
 * Device work: on CUDA the ops are asynchronous, so while step K runs each
 * op starts and ends with prt_ops_sync() (cudaDeviceSynchronize): an op's
 * interval then covers its kernels and collectives, at the price of the
 * overlap the step would otherwise have between an asynchronous gradient
 * reduction and the next op. On CPU prt_ops_sync returns at once. Other
 * steps run untouched; a run without --trace pays one test of a flag per
 * op.
 *
 * What this file must not do: know the plan. Names of op kinds are the
 * planner's (ORDER PlanOpKind) so the reader finds them; everything else
 * comes from the ranks' own records.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mpi.h>
#include "planrt.h"

/* One op as recorded (all doubles, so one MPI type carries a record). */
enum { F_RANK, F_STAGE, F_OP, F_KIND, F_MB, F_CHUNK, F_START, F_END, N_FIELDS };

static struct {
    bool        on;          /* --trace given */
    const char *path;
    char        prog[64];    /* the executable's name, for otherData.name */
    long        step;        /* the traced step, 0-based */
    bool        started;     /* the traced step's barrier is behind us */
    double      origin;      /* CLOCK_MONOTONIC seconds at the barrier's exit */
    double     *rec;         /* [n][N_FIELDS] */
    int         n, cap;
    int         open;        /* index of the op running, -1 between ops */
    bool        failed;      /* out of memory while recording */
} T = { .open = -1 };

static char last_error[512];

const char *prt_trace_last_error(void) { return last_error; }

const char *prt_trace_kind_name(int kind)
{
    static const char *names[PRT_TRACE_N_KINDS] = {   /* ORDER PlanOpKind */
        "FWD", "BWD", "BWD_INPUT", "BWD_WEIGHT", "SEND_ACT", "RECV_ACT", "SEND_GRAD",
        "RECV_GRAD", "GATHER_PARAMS", "REDUCE_GRADS", "OPT_STEP", "SYNC_PARAMS", "SP_NORM_REDUCE",
        "EMBED_REDUCE", "NORM_REDUCE" };
    return kind >= 0 && kind < PRT_TRACE_N_KINDS ? names[kind] : "?";
}

/* The stream an op kind occupies, as trace/chrome.c's tid_of (ORDER PlanOpKind). */
static int stream_of(int kind)
{
    switch (kind) {
    case 4: case 6: return 1;            /* SEND_ACT, SEND_GRAD: pipeline sends */
    case 8: case 9: case 11: return 2;   /* GATHER_PARAMS, REDUCE_GRADS, SYNC_PARAMS */
    case 12: case 13: case 14: return 2; /* SP_NORM_REDUCE, EMBED_REDUCE, NORM_REDUCE */
    default: return 0;                   /* compute, receive waits, optimizer */
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- setup ----------------------------------------------------------------- */

prt_status prt_trace_setup(const char *path, const char *step, long steps, const char *prog,
                           char *why, size_t len)
{
    free(T.rec);
    memset(&T, 0, sizeof T);
    T.open = -1;
    if (!path) {
        if (step) { snprintf(why, len, "--trace-step needs --trace PATH"); return PRT_ERR_ARG; }
        return PRT_OK;
    }
    if (!*path) { snprintf(why, len, "--trace: empty path"); return PRT_ERR_ARG; }
    if (steps <= 0) { snprintf(why, len, "--trace: the run has no step to trace (--steps 0)"); return PRT_ERR_ARG; }
    T.step = steps - 1;
    if (step) {
        char *end;
        long k = strtol(step, &end, 10);
        if (!*step || *end || k < 0 || k >= steps) {
            snprintf(why, len, "--trace-step '%s': expected a step from 0 to %ld (the run has %ld)",
                     step, steps - 1, steps);
            return PRT_ERR_ARG;
        }
        T.step = k;
    }
    const char *base = prog ? strrchr(prog, '/') : NULL;
    snprintf(T.prog, sizeof T.prog, "%s", base ? base + 1 : prog ? prog : "program");
    T.path = path;
    T.on = true;
    return PRT_OK;
}

/* ---- recording ------------------------------------------------------------- */

/* Room for one more record; false (and the trace marked failed) without. */
static bool grow(void)
{
    if (T.n < T.cap) return true;
    int cap = T.cap ? 2 * T.cap : 256;
    double *r = (double *)realloc(T.rec, (size_t)cap * N_FIELDS * sizeof *r);
    if (!r) { T.failed = true; return false; }
    T.rec = r;
    T.cap = cap;
    return true;
}

void prt_trace_begin(long step, int kind, int mb, int chunk)
{
    if (!T.on || step != T.step || kind < 0 || kind >= PRT_TRACE_N_KINDS) return;
    prt_ops_sync();                       /* CUDA: earlier work is not this op's */
    if (!T.started) {                     /* the step's common origin (see the essay) */
        MPI_Barrier(MPI_COMM_WORLD);
        T.origin = now_s();
        T.started = true;
    }
    if (!grow()) return;
    double *r = T.rec + (size_t)T.n * N_FIELDS;
    r[F_OP] = T.n;                        /* Program ops only reach here, in list order */
    r[F_KIND] = kind;
    r[F_MB] = mb;
    r[F_CHUNK] = chunk;
    r[F_START] = now_s() - T.origin;
    r[F_END] = r[F_START];
    T.open = T.n++;
}

void prt_trace_end(void)
{
    if (T.open < 0) return;
    prt_ops_sync();                       /* CUDA: the op's kernels are done */
    T.rec[(size_t)T.open * N_FIELDS + F_END] = now_s() - T.origin;
    T.open = -1;
}

/* ---- writing ---------------------------------------------------------------- */

/* Order of records in the file: stage, rank, then op. */
static int by_stage_rank_op(const void *a, const void *b)
{
    const double *x = a, *y = b;
    static const int keys[] = { F_STAGE, F_RANK, F_OP };
    for (int i = 0; i < 3; i++)
        if (x[keys[i]] != y[keys[i]]) return x[keys[i]] < y[keys[i]] ? -1 : 1;
    return 0;
}

/* Name stage s's process and the three lanes of its replica k (rank). */
static void metadata(FILE *f, int s, int k, int rank)
{
    static const char *lanes[] = { "compute", "p2p sends", "DP/ZeRO collectives" };
    if (k == 0)
        fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"name\":\"stage %d\"}},\n"
                   "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"sort_index\":%d}},\n", s, s, s, s);
    for (int t = 0; t < 3; t++)
        fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"rank %d %s\"}},\n", s, 3 * k + t, rank, lanes[t]);
}

/* One op as a complete ("X") event; times to the ns, in µs (the format's unit). */
static void event(FILE *f, const double *r, int replica, int chunks, bool last)
{
    int kind = (int)r[F_KIND], mb = (int)r[F_MB], chunk = (int)r[F_CHUNK];
    const char *name = prt_trace_kind_name(kind);
    char label[48];
    if (mb < 0) snprintf(label, sizeof label, "%s", name);
    else if (chunks > 1) snprintf(label, sizeof label, "%s %d.%d", name, mb, chunk);
    else snprintf(label, sizeof label, "%s %d", name, mb);
    double ts = round(r[F_START] * 1e9) / 1e3, te = round(r[F_END] * 1e9) / 1e3;
    fprintf(f, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
               "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"op\":%d,\"kind\":\"%s\",\"mb\":%d,"
               "\"chunk\":%d,\"rank\":%d}}%s\n",
            label, name, (int)r[F_STAGE], 3 * replica + stream_of(kind), ts, te - ts, (int)r[F_OP],
            name, mb, chunk, (int)r[F_RANK], last ? "" : ",");
}

/* Rank 0: the gathered, sorted records r[n] as one JSON document. */
static bool write_json(FILE *f, const double *r, int n, const prt_ctx *c)
{
    int chunks = 1, pp = c->layout.pp;
    double end = 0;
    for (int i = 0; i < n; i++) {
        const double *x = r + (size_t)i * N_FIELDS;
        if ((int)x[F_CHUNK] + 1 > chunks) chunks = (int)x[F_CHUNK] + 1;
        end = fmax(end, x[F_END]);
    }
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"format\":\"planc-trace\",\"version\":1,"
               "\"source\":\"measured\",\"name\":\"%s\",\"layout\":\"dp %d x tp %d x pp %d, step %ld\","
               "\"pp\":%d,\"chunks\":%d,\"step\":%ld,\"ranks\":%d,\"step_time_s\":%.9g,"
               "\"clock\":\"CLOCK_MONOTONIC from a barrier at the step's start\"},\n\"traceEvents\":[\n",
            T.prog, c->layout.dp, c->layout.tp, pp, T.step, pp, chunks, T.step, c->size, end);
    /* replica index of each record's rank within its stage, in rank order */
    int prev_stage = -1, prev_rank = -1, replica = 0;
    for (int i = 0; i < n; i++) {
        const double *x = r + (size_t)i * N_FIELDS;
        int s = (int)x[F_STAGE], rank = (int)x[F_RANK];
        if (s != prev_stage) replica = 0;
        else if (rank != prev_rank) replica++;
        if (s != prev_stage || rank != prev_rank) metadata(f, s, replica, rank);
        prev_stage = s;
        prev_rank = rank;
    }
    prev_stage = prev_rank = -1;
    replica = 0;
    for (int i = 0; i < n; i++) {
        const double *x = r + (size_t)i * N_FIELDS;
        int s = (int)x[F_STAGE], rank = (int)x[F_RANK];
        if (s != prev_stage) replica = 0;
        else if (rank != prev_rank) replica++;
        prev_stage = s;
        prev_rank = rank;
        event(f, x, replica, chunks, i + 1 == n);
    }
    fputs("]}\n", f);
    return !ferror(f);
}

/* Rank 0: write to PATH.tmp, then rename, so a reader never sees half a file. */
static prt_status write_file(const double *r, int n, const prt_ctx *c)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", T.path) >= (int)sizeof tmp) {
        snprintf(last_error, sizeof last_error, "--trace: path too long");
        return PRT_ERR_ARG;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(last_error, sizeof last_error, "%s: cannot write the trace", T.path);
        return PRT_ERR_IO;
    }
    bool ok = write_json(f, r, n, c);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, T.path)) {
        remove(tmp);
        snprintf(last_error, sizeof last_error, "%s: cannot write the trace", T.path);
        return PRT_ERR_IO;
    }
    return PRT_OK;
}

prt_status prt_trace_write(prt_ctx *c)
{
    last_error[0] = '\0';
    if (!T.on) return PRT_OK;
    for (int i = 0; i < T.n; i++) {
        T.rec[(size_t)i * N_FIELDS + F_RANK] = c->rank;
        T.rec[(size_t)i * N_FIELDS + F_STAGE] = c->coord.pp;
    }
    /* < 0: nothing valid to send (-1 the step never ran, -2 out of memory) */
    int count = T.failed ? -2 : !T.started ? -1 : T.n * N_FIELDS, size = c->size;
    int *counts = NULL, *displs = NULL;
    double *all = NULL;
    if (c->rank == 0) {
        counts = (int *)calloc((size_t)size, sizeof *counts);
        displs = (int *)calloc((size_t)size, sizeof *displs);
    }
    MPI_Gather(&count, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int total = 0, bad = -1, why_bad = 0;
    if (c->rank == 0 && counts && displs) {
        for (int i = 0; i < size; i++) {
            if (counts[i] < 0 && bad < 0) { bad = i; why_bad = counts[i]; }
            displs[i] = total;
            total += counts[i] > 0 ? counts[i] : 0;
        }
        all = (double *)malloc((size_t)(total ? total : 1) * sizeof *all);
    }
    /* a rank with nothing valid sends nothing */
    if (c->rank == 0 && counts)
        for (int i = 0; i < size; i++) if (counts[i] < 0) counts[i] = 0;
    MPI_Gatherv(T.rec, count > 0 ? count : 0, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE,
                0, MPI_COMM_WORLD);
    prt_status st = PRT_OK;
    if (c->rank == 0) {
        if (!counts || !displs || !all) {
            snprintf(last_error, sizeof last_error, "--trace: out of memory gathering the records");
            st = PRT_ERR_NOMEM;
        } else if (bad >= 0) {
            snprintf(last_error, sizeof last_error, "--trace: rank %d could not record step %ld: %s", bad,
                     T.step, why_bad == -2 ? "out of memory" : "the step never ran");
            st = why_bad == -2 ? PRT_ERR_NOMEM : PRT_ERR_ARG;
        } else {
            int n = total / N_FIELDS;
            qsort(all, (size_t)n, N_FIELDS * sizeof *all, by_stage_rank_op);
            st = write_file(all, n, c);
        }
    }
    free(counts);
    free(displs);
    free(all);
    free(T.rec);
    T.rec = NULL;
    T.n = T.cap = 0;
    T.on = false;
    return st;
}
