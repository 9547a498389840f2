#!/bin/bash
# tests/gpu/check-calib.sh: `planc calibrate` on the GPU writes a GPU
# profile, and its predictions stand beside planc's own CUDA programs.
#
# 1. planrt-calib-cuda --probe finds the GPU, so `planc calibrate` without
#    --target picks cuda (its progress line says so); `--quick` on
#    min(GPUs, 2) ranks writes a block with the GPU's keys (gemm_dtype bf16,
#    flops from the bf16 GEMMs, flops_fp32, sms, memory; with 2 ranks the
#    NCCL collectives per group size) that `planc fmt` prints unchanged.
# 2. scripts/validate-calib.sh with TARGET=cuda DTYPE=bf16 on those ranks and
#    that profile: one bf16 model under the layouts of that rank count, each
#    built with --target cuda and trained 6 steps; the table of measured
#    ms/step beside the prediction, median and max |error|, the predicted
#    fastest and search's pick. The figures are printed to report; the
#    goals (median <= 10 %, max <= 25 %) are judged on the CPU benchmark,
#    so a miss here does not fail the check, a crash or a failed build does.
# Run by tests/gpu/run.sh; needs a GPU. About 2 minutes.
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build/gpu}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
dir=$BUILD/check-calib
mkdir -p "$dir"
make --no-print-directory -j"$(nproc)" BUILD="$BUILD" "$BUILD/bin/planc" "$BUILD/bin/planrt-calib" \
    "$BUILD/bin/planrt-calib-cuda" "$BUILD/lib/libplanrt.a" "$BUILD/lib/libplanrt_cuda.a" > "$dir/build.log" 2>&1 ||
    { tail -30 "$dir/build.log" >&2; echo "check-calib: build failed" >&2; exit 1; }
planc=$BUILD/bin/planc
"$BUILD/bin/planrt-calib-cuda" --probe || { echo "check-calib: planrt-calib-cuda --probe finds no GPU" >&2; exit 1; }
gpus=$(nvidia-smi -L | wc -l)
ranks=1; [ "$gpus" -ge 2 ] && ranks=2
start=$(date +%s)
timeout 120 "$planc" calibrate --ranks "$ranks" --quick --name gpu -o "$dir/gpu.plan" > "$dir/progress.txt" ||
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
rm -rf "$dir/validate"
TARGET=cuda DTYPE=bf16 RANKS=$ranks STEPS=6 WARMUP=2 CALIB="$(pwd)/$dir/gpu.plan" MODELS="g1024:1024,16,4,512" \
    MPIRUN="mpirun --bind-to none" timeout 170 scripts/validate-calib.sh "$planc" "$(pwd)/$dir/validate" ||
    { echo "check-calib: the predicted-vs-measured run failed" >&2; exit 1; }
echo "check-calib: passed (figures above; goals are judged on the CPU benchmark)"
