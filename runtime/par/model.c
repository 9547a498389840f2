/*
 * model.c: the parameter table laid out on one rank, and ZeRO 0/1/2/3 on it.
 *
 * A rank holds the tensors of its pipeline stage's chunks, each cut to its
 * TP slice, in one flat fp32 index space [0, P): chunk by chunk, and inside
 * a chunk layer by layer, so a layer is a contiguous gradient bucket. Each
 * chunk's slice of that space is its own allocation (ZeRO-3: a layer's, in
 * a pool of two, around its use). Every buffer is counted by planrt's
 * allocator under its kind (mem.c; planner/memory.c predicts each). The DP shard of rank r is
 * prt_shard(P, dp, r); a collective over a range [a, b) of the flat space
 * passes one count per DP rank, |[a, b) ∩ shard_i|, so buckets, chunks and
 * shards never have to line up.
 *
 * ZeRO stages (Rajbhandari et al. 2020), what each rank stores:
 *   0  full weights, full gradients, full AdamW state; gradients all-reduced
 *   1  full weights and gradients, state of its shard; gradients
 *      reduce-scattered once per step, shards all-gathered after the update
 *   2  as 1, but no full gradient buffer: each layer's bucket opens at its
 *      backward's first write, is reduce-scattered as the layer finishes
 *      (after every micro-batch's backward) and freed once reduced, one in
 *      flight while the next is written; the shard accumulates
 *   3  as 2, and weights are sharded too: gathered layer by layer as the
 *      forward and again the backward reach them, the next layer's gather
 *      running while the current one computes, two layers at most
 * With dp == 1 every stage is stage 0 (a shard of one rank is the whole).
 *
 * Gradients are summed over DP (the loss is already divided by the tokens of
 * the global batch), so any split of the batch gives the same sum. The
 * step ends with the Program's step-level collectives, each its own call
 * that the generated step function makes where the Program puts it:
 * prt_zero_sp_norm_reduce (SP: norm gradients over TP),
 * prt_zero_embed_reduce (a tied head: the embedding gradient between the
 * first and the last stage), prt_zero_norm_reduce (the squared gradient
 * norm over all ranks: it clips, it is logged, and a NaN or Inf in it stops
 * the run before the update); prt_zero_opt_step then only updates. The
 * struct itself is in par_model.h, which save.c (checkpoints) shares.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "par_internal.h"
#include "par_model.h"

static size_t numel(const prt_model *m, int i) { return m->rows[i] * m->cols[i]; }

/* ---- layout ------------------------------------------------------------ */

/* The local shape of tensor i on TP rank t of tp. */
static prt_status local_shape(const prt_param *p, int tp, size_t *rows, size_t *cols)
{
    *rows = p->rows;
    *cols = p->cols;
    if (p->logical_rows > p->rows)
        return prtp_fail(PRT_ERR_ARG, "%s: %zu logical rows of %zu", p->name, p->logical_rows,
                         p->rows);
    if (p->split == PRT_SPLIT_ROWS) {
        size_t r = 0, sum = 0;
        int np = p->nparts > 0 ? p->nparts : 1;
        for (int k = 0; k < np; k++) {
            size_t part = p->nparts > 0 ? p->part[k] : p->rows;
            if (part % (size_t)tp)
                return prtp_fail(PRT_ERR_ARG, "%s: %zu rows do not split over tp %d",
                                 p->name, part, tp);
            r += part / (size_t)tp;
            sum += part;
        }
        if (sum != p->rows)
            return prtp_fail(PRT_ERR_ARG, "%s: row groups do not add up", p->name);
        *rows = r;
    } else if (p->split == PRT_SPLIT_COLS) {
        if (p->cols % (size_t)tp)
            return prtp_fail(PRT_ERR_ARG, "%s: %zu columns do not split over tp %d",
                             p->name, p->cols, tp);
        *cols = p->cols / (size_t)tp;
    }
    return PRT_OK;
}

/* Give every local tensor its place in the flat space, chunk by chunk. */
static prt_status lay_out(prt_model *m)
{
    size_t at = 0;
    for (int l = 0; l < m->n_layers; l++) m->b0[l] = m->b1[l] = NOWHERE;
    for (int ch = 0; ch < m->chunks; ch++) {
        m->c0[ch] = at;
        int vs = ch * m->pp + m->stage;
        for (int i = 0; i < m->n; i++) {
            const prt_param *p = &m->tab[i];
            if (p->vstage != vs) continue;
            if (p->layer < 0 || p->layer >= m->n_layers)
                return prtp_fail(PRT_ERR_ARG, "%s: layer %d out of range", p->name, p->layer);
            prt_status st = local_shape(p, m->tp, &m->rows[i], &m->cols[i]);
            if (st) return st;
            if (m->b0[p->layer] == NOWHERE) m->b0[p->layer] = at;
            m->bch[p->layer] = ch;
            m->off[i] = at;
            at += numel(m, i);
            m->b1[p->layer] = at;
        }
        m->c1[ch] = at;
    }
    m->P = at;
    return PRT_OK;
}

/* Tensor i's local slice from (seed, i, global index), padding included. */
static prt_status init_values(const prt_model *m, int i, float *dst, uint64_t seed)
{
    const prt_param *p = &m->tab[i];
    size_t n = numel(m, i), t = (size_t)m->tpr, tp = (size_t)m->tp;
    if (p->tie >= 0) i = p->tie;   /* a tied copy starts as the original */
    if (p->init == PRT_INIT_ONES) return prt_init_const(dst, n, 1.0f);
    if (p->init == PRT_INIT_ZEROS) return prt_init_const(dst, n, 0.0f);
    if (p->split == PRT_REPLICATED) return prt_init_normal(dst, n, seed, (uint64_t)i, 0, p->std);
    if (p->split == PRT_SPLIT_COLS) {
        size_t w = p->cols / tp;
        return prt_init_normal_2d(dst, p->rows, p->cols, 0, p->rows, t * w, (t + 1) * w,
                                  seed, (uint64_t)i, p->std);
    }
    int np = p->nparts > 0 ? p->nparts : 1;
    size_t global0 = 0, local0 = 0;
    for (int k = 0; k < np; k++) {
        size_t part = p->nparts > 0 ? p->part[k] : p->rows, h = part / tp;
        prt_status st = prt_init_normal_2d(dst + local0 * p->cols, p->rows, p->cols,
                                           global0 + t * h, global0 + (t + 1) * h, 0, p->cols,
                                           seed, (uint64_t)i, p->std);
        if (st) return st;
        global0 += part;
        local0 += h;
    }
    return PRT_OK;
}

/* The global row of local row lr of tensor p's slice on TP rank t of tp. */
static size_t global_row(const prt_param *p, int tp, int t, size_t lr)
{
    if (p->split != PRT_SPLIT_ROWS) return lr;
    int np = p->nparts > 0 ? p->nparts : 1;
    size_t g0 = 0;
    for (int k = 0; k < np; k++) {
        size_t part = p->nparts > 0 ? p->part[k] : p->rows, h = part / (size_t)tp;
        if (lr < h) return g0 + (size_t)t * h + lr;
        lr -= h;
        g0 += part;
    }
    return p->rows;   /* not reached for a valid local row */
}

