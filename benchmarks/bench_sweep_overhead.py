"""Sweep overhead on the local SLURM cluster: scalerl vs raw sbatch.

    python benchmarks/bench_sweep_overhead.py [--arms 24]

The same 24 near-instant arms (1 RL step, a 16-prompt eval) run twice in one
process run: (a) as one `sbatch --wrap` per arm, each running
`python -m scalerl.sweep <overrides>` into its own run dir, and we poll squeue
until all are gone; (b) as `python -m scalerl.sweep -m seed=range(0,24) ...
hydra/launcher=slurm` (composition, validation, skip checks, one job array,
waiting, the leaderboard). Overhead per arm = (b - a) / arms. Target < 2 s.
Needs the local cluster: `python3 tests/local_slurm start` (as root).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARM = ["train.steps=1", "train.eval_every=1", "task.n_heldout=16", "train.eval_samples=1", "logger=none",
       "train.threads=1"]


def wait_queue_empty(job_ids: list[str], timeout: float = 1800) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i"], capture_output=True, text=True)
        if out.returncode == 0 and not out.stdout.strip():
            return
        time.sleep(0.5)
    raise TimeoutError("jobs still queued")


def raw_sbatch(n: int, out: Path, env: dict) -> float:
    t0 = time.perf_counter()
    ids = []
    for seed in range(n):
        cmd = f"{sys.executable} -m scalerl.sweep seed={seed} {' '.join(ARM)} hydra.run.dir={out}/raw/{seed}"
        res = subprocess.run(["sbatch", "--parsable", "-p", "debug", "-c", "1", "-o", f"{out}/raw-{seed}.log",
                              "--chdir", str(REPO), "--wrap", cmd], capture_output=True, text=True, env=env, check=True)
        ids.append(res.stdout.strip().split(";")[0])
    wait_queue_empty(ids)
    elapsed = time.perf_counter() - t0
    done = sum((out / "raw" / str(s) / "summary.json").exists() for s in range(n))
    assert done == n, f"only {done}/{n} raw arms finished; see {out}/raw-*.log"
    return elapsed


def scalerl_sweep(n: int, out: Path, env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scalerl.sweep", "-m", f"seed=range(0,{n})", *ARM, "hydra/launcher=slurm",
                    "hydra.launcher.timeout_min=30", "hydra.sweeper.n_boot=50"],
                   cwd=REPO, env={**env, "SCALERL_OUTPUT": str(out / "scalerl")}, check=True,
                   stdout=open(out / "scalerl.log", "w"), stderr=subprocess.STDOUT)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", type=int, default=24)
    a = ap.parse_args()
    sys.path.insert(0, str(REPO / "tests"))  # the local cluster is test gear (tests/local_slurm)
    from local_slurm import cluster

    layout = cluster.start()
    env = {**os.environ, "SCALERL_NO_BAR": "1", "WANDB_MODE": "offline"}
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        # Warm the model cache once so neither side pays for the warm start.
        subprocess.run([sys.executable, "-m", "scalerl.sweep", *ARM, f"hydra.run.dir={out}/warm"], cwd=REPO, env=env,
                       check=True, capture_output=True)
        raw = raw_sbatch(a.arms, out, env)
        ours = scalerl_sweep(a.arms, out, env)
        raw2 = raw_sbatch(a.arms, out / "again", env) if (out / "again").mkdir() is None else 0.0
    base = (raw + raw2) / 2
    print(f"cluster: {layout.cpus} advertised CPUs on {os.cpu_count()} cores; {a.arms} arms")
    print(f"raw sbatch        : {raw:7.1f} s, {raw2:7.1f} s (A-B-A; mean {base:.1f} s)")
    print(f"scalerl.sweep     : {ours:7.1f} s (incl. start-up, validation, array submit, wait, leaderboard)")
    print(f"overhead per arm  : {(ours - base) / a.arms:+.2f} s   ratio scalerl/raw = {ours / base:.2f}x  (target < 2 s/arm)")


if __name__ == "__main__":
    main()
