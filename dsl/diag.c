/*
 * diag.c: printing diagnostics with the source line and a caret, and the
 * small helpers every checker needs (edit distance for "did you mean",
 * reading a source file under the size limit).
 *
 * The caret line copies the tabs of the source line so the caret sits
 * under the right character whatever the terminal's tab width.
 */
#include "dsl/diag.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void dsl_diag_init(DslDiag *d, FILE *out)
{
    memset(d, 0, sizeof *d);
    d->out = out;
}

/* Find the start and length of line `line` (1-based) in src. */
static bool source_line(const DslSource *src, int line, const char **start, size_t *len)
{
    const char *p = src->text, *end = src->text + src->len;
    for (int l = 1; l < line; l++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) return false;
        p = nl + 1;
    }
    if (p >= end) return false;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    *start = p;
    *len = (size_t)((nl ? nl : end) - p);
    if (*len && p[*len - 1] == '\r') (*len)--;
    return true;
}

/* A UTF-8 continuation byte (10xxxxxx): not the start of a character. */
static bool is_continuation(char c)
{
    return ((unsigned char)c & 0xc0) == 0x80;
}

/* At most this many bytes of a source line are shown; a longer line is
 * cut to a window around the column (a 4 MiB one-line file must not print
 * 4 MiB per error). */
#define EXCERPT_WIDTH 160

/* Print the source line of loc and a caret (with ~ under the rest of a
 * single-line range), as GCC does; both lines are built in a buffer and
 * written at once (stderr is unbuffered). */
static void print_excerpt(FILE *out, DslLoc loc)
{
    const char *line;
    size_t len;
    if (!loc.src || loc.line <= 0 || !source_line(loc.src, loc.line, &line, &len)) return;
    size_t col = loc.col > 0 ? (size_t)loc.col : 1;
    size_t start = 0;
    if (len > EXCERPT_WIDTH && col > EXCERPT_WIDTH / 2) start = col - EXCERPT_WIDTH / 2;
    if (start > len) start = len;
    size_t shown = len - start < EXCERPT_WIDTH ? len - start : EXCERPT_WIDTH;
    const char *pre = start > 0 ? "..." : "", *post = start + shown < len ? "..." : "";
    fprintf(out, "%5d | %s%.*s%s\n", loc.line, pre, (int)shown, line + start, post);
    char caret[EXCERPT_WIDTH + 8];
    size_t n = 0;
    for (size_t i = 0; i < strlen(pre); i++) caret[n++] = ' ';
    size_t at = col - 1 - start;   /* caret offset inside the window, in bytes */
    if (at > shown) at = shown;
    /* Columns count bytes, the terminal shows characters: one blank (or
       tab) per character, none for UTF-8 continuation bytes. */
    for (size_t i = 0; i < at; i++)
        if (!is_continuation(line[start + i])) caret[n++] = line[start + i] == '\t' ? '\t' : ' ';
    caret[n++] = '^';
    if (loc.end_line == loc.line && loc.end_col > loc.col) {
        size_t last = (size_t)loc.end_col;   /* 1-based, inclusive */
        if (last > start + shown) last = start + shown;
        for (size_t i = col + 1; i <= last && n < sizeof caret - 1; i++)
            if (!is_continuation(line[i - 1])) caret[n++] = '~';
    }
    caret[n] = '\0';
    fprintf(out, "      | %s\n", caret);
}

/* Format "file:line:col: KIND: message", print it with its excerpt, and
 * keep the first error's header line for tests. */
