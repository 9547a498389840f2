#!/bin/bash
# run.sh: the layout-invariance test. Every line of cases.txt is a plan
# block; the plan is examples/tiny.plan with that block and a one-node CPU
# cluster of as many ranks as the layout needs (laptop.plan's device). Each
# case is built with `planc build` (two at a time), trained 5 steps under
# mpirun and held to its single-rank run (the `reference` line above it) by
# compare: losses within 1e-5 relative, final parameters within 1e-4 of each
# tensor's largest magnitude (an FP8 row, one with an `fp8 { ... }` block:
# compare's fp8 mode, whose essay says why and what it holds).
#
#   usage: run.sh PLANC OUTDIR COMPARE [NAME...]   (MPIRUN from the environment)
set -u
planc=$1; dir=$2; compare=$3; shift 3
only=" $* "
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
steps=5
# AdamW's update m/(sqrt(v)+eps) divides the float rounding noise of a
# gradient element that cancels to about eps by eps: with eps 1e-8 a single
# element can move 1e-4 of its tensor's largest weight between any two
# summation orders, even one rank with two micro-batch sizes (case ref-mb2
# shows it at eps 1e-8). eps 1e-6 keeps that noise ~100x under the tolerance
# without touching the model, the seed, the data or the learning rate.
eps=${INVARIANCE_EPS:-1e-6}
mkdir -p "$dir"

# Write case $1's plan for $2 ranks with plan body $3.
make_plan() { "$here/make-plan.sh" "$dir/$1.plan" "$2" "$3" "$eps"; }

fails=0; n=0; t0=$(date +%s)

# The cases to run, as "ref|case NAME RANKS BODY" lines (filtered by NAME...).
selected() {
    while read -r name np body; do
        case "$name" in ''|'#'*) continue ;; esac
        if [ "$name" = reference ]; then echo "ref $np $body"; continue; fi
        if [ "$only" != "  " ] && [[ "$only" != *" $name "* ]]; then continue; fi
        echo "case $name $np $body"
    done < "$here/cases.txt"
}

# Pass 1: write every plan and build every program, two compilers at a time.
selected | while read -r kind name np body; do make_plan "$name" "$np" "$body"; echo "$name"; done |
    xargs -P 2 -I{} sh -c '"$1" build "$2/$3.plan" -o "$2/$3" < /dev/null 2> "$2/$3.build.log" || touch "$2/$3.build-failed"' \
        sh "$planc" "$dir" {}

# Pass 2: train each (one mpirun at a time: they use every core) and compare.
ref=
while read -r kind name np body; do
    if [ -e "$dir/$name.build-failed" ]; then
        echo "FAIL $name: planc build failed:"; cat "$dir/$name.build.log"; rm -f "$dir/$name.build-failed"
        fails=$((fails + 1)); continue
    fi
    rm -f "$dir/$name.jsonl" "$dir/$name.dump"
    # `cpnodeK;`: the hierarchical CP form's nodes of K ranks (PLANRT_CP_NODE_RANKS)
    node=$(echo "$body" | sed -n 's/.*cpnode\([0-9][0-9]*\);.*/\1/p')
    if ! (cd "$root" && ${node:+env PLANRT_CP_NODE_RANKS=$node} $mpirun ${node:+-x PLANRT_CP_NODE_RANKS} \
            -np "$np" "$dir/$name" --steps $steps --log-json "$dir/$name.jsonl" \
            --dump-params "$dir/$name.dump" < /dev/null > "$dir/$name.log" 2>&1); then
        echo "FAIL $name: training failed:"; tail -n 20 "$dir/$name.log"; fails=$((fails + 1)); continue
    fi
    if [ "$kind" = ref ]; then
        ref=$name
        echo "reference $ref ($np rank): losses $(sed -n 's/.*"loss": \([0-9.]*\).*/\1/p' "$dir/$ref.jsonl" | tr '\n' ' ')"
        continue
    fi
    n=$((n + 1))
    mode=; case "$body" in *fp8\ \{*) mode=fp8 ;; esac   # FP8 rows: compare's fp8 tolerances
    # a `differs;` row trains another model than its reference's on purpose:
    # compare must fail (it shows the comparison can tell them apart)
    case "$body" in *differs\;*)
        if out=$("$compare" "$dir/$ref.jsonl" "$dir/$ref.dump" "$dir/$name.jsonl" "$dir/$name.dump" $mode); then
            printf 'FAIL %-20s %d ranks: matches %s, which trains another model\n%s\n' "$name" "$np" "$ref" "$out"
            fails=$((fails + 1))
        else
            printf 'ok   %-20s %d ranks  differs from %s, as it must (%s)\n' "$name" "$np" "$ref" \
                "$(echo "$out" | grep -m1 -i 'loss\|param' | sed 's/^ *//')"
        fi
        continue ;; esac
    if out=$("$compare" "$dir/$ref.jsonl" "$dir/$ref.dump" "$dir/$name.jsonl" "$dir/$name.dump" $mode); then
        printf 'ok   %-20s %d ranks  %s\n' "$name" "$np" "$(echo "$out" | tail -n 1 | sed 's/^ *//')"
    else
        printf 'FAIL %-20s %d ranks\n%s\n' "$name" "$np" "$out"; fails=$((fails + 1))
    fi
done < <(selected)
echo "invariance: $n layouts against their single-rank run, $fails failed, $(( $(date +%s) - t0 )) s"
[ "$fails" = 0 ]
