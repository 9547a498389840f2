/*
 * mla.c: multi-head latent attention (DeepSeek-V2, Liu et al. 2024 Sec.
 * 2.1; transformers' DeepseekV2Attention), composed from the runtime's own
 * ops: prt_linear_*, prt_rmsnorm_*, prt_rope_* and prt_attention_*, and
 * the moves between their layouts (prt_copy_blocks, prt_zero). It calls
 * nothing else, so one source serves both builds: on CUDA every call is a
 * device op on device buffers (ops.mk compiles it into both libraries).
 *
 * On one TP rank of H local heads (n nope, r rope, d_q = n + r, d_v v):
 *   q   = q_b(rmsnorm(q_a(x)))   or q_proj(x)          (N, H d_q)
 *   kva = kv_a(x)                                      (N, c_kv + r)
 *   kv  = kv_b(rmsnorm(kva[:, :c_kv]))                 (N, H (n + d_v))
 *   k_pe = rope(kva[:, c_kv:])   one key part shared by the heads
 *   q_pe = rope(q[h][n:])        per head
 *   o   = attention(q = [q_nope, q_pe], k = [k_nope, k_pe], v)   (N, H d_v)
 * The attention op has one head size D for q, k and v: MLA's heads are
 * zero-padded to D = max(d_q, d_v) (zero columns add nothing to q.k and
 * give zero output columns; Megatron-Core pads V so for its THD kernels),
 * and where D > d_q the queries are scaled by sqrt(D / d_q) so that the
 * op's 1/sqrt(D) is MLA's 1/sqrt(d_q). DeepSeek's YaRN with mscale_all_dim
 * multiplies that softmax scale by m(factor, mscale_all_dim)^2
 * (prt_rope_mla_softmax_mscale, DeepseekV3Attention's self.scaling): the
 * queries carry it too, so the op's scores are DeepSeek's, forward and
 * backward. RoPE runs on a buffer laid out as
 * the op's qkv with head size r: the H rotated query parts, the shared key
 * part as one key head, and a value head it leaves alone, so the rotation
 * (interleaved pairs, YaRN's mscale on cos and sin) is prt_rope's own.
 *
 * What it must not do: allocate (the caller passes every buffer:
 * prt_mla_ws_elems), or reduce over TP (the caller all-reduces dx and the
 * replicated weights' gradients, as the planner's rule says).
 */
#include <math.h>
#include "ops_err.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* The padded head size, and the queries' scale: with the attention op's
 * 1/sqrt(D) it makes MLA's softmax scale m^2 / sqrt(d_q) (m^2 is 1 but
 * under DeepSeek's YaRN with mscale_all_dim). */
static size_t pad_dim(const prt_mla_dims *d) { return max_sz(d->nope + d->rope, d->v); }
static float q_scale(const prt_mla_dims *d)
{
    float s = sqrtf((float)pad_dim(d) / (float)(d->nope + d->rope));
    return d->rope_params ? s * (float)prt_rope_mla_softmax_mscale(d->rope_params) : s;
}

size_t prt_mla_ws_elems(const prt_mla_dims *d)
{
    size_t N = d->B * d->T, H = d->H, D = pad_dim(d), dq = d->nope + d->rope;
    size_t lat = max_sz(d->q_lora, d->kv_lora);
    size_t fwd = N * H * dq + N * H * (d->nope + d->v) + N * (H + 2) * d->rope;
    size_t bwd = N * H * D + N * 3 * H * D + d->B * H * d->T * d->T + N * H * dq + N * H * (d->nope + d->v) +
                 N * (H + 2) * d->rope + 2 * N * lat + N * (d->kv_lora + d->rope) + N * d->C;
    return max_sz(fwd, bwd);
}

/* Rows of the rope buffer: H query parts, the key part, a value part. */
static size_t rope_row(const prt_mla_dims *d) { return (d->H + 2) * d->rope; }

void prt_mla_fwd(prt_act *o, prt_mla_kept *k, prt_act *ws, const prt_act *x, const prt_mla_w *w,
                 const prt_mla_dims *d)
{
    PRT_OP_ENTER("prt_mla_fwd");
    size_t N = d->B * d->T, H = d->H, n = d->nope, r = d->rope, v = d->v, dq = n + r, D = pad_dim(d);
    size_t R = d->kv_lora + r, KV = n + v, RR = rope_row(d);
    prt_act *q = ws, *kv = q + N * H * dq, *rp = kv + N * H * KV;
    if (d->q_lora) {
        prt_linear_fwd(k->qa, x, w->wqa, w->bqa, N, d->C, d->q_lora);
        prt_rmsnorm_fwd(k->qn, k->qr, k->qa, w->gqa, N, d->q_lora, d->eps);
        prt_linear_fwd(q, k->qn, w->wqb, NULL, N, d->q_lora, H * dq);
    } else {
        prt_linear_fwd(q, x, w->wqb, NULL, N, d->C, H * dq);
    }
    prt_linear_fwd(k->kva, x, w->wkva, w->bkva, N, d->C, R);
    prt_copy_blocks(k->kvl, d->kv_lora, 0, k->kva, R, 0, N, 1, d->kv_lora, 1.0f, false);
    prt_rmsnorm_fwd(k->kvn, k->kvr, k->kvl, w->gkva, N, d->kv_lora, d->eps);
    prt_linear_fwd(kv, k->kvn, w->wkvb, NULL, N, d->kv_lora, H * KV);
    /* the rotated parts into the rope buffer (its value head stays 0),
       rotated there */
    (void)prt_zero(rp, N * RR * sizeof *rp);
    prt_copy_blocks(rp, RR, r, q + n, H * dq, dq, N, H, r, 1.0f, false);
    prt_copy_blocks(rp + H * r, RR, 0, k->kva + d->kv_lora, R, 0, N, 1, r, 1.0f, false);
    prt_rope_fwd(rp, d->B, d->T, H, 1, r, d->rope_params);
    /* each head's q, k, v, zero-padded to D, in the attention op's layout:
       q = [q_nope, q_pe] s, k = [k_nope, the shared k_pe], v */
    float s = q_scale(d);
    size_t HD = H * D, Q3 = 3 * HD;
    (void)prt_zero(k->qkv, N * Q3 * sizeof *k->qkv);
    prt_copy_blocks(k->qkv, Q3, D, q, H * dq, dq, N, H, n, s, false);
    prt_copy_blocks(k->qkv + n, Q3, D, rp, RR, r, N, H, r, s, false);
    prt_copy_blocks(k->qkv + HD, Q3, D, kv, H * KV, KV, N, H, n, 1.0f, false);
    prt_copy_blocks(k->qkv + HD + n, Q3, D, rp + H * r, RR, 0, N, H, r, 1.0f, false);
    prt_copy_blocks(k->qkv + 2 * HD, Q3, D, kv + n, H * KV, KV, N, H, v, 1.0f, false);
    prt_attention_fwd(k->opad, k->att, k->qkv, d->B, d->T, H, H, D, d->W);
    prt_copy_blocks(o, H * v, v, k->opad, HD, D, N, H, v, 1.0f, false);
}

