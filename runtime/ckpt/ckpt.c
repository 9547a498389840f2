/*
 * ckpt.c: sharded checkpoints — each rank's safetensors file of the pieces
 * it holds, the index that ties them together, reading any slice of any
 * tensor back from whatever layout wrote it, and consolidation into one
 * ordinary safetensors file.
 *
 * The index (index.json) is the only authority: a tensor is its global
 * dtype and shape plus a list of pieces (file, key in that file, rows
 * [r0, r1), cols [c0, c1)); a file is its name, size in bytes and CRC-32C.
 * Writing the index checks that every tensor's pieces agree on dtype and
 * shape, do not overlap and cover it exactly, and opening one checks the
 * same again, so a reader may assume every element of a wanted slice is in
 * exactly one piece. A reader trusts a rank file only after its size and
 * checksum match the index and its own header agrees with the index about
 * every piece in it (done once per file, on first use).
 *
 * This file must not know about MPI or the parameter table: the caller
 * decides which pieces a rank writes (a TP rectangle, a ZeRO flat range)
 * and gathers the manifests; ranks that hold replicas write them once.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ckpt_internal.h"

#define INDEX_NAME   "index.json"
#define INDEX_FORMAT "planc-checkpoint-1"
#define SB_LIT(b, lit) sb_put((b), (lit), sizeof(lit) - 1)

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* ---- shared shapes --------------------------------------------------------- */

typedef struct {
    size_t r0, r1, c0, c1;
} Rect;

/* Split elements [f0, f1) of rectangle q's row-major order into at most three
 * rectangles (partial first row, whole rows, partial last row), in order;
 * returns how many. */
static int flat_rects(Rect q, size_t f0, size_t f1, Rect out[3])
{
    size_t w = q.c1 - q.c0, ra = f0 / w, ca = f0 % w, rb = f1 / w, cb = f1 % w;
    int n = 0;
    if (f0 >= f1) return 0;
    if (ra == rb) {
        out[n++] = (Rect){q.r0 + ra, q.r0 + ra + 1, q.c0 + ca, q.c0 + cb};
        return n;
    }
    if (ca) out[n++] = (Rect){q.r0 + ra, q.r0 + ra + 1, q.c0 + ca, q.c1}, ra++;
    if (rb > ra) out[n++] = (Rect){q.r0 + ra, q.r0 + rb, q.c0, q.c1};
    if (cb) out[n++] = (Rect){q.r0 + rb, q.r0 + rb + 1, q.c0, q.c0 + cb};
    return n;
}

static size_t area(Rect q) { return (q.r1 - q.r0) * (q.c1 - q.c0); }

static bool overlap(Rect a, Rect b)
{
    return a.r0 < b.r1 && b.r0 < a.r1 && a.c0 < b.c1 && b.c0 < a.c1;
}

static prt_dtype dtype_from_name(const char *s, bool *ok)
{
    static const prt_dtype all[] = {PRT_FP32, PRT_FP16, PRT_BF16, PRT_INT32, PRT_INT64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(st_dtype_name(all[i]), s)) { *ok = true; return all[i]; }
    *ok = false;
    return PRT_FP32;
}

int ckpt_meta_pairs(const prt_ckpt_meta *m, char store[][64], const char **keys,
                    const char **vals)
{
    int n = 0;
#define META_NUM(k, fmt, v) (snprintf(store[n], 64, fmt, v), keys[n] = k, vals[n] = store[n], n++)
    META_NUM("step", "%ld", m->step);
    META_NUM("seed", "%llu", (unsigned long long)m->seed);
    META_NUM("dp", "%d", m->dp);
    META_NUM("tp", "%d", m->tp);
    META_NUM("pp", "%d", m->pp);
    META_NUM("zero", "%d", m->zero);
    if (m->cp > 1) META_NUM("cp", "%d", m->cp);   /* an added field: readers without it skip it */
#undef META_NUM
    keys[n] = "plan_hash", vals[n++] = m->plan_hash ? m->plan_hash : "";
    keys[n] = "model", vals[n++] = m->model ? m->model : "";
    keys[n] = "format", vals[n++] = "pt";   /* what transformers' loaders look for */
    if (m->config && m->config[0]) keys[n] = "model_config", vals[n++] = m->config;   /* issue 28 */
    return n;
}
#define META_MAX 11

prt_status prt_ckpt_step_dir(const char *root, long step, char *buf, size_t cap)
{
    if (step < 0) return ckpt_fail(PRT_ERR_ARG, "checkpoint step %ld < 0", step);
    if ((size_t)snprintf(buf, cap, "%s/step-%08ld", root, step) >= cap)
        return ckpt_fail(PRT_ERR_ARG, "%s: path too long", root);
    return PRT_OK;
}

/* ---- writing one rank's file -------------------------------------------------- */

typedef struct {
    char       *name;
    char        key[64 + 16];   /* set at finish when the name is short; else keyp */
    char       *keyp;
    prt_dtype   dt;
    int         ndim;
    size_t      R, C;
    Rect        q;
    const void *data;
} WPiece;

struct prt_ckpt_writer {
    char          dir[4096];
    int           rank;
    prt_ckpt_meta meta;
    char         *plan_hash, *model, *config;
    WPiece       *p;
    int           n, cap;
};

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = (char *)malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

prt_status prt_ckpt_writer_new(const char *dir, int rank, const prt_ckpt_meta *meta,
                               prt_ckpt_writer **out)
{
    ckpt_clear();
    *out = NULL;
    if (rank < 0 || !meta) return ckpt_fail(PRT_ERR_ARG, "prt_ckpt_writer_new: rank %d", rank);
    prt_status st = ckpt_mkdirs(dir);
    if (st) return st;
    /* Saving over an existing checkpoint of this step: its index goes first,
     * so a crash before the new index leaves the directory incomplete rather
     * than an old index over new files. Every rank unlinks it before its own
     * rename, so no rank file is replaced while the old index stands. */
    char idx[4200];
    snprintf(idx, sizeof idx, "%s/" INDEX_NAME, dir);
    if (unlink(idx) && errno != ENOENT)
        return ckpt_fail(PRT_ERR_IO, "%s: cannot remove the old index: %s", idx, strerror(errno));
    prt_ckpt_writer *w = (prt_ckpt_writer *)calloc(1, sizeof *w);
    if (!w) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", dir);
    if (snprintf(w->dir, sizeof w->dir, "%s", dir) >= (int)sizeof w->dir) {
        free(w);
        return ckpt_fail(PRT_ERR_ARG, "%s: path too long", dir);
    }
    w->rank = rank;
    w->meta = *meta;
    w->plan_hash = dupstr(meta->plan_hash ? meta->plan_hash : "");
    w->model = dupstr(meta->model ? meta->model : "");
    w->config = dupstr(meta->config ? meta->config : "");
    if (!w->plan_hash || !w->model || !w->config) {
        prt_ckpt_writer_abort(w);
        return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", dir);
    }
    w->meta.plan_hash = w->plan_hash;
    w->meta.model = w->model;
    w->meta.config = w->config;
    *out = w;
    return PRT_OK;
}

