#!/usr/bin/env python3
"""hfdir.py: tiny Hugging Face model directories for make test-hf-roundtrip,
with the standard library alone (no torch, no safetensors package).

  hfdir.py make ARCH OUT_DIR [--dtype f32|bf16] [--shards N] [--vocab V] [--drop NAME]
                              [--set KEY=JSON] [--unset KEY]
      a config.json of ARCH (llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, qwen2_moe, gpt2, gemma,
      gemma2, gemma3, olmo2) for the
      tiny models of tests/hf/roundtrip.sh and random weights under
      transformers' names: model.safetensors, or N shards with
      model.safetensors.index.json. --drop leaves a tensor out, --set
      overrides a config field (refusal tests), --unset leaves one out
      (transformers' default stands for it).
  hfdir.py same A_DIR B_DIR
      exit 0 when both directories hold the same tensors (names, dtypes,
      shapes, bytes), whatever their sharding; else name the first
      differences and exit 1.

The tiny shapes here must match tests/hf/*.model (the plans' models).
"""
import json
import os
import random
import struct
import sys

# The tiny models: dim 32, 2 blocks, 4 heads of 8 (kv 2), MLP 64 (GPT-2: 4 x 32 = 128 as
# n_inner), seq 16. ORDER tests/hf/*.model
DIM, BLOCKS, HEADS, KV, HD, FFN, SEQ, EXPERTS = 32, 2, 4, 2, 8, 64, 16, 4
SHARED = 48   # Qwen2-MoE's shared expert: a width of its own


