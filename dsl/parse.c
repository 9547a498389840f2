/*
 * parse.c: running the scanner and parser over one file, and following
 * `include` statements.
 *
 * dsl_load reads the named file, then each file it includes (the path is
 * relative to the including file's directory), and splices the included
 * statements in place of the include, so sema sees one tree whose nodes
 * still point at their own files for diagnostics. A file that includes
 * itself, directly or not, is a cycle and an error; includes nest at most
 * DSL_MAX_INCLUDE_DEPTH deep, and one load reads at most DSL_MAX_INCLUDES
 * files and DSL_MAX_TOTAL_SIZE bytes (a file may include another many
 * times, so without a total the work could grow exponentially with the
 * depth). `include` is only meaningful at the top level.
 *
 * It must not look at keys or values: that is sema's job.
 */
#include <stdlib.h>
#include <string.h>

#include "dsl/scan.h"
#include "dsl/parser.gen.h"
#include "dsl/lexer.gen.h"

int dsl_yyparse(void *scanner, DslScan *ctx);

DslFile *dsl_parse_source(DslArena *a, DslDiag *d, const DslSource *src)
{
    DslScan ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.arena = a;
    ctx.diag = d;
    ctx.src = src;
    ctx.line = ctx.col = 1;
    ctx.end_line = ctx.end_col = 1;

    yyscan_t scanner;
    if (dsl_yylex_init_extra(&ctx, &scanner) != 0) {
        dsl_error(d, dsl_loc(NULL, 0, 0, 0, 0), "cannot start the scanner");
        return NULL;
    }
    YY_BUFFER_STATE buf = dsl_yy_scan_bytes(src->text, (int)src->len, scanner);
    int rc = dsl_yyparse(scanner, &ctx);
    dsl_yy_delete_buffer(buf, scanner);
    dsl_yylex_destroy(scanner);
    if (rc != 0 && ctx.n_errors == 0) {
        /* Bison gave up without calling yyerror (its stack is exhausted). */
        dsl_error(d, dsl_loc(src, ctx.end_line, ctx.end_col, ctx.end_line, ctx.end_col),
                  "input too complex to parse");
        ctx.n_errors++;
    }
    if (ctx.n_errors) return NULL;

    DslFile *f = dsl_arena_alloc(a, sizeof *f);
    f->src = src;
    f->stmts = ctx.result;
    f->comments = ctx.comments;
    return f;
}

DslFile *dsl_parse_file(DslArena *a, DslDiag *d, const char *path)
{
    const char *why = NULL;
    DslSource *src = dsl_source_read(a, path, &why);
    if (!src) {
        dsl_error(d, dsl_loc(NULL, 0, 0, 0, 0), "cannot read '%s': %s", path, why);
        return NULL;
    }
    return dsl_parse_source(a, d, src);
}

/* The files being loaded, outermost first, for cycle detection. */
typedef struct {
    const char *real[DSL_MAX_INCLUDE_DEPTH + 1];   /* realpath, to compare */
    const char *name[DSL_MAX_INCLUDE_DEPTH + 1];   /* as spelled, to report */
    int         depth;
    int         n_files;    /* included files read so far */
    size_t      bytes;      /* bytes of every file read so far */
    bool        stopped;    /* a total limit was hit (reported once) */
} IncludeStack;

/* `dir of including file` + `/` + path, unless path is absolute. */
static char *include_path(DslArena *a, const char *including, const char *path)
{
    if (path[0] == '/') return dsl_arena_strdup(a, path);
    const char *slash = strrchr(including, '/');
    if (!slash) return dsl_arena_strdup(a, path);
    return dsl_arena_printf(a, "%.*s/%s", (int)(slash - including), including, path);
}

static DslStmt *load_rec(DslArena *a, DslDiag *d, DslFile *f, IncludeStack *st);

/* Replace one include statement by the statements of the file it names;
 * returns the first of them (NULL if the file is empty or failed). The
 * last spliced statement is stored in *last. */
