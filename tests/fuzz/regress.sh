#!/usr/bin/env bash
# regress.sh: every input the fuzzers ever broke planc with (tests/fuzz/regress/)
# through the real driver: `planc check` must end with a diagnostic or a
# result (exit 0, 1 or 2, never a signal or a sanitizer report) within 10 s,
# and `planc fmt` must exit 0 or 2, its output formatting to the same bytes.
#
# usage: tests/fuzz/regress.sh PLANC
set -u
planc=${1:?usage: regress.sh PLANC}
cd "$(dirname "$0")/../.."
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad() { echo "FAIL $1: $2"; sed 's/^/    /' "$tmp/err" | head -5; fail=$((fail + 1)); }
for f in tests/fuzz/regress/*; do
    [ -f "$f" ] || continue
    timeout 10 "$planc" check "$f" >/dev/null 2>"$tmp/err"
    rc=$?
    if [ $rc -gt 2 ] || grep -q 'Sanitizer\|runtime error' "$tmp/err"; then bad "$f" "check exit $rc"; continue; fi
    timeout 10 "$planc" fmt "$f" >"$tmp/once.plan" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 2 ]; then bad "$f" "fmt exit $rc"; continue; fi
    if [ $rc -eq 0 ]; then
        timeout 10 "$planc" fmt "$tmp/once.plan" >"$tmp/twice.plan" 2>"$tmp/err"
        if ! cmp -s "$tmp/once.plan" "$tmp/twice.plan"; then bad "$f" "fmt is not idempotent"; continue; fi
    fi
    pass=$((pass + 1))
done
echo "fuzz regressions through planc: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
