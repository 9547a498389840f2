/*
 * test_rand.h: the seeded random tensors the kernel tests share (an LCG,
 * Knuth's MMIX constants), so every test file draws its inputs the same
 * way. A file defines TEST_RAND_SEED before including it to pick its own
 * sequence (the figures its tests were written against).
 */
#ifndef TEST_RAND_H
#define TEST_RAND_H

#include <stdint.h>
#include <stdlib.h>

#ifndef TEST_RAND_SEED
#define TEST_RAND_SEED 42
#endif

static uint64_t rng_state = TEST_RAND_SEED;

/* uniform in [-1, 1) */
static inline float frand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* n values uniform in [-scale, scale) (4 bytes of slack past the end) */
static inline float *rnd(size_t n, float scale)
{
    float *p = malloc(n * sizeof *p + 4);
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * scale;
    return p;
}

static inline float *zeros(size_t n) { return calloc(n + 1, sizeof(float)); }

#endif
