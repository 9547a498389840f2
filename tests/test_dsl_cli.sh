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
# Every subcommand: -h and --help print its usage on stdout and exit 0.
for cmd in check fmt search emit build trace; do
    for h in -h --help; do
        expect "$cmd $h" 0 "^usage: planc $cmd FILE" '' -- $cmd $h
        expect "$cmd FILE $h" 0 "^usage: planc $cmd FILE" '' -- $cmd examples/tiny.plan $h
    done
done
# An option without its value says so, with an example, and exits 2.
# (subcommand, option, the example's value)
while read -r cmd opt meta; do
    want="^planc: error: $cmd: option '$opt' needs a value \\(planc $cmd $opt $meta\\)\$"
    expect "$cmd $opt (last)" 2 '' "$want" -- $cmd examples/tiny.plan $opt
    expect "$cmd $opt --json" 2 '' "$want" -- $cmd examples/tiny.plan $opt --json
done <<'EOF_OPTS'
emit -o OUT.c
build -o EXE
build --target cpu\|cuda
build --launch mpirun\|slurm
trace -o OUT.svg
trace --schedule 1f1b
trace --chunks V
trace --compare MEASURED.json
search --top K
search --max-tp N
search --write OUT.plan
search --svg OUT.svg
EOF_OPTS
expect emit-no-file   2 '' "^planc: error: emit: needs a FILE"        -- emit
expect build-no-exe   2 '' "^planc: error: build: needs -o EXE"       -- build examples/tiny.plan
expect emit-bad-opt   2 '' "^planc: error: emit: unknown option '-x'" -- emit examples/tiny.plan -x
expect build-target   2 '' "unknown target 'gpu' \(cpu or cuda\)"    -- build examples/tiny.plan -o x --target gpu
expect emit-two-files 2 '' "more than one file \('b.plan'\)"         -- emit a.plan b.plan

# Issue 29 item 4: the CPU target computes in fp32, so build --target cpu
# refuses a 16-bit plan at its dtype key (or at the model block, whose dtype
# is bf16 by default), exit 1, before writing anything; check keeps bf16;
# emit's program of a bf16 plan stops a CPU compile with the same words.
dt=$(mktemp -d)
cp -r examples/clusters "$dt/clusters"
sed 's/dtype fp32;/dtype bf16;/' examples/tiny.plan > "$dt/bf16.plan"
sed 's/dtype fp32;/dtype fp16;/' examples/tiny.plan > "$dt/fp16.plan"
sed 's/ *dtype fp32;//' examples/tiny.plan > "$dt/nodtype.plan"
dline=$(grep -n 'dtype fp32;' examples/tiny.plan | cut -d: -f1)
dcol=$(grep 'dtype fp32;' examples/tiny.plan | awk '{ print index($0, "dtype fp32;") + 6 }')
mline=$(grep -n '^model ' examples/tiny.plan | cut -d: -f1)
expect build-cpu-bf16 1 '' "^$dt/bf16.plan:$dline:$dcol: error: dtype bf16: the CPU target computes in fp32 .* planc predicts bf16 memory\$" \
    -- build "$dt/bf16.plan" -o "$dt/bf16"
grep -q "note: write \`dtype fp32\` in the model block to build for the CPU, or build --target cuda" "$err" &&
    [ ! -e "$dt/bf16.cu" ] && [ ! -e "$dt/bf16" ] && pass=$((pass + 1)) || {
    fail=$((fail + 1)); echo "FAIL build-cpu-bf16: no note naming dtype fp32, or it wrote $dt/bf16.cu"; }
expect build-cpu-fp16 1 '' "^$dt/fp16.plan:$dline:$dcol: error: dtype fp16: the CPU target computes in fp32" \
    -- build "$dt/fp16.plan" -o "$dt/fp16" --target cpu
expect build-cpu-default 1 '' "^$dt/nodtype.plan:$mline:1: error: model tiny has no dtype, so bf16 \(the default\): the CPU target" \
    -- build "$dt/nodtype.plan" -o "$dt/nodtype"
expect check-bf16     0 'tiny' '' -- check "$dt/bf16.plan"
expect emit-bf16      0 '^#error "dtype bf16: the CPU target computes in fp32' '' -- emit "$dt/bf16.plan"
grep -B1 '^#error' "$out" | head -n 1 | grep -qx '#ifndef PRT_CUDA' && pass=$((pass + 1)) || {
    fail=$((fail + 1)); echo "FAIL emit-bf16: the #error is not under #ifndef PRT_CUDA"; }
