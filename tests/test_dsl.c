/*
 * test_dsl.c: the front end: scanner (units, numbers, strings, locations),
 * parser (both statement styles, blocks, includes, error recovery and its
 * messages) and the formatter (idempotent, tree-preserving, over every
 * example). Table-driven where the cases are alike.
 *
 * Run from the repository root (make test-dsl does), since the round-trip
 * test reads examples/.
 */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "dsl/dsl.h"
#include "dsl/scan.h"
#include "dsl/parser.gen.h"
#include "dsl/lexer.gen.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct {
    int         tok;
    DSL_YYSTYPE val;
    DSL_YYLTYPE loc;
} Tok;

/* Scan text into toks (at most max); returns the count (EOF excluded) and
 * the number of scanner errors in *errors. */
static int lex_all(DslArena *a, const char *text, Tok *toks, int max, int *errors)
{
    static char diagbuf[4096];
    FILE *devnull = fmemopen(diagbuf, sizeof diagbuf, "w");
    DslDiag d;
    dsl_diag_init(&d, devnull);
    DslSource *src = dsl_source_from_string(a, "t.plan", text, strlen(text));
    DslScan ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.arena = a;
    ctx.diag = &d;
    ctx.src = src;
    ctx.line = ctx.col = ctx.end_line = ctx.end_col = 1;
    yyscan_t sc;
    assert_int_equal(dsl_yylex_init_extra(&ctx, &sc), 0);
    YY_BUFFER_STATE b = dsl_yy_scan_bytes(src->text, (int)src->len, sc);
    int n = 0;
    for (;;) {
        Tok t;
        memset(&t, 0, sizeof t);
        t.tok = dsl_yylex(&t.val, &t.loc, sc);
        if (t.tok == 0 || n == max) break;
        toks[n++] = t;
    }
    dsl_yy_delete_buffer(b, sc);
    dsl_yylex_destroy(sc);
    fclose(devnull);
    *errors = d.n_errors;
    return n;
}

/* Parse a source string; diagnostics are kept in *diag_text (caller frees). */
static DslFile *parse_str(DslArena *a, const char *text, DslDiag *d, char **diag_text, size_t *diag_len)
{
    FILE *m = open_memstream(diag_text, diag_len);
    dsl_diag_init(d, m);
    DslSource *src = dsl_source_from_string(a, "t.plan", text, strlen(text));
    DslFile *f = dsl_parse_source(a, d, src);
    fclose(m);
    return f;
}

static char *format_to_string(const DslFile *f)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    dsl_format(m, f);
    fclose(m);
    return buf;
}

/* ---- scanner ------------------------------------------------------------ */

typedef struct {
    const char *text;
    const char *unit;       /* NULL: no unit */
    double      base;       /* value x unit scale, in base units */
    bool        is_int;
    int64_t     i;
} QuantityCase;

