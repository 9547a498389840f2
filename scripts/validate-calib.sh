#!/usr/bin/env bash
# validate-calib.sh: planc's prediction beside the measurement, on this
# machine, for its own programs (issue 15's benchmark).
#
# Calibrates this machine once (planc calibrate --ranks 2, cached as
# OUTDIR/measured.plan; CALIB=FILE uses another), then for two GPT models
# and 12 two-rank layouts each (DP under every ZeRO stage and with
# recomputation, TP with and without sequence parallelism, PP under every
# schedule) builds the program, trains STEPS steps with one BLAS thread per
# rank, and prints the median ms/step over the steps after the first
# WARMUP beside `planc check --json`'s step_time_s on the calibrated
# cluster, with the error. Then, per model: median and max |error|, whether
# the layout predicted fastest is the one measured fastest (and how far it
# is from it), and the same for `planc search`'s own pick, which is built
# and run too. A machine check says how quiet the machine was: the load
# average before and after, and a quick recalibration's largest GEMM
# rate against the calibration's.
#
# TARGET=cuda DTYPE=bf16 runs the same on a GPU machine (tests/gpu/check-calib.sh):
# `planc calibrate --target cuda`, bf16 models, the programs built with
# --target cuda; RANKS=1 (a machine of one GPU) takes the one-rank layouts
# (recompute none, selective, full) instead of the two-rank ones.
#
# For a machine that cannot build (tests/gpu/run.sh on a borrowed GPU
# machine): BUILD_ONLY=1 (with CALIB, a cluster of RANKS GPUs) only builds
# each layout's program into OUTDIR, with NAME.layout beside it (`planc
# check --json`'s layout object); PREBUILT=DIR then runs DIR's programs
# instead of building them, and search's pick only where one of them has
# its layout (else the pick is reported as not run). DATA=FILE is passed to
# every program as --data.
#
# usage: validate-calib.sh PLANC OUTDIR    (MPIRUN, STEPS, WARMUP, CALIB, MODELS,
#                                           TARGET, DTYPE, RANKS, BUILD_ONLY,
#                                           PREBUILT, DATA, MACHINE_CHECK from
#                                           the environment)
set -euo pipefail
planc=$1; dir=$2
root=$(cd "$(dirname "$0")/.." && pwd)
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
steps=${STEPS:-10}; warm=${WARMUP:-2}
target=${TARGET:-cpu}; dtype=${DTYPE:-fp32}; ranks=${RANKS:-2}
case $ranks in 1|2) ;; *) echo "validate-calib.sh: RANKS is 1 or 2, got $ranks" >&2; exit 2 ;; esac
build_only=${BUILD_ONLY:-0}; prebuilt=${PREBUILT:-}; data=${DATA:-}
if [ "$build_only" = 1 ] && [ -z "${CALIB:-}" ]; then
    echo "validate-calib.sh: BUILD_ONLY=1 needs CALIB (a cluster of $ranks GPU(s))" >&2; exit 2
fi
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$dir"
"$root/scripts/make-data.sh" "$root/examples/data/sample.txt" >/dev/null
calib=${CALIB:-$dir/measured.plan}
load0=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$build_only" != 1 ] && [ ! -s "$calib" ]; then
    start=$(date +%s.%N)
    "$planc" calibrate --target "$target" --ranks "$ranks" -o "$calib"
    echo "# planc calibrate --target $target --ranks $ranks: $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s"
fi
calib=$(cd "$(dirname "$calib")" && pwd)/$(basename "$calib")

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p" "$2" | tail -n +$((warm + 1)) | median; }
predicted() { "$planc" check "$1" --json | sed -n 's/.*"step_time_s": *\([0-9.e+-]*\).*/\1/p' | head -n 1; }

