"""Throughput of PipelineRL against synchronous RL at the same batch and cores.

    python benchmarks/bench_async.py [--steps 60] [--threads 2] [--max-lag 8] [--split 1+1]

Both arms: the ScaleRL recipe on the embedded task (16 prompts x the default
batch's generations), the same seed, ``--threads``
cores in all. ``sync`` runs one process with all the threads and alternates
generation and training;
``pipeline_rl`` overlaps a trainer and a generator process, with threads split
``--split T+G`` (default: one for the generator, the rest for the trainer; a
split adding up to more than ``--threads`` oversubscribes the same cores).

Steady state: the first ``--skip`` steps (start-up, allocator warm-up) are
dropped. samples/s is a step's samples over the median step time; other
users' processes on a shared machine put a long tail on the mean, so the
mean-based figure is printed next to it. Eval and checkpoints are excluded on
both sides. Runs go A-B-A (sync, pipeline_rl, sync) so drift on a noisy machine hits both.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from scalerl.config import compose, validate
from scalerl.core.jsonio import JsonlFile
from scalerl.train.loop import train

BASE = ["logger=none", "batch.prompts=16", "train.eval_every=100000", "train.ckpt_every=100000", "train.eval_samples=1"]


def measure(arm: list[str], steps: int, threads: int, skip: int) -> dict:
    cfg = validate(compose([*BASE, *arm, f"train.steps={steps}", f"train.threads={threads}"]))
    with tempfile.TemporaryDirectory() as d:
        train(cfg, Path(d), run_name="bench", group="bench", config_dict={})
        rows = JsonlFile(Path(d) / "steps.jsonl").rows()[skip:]
    wall = sum(r["step_time_s"] for r in rows)
    samples = sum(r["samples_per_s"] * r["step_time_s"] for r in rows)
    median_step = statistics.median(r["step_time_s"] for r in rows)
    mean = lambda k: statistics.fmean(r[k] for r in rows)  # noqa: E731
    return {"samples_per_s": samples / len(rows) / median_step, "samples_per_s_mean": samples / wall,
            "step_ms": 1000 * median_step,
            "trainer_idle": mean("trainer_idle_frac"), "generator_idle": mean("generator_idle_frac"),
            "staleness": mean("staleness_mean"), "push_ms": 1000 * mean("push_time_s")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-lag", type=int, default=8)
    ap.add_argument("--split", default=None, help="pipeline threads as TRAINER+GENERATOR (default: the rest+1)")
    a = ap.parse_args()
    trainer, gen = map(int, (a.split or f"{max(1, a.threads - 1)}+1").split("+"))
    sync = ["async=sync"]
    pipe = ["async=pipeline_rl", f"async.max_lag={a.max_lag}", f"async.generator_threads={gen}"]
    results = [("sync", measure(sync, a.steps, a.threads, a.skip)),
               ("pipeline_rl", measure(pipe, a.steps, trainer + gen, a.skip)),
               ("sync", measure(sync, a.steps, a.threads, a.skip))]
    print(f"{'arm':<12} {'samples/s':>10} {'(mean)':>8} {'step ms':>8} {'trainer idle':>13} {'generator idle':>15} "
          f"{'staleness':>10} {'push ms':>8}")
    for name, m in results:
        print(f"{name:<12} {m['samples_per_s']:10.0f} {m['samples_per_s_mean']:8.0f} {m['step_ms']:8.1f} "
              f"{m['trainer_idle']:13.2f} {m['generator_idle']:15.2f} {m['staleness']:10.2f} {m['push_ms']:8.2f}")
    base = statistics.fmean(m["samples_per_s"] for name, m in results if name == "sync")
    print(f"pipeline_rl / sync samples/s = {results[1][1]['samples_per_s'] / base:.2f}x "
          f"(sync: {a.threads} threads; pipeline_rl: trainer {trainer} + generator {gen}; max_lag {a.max_lag}, "
          f"{a.steps} steps, first {a.skip} dropped)")


if __name__ == "__main__":
    main()
