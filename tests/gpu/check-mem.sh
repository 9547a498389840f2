#!/bin/bash
# tests/gpu/check-mem.sh: a real CUDA run's --mem-report against `planc
# check` of its bf16 plan (issue 14), on the 25.5M-parameter model of
# tests/mem, one step per layout, with the bundle's programs and `planc
# check --json` (tests/gpu.mk builds them with tests/mem/make-plan.sh):
#   - one GPU: m1, dp 1 (every ZeRO stage is stage 0 on one rank);
#   - with 2 or more GPUs and Open MPI's mpirun: also z0..z3, dp 2 under
#     ZeRO 0, 1, 2 and 3 (one rank per GPU: NCCL does not share a device
#     between ranks).
# For each layout (tests/mem/check.py cuda): every rank's allocator peak
# within 5 % + 4 MiB of its stage total less the reserve, and each kind's
# own peak (params, grads, optimizer, activations, buffers) within 5 % +
# 4 MiB of the plan's item; then the same executable's --dry-run must
# report what the real run counted (the CI check without a GPU, test-mem
# (b), is only as good as that). Run by tests/gpu/run.sh; needs python3.
# Figures: layouts, misses, max_peak_error_pct.
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/lib.sh
gpu_env || exit 1
export OPENBLAS_NUM_THREADS=1
dir=$GPU_OUT/mem
mkdir -p "$dir"
command -v python3 >/dev/null || { echo "check-mem: python3 is needed (tests/mem/check.py)" >&2; exit 1; }
gpus=${PLANC_GPUS:-$(gpu_count)}
[ "$gpus" -ge 1 ] || { echo "check-mem: no GPU" >&2; exit 77; }
B=$GPU_BUNDLE/mem
layouts=("m1 1")
if [ "$gpus" -ge 2 ] && [ "${PLANC_GPU_MPI:-}" = system ]; then
    for z in 0 1 2 3; do layouts+=("z$z 2"); done
elif [ "$gpus" -ge 2 ]; then
    echo "check-mem: $gpus GPUs, but no Open MPI mpirun here: the dp 2 layouts are not run"
fi
fails=0
for l in "${layouts[@]}"; do
    read -r name np <<< "$l"
    if ! timeout 60 mpirun --oversubscribe --bind-to none -np "$np" "$B/$name" --steps 1 --data "$GPU_BUNDLE/data/sample.txt" \
            --mem-report "$dir/$name.mem.jsonl" < /dev/null > "$dir/$name.log" 2>&1 ||
       ! timeout 30 mpirun --oversubscribe --bind-to none -np "$np" "$B/$name" --dry-run --data "$GPU_BUNDLE/data/sample.txt" \
            --mem-report "$dir/$name.dry.jsonl" < /dev/null > "$dir/$name.dry.log" 2>&1; then
        tail -20 "$dir/$name.log" "$dir/$name.dry.log" 2>/dev/null
        echo "check-mem: $name: run failed"; fails=$((fails + 1)); continue
    fi
    echo "check-mem: $name ($(sed -n 's/^plan *{\(.*\)}/\1/p' "$B/$name.plan" | tr -s ' ')) on $np GPU(s), the real run:"
    python3 tests/mem/check.py cuda "$B/$name.check.json" "$dir/$name.mem.jsonl" | tee "$dir/$name.check.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || fails=$((fails + 1))
    echo "check-mem: $name, its --dry-run against the real run:"
    python3 tests/mem/check.py same "$dir/$name.mem.jsonl" "$dir/$name.dry.jsonl" || fails=$((fails + 1))
done
gpu_figure layouts "${#layouts[@]}"
gpu_figure misses "$fails"
cat "$dir"/*.check.txt 2>/dev/null | grep -o 'allocator peak [0-9.]* MiB ([+-][0-9.]* %)' |
    sed 's/.*(\([+-][0-9.]*\) %)/\1/' | tr -d + | awk '{ a = $1 < 0 ? -$1 : $1; if (a > m) m = a } END { if (NR) print "figure: max_peak_error_pct " m }'
if [ "$fails" = 0 ]; then
    echo "check-mem: the CUDA program holds what planc check predicts (${#layouts[@]} layouts)"
else
    echo "check-mem: FAILED ($fails misses)"; exit 1
fi
