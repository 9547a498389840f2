/*
 * layout.h: resolving a plan block's `auto` fields, checking a layout
 * against the model and the cluster, and cutting the model into pipeline
 * chunks.
 */
#ifndef PLANC_LAYOUT_H
#define PLANC_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include "planner/plan.h"

/* The largest pipeline degree times chunks the planner handles. */
#define PLAN_MAX_VSTAGES 4096

/* One model chunk (virtual pipeline stage): layers [first, end). */
typedef struct {
    int first, end;
    int blocks;           /* transformer blocks in it */
} PlanChunk;

/* Fill every PLAN_AUTO field of p's layout (or all of them when the plan
 * has no plan block) with planc's defaults: tp 1, pp 1,
 * dp = GPUs/(tp*pp), zero 0, micro_batch 1, global_batch = dp*micro_batch,
 * schedule 1f1b (interleaved when chunks > 1 is given), chunks 1,
 * recompute none, sequence_parallel off. Sequence parallelism with tp 1
 * means nothing, so it is off there whatever the plan block says; ep 1. */
Layout plan_layout_defaults(const Plan *p);

/* A layout with every field PLAN_AUTO (a plan without a plan block). */
Layout plan_layout_auto(void);

/* The software settings a plan has when its plan block names none (the
 * one place they are written; README's plan-block table): planc's own
 * program — overlap_grad_reduce true, overlap_param_gather as the ZeRO
 * stage has it (PLAN_AUTO: plan_param_overlap), overlap_p2p true,
 * overlap_tp false, grad_accum_fusion true, cross_entropy_fusion true. */
Software plan_software_defaults(void);

/* Whether parameter all-gathers overlap compute under ZeRO stage `zero`:
 * the plan's overlap_param_gather when it says, else what planc's runtime
 * does — ZeRO-3 gathers layer by layer with the next layer prefetched
 * (runtime/par/model.c), ZeRO-1/2's all-gather follows the optimizer step
 * (prt_zero_sync). */
bool plan_param_overlap(const Plan *p, int zero);

/* The dtype of a plan's gradients: its grad_accum_dtype when the plan block
 * says, else fp32 for a bf16 model (Megatron-LM's and DeepSpeed's bf16
 * default, and what planc's runtime holds) and the model's own otherwise
 * (fp16: 16-bit gradients, the ZeRO paper's accounting; fp32: fp32). The one place the memory
 * model (gradients, ZeRO-1's shard, ZeRO-2/3's buckets), the cost model
 * (the DP reductions' bytes) and emit (what the runtime holds) read it. */
PlanDtype plan_grad_dtype(const Plan *p);
/* Bytes of one gradient element: plan_dtype_bytes(plan_grad_dtype(p)). */
int plan_grad_bytes(const Plan *p);

/* Whether a resolved layout can run the model on the cluster; if not,
 * writes the reason to why. This is the one place that decides it:
 * `check` (plan_evaluate), `search`, `emit` and `build` (cg_emit) all ask
 * it, so whatever one accepts the others accept. It asks every rule below
 * in turn. */
bool plan_layout_check(const Plan *p, const Layout *l, char *why, size_t len);

/* The rules. Each judges only the fields it is given that are set: a
 * PLAN_AUTO argument constrains nothing, so sema asks the same predicates
 * about the fields a plan block fixes (and points its diagnostic at them),
 * and the wording cannot drift between `check` and the diagnostics. Each
 * returns true when the rule holds, else writes the reason to why (why may
 * be NULL). The vocabulary is no rule: the embedding and the head are
 * padded to a multiple of vocab_multiple * tp rows (plan_vocab_padded). */

/* Write a reason into why (which may be NULL) and say false: how every
 * rule (here and planner/fp8.c's) refuses. */
