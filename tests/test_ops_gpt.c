/*
 * test_ops_gpt.c: a single-rank GPT-2 / Llama-style model made only of
 * the runtime's ops, the way generated code strings them together: one
 * flat fp32 parameter buffer with tensors at offsets into it (and, on
 * CUDA, its bf16 compute copy at the same offsets), a forward that keeps
 * what the recomputation mode says, a backward that walks the layers in
 * reverse with the residual gradient accumulated in place. It builds for
 * both targets: the training test and bench-ops use the CPU build, the
 * GPU check times a GPT-2-small step with the CUDA build.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "test_ops_gpt.h"

double gpt_prof[PROF_COUNT];   /* seconds per kind of op, summed */
bool   gpt_prof_on;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Run one op call and, when profiling, add its time to its kind. */
#define TIMED(kind, call) do {                                              \
        if (!gpt_prof_on) { call; break; }                                  \
        prt_ops_sync(); double t0_ = now(); call; prt_ops_sync();           \
        gpt_prof[kind] += now() - t0_;                                      \
    } while (0)

#define NONE ((size_t)-1)   /* offset of an absent tensor (no bias) */

/* One block's tensors, as offsets into the flat buffers, GPT-2 order. */
typedef struct {
    size_t ln1_w, ln1_b;   /* (C) */
    size_t qkv_w, qkv_b;   /* (R, C), (R); R = (H + 2 Hkv) D */
    size_t proj_w, proj_b; /* (C, H D), (C) */
    size_t ln2_w, ln2_b;   /* (C) */
    size_t fc_w, fc_b;     /* (FU, C), (FU); FU = F, or 2F for SwiGLU */
    size_t fp_w, fp_b;     /* (C, F), (C) */
} Block;

/* What one block's forward leaves for its backward. */
typedef struct {
    prt_act *ln1; float *ln1_mean, *ln1_rstd;  /* (N, C), (N), (N) */
    prt_act *qkv;                              /* (N, R) */
    prt_act *att;                              /* (B, H, T, T) */
    prt_act *atty;                             /* (N, H D) */
    prt_act *mid;                              /* (N, C) residual after attention */
    prt_act *ln2; float *ln2_mean, *ln2_rstd;
    prt_act *fch;                              /* (N, FU) */
    prt_act *fca;                              /* (N, F) */
    prt_act *tmp;                              /* (N, C) projection output */
} Acts;

struct Gpt {
    GptConfig c;
    size_t D, R, FU, N, P;   /* head dim, qkv width, fc width, rows, params */
    float *params, *grads, *m, *v;  /* (P) fp32 */
    prt_act *w;              /* (P) compute copy; aliases params on the CPU */
    unsigned char *decay;    /* (P) host: 1 where weight decay applies */
    size_t wte, wpe, lnf_w, lnf_b, head_w;  /* head_w == wte when tied */
    Block *blk;
    prt_act **x;             /* (L+1) residual stream, (N, C) each */
    Acts *acts;              /* L sets, or 1 shared under full recompute */
    prt_act *att_shared;     /* (B, H, T, T) under selective recompute */
    prt_act *lnf, *logits;   /* (N, C), (N, V) */
    float *lnf_mean, *lnf_rstd, *mx, *se, *tgt, *loss;  /* (N) */
    float *loss_host;        /* (N) */
    int32_t *tok, *targets;  /* (N) device copies */
    prt_act *d_ln, *d_atty, *d_qkv, *d_fch, *d_fca, *datt, *dres;
};

static prt_act *W(const Gpt *g, size_t off) { return off == NONE ? NULL : g->w + off; }
static float *G(const Gpt *g, size_t off) { return off == NONE ? NULL : g->grads + off; }

/* Give every tensor its offset in the flat buffers; returns the total. */
static size_t layout(Gpt *g)
{
    const GptConfig *c = &g->c;
    size_t off = 0;
#define TAKE(field, n, present) do { (field) = (present) ? off : NONE; \
                                     if (present) off += (n); } while (0)
    bool bias = !c->llama;
    TAKE(g->wte, c->V * c->C, true);
    TAKE(g->wpe, c->T * c->C, !c->llama);
    for (size_t l = 0; l < c->L; l++) {
        Block *b = &g->blk[l];
        TAKE(b->ln1_w, c->C, true);           TAKE(b->ln1_b, c->C, bias);
        TAKE(b->qkv_w, g->R * c->C, true);    TAKE(b->qkv_b, g->R, bias);
        TAKE(b->proj_w, c->C * c->H * g->D, true); TAKE(b->proj_b, c->C, bias);
        TAKE(b->ln2_w, c->C, true);           TAKE(b->ln2_b, c->C, bias);
        TAKE(b->fc_w, g->FU * c->C, true);    TAKE(b->fc_b, g->FU, bias);
        TAKE(b->fp_w, c->C * c->F, true);     TAKE(b->fp_b, c->C, bias);
    }
    TAKE(g->lnf_w, c->C, true);
    TAKE(g->lnf_b, c->C, bias);
    TAKE(g->head_w, c->V * c->C, c->llama);
    if (!c->llama)
        g->head_w = g->wte;   /* GPT-2 ties the head to the embedding */
