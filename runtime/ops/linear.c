/*
 * linear.c: the linear layer of the CPU build, y = x W^T + b, through
 * cblas_sgemm (never a hand-written GEMM loop).
 *
 * W is (O, K) row-major as in PyTorch, so the forward is a GEMM with W
 * transposed and the input gradient a plain one. A tensor-parallel rank
 * passes its local O (column-parallel) or local K (row-parallel, partial
 * sums that the caller all-reduces). The backward comes in two halves so
 * zero-bubble pipeline schedules can run the weight half later.
 */
#include <cblas.h>
#include "ops_err.h"

void prt_linear_fwd(prt_act *out, const prt_act *x, const prt_act *w, const prt_act *b,
                    size_t N, size_t K, size_t O)
{
    PRT_OP_ENTER("prt_linear_fwd");
    float beta = 0.0f;
    if (b) {   /* start from the bias in every row, then accumulate x W^T */
        for (size_t i = 0; i < N; i++)
            for (size_t o = 0; o < O; o++)
                out[i * O + o] = b[o];
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)O, (int)K,
                1.0f, x, (int)K, w, (int)K, beta, out, (int)O);
}

/* dx (N, K) = dout (N, O) W (O, K). */
void prt_linear_bwd_input(prt_act *dx, const prt_act *dout, const prt_act *w,
                          size_t N, size_t K, size_t O)
{
    PRT_OP_ENTER("prt_linear_bwd_input");
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, (int)K, (int)O,
                1.0f, dout, (int)O, w, (int)K, 0.0f, dx, (int)K);
}

/* dW (O, K) += dout^T x; db (O) += column sums of dout. */
void prt_linear_bwd_weight(float *dw, float *db, const prt_act *dout, const prt_act *x,
                           size_t N, size_t K, size_t O)
{
    PRT_OP_ENTER("prt_linear_bwd_weight");
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)O, (int)K, (int)N,
                1.0f, dout, (int)O, x, (int)K, 1.0f, dw, (int)K);
    if (db)
        for (size_t i = 0; i < N; i++)
            for (size_t o = 0; o < O; o++)
                db[o] += dout[i * O + o];
}

void prt_bias_add(prt_act *out, const prt_act *b, size_t N, size_t O)
{
    PRT_OP_ENTER("prt_bias_add");
    for (size_t i = 0; i < N; i++)
        for (size_t o = 0; o < O; o++)
            out[i * O + o] += b[o];
}

void prt_bias_grad(float *db, const prt_act *dout, size_t N, size_t O)
{
    PRT_OP_ENTER("prt_bias_grad");
    for (size_t i = 0; i < N; i++)
        for (size_t o = 0; o < O; o++)
            db[o] += dout[i * O + o];
}

void prt_linear_bwd(prt_act *dx, float *dw, float *db, const prt_act *dout,
                    const prt_act *x, const prt_act *w, size_t N, size_t K, size_t O)
{
    PRT_OP_ENTER("prt_linear_bwd");
    if (dx)
        prt_linear_bwd_input(dx, dout, w, N, K, O);
    prt_linear_bwd_weight(dw, db, dout, x, N, K, O);
}