void prt_ckpt_writer_abort(prt_ckpt_writer *w)
{
    if (!w) return;
    for (int i = 0; i < w->n; i++) { free(w->p[i].name); free(w->p[i].keyp); }
    free(w->p);
    free(w->plan_hash);
    free(w->model);
    free(w->config);
    free(w);
}

/* The global tensor's description must be sane before any piece of it is kept. */
static prt_status check_global(const char *who, const char *name, prt_dtype dt, int ndim,
                               size_t R, size_t C, Rect q)
{
    if (!name || !*name || strchr(name, '#') || !strcmp(name, "__metadata__"))
        return ckpt_fail(PRT_ERR_ARG, "%s: bad tensor name \"%s\" (empty, '#' or __metadata__)",
                         who, name ? name : "");
    if (!st_dtype_name(dt)) return ckpt_fail(PRT_ERR_ARG, "%s: %s: unknown dtype %d", who, name, (int)dt);
    if (ndim != 1 && ndim != 2)
        return ckpt_fail(PRT_ERR_ARG, "%s: %s: ndim %d (1 or 2)", who, name, ndim);
    if (ndim == 1 && C != 1) return ckpt_fail(PRT_ERR_ARG, "%s: %s: a vector has 1 column, not %zu", who, name, C);
    if (!(q.r0 < q.r1 && q.r1 <= R && q.c0 < q.c1 && q.c1 <= C))
        return ckpt_fail(PRT_ERR_ARG, "%s: %s: slice [%zu:%zu, %zu:%zu] is empty or outside [%zu, %zu]",
                         who, name, q.r0, q.r1, q.c0, q.c1, R, C);
    return PRT_OK;
}

static prt_status add_piece(prt_ckpt_writer *w, const char *name, prt_dtype dt, int ndim,
                            size_t R, size_t C, Rect q, const void *data)
{
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        WPiece *p = (WPiece *)realloc(w->p, (size_t)cap * sizeof *p);
        if (!p) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", w->dir);
        w->p = p;
        w->cap = cap;
    }
    WPiece *p = &w->p[w->n];
    memset(p, 0, sizeof *p);
    if (!(p->name = dupstr(name))) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", w->dir);
    p->dt = dt;
    p->ndim = ndim;
    p->R = R;
    p->C = C;
    p->q = q;
    p->data = data;
    w->n++;
    return PRT_OK;
}

prt_status prt_ckpt_put(prt_ckpt_writer *w, const char *name, prt_dtype dt, int ndim,
                        size_t R, size_t C, size_t r0, size_t r1, size_t c0, size_t c1,
                        const void *data)
{
    Rect q = {r0, r1, c0, c1};
    prt_status st = check_global("prt_ckpt_put", name, dt, ndim, R, C, q);
    if (st) return st;
    if (!data) return ckpt_fail(PRT_ERR_ARG, "prt_ckpt_put: %s: no data", name);
    return add_piece(w, name, dt, ndim, R, C, q, data);
}

prt_status prt_ckpt_put_flat(prt_ckpt_writer *w, const char *name, prt_dtype dt, int ndim,
                             size_t R, size_t C, size_t r0, size_t r1, size_t c0, size_t c1,
                             size_t f0, size_t f1, const void *data)
{
    Rect q = {r0, r1, c0, c1}, part[3];
    prt_status st = check_global("prt_ckpt_put_flat", name, dt, ndim, R, C, q);
    if (st) return st;
    if (f0 >= f1 || f1 > area(q))
        return ckpt_fail(PRT_ERR_ARG, "prt_ckpt_put_flat: %s: elements [%zu, %zu) of a %zu-element slice",
                         name, f0, f1, area(q));
    if (!data) return ckpt_fail(PRT_ERR_ARG, "prt_ckpt_put_flat: %s: no data", name);
    int n = flat_rects(q, f0, f1, part);
    const char *d = (const char *)data;
    for (int i = 0; i < n; i++) {
        if ((st = add_piece(w, name, dt, ndim, R, C, part[i], d))) return st;
        d += area(part[i]) * prt_dtype_size(dt);
    }
    return PRT_OK;
}

static int by_piece_name(const void *a, const void *b)
{
    const WPiece *const *x = (const WPiece *const *)a, *const *y = (const WPiece *const *)b;
    int c = strcmp((*x)->name, (*y)->name);
    return c ? c : (*x < *y ? -1 : *x > *y);
}

/* Give each piece its key: the name, then "NAME#1", "NAME#2" for more. */
static prt_status assign_keys(prt_ckpt_writer *w)
{
    WPiece **s = (WPiece **)malloc(((size_t)w->n + 1) * sizeof *s);
    if (!s) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", w->dir);
    for (int i = 0; i < w->n; i++) s[i] = &w->p[i];
    qsort(s, (size_t)w->n, sizeof *s, by_piece_name);
    int k = 0;
    for (int i = 0; i < w->n; i++) {
        k = i && !strcmp(s[i]->name, s[i - 1]->name) ? k + 1 : 0;
        size_t len = strlen(s[i]->name) + 24;
        if (!(s[i]->keyp = (char *)malloc(len))) { free(s); return ckpt_fail(PRT_ERR_NOMEM, "out of memory"); }
        if (k) snprintf(s[i]->keyp, len, "%s#%d", s[i]->name, k);
        else snprintf(s[i]->keyp, len, "%s", s[i]->name);
    }
    free(s);
    return PRT_OK;
}

/* "[r0:r1, c0:c1] of [R, C]" (a vector: "[r0:r1] of [R]"): a piece's slice. */
static void slice_text(char *buf, size_t cap, const WPiece *p)
{
    if (p->ndim == 1) snprintf(buf, cap, "[%zu:%zu] of [%zu]", p->q.r0, p->q.r1, p->R);
    else snprintf(buf, cap, "[%zu:%zu, %zu:%zu] of [%zu, %zu]", p->q.r0, p->q.r1, p->q.c0,
                  p->q.c1, p->R, p->C);
}

static void manifest_meta(sbuf *m, const prt_ckpt_meta *meta)
{
    char store[META_MAX][64];
    const char *keys[META_MAX], *vals[META_MAX];
    int n = ckpt_meta_pairs(meta, store, keys, vals);
    SB_LIT(m, "{");
    for (int i = 0; i < n; i++) {
        if (i) SB_LIT(m, ", ");
        sb_json_str(m, keys[i]);
        SB_LIT(m, ": ");
        sb_json_str(m, vals[i]);
    }
    SB_LIT(m, "}");
}

