/*
 * safetensors.c: one safetensors file — writing it atomically, reading it
 * strictly — and the CRC-32C that checkpoints record per file.
 *
 * Format (huggingface/safetensors): an unsigned 64-bit little-endian N, N
 * bytes of JSON header {"NAME": {"dtype": "F32", "shape": [...],
 * "data_offsets": [begin, end]}, ..., "__metadata__": {string: string}},
 * then the data: each tensor's bytes, little-endian, row-major, at
 * [begin, end) of the data section. The writer pads the header with spaces
 * to a multiple of 8 bytes so the data start aligned, as the reference
 * writer does. The reader applies the reference's checks and a few more: N
 * at most 100 MB (the reference's MAX_HEADER_SIZE) and inside the file, the
 * header one JSON object without duplicate keys, every entry exactly
 * {dtype, shape, data_offsets} with a known dtype, byte count = product of
 * the shape x element size, and the entries' ranges contiguous from 0 to
 * the end of the file (no holes, no overlap, nothing after).
 *
 * Files are written to a hidden temporary name in their directory, fsynced,
 * renamed over the final name and the directory fsynced (POSIX rename is
 * atomic within a file system), so readers see the old file or the new one.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ckpt_internal.h"

#define ST_MAX_HEADER 100000000ull  /* bytes, the reference's limit */

/* ---- CRC-32C ----------------------------------------------------------------- */

/* Slicing-by-8 tables of the reflected Castagnoli polynomial 0x82F63B78
 * (RFC 3720, iSCSI): eight table lookups per 8 bytes. */
static uint32_t crc_tab[8][256];
static bool have_hw;   /* the CPU has SSE4.2 (PLANRT_CRC_TABLE=1: use the tables anyway) */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_tab[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xFF];
#if defined(__x86_64__)
    have_hw = __builtin_cpu_supports("sse4.2") && !getenv("PLANRT_CRC_TABLE");
#endif
}

#if defined(__x86_64__)
#include <nmmintrin.h>
/* SSE4.2's crc32 instruction computes the same CRC-32C 8 bytes per
 * instruction: 3-4x the tables' speed here (measured in the README). */
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t c = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; p++, n--) c32 = _mm_crc32_u8(c32, *p);
    return ~c32;
}
#endif

uint32_t prt_crc32c(uint32_t crc, const void *buf, size_t n)
{
    pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
    if (have_hw) return crc_hw(crc, (const unsigned char *)buf, n);
#endif
    const unsigned char *p = (const unsigned char *)buf;
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = crc_tab[7][lo & 0xFF] ^ crc_tab[6][(lo >> 8) & 0xFF] ^
              crc_tab[5][(lo >> 16) & 0xFF] ^ crc_tab[4][lo >> 24] ^
              crc_tab[3][p[4]] ^ crc_tab[2][p[5]] ^ crc_tab[1][p[6]] ^ crc_tab[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_tab[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

prt_status ckpt_file_crc(int fd, const char *path, uint32_t *crc, uint64_t *bytes)
{
    enum { BUF = 1 << 20 };
    char *buf = (char *)malloc(BUF);
    if (!buf) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path);
    uint32_t c = 0;
    uint64_t at = 0;
    for (;;) {
        ssize_t r = pread(fd, buf, BUF, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            free(buf);
            return ckpt_fail(PRT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        }
        if (r == 0) break;
        c = prt_crc32c(c, buf, (size_t)r);
        at += (uint64_t)r;
    }
    free(buf);
    *crc = c;
    *bytes = at;
    return PRT_OK;
}

/* ---- dtypes ------------------------------------------------------------------- */

static const struct { const char *name; size_t size; } st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2},
    {"I32", 4}, {"U32", 4}, {"F32", 4},
    {"I64", 8}, {"U64", 8}, {"F64", 8},
};

size_t st_dtype_size(const char *dt)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(st_dtypes[i].name, dt)) return st_dtypes[i].size;
    return 0;
}

/* ORDER PRT_DTYPE */
const char *st_dtype_name(prt_dtype t)
{
    switch (t) {
    case PRT_FP32:  return "F32";
    case PRT_FP16:  return "F16";
    case PRT_BF16:  return "BF16";
    case PRT_INT32: return "I32";
    case PRT_INT64: return "I64";
    }
    return NULL;
}

/* ---- atomic writing ---------------------------------------------------------- */

