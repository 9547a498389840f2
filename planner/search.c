/*
 * search.c: `planc search`, exhaustive and fast.
 *
 * The space is every combination of dp x tp x pp = the cluster's GPUs (tp
 * dividing every layer's heads, kv heads and MLP width, inside a node
 * unless asked otherwise; pp up to the blocks, uneven splits allowed),
 * ZeRO 0-3, micro-batches dividing the per-DP-rank batch, the schedules
 * gpipe, 1f1b, zb-h1 and interleaved with every chunk count v >= 2 that
 * fits (pp*v <= blocks, micro-batches a multiple of pp), recomputation
 * none/selective/full, sequence parallelism on/off when tp > 1 and, on a
 * model with mixtures of experts, ep over the divisors of dp that divide
 * every mixture's experts (the memoised cuts are keyed by ep too). Fields
 * the plan block sets are constraints; only the others are searched.
 *
 * How it stays exhaustive and still fast (Llama 3 405B on 16,384 GPUs:
 * 7,704 layouts; a 1T GPT on 3,072 GPUs: 72,756; all but a few hundred
 * settled by bounds):
 *
 *  1. Memoised per-block costs. The cost of one block for one micro-batch
 *     depends only on how a layer is cut: (tp, sequence parallelism,
 *     micro-batch, recomputation). For each such cut, one plan_costs()
 *     call with one pipeline chunk per block gives every block's forward,
 *     backward, parameters and kept activations (the first chunk carries
 *     the embedding, the last the final norm and head: exactly where
 *     plan_split() puts them). Identical consecutive blocks are kept as
 *     runs, so a chunk's sums cost O(runs it spans), not O(blocks).
 *  2. Estimates from the planner's own formulas. From those sums the
 *     search builds the layout's chunk table (without the DP/ZeRO
 *     collectives) as runs of equal chunks (a split of thousands of
 *     chunks is a few runs) and hands it to plan_pipeline_time_runs(),
 *     schedule.c's proven lower bound of the simulated pipeline
 *     (tests/test_planner.c checks it on thousands of layouts); with the
 *     cheaper of the two possible pipeline-send costs it stays one. The
 *     step's tail adds at least the largest stage's optimizer step
 *     (tail_bound). For
 *     ZeRO-3 the chunks also get their gathers and reductions
 *     (plan_chunk_dp_times), so the bound counts what the comm stream must
 *     run before the last pass: a ZeRO-3 layout bound by its gathers is
 *     pruned without being simulated. Memory per
 *     stage is memory.c's formula over per-stage sums (stage_fixed,
 *     stage_act): equal to check's up to the rounding of another
 *     summation order.
 *  3. Bounds that never drop a layout that should be kept. A layout whose
 *     memory estimate exceeds the capacity by more than the rounding slack
 *     is infeasible for certain; one below it by more than the slack fits
 *     for certain; only those in between are evaluated to decide.
 *     Feasible layouts are then evaluated in full with
 *     plan_evaluate_layout(), in increasing order of their time bound,
 *     until the bound exceeds the K-th best step time found: no layout
 *     left can enter the top K. Every full evaluation also checks the
 *     bounds against the exact figures (search.bound_violations); if one
 *     ever fails, the search reruns without pruning.
 *
 * The ranked results are exactly what plan_evaluate_layout() — `check`'s
 * fast path — says of those layouts, whose step time is the simulated
 * time of the layout's Program, so the ranking is by the step time
 * `check` prints.
 * tests/test_search.c compares the pruned search with brute force (every
 * layout evaluated in full) and every estimate with the exact figure.
 *
 * Distinct rows and bounded work (issue 13). At pp 1 the schedule is not
 * searched (1F1B stands for them all) and at dp 1 nor is ZeRO (stage 0);
 * layouts whose every figure equals a kept result's are folded into it
 * (topk_offer, same_figures, simpler). Before anything is built the space
 * is counted (count_degrees, the enumeration's own loops in count_only
 * mode) with the chunk sums its estimates take; over --max-layouts the
 * search refuses and names the free fields. A layout whose step has more
 * micro-steps than PLAN_SEARCH_MAX_STEPS_LAYOUT is never simulated, and
 * the simulations of one search stop at PLAN_SEARCH_MAX_STEPS_TOTAL
 * (PlanSearch.capped). The validity rule is asked of a model with one
 * layer per distinct shape (rule_plan), and every full evaluation reads
 * the shape index built once (cost.h's PlanShapes), so no step walks
 * every layer.
 *
 * What this file must not do: invent costs. Every time comes from cost.h
 * and every byte from memory.h's items; this file only adds per-block
 * figures up.
 */
#include "planner/fp8.h"
#include "planner/search.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "planner/comm.h"
#include "planner/layout.h"
#include "planner/memory.h"
#include "planner/model.h"
#include "planner/report.h"
#include "planner/schedule.h"

/* Relative slack of the estimates against the exact figures: the
 * estimates add the same numbers in another order, so they differ by a
 * few ulps (1e-16 relative) per addition; 1e-9 is orders of magnitude
 * above that and far below any difference that matters. */
#define SEARCH_REL_SLACK 1e-9
#define SEARCH_ABS_SLACK 64     /* bytes: ceil() of a stage's activations may move by one */

PlanSearchOptions plan_search_defaults(void)
{
    return (PlanSearchOptions){ .top = 10, .max_tp = 0, .tp_in_node = true,
                                .prune = true, .record = false,
                                .max_layouts = PLAN_SEARCH_MAX_LAYOUTS };
}

/* ---- growable arrays -------------------------------------------------- */

typedef struct {
    int64_t *v;
    int      n, cap;
} I64List;

static bool i64_push(I64List *l, int64_t x)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        int64_t *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

/* Divisors of n in increasing order (n <= 2^40: trial division to sqrt). */
static bool divisors(int64_t n, I64List *out)
{
    out->n = 0;
    I64List hi = { 0 };
    bool ok = true;
    for (int64_t d = 1; d * d <= n && ok; d++) {
        if (n % d) continue;
        ok = i64_push(out, d);
        if (ok && d != n / d) ok = i64_push(&hi, n / d);
    }
    for (int i = hi.n - 1; i >= 0 && ok; i--) ok = i64_push(out, hi.v[i]);
    free(hi.v);
    return ok;
}

/* The prime factors of the global batch, so that the enumeration can
 * count and list the micro-batches of any dp without trial division per
 * (tp, pp): global_batch <= 2^40 has at most 11 distinct primes. */
typedef struct {
    int64_t prime[16];
    int     n;
    I64List divs;          /* every divisor of the global batch, increasing */
} BatchFactors;

static bool batch_factor(int64_t gb, BatchFactors *f)
{
    f->n = 0;
    int64_t n = gb;
    for (int64_t d = 2; d * d <= n; d++) {
        if (n % d) continue;
        f->prime[f->n++] = d;
        while (n % d == 0) n /= d;
    }
    if (n > 1) f->prime[f->n++] = n;
    return divisors(gb, &f->divs);
}

/* Divisors of n, n dividing the global batch: the product of (exponent
 * + 1) over its primes. */
static int64_t batch_ndiv(const BatchFactors *f, int64_t n)
{
    int64_t r = 1;
    for (int i = 0; i < f->n; i++) {
        int e = 0;
        while (n % f->prime[i] == 0) { n /= f->prime[i]; e++; }
        r *= e + 1;
    }
    return r;
}

/* The divisors of n (n dividing the global batch), increasing, into out. */
static bool batch_divisors(const BatchFactors *f, int64_t n, I64List *out)
{
    out->n = 0;
    for (int i = 0; i < f->divs.n && f->divs.v[i] <= n; i++)
        if (n % f->divs.v[i] == 0 && !i64_push(out, f->divs.v[i])) return false;
    return true;
}

/* ---- memoised per-block costs ----------------------------------------- */

/* How a layer is cut, the key of the memo. */
typedef struct {
    int     tp, sp, rec;
    int64_t mb;
    int     ep;             /* expert parallelism (MoE models; 1 otherwise) */
    int     cp, cp_comm;    /* context parallelism (1, ring without it) */
} CutKey;

/* What the estimates read of one block, packed (one cache line). */
typedef struct {
    double   fwd, bwd, bwd_weight;  /* s per micro-batch */
    double   act_kept, act_layer_max, act_split, a2a_bytes;
    uint64_t params, layer_params_max, expert_params;
    int      layers, moe_layers;
} Block;

/* Costs of every block under one cut: block k is pipeline chunk k of the
 * model split into one chunk per block. */
/* Consecutive identical blocks, [first, end): a model written with
 * `repeat` has three runs (the block with the embedding, the middle ones,
 * the block with the head), so a chunk's sums cost O(1), not O(blocks). */
typedef struct {
    int   first, end;
    Block b;
} Run;

typedef struct {
    CutKey         key;
    Run           *run;        /* [n_run] */
    int            n_run;
    double         p2p_bytes;  /* one activation sent between stages */
    uint64_t       head_copy;  /* parameters of a tied head's copy (only when pp > 1) */
    double         head_acc;   /* s: its gradient's accumulation in the backward
                                  (plan_grad_accum_time; 0 when the GEMMs accumulate) */
    double         p2p_lo;     /* s: one activation send, the cheaper of NVLink and IB */
} CutCosts;

typedef struct {
    const Plan *p;
    const PlanShapes *shapes;   /* p's layers by shape */
    CutCosts   *cut;
    int         n, cap;
    int        *slot;      /* [n_slot] open-addressing index into cut, -1 empty */
    int         n_slot;    /* a power of two, > 2 n */
} CutMemo;

static uint64_t cut_hash(const CutKey *k)
{
    uint64_t h = (uint64_t)k->mb * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(k->tp * 8 + k->sp * 4 + k->rec) * 0xC2B2AE3D27D4EB4Full;
    h ^= (uint64_t)k->ep * 0x165667B19E3779F9ull;
    h ^= (uint64_t)(k->cp * 4 + k->cp_comm) * 0x27D4EB2F165667C5ull;
    return h ^ (h >> 29);
}

static bool cut_same(const CutKey *a, const CutKey *b)
{
    return a->tp == b->tp && a->sp == b->sp && a->rec == b->rec && a->mb == b->mb && a->ep == b->ep &&
           a->cp == b->cp && a->cp_comm == b->cp_comm;
}

/* Why: a batch with thousands of divisors makes thousands of cuts; a
 * hashed index keeps each look-up O(1). */
static bool cut_index(CutMemo *m)
{
    if (2 * (m->n + 1) < m->n_slot) return true;
    int ns = m->n_slot ? 2 * m->n_slot : 64;
    int *sl = malloc((size_t)ns * sizeof *sl);
    if (!sl) return false;
    for (int i = 0; i < ns; i++) sl[i] = -1;
    for (int i = 0; i < m->n; i++) {
        uint64_t h = cut_hash(&m->cut[i].key) & (uint64_t)(ns - 1);
        while (sl[h] >= 0) h = (h + 1) & (uint64_t)(ns - 1);
        sl[h] = i;
    }
    free(m->slot);
    m->slot = sl;
    m->n_slot = ns;
    return true;
}

/* Why: one plan_costs() pass per cut gives every block's cost, so a
 * layout's chunks are sums instead of a walk over the model's layers. */