/* Zero the padding rows (global row >= logical rows) of tensor i's local
 * slice dst: a padded vocabulary's rows past V start at 0, and nothing
 * ever moves them (see prt_param.logical_rows). */
static prt_status zero_padding(const prt_model *m, int i, float *dst)
{
    const prt_param *p = &m->tab[i];
    size_t R = prtp_logical_rows(p);
    for (size_t r = 0; R < p->rows && r < m->rows[i]; r++)
        if (global_row(p, m->tp, m->tpr, r) >= R) {
            prt_status st = prt_init_const(dst + r * m->cols[i], m->cols[i], 0.0f);
            if (st) return st;
        }
    return PRT_OK;
}

/* Initialise tensor i's local slice into dst from (seed, i, global index):
 * row-major, so a real row of a padded tensor gets the values it has in the
 * unpadded one (index row * cols + col either way); padding rows are 0. */
static prt_status init_tensor(const prt_model *m, int i, float *dst, uint64_t seed)
{
    prt_status st = init_values(m, i, dst, seed);
    return st ? st : zero_padding(m, i, dst);
}

/* Zeroed device memory, counted by planrt's allocator under its kind. */
static void *zalloc(prt_mem_kind kind, size_t bytes) { return prt_mem_alloc(kind, bytes); }

/* The fp32 weights' kind and the compute weights' element type. The CPU
 * trains in fp32: its fp32 weights are the weights (params, 4 bytes). The
 * CUDA build computes in bf16 (params, 2 bytes) and keeps the fp32 weights
 * as AdamW's master copy, which ZeRO counts in the optimizer state (its 12
 * bytes: master, m, v; Rajbhandari et al. 2020 Sec. 3; planner/memory.c). */
#ifdef PRT_CUDA
#define MASTER_KIND PRT_MEM_OPTIMIZER
#define ACT_DTYPE   PRT_BF16
#else
#define MASTER_KIND PRT_MEM_PARAMS
#define ACT_DTYPE   PRT_FP32
#endif

static void drop_layer(prt_model *m, int l);

/* ---- the buffer pools -------------------------------------------------------
 * Gradient buckets (ZeRO >= 2) and gathered layers (ZeRO-3) are taken from
 * and given back to a pool of buffers of the largest layer's size, so the
 * backward and the gathers allocate nothing after the first step: freeing
 * and allocating them every micro-batch cost page faults (the buffers are
 * large enough to be mappings of their own, mem.c) and slowed ZeRO-2/3
 * steps by 20 %. The pool's buffers are counted by the allocator while
 * they exist, so the report's peak is the memory truly held: two buckets
 * and two layers of the largest layer's size, as planner/memory.c counts. */

static void pool_init(Pool *p, int cap, size_t bytes)
{
    p->buf = (void **)calloc((size_t)cap, sizeof *p->buf);
    p->busy = (bool *)calloc((size_t)cap, sizeof *p->busy);
    p->cap = p->buf && p->busy ? cap : 0;
    p->n = 0;
    p->bytes = bytes;
}

/* A free buffer of the pool (a new one when all are in use); NULL when out
 * of memory or more are asked for than the pool may hold. */
static void *pool_get(Pool *p)
{
    for (int i = 0; i < p->n; i++)
        if (!p->busy[i]) { p->busy[i] = true; return p->buf[i]; }
    if (p->n == p->cap || !(p->buf[p->n] = zalloc(PRT_MEM_BUFFERS, p->bytes))) return NULL;
    p->busy[p->n] = true;
    return p->buf[p->n++];
}

static void pool_put(Pool *p, void *b)
{
    for (int i = 0; b && i < p->n; i++)
        if (p->buf[i] == b) p->busy[i] = false;
}

static void pool_free(Pool *p)
{
    for (int i = 0; i < p->n; i++) prt_mem_free(p->buf[i]);
    free(p->buf);
    free(p->busy);
    memset(p, 0, sizeof *p);
}

/* --dry-run's stand-in for a request: nothing was started, nothing to wait */
static char dry_req;
#define DRY_REQ ((prt_request *)(void *)&dry_req)

/* Wait for *r (NULL, or the dry run's stand-in: nothing) and clear it. */
static prt_status wait_req(prt_request **r, const char *what)
{
    prt_status st = PRT_OK;
    if (*r && *r != DRY_REQ) st = prtp_check(prt_wait(*r), what);
    *r = NULL;
    return st;
}

/* Allocate chunk ch's whole weights (ZeRO 0-2): the fp32 ones unless they
 * live as a shard (mshard), and on CUDA the bf16 compute copy. */
static prt_status alloc_weights(prt_model *m, int ch)
{
    size_t n = m->c1[ch] - m->c0[ch];
    if (!m->mshard) m->par[ch] = (float *)zalloc(MASTER_KIND, n * sizeof(float));
#ifdef PRT_CUDA
    m->w[ch] = (prt_act *)zalloc(PRT_MEM_PARAMS, n * sizeof(prt_act));
#else
    m->w[ch] = (prt_act *)m->par[ch];
#endif
    if ((!m->mshard && !m->par[ch]) || !m->w[ch])
        return prtp_fail(PRT_ERR_NOMEM, "weights of chunk %d: out of memory", ch);
    return PRT_OK;
}

static void free_weights(prt_model *m, int ch)
{
#ifdef PRT_CUDA
    prt_mem_free(m->w[ch]);
#endif
    prt_mem_free(m->par[ch]);
    m->par[ch] = NULL;
    m->w[ch] = NULL;
}

/* Per-rank counts of the range [a, b) over the DP shards; returns this
 * rank's first element of the range inside its shard (offset in the shard). */
static size_t range_counts(prt_model *m, size_t a, size_t b, size_t *mine_at)
{
    for (int r = 0; r < m->dp; r++) {
        size_t o, k;
        prt_shard(m->P, m->dp, r, &o, &k);
        size_t lo = prtp_max(a, o), hi = prtp_min(b, o + k);
        m->counts[r] = hi > lo ? hi - lo : 0;
    }
    size_t lo = prtp_max(a, m->so);
    *mine_at = lo < m->so + m->sc ? lo - m->so : 0;
    return m->counts[m->dpr];
}

/* Chunk ch's compute copy from its whole fp32 weights (none on the CPU:
 * w aliases par). */
static void refresh_act(prt_model *m, int ch)
{
#ifdef PRT_CUDA
    prt_to_act(m->w[ch], m->par[ch], m->c1[ch] - m->c0[ch]);
#else
    (void)m; (void)ch;
#endif
}

/* CUDA, ZeRO-3: the bf16 shard the gathers read, from the fp32 master
 * shard (on the CPU they are one buffer). */
static void refresh_shard(prt_model *m)
{
#ifdef PRT_CUDA
    if (m->zero == 3) prt_to_act(m->wshard, m->pshard, m->sc);
#else
    (void)m;
#endif
}

/* Chunk ch's weights from the seed (all chunks but ZeRO-3's; under mshard
 * only allocated here, init_by_layer writes them). */
