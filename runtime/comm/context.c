/*
 * context.c: the runtime context — MPI start-up, the DP/TP/PP groups of a
 * layout, error messages, names.
 *
 * Groups follow DESIGN.md's Megatron layout, rank = tp + TP*(dp + DP*pp):
 * MPI_Comm_split with colour = "the coordinates a group shares" and key =
 * "the coordinate that varies inside it" gives each rank its three groups in
 * one call each, and the embedding group (first and last stage) a fourth.
 * The node-local rank (the GPU is the local rank modulo the visible devices,
 * comm_nccl.c) comes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), so it
 * works the same under mpirun and srun.  Every group gets its MPI
 * communicators, cheap; a group of one rank gets no backend communicator
 * (NCCL), since its collectives are local copies (coll.c).  This file never
 * moves data: collectives are in coll.c.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

static _Thread_local char last_error[512];
static double timeout_s;   /* PLANRT_TIMEOUT_S, read once in prt_init */
static prt_p2p_mode p2p_mode;   /* PLANRT_P2P, read once in prt_init */

/* Record why a call failed, with the rank, so a log line from any rank says
 * who failed; returns s so callers can `return prtc_error(...)`. */
prt_status prtc_error(prt_status s, const prt_comm *g, const char *fmt, ...)
{
    int n = 0;
    if (g)
        n = snprintf(last_error, sizeof last_error, "rank %d (group rank %d of %d): ",
                     g->world_ranks[g->rank], g->rank, g->size);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return s;
}

void prtc_clear_error(void) { last_error[0] = '\0'; }
const char *prt_comm_last_error(void) { return last_error; }
double prtc_timeout_s(void) { return timeout_s; }
bool prtc_rendezvous(void) { return p2p_mode == PRT_P2P_RENDEZVOUS; }

/* NCCL has only rendezvous semantics, whatever PLANRT_P2P says. */
prt_p2p_mode prt_comm_p2p_mode(void)
{
    return strcmp(prt_comm_backend(), "nccl") == 0 ? PRT_P2P_RENDEZVOUS : p2p_mode;
}

/* ORDER PRT_P2P */
const char *prt_p2p_mode_name(prt_p2p_mode m)
{
    switch (m) {
    case PRT_P2P_BUFFERED:   return "buffered";
    case PRT_P2P_RENDEZVOUS: return "rendezvous";
    }
    return "?";
}

/* PLANRT_P2P: buffered (the default) or rendezvous; anything else is
 * refused, naming both. */
static prt_status read_p2p_mode(void)
{
    const char *s = getenv("PLANRT_P2P");
    p2p_mode = PRT_P2P_BUFFERED;
    if (!s || !*s || strcmp(s, "buffered") == 0)
        return PRT_OK;
    if (strcmp(s, "rendezvous") == 0) {
        p2p_mode = PRT_P2P_RENDEZVOUS;
        return PRT_OK;
    }
    return prtc_error(PRT_ERR_ARG, NULL, "PLANRT_P2P=%s: expected buffered (MPI's point-to-point, "
                      "the default) or rendezvous (NCCL's: no tags, one stream, sends end when "
                      "matched)", s);
}

/* PLANRT_TIMEOUT_S; in rendezvous mode a deadlock must be reported, not
 * hung, so an unset deadline is PLANRT_DEADLOCK_S or 60 s there. */
static double read_timeout(void)
{
    const char *t = getenv("PLANRT_TIMEOUT_S");
    if (t)
        return atof(t);
    if (p2p_mode != PRT_P2P_RENDEZVOUS)
        return 0.0;
    const char *d = getenv("PLANRT_DEADLOCK_S");
    return d && atof(d) > 0 ? atof(d) : 60.0;
}

/* For messages: which of its context's groups g is. */
const char *prtc_group_name(const prt_comm *g)
{
    const prt_ctx *c = g ? g->ctx : NULL;
    if (!c)
        return "group";
    return g == c->world ? "world" : g == c->dp ? "dp" : g == c->tp ? "tp" : g == c->pp ? "pp"
         : g == c->cp ? "cp" : g == c->dpcp ? "dpcp"
         : g == c->embed ? "embed" : g == c->ep ? "ep" : g == c->edp ? "edp" : "group";
}

/* The first failing rank (an MPI_MIN over "my rank if I failed") sends its
 * status and message to all; two collectives, at start-up only. */