static void test_lex_units(void **state)
{
    (void)state;
    static const QuantityCase cases[] = {
        { "80GB",        "GB",     80e9,                 true,  80 },
        { "80 GiB",      "GiB",    80.0 * 1073741824.0,  true,  80 },
        { "1 KiB",       "KiB",    1024,                 true,  1 },
        { "2 TiB",       "TiB",    2.0 * 1099511627776.0, true, 2 },
        { "512 MB",      "MB",     512e6,                true,  512 },
        { "300GB/s",     "GB/s",   300e9,                true,  300 },
        { "200 Gb/s",    "Gb/s",   25e9,                 true,  200 },
        { "1.6 Tb/s",    "Tb/s",   200e9,                false, 0 },
        { "2.039 TB/s",  "TB/s",   2.039e12,             false, 0 },
        { "100 B/s",     "B/s",    100,                  true,  100 },
        { "312 TFLOPS",  "TFLOPS", 312e12,               true,  312 },
        { "19.5TFLOPS",  "TFLOPS", 19.5e12,              false, 0 },
        { "1 PFLOPS",    "PFLOPS", 1e15,                 true,  1 },
        { "100 GFLOPS",  "GFLOPS", 100e9,                true,  100 },
        { "5us",         "us",     5e-6,                 true,  5 },
        { "1 ms",        "ms",     1e-3,                 true,  1 },
        { "250 ns",      "ns",     250e-9,               true,  250 },
        { "2 s",         "s",      2,                    true,  2 },
        { "64 B",        "B",      64,                   true,  64 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DslArena a = { 0 };
        Tok t[4];
        int errors;
        int n = lex_all(&a, cases[i].text, t, 4, &errors);
        assert_int_equal(errors, 0);
        assert_int_equal(n, 2);              /* NUMBER, final NL */
        assert_int_equal(t[0].tok, NUMBER);
        const DslValue *v = t[0].val.value;
        assert_non_null(v->unit);
        assert_string_equal(v->unit->name, cases[i].unit);
        assert_true(fabs(v->d * v->unit->scale - cases[i].base) <= 1e-9 * cases[i].base);
        assert_int_equal(v->is_int, cases[i].is_int);
        if (cases[i].is_int) assert_int_equal(v->i, cases[i].i);
        /* the token covers the number and its unit */
        assert_int_equal(t[0].loc.first_column, 1);
        assert_int_equal(t[0].loc.last_column, (int)strlen(cases[i].text));
        dsl_arena_free(&a);
    }
}

typedef struct {
    const char *text;
    bool        is_int;
    int64_t     i;
    double      d;
} NumberCase;

static void test_lex_numbers(void **state)
{
    (void)state;
    static const NumberCase cases[] = {
        { "64",                  true,  64,                  64 },
        { "1_000_000",           true,  1000000,             1e6 },
        { "3e-4",                false, 0,                   3e-4 },
        { "0.95",                false, 0,                   0.95 },
        { "1e3",                 false, 0,                   1e3 },
        { "2.5E+2",              false, 0,                   250 },
        { "-7",                  true,  -7,                  -7 },
        { "9223372036854775807", true,  INT64_MAX,           9223372036854775807.0 },
        { "0",                   true,  0,                   0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DslArena a = { 0 };
        Tok t[4];
        int errors;
        int n = lex_all(&a, cases[i].text, t, 4, &errors);
        assert_int_equal(errors, 0);
        assert_int_equal(n, 2);
        assert_int_equal(t[0].tok, NUMBER);
        const DslValue *v = t[0].val.value;
        assert_null(v->unit);
        assert_int_equal(v->is_int, cases[i].is_int);
        if (v->is_int) assert_int_equal(v->i, cases[i].i);
        assert_true(v->d == cases[i].d);
        assert_string_equal(v->text, cases[i].text);
        dsl_arena_free(&a);
    }
}

static void test_lex_overflow_and_bad_units(void **state)
{
    (void)state;
    DslArena a = { 0 };
    Tok t[8];
    int errors;
    lex_all(&a, "99999999999999999999", t, 8, &errors);
    assert_int_equal(errors, 1);
    assert_true(t[0].val.value->overflow);
    lex_all(&a, "80 GBs", t, 8, &errors);            /* near a unit: an error */
    assert_int_equal(errors, 1);
    int n = lex_all(&a, "4 heads", t, 8, &errors);   /* far from any unit: two tokens */
    assert_int_equal(errors, 0);
    assert_int_equal(n, 3);
    assert_int_equal(t[0].tok, NUMBER);
    assert_int_equal(t[0].loc.last_column, 1);
    assert_int_equal(t[1].tok, WORD);
    assert_string_equal(t[1].val.str, "heads");
    assert_int_equal(t[1].loc.first_column, 3);
    dsl_arena_free(&a);
}

static void test_lex_names_and_keywords(void **state)
{
    (void)state;
    DslArena a = { 0 };
    Tok t[16];
    int errors;
    int n = lex_all(&a, "a100-sxm-80gb zb-h1 1f1b x.y_z true false include auto", t, 16, &errors);
    assert_int_equal(errors, 0);
    assert_int_equal(n, 9);
    static const char *const words[] = { "a100-sxm-80gb", "zb-h1", "1f1b", "x.y_z" };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(t[i].tok, WORD);
        assert_string_equal(t[i].val.str, words[i]);
    }
    assert_int_equal(t[4].tok, BOOL);
    assert_true(t[4].val.boolean);
    assert_int_equal(t[5].tok, BOOL);
    assert_false(t[5].val.boolean);
    assert_int_equal(t[6].tok, INCLUDE);
    assert_int_equal(t[7].tok, WORD);
    dsl_arena_free(&a);
}

static void test_lex_strings(void **state)
{
    (void)state;
    DslArena a = { 0 };
    Tok t[8];
    int errors;
    int n = lex_all(&a, "\"a \\\"b\\\" \\\\c\" \"\"", t, 8, &errors);
    assert_int_equal(errors, 0);
    assert_int_equal(n, 3);
    assert_int_equal(t[0].tok, STRING);
    assert_string_equal(t[0].val.str, "a \"b\" \\c");
    assert_string_equal(t[1].val.str, "");
    lex_all(&a, "\"bad \\n escape\"", t, 8, &errors);
    assert_int_equal(errors, 1);
    lex_all(&a, "\"never closed\n", t, 8, &errors);
    assert_int_equal(errors, 1);
    lex_all(&a, "\"bell \a\"", t, 8, &errors);
    assert_int_equal(errors, 1);
    lex_all(&a, "\"tab\tok\"", t, 8, &errors);
    assert_int_equal(errors, 0);
    dsl_arena_free(&a);
}

static void test_lex_locations(void **state)
{
    (void)state;
    DslArena a = { 0 };
    Tok t[16];
    int errors;
    /* line 1: "a {"   line 2: "\tb 80 GiB;  # c"   line 3: "}" */
    int n = lex_all(&a, "a {\n\tb 80 GiB;  # c\n}", t, 16, &errors);
    assert_int_equal(errors, 0);
    static const struct { int tok, line, col, last_col; } want[] = {
        { WORD, 1, 1, 1 }, { '{', 1, 3, 3 }, { NL, 1, 4, 4 },
        { WORD, 2, 2, 2 }, { NUMBER, 2, 4, 9 }, { ';', 2, 10, 10 }, { NL, 2, 16, 16 },
        { '}', 3, 1, 1 },  { NL, 3, 2, 2 },
    };
    assert_int_equal(n, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < n; i++) {
        assert_int_equal(t[i].tok, want[i].tok);
        assert_int_equal(t[i].loc.first_line, want[i].line);
        assert_int_equal(t[i].loc.first_column, want[i].col);
        assert_int_equal(t[i].loc.last_column, want[i].last_col);
    }
    dsl_arena_free(&a);
}

static void test_lex_stray_characters(void **state)
{
    (void)state;
    DslArena a = { 0 };
    Tok t[8];
    int errors;
    int n = lex_all(&a, "dp = 2 \x01", t, 8, &errors);
    assert_int_equal(errors, 2);          /* '=' and the control byte */
    assert_int_equal(n, 3);               /* dp, 2, NL: scanning went on */
    dsl_arena_free(&a);
}

/* ---- parser ------------------------------------------------------------- */

static void test_parse_statement_styles(void **state)
{
    (void)state;
    DslArena a = { 0 };
    DslDiag d;
    char *txt;
    size_t len;
    DslFile *semi = parse_str(&a, "m x { a 1; b 2 GiB; c { d \"s\" } }", &d, &txt, &len);
    free(txt);
    assert_non_null(semi);
    DslFile *lines = parse_str(&a, "m x {\n  a 1\n  b 2GiB\n\n  c {\n d \"s\"\n}\n}\n", &d, &txt, &len);
    free(txt);
    assert_non_null(lines);
    DslFile *mixed = parse_str(&a, "# c\nm x { a 1\n b 2 GiB;; c { d \"s\"; } ; }", &d, &txt, &len);
    free(txt);
    assert_non_null(mixed);
    assert_true(dsl_ast_equal(semi->stmts, lines->stmts));
    assert_true(dsl_ast_equal(semi->stmts, mixed->stmts));
    DslFile *other = parse_str(&a, "m x { a 1; b 2 GB; c { d \"s\" } }", &d, &txt, &len);
    free(txt);
    assert_false(dsl_ast_equal(semi->stmts, other->stmts));   /* GiB != GB */
    dsl_arena_free(&a);
}

static void test_parse_tree_shape(void **state)
{
    (void)state;
    DslArena a = { 0 };
    DslDiag d;
    char *txt, *dump;
    size_t len, dlen;
    DslFile *f = parse_str(&a, "include \"c.plan\"\nmodel t {\n  repeat 2 { attention { heads 4 } }\n  x true 3e-4 w\n}\n",
                           &d, &txt, &len);
    free(txt);
    assert_non_null(f);
    FILE *m = open_memstream(&dump, &dlen);
    dsl_ast_dump(m, f->stmts, 0);
    fclose(m);
    assert_string_equal(dump,
                        "include include string:\"c.plan\"\n"
                        "block model word:t\n"
                        "  block repeat int:2\n"
                        "    block attention\n"
                        "      entry heads int:4\n"
                        "  entry x bool:true float:0.00029999999999999997 word:w\n");
    free(dump);
    const DslStmt *model = f->stmts->next;
    assert_int_equal(model->key_loc.line, 2);
    assert_int_equal(model->open.line, 2);
    assert_int_equal(model->open.col, 9);
    assert_int_equal(model->close.line, 5);
    dsl_arena_free(&a);
}

typedef struct {
    const char *text;
    int         errors;     /* how many syntax errors, all in one run */
    const char *first;      /* the first diagnostic line, exactly */
} SyntaxCase;

static void test_parse_errors(void **state)
{
    (void)state;
    static const SyntaxCase cases[] = {
        { "model m {\n  vocab 1\n", 1, "t.plan:2:10: error: '}' expected (to close '{' at line 1)" },
        { "a { b { c 1 }\n", 1, "t.plan:1:14: error: '}' expected (to close '{' at line 1)" },
        { "a 1\n}\n", 1, "t.plan:2:1: error: '}' without a matching '{'" },
        { "a { 1 b }\n", 1, "t.plan:1:5: error: unexpected number (a statement starts with a key name: key value ...)" },
        { "a {\n  1 x\n  \"s\"\n  b 2\n}\n", 2,
          "t.plan:2:3: error: unexpected number (a statement starts with a key name: key value ...)" },
        { "model m\n{\n  a 1\n}\n", 1, "t.plan:2:1: error: '{' must be on the same line as the statement it opens" },
        { "a include \"x\"\n", 1, "t.plan:1:3: error: unexpected 'include'" },
        { "a = 1; b $ 2\n", 2, "t.plan:1:3: error: stray '=' in input" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DslArena a = { 0 };
        DslDiag d;
        char *txt;
        size_t len;
        DslFile *f = parse_str(&a, cases[i].text, &d, &txt, &len);
        if (strcmp(d.first, cases[i].first) != 0 || d.n_errors != cases[i].errors)
            fprintf(stderr, "case %zu: got %d errors:\n%s", i, d.n_errors, txt);
        assert_null(f);
        assert_string_equal(d.first, cases[i].first);
        assert_int_equal(d.n_errors, cases[i].errors);
        assert_int_equal(dsl_diag_exit_code(&d), 2);
        free(txt);
        dsl_arena_free(&a);
    }
}

/* Text as editors write it: one diagnostic per non-ASCII character (named,
 * with a hint), a BOM skipped, an unclosed block found at the next
 * top-level keyword with recovery after it. `caret` is the excerpt's caret
 * line, or NULL not to check it. */
typedef struct {
    const char *text;
    int         errors;
    const char *first;
    const char *caret;
} EditorCase;

static void test_text_as_editors_write_it(void **state)
{
    (void)state;
    static const EditorCase cases[] = {
        { "\xef\xbb\xbf" "a 1\n", 0, "", NULL },
        { "\xef\xbb\xbf" "a $\n", 1, "t.plan:1:3: error: stray '$' in input", "      |   ^" },
        { "l { latency 5 \xc2\xb5s }\n", 1,
          "t.plan:1:15: error: stray U+00B5 '\xc2\xb5' in input; write 'us' for microseconds", NULL },
        { "l { latency 5\xce\xbcs }\n", 1,
          "t.plan:1:14: error: stray U+03BC '\xce\xbc' in input; write 'us' for microseconds", NULL },
        { "model caf\xc3\xa9 {}\n", 1,
          "t.plan:1:10: error: stray U+00E9 '\xc3\xa9' in input; names are ASCII (letters a-z A-Z, digits, '_', "
          "'.', '-')", NULL },
        /* columns count bytes; the caret counts characters */
        { "a \xc3\xa9 = 1\n", 2, "t.plan:1:3: error: stray U+00E9 '\xc3\xa9' in input; names are ASCII "
          "(letters a-z A-Z, digits, '_', '.', '-')", "      |   ^" },
        { "a \xe2\x80\x94 $\n", 2, "t.plan:1:3: error: stray U+2014 '\xe2\x80\x94' in input; write '-'", NULL },
        { "\xe2\x80\x94\xc3\xa9$\n", 3, "t.plan:1:1: error: stray U+2014 '\xe2\x80\x94' in input; write '-'", NULL },
        { "a\xc2\xa0" "1\n", 1, "t.plan:1:2: error: stray U+00A0 (no-break space) in input; use a plain space", NULL },
        { "d \xe2\x80\x9cx.bin\xe2\x80\x9d\n", 1,
          "t.plan:1:3: error: string in curly quotes; write straight double quotes: \"x.bin\"", "      |   ^~~~~~~" },
        { "a \xe2\x80\x99s\n", 1,
          "t.plan:1:3: error: stray U+2019 '\xe2\x80\x99' in input; strings take straight double quotes: \"...\"", NULL },
        { "a \xe2\x86\x92 b\n", 1, "t.plan:1:3: error: stray U+2192 '\xe2\x86\x92' in input (outside strings and "
          "comments a .plan file is ASCII)", NULL },
        { "a 1 \xef\xbb\xbf\n", 1, "t.plan:1:5: error: stray U+FEFF (byte-order mark) in input; a byte-order mark "
          "is only allowed at the start of a file", NULL },
        /* invalid UTF-8: one error per bad sequence, naming its first byte */
        { "a \xe9\xa0 b \xff\xfe\n", 2,
          "t.plan:1:3: error: stray byte 0xe9 in input (not valid UTF-8; save the file as UTF-8)", NULL },
        { "a \xc3\xa9\xa9\n", 2, "t.plan:1:3: error: stray U+00E9 '\xc3\xa9' in input; names are ASCII (letters "
          "a-z A-Z, digits, '_', '.', '-')", NULL },
        { "# \xc2\xb5 and \xe9 in a comment\nd \"\xc2\xb5s\"\n", 0, "", NULL },
        /* a top-level keyword inside a block: the unclosed '{', then recovery */
        { "model m {\n  r 4 {\n    a {}\n  x 1\n}\ncluster c {\n  n = 1\n}\n", 2,
          "t.plan:6:1: error: '{' at line 2 is not closed before 'cluster'", NULL },
        { "cluster c {\n  link intra { b 1\n  n 2\n}\nplan { dp 1 }\n", 1,
          "t.plan:5:1: error: '{' at line 2 is not closed before 'plan'", NULL },
        { "model m {\n  a 1\ntrain { steps 1 }\nplan {}\n", 1,
          "t.plan:3:1: error: '{' at line 1 is not closed before 'train'", NULL },
        { "a {\n  b {\n    c 1\n}\n", 1, "t.plan:4:2: error: '}' expected (to close '{' at line 2)", NULL },
        { "a {\n  b 1\ninclude \"x.plan\"\n", 1, "t.plan:3:1: error: '{' at line 1 is not closed before 'include'",
          NULL },
        { "a {\n  include \"x.plan\"\n}\n", 0, "", NULL },   /* indented: parse.c's "only at the top level" */
        { "a {\n  model 1 }\n", 1, "t.plan:2:3: error: '{' at line 1 is not closed before 'model'", NULL },
        { "cluster c {\n  nodes 1\n  plan {\n    dp 1\n  }\n}\nmodel m { = }\n", 2,
          "t.plan:3:3: error: '{' at line 1 is not closed before 'plan'", NULL },   /* then only the '=' */
        { "a { model 1 }\n", 0, "", NULL },   /* not first on its line: sema's unknown key */
        { "a {\n  b model }\n", 0, "", NULL },   /* a value, not a statement */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DslArena a = { 0 };
        DslDiag d;
        char *txt;
        size_t len;
        DslFile *f = parse_str(&a, cases[i].text, &d, &txt, &len);
        if (strcmp(d.first, cases[i].first) != 0 || d.n_errors != cases[i].errors)
            fprintf(stderr, "case %zu: got %d errors:\n%s", i, d.n_errors, txt);
        assert_string_equal(d.first, cases[i].first);
        assert_int_equal(d.n_errors, cases[i].errors);
        if (cases[i].errors == 0) assert_non_null(f);
        else assert_null(f);
        if (cases[i].caret) {
            /* the caret line is the third line of the output */
            const char *l3 = strchr(strchr(txt, '\n') + 1, '\n') + 1;
            size_t n = strcspn(l3, "\n");
            if (strlen(cases[i].caret) != n || strncmp(l3, cases[i].caret, n) != 0)
                fprintf(stderr, "case %zu: caret line '%.*s'\n", i, (int)n, l3);
            assert_int_equal(n, strlen(cases[i].caret));
            assert_memory_equal(l3, cases[i].caret, n);
        }
        free(txt);
        dsl_arena_free(&a);
    }
}

static void test_parse_diagnostic_format(void **state)
{
    (void)state;
    DslArena a = { 0 };
    DslDiag d;
    char *txt;
    size_t len;
    parse_str(&a, "x {\n\ty 80 GBs\n}\n", &d, &txt, &len);
    assert_string_equal(txt,
                        "t.plan:2:7: error: unknown unit 'GBs'; did you mean 'GB/s'?\n"
                        "    2 | \ty 80 GBs\n"
                        "      | \t     ^~~\n");
    free(txt);
    dsl_arena_free(&a);
}

static void test_parse_limits(void **state)
{
    (void)state;
    /* Deep nesting stops at the limit with one error, quickly. */
    size_t n = 100000;
    char *deep = malloc(2 * n + 1);
    for (size_t i = 0; i < n; i++) {
        deep[2 * i] = 'x';
        deep[2 * i + 1] = '{';
    }
    deep[2 * n] = '\0';
    DslArena a = { 0 };
    DslDiag d;
    char *txt;
    size_t len;
    assert_null(parse_str(&a, deep, &d, &txt, &len));
    assert_int_equal(d.n_errors, 1);
    assert_non_null(strstr(d.first, "nested deeper than 32 levels"));
    free(txt);
    free(deep);
    /* Many errors are counted, but the printed list stops. */
    char *many = malloc(4 * 1000 + 1);
    for (int i = 0; i < 1000; i++) memcpy(many + 4 * i, "1 \n\n", 4);
    many[4000] = '\0';
    assert_null(parse_str(&a, many, &d, &txt, &len));
    assert_true(d.n_errors > DSL_MAX_PRINTED_ERRORS);
    assert_non_null(strstr(txt, "too many errors"));
    free(txt);
    free(many);
    dsl_arena_free(&a);
}

static void test_load_includes(void **state)
{
    (void)state;
    char dir[] = "/tmp/planc-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p1[64], p2[64], p3[64];
    snprintf(p1, sizeof p1, "%s/top.plan", dir);
    snprintf(p2, sizeof p2, "%s/sub", dir);
    assert_int_equal(mkdir(p2, 0700), 0);
    snprintf(p2, sizeof p2, "%s/sub/c.plan", dir);
    snprintf(p3, sizeof p3, "%s/sub/d.plan", dir);
    FILE *f = fopen(p1, "w");
    fputs("\xef\xbb\xbf" "a 1\ninclude \"sub/c.plan\"\nb 2\n", f);   /* a BOM is skipped, */
    fclose(f);
    f = fopen(p2, "w");
    fputs("\xef\xbb\xbf" "c 3\ninclude \"d.plan\"\n", f);     /* also in an included file; relative to sub/ */
    fclose(f);
    f = fopen(p3, "w");
    fputs("d 4\n", f);
    fclose(f);
    DslArena a = { 0 };
    DslDiag d;
    dsl_diag_init(&d, stderr);
    DslFile *file = dsl_load(&a, &d, p1);
    assert_non_null(file);
    const char *keys[] = { "a", "c", "d", "b" };
    const DslStmt *s = file->stmts;
    for (int i = 0; i < 4; i++, s = s->next) {
        assert_non_null(s);
        assert_string_equal(s->key, keys[i]);
    }
    assert_null(s);
    assert_string_equal(file->stmts->next->loc.src->name, p2);   /* nodes keep their file */
    assert_int_equal(file->stmts->key_loc.col, 1);                /* columns start after the BOM */
    assert_int_equal(file->stmts->next->key_loc.col, 1);
    remove(p3);
    remove(p2);
    remove(p1);
    snprintf(p2, sizeof p2, "%s/sub", dir);
    rmdir(p2);
    rmdir(dir);
    dsl_arena_free(&a);
}

/* ---- formatter ---------------------------------------------------------- */

static void test_format_canonical(void **state)
{
    (void)state;
    DslArena a = { 0 };
    DslDiag d;
    char *txt;
    size_t len;
    const char *src =
        "# header\n"
        "\n"
        "model   m {   # the model\n"
        "  vocab 256;seq 64\n"
        "\n\n"
        "  embedding {\n dim 64 }\n"
        "  # before the blocks\n"
        "  repeat 2 { attention { heads 4 }; mlp { hidden 256 ; act gelu } }\n"
        "  data \"a\\\"b\"   # trailing\n"
        "  empty { }\n"
        "  bw 300GB/s\n"
        "}\n"
        "# footer\n";
    DslFile *f = parse_str(&a, src, &d, &txt, &len);
    free(txt);
    assert_non_null(f);
    char *out = format_to_string(f);
    assert_string_equal(out,
                        "# header\n"
                        "\n"
                        "model m {  # the model\n"
                        "    vocab 256\n"
                        "    seq 64\n"
                        "\n"
                        "    embedding { dim 64 }\n"
                        "    # before the blocks\n"
                        "    repeat 2 {\n"
                        "        attention { heads 4 }\n"
                        "        mlp { hidden 256; act gelu }\n"
                        "    }\n"
                        "    data \"a\\\"b\"  # trailing\n"
                        "    empty {}\n"
                        "    bw 300 GB/s\n"
                        "}\n"
                        "# footer\n");
    free(out);
    dsl_arena_free(&a);
}

/* fmt(fmt(x)) == fmt(x) byte for byte, and parse(fmt(x)) == parse(x).
 * Returns false (and checks nothing) for a file that does not parse when
 * that is allowed. */
static bool check_round_trip(const char *path, bool may_fail)
{
    DslArena a = { 0 };
    DslDiag d;
    FILE *quiet = fopen("/dev/null", "w");
    dsl_diag_init(&d, may_fail ? quiet : stderr);
    DslFile *f = dsl_parse_file(&a, &d, path);
    fclose(quiet);
    if (!f && may_fail) {
        dsl_arena_free(&a);
        return false;
    }
    if (!f) fail_msg("%s does not parse", path);
    char *once = format_to_string(f);
    char *txt;
    size_t len;
    DslFile *g = parse_str(&a, once, &d, &txt, &len);
    if (!g) fail_msg("fmt output of %s does not parse:\n%s", path, txt);
    free(txt);
    if (!dsl_ast_equal(f->stmts, g->stmts)) fail_msg("fmt changed the tree of %s", path);
    char *twice = format_to_string(g);
    if (strcmp(once, twice) != 0) fail_msg("fmt is not idempotent on %s:\n%s\n---\n%s", path, once, twice);
    free(once);
    free(twice);
    dsl_arena_free(&a);
    return true;
}

/* Round-trip every .plan file of dir; returns how many were checked. */
static int round_trip_dir(const char *dir, bool may_fail)
{
    DIR *dp = opendir(dir);
    if (!dp) fail_msg("cannot open %s (run from the repository root)", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".plan") != 0) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        n += check_round_trip(path, may_fail);
    }
    closedir(dp);
    return n;
}

