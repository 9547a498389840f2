/*
 * run.c: the generated executable's surroundings — its command line, its
 * training data per DP rank, step timing and the per-step log — and the
 * last-error text of runtime/par.
 *
 * The step itself (which op runs when) is in the generated program; this
 * file only answers "which sequences does this rank read" and "what does
 * rank 0 print".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mpi.h>
#include "par_internal.h"

/* ---- errors ------------------------------------------------------------ */

static _Thread_local char last_error[1024];

prt_status prtp_fail(prt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

void prtp_clear(void) { last_error[0] = '\0'; }

prt_status prtp_check(prt_status st, const char *what)
{
    if (st == PRT_OK) return st;
    const char *why = prt_comm_last_error();
    if (!why || !*why) why = prt_ops_last_error();
    return prtp_fail(st, "%s failed: %s%s%s", what, prt_status_str(st), why && *why ? ": " : "",
                     why ? why : "");
}

const char *prt_par_last_error(void) { return last_error; }

/* Stage n host values of type t through backend memory around call. */
static prt_status staged(prt_comm *g, void *vals, size_t n, prt_dtype t, int root, prt_redop op,
                         bool bcast)
{
    size_t bytes = n * prt_dtype_size(t);
    void *buf = prt_comm_alloc(bytes ? bytes : 1);
    if (!buf) return prtp_fail(PRT_ERR_NOMEM, "staging buffer: out of memory");
    prt_status st = prt_comm_upload(buf, vals, bytes);
    if (!st) st = bcast ? prt_broadcast(g, buf, n, t, root) : prt_all_reduce(g, buf, buf, n, t, op);
    if (!st) st = prt_comm_download(vals, buf, bytes);
    prt_comm_free(buf);
    return st;
}

prt_status prtp_all_reduce_host(prt_comm *g, void *vals, size_t n, prt_dtype t, prt_redop op)
{
    return staged(g, vals, n, t, 0, op, false);
}

prt_status prtp_broadcast_host(prt_comm *g, void *vals, size_t n, prt_dtype t, int root)
{
    return staged(g, vals, n, t, root, PRT_SUM, true);
}

void *prt_host_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }
void  prt_host_free(void *p) { free(p); }

/* ---- command line ------------------------------------------------------------ */

const char *prt_usage(void)
{
    return "usage: mpirun -np N ./EXE [--steps S] [--data PATH] [--log-json PATH]\n"
           "                          [--dump-params PATH]\n"
           "  N must be dp x tp x pp of the plan the program was built from.\n"
           "  --steps S           train S steps (default: the plan's train.steps)\n"
           "  --data PATH         token data: raw text, or an llm.c .bin shard\n"
           "  --log-json PATH     one JSON object per step: step, loss, tokens_per_s, ms\n"
           "  --dump-params PATH  after training, write every parameter, whole, to PATH\n";
}

prt_status prt_args_parse(int argc, char **argv, long steps, const char *data,
                          prt_args *out, bool *help)
{
    prtp_clear();
    memset(out, 0, sizeof *out);
    out->steps = steps;
    out->data = data;
    *help = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { *help = true; return PRT_OK; }
        if (!strcmp(a, "--data")) dst = &out->data;
        else if (!strcmp(a, "--log-json")) dst = &out->log_json;
        else if (!strcmp(a, "--dump-params")) dst = &out->dump_params;
        else if (strcmp(a, "--steps") != 0)
            return prtp_fail(PRT_ERR_ARG, "unknown option '%s'\n%s", a, prt_usage());
        if (i + 1 >= argc)
            return prtp_fail(PRT_ERR_ARG, "option '%s' needs a value\n%s", a, prt_usage());
        const char *v = argv[++i];
        if (dst) { *dst = v; continue; }
        char *end;
        long s = strtol(v, &end, 10);
        if (*v == '\0' || *end != '\0' || s < 0)
            return prtp_fail(PRT_ERR_ARG, "--steps '%s': expected a number of steps >= 0", v);
        out->steps = s;
    }
    if (!out->data)
        return prtp_fail(PRT_ERR_ARG, "no training data: the plan names none; pass --data PATH");
    return PRT_OK;
}

/* ---- data --------------------------------------------------------------- */

struct prt_batch {
    prt_data *d;
    size_t    T, global, B, first;   /* first: this DP rank's first sequence */
    uint64_t  seed;
    int32_t  *tok, *tgt;             /* (B*T) host staging */
};

prt_status prt_batch_open(prt_ctx *c, const char *path, size_t T, size_t vocab,
                          size_t global, size_t B, uint64_t seed, prt_batch **out)
{
    prtp_clear();
    *out = NULL;
    size_t dp = (size_t)c->layout.dp;
    if (global % dp || (global / dp) % B)
        return prtp_fail(PRT_ERR_ARG, "global batch %zu does not split into dp %zu x micro-batches of %zu",
                         global, dp, B);
    prt_batch *b = (prt_batch *)calloc(1, sizeof *b);
    if (!b) return prtp_fail(PRT_ERR_NOMEM, "data: out of memory");
    char err[512] = "";
    prt_status st = prt_data_open(&b->d, path, PRT_DATA_AUTO, T, vocab, err, sizeof err);
    if (st) {
        free(b);
        return prtp_fail(st, "training data: %s", err[0] ? err : path);
    }
    b->T = T; b->global = global; b->B = B; b->seed = seed;
    b->first = (size_t)c->coord.dp * (global / dp);
    b->tok = (int32_t *)malloc(B * T * sizeof(int32_t));
    b->tgt = (int32_t *)malloc(B * T * sizeof(int32_t));
    if (!b->tok || !b->tgt) {
        prt_batch_close(b);
        return prtp_fail(PRT_ERR_NOMEM, "data: out of memory");
    }
    *out = b;
    return PRT_OK;
}

