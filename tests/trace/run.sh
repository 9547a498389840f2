#!/usr/bin/env bash
# run.sh PLANC OUTDIR [--update]: the command-line half of test-trace.
#
#  1. goldens: `planc trace` of tests/trace/{pipe4,zb2}.plan as SVG and JSON,
#     compared byte for byte with tests/trace/*.golden.{svg,json}
#     (--update rewrites them; review the diff);
#  2. every example (and every plan here) drawn as SVG and JSON, and tiny
#     under every schedule, all checked by check.py (XML / JSON parsers,
#     boxes per stage == trace events per stage);
#     and on llama3-70b (tp 8) the TP events add up to check's exposed TP;
#  3. --compare of a trace planc wrote, the usage errors (exit 2), a plan
#     that does not fit (exit 1, still drawn) and an invalid layout (exit 1).
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

# the TP collectives a pass waits for, end to end: on the stage that ends
# last, the TP_COLL events of `planc trace` add up to the exposed TP seconds
# `planc check` prints, as does the trace's summary (otherData.summary)
"$planc" check examples/llama3-70b.plan > "$out/l70-check.txt" 2>/dev/null
python3 - "$out/l70-check.txt" "$out/llama3-70b.json" <<'PY' || bad "llama3-70b: TP events != check's exposed TP"
import json, re, sys
tp = float(re.search(r"^  TP collectives +([0-9.]+)", open(sys.argv[1]).read(), re.M).group(1))
doc = json.load(open(sys.argv[2]))
crit = doc["otherData"]["critical"]
ev = sum(e["dur"] for e in doc["traceEvents"] if e.get("cat") == "TP_COLL" and e["pid"] == crit) / 1e6
summ = doc["otherData"]["summary"][crit]["exposed_tp_s"]
if not (tp > 1 and abs(ev - tp) <= 1e-4 + 1e-6 * tp and abs(summ - tp) <= 1e-4):
    sys.exit(f"check {tp} s, trace events {ev} s, summary {summ} s")
PY

# 3. --compare on a trace written by planc (stands in for a measured one)
"$planc" trace examples/tiny.plan --compare "$out/tiny.json" -o "$out/tiny-compare.svg" >/dev/null \
    || bad "--compare"
files+=("$out/tiny-compare.svg")
grep -q 'data-source="predicted"' "$out/tiny-compare.svg" && \
    [ "$(grep -c '<g class="panel"' "$out/tiny-compare.svg")" = 2 ] || bad "--compare: not two panels"
# a "measured" trace as the executable would write it: another clock
# origin, every op 10 % slower, two ranks per stage (rank 0 and a replica)
python3 - "$out/tiny.json" "$out/measured.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
ev = []
for e in doc["traceEvents"]:
    if e["ph"] != "X":
        continue
    for rank, skew in ((0, 0.0), (1, 7.0)):
        m = dict(e, ts=1e6 + 1.1 * e["ts"] + skew, dur=1.1 * e["dur"], args=dict(e["args"], rank=rank))
        ev.append(m)
json.dump({"traceEvents": ev[::-1], "otherData": {"source": "measured"}}, open(sys.argv[2], "w"))
PY
"$planc" trace examples/tiny.plan --compare "$out/measured.json" -o "$out/tiny-measured.svg" >/dev/null \
    || bad "--compare measured.json"
grep -q 'measured: step [0-9.]* ms (+10.0 % against the prediction)' "$out/tiny-measured.svg" \
    || bad "--compare: the measured panel does not show +10.0 %"
files+=("$out/tiny-measured.svg")
[ -s "$out/search.svg" ] && files+=("$out/search.svg")   # written by test_trace
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
expect2 examples/tiny.plan -o "$out/x.svg" --schedule 1f1b --chunks 2
expect2 examples/tiny.plan -o "$out/x.svg" --chunks 0
expect2 examples/tiny.plan -o "$out/x.svg" --compare "$out/pipe4.json"   # 4 stages vs 2

# a plan that does not fit: still drawn, exit 1; an invalid layout: exit 1
sed 's/memory 1 GiB/memory 1 MiB/' "$here/pipe4.plan" > "$out/nofit.plan"
rm -f "$out/nofit.svg"
"$planc" trace "$out/nofit.plan" -o "$out/nofit.svg" >/dev/null 2>&1
[ $? = 1 ] && [ -s "$out/nofit.svg" ] || bad "a plan that does not fit: exit 1, picture written"
sed 's/dp 2; tp 1; pp 4/dp 1; tp 1; pp 4/' "$here/pipe4.plan" > "$out/badlayout.plan"
"$planc" trace "$out/badlayout.plan" -o "$out/badlayout.svg" >/dev/null 2>&1
[ $? = 1 ] || bad "dp x tp x pp != GPUs: exit 1"

# the pictures of docs/trace.md (and the README): stale ones are reported (not a failure: any change
# to the cost model moves them; `make pictures` redraws them)
for s in gpipe 1f1b interleaved zb-h1; do
    cmp -s "$out/tiny-$s.svg" "docs/img/trace-$s.svg" || \
        echo "note: docs/img/trace-$s.svg differs from planc's drawing; run 'make pictures'" >&2
done

n=${#files[@]}
if [ $fails -gt 0 ]; then echo "trace: $fails check(s) failed" >&2; exit 1; fi
echo "trace: goldens match; $n pictures and traces well-formed; --compare and usage errors ok"
