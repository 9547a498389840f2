/*
 * presets.c: model and cluster presets built in C (see presets.h).
 *
 * Figures are the vendors' data-sheet numbers: A100 SXM4 80 GB (NVIDIA
 * A100 datasheet: 312 TFLOPS dense bf16/fp16, 19.5 TFLOPS fp32, 2,039 GB/s
 * HBM2e), H100 SXM5 (989 TFLOPS dense bf16, 67 TFLOPS fp32, 3.35 TB/s
 * HBM3); NVLink 3 / 4 give 300 / 450 GB/s per direction per GPU; the IB
 * rails are 200 / 400 Gb/s each, one per GPU. Link latencies are typical
 * NCCL per-hop figures (NVLink ~2 us, InfiniBand ~5 us).
 */
#include "planner/presets.h"

#include <string.h>

void plan_preset_gpt(Model *m, Layer *buf, const char *name, int blocks, int64_t dim,
                     int64_t heads, int64_t seq, int64_t vocab, PlanDtype dtype)
{
    int n = 0;
    memset(buf, 0, sizeof(Layer) * (size_t)PLAN_PRESET_LAYERS(blocks));
    buf[n++] = (Layer){ .kind = LAYER_EMBEDDING, .position = POS_LEARNED };
    for (int i = 0; i < blocks; i++) {
        buf[n++] = (Layer){ .kind = LAYER_ATTENTION, .heads = heads, .kv_heads = heads,
                            .norm = NORM_LAYERNORM, .bias = true };
        buf[n++] = (Layer){ .kind = LAYER_MLP, .hidden = 4 * dim, .act = ACT_GELU,
                            .norm = NORM_LAYERNORM, .bias = true };
    }
    buf[n++] = (Layer){ .kind = LAYER_NORM, .norm = NORM_LAYERNORM };
    buf[n++] = (Layer){ .kind = LAYER_LM_HEAD, .tied = true };
    *m = (Model){ .name = name, .vocab = vocab, .seq = seq, .dim = dim, .dtype = dtype,
                  .layers = buf, .n_layers = n, .n_blocks = blocks };
}

void plan_preset_llama(Model *m, Layer *buf, const char *name, int blocks, int64_t dim,
                       int64_t heads, int64_t kv_heads, int64_t ffn, int64_t seq,
                       int64_t vocab, PlanDtype dtype)
{
    int n = 0;
    memset(buf, 0, sizeof(Layer) * (size_t)PLAN_PRESET_LAYERS(blocks));
    buf[n++] = (Layer){ .kind = LAYER_EMBEDDING, .position = POS_ROPE };
    for (int i = 0; i < blocks; i++) {
        buf[n++] = (Layer){ .kind = LAYER_ATTENTION, .heads = heads, .kv_heads = kv_heads,
                            .norm = NORM_RMSNORM };
        buf[n++] = (Layer){ .kind = LAYER_MLP, .hidden = ffn, .act = ACT_SWIGLU,
                            .norm = NORM_RMSNORM };
    }
    buf[n++] = (Layer){ .kind = LAYER_NORM, .norm = NORM_RMSNORM };
    buf[n++] = (Layer){ .kind = LAYER_LM_HEAD, .tied = false };
    *m = (Model){ .name = name, .vocab = vocab, .seq = seq, .dim = dim, .dtype = dtype,
                  .layers = buf, .n_layers = n, .n_blocks = blocks };
}

static const uint64_t GiB = 1ull << 30;

Cluster plan_preset_dgx_a100(int64_t nodes)
{
    return (Cluster){ .name = "dgx-a100", .nodes = nodes, .gpus_per_node = 8,
                      .device = { "a100-80gb", 80 * GiB, 19.5e12, 312e12, 2.039e12, 108 },
                      .intra = { 300e9, 2e-6 },
                      .inter = { 8 * 200e9 / 8 / 8, 5e-6 } };   /* 8 x 200 Gb/s per node, per GPU: 25 GB/s */
}

Cluster plan_preset_dgx_h100(int64_t nodes)
{
    return (Cluster){ .name = "dgx-h100", .nodes = nodes, .gpus_per_node = 8,
                      .device = { "h100-sxm", 80 * GiB, 67e12, 989e12, 3.35e12, 132 },
                      .intra = { 450e9, 2e-6 },
                      .inter = { 8 * 400e9 / 8 / 8, 5e-6 } };   /* 50 GB/s per GPU */
}

Plan plan_preset_plan(Model m, Cluster c, int dp, int tp, int pp, int zero,
                      int64_t micro_batch, int64_t global_batch, int schedule,
                      int chunks, int recompute, int sp)
{
    Plan p;
    memset(&p, 0, sizeof p);
    p.file = "<preset>";
    p.model = m;
    p.cluster = c;
    p.has_layout = true;
    p.layout = (Layout){ .dp = dp, .tp = tp, .pp = pp, .zero = zero, .micro_batch = micro_batch,
                         .global_batch = global_batch, .schedule = schedule, .chunks = chunks,
                         .recompute = recompute, .sequence_parallel = sp };
    return p;
}
