"""Held-out evaluation: the y-axis of every scaling curve.

Pass rate = mean reward over ``eval_samples`` samples of every held-out
prompt at the training temperature (arXiv 2510.13786 §2: 1,000 prompts x 16 samples).
It uses its own RNG seeded by (seed, step), so evaluating never perturbs the
training trajectory and a resumed run re-evaluates identically.
"""
from __future__ import annotations

import torch

from scalerl.train.rollout import sample_and_score

EVAL_CHUNK = 1024  # sequences per generate call; bounds KV-cache memory on big models


@torch.no_grad()
def heldout_pass_rate(task, *, samples: int, seed: int, step: int, dist, **gen_kw) -> dict:
    problems = task.heldout[dist.rank :: dist.world]
    rng = torch.Generator().manual_seed(10_007 * seed + step + 1)
    per_chunk = max(1, EVAL_CHUNK // samples)
    correct_sum = torch.zeros(2)  # (sum of correct, count)
    by_kind: dict[str, list[float]] = {}
    for start in range(0, len(problems), per_chunk):
        chunk = problems[start : start + per_chunk]
        correct = sample_and_score(chunk, range(len(chunk)), samples, rng=rng, task=task, **gen_kw).correct
        correct_sum += torch.tensor([correct.sum().item(), correct.numel()])
        for p, row in zip(chunk, correct):
            by_kind.setdefault(p.kind, []).append(row.mean().item())
    total = dist.all_sum(correct_sum)
    out = {"pass_rate": (total[0] / total[1].clamp(min=1)).item()}
    if dist.world == 1:  # per-kind breakdown is rank-local; only exact single-process
        out.update({f"pass_rate/{k}": sum(v) / len(v) for k, v in sorted(by_kind.items()) if k})
    return out
