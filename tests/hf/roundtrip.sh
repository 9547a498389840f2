#!/bin/bash
# roundtrip.sh: make test-hf-roundtrip (issue 28). For each tiny model of
# Hugging Face's architectures, a random directory made by hfdir.py (the
# standard library alone) starts a planc run on a non-trivial layout with
# --steps 0 (load, reshard, save, export: no step), and the exported
# directory must hold the same tensors bit for bit (fp32 and bf16
# sources, one file and sharded); a run of one step from it must log the
# loss transformers' modeling code gives that batch (tests/hf/reference.py,
# a plain-Python forward: RoPE's rotate_half, GQA, Conv1D, Gemma, Mixtral's
# routing), to 1e-5 relative. Then the refusals: a config.json field
# that differs from the plan's (named, with both values), a missing tensor
# (named), models no architecture computes exactly (export-hf exits 2
# naming the feature), a checkpoint without model_config.
#   usage: tests/hf/roundtrip.sh BUILD_DIR
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
planc=$build/bin/planc
ckpt=$build/bin/planrt-ckpt
hfdir="python3 $root/tests/hf/hfdir.py"
work=$build/tests/hf-roundtrip.tmp
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
rm -rf "$work" && mkdir -p "$work"
fails=0
ok() { echo "✓ $*"; }
bad() { echo "✗ $*"; fails=$((fails + 1)); }

# The tiny models (hfdir.py's shapes: dim 32, 2 blocks, 4 heads of 8, kv 2,
# MLP 64, seq 16, vocabulary 259, which tp 2 pads to 260).
model() {
    case $1 in
    llama|mistral|qwen2|mixtral)
        local win= bias=false ffn="mlp { hidden 64; act swiglu; norm rmsnorm; bias false }" theta=
        [ "$1" = mistral ] && win="; sliding_window 8"
        [ "$1" = qwen2 ] && bias=qkv
        [ "$1" = mixtral ] && ffn="moe { experts 4; top_k 2; hidden 64; act swiglu; norm rmsnorm; bias false }" theta="; rope_theta 1e6"
        cat <<EOF
model tiny$1 {
    vocab 259;  seq 16;  dtype fp32;
    embedding { dim 32; position rope$theta }
    repeat 2 {
        attention { heads 4; kv_heads 2; norm rmsnorm; bias $bias$win }
        $ffn
    }
    norm    { kind rmsnorm }
    lm_head { tied false }
}
EOF
        ;;
    gpt2)
        cat <<EOF
