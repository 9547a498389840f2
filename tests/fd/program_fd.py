#!/usr/bin/env python3
"""program_fd.py: the generated program's gradients against central finite
differences of its own loss, end to end (issue 29: every new feature's
backward, in the program planc emits, not only its runtime ops).

    usage: program_fd.py EXE WORKDIR [TENSOR-SUBSTRING ...]

EXE is a single-rank program built from a plan whose train block has
grad_clip 0, weight_decay 0 and warmup 1 (its first step's lr is lr). One
step from a step-0 checkpoint leaves AdamW's first moment m = (1 - beta1) g
in the step-1 checkpoint: g, the program's gradient of the step-0 loss,
exactly (no clipping, no decay). For the elements of largest |g| of each
parameter tensor whose name holds one of the substrings (all tensors
without any; FD_PER_TENSOR of them, default 1), the step-0 checkpoint is edited by +-h and resumed for one
step (its index's CRC-32C rewritten): its logged loss is L(p +- h e_i) on
the same batch, and
(L(p + h) - L(p - h)) / 2h must equal g_i within atol + rtol |g_i|. The
loss is logged with 9 significant digits and computed in fp32, so h is
relative to the element (h = 1e-2 max(|p_i|, 1)) and the tolerance is
2e-4 + 3e-2 |g_i|. Prints each element checked and exits 1 on a mismatch.
"""
import json, os, shutil, struct, subprocess, sys

exe, work = sys.argv[1], sys.argv[2]
want = sys.argv[3:]
mpirun = os.environ.get("MPIRUN", "mpirun --oversubscribe --bind-to none").split()
ATOL, RTOL = 2e-4, 3e-2
PER_TENSOR = int(os.environ.get("FD_PER_TENSOR", "1"))   # elements checked per tensor (largest |g| first)


def run(*args):
    r = subprocess.run(mpirun + ["-np", "1", exe] + list(args), cwd=work, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit("program_fd: %s %s failed:\n%s%s" % (exe, " ".join(args), r.stdout[-2000:], r.stderr[-2000:]))


def tensors(path):
    """name -> (byte offset of its data in the file, element count) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a, b = v["data_offsets"]
        out[k] = (8 + n + a, (b - a) // 4)
    return out


def read(path, off, count):
    with open(path, "rb") as f:
        f.seek(off)
        return struct.unpack("<%df" % count, f.read(4 * count))


def crc32c(data):
    """CRC-32C (Castagnoli, reflected 0x82F63B78), as the checkpoint index records each file's."""
    if not hasattr(crc32c, "table"):
        crc32c.table = []
        for b in range(256):
            c = b
            for _ in range(8):
                c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
            crc32c.table.append(c)
    t, c = crc32c.table, 0xFFFFFFFF
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def edit(d, off, value):
    """Write one fp32 element at byte off of d's shard and record the file's new CRC-32C in the index."""
    with open(shard(d), "r+b") as f:
        f.seek(off)
        f.write(struct.pack("<f", value))
    with open(shard(d), "rb") as f:
        crc = crc32c(f.read())
    with open(os.path.join(d, "index.json")) as f:
        idx = json.load(f)
    idx["files"]["rank-00000.safetensors"]["crc32c"] = "%08x" % crc
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump(idx, f)


def first_loss(log):
    with open(log) as f:
        return float(json.loads(f.readline())["loss"])


def shard(d):
    return os.path.join(d, "rank-00000.safetensors")


os.makedirs(work, exist_ok=True)
for d in ("ck0", "ck1", "ckx"):
    shutil.rmtree(os.path.join(work, d), ignore_errors=True)
run("--steps", "0", "--save", "ck0")
ck0 = os.path.join(work, "ck0", "step-00000000")
run("--resume", ck0, "--steps", "1", "--save", "ck1", "--log-json", "base.jsonl")
ck1 = os.path.join(work, "ck1", "step-00000001")
t0, t1 = tensors(shard(ck0)), tensors(shard(ck1))
cfg = open(exe + ".cu").read() if os.path.exists(exe + ".cu") else ""
# ADAMW = { lr, min_lr, warmup, horizon, beta1, ... } in the program's source
beta1 = float(cfg.split("static const prt_adamw_cfg ADAMW = {")[1].split(",")[4].strip().rstrip("f")) if cfg else 0.9

names = [k for k in t0 if not k.startswith("opt.") and (not want or any(w in k for w in want))]
bad = checked = 0
for name in names:
    off, cnt = t0[name]
    p = read(shard(ck0), off, cnt)
    m_off, _ = t1["opt.exp_avg." + name]
    g = [x / (1.0 - beta1) for x in read(shard(ck1), m_off, cnt)]
    for i in sorted(range(cnt), key=lambda i: -abs(g[i]))[:PER_TENSOR]:
        h = 1e-2 * max(abs(p[i]), 1.0)
        loss = []
        for sign in (1, -1):
            x = os.path.join(work, "ckx")
            shutil.rmtree(x, ignore_errors=True)
            shutil.copytree(ck0, x)
            edit(x, off + 4 * i, p[i] + sign * h)
            run("--resume", x, "--steps", "1", "--log-json", "fd.jsonl")
            loss.append(first_loss(os.path.join(work, "fd.jsonl")))
        fd = (loss[0] - loss[1]) / (2 * h)
        ok = abs(fd - g[i]) <= ATOL + RTOL * abs(g[i])
        checked += 1
        bad += not ok
        print("%s %-40s [%5d] program %+.6e  finite differences %+.6e" % ("ok  " if ok else "FAIL", name, i, g[i], fd))
print("program_fd: %d elements of %d tensors, %d mismatches" % (checked, len(names), bad))
sys.exit(1 if bad else 0)