/* The rank file: header (metadata, one entry per piece), then the data. */
static prt_status write_rank_file(prt_ckpt_writer *w, const char *path, uint32_t *crc,
                                  uint64_t *bytes)
{
    int nm = w->n + META_MAX + 1;
    st_hdr_entry *e = (st_hdr_entry *)calloc((size_t)w->n + 1, sizeof *e);
    const char **keys = (const char **)calloc((size_t)nm, sizeof *keys);
    const char **vals = (const char **)calloc((size_t)nm, sizeof *vals);
    char (*slices)[96] = (char (*)[96])calloc((size_t)w->n + 1, 96);
    char store[META_MAX][64], rank[32];
    sbuf h = {0};
    st_out o = {.fd = -1};
    prt_status st = PRT_OK;
    if (!e || !keys || !vals || !slices) { st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path); goto done; }
    int k = ckpt_meta_pairs(&w->meta, store, keys, vals);
    snprintf(rank, sizeof rank, "%d", w->rank);
    keys[k] = "rank", vals[k++] = rank;
    for (int i = 0; i < w->n; i++) {
        const WPiece *p = &w->p[i];
        e[i] = (st_hdr_entry){p->keyp, st_dtype_name(p->dt), p->ndim,
                              {p->q.r1 - p->q.r0, p->q.c1 - p->q.c0},
                              (uint64_t)area(p->q) * prt_dtype_size(p->dt)};
        slice_text(slices[i], 96, p);
        sbuf kb = {0};
        sb_printf(&kb, "slice:%s", p->keyp);
        if (kb.oom) { st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path); goto done; }
        keys[k] = kb.s, vals[k++] = slices[i];   /* freed below: kb.s owned by keys[] */
    }
    if ((st = st_header(&h, e, w->n, keys, vals, k))) goto done;
    if ((st = st_out_open(&o, path))) goto done;
    if ((st = st_out_write(&o, h.s, h.len))) goto done;
    for (int i = 0; i < w->n && !st; i++) st = st_out_write(&o, w->p[i].data, (size_t)e[i].nbytes);
    if (!st) st = st_out_commit(&o);
    *crc = o.crc;
    *bytes = o.bytes;
done:
    if (st && o.fd >= 0) st_out_abort(&o);
    if (keys)
        for (int i = 0; i < nm; i++)   /* the metadata's keys are literals, never "slice:" */
            if (keys[i] && !strncmp(keys[i], "slice:", 6)) free((void *)keys[i]);
    free(e);
    free(keys);
    free(vals);
    free(slices);
    free(h.s);
    return st;
}

prt_status prt_ckpt_writer_finish(prt_ckpt_writer *w, char **manifest, size_t *len)
{
    ckpt_clear();
    *manifest = NULL;
    *len = 0;
    char name[64], path[4200];
    snprintf(name, sizeof name, "rank-%05d.safetensors", w->rank);
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    uint32_t crc = 0;
    uint64_t bytes = 0;
    prt_status st = assign_keys(w);
    if (!st) st = write_rank_file(w, path, &crc, &bytes);
    if (st) { prt_ckpt_writer_abort(w); return st; }
    sbuf m = {0};
    sb_printf(&m, "{\"file\": \"%s\", \"bytes\": %llu, \"crc32c\": \"%08x\", \"rank\": %d, \"metadata\": ",
              name, (unsigned long long)bytes, crc, w->rank);
    manifest_meta(&m, &w->meta);
    SB_LIT(&m, ", \"pieces\": [");
    for (int i = 0; i < w->n; i++) {
        const WPiece *p = &w->p[i];
        sb_str(&m, ",\n  {\"name\": " + (i ? 0 : 1));
        sb_json_str(&m, p->name);
        SB_LIT(&m, ", \"key\": ");
        sb_json_str(&m, p->keyp);
        sb_printf(&m, ", \"dtype\": \"%s\", \"shape\": ", st_dtype_name(p->dt));
        if (p->ndim == 1) sb_printf(&m, "[%zu]", p->R);
        else sb_printf(&m, "[%zu, %zu]", p->R, p->C);
        sb_printf(&m, ", \"rows\": [%zu, %zu], \"cols\": [%zu, %zu]}", p->q.r0, p->q.r1, p->q.c0, p->q.c1);
    }
    SB_LIT(&m, "]}\n");
    prt_ckpt_writer_abort(w);
    if (m.oom) { free(m.s); return ckpt_fail(PRT_ERR_NOMEM, "%s: manifest: out of memory", path); }
    *manifest = m.s;
    *len = m.len;
    return PRT_OK;
}

/* ---- the index: one model for writing and reading ------------------------------ */

typedef struct {
    int         file;
    const char *key;
    Rect        q;
} CPiece;

typedef struct {
    prt_ckpt_tensor t;      /* t.name points into a JSON pool */
    const char     *dtype;  /* safetensors name */
    CPiece         *pc;     /* t.pieces of them */
} CTensor;

typedef struct {
    const char *name;
    uint64_t    bytes;
    uint32_t    crc;
    prt_st     *st;         /* opened and checked on first use */
} CFile;

struct prt_ckpt {
    char             dir[4096];
    js_doc           doc;
    prt_ckpt_meta    meta;
    CFile           *f;
    int              nf;
    CTensor         *t;     /* sorted by name */
    int              nt;
    CPiece          *pieces;
    const CFile    **fsorted;   /* [nf] files by name, for lookups */
    int             *fstart;    /* [nf + 1] each file's run in fpiece */
    struct { int t; const CPiece *p; } *fpiece;   /* every piece, grouped by file */
};

static int by_tensor_name(const void *a, const void *b)
{
    return strcmp(((const CTensor *)a)->t.name, ((const CTensor *)b)->t.name);
}

/* Every tensor's pieces must be inside it, disjoint, and cover it exactly. */
static prt_status check_cover(const char *where, const CTensor *t, const CFile *f)
{
    size_t total = 0;
    for (int i = 0; i < t->t.pieces; i++) {
        Rect a = t->pc[i].q;
        if (!(a.r0 < a.r1 && a.r1 <= t->t.rows && a.c0 < a.c1 && a.c1 <= t->t.cols))
            return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": piece [%zu:%zu, %zu:%zu] in %s is outside [%zu, %zu]",
                             where, t->t.name, a.r0, a.r1, a.c0, a.c1, f[t->pc[i].file].name,
                             t->t.rows, t->t.cols);
        for (int j = 0; j < i; j++)
            if (overlap(a, t->pc[j].q))
                return ckpt_fail(PRT_ERR_FORMAT,
                                 "%s: tensor \"%s\": pieces [%zu:%zu, %zu:%zu] in %s and [%zu:%zu, %zu:%zu] in %s overlap",
                                 where, t->t.name, a.r0, a.r1, a.c0, a.c1, f[t->pc[i].file].name,
                                 t->pc[j].q.r0, t->pc[j].q.r1, t->pc[j].q.c0, t->pc[j].q.c1,
                                 f[t->pc[j].file].name);
        total += area(a);
    }
    if (total != t->t.rows * t->t.cols)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": pieces cover %zu of its %zu elements",
                         where, t->t.name, total, t->t.rows * t->t.cols);
    return PRT_OK;
}

static bool js_pair(const js_doc *d, int arr, uint64_t *a, uint64_t *b)
{
    return arr >= 0 && d->n[arr].kind == JS_ARR && d->n[arr].count == 2 &&
           js_u64(d, d->n[arr].first, a) && js_u64(d, d->n[d->n[arr].first].next, b);
}

