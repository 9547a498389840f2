#!/bin/bash
# make-plan.sh: a GPT of a given size on a one-node CPU cluster of exactly
# as many ranks as the layout needs (8 GiB each, so everything fits).
#   usage: make-plan.sh OUT.plan RANKS DIM LAYERS "PLAN BLOCK BODY"
# DIM 512, 8 layers: 25.5M parameters (the issue's model); the MLP is 4 DIM
# wide, 8 heads, vocab 256, seq 64, 2 steps of training; dtype MEM_DTYPE
# (default fp32, the CPU target; bf16 for the CUDA one).
set -eu
out=$1; np=$2; dim=$3; layers=$4; body=$5; dtype=${MEM_DTYPE:-fp32}
# a body containing `dropout;` gives the model `dropout 0.1` (its masks:
# one byte an element, planner/model.c and runtime/ops/dropout.c)
dropout=
case "$body" in *dropout\;*) dropout="dropout 0.1;"; body=${body//dropout;/} ;; esac
# a body containing `moe;` puts a mixture of experts where the MLP stands
# (issue 17: 4 experts of the MLP's width, top 2, one shared; its expert
# states over the expert-DP group, its dispatched rows and all-to-all buffers)
ffn="mlp       { hidden $((4 * dim)); act gelu }"
# (`cap;` beside it: capacity_factor 0.5, so each expert keeps half the rows
# routed to it under uniform routing — the runtime runs those only, and its
# buffers keep a place for every routed row)
cap=
case "$body" in *cap\;*) cap="capacity_factor 0.5;"; body=${body//cap;/} ;; esac
# (`sgate;` beside it, issue 29: Qwen2-MoE's shared expert, its own width
# 6 DIM and a sigmoid gate per token: the gate's fp32 sigmoid and the
# shared sum kept, its gradient and logits as scratch)
sgate=
case "$body" in *sgate\;*) sgate="shared_hidden $((6 * dim)); shared_gate true;"; body=${body//sgate;/} ;; esac
# (`ebias;` beside it, issue 29: DeepSeek-V3's aux-loss-free balancing on
# sigmoid scores: every rank's biases and step counts, E fp32 each per
# mixture, allocated as buffers for the whole run)
ebias=
case "$body" in *ebias\;*) ebias="score sigmoid; expert_bias true;"; body=${body//ebias;/} ;; esac
case "$body" in *moe\;*)
    ffn="moe       { experts 4; top_k 2; shared 1; hidden $((4 * dim)); act gelu; $cap $sgate $ebias }"
    body=${body//moe;/} ;; esac
# a body containing `wide;` trains on sequences of 512 tokens, not 64: the
# backward scratch every layer shares (score gradients b h s^2 / t, the
# widest layer's N x width) then outgrows the 4 MiB slack (CUDA --dry-run rows)
seq=64
case "$body" in *wide\;*) seq=512; body=${body//wide;/} ;; esac
# a body containing `qknorm;` gives the attention Qwen3's q/k norm
# (`qk_norm rmsnorm`: the pre-norm q and k and an fp32 rstd per head kept)
att="attention { heads 8 }"
case "$body" in *qknorm\;*) att="attention { heads 8; qk_norm rmsnorm }"; body=${body//qknorm;/} ;; esac
# a body containing `mla;` gives the attention DeepSeek-V2's multi-head
# latent attention (issue 29: 8 heads of nope 32 + rope 16, values of 32
# padded to 48 by the op, latents of 96 (q) and 64 (kv), RMSNorm; RoPE
# positions): its kept latents, padded heads and rstd, and the op's
# workspace in the backward scratch (planner/model.c mla_work, plan_widest_add)
emb="embedding { dim $dim }"
case "$body" in *mla\;*)
    att="attention { kind mla; heads 8; q_lora_rank 96; kv_lora_rank 64; qk_rope_head_dim 16; qk_nope_head_dim 32; v_head_dim 32; norm rmsnorm }"
    emb="embedding { dim $dim; position rope }"; body=${body//mla;/} ;; esac
# a body containing `qkproj;` gives it OLMo-2's q/k norm of the whole
# projection (`qk_norm rmsnorm_projection`: the pre-norm q and k and two
# fp32 rstd per token kept, its gains split over TP)
case "$body" in *qkproj\;*) att="attention { heads 8; qk_norm rmsnorm_projection }"; body=${body//qkproj;/} ;; esac
# a body containing `gemma2;` gives the attention Gemma 2's score scale and
# soft-cap, and the head a soft-cap: the runtime keeps nothing more for
# them (the capped backward recomputes the raw scores into the spent
# probabilities; the head's cap is differentiated from the capped logits),
# so the same layout without them holds exactly as much.
head="lm_head { tied false }"
case "$body" in *gemma2\;*)
    att="attention { heads 8; softcap 50; query_pre_attn_scalar 48 }"
    head="lm_head { tied false; softcap 30 }"; body=${body//gemma2;/} ;; esac
# a body containing `gemma3;` trains Gemma 3's block (issue 29): RMSNorms by
# 1 + w (norm_plus_one), sandwich norms on attention and MLP, GQA 8/4, a
# window of 16 on every block but every 3rd with rope_local_theta 100
# there, query_pre_attn_scalar, GeGLU, the sqrt(dim) embedding scale, a
# tied head; with `qknorm;` its q/k norms (by 1 + w too), so (e) holds the
# q/k norm's kept items beside sandwich norms (zb-h1's kept gains after
# the pre-norm's, before the post-norm's) against the block without them
final=layernorm; plus1=
case "$body" in *gemma3\;*) body=${body//gemma3;/}
    qk=; case "$att" in *qk_norm\ rmsnorm*) qk="; qk_norm rmsnorm" ;; esac
    att="attention { heads 8; kv_heads 4; norm rmsnorm; bias false; sliding_window 16 every 3; query_pre_attn_scalar 48; norm_position sandwich$qk }"
    ffn="mlp       { hidden $((4 * dim)); act geglu; norm rmsnorm; bias false; norm_position sandwich }"
    emb="embedding { dim $dim; position rope; scale sqrt_dim; rope_local_theta 100 }"
    final=rmsnorm; plus1="norm_eps 1e-6; norm_plus_one true;"; head="lm_head { tied true }" ;; esac
