/*
 * fp8_cost.c: what FP8 training costs (issue 27; planner/fp8.h declares
 * it, planner/fp8.c holds the recipes and their rule): the FP8 GEMM rate,
 * the casts and amax all-reduces, the memory items, the all-gathers' bytes.
 *
 * What is counted, per FP8 linear (forward GEMM (m x k)(k x n): input X
 * m x k, weight W k x n, output gradient dY m x n), per micro-batch:
 *  - the three GEMMs at the FP8 rate (plan_fp8_gemm_time);
 *  - the casts, memory-bound kernels at the device's stream rate: a cast
 *    reads the bf16 tensor (e bytes an element) and writes one byte an
 *    element per layout (plus its scales); current tensorwise scaling
 *    reads it once more for the amax first (TE's FP8 Current Scaling
 *    docs: "two tensor reads were needed - one to compute the amax, and
 *    one to apply the scaling"; delayed scaling takes the scale from the
 *    history and reads once; rowwise, blockwise and mxfp8 scales are local
 *    to a row or block, computed in the cast's one read).
 *    Layouts: Hopper's FP8 tensor cores take only the TN layout (K-major
 *    operands), so every tensor used in two GEMMs along different axes is
 *    quantized twice (TE's cast-transpose kernel writes both in one
 *    pass); rowwise, blockwise and mxfp8 scales run along K, so their
 *    tensors are quantized along both axes on any device; tensorwise and
 *    delayed on Blackwell (sm_100, whose tcgen05 MMAs read either major)
 *    need one.
 *    Transformer Engine casts X and W once each forward into both
 *    layouts, dY once backward; torchao (torchtitan) casts both operands
 *    of each GEMM from bf16 (it saves the bf16 X and W: torchao/float8/
 *    float8_linear.py, matmul_with_hp_or_float8_args), 6 casts, with one
 *    amax per tensor (torch.compile computes each tensor's amax once).
 *    Under all_gather with ZeRO-3 the weight is cast on its 1/dp shard
 *    before the gather (torchao's precompute_float8_dynamic_scale_for_fsdp;
 *    Megatron's fp8 params), and its backward layout is a transpose of the
 *    gathered fp8 weight (read and write one byte an element). TE's once-a-
 *    step cast of the updated master weights to fp8 params is not counted.
 *  - tensorwise amaxes of tensors split over tensor parallelism are
 *    all-reduced over the TP group so every rank scales alike: counted as
 *    one all-reduce of 4 bytes per operand (X and W forward, dY backward),
 *    latency-bound, on the compute stream; delayed scaling reduces its
 *    amax histories once per step (not counted: one all-reduce a step);
 *    rowwise, blockwise and mxfp8 need none. torchao's per-step all-reduce
 *    of the weights' amaxes under precompute_float8_dynamic_scale_for_fsdp
 *    is one collective a step, not counted.
 * Memory: plan_fp8_memory. Master weights, optimizer state, gradients and
 * checkpoints are unchanged. Under software planc it is what the generated
 * program allocates (codegen/program_template.c's FP8 section, planrt's
 * allocator kind fp8), not TE's: each FP8 linear's weight quantised once a
 * step into plan_fp8_layouts layouts and kept for the step (TE's fp8
 * weight and transpose; under ZeRO-3 over dp > 1 none are kept: each GEMM
 * quantises the gathered weight it uses), with one fp32 scale_inv per
 * scale block (planrt's prt_fp8_grid_of blocks); the activations' and
 * gradients' operands quantised per GEMM and freed after it (the program
 * keeps its inputs in the compute dtype and quantises x again for dW, so
 * nothing is saved in fp8: its largest GEMM's operands are the transient
 * item); recipe delayed's amax windows for every FP8 linear of the model
 * on every rank (each rank holds all histories: they are MAX-reduced over
 * the world and checkpointed by rank 0), amax_history fp32 each for x, W
 * and dY.
 */
#include "planner/fp8.h"

#include <math.h>
#include <string.h>
#include "planner/cost.h"
#include "planner/layout.h"
#include "planner/presets.h"

/* The measured points (kernel-rates.md, Azure ND_H100_v5, cuBLASLt fp8
 * after 10,000 warm-up iterations): FLOPs of one GEMM and its fraction of
 * the 1979 TFLOPS FP8 peak. */
