/*
 * cp_internal.h: context-parallel attention's per-block compute, private to
 * runtime/par/cp.c (the one orchestration: ring steps, exchanges, buffers)
 * and its two implementations of what it computes on a block:
 * runtime/par/cp_cpu.c (fp32, OpenBLAS) and runtime/cuda/ops_cp.cu (bf16
 * storage, cuBLAS with fp32 accumulation, small kernels for the masks and
 * the softmax merges). Both implement every prtp_cp_* function below with
 * the same meaning; cp.c never computes on a tensor itself.
 *
 * Element types: activations are prt_act (CPU float, CUDA bf16 in device
 * memory); the ring's log-sum-exp and the dK, dV accumulators are fp32 on
 * both (CP_F32_ACT prt_act elements each: 1 on the CPU, 2 on CUDA). Score
 * scratch (S, dP) is prt_act, as prt_attention_fwd's probabilities.
 *
 * The position helpers are inline here (and __host__ __device__ under
 * nvcc), so the CUDA kernels mask by exactly the rule the CPU uses.
 */
#ifndef PRT_CP_INTERNAL_H
#define PRT_CP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "planrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define CP_HD __host__ __device__
#else
#define CP_HD
#endif

/* fp32 values per prt_act element: how the saved buffer (counted in
 * prt_act) holds the fp32 log-sum-exp. */
#define CP_F32_ACT (sizeof(float) / sizeof(prt_act))

/* Whether prtp_cp_move's two unpacking moves (blocks -> joined, blocks ->
 * local) run in place (CPU: cycle-following on host memory, no buffer) or
 * out of place (CUDA: a kernel reads src and writes dst, which differ).
 * PRT_CP_OUT_OF_PLACE builds the CPU's cp.c the CUDA way, so that
 * test-cp-attention runs the CUDA build's orchestration without a GPU. */
#if defined(PRT_CUDA) || defined(PRT_CP_OUT_OF_PLACE)
#define CP_MOVES_IN_PLACE 0
#else
#define CP_MOVES_IN_PLACE 1
#endif

/* One call's shapes; sizes in elements. */
typedef struct {
    prt_comm   *g;
    prt_cp_form form;
    int         cp, r;             /* CP group size, this rank in it */
    /* The ring: rn members of rk consecutive CP ranks each (RING: rk 1;
     * HIERARCHICAL: a node's ranks, whose tokens the node's all-to-all
     * joined), this rank's member ri, and the CP ranks it sends to, takes from */
    int         rk, rn, ri, next, prev;
    size_t      B, Tl, T, C;       /* sequences, tokens of a ring member (plain forms: the
                                      local tokens), global tokens, chunk T / (2 cp) */
    size_t      nch;               /* chunks of a ring member's tokens: 2 rk */
    size_t      H, Hkv, D, W, G;   /* heads, kv heads, head size, window, group H / Hkv */
    size_t      R, HD, KV;         /* row widths: qkv (H+2Hkv)D, out HD, K|V block 2 Hkv D */
    float       scale;             /* 1 / sqrt(D) */
} Cp;

/* ---- positions and masks ---------------------------------------------- */

/* Global chunk index of chunk a (0 .. nch-1) of ring member m: its CP rank
 * m rk + a / 2 holds chunks cr and 2cp-1-cr (prt_cp_pos). */
static inline CP_HD size_t cp_chunk_of(const Cp *x, int m, size_t a)
{
    size_t cr = (size_t)m * (size_t)x->rk + a / 2;
    return a % 2 == 0 ? cr : 2 * (size_t)x->cp - 1 - cr;
}

/* Global position of token t of ring member m (with rk 1: prt_cp_pos). */
static inline CP_HD size_t cp_pos_of(const Cp *x, int m, size_t t)
{
    return cp_chunk_of(x, m, t / x->C) * x->C + t % x->C;
}

/* The keys of a chunk (C tokens from position k0) that query position q
 * sees: [lo, hi) of the chunk, a range since a chunk's positions are
 * consecutive (the mask rule of prt_window_first: k <= q, k > q - W). */
