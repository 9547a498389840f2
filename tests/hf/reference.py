#!/usr/bin/env python3
"""reference.py: the first training batch's loss of a Hugging Face model
directory as transformers' modeling code defines it, in plain Python (the
standard library alone: no torch), for make test-hf-roundtrip.

  reference.py HF_DIR DATA SEED GLOBAL_BATCH SEQ

REFERENCE_QK_GAIN=w in the environment computes Gemma 3's q_norm and
k_norm by the gain w instead of 1 + w (Qwen3's form): roundtrip.sh shows
that planc's loss is not that model's.

It prints the mean cross-entropy of step 1's global batch, drawn as planc's
runtime draws it (runtime/ops/data.c: sequence s of step k starts at a
SplitMix64 hash of (seed, k, s) modulo the number of windows), so a planc
run started with --init-from HF_DIR must log the same first loss. What this
holds the mapping to: transformers' RoPE (rotate_half: i pairs with i + D/2),
grouped-query heads (query head h reads key/value head h // (H / Hkv)), the
order of gate and up, GPT-2's Conv1D (x @ W), Gemma's sqrt(hidden) embedding
and x*(1+w) RMSNorm, Mixtral's routing (softmax over all experts, top k,
renormalised), Qwen3's q_norm and k_norm (an RMSNorm of each query and key
head before RoPE), Qwen3-MoE's (Qwen3's attention, Mixtral's routing but
renormalised only under norm_topk_prob), Qwen2-MoE's (Qwen2's attention,
those experts, and a shared expert scaled by sigmoid(shared_expert_gate .
h)), Gemma 2 (modeling_gemma2: the norms before and after each
sub-block, the scores scaled by query_pre_attn_scalar^-1/2 and soft-capped
before the mask, layer i sliding when i % 2 == 0, the logits soft-capped),
Gemma 3 (modeling_gemma3, transformers 4.50 on: Gemma 2's block, q_norm and
k_norm of each head by 1 + w before RoPE, layer i global when (i + 1) %
sliding_window_pattern == 0 (or by layer_types), the local layers rotating
at rope_local_base_freq, the caps None unless set) and OLMo-2
(modeling_olmo2: the norms after each sub-block alone, q_norm and k_norm
over the whole q and k projections before RoPE). Architectures: llama,
mistral, qwen2, qwen3, mixtral, qwen3_moe, qwen2_moe, gemma, gemma2,
gemma3_text, olmo2, gpt2.
"""
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfdir  # noqa: E402  (the same reader as the round trip)

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def start_of(n, T, seed, step, s):
    h = mix64((seed + 0x9E3779B97F4A7C15) & M64)
    h = mix64(h ^ ((step * 0xD1B54A32D192ED03) & M64))
    h = mix64(h ^ ((s * 0xABA0D9B1F3E1C2A7 + 1) & M64))
    return h % (n - T)


def tensor(raw, name):
    dt, shape, data = raw[name]
    n = len(data) // (2 if dt == "BF16" else 4)
    if dt == "BF16":
        vals = struct.unpack("<%df" % n, b"".join(b"\0\0" + data[2 * i:2 * i + 2] for i in range(n)))
    else:
        vals = struct.unpack("<%df" % n, data)
    if len(shape) == 1:
        return list(vals)
    r, c = shape
    return [list(vals[i * c:(i + 1) * c]) for i in range(r)]


def matvec(W, x):            # W (out, in) . x (in)
    return [sum(w * v for w, v in zip(row, x)) for row in W]


def vecmat(x, W):            # x (in) . W (in, out): GPT-2's Conv1D
    out = [0.0] * len(W[0])
    for xi, row in zip(x, W):
        if xi:
            for j, w in enumerate(row):
                out[j] += xi * w
    return out


def add(a, b):
    return [x + y for x, y in zip(a, b)]


def rmsnorm(x, w, eps, plus_one=False):
    s = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * s * ((1.0 + g) if plus_one else g) for v, g in zip(x, w)]


def layernorm(x, w, b, eps):
    m = sum(x) / len(x)
    var = sum((v - m) ** 2 for v in x) / len(x)
    s = 1.0 / math.sqrt(var + eps)
    return [(v - m) * s * g + c for v, g, c in zip(x, w, b)]


