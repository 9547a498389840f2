#!/bin/bash
# make-plan.sh: write a variant of examples/tiny.plan — the same model, seed,
# data and training — with another plan block, on a one-node cluster of
# laptop.plan's device with exactly as many ranks as the layout needs.
#   usage: make-plan.sh OUT.plan RANKS "PLAN BLOCK BODY" [ADAMW_EPS]
# A body containing `tied_head;` ties the lm_head to the embedding; one
# containing `llama;` swaps in a Llama-style model of the same size; one
# containing `knobs;` a model of the same size with issue 18's knobs (RoPE
# base, head_dim, sliding window, bias qkv, GeGLU); one containing
# `vocabN;` sets the vocabulary to N (padded where tp does not divide it);
# one containing `shard32;` trains a vocabulary of 70000 on an llm.c
# 32-bit token shard (magic 20240801, version 7) made from the text; one
# containing `dropout;` gives the model `dropout 0.1` (GPT-2's);
# `moe;` a mixture-of-experts model of tiny's vocabulary and sequence (dim
# 32, 2 blocks of attention + moe: 4 SwiGLU experts, top_k 2, one shared
# expert, aux loss 0.01), `moecap;` the same with capacity factor 1 and no
# shared expert (tokens dropped).
# `ropellama3;`, `ropeyarn;`, `ropeyarnms;` give the `llama;` model RoPE scaling (below),
# `qknorm;` the `llama;` model with `qk_norm rmsnorm` (Qwen3's q/k norm).
# `qkproj;` the `llama;` model with `qk_norm rmsnorm_projection` (OLMo-2's).
# `postnorm;` the `llama;` model with norm_position post (OLMo-2),
# `sandwich;` tiny's GPT with norm_position sandwich (Gemma 2).
# `cpnodeK;` is run.sh's (PLANRT_CP_NODE_RANKS=K: the hierarchical CP form's
# nodes of K ranks on this one machine) and is dropped from the plan here.
# shared expert (tokens dropped); `wide;` a 2-block model of dim 256 (heads
# of 128) whose TP shards hold whole FP8 blockwise tiles.
# The body gets "global_batch 16;" (tiny.plan's) unless it sets one.
set -eu
out=$1; np=$2; body=$3; eps=${4:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
body=$(echo "$body" | sed -e 's/cpnode[0-9]*;//')
case "$body" in *global_batch*) ;; *) body="$body global_batch 16;" ;; esac
body=${body//differs;/}   # run.sh's: the row must not match its reference
tied=false
case "$body" in *tied_head\;*) tied=true; body=${body//tied_head;/} ;; esac
# `llama;`: tiny's size with Llama's layers instead (RoPE, grouped-query
# attention 4 heads / 2 kv heads, SwiGLU, RMSNorm, no biases)
llama=false
case "$body" in *llama\;*) llama=true; body=${body//llama;/} ;; esac
# `knobs;`: tiny's width with the model knobs real models need: RoPE base
# 500000 (Llama 3), 4 heads of 24 on a 64 model (Gemma's head_dim), a
# sliding window of 24 of the 64 tokens (Mistral), biases on Q, K, V only
# (Qwen2), GeGLU (Gemma)
knobs=false
case "$body" in *knobs\;*) knobs=true; body=${body//knobs;/} ;; esac
# `shard32;`: vocabulary 70000 and the data as uint32 tokens: byte b of the
# text becomes token b (b even) or 69999 - b (b odd, over 65535), so the
# ids need 32 bits and the text's structure stays learnable
shard=
case "$body" in *shard32\;*)
    body=${body//shard32;/}; shard="$(cd "$(dirname "$out")" && pwd)/shard32.bin"
    [ -e "$shard" ] || perl -e '
        local $/; open(my $f, "<", $ARGV[0]) or die "$ARGV[0]: $!"; binmode $f;
        my @b = unpack("C*", <$f>);
        my @t = map { $_ % 2 ? 69999 - $_ : $_ } @b;
        open(my $o, ">", $ARGV[1]) or die "$ARGV[1]: $!"; binmode $o;
        print $o pack("l<256", 20240801, 7, scalar @t), pack("V*", @t);' \
        "$root/examples/data/sample.txt" "$shard" ;; esac
# `vocabN;` (e.g. vocab259;): the vocabulary is N instead of 256, so tp need
# not divide it and the runtime pads it (the data's tokens stay bytes < 256)
vocab=
case "$body" in *vocab[0-9]*\;*)
    vocab=$(echo "$body" | sed -n 's/.*vocab\([0-9][0-9]*\);.*/\1/p')
    body=$(echo "$body" | sed -e "s/vocab$vocab;//") ;; esac
