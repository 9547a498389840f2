#!/bin/bash
# tests/gpu/check-ops.sh: every CUDA op against the CPU op on random inputs
# (bf16 tolerance, first mismatches printed as llm.c's validate_result),
# then the time of a GPT-2-small training step (124M, seq 1024,
# micro-batch ${MB:-8}). Run by tests/gpu/run.sh; needs a GPU.
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build/gpu}
mkdir -p "$BUILD"
make --no-print-directory -j"$(nproc)" BUILD="$BUILD" "$BUILD/tests/test_ops_cuda" \
    > "$BUILD/check-ops.log" 2>&1 || { tail -30 "$BUILD/check-ops.log" >&2; echo "check-ops: build failed" >&2; exit 1; }
"$BUILD/tests/test_ops_cuda" "${MB:-8}"
rc=$?
[ $rc = 77 ] && echo "check-ops: no usable GPU, nothing checked" >&2
exit $rc
