/*
 * chrome.c: timelines as Chrome Trace Event Format documents, both ways.
 *
 * The writer emits what chrome://tracing and Perfetto open: a JSON object
 * with `traceEvents`, one "X" (complete) event per op with `ts` and `dur`
 * in microseconds (the format's unit), `pid` = pipeline stage, `tid` = the
 * stream the op ran on (0 compute, including receive waits and the
 * optimizer; 1 pipeline sends; 2 DP/ZeRO and step-level collectives, the
 * latter after the reductions they wait for; 3 the TP collectives and a
 * mixture's all-to-alls inside a compute pass, segments of it), so events on one tid never
 * overlap and Perfetto nests nothing wrongly. `args` carries the
 * link back to the Program: `op` (index in the stage's op list), `kind`
 * (plan_op_name), `mb`, `chunk`, `bytes`. `otherData` says what the file
 * is (`format` "planc-trace", `version` 1, `source` predicted|measured,
 * model name, layout line) and, for a predicted trace, `summary`: per
 * stage the seconds of each item of the step (TrItem: `forward_s`,
 * `exposed_tp_s`, ..., `end_s`), the figures of the SVG's summary bars.
 *
 * The reader is the other half, for measured traces written by the
 * generated executable (`--trace OUT.json`, README section trace): it
 * needs of each event only `ph` "X", `pid`, `ts`, `dur` and `args.kind`;
 * `args.mb`, `args.chunk`, `args.op` and `args.rank` are used when there.
 * It is a small strict JSON parser; anything it does not know it skips.
 */
#include "trace/trace.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/layout.h"

/* ---- writing ------------------------------------------------------------ */

/* JSON string body with the characters JSON requires escaped. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* The tid of an op: the stream it occupies (see the essay). */
static int tid_of(PlanOpKind k)
{
    switch (k) {   /* ORDER PlanOpKind */
    case OP_SEND_ACT: case OP_SEND_GRAD: return 1;
    case OP_GATHER_PARAMS: case OP_REDUCE_GRADS: case OP_SYNC_PARAMS:
    case OP_SP_NORM_REDUCE: case OP_EMBED_REDUCE: case OP_NORM_REDUCE: return 2;
    /* a part of its compute pass, which DP reductions may run beside:
     * a thread of its own keeps each tid's events disjoint */
    case OP_EP_ALL_TO_ALL: case OP_TP_COLL: case OP_CP_COLL: return 3;
    default: return 0;
    }
}

/* Name stage s and its three lanes, so Perfetto shows "stage 3 / compute". */
static void metadata(FILE *f, int s)
{
    static const char *threads[] = { "compute", "p2p sends", "collectives" };
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"name\":\"stage %d\"}},\n", s, s);
    fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"sort_index\":%d}},\n", s, s);
    for (int t = 0; t < 3; t++)
        fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"%s\"}},\n", s, t, threads[t]);
}

/* `"summary":[{"stage":0,"forward_s":...,"end_s":...}, ...]`: each
 * item's name as a key (lower case; spaces, slashes and hyphens as underscores). */
static void summary_json(FILE *f, const TrTimeline *t)
{
    fputs(",\"critical\":", f);
    fprintf(f, "%d,\"summary\":[", t->critical);
    for (int s = 0; s < t->pp; s++) {
        fprintf(f, "%s{\"stage\":%d", s ? "," : "", s);
        for (int i = 0; i < TR_N_ITEMS; i++) {
            if (i == TR_ITEM_CP && t->summary[s].item[i] <= 0) continue;   /* a plan with CP only */
            char key[48];
            snprintf(key, sizeof key, "%s", tr_item_name((TrItem)i));
            for (char *c = key; *c; c++)
                *c = *c == ' ' || *c == '/' || *c == '-' ? '_' : (char)tolower((unsigned char)*c);
            fprintf(f, ",\"%s_s\":%.9g", key, t->summary[s].item[i]);
        }
        fprintf(f, ",\"end_s\":%.9g}", t->summary[s].end);
    }
    fputc(']', f);
}

