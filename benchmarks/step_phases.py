"""Where a synchronous step of the default recipe spends its time, and how much of the update's
token grid is padding.

    python benchmarks/step_phases.py [--steps 12] [--threads 1] [OVERRIDE ...]

Times the loop's own calls (the in-process rollout, the policy update, the held-out eval) by
wrapping them, so the numbers carry no profiler overhead; the step time is the run's own
``step_time_s``. Padding: the share of the completion grid (rows x the batch's longest
completion) and of the prompt grid (left-padded) that holds no token, over every step's batch,
and the share of groups the filter keeps (only their rows are trained on).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

import scalerl.train.loop as loop
import scalerl.train.schedules.local as schedule
from scalerl.config import compose, validate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    spent: dict[str, list[float]] = {"rollout": [], "update": [], "eval": []}
    grids: list[tuple[float, int, float, int, float]] = []

    def timed(name, fn):
        def wrapper(*args, **kw):
            t = time.perf_counter()
            out = fn(*args, **kw)
            spent[name].append(time.perf_counter() - t)
            return out
        return wrapper

    update = loop.policy_update

    def counted_update(trainer, optimizer, params, ro, adv, keep, *args, **kw):
        grids.append((float(ro.gen.present.sum()), ro.gen.present.numel(), float(ro.prompt_mask.sum()),
                      ro.prompt_mask.numel(), float(keep.float().mean())))
        return update(trainer, optimizer, params, ro, adv, keep, *args, **kw)

    loop.policy_update = timed("update", counted_update)
    schedule.LocalSchedule.rollout = timed("rollout", schedule.LocalSchedule.rollout)
    loop._heldout = timed("eval", loop._heldout)
    cfg = validate(compose(["logger=none", "async=sync", f"train.steps={a.steps}", f"train.threads={a.threads}",
                            *a.overrides]))
    with tempfile.TemporaryDirectory() as d:
        loop.train(cfg, Path(d), run_name="phases", group="bench", config_dict={})
        steps = [json.loads(line)["step_time_s"] for line in (Path(d) / "steps.jsonl").read_text().splitlines()][1:]

    def median(v: list[float]) -> float:  # the first call of each phase warms caches: left out
        return statistics.median(v[1:] if len(v) > 2 else v)

    step = median(steps)
    print(f"median step {step:.3f} s over {len(steps)} steps (the first left out), {a.threads} thread(s)")
    for name in ("rollout", "update"):
        print(f"  {name:8s} {median(spent[name]):.3f} s  ({median(spent[name]) / step:.0%} of the step)")
    print(f"  eval     {median(spent['eval']):.3f} s per eval ({len(spent['eval'])} evals)")
    real, grid, prompt_real, prompt_grid = (sum(g[i] for g in grids) for i in range(4))
    print(f"padding: completion grid {1 - real / grid:.1%}, prompt grid {1 - prompt_real / prompt_grid:.1%}; "
          f"groups kept by the filter {statistics.mean(g[4] for g in grids):.1%}")


if __name__ == "__main__":
    main()
