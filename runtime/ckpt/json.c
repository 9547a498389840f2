/*
 * json.c: a small, strict JSON parser and writer for checkpoint headers and
 * indexes, plus the failure text of the checkpoint module.
 *
 * Checkpoint files come from disk and may be damaged or hostile, so the
 * parser accepts RFC 8259 JSON and nothing more: no comments, no trailing
 * commas, no control characters or lone surrogates in strings, no
 * duplicate keys in an object, nesting at most 64 deep, and nothing but
 * whitespace after the value. It is bounded by the length it is given (the
 * caller bounds that) and reports the byte offset of the first problem.
 * Nodes live in one growing array and decoded strings in one pool, so a
 * document is freed with two calls.
 */
#include <stdlib.h>
#include <string.h>
#include "ckpt_internal.h"

/* ---- failure text ------------------------------------------------------ */

static __thread char last_error[1024];

prt_status ckpt_fail(prt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

void ckpt_clear(void) { last_error[0] = '\0'; }

const char *prt_ckpt_last_error(void) { return last_error; }

/* ---- text buffer --------------------------------------------------------- */

static bool sb_grow(sbuf *b, size_t need)
{
    if (b->oom) return false;
    if (b->len + need + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + need + 1) cap *= 2;
    char *s = (char *)realloc(b->s, cap);
    if (!s) { b->oom = true; return false; }
    b->s = s;
    b->cap = cap;
    return true;
}

void sb_put(sbuf *b, const char *s, size_t n)
{
    if (!sb_grow(b, n)) return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = true; return; }
    if ((size_t)n < sizeof tmp) { sb_put(b, tmp, (size_t)n); return; }
    if (!sb_grow(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sb_json_str(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') { char e[2] = {'\\', (char)*p}; sb_put(b, e, 2); }
        else if (*p < 0x20) sb_printf(b, "\\u%04x", *p);
        else sb_put(b, (const char *)p, 1);
    }
    sb_put(b, "\"", 1);
}

/* ---- parser --------------------------------------------------------------- */

#define JS_MAX_DEPTH 64

typedef struct {
    const char *s;
    size_t      len, at;
    const char *what;
    js_doc     *d;
    prt_status  st;
} js_parser;

static prt_status perr(js_parser *p, const char *msg)
{
    if (p->st) return p->st;
    p->st = ckpt_fail(PRT_ERR_FORMAT, "%s: not valid JSON at byte %zu: %s", p->what, p->at, msg);
    return p->st;
}

static void skip_ws(js_parser *p)
{
    while (p->at < p->len && (p->s[p->at] == ' ' || p->s[p->at] == '\t' ||
                              p->s[p->at] == '\n' || p->s[p->at] == '\r'))
        p->at++;
}

static int new_node(js_parser *p, js_kind k)
{
    js_doc *d = p->d;
    if (d->count == d->cap) {
        int cap = d->cap ? d->cap * 2 : 64;
        js_node *n = (js_node *)realloc(d->n, (size_t)cap * sizeof *n);
        if (!n) { p->st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", p->what); return -1; }
        d->n = n;
        d->cap = cap;
    }
    js_node *n = &d->n[d->count];
    memset(n, 0, sizeof *n);
    n->kind = k;
    n->first = n->next = -1;
    return d->count++;
}

/* Pool offsets, turned into pointers once the pool stops moving. */
static size_t pool_put(js_parser *p, const char *s, size_t n)
{
    js_doc *d = p->d;
    if (d->pool_len + n + 1 > d->pool_cap) {
        size_t cap = d->pool_cap ? d->pool_cap : 256;
        while (cap < d->pool_len + n + 1) cap *= 2;
        char *q = (char *)realloc(d->pool, cap);
        if (!q) { p->st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", p->what); return 0; }
        d->pool = q;
        d->pool_cap = cap;
    }
    size_t at = d->pool_len;
    memcpy(d->pool + at, s, n);
    d->pool_len += n;
    return at;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool hex4(js_parser *p, unsigned *u)
{
    if (p->at + 4 > p->len) return false;
    *u = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->at + (size_t)i]);
        if (h < 0) return false;
        *u = *u * 16 + (unsigned)h;
    }
    p->at += 4;
    return true;
}

static size_t utf8_put(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63)); return 4;
}

/* A string literal at p->at (on its quote): decoded into the pool, its pool
 * offset in *off and length in *n (NUL appended). */
