/*
 * program.h: the Program IR — for every pipeline stage, the ordered list of
 * operations one rank runs in one training step.
 *
 * The Program is the single source of truth for the schedule: the
 * simulator (simulate.h) times it, the timeline draws it (one row per
 * stage, one box per op, labelled with micro-batch and chunk), and the code
 * generator emits each stage's list in order as calls into the runtime.
 * Nothing else may re-derive a schedule.
 *
 * Every DP and TP rank of a stage runs the same list (rank layout
 * rank = tp + TP*(dp + DP*pp), as Megatron). Each op carries its predicted
 * duration (from cost.h), so the simulator needs nothing but the Program.
 */
#ifndef PLANC_PROGRAM_H
#define PLANC_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "planner/plan.h"
#include "planner/comm.h"

typedef enum {
    OP_FWD,            /* forward of (mb, chunk); TP collectives inside */
    OP_BWD,            /* full backward of (mb, chunk), recomputation included */
    OP_BWD_INPUT,      /* zb-h1: gradient w.r.t. the chunk's input */
    OP_BWD_WEIGHT,     /* zb-h1: gradient w.r.t. the chunk's weights */
    OP_SEND_ACT,       /* send (mb, chunk)'s output activation to `peer` */
    OP_RECV_ACT,       /* receive (mb, chunk)'s input activation from `peer` */
    OP_SEND_GRAD,      /* send the gradient of (mb, chunk)'s input to `peer` */
    OP_RECV_GRAD,      /* receive the gradient of (mb, chunk)'s output from `peer` */
    OP_GATHER_PARAMS,  /* ZeRO-3: all-gather the chunk's parameters over DP (layer by layer
                          with overlap_param_gather, else one piece); ZeRO-1/2 with
                          overlap_param_gather: the updated shards, before the chunk's
                          first forward */
    OP_REDUCE_GRADS,   /* all-reduce (ZeRO 0) or reduce-scatter (ZeRO >= 1) the chunk's gradients over DP */
    OP_OPT_STEP,       /* AdamW on this rank's parameters (ZeRO >= 1: its shard) */
    OP_SYNC_PARAMS,    /* ZeRO-1/2: all-gather the updated parameter shards over DP */
    OP_SP_NORM_REDUCE, /* tp > 1: all-reduce over TP of the gradients that are partial sums
                          there: under sequence parallelism the norm weights' (each TP rank
                          saw only its rows), under any TP the q/k norm gains' (each rank
                          normalised only its heads); before OP_OPT_STEP */
    OP_EMBED_REDUCE,   /* tied head, pp > 1: all-reduce of the word-embedding gradient between
                          the first and the last stage (Megatron's embedding group); first and
                          last stage only, before OP_NORM_REDUCE */
    OP_NORM_REDUCE,    /* all-reduce over all ranks of the squared gradient norm (clipping,
                          logging, the NaN stop); every stage, right before OP_OPT_STEP */
    OP_EP_ALL_TO_ALL,  /* a mixture's dispatch + combine all-to-alls over the EP group (ep > 1),
                          synchronous inside a FWD / BWD / BWD_INPUT as TP collectives are:
                          never an op of a stage's list, but the part ep_dur of the compute op
                          that carries it, which the trace draws as a segment of that op on the
                          collective lane (trace/timeline.c) */
    OP_TP_COLL,        /* a pass's TP collectives (all-reduces; with sequence parallelism
                          all-gathers and reduce-scatters) that the compute stream waits for:
                          like OP_EP_ALL_TO_ALL never an op of a list, but the part tp_dur of
                          the FWD / BWD / BWD_INPUT that carries it, drawn on the trace's
                          in-pass lane */
    OP_CP_COLL,        /* context parallelism (cp > 1): the attention's transfers over the CP
                          group (the ring's KV blocks, the all-to-alls, the KV gather) that the
                          compute stream waits for: like OP_TP_COLL never an op of a list, but
                          the part cp_dur of the FWD / BWD / BWD_INPUT that carries it (codegen
                          emits none: the runtime's prt_cp_attention_* run them), drawn on the
                          trace's in-pass lane */
} PlanOpKind;          /* ORDER PlanOpKind */

#define PLAN_N_OPKINDS 18

typedef enum {
    STREAM_COMPUTE,    /* kernels, TP collectives, waits on receives */
    STREAM_COMM,       /* DP / ZeRO collectives, overlapped with compute */
    STREAM_P2P,        /* pipeline sends */
} PlanStream;