static inline CP_HD void cp_seen_cols(const Cp *x, size_t q, size_t k0, size_t *lo, size_t *hi)
{
    size_t first = prt_window_first(q, x->W);
    size_t b = q >= k0 ? (q - k0 + 1 < x->C ? q - k0 + 1 : x->C) : 0;
    size_t a = first > k0 ? (first - k0 < b ? first - k0 : b) : 0;
    *lo = a;
    *hi = b;
}

/* How a (query chunk, key chunk) sub-block of a ring step is seen. */
typedef enum {
    SUB_SKIP,     /* wholly in the future, or wholly older than the window: not computed */
    SUB_FULL,     /* wholly seen: no mask */
    SUB_MASKED,   /* a column range per row */
} SubKind;

static inline SubKind cp_sub_kind(const Cp *x, size_t qa, int owner, size_t kc)
{
    size_t q0 = cp_chunk_of(x, x->ri, qa) * x->C, q1 = q0 + x->C - 1;
    size_t k0 = cp_chunk_of(x, owner, kc) * x->C, k1 = k0 + x->C - 1;
    if (k0 > q1 || (x->W && k1 + x->W <= q0)) return SUB_SKIP;
    if (k1 <= q0 && (x->W == 0 || k0 + x->W > q1)) return SUB_FULL;
    return SUB_MASKED;
}

/* ---- the ring's block: one (b, h) against one KV block ----------------- */

/* The pointers of one (b, h) against ring member owner's KV block (all
 * already offset to the head; leading dimensions in the comments). */
typedef struct {
    const prt_act *Q, *K, *V;   /* ld R, KV, KV */
    const prt_act *dO, *O;      /* ld HD (backward) */
    prt_act       *out, *dQ;    /* ld HD (forward), R (backward) */
    float         *dK, *dV;     /* ld KV, fp32 accumulators (backward) */
    float         *lse;         /* (Tl) fp32 log-sum-exp of the query rows */
    const SubKind *kind;        /* (nch, nch): [query chunk][key chunk] */
    int            owner;       /* the ring member whose keys these are */
} CpBlk;

/* out <- 0 (B, Tl, HD) and lse <- -inf (B H Tl): the ring's start. */
void prtp_cp_ring_start(const Cp *x, prt_act *out, float *lse);
/* Scores of the unskipped sub-blocks into S (Tl, Tl), the online-softmax
 * merge into out and lse (cp.c's essay), out += P V. */
void prtp_cp_ring_block_fwd(const Cp *x, const CpBlk *k, prt_act *S);
/* P = exp(S - lse), D = rowsum(dO O), dS = P (dP - D) / sqrt(D) over S, dP
 * (Tl, Tl) scratch; dQ += dS K, dK += dS^T Q, dV += P^T dO. */
void prtp_cp_ring_block_bwd(const Cp *x, const CpBlk *k, prt_act *S, prt_act *dP);

/* kv (B, Tl, KV) <- the K and V columns of qkv (B, Tl, R). */
void prtp_cp_pack_kv(const Cp *x, prt_act *kv, const prt_act *qkv);
/* The K and V columns of dqkv (B, Tl, R) <- the fp32 block dkv (B, Tl, KV). */
void prtp_cp_unpack_dkv(const Cp *x, prt_act *dqkv, const float *dkv);

/* ---- ALL_GATHER: one (b, h) against the gathered kv (cp, B, Tl, KV) ----- */

/* P_all's (b, h) rows (Tl, T) <- the masked softmax of Q K^T / sqrt(D)
 * over every rank's keys (rank-block order), out's (b, h) <- P V. */
void prtp_cp_gather_head_fwd(const Cp *x, size_t b, size_t h, prt_act *out, prt_act *P_all,
                             const prt_act *qkv, const prt_act *kv);
/* dQ of (b, h) into dqkv (+=), every block's dK, dV of the head's kv group
 * into the fp32 dkv (cp, B, Tl, KV) (+=); dS (Tl, T) scratch. */
void prtp_cp_gather_head_bwd(const Cp *x, size_t b, size_t h, prt_act *dqkv, float *dkv, prt_act *dS,
                             const prt_act *dout, const prt_act *qkv, const prt_act *P_all,
                             const prt_act *kv);