[ -z "$shard" ] || vocab=70000
# a body with an `fp8 { ... }` block (issue 27): the planner's FP8 rule wants a
# device with FP8 tensor cores, so the device gets an FP8 rate (twice its
# fp32 one; a figure for the planner only); the model stays fp32, the one
# dtype the CPU target computes in (build --target cpu refuses bf16), its
# linears' GEMMs in FP8 from fp32 tensors (software planc's FP8 rule)
fp8=false
case "$body" in *fp8\ \{*) fp8=true ;; esac
# `dropout;`: the model drops 0.1 of the attention probabilities and of
# each residual branch (masks keyed by global coordinates: runtime/ops/dropout.c)
dropout=
case "$body" in *dropout\;*) dropout=0.1; body=${body//dropout;/} ;; esac
llama_model='model tinyllama {
    vocab 256;  seq 64;  dtype fp32;
    embedding { dim 64; position rope }
    repeat 4 {
        attention { heads 4; kv_heads 2; norm rmsnorm; bias false }
        mlp       { hidden 128; act swiglu; norm rmsnorm; bias false }
    }
    norm    { kind rmsnorm }
    lm_head { tied false }
}' 
knobs_model='model tinyknobs {
    vocab 256;  seq 64;  dtype fp32;
    embedding { dim 64; position rope; rope_theta 500000 }
    repeat 4 {
        attention { heads 4; kv_heads 2; head_dim 24; sliding_window 24; norm rmsnorm; bias qkv }
        mlp       { hidden 128; act geglu; norm rmsnorm; bias true }
    }
    norm    { kind rmsnorm }
    lm_head { tied false }
}'
# `ropellama3;`, `ropeyarn;` (issue 29): the `llama;` model with RoPE
# scaling of a 32-token pre-training context on its 64 tokens, so every
# band of the formulas is hit on heads of 16 (8 pairs, theta 10000,
# wavelengths 6.3, 19.9, 62.8, ... tokens). llama3 factor 8, low 1, high 4:
# pair 0 kept, 1 smoothed, 2-7 divided by 8; yarn factor 4, beta 32 / 1:
# correction dims 0 and 2, pair 0 kept, 1 half, 2-7 divided by 4, and
# cos and sin times 0.1 ln 4 + 1
rope_scaling=
case "$body" in *ropellama3\;*) body=${body//ropellama3;/}
    rope_scaling='rope_scaling { type llama3; factor 8; low_freq_factor 1; high_freq_factor 4; original_max_position 32 }' ;; esac
case "$body" in *ropeyarn\;*) body=${body//ropeyarn;/}
    rope_scaling='rope_scaling { type yarn; factor 4; beta_fast 32; beta_slow 1; original_max_position 32 }' ;; esac
# `ropeyarnms;` (issue 29): the same YaRN with DeepSeek's mscale pair, 0.8
# and 0.5: cos and sin times m(4, 0.8) / m(4, 0.5) = 1.0389 (m(f, x) =
# 0.1 x ln f + 1), and with `mla;` the softmax scale times m(4, 0.5)^2 =
# 1.1434 (DeepseekV3Attention; standard attention has no such factor)
case "$body" in *ropeyarnms\;*) body=${body//ropeyarnms;/}
    rope_scaling='rope_scaling { type yarn; factor 4; beta_fast 32; beta_slow 1; original_max_position 32; mscale 0.8; mscale_all_dim 0.5 }' ;; esac
# `ropewin;` (issue 29): the `llama;` model with Gemma 3's pattern of local
# and global blocks, a window of 24 on blocks 0 and 2 (`every 2`) and RoPE
# scaled linearly by 4; `ropelocal;` the same with Gemma 3's rule: the local
# blocks turn at their own base, rope_local_theta 100, unscaled (the
# global ones at rope_theta 10000, scaled)
case "$body" in *ropewin\;*|*ropelocal\;*) llama=true
    rope_scaling='rope_scaling { type linear; factor 4 }'
    case "$body" in *ropelocal\;*) rope_scaling="rope_local_theta 100; $rope_scaling" ;; esac
    body=${body//ropewin;/}; body=${body//ropelocal;/}
    llama_model=${llama_model/kv_heads 2; norm rmsnorm; bias false/kv_heads 2; sliding_window 24 every 2; norm rmsnorm; bias false} ;; esac
[ -z "$rope_scaling" ] || llama_model=${llama_model/position rope \}/position rope; $rope_scaling \}}
# `qknorm;` (issue 29): the `llama;` model with Qwen3's q/k norm (an
# RMSNorm of each query and key head before RoPE, a gain of 16 for the
# query heads and one for the key heads, replicated over TP)
case "$body" in *qknorm\;*) body=${body//qknorm;/}; llama=true
    llama_model=${llama_model/kv_heads 2; norm rmsnorm; bias false/kv_heads 2; norm rmsnorm; bias false; qk_norm rmsnorm} ;; esac
# `mla;` (issue 29): the `llama;` model with DeepSeek-V2's multi-head
# latent attention, no query latent (V2-Lite's q_proj): 4 heads of 16
# (nope 8 + rope 8) keys and values of 12 (the op pads them to 16), a kv
# latent of 24; `mlaq;` the same with a query latent of 32 (q_a_proj,
# q_a_layernorm, q_b_proj) and DeepSeek's attention_bias (q_a, kv_a, o)
case "$body" in *mlaq\;*) body=${body//mlaq;/}; llama=true
    llama_model=${llama_model/heads 4; kv_heads 2; norm rmsnorm; bias false/kind mla; heads 4; q_lora_rank 32; kv_lora_rank 24; qk_rope_head_dim 8; qk_nope_head_dim 8; v_head_dim 12; norm rmsnorm; bias true} ;; esac
case "$body" in *mla\;*) body=${body//mla;/}; llama=true
    llama_model=${llama_model/heads 4; kv_heads 2; norm rmsnorm; bias false/kind mla; heads 4; kv_lora_rank 24; qk_rope_head_dim 8; qk_nope_head_dim 8; v_head_dim 12; norm rmsnorm; bias false} ;; esac
# `qkproj;` (issue 29): the `llama;` model with OLMo-2's q/k norm (an
# RMSNorm of each token's whole q projection, 64 values, and whole k
# projection, 32, a gain per element, split over TP with the heads: the
# sums of squares span the TP ranks); with `postnorm;` it is OLMo-2's block
case "$body" in *qkproj\;*) body=${body//qkproj;/}; llama=true
    llama_model=${llama_model/kv_heads 2; norm rmsnorm; bias false/kv_heads 2; norm rmsnorm; bias false; qk_norm rmsnorm_projection} ;; esac
# `postnorm;` (issue 29): the `llama;` model with OLMo-2's post-norms
# (norm_position post on attention and MLP: x + norm(f(x)), no input norm)
case "$body" in *postnorm\;*) body=${body//postnorm;/}; llama=true
    llama_model=${llama_model//norm rmsnorm; bias false/norm rmsnorm; bias false; norm_position post} ;; esac
# `sandwich;` (issue 29): tiny's GPT (LayerNorm with biases, learned
# positions, GELU) with Gemma 2's sandwich norms (norm_position sandwich:
# x + post_norm(f(pre_norm(x))), two LayerNorms per sublayer)
sandwich=false
case "$body" in *sandwich\;*) sandwich=true; body=${body//sandwich;/} ;; esac
# `moe;`, `moecap;` (issue 17): routed experts; the layouts must route
# every token to the same experts as one rank and train alike
# `moesig;` (issue 29): DeepSeek-V3's gate, sigmoid scores renormalised over
# the top-k, with the aux loss over the normalised sigmoids; `moeraw;`
# Qwen2-MoE's, the full softmax's top-k probabilities not renormalised;
# `moeqwen;` all of Qwen2-MoE's layer: that gate and one shared expert of
# its own width (48, the routed 32) behind a sigmoid gate per token
moe_extra=
case "$body" in *moecap\;*) moe_extra=capacity; body=${body//moecap;/} ;; esac
case "$body" in *moesig\;*) moe_extra=sigmoid; body=${body//moesig;/} ;; esac
case "$body" in *moeraw\;*) moe_extra=raw; body=${body//moeraw;/} ;; esac
case "$body" in *moeqwen\;*) moe_extra=qwen; body=${body//moeqwen;/} ;; esac
# `moedense;` (issue 29): a dense first block, then mixtures (DeepSeek's
# first_k_dense_replace, Qwen's mlp_only_layers): two consecutive repeats
case "$body" in *moedense\;*) moe_extra=dense; body=${body//moedense;/} ;; esac
# `moegrp;` (issue 29): DeepSeek-V3's grouped routing, sigmoid scores, a
# token's 2 experts from the better of 2 groups of 2
case "$body" in *moegrp\;*) moe_extra=grouped; body=${body//moegrp;/} ;; esac
# `moeds;` (issue 29): `moegrp;` with DeepSeek's routed_scaling_factor
# (routed_scale 2.5: the routed weights times 2.5 after the renormalisation)
case "$body" in *moeds\;*) moe_extra=deepseek; body=${body//moeds;/} ;; esac
# `moebias;`: `moesig;` with aux-loss-free balancing (expert_bias). Without
# groups the loads of this router's 4 experts lie near their mean, so a
# part of the batch (one micro-batch, one rank) often ranks them otherwise
# than the whole, and a rate of 0.002 moves the choice of tokens whose 2nd
# and 3rd scores lie that close within 5 steps: counting less than the
# global batch shows (a rate large against the scores' spread moves every
# token together, and any part of the batch then agrees with the whole)
case "$body" in *moebias\;*) moe_extra=bias; body=${body//moebias;/} ;; esac
# `moegmax;`: `moegrp;` with the groups ranked by their largest score
# (route_group_score max, DeepSeek-V2's group_limited_greedy)
case "$body" in *moegmax\;*) moe_extra=groupmax; body=${body//moegmax;/} ;; esac
# `moev3;`: DeepSeek-V3's whole router, `moeds;` (groups, routed_scale)
# with the expert bias in the group ranking and the choice
case "$body" in *moev3\;*) moe_extra=v3; body=${body//moev3;/} ;; esac
case "$body" in *moe\;*) moe_extra=${moe_extra:-shared}; body=${body//moe;/} ;; esac
# `moepost;` beside `moe;`: the attention with norm_position post and the
# mixture with sandwich (issue 29), so a MoE layer's post-norm is trained too
moe_att='attention { heads 4 }'
case "$body" in *moepost\;*) body=${body//moepost;/}; moe_att='attention { heads 4; norm_position post }'
    moe_sand='; norm_position sandwich' ;; esac
moe_keys='shared 1; aux_loss 0.01'
[ "$moe_extra" != capacity ] || moe_keys='capacity_factor 1.0; aux_loss 0.01'
[ "$moe_extra" != sigmoid ] || moe_keys='score sigmoid; aux_loss 0.01'
[ "$moe_extra" != raw ] || moe_keys='norm_topk_prob false; shared 1'
[ "$moe_extra" != grouped ] || moe_keys='score sigmoid; route_groups 2; route_top_groups 1; shared 1; aux_loss 0.01'
[ "$moe_extra" != deepseek ] ||
    moe_keys='score sigmoid; route_groups 2; route_top_groups 1; shared 1; aux_loss 0.01; routed_scale 2.5'
[ "$moe_extra" != v3 ] || moe_keys='score sigmoid; route_groups 2; route_top_groups 1; shared 1; aux_loss 0.01;
    routed_scale 2.5; expert_bias true; bias_update_rate 0.002'
[ "$moe_extra" != groupmax ] ||
    moe_keys='score sigmoid; route_groups 2; route_top_groups 1; route_group_score max; shared 1; aux_loss 0.01'
[ "$moe_extra" != bias ] || moe_keys='score sigmoid; aux_loss 0.01; expert_bias true; bias_update_rate 0.002'
[ "$moe_extra" != qwen ] || moe_keys='norm_topk_prob false; shared 1; shared_hidden 48; shared_gate true; aux_loss 0.01'
moe_model="model tinymoe {
    vocab 256;  seq 64;  dtype fp32;
    embedding { dim 32 }
    repeat 2 {
        $moe_att
        moe       { experts 4; top_k 2; hidden 32; act swiglu; $moe_keys${moe_sand:-} }
    }
    norm    { kind layernorm }
    lm_head { tied false }
}"
[ "$moe_extra" != dense ] || moe_model="model tinymoedense {
    vocab 256;  seq 64;  dtype fp32;
    embedding { dim 32 }
    repeat 1 {
        attention { heads 4 }
        mlp       { hidden 64; act swiglu }
    }
    repeat 3 {
        attention { heads 4 }
        moe       { experts 4; top_k 2; hidden 32; act swiglu; shared 1; aux_loss 0.01 }
    }
    norm    { kind layernorm }
    lm_head { tied false }
}"
# `gemma;` (issue 28): Gemma's layers at tiny's width (GeGLU, sqrt(dim)
# embedding scale, x*(1+w) RMSNorm, tied head).
# `wide;` (issue 27): FP8 blockwise's 128 tiles inside a TP shard on tp 2: a
# 2-block model of dim 256 with 2 heads of 128 and an MLP of 512 (shards of
# 128 and 256)
wide=false
case "$body" in *wide\;*) wide=true; body=${body//wide;/} ;; esac
# `gemma;` (issue 28): tiny's width with Gemma's layers: GeGLU, the embedding
# times sqrt(dim), RMSNorm x*(1+w) with w starting at 0, a tied head
gemma_model='model tinygemma {
    vocab 256;  seq 64;  dtype fp32;  norm_eps 1e-6;  norm_plus_one true;
    embedding { dim 64; position rope; scale sqrt_dim }
    repeat 4 {
        attention { heads 4; kv_heads 2; norm rmsnorm; bias false }
        mlp       { hidden 128; act geglu; norm rmsnorm; bias false }
    }
    norm    { kind rmsnorm }
    lm_head { tied true }
}'
# `gemma2;` (issue 29): the `gemma;` model with Gemma 2's attention and
# head at once: grouped-query attention whose scores are scaled by
# 1/sqrt(query_pre_attn_scalar 24) (not head_dim 16) and soft-capped, a
# window of 16 of the 64 tokens on blocks 0 and 2 and full causal
# attention on blocks 1 and 3 (`sliding_window 16 every 2`, Gemma 2's
# layer_types), and soft-capped logits. The caps are small for tiny's
# scale (at initialisation the scores are of order 1e-2 and the logits
# of order 1), so tanh bends them from the first step on (Gemma 2's own
# 50 and 30 would be the identity here); GEMMA2_SCORE_CAP and
# GEMMA2_LOGIT_CAP override them.
case "$body" in *gemma2\;*) body=${body//gemma2;/gemma;}
    gemma_model=${gemma_model/kv_heads 2; norm rmsnorm; bias false/kv_heads 2; norm rmsnorm; bias false; sliding_window 16 every 2; softcap SCAP; query_pre_attn_scalar 24}
    gemma_model=${gemma_model/tied true/tied true; softcap LCAP} ;; esac
# `logitcap;`: the `gemma;` model with Gemma 2's final-logit cap alone, the
# one of its features the CP attention forms take (emit refuses the
# attention's cap and scale with cp)
case "$body" in *logitcap\;*) body=${body//logitcap;/gemma;}
    gemma_model=${gemma_model/tied true/tied true; softcap LCAP} ;; esac
# `gemma3;` (issue 29): the `gemma;` model with Gemma 3's attention and
# blocks: q/k norms by 1 + w (qk_norm rmsnorm under norm_plus_one: gains
# of 16 starting at 0, replicated over TP), sandwich norms on attention
# and MLP, a window of 16 on blocks 0, 1 and 3 and global block 2
# (`sliding_window 16 every 3`, Gemma 3's five local to one global at
# tiny's depth), the local blocks turning at rope_local_theta 100
# unscaled, the global one at 10000 scaled linearly by 4 (Gemma 3 4B's),
# scores scaled by 1/sqrt(query_pre_attn_scalar 24); no soft-caps (Gemma
# 3 has none). `noqk;` beside it: the same model without the q/k norm
# (a `differs;` row's).
case "$body" in *gemma3\;*)
    qk='; qk_norm rmsnorm'
    case "$body" in *noqk\;*) qk=; body=${body//noqk;/} ;; esac
    body=${body//gemma3;/gemma;}
    rope='position rope; rope_local_theta 100; rope_scaling { type linear; factor 4 }'
    gemma_model=${gemma_model/position rope;/$rope;}
    gemma_model=${gemma_model/kv_heads 2; norm rmsnorm; bias false/kv_heads 2; sliding_window 16 every 3$qk; query_pre_attn_scalar 24; norm_position sandwich; norm rmsnorm; bias false}
    gemma_model=${gemma_model/act geglu; norm rmsnorm; bias false/act geglu; norm rmsnorm; bias false; norm_position sandwich} ;; esac
gemma_model=${gemma_model/SCAP/${GEMMA2_SCORE_CAP:-0.02}}
gemma_model=${gemma_model/LCAP/${GEMMA2_LOGIT_CAP:-0.5}}

wide_model='model tinywide {
    vocab 256;  seq 64;  dtype fp32;
    embedding { dim 256 }
    repeat 2 {
        attention { heads 2 }
        mlp       { hidden 512; act gelu }
    }
    norm    { kind layernorm }
    lm_head { tied false }
}'
sandwich_model='model tinysandwich {
    vocab 256;  seq 64;  dtype fp32;
    embedding { dim 64 }
    repeat 4 {
        attention { heads 4; norm_position sandwich }
        mlp       { hidden 256; act gelu; norm_position sandwich }
    }
    norm    { kind layernorm }
    lm_head { tied false }
}'
# `allin;` (issue 29's done-when: every new feature in one tiny model): a
# dense first block, then three mixtures; every block Gemma 2/3's
# attention (grouped-query, Gemma 3's q/k norm by 1 + w, a window of 16 on the even
# blocks, soft-capped scores scaled by query_pre_attn_scalar, sandwich
# norms), Gemma 3's embedding (sqrt(dim) scale, local blocks at their own
# RoPE base, the global ones YaRN-scaled), a padded vocabulary of 259 and
# a tied, soft-capped head; the mixtures DeepSeek-V3's sigmoid gate with
# grouped routing (groups ranked by their largest score, V2's), a routed
# scale, Qwen2-MoE's unnormalised top-k and gated shared expert of its own
# width, the aux loss. (No dropout: emit refuses it beside
# soft-capped scores.)
# `allinds;`: the same frame with DeepSeek-V3's attention (MLA with a
# query latent and DeepSeek's biases) and mixture (dense first, sigmoid,
# grouped routing, routed scale 2.5, the aux-loss-free expert bias, two
# shared experts), RoPE YaRN-scaled with DeepSeek's mscale pair.
all_att='attention { heads 4; kv_heads 2; qk_norm rmsnorm; sliding_window 16 every 2; softcap 1; query_pre_attn_scalar 24; norm rmsnorm; bias false; norm_position sandwich }'
all_moe='moe { experts 4; top_k 2; hidden 32; act swiglu; norm rmsnorm; score sigmoid; route_groups 2; route_top_groups 1; route_group_score max; routed_scale 1.5; norm_topk_prob false; shared 1; shared_hidden 48; shared_gate true; aux_loss 0.01; norm_position sandwich }'
all_emb='embedding { dim 64; position rope; scale sqrt_dim; rope_local_theta 100; rope_scaling { type yarn; factor 4; beta_fast 32; beta_slow 1; original_max_position 32 } }'
case "$body" in *allinds\;*) body=${body//allinds;/}; llama=true
    all_att='attention { kind mla; heads 4; q_lora_rank 32; kv_lora_rank 24; qk_rope_head_dim 8; qk_nope_head_dim 8; v_head_dim 12; norm rmsnorm; bias true }'
    all_moe='moe { experts 4; top_k 2; hidden 32; act swiglu; norm rmsnorm; score sigmoid; route_groups 2; route_top_groups 1; routed_scale 2.5; expert_bias true; bias_update_rate 0.002; shared 2; aux_loss 0.01 }'
    all_emb='embedding { dim 64; position rope; rope_scaling { type yarn; factor 4; beta_fast 32; beta_slow 1; original_max_position 32; mscale 0.8; mscale_all_dim 0.5 } }'
    body="allin; $body" ;; esac
case "$body" in *allin\;*) body=${body//allin;/}; llama=true
    case "$all_att" in *mla*) all_mlp='mlp { hidden 128; act swiglu; norm rmsnorm; bias false }' ;;
    *) all_mlp='mlp { hidden 128; act geglu; norm rmsnorm; bias false; norm_position sandwich }' ;; esac
    all_top=' norm_plus_one true;'   # Gemma's RMSNorms (and Gemma 3's q/k norms) by 1 + w
    case "$all_att" in *mla*) all_top= ;; esac
    llama_model="model tinyall {
    vocab 259;  seq 64;  dtype fp32;  norm_eps 1e-6;$all_top
    $all_emb
    repeat 1 {
        $all_att
        $all_mlp
    }
    repeat 3 {
        $all_att
        $all_moe
    }
    norm    { kind rmsnorm }
    lm_head { tied TIED }
}"
    case "$all_att" in *mla*) llama_model=${llama_model/TIED/false} ;;
    *) llama_model=${llama_model/TIED/true; softcap 0.5} ;; esac ;; esac