typedef struct {
    PlanOpKind     kind;
    int            mb;          /* micro-batch, -1 for step-level ops */
    int            chunk;       /* model chunk on this stage (0..chunks-1), -1: all */
    int            vstage;      /* virtual stage = chunk * pp + stage, -1: all */
    int            peer;        /* p2p: the other stage; -1 otherwise */
    int            first_layer; /* layer range [first_layer, end_layer) of the chunk */
    int            end_layer;
    PlanCollective coll;        /* comm ops: the collective */
    PlanGroupKind  group;       /* comm ops: over which group */
    double         bytes;       /* bytes moved (comm) */
    int            buckets;     /* GATHER/REDUCE: pieces, one per layer */
    int            pair;        /* GATHER: index of the compute op it feeds;
                                   REDUCE: of the compute op it drains; -1 */
    PlanStream     stream;
    double         dur;         /* predicted seconds (the whole op) */
    double         ep_dur;      /* compute ops: seconds of dur in the EP all-to-alls inside
                                   (OP_EP_ALL_TO_ALL; 0 without expert parallelism) */
    double         ep_bytes;    /* compute ops: bytes one rank sends in those all-to-alls */
    double         tp_dur;      /* compute ops: seconds of dur in exposed TP collectives
                                   (PlanChunkCost.fwd_tp / bwd_tp; OP_TP_COLL) */
    double         cp_dur;      /* compute ops: seconds of dur in exposed CP attention transfers
                                   (PlanChunkCost.fwd_cp / bwd_cp; OP_CP_COLL) */
    double         cp_bytes;    /* compute ops: bytes one rank sends in them */
    double         rc_dur;      /* BWD / BWD_INPUT: seconds of dur recomputing the forward's
                                   kernels (PlanChunkCost.recompute less the collectives it
                                   repeats, which tp_dur / ep_dur count) */
    int            prepost;     /* RECV_*: 0, posted at the op itself; else 1 + the index of
                                   the op before which it is posted early, with the sends
                                   queued there (NCCL's rules: p2p_order.c) */
} PlanOp;

typedef struct {
    int     stage;
    int     n_ops, cap;
    PlanOp *ops;
} PlanStageProgram;

typedef struct {
    int               pp, dp, tp, chunks, zero;
    int               cp;              /* context-parallel degree (0 or 1: none; issue 26) */
    int               schedule;        /* Schedule */
    int64_t           n_micro;         /* micro-batches per step */
    double            overlap_compute; /* slowdown of compute while a DP/ZeRO collective runs
                                          beside it (>= 1; 0 or 1: none), Link.overlap_compute */
    PlanStageProgram *stages;          /* [pp] */
} PlanProgram;

/* Forward, backward and p2p durations the lowering needs; normally from
 * the cost table (plan_lower), or written by hand (tests). */
typedef struct {
    int     pp, chunks, zero;
    int     schedule;
    int64_t n_micro;
    /* per virtual stage k = chunk * pp + stage: */
    double *fwd, *bwd, *bwd_input, *bwd_weight, *p2p, *p2p_bytes;
    double *reduce, *gather, *sync, *weight_bytes, *red_bytes;   /* weight_bytes: weights moved by
                                                                   the gathers; red_bytes: the
                                                                   gradients the reductions move */
    double *fwd_ep, *bwd_ep;      /* s of fwd / bwd (bwd_input) in EP all-to-alls */
    double *fwd_ep_bytes, *bwd_ep_bytes; /* bytes sent in them */
    double *fwd_tp, *bwd_tp;      /* s of fwd / bwd (bwd_input) in exposed TP collectives */
    double *rc;                   /* s of bwd (bwd_input) recomputing kernels (PlanOp.rc_dur) */
    double *fwd_cp, *bwd_cp;      /* s of fwd / bwd (bwd_input) in exposed CP transfers */
    double *fwd_cp_bytes, *bwd_cp_bytes; /* bytes sent in them */
    double *fwd_ep_hidden, *bwd_ep_hidden; /* s of them a paired step hides (overlap_moe_a2a) */
    int    *first_layer, *end_layer, *layers;
    /* per stage: */
    double *opt;          /* s: the optimizer step (AdamW only) */
    double *sp_norm, *sp_norm_bytes;  /* s, bytes: OP_SP_NORM_REDUCE; bytes 0: no such op */
    double *embed, *embed_bytes;      /* s, bytes: OP_EMBED_REDUCE; bytes 0: no such op */
    double  norm, norm_bytes;         /* s, bytes: OP_NORM_REDUCE (every stage) */
    bool    reduce_after_flush;   /* !Plan.software.overlap_grad_reduce */
    bool    p2p_blocking;         /* !Plan.software.overlap_p2p: sends on the compute stream */
    bool    param_overlap;        /* Plan.software.overlap_param_gather: ZeRO-3 gathers feed
                                     their compute layer by layer; ZeRO-1/2's all-gather
                                     becomes a gather before each chunk's first forward */
    double  overlap_compute;      /* PlanProgram.overlap_compute */
    int     warmup_extra;         /* forwards added to each stage's warm-up (plan_warmup_extra:
                                     overlap_moe_a2a); 0 */
} PlanOpCosts;

