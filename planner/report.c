/*
 * report.c: what `planc check` prints — the resolved model, cluster and
 * layout, memory per stage, the time of one step item by item, and the
 * throughput figures — as text or as one JSON object.
 *
 * It computes nothing of its own: memory and the time breakdown come from
 * the fast path (plan_evaluate), the step time and bubble from lowering the
 * plan into its Program and simulating it (plan_lower, plan_simulate). When
 * a stage does not fit, the report still prints, names the stage and the
 * largest item on the error stream (stderr in planc check), and returns 1.
 */
#include "planner/fp8.h"
#include "planner/report.h"
#include "planner/stacks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "planner/comm.h"
#include "planner/cost.h"
#include "planner/layout.h"
#include "planner/model.h"
#include "planner/program.h"
#include "planner/simulate.h"

static const double GiB = 1073741824.0;

/* Integer with thousands separators (exact, any uint64_t). */
static const char *grouped(uint64_t v, char *buf)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

/* Same shape, same parameters: consecutive blocks print as one row. */
static bool same_layer(const Layer *a, const Layer *b)
{
    return plan_layer_same_shape(a, b);
}

/* Parameters of the model as laid out for tp (vocabulary padded,
 * plan_vocab_padded), or 0 when that equals the real count `params`. */
static uint64_t params_padded(const Plan *p, int tp, uint64_t params)
{
    uint64_t n;
    return plan_model_params_padded(&p->model, tp, &n) && n != params ? n : 0;
}

static void print_model(FILE *out, const Plan *p, uint64_t total, int tp)
{
    const Model *m = &p->model;
    static const char *dt[] = { "fp32", "bf16", "fp16" };   /* ORDER PlanDtype */
    char b1[32], b2[32], shape[96];
    fprintf(out, "model %s: %d layers (%d blocks), %s parameters, %s, seq %lld, vocab %lld, dim %lld\n",
            m->name ? m->name : "?", m->n_layers, m->n_blocks, grouped(total, b1), dt[m->dtype],
            (long long)m->seq, (long long)m->vocab, (long long)m->dim);
    fprintf(out, "  %-11s %-10s %-44s %16s %18s\n", "layers", "kind", "shape", "params each", "params");
    int i = 0;
    while (i < m->n_layers) {
        const Layer *l = &m->layers[i];
        /* a run of identical (attention, mlp) pairs, or of one layer kind */
        int period = (i + 1 < m->n_layers && l->kind == LAYER_ATTENTION) ? 2 : 1, reps = 1;
        while (i + (reps + 1) * period <= m->n_layers) {
            bool same = true;
            for (int k = 0; k < period && same; k++)
                same = same_layer(&m->layers[i + k], &m->layers[i + reps * period + k]);
            if (!same) break;
            reps++;
        }
        for (int k = 0; k < period; k++) {
            const Layer *lk = &m->layers[i + k];
            bool ovf = false;
            uint64_t each = plan_layer_params_real(m, lk, &ovf);
            char range[48];
            if (reps > 1) snprintf(range, sizeof range, "%d..%d", i + k, i + k + (reps - 1) * period);
            else snprintf(range, sizeof range, "%d", i + k);
            plan_layer_shape(m, lk, shape, sizeof shape);
            fprintf(out, "  %-11s %-10s %-44s %16s %18s%s\n", range, plan_layer_kind_name(lk->kind),
                    shape, grouped(each, b1), grouped(each * (uint64_t)reps, b2),
                    reps > 1 ? "" : "");
        }
        if (reps > 1) fprintf(out, "  %-11s (the %d rows above repeat %d times)\n", "", period, reps);
        i += period * reps;
    }
    fprintf(out, "  %-11s %-10s %-44s %16s %18s\n", "total", "", "", "", grouped(total, b1));
    uint64_t active;
    if (plan_model_has_moe(m) && plan_model_active_params(m, &active))
        fprintf(out, "  %-11s %-10s %-44s %16s %18s\n", "active", "", "per token: router + top_k + shared experts",
                "", grouped(active, b1));
    uint64_t padded = params_padded(p, tp, total);
    if (padded) {   /* the model as laid out: embedding and head rows padded for tp */
        int64_t mult = (m->vocab_multiple > 0 ? m->vocab_multiple : 1) * tp;
        snprintf(shape, sizeof shape, "vocab %lld padded to %lld rows (multiple of %lld)",
                 (long long)m->vocab, (long long)plan_vocab_padded(m, tp), (long long)mult);
        fprintf(out, "  %-11s %-10s %-44s %16s %18s\n", "padded", "", shape, "", grouped(padded, b1));
    }
}

