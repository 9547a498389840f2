/*
 * memory.c: what one GPU of each pipeline stage holds at its peak.
 *
 * Items, per GPU of stage s:
 *  - model states (Rajbhandari et al. 2020, "ZeRO", Sec. 3): with mixed
 *    precision AdamW, 2 bytes of 16-bit parameters, the gradients in the
 *    plan's grad_accum_dtype (plan_grad_dtype: unless the plan says, fp32
 *    for a bf16 model, Megatron-LM's --accumulate-allreduce-grads-in-fp32,
 *    4 bytes: 18, distributed 6 + 12/dp; 2 bytes for an fp16 model, the
 *    paper's 2 + 2 + 12 = 16) and 12 of optimizer state (fp32 master copy,
 *    momentum, variance) per parameter; fp32 training keeps 4 + 4 + 8.
 *    ZeRO-1 divides the optimizer state by the DP degree, ZeRO-2 also the
 *    gradients, ZeRO-3 also the parameters (ZeRO-1 reduces its
 *    gradients in place: no shard beside them); runtime/par/model.c
 *    allocates each of these. The parameters are those of the stage's
 *    chunks after the tensor-parallel split (the first stage holds the
 *    embedding, the last the head; a tied head on another stage than the
 *    embedding keeps a copy, as Megatron does).
 *  - activations (Korthikanti et al. 2022, Sec. 4): each chunk's kept bytes
 *    per micro-batch (model.c; ZB-H1 adds the output gradients its B pass
 *    keeps for W and the fp32 norm gradients it keeps aside so that only W
 *    opens a gradient bucket, plan_act_kept) times the micro-batches in flight at the
 *    stage's peak (Narayanan et al. 2021 Sec. 2.2; Qi et al. 2023 for
 *    ZB-H1), plus, under recomputation, the one layer whose activations are
 *    rebuilt during its backward (Megatron's uniform method: the unit of
 *    recompute_layers blocks rebuilt at once). What each recompute setting
 *    keeps (Megatron's recompute_modules, torchtitan's op list, full
 *    recomputation of some blocks: recompute_layers, recompute_every) is
 *    model.c's and cost.c's (costs_of, plan_block_recomputed).
 *  - buffers: the pipeline's transfer buffers of one activation each that
 *    are alive at once (plan_pipe_xfer_bufs: a stage's output from its
 *    forward until its send completes, a gradient from its receive until
 *    its send completes, Megatron-LM's deallocate_output_tensor; the input
 *    received is the kept activation itself); under
 *    ZeRO-3 two gathered layers in the compute dtype (the one computing,
 *    the one prefetched); under ZeRO >= 2 two gradient buckets of the
 *    largest layer (the one the backward writes, the one being
 *    reduce-scattered; runtime/par/model.c frees each once reduced), under
 *    ZB-H1 too (its B pass writes no bucket: codegen's gln).
 *    A mixture's all-to-all send and receive buffers (e R h each, ep > 1)
 *    are alive during its layer only: the largest one counts. Software
 *    whose GEMMs do not accumulate the weight gradients (grad_accum_fusion
 *    false) holds a fresh one until it is added: the largest layer's.
 *  - context parallelism (issue 26): every token-wise tensor holds seq / cp
 *    tokens of a sequence (model.c); the attention keeps its CP form's
 *    saved tensors and allocates its buffers while it runs exactly as
 *    runtime/include/prt_par.h's contract says (plan_cp_attention_numel);
 *    weights are replicated over cp, so gradients, AdamW state and ZeRO
 *    shards are over the dp x cp ranks of the gradient group
 *    (plan_dp_cp; Megatron-Core's distributed optimizer over dp-cp).
 *  - a mixture of experts (issue 17): each GPU holds E / ep routed
 *    experts (split over tp); their gradients are reduced and their ZeRO
 *    state sharded over the expert-DP group of dp / ep ranks, the dense
 *    weights' over all of DP (plan_expert_states).
 *  - reserve: plan_memory_reserve().
 *
 * Byte counts saturate at 2^64 - 1 instead of wrapping: sema admits models
 * of ~2*10^18 parameters, whose 16 bytes per parameter do not fit in 64
 * bits, and such a stage must read as not fitting, not as a small number.
 */
#include "planner/memory.h"

#include <math.h>
#include <stdlib.h>
#include "planner/cost.h"
#include "planner/fp8.h"
#include "planner/layout.h"
#include "planner/model.h"

/* a + b and a * b, saturating at UINT64_MAX. */
uint64_t plan_bytes_add(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}


