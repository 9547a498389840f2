/*
 * reduce_cpu.c: the local arithmetic of reductions on the CPU — combine two
 * buffers element-wise, divide by the group size for PRT_AVG — and the
 * fp16 / bf16 conversions that MPI lacks.
 *
 * Half-precision values are combined in fp32 and rounded back to nearest
 * even, as NCCL does, so a sum of P halves carries P roundings at most.
 * The fp32 loops are written plainly with restrict pointers so that gcc -O2
 * vectorises them; they run at memory bandwidth, which is what the ring
 * algorithms need (every byte received is reduced once).
 */
#include <math.h>
#include <string.h>

#include "comm_internal.h"

/* IEEE binary16 -> binary32, exactly (subnormals, inf, NaN included). */
float prtc_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, f;
    if (exp == 0x1f) {
        f = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        float v = ldexpf((float)man, -24);   /* subnormal (or zero): man * 2^-24 */
        return sign ? -v : v;
    } else {
        f = sign | ((exp + 112) << 23) | (man << 13);
    }
    float out;
    memcpy(&out, &f, sizeof out);
    return out;
}

/* binary32 -> binary16, round to nearest even, overflow to inf. */
uint16_t prtc_float_to_half(float x)
{
    uint32_t f;
    memcpy(&f, &x, sizeof f);
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000);
    uint32_t a = f & 0x7fffffffu;
    if (a >= 0x7f800000u)                                     /* inf or NaN */
        return sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0);
    if (a >= 0x477ff000u)                                     /* >= 65520: inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) {                                    /* below 2^-14: subnormal */
        float v = fabsf(x) * 16777216.0f;                     /* in units of 2^-24 */
        return sign | (uint16_t)nearbyintf(v);                /* ties to even */
    }
    uint32_t r = a - 0x38000000u;                             /* rebias 127 -> 15 */
    uint32_t keep = r >> 13, rest = r & 0x1fff;
    keep += rest > 0x1000 || (rest == 0x1000 && (keep & 1));
    return sign | (uint16_t)keep;
}

float prtc_bf16_to_float(uint16_t h)
{
    uint32_t f = (uint32_t)h << 16;
    float out;
    memcpy(&out, &f, sizeof out);
    return out;
}

/* binary32 -> bfloat16, round to nearest even; NaN stays NaN. */
uint16_t prtc_float_to_bf16(float x)
{
    uint32_t f;
    memcpy(&f, &x, sizeof f);
    if ((f & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((f >> 16) | 0x40);
    f += 0x7fffu + ((f >> 16) & 1);
    return (uint16_t)(f >> 16);
}

/* One loop per (type, operator): dst = op(a, b).  PRT_AVG sums here; the
 * division happens once, in prtc_scale. */
#define REDUCE_LOOPS(T)                                                              \
    static void reduce_##T(T *restrict d, const T *a, const T *b, size_t n,          \
                           prt_redop op)                                             \
    {                                                                                \
        switch (op) {                                                                \
        case PRT_SUM: case PRT_AVG:                                                  \
            for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];                       \
            break;                                                                   \
        case PRT_MAX:                                                                \
            for (size_t i = 0; i < n; i++) d[i] = a[i] > b[i] ? a[i] : b[i];         \
            break;                                                                   \
        case PRT_MIN:                                                                \
            for (size_t i = 0; i < n; i++) d[i] = a[i] < b[i] ? a[i] : b[i];         \
            break;                                                                   \
        }                                                                            \
    }
REDUCE_LOOPS(float)
REDUCE_LOOPS(int32_t)
REDUCE_LOOPS(int64_t)

/* Half types: widen, combine in fp32, round back. */
static void reduce_half(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n,
                        prt_redop op, bool bf16)
{
    for (size_t i = 0; i < n; i++) {
        float x = bf16 ? prtc_bf16_to_float(a[i]) : prtc_half_to_float(a[i]);
        float y = bf16 ? prtc_bf16_to_float(b[i]) : prtc_half_to_float(b[i]);
        float z = op == PRT_MAX ? fmaxf(x, y) : op == PRT_MIN ? fminf(x, y) : x + y;
        d[i] = bf16 ? prtc_float_to_bf16(z) : prtc_float_to_half(z);
    }
}

/* dst = op(a, b) over n elements of type t; dst may alias a or b. */
void prtc_reduce(void *dst, const void *a, const void *b, size_t n, prt_dtype t, prt_redop op)
{
    switch (t) {
    case PRT_FP32:  reduce_float(dst, a, b, n, op); break;
    case PRT_INT32: reduce_int32_t(dst, a, b, n, op); break;
    case PRT_INT64: reduce_int64_t(dst, a, b, n, op); break;
    case PRT_FP16:  reduce_half(dst, a, b, n, op, false); break;
    case PRT_BF16:  reduce_half(dst, a, b, n, op, true); break;
    }
}

/* The PRT_AVG division: floats multiply by 1/P (one rounding, as NCCL);
 * integers divide and truncate toward zero. */
void prtc_scale(void *buf, size_t n, prt_dtype t, int P)
{
    const float inv = 1.0f / (float)P;
    switch (t) {
    case PRT_FP32: {
        float *x = buf;
        for (size_t i = 0; i < n; i++) x[i] *= inv;
        break;
    }
    case PRT_INT32: {
        int32_t *x = buf;
        for (size_t i = 0; i < n; i++) x[i] /= P;
        break;
    }
    case PRT_INT64: {
        int64_t *x = buf;
        for (size_t i = 0; i < n; i++) x[i] /= P;
        break;
    }
    case PRT_FP16: case PRT_BF16: {
        uint16_t *x = buf;
        bool bf = t == PRT_BF16;
        for (size_t i = 0; i < n; i++) {
            float v = (bf ? prtc_bf16_to_float(x[i]) : prtc_half_to_float(x[i])) * inv;
            x[i] = bf ? prtc_float_to_bf16(v) : prtc_float_to_half(v);
        }
        break;
    }
    }
}
