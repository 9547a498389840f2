/*
 * cost.c: the cost table — seconds per micro-batch of every pipeline
 * chunk, the bytes and seconds of its collectives, and per stage the
 * optimizer step and the step-level collectives.
 *
 * Compute is timed per kernel, not from a global efficiency. A device
 * calibrated on this machine (`planc calibrate`, plan.h's Device profile)
 * times each GEMM from its measured shapes, each elementwise kernel from
 * its measured bytes/s and launch gap, and adds its measured per-step
 * overhead to the optimizer step; a device without a profile takes the
 * analytic figures below, which are the profile it has when none was
 * measured (one model, one code path). Analytically each GEMM is
 * a roofline of its tile- and wave-quantised tensor-core time against its
 * HBM traffic — on Ampere its output written after the mainloop, not
 * beside it (gemm_epilogue_serial) — so the attention score/context GEMMs
 * with k or n = head dim, or the GEMMs of a thin tensor-parallel shard,
 * fall below peak by themselves; each elementwise kernel (norms, softmax,
 * dropout, GeLU, residual, cross-entropy) is its bytes over the HBM
 * bandwidth, and every kernel pays a small launch gap. TP collectives are
 * synchronous in Megatron, so they add to the forward and backward; DP,
 * ZeRO and PP collectives and the step-level ones are separate entries
 * that the Program places (lower.c) and the simulator times (simulate.c).
 *
 * What this file must not do: derive a schedule, build ops or simulate.
 * It calls the model arithmetic (model.c) and the collective costs
 * (comm.c) only; see evaluate.c for the call graph.
 */
#include "planner/cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "planner/comm.h"
#include "planner/fp8.h"
#include "planner/memory.h"
#include "planner/model.h"
#include "planner/layout.h"

/* ---- kernels ---------------------------------------------------------- */

double plan_gemm_eff(const Device *d)
{
    return d->gemm_eff > 0 ? d->gemm_eff : PLAN_GEMM_EFF;
}

double plan_sustained(const Device *d)
{
    return d->sustained > 0 ? d->sustained : 1;
}

double plan_stream_bw(const Device *d)
{
    return d->stream > 0 ? d->stream : d->hbm * PLAN_HBM_EFF;
}

/* Whether a GEMM's epilogue (its output tiles written to HBM, read first
 * when accumulating) runs after its mainloop rather than beside it. On
 * Ampere (and a device of unknown architecture, taken as Ampere's, as
 * comm.c does) cuBLAS runs one output tile per thread block, not
 * persistently (its sm80 kernels: a 3-5 stage cp.async mainloop, then the
 * epilogue; CUTLASS "Efficient GEMM in CUDA"): the tiles of a wave start
 * and finish together, so the tensor cores wait while the wave's tiles are
 * written, at the HBM's rate. Hopper's kernels are persistent and
 * warp-specialised (CUTLASS 3 "ping-pong" and "cooperative" schedules:
 * one warp group's epilogue, a TMA store, overlaps the other's mainloop),
 * so there the output hides under the MMAs like the operands. */
static bool gemm_epilogue_serial(const Device *d)
{
    return d->arch < 90;
}

/* A GEMM whose output C is read `c_reads` times besides being written
 * (1 for a weight-gradient GEMM accumulating into the gradient buffer,
 * beta = 1, as gradient accumulation over micro-batches does). */
static double gemm_time(const Device *d, double peak, double e, double m, double n, double k,
                        double batch, int c_reads)
{
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
    double bw = plan_stream_bw(d);
    double ab = (m * k + k * n) * e * batch / bw;            /* s: the operands, streamed */
    double c = (1 + c_reads) * m * n * e * batch / bw;       /* s: the output tiles' epilogue */
    if (!(d->flops_16 > 2 * d->flops_fp32))   /* no tensor cores (a CPU): plain roofline */
        return fmax(2 * m * n * k * batch / (peak * plan_gemm_eff(d)), ab + c) + PLAN_KERNEL_GAP;
    double tm = ceil(m / PLAN_TILE_MN), tn = ceil(n / PLAN_TILE_MN);
    double kp = ceil(k / PLAN_TILE_K) * PLAN_TILE_K;
    double tiles = tm * tn * batch;
    /* one tile per SM at a time, so a wave is `sms` tiles of 2 * 128 *
     * 128 * kp FLOPs in parallel, each SM at peak/sms: a GEMM of 109
     * tiles on a 108-SM A100 takes two waves (wave quantisation) */
    double sms = d->sms > 0 ? d->sms : PLAN_WAVE_TILES;
    double waves = ceil(tiles / sms);
    double compute = waves * sms * 2.0 * PLAN_TILE_MN * PLAN_TILE_MN * kp / (peak * plan_gemm_eff(d));
    if (gemm_epilogue_serial(d))   /* the operands stream under the MMAs, the output after them */
        return fmax(compute, ab) + c + PLAN_KERNEL_GAP;
    return fmax(compute, ab + c) + PLAN_KERNEL_GAP;
}

/* The measured GEMMs of pass `pass` interpolated at (m, n, k): seconds
 * of one call, or -1 when the device has no point of that pass. Inverse
 * squared-distance weights (to the fourth power, so the nearest shapes
 * dominate) over log m, log n, log k average the log of the FLOP rate
 * (FLOP/s); an exact shape returns its own seconds. */
static double gemm_measured(const Device *d, int pass, double m, double n, double k)
{
    double wsum = 0, lsum = 0;
    for (int i = 0; i < d->n_gemm; i++) {
        const PlanGemmPoint *q = &d->gemm[i];
        if (q->pass != pass || q->seconds <= 0) continue;
        double a = log(m / q->m), b = log(n / q->n), c = log(k / q->k);
        double d2 = a * a + b * b + c * c;
        if (d2 < 1e-18) return q->seconds;
        double w = 1.0 / (d2 * d2);
        wsum += w;
        lsum += w * log(2.0 * q->m * q->n * q->k / q->seconds);
    }
    if (wsum <= 0) return -1;
    return 2.0 * m * n * k / exp(lsum / wsum);
}

/* Whether the device's measured GEMMs time a model of e-byte elements:
 * points measured in fp32 (a CPU profile) only fp32 models', points
 * measured in bf16 (a GPU profile) only 16-bit models' (bf16 and fp16 run
 * the same tensor cores at the same rate). */
static bool gemm_points_apply(const Device *d, double e)
{
    return d->n_gemm > 0 && e == plan_dtype_bytes(d->gemm_dtype);
}

double plan_gemm_pass_time(const Device *d, double peak, double e, int pass,
                           double m, double n, double k, double batch)
{
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
    double t = gemm_points_apply(d, e) ? gemm_measured(d, pass, m, n, k) : -1;
    if (t >= 0) return batch * t;
    switch (pass) {   /* ORDER PlanGemmPass: the pass's own (m, n, k) */
    case PLAN_GEMM_DX: return gemm_time(d, peak, e, m, k, n, batch, 0);       /* dA = dC B^T */
    case PLAN_GEMM_DW: return gemm_time(d, peak, e, k, n, m, batch, 1);       /* dB = A^T dC, accumulated */
    default:           return gemm_time(d, peak, e, m, n, k, batch, 0);
    }
}

double plan_gemm_time(const Device *d, double peak, double e,
                      double m, double n, double k, double batch)
{
    return plan_gemm_pass_time(d, peak, e, PLAN_GEMM_FWD, m, n, k, batch);
}

double plan_stream_time(const Device *d, double bytes, int kernels)
{
    return bytes / plan_stream_bw(d) + kernels * (d->launch > 0 ? d->launch : PLAN_KERNEL_GAP);
}

static double stream_time(const Device *d, double bytes, int kernels)
{
    return plan_stream_time(d, bytes, kernels);
}

double plan_grad_accum_time(const Plan *p, double params, int kernels)
{
    if (p->software.grad_accum_fusion || params <= 0) return 0;
    double bytes = params * (plan_dtype_bytes(p->model.dtype) + 2.0 * plan_grad_bytes(p));
    return stream_time(&p->cluster.device, bytes, kernels);
}

/* The update of torch.optim.AdamW's foreach and for-loop paths (PyTorch
 * 2.5 torch/optim/adamw.py, _multi_tensor_adamw and _single_tensor_adamw,
 * capturable off), one op per row, each a pass over fp32 tensors: its
 * bytes per parameter and its multi-tensor depth (the tensor lists the
 * foreach kernel takes). The for-loop runs the same ops per tensor. */
static const struct { int depth; double bytes; } ADAMW_EAGER_OPS[] = {
    { 1, 8 },    /* param.mul_(1 - lr wd): reads and writes p */
    { 2, 12 },   /* exp_avg.lerp_(grad, 1 - beta1): reads m, g, writes m */
    { 1, 8 },    /* exp_avg_sq.mul_(beta2) */
    { 3, 16 },   /* exp_avg_sq.addcmul_(grad, grad, 1 - beta2): reads v, g, g, writes v */
    { 2, 8 },    /* denom = exp_avg_sq.sqrt() */
    { 1, 8 },    /* denom /= sqrt(bias_correction2) */
    { 1, 8 },    /* denom += eps */
    { 3, 16 },   /* param.addcdiv_(exp_avg, denom, -step_size): reads p, m, denom, writes p */
};
/* PyTorch's multi_tensor_apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh):
 * a launch holds at most depth_to_max_tensors[depth - 1] tensors and
 * depth_to_max_blocks (320) chunks of kChunkSize (65536) elements */
static const int MTA_MAX_TENSORS[] = { 110, 64, 48, 36, 30 };
#define MTA_BLOCK_ELEMS (320.0 * 65536.0)