static void split_path(const char *path, char *dir, size_t cap, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) { snprintf(dir, cap, "."); *base = path; return; }
    size_t n = (size_t)(slash - path);
    if (n == 0) n = 1;  /* "/x" */
    snprintf(dir, cap, "%.*s", (int)n, path);
    *base = slash + 1;
}

prt_status ckpt_mkdirs(const char *dir)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return ckpt_fail(PRT_ERR_ARG, "%s: path too long", dir);
    for (char *p = buf + 1; ; p++) {
        if (*p != '/' && *p != '\0') continue;
        char save = *p;
        *p = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST)
            return ckpt_fail(PRT_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = save;
        if (!save) break;
    }
    return PRT_OK;
}

prt_status st_out_open(st_out *o, const char *path)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    char dir[4096];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    if (snprintf(o->path, sizeof o->path, "%s", path) >= (int)sizeof o->path ||
        snprintf(o->tmp, sizeof o->tmp, "%s/.%s.tmp", dir, base) >= (int)sizeof o->tmp)
        return ckpt_fail(PRT_ERR_ARG, "%s: path too long", path);
    o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o->fd < 0) return ckpt_fail(PRT_ERR_IO, "%s: cannot create: %s", o->tmp, strerror(errno));
    return PRT_OK;
}

prt_status st_out_write(st_out *o, const void *p, size_t n)
{
    const char *s = (const char *)p;
    o->crc = prt_crc32c(o->crc, p, n);
    while (n) {
        ssize_t w = write(o->fd, s, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return ckpt_fail(PRT_ERR_IO, "%s: write failed: %s", o->tmp, strerror(errno));
        s += w;
        n -= (size_t)w;
        o->bytes += (uint64_t)w;
    }
    return PRT_OK;
}

/* fsync the directory holding path, so the rename itself is durable. */
static prt_status sync_dir(const char *path)
{
    char dir[4096];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ckpt_fail(PRT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc) return ckpt_fail(PRT_ERR_IO, "%s: fsync of the directory failed: %s", dir, strerror(errno));
    return PRT_OK;
}

prt_status st_out_commit(st_out *o)
{
    if (fsync(o->fd)) {
        prt_status st = ckpt_fail(PRT_ERR_IO, "%s: fsync failed: %s", o->tmp, strerror(errno));
        st_out_abort(o);
        return st;
    }
    int rc = close(o->fd);
    o->fd = -1;
    if (rc) {
        prt_status st = ckpt_fail(PRT_ERR_IO, "%s: close failed: %s", o->tmp, strerror(errno));
        st_out_abort(o);
        return st;
    }
    if (rename(o->tmp, o->path)) {
        prt_status st = ckpt_fail(PRT_ERR_IO, "%s: rename to %s failed: %s", o->tmp, o->path,
                                  strerror(errno));
        st_out_abort(o);
        return st;
    }
    return sync_dir(o->path);
}

void st_out_abort(st_out *o)
{
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->tmp[0]) unlink(o->tmp);
}

prt_status st_header(sbuf *b, const st_hdr_entry *e, int n, const char *const *keys,
                     const char *const *vals, int nmeta)
{
    sb_put(b, "\0\0\0\0\0\0\0\0", 8);
    sb_put(b, "{", 1);
    if (nmeta) {
        sb_put(b, "\"__metadata__\":{", 16);
        for (int i = 0; i < nmeta; i++) {
            if (i) sb_put(b, ",", 1);
            sb_json_str(b, keys[i]);
            sb_put(b, ":", 1);
            sb_json_str(b, vals[i]);
        }
        sb_put(b, "}", 1);
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (i || nmeta) sb_put(b, ",", 1);
        sb_json_str(b, e[i].key);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", e[i].dtype);
        for (int d = 0; d < e[i].ndim; d++) sb_printf(b, "%s%zu", d ? "," : "", e[i].shape[d]);
        sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                  (unsigned long long)(at + e[i].nbytes));
        at += e[i].nbytes;
    }
    sb_put(b, "}", 1);
    while ((b->len - 8) % 8) sb_put(b, " ", 1);
    if (b->oom) return ckpt_fail(PRT_ERR_NOMEM, "safetensors header: out of memory");
    uint64_t hn = b->len - 8;
    for (int k = 0; k < 8; k++) b->s[k] = (char)(hn >> (8 * k));
    return PRT_OK;
}

/* ---- strict reading ---------------------------------------------------------- */

struct prt_st {
    int           fd;
    char          path[4096];
    uint64_t      size, data0;   /* file bytes; data section start (8 + N) */
    js_doc        doc;
    prt_st_entry *e;             /* sorted by name */
    int           n;
    int           meta;          /* __metadata__ node or -1 */
};

