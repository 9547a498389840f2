/*
 * cmd_emit.c: `planc emit FILE [-o OUT.cu]` and
 * `planc build FILE -o EXE [--target cpu|cuda]`.
 *
 * emit prints the generated program (or writes it to OUT.cu). build writes
 * it beside the executable as EXE.cu (kept, so the user can read what runs)
 * and compiles it with codegen/compile.c.
 *
 * Finding the runtime: planc locates itself through /proc/self/exe
 * (BIN/planc) and links against BIN/../lib/libplanrt.a (or
 * libplanrt_cuda.a), where `make` puts them next to build/bin/planc. The
 * header planrt.h is taken from BIN/../include when that exists (an
 * installed layout), else from the source tree planc was built from
 * (CG_SOURCE_DIR/runtime/include). PLANRT_HOME=DIR overrides both with
 * DIR/include and DIR/lib.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/commands.h"
#include "codegen/codegen.h"

#ifndef CG_SOURCE_DIR
#define CG_SOURCE_DIR "."
#endif
#ifndef CG_CUDA_HOME
#define CG_CUDA_HOME ""
#endif

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Load FILE into a Plan; prints diagnostics; returns 0 or the exit status. */
static int load(const char *file, DslArena *arena, DslDiag *diag, Plan *plan)
{
    memset(arena, 0, sizeof *arena);
    dsl_diag_init(diag, stderr);
    return planc_load_plan(file, arena, diag, plan);
}

/* Emit plan's program to path ("-" or NULL: stdout). */
static int emit_to(const Plan *plan, const char *path)
{
    FILE *f = path && strcmp(path, "-") ? fopen(path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "planc: cannot write %s: %s\n", path, strerror(errno));
        return 2;
    }
    char why[512] = "";
    bool ok = cg_emit(plan, f, why, sizeof why);
    if (f != stdout && fclose(f) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "planc: %s: cannot generate the program: %s\n", plan->file, why);
        if (f != stdout) remove(path);
        return 1;
    }
    return 0;
}

int planc_cmd_emit(int argc, char **argv)
{
    const char *file = NULL, *outp = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) outp = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "planc emit: unknown option '%s'\nusage: planc emit FILE [-o OUT.cu]\n", argv[i]);
            return 2;
        } else if (!file) file = argv[i];
        else {
            fprintf(stderr, "planc emit: one FILE expected\n");
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "usage: planc emit FILE [-o OUT.cu]\n");
        return 2;
    }
    DslArena arena;
    DslDiag diag;
    Plan plan;
    int rc = load(file, &arena, &diag, &plan);
    if (!rc) rc = emit_to(&plan, outp);
    dsl_arena_free(&arena);
    return rc;
}

/* Where the runtime's header and libraries are (see the essay). */
static bool find_runtime(CgRuntime *rt, char *inc, char *lib, size_t n)
{
    const char *home = getenv("PLANRT_HOME");
    if (home && *home) {
        snprintf(inc, n, "%s/include", home);
        snprintf(lib, n, "%s/lib", home);
    } else {
        char self[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k <= 0) return false;
        self[k] = '\0';
        char *bin = dirname(self);
        snprintf(lib, n, "%s/../lib", bin);
        snprintf(inc, n, "%s/../include", bin);
        if (!is_dir(inc)) snprintf(inc, n, "%s/runtime/include", CG_SOURCE_DIR);
    }
    rt->include_dir = inc;
    rt->lib_dir = lib;
    rt->cuda_home = CG_CUDA_HOME[0] ? CG_CUDA_HOME : NULL;
    return true;
}

/* --launch slurm: EXE.sbatch beside the executable (absolute path to it,
 * so the job finds it from any submit directory). */