double plan_opt_time(const Device *d, uint64_t params, int optimizer, double tensors)
{
    double P = (double)params, bytes = 0;
    int n = (int)(sizeof ADAMW_EAGER_OPS / sizeof ADAMW_EAGER_OPS[0]);
    double launches = 0;
    if (optimizer != PLAN_OPTIM_FOREACH && optimizer != PLAN_OPTIM_FORLOOP)
        return stream_time(d, PLAN_ADAM_BYTES * P, 1);   /* one fused pass */
    for (int i = 0; i < n; i++) {
        bytes += ADAMW_EAGER_OPS[i].bytes * P;
        if (optimizer == PLAN_OPTIM_FORLOOP)
            launches += tensors;                         /* a kernel per tensor per op */
        else                                             /* the launches of multi_tensor_apply */
            launches += fmax(ceil(tensors / MTA_MAX_TENSORS[ADAMW_EAGER_OPS[i].depth - 1]),
                             ceil(P / MTA_BLOCK_ELEMS));
    }
    return stream_time(d, bytes, (int)fmin(launches, 1e9));
}

/* ---- one layer -------------------------------------------------------- */

typedef struct {
    double   fwd, bwd_in, bwd_w, rec;   /* compute, s */
    double   tp_f, tp_b, tp_rec;        /* TP collectives, s */
    double   ep_f, ep_b, ep_rec;        /* EP all-to-alls (dispatch, combine), s */
    double   epb_f, epb_b;              /* bytes sent in them (forward; backward + recompute) */
    double   flops_fwd, flops_rec;
    uint64_t params, params_full;       /* per GPU (TP rank, EP rank); whole layer */
    uint64_t expert_params;             /* of params, the local routed experts' */
    double   a2a_bytes;                 /* transient all-to-all buffers of the layer */
    double   cp_f, cp_b, cp_rec;        /* CP attention transfers the compute waits for, s */
    double   cpt_f, cpt_b;              /* all of them (exposed + overlapped; backward with the
                                           recomputed forward's), s */
    double   cpb_f, cpb_b;              /* bytes one rank sends in them, forward / backward */
    double   cp_buf_bytes;              /* the CP attention's own buffers while it runs */
    double   act_kept, act_rebuild, act_split;
    double   act_input;                 /* of act_kept, the input full recomputation keeps */
    double   tp_bytes;
    double   fp8_cast;                  /* s of FP8 casts in fwd + bwd_in (fp8.c) */
    double   fp8_params;                /* of params, the FP8 linears' weights */
} LayerTime;

static double tp_time(const Cluster *cl, PlanGroup g, const PlanTpColls *k, double bytes)
{
    if (g.size <= 1) return 0;
    return k->ar * plan_comm_cost(cl, COLL_ALL_REDUCE, ALGO_AUTO, g, bytes).time +
           k->ag * plan_comm_cost(cl, COLL_ALL_GATHER, ALGO_AUTO, g, bytes).time +
           k->rs * plan_comm_cost(cl, COLL_REDUCE_SCATTER, ALGO_AUTO, g, bytes).time;
}

/* Seconds of one dispatch (or combine) of layer work w over the EP group
 * g: with the alltoall dispatcher comm.c's all-to-all of the busiest
 * rank's e R h bytes (bus factor (n-1)/n on the links the group spans:
 * what leaves the node on each GPU's rail, the rest on NVLink); with
 * deepep the hierarchical kernels' bytes per tier
 * (plan_moe_dispatch_bytes: a token crosses the network once per remote
 * node of its experts, then fans out over NVLink), both tiers at once. */
static double a2a_once(const Plan *p, const Layer *ly, PlanGroup g, const PlanLayerWork *w)
{
    const Cluster *cl = &p->cluster;
    if (p->software.moe_dispatcher != PLAN_MOE_DEEPEP || g.nodes <= 1)
        return plan_comm_cost(cl, COLL_ALL_TO_ALL, ALGO_AUTO, g, w->ep_bytes).time;
    PlanMoeTierBytes b = plan_moe_dispatch_bytes(g, PLAN_MOE_DEEPEP, w->ep_bytes, w->ep_token_bytes,
                                                 ly->experts, ly->top_k);
    return plan_moe_dispatch_time(cl, g, b);
}

/* Seconds of a mixture's all-to-alls in one pass over the EP group g: n
 * dispatches and combines (a2a_once), plus the exchange of the token
 * counts (count_bytes) when the pass dispatches first. planc's runtime
 * runs them synchronously inside the layer, as TP collectives; what of
 * them overlap_moe_a2a hides is the segment's (segment_cost). */
static double ep_time(const Plan *p, const Layer *ly, PlanGroup g, int n, const PlanLayerWork *w,
                      double count_bytes)
{
    if (g.size <= 1 || n <= 0) return 0;
    double t = n * a2a_once(p, ly, g, w);
    if (count_bytes > 0) t += plan_comm_cost(&p->cluster, COLL_ALL_TO_ALL, ALGO_AUTO, g, count_bytes).time;
    return t;
}

/* Seconds of a layer pass's TP collectives (tp s) that the compute
 * stream waits for, beside the pass's kernels (compute s). planc's program
 * runs them synchronously: all of it. With overlap_tp (Megatron's
 * --tp-comm-overlap: the all-gather / reduce-scatter split into chunks and
 * pipelined with the column- / row-parallel GEMM that consumes / produces
 * them, Wang et al. 2023 "Overlap communication with dependent
 * computation", TransformerEngine's userbuffers) the collective runs beside
 * the pass and only what outlasts it is exposed, plus the slowdown of the
 * kernels it covers while they share the GPU with it. */
static double tp_exposed(const Plan *p, PlanGroup tpg, double tp, double compute)
{
    if (!p->software.overlap_tp) return tp;
    /* the kernels covered by the collective run slower by the SMs (and
     * HBM) it takes: plan_overlap_compute, the same factor as beside the
     * DP collectives */
    double slow = plan_overlap_compute(&p->cluster, tpg) - 1;
    return fmax(0, tp - compute) + slow * fmin(tp, compute);
}

/* The fraction of a causal attention's s x s_k score tiles a fused
 * kernel computes: FlashAttention-2 (Dao 2023, Sec. 3.1.1) skips the
 * blocks above the diagonal, so of nb x nb blocks of PLAN_FLASH_BLOCK
 * queries x keys it runs nb (nb + 1) / 2. The FLOPs counted stay the full
 * s^2 (Megatron's count); the time is of the blocks run. A sliding window
 * (s_k < s) is already its band: 1. */
double plan_flash_causal_fraction(double s, double sk)
{
    if (sk < s || s <= 0) return 1;
    double nb = ceil(s / PLAN_FLASH_BLOCK);
    return (nb + 1) / (2 * nb);
}

/* ---- fused attention: measured rates ------------------------------------ */

/* TFLOP/s of the fused attention kernels on an H100 SXM5 at a locked
 * 1830 MHz (the clock its 989 TFLOPS dense peak is quoted at), batch x seq
 * = 16k tokens, hidden 2048: FlashAttention-3 (Shah et al. 2024) Fig. 5
 * (forward) and Fig. 6 (backward), which also time FlashAttention-2 and
 * cuDNN (TransformerEngine's fused attention on Hopper is cuDNN's); FLOPs
 * counted as 4 s^2 d heads forward (halved when causal), backward 2.5 x
 * the forward (kernel-rates.md). [kernel][head dim 64, 128][mask
 * non-causal, causal][seq 2k, 4k, 8k]; kernel ORDER PlanAttnKernel - 1. */
static const double HOPPER_ATTN_FWD[3][2][2][3] = {
    { { { 318, 321, 322 }, { 262, 284, 295 } }, { { 362, 368, 370 }, { 298, 319, 333 } } },   /* fa2 */
    { { { 460, 476, 496 }, { 371, 420, 460 } }, { { 625, 638, 646 }, { 521, 579, 602 } } },   /* fa3 */
    { { { 395, 408, 412 }, { 334, 363, 379 } }, { { 617, 609, 600 }, { 484, 518, 529 } } },   /* cudnn */
};
/* The backward, non-causal only (the papers time no causal backward):
 * [kernel][head dim 64, 128][seq 2k, 4k, 8k]. */
static const double HOPPER_ATTN_BWD[3][2][3] = {
    { { 264, 279, 287 }, { 291, 310, 318 } },   /* fa2 */
    { { 422, 453, 472 }, { 501, 542, 559 } },   /* fa3 */
    { { 395, 417, 432 }, { 465, 499, 518 } },   /* cudnn */
};
#define HOPPER_ATTN_PEAK 989.0   /* TFLOPS the figures above are fractions of */
/* FlashAttention-2 on an A100 (Dao 2023, Fig. 4), forward and backward
 * together, head dim 128, causal, seq 2k / 4k / 8k, of a 312 TFLOPS peak:
 * the only Ampere figures (taken for both passes, both masks and every
 * head dim). */
static const double AMPERE_FA2[3] = { 155, 182, 189 };
#define AMPERE_ATTN_PEAK 312.0

/* Linear interpolation of y[0..2] (at seq 2k, 4k, 8k) in log2 of the
 * keys, held at the ends. */
static double at_seq(const double y[3], double keys)
{
    double x = log2(fmax(keys, 1) / 2048.0);   /* 0, 1, 2 at the table's points */
    if (x <= 0) return y[0];
    if (x >= 2) return y[2];
    int i = x < 1 ? 0 : 1;
    return y[i] + (y[i + 1] - y[i]) * (x - i);
}

/* y64 and y128 interpolated in log2 of the head dim, held at the ends. */
static double at_head_dim(double y64, double y128, double d)
{
    double x = log2(fmax(d, 1) / 64.0);
    if (x <= 0) return y64;
    if (x >= 1) return y128;
    return y64 + (y128 - y64) * x;
}