model tinygpt2 {
    vocab 259;  seq 16;  dtype fp32;
    embedding { dim 32 }
    repeat 2 {
        attention { heads 4 }
        mlp       { hidden 128; act gelu }
    }
    norm    { kind layernorm }
    lm_head { tied true }
}
EOF
        ;;
    qwen3)   # Qwen3: Llama's block with an RMSNorm of each query and key head before RoPE
        model llama | sed -e 's/tinyllama/tinyqwen3/' -e 's/kv_heads 2; norm rmsnorm; bias false }/kv_heads 2; norm rmsnorm; bias false; qk_norm rmsnorm }/' ;;
    gemma)   # Gemma: GeGLU, the embedding times sqrt(dim), RMSNorm x*(1+w), tied head
        model llama | sed -e 's/tinyllama/tinygemma/' -e 's/act swiglu/act geglu/' -e 's/tied false/tied true/' \
            -e 's/dtype fp32;/dtype fp32; norm_eps 1e-6; norm_plus_one true;/' \
            -e 's/position rope/position rope; scale sqrt_dim/' ;;
    gemma2)  # Gemma 2: Gemma's layers with norms before and after each sub-block, the soft-caps,
             # query_pre_attn_scalar and every other block sliding (hfdir.py's gemma2 config)
        model gemma | sed -e 's/tinygemma/tinygemma2/' \
            -e 's/kv_heads 2; norm rmsnorm; bias false }/kv_heads 2; norm rmsnorm; bias false; sliding_window 8 every 2; softcap 20; query_pre_attn_scalar 12; norm_position sandwich }/' \
            -e 's/act geglu; norm rmsnorm; bias false }/act geglu; norm rmsnorm; bias false; norm_position sandwich }/' \
            -e 's/tied true }/tied true; softcap 15 }/' ;;
    gemma3)  # Gemma 3: Gemma 2's block without caps, q/k norms by 1 + w, block 0 local at its own
             # RoPE base, block 1 global (hfdir.py's gemma3 config: sliding_window_pattern 2)
        model gemma | sed -e 's/tinygemma/tinygemma3/' \
            -e 's/kv_heads 2; norm rmsnorm; bias false }/kv_heads 2; norm rmsnorm; bias false; sliding_window 8 every 2; qk_norm rmsnorm; query_pre_attn_scalar 12; norm_position sandwich }/' \
            -e 's/act geglu; norm rmsnorm; bias false }/act geglu; norm rmsnorm; bias false; norm_position sandwich }/' \
            -e 's/position rope;/position rope; rope_local_theta 100;/' ;;
    gemma3nolocal)   # Gemma 3's block without the window (every block global at rope_theta)
        model gemma3 | sed -e 's/tinygemma3/tinygemma3nolocal/' -e 's/ sliding_window 8 every 2;//' \
            -e 's/ rope_local_theta 100;//' ;;
    gemma3allslide)   # Gemma 3's block sliding on every block: its every K-th block is global
        model gemma3 | sed -e 's/tinygemma3/tinygemma3allslide/' -e 's/sliding_window 8 every 2;/sliding_window 8;/' ;;
    gemma2every3)   # Gemma 2 but a global block every third: transformers' Gemma 2 alternates
        model gemma2 | sed -e 's/tinygemma2/tinygemma2every3/' -e 's/every 2/every 3/' ;;
    everyllama)   # Llama with every other block sliding: Mistral slides on every block
        model llama | sed -e 's/tinyllama/tinyeveryllama/' -e 's/kv_heads 2; norm rmsnorm; bias false }/kv_heads 2; norm rmsnorm; bias false; sliding_window 8 every 2 }/' ;;
    sandwichswiglu)   # sandwich norms on Llama's block: Gemma 2 is GeGLU
        model llama | sed -e 's/tinyllama/tinysandwichswiglu/' -e 's/bias false }/bias false; norm_position sandwich }/g' ;;
    geglu)   # GeGLU without Gemma's normalizer and norm: refused on export
        model llama | sed -e 's/tinyllama/tinygeglu/' -e 's/act swiglu/act geglu/' ;;
    capped)  # Gemma's layers with Gemma 2's attention soft-cap: no architecture written has it
        model gemma | sed -e 's/tinygemma/tinycapped/' -e 's/kv_heads 2; norm rmsnorm; bias false }/kv_heads 2; norm rmsnorm; bias false; softcap 50 }/' ;;
    postnorm)   # OLMo-2's post-norms without its whole-projection q/k norm: no architecture (issue 29)
        model llama | sed -e 's/tinyllama/tinypostnorm/' -e 's/bias false }/bias false; norm_position post }/g' ;;
    qwen3_moe)   # Qwen3-MoE: Qwen3's attention (q/k norm), Mixtral's experts
        model mixtral | sed -e 's/tinymixtral/tinyqwen3moe/' -e 's/kv_heads 2; norm rmsnorm; bias false }/kv_heads 2; norm rmsnorm; bias false; qk_norm rmsnorm }/' \
            -e 's/; rope_theta 1e6//' ;;
    qwen2_moe)   # Qwen2-MoE: biases on Q, K, V, the full softmax's top-k, a gated shared expert 48 wide
        model mixtral | sed -e 's/tinymixtral/tinyqwen2moe/' -e 's/kv_heads 2; norm rmsnorm; bias false }/kv_heads 2; norm rmsnorm; bias qkv }/' -e 's/; rope_theta 1e6//' \
            -e 's/top_k 2;/top_k 2; norm_topk_prob false; shared 1; shared_hidden 48; shared_gate true;/' ;;
    qwen3_moe_raw)   # the same with norm_topk_prob false (the full softmax's top-k)
        model qwen3_moe | sed -e 's/tinyqwen3moe/tinyqwen3moeraw/' -e 's/top_k 2;/top_k 2; norm_topk_prob false;/' ;;
    olmo2)   # OLMo-2's block: post-norms and the q/k norm of the whole projection (issue 29)
        model postnorm | sed -e 's/tinypostnorm/tinyolmo2/' \
            -e 's/kv_heads 2; norm rmsnorm; bias false; norm_position post }/kv_heads 2; norm rmsnorm; bias false; norm_position post; qk_norm rmsnorm_projection }/' ;;
    ropelocal)   # Gemma 3's local blocks' RoPE base on Mistral's window (issue 29): no architecture written
        model mistral | sed -e 's/tinymistral/tinyropelocal/' -e 's/position rope/position rope; rope_local_theta 100/' ;;
    shared)  # a shared expert: no Mixtral
        model mixtral | sed -e 's/tinymixtral/tinyshared/' -e 's/top_k 2;/top_k 2; shared 1;/' ;;
    grouped) # grouped routing (DeepSeek-V3's n_group): no Mixtral
        model mixtral | sed -e 's/tinymixtral/tinygrouped/' -e 's/top_k 2;/top_k 2; route_groups 2; route_top_groups 1;/' ;;
    sigmoid) # DeepSeek-V3's sigmoid gate: no Mixtral
        model mixtral | sed -e 's/tinymixtral/tinysigmoid/' -e 's/top_k 2;/top_k 2; score sigmoid;/' ;;
    scaled)  # DeepSeek's routed_scaling_factor: no Mixtral
        model mixtral | sed -e 's/tinymixtral/tinyscaled/' -e 's/top_k 2;/top_k 2; routed_scale 2.5;/' ;;
    ebias)   # DeepSeek-V3's aux-loss-free balancing: no Mixtral
        model mixtral | sed -e 's/tinymixtral/tinyebias/' -e 's/top_k 2;/top_k 2; score sigmoid; expert_bias true;/' ;;
    esac
}

