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
case "$body" in *moe\;*)
    ffn="moe       { experts 4; top_k 2; shared 1; hidden $((4 * dim)); act gelu; $cap }"
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
# a body with an `fp8 { ... }` block (issue 27), or `bf16;` (the same layout
# without it): the FP8 rule wants a 16-bit model on a device with FP8 tensor
# cores, so the model says dtype bf16 (the CPU target computes in fp32 all
# the same), the device gets an FP8 rate (a figure for the planner only)
# and the gradients accumulate in fp32 (the CPU target's only way)
fp8dev=
case "$body" in *fp8\ \{*|*bf16\;*)
    dtype=bf16; fp8dev="flops_fp8 25 GFLOPS;"; body="${body//bf16;/} grad_accum_dtype fp32;" ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
cat > "$out" <<P
cluster cpu$np {
    nodes 1
    gpus_per_node $np
    device cpu { memory 8 GiB; flops 12.5 GFLOPS; flops_fp32 12.5 GFLOPS; hbm 2.5 GB/s; $fp8dev }
    link intra { bandwidth 2 GB/s; latency 5 us }
}
model mem$dim {
    vocab 256;  seq $seq;  dtype $dtype; $dropout
    embedding { dim $dim }
    repeat $layers {
        $att
        $ffn
    }
    norm    { kind layernorm }
    lm_head { tied false }
}
plan { $body }
train {
    steps 2; lr 1e-3; warmup 1; seed 42;
    optimizer adamw { beta1 0.9; beta2 0.95; weight_decay 0.0 }
    data "$root/examples/data/sample.txt";
}
P