static bool cut_build(const Plan *p, const PlanShapes *sh, const CutKey *k, const uint64_t *head_copy,
                      CutCosts *out)
{
    int nb = p->model.n_blocks;
    Layout l = { .dp = 1, .tp = k->tp, .pp = nb, .zero = 0, .micro_batch = k->mb,
                 .global_batch = k->mb, .schedule = SCHED_1F1B, .chunks = 1,
                 .recompute = k->rec, .sequence_parallel = k->sp, .ep = k->ep,
                 .recompute_modules = p->layout.recompute_modules, .etp = p->layout.etp,
                 .cp = k->cp, .cp_comm = k->cp_comm };
    PlanCosts per, whole;
    memset(out, 0, sizeof *out);
    out->key = *k;
    if (!plan_costs_shaped(p, sh, &l, &per)) { plan_costs_free(&per); return false; }
    if (head_copy) {
        out->head_copy = *head_copy;
    } else {
        l.pp = 1;
        if (!plan_costs_shaped(p, sh, &l, &whole)) { plan_costs_free(&per); plan_costs_free(&whole); return false; }
        uint64_t sum = 0;
        for (int b = 0; b < nb; b++) sum += per.cost[b].params;
        out->head_copy = sum - whole.cost[0].params;   /* 0 unless the head is tied */
        plan_costs_free(&whole);
    }
    out->head_acc = plan_grad_accum_time(p, (double)out->head_copy, 0);
    double bytes = per.cost[0].p2p_bytes;
    /* without SP each TP rank sends 1/tp of it and the receiver gathers
     * (cost.c's pp_send_time): the part's transfer alone bounds that */
    double sent = k->tp > 1 && k->sp != 1 ? bytes / k->tp : bytes;
    out->p2p_lo = fmin(plan_comm_cost(&p->cluster, COLL_P2P, ALGO_AUTO, (PlanGroup){ 2, 2, 1, 1 }, sent).time,
                       plan_comm_cost(&p->cluster, COLL_P2P, ALGO_AUTO, (PlanGroup){ 2, 1, 2, 1 }, sent).time);
    out->p2p_bytes = bytes;
    out->run = malloc((size_t)nb * sizeof *out->run);
    for (int b = 0; out->run && b < nb; b++) {
        const PlanChunkCost *c = &per.cost[b];
        Block x;
        memset(&x, 0, sizeof x);            /* padding too: runs compare bytes */
        /* the bounds' rows (schedule.c): a step paired under
         * overlap_moe_a2a runs shorter by what it hides */
        x.fwd = c->fwd - c->fwd_ep_hidden; x.bwd = c->bwd - c->bwd_ep_hidden; x.bwd_weight = c->bwd_weight;
        x.act_kept = c->act_kept; x.act_layer_max = c->act_layer_max; x.act_split = c->act_split;
        x.params = c->params; x.layer_params_max = c->layer_params_max; x.layers = c->layers;
        x.expert_params = c->expert_params; x.moe_layers = c->moe_layers;
        x.a2a_bytes = fmax(c->a2a_bytes, c->cp_buf_bytes);   /* one layer's buffers at a time (memory.c) */
        Run *last = out->n_run ? &out->run[out->n_run - 1] : NULL;
        if (last && !memcmp(&last->b, &x, sizeof x)) last->end = b + 1;
        else out->run[out->n_run++] = (Run){ b, b + 1, x };
    }
    plan_costs_free(&per);
    if (out->run && out->n_run < nb) {      /* keep the runs only: a few, not one per block */
        Run *r = realloc(out->run, (size_t)out->n_run * sizeof *r);
        if (r) out->run = r;
    }
    return out->run != NULL;
}

static const CutCosts *cut_get(CutMemo *m, const CutKey *k)
{
    if (!cut_index(m)) return NULL;
    uint64_t h = cut_hash(k) & (uint64_t)(m->n_slot - 1);
    for (; m->slot[h] >= 0; h = (h + 1) & (uint64_t)(m->n_slot - 1))
        if (cut_same(&m->cut[m->slot[h]].key, k)) return &m->cut[m->slot[h]];
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 32;
        CutCosts *c = realloc(m->cut, (size_t)cap * sizeof *c);
        if (!c) return NULL;
        m->cut = c;
        m->cap = cap;
    }
    /* the head's copy depends on tp only: reuse it from any cut of that tp
     * (and ep: the whole model's parameters per GPU are ep's; cp changes no
     * parameter) */
    const uint64_t *hc = NULL;
    for (int i = 0; i < m->n && !hc; i++)
        if (m->cut[i].key.tp == k->tp && m->cut[i].key.ep == k->ep) hc = &m->cut[i].head_copy;
    uint64_t copy = hc ? *hc : 0;
    if (!cut_build(m->p, m->shapes, k, hc ? &copy : NULL, &m->cut[m->n])) return NULL;
    m->slot[h] = m->n;
    return &m->cut[m->n++];
}

static void cut_memo_free(CutMemo *m)
{
    for (int i = 0; i < m->n; i++) free(m->cut[i].run);
    free(m->cut);
    free(m->slot);
}

/* ---- a layout's estimated cost table ---------------------------------- */

/* What memory.c adds up per stage, over the stage's chunks. */
typedef struct {
    uint64_t psi;         /* parameters per GPU before ZeRO */
    uint64_t psi_e;       /* of which the local routed experts' (sharded over expert-DP) */
    double   a2a;         /* bytes of the largest all-to-all buffers */
    double   act;         /* bytes kept per micro-batch */
    double   split;       /* bytes zb-h1 also keeps per micro-batch (plan_act_kept) */
    double   rebuild;     /* bytes of the largest recomputed layer */
    double   layer_max;   /* parameters of the largest layer */
    double   p2p;         /* bytes of one pipeline send (each slot's send and receive buffer) */
    uint64_t fixed[4];    /* bytes by ZeRO stage: model states + buffers + reserve */
} StageAgg;

/* Chunks [first, first + count) of a split, each of `blocks` blocks, the
 * first starting at block block0. */
typedef struct { int first, count, blocks, block0; } BlockRun;

/* Scratch for one (cut, pp, v): the chunk table built from block sums and
 * its per-stage aggregates. */
typedef struct {
    PlanCosts     c;
    PlanChunkCost*cost;               /* the distinct rows, one per run */
    PlanChunkRun *runs;               /* [n_runs] the chunks as runs of equal rows */
    int           n_runs;
    StageAgg     *agg;
    int           cap_chunks, cap_stages;
    int           split_pp, split_v;  /* the split chunk points at */
    BlockRun    **brun;               /* [v]: the split of pp split_pp into v chunks as runs
                                         of chunks of equal block counts, or NULL */
    int          *n_brun;             /* [v] */
    BlockRun     *bruns;              /* = brun[split_v] */
    int           n_bruns;
    int           n_split;            /* entries of brun[] */
    uint64_t      psi_max;            /* parameters of the largest stage (its optimizer step) */
    const PlanShapes *shapes;         /* the model's layers by shape (where blocks start) */
} Synth;

static bool synth_reserve(Synth *s, int chunks, int stages)
{
    if (chunks > s->cap_chunks) {
        free(s->cost);
        free(s->runs);
        s->cost = calloc((size_t)chunks, sizeof *s->cost);
        s->runs = calloc((size_t)chunks, sizeof *s->runs);
        s->cap_chunks = chunks;
        if (!s->cost || !s->runs) return false;
    }
    if (stages > s->cap_stages) {
        free(s->agg);
        s->agg = calloc((size_t)stages, sizeof *s->agg);
        s->cap_stages = stages;
        if (!s->agg) return false;
    }
    return true;
}

static void synth_forget_splits(Synth *s)
{
    for (int v = 0; v < s->n_split; v++) free(s->brun[v]);
    free(s->brun);
    free(s->n_brun);
    s->brun = NULL;
    s->n_brun = NULL;
    s->n_split = 0;
}

static void synth_free(Synth *s)
{
    free(s->cost); free(s->runs); free(s->agg);
    synth_forget_splits(s);
}

/* Why: the split depends on (pp, v) only, and the enumeration visits the
 * chunk counts of one pp again for every micro-batch, recomputation and
 * sequence-parallel setting, so the splits of the current pp are kept,
 * one per v, as their runs of equal block counts (a few, whatever the
 * chunks; plan_split_at: O(chunks) once from where the blocks start). */
static bool synth_split(const Plan *p, int pp, int v, Synth *s)
{
    if (s->split_pp == pp && s->split_v == v) return true;
    if (s->split_pp != pp) synth_forget_splits(s);
    if (v >= s->n_split) {
        int n = v + 1;
        BlockRun **br = realloc(s->brun, (size_t)n * sizeof *br);
        if (br) s->brun = br;
        int *nb = realloc(s->n_brun, (size_t)n * sizeof *nb);
        if (nb) s->n_brun = nb;
        if (!br || !nb) return false;
        for (int i = s->n_split; i < n; i++) { br[i] = NULL; nb[i] = 0; }
        s->n_split = n;
    }
    size_t n = (size_t)pp * (size_t)v;
    if (!s->brun[v]) {                  /* the split, kept as its few runs only */
        PlanChunk *ch = malloc(n * sizeof *ch);
        BlockRun *br = malloc(n * sizeof *br);
        if (!ch || !br || !plan_split_at(&p->model, s->shapes->block_first, pp, v, ch)) {
            free(ch);
            free(br);
            return false;
        }
        int nb = 0, b = 0;
        for (size_t k = 0; k < n; k++) {
            if (nb && br[nb - 1].blocks == ch[k].blocks) br[nb - 1].count++;
            else br[nb++] = (BlockRun){ (int)k, 1, ch[k].blocks, b };
            b += ch[k].blocks;
        }
        free(ch);
        BlockRun *fit = realloc(br, (size_t)nb * sizeof *fit);
        s->brun[v] = fit ? fit : br;
        s->n_brun[v] = nb;
    }
    s->bruns = s->brun[v];
    s->n_bruns = s->n_brun[v];
    s->split_pp = pp;
    s->split_v = v;
    return true;
}

static double dmax(double a, double b) { return a > b ? a : b; }

static uint64_t stage_fixed(const Plan *p, const StageAgg *g, int z, int dp, int edp);

/* Why: the chunks of a (pp, v) split are sums of the memoised blocks.
 * Only the fields plan_pipeline_time() reads are filled, and the per-stage
 * sums of the memory formula; the DP and ZeRO collectives stay zero (the
 * time bound omits them) and every chunk's send costs the cheaper of an
 * NVLink and an InfiniBand hop. */