# plan NAME ARCH RANKS "PLAN BODY" [TRAIN KEYS]: a .plan on a one-node cluster of RANKS
plan() {
    local f=$work/$1.plan extra=${5:-}
    sed -e "s/^cluster laptop/cluster cpu$3/" -e "s/gpus_per_node *[0-9]*/gpus_per_node $3/" \
        "$root/examples/clusters/laptop.plan" > "$f"
    model "$2" >> "$f"
    echo "plan { $4 }" >> "$f"
    echo "train { steps 2; lr 1e-3; warmup 1; seed 7; data \"$root/examples/data/sample.txt\"; $extra }" >> "$f"
    "$planc" build "$f" -o "$work/$1.exe" > "$work/$1.build" 2>&1 || { cat "$work/$1.build"; return 1; }
}

# trip NAME ARCH RANKS "PLAN BODY" "HFDIR OPTIONS" [EXPORT DTYPE]: HF -> planc
# (--steps 0) -> HF, the same bytes
trip() {
    local name=$1 arch=$2 np=$3 body=$4 opts=$5 dt=${6:-fp32}
    plan "$name" "$arch" "$np" "$body" || { bad "$name: planc build"; return; }
    $hfdir make "${arch%_raw}" "$work/$name.src" $opts || { bad "$name: hfdir.py make"; return; }
    if ! (cd "$work" && $mpirun -np "$np" "./$name.exe" --steps 0 --init-from "$name.src" --save "$name.ck" \
            --export-hf "$name.out" --export-hf-dtype "$dt" > "$name.log" 2>&1); then
        bad "$name: the run failed:"; sed 's/^/    /' "$work/$name.log" | head -20; return
    fi
    grep -q "nothing to train: --steps 0" "$work/$name.log" || bad "$name: --steps 0 did not say there is nothing to train"
    if $hfdir same "$work/$name.src" "$work/$name.out" > "$work/$name.same"; then
        ok "$name ($arch, $np ranks: $body; source $opts): $(sed 's/^✓ //' "$work/$name.same")"
    else
        bad "$name: round trip"; sed 's/^/    /' "$work/$name.same"
    fi
    # the same weights train: step 1's loss is transformers' loss of that batch (reference.py)
    local ref got
    ref=$(python3 "$root/tests/hf/reference.py" "$work/$name.src" "$root/examples/data/sample.txt" 7 4 16)
    if (cd "$work" && $mpirun -np "$np" "./$name.exe" --steps 1 --init-from "$name.src" --log-json "$name.l1" \
            > "$name.l1.log" 2>&1) &&
       got=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' "$work/$name.l1") &&
       python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(b))' "$got" "$ref"; then
        ok "$name: first loss $got, reference.py (transformers' formulas, plain Python) $ref"
    else
        bad "$name: first loss ${got:-?}, reference.py (transformers' formulas, plain Python) $ref"; tail -5 "$work/$name.l1.log" | sed 's/^/    /'
    fi
}

