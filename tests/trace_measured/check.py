#!/usr/bin/env python3
"""check.py: hold a measured trace (an executable's --trace) to its Program.

    check.py MEASURED.json PREDICTED.json DP TP PP [--svg CMP.svg] [--step K]

PREDICTED.json is `planc trace FILE -o PREDICTED.json` of the same plan: its
events are the Program's ops, one per op of each stage. The measured file
must parse as JSON and hold, for every rank of the layout (rank = tp +
TP*(dp + DP*pp), the stage is pp), each op of its stage's list exactly once,
with the same (op index, kind, micro-batch, chunk) as the prediction, on
tid 3k + stream (k: the rank's place among its stage's ranks; stream as in
the prediction), with start times in op-list order and no two events of
one rank's tid overlapping. With --svg, the --compare picture must parse as
XML and draw one box per op of each stage's lowest rank in its measured
panel. Prints one line per rank; exits 1 with the first mismatches.
"""
import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict

fails = []


def bad(msg):
    fails.append(msg)


def x_events(doc):
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def key(e):
    a = e["args"]
    return (a["op"], a["kind"], a["mb"], a["chunk"])


def main(argv):
    meas_path, pred_path = argv[1], argv[2]
    dp, tp, pp = int(argv[3]), int(argv[4]), int(argv[5])
    svg = argv[argv.index("--svg") + 1] if "--svg" in argv else None
    step = int(argv[argv.index("--step") + 1]) if "--step" in argv else None
    with open(meas_path) as f:
        meas = json.load(f)
    with open(pred_path) as f:
        pred = json.load(f)
    other = meas.get("otherData", {})
    if other.get("format") != "planc-trace" or other.get("source") != "measured":
        bad(f"otherData says {other.get('format')!r}/{other.get('source')!r}, not planc-trace/measured")
    if step is not None and other.get("step") != step:
        bad(f"otherData.step is {other.get('step')}, expected {step}")

    # the Program, per stage, from the prediction; the stream of each op
    want = defaultdict(list)
    stream = {}
    for e in x_events(pred):
        want[e["pid"]].append(key(e))
        stream[e["args"]["kind"]] = e["tid"]

    by_rank = defaultdict(list)
    for e in x_events(meas):
        for field in ("pid", "tid", "ts", "dur", "args"):
            if field not in e:
                bad(f"event without {field}: {e}")
                break
        else:
            if e["dur"] < 0:
                bad(f"negative duration: {e}")
            by_rank[e["args"].get("rank")].append(e)

    ranks = dp * tp * pp
    if sorted(by_rank) != list(range(ranks)):
        bad(f"ranks present {sorted(by_rank, key=str)}, expected 0..{ranks - 1}")
    for r in range(ranks):
        s, k = r // (dp * tp), r % (dp * tp)  # stage; place among the stage's ranks
        evs = by_rank.get(r, [])
        got = Counter(key(e) for e in evs)
        exp = Counter(want[s])
        if got != exp:
            missing = list((exp - got).elements())[:3]
            extra = list((got - exp).elements())[:3]
            bad(f"rank {r} (stage {s}): {len(evs)} events, {len(want[s])} ops in the Program; "
                f"missing {missing}, extra or repeated {extra}")
        for e in evs:
            if e["pid"] != s:
                bad(f"rank {r}: event on pid {e['pid']}, its stage is {s}")
                break
            if e["tid"] != 3 * k + stream.get(e["args"]["kind"], 0):
                bad(f"rank {r}: {e['name']} on tid {e['tid']}, expected {3 * k + stream[e['args']['kind']]}")
                break
        in_order = sorted(evs, key=lambda e: e["args"]["op"])
        for a, b in zip(in_order, in_order[1:]):
            if b["ts"] < a["ts"]:
                bad(f"rank {r}: op {b['args']['op']} starts before op {a['args']['op']}")
                break
        lanes = defaultdict(list)
        for e in evs:
            lanes[e["tid"]].append(e)
        for tid, lane in lanes.items():
            lane.sort(key=lambda e: e["ts"])
            for a, b in zip(lane, lane[1:]):
                if b["ts"] < a["ts"] + a["dur"] - 1e-3:  # 1 ns: both ends are rounded to the ns
                    bad(f"rank {r} tid {tid}: {a['name']} [{a['ts']}, +{a['dur']}] overlaps {b['name']} at {b['ts']}")
                    break
        busy = sum(e["dur"] for e in evs) / 1e3
        span = (max(e["ts"] + e["dur"] for e in evs) - min(e["ts"] for e in evs)) / 1e3 if evs else 0
        print(f"  rank {r}: stage {s}, {len(evs)} ops (Program: {len(want[s])}), "
              f"span {span:.2f} ms, busy {busy:.2f} ms")

    if svg:
        root = ET.parse(svg).getroot()
        panels = [g for g in root.iter() if g.get("data-source") == "measured"]
        if len(panels) != 1:
            bad(f"{svg}: {len(panels)} measured panels, expected 1")
        else:
            boxes = sum(1 for el in panels[0].iter()
                        if el.tag.endswith("rect") and (el.get("class") or "").split()[:1] == ["op"])
            expect = sum(len(v) for v in want.values())
            if boxes != expect:
                bad(f"{svg}: measured panel draws {boxes} boxes, the Program has {expect} ops")
            else:
                print(f"  {svg}: parses; measured panel draws {boxes} boxes, one per op")

    for m in fails[:8]:
        print(f"FAIL: {m}", file=sys.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
