/*
 * memory.h: bytes per GPU of every pipeline stage, item by item.
 */
#ifndef PLANC_MEMORY_H
#define PLANC_MEMORY_H

#include <stdint.h>
#include "planner/plan.h"
#include "planner/program.h"

struct PlanCosts;

/* What one GPU of one pipeline stage holds at its peak. */
typedef struct {
    int      stage;
    uint64_t params_bytes;      /* model parameters in the compute dtype (ZeRO-3: shard) */
    uint64_t grads_bytes;       /* gradients (ZeRO-2/3: shard) */
    uint64_t optimizer_bytes;   /* AdamW state (ZeRO >= 1: shard) */
    uint64_t activations_bytes; /* kept activations x micro-batches in flight (+ recompute buffer) */
    uint64_t buffers_bytes;     /* p2p, ZeRO-3 gathered layers, communication buckets */
    uint64_t fp8_bytes;         /* of buffers_bytes: the FP8 copies (planner/fp8.h PlanFp8Mem.copies) */
    uint64_t reserve_bytes;     /* CUDA context, NCCL, workspace, fragmentation */
    uint64_t total_bytes;       /* sum of the above */
    uint64_t capacity;          /* device memory */
    int64_t  headroom;          /* capacity - total (negative: does not fit) */
    double   in_flight;         /* micro-batches whose activations are alive at the peak */
    uint64_t params;            /* parameters on this GPU (after TP, before ZeRO) */
} PlanStageMem;

/* Bytes of the reserve on a device of `capacity` bytes: 1 GiB (CUDA
 * context ~0.5 GiB, NCCL buffers, cuBLAS workspace) + 5 % of capacity for
 * the caching allocator's fragmentation, at most a quarter of capacity. */
uint64_t plan_memory_reserve(uint64_t capacity);

/* Pipeline slots alive at once on stage s (planrt's pipe pool keeps one
 * per micro-batch and chunk in flight, each with its input, pp 1 too):
 * plan_in_flight times the chunks v. */
double plan_pipe_slots(int schedule, int p, int s, int64_t m, int v);
/* The same with `extra` forwards added to the warm-up (plan_warmup_extra). */
double plan_pipe_slots_x(int schedule, int p, int s, int64_t m, int v, int extra);

/* Activation receives a stage posts early at once (planner/p2p_order.c:
 * NCCL's rules; the interleaved schedule needs one, the others none), each
 * into a receive buffer of p2p bytes that planrt's pipe makes at start on
 * every stage. plan_program_p2p_order refuses a Program that needs more. */
int plan_pipe_early_recvs(int schedule, int p);

/* Transfer buffers of one activation (an output y or a gradient d) that
 * stage s holds at once at its peak, as runtime/par/pipe.c frees them
 * once sent (Megatron-LM's deallocate_output_tensor in
 * megatron/core/pipeline_parallel/schedules.py): 1 with pp 1 (the
 * backward's gradient) and on 1F1B's / zb-h1's last stage, 2 otherwise
 * (an output being sent beside a gradient received); interleaved, the
 * gradients whose receives p2p_order.c posts early add theirs (3 on the
 * second of two stages; under ZeRO-3, or ZeRO-2 over dp > 1, 3 and on
 * the last stage up to p - 2). ZeRO-3's gathers can leave one fewer
 * alive; plan_pipe_xfer_peak, the walk of a Program, is never above it
 * and equal to it under ZeRO 0-2 (tests/test_planner.c). */
double plan_pipe_xfer_bufs(int schedule, int p, int s, int64_t m, int v, int zero, int dp);

/* Bytes of one stage's buffers, per GPU: `xfers` transfer buffers of
 * p2p_bytes (plan_pipe_xfer_bufs); under ZeRO-3 two gathered layers (the one
 * computing, the one prefetched; layer_params_max parameters in the compute
 * dtype); under ZeRO >= 2 two gradient buckets of the largest layer in the
 * gradients' dtype gdtype (planner/layout.h's plan_grad_dtype).
 * The one formula: plan_memory() and the search's bounds both call it. */
uint64_t plan_memory_buffers(double xfers, int zero, double p2p_bytes, double layer_params_max,
                             PlanDtype dtype, PlanDtype gdtype);

/* Bytes of the fresh weight gradient that software without fused
 * accumulation (Software.grad_accum_fusion false) holds until a kernel
 * adds it to the buffer: at most the largest layer's, layer_params_max
 * parameters in the model's dtype; 0 when the GEMMs accumulate. Part of
 * the buffers; plan_memory() and the search's bounds both add it. */
uint64_t plan_memory_grad_transient(const Plan *p, double layer_params_max);

