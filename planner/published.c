/*
 * published.c: the `# published:` line of a validation row (published.h).
 *
 * This is the only reader of that line: planner/validate.c asks it for
 * every row, and its diagnostics are the front end's (file:line:col, the
 * line, a caret), so a malformed figure is found like a typo in a key. It
 * knows nothing of models or costs: it reads a number, its unit and, for
 * a throughput, how the source counted the FLOPs.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "planner/published.h"

#define PUB_KEY     "published:"
#define PUB_TFLOPS  "TFLOP/s per GPU"
#define PUB_STEP_S  "s per step"
#define PUB_COUNTED "counted as"
#define PUB_FORMS   "'# published: X TFLOP/s per GPU[, counted as C B s l h^2 ...]' or '# published: X s per step'"
#define PUB_MAX_LINE 1024   /* bytes of a line looked at; a figure's line is far shorter */

/* The location of bytes [at, at + n) of line `line` (columns from 1). */
static DslLoc loc_at(const DslSource *src, int line, const char *start, const char *at, size_t n)
{
    int col = (int)(at - start) + 1;
    return (DslLoc){ src, line, col, line, col + (n ? (int)n - 1 : 0) };
}

static const char *skip_blanks(const char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

/* Whether the line is a `# published:` comment; *rest is just past the key. */
static bool is_published_line(const char *s, const char **rest)
{
    s = skip_blanks(s);
    if (*s != '#') return false;
    s = skip_blanks(s + 1);
    if (strncmp(s, PUB_KEY, strlen(PUB_KEY)) != 0) return false;
    *rest = s + strlen(PUB_KEY);
    return true;
}

/* A positive finite decimal at s (digits or '.' first: no sign, no "inf",
 * no hex), its end in *end; false with *end = s when there is none. */
static bool read_positive(const char *s, double *x, const char **end)
{
    *end = s;
    if (!isdigit((unsigned char)*s) && *s != '.') return false;
    char *e;
    double v = strtod(s, &e);
    if (e == s || strspn(s, "0123456789.eE+-") < (size_t)(e - s)) return false;   /* "0x10" */
    *x = v;
    *end = e;
    return true;
}

/* The length of the word at s (up to a blank), for a caret's width. */
static size_t word_len(const char *s)
{
    size_t n = 0;
    while (s[n] && s[n] != ' ' && s[n] != '\t' && s[n] != '\n') n++;
    return n ? n : 1;
}

/* Parse one `# published:` line (NUL-terminated, no newline) into *out;
 * rest points just past the key. */
static bool parse_line(const DslSource *src, DslDiag *d, int line, const char *start, const char *rest,
                       PlanPublished *out)
{
    const char *s = skip_blanks(rest), *e;
    double x;
    if (!read_positive(s, &x, &e)) {
        dsl_error(d, loc_at(src, line, start, s, word_len(s)),
                  "expected a positive number after '# published:'; the forms are %s", PUB_FORMS);
        return false;
    }
    if (!(x > 0) || !isfinite(x)) {
        dsl_error(d, loc_at(src, line, start, s, (size_t)(e - s)), "the published figure must be positive and finite");
        return false;
    }
    const char *u = skip_blanks(e);
    out->value = x;
    out->line = line;
    out->passes = 4;
    if (u > e && !strncmp(u, PUB_STEP_S, strlen(PUB_STEP_S))) {
        const char *t = skip_blanks(u + strlen(PUB_STEP_S));
        if (*t) {
            dsl_error(d, loc_at(src, line, start, t, strlen(t)),
                      "expected the end of the line after 's per step' (a step time needs no FLOP count)");
            return false;
        }
        out->unit = PLAN_PUB_STEP_S;
        return true;
    }
    if (u == e || strncmp(u, PUB_TFLOPS, strlen(PUB_TFLOPS))) {
        dsl_error(d, loc_at(src, line, start, u, word_len(u)),
                  "expected 'TFLOP/s per GPU' or 's per step' after the number %g", x);
        return false;
    }
    out->unit = PLAN_PUB_TFLOPS;
    const char *t = skip_blanks(u + strlen(PUB_TFLOPS));
    if (!*t) return true;
    const char *c = *t == ',' ? skip_blanks(t + 1) : t;
    if (*t != ',' || strncmp(c, PUB_COUNTED, strlen(PUB_COUNTED))) {
        dsl_error(d, loc_at(src, line, start, t, word_len(t)),
                  "expected the end of the line or ', counted as C B s l h^2 ...' after 'TFLOP/s per GPU'");
        return false;
    }
    c = skip_blanks(c + strlen(PUB_COUNTED));
    double coef;
    if (!read_positive(c, &coef, &e) || !(coef > 0) || !isfinite(coef)) {
        dsl_error(d, loc_at(src, line, start, c, word_len(c)),
                  "expected the FLOP coefficient after 'counted as' (24 x the dense passes: 96 with the "
                  "recomputed forward, 72 without)");
        return false;
    }
    out->passes = coef / 24;
    return true;
}

bool plan_published_read(const DslSource *src, DslDiag *d, PlanPublished *out)
{
    const char *p = src->text, *end = src->text + src->len;
    int line = 1, found = 0, first = 0;
    bool ok = true;
    char buf[PUB_MAX_LINE + 1];
    for (; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((nl ? nl : end) - p);
        size_t k = n < PUB_MAX_LINE ? n : PUB_MAX_LINE;
        memcpy(buf, p, k);
        buf[k] = 0;
        if (k && buf[k - 1] == '\r') buf[k - 1] = 0;
        p += n + 1;
        const char *rest;
        if (!is_published_line(buf, &rest)) continue;
        if (found++) {
            dsl_error(d, loc_at(src, line, buf, rest - strlen(PUB_KEY), strlen(PUB_KEY)),
                      "a second '# published:' line; a row states one figure");
            dsl_note(d, (DslLoc){ src, first, 1, first, 1 }, "the first is here");
            ok = false;
            continue;
        }
        first = line;
        ok = parse_line(src, d, line, buf, rest, out) && ok;
    }
    if (!found) {
        dsl_error(d, (DslLoc){ src, 1, 1, 1, 1 }, "no '# published:' line; a validation row states its figure as %s",
                  PUB_FORMS);
        return false;
    }
    return ok;
}
