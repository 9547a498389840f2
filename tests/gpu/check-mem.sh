#!/bin/bash
# tests/gpu/check-mem.sh: a real CUDA run's --mem-report against `planc
# check` of its bf16 plan (issue 14): the 25.5M-parameter model of
# tests/mem on one GPU (dp = tp = pp = 1, ZeRO-0), one step; the
# allocator's peak must equal the stage total less the reserve within
# 5 % + 4 MiB (tests/mem/check.py report). Run by tests/gpu/run.sh.
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build/gpu}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
dir=$BUILD/check-mem
mkdir -p "$dir"
make --no-print-directory -j"$(nproc)" BUILD="$BUILD" "$BUILD/bin/planc" "$BUILD/lib/libplanrt_cuda.a" \
    > "$dir/build.log" 2>&1 || { tail -30 "$dir/build.log" >&2; echo "check-mem: build failed" >&2; exit 1; }
scripts/make-data.sh examples/data/sample.txt || exit 1
MEM_DTYPE=bf16 tests/mem/make-plan.sh "$dir/m.plan" 1 512 8 \
    "dp 1; tp 1; pp 1; zero 0; micro_batch 2; global_batch 8; schedule 1f1b; recompute none;" || exit 1
"$BUILD/bin/planc" check --json "$dir/m.plan" > "$dir/m.check.json" || { echo "check-mem: check failed" >&2; exit 1; }
"$BUILD/bin/planc" build "$dir/m.plan" -o "$dir/m" --target cuda || { echo "check-mem: build failed" >&2; exit 1; }
mpirun -np 1 "$dir/m" --steps 1 --mem-report "$dir/m.mem.jsonl" < /dev/null > "$dir/m.log" 2>&1 ||
    { tail -20 "$dir/m.log" >&2; echo "check-mem: run failed" >&2; exit 1; }
python3 tests/mem/check.py report "$dir/m.check.json" "$dir/m.mem.jsonl" &&
    echo "check-mem: the CUDA program holds what planc check predicts" ||
    { echo "check-mem: FAILED (the CUDA inventory is not the planner's yet: README, memory)"; exit 1; }