static bool synth_chunks(const Plan *p, const CutCosts *cc, int dp, int cp, int ep, int pp, int v, Synth *s)
{
    int n = pp * v;
    if (!synth_reserve(s, n, pp)) return false;
    if (!synth_split(p, pp, v, s)) return false;
    double p2p = pp > 1 ? cc->p2p_lo : 0;
    /* a chunk of the split's block-count runs lies wholly inside one run
     * of equal blocks (cut_build's) or across a boundary: the chunks of
     * one block count wholly inside one run have one row, so the table is
     * O(block-count runs x block runs), whatever the chunks */
    const Run *r = cc->run;
    s->n_runs = 0;
    for (int i = 0; i < s->n_bruns; i++) {
        const BlockRun *u = &s->bruns[i];
        int k = u->first, kend = u->first + u->count, bc = u->blocks, b = u->block0;
        while (k < kend) {
            while (r->end <= b) r++;
            int q = (r->end - b) / bc;          /* chunks wholly inside run r from here */
            if (q > kend - k) q = kend - k;
            if (q < 1) q = 1;                    /* across a boundary: a row of its own */
            PlanChunkCost *c = &s->cost[s->n_runs];
            s->runs[s->n_runs++] = (PlanChunkRun){ k, q, c };
            double fwd = 0, bwd = 0, bw = 0, act = 0, amax = 0, split = 0, a2a = 0;
            uint64_t params = 0, pmax = 0, pe = 0;
            int layers = 0, moe = 0, end = b + bc;
            for (const Run *w = r; b < end;) {  /* the runs this chunk's blocks lie in */
                while (w->end <= b) w++;
                int cnt = (w->end < end ? w->end : end) - b;
                const Block *x = &w->b;
                fwd += cnt * x->fwd;
                bwd += cnt * x->bwd;
                bw += cnt * x->bwd_weight;
                params += (uint64_t)cnt * x->params;
                pe += (uint64_t)cnt * x->expert_params;
                moe += cnt * x->moe_layers;
                a2a = dmax(a2a, x->a2a_bytes);
                act += cnt * x->act_kept;
                split += cnt * x->act_split;
                amax = dmax(amax, x->act_layer_max);
                if (x->layer_params_max > pmax) pmax = x->layer_params_max;
                layers += cnt * x->layers;
                b += cnt;
            }
            b += (q - 1) * bc;
            k += q;
            /* the other fields stay as they were (zero from synth_reserve's
             * calloc, or the ZeRO-3 bound's, which only it reads and it
             * rewrites): no memset of the whole row */
            c->fwd = fwd;
            c->bwd = bwd;
            c->bwd_weight = bw;
            c->bwd_input = bwd - bw;
            c->params = params;
            c->act_kept = act;
            c->act_split = split;
            c->act_layer_max = amax;
            c->layer_params_max = pmax;
            c->layers = layers;
            c->expert_params = pe;
            c->moe_layers = moe;
            c->a2a_bytes = a2a;
            c->p2p_bytes = cc->p2p_bytes;
            c->p2p = p2p;
        }
    }
    if (pp == 1) {   /* one chunk, its own run: no copy of a tied head, nor its accumulation */
        PlanChunkCost *c = &s->cost[s->n_runs - 1];
        c->params -= cc->head_copy;
        c->bwd -= cc->head_acc;
        c->bwd_weight -= cc->head_acc;
        c->bwd_input = c->bwd - c->bwd_weight;
    }
    s->psi_max = 0;
    /* per stage, memory.c's sums: a run of at least pp chunks adds its
     * whole cycles to every stage (O(runs + pp), not O(chunks)) */
    memset(s->agg, 0, (size_t)pp * sizeof *s->agg);
    StageAgg all = { 0 };
    for (int i = 0; i < s->n_runs; i++) {
        const PlanChunkRun *u = &s->runs[i];
        const PlanChunkCost *c = u->row;
        int k = u->first, stop = k + u->count, full = u->count / pp;
        if (full) {
            all.psi += (uint64_t)full * c->params;
            all.psi_e += (uint64_t)full * c->expert_params;
            all.a2a = dmax(all.a2a, c->a2a_bytes);
            all.act += full * c->act_kept;
            all.split += full * c->act_split;
            all.rebuild = dmax(all.rebuild, c->act_layer_max);
            all.layer_max = dmax(all.layer_max, (double)c->layer_params_max);
            k += full * pp;
        }
        for (; k < stop; k++) {
            StageAgg *g = &s->agg[k % pp];
            g->psi += c->params;
            g->psi_e += c->expert_params;
            g->a2a = dmax(g->a2a, c->a2a_bytes);
            g->act += c->act_kept;
            g->split += c->act_split;
            g->rebuild = dmax(g->rebuild, c->act_layer_max);
            g->layer_max = dmax(g->layer_max, (double)c->layer_params_max);
        }
    }
    for (int st = 0; st < pp; st++) {
        StageAgg *g = &s->agg[st];
        const StageAgg *prev = st ? &s->agg[st - 1] : NULL;
        g->psi += all.psi;
        g->psi_e += all.psi_e;
        g->a2a = dmax(g->a2a, all.a2a);
        g->act += all.act;
        g->split += all.split;
        g->rebuild = dmax(g->rebuild, all.rebuild);
        g->layer_max = dmax(g->layer_max, all.layer_max);
        if (g->psi > s->psi_max) s->psi_max = g->psi;
        if (prev && prev->psi == g->psi && prev->layer_max == g->layer_max && prev->psi_e == g->psi_e &&
            prev->a2a == g->a2a)
            memcpy(g->fixed, prev->fixed, sizeof g->fixed);   /* most stages are alike */
        else
            for (int z = 0; z <= 3; z++) {
                /* the expert-DP group of the cut's (tp, ep) and the plan's etp (layout.c) */
                Layout el = { .dp = dp, .tp = cc->key.tp, .ep = ep, .etp = p->layout.etp, .cp = cp };
                g->fixed[z] = stage_fixed(p, g, z, plan_dp_cp(&el), plan_expert_dp(&el));
            }
        g->p2p = cc->p2p_bytes;
    }
    s->c.n_chunks = n;
    s->c.chunk = NULL;         /* the bounds read the runs */
    s->c.cost = NULL;          /* the rows are s->runs' */
    return true;
}

/* ---- candidates ------------------------------------------------------- */

enum { FIT_NO, FIT_YES, FIT_MAYBE };

typedef struct {
    Layout   l;
    double   t_lb;       /* s: lower bound of the step time (slack applied) */
    uint64_t mem_lo;     /* bytes: lower bound of the peak memory */
    uint64_t mem_est;    /* bytes: the estimate itself */
    uint64_t mem_hi;     /* bytes: upper bound */
    int      fit;        /* FIT_* */
    int      order;      /* position in the enumeration (tie-break) */
    int64_t  steps;      /* micro-steps of its Program (what simulating it costs) */
} Cand;

typedef struct {
    Cand   *v;
    int64_t n, cap;
} CandList;

static bool cand_push(CandList *l, const Cand *c)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 1024;
        Cand *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *c;
    return true;
}

/* Whether the plan block sets a field (a constraint) or leaves it to the search. */
static bool is_set(int64_t v) { return v != PLAN_AUTO; }

typedef struct {
    const Plan              *p;
    const PlanSearchOptions *o;
    PlanSearch              *s;
    CandList                 cands;
    CutMemo                  memo;
    Synth                    syn;
    int64_t                  next_order;   /* layouts enumerated so far */
    bool                     fits;         /* some layout so far fits for certain */
    char                     invalid_why[256];
    Layout                   invalid_l;    /* the first invalid layout, for its message */
    bool                     has_invalid;
    bool                     count_only;   /* enumerate(): count the space, build nothing */
    BatchFactors             bf;           /* of the global batch */
    Plan                     rules;        /* p with one layer per distinct shape (rule_plan) */
    PlanShapes               shapes;       /* p's layers by shape (cost.h), built once */
    int64_t                  steps_used;   /* micro-steps simulated so far */
    bool                     cp_long;      /* the sequence is long enough to search cp > 1 */
    bool                     cp_force;     /* search cp > 1 anyway (nothing fit without it) */
} Ctx;

/* Why: the validity rule (plan_layout_check) is asked once per schedule
 * and chunk count of every (tp, pp, micro-batch), and it reads each
 * layer's shape (heads, widths), never its position, so it is asked about
 * the model with one layer per distinct shape: O(distinct shapes), not
 * O(layers), per question. The block count is the model's. Layers the
 * same but for where they were written are one shape. */
static bool rule_plan(const Plan *p, Plan *out)
{
    const Model *m = &p->model;
    *out = *p;
    Layer *u = malloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *u);
    out->model.layers = u;
    if (!u) return false;
    int n = 0;
    for (int i = 0; i < m->n_layers; i++) {
        Layer k;                           /* bytes, padding too: a padding byte that
                                              differs only keeps two shapes apart */
        memcpy(&k, &m->layers[i], sizeof k);
        k.line = k.col = 0;
        int j = 0;
        while (j < n && memcmp(&u[j], &k, sizeof k)) j++;
        if (j == n) u[n++] = k;
    }
    out->model.layers = u;
    out->model.n_layers = n;
    return true;
}

/* memory.c's items for one stage, over the same inputs: this is the one
 * formula the search restates rather than calls, because plan_memory()
 * walks every chunk for every ZeRO stage and schedule. Every full
 * evaluation checks it (bound_violations), and tests/test_search.c holds
 * it to plan_memory() layout by layout over whole spaces. */

/* Bytes of stage g under ZeRO stage z that do not depend on the schedule:
 * model states (ZeRO paper), gathered layers and gradient buckets, the
 * reserve, each from memory.c's own function (the pipeline slots' buffers
 * depend on the schedule: stage_act). */
static uint64_t stage_fixed(const Plan *p, const StageAgg *g, int z, int dp, int edp)
{
    uint64_t pb, gb, ob;
    plan_expert_states(g->psi, g->psi_e, p->model.dtype, plan_grad_dtype(p), z, dp, edp, &pb, &gb, &ob);
    uint64_t buf = plan_bytes_add(plan_memory_buffers(0, z, 0, g->layer_max, p->model.dtype,
                                                      plan_grad_dtype(p)),
                                  plan_bytes_add(plan_bytes(g->a2a), plan_memory_grad_transient(p, g->layer_max)));
    return plan_bytes_add(plan_bytes_add(plan_bytes_add(pb, gb), ob),
                          plan_bytes_add(buf, plan_memory_reserve(p->cluster.device.memory)));
}

/* Bytes of stage s that depend on the layout's schedule: kept activations
 * times the micro-batches in flight, plus the layer being rebuilt, plus the
 * pipeline's transfer buffers alive at once (memory.c's buffers). */
static uint64_t stage_act(const Plan *p, const Layout *l, int64_t n_micro, const StageAgg *g, int s, int zero)
{
    int extra = plan_warmup_extra(p, l);   /* overlap_moe_a2a's warm-up forward (layout.c) */
    double act = plan_in_flight_x(l->schedule, l->pp, s, n_micro, l->chunks, extra) *
                 plan_act_kept(l->schedule, g->act, g->split) + g->rebuild +
                 plan_pipe_xfer_bufs(l->schedule, l->pp, s, n_micro, l->chunks, zero, plan_dp_cp(l)) * g->p2p +
                 plan_pipe_early_recvs(l->schedule, l->pp) * g->p2p;   /* receives posted early */
    return plan_bytes(act);
}

/* Why: fill the estimate fields of one candidate per ZeRO stage of a
 * shape: peak memory with slack both ways (so fitting or not is certain
 * outside the slack) and the time bound. */
static void estimate(Ctx *x, Cand *c, int n)
{
    Synth *s = &x->syn;
    uint64_t cap = x->p->cluster.device.memory, peak[4] = { 0 };
    int64_t n_micro = plan_micro_batches(&c[0].l);
    for (int st = 0; st < c[0].l.pp; st++) {
        const StageAgg *g = &s->agg[st];
        for (int i = 0; i < n; i++) {   /* (the transfer buffers depend on ZeRO's stage) */
            uint64_t act = stage_act(x->p, &c[0].l, n_micro, g, st, c[i].l.zero);
            uint64_t b = plan_bytes_add(g->fixed[c[i].l.zero], act);
            if (b > peak[i]) peak[i] = b;
        }
    }
    for (int i = 0; i < n; i++) {
        double slack = (double)peak[i] * SEARCH_REL_SLACK + SEARCH_ABS_SLACK;
        c[i].mem_est = peak[i];
        c[i].mem_lo = (double)peak[i] > slack ? peak[i] - (uint64_t)slack : 0;
        c[i].mem_hi = plan_bytes_add(peak[i], (uint64_t)slack);
        c[i].fit = c[i].mem_lo > cap ? FIT_NO : c[i].mem_hi <= cap ? FIT_YES : FIT_MAYBE;
    }
}