static prt_status init_chunk(prt_model *m, int ch, uint64_t seed)
{
    prt_status st = alloc_weights(m, ch);
    if (m->dry || m->mshard) return st;   /* laid out, not written (yet) */
    for (int i = 0; !st && i < m->n; i++)
        if (m->off[i] != NOWHERE && m->tab[i].vstage / m->pp == ch)
            st = init_tensor(m, i, m->par[ch] + (m->off[i] - m->c0[ch]), seed);
    if (!st) refresh_act(m, ch);
    return st;
}

/* mshard: this rank's shard of the fp32 weights from the seed, one layer at
 * a time (a layer's tensors are contiguous in the flat space), so the
 * start-up peak is one layer beside the shard, never the stage; on CUDA
 * under ZeRO 1-2 each whole layer also goes to the bf16 compute weights. */
static prt_status init_by_layer(prt_model *m, uint64_t seed)
{
    prt_status st = PRT_OK;
    for (int l = 0; !st && l < m->n_layers; l++) {
        size_t a = m->b0[l], b = m->b1[l];
        if (a == NOWHERE || a == b) continue;
        float *buf = (float *)zalloc(PRT_MEM_BUFFERS, (b - a) * sizeof(float));
        if (!buf) return prtp_fail(PRT_ERR_NOMEM, "weights of layer %d: out of memory", l);
        for (int i = 0; !st && i < m->n; i++)
            if (m->off[i] != NOWHERE && m->tab[i].layer == l)
                st = init_tensor(m, i, buf + (m->off[i] - a), seed);
        size_t lo = prtp_max(a, m->so), hi = prtp_min(b, m->so + m->sc);
        if (!st && hi > lo)
            st = prt_copy(m->pshard + (lo - m->so), buf + (lo - a), (hi - lo) * sizeof(float));
        int ch = m->bch[l];
        if (!st && m->w[ch]) prt_to_act(m->w[ch] + (a - m->c0[ch]), buf, b - a);   /* CUDA, ZeRO 1-2 */
        prt_mem_free(buf);
    }
    if (!st) refresh_shard(m);
    return st;
}

prt_status prt_model_new(prt_ctx *c, const prt_param *tab, int n_params, int n_layers,
                         int chunks, int zero, uint64_t seed, prt_model **out)
{
    prtp_clear();
    *out = NULL;
    if (zero < 0 || zero > 3 || chunks < 1 || n_params < 1)
        return prtp_fail(PRT_ERR_ARG, "prt_model_new: zero %d, chunks %d, %d tensors", zero,
                         chunks, n_params);
    prt_model *m = (prt_model *)calloc(1, sizeof *m);
    if (!m) return prtp_fail(PRT_ERR_NOMEM, "prt_model_new: out of memory");
    m->c = c; m->tab = tab; m->n = n_params; m->n_layers = n_layers; m->chunks = chunks;
    /* weights are replicated over dp and cp alike: the gradient group is
     * the dp x cp ranks with this (tp, pp), ordered by cp + CP * dp, and
     * the mean over its ranks is the mean over all tokens (every CP rank
     * holds T/cp tokens of every sequence of its DP slice) */
    int cp = prt_cp_size(c);
    m->pp = c->layout.pp; m->tp = c->layout.tp; m->dp = c->layout.dp * cp;
    m->stage = c->coord.pp; m->tpr = c->coord.tp; m->dpr = c->coord.cp + cp * c->coord.dp;
    m->grads = cp > 1 ? c->dpcp : c->dp;
    m->zero = m->dp == 1 ? 0 : zero;
#ifdef PRT_CUDA
    m->mshard = m->zero >= 1;   /* the fp32 master: this rank's shard only */
#else
    m->mshard = m->zero == 3;   /* the fp32 weights are the weights: sharded under ZeRO-3 */
#endif
    m->dry = prt_mem_dry();
    m->off = (size_t *)calloc((size_t)n_params, sizeof(size_t));
    m->rows = (size_t *)calloc((size_t)n_params, sizeof(size_t));
    m->cols = (size_t *)calloc((size_t)n_params, sizeof(size_t));
    m->b0 = (size_t *)calloc((size_t)n_layers + 1, sizeof(size_t));
    m->b1 = (size_t *)calloc((size_t)n_layers + 1, sizeof(size_t));
    m->bch = (int *)calloc((size_t)n_layers + 1, sizeof(int));
    m->launched = (unsigned char *)calloc((size_t)n_layers + 1, 1);
    m->c0 = (size_t *)calloc((size_t)chunks, sizeof(size_t));
    m->c1 = (size_t *)calloc((size_t)chunks, sizeof(size_t));
    m->par = (float **)calloc((size_t)chunks, sizeof(float *));
    m->w = (prt_act **)calloc((size_t)chunks, sizeof(prt_act *));
    m->grad = (float **)calloc((size_t)chunks, sizeof(float *));
    m->counts = (size_t *)calloc((size_t)m->dp, sizeof(size_t));
    m->cs = (ChunkState *)calloc((size_t)chunks, sizeof(ChunkState));
    size_t nl = (size_t)n_layers + 1;
    m->gb = (float **)calloc(nl, sizeof(float *));
    m->lreq = (prt_request **)calloc(nl, sizeof(prt_request *));
    m->lwa = (prt_act **)calloc(nl, sizeof(prt_act *));
    m->wreq = (prt_request **)calloc(nl, sizeof(prt_request *));
    m->in_flight = m->cur = -1;
    if (!m->gb || !m->lreq || !m->lwa || !m->wreq || !m->off || !m->rows || !m->cols || !m->b0 || !m->b1 || !m->bch || !m->launched || !m->c0 || !m->c1 || !m->par ||
        !m->w || !m->grad || !m->counts || !m->cs) {
        prt_model_free(m);
        return prtp_fail(PRT_ERR_NOMEM, "prt_model_new: out of memory");
    }
    for (int i = 0; i < n_params; i++) m->off[i] = NOWHERE;
    prt_status st = lay_out(m);
    size_t lmax = 0;   /* elements of the largest layer here */
    for (int l = 0; !st && l < n_layers; l++)
        if (m->b0[l] != NOWHERE) lmax = prtp_max(lmax, m->b1[l] - m->b0[l]);
    pool_init(&m->bpool, n_layers + 1, lmax * sizeof(float));
    pool_init(&m->wpool, n_layers + 1, lmax * sizeof(prt_act));
    if (!st && (!m->bpool.cap || !m->wpool.cap)) st = prtp_fail(PRT_ERR_NOMEM, "prt_model_new: out of memory");
    if (m->zero == 0) { m->so = 0; m->sc = m->P; }
    else prt_shard(m->P, m->dp, m->dpr, &m->so, &m->sc);
    size_t state = m->zero == 0 ? m->P : m->sc;
    if (!st) {
        m->mom = (float *)zalloc(PRT_MEM_OPTIMIZER, state * sizeof(float));
        m->var = (float *)zalloc(PRT_MEM_OPTIMIZER, state * sizeof(float));
        /* ZeRO-2/3: the reduced gradients' only home; ZeRO-1 reduces in
         * place into its whole gradients (g_at) */
        if (m->zero >= 2) m->gshard = (float *)zalloc(PRT_MEM_GRADS, m->sc * sizeof(float));
        if (m->mshard) m->pshard = (float *)zalloc(MASTER_KIND, m->sc * sizeof(float));
#ifdef PRT_CUDA
        if (m->zero == 3) m->wshard = (prt_act *)zalloc(PRT_MEM_PARAMS, m->sc * sizeof(prt_act));
#else
        m->wshard = (prt_act *)m->pshard;
#endif
        if (!m->mom || !m->var || (m->zero >= 2 && !m->gshard) || (m->mshard && !m->pshard) ||
            (m->zero == 3 && !m->wshard))
            st = prtp_fail(PRT_ERR_NOMEM, "optimizer state: out of memory");
    }
    for (int ch = 0; !st && ch < chunks; ch++) {
        m->cs[ch].req = (prt_request **)calloc((size_t)n_layers + 1, sizeof(prt_request *));
        m->cs[ch].greq = (prt_request **)calloc((size_t)n_layers + 1, sizeof(prt_request *));
        if (!m->cs[ch].req || !m->cs[ch].greq) st = prtp_fail(PRT_ERR_NOMEM, "prt_model_new: out of memory");
        if (!st && m->zero != 3) st = init_chunk(m, ch, seed);
        if (!st && m->zero <= 1) {
            m->grad[ch] = (float *)zalloc(PRT_MEM_GRADS, (m->c1[ch] - m->c0[ch]) * sizeof(float));
            if (!m->grad[ch]) st = prtp_fail(PRT_ERR_NOMEM, "gradients: out of memory");
        }
    }
    if (!st && m->mshard && !m->dry) st = init_by_layer(m, seed);
    if (st) {
        prt_model_free(m);
        return st;
    }
    *out = m;
    return PRT_OK;
}

