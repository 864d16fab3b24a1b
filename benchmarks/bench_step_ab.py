"""Step time of this checkout against another one (A-B-A), on the same machine in one run.

    python benchmarks/bench_step_ab.py --old /path/to/old/checkout [--pairs 3] [--threads 1] [--extra async=sync]

Each side trains 16 synchronous fp32 steps of the embedded model (16 prompts x 16
generations, CISPO, no filter, plain truncation, ``--threads`` threads, default one) in a fresh process with
its own code on PYTHONPATH, and reports the median step time after the first. The
sides alternate old, new, old, new, ...; the ratio of the medians is printed, since
these machines are too noisy for absolute times. ``--extra`` adds overrides to the new
side only (settings the old code does not know, e.g. ``async=sync``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

OVERRIDES = ["logger=none", "loss=cispo", "aggregation=token", "adv_norm=prompt", "filter=none", "length=truncate",
             "precision=fp32", "batch.prompts=16", "batch.generations=16", "batch.minibatches=1",
             "train.eval_every=1000", "train.steps=16"]
CHILD = """
import json, statistics, sys, tempfile
from pathlib import Path
try:
    from scalerl.config import compose
except ImportError:  # checkouts before scalerl.config.compose kept it in the tests' helpers
    sys.path.insert(0, "tests"); from helpers import compose
from scalerl.config import validate
from scalerl.train.loop import train
d = Path(tempfile.mkdtemp())
train(validate(compose(sys.argv[1:])), d, run_name="x", group="bench", config_dict={})
times = [json.loads(line)["step_time_s"] for line in (d / "steps.jsonl").read_text().splitlines()][1:]
print(json.dumps(statistics.median(times)))
"""


def median_step(repo: Path, overrides: list[str], cache: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(repo), "SCALERL_CACHE": str(cache), "SCALERL_NO_BAR": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, *overrides], cwd=repo, env=env, capture_output=True,
                         text=True, check=True, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, required=True, help="the other checkout (its scalerl/ is imported)")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="train.threads on both sides")
    p.add_argument("--extra", nargs="*", default=[], help="overrides for this checkout only")
    p.add_argument("--old-cache", type=Path, default=None, help="model cache of the old side (default: a fresh one)")
    p.add_argument("--new-cache", type=Path, default=None, help="model cache of this side (default: a fresh one)")
    a = p.parse_args()
    new_repo = Path(__file__).resolve().parents[1]
    caches = {"old": a.old_cache or Path(tempfile.mkdtemp(prefix="ab-old-")),
              "new": a.new_cache or Path(tempfile.mkdtemp(prefix="ab-new-"))}
    times: dict[str, list[float]] = {"old": [], "new": []}
    for i in range(a.pairs):
        for side, repo, extra in (("old", a.old, []), ("new", new_repo, a.extra)):
            t = median_step(repo, [*OVERRIDES, f"train.threads={a.threads}", *extra], caches[side])
            times[side].append(t)
            print(f"pair {i + 1} {side}: {t * 1000:.1f} ms", flush=True)
    old, new = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"median step: old {old * 1000:.1f} ms, new {new * 1000:.1f} ms; new/old = {new / old:.3f}")


if __name__ == "__main__":
    main()
