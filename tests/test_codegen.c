/*
 * test_codegen.c: the code generator's own tests (cmocka).
 *
 *  - emission is deterministic: the same plan gives the same bytes;
 *  - every stage's step function is that stage's Program, op for op: the
 *    op(...) lines of step_stageN are parsed back and compared with
 *    plan_lower()'s list, for every schedule, ZeRO stage and recompute mode;
 *  - text from the plan cannot break out of a comment or a string;
 *  - layouts the generator does not handle are refused with a reason;
 *  - the emitted program compiles with -Wall -Wextra -Werror for the CPU
 *    target (mpicc against libplanrt.a) for a table of layouts, and a
 *    broken program gives the compiler's status back.
 *
 *   usage: test_codegen PLAN LIBDIR   (examples/tiny.plan, $(BUILD)/lib)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/commands.h"
#include "codegen/codegen.h"
#include "planner/layout.h"
#include "planner/program.h"

static const char *plan_file, *lib_dir;

typedef struct {
    const char *name;
    int dp, tp, pp, zero, schedule, chunks, recompute;
    int64_t micro_batch;
} Case;

static const Case CASES[] = {
    { "single",      1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 },
    { "dp2-zero3",   2, 1, 1, 3, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 },
    { "tp4",         1, 4, 1, 0, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE, 4 },
    { "pp2-gpipe",   1, 1, 2, 0, SCHED_GPIPE, 1, RECOMPUTE_NONE, 2 },
    { "pp4-1f1b",    2, 1, 4, 2, SCHED_1F1B, 1, RECOMPUTE_FULL, 1 },
    { "pp2-inter",   2, 2, 2, 1, SCHED_INTERLEAVED, 2, RECOMPUTE_NONE, 1 },
    { "tp2-sp",      1, 2, 1, 0, SCHED_1F1B, 1, RECOMPUTE_FULL, 4 },
    { "pp4-zbh1",    1, 2, 4, 3, SCHED_ZB_H1, 1, RECOMPUTE_FULL, 2 },
    { "pp2-tied",    2, 1, 2, 1, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 },
};

/* tiny.plan with the case's layout on a one-node cluster of its size. */
static void load_case(const Case *c, DslArena *arena, Plan *p)
{
    DslDiag diag;
    memset(arena, 0, sizeof *arena);
    dsl_diag_init(&diag, stderr);
    assert_int_equal(planc_load_plan(plan_file, arena, &diag, p), 0);
    p->cluster.nodes = 1;
    p->cluster.gpus_per_node = c->dp * c->tp * c->pp;
    Layout *l = &p->layout;
    p->has_layout = true;
    l->dp = c->dp; l->tp = c->tp; l->pp = c->pp; l->zero = c->zero;
    l->schedule = c->schedule; l->chunks = c->chunks; l->recompute = c->recompute;
    l->micro_batch = c->micro_batch; l->global_batch = 16;
    l->sequence_parallel = strstr(c->name, "-sp") != NULL;
    if (strstr(c->name, "-tied")) p->model.layers[p->model.n_layers - 1].tied = true;
}

/* The emitted text of p, or NULL with why filled. */
static char *emit_text(const Plan *p, char *why, size_t len, size_t *n)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, n);
    bool ok = cg_emit(p, f, why, len);
    fclose(f);
    if (!ok) { free(buf); return NULL; }
    return buf;
}

static void test_deterministic(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        DslArena a1, a2;
        Plan p1, p2;
        char why[256];
        size_t n1, n2;
        load_case(&CASES[i], &a1, &p1);
        load_case(&CASES[i], &a2, &p2);
        char *t1 = emit_text(&p1, why, sizeof why, &n1), *t2 = emit_text(&p2, why, sizeof why, &n2);
        assert_non_null(t1);
        assert_non_null(t2);
        assert_int_equal(n1, n2);
        assert_memory_equal(t1, t2, n1);
        free(t1); free(t2);
        dsl_arena_free(&a1); dsl_arena_free(&a2);
    }
}

/* The op kind named s, as plan_op_name spells it. */
static int op_kind(const char *s)
{
    for (int k = 0; k < PLAN_N_OPKINDS; k++)
        if (!strcmp(s, plan_op_name((PlanOpKind)k))) return k;
    return -1;
}

