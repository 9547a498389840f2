#!/bin/bash
# ckpt.sh: checkpoints across context parallelism (issue 26). A checkpoint
# holds global tensors whatever the layout, so a CP run's resumes on a
# layout without CP and the other way round, and the run goes on as the
# uninterrupted one:
#  1. dp 2 x cp 2 (ZeRO-1, 4 ranks) trains 6 steps saving every 3; its
#     step-3 checkpoint records dp 2 and cp 2, and resumed on the same
#     layout its losses of steps 4-6 equal the uninterrupted run's in all
#     9 printed digits;
#  2. that step-3 checkpoint resumed on one rank: losses within 1e-5
#     relative and final weights within 1e-4 of the CP run's
#     (tests/invariance/compare.c);
#  3. one rank trains 6 steps saving every 3; its step-3 checkpoint resumed
#     on dp 2 x cp 2 (the all_to_all form, ZeRO-3): the same tolerances.
#
#   usage: ckpt.sh PLANC OUTDIR COMPARE   (MPIRUN from the environment)
set -u
planc=$1; dir=$2; compare=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
inv="$root/tests/invariance/make-plan.sh"
rm -rf "$dir"; mkdir -p "$dir"
fails=0; n=0; t0=$(date +%s)
ok()   { n=$((n + 1)); printf 'ok   %s\n' "$1"; }
fail() { n=$((n + 1)); fails=$((fails + 1)); printf 'FAIL %s\n' "$1"; [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 12 "$2"; }
run()  { local np=$1; shift; (cd "$root" && $mpirun -np "$np" "$@" < /dev/null); }
losses() { sed -n 's/.*"step": \([0-9]*\),.*"loss": \([^,]*\),.*/\1 \2/p' "$1"; }

"$inv" "$dir/cp.plan"  4 "dp 2; cp 2; zero 1; micro_batch 2; schedule 1f1b;" 1e-6
"$inv" "$dir/a2a.plan" 4 "dp 2; cp 2; cp_comm all_to_all; zero 3; micro_batch 2; schedule 1f1b;" 1e-6
"$inv" "$dir/one.plan" 1 "dp 1; tp 1; pp 1; zero 0; micro_batch 16; schedule 1f1b;" 1e-6
for b in cp a2a one; do
    "$planc" build "$dir/$b.plan" -o "$dir/$b" > "$dir/$b.build.log" 2>&1 ||
        { fail "planc build $b" "$dir/$b.build.log"; echo "cp-ckpt: cannot go on"; exit 1; }
done
steps=6

# ---- 1. the CP run, saved and resumed on its own layout ------------------------------
run 4 "$dir/cp" --steps $steps --save "$dir/ck-cp" --save-every 3 --log-json "$dir/cp.jsonl" \
    --dump-params "$dir/cp.dump" > "$dir/cp.log" 2>&1 || fail "dp 2 x cp 2 run" "$dir/cp.log"
idx="$dir/ck-cp/step-00000003/index.json"
if grep -q '"dp": "2"' "$idx" && grep -q '"cp": "2"' "$idx"; then
    ok "the dp 2 x cp 2 checkpoint records its layout: dp 2, cp 2"
else
    fail "the CP checkpoint's metadata lacks dp 2 / cp 2" "$idx"
fi
run 4 "$dir/cp" --steps $steps --resume "$dir/ck-cp/step-00000003" --log-json "$dir/cp-again.jsonl" \
    > "$dir/cp-again.log" 2>&1 || fail "dp 2 x cp 2 resume" "$dir/cp-again.log"
if [ "$(losses "$dir/cp-again.jsonl")" = "$(losses "$dir/cp.jsonl" | awk '$1 > 3')" ] &&
   [ "$(losses "$dir/cp-again.jsonl" | wc -l)" = $((steps - 3)) ]; then
    ok "dp 2 x cp 2 resumed at step 3: losses of steps 4-$steps identical to the uninterrupted run (9 digits)"
else
    fail "dp 2 x cp 2 resume: losses differ"; paste <(losses "$dir/cp.jsonl") <(losses "$dir/cp-again.jsonl")
fi

# ---- 2. CP checkpoint -> one rank -----------------------------------------------------
sed -n '4,$p' "$dir/cp.jsonl" > "$dir/cp-after3.jsonl"
run 1 "$dir/one" --steps $steps --resume "$dir/ck-cp/step-00000003" --log-json "$dir/one-from-cp.jsonl" \
    --dump-params "$dir/one-from-cp.dump" > "$dir/one-from-cp.log" 2>&1 || fail "resume on one rank" "$dir/one-from-cp.log"
if out=$("$compare" "$dir/cp-after3.jsonl" "$dir/cp.dump" "$dir/one-from-cp.jsonl" "$dir/one-from-cp.dump"); then
    ok "dp 2 x cp 2 checkpoint resumed on one rank: $(echo "$out" | tail -n 1 | sed 's/^ *//')"
else
    fail "dp 2 x cp 2 checkpoint on one rank: $out"
fi

# ---- 3. one-rank checkpoint -> CP -------------------------------------------------------
run 1 "$dir/one" --steps $steps --save "$dir/ck-one" --save-every 3 --log-json "$dir/one.jsonl" \
    --dump-params "$dir/one.dump" > "$dir/one.log" 2>&1 || fail "one-rank run" "$dir/one.log"
if grep -q '"cp"' "$dir/ck-one/step-00000003/index.json"; then
    fail "a checkpoint without CP records a cp field (the format must stay as it was)"
else
    ok "a checkpoint without CP has no cp field: the format is unchanged"
fi
sed -n '4,$p' "$dir/one.jsonl" > "$dir/one-after3.jsonl"
run 4 "$dir/a2a" --steps $steps --resume "$dir/ck-one/step-00000003" --log-json "$dir/a2a.jsonl" \
    --dump-params "$dir/a2a.dump" > "$dir/a2a.log" 2>&1 || fail "resume on dp 2 x cp 2 all_to_all" "$dir/a2a.log"
if out=$("$compare" "$dir/one-after3.jsonl" "$dir/one.dump" "$dir/a2a.jsonl" "$dir/a2a.dump"); then
    ok "one-rank checkpoint resumed on dp 2 x cp 2 (all_to_all, ZeRO-3): $(echo "$out" | tail -n 1 | sed 's/^ *//')"
else
    fail "one-rank checkpoint on dp 2 x cp 2: $out"
fi

echo "cp-ckpt: $n checks, $fails failed, $(( $(date +%s) - t0 )) s"
[ "$fails" = 0 ]