/* A shape [R] or [R, C] into (R, C, ndim). */
static bool js_shape(const js_doc *d, int arr, size_t *R, size_t *C, int *ndim)
{
    if (arr < 0 || d->n[arr].kind != JS_ARR || d->n[arr].count < 1 || d->n[arr].count > 2)
        return false;
    uint64_t r, c = 1;
    if (!js_u64(d, d->n[arr].first, &r)) return false;
    if (d->n[arr].count == 2 && !js_u64(d, d->n[d->n[arr].first].next, &c)) return false;
    if (r == 0 || c == 0 || r > SIZE_MAX / c) return false;
    *R = (size_t)r, *C = (size_t)c, *ndim = d->n[arr].count;
    return true;
}

static const char *js_strv(const js_doc *d, int obj, const char *key)
{
    int i = js_get(d, obj, key);
    return i >= 0 && d->n[i].kind == JS_STR ? d->n[i].str : NULL;
}

/* Parse the index's "metadata" object into m (strings point into d). */
static prt_status parse_meta(const char *where, const js_doc *d, int obj, prt_ckpt_meta *m)
{
    const char *need[] = {"step", "seed", "dp", "tp", "pp", "zero", "plan_hash", "model"};
    if (obj < 0 || d->n[obj].kind != JS_OBJ)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: no \"metadata\" object", where);
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!js_strv(d, obj, need[i]))
            return ckpt_fail(PRT_ERR_FORMAT, "%s: metadata \"%s\" missing (or not a string)", where, need[i]);
    char *end;
    errno = 0;
    m->step = strtol(js_strv(d, obj, "step"), &end, 10);
    if (*end || errno || m->step < 0) return ckpt_fail(PRT_ERR_FORMAT, "%s: metadata step is not a step", where);
    m->seed = strtoull(js_strv(d, obj, "seed"), &end, 10);
    if (*end) return ckpt_fail(PRT_ERR_FORMAT, "%s: metadata seed is not a number", where);
    m->dp = atoi(js_strv(d, obj, "dp"));
    m->tp = atoi(js_strv(d, obj, "tp"));
    m->pp = atoi(js_strv(d, obj, "pp"));
    m->zero = atoi(js_strv(d, obj, "zero"));
    m->cp = js_strv(d, obj, "cp") ? atoi(js_strv(d, obj, "cp")) : 1;   /* absent: written without CP */
    m->plan_hash = js_strv(d, obj, "plan_hash");
    m->model = js_strv(d, obj, "model");
    m->config = js_strv(d, obj, "model_config");   /* absent: a checkpoint from before issue 28 */
    return PRT_OK;
}

/* Read one piece object {file|key, rows, cols} (file resolved by the caller). */
static prt_status parse_piece(const char *where, const js_doc *d, int node, const char *tname,
                              CPiece *p)
{
    uint64_t r0, r1, c0, c1;
    p->key = js_strv(d, node, "key");
    if (!p->key || !js_pair(d, js_get(d, node, "rows"), &r0, &r1) ||
        !js_pair(d, js_get(d, node, "cols"), &c0, &c1))
        return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": a piece lacks key, rows or cols", where, tname);
    p->q = (Rect){(size_t)r0, (size_t)r1, (size_t)c0, (size_t)c1};
    return PRT_OK;
}

static int by_file_name(const void *a, const void *b)
{
    return strcmp((*(const CFile *const *)a)->name, (*(const CFile *const *)b)->name);
}

/* File `name` of an open checkpoint: binary search (an index may name
 * thousands of files and hundreds of thousands of pieces). */
static int lookup_file(const prt_ckpt *ck, const char *name)
{
    CFile key = {.name = name};
    const CFile *kp = &key, **hit;
    hit = (const CFile **)bsearch(&kp, ck->fsorted, (size_t)ck->nf, sizeof *ck->fsorted, by_file_name);
    return hit ? (int)(*hit - ck->f) : -1;
}

/* Group every piece by its file, so checking a file visits its pieces only. */
static prt_status group_by_file(prt_ckpt *ck, size_t npieces)
{
    ck->fstart = (int *)calloc((size_t)ck->nf + 2, sizeof *ck->fstart);
    ck->fpiece = calloc(npieces + 1, sizeof *ck->fpiece);
    if (!ck->fstart || !ck->fpiece) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", ck->dir);
    for (int t = 0; t < ck->nt; t++)
        for (int p = 0; p < ck->t[t].t.pieces; p++) ck->fstart[ck->t[t].pc[p].file + 2]++;
    for (int i = 2; i <= ck->nf + 1; i++) ck->fstart[i] += ck->fstart[i - 1];
    for (int t = 0; t < ck->nt; t++)
        for (int p = 0; p < ck->t[t].t.pieces; p++) {
            int at = ck->fstart[ck->t[t].pc[p].file + 1]++;
            ck->fpiece[at].t = t;
            ck->fpiece[at].p = &ck->t[t].pc[p];
        }
    return PRT_OK;
}

static int find_file(const CFile *f, int nf, const char *name)
{
    for (int i = 0; i < nf; i++)
        if (!strcmp(f[i].name, name)) return i;
    return -1;
}