static void print_cluster(FILE *out, const Cluster *c)
{
    fprintf(out, "cluster %s: %lld nodes x %lld GPUs = %lld x %s (%.1f GiB, %.4g TFLOPS 16-bit, "
                 "%.4g TFLOPS fp32, HBM %.4g TB/s)\n",
            c->name ? c->name : "?", (long long)c->nodes, (long long)c->gpus_per_node,
            (long long)(c->nodes * c->gpus_per_node), c->device.name ? c->device.name : "?",
            (double)c->device.memory / GiB, c->device.flops_16 / 1e12, c->device.flops_fp32 / 1e12,
            c->device.hbm / 1e12);
    fprintf(out, "  links per GPU per direction: intra %.1f GB/s, %.1f us; inter %.1f GB/s, %.1f us\n",
            c->intra.bandwidth / 1e9, c->intra.latency * 1e6, c->inter.bandwidth / 1e9,
            c->inter.latency * 1e6);
    if (plan_nvlink_domain(c) > c->gpus_per_node)
        fprintf(out, "  NVLink domain: %lld GPUs (%lld nodes) on the intra link\n", (long long)plan_nvlink_domain(c),
                (long long)(plan_nvlink_domain(c) / c->gpus_per_node));
    if (c->nodes_per_pod > 0 && c->nodes > c->nodes_per_pod)
        fprintf(out, "  pods: %lld of %lld nodes; pod link %.3g GB/s, %.1f us per GPU per direction\n",
                (long long)((c->nodes + c->nodes_per_pod - 1) / c->nodes_per_pod), (long long)c->nodes_per_pod,
                c->pod.bandwidth / 1e9, c->pod.latency * 1e6);
}

/* The kernel rates the step's times use (cost.c, presets.c), for a GPU:
 * the GEMM ceiling and the sustained clock, the attention kernel's
 * forward rate at the model's keys, the memory-bound kernels' stream. */
static void print_kernels(FILE *out, const Plan *p)
{
    const Device *d = &p->cluster.device;
    if (!(d->flops_16 > 2 * d->flops_fp32) || d->n_gemm > 0) return;   /* a CPU, or measured GEMMs */
    double stream = plan_stream_bw(d);
    fprintf(out, "  kernels: GEMMs up to %.1f %% of peak, x %.3g sustained; memory-bound %.3g TB/s",
            100 * plan_gemm_eff(d), plan_sustained(d), stream / 1e12);
    const Layer *att = NULL;
    for (int i = 0; i < p->model.n_layers && !att; i++)
        if (p->model.layers[i].kind == LAYER_ATTENTION) att = &p->model.layers[i];
    int k = p->software.attention_kernel;
    if (att && k != PLAN_ATTN_MATH) {
        double keys = (double)plan_attention_keys(&p->model, att), hd = (double)plan_head_dim(&p->model, att);
        bool causal = plan_flash_causal_fraction((double)p->model.seq, keys) < 1;
        fprintf(out, "; attention %s %.1f %% forward, %.1f %% backward", plan_attn_kernel_names[k],
                100 * plan_attn_rate(d, k, 0, hd, keys, causal), 100 * plan_attn_rate(d, k, 1, hd, keys, causal));
    }
    if (d->flops_fp8 > 0) fprintf(out, "; FP8 %.4g TFLOPS", d->flops_fp8 / 1e12);
    fputc('\n', out);
}

/* A group's line: its shape and the widest tier it spans (comm.c's
 * plan_group_tier), so the reader sees which link its collectives pay. */
static void print_group(FILE *out, const char *name, PlanGroup g)
{
    static const char *const link[] = { "intra", "inter", "pod" };   /* ORDER PlanTier */
    PlanTier t = plan_group_tier(g);
    fprintf(out, "  %s group: %lld GPUs, %lld per node over %lld node%s", name, (long long)g.size,
            (long long)g.local, (long long)g.nodes, g.nodes > 1 ? "s" : "");
    if (t == TIER_PODS) fprintf(out, " in %lld pods", (long long)g.pods);
    fprintf(out, " (tier %s: %s link)\n", plan_tier_name(t), link[t]);
}