static prt_status read_exact(int fd, const char *path, void *dst, size_t n, uint64_t off)
{
    char *d = (char *)dst;
    while (n) {
        ssize_t r = pread(fd, d, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return ckpt_fail(PRT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        if (r == 0) return ckpt_fail(PRT_ERR_FORMAT, "%s: truncated (ends at byte %llu)", path,
                                     (unsigned long long)off);
        d += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return PRT_OK;
}

static bool mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a && b > UINT64_MAX / a) return false;
    *out = a * b;
    return true;
}

/* Check one header entry {dtype, shape, data_offsets} into e. */
static prt_status parse_entry(prt_st *f, int node, prt_st_entry *e)
{
    const js_doc *d = &f->doc;
    const js_node *n = &d->n[node];
    e->name = n->key;
    if (n->kind != JS_OBJ)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": not an object", f->path, n->key);
    for (int c = n->first; c >= 0; c = d->n[c].next)
        if (strcmp(d->n[c].key, "dtype") && strcmp(d->n[c].key, "shape") &&
            strcmp(d->n[c].key, "data_offsets"))
            return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": unknown field \"%s\"", f->path,
                             n->key, d->n[c].key);
    int dt = js_get(d, node, "dtype"), sh = js_get(d, node, "shape"),
        of = js_get(d, node, "data_offsets");
    if (dt < 0 || d->n[dt].kind != JS_STR || !st_dtype_size(d->n[dt].str))
        return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": missing or unknown dtype", f->path,
                         n->key);
    e->dtype = d->n[dt].str;
    if (sh < 0 || d->n[sh].kind != JS_ARR || d->n[sh].count > 8)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": shape must be an array of at most 8 sizes",
                         f->path, n->key);
    uint64_t elems = 1;
    e->ndim = 0;
    for (int c = d->n[sh].first; c >= 0; c = d->n[c].next) {
        uint64_t v;
        if (!js_u64(d, c, &v) || !mul_ok(elems, v, &elems))
            return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": bad shape", f->path, n->key);
        e->shape[e->ndim++] = (size_t)v;
    }
    uint64_t b0, b1, want = 0;
    if (of < 0 || d->n[of].kind != JS_ARR || d->n[of].count != 2 ||
        !js_u64(d, d->n[of].first, &b0) || !js_u64(d, d->n[d->n[of].first].next, &b1) || b1 < b0)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\": bad data_offsets", f->path, n->key);
    if (!mul_ok(elems, st_dtype_size(e->dtype), &want) || want != b1 - b0)
        return ckpt_fail(PRT_ERR_FORMAT,
                         "%s: tensor \"%s\": shape holds %llu bytes but data_offsets [%llu, %llu] %llu",
                         f->path, n->key, (unsigned long long)want, (unsigned long long)b0,
                         (unsigned long long)b1, (unsigned long long)(b1 - b0));
    e->begin = b0;
    e->end = b1;
    return PRT_OK;
}

static int by_begin(const void *a, const void *b)
{
    const prt_st_entry *x = (const prt_st_entry *)a, *y = (const prt_st_entry *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const prt_st_entry *)a)->name, ((const prt_st_entry *)b)->name);
}

/* The entries' byte ranges must tile the data section exactly. */
static prt_status check_tiling(prt_st *f)
{
    uint64_t at = 0, data = f->size - f->data0;
    qsort(f->e, (size_t)f->n, sizeof *f->e, by_begin);
    for (int i = 0; i < f->n; i++) {
        if (f->e[i].begin != at)
            return ckpt_fail(PRT_ERR_FORMAT, "%s: tensor \"%s\" starts at data byte %llu, expected %llu (%s)",
                             f->path, f->e[i].name, (unsigned long long)f->e[i].begin,
                             (unsigned long long)at, f->e[i].begin < at ? "overlap" : "hole");
        at = f->e[i].end;
    }
    if (at > data)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: truncated: tensors need %llu data bytes, the file has %llu",
                         f->path, (unsigned long long)at, (unsigned long long)data);
    if (at < data)
        return ckpt_fail(PRT_ERR_FORMAT, "%s: %llu bytes after the last tensor", f->path,
                         (unsigned long long)(data - at));
    qsort(f->e, (size_t)f->n, sizeof *f->e, by_name);
    return PRT_OK;
}