static int write_sbatch(const Plan *plan, const char *exe, CgTarget t)
{
    char path[PATH_MAX + 16], abs_exe[2 * PATH_MAX + 8], dir[PATH_MAX], why[512] = "";
    snprintf(path, sizeof path, "%s.sbatch", exe);
    if (exe[0] == '/' || !getcwd(dir, sizeof dir)) snprintf(abs_exe, sizeof abs_exe, "%s", exe);
    else snprintf(abs_exe, sizeof abs_exe, "%s/%s", dir, exe);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "planc build: cannot write %s\n", path);
        return 1;
    }
    bool ok = cg_sbatch(plan, abs_exe, t, f, why, sizeof why);
    if (fclose(f) != 0 && ok) { ok = false; snprintf(why, sizeof why, "write error"); }
    if (!ok) {
        remove(path);
        fprintf(stderr, "planc build: --launch slurm: %s\n", why);
        return 1;
    }
    chmod(path, 0755);
    fprintf(stderr, "planc build: wrote %s (sbatch %s [options])\n", path, path);
    return 0;
}

int planc_cmd_build(int argc, char **argv)
{
    const char *file = NULL, *exe = NULL, *target = "cpu", *launch = "mpirun";
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) exe = argv[++i];
        else if (!strcmp(argv[i], "--target") && i + 1 < argc) target = argv[++i];
        else if (!strcmp(argv[i], "--launch") && i + 1 < argc) launch = argv[++i];
        else if (argv[i][0] == '-') {
            fprintf(stderr, "planc build: unknown option '%s'\n"
                            "usage: planc build FILE -o EXE [--target cpu|cuda] [--launch mpirun|slurm]\n", argv[i]);
            return 2;
        } else if (!file) file = argv[i];
        else {
            fprintf(stderr, "planc build: one FILE expected\n");
            return 2;
        }
    }
    if (!file || !exe) {
        fprintf(stderr, "usage: planc build FILE -o EXE [--target cpu|cuda] [--launch mpirun|slurm]\n");
        return 2;
    }
    /* a relative output path starting with '-' would read as a compiler
     * option ("-oops.cu" is "-o ops.cu"): make it "./-oops" */
    char dashed[PATH_MAX + 3];
    if (exe[0] == '-') {
        snprintf(dashed, sizeof dashed, "./%s", exe);
        exe = dashed;
    }
    CgTarget t;
    if (!strcmp(target, "cpu")) t = CG_TARGET_CPU;
    else if (!strcmp(target, "cuda")) t = CG_TARGET_CUDA;
    else {
        fprintf(stderr, "planc build: unknown target '%s' (cpu or cuda)\n", target);
        return 2;
    }
    if (strcmp(launch, "mpirun") && strcmp(launch, "slurm")) {
        fprintf(stderr, "planc build: unknown launcher '%s' (mpirun or slurm)\n", launch);
        return 2;
    }
    char inc[PATH_MAX + 32], lib[PATH_MAX + 32];
    CgRuntime rt;
    if (!find_runtime(&rt, inc, lib, sizeof inc)) {
        fprintf(stderr, "planc build: cannot locate planc's own executable to find the runtime\n");
        return 1;
    }
    char libfile[PATH_MAX + 64];
    snprintf(libfile, sizeof libfile, "%s/%s", lib, t == CG_TARGET_CPU ? "libplanrt.a" : "libplanrt_cuda.a");
    if (access(libfile, R_OK) != 0) {
        fprintf(stderr, "planc build: the runtime library %s is missing\n"
                        "  hint: run `make` (the CUDA library is built where nvcc exists)\n", libfile);
        return 1;
    }
    DslArena arena;
    DslDiag diag;
    Plan plan;
    int rc = load(file, &arena, &diag, &plan);
    char src[PATH_MAX + 8];
    snprintf(src, sizeof src, "%s.cu", exe);
    if (!rc) rc = emit_to(&plan, src);
    char why[512] = "";
    if (!rc && !strcmp(launch, "slurm")) rc = write_sbatch(&plan, exe, t);
    dsl_arena_free(&arena);
    if (rc) return rc;
    int st = cg_build(src, exe, t, &rt, why, sizeof why);
    if (st != 0) {
        if (st < 0) fprintf(stderr, "planc build: %s\n", why);
        else fprintf(stderr, "planc build: the compiler failed (status %d) on %s\n", st, src);
        return 1;
    }
    fprintf(stderr, "planc build: wrote %s (source: %s)\n", exe, src);
    return 0;
}
