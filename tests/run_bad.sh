#!/usr/bin/env bash
# run_bad.sh: the malformed-input corpus. For every tests/bad/NAME.plan,
# `planc check` must print, as its first diagnostic, exactly the first line
# of tests/bad/NAME.err (FILE:LINE:COL: error: MESSAGE), exit with the code
# on its second line (`exit N`), and not crash (no signal, no sanitizer
# report). An optional third line `errors N` also pins the number of errors
# (no cascade after the first, or the errors found after recovering). With
# --update the .err files are rewritten from planc's output, the `errors`
# line only where there was one (review the diff before committing).
#
# usage: tests/run_bad.sh PLANC [--update]
set -u
planc=${1:?usage: run_bad.sh PLANC [--update]}
update=${2:-}
cd "$(dirname "$0")/.."
pass=0 fail=0
for plan in tests/bad/*.plan; do
    err=${plan%.plan}.err
    out=$(timeout 10 "$planc" check "$plan" 2>&1 >/dev/null)
    rc=$?
    first=$(printf '%s\n' "$out" | grep -m1 ': error: ' || true)
    nerr=$(printf '%s\n' "$out" | grep -c ': error: ')
    if [ "$update" = --update ]; then
        counted=$([ -f "$err" ] && sed -n 3p "$err")
        printf '%s\nexit %d\n' "$first" "$rc" > "$err"
        [ -n "$counted" ] && printf 'errors %d\n' "$nerr" >> "$err"
        continue
    fi
    if [ ! -f "$err" ]; then
        echo "FAIL $plan: no $err (run: make update-bad)"; fail=$((fail + 1)); continue
    fi
    want=$(sed -n 1p "$err")
    want_rc=$(sed -n 2p "$err" | sed 's/^exit //')
    want_n=$(sed -n 3p "$err" | sed 's/^errors //')
    if [ "$rc" -ge 128 ] || printf '%s' "$out" | grep -q 'Sanitizer\|runtime error'; then
        echo "FAIL $plan: crashed (exit $rc)"; printf '%s\n' "$out" | head -5; fail=$((fail + 1))
    elif [ "$first" != "$want" ] || [ "$rc" != "$want_rc" ]; then
        echo "FAIL $plan"
        echo "  want: $want (exit $want_rc)"
        echo "  got:  $first (exit $rc)"
        fail=$((fail + 1))
    elif [ -n "$want_n" ] && [ "$nerr" != "$want_n" ]; then
        echo "FAIL $plan: $nerr errors, want $want_n"
        printf '%s\n' "$out" | grep ': error: ' | head -5 | sed 's/^/  /'
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
done
[ "$update" = --update ] && { echo "updated $(ls tests/bad/*.err | wc -l) .err files"; exit 0; }
echo "bad inputs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