static void test_steps_are_the_program(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        DslArena a;
        Plan p;
        char why[256];
        size_t n;
        load_case(&CASES[i], &a, &p);
        PlanProgram prog;
        assert_true(plan_lower(&p, &prog, why, sizeof why));
        char *text = emit_text(&p, why, sizeof why, &n);
        assert_non_null(text);
        for (int s = 0; s < prog.pp; s++) {
            char head[64];
            snprintf(head, sizeof head, "static void step_stage%d(void)\n{\n", s);
            const char *at = strstr(text, head);
            assert_non_null(at);
            at += strlen(head);
            int k = 0;
            char line[256];
            while (sscanf(at, "%255[^\n]", line) == 1 && strcmp(line, "}")) {
                char kind[32];
                int mb, ch, peer;
                if (sscanf(line, " op(%31[A-Z_], %d, %d, %d);", kind, &mb, &ch, &peer) == 4 &&
                    op_kind(kind) >= 0) {
                    assert_true(k < prog.stages[s].n_ops);
                    const PlanOp *o = &prog.stages[s].ops[k++];
                    if (op_kind(kind) != (int)o->kind || mb != o->mb || ch != o->chunk || peer != o->peer)
                        fail_msg("%s stage %d op %d: emitted %s(%d, %d, %d), Program %s(%d, %d, %d)",
                                 CASES[i].name, s, k - 1, kind, mb, ch, peer, plan_op_name(o->kind),
                                 o->mb, o->chunk, o->peer);
                }
                at = strchr(at, '\n') + 1;
            }
            assert_int_equal(k, prog.stages[s].n_ops);
        }
        plan_program_free(&prog);
        free(text);
        dsl_arena_free(&a);
    }
}

static void test_text_is_escaped(void **state)
{
    (void)state;
    char buf[256];
    cg_comment_text("evil */ name /* x", buf, sizeof buf);
    assert_null(strstr(buf, "*/"));
    cg_comment_text("a*/", buf, sizeof buf);
    assert_null(strstr(buf, "*/"));
    cg_string_literal("q\"uote\\ new\nline ?" "?=", buf, sizeof buf);
    assert_string_equal(buf, "q\\\"uote\\\\ new\\012line \\077\\077=");
    /* a hostile data path reaches the program only as an escaped literal */
    DslArena a;
    Plan p;
    size_t n;
    load_case(&CASES[0], &a, &p);
    p.train.data = "x\"; int evil; /* */\n\"";
    p.file = "dir/*/evil */ name.plan";
    char why[256];
    char *text = emit_text(&p, why, sizeof why, &n);
    assert_non_null(text);
    assert_non_null(strstr(text, "DATA = \"x\\\"; int evil; /* */\\012\\\"\";"));
    assert_null(strstr(text, "evil */ name.plan"));
    free(text);
    dsl_arena_free(&a);
}