#undef TAKE
    return off;
}

static void *dev(size_t bytes) { return prt_alloc(bytes ? bytes : 1); }
static float *fa(size_t n) { return dev(n * sizeof(float)); }
static prt_act *aa(size_t n) { return dev(n * sizeof(prt_act)); }

static void alloc_acts(Acts *a, const Gpt *g, bool with_att)
{
    const GptConfig *c = &g->c;
    size_t N = g->N;
    a->ln1 = aa(N * c->C); a->ln1_mean = fa(N); a->ln1_rstd = fa(N);
    a->qkv = aa(N * g->R);
    a->att = with_att ? aa(c->B * c->H * c->T * c->T) : g->att_shared;
    a->atty = aa(N * c->H * g->D);
    a->mid = aa(N * c->C);
    a->ln2 = aa(N * c->C); a->ln2_mean = fa(N); a->ln2_rstd = fa(N);
    a->fch = aa(N * g->FU); a->fca = aa(N * c->F); a->tmp = aa(N * c->C);
}

static void free_acts(Acts *a, bool with_att)
{
    void *p[] = {a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->mid, a->ln2,
                 a->ln2_mean, a->ln2_rstd, a->fch, a->fca, a->tmp};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        prt_free(p[i]);
    if (with_att)
        prt_free(a->att);
}

/* Initialise as GPT-2: normal(0.02), residual projections 0.02/sqrt(2L),
 * norms 1, biases 0; the parameter id is the tensor's order. */
static void init_params(Gpt *g, uint64_t seed)
{
    const GptConfig *c = &g->c;
    uint64_t pid = 0;
    float s = prt_gpt2_std(false, (int)c->L), sr = prt_gpt2_std(true, (int)c->L);
#define NORMAL(off, n, sd) do { prt_init_normal(g->params + (off), (n), seed, pid++, 0, (sd)); \
        memset(g->decay + (off), 1, (n)); } while (0)
#define CONST(off, n, val) do { if ((off) != NONE) prt_init_const(g->params + (off), (n), (val)); \
        pid++; } while (0)
    NORMAL(g->wte, c->V * c->C, s);
    if (g->wpe != NONE) NORMAL(g->wpe, c->T * c->C, 0.01f);
    for (size_t l = 0; l < c->L; l++) {
        Block *b = &g->blk[l];
        CONST(b->ln1_w, c->C, 1.0f); CONST(b->ln1_b, c->C, 0.0f);
        NORMAL(b->qkv_w, g->R * c->C, s); CONST(b->qkv_b, g->R, 0.0f);
        NORMAL(b->proj_w, c->C * c->H * g->D, sr); CONST(b->proj_b, c->C, 0.0f);
        CONST(b->ln2_w, c->C, 1.0f); CONST(b->ln2_b, c->C, 0.0f);
        NORMAL(b->fc_w, g->FU * c->C, s); CONST(b->fc_b, g->FU, 0.0f);
        NORMAL(b->fp_w, c->C * c->F, sr); CONST(b->fp_b, c->C, 0.0f);
    }
    CONST(g->lnf_w, c->C, 1.0f); CONST(g->lnf_b, c->C, 0.0f);
    if (c->llama) NORMAL(g->head_w, c->V * c->C, s);
#undef NORMAL
#undef CONST
    prt_to_act(g->w, g->params, g->P);
}