static const struct { double flops, frac; } FP8_RATES[] = {
    { 2.0 * 8192.0 * 8192.0 * 8192.0, 1290.0 / 1979 },
    { 2.0 * 16384.0 * 16384.0 * 16384.0, 1377.0 / 1979 },
};

double plan_fp8_gemm_eff(const Device *d, double flops)
{
    (void)d;
    double x = log(flops > 0 ? flops : 1), x0 = log(FP8_RATES[0].flops), x1 = log(FP8_RATES[1].flops);
    double t = x <= x0 ? 0 : x >= x1 ? 1 : (x - x0) / (x1 - x0);
    double frac = FP8_RATES[0].frac + t * (FP8_RATES[1].frac - FP8_RATES[0].frac);
    /* they are the H100's sustained rates: the short-run rate is that over
     * its sustained fraction (presets.c's h100-sxm-80gb) */
    const Device *h = plan_device_preset("h100-sxm-80gb");
    return frac / (h ? plan_sustained(h) : 1);
}

double plan_fp8_gemm_time(const Device *d, int pass, double m, double n, double k, double batch)
{
    double eff = plan_fp8_gemm_eff(d, 2 * m * n * k);
    /* cost.c's roofline divides by peak x plan_gemm_eff(d): hand it the
     * peak that makes that product the FP8 rate, at the sustained clock */
    double peak = d->flops_fp8 * eff / plan_gemm_eff(d) * plan_sustained(d);
    return plan_gemm_pass_time(d, peak, 1.0, pass, m, n, k, batch);
}

int plan_fp8_layouts(const Plan *p)
{
    int r = p->software.fp8.recipe;
    bool per_tensor = r == PLAN_FP8_TENSORWISE || r == PLAN_FP8_DELAYED;
    return per_tensor && p->cluster.device.arch >= 100 ? 1 : 2;
}

/* Scale bytes per element of a tensor whose GEMM reduces over k elements
 * (rowwise: one fp32 per row; blockwise: one fp32 per 1 x 128 activation
 * block, per 128 x 128 weight block; mxfp8: one e8m0 byte per 32). */
static double scale_per_elem(const Plan *p, double k, bool weight)
{
    switch (p->software.fp8.recipe) {
    case PLAN_FP8_ROWWISE:   return 4.0 / k;
    case PLAN_FP8_BLOCKWISE: return weight ? 4.0 / (128 * 128) : 4.0 / 128;
    case PLAN_FP8_MXFP8:     return 1.0 / 32;
    default:                 return 0;
    }
}

/* One cast of n elements from e-byte elements into `lay` layouts. */
static double cast_bytes(double n, double e, int lay, double sb, bool amax)
{
    return n * e * (amax ? 2 : 1) + n * lay * (1 + sb);
}

void plan_fp8_casts(const Plan *p, double m, double n, double k, int tp, int dp, int zero, PlanFp8Casts *out)
{
    memset(out, 0, sizeof *out);
    const PlanFp8 *f = &p->software.fp8;
    double e = plan_dtype_bytes(p->model.dtype);
    bool amax = f->recipe == PLAN_FP8_TENSORWISE;
    int lay = plan_fp8_layouts(p);
    double X = m * k, W = k * n, dY = m * n;
    double sx = scale_per_elem(p, k, false), sw = scale_per_elem(p, k, true), sy = scale_per_elem(p, n, false);
    /* the weight: cast on its shard before an fp8 all-gather (ZeRO-3), its
     * second layout a transpose of the gathered fp8 weight */
    bool shard = f->all_gather && zero >= 3 && dp > 1;
    double w_fwd = shard ? cast_bytes(W / dp, e, 1, sw, amax) + (lay - 1) * 2 * W
                         : cast_bytes(W, e, plan_fp8_torchao(&p->software) ? 1 : lay, sw, amax);
    int ak = amax ? 2 : 1;   /* launches per cast: the amax pass, then the cast */
    if (plan_fp8_torchao(&p->software)) {
        /* forward: X, W into the forward's layout; backward: dY twice (dX,
         * dW), X again (dW) and W again (dX; a transpose of the gathered
         * fp8 weight under all_gather), one amax per tensor */
        out->fwd_bytes = cast_bytes(X, e, 1, sx, amax) + (shard ? cast_bytes(W / dp, e, 1, sw, amax) : w_fwd);
        out->bwd_bytes = cast_bytes(dY, e, 1, sy, amax) + cast_bytes(dY, e, 1, sy, false) +
                         cast_bytes(X, e, 1, sx, false) + (shard ? 2 * W : cast_bytes(W, e, 1, sw, false));
        out->fwd_kernels = 2 * ak;
        out->bwd_kernels = ak + 3;
    } else {
        /* TE: X and W once each into every layout, dY once backward */
        out->fwd_bytes = cast_bytes(X, e, lay, sx, amax) + w_fwd;
        out->bwd_bytes = cast_bytes(dY, e, lay, sy, amax);
        out->fwd_kernels = 2 * ak;
        out->bwd_kernels = ak;
    }
    if (amax && tp > 1) {
        out->fwd_amax = 2;
        out->bwd_amax = 1;
    }
}