void prt_model_free(prt_model *m)
{
    if (!m) return;
    for (int ch = 0; ch < m->chunks; ch++) {
        if (m->cs) {
            for (int k = 0; k < m->cs[ch].n_req; k++) prt_wait(m->cs[ch].req[k]);
            free(m->cs[ch].req);
            free(m->cs[ch].greq);
        }
        if (m->par && m->w && (m->par[ch] || m->w[ch])) free_weights(m, ch);
        if (m->grad && m->grad[ch]) prt_mem_free(m->grad[ch]);
    }
    for (int l = 0; l < m->n_layers && m->gb && m->lreq && m->lwa && m->wreq; l++) {
        wait_req(&m->lreq[l], "ZeRO gradient reduce-scatter");
        wait_req(&m->wreq[l], "ZeRO-3 parameter all-gather");
        drop_layer(m, l);
    }
    pool_free(&m->bpool);
    pool_free(&m->wpool);
    free(m->gb); free(m->lreq); free(m->lwa); free(m->wreq);
#ifdef PRT_CUDA
    prt_mem_free(m->wshard);
#endif
    prt_mem_free(m->pshard); prt_mem_free(m->gshard); prt_mem_free(m->mom); prt_mem_free(m->var);
    free(m->off); free(m->rows); free(m->cols); free(m->b0); free(m->b1); free(m->bch);
    free(m->launched); free(m->c0);
    free(m->c1); free(m->par); free(m->w); free(m->grad); free(m->counts); free(m->cs);
    free(m);
}

static int chunk_of(const prt_model *m, int i) { return m->tab[i].vstage / m->pp; }

/* ---- ZeRO-2/3 gradient buckets ---------------------------------------------
 * Under ZeRO >= 2 no full-size gradient buffer lives through the backward:
 * layer l's bucket is allocated at its backward's first write, seeded with
 * this rank's shard so far (the reduce-scatter adds the others' to it), and
 * freed once its reduce-scatter is done. One bucket is reduced while the
 * next is written: the pool is two buckets (DeepSpeed's IPG buckets). */

static prt_status open_bucket(prt_model *m, int l)
{
    size_t a = m->b0[l], b = m->b1[l];
    m->gb[l] = (float *)pool_get(&m->bpool);   /* memory.c: buffers */
    if (!m->gb[l]) return prtp_fail(PRT_ERR_NOMEM, "gradient bucket of layer %d: out of memory", l);
    if (m->dry) return PRT_OK;
    prt_status st = prt_zero(m->gb[l], (b - a) * sizeof(float));   /* a used buffer */
    size_t lo = prtp_max(a, m->so), hi = prtp_min(b, m->so + m->sc);
    if (st || hi <= lo) return st;
    return prt_copy(m->gb[l] + (lo - a), m->gshard + (lo - m->so), (hi - lo) * sizeof(float));
}

/* Wait for bucket l's reduce-scatter and free the bucket. */
static prt_status close_bucket(prt_model *m, int l)
{
    prt_status st = PRT_OK;
    st = wait_req(&m->lreq[l], "ZeRO gradient reduce-scatter");
    pool_put(&m->bpool, m->gb[l]);
    m->gb[l] = NULL;
    if (m->in_flight == l) m->in_flight = -1;
    return st;
}

/* ---- ZeRO-3 layer gathers ---------------------------------------------------
 * Weights are gathered layer by layer into a pool of two: the layer
 * computing and the next one (the layer above in a forward, below in a
 * backward), whose all-gather runs while the current one computes. A
 * layer is gathered when its first weight is asked for (prt_w) and freed
 * when the one after the next is. The gather moves the compute dtype from
 * the compute shard (wshard): 2 bytes per parameter on CUDA, 4 on the CPU,
 * the bytes planner/cost.c's ZeRO-3 gather assumes. */

static void drop_layer(prt_model *m, int l)
{
    pool_put(&m->wpool, m->lwa[l]);
    m->lwa[l] = NULL;
    if (m->cur == l) m->cur = -1;
}

static prt_status gather_layer(prt_model *m, int l)
{
    size_t a = m->b0[l], b = m->b1[l], at;
    m->lwa[l] = (prt_act *)pool_get(&m->wpool);   /* memory.c: buffers */
    if (!m->lwa[l]) return prtp_fail(PRT_ERR_NOMEM, "gathered layer %d: out of memory", l);
    if (m->dry) { m->wreq[l] = DRY_REQ; return PRT_OK; }
    range_counts(m, a, b, &at);
    return prtp_check(prt_all_gather_v_async(m->grads, m->wshard + at, m->lwa[l], m->counts,
                                             ACT_DTYPE, &m->wreq[l]),
                      "ZeRO-3 parameter all-gather");
}

/* Layer l's gathered weights complete. */
static prt_status layer_ready(prt_model *m, int l)
{
    return wait_req(&m->wreq[l], "ZeRO-3 parameter all-gather");
}

/* The layer after l in this pass's direction inside its chunk (-1: none). */
static int next_layer(const prt_model *m, int l)
{
    int d = m->bwd ? -1 : 1;
    for (int k = l + d; k >= 0 && k < m->n_layers; k += d) {
        if (m->b0[k] == NOWHERE || m->bch[k] != m->bch[l]) continue;
        if (m->b0[k] < m->b1[k]) return k;
    }
    return -1;
}