/* cost.c's lower bound of the pipeline time of layout l on the synthetic
 * table (its schedule, micro-batches and chunks): a lower bound of l's
 * step time. */
static double time_bound(Ctx *x, const Layout *l)
{
    Synth *s = &x->syn;
    s->c.layout = *l;
    s->c.layout.zero = 0;   /* the compute part: time_bound_zero3 adds the comm stream's */
    s->c.n_micro = plan_micro_batches(l);
    s->c.reduce_after_flush = !x->p->software.overlap_grad_reduce;
    return plan_pipeline_time_runs(&s->c, s->runs, s->n_runs);
}

/* The bound of layout l under ZeRO-3: the comm stream's part of cost.c's
 * bound (plan_pipeline_comm_bound) over the table with every chunk's
 * gathers and reductions (plan_chunk_dp_times, what plan_costs gives
 * them); the bound of the compute is the other stages' (time_bound), so
 * the caller takes the larger. The rows keep these fields afterwards: only
 * this bound reads them, and it writes every row first. */
static double time_bound_zero3(Ctx *x, const Layout *l)
{
    Synth *s = &x->syn;
    PlanChunkCost *c = s->cost, *prev = NULL;
    for (int k = 0; k < s->n_runs; k++) {    /* one row per run */
        if (prev && prev->params == c[k].params && prev->layers == c[k].layers &&
            prev->expert_params == c[k].expert_params && prev->moe_layers == c[k].moe_layers) {
            c[k].weight_bytes = prev->weight_bytes; c[k].reduce = prev->reduce; c[k].gather = prev->gather;
        } else {
            plan_chunk_dp_times(x->p, l, &c[k]);
        }
        prev = &c[k];
    }
    s->c.layout = *l;
    s->c.n_micro = plan_micro_batches(l);
    s->c.reduce_after_flush = !x->p->software.overlap_grad_reduce;
    return plan_pipeline_comm_bound_runs(&s->c, s->runs, s->n_runs);
}

/* Why: every stage's optimizer step follows the gradient-norm
 * all-reduce, which waits for every stage's last pass (lower.c's tail,
 * simulate.c), so the step lasts at least the pipeline's bound plus the
 * largest stage's AdamW step (cost.c's plan_opt_time of its parameters,
 * divided over DP under ZeRO >= 1, as plan_costs divides them). The
 * collectives of the tail only add to it. Seconds. */
static double tail_bound(const Ctx *x, const Layout *l, int zero)
{
    uint64_t psi = x->syn.psi_max, dp = (uint64_t)plan_dp_cp(l);   /* ZeRO over dp x cp */
    if (zero >= 1) psi = psi / dp + (psi % dp != 0);
    return plan_opt_time(&x->p->cluster.device, psi, x->p->software.optimizer, 0);   /* launches a bound below */
}

/* Whether ZeRO stage z is searched at data-parallel degree dp (unless the
 * plan block fixes it): at dp 1 there is nothing to shard, every stage
 * holds the same states, and stage 0 (no gradient buckets, no gathers)
 * stands for them. */
static bool zero_searched(int z, int64_t dp)
{
    return dp > 1 || z == 0;
}

/* Micro-steps of layout l's Program: a forward and a backward (ZB-H1: and
 * a weight pass) of every micro-batch on every chunk, what simulating it
 * costs in time and memory. */
static int64_t micro_steps(const Layout *l)
{
    double n = (double)l->pp * l->chunks * (double)plan_micro_batches(l) *
               (l->schedule == SCHED_ZB_H1 ? 3 : 2);
    return n > 9e18 ? INT64_MAX : (int64_t)n;
}

static bool too_large(const Cand *c) { return c->steps > PLAN_SEARCH_MAX_STEPS_LAYOUT; }

/* The ZeRO stages of one shape; with estimates, the time bound is only
 * computed when one of them may fit (most layouts of a large model do not,
 * and those are never ranked). */
static bool add_zeros(Ctx *x, Layout l, bool with_estimates)
{
    const Layout *L = &x->p->layout;
    Cand c[4];
    int n = 0;
    int64_t steps = micro_steps(&l);
    for (int z = 0; z <= 3; z++) {
        if (is_set(L->zero) ? L->zero != z : !zero_searched(z, plan_dp_cp(&l))) continue;
        l.zero = z;
        c[n] = (Cand){ .l = l, .order = (int)(x->next_order + n), .steps = steps };
        n++;
    }
    if (with_estimates) {
        estimate(x, c, n);
        bool any = false;
        for (int i = 0; i < n; i++) any |= c[i].fit != FIT_NO;
        x->s->cp_fit[plan_cp(&l) > 1] |= any;
        double t = any || x->o->record ? time_bound(x, &l) * (1 - SEARCH_REL_SLACK) : INFINITY;
        for (int i = 0; i < n; i++) {
            c[i].t_lb = t;
            if (c[i].l.zero >= 3 && isfinite(t) && (c[i].fit != FIT_NO || x->o->record))
                c[i].t_lb = fmax(t, time_bound_zero3(x, &c[i].l) * (1 - SEARCH_REL_SLACK));
            if (isfinite(t)) c[i].t_lb += tail_bound(x, &c[i].l, c[i].l.zero) * (1 - SEARCH_REL_SLACK);
        }
    }
    x->next_order += n;
    for (int i = 0; i < n; i++) {
        if (too_large(&c[i]) && !x->o->record) {     /* never simulated: only counted */
            x->s->considered++;
            x->s->dropped.too_large++;
            continue;
        }
        x->fits |= c[i].fit == FIT_YES;
        /* once something fits for certain, a layout that cannot is only
         * counted: it is never ranked, and no closest-to-fitting layout
         * will be asked for */
        if (with_estimates && c[i].fit == FIT_NO && x->fits && !x->o->record) {
            x->s->considered++;
            x->s->dropped.memory++;
            continue;
        }
        if (!cand_push(&x->cands, &c[i])) return false;
    }
    return true;
}

/* A schedule and chunk count, valid for one (tp, pp, micro-batch). */
typedef struct { int sched, v; } Shape;

/* Whether schedule sc is searched at pipeline degree pp (unless the plan
 * block fixes it). At pp 1 there is no pipeline: gpipe, 1f1b and zb-h1
 * run the same micro-batches one after the other, and 1F1B (one
 * micro-batch in flight, the fewest activations) stands for them. */
static const int SEARCHED[] = { SCHED_GPIPE, SCHED_1F1B, SCHED_ZB_H1, SCHED_INTERLEAVED };
#define N_SEARCHED ((int)(sizeof SEARCHED / sizeof SEARCHED[0]))

static bool schedule_searched(int sc, int64_t pp)
{
    return pp > 1 || sc == SCHED_1F1B;
}

/* The largest chunk count searched at pp: every chunk holds a block, and
 * pp x chunks stays within layout.h's PLAN_MAX_VSTAGES (the rule's limit:
 * more would only be counted as invalid). */
static int max_chunks(int nb, int64_t pp)
{
    int64_t v = nb / pp, w = PLAN_MAX_VSTAGES / pp;
    return (int)(v < w ? v : w);
}

/* Why: validity depends on the degrees, the micro-batch, the schedule and
 * the chunks, not on recomputation, sequence parallelism or ZeRO, so it is
 * decided once per shape (plan_layout_check, as `check` decides it; every
 * layout evaluated in full is checked again in full). Shapes come out
 * ordered by v, the three flat schedules first. Returns the count. */
static int shapes(Ctx *x, Layout l, Shape *out, int64_t others)
{
    const Plan *p = x->p;
    const Layout *L = &p->layout;
    int nb = p->model.n_blocks, n = 0;
    int64_t m = plan_micro_batches(&l);
    for (int i = 0; i < N_SEARCHED; i++) {
        int sc = SEARCHED[i];
        if (is_set(L->schedule) ? L->schedule != sc : !schedule_searched(sc, l.pp)) continue;
        int vlo = 1, vhi = 1;
        if (sc == SCHED_INTERLEAVED) {
            if (l.pp < 2 || m % l.pp) continue;       /* Megatron's interleaving needs both */
            vlo = 2;
            vhi = max_chunks(nb, l.pp);
            if (is_set(L->chunks)) vlo = vhi = L->chunks;
        } else if (is_set(L->chunks) && L->chunks != 1) {
            continue;
        }
        for (int v = vlo; v <= vhi && (int64_t)l.pp * v <= nb; v++) {
            l.schedule = sc;
            l.chunks = v;
            char why[256];
            if (!plan_layout_check(&x->rules, &l, why, sizeof why)) {
                x->s->considered += others;
                x->s->dropped.invalid += others;
                if (!x->has_invalid) { x->invalid_l = l; x->has_invalid = true; }
                continue;
            }
            out[n++] = (Shape){ sc, v };
        }
    }
    return n;
}

/* Every shape and ZeRO stage of one (tp, pp, mb, rec, sp). */
static bool add_shapes(Ctx *x, Layout l, const Shape *sh, int n, const CutCosts *cc)
{
    int built = 0;
    for (int i = 0; i < n; i++) {
        l.schedule = sh[i].sched;
        l.chunks = sh[i].v;
        if (cc) {
            if (built != sh[i].v && !synth_chunks(x->p, cc, l.dp, plan_cp(&l), plan_ep(&l), l.pp, sh[i].v, &x->syn))
                return false;
            built = sh[i].v;
        }
        if (!add_zeros(x, l, cc != NULL)) return false;
    }
    return true;
}

/* The smallest interleaved chunk count searched. */
static int vlo_of(const Layout *L) { return is_set(L->chunks) ? L->chunks : 2; }

/* Layouts of one (tp, pp) without building them, by the rules the
 * enumeration below follows (a test holds the two equal on every case):
 * micro-batches from the global batch's factors, schedules and chunk
 * counts from schedule_searched() and max_chunks(), then ZeRO,
 * recomputation and sequence parallelism. O(primes), whatever the batch. */
static int64_t count_degrees(const Ctx *x, int64_t tp, int64_t pp, int64_t dp, int64_t cp, int n_rec, int n_sp,
                             double *sums)
{
    const Layout *L = &x->p->layout;
    int64_t gb = L->global_batch, per = gb / dp;
    int nb = x->p->model.n_blocks;
    int64_t n_mb, n_mb_il = 0;       /* micro-batches; of which give a multiple of pp */
    if (is_set(L->micro_batch)) {
        n_mb = per % L->micro_batch == 0;
        n_mb_il = n_mb && (per / L->micro_batch) % pp == 0;
    } else {
        n_mb = batch_ndiv(&x->bf, per);
        n_mb_il = per % pp == 0 ? batch_ndiv(&x->bf, per / pp) : 0;
    }
    int64_t flat = 0, il = 0;
    for (int i = 0; i < N_SEARCHED; i++) {
        int sc = SEARCHED[i];
        if (is_set(L->schedule) ? L->schedule != sc : !schedule_searched(sc, pp)) continue;
        if (sc != SCHED_INTERLEAVED) {
            flat += !is_set(L->chunks) || L->chunks == 1;
        } else if (pp >= 2) {
            int vlo = 2, vhi = max_chunks(nb, pp);
            if (is_set(L->chunks)) vlo = vhi = L->chunks;
            if (vhi > nb / pp) vhi = nb / pp;
            il = vhi >= vlo ? vhi - vlo + 1 : 0;
        }
    }
    int64_t n_zero = is_set(L->zero) ? 1 : dp * cp == 1 ? 1 : 4;   /* ZeRO shards over dp x cp */
    (void)tp;
    /* chunk sums: one table of pp chunks per micro-batch for the flat
     * schedules, pp x v for each chunk count v */
    double v_sum = il ? (double)il * (il + 1) / 2 + (double)il * (vlo_of(L) - 1) : 0;
    *sums += (double)n_rec * n_sp * pp * ((flat ? (double)n_mb : 0) + (double)n_mb_il * v_sum);
    return (n_mb * flat + n_mb_il * il) * n_zero * n_rec * n_sp;
}

