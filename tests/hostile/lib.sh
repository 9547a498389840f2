# lib.sh: helpers shared by the hostile-input tests (sourced, not run).
#
# plan_text MODEL CLUSTER DATA   a small valid one-rank CPU plan with the three
#                                texts inserted verbatim (hostile or not)
# expect NAME WANT_RC REGEX CMD...
#                                run CMD (10 s limit); pass if its exit status
#                                is WANT_RC ("any" accepts 0-2), its stderr
#                                matches REGEX (empty: anything) and no signal
#                                or sanitizer report ended it; prints the time
#                                it took when TIMED=1 and fails above LIMIT_S
# finish LABEL                   print the counts and return the status
pass=0 fail=0
HTMP=$(mktemp -d)
trap 'rm -rf "$HTMP"' EXIT

plan_text() {
    printf 'cluster %s {\n    nodes 1; gpus_per_node 1\n    device cpu\n}\n' "$2"
    printf 'model %s {\n    vocab 256; seq 16; dtype fp32\n    embedding { dim 32 }\n' "$1"
    printf '    repeat 2 { attention { heads 2 }; mlp { hidden 64 } }\n    norm {}\n    lm_head { tied true }\n}\n'
    printf 'plan { dp 1; tp 1; pp 1; zero 0; micro_batch 2; global_batch 2; schedule 1f1b; recompute none }\n'
    printf 'train { steps 2; lr 1e-3; warmup 0; seed 7; data %s }\n' "$3"
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

expect() {
    local name=$1 want=$2 re=$3
    shift 3
    local t0 t1 rc ok=1 why=""
    t0=$(now_ms)
    timeout 10 "$@" >"$HTMP/out" 2>"$HTMP/err"
    rc=$?
    t1=$(now_ms)
    if [ "$want" = any ]; then
        [ $rc -le 2 ] || { ok=0; why="exit $rc"; }
    elif [ "$rc" != "$want" ]; then
        ok=0; why="exit $rc, want $want"
    fi
    if [ -n "$re" ] && ! grep -Eq -- "$re" "$HTMP/err"; then ok=0; why="$why; stderr lacks /$re/"; fi
    if grep -q 'Sanitizer\|runtime error:' "$HTMP/err"; then ok=0; why="$why; sanitizer report"; fi
    local ms=$((t1 - t0))
    if [ "${TIMED:-0}" = 1 ] && [ "$ms" -gt $(( ${LIMIT_S:-2} * 1000 )) ]; then
        ok=0; why="$why; took $ms ms (limit ${LIMIT_S:-2} s)"
    fi
    if [ $ok = 1 ]; then
        pass=$((pass + 1))
        if [ "${TIMED:-0}" = 1 ]; then printf '  ok %-44s exit %d %6d ms\n' "$name" "$rc" "$ms"; fi
    else
        fail=$((fail + 1))
        echo "FAIL $name: $why"
        head -c 600 "$HTMP/err" | sed 's/^/    /'
    fi
}

finish() {
    echo "$1: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