static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* ceil(x / d) without the overflow of (x + d - 1) / d; a saturated x stays so. */
static uint64_t ceil_div(uint64_t x, uint64_t d)
{
    if (x == UINT64_MAX) return x;
    return x / d + (x % d != 0);
}

int64_t plan_headroom(uint64_t capacity, uint64_t total)
{
    if (total <= capacity) {
        uint64_t d = capacity - total;
        return d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
    }
    uint64_t d = total - capacity;
    return d > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)d;
}

uint64_t plan_memory_reserve(uint64_t capacity)
{
    uint64_t r = (1ull << 30) + capacity / 20;
    return r > capacity / 4 ? capacity / 4 : r;
}

void plan_model_states(uint64_t psi, PlanDtype dtype, PlanDtype gdtype, int zero, int dp,
                       uint64_t *params, uint64_t *grads, uint64_t *opt)
{
    uint64_t e = (uint64_t)plan_dtype_bytes(dtype), ge = (uint64_t)plan_dtype_bytes(gdtype);
    uint64_t k = dtype == DTYPE_FP32 ? 8 : 12;    /* (master,) m, v in fp32 */
    uint64_t d = dp > 0 ? (uint64_t)dp : 1;
    *params = sat_mul(e, psi);
    *grads = sat_mul(ge, psi);
    *opt = sat_mul(k, psi);
    if (zero >= 1) *opt = ceil_div(*opt, d);
    /* ZeRO-1 keeps the full gradients only: its reduce-scatter writes this
     * rank's part in place (runtime/par/model.c's launch_bucket), as
     * Megatron's distributed optimizer does (its api-guide
     * dist_optimizer.md: 6 + 12/d bytes per parameter with bf16 weights
     * and fp32 gradients) */
    if (zero >= 2) *grads = ceil_div(*grads, d);
    if (zero >= 3) *params = ceil_div(*params, d);
}

double plan_act_kept(int schedule, double act_kept, double act_split)
{
    return act_kept + (schedule == SCHED_ZB_H1 ? act_split : 0);
}

void plan_expert_states(uint64_t psi, uint64_t psi_expert, PlanDtype dtype, PlanDtype gdtype, int zero, int dp, int edp,
                        uint64_t *params, uint64_t *grads, uint64_t *opt)
{
    /* a group of one rank shards nothing: the runtime's effective stage is
     * 0 there (runtime/par/model.c: zero = dp == 1 ? 0 : zero), for the
     * dense states over DP and the experts' over expert-DP alike */
    plan_model_states(psi - psi_expert, dtype, gdtype, dp > 1 ? zero : 0, dp, params, grads, opt);
    if (psi_expert == 0) return;
    uint64_t p2, g2, o2;
    if (edp < 1) edp = 1;   /* the expert-DP group (issue 17's agreed semantics; plan_expert_dp) */
    plan_model_states(psi_expert, dtype, gdtype, edp > 1 ? zero : 0, edp, &p2, &g2, &o2);
    *params = plan_bytes_add(*params, p2);
    *grads = plan_bytes_add(*grads, g2);
    *opt = plan_bytes_add(*opt, o2);
}

double plan_in_flight(int schedule, int p, int s, int64_t m, int v)
{
    return plan_in_flight_x(schedule, p, s, m, v, 0);
}

double plan_in_flight_x(int schedule, int p, int s, int64_t m, int v, int extra)
{
    double dm = (double)m;
    switch (schedule) {
    case SCHED_GPIPE:
        return dm;
    case SCHED_INTERLEAVED: {
        /* Megatron: warm-up 2(p-s-1) + (v-1)p chunk forwards (+ extra,
         * overlap_moe_a2a), + 1 in steady state; with m == p every forward
         * runs in the warm-up */
        double n = m == p ? dm * v : 2.0 * (p - s - 1) + (double)(v - 1) * p + extra + 1;
        return fmin(n, dm * v) / v;
    }
    case SCHED_ZB_H1:
        /* forward to weight pass: at most p on every stage (lower.c); a
         * micro-batch's slot lives from its F to its W, whole (codegen's
         * slot_alloc/free), with the B-to-W gradients (plan_act_kept) */
        return fmin((double)p, dm);
    default:   /* 1F1B */
        return fmin((double)(p - s + extra), dm);
    }
}

uint64_t plan_bytes(double x)
{
    if (!(x > 0)) return 0;
    if (x >= 18446744073709551616.0) return UINT64_MAX;
    return (uint64_t)ceil(x);
}

double plan_pipe_slots(int schedule, int p, int s, int64_t m, int v)
{
    return plan_pipe_slots_x(schedule, p, s, m, v, 0);
}