/* Make layer l the computing one: gathered (or waited for), every other
 * gathered layer but the next freed, the next one's gather started. */
static prt_status use_layer(prt_model *m, int l)
{
    if (m->cur == l && m->lwa[l]) return PRT_OK;
    int nx = next_layer(m, l);
    prt_status st = PRT_OK;
    for (int k = 0; k < m->n_layers; k++) {
        if (k == l || k == nx || !m->lwa[k]) continue;
        st = wait_req(&m->wreq[k], "ZeRO-3 parameter all-gather");
        drop_layer(m, k);
    }
    if (!st && !m->lwa[l]) st = gather_layer(m, l);
    if (!st) st = layer_ready(m, l);
    if (!st && nx >= 0 && !m->lwa[nx]) st = gather_layer(m, nx);
    if (!st) m->cur = l;
    return st;
}

/* Free every gathered layer of chunk ch (ch < 0: of all chunks). */
static prt_status drop_layers(prt_model *m, int ch)
{
    prt_status st = PRT_OK;
    for (int l = 0; l < m->n_layers; l++) {
        if (!m->lwa[l] || (ch >= 0 && m->bch[l] != ch)) continue;
        prt_status w = wait_req(&m->wreq[l], "ZeRO-3 parameter all-gather");
        if (!st) st = w;
        drop_layer(m, l);
    }
    return st;
}

prt_act *prt_w(prt_model *m, int i)
{
    if (i < 0 || i >= m->n || m->off[i] == NOWHERE) return NULL;
    int ch = chunk_of(m, i), l = m->tab[i].layer;
    if (m->w[ch]) return m->w[ch] + (m->off[i] - m->c0[ch]);
    if (m->zero != 3 || use_layer(m, l)) return NULL;
    return m->lwa[l] + (m->off[i] - m->b0[l]);
}

float *prt_g(prt_model *m, int i)
{
    if (i < 0 || i >= m->n || m->off[i] == NOWHERE) return NULL;
    int ch = chunk_of(m, i), l = m->tab[i].layer;
    if (m->zero < 2) return m->grad[ch] ? m->grad[ch] + (m->off[i] - m->c0[ch]) : NULL;
    if (!m->gb[l] && open_bucket(m, l)) return NULL;
    return m->gb[l] + (m->off[i] - m->b0[l]);
}

size_t prt_param_rows(const prt_model *m, int i) { return m->rows[i]; }
size_t prt_param_cols(const prt_model *m, int i) { return m->cols[i]; }
size_t prt_model_numel(const prt_model *m) { return m->P; }
size_t prt_model_shard_numel(const prt_model *m) { return m->sc; }

/* ---- ZeRO ------------------------------------------------------------------ */

/* Chunk ch's whole fp32 weights gathered into par[ch] from the shards (the
 * dump under mshard: every tensor whole at once; training gathers the
 * compute weights layer by layer). */
static prt_status gather_whole(prt_model *m, int ch)
{
    if (!m->mshard || m->par[ch]) return PRT_OK;
    prt_status st = drop_layers(m, ch);
    size_t P = m->c1[ch] - m->c0[ch];
    if (!st && !(m->par[ch] = (float *)zalloc(PRT_MEM_BUFFERS, P * sizeof(float))))
        st = prtp_fail(PRT_ERR_NOMEM, "weights of chunk %d: out of memory", ch);
    prt_request **req = m->cs[ch].greq;   /* not .req: a reduction may be in flight */
    int n = 0;
    /* one all-gather per bucket (layer), all in flight together */
    for (int l = 0; !st && l < m->n_layers; l++) {
        size_t a = m->b0[l], b = m->b1[l], at;
        if (a == NOWHERE || a < m->c0[ch] || b > m->c1[ch] || a == b) continue;
        range_counts(m, a, b, &at);
        st = prtp_check(prt_all_gather_v_async(m->grads, m->pshard + at,
                                               m->par[ch] + (a - m->c0[ch]), m->counts,
                                               PRT_FP32, &req[n++]),
                        "parameter all-gather of the dump");
    }
    prt_status w = prtp_check(prt_wait_all(req, n), "ZeRO-3 parameter all-gather");
    if (!st) st = w;
    return st;
}

static void release_whole(prt_model *m, int ch)
{
    if (!m->mshard) return;
    prt_mem_free(m->par[ch]);
    m->par[ch] = NULL;
}

prt_status prt_zero_dry_pass(prt_model *m, int ch, bool bwd)
{
    prtp_clear();
    if (!m->dry) return prtp_fail(PRT_ERR_ARG, "prt_zero_dry_pass outside a dry run");
    m->bwd = bwd;
    prt_status st = PRT_OK;
    for (int j = 0; !st && j < m->n_layers; j++) {
        int l = bwd ? m->n_layers - 1 - j : j;
        if (m->b0[l] == NOWHERE || m->bch[l] != ch || m->b0[l] == m->b1[l]) continue;
        if (m->zero == 3) st = use_layer(m, l);
        if (!st && bwd && m->zero >= 2 && !m->gb[l]) st = open_bucket(m, l);
        if (!st && bwd) st = prt_zero_layer_done(m, l);
    }
    return st;
}

prt_status prt_zero_gather(prt_model *m, int ch)
{
    prtp_clear();
    if (m->zero != 3) return PRT_OK;
    m->cs[ch].gathered++;
    m->bwd = false;   /* a forward unless prt_zero_grads says a backward runs */
    return PRT_OK;
}

void prt_zero_release(prt_model *m, int ch)
{
    if (m->zero != 3 || m->cs[ch].gathered == 0) return;
    if (--m->cs[ch].gathered == 0) drop_layers(m, ch);
}

/* Wait for chunk ch's reductions; free its full gradients when told. */
static prt_status drain(prt_model *m, int ch)
{
    ChunkState *s = &m->cs[ch];
    prt_status st = prtp_check(prt_wait_all(s->req, s->n_req), "gradient reduction");
    s->n_req = 0;
    for (int l = 0; m->zero >= 2 && l < m->n_layers; l++)
        if (m->lreq[l] && m->bch[l] == ch) {
            prt_status s2 = close_bucket(m, l);
            if (!st) st = s2;
        }
    if (s->free_after && m->grad[ch]) {
        prt_mem_free(m->grad[ch]);
        m->grad[ch] = NULL;
    }
    s->free_after = false;
    return st;
}

prt_status prt_zero_grads(prt_model *m, int ch)
{
    prtp_clear();
    prt_status st = drain(m, ch);
    m->bwd = true;   /* ZeRO-3: the gathers go down the layers now */
    /* ZeRO <= 1 keeps its whole gradients from prt_model_new to the end;
     * ZeRO >= 2 opens its buckets on first write */
    return st;
}

/* ZeRO >= 2: reduce-scatter bucket l (counts set) into the shard, async,
 * once the bucket before it is reduced and freed: two buckets at most. */