double plan_attn_rate(const Device *d, int kernel, int pass, double head_dim, double keys, bool causal)
{
    if (d->attn_eff > 0) return d->attn_eff;   /* the device block's one rate */
    if (kernel <= PLAN_ATTN_MATH || kernel >= PLAN_N_ATTN_KERNELS) return 0;
    if (d->arch >= 90) {   /* Hopper's figures; Blackwell has none published: Hopper's fractions */
        int k = kernel - 1, c = causal;
        if (pass == 0)
            return at_head_dim(at_seq(HOPPER_ATTN_FWD[k][0][c], keys), at_seq(HOPPER_ATTN_FWD[k][1][c], keys),
                               head_dim) / HOPPER_ATTN_PEAK;
        double bwd = at_head_dim(at_seq(HOPPER_ATTN_BWD[k][0], keys), at_seq(HOPPER_ATTN_BWD[k][1], keys),
                                 head_dim);
        if (causal) {   /* the forward's causal-to-full ratio of the same kernel and shape */
            double fc = at_head_dim(at_seq(HOPPER_ATTN_FWD[k][0][1], keys), at_seq(HOPPER_ATTN_FWD[k][1][1], keys),
                                    head_dim);
            double fn = at_head_dim(at_seq(HOPPER_ATTN_FWD[k][0][0], keys), at_seq(HOPPER_ATTN_FWD[k][1][0], keys),
                                    head_dim);
            bwd *= fc / fn;
        }
        return bwd / HOPPER_ATTN_PEAK;
    }
    if (d->arch >= 80) return at_seq(AMPERE_FA2, keys) / AMPERE_ATTN_PEAK;   /* any fused kernel: FA2's */
    return 0;
}

/* ---- context parallelism: the attention's transfers over the CP group ---- */

/* The pair a ring step's send runs on: the CP group's neighbours, across
 * nodes (and pods) when the group spans them (the ring steps in lockstep:
 * its slowest hop sets the pace). */
static PlanGroup cp_ring_pair(PlanGroup g)
{
    if (g.nodes > 1) return (PlanGroup){ 2, 1, 2, g.pods > 1 ? 2 : 1 };
    return (PlanGroup){ 2, 2, 1, 1 };
}

/* Seconds of a ring of `steps` block transfers of `bytes` each beside
 * `compute` s of attention per block (the block in hand, while the next
 * one arrives: prt_par.h's ring), into *total and *exposed: a step waits
 * only for what its transfer outlasts its block's compute, plus the
 * slowdown of the compute it covers (slow = plan_overlap_compute - 1, the
 * SMs the transfer's channels take, as tp_exposed). */
static void cp_ring(const Cluster *cl, PlanGroup pair, double slow, int steps, double bytes, double compute,
                    double *total, double *exposed)
{
    if (steps <= 0 || bytes <= 0) return;
    double x = plan_comm_cost(cl, COLL_P2P, ALGO_AUTO, pair, bytes).time;
    *total += steps * x;
    *exposed += steps * (fmax(0, x - compute) + slow * fmin(x, compute));
}

/* The CP transfers of one attention layer (cp > 1), forward and backward,
 * beside core_f / core_b s of its attention core (the score and context
 * GEMMs and the softmax) on the group cpg of cut->cp ranks, tp apart:
 *  - ring (Megatron-Core's p2p, torchtitan's ring): cp - 1 KV blocks
 *    (w->cp_kv_bytes each) pass round the group forward, each overlapped
 *    with the attention of the block in hand (core_f / cp); backward K, V
 *    and the dK, dV accumulators (2 blocks) cp - 1 times beside core_b /
 *    cp, then the dK, dV home (one block, exposed);
 *  - all_to_all (DeepSpeed-Ulysses, Jacobs et al. 2023): q, k, v in and
 *    the output back forward, the output gradient in and dq, dk, dv back
 *    backward: 2 + 2 blocking all-to-alls of one rank's send buffer
 *    (bus factor (n-1)/n, comm.c);
 *  - all_gather: K, V of the whole sequence all-gathered forward, again
 *    backward and dK, dV reduce-scattered: blocking;
 *  - hierarchical (Megatron-Core's a2a+p2p): the all-to-alls over the
 *    group's ranks in one NVLink domain, the ring over the rest across
 *    nodes, on the same KV block bytes (cp_local x the tokens, 1 / cp_local
 *    of the heads), beside 1 / (cp / cp_local) of the core each step. */
static void cp_time(const Plan *p, PlanGroup cpg, const PlanCut *cut, const PlanLayerWork *w, double core_f,
                    double core_b, LayerTime *t)
{
    const Cluster *cl = &p->cluster;
    int cp = cut->cp, form = cut->cp_comm;
    if (cp <= 1 || w->cp_kv_bytes <= 0) return;
    double slow = plan_overlap_compute(cl, cpg) - 1;
    double ef = 0, eb = 0;   /* exposed */
    /* the all-to-all's degree: the whole group, hierarchical's tier in a
     * node (cut->cp_local, as the memory counts it), the ring's none */
    int a = form == PLAN_CP_ALL_TO_ALL ? cp : form == PLAN_CP_HIERARCHICAL ? cut->cp_local : 1;
    if (a < 1 || cp % a) a = 1;
    int r = cp / a;   /* ring degree */
    if (a > 1) {
        PlanGroup ag = form == PLAN_CP_ALL_TO_ALL ? cpg : (PlanGroup){ a, a, 1, 1 };
        double q = plan_comm_cost(cl, COLL_ALL_TO_ALL, ALGO_AUTO, ag, w->cp_qkv_bytes).time;
        double o = plan_comm_cost(cl, COLL_ALL_TO_ALL, ALGO_AUTO, ag, w->cp_out_bytes).time;
        ef += q + o; eb += q + o;
        t->cpt_f += q + o; t->cpt_b += q + o;
        t->cpb_f += w->cp_qkv_bytes + w->cp_out_bytes;
        t->cpb_b += w->cp_qkv_bytes + w->cp_out_bytes;
    }
    if (form == PLAN_CP_ALL_GATHER) {
        double full = w->cp_kv_bytes * cp;
        double g = plan_comm_cost(cl, COLL_ALL_GATHER, ALGO_AUTO, cpg, full).time;
        double rs = plan_comm_cost(cl, COLL_REDUCE_SCATTER, ALGO_AUTO, cpg, full).time;
        ef += g; eb += g + rs;
        t->cpt_f += g; t->cpt_b += g + rs;
        t->cpb_f += w->cp_kv_bytes * (cp - 1);   /* what leaves the rank: (n-1)/n of each */
        t->cpb_b += 2 * w->cp_kv_bytes * (cp - 1);
    } else if (r > 1) {
        PlanGroup pair = cp_ring_pair(form == PLAN_CP_HIERARCHICAL ? (PlanGroup){ r, 1, r, cpg.pods } : cpg);
        cp_ring(cl, pair, slow, r - 1, w->cp_kv_bytes, core_f / r, &t->cpt_f, &ef);
        cp_ring(cl, pair, slow, r - 1, 2 * w->cp_kv_bytes, core_b / r, &t->cpt_b, &eb);
        double home = plan_comm_cost(cl, COLL_P2P, ALGO_AUTO, pair, w->cp_kv_bytes).time;
        t->cpt_b += home; eb += home;
        t->cpb_f += w->cp_kv_bytes * (r - 1);
        t->cpb_b += w->cp_kv_bytes * (2.0 * (r - 1) + 1);
    }
    t->cp_f = ef;
    t->cp_b = eb;
}

/* The keys one call of the fused kernel sees, for its rate (plan_attn_rate
 * is measured by sequence length): the whole sequence's (keys) without CP
 * and for the gathering forms (all_gather: the local queries against every
 * key; all_to_all: whole sequences); the ring's kernel runs one block of
 * the local Tl tokens' keys a step (hierarchical's, cp_local x Tl). */
static double cp_kernel_keys(const PlanCut *cut, double keys, double Tl)
{
    if (cut->cp <= 1) return keys;
    if (cut->cp_comm == PLAN_CP_RING) return fmin(keys, Tl);
    if (cut->cp_comm == PLAN_CP_HIERARCHICAL) return fmin(keys, Tl * (cut->cp_local >= 1 ? cut->cp_local : 1));
    return keys;
}

/* Why: one place turns a layer's counted work into seconds, so every
 * consumer (fast path, lowering, report) agrees. */