double plan_pipe_slots_x(int schedule, int p, int s, int64_t m, int v, int extra)
{
    return ceil(plan_in_flight_x(schedule, p, s, m, v, extra) * v - 1e-9);
}

double plan_pipe_xfer_bufs(int schedule, int p, int s, int64_t m, int v, int zero, int dp)
{
    (void)v;
    if (p <= 1) return 1;   /* the backward's gradient, freed with its slot */
    if (schedule == SCHED_INTERLEAVED) {
        /* ops that post the queued sends between a stage's transfers (ZeRO-3's
         * gathers, ZeRO-2's reduction after each backward over dp > 1) make
         * p2p_order.c post gradients' receives early, into d made then: the
         * last stage holds up to p - 2 of them beside its own; two stages
         * post them early anyway (the second one's d lands before the one it
         * sends has gone) */
        bool posts = zero >= 3 || (zero >= 2 && dp > 1);
        if (m > p && posts) return s == p - 1 && p - 2 > 3 ? p - 2 : 3;
        return p == 2 && s == 1 && m > p ? 3 : 2;
    }
    /* the head sends no output: its d alone (the one sent is freed at the
     * next receive's call, before the next backward makes one) */
    if (s == p - 1 && schedule != SCHED_GPIPE) return 1;
    return 2;   /* the output sent with the gradient received, or two gradients (GPipe's cool-down) */
}

int plan_pipe_early_recvs(int schedule, int p)
{
    return schedule == SCHED_INTERLEAVED && p > 1 ? 1 : 0;
}

uint64_t plan_memory_buffers(double xfers, int zero, double p2p_bytes, double layer_params_max,
                             PlanDtype dtype, PlanDtype gdtype)
{
    double e = plan_dtype_bytes(dtype), ge = plan_dtype_bytes(gdtype), buf = 0;
    buf += xfers * p2p_bytes;                            /* outputs and gradients alive at once */
    if (zero >= 3) buf += 2 * layer_params_max * e;      /* gathered + prefetched layer */
    if (zero >= 2) buf += 2 * layer_params_max * ge;     /* two gradient buckets (ZeRO-1 reduces from the full buffer) */
    return plan_bytes(buf);
}

uint64_t plan_memory_grad_transient(const Plan *p, double layer_params_max)
{
    if (p->software.grad_accum_fusion) return 0;
    return plan_bytes(layer_params_max * plan_dtype_bytes(p->model.dtype));
}

/* What FP8 training changes in stage s's items (planner/fp8.c's
 * plan_fp8_memory over the stage's chunks): the parameters, the buffers
 * and the activations of the micro-batches in flight; nothing without fp8. */
static void plan_memory_fp8(const Plan *p, const PlanCosts *c, int s, PlanStageMem *m)
{
    if (!plan_fp8_on(&p->software)) return;
    PlanFp8Mem sum;
    plan_fp8_stage_memory(p, &c->layout, c->chunk, s, &sum);
    /* each item stays >= 0: a saving never exceeds what the item holds */
    m->params_bytes = plan_bytes(fmax(0, (double)m->params_bytes + sum.params));
    m->buffers_bytes = plan_bytes(fmax(0, (double)m->buffers_bytes + sum.buffers));
    m->fp8_bytes = plan_bytes(sum.copies);
    m->activations_bytes = plan_bytes(fmax(0, (double)m->activations_bytes + m->in_flight * sum.act_per_mb));
}

