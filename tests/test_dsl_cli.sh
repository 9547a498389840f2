#!/usr/bin/env bash
# test_dsl_cli.sh: the driver's front-end behaviour: help and version, usage
# errors, exit codes, stdout/stderr discipline, and that every example
# checks (exit 0) and formats.
#
# usage: tests/test_dsl_cli.sh PLANC
set -u
planc=${1:?usage: test_dsl_cli.sh PLANC}
cd "$(dirname "$0")/.."
pass=0 fail=0
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

# expect NAME WANT_RC STDOUT_REGEX STDERR_REGEX -- ARGS...
# An empty regex means "must be empty".
expect() {
    local name=$1 want=$2 re_out=$3 re_err=$4
    shift 5
    "$planc" "$@" >"$out" 2>"$err"
    local rc=$? ok=1
    [ "$rc" = "$want" ] || ok=0
    if [ -z "$re_out" ]; then [ -s "$out" ] && ok=0; else grep -Eq -- "$re_out" "$out" || ok=0; fi
    if [ -z "$re_err" ]; then [ -s "$err" ] && ok=0; else grep -Eq -- "$re_err" "$err" || ok=0; fi
    if [ $ok = 1 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL $name: planc $* -> exit $rc (want $want)"
        sed 's/^/  stdout: /' "$out" | head -5
        sed 's/^/  stderr: /' "$err" | head -5
    fi
}

expect version        0 '^planc [0-9]+\.[0-9]+\.[0-9]+$' '' -- --version
expect help           0 'usage: planc COMMAND'        ''  -- --help
expect check-help     0 'usage: planc check FILE'     ''  -- check --help
expect fmt-help       0 'usage: planc fmt FILE'       ''  -- fmt -h
expect no-args        2 '' 'usage: planc COMMAND'         --
expect unknown-cmd    2 '' "unknown command 'chek'; did you mean 'check'\?" -- chek x.plan
expect no-file        2 '' 'check: needs a FILE'         -- check
expect bad-option     2 '' "unknown option '--jsn'"       -- check --jsn examples/tiny.plan
expect missing-file   2 '' "^planc: error: cannot read 'no/such.plan'" -- check no/such.plan
expect fmt-syntax     2 '' 'tests/bad/unclosed-brace.plan:[0-9]+:[0-9]+: error: ' -- fmt tests/bad/unclosed-brace.plan
expect json           0 '^\{' ''                          -- check --json examples/tiny.plan
expect bad-no-stdout  2 '' 'error: '                      -- check --json tests/bad/bad-enum.plan
for f in examples/*.plan; do
    expect "check $f" 0 '.' '' -- check "$f"
done
for f in examples/*.plan examples/clusters/*.plan; do
    expect "fmt $f" 0 '.' '' -- fmt "$f"
done
echo "planc cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
