#!/usr/bin/env python3
"""hfref.py: the transformers side of `make test-hf` (issue 28, item 4).

Runs in build/venv-hf (scripts/hf-env.sh: Debian's python3-torch 1.13 and
transformers 4.49.0). Subcommands, each for one architecture's tiny model:

  config ARCH OUT.json          the tiny config.json that `planc import` reads
  init ARCH OUT_DIR             a transformers model of that config from a fixed
                                seed, saved with save_pretrained (fp32)
  data OUT.bin                  the token shard every run trains on (llm.c format)
  check-loss HF_DIR LOG.jsonl   transformers' loss of HF_DIR on the batch planc's
                                step --step (1: the first) read == that step's
                                loss in planc's --log-json LOG (relative error
                                <= 1e-4)
  check-logits HF_DIR PREFIX    planc's logits of step --step (--dump-logits
                                PREFIX) == transformers' on that batch (1e-4)
  gen-data HF_DIR OUT.bin       a prompt and transformers' greedy continuation,
                                SEQ + 1 tokens: every sequence planc reads
  check-generate HF_DIR PREFIX  planc's argmax after each prefix of it (its
                                logits, --dump-logits PREFIX) is transformers' token
  same DIR_A DIR_B              two Hugging Face directories hold the same tensors
  check-reference HF_DIR BYTES  transformers' loss of HF_DIR on the batch
                                tests/hf/reference.py draws from the file BYTES
                                (its bytes are the tokens) == reference.py's
                                (relative 1e-5): the plain-Python forward that
                                test-hf-roundtrip holds planc to is transformers'

Loading is strict: any missing, unexpected or mismatched key, or any weight
transformers initialises anew, is an error (its loading info and its log
are both read), so an export that transformers only half understands fails.
"""
import argparse
import io
import json
import logging
import os
import struct
import sys

import torch
import transformers
import transformers.generation.utils
from transformers import AutoConfig, AutoModelForCausalLM

# Debian's torch 1.13 under Python 3.11: importing torch.distributed.fsdp
# fails (a dataclass with a mutable default), and generate() imports it only
# to ask whether the model is FSDP-wrapped. One process here: it is not.
transformers.generation.utils.is_fsdp_managed_module = lambda module: False
# Debian's torch 1.13 has no torch._dynamo. Gemma 2's HybridCache (every
# forward with use_cache, and generate()) calls torch._dynamo.mark_static_address
# only to tell torch.compile that a cache tensor keeps its address, which
# eager execution never asks: a no-op here.
if not hasattr(torch, "_dynamo"):
    import types
    torch._dynamo = types.SimpleNamespace(mark_static_address=lambda tensor: None)

VOCAB = 251        # odd: with tp 2 planc pads it to 252 rows, the export drops the pad
SEQ = 32           # tokens per sequence, the plans' seq (max_position_embeddings)
DATA_TOKENS = 4096  # tokens in the shard (uniform over the vocabulary, fixed seed)
DATA_SEED = 1234
REL_TOL = 1e-4     # issue 28: fp32 relative error

# The eight architectures, tiny: GQA (4 heads, 2 KV heads: tp 2 splits both),
# widths even for tp 2, Mistral's window shorter than seq, Qwen2's QKV bias
# (its config has no switch: always on), tied embeddings where the family
# ties by default (Gemma, GPT-2), Mixtral's 4 experts for ep 2.
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=SEQ, rms_norm_eps=1e-5, torch_dtype="float32",
              attention_dropout=0.0)
