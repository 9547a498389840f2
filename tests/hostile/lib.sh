# lib.sh: helpers shared by the hostile-input tests (sourced, not run).
#
# plan_text MODEL CLUSTER DATA   a small valid one-rank CPU plan with the three
#                                texts inserted verbatim (hostile or not)
# expect NAME WANT_RC REGEX CMD...
#                                run CMD (10 s limit); pass if its exit status
#                                is WANT_RC ("any" accepts 0-2), its stderr
#                                matches REGEX (empty: anything) and no signal
#                                or sanitizer report ended it; with TIMED=1
#                                prints its CPU and wall time and fails when
#                                the CPU time is above LIMIT_S seconds
# finish LABEL                   print the counts and return the status
#
# A case whose name is listed in tests/hostile/known-bugs (a bug in another
# module, reported to its owner) is counted as XFAIL instead of failing; if
# it passes, XPASS says to take it off the list.
pass=0 fail=0 xfail=0
KNOWN_BUGS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/known-bugs
is_known() { grep -qxF -- "$1" "$KNOWN_BUGS" 2>/dev/null; }
verdict() {   # NAME OK WHY: count one case
    if [ "$2" = 1 ]; then
        pass=$((pass + 1))
        is_known "$1" && echo "XPASS $1: fixed; remove it from tests/hostile/known-bugs"
        return 0
    fi
    if is_known "$1"; then
        xfail=$((xfail + 1)); echo "XFAIL $1: $3 (known bug, see tests/hostile/known-bugs)"
    else
        fail=$((fail + 1)); echo "FAIL $1: $3"
    fi
    return 1
}
HTMP=$(mktemp -d)
trap 'rm -rf "$HTMP"' EXIT

plan_text() {
    printf 'cluster %s {\n    nodes 1; gpus_per_node 1\n    device cpu\n}\n' "$2"
    printf 'model %s {\n    vocab 256; seq 16; dtype fp32\n    embedding { dim 32 }\n' "$1"
    printf '    repeat 2 { attention { heads 2 }; mlp { hidden 64 } }\n    norm {}\n    lm_head { tied true }\n}\n'
    printf 'plan { dp 1; tp 1; pp 1; zero 0; micro_batch 2; global_batch 2; schedule 1f1b; recompute none }\n'
    printf 'train { steps 2; lr 1e-3; warmup 0; seed 7; data %s }\n' "$3"
}

expect() {
    local name=$1 want=$2 re=$3
    shift 3
    local rc ok=1 why="" times
    local TIMEFORMAT='%3R %3U %3S'
    { time timeout 10 "$@" >"$HTMP/out" 2>"$HTMP/err"; } 2>"$HTMP/time"
    rc=$?
    times=$(tail -1 "$HTMP/time")
    if [ "$want" = any ]; then
        [ $rc -le 2 ] || { ok=0; why="exit $rc"; }
    elif [ "$want" = refused ]; then   # a clean refusal: 1..123, not a timeout or signal
        [ $rc -ge 1 ] && [ $rc -le 123 ] || { ok=0; why="exit $rc, want a refusal"; }
    elif [ "$rc" != "$want" ]; then
        ok=0; why="exit $rc, want $want"
    fi
    if [ -n "$re" ] && ! grep -Eq -- "$re" "$HTMP/err"; then ok=0; why="$why; stderr lacks /$re/"; fi
    if grep -q 'Sanitizer\|runtime error:' "$HTMP/err"; then ok=0; why="$why; sanitizer report"; fi
    # wall and CPU (user + system) milliseconds; the limit is on CPU time,
    # which other jobs on a shared machine do not inflate
    local wall cpu
    wall=$(awk '{ printf "%d", $1 * 1000 }' <<<"$times")
    cpu=$(awk '{ printf "%d", ($2 + $3) * 1000 }' <<<"$times")
    if [ "${TIMED:-0}" = 1 ] && [ "$cpu" -gt $(( ${LIMIT_S:-2} * 1000 )) ]; then
        ok=0; why="$why; took $cpu ms of CPU (limit ${LIMIT_S:-2} s)"
    fi
    if verdict "$name" $ok "$why"; then
        if [ "${TIMED:-0}" = 1 ]; then
            printf '  ok %-44s exit %d %6d ms CPU %6d ms wall\n' "$name" "$rc" "$cpu" "$wall"
        fi
    else
        head -c 600 "$HTMP/err" | sed 's/^/    /'
    fi
}

finish() {
    echo "$1: $pass passed, $fail failed, $xfail known bugs of other modules"
    [ "$fail" -eq 0 ]
}
