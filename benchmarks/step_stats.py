"""Per-run step statistics of a sweep: what the loss saw (ratios, clipping, mismatch, staleness).

Reads each run's steps.jsonl (one row per optimizer step) and prints, per run, the means over
its steps of the loss's clip fraction, mean |ratio - 1| of the first minibatch (``ratio_dev``,
staleness included), the generator-trainer mismatch of the rows of staleness 0 (docs/mismatch.md:
k3 KL, mean |log ratio| and the fraction of ratios outside [0.5, 2], weighted by the steps' token
counts; the steps' mean p99 |log ratio|; tokens measured per step) with the run's largest |log
ratio|, the rare-token tail (tokens with pi_gen < 0.05: their count per step, the mean of the
steps' ratio p99, the largest ratio, the share past the loss's clip), and the staleness. The last
columns split the staleness by where a step sits
relative to the evals: under ``pipeline_rl`` the generator keeps generating while the trainer
evaluates, so the batch right after an eval can be older than the others, which is how denser
evals could change a run's training (docs/findings.md).

    python benchmarks/step_stats.py /work/runs/h37m/sweeps/<study> [--csv out.csv]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from analysis.writing import write_csv

MEANS = ["clip_frac", "ratio_dev", "mismatch_kl", "mismatch_abs_mean", "mismatch_abs_p99", "mismatch_out_frac",
         "staleness_mean", "multi_version_frac", "entropy", "effective_batch",
         # the correction axis (docs/mismatch.md): the share its weight clipped or masked, its extra
         # forward's seconds, and the step's time and idle share that forward may fill
         "correction_clip_frac", "correction_forward_s", "step_time_s", "trainer_idle_frac"]


def run_stats(run_dir: Path) -> dict:
    steps = pd.DataFrame([json.loads(line) for line in open(run_dir / "steps.jsonl")])
    evals = sorted(json.loads(line)["step"] for line in open(run_dir / "metrics.jsonl"))
    out = {"run": run_dir.name.rsplit("-", 1)[0], "steps": int(steps["step"].max())}
    out.update({k: float(steps[k].mean()) for k in MEANS if k in steps})
    if "mismatch_tokens" in steps:  # a step with few fresh rows weighs less than one with many
        w = steps["mismatch_tokens"].fillna(0)
        out["mismatch_tokens"] = float(w.mean())
        for k in ("mismatch_kl", "mismatch_abs_mean", "mismatch_out_frac"):
            if k in steps and w.sum() > 0:
                out[k] = float((steps[k].fillna(0) * w).sum() / w.sum())
    out["mismatch_abs_max"] = float(steps["mismatch_abs_max"].max())
    out["clip_frac_max"] = float(steps["clip_frac"].max())
    out["ratio_dev_p90"] = float(steps["ratio_dev"].quantile(0.9))
    if "rare_tokens" in steps:  # the rare-token tail (pi_gen < 0.05, docs/mismatch.md): per step, and pooled
        n = steps["rare_tokens"].fillna(0)
        out["rare_per_step"] = float(n.mean())
        out["rare_ratio_p99"] = float(steps["rare_ratio_p99"].mean()) if "rare_ratio_p99" in steps else None
        out["rare_ratio_max"] = float(steps["rare_ratio_max"].max()) if "rare_ratio_max" in steps else None
        if "rare_clip_frac" in steps:  # weighted by each step's rare tokens: the share of all of them clipped
            out["rare_clip_frac"] = float((steps["rare_clip_frac"].fillna(0) * n).sum() / max(n.sum(), 1))
    # the step right after an eval (its batch was generated, in part, while the trainer evaluated)
    after = steps["step"].isin([s + 1 for s in evals])
    out["stale_after_eval"] = float(steps.loc[after, "staleness_mean"].mean())
    out["stale_other"] = float(steps.loc[~after, "staleness_mean"].mean())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep_dir")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    rows = [run_stats(d) for d in sorted(Path(args.sweep_dir).iterdir()) if (d / "steps.jsonl").is_file()]
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    if args.csv:
        write_csv(table, args.csv)  # formula cells neutralised (run names are directory names)


if __name__ == "__main__":
    main()