CONFIGS = {
    "llama": dict(COMMON, model_type="llama", architectures=["LlamaForCausalLM"],
                  rope_theta=500000.0, tie_word_embeddings=False, head_dim=16),
    "mistral": dict(COMMON, model_type="mistral", architectures=["MistralForCausalLM"],
                    sliding_window=8, tie_word_embeddings=False, head_dim=16),
    "qwen2": dict(COMMON, model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                  rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False,
                  sliding_window=None, max_window_layers=2),
    "gemma": dict(COMMON, model_type="gemma", architectures=["GemmaForCausalLM"],
                  head_dim=16, hidden_act="gelu_pytorch_tanh",
                  hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True),
    # Gemma 2: every other layer slides (layer 0 over 8 tokens of 32), the
    # scores scaled by 24^-1/2, not head_dim's 16; caps small enough to bite
    # on the tiny model's scores (~0.1) and logits (~1): Gemma2Config's 50
    # and 30 would leave tanh linear here and test nothing
    "gemma2": dict(COMMON, model_type="gemma2", architectures=["Gemma2ForCausalLM"],
                   head_dim=16, hidden_act="gelu_pytorch_tanh",
                   hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                   rms_norm_eps=1e-6, sliding_window=8, query_pre_attn_scalar=24,
                   attn_logit_softcapping=0.05, final_logit_softcapping=0.5),
    # OLMo-2: norms after each sub-block only, q_norm/k_norm over the whole
    # q (64) and k (32) projections
    "olmo2": dict(COMMON, model_type="olmo2", architectures=["Olmo2ForCausalLM"],
                  rope_theta=500000.0, tie_word_embeddings=False, attention_bias=False),
    # planc's logged loss adds its Switch loss (per sequence, then the mean
    # over layers), not transformers' (over the whole batch): planc_aux_loss
    "mixtral": dict(COMMON, model_type="mixtral", architectures=["MixtralForCausalLM"],
                    num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.02,
                    router_jitter_noise=0.0, sliding_window=None, tie_word_embeddings=False),
    "gpt2": dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], vocab_size=VOCAB,
                 n_embd=64, n_layer=2, n_head=4, n_positions=SEQ, n_inner=None,
                 activation_function="gelu_new", layer_norm_epsilon=1e-5,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                 tie_word_embeddings=True, torch_dtype="float32"),
}


def fail(msg):
    print(f"✗ hfref: {msg}", file=sys.stderr)
    sys.exit(1)


def make_config(arch):
    kw = dict(CONFIGS[arch])
    model_type = kw.pop("model_type")
    return AutoConfig.for_model(model_type, **kw)


# ---- planc's data: llm.c shards and the batch of a step -------------------
# runtime/ops/data.c: sequence s of step k starts at a SplitMix64 hash of
# (seed, k, s) modulo (tokens - T); its targets are the next tokens.

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def start_of(n_tokens, T, seed, step, s):
    h = mix64((seed + 0x9E3779B97F4A7C15) & M64)
    h = mix64(h ^ ((step * 0xD1B54A32D192ED03) & M64))
    h = mix64(h ^ ((s * 0xABA0D9B1F3E1C2A7 + 1) & M64))
    return h % (n_tokens - T)


def read_shard(path):
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        if head[0] != 20240520 or head[1] != 1:
            fail(f"{path}: not an llm.c uint16 shard (magic {head[0]}, version {head[1]})")
        n = head[2]
        toks = struct.unpack(f"<{n}H", f.read(2 * n))
    return list(toks)


def write_shard(path, tokens):
    head = [0] * 256
    head[0], head[1], head[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *head))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def planc_batch(tokens, seed, step, n_seq, T):
    """Inputs and targets (n_seq x T) of step `step` (0-based) as planc reads them."""
    inp, tgt = [], []
    for s in range(n_seq):
        at = start_of(len(tokens), T, seed, step, s)
        inp.append(tokens[at:at + T])
        tgt.append(tokens[at + 1:at + T + 1])
    return torch.tensor(inp), torch.tensor(tgt)


# ---- strict loading -------------------------------------------------------

def load_strict(path):
    """AutoModelForCausalLM.from_pretrained, refusing any key it could not place."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    tlog = transformers.utils.logging.get_logger("transformers")
    tlog.addHandler(handler)
    transformers.utils.logging.set_verbosity_warning()
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            path, torch_dtype=torch.float32, output_loading_info=True, **attn_impl(path))
    finally:
        tlog.removeHandler(handler)
    log = buf.getvalue()
    bad = {k: v for k, v in info.items() if v}
    if bad:
        fail(f"{path}: transformers' loading info is not clean: {bad}")
    # transformers' own words for a weight it could not place (modeling_utils:
    # "Some weights of ... were not used", "... newly initialized", and the
    # key lists); other warnings are shown, not failed on
    for phrase in ("were not used", "newly initialized", "not initialized from",
                   "missing_keys", "unexpected_keys", "mismatched", "size mismatch"):
        if phrase in log:
            fail(f"{path}: transformers warned while loading ({phrase!r}):\n{log}")
    if log.strip():
        print(f"  note: transformers said while loading {path}: {log.strip()}")
    model.eval()
    return model


def attn_impl(path):
    """Gemma 2's attention soft-cap is applied by transformers' eager
    attention alone (4.49's SDPA path takes no softcap): load it eager."""
    with open(os.path.join(path, "config.json")) as f:
        gemma2 = json.load(f).get("model_type") == "gemma2"
    return {"attn_implementation": "eager"} if gemma2 else {}


def planc_aux_loss(router_logits, coef, E, k, B, T):
    """The load-balancing term of planc's logged loss (runtime/ops/moe.c,
    prt_moe_aux_loss): per sequence coef * E * sum_e f_e P_e, f_e the share
    of its T*k routing choices that chose expert e, P_e the mean router
    probability; the mean over sequences, then over the MoE layers."""
    per_layer = []
    for rl in router_logits:
        rl = rl.double().reshape(B, T, E)
        f = torch.nn.functional.one_hot(rl.topk(k, dim=-1).indices, E).sum((1, 2)) / (T * k)
        P = rl.softmax(-1).mean(1)
        per_layer.append((coef * E * (f * P).sum(-1)).mean())
    return torch.stack(per_layer).mean().item()


def planc_loss(model, inp, tgt):
    """Planc's logged loss of the batch: the mean cross-entropy, plus the
    Switch term where the model has a router and a coefficient."""
    cfg = model.config
    coef = getattr(cfg, "router_aux_loss_coef", 0.0) or 0.0
    with torch.no_grad():
        out = model(input_ids=inp, output_router_logits=True) if coef else model(input_ids=inp)
    logits = out.logits.double()
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1)).item()
    if coef:
        loss += planc_aux_loss(out.router_logits, coef, cfg.num_local_experts,
                               cfg.num_experts_per_tok, *inp.shape)
    return loss