prt_status prtc_agree(MPI_Comm comm, prt_status s)
{
    int me, first, none = INT_MAX;
    MPI_Comm_rank(comm, &me);
    int mine = s != PRT_OK ? me : none;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return prtc_error(PRT_ERR_MPI, NULL, "prt_init: MPI_Allreduce of the start-up "
                          "status failed");
    if (first == none)
        return PRT_OK;
    struct { int status; char msg[sizeof last_error]; } word = { (int)s, "" };
    if (me == first)
        snprintf(word.msg, sizeof word.msg, "%s", last_error);
    if (MPI_Bcast(&word, (int)sizeof word, MPI_BYTE, first, comm) != MPI_SUCCESS)
        return prtc_error(PRT_ERR_MPI, NULL, "prt_init: MPI_Bcast of the start-up "
                          "status failed");
    snprintf(last_error, sizeof last_error, "%s", word.msg);
    return (prt_status)word.status;
}

double prt_comm_set_timeout(double seconds)
{
    double old = timeout_s;
    timeout_s = seconds > 0 ? seconds : 0;
    return old;
}

/* ORDER PRT_ALGO */
const char *prt_algo_name(prt_algo a)
{
    switch (a) {
    case PRT_ALGO_DEFAULT: return "default";
    case PRT_ALGO_NATIVE:  return "native";
    case PRT_ALGO_RING:    return "ring";
    case PRT_ALGO_TREE:    return "tree";
    }
    return "?";
}

prt_status prt_algo_parse(const char *s, prt_algo *out)
{
    static const prt_algo all[] = { PRT_ALGO_NATIVE, PRT_ALGO_RING, PRT_ALGO_TREE };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (s && strcmp(s, prt_algo_name(all[i])) == 0) {
            *out = all[i];
            return PRT_OK;
        }
    return prtc_error(PRT_ERR_ARG, NULL, "unknown algorithm '%s' (native, ring or tree)",
                      s ? s : "(null)");
}

/* ORDER PRT_REDOP */
const char *prt_redop_name(prt_redop op)
{
    switch (op) {
    case PRT_SUM: return "sum";
    case PRT_AVG: return "avg";
    case PRT_MAX: return "max";
    case PRT_MIN: return "min";
    }
    return "?";
}

int prt_comm_rank(const prt_comm *g) { return g->rank; }
int prt_comm_size(const prt_comm *g) { return g->size; }
prt_algo prt_comm_algo(const prt_comm *g) { return g->algo; }

int prt_comm_world_rank(const prt_comm *g, int r)
{
    return r >= 0 && r < g->size ? g->world_ranks[r] : -1;
}

prt_algo prt_comm_set_algo(prt_comm *g, prt_algo a)
{
    prt_algo old = g->algo;
    if (a != PRT_ALGO_DEFAULT)
        g->algo = a;
    return old;
}

/* Rank r's block of n elements over P ranks: the first n % P get one more. */
void prt_shard(size_t n, int P, int r, size_t *off, size_t *count)
{
    size_t q = n / (size_t)P, rem = n % (size_t)P, ur = (size_t)r;
    *count = q + (ur < rem);
    *off = ur * q + (ur < rem ? ur : rem);
}

void *prt_comm_alloc(size_t bytes) { return prtc_backend_alloc(bytes); }
void prt_comm_free(void *p) { prtc_backend_free(p); }

/* Wrap an MPI communicator as a group (takes ownership of mpi). */
static prt_status group_new(prt_ctx *c, MPI_Comm mpi, prt_algo algo, prt_comm **out)
{
    prt_comm *g = calloc(1, sizeof *g);
    if (!g)
        return prtc_error(PRT_ERR_NOMEM, NULL, "prt_init: out of memory");
    g->ctx = c;
    g->mpi = mpi;
    g->algo = algo;
    MPI_Comm_rank(mpi, &g->rank);
    MPI_Comm_size(mpi, &g->size);
    g->world_ranks = malloc((size_t)g->size * sizeof(int));
    if (!g->world_ranks) {
        free(g);
        return prtc_error(PRT_ERR_NOMEM, NULL, "prt_init: out of memory");
    }
    /* Every rank tells the group its world rank: a table for logs and tests. */
    MPI_Allgather(&c->rank, 1, MPI_INT, g->world_ranks, 1, MPI_INT, mpi);
    /* Own algorithms talk on a duplicate, so their messages never match a
     * user's prt_recv on the same group. */
    if (MPI_Comm_dup(mpi, &g->own) != MPI_SUCCESS) {
        free(g->world_ranks);
        free(g);
        return prtc_error(PRT_ERR_MPI, NULL, "prt_init: MPI_Comm_dup failed");
    }
    *out = g;
    return prtc_backend_comm_init(g);
}

