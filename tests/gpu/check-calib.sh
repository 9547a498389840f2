#!/bin/bash
# tests/gpu/check-calib.sh: `planc calibrate` on the GPU writes a GPU
# profile, and its predictions stand beside planc's own CUDA programs.
#
# 1. planrt-calib-cuda --probe finds the GPU, so the bundle's `planc
#    calibrate` without --target picks cuda (its progress line says so);
#    `--quick` on min(GPUs, 2) ranks (one without Open MPI's mpirun) writes
#    a block with the GPU's keys (gemm_dtype bf16, flops from the bf16
#    GEMMs, flops_fp32, sms, memory; with 2 ranks the NCCL collectives per
#    group size) that `planc fmt` prints unchanged.
# 2. scripts/validate-calib.sh with TARGET=cuda DTYPE=bf16 RANKS=1 on that
#    profile, running the bundle's programs (PREBUILT: the one-rank layouts
#    of one bf16 model, recompute none, selective and full, built by
#    tests/gpu.mk) 6 steps each: measured ms/step beside the prediction,
#    median and max |error|, the predicted fastest and search's pick (run
#    when the bundle has its layout). The goals (median <= 10 %, max <=
#    25 %) are judged on the CPU benchmark, so a miss here does not fail
#    the check; a crash does.
# Run by tests/gpu/run.sh; needs a GPU. Figures: ranks, flops_bf16_tflops,
# flops_fp32_tflops (the GEMM rates measured), median_error_pct, max_error_pct.
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/lib.sh
gpu_env || exit 1
export OPENBLAS_NUM_THREADS=1
dir=$GPU_OUT/calib
mkdir -p "$dir"
planc=$GPU_BUNDLE/bin/planc
"$GPU_BUNDLE/bin/planrt-calib-cuda" --probe || { echo "check-calib: planrt-calib-cuda --probe finds no GPU" >&2; exit 1; }
gpus=${PLANC_GPUS:-$(gpu_count)}
ranks=1; [ "$gpus" -ge 2 ] && [ "${PLANC_GPU_MPI:-}" = system ] && ranks=2
gpu_figure ranks "$ranks"
start=$(date +%s)
timeout 60 "$planc" calibrate --ranks "$ranks" --quick --name gpu -o "$dir/gpu.plan" < /dev/null > "$dir/progress.txt" 2>&1 ||
    { cat "$dir/progress.txt"; echo "check-calib: planc calibrate failed" >&2; exit 1; }
cat "$dir/progress.txt"
grep -q "target cuda" "$dir/progress.txt" || { echo "check-calib: calibrate did not pick cuda by itself" >&2; exit 1; }
keys=("gemm_dtype bf16" "flops " "flops_fp32 " "sms " "memory " "gemm fwd " "gemm dw ")
[ "$ranks" = 2 ] && keys+=("all-reduce 2 " "p2p 2 " "overlap_compute ")
for k in "${keys[@]}"; do
    grep -q "^        $k" "$dir/gpu.plan" || { echo "check-calib: no '$k' in $dir/gpu.plan" >&2; exit 1; }
done
"$planc" fmt "$dir/gpu.plan" | cmp - "$dir/gpu.plan" || { echo "check-calib: fmt changes the profile" >&2; exit 1; }
echo "check-calib: calibrate --target cuda --quick on $ranks rank(s): $(( $(date +%s) - start )) s;" \
     "$(grep -E '^        (flops|flops_fp32|stream|launch|sms) ' "$dir/gpu.plan" | tr -s ' ' | tr '\n' ';')"
awk 'function tf(v, u) { sub(/;$/, "", u); return v * (u ~ /^P/ ? 1e3 : u ~ /^G/ ? 1e-3 : u ~ /^M/ ? 1e-6 : 1) }
     $1 == "flops" { print "figure: flops_bf16_tflops " tf($2, $3) }
     $1 == "flops_fp32" { print "figure: flops_fp32_tflops " tf($2, $3) }' "$dir/gpu.plan"
rm -rf "$dir/validate"
TARGET=cuda DTYPE=bf16 RANKS=1 STEPS=6 WARMUP=2 CALIB="$dir/gpu.plan" MODELS="g1024:1024,16,4,512" \
    PREBUILT="$GPU_BUNDLE/calib" DATA="$GPU_BUNDLE/data/sample.txt" MACHINE_CHECK=0 \
    timeout 70 scripts/validate-calib.sh "$planc" "$dir/validate" < /dev/null | tee "$dir/validate.txt"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "check-calib: the predicted-vs-measured run failed" >&2; exit 1; }
sed -n 's/^all: median |error| \([0-9.]*\) %, max \([0-9.]*\) %.*/figure: median_error_pct \1\nfigure: max_error_pct \2/p' "$dir/validate.txt"
echo "check-calib: passed (figures above; goals are judged on the CPU benchmark)"
