#!/bin/bash
# tests/gpu/check-train.sh: the generated CUDA program trains as the CPU
# program does.
#
# The bundle (tests/gpu.mk) holds tiny.plan's model on one rank (dp = tp =
# pp = 1, micro-batches of 4: tests/invariance/make-plan.sh) built with
# `planc build --target cuda`, and the 5 losses of the same plan's CPU
# program on the same data, computed where the bundle was built
# (train/cpu.jsonl). Here the CUDA program trains 5 steps on that data and
# the losses are compared step by step. The CUDA program computes in bf16
# with fp32 master weights, the CPU one in fp32, so the tolerance is bf16's
# (8 bits of mantissa, 2^-8 = 3.9e-3 per rounding, a few roundings deep):
# 2e-2 relative per step. Run by tests/gpu/run.sh; needs a GPU.
# Figures: max_rel_loss_diff, steps, cuda_ms_per_step (median), cpu_loss_0.
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/lib.sh
gpu_env || exit 1
dir=$GPU_OUT/train
mkdir -p "$dir"
B=$GPU_BUNDLE/train
start=$(date +%s%N)
timeout 50 mpirun -np 1 "$B/tiny_cuda" --steps 5 --data "$GPU_BUNDLE/data/sample.txt" --log-json "$dir/cuda.jsonl" \
    < /dev/null > "$dir/cuda.log" 2>&1 || { cat "$dir/cuda.log"; echo "check-train: the CUDA run failed" >&2; exit 1; }
cat "$dir/cuda.log"
echo "check-train: cuda: 5 steps in $(( ($(date +%s%N) - start) / 1000000 )) ms (start-up included)"
loss() { sed -n 's/.*"loss": \([0-9.e+-]*\).*/\1/p' "$1"; }
ms=$(sed -n 's/.*"ms": \([0-9.e+-]*\).*/\1/p' "$dir/cuda.jsonl" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
[ -z "$ms" ] || gpu_figure cuda_ms_per_step "$ms"
paste <(loss "$B/cpu.jsonl") <(loss "$dir/cuda.jsonl") |
awk 'BEGIN { bad = 0; n = 0; max = 0 }
     NF == 2 { n++; rel = ($2 - $1) / $1; if (rel < 0) rel = -rel; if (rel > max) max = rel
       if (n == 1) printf "figure: cpu_loss_0 %.6f\n", $1
       printf "step %d: cpu %.6f cuda %.6f  relative %.2e%s\n", n - 1, $1, $2, rel, rel > 2e-2 ? "  > 2e-2" : "";
       if (rel > 2e-2) bad++ }
     END { printf "figure: steps %d\nfigure: max_rel_loss_diff %.3e\n", n, max
           if (n != 5) { print "check-train: expected 5 steps of each, got " n; exit 1 }
           print bad ? "check-train: FAILED" : "check-train: CUDA losses match the CPU run (bf16 tolerance 2e-2)"; exit bad ? 1 : 0 }'
