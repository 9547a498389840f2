#!/usr/bin/env python3
"""inv_freq_ref.py: RoPE inverse frequencies as transformers v4.46
modeling_rope_utils.py computes them (_compute_default_rope_parameters,
_compute_linear_scaling_rope_parameters, _compute_llama3_parameters,
_compute_yarn_parameters; YaRN's correction range floored / ceiled), written
again from that code in Python's stdlib (double precision, no torch), apart
from planc's runtime. tests/test_ops.c's test_rope_inv_freq holds the numbers
it prints:  python3 tests/rope/inv_freq_ref.py
"""
import math
def default(base, dim):
    return [1.0 / (base ** (k / dim)) for k in range(0, dim, 2)]
def linear(base, dim, factor):
    return [f / factor for f in default(base, dim)]
def llama3(base, dim, factor, lo, hi, old):
    inv = default(base, dim)
    low_w, high_w = old / lo, old / hi
    out = []
    for f in inv:
        w = 2 * math.pi / f
        g = f / factor if w > low_w else f
        s = (old / w - lo) / (hi - lo)
        sm = (1 - s) * g / factor + s * g
        med = (not (w < high_w)) and (not (w > low_w))
        out.append(sm if med else g)
    return out
def yarn(base, dim, factor, bf, bs, old):
    def cdim(n): return (dim * math.log(old / (n * 2 * math.pi))) / (2 * math.log(base))
    low, high = math.floor(cdim(bf)), math.ceil(cdim(bs))
    low, high = max(low, 0), min(high, dim - 1)
    if low == high: high += 0.001
    pos = [base ** (k / dim) for k in range(0, dim, 2)]
    out = []
    for i, p in enumerate(pos):
        ramp = min(max((i - low) / (high - low), 0), 1)
        ef = 1 - ramp
        out.append((1 / (factor * p)) * (1 - ef) + (1 / p) * ef)
    return out, 0.1 * math.log(factor) + 1
L = llama3(500000.0, 128, 8, 1, 4, 8192)
Y, m = yarn(10000.0, 64, 40, 32, 1, 4096)
Li = linear(10000.0, 128, 4)
for name, v, idx in [("linear", Li, [0, 1, 17, 63]), ("llama3", L, [0, 20, 40, 45, 48, 50, 63]), ("yarn", Y, [0, 5, 10, 11, 15, 20, 31])]:
    print(name, ", ".join("{%d, %.17g}" % (i, v[i]) for i in idx))
print("mscale %.17g" % m)
def lo_hi(base, dim, bf, bs, old):
    def cdim(n): return (dim * math.log(old / (n * 2 * math.pi))) / (2 * math.log(base))
    return cdim(bf), cdim(bs)
print("yarn correction dims (floor, ceil)", lo_hi(10000.0, 64, 32, 1, 4096))
import math
print("llama3 bands", [ (i, 2*math.pi/default(500000.0,128)[i]) for i in (40,45,48,50)])