static void layer_time(const Plan *p, const Layer *ly, const Layer *prev, const PlanCut *cut,
                       PlanGroup tpg, PlanGroup epg, PlanGroup cpg, int zero_dp, double peak, bool *ovf, LayerTime *t)
{
    const Device *d = &p->cluster.device;
    double e = plan_dtype_bytes(p->model.dtype);
    PlanLayerWork w;
    plan_layer_work(&p->model, ly, prev, cut, &w);
    memset(t, 0, sizeof *t);
    double gemm_f[PLAN_MAX_GEMMS] = { 0 };   /* each forward GEMM's seconds */
    double core_f = 0, core_b = 0;           /* of them the attention core's, forward and backward */
    bool rescored = false;
    double keys = ly->kind == LAYER_ATTENTION ? (double)plan_attention_keys(&p->model, ly) : 0;
    double hd = ly->kind == LAYER_ATTENTION ? (double)plan_head_dim(&p->model, ly) : 0;
    double causal = plan_flash_causal_fraction((double)p->model.seq, keys);
    int kernel = p->software.attention_kernel;
    /* a training step's compute-bound kernels run at the device's
     * sustained clock (Device.sustained, presets.c): the analytic GEMMs
     * and the fused attention at that fraction of the peak they reach in
     * short runs; the memory-bound parts are not slowed */
    double speak = peak * plan_sustained(d);
    double fp8_f = 0, fp8_b = 0, fp8_arf = 0, fp8_arb = 0;   /* FP8 casts and amax all-reduces (fp8.c) */
    for (int i = 0; i < w.n_gemm; i++) {
        const PlanGemm *g = &w.gemm[i];
        if (plan_fp8_gemm(p, ly, g)) {   /* a linear's three GEMMs at the FP8 rate, its casts */
            double f = plan_fp8_gemm_time(d, PLAN_GEMM_FWD, g->m, g->n, g->k, g->batch);
            t->fwd += f;
            t->bwd_in += plan_fp8_gemm_time(d, PLAN_GEMM_DX, g->m, g->n, g->k, g->batch);
            t->bwd_w += plan_fp8_gemm_time(d, PLAN_GEMM_DW, g->m, g->n, g->k, g->batch);
            gemm_f[i] = f;
            PlanFp8Casts c;
            double cf, cb, af, ab;
            plan_fp8_casts(p, g->m * g->batch, g->n, g->k, cut->tp, zero_dp, zero_dp > 1 ? 3 : 0, &c);
            plan_fp8_cast_time(p, &c, tpg, &cf, &cb, &af, &ab);
            fp8_f += cf; fp8_b += cb; fp8_arf += af; fp8_arb += ab;
            continue;
        }
        double f = plan_gemm_pass_time(d, speak, e, PLAN_GEMM_FWD, g->m, g->n, g->k, g->batch);
        double dx = plan_gemm_pass_time(d, speak, e, PLAN_GEMM_DX, g->m, g->n, g->k, g->batch);
        /* dB = A^T dC: accumulated into the gradient buffer (beta = 1)
         * except for the attention core's, a fresh product */
        double dw = g->core && !gemm_points_apply(d, e)
                        ? gemm_time(d, speak, e, g->k, g->n, g->m, g->batch, 0)
                        : plan_gemm_pass_time(d, speak, e, PLAN_GEMM_DW, g->m, g->n, g->k, g->batch);
        if (g->flash) {
            /* a fused attention runs the causal blocks only, at the rate
             * its kernel reaches on this device, pass and shape
             * (plan_attn_rate: measured; else the GEMM ceiling; measured
             * GEMM points where they apply), and its backward recomputes
             * the scores S = Q K^T once (FlashAttention-2 Algorithm 2:
             * five GEMMs backward, not four: 2.5 x the forward) */
            double fl = 2 * g->m * g->n * g->k * g->batch;
            if (!gemm_points_apply(d, e)) {   /* compute only: the scores stay on chip */
                double rk = cp_kernel_keys(cut, keys, plan_cut_tokens(&p->model, cut));
                double rf = plan_attn_rate(d, kernel, 0, hd, rk, causal < 1);
                double rb = plan_attn_rate(d, kernel, 1, hd, rk, causal < 1);
                f = fl / (speak * (rf > 0 ? rf : plan_gemm_eff(d)));
                dx = dw = fl / (speak * (rb > 0 ? rb : plan_gemm_eff(d)));
            }
            f *= causal; dx *= causal; dw *= causal;
            if (!rescored) { dx += gemm_points_apply(d, e) ? f : dw; rescored = true; }
        } else if (g->core && ly->softcap > 0 && !rescored) {
            /* planc's soft-capped math attention recomputes S_raw = scale
             * Q K^T in its backward (prt_attention_scores_bwd: the cap's
             * derivative needs it, P does not give it): the score GEMM,
             * the first core GEMM, once more */
            dx += f;
            rescored = true;
        }
        t->fwd += f;
        t->bwd_in += dx;
        gemm_f[i] = f;
        if (g->core) t->bwd_in += dw;
        else t->bwd_w += dw;
        if (g->core) { core_f += f; core_b += dx + dw; }
    }
    t->fwd += stream_time(d, w.ew_fwd, w.ew_kernels) + fp8_f;
    t->bwd_in += stream_time(d, w.ew_bwd, w.ew_kernels_bwd) + fp8_b;
    t->fp8_cast = fp8_f + fp8_b;
    /* the kernels that compute more than they move: measured seconds per
     * element (Device.act_*, softmax_*, planc calibrate; 0 analytically) */
    double sm = 0;
    if (ly->kind == LAYER_MLP || ly->kind == LAYER_MOE) {
        double tokens = plan_cut_tokens(&p->model, cut), rows = (double)cut->micro_batch * tokens;
        double n = rows * (double)ly->hidden / cut->tp;
        if (ly->kind == LAYER_MOE) {   /* the expert rows (f / etp wide) and the shared experts' */
            n = plan_moe_rows(&p->model, ly, cut->micro_batch) * tokens / (double)p->model.seq / cut->tp *
                    (double)ly->hidden + rows * (double)plan_shared_hidden(ly) / cut->tp * (double)ly->shared;
        }
        t->fwd += n * d->act_fwd;
        t->bwd_in += n * d->act_bwd;
    } else if (ly->kind == LAYER_ATTENTION) {
        double s = (double)p->model.seq;   /* the local queries against every key */
        double n = (double)cut->micro_batch * (double)ly->heads / cut->tp * plan_cut_tokens(&p->model, cut) * s;
        /* a fused attention's softmax is inside its kernel (above) */
        sm = cut->flash ? 0 : n * d->softmax_fwd;
        t->fwd += sm;
        t->bwd_in += cut->flash ? 0 : n * d->softmax_bwd;
        core_f += sm;
        core_b += cut->flash ? 0 : n * d->softmax_bwd;
    }
    t->tp_bytes = w.tp_bytes;
    t->tp_f = tp_time(&p->cluster, tpg, &w.tp_fwd, w.tp_bytes);
    t->tp_b = tp_time(&p->cluster, tpg, &w.tp_bwd, w.tp_bytes) + fp8_arb;
    t->tp_f += fp8_arf;
    if (w.tp_stat_bytes > 0 && tpg.size > 1) {   /* the q/k norm of the projection's row sums */
        double ar = plan_comm_cost(&p->cluster, COLL_ALL_REDUCE, ALGO_AUTO, tpg, w.tp_stat_bytes).time;
        t->tp_f += ar;
        t->tp_b += ar;
    }
    if (w.etp_bytes > 0) {   /* expert TP below tp: the experts' rows over the expert-TP group */
        PlanGroup etg = plan_etp_group(&p->cluster, cut->etp);
        double g = plan_comm_cost(&p->cluster, COLL_ALL_GATHER, ALGO_AUTO, etg, w.etp_bytes).time +
                   plan_comm_cost(&p->cluster, COLL_REDUCE_SCATTER, ALGO_AUTO, etg, w.etp_bytes).time;
        t->tp_f += g;
        t->tp_b += g;
    }
    t->ep_f = ep_time(p, ly, epg, w.ep_fwd, &w, w.ep_count_bytes);
    t->ep_b = ep_time(p, ly, epg, w.ep_bwd, &w, 0);
    t->a2a_bytes = w.a2a_bytes;
    t->cp_buf_bytes = w.cp_buf_bytes;
    cp_time(p, cpg, cut, &w, core_f, core_b, t);
    if (epg.size > 1) {
        t->epb_f = w.ep_fwd * w.ep_bytes + w.ep_count_bytes;
        t->epb_b = w.ep_bwd * w.ep_bytes;
    }
    t->flops_fwd = w.flops_fwd;
    /* what the backward re-runs (model.c's redo: the cut's modules, op
     * list or whole layer): the whole forward, or the GEMM fractions at
     * their forward seconds, the elementwise kernels, the activation's and
     * softmax's measured per-element cost and the TP collectives again */
    const PlanRedo *x = &w.redo;
    /* the recomputed attention core passes its CP transfers again */
    if (x->whole || x->softmax) {
        t->cp_rec = t->cp_f;
        t->cpt_b += t->cpt_f;
        t->cpb_b += t->cpb_f;
    }
    if (x->whole) {
        t->rec = t->fwd;
        t->tp_rec = t->tp_f;
        t->ep_rec = t->ep_f;   /* the recomputed forward dispatches again */
        t->epb_b += t->epb_f;
    } else if (w.recomputed) {
        double g = 0;
        for (int i = 0; i < w.n_gemm; i++) g += x->gemm[i] * gemm_f[i];
        t->rec = g + stream_time(d, x->ew, x->kernels) + (x->softmax ? sm : 0) +
                 x->act_rows * (double)ly->hidden / cut->tp * d->act_fwd;
        t->tp_rec = tp_time(&p->cluster, tpg, &x->tp, w.tp_bytes);
    }
    t->flops_rec = x->flops;
    int etp = cut->etp >= 1 ? cut->etp : cut->tp;
    t->params = plan_layer_params_ep(&p->model, ly, cut->tp, etp, cut->ep, ovf);
    t->expert_params = plan_layer_expert_params(&p->model, ly, etp, ovf) / (uint64_t)(cut->ep > 1 ? cut->ep : 1);
    t->params_full = plan_layer_params_real(&p->model, ly, ovf);
    if (plan_fp8_layer(p, ly))
        t->fp8_params = (double)t->params - (double)plan_layer_norm_params(&p->model, ly) -
                        (double)plan_layer_latent_norm_params(&p->model, ly);
    t->act_kept = w.act_kept;
    t->act_split = w.act_split;
    t->act_rebuild = (w.recomputed ? w.act_none - w.act_kept : 0) + w.act_scratch;
    t->act_input = cut->recompute == RECOMPUTE_FULL && w.recomputed ? w.act_kept : 0;
    /* grad_accum_fusion false: the layer's gradients added apart, one
     * launch (the per-tensor launches beyond one a layer are not counted:
     * microseconds) */
    if (t->params > 0) t->bwd_w += plan_grad_accum_time(p, (double)t->params, 1);
    /* what of the TP collectives the compute stream waits for (overlap_tp) */
    t->tp_f = tp_exposed(p, tpg, t->tp_f, t->fwd);
    t->tp_b = tp_exposed(p, tpg, t->tp_b, t->bwd_in + t->bwd_w);
    t->tp_rec = tp_exposed(p, tpg, t->tp_rec, t->rec);
}

/* ---- the shape index --------------------------------------------------- */

/* Why: identical blocks must cost O(1) after the first, per layout (issue
 * 13). A layer's cost depends on its shape and on whether an attention
 * layer precedes it (plan_layer_work), never on its index, so layers are
 * put in classes by (shape, after attention) and the model's segments
 * (the layers before the first block, then each block with what follows
 * it up to the next) in classes by their layers' classes, once per model;
 * a layout then costs each class once and each chunk as runs of
 * consecutive segments. Classes are found by comparing with the segment
 * or layer before (a `repeat` block) and then at most SHAPE_SCAN others:
 * a model of many distinct shapes gets more classes, never a slow index. */
#define SHAPE_SCAN 64

/* A layer's shape: every field but where it was written (bytes, padding
 * too, so a field added to Layer is part of it). */
static Layer shape_of(const Layer *l)
{
    Layer k;
    memcpy(&k, l, sizeof k);
    k.line = k.col = 0;
    return k;
}

static bool after_attention(const Model *m, int i)
{
    return i > 0 && m->layers[i - 1].kind == LAYER_ATTENTION;
}

