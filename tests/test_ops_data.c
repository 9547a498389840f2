/*
 * test_ops_data.c: data loading (cmocka). The files are made here, in a
 * temporary directory: text, small llm.c token shards of both widths
 * (uint16: magic 20240520 version 1; uint32: 20240801 version 7), and
 * broken files of every kind the loader must name (missing, empty,
 * truncated, wrong magic or version, shorter than one sequence, token
 * outside the vocabulary).
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "planrt.h"

static char dir[256];

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

static void write_file(const char *name, const void *data, size_t n)
{
    char p[512];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* Token i of the test shards: i * 7919 mod vocab, or `bad` at position
 * bad_at (bad_at < 0: none). */
static uint32_t shard_token(int32_t i, uint32_t vocab, int32_t bad_at, uint32_t bad)
{
    return i == bad_at ? bad : (uint32_t)(((uint64_t)i * 7919u) % vocab);
}

/* An llm.c shard: header (magic, version, count), then count tokens of
 * `width` bytes; `have` tokens actually written (fewer makes it truncated). */
static void write_shard_w(const char *name, int32_t magic, int32_t version, size_t width,
                          int32_t count, int32_t have, uint32_t vocab, int32_t bad_at, uint32_t bad)
{
    size_t bytes = 1024 + width * (size_t)have;
    unsigned char *buf = calloc(1, bytes);
    int32_t h[3] = {magic, version, count};
    memcpy(buf, h, sizeof h);
    for (int32_t i = 0; i < have; i++) {
        uint32_t t = shard_token(i, vocab, bad_at, bad);
        uint16_t t16 = (uint16_t)t;
        memcpy(buf + 1024 + width * (size_t)i, width == 4 ? (void *)&t : (void *)&t16, width);
    }
    write_file(name, buf, bytes);
    free(buf);
}

