#!/usr/bin/env bash
# run.sh PLANC OUTDIR [--update]: the command-line half of test-trace.
#
#  1. goldens: `planc trace` of tests/trace/{pipe4,zb2}.plan as SVG and JSON,
#     compared byte for byte with tests/trace/*.golden.{svg,json}
#     (--update rewrites them; review the diff);
#  2. every example (and every plan here) drawn as SVG and JSON, and tiny
#     under every schedule, all checked by check.py (XML / JSON parsers,
#     boxes per stage == trace events per stage);
#  3. --compare of a trace planc wrote, and the usage errors (exit 2).
set -u
planc=$1 out=$2 update=${3:-}
here=$(dirname "$0")
mkdir -p "$out"
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# 1. goldens
for p in pipe4 zb2; do
    for ext in svg json; do
        got="$out/$p.golden.$ext" want="$here/$p.golden.$ext"
        "$planc" trace "$here/$p.plan" -o "$got" >/dev/null || { bad "trace $p.$ext"; continue; }
        if [ "$update" = --update ]; then
            cp "$got" "$want" && echo "updated $want"
        elif ! cmp -s "$got" "$want"; then
            bad "$want differs from planc's output (make update-trace-golden, review the diff):"
            diff "$want" "$got" | head -8 >&2
        fi
    done
done
[ "$update" = --update ] && exit $((fails > 0))

# 2. every example and test plan; tiny under every schedule
files=()
for f in examples/*.plan "$here"/*.plan; do
    b=$(basename "$f" .plan)
    for ext in svg json; do
        "$planc" trace "$f" -o "$out/$b.$ext" >/dev/null
        rc=$?
        [ "$rc" -le 1 ] && [ -s "$out/$b.$ext" ] || bad "planc trace $f -o $b.$ext: exit $rc"
        files+=("$out/$b.$ext")
    done
done
for s in gpipe 1f1b interleaved zb-h1; do
    for ext in svg json; do
        "$planc" trace examples/tiny.plan --schedule "$s" --chunks $([ $s = interleaved ] && echo 2 || echo 1) \
            -o "$out/tiny-$s.$ext" >/dev/null || bad "tiny --schedule $s ($ext)"
        files+=("$out/tiny-$s.$ext")
    done
done

# 3. --compare on a trace written by planc (stands in for a measured one)
"$planc" trace examples/tiny.plan --compare "$out/tiny.json" -o "$out/tiny-compare.svg" >/dev/null \
    || bad "--compare"
files+=("$out/tiny-compare.svg")
grep -q 'data-source="predicted"' "$out/tiny-compare.svg" && \
    [ "$(grep -c '<g class="panel"' "$out/tiny-compare.svg")" = 2 ] || bad "--compare: not two panels"
python3 "$here/check.py" "${files[@]}" || bad "check.py"

expect2() {
    "$planc" trace "$@" >/dev/null 2>"$out/err.txt"
    [ $? = 2 ] || bad "planc trace $* should exit 2"
    grep -q "error" "$out/err.txt" || bad "planc trace $*: no diagnostic"
}
expect2 examples/tiny.plan -o "$out/x.png"
expect2 examples/tiny.plan
expect2 examples/tiny.plan -o "$out/x.svg" --schedule nope
expect2 examples/tiny.plan -o "$out/x.svg" --compare /nonexistent.json
expect2 examples/tiny.plan -o "$out/x.json" --compare "$out/tiny.json"
expect2 examples/tiny.plan -o "$out/x.svg" --compare "$out/pipe4.json"   # 4 stages vs 2

n=${#files[@]}
if [ $fails -gt 0 ]; then echo "trace: $fails check(s) failed" >&2; exit 1; fi
echo "trace: goldens match; $n pictures and traces well-formed; --compare and usage errors ok"