# a body containing `window;` gives every attention but every 2nd a sliding
# window of 16 of the 64 tokens (Gemma 2's pattern): planc's math attention
# masks the band inside its whole T x T buffers, so it keeps exactly what
# the same layout without the window keeps (planner/model.c, attention_work)
case "$body" in *window\;*)
    att="${att% \}}; sliding_window 16 every 2 }"; body=${body//window;/} ;; esac
# a body containing `postnorm;` or `sandwich;` gives the attention and the
# MLP (or mixture) norm_position post or sandwich (issue 29: the post-norm's
# input and statistics kept; under post no pre-norm output)
for pos in postnorm sandwich; do
    case "$body" in *$pos\;*) w=${pos/postnorm/post}; body=${body//$pos;/}
        att="${att% \}}; norm_position $w }"; ffn="${ffn% \}}; norm_position $w }" ;; esac
done
# a body with an `fp8 { ... }` block (issue 27), or `nofp8;` (the same
# layout without it): the device gets an FP8 rate (a figure for the planner
# only); the model stays fp32, the CPU target's one dtype (fp8 under
# software planc takes an fp32 model: planner/fp8.c)
fp8dev=
case "$body" in *fp8\ \{*|*nofp8\;*)
    fp8dev="flops_fp8 25 GFLOPS;"; body="${body//nofp8;/}" ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
cat > "$out" <<P
cluster cpu$np {
    nodes 1
    gpus_per_node $np
    device cpu { memory 8 GiB; flops 12.5 GFLOPS; flops_fp32 12.5 GFLOPS; hbm 2.5 GB/s; $fp8dev }
    link intra { bandwidth 2 GB/s; latency 5 us }
}
model mem$dim {
    vocab 256;  seq $seq;  dtype $dtype; $dropout $plus1
    $emb
    repeat $layers {
        $att
        $ffn
    }
    norm    { kind $final }
    $head
}
plan { $body }
train {
    steps 2; lr 1e-3; warmup 1; seed 42;
    optimizer adamw { beta1 0.9; beta2 0.95; weight_decay 0.0 }
    data "$root/examples/data/sample.txt";
}
P
