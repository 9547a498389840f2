/*
 * adamw.c: AdamW, the learning-rate schedule and global-norm clipping of
 * the CPU build, on fp32 slices of the flat parameter buffer.
 *
 * The update is elementwise, so ZeRO can call it on any [offset,
 * offset+n) range of the flat buffers and get bit for bit what the whole
 * buffer would. Clipping is split so the caller can sum the squared norm
 * across ranks between the two halves: prt_grad_sq_norm (local part),
 * the caller's all-reduce, prt_clip_scale, then the scale is passed to
 * prt_adamw_step. The schedule and clipping are target-independent and
 * shared with the CUDA build.
 */
#include <math.h>
#include "ops_err.h"

/* Linear warm-up then cosine decay (Loshchilov & Hutter 2017, SGDR; the
 * form of nanoGPT/llm.c). */
float prt_lr_at(const prt_adamw_cfg *cfg, long step)
{
    if (cfg->warmup > 0 && step < cfg->warmup)
        return cfg->lr * (float)(step + 1) / (float)cfg->warmup;
    if (cfg->total <= cfg->warmup || step >= cfg->total)
        return step >= cfg->total ? cfg->min_lr : cfg->lr;
    double ratio = (double)(step - cfg->warmup) / (double)(cfg->total - cfg->warmup);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return cfg->min_lr + (float)coeff * (cfg->lr - cfg->min_lr);
}

float prt_clip_scale(double global_sq, float clip)
{
    if (clip <= 0.0f || !(global_sq > 0.0))
        return 1.0f;
    double norm = sqrt(global_sq);
    return norm > clip ? (float)(clip / norm) : 1.0f;
}

#ifndef PRT_CUDA
double prt_grad_sq_norm(const float *g, size_t n)
{
    if (prt_op_fault("prt_grad_sq_norm"))
        return 0.0;   /* as a kernel that never ran: nothing summed */
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return s;
}

/* Kingma & Ba 2015 with bias correction; decay decoupled from the
 * gradient and scaled by the learning rate (Loshchilov & Hutter 2019). */
void prt_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
                    const prt_adamw_cfg *cfg, long t, float lr, float wd,
                    float grad_scale)
{
    PRT_OP_ENTER("prt_adamw_step");
    float b1 = cfg->beta1, b2 = cfg->beta2;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        float mh = m[i] / c1, vh = v[i] / c2;
        p[i] -= lr * (mh / (sqrtf(vh) + cfg->eps) + wd * p[i]);
    }
}
#endif
