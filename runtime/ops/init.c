/*
 * init.c: parameter initialisation that does not depend on the layout.
 *
 * Element i of parameter pid gets a normal drawn from Philox 4x32-10
 * (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011)
 * with counter (i, pid) and key seed, turned into a normal by Box-Muller.
 * Nothing carries state from one element to the next, so a ZeRO shard
 * (a range of indices) or a TP shard (a sub-matrix: rows r0..r1, cols
 * c0..c1 of the global matrix) produces exactly the values the whole
 * tensor would. The arithmetic runs on the host for both targets, so the
 * CPU and CUDA builds agree bit for bit; the CUDA build copies each chunk
 * to the device.
 */
#include <math.h>
#include <stdlib.h>
#include "planrt.h"

float prt_philox_normal(uint64_t seed, uint64_t pid, uint64_t i)
{
    uint32_t c[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)pid, (uint32_t)(pid >> 32)};
    prt_philox4x32(c, (uint32_t)seed, (uint32_t)(seed >> 32));   /* prt_ops.h: the one Philox */
    float u1 = (float)((c[0] >> 8) + 1) * 0x1p-24f;   /* (0, 1], 24 bits */
    float u2 = (float)(c[1] >> 8) * 0x1p-24f;         /* [0, 1) */
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795865f * u2);
}

static void fill_normal(float *dst, size_t n, uint64_t seed, uint64_t pid,
                        uint64_t first, float std)
{
    for (size_t k = 0; k < n; k++)
        dst[k] = std * prt_philox_normal(seed, pid, first + k);
}

#ifdef PRT_CUDA
enum { CHUNK = 1 << 20 };   /* host staging, elements */

prt_status prt_init_normal(float *dst, size_t n, uint64_t seed, uint64_t pid,
                           uint64_t first_index, float std)
{
    float *h = malloc((n < CHUNK ? n : CHUNK) * sizeof *h + 1);
    if (!h)
        return PRT_ERR_NOMEM;
    prt_status st = PRT_OK;
    for (size_t off = 0; off < n && st == PRT_OK; off += CHUNK) {
        size_t k = n - off < CHUNK ? n - off : CHUNK;
        fill_normal(h, k, seed, pid, first_index + off, std);
        st = prt_copy_to_device(dst + off, h, k * sizeof *h);
    }
    free(h);
    return st;
}

prt_status prt_init_const(float *dst, size_t n, float value)
{
    float *h = malloc((n < CHUNK ? n : CHUNK) * sizeof *h + 1);
    if (!h)
        return PRT_ERR_NOMEM;
    for (size_t k = 0; k < n && k < CHUNK; k++)
        h[k] = value;
    prt_status st = PRT_OK;
    for (size_t off = 0; off < n && st == PRT_OK; off += CHUNK) {
        size_t k = n - off < CHUNK ? n - off : CHUNK;
        st = prt_copy_to_device(dst + off, h, k * sizeof *h);
    }
    free(h);
    return st;
}
#else
prt_status prt_init_normal(float *dst, size_t n, uint64_t seed, uint64_t pid,
                           uint64_t first_index, float std)
{
    if (!dst && n)
        return PRT_ERR_ARG;
    fill_normal(dst, n, seed, pid, first_index, std);
    return PRT_OK;
}

prt_status prt_init_const(float *dst, size_t n, float value)
{
    if (!dst && n)
        return PRT_ERR_ARG;
    for (size_t k = 0; k < n; k++)
        dst[k] = value;
    return PRT_OK;
}
#endif

prt_status prt_init_normal_2d(float *dst, size_t R, size_t C, size_t r0, size_t r1,
                              size_t c0, size_t c1, uint64_t seed, uint64_t pid, float std)
{
    if (r0 > r1 || r1 > R || c0 > c1 || c1 > C)
        return PRT_ERR_ARG;
    size_t w = c1 - c0;
    for (size_t r = r0; r < r1; r++) {
        prt_status st = prt_init_normal(dst + (r - r0) * w, w, seed, pid, r * C + c0, std);
        if (st != PRT_OK)
            return st;
    }
    return PRT_OK;
}

/* GPT-2 (Radford et al. 2019, section 2.3): residual projections scaled by
 * 1/sqrt(N) with N = 2L residual additions. */
float prt_gpt2_std(bool residual_proj, int n_layer)
{
    return residual_proj && n_layer > 0 ? 0.02f / sqrtf(2.0f * (float)n_layer) : 0.02f;
}
