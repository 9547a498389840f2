/*
 * test_ckpt.c: sharded safetensors checkpoints (cmocka), in one process.
 *
 * Several "ranks" of a layout (tp x dp, ZeRO shards of each rank's flat
 * buffer) write their pieces the way a generated program does; ranks of
 * other layouts then read their own shards back, and every element is
 * compared with the value it was written with (a function of tensor,
 * row and column). Then every failure a run must refuse: truncated file,
 * flipped byte, missing index, a header that is not JSON, another model,
 * overlapping or missing pieces, and a table of malformed safetensors
 * headers. The directory "keep" is left for the make target, which
 * consolidates it with planrt-ckpt and reads the result from Python.
 */
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
#include "planrt.h"

static char root[512];

/* ---- a small model and its layouts ------------------------------------------ */

enum { REPL, ROWS, COLS };

typedef struct {
    const char *name;
    size_t      R, C;
    int         ndim, split, nparts;
    size_t      part[3];
} TT;

/* ORDER MODEL: ids are indices; tp 1, 2 and 4 divide every split. */
static const TT model[] = {
    {"wte.weight", 20, 6, 2, ROWS, 0, {0}},
    {"blocks.0.attn.qkv.weight", 24, 6, 2, ROWS, 3, {8, 8, 8}},
    {"blocks.0.attn.proj.weight", 6, 8, 2, COLS, 0, {0}},
    {"blocks.0.ln_1.weight", 6, 1, 1, REPL, 0, {0}},
    {"blocks.0.mlp.fc.bias", 12, 1, 1, ROWS, 0, {0}},
    {"opt.exp_avg.wte.weight", 20, 6, 2, ROWS, 0, {0}},
};
#define NT ((int)(sizeof model / sizeof model[0]))

static float val(int id, size_t r, size_t c)
{
    return (float)id * 10000.0f + (float)(r * model[id].C + c) + 0.5f;
}

typedef struct {
    size_t r0, r1, c0, c1;
} R4;

/* Tensor id's TP slice on TP rank t of tp: its rectangles, in local order. */
static int tp_rects(int id, int tp, int t, R4 *out)
{
    const TT *m = &model[id];
    if (m->split == REPL) { out[0] = (R4){0, m->R, 0, m->C}; return 1; }
    if (m->split == COLS) {
        size_t w = m->C / (size_t)tp;
        out[0] = (R4){0, m->R, w * (size_t)t, w * (size_t)(t + 1)};
        return 1;
    }
    int np = m->nparts ? m->nparts : 1;
    size_t g0 = 0;
    for (int k = 0; k < np; k++) {
        size_t part = m->nparts ? m->part[k] : m->R, h = part / (size_t)tp;
        out[k] = (R4){g0 + h * (size_t)t, g0 + h * (size_t)(t + 1), 0, m->C};
        g0 += part;
    }
    return np;
}

static size_t rarea(R4 q) { return (q.r1 - q.r0) * (q.c1 - q.c0); }

/* A rank's flat buffer with the values it should hold; returns its length. */
static size_t local_values(int tp, int t, float *buf)
{
    size_t at = 0;
    for (int id = 0; id < NT; id++) {
        R4 q[3];
        int n = tp_rects(id, tp, t, q);
        for (int k = 0; k < n; k++)
            for (size_t r = q[k].r0; r < q[k].r1; r++)
                for (size_t c = q[k].c0; c < q[k].c1; c++) buf[at++] = val(id, r, c);
    }
    return at;
}

static void shard(size_t P, int dp, int d, size_t *s0, size_t *s1)
{
    *s0 = P * (size_t)d / (size_t)dp;
    *s1 = P * (size_t)(d + 1) / (size_t)dp;
}

#define MAXP 1024

static prt_ckpt_meta meta_of(long step, int dp, int tp, const char *model_name)
{
    return (prt_ckpt_meta){.step = step, .seed = 1234567890123ull, .dp = dp, .tp = tp, .pp = 1,
                           .zero = dp > 1 ? 1 : 0, .plan_hash = "abc123", .model = model_name};
}

/* Write a checkpoint of step `step` into dir as layout (tp, dp): each rank
 * its ZeRO shard of its flat buffer; replicated tensors only from TP rank 0.
 * skip_rank >= 0: that rank's manifest is left out of the index (a
 * coverage hole); repl_all: replicated tensors from every TP rank (overlap). */