# model NAME DIM HEADS BLOCKS SEQ
model_block() {
    cat <<M
model $1 {
    vocab 256;  seq $5;  dtype $dtype;
    embedding { dim $2 }
    repeat $4 {
        attention { heads $3 }
        mlp       { hidden $(( $2 * 4 )); act gelu }
    }
    norm    { kind layernorm }
    lm_head { tied false }
}
M
}
# write_plan OUT MODELSPEC "PLAN BODY" (an empty body: no plan block, for search)
write_plan() {
    local out=$1 spec=$2 body=$3
    {
        echo "include \"$calib\""
        model_block $spec
        if [ -n "$body" ]; then echo "plan { $body }"; fi
        echo "train { steps $steps; lr 1e-3; warmup 2; seed 42; data \"$root/examples/data/sample.txt\"; }"
    } > "$out"
}
layout_of() { "$planc" check --json "$1" 2>/dev/null | grep -o '"layout": *{[^}]*}' | head -n 1 || true; }
# run_layout PLANFILE NAME [EXENAME]: build (or take PREBUILT's EXENAME,
# default NAME), train, print "ms predicted_ms"; BUILD_ONLY: build only
run_layout() {
    local plan=$1 out=$dir/$2 exe=$dir/$2
    if [ -n "$prebuilt" ]; then
        exe=$prebuilt/${3:-$2}
        [ -x "$exe" ] || { echo "validate-calib.sh: no prebuilt program $exe" >&2; return 1; }
    else
        "$planc" build "$plan" -o "$exe" --target "$target" >/dev/null 2>"$exe.err" || { echo "build failed: $(head -3 "$exe.err")" >&2; return 1; }
    fi
    if [ "$build_only" = 1 ]; then layout_of "$plan" > "$exe.layout"; return 0; fi
    (cd "$root" && $mpirun -np "$ranks" "$exe" --steps "$steps" --log-json "$out.jsonl" ${data:+--data "$data"} > "$out.log")
    echo "$(field ms "$out.jsonl") $(awk -v p="$(predicted "$plan")" 'BEGIN { print p * 1000 }')"
}

LAYOUTS=(
    "one|dp 1; tp 1; pp 1; recompute none"
    "one-sel|dp 1; tp 1; pp 1; recompute selective"
    "one-full|dp 1; tp 1; pp 1; recompute full"
)
[ "$ranks" = 1 ] || LAYOUTS=(
    "dp-z0|dp 2; tp 1; pp 1; zero 0"
    "dp-z1|dp 2; tp 1; pp 1; zero 1"
    "dp-z2|dp 2; tp 1; pp 1; zero 2"
    "dp-z3|dp 2; tp 1; pp 1; zero 3"
    "dp-z0-full|dp 2; tp 1; pp 1; zero 0; recompute full"
    "dp-z1-sel|dp 2; tp 1; pp 1; zero 1; recompute selective"
    "tp|dp 1; tp 2; pp 1; sequence_parallel false"
    "tp-sp|dp 1; tp 2; pp 1; sequence_parallel true"
    "pp-gpipe|dp 1; tp 1; pp 2; schedule gpipe"
    "pp-1f1b|dp 1; tp 1; pp 2; schedule 1f1b"
    "pp-zbh1|dp 1; tp 1; pp 2; schedule zb-h1"
    "pp-inter|dp 1; tp 1; pp 2; schedule interleaved; chunks 2"
)
MODELS=${MODELS:-"m256:256,4,4,128 m512:512,8,4,128"}   # name:dim,heads,blocks,seq
rows=$dir/rows.txt; : > "$rows"
echo "# validate-calib: $steps steps per layout, median ms/step over steps $warm..$((steps - 1)), $ranks ranks, target $target ($dtype), $(nproc) cores"
echo "# cluster: $calib"
printf '%-6s %-12s %10s %12s %8s\n' model layout ms/step predicted_ms error
for m in $MODELS; do
    name=${m%%:*}; spec="$name $(echo "${m#*:}" | tr , " ")"
    for entry in "${LAYOUTS[@]}"; do
        lname=${entry%%|*}; body="${entry#*|}; micro_batch 2; global_batch 8;"
        write_plan "$dir/$name-$lname.plan" "$spec" "$body"
        if [ "$build_only" = 1 ]; then run_layout "$dir/$name-$lname.plan" "$name-$lname"; continue; fi
        read -r ms pm < <(run_layout "$dir/$name-$lname.plan" "$name-$lname")
        awk -v m="$name" -v l="$lname" -v ms="$ms" -v p="$pm" 'BEGIN {
            printf "%-6s %-12s %10.1f %12.1f %7.1f%%\n", m, l, ms, p, 100 * (p - ms) / ms }'
        echo "$name $lname $ms $pm" >> "$rows"
    done
    [ "$build_only" != 1 ] || continue
    # search's own pick over the same set's sizes (2 ranks, same batch)
    write_plan "$dir/$name-search.plan" "$spec" ""
    sed -i '/^train/i plan { micro_batch 2; global_batch 8; }' "$dir/$name-search.plan"
    "$planc" search "$dir/$name-search.plan" --top 1 --write "$dir/$name-pick.plan" > "$dir/$name-search.txt"
    pick=$(sed -n 's/^plan *{\(.*\)}/\1/p' "$dir/$name-pick.plan" | head -1 | tr -s ' ')
    [ -n "$pick" ] || pick=$(awk '/^plan/,/}/' "$dir/$name-pick.plan" | tr '\n' ' ' | tr -s ' ')
    pexe=$name-pick
    if [ -n "$prebuilt" ]; then   # the prebuilt program of the pick's layout, if any
        want=$(layout_of "$dir/$name-pick.plan")
        pexe=$(grep -lxF -- "$want" "$prebuilt/$name"-*.layout 2>/dev/null | head -n 1 || true)
        pexe=$(basename "${pexe:-none}" .layout)
    fi
    if [ "$pexe" = none ]; then
        echo "# $name search's pick: $pick (no prebuilt program has its layout: not run)"
        : > "$dir/picks.txt.$name"
        continue
    fi
    read -r ms pm < <(run_layout "$dir/$name-pick.plan" "$name-pick" "$pexe")
    awk -v m="$name" -v ms="$ms" -v p="$pm" 'BEGIN {
        printf "%-6s %-12s %10.1f %12.1f %7.1f%%\n", m, "search-pick", ms, p, 100 * (p - ms) / ms }'
    echo "# $name search's pick: $pick"
    echo "$name search-pick $ms $pm" > "$dir/picks.txt.$name"