trip llama-dp2tp2-zero1 llama 4 "dp 2; tp 2; zero 1; micro_batch 1; global_batch 4;" "--dtype f32 --shards 3"
trip llama-tp2pp2 llama 4 "tp 2; pp 2; micro_batch 1; global_batch 4; schedule 1f1b;" "--dtype bf16" bf16
trip llama-dp2-zero3 llama 2 "dp 2; zero 3; micro_batch 1; global_batch 4;" "--dtype f32 --unset head_dim --unset rope_theta"
trip mistral-dp2tp2-zero1 mistral 4 "dp 2; tp 2; zero 1; micro_batch 1; global_batch 4;" "--dtype f32"
trip qwen2-tp2-zero3 qwen2 4 "dp 2; tp 2; zero 3; micro_batch 1; global_batch 4;" "--dtype bf16 --shards 2" bf16
trip qwen3-dp2tp2-zero1 qwen3 4 "dp 2; tp 2; zero 1; micro_batch 1; global_batch 4;" "--dtype f32 --shards 2"
trip qwen3-tp2pp2 qwen3 4 "tp 2; pp 2; micro_batch 1; global_batch 4; schedule 1f1b;" "--dtype bf16" bf16
trip gpt2-dp2tp2-zero1 gpt2 4 "dp 2; tp 2; zero 1; micro_batch 1; global_batch 4;" "--dtype f32"
trip gpt2-pp2 gpt2 2 "pp 2; micro_batch 1; global_batch 4; schedule 1f1b;" "--dtype bf16 --set n_inner=null" bf16
trip mixtral-dp2ep2 mixtral 2 "dp 2; ep 2; zero 1; micro_batch 1; global_batch 4;" "--dtype f32"
trip mixtral-tp2 mixtral 2 "tp 2; micro_batch 1; global_batch 4;" "--dtype bf16" bf16
trip qwen3moe-dp2ep2 qwen3_moe 2 "dp 2; ep 2; zero 1; micro_batch 1; global_batch 4;" "--dtype f32 --shards 2"
trip qwen3moe-raw-tp2 qwen3_moe_raw 2 "tp 2; micro_batch 1; global_batch 4;" "--dtype f32 --set norm_topk_prob=false --unset mlp_only_layers --set intermediate_size=96"
trip qwen2moe-dp2ep2 qwen2_moe 2 "dp 2; ep 2; zero 1; micro_batch 1; global_batch 4;" "--dtype f32 --shards 3"
trip qwen2moe-tp2 qwen2_moe 2 "tp 2; micro_batch 1; global_batch 4;" "--dtype bf16" bf16
trip gemma-dp2tp2-zero1 gemma 4 "dp 2; tp 2; zero 1; micro_batch 1; global_batch 4;" "--dtype bf16" bf16
trip gemma-pp2-zero3 gemma 4 "dp 2; pp 2; zero 3; micro_batch 1; global_batch 4; schedule 1f1b;" "--dtype f32"
trip gemma2-dp2tp2-zero1 gemma2 4 "dp 2; tp 2; zero 1; micro_batch 1; global_batch 4;" "--dtype bf16" bf16
trip gemma2-pp2-zero3 gemma2 4 "dp 2; pp 2; zero 3; micro_batch 1; global_batch 4; schedule 1f1b;" "--dtype f32 --shards 2"
trip gemma2-tp2pp2 gemma2 4 "tp 2; pp 2; micro_batch 1; global_batch 4; schedule 1f1b;" "--dtype f32"
# Gemma 3 (issue 29): q/k norms by 1 + w replicated over TP, a local block at its own RoPE base
trip gemma3-dp2tp2-zero1 gemma3 4 "dp 2; tp 2; zero 1; micro_batch 1; global_batch 4;" "--dtype bf16" bf16
trip gemma3-pp2-zero3 gemma3 4 "dp 2; pp 2; zero 3; micro_batch 1; global_batch 4; schedule 1f1b;" "--dtype f32 --shards 2"
trip gemma3-tp2pp2 gemma3 4 "tp 2; pp 2; micro_batch 1; global_batch 4; schedule 1f1b;" "--dtype f32 --unset sliding_window_pattern --set layer_types=[\"sliding_attention\",\"full_attention\"]"
# ... and the q/k norm's gain taken as w (Qwen3's form) in Gemma 3's block is another model: its loss must differ
if got=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' "$work/gemma3-tp2pp2.l1") &&
   plain=$(REFERENCE_QK_GAIN=w python3 "$root/tests/hf/reference.py" "$work/gemma3-tp2pp2.src" "$root/examples/data/sample.txt" 7 4 16) &&
   python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) <= 1e-5 * abs(b))' "$got" "$plain"; then
    ok "gemma3-tp2pp2: first loss $got is not reference.py's with the q/k gains as w ($plain)"
