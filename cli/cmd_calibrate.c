/*
 * cmd_calibrate.c: planc calibrate — measure this machine, write a cluster.
 *
 *   planc calibrate [--ranks N] [--name NAME] [-o FILE] [--quick] [--target cpu|cuda]
 *
 * It starts planrt-calib (runtime/bench/calib.c, installed beside planc;
 * planrt-calib-cuda is the same source against the CUDA half of planrt)
 * on N ranks under mpirun with posix_spawnp, no shell, and turns what the
 * ranks measured with planrt's own kernels and collectives into one
 * includable `cluster NAME { ... }` block (cli/calib_profile.c): `nodes
 * 1`, `gpus_per_node N`, a device whose profile keys (gemm points and
 * their dtype, stream, launch, overhead) and a link whose measured
 * collectives per group size and overlap factors the cost model reads
 * instead of its analytic guesses (planner/cost.c, comm.c, simulate.c).
 * Each rank's device is what one of N ranks running at once gets: on a
 * CPU, a share of the machine's cores; on a GPU machine, one GPU.
 *
 * The target: --target, or cuda when planrt-calib-cuda exists and its
 * `--probe` (no MPI, no GPU work: cudaGetDeviceCount) exits 0, else cpu.
 * planc itself links no CUDA. --target cuda without a usable device is
 * exit 1 with the probe's reason ("no CUDA device: cudaErrorNoDevice
 * ..."), never a crash.
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
#include <unistd.h>

#include "cli/calib_profile.h"
#include "cli/commands.h"

extern char **environ;

static const char HELP[] =
    "usage: planc calibrate [--ranks N] [--name NAME] [-o FILE] [--quick] [--target cpu|cuda]\n"
    "\n"
    "Measure this machine with planrt's own kernels and collectives, N ranks\n"
    "running at once under mpirun (each rank gets what a rank of a training run\n"
    "gets: a share of the cores, or one GPU), and write one includable cluster block:\n"
    "GEMM times over shapes, elementwise bytes/s and launch overhead,\n"
    "collective latency and bus bandwidth on every group size dividing N,\n"
    "the slowdown of compute and communication running side by side, and the\n"
    "fixed cost of a step.\n"
    "Predictions on that cluster (check, search, trace) use the measurements.\n"
    "\n"
    "  --ranks N     ranks to measure with (default 2); the cluster's gpus_per_node\n"
    "  --name NAME   the cluster's name (default measured)\n"
    "  -o FILE       write the block to FILE (default: stdout) and show progress\n"
    "  --quick       fewer shapes and sizes (seconds instead of a minute or two)\n"
    "  --target T    cpu (OpenBLAS fp32 + Open MPI) or cuda (cuBLAS bf16 + NCCL, one\n"
    "                GPU per rank; --ranks defaults to the GPUs found); default: cuda\n"
    "                when planrt-calib-cuda finds a usable CUDA device, else cpu\n"
    "\n"
    "exit status: 0, 1 the measurement failed, 2 bad usage.\n";

static bool name_ok(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return false;
    return true;
}

/* The program NAME beside this planc (build/bin/). */
static bool find_beside(const char *name, char *out, size_t n)
{
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) return false;
    self[k] = '\0';
    int w = snprintf(out, n, "%s/%s", dirname(self), name);
    return w > 0 && (size_t)w < n && access(out, X_OK) == 0;
}

/* Run argv (argv[0] found on PATH) and wait: stdout to /dev/null when
 * quiet, or stdout and stderr into cap (n bytes, NUL-terminated) when cap
 * is given. Its exit status, or -1. */