static prt_status launch_layer_bucket(prt_model *m, int l)
{
    size_t at;
    prt_status st = m->in_flight >= 0 ? close_bucket(m, m->in_flight) : PRT_OK;
    range_counts(m, m->b0[l], m->b1[l], &at);
    if (!st && m->dry) m->lreq[l] = DRY_REQ;
    else if (!st)
        st = prtp_check(prt_reduce_scatter_v_async(m->grads, m->gb[l], m->gshard + at, m->counts,
                                                   PRT_FP32, PRT_SUM, &m->lreq[l]),
                        "ZeRO gradient reduce-scatter");
    if (!st) m->in_flight = l;
    return st;
}

/* Start the DP reduction of bucket (layer) l of chunk ch, async. */
static prt_status launch_bucket(prt_model *m, int ch, int l)
{
    ChunkState *s = &m->cs[ch];
    size_t a = m->b0[l], b = m->b1[l], at;
    m->launched[l] = 1;
    if (a == b || (m->zero >= 2 && !m->gb[l])) return PRT_OK;   /* no gradient written */
    float *g = m->zero >= 2 ? m->gb[l] : m->grad[ch] + (a - m->c0[ch]);
    /* one reduction in flight per chunk: each in-flight collective may hold
     * a scratch copy of its bucket on some ranks (runtime/comm/sched.c), so
     * all of a stage's buckets in flight at once cost a whole copy of the
     * gradients on those ranks; the wait overlaps the backward of the layer
     * before just as well */
    if (m->dry && m->zero < 2) return PRT_OK;   /* nothing moves; the buffer stays */
    if (m->zero < 2 && s->n_req > 0) {
        prt_status st = prtp_check(prt_wait_all(s->req, s->n_req), "gradient reduction");
        s->n_req = 0;
        if (st) return st;
    }
    if (m->zero == 0)
        return prtp_check(prt_all_reduce_async(m->grads, g, g, b - a, PRT_FP32, PRT_SUM,
                                               &s->req[s->n_req++]),
                          "ZeRO-0 gradient all-reduce");
    size_t mine = range_counts(m, a, b, &at);
    if (m->zero >= 2) return launch_layer_bucket(m, l);
    /* ZeRO-1 in place, as Megatron's distributed optimizer reduces into
     * its grad buffer's views: this rank's block of the bucket receives the
     * sum (NCCL's in-place form); the other blocks are left as scratch,
     * zeroed with the rest at the step's end */
    float *own = mine ? g + (m->so + at - a) : g;
    return prtp_check(prt_reduce_scatter_v_async(m->grads, g, own, m->counts,
                                                 PRT_FP32, PRT_SUM, &s->req[s->n_req++]),
                      "ZeRO gradient reduce-scatter");
}

prt_status prt_zero_reduce_during(prt_model *m, int ch)
{
    prtp_clear();
    m->cs[ch].armed = m->dp > 1;
    return PRT_OK;
}

prt_status prt_zero_layer_done(prt_model *m, int layer)
{
    prtp_clear();
    if (layer < 0 || layer >= m->n_layers || m->b0[layer] == NOWHERE) return PRT_OK;
    int ch = m->bch[layer];
    if (!m->cs[ch].armed || m->launched[layer]) return PRT_OK;
    if (!m->grad[ch] && m->zero < 2) return prtp_fail(PRT_ERR_ARG, "layer %d: no gradients to reduce", layer);
    return launch_bucket(m, ch, layer);
}

prt_status prt_zero_reduce(prt_model *m, int ch)
{
    prtp_clear();
    ChunkState *s = &m->cs[ch];
    if (!m->grad[ch] && m->zero < 2) return prtp_fail(PRT_ERR_ARG, "reduce of chunk %d: no gradients", ch);
    s->reduced = true;
    s->armed = false;
    prt_status st = PRT_OK;
    /* the buckets the backward has not started yet, last layer first (the
     * order backward finishes them); then a fresh round */
    for (int l = m->n_layers - 1; l >= 0; l--) {
        if (m->b0[l] == NOWHERE || m->bch[l] != ch) continue;
        if (!st && m->dp > 1 && !m->launched[l]) st = launch_bucket(m, ch, l);
        m->launched[l] = 0;
    }
    s->free_after = m->zero >= 2;
    return st;
}

/* Where element e of the flat space keeps its weight, gradient and state. */
static float *p_at(prt_model *m, int ch, size_t e)
{
    return m->mshard ? m->pshard + (e - m->so) : m->par[ch] + (e - m->c0[ch]);
}
static float *g_at(prt_model *m, int ch, size_t e)
{
    return m->zero <= 1 ? m->grad[ch] + (e - m->c0[ch]) : m->gshard + (e - m->so);
}

/* This rank's part of the squared global gradient norm: its DP shard of
 * every tensor, replicated tensors on TP rank 0 only, so the world sum
 * counts each gradient element once. */
static double local_sq(prt_model *m)
{
    size_t so, sc;
    prt_shard(m->P, m->dp, m->dpr, &so, &sc);
    double sq = 0;
    for (int i = 0; i < m->n; i++) {
        if (m->off[i] == NOWHERE) continue;
        if ((m->tab[i].split == PRT_REPLICATED && m->tpr != 0) || m->tab[i].tie >= 0) continue;
        size_t lo = prtp_max(m->off[i], so), hi = prtp_min(m->off[i] + numel(m, i), so + sc);
        if (hi > lo) sq += prt_grad_sq_norm(g_at(m, chunk_of(m, i), lo), hi - lo);
    }
    return sq;
}

/* Finish this step's DP reductions once (every step-level call needs the
 * reduced gradients): a chunk the program never reduced is reduced now,
 * every chunk's requests are waited for. */
static prt_status settle(prt_model *m)
{
    prt_status st = PRT_OK;
    if (m->settled) return PRT_OK;
    for (int ch = 0; !st && ch < m->chunks; ch++) {
        /* a chunk the program never reduced (it has no DP reduction) */
        if (m->zero >= 1 && !m->cs[ch].reduced && (m->grad[ch] || m->zero >= 2))
            st = prt_zero_reduce(m, ch);
        if (!st) st = drain(m, ch);
        m->cs[ch].reduced = false;
    }
    m->settled = !st;
    return st;
}

/* Sequence parallelism leaves the gradients of the norms partial over TP
 * (each rank saw its rows): sum the part of them this rank updates. */
prt_status prt_zero_sp_norm_reduce(prt_model *m)
{
    prtp_clear();
    prt_status st = settle(m);
    for (int i = 0; !st && i < m->n; i++) {
        if (m->off[i] == NOWHERE || !m->tab[i].tp_sum || m->tp == 1) continue;
        size_t lo = prtp_max(m->off[i], m->so), hi = prtp_min(m->off[i] + numel(m, i), m->so + m->sc);
        if (hi <= lo) continue;
        float *g = g_at(m, chunk_of(m, i), lo);
        st = prtp_check(prt_all_reduce(m->c->tp, g, g, hi - lo, PRT_FP32, PRT_SUM),
                        "sequence-parallel norm gradient all-reduce over TP");
    }
    return st;
}

/* Tensor t's whole (TP-local) gradient into buf: ZeRO 0 holds it; else the
 * DP shards are all-gathered. */