def config(arch, vocab, dtype):
    torch_dtype = "bfloat16" if dtype == "bf16" else "float32"
    if arch == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab,
                "n_positions": SEQ, "n_embd": DIM, "n_layer": BLOCKS, "n_head": HEADS, "n_inner": 4 * DIM,
                "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                "tie_word_embeddings": True, "torch_dtype": torch_dtype}
    if arch == "gemma":
        return {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "vocab_size": vocab,
                "hidden_size": DIM, "intermediate_size": FFN, "num_hidden_layers": BLOCKS,
                "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
                "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
                "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                "tie_word_embeddings": True, "torch_dtype": torch_dtype}
    if arch == "gemma2":   # Gemma 2: caps and a query scalar that bite at these sizes, a window < seq
        c = config("gemma", vocab, dtype)
        c.update({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "query_pre_attn_scalar": 12,
                  "attn_logit_softcapping": 20.0, "final_logit_softcapping": 15.0, "sliding_window": 8,
                  "cache_implementation": "hybrid"})
        return c
    if arch == "gemma3":   # Gemma 3 (gemma3_text): no caps, a query scalar that bites, block 0 local
        # (window 8 < seq, its own RoPE base 100), block 1 global (rope_theta 10000): pattern 2
        c = config("gemma", vocab, dtype)
        del c["hidden_act"]   # Gemma3TextConfig reads hidden_activation alone
        c.update({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "query_pre_attn_scalar": 12,
                  "attn_logit_softcapping": None, "final_logit_softcapping": None, "sliding_window": 8,
                  "sliding_window_pattern": 2, "rope_local_base_freq": 100.0, "rope_scaling": None,
                  "cache_implementation": "hybrid"})
        return c
    cls = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
           "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
           "qwen2_moe": "Qwen2MoeForCausalLM", "olmo2": "Olmo2ForCausalLM"}[arch]
    c = {"architectures": [cls], "model_type": arch, "vocab_size": vocab, "hidden_size": DIM,
         "intermediate_size": FFN, "num_hidden_layers": BLOCKS, "num_attention_heads": HEADS,
         "num_key_value_heads": KV, "head_dim": HD, "hidden_act": "silu",
         "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "torch_dtype": torch_dtype}
    if arch == "mistral":
        c["sliding_window"] = 8
    if arch == "olmo2":   # OLMo-2: attention_bias false (its default)
        c["attention_bias"] = False
    if arch == "qwen3":   # Qwen3: q/k norm, attention_bias false, no window
        c.update({"attention_bias": False, "use_sliding_window": False, "sliding_window": None})
    if arch == "mixtral":
        c.update({"num_local_experts": EXPERTS, "num_experts_per_tok": 2, "sliding_window": None,
                  "rope_theta": 1e6})
    if arch == "qwen3_moe":   # Qwen3's attention; every block a mixture of FFN-wide experts
        c.update({"attention_bias": False, "use_sliding_window": False, "sliding_window": None,
                  "num_experts": EXPERTS, "num_experts_per_tok": 2, "moe_intermediate_size": FFN,
                  "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []})
    if arch == "qwen2_moe":   # Qwen2's attention; experts, and a gated shared expert SHARED wide
        c.update({"use_sliding_window": False, "sliding_window": None, "num_experts": EXPERTS,
                  "num_experts_per_tok": 2, "moe_intermediate_size": FFN, "shared_expert_intermediate_size": SHARED,
                  "norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": []})
        del c["head_dim"]   # Qwen2MoeConfig has none: hidden_size / heads
    return c


def tensors(arch, vocab):
    """(name, shape) of every weight, in the order transformers lists them."""
    t = []
    if arch == "gpt2":
        t += [("transformer.wte.weight", [vocab, DIM]), ("transformer.wpe.weight", [SEQ, DIM])]
        for b in range(BLOCKS):
            h = "transformer.h.%d." % b
            t += [(h + "ln_1.weight", [DIM]), (h + "ln_1.bias", [DIM]),
                  (h + "attn.c_attn.weight", [DIM, 3 * DIM]), (h + "attn.c_attn.bias", [3 * DIM]),
                  (h + "attn.c_proj.weight", [DIM, DIM]), (h + "attn.c_proj.bias", [DIM]),
                  (h + "ln_2.weight", [DIM]), (h + "ln_2.bias", [DIM]),
                  (h + "mlp.c_fc.weight", [DIM, 4 * DIM]), (h + "mlp.c_fc.bias", [4 * DIM]),
                  (h + "mlp.c_proj.weight", [4 * DIM, DIM]), (h + "mlp.c_proj.bias", [DIM])]
        return t + [("transformer.ln_f.weight", [DIM]), ("transformer.ln_f.bias", [DIM])]
    t.append(("model.embed_tokens.weight", [vocab, DIM]))
    for b in range(BLOCKS):
        h = "model.layers.%d." % b
        if arch != "olmo2":   # OLMo-2 normalises after each sub-block only
            t.append((h + "input_layernorm.weight", [DIM]))
        t += [(h + "self_attn.q_proj.weight", [HEADS * HD, DIM]),
              (h + "self_attn.k_proj.weight", [KV * HD, DIM]),
              (h + "self_attn.v_proj.weight", [KV * HD, DIM])]
        if arch in ("qwen2", "qwen2_moe"):
            t += [(h + "self_attn.q_proj.bias", [HEADS * HD]), (h + "self_attn.k_proj.bias", [KV * HD]),
                  (h + "self_attn.v_proj.bias", [KV * HD])]
        t.append((h + "self_attn.o_proj.weight", [DIM, HEADS * HD]))
        if arch in ("qwen3", "qwen3_moe", "gemma3"):   # the gains over one head's HD values, shared by the heads
            t += [(h + "self_attn.q_norm.weight", [HD]), (h + "self_attn.k_norm.weight", [HD])]
        if arch == "olmo2":   # the gains over the whole q and k projections
            t += [(h + "self_attn.q_norm.weight", [HEADS * HD]), (h + "self_attn.k_norm.weight", [KV * HD])]
        t.append((h + "post_attention_layernorm.weight", [DIM]))
        if arch in ("gemma2", "gemma3"):
            t.append((h + "pre_feedforward_layernorm.weight", [DIM]))
        if arch == "mixtral":
            t.append((h + "block_sparse_moe.gate.weight", [EXPERTS, DIM]))
            for e in range(EXPERTS):
                x = h + "block_sparse_moe.experts.%d." % e
                t += [(x + "w1.weight", [FFN, DIM]), (x + "w3.weight", [FFN, DIM]), (x + "w2.weight", [DIM, FFN])]
        elif arch in ("qwen3_moe", "qwen2_moe"):
            t.append((h + "mlp.gate.weight", [EXPERTS, DIM]))
            for e in range(EXPERTS):
                x = h + "mlp.experts.%d." % e
                t += [(x + "gate_proj.weight", [FFN, DIM]), (x + "up_proj.weight", [FFN, DIM]),
                      (x + "down_proj.weight", [DIM, FFN])]
            if arch == "qwen2_moe":
                x = h + "mlp.shared_expert."
                t += [(x + "gate_proj.weight", [SHARED, DIM]), (x + "up_proj.weight", [SHARED, DIM]),
                      (x + "down_proj.weight", [DIM, SHARED]), (h + "mlp.shared_expert_gate.weight", [1, DIM])]
        else:
            t += [(h + "mlp.gate_proj.weight", [FFN, DIM]), (h + "mlp.up_proj.weight", [FFN, DIM]),
                  (h + "mlp.down_proj.weight", [DIM, FFN])]
        if arch in ("gemma2", "gemma3", "olmo2"):
            t.append((h + "post_feedforward_layernorm.weight", [DIM]))
    t.append(("model.norm.weight", [DIM]))
    return t if arch in ("gemma", "gemma2", "gemma3") else t + [("lm_head.weight", [vocab, DIM])]   # Gemma: tied


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def write_st(path, items):
    """items: (name, dtype, shape, bytes) -> one safetensors file."""
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, data in items:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for it in items:
            f.write(it[3])


def read_st(path):
    """{name: (dtype, shape, bytes)} of one safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in hdr.items() if k != "__metadata__"}


def read_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read_st(os.path.join(d, f)))
    return out


def make(argv):
    arch, out = argv[0], argv[1]
    dtype, shards, vocab, drop, sets, unsets = "f32", 1, 259, None, [], []
    i = 2
    while i < len(argv):
        k, v = argv[i], argv[i + 1]
        if k == "--dtype": dtype = v
        elif k == "--shards": shards = int(v)
        elif k == "--vocab": vocab = int(v)
        elif k == "--drop": drop = v
        elif k == "--set": sets.append(v)
        elif k == "--unset": unsets.append(v)
        else: sys.exit("hfdir.py: unknown option " + k)
        i += 2
    os.makedirs(out, exist_ok=True)
    cfg = config(arch, vocab, dtype)
    for s in sets:
        k, v = s.split("=", 1)
        cfg[k] = json.loads(v)
    for k in unsets:
        del cfg[k]
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    rng = random.Random(28)
    items = []
    for name, shape in tensors(arch, vocab):
        if name == drop:
            continue
        n = numel(shape)
        vals = [rng.gauss(0.0, 0.5) for _ in range(n)]
        if name.endswith("norm.weight") or ".ln_" in name:
            vals = [1.0 + 0.1 * x for x in vals]
        raw = struct.pack("<%df" % n, *vals)
        if dtype == "bf16":   # the top half of each float: any bf16 value is exact in fp32
            raw = b"".join(raw[4 * j + 2:4 * j + 4] for j in range(n))
        items.append((name, "BF16" if dtype == "bf16" else "F32", shape, raw))
    if shards == 1:
        write_st(os.path.join(out, "model.safetensors"), items)
        return 0
    per = (len(items) + shards - 1) // shards
    wmap, total = {}, 0
    for k in range(shards):
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        part = items[k * per:(k + 1) * per]
        write_st(os.path.join(out, fn), part)
        for it in part:
            wmap[it[0]] = fn
            total += len(it[3])
    json.dump({"metadata": {"total_size": total}, "weight_map": wmap},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
    return 0


def same(argv):
    a, b = read_dir(argv[0]), read_dir(argv[1])
    bad = []
    for k in sorted(set(a) | set(b)):
        if k not in a: bad.append("%s: only in %s" % (k, argv[1]))
        elif k not in b: bad.append("%s: only in %s" % (k, argv[0]))
        elif a[k][:2] != b[k][:2]: bad.append("%s: %s %s vs %s %s" % (k, a[k][0], a[k][1], b[k][0], b[k][1]))
        elif a[k][2] != b[k][2]:
            w = 2 if a[k][0] == "BF16" else 4
            first = next(j for j in range(0, len(a[k][2]), w) if a[k][2][j:j + w] != b[k][2][j:j + w])
            bad.append("%s: bytes differ from element %d on" % (k, first // w))
    if bad:
        print("✗ %s and %s differ:" % (argv[0], argv[1]))
        for x in bad[:8]:
            print("    " + x)
        return 1
    nbytes = sum(len(v[2]) for v in a.values())
    print("✓ %s == %s: %d tensors, %d bytes, bit for bit" % (os.path.basename(argv[0].rstrip("/")),
          os.path.basename(argv[1].rstrip("/")), len(a), nbytes))
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "make":
        sys.exit(make(sys.argv[2:]))
    if len(sys.argv) == 4 and sys.argv[1] == "same":
        sys.exit(same(sys.argv[2:]))
    sys.exit(__doc__)
