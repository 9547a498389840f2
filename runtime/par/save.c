/*
 * save.c: a model's weights and AdamW state to a sharded safetensors
 * checkpoint (runtime/ckpt) and back, on any layout.
 *
 * Writing: every rank writes the DP shard prt_shard(P, dp, dp_rank) of its
 * stage's flat buffer (whatever the ZeRO stage: under ZeRO 0 the replicas
 * are equal, so each writes a disjoint share), as pieces of the global
 * tensors: a tensor's part of the shard is a flat range of its TP slice,
 * and a TP slice is one rectangle of the global tensor (SPLIT_COLS,
 * REPLICATED) or one per row group (SPLIT_ROWS: QKV's q, k, v), cut to the
 * tensor's logical rows (a padded vocabulary's padding rows are not part of
 * the model: a checkpoint holds the (V, C) tensor, so it resumes on any tp,
 * and loading leaves the padding 0). Replicated
 * tensors are written by TP rank 0 only and tied copies not at all, so the
 * pieces cover every tensor exactly once. AdamW's first and second moments
 * go under "opt.exp_avg.NAME" and "opt.exp_avg_sq.NAME" with the same
 * pieces. Each rank's manifest is gathered on world rank 0, which writes
 * index.json last: a checkpoint is complete once its index exists.
 *
 * Reading: each rank asks the checkpoint for exactly the elements it holds
 * in its own layout (ZeRO 0-2: whole TP slices of the weights; ZeRO-3: its
 * shard; the moments: all of them or its shard), through the same
 * rectangle mapping, so a checkpoint of any layout resumes on any other.
 * World rank 0 first checks the whole checkpoint (every file's CRC-32C, the
 * tensor names and shapes against this model, the seed) and every rank
 * takes its verdict, so a bad checkpoint stops all ranks with one message.
 *
 * Issue 17: a dense model and its expert group's (the routed experts'
 * tensors, sharded over expert-DP) save into one checkpoint and load from
 * it as a pair (prt_model_save_pair, prt_model_load_pair): each rank puts
 * both models' pieces into its one file, and the dense model's table,
 * which names every tensor, is the one rank 0 checks against. Pieces are
 * global, so an ep 2 checkpoint resumes on ep 1, one rank or any layout.
 *
 * What makes a resumed run continue exactly: the weights and both AdamW
 * moments in fp32 (bit for bit), the step counter (AdamW's bias correction
 * and the learning-rate schedule are functions of it) and the data order
 * (a function of (seed, step)). Nothing else carries state across steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "par_internal.h"
#include "prt_ckpt.h"
#include "par_model.h"

/* A piece of a tensor's local slice: local flat elements [lo, hi) are
 * elements [f0, f1) of the global rectangle rows [r0, r1) x cols [c0, c1). */
typedef struct {
    size_t r0, r1, c0, c1, f0, f1, lo, hi;
} Piece;

/* The pieces of local elements [a, b) of tensor p's TP slice (lc local
 * columns) on TP rank t of tp; returns how many (at most 3). */
static int pieces_of(const prt_param *p, int tp, int t, size_t lc, size_t a, size_t b, Piece out[3])
{
    int n = 0;
    if (b <= a) return 0;
    if (p->split != PRT_SPLIT_ROWS) {
        size_t c0 = p->split == PRT_SPLIT_COLS ? (size_t)t * lc : 0;
        out[n++] = (Piece){ 0, p->rows, c0, c0 + lc, a, b, a, b };
        return n;
    }
    int np = p->nparts > 0 ? p->nparts : 1;
    size_t g0 = 0, l0 = 0;
    for (int k = 0; k < np; k++) {
        size_t part = p->nparts > 0 ? p->part[k] : p->rows, h = part / (size_t)tp;
        size_t s = l0 * lc, e = (l0 + h) * lc;
        size_t lo = prtp_max(a, s), hi = prtp_min(b, e);
        if (hi > lo)
            out[n++] = (Piece){ g0 + (size_t)t * h, g0 + (size_t)(t + 1) * h, 0, p->cols,
                                lo - s, hi - s, lo, hi };
        g0 += part;
        l0 += h;
    }
    return n;
}