static prt_status full_grad(prt_model *m, int t, float *buf)
{
    size_t n = numel(m, t), at;
    int ch = chunk_of(m, t);
    if (m->zero == 0) return prt_copy(buf, m->grad[ch] + (m->off[t] - m->c0[ch]), n * sizeof(float));
    size_t mine = range_counts(m, m->off[t], m->off[t] + n, &at);
    /* this rank's reduced part (none: a valid pointer that sends nothing) */
    const float *part = mine ? g_at(m, ch, m->so + at) : g_at(m, ch, m->zero <= 1 ? m->off[t] : m->so);
    return prtp_check(prt_all_gather_v(m->grads, part, buf, m->counts, PRT_FP32),
                      "tied gradient all-gather over DP");
}

/* Write back the part of buf this rank updates. */
static prt_status own_grad(prt_model *m, int t, const float *buf)
{
    size_t n = numel(m, t);
    int ch = chunk_of(m, t);
    if (m->zero == 0) return prt_copy(m->grad[ch] + (m->off[t] - m->c0[ch]), buf, n * sizeof(float));
    size_t lo = prtp_max(m->off[t], m->so), hi = prtp_min(m->off[t] + n, m->so + m->sc);
    if (hi <= lo) return PRT_OK;
    return prt_copy(g_at(m, ch, lo), buf + (lo - m->off[t]), (hi - lo) * sizeof(float));
}

/* A tied lm_head on another stage than the embedding is a copy: both get
 * the sum of both gradients, summed over the embedding group (the rank of
 * the first and of the last stage with this rank's (tp, dp); Megatron's
 * embedding group). The stages between hold neither and do nothing. */
prt_status prt_zero_embed_reduce(prt_model *m)
{
    prtp_clear();
    if (!m->c->embed) return PRT_OK;   /* a middle stage */
    prt_status st = settle(m);
    for (int i = 0; !st && i < m->n; i++) {
        int j = m->tab[i].tie;
        if (j < 0) continue;
        int t = m->off[i] != NOWHERE ? i : m->off[j] != NOWHERE ? j : -1;
        if (t < 0) return prtp_fail(PRT_ERR_ARG, "%s: tied to %s, neither of which this first or "
                                    "last stage holds", m->tab[i].name, m->tab[j].name);
        size_t n = numel(m, t);
        float *buf = (float *)zalloc(PRT_MEM_BUFFERS, n * sizeof(float));
        if (!buf) return prtp_fail(PRT_ERR_NOMEM, "tied gradient: out of memory");
        st = full_grad(m, t, buf);
        if (!st) st = prtp_check(prt_all_reduce(m->c->embed, buf, buf, n, PRT_FP32, PRT_SUM),
                                 "tied embedding gradient all-reduce (first and last stage)");
        if (!st) st = own_grad(m, t, buf);
        prt_mem_free(buf);
    }
    return st;
}

/* PLANRT_TEST_NAN_STEP=k makes step k's gradient norm NaN (tests of the
 * stop on a non-finite norm); -1 when unset. */
static long test_nan_step(void)
{
    const char *v = getenv("PLANRT_TEST_NAN_STEP");
    return v && *v ? strtol(v, NULL, 10) : -1;
}

double prt_model_grad_norm(const prt_model *m) { return m->grad_norm; }

/* The global gradient norm, every step: it clips, it is logged, and a NaN
 * or Inf in it stops the run before the update spoils the weights. */
prt_status prt_zero_norm_reduce(prt_model *m, long step)
{
    return prt_zero_norm_reduce_pair(m, NULL, step);
}

/* Issue 17: the expert group's model (peer) and the dense one share one
 * norm, so the clip scales both alike; both take the result. */
prt_status prt_zero_norm_reduce_pair(prt_model *m, prt_model *peer, long step)
{
    prtp_clear();
    prt_status st = settle(m);
    if (!st && peer) st = settle(peer);
    if (st) return st;
    float sq = (float)(local_sq(m) + (peer ? local_sq(peer) : 0.0));
    st = prtp_check(prtp_all_reduce_host(m->c->world, &sq, 1, PRT_FP32, PRT_SUM),
                    "gradient norm all-reduce");
    if (st) return st;
    if (step == test_nan_step()) sq = NAN;   /* test hook: PLANRT_TEST_NAN_STEP */
    m->grad_sq = (double)sq;
    m->grad_norm = sqrt((double)sq);
    if (peer) { peer->grad_sq = m->grad_sq; peer->grad_norm = m->grad_norm; }
    if (!isfinite(sq)) {
        prtp_set_diverged();
        return prtp_fail(PRT_ERR_ARG, "the gradient norm is %s at step %ld: stopped before its "
                         "update (the weights are those after step %ld; nothing later is saved)",
                         isnan(sq) ? "NaN" : "Inf", step, step - 1);
    }
    m->norm_ready = true;
    if (peer) peer->norm_ready = true;
    return PRT_OK;
}

prt_status prt_zero_opt_step(prt_model *m, const prt_adamw_cfg *cfg, long step)
{
    prtp_clear();
    if (!m->norm_ready)
        return prtp_fail(PRT_ERR_ARG, "prt_zero_opt_step at step %ld: prt_zero_norm_reduce did not "
                         "run this step (the clip needs the global norm)", step);
    prt_status st = PRT_OK;
    float scale = cfg->clip > 0 ? prt_clip_scale(m->grad_sq, cfg->clip) : 1.0f;
    float lr = prt_lr_at(cfg, step - 1);
    for (int i = 0; i < m->n; i++) {
        if (m->off[i] == NOWHERE) continue;
        int ch = chunk_of(m, i);
        size_t lo = prtp_max(m->off[i], m->so), hi = prtp_min(m->off[i] + numel(m, i), m->so + m->sc);
        if (hi <= lo) continue;
        size_t s = m->zero == 0 ? lo : lo - m->so;
        prt_adamw_step(p_at(m, ch, lo), g_at(m, ch, lo), m->mom + s, m->var + s, hi - lo, cfg,
                       step, lr, m->tab[i].decay ? cfg->weight_decay : 0.0f, scale);
    }
    for (int ch = 0; ch < m->chunks; ch++) {
        if (m->zero <= 1) st = prt_zero(m->grad[ch], (m->c1[ch] - m->c0[ch]) * sizeof(float));
        if (m->zero == 0) refresh_act(m, ch);   /* ZeRO 1-2: prt_zero_sync all-gathers them */
    }
    if (m->zero >= 2) st = prt_zero(m->gshard, m->sc * sizeof(float));
    refresh_shard(m);
    if (m->zero == 3 && !st) st = drop_layers(m, -1);   /* gathered before the update: stale */
    m->settled = m->norm_ready = false;   /* the next step reduces afresh */
    return st;
}

/* ZeRO 1-2: every rank's updated shard all-gathered into the whole weights
 * of each chunk, in place. The CPU gathers its fp32 weights; CUDA converts
 * its fp32 master shard into its part of the bf16 weights and gathers
 * those: 2 bytes per parameter, the bytes planner/cost.c's sync assumes. */
