#!/usr/bin/env python3
"""validate_torchtitan.py: planc's torchtitan job files read by torchtitan 0.2.2's own loader.

usage: validate_torchtitan.py TORCHTITAN_SRC CASES.json
TORCHTITAN_SRC: the unpacked torchtitan 0.2.2 wheel (the folder holding
torchtitan/; `make bridges-validators` puts it in build/validators/torchtitan-0.2.2).
CASES.json: [{"name", "path", "expect": {"section.key": value, ...}}]

Only torchtitan.config is imported (ConfigManager.parse_args with
--job.config_file, as its train.py reads a job), not torchtitan's
__init__, whose quantization imports need a newer torch than Debian's
1.13.1; the config code needs torch only for its dtype names. Each file
must load (manager.py raises on a key its dataclasses lack), hold the
values planc wrote, and the same file with [training] seed (what planc
wrote before) must be refused, so the check can fail.
Prints one line per failure and "validate_torchtitan: P passed, F failed".
"""
import json
import os
import sys
import types

src = sys.argv[1]
pkg = types.ModuleType("torchtitan")
pkg.__path__ = [os.path.join(src, "torchtitan")]
sys.modules["torchtitan"] = pkg
from torchtitan.config.manager import ConfigManager  # noqa: E402

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def load(path):
    return ConfigManager().parse_args(["--job.config_file", path])


for case in json.load(open(sys.argv[2])):
    name, path = case["name"], case["path"]
    try:
        cfg, why = load(path), ""
    except Exception as e:   # the loader's ValueError, tomllib's, tyro's
        cfg, why = None, f"{type(e).__name__}: {e}"
    check(f"{name}: torchtitan 0.2.2 loads it", cfg is not None, why[:300])
    if cfg is None:
        continue
    for key, want in case["expect"].items():
        section, field = key.split(".")
        got = getattr(getattr(cfg, section), field)
        check(f"{name}: {key} = {want!r}", got == want, f"got {got!r}")
    text = open(path).read()
    if "\nsteps = " in text:
        bad = path + ".seed.toml"
        open(bad, "w").write(text.replace("\nsteps = ", "\nseed = 0\nsteps = ", 1))
        try:
            load(bad)
            check(f"{name}: [training] seed refused", False, "accepted")
        except ValueError as e:
            check(f"{name}: [training] seed refused", "Invalid field names" in str(e), str(e)[:200])

print(f"validate_torchtitan: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