/* The expert-parallel degrees searched at data-parallel degree dp, into
 * out (PLAN_SEARCH_MAX_EP of room); returns how many. A dense model runs
 * with ep 1 (layout.h); a plan block's ep is a constraint; else every
 * divisor of dp that layout.c's rule allows (it divides every mixture's
 * experts). */
#define PLAN_SEARCH_MAX_EP 64
static int ep_degrees(const Ctx *x, int64_t dp, int64_t tp, int *out)
{
    const Plan *p = x->p;
    int set = p->layout.ep;
    /* expert TP: the plan's (a constraint, never searched), else tp's */
    int etp = is_set(p->layout.etp) && p->layout.etp >= 1 ? p->layout.etp : (int)tp;
    if (!plan_model_has_moe(&p->model)) { out[0] = 1; return 1; }
    if (is_set(set)) {   /* (0, a Layout built in C without it: 1, plan_ep) */
        out[0] = set >= 1 ? set : 1;
        return plan_rule_ep(&x->rules.model, (int)dp, (int)tp, etp, out[0], NULL, 0) ? 1 : 0;
    }
    int n = 0;
    int64_t most = etp == tp ? dp : tp * dp / etp;   /* EP inside the stage's tp x dp / etp cells */
    for (int64_t e = 1; e <= most && n < PLAN_SEARCH_MAX_EP; e++)
        if (most % e == 0 && plan_rule_ep(&x->rules.model, (int)dp, (int)tp, etp, (int)e, NULL, 0)) out[n++] = (int)e;
    return n;
}

/* ---- context parallelism (issue 26) ---------------------------------- */

/* cp > 1 is searched (unless the plan sets cp) where the attention core
 * takes at least this share of the forward's FLOPs: as many as the rest
 * of the model (cp_decide says why this, and what else) */
#define PLAN_SEARCH_CP_SHARE 0.5

/* The share of a forward's FLOPs that the attention scores and context
 * take, the model at cp 1 (Narayanan et al. 2021's count, model.c): what
 * decides whether splitting the sequence can pay. */
static double attention_share(const Plan *p)
{
    const Model *m = &p->model;
    PlanCut cut = { .micro_batch = 1, .tp = 1 };
    double core = 0, all = 0;
    for (int i = 0; i < m->n_layers; i++) {
        PlanLayerWork w;
        plan_layer_work(m, &m->layers[i], i ? &m->layers[i - 1] : NULL, &cut, &w);
        core += w.flops_core;
        all += w.flops_fwd;
    }
    return all > 0 ? core / all : 0;
}

/* Why: cp > 1 multiplies the space by its degrees and forms, and on a
 * short sequence it can only lose: every token-wise op is already split
 * by dp, and splitting attention buys nothing when the attention is a
 * small part of the work. So an unset cp is searched above 1 only where
 * the attention core does at least as many FLOPs as the rest of the
 * model together (PLAN_SEARCH_CP_SHARE; a Llama block: s >= 6 h), where
 * a sequence's quadratic part dominates — or where nothing fits without
 * it (plan_search's second pass, x->cp_force). A set cp is a constraint. */
static void cp_decide(Ctx *x)
{
    const Plan *p = x->p;
    double share = attention_share(p);
    x->cp_long = share >= PLAN_SEARCH_CP_SHARE;
    x->s->cp_searched = is_set(p->layout.cp) ? p->layout.cp > 1 : x->cp_long || x->cp_force;
    if (!x->s->cp_searched && !is_set(p->layout.cp))
        snprintf(x->s->cp_skip, sizeof x->s->cp_skip, "cp 1: attention is %.0f %% of the forward FLOPs at "
                 "seq %" PRId64 " (context parallelism is searched from %.0f %%, or when nothing fits)",
                 100 * share, p->model.seq, 100 * PLAN_SEARCH_CP_SHARE);
}

/* Whether context-parallel degree cp is searched at tp: the plan's, else
 * 1 and, where cp_decide allows, every cp the 2 cp chunks fit in the
 * sequence (layout.c's rule, with the ring: the forms' head rule is
 * cp_forms'). */
static bool cp_searched(const Ctx *x, int tp, int64_t cp)
{
    const Layout *L = &x->p->layout;
    if (is_set(L->cp)) return cp == (L->cp >= 1 ? L->cp : 1);
    if (cp == 1) return true;
    if (!x->s->cp_searched) return false;
    return plan_rule_cp(&x->rules.model, tp, (int)cp, PLAN_CP_RING, NULL, 0);
}

/* The CP forms searched at (tp, cp), into out; returns how many: the
 * plan's cp_comm, else at cp 1 the ring alone (no CP: one form), else
 * every form layout.c's rule allows (the all-to-all ones need tp x cp to
 * divide the heads); hierarchical only where the CP group spans NVLink
 * domains (inside one it is the all-to-all). */
static int cp_forms(const Ctx *x, int tp, int cp, int *out)
{
    const Plan *p = x->p;
    if (cp <= 1) { out[0] = PLAN_CP_RING; return 1; }
    int n = 0;
    for (int f = 0; f < PLAN_N_CP_COMMS; f++) {
        if (is_set(p->layout.cp_comm) ? p->layout.cp_comm != f : false) continue;
        if (!plan_rule_cp(&x->rules.model, tp, cp, f, NULL, 0)) continue;
        if (!is_set(p->layout.cp_comm) && f == PLAN_CP_HIERARCHICAL &&
            plan_cp_group(&p->cluster, tp, cp).nodes <= 1)
            continue;
        out[n++] = f;
    }
    return n;
}

/* Why: the enumeration, outermost the degrees, innermost ZeRO, so the
 * memoised cut and chunk sums are reused by every inner combination. With
 * x->count_only it only counts (count_degrees), so the size of the space
 * is known before any layout is built. */
static bool enumerate(Ctx *x)
{
    const Plan *p = x->p;
    const Layout *L = &p->layout;
    const Cluster *cl = &p->cluster;
    int64_t gpus = cl->nodes * cl->gpus_per_node;
    int64_t gb = L->global_batch;
    I64List tps = { 0 }, pps = { 0 }, cps = { 0 }, mbs = { 0 };
    Shape *sh = x->count_only ? NULL : malloc((size_t)(PLAN_MAX_VSTAGES + 4) * sizeof *sh);
    bool ok = (sh || x->count_only) && divisors(gpus, &tps);
    for (int i = 0; ok && i < tps.n; i++) {
        int64_t tp = tps.v[i];
        if (is_set(L->tp) && L->tp != tp) continue;
        if (x->o->max_tp > 0 && tp > x->o->max_tp) continue;
        if (x->o->tp_in_node && plan_nvlink_domain(cl) % tp) continue;
        if (!plan_rule_tp_split(&p->model, (int)tp, NULL, 0)) continue;   /* layout.c's rule */
        int n_rec = is_set(L->recompute) ? 1 : 3;
        int n_sp = is_set(L->sequence_parallel) || tp == 1 ? 1 : 2;
        ok = divisors(gpus / tp, &pps);
        for (int j = 0; ok && j < pps.n; j++) {
          int64_t pp = pps.v[j];
          if (pp > p->model.n_blocks) break;
          if (is_set(L->pp) && L->pp != pp) continue;
          ok = divisors(gpus / tp / pp, &cps);
          for (int c = 0; ok && c < cps.n; c++) {   /* cp jointly with the rest: dp = the remainder */
            int64_t cp = cps.v[c], dp = gpus / tp / pp / cp;
            if (!cp_searched(x, (int)tp, cp)) continue;
            if (is_set(L->dp) && L->dp != dp) continue;
            if (gb % dp) continue;
            int forms[PLAN_N_CP_COMMS], n_form = cp_forms(x, (int)tp, (int)cp, forms);
            int eps[PLAN_SEARCH_MAX_EP], n_ep = ep_degrees(x, dp, tp, eps);
            if (x->count_only) {
                x->s->space += count_degrees(x, tp, pp, dp, cp, n_rec * n_ep * n_form, n_sp, &x->s->space_sums);
                continue;
            }
            int n_zero = is_set(L->zero) || dp * cp == 1 ? 1 : 4;
            for (int f = 0; ok && f < n_form; f++) {
            ok = batch_divisors(&x->bf, gb / dp, &mbs);
            for (int k = 0; ok && k < mbs.n; k++) {
                int64_t mb = mbs.v[k];
                if (is_set(L->micro_batch) && L->micro_batch != mb) continue;
                Layout l = { .dp = (int)dp, .tp = (int)tp, .pp = (int)pp, .zero = 0,
                             .micro_batch = mb, .global_batch = gb, .schedule = SCHED_1F1B,
                             .chunks = 1, .recompute = RECOMPUTE_NONE, .sequence_parallel = 0, .ep = 1,
                             /* which parts are recomputed: as the plan says (sema: they
                              * come with a set recompute, never searched) */
                             .recompute_modules = L->recompute_modules,
                             .recompute_layers = L->recompute_layers, .recompute_every = L->recompute_every,
                             .recompute_method = L->recompute_method, .etp = L->etp,
                             .cp = (int)cp, .cp_comm = forms[f] };
                if (is_set(L->recompute)) l.recompute = L->recompute;
                if (is_set(L->sequence_parallel)) l.sequence_parallel = L->sequence_parallel;
                int n_sh = n_ep ? shapes(x, l, sh, (int64_t)n_rec * n_sp * n_zero * n_ep) : 0;
                /* none, selective, full searched; a set recompute (selective_op
                 * too) is the only one */
                int rec_lo = is_set(L->recompute) ? L->recompute : 0, rec_hi = is_set(L->recompute) ? rec_lo + 1 : 3;
                for (int rec = rec_lo; ok && n_sh && rec < rec_hi; rec++) {
                    /* layout.c's rule: overlap_moe_a2a runs without full recomputation */
                    if (!plan_rule_moe_overlap(&p->software, SCHED_INTERLEAVED, 2, rec, NULL, 0)) {
                        x->s->considered += (int64_t)n_sh * n_zero * n_ep * n_sp;
                        x->s->dropped.invalid += (int64_t)n_sh * n_zero * n_ep * n_sp;
                        continue;
                    }
                    for (int sp = 0; ok && sp < 2; sp++) {
                        if (sp && tp == 1) continue;   /* means nothing at tp 1: off (layout.h) */
                        if (is_set(L->sequence_parallel) && tp > 1 && L->sequence_parallel != sp) continue;
                        if (sp && !plan_rule_sp_rows(&p->model, (int)tp, mb, 1, x->invalid_why[0] ? NULL :
                                                     x->invalid_why, sizeof x->invalid_why)) {
                            x->s->considered += (int64_t)n_sh * n_zero * n_ep;   /* layout.c's rule: invalid */
                            x->s->dropped.invalid += (int64_t)n_sh * n_zero * n_ep;
                            continue;
                        }
                        l.recompute = rec;
                        l.sequence_parallel = sp;
                        for (int e = 0; ok && e < n_ep; e++) {   /* jointly with the rest */
                            l.ep = eps[e];
                            const CutCosts *cc = NULL;
                            if (x->o->prune) {
                                CutKey key = { (int)tp, sp, rec, mb, eps[e], (int)cp, forms[f] };
                                cc = cut_get(&x->memo, &key);
                                ok = cc != NULL;
                            }
                            if (ok) ok = add_shapes(x, l, sh, n_sh, cc);
                        }
                    }
                }
            }
            }
          }
        }
    }
    free(tps.v); free(pps.v); free(cps.v); free(mbs.v); free(sh);
    return ok;
}

