#!/usr/bin/env python3
"""check.py: hold a run's memory to `planc check`'s prediction.

  check.py report CHECK.json MEM.jsonl
      every rank's --mem-report peak_bytes equals its stage's total less the
      reserve within 5 % + 4 MiB (the allocator counts; no formula here)
  check.py rss CHECK.json MEM.jsonl RSSDIR BASE.json BASERSSDIR
      max RSS per rank (KiB files rss.R) less the tiny baseline's rank R,
      against the prediction less the baseline's, within 12 % + 32 MiB
  check.py cuda CHECK.json MEM.jsonl
      a CUDA executable's --dry-run (no GPU needed): every rank's peak and
      each kind's own peak within 5 % + 4 MiB of the plan's (kind by kind)
  check.py delta CHECK.json MEM.jsonl BASE.json BASEMEM.jsonl [none]
      a feature's own items (dropout's masks): each stage's allocator
      activations peak (its highest rank's) less the same layout's without
      the feature equal the plan's difference within 1 % + 64 KiB (item by
      item, not 5 %)
  check.py buffers CHECK.json MEM.jsonl
      a --dry-run's buffers (its kind_peak): every rank's equals its stage's
      buffers_bytes to the byte (the pipeline's transfer buffers, freed once
      sent, planner/memory.c plan_pipe_xfer_bufs; the early receive
      buffer; ZeRO's buckets and gathered layers)
  check.py same RUN.jsonl DRY.jsonl
      a --dry-run's report against a real run's of the same executable:
      every rank's peak and each kind's peak within 5 % + 4 MiB
      (tests/gpu/check-mem.sh: what the GPU-less CI check stands for)
  check.py fp8 CHECK.json MEM.jsonl BASE.json BASEMEM.jsonl
      FP8's copies (issue 27): every rank's fp8 kind high-water mark (the
      kept weights, a GEMM's quantised operands, their scales, the amax
      histories) equals its stage's fp8_bytes to the byte; every other
      kind's peak equals the same rank's in the same layout without fp8
      (but the buffers of a pipeline: a send's buffer lives until the send
      is seen complete, which moves with the receiver's timing, so two
      real runs may differ by a transfer buffer; their case marks x, which
      holds them to the byte in a --dry-run), and the plan's items other
      than buffers are the same without fp8, its buffers fp8_bytes more
      (FP8 adds its copies and nothing else)
  check.py savings Z0.json Z1.json Z2.json Z3.json RSS0 RSS1 RSS2 RSS3
      measured (max RSS, worst rank) each ZeRO stage saves >= 60 % of what
      it shards on dp 4: 3/4 of ZeRO-0's optimizer state, gradients, weights
Prints one line per rank; exits 1 on a miss.
"""
import json, os, sys

MIB = 1 << 20


def stages(path):
    return {s["stage"]: s for s in json.load(open(path))["stages"]}


def predicted(st):
    return st["total_bytes"] - st["reserve_bytes"]