/* The parts `recompute` covers, top-level keys beside "layout" and only
 * when the plan names them (the layout object keeps DESIGN.md's keys). */
static void json_recompute_parts(FILE *out, const Layout *l, const char *nl)
{
    if (l->recompute == RECOMPUTE_SELECTIVE && l->recompute_modules) {
        fprintf(out, "\"recompute_modules\": [");
        for (int m = 0, k = 0; m < PLAN_N_RECOMPUTE_MODULES; m++)
            if (l->recompute_modules & PLAN_RC_BIT(m))
                fprintf(out, "%s\"%s\"", k++ ? ", " : "", plan_recompute_module_name(m));
        fprintf(out, "],%s", nl);
    }
    if (l->recompute == RECOMPUTE_FULL && l->recompute_layers > 0)
        fprintf(out, "\"recompute_layers\": %d, \"recompute_method\": \"%s\",%s", l->recompute_layers,
                l->recompute_method == PLAN_RC_METHOD_UNIFORM ? "uniform" : "block", nl);
    if (l->recompute == RECOMPUTE_FULL && l->recompute_every > 0)
        fprintf(out, "\"recompute_every\": %d,%s", l->recompute_every, nl);
}

static void print_layout(FILE *out, const Plan *p, const Layout *l, int64_t n_micro)
{
    char rc[160];
    plan_recompute_describe(l, rc, sizeof rc);
    char cp[48] = "";
    if (plan_cp(l) > 1) snprintf(cp, sizeof cp, " x cp %d (cp_comm %s)", plan_cp(l), plan_cp_comm_name(plan_cp_comm(l)));
    fprintf(out, "layout: dp %d x tp %d%s x pp %d, zero %d, micro_batch %lld, global_batch %lld "
                 "(%lld micro-batches per pipeline), schedule %s, chunks %d, recompute %s, "
                 "sequence_parallel %s\n",
            l->dp, l->tp, cp, l->pp, l->zero, (long long)l->micro_batch, (long long)l->global_batch,
            (long long)n_micro, plan_schedule_name(l->schedule), l->chunks,
            rc, l->sequence_parallel == 1 ? "on" : "off");
    if (plan_cp(l) > 1)   /* issue 26: the ranks tp, cp, dp, pp */
        fprintf(out, "context parallel: each rank holds %lld of a sequence's %lld tokens (chunks r and %d-r "
                     "of %d); rank = tp + TP*(cp + CP*(dp + DP*pp))\n",
                (long long)(p->model.seq / plan_cp(l)), (long long)p->model.seq, 2 * plan_cp(l) - 1,
                2 * plan_cp(l));
    char sw[512];
    plan_software_describe(p, l->zero, sw, sizeof sw);
    fprintf(out, "software: %s\n", sw);
    if (plan_fp8_on(&p->software)) {
        char f8[512];
        plan_fp8_describe(p, f8, sizeof f8);
        fprintf(out, "fp8: %s; %.1f %% of the GEMM FLOPs in FP8\n", f8, 100 * plan_fp8_gemm_fraction(p, l));
    }
    print_group(out, "TP", plan_layout_group(&p->cluster, plan_dp_cp(l), l->tp, l->pp, GROUP_TP));
    if (plan_cp(l) > 1) {   /* cp ranks tp apart; the gradient group is dp x cp of them */
        print_group(out, "CP", plan_cp_group(&p->cluster, l->tp, plan_cp(l)));
        print_group(out, "DP x CP (gradients)", plan_layout_group(&p->cluster, plan_dp_cp(l), l->tp, l->pp, GROUP_DP));
    } else {
        print_group(out, "DP", plan_layout_group(&p->cluster, l->dp, l->tp, l->pp, GROUP_DP));
    }
    print_group(out, "PP", plan_layout_group(&p->cluster, plan_dp_cp(l), l->tp, l->pp, GROUP_PP));
    if (plan_model_has_moe(&p->model)) {   /* issue 17: ep consecutive DP ranks of one TP rank */
        int ep = plan_ep(l);
        fprintf(out, "  ep %d: each GPU holds experts / %d of every mixture; expert gradients over %d "
                     "DP ranks, dense over %d\n", ep, ep, plan_expert_dp(l), l->dp);
        if (plan_etp(l) != l->tp)
            fprintf(out, "  etp %d: each expert split over %d ranks (dense layers over tp %d)\n", plan_etp(l),
                    plan_etp(l), l->tp);
        const Software *w = &p->software;
        fprintf(out, "  moe: dispatcher %s, all-to-alls %s, busiest EP rank %.3g x the mean rows\n",
                    w->moe_dispatcher == PLAN_MOE_DEEPEP ? "deepep (hierarchical)" : "alltoall",
                    w->overlap_moe_a2a ? "overlapped with another micro-batch (steady state)"
                                       : "synchronous inside the layer",
                    plan_moe_imbalance(w));
        print_group(out, "EP", plan_ep_group(&p->cluster, plan_etp(l), ep));
    }
}