/* ---- ranking ---------------------------------------------------------- */

/* Result order: step time, then peak memory, then enumeration order. */
static int better(const PlanEval *a, int ia, const PlanEval *b, int ib)
{
    if (a->step_time != b->step_time) return a->step_time < b->step_time;
    if (a->peak_memory != b->peak_memory) return a->peak_memory < b->peak_memory;
    return ia < ib;
}

typedef struct {
    PlanEval *ev;     /* [k] sorted best first */
    int      *order;
    int64_t  *folded;     /* [k] layouts folded into each (same_figures) */
    int       n, k;
} TopK;

/* Whether two evaluations report the same figures, every one `check`
 * prints (times, memory stage by stage, throughput, FLOPs), bit for bit:
 * then the choice between the two layouts changes nothing. */
static bool same_figures(const PlanEval *a, const PlanEval *b)
{
    if (a->step_time != b->step_time || a->peak_memory != b->peak_memory || a->pp != b->pp ||
        a->n_micro != b->n_micro || a->bubble_fraction != b->bubble_fraction ||
        a->tokens_per_s != b->tokens_per_s || a->tflops_per_gpu != b->tflops_per_gpu ||
        a->mfu != b->mfu || a->hfu != b->hfu || a->model_flops != b->model_flops ||
        a->hw_flops != b->hw_flops || a->worst_stage != b->worst_stage)
        return false;
    const PlanTimes *x = &a->times, *y = &b->times;
    if (x->compute != y->compute || x->recompute != y->recompute || x->tp != y->tp ||
        x->p2p != y->p2p || x->dp_total != y->dp_total || x->dp_exposed != y->dp_exposed ||
        x->gather_total != y->gather_total || x->gather_exposed != y->gather_exposed ||
        x->sync != y->sync || x->embed != y->embed || x->optimizer != y->optimizer ||
        x->bubble != y->bubble || x->ep != y->ep)
        return false;
    for (int i = 0; i < a->pp; i++) {
        const PlanStageMem *m = &a->stages[i], *n = &b->stages[i];
        if (m->params_bytes != n->params_bytes || m->grads_bytes != n->grads_bytes ||
            m->optimizer_bytes != n->optimizer_bytes || m->activations_bytes != n->activations_bytes ||
            m->buffers_bytes != n->buffers_bytes || m->reserve_bytes != n->reserve_bytes ||
            m->total_bytes != n->total_bytes || m->in_flight != n->in_flight || m->params != n->params)
            return false;
    }
    return true;
}

/* Of two layouts with the same figures, whether a (enumerated at ia) is
 * the one kept: the simplest — lowest ZeRO stage, fewest chunks, least
 * recomputation, sequence parallelism off — then the first enumerated. */
static bool simpler(const Layout *a, int ia, const Layout *b, int ib)
{
    int ka[] = { a->zero, a->chunks, a->recompute, a->sequence_parallel == 1, ia };
    int kb[] = { b->zero, b->chunks, b->recompute, b->sequence_parallel == 1, ib };
    for (int i = 0; i < 5; i++)
        if (ka[i] != kb[i]) return ka[i] < kb[i];
    return false;
}

/* Insert ev (taking ownership) if it belongs in the top K; a layout with
 * a kept one's figures is folded into it (the simpler stays). Folding is
 * exact: the K-th best only improves, so every layout tied with a result
 * shown arrives while that result is kept. */
static void topk_offer(TopK *t, PlanEval *ev, int order)
{
    for (int i = 0; i < t->n; i++) {
        if (!same_figures(ev, &t->ev[i])) continue;
        t->folded[i]++;
        if (!simpler(&ev->layout, order, &t->ev[i].layout, t->order[i])) {
            plan_eval_free(ev);
            return;
        }
        plan_eval_free(&t->ev[i]);
        t->ev[i] = *ev;
        t->order[i] = order;
        for (; i > 0 && better(&t->ev[i], t->order[i], &t->ev[i - 1], t->order[i - 1]); i--) {
            PlanEval e = t->ev[i]; t->ev[i] = t->ev[i - 1]; t->ev[i - 1] = e;
            int o = t->order[i]; t->order[i] = t->order[i - 1]; t->order[i - 1] = o;
            int64_t f = t->folded[i]; t->folded[i] = t->folded[i - 1]; t->folded[i - 1] = f;
        }
        return;
    }
    if (t->n == t->k && !better(ev, order, &t->ev[t->n - 1], t->order[t->n - 1])) {
        plan_eval_free(ev);
        return;
    }
    if (t->n == t->k) { plan_eval_free(&t->ev[t->n - 1]); t->n--; }
    int i = t->n;
    while (i > 0 && better(ev, order, &t->ev[i - 1], t->order[i - 1])) {
        t->ev[i] = t->ev[i - 1];
        t->order[i] = t->order[i - 1];
        t->folded[i] = t->folded[i - 1];
        i--;
    }
    t->ev[i] = *ev;
    t->order[i] = order;
    t->folded[i] = 0;
    t->n++;
}

/* Closest-to-fitting bookkeeping: the smallest peak memory. */
static void closest_offer(PlanSearch *s, int *closest_order, PlanEval *ev, int order)
{
    if (!s->has_closest || ev->peak_memory < s->closest.peak_memory ||
        (ev->peak_memory == s->closest.peak_memory && order < *closest_order)) {
        if (s->has_closest) plan_eval_free(&s->closest);
        s->closest = *ev;
        s->has_closest = true;
        *closest_order = order;
        ev->stages = NULL;
    }
}

/* Whether the search may still simulate c: within the micro-steps of the
 * whole search (PLAN_SEARCH_MAX_STEPS_TOTAL). Once it may not, it stops
 * (PlanSearch.capped): its results are the best evaluated. */
static bool affordable(Ctx *x, const Cand *c)
{
    if (x->steps_used + c->steps > PLAN_SEARCH_MAX_STEPS_TOTAL) x->s->capped = true;
    return !x->s->capped;
}

/* Why: one full evaluation, with the bounds checked against it. */
static void evaluate(Ctx *x, const Cand *c, PlanEval *ev)
{
    x->steps_used += c->steps;
    plan_evaluate_layout_shaped(x->p, &x->shapes, &c->l, ev);
    x->s->evaluated++;
    if (ev->valid && ev->feasible) {   /* the best of each kind, for plan_search_cp_note */
        int k = plan_cp(&c->l) > 1;
        if (!x->s->cp_has[k] || ev->step_time < x->s->cp_best[k].step_time) {
            x->s->cp_has[k] = true;
            x->s->cp_best[k] = (PlanEval){ .layout = c->l, .step_time = ev->step_time, .valid = true,
                                           .feasible = true };
        }
    }
    if (!x->o->prune || !ev->valid) return;
    bool fits = ev->feasible;
    if (ev->peak_memory < c->mem_lo || ev->peak_memory > c->mem_hi ||
        (isfinite(c->t_lb) && ev->step_time < c->t_lb) || (c->fit == FIT_YES && !fits) || (c->fit == FIT_NO && fits))
        x->s->bound_violations++;
}

static int by_time_bound(const void *a, const void *b)
{
    const Cand *x = *(const Cand *const *)a, *y = *(const Cand *const *)b;
    if (x->t_lb != y->t_lb) return x->t_lb < y->t_lb ? -1 : 1;
    return x->order - y->order;
}

static int by_mem_bound(const void *a, const void *b)
{
    const Cand *x = *(const Cand *const *)a, *y = *(const Cand *const *)b;
    if (x->mem_lo != y->mem_lo) return x->mem_lo < y->mem_lo ? -1 : 1;
    return x->order - y->order;
}

static void record(Ctx *x, const Cand *c, const PlanEval *ev, bool feasible)
{
    if (!x->o->record) return;
    PlanSearchPoint *pt = &x->s->points[c->order];
    pt->layout = c->l;
    pt->feasible = feasible;
    pt->exact = ev != NULL;
    pt->step_time = ev ? ev->step_time : c->t_lb;
    pt->peak_memory = ev ? ev->peak_memory : c->mem_est;
}

/* Keep only the candidates o->admit accepts (`search --for`), in their
 * order; before any is evaluated, so the bounds and the top K see only
 * layouts the framework can run. Not with o->record (its points are
 * indexed by enumeration order over the whole space). */
static void admit_only(Ctx *x, const PlanSearchOptions *o)
{
    int64_t n = 0;
    for (int64_t i = 0; i < x->cands.n; i++) {
        char why[512];
        if (o->admit(x->p, &x->cands.v[i].l, o->admit_ctx, why, sizeof why)) {
            x->cands.v[n++] = x->cands.v[i];
        } else {
            if (!x->s->dropped.refused)
                snprintf(x->s->refused_why, sizeof x->s->refused_why, "%s", why);
            x->s->dropped.refused++;
        }
    }
    x->cands.n = n;
}

/* Every layout evaluated in full, in enumeration order. */
static void rank_brute(Ctx *x, TopK *t)
{
    PlanSearch *s = x->s;
    int closest_order = 0;
    for (int64_t i = 0; i < x->cands.n; i++) {
        const Cand *c = &x->cands.v[i];
        if (too_large(c)) { s->dropped.too_large++; record(x, c, NULL, false); continue; }
        if (!affordable(x, c)) break;
        PlanEval ev;
        evaluate(x, c, &ev);
        record(x, c, &ev, ev.feasible);
        if (!ev.valid) {
            s->dropped.invalid++;
            if (!x->invalid_why[0]) snprintf(x->invalid_why, sizeof x->invalid_why, "%s", ev.why);
            plan_eval_free(&ev);
        } else if (!ev.feasible) {
            s->dropped.memory++;
            closest_offer(s, &closest_order, &ev, c->order);
            plan_eval_free(&ev);
        } else {
            s->feasible++;
            topk_offer(t, &ev, c->order);
        }
    }
    if (s->feasible > 0 && s->has_closest) { plan_eval_free(&s->closest); s->has_closest = false; }
}

