/*
 * fp8_encode.c: planrt's fp32 -> FP8 encoder as a filter, for
 * tests/fp8/ref_check.py to compare with ml_dtypes bit for bit.
 *
 *   fp8_encode e4m3|e5m2 sat|nonsat IN OUT
 *
 * IN holds raw little-endian fp32 values, OUT receives one code byte per
 * value (prt_fp8_encode). Exit 0, or 2 with a message on bad usage or I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planrt.h"

static int usage(void)
{
    fprintf(stderr, "usage: fp8_encode e4m3|e5m2 sat|nonsat IN.f32 OUT.u8\n");
    return 2;
}

/* Encode n values from in to out, 64 Ki at a time. */
static int encode_stream(FILE *in, FILE *out, prt_fp8_format fmt, prt_fp8_mode mode)
{
    enum { CHUNK = 1 << 16 };
    static float x[CHUNK];
    static uint8_t q[CHUNK];
    size_t n;
    while ((n = fread(x, sizeof x[0], CHUNK, in)) > 0) {
        for (size_t i = 0; i < n; i++)
            q[i] = prt_fp8_encode(x[i], fmt, mode);
        if (fwrite(q, 1, n, out) != n)
            return 1;
    }
    return ferror(in) ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return usage();
    prt_fp8_format fmt;
    prt_fp8_mode mode;
    if (!strcmp(argv[1], "e4m3")) fmt = PRT_FP8_E4M3;
    else if (!strcmp(argv[1], "e5m2")) fmt = PRT_FP8_E5M2;
    else return usage();
    if (!strcmp(argv[2], "sat")) mode = PRT_FP8_SAT;
    else if (!strcmp(argv[2], "nonsat")) mode = PRT_FP8_NONSAT;
    else return usage();
    FILE *in = fopen(argv[3], "rb");
    FILE *out = in ? fopen(argv[4], "wb") : NULL;
    if (!in || !out) {
        fprintf(stderr, "fp8_encode: cannot open %s\n", in ? argv[4] : argv[3]);
        return 2;
    }
    int bad = encode_stream(in, out, fmt, mode);
    bad |= fclose(out) != 0;
    fclose(in);
    if (bad) {
        fprintf(stderr, "fp8_encode: I/O error on %s or %s\n", argv[3], argv[4]);
        return 2;
    }
    return 0;
}