void prt_mla_bwd(prt_act *dx, prt_mla_grad *g, prt_act *ws, const prt_act *dout, const prt_act *x,
                 const prt_mla_kept *k, const prt_mla_w *w, const prt_mla_dims *d)
{
    PRT_OP_ENTER("prt_mla_bwd");
    size_t N = d->B * d->T, H = d->H, n = d->nope, r = d->rope, v = d->v, Dq = n + r, D = pad_dim(d);
    size_t R = d->kv_lora + r, KV = n + v, RR = rope_row(d), lat = max_sz(d->q_lora, d->kv_lora);
    prt_act *dop = ws, *dqkv = dop + N * H * D, *datt = dqkv + N * 3 * H * D;
    prt_act *dq = datt + d->B * H * d->T * d->T, *dkv = dq + N * H * Dq, *drp = dkv + N * H * KV;
    prt_act *dl = drp + N * RR, *dn = dl + N * lat, *dkva = dn + N * lat, *dxq = dkva + N * R;
    size_t HD = H * D, Q3 = 3 * HD;
    (void)prt_zero(dop, N * HD * sizeof *dop);
    prt_copy_blocks(dop, HD, D, dout, H * v, v, N, H, v, 1.0f, false);
    prt_attention_bwd(dqkv, datt, dop, k->qkv, k->att, false, d->B, d->T, H, H, D, d->W);
    /* split each head's dQ, dK, dV into the parts; the shared key part's
       gradient is the sum over the heads (in head order) */
    float s = q_scale(d);
    (void)prt_zero(drp, N * RR * sizeof *drp);
    prt_copy_blocks(dq, H * Dq, Dq, dqkv, Q3, D, N, H, n, s, false);
    prt_copy_blocks(drp, RR, r, dqkv + n, Q3, D, N, H, r, s, false);
    prt_copy_blocks(dkv, H * KV, KV, dqkv + HD, Q3, D, N, H, n, 1.0f, false);
    prt_copy_blocks(drp + H * r, RR, 0, dqkv + HD + n, Q3, D, N, H, r, 1.0f, false);
    prt_copy_blocks(dkv + n, H * KV, KV, dqkv + 2 * HD, Q3, D, N, H, v, 1.0f, false);
    prt_rope_bwd(drp, d->B, d->T, H, 1, r, d->rope_params);
    prt_copy_blocks(dq + n, H * Dq, Dq, drp, RR, r, N, H, r, 1.0f, false);
    /* key/value side: kv_b, the latent norm, kv_a (dx written here) */
    prt_linear_bwd(dn, g->wkvb, NULL, dkv, k->kvn, w->wkvb, N, d->kv_lora, H * KV);
    (void)prt_zero(dl, N * d->kv_lora * sizeof *dl);
    prt_rmsnorm_bwd(dl, g->gkva, dn, k->kvl, w->gkva, k->kvr, N, d->kv_lora);
    prt_copy_blocks(dkva, R, 0, dl, d->kv_lora, 0, N, 1, d->kv_lora, 1.0f, false);
    prt_copy_blocks(dkva + d->kv_lora, R, 0, drp + H * r, RR, 0, N, 1, r, 1.0f, false);
    prt_linear_bwd(dx, g->wkva, g->bkva, dkva, x, w->wkva, N, d->C, R);
    /* query side: q_b, the latent norm, q_a (or q_proj), added into dx */
    if (d->q_lora) {
        prt_linear_bwd(dn, g->wqb, NULL, dq, k->qn, w->wqb, N, d->q_lora, H * Dq);
        (void)prt_zero(dl, N * d->q_lora * sizeof *dl);
        prt_rmsnorm_bwd(dl, g->gqa, dn, k->qa, w->gqa, k->qr, N, d->q_lora);
        prt_linear_bwd(dxq, g->wqa, g->bqa, dl, x, w->wqa, N, d->C, d->q_lora);
    } else {
        prt_linear_bwd(dxq, g->wqb, NULL, dq, x, w->wqb, N, d->C, H * Dq);
    }
    prt_add_inplace(dx, dxq, N * d->C);
}