/* Best-first over the time bounds; see the essay at the top. */
static bool rank_pruned(Ctx *x, TopK *t)
{
    PlanSearch *s = x->s;
    int64_t n = x->cands.n, nf = 0;
    Cand **fit = malloc((size_t)(n ? n : 1) * sizeof *fit);
    if (!fit) return false;
    for (int64_t i = 0; i < n; i++) {
        Cand *c = &x->cands.v[i];
        if (too_large(c)) { s->dropped.too_large++; record(x, c, NULL, false); }
        else if (c->fit == FIT_NO) { s->dropped.memory++; record(x, c, NULL, false); }
        else fit[nf++] = c;
    }
    qsort(fit, (size_t)nf, sizeof *fit, by_time_bound);
    bool done = false;
    for (int64_t i = 0; i < nf; i++) {
        Cand *c = fit[i];
        if (!done && t->n == t->k && c->t_lb > t->ev[t->n - 1].step_time) done = true;
        if (done && c->fit == FIT_YES) {      /* fits, cannot enter the top K */
            s->feasible++;
            s->pruned++;
            record(x, c, NULL, true);
            continue;
        }
        if (!affordable(x, c)) break;
        PlanEval ev;                           /* a candidate, or a fit to settle */
        evaluate(x, c, &ev);
        record(x, c, &ev, ev.valid && ev.feasible);
        if (!ev.valid) {
            s->dropped.invalid++;
            plan_eval_free(&ev);
        } else if (!ev.feasible) {
            s->dropped.memory++;
            plan_eval_free(&ev);
        } else {
            s->feasible++;
            if (done) { s->pruned++; plan_eval_free(&ev); }
            else topk_offer(t, &ev, c->order);
        }
    }
    /* the best layout of the other kind (cp 1 beside a CP winner, or the
     * reverse) when the top K holds none: best-first on its bounds, until
     * a bound exceeds the best found (plan_search_cp_note's figure) */
    int other = t->n > 0 ? plan_cp(&t->ev[0].layout) <= 1 : 0;
    for (int64_t i = 0; s->cp_searched && t->n > 0 && !s->cp_has[other] && i < nf; i++) {
        Cand *c = fit[i];
        if ((plan_cp(&c->l) > 1) != other) continue;
        if (!affordable(x, c)) break;
        PlanEval ev;
        evaluate(x, c, &ev);
        plan_eval_free(&ev);
    }
    for (int64_t i = 0; s->cp_searched && s->cp_has[other] && i < nf; i++) {   /* one with a better bound */
        Cand *c = fit[i];
        if (c->t_lb > s->cp_best[other].step_time) break;
        if ((plan_cp(&c->l) > 1) != other || !affordable(x, c)) continue;
        PlanEval ev;
        evaluate(x, c, &ev);
        plan_eval_free(&ev);
    }
    if (s->feasible == 0) {
        /* nothing fits: the smallest peak memory, best-first on its bound */
        int closest_order = 0;
        nf = 0;
        for (int64_t i = 0; i < n; i++)
            if (!too_large(&x->cands.v[i])) fit[nf++] = &x->cands.v[i];
        qsort(fit, (size_t)nf, sizeof *fit, by_mem_bound);
        for (int64_t i = 0; i < nf; i++) {
            if (s->has_closest && fit[i]->mem_lo > s->closest.peak_memory) break;
            if (!affordable(x, fit[i])) break;
            PlanEval ev;
            evaluate(x, fit[i], &ev);
            if (ev.valid) closest_offer(s, &closest_order, &ev, fit[i]->order);
            plan_eval_free(&ev);
        }
    }
    free(fit);
    return true;
}

/* Why: `check` reports the simulated Program's step time, and so does
 * plan_evaluate_layout() (cost.c runs the same simulation over the
 * micro-steps, tests/test_planner.c holds the two equal), so each row
 * re-checks to the digit without lowering the layout again. */