void plan_memory(const Plan *p, const PlanCosts *c, PlanStageMem *out)
{
    const Layout *l = &c->layout;
    uint64_t cap = p->cluster.device.memory;
    for (int s = 0; s < l->pp; s++) {
        PlanStageMem *m = &out[s];
        uint64_t psi = 0, psi_e = 0;
        double act = 0, rebuild = 0, p2p = 0, layer_max = 0, a2a = 0;
        for (int v = 0; v < l->chunks; v++) {
            const PlanChunkCost *k = &c->cost[v * l->pp + s];
            psi = plan_bytes_add(psi, k->params);
            psi_e = plan_bytes_add(psi_e, k->expert_params);
            a2a = fmax(a2a, fmax(k->a2a_bytes, k->cp_buf_bytes));   /* one layer's at a time */
            act += plan_act_kept(l->schedule, k->act_kept, k->act_split);
            rebuild = fmax(rebuild, k->act_layer_max);
            p2p = fmax(p2p, k->p2p_bytes);
            layer_max = fmax(layer_max, (double)k->layer_params_max);
        }
        m->stage = s;
        m->params = psi;
        plan_expert_states(psi, psi_e, p->model.dtype, plan_grad_dtype(p), l->zero, plan_dp_cp(l), plan_expert_dp(l),
                           &m->params_bytes, &m->grads_bytes, &m->optimizer_bytes);
        int extra = plan_warmup_extra(p, l);   /* overlap_moe_a2a's warm-up forward */
        m->in_flight = plan_in_flight_x(l->schedule, l->pp, s, c->n_micro, l->chunks, extra);
        m->activations_bytes = plan_bytes(m->in_flight * act + rebuild);
        /* + a mixture's all-to-all send and receive buffers (ep > 1) or
         * the CP attention's own (cp > 1), alive during the one layer
         * that runs */
        double xfers = plan_pipe_xfer_bufs(l->schedule, l->pp, s, c->n_micro, l->chunks, l->zero, plan_dp_cp(l));
        double early = plan_pipe_early_recvs(l->schedule, l->pp) * p2p;   /* receives posted early */
        m->fp8_bytes = 0;
        m->buffers_bytes = plan_bytes_add(plan_memory_buffers(xfers, l->zero, p2p, layer_max, p->model.dtype,
                                                              plan_grad_dtype(p)),
                                          plan_bytes_add(plan_bytes(a2a + early),
                                                         plan_memory_grad_transient(p, layer_max)));
        /* + expert_bias's biases and counts of every mixture, on every rank */
        m->buffers_bytes = plan_bytes_add(m->buffers_bytes, plan_expert_bias_bytes(&p->model));
        plan_memory_fp8(p, c, s, m);
        m->reserve_bytes = plan_memory_reserve(cap);
        m->total_bytes = plan_bytes_add(plan_bytes_add(plan_bytes_add(m->params_bytes, m->grads_bytes),
                                         plan_bytes_add(m->optimizer_bytes, m->activations_bytes)),
                                 plan_bytes_add(m->buffers_bytes, m->reserve_bytes));
        m->capacity = cap;
        m->headroom = plan_headroom(cap, m->total_bytes);
    }
}

/* Whether op o starts a compute op's use of (mb, chunk)'s slot (+1) or
 * ends it (-1): a forward makes a micro-batch's activations, the backward
 * that finishes its gradients (zb-h1: the weight pass) frees them. */
static int slot_delta(const PlanOp *o, bool split_bwd)
{
    if (o->kind == OP_FWD) return 1;
    if (o->kind == OP_BWD_WEIGHT || (o->kind == OP_BWD && !split_bwd)) return -1;
    return 0;
}

void plan_memory_peaks(const PlanStageProgram *sp, int zero, int op_at[PLAN_MEM_KINDS])
{
    for (int k = 0; k < PLAN_MEM_KINDS; k++) op_at[k] = -1;
    bool split_bwd = false;
    for (int i = 0; i < sp->n_ops; i++) split_bwd |= sp->ops[i].kind == OP_BWD_WEIGHT;
    /* buffers: all of the stage's buffer items are in use from the last of
     * their first uses on (p2p slots, gathered layers, gradient buckets) */
    int live = 0, most = 0, p2p = -1, gather = -1, bucket = -1;
    for (int i = 0; i < sp->n_ops; i++) {
        const PlanOp *o = &sp->ops[i];
        live += slot_delta(o, split_bwd);
        if (live > most) { most = live; op_at[PLAN_MEM_ACTIVATIONS] = i; }
        if (gather < 0 && o->kind == OP_GATHER_PARAMS) gather = i;
        if (p2p < 0 && (o->kind == OP_SEND_ACT || o->kind == OP_RECV_ACT)) p2p = i;
        if (bucket < 0 && zero >= 2 && (o->kind == OP_BWD || o->kind == OP_BWD_WEIGHT)) bucket = i;
    }
    int b = p2p > gather ? p2p : gather;
    op_at[PLAN_MEM_BUFFERS] = bucket > b ? bucket : b;
}

/* ---- the pipeline's transfer buffers, op by op ------------------------
 * runtime/par/pipe.c makes a stage's output y at its forward (not on the
 * last virtual stage) and a gradient d at its receive, its early receive
 * or its backward; a send takes the buffer out of its slot, and the buffer
 * is freed when the send has completed, which the pipe tests ("reaps") at
 * every transfer call and before every other op (prt_pipe_post); an unsent
 * d (the first virtual stage's) goes with its slot. --dry-run frees a
 * posted send at the first reap after it was posted: the receiver waiting
 * for it, as in a pipeline's steady state. This walk replays that over a
 * stage's op list as the generated program issues it (codegen/emit.c:
 * early receives before the op that posts them, FREE_SLOT after a slot's
 * last op). */

