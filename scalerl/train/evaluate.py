"""Held-out evaluation: the y-axis of every scaling curve.

Pass rate = mean correctness over ``eval_samples`` samples of every held-out
prompt at the training temperature (arXiv 2510.13786 §2: 1,000 prompts x 16 samples).
It uses its own RNG seeded by (seed, step), so evaluating never perturbs the
training trajectory and a resumed run re-evaluates identically.

Per task (one, or each entry of a ``mix``; §5 fits one curve per task):
``pass_rate/<task>``, ``response_length/<task>``, ``truncation_rate/<task>`` and the rate
of each outcome flag the task reports (code: ``timeout_rate/<task>``, ``crash_rate/<task>``).
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
    names = list(task.names)
    flags = sorted({f for fs in task.flags.values() for f in fs})
    # per task: correct, samples, generated tokens, truncated, then one column per flag
    sums = torch.zeros(len(names) + 1, 4 + len(flags), dtype=torch.float64)  # last row: all tasks
    by_kind: dict[str, list[float]] = {}
    for start in range(0, len(problems), per_chunk):
        chunk = problems[start : start + per_chunk]
        ro = sample_and_score(chunk, range(len(chunk)), samples, rng=rng, task=task, **gen_kw)
        lengths = ro.gen.lengths.cpu().view_as(ro.correct).double()
        truncated = ro.gen.truncated.cpu().view_as(ro.correct).double()
        for row, p in enumerate(chunk):
            cols = [ro.correct[row].sum(), samples, lengths[row].sum(), truncated[row].sum()]
            cols += [ro.flags[f][row].sum() if f in ro.flags else 0.0 for f in flags]
            values = torch.tensor([float(c) for c in cols], dtype=torch.float64)
            sums[-1] += values
            if p.task in names:
                sums[names.index(p.task)] += values
            by_kind.setdefault(p.kind, []).append(ro.correct[row].mean().item())
    total = dist.all_sum(sums)
    n = total[:, 1].clamp(min=1)
    out = {"pass_rate": (total[-1, 0] / n[-1]).item()}
    for i, name in enumerate(names):
        if total[i, 1] == 0:
            continue
        out[f"pass_rate/{name}"] = (total[i, 0] / n[i]).item()
        out[f"response_length/{name}"] = (total[i, 2] / n[i]).item()
        out[f"truncation_rate/{name}"] = (total[i, 3] / n[i]).item()
        out.update({f"{f}_rate/{name}": (total[i, 4 + j] / n[i]).item() for j, f in enumerate(flags)
                    if f in task.flags.get(name, ())})
    if dist.world == 1:  # per-kind breakdown is rank-local; only exact single-process
        out.update({f"pass_rate/{k}": sum(v) / len(v) for k, v in sorted(by_kind.items()) if k})
    return out
