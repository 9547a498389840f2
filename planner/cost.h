/*
 * cost.h: the cost table of a layout — per model chunk (virtual pipeline
 * stage) the time of one micro-batch's forward and backward on one GPU,
 * the bytes and times of its collectives and what it keeps in memory; per
 * stage the optimizer step and the step-level collectives.
 *
 * plan_costs() computes it; costs of identical layers and blocks are
 * computed once (memoised by shape, PlanShapes), so a layout costs
 * O(distinct shapes + runs + chunks), not O(layers).
 * This module computes costs only: it derives no schedule (schedule.h),
 * builds no Program (program.h) and simulates nothing (simulate.h); the
 * evaluation driver (evaluate.h) puts them together.
 */
#ifndef PLANC_COST_H
#define PLANC_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "planner/plan.h"
#include "planner/layout.h"
#include "planner/memory.h"

/* Device efficiency assumptions (README, section planner). Tile and wave
 * quantisation apply to tensor-core devices (16-bit peak > 2 x fp32 peak). */
#define PLAN_GEMM_EFF    0.80   /* fraction of dense peak large GEMMs reach on a device
                                   without a measured ceiling (Device.gemm_eff) */
#define PLAN_HBM_EFF     0.85   /* fraction of HBM bandwidth streaming kernels reach */
#define PLAN_KERNEL_GAP  2e-6   /* s, launch/ramp gap per kernel */
#define PLAN_TILE_MN     128    /* GEMM output tile edge (cuBLAS/CUTLASS) */
#define PLAN_TILE_K      32     /* GEMM k step */
#define PLAN_FLASH_BLOCK 128    /* queries (and keys) per block of a fused attention kernel:
                                   FlashAttention-2's kBlockM for head dim <= 128 */
#define PLAN_WAVE_TILES  128    /* tiles run concurrently when Device.sms is 0 (one per SM) */
#define PLAN_ADAM_BYTES  28.0   /* HBM bytes per parameter of one AdamW step */
#define PLAN_DEEPEP_SMS  20     /* SMs DeepEP's dispatch and combine kernels take (Megatron-LM
                                   arguments.py --moe-deepep-num-sms, default 20; DeepEP's
                                   Buffer.num_sms = 20): what the compute beside them loses */

/* The fraction of the dense peak the best-shaped GEMM reaches on d: the
 * preset's measured maximum achievable matmul FLOPS (Device.gemm_eff,
 * presets.c), else PLAN_GEMM_EFF. A GEMM's own shape then costs it its
 * tile and wave quantisation and, where thin, the HBM roofline. */
/* Of a causal s x s_k attention, the fraction of score blocks a fused
 * (FlashAttention-2) kernel computes: (nb + 1) / 2nb, nb = s / PLAN_FLASH_BLOCK
 * rounded up; 1 for a sliding window (s_k < s). */
double plan_flash_causal_fraction(double s, double sk);
double plan_gemm_eff(const Device *d);

/* The fraction of its short-run rate a compute-bound kernel keeps in a
 * training step on d (Device.sustained, else 1). */
double plan_sustained(const Device *d);

/* Bytes/s a memory-bound kernel streams on d: its measured figure (a
 * preset's BabelStream, presets.c, or planc calibrate's), else
 * PLAN_HBM_EFF of its HBM. */
double plan_stream_bw(const Device *d);

/* The fraction of the 16-bit peak a fused attention kernel (`kernel`, a
 * PlanAttnKernel other than MATH) reaches on d in pass `pass` (0 forward,
 * 1 backward), head dim and keys per query given, causal or not, on the
 * FLOPs of the blocks it runs, in short runs (the step's clock is
 * plan_sustained's): the device block's attention_efficiency if set; else
 * the measured rates of its architecture (Hopper: FlashAttention-3's
 * figures of FA2, FA3 and cuDNN, interpolated in log seq and log head dim,
 * held at their ends; Blackwell: Hopper's fractions; Ampere:
 * FlashAttention-2's); 0 when none is known (the GEMM ceiling then). */
double plan_attn_rate(const Device *d, int kernel, int pass, double head_dim, double keys, bool causal);

