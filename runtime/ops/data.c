/*
 * data.c: training data, read whole into host memory at open.
 *
 * Two formats: raw text, where every byte is a token (vocab 256), and
 * llm.c token shards (dev/data/data_common.py in llm.c, HEADERS_INFO: a
 * header of 256 int32 with the magic, the version and the token count,
 * then the tokens; magic 20240520 version 1 for uint16 tokens (GPT-2),
 * 20240801 version 7 for uint32 tokens (Llama 3, any vocabulary over
 * 65,535)). Open checks everything it can and says which file and what
 * is wrong, so a training run never starts on a bad file.
 *
 * Batches are stateless: sequence s of step k of the global batch starts
 * at a position drawn from (seed, k, s) with the same Philox generator
 * family as init.c, so any DP rank can read its sequences [a, b) alone and
 * every layout trains on the same global batch. The output is host memory
 * in both builds; the caller copies it to the device.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planrt.h"

#define LLMC_HEADER  256   /* int32 words */

/* The shard kinds llm.c writes: magic, version, bytes per token. */
typedef struct {
    int32_t magic, version;
    size_t  width;
} llmc_kind;

static const llmc_kind LLMC_KINDS[] = {
    { 20240520, 1, 2 },   /* uint16 tokens (GPT-2) */
    { 20240801, 7, 4 },   /* uint32 tokens (Llama 3) */
};

struct prt_data {
    void  *tok;      /* (n) tokens of `width` bytes each; text bytes widened to 2 */
    size_t width;    /* 2 (uint16) or 4 (uint32): kept as read, so a 16-bit shard
                        costs 2 bytes a token in host memory */
    size_t n;        /* token count */
    size_t T;        /* sequence length the file was opened for */
};

/* Token i of d, whatever its width. */
static uint32_t token_at(const prt_data *d, size_t i)
{
    return d->width == 4 ? ((const uint32_t *)d->tok)[i] : ((const uint16_t *)d->tok)[i];
}

static prt_status fail(char *err, size_t errlen, prt_status st, const char *path,
                       const char *fmt, ...)
{
    if (err && errlen) {
        int k = snprintf(err, errlen, "%s: ", path);
        if (k >= 0 && (size_t)k < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return st;
}

/* The whole file, or NULL with *size the reason's errno. */
static unsigned char *slurp(const char *path, size_t *size, int *errnum)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *errnum = errno;
        return NULL;
    }
    unsigned char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 16;
            unsigned char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(f);
                *errnum = ENOMEM;
                return NULL;
            }
            buf = nb;
            cap = ncap;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) {
            if (ferror(f)) {
                *errnum = errno ? errno : EIO;
                free(buf);
                fclose(f);
                return NULL;
            }
            break;
        }
    }
    fclose(f);
    *size = len;
    return buf;
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Decode an llm.c shard's header and tokens into d, or say what is wrong. */
static prt_status parse_llmc(prt_data *d, const unsigned char *buf, size_t size,
                             const char *path, char *err, size_t errlen)
{
    int32_t h[LLMC_HEADER];
    if (size < sizeof h)
        return fail(err, errlen, PRT_ERR_FORMAT, path,
                    "truncated llm.c shard: the header needs %zu bytes, the file has %zu",
                    sizeof h, size);
    memcpy(h, buf, sizeof h);
    const llmc_kind *k = NULL;
    for (size_t i = 0; i < sizeof LLMC_KINDS / sizeof LLMC_KINDS[0]; i++)
        if (h[0] == LLMC_KINDS[i].magic) k = &LLMC_KINDS[i];
    if (!k)
        return fail(err, errlen, PRT_ERR_FORMAT, path,
                    "wrong magic %d (an llm.c token shard starts with %d for uint16 tokens or %d for "
                    "uint32)", h[0], LLMC_KINDS[0].magic, LLMC_KINDS[1].magic);
    if (h[1] != k->version)
        return fail(err, errlen, PRT_ERR_FORMAT, path,
                    "unsupported llm.c shard version %d for magic %d (expected %d)", h[1], k->magic,
                    k->version);
    if (h[2] < 0)
        return fail(err, errlen, PRT_ERR_FORMAT, path, "negative token count %d", h[2]);
    size_t n = (size_t)h[2], have = (size - sizeof h) / k->width;
    if (have < n)
        return fail(err, errlen, PRT_ERR_FORMAT, path,
                    "truncated: the header promises %zu tokens of %zu bytes, the file holds %zu", n,
                    k->width, have);
    d->tok = malloc(n * k->width + 1);
    if (!d->tok)
        return fail(err, errlen, PRT_ERR_NOMEM, path, "out of memory for %zu tokens", n);
    memcpy(d->tok, buf + sizeof h, n * k->width);
    d->width = k->width;
    d->n = n;
    return PRT_OK;
}