/* Bytes ceil(x) (0 for x <= 0, UINT64_MAX from 2^64 on) and a + b
 * saturating at UINT64_MAX: byte counts never wrap. */
uint64_t plan_bytes(double x);
uint64_t plan_bytes_add(uint64_t a, uint64_t b);

/* capacity - total as a signed byte count, clamped to int64_t (a total
 * beyond it reads as INT64_MIN: does not fit). */
int64_t plan_headroom(uint64_t capacity, uint64_t total);

/* ZeRO paper (Rajbhandari et al. 2020, Sec. 3 and Fig. 1) model-state bytes
 * per GPU for psi parameters with mixed-precision AdamW, parameters in
 * dtype and gradients in gdtype (plan_grad_dtype): 2 + 2 + 12 bytes per
 * parameter with 16-bit gradients (the paper's), 2 + 4 + 12 with fp32
 * gradients (Megatron-LM's --accumulate-allreduce-grads-in-fp32 table);
 * fp32: 4 + 4 + 8. DP degree dp, stage zero: params, grads and optimizer
 * state written to the three outputs, each saturating at UINT64_MAX.
 * ZeRO-1's gradients add the shard the runtime's reduce-scatter writes
 * (gdtype bytes per parameter / dp). */
void plan_model_states(uint64_t psi, PlanDtype dtype, PlanDtype gdtype, int zero, int dp,
                       uint64_t *params, uint64_t *grads, uint64_t *opt);

/* Bytes one micro-batch of a chunk keeps alive from its forward to its
 * backward under a schedule: act_kept, and under ZB-H1 also act_split, the
 * output gradients its B pass keeps for the W pass (codegen's slot keeps
 * them from the forward to the weight pass). memory.c and the search's
 * bounds both call it. */
double plan_act_kept(int schedule, double act_kept, double act_split);
/* plan_model_states for psi parameters of which psi_expert are routed
 * experts: the dense ones over dp, the experts over their expert-DP group
 * of edp ranks (plan_expert_dp: tp dp / (etp ep); dp / ep at etp = tp;
 * Megatron-Core MoE's expert data parallelism). */
void plan_expert_states(uint64_t psi, uint64_t psi_expert, PlanDtype dtype, PlanDtype gdtype, int zero, int dp, int edp,
                        uint64_t *params, uint64_t *grads, uint64_t *opt);

/* Micro-batches in flight on stage s of p for a schedule: GPipe m, 1F1B
 * min(p - s, m), ZB-H1 min(p, m) (later stages defer weight passes up to
 * 1F1B's peak), interleaved (in units of whole-stage
 * micro-batches) min(2(p-s-1) + (v-1)p + 1, m v) / v (m v / v = m when
 * m == p: Megatron then runs every forward in the warm-up). */
double plan_in_flight(int schedule, int p, int s, int64_t m, int v);
/* The same with `extra` forwards added to the warm-up of 1f1b and
 * interleaved (plan_warmup_extra: overlap_moe_a2a). */
double plan_in_flight_x(int schedule, int p, int s, int64_t m, int v, int extra);

/* The memory items as planrt's allocator counts them (prt_mem_kind's
 * order): --mem-report's by_kind. */
enum { PLAN_MEM_PARAMS, PLAN_MEM_GRADS, PLAN_MEM_OPTIMIZER, PLAN_MEM_ACTIVATIONS,
       PLAN_MEM_BUFFERS, PLAN_MEM_KINDS };

/* When in its Program's step stage s holds each kind at its peak: the index
 * of the first op at which the kind reaches the bytes of m (-1: the same
 * over the whole step). Activations peak where the most micro-batches
 * (chunk forwards without their backward yet) are alive; buffers from the
 * last of the first uses of their items (the first transfer for p2p, the
 * first gather for ZeRO-3's layers, the first backward for ZeRO >= 2's
 * buckets); weights, gradients and AdamW state are the same all step. */
void plan_memory_peaks(const PlanStageProgram *sp, int zero, int op_at[PLAN_MEM_KINDS]);

/* The most pipeline transfer buffers (outputs y and gradients d of one
 * activation each) stage sp holds at once, as runtime/par/pipe.c makes
 * and frees them: y from the forward to its send's completion, d from its
 * receive (or early receive, or the backward on the last virtual stage) to
 * its send's completion or, on the first virtual stage, the slot's end; a
 * posted send counted until the next test of the outbox (prt_pipe_post or
 * a transfer call), where --dry-run frees it. -1: out of memory. */
int plan_pipe_xfer_peak(const PlanStageProgram *sp, int pp, int chunks, int64_t n_micro);

/* Fill out[0..pp-1] from a cost table. */
void plan_memory(const Plan *p, const struct PlanCosts *c, PlanStageMem *out);

#endif /* PLANC_MEMORY_H */