static prt_status write_layout(const char *dir, long step, int tp, int dp, const char *name,
                               int skip_rank, bool repl_all)
{
    static float bufs[16][MAXP];
    char *man[16];
    size_t len[16];
    prt_ckpt_meta meta = meta_of(step, dp, tp, name);
    int nm = 0;
    for (int t = 0; t < tp; t++)
        for (int d = 0; d < dp; d++) {
            int rank = t * dp + d;
            size_t P = local_values(tp, t, bufs[rank]), s0, s1, at = 0;
            assert_true(P <= MAXP);
            shard(P, dp, d, &s0, &s1);
            prt_ckpt_writer *w;
            assert_int_equal(prt_ckpt_writer_new(dir, rank, &meta, &w), PRT_OK);
            for (int id = 0; id < NT; id++) {
                R4 q[3];
                int k = tp_rects(id, tp, t, q);
                for (int j = 0; j < k; j++) {
                    size_t a = at, b = at + rarea(q[j]);
                    at = b;
                    size_t lo = a > s0 ? a : s0, hi = b < s1 ? b : s1;
                    if (lo >= hi || (model[id].split == REPL && t != 0 && !repl_all)) continue;
                    assert_int_equal(prt_ckpt_put_flat(w, model[id].name, PRT_FP32, model[id].ndim,
                                                       model[id].R, model[id].C, q[j].r0, q[j].r1,
                                                       q[j].c0, q[j].c1, lo - a, hi - a,
                                                       bufs[rank] + lo), PRT_OK);
                }
            }
            assert_int_equal(prt_ckpt_writer_finish(w, &man[nm], &len[nm]), PRT_OK);
            if (rank == skip_rank) free(man[nm]);
            else nm++;
        }
    prt_status st = prt_ckpt_index_write(dir, &meta, (const char *const *)man, len, nm);
    for (int i = 0; i < nm; i++) free(man[i]);
    return st;
}

/* Every rank of layout (tp, dp) reads its shard back; returns mismatches. */
static int read_layout(prt_ckpt *ck, int tp, int dp)
{
    int bad = 0;
    float want[MAXP], got[MAXP];
    for (int t = 0; t < tp; t++)
        for (int d = 0; d < dp; d++) {
            size_t P = local_values(tp, t, want), s0, s1, at = 0;
            shard(P, dp, d, &s0, &s1);
            for (size_t i = 0; i < MAXP; i++) got[i] = -1.0f;
            for (int id = 0; id < NT; id++) {
                R4 q[3];
                int k = tp_rects(id, tp, t, q);
                for (int j = 0; j < k; j++) {
                    size_t a = at, b = at + rarea(q[j]);
                    at = b;
                    size_t lo = a > s0 ? a : s0, hi = b < s1 ? b : s1;
                    if (lo >= hi) continue;
                    prt_status st = prt_ckpt_read_flat(ck, model[id].name, q[j].r0, q[j].r1, q[j].c0,
                                                       q[j].c1, lo - a, hi - a, got + (lo - s0));
                    if (st) fprintf(stderr, "read_flat: %s\n", prt_ckpt_last_error());
                    assert_int_equal(st, PRT_OK);
                }
            }
            for (size_t i = s0; i < s1; i++)
                if (got[i - s0] != want[i]) {
                    if (bad < 5)
                        fprintf(stderr, "  tp %d/%d dp %d/%d element %zu: got %g want %g\n", t, tp, d, dp,
                                i, (double)got[i - s0], (double)want[i]);
                    bad++;
                }
        }
    return bad;
}

static void dirpath(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", root, name);
}

static void expect_error(prt_status st, const char *a, const char *b)
{
    const char *e = prt_ckpt_last_error();
    if (st == PRT_OK || !strstr(e, a) || (b && !strstr(e, b)))
        fail_msg("expected an error with \"%s\"%s%s, got status %d: %s", a, b ? " and " : "",
                 b ? b : "", (int)st, e);
    printf("    refused as expected: %s\n", e);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_crc32c(void **state)
{
    (void)state;
    /* RFC 3720 B.4 check value and its zero-block vector */
    assert_int_equal(prt_crc32c(0, "123456789", 9), 0xE3069283u);
    unsigned char z[32] = {0};
    assert_int_equal(prt_crc32c(0, z, 32), 0x8A9136AAu);
    /* incremental = one shot */
    const char *s = "the quick brown fox jumps over the lazy dog";
    uint32_t c = prt_crc32c(0, s, 10);
    c = prt_crc32c(c, s + 10, strlen(s) - 10);
    assert_int_equal(c, prt_crc32c(0, s, strlen(s)));
    /* against the bit-at-a-time definition, every length and alignment */
    unsigned char buf[300];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131u + 7u);
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 7) {
            uint32_t ref = ~0u;
            for (size_t i = 0; i < n; i++) {
                ref ^= buf[off + i];
                for (int k = 0; k < 8; k++) ref = (ref >> 1) ^ (0x82F63B78u & (0u - (ref & 1)));
            }
            assert_int_equal(prt_crc32c(0, buf + off, n), ~ref);
        }
    printf("    CRC-32C by %s\n", getenv("PLANRT_CRC_TABLE") ? "the slicing-by-8 tables" : "the CPU (or the tables where it has no crc32 instruction)");
}