static void vreport(DslDiag *d, const char *kind, DslLoc loc, const char *fmt, va_list ap)
{
    /* Past the limit nothing is printed: do not even format (a file of a
       million stray bytes must stay fast). */
    if (d->n_errors > DSL_MAX_PRINTED_ERRORS + 1) return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    char head[1400];
    if (loc.src)
        snprintf(head, sizeof head, "%s:%d:%d: %s: %s", loc.src->name, loc.line, loc.col, kind, msg);
    else
        snprintf(head, sizeof head, "planc: %s: %s", kind, msg);
    bool is_error = strcmp(kind, "error") == 0;
    if (is_error && d->n_errors == 1) {
        size_t n = strlen(head);
        if (n >= sizeof d->first) n = sizeof d->first - 1;
        memcpy(d->first, head, n);
        d->first[n] = '\0';
    }
    if (is_error && d->n_errors == DSL_MAX_PRINTED_ERRORS + 1)
        fprintf(d->out, "planc: too many errors; the rest are not shown\n");
    if (d->n_errors > DSL_MAX_PRINTED_ERRORS) return;
    fprintf(d->out, "%s\n", head);
    print_excerpt(d->out, loc);
}

void dsl_error_class(DslDiag *d, DslErrClass cls, DslLoc loc, const char *fmt, ...)
{
    d->n_errors++;
    if (cls == DSL_ERR_CLUSTER) d->n_cluster++;
    else d->n_input++;
    va_list ap;
    va_start(ap, fmt);
    vreport(d, "error", loc, fmt, ap);
    va_end(ap);
}

void dsl_error(DslDiag *d, DslLoc loc, const char *fmt, ...)
{
    d->n_errors++;
    d->n_input++;
    va_list ap;
    va_start(ap, fmt);
    vreport(d, "error", loc, fmt, ap);
    va_end(ap);
}

void dsl_note(DslDiag *d, DslLoc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(d, "note", loc, fmt, ap);
    va_end(ap);
}

void dsl_warning(DslDiag *d, DslLoc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(d, "warning", loc, fmt, ap);
    va_end(ap);
}

int dsl_diag_exit_code(const DslDiag *d)
{
    if (d->n_input) return 2;
    return d->n_cluster ? 1 : 0;
}

int dsl_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 255;
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *dsl_suggest(const char *word, const char *const *candidates, int n)
{
    const char *best = NULL;
    int best_d = 3;
    for (int i = 0; i < n; i++) {
        int dist = dsl_edit_distance(word, candidates[i]);
        if (dist < best_d) {
            best_d = dist;
            best = candidates[i];
        }
    }
    if (best && (size_t)best_d >= strlen(word)) return NULL;
    return best;
}

/* The UTF-8 byte-order mark some editors (Notepad, Visual Studio) write at
 * the start of a file. It is not part of the text: a source never holds
 * it, so line 1's columns count from the byte after it (as GCC's do). */
static const char BOM[] = "\xef\xbb\xbf";

static size_t bom_len(const char *text, size_t len)
{
    return len >= 3 && memcmp(text, BOM, 3) == 0 ? 3 : 0;
}

DslSource *dsl_source_from_string(DslArena *a, const char *name, const char *text, size_t len)
{
    size_t skip = bom_len(text, len);
    text += skip;
    len -= skip;
    DslSource *s = dsl_arena_alloc(a, sizeof *s);
    s->name = dsl_arena_strdup(a, name);
    s->text = dsl_arena_strndup(a, text, len);
    s->len = len;
    return s;
}

/* Open path for reading without blocking: opening a FIFO with no writer
 * (or a device) would otherwise hang before we could see what it is. */
static FILE *open_regular(const char *path, const char **why)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *why = strerror(errno);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        *why = "not a regular file";
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        *why = strerror(errno);
        close(fd);
    }
    return f;
}

DslSource *dsl_source_read(DslArena *a, const char *path, const char **why)
{
    FILE *f = open_regular(path, why);
    if (!f) return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        *why = strerror(errno);
        return NULL;
    }
    if ((uint64_t)st.st_size > DSL_MAX_FILE_SIZE) {
        fclose(f);
        *why = "file larger than the 4 MiB limit";
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    char *buf = dsl_arena_alloc(a, len + 1);
    size_t got = fread(buf, 1, len, f);
    fclose(f);
    if (got != len) {
        *why = "read error";
        return NULL;
    }
    buf[len] = '\0';
    size_t skip = bom_len(buf, len);
    DslSource *s = dsl_arena_alloc(a, sizeof *s);
    s->name = dsl_arena_strdup(a, path);
    s->text = buf + skip;
    s->len = len - skip;
    return s;
}
