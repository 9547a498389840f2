#!/usr/bin/env bash
# run.sh PLANC OUTDIR: test-trace-measured, the executable's --trace.
#
# Each case is tests/invariance/make-plan.sh's variant of examples/tiny.plan
# (its model and data, one CPU node with as many ranks as the layout needs)
# with the plan block below. It is built with `planc build`, trained 2 steps
# under mpirun with --trace (the last step, or --trace-step 0), and
# check.py holds the measured file to `planc trace FILE -o pred.json`:
# every op of every stage exactly once per rank, in list order, no overlap
# on a tid; then `planc trace --compare` draws it and the SVG is parsed.
# check.py is itself checked to fail on a trace with an op missing, an op
# repeated, or two overlapping ops; bad --trace options must be refused.
#   (MPIRUN from the environment)
set -u
planc=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
mkdir -p "$out"
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# name | dp tp pp | plan block body | --trace-step (empty: default, the last)
cases=(
    "pp2-1f1b|1 1 2|dp 1; tp 1; pp 2; zero 0; micro_batch 2; schedule 1f1b;|"
    "dp2-pp2-z1|2 1 2|dp 2; tp 1; pp 2; zero 1; micro_batch 2; schedule 1f1b;|0"
    "pp2-interleaved|1 1 2|dp 1; tp 1; pp 2; zero 0; micro_batch 2; schedule interleaved; chunks 2;|"
    "dp2-pp2-z3-zbh1|2 1 2|dp 2; tp 1; pp 2; zero 3; micro_batch 2; schedule zb-h1;|"
)

# Build every case, two compilers at a time.
for c in "${cases[@]}"; do
    IFS='|' read -r name layout body step <<< "$c"
    set -- $layout
    "$root/tests/invariance/make-plan.sh" "$out/$name.plan" $(($1 * $2 * $3)) "$body"
    echo "$name"
done | xargs -P 2 -I{} sh -c '"$1" build "$2/$3.plan" -o "$2/$3" < /dev/null > "$2/$3.build.log" 2>&1 || touch "$2/$3.build-failed"' \
    sh "$planc" "$out" {}

for c in "${cases[@]}"; do
    IFS='|' read -r name layout body step <<< "$c"
    read -r dp tp pp <<< "$layout"
    np=$((dp * tp * pp))
    if [ -e "$out/$name.build-failed" ]; then
        rm -f "$out/$name.build-failed"; bad "$name: planc build failed:"; tail -n 5 "$out/$name.build.log" >&2; continue
    fi
    rm -f "$out/$name.json"
    opt=(); want=1
    [ -n "$step" ] && { opt=(--trace-step "$step"); want=$step; }
    if ! (cd "$root" && $mpirun -np $np "$out/$name" --steps 2 --trace "$out/$name.json" "${opt[@]}" \
            < /dev/null > "$out/$name.log" 2>&1); then
        bad "$name: training with --trace failed:"; tail -n 10 "$out/$name.log" >&2; continue
    fi
    "$planc" trace "$out/$name.plan" -o "$out/$name.pred.json" > /dev/null || { bad "$name: planc trace"; continue; }
    "$planc" trace "$out/$name.plan" --compare "$out/$name.json" -o "$out/$name.cmp.svg" > "$out/$name.cmp.log" 2>&1 ||
        { bad "$name: planc trace --compare:"; cat "$out/$name.cmp.log" >&2; continue; }
    echo "$name ($np ranks, dp $dp tp $tp pp $pp, step $want traced): $(grep -o 'measured: step[^<]*' "$out/$name.cmp.svg" | head -1)"
    python3 "$here/check.py" "$out/$name.json" "$out/$name.pred.json" $dp $tp $pp \
        --svg "$out/$name.cmp.svg" --step $want || bad "$name: check.py"
done

# check.py must catch a broken trace: an op dropped, an op repeated, an
# op moved to overlap the one before it on its tid.
m=$out/pp2-1f1b.json p=$out/pp2-1f1b.pred.json
if [ -e "$m" ]; then
    for mut in drop repeat overlap; do
        python3 - "$m" "$out/mut-$mut.json" "$mut" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1])); mut = sys.argv[3]
xs = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["args"]["rank"] == 1 and e["tid"] == 0]
if mut == "drop": doc["traceEvents"].remove(xs[3])
elif mut == "repeat": doc["traceEvents"].append(dict(xs[3]))
else: xs[4]["ts"] = xs[3]["ts"] + xs[3]["dur"] / 2
json.dump(doc, open(sys.argv[2], "w"))
EOF
        if python3 "$here/check.py" "$out/mut-$mut.json" "$p" 1 1 2 > /dev/null 2> "$out/mut-$mut.err"; then
            bad "check.py accepted a trace with an op ${mut}ped/repeated/overlapping ($mut)"
        else
            echo "✓ check.py refuses a trace with one op $mut: $(head -1 "$out/mut-$mut.err")"
        fi
    done
fi

# Bad options: refused before training, with a message, exit 2.
exe=$out/pp2-1f1b
if [ -x "$exe" ]; then
    for args in "--trace $out/x.json --trace-step 2" "--trace $out/x.json --trace-step -1" \
                "--trace $out/x.json --trace-step one" "--trace-step 0" "--trace"; do
        rc=0
        (cd "$root" && $mpirun -np 2 "$exe" --steps 2 $args < /dev/null > "$out/badopt.log" 2>&1) || rc=$?
        msg=$(grep -m1 'error' "$out/badopt.log")
        if [ $rc = 0 ] || [ -z "$msg" ] || [ -e "$out/x.json" ]; then
            bad "'$args' was not refused (status $rc)"; cat "$out/badopt.log" >&2
        else
            echo "✓ refused '$args': $msg"
        fi
    done
fi

[ $fails = 0 ] && echo "test-trace-measured: ${#cases[@]} layouts traced and checked, 0 failures" ||
    echo "test-trace-measured: $fails failure(s)" >&2
exit $((fails > 0))