void prt_batch_close(prt_batch *b)
{
    if (!b) return;
    if (b->d) prt_data_close(b->d);
    free(b->tok);
    free(b->tgt);
    free(b);
}

prt_status prt_batch_load(prt_batch *b, long step, int mb, int32_t *tokens, int32_t *targets)
{
    size_t n = b->B * b->T;
    prt_data_batch(b->d, b->seed, (uint64_t)step, b->first + (size_t)mb * b->B, b->B, b->tok, b->tgt);
    prt_status st = PRT_OK;
    if (tokens) st = prt_copy_to_device(tokens, b->tok, n * sizeof(int32_t));
    if (!st && targets) st = prt_copy_to_device(targets, b->tgt, n * sizeof(int32_t));
    return prtp_check(st, "batch upload");
}

/* ---- log ----------------------------------------------------------------- */

struct prt_log {
    prt_ctx *c;
    FILE    *json;
    double   t0;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

prt_status prt_log_open(prt_ctx *c, const char *json_path, prt_log **out)
{
    prtp_clear();
    prt_log *l = (prt_log *)calloc(1, sizeof *l);
    if (!l) return prtp_fail(PRT_ERR_NOMEM, "log: out of memory");
    l->c = c;
    if (json_path && c->rank == 0 && !(l->json = fopen(json_path, "w"))) {
        free(l);
        return prtp_fail(PRT_ERR_IO, "%s: cannot write the JSON log", json_path);
    }
    *out = l;
    return PRT_OK;
}

void prt_log_step_begin(prt_log *l) { l->t0 = now_s(); }

prt_status prt_log_step_end(prt_log *l, long step, double loss_sum, double tokens)
{
    /* a double as two floats (high part, remainder): the sum keeps ~48 bits */
    float v[2] = { (float)loss_sum, 0.0f };
    v[1] = (float)(loss_sum - (double)v[0]);
    prt_status st = prtp_check(prtp_all_reduce_host(l->c->world, v, 2, PRT_FP32, PRT_SUM),
                               "loss all-reduce");
    double dt = now_s() - l->t0;
    if (st || l->c->rank != 0) return st;
    double loss = ((double)v[0] + (double)v[1]) / tokens, tps = dt > 0 ? tokens / dt : 0;
    printf("step %4ld | loss %.6f | %9.0f tok/s | %8.1f ms/step\n", step, loss, tps, 1e3 * dt);
    fflush(stdout);
    if (l->json) {
        fprintf(l->json, "{\"step\": %ld, \"loss\": %.9g, \"tokens_per_s\": %.1f, \"ms\": %.3f}\n",
                step, loss, tps, 1e3 * dt);
        fflush(l->json);
    }
    return PRT_OK;
}

void prt_log_close(prt_log *l)
{
    if (!l) return;
    if (l->json) fclose(l->json);
    free(l);
}

/* ---- start and end -------------------------------------------------------- */

/* Whether path can be opened for reading (checked on rank 0 only). */
static bool readable(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* Rank 0 of the launch, as the launcher tells it before MPI starts (Open MPI,
 * MPICH/Slurm PMI), so a usage error is printed once; true when unknown. */
static bool launch_rank0(void)
{
    const char *vars[] = { "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v) return atoi(v) == 0;
    }
    return true;
}

int prt_run_start(int *argc, char ***argv, int dp, int tp, int pp, long steps,
                  const char *data, const char *banner, prt_args *args, prt_ctx **ctx)
{
    *ctx = NULL;
    /* the command line first: --help and usage errors need no MPI */
    bool help = false;
    prt_status st = prt_args_parse(*argc, *argv, steps, data, args, &help);
    if (help || st) {
        if (launch_rank0()) {
            if (help) fputs(prt_usage(), stdout);
            else fprintf(stderr, "error: %s\n", prt_par_last_error());
        }
        return help ? 0 : 2;
    }
    st = prt_init(argc, argv, dp, tp, pp, ctx);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (st) {
        if (rank == 0) fprintf(stderr, "error: %s\n", prt_comm_last_error());
        prt_finalize(NULL);
        return 1;
    }
    prt_ctx *c = *ctx;
    int code = 0;
    if (rank == 0 && !readable(args->data)) {
        fprintf(stderr, "error: training data '%s' not found or not readable\n"
                        "  hint: make it with scripts/make-data.sh, or pass --data PATH\n", args->data);
        code = 1;
    }
    /* every rank takes rank 0's verdict, so all stop or none does */
    prtp_broadcast_host(c->world, &code, 1, PRT_INT32, 0);
    if (!code) {
        st = prt_ops_init(c->device);
        if (st) {
            fprintf(stderr, "error: rank %d: the device could not be set up: %s %s\n", c->rank,
                    prt_status_str(st), prt_ops_last_error());
            code = 1;
        }
    }
    if (code) {
        prt_finalize(c);
        *ctx = NULL;
        return code;
    }
    if (rank == 0 && banner) { fputs(banner, stdout); fflush(stdout); }
    return 0;
}

void prt_run_fail(prt_ctx *c, const char *call, prt_status st)
{
    const char *why = prt_par_last_error();
    if (!*why) why = prt_comm_last_error();
    if (!why || !*why) why = prt_ops_last_error();
    fprintf(stderr, "error: rank %d: %s: %s%s%s\n", c ? c->rank : -1, call, prt_status_str(st),
            why && *why ? ": " : "", why ? why : "");
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void prt_run_end(prt_ctx *c)
{
    prt_ops_sync();
    prt_ops_finalize();
    prt_finalize(c);
}