static bool same_layer_class(const Model *m, int i, int j)
{
    if (after_attention(m, i) != after_attention(m, j)) return false;
    Layer a = shape_of(&m->layers[i]), b = shape_of(&m->layers[j]);
    return !memcmp(&a, &b, sizeof a);
}

/* Layers [first, end) of segment g: 0 is the layers before block 0, g > 0
 * block g - 1 up to the next block (the last block: to the model's end). */
static void segment(const Model *m, const int *block_first, int g, int *first, int *end)
{
    int B = m->n_blocks;
    *first = g ? block_first[g - 1] : 0;
    *end = g < B ? block_first[g] : m->n_layers;
}

static bool same_segment_class(const Model *m, const int *bf, const int *lc, int g, int h)
{
    int f1, e1, f2, e2;
    segment(m, bf, g, &f1, &e1);
    segment(m, bf, h, &f2, &e2);
    if (e1 - f1 != e2 - f2) return false;
    for (int i = 0; i < e1 - f1; i++)
        if (lc[f1 + i] != lc[f2 + i]) return false;
    return true;
}

/* First match of x among the classes [0, n) by `same` on their first
 * members, looking at `hint` first and then at most SHAPE_SCAN others; -1. */
static int find_class(int n, int hint, const int *rep, int x, bool (*same)(const void *, int, int),
                      const void *ctx)
{
    if (hint >= 0 && same(ctx, x, rep[hint])) return hint;
    for (int j = n - 1; j >= 0 && j >= n - SHAPE_SCAN; j--)
        if (j != hint && same(ctx, x, rep[j])) return j;
    return -1;
}

typedef struct { const Model *m; const int *bf, *lc; } SegCtx;

static bool same_layer_cb(const void *ctx, int i, int j) { return same_layer_class(ctx, i, j); }

static bool same_segment_cb(const void *ctx, int g, int h)
{
    const SegCtx *c = ctx;
    return same_segment_class(c->m, c->bf, c->lc, g, h);
}

bool plan_shapes_build(const Model *m, PlanShapes *out)
{
    memset(out, 0, sizeof *out);
    int L = m->n_layers, B = m->n_blocks, G = B + 1;
    out->n_layers = L;
    out->n_blocks = B;
    out->layer_cls = malloc(sizeof(int) * (size_t)(L ? L : 1));
    out->cls_rep = malloc(sizeof(int) * (size_t)(L ? L : 1));
    out->block_first = malloc(sizeof(int) * (size_t)(B ? B : 1));
    out->seg_cls = malloc(sizeof(int) * (size_t)G);
    out->seg_rep = malloc(sizeof(int) * (size_t)G);
    out->run = malloc(sizeof *out->run * (size_t)G);
    if (!out->layer_cls || !out->cls_rep || !out->block_first || !out->seg_cls || !out->seg_rep || !out->run) {
        plan_shapes_free(out);
        return false;
    }
    int b = 0;
    for (int i = 0; i < L; i++) {
        if (m->layers[i].kind == LAYER_ATTENTION && b < B) out->block_first[b++] = i;
        out->tied_heads += m->layers[i].kind == LAYER_LM_HEAD && m->layers[i].tied;
        int hint = i >= 2 ? out->layer_cls[i - 2] : -1;   /* the same sublayer, one block back */
        int c = find_class(out->n_cls, hint, out->cls_rep, i, same_layer_cb, m);
        if (c < 0) { c = out->n_cls++; out->cls_rep[c] = i; }
        out->layer_cls[i] = c;
    }
    if (b != B) { plan_shapes_free(out); return false; }
    SegCtx ctx = { m, out->block_first, out->layer_cls };
    for (int g = 0; g < G; g++) {
        int c = find_class(out->n_seg_cls, g ? out->seg_cls[g - 1] : -1, out->seg_rep, g, same_segment_cb, &ctx);
        if (c < 0) { c = out->n_seg_cls++; out->seg_rep[c] = g; }
        out->seg_cls[g] = c;
        if (out->n_run && out->run[out->n_run - 1].cls == c) out->run[out->n_run - 1].end = g + 1;
        else out->run[out->n_run++] = (PlanShapeRun){ g, g + 1, c };
    }
    return true;
}

void plan_shapes_free(PlanShapes *s)
{
    free(s->layer_cls); free(s->cls_rep); free(s->block_first); free(s->seg_cls); free(s->seg_rep);
    free(s->run);
    memset(s, 0, sizeof *s);
}

/* What a chunk adds up of one segment, for one micro-batch on one GPU. */
typedef struct {
    double   fwd, bwd, bwd_weight, fwd_tp, bwd_tp, recompute, recompute_coll, flops_fwd, flops_recompute;
    double   act_kept, act_layer_max, act_split, fwd_ep, bwd_ep, fwd_ep_bytes, bwd_ep_bytes, a2a_bytes;
    double   act_input, rebuild, scratch;   /* full recomputation's kept input; the block's rebuild
                                               (act_layer_max less the scratch); the scratch */
    double   fwd_ep_hidden, bwd_ep_hidden;   /* overlap_moe_a2a: of fwd_ep / bwd_ep, hidden when paired */
    double   fwd_cp, bwd_cp, fwd_cp_total, bwd_cp_total, fwd_cp_bytes, bwd_cp_bytes, cp_buf_bytes;
    uint64_t params, params_full, layer_params_max, norm_params, expert_params;
    uint64_t qk_norm_params;   /* plan_layer_tp_partial_params: partial over TP under any TP */
    int      layers, moe_layers;
    double   tensors;          /* parameter tensors (plan_layer_tensors) */
    bool     embedding, head;  /* holds the embedding / the head */
    double   fp8_cast, fp8_params;   /* FP8 casts (s), FP8 linears' weights (LayerTime's) */
} SegCost;

double plan_a2a_hidden(double a, double cover, double slow)
{
    double exposed = fmax(0, a - cover) + slow * fmin(a, cover);
    return a > exposed ? a - exposed : 0;
}

/* overlap_moe_a2a (Megatron-Core's combined 1F1B,
 * megatron/core/pipeline_parallel/combined_1f1b.py, core_r0.14: the
 * forward of one micro-batch and the backward of another run as one
 * step, layer by layer, each one's dispatch and combine on the
 * communication stream beside the other's attention and expert compute;
 * the weight gradients delayed, --delay-wgrad-compute, so that the
 * backward's dispatch has compute to hide behind). Per transformer block
 * (a segment): the forward's all-to-alls behind the paired backward's
 * compute of the same block, the backward's behind the forward's. Only
 * steps the schedule pairs take it (plan_schedule_step: the steady
 * state); warm-up and cool-down steps keep them exposed. */
/* The slowdown of compute beside a mixture's all-to-alls (>= 1): NCCL's
 * channels' SMs for the alltoall dispatcher (plan_overlap_compute, or the
 * link's measured figure); DeepEP's kernels take PLAN_DEEPEP_SMS SMs of
 * the device's instead (a measured figure, where the link has one, still
 * wins). */
static double moe_comm_slowdown(const Plan *p, PlanGroup epg)
{
    const Cluster *cl = &p->cluster;
    const Link *l = epg.nodes > 1 ? &cl->inter : &cl->intra;
    int sms = cl->device.sms;
    if (p->software.moe_dispatcher != PLAN_MOE_DEEPEP || l->overlap_compute > 0 || sms <= PLAN_DEEPEP_SMS)
        return plan_overlap_compute(cl, epg);
    return (double)sms / (double)(sms - PLAN_DEEPEP_SMS);
}

static void moe_a2a_hidden(const Plan *p, PlanGroup epg, SegCost *sc)
{
    sc->fwd_ep_hidden = sc->bwd_ep_hidden = 0;
    if (!p->software.overlap_moe_a2a || epg.size <= 1 || (sc->fwd_ep <= 0 && sc->bwd_ep <= 0)) return;
    double slow = moe_comm_slowdown(p, epg) - 1;
    double fwd_compute = sc->fwd - sc->fwd_ep, bwd_compute = sc->bwd - sc->bwd_ep;
    sc->fwd_ep_hidden = plan_a2a_hidden(sc->fwd_ep, bwd_compute, slow);
    sc->bwd_ep_hidden = plan_a2a_hidden(sc->bwd_ep, fwd_compute, slow);
}

/* Why: one rule sums a segment's layers, whether their costs come from
 * the class memo or layer by layer; the rebuild of recomputation is of a
 * whole block (attention + MLP) at once, and a segment starts a block. */