/* The cost of one model chunk (virtual stage) for one micro-batch on one GPU. */
typedef struct {
    double   fwd;            /* s: forward compute + TP collectives */
    double   bwd;            /* s: backward (incl. recomputation) + TP collectives */
    double   bwd_input;      /* s: zb-h1 input-gradient part of bwd */
    double   bwd_weight;     /* s: zb-h1 weight-gradient part (bwd = input + weight) */
    double   fwd_tp, bwd_tp; /* s: TP collectives inside fwd / bwd (on the critical path) */
    double   fwd_ep, bwd_ep; /* s: EP all-to-alls (dispatch, combine) inside fwd / bwd (critical path) */
    double   fwd_ep_bytes, bwd_ep_bytes; /* bytes one rank sends in them */
    double   fwd_ep_hidden, bwd_ep_hidden; /* s: of fwd_ep / bwd_ep, what overlap_moe_a2a hides
                                          when the step runs paired with another micro-batch's
                                          (PlanStep.paired); 0 without it */
    double   recompute;      /* s: recomputed forward inside bwd */
    double   recompute_coll; /* s: of recompute, the TP collectives and EP all-to-alls it
                                repeats (counted in bwd_tp / bwd_ep too) */
    double   flops_fwd;      /* model FLOPs of the forward */
    double   flops_recompute;/* FLOPs recomputed in the backward */
    uint64_t params;         /* parameters per GPU (TP rank; a mixture's routed experts / ep), before ZeRO */
    uint64_t expert_params;  /* of params, the local routed experts' (sharded over expert-DP) */
    int      moe_layers;     /* mixtures in the chunk (the expert gradient buckets) */
    double   a2a_bytes;      /* bytes of the largest layer's transient all-to-all buffers */
    /* context parallelism (cp > 1): the attention's transfers over the CP group */
    double   fwd_cp, bwd_cp; /* s: of fwd / bwd, the CP transfers the compute waits for (a ring
                                step's transfer beyond its block's compute; the all-to-alls and
                                gathers whole); bwd's with the recomputed forward's */
    double   fwd_cp_total, bwd_cp_total; /* s: all of them, exposed + overlapped */
    double   fwd_cp_bytes, bwd_cp_bytes; /* bytes one rank sends in them, forward / backward */
    double   cp_buf_bytes;   /* bytes of the largest CP attention's own buffers (buffers) */
    double   act_kept;       /* bytes kept from forward to backward */
    double   act_split;      /* bytes zb-h1 also keeps from B to W (plan_act_kept) */
    double   act_layer_max;  /* bytes of the largest layer's full activations */
    uint64_t layer_params_max; /* parameters of the largest layer, per TP rank */
    int      layers;         /* layers in the chunk (the gradient buckets) */
    double   tensors;        /* parameter tensors in the chunk (plan_layer_tensors; a per-tensor
                                optimizer's launches) */
    double   p2p_bytes;      /* activation (or gradient) sent to the neighbour chunk */
    double   p2p;            /* s: its transfer */
    double   weight_bytes;   /* bytes of the chunk's weights in the compute dtype (what the
                                ZeRO gathers move) */
    double   red_bytes;      /* bytes of the chunk's gradients (plan_grad_bytes per
                                parameter): what its DP reduction moves */
    double   reduce;         /* s: DP gradient all-reduce (ZeRO 0) or reduce-scatter */
    double   gather;         /* s: ZeRO-3 parameter all-gather of the chunk */
    double   sync;           /* s: ZeRO-1/2 all-gather of the updated parameters */
    double   fp8_cast;       /* s: of fwd + bwd, the FP8 casts (planner/fp8.c) */
    double   fp8_params;     /* of params, the weights of FP8 linears */
} PlanChunkCost;

/* Costs of one layout. */
typedef struct PlanCosts {
    Layout         layout;    /* resolved (no PLAN_AUTO) */
    int64_t        n_micro;   /* micro-batches per step */
    int            n_chunks;  /* pp * chunks */
    PlanChunk     *chunk;     /* [n_chunks] layer ranges */
    PlanChunkCost *cost;      /* [n_chunks] */
    double        *opt;       /* [pp] s: optimizer step (AdamW) per stage */
    uint64_t      *opt_params;/* [pp] parameters one GPU updates */
    /* the step-level collectives, once per step after the reductions and
     * before the optimizer step (lower.c's tail), per stage: */
    double        *sp_norm, *sp_norm_bytes; /* [pp] s, bytes: TP all-reduce of the norm weights'
                                               gradients (sequence parallel, tp > 1), else 0 */
    double        *embed, *embed_bytes;     /* [pp] s, bytes: tied word-embedding gradient
                                               all-reduce, first and last stage (pp > 1), else 0 */
    double         norm, norm_bytes;        /* s, bytes: all-ranks all-reduce of the squared
                                               gradient norm (one fp32), every stage; with
                                               expert_bias also the step's expert counts' */
    double         peak_flops;/* dense peak of the model dtype */
    uint64_t       params_total; /* parameters of the whole model, exact */
    bool           reduce_after_flush; /* !Plan.software.overlap_grad_reduce */
    bool           p2p_blocking;       /* !Plan.software.overlap_p2p */
    bool           param_overlap;      /* Plan.software.overlap_param_gather */
    double         overlap_compute;    /* the DP link's Link.overlap_compute (PlanProgram's) */
    int            warmup_extra;       /* plan_warmup_extra: overlap_moe_a2a's warm-up forward */
} PlanCosts;

/* The model's layers by shape, built once per model (O(layers)): layer
 * classes (shape and whether an attention layer precedes), the segments
 * (the layers before block 0, then each block up to the next) in classes
 * by their layers' classes, and runs of consecutive segments of one
 * class. With it a layout's cost table costs O(classes + runs + chunks). */
