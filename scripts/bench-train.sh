#!/usr/bin/env bash
# bench-train.sh: data-parallel scaling of a generated program on this
# machine, and planc's prediction beside the measurement.
#
# Builds tiny.plan's model (tests/invariance/make-plan.sh: same model, seed
# and data; a one-node cluster of laptop.plan's CPU device with as many
# ranks as the layout) twice: dp 1 and dp 2, both with micro-batches of 8
# sequences and a global batch of 16, so each rank runs the same GEMMs and
# dp 2 should take half the time per step. Each trains STEPS steps with one
# BLAS thread per rank; the median tokens/s over the steps after the first
# WARMUP is reported, with the ratio (goal >= 1.7 on 2 cores), and the
# median ms/step beside `planc check --json`'s step_time_s for that cluster.
# A machine check (two 1-rank runs at once) says how many cores were really
# free, since a busy machine caps the ratio whatever the program does.
#
# usage: bench-train.sh PLANC OUTDIR    (MPIRUN, STEPS, WARMUP from the environment)
set -euo pipefail
planc=$1; dir=$2
root=$(cd "$(dirname "$0")/.." && pwd)
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
steps=${STEPS:-30}; warm=${WARMUP:-5}
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$dir"
"$root/scripts/make-data.sh" "$root/examples/data/sample.txt" >/dev/null

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p" "$2" | tail -n +$((warm + 1)) | median; }

echo "# bench-train: tiny.plan's model, global batch 16 x 64 tokens, micro-batches of 8, $steps steps"
echo "# $(nproc) cores, OPENBLAS_NUM_THREADS=1 per rank, median over steps $warm..$((steps - 1))"
printf '%-6s %6s %12s %12s %14s %8s\n' layout ranks tokens/s ms/step predicted_ms error
declare -A tps
for dp in 1 2; do
    name=dp$dp
    "$root/tests/invariance/make-plan.sh" "$dir/$name.plan" "$dp" "dp $dp; tp 1; pp 1; zero 0; micro_batch 8; schedule 1f1b;"
    "$planc" build "$dir/$name.plan" -o "$dir/$name" 2>/dev/null
    (cd "$root" && $mpirun -np "$dp" "$dir/$name" --steps "$steps" --log-json "$dir/$name.jsonl" > "$dir/$name.log")
    t=$(field tokens_per_s "$dir/$name.jsonl"); ms=$(field ms "$dir/$name.jsonl")
    pred=$("$planc" check "$dir/$name.plan" --json | sed -n 's/.*"step_time_s": *\([0-9.e+-]*\).*/\1/p' | head -n 1)
    awk -v n="$name" -v r="$dp" -v t="$t" -v ms="$ms" -v p="$pred" 'BEGIN {
        pm = p * 1000; e = (pm > 0) ? 100 * (pm - ms) / ms : 0
        printf "%-6s %6d %12.0f %12.1f %14.1f %7.0f%%\n", n, r, t, ms, pm, e }'
    tps[$dp]=$t
done
# How many cores are really free: two 1-rank runs at once against one alone
# (1.0: two idle cores, so dp 2 can reach 2x; 2.0: one core's worth, so 1x).
(cd "$root" && $mpirun -np 1 "$dir/dp1" --steps "$steps" --log-json "$dir/pair-a.jsonl" > /dev/null) &
(cd "$root" && $mpirun -np 1 "$dir/dp1" --steps "$steps" --log-json "$dir/pair-b.jsonl" > /dev/null)
wait
pa=$(field ms "$dir/pair-a.jsonl"); pb=$(field ms "$dir/pair-b.jsonl"); solo=$(field ms "$dir/dp1.jsonl")
awk -v a="$pa" -v b="$pb" -v s="$solo" 'BEGIN {
    printf "# machine check: two 1-rank runs at once take %.2fx the step of one alone (1.00 = two free cores)\n", (a + b) / 2 / s }'
awk -v a="${tps[1]}" -v b="${tps[2]}" 'BEGIN {
    r = b / a; note = (r >= 1.7) ? "" : "  -- below the goal"
    printf "# dp 2 / dp 1 tokens/s: %.2f (goal >= 1.7)%s\n", r, note }'
echo "# predicted: planc check --json step_time_s for the same plan (laptop.plan's CPU device per rank)"