/* Stage s's layer ranges, every one, "a-b,c-d,..." into buf (grown as
 * needed; NULL when out of memory): with interleaving a stage holds
 * `chunks` ranges, chunk v being virtual stage v * pp + s. */
static char *stage_ranges(const PlanChunk *chunks, int pp, int n_chunks, int s)
{
    size_t cap = 24 * (size_t)n_chunks + 1, o = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    buf[0] = '\0';
    for (int v = 0; v < n_chunks; v++) {
        const PlanChunk *c = &chunks[v * pp + s];
        o += (size_t)snprintf(buf + o, cap - o, "%s%d-%d", v ? "," : "", c->first, c->end - 1);
    }
    return buf;
}

static void print_memory(FILE *out, const PlanEval *ev, const PlanChunk *chunks)
{
    int v = ev->layout.chunks;
    fprintf(out, "\nmemory per GPU (GiB)\n");
    fprintf(out, "%5s %-10s %8s %8s %9s %11s %8s %8s %8s %8s %9s %9s\n", "stage", "layers", "params",
            "grads", "optimizer", "activations", "buffers", "reserve", "total", "capacity",
            "headroom", "in-flight");
    for (int s = 0; s < ev->pp; s++) {
        const PlanStageMem *m = &ev->stages[s];
        /* one range fits the column; several are listed in full below */
        char layers[32];
        const PlanChunk *c = &chunks[s];
        if (v > 1) snprintf(layers, sizeof layers, "%d ranges", v);
        else snprintf(layers, sizeof layers, "%d-%d", c->first, c->end - 1);
        fprintf(out, "%5d %-10s %8.2f %8.2f %9.2f %11.2f %8.2f %8.2f %8.2f %8.2f %9.2f %9.2f%s\n", s,
                layers, m->params_bytes / GiB, m->grads_bytes / GiB, m->optimizer_bytes / GiB,
                m->activations_bytes / GiB, m->buffers_bytes / GiB, m->reserve_bytes / GiB,
                m->total_bytes / GiB, m->capacity / GiB, (double)m->headroom / GiB, m->in_flight,
                m->headroom < 0 ? "  DOES NOT FIT" : "");
    }
    if (v == 1) return;
    fprintf(out, "layers of each stage (%d interleaved chunks, chunk v of stage s is virtual stage v*%d+s)\n",
            v, ev->pp);
    for (int s = 0; s < ev->pp; s++) {
        char *r = stage_ranges(chunks, ev->pp, v, s);
        fprintf(out, "%5d %s\n", s, r ? r : "(out of memory)");
        free(r);
    }
}

/* When in the step each kind of each stage peaks (the Program's op and its
 * simulated start): memory.c's plan_memory_peaks over the lowered Program. */
static void print_peaks(FILE *out, const PlanEval *ev, const PlanProgram *prog, const PlanSimResult *sim)
{
    static const char *const kind[PLAN_MEM_KINDS] = { "params", "grads", "optimizer", "activations",
                                                      "buffers" };
    fprintf(out, "when each item peaks in the step (the Program's op, its predicted start)\n");
    for (int s = 0; s < ev->pp && s < prog->pp; s++) {
        const PlanStageMem *m = &ev->stages[s];
        const uint64_t bytes[PLAN_MEM_KINDS] = { m->params_bytes, m->grads_bytes, m->optimizer_bytes,
                                                 m->activations_bytes, m->buffers_bytes };
        int at[PLAN_MEM_KINDS];
        const PlanStageProgram *sp = &prog->stages[s];
        plan_memory_peaks(sp, ev->layout.zero, at);
        fprintf(out, "%5d", s);
        for (int k = 0; k < PLAN_MEM_KINDS; k++) {
            if (!bytes[k]) continue;
            if (at[k] < 0) { fprintf(out, "  %s %.2f whole step;", kind[k], bytes[k] / GiB); continue; }
            const PlanOp *o = &sp->ops[at[k]];
            fprintf(out, "  %s %.2f at %s", kind[k], bytes[k] / GiB, plan_op_name(o->kind));
            if (o->mb >= 0) fprintf(out, " mb %d chunk %d", o->mb, o->chunk);
            fprintf(out, " (t %.4g s);", sim->span[s][at[k]].start);
        }
        fputc('\n', out);
    }
}