static void segment_cost(const Plan *p, PlanGroup epg, int first, int end, const LayerTime *const *t,
                         double scratch, SegCost *sc)
{
    const Model *mo = &p->model;
    memset(sc, 0, sizeof *sc);
    /* the backward scratch all layers share (plan_bwd_scratch_bytes) is
     * alive beside whichever layer's rebuild is the largest */
    double block_rebuild = 0;
    sc->act_layer_max = sc->scratch = scratch;
    for (int i = first; i < end; i++) {
        const Layer *ly = &mo->layers[i];
        const LayerTime *x = t[i - first];
        sc->embedding |= ly->kind == LAYER_EMBEDDING;
        sc->head |= ly->kind == LAYER_LM_HEAD;
        sc->fwd += x->fwd + x->tp_f + x->ep_f + x->cp_f;
        sc->bwd += x->bwd_in + x->bwd_w + x->rec + x->tp_b + x->tp_rec + x->ep_b + x->ep_rec + x->cp_b + x->cp_rec;
        sc->fwd_cp += x->cp_f;
        sc->bwd_cp += x->cp_b + x->cp_rec;
        sc->fwd_cp_total += x->cpt_f;
        sc->bwd_cp_total += x->cpt_b;
        sc->fwd_cp_bytes += x->cpb_f;
        sc->bwd_cp_bytes += x->cpb_b;
        sc->cp_buf_bytes = fmax(sc->cp_buf_bytes, x->cp_buf_bytes);
        sc->fwd_ep += x->ep_f;
        sc->bwd_ep += x->ep_b + x->ep_rec;
        sc->fwd_ep_bytes += x->epb_f;
        sc->bwd_ep_bytes += x->epb_b;
        sc->expert_params += x->expert_params;
        sc->moe_layers += ly->kind == LAYER_MOE;
        sc->a2a_bytes = fmax(sc->a2a_bytes, x->a2a_bytes);
        sc->bwd_weight += x->bwd_w;
        sc->fwd_tp += x->tp_f;
        sc->bwd_tp += x->tp_b + x->tp_rec;
        sc->recompute += x->rec + x->tp_rec + x->ep_rec + x->cp_rec;
        sc->recompute_coll += x->tp_rec + x->ep_rec + x->cp_rec;
        sc->flops_fwd += x->flops_fwd;
        sc->flops_recompute += x->flops_rec;
        sc->params += x->params;
        sc->params_full += x->params_full;
        sc->norm_params += plan_layer_norm_params(mo, ly);
        sc->qk_norm_params += plan_layer_tp_partial_params(mo, ly);
        sc->tensors += plan_layer_tensors(mo, ly);
        sc->act_kept += x->act_kept;
        sc->act_split += x->act_split;
        block_rebuild = ly->kind == LAYER_ATTENTION ? x->act_rebuild : block_rebuild + x->act_rebuild;
        sc->act_layer_max = fmax(sc->act_layer_max, scratch + block_rebuild);
        sc->act_input += x->act_input;
        sc->rebuild = block_rebuild;
        if (x->params > sc->layer_params_max) sc->layer_params_max = x->params;
        sc->layers++;
        sc->fp8_cast += x->fp8_cast;
        sc->fp8_params += x->fp8_params;
    }
    moe_a2a_hidden(p, epg, sc);
}

/* A run of n consecutive segments of cost sc added to chunk c: each sum
 * grows by n times the segment's (exact for the integers); norm_params[0]
 * the chunk's norm parameters, [1] its q/k norm gains. */
static void chunk_add(PlanChunkCost *c, const SegCost *sc, int n, uint64_t *norm_params, uint64_t *total,
                      bool *ovf)
{
    double d = n;
    c->fwd += d * sc->fwd;
    c->bwd += d * sc->bwd;
    c->bwd_weight += d * sc->bwd_weight;
    c->fwd_tp += d * sc->fwd_tp;
    c->bwd_tp += d * sc->bwd_tp;
    c->fwd_ep += d * sc->fwd_ep;
    c->bwd_ep += d * sc->bwd_ep;
    c->fwd_ep_bytes += d * sc->fwd_ep_bytes;
    c->bwd_ep_bytes += d * sc->bwd_ep_bytes;
    c->fwd_ep_hidden += d * sc->fwd_ep_hidden;
    c->bwd_ep_hidden += d * sc->bwd_ep_hidden;
    c->expert_params += (uint64_t)n * sc->expert_params;
    c->moe_layers += n * sc->moe_layers;
    c->a2a_bytes = fmax(c->a2a_bytes, sc->a2a_bytes);
    c->fwd_cp += d * sc->fwd_cp;
    c->bwd_cp += d * sc->bwd_cp;
    c->fwd_cp_total += d * sc->fwd_cp_total;
    c->bwd_cp_total += d * sc->bwd_cp_total;
    c->fwd_cp_bytes += d * sc->fwd_cp_bytes;
    c->bwd_cp_bytes += d * sc->bwd_cp_bytes;
    c->cp_buf_bytes = fmax(c->cp_buf_bytes, sc->cp_buf_bytes);
    c->recompute += d * sc->recompute;
    c->recompute_coll += d * sc->recompute_coll;
    c->flops_fwd += d * sc->flops_fwd;
    c->flops_recompute += d * sc->flops_recompute;
    c->act_kept += d * sc->act_kept;
    c->act_split += d * sc->act_split;
    c->act_layer_max = fmax(c->act_layer_max, sc->act_layer_max);
    if (sc->layer_params_max > c->layer_params_max) c->layer_params_max = sc->layer_params_max;
    c->params += (uint64_t)n * sc->params;
    norm_params[0] += (uint64_t)n * sc->norm_params;      /* [0] the pre-norms, [1] the q/k norms */
    norm_params[1] += (uint64_t)n * sc->qk_norm_params;
    c->layers += n * sc->layers;
    c->tensors += d * sc->tensors;
    c->fp8_cast += d * sc->fp8_cast;
    c->fp8_params += d * sc->fp8_params;
    uint64_t full;
    if (__builtin_mul_overflow((uint64_t)n, sc->params_full, &full) ||
        __builtin_add_overflow(*total, full, total))
        *ovf = true;
}

/* ---- the cost table --------------------------------------------------- */

/* Time of a collective split into `n` equal buckets (each pays latency). */
static double bucketed(const Cluster *cl, PlanCollective c, PlanGroup g, double bytes, int n)
{
    if (n < 1) n = 1;
    return n * plan_comm_cost(cl, c, ALGO_AUTO, g, bytes / n).time;
}

/* The link a group's traffic crosses: between nodes when it spans them. */
static const Link *group_link(const Cluster *cl, PlanGroup g)
{
    return g.nodes > 1 ? &cl->inter : &cl->intra;
}

/* The measured slowdown of a collective that runs beside compute (the
 * reduction draining the backward, the ZeRO-3 gather), 1 when none was
 * measured (Link.overlap_comm, planc calibrate). */
static double beside_compute(const Cluster *cl, PlanGroup g)
{
    double f = group_link(cl, g)->overlap_comm;
    return f > 1 ? f : 1;
}

/* One group's share of a chunk's DP collectives over group g, in `layers`
 * buckets: `red` bytes of gradients reduced, `wbytes` of weights gathered
 * (ZeRO-3) or synced (ZeRO-1/2), added to c's reduce, gather and sync. */
static void dp_group_times(const Cluster *cl, const Layout *l, PlanGroup g, double wbytes, double red,
                           int layers, PlanChunkCost *c)
{
    if (g.size <= 1 || red <= 0) return;
    double slow = beside_compute(cl, g);
    c->reduce += slow * bucketed(cl, l->zero == 0 ? COLL_ALL_REDUCE : COLL_REDUCE_SCATTER, g, red, layers);
    if (l->zero >= 3) c->gather += slow * bucketed(cl, COLL_ALL_GATHER, g, wbytes, layers);
    if (l->zero == 1 || l->zero == 2) c->sync += plan_comm_cost(cl, COLL_ALL_GATHER, ALGO_AUTO, g, wbytes).time;
}

/* The expert-DP group of a layout (issue 17's agreed semantics, etp of
 * issue 25): the tp dp / (etp ep) ranks with the same EP rank, etp x ep
 * apart in the rank order. */
static PlanGroup expert_dp_group(const Cluster *cl, const Layout *l)
{
    return plan_expert_dp_group(cl, plan_etp(l), plan_ep(l), plan_expert_dp(l));
}

/* A chunk's DP collectives from its gradient bytes and layers (one
 * bucket per layer): the reduction (all-reduce under ZeRO 0, else
 * reduce-scatter), ZeRO-3's parameter all-gather, ZeRO-1/2's all-gather
 * of the updated shards. Dense gradients are reduced (ZeRO: sharded,
 * gathered) over all of DP;
 * with ep > 1 the local experts' over their expert-DP group, in one
 * bucket per mixture. At ep 1 both groups are DP: one collective.
 * gbytes: bytes of one gradient element (plan_grad_bytes). */
static void dp_times(const Cluster *cl, const Layout *l, PlanGroup dpg, int gbytes, PlanChunkCost *c)
{
    c->reduce = c->gather = c->sync = 0;
    c->red_bytes = gbytes * (double)c->params;
    if (plan_dp_cp(l) <= 1) return;
    /* the reductions move the gradients in their dtype (plan_grad_bytes:
     * runtime/par/model.c reduces them as it holds them); the gathers move
     * the compute dtype */
    if ((plan_ep(l) <= 1 && plan_etp(l) == l->tp) || c->expert_params == 0) {
        dp_group_times(cl, l, dpg, c->weight_bytes, c->red_bytes, c->layers, c);
        return;
    }
    double f = (double)c->expert_params / (double)c->params;
    dp_group_times(cl, l, dpg, c->weight_bytes * (1 - f), c->red_bytes * (1 - f), c->layers, c);
    dp_group_times(cl, l, expert_dp_group(cl, l), c->weight_bytes * f, c->red_bytes * f, c->moe_layers, c);
}

void plan_chunk_dp_times(const Plan *p, const Layout *l, PlanChunkCost *c)
{
    c->weight_bytes = plan_fp8_gather_bytes(p, (double)c->params, c->fp8_params);
    dp_times(&p->cluster, l, plan_layout_group(&p->cluster, plan_dp_cp(l), l->tp, l->pp, GROUP_DP), plan_grad_bytes(p), c);
}

uint64_t plan_zero_shard(uint64_t params, uint64_t expert_params, int dp, int edp)
{
    uint64_t d = dp > 0 ? (uint64_t)dp : 1, x = edp > 1 ? (uint64_t)edp : 1, dense = params - expert_params;
    return (dense + d - 1) / d + (expert_params + x - 1) / x;
}

/* Why: the collectives the runtime runs once per step, after the DP
 * reductions and before the optimizer step, are costed here so the
 * Program shows them as ops (lower.c's tail) instead of hiding them in
 * the optimizer's time. Each is an all-reduce, seconds by comm.c's
 * alpha-beta model with the all-reduce bus factor 2(n-1)/n over the n
 * members of its group, on the link the group spans; sizes in bytes:
 *  - sequence parallelism leaves the norm weights' gradients partial over
 *    TP (each rank saw its rows): an all-reduce over TP of the stage's
 *    norm gains (and LayerNorm biases), e bytes each (Korthikanti et al.
 *    2022 Sec. 4.2.2; Megatron's allreduce_layernorm_grads); the q/k norm
 *    gains (`qk_norm`) are partial under any TP (each rank normalises its
 *    own heads), as MLA's replicated down projections and latent norms
 *    (each rank back-propagates its own heads' share of the latents):
 *    the same all-reduce sums them, with or without SP;
 *  - a tied head on another stage than the embedding keeps a copy of the
 *    word table: the first and the last stage all-reduce its gradient,
 *    V h / t elements per TP rank (Shoeybi et al. 2019; Narayanan et al.
 *    2021 Sec. 3, the embedding group; Megatron's _allreduce_embedding_grads);
 *  - the squared gradient norm, one fp32 (4 bytes), over all ranks (for
 *    clipping, logging and the NaN stop), every stage. */