typedef struct { int first, end, cls; } PlanShapeRun;   /* segments [first, end) */
typedef struct PlanShapes {
    int  n_layers, n_blocks;
    int  n_cls;          /* layer classes */
    int *layer_cls;      /* [n_layers] each layer's class */
    int *cls_rep;        /* [n_cls] the first layer of each class */
    int *block_first;    /* [n_blocks] the layer where block b starts (its attention layer) */
    int  n_seg_cls;      /* segment classes */
    int *seg_cls;        /* [n_blocks + 1] each segment's class */
    int *seg_rep;        /* [n_seg_cls] the first segment of each class */
    int  n_run;
    PlanShapeRun *run;   /* [n_run] */
    int  tied_heads;     /* LM heads tied to the embedding */
} PlanShapes;

bool plan_shapes_build(const Model *m, PlanShapes *out);
void plan_shapes_free(PlanShapes *s);

/* Build the cost table of layout `l` (resolved and checked); false on
 * overflow of a parameter count. Free with plan_costs_free. Each chunk's
 * sums are over runs of segments whose costs are equal to the bit: a run
 * of n adds n times the segment's figure. plan_costs builds the shape
 * index for the call; plan_costs_shaped takes one built for p's model
 * (the search builds it once); plan_costs_reference costs every layer and
 * segment on its own, without the memo, for the tests that hold the memo
 * to it bit for bit. */
bool plan_costs(const Plan *p, const Layout *l, PlanCosts *out);
bool plan_costs_shaped(const Plan *p, const PlanShapes *sh, const Layout *l, PlanCosts *out);
bool plan_costs_reference(const Plan *p, const Layout *l, PlanCosts *out);
void plan_costs_free(PlanCosts *c);

/* Seconds of one GEMM (m x k)(k x n), `batch` times, `e`-byte elements, on
 * device d at dense peak `peak`: the device's measured GEMMs where it has
 * them (plan_gemm_pass_time, PLAN_GEMM_FWD), else the roofline of tile- and
 * wave-quantised compute against HBM traffic, plus a kernel gap. */
double plan_gemm_time(const Device *d, double peak, double e,
                      double m, double n, double k, double batch);

/* Seconds of one AdamW step over `params` parameters in `tensors`
 * tensors on device d, by the optimizer's kernels (PlanOptimizer,
 * Software.optimizer): fused, one streaming pass of PLAN_ADAM_BYTES per
 * parameter in one launch (planc's runtime over its flat shard); foreach
 * and for-loop, torch.optim.AdamW's eight ops, each a pass of its own
 * (84 bytes a parameter), in multi-tensor launches (foreach) or a launch
 * per tensor per op (for-loop). plan_costs' opt[]; the search's bound of
 * the step's tail reads the same formula with tensors 0. */
double plan_opt_time(const Device *d, uint64_t params, int optimizer, double tensors);

/* Seconds a micro-batch's backward spends adding `params` fresh weight
 * gradients to the gradient buffer when the GEMMs do not accumulate
 * themselves (Software.grad_accum_fusion false; 0 when they do): one
 * streaming pass that reads the fresh gradient (the model's element, e
 * bytes) and the buffer (g, plan_grad_bytes) and writes the buffer, e + 2g
 * bytes a parameter, in `kernels` launches. */
double plan_grad_accum_time(const Plan *p, double params, int kernels);

/* Seconds of pass `pass` (PlanGemmPass) of the linear layer whose forward
 * GEMM is (m x k)(k x n), `batch` times. A device with measured points
 * (planc calibrate) interpolates their FLOP rates in log(m, n, k) space by
 * inverse distance, so a measured shape is predicted at its measured
 * time; a device without them (or without points of that pass) takes the
 * roofline of plan_gemm_time with the pass's shape. */
double plan_gemm_pass_time(const Device *d, double peak, double e, int pass,
                           double m, double n, double k, double batch);

/* Seconds of elementwise kernels moving `bytes` bytes in `kernels`
 * launches: bytes over the device's stream bandwidth (measured, else
 * PLAN_HBM_EFF of its HBM) plus a launch gap each (measured, else
 * PLAN_KERNEL_GAP). */
double plan_stream_time(const Device *d, double bytes, int kernels);

/* Seconds of `a` s of all-to-alls that overlap_moe_a2a hides behind
 * `cover` s of another micro-batch's compute: exposed = max(0, a - cover)
 * + slow x min(a, cover) (what the compute cannot cover, plus the covered
 * compute's slowdown by the SMs the all-to-all takes, slow =
 * plan_overlap_compute - 1, as tp_exposed), hidden = a - exposed, >= 0. */
double plan_a2a_hidden(double a, double cover, double slow);

/* Parameters one GPU's ZeRO shard holds of `params` of which
 * `expert_params` are routed experts: dense ones over dp, experts over
 * their expert-DP group of edp ranks (plan_expert_dp; each rounded up). */
uint64_t plan_zero_shard(uint64_t params, uint64_t expert_params, int dp, int edp);

/* Fill c's weight_bytes, red_bytes, reduce, gather and sync (the DP collectives) from
 * its params and layers under layout l, as plan_costs does. */
void plan_chunk_dp_times(const Plan *p, const Layout *l, PlanChunkCost *c);

#endif /* PLANC_COST_H */