bool tr_write_chrome(FILE *f, const TrTimeline *t)
{
    fputs("{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"format\":\"planc-trace\",\"version\":1,"
          "\"source\":", f);
    json_str(f, t->source);
    fputs(",\"name\":", f);
    json_str(f, t->name);
    fputs(",\"layout\":", f);
    json_str(f, t->layout);
    fprintf(f, ",\"pp\":%d,\"chunks\":%d,\"step_time_s\":%.9g,\"bubble_fraction\":%.9g",
            t->pp, t->chunks, t->step_time, isfinite(t->bubble_fraction) ? t->bubble_fraction : 0);
    if (t->summary) summary_json(f, t);
    fputs("},\n\"traceEvents\":[\n", f);
    for (int s = 0; s < t->pp; s++) metadata(f, s);
    bool ep = false, tp = false, cp = false;   /* the in-pass lane's name only where it is drawn */
    for (int i = 0; i < t->n_boxes; i++) {
        ep |= t->boxes[i].kind == OP_EP_ALL_TO_ALL;
        tp |= t->boxes[i].kind == OP_TP_COLL;
        cp |= t->boxes[i].kind == OP_CP_COLL;
    }
    const char *pass = cp ? (tp ? "TP collectives and CP attention transfers (inside the passes)"
                                : "CP attention transfers (inside the passes)")
                     : tp && ep ? "TP collectives and EP all-to-alls (inside the passes)"
                     : tp ? "TP collectives (inside the passes)" : "EP all-to-alls (inside the passes)";
    for (int s = 0; (ep || tp || cp) && s < t->pp; s++)
        fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":3,"
                   "\"args\":{\"name\":\"%s\"}},\n", s, pass);
    for (int i = 0; i < t->n_boxes; i++) {
        const TrBox *b = &t->boxes[i];
        char name[64];
        const char *kind = plan_op_name(b->kind);
        if (b->mb < 0) snprintf(name, sizeof name, "%s", tr_op_title(b->kind));
        else if (t->chunks > 1) snprintf(name, sizeof name, "%s %d.%d", kind, b->mb, b->chunk);
        else snprintf(name, sizeof name, "%s %d", kind, b->mb);
        /* round both ends to the ns, so back-to-back events stay disjoint */
        double ts = round(b->start * 1e9) / 1e3, te = round(b->end * 1e9) / 1e3;
        fprintf(f, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                   "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"op\":%d,\"kind\":\"%s\",\"mb\":%d,"
                   "\"chunk\":%d,\"bytes\":%.0f}}%s\n",
                name, kind, b->stage, tid_of(b->kind), ts, te - ts, b->op, kind, b->mb, b->chunk, b->bytes,
                i + 1 < t->n_boxes ? "," : "");
    }
    fputs("]}\n", f);
    return !ferror(f);
}

/* ---- reading ------------------------------------------------------------ */

typedef struct {
    const char *p, *end, *start;
    char       *why;
    size_t      len;
    bool        failed;
} Json;

/* One "X" event as read, before the rank filter. */
typedef struct {
    TrBox box;
    int   rank;
} Event;

static bool fail(Json *j, const char *msg)
{
    if (!j->failed) snprintf(j->why, j->len, "%s (at byte %ld)", msg, (long)(j->p - j->start));
    j->failed = true;
    return false;
}

static void ws(Json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

static bool lit(Json *j, char c)
{
    ws(j);
    if (j->p < j->end && *j->p == c) { j->p++; return true; }
    return false;
}

/* A string into buf (truncated to len-1; \u escapes become '?'). */
static bool str(Json *j, char *buf, size_t len)
{
    size_t n = 0;
    if (!lit(j, '"')) return fail(j, "string expected");
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\') {
            if (j->p >= j->end) break;
            c = *j->p++;
            if (c == 'u') { if (j->end - j->p < 4) break; j->p += 4; c = '?'; }
            else if (c == 'n') c = '\n';
            else if (c == 't') c = '\t';
            else if (c == 'r' || c == 'b' || c == 'f') c = ' ';
        }
        if (n + 1 < len) buf[n++] = c;
    }
    if (len) buf[n] = 0;
    if (j->p >= j->end) return fail(j, "unterminated string");
    j->p++;
    return true;
}

static bool num(Json *j, double *v)
{
    ws(j);
    char *e;
    *v = strtod(j->p, &e);
    if (e == j->p || e > j->end) return fail(j, "number expected");
    j->p = e;
    return true;
}

static bool skip(Json *j, int depth);

