"""An embedded arm's CPU time from its start to its first step, with ``import torch`` measured in
the same process as the baseline (benchmarks/RESULTS.md, "An arm's start on scalerl's own module").

Each measurement is a fresh interpreter that runs the arm's code in-process (``train.loop.train``,
as an arm does after its fork) on the default config with ``train.steps=1``, and reads its own
CPU time (user + system, ``getrusage``) at each mark: ``import torch``; the trainer imported
(``scalerl.train.loop``, what the sweep's forkserver preloads); the run built (``setup.build``:
model, task, generator); the first update starts (after the step-0 evaluation and the first
rollout); the first update ends.

    python benchmarks/bench_arm_start.py                       # this checkout, 3 runs
    python benchmarks/bench_arm_start.py --repo /tmp/base -n 3  # another checkout (PYTHONPATH)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r'''
import json, resource, sys, tempfile
from pathlib import Path

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

marks = {"interpreter": cpu()}
import torch
marks["import torch"] = cpu()
import scalerl.train.loop as loop
marks["import the trainer"] = cpu()
from scalerl.config import compose, validate

build, update = loop.build, loop.policy_update

def timed_build(*a, **k):
    out = build(*a, **k)
    marks["run built"] = cpu()
    return out

def timed_update(*a, **k):
    marks.setdefault("first update starts", cpu())
    out = update(*a, **k)
    marks.setdefault("first update ends", cpu())
    return out

loop.build, loop.policy_update = timed_build, timed_update
cfg = validate(compose(["logger=none", "train.steps=1", "train.threads=1", *sys.argv[1:]]))
with tempfile.TemporaryDirectory() as d:
    loop.train(cfg, Path(d) / "r", run_name="r", group="bench", config_dict={})
mods = [m for m in sys.modules if m.startswith("transformers.models.") and getattr(sys.modules[m], "__file__", None)]
marks["transformers.models modules"] = len(mods)
print("MARKS " + json.dumps(marks))
'''


def one(repo: Path, extra: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(repo), "SCALERL_NO_BAR": "1"}
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "child.py"
        script.write_text(CHILD)
        out = subprocess.run([sys.executable, str(script), *extra], cwd=repo, env=env, capture_output=True,
                             text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    line = next(x for x in out.stdout.splitlines() if x.startswith("MARKS "))
    return json.loads(line[len("MARKS "):])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    for _ in range(a.n):
        print(json.dumps({k: round(v, 2) for k, v in one(Path(a.repo), a.overrides).items()}), flush=True)


if __name__ == "__main__":
    main()