static void write_shard(const char *name, int32_t magic, int32_t count, int32_t have,
                        uint16_t vocab)
{
    write_shard_w(name, magic, 1, 2, count, have, vocab, -1, 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/planc-test-ops-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char text[4000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)("the quick brown fox jumps over the lazy dog. "[i % 45]);
    write_file("text.txt", text, sizeof text);
    write_file("empty.txt", "", 0);
    write_shard("ok.bin", 20240520, 3000, 3000, 50257);
    write_shard("magic.bin", 20240521, 3000, 3000, 50257);
    write_shard("short.bin", 20240520, 3000, 1000, 50257);
    write_file("header.bin", "\x28\x0b\x35\x01", 4);
    write_shard("tiny.bin", 20240520, 10, 10, 50257);
    /* uint32 shards: Llama 3's vocabulary, then one token id 70000 at
     * position 1234 of a shard for a vocabulary of 70000 */
    write_shard_w("ok32.bin", 20240801, 7, 4, 3000, 3000, 128256, -1, 0);
    write_shard_w("oov32.bin", 20240801, 7, 4, 3000, 3000, 70000, 1234, 70000);
    write_shard_w("ver32.bin", 20240801, 1, 4, 3000, 3000, 128256, -1, 0);
    write_shard_w("short32.bin", 20240801, 7, 4, 3000, 1600, 128256, -1, 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = {"text.txt", "empty.txt", "ok.bin", "magic.bin", "short.bin",
                           "header.bin", "tiny.bin", "ok32.bin", "oov32.bin", "ver32.bin",
                           "short32.bin"};
    char p[512];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        path_of(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return 0;
}

static void test_text_batches(void **state)
{
    (void)state;
    char p[512], err[256] = "";
    path_of(p, sizeof p, "text.txt");
    prt_data *d;
    size_t T = 16, B = 6;
    assert_int_equal(prt_data_open(&d, p, PRT_DATA_AUTO, T, 256, err, sizeof err), PRT_OK);
    assert_int_equal(prt_data_tokens(d), 4000);
    int32_t in[96], tg[96], in2[96], tg2[96];
    prt_data_batch(d, 1, 5, 0, B, in, tg);
    /* targets are the inputs shifted by one, from the same text */
    for (size_t s = 0; s < B; s++)
        for (size_t t = 0; t + 1 < T; t++)
            assert_int_equal(tg[s * T + t], in[s * T + t + 1]);
    for (size_t i = 0; i < B * T; i++)   /* every token is a byte of the text */
        assert_non_null(memchr("the quick brown fox jumps over the lazy dog. ", in[i], 45));
    /* DP ranks reading [0, 2), [2, 5), [5, 6) get the global batch */
    size_t cuts[4] = {0, 2, 5, 6};
    for (int k = 0; k < 3; k++)
        prt_data_batch(d, 1, 5, cuts[k], cuts[k + 1] - cuts[k], in2 + cuts[k] * T, tg2 + cuts[k] * T);
    assert_memory_equal(in, in2, sizeof in);
    assert_memory_equal(tg, tg2, sizeof tg);
    /* another step or seed draws other sequences */
    prt_data_batch(d, 1, 6, 0, B, in2, tg2);
    assert_memory_not_equal(in, in2, sizeof in);
    prt_data_batch(d, 2, 5, 0, B, in2, tg2);
    assert_memory_not_equal(in, in2, sizeof in);
    prt_data_close(d);
}

static void test_llmc_shard(void **state)
{
    (void)state;
    char p[512], err[256] = "";
    path_of(p, sizeof p, "ok.bin");
    prt_data *d;
    assert_int_equal(prt_data_open(&d, p, PRT_DATA_AUTO, 64, 50257, err, sizeof err), PRT_OK);
    assert_int_equal(prt_data_tokens(d), 3000);
    int32_t in[128], tg[128];
    prt_data_batch(d, 3, 0, 0, 2, in, tg);
    for (int i = 0; i < 128; i++)
        assert_true(in[i] >= 0 && in[i] < 50257);
    /* consecutive tokens of the shard follow i*7919 mod 50257 */
    assert_int_equal((in[1] - in[0] + 50257) % 50257, 7919);
    prt_data_close(d);
}

static void expect_error(const char *name, prt_data_format fmt, size_t T, size_t vocab,
                         prt_status st, const char *what);

/* A uint32 shard reads back every token, ids over 65,535 included, at
 * the positions the batch draws (the inputs follow i*7919 mod V from the
 * first token's position). */
static void test_llmc_shard32(void **state)
{
    (void)state;
    char p[512], err[256] = "";
    path_of(p, sizeof p, "ok32.bin");
    prt_data *d;
    const uint32_t V = 128256;
    assert_int_equal(prt_data_open(&d, p, PRT_DATA_AUTO, 64, V, err, sizeof err), PRT_OK);
    assert_int_equal(prt_data_tokens(d), 3000);
    int32_t in[256], tg[256];
    prt_data_batch(d, 3, 0, 0, 4, in, tg);
    bool wide = false;
    for (int s = 0; s < 4; s++) {
        /* the start position: token 0 of the sequence is start*7919 mod V */
        int32_t start = -1;
        for (int32_t i = 0; i < 3000 - 64 && start < 0; i++)
            if (shard_token(i, V, -1, 0) == (uint32_t)in[s * 64]) start = i;
        assert_true(start >= 0);
        for (int t = 0; t < 64; t++) {
            assert_int_equal(in[s * 64 + t], (int32_t)shard_token(start + t, V, -1, 0));
            assert_int_equal(tg[s * 64 + t], (int32_t)shard_token(start + t + 1, V, -1, 0));
            wide |= in[s * 64 + t] > 65535;
        }
    }
    assert_true(wide);   /* the shard's point: ids a uint16 cannot hold */
    prt_data_close(d);
    /* the same shard for a vocabulary of 70000 names its first id >= 70000 */
    char want[64];
    int32_t first = 0;
    while (shard_token(first, V, -1, 0) < 70000) first++;
    snprintf(want, sizeof want, "token %u at position %d", shard_token(first, V, -1, 0), first);
    expect_error("ok32.bin", PRT_DATA_AUTO, 64, 70000, PRT_ERR_FORMAT, want);
}

/* Open must fail with st and a message naming the file and `what`. */
static void expect_error(const char *name, prt_data_format fmt, size_t T, size_t vocab,
                         prt_status st, const char *what)
{
    char p[512], err[512] = "";
    path_of(p, sizeof p, name);
    prt_data *d = (prt_data *)1;
    assert_int_equal(prt_data_open(&d, p, fmt, T, vocab, err, sizeof err), st);
    assert_null(d);
    if (!strstr(err, p) || !strstr(err, what)) {
        print_message("  message '%s' lacks '%s' or '%s'\n", err, p, what);
        fail();
    }
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("missing.bin", PRT_DATA_AUTO, 8, 256, PRT_ERR_IO, "No such file");
    expect_error("empty.txt", PRT_DATA_AUTO, 8, 256, PRT_ERR_FORMAT, "empty");
    expect_error("magic.bin", PRT_DATA_AUTO, 8, 50257, PRT_ERR_FORMAT, "wrong magic");
    expect_error("short.bin", PRT_DATA_AUTO, 8, 50257, PRT_ERR_FORMAT, "truncated");
    expect_error("header.bin", PRT_DATA_LLMC, 8, 50257, PRT_ERR_FORMAT, "truncated");
    expect_error("tiny.bin", PRT_DATA_AUTO, 64, 50257, PRT_ERR_FORMAT, "shorter than one sequence");
    expect_error("text.txt", PRT_DATA_TEXT, 8, 100, PRT_ERR_FORMAT, "outside the vocabulary");
    expect_error("text.txt", PRT_DATA_LLMC, 8, 256, PRT_ERR_FORMAT, "wrong magic");
    /* uint32 shards: the version that goes with the magic, the 4-byte
     * tokens' length, and an id == vocab named with its position */
    expect_error("ver32.bin", PRT_DATA_AUTO, 8, 128256, PRT_ERR_FORMAT,
                 "unsupported llm.c shard version 1 for magic 20240801 (expected 7)");
    expect_error("short32.bin", PRT_DATA_AUTO, 8, 128256, PRT_ERR_FORMAT, "truncated");
    expect_error("oov32.bin", PRT_DATA_AUTO, 8, 70000, PRT_ERR_FORMAT,
                 "token 70000 at position 1234 is outside the vocabulary of 70000");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_batches),
        cmocka_unit_test(test_llmc_shard),
        cmocka_unit_test(test_llmc_shard32),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("ops-data", tests, setup, teardown);
}
