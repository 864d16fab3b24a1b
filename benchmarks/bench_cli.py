"""Command-line start-up: `--help` and the quick start's `--dry-run`, this tree vs a baseline commit.

    python benchmarks/bench_cli.py [--baseline b54da61] [--repeats 7]

The baseline is exported with `git archive` into a temporary folder and run from there
(PYTHONPATH points at it), so both sides use the same Python and packages. Each repeat
runs baseline, this tree, baseline (A-B-A) for each command, fresh processes, outputs in
a temporary SCALERL_OUTPUT; the table gives medians and the ratio baseline / this tree.
Target (issue 14): both under 1.5 s on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {"--help": ["--help"], "--dry-run (quick start)": ["-m", "loss=cispo,dapo,gspo", "--dry-run"]}


def timed(tree: Path, args: list[str], out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "SCALERL_OUTPUT": str(out)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scalerl.sweep", *args], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="b54da61")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "archive", args.baseline], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        out = Path(tmp) / "out"
        for name, cmd in COMMANDS.items():
            timed(base, cmd, out), timed(REPO, cmd, out)          # warm the page cache and .pyc files
            a, b = [], []
            for _ in range(args.repeats):
                a.append(timed(base, cmd, out))
                b.append(timed(REPO, cmd, out))
                a.append(timed(base, cmd, out))
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"{name:24s} baseline {args.baseline}: {ma:.2f} s   this tree: {mb:.2f} s   ratio {ma / mb:.1f}x",
                  flush=True)


if __name__ == "__main__":
    main()