static prt_status parse_header(prt_st *f, const char *hdr, uint64_t n)
{
    char what[4200];
    snprintf(what, sizeof what, "%s: header", f->path);
    if (n == 0 || hdr[0] != '{')
        return ckpt_fail(PRT_ERR_FORMAT, "%s: header is not a JSON object", f->path);
    prt_status st = js_parse(hdr, (size_t)n, what, &f->doc);
    if (st) return st;
    const js_doc *d = &f->doc;
    f->meta = -1;
    f->e = (prt_st_entry *)calloc((size_t)d->n[0].count + 1, sizeof *f->e);
    if (!f->e) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", f->path);
    for (int c = d->n[0].first; c >= 0; c = d->n[c].next) {
        if (!strcmp(d->n[c].key, "__metadata__")) {
            if (d->n[c].kind != JS_OBJ)
                return ckpt_fail(PRT_ERR_FORMAT, "%s: __metadata__ is not an object", f->path);
            for (int m = d->n[c].first; m >= 0; m = d->n[m].next)
                if (d->n[m].kind != JS_STR)
                    return ckpt_fail(PRT_ERR_FORMAT, "%s: __metadata__ \"%s\" is not a string",
                                     f->path, d->n[m].key);
            f->meta = c;
            continue;
        }
        if ((st = parse_entry(f, c, &f->e[f->n]))) return st;
        f->n++;
    }
    return check_tiling(f);
}

prt_status prt_st_open(const char *path, prt_st **out)
{
    ckpt_clear();
    *out = NULL;
    prt_st *f = (prt_st *)calloc(1, sizeof *f);
    if (!f) return ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        prt_status st = ckpt_fail(PRT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        free(f);
        return st;
    }
    struct stat sb;
    unsigned char len8[8];
    prt_status st = PRT_OK;
    char *hdr = NULL;
    if (fstat(f->fd, &sb)) st = ckpt_fail(PRT_ERR_IO, "%s: stat failed: %s", path, strerror(errno));
    else if ((f->size = (uint64_t)sb.st_size) < 8)
        st = ckpt_fail(PRT_ERR_FORMAT, "%s: truncated: %llu bytes, shorter than the 8-byte header length",
                       path, (unsigned long long)f->size);
    else if (!(st = read_exact(f->fd, path, len8, 8, 0))) {
        uint64_t n = 0;
        for (int k = 7; k >= 0; k--) n = n << 8 | len8[k];
        if (n > ST_MAX_HEADER)
            st = ckpt_fail(PRT_ERR_FORMAT, "%s: header length %llu exceeds the 100 MB limit", path,
                           (unsigned long long)n);
        else if (n > f->size - 8)
            st = ckpt_fail(PRT_ERR_FORMAT, "%s: truncated: header length %llu but only %llu bytes follow",
                           path, (unsigned long long)n, (unsigned long long)(f->size - 8));
        else if (!(hdr = (char *)malloc((size_t)n + 1)))
            st = ckpt_fail(PRT_ERR_NOMEM, "%s: out of memory", path);
        else if (!(st = read_exact(f->fd, path, hdr, (size_t)n, 8))) {
            f->data0 = 8 + n;
            st = parse_header(f, hdr, n);
        }
    }
    free(hdr);
    if (st) { prt_st_close(f); return st; }
    *out = f;
    return PRT_OK;
}

void prt_st_close(prt_st *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    js_free(&f->doc);
    free(f->e);
    free(f);
}

int prt_st_count(const prt_st *f) { return f->n; }

const prt_st_entry *prt_st_entry_at(const prt_st *f, int i)
{
    return i >= 0 && i < f->n ? &f->e[i] : NULL;
}

const prt_st_entry *prt_st_find(const prt_st *f, const char *name)
{
    prt_st_entry key = {.name = name};
    return (const prt_st_entry *)bsearch(&key, f->e, (size_t)f->n, sizeof *f->e, by_name);
}

const char *prt_st_meta(const prt_st *f, const char *key)
{
    int m = js_get(&f->doc, f->meta, key);
    return m < 0 ? NULL : f->doc.n[m].str;
}

prt_status prt_st_read(prt_st *f, const prt_st_entry *e, uint64_t off, size_t n, void *dst)
{
    if (off > e->end - e->begin || n > e->end - e->begin - off)
        return ckpt_fail(PRT_ERR_ARG, "%s: tensor \"%s\": read of %zu bytes at %llu past its %llu bytes",
                         f->path, e->name, n, (unsigned long long)off,
                         (unsigned long long)(e->end - e->begin));
    return read_exact(f->fd, f->path, dst, n, f->data0 + e->begin + off);
}