static void test_refusals(void **state)
{
    (void)state;
    struct { Case c; int seq_par; const char *needle; } bad[] = {
        { { "tp3", 1, 3, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, 0, "" },
        { { "tp8", 1, 8, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, 0, "heads" },
        /* a vocabulary tp does not divide is padded, not refused (tests/test_rules.c) */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        DslArena a;
        Plan p;
        char why[256] = "";
        size_t n;
        load_case(&bad[i].c, &a, &p);
        p.layout.sequence_parallel = bad[i].seq_par;
        char *text = emit_text(&p, why, sizeof why, &n);
        if (text) fail_msg("%s: emitted, expected a refusal", bad[i].c.name);
        assert_true(why[0] != '\0');
        assert_non_null(strstr(why, bad[i].needle));
        dsl_arena_free(&a);
    }
}

/* A vocabulary tp does not divide is padded (Megatron's
 * --make-vocab-size-divisible-by): the program's slice is VL = Vp / TP rows
 * with Vp = V rounded up to a multiple of vocab_multiple * tp, the real V
 * goes to the cross-entropy, and wte / lm_head have Vp rows of which V are
 * logical (the last column of their parameter row). */
static void test_padded_vocab(void **state)
{
    (void)state;
    static const struct { Case c; int64_t vocab, mult; } cases[] = {
        { { "v255-tp2", 1, 2, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 8 }, 255, 1 },
        { { "v259-tp4", 1, 4, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 4 }, 259, 1 },
        { { "v250-tp2-m8", 1, 2, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 8 }, 250, 8 },
        { { "v257-pp2-tied", 1, 2, 2, 1, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, 257, 1 },
        { { "v256-tp4", 1, 4, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 4 }, 256, 1 },  /* no padding */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DslArena a;
        Plan p;
        char why[256] = "", want[128];
        size_t n;
        load_case(&cases[i].c, &a, &p);
        p.model.vocab = cases[i].vocab;
        p.model.vocab_multiple = cases[i].mult;
        int64_t m = cases[i].mult * cases[i].c.tp, Vp = (cases[i].vocab + m - 1) / m * m;
        char *text = emit_text(&p, why, sizeof why, &n);
        if (!text) fail_msg("%s: refused: %s", cases[i].c.name, why);
        snprintf(want, sizeof want, "V = %lld, VL = %lld,", (long long)cases[i].vocab,
                 (long long)(Vp / cases[i].c.tp));
        if (!strstr(text, want)) fail_msg("%s: no '%s'", cases[i].c.name, want);
        const char *names[] = { "\"wte.weight\"", "\"lm_head.weight\"" };
        for (int k = 0; k < 2; k++) {
            const char *row = strstr(text, names[k]);
            if (!row) continue;   /* a tied head on the embedding's stage has no row */
            const char *end = strchr(row, '}');
            end = end ? strchr(end + 1, '}') : NULL;   /* past the row groups' braces */
            assert_non_null(end);
            char line[512];
            snprintf(line, sizeof line, "%.*s", (int)(end - row + 1), row);
            snprintf(want, sizeof want, ", %lld, 64, PRT_SPLIT_ROWS, 1, { %lld, 0, 0 },",
                     (long long)Vp, (long long)Vp);
            if (!strstr(line, want)) fail_msg("%s: %s has no '%s'", cases[i].c.name, line, want);
            snprintf(want, sizeof want, ", %lld }", (long long)cases[i].vocab);
            if (!strstr(line, want)) fail_msg("%s: %s does not end in '%s'", cases[i].c.name, line, want);
        }
        free(text);
        dsl_arena_free(&a);
    }
}

/* The sbatch script of plan p for exe, or NULL with why filled. */
static char *sbatch_text(const Plan *p, const char *exe, CgTarget t, char *why, size_t len)
{
    char *buf = NULL;
    size_t n;
    FILE *f = open_memstream(&buf, &n);
    bool ok = cg_sbatch(p, exe, t, f, why, len);
    fclose(f);
    if (!ok) { free(buf); return NULL; }
    return buf;
}

/* --launch slurm: the job's shape from the layout and the cluster block;
 * user text (model name, path) cannot break out of its place. */
static void test_sbatch(void **state)
{
    (void)state;
    DslArena a;
    Plan p;
    char why[256] = "";
    load_case(&CASES[0], &a, &p);
    p.layout.dp = 4; p.layout.tp = 2; p.layout.pp = 2;        /* 16 ranks */
    p.cluster.nodes = 4; p.cluster.gpus_per_node = 8;
    p.model.name = "evil\n$(rm -rf /) `x`;";
    char *s = sbatch_text(&p, "/jobs/it's $HOME/run", CG_TARGET_CUDA, why, sizeof why);
    assert_non_null(s);
    assert_non_null(strstr(s, "#SBATCH --nodes=2\n"));
    assert_non_null(strstr(s, "#SBATCH --ntasks=16\n"));
    assert_non_null(strstr(s, "#SBATCH --ntasks-per-node=8\n"));
    assert_non_null(strstr(s, "#SBATCH --gpus-per-task=1\n"));
    assert_non_null(strstr(s, "#SBATCH --job-name=evil___rm_-rf_____x__\n"));
    assert_non_null(strstr(s, "srun --kill-on-bad-exit=1 '/jobs/it'\\''s $HOME/run' \"$@\"\n"));
    assert_null(strstr(s, "$(rm"));
    free(s);
    /* CPU target: no GPUs asked; a path with a newline is refused */
    s = sbatch_text(&p, "/jobs/run", CG_TARGET_CPU, why, sizeof why);
    assert_non_null(s);
    assert_null(strstr(s, "gpus-per-task"));
    free(s);
    assert_null(sbatch_text(&p, "/jobs/a\nrm -rf /", CG_TARGET_CPU, why, sizeof why));
    assert_non_null(strstr(why, "control character"));
    /* more ranks than the cluster holds */
    p.cluster.nodes = 1;
    assert_null(sbatch_text(&p, "/jobs/run", CG_TARGET_CPU, why, sizeof why));
    assert_non_null(strstr(why, "need 2 nodes"));
    dsl_arena_free(&a);
}

/* Emit case c to DIR/name.cu and build it; returns the compiler status. */
static int build_case(const Plan *p, const char *name, const char *extra)
{
    char src[256], exe[256], why[256];
    snprintf(src, sizeof src, "%s/test_codegen_%s.cu", lib_dir, name);
    snprintf(exe, sizeof exe, "%s/test_codegen_%s", lib_dir, name);
    FILE *f = fopen(src, "w");
    assert_non_null(f);
    assert_true(cg_emit(p, f, why, sizeof why));
    if (extra) fputs(extra, f);
    fclose(f);
    CgRuntime rt = { "runtime/include", lib_dir, NULL };
    int st = cg_build(src, exe, CG_TARGET_CPU, &rt, why, sizeof why);
    if (st == 0) assert_int_equal(access(exe, X_OK), 0);
    unlink(exe);
    unlink(src);
    return st;
}

static void test_compiles_with_werror(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        DslArena a;
        Plan p;
        load_case(&CASES[i], &a, &p);
        if (build_case(&p, CASES[i].name, NULL) != 0) fail_msg("%s does not compile", CASES[i].name);
        dsl_arena_free(&a);
    }
    /* a warning is an error: the compiler's status comes back */
    fprintf(stderr, "test_codegen: the compiler error below is expected (a planted warning)\n");
    DslArena a;
    Plan p;
    load_case(&CASES[0], &a, &p);
    assert_int_not_equal(build_case(&p, "broken", "static int unused_and_warned;\n"), 0);
    dsl_arena_free(&a);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_codegen PLAN LIBDIR\n");
        return 2;
    }
    plan_file = argv[1];
    lib_dir = argv[2];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_steps_are_the_program),
        cmocka_unit_test(test_text_is_escaped),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_padded_vocab),
        cmocka_unit_test(test_sbatch),
        cmocka_unit_test(test_compiles_with_werror),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
