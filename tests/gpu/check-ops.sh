#!/bin/bash
# tests/gpu/check-ops.sh: every CUDA op against the CPU op on random inputs
# (bf16 tolerance, first mismatches printed as llm.c's validate_result),
# then the time of a GPT-2-small training step (124M, seq 1024,
# micro-batch ${MB:-8}), with the bundle's test_ops_cuda (tests/gpu.mk).
# Run by tests/gpu/run.sh (or alone: GPU_BUNDLE, GPU_OUT as in lib.sh).
# Figures: checks_failed, checks, gpt2_step_ms, gpt2_tflops.
# Exit status: 0 passed, 1 failed, 77 no usable GPU.
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/lib.sh
gpu_env || exit 1
dir=$GPU_OUT/ops
mkdir -p "$dir"
gpu_unpack || { echo "check-ops: cannot unpack $GPU_BUNDLE/bin/test_ops_cuda.gz" >&2; exit 1; }
"$GPU_OPS_EXE" "${MB:-8}" | tee "$dir/test_ops_cuda.txt"
rc=${PIPESTATUS[0]}
[ $rc = 77 ] && echo "check-ops: no usable GPU, nothing checked" >&2
t=$dir/test_ops_cuda.txt
sed -n 's/^# \([0-9]*\) of \([0-9]*\) checks failed.*/\1 \2/p' "$t" | while read -r bad all; do
    gpu_figure checks_failed "$bad"; gpu_figure checks "$all"; done
awk '/^step time \(ms\)/ { print "figure: gpt2_step_ms " $NF } /^model TFLOP\/s/ { print "figure: gpt2_tflops " $NF }' "$t"
exit $rc