/* One rank, whole tensors: values, metadata, the rank file itself. */
static void test_round_trip(void **state)
{
    (void)state;
    char dir[600], file[700];
    dirpath(dir, sizeof dir, "roundtrip/step-00000007");
    assert_int_equal(write_layout(dir, 7, 1, 1, "tiny", -1, false), PRT_OK);
    prt_ckpt *ck;
    assert_int_equal(prt_ckpt_open(dir, &ck), PRT_OK);
    const prt_ckpt_meta *m = prt_ckpt_get_meta(ck);
    assert_int_equal(m->step, 7);
    assert_true(m->seed == 1234567890123ull);
    assert_string_equal(m->model, "tiny");
    assert_string_equal(m->plan_hash, "abc123");
    assert_string_equal(prt_ckpt_meta_str(ck, "format"), "pt");
    assert_int_equal(prt_ckpt_count(ck), NT);
    for (int id = 0; id < NT; id++) {
        const prt_ckpt_tensor *t = prt_ckpt_find(ck, model[id].name);
        assert_non_null(t);
        assert_int_equal(t->rows, model[id].R);
        assert_int_equal(t->cols, model[id].C);
        assert_int_equal(t->ndim, model[id].ndim);
        float buf[MAXP];
        /* an inner rectangle */
        size_t r0 = 1, r1 = model[id].R - 1, c0 = model[id].C > 2 ? 1 : 0, c1 = model[id].C > 2 ? model[id].C - 1 : 1;
        assert_int_equal(prt_ckpt_read(ck, model[id].name, r0, r1, c0, c1, buf), PRT_OK);
        for (size_t r = r0; r < r1; r++)
            for (size_t c = c0; c < c1; c++)
                assert_true(buf[(r - r0) * (c1 - c0) + (c - c0)] == val(id, r, c));
    }
    assert_int_equal(prt_ckpt_verify(ck), PRT_OK);
    prt_ckpt_close(ck);

    /* the rank file is an ordinary safetensors file: header padded to 8 */
    snprintf(file, sizeof file, "%s/rank-00000.safetensors", dir);
    prt_st *f;
    assert_int_equal(prt_st_open(file, &f), PRT_OK);
    const prt_st_entry *e = prt_st_find(f, "blocks.0.attn.proj.weight");
    assert_non_null(e);
    assert_string_equal(e->dtype, "F32");
    assert_int_equal(e->ndim, 2);
    assert_int_equal(e->shape[0], 6);
    assert_int_equal(e->shape[1], 8);
    assert_string_equal(prt_st_meta(f, "slice:blocks.0.attn.proj.weight"), "[0:6, 0:8] of [6, 8]");
    assert_string_equal(prt_st_meta(f, "step"), "7");
    e = prt_st_find(f, "blocks.0.ln_1.weight");
    assert_int_equal(e->ndim, 1);
    assert_int_equal(e->shape[0], 6);
    prt_st_close(f);
    FILE *fp = fopen(file, "rb");
    uint64_t n = 0;
    assert_int_equal(fread(&n, 8, 1, fp), 1);
    fclose(fp);
    assert_int_equal(n % 8, 0);
}

