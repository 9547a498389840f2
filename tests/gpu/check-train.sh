#!/bin/bash
# tests/gpu/check-train.sh: the generated CUDA program trains.
#
# Builds tiny.plan's model on one rank (dp = tp = pp = 1, micro-batches of
# 4: tests/invariance/make-plan.sh) for the CPU and for CUDA with
# `planc build`, trains each 5 steps on the same data and compares the
# losses step by step. The CUDA program computes in bf16 with fp32 master
# weights, so the tolerance is bf16's: 2e-2 relative per step. Run by
# tests/gpu/run.sh; needs a GPU.
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build/gpu}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
dir=$BUILD/check-train
mkdir -p "$dir"
make --no-print-directory -j"$(nproc)" BUILD="$BUILD" "$BUILD/bin/planc" "$BUILD/lib/libplanrt.a" \
    "$BUILD/lib/libplanrt_cuda.a" > "$dir/build.log" 2>&1 ||
    { tail -30 "$dir/build.log" >&2; echo "check-train: build failed" >&2; exit 1; }
scripts/make-data.sh examples/data/sample.txt || exit 1
tests/invariance/make-plan.sh "$dir/tiny1.plan" 1 "dp 1; tp 1; pp 1; zero 0; micro_batch 4; schedule 1f1b;" || exit 1
for t in cpu cuda; do
    "$BUILD/bin/planc" build "$dir/tiny1.plan" -o "$dir/tiny_$t" --target $t || { echo "check-train: $t build failed" >&2; exit 1; }
    start=$(date +%s%N)
    mpirun -np 1 "$dir/tiny_$t" --steps 5 --log-json "$dir/$t.jsonl" || { echo "check-train: $t run failed" >&2; exit 1; }
    echo "check-train: $t: 5 steps in $(( ($(date +%s%N) - start) / 1000000 )) ms (start-up included)"
done
paste <(sed -n 's/.*"loss": \([0-9.e+-]*\).*/\1/p' "$dir/cpu.jsonl") \
      <(sed -n 's/.*"loss": \([0-9.e+-]*\).*/\1/p' "$dir/cuda.jsonl") |
awk 'BEGIN { bad = 0; n = 0 }
     { n++; rel = ($2 - $1) / $1; if (rel < 0) rel = -rel;
       printf "step %d: cpu %.6f cuda %.6f  relative %.2e%s\n", n - 1, $1, $2, rel, rel > 2e-2 ? "  > 2e-2" : "";
       if (rel > 2e-2) bad++ }
     END { if (n != 5) { print "check-train: expected 5 steps, got " n; exit 1 }
           print bad ? "check-train: FAILED" : "check-train: CUDA losses match the CPU run (bf16 tolerance 2e-2)"; exit bad ? 1 : 0 }'