/* The breakdown of the critical stage's step (evaluate.h: the items add up
 * to the step); `bubble` is its fraction, by the one definition of
 * simulate.h. */
static void print_times(FILE *out, const PlanEval *ev, double step, double bubble, double closed)
{
    const PlanTimes *t = &ev->times;
    fprintf(out, "\ntime per step (seconds, stage %d, the one that ends last)\n", ev->critical);
    fprintf(out, "  %-28s %10.4f   (of which recomputation %.4f)\n", "compute", t->compute, t->recompute);
    if (t->fp8_cast > 0)
        fprintf(out, "  %-28s %10.4f   of compute (memory-bound quantisation of X, W, dY; amax passes)\n",
                "FP8 casts", t->fp8_cast);
    fprintf(out, "  %-28s %10.4f   exposed (synchronous)\n", "TP collectives", t->tp);
    if (ev->layout.ep > 1)
        fprintf(out, "  %-28s %10.4f   exposed (dispatch + combine; how they run: the layout's moe line)\n",
                "EP all-to-all", t->ep);
    if (plan_cp(&ev->layout) > 1)
        fprintf(out, "  %-28s %10.4f   total, %.4f exposed, %.4f overlapped (%s)\n", "CP attention comm",
                t->cp_total, t->cp, fmax(0, t->cp_total - t->cp), plan_cp_comm_name(plan_cp_comm(&ev->layout)));
    fprintf(out, "  %-28s %10.4f   exposed (blocking sends)\n", "PP send/recv", t->p2p);
    fprintf(out, "  %-28s %10.4f   total, %.4f exposed, %.4f overlapped\n", "DP gradient reduce",
            t->dp_total, t->dp_exposed, fmax(0, t->dp_total - t->dp_exposed));
    fprintf(out, "  %-28s %10.4f   total, %.4f exposed, %.4f overlapped\n", "ZeRO-3 parameter gathers",
            t->gather_total, t->gather_exposed, fmax(0, t->gather_total - t->gather_exposed));
    fprintf(out, "  %-28s %10.4f   exposed\n", "ZeRO-1/2 parameter all-gather", t->sync);
    if (t->sp_norm > 0)
        fprintf(out, "  %-28s %10.4f   exposed (TP group: SP norm gains, q/k norm gains, MLA down projections)\n",
                "SP norm all-reduce", t->sp_norm);
    if (t->embed > 0)
        fprintf(out, "  %-28s %10.4f   exposed (first + last stage, before the optimizer)\n",
                "tied-embedding all-reduce", t->embed);
    fprintf(out, "  %-28s %10.4f   exposed (all ranks, one fp32)\n", "gradient-norm all-reduce", t->norm);
    fprintf(out, "  %-28s %10.4f\n", "optimizer (AdamW)", t->optimizer);
    fprintf(out, "  %-28s %10.4f   (bubble fraction %.4f: waiting for other stages / compute)\n",
            "pipeline bubble", t->bubble, bubble);
    fprintf(out, "  %-28s %10.4f   simulated (fast path %.4f)\n", "step", step, closed);
}

/* check --json's "fp8" object (only with an fp8 plan): the recipe, the
 * format, the FP8 share of the GEMM FLOPs, the casts' seconds per step on
 * the critical stage, and what FP8 adds to the fullest stage's bytes
 * (negative: saves; planner/fp8.c's plan_fp8_stage_memory). */
