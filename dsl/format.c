/*
 * format.c: `planc fmt`, the canonical form of a .plan file.
 *
 * Rules (they depend only on the tree and the comments' places, which is
 * what makes formatting idempotent):
 *   - one statement per line, no ';', four spaces per nesting level (but a
 *     key model, cluster, plan or train inside a block follows a ';', as
 *     first on its line it would read as a missing '}');
 *   - a block whose body is at most four entries (no nested blocks) and no
 *     comments is printed on one line if that line fits in 80 columns:
 *     `attention { heads 12; bias true }`; an empty block is `key {}`;
 *   - numbers keep their literal text (`1_000_000`, `3e-4`), with one space
 *     before a unit (`80 GiB`); strings are re-escaped;
 *   - comments stay where they were: a comment alone on its line stays on
 *     its own line before the next statement, a comment after code stays
 *     after the last thing of that line; one blank line is kept wherever
 *     the source had one or more between two statements.
 *
 * It never changes the tree: parsing the output gives an equal tree
 * (dsl_ast_equal), which tests/test_dsl.c checks over every example.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl.h"

#define FMT_WIDTH      80
#define FMT_INLINE_MAX 4

typedef struct {
    FILE             *out;
    const DslComment *c;          /* next comment not yet printed */
    int               last_line;  /* source line of the last thing printed */
} Fmt;

void dsl_value_print(FILE *out, const DslValue *v)
{
    switch (v->kind) {
    case DSL_VAL_WORD:
        fputs(v->text, out);
        break;
    case DSL_VAL_BOOL:
        fputs(v->b ? "true" : "false", out);
        break;
    case DSL_VAL_NUMBER:
        fputs(v->text, out);
        if (v->unit) fprintf(out, " %s", v->unit->name);
        break;
    case DSL_VAL_STRING:
        fputc('"', out);
        for (const char *p = v->text; *p; p++) {
            if (*p == '"' || *p == '\\') fputc('\\', out);
            fputc(*p, out);
        }
        fputc('"', out);
        break;
    }
}

/* `key value value`, without the block or the terminator. */
static void print_head(FILE *out, const DslStmt *s)
{
    fputs(s->key, out);
    for (const DslValue *v = s->args; v; v = v->next) {
        fputc(' ', out);
        dsl_value_print(out, v);
    }
}

static bool pos_before(int line, int col, int line2, int col2)
{
    return line < line2 || (line == line2 && col < col2);
}

/* Print every comment that comes before (line, col) on lines of its own;
 * `blank_ok` allows the blank line that separated it in the source. */
static void flush_comments(Fmt *f, int line, int col, int indent, bool blank_ok)
{
    while (f->c && pos_before(f->c->loc.line, f->c->loc.col, line, col)) {
        if (blank_ok && f->c->loc.line > f->last_line + 1) fputc('\n', f->out);
        fprintf(f->out, "%*s%s\n", indent * 4, "", f->c->text);
        f->last_line = f->c->loc.line;
        f->c = f->c->next;
        blank_ok = true;
    }
}

/* After the last token of source line `line` is printed: append the
 * comment that ends that line, unless more code follows on it. */
static void take_trailing(Fmt *f, int line, int next_line)
{
    if (next_line != line && f->c && f->c->loc.line == line) {
        fprintf(f->out, "  %s", f->c->text);
        f->c = f->c->next;
    }
    fputc('\n', f->out);
    f->last_line = line;
}

/* Whether a comment lies between the braces of s. */
static bool comment_inside(const Fmt *f, const DslStmt *s)
{
    for (const DslComment *c = f->c; c; c = c->next) {
        if (!pos_before(c->loc.line, c->loc.col, s->close.line, s->close.col)) break;
        if (pos_before(s->open.line, s->open.col, c->loc.line, c->loc.col)) return true;
    }
    return false;
}

/* The one-line form of a short block, or NULL if it does not qualify. */
static char *inline_block(const Fmt *f, const DslStmt *s, int indent)
{
    int n = 0;
    for (const DslStmt *b = s->body; b; b = b->next) {
        if (b->kind != DSL_STMT_ENTRY || ++n > FMT_INLINE_MAX) return NULL;
    }
    if (comment_inside(f, s)) return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return NULL;
    print_head(m, s);
    if (!s->body) {
        fputs(" {}", m);
    } else {
        fputs(" { ", m);
        for (const DslStmt *b = s->body; b; b = b->next) {
            print_head(m, b);
            fputs(b->next ? "; " : " }", m);
        }
    }
    fclose(m);
    if (indent * 4 + len > FMT_WIDTH) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void print_list(Fmt *f, const DslStmt *s, int indent, int end_line, bool in_block);

/* One statement; next_line is the source line of whatever follows it;
 * `first` is true for the first statement of a block (no blank line). */
static void print_stmt(Fmt *f, const DslStmt *s, int indent, bool first, int next_line)
{
    flush_comments(f, s->loc.line, s->loc.col, indent, !first && f->last_line > 0);
    if (!first && f->last_line > 0 && s->loc.line > f->last_line + 1) fputc('\n', f->out);
    fprintf(f->out, "%*s", indent * 4, "");
    /* a block keyword as a key inside a block (always an unknown key, but
     * one that parses after other code on its line) after an empty
     * statement, so that the scanner does not take it for a missing '}' */
    if (indent > 0 && dsl_is_top_keyword(s->key)) fputs("; ", f->out);
    if (s->kind != DSL_STMT_BLOCK) {
        print_head(f->out, s);
        take_trailing(f, s->loc.end_line, next_line);
        return;
    }
    char *one = inline_block(f, s, indent);
    if (one) {
        fputs(one, f->out);
        free(one);
        take_trailing(f, s->close.line, next_line);
        return;
    }
    print_head(f->out, s);
    fputs(" {", f->out);
    take_trailing(f, s->open.line, s->body ? s->body->loc.line : s->close.line);
    print_list(f, s->body, indent + 1, s->close.line, true);
    flush_comments(f, s->close.line, s->close.col, indent + 1, true);
    fprintf(f->out, "%*s}", indent * 4, "");
    take_trailing(f, s->close.line, next_line);
}

static void print_list(Fmt *f, const DslStmt *s, int indent, int end_line, bool in_block)
{
    for (bool first = in_block; s; s = s->next, first = false)
        print_stmt(f, s, indent, first, s->next ? s->next->loc.line : end_line);
}

void dsl_format(FILE *out, const DslFile *file)
{
    Fmt f = { out, file->comments, 0 };
    print_list(&f, file->stmts, 0, INT_MAX, false);
    flush_comments(&f, INT_MAX, INT_MAX, 0, true);
}