static void step_collectives(const Plan *p, const Layout *l, int emb_chunk, int head_chunk,
                             const uint64_t *norm_params, bool tied, PlanCosts *out)
{
    const Model *mo = &p->model;
    const Cluster *cl = &p->cluster;
    double e = plan_dtype_bytes(mo->dtype);
    if (l->tp > 1) {
        PlanGroup tpg = plan_layout_group(cl, plan_dp_cp(l), l->tp, l->pp, GROUP_TP);
        bool sp = l->sequence_parallel == 1;
        for (int k = 0; k < out->n_chunks; k++)   /* norm_params[2k], [2k+1]: chunk k's, exact */
            out->sp_norm_bytes[k % l->pp] += e * (double)((sp ? norm_params[2 * k] : 0) + norm_params[2 * k + 1]);
        for (int s = 0; s < l->pp; s++)
            if (out->sp_norm_bytes[s] > 0)
                out->sp_norm[s] = plan_comm_cost(cl, COLL_ALL_REDUCE, ALGO_AUTO, tpg,
                                                 out->sp_norm_bytes[s]).time;
    }
    if (tied && head_chunk >= 0 && emb_chunk >= 0 && head_chunk % l->pp != emb_chunk % l->pp) {
        PlanGroup eg = plan_layout_group(cl, plan_dp_cp(l), l->tp, l->pp, GROUP_EMBED);
        double bytes = e * ceil((double)plan_vocab_padded(mo, l->tp) * (double)mo->dim / l->tp);
        double t = plan_comm_cost(cl, COLL_ALL_REDUCE, ALGO_AUTO, eg, bytes).time;
        int ends[2] = { emb_chunk % l->pp, head_chunk % l->pp };
        for (int j = 0; j < 2; j++) { out->embed[ends[j]] = t; out->embed_bytes[ends[j]] = bytes; }
    }
    PlanGroup all = plan_layout_group(cl, plan_dp_cp(l), l->tp, l->pp, GROUP_ALL);
    out->norm_bytes = 4;
    out->norm = plan_comm_cost(cl, COLL_ALL_REDUCE, ALGO_AUTO, all, out->norm_bytes).time;
    /* expert_bias: the step's expert counts (E fp32 a mixture) all-reduced
       over the same group at the same point, after the last backward; timed
       with the norm's all-reduce as a second one */
    double counts = (double)plan_expert_bias_bytes(mo) / 2;
    if (counts > 0) {
        out->norm_bytes += counts;
        out->norm += plan_comm_cost(cl, COLL_ALL_REDUCE, ALGO_AUTO, all, counts).time;
    }
}

/* A run of consecutive segments [first, end) of one cost. */
typedef struct { int first, end; const SegCost *c; } CostRun;

/* Append segments [first, end) of cost c, merged into the last run when
 * its cost is the same to the bit: the runs are then the same whether the
 * costs came from the memo or layer by layer. */
static void run_push(CostRun *r, int *n, int first, int end, const SegCost *c)
{
    if (*n && r[*n - 1].end == first && !memcmp(r[*n - 1].c, c, sizeof *c)) r[*n - 1].end = end;
    else r[(*n)++] = (CostRun){ first, end, c };
}

/* Why: the costs of the segments, as runs: with the memo each layer class
 * and segment class is costed once (O(classes + runs)); without it
 * (plan_costs_reference) every layer and segment is costed on its own.
 * *keep owns what the runs point into. */
static CostRun *segment_runs(const Plan *p, const PlanShapes *sh, bool memo, const PlanCut *cut,
                             PlanGroup tpg, PlanGroup epg, PlanGroup cpg, int zero_dp, double peak, bool *ovf, int *n_runs,
                             void **keep)
{
    const Model *mo = &p->model;
    int L = mo->n_layers, G = mo->n_blocks + 1;
    int nc = memo ? sh->n_cls : L, ns = memo ? sh->n_seg_cls : G, nr = memo ? sh->n_run : G;
    LayerTime *lt = malloc(sizeof *lt * (size_t)(nc ? nc : 1));
    SegCost *sc = malloc(sizeof *sc * (size_t)ns);
    const LayerTime **tp = malloc(sizeof *tp * (size_t)(L ? L : 1));
    CostRun *run = malloc(sizeof *run * (size_t)nr);
    *keep = NULL;
    *n_runs = 0;
    if (!lt || !sc || !tp || !run) { free(lt); free(sc); free(tp); free(run); return NULL; }
    PlanWidest wide = { 1, 1, 1 };   /* over one layer of each class: plan_widest's */
    for (int c = 0; c < nc; c++) {
        int i = memo ? sh->cls_rep[c] : c;
        layer_time(p, &mo->layers[i], i ? &mo->layers[i - 1] : NULL, cut, tpg, epg, cpg, zero_dp, peak, ovf, &lt[c]);
        plan_widest_add(mo, &mo->layers[i], cut->tp, &wide);
    }
    double scratch = plan_bwd_scratch_bytes(mo, cut, &wide);
    for (int c = 0; c < ns; c++) {
        int first, end;
        segment(mo, sh->block_first, memo ? sh->seg_rep[c] : c, &first, &end);
        for (int i = first; i < end; i++) tp[i - first] = &lt[memo ? sh->layer_cls[i] : i];
        segment_cost(p, epg, first, end, tp, scratch, &sc[c]);
    }
    for (int r = 0; r < nr; r++) {
        if (memo) run_push(run, n_runs, sh->run[r].first, sh->run[r].end, &sc[sh->run[r].cls]);
        else run_push(run, n_runs, r, r + 1, &sc[r]);
    }
    free(lt);
    free(tp);
    *keep = sc;
    return run;
}

/* Seconds of one pipeline send of `bytes` (the activation as each TP rank
 * holds it) between the stages of `pair`. Under SP each rank's rows are its
 * own and go whole; without it every TP rank holds the same tensor, so each
 * sends 1/tp of it over its own link and the receiver all-gathers the parts
 * over TP (the runtime's prt_pipe tp_split; Megatron-LM's scatter/gather,
 * Narayanan et al. 2021 Sec. 4.1): the gather is counted in the send, as
 * the receiving stage's compute cannot start before it. */
static double pp_send_time(const Cluster *cl, const Model *m, const Layout *l, PlanGroup pair,
                           PlanGroup tpg, double bytes)
{
    /* the program splits only b s h elements that divide evenly (its
     * PIPE_TP_SPLIT); else every rank sends the whole tensor */
    int64_t t = l->tp > 1 ? l->tp : 1;   /* b s h mod tp, factor by factor (no overflow) */
    int64_t rem = l->micro_batch % t * (m->seq / plan_cp(l) % t) % t * (m->dim % t) % t;   /* local tokens */
    if (l->tp <= 1 || l->sequence_parallel == 1 || rem)
        return plan_comm_cost(cl, COLL_P2P, ALGO_AUTO, pair, bytes).time;
    double part = bytes / l->tp;
    return plan_comm_cost(cl, COLL_P2P, ALGO_AUTO, pair, part).time +
           plan_comm_cost(cl, COLL_ALL_GATHER, ALGO_AUTO, tpg, bytes).time;
}