static void group_free(prt_comm *g)
{
    if (!g)
        return;
    if (g->scratch)
        prtc_backend_scratch_free(g, g->scratch);
    prtc_backend_comm_free(g);
    MPI_Comm_free(&g->own);
    MPI_Comm_free(&g->mpi);
    free(g->world_ranks);
    free(g);
}

/* The default algorithm: PLANRT_ALGO, else native. */
static prt_status default_algo(prt_algo *out)
{
    const char *s = getenv("PLANRT_ALGO");
    *out = PRT_ALGO_NATIVE;
    if (!s || !*s)
        return PRT_OK;
    if (prt_algo_parse(s, out) != PRT_OK)
        return prtc_error(PRT_ERR_ARG, NULL,
                          "PLANRT_ALGO=%s: expected native, ring or tree", s);
    return PRT_OK;
}

/* Split the world into the group that shares (colour) and orders by key. */
static prt_status split(prt_ctx *c, int colour, int key, prt_algo algo, prt_comm **out)
{
    MPI_Comm m;
    if (MPI_Comm_split(MPI_COMM_WORLD, colour, key, &m) != MPI_SUCCESS)
        return prtc_error(PRT_ERR_MPI, NULL, "prt_init: MPI_Comm_split failed");
    return group_new(c, m, algo, out);
}

/* Build world, TP, CP, DP, PP and the gradient group of c's layout
 * (prt_comm.h: the rank order tp, cp, dp, pp). */
static prt_status make_groups(prt_ctx *c, prt_algo algo)
{
    const prt_layout L = c->layout, x = c->coord;
    prt_status s;
    /* index of the (tp, pp) pair and of the (tp, cp, dp) triple */
    const int tp_pp = x.tp + L.tp * x.pp, tcd = x.tp + L.tp * (x.cp + L.cp * x.dp);
    /* World too is a duplicate: planrt's error handler and messages stay
     * off the user's MPI_COMM_WORLD. */
    MPI_Comm w;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &w) != MPI_SUCCESS)
        return prtc_error(PRT_ERR_MPI, NULL, "prt_init: MPI_Comm_dup failed");
    if ((s = group_new(c, w, algo, &c->world)))
        return s;
    /* TP group: same (cp, dp, pp), ordered by tp. */
    if ((s = split(c, x.cp + L.cp * (x.dp + L.dp * x.pp), x.tp, algo, &c->tp)))
        return s;
    /* CP group: same (tp, dp, pp), ordered by cp. */
    if ((s = split(c, x.tp + L.tp * (x.dp + L.dp * x.pp), x.cp, algo, &c->cp)))
        return s;
    /* DP group: same (tp, cp, pp), ordered by dp. */
    if ((s = split(c, x.tp + L.tp * (x.cp + L.cp * x.pp), x.dp, algo, &c->dp)))
        return s;
    /* Gradient group: same (tp, pp), ordered by cp + CP * dp; the DP group
     * when there is no CP (one communicator, not two alike). */
    if (L.cp == 1)
        c->dpcp = c->dp;
    else if ((s = split(c, tp_pp, x.cp + L.cp * x.dp, algo, &c->dpcp)))
        return s;
    /* PP group: same (tp, cp, dp), ordered by pp. */
    if ((s = split(c, tcd, x.pp, algo, &c->pp)))
        return s;
    /* Embedding group: the first and the last stage of the PP group (one
     * rank when pp is 1); the stages between take no part. */
    bool ends = x.pp == 0 || x.pp == L.pp - 1;
    MPI_Comm e;
    if (MPI_Comm_split(MPI_COMM_WORLD, ends ? tcd : MPI_UNDEFINED, x.pp, &e) !=
        MPI_SUCCESS)
        return prtc_error(PRT_ERR_MPI, NULL, "prt_init: MPI_Comm_split failed");
    return ends ? group_new(c, e, algo, &c->embed) : PRT_OK;
}

