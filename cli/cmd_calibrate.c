/*
 * cmd_calibrate.c: planc calibrate — measure this machine, write a cluster.
 *
 *   planc calibrate [--ranks N] [--name NAME] [-o FILE] [--quick]
 *
 * It starts planrt-calib (runtime/bench/calib.c, installed beside planc)
 * on N ranks under mpirun with posix_spawnp, no shell, and turns what the
 * ranks measured with planrt's own kernels and collectives into one
 * includable `cluster NAME { ... }` block: `nodes 1`, `gpus_per_node N`,
 * a device whose profile keys (gemm points, stream, launch, overhead)
 * and a link whose measured collectives and overlap factors the cost
 * model reads instead of its analytic guesses (planner/cost.c, comm.c,
 * simulate.c). Each rank's device is what one of N ranks running at once
 * gets: on a CPU, a share of the machine's cores.
 *
 * What it must not do: fit or interpret the measurements beyond writing
 * them in the language's units (the runtime fits; the planner reads), or
 * pass anything through a shell. Progress goes to stdout when -o names a
 * file; with the block on stdout it is silent.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <libgen.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"

extern char **environ;

static const char HELP[] =
    "usage: planc calibrate [--ranks N] [--name NAME] [-o FILE] [--quick]\n"
    "\n"
    "Measure this machine with planrt's own kernels and collectives, N ranks\n"
    "running at once under mpirun (each rank gets what a rank of a training run\n"
    "gets: a share of the cores), and write one includable cluster block:\n"
    "GEMM times over shapes, elementwise bytes/s and launch overhead,\n"
    "collective latency and bus bandwidth, the slowdown of compute and\n"
    "communication running side by side, and the fixed cost of a step.\n"
    "Predictions on that cluster (check, search, trace) use the measurements.\n"
    "\n"
    "  --ranks N     ranks to measure with (default 2); the cluster's gpus_per_node\n"
    "  --name NAME   the cluster's name (default measured)\n"
    "  -o FILE       write the block to FILE (default: stdout) and show progress\n"
    "  --quick       fewer shapes and sizes (seconds instead of a minute or two)\n"
    "\n"
    "exit status: 0, 1 the measurement failed, 2 bad usage.\n";

/* What planrt-calib wrote (SI units), read back from its file. */
typedef struct {
    int    ranks;
    char   backend[16];
    double stream, launch, overhead, ov_compute, ov_comm;
    double act[2], softmax[2];          /* s per element, forward and backward */
    int    n_gemm;
    struct { char pass[4]; long m, n, k; double s; } gemm[512];
    int    n_coll;
    struct { char name[20]; double lat, bw; } coll[8];
    double gemm_rate;   /* FLOP/s of the largest measured forward GEMM */
    double gemm_flops;  /* its FLOPs */
} Raw;

static bool name_ok(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return false;
    return true;
}

/* planrt-calib beside this planc (build/bin/). */
static bool find_calib(char *out, size_t n)
{
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) return false;
    self[k] = '\0';
    int w = snprintf(out, n, "%s/planrt-calib", dirname(self));
    return w > 0 && (size_t)w < n && access(out, X_OK) == 0;
}

/* Run argv (argv[0] found on PATH), stdout to /dev/null when quiet;
 * its exit status, or -1. */
static int spawn_wait(char *const argv[], bool quiet)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (quiet) posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "planc: error: calibrate: cannot start %s: %s\n", argv[0], strerror(rc));
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The collectives a link key may name (sema.c's LINK_KEYS): nothing else
 * from the measurement file reaches the cluster block as a key. */
static bool known_coll(const char *s)
{
    static const char *const names[] = { "all-reduce", "all-gather", "reduce-scatter", "broadcast",
                                         "reduce", "all-to-all", "p2p" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i])) return true;
    return false;
}