bool plan_refuse(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The model's own shape, for Plans built in C (sema reports these at the
 * model's keys): heads divide the width, kv heads the heads, the model
 * starts with an embedding and ends with an lm_head. */
bool plan_rule_model(const Model *m, char *why, size_t len);
/* Megatron splits the query heads, the key/value heads and the MLP width
 * (each expert's, in a mixture) of every layer over tp. */
bool plan_rule_tp_split(const Model *m, int tp, char *why, size_t len);
/* Expert parallelism (issue 17) and expert TP (issue 25): the stage's
 * tp x dp ranks are laid out as etp x ep x expert-DP (etp fastest,
 * Megatron-Core's expert rank generator), so ep x etp divides tp x dp (at
 * etp = tp: ep divides dp, EP groups are ep consecutive DP ranks); ep
 * divides every mixture's experts (each EP rank holds experts / ep of
 * them) and etp every mixture's hidden. ep on a dense model means nothing
 * (sema warns; plan_layout_defaults runs it with ep 1), so it is no rule.
 * etp PLAN_AUTO (or equal to tp) is tp's. */
bool plan_rule_ep(const Model *m, int dp, int tp, int etp, int ep, char *why, size_t len);
/* overlap_moe_a2a (Megatron-Core's combined 1F1B) runs under 1f1b without
 * a pipeline or interleaved with one, and not with full recomputation. */
bool plan_rule_moe_overlap(const Software *w, int schedule, int pp, int recompute, char *why, size_t len);
/* The forwards overlap_moe_a2a adds to a stage's warm-up (0 or 1): one
 * under the interleaved schedule and under 1f1b without a pipeline, with
 * ep > 1 (Megatron-Core's combined 1F1B); the schedule (PlanOpCosts.
 * warmup_extra) and the memory model (plan_in_flight_x) read it. */
int plan_warmup_extra(const Plan *p, const Layout *l);
/* The size of the expert-DP group (the ranks holding the same experts):
 * tp x dp / (etp x ep), 1 where that does not divide. */
int plan_expert_dp(const Layout *l);
/* The routing imbalance a plan assumes, >= 1 (Software.moe_imbalance; 0 in
 * a Software built in C means 1). */
double plan_moe_imbalance(const Software *w);
/* Sequence parallelism (sp 1) cuts the micro_batch * seq rows of a
 * micro-batch over tp. */
bool plan_rule_sp_rows(const Model *m, int tp, int64_t micro_batch, int sp, char *why, size_t len);
/* A tensor-parallel group stays inside a node (an NVLink domain). */
bool plan_rule_tp_node(const Cluster *c, int tp, char *why, size_t len);
/* The attention kernel runs on the device: FlashAttention-3 is written
 * for Hopper (sm_90: wgmma and TMA) and runs nowhere else. */
bool plan_rule_attention_kernel(const Device *d, int kernel, char *why, size_t len);
/* One rank per GPU: dp x tp x cp x pp equals the cluster's GPUs (with some
 * degrees PLAN_AUTO: the fixed ones divide it). */
bool plan_rule_ranks(const Cluster *c, int dp, int tp, int cp, int pp, char *why, size_t len);
/* Context parallelism (issue 26): cp cuts every sequence into 2 x cp
 * chunks (rank i of the CP group holds chunks i and 2cp-1-i, so causal
 * work is balanced), so 2 x cp divides seq; the all-to-all forms
 * (all_to_all, hierarchical) scatter the heads over tp x cp ranks, so
 * tp x cp divides the query heads and the key/value heads (the message
 * names the one that does not). cp PLAN_AUTO constrains nothing;
 * cp_comm PLAN_AUTO is the ring's. */
bool plan_rule_cp(const Model *m, int tp, int cp, int cp_comm, char *why, size_t len);
/* The gradient group's size: the dp x cp ranks that hold the same weights
 * (same tp, pp), over which gradients are reduced and ZeRO shards
 * (Megatron-Core's distributed optimizer over the dp-cp group). dp at cp 1. */
int plan_dp_cp(const Layout *l);
/* Every pipeline chunk holds a block: pp x chunks <= the model's blocks
 * (and <= PLAN_MAX_VSTAGES). chunks PLAN_AUTO counts as 1. */
bool plan_rule_pp_blocks(const Model *m, int pp, int chunks, char *why, size_t len);
/* chunks > 1 needs the interleaved schedule, which needs pp >= 2. */
bool plan_rule_schedule(int schedule, int pp, int chunks, char *why, size_t len);
/* Each DP rank takes whole micro-batches: global_batch is a multiple of
 * dp x micro_batch. */
bool plan_rule_batch(int64_t global_batch, int dp, int64_t micro_batch, char *why, size_t len);
/* Megatron's interleaved 1F1B runs the micro-batches in groups of pp. */
bool plan_rule_interleaved_batches(const Layout *l, char *why, size_t len);

/* Micro-batches per step per pipeline: global_batch / (dp * micro_batch). */
int64_t plan_micro_batches(const Layout *l);

/* Cut the model into pp*chunks chunks; chunk k is virtual stage k, run by
 * stage k % pp as its chunk k / pp. Blocks are spread as evenly as
 * possible; when they do not divide, the extra blocks go to the middle
 * chunks first (the first and last carry the embedding and the head).
 * Returns false when there are fewer blocks than chunks. */
bool plan_split(const Model *m, int pp, int chunks, PlanChunk *out);
/* The same split from the layer index where each block starts
 * (block_first[b], its attention layer): O(chunks), not O(layers). */
bool plan_split_at(const Model *m, const int *block_first, int pp, int chunks, PlanChunk *out);

const char *plan_schedule_name(int s);
/* The plan-key name of a PlanCpComm ("ring", "all_to_all", ...). */
const char *plan_cp_comm_name(int c);
const char *plan_recompute_name(int r);

/* The name of a PlanRecomputeModule as Megatron-Core spells it
 * (--recompute-modules, transformer_config.py recompute_modules). */
const char *plan_recompute_module_name(int m);

/* `recompute` and which parts it covers, in words ("selective (modules
 * core_attn layernorm)", "full (the first 2 blocks of each chunk)"). */
void plan_recompute_describe(const Layout *L, char *buf, size_t len);

/* Blocks of one unit of full recomputation: recompute_layers under
 * Megatron's uniform method (the unit keeps its first block's input, its
 * backward rebuilds all of it), else 1. */
int plan_recompute_unit(const Layout *L);

/* Whether full recomputation covers only some blocks (recompute_layers or
 * recompute_every), so a block's cost depends on where it sits. */
bool plan_recompute_partial(const Layout *L);

/* The one rule of which blocks full recomputation rebuilds: the block
 * chunk_block of its chunk (0-based) that is the rank_block-th block its
 * rank holds (0-based, over the rank's chunks in order). False unless
 * `recompute full`; every block when neither recompute_layers (method
 * block) nor recompute_every is set. */
bool plan_block_recomputed(const Layout *L, int chunk_block, int rank_block);

#endif /* PLANC_LAYOUT_H */
