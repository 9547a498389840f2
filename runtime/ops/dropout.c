/*
 * dropout.c: inverted dropout of the CPU build (Srivastava et al. 2014),
 * with masks that do not depend on the layout.
 *
 * An element's fate is a function of (seed, step, layer, site) and its
 * global coordinates (sequence of the global batch, head, row, column)
 * alone: Philox 4x32-10 keyed by prt_dropout_stream(), counter (column / 4,
 * row, sequence, head), word column % 4 (prt_ops.h). A DP rank passes the
 * global index of its first sequence, a TP rank its first global head, a
 * sequence-parallel rank its first row; PP, ZeRO and recomputation change
 * nothing an element is keyed by. So every layout drops exactly what one
 * rank would, and a recomputation drops exactly what the forward dropped.
 * The CUDA build (runtime/cuda/ops_layers.cu) draws the same words.
 *
 * What this file must not do: keep state between calls (there is none to
 * keep), or read a rank's coordinates itself (the caller passes them).
 */
#include "ops_err.h"

/* The four words of the Philox block of (col / 4, row, seq, head). */
static void block(uint32_t w[4], uint64_t stream, size_t col, size_t row, size_t seq, size_t head)
{
    w[0] = (uint32_t)(col / 4);
    w[1] = (uint32_t)row;
    w[2] = (uint32_t)seq;
    w[3] = (uint32_t)head;
    prt_philox4x32(w, (uint32_t)stream, (uint32_t)(stream >> 32));
}

/* One row of n columns starting at column 0: mask and y = x * mask * scale,
 * one Philox block per four columns. */
static void drop_row(prt_act *y, uint8_t *mask, const prt_act *x, size_t n, uint64_t stream,
                     uint32_t thresh, float scale, size_t row, size_t seq, size_t head)
{
    uint32_t w[4];
    for (size_t j = 0; j < n; j++) {
        if (j % 4 == 0) block(w, stream, j, row, seq, head);
        uint8_t keep = w[j % 4] >= thresh;
        mask[j] = keep;
        y[j] = keep ? x[j] * scale : 0.0f;
    }
}

void prt_dropout_fwd(prt_act *y, uint8_t *mask, const prt_act *x, const prt_dropout_key *k,
                     size_t rows, size_t C, size_t T, size_t seq0, size_t row0)
{
    PRT_OP_ENTER("prt_dropout_fwd");
    uint64_t stream = prt_dropout_stream(k);
    uint32_t thresh = prt_dropout_threshold(k->p);
    float scale = 1.0f / (1.0f - k->p);
    for (size_t i = 0; i < rows; i++) {
        size_t n = row0 + i;   /* the row in the micro-batch */
        drop_row(y + i * C, mask + i * C, x + i * C, C, stream, thresh, scale, n % T, seq0 + n / T, 0);
    }
}

void prt_dropout_probs_fwd(prt_act *y, uint8_t *mask, const prt_act *att, const prt_dropout_key *k,
                           size_t B, size_t H, size_t T, size_t seq0, size_t head0)
{
    PRT_OP_ENTER("prt_dropout_probs_fwd");
    uint64_t stream = prt_dropout_stream(k);
    uint32_t thresh = prt_dropout_threshold(k->p);
    float scale = 1.0f / (1.0f - k->p);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t t = 0; t < T; t++) {
                size_t o = ((b * H + h) * T + t) * T;
                /* keys 0..t are the causal row; after it P is 0 and stays so */
                drop_row(y + o, mask + o, att + o, t + 1, stream, thresh, scale, t, seq0 + b, head0 + h);
                for (size_t j = t + 1; j < T; j++) {
                    mask[o + j] = 0;
                    y[o + j] = 0.0f;
                }
            }
}

void prt_dropout_bwd(prt_act *dx, const prt_act *dy, const uint8_t *mask, float p, size_t n)
{
    PRT_OP_ENTER("prt_dropout_bwd");
    float scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++)
        dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}
