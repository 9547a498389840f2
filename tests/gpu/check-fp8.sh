#!/bin/bash
# tests/gpu/check-fp8.sh: FP8 on the GPU (issue 27), with the bundle's
# test_fp8_cuda (tests/test_fp8_cuda.c): the casts (amax, scales, codes of
# every recipe and format) against the CPU build's byte for byte, then the
# cuBLASLt FP8 GEMM (prt_fp8_gemm_tn: E4M3 x E4M3 forward into bf16, E5M2
# x the weight's transpose for dX, both operands transposed for dW into
# fp32 with beta 1) against the CPU build's prt_fp8_gemm on the same codes
# and scales, within the bf16 output's rounding, for every recipe the
# device runs: tensorwise (per-tensor scale pointers), rowwise (outer-
# vector scales) and blockwise (1 x 128 and 128 x 128 block scales) on
# Hopper, mxfp8 (E8M0 block scales) on Blackwell; each recipe the device
# lacks says so and is skipped (the casts still run). The GEMMs were
# written without a GPU: this check is their first run. Run by
# tests/gpu/run.sh.
# Figures: casts_bytes_differ, gemm_checks, gemm_failed, gemm_max_rel_err.
# Exit status: 0 passed, 1 failed, 77 no usable GPU.
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/lib.sh
gpu_env || exit 1
dir=$GPU_OUT/fp8
mkdir -p "$dir"
gpu_unpack test_fp8_cuda || { echo "check-fp8: cannot unpack $GPU_BUNDLE/bin/test_fp8_cuda.gz" >&2; exit 1; }
# about 5 s to start CUDA and cuBLASLt, then 14 cast cases and up to 4 recipes x 2 x 3 GEMMs
timeout 22 "$GPU_OPS_EXE" < /dev/null > "$dir/test_fp8_cuda.txt" 2>&1
rc=$?
cat "$dir/test_fp8_cuda.txt"
if [ $rc = 77 ]; then echo "check-fp8: no usable GPU, nothing checked" >&2; exit 77; fi
t=$dir/test_fp8_cuda.txt
awk '/ codes .* blocks .* bytes differ$/ { d += $(NF - 2) } END { printf "figure: casts_bytes_differ %d\n", d }' "$t"
awk '/ values, largest / { n++; f += $(NF - 2) > 0; if ($(NF - 3) + 0 > m) m = $(NF - 3) + 0 }
     END { if (n) printf "figure: gemm_checks %d\nfigure: gemm_failed %d\nfigure: gemm_max_rel_err %g\n", n, f, m }' "$t"
[ $rc = 0 ] && echo "== check-fp8: passed" || echo "check-fp8: test_fp8_cuda FAILED (status $rc)" >&2
exit $rc