/* Cut pieces to the tensor's logical rows R (a padded vocabulary's real
 * rows): padding rows are the end of a rectangle (rows [r0, r1), w columns,
 * row-major), so a piece loses the tail of its flat range past row R, or
 * all of it. Returns how many pieces are left. */
static int clip_to_rows(Piece *pc, int n, size_t R)
{
    int k = 0;
    for (int j = 0; j < n; j++) {
        Piece q = pc[j];
        size_t w = q.c1 - q.c0, rr = R <= q.r0 ? 0 : prtp_min(q.r1, R) - q.r0;
        size_t f1 = prtp_min(q.f1, rr * w);
        if (f1 <= q.f0) continue;
        q.hi = q.lo + (f1 - q.f0);
        q.f1 = f1;
        q.r1 = q.r0 + rr;
        pc[k++] = q;
    }
    return k;
}

/* The pieces of tensor p that a checkpoint holds: its logical rows only. */
static int ckpt_pieces(const prt_param *p, int tp, int t, size_t lc, size_t a, size_t b, Piece out[3])
{
    return clip_to_rows(out, pieces_of(p, tp, t, lc, a, b, out), prtp_logical_rows(p));
}

static int ndim_of(const prt_param *p) { return p->cols == 1 ? 1 : 2; }

/* "opt.exp_avg.NAME" style names, into buf. */
static const char *state_name(char *buf, size_t cap, const char *prefix, const char *name)
{
    snprintf(buf, cap, "%s%s", prefix, name);
    return buf;
}

static const char *const KIND_PREFIX[3] = { "", "opt.exp_avg.", "opt.exp_avg_sq." };

/* ---- writing ------------------------------------------------------------- */

/* This rank's write range of the flat space and host copies of the
 * weights, first and second moments over it. */
typedef struct {
    size_t  wo, wc;      /* [wo, wo + wc): the DP shard this rank writes */
    float  *h[3];        /* weights, exp_avg, exp_avg_sq over the range */
} Stage;

static prt_status stage_host(prt_model *m, Stage *s)
{
    prt_shard(m->P, m->dp, m->dpr, &s->wo, &s->wc);
    for (int k = 0; k < 3; k++) {
        s->h[k] = (float *)calloc(s->wc + 1, sizeof(float));
        if (!s->h[k]) return prtp_fail(PRT_ERR_NOMEM, "checkpoint: out of memory");
    }
    prt_status st = PRT_OK;
    if (m->mshard) {   /* the fp32 weights are this rank's shard: [so, so + sc) == [wo, wo + wc) */
        st = prt_copy_to_host(s->h[0], m->pshard, s->wc * sizeof(float));
    } else {
        for (int ch = 0; !st && ch < m->chunks; ch++) {
            size_t lo = prtp_max(m->c0[ch], s->wo), hi = prtp_min(m->c1[ch], s->wo + s->wc);
            if (hi > lo)
                st = prt_copy_to_host(s->h[0] + (lo - s->wo), m->par[ch] + (lo - m->c0[ch]),
                                      (hi - lo) * sizeof(float));
        }
    }
    size_t at = m->zero == 0 ? s->wo : 0;   /* ZeRO 0 keeps the moments of all P */
    if (!st) st = prt_copy_to_host(s->h[1], m->mom + at, s->wc * sizeof(float));
    if (!st) st = prt_copy_to_host(s->h[2], m->var + at, s->wc * sizeof(float));
    return prtp_check(st, "checkpoint: copy to host");
}

/* Add this rank's pieces of every tensor it writes. */
static prt_status put_all(prt_model *m, const Stage *s, prt_ckpt_writer *w)
{
    char nm[512];
    for (int i = 0; i < m->n; i++) {
        const prt_param *p = &m->tab[i];
        if (m->off[i] == NOWHERE || p->tie >= 0) continue;
        if (p->split == PRT_REPLICATED && m->tpr != 0) continue;
        size_t n = m->rows[i] * m->cols[i];
        size_t lo = prtp_max(m->off[i], s->wo), hi = prtp_min(m->off[i] + n, s->wo + s->wc);
        if (hi <= lo) continue;
        Piece pc[3];
        int np = ckpt_pieces(p, m->tp, m->tpr, m->cols[i], lo - m->off[i], hi - m->off[i], pc);
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < np; j++) {
                const float *src = s->h[k] + (m->off[i] + pc[j].lo - s->wo);
                prt_status st = prt_ckpt_put_flat(w, state_name(nm, sizeof nm, KIND_PREFIX[k], p->name),
                                                  PRT_FP32, ndim_of(p), prtp_logical_rows(p),
                                                  p->cols, pc[j].r0,
                                                  pc[j].r1, pc[j].c0, pc[j].c1, pc[j].f0, pc[j].f1, src);
                if (st) return prtp_fail(st, "checkpoint: %s", prt_ckpt_last_error());
            }
    }
    return PRT_OK;
}