def reports(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def rss(dirname, rank):
    with open(os.path.join(dirname, "rss.%d" % rank)) as f:
        return int(f.read().split()[-1]) * 1024   # /usr/bin/time %M: KiB


def within(meas, pred, rtol, atol):
    return abs(meas - pred) <= rtol * pred + atol


def check_report(check, mem):
    st, bad = stages(check), 0
    for r in reports(mem):
        p, m = predicted(st[r["stage"]]), r["peak_bytes"]
        ok = within(m, p, 0.05, 4 * MIB)
        bad += not ok
        kinds = " ".join("%s %.1f" % (k[:4], v / MIB) for k, v in r["by_kind"].items())
        print("  rank %d stage %d: predicted %.1f MiB, allocator peak %.1f MiB (%+.1f %%) [%s]%s"
              % (r["rank"], r["stage"], p / MIB, m / MIB, 100.0 * (m - p) / p, kinds,
                 "" if ok else "  MISS (5 % + 4 MiB)"))
    return bad


KINDS = ["params", "grads", "optimizer", "activations", "buffers"]


def check_cuda(check, mem):
    """The CUDA executable's --dry-run, run here without a GPU: every rank's
    peak within 5 % + 4 MiB of its stage's total less the reserve, and each
    kind's own high-water mark (kind_peak) within 5 % + 4 MiB of the plan's
    item of that kind (the CUDA inventory is the planner's)."""
    st, bad, seen = stages(check), 0, 0
    for r in reports(mem):
        seen += 1
        s = st[r["stage"]]
        p, m = predicted(s), r["peak_bytes"]
        miss = [] if within(m, p, 0.05, 4 * MIB) else ["peak"]
        cells = []
        for k in KINDS:
            got, want = r["kind_peak"][k], s[k + "_bytes"]
            if not within(got, want, 0.05, 4 * MIB):
                miss.append(k)
            cells.append("%s %.1f/%.1f" % (k[:4], got / MIB, want / MIB))
        bad += bool(miss)
        print("  rank %d stage %d: predicted %.1f MiB, dry-run peak %.1f MiB (%+.1f %%) [%s]%s"
              % (r["rank"], r["stage"], p / MIB, m / MIB, 100.0 * (m - p) / p, " ".join(cells),
                 "  MISS (5 %% + 4 MiB: %s)" % ", ".join(miss) if miss else ""))
    return bad + (seen == 0)


def check_buffers(check, mem):
    st, bad, seen = stages(check), 0, 0
    for r in reports(mem):
        seen += 1
        # the plan counts FP8's copies among its buffers; the runtime
        # allocates them as their own kind (fp8), held by check_fp8
        s = st[r["stage"]]
        got, want = r["kind_peak"]["buffers"], s["buffers_bytes"] - s.get("fp8_bytes", 0)
        bad += got != want
        print("  rank %d stage %d: buffers planned %d B, allocated at the dry-run's peak %d B%s"
              % (r["rank"], r["stage"], want, got, "" if got == want else "  MISS (to the byte)"))
    return bad + (seen == 0)


def check_same(run, dry):
    bad, seen = 0, 0
    by_rank = {r["rank"]: r for r in reports(dry)}
    for r in reports(run):
        seen += 1
        d = by_rank.get(r["rank"])
        if d is None:
            print("  rank %d: no --dry-run line  MISS" % r["rank"])
            bad += 1
            continue
        pairs = [("peak", r["peak_bytes"], d["peak_bytes"])] + \
                [(k, r["kind_peak"][k], d["kind_peak"][k]) for k in KINDS]
        miss = [n for n, a, b in pairs if not within(b, a, 0.05, 4 * MIB)]
        bad += bool(miss)
        print("  rank %d: %s%s" % (r["rank"], " ".join("%s %.1f/%.1f" % (n[:4], a / MIB, b / MIB)
                                                      for n, a, b in pairs),
                                   "  MISS (5 %% + 4 MiB: %s)" % ", ".join(miss) if miss else ""))
    return bad + (seen == 0)


def check_rss(check, mem, rdir, base, bdir):
    st, bst, bad = stages(check), stages(base), 0
    for r in reports(mem):
        s = r["stage"]
        p = predicted(st[s]) - predicted(bst[s])
        m = rss(rdir, r["rank"]) - rss(bdir, r["rank"])
        ok = within(m, p, 0.12, 32 * MIB)
        bad += not ok
        print("  rank %d stage %d: predicted %.1f MiB over the baseline, measured RSS %.1f MiB (%+.1f %%)%s"
              % (r["rank"], s, p / MIB, m / MIB, 100.0 * (m - p) / p,
                 "" if ok else "  MISS (12 % + 32 MiB)"))
    return bad


def stage_peaks(path, kind):
    """Each stage's peak of one kind over its ranks: the DP replicas of a
    stage run the same program, but where an asynchronous send or receive
    lands between two of its allocations can move one replica's high-water
    mark by a buffer; the plan predicts the stage's worst, so the stage is
    judged by its highest rank."""
    peaks = {}
    for r in reports(path):
        peaks[r["stage"]] = max(peaks.get(r["stage"], 0), r["by_kind"][kind])
    return peaks


def check_delta(check, mem, base, bmem, none=""):
    """The feature's activations: predicted and allocated alike (1 % + 64
    KiB) and more than none; with none == "none", a feature that keeps
    nothing: both differences exactly 0."""
    st, bst, bad = stages(check), stages(base), 0
    got, bgot = stage_peaks(mem, "activations"), stage_peaks(bmem, "activations")
    for s in sorted(got):
        p = st[s]["activations_bytes"] - bst[s]["activations_bytes"]
        m = got[s] - bgot[s]
        if none == "none":
            ok, tol = p == 0 and m == 0, "  MISS (0 bytes both)"
        else:
            ok, tol = p > 0 and within(m, p, 0.01, 64 * 1024), "  MISS (1 % + 64 KiB)"
        bad += not ok
        print("  stage %d: the feature's activations predicted %.3f MiB, allocated %.3f MiB%s"
              % (s, p / MIB, m / MIB, "" if ok else tol))
    return bad


def check_fp8(check, mem, base, bmem):
    st, bst, bad, seen = stages(check), stages(base), 0, 0
    for s in sorted(st):
        p, b = st[s], bst[s]
        same = all(p[k + "_bytes"] == b[k + "_bytes"] for k in KINDS if k != "buffers")
        ok = same and p["buffers_bytes"] - b["buffers_bytes"] == p["fp8_bytes"]
        bad += not ok
        if not ok:
            print("  stage %d: the plan's items besides the FP8 copies differ without fp8  MISS" % s)
    by_rank = {r["rank"]: r for r in reports(bmem)}
    timed = ["buffers"] if len(st) > 1 else []   # pipeline sends: see the docstring
    for r in reports(mem):
        seen += 1
        want, got = st[r["stage"]]["fp8_bytes"], r["kind_peak"].get("fp8", 0)
        b = by_rank.get(r["rank"])
        other = [k for k in KINDS if k not in timed and
                 (b is None or r["kind_peak"][k] != b["kind_peak"][k])]
        ok = got == want and not other
        bad += not ok
        print("  rank %d stage %d: fp8 copies planned %d B, allocated %d B%s%s"
              % (r["rank"], r["stage"], want, got, "" if got == want else "  MISS (to the byte)",
                 "  MISS (without fp8 these differ: %s)" % ", ".join(other) if other else ""))
    return bad + (seen == 0)


def check_savings(checks, rdirs):
    z0 = stages(checks[0])[0]
    shard = [3 * z0["optimizer_bytes"] / 4, 3 * z0["grads_bytes"] / 4, 3 * z0["params_bytes"] / 4]
    what = ["optimizer state", "gradients", "weights"]
    peak = [max(rss(d, r) for r in range(4)) for d in rdirs]
    bad = 0
    for z in range(1, 4):
        saved = peak[z - 1] - peak[z]
        ok = saved >= 0.6 * shard[z - 1]
        bad += not ok
        print("  ZeRO-%d over ZeRO-%d: saves %.1f MiB measured of %.1f MiB of %s sharded (%.0f %%)%s"
              % (z, z - 1, saved / MIB, shard[z - 1] / MIB, what[z - 1], 100.0 * saved / shard[z - 1],
                 "" if ok else "  MISS (>= 60 %)"))
    return bad


def main(argv):
    mode = argv[1]
    if mode == "report":
        bad = check_report(argv[2], argv[3])
    elif mode == "cuda":
        bad = check_cuda(argv[2], argv[3])
    elif mode == "delta":
        bad = check_delta(*argv[2:7])
    elif mode == "same":
        bad = check_same(argv[2], argv[3])
    elif mode == "buffers":
        bad = check_buffers(argv[2], argv[3])
    elif mode == "fp8":
        bad = check_fp8(*argv[2:6])
    elif mode == "rss":
        bad = check_rss(*argv[2:7])
    else:
        bad = check_savings(argv[2:6], argv[6:10])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