done
if [ "$build_only" = 1 ]; then
    echo "# validate-calib: built the programs of ${#LAYOUTS[@]} layouts per model in $dir (BUILD_ONLY)"
    exit 0
fi
load1=$(cut -d' ' -f1-3 /proc/loadavg)
# median of a[1..n], sorting a in place (so a[n] is the maximum); mawk has no asort
MEDIAN='function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }'

echo "# summary (|error| over the ${#LAYOUTS[@]} layouts of each model; goals: median <= 10 %, max <= 25 %;"
echo "#   predicted-fastest and search's pick within 10 % of the measured fastest)"
for m in $MODELS; do
    name=${m%%:*}
    awk -v n="$name" -v pick="$(cat "$dir/picks.txt.$name")" "$MEDIAN"'
        $1 == n {
            e = 100 * ($4 - $3) / $3; if (e < 0) e = -e; err[++k] = e
            if (!pl || $4 < pp) { pl = $2; pp = $4; pm = $3 }
            if (!ml || $3 < mm) { ml = $2; mm = $3 } }
        END {
            med = median(err, k)
            split(pick, s, " ")
            printf "%s: median |error| %.1f %%, max %.1f %% over %d layouts\n", n, med, err[k], k
            printf "%s: predicted fastest %s measures %.1f ms = %.2fx the measured fastest (%s, %.1f ms)\n", n, pl, pm, pm / mm, ml, mm
            if (s[3] == "") printf "%s: search pick not run\n", n
            else printf "%s: search pick measures %.1f ms = %.2fx the measured fastest\n", n, s[3], s[3] / mm }' "$rows"
done
awk "$MEDIAN"'
    { e = 100 * ($4 - $3) / $3; if (e < 0) e = -e; err[++k] = e } END {
    med = median(err, k)
    printf "all: median |error| %.1f %%, max %.1f %% over %d layouts\n", med, err[k], k }' "$rows"
# machine check: how quiet it was (MACHINE_CHECK=0: none, to save the time)
[ "${MACHINE_CHECK:-1}" != 0 ] || exit 0
"$planc" calibrate --target "$target" --ranks "$ranks" --quick -o "$dir/check.plan" > /dev/null
# a shape both grids have: 512^3 on a CPU, 2048^3 on a GPU (calib.c's grids)
sz=512; [ "$target" = cuda ] && sz=2048
gsz() { awk -v s="$sz" '$1 == "gemm" && $2 == "fwd" && $3 == s && $4 == s && $5 == s { print $6 }' "$1"; }
awk -v a="$(gsz "$calib")" -v b="$(gsz "$dir/check.plan")" -v l0="$load0" -v l1="$load1" -v n="$(nproc)" -v s="$sz" 'BEGIN {
    printf "# machine check: load average %s before, %s after (%d cores); a %d^3 GEMM took %.0f us at calibration, %.0f us now (%.2fx)\n", l0, l1, n, s, a, b, (a > 0 ? b / a : 0) }'