static void test_format_round_trip_examples(void **state)
{
    (void)state;
    int n = round_trip_dir("examples", false) + round_trip_dir("examples/clusters", false);
    assert_true(n >= 9);   /* 5 examples + 4 clusters at least */
}

/* The malformed corpus is mostly well-formed syntax with wrong meaning:
 * a good stress test of the formatter's comment and layout rules. */
static void test_format_round_trip_bad_corpus(void **state)
{
    (void)state;
    int n = round_trip_dir("tests/bad", true);
    assert_true(n >= 30);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lex_units),
        cmocka_unit_test(test_lex_numbers),
        cmocka_unit_test(test_lex_overflow_and_bad_units),
        cmocka_unit_test(test_lex_names_and_keywords),
        cmocka_unit_test(test_lex_strings),
        cmocka_unit_test(test_lex_locations),
        cmocka_unit_test(test_lex_stray_characters),
        cmocka_unit_test(test_parse_statement_styles),
        cmocka_unit_test(test_parse_tree_shape),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_diagnostic_format),
        cmocka_unit_test(test_parse_limits),
        cmocka_unit_test(test_text_as_editors_write_it),
        cmocka_unit_test(test_load_includes),
        cmocka_unit_test(test_format_canonical),
        cmocka_unit_test(test_format_round_trip_examples),
        cmocka_unit_test(test_format_round_trip_bad_corpus),
    };
    return cmocka_run_group_tests_name("dsl", tests, NULL, NULL);
}
