#!/usr/bin/env bash
# limits.sh: inputs built to exhaust planc (issue 10, part 4). Each must end
# with a diagnostic (exit 2; exit 1 for a valid plan that does not fit)
# well under a second; the test allows LIMIT_S=2 s of CPU per input (wall
# time on a shared 2-core machine says little) and a 10 s wall limit, and
# prints both times. Nothing may wrap, hang or run out of memory.
#
# usage: tests/hostile/limits.sh PLANC
set -u
planc=${1:?usage: limits.sh PLANC}
cd "$(dirname "$0")/../.."
. tests/hostile/lib.sh
TIMED=1
LIMIT_S=${LIMIT_S:-2}
d=$HTMP
cluster='cluster one { nodes 1; gpus_per_node 1; device cpu }'
model_with() {   # BLOCKS: the transformer blocks of a small model
    printf '%s\nmodel m {\n    vocab 256; seq 16\n    embedding { dim 32 }\n%s\n    norm {}\n    lm_head\n}\n' "$cluster" "$1"
}

# ---- repeat counts ----------------------------------------------------------------
model_with 'repeat 1000000000000 { attention { heads 2 }; mlp {} }' >$d/r1.plan
expect "repeat 10^12" 2 "'repeat' must be between 1 and 100000" "$planc" check $d/r1.plan
model_with 'repeat 100000000000000000000 { attention { heads 2 } }' >$d/r2.plan
expect "repeat 10^20 (64-bit overflow)" 2 'does not fit in 64 bits' "$planc" check $d/r2.plan
model_with 'repeat 100000 { repeat 100000 { repeat 100000 { attention { heads 2 }; mlp {} } } }' >$d/r3.plan
expect "nested repeat 10^15 layers" 2 'makes the model more than 100000 layers' "$planc" check $d/r3.plan
{ printf '%s\nmodel m {\n vocab 256; seq 16\n embedding { dim 32 }\n' "$cluster"
  for i in $(seq 30); do printf 'repeat 2 {\n'; done
  printf 'attention { heads 2 }\n'
  for i in $(seq 30); do printf '}\n'; done
  printf 'lm_head\n}\n'; } >$d/r4.plan
expect "30 nested repeat 2 (2^30 layers)" 2 'more than 100000 layers' "$planc" check $d/r4.plan

# ---- nesting -------------------------------------------------------------------------
{ for i in $(seq 100000); do printf 'a {'; done; } >$d/n1.plan
expect "100000 nested blocks" 2 'blocks nested deeper than 32 levels' "$planc" check $d/n1.plan
{ for i in $(seq 100000); do printf '}'; done; } >$d/n2.plan
expect "100000 unmatched }" 2 "'}' without a matching '\{'" "$planc" check $d/n2.plan

# ---- model size: 10^20 parameters ------------------------------------------------------
printf '%s\nmodel m {\n vocab 100000000000; seq 16\n embedding { dim 10000000000 }\n repeat 1000000 { attention { heads 100000 }; mlp { hidden 100000000000 } }\n lm_head\n}\n' \
    "$cluster" >$d/p1.plan
expect "10^20 parameters (dims beyond limits)" 2 "must be between" "$planc" check $d/p1.plan
# The largest model the limits allow: ~2*10^18 parameters, whose training
# state (16 bytes per parameter) does not fit in 64 bits of bytes.
printf '%s\nmodel m {\n vocab 2147483647; seq 16777216\n embedding { dim 1048576 }\n repeat 49998 { attention { heads 65536 }; mlp { hidden 16777216 } }\n norm {}\n lm_head { tied false }\n}\nplan { dp 1; tp 1; pp 1; micro_batch 1; global_batch 1 }\n' \
    "$cluster" >$d/p2.plan
expect "2*10^18 parameters (bytes overflow 64 bits)" 1 '' "$planc" check $d/p2.plan
expect "2*10^18 parameters, --json" 1 '' "$planc" check --json $d/p2.plan
python3 - "$HTMP/out" <<'PY' >"$HTMP/py" 2>&1
import json, sys
j = json.load(open(sys.argv[1]))
h, f, V, S, n = 1048576, 16777216, 2147483647, 16777216, 49998
# planner/model.c: embedding V*h + learned positions S*h; attention with
# biases: QKV h*3h + 3h, output h*h + h, pre-norm 2h; MLP (gelu) h*f + f +
# f*h + h, pre-norm 2h; final norm 2h; untied head V*h.
att = 3*h*h + 3*h + h*h + h + 2*h
mlp = 2*h*f + f + h + 2*h
want = V*h + S*h + n*(att + mlp) + 2*h + V*h
got = j.get("params")
peak = j.get("peak_memory_bytes", 0)
print("params %s (exact %d), feasible %s, peak_memory_bytes %s" % (got, want, j.get("feasible"), peak))
# exact count, does not fit, and the peak is not a wrapped value (the
# training state alone is 16 bytes per parameter)
ok = got == want and j.get("feasible") is False and peak >= min(16 * want, 2**64 - 1)
sys.exit(0 if ok else 1)
PY
ok=$?
sed 's/^/    /' "$HTMP/py"
verdict "2*10^18 parameters: exact count, no wrap" $((ok == 0)) "wrong figures"
# Activations beyond 64 bits with few parameters: seq 2^24 x dim 2^20 x
# micro_batch 2^40.
printf '%s\nmodel m {\n vocab 256; seq 16777216\n embedding { dim 1048576 }\n repeat 1 { attention { heads 16 }; mlp { hidden 1024 } }\n lm_head\n}\nplan { dp 1; tp 1; pp 1; micro_batch 1099511627776; global_batch 1099511627776 }\n' \
    "$cluster" >$d/p3.plan
