/*
 * presets.c: model, device and cluster presets built in C (see presets.h).
 *
 * Device figures are the vendors' data-sheet numbers, dense (no sparsity):
 *   A100 SXM4 80GB: NVIDIA A100 datasheet: 80 GB HBM2e, 312 TFLOPS
 *     bf16/fp16 tensor core, 19.5 TFLOPS fp32, 2,039 GB/s.
 *   H100 SXM5 80GB: NVIDIA H100 datasheet: 80 GB HBM3, 989 TFLOPS bf16/fp16
 *     dense (1,979 with sparsity), 67 TFLOPS fp32, 3.35 TB/s.
 *   H200 SXM 141GB: NVIDIA H200 datasheet: 141 GB HBM3e, same compute as
 *     H100 SXM, 4.8 TB/s.
 *   H100 96GB, B200, GB200: below, with the table.
 *   cpu: a 2-core laptop or VM running the fp32 CPU target with OpenBLAS:
 *     8 GiB, 2 cores x 3 GHz x 16 fp32 FLOP/cycle (one AVX2 FMA per cycle)
 *     ~ 100 GFLOPS for both "fp32" and "16-bit" (the CPU target computes in
 *     fp32), dual-channel DDR4 ~ 20 GB/s.
 * "80 GB" of the A100/H100 is 80 GiB of usable HBM; the H200's 141 GB is
 * decimal. SMs: 108 on the A100 SXM4 (A100 whitepaper), 132 on the H100 and
 * H200 SXM (H100 whitepaper); 0 (unknown) for the CPU.
 *
 * Links: NVLink 3 / 4 give 300 / 450 GB/s per direction per GPU; the IB
 * rails are 200 / 400 Gb/s each, one per GPU. Link latencies are typical
 * NCCL per-hop figures (NVLink ~2 us, InfiniBand ~5 us).
 */
#include "planner/presets.h"

#include "planner/layout.h"

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
    /* dropout 0.1: GPT-2's and Megatron-LM's default (--hidden-dropout,
     * --attention-dropout) */
    *m = (Model){ .name = name, .vocab = vocab, .seq = seq, .dim = dim, .dtype = dtype,
                  .layers = buf, .n_layers = n, .n_blocks = blocks, .dropout = 0 };
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

/* name, memory, fp32, 16-bit, HBM, SMs; no measured GEMM profile
 * (cost.c's analytic figures).
 *
 * gemm_eff: the rate the best-shaped GEMM reaches over the data-sheet
 * peak, 16-bit, in the runs its source timed; `sustained` then the
 * fraction of it a training step's back-to-back kernels keep at the
 * power limit (cost.c applies it to GEMMs and fused attention; 0 = 1).
 * A100 SXM: 258 of 312 TFLOPS (82.7 %), cuBLAS at 8192^3 on normally
 * distributed inputs (Horace He, thonking.ai 2024, "Strangely, Matrix
 * Multiplications on GPUs Run Faster When Given 'Predictable' Data"):
 * the A100 is power-limited (400 W), so a step's GEMMs, back to back on
 * random data, run below mamf-finder's 271.2 (ml-engineering, "Maximum
 * Achievable Matmul FLOPS" table) — already sustained, so `sustained` 1;
 * Azure's harness after 10,000 warm-up iterations agrees (254 / 257 at
 * 8192^3 / 16384^3, ND_A100_v4; kernel-rates.md); checked against the
 * GEMMs of a GPT layer (test_gemm_a100_measured).
 * H100 SXM: mamf-finder's 792.1 of 989 (80.1 %), which OpenXLA's measured
 * sm_90 table bears out (test_gemm_h100_measured) — short runs; at its
 * 700 W limit the H100's GEMMs lose the clock (kernel-rates.md: "H100
 * matmuls are power-limited ... the clock drops under sustained load"):
 * torch.matmul reaches 797 TFLOPS at 8192^3 and 720 at 10240^3, whose
 * calls run 1.6x longer (public single-machine reports, kernel-rates.md),
 * so `sustained` = 720 / 792.1 = 0.909; Azure's FP8 GEMMs after 10,000
 * warm-up iterations, at 65-70 % of the FP8 peak (ND_H100_v5), say the
 * drop is at least that. The H200 SXM has the H100's compute and power
 * limit, so its figures.
 * H100 96 GB (Meta's Grand Teton part of torchtitan's tables: the SXM5
 * die with 6 HBM2e stacks, 2.4 TB/s, at 500 W): the 700 W part's
 * figures, with the clock at 500 W scaled by the power ratio to the 1/3
 * (dynamic power ~ f V^2 with V ~ f in the DVFS range): sustained 0.909
 * x (500/700)^(1/3) = 0.812. A model, not a measurement: none is
 * published for this part.
 * B200 (HGX, 1000 W) and GB200 (1200 W): NVIDIA's Blackwell data sheet
 * (dense: bf16 2.25 / 2.5 PFLOPS, fp8 4.5 / 5, fp32 80 / 90 TFLOPS),
 * HBM3e 8 TB/s, 148 SMs; 180 GB usable of the B200 (DGX B200: 1,440 GB
 * for 8), 186 GB of the GB200 (NVL72: 13.4 TB for 72). No Blackwell GEMM
 * or attention rate is published in our sources: the H100's fractions of
 * the peak (gemm_eff, sustained), said so by `check`'s device line being
 * a preset.
 * stream: the bytes/s memory-bound kernels reach, BabelStream copy /
 * triad means (Azure ND_A100_v4: 1.61 / 1.70 TB/s = 81 % of 2.039;
 * ND_H100_v5: 2.90 / 2.97 TB/s = 87.6 % of 3.35; kernel-rates.md; tuned
 * RMSNorm and softmax kernels reach ~90 %, Dao-AILab/quack); the parts
 * without a measurement take the H100's fraction of their HBM.
 * flops_fp8: dense FP8 tensor-core peak (H100/H200 1979 TFLOPS; the A100
 * has no FP8).
 * arch: compute capability x 10 (A100 8.0, H100/H200 9.0, B200 10.0).
 * nvls: HGX H100/H200/B200 boards and NVL72 racks carry NVSwitches with
 * multicast and in-switch reduction (NVLink SHARP), which NCCL's NVLS
 * uses; the A100's NVSwitches have none. attn_eff: 0 for every preset
 * (cost.c's measured attention rates per kernel); `device { attention_efficiency X }`
 * sets one rate instead. */
