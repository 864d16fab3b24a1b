"""The default's held-out eval (512 prompts x 2 samples, one generate call), with the sampler's KV-cache
moves as they are against a baseline that copies each buffer whole, alternated in one process.

    python benchmarks/bench_eval.py [--rounds 6] [--threads 1] [OVERRIDE ...]

The baseline is the cache's earlier batch operations (``repeat_interleave`` and ``index_select`` over
each buffer's whole capacity, the decode budget included), patched onto ``LeanCache`` for its turns;
the eval's numbers must be the same both ways, which is checked. Prints each way's median seconds
per eval and their ratio.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

import scalerl.train.loop as loop
from scalerl.config import compose, validate
from scalerl.models.lean import LeanCache
from scalerl.train.setup import build


def whole_repeat(self, repeats: int) -> None:
    self.keys = [t.repeat_interleave(repeats, 0) for t in self.keys]
    self.values = [t.repeat_interleave(repeats, 0) for t in self.values]


def whole_select(self, indices: torch.Tensor) -> None:
    self.keys = [t.index_select(0, indices) for t in self.keys]
    self.values = [t.index_select(0, indices) for t in self.values]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    cfg = validate(compose(["logger=none", "async=sync", f"train.threads={a.threads}", *a.overrides]))
    ways = {"prefix": (LeanCache.batch_repeat_interleave, LeanCache.batch_select_indices),
            "whole": (whole_repeat, whole_select)}
    times: dict[str, list[float]] = {w: [] for w in ways}
    with tempfile.TemporaryDirectory() as d:
        plan, run, sched = build(cfg, Path(d))
        results = {}
        for r in range(a.rounds + 1):  # the first round warms up and is dropped
            for way, (rep, sel) in ways.items():
                LeanCache.batch_repeat_interleave, LeanCache.batch_select_indices = rep, sel
                t = time.perf_counter()
                results[way] = loop._heldout(plan, run, sched, step=r)
                if r:
                    times[way].append(time.perf_counter() - t)
            if results["prefix"] != results["whole"]:
                raise SystemExit(f"the two ways' evals differ: {results}")
        LeanCache.batch_repeat_interleave, LeanCache.batch_select_indices = ways["prefix"]
    new, old = statistics.median(times["prefix"]), statistics.median(times["whole"])
    print(f"held-out eval, {a.threads} thread(s), {a.rounds} rounds: whole buffers {old * 1e3:.1f} ms, "
          f"filled prefix {new * 1e3:.1f} ms, ratio {new / old:.3f}")


if __name__ == "__main__":
    main()
