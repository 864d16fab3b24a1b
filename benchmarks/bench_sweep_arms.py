"""A local sweep of ``pipeline_rl`` arms against the same sweep of ``sync`` arms, per arm.

    python benchmarks/bench_sweep_arms.py [--arms 3] [--steps 100]

Both sweeps are the user's command (``python -m scalerl.sweep -m loss=...``) on this machine's
cores, the first with the default recipe (PipelineRL-8: a trainer and a generator process per
arm), the second with ``async=sync`` (one process per arm), in the same run, sync first and
last (A-B-A) so that drift on a shared machine hits both. The warm start is built once before
timing and shared (``SCALERL_CACHE``). Seconds per arm = the sweep's wall time over its arms,
leaderboard included. The target: the pipeline sweep is no slower per arm (ratio <= 1).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOSSES = ("cispo", "dapo", "gspo", "grpo")


def sweep(args: list[str], out: Path, env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scalerl.sweep", "-m", *args], check=True, env={**env, "SCALERL_OUTPUT": str(out)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args()
    arms = ["loss=" + ",".join(LOSSES[: a.arms]), f"train.steps={a.steps}", "logger=none"]
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "SCALERL_CACHE": os.environ.get("SCALERL_CACHE", str(Path(d) / "cache")),
               "SCALERL_NO_BAR": "1"}
        subprocess.run([sys.executable, "-m", "scalerl.sweep", "train.steps=1", "train.eval_every=1", "logger=none",
                        "async=sync"], check=True, env={**env, "SCALERL_OUTPUT": str(Path(d) / "warm")},
                       stdout=subprocess.DEVNULL)  # builds the shared warm start
        t = {"sync": [], "pipeline_rl": []}
        for k, mode in enumerate(("sync", "pipeline_rl", "sync")):
            extra = ["async=sync"] if mode == "sync" else []
            t[mode].append(sweep([*arms, *extra], Path(d) / f"out{k}", env) / a.arms)
    sync = sum(t["sync"]) / len(t["sync"])
    print(f"sync:        {', '.join(f'{x:.1f}' for x in t['sync'])} s per arm (mean {sync:.1f})")
    print(f"pipeline_rl: {t['pipeline_rl'][0]:.1f} s per arm")
    print(f"pipeline_rl / sync seconds per arm = {t['pipeline_rl'][0] / sync:.2f} ({a.arms} arms x {a.steps} steps, "
          f"{os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
