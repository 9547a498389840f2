#!/bin/bash
# tests/gpu/check-mem.sh: a real CUDA run's --mem-report against `planc
# check` of its bf16 plan (issue 14), on the 25.5M-parameter model of
# tests/mem, one step per layout:
#   - one GPU: dp 1 (every ZeRO stage is stage 0 on one rank);
#   - with G >= 2 GPUs: also dp G under ZeRO 0, 1, 2 and 3 (one rank per
#     GPU: NCCL does not share a device between ranks).
# For each layout (tests/mem/check.py cuda): every rank's allocator peak
# within 5 % + 4 MiB of its stage total less the reserve, and each kind's
# own peak (params, grads, optimizer, activations, buffers) within 5 % +
# 4 MiB of the plan's item; then the same executable's --dry-run must
# report what the real run counted (the CI check without a GPU, test-mem
# (b), is only as good as that). Run by tests/gpu/run.sh.
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build/gpu}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
dir=$BUILD/check-mem
mkdir -p "$dir"
make --no-print-directory -j"$(nproc)" BUILD="$BUILD" "$BUILD/bin/planc" "$BUILD/lib/libplanrt_cuda.a" \
    > "$dir/build.log" 2>&1 || { tail -30 "$dir/build.log" >&2; echo "check-mem: build failed" >&2; exit 1; }
scripts/make-data.sh examples/data/sample.txt || exit 1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -ge 1 ] || { echo "check-mem: no GPU" >&2; exit 1; }
layouts=("m1 1 dp 1; zero 0;")
if [ "$gpus" -ge 2 ]; then
    for z in 0 1 2 3; do layouts+=("z$z $gpus dp $gpus; zero $z;"); done
fi
fails=0
for l in "${layouts[@]}"; do
    read -r name np body <<< "$l"
    body="$body tp 1; pp 1; micro_batch 2; global_batch $((8 * np)); schedule 1f1b; recompute none;"
    if ! MEM_DTYPE=bf16 tests/mem/make-plan.sh "$dir/$name.plan" "$np" 512 8 "$body" ||
       ! "$BUILD/bin/planc" check --json "$dir/$name.plan" > "$dir/$name.check.json" ||
       ! "$BUILD/bin/planc" build "$dir/$name.plan" -o "$dir/$name" --target cuda > "$dir/$name.build.log" 2>&1; then
        echo "check-mem: $name: plan, check or build failed (see $dir)"; fails=$((fails + 1)); continue
    fi
    if ! timeout 120 mpirun --oversubscribe --bind-to none -np "$np" "$dir/$name" --steps 1 \
            --mem-report "$dir/$name.mem.jsonl" < /dev/null > "$dir/$name.log" 2>&1 ||
       ! timeout 60 mpirun --oversubscribe --bind-to none -np "$np" "$dir/$name" --dry-run \
            --mem-report "$dir/$name.dry.jsonl" < /dev/null > "$dir/$name.dry.log" 2>&1; then
        tail -20 "$dir/$name.log" >&2
        echo "check-mem: $name: run failed"; fails=$((fails + 1)); continue
    fi
    echo "check-mem: $name ($body) on $np GPU(s), the real run:"
    python3 tests/mem/check.py cuda "$dir/$name.check.json" "$dir/$name.mem.jsonl" || fails=$((fails + 1))
    echo "check-mem: $name, its --dry-run against the real run:"
    python3 tests/mem/check.py same "$dir/$name.mem.jsonl" "$dir/$name.dry.jsonl" || fails=$((fails + 1))
done
if [ "$fails" = 0 ]; then
    echo "check-mem: the CUDA program holds what planc check predicts (${#layouts[@]} layouts)"
else
    echo "check-mem: FAILED ($fails misses)"; exit 1
fi
