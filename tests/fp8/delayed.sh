#!/bin/bash
# delayed.sh: FP8 recipe delayed's state in the generated CPU program
# (issue 27): tiny's model (make-plan.sh) with `fp8 { recipe delayed;
# amax_history 4 }` — a window of 4, so the 8 steps below roll every
# history over.
#
# 1. Resume is exact: 8 steps uninterrupted; 3 steps saved, then resumed
#    to 8: the losses of steps 4-8 equal the uninterrupted run's (9 digits),
#    the final weights and AdamW state (--dump-params) and the amax
#    histories (fp8_delayed.txt of step 8) are byte for byte the same.
# 2. The histories are the global batch's on every layout: dp 2 x tp 2 x
#    pp 2 (ZeRO-1) writes after step 1 (the casts of step 1 used scale 1 on
#    both) amaxes and scales within 1e-5 (relative) of the one-rank run's:
#    fp32 summation order moves them by ulps (measured 2.4e-7), an amax
#    taken over part of the batch or a shard (a reduction over fewer ranks
#    than the world) by far more. Later steps drift apart as any FP8 run's
#    weights do across layouts (compare.c's fp8 mode: 2e-3 at step 2), so
#    at step 8 the counts and heads alone must agree. Its step-3 checkpoint
#    resumes on one rank.
# 3. Refusals: a delayed run resumed from a tensorwise checkpoint (no
#    fp8_delayed.txt), or from one of another amax_history, stops with a
#    message naming the file, exit 1.
#
#   usage: delayed.sh PLANC OUTDIR   (MPIRUN from the environment)
set -u
planc=$1; dir=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkplan=$root/tests/invariance/make-plan.sh
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
rm -rf "$dir"; mkdir -p "$dir"
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && tail -n 15 "$2"; fails=$((fails + 1)); }
losses() { sed -n 's/.*"step": \([0-9]*\).*"loss": \([0-9.e+-]*\).*/\1 \2/p' "$1"; }
run() { local np=$1; shift; (cd "$root" && $mpirun -np "$np" "$@"); }

dl="fp8 { recipe delayed; amax_history 4 }"
"$mkplan" "$dir/one.plan" 1 "dp 1; tp 1; pp 1; zero 0; micro_batch 4; schedule 1f1b; $dl"
"$mkplan" "$dir/lay.plan" 8 "dp 2; tp 2; pp 2; zero 1; micro_batch 4; schedule 1f1b; $dl"
"$mkplan" "$dir/h8.plan" 1 "dp 1; tp 1; pp 1; zero 0; micro_batch 4; schedule 1f1b; fp8 { recipe delayed; amax_history 8 }"
"$mkplan" "$dir/tw.plan" 1 "dp 1; tp 1; pp 1; zero 0; micro_batch 4; schedule 1f1b; fp8 { recipe tensorwise }"
for p in one lay h8 tw; do echo $p; done |
    xargs -P 2 -I{} sh -c '"$1" build "$2/$3.plan" -o "$2/$3" 2> "$2/$3.build.log" || touch "$2/$3.failed"' sh "$planc" "$dir" {}
for p in one lay h8 tw; do
    if [ -e "$dir/$p.failed" ]; then fail "planc build $p" "$dir/$p.build.log"; fi
done
[ "$fails" = 0 ] || { echo "fp8 delayed: $fails failed"; exit 1; }

# ---- 1. resume exact -----------------------------------------------------------
run 1 "$dir/one" --steps 8 --save "$dir/full.ck" --log-json "$dir/full.jsonl" --dump-params "$dir/full.dump" \
    > "$dir/full.log" 2>&1 || fail "uninterrupted run" "$dir/full.log"
run 1 "$dir/one" --steps 3 --save "$dir/part.ck" > "$dir/part.log" 2>&1 || fail "3-step run" "$dir/part.log"
run 1 "$dir/one" --steps 8 --resume "$dir/part.ck" --save "$dir/part.ck" --log-json "$dir/resumed.jsonl" \
    --dump-params "$dir/resumed.dump" > "$dir/resumed.log" 2>&1 || fail "resume at step 3" "$dir/resumed.log"
full8=$dir/full.ck/step-00000008/fp8_delayed.txt; res8=$dir/part.ck/step-00000008/fp8_delayed.txt
if [ "$(losses "$dir/resumed.jsonl")" = "$(losses "$dir/full.jsonl" | awk '$1 > 3')" ] &&
   [ "$(losses "$dir/resumed.jsonl" | wc -l)" = 5 ]; then
    ok "resumed at step 3: the losses of steps 4-8 equal the uninterrupted run's"
else
    fail "resume: losses differ"; paste <(losses "$dir/full.jsonl") <(losses "$dir/resumed.jsonl")
