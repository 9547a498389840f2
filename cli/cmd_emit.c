/*
 * cmd_emit.c: `planc emit FILE [-o OUT.c]` and
 * `planc build FILE -o EXE [--target cpu|cuda]`.
 *
 * emit prints the generated program (or writes it to OUT.c, whatever name
 * the user gives, which its first comment line repeats). build writes it
 * beside the executable under its target's name, EXE.c (CPU) or EXE.cu
 * (CUDA: nvcc takes a file as CUDA by that name), kept so the user can read
 * what runs, and compiles it with codegen/compile.c.
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
#include "planner/fp8.h"
#include "planner/sema.h"

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

/* Emit plan's program to path ("-" or NULL: stdout, named MODEL.c in its
 * first line; else named as path is). */
static int emit_to(const Plan *plan, const char *path)
{
    FILE *f = path && strcmp(path, "-") ? fopen(path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "planc: cannot write %s: %s\n", path, strerror(errno));
        return 2;
    }
    char why[512] = "";
    bool ok = cg_emit_named(plan, f != stdout ? path : NULL, f, why, sizeof why);
    if (f != stdout && fclose(f) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "planc: %s: cannot generate the program: %s\n", plan->file, why);
        if (f != stdout) remove(path);
        return 1;
    }
    return 0;
}

static const char EMIT_HELP[] =
    "usage: planc emit FILE [-o OUT.c]\n"
    "\n"
    "Check FILE as `planc check` does, lower its layout to the Program (the\n"
    "per-stage op lists that check times and trace draws) and print the\n"
    "training program: one C file that includes only planrt.h and compiles as\n"
    "C (CPU target) or, named .cu, as CUDA (GPU target). Its first line names\n"
    "the file (MODEL.c on stdout); the same plan and name give the same bytes.\n"
    "\n"
    "  -o OUT.c    write the program to OUT.c instead of stdout (- is stdout);\n"
    "              any name: OUT.cu for nvcc\n"
    "\n"
    "exit status: 0 written, 1 layout invalid for the cluster or not one the\n"
    "generator can handle (the reason is printed), 2 bad input or usage.\n";

static const char BUILD_HELP[] =
    "usage: planc build FILE -o EXE [--target cpu|cuda] [--launch mpirun|slurm]\n"
    "\n"
    "Emit FILE's training program beside EXE, as EXE.c for the CPU or EXE.cu\n"
    "for CUDA (kept, so you can read what runs), and compile it against the\n"
    "planrt runtime: mpicc and OpenBLAS for the CPU, nvcc, cuBLAS and NCCL for\n"
    "CUDA. Run it with `mpirun -np N ./EXE`, N = dp x tp x pp.\n"
    "\n"
    "  -o EXE                  the executable to write (required)\n"
    "  --target cpu|cuda       what to compile for (default cpu); the CPU program\n"
    "                          computes in fp32, so cpu takes `dtype fp32` plans only\n"
    "  --launch mpirun|slurm   slurm also writes EXE.sbatch (default mpirun)\n"
    "\n"
    "The runtime is found beside planc (BIN/../lib, BIN/../include or the\n"
    "source tree); PLANRT_HOME=DIR overrides it with DIR/include and DIR/lib.\n"
    "\n"
    "exit status: 0 built, 1 the layout cannot be generated, the runtime is\n"
    "missing or the compiler failed, 2 bad input or usage.\n";