static bool costs_of(const Plan *p, const PlanShapes *sh, bool memo, const Layout *l, PlanCosts *out)
{
    const Model *mo = &p->model;
    const Cluster *cl = &p->cluster;
    memset(out, 0, sizeof *out);
    out->layout = *l;
    out->reduce_after_flush = !p->software.overlap_grad_reduce;
    out->p2p_blocking = !p->software.overlap_p2p;
    out->param_overlap = plan_param_overlap(p, l->zero);
    out->warmup_extra = plan_warmup_extra(p, l);
    out->n_micro = plan_micro_batches(l);
    out->n_chunks = l->pp * l->chunks;
    out->chunk = calloc((size_t)out->n_chunks, sizeof *out->chunk);
    out->cost = calloc((size_t)out->n_chunks, sizeof *out->cost);
    out->opt = calloc((size_t)l->pp, sizeof *out->opt);
    out->opt_params = calloc((size_t)l->pp, sizeof *out->opt_params);
    out->sp_norm = calloc((size_t)l->pp, sizeof *out->sp_norm);
    out->sp_norm_bytes = calloc((size_t)l->pp, sizeof *out->sp_norm_bytes);
    out->embed = calloc((size_t)l->pp, sizeof *out->embed);
    out->embed_bytes = calloc((size_t)l->pp, sizeof *out->embed_bytes);
    if (!out->chunk || !out->cost || !out->opt || !out->opt_params || !out->sp_norm ||
        !out->sp_norm_bytes || !out->embed || !out->embed_bytes)
        return false;
    if (!plan_split_at(mo, sh->block_first, l->pp, l->chunks, out->chunk)) return false;
    out->peak_flops = mo->dtype == DTYPE_FP32 ? cl->device.flops_fp32 : cl->device.flops_16;

    PlanCut cut = { .micro_batch = l->micro_batch, .tp = l->tp,
                    .sp = l->sequence_parallel == 1, .recompute = l->recompute, .ep = plan_ep(l),
                    .modules = plan_recompute_modules(l),
                    .flash = plan_flash(&p->software), .xent_fp32 = !p->software.cross_entropy_fusion,
                    .unfused_norm = p->software.unfused_norm, .unfused_rope = p->software.unfused_rope,
                    .unfused_swiglu = p->software.unfused_swiglu,
                    .etp = plan_etp(l), .imbalance = plan_moe_imbalance(&p->software),
                    .cp = plan_cp(l), .cp_comm = plan_cp_comm(l) };
    /* the CP group: cp ranks tp apart (plan_cp_group); hierarchical's
     * all-to-all over those of them in one NVLink domain */
    PlanGroup cpg = plan_cp_group(cl, l->tp, plan_cp(l));
    cut.cp_local = cpg.local >= 1 && plan_cp(l) % cpg.local == 0 ? (int)cpg.local : 1;   /* uneven: the ring */
    PlanGroup tpg = plan_layout_group(cl, plan_dp_cp(l), l->tp, l->pp, GROUP_TP);
    /* the EP group: ep ranks etp apart (at etp = tp: ep consecutive DP
     * ranks of one TP rank), in NVLink domains (plan_ep_group) */
    PlanGroup epg = plan_ep_group(cl, plan_etp(l), plan_ep(l));
    PlanGroup dpg = plan_layout_group(cl, plan_dp_cp(l), l->tp, l->pp, GROUP_DP);
    out->overlap_compute = plan_dp_cp(l) > 1 ? plan_overlap_compute(cl, dpg) : 0;   /* measured, or NCCL's SMs */
    double e = plan_dtype_bytes(mo->dtype);
    bool ovf = false;

    int n_runs, emb_chunk = -1, head_chunk = -1;
    void *keep, *keep0 = NULL;
    int zero_dp = l->zero >= 3 ? plan_dp_cp(l) : 1;   /* the ZeRO-3 shards an fp8 weight is cast on (dp x cp) */
    CostRun *run = segment_runs(p, sh, memo, &cut, tpg, epg, cpg, zero_dp, out->peak_flops, &ovf, &n_runs, &keep);
    /* full recomputation of some blocks only (recompute_layers,
     * recompute_every): the others cost as under recompute none, and
     * plan_block_recomputed says which is which */
    bool partial = plan_recompute_partial(l);
    PlanCut cut0 = cut;
    cut0.recompute = RECOMPUTE_NONE;
    int n_runs0 = 0;
    CostRun *run0 = partial ? segment_runs(p, sh, memo, &cut0, tpg, epg, cpg, zero_dp, out->peak_flops, &ovf, &n_runs0, &keep0)
                            : NULL;
    uint64_t *norm_params = calloc(2 * (size_t)out->n_chunks, sizeof *norm_params);   /* [2k], [2k+1]: chunk_add */
    int *rank_blocks = calloc((size_t)l->pp, sizeof *rank_blocks);   /* [pp] blocks of the earlier chunks */
    if (!run || !norm_params || !rank_blocks || (partial && !run0)) {
        free(run); free(keep); free(run0); free(keep0); free(norm_params); free(rank_blocks);
        return false;
    }
    /* chunk k holds segments [g, g + its blocks), chunk 0 also segment 0
     * (the layers before block 0); the runs are walked once for all */
    int r = 0, r0 = 0, g = 0, G = mo->n_blocks + 1, unit = plan_recompute_unit(l);
    for (int k = 0; k < out->n_chunks; k++) {
        PlanChunkCost *c = &out->cost[k];
        int end = k == out->n_chunks - 1 ? G : g + out->chunk[k].blocks + (k == 0);
        int fb = k == 0 ? 1 : g, rb = rank_blocks[k % l->pp];   /* the chunk's first block segment */
        double unit_rebuild = 0;
        while (g < end) {
            /* segment 0 is no block: the same under either cut */
            bool rec = !partial || g < fb || plan_block_recomputed(l, g - fb, rb + g - fb);
            const CostRun *R = rec ? run : run0;
            int *ri = rec ? &r : &r0;
            while (R[*ri].end <= g) (*ri)++;
            int stop = R[*ri].end < end ? R[*ri].end : end;
            if (partial || unit > 1) stop = g + 1;   /* one block at a time: each asks the rule */
            if (R[*ri].c->embedding) emb_chunk = k;
            if (R[*ri].c->head) head_chunk = k;
            SegCost u;
            const SegCost *x = R[*ri].c;
            if (unit > 1 && g >= fb) {
                /* Megatron's uniform method: a unit of `unit` blocks keeps
                 * its first block's input alone, and its backward rebuilds
                 * all of its blocks at once (the later blocks' inputs too) */
                u = *x;
                bool first = (g - fb) % unit == 0;
                if (!first) u.act_kept -= u.act_input;
                unit_rebuild = (first ? 0 : unit_rebuild + u.act_input) + u.rebuild;
                u.act_layer_max = fmax(u.act_layer_max, u.scratch + unit_rebuild);
                x = &u;
            }
            chunk_add(c, x, stop - g, &norm_params[2 * k], &out->params_total, &ovf);
            g = stop;
        }
        rank_blocks[k % l->pp] += out->chunk[k].blocks;
        c->bwd_input = c->bwd - c->bwd_weight;
    }
    free(run);
    free(keep);
    free(run0);
    free(keep0);
    free(rank_blocks);
    /* a tied head on another stage than the embedding keeps its own copy
     * of the word table (Megatron), updated like any other weight */
    if (head_chunk >= 0 && emb_chunk >= 0 && head_chunk % l->pp != emb_chunk % l->pp) {
        uint64_t v = (uint64_t)(plan_vocab_padded(mo, l->tp) / l->tp) * (uint64_t)mo->dim;
        out->cost[head_chunk].params += (uint64_t)sh->tied_heads * v;
        out->cost[head_chunk].tensors += sh->tied_heads;
        /* whose gradient, as a layer's, a kernel of its own accumulates
         * when the GEMM does not (layer_time, grad_accum_fusion false) */
        double acc = plan_grad_accum_time(p, (double)sh->tied_heads * (double)v, 0);
        out->cost[head_chunk].bwd += acc;
        out->cost[head_chunk].bwd_weight += acc;
    }
    double T = (double)l->micro_batch * plan_cut_tokens(mo, &cut);   /* this rank's tokens */
    uint64_t *opt_expert = calloc((size_t)l->pp, sizeof *opt_expert);   /* [pp] of opt_params, the experts' */
    double *opt_tensors = calloc((size_t)l->pp, sizeof *opt_tensors);   /* [pp] parameter tensors */
    if (!opt_expert || !opt_tensors) { free(opt_expert); free(opt_tensors); free(norm_params); return false; }
    for (int k = 0; k < out->n_chunks; k++) opt_tensors[k % l->pp] += out->cost[k].tensors;
    for (int k = 0; k < out->n_chunks; k++) {
        PlanChunkCost *c = &out->cost[k];
        const PlanChunkCost *q = k ? &out->cost[k - 1] : NULL;
        /* the pipeline send of stage k % pp: across pods where the next
         * stage is in another pod (comm.c, plan_pp_pair) */
        PlanGroup pair = plan_pp_pair(cl, plan_dp_cp(l), l->tp, l->pp, k % l->pp);
        bool same_pair = k && pair.pods == plan_pp_pair(cl, plan_dp_cp(l), l->tp, l->pp, (k - 1) % l->pp).pods;
        if (q && same_pair && q->params == c->params && q->layers == c->layers &&
            q->expert_params == c->expert_params && q->moe_layers == c->moe_layers &&
            q->fp8_params == c->fp8_params) {   /* same collectives */
            c->p2p_bytes = q->p2p_bytes; c->p2p = q->p2p; c->weight_bytes = q->weight_bytes;
            c->red_bytes = q->red_bytes;
            c->reduce = q->reduce; c->gather = q->gather; c->sync = q->sync;
            out->opt_params[k % l->pp] += c->params;
            opt_expert[k % l->pp] += c->expert_params;
            continue;
        }
        c->p2p_bytes = e * T * (double)mo->dim / (l->sequence_parallel == 1 ? l->tp : 1);
        c->p2p = l->pp > 1 ? pp_send_time(cl, mo, l, pair, tpg, c->p2p_bytes) : 0;
        c->weight_bytes = plan_fp8_gather_bytes(p, (double)c->params, c->fp8_params);   /* fp8 all-gather */
        dp_times(cl, l, dpg, plan_grad_bytes(p), c);
        out->opt_params[k % l->pp] += c->params;
        opt_expert[k % l->pp] += c->expert_params;
    }
    step_collectives(p, l, emb_chunk, head_chunk, norm_params, sh->tied_heads > 0, out);
    free(norm_params);
    for (int s = 0; s < l->pp; s++) {
        /* ZeRO shards dense state over DP, expert state over expert-DP */
        if (l->zero >= 1) out->opt_params[s] = plan_zero_shard(out->opt_params[s], opt_expert[s], plan_dp_cp(l), plan_expert_dp(l));
        /* the AdamW step, and the program's fixed work of a step (logging,
         * the data batch, bookkeeping: Device.overhead, measured by planc
         * calibrate, else 0) once per step on every stage */
        out->opt[s] = plan_opt_time(&cl->device, out->opt_params[s], p->software.optimizer, opt_tensors[s]) +
                      cl->device.overhead;
    }
    free(opt_expert);
    free(opt_tensors);
    return !ovf;
}

bool plan_costs_shaped(const Plan *p, const PlanShapes *sh, const Layout *l, PlanCosts *out)
{
    return costs_of(p, sh, true, l, out);
}

/* Why one entry for both: plan_costs builds the index, costs and frees
 * it; the reference path shares everything but the memo. */
static bool costs_indexed(const Plan *p, const Layout *l, bool memo, PlanCosts *out)
{
    PlanShapes sh;
    if (!plan_shapes_build(&p->model, &sh)) {
        memset(out, 0, sizeof *out);
        return false;
    }
    bool ok = costs_of(p, &sh, memo, l, out);
    plan_shapes_free(&sh);
    return ok;
}

bool plan_costs(const Plan *p, const Layout *l, PlanCosts *out)
{
    return costs_indexed(p, l, true, out);
}

bool plan_costs_reference(const Plan *p, const Layout *l, PlanCosts *out)
{
    return costs_indexed(p, l, false, out);
}

void plan_costs_free(PlanCosts *c)
{
    free(c->chunk); free(c->cost); free(c->opt); free(c->opt_params);
    free(c->sp_norm); free(c->sp_norm_bytes); free(c->embed); free(c->embed_bytes);
    memset(c, 0, sizeof *c);
}
