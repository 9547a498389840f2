#!/usr/bin/env bash
# rules_cli.sh: the one layout rule through the command line. GPT-2 (vocab
# 50257, which no tp > 1 divides) at tp 1, 2 and 4: `planc check` accepts
# it (exit 0) and reports the real parameter count, and the padded one when
# the layout pads; `planc emit` generates it (exit 0). Before the vocabulary
# was padded, check accepted tp 2 and 4 and emit refused them. At tp 8
# (which does not divide the 12 heads) both refuse it, with exit 2.
#
# usage: tests/rules_cli.sh PLANC
set -u
planc=${1:?usage: rules_cli.sh PLANC}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for tp in 1 2 4 8; do
    cat > "$tmp/gpt2.plan" <<PLAN
model gpt2 {
    vocab 50257; seq 1024; dtype bf16
    embedding { dim 768 }
    repeat 12 { attention { heads 12 }; mlp { hidden 3072 } }
    norm {}
    lm_head { tied true }
}
cluster c {
    nodes 1; gpus_per_node 8; device h100-sxm-80gb
    link intra { bandwidth 450 GB/s; latency 2 us }
}
plan { dp $((8 / tp)); tp $tp; pp 1; micro_batch 1; global_batch 8 }
PLAN
    "$planc" check --json "$tmp/gpt2.plan" > "$tmp/check.json" 2> "$tmp/err"; rc_check=$?
    "$planc" emit "$tmp/gpt2.plan" -o "$tmp/gpt2.c" 2>> "$tmp/err"; rc_emit=$?
    # params is the real model; params_padded appears exactly when tp pads
    want_pad=$(( (50257 % tp) != 0 ))
    has_pad=$(grep -c '"params_padded"' "$tmp/check.json")
    if [ $tp = 8 ]; then
        ok=$(( rc_check == 2 && rc_emit == 2 ))
    else
        ok=$(( rc_check == 0 && rc_emit == 0 && has_pad == want_pad ))
        grep -q '"params": 124439808,' "$tmp/check.json" || ok=0
    fi
    if [ $ok = 1 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL gpt2 tp $tp: check $rc_check, emit $rc_emit, params_padded $has_pad (want $want_pad)"
        cat "$tmp/err"
    fi
done
echo "rules through planc: $pass passed, $fail failed"
[ $fail = 0 ]
