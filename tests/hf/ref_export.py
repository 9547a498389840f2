#!/usr/bin/env python3
"""ref_export.py: an independent planc -> Hugging Face mapping, in Python.

test-hf's second opinion on planc's own exporter (planrt-ckpt export-hf,
written in C): it maps a consolidated planc model (planrt-ckpt consolidate
... --skip opt) of the Llama family (llama, mistral, qwen2) to transformers'
names and layouts from planc's documented conventions alone:

  layers.<2b+1>.attn.qkv   rows [Q heads; K heads; V heads] (H*D, Hkv*D, Hkv*D)
  layers.<2b+1>.attn.out   the output projection
  layers.<2b+2>.mlp.up     rows [gate; up], each F wide (prt_swiglu_fwd)
  RoPE                     planc rotates pairs (2i, 2i+1) of a head
                           (runtime/ops/layers.c, rope_apply); transformers
                           rotates (i, i + D/2): q and k rows are permuted

    ref_export.py CONSOLIDATED.safetensors CONFIG.json OUT_DIR
    ref_export.py --has CONFIG.json     exit 0 if the family is mapped here

so test-hf can load planc's weights in transformers even where the C
exporter is missing, and can compare the two exports tensor by tensor.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file


def rope_rows(D):
    """transformers' row j of a head is planc's row perm[j]."""
    return [2 * j for j in range(D // 2)] + [2 * j + 1 for j in range(D // 2)]


def unpair_heads(w, heads, D):
    perm = torch.tensor(rope_rows(D))
    w = w.reshape(heads, D, *w.shape[1:])
    return w[:, perm].reshape(heads * D, *w.shape[2:])


def export_llama(p, cfg):
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    F = cfg["intermediate_size"]
    out = {"model.embed_tokens.weight": p["wte.weight"], "model.norm.weight": p["norm.weight"]}
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = p["lm_head.weight"]
    for b in range(cfg["num_hidden_layers"]):
        a, m, hf = f"layers.{2 * b + 1}", f"layers.{2 * b + 2}", f"model.layers.{b}"
        for kind in ("weight", "bias"):
            qkv = p.get(f"{a}.attn.qkv.{kind}")
            if qkv is None:
                continue
            q, k, v = qkv.split([H * D, Hkv * D, Hkv * D])
            out[f"{hf}.self_attn.q_proj.{kind}"] = unpair_heads(q, H, D)
            out[f"{hf}.self_attn.k_proj.{kind}"] = unpair_heads(k, Hkv, D)
            out[f"{hf}.self_attn.v_proj.{kind}"] = v
        out[f"{hf}.self_attn.o_proj.weight"] = p[f"{a}.attn.out.weight"]
        out[f"{hf}.input_layernorm.weight"] = p[f"{a}.attn_norm.weight"]
        gate, up = p[f"{m}.mlp.up.weight"].split([F, F])
        out[f"{hf}.mlp.gate_proj.weight"] = gate
        out[f"{hf}.mlp.up_proj.weight"] = up
        out[f"{hf}.mlp.down_proj.weight"] = p[f"{m}.mlp.down.weight"]
        out[f"{hf}.post_attention_layernorm.weight"] = p[f"{m}.mlp_norm.weight"]
    return out


EXPORTERS = {"llama": export_llama, "mistral": export_llama, "qwen2": export_llama}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--has":
        with open(sys.argv[2]) as f:
            sys.exit(0 if json.load(f)["model_type"] in EXPORTERS else 1)
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, cfg_path, out_dir = sys.argv[1:]
    with open(cfg_path) as f:
        cfg = json.load(f)
    if cfg["model_type"] not in EXPORTERS:
        sys.exit(f"ref_export.py: no reference mapping for model_type {cfg['model_type']!r}")
    p = load_file(src)
    tensors = EXPORTERS[cfg["model_type"]](p, cfg)
    os.makedirs(out_dir, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