else
    bad "gemma3-tp2pp2: first loss ${got:-?} matches reference.py's with the q/k gains as w (${plain:-?})"
fi
# OLMo-2 (issue 29): its q/k norm of the whole projections split over TP with the heads
trip olmo2-dp2tp2-zero1 olmo2 4 "dp 2; tp 2; zero 1; micro_batch 1; global_batch 4;" "--dtype f32 --shards 2"
trip olmo2-tp2pp2 olmo2 4 "tp 2; pp 2; micro_batch 1; global_batch 4; schedule 1f1b;" "--dtype bf16" bf16

# train { init "DIR" }: the plan's default of --init-from (relative to the working directory)
if plan llama-init llama 2 "tp 2; micro_batch 1; global_batch 4;" 'init "llama-dp2-zero3.src";' &&
   (cd "$work" && $mpirun -np 2 ./llama-init.exe --steps 0 --save llama-init.ck --export-hf llama-init.out > llama-init.log 2>&1) &&
   grep -q "initialised from llama-dp2-zero3.src" "$work/llama-init.log" &&
   $hfdir same "$work/llama-dp2-zero3.src" "$work/llama-init.out" > "$work/llama-init.same"; then
    ok "train { init \"DIR\" }: $(sed 's/^✓ //' "$work/llama-init.same")"
else
    bad "train { init }:"; cat "$work/llama-init.log" "$work/llama-init.same" 2>/dev/null | sed 's/^/    /' | head -20
fi

# planrt-ckpt export-hf past --max-shard-size: transformers' shard names and index
ck=$(ls -d "$work"/llama-dp2tp2-zero1.ck/step-* 2>/dev/null | tail -1)
if [ -n "$ck" ] && "$ckpt" export-hf "$ck" "$work/sharded" --max-shard-size 40000 > "$work/sharded.log" 2>&1 &&
   [ -f "$work/sharded/model.safetensors.index.json" ] && [ ! -e "$work/sharded/model.safetensors" ] &&
   ls "$work/sharded" | grep -q '^model-00001-of-0000[2-9].safetensors$' &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["metadata"]["total_size"] > 0 and len(d["weight_map"]) == 21' \
       "$work/sharded/model.safetensors.index.json" &&
   $hfdir same "$work/llama-dp2tp2-zero1.src" "$work/sharded" > "$work/sharded.same"; then
    ok "export-hf --max-shard-size 40000: $(ls "$work/sharded" | grep -c '^model-') shards + index; $(sed 's/^✓ //' "$work/sharded.same")"
else
    bad "export-hf --max-shard-size: "; cat "$work/sharded.log" "$work/sharded.same" 2>/dev/null | sed 's/^/    /'
fi

# expect_fail NAME RC PATTERN CMD...: CMD exits RC and says PATTERN
expect_fail() {
    local name=$1 want=$2 pat=$3; shift 3
    (cd "$work" && "$@") > "$work/$name.err" 2>&1
    local rc=$?
    if [ "$rc" = "$want" ] || { [ "$want" = nonzero ] && [ "$rc" != 0 ]; }; then
        if grep -q -- "$pat" "$work/$name.err"; then
            ok "$name refused (exit $rc): $(grep -m1 -- "$pat" "$work/$name.err" | sed 's/^ *//' | cut -c1-200)"
            return
        fi
    fi
    bad "$name: exit $rc (want $want), message:"; sed 's/^/    /' "$work/$name.err" | head -10
}