/* Parse and check index.json of ck->dir into ck (files and tensors). */
static prt_status load_index(prt_ckpt *ck)
{
    char path[4200], where[4200];
    snprintf(path, sizeof path, "%s/" INDEX_NAME, ck->dir);
    snprintf(where, sizeof where, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ckpt_fail(PRT_ERR_IO, "%s: no " INDEX_NAME " (%s): the checkpoint is incomplete", ck->dir,
                         strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || sb.st_size > 1000000000) {
        close(fd);
        return ckpt_fail(PRT_ERR_FORMAT, "%s: cannot stat, or larger than 1 GB", path);
    }
    char *text = (char *)malloc((size_t)sb.st_size + 1);
    size_t got = 0;
    while (text && got < (size_t)sb.st_size) {
        ssize_t r = read(fd, text + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!text) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path);
    if (got != (size_t)sb.st_size) { free(text); return ckpt_fail(PRT_ERR_IO, "%s: short read", path); }
    prt_status st = js_parse(text, got, where, &ck->doc);
    free(text);
    if (st) return st;
    const js_doc *d = &ck->doc;
    if (d->n[0].kind != JS_OBJ) return ckpt_fail(PRT_ERR_FORMAT, "%s: not a JSON object", path);
    const char *fmt = js_strv(d, 0, "format");
    if (!fmt || strcmp(fmt, INDEX_FORMAT))
        return ckpt_fail(PRT_ERR_FORMAT, "%s: format is not \"" INDEX_FORMAT "\"", path);
    if ((st = parse_meta(path, d, js_get(d, 0, "metadata"), &ck->meta))) return st;
    int files = js_get(d, 0, "files"), tensors = js_get(d, 0, "tensors");
    if (files < 0 || d->n[files].kind != JS_OBJ || tensors < 0 || d->n[tensors].kind != JS_OBJ)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: \"files\" or \"tensors\" missing", path);
    ck->f = (CFile *)calloc((size_t)d->n[files].count + 1, sizeof *ck->f);
    ck->t = (CTensor *)calloc((size_t)d->n[tensors].count + 1, sizeof *ck->t);
    size_t npieces = 0;
    for (int c = d->n[tensors].first; c >= 0; c = d->n[c].next) {
        int pcs = js_get(d, c, "pieces");
        if (pcs >= 0) npieces += (size_t)d->n[pcs].count;
    }
    ck->pieces = (CPiece *)calloc(npieces + 1, sizeof *ck->pieces);
    if (!ck->f || !ck->t || !ck->pieces) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path);
    for (int c = d->n[files].first; c >= 0; c = d->n[c].next) {
        CFile *f = &ck->f[ck->nf];
        const char *crc = js_strv(d, c, "crc32c");
        char *end;
        f->name = d->n[c].key;
        if (strchr(f->name, '/') || f->name[0] == '.' || !crc || strlen(crc) != 8 ||
            !js_u64(d, js_get(d, c, "bytes"), &f->bytes))
            return ckpt_fail(PRT_ERR_FORMAT, "%s: file \"%s\": bad name, bytes or crc32c", path, f->name);
        f->crc = (uint32_t)strtoul(crc, &end, 16);
        if (*end) return ckpt_fail(PRT_ERR_FORMAT, "%s: file \"%s\": crc32c is not hex", path, f->name);
        ck->nf++;
    }
    if (!(ck->fsorted = (const CFile **)calloc((size_t)ck->nf + 1, sizeof *ck->fsorted)))
        return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < ck->nf; i++) ck->fsorted[i] = &ck->f[i];
    qsort(ck->fsorted, (size_t)ck->nf, sizeof *ck->fsorted, by_file_name);
    CPiece *next = ck->pieces;
    for (int c = d->n[tensors].first; c >= 0; c = d->n[c].next) {
        CTensor *t = &ck->t[ck->nt];
        t->t.name = d->n[c].key;
        t->dtype = js_strv(d, c, "dtype");
        bool ok = false;
        if (t->dtype) t->t.dtype = dtype_from_name(t->dtype, &ok);
        int pcs = js_get(d, c, "pieces");
        if (!ok || !js_shape(d, js_get(d, c, "shape"), &t->t.rows, &t->t.cols, &t->t.ndim) ||
            pcs < 0 || d->n[pcs].kind != JS_ARR || d->n[pcs].count == 0)
            return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": bad dtype, shape or pieces", path, t->t.name);
        t->pc = next;
        for (int p = d->n[pcs].first; p >= 0; p = d->n[p].next) {
            const char *file = js_strv(d, p, "file");
            if ((st = parse_piece(path, d, p, t->t.name, next))) return st;
            if (!file || (next->file = lookup_file(ck, file)) < 0)
                return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": piece in unknown file \"%s\"", path,
                                 t->t.name, file ? file : "");
            next++;
            t->t.pieces++;
        }
        if ((st = check_cover(path, t, ck->f))) return st;
        ck->nt++;
    }
    qsort(ck->t, (size_t)ck->nt, sizeof *ck->t, by_tensor_name);
    return group_by_file(ck, npieces);
}

/* ---- writing the index ---------------------------------------------------------- */

/* Turn the manifests into files and tensors (names point into docs). */
static prt_status gather_manifests(const char *dir, js_doc *docs, int n, const prt_ckpt_meta *meta,
                                   prt_ckpt *ix)
{
    size_t np = 0;
    prt_status st;
    for (int i = 0; i < n; i++) {
        int pcs = js_get(&docs[i], 0, "pieces");
        if (docs[i].n[0].kind != JS_OBJ || pcs < 0 || docs[i].n[pcs].kind != JS_ARR)
            return ckpt_fail(PRT_ERR_FORMAT, "%s: manifest %d: no pieces", dir, i);
        np += (size_t)docs[i].n[pcs].count;
    }
    ix->f = (CFile *)calloc((size_t)n + 1, sizeof *ix->f);
    ix->t = (CTensor *)calloc(np + 1, sizeof *ix->t);
    ix->pieces = (CPiece *)calloc(np + 1, sizeof *ix->pieces);
    if (!ix->f || !ix->t || !ix->pieces)
        return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", dir);
    /* every piece, with the tensor description it carries */
    size_t k = 0;
    st = PRT_OK;
    for (int i = 0; i < n && !st; i++) {
        const js_doc *d = &docs[i];
        CFile *f = &ix->f[i];
        const char *crc = js_strv(d, 0, "crc32c");
        prt_ckpt_meta fm;
        f->name = js_strv(d, 0, "file");
        if (!f->name || !crc || !js_u64(d, js_get(d, 0, "bytes"), &f->bytes)) {
            st = ckpt_fail(PRT_ERR_FORMAT, "%s: manifest %d: file, bytes or crc32c missing", dir, i);
            break;
        }
        if (find_file(ix->f, i, f->name) >= 0) {
            st = ckpt_fail(PRT_ERR_ARG, "%s: two manifests for %s (two writers with one rank)", dir, f->name);
            break;
        }
        f->crc = (uint32_t)strtoul(crc, NULL, 16);
        if ((st = parse_meta(f->name, d, js_get(d, 0, "metadata"), &fm))) break;
        if (fm.step != meta->step || strcmp(fm.model, meta->model ? meta->model : "")) {
            st = ckpt_fail(PRT_ERR_ARG, "%s/%s: written for step %ld of model \"%s\", the index is for step %ld of \"%s\"",
                           dir, f->name, fm.step, fm.model, meta->step, meta->model ? meta->model : "");
            break;
        }
        ix->nf++;
        for (int p = d->n[js_get(d, 0, "pieces")].first; p >= 0 && !st; p = d->n[p].next, k++) {
            CTensor *t = &ix->t[k];
            bool ok = false;
            t->t.name = js_strv(d, p, "name");
            t->dtype = js_strv(d, p, "dtype");
            if (t->dtype) t->t.dtype = dtype_from_name(t->dtype, &ok);
            if (!t->t.name || !ok || !js_shape(d, js_get(d, p, "shape"), &t->t.rows, &t->t.cols, &t->t.ndim)) {
                st = ckpt_fail(PRT_ERR_FORMAT, "%s: manifest of %s: bad piece", dir, f->name);
                break;
            }
            if ((st = parse_piece(dir, d, p, t->t.name, &ix->pieces[k]))) break;
            ix->pieces[k].file = i;
            t->pc = &ix->pieces[k];
            t->t.pieces = 1;
        }
    }
    if (!st) {
        /* merge the one-piece tensors by name: sort, then check and join runs */
        ix->nt = (int)k;
        qsort(ix->t, k, sizeof *ix->t, by_tensor_name);
        CPiece *merged = (CPiece *)calloc(k + 1, sizeof *merged);
        if (!merged) st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", dir);
        int out = 0;
        size_t at = 0;
        for (size_t a = 0; a < k && !st;) {
            size_t b = a;
            while (b < k && !strcmp(ix->t[b].t.name, ix->t[a].t.name)) b++;
            CTensor t = ix->t[a];
            for (size_t j = a; j < b; j++) {
                const CTensor *u = &ix->t[j];
                if (strcmp(u->dtype, t.dtype) || u->t.rows != t.t.rows || u->t.cols != t.t.cols ||
                    u->t.ndim != t.t.ndim) {
                    st = ckpt_fail(PRT_ERR_ARG, "%s: tensor \"%s\": %s has it as %s [%zu, %zu], %s as %s [%zu, %zu]",
                                   dir, t.t.name, ix->f[t.pc->file].name, t.dtype, t.t.rows, t.t.cols,
                                   ix->f[u->pc->file].name, u->dtype, u->t.rows, u->t.cols);
                    break;
                }
                merged[at + (j - a)] = *u->pc;
            }
            t.pc = &merged[at];
            t.t.pieces = (int)(b - a);
            at += b - a;
            if (!st) st = check_cover(dir, &t, ix->f);
            ix->t[out++] = t;
            a = b;
        }
        ix->nt = out;
        free(ix->pieces);
        ix->pieces = merged;
    }
    return st;
}