/* Call `member` for each key of an object; skip what it leaves unread. */
static bool object(Json *j, int depth, bool (*member)(Json *, const char *, void *), void *ctx)
{
    if (!lit(j, '{')) return fail(j, "'{' expected");
    if (lit(j, '}')) return true;
    do {
        char key[64];
        if (!str(j, key, sizeof key)) return false;
        if (!lit(j, ':')) return fail(j, "':' expected");
        if (!(member ? member(j, key, ctx) : skip(j, depth + 1))) return false;
    } while (lit(j, ','));
    return lit(j, '}') || fail(j, "',' or '}' expected");
}

static bool skip(Json *j, int depth)
{
    if (depth > 64) return fail(j, "nested too deeply");
    ws(j);
    if (j->p >= j->end) return fail(j, "value expected");
    char c = *j->p;
    if (c == '{') return object(j, depth, NULL, NULL);
    if (c == '[') {
        j->p++;
        if (lit(j, ']')) return true;
        do { if (!skip(j, depth + 1)) return false; } while (lit(j, ','));
        return lit(j, ']') || fail(j, "',' or ']' expected");
    }
    if (c == '"') { char b[2]; return str(j, b, sizeof b); }
    for (const char *w = "true\0false\0null\0"; *w; w += strlen(w) + 1)
        if ((size_t)(j->end - j->p) >= strlen(w) && !strncmp(j->p, w, strlen(w))) {
            j->p += strlen(w);
            return true;
        }
    double d;
    return num(j, &d);
}

/* The fields of one event and of its args. */
typedef struct {
    char   ph[8], kind[32];
    double pid, ts, dur, op, mb, chunk, rank, bytes;
    bool   has_pid, has_ts, has_dur;
} RawEvent;

static bool args_member(Json *j, const char *key, void *ctx)
{
    RawEvent *e = ctx;
    if (!strcmp(key, "kind")) return str(j, e->kind, sizeof e->kind);
    double *d = !strcmp(key, "op") ? &e->op : !strcmp(key, "mb") ? &e->mb
              : !strcmp(key, "chunk") ? &e->chunk : !strcmp(key, "rank") ? &e->rank
              : !strcmp(key, "bytes") ? &e->bytes : NULL;
    ws(j);
    if (d && j->p < j->end && (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))) return num(j, d);
    return skip(j, 2);
}

static bool event_member(Json *j, const char *key, void *ctx)
{
    RawEvent *e = ctx;
    if (!strcmp(key, "ph")) return str(j, e->ph, sizeof e->ph);
    if (!strcmp(key, "args")) { ws(j); return *j->p == '{' ? object(j, 2, args_member, e) : skip(j, 2); }
    if (!strcmp(key, "pid")) return e->has_pid = true, num(j, &e->pid);
    if (!strcmp(key, "ts")) return e->has_ts = true, num(j, &e->ts);
    if (!strcmp(key, "dur")) return e->has_dur = true, num(j, &e->dur);
    return skip(j, 2);
}

typedef struct {
    TrTimeline *t;
    Event      *ev;
    int         n, cap;
    int         chunks;
} Reader;

static int kind_of(const char *name)
{
    for (int k = 0; k < PLAN_N_OPKINDS; k++)
        if (!strcmp(plan_op_name((PlanOpKind)k), name)) return k;
    return -1;
}

/* One element of traceEvents: keep complete events of known kinds. */
static bool trace_event(Json *j, Reader *r)
{
    RawEvent e = { .op = -1, .mb = -1, .chunk = -1, .rank = -1 };
    if (!object(j, 1, event_member, &e)) return false;
    if (strcmp(e.ph, "X")) return true;                 /* metadata, counters, ... */
    int k = kind_of(e.kind);
    if (k < 0 || !e.has_pid || !e.has_ts || !e.has_dur) return true;
    if (e.pid < 0 || e.pid >= PLAN_MAX_VSTAGES || e.dur < 0) return fail(j, "event with a bad pid or dur");
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 256;
        Event *n = realloc(r->ev, (size_t)cap * sizeof *n);
        if (!n) return fail(j, "out of memory");
        r->ev = n;
        r->cap = cap;
    }
    Event *v = &r->ev[r->n++];
    v->box = (TrBox){ .stage = (int)e.pid, .op = (int)e.op, .kind = (PlanOpKind)k,
                      .mb = (int)e.mb, .chunk = (int)e.chunk, .start = e.ts * 1e-6,
                      .end = (e.ts + e.dur) * 1e-6, .bytes = e.bytes };
    v->rank = (int)e.rank;
    return true;
}

