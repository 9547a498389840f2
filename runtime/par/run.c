/*
 * run.c: the generated executable's surroundings — its command line, its
 * training data per DP rank, the per-step progress line and JSON log, how
 * it stops — and the last-error text of runtime/par.
 *
 * The step itself (which op runs when) is in the generated program; this
 * file only answers "which sequences does this rank read", "what does
 * rank 0 print" and "how do all ranks end". A failed call aborts the job
 * (the others would wait on the failed rank; every wait has a deadline,
 * --timeout, so a dead or silent peer turns into such a failure). A NaN or
 * Inf loss or gradient norm is different: it is an all-reduced value, so
 * every rank sees it at the same point and they can stop together, rank 0
 * alone saying why.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>
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

/* The staging buffer of host values (a loss, a norm, a verdict, MoE
 * counts) in backend memory, kept from the first call to the end of the
 * run: allocating and freeing one per call would put a device-wide
 * cudaMalloc / cudaFree into every step. Made at start (prt_run_start's
 * first broadcast) at STAGE_MIN bytes, which a step's calls never exceed
 * (the loss: 8 bytes, the gradient norm: 4, a MoE layer's counts: 8 E + 4
 * bytes, E <= 8000); only a bigger call outside the step (the per-tensor
 * table of a save: 4 bytes per tensor and TP rank) grows it. */
enum { STAGE_MIN = 64 << 10 };
static void  *stage_buf;
static size_t stage_cap;

void *prtp_stage_buf(size_t bytes)
{
    if (bytes <= stage_cap) return stage_buf;
    size_t cap = bytes > STAGE_MIN ? bytes : STAGE_MIN;
    void *p = prt_comm_alloc(cap);
    if (!p) return NULL;
    prt_comm_free(stage_buf);
    stage_buf = p;
    stage_cap = cap;
    return p;
}

/* Before the backend goes (prt_finalize). */
static void stage_release(void)
{
    prt_comm_free(stage_buf);
    stage_buf = NULL;
    stage_cap = 0;
}

/* Stage n host values of type t through backend memory around call (one
 * call at a time: the buffer is shared, and each call ends with the copy
 * back, which waits for the collective). */
static prt_status staged(prt_comm *g, void *vals, size_t n, prt_dtype t, int root, prt_redop op,
                         bool bcast)
{
    size_t bytes = n * prt_dtype_size(t);
    void *buf = prtp_stage_buf(bytes ? bytes : 1);
    if (!buf) return prtp_fail(PRT_ERR_NOMEM, "staging buffer: out of memory");
    prt_status st = prt_comm_upload(buf, vals, bytes);
    if (!st) st = bcast ? prt_broadcast(g, buf, n, t, root) : prt_all_reduce(g, buf, buf, n, t, op);
    if (!st) st = prt_comm_download(vals, buf, bytes);
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
           "                          [--save DIR [--save-every K]] [--resume DIR]\n"
           "                          [--export PATH] [--timeout S] [--dump-params PATH]\n"
           "                          [--dump-logits PATH]\n"
           "                          [--trace PATH [--trace-step K]] [--mem-report PATH] [--dry-run]\n"
           "  N must be dp x tp x cp x pp of the plan the program was built from.\n"
           "  --steps S           total steps of the run, resumed or not (default: train.steps)\n"
           "  --data PATH         token data: raw text, or an llm.c .bin shard\n"
           "  --log-json PATH     one JSON object per step: step, total, loss, grad_norm,\n"
           "                      tokens_per_s, ms, mfu, eta_s\n"
           "  --save DIR          checkpoint (weights + AdamW state) to DIR/step-N at the end\n"
           "  --save-every K      ... and after every K steps\n"
           "  --resume DIR        continue from DIR's newest complete checkpoint (any layout)\n"
           "  --export PATH       at the end, the model alone as one safetensors file\n"
           "  --export-hf DIR     at the end, the model as a Hugging Face directory\n"
           "                      (config.json, model.safetensors; needs --save DIR)\n"
           "  --export-hf-dtype T fp32 (default) or bf16: the dtype of --export-hf's tensors\n"
           "  --init-from DIR     start from the weights of a Hugging Face directory (its\n"
           "                      config.json must match the plan's model)\n"
           "  --timeout S         a collective or transfer without progress for S seconds\n"
           "                      fails and ends the job (default: PLANRT_TIMEOUT_S, else 300)\n"
           "  --dump-params PATH  after training, write every parameter, whole, to PATH\n"
           "  --dump-logits PATH  the logits of the run's first step (a resumed run's next):\n"
           "                      each last-stage rank writes its vocabulary slice of its\n"
           "                      sequences to PATH.rank-RRRRR\n"
           "  --trace PATH        write step K's measured timeline (Chrome trace JSON) to PATH\n"
           "  --trace-step K      the step --trace records, 0-based (default: the last)\n"
           "  --mem-report PATH   one JSON line per rank: the peak of live bytes counted by\n"
           "                      planrt's allocator, by kind (params, grads, optimizer,\n"
           "                      activations, buffers)\n"
           "  --dry-run           lay the model out and report its memory; run no step\n";
}