static DslStmt *expand_include(DslArena *a, DslDiag *d, const DslSource *from, DslStmt *inc,
                               IncludeStack *st, DslStmt **last)
{
    *last = NULL;
    const DslValue *v = inc->args;
    if (!v || !v->text[0]) {
        dsl_error(d, inc->loc, "include needs a file name");
        return NULL;
    }
    char *path = include_path(a, from->name, v->text);
    char *real = realpath(path, NULL);
    if (!real) {
        dsl_error(d, v->loc, "cannot include '%s': file not found (looked for %s)", v->text, path);
        return NULL;
    }
    char *areal = dsl_arena_strdup(a, real);
    free(real);
    for (int i = 0; i < st->depth; i++) {
        if (strcmp(st->real[i], areal) == 0) {
            char chain[1024] = "";
            size_t n = 0;
            for (int j = i; j < st->depth && n < sizeof chain; j++)
                n += (size_t)snprintf(chain + n, sizeof chain - n, "%s -> ", st->name[j]);
            dsl_error(d, v->loc, "include cycle: %s%s", chain, path);
            return NULL;
        }
    }
    if (st->depth >= DSL_MAX_INCLUDE_DEPTH) {
        dsl_error(d, v->loc, "includes nested deeper than %d files", DSL_MAX_INCLUDE_DEPTH);
        return NULL;
    }
    if (st->n_files >= DSL_MAX_INCLUDES) {
        dsl_error(d, v->loc, "more than %d included files in all (does a file include others many times?)",
                  DSL_MAX_INCLUDES);
        st->stopped = true;
        return NULL;
    }
    const char *why = NULL;
    DslSource *src = dsl_source_read(a, path, &why);
    if (!src) {
        dsl_error(d, v->loc, "cannot include '%s': %s", path, why);
        return NULL;
    }
    st->n_files++;
    st->bytes += src->len;
    if (st->bytes > DSL_MAX_TOTAL_SIZE) {
        dsl_error(d, v->loc, "the included files come to more than %u MiB in all", DSL_MAX_TOTAL_SIZE >> 20);
        st->stopped = true;
        return NULL;
    }
    DslFile *inner = dsl_parse_source(a, d, src);
    if (!inner) return NULL;
    st->real[st->depth] = areal;
    st->name[st->depth++] = path;
    DslStmt *first = load_rec(a, d, inner, st);
    st->depth--;
    for (DslStmt *s = first; s; s = s->next) *last = s;
    return first;
}

/* Report includes inside blocks (they are only allowed at the top level). */
static void check_nested_includes(DslDiag *d, const DslStmt *s)
{
    for (; s; s = s->next) {
        if (s->kind == DSL_STMT_INCLUDE)
            dsl_error(d, s->key_loc, "include is only allowed at the top level of a file");
        if (s->kind == DSL_STMT_BLOCK) check_nested_includes(d, s->body);
    }
}

/* Splice every top-level include of f; returns the new statement list. */
static DslStmt *load_rec(DslArena *a, DslDiag *d, DslFile *f, IncludeStack *st)
{
    DslStmt *head = NULL, *tail = NULL;
    for (DslStmt *s = f->stmts, *next; s; s = next) {
        next = s->next;
        s->next = NULL;
        if (s->kind == DSL_STMT_BLOCK) check_nested_includes(d, s->body);
        if (s->kind != DSL_STMT_INCLUDE) {
            if (tail) tail->next = s;
            else head = s;
            tail = s;
            continue;
        }
        if (st->stopped) continue;   /* a total limit was hit: drop the rest */
        DslStmt *last;
        DslStmt *first = expand_include(a, d, f->src, s, st, &last);
        if (!first) continue;
        if (tail) tail->next = first;
        else head = first;
        tail = last;
    }
    return head;
}

DslFile *dsl_load(DslArena *a, DslDiag *d, const char *path)
{
    int before = d->n_errors;
    DslFile *f = dsl_parse_file(a, d, path);
    if (!f) return NULL;
    IncludeStack st = { .depth = 0, .bytes = f->src->len };
    char *real = realpath(path, NULL);
    if (real) {
        st.real[st.depth] = dsl_arena_strdup(a, real);
        st.name[st.depth++] = path;
        free(real);
    }
    f->stmts = load_rec(a, d, f, &st);
    return d->n_errors > before ? NULL : f;
}