Gpt *gpt_new(const GptConfig *cfg, uint64_t seed)
{
    Gpt *g = calloc(1, sizeof *g);
    const GptConfig *c = &g->c;
    g->c = *cfg;
    g->D = c->C / c->H;
    g->R = (c->H + 2 * c->Hkv) * g->D;
    g->FU = c->llama ? 2 * c->F : c->F;
    g->N = c->B * c->T;
    g->blk = calloc(c->L, sizeof *g->blk);
    g->P = layout(g);
    g->params = fa(g->P); g->grads = fa(g->P); g->m = fa(g->P); g->v = fa(g->P);
#ifdef PRT_CUDA
    g->w = aa(g->P);
#else
    g->w = g->params;
#endif
    g->decay = calloc(g->P + 1, 1);
    init_params(g, seed);

    size_t N = g->N, L = c->L, att = c->B * c->H * c->T * c->T;
    g->x = calloc(L + 1, sizeof *g->x);
    for (size_t l = 0; l <= L; l++)
        g->x[l] = aa(N * c->C);
    if (c->recompute == RC_SELECTIVE)
        g->att_shared = aa(att);
    size_t nsets = c->recompute == RC_FULL ? 1 : L;
    g->acts = calloc(nsets, sizeof *g->acts);
    for (size_t l = 0; l < nsets; l++)
        alloc_acts(&g->acts[l], g, c->recompute != RC_SELECTIVE);
    g->lnf = aa(N * c->C); g->lnf_mean = fa(N); g->lnf_rstd = fa(N);
    g->logits = aa(N * c->V);
    g->mx = fa(N); g->se = fa(N); g->tgt = fa(N); g->loss = fa(N);
    g->loss_host = calloc(N, sizeof(float));
    g->tok = dev(N * sizeof(int32_t)); g->targets = dev(N * sizeof(int32_t));
    g->d_ln = aa(N * c->C); g->d_atty = aa(N * c->H * g->D); g->d_qkv = aa(N * g->R);
    g->d_fch = aa(N * g->FU); g->d_fca = aa(N * c->F); g->datt = aa(att);
    g->dres = aa(N * c->C);
    return g;
}

void gpt_free(Gpt *g)
{
    if (!g)
        return;
    size_t nsets = g->c.recompute == RC_FULL ? 1 : g->c.L;
    for (size_t l = 0; l < nsets; l++)
        free_acts(&g->acts[l], g->c.recompute != RC_SELECTIVE);
    for (size_t l = 0; l <= g->c.L; l++)
        prt_free(g->x[l]);
    void *p[] = {g->params, g->grads, g->m, g->v, g->att_shared, g->lnf,
                 g->lnf_mean, g->lnf_rstd, g->logits, g->mx, g->se, g->tgt, g->loss,
                 g->tok, g->targets, g->d_ln, g->d_atty, g->d_qkv, g->d_fch, g->d_fca,
                 g->datt, g->dres};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        prt_free(p[i]);
    if ((void *)g->w != (void *)g->params)
        prt_free(g->w);
    free(g->loss_host); free(g->decay);
    free(g->x); free(g->acts); free(g->blk); free(g);
}

size_t gpt_num_params(const Gpt *g) { return g->P; }
float *gpt_params(Gpt *g) { return g->params; }
float *gpt_grads(Gpt *g) { return g->grads; }
void gpt_zero_grad(Gpt *g) { prt_zero(g->grads, g->P * sizeof(float)); }

static Acts *acts_of(Gpt *g, size_t l)
{
    return &g->acts[g->c.recompute == RC_FULL ? 0 : l];
}

static void norm_fwd(const Gpt *g, prt_act *out, float *mean, float *rstd, const prt_act *x,
                     size_t w, size_t b)
{
    if (g->c.llama)
        prt_rmsnorm_fwd(out, rstd, x, W(g, w), g->N, g->c.C, 1e-5f);
    else
        prt_layernorm_fwd(out, mean, rstd, x, W(g, w), W(g, b), g->N, g->c.C, 1e-5f);
}

/* dx accumulates: the residual stream's gradient flows through. */
static void norm_bwd(const Gpt *g, prt_act *dx, const prt_act *dout, const prt_act *x,
                     size_t w, size_t b, const float *mean, const float *rstd)
{
    if (g->c.llama)
        prt_rmsnorm_bwd(dx, G(g, w), dout, x, W(g, w), rstd, g->N, g->c.C);
    else
        prt_layernorm_bwd(dx, G(g, w), G(g, b), dout, x, W(g, w), mean, rstd, g->N, g->c.C);
}