static int spawn_wait(char *const argv[], bool quiet, char *cap, size_t n)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    int pfd[2] = { -1, -1 };
    if (cap) {
        if (pipe(pfd) != 0) return -1;
        posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
        posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
        posix_spawn_file_actions_addclose(&fa, pfd[0]);
        posix_spawn_file_actions_addclose(&fa, pfd[1]);
    } else if (quiet) {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (cap) {
        close(pfd[1]);
        size_t len = 0;
        ssize_t k;
        while (rc == 0 && len + 1 < n && (k = read(pfd[0], cap + len, n - 1 - len)) != 0) {
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) break;
            len += (size_t)k;
        }
        cap[len] = '\0';
        char drain[256];   /* what does not fit is read and dropped, so the child never blocks */
        while (rc == 0 && read(pfd[0], drain, sizeof drain) > 0) {}
        close(pfd[0]);
    }
    if (rc != 0) {
        fprintf(stderr, "planc: error: calibrate: cannot start %s: %s\n", argv[0], strerror(rc));
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Whether planrt-calib-cuda (at path) finds a usable CUDA device: its
 * --probe's exit status 0, with the device count in *gpus; otherwise
 * why not in why (its first line). */
static bool cuda_usable(const char *path, int *gpus, char *why, size_t n)
{
    char out[512];
    char *args[] = { (char *)path, "--probe", NULL };
    int rc = spawn_wait(args, false, out, sizeof out);
    out[strcspn(out, "\n")] = '\0';
    snprintf(why, n, "%s", out[0] ? out : "planrt-calib-cuda --probe failed");
    if (rc != 0) return false;
    return sscanf(out, "cuda %d", gpus) == 1 && *gpus >= 1;
}

/* The measuring program of the target, and the ranks to run it on;
 * exit status 1 (with a message) when the target cannot run here. */
static int choose_target(const char *want, int *ranks, bool ranks_set, char *calib, size_t n, bool *cuda)
{
    char cu[PATH_MAX], why[512];
    int gpus = 0;
    bool have_cu = find_beside("planrt-calib-cuda", cu, sizeof cu);
    if (want && !strcmp(want, "cuda")) {
        if (!have_cu) {
            fprintf(stderr, "planc: error: calibrate: planrt-calib-cuda not found beside planc (it is built "
                    "where nvcc exists; --target cpu measures the CPU)\n");
            return 1;
        }
        if (!cuda_usable(cu, &gpus, why, sizeof why)) {
            fprintf(stderr, "planc: error: calibrate --target cuda: %s\n  hint: run on a GPU machine, or "
                    "use --target cpu\n", why);
            return 1;
        }
    }
    *cuda = want ? !strcmp(want, "cuda") : have_cu && cuda_usable(cu, &gpus, why, sizeof why);
    if (*cuda) {
        snprintf(calib, n, "%s", cu);
        if (!ranks_set) *ranks = gpus;
        return 0;
    }
    if (!find_beside("planrt-calib", calib, n)) {
        fprintf(stderr, "planc: error: calibrate: planrt-calib not found beside planc (run make)\n");
        return 1;
    }
    return 0;
}

int planc_cmd_calibrate(int argc, char **argv)
{
    const char *out = NULL, *name = "measured", *target = NULL;
    int ranks = 2;
    bool quick = false, ranks_set = false;
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
            ranks_set = true;
        } else if (!strcmp(argv[i], "--name")) {
            if (!(v = planc_option_value("calibrate", argc, argv, &i, "NAME"))) return 2;
            if (!name_ok(v))
                return planc_usage_error("calibrate", "--name takes a name of letters, digits, '_' and '-', got '%s'", v);
            name = v;
        } else if (!strcmp(argv[i], "--target")) {
            if (!(target = planc_option_value("calibrate", argc, argv, &i, "cpu|cuda"))) return 2;
            if (strcmp(target, "cpu") && strcmp(target, "cuda"))
                return planc_usage_error("calibrate", "--target takes cpu or cuda, got '%s'", target);
        } else if (!strcmp(argv[i], "-o")) {
            if (!(out = planc_option_value("calibrate", argc, argv, &i, "FILE"))) return 2;
        } else {
            return planc_usage_error("calibrate", "unexpected argument '%s'", argv[i]);
        }
    }
    char calib[PATH_MAX];
    bool cuda = false;
    if (choose_target(target, &ranks, ranks_set, calib, sizeof calib, &cuda) != 0) return 1;
    char raw[] = "/tmp/planc-calib-XXXXXX";
    int fd = mkstemp(raw);
    if (fd < 0) {
        fprintf(stderr, "planc: error: calibrate: cannot make a temporary file: %s\n", strerror(errno));
        return 1;
    }
    close(fd);
    /* one BLAS thread per rank, as the generated programs run */
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    /* Open MPI refuses to start as root unless told; the measurement runs
     * as the user who asked for it (a container's root), so say it for it */
    if (geteuid() == 0 && !getenv("OMPI_ALLOW_RUN_AS_ROOT")) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
        if (out) printf("planc calibrate: running as root: OMPI_ALLOW_RUN_AS_ROOT=1 set for mpirun\n");
    }
    char np[16];
    snprintf(np, sizeof np, "%d", ranks);
    char *args[] = { "mpirun", "--oversubscribe", "--bind-to", "none", "-np", np, calib, raw,
                     quick ? "--quick" : NULL, NULL };
    if (out) {
        printf("planc calibrate: %d ranks%s, target %s, %s\n", ranks, quick ? " (quick)" : "", cuda ? "cuda" : "cpu",
               calib);
        fflush(stdout);
    }
    int rc = spawn_wait(args, out == NULL, NULL, 0);
    PlancCalibRaw *r = malloc(sizeof *r);
    FILE *rf = rc == 0 && r ? fopen(raw, "r") : NULL;
    bool got = rf && planc_calib_read(rf, r);
    if (rf) fclose(rf);
    unlink(raw);
    if (!got) {
        fprintf(stderr, "planc: error: calibrate: the measurement failed (mpirun exit %d); "
                "see planrt-calib's messages above\n", rc);
        free(r);
        return 1;
    }
    FILE *o = out ? fopen(out, "w") : stdout;
    if (!o) {
        fprintf(stderr, "planc: error: calibrate: cannot write %s: %s\n", out, strerror(errno));
        free(r);
        return 1;
    }
    char how[128];
    snprintf(how, sizeof how, "planc calibrate --target %s --ranks %d%s", cuda ? "cuda" : "cpu", ranks,
             quick ? " --quick" : "");
    planc_calib_write(o, r, name, how);
    bool bad = ferror(o);
    if (out && fclose(o) != 0) bad = true;
    if (bad) fprintf(stderr, "planc: error: calibrate: write error on %s\n", out ? out : "stdout");
    else if (out) printf("planc calibrate: wrote cluster %s to %s\n", name, out);
    free(r);
    return bad ? 1 : 0;
}