void plan_fp8_cast_time(const Plan *p, const PlanFp8Casts *c, PlanGroup tpg, double *fwd, double *bwd,
                        double *ar_fwd, double *ar_bwd)
{
    const Device *d = &p->cluster.device;
    *fwd = c->fwd_bytes > 0 ? plan_stream_time(d, c->fwd_bytes, c->fwd_kernels) : 0;
    *bwd = c->bwd_bytes > 0 ? plan_stream_time(d, c->bwd_bytes, c->bwd_kernels) : 0;
    double ar = tpg.size > 1 ? plan_comm_cost(&p->cluster, COLL_ALL_REDUCE, ALGO_AUTO, tpg, 4).time : 0;
    *ar_fwd = c->fwd_amax * ar;
    *ar_bwd = c->bwd_amax * ar;
}

void plan_fp8_params(const Plan *p, int first, int end, int tp, PlanFp8Params *out)
{
    memset(out, 0, sizeof *out);
    const Model *m = &p->model;
    for (int i = first; i < end && i < m->n_layers; i++) {
        const Layer *ly = &m->layers[i];
        bool ovf = false;
        if (!plan_fp8_layer(p, ly)) {
            out->other_max = fmax(out->other_max, (double)plan_layer_params(m, ly, tp, &ovf));
            continue;
        }
        double w = (double)plan_layer_params(m, ly, tp, &ovf) - (double)plan_layer_norm_params(m, ly) -
                   (double)plan_layer_latent_norm_params(m, ly);
        out->params += w;
        out->layer_max = fmax(out->layer_max, w);
        out->linears += plan_layer_linears(ly);
    }
}

/* Elements of the linears' inputs one FP8 layer saves for its weight
 * gradients per micro-batch (model.c's kept tensors): attention the QKV
 * input (T h, /t under SP; the output projection's input is the attention
 * output, which the fused attention's backward keeps in bf16 too; MLA also
 * its normalised latents, T (q_lora + kv_lora)); MLP the
 * up (and gate) projection's input (T h, /t under SP) and the down
 * projection's (T f / t). */
static double linear_inputs(const Plan *p, const Layer *ly, const Layout *l)
{
    double T = (double)l->micro_batch * (double)p->model.seq, h = (double)p->model.dim, t = l->tp;
    double r = l->sequence_parallel == 1 ? 1 / t : 1;
    /* MLA: the down projections' (and q_proj's) input, and the up
       projections' inputs, the normalised latents (whole on every rank) */
    if (ly->kind == LAYER_ATTENTION && ly->attn == ATTN_MLA)
        return T * h * r + T * (double)(ly->q_lora_rank + ly->kv_lora_rank);
    if (ly->kind == LAYER_ATTENTION) return T * h * r;
    return T * h * r + T * (double)ly->hidden / t;
}

/* fp32 scale_inv blocks of a (olen x klen) operand quantised with blocks
 * along its GEMM's K (klen), as planrt's prt_fp8_grid_of cuts it: one for
 * tensorwise and delayed, one per K-vector rowwise, 1 x 128 (weights 128 x
 * 128) blockwise, 1 x 32 mxfp8; edge blocks cut short. */
static double grid_blocks(const Plan *p, bool weight, double klen, double olen)
{
    switch (p->software.fp8.recipe) {
    case PLAN_FP8_ROWWISE:   return olen;
    case PLAN_FP8_BLOCKWISE: return ceil(klen / 128) * (weight ? ceil(olen / 128) : olen);
    case PLAN_FP8_MXFP8:     return ceil(klen / 32) * olen;
    default:                 return 1;
    }
}

