/*
 * test_codegen.c: the code generator's own tests (cmocka).
 *
 *  - emission is deterministic: the same plan gives the same bytes, and
 *    examples/tiny.plan gives tests/codegen/tiny.golden.c byte for byte
 *    (make update-codegen-golden rewrites it; review the diff);
 *  - every stage's step function is that stage's Program, op for op: the
 *    op(...) lines of step_stageN, their loops expanded, are parsed back
 *    and compared with plan_lower()'s list, for every schedule, ZeRO stage
 *    and recompute mode; regular schedules are loops, ZB-H1 is not;
 *  - the program is of its plan alone: no preprocessor branches, no run-
 *    time tests of features (SP, recompute, split backward, activation);
 *    the step-level collectives are lines of the stages the Program says;
 *  - codegen/program_template.c compiles on its own with -Werror for a
 *    table of feature combinations;
 *  - a plan without a train block gets the documented train defaults;
 *  - the header's step time and bubble are plan_simulate's of the Program;
 *  - text from the plan cannot break out of a comment or a string;
 *  - layouts the generator does not handle are refused with a reason;
 *  - the emitted program compiles with -Wall -Wextra -Werror for the CPU
 *    target (mpicc against libplanrt.a) for a table of layouts, and a
 *    broken program gives the compiler's status back.
 *
 *   usage: test_codegen PLAN LIBDIR GOLDEN
 *          (examples/tiny.plan, $(BUILD)/lib, tests/codegen/tiny.golden.c)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli/commands.h"
#include "codegen/codegen.h"
#include "planner/layout.h"
#include "planner/stacks.h"
#include "planner/program.h"
#include "planner/simulate.h"

static const char *plan_file, *lib_dir, *golden_file;
extern char **environ;

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
    { "pp4-tied",    1, 1, 4, 0, SCHED_GPIPE, 1, RECOMPUTE_NONE, 1 },
    { "pp2-inter4-sp", 1, 2, 2, 0, SCHED_INTERLEAVED, 2, RECOMPUTE_SELECTIVE, 1 },
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

/* The micro-batch of an op line: "3", or in a loop "i", "2 + i", "2 * i",
 * "1 + 2 * i", at round i. False when it is none of these. */
static bool parse_mb(const char *t, int i, int *mb)
{
    int a, d;
    char rest[8];
    if (sscanf(t, "%d + %d * i%1s", &a, &d, rest) == 2) { *mb = a + d * i; return true; }
    if (sscanf(t, "%d * i%1s", &d, rest) == 1 && strchr(t, '*')) { *mb = d * i; return true; }
    if (sscanf(t, "%d + i%1s", &a, rest) == 1 && strchr(t, '+')) { *mb = a + i; return true; }
    if (!strcmp(t, "i")) { *mb = i; return true; }
    if (sscanf(t, "%d%1s", &a, rest) == 1) { *mb = a; return true; }
    return false;
}

typedef struct { int kind, mb, chunk, peer; } Op;

/* Parse one op(KIND, MB, CHUNK, PEER); line at round i into o. */
static bool parse_op(const char *line, int i, Op *o)
{
    char kind[32], mb[32];
    if (sscanf(line, " op(%31[A-Z_], %31[^,], %d, %d);", kind, mb, &o->chunk, &o->peer) != 4) return false;
    o->kind = op_kind(kind);
    if (o->kind < 0) return false;   /* bookkeeping: REDUCE_DURING, FREE_SLOT, RELEASE_PARAMS */
    if (!parse_mb(mb, i, &o->mb)) fail_msg("cannot read the micro-batch of '%s'", line);
    return true;
}

/* The Program ops of step_stageS in text, loops expanded, into ops (at
 * most cap); returns their count, *loops the number of for loops. */
static int stage_ops(const char *text, int s, Op *ops, int cap, int *loops)
{
    char head[64], line[512];
    snprintf(head, sizeof head, "static void step_stage%d(void)\n{\n", s);
    const char *at = strstr(text, head);
    assert_non_null(at);
    at += strlen(head);
    int n = 0, rounds;
    *loops = 0;
    while (sscanf(at, "%511[^\n]", line) == 1 && strcmp(line, "}")) {
        at = strchr(at, '\n') + 1;
        if (sscanf(line, " for (int i = 0; i < %d; i++) {", &rounds) == 1) {
            (*loops)++;
            const char *body = at;
            for (int i = 0; i < rounds; i++) {
                at = body;
                while (sscanf(at, "%511[^\n]", line) == 1 && strcmp(line, "    }")) {
                    Op o;
                    if (parse_op(line, i, &o)) { assert_true(n < cap); ops[n++] = o; }
                    at = strchr(at, '\n') + 1;
                }
            }
            at = strchr(at, '\n') + 1;   /* the loop's closing brace */
            continue;
        }
        Op o;
        if (parse_op(line, 0, &o)) { assert_true(n < cap); ops[n++] = o; }
    }
    return n;
}

/* Every step_stageN of p's program, loops expanded, is its stage's
 * Program op for op; returns the number of loops. */
static int check_steps(const Plan *p, const char *name)
{
    char why[256];
    size_t n;
    PlanProgram prog;
    if (!plan_lower(p, &prog, why, sizeof why)) fail_msg("%s: %s", name, why);
    char *text = emit_text(p, why, sizeof why, &n);
    if (!text) fail_msg("%s: not emitted: %s", name, why);
    int loops_total = 0;
    for (int s = 0; s < prog.pp; s++) {
        const PlanStageProgram *sp = &prog.stages[s];
        Op *ops = calloc((size_t)sp->n_ops + 1, sizeof *ops);
        int loops, k = stage_ops(text, s, ops, sp->n_ops + 1, &loops);
        loops_total += loops;
        for (int j = 0; j < k && j < sp->n_ops; j++) {
            const PlanOp *o = &sp->ops[j];
            if (ops[j].kind != (int)o->kind || ops[j].mb != o->mb || ops[j].chunk != o->chunk ||
                ops[j].peer != o->peer)
                fail_msg("%s stage %d op %d: emitted %s(%d, %d, %d), Program %s(%d, %d, %d)",
                         name, s, j, plan_op_name((PlanOpKind)ops[j].kind), ops[j].mb,
                         ops[j].chunk, ops[j].peer, plan_op_name(o->kind), o->mb, o->chunk, o->peer);
        }
        if (k != sp->n_ops) fail_msg("%s stage %d: %d ops emitted, %d in the Program", name, s, k, sp->n_ops);
        free(ops);
    }
    plan_program_free(&prog);
    free(text);
    return loops_total;
}

static void test_steps_are_the_program(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        DslArena a;
        Plan p;
        load_case(&CASES[i], &a, &p);
        int loops = check_steps(&p, CASES[i].name);
        /* regular schedules with rounds to repeat are loops; ZB-H1 is listed */
        if (CASES[i].schedule == SCHED_ZB_H1) assert_int_equal(loops, 0);
        else if (16 / CASES[i].micro_batch >= 4 && CASES[i].pp > 1) assert_true(loops > 0);
        dsl_arena_free(&a);
    }
}

/* The same for the examples beside PLAN, at their full size (gpt3-175b:
 * 16 stages of 771 ops): loops, and the loops are the Program. */
static void test_examples_steps(void **state)
{
    (void)state;
    static const char *const names[] = { "gpt2-small", "gpt3-175b", "llama3-8b", "llama3-70b" };
    char dir[512];
    snprintf(dir, sizeof dir, "%s", plan_file);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0'; else snprintf(dir, sizeof dir, ".");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s.plan", dir, names[i]);
        DslArena a;
        DslDiag diag;
        Plan p;
        memset(&a, 0, sizeof a);
        dsl_diag_init(&diag, stderr);
        assert_int_equal(planc_load_plan(path, &a, &diag, &p), 0);
        int loops = check_steps(&p, names[i]);
        if (plan_layout_defaults(&p).pp > 1 && p.layout.schedule != SCHED_ZB_H1) assert_true(loops > 0);
        dsl_arena_free(&a);
    }
}

/* The text of step_stageS (from its head to the closing brace). */
static char *stage_text(const char *text, int s)
{
    char head[64];
    snprintf(head, sizeof head, "static void step_stage%d(void)\n{\n", s);
    const char *at = strstr(text, head), *end = at ? strstr(at, "\n}\n") : NULL;
    assert_non_null(end);
    return strndup(at, (size_t)(end - at));
}

/* The program holds its plan's code alone, and the step-level collectives
 * are lines where the Program puts them. */
static void test_one_code_path(void **state)
{
    (void)state;
    static const char *const never[] = { "\n#if", "\n#else", "if (SP", "SP ?", "RECOMPUTE",
                                         "SPLIT_BWD", "act == ", "rms ?", "L->rope", "part ==" };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const Case *c = &CASES[i];
        DslArena a;
        Plan p;
        char why[256];
        size_t n;
        load_case(c, &a, &p);
        char *text = emit_text(&p, why, sizeof why, &n);
        assert_non_null(text);
        for (size_t k = 0; k < sizeof never / sizeof never[0]; k++)
            if (strstr(text, never[k])) fail_msg("%s: the program has '%s'", c->name, never[k]);
        bool sp = strstr(c->name, "-sp") && c->tp > 1, split = c->schedule == SCHED_ZB_H1;
        /* SP's collectives exactly where SP is on */
        assert_int_equal(strstr(text, "prt_reduce_scatter(R.c->tp") != NULL, sp);
        assert_int_equal(strstr(text, "op(SP_NORM_REDUCE, -1, -1, -1);") != NULL, sp);
        /* zb-h1's halves exactly under zb-h1, the whole backward otherwise */
        assert_int_equal(strstr(text, "static void attention_bwd_input(") != NULL, split);
        assert_int_equal(strstr(text, "static void attention_bwd(") != NULL, !split);
        assert_int_equal(strstr(text, "S.att = act_alloc") != NULL, c->recompute == RECOMPUTE_SELECTIVE);
        assert_int_equal(strstr(text, "S.rc.ln = act_alloc") != NULL, c->recompute == RECOMPUTE_FULL);
        bool tied = strstr(c->name, "-tied") != NULL;
        for (int s = 0; s < c->pp; s++) {
            char *st = stage_text(text, s);
            /* the norm's sum right before the update, on every stage */
            const char *norm = strstr(st, "op(NORM_REDUCE, -1, -1, -1);");
            assert_non_null(norm);
            assert_non_null(strstr(norm, "all "));
            assert_true(strstr(norm, "op(OPT_STEP") > norm);
            /* the tied embedding's sum on the first and the last stage only */
            bool ends = tied && c->pp > 1 && (s == 0 || s == c->pp - 1);
            const char *embed = strstr(st, "op(EMBED_REDUCE, -1, -1, ");   /* peer: the other end */
            if ((embed != NULL) != ends) fail_msg("%s stage %d: EMBED_REDUCE %s", c->name, s,
                                                  ends ? "missing" : "where the Program has none");
            if (embed) assert_true(embed < norm);
            free(st);
        }
        free(text);
        dsl_arena_free(&a);
    }
}

/* The header's step time and bubble are plan_simulate's of the Program
 * the file transcribes, for every case. */
static void test_header_is_the_simulation(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        DslArena a;
        Plan p;
        char why[256], want[128];
        size_t n;
        load_case(&CASES[i], &a, &p);
        PlanProgram prog;
        PlanSimResult sim;
        assert_true(plan_lower(&p, &prog, why, sizeof why));
        assert_true(plan_simulate(&prog, &sim));
        snprintf(want, sizeof want, " *   step %.3f ms, pipeline bubble %.1f %%,", 1e3 * sim.step_time,
                 100.0 * sim.bubble_fraction);
        char *text = emit_text(&p, why, sizeof why, &n);
        assert_non_null(text);
        if (!strstr(text, want)) fail_msg("%s: the header lacks '%s'", CASES[i].name, want);
        free(text);
        plan_sim_free(&sim);
        plan_program_free(&prog);
        dsl_arena_free(&a);
    }
}

