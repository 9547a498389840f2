/*
 * layout.c: defaults for `auto` layout fields, layout validity, and the
 * split of the model's layers into pipeline chunks.
 *
 * This is the only place that decides which layers a stage runs; the
 * memory model, the cost model and the lowering all read plan_split().
 */
#include "planner/layout.h"

#include <stdio.h>
#include <string.h>

const char *plan_schedule_name(int s)
{
    switch (s) {   /* ORDER Schedule */
    case SCHED_GPIPE:       return "gpipe";
    case SCHED_1F1B:        return "1f1b";
    case SCHED_INTERLEAVED: return "interleaved";
    case SCHED_ZB_H1:       return "zb-h1";
    }
    return "auto";
}

const char *plan_recompute_name(int r)
{
    switch (r) {   /* ORDER Recompute */
    case RECOMPUTE_NONE:      return "none";
    case RECOMPUTE_SELECTIVE: return "selective";
    case RECOMPUTE_FULL:      return "full";
    }
    return "auto";
}

Layout plan_layout_defaults(const Plan *p)
{
    Layout l;
    if (p->has_layout) l = p->layout;
    else l = (Layout){ PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO,
                       PLAN_AUTO, PLAN_AUTO, PLAN_AUTO, PLAN_AUTO };
    int64_t gpus = p->cluster.nodes * p->cluster.gpus_per_node;
    if (l.tp == PLAN_AUTO) l.tp = 1;
    if (l.pp == PLAN_AUTO) l.pp = 1;
    if (l.dp == PLAN_AUTO) {
        int64_t mp = (int64_t)l.tp * l.pp;
        l.dp = mp > 0 && gpus >= mp ? (int)(gpus / mp) : 1;
    }
    if (l.zero == PLAN_AUTO) l.zero = 0;
    if (l.micro_batch == PLAN_AUTO) l.micro_batch = 1;
    if (l.global_batch == PLAN_AUTO) l.global_batch = (int64_t)l.dp * l.micro_batch;
    if (l.chunks == PLAN_AUTO)
        l.chunks = 1;
    if (l.schedule == PLAN_AUTO)
        l.schedule = l.chunks > 1 ? SCHED_INTERLEAVED : SCHED_1F1B;
    if (l.recompute == PLAN_AUTO) l.recompute = RECOMPUTE_NONE;
    if (l.sequence_parallel == PLAN_AUTO) l.sequence_parallel = 0;
    return l;
}

int64_t plan_micro_batches(const Layout *l)
{
    int64_t per = (int64_t)l->dp * l->micro_batch;
    return per > 0 ? l->global_batch / per : 0;
}

/* Heads (or kv heads, MLP width) that tp must divide. */
static bool tp_divides_layers(const Model *m, int tp, char *why, size_t len)
{
    if (tp == 1) return true;
    for (int i = 0; i < m->n_layers; i++) {
        const Layer *ly = &m->layers[i];
        if (ly->kind == LAYER_ATTENTION && (ly->heads % tp || ly->kv_heads % tp)) {
            snprintf(why, len, "tp %d does not divide the %lld heads (%lld kv heads) of layer %d",
                     tp, (long long)ly->heads, (long long)ly->kv_heads, i);
            return false;
        }
        if (ly->kind == LAYER_MLP && ly->hidden % tp) {
            snprintf(why, len, "tp %d does not divide the MLP width %lld of layer %d",
                     tp, (long long)ly->hidden, i);
            return false;
        }
    }
    return true;
}

bool plan_layout_check(const Plan *p, const Layout *l, char *why, size_t len)
{
    const Cluster *c = &p->cluster;
    int64_t gpus = c->nodes * c->gpus_per_node;
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->chunks < 1 || l->micro_batch < 1) {
        snprintf(why, len, "dp, tp, pp, chunks and micro_batch must be at least 1");
        return false;
    }
    if ((int64_t)l->dp * l->tp * l->pp != gpus) {
        snprintf(why, len, "dp %d x tp %d x pp %d = %lld GPUs, but cluster %s has %lld",
                 l->dp, l->tp, l->pp, (long long)l->dp * l->tp * l->pp,
                 c->name ? c->name : "", (long long)gpus);
        return false;
    }
    if (l->tp > c->gpus_per_node) {
        snprintf(why, len, "tp %d exceeds the %lld GPUs of a node (TP groups stay inside a node)",
                 l->tp, (long long)c->gpus_per_node);
        return false;
    }
    if (!tp_divides_layers(&p->model, l->tp, why, len)) return false;
    if (l->global_batch % ((int64_t)l->dp * l->micro_batch)) {
        snprintf(why, len, "global_batch %lld is not a multiple of dp %d x micro_batch %lld",
                 (long long)l->global_batch, l->dp, (long long)l->micro_batch);
        return false;
    }
    if (l->zero < 0 || l->zero > 3) {
        snprintf(why, len, "zero %d is not 0..3", l->zero);
        return false;
    }
    if (l->chunks > 1 && l->schedule != SCHED_INTERLEAVED) {
        snprintf(why, len, "chunks %d needs schedule interleaved", l->chunks);
        return false;
    }
    int64_t vs = (int64_t)l->pp * l->chunks;
    if (vs > PLAN_MAX_VSTAGES || vs > p->model.n_blocks) {
        snprintf(why, len, "pp %d x chunks %d = %lld pipeline chunks, but the model has %d blocks",
                 l->pp, l->chunks, (long long)vs, p->model.n_blocks);
        return false;
    }
    int64_t m = plan_micro_batches(l);
    if (l->schedule == SCHED_INTERLEAVED && l->pp > 1 && m % l->pp) {
        snprintf(why, len, "interleaved 1F1B needs the %lld micro-batches to be a multiple of pp %d",
                 (long long)m, l->pp);
        return false;
    }
    return true;
}

bool plan_split(const Model *m, int pp, int chunks, PlanChunk *out)
{
    int n = pp * chunks, B = m->n_blocks;
    if (n < 1 || B < n) return false;
    int base = B / n, extra = B % n;
    /* blocks per chunk: base, plus one for `extra` chunks taken from the
     * second chunk on, the first and the last chunk last (they carry the
     * embedding and the head) */
    for (int k = 0; k < n; k++) out[k].blocks = base;
    int lo = n > 2 ? 1 : 0, hi = n > 2 ? n - 2 : n - 1;
    for (int k = lo; k <= hi && extra > 0; k++) { out[k].blocks++; extra--; }
    for (int k = 0; k < n && extra > 0; k++)
        if (k < lo || k > hi) { out[k].blocks++; extra--; }

    /* walk the layers: a block starts at each attention layer; layers
     * before the first block go to chunk 0, those after the last block
     * (final norm, head) to chunk n-1 */
    int k = 0, cnt = 0;
    out[0].first = 0;
    for (int i = 0; i < m->n_layers; i++) {
        if (m->layers[i].kind != LAYER_ATTENTION) continue;
        if (cnt == out[k].blocks && k < n - 1) {
            out[k].end = i;
            out[++k].first = i;
            cnt = 0;
        }
        cnt++;
    }
    out[k].end = m->n_layers;
    return k == n - 1;
}