$hfdir make llama "$work/kv4.src" --set num_key_value_heads=4
expect_fail config-mismatch nonzero "num_key_value_heads is 4, the plan's model has 2" \
    $mpirun -np 2 ./llama-dp2-zero3.exe --steps 0 --init-from kv4.src
$hfdir make llama "$work/theta.src" --set rope_theta=500000.0
expect_fail config-mismatch-float nonzero "rope_theta is 500000.0, the plan's model has 10000.0" \
    $mpirun -np 2 ./llama-dp2-zero3.exe --steps 0 --init-from theta.src
$hfdir make mistral "$work/arch.src"
expect_fail config-architecture nonzero "architectures is \[\"MistralForCausalLM\"\], the plan's model is LlamaForCausalLM" \
    $mpirun -np 2 ./llama-dp2-zero3.exe --steps 0 --init-from arch.src
$hfdir make llama "$work/eps.src" --unset rms_norm_eps
expect_fail config-default nonzero "rms_norm_eps is 1e-06 (left out: transformers' default), the plan's model has 1e-05" \
    $mpirun -np 2 ./llama-dp2-zero3.exe --steps 0 --init-from eps.src
$hfdir make qwen3_moe "$work/q3raw.src" --set norm_topk_prob=false
expect_fail qwen3moe-gate nonzero "norm_topk_prob is false, the plan's model has true" \
    $mpirun -np 2 ./qwen3moe-dp2ep2.exe --steps 0 --init-from q3raw.src
$hfdir make qwen3_moe "$work/q3dense.src" --set 'mlp_only_layers=[0]'
$hfdir make gemma3 "$work/g3pattern.src" --set sliding_window_pattern=3
expect_fail gemma3-pattern nonzero "sliding_window_pattern is 3, the plan's model has 2" \
    $mpirun -np 4 ./gemma3-tp2pp2.exe --steps 0 --init-from g3pattern.src
$hfdir make gemma3 "$work/g3types.src" --set 'layer_types=["full_attention","full_attention"]'
expect_fail gemma3-layer-types nonzero "layer_types is \"full_attention\" at block 0, the plan's model has" \
    $mpirun -np 4 ./gemma3-tp2pp2.exe --steps 0 --init-from g3types.src
$hfdir make gemma3 "$work/g3local.src" --unset rope_local_base_freq
expect_fail gemma3-local-base nonzero "rope_local_base_freq is 10000.0 (left out: transformers' default), the plan's model has 100.0" \
    $mpirun -np 4 ./gemma3-tp2pp2.exe --steps 0 --init-from g3local.src
expect_fail qwen3moe-dense-block nonzero "mlp_only_layers is an array, the plan's model has null" \
    $mpirun -np 2 ./qwen3moe-dp2ep2.exe --steps 0 --init-from q3dense.src
$hfdir make llama "$work/drop.src" --drop model.layers.1.mlp.up_proj.weight
expect_fail missing-tensor nonzero "no tensor model.layers.1.mlp.up_proj.weight" \
    $mpirun -np 2 ./llama-dp2-zero3.exe --steps 0 --init-from drop.src

# export refusals: a trained (2-step) checkpoint of a model no architecture computes exactly
for m in geglu shared capped postnorm sigmoid grouped scaled ebias gemma2every3 sandwichswiglu everyllama ropelocal \
        gemma3nolocal gemma3allslide; do
    plan "$m" "$m" 1 "micro_batch 2; global_batch 4;" || { bad "$m: planc build"; continue; }
    (cd "$work" && $mpirun -np 1 "./$m.exe" --steps 1 --save "$m.ck" > "$m.log" 2>&1) || { bad "$m: the run failed"; continue; }
done
expect_fail export-geglu 2 "act geglu without embedding { scale sqrt_dim }" "$ckpt" export-hf geglu.ck geglu.out
expect_fail export-shared-experts 2 "shared experts (1) without shared_gate: Mixtral has none and Qwen2-MoE has one behind shared_gate" "$ckpt" export-hf shared.ck shared.out
expect_fail export-softcap 2 "attention softcap (Gemma 2) without norm_position sandwich" \
    "$ckpt" export-hf capped.ck capped.out
expect_fail export-postnorm 2 "norm_position post without qk_norm rmsnorm_projection: Olmo2ForCausalLM" \
    "$ckpt" export-hf postnorm.ck postnorm.out