/* tiny.plan emits the golden program, byte for byte. */
static void test_golden(void **state)
{
    (void)state;
    DslArena a;
    DslDiag diag;
    Plan p;
    char why[256];
    size_t n;
    memset(&a, 0, sizeof a);
    dsl_diag_init(&diag, stderr);
    assert_int_equal(planc_load_plan(plan_file, &a, &diag, &p), 0);
    char *text = emit_text(&p, why, sizeof why, &n);
    assert_non_null(text);
    FILE *f = fopen(golden_file, "rb");
    if (!f) fail_msg("%s: cannot read it (make update-codegen-golden writes it)", golden_file);
    char *want = malloc(n + 2);
    size_t m = fread(want, 1, n + 1, f);
    fclose(f);
    if (m != n || memcmp(want, text, n)) {
        size_t line = 1, j = 0;
        for (; j < n && j < m && want[j] == text[j]; j++) line += text[j] == '\n';
        fail_msg("%s differs from `planc emit %s` at line %zu (%zu vs %zu bytes); review the "
                 "change and run make update-codegen-golden", golden_file, plan_file, line, m, n);
    }
    free(want);
    free(text);
    dsl_arena_free(&a);
}

/* Issue 30, item 5: the layer table reads as the manual says. Each row
 * names the layer by its block ("layer 3: block 1 attention") in the
 * model's order, and holds only the fields its kind reads (no activation
 * outside an MLP or MoE, no norm on the embedding or the head, no heads
 * outside attention); the parameter table's groups carry the same titles.
 * Returns the rows seen. */
static int check_layer_table(const char *text, const char *what)
{
    const char *at = strstr(text, "static const LayerSpec LAYERS[N_LAYERS] = {\n");
    if (!at) fail_msg("%s: no layer table", what);
    at = strchr(at, '\n') + 1;
    int row = 0, block = -1;
    for (; strncmp(at, "};", 2); row++) {
        const char *eol = strchr(at, '\n');
        char line[1024], want[96];
        snprintf(line, sizeof line, "%.*s", (int)(eol - at), at);
        bool attn = strstr(line, ".kind = ATTENTION,") != NULL,
             ffn = strstr(line, ".kind = MLP,") || strstr(line, ".kind = MOE,"),
             emb = strstr(line, ".kind = EMBEDDING,") != NULL, head = strstr(line, ".kind = LM_HEAD,") != NULL,
             norm = strstr(line, ".kind = NORM,") != NULL;
        if (attn + ffn + emb + head + norm != 1) fail_msg("%s: row %d has no kind: %s", what, row, line);
        block += attn;
        if (attn) snprintf(want, sizeof want, "/* layer %d: block %d attention */", row, block);
        else if (ffn) snprintf(want, sizeof want, "/* layer %d: block %d %s */", row, block,
                               strstr(line, "MOE") ? "moe" : "mlp");
        else snprintf(want, sizeof want, "/* layer %d: %s */", row, emb ? "embedding" : norm ? "final norm" : "lm_head");
        if (!strstr(line, want)) fail_msg("%s: row %d does not end with %s: %s", what, row, want, line);
        if (!ffn && (strstr(line, "ACT_") || strstr(line, ".f ="))) fail_msg("%s: row %d: an MLP's field: %s", what, row, line);
        if ((emb || head) && (strstr(line, "NORM_") || strstr(line, ".ln_"))) fail_msg("%s: row %d: a norm's field: %s", what, row, line);
        if (!attn && (strstr(line, ".h =") || strstr(line, ".window"))) fail_msg("%s: row %d: attention's field: %s", what, row, line);
        /* the parameter table's group of the same layer has the same title
         * (a tied head without a copy has no tensor: its title says so) */
        char group[112];
        snprintf(group, sizeof group, "    %.*s", (int)strlen(want) - 3, want);
        if (!strstr(text, group)) fail_msg("%s: the parameter table has no group %s", what, group);
        at = eol + 1;
    }
    return row;
}

static void test_reads_as_manual(void **state)
{
    (void)state;
    /* the layouts of the CASES: blocks split over stages and chunks, tied heads */
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        DslArena a;
        Plan p;
        char why[256];
        size_t n;
        load_case(&CASES[i], &a, &p);
        char *text = emit_text(&p, why, sizeof why, &n);
        assert_non_null(text);
        assert_int_equal(check_layer_table(text, CASES[i].name), p.model.n_layers);
        /* named as the CPU target's source; the steps' forwards name blocks, not layer numbers */
        if (strncmp(text, "/* tiny.c: generated by planc from ", 35)) fail_msg("%s: first line %.60s", CASES[i].name, text);
        assert_null(strstr(text, "(layers "));
        assert_non_null(strstr(text, "(embedding, block"));
        assert_non_null(strstr(text, " * model     tiny: 4 blocks, "));
        assert_non_null(strstr(text, " *           11 layers: embedding, blocks 0-3, final norm, lm_head "
                                     "(each block: attention, then mlp)\n"));
        free(text);
        /* another name (emit -o, build EXE.cu): its last path component */
        char *buf = NULL;
        FILE *f = open_memstream(&buf, &n);
        assert_true(cg_emit_named(&p, "some/dir/tiny_cuda.cu", f, why, sizeof why));
        fclose(f);
        assert_int_equal(strncmp(buf, "/* tiny_cuda.cu: generated by planc from ", 41), 0);
        free(buf);
        dsl_arena_free(&a);
    }
    assert_string_equal(cg_source_ext(CG_TARGET_CPU), ".c");
    assert_string_equal(cg_source_ext(CG_TARGET_CUDA), ".cu");
    /* RoPE's convention where ROPE_PARAMS is (Llama), and MoE rows (Mixtral) */
    static const char *const names[] = { "llama3-8b", "mixtral-8x7b" };
    char dir[512];
    snprintf(dir, sizeof dir, "%s", plan_file);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0'; else snprintf(dir, sizeof dir, ".");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[600], why[256];
        snprintf(path, sizeof path, "%s/%s.plan", dir, names[i]);
        DslArena a;
        DslDiag diag;
        Plan p;
        size_t n;
        memset(&a, 0, sizeof a);
        dsl_diag_init(&diag, stderr);
        assert_int_equal(planc_load_plan(path, &a, &diag, &p), 0);
        char *text = emit_text(&p, why, sizeof why, &n);
        if (!text) fail_msg("%s: %s", names[i], why);
        assert_int_equal(check_layer_table(text, names[i]), p.model.n_layers);
        const char *rope = strstr(text, "static const prt_rope ROPE_PARAMS = ");
        const char *conv = strstr(text, " * Convention: planc rotates interleaved pairs (2i, 2i+1) of each q and k head,\n");
        assert_non_null(rope);
        if (!conv || conv > rope || rope - conv > 600) fail_msg("%s: RoPE's convention is not stated at ROPE_PARAMS", names[i]);
        assert_non_null(strstr(text, "interleaved pairs (2i, 2i+1): ROPE_PARAMS says why not HF's halves */\n"
                                     "    prt_rope_fwd("));
        free(text);
        dsl_arena_free(&a);
    }
}

/* Run argv (no shell); its exit status, -1 when it did not start. */
static int run(char *const argv[])
{
    pid_t pid;
    int st;
    if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ)) return -1;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The template is C: it compiles alone against planrt.h under -Werror for
 * each combination of the features emit.c resolves. */
static void test_template_compiles(void **state)
{
    (void)state;
    static const char *const combos[][6] = {
        { NULL },
        { "-DSP=1", NULL },
        { "-DSP=1", "-DRECOMPUTE_FULL=1", "-DSPLIT_BWD=1", "-DPIPELINE=1", NULL },
        { "-DRECOMPUTE_SELECTIVE=1", "-DNORM_RMS=1", "-DMLP_SWIGLU=1", "-DROPE=1", "-DLEARNED_POS=0", NULL },
        { "-DNORM_MIXED=1", "-DMLP_ACTS_MIXED=1", "-DUSES_SYNC_PARAMS=1", "-DUSES_EMBED_REDUCE=1", "-DSPLIT_BWD=1", NULL },
        { "-DHAS_MLP=0", "-DHAS_FINAL_NORM=0", "-DUSES_REDUCE_GRADS=0", "-DUSES_GATHER_PARAMS=1", "-DMLP_RELU=1", NULL },
        { "-DHAS_BIAS=0", "-DNORM_RMS=1", "-DMLP_SWIGLU=1", "-DROPE=1", "-DLEARNED_POS=0", NULL },
        { "-DSLIDING_WINDOW=1", "-DNORM_RMS=1", "-DMLP_GEGLU=1", "-DROPE=1", "-DLEARNED_POS=0", NULL },
        { "-DSLIDING_WINDOW=1", "-DRECOMPUTE_SELECTIVE=1", "-DSPLIT_BWD=1", "-DMLP_ACTS_MIXED=1", NULL },
        { "-DDROPOUT=1", NULL },
        { "-DFP8=1", NULL },
        { "-DFP8=1", "-DSPLIT_BWD=1", "-DSP=1", "-DPIPELINE=1", "-DMLP_SWIGLU=1", NULL },
        { "-DDROPOUT=1", "-DSP=1", "-DRECOMPUTE_SELECTIVE=1", "-DSPLIT_BWD=1", "-DPIPELINE=1", NULL },
        { "-DDROPOUT=1", "-DSP=1", "-DRECOMPUTE_FULL=1", "-DSPLIT_BWD=1", "-DROPE=1", NULL },
        { "-DDROPOUT=1", "-DRECOMPUTE_FULL=1", "-DNORM_RMS=1", "-DMLP_SWIGLU=1", "-DLEARNED_POS=0", NULL },
        { "-DRECOMPUTE_FULL=1", "-DRECOMPUTE_SOME=1", NULL },   /* some blocks: REBUILT[] */
        { "-DRECOMPUTE_LN=1", "-DSP=1", "-DSPLIT_BWD=1", NULL },   /* recompute_modules layernorm */
        { "-DRECOMPUTE_LN=1", "-DRECOMPUTE_SELECTIVE=1", "-DHAS_MOE=1", "-DDROPOUT=1", NULL },
        { "-DDROPOUT=1", "-DSP=1", "-DRECOMPUTE_FULL=1", "-DRECOMPUTE_SOME=1", "-DSPLIT_BWD=1", NULL },
        { "-DHAS_MOE=1", "-DMLP_SWIGLU=1", NULL },
        { "-DHAS_MOE=1", "-DHAS_MLP=0", "-DSP=1", "-DRECOMPUTE_FULL=1", "-DSPLIT_BWD=1", NULL },
        { "-DHAS_MOE=1", "-DEXPERT_PARALLEL=1", "-DUSES_GATHER_PARAMS=1", "-DUSES_SYNC_PARAMS=1", "-DSPLIT_BWD=1", NULL },
        { "-DHAS_MOE=1", "-DEXPERT_PARALLEL=1", "-DRECOMPUTE_FULL=1", "-DSP=1", NULL },
        { "-DHAS_MOE=1", "-DMOE_SHARED_GATE=1", "-DRECOMPUTE_FULL=1", "-DEXPERT_PARALLEL=1", NULL },
        { "-DHAS_MOE=1", "-DMOE_SHARED_GATE=1", "-DSP=1", "-DRECOMPUTE_LN=1", "-DRECOMPUTE_SELECTIVE=1", NULL },
        /* context parallelism (issue 26): the CP attention, positions and the loss over SEQ */
        { "-DCONTEXT_PARALLEL=1", "-DSP=1", "-DPIPELINE=1", NULL },
        { "-DCONTEXT_PARALLEL=1", "-DRECOMPUTE_SELECTIVE=1", "-DSPLIT_BWD=1", "-DROPE=1", "-DLEARNED_POS=0", NULL },
        { "-DCONTEXT_PARALLEL=1", "-DRECOMPUTE_FULL=1", "-DRECOMPUTE_SOME=1", "-DSLIDING_WINDOW=1", NULL },
        /* issue 29's q/k norm: kept, rebuilt (all blocks, some) and zb-h1's kept gains */
        { "-DQK_NORM=1", "-DNORM_RMS=1", "-DROPE=1", "-DLEARNED_POS=0", NULL },
        { "-DQK_NORM=1", "-DRECOMPUTE_FULL=1", "-DSPLIT_BWD=1", "-DSP=1", "-DPIPELINE=1", NULL },
        { "-DQK_NORM=1", "-DRECOMPUTE_FULL=1", "-DRECOMPUTE_SOME=1", "-DCONTEXT_PARALLEL=1", NULL },
        { "-DQK_NORM=1", "-DRECOMPUTE_SELECTIVE=1", "-DSPLIT_BWD=1", "-DHAS_MOE=1", NULL },
        /* issue 29's Gemma 2 scores and logit cap: whole, zb-h1, selective, full, CP's loss */
        { "-DATTN_SCORES=1", "-DLOGIT_SOFTCAP=1", "-DSLIDING_WINDOW=1", "-DNORM_RMS=1", "-DMLP_GEGLU=1", NULL },
        { "-DATTN_SCORES=1", "-DLOGIT_SOFTCAP=1", "-DRECOMPUTE_SELECTIVE=1", "-DSPLIT_BWD=1", "-DSP=1", NULL },
        { "-DATTN_SCORES=1", "-DRECOMPUTE_FULL=1", "-DRECOMPUTE_SOME=1", "-DPIPELINE=1", NULL },
        { "-DLOGIT_SOFTCAP=1", "-DCONTEXT_PARALLEL=1", NULL },
        /* issue 29's norm_position post|sandwich: the post-norm kept, rebuilt, zb-h1's kept gains, SP */
        { "-DPOST_NORM=1", "-DNORM_RMS=1", "-DROPE=1", "-DLEARNED_POS=0", NULL },
        { "-DPOST_NORM=1", "-DQK_NORM=1", "-DSPLIT_BWD=1", "-DSP=1", "-DDROPOUT=1", NULL },
        { "-DPOST_NORM=1", "-DRECOMPUTE_FULL=1", "-DRECOMPUTE_SOME=1", "-DNORM_PLUS_ONE=1", "-DNORM_RMS=1", NULL },
        { "-DPOST_NORM=1", "-DRECOMPUTE_LN=1", "-DRECOMPUTE_SELECTIVE=1", "-DHAS_MOE=1", "-DNORM_MIXED=1", NULL },
        { "-DPOST_NORM=1", "-DHAS_MOE=1", "-DRECOMPUTE_FULL=1", "-DSP=1", "-DSPLIT_BWD=1", NULL },
        /* issue 29's multi-head latent attention: kept, rebuilt (all blocks, some), selective, SP */
        { "-DMLA=1", "-DNORM_RMS=1", "-DROPE=1", "-DLEARNED_POS=0", "-DMLP_SWIGLU=1", NULL },
        { "-DMLA=1", "-DROPE=1", "-DRECOMPUTE_FULL=1", "-DSP=1", "-DHAS_BIAS=1", NULL },
        { "-DMLA=1", "-DROPE=1", "-DRECOMPUTE_FULL=1", "-DRECOMPUTE_SOME=1", "-DSLIDING_WINDOW=1", NULL },
        { "-DMLA=1", "-DROPE=1", "-DRECOMPUTE_SELECTIVE=1", "-DRECOMPUTE_LN=1", "-DSP=1", NULL },
        { "-DMLA=1", "-DROPE=1", "-DSPLIT_BWD=1", "-DRECOMPUTE_FULL=1", "-DSP=1", NULL },
    };
    for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++) {
        char *argv[24] = { "mpicc", "-std=gnu11", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                           "-Wundef", "-Iruntime/include", "-x", "c" };
        int k = 10;
        for (int j = 0; combos[i][j]; j++) argv[k++] = (char *)combos[i][j];
        argv[k++] = "codegen/program_template.c";
        argv[k] = NULL;
        if (run(argv) != 0) fail_msg("codegen/program_template.c does not compile with combination %zu", i);
    }
}

