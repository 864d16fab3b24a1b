"""Held-out evaluation: the y-axis of every scaling curve.

Pass rate = mean correctness over ``eval_samples`` samples of every held-out
prompt at the training temperature (arXiv 2510.13786 §2: 1,000 prompts x 16 samples).
Its randomness is keyed by (seed, step, held-out index), apart from the
training stream, so evaluating never perturbs the training trajectory, a
resumed run re-evaluates identically, and any number of ranks gets the same
numbers: each rank grades a contiguous share and the sums are all-reduced.
"""
from __future__ import annotations

import torch

from scalerl.generation.noise import mix_seed
from scalerl.train.rollout import sample_and_score

EVAL_CHUNK = 1024  # sequences per generate call; bounds KV-cache memory on big models
EVAL_STREAM = 1 << 41  # keeps eval seeds apart from the training steps' seeds


def share(n: int, rank: int, world: int) -> slice:
    """Rank ``rank``'s contiguous share of ``n`` items, as even as possible."""
    q, r = divmod(n, world)
    lo = rank * q + min(rank, r)
    return slice(lo, lo + q + (rank < r))


@torch.no_grad()
def heldout_pass_rate(task, *, samples: int, seed: int, step: int, dist, plan_lengths, **gen_kw) -> dict:
    n = len(task.heldout)
    mine = share(n, dist.rank, dist.world)
    rng = torch.Generator().manual_seed(mix_seed(seed, step, EVAL_STREAM))
    plan = plan_lengths(n * samples, rng)  # the whole split's plan: rank-invariant
    seeds = torch.tensor([mix_seed(seed, step, EVAL_STREAM, i) for i in range(n)], dtype=torch.long)
    kinds = sorted({p.kind for p in task.heldout})
    totals = torch.zeros(2 + 2 * len(kinds), dtype=torch.float64)  # correct, count, then per kind
    per_chunk = max(1, EVAL_CHUNK // samples)
    for start in range(mine.start, mine.stop, per_chunk):
        stop = min(start + per_chunk, mine.stop)
        chunk = task.heldout[start:stop]
        correct = sample_and_score(chunk, range(start, stop), samples, seeds=seeds[start:stop],
                                   plan=plan.select(slice(start * samples, stop * samples)), task=task,
                                   **gen_kw).correct  # (len(chunk), samples)
        totals[0] += correct.sum().item()
        totals[1] += correct.numel()
        for p, row in zip(chunk, correct):
            k = kinds.index(p.kind)
            totals[2 + 2 * k] += row.mean().item()
            totals[3 + 2 * k] += 1
    totals = dist.all_sum(totals)
    out = {"pass_rate": (totals[0] / totals[1].clamp(min=1)).item()}
    for k, kind in enumerate(kinds):
        if kind:
            out[f"pass_rate/{kind}"] = (totals[2 + 2 * k] / totals[3 + 2 * k].clamp(min=1)).item()
    return out
