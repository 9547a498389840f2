/*
 * compile.c: run the compiler on a generated program.
 *
 * The command line is built as an argv array and started with posix_spawnp
 * (so no shell ever parses a path that came from a .plan file or the user);
 * the compiler inherits stdout and stderr, so its messages reach the user
 * as they are. Flags that depend on the machine (OpenBLAS, which only the
 * CPU target links; MPI; CUDA) were found when planc itself was built and
 * are baked in here as macros (codegen/codegen.mk); they are split on
 * spaces into separate arguments.
 */
#include "codegen/codegen.h"

#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

#ifndef CG_BLAS_LIBS
#define CG_BLAS_LIBS "-lopenblas"
#endif
#ifndef CG_MPI_CFLAGS
#define CG_MPI_CFLAGS ""
#endif
#ifndef CG_MPI_LIBS
#define CG_MPI_LIBS "-lmpi"
#endif

#define MAX_ARGS 128

typedef struct {
    char *argv[MAX_ARGS];
    int   n;
    char  store[8192];   /* the split flag words */
    size_t used;
} Argv;

static void add(Argv *a, const char *s)
{
    if (a->n < MAX_ARGS - 1) a->argv[a->n++] = (char *)s;
    a->argv[a->n] = NULL;
}

/* Add each space-separated word of flags as its own argument. */
static void add_words(Argv *a, const char *flags)
{
    const char *s = flags;
    while (*s) {
        while (*s == ' ') s++;
        if (!*s) break;
        size_t k = strcspn(s, " ");
        if (a->used + k + 1 > sizeof a->store) return;
        char *w = a->store + a->used;
        memcpy(w, s, k);
        w[k] = '\0';
        a->used += k + 1;
        add(a, w);
        s += k;
    }
}

/* Start argv[0] (found on PATH), wait, return its exit status. */
static int run(Argv *a, char *why, size_t len)
{
    pid_t pid;
    int rc = posix_spawnp(&pid, a->argv[0], NULL, NULL, a->argv, environ);
    if (rc != 0) {
        snprintf(why, len, "cannot start %s: %s", a->argv[0], strerror(rc));
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            snprintf(why, len, "waiting for %s: %s", a->argv[0], strerror(errno));
            return -1;
        }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    snprintf(why, len, "%s was killed by signal %d", a->argv[0], WTERMSIG(status));
    return -1;
}

/* nvcc takes the program as CUDA by its .cu name; no `-x cu`, which would
 * also apply to the libraries after it. */
int cg_build(const char *src, const char *exe, CgTarget t, const CgRuntime *rt,
             char *why, size_t len)
{
    Argv a;
    memset(&a, 0, sizeof a);
    char inc[4096 + 3], lib[4096 + 32], libdir[4096 + 3], nvcc[4096 + 16], rpath[4096 + 32];
    snprintf(inc, sizeof inc, "-I%s", rt->include_dir);
    snprintf(libdir, sizeof libdir, "-L%s", rt->lib_dir);
    if (t == CG_TARGET_CPU) {
        snprintf(lib, sizeof lib, "%s/libplanrt.a", rt->lib_dir);
        add(&a, "mpicc");
        add_words(&a, "-std=gnu11 -O2 -g -Wall -Wextra -Werror -x c");
        add(&a, inc);
        add(&a, src);
        add_words(&a, "-x none -o");
        add(&a, exe);
        add(&a, lib);
        add_words(&a, CG_BLAS_LIBS);
        add(&a, "-lm");
    } else {
        snprintf(lib, sizeof lib, "%s/libplanrt_cuda.a", rt->lib_dir);
        if (rt->cuda_home) snprintf(nvcc, sizeof nvcc, "%s/bin/nvcc", rt->cuda_home);
        else snprintf(nvcc, sizeof nvcc, "nvcc");
        add(&a, nvcc);
        /* the runtime's architectures (Makefile NVCC_ARCH): sm_80, sm_90, and
         * compute_90 PTX for a newer part, compiled by the driver at load */
        add_words(&a, "-O2 -g -gencode arch=compute_80,code=sm_80 "
                      "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 "
                      "-Xcompiler -Wall,-Wextra,-Werror -DPRT_CUDA");
        add(&a, inc);
        add_words(&a, CG_MPI_CFLAGS);
        add(&a, src);
        add(&a, "-o");
        add(&a, exe);
        add(&a, lib);
        if (rt->cuda_home) {
            static char l64[4096 + 8];
            snprintf(l64, sizeof l64, "-L%s/lib64", rt->cuda_home);
            snprintf(rpath, sizeof rpath, "-Xlinker=-rpath,%s/lib64", rt->cuda_home);
            add(&a, l64);
            add(&a, rpath);
        }
        /* no OpenBLAS: the CUDA runtime's GEMMs are cuBLAS's */
        add_words(&a, "-lcublasLt -lcublas -lnccl -lcudart");
        add_words(&a, CG_MPI_LIBS);
        add(&a, "-lm");
    }
    (void)libdir;
    return run(&a, why, len);
}