/* A whole non-negative number (steps, seconds) from v; false if it is not. */
static bool parse_number(const char *v, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || !(x >= 0) || x > 1e12) return false;
    *out = x;
    return true;
}

prt_status prt_args_parse(int argc, char **argv, long steps, const char *data,
                          prt_args *out, bool *help)
{
    prtp_clear();
    memset(out, 0, sizeof *out);
    out->steps = steps;
    out->data = data;
    out->timeout = -1;
    *help = false;
    const char *trace = NULL, *trace_step = NULL;   /* --trace, --trace-step: runtime/par/trace.c */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { *help = true; return PRT_OK; }
        if (!strcmp(a, "--dry-run")) { out->dry_run = true; continue; }
        if (!strcmp(a, "--data")) dst = &out->data;
        else if (!strcmp(a, "--log-json")) dst = &out->log_json;
        else if (!strcmp(a, "--dump-params")) dst = &out->dump_params;
        else if (!strcmp(a, "--dump-logits")) dst = &out->dump_logits;
        else if (!strcmp(a, "--save")) dst = &out->save;
        else if (!strcmp(a, "--resume")) dst = &out->resume;
        else if (!strcmp(a, "--export")) dst = &out->export_path;
        else if (!strcmp(a, "--export-hf")) dst = &out->export_hf;
        else if (!strcmp(a, "--export-hf-dtype")) dst = &out->export_hf_dtype;
        else if (!strcmp(a, "--init-from")) dst = &out->init_from;
        else if (!strcmp(a, "--mem-report")) dst = &out->mem_report;
        else if (!strcmp(a, "--trace")) dst = &trace;
        else if (!strcmp(a, "--trace-step")) dst = &trace_step;
        else if (strcmp(a, "--steps") && strcmp(a, "--save-every") && strcmp(a, "--timeout"))
            return prtp_fail(PRT_ERR_ARG, "unknown option '%s'\n%s", a, prt_usage());
        if (i + 1 >= argc)
            return prtp_fail(PRT_ERR_ARG, "option '%s' needs a value\n%s", a, prt_usage());
        const char *v = argv[++i];
        if (dst) {
            if (!*v) return prtp_fail(PRT_ERR_ARG, "option '%s' needs a non-empty value", a);
            *dst = v;
            continue;
        }
        double x;
        bool timeout = !strcmp(a, "--timeout");
        if (!parse_number(v, &x) || (!timeout && x != (double)(long)x))
            return prtp_fail(PRT_ERR_ARG, "%s '%s': expected a %s >= 0", a, v,
                             timeout ? "number of seconds" : "whole number of steps");
        if (timeout) out->timeout = x;
        else if (!strcmp(a, "--steps")) out->steps = (long)x;
        else out->save_every = (long)x;
    }
    if (!out->data)
        return prtp_fail(PRT_ERR_ARG, "no training data: the plan names none; pass --data PATH");
    char why[256];
    if (prt_trace_setup(trace, trace_step, out->steps, argv[0], why, sizeof why))
        return prtp_fail(PRT_ERR_ARG, "%s", why);
    if (out->save_every && !out->save)
        return prtp_fail(PRT_ERR_ARG, "--save-every needs --save DIR");
    if (out->export_path && !out->save)
        return prtp_fail(PRT_ERR_ARG, "--export PATH is written from the final checkpoint: "
                                      "it needs --save DIR");
    if (out->export_hf && !out->save)
        return prtp_fail(PRT_ERR_ARG, "--export-hf DIR is written from the final checkpoint: "
                                      "it needs --save DIR");
    if (out->export_hf_dtype && strcmp(out->export_hf_dtype, "fp32") && strcmp(out->export_hf_dtype, "bf16"))
        return prtp_fail(PRT_ERR_ARG, "--export-hf-dtype '%s': expected fp32 or bf16", out->export_hf_dtype);
    if (out->export_hf_dtype && !out->export_hf)
        return prtp_fail(PRT_ERR_ARG, "--export-hf-dtype needs --export-hf DIR");
    if (out->init_from && out->resume)
        return prtp_fail(PRT_ERR_ARG, "--init-from and --resume both set the weights: give one");
    return PRT_OK;
}

