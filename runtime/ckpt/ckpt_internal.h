/*
 * ckpt_internal.h: what the files of runtime/ckpt share and nobody else
 * sees — the failure text, a strict JSON parser, a growing text buffer, the
 * safetensors dtype table and atomic file writing.
 */
#ifndef CKPT_INTERNAL_H
#define CKPT_INTERNAL_H

#include <stdarg.h>
#include <stdio.h>
#include "planrt.h"

/* ---- failures ------------------------------------------------------------ */
prt_status ckpt_fail(prt_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void       ckpt_clear(void);

/* ---- JSON ------------------------------------------------------------------ */
/* Node kinds. ORDER JS_KIND */
typedef enum {
    JS_NULL,    /* null */
    JS_BOOL,    /* true / false (num = 1 / 0) */
    JS_NUM,     /* a number: its text is kept (str, len) */
    JS_STR,     /* a string, decoded to UTF-8 (str, len; NUL-terminated) */
    JS_ARR,     /* array: children first .. next */
    JS_OBJ,     /* object: children carry their key */
} js_kind;

typedef struct {
    js_kind     kind;
    const char *str;    /* JS_STR: decoded text; JS_NUM: the literal */
    size_t      len;
    const char *key;    /* member of an object: its key (decoded, NUL-terminated) */
    int         first;  /* containers: first child, -1 if empty */
    int         next;   /* next sibling, -1 at the end */
    int         count;  /* containers: children */
} js_node;

typedef struct {
    js_node *n;         /* n[0] is the root */
    int      count, cap;
    char    *pool;      /* decoded strings */
    size_t   pool_len, pool_cap;
} js_doc;

/* Parse text[0..len) as one JSON value; rejects duplicate keys, depth over
 * 64, control characters in strings, trailing text other than whitespace.
 * what names the text in the error ("index.json"). */
prt_status js_parse(const char *text, size_t len, const char *what, js_doc *doc);
void       js_free(js_doc *doc);
/* Member `key` of object node i, or -1. Linear: for small objects. */
int        js_get(const js_doc *d, int obj, const char *key);
/* Node i as an unsigned integer (a JSON number without sign, fraction or
 * exponent that fits in 64 bits). */
bool       js_u64(const js_doc *d, int i, uint64_t *out);

/* ---- text buffer ----------------------------------------------------------- */
typedef struct {
    char  *s;
    size_t len, cap;
    bool   oom;
} sbuf;

void sb_put(sbuf *b, const char *s, size_t n);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string literal, quotes included. */
void sb_json_str(sbuf *b, const char *s);

/* ---- dtypes -------------------------------------------------------------- */
/* Element size of a safetensors dtype string, 0 if unknown. */
size_t      st_dtype_size(const char *dt);
/* The safetensors name of a runtime dtype. */
const char *st_dtype_name(prt_dtype t);

/* ---- files ------------------------------------------------------------------ */
/* A file being written atomically: to "DIR/.BASE.tmp", then fsync, rename
 * to its path and fsync of DIR; crc and bytes cover everything written. */
typedef struct {
    int      fd;
    char     path[4096], tmp[4096];
    uint32_t crc;
    uint64_t bytes;
} st_out;

prt_status st_out_open(st_out *o, const char *path);
prt_status st_out_write(st_out *o, const void *p, size_t n);
prt_status st_out_commit(st_out *o);
void       st_out_abort(st_out *o);

/* One entry of a safetensors header being written. */
typedef struct {
    const char *key;
    const char *dtype;     /* safetensors name */
    int         ndim;
    size_t      shape[2];
    uint64_t    nbytes;
} st_hdr_entry;

/* The 8-byte length and the JSON header of a safetensors file with these
 * entries (data in this order, contiguous) and metadata pairs (keys[i],
 * vals[i]), padded with spaces to a multiple of 8 bytes. */
prt_status st_header(sbuf *b, const st_hdr_entry *e, int n, const char *const *keys,
                     const char *const *vals, int nmeta);
/* The safetensors header of a checkpoint's metadata: keys/vals pairs. */
int        ckpt_meta_pairs(const prt_ckpt_meta *m, char store[][64], const char **keys,
                           const char **vals);

/* Make dir and its parents. */
prt_status ckpt_mkdirs(const char *dir);
/* CRC-32C and size of a whole open file. */
prt_status ckpt_file_crc(int fd, const char *path, uint32_t *crc, uint64_t *bytes);

#endif /* CKPT_INTERNAL_H */