static bool read_raw(const char *path, Raw *r)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    memset(r, 0, sizeof *r);
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char key[32], a[24];
        double x, y;
        long m, n, k;
        if (line[0] == '#' || sscanf(line, "%31s", key) != 1) continue;
        if (!strcmp(key, "ranks")) sscanf(line, "%*s %d", &r->ranks);
        else if (!strcmp(key, "backend")) sscanf(line, "%*s %15s", r->backend);
        else if (!strcmp(key, "stream")) sscanf(line, "%*s %lf", &r->stream);
        else if (!strcmp(key, "launch")) sscanf(line, "%*s %lf", &r->launch);
        else if (!strcmp(key, "overhead")) sscanf(line, "%*s %lf", &r->overhead);
        else if (!strcmp(key, "activation")) sscanf(line, "%*s %lf %lf", &r->act[0], &r->act[1]);
        else if (!strcmp(key, "softmax")) sscanf(line, "%*s %lf %lf", &r->softmax[0], &r->softmax[1]);
        else if (!strcmp(key, "overlap_compute")) sscanf(line, "%*s %lf", &r->ov_compute);
        else if (!strcmp(key, "overlap_comm")) sscanf(line, "%*s %lf", &r->ov_comm);
        else if (!strcmp(key, "gemm") && r->n_gemm < 512 &&
                 sscanf(line, "%*s %3s %ld %ld %ld %lf", a, &m, &n, &k, &x) == 5 && x > 0 && m > 0 && n > 0 &&
                 k > 0 && (!strcmp(a, "fwd") || !strcmp(a, "dx") || !strcmp(a, "dw"))) {
            strcpy(r->gemm[r->n_gemm].pass, a);
            r->gemm[r->n_gemm].m = m; r->gemm[r->n_gemm].n = n; r->gemm[r->n_gemm].k = k;
            r->gemm[r->n_gemm++].s = x;
            /* the device's flops: the rate of the largest forward GEMM */
            double fl = 2.0 * (double)m * (double)n * (double)k;
            if (!strcmp(a, "fwd") && fl >= r->gemm_flops) { r->gemm_flops = fl; r->gemm_rate = fl / x; }
        } else if (!strcmp(key, "coll") && r->n_coll < 8 &&
                   sscanf(line, "%*s %19s %lf %lf", a, &x, &y) == 3 && known_coll(a) && y > 0 && x >= 0) {
            strcpy(r->coll[r->n_coll].name, a);
            r->coll[r->n_coll].lat = x; r->coll[r->n_coll++].bw = y;
        }
    }
    fclose(f);
    return r->ranks >= 1 && r->n_gemm > 0 && r->stream > 0;
}

/* The cluster block, in canonical form (planc fmt prints it unchanged). */
static void write_cluster(FILE *o, const Raw *r, const char *name, bool quick)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
    double mib = pages > 0 && psz > 0 ? (double)pages * (double)psz / 1048576.0 / r->ranks : 1024;
    char host[64] = "this machine";
    gethostname(host, sizeof host - 1);
    time_t t = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&t));
    fprintf(o, "# Written by `planc calibrate --ranks %d%s` on %s, %s.\n", r->ranks, quick ? " --quick" : "",
            host, when);
    fprintf(o, "# What one of %d ranks running at once measured with planrt's kernels and\n"
               "# collectives (%s): each rank's device is its share of the machine. Times are\n"
               "# medians, the slowest rank's. Include this file and name the cluster.\n",
            r->ranks, r->backend[0] ? r->backend : "mpi");
    fprintf(o, "cluster %s {\n    nodes 1\n    gpus_per_node %d\n    device {\n", name, r->ranks);
    fprintf(o, "        memory %.0f MiB\n", mib > 1 ? mib : 1);
    fprintf(o, "        flops %.6g GFLOPS\n        flops_fp32 %.6g GFLOPS\n", r->gemm_rate / 1e9,
            r->gemm_rate / 1e9);
    fprintf(o, "        hbm %.6g MB/s\n        stream %.6g MB/s\n", r->stream / 1e6, r->stream / 1e6);
    fprintf(o, "        launch %.6g us\n        overhead %.6g us\n", r->launch * 1e6, r->overhead * 1e6);
    fprintf(o, "        activation %.6g ns %.6g ns\n        softmax %.6g ns %.6g ns\n", r->act[0] * 1e9,
            r->act[1] * 1e9, r->softmax[0] * 1e9, r->softmax[1] * 1e9);
    for (int i = 0; i < r->n_gemm; i++)
        fprintf(o, "        gemm %s %ld %ld %ld %.6g us\n", r->gemm[i].pass, r->gemm[i].m, r->gemm[i].n,
                r->gemm[i].k, r->gemm[i].s * 1e6);
    fprintf(o, "    }\n");
    if (r->ranks > 1) {
        /* the link's alpha-beta figures are the all-reduce's, for the
         * collectives not measured */
        double lat = 5e-6, bw = 1e9;
        for (int i = 0; i < r->n_coll; i++)
            if (!strcmp(r->coll[i].name, "all-reduce")) { lat = r->coll[i].lat / (2.0 * (r->ranks - 1)); bw = r->coll[i].bw; }
        fprintf(o, "    link intra {\n        bandwidth %.6g MB/s\n        latency %.6g us\n"
                   "        efficiency 1\n        ranks %d\n", bw / 1e6, lat * 1e6, r->ranks);
        for (int i = 0; i < r->n_coll; i++)
            fprintf(o, "        %s %.6g us %.6g MB/s\n", r->coll[i].name, r->coll[i].lat * 1e6,
                    r->coll[i].bw / 1e6);
        fprintf(o, "        overlap_compute %.4g\n        overlap_comm %.4g\n    }\n",
                r->ov_compute >= 1 ? r->ov_compute : 1, r->ov_comm >= 1 ? r->ov_comm : 1);
    }
    fprintf(o, "}\n");
}