static bool parse_string(js_parser *p, size_t *off, size_t *n)
{
    p->at++;  /* '"' */
    *off = p->d->pool_len;
    for (;;) {
        if (p->at >= p->len) { perr(p, "unterminated string"); return false; }
        unsigned char c = (unsigned char)p->s[p->at];
        if (c == '"') { p->at++; break; }
        if (c < 0x20) { perr(p, "control character in a string"); return false; }
        if (c != '\\') {
            size_t a = p->at;
            while (p->at < p->len && p->s[p->at] != '"' && p->s[p->at] != '\\' &&
                   (unsigned char)p->s[p->at] >= 0x20)
                p->at++;
            pool_put(p, p->s + a, p->at - a);
            if (p->st) return false;
            continue;
        }
        p->at++;
        if (p->at >= p->len) { perr(p, "unterminated escape"); return false; }
        char e = p->s[p->at++], out[4];
        size_t k = 1;
        switch (e) {
        case '"': out[0] = '"'; break;
        case '\\': out[0] = '\\'; break;
        case '/': out[0] = '/'; break;
        case 'b': out[0] = '\b'; break;
        case 'f': out[0] = '\f'; break;
        case 'n': out[0] = '\n'; break;
        case 'r': out[0] = '\r'; break;
        case 't': out[0] = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (!hex4(p, &u)) { perr(p, "bad \\u escape"); return false; }
            if (u >= 0xDC00 && u <= 0xDFFF) { perr(p, "lone low surrogate"); return false; }
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (p->at + 2 > p->len || p->s[p->at] != '\\' || p->s[p->at + 1] != 'u') {
                    perr(p, "lone high surrogate"); return false;
                }
                p->at += 2;
                if (!hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    perr(p, "bad surrogate pair"); return false;
                }
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (u == 0) { perr(p, "NUL in a string"); return false; }
            k = utf8_put(out, u);
            break;
        }
        default: perr(p, "unknown escape"); return false;
        }
        pool_put(p, out, k);
        if (p->st) return false;
    }
    *n = p->d->pool_len - *off;
    pool_put(p, "", 1);
    return !p->st;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* A number by RFC 8259's grammar (no leading zeros, no '+', digits after
 * '.' and 'e'); its text is kept, and js_u64 reads the integers we need. */
static bool parse_number(js_parser *p, int node)
{
    size_t a = p->at;
    if (p->at < p->len && p->s[p->at] == '-') p->at++;
    if (p->at >= p->len || !is_digit(p->s[p->at])) return perr(p, "bad number"), false;
    if (p->s[p->at] == '0') p->at++;
    else while (p->at < p->len && is_digit(p->s[p->at])) p->at++;
    if (p->at < p->len && p->s[p->at] == '.') {
        p->at++;
        if (p->at >= p->len || !is_digit(p->s[p->at])) return perr(p, "bad fraction"), false;
        while (p->at < p->len && is_digit(p->s[p->at])) p->at++;
    }
    if (p->at < p->len && (p->s[p->at] == 'e' || p->s[p->at] == 'E')) {
        p->at++;
        if (p->at < p->len && (p->s[p->at] == '+' || p->s[p->at] == '-')) p->at++;
        if (p->at >= p->len || !is_digit(p->s[p->at])) return perr(p, "bad exponent"), false;
        while (p->at < p->len && is_digit(p->s[p->at])) p->at++;
    }
    /* the literal is kept in the pool (offset fixed up in js_parse) */
    size_t off = pool_put(p, p->s + a, p->at - a);
    pool_put(p, "", 1);
    p->d->n[node].str = (const char *)(uintptr_t)off;
    p->d->n[node].len = p->at - a;
    return !p->st;
}

static bool parse_value(js_parser *p, int depth, int *out);

static bool literal(js_parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->at + n > p->len || memcmp(p->s + p->at, word, n)) return perr(p, "unexpected character"), false;
    p->at += n;
    return true;
}

/* Append child c to container node (keeping a tail pointer in *tail). */
static void add_child(js_parser *p, int node, int *tail, int c)
{
    if (*tail < 0) p->d->n[node].first = c;
    else p->d->n[*tail].next = c;
    *tail = c;
    p->d->n[node].count++;
}

/* An object or array at p->at (on its bracket); members keep their key. */
static bool parse_container(js_parser *p, int depth, int node, bool obj)
{
    char close = obj ? '}' : ']';
    int tail = -1;
    p->at++;
    skip_ws(p);
    if (p->at < p->len && p->s[p->at] == close) { p->at++; return true; }
    for (;;) {
        size_t koff = 0, klen = 0;
        skip_ws(p);
        if (obj) {
            if (p->at >= p->len || p->s[p->at] != '"') return perr(p, "object key expected"), false;
            if (!parse_string(p, &koff, &klen)) return false;
            skip_ws(p);
            if (p->at >= p->len || p->s[p->at] != ':') return perr(p, "':' expected"), false;
            p->at++;
        }
        int c;
        if (!parse_value(p, depth + 1, &c)) return false;
        if (obj) p->d->n[c].key = (const char *)(uintptr_t)(koff + 1);  /* +1: 0 means none */
        add_child(p, node, &tail, c);
        skip_ws(p);
        if (p->at >= p->len) return perr(p, obj ? "'}' expected" : "']' expected"), false;
        if (p->s[p->at] == ',') { p->at++; continue; }
        if (p->s[p->at] == close) { p->at++; return true; }
        return perr(p, obj ? "',' or '}' expected" : "',' or ']' expected"), false;
    }
}