if [ "$wide" = true ]; then llama=true; llama_model=$wide_model; fi
gemma=false
case "$body" in *gemma\;*) gemma=true; body=${body//gemma;/} ;; esac
if [ "$sandwich" = true ]; then llama=true; llama_model=$sandwich_model; fi
if [ "$gemma" = true ]; then llama=true; llama_model=$gemma_model; fi
if [ "$knobs" = true ]; then llama=true; llama_model=$knobs_model; fi
if [ -n "$moe_extra" ]; then llama=true; llama_model=$moe_model; fi
{
    sed -e "s/^cluster laptop/cluster cpu$np/" -e "s/gpus_per_node *[0-9]*/gpus_per_node $np/" \
        "$root/examples/clusters/laptop.plan" |
    if [ "$fp8" = true ]; then sed -e "s/^\( *\)flops_fp32 .*/&\n\1flops_fp8 25 GFLOPS/"; else cat; fi
    awk -v body="$body" -v llama="$llama" -v model="$llama_model" '
        /^include/ { next }
        llama == "true" && /^model[ \t]/ { print model; inmodel = 1; next }
        inmodel && /^\}/ { inmodel = 0; next }
        inmodel { next }
        /^plan[ \t]*\{/ { print "plan { " body " }"; skip = 1; next }
        skip && /^\}/ { skip = 0; next }
        skip { next }
        { print }' "$root/examples/tiny.plan" | sed -e "s/tied false/tied $tied/" |
    if [ -n "$vocab" ]; then sed -e "s/vocab 256;/vocab $vocab;/"; else cat; fi |
    if [ -n "$shard" ]; then sed -e "s|data \"[^\"]*\"|data \"$shard\"|"; else cat; fi |
    if [ -n "$eps" ]; then sed -e "s/adamw *{/adamw { eps $eps;/"; else cat; fi |
    if [ -n "$dropout" ]; then sed -e "s/dtype fp32;/dtype fp32; dropout $dropout;/"; else cat; fi
} > "$out"
