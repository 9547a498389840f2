/*
 * test_ops_data.c: data loading (cmocka). The files are made here, in a
 * temporary directory: text, a small llm.c token shard, and broken files
 * of every kind the loader must name (missing, empty, truncated, wrong
 * magic, shorter than one sequence, token outside the vocabulary).
 */
#include <setjmp.h>
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

/* An llm.c shard: header (magic, version, count), then count tokens;
 * `have` tokens actually written (fewer makes it truncated). */
static void write_shard(const char *name, int32_t magic, int32_t count, int32_t have,
                        uint16_t vocab)
{
    size_t bytes = 1024 + 2 * (size_t)have;
    unsigned char *buf = calloc(1, bytes);
    int32_t h[3] = {magic, 1, count};
    memcpy(buf, h, sizeof h);
    for (int32_t i = 0; i < have; i++) {
        uint16_t t = (uint16_t)((i * 7919u) % vocab);
        memcpy(buf + 1024 + 2 * (size_t)i, &t, 2);
    }
    write_file(name, buf, bytes);
    free(buf);
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
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = {"text.txt", "empty.txt", "ok.bin", "magic.bin", "short.bin",
                           "header.bin", "tiny.bin"};
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
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_batches),
        cmocka_unit_test(test_llmc_shard),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("ops-data", tests, setup, teardown);
}