fi
if cmp -s "$dir/full.dump" "$dir/resumed.dump"; then ok "resumed: final weights and AdamW state byte for byte"
else fail "resume: the final parameters differ"; fi
if [ -s "$full8" ] && cmp -s "$full8" "$res8"; then
    ok "resumed: the amax histories at step 8 byte for byte ($(sed -n 2p "$full8"))"
else fail "resume: fp8_delayed.txt of step 8 differs or is missing"; fi

# ---- 2. the histories on dp 2 x tp 2 x pp 2 ---------------------------------------
run 8 "$dir/lay" --steps 8 --save "$dir/lay.ck" --save-every 1 > "$dir/lay.log" 2>&1 || fail "dp2 tp2 pp2 run" "$dir/lay.log"
# same_histories ONE LAY TOL: the two files' headers, counts and heads equal,
# every amax and scale within TOL (relative; no check when TOL is "-")
same_histories() {
python3 - "$@" <<'PY'
import sys
one, lay = (open(f).read().split("\n") for f in sys.argv[1:3])
tol = None if sys.argv[3] == "-" else float(sys.argv[3])
bad, worst, k = 0, 0.0, 0
if one[:2] != lay[:2]: print("  header differs:", one[:2], lay[:2]); bad += 1
for i, (a, b) in enumerate(zip(one[2:], lay[2:])):
    a, b = a.split(), b.split()
    if len(a) != len(b) or a[:2] != b[:2]:
        print("  history %d: count/head %s, one rank %s" % (i, b[:2], a[:2])); bad += 1; continue
    for j, (x, y) in enumerate(zip(a[2:], b[2:])):
        x, y = float.fromhex(x), float.fromhex(y); k += 1
        d = 0.0 if x == y else abs(x - y) / abs(x)
        worst = max(worst, d)
        if tol is not None and d > tol:
            bad += 1
            if bad <= 5: print("  history %d value %d: %r, one rank %r (relative %.2e)" % (i, j, y, x, d))
print("%d amaxes and scales, largest relative difference %.2e (tolerance %s)" % (k, worst, sys.argv[3]))
sys.exit(1 if bad or not k or len(one) != len(lay) else 0)
PY
}
run 1 "$dir/one" --steps 1 --save "$dir/one1.ck" > "$dir/one1.log" 2>&1 || fail "1-step run" "$dir/one1.log"
if out=$(same_histories "$dir/one1.ck/step-00000001/fp8_delayed.txt" "$dir/lay.ck/step-00000001/fp8_delayed.txt" 1e-5)
then ok "dp2 tp2 pp2 (8 ranks): the histories after step 1 are the one-rank run's: $(echo "$out" | tail -n 1)"
else fail "dp2 tp2 pp2: step 1's histories differ from one rank's:"; echo "$out" | head -n 8; fi
if out=$(same_histories "$full8" "$dir/lay.ck/step-00000008/fp8_delayed.txt" -)
then ok "dp2 tp2 pp2: at step 8 the same counts and heads: $(echo "$out" | tail -n 1)"
else fail "dp2 tp2 pp2: step 8's histories differ in shape:"; echo "$out" | head -n 8; fi
run 1 "$dir/one" --steps 8 --resume "$dir/lay.ck/step-00000003" --log-json "$dir/cross.jsonl" > "$dir/cross.log" 2>&1 &&
    grep -q "resumed from .*: 3 steps done" "$dir/cross.log" && [ "$(losses "$dir/cross.jsonl" | wc -l)" = 5 ] &&
    ok "dp2 tp2 pp2's step-3 checkpoint resumed on one rank: $(losses "$dir/cross.jsonl" | tail -n 1)" ||
    fail "dp2 tp2 pp2 checkpoint resumed on one rank" "$dir/cross.log"

# ---- 3. refusals -----------------------------------------------------------------
# refused NAME LOG PATTERN (the run's exit status in $rc)
refused() {
    if [ "$rc" = 1 ] && grep -q "$3" "$2"; then ok "$1: refused: $(grep -m1 "$3" "$2" | sed 's/^.*error: //' | cut -c1-150)"
    else fail "$1: exit $rc, expected 1 and '$3'" "$2"; fi
}
run 1 "$dir/tw" --steps 2 --save "$dir/tw.ck" > "$dir/tw.log" 2>&1 || fail "tensorwise run" "$dir/tw.log"
rc=0; run 1 "$dir/one" --steps 4 --resume "$dir/tw.ck" > "$dir/no-state.log" 2>&1 || rc=$?
refused "delayed from a tensorwise checkpoint" "$dir/no-state.log" "has no fp8_delayed.txt"
rc=0; run 1 "$dir/h8" --steps 9 --resume "$dir/full.ck" > "$dir/len.log" 2>&1 || rc=$?
refused "amax_history 8 from an amax_history 4 checkpoint" "$dir/len.log" "of length 4, this program keeps .* of length 8"

echo "fp8 delayed: resume, layouts and refusals, $fails failed"
[ "$fails" = 0 ]