/* Bytes of one quantised operand: a code a byte, a 4-byte scale_inv a block. */
static double operand_bytes(const Plan *p, bool weight, double klen, double olen)
{
    return klen * olen + 4 * grid_blocks(p, weight, klen, olen);
}

/* planc's program, one FP8 linear of forward GEMM x (n x k) W^T (k x o):
 * *kept, its weight's copies for the step (0 when each GEMM quantises the
 * weight itself, `cached` false); *transient, the most bytes of quantised
 * operands alive at once in one of its GEMMs (the template's fp8_linear_*:
 * forward x along k; dX dY along o and W along o; dW dY and x along n). */
static void planc_linear(const Plan *p, bool cached, double n, double k, double o, double *kept,
                         double *transient)
{
    double wf = operand_bytes(p, true, k, o), wr = operand_bytes(p, true, o, k);   /* W along k; along o */
    double xf = operand_bytes(p, false, k, n), xr = operand_bytes(p, false, n, k);
    double yf = operand_bytes(p, false, o, n), yr = operand_bytes(p, false, n, o);
    if (plan_fp8_layouts(p) == 1) wr = wf;   /* one copy serves both */
    *kept = cached ? (plan_fp8_layouts(p) == 1 ? wf : wf + wr) : 0;
    double fwd = xf + (cached ? 0 : wf), dx = yf + (cached ? 0 : wr), dw = yr + xr;
    *transient = fmax(fwd, fmax(dx, dw));
}

/* planc's program over layers [first, end): the kept weight copies into
 * out->buffers, the largest GEMM's transient operands into out->transient. */
static void planc_memory(const Plan *p, const Layout *l, int first, int end, PlanFp8Mem *out)
{
    const Model *m = &p->model;
    bool cached = !(l->zero >= 3 && l->dp > 1);   /* ZeRO-3: the gathered weight quantised per GEMM */
    PlanCut cut = { .micro_batch = l->micro_batch, .tp = l->tp, .sp = l->sequence_parallel == 1,
                    .recompute = RECOMPUTE_NONE, .flash = plan_flash(&p->software) };
    for (int i = first; i < end && i < m->n_layers; i++) {
        const Layer *ly = &m->layers[i];
        if (!plan_fp8_layer(p, ly)) continue;
        PlanLayerWork w;
        plan_layer_work(m, ly, i ? &m->layers[i - 1] : NULL, &cut, &w);
        for (int j = 0; j < w.n_gemm; j++) {
            const PlanGemm *g = &w.gemm[j];
            if (!plan_fp8_gemm(p, ly, g)) continue;
            double kept, tr;
            planc_linear(p, cached, g->m, g->k, g->n, &kept, &tr);
            out->buffers += kept;
            out->copies += kept;
            out->transient = fmax(out->transient, tr);
        }
    }
}

/* planc's program: recipe delayed's amax windows, x, W and dY of each
 * FP8 linear of the whole model (two a block: QKV and output projection,
 * up and down), amax_history fp32 each; 0 for the other recipes. */
static double planc_histories(const Plan *p)
{
    const PlanFp8 *f = &p->software.fp8;
    if (f->recipe != PLAN_FP8_DELAYED) return 0;
    int n = 0;
    for (int i = 0; i < p->model.n_layers; i++) n += plan_fp8_layer(p, &p->model.layers[i]);
    return 2.0 * 3 * n * 4 * (double)f->amax_history;
}