/* ---- data --------------------------------------------------------------- */

struct prt_batch {
    prt_data *d;
    size_t    T, global, B, first;   /* T: tokens a sequence; first: this DP rank's first sequence */
    int       cp, cpr;               /* the CP group's size and this rank's place in it */
    uint64_t  seed;
    int32_t  *tok, *tgt;             /* (B*T) host staging: the whole sequences */
    int32_t  *ltok, *ltgt;           /* (B*T/cp) this CP rank's two chunks of each (cp > 1) */
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
    int cp = prt_cp_size(c);
    if (T % (2 * (size_t)cp))
        return prtp_fail(PRT_ERR_ARG, "sequence of %zu tokens does not split into 2 x cp %d chunks", T, cp);
    prt_batch *b = (prt_batch *)calloc(1, sizeof *b);
    if (!b) return prtp_fail(PRT_ERR_NOMEM, "data: out of memory");
    b->cp = cp;
    b->cpr = c->coord.cp;
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
    if (cp > 1) {
        b->ltok = (int32_t *)malloc(B * (T / (size_t)cp) * sizeof(int32_t));
        b->ltgt = (int32_t *)malloc(B * (T / (size_t)cp) * sizeof(int32_t));
    }
    if (!b->tok || !b->tgt || (cp > 1 && (!b->ltok || !b->ltgt))) {
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
    free(b->ltok);
    free(b->ltgt);
    free(b);
}

size_t prt_batch_seq0(const prt_batch *b, int mb)
{
    return b->first + (size_t)mb * b->B;
}

/* Each sequence's tokens at this CP rank's positions (prt_cp_pos: chunk
 * cpr, then chunk 2cp-1-cpr) from the whole (B, T) src into (B, T/cp) dst. */
static void cp_select(const prt_batch *b, int32_t *dst, const int32_t *src)
{
    size_t Tl = b->T / (size_t)b->cp;
    for (size_t s = 0; s < b->B; s++)
        for (size_t t = 0; t < Tl; t++)
            dst[s * Tl + t] = src[s * b->T + prt_cp_pos(t, b->T, b->cp, b->cpr)];
}

prt_status prt_batch_load(prt_batch *b, long step, int mb, int32_t *tokens, int32_t *targets)
{
    size_t n = b->B * b->T / (size_t)b->cp;
    prt_data_batch(b->d, b->seed, (uint64_t)step, prt_batch_seq0(b, mb), b->B, b->tok, b->tgt);
    const int32_t *tok = b->tok, *tgt = b->tgt;
    if (b->cp > 1) {
        cp_select(b, b->ltok, b->tok);
        cp_select(b, b->ltgt, b->tgt);
        tok = b->ltok;
        tgt = b->ltgt;
    }
    prt_status st = PRT_OK;
    if (tokens) st = prt_copy_to_device(tokens, tok, n * sizeof(int32_t));
    if (!st && targets) st = prt_copy_to_device(targets, tgt, n * sizeof(int32_t));
    return prtp_check(st, "batch upload");
}

/* ---- log ----------------------------------------------------------------- */

static bool diverged, own_failure;
void prtp_mark_own_failure(void) { own_failure = true; }
void prtp_set_diverged(void) { diverged = true; }
bool prtp_diverged(void) { return diverged; }

struct prt_log {
    prt_ctx *c;
    FILE    *json;
    bool     tty;          /* stdout is a terminal: redraw one line */
    bool     open_line;    /* a redrawn line waits for its newline */
    long     total, first; /* steps of the run, the step it started at */
    double   flops, peak;  /* model FLOPs per step (all ranks), peak FLOP/s per device */
    double   t0, t_first;  /* this step's start, the first step's start */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether the progress line is redrawn in place: PLANRT_PROGRESS=redraw or
 * =lines decides; else stdout must be a terminal, and not Open MPI's: it
 * hands every rank a pseudo-terminal even when mpirun's own output goes to
 * a file, so under mpirun the default is one line per step. */
static bool redraw(void)
{
    const char *v = getenv("PLANRT_PROGRESS");
    if (v && !strcmp(v, "redraw")) return true;
    if (v && !strcmp(v, "lines")) return false;
    return isatty(STDOUT_FILENO) && !getenv("OMPI_COMM_WORLD_SIZE");
}

prt_status prt_log_open(prt_ctx *c, const char *json_path, prt_log **out)
{
    prtp_clear();
    prt_log *l = (prt_log *)calloc(1, sizeof *l);
    if (!l) return prtp_fail(PRT_ERR_NOMEM, "log: out of memory");
    l->c = c;
    l->tty = redraw();
    l->t_first = -1;
    if (json_path && c->rank == 0 && !(l->json = fopen(json_path, "w"))) {
        free(l);
        return prtp_fail(PRT_ERR_IO, "%s: cannot write the JSON log", json_path);
    }
    *out = l;
    return PRT_OK;
}

void prt_log_plan(prt_log *l, long total, long first, double flops_step, double peak_flops)
{
    l->total = total;
    l->first = first;
    l->flops = flops_step;
    l->peak = peak_flops;
}

void prt_log_step_begin(prt_log *l)
{
    l->t0 = now_s();
    if (l->t_first < 0) l->t_first = l->t0;
}

/* "1h02m", "3m05s", "12s" into buf. */
static const char *eta_text(char *buf, size_t n, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
    return buf;
}

void prt_log_note(prt_log *l, const char *fmt, ...)
{
    if (l->c->rank != 0) return;
    if (l->open_line) { fputc('\n', stdout); l->open_line = false; }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fflush(stdout);
}

prt_status prt_log_step_end(prt_log *l, long step, double loss_sum, double tokens, double grad_norm)
{
    /* a double as two floats (high part, remainder): the sum keeps ~48 bits */
    float v[2] = { (float)loss_sum, 0.0f };
    v[1] = (float)(loss_sum - (double)v[0]);
    prt_status st = prtp_check(prtp_all_reduce_host(l->c->world, v, 2, PRT_FP32, PRT_SUM),
                               "loss all-reduce");
    double end = now_s(), dt = end - l->t0;
    if (st) return st;
    double loss = ((double)v[0] + (double)v[1]) / tokens;
    if (!isfinite(loss)) {
        /* every rank has the same sum: all stop here together */
        prtp_set_diverged();
        return prtp_fail(PRT_ERR_ARG, "the loss is %s at step %ld: stopped (nothing after step %ld is saved)",
                         isnan(loss) ? "NaN" : "Inf", step, step - 1);
    }
    if (l->c->rank != 0) return PRT_OK;
    double tps = dt > 0 ? tokens / dt : 0;
    /* MFU: model FLOPs of the step over what the world's devices could do
     * in its time at dense peak (PaLM's definition, Chowdhery et al. 2022) */
    double mfu = dt > 0 && l->peak > 0 ? l->flops / (dt * l->peak * (double)l->c->size) : 0;
    long done = step - l->first, left = l->total > step ? l->total - step : 0;
    double per = done > 0 ? (end - l->t_first) / (double)done : dt, eta = per * (double)left;
    char e[32];
    if (l->open_line) fputc('\r', stdout);
    printf("step %4ld/%ld | loss %.6f | %9.0f tok/s | %8.1f ms/step | MFU %5.2f%% | ETA %s%s",
           step, l->total, loss, tps, 1e3 * dt, 100 * mfu, eta_text(e, sizeof e, eta),
           l->tty ? "\033[K" : "\n");
    l->open_line = l->tty;
    fflush(stdout);
    if (l->json) {
        fprintf(l->json, "{\"step\": %ld, \"total\": %ld, \"loss\": %.9g, \"grad_norm\": %.9g, "
                "\"tokens_per_s\": %.1f, \"ms\": %.3f, \"mfu\": %.6f, \"eta_s\": %.1f}\n",
                step, l->total, loss, grad_norm, tps, 1e3 * dt, mfu, eta);
        fflush(l->json);
    }
    return PRT_OK;
}

void prt_log_close(prt_log *l)
{
    if (!l) return;
    if (l->open_line) fputc('\n', stdout);
    fflush(stdout);
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

/* --dry-run's context: MPI and this rank's coordinates (rank = tp + TP *
 * (cp + CP * (dp + DP * pp)), prt_comm.h's order), no groups, no device:
 * nothing communicates or computes, so no CUDA call is made and a CUDA
 * executable lays its model out on a machine without a GPU. */
static bool dry_ctx;

/* "dp D x tp T x pp P", with " x cp C" after tp when C > 1 (the
 * layout's factors in prt_comm.h's rank order, as the plan names them). */
static void layout_text(prt_layout L, char *buf, size_t cap)
{
    char cps[32] = "";
    if (L.cp > 1) snprintf(cps, sizeof cps, " x cp %d", L.cp);
    snprintf(buf, cap, "dp %d x tp %d%s x pp %d", L.dp, L.tp, cps, L.pp);
}

static int dry_start(int *argc, char ***argv, prt_layout L, prt_ctx **ctx)
{
    int rank = 0, size = 0;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long long need = (long long)L.dp * L.tp * L.cp * L.pp;
    if (size != need) {
        char lt[96];
        layout_text(L, lt, sizeof lt);
        if (rank == 0) fprintf(stderr, "error: %d ranks, but the plan's layout is %s = %lld\n", size, lt, need);
        MPI_Finalize();
        return 1;
    }
    prt_ctx *c = (prt_ctx *)calloc(1, sizeof *c);
    if (!c) { MPI_Finalize(); return 1; }
    c->rank = rank; c->size = size; c->device = -1;
    c->layout = L;
    c->coord = prt_layout_coord(c->layout, rank);
    dry_ctx = true;
    prt_mem_set_dry(true);
    *ctx = c;
    return 0;
}

int prt_run_start(int *argc, char ***argv, int dp, int tp, int pp, long steps,
                  const char *data, const char *banner, prt_args *args, prt_ctx **ctx)
{
    return prt_run_start_layout(argc, argv, (prt_layout){ .dp = dp, .tp = tp, .pp = pp, .cp = 1 },
                                steps, data, banner, args, ctx);
}

int prt_run_start_layout(int *argc, char ***argv, prt_layout L, long steps,
                         const char *data, const char *banner, prt_args *args, prt_ctx **ctx)
{
    *ctx = NULL;
    if (L.cp < 1) L.cp = 1;   /* 0: a layout without cp */
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
    if (args->dry_run) return dry_start(argc, argv, L, ctx);
    st = prt_init_layout(argc, argv, L, ctx);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (st) {
        if (rank == 0) fprintf(stderr, "error: %s\n", prt_comm_last_error());
        prt_finalize(NULL);
        return 1;
    }
    prt_ctx *c = *ctx;
    /* --timeout over PLANRT_TIMEOUT_S over 300 s: a dead peer ends the job
     * (PLANRT_P2P=rendezvous keeps its shorter deadlock deadline, 60 s or
     * PLANRT_DEADLOCK_S, which prt_init set) */
    if (args->timeout >= 0) prt_comm_set_timeout(args->timeout);
    else if (!getenv("PLANRT_TIMEOUT_S")) {
        double set = prt_comm_set_timeout(300);
        if (set > 0) prt_comm_set_timeout(set);
    }
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
            /* the device, or PLANRT_FAULT naming no op (refused here, before any step) */
            fprintf(stderr, "error: rank %d: the ops could not be set up: %s: %s\n", c->rank,
                    prt_status_str(st), prt_ops_last_error());
            code = 1;
        }
    }
    if (code) {
        stage_release();
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
    /* a NaN that a failed op left behind is that op's failure, not a divergence */
    if (prtp_diverged() && prt_ops_sync() == PRT_OK) {
        /* every rank saw the same all-reduced value: stop together, cleanly */
        if (!c || c->rank == 0) {
            fflush(stdout);
            fprintf(stderr, "\nerror: %s\n", why);
            fflush(stderr);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        stage_release();
        prt_ops_finalize();
        prt_finalize(c);
        exit(3);
    }
    /* an op's failure (pending, or just reported by prt_ops_sync) came
     * first and names the layer and the op: it goes before the rest */
    const char *op_why = prt_ops_last_error();
    if (op_why && *op_why) why = op_why;
    if (!*why) why = prt_comm_last_error();
    fprintf(stderr, "error: rank %d: %s: %s%s%s\n", c ? c->rank : -1, call, prt_status_str(st),
            why && *why ? ": " : "", why ? why : "");
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void prt_run_stop(prt_ctx *c)
{
    if (!c || c->rank == 0 || own_failure) {
        fflush(stdout);
        if (c && c->rank != 0) fprintf(stderr, "error: rank %d: %s\n", c->rank, prt_par_last_error());
        else fprintf(stderr, "error: %s\n", prt_par_last_error());
        fflush(stderr);
    }
    prt_ops_sync();
    stage_release();
    prt_ops_finalize();
    prt_finalize(c);
    exit(1);
}

void prt_run_end(prt_ctx *c)
{
    if (dry_ctx) {
        free(c);
        MPI_Finalize();
        return;
    }
    if (prt_trace_write(c))   /* --trace: gather the traced step to rank 0, which writes it */
        fprintf(stderr, "error: rank %d: %s\n", c->rank, prt_trace_last_error());
    prt_ops_sync();
    stage_release();
    prt_ops_finalize();
    prt_finalize(c);
}