typedef struct {
    int   live, most;     /* y and d buffers alive; the most at once */
    int   queued, posted; /* of them: sends queued, sends posted not reaped */
    bool *pre_queued;     /* [n_ops] receive i was posted early and is queued, not posted */
    int  *pre, n_pre;     /* those receives */
} XferWalk;

static void xfer_alloc(XferWalk *w, bool *have)
{
    if (*have) return;
    *have = true;
    if (++w->live > w->most) w->most = w->live;
}

static void xfer_reap(XferWalk *w)
{
    w->live -= w->posted;
    w->posted = 0;
}

static void xfer_post(XferWalk *w)
{
    w->posted += w->queued;
    w->queued = 0;
    for (int i = 0; i < w->n_pre; i++) w->pre_queued[w->pre[i]] = false;
    w->n_pre = 0;
}

static bool is_xfer(PlanOpKind k)
{
    return k == OP_SEND_ACT || k == OP_RECV_ACT || k == OP_SEND_GRAD || k == OP_RECV_GRAD;
}

int plan_pipe_xfer_peak(const PlanStageProgram *sp, int pp, int chunks, int64_t n_micro)
{
    size_t n = (size_t)n_micro * (size_t)(chunks > 0 ? chunks : 1);
    bool *y = calloc(n ? n : 1, sizeof *y), *d = calloc(n ? n : 1, sizeof *d);
    int *last = malloc(sizeof *last * (size_t)(sp->n_ops + 1));
    int *seen = malloc(sizeof *seen * (n ? n : 1)), *pre = malloc(sizeof *pre * (size_t)(sp->n_ops + 1));
    bool *pq = calloc((size_t)sp->n_ops + 1, sizeof *pq);
    if (!y || !d || !last || !seen || !pre || !pq) {
        free(y); free(d); free(last); free(seen); free(pre); free(pq);
        return -1;
    }
    /* the last op of each slot: FREE_SLOT follows it (emit.c's uses_slot) */
    for (size_t i = 0; i < n; i++) seen[i] = 0;
    for (int i = sp->n_ops - 1; i >= 0; i--) {
        const PlanOp *o = &sp->ops[i];
        last[i] = 0;
        bool slot = o->kind == OP_FWD || o->kind == OP_BWD || o->kind == OP_BWD_INPUT ||
                    o->kind == OP_BWD_WEIGHT || is_xfer(o->kind);
        if (!slot || o->mb < 0) continue;
        size_t k = (size_t)o->mb * (size_t)chunks + (size_t)o->chunk;
        if (!seen[k]) last[i] = seen[k] = 1;
    }
    XferWalk w = { .pre_queued = pq, .pre = pre };
    for (int i = 0; i < sp->n_ops; i++) {
        const PlanOp *o = &sp->ops[i];
        for (int j = i; j < sp->n_ops; j++) {   /* early receives queued before op i */
            const PlanOp *q = &sp->ops[j];
            if (q->prepost != i + 1) continue;
            xfer_reap(&w);
            if (q->kind == OP_RECV_GRAD) xfer_alloc(&w, &d[(size_t)q->mb * (size_t)chunks + (size_t)q->chunk]);
            pq[j] = true;
            pre[w.n_pre++] = j;
        }
        if (!is_xfer(o->kind)) { xfer_reap(&w); xfer_post(&w); }   /* prt_pipe_post */
        size_t k = o->mb >= 0 ? (size_t)o->mb * (size_t)chunks + (size_t)o->chunk : 0;
        bool head = o->chunk == chunks - 1 && sp->stage == pp - 1;
        switch (o->kind) {
        case OP_FWD:
            if (!head) xfer_alloc(&w, &y[k]);
            break;
        case OP_BWD: case OP_BWD_INPUT:
            xfer_alloc(&w, &d[k]);
            break;
        case OP_SEND_ACT: case OP_SEND_GRAD: {
            xfer_reap(&w);
            bool *b = o->kind == OP_SEND_ACT ? &y[k] : &d[k];
            if (*b) { *b = false; w.queued++; }
            break;
        }
        case OP_RECV_ACT: case OP_RECV_GRAD:
            xfer_reap(&w);
            if (o->kind == OP_RECV_GRAD) xfer_alloc(&w, &d[k]);
            if (!o->prepost || pq[i]) xfer_post(&w);   /* its group, or the one it was queued in */
            break;
        default:
            break;
        }
        if (last[i]) {   /* FREE_SLOT: what was not sent */
            w.live -= y[k] + d[k];
            y[k] = d[k] = false;
        }
    }
    free(y); free(d); free(last); free(seen); free(pre); free(pq);
    return w.most;
}
