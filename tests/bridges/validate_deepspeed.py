#!/usr/bin/env python3
"""validate_deepspeed.py: planc's ds_config.json files checked by DeepSpeed itself.

Run with a Python that has DeepSpeed (pinned 0.17.0, the version `planc export
--to deepspeed` targets) and torch (Debian's python3-torch 1.13.1 is enough:
DeepSpeedConfig and lr_schedules need no GPU); `make bridges-validators`
makes one in build/validators/ds.

usage: validate_deepspeed.py CASES.json
CASES.json: [{"name", "config": ds_config, "world": ranks, "pp": pp, "tp": tp,
              "expect_ok": bool, "train": {"lr", "warmup", "steps"} or null}]

For each case, DeepSpeedConfig(config, mpu) is built as the engine builds it
on `world` ranks (deepspeed.comm's rank and world size patched, since no
process group runs here): with pp > 1 the pipeline grid is the mpu (data
ranks world / pp, runtime/pipe/topology.py), else no mpu. A case with
expect_ok false is a layout planc refuses (TP without an mpu): DeepSpeed
must reject its batch too. With a train block, WarmupCosineLR built from the
config's scheduler params must follow planc's schedule (runtime/ops/adamw.c
prt_lr_at) as measured: two steps behind in the warm-up (lr 0 at steps 0
and 1), exactly from step warmup + 1 on.
Prints one line per failure and "validate_deepspeed: P passed, F failed".
"""
import json
import math
import sys

import deepspeed
import deepspeed.comm as dist
import torch
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.lr_schedules import WarmupCosineLR

assert deepspeed.__version__.startswith("0.17."), deepspeed.__version__
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


class Grid:
    """The mpu a PipelineModule's grid gives the engine: data ranks world / pp."""
    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp


def planc_lr(lr, warmup, total, step):
    """runtime/ops/adamw.c prt_lr_at: linear warm-up, cosine to lr/10 at total."""
    min_lr = lr / 10
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    if total <= warmup or step >= total:
        return min_lr if step >= total else lr
    ratio = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (lr - min_lr)


for case in json.load(open(sys.argv[1])):
    name, cfg, world, pp = case["name"], case["config"], case["world"], case["pp"]
    dist.get_rank = lambda *a, **k: 0
    dist.get_world_size = lambda *a, **k: world
    try:
        DeepSpeedConfig(cfg, mpu=Grid(world // pp) if pp > 1 else None)
        ok, why = True, ""
    except (AssertionError, ValueError) as e:
        ok, why = False, str(e)
    if case["expect_ok"]:
        check(f"{name}: DeepSpeedConfig accepts it on {world} ranks", ok, why)
    else:
        check(f"{name}: DeepSpeedConfig rejects it too (planc refuses it)", not ok and "!=" in why, why or "accepted")
    t = case.get("train")
    if not (ok and t and "scheduler" in cfg):
        continue
    sched = cfg["scheduler"]
    check(f"{name}: scheduler type", sched["type"] == "WarmupCosineLR", sched["type"])
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=t["lr"])
    s = WarmupCosineLR(opt, **sched["params"])
    worst = 0.0
    for step in range(t["steps"]):
        got = opt.param_groups[0]["lr"]
        # measured (DeepSpeed 0.17.0): lr 0 at steps 0 and 1, planc's step k - 2
        # through the warm-up, planc's own from step warmup + 1 on
        w = t["warmup"]
        want = 0.0 if step < 2 and w else planc_lr(t["lr"], w, t["steps"], step - 2 if step <= w else step)
        worst = max(worst, abs(got - want) / t["lr"])
        opt.step()
        s.step()
    check(f"{name}: WarmupCosineLR follows planc's schedule (two steps behind in the warm-up, then exactly)", worst < 1e-6,
          f"worst relative difference {worst:.3g}")

print(f"validate_deepspeed: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