def silu(v):
    return v / (1.0 + math.exp(-v))


def gelu_tanh(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def rope(x, pos, D, theta):  # transformers' rotate_half on one head
    h = D // 2
    out = list(x)
    for i in range(h):
        a = pos * theta ** (-2.0 * i / D)
        c, s = math.cos(a), math.sin(a)
        out[i] = x[i] * c - x[i + h] * s
        out[i + h] = x[i + h] * c + x[i] * s
    return out


def attention(qs, ks, vs, H, Hkv, D, window, scale=None, softcap=None):
    """qs (T, H*D), ks/vs (T, Hkv*D) -> (T, H*D), causal (and sliding over
    window tokens, the token itself included). The scores are scaled by
    scale (default D^-1/2), then soft-capped: cap * tanh(score / cap)."""
    T, g, out = len(qs), H // Hkv, []
    scale = D ** -0.5 if scale is None else scale
    for t in range(T):
        row = []
        for h in range(H):
            kvh = h // g
            q = qs[t][h * D:(h + 1) * D]
            lo = max(0, t - window + 1) if window else 0
            sc = [sum(a * b for a, b in zip(q, ks[j][kvh * D:(kvh + 1) * D])) * scale
                  for j in range(lo, t + 1)]
            if softcap:
                sc = [softcap * math.tanh(v / softcap) for v in sc]
            m = max(sc)
            e = [math.exp(v - m) for v in sc]
            z = sum(e)
            o = [0.0] * D
            for p, j in zip(e, range(lo, t + 1)):
                vv = vs[j][kvh * D:(kvh + 1) * D]
                for d in range(D):
                    o[d] += p / z * vv[d]
            row += o
        out.append(row)
    return out


def logits_loss(xs, W, targets, softcap=None):
    loss = 0.0
    for x, y in zip(xs, targets):
        lg = matvec(W, x)
        if softcap:   # Gemma 2's final_logit_softcapping
            lg = [softcap * math.tanh(v / softcap) for v in lg]
        m = max(lg)
        loss += m + math.log(sum(math.exp(v - m) for v in lg)) - lg[y]
    return loss


def seq_loss_decoder(c, raw, arch, tokens, targets):
    t = lambda n: tensor(raw, n)
    C, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    Hkv = c.get("num_key_value_heads", H)
    D = c.get("head_dim") or C // H
    eps, theta = c.get("rms_norm_eps", 1e-6), c.get("rope_theta", 10000.0)
    window = c.get("sliding_window") if arch in ("mistral", "mixtral") or c.get("use_sliding_window") else None
    gemma3 = arch == "gemma3_text"
    qk_plus_one = gemma3 and os.environ.get("REFERENCE_QK_GAIN", "1+w") != "w"
    gemma = arch in ("gemma", "gemma2") or gemma3
    gemma2, olmo2 = arch == "gemma2", arch == "olmo2"
    sandwich = gemma2 or gemma3   # norms before and after each sub-block
    # Gemma 2, 3: their configs' defaults where a config leaves them out; null is no cap
    scale = c.get("query_pre_attn_scalar", 256) ** -0.5 if sandwich else None
    attn_cap = c.get("attn_logit_softcapping", None if gemma3 else 50.0) if sandwich else None
    logit_cap = c.get("final_logit_softcapping", None if gemma3 else 30.0) if sandwich else None
    if gemma3:   # Gemma3TextConfig's defaults; layer_types (4.53 on) before the pattern
        theta = c.get("rope_theta", 1e6)
        pattern = c.get("sliding_window_pattern", 6)
        types = c.get("layer_types") or ["sliding_attention" if (i + 1) % pattern else "full_attention"
                                         for i in range(L)]
    E = t("model.embed_tokens.weight")
    xs = [list(E[k]) for k in tokens]
    if gemma:
        s = struct.unpack("<f", struct.pack("<f", math.sqrt(C)))[0]   # the normalizer in fp32
        xs = [[v * s for v in x] for x in xs]
    for b in range(L):
        p = "model.layers.%d." % b
        W = {k: t(p + k) for k in ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                   "self_attn.v_proj.weight", "self_attn.o_proj.weight")}
        bias = {k: t(p + "self_attn.%s_proj.bias" % k) if (p + "self_attn.%s_proj.bias" % k) in raw else None
                for k in "qkv"}
        # the sub-blocks' norms: before (pre) and after (post) attention and the MLP
        ln1 = None if olmo2 else t(p + "input_layernorm.weight")
        ln2 = None if olmo2 else t(p + ("pre_feedforward_layernorm.weight" if sandwich else "post_attention_layernorm.weight"))
        post1 = t(p + "post_attention_layernorm.weight") if sandwich or olmo2 else None
        post2 = t(p + "post_feedforward_layernorm.weight") if sandwich or olmo2 else None
        qn = (t(p + "self_attn.q_norm.weight"), t(p + "self_attn.k_norm.weight")) if arch in ("qwen3", "qwen3_moe", "olmo2", "gemma3_text") else None
        # Gemma 3: a sliding layer turns at rope_local_base_freq (unscaled), a full one at rope_theta
        local = gemma3 and types[b] == "sliding_attention"
        th = c.get("rope_local_base_freq", 10000.0) if local else theta
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            h = rmsnorm(x, ln1, eps, gemma) if ln1 else x
            q, k, v = (matvec(W["self_attn.%s_proj.weight" % n], h) for n in "qkv")
            if bias["q"]:
                q, k, v = add(q, bias["q"]), add(k, bias["k"]), add(v, bias["v"])
            if qn and olmo2:   # OLMo-2: the whole q and k projections normalised, then rotated
                q, k = rmsnorm(q, qn[0], eps), rmsnorm(k, qn[1], eps)
            elif qn:   # Qwen3, Gemma 3 (gain 1 + w): each head's D values normalised, then rotated
                q = sum((rmsnorm(q[i * D:(i + 1) * D], qn[0], eps, qk_plus_one) for i in range(H)), [])
                k = sum((rmsnorm(k[i * D:(i + 1) * D], qn[1], eps, qk_plus_one) for i in range(Hkv)), [])
            qs.append(sum((rope(q[i * D:(i + 1) * D], pos, D, th) for i in range(H)), []))
            ks.append(sum((rope(k[i * D:(i + 1) * D], pos, D, th) for i in range(Hkv)), []))
            vs.append(v)
        # Gemma 2: layer b slides when b % 2 == 0 (Gemma2Attention's sliding_window), else global
        win = (c.get("sliding_window", 4096) if b % 2 == 0 else None) if gemma2 else window
        if gemma3:
            win = c.get("sliding_window", 4096) if local else None
        att = attention(qs, ks, vs, H, Hkv, D, win, scale, attn_cap)
        outs = [matvec(W["self_attn.o_proj.weight"], a) for a in att]
        if post1:
            outs = [rmsnorm(o, post1, eps, gemma) for o in outs]
        xs = [add(x, o) for x, o in zip(xs, outs)]
        if arch in ("mixtral", "qwen3_moe", "qwen2_moe"):
            if arch == "mixtral":
                gate = t(p + "block_sparse_moe.gate.weight")
                ex = [{w: t(p + "block_sparse_moe.experts.%d.%s.weight" % (e, w)) for w in ("w1", "w2", "w3")}
                      for e in range(c["num_local_experts"])]
                renorm = True
            else:   # Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock: the same weights under other names
                gate = t(p + "mlp.gate.weight")
                ex = [{w: t(p + "mlp.experts.%d.%s_proj.weight" % (e, n)) for w, n in
                       (("w1", "gate"), ("w2", "down"), ("w3", "up"))} for e in range(c["num_experts"])]
                renorm = c.get("norm_topk_prob", False)
            k_top = c["num_experts_per_tok"]
            nxs = []
            for x in xs:
                h = rmsnorm(x, ln2, eps)
                lg = matvec(gate, h)
                m = max(lg)
                pr = [math.exp(v - m) for v in lg]
                top = sorted(range(len(pr)), key=lambda i: -pr[i])[:k_top]
                z = sum(pr[i] for i in top) if renorm else sum(pr)   # else the full softmax's top-k
                y = [0.0] * C
                for i in top:
                    u = [silu(a) * bb for a, bb in zip(matvec(ex[i]["w1"], h), matvec(ex[i]["w3"], h))]
                    y = add(y, [pr[i] / z * v for v in matvec(ex[i]["w2"], u)])
                if arch == "qwen2_moe":   # + sigmoid(g . h) shared_expert(h)
                    sx = p + "mlp.shared_expert."
                    u = [silu(a) * bb for a, bb in zip(matvec(t(sx + "gate_proj.weight"), h),
                                                       matvec(t(sx + "up_proj.weight"), h))]
                    g = 1.0 / (1.0 + math.exp(-matvec(t(p + "mlp.shared_expert_gate.weight"), h)[0]))
                    y = add(y, [g * v for v in matvec(t(sx + "down_proj.weight"), u)])
                nxs.append(add(x, y))
            xs = nxs
        else:
            G, U, Dn = t(p + "mlp.gate_proj.weight"), t(p + "mlp.up_proj.weight"), t(p + "mlp.down_proj.weight")
            act = gelu_tanh if gemma else silu
            nxs = []
            for x in xs:
                h = rmsnorm(x, ln2, eps, gemma) if ln2 else x
                u = [act(a) * bb for a, bb in zip(matvec(G, h), matvec(U, h))]
                o = matvec(Dn, u)
                nxs.append(add(x, rmsnorm(o, post2, eps, gemma) if post2 else o))
            xs = nxs
    nw = t("model.norm.weight")
    xs = [rmsnorm(x, nw, eps, gemma) for x in xs]
    head = t("lm_head.weight") if "lm_head.weight" in raw and not c.get("tie_word_embeddings", gemma) else E
    return logits_loss(xs, head, targets, logit_cap)


