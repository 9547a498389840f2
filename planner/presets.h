/*
 * presets.h: Plans built directly in C — GPT- and Llama-style models and
 * the DGX A100 / DGX H100 clusters — for tests, `make validate` and any
 * caller that wants a Plan without a .plan file.
 */
#ifndef PLANC_PRESETS_H
#define PLANC_PRESETS_H

#include <stdbool.h>
#include <stdint.h>
#include "planner/plan.h"

/* The device presets, the one table of device figures (dense peaks, no
 * sparsity): a100-sxm-80gb, h100-sxm-80gb, h100-96gb, h200-sxm-141gb,
 * b200-sxm-180gb, gb200, cpu. sema reads
 * it for `device PRESET`, the cluster presets below for their nodes. */
#define PLAN_N_DEVICES 7
extern const Device plan_device_presets[PLAN_N_DEVICES];

/* The device preset called name, or NULL. */
const Device *plan_device_preset(const char *name);

/* Layers a preset model of `blocks` blocks needs in its buffer. */
#define PLAN_PRESET_LAYERS(blocks) (2 * (blocks) + 3)

/* GPT (Megatron): learned positions, LayerNorm, GeLU MLP of 4h, biases,
 * tied head, no GQA. Writes PLAN_PRESET_LAYERS(blocks) layers into buf. */
void plan_preset_gpt(Model *m, Layer *buf, const char *name, int blocks, int64_t dim,
                     int64_t heads, int64_t seq, int64_t vocab, PlanDtype dtype);

/* Llama: RoPE, RMSNorm, SwiGLU MLP of width `ffn`, grouped-query attention
 * with kv_heads, no biases, untied head. */
void plan_preset_llama(Model *m, Layer *buf, const char *name, int blocks, int64_t dim,
                       int64_t heads, int64_t kv_heads, int64_t ffn, int64_t seq,
                       int64_t vocab, PlanDtype dtype);

/* DGX A100: 8 x A100 80 GB (312 TFLOPS bf16 dense, 19.5 fp32, 2.039 TB/s),
 * NVLink 300 GB/s per direction per GPU, 8 x 200 Gb/s IB per node. */
Cluster plan_preset_dgx_a100(int64_t nodes);

/* DGX H100: 8 x H100 80 GB (989 TFLOPS bf16 dense, 67 fp32, 3.35 TB/s),
 * NVLink 450 GB/s, 8 x 400 Gb/s IB per node. */
Cluster plan_preset_dgx_h100(int64_t nodes);

/* A Plan of model m on cluster c with the layout fields given (PLAN_AUTO
 * for any left to the defaults). */
Plan plan_preset_plan(Model m, Cluster c, int dp, int tp, int pp, int zero,
                      int64_t micro_batch, int64_t global_batch, int schedule,
                      int chunks, int recompute, int sp);

#endif /* PLANC_PRESETS_H */