/* Written as tp2 x dp2 (ZeRO shards), read as every other layout. */
static void test_cross_layout(void **state)
{
    (void)state;
    char dir[600];
    dirpath(dir, sizeof dir, "keep");
    assert_int_equal(write_layout(dir, 3, 2, 2, "tiny", -1, false), PRT_OK);
    prt_ckpt *ck;
    assert_int_equal(prt_ckpt_open(dir, &ck), PRT_OK);
    /* a QKV shard of a tp2 rank has 3 row groups, cut by ZeRO into flat ranges */
    assert_true(prt_ckpt_find(ck, "blocks.0.attn.qkv.weight")->pieces >= 6);
    static const int layouts[][2] = {{4, 1}, {1, 1}, {1, 4}, {2, 2}, {4, 3}, {2, 1}, {1, 3}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        int bad = read_layout(ck, layouts[i][0], layouts[i][1]);
        printf("    written tp 2 x dp 2, read as tp %d x dp %d: %d mismatches\n", layouts[i][0],
               layouts[i][1], bad);
        assert_int_equal(bad, 0);
    }
    /* random rectangles and flat ranges of every tensor */
    unsigned s = 12345;
    float buf[MAXP];
    for (int it = 0; it < 2000; it++) {
        int id = (int)((s = s * 1103515245u + 12345u) >> 8) % NT;
        size_t R = model[id].R, C = model[id].C;
        size_t r0 = (s = s * 1103515245u + 12345u) >> 8, r1, c0, c1;
        r0 %= R;
        r1 = r0 + 1 + ((s = s * 1103515245u + 12345u) >> 8) % (R - r0);
        c0 = ((s = s * 1103515245u + 12345u) >> 8) % C;
        c1 = c0 + 1 + ((s = s * 1103515245u + 12345u) >> 8) % (C - c0);
        size_t A = (r1 - r0) * (c1 - c0), f0 = ((s = s * 1103515245u + 12345u) >> 8) % A;
        size_t f1 = f0 + 1 + ((s = s * 1103515245u + 12345u) >> 8) % (A - f0);
        assert_int_equal(prt_ckpt_read_flat(ck, model[id].name, r0, r1, c0, c1, f0, f1, buf), PRT_OK);
        for (size_t f = f0; f < f1; f++) {
            size_t r = r0 + f / (c1 - c0), c = c0 + f % (c1 - c0);
            if (buf[f - f0] != val(id, r, c))
                fail_msg("%s [%zu:%zu, %zu:%zu] element %zu: got %g want %g", model[id].name, r0, r1,
                         c0, c1, f, (double)buf[f - f0], (double)val(id, r, c));
        }
    }
    prt_ckpt_close(ck);

    /* what the Python check compares the consolidated file with */
    char path[700];
    snprintf(path, sizeof path, "%s/expected.bin", dir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    uint32_t n = NT;
    fwrite(&n, 4, 1, fp);
    for (int id = 0; id < NT; id++) {
        uint32_t l = (uint32_t)strlen(model[id].name);
        uint64_t R = model[id].R, C = model[id].C;
        fwrite(&l, 4, 1, fp);
        fwrite(model[id].name, 1, l, fp);
        fwrite(&R, 8, 1, fp);
        fwrite(&C, 8, 1, fp);
        for (size_t r = 0; r < R; r++)
            for (size_t c = 0; c < C; c++) { float v = val(id, r, c); fwrite(&v, 4, 1, fp); }
    }
    fclose(fp);
}

/* The consolidated file has every full tensor, and skip leaves some out. */
static void test_consolidate(void **state)
{
    (void)state;
    char dir[600], out[700];
    dirpath(dir, sizeof dir, "consol/step-00000001");
    assert_int_equal(write_layout(dir, 1, 4, 1, "tiny", -1, false), PRT_OK);
    snprintf(out, sizeof out, "%s/../model.safetensors", dir);
    assert_int_equal(prt_ckpt_consolidate(dir, out, "opt."), PRT_OK);
    prt_st *f;
    assert_int_equal(prt_st_open(out, &f), PRT_OK);
    assert_int_equal(prt_st_count(f), NT - 1);
    assert_null(prt_st_find(f, "opt.exp_avg.wte.weight"));
    assert_string_equal(prt_st_meta(f, "model"), "tiny");
    for (int id = 0; id < NT - 1; id++) {
        const prt_st_entry *e = prt_st_find(f, model[id].name);
        assert_non_null(e);
        float buf[MAXP];
        assert_int_equal(prt_st_read(f, e, 0, model[id].R * model[id].C * 4, buf), PRT_OK);
        for (size_t i = 0; i < model[id].R * model[id].C; i++)
            assert_true(buf[i] == val(id, i / model[id].C, i % model[id].C));
    }
    prt_st_close(f);
}

static void touch(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The newest step directory with a valid index wins; incomplete ones and
 * leftover temporary files are ignored. */
static void test_latest_and_atomicity(void **state)
{
    (void)state;
    char r[600], dir[700], got[800], p[900];
    long step = -1;
    dirpath(r, sizeof r, "latest");
    snprintf(p, sizeof p, "rm -rf '%s'", r);
    assert_int_equal(system(p), 0);
    mkdir(r, 0755);
    expect_error(prt_ckpt_latest(r, got, sizeof got, &step), "no complete checkpoint", r);
    for (long s = 1; s <= 2; s++) {
        assert_int_equal(prt_ckpt_step_dir(r, s, dir, sizeof dir), PRT_OK);
        assert_int_equal(write_layout(dir, s, 2, 1, "tiny", -1, false), PRT_OK);
    }
    /* step 3: rank files but no index (a crash before the index) */
    prt_ckpt_step_dir(r, 3, dir, sizeof dir);
    prt_ckpt_meta meta = meta_of(3, 1, 1, "tiny");
    prt_ckpt_writer *w;
    char *man;
    size_t len;
    float x[4] = {1, 2, 3, 4};
    assert_int_equal(prt_ckpt_writer_new(dir, 0, &meta, &w), PRT_OK);
    assert_int_equal(prt_ckpt_put(w, "x", PRT_FP32, 2, 2, 2, 0, 2, 0, 2, x), PRT_OK);
    assert_int_equal(prt_ckpt_writer_finish(w, &man, &len), PRT_OK);
    free(man);
    snprintf(p, sizeof p, "%s/.rank-00001.safetensors.tmp", dir);
    touch(p, "half a file");
    /* step 4: only a temporary index (a crash during the rename's fsync) */
    prt_ckpt_step_dir(r, 4, dir, sizeof dir);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/.index.json.tmp", dir);
    touch(p, "{\"format\": \"planc-checkpoint-1\"");
    /* step 5: an index that is not JSON */
    prt_ckpt_step_dir(r, 5, dir, sizeof dir);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/index.json", dir);
    touch(p, "{\"format\": ");
    /* not step directories */
    snprintf(p, sizeof p, "%s/step-junk", r);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/notes.txt", r);
    touch(p, "x");
    assert_int_equal(prt_ckpt_latest(r, got, sizeof got, &step), PRT_OK);
    assert_int_equal(step, 2);
    prt_ckpt_step_dir(r, 2, dir, sizeof dir);
    assert_string_equal(got, dir);
    /* a leftover temporary rank file next to a complete checkpoint is ignored */
    snprintf(p, sizeof p, "%s/.rank-00000.safetensors.tmp", dir);
    touch(p, "garbage");
    prt_ckpt *ck;
    assert_int_equal(prt_ckpt_open(dir, &ck), PRT_OK);
    assert_int_equal(prt_ckpt_verify(ck), PRT_OK);
    assert_int_equal(read_layout(ck, 1, 1), 0);
    prt_ckpt_close(ck);
    /* the incomplete ones refuse with a reason */
    prt_ckpt_step_dir(r, 3, dir, sizeof dir);
    expect_error(prt_ckpt_open(dir, &ck), "no index.json", "incomplete");
    prt_ckpt_step_dir(r, 5, dir, sizeof dir);
    expect_error(prt_ckpt_open(dir, &ck), "index.json: not valid JSON at byte", NULL);
    /* saving step 2 again: its old index goes at once, so until the new
     * index is written the step is incomplete and step 1 is the latest */
    prt_ckpt_step_dir(r, 2, dir, sizeof dir);
    meta = meta_of(2, 1, 1, "tiny");
    assert_int_equal(prt_ckpt_writer_new(dir, 0, &meta, &w), PRT_OK);
    assert_int_equal(prt_ckpt_latest(r, got, sizeof got, &step), PRT_OK);
    assert_int_equal(step, 1);
    prt_ckpt_writer_abort(w);
    /* an aborted writer leaves nothing */
    dirpath(dir, sizeof dir, "aborted");
    assert_int_equal(prt_ckpt_writer_new(dir, 0, &meta, &w), PRT_OK);
    assert_int_equal(prt_ckpt_put(w, "x", PRT_FP32, 2, 2, 2, 0, 2, 0, 2, x), PRT_OK);
    prt_ckpt_writer_abort(w);
    snprintf(p, sizeof p, "%s/rank-00000.safetensors", dir);
    assert_int_not_equal(access(p, F_OK), 0);
}

static void copy_dir(const char *from, const char *to)
{
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    assert_int_equal(system(cmd), 0);
}

static void test_truncated(void **state)
{
    (void)state;
    char good[600], dir[600], p[700];
    dirpath(good, sizeof good, "keep");
    dirpath(dir, sizeof dir, "truncated");
    copy_dir(good, dir);
    snprintf(p, sizeof p, "%s/rank-00002.safetensors", dir);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(truncate(p, sb.st_size - 5), 0);
    prt_ckpt *ck;
    expect_error(prt_ckpt_open(dir, &ck), "rank-00002.safetensors", "truncated");
    /* a truncated standalone file too */
    assert_int_equal(truncate(p, 6), 0);
    prt_st *f;
    expect_error(prt_st_open(p, &f), "rank-00002.safetensors", "truncated");
}

static void flip_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, at, at < 0 ? SEEK_END : SEEK_SET);
    int c = fgetc(f);
    fseek(f, -1, SEEK_CUR);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void test_flipped_byte(void **state)
{
    (void)state;
    char good[600], dir[600], p[700];
    dirpath(good, sizeof good, "keep");
    dirpath(dir, sizeof dir, "flipped");
    copy_dir(good, dir);
    snprintf(p, sizeof p, "%s/rank-00001.safetensors", dir);
    flip_byte(p, -3);   /* in the data of the last piece */
    prt_ckpt *ck;
    assert_int_equal(prt_ckpt_open(dir, &ck), PRT_OK);   /* sizes match: found on use */
    float buf[MAXP];
    /* reading every tensor whole touches every file: the corrupt one is named */
    prt_status st = PRT_OK;
    for (int id = 0; id < NT && !st; id++)
        st = prt_ckpt_read(ck, model[id].name, 0, model[id].R, 0, model[id].C, buf);
    expect_error(st, "rank-00001.safetensors", "checksum mismatch");
    expect_error(prt_ckpt_verify(ck), "rank-00001.safetensors", "checksum mismatch");
    prt_ckpt_close(ck);
    /* the tool's test in ckpt.mk verifies this copy */
    dirpath(good, sizeof good, "keep-corrupt");
    copy_dir(dir, good);
}

/* A header that is not JSON, behind a checksum that matches (a buggy
 * writer, not a disk error): the header parser names it. */
static void test_header_not_json(void **state)
{
    (void)state;
    char good[600], dir[600], p[700], idx[700];
    dirpath(good, sizeof good, "keep");
    dirpath(dir, sizeof dir, "notjson");
    copy_dir(good, dir);
    snprintf(p, sizeof p, "%s/rank-00000.safetensors", dir);
    flip_byte(p, 8);   /* '{' -> 'k' */
    /* recompute its CRC and put it in the index */
    FILE *f = fopen(p, "rb");
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint32_t crc = prt_crc32c(0, buf, n);
    snprintf(idx, sizeof idx, "%s/index.json", dir);
    f = fopen(idx, "rb");
    char text[65536];
    size_t tn = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[tn] = 0;
    char *at = strstr(text, "\"rank-00000.safetensors\": {\"bytes\": ");
    assert_non_null(at);
    at = strstr(at, "\"crc32c\": \"") + 11;
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", crc);
    memcpy(at, hex, 8);
    f = fopen(idx, "wb");
    fwrite(text, 1, tn, f);
    fclose(f);
    prt_ckpt *ck;
    assert_int_equal(prt_ckpt_open(dir, &ck), PRT_OK);
    expect_error(prt_ckpt_verify(ck), "rank-00000.safetensors", "not a JSON object");
    prt_ckpt_close(ck);
    /* an index that names an entry the file does not have */
    copy_dir(good, dir);
    f = fopen(idx, "rb");
    tn = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[tn] = 0;
    at = strstr(text, "\"key\": \"wte.weight\"");
    assert_non_null(at);
    memcpy(at + 8, "wte.weighs", 10);
    f = fopen(idx, "wb");
    fwrite(text, 1, tn, f);
    fclose(f);
    assert_int_equal(prt_ckpt_open(dir, &ck), PRT_OK);
    expect_error(prt_ckpt_verify(ck), "entry \"wte.weighs\" is missing or does not match the index", NULL);
    prt_ckpt_close(ck);
    /* the index itself not JSON */
    f = fopen(idx, "wb");
    fwrite(text, 1, tn / 2, f);
    fclose(f);
    expect_error(prt_ckpt_open(dir, &ck), "index.json", "not valid JSON");
}

static void test_other_model(void **state)
{
    (void)state;
    char dir[600];
    dirpath(dir, sizeof dir, "keep");
    prt_ckpt *ck;
    assert_int_equal(prt_ckpt_open(dir, &ck), PRT_OK);
    prt_ckpt_tensor want[NT];
    for (int id = 0; id < NT; id++)
        want[id] = (prt_ckpt_tensor){model[id].name, PRT_FP32, model[id].ndim, model[id].R, model[id].C, 0};
    assert_int_equal(prt_ckpt_check_model(ck, "tiny", want, NT), PRT_OK);
    want[1].rows = 48;   /* a wider model */
    expect_error(prt_ckpt_check_model(ck, "tiny", want, NT), "blocks.0.attn.qkv.weight",
                 "F32 [24, 6] in the checkpoint, F32 [48, 6] in the model");
    want[1].rows = 24;
    want[2].name = "blocks.0.attn.c_proj.weight";
    expect_error(prt_ckpt_check_model(ck, "tiny", want, NT),
                 "tensor \"blocks.0.attn.c_proj.weight\" missing from the checkpoint",
                 "tensor \"blocks.0.attn.proj.weight\" in the checkpoint is not in the model");
    want[2].name = model[2].name;
    expect_error(prt_ckpt_check_model(ck, "gpt2-xl", want, NT), "model \"tiny\" in the checkpoint",
                 "\"gpt2-xl\" here");
    expect_error(prt_ckpt_check_model(ck, NULL, want, NT - 1), "opt.exp_avg.wte.weight", "not in the model");
    prt_ckpt_close(ck);
}

/* The index refuses pieces that overlap or leave a hole, naming the tensor. */
static void test_index_checks(void **state)
{
    (void)state;
    char dir[600];
    dirpath(dir, sizeof dir, "overlap");
    expect_error(write_layout(dir, 1, 2, 1, "tiny", -1, true), "blocks.0.ln_1.weight", "overlap");
    dirpath(dir, sizeof dir, "hole");
    expect_error(write_layout(dir, 1, 2, 2, "tiny", 1, false), "pieces cover", "of its");
    prt_ckpt *ck;
    expect_error(prt_ckpt_open(dir, &ck), "no index.json", "incomplete");
    /* two ranks that disagree about a shape */
    dirpath(dir, sizeof dir, "disagree");
    prt_ckpt_meta meta = meta_of(1, 2, 1, "tiny");
    float x[8] = {0};
    char *man[2];
    size_t len[2];
    for (int r = 0; r < 2; r++) {
        prt_ckpt_writer *w;
        assert_int_equal(prt_ckpt_writer_new(dir, r, &meta, &w), PRT_OK);
        assert_int_equal(prt_ckpt_put(w, "w", PRT_FP32, 2, 4, 2 + (size_t)r, 2 * (size_t)r, 2 * (size_t)r + 2, 0, 2, x), PRT_OK);
        assert_int_equal(prt_ckpt_writer_finish(w, &man[r], &len[r]), PRT_OK);
    }
    expect_error(prt_ckpt_index_write(dir, &meta, (const char *const *)man, len, 2), "tensor \"w\"",
                 "[4, 2], rank-00001.safetensors as F32 [4, 3]");
    free(man[0]);
    free(man[1]);
    /* bad pieces are refused when put */
    prt_ckpt_writer *w;
    assert_int_equal(prt_ckpt_writer_new(dir, 5, &meta, &w), PRT_OK);
    expect_error(prt_ckpt_put(w, "w", PRT_FP32, 2, 4, 2, 0, 5, 0, 2, x), "outside", NULL);
    expect_error(prt_ckpt_put(w, "a#1", PRT_FP32, 2, 4, 2, 0, 1, 0, 2, x), "bad tensor name", NULL);
    expect_error(prt_ckpt_put(w, "v", PRT_FP32, 1, 4, 2, 0, 1, 0, 2, x), "a vector has 1 column", NULL);
    expect_error(prt_ckpt_put_flat(w, "w", PRT_FP32, 2, 4, 2, 0, 2, 0, 2, 3, 5, x), "elements [3, 5)", NULL);
    prt_ckpt_writer_abort(w);
}

/* Strict safetensors reading: a table of headers and the error each gets. */
typedef struct {
    const char *what;
    const char *header;     /* JSON text (NULL: raw bytes below) */
    size_t      data;       /* data bytes after the header */
    const char *error;      /* substring of the error; NULL: must open */
} StCase;

static void write_st(const char *path, const char *hdr, size_t data, int64_t force_len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = force_len >= 0 ? (uint64_t)force_len : strlen(hdr);
    fwrite(&n, 8, 1, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (size_t i = 0; i < data; i++) fputc((int)i, f);
    fclose(f);
}

static void test_strict_header(void **state)
{
    (void)state;
    static const StCase cases[] = {
        {"valid", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},\"__metadata__\":{\"k\":\"v\"}}    ", 16, NULL},
        {"empty", "{}", 0, NULL},
        {"escaped name", "{\"caf\\u00e9 \\\"x\\\"\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6, NULL},
        {"scalar and zero-size", "{\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},\"z\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[8,8]}}", 8, NULL},
        {"not JSON", "{not json}", 0, "not valid JSON at byte 1"},
        {"not an object", "[1,2]", 0, "not a JSON object"},
        {"duplicate key", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate key \"a\""},
        {"duplicate inner key", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "duplicate key \"dtype\""},
        {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap"},
        {"hole", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "hole"},
        {"past the data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "truncated"},
        {"bytes after", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "4 bytes after the last tensor"},
        {"shape product", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,16]}}", 16, "shape holds 24 bytes"},
        {"shape overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}", 16, "bad shape"},
        {"negative", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "bad shape"},
        {"unknown dtype", "{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", 16, "unknown dtype"},
        {"unknown field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown field \"x\""},
        {"offsets reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "bad data_offsets"},
        {"metadata not strings", "{\"__metadata__\":{\"step\":3}}", 0, "is not a string"},
        {"trailing comma", "{\"a\":1,}", 0, "object key expected"},
        {"text after", "{} x", 0, "text after the value"},
        {"lone surrogate", "{\"\\ud800\":1}", 0, "lone high surrogate"},
        {"control char", "{\"a\tb\":1}", 0, "control character"},
        {"unterminated", "{\"a\":{\"dtype\":\"F32\"", 0, "expected"},
        {"deep", "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", 0, "nested too deep"},
        {"leading zero", "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "not valid JSON"},
    };
    char p[700];
    dirpath(p, sizeof p, "strict.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(p, cases[i].header, cases[i].data, -1);
        prt_st *f = NULL;
        prt_status st = prt_st_open(p, &f);
        if (!cases[i].error) {
            if (st) fail_msg("%s: should open: %s", cases[i].what, prt_ckpt_last_error());
            prt_st_close(f);
            continue;
        }
        if (!st || !strstr(prt_ckpt_last_error(), cases[i].error) || !strstr(prt_ckpt_last_error(), p))
            fail_msg("%s: expected \"%s\", got %d: %s", cases[i].what, cases[i].error, (int)st,
                     prt_ckpt_last_error());
    }
    printf("    %zu header cases\n", sizeof cases / sizeof cases[0]);
    /* the header length itself */
    prt_st *f;
    write_st(p, "{}", 0, 1000);
    expect_error(prt_st_open(p, &f), "header length 1000 but only 2 bytes follow", NULL);
    write_st(p, "{}", 0, 200000000);
    expect_error(prt_st_open(p, &f), "exceeds the 100 MB limit", NULL);
    FILE *fp = fopen(p, "wb");
    fwrite("abc", 1, 3, fp);
    fclose(fp);
    expect_error(prt_st_open(p, &f), "shorter than the 8-byte header length", NULL);
    /* the escaped name decodes */
    write_st(p, cases[2].header, 6, -1);
    assert_int_equal(prt_st_open(p, &f), PRT_OK);
    assert_non_null(prt_st_find(f, "caf\xc3\xa9 \"x\""));
    prt_st_close(f);
}

/* Names the JSON writer must escape survive the round trip. */
static void test_odd_names(void **state)
{
    (void)state;
    char dir[600];
    dirpath(dir, sizeof dir, "odd");
    prt_ckpt_meta meta = meta_of(9, 1, 1, "m \"quoted\" \\ name");
    const char *names[] = {"a \"b\" \\c", "tab\there", "ünïcödé.weight"};
    float x[3][6];
    prt_ckpt_writer *w;
    char *man;
    size_t len;
    assert_int_equal(prt_ckpt_writer_new(dir, 0, &meta, &w), PRT_OK);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 6; k++) x[i][k] = (float)(10 * i + k);
        assert_int_equal(prt_ckpt_put(w, names[i], PRT_FP32, 2, 2, 3, 0, 2, 0, 3, x[i]), PRT_OK);
    }
    assert_int_equal(prt_ckpt_writer_finish(w, &man, &len), PRT_OK);
    assert_int_equal(prt_ckpt_index_write(dir, &meta, (const char *const *)&man, &len, 1), PRT_OK);
    free(man);
    prt_ckpt *ck;
    assert_int_equal(prt_ckpt_open(dir, &ck), PRT_OK);
    assert_string_equal(prt_ckpt_get_meta(ck)->model, meta.model);
    for (int i = 0; i < 3; i++) {
        float y[6];
        assert_int_equal(prt_ckpt_read(ck, names[i], 0, 2, 0, 3, y), PRT_OK);
        assert_memory_equal(x[i], y, sizeof y);
    }
    prt_ckpt_close(ck);
}

int main(void)
{
    const char *base = getenv("CKPT_TEST_DIR");
    if (base) snprintf(root, sizeof root, "%s", base);
    else {
        snprintf(root, sizeof root, "/tmp/planc-test-ckpt-XXXXXX");
        if (!mkdtemp(root)) return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_cross_layout),
        cmocka_unit_test(test_consolidate),
        cmocka_unit_test(test_latest_and_atomicity),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_flipped_byte),
        cmocka_unit_test(test_header_not_json),
        cmocka_unit_test(test_other_model),
        cmocka_unit_test(test_index_checks),
        cmocka_unit_test(test_strict_header),
        cmocka_unit_test(test_odd_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