expect_fail export-sigmoid-gate 2 "score sigmoid, norm_topk_prob true: Mixtral's router renormalises the softmax" \
    "$ckpt" export-hf sigmoid.ck sigmoid.out
expect_fail export-grouped-routing 2 "route_groups 2: grouped routing is DeepSeek-V3's (not written)" \
    "$ckpt" export-hf grouped.ck grouped.out
expect_fail export-routed-scale 2 "routed_scale 2.5: DeepSeek's routed_scaling_factor (not written)" \
    "$ckpt" export-hf scaled.ck scaled.out
expect_fail export-expert-bias 2 "expert_bias true: DeepSeek-V3's e_score_correction_bias (not written)" \
    "$ckpt" export-hf ebias.ck ebias.out
expect_fail export-gemma2-every3 2 "sliding_window 8 every 3: Gemma2ForCausalLM slides on blocks 0, 2, 4" \
    "$ckpt" export-hf gemma2every3.ck gemma2every3.out
expect_fail export-sandwich-swiglu 2 "norm_position sandwich with act swiglu: Gemma2ForCausalLM" \
    "$ckpt" export-hf sandwichswiglu.ck sandwichswiglu.out
expect_fail export-every-llama 2 "sliding_window 8 every 2 without Gemma 2's sandwich norms" \
    "$ckpt" export-hf everyllama.ck everyllama.out
expect_fail export-ropelocal 2 "rope_local_theta 100 without Gemma 3's block (GeGLU, sandwich norms, qk_norm rmsnorm)" \
    "$ckpt" export-hf ropelocal.ck ropelocal.out
expect_fail export-gemma3-every-block 2 "sliding_window 8 on every block: Gemma3ForCausalLM's every sliding_window_pattern-th block" \
    "$ckpt" export-hf gemma3allslide.ck gemma3allslide.out
# Gemma 3 without a window: every block global at rope_theta, written with sliding_window = seq and the
# local base = rope_theta, so transformers' local blocks compute the same; its first loss is reference.py's
if (cd "$work" && "$ckpt" export-hf gemma3nolocal.ck gemma3nolocal.out > gemma3nolocal.exp 2>&1) &&
   python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(not (c["model_type"] == "gemma3_text" and c["sliding_window"] == 16 and c["rope_local_base_freq"] == c["rope_theta"] == 10000.0))' \
       "$work/gemma3nolocal.out/config.json"; then
    ref=$(python3 "$root/tests/hf/reference.py" "$work/gemma3nolocal.out" "$root/examples/data/sample.txt" 7 4 16)
    if (cd "$work" && $mpirun -np 1 ./gemma3nolocal.exe --steps 1 --init-from gemma3nolocal.out --log-json gemma3nolocal.l1 \
            > gemma3nolocal.l1.log 2>&1) &&
       got=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' "$work/gemma3nolocal.l1") &&
       python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(b))' "$got" "$ref"; then
        ok "gemma3nolocal: export without a window (sliding_window 16 = seq, local base = rope_theta); first loss $got, reference.py $ref"
    else
        bad "gemma3nolocal: first loss ${got:-?}, reference.py $ref"
    fi
else
    bad "gemma3nolocal: export"; sed 's/^/    /' "$work/gemma3nolocal.exp"
fi
[ -e "$work/geglu.out/config.json" ] && bad "export-geglu: a refused export wrote config.json"
expect_fail export-hf-before-training 1 "act geglu without embedding" \
    $mpirun -np 1 ./geglu.exe --steps 2 --save geglu2.ck --export-hf geglu2.out
grep -q "^step" "$work/export-hf-before-training.err" && bad "export-hf-before-training: it trained before refusing"

# a checkpoint from before issue 28: no model_config in its index
old=$work/old.ck && cp -r "$work/llama-dp2-zero3.ck" "$old"
idx=$(ls -d "$old"/step-*/index.json | tail -1)
python3 - "$idx" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
del d["metadata"]["model_config"]
json.dump(d, open(sys.argv[1], "w"))
EOF
expect_fail export-old-checkpoint 1 "records no model_config" "$ckpt" export-hf old.ck old.out

if [ "$fails" != 0 ]; then echo "✗ test-hf-roundtrip: $fails failed"; exit 1; fi
echo "✓ test-hf-roundtrip: every round trip bit for bit, every refusal named"