/* The index text: format, metadata, files, tensors with their pieces. */
static void index_text(sbuf *b, const prt_ckpt *ix, const prt_ckpt_meta *meta)
{
    SB_LIT(b, "{\n\"format\": \"" INDEX_FORMAT "\",\n\"metadata\": ");
    manifest_meta(b, meta);
    SB_LIT(b, ",\n\"files\": {");
    for (int i = 0; i < ix->nf; i++) {
        sb_str(b, ",\n  " + (i ? 0 : 1));
        sb_json_str(b, ix->f[i].name);
        sb_printf(b, ": {\"bytes\": %llu, \"crc32c\": \"%08x\"}", (unsigned long long)ix->f[i].bytes,
                  ix->f[i].crc);
    }
    SB_LIT(b, "},\n\"tensors\": {");
    for (int i = 0; i < ix->nt; i++) {
        const CTensor *t = &ix->t[i];
        sb_str(b, ",\n  " + (i ? 0 : 1));
        sb_json_str(b, t->t.name);
        sb_printf(b, ": {\"dtype\": \"%s\", \"shape\": ", t->dtype);
        if (t->t.ndim == 1) sb_printf(b, "[%zu]", t->t.rows);
        else sb_printf(b, "[%zu, %zu]", t->t.rows, t->t.cols);
        SB_LIT(b, ", \"pieces\": [");
        for (int p = 0; p < t->t.pieces; p++) {
            const CPiece *c = &t->pc[p];
            sb_str(b, ",\n    {\"file\": " + (p ? 0 : 1));
            sb_json_str(b, ix->f[c->file].name);
            SB_LIT(b, ", \"key\": ");
            sb_json_str(b, c->key);
            sb_printf(b, ", \"rows\": [%zu, %zu], \"cols\": [%zu, %zu]}", c->q.r0, c->q.r1, c->q.c0, c->q.c1);
        }
        SB_LIT(b, "]}");
    }
    SB_LIT(b, "}\n}\n");
}

prt_status prt_ckpt_index_write(const char *dir, const prt_ckpt_meta *meta,
                                const char *const *manifests, const size_t *lens, int n)
{
    ckpt_clear();
    if (n < 1 || !meta) return ckpt_fail(PRT_ERR_ARG, "%s: an index needs at least one manifest", dir);
    js_doc *docs = (js_doc *)calloc((size_t)n, sizeof *docs);
    prt_ckpt ix;
    memset(&ix, 0, sizeof ix);
    prt_status st = docs ? PRT_OK : ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", dir);
    for (int i = 0; i < n && !st; i++) {
        char what[4200];
        snprintf(what, sizeof what, "%s: manifest %d", dir, i);
        st = js_parse(manifests[i], lens[i], what, &docs[i]);
    }
    if (!st) st = gather_manifests(dir, docs, n, meta, &ix);
    sbuf b = {0};
    if (!st) {
        index_text(&b, &ix, meta);
        if (b.oom) st = ckpt_fail(PRT_ERR_NOMEM, "%s: index: out of memory", dir);
    }
    if (!st) {
        char path[4200];
        st_out o;
        snprintf(path, sizeof path, "%s/" INDEX_NAME, dir);
        if (!(st = st_out_open(&o, path)) && !(st = st_out_write(&o, b.s, b.len))) st = st_out_commit(&o);
        else if (o.fd >= 0) st_out_abort(&o);
    }
    free(b.s);
    free(ix.f);
    free(ix.t);
    free(ix.pieces);
    for (int i = 0; docs && i < n; i++) js_free(&docs[i]);
    free(docs);
    return st;
}

/* ---- reading -------------------------------------------------------------------- */

static prt_status ckpt_new(const char *dir, prt_ckpt **out)
{
    prt_ckpt *ck = (prt_ckpt *)calloc(1, sizeof *ck);
    if (!ck) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", dir);
    if (snprintf(ck->dir, sizeof ck->dir, "%s", dir) >= (int)sizeof ck->dir) {
        free(ck);
        return ckpt_fail(PRT_ERR_ARG, "%s: path too long", dir);
    }
    *out = ck;
    return PRT_OK;
}

/* Each file the index names must exist with its recorded size. */
static prt_status check_sizes(prt_ckpt *ck)
{
    for (int i = 0; i < ck->nf; i++) {
        char path[8400];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", ck->dir, ck->f[i].name);
        if (stat(path, &sb))
            return ckpt_fail(PRT_ERR_IO, "%s: missing (%s); the index names it", path, strerror(errno));
        if ((uint64_t)sb.st_size != ck->f[i].bytes)
            return ckpt_fail(PRT_ERR_FORMAT, "%s: %s: %llu bytes, the index records %llu", path,
                             (uint64_t)sb.st_size < ck->f[i].bytes ? "truncated" : "wrong size",
                             (unsigned long long)sb.st_size, (unsigned long long)ck->f[i].bytes);
    }
    return PRT_OK;
}

prt_status prt_ckpt_open(const char *dir, prt_ckpt **out)
{
    ckpt_clear();
    *out = NULL;
    prt_ckpt *ck;
    prt_status st = ckpt_new(dir, &ck);
    if (st) return st;
    if (!(st = load_index(ck))) st = check_sizes(ck);
    if (st) { prt_ckpt_close(ck); return st; }
    *out = ck;
    return PRT_OK;
}

void prt_ckpt_close(prt_ckpt *ck)
{
    if (!ck) return;
    for (int i = 0; i < ck->nf; i++) prt_st_close(ck->f[i].st);
    js_free(&ck->doc);
    free(ck->f);
    free(ck->t);
    free(ck->pieces);
    free(ck->fsorted);
    free(ck->fstart);
    free(ck->fpiece);
    free(ck);
}

static int by_step_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

prt_status prt_ckpt_latest(const char *root, char *buf, size_t cap, long *step)
{
    ckpt_clear();
    DIR *d = opendir(root);
    if (!d) return ckpt_fail(PRT_ERR_IO, "%s: cannot open checkpoint directory: %s", root, strerror(errno));
    long *steps = NULL;
    size_t n = 0, ncap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "step-", 5) || !e->d_name[5]) continue;
        long s = strtol(e->d_name + 5, &end, 10);
        if (*end || s < 0) continue;
        if (n == ncap) {
            ncap = ncap ? 2 * ncap : 16;
            long *t = (long *)realloc(steps, ncap * sizeof *t);
            if (!t) { free(steps); closedir(d); return ckpt_fail(PRT_ERR_NOMEM, "out of memory"); }
            steps = t;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (n) qsort(steps, n, sizeof *steps, by_step_desc);
    prt_status st = PRT_ERR_IO;
    for (size_t i = 0; i < n; i++) {
        prt_ckpt *ck;
        if (prt_ckpt_step_dir(root, steps[i], buf, cap) || ckpt_new(buf, &ck)) continue;
        prt_status bad = load_index(ck);   /* an incomplete or damaged index: skip */
        prt_ckpt_close(ck);
        if (bad) continue;
        *step = steps[i];
        st = PRT_OK;
        ckpt_clear();
        break;
    }
    free(steps);
    if (st)
        return ckpt_fail(st, "%s: no complete checkpoint (no step-* directory with a valid index)", root);
    return st;
}

