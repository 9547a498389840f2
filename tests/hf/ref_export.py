#!/usr/bin/env python3
"""ref_export.py: an independent planc -> Hugging Face mapping, in Python.

test-hf's second opinion on planc's own exporter (planrt-ckpt export-hf,
written in C): it maps a consolidated planc model (planrt-ckpt consolidate
... --skip opt) of the six architectures to transformers' names and layouts
from planc's documented conventions alone (GPT-2's extra rule at
export_gpt2):

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
from transformers import AutoConfig


def rope_rows(D):
    """transformers' row j of a head is planc's row perm[j]."""
    return [2 * j for j in range(D // 2)] + [2 * j + 1 for j in range(D // 2)]


def unpair_heads(w, heads, D):
    perm = torch.tensor(rope_rows(D))
    w = w.reshape(heads, D, *w.shape[1:])
    return w[:, perm].reshape(heads * D, *w.shape[2:])


def attention(out, p, a, hf, H, Hkv, D):
    """planc's fused QKV (and bias) as q/k/v_proj, RoPE rows re-paired."""
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


def export_llama(p, cfg):
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    F = cfg["intermediate_size"]
    out = {"model.embed_tokens.weight": p["wte.weight"], "model.norm.weight": p["norm.weight"]}
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = p["lm_head.weight"]
    for b in range(cfg["num_hidden_layers"]):
        a, m, hf = f"layers.{2 * b + 1}", f"layers.{2 * b + 2}", f"model.layers.{b}"
        attention(out, p, a, hf, H, Hkv, D)
        gate, up = p[f"{m}.mlp.up.weight"].split([F, F])
        out[f"{hf}.mlp.gate_proj.weight"] = gate
        out[f"{hf}.mlp.up_proj.weight"] = up
        out[f"{hf}.mlp.down_proj.weight"] = p[f"{m}.mlp.down.weight"]
        out[f"{hf}.post_attention_layernorm.weight"] = p[f"{m}.mlp_norm.weight"]
    return out


def export_gemma(p, cfg):
    """Gemma's RMSNorm scales by (1 + w) and its embedding output by
    sqrt(width). planc's Gemma plans say so (`norm_plus_one true`,
    `embedding { scale sqrt_dim }`, what `planc import` writes for a Gemma
    config), so planc's weights are transformers' as they are: the Llama
    mapping, tied."""
    return export_llama(p, cfg)


def export_gemma2(p, cfg):
    """Gemma 2 (`norm_position sandwich`, what `planc import` writes for a
    gemma2 config): Gemma's mapping, and the four norms of a block are
    planc's attention pre- and post-norm and the MLP's: input_layernorm,
    post_attention_layernorm, pre_feedforward_layernorm,
    post_feedforward_layernorm. The soft-caps, query_pre_attn_scalar and
    window are config.json's alone (no weights)."""
    out = export_llama(p, cfg)
    for b in range(cfg["num_hidden_layers"]):
        a, m, hf = f"layers.{2 * b + 1}", f"layers.{2 * b + 2}", f"model.layers.{b}"
        out[f"{hf}.post_attention_layernorm.weight"] = p[f"{a}.attn_post_norm.weight"]
        out[f"{hf}.pre_feedforward_layernorm.weight"] = p[f"{m}.mlp_norm.weight"]
        out[f"{hf}.post_feedforward_layernorm.weight"] = p[f"{m}.mlp_post_norm.weight"]
    return out


def export_mixtral(p, cfg):
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    out = {"model.embed_tokens.weight": p["wte.weight"], "model.norm.weight": p["norm.weight"],
           "lm_head.weight": p["lm_head.weight"]}
    for b in range(cfg["num_hidden_layers"]):
        a, m, hf = f"layers.{2 * b + 1}", f"layers.{2 * b + 2}", f"model.layers.{b}"
        attention(out, p, a, hf, H, Hkv, D)
        for k, v in p.items():   # planc names the experts as Mixtral does (w1 gate, w3 up, w2 down)
            if k.startswith(f"{m}.block_sparse_moe."):
                out[hf + k[len(m):]] = v
        out[f"{hf}.post_attention_layernorm.weight"] = p[f"{m}.moe_norm.weight"]
    return out


def export_gpt2(p, cfg):
    """GPT-2's Conv1D holds (in, out): planc's (out, in) transposed."""
    out = {"transformer.wte.weight": p["wte.weight"], "transformer.wpe.weight": p["wpe.weight"],
           "transformer.ln_f.weight": p["norm.weight"], "transformer.ln_f.bias": p["norm.bias"]}
    for b in range(cfg["n_layer"]):
        a, m, hf = f"layers.{2 * b + 1}", f"layers.{2 * b + 2}", f"transformer.h.{b}"
        pairs = [("attn.qkv", "attn.c_attn"), ("attn.out", "attn.c_proj"),
                 ("mlp.up", "mlp.c_fc"), ("mlp.down", "mlp.c_proj")]
        for src, dst in pairs:
            lay = a if src.startswith("attn") else m
            out[f"{hf}.{dst}.weight"] = p[f"{lay}.{src}.weight"].t()
            out[f"{hf}.{dst}.bias"] = p[f"{lay}.{src}.bias"]
        for src, lay, dst in (("attn_norm", a, "ln_1"), ("mlp_norm", m, "ln_2")):
            out[f"{hf}.{dst}.weight"] = p[f"{lay}.{src}.weight"]
            out[f"{hf}.{dst}.bias"] = p[f"{lay}.{src}.bias"]
    return out


EXPORTERS = {"llama": export_llama, "mistral": export_llama, "qwen2": export_llama,
             "gemma": export_gemma, "gemma2": export_gemma2, "mixtral": export_mixtral, "gpt2": export_gpt2}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--has":
        with open(sys.argv[2]) as f:
            sys.exit(0 if json.load(f)["model_type"] in EXPORTERS else 1)
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, cfg_path, out_dir = sys.argv[1:]
    # through transformers, so keys config.json leaves out at their
    # defaults (Gemma's tie_word_embeddings) have their values
    config = AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(cfg_path)))
    cfg = config.to_dict()
    if cfg["model_type"] not in EXPORTERS:
        sys.exit(f"ref_export.py: no reference mapping for model_type {cfg['model_type']!r}")
    p = load_file(src)
    tensors = EXPORTERS[cfg["model_type"]](p, cfg)
    os.makedirs(out_dir, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out_dir)


if __name__ == "__main__":
    main()