/* One block: x[l] -> x[l+1]. */
static void block_fwd(Gpt *g, size_t l)
{
    const GptConfig *c = &g->c;
    const Block *b = &g->blk[l];
    Acts *a = acts_of(g, l);
    size_t N = g->N, C = c->C, HD = c->H * g->D;
    const prt_act *x = g->x[l];
    TIMED(PROF_NORM, norm_fwd(g, a->ln1, a->ln1_mean, a->ln1_rstd, x, b->ln1_w, b->ln1_b));
    TIMED(PROF_LINEAR, prt_linear_fwd(a->qkv, a->ln1, W(g, b->qkv_w), W(g, b->qkv_b), N, C, g->R));
    if (c->llama)
        TIMED(PROF_ATTENTION, prt_rope_fwd(a->qkv, c->B, c->T, c->H, c->Hkv, g->D, &PRT_ROPE_PLAIN(10000.0f)));
    TIMED(PROF_ATTENTION, prt_attention_fwd(a->atty, a->att, a->qkv, c->B, c->T, c->H, c->Hkv, g->D, 0));
    TIMED(PROF_LINEAR, prt_linear_fwd(a->tmp, a->atty, W(g, b->proj_w), W(g, b->proj_b), N, HD, C));
    TIMED(PROF_ELEMENTWISE, prt_residual_add(a->mid, x, a->tmp, N * C));
    TIMED(PROF_NORM, norm_fwd(g, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, b->ln2_w, b->ln2_b));
    TIMED(PROF_LINEAR, prt_linear_fwd(a->fch, a->ln2, W(g, b->fc_w), W(g, b->fc_b), N, C, g->FU));
    if (c->llama)
        TIMED(PROF_ELEMENTWISE, prt_swiglu_fwd(a->fca, a->fch, N, c->F));
    else
        TIMED(PROF_ELEMENTWISE, prt_gelu_fwd(a->fca, a->fch, N * c->F));
    TIMED(PROF_LINEAR, prt_linear_fwd(a->tmp, a->fca, W(g, b->fp_w), W(g, b->fp_b), N, c->F, C));
    TIMED(PROF_ELEMENTWISE, prt_residual_add(g->x[l + 1], a->mid, a->tmp, N * C));
}

/* One block's backward: dres holds d x[l+1] and leaves holding d x[l]. */
static void block_bwd(Gpt *g, size_t l)
{
    const GptConfig *c = &g->c;
    const Block *b = &g->blk[l];
    Acts *a = acts_of(g, l);
    size_t N = g->N, C = c->C, HD = c->H * g->D;
    if (c->recompute == RC_FULL)
        block_fwd(g, l);   /* rebuild every activation from x[l] */
    TIMED(PROF_LINEAR, prt_linear_bwd(g->d_fca, G(g, b->fp_w), G(g, b->fp_b), g->dres, a->fca,
                                      W(g, b->fp_w), N, c->F, C));
    if (c->llama)
        TIMED(PROF_ELEMENTWISE, prt_swiglu_bwd(g->d_fch, a->fch, g->d_fca, N, c->F));
    else
        TIMED(PROF_ELEMENTWISE, prt_gelu_bwd(g->d_fch, a->fch, g->d_fca, N * c->F));
    TIMED(PROF_LINEAR, prt_linear_bwd(g->d_ln, G(g, b->fc_w), G(g, b->fc_b), g->d_fch, a->ln2,
                                      W(g, b->fc_w), N, C, g->FU));
    TIMED(PROF_NORM, norm_bwd(g, g->dres, g->d_ln, a->mid, b->ln2_w, b->ln2_b, a->ln2_mean, a->ln2_rstd));
    TIMED(PROF_LINEAR, prt_linear_bwd(g->d_atty, G(g, b->proj_w), G(g, b->proj_b), g->dres,
                                      a->atty, W(g, b->proj_w), N, HD, C));
    TIMED(PROF_ATTENTION, prt_attention_bwd(g->d_qkv, g->datt, g->d_atty, a->qkv, a->att,
                                            c->recompute == RC_SELECTIVE, c->B, c->T, c->H,
                                            c->Hkv, g->D, 0));
    if (c->llama)
        TIMED(PROF_ATTENTION, prt_rope_bwd(g->d_qkv, c->B, c->T, c->H, c->Hkv, g->D, &PRT_ROPE_PLAIN(10000.0f)));
    TIMED(PROF_LINEAR, prt_linear_bwd(g->d_ln, G(g, b->qkv_w), G(g, b->qkv_b), g->d_qkv, a->ln1,
                                      W(g, b->qkv_w), N, C, g->R));
    TIMED(PROF_NORM, norm_bwd(g, g->dres, g->d_ln, g->x[l], b->ln1_w, b->ln1_b, a->ln1_mean, a->ln1_rstd));
}

