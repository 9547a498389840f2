/*
 * test_published.c: the `# published:` line of a validation row
 * (planner/published.c), as planc-validate reads it for `make validate`.
 *
 * Table-driven: each case is a file's text and either the figure it must
 * give (value, unit, dense passes counted, line) or the diagnostic it must
 * give ("file:line:col: error: ..." and a phrase of the message). Nothing
 * here reads a prediction: the figures are the files' own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "planner/published.h"

typedef struct {
    const char       *what;
    const char       *text;     /* the file */
    bool              ok;
    double            value;    /* ok: the figure */
    PlanPublishedUnit unit;
    double            passes;   /* ok, TFLOP/s: C / 24 */
    int               line;     /* ok: its line; else the error's */
    int               col;      /* error: its column */
    const char       *phrase;   /* error: a part of the message */
} PubCase;

#define HDR "# Some source, Table 1.\n# published-runs.md says more.\n"

static const PubCase CASES[] = {
    { "throughput, counted as 96", HDR "# published: 137 TFLOP/s per GPU, counted as 96 B s l h^2 (1 + s/6h + V/16lh)\n",
      true, 137, PLAN_PUB_TFLOPS, 4, 3, 0, NULL },
    { "throughput, counted as 72", "# published: 432.8 TFLOP/s per GPU, counted as 72 B s l h^2 (1 + s/6h + V/12lh)\n",
      true, 432.8, PLAN_PUB_TFLOPS, 3, 1, 0, NULL },
    { "throughput, count not said", "model m {}\n  #published:   155 TFLOP/s per GPU  \n", true, 155, PLAN_PUB_TFLOPS,
      4, 2, 0, NULL },
    { "step time", HDR "#\n# published: 1.42 s per step\nplan { dp 1 }\n", true, 1.42, PLAN_PUB_STEP_S, 4, 4, 0,
      NULL },
    { "step time, CRLF, no final newline", "# published: 94.42 s per step\r", true, 94.42, PLAN_PUB_STEP_S, 4, 1, 0,
      NULL },
    { "no figure line", HDR "plan { dp 1 }\n", false, 0, 0, 0, 1, 1, "no '# published:' line" },
    { "a word for the number", "# published: fast TFLOP/s per GPU\n", false, 0, 0, 0, 1, 14,
      "expected a positive number" },
    { "a negative number", "# published: -1.42 s per step\n", false, 0, 0, 0, 1, 14, "expected a positive number" },
    { "zero", "# published: 0 s per step\n", false, 0, 0, 0, 1, 14, "must be positive" },
    { "a hex number", "# published: 0x10 s per step\n", false, 0, 0, 0, 1, 14, "expected a positive number" },
    { "no unit", "# published: 137\n", false, 0, 0, 0, 1, 17, "expected 'TFLOP/s per GPU' or 's per step'" },
    { "TFLOPS", "# published: 137 TFLOPS per GPU\n", false, 0, 0, 0, 1, 18,
      "expected 'TFLOP/s per GPU' or 's per step'" },
    { "seconds spelt out", "# published: 1.42 seconds per step\n", false, 0, 0, 0, 1, 19,
      "expected 'TFLOP/s per GPU' or 's per step'" },
    { "unit glued to the number", "# published: 1.42s per step\n", false, 0, 0, 0, 1, 18,
      "expected 'TFLOP/s per GPU' or 's per step'" },
    { "a count after a step time", "# published: 1.42 s per step, counted as 96 B s l h^2\n", false, 0, 0, 0, 1, 29,
      "after 's per step'" },
    { "text after the unit", "# published: 137 TFLOP/s per GPU (Table 1)\n", false, 0, 0, 0, 1, 34,
      "', counted as C B s l h^2 ...'" },
    { "counted as a word", "# published: 137 TFLOP/s per GPU, counted as many\n", false, 0, 0, 0, 1, 46,
      "FLOP coefficient" },
    { "two figure lines", "# published: 137 TFLOP/s per GPU\n#\n# published: 1.42 s per step\n", false, 0, 0, 0, 3,
      3, "a second '# published:' line" },
};

/* Read text as the file "row.plan"; the diagnostics into *diag (malloc'd). */
static bool read_case(const PubCase *c, PlanPublished *out, DslDiag *d, char **diag)
{
    DslArena a;
    size_t len = 0;
    memset(&a, 0, sizeof a);
    FILE *f = open_memstream(diag, &len);
    dsl_diag_init(d, f);
    DslSource *src = dsl_source_from_string(&a, "row.plan", c->text, strlen(c->text));
    bool ok = plan_published_read(src, d, out);
    fclose(f);
    dsl_arena_free(&a);
    return ok;
}

static void test_published_cases(void **state)
{
    (void)state;
    int bad = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const PubCase *c = &CASES[i];
        PlanPublished p;
        DslDiag d;
        char *diag = NULL, head[64];
        memset(&p, 0, sizeof p);
        bool ok = read_case(c, &p, &d, &diag);
        snprintf(head, sizeof head, "row.plan:%d:%d: error: ", c->line, c->col);
        bool good = ok == c->ok;
        if (good && ok)
            good = p.value == c->value && p.unit == c->unit && p.line == c->line && d.n_errors == 0 &&
                   (c->unit != PLAN_PUB_TFLOPS || p.passes == c->passes);
        else if (good)
            good = d.n_errors >= 1 && !strncmp(d.first, head, strlen(head)) && strstr(d.first, c->phrase);
        if (!good) {
            fprintf(stderr, "case '%s': ok %d (want %d), value %g unit %d passes %g line %d; first error: %s\n",
                    c->what, ok, c->ok, p.value, (int)p.unit, p.passes, p.line, d.first);
            bad++;
        }
        free(diag);
    }
    assert_int_equal(bad, 0);
}

/* A malformed figure is shown like a front-end error: the line and a caret
 * under the offending word. */
static void test_published_excerpt(void **state)
{
    (void)state;
    PubCase c = { "excerpt", "model m {}\n# published: 137 TFLOPS per GPU\n", false, 0, 0, 0, 2, 18, "" };
    PlanPublished p;
    DslDiag d;
    char *diag = NULL;
    assert_false(read_case(&c, &p, &d, &diag));
    assert_non_null(strstr(diag, "    2 | # published: 137 TFLOPS per GPU\n"));
    assert_non_null(strstr(diag, "      |                  ^~~~~~\n"));
    free(diag);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_cases),
        cmocka_unit_test(test_published_excerpt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