void plan_fp8_memory(const Plan *p, const Layout *l, int first, int end, PlanFp8Mem *out)
{
    memset(out, 0, sizeof *out);
    if (!plan_fp8_on(&p->software)) return;
    if (plan_fp8_planc(&p->software)) {
        planc_memory(p, l, first, end, out);
        return;
    }
    const PlanFp8 *f = &p->software.fp8;
    PlanFp8Params q;
    plan_fp8_params(p, first, end, l->tp, &q);
    double e = plan_dtype_bytes(p->model.dtype);
    int lay = plan_fp8_layouts(p);
    bool te = !plan_fp8_torchao(&p->software), zero3 = l->zero >= 3 && l->dp > 1;
    if (zero3) {
        /* the two gathered layers (computing, prefetched) arrive in fp8 under
         * all_gather; the computing one's fp8 copy (and transpose) is made
         * from the bf16 one otherwise */
        /* memory.c sizes the two by the largest layer: in fp8 the FP8
         * layers' weights, the others' (embedding, head) in bf16 */
        if (f->all_gather)
            out->buffers += 2 * (fmax(q.other_max * e, q.layer_max) - fmax(q.other_max, q.layer_max) * e) +
                            (lay - 1) * q.layer_max;
        else out->buffers += lay * q.layer_max;
    } else if (te) {
        /* TE keeps each module's fp8 weight (and transpose) for the step;
         * under --fp8-param-gather the fp8 weight is the parameter itself */
        if (f->all_gather) {
            out->params -= (e - 1) * q.params;
            out->buffers += (lay - 1) * q.params;
        } else {
            out->buffers += lay * q.params;
        }
    } else {
        out->buffers += q.layer_max;   /* torchao: the computing layer's fp8 weight */
    }
    /* scales (scale and its inverse, fp32) of X, W, dY per linear; delayed:
     * their amax histories too */
    double per_tensor = 8 + (f->recipe == PLAN_FP8_DELAYED ? 4.0 * (double)f->amax_history : 0);
    out->buffers += 3.0 * q.linears * per_tensor;
    out->copies = out->buffers;   /* every buffer item above is an FP8 copy or its scales */
    /* TE saves the fp8 input of each linear (its columnwise copy, for dW)
     * instead of the bf16 one; counted where every activation is kept
     * (recompute none): the recomputed layouts keep what model.c says */
    if (te && l->recompute == RECOMPUTE_NONE) {
        const Model *m = &p->model;
        for (int i = first; i < end && i < m->n_layers; i++) {
            const Layer *ly = &m->layers[i];
            if (!plan_fp8_layer(p, ly)) continue;
            double sb = scale_per_elem(p, (double)m->dim, false);
            out->act_per_mb -= (e - 1 - sb) * linear_inputs(p, ly, l);
        }
    }
}

void plan_fp8_stage_memory(const Plan *p, const Layout *l, const PlanChunk *chunks, int s, PlanFp8Mem *out)
{
    memset(out, 0, sizeof *out);
    for (int v = 0; v < l->chunks; v++) {
        const PlanChunk *k = &chunks[v * l->pp + s];
        PlanFp8Mem x;
        plan_fp8_memory(p, l, k->first, k->end, &x);
        out->params += x.params;
        out->buffers += x.buffers;
        out->act_per_mb += x.act_per_mb;
        out->copies += x.copies;
        out->transient = fmax(out->transient, x.transient);
    }
    if (plan_fp8_on(&p->software) && plan_fp8_planc(&p->software)) {
        /* planc's program: one GEMM's operands at a time; every rank's histories */
        double h = planc_histories(p);
        out->buffers += out->transient + h;
        out->copies += out->transient + h;
    }
}

double plan_fp8_gather_bytes(const Plan *p, double params, double fp8_params)
{
    double e = plan_dtype_bytes(p->model.dtype);
    if (!plan_fp8_on(&p->software) || !p->software.fp8.all_gather) return e * params;
    return e * (params - fp8_params) + fp8_params;
}

double plan_fp8_gemm_fraction(const Plan *p, const Layout *l)
{
    if (!plan_fp8_on(&p->software)) return 0;
    const Model *m = &p->model;
    PlanCut cut = { .micro_batch = l->micro_batch, .tp = l->tp, .sp = l->sequence_parallel == 1,
                    .recompute = RECOMPUTE_NONE, .flash = plan_flash(&p->software) };
    double all = 0, fp8 = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *ly = &m->layers[i];
        PlanLayerWork w;
        plan_layer_work(m, ly, i ? &m->layers[i - 1] : NULL, &cut, &w);
        for (int j = 0; j < w.n_gemm; j++) {
            const PlanGemm *g = &w.gemm[j];
            double fl = 2 * g->m * g->n * g->k * g->batch;
            all += fl;
            if (plan_fp8_gemm(p, ly, g)) fp8 += fl;
        }
    }
    return all > 0 ? fp8 / all : 0;
}

