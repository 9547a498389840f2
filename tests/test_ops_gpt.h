/*
 * test_ops_gpt.h: a small single-rank GPT built from the runtime's ops,
 * for the training test and the CPU benchmark. Test code, not runtime API:
 * the code generator writes its own per-layout version of this.
 */
#ifndef TEST_OPS_GPT_H
#define TEST_OPS_GPT_H

#include "planrt.h"

typedef enum { RC_NONE, RC_SELECTIVE, RC_FULL } Recompute;

typedef struct {
    size_t V, C, L, H, Hkv, F, T, B;  /* vocab, dim, layers, heads, kv heads, mlp hidden, seq, batch */
    bool llama;                        /* rmsnorm, rope, swiglu, no biases, untied head */
    Recompute recompute;
} GptConfig;

typedef struct Gpt Gpt;

/* Where a step's time goes: seconds per kind of op, summed over calls. */
enum { PROF_LINEAR, PROF_ATTENTION, PROF_NORM, PROF_ELEMENTWISE, PROF_XENT,
       PROF_EMBED, PROF_ADAMW, PROF_COUNT };
extern double gpt_prof[PROF_COUNT];
extern bool   gpt_prof_on;           /* time each op (synchronising on CUDA) */

Gpt   *gpt_new(const GptConfig *cfg, uint64_t seed);
void   gpt_free(Gpt *g);
size_t gpt_num_params(const Gpt *g);
float *gpt_params(Gpt *g);           /* (P) flat fp32 master weights (device on CUDA) */
float *gpt_grads(Gpt *g);            /* (P) flat fp32 (device on CUDA) */
/* Mean cross-entropy of one batch (host tokens, targets (B*T)); forward only. */
float  gpt_forward(Gpt *g, const int32_t *tokens, const int32_t *targets);
/* Forward and backward: gradients accumulate into gpt_grads. */
float  gpt_forward_backward(Gpt *g, const int32_t *tokens, const int32_t *targets);
void   gpt_zero_grad(Gpt *g);
/* Clip and AdamW over the whole flat buffer, step t >= 1. */
void   gpt_adamw(Gpt *g, const prt_adamw_cfg *cfg, long t);
/* Model FLOPs of one forward+backward (PaLM, appendix B: 6N + 12 L H D T
 * per token, N the matrix parameters including the head). */
double gpt_flops_per_step(const GptConfig *cfg);

#endif
