#!/usr/bin/env python3
"""check.py: well-formedness of planc's pictures, with real parsers.

usage: check.py FILE.svg|FILE.json ...

SVG timelines: parses with xml.etree; the root is an <svg> in the SVG
namespace carrying data-x0 / data-px-per-ms; every stage group has op boxes
of non-negative width inside the plot. When FILE.json sits beside FILE.svg
(same stem), the number of boxes per stage of the first panel must equal the
number of "X" events of that pid in the trace (both are the Program's ops).
Search plots (root without data-x0): parses, has points.
Chrome traces: json.load; traceEvents with ph "X" events carrying numeric
ts, dur >= 0, integer pid and tid; events of one (pid, tid) never overlap,
so Perfetto nests nothing wrongly. Exit 1 on the first problem of a file.
"""
import json
import os
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def fail(path, msg):
    print(f"{path}: {msg}", file=sys.stderr)
    return False


def svg_boxes(path):
    """Boxes per stage of the first panel, or None for a search plot."""
    root = ET.parse(path).getroot()
    if root.tag != NS + "svg":
        raise ValueError(f"root is {root.tag}, not svg")
    if "data-x0" not in root.attrib:
        if not root.findall(f".//{NS}circle"):
            raise ValueError("search plot without points")
        return None
    x0 = float(root.attrib["data-x0"])
    width = float(root.attrib["width"])
    panels = [g for g in root.iter(NS + "g") if g.get("class") == "panel"]
    if not panels:
        raise ValueError("no panel")
    counts = []
    for panel in panels:
        per = {}
        for g in panel.iter(NS + "g"):
            if g.get("class") != "stage":
                continue
            s = int(g.get("data-stage"))
            n = 0
            for r in g.iter(NS + "rect"):
                if not r.get("class", "").startswith("op "):
                    continue
                x, w = float(r.get("x")), float(r.get("width"))
                if w < 0 or x < x0 - 1e-3 or x + w > width + 1e-3:
                    raise ValueError(f"stage {s}: box outside the plot (x {x}, width {w})")
                n += 1
            per[s] = n
        if sorted(per) != list(range(len(per))):
            raise ValueError(f"stage rows {sorted(per)} are not 0..n-1")
        counts.append(per)
    return counts[0]


def trace_events(path):
    """X events per pid, after checking the format."""
    with open(path) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    per, lanes = {}, {}
    for e in ev:
        if e.get("ph") != "X":
            continue
        for k in ("ts", "dur"):
            if not isinstance(e[k], (int, float)):
                raise ValueError(f"{k} is not a number: {e}")
        if e["dur"] < 0 or not isinstance(e["pid"], int) or not isinstance(e["tid"], int):
            raise ValueError(f"bad event {e}")
        per[e["pid"]] = per.get(e["pid"], 0) + 1
        lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for (pid, tid), spans in lanes.items():
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            if b0 < a1 - 1e-3:
                raise ValueError(f"pid {pid} tid {tid}: events overlap ({a0}-{a1} and {b0}-{b1} us)")
    if not per:
        raise ValueError("no X events")
    return per


def main(paths):
    ok = True
    for p in paths:
        try:
            if p.endswith(".svg"):
                boxes = svg_boxes(p)
                j = p[:-4] + ".json"
                if boxes is not None and os.path.exists(j):
                    if boxes != trace_events(j):
                        ok = fail(p, f"boxes per stage {boxes} != events per pid in {j}")
            elif p.endswith(".json"):
                trace_events(p)
            else:
                ok = fail(p, "neither .svg nor .json")
        except Exception as e:  # a parser error names the line and column
            ok = fail(p, f"{type(e).__name__}: {e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