const prt_ckpt_meta *prt_ckpt_get_meta(const prt_ckpt *ck) { return &ck->meta; }

const char *prt_ckpt_meta_str(const prt_ckpt *ck, const char *key)
{
    return js_strv(&ck->doc, js_get(&ck->doc, 0, "metadata"), key);
}

int prt_ckpt_count(const prt_ckpt *ck) { return ck->nt; }

const prt_ckpt_tensor *prt_ckpt_tensor_at(const prt_ckpt *ck, int i)
{
    return i >= 0 && i < ck->nt ? &ck->t[i].t : NULL;
}

static const CTensor *find_tensor(const prt_ckpt *ck, const char *name)
{
    CTensor key;
    key.t.name = name;
    return (const CTensor *)bsearch(&key, ck->t, (size_t)ck->nt, sizeof *ck->t, by_tensor_name);
}

const prt_ckpt_tensor *prt_ckpt_find(const prt_ckpt *ck, const char *name)
{
    const CTensor *t = find_tensor(ck, name);
    return t ? &t->t : NULL;
}

static int by_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Check file i once: size and CRC-32C against the index, then its header
 * against every piece the index places in it. */
static prt_status use_file(prt_ckpt *ck, int i)
{
    CFile *f = &ck->f[i];
    if (f->st) return PRT_OK;
    char path[8400];
    snprintf(path, sizeof path, "%s/%s", ck->dir, f->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ckpt_fail(PRT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    uint32_t crc;
    uint64_t bytes;
    prt_status st = ckpt_file_crc(fd, path, &crc, &bytes);
    close(fd);
    if (st) return st;
    if (bytes != f->bytes)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: %s: %llu bytes, the index records %llu", path,
                         bytes < f->bytes ? "truncated" : "wrong size", (unsigned long long)bytes,
                         (unsigned long long)f->bytes);
    if (crc != f->crc)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: checksum mismatch: CRC-32C %08x, the index records %08x (the file is corrupt)",
                         path, crc, f->crc);
    prt_st *s;
    if ((st = prt_st_open(path, &s))) return st;
    int n = ck->fstart[i + 1] - ck->fstart[i];
    const char **keys = (const char **)calloc((size_t)n + 1, sizeof *keys);
    if (!keys) st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path);
    for (int k = 0; k < n && !st; k++) {
        int t = ck->fpiece[ck->fstart[i] + k].t;
        const CPiece *c = ck->fpiece[ck->fstart[i] + k].p;
        const prt_st_entry *e = prt_st_find(s, c->key);
        size_t h = c->q.r1 - c->q.r0, w = c->q.c1 - c->q.c0;
        int nd = ck->t[t].t.ndim;
        if (!e || strcmp(e->dtype, ck->t[t].dtype) || e->ndim != nd || e->shape[0] != h ||
            (nd == 2 && e->shape[1] != w))
            st = ckpt_fail(PRT_ERR_FORMAT, "%s: entry \"%s\" is missing or does not match the index (%s, %zu x %zu)",
                           path, c->key, ck->t[t].dtype, h, w);
        keys[k] = c->key;
    }
    /* two pieces of the index must not share one entry */
    if (!st) qsort(keys, (size_t)n, sizeof *keys, by_cstr);
    for (int k = 1; k < n && !st; k++)
        if (!strcmp(keys[k - 1], keys[k]))
            st = ckpt_fail(PRT_ERR_FORMAT, "%s/" INDEX_NAME ": entry \"%s\" of %s is named by two pieces",
                           ck->dir, keys[k], f->name);
    free(keys);
    if (st) { prt_st_close(s); return st; }
    f->st = s;
    return PRT_OK;
}

prt_status prt_ckpt_verify(prt_ckpt *ck)
{
    ckpt_clear();
    for (int i = 0; i < ck->nf; i++) {
        prt_status st = use_file(ck, i);
        if (st) return st;
    }
    return PRT_OK;
}

/* Rows of `row` bytes that are contiguous in the file but `stride` apart in
 * dst (a column-split piece into a wider slice): read them in blocks of up
 * to 8 MiB and scatter, instead of one read call per row — the same bytes,
 * about 1000x fewer system calls for a 4096-row tensor. */
static prt_status read_rows_scattered(prt_st *s, const prt_st_entry *e, uint64_t src, size_t rows,
                                      size_t row, size_t stride, char *out)
{
    size_t per = row >= (8u << 20) ? 1 : (8u << 20) / row;
    if (per > rows) per = rows;
    char *tmp = (char *)malloc(per * row);
    if (!tmp) return ckpt_fail(PRT_ERR_NOMEM, "reading \"%s\": out of memory", e->name);
    prt_status st = PRT_OK;
    for (size_t r = 0; r < rows && !st; r += per) {
        size_t k = rows - r < per ? rows - r : per;
        st = prt_st_read(s, e, src + (uint64_t)r * row, k * row, tmp);
        for (size_t i = 0; i < k && !st; i++) memcpy(out + (r + i) * stride, tmp + i * row, row);
    }
    free(tmp);
    return st;
}

/* Copy the part of piece c inside q into dst ((q.r1-q.r0, q.c1-q.c0) row-major). */
static prt_status read_piece(prt_ckpt *ck, const CTensor *t, const CPiece *c, Rect q, char *dst)
{
    Rect x = {c->q.r0 > q.r0 ? c->q.r0 : q.r0, c->q.r1 < q.r1 ? c->q.r1 : q.r1,
              c->q.c0 > q.c0 ? c->q.c0 : q.c0, c->q.c1 < q.c1 ? c->q.c1 : q.c1};
    if (x.r0 >= x.r1 || x.c0 >= x.c1) return PRT_OK;
    prt_status st = use_file(ck, c->file);
    if (st) return st;
    prt_st *s = ck->f[c->file].st;
    const prt_st_entry *e = prt_st_find(s, c->key);
    size_t es = prt_dtype_size(t->t.dtype), pw = c->q.c1 - c->q.c0, qw = q.c1 - q.c0, xw = x.c1 - x.c0;
    size_t src = ((x.r0 - c->q.r0) * pw + (x.c0 - c->q.c0)) * es;
    char *out = dst + ((x.r0 - q.r0) * qw + (x.c0 - q.c0)) * es;
    if (xw == pw && xw == qw)   /* whole rows on both sides: one read */
        return prt_st_read(s, e, src, (x.r1 - x.r0) * xw * es, out);
    if (xw == pw && (x.r1 - x.r0) > 1)   /* whole piece rows, narrower than dst: block reads */
        return read_rows_scattered(s, e, src, x.r1 - x.r0, xw * es, qw * es, out);
    for (size_t r = x.r0; r < x.r1 && !st; r++, src += pw * es, out += qw * es)
        st = prt_st_read(s, e, src, xw * es, out);
    return st;
}

