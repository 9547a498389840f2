#!/usr/bin/env bash
# run.sh: `make fuzz`. Runs each libFuzzer target for TIME seconds over a
# corpus kept in DIR (so runs build on each other), seeded with the files
# and directories given (examples, the malformed corpus, the kept inputs),
# with the language's dictionary. One input slower than 1 s (fuzz_plan: 20
# s, the planner under the sanitizers), a leak or a sanitizer report stops
# the target and fails; its input is written to
# DIR/artifacts/. Prints one line of figures per target.
#
# usage: tests/fuzz/run.sh DIR TIME SEED...
set -u
dir=${1:?usage: run.sh DIR TIME SEED...}
time=${2:?usage: run.sh DIR TIME SEED...}
shift 2
cd "$(dirname "$0")/../.."
seeds=$dir/seeds
rm -rf "$seeds"
mkdir -p "$seeds" "$dir/artifacts"
for s in "$@"; do
    if [ -d "$s" ]; then files=("$s"/*); else files=("$s"); fi
    for f in "${files[@]}"; do
        [ -f "$f" ] && cp "$f" "$seeds/$(printf '%s' "$f" | tr '/' '_')"
    done
done
status=0
for t in check fmt plan; do
    corpus=$dir/corpus-$t
    log=$dir/fuzz_$t.log
    mkdir -p "$corpus"
    start=$(date +%s)
    # an input slower than 1 s is a bug in the front end; the planner's
    # slowest seed, MT-NLG 530B interleaved over 35 stages (111 ms in planc
    # check), takes 4.7 s under the sanitizers and the text and JSON reports
    limit=1; [ "$t" = plan ] && limit=20
    "$dir/fuzz_$t" -dict=tests/fuzz/plan.dict -max_total_time="$time" -timeout=$limit -rss_limit_mb=2048 \
        -max_len=16384 -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" \
        "$corpus" "$seeds" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    cov=$(printf '%s' "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(printf '%s' "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
    units=$(ls "$corpus" | wc -l)
    verdict=clean
    if [ $rc -ne 0 ]; then
        verdict="FAILED (exit $rc): see $log and $dir/artifacts/"
        status=1
        grep -m3 -E 'ERROR|SUMMARY|fuzz_fmt:|Timeout' "$log" | sed 's/^/    /'
    fi
    printf 'fuzz_%-5s %4d s  %9s execs  %6s execs/s  cov %s  ft %s  corpus %s  peak rss %s MB  %s\n' \
        "$t" "$secs" "${execs:-?}" "$(( ${execs:-0} / (secs > 0 ? secs : 1) ))" "${cov:-?}" "${ft:-?}" \
        "$units" "${rss:-?}" "$verdict"
done
exit $status