/* Any value: its node index in *out; depth bounds the recursion. */
static bool parse_value(js_parser *p, int depth, int *out)
{
    if (depth > JS_MAX_DEPTH) return perr(p, "nested too deep"), false;
    skip_ws(p);
    if (p->at >= p->len) return perr(p, "value expected"), false;
    char c = p->s[p->at];
    js_kind k = c == '{' ? JS_OBJ : c == '[' ? JS_ARR : c == '"' ? JS_STR :
                c == 't' || c == 'f' ? JS_BOOL : c == 'n' ? JS_NULL : JS_NUM;
    int node = new_node(p, k);
    if (node < 0) return false;
    *out = node;
    switch (k) {
    case JS_OBJ: return parse_container(p, depth, node, true);
    case JS_ARR: return parse_container(p, depth, node, false);
    case JS_STR: {
        size_t off, n;
        if (!parse_string(p, &off, &n)) return false;
        p->d->n[node].str = (const char *)(uintptr_t)off;
        p->d->n[node].len = n;
        return true;
    }
    case JS_BOOL:
        p->d->n[node].count = c == 't';
        return literal(p, c == 't' ? "true" : "false");
    case JS_NULL: return literal(p, "null");
    case JS_NUM: return parse_number(p, node);
    }
    return false;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp((*(const js_node *const *)a)->key, (*(const js_node *const *)b)->key);
}

/* Reject an object with two equal keys: sort its members' keys, compare neighbours. */
static prt_status check_duplicates(js_doc *d, const char *what)
{
    const js_node **tmp = NULL;
    int cap = 0;
    prt_status st = PRT_OK;
    for (int i = 0; i < d->count && !st; i++) {
        js_node *o = &d->n[i];
        if (o->kind != JS_OBJ || o->count < 2) continue;
        if (o->count > cap) {
            const js_node **t = (const js_node **)realloc(tmp, (size_t)o->count * sizeof *t);
            if (!t) { st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", what); break; }
            tmp = t;
            cap = o->count;
        }
        int k = 0;
        for (int c = o->first; c >= 0; c = d->n[c].next) tmp[k++] = &d->n[c];
        qsort(tmp, (size_t)k, sizeof *tmp, cmp_key);
        for (int j = 1; j < k; j++)
            if (!strcmp(tmp[j - 1]->key, tmp[j]->key)) {
                st = ckpt_fail(PRT_ERR_FORMAT, "%s: duplicate key \"%s\"", what, tmp[j]->key);
                break;
            }
    }
    free(tmp);
    return st;
}

prt_status js_parse(const char *text, size_t len, const char *what, js_doc *doc)
{
    memset(doc, 0, sizeof *doc);
    js_parser p = {.s = text, .len = len, .at = 0, .what = what, .d = doc, .st = PRT_OK};
    int root;
    if (parse_value(&p, 0, &root)) {
        skip_ws(&p);
        if (p.at != p.len) perr(&p, "text after the value");
    }
    if (p.st) { js_free(doc); return p.st; }
    /* the pool no longer moves: offsets become pointers */
    for (int i = 0; i < doc->count; i++) {
        js_node *n = &doc->n[i];
        if (n->kind == JS_STR || n->kind == JS_NUM) n->str = doc->pool + (uintptr_t)n->str;
        if (n->key) n->key = doc->pool + ((uintptr_t)n->key - 1);
    }
    prt_status st = check_duplicates(doc, what);
    if (st) js_free(doc);
    return st;
}

void js_free(js_doc *doc)
{
    free(doc->n);
    free(doc->pool);
    memset(doc, 0, sizeof *doc);
}

int js_get(const js_doc *d, int obj, const char *key)
{
    if (obj < 0 || d->n[obj].kind != JS_OBJ) return -1;
    for (int c = d->n[obj].first; c >= 0; c = d->n[c].next)
        if (!strcmp(d->n[c].key, key)) return c;
    return -1;
}

bool js_u64(const js_doc *d, int i, uint64_t *out)
{
    if (i < 0 || d->n[i].kind != JS_NUM) return false;
    const char *s = d->n[i].str;
    uint64_t v = 0;
    for (size_t k = 0; k < d->n[i].len; k++) {
        if (!is_digit(s[k])) return false;
        unsigned dig = (unsigned)(s[k] - '0');
        if (v > (UINT64_MAX - dig) / 10) return false;
        v = v * 10 + dig;
    }
    *out = v;
    return true;
}