"$planc" emit examples/tiny.plan 2>/dev/null | grep -q '#error' && {
    fail=$((fail + 1)); echo "FAIL emit-fp32: tiny's fp32 program has an #error"; } || pass=$((pass + 1))
# an fp32 model with fp8 (software planc's own) exports with a note that
# the framework's FP8 is checked on a 16-bit model
tests/invariance/make-plan.sh "$dt/fp8.plan" 1 "micro_batch 8; fp8 { recipe tensorwise }"
expect export-fp8-fp32 0 '--fp8-format hybrid' "note: megatron: fp8 with dtype fp32: .*under \`software megatron-core\` its FP8 rule wants a 16-bit model" \
    -- export "$dt/fp8.plan" --to megatron
tests/invariance/make-plan.sh "$dt/fp8-llama.plan" 1 "llama; micro_batch 8; fp8 { recipe tensorwise }"
expect export-fp8-tt   0 'quantize.linear.float8' "note: torchtitan: fp8 with dtype fp32: .*\`software torchtitan\`" \
    -- export "$dt/fp8-llama.plan" --to torchtitan
rm -rf "$dt"

# A UTF-8 byte-order mark (as some editors write) is skipped, in the file
# and in the files it includes: the same output as without one.
bom=$(mktemp -d)
mkdir "$bom/clusters"
printf '\xef\xbb\xbf' | cat - examples/tiny.plan >"$bom/tiny.plan"
printf '\xef\xbb\xbf' | cat - examples/clusters/laptop.plan >"$bom/clusters/laptop.plan"
"$planc" check --json examples/tiny.plan 2>&1 | sed 's|examples/||g' >"$bom/want"
expect "check with BOM" 0 '.' '' -- check --json "$bom/tiny.plan"
sed "s|$bom/||g" "$out" | cmp -s - "$bom/want" && pass=$((pass + 1)) || {
    fail=$((fail + 1)); echo "FAIL check with BOM: output differs from examples/tiny.plan's"; }
rm -rf "$bom"

# The software keys: check predicts any setting (exit 0); emit refuses,
# exit 1 naming the key, one planc's runtime cannot honour on tiny's
# layout (dp 2, tp 2, pp 2, ZeRO-1), and emits overlap_grad_reduce false;
# fmt and search --write keep the key.
sw=$(mktemp -d)
for kv in "overlap_tp true" "overlap_p2p false" "overlap_param_gather true" "overlap_grad_reduce false" \
          "grad_accum_fusion false" "cross_entropy_fusion false" "optimizer foreach" "fused_norm false" \
          "software torchtitan"; do
    key=${kv%% *}
    sed "s|^    recompute none;|    recompute none; $kv;|" examples/tiny.plan >"$sw/$key.plan"
    cp -r examples/clusters examples/data "$sw/" 2>/dev/null
    expect "check $kv" 0 '.' '' -- check "$sw/$key.plan"
    expect "fmt keeps $kv" 0 "^    $kv( |\$)" '' -- fmt "$sw/$key.plan"
    # search --write replaces the layout and keeps the software it took as given
    expect "search --write $kv" 0 '.' '' -- search "$sw/$key.plan" --top 1 --write "$sw/$key.best.plan"
    expect "search --write keeps $kv" 0 "^    $kv( |\$)" '' -- fmt "$sw/$key.best.plan"
    if [ "$key" = overlap_grad_reduce ] || [ "$key" = fused_norm ]; then
        # honoured: the reductions wait for the flush; tiny has no RMSNorm
        expect "emit $kv" 0 '' '' -- emit "$sw/$key.plan" -o "$sw/$key.c"
    elif [ "$key" = software ]; then
        expect "emit $kv" 1 '' "cannot generate the program: software torchtitan eager sets overlap_param_gather true" \
            -- emit "$sw/$key.plan" -o "$sw/$key.c"
    else
        expect "emit $kv" 1 '' "cannot generate the program: $kv: planc's runtime cannot honour it" \
            -- emit "$sw/$key.plan" -o "$sw/$key.c"
    fi
done
rm -rf "$sw"

for f in examples/*.plan; do
    expect "check $f" 0 '.' '' -- check "$f"
done
for f in examples/*.plan examples/clusters/*.plan validation/*.plan validation/other/*.plan; do
    expect "fmt $f" 0 '.' '' -- fmt "$f"
done
echo "planc cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