prt_status prt_data_open(prt_data **out, const char *path, prt_data_format fmt,
                         size_t T, size_t vocab, char *err, size_t errlen)
{
    *out = NULL;
    if (!path)
        return fail(err, errlen, PRT_ERR_ARG, "(null)", "no data file given");
    size_t size = 0;
    int errnum = 0;
    unsigned char *buf = slurp(path, &size, &errnum);
    if (!buf)
        return fail(err, errlen, errnum == ENOMEM ? PRT_ERR_NOMEM : PRT_ERR_IO, path,
                    "cannot read: %s", strerror(errnum));
    prt_data *d = calloc(1, sizeof *d);
    prt_status st = d ? PRT_OK : PRT_ERR_NOMEM;
    if (fmt == PRT_DATA_AUTO)
        fmt = has_suffix(path, ".bin") ? PRT_DATA_LLMC : PRT_DATA_TEXT;
    if (st != PRT_OK) {
        fail(err, errlen, st, path, "out of memory");
    } else if (size == 0) {
        st = fail(err, errlen, PRT_ERR_FORMAT, path, "file is empty");
    } else if (fmt == PRT_DATA_LLMC) {
        st = parse_llmc(d, buf, size, path, err, errlen);
    } else {
        uint16_t *tok = malloc(size * sizeof *tok);
        if (!tok)
            st = fail(err, errlen, PRT_ERR_NOMEM, path, "out of memory for %zu bytes", size);
        for (size_t i = 0; tok && i < size; i++)
            tok[i] = buf[i];
        d->tok = tok;
        d->width = 2;
        d->n = size;
    }
    free(buf);
    if (st == PRT_OK && d->n < T + 1)
        st = fail(err, errlen, PRT_ERR_FORMAT, path,
                  "%zu tokens, shorter than one sequence (%zu tokens and its next-token target)",
                  d->n, T);
    for (size_t i = 0; st == PRT_OK && i < d->n; i++)
        if (token_at(d, i) >= vocab)
            st = fail(err, errlen, PRT_ERR_FORMAT, path,
                      "token %u at position %zu is outside the vocabulary of %zu",
                      (unsigned)token_at(d, i), i, vocab);
    if (st != PRT_OK) {
        prt_data_close(d);
        return st;
    }
    d->T = T;
    *out = d;
    return PRT_OK;
}

size_t prt_data_tokens(const prt_data *d) { return d->n; }

/* SplitMix64 finaliser (Steele et al. 2014): a bijective 64-bit mix. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The start of sequence s of step k: a hash of (seed, k, s) modulo the
 * number of windows of T+1 tokens. */
static size_t start_of(const prt_data *d, uint64_t seed, uint64_t step, uint64_t s)
{
    uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ull);
    h = mix64(h ^ (step * 0xD1B54A32D192ED03ull));
    h = mix64(h ^ (s * 0xABA0D9B1F3E1C2A7ull + 1));
    return (size_t)(h % (uint64_t)(d->n - d->T));
}

void prt_data_batch(const prt_data *d, uint64_t seed, uint64_t step, size_t s0,
                    size_t n_seq, int32_t *inputs, int32_t *targets)
{
    size_t T = d->T;
    for (size_t s = 0; s < n_seq; s++) {
        size_t at = start_of(d, seed, step, s0 + s);
        /* ids < vocab <= 2^31 - 1 (checked at open): they fit int32 */
        for (size_t t = 0; t < T; t++) {
            inputs[s * T + t] = (int32_t)token_at(d, at + t);
            targets[s * T + t] = (int32_t)token_at(d, at + t + 1);
        }
    }
}

void prt_data_close(prt_data *d)
{
    if (!d)
        return;
    free(d->tok);
    free(d);
}