#define H100_STREAM_FRAC (2.935 / 3.35)   /* BabelStream on ND_H100_v5 */
#define H100_GEMM_EFF    (792.1 / 989)
#define H100_SUSTAINED   (720.0 / 792.1)
const Device plan_device_presets[PLAN_N_DEVICES] = {
    { .name = "a100-sxm-80gb", .memory = 80ull << 30, .flops_fp32 = 19.5e12, .flops_16 = 312e12,
      .hbm = 2.039e12, .stream = 1.655e12, .sms = 108, .gemm_eff = 258.0 / 312, .arch = 80,
      .nvls = false },
    { .name = "h100-sxm-80gb", .memory = 80ull << 30, .flops_fp32 = 67e12, .flops_16 = 989e12,
      .flops_fp8 = 1979e12, .hbm = 3.35e12, .stream = 2.935e12, .sms = 132, .gemm_eff = H100_GEMM_EFF,
      .sustained = H100_SUSTAINED, .arch = 90, .nvls = true },
    { .name = "h100-96gb", .memory = 96ull << 30, .flops_fp32 = 67e12, .flops_16 = 989e12,
      .flops_fp8 = 1979e12, .hbm = 2.4e12, .stream = 2.4e12 * H100_STREAM_FRAC, .sms = 132,
      .gemm_eff = H100_GEMM_EFF, .sustained = H100_SUSTAINED * 0.8939 /* (500/700)^(1/3) */, .arch = 90, .nvls = true },
    { .name = "h200-sxm-141gb", .memory = 141000000000ull, .flops_fp32 = 67e12, .flops_16 = 989e12,
      .flops_fp8 = 1979e12, .hbm = 4.8e12, .stream = 4.8e12 * H100_STREAM_FRAC, .sms = 132,
      .gemm_eff = H100_GEMM_EFF, .sustained = H100_SUSTAINED, .arch = 90, .nvls = true },
    { .name = "b200-sxm-180gb", .memory = 180000000000ull, .flops_fp32 = 80e12, .flops_16 = 2250e12,
      .flops_fp8 = 4500e12, .hbm = 8e12, .stream = 8e12 * H100_STREAM_FRAC, .sms = 148,
      .gemm_eff = H100_GEMM_EFF, .sustained = H100_SUSTAINED, .arch = 100, .nvls = true },
    { .name = "gb200", .memory = 186000000000ull, .flops_fp32 = 90e12, .flops_16 = 2500e12,
      .flops_fp8 = 5000e12, .hbm = 8e12, .stream = 8e12 * H100_STREAM_FRAC, .sms = 148,
      .gemm_eff = H100_GEMM_EFF, .sustained = H100_SUSTAINED, .arch = 100, .nvls = true },
    { .name = "cpu", .memory = 8ull << 30, .flops_fp32 = 100e9, .flops_16 = 100e9, .hbm = 20e9, .sms = 0 },
};

const Device *plan_device_preset(const char *name)
{
    for (int i = 0; i < PLAN_N_DEVICES; i++)
        if (strcmp(plan_device_presets[i].name, name) == 0) return &plan_device_presets[i];
    return NULL;
}

Cluster plan_preset_dgx_a100(int64_t nodes)
{
    return (Cluster){ .name = "dgx-a100", .nodes = nodes, .gpus_per_node = 8,
                      .device = *plan_device_preset("a100-sxm-80gb"),
                      .intra = { .bandwidth = 300e9, .latency = 2e-6 },
                      .inter = { .bandwidth = 8 * 200e9 / 8 / 8, .latency = 5e-6 } };   /* 8 x 200 Gb/s per node, per GPU: 25 GB/s */
}

Cluster plan_preset_dgx_h100(int64_t nodes)
{
    return (Cluster){ .name = "dgx-h100", .nodes = nodes, .gpus_per_node = 8,
                      .device = *plan_device_preset("h100-sxm-80gb"),
                      .intra = { .bandwidth = 450e9, .latency = 2e-6 },
                      .inter = { .bandwidth = 8 * 400e9 / 8 / 8, .latency = 5e-6 } };   /* 50 GB/s per GPU */
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
    p.software = plan_software_defaults();
    p.layout = (Layout){ .dp = dp, .tp = tp, .pp = pp, .zero = zero, .micro_batch = micro_batch,
                         .global_batch = global_batch, .schedule = schedule, .chunks = chunks,
                         .recompute = recompute, .sequence_parallel = sp };
    return p;
}