prt_status prt_ep_init(prt_ctx *c, int ep)
{
    prtc_clear_error();
    if (!c || ep < 1 || c->layout.dp % ep != 0)
        return prtc_error(PRT_ERR_ARG, c ? c->world : NULL, "prt_ep_init: ep %d does not divide "
                          "dp %d", ep, c ? c->layout.dp : 0);
    if (c->ep || c->edp)
        return prtc_error(PRT_ERR_ARG, c->world, "prt_ep_init: the expert groups exist already");
    const prt_layout L = c->layout, x = c->coord;
    const prt_algo algo = prt_comm_algo(c->dp);
    /* colours: the coordinates a group shares, (tp, cp, pp) as the DP
     * group's, and the EP group index d / ep (EP group) or the EP rank
     * d % ep (expert-DP group); the key orders the group */
    int dp_group = x.tp + L.tp * (x.cp + L.cp * x.pp), groups = L.tp * L.cp * L.pp;
    int er = prt_ep_rank(c, ep), edr = prt_edp_rank(c, ep);
    prt_status s = split(c, dp_group + groups * edr, er, algo, &c->ep);
    if (!s)
        s = split(c, dp_group + groups * er, edr, algo, &c->edp);
    return s;
}

static void ctx_destroy(prt_ctx *c);
static bool mpi_started_here;
static int live_contexts;

prt_layout prt_layout_coord(prt_layout L, int rank)
{
    int tp = L.tp, cp = L.cp > 1 ? L.cp : 1, dp = L.dp;
    return (prt_layout){ .tp = rank % tp, .cp = (rank / tp) % cp, .dp = (rank / (tp * cp)) % dp,
                         .pp = rank / (tp * cp * dp) };
}

prt_status prt_init(int *argc, char ***argv, int dp, int tp, int pp, prt_ctx **out)
{
    return prt_init_layout(argc, argv, (prt_layout){ .dp = dp, .tp = tp, .pp = pp, .cp = 1 }, out);
}

/* Initialise MPI and the groups of a dp x tp x cp x pp layout. */
prt_status prt_init_layout(int *argc, char ***argv, prt_layout L, prt_ctx **out)
{
    const int dp = L.dp, tp = L.tp, pp = L.pp, cp = L.cp == 0 ? 1 : L.cp;   /* 0: a layout without cp */
    *out = NULL;
    prtc_clear_error();
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init(argc, argv) != MPI_SUCCESS)
            return prtc_error(PRT_ERR_MPI, NULL, "prt_init: MPI_Init failed");
        mpi_started_here = true;
    }
    if (read_p2p_mode() != PRT_OK)
        return PRT_ERR_ARG;
    timeout_s = read_timeout();

    prt_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return prtc_error(PRT_ERR_NOMEM, NULL, "prt_init: out of memory");
    c->device = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    long long need = (long long)dp * tp * cp * pp;
    if (dp < 1 || tp < 1 || pp < 1 || cp < 1 || need != c->size) {
        char cps[32] = "";
        if (cp != 1) snprintf(cps, sizeof cps, " x cp %d", cp);
        prtc_error(PRT_ERR_ARG, NULL,
                   "prt_init: %d ranks were started but the layout dp %d x tp %d%s x pp %d "
                   "needs %lld\n  hint: run `mpirun -np %lld ...` or change the plan",
                   c->size, dp, tp, cps, pp, need, need);
        free(c);
        return PRT_ERR_ARG;
    }
    c->layout = (prt_layout){ .dp = dp, .tp = tp, .pp = pp, .cp = cp };
    c->coord = prt_layout_coord(c->layout, c->rank);

    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_size(node, &c->local_size);
    MPI_Comm_free(&node);

    prt_algo algo;
    prt_status s = default_algo(&algo);
    if (s == PRT_OK)
        s = prtc_backend_init(c);
    if (s == PRT_OK)
        s = make_groups(c, algo);
    if (s != PRT_OK) {
        ctx_destroy(c);
        return s;
    }
    live_contexts++;
    *out = c;
    return PRT_OK;
}

/* Free a context's groups and backend state. */
static void ctx_destroy(prt_ctx *c)
{
    group_free(c->edp);
    group_free(c->ep);
    group_free(c->embed);
    group_free(c->pp);
    if (c->dpcp != c->dp)
        group_free(c->dpcp);
    group_free(c->dp);
    group_free(c->cp);
    group_free(c->tp);
    group_free(c->world);
    prtc_backend_finalize(c);
    free(c);
}

/* prt_finalize(NULL) after a failed prt_init still ends MPI cleanly. */
void prt_finalize(prt_ctx *c)
{
    prtc_free_abandoned();   /* before the groups their scratch points into */
    if (c) {
        ctx_destroy(c);
        live_contexts--;
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (mpi_started_here && live_contexts == 0 && !fin)
        MPI_Finalize();
}