prt_status prt_ckpt_read(prt_ckpt *ck, const char *name, size_t r0, size_t r1, size_t c0,
                         size_t c1, void *dst)
{
    ckpt_clear();
    const CTensor *t = find_tensor(ck, name);
    if (!t) return ckpt_fail(PRT_ERR_ARG, "%s: no tensor \"%s\" in the checkpoint", ck->dir, name);
    if (r0 > r1 || r1 > t->t.rows || c0 > c1 || c1 > t->t.cols)
        return ckpt_fail(PRT_ERR_ARG, "%s: tensor \"%s\": slice [%zu:%zu, %zu:%zu] outside [%zu, %zu]",
                         ck->dir, name, r0, r1, c0, c1, t->t.rows, t->t.cols);
    Rect q = {r0, r1, c0, c1};
    for (int p = 0; p < t->t.pieces; p++) {
        prt_status st = read_piece(ck, t, &t->pc[p], q, (char *)dst);
        if (st) return st;
    }
    return PRT_OK;
}

prt_status prt_ckpt_read_flat(prt_ckpt *ck, const char *name, size_t r0, size_t r1,
                              size_t c0, size_t c1, size_t f0, size_t f1, void *dst)
{
    ckpt_clear();
    const CTensor *t = find_tensor(ck, name);
    if (!t) return ckpt_fail(PRT_ERR_ARG, "%s: no tensor \"%s\" in the checkpoint", ck->dir, name);
    Rect q = {r0, r1, c0, c1}, part[3];
    if (r0 >= r1 || c0 >= c1 || f0 > f1 || f1 > area(q))
        return ckpt_fail(PRT_ERR_ARG, "%s: tensor \"%s\": elements [%zu, %zu) of slice [%zu:%zu, %zu:%zu]",
                         ck->dir, name, f0, f1, r0, r1, c0, c1);
    int n = flat_rects(q, f0, f1, part);
    char *d = (char *)dst;
    for (int i = 0; i < n; i++) {
        prt_status st = prt_ckpt_read(ck, name, part[i].r0, part[i].r1, part[i].c0, part[i].c1, d);
        if (st) return st;
        d += area(part[i]) * prt_dtype_size(t->t.dtype);
    }
    return PRT_OK;
}

/* ---- checking a checkpoint against a model ----------------------------------------- */

static void shape_text(char *buf, size_t cap, int ndim, size_t R, size_t C)
{
    if (ndim == 1) snprintf(buf, cap, "[%zu]", R);
    else snprintf(buf, cap, "[%zu, %zu]", R, C);
}

prt_status prt_ckpt_check_model(const prt_ckpt *ck, const char *model,
                                const prt_ckpt_tensor *want, int n)
{
    ckpt_clear();
    sbuf b = {0};
    int bad = 0, shown = 0;
#define MISMATCH(...) do { bad++; if (shown < 4) { sb_printf(&b, "%s", shown ? "; " : ""); \
                           sb_printf(&b, __VA_ARGS__); shown++; } } while (0)
    if (model && strcmp(model, ck->meta.model))
        MISMATCH("model \"%s\" in the checkpoint, \"%s\" here", ck->meta.model, model);
    int found = 0;
    for (int i = 0; i < n; i++) {
        const CTensor *t = find_tensor(ck, want[i].name);
        char a[64], w[64];
        if (!t) { MISMATCH("tensor \"%s\" missing from the checkpoint", want[i].name); continue; }
        found++;
        shape_text(a, sizeof a, t->t.ndim, t->t.rows, t->t.cols);
        shape_text(w, sizeof w, want[i].ndim, want[i].rows, want[i].cols);
        if (strcmp(a, w) || t->t.dtype != want[i].dtype)
            MISMATCH("tensor \"%s\": %s %s in the checkpoint, %s %s in the model", want[i].name,
                     t->dtype, a, st_dtype_name(want[i].dtype) ? st_dtype_name(want[i].dtype) : "?", w);
    }
    if (found < ck->nt)
        for (int i = 0; i < ck->nt; i++) {
            bool known = false;
            for (int j = 0; j < n && !known; j++) known = !strcmp(want[j].name, ck->t[i].t.name);
            if (!known) MISMATCH("tensor \"%s\" in the checkpoint is not in the model", ck->t[i].t.name);
        }
#undef MISMATCH
    if (!bad) { free(b.s); return PRT_OK; }
    prt_status st = ckpt_fail(PRT_ERR_FORMAT, "%s: not a checkpoint of this model: %s%s%.0d%s", ck->dir,
                              b.s ? b.s : "", bad > shown ? " (and " : "", bad > shown ? bad - shown : 0,
                              bad > shown ? " more)" : "");
    free(b.s);
    return st;
}

/* ---- consolidation ------------------------------------------------------------------- */

prt_status prt_ckpt_consolidate(const char *dir, const char *out_path, const char *skip_prefix)
{
    prt_ckpt *ck;
    prt_status st = prt_ckpt_open(dir, &ck);
    if (st) return st;
    size_t skip = skip_prefix ? strlen(skip_prefix) : 0;
    st_hdr_entry *e = (st_hdr_entry *)calloc((size_t)ck->nt + 1, sizeof *e);
    int *which = (int *)calloc((size_t)ck->nt + 1, sizeof *which);
    int n = 0;
    if (!e || !which) st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", out_path);
    for (int i = 0; i < ck->nt && !st; i++) {
        const CTensor *t = &ck->t[i];
        if (skip && !strncmp(t->t.name, skip_prefix, skip)) continue;
        e[n] = (st_hdr_entry){t->t.name, t->dtype, t->t.ndim, {t->t.rows, t->t.cols},
                              (uint64_t)t->t.rows * t->t.cols * prt_dtype_size(t->t.dtype)};
        which[n++] = i;
    }
    char store[META_MAX][64];
    const char *keys[META_MAX], *vals[META_MAX];
    int nm = ckpt_meta_pairs(&ck->meta, store, keys, vals);
    sbuf h = {0};
    st_out o = {.fd = -1};
    if (!st) st = st_header(&h, e, n, keys, vals, nm);
    if (!st) st = st_out_open(&o, out_path);
    if (!st) st = st_out_write(&o, h.s, h.len);
    for (int i = 0; i < n && !st; i++) {
        const CTensor *t = &ck->t[which[i]];
        void *buf = malloc((size_t)e[i].nbytes ? (size_t)e[i].nbytes : 1);
        if (!buf) { st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory for %s", out_path, t->t.name); break; }
        st = prt_ckpt_read(ck, t->t.name, 0, t->t.rows, 0, t->t.cols, buf);
        if (!st) st = st_out_write(&o, buf, (size_t)e[i].nbytes);
        free(buf);
    }
    if (!st) st = st_out_commit(&o);
    else if (o.fd >= 0) st_out_abort(&o);
    free(h.s);
    free(e);
    free(which);
    prt_ckpt_close(ck);
    return st;
}