prt_status prt_zero_sync(prt_model *m)
{
    prtp_clear();
    if (m->zero != 1 && m->zero != 2) return PRT_OK;
    prt_status st = PRT_OK;
    for (int ch = 0; !st && ch < m->chunks; ch++) {
        size_t at;
        if (m->c1[ch] == m->c0[ch]) continue;
        size_t mine = range_counts(m, m->c0[ch], m->c1[ch], &at);
        size_t own = mine ? m->so + at - m->c0[ch] : 0;   /* in the chunk */
#ifdef PRT_CUDA
        if (mine) prt_to_act(m->w[ch] + own, m->pshard + at, mine);
#endif
        st = prtp_check(prt_all_gather_v(m->grads, m->w[ch] + own, m->w[ch], m->counts, ACT_DTYPE),
                        "ZeRO parameter all-gather");
    }
    return st;
}

prt_status prtp_weights_written(prt_model *m)
{
    if (!m->mshard) {
        for (int ch = 0; ch < m->chunks; ch++) refresh_act(m, ch);
        return PRT_OK;
    }
    refresh_shard(m);
    if (m->zero == 3) return drop_layers(m, -1);   /* gathered before: stale */
    return prt_zero_sync(m);
}

/* ---- dump -------------------------------------------------------------- */

/* Place TP rank t's slice (host, local shape) into the whole tensor. */
static void place(const prt_param *p, int tp, int t, const float *slice, size_t lr, size_t lc,
                  float *whole)
{
    if (p->split == PRT_SPLIT_COLS) {
        for (size_t r = 0; r < lr; r++)
            memcpy(whole + r * p->cols + (size_t)t * lc, slice + r * lc, lc * sizeof(float));
        return;
    }
    if (p->split == PRT_REPLICATED) {
        memcpy(whole, slice, lr * lc * sizeof(float));
        return;
    }
    int np = p->nparts > 0 ? p->nparts : 1;
    size_t g0 = 0, l0 = 0;
    for (int k = 0; k < np; k++) {
        size_t part = p->nparts > 0 ? p->part[k] : p->rows, h = part / (size_t)tp;
        memcpy(whole + (g0 + (size_t)t * h) * p->cols, slice + l0 * lc, h * lc * sizeof(float));
        g0 += part;
        l0 += h;
    }
}

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, sizeof v, 1, f); }
static void put_u64(FILE *f, uint64_t v) { fwrite(&v, sizeof v, 1, f); }

prt_status prt_model_dump(prt_model *m, const char *path)
{
    return prt_model_dump_pair(m, NULL, path);
}

/* The model of this rank that holds tensor i, or NULL. */
static prt_model *holder(prt_model *m, prt_model *peer, int i)
{
    return m->off[i] != NOWHERE ? m : peer && peer->off[i] != NOWHERE ? peer : NULL;
}

/* src[i * tp + t]: the world rank that sends TP slice t of tensor i to the
 * dump (DP rank 0 of the group holding it), found by one all-reduce (MIN)
 * rather than assumed, since expert tensors live on their EP rank. */
static prt_status dump_sources(prt_model *m, prt_model *peer, int32_t *src)
{
    for (int i = 0; i < m->n; i++)
        for (int t = 0; t < m->tp; t++) {
            prt_model *h = holder(m, peer, i);
            src[(size_t)i * (size_t)m->tp + (size_t)t] =
                h && h->dpr == 0 && h->tpr == t ? m->c->rank : INT32_MAX;
        }
    return prtp_all_reduce_host(m->c->world, src, (size_t)m->n * (size_t)m->tp, PRT_INT32, PRT_MIN);
}

prt_status prt_model_dump_pair(prt_model *m, prt_model *peer, const char *path)
{
    prtp_clear();
    prt_status st = PRT_OK;
    for (int ch = 0; !st && ch < m->chunks; ch++) st = gather_whole(m, ch);
    for (int ch = 0; !st && peer && ch < peer->chunks; ch++) st = gather_whole(peer, ch);
    int32_t *srcs = (int32_t *)calloc((size_t)m->n * (size_t)m->tp + 1, sizeof(int32_t));
    if (!st && !srcs) st = prtp_fail(PRT_ERR_NOMEM, "dump: out of memory");
    if (!st) st = prtp_check(dump_sources(m, peer, srcs), "dump owners all-reduce");
    if (st) { free(srcs); return st; }
    bool root = m->c->rank == 0;
    FILE *f = NULL;
    if (root && !(f = fopen(path, "wb")))
        st = prtp_fail(PRT_ERR_IO, "%s: cannot write the parameter dump", path);
    uint32_t count = 0;
    for (int i = 0; i < m->n; i++) count += m->tab[i].tie < 0;
    if (f) { fwrite("PRTDUMP1", 1, 8, f); put_u32(f, count); }
    for (int i = 0; i < m->n; i++) {
        const prt_param *p = &m->tab[i];
        if (p->tie >= 0) continue;   /* a copy: the original is dumped */
        prt_model *h = holder(m, peer, i);
        size_t lr, lc;
        local_shape(p, m->tp, &lr, &lc);
        size_t ln = lr * lc;
        int ntp = p->split == PRT_REPLICATED ? 1 : m->tp;
        if (h && h->dpr == 0 && m->tpr < ntp && !root) {
            int ch = chunk_of(h, i);
            const float *src = h->par[ch] + (h->off[i] - h->c0[ch]);
            prt_status s2 = prtp_check(prt_send(m->c->world, src, ln, PRT_FP32, 0, i), "dump send");
            if (!st) st = s2;
        }
        if (!root) continue;
        float *whole = (float *)calloc(p->rows * p->cols + 1, sizeof(float));
        float *host = (float *)calloc(ln + 1, sizeof(float));
        float *buf = (float *)prt_comm_alloc((ln + 1) * sizeof(float));
        for (int t = 0; t < ntp && whole && host && buf; t++) {
            int src = srcs[(size_t)i * (size_t)m->tp + (size_t)t];
            if (src == 0 && h) {
                int ch = chunk_of(h, i);
                prt_copy_to_host(host, h->par[ch] + (h->off[i] - h->c0[ch]), ln * sizeof(float));
            } else {
                prt_status s2 = prtp_check(prt_recv(m->c->world, buf, ln, PRT_FP32, src, i),
                                           "dump receive");
                if (!st) st = s2;
                prt_comm_download(host, buf, ln * sizeof(float));
            }
            place(p, m->tp, t, host, lr, lc, whole);
        }
        if (f && whole) {
            put_u32(f, (uint32_t)strlen(p->name));
            fwrite(p->name, 1, strlen(p->name), f);
            put_u64(f, prtp_logical_rows(p));   /* the model's rows: padding is not dumped */
            put_u64(f, p->cols);
            fwrite(whole, sizeof(float), prtp_logical_rows(p) * p->cols, f);
        }
        free(whole); free(host); prt_comm_free(buf);
    }
    if (f && fclose(f) != 0 && !st) st = prtp_fail(PRT_ERR_IO, "%s: write failed", path);
    for (int ch = 0; ch < m->chunks; ch++) release_whole(m, ch);
    for (int ch = 0; peer && ch < peer->chunks; ch++) release_whole(peer, ch);
    free(srcs);
    return st;
}