def seq_loss_gpt2(c, raw, tokens, targets):
    t = lambda n: tensor(raw, n)
    C, H, L, eps = c["n_embd"], c["n_head"], c["n_layer"], c.get("layer_norm_epsilon", 1e-5)
    D = C // H
    wte, wpe = t("transformer.wte.weight"), t("transformer.wpe.weight")
    xs = [add(wte[k], wpe[i]) for i, k in enumerate(tokens)]
    for b in range(L):
        p = "transformer.h.%d." % b
        g = {n: t(p + n) for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                   "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                   "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")}
        qkv = [add(vecmat(layernorm(x, g["ln_1.weight"], g["ln_1.bias"], eps), g["attn.c_attn.weight"]),
                   g["attn.c_attn.bias"]) for x in xs]
        att = attention([r[:C] for r in qkv], [r[C:2 * C] for r in qkv], [r[2 * C:] for r in qkv], H, H, D, None)
        xs = [add(x, add(vecmat(a, g["attn.c_proj.weight"]), g["attn.c_proj.bias"])) for x, a in zip(xs, att)]
        nxs = []
        for x in xs:
            h = layernorm(x, g["ln_2.weight"], g["ln_2.bias"], eps)
            u = [gelu_tanh(v) for v in add(vecmat(h, g["mlp.c_fc.weight"]), g["mlp.c_fc.bias"])]
            nxs.append(add(x, add(vecmat(u, g["mlp.c_proj.weight"]), g["mlp.c_proj.bias"])))
        xs = nxs
    xs = [layernorm(x, t("transformer.ln_f.weight"), t("transformer.ln_f.bias"), eps) for x in xs]
    head = t("lm_head.weight") if "lm_head.weight" in raw and not c.get("tie_word_embeddings", True) else wte
    return logits_loss(xs, head, targets)


def main(argv):
    d, data, seed, gb, T = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    import json
    c = json.load(open(os.path.join(d, "config.json")))
    raw = hfdir.read_dir(d)
    text = open(data, "rb").read()
    total = 0.0
    for s in range(gb):
        at = start_of(len(text), T, seed, 0, s)
        tokens, targets = list(text[at:at + T]), list(text[at + 1:at + T + 1])
        if c["model_type"] == "gpt2":
            total += seq_loss_gpt2(c, raw, tokens, targets)
        else:
            total += seq_loss_decoder(c, raw, c["model_type"], tokens, targets)
    print("%.9g" % (total / (gb * T)))


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    main(sys.argv[1:])
