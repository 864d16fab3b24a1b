"""Held-out pass rate of runs side by side: a markdown table every ``--every`` steps, the mean
of the last 4 evaluations, and a plot.

    python benchmarks/compare_curves.py torch=outputs/runs/<torch run> vllm=outputs/runs/<vllm run> \\
        [--every 100] [--png benchmarks/vllm_vs_torch.png]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="label=run_dir")
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--png", default="")
    args = ap.parse_args()
    curves = {label: rows(Path(d)) for label, d in (r.split("=", 1) for r in args.runs)}
    by_step = {label: {r["step"]: r for r in c} for label, c in curves.items()}
    last = max(max(s) for s in by_step.values())
    labels = list(curves)
    print("| step | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for step in range(0, last + 1, args.every):
        cells = [f"{by_step[k][step]['pass_rate']:.3f}" if step in by_step[k] else "" for k in labels]
        print(f"| {step} | " + " | ".join(cells) + " |")
    tail = [sum(r["pass_rate"] for r in curves[k][-4:]) / len(curves[k][-4:]) for k in labels]
    print("| final (mean of the last 4 evals) | " + " | ".join(f"{v:.3f}" for v in tail) + " |")
    wall = [curves[k][-1].get("wall_s", 0) / 60 for k in labels]
    print("| training wall time (min) | " + " | ".join(f"{w:.1f}" for w in wall) + " |")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        for k in labels:
            ax.plot([r["step"] for r in curves[k]], [r["pass_rate"] for r in curves[k]], label=k)
        ax.set_xlabel("step")
        ax.set_ylabel("held-out pass rate")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)


if __name__ == "__main__":
    main()
