/*
 * par_model.h: the layout of prt_model, shared by model.c (ZeRO on it) and
 * save.c (checkpoints of it), nobody else.
 */
#ifndef PRT_PAR_MODEL_H
#define PRT_PAR_MODEL_H

#include "par_internal.h"

#define NOWHERE ((size_t)-1)   /* offset of a tensor another stage holds */

/* A pool of equal buffers (DeepSpeed's IPG buckets): each as large as
 * this rank's largest layer, allocated on first need and kept for the run,
 * so a step allocates nothing; as many as were ever in use at once. */
typedef struct {
    void  **buf;     /* [cap] */
    bool   *busy;    /* [cap] */
    int     n, cap;  /* allocated, at most */
    size_t  bytes;   /* of each */
} Pool;

typedef struct {
    prt_request **req;   /* [n_layers] reductions in flight */
    prt_request **greq;  /* [n_layers] ZeRO-3 gathers (waited before the gather returns) */
    int           n_req;
    bool          reduced;   /* reduced at least once this step */
    bool          free_after;/* ZeRO-2/3: free the gradients once reduced */
    bool          armed;     /* the next backward starts its buckets' reductions */
    int           gathered;  /* ZeRO-3: users of the gathered weights */
} ChunkState;

struct prt_model {
    prt_ctx         *c;
    const prt_param *tab;
    int              n, n_layers, chunks, zero;   /* zero: effective stage */
    int              pp, tp, dp, stage, tpr, dpr;   /* dp, dpr: the gradient group's (grads) size
                                            and rank: dp x cp and cp + CP * dp (DESIGN.md) */
    prt_comm        *grads;              /* where gradients are reduced and ZeRO shards: c->dpcp
                                            (c->dp itself when cp is 1) */
    size_t          *off, *rows, *cols;  /* [n] offset (NOWHERE: not here), local shape */
    size_t          *b0, *b1;            /* [n_layers] bucket range, NOWHERE: not here */
    int             *bch;                /* [n_layers] chunk of each local bucket */
    unsigned char   *launched;           /* [n_layers] its reduction started this round */
    size_t          *c0, *c1;            /* [chunks] chunk range */
    size_t           P, so, sc;          /* flat size, DP shard offset and count */
    float          **par;                /* [chunks] fp32 weights, whole (CUDA: the master copy);
                                            NULL under mshard but while the dump gathers them */
    prt_act        **w;                  /* [chunks] compute weights (aliases par on the CPU);
                                            NULL under ZeRO-3 */
    float          **grad;               /* [chunks] fp32 gradients */
    bool             mshard;             /* the fp32 weights live only as this rank's DP shard
                                            (pshard): ZeRO-3, and on CUDA ZeRO >= 1 (the master
                                            copy, beside the whole bf16 weights of w under 1-2) */
    float           *pshard, *gshard;    /* mshard: fp32 weights; ZeRO >= 2: the reduced
                                            gradients (sc); ZeRO-1 reduces in place in grad */
    prt_act         *wshard;             /* ZeRO-3: the compute weights' shard that the gathers
                                            read (sc; aliases pshard on the CPU) */
    float           *mom, *var;          /* AdamW state: (P) or (sc) */
    size_t          *counts;             /* [dp] scratch for the v collectives */
    ChunkState      *cs;                 /* [chunks] */
    double           grad_norm;          /* global gradient norm of the last step */
    double           grad_sq;            /* its square, from prt_zero_norm_reduce, for the clip */
    float          **gb;                 /* [n_layers] ZeRO >= 2: a layer's gradient bucket, from its
                                            backward's first write until its reduce-scatter is done */
    prt_request    **lreq;               /* [n_layers] ZeRO >= 2: that reduce-scatter, in flight */
    int              in_flight;          /* ZeRO >= 2: the bucket being reduced (-1: none) */
    prt_act        **lwa;                /* [n_layers] ZeRO-3: a gathered layer in the compute
                                            dtype (bf16 on CUDA), or NULL */
    prt_request    **wreq;               /* [n_layers] ZeRO-3: its all-gather, in flight */
    int              cur;                /* ZeRO-3: the layer computing (-1: none) */
    Pool             bpool;              /* ZeRO >= 2: the gradient buckets' buffers (fp32) */
    Pool             wpool;              /* ZeRO-3: the gathered layers' buffers (compute dtype) */
    bool             bwd;                /* ZeRO-3: a backward runs (prefetch the layer below) */
    bool             dry;                /* --dry-run: allocations alone (prt_mem_dry) */
    bool             settled;            /* this step's DP reductions are done */
    bool             norm_ready;         /* prt_zero_norm_reduce ran this step */
};


/* Rows of tensor p that are the model: the rest, at the end, are padding. */
static inline size_t prtp_logical_rows(const prt_param *p)
{
    return p->logical_rows ? p->logical_rows : p->rows;
}

/* The compute weights made again from the fp32 weights after these were
 * written (a resume): every chunk's copy, or under mshard this rank's
 * shard converted and all-gathered over DP (a collective: every rank). */
prt_status prtp_weights_written(prt_model *m);

#endif