float gpt_forward(Gpt *g, const int32_t *tokens, const int32_t *targets)
{
    const GptConfig *c = &g->c;
    size_t N = g->N, C = c->C;
    if (prt_copy_to_device(g->tok, tokens, N * sizeof *tokens) ||
        prt_copy_to_device(g->targets, targets, N * sizeof *targets))
        return NAN;   /* the batch never arrived: a loss no check accepts */
    TIMED(PROF_EMBED, prt_embedding_fwd(g->x[0], g->tok, W(g, g->wte), N, C, 0, c->V));
    if (g->wpe != NONE)
        TIMED(PROF_EMBED, prt_position_fwd(g->x[0], W(g, g->wpe), c->B, c->T, C));
    for (size_t l = 0; l < c->L; l++)
        block_fwd(g, l);
    TIMED(PROF_NORM, norm_fwd(g, g->lnf, g->lnf_mean, g->lnf_rstd, g->x[c->L], g->lnf_w, g->lnf_b));
    TIMED(PROF_LINEAR, prt_linear_fwd(g->logits, g->lnf, W(g, g->head_w), NULL, N, C, c->V));
    TIMED(PROF_XENT, prt_xent_max(g->mx, g->logits, N, c->V, 0, c->V));
    TIMED(PROF_XENT, prt_xent_sumexp(g->se, g->tgt, g->logits, g->mx, g->targets, N, c->V, 0, c->V));
    TIMED(PROF_XENT, prt_xent_loss(g->loss, g->mx, g->se, g->tgt, g->targets, N));
    if (prt_copy_to_host(g->loss_host, g->loss, N * sizeof(float)))
        return NAN;   /* the losses never came back */
    double sum = 0.0;
    for (size_t i = 0; i < N; i++)
        sum += g->loss_host[i];
    return (float)(sum / (double)N);
}

float gpt_forward_backward(Gpt *g, const int32_t *tokens, const int32_t *targets)
{
    const GptConfig *c = &g->c;
    size_t N = g->N, C = c->C;
    float loss = gpt_forward(g, tokens, targets);
    TIMED(PROF_XENT, prt_xent_bwd(g->logits, g->logits, g->mx, g->se, g->targets, N, c->V, 0, c->V,
                                  1.0f / (float)N));
    TIMED(PROF_LINEAR, prt_linear_bwd(g->d_ln, G(g, g->head_w), NULL, g->logits, g->lnf,
                                      W(g, g->head_w), N, C, c->V));
    prt_zero(g->dres, N * C * sizeof(prt_act));
    TIMED(PROF_NORM, norm_bwd(g, g->dres, g->d_ln, g->x[c->L], g->lnf_w, g->lnf_b, g->lnf_mean, g->lnf_rstd));
    for (size_t l = c->L; l-- > 0;)
        block_bwd(g, l);
    TIMED(PROF_EMBED, prt_embedding_bwd(G(g, g->wte), g->tok, g->dres, N, C, 0, c->V));
    if (g->wpe != NONE)
        TIMED(PROF_EMBED, prt_position_bwd(G(g, g->wpe), g->dres, c->B, c->T, C));
    return loss;
}

/* Clip by the global norm, then AdamW with decay only on matrices, in runs
 * of equal decay; then refresh the compute copy. */
void gpt_adamw(Gpt *g, const prt_adamw_cfg *cfg, long t)
{
    double sq = 0;
    TIMED(PROF_ADAMW, sq = prt_grad_sq_norm(g->grads, g->P));
    float scale = prt_clip_scale(sq, cfg->clip);
    float lr = prt_lr_at(cfg, t - 1);
    size_t i = 0;
    while (i < g->P) {
        size_t j = i;
        while (j < g->P && g->decay[j] == g->decay[i])
            j++;
        TIMED(PROF_ADAMW, prt_adamw_step(g->params + i, g->grads + i, g->m + i, g->v + i,
                                         j - i, cfg, t, lr,
                                         g->decay[i] ? cfg->weight_decay : 0.0f, scale));
        i = j;
    }
    TIMED(PROF_ADAMW, prt_to_act(g->w, g->params, g->P));
}

double gpt_flops_per_step(const GptConfig *c)
{
    double D = (double)(c->C / c->H), R = (double)(c->H + 2 * c->Hkv) * D;
    double FU = c->llama ? 2.0 * (double)c->F : (double)c->F;
    double per_layer = R * (double)c->C + (double)c->C * (double)c->H * D
                     + FU * (double)c->C + (double)c->C * (double)c->F;
    double n = (double)c->L * per_layer + (double)c->V * (double)c->C;
    double tokens = (double)(c->B * c->T);
    return tokens * (6.0 * n + 12.0 * (double)c->L * (double)c->H * D * (double)c->T);
}