static bool simulate_results(const Plan *p, PlanSearch *s)
{
    (void)p;
    int n = s->n_results;
    s->sim_step = calloc((size_t)(n ? n : 1), sizeof *s->sim_step);
    s->sim_bubble = calloc((size_t)(n ? n : 1), sizeof *s->sim_bubble);
    if (!s->sim_step || !s->sim_bubble) return false;
    for (int i = 0; i < n; i++) {
        s->sim_step[i] = s->results[i].step_time;
        s->sim_bubble[i] = s->results[i].bubble_fraction;
    }
    return true;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

/* Why: a space too large to enumerate is refused before any layout is
 * built, naming what would shrink it: the plan fields left to the search. */
static void refuse(const Plan *p, const PlanSearch *s, int64_t max, char *why, size_t len)
{
    const Layout *L = &p->layout;
    static const char *const name[] = { "dp", "tp", "pp", "micro_batch", "schedule", "chunks",
                                        "zero", "recompute" };
    int64_t val[] = { L->dp, L->tp, L->pp, L->micro_batch, L->schedule, L->chunks, L->zero,
                      L->recompute };
    char free_[128] = "";
    size_t n = 0;
    for (int i = 0; i < (int)(sizeof val / sizeof val[0]); i++)
        if (!is_set(val[i]) && n + 32 < sizeof free_)
            n += (size_t)snprintf(free_ + n, sizeof free_ - n, "%s%s", n ? ", " : "", name[i]);
    if (s->space > max)
        snprintf(why, len, "the space has %.3g layouts, more than --max-layouts %lld; fix some of %s "
                 "in the plan block, or pass --max-layouts N (0: no limit)", (double)s->space,
                 (long long)max, n ? free_ : "its fields");
    else
        snprintf(why, len, "the space has %.3g layouts and %.3g chunk sums (deep interleaving; %d "
                 "sums count as a layout): %.3g layouts' work, more than --max-layouts %lld; fix "
                 "some of %s in the plan block, or pass --max-layouts N (0: no limit)", (double)s->space, s->space_sums, PLAN_SEARCH_SUMS_PER_LAYOUT,
                 s->space_work, (long long)max, n ? free_ : "its fields");
}

static bool search_once(const Plan *p, const PlanSearchOptions *o, PlanSearch *s, bool cp_force, char *why,
                        size_t len)
{
    Ctx x = { .p = p, .o = o, .s = s, .memo = { .p = p }, .cp_force = cp_force };
    TopK t = { .k = o->top > 0 ? o->top : 1 };
    bool ok = batch_factor(p->layout.global_batch, &x.bf) && rule_plan(p, &x.rules) &&
              plan_shapes_build(&p->model, &x.shapes);
    x.memo.shapes = x.syn.shapes = &x.shapes;
    if (ok) cp_decide(&x);
    if (ok) {                                  /* count first, then refuse or build */
        x.count_only = true;
        ok = enumerate(&x);
        x.count_only = false;
    }
    if (!ok) snprintf(why, len, "out of memory while enumerating the layouts");
    s->space_work = (double)s->space + s->space_sums / PLAN_SEARCH_SUMS_PER_LAYOUT;
    if (ok && o->max_layouts > 0 && s->space_work > (double)o->max_layouts) {
        refuse(p, s, o->max_layouts, why, len);
        s->refused = true;
        ok = false;
    }
    if (ok && s->space > 0) {                  /* the whole list at once: no regrowth */
        x.cands.v = malloc((size_t)s->space * sizeof *x.cands.v);
        x.cands.cap = s->space;
        ok = x.cands.v != NULL;
        if (!ok) snprintf(why, len, "out of memory for the %lld layouts of the space", (long long)s->space);
    }
    if (ok) ok = enumerate(&x);
    if (!ok && !why[0]) snprintf(why, len, "out of memory while enumerating the layouts");
    s->considered += x.cands.n;
    if (ok && o->admit && !o->record) admit_only(&x, o);
    if (ok && o->record) {
        s->points = calloc((size_t)(x.cands.n ? x.cands.n : 1), sizeof *s->points);
        s->n_points = x.cands.n;
        ok = s->points != NULL;
    }
    if (ok) {
        t.ev = calloc((size_t)t.k, sizeof *t.ev);
        t.order = calloc((size_t)t.k, sizeof *t.order);
        t.folded = calloc((size_t)t.k, sizeof *t.folded);
        ok = t.ev && t.order && t.folded;
    }
    if (ok) ok = o->prune ? rank_pruned(&x, &t) : (rank_brute(&x, &t), true);
    if (ok) {
        s->n_results = t.n;
        s->results = t.ev;
        s->top = t.k;
        for (int i = 0; i < t.n; i++) s->collapsed += t.folded[i];
        t.ev = NULL;
        if (x.has_invalid) plan_layout_check(p, &x.invalid_l, x.invalid_why, sizeof x.invalid_why);
        if (s->considered == 0)
            snprintf(why, len, "no layout satisfies the plan block's constraints on this cluster");
        else if (s->dropped.invalid == s->considered)
            snprintf(why, len, "no layout is valid: %s", x.invalid_why);
        else if (s->dropped.invalid + s->dropped.too_large == s->considered)
            snprintf(why, len, "every valid layout's step has more than %lld micro-steps (micro-batches "
                     "x stages x chunks x passes), too many to simulate; set a larger micro_batch or a "
                     "smaller global_batch in the plan block", (long long)PLAN_SEARCH_MAX_STEPS_LAYOUT);
        else if (s->dropped.invalid + s->dropped.too_large + s->dropped.refused == s->considered)
            snprintf(why, len, "no valid layout of the space can run there (%lld refused; the first: %s)",
                     (long long)s->dropped.refused, s->refused_why);
        ok = s->considered > 0 &&
             s->dropped.invalid + s->dropped.too_large + s->dropped.refused < s->considered;
    }
    free(t.ev);
    free(t.order);
    free(t.folded);
    free(x.cands.v);
    cut_memo_free(&x.memo);
    synth_free(&x.syn);
    free(x.bf.divs.v);
    free(x.rules.model.layers);
    plan_shapes_free(&x.shapes);
    return ok;
}

bool plan_search(const Plan *p, const PlanSearchOptions *o, PlanSearch *s, char *why, size_t len)
{
    memset(s, 0, sizeof *s);
    if (why && len) why[0] = 0;
    double t0 = now_s(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (!p->has_layout || p->layout.global_batch == PLAN_AUTO) {
        snprintf(why, len, "search needs global_batch in the plan block (sequences per step: a "
                 "training choice, not a layout one)");
        return false;
    }
    if (p->model.n_blocks < 1) {
        snprintf(why, len, "model %s has no transformer block to lay out", p->model.name);
        return false;
    }
    /* a block's cost under recompute_layers / recompute_every (and in
     * the uniform method's units) depends on where it sits in its chunk,
     * which the bounds' per-block sums (cut_build: one block a chunk)
     * cannot know: every layout evaluated */
    PlanSearchOptions whole = *o;
    if (plan_recompute_partial(&p->layout) || plan_recompute_unit(&p->layout) > 1) whole.prune = false;
    /* FP8's memory items (planner/fp8.c) are not in the per-stage memory
     * estimate (stage_fixed, stage_act): every layout evaluated */
    if (plan_fp8_on(&p->software)) whole.prune = false;
    bool ok = search_once(p, &whole, s, false, why, len);
    bool forced = false;
    if (!s->cp_searched && !s->refused && s->feasible == 0 && p->layout.cp == PLAN_AUTO) {
        /* nothing fits without context parallelism: search it too */
        plan_search_free(s);
        if (why && len) why[0] = 0;
        ok = search_once(p, &whole, s, true, why, len);
        forced = true;
    }
    if (ok && s->bound_violations > 0) {
        /* the cost model no longer matches the estimates: be right, not fast */
        int64_t v = s->bound_violations;
        PlanSearchOptions brute = *o;
        brute.prune = false;
        plan_search_free(s);
        ok = search_once(p, &brute, s, forced, why, len);
        s->bound_violations = v;
    }
    double t1 = now_s();
    s->search_time_s = t1 - t0;
    s->search_cpu_s = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (ok && !simulate_results(p, s)) {
        snprintf(why, len, "out of memory while simulating the results");
        ok = false;
    }
    s->simulate_time_s = now_s() - t1;
    return ok;
}

void plan_search_free(PlanSearch *s)
{
    for (int i = 0; i < s->n_results; i++) plan_eval_free(&s->results[i]);
    free(s->results);
    free(s->sim_step);
    free(s->sim_bubble);
    if (s->has_closest) plan_eval_free(&s->closest);
    free(s->points);
    memset(s, 0, sizeof *s);
}

/* ---- output ----------------------------------------------------------- */

const char *plan_search_dominant(const PlanEval *e)
{
    const PlanTimes *t = &e->times;
    struct { const char *name; double s; } c[] = {   /* the parts of PlanTimes */
        { "compute", t->compute - t->recompute },
        { "recompute", t->recompute },
        { "TP comm", t->tp },
        { "EP all-to-all", t->ep },
        { "PP p2p", t->p2p },
        { "DP comm", t->dp_exposed },
        { "ZeRO-3 gather", t->gather_exposed },
        { "ZeRO sync", t->sync },
        { "optimizer", t->optimizer },
        { "bubble", t->bubble },
    };
    int best = 0;
    for (int i = 1; i < (int)(sizeof c / sizeof c[0]); i++)
        if (c[i].s > c[best].s) best = i;
    return c[best].name;
}

static const double GIB = 1073741824.0;

/* "interleaved:2" for interleaved schedules, "-" at pp 1 (no pipeline:
 * the schedule is no choice), the plain name otherwise. */
static void schedule_text(const Layout *l, char *buf, size_t len)
{
    if (l->pp == 1) snprintf(buf, len, "-");
    else if (l->schedule == SCHED_INTERLEAVED) snprintf(buf, len, "interleaved:%d", l->chunks);
    else snprintf(buf, len, "%s", plan_schedule_name(l->schedule));
}

/* "dp 8 tp 2 cp 4 (ring) pp 1" of layout l. */
static void degrees_text(const Layout *l, char *buf, size_t len)
{
    if (plan_cp(l) > 1)
        snprintf(buf, len, "dp %d tp %d cp %d (%s) pp %d", l->dp, l->tp, plan_cp(l),
                 plan_cp_comm_name(plan_cp_comm(l)), l->pp);
    else
        snprintf(buf, len, "dp %d tp %d pp %d", l->dp, l->tp, l->pp);
}

bool plan_search_cp_note(const PlanSearch *s, char *buf, size_t len)
{
    if (s->n_results == 0) return false;
    if (!s->cp_searched) {
        if (!s->cp_skip[0]) return false;   /* the plan set cp 1: nothing to say */
        snprintf(buf, len, "%s", s->cp_skip);
        return true;
    }
    int best = plan_cp(&s->results[0].layout) > 1, other = !best;
    char d[96];
    if (s->cp_has[other]) {
        degrees_text(&s->cp_best[other].layout, d, sizeof d);
        snprintf(buf, len, "%s: the best layout %s (%s) takes %.4f s a step, %.1f %% longer",
                 best ? "cp > 1" : "cp 1", best ? "without CP" : "with CP", d, s->cp_best[other].step_time,
                 s->results[0].step_time > 0
                     ? 100 * (s->cp_best[other].step_time / s->results[0].step_time - 1) : 0.0);
    } else {
        snprintf(buf, len, "%s: %s", best ? "cp > 1" : "cp 1",
                 s->cp_fit[other] ? (best ? "no layout without CP comes within the top results' bounds"
                                          : "no layout with CP comes within the top results' bounds")
                                  : (best ? "no layout without CP fits in memory"
                                          : "no layout with CP fits in memory"));
    }
    return true;
}

void plan_search_print(FILE *out, const Plan *p, const PlanSearch *s)
{
    const Cluster *cl = &p->cluster;
    uint64_t params = 0;
    plan_model_params(&p->model, &params);
    fprintf(out, "# planc search: model %s (%.2fB parameters, %d blocks) on %s: %" PRId64
            " x %" PRId64 " %s (%.0f GiB), global batch %" PRId64 " x %" PRId64 " tokens\n",
            p->model.name, params / 1e9, p->model.n_blocks, cl->name ? cl->name : "cluster",
            cl->nodes, cl->gpus_per_node, cl->device.name ? cl->device.name : "GPU",
            cl->device.memory / GIB, p->layout.global_batch, p->model.seq);
    fprintf(out, "# %" PRId64 " layouts: %" PRId64 " feasible, %" PRId64 " over memory",
            s->considered, s->feasible, s->dropped.memory);
    if (s->dropped.invalid) fprintf(out, ", %" PRId64 " invalid", s->dropped.invalid);
    if (s->dropped.too_large)
        fprintf(out, ", %" PRId64 " too large to simulate (> %lld micro-steps)", s->dropped.too_large,
                (long long)PLAN_SEARCH_MAX_STEPS_LAYOUT);
    fprintf(out, "; %" PRId64 " evaluated in full, %" PRId64 " ruled out of the top %d by a bound\n",
            s->evaluated, s->pruned, s->top);
    if (s->collapsed)
        fprintf(out, "# %" PRId64 " layouts identical in every figure to a row below are folded into it\n",
                s->collapsed);
    if (s->capped)
        fprintf(out, "# stopped after %lld simulated micro-steps: the rows are the best evaluated, "
                "not proven best\n", (long long)PLAN_SEARCH_MAX_STEPS_TOTAL);
    fprintf(out, "# search time %.3f s (%.0f layouts/s); simulating the top %d: %.3f s\n", s->search_time_s,
            s->search_time_s > 0 ? (double)s->considered / s->search_time_s : 0.0, s->n_results,
            s->simulate_time_s);
    if (s->n_results == 0) return;
    char note[256];
    if (plan_search_cp_note(s, note, sizeof note)) fprintf(out, "# %s\n", note);
    bool moe = plan_model_has_moe(&p->model);   /* the ep column: mixtures only */
    bool cpc = false;                            /* the cp column: where a result has cp > 1 */
    for (int i = 0; i < s->n_results; i++) cpc |= plan_cp(&s->results[i].layout) > 1;
    if (moe)
        fprintf(out, "# ep: experts split over ep consecutive DP ranks; expert GEMMs and all-to-alls "
                     "assume uniform routing\n");
    fprintf(out, "%4s %6s %3s%s %4s%s %4s %5s %-15s %-9s %-3s %10s %12s %6s %9s %7s  %s\n",
            "rank", "dp", "tp", cpc ? "  cp cp_comm     " : "", "pp", moe ? "   ep" : "", "zero", "mb", "schedule", "recompute", "sp",
            "step(s)", "tokens/s", "MFU", "mem(GiB)", "bubble", "dominant");
    for (int i = 0; i < s->n_results; i++) {
        const PlanEval *e = &s->results[i];
        const Layout *l = &e->layout;
        double step = s->sim_step[i], scale = step > 0 ? e->step_time / step : 1;
        char sched[32];
        schedule_text(l, sched, sizeof sched);
        char ep[16] = "";
        if (moe) snprintf(ep, sizeof ep, " %4d", plan_ep(l));
        char cpt[32] = "";
        if (cpc) snprintf(cpt, sizeof cpt, " %3d %-12s", plan_cp(l), plan_cp(l) > 1 ? plan_cp_comm_name(plan_cp_comm(l)) : "-");
        fprintf(out, "%4d %6d %3d%s %4d%s %4d %5" PRId64 " %-15s %-9s %-3s %10.4f %12.0f %5.1f%% %9.2f %6.1f%%  %s\n",
                i + 1, l->dp, l->tp, cpt, l->pp, ep, l->zero, l->micro_batch, sched,
                plan_recompute_name(l->recompute), l->sequence_parallel == 1 ? "on" : "off",
                step, e->tokens_per_s * scale, 100 * e->mfu * scale, e->peak_memory / GIB,
                100 * s->sim_bubble[i], plan_search_dominant(e));
    }
}

void plan_search_json(FILE *out, const Plan *p, const PlanSearch *s)
{
    fprintf(out, "{\"evaluated\": %" PRId64 ", \"feasible\": %" PRId64 ", \"search_time_s\": %.6f"
            ", \"search_cpu_s\": %.6f, \"simulate_time_s\": %.6f, \"evaluated_in_full\": %" PRId64
            ", \"pruned\": %" PRId64
            ", \"dropped\": {\"memory\": %" PRId64 ", \"invalid\": %" PRId64 ", \"too_large\": %" PRId64
            "}, \"collapsed\": %" PRId64 ", \"capped\": %s",
            s->considered, s->feasible, s->search_time_s, s->search_cpu_s, s->simulate_time_s, s->evaluated,
            s->pruned,
            s->dropped.memory, s->dropped.invalid, s->dropped.too_large, s->collapsed,
            s->capped ? "true" : "false");
    char note[256];
    if (plan_search_cp_note(s, note, sizeof note)) {   /* why cp 1 or cp > 1 (plain text: no quotes) */
        fputs(", \"cp_note\": \"", out);
        for (const char *c = note; *c; c++) fputc(*c == '"' || *c == '\\' ? '\'' : *c, out);
        fputc('"', out);
    }
    fputs(", \"results\": [", out);
    for (int i = 0; i < s->n_results; i++) {
        fputs(i ? ",\n  " : "\n  ", out);
        plan_report_json(out, p, &s->results[i], s->sim_step[i], s->sim_bubble[i], NULL,
                         plan_search_dominant(&s->results[i]), true);
    }
    fprintf(out, "%s]", s->n_results ? "\n" : "");
    if (s->has_closest) {
        fprintf(out, ", \"closest\": ");
        plan_report_json(out, p, &s->closest, s->closest.step_time, s->closest.bubble_fraction,
                         s->closest.feasible ? NULL : s->closest.why, plan_search_dominant(&s->closest), true);
    }
    fprintf(out, "}\n");
}

bool plan_search_layout_key(const char *key)
{
    static const char *const keys[] = { "dp", "tp", "pp", "zero", "micro_batch", "global_batch",
                                        "schedule", "chunks", "recompute", "sequence_parallel", "ep",
                                        "recompute_modules", "recompute_layers", "recompute_every",
                                        "recompute_method", "cp", "cp_comm" };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (strcmp(key, keys[i]) == 0) return true;
    return false;
}

void plan_search_print_layout_block(FILE *out, const Layout *l)
{
    fprintf(out, "plan {\n    dp %d\n    tp %d\n    pp %d\n    zero %d\n    micro_batch %" PRId64
            "\n    global_batch %" PRId64 "\n    schedule %s\n", l->dp, l->tp, l->pp, l->zero,
            l->micro_batch, l->global_batch, plan_schedule_name(l->schedule));
    if (l->schedule == SCHED_INTERLEAVED) fprintf(out, "    chunks %d\n", l->chunks);
    fprintf(out, "    recompute %s\n    sequence_parallel %s\n",
            plan_recompute_name(l->recompute), l->sequence_parallel == 1 ? "true" : "false");
    if (l->recompute == RECOMPUTE_SELECTIVE && l->recompute_modules) {
        fputs("    recompute_modules", out);
        for (int m = 0; m < PLAN_N_RECOMPUTE_MODULES; m++)
            if (l->recompute_modules & PLAN_RC_BIT(m)) fprintf(out, " %s", plan_recompute_module_name(m));
        fputs("\n", out);
    }
    if (l->recompute == RECOMPUTE_FULL && l->recompute_layers > 0)
        fprintf(out, "    recompute_layers %d\n", l->recompute_layers);
    if (l->recompute == RECOMPUTE_FULL && l->recompute_layers > 0 && l->recompute_method == PLAN_RC_METHOD_UNIFORM)
        fputs("    recompute_method uniform\n", out);
    if (l->recompute == RECOMPUTE_FULL && l->recompute_every > 0)
        fprintf(out, "    recompute_every %d\n", l->recompute_every);
    if (plan_ep(l) > 1) fprintf(out, "    ep %d\n", l->ep);
    if (l->etp >= 1 && l->etp != l->tp) fprintf(out, "    etp %d\n", l->etp);
    fprintf(out, "    cp %d\n", plan_cp(l));   /* always: an unset cp is searched */
    if (plan_cp(l) > 1) fprintf(out, "    cp_comm %s\n", plan_cp_comm_name(plan_cp_comm(l)));
    fputs("}\n", out);
}
