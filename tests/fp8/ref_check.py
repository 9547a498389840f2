#!/usr/bin/env python3
"""ref_check.py: planrt's FP8 encoder against ml_dtypes, bit for bit.

    ref_check.py BUILD/tests/fp8_encode [WORKDIR]

For E4M3 (ml_dtypes.float8_e4m3fn) and E5M2 (ml_dtypes.float8_e5m2), in
the non-saturating mode (ml_dtypes' own cast, round to nearest even) and
the saturating one (ml_dtypes of the value clipped to +-max first, which
is what Transformer Engine's and torchao's casts compute), the C program
encodes the same fp32 values and every code must be equal:
  * 2^20 random values, uniform in log2-magnitude over [-40, 40) (both
    formats' subnormals, normals and far beyond max) with random mantissa
    bits and sign;
  * every code's own value, every tie point (midpoint) between consecutive
    codes and the fp32 neighbours on either side of each, negated too;
  * +-0, +-inf, NaNs with several payloads and signs, fp32 subnormals,
    values just past max, FLT_MAX.
Prints one line per (format, mode): values, mismatches; exit 1 on any
mismatch (the first ones are printed), 2 on bad usage.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import ml_dtypes

FORMATS = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
SEED = 27          # issue 27
N_RANDOM = 1 << 20


def random_values(rng):
    """Uniform in log2|x| over [-40, 40): exponent and mantissa bits drawn."""
    e = rng.integers(-40, 40, N_RANDOM, dtype=np.int64) + 127
    mant = rng.integers(0, 1 << 23, N_RANDOM, dtype=np.int64)
    sign = rng.integers(0, 2, N_RANDOM, dtype=np.int64) << 31
    return ((sign | (e << 23) | mant).astype(np.uint32)).view(np.float32)


def code_points(dtype):
    """Each finite positive code, the midpoints between neighbours and the
    fp32 values one ulp either side of every midpoint and code."""
    vals = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
    pos = np.unique(vals[np.isfinite(vals) & (vals >= 0)])
    mids = ((pos[:-1].astype(np.float64) + pos[1:]) / 2).astype(np.float32)
    fmax = np.float32(ml_dtypes.finfo(dtype).max)
    past = np.float32(2) * fmax - pos[-2]   # the next code's value, were there one
    top = np.array([fmax, past, (fmax.astype(np.float64) + past) / 2], np.float32)
    base = np.concatenate([pos, mids, top])
    up = np.nextafter(base, np.float32(np.inf))
    down = np.nextafter(base, np.float32(0))
    allp = np.concatenate([base, up, down])
    return np.concatenate([allp, -allp])


def special_values():
    bits = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000,
                     0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
                     0x7FA00000, 0x7FE00000, 0x7F9FFFFF, 0x7FFFFFFF,
                     0x00000001, 0x80000001, 0x007FFFFF, 0x00400000,
                     0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF],
                    dtype=np.uint32)
    return bits.view(np.float32)


def expected(x, dtype, sat):
    if sat:
        m = np.float32(ml_dtypes.finfo(dtype).max)
        x = np.clip(x, -m, m)
    return x.astype(dtype).view(np.uint8)


def run_c(prog, fmt, mode, x, work):
    fin = os.path.join(work, "in.f32")
    fout = os.path.join(work, "out.u8")
    x.astype("<f4").tofile(fin)
    subprocess.run([prog, fmt, mode, fin, fout], check=True)
    got = np.fromfile(fout, dtype=np.uint8)
    if got.size != x.size:
        sys.exit(f"ref_check: {prog} wrote {got.size} codes for {x.size} values")
    return got


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    prog = sys.argv[1]
    rng = np.random.default_rng(SEED)
    rand = random_values(rng)
    bad_total = 0
    with tempfile.TemporaryDirectory(dir=sys.argv[2] if len(sys.argv) == 3 else None) as work:
        print(f"# ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}, seed {SEED}")
        print("# format  mode    values     ties+codes  mismatches")
        for fmt, dtype in FORMATS.items():
            pts = code_points(dtype)
            x = np.concatenate([rand, pts, special_values()])
            for mode in ("nonsat", "sat"):
                want = expected(x, dtype, mode == "sat")
                got = run_c(prog, fmt, mode, x, work)
                wrong = np.nonzero(got != want)[0]
                print(f"  {fmt}    {mode:6}  {x.size:9,d}  {pts.size:10,d}  {wrong.size:10,d}")
                for i in wrong[:8]:
                    print(f"    x {x[i]!r} (0x{x[i:i+1].view(np.uint32)[0]:08x}): "
                          f"ml_dtypes 0x{want[i]:02x}, planrt 0x{got[i]:02x}")
                bad_total += wrong.size
    if bad_total:
        print(f"ref_check: {bad_total} mismatches", file=sys.stderr)
        return 1
    print("ref_check: every code equals ml_dtypes'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