/* One compute micro-step of a stage's schedule: the forward, the backward
 * (zb-h1: its input-gradient part) or the zb-h1 weight pass of
 * (mb, chunk). A stage's Program is its steps expanded into ops. */
typedef enum { PLAN_STEP_F, PLAN_STEP_B, PLAN_STEP_W } PlanStepKind;
/* paired: the step runs beside another micro-batch's step of the other
 * direction (the steady state of 1F1B and interleaved 1F1B, Megatron-Core's
 * combined 1F1B), so overlap_moe_a2a hides its all-to-alls (cost.h
 * fwd_ep_hidden) */
typedef struct { PlanStepKind kind; int mb, chunk; bool paired; } PlanStep;

/* The most ops one micro-step expands into: a gather, a receive, the
 * compute op, a send and a reduction. */
#define PLAN_STEP_OPS_MAX 5

/* The ops micro-step st of stage s expands into, in list order, written
 * to out; their `pair` indices count from out[0]. Returns how many. The
 * one rule of the expansion: plan_lower_costs appends these ops, and the
 * fast path (plan_simulate_costs) times them without keeping them. */
int plan_expand_step(const PlanOpCosts *c, int s, PlanStep st, PlanOp out[PLAN_STEP_OPS_MAX]);

/* The most ops of a stage's tail: a reduction per chunk after the flush,
 * the three step-level collectives, the optimizer step, the sync. */
#define PLAN_TAIL_OPS_MAX(chunks) ((chunks) + 5)

/* The ops that close stage s's list after its last micro-step, written to
 * out (PLAN_TAIL_OPS_MAX(chunks) of room): the reductions that wait for
 * the flush, OP_SP_NORM_REDUCE (tp > 1: sequence parallel, or a q/k norm), OP_EMBED_REDUCE
 * (tied head, pp > 1, first and last stage; `peer` is the other end),
 * OP_NORM_REDUCE (every stage), OP_OPT_STEP, OP_SYNC_PARAMS (ZeRO-1/2).
 * Returns how many. */
int plan_expand_tail(const PlanOpCosts *c, int s, PlanOp *out);

/* Lower plan p (layout resolved with plan_layout_defaults and checked)
 * into its Program with durations from the cost model. Returns false
 * (with a reason in why) when the layout is invalid. */
bool plan_lower(const Plan *p, PlanProgram *out, char *why, size_t len);

/* Lower from an explicit cost table (used by plan_lower and tests). */
bool plan_lower_costs(const PlanOpCosts *c, PlanProgram *out);

void plan_program_free(PlanProgram *p);

/* Make the pipeline's transfers hold under NCCL's rules (one stream in
 * issue order, a send ends once its receive is posted, no tags): run the
 * transfers of every stage as the runtime groups them and post early the
 * receives a deadlock waits for (PlanOp.prepost). False, with the waiting
 * transfers in why, if no receive posted early can end a deadlock, or if
 * sends and receives do not pair up. plan_lower calls it. */
bool plan_program_p2p_order(PlanProgram *p, char *why, size_t len);
/* How many receives of p are posted early. */
int  plan_program_preposts(const PlanProgram *p);

/* Copy a cost table (cost.h) into the lowering's per-virtual-stage
 * arrays (oc allocated with plan_op_costs_alloc for the same pp and
 * chunks). */
struct PlanCosts;
void plan_op_costs_fill(const struct PlanCosts *pc, PlanOpCosts *oc);

/* Allocate / free the arrays of a PlanOpCosts for pp stages x chunks. */
bool plan_op_costs_alloc(PlanOpCosts *c, int pp, int chunks);
void plan_op_costs_free(PlanOpCosts *c);

const char *plan_op_name(PlanOpKind k);

/* Largest number of micro-batches whose forward has run and whose
 * backward (zb-h1: weight pass) has not, over the list of stage s, in
 * units of whole-stage micro-batches (chunk-micro-batches / chunks). */
double plan_program_in_flight(const PlanProgram *p, int s);

#endif /* PLANC_PROGRAM_H */