/* Every rank's status, world-wide: the first failure wins (all agree). */
static int agree(int bad)
{
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

/* Gather every rank's manifest on world rank 0 and write the index there. */
static prt_status write_index(prt_model *m, const char *dir, const prt_ckpt_meta *meta,
                              char *man, size_t len)
{
    int world = m->c->size, me = m->c->rank, mine = (int)len;
    int *lens = NULL, *displs = NULL;
    char *all = NULL;
    if (me == 0) {
        lens = (int *)calloc((size_t)world, sizeof(int));
        displs = (int *)calloc((size_t)world, sizeof(int));
    }
    MPI_Gather(&mine, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
    size_t total = 0;
    if (me == 0)
        for (int r = 0; r < world; r++) { displs[r] = (int)total; total += (size_t)lens[r]; }
    if (me == 0) all = (char *)malloc(total + 1);
    MPI_Gatherv(man, mine, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
    prt_status st = PRT_OK;
    if (me == 0) {
        const char **mv = (const char **)calloc((size_t)world, sizeof(char *));
        size_t *lv = (size_t *)calloc((size_t)world, sizeof(size_t));
        if (!mv || !lv || !all) st = prtp_fail(PRT_ERR_NOMEM, "checkpoint index: out of memory");
        for (int r = 0; !st && r < world; r++) { mv[r] = all + displs[r]; lv[r] = (size_t)lens[r]; }
        if (!st && prt_ckpt_index_write(dir, meta, mv, lv, world))
            st = prtp_fail(PRT_ERR_IO, "checkpoint index: %s", prt_ckpt_last_error());
        free(mv); free(lv);
    }
    free(all); free(lens); free(displs);
    return st;
}

prt_status prt_model_save(prt_model *m, const char *root, long step, const prt_save_info *info,
                          char *dir, size_t cap)
{
    return prt_model_save_pair(m, NULL, root, step, info, dir, cap);
}

prt_status prt_model_save_pair(prt_model *m, prt_model *peer, const char *root, long step,
                               const prt_save_info *info, char *dir, size_t cap)
{
    prtp_clear();
    /* the real layout: m->dp is the gradient group's size, dp x cp */
    prt_ckpt_meta meta = { step, info->seed, m->c->layout.dp, m->tp, m->pp, m->zero,
                           info->plan_hash ? info->plan_hash : "", info->model ? info->model : "",
                           prt_cp_size(m->c), info->config };
    char path[4096];
    prt_status st = prt_ckpt_step_dir(root, step, path, sizeof path);
    if (st) return prtp_fail(st, "checkpoint: %s", prt_ckpt_last_error());
    Stage s = {0}, se = {0};   /* the dense model's; the expert group's */
    prt_ckpt_writer *w = NULL;
    char *man = NULL;
    size_t len = 0;
    st = stage_host(m, &s);
    if (!st && peer) st = stage_host(peer, &se);
    if (!st && prt_ckpt_writer_new(path, m->c->rank, &meta, &w))
        st = prtp_fail(PRT_ERR_IO, "checkpoint: %s", prt_ckpt_last_error());
    if (!st) st = put_all(m, &s, w);
    if (!st && peer) st = put_all(peer, &se, w);
    if (!st) {
        prt_status f = prt_ckpt_writer_finish(w, &man, &len);
        w = NULL;
        if (f) st = prtp_fail(f, "checkpoint: %s", prt_ckpt_last_error());
    }
    if (w) prt_ckpt_writer_abort(w);
    for (int k = 0; k < 3; k++) { free(s.h[k]); free(se.h[k]); }
    /* every file is on disk (or some rank failed) before the index goes */
    char why[1024];
    snprintf(why, sizeof why, "%s", prt_par_last_error());
    if (agree(st != PRT_OK)) {
        free(man);
        if (!st) return prtp_fail(PRT_ERR_IO, "checkpoint %s: another rank failed to write its file", path);
        return prtp_fail(st, "%s", why);
    }
    st = write_index(m, path, &meta, man, len);
    free(man);
    snprintf(why, sizeof why, "%s", prt_par_last_error());
    if (agree(st != PRT_OK))
        return prtp_fail(st ? st : PRT_ERR_IO, "%s", st ? why : "checkpoint index failed on rank 0");
    if (dir) snprintf(dir, cap, "%s", path);
    return PRT_OK;
}

/* ---- reading ------------------------------------------------------------- */

/* The checkpoint tensors this model expects: every non-tied tensor and
 * its two moments. */
static prt_ckpt_tensor *wanted(const prt_model *m, char ***names, int *n)
{
    int k = 0;
    prt_ckpt_tensor *t = (prt_ckpt_tensor *)calloc((size_t)m->n * 3 + 1, sizeof *t);
    char **nm = (char **)calloc((size_t)m->n * 3 + 1, sizeof(char *));
    if (!t || !nm) { free(t); free(nm); return NULL; }
    for (int i = 0; i < m->n; i++) {
        const prt_param *p = &m->tab[i];
        if (p->tie >= 0) continue;
        for (int j = 0; j < 3; j++) {
            size_t len = strlen(KIND_PREFIX[j]) + strlen(p->name) + 1;
            nm[k] = (char *)malloc(len);
            if (!nm[k]) continue;
            snprintf(nm[k], len, "%s%s", KIND_PREFIX[j], p->name);
            t[k] = (prt_ckpt_tensor){ nm[k], PRT_FP32, ndim_of(p), prtp_logical_rows(p), p->cols, 0 };
            k++;
        }
    }
    *names = nm;
    *n = k;
    return t;
}

/* Rank 0's checks: the checkpoint in `path` (a step directory, or the
 * newest complete one under a root) is whole, belongs to this model and
 * this seed. On success its directory is in dir. */
static prt_status check_on_root(prt_model *m, const char *path, const prt_save_info *info,
                                char *dir, size_t cap)
{
    char idx[4200];
    snprintf(idx, sizeof idx, "%s/index.json", path);
    FILE *f = fopen(idx, "rb");
    long step = 0;
    if (f) {
        fclose(f);
        snprintf(dir, cap, "%s", path);
    } else if (prt_ckpt_latest(path, dir, cap, &step)) {
        return prtp_fail(PRT_ERR_IO, "--resume %s: no %s/index.json and no complete checkpoint "
                         "(a step-N directory with its index.json) under it: %s", path, path,
                         prt_ckpt_last_error());
    }
    prt_ckpt *ck = NULL;
    if (prt_ckpt_open(dir, &ck))
        return prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s", prt_ckpt_last_error());
    prt_status st = PRT_OK;
    if (prt_ckpt_verify(ck)) st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s", prt_ckpt_last_error());
    char **names = NULL;
    int n = 0;
    prt_ckpt_tensor *want = st ? NULL : wanted(m, &names, &n);
    if (!st && !want) st = prtp_fail(PRT_ERR_NOMEM, "resume: out of memory");
    if (!st && prt_ckpt_check_model(ck, info->model, want, n))
        st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s", prt_ckpt_last_error());
    const prt_ckpt_meta *meta = prt_ckpt_get_meta(ck);
    if (!st && meta->seed != info->seed)
        st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s: seed %llu in the checkpoint, %llu here "
                       "(the data order would differ)", dir, (unsigned long long)meta->seed,
                       (unsigned long long)info->seed);
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(want);
    prt_ckpt_close(ck);
    return st;
}

/* Where weights are read from: a planc checkpoint, or (--init-from) a
 * Hugging Face directory, which holds the weights alone. */
typedef struct {
    prt_ckpt *ck;
    prt_hf   *hf;
} Source;

/* Read local elements [a, b) of tensor i's slice (kind k: weight or a
 * moment) into dst (host, b - a floats). */
static prt_status read_range(prt_model *m, const Source *from, int i, int k, size_t a, size_t b, float *dst)
{
    prt_ckpt *ck = from->ck;
    const prt_param *p = &m->tab[i];
    const prt_param *src = p->tie >= 0 ? &m->tab[p->tie] : p;   /* a tied copy equals its original */
    char nm[512];
    Piece pc[3];
    int np = ckpt_pieces(p, m->tp, m->tpr, m->cols[i], a, b, pc);
    for (int j = 0; j < np && from->hf; j++)
        if (prt_hf_read_flat(from->hf, src->name, pc[j].r0, pc[j].r1, pc[j].c0, pc[j].c1, pc[j].f0, pc[j].f1,
                             dst + (pc[j].lo - a)))
            return prtp_fail(PRT_ERR_FORMAT, "--init-from: %s", prt_ckpt_last_error());
    for (int j = 0; j < np && !from->hf; j++)
        if (prt_ckpt_read_flat(ck, state_name(nm, sizeof nm, KIND_PREFIX[k], src->name), pc[j].r0,
                               pc[j].r1, pc[j].c0, pc[j].c1, pc[j].f0, pc[j].f1,
                               dst + (pc[j].lo - a)))
            return prtp_fail(PRT_ERR_FORMAT, "resume: %s", prt_ckpt_last_error());
    return PRT_OK;
}

/* Fill the flat range [lo, hi) of kind k into dev (device memory whose
 * element 0 is flat element base). */
static prt_status fill(prt_model *m, const Source *ck, int k, size_t lo, size_t hi, float *dev, size_t base)
{
    for (int i = 0; i < m->n; i++) {
        if (m->off[i] == NOWHERE) continue;
        size_t n = m->rows[i] * m->cols[i];
        size_t a = prtp_max(m->off[i], lo), b = prtp_min(m->off[i] + n, hi);
        if (b <= a) continue;
        float *h = (float *)calloc(b - a, sizeof(float));   /* padding rows are not read: 0 */
        if (!h) return prtp_fail(PRT_ERR_NOMEM, "resume: out of memory");
        prt_status st = read_range(m, ck, i, k, a - m->off[i], b - m->off[i], h);
        if (!st) st = prtp_check(prt_copy_to_device(dev + (a - base), h, (b - a) * sizeof(float)),
                                 "resume: copy to device");
        free(h);
        if (st) return st;
    }
    return PRT_OK;
}

/* The fp32 weights this rank holds (its shard under mshard, else its
 * chunks' slices). */
static prt_status load_weights(prt_model *m, const Source *src)
{
    prt_status st = PRT_OK;
    if (m->mshard) st = fill(m, src, 0, m->so, m->so + m->sc, m->pshard, m->so);
    for (int ch = 0; !st && !m->mshard && ch < m->chunks; ch++)
        st = fill(m, src, 0, m->c0[ch], m->c1[ch], m->par[ch], m->c0[ch]);
    return st;
}

/* Every rank: read what this layout holds from the checked checkpoint. */
static prt_status load_local(prt_model *m, const char *dir)
{
    Source src = { NULL, NULL };
    if (prt_ckpt_open(dir, &src.ck)) return prtp_fail(PRT_ERR_FORMAT, "resume: %s", prt_ckpt_last_error());
    prt_status st = load_weights(m, &src);
    size_t base = m->zero == 0 ? 0 : m->so;
    if (!st) st = fill(m, &src, 1, m->so, m->so + m->sc, m->mom, base);
    if (!st) st = fill(m, &src, 2, m->so, m->so + m->sc, m->var, base);
    prt_ckpt_close(src.ck);
    return st;
}

prt_status prt_model_load(prt_model *m, const char *path, const prt_save_info *info, long *step,
                          char *dir_out, size_t cap)
{
    return prt_model_load_pair(m, NULL, path, info, step, dir_out, cap);
}

prt_status prt_model_load_pair(prt_model *m, prt_model *peer, const char *path,
                               const prt_save_info *info, long *step, char *dir_out, size_t cap)
{
    prtp_clear();
    char dir[4096] = "";
    int bad = 0;
    long at = 0;
    prt_status st = PRT_OK;
    if (m->c->rank == 0) {
        st = check_on_root(m, path, info, dir, sizeof dir);
        bad = st != PRT_OK;
        if (!st) {
            prt_ckpt *ck = NULL;
            if (!prt_ckpt_open(dir, &ck)) { at = prt_ckpt_get_meta(ck)->step; prt_ckpt_close(ck); }
        }
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (bad) return st ? st : prtp_fail(PRT_ERR_FORMAT, "cannot resume from %s (see rank 0)", path);
    MPI_Bcast(dir, (int)sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(&at, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    st = load_local(m, dir);
    if (!st && peer) st = load_local(peer, dir);
    if (st) prtp_mark_own_failure();
    char why[1024];
    snprintf(why, sizeof why, "%s", prt_par_last_error());
    if (agree(st != PRT_OK))
        return prtp_fail(st ? st : PRT_ERR_FORMAT, "%s", st ? why : "resume failed on another rank");
    /* every rank loaded: the compute weights are remade from the fp32 ones
     * (under mshard a DP collective, so only once all agree) */
    st = prtp_weights_written(m);
    if (st) return st;
    *step = at;
    if (dir_out) snprintf(dir_out, cap, "%s", dir);
    return PRT_OK;
}

prt_status prt_model_export(prt_model *m, const char *root, long step, const char *path)
{
    prtp_clear();
    char dir[4096];
    prt_status st = PRT_OK;
    if (m->c->rank == 0) {
        if (prt_ckpt_step_dir(root, step, dir, sizeof dir) ||
            prt_ckpt_consolidate(dir, path, "opt."))   /* the model alone */
            st = prtp_fail(PRT_ERR_IO, "--export %s: %s", path, prt_ckpt_last_error());
    }
    int bad = st != PRT_OK;
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (bad && !st) st = prtp_fail(PRT_ERR_IO, "--export %s failed on rank 0", path);
    return st;
}

prt_status prt_model_export_hf(prt_model *m, const char *root, long step, const char *out,
                               const char *dtype)
{
    prtp_clear();
    char dir[4096];
    prt_status st = PRT_OK;
    if (m->c->rank == 0) {
        if (prt_ckpt_step_dir(root, step, dir, sizeof dir) || prt_hf_export(dir, out, dtype, 0))
            st = prtp_fail(PRT_ERR_IO, "--export-hf %s: %s", out, prt_ckpt_last_error());
    }
    int bad = st != PRT_OK;
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (bad && !st) st = prtp_fail(PRT_ERR_IO, "--export-hf %s failed on rank 0", out);
    return st;
}

prt_status prt_model_check_hf(const char *config)
{
    prtp_clear();
    if (prt_hf_check(config, NULL))
        return prtp_fail(PRT_ERR_UNSUPPORTED, "--export-hf: no Hugging Face architecture computes this model "
                         "exactly: %s", prt_ckpt_last_error());
    return PRT_OK;
}

/* --init-from: rank 0 opens (and so checks) the directory first and every
 * rank takes its verdict, as a resume does; then each rank opens it for
 * itself (headers only) and reads its own elements. */
prt_status prt_model_init_hf(prt_model *m, prt_model *peer, const char *dir, const prt_save_info *info)
{
    prtp_clear();
    Source src = { NULL, NULL };
    prt_status st = PRT_OK;
    int bad = 0;
    if (m->c->rank == 0) {
        if (prt_hf_open(dir, info->config, &src.hf))
            st = prtp_fail(PRT_ERR_FORMAT, "--init-from %s: %s", dir, prt_ckpt_last_error());
        bad = st != PRT_OK;
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (bad) return st ? st : prtp_fail(PRT_ERR_FORMAT, "cannot start from %s (see rank 0)", dir);
    if (m->c->rank != 0 && prt_hf_open(dir, info->config, &src.hf))
        st = prtp_fail(PRT_ERR_FORMAT, "--init-from %s: %s", dir, prt_ckpt_last_error());
    if (!st) st = load_weights(m, &src);
    if (!st && peer) st = load_weights(peer, &src);
    prt_hf_close(src.hf);
    if (st) prtp_mark_own_failure();
    char why[1024];
    snprintf(why, sizeof why, "%s", prt_par_last_error());
    if (agree(st != PRT_OK))
        return prtp_fail(st ? st : PRT_ERR_FORMAT, "%s", st ? why : "--init-from failed on another rank");
    return prtp_weights_written(m);   /* the compute copies from the fp32 weights */
}