static bool other_member(Json *j, const char *key, void *ctx)
{
    Reader *r = ctx;
    if (!strcmp(key, "source")) return str(j, r->t->source, sizeof r->t->source);
    if (!strcmp(key, "name")) return str(j, r->t->name, sizeof r->t->name);
    if (!strcmp(key, "layout")) return str(j, r->t->layout, sizeof r->t->layout);
    if (!strcmp(key, "chunks")) { double d; if (!num(j, &d)) return false; r->chunks = (int)d; return true; }
    return skip(j, 2);
}

static bool top_member(Json *j, const char *key, void *ctx)
{
    Reader *r = ctx;
    if (!strcmp(key, "otherData")) return object(j, 1, other_member, r);
    if (strcmp(key, "traceEvents")) return skip(j, 1);
    if (!lit(j, '[')) return fail(j, "traceEvents must be an array");
    if (lit(j, ']')) return true;
    do { if (!trace_event(j, r)) return false; } while (lit(j, ','));
    return lit(j, ']') || fail(j, "',' or ']' expected in traceEvents");
}

static int by_stage_then_op(const void *a, const void *b)
{
    const TrBox *x = a, *y = b;
    if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
    if (x->op != y->op) return x->op < y->op ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Keep each stage's lowest rank, shift time to start at 0, sort. */
static bool finish(Reader *r)
{
    TrTimeline *t = r->t;
    int pp = 0;
    for (int i = 0; i < r->n; i++) if (r->ev[i].box.stage + 1 > pp) pp = r->ev[i].box.stage + 1;
    int *low = malloc((size_t)(pp ? pp : 1) * sizeof *low);
    t->boxes = malloc((size_t)(r->n ? r->n : 1) * sizeof *t->boxes);
    if (!low || !t->boxes) { free(low); return false; }
    for (int s = 0; s < pp; s++) low[s] = 1 << 30;
    for (int i = 0; i < r->n; i++)
        if (r->ev[i].rank < low[r->ev[i].box.stage]) low[r->ev[i].box.stage] = r->ev[i].rank;
    double t0 = INFINITY;
    int chunks = 1;
    for (int i = 0; i < r->n; i++) {
        if (r->ev[i].rank != low[r->ev[i].box.stage]) continue;
        t->boxes[t->n_boxes++] = r->ev[i].box;
        t0 = fmin(t0, r->ev[i].box.start);
        if (r->ev[i].box.chunk + 1 > chunks) chunks = r->ev[i].box.chunk + 1;
    }
    free(low);
    t->cap = r->n;
    t->pp = pp;
    t->chunks = r->chunks > chunks ? r->chunks : chunks;
    for (int i = 0; i < t->n_boxes; i++) {
        t->boxes[i].start -= t0;
        t->boxes[i].end -= t0;
        t->step_time = fmax(t->step_time, t->boxes[i].end);
    }
    qsort(t->boxes, (size_t)t->n_boxes, sizeof *t->boxes, by_stage_then_op);
    t->bubble_fraction = tr_bubble_of(t);
    return tr_summarise_boxes(t);
}

/* Whole file into memory; NULL with a reason. */
static char *slurp(const char *path, size_t *len, char *why, size_t wlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(why, wlen, "cannot open '%s'", path); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *b = realloc(buf, cap * 2);
        if (!b) { free(buf); buf = NULL; break; }
        buf = b;
        cap *= 2;
    }
    bool err = ferror(f);
    fclose(f);
    if (!buf || err) { free(buf); snprintf(why, wlen, "cannot read '%s'", path); return NULL; }
    *len = n;
    return buf;
}

bool tr_read_chrome(const char *path, TrTimeline *out, char *why, size_t len)
{
    memset(out, 0, sizeof *out);
    snprintf(out->source, sizeof out->source, "measured");
    size_t n;
    char *buf = slurp(path, &n, why, len);
    if (!buf) return false;
    Reader r = { .t = out };
    Json j = { buf, buf + n, buf, why, len, false };
    bool ok = object(&j, 0, top_member, &r);
    ws(&j);
    if (ok && j.p != j.end) ok = fail(&j, "text after the trace object");
    if (ok && r.n == 0) { snprintf(why, len, "no complete (\"ph\":\"X\") events of known kinds"); ok = false; }
    if (ok && !finish(&r)) { snprintf(why, len, "out of memory"); ok = false; }
    free(r.ev);
    free(buf);
    if (!ok) tr_timeline_free(out);
    return ok;
}
