#!/usr/bin/env python3
"""mscale_ref.py: YaRN's attention factors with DeepSeek's mscale pair,
written again in Python's stdlib apart from planc's runtime, after
transformers (main) src/transformers/modeling_rope_utils.py
_compute_yarn_parameters (cos and sin times attention_factor) and
src/transformers/models/deepseek_v3/modular_deepseek_v3.py
DeepseekV3Attention.__init__ (self.scaling = qk_head_dim ** -0.5, times
yarn_get_mscale(factor, mscale_all_dim) ** 2 when mscale_all_dim). None is
a key the config leaves out. tests/test_ops.c's test_rope_yarn_mscale holds
the numbers it prints:  python3 tests/rope/mscale_ref.py
"""
import math


def get_mscale(scale, mscale=1):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def attention_factor(factor, mscale, mscale_all_dim):
    """_compute_yarn_parameters: on cos and sin."""
    if mscale and mscale_all_dim:
        return float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
    return get_mscale(factor)


def softmax_factor(factor, mscale_all_dim):
    """DeepseekV3Attention: on qk_head_dim ** -0.5 (rope_scaling.get("mscale_all_dim", 0))."""
    all_dim = mscale_all_dim or 0
    if all_dim:
        m = get_mscale(factor, all_dim)
        return m * m
    return 1.0


# (factor, mscale, mscale_all_dim): V2-Lite, V3, planc's defaults, a pair
# that differs, factor 1, mscale left out beside mscale_all_dim
CASES = [(40, 0.707, 0.707), (40, 1.0, 1.0), (40, 1.0, 0), (4, 0.8, 0.5), (1, 0.707, 0.707), (40, None, 1.0)]
for f, ms, al in CASES:
    print("{ %g, %s, %s, %.17g, %.17g }," % (f, ms if ms is not None else 0, al,
                                            attention_factor(f, ms, al), softmax_factor(f, al)))