/* A plan without a train block trains with the documented defaults
 * (docs/language.md, the train section): 10 steps at lr 1e-3, no warm-up, seed 0,
 * AdamW beta1 0.9, beta2 0.999, eps 1e-8, weight decay 0.01, clip 1.0. */
static void test_train_defaults(void **state)
{
    (void)state;
    char path[512], incl[PATH_MAX], *src = NULL;
    size_t len = 0;
    FILE *in = fopen(plan_file, "r");
    assert_non_null(in);
    FILE *mem = open_memstream(&src, &len);
    char line[512];
    int depth = -1;   /* inside the train block: its brace depth */
    while (fgets(line, sizeof line, in)) {
        if (depth < 0 && !strncmp(line, "train", 5)) depth = 0;
        if (depth >= 0) {
            for (char *c = line; *c; c++) depth += (*c == '{') - (*c == '}');
            if (depth == 0 && strchr(line, '}')) depth = -1;
            continue;
        }
        if (!strncmp(line, "include", 7)) {   /* the cluster file, by its absolute path */
            char rel[256], dir[256];
            assert_int_equal(sscanf(line, "include \"%255[^\"]\"", rel), 1);
            snprintf(dir, sizeof dir, "%s", plan_file);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = '\0'; else snprintf(dir, sizeof dir, ".");
            char joined[600];
            snprintf(joined, sizeof joined, "%s/%s", dir, rel);
            assert_non_null(realpath(joined, incl));
            fprintf(mem, "include \"%s\"\n", incl);
            continue;
        }
        fputs(line, mem);
    }
    fclose(in);
    fclose(mem);
    assert_null(strstr(src, "\ntrain"));
    snprintf(path, sizeof path, "%s/test_codegen_notrain.plan", lib_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(src, f);
    fclose(f);
    free(src);
    DslArena a;
    DslDiag diag;
    Plan p;
    char why[256];
    size_t n;
    memset(&a, 0, sizeof a);
    dsl_diag_init(&diag, stderr);
    assert_int_equal(planc_load_plan(path, &a, &diag, &p), 0);
    assert_false(p.has_train);
    char *text = emit_text(&p, why, sizeof why, &n);
    assert_non_null(text);
    assert_non_null(strstr(text, "static const long  STEPS = 10;"));
    assert_non_null(strstr(text, "static const uint64_t SEED = 0ULL;"));
    assert_non_null(strstr(text, "static const prt_adamw_cfg ADAMW = { 0.001f, 0.0001f, 0, 10, 0.9f, "
                                 "0.999f, 1e-08f, 0.01f, 1.0f };"));
    free(text);
    unlink(path);
    dsl_arena_free(&a);
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

/* Turn p's attention layers (all, or the first only) into kind mla (a
 * query latent of q_lora), RMSNorm everywhere, RoPE positions. */
static void mlaify_plan(Plan *p, int64_t q_lora, bool all)
{
    bool done = false;
    for (int i = 0; i < p->model.n_layers; i++) {
        Layer *l = &p->model.layers[i];
        if (l->kind == LAYER_EMBEDDING) l->position = POS_ROPE;
        if (l->kind != LAYER_EMBEDDING && l->kind != LAYER_LM_HEAD) l->norm = NORM_RMSNORM;
        if (l->kind != LAYER_ATTENTION || (done && !all)) continue;
        *l = (Layer){ .kind = LAYER_ATTENTION, .line = l->line, .col = l->col, .heads = l->heads,
                      .kv_heads = l->heads, .attn = ATTN_MLA, .q_lora_rank = q_lora, .kv_lora_rank = 16,
                      .qk_rope_dim = 8, .qk_nope_dim = 16, .v_head_dim = 16, .norm = NORM_RMSNORM };
        done = true;
    }
}

/* kind mla (issue 29) on tp 2 x pp 2 with SP: DeepseekV2Attention's rows
 * (the down projections and latent norms whole and tp_sum, the up
 * projections split by heads), MLA_OF, the op's calls, the TP all-reduce
 * of the partial gradients, the #error that stops nvcc; without a query
 * latent q_proj; zb-h1's split (the op's weight gradients aside in B);
 * refused by key: LayerNorm latents, MLA beside MHA, dropout. */
static void test_mla(void **state)
{
    (void)state;
    static const Case c = { "mla-sp", 1, 2, 2, 0, SCHED_1F1B, 1, RECOMPUTE_FULL, 16 };
    DslArena a;
    Plan p;
    char why[512] = "";
    size_t n;
    load_case(&c, &a, &p);
    mlaify_plan(&p, 32, true);
    char *text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("kind mla refused: %s", why);
    static const char *const want[] = {
        "\"layers.1.self_attn.q_a_proj.weight\", 1, 0, 32, 64, PRT_REPLICATED, 0, { 0, 0, 0 }, "
        "PRT_INIT_NORMAL, 0.02f, true, true,",
        "\"layers.1.self_attn.q_a_layernorm.weight\", 1, 0, 32, 1, PRT_REPLICATED, 0, { 0, 0, 0 }, "
        "PRT_INIT_ONES, 0.0f, false, true,",
        "\"layers.1.self_attn.q_b_proj.weight\", 1, 0, 96, 32, PRT_SPLIT_ROWS,",
        "\"layers.1.self_attn.kv_a_proj_with_mqa.weight\", 1, 0, 24, 64, PRT_REPLICATED, 0, { 0, 0, 0 }, "
        "PRT_INIT_NORMAL, 0.02f, true, true,",
        "\"layers.1.self_attn.kv_a_layernorm.weight\"", "\"layers.1.self_attn.kv_b_proj.weight\", 1, 0, 128, 16, "
        "PRT_SPLIT_ROWS,",
        "\"layers.1.self_attn.o_proj.weight\", 1, 0, 64, 64, PRT_SPLIT_COLS,",
        "static const MlaSpec MLA_OF[N_LAYERS] = {", "mla_attention_fwd(L, a, y);", "prt_mla_bwd(S.dlnf, &g, S.dh,",
        "a->mr = S.rc.mr;", "prt_zero_sp_norm_reduce",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i])) fail_msg("kind mla: the program lacks %s", want[i]);
    if (strstr(text, "#error \"kind mla")) fail_msg("kind mla: the program refuses CUDA (runtime/ops/mla.c serves both)");
    if (strstr(text, "attn.qkv.weight")) fail_msg("kind mla: an MHA QKV row");
    free(text);
    dsl_arena_free(&a);

    static const Case zb = { "mla", 1, 1, 2, 0, SCHED_ZB_H1, 1, RECOMPUTE_NONE, 8 };
    load_case(&zb, &a, &p);
    mlaify_plan(&p, 32, true);
    text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("kind mla under zb-h1 refused: %s", why);
    if (!strstr(text, "mla_attention_bwd_input(L, a, d);") || !strstr(text, "a->gml = KEEP_F32(mla_grad_numel(L));") ||
        !strstr(text, "mla_grads_aside(L, a, &g, true);"))
        fail_msg("kind mla under zb-h1: the B/W split of the MLA backward is missing");
    free(text);
    dsl_arena_free(&a);

    load_case(&c, &a, &p);   /* V2-Lite's form: q_proj, no query latent */
    mlaify_plan(&p, 0, true);
    text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("kind mla without q_lora_rank refused: %s", why);
    if (!strstr(text, "\"layers.1.self_attn.q_proj.weight\", 1, 0, 96, 64, PRT_SPLIT_ROWS,") ||
        strstr(text, "self_attn.q_a_proj"))
        fail_msg("kind mla without q_lora_rank: q_proj expected, no q_a_proj");
    free(text);
    dsl_arena_free(&a);

    static const struct { Case c; int how; const char *key; } bad[] = {
        { { "mla", 1, 2, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, 0, "kind mla with norm layernorm" },
        { { "mla", 1, 2, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, 1, "kind mla beside kind mha" },
        { { "mla", 2, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 8 }, 3, "dropout 0.1 with kind mla" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        load_case(&bad[i].c, &a, &p);
        mlaify_plan(&p, 32, bad[i].how != 1);
        if (bad[i].how == 0)
            for (int k = 0; k < p.model.n_layers; k++)
                if (p.model.layers[k].kind == LAYER_ATTENTION) p.model.layers[k].norm = NORM_LAYERNORM;
        if (bad[i].how == 3) p.model.dropout = 0.1;
        text = emit_text(&p, why, sizeof why, &n);
        if (text) fail_msg("%s: emitted, expected a refusal", bad[i].key);
        char need[160];
        snprintf(need, sizeof need, "%s: planc's runtime cannot honour it", bad[i].key);
        if (!strstr(why, need)) fail_msg("the refusal does not name %s: %s", bad[i].key, why);
        dsl_arena_free(&a);
    }
}

/* Recomputation: the runtime runs core_attn (today's selective) and full
 * recomputation of every block or of some (REBUILT[]: recompute_layers,
 * recompute_every); emit refuses, naming the key, the other Megatron
 * modules and torchtitan's op-level rule. */
static void test_recompute_refusals(void **state)
{
    (void)state;
    static const struct { Case c; int mods, layers, every; const char *needle, *has; } cases[] = {
        { { "sel", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE, 16 }, PLAN_RC_BIT(PLAN_RC_CORE_ATTN), 0, 0,
          NULL, "S.att" },
        { { "sel", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE, 16 }, PLAN_RC_BIT(PLAN_RC_MLP), 0, 0,
          "recompute_modules mlp: planc's runtime cannot honour it", NULL },
        { { "sel", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE, 16 },
          PLAN_RC_BIT(PLAN_RC_CORE_ATTN) | PLAN_RC_BIT(PLAN_RC_LAYERNORM), 0, 0, NULL, "norm_rebuilt(L, a);" },
        { { "ln", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE, 16 }, PLAN_RC_BIT(PLAN_RC_LAYERNORM), 0, 0,
          NULL, "S.lnr" },
        { { "sel", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE, 16 },
          PLAN_RC_BIT(PLAN_RC_LAYERNORM) | PLAN_RC_BIT(PLAN_RC_SHARED_EXPERTS), 0, 0,
          "recompute_modules shared_experts: planc's runtime cannot honour it", NULL },
        { { "op", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE_OP, 16 }, 0, 0, 0,
          "recompute selective_op: planc's runtime cannot honour it", NULL },
        { { "full", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_FULL, 16 }, 0, 0, 0, NULL, "S.rc" },
        { { "layers", 1, 1, 2, 0, SCHED_1F1B, 1, RECOMPUTE_FULL, 2 }, 0, 1, 0, NULL,
          "REBUILT[N_LAYERS] = { false, true, true, false, false, true, true, false, false, false, false }" },
        { { "uniform", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_FULL, 16 }, 0, 2, -1,
          "recompute_method uniform: planc's runtime cannot honour it", NULL },
        { { "every", 1, 1, 2, 0, SCHED_INTERLEAVED, 2, RECOMPUTE_FULL, 2 }, 0, 0, 2, NULL,
          "REBUILT[N_LAYERS] = { false, false, false, false, false, true, true, true, true, false, false }" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DslArena a;
        Plan p;
        char why[256] = "";
        size_t n;
        load_case(&cases[i].c, &a, &p);
        p.layout.recompute_modules = cases[i].mods;
        p.layout.recompute_layers = cases[i].layers;
        p.layout.recompute_every = cases[i].every > 0 ? cases[i].every : 0;
        if (cases[i].every < 0) p.layout.recompute_method = PLAN_RC_METHOD_UNIFORM;   /* -1: uniform */
        char *text = emit_text(&p, why, sizeof why, &n);
        if (cases[i].needle) {
            if (text) fail_msg("case %zu (%s): emitted, expected a refusal", i, cases[i].c.name);
            if (!strstr(why, cases[i].needle)) fail_msg("case %zu: '%s' does not name '%s'", i, why, cases[i].needle);
        } else {
            if (!text) fail_msg("case %zu (%s): refused: %s", i, cases[i].c.name, why);
            if (!strstr(text, cases[i].has)) fail_msg("case %zu (%s): no '%s'", i, cases[i].c.name, cases[i].has);
            /* only a plan that recomputes some blocks has the table; only
             * one that recomputes the attention core (core_attn, Megatron's
             * default), its shared scores, and the pre-norms, their buffer */
            assert_int_equal(strstr(text, "REBUILT[") != NULL, cases[i].layers || cases[i].every);
            bool core = cases[i].c.recompute == RECOMPUTE_SELECTIVE &&
                        (!cases[i].mods || (cases[i].mods & PLAN_RC_BIT(PLAN_RC_CORE_ATTN)));
            assert_int_equal(strstr(text, "S.att = act_alloc") != NULL, core);
            assert_int_equal(strstr(text, "S.lnr") != NULL, (cases[i].mods & PLAN_RC_BIT(PLAN_RC_LAYERNORM)) != 0);
        }
        free(text);
        dsl_arena_free(&a);
    }
}

/* The software settings and dropout: emit refuses, naming the key, each
 * one planc's runtime cannot honour on the layout, and emits the ones it
 * can (a setting that changes nothing on the layout, overlap_tp with
 * tp 1, is honoured). overlap_grad_reduce false is honoured: the reductions
 * wait for the flush, so no REDUCE_DURING arms one inside a backward.
 * dropout is honoured: its program draws masks (prt_dropout_*) with the
 * model's P, and a program without dropout has none of that code.
 * grad_accum_dtype: the runtime holds fp32 gradients, so fp32 is honoured
 * and 16-bit gradients are refused, named; so are grad_accum_fusion false
 * (its weight-gradient GEMMs accumulate, beta = 1) and cross_entropy_fusion
 * false (its loss makes no fp32 copy of the logits). */
static void test_software_refusals(void **state)
{
    (void)state;
    enum { GRAD, GATHER, NOGATHER, P2P, TP, DROP, GACC32, GACC16, GACCH, FLASH, NOFUSE, NOXENT,
           UNFUSED, UNORM, UROPE, USWIGLU, FOREACH, FORLOOP, STACK };
    static const struct { Case c; int key; const char *needle; } cases[] = {
        { { "pp2", 1, 1, 2, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, P2P, "overlap_p2p false" },
        { { "dp2", 2, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, P2P, NULL },
        { { "dp2-zero1", 2, 1, 1, 1, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, GATHER, "overlap_param_gather true" },
        { { "dp2-zero3", 2, 1, 1, 3, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, GATHER, NULL },   /* ZeRO-3 prefetches */
        { { "dp2-zero3", 2, 1, 1, 3, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, NOGATHER, "overlap_param_gather false" },
        { { "dp2", 2, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, GATHER, NULL },
        { { "tp2", 1, 2, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 4 }, TP, "overlap_tp true" },
        { { "dp2", 2, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, TP, NULL },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, DROP, NULL },
        { { "tp2-sel", 1, 2, 1, 0, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE, 4 }, DROP, NULL },
        { { "dp2-pp2", 2, 1, 2, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, GRAD, NULL },
        { { "dp2-zero2", 2, 1, 1, 2, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, GACC32, NULL },
        { { "dp2-zero2", 2, 1, 1, 2, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, GACC16, "grad_accum_dtype bf16" },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, GACCH, "grad_accum_dtype fp16" },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, FLASH, "attention_kernel fa2 (flash_attention true)" },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, NOFUSE, "grad_accum_fusion false" },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, NOXENT, "cross_entropy_fusion false" },
        /* the fusion keys change nothing on tiny (LayerNorm, GeLU, learned
         * positions): honoured; on the ops they name, refused */
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, UNFUSED, NULL },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, UNORM, "fused_norm false" },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, UROPE, "fused_rope false" },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, USWIGLU, "fused_swiglu false" },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, FOREACH, "optimizer foreach" },
        { { "dp2-zero1", 2, 1, 1, 1, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 }, FORLOOP, "optimizer forloop" },
        { { "single", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 16 }, STACK,
          "software torchtitan eager sets attention_kernel fa2" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DslArena a;
        Plan p;
        char why[256] = "";
        size_t n;
        load_case(&cases[i].c, &a, &p);
        char *plain = emit_text(&p, why, sizeof why, &n);
        if (!plain) fail_msg("%s: the defaults refused: %s", cases[i].c.name, why);
        Software *w = &p.software;
        switch (cases[i].key) {
        case GRAD:   w->overlap_grad_reduce = false; break;
        case GATHER: w->overlap_param_gather = true; break;
        case NOGATHER: w->overlap_param_gather = false; break;
        case P2P:    w->overlap_p2p = false; break;
        case TP:     w->overlap_tp = true; break;
        case DROP:   p.model.dropout = 0.1; break;
        case GACC32: w->grad_accum_dtype = DTYPE_FP32; break;
        case GACC16: w->grad_accum_dtype = DTYPE_BF16; break;
        case GACCH:  w->grad_accum_dtype = DTYPE_FP16; break;
        case FLASH:  w->attention_kernel = PLAN_ATTN_FA2; break;
        case NOFUSE: w->grad_accum_fusion = false; break;
        case NOXENT: w->cross_entropy_fusion = false; break;
        case UNFUSED: w->unfused_norm = w->unfused_rope = w->unfused_swiglu = true; break;
        case UNORM:
            w->unfused_norm = true;
            for (int k = 0; k < p.model.n_layers; k++) p.model.layers[k].norm = NORM_RMSNORM;
            break;
        case UROPE:
            w->unfused_rope = true;
            p.model.layers[0].position = POS_ROPE;
            break;
        case USWIGLU:
            w->unfused_swiglu = true;
            for (int k = 0; k < p.model.n_layers; k++)
                if (p.model.layers[k].kind == LAYER_MLP) p.model.layers[k].act = ACT_SWIGLU;
            break;
        case FOREACH: w->optimizer = PLAN_OPTIM_FOREACH; break;
        case FORLOOP: w->optimizer = PLAN_OPTIM_FORLOOP; break;
        case STACK:
            *w = plan_stack_software(plan_stack_find("torchtitan", NULL));
            break;
        }
        char *text = emit_text(&p, why, sizeof why, &n);
        if (cases[i].needle) {
            if (text) fail_msg("case %zu (%s): emitted, expected a refusal", i, cases[i].c.name);
            if (!strstr(why, cases[i].needle)) fail_msg("case %zu: '%s' does not name '%s'", i, why, cases[i].needle);
        } else {
            if (!text) fail_msg("case %zu (%s): refused: %s", i, cases[i].c.name, why);
        }
        if (cases[i].key == GRAD) {
            char *s0 = stage_text(plain, 0), *s1 = stage_text(text, 0);
            assert_non_null(s0);
            assert_non_null(s1);
            assert_non_null(strstr(s0, "REDUCE_DURING"));
            assert_null(strstr(s1, "REDUCE_DURING"));
            assert_non_null(strstr(s1, "REDUCE_GRADS"));
            free(s0); free(s1);
        }
        if (cases[i].key == DROP) {
            static const char *const drop[] = { "prt_dropout_fwd(", "prt_dropout_probs_fwd(", "prt_dropout_bwd(",
                                                "prt_attention_dropout_bwd(", "DROPOUT_P = 0.1f" };
            for (size_t j = 0; j < sizeof drop / sizeof drop[0]; j++) {
                if (!strstr(text, drop[j])) fail_msg("case %zu: dropout's program lacks %s", i, drop[j]);
                if (strstr(plain, drop[j])) fail_msg("case %zu: a program without dropout has %s", i, drop[j]);
            }
        }
        free(plain);
        free(text);
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
    /* tp and pp left out (`auto`): the job is the layout emit runs (tp 1,
     * pp 1), not a product of PLAN_AUTO */
    p.cluster.nodes = 4;
    p.layout.dp = 8; p.layout.tp = PLAN_AUTO; p.layout.pp = PLAN_AUTO;
    s = sbatch_text(&p, "/jobs/run", CG_TARGET_CPU, why, sizeof why);
    if (!s) fail_msg("tp, pp auto: %s", why);
    assert_non_null(strstr(s, "#SBATCH --ntasks=8\n"));
    free(s);
    dsl_arena_free(&a);
}

/* Emit case c to DIR/name.c (the CPU target's source) and build it;
 * returns the compiler status. */
static int build_case(const Plan *p, const char *name, const char *extra)
{
    char src[256], exe[256], why[256];
    snprintf(src, sizeof src, "%s/test_codegen_%s%s", lib_dir, name, cg_source_ext(CG_TARGET_CPU));
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

/* Compile text (a program) for the CPU as DIR/name.cu; the compiler's status. */
static int build_text(const char *text, const char *name)
{
    char src[256], exe[256], why[256];
    snprintf(src, sizeof src, "%s/test_codegen_%s.cu", lib_dir, name);
    snprintf(exe, sizeof exe, "%s/test_codegen_%s", lib_dir, name);
    FILE *f = fopen(src, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    CgRuntime rt = { "runtime/include", lib_dir, NULL };
    int st = cg_build(src, exe, CG_TARGET_CPU, &rt, why, sizeof why);
    unlink(exe);
    unlink(src);
    return st;
}

/* Issue 29 item 4: the CPU target computes in fp32, so cg_target_dtype
 * refuses a bf16 or fp16 plan for it (build --target cpu asks it) and
 * takes every dtype for CUDA; a 16-bit plan's program carries the refusal
 * as an #error under #ifndef PRT_CUDA, which stops a CPU compile: the same
 * text without those three lines compiles, so the #error is what stops it. */
static void test_target_dtype(void **state)
{
    (void)state;
    static const PlanDtype dts[] = { DTYPE_FP32, DTYPE_BF16, DTYPE_FP16 };
    static const char *const names[] = { "fp32", "bf16", "fp16" };
    for (int i = 0; i < 3; i++) {
        DslArena a;
        Plan p;
        char why[512] = "", want[128];
        size_t n;
        load_case(&CASES[0], &a, &p);
        p.model.dtype = dts[i];
        p.software.grad_accum_dtype = DTYPE_FP32;   /* fp16's default, fp16, is refused by its key */
        assert_true(cg_target_dtype(&p, CG_TARGET_CUDA, why, sizeof why));
        bool cpu = cg_target_dtype(&p, CG_TARGET_CPU, why, sizeof why);
        assert_int_equal(cpu, dts[i] == DTYPE_FP32);
        char *text = emit_text(&p, why, sizeof why, &n);
        assert_non_null(text);
        snprintf(want, sizeof want, "#ifndef PRT_CUDA\n#error \"dtype %s: the CPU target computes in fp32", names[i]);
        char *guard = strstr(text, want);
        if (cpu) {
            assert_null(strstr(text, "#error"));
        } else {
            assert_non_null(guard);
            snprintf(want, sizeof want, "planc predicts %s memory; write `dtype fp32`", names[i]);
            assert_non_null(strstr(guard, want));
        }
        if (dts[i] == DTYPE_BF16) {
            fprintf(stderr, "test_codegen: the #error below is expected (a bf16 program compiled for the CPU)\n");
            assert_int_not_equal(build_text(text, "bf16"), 0);
            char *end = strstr(guard, "#endif\n");
            assert_non_null(end);
            memmove(guard, end + strlen("#endif\n"), strlen(end + strlen("#endif\n")) + 1);
            assert_null(strstr(text, "#error"));
            assert_int_equal(build_text(text, "bf16-unguarded"), 0);
        }
        free(text);
        dsl_arena_free(&a);
    }
}

/* RoPE scaling (issue 29) reaches the program as ROPE_PARAMS with the
 * plan's values, exactly (Llama 3.1's llama3 and a YaRN of factor 40, with
 * DeepSeek-V2-Lite's mscale pair and with the pair left out); the
 * program compiles; values the formulas cannot take (set in C, past
 * sema) are refused naming rope_scaling. */
static void test_rope_scaling(void **state)
{
    (void)state;
    static const Case c = { "rope-scaling", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 1 };
    static const struct { RopeScaling r; double theta; const char *want; } ok[] = {
        { { ROPE_SCALING_LLAMA3, 8, 1, 4, 32, 1, 8192, 1, 0 }, 500000,
          "static const prt_rope ROPE_PARAMS = { PRT_ROPE_LLAMA3, 500000, 8, 1, 4, 32, 1, 8192, 1, 0 };" },
        { { ROPE_SCALING_YARN, 40, 1, 4, 32, 1, 4096, 1, 0 }, 10000,
          "static const prt_rope ROPE_PARAMS = { PRT_ROPE_YARN, 10000, 40, 1, 4, 32, 1, 4096, 1, 0 };" },
        { { ROPE_SCALING_LINEAR, 2.5, 1, 4, 32, 1, 0, 1, 0 }, 10000,
          "static const prt_rope ROPE_PARAMS = { PRT_ROPE_LINEAR, 10000, 2.5, 1, 4, 32, 1, 0, 1, 0 };" },
        /* DeepSeek-V2-Lite's pair, and one a Plan built in C leaves out (0, 0) */
        { { ROPE_SCALING_YARN, 40, 1, 4, 32, 1, 4096, 0.707, 0.707 }, 10000,
          "static const prt_rope ROPE_PARAMS = { PRT_ROPE_YARN, 10000, 40, 1, 4, 32, 1, 4096, "
          "0.70699999999999996, 0.70699999999999996 };" },
        { { ROPE_SCALING_YARN, 40, 1, 4, 32, 1, 4096, 0, 0 }, 10000,
          "static const prt_rope ROPE_PARAMS = { PRT_ROPE_YARN, 10000, 40, 1, 4, 32, 1, 4096, 0, 0 };" },
    };
    static const RopeScaling bad[] = {
        { ROPE_SCALING_LLAMA3, 8, 4, 4, 32, 1, 8192, 1, 0 },   /* high_freq_factor not above low */
        { ROPE_SCALING_YARN, 4, 1, 4, 1, 32, 4096, 1, 0 },     /* beta_fast below beta_slow */
        { ROPE_SCALING_YARN, 0.5, 1, 4, 32, 1, 4096, 1, 0 },   /* factor below 1 */
        { ROPE_SCALING_LLAMA3, 8, 1, 4, 32, 1, 0, 1, 0 },      /* no original context */
        { ROPE_SCALING_YARN, 40, 1, 4, 32, 1, 4096, -1, 1 },   /* mscale below 0 */
        { ROPE_SCALING_YARN, 40, 1, 4, 32, 1, 4096, 1, -0.5 }, /* mscale_all_dim below 0 */
    };
    for (size_t k = 0; k < sizeof ok / sizeof ok[0] + sizeof bad / sizeof bad[0]; k++) {
        DslArena a;
        Plan p;
        char why[512] = "";
        size_t n;
        bool good = k < sizeof ok / sizeof ok[0];
        load_case(&c, &a, &p);
        for (int i = 0; i < p.model.n_layers; i++) {
            Layer *l = &p.model.layers[i];
            if (l->kind != LAYER_EMBEDDING) continue;
            l->position = POS_ROPE;
            l->rope_theta = good ? ok[k].theta : 10000;
            l->rope_scaling = good ? ok[k].r : bad[k - sizeof ok / sizeof ok[0]];
        }
        char *text = emit_text(&p, why, sizeof why, &n);
        if (good) {
            if (!text) fail_msg("rope scaling %zu refused: %s", k, why);
            if (!strstr(text, ok[k].want)) fail_msg("rope scaling %zu: the program lacks '%s'", k, ok[k].want);
            if (!strstr(text, "prt_rope_fwd(a->h, B, T, (size_t)L->h, (size_t)L->hkv, (size_t)L->d, rope_of(L));") ||
                !strstr(text, "static const prt_rope *rope_of(const LayerSpec *L) { (void)L; return &ROPE_PARAMS; }") ||
                strstr(text, "ROPE_LOCAL_PARAMS"))
                fail_msg("rope scaling %zu: the forward does not rotate with ROPE_PARAMS", k);
            if (k == 0 && build_case(&p, c.name, NULL) != 0) fail_msg("the llama3 program does not compile");
        } else {
            if (text) fail_msg("rope scaling %zu: emitted, expected a refusal", k);
            if (!strstr(why, "rope_scaling: planc's runtime cannot honour it"))
                fail_msg("rope scaling %zu: the refusal does not name rope_scaling: %s", k, why);
        }
        free(text);
        dsl_arena_free(&a);
    }
}

/* Gemma 3's local RoPE base (issue 29, embedding rope_local_theta): the
 * program carries ROPE_LOCAL_PARAMS, that base unscaled, beside
 * ROPE_PARAMS (rope_theta with its rope_scaling), rotates a layer with a
 * sliding window by the first and the others by the second, forward and
 * backward, records rope_local_theta in model_config (export-hf refuses
 * it there), and compiles. */
static void test_rope_local(void **state)
{
    (void)state;
    static const Case c = { "rope-local", 1, 1, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 1 };
    DslArena a;
    Plan p;
    char why[512] = "";
    size_t n;
    load_case(&c, &a, &p);
    for (int i = 0; i < p.model.n_layers; i++) {
        Layer *l = &p.model.layers[i];
        if (l->kind == LAYER_EMBEDDING) {
            l->position = POS_ROPE;
            l->rope_theta = 1000000;
            l->rope_local_theta = 10000;
            l->rope_scaling = (RopeScaling){ ROPE_SCALING_LINEAR, 8, 1, 4, 32, 1, 0, 1, 0 };
        }
        if (l->kind == LAYER_ATTENTION) l->window = 16;
    }
    char *text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("refused: %s", why);
    static const char *const want[] = {
        "static const prt_rope ROPE_PARAMS = { PRT_ROPE_LINEAR, 1000000, 8, 1, 4, 32, 1, 0, 1, 0 };",
        "static const prt_rope ROPE_LOCAL_PARAMS = { PRT_ROPE_DEFAULT, 10000, 1, 1, 4, 32, 1, 0, 1, 0 };",
        "return L->window > 0 ? &ROPE_LOCAL_PARAMS : &ROPE_PARAMS;",
        "prt_rope_fwd(a->h, B, T, (size_t)L->h, (size_t)L->hkv, (size_t)L->d, rope_of(L));",
        "prt_rope_bwd(S.dh, B, T, h, hkv, hs, rope_of(L));", "\\\"rope_local_theta\\\": 10000, ",
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(text, want[k])) fail_msg("the local RoPE's program lacks '%s'", want[k]);
    if (build_case(&p, c.name, NULL) != 0) fail_msg("the local RoPE's program does not compile");
    free(text);
    dsl_arena_free(&a);
}

/* Issue 29's q/k norm (`qk_norm rmsnorm`, Qwen3): on tp 2 x pp 2 under
 * zb-h1 and full recomputation, every attention layer gets its q and k
 * gains (head_dim 16, ones, no decay, tp_sum: partial over TP without
 * SP), their ids in QK_NORM_W, the norm between QKV and RoPE and its
 * zb-h1 backward, and the step's TP all-reduce of them (the Program's
 * SP_NORM_REDUCE without sequence parallelism); the program compiles.
 * Without it tiny's program has none of this. With Gemma's norm_plus_one
 * (Gemma 3's q/k norm) the gains start at 0 and the program compiles;
 * OLMo-2's norm of the whole projection with it is refused, naming the
 * key. */
static void test_qk_norm(void **state)
{
    (void)state;
    static const Case c = { "qknorm-tp2-pp2", 1, 2, 2, 0, SCHED_ZB_H1, 1, RECOMPUTE_FULL, 2 };
    DslArena a;
    Plan p;
    char why[256] = "";
    size_t n;
    load_case(&c, &a, &p);
    char *plain = emit_text(&p, why, sizeof why, &n);
    assert_non_null(plain);
    static const char *const plain_never[] = { "q_norm", "QK_NORM_W", "prt_qk_norm", "SP_NORM_REDUCE" };
    for (size_t k = 0; k < sizeof plain_never / sizeof plain_never[0]; k++)
        if (strstr(plain, plain_never[k])) fail_msg("tiny's program has '%s'", plain_never[k]);
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_ATTENTION) p.model.layers[i].qk_norm = QK_NORM_RMSNORM;
    char *text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("refused: %s", why);
    static const char *const want[] = {
        "{ \"layers.1.attn.q_norm.weight\", 1, 0, 16, 1, PRT_REPLICATED, 0, { 0, 0, 0 }, PRT_INIT_ONES, 0.0f, false, true,",
        "{ \"layers.1.attn.k_norm.weight\", 1, 0, 16, 1, PRT_REPLICATED, 0, { 0, 0, 0 }, PRT_INIT_ONES, 0.0f, false, true,",
        /* tiny's attention: ln w, b, qkv w, b, out w, b, then the gains (ids 2 + 6, 2 + 6 + 1) */
        "static const int QK_NORM_W[N_LAYERS] = { -1, 8, -1, ",
        "qk_norm_fwd(L, a);", "qk_norm_bwd_kept(L, a, a->dh);", "S.rc.qkin = act_alloc(",
        "op(SP_NORM_REDUCE, -1, -1, -1); /* TP (2 ranks): all-reduce the q/k norm gains' gradients",
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(text, want[k])) fail_msg("the q/k norm's program lacks '%s'", want[k]);
    if (build_case(&p, c.name, NULL) != 0) fail_msg("the q/k norm's program does not compile");
    free(text);
    /* Gemma 3's: every norm an RMSNorm by 1 + w (norm_plus_one), the q and
     * k gains start at 0 and the runtime adds 1 to them (QK_W0) */
    p.model.norm_plus_one = true;
    for (int i = 0; i < p.model.n_layers; i++) p.model.layers[i].norm = NORM_RMSNORM;
    text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("qk_norm with norm_plus_one refused: %s", why);
    static const char *const gemma3[] = {
        "{ \"layers.1.attn.q_norm.weight\", 1, 0, 16, 1, PRT_REPLICATED, 0, { 0, 0, 0 }, PRT_INIT_ZEROS, 0.0f, false, true,",
        "{ \"layers.1.attn.k_norm.weight\", 1, 0, 16, 1, PRT_REPLICATED, 0, { 0, 0, 0 }, PRT_INIT_ZEROS, 0.0f, false, true,",
        "#define QK_W0 1.0f", "qk_norm_fwd(L, a);", "qk_norm_bwd_kept(L, a, a->dh);",
    };
    for (size_t k = 0; k < sizeof gemma3 / sizeof gemma3[0]; k++)
        if (!strstr(text, gemma3[k])) fail_msg("Gemma 3's q/k norm program lacks '%s'", gemma3[k]);
    if (build_case(&p, "qknorm-plus1-tp2-pp2", NULL) != 0) fail_msg("Gemma 3's q/k norm program does not compile");
    free(text);
    /* OLMo-2's norm of the whole projection has no 1 + w form in the runtime */
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_ATTENTION) p.model.layers[i].qk_norm = QK_NORM_RMSNORM_PROJ;
    text = emit_text(&p, why, sizeof why, &n);
    if (text) fail_msg("qk_norm rmsnorm_projection with norm_plus_one: emitted, expected a refusal");
    if (!strstr(why, "qk_norm rmsnorm_projection with norm_plus_one: planc's runtime cannot honour it"))
        fail_msg("the refusal does not name the key: %s", why);
    free(plain);
    dsl_arena_free(&a);
}

/* norm_position (issue 29): tiny with OLMo-2's post-norm on attention
 * and Gemma 2's sandwich on the MLP, tp 2 with SP, pp 2, zb-h1, full
 * recomputation: the post-norms' rows are each layer's last (the
 * attention's pre-norm rows gone), tp_sum under SP, POST_NORM_W points at
 * them, the forward, zb-h1's kept gains and the rebuilt buffers are
 * emitted and the program compiles; tiny's own program has none of it.
 * With qk_norm rmsnorm_projection as well (OLMo-2's block) the q and k
 * gains are split over TP and not summed, QK_PROJ_OF marks the layers,
 * the row sums are all-reduced over TP each way and the program
 * compiles. */
static void test_norm_position(void **state)
{
    (void)state;
    static const Case c = { "postnorm-tp2-pp2-sp", 1, 2, 2, 0, SCHED_ZB_H1, 1, RECOMPUTE_FULL, 2 };
    DslArena a;
    Plan p;
    char why[256] = "";
    size_t n;
    load_case(&c, &a, &p);
    char *plain = emit_text(&p, why, sizeof why, &n);
    assert_non_null(plain);
    static const char *const plain_never[] = { "post_norm", "POST_NORM_W", "pre_norm_bwd", "branch_out" };
    for (size_t k = 0; k < sizeof plain_never / sizeof plain_never[0]; k++)
        if (strstr(plain, plain_never[k])) fail_msg("tiny's program has '%s'", plain_never[k]);
    for (int i = 0; i < p.model.n_layers; i++) {
        if (p.model.layers[i].kind == LAYER_ATTENTION) p.model.layers[i].norm_pos = NORM_POS_POST;
        if (p.model.layers[i].kind == LAYER_MLP) p.model.layers[i].norm_pos = NORM_POS_SANDWICH;
    }
    char *text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("refused: %s", why);
    static const char *const want[] = {
        "{ \"layers.1.attn_post_norm.weight\", 1, 0, 64, 1, PRT_REPLICATED, 0, { 0, 0, 0 }, PRT_INIT_ONES, 0.0f, false, true,",
        "{ \"layers.1.attn_post_norm.bias\", 1, 0, 64, 1, PRT_REPLICATED, 0, { 0, 0, 0 }, PRT_INIT_ZEROS, 0.0f, false, true,",
        "{ \"layers.2.mlp_norm.weight\"", "{ \"layers.2.mlp_post_norm.bias\"",
        /* wte, wpe; attention: qkv w, b, out w, b, post w (6), b; mlp: norm w, b, up w, b, down w, b, post w (14) */
        "static const int POST_NORM_W[N_LAYERS] = { -1, 6, 14, ",
        "post_norm_fwd(L, a, y);", "post_norm_bwd_kept(L, a, d, S.dln)", "S.rc.po = act_alloc(",
        "norm_bwd_kept(L, a, d, S.dln);",
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(text, want[k])) fail_msg("the post-norm's program lacks '%s'", want[k]);
    if (strstr(text, "\"layers.1.attn_norm.weight\"")) fail_msg("norm_position post still has a pre-norm");
    if (build_case(&p, c.name, NULL) != 0) fail_msg("the post-norm's program does not compile");
    free(text);
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_ATTENTION) p.model.layers[i].qk_norm = QK_NORM_RMSNORM_PROJ;
    text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("qk_norm rmsnorm_projection refused: %s", why);
    static const char *const olmo2[] = {   /* OLMo-2's block: post-norms and the q/k norm of the projection */
        /* a gain per element of q (4 heads x 16) and of k, split over TP with the heads, not summed */
        "{ \"layers.1.attn.q_norm.weight\", 1, 0, 64, 1, PRT_SPLIT_ROWS, 0, { 0, 0, 0 }, PRT_INIT_ONES, 0.0f, false, false,",
        "{ \"layers.1.attn.k_norm.weight\", 1, 0, 64, 1, PRT_SPLIT_ROWS, 0, { 0, 0, 0 }, PRT_INIT_ONES, 0.0f, false, false,",
        /* attention: qkv w, b, out w, b (ids 2-5), the gains 6, 7, then the post-norm's 8 */
        "static const int QK_NORM_W[N_LAYERS] = { -1, 6, -1, ", "static const int POST_NORM_W[N_LAYERS] = { -1, 8, ",
        "static const bool QK_PROJ_OF[N_LAYERS] = { false, true, false, ",
        "prt_qk_proj_sumsq(a->qkr, a->h,", "prt_all_reduce(R.c->tp, a->qkr, a->qkr, 2 * N, PRT_FP32, PRT_SUM)",
        "prt_all_reduce(R.c->tp, S.qkdot, S.qkdot, 2 * N, PRT_FP32, PRT_SUM)", "S.qkdot = f32_alloc(2 * N);",
        "qk_norm_bwd_kept(L, a, a->dh);", "S.rc.qkin = act_alloc(",
    };
    for (size_t k = 0; k < sizeof olmo2 / sizeof olmo2[0]; k++)
        if (!strstr(text, olmo2[k])) fail_msg("OLMo-2's program lacks '%s'", olmo2[k]);
    if (build_case(&p, "olmo2-tp2-pp2-sp", NULL) != 0) fail_msg("OLMo-2's program does not compile");
    free(text);
    free(plain);
    dsl_arena_free(&a);
}

/* Gemma 2's attention and head (issue 29) resolve at emit time: with a
 * soft-cap and query_pre_attn_scalar on the attention and a soft-cap on the
 * head, the program carries ATTN_SCORES_OF (scale 1/sqrt(24), cap 50 on
 * the attention layers, zeros elsewhere) and LOGIT_CAP, calls the scored
 * attention, caps the logits before the loss and takes the cap's
 * derivative in the loss's backward; it compiles under -Werror on the
 * whole, zb-h1 and selective paths; tiny's program has none of it. CP and
 * dropout are refused naming the keys (their attention forms the scores
 * as Q K^T / sqrt(head_dim), uncapped). */
static void test_gemma2_scores(void **state)
{
    (void)state;
    static const Case c = { "gemma2-tp2-pp2", 1, 2, 2, 0, SCHED_ZB_H1, 1, RECOMPUTE_NONE, 2 };
    DslArena a;
    Plan p;
    char why[256] = "";
    size_t n;
    load_case(&c, &a, &p);
    char *plain = emit_text(&p, why, sizeof why, &n);
    assert_non_null(plain);
    static const char *const plain_never[] = { "ATTN_SCORES_OF", "LOGIT_CAP", "prt_attention_scores_",
                                               "prt_softcap_fwd", "prt_xent_softcap_bwd" };
    for (size_t k = 0; k < sizeof plain_never / sizeof plain_never[0]; k++)
        if (strstr(plain, plain_never[k])) fail_msg("tiny's program has '%s'", plain_never[k]);
    for (int i = 0; i < p.model.n_layers; i++) {
        Layer *l = &p.model.layers[i];
        if (l->kind == LAYER_ATTENTION) { l->softcap = 50; l->query_scalar = 24; }
        if (l->kind == LAYER_LM_HEAD) l->softcap = 30;
    }
    char *text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("refused: %s", why);
    static const char *const want[] = {
        "static const prt_attn_scores ATTN_SCORES_OF[N_LAYERS] = { { 0.0f, 0.0f }, { 0.204124153f, 50.0f }, "
        "{ 0.0f, 0.0f }, { 0.204124153f, 50.0f }, ",
        "static const float LOGIT_CAP = 30.0f;",
        "prt_attention_scores_fwd(out, att, qkv, b, t, h, hkv, d, w, ATTN_SCORES_OF[L - LAYERS])",
        "prt_softcap_fwd(a->logits, N * VL, LOGIT_CAP);",
        "prt_xent_softcap_bwd(a->logits, a->logits, a->mx, a->se, a->tok, N, VL, vocab0(), V,",
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(text, want[k])) fail_msg("the Gemma 2 program lacks '%s'", want[k]);
    if (strstr(text, "prt_xent_bwd(")) fail_msg("the Gemma 2 program's loss skips the cap's derivative");
    /* the dump comes after the cap: transformers' logits are capped */
    const char *cap = strstr(text, "prt_softcap_fwd(a->logits"), *dump = strstr(text, "dump_logits(a);");
    if (!cap || !dump || dump < cap) fail_msg("--dump-logits would write the logits before the cap");
    if (build_case(&p, c.name, NULL) != 0) fail_msg("the Gemma 2 zb-h1 program does not compile");
    free(text);
    p.layout.schedule = SCHED_1F1B;
    p.layout.recompute = RECOMPUTE_SELECTIVE;
    if (build_case(&p, "gemma2-sel", NULL) != 0) fail_msg("the Gemma 2 selective program does not compile");
    /* the cap alone, without the scale: the table still holds 1/sqrt(head_dim 16) */
    for (int i = 0; i < p.model.n_layers; i++) p.model.layers[i].query_scalar = 0;
    text = emit_text(&p, why, sizeof why, &n);
    if (!text || !strstr(text, "{ 0.25f, 50.0f }")) fail_msg("the cap alone: no scale 1/sqrt(16) in the table");
    free(text);
    p.model.dropout = 0.1;
    text = emit_text(&p, why, sizeof why, &n);
    if (text) fail_msg("softcap with dropout: emitted, expected a refusal");
    if (!strstr(why, "softcap or query_pre_attn_scalar with dropout 0.1: planc's runtime cannot honour it"))
        fail_msg("the dropout refusal does not name the keys: %s", why);
    p.model.dropout = 0;
    p.layout.recompute = RECOMPUTE_NONE;
    p.layout.pp = 1; p.layout.tp = 1; p.layout.dp = 2; p.layout.cp = 2; p.cluster.gpus_per_node = 4;
    p.layout.zero = 1;
    text = emit_text(&p, why, sizeof why, &n);
    if (text) fail_msg("softcap with cp 2: emitted, expected a refusal");
    if (!strstr(why, "softcap or query_pre_attn_scalar with cp 2: planc's runtime cannot honour it"))
        fail_msg("the cp refusal does not name the keys: %s", why);
    free(plain);
    dsl_arena_free(&a);
}

/* The model knobs of issue 18 resolve at emit time: a tiny model with
 * RoPE base 500000, GQA (2 kv heads), head_dim 24 on a 64 model (q 4 x 24
 * = 96 wide), a
 * sliding window of 24 of 64 tokens, `bias qkv` and GeGLU emits exactly
 * their code and table entries, and compiles under -Werror; tiny.plan
 * without them holds none of it. */
static void knobs_on(Plan *p)
{
    Model *m = &p->model;
    for (int i = 0; i < m->n_layers; i++) {
        Layer *l = &m->layers[i];
        if (l->kind == LAYER_EMBEDDING) { l->position = POS_ROPE; l->rope_theta = 500000; }
        if (l->kind == LAYER_ATTENTION) {
            l->kv_heads = 2; l->head_dim = 24; l->window = 24; l->qkv_bias_only = true;
        }
        if (l->kind == LAYER_MLP) l->act = ACT_GEGLU;
    }
}

static void test_knobs(void **state)
{
    (void)state;
    static const Case c = { "knobs-tp2-pp2", 1, 2, 2, 0, SCHED_1F1B, 1, RECOMPUTE_SELECTIVE, 2 };
    DslArena a;
    Plan p;
    char why[256] = "";
    size_t n;
    load_case(&c, &a, &p);
    char *plain = emit_text(&p, why, sizeof why, &n);
    assert_non_null(plain);
    knobs_on(&p);
    char *text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("refused: %s", why);
    static const char *const want[] = {
        "static const prt_rope ROPE_PARAMS = { PRT_ROPE_DEFAULT, 500000, 1, 1, 4, 32, 1, 0, 1, 0 };",
        "prt_geglu_fwd(out, h, n, (size_t)L->f);", "prt_geglu_bwd(dh, h, da, n, (size_t)L->f);",
        "static size_t window_of(const LayerSpec *L) { return L->window; }",
        /* tp 2: 2 of 4 query heads and 1 of 2 kv heads, head size 24, window 24;
         * QKV (2 + 2 x 1) x 24 = 96 columns, the output projection 2 x 24 */
        ".norm = NORM_LAYERNORM, .h = 2, .hkv = 1, .d = 24, .window = 24, .width = 96, .inner = 48 }",
        "\"layers.1.attn.qkv.weight\", 1, 0, 192, 64,", "\"layers.1.attn.qkv.bias\"",
        "\"layers.1.attn.out.weight\", 1, 0, 64, 96,",
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(text, want[k])) fail_msg("the knobs' program lacks '%s'", want[k]);
    static const char *const never[] = { "attn.out.bias", "prt_gelu_fwd(", "prt_swiglu", "ACT_GEGLU:" };
    for (size_t k = 0; k < sizeof never / sizeof never[0]; k++)
        if (strstr(text, never[k])) fail_msg("the knobs' program has '%s'", never[k]);
    static const char *const plain_never[] = { "prt_rope ROPE_PARAMS", "prt_geglu", "return L->window;" };
    for (size_t k = 0; k < sizeof plain_never / sizeof plain_never[0]; k++)
        if (strstr(plain, plain_never[k])) fail_msg("tiny's program has '%s'", plain_never[k]);
    if (build_case(&p, c.name, NULL) != 0) fail_msg("the knobs' program does not compile");
    free(text);
    free(plain);
    dsl_arena_free(&a);
}

/* Issue 26: context parallelism. cp 2 (of dp 2) emits the CP attention
 * with the plan's form where the attention is, T = seq/cp rows, positions
 * at global positions and the loss over SEQ; the program compiles under
 * -Werror. Dropout and MoE are refused with their key; cp 1 has no CP
 * code at all. */
static void test_cp(void **state)
{
    (void)state;
    static const Case c = { "cp2-dp2", 2, 1, 1, 1, SCHED_1F1B, 1, RECOMPUTE_NONE, 2 };
    DslArena a;
    Plan p;
    char why[256] = "";
    size_t n;
    load_case(&c, &a, &p);
    char *plain = emit_text(&p, why, sizeof why, &n);
    assert_non_null(plain);
    static const char *const plain_never[] = { "CP_FORM", "prt_cp_", "SEQ", "cp 2", "_cp_fwd(" };
    for (size_t k = 0; k < sizeof plain_never / sizeof plain_never[0]; k++)
        if (strstr(plain, plain_never[k])) fail_msg("the cp 1 program has '%s'", plain_never[k]);
    p.layout.cp = 2;
    p.cluster.gpus_per_node = 4;
    static const struct { int form; const char *name; } forms[] = {
        { PLAN_CP_RING, "PRT_CP_RING" }, { PLAN_CP_ALL_TO_ALL, "PRT_CP_ALL_TO_ALL" },
        { PLAN_CP_ALL_GATHER, "PRT_CP_ALL_GATHER" }, { PLAN_CP_HIERARCHICAL, "PRT_CP_HIERARCHICAL" },
    };
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        p.layout.cp_comm = forms[f].form;
        char *text = emit_text(&p, why, sizeof why, &n);
        if (!text) fail_msg("cp 2 %s: refused: %s", forms[f].name, why);
        const char *want[] = {
            forms[f].name, "CP = 2,", "B = 2, SEQ = 64, T = 32, N = 64,",
            "dp 2 x tp 1 x cp 2 x pp 1 = 4 ranks", "tp + TP*(cp + CP*(dp + DP*pp))",
            "CHECK(prt_cp_attention_fwd(R.c->cp, CP_FORM, a->a, att, a->h,",
            "CHECK(prt_cp_attention_bwd(R.c->cp, CP_FORM, dqkv, S.da, a->h, a->a, a->att,",
            "a->att = KEEP_ACT(cp_saved_numel(L));", "prt_position_cp_fwd(e, W(L->w2), B, T, C, SEQ, CP, R.c->coord.cp);",
            "prt_position_cp_bwd(", "1.0f / ((float)GLOBAL_BATCH * (float)SEQ)", "prt_run_start_layout(",
            "prt_batch_open(R.c, R.args.data, SEQ,",
        };
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
            if (!strstr(text, want[k])) fail_msg("cp 2 %s: the program lacks '%s'", forms[f].name, want[k]);
        static const char *const never[] = { "prt_attention_fwd(", "prt_attention_bwd(", "B * MAX_HEADS * T * T",
                                             "S.datt = " };
        for (size_t k = 0; k < sizeof never / sizeof never[0]; k++)
            if (strstr(text, never[k])) fail_msg("cp 2 %s: the program has '%s'", forms[f].name, never[k]);
        free(text);
    }
    p.layout.cp_comm = PLAN_CP_RING;
    if (build_case(&p, c.name, NULL) != 0) fail_msg("the cp 2 program does not compile");
    /* selective recomputation: the backward runs the CP forward again into the shared S.att */
    p.layout.recompute = RECOMPUTE_SELECTIVE;
    char *sel = emit_text(&p, why, sizeof why, &n);
    if (!sel) fail_msg("cp 2 selective: refused: %s", why);
    if (!strstr(sel, "S.att = act_alloc(cp_saved_max());") ||
        !strstr(sel, "CHECK(prt_cp_attention_fwd(R.c->cp, CP_FORM, a->a, S.att, a->h, B, T, h, hkv, hs,"))
        fail_msg("cp 2 selective: no rebuild of the CP attention's saved tensors");
    free(sel);
    p.layout.recompute = RECOMPUTE_NONE;
    /* what the runtime does not run: refused, naming the key */
    p.model.dropout = 0.1;
    char *text = emit_text(&p, why, sizeof why, &n);
    if (text || !strstr(why, "dropout 0.1 with cp 2: planc's runtime cannot honour it"))
        fail_msg("dropout: '%s'", text ? "emitted" : why);
    p.model.dropout = 0;
    for (int i = 0; i < p.model.n_layers; i++) {
        Layer *l = &p.model.layers[i];
        if (l->kind != LAYER_MLP) continue;
        l->kind = LAYER_MOE; l->experts = 4; l->top_k = 2; l->shared = 1; l->hidden = 32;
        l->act = ACT_SWIGLU; l->bias = false; l->aux_loss = 0.01;
    }
    text = emit_text(&p, why, sizeof why, &n);
    if (text || !strstr(why, "moe with cp 2: planc's runtime cannot honour it"))
        fail_msg("moe: '%s'", text ? "emitted" : why);
    free(plain);
    dsl_arena_free(&a);
}

/* Issue 17: every MLP of tiny made a mixture of 4 SwiGLU experts (top_k
 * 2, one shared) emits the MoE layer (Mixtral's checkpoint names with
 * global expert indices, w1 and w3 adjacent so one GEMM does both, the moe
 * columns of LAYERS, the aux loss averaged over the MoE layers), and with
 * ep 2 the expert-parallel program (the experts' own parameter group). */
/* The MoE program with every mixture's shared experts shared_hidden wide
 * (0: hidden) and gated or not; *text is the program (refusal: a failure). */
static char *text_of_gate(Plan *p, int64_t shared_hidden, bool gate, char *why, size_t len, size_t *n,
                          char **text)
{
    for (int i = 0; i < p->model.n_layers; i++)
        if (p->model.layers[i].kind == LAYER_MOE) {
            p->model.layers[i].shared_hidden = shared_hidden;
            p->model.layers[i].shared_gate = gate;
        }
    *text = emit_text(p, why, len, n);
    if (!*text) fail_msg("shared_hidden %lld, gate %d: refused: %s", (long long)shared_hidden, gate, why);
    return *text;
}

static void test_moe(void **state)
{
    (void)state;
    static const Case c = { "moe-tp2", 1, 2, 1, 0, SCHED_1F1B, 1, RECOMPUTE_NONE, 4 };
    DslArena a;
    Plan p;
    char why[256] = "";
    size_t n;
    load_case(&c, &a, &p);
    for (int i = 0; i < p.model.n_layers; i++) {
        Layer *l = &p.model.layers[i];
        if (l->kind != LAYER_MLP) continue;
        l->kind = LAYER_MOE; l->experts = 4; l->top_k = 2; l->shared = 1; l->hidden = 32;
        l->act = ACT_SWIGLU; l->bias = false; l->aux_loss = 0.01;
    }
    char *text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("refused: %s", why);
    static const char *const want[] = {
        "\"layers.2.block_sparse_moe.gate.weight\", 2, 0, 4, 64, PRT_REPLICATED",
        "\"layers.2.block_sparse_moe.experts.0.w1.weight\", 2, 0, 32, 64, PRT_SPLIT_ROWS",
        "\"layers.2.block_sparse_moe.experts.0.w3.weight\", 2, 0, 32, 64, PRT_SPLIT_ROWS",
        "\"layers.2.block_sparse_moe.experts.3.w2.weight\", 2, 0, 64, 32, PRT_SPLIT_COLS",
        "\"layers.2.block_sparse_moe.shared_experts.0.w2.weight\"",
        "\"layers.8.block_sparse_moe.experts.3.w1.weight\"",
        /* tp 2: 16 of each expert's 32, [gate | up] 32 wide; router, stride 3,
         * E 4, k 2, one shared, aux 0.01, dropless */
        ".f = 16, .act = ACT_SWIGLU, .width = 32, .inner = 16, ", ".ex_stride = 3, ",
        ".experts = 4, .top_k = 2, .shared = 1, .aux = 0.01f, .capf = 0.0f, .gate = PRT_MOE_NORM, .sgate = -1, "
        ".sf = 16, .swidth = 32, .sinner = 16, .groups = 1, .top_groups = 1, .rscale = 1.0f, .brate = 0.0f }, /* layer 2: block 0 moe */",
        "MOE_LAYERS = 4;", "static void moe_fwd(", "prt_moe_router_fwd(", "prt_moe_aux_loss(",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i])) fail_msg("the MoE program lacks '%s'", want[i]);
    assert_null(strstr(text, "mlp_fwd("));   /* no MLP left: no MLP code */
    assert_null(strstr(text, "MAX_SHARED"));  /* full recomputation's alone */
    free(text);
    /* the gates (issue 29): the score and norm_topk_prob as the row's flags,
     * the same top-k, route and combine calls */
    static const struct { MoeScore score; bool raw; const char *row; } gates[] = {
        { MOE_SCORE_SIGMOID, false, ".capf = 0.0f, .gate = PRT_MOE_SIGMOID | PRT_MOE_NORM, .sgate = -1, .sf = 16, .swidth = 32, .sinner = 16, .groups = 1, .top_groups = 1, .rscale = 1.0f, .brate = 0.0f }, /* layer 2" },
        { MOE_SCORE_SIGMOID, true, ".capf = 0.0f, .gate = PRT_MOE_SIGMOID, .sgate = -1, .sf = 16, .swidth = 32, .sinner = 16, .groups = 1, .top_groups = 1, .rscale = 1.0f, .brate = 0.0f }, /* layer 2: block 0 moe */" },
        { MOE_SCORE_SOFTMAX, true, ".capf = 0.0f, .gate = 0, .sgate = -1, .sf = 16, .swidth = 32, .sinner = 16, .groups = 1, .top_groups = 1, .rscale = 1.0f, .brate = 0.0f }, /* layer 2: block 0 moe */" },
    };
    for (size_t g = 0; g < sizeof gates / sizeof gates[0]; g++) {
        for (int i = 0; i < p.model.n_layers; i++)
            if (p.model.layers[i].kind == LAYER_MOE) {
                p.model.layers[i].score = gates[g].score;
                p.model.layers[i].topk_unnormalised = gates[g].raw;
            }
        text = emit_text(&p, why, sizeof why, &n);
        if (!text) fail_msg("gate %zu: refused: %s", g, why);
        if (!strstr(text, gates[g].row)) fail_msg("gate %zu: the program lacks '%s'", g, gates[g].row);
        if (!strstr(text, "prt_moe_topk_bwd(S.dlogits, S.dwk, a->wk, a->idx, a->rl, N, E, K, L->gate, L->rscale);"))
            fail_msg("gate %zu: the top-k backward does not read the logits and the gate", g);
        free(text);
    }
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MOE) {
            p.model.layers[i].score = MOE_SCORE_SOFTMAX;
            p.model.layers[i].topk_unnormalised = false;
        }
    /* Qwen2-MoE's shared expert (issue 29): its own width (48: 24 a TP rank,
     * [gate | up] 48), the gate's (1, C) weight after it (id 26: the shared
     * expert at 23-25), replicated, and the gate's code; none without it */
    assert_null(strstr(text_of_gate(&p, 0, 0, why, sizeof why, &n, &text), "prt_moe_shared_gate_fwd("));
    free(text);
    static const char *const want_sg[] = {
        "\"layers.2.block_sparse_moe.shared_experts.0.w1.weight\", 2, 0, 48, 64, PRT_SPLIT_ROWS",
        "\"layers.2.block_sparse_moe.shared_expert_gate.weight\", 2, 0, 1, 64, PRT_REPLICATED",
        ".capf = 0.0f, .gate = PRT_MOE_NORM, .sgate = 26, .sf = 24, .swidth = 48, .sinner = 24, .groups = 1, .top_groups = 1, .rscale = 1.0f, .brate = 0.0f }, /* layer 2: block 0 moe */",
        "prt_moe_shared_gate_fwd(a->sg, p, a->ysum, S.dz, N, C);", "prt_moe_shared_gate_bwd(",
        "CHECK(prt_all_reduce(R.c->tp, S.dz, S.dz, N, PRT_FP32, PRT_SUM));",
    };
    text_of_gate(&p, 48, 1, why, sizeof why, &n, &text);
    for (size_t i = 0; i < sizeof want_sg / sizeof want_sg[0]; i++)
        if (!strstr(text, want_sg[i])) fail_msg("the gated shared expert's program lacks '%s'", want_sg[i]);
    free(text);
    text_of_gate(&p, 0, 0, why, sizeof why, &n, &text);
    free(text);
    /* grouped routing (issue 29): the groups in the row, the top-k call reads them */
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MOE) { p.model.layers[i].route_groups = 2; p.model.layers[i].route_top_groups = 1; }
    text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("groups: refused: %s", why);
    if (!strstr(text, ".gate = PRT_MOE_NORM, .sgate = -1, .sf = 16, .swidth = 32, .sinner = 16, .groups = 2, .top_groups = 1, .rscale = 1.0f, .brate = 0.0f }, /* layer 2: block 0 moe */") ||
        !strstr(text, "prt_moe_topk_fwd(a->idx, a->wk, a->rl, N, E, K, L->gate, L->groups, L->top_groups, NULL, L->rscale);"))
        fail_msg("the grouped program lacks its groups");
    free(text);
    for (int i = 0; i < p.model.n_layers; i++)   /* DeepSeek-V2's groups by their largest score */
        if (p.model.layers[i].kind == LAYER_MOE) p.model.layers[i].route_group_score = MOE_GROUP_MAX;
    text = emit_text(&p, why, sizeof why, &n);
    if (!text || !strstr(text, ".gate = PRT_MOE_NORM | PRT_MOE_GROUP_MAX, .sgate = -1"))
        fail_msg("the program of route_group_score max lacks PRT_MOE_GROUP_MAX");
    free(text);
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MOE) p.model.layers[i].route_group_score = MOE_GROUP_TOP_SUM;
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MOE) { p.model.layers[i].route_groups = 0; p.model.layers[i].route_top_groups = 0; }
    /* routed_scale (issue 29): the row's scale, and model_config records it
       (export-hf refuses it by name) */
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MOE) p.model.layers[i].routed_scale = 2.5;
    text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("routed_scale: refused: %s", why);
    if (!strstr(text, ".groups = 1, .top_groups = 1, .rscale = 2.5f, .brate = 0.0f }, /* layer 2: block 0 moe */") ||
        !strstr(text, "\\\"routed_scale\\\": 2.5, "))
        fail_msg("the scaled program lacks its routed_scale");
    free(text);
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MOE) p.model.layers[i].routed_scale = 0;
    /* expert_bias (issue 29): the rate in the row, the biases read by the
       choice, counted per forward and stepped after the flush, saved by
       name; a program without it has none of that */
    if (strstr(text = emit_text(&p, why, sizeof why, &n), "bias_step") || strstr(text, "prt_moe_count_add"))
        fail_msg("a program without expert_bias carries its step");
    free(text);
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MOE) {
            p.model.layers[i].score = MOE_SCORE_SIGMOID;
            p.model.layers[i].expert_bias = true;
            p.model.layers[i].bias_update_rate = 1e-3;
        }
    text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("expert_bias: refused: %s", why);
    if (!strstr(text, ".rscale = 1.0f, .brate = 0.001f }, /* layer 2: block 0 moe */") ||
        !strstr(text, "L->brate > 0 ? BIAS + moe_row(L) : NULL, L->rscale);") ||
        !strstr(text, "prt_moe_count_add(COUNTS + moe_row(L), a->cnt, (size_t)L->experts);") ||
        !strstr(text, "        bias_step();") || !strstr(text, "    bias_save(dir);") ||
        !strstr(text, "\\\"expert_bias\\\": true, "))
        fail_msg("the expert_bias program lacks its bias, counts, step or checkpoint");
    free(text);
    for (int i = 0; i < p.model.n_layers; i++)
        if (p.model.layers[i].kind == LAYER_MOE) {
            p.model.layers[i].score = MOE_SCORE_SOFTMAX;
            p.model.layers[i].expert_bias = false;
            p.model.layers[i].bias_update_rate = 0;
        }
    /* ep 2 of dp 2: the experts' own group and the exchange, EXPERT_EP
     * naming each routed expert's EP rank (experts 0-1 on 0, 2-3 on 1) */
    p.layout.dp = 2;
    p.layout.ep = 2;
    p.layout.global_batch = 8;
    p.cluster.gpus_per_node = 4;
    text = emit_text(&p, why, sizeof why, &n);
    if (!text) fail_msg("ep 2: refused: %s", why);
    static const char *const want_ep[] = {
        "EP = 2,", "static const int EXPERT_EP[N_PARAMS] = {", "prt_moe_ep_to_experts(",
        "prt_zero_norm_reduce_pair(R.m, R.me,", "prt_model_dump_pair(R.m, R.me,", "prt_ep_init(R.c, EP)",
    };
    for (size_t i = 0; i < sizeof want_ep / sizeof want_ep[0]; i++)
        if (!strstr(text, want_ep[i])) fail_msg("the ep 2 program lacks '%s'", want_ep[i]);
    /* layer 2 (ids 8-25: norm 8-9, router 10, experts 0-3 at 11, 14, 17, 20
     * (w1, w3, w2 each), the shared one at 23): the router and the shared
     * expert dense, experts 0-1 on EP rank 0, 2-3 on 1 */
    const char *t = strstr(text, "EXPERT_EP[N_PARAMS] = {");
    assert_non_null(t);
    int v[26];
    t = strchr(t, '{') + 1;
    for (int i = 0; i < 26; i++) {
        char *end;
        v[i] = (int)strtol(t, &end, 10);
        t = end + 1;
    }
    static const int want_owner[26] = { -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, -1, -1, -1 };
    for (int i = 0; i < 26; i++)
        if (v[i] != want_owner[i]) fail_msg("EXPERT_EP[%d] = %d, expected %d", i, v[i], want_owner[i]);
    free(text);
    dsl_arena_free(&a);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_codegen PLAN LIBDIR GOLDEN\n");
        return 2;
    }
    plan_file = argv[1];
    lib_dir = argv[2];
    golden_file = argv[3];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_steps_are_the_program),
        cmocka_unit_test(test_examples_steps),
        cmocka_unit_test(test_one_code_path),
        cmocka_unit_test(test_header_is_the_simulation),
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_reads_as_manual),
        cmocka_unit_test(test_template_compiles),
        cmocka_unit_test(test_train_defaults),
        cmocka_unit_test(test_text_is_escaped),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_software_refusals),
        cmocka_unit_test(test_recompute_refusals),
        cmocka_unit_test(test_mla),
        cmocka_unit_test(test_padded_vocab),
        cmocka_unit_test(test_sbatch),
        cmocka_unit_test(test_compiles_with_werror),
        cmocka_unit_test(test_target_dtype),
        cmocka_unit_test(test_knobs),
        cmocka_unit_test(test_rope_scaling),
        cmocka_unit_test(test_rope_local),
        cmocka_unit_test(test_qk_norm),
        cmocka_unit_test(test_gemma2_scores),
        cmocka_unit_test(test_norm_position),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_cp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