expect "activations beyond 2^64 bytes" 1 '' "$planc" check $d/p3.plan

# ---- big files ---------------------------------------------------------------------------
head -c $((5 << 20)) /dev/zero | tr '\0' '#' >$d/big.plan
expect "5 MiB file" 2 'larger than the 4 MiB limit' "$planc" check $d/big.plan
{ model_with 'repeat 2 { attention { heads 2 }; mlp {} }'; yes '# a comment line of a big but valid file' | head -c $((4000 << 10)); } >$d/c.plan
expect "4 MB of comments (valid)" 0 '' "$planc" check $d/c.plan
expect "4 MB of comments, fmt" 0 '' "$planc" fmt $d/c.plan
yes 'vocab 1' | head -c $((4000 << 10)) >$d/dup.plan
expect "4 MB of statements" 2 "unknown key 'vocab' in the file" "$planc" check $d/dup.plan
head -c $((4000 << 10)) /dev/zero | tr '\0' '\377' >$d/bytes.plan
expect "4 MB of byte 0xff" 2 'stray byte 0xff' "$planc" check $d/bytes.plan
{ printf 'x "'; head -c $((4000 << 10)) /dev/zero | tr '\0' 's'; printf '"\n'; } >$d/str.plan
expect "4 MB string" 2 'longer than the 4095 allowed' "$planc" check $d/str.plan
head -c $((4000 << 10)) /dev/zero | tr '\0' 'w' >$d/word.plan
expect "4 MB name" 2 'longer than the 128 allowed' "$planc" check $d/word.plan
{ printf 'x'; yes ' 1' | tr -d '\n' | head -c $((4000 << 10)); echo; } >$d/args.plan
expect "one statement of 2M numbers" 2 "'x' in the file" "$planc" check $d/args.plan
head -c $((4000 << 10)) /dev/zero | tr '\0' '9' >$d/num.plan
expect "4 MB number" 2 'does not fit in 64 bits' "$planc" check $d/num.plan

# ---- includes ------------------------------------------------------------------------------
mkdir -p $d/inc
for i in $(seq 0 20); do printf 'include "c%d.plan"\n' $((i + 1)) >$d/inc/c$i.plan; done
echo "$cluster" >$d/inc/c21.plan
expect "include chain of 21" 2 'includes nested deeper than 16 files' "$planc" check $d/inc/c0.plan
printf 'include "self.plan"\n' >$d/inc/self.plan
expect "include itself" 2 'include cycle' "$planc" check $d/inc/self.plan
for i in $(seq 0 9); do
    for k in $(seq 100); do printf 'include "b%d.plan"\n' $((i + 1)); done >$d/inc/b$i.plan
done
echo '# leaf' >$d/inc/b10.plan
expect "include bomb (100^10 files)" 2 'more than 256 included files in all' "$planc" check $d/inc/b0.plan
yes '# filler of a large included file' | head -c $((4000 << 10)) >$d/inc/big.plan
for k in $(seq 6); do echo 'include "big.plan"'; done >$d/inc/bigs.plan
expect "6 includes of 4 MB" 2 'more than 16 MiB in all' "$planc" check $d/inc/bigs.plan
printf 'include "/dev/zero"\n' >$d/inc/zero.plan
expect "include /dev/zero" 2 'not a regular file' "$planc" check $d/inc/zero.plan
printf 'include "."\n' >$d/inc/dir.plan
expect "include a directory" 2 'not a regular file' "$planc" check $d/inc/dir.plan
mkfifo $d/inc/fifo.plan 2>/dev/null && printf 'include "fifo.plan"\n' >$d/inc/fifo-inc.plan &&
    expect "include a FIFO" 2 'not a regular file' "$planc" check $d/inc/fifo-inc.plan
expect "check a FIFO" 2 'not a regular file' "$planc" check $d/inc/fifo.plan
finish "resource limits"
