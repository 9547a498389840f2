/*
 * fuzz_fmt.c: libFuzzer target for `planc fmt`'s promise (dsl.h): for any
 * input that parses, printing it in canonical form and parsing the output
 * gives an equal tree (dsl_ast_equal), and formatting that tree again gives
 * the same bytes (fmt is idempotent). An input that breaks either property
 * aborts with both texts on stderr, which libFuzzer reports as a crash.
 *
 * Built like fuzz_check.c (tests/fuzz.mk), and replayed over the kept
 * inputs by `make test-fuzz-regress`.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"

/* The canonical form of f, malloc'ed (the caller frees it). */
static char *format_to_string(const DslFile *f, size_t *len)
{
    char *buf = NULL;
    FILE *m = open_memstream(&buf, len);
    if (!m) abort();
    dsl_format(m, f);
    fclose(m);
    return buf;
}

/* A broken promise: show what was compared, then crash for libFuzzer. */
static void fail(const char *what, const char *in, size_t in_len, const char *a, const char *b)
{
    fprintf(stderr, "fuzz_fmt: %s\n---- input\n%.*s\n---- first format\n%s\n---- second\n%s\n----\n", what,
            (int)in_len, in, a, b ? b : "(none)");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    DslArena a = { 0 };
    DslDiag d;
    DslFile *f = fuzz_parse(&a, &d, data, size);
    if (!f) {
        dsl_arena_free(&a);
        return 0;
    }
    size_t len1, len2;
    char *once = format_to_string(f, &len1);
    DslDiag d2;
    dsl_diag_init(&d2, stderr);
    DslSource *src2 = dsl_source_from_string(&a, "formatted.plan", once, len1);
    DslFile *g = dsl_parse_source(&a, &d2, src2);
    if (!g) fail("the formatted text does not parse", (const char *)data, size, once, NULL);
    if (!dsl_ast_equal(f->stmts, g->stmts)) fail("formatting changed the tree", (const char *)data, size, once, NULL);
    char *twice = format_to_string(g, &len2);
    if (len1 != len2 || memcmp(once, twice, len1) != 0)
        fail("formatting is not idempotent", (const char *)data, size, once, twice);
    free(once);
    free(twice);
    dsl_arena_free(&a);
    return 0;
}