/* ---- the all-to-alls' layouts ---------------------------------------------
 * An all-to-all over ng ranks (ALL_TO_ALL: the CP group; HIERARCHICAL: the
 * node's rk consecutive CP ranks) trades the local tokens of every head for
 * all the group's tokens of 1/ng of the heads. Three layouts of D-element
 * units (one head of one token):
 *   local  (B, Tl, heads):        per token the parts' heads, all ranks' (qkv:
 *                                 H query, Hkv key, Hkv value; out: H)
 *   blocks (ng, B, Tl, heads/ng): block j for / from group rank j, per token
 *                                 its parts' heads [j h/ng, (j+1) h/ng)
 *   joined (B, ng Tl, heads/ng):  this rank's heads, every group rank's
 *                                 tokens: in global order (ALL_TO_ALL), or
 *                                 group rank by group rank (a node's ring
 *                                 block, HIERARCHICAL)
 * The send layout is `blocks` by destination; what arrives is `blocks` by
 * source. */
typedef struct {
    int    ng;         /* ranks of the all-to-all */
    bool   node;       /* joined tokens group rank by group rank, not in global order */
    int    nparts;     /* 3 (q, k, v) or 1 (out) */
    size_t part[3];    /* heads of each part on the whole row (H, Hkv, Hkv) */
    size_t row, rowj;  /* units per token: local, per group rank */
} Heads;

/* Unit u (0 .. rowj-1) of group rank j's block -> its unit in the local row. */
static inline CP_HD size_t cp_local_col(const Heads *hd, int j, size_t u)
{
    size_t base = 0;
    for (int p = 0; p < hd->nparts; p++) {
        size_t per = hd->part[p] / (size_t)hd->ng;
        if (u < per) return base + (size_t)j * per + u;
        u -= per;
        base += hd->part[p];
    }
    return SIZE_MAX;   /* not reached: u < rowj */
}

/* Joined row of token t of group rank s, sequence b. ALL_TO_ALL's group is
 * the CP group (s is the CP rank); HIERARCHICAL's s is this node's s-th rank. */
static inline CP_HD size_t cp_joined_row(const Cp *x, const Heads *hd, int s, size_t b, size_t t)
{
    if (hd->node) return (b * (size_t)hd->ng + (size_t)s) * x->Tl + t;
    return b * x->T + cp_pos_of(x, s, t);
}

/* Unit i (rows of rowj units) of blocks by source -> its joined row. */
static inline CP_HD size_t cp_dest_joined(const Cp *x, const Heads *hd, size_t i)
{
    size_t t = i % x->Tl, b = (i / x->Tl) % x->B;
    return cp_joined_row(x, hd, (int)(i / (x->Tl * x->B)), b, t);
}

/* Unit i (units of D) of blocks by group rank -> its local unit. */
static inline CP_HD size_t cp_dest_local(const Cp *x, const Heads *hd, size_t i)
{
    size_t u = i % hd->rowj, bt = (i / hd->rowj) % (x->B * x->Tl);
    int j = (int)(i / (hd->rowj * x->B * x->Tl));
    return bt * hd->row + cp_local_col(hd, j, u);
}

/* The four moves around an exchange (B Tl row units of D in all). */
typedef enum {
    CP_LOCAL_TO_BLOCKS,    /* before sending a local tensor: blocks by destination */
    CP_JOINED_TO_BLOCKS,   /* before sending a joined tensor: blocks by destination */
    CP_BLOCKS_TO_JOINED,   /* after receiving blocks by source: joined */
    CP_BLOCKS_TO_LOCAL,    /* after receiving blocks by group rank: local */
} CpMove;

/* dst <- src moved as m says. The packing moves never run in place; the
 * unpacking ones run in place where CP_MOVES_IN_PLACE (dst == src), else
 * out of place (dst != src; the CPU's copies src to dst, then permutes). */
prt_status prtp_cp_move(const Cp *x, const Heads *hd, CpMove m, prt_act *dst, const prt_act *src);

#ifdef __cplusplus
}
#endif

#endif
