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
 * HBM traffic (so the attention score/context GEMMs with k or n = head dim,
 * or the GEMMs of a thin tensor-parallel shard, fall below peak by
 * themselves), each elementwise kernel (norms, softmax, dropout, GeLU,
 * residual, cross-entropy) is its bytes over the HBM bandwidth, and every
 * kernel pays a small launch gap. TP collectives are synchronous in
 * Megatron, so they add to the forward and backward; DP, ZeRO and PP
 * collectives and the step-level ones are separate entries that the
 * Program places (lower.c) and the simulator times (simulate.c).
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
#include "planner/model.h"

/* ---- kernels ---------------------------------------------------------- */

/* A GEMM whose output C is read `c_reads` times besides being written
 * (1 for a weight-gradient GEMM accumulating into the gradient buffer,
 * beta = 1, as gradient accumulation over micro-batches does). */
static double gemm_time(const Device *d, double peak, double e, double m, double n, double k,
                        double batch, int c_reads)
{
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
    double traffic = (m * k + k * n + (1 + c_reads) * m * n) * e * batch / (d->hbm * PLAN_HBM_EFF);
    if (!(d->flops_16 > 2 * d->flops_fp32))   /* no tensor cores (a CPU): plain roofline */
        return fmax(2 * m * n * k * batch / (peak * PLAN_GEMM_EFF), traffic) + PLAN_KERNEL_GAP;
    double tm = ceil(m / PLAN_TILE_MN), tn = ceil(n / PLAN_TILE_MN);
    double kp = ceil(k / PLAN_TILE_K) * PLAN_TILE_K;
    double tiles = tm * tn * batch;
    /* one tile per SM at a time, so a wave is `sms` tiles of 2 * 128 *
     * 128 * kp FLOPs in parallel, each SM at peak/sms: a GEMM of 109
     * tiles on a 108-SM A100 takes two waves (wave quantisation) */
    double sms = d->sms > 0 ? d->sms : PLAN_WAVE_TILES;
    double waves = ceil(tiles / sms);
    double compute = waves * sms * 2.0 * PLAN_TILE_MN * PLAN_TILE_MN * kp / (peak * PLAN_GEMM_EFF);
    return fmax(compute, traffic) + PLAN_KERNEL_GAP;
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

double plan_gemm_pass_time(const Device *d, double peak, double e, int pass,
                           double m, double n, double k, double batch)
{
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
    double t = d->n_gemm > 0 ? gemm_measured(d, pass, m, n, k) : -1;
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
    double bw = d->stream > 0 ? d->stream : d->hbm * PLAN_HBM_EFF;
    return bytes / bw + kernels * (d->launch > 0 ? d->launch : PLAN_KERNEL_GAP);
}

static double stream_time(const Device *d, double bytes, int kernels)
{
    return plan_stream_time(d, bytes, kernels);
}

/* ---- one layer -------------------------------------------------------- */

typedef struct {
    double   fwd, bwd_in, bwd_w, rec;   /* compute, s */
    double   tp_f, tp_b, tp_rec;        /* TP collectives, s */
    double   flops_fwd, flops_rec;
    uint64_t params, params_full;       /* per TP rank; whole layer */
    double   act_kept, act_rebuild;
    double   tp_bytes;
} LayerTime;

static double tp_time(const Cluster *cl, PlanGroup g, const PlanTpColls *k, double bytes)
{
    if (g.size <= 1) return 0;
    return k->ar * plan_comm_cost(cl, COLL_ALL_REDUCE, ALGO_AUTO, g, bytes).time +
           k->ag * plan_comm_cost(cl, COLL_ALL_GATHER, ALGO_AUTO, g, bytes).time +
           k->rs * plan_comm_cost(cl, COLL_REDUCE_SCATTER, ALGO_AUTO, g, bytes).time;
}

/* Why: one place turns a layer's counted work into seconds, so every
 * consumer (fast path, lowering, report) agrees. */
static void layer_time(const Plan *p, const Layer *ly, const Layer *prev, const PlanCut *cut,
                       PlanGroup tpg, double peak, bool *ovf, LayerTime *t)
{
    const Device *d = &p->cluster.device;
    double e = plan_dtype_bytes(p->model.dtype);
    PlanLayerWork w;
    plan_layer_work(&p->model, ly, prev, cut, &w);
    memset(t, 0, sizeof *t);
    double core_f = 0;
    for (int i = 0; i < w.n_gemm; i++) {
        const PlanGemm *g = &w.gemm[i];
        double f = plan_gemm_pass_time(d, peak, e, PLAN_GEMM_FWD, g->m, g->n, g->k, g->batch);
        double dx = plan_gemm_pass_time(d, peak, e, PLAN_GEMM_DX, g->m, g->n, g->k, g->batch);
        /* dB = A^T dC: accumulated into the gradient buffer (beta = 1)
         * except for the attention core's, a fresh product */
        double dw = g->core && d->n_gemm == 0 ? gemm_time(d, peak, e, g->k, g->n, g->m, g->batch, 0)
                                              : plan_gemm_pass_time(d, peak, e, PLAN_GEMM_DW, g->m, g->n,
                                                                    g->k, g->batch);
        t->fwd += f;
        t->bwd_in += dx;
        if (g->core) { t->bwd_in += dw; core_f += f; }
        else t->bwd_w += dw;
    }
    t->fwd += stream_time(d, w.ew_fwd, w.ew_kernels);
    t->bwd_in += stream_time(d, w.ew_bwd, w.ew_kernels);
    /* the kernels that compute more than they move: measured seconds per
     * element (Device.act_*, softmax_*, planc calibrate; 0 analytically) */
    double sm = 0;
    if (ly->kind == LAYER_MLP) {
        double n = (double)cut->micro_batch * (double)p->model.seq * (double)ly->hidden / cut->tp;
        t->fwd += n * d->act_fwd;
        t->bwd_in += n * d->act_bwd;
    } else if (ly->kind == LAYER_ATTENTION) {
        double s = (double)p->model.seq;
        double n = (double)cut->micro_batch * (double)ly->heads / cut->tp * s * s;
        sm = n * d->softmax_fwd;
        t->fwd += sm;
        t->bwd_in += n * d->softmax_bwd;
    }
    t->tp_bytes = w.tp_bytes;
    t->tp_f = tp_time(&p->cluster, tpg, &w.tp_fwd, w.tp_bytes);
    t->tp_b = tp_time(&p->cluster, tpg, &w.tp_bwd, w.tp_bytes);
    t->flops_fwd = w.flops_fwd;
    if (cut->recompute == RECOMPUTE_FULL && w.recomputed) {
        t->rec = t->fwd;
        t->tp_rec = t->tp_f;
        t->flops_rec = w.flops_fwd;
    } else if (cut->recompute == RECOMPUTE_SELECTIVE && w.recomputed) {
        t->rec = core_f + stream_time(d, w.ew_core_fwd, w.ew_core_fwd > 0 ? 2 : 0) + sm;
        t->flops_rec = w.flops_core;
    }
    t->params = plan_layer_params(&p->model, ly, cut->tp, ovf);
    t->params_full = plan_layer_params_real(&p->model, ly, ovf);
    t->act_kept = w.act_kept;
    t->act_rebuild = w.recomputed ? w.act_none - w.act_kept : 0;
}

/* Memo key of a layer: its shape fields, without the source position. */
typedef struct {
    Layer key;
    bool  after_attention;
    LayerTime t;
} Memo;

static Layer layer_key(const Layer *l)
{
    Layer k;
    memset(&k, 0, sizeof k);
    k.kind = l->kind; k.position = l->position; k.heads = l->heads;
    k.kv_heads = l->kv_heads; k.hidden = l->hidden; k.act = l->act;
    k.norm = l->norm; k.bias = l->bias; k.tied = l->tied;
    return k;
}

static bool same_shape(const Layer *a, const Layer *b)
{
    return a->kind == b->kind && a->heads == b->heads && a->kv_heads == b->kv_heads &&
           a->hidden == b->hidden && a->act == b->act && a->norm == b->norm &&
           a->bias == b->bias && a->tied == b->tied && a->position == b->position;
}

/* ---- the cost table --------------------------------------------------- */

/* Time of a collective split into `n` equal buckets (each pays latency). */
static double bucketed(const Cluster *cl, PlanCollective c, PlanGroup g, double bytes, int n)
{
    if (n < 1) n = 1;
    return n * plan_comm_cost(cl, c, ALGO_AUTO, g, bytes / n).time;
}

/* A chunk's DP collectives from its gradient bytes and layers (one
 * bucket per layer): the reduction (all-reduce under ZeRO 0, else
 * reduce-scatter), ZeRO-3's parameter all-gather, ZeRO-1/2's all-gather
 * of the updated shards. */
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

static void dp_times(const Cluster *cl, const Layout *l, PlanGroup dpg, PlanChunkCost *c)
{
    c->reduce = c->gather = c->sync = 0;
    if (l->dp <= 1) return;
    double slow = beside_compute(cl, dpg);
    c->reduce = slow * bucketed(cl, l->zero == 0 ? COLL_ALL_REDUCE : COLL_REDUCE_SCATTER, dpg,
                                c->grad_bytes, c->layers);
    if (l->zero >= 3) c->gather = slow * bucketed(cl, COLL_ALL_GATHER, dpg, c->grad_bytes, c->layers);
    if (l->zero == 1 || l->zero == 2)
        c->sync = plan_comm_cost(cl, COLL_ALL_GATHER, ALGO_AUTO, dpg, c->grad_bytes).time;
}

void plan_chunk_dp_times(const Plan *p, const Layout *l, PlanChunkCost *c)
{
    c->grad_bytes = plan_dtype_bytes(p->model.dtype) * (double)c->params;
    dp_times(&p->cluster, l, plan_layout_group(&p->cluster, l->dp, l->tp, l->pp, GROUP_DP), c);
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
 *    2022 Sec. 4.2.2; Megatron's allreduce_layernorm_grads);
 *  - a tied head on another stage than the embedding keeps a copy of the
 *    word table: the first and the last stage all-reduce its gradient,
 *    V h / t elements per TP rank (Shoeybi et al. 2019; Narayanan et al.
 *    2021 Sec. 3, the embedding group; Megatron's _allreduce_embedding_grads);
 *  - the squared gradient norm, one fp32 (4 bytes), over all ranks (for
 *    clipping, logging and the NaN stop), every stage. */
static void step_collectives(const Plan *p, const Layout *l, int emb_chunk, int head_chunk,
                             PlanCosts *out)
{
    const Model *mo = &p->model;
    const Cluster *cl = &p->cluster;
    double e = plan_dtype_bytes(mo->dtype);
    if (l->sequence_parallel == 1 && l->tp > 1) {
        PlanGroup tpg = plan_layout_group(cl, l->dp, l->tp, l->pp, GROUP_TP);
        for (int k = 0; k < out->n_chunks; k++)
            for (int i = out->chunk[k].first; i < out->chunk[k].end; i++)
                out->sp_norm_bytes[k % l->pp] += e * (double)plan_layer_norm_params(mo, &mo->layers[i]);
        for (int s = 0; s < l->pp; s++)
            if (out->sp_norm_bytes[s] > 0)
                out->sp_norm[s] = plan_comm_cost(cl, COLL_ALL_REDUCE, ALGO_AUTO, tpg,
                                                 out->sp_norm_bytes[s]).time;
    }
    bool tied = false;
    for (int i = 0; i < mo->n_layers; i++) tied |= mo->layers[i].kind == LAYER_LM_HEAD && mo->layers[i].tied;
    if (tied && head_chunk >= 0 && emb_chunk >= 0 && head_chunk % l->pp != emb_chunk % l->pp) {
        PlanGroup eg = plan_layout_group(cl, l->dp, l->tp, l->pp, GROUP_EMBED);
        double bytes = e * ceil((double)plan_vocab_padded(mo, l->tp) * (double)mo->dim / l->tp);
        double t = plan_comm_cost(cl, COLL_ALL_REDUCE, ALGO_AUTO, eg, bytes).time;
        int ends[2] = { emb_chunk % l->pp, head_chunk % l->pp };
        for (int j = 0; j < 2; j++) { out->embed[ends[j]] = t; out->embed_bytes[ends[j]] = bytes; }
    }
    PlanGroup all = plan_layout_group(cl, l->dp, l->tp, l->pp, GROUP_ALL);
    out->norm_bytes = 4;
    out->norm = plan_comm_cost(cl, COLL_ALL_REDUCE, ALGO_AUTO, all, out->norm_bytes).time;
}

bool plan_costs(const Plan *p, const Layout *l, PlanCosts *out)
{
    const Model *mo = &p->model;
    const Cluster *cl = &p->cluster;
    memset(out, 0, sizeof *out);
    out->layout = *l;
    out->reduce_after_flush = p->grad_reduce_after_flush;
    out->p2p_blocking = p->p2p_blocking;
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
    if (!plan_split(mo, l->pp, l->chunks, out->chunk)) return false;
    out->peak_flops = mo->dtype == DTYPE_FP32 ? cl->device.flops_fp32 : cl->device.flops_16;

    PlanCut cut = { .micro_batch = l->micro_batch, .tp = l->tp,
                    .sp = l->sequence_parallel == 1, .recompute = l->recompute };
    PlanGroup tpg = plan_layout_group(cl, l->dp, l->tp, l->pp, GROUP_TP);
    PlanGroup dpg = plan_layout_group(cl, l->dp, l->tp, l->pp, GROUP_DP);
    PlanGroup ppg = plan_layout_group(cl, l->dp, l->tp, l->pp, GROUP_PP);
    PlanGroup pair = ppg.local >= 2 ? (PlanGroup){ 2, 2, 1 } : (PlanGroup){ 2, 1, 2 };
    out->overlap_compute = l->dp > 1 ? group_link(cl, dpg)->overlap_compute : 0;
    double e = plan_dtype_bytes(mo->dtype);
    bool ovf = false;

    int emb_chunk = -1, head_chunk = -1;
    /* memo of distinct layer shapes; cls[i] is layer i's entry. A layer
     * like the one two back (the same sublayer of the previous block)
     * takes its entry without a search. */
    Memo memo[16];
    int n_memo = 0;
    int *cls = malloc(sizeof(int) * (size_t)(mo->n_layers > 0 ? mo->n_layers : 1));
    if (!cls) return false;
    for (int k = 0; k < out->n_chunks; k++) {
        PlanChunkCost *c = &out->cost[k];
        const PlanChunk *ch = &out->chunk[k];
        double block_rebuild = 0;
        for (int i = ch->first; i < ch->end; i++) {
            const Layer *ly = &mo->layers[i], *prev = i ? &mo->layers[i - 1] : NULL;
            bool after = prev && prev->kind == LAYER_ATTENTION;
            const LayerTime *t = NULL;
            LayerTime tmp;
            cls[i] = -1;
            if (i >= 2 && cls[i - 2] >= 0 && memo[cls[i - 2]].after_attention == after &&
                same_shape(ly, &mo->layers[i - 2])) {
                cls[i] = cls[i - 2];
                t = &memo[cls[i]].t;
            }
            if (!t) {
                Layer key = layer_key(ly);
                for (int j = 0; j < n_memo && !t; j++)
                    if (memo[j].after_attention == after && !memcmp(&memo[j].key, &key, sizeof key)) {
                        t = &memo[j].t;
                        cls[i] = j;
                    }
                if (!t) {
                    layer_time(p, ly, prev, &cut, tpg, out->peak_flops, &ovf, &tmp);
                    if (n_memo < 16) {
                        memo[n_memo] = (Memo){ key, after, tmp };
                        cls[i] = n_memo;
                        t = &memo[n_memo++].t;
                    } else {
                        t = &tmp;
                    }
                }
            }
            if (ly->kind == LAYER_EMBEDDING) emb_chunk = k;
            if (ly->kind == LAYER_LM_HEAD) head_chunk = k;
            c->fwd += t->fwd + t->tp_f;
            c->bwd += t->bwd_in + t->bwd_w + t->rec + t->tp_b + t->tp_rec;
            c->bwd_weight += t->bwd_w;
            c->fwd_tp += t->tp_f;
            c->bwd_tp += t->tp_b + t->tp_rec;
            c->recompute += t->rec + t->tp_rec;
            c->flops_fwd += t->flops_fwd;
            c->flops_recompute += t->flops_rec;
            c->params += t->params;
            if (__builtin_add_overflow(out->params_total, t->params_full, &out->params_total)) ovf = true;
            c->act_kept += t->act_kept;
            /* recomputation rebuilds a whole block (attention + MLP) at once */
            block_rebuild = ly->kind == LAYER_ATTENTION ? t->act_rebuild : block_rebuild + t->act_rebuild;
            c->act_layer_max = fmax(c->act_layer_max, block_rebuild);
            if (t->params > c->layer_params_max) c->layer_params_max = t->params;
            c->layers++;
        }
        c->bwd_input = c->bwd - c->bwd_weight;
    }
    free(cls);
    /* a tied head on another stage than the embedding keeps its own copy
     * of the word table (Megatron), updated like any other weight */
    if (head_chunk >= 0 && emb_chunk >= 0 && head_chunk % l->pp != emb_chunk % l->pp) {
        for (int i = 0; i < mo->n_layers; i++)
            if (mo->layers[i].kind == LAYER_LM_HEAD && mo->layers[i].tied) {
                uint64_t v = (uint64_t)(plan_vocab_padded(mo, l->tp) / l->tp) * (uint64_t)mo->dim;
                out->cost[head_chunk].params += v;
            }
    }
    double T = (double)l->micro_batch * (double)mo->seq;
    for (int k = 0; k < out->n_chunks; k++) {
        PlanChunkCost *c = &out->cost[k];
        const PlanChunkCost *q = k ? &out->cost[k - 1] : NULL;
        if (q && q->params == c->params && q->layers == c->layers) {   /* same collectives */
            c->p2p_bytes = q->p2p_bytes; c->p2p = q->p2p; c->grad_bytes = q->grad_bytes;
            c->reduce = q->reduce; c->gather = q->gather; c->sync = q->sync;
            out->opt_params[k % l->pp] += c->params;
            continue;
        }
        c->p2p_bytes = e * T * (double)mo->dim / (l->sequence_parallel == 1 ? l->tp : 1);
        c->p2p = l->pp > 1 ? plan_comm_cost(cl, COLL_P2P, ALGO_AUTO, pair, c->p2p_bytes).time : 0;
        c->grad_bytes = e * (double)c->params;
        dp_times(cl, l, dpg, c);
        out->opt_params[k % l->pp] += c->params;
    }
    step_collectives(p, l, emb_chunk, head_chunk, out);
    for (int s = 0; s < l->pp; s++) {
        if (l->zero >= 1) out->opt_params[s] = (out->opt_params[s] + (uint64_t)l->dp - 1) / (uint64_t)l->dp;
        /* the AdamW step, and the program's fixed work of a step (logging,
         * the data batch, bookkeeping: Device.overhead, measured by planc
         * calibrate, else 0) once per step on every stage */
        out->opt[s] = stream_time(&cl->device, PLAN_ADAM_BYTES * (double)out->opt_params[s], 1) +
                      cl->device.overhead;
    }
    return !ovf;
}

void plan_costs_free(PlanCosts *c)
{
    free(c->chunk); free(c->cost); free(c->opt); free(c->opt_params);
    free(c->sp_norm); free(c->sp_norm_bytes); free(c->embed); free(c->embed_bytes);
    memset(c, 0, sizeof *c);
}
