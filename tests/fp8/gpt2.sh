#!/bin/bash
# gpt2.sh: FP8 training of a GPT-2-small-shaped model on the CPU target
# (issue 27: "tiny and gpt2-small-sized models train with each recipe on
# the CPU target with the loss within a stated margin of fp32 after N
# steps"). The shape is GPT-2 small's — 12 blocks of width 768, 12 heads,
# MLP 3072 with GELU, LayerNorm, learned positions, tied head — with what
# the 2-core machine allows cut: the vocabulary is the data's bytes (256,
# not 50257: the tokens are bytes of examples/data/sample.txt), sequences
# of SEQ tokens, micro_batch 2 on one rank, STEPS steps (85.4M parameters).
# fp32 and each recipe the program runs (tensorwise, rowwise, blockwise,
# mxfp8, delayed with amax_history 16) train from the same seed; every
# step's loss must lie within the margin (relative) of fp32's and
# somewhere differ from it (the FP8 GEMMs ran). Measured over 8 steps of
# seq 64 (docs/validation.md): the largest relative difference is 2.4e-3
# tensorwise, 4.9e-3 rowwise, 5.2e-3 blockwise, 4.4e-3 mxfp8 (all at step
# 2, after the first update) and 1.75e-2 delayed (step 7), so the margins
# 2e-2 and, for delayed, 6e-2 leave about 4x and 3.4x. About 5 minutes of
# training on 2 shared cores (an FP8 step is about 4x an fp32 one: the
# CPU casts and decodes every operand).
#   usage: gpt2.sh PLANC OUTDIR   (MPIRUN, GPT2_STEPS, GPT2_SEQ from the environment)
set -u
planc=$1; dir=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
steps=${GPT2_STEPS:-8}; seq=${GPT2_SEQ:-64}
# the margins (relative to fp32's loss, every step): current scaling, and
# delayed, whose first step casts with TE's initial scale 1 (an empty
# history), so its first update is further from fp32's and the curves
# differ more after it
margin=${GPT2_MARGIN:-2e-2}; margin_delayed=${GPT2_MARGIN_DELAYED:-6e-2}
mkdir -p "$dir"
rm -f "$dir"/*.failed   # a previous run's markers
fails=0

# plan NAME FP8-BLOCK: GPT-2 small's shape in fp32 (the CPU target's one
# dtype; fp8 under software planc takes it) on one CPU rank with an FP8
# rate for the planner, or the same model without fp8
plan() {
    cat > "$dir/$1.plan" <<P
cluster cpu1 {
    nodes 1
    gpus_per_node 1
    device cpu { memory 16 GiB; flops 12.5 GFLOPS; flops_fp32 12.5 GFLOPS; flops_fp8 25 GFLOPS; hbm 2.5 GB/s }
    link intra { bandwidth 2 GB/s; latency 5 us }
}
model gpt2small {
    vocab 256;  seq $seq;  dtype fp32
    embedding { dim 768 }
    repeat 12 {
        attention { heads 12 }
        mlp       { hidden 3072; act gelu }
    }
    norm    { kind layernorm }
    lm_head { tied true }
}
plan { dp 1; tp 1; pp 1; zero 0; micro_batch 2; global_batch 2; schedule 1f1b; recompute none; $2 }
train {
    steps $steps; lr 3e-4; warmup 2; seed 42;
    optimizer adamw { beta1 0.9; beta2 0.95; weight_decay 0.1 }
    data "$root/examples/data/sample.txt";
}
P
}
recipes="tensorwise rowwise blockwise mxfp8 delayed"
plan fp32 ""
for r in $recipes; do
    case $r in delayed) plan $r "fp8 { recipe delayed; amax_history 16 }" ;;
               *) plan $r "fp8 { recipe $r }" ;; esac
done
for r in fp32 $recipes; do echo $r; done |
    xargs -P 2 -I{} sh -c '"$1" build "$2/$3.plan" -o "$2/$3" > "$2/$3.build.log" 2>&1 || touch "$2/$3.failed"' sh "$planc" "$dir" {}
t0=$(date +%s)
for r in fp32 $recipes; do echo $r; done | xargs -P 2 -I{} sh -c \
    'cd "$1" && [ ! -e "$2/$3.failed" ] && $4 -np 1 "$2/$3" --steps $5 --log-json "$2/$3.jsonl" > "$2/$3.log" 2>&1 || touch "$2/$3.failed"' \
    sh "$root" "$dir" {} "$mpirun" $steps
losses() { sed -n 's/.*"loss": \([0-9.e+-]*\).*/\1/p' "$1"; }
echo "fp32: $(losses "$dir/fp32.jsonl" | tr '\n' ' ')"
for r in $recipes; do
    if [ -e "$dir/$r.failed" ] || [ -e "$dir/fp32.failed" ]; then
        echo "FAIL $r: build or training failed:"; tail -n 5 "$dir/$r.build.log" "$dir/$r.log" 2>/dev/null
        fails=$((fails + 1)); continue
    fi
    m=$margin; [ $r = delayed ] && m=$margin_delayed
    if out=$(paste <(losses "$dir/fp32.jsonl") <(losses "$dir/$r.jsonl") | awk -v m=$m -v n=$steps -v r=$r '
        NF == 2 { k++; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > w) { w = d; at = k }
                  if (d > m && bad++ < 3) printf "  step %d: loss %s, fp32 %s (relative %.2e > %s)\n", k, $2, $1, d, m }
        END { if (k != n) { printf "  %d steps logged of %d\n", k, n; bad++ }
              if (!(w > 1e-6)) { printf "  the losses equal fp32'"'"'s: no FP8 GEMM ran\n"; bad++ }
              printf "%s: %d steps, loss %s (fp32 %s), largest relative difference %.2e at step %d (margin %s)\n",
                     r, k, $2, $1, w, at, m; exit bad > 0 }'); then
        echo "ok   $out"
    else
        echo "FAIL $out"; fails=$((fails + 1))
    fi
done
echo "fp8 gpt2-small: $recipes against fp32 ($steps steps, seq $seq), $fails failed, $(( $(date +%s) - t0 )) s training"
[ "$fails" = 0 ]