static void json_fp8(FILE *out, const Plan *p, const PlanEval *ev, const char *nl)
{
    const Layout *l = &ev->layout;
    const PlanFp8 *f = &p->software.fp8;
    double extra = 0;
    PlanChunk *chunks = calloc((size_t)(l->pp * l->chunks), sizeof *chunks);
    if (ev->valid && ev->stages && chunks && plan_split(&p->model, l->pp, l->chunks, chunks)) {
        PlanFp8Mem m;
        int s = ev->worst_stage;
        plan_fp8_stage_memory(p, l, chunks, s, &m);
        extra = m.params + m.buffers + ev->stages[s].in_flight * m.act_per_mb;
    }
    free(chunks);
    fprintf(out, "\"fp8\": {\"recipe\": \"%s\", \"format\": \"%s\", \"all_gather\": %s, "
                 "\"first_last_bf16\": %s, \"amax_history\": %lld, \"software\": \"%s\", "
                 "\"gemm_fraction\": %.6f, \"cast_time_s\": %.9g, \"extra_bytes\": %.0f},%s",
            plan_fp8_recipe_names[f->recipe], plan_fp8_format_names[f->format], f->all_gather ? "true" : "false",
            f->first_last_bf16 ? "true" : "false", (long long)f->amax_history,
            plan_fp8_torchao(&p->software) ? "torchao" : "transformer_engine", plan_fp8_gemm_fraction(p, l),
            ev->times.fp8_cast, extra, nl);
}

