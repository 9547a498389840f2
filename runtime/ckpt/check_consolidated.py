#!/usr/bin/env python3
"""check_consolidated.py: read a consolidated checkpoint as any safetensors
user would, and compare it with the values the test wrote.

usage: check_consolidated.py FILE.safetensors EXPECTED.bin

FILE is parsed with nothing but the standard library (8-byte little-endian
header length, JSON header, raw little-endian data), and also with the
safetensors package's numpy loader when it is installed. EXPECTED.bin is
u32 count, then per tensor u32 name length, name, u64 rows, u64 cols and
rows*cols float32. Exit 0 when every tensor matches bit for bit.
"""
import array
import json
import struct
import sys


def read_expected(path):
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<I", f.read(4))
        for _ in range(n):
            (ln,) = struct.unpack("<I", f.read(4))
            name = f.read(ln).decode()
            rows, cols = struct.unpack("<QQ", f.read(16))
            vals = array.array("f")
            vals.frombytes(f.read(4 * rows * cols))
            out[name] = (rows, cols, vals)
    return out


def read_plain(path):
    """The safetensors format by hand: returns {name: (shape, array)} and metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    out, end = {}, 0
    for name, info in header.items():
        assert info["dtype"] == "F32", f"{name}: dtype {info['dtype']}"
        b, e = info["data_offsets"]
        vals = array.array("f")
        vals.frombytes(data[b:e])
        count = 1
        for d in info["shape"]:
            count *= d
        assert len(vals) == count, f"{name}: {len(vals)} values for shape {info['shape']}"
        out[name] = (info["shape"], vals)
        end = max(end, e)
    assert end == len(data), f"data section has {len(data)} bytes, tensors use {end}"
    return out, meta


def main():
    path, expected_path = sys.argv[1], sys.argv[2]
    want = read_expected(expected_path)
    got, meta = read_plain(path)
    bad = 0
    if set(got) != set(want):
        print(f"✗ tensor names differ: {sorted(set(got) ^ set(want))}")
        bad += 1
    for name, (rows, cols, vals) in want.items():
        if name not in got:
            continue
        shape, g = got[name]
        want_shape = [rows] if cols == 1 and len(shape) == 1 else [rows, cols]
        if shape != want_shape or list(g) != list(vals):
            print(f"✗ {name}: shape {shape} (want {want_shape}) or values differ")
            bad += 1
    print(f"{'✓' if not bad else '✗'} {path}: {len(got)} tensors read with the standard library "
          f"(JSON header, struct/array data); metadata {meta}")
    try:
        from safetensors.numpy import load_file
    except ImportError:
        print("  (the safetensors package is not installed: its loader was not tried)")
    else:
        tensors = load_file(path)
        for name, (rows, cols, vals) in want.items():
            t = tensors[name]
            if t.size != rows * cols or list(t.reshape(-1)) != list(vals):
                print(f"✗ safetensors.numpy.load_file: {name} differs")
                bad += 1
        print(f"{'✓' if not bad else '✗'} safetensors.numpy.load_file reads {len(tensors)} tensors, "
              "equal bit for bit")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