def logged_loss(log_path, step):
    """The loss planc logged for its step `step` (1-based): the forward of
    the weights after step - 1 steps on the batch of 0-based step - 1."""
    with open(log_path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("step") == step:
                return float(rec["loss"])
    fail(f"{log_path}: no step {step} in planc's --log-json")


# ---- subcommands ----------------------------------------------------------

def cmd_config(a):
    make_config(a.arch).to_json_file(a.out)


def cmd_init(a):
    torch.manual_seed(a.seed)
    kw = {"attn_implementation": "eager"} if a.arch == "gemma2" else {}
    model = AutoModelForCausalLM.from_config(make_config(a.arch), torch_dtype=torch.float32, **kw)
    model.save_pretrained(a.out, safe_serialization=True)


def cmd_data(a):
    g = torch.Generator().manual_seed(DATA_SEED)
    write_shard(a.out, torch.randint(0, VOCAB, (DATA_TOKENS,), generator=g).tolist())


def cmd_check_loss(a):
    model = load_strict(a.hf_dir)
    inp, tgt = planc_batch(read_shard(a.data), a.seed, a.step - 1, a.batch, a.seq)
    ref = planc_loss(model, inp, tgt)
    got = logged_loss(a.log, a.step)
    rel = abs(got - ref) / abs(ref)
    line = f"{a.what}: planc step-{a.step} loss {got:.7f}, transformers {ref:.7f}, relative error {rel:.2e}"
    if not rel <= REL_TOL:
        fail(f"{line} > {REL_TOL:g}")
    print(f"✓ {line}")


# ---- planc's logits (--dump-logits PATH: PATH.rank-RRRRR per rank) ------------

LOGITS_MAGIC = 0x31544F474C545250   # "PRTLGOT1" little-endian, codegen/program_template.c


def read_planc_logits(prefix, n_seq, T, V):
    """The (n_seq, T, V) logits of planc's first step, joined from every
    rank's file: each record is one micro-batch's rows of one vocabulary
    slice. Every (sequence, column < V) must be written, and written alike
    wherever two ranks hold the same piece (DP replicas do not: they hold
    other sequences)."""
    import glob
    files = sorted(glob.glob(glob.escape(prefix) + ".rank-*"))
    if not files:
        fail(f"no {prefix}.rank-* files: did the program get --dump-logits {prefix}?")
    out = torch.full((n_seq, T, V), float("nan"), dtype=torch.float64)
    for path in files:
        with open(path, "rb") as f:
            buf = f.read()
        at = 0
        while at < len(buf):
            magic, s0, B, Tr, v0, VL, Vr, width = struct.unpack_from("<8Q", buf, at)
            at += 64
            if magic != LOGITS_MAGIC or Tr != T or Vr != V or width not in (2, 4):
                fail(f"{path}: not a --dump-logits record of T {T}, V {V} at byte {at - 64}")
            n = B * Tr * VL
            if width == 4:
                vals = torch.frombuffer(bytearray(buf[at:at + 4 * n]), dtype=torch.float32)
            else:   # bf16: the high half of an fp32
                raw = torch.frombuffer(bytearray(buf[at:at + 2 * n]), dtype=torch.int16).to(torch.int32)
                vals = (raw << 16).view(torch.float32)
            at += width * n
            vals = vals.double().reshape(B, Tr, VL)
            cols = min(VL, max(0, V - v0))   # columns from V on: padding
            piece = vals[:, :, :cols]
            have = out[s0:s0 + B, :, v0:v0 + cols]
            both = ~have.isnan()
            if both.any() and not torch.equal(have[both], piece[both]):
                fail(f"{path}: sequences {s0}..{s0 + B}, columns {v0}..{v0 + cols} differ from another rank's")
            out[s0:s0 + B, :, v0:v0 + cols] = piece
    if out.isnan().any():
        fail(f"{prefix}.rank-*: {int(out.isnan().sum())} of {out.numel()} logits were not written")
    return out


def hf_logits(model, inp):
    with torch.no_grad():
        return model(input_ids=inp).logits.double()


def cmd_check_logits(a):
    model = load_strict(a.hf_dir)
    inp, _ = planc_batch(read_shard(a.data), a.seed, a.step - 1, a.batch, a.seq)
    ref = hf_logits(model, inp)
    got = read_planc_logits(a.logits, a.batch, a.seq, model.config.vocab_size)
    err = ((got - ref).abs().max() / ref.abs().max()).item()
    l2 = ((got - ref).norm() / ref.norm()).item()
    # the greedy choice at every position, not only along one generation
    same = (got.argmax(-1) == ref.argmax(-1))
    line = (f"{a.what}: planc's {got.numel()} logits of step {a.step} against transformers': "
            f"max |diff| / max |logit| {err:.2e}, relative L2 {l2:.2e}; "
            f"argmax agrees at {int(same.sum())} of {same.numel()} positions")
    if not (err <= REL_TOL and l2 <= REL_TOL and bool(same.all())):
        fail(f"{line} (tolerance {REL_TOL:g}, every argmax)")
    print(f"✓ {line}")


GEN_PROMPT, GEN_NEW = 8, 16


def greedy(model, prompt, n):
    """n greedy tokens after prompt, by generate() (its KV cache); the same
    by an argmax loop of full forwards, or fail."""
    # Gemma 2: transformers 4.49's HybridCache under eager attention (which its
    # soft-cap needs) gives a sliding layer one key more than its mask once the
    # sequence passes the window (a RuntimeError in eager_attention_forward), so
    # its generate() runs without the cache: a full forward for each token
    kw = {"use_cache": False} if model.config.model_type == "gemma2" else {}
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=n, do_sample=False, min_new_tokens=n,
                             pad_token_id=0, eos_token_id=None, **kw)
        seq = prompt
        for _ in range(n):   # no cache: each step a full forward over the whole prefix
            nxt = model(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    a_toks, b_toks = out[0, prompt.shape[1]:].tolist(), seq[0, prompt.shape[1]:].tolist()
    if a_toks != b_toks:
        fail(f"greedy generation differs: generate() {a_toks}, full forwards {b_toks}")
    return a_toks


def cmd_gen_data(a):
    """A shard of exactly SEQ + 1 tokens, the prompt and transformers' greedy
    continuation to SEQ tokens, then token 0 (only ever a target): planc
    then reads it as every sequence of its batch."""
    model = load_strict(a.hf_dir)
    g = torch.Generator().manual_seed(DATA_SEED + 1)
    prompt = torch.randint(0, model.config.vocab_size, (1, GEN_PROMPT), generator=g)
    toks = prompt[0].tolist() + greedy(model, prompt, a.seq - GEN_PROMPT) + [0]
    write_shard(a.out, toks)
    print(f"  {a.what}: transformers' greedy continuation (generate() = full forwards): "
          f"{toks[GEN_PROMPT:GEN_PROMPT + GEN_NEW]}")


def cmd_check_generate(a):
    """planc's argmax after each prefix of the generated sequence (its
    logits of that sequence, teacher-forced) is the token transformers
    generated next: greedy generation by planc would give the same tokens."""
    toks = read_shard(a.data)
    V = json.load(open(os.path.join(a.hf_dir, "config.json")))["vocab_size"]
    got = read_planc_logits(a.logits, a.batch, a.seq, V)[0]
    mine = got[GEN_PROMPT - 1:GEN_PROMPT - 1 + GEN_NEW].argmax(-1).tolist()
    want = toks[GEN_PROMPT:GEN_PROMPT + GEN_NEW]
    if mine != want:
        fail(f"{a.what}: planc's greedy tokens {mine}, transformers' {want}")
    print(f"✓ {a.what}: greedy {GEN_NEW} tokens agree, planc and transformers: {mine}")


def read_dir(path):
    """Every tensor of a Hugging Face directory, shards followed."""
    from safetensors.torch import load_file
    idx = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        out.update(load_file(os.path.join(path, name)))
    return out


def cmd_same(a):
    x, y = read_dir(a.dir_a), read_dir(a.dir_b)
    if set(x) != set(y):
        fail(f"{a.what}: tensor names differ: only in {a.dir_a}: {sorted(set(x) - set(y))}, "
             f"only in {a.dir_b}: {sorted(set(y) - set(x))}")
    diff = [k for k in sorted(x) if x[k].dtype != y[k].dtype or x[k].shape != y[k].shape
            or not torch.equal(x[k], y[k])]
    if diff:
        k = diff[0]
        fail(f"{a.what}: {len(diff)} of {len(x)} tensors of {a.dir_a} differ from {a.dir_b}'s, first {k}: "
             f"{x[k].dtype} {tuple(x[k].shape)} vs {y[k].dtype} {tuple(y[k].shape)}")
    print(f"✓ {a.what}: {len(x)} tensors equal, bit for bit, to {os.path.basename(a.dir_b)}'s")


def cmd_check_reference(a):
    import subprocess
    model = load_strict(a.hf_dir)
    text = open(a.bytes, "rb").read()
    inp, tgt = [], []
    for s in range(a.batch):   # reference.py's batch: step 0 of planc's draw over the bytes
        at = start_of(len(text), a.seq, a.seed, 0, s)
        inp.append(list(text[at:at + a.seq]))
        tgt.append(list(text[at + 1:at + a.seq + 1]))
    ref = planc_loss(model, torch.tensor(inp), torch.tensor(tgt))
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, os.path.join(here, "reference.py"), a.hf_dir, a.bytes, str(a.seed),
                          str(a.batch), str(a.seq)], capture_output=True, text=True)
    if out.returncode:
        fail(f"{a.what}: reference.py failed: {out.stderr.strip()}")
    got = float(out.stdout)
    rel = abs(got - ref) / abs(ref)
    line = f"{a.what}: reference.py {got:.9g}, transformers {ref:.9g}, relative error {rel:.2e}"
    if not rel <= 1e-5:
        fail(f"{line} > 1e-05")
    print(f"✓ {line}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("config"); s.add_argument("arch", choices=CONFIGS); s.add_argument("out")
    s.set_defaults(fn=cmd_config)
    s = sub.add_parser("init"); s.add_argument("arch", choices=CONFIGS); s.add_argument("out")
    s.add_argument("--seed", type=int, default=7); s.set_defaults(fn=cmd_init)
    s = sub.add_parser("data"); s.add_argument("out"); s.set_defaults(fn=cmd_data)
    s = sub.add_parser("check-loss"); s.add_argument("hf_dir"); s.add_argument("log")
    s.add_argument("--data", required=True); s.add_argument("--seed", type=int, required=True)
    s.add_argument("--batch", type=int, required=True); s.add_argument("--seq", type=int, default=SEQ)
    s.add_argument("--step", type=int, default=1, help="planc's logged step (1-based) to compare")
    s.add_argument("--what", default="loss"); s.set_defaults(fn=cmd_check_loss)
    s = sub.add_parser("check-logits"); s.add_argument("hf_dir"); s.add_argument("logits")
    s.add_argument("--data", required=True); s.add_argument("--seed", type=int, required=True)
    s.add_argument("--batch", type=int, required=True); s.add_argument("--seq", type=int, default=SEQ)
    s.add_argument("--step", type=int, default=1, help="the step (1-based) the logits are of")
    s.add_argument("--what", default="logits"); s.set_defaults(fn=cmd_check_logits)
    s = sub.add_parser("gen-data"); s.add_argument("hf_dir"); s.add_argument("out")
    s.add_argument("--seq", type=int, default=SEQ); s.add_argument("--what", default="generate")
    s.set_defaults(fn=cmd_gen_data)
    s = sub.add_parser("check-generate"); s.add_argument("hf_dir"); s.add_argument("logits")
    s.add_argument("--data", required=True); s.add_argument("--batch", type=int, required=True)
    s.add_argument("--seq", type=int, default=SEQ); s.add_argument("--what", default="generate")
    s.set_defaults(fn=cmd_check_generate)
    s = sub.add_parser("check-reference"); s.add_argument("hf_dir"); s.add_argument("bytes")
    s.add_argument("--seed", type=int, default=7); s.add_argument("--batch", type=int, default=4)
    s.add_argument("--seq", type=int, default=16); s.add_argument("--what", default="reference.py")
    s.set_defaults(fn=cmd_check_reference)
    s = sub.add_parser("same"); s.add_argument("dir_a"); s.add_argument("dir_b")
    s.add_argument("--what", default="same"); s.set_defaults(fn=cmd_same)
    a = p.parse_args()
    torch.set_num_threads(1)
    a.fn(a)


if __name__ == "__main__":
    main()