void plan_report_json(FILE *out, const Plan *p, const PlanEval *ev, double step, double bubble,
                      const char *error, const char *dominant, bool compact)
{
    const Layout *l = &ev->layout;
    const char *nl = compact ? " " : "\n  ", *item = compact ? "" : "\n    ";
    fprintf(out, "{%s\"model\": ", compact ? "" : "\n  ");
    json_str(out, p->model.name);
    fprintf(out, ",%s\"cluster\": ", nl);
    json_str(out, p->cluster.name);
    fprintf(out, ",%s\"feasible\": %s,%s\"params\": %llu,%s\"active_params\": %llu,%s", nl,
            ev->feasible ? "true" : "false", nl, (unsigned long long)ev->params, nl,
            (unsigned long long)ev->active_params, nl);
    uint64_t padded = params_padded(p, l->tp, ev->params);
    if (padded) fprintf(out, "\"params_padded\": %llu,%s", (unsigned long long)padded, nl);
    fprintf(out, "\"layout\": {\"dp\": %d, \"tp\": %d, \"pp\": %d, \"zero\": %d, \"micro_batch\": %lld, "
                 "\"global_batch\": %lld, \"schedule\": \"%s\", \"chunks\": %d, \"recompute\": \"%s\", "
                 "\"sequence_parallel\": %s, \"ep\": %d, \"etp\": %d, \"cp\": %d, \"cp_comm\": \"%s\"},%s",
            l->dp, l->tp, l->pp, l->zero, (long long)l->micro_batch, (long long)l->global_batch,
            plan_schedule_name(l->schedule), l->chunks, plan_recompute_name(l->recompute),
            l->sequence_parallel == 1 ? "true" : "false", plan_ep(l), plan_etp(l), plan_cp(l),
            plan_cp_comm_name(plan_cp_comm(l)), nl);
    /* the resolved software stack (planner/stacks.c) */
    fprintf(out, "\"software\": ");
    plan_software_json(out, p, l->zero);
    fprintf(out, ",%s", nl);
    if (plan_fp8_on(&p->software)) json_fp8(out, p, ev, nl);
    json_recompute_parts(out, l, nl);
    /* where each group lands on the tiers (plan_group_tier) */
    static const char *const gname[] = { "tp", "dp", "pp", "cp" };
    PlanGroupKind gk[] = { GROUP_TP, GROUP_DP, GROUP_PP };
    fprintf(out, "\"groups\": {");
    for (int i = 0; i < (plan_cp(l) > 1 ? 4 : 3); i++) {   /* dp: the gradient group, dp x cp */
        PlanGroup g = i == 3 ? plan_cp_group(&p->cluster, l->tp, plan_cp(l))
                             : plan_layout_group(&p->cluster, plan_dp_cp(l), l->tp, l->pp, gk[i]);
        fprintf(out, "%s\"%s\": {\"size\": %lld, \"per_node\": %lld, \"nodes\": %lld, \"pods\": %lld, "
                     "\"tier\": \"%s\"}", i ? ", " : "", gname[i], (long long)g.size, (long long)g.local,
                (long long)g.nodes, (long long)(g.pods > 1 ? g.pods : 1), plan_tier_name(plan_group_tier(g)));
    }
    fprintf(out, "},%s", nl);
    if (error) {
        fprintf(out, "\"error\": ");
        json_str(out, error);
        fprintf(out, ",%s", nl);
    }
    if (!ev->valid || !ev->stages) {   /* every key present; the figures do not exist */
        fprintf(out, "\"peak_memory_bytes\": null,%s\"step_time_s\": null,%s\"tokens_per_s\": null,%s"
                     "\"tflops_per_gpu\": null,%s\"mfu\": null,%s\"hfu\": null,%s"
                     "\"bubble_fraction\": null,%s\"stages\": []%s}", nl, nl, nl, nl, nl, nl, nl,
                compact ? "" : "\n");
        return;
    }
    double scale = step > 0 ? ev->step_time / step : 1;   /* rates at the simulated step time */
    fprintf(out, "\"micro_batches\": %lld,%s\"peak_memory_bytes\": %llu,%s", (long long)ev->n_micro, nl,
            (unsigned long long)ev->peak_memory, nl);
    fprintf(out, "\"step_time_s\": %.9g,%s\"step_time_closed_form_s\": %.9g,%s", step, nl, ev->step_time, nl);
    fprintf(out, "\"tokens_per_s\": %.9g,%s\"tflops_per_gpu\": %.9g,%s\"mfu\": %.6f,%s\"hfu\": %.6f,%s",
            ev->tokens_per_s * scale, nl, ev->tflops_per_gpu * scale, nl, ev->mfu * scale, nl,
            ev->hfu * scale, nl);
    fprintf(out, "\"bubble_fraction\": %.6f,%s", bubble, nl);
    if (dominant) fprintf(out, "\"dominant\": \"%s\",%s", dominant, nl);
    const PlanTimes *t = &ev->times;
    fprintf(out, "\"times\": {\"compute_s\": %.9g, \"recompute_s\": %.9g, \"tp_s\": %.9g, \"p2p_s\": %.9g, "
                 "\"dp_total_s\": %.9g, \"dp_exposed_s\": %.9g, \"gather_total_s\": %.9g, "
                 "\"gather_exposed_s\": %.9g, \"sync_s\": %.9g, \"optimizer_s\": %.9g, \"bubble_s\": %.9g, "
                 "\"sp_norm_s\": %.9g, \"embed_s\": %.9g, \"norm_s\": %.9g, \"ep_s\": %.9g},%s",
            t->compute, t->recompute, t->tp, t->p2p, t->dp_total, t->dp_exposed, t->gather_total,
            t->gather_exposed, t->sync, t->optimizer, t->bubble, t->sp_norm, t->embed, t->norm, t->ep, nl);
    PlanChunk *ch = calloc((size_t)l->pp * (size_t)l->chunks, sizeof *ch);
    bool split = ch && plan_split(&p->model, l->pp, l->chunks, ch);
    fprintf(out, "\"stages\": [");
    for (int s = 0; s < ev->pp; s++) {
        const PlanStageMem *m = &ev->stages[s];
        fprintf(out, "%s%s{\"stage\": %d, ", s ? "," : "", s ? (compact ? " " : item) : item, s);
        /* layer ranges [first, end), one per chunk of the stage: with
         * interleaving a stage's layers are not one range */
        if (split && l->chunks == 1)
            fprintf(out, "\"first_layer\": %d, \"end_layer\": %d, ", ch[s].first, ch[s].end);
        if (split) {
            fprintf(out, "\"layers\": [");
            for (int v = 0; v < l->chunks; v++)
                fprintf(out, "%s[%d, %d]", v ? ", " : "", ch[v * l->pp + s].first, ch[v * l->pp + s].end);
            fprintf(out, "], ");
        }
        fprintf(out, "\"params_bytes\": %llu, \"grads_bytes\": %llu, \"optimizer_bytes\": %llu, "
                     "\"activations_bytes\": %llu, \"buffers_bytes\": %llu, \"reserve_bytes\": %llu, "
                     "\"total_bytes\": %llu, \"capacity_bytes\": %llu, \"headroom_bytes\": %lld, "
                     "\"in_flight\": %.4g, \"fits\": %s",
                (unsigned long long)m->params_bytes, (unsigned long long)m->grads_bytes,
                (unsigned long long)m->optimizer_bytes, (unsigned long long)m->activations_bytes,
                (unsigned long long)m->buffers_bytes, (unsigned long long)m->reserve_bytes,
                (unsigned long long)m->total_bytes, (unsigned long long)m->capacity,
                (long long)m->headroom, m->in_flight, m->headroom < 0 ? "false" : "true");
        /* of buffers_bytes, the FP8 copies (tests/mem's f check holds the
         * program's fp8 allocations to it) */
        if (plan_fp8_on(&p->software)) fprintf(out, ", \"fp8_bytes\": %llu", (unsigned long long)m->fp8_bytes);
        fprintf(out, "}");
    }
    fprintf(out, "%s]%s}", compact ? "" : "\n  ", compact ? "" : "\n");
    free(ch);
}