int planc_cmd_calibrate(int argc, char **argv)
{
    const char *out = NULL, *name = "measured";
    int ranks = 2;
    bool quick = false;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (planc_is_help(argv[i])) {
            fputs(HELP, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!strcmp(argv[i], "--ranks")) {
            if (!(v = planc_option_value("calibrate", argc, argv, &i, "N"))) return 2;
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1024) return planc_usage_error("calibrate", "--ranks takes 1 to 1024, got '%s'", v);
            ranks = (int)n;
        } else if (!strcmp(argv[i], "--name")) {
            if (!(v = planc_option_value("calibrate", argc, argv, &i, "NAME"))) return 2;
            if (!name_ok(v))
                return planc_usage_error("calibrate", "--name takes a name of letters, digits, '_' and '-', got '%s'", v);
            name = v;
        } else if (!strcmp(argv[i], "-o")) {
            if (!(out = planc_option_value("calibrate", argc, argv, &i, "FILE"))) return 2;
        } else {
            return planc_usage_error("calibrate", "unexpected argument '%s'", argv[i]);
        }
    }
    char calib[PATH_MAX];
    if (!find_calib(calib, sizeof calib)) {
        fprintf(stderr, "planc: error: calibrate: planrt-calib not found beside planc (run make)\n");
        return 1;
    }
    char raw[] = "/tmp/planc-calib-XXXXXX";
    int fd = mkstemp(raw);
    if (fd < 0) {
        fprintf(stderr, "planc: error: calibrate: cannot make a temporary file: %s\n", strerror(errno));
        return 1;
    }
    close(fd);
    /* one BLAS thread per rank, as the generated programs run */
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    char np[16];
    snprintf(np, sizeof np, "%d", ranks);
    char *args[] = { "mpirun", "--oversubscribe", "--bind-to", "none", "-np", np, calib, raw,
                     quick ? "--quick" : NULL, NULL };
    if (out) { printf("planc calibrate: %d ranks%s, %s\n", ranks, quick ? " (quick)" : "", calib); fflush(stdout); }
    int rc = spawn_wait(args, out == NULL);
    Raw *r = malloc(sizeof *r);
    if (rc != 0 || !r || !read_raw(raw, r)) {
        fprintf(stderr, "planc: error: calibrate: the measurement failed (mpirun exit %d); "
                "see planrt-calib's messages above\n", rc);
        unlink(raw);
        free(r);
        return 1;
    }
    unlink(raw);
    FILE *o = out ? fopen(out, "w") : stdout;
    if (!o) {
        fprintf(stderr, "planc: error: calibrate: cannot write %s: %s\n", out, strerror(errno));
        free(r);
        return 1;
    }
    write_cluster(o, r, name, quick);
    bool bad = ferror(o);
    if (out && fclose(o) != 0) bad = true;
    if (bad) fprintf(stderr, "planc: error: calibrate: write error on %s\n", out ? out : "stdout");
    else if (out) printf("planc calibrate: wrote cluster %s to %s\n", name, out);
    free(r);
    return bad ? 1 : 0;
}