int planc_cmd_emit(int argc, char **argv)
{
    const char *file = NULL, *outp = NULL;
    for (int i = 0; i < argc; i++) {
        if (planc_is_help(argv[i])) {
            fputs(EMIT_HELP, stdout);
            return 0;
        } else if (!strcmp(argv[i], "-o")) {
            if (!(outp = planc_option_value("emit", argc, argv, &i, "OUT.c"))) return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return planc_usage_error("emit", "unknown option '%s'", argv[i]);
        } else if (file) {
            return planc_usage_error("emit", "more than one file ('%s')", argv[i]);
        } else {
            file = argv[i];
        }
    }
    if (!file) return planc_usage_error("emit", "%sneeds a FILE", "");
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

/* build --target T of a plan whose dtype T's runtime does not compute in
 * (cg_target_dtype: the CPU's is fp32 only) is refused at the model's
 * dtype key, or at the model block when its dtype is bf16 by default;
 * exit 1, as for a layout the generator cannot handle (the plan itself is
 * valid: check, search, export and --target cuda take it). */
static int refuse_target_dtype(const DslFile *f, const Plan *plan, CgTarget t, DslDiag *diag)
{
    char why[512];
    if (cg_target_dtype(plan, t, why, sizeof why)) return 0;
    bool written;
    DslLoc at = plan_sema_key_loc(f, "model", "dtype", &written);
    if (written)
        dsl_error_class(diag, DSL_ERR_CLUSTER, at, "dtype %s: %s", plan->model.dtype == DTYPE_FP16 ? "fp16" : "bf16",
                        why);
    else
        dsl_error_class(diag, DSL_ERR_CLUSTER, at, "model %s has no dtype, so bf16 (the default): %s",
                        plan->model.name ? plan->model.name : "?", why);
    dsl_note(diag, at, "%s", cg_target_dtype_hint);
    return dsl_diag_exit_code(diag);
}

int planc_cmd_build(int argc, char **argv)
{
    const char *file = NULL, *exe = NULL, *target = "cpu", *launch = "mpirun";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **val = !strcmp(a, "-o") ? &exe : !strcmp(a, "--target") ? &target
                         : !strcmp(a, "--launch") ? &launch : NULL;
        static const char *const metas[] = { "EXE", "cpu|cuda", "mpirun|slurm" };
        if (planc_is_help(a)) {
            fputs(BUILD_HELP, stdout);
            return 0;
        } else if (val) {
            const char *meta = metas[val == &exe ? 0 : val == &target ? 1 : 2];
            if (!(*val = planc_option_value("build", argc, argv, &i, meta))) return 2;
        } else if (a[0] == '-') {
            return planc_usage_error("build", "unknown option '%s'", a);
        } else if (file) {
            return planc_usage_error("build", "more than one file ('%s')", a);
        } else {
            file = a;
        }
    }
    if (!file) return planc_usage_error("build", "%sneeds a FILE", "");
    if (!exe) return planc_usage_error("build", "%sneeds -o EXE", "");
    /* a relative output path starting with '-' would read as a compiler
     * option ("-oops.c" is "-o ops.c"): make it "./-oops" */
    char dashed[PATH_MAX + 3];
    if (exe[0] == '-') {
        snprintf(dashed, sizeof dashed, "./%s", exe);
        exe = dashed;
    }
    CgTarget t;
    if (!strcmp(target, "cpu")) t = CG_TARGET_CPU;
    else if (!strcmp(target, "cuda")) t = CG_TARGET_CUDA;
    else return planc_usage_error("build", "unknown target '%s' (cpu or cuda)", target);
    if (strcmp(launch, "mpirun") && strcmp(launch, "slurm"))
        return planc_usage_error("build", "unknown launcher '%s' (mpirun or slurm)", launch);
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
    const DslFile *tree = NULL;
    memset(&arena, 0, sizeof arena);
    dsl_diag_init(&diag, stderr);
    int rc = planc_load_plan_tree(file, &arena, &diag, &plan, &tree);
    if (!rc) rc = refuse_target_dtype(tree, &plan, t, &diag);
    char src[PATH_MAX + 8];
    snprintf(src, sizeof src, "%s%s", exe, cg_source_ext(t));
    char fp8why[400];
    if (!rc && !cg_target_fp8(&plan, t, fp8why, sizeof fp8why)) {
        /* issue 27: the CUDA build's FP8 GEMMs are cuBLASLt's, with the recipe's scale mode */
        fprintf(stderr, "planc build: %s: %s\n  hint: --target cpu runs every fp8 recipe at any shape; "
                        "`check` and `search` still predict the plan on the GPU\n", file, fp8why);
        rc = 1;
    }
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