int plan_check_report(FILE *out, FILE *err, const Plan *p, bool json)
{
    PlanEval ev;
    plan_evaluate(p, &ev);
    const char *file = p->file ? p->file : "planc";
    if (!json) {
        print_model(out, p, ev.params, ev.layout.tp);
        print_cluster(out, &p->cluster);
        print_kernels(out, p);
        print_layout(out, p, &ev.layout, plan_micro_batches(&ev.layout));
    }
    if (!ev.valid) {
        fprintf(err, "%s: error: %s\n", file, ev.why);
        if (json) { plan_report_json(out, p, &ev, 0, 0, ev.why, NULL, false); fputc('\n', out); }
        plan_eval_free(&ev);
        return 1;
    }
    /* the full path: the Program the code generator emits, simulated */
    double step = ev.step_time, bubble = ev.bubble_fraction;
    PlanProgram prog;
    PlanSimResult sim;
    char why[256];
    bool lowered = plan_lower(p, &prog, why, sizeof why), simulated = false;
    if (lowered && (simulated = plan_simulate(&prog, &sim))) {
        step = sim.step_time;
        bubble = sim.bubble_fraction;
    }
    PlanChunk *chunks = calloc((size_t)ev.layout.pp * (size_t)ev.layout.chunks, sizeof *chunks);
    if (!chunks || !plan_split(&p->model, ev.layout.pp, ev.layout.chunks, chunks)) {
        fprintf(err, "%s: error: out of memory\n", file);
        if (simulated) plan_sim_free(&sim);
        if (lowered) plan_program_free(&prog);
        free(chunks);
        plan_eval_free(&ev);
        return 1;
    }
    if (json) {
        plan_report_json(out, p, &ev, step, bubble, ev.feasible ? NULL : ev.why, NULL, false);
        fputc('\n', out);
    } else {
        print_memory(out, &ev, chunks);
        if (simulated) print_peaks(out, &ev, &prog, &sim);
        print_times(out, &ev, step, bubble, ev.step_time);
        double scale = ev.step_time / step;   /* rates at the simulated step time */
        fprintf(out, "\nthroughput: %.0f tokens/s, %.4g TFLOP/s per GPU (model), %.4g with recomputation\n",
                ev.tokens_per_s * scale, ev.tflops_per_gpu * scale,
                ev.tflops_per_gpu * scale * (ev.model_flops > 0 ? ev.hw_flops / ev.model_flops : 1));
        fprintf(out, "MFU %.1f %%, HFU %.1f %% (of %.4g TFLOPS dense per GPU)\n", 100 * ev.mfu * scale,
                100 * ev.hfu * scale,
                (p->model.dtype == DTYPE_FP32 ? p->cluster.device.flops_fp32 : p->cluster.device.flops_16) / 1e12);
        if (ev.feasible)
            fprintf(out, "fits: yes (least headroom %.2f GiB on stage %d)\n",
                    (double)ev.stages[ev.worst_stage].headroom / GiB, ev.worst_stage);
        else
            fprintf(out, "fits: no — %s\n", ev.why);
    }
    if (!ev.feasible) fprintf(err, "%s: error: %s\n", file, ev.why);
    int rc = ev.feasible ? 0 : 1;
    if (simulated) plan_sim_free(&sim);
    if (lowered) plan_program_free(&prog);
    free(chunks);
    plan_eval_free(&ev);
    return rc;
}
