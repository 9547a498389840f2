#!/bin/bash
# run.sh: issue 29's end-to-end gradient check of the generated program
# (tests/fd/program_fd.py says how): for each model below, a single-rank
# CPU program is built and its gradients of the norms' gains (pre and post),
# of a linear after a post-norm and of the embedding (and every MLA tensor
# of fd-mla and fd-mla-yarnms) are held to central finite differences of its
# own logged loss.
#   usage: run.sh PLANC OUTDIR [NAME...]   (MPIRUN from the environment)
set -u
planc=$1; dir=$2; shift 2
only=" $* "
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$dir"
fails=0; t0=$(date +%s)

# plan NAME "LAYERS" NORM EXTRA: a 2-block model of dim 32 on 16 tokens, one
# step of AdamW with no clipping and no decay (program_fd.py's conditions)
plan() {
    cat > "$dir/$1.plan" <<P
cluster one {
    nodes 1
    gpus_per_node 1
    device cpu { memory 8 GiB; flops 12.5 GFLOPS; flops_fp32 12.5 GFLOPS; hbm 2.5 GB/s }
    link intra { bandwidth 2 GB/s; latency 5 us }
}
model $1 {
    vocab 256;  seq 16;  dtype fp32; $4
    embedding { dim 32; $5 }
    repeat 2 {
        $2
    }
    norm    { kind $3 }
    lm_head { tied false }
}
plan { dp 1; tp 1; pp 1; zero 0; micro_batch 4; global_batch 4; schedule 1f1b; recompute none; }
train {
    steps 1; lr 1.0; warmup 1; seed 7; grad_clip 0;
    optimizer adamw { beta1 0.9; beta2 0.95; eps 0.1; weight_decay 0.0 }
    data "$root/examples/data/sample.txt";
}
P
}

# OLMo-2's post-norm on attention, Gemma 2's sandwich on the MLP (RMSNorm, RoPE, SwiGLU)
plan fd-post-rms "attention { heads 2; kv_heads 1; norm rmsnorm; bias false; norm_position post }
        mlp       { hidden 64; act swiglu; norm rmsnorm; bias false; norm_position sandwich }" rmsnorm "" "position rope"
# sandwich LayerNorms with biases (GPT-2's layers, learned positions, GELU)
plan fd-sandwich-ln "attention { heads 2; norm_position sandwich }
        mlp       { hidden 64; act gelu; norm_position sandwich }" layernorm "" ""
# ... with dropout 0.1 after each post-norm (the masks are keyed by step and
# coordinates: the resumed runs drop the same elements)
plan fd-sandwich-ln-drop "attention { heads 2; norm_position sandwich }
        mlp       { hidden 64; act gelu; norm_position post }" layernorm "dropout 0.1;" ""
# Gemma 2's sandwich with Gemma's x*(1+w) RMSNorm (gains start at 0)
plan fd-sandwich-gemma "attention { heads 2; kv_heads 1; norm rmsnorm; bias false; norm_position sandwich }
        mlp       { hidden 64; act geglu; norm rmsnorm; bias false; norm_position sandwich }" rmsnorm \
    "norm_plus_one true;" "position rope; scale sqrt_dim"

# DeepSeek's multi-head latent attention (kind mla, a query latent, biases,
# v 8 padded to 12 by the op): every MLA tensor of the program's wiring
plan fd-mla "attention { kind mla; heads 2; q_lora_rank 16; kv_lora_rank 12; qk_rope_head_dim 4; qk_nope_head_dim 8; v_head_dim 8; norm rmsnorm; bias true }
        mlp       { hidden 64; act swiglu; norm rmsnorm; bias false }" rmsnorm "" "position rope"
# ... under DeepSeek's YaRN with its mscale pair (factor 4 on an 8-token
# original context: cos and sin times m(4, 0.8) / m(4, 0.5), the softmax
# scale times m(4, 0.5)^2, m(f, x) = 0.1 x ln f + 1)
plan fd-mla-yarnms "attention { kind mla; heads 2; q_lora_rank 16; kv_lora_rank 12; qk_rope_head_dim 4; qk_nope_head_dim 8; v_head_dim 8; norm rmsnorm; bias true }
        mlp       { hidden 64; act swiglu; norm rmsnorm; bias false }" rmsnorm "" \
    "position rope; rope_scaling { type yarn; factor 4; original_max_position 8; mscale 0.8; mscale_all_dim 0.5 }"

# OLMo-2's block: post-norms and the RMSNorm of the whole q and k projections
plan fd-olmo2 "attention { heads 2; kv_heads 1; norm rmsnorm; bias false; norm_position post; qk_norm rmsnorm_projection }
        mlp       { hidden 64; act swiglu; norm rmsnorm; bias false; norm_position post }" rmsnorm "" "position rope"
# Gemma 3's rotation: block 0 local (a window of 8, rope_local_theta 100,
# unscaled), block 1 global (rope_theta 10000 scaled linearly by 4)
plan fd-rope-local "attention { heads 2; kv_heads 1; norm rmsnorm; bias false; sliding_window 8 every 2 }
        mlp       { hidden 64; act swiglu; norm rmsnorm; bias false }" rmsnorm "" \
    "position rope; rope_local_theta 100; rope_scaling { type linear; factor 4 }"

# Gemma 3's block: q/k norms by 1 + w (their gains start at 0), sandwich
# norms by 1 + w, block 0 local (a window of 8 at rope_local_theta 100),
# block 1 global (rope_theta 10000 scaled by 4), scores by
# 1/sqrt(query_pre_attn_scalar 12), GeGLU, the sqrt(dim) embedding scale
plan fd-gemma3 "attention { heads 2; kv_heads 1; norm rmsnorm; bias false; sliding_window 8 every 2; qk_norm rmsnorm; query_pre_attn_scalar 12; norm_position sandwich }
        mlp       { hidden 64; act geglu; norm rmsnorm; bias false; norm_position sandwich }" rmsnorm \
    "norm_eps 1e-6; norm_plus_one true;" "position rope; scale sqrt_dim; rope_local_theta 100; rope_scaling { type linear; factor 4 }"

for name in fd-post-rms fd-sandwich-ln fd-sandwich-ln-drop fd-sandwich-gemma fd-mla fd-mla-yarnms fd-olmo2 \
        fd-rope-local fd-gemma3; do
    if [ "$only" != "  " ] && [[ "$only" != *" $name "* ]]; then continue; fi
    if ! "$planc" build "$dir/$name.plan" -o "$dir/$name" > "$dir/$name.build.log" 2>&1; then
        echo "FAIL $name: planc build failed (see $dir/$name.build.log)"; fails=$((fails + 1)); continue
    fi
    echo "$name:"
    tensors="norm. attn.qkv mlp.up wte"
    case "$name" in fd-mla*) tensors="norm. self_attn. wte" ;; esac   # every MLA tensor, its norms among them
    python3 "$here/program_fd.py" "$dir/$name" "$dir/$name.work" $tensors || fails=$((fails + 1))
done
echo "test-program-fd: $fails failures in $(( $(date +%s) - t0 )) s"
[ "$fails" = 0 ]
