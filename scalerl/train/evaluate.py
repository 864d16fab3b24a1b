"""Held-out evaluation: the y-axis of every scaling curve.

Pass rate = mean correctness over ``eval_samples`` samples of every held-out
prompt at the training temperature (arXiv 2510.13786 §2: 1,000 prompts x 16 samples).
Its randomness is keyed by (seed, step, held-out index), apart from the
training stream, so evaluating never perturbs the training trajectory, a
resumed run re-evaluates identically, and any number of ranks gets the same
numbers: each rank grades a contiguous share and the sums are all-reduced.

Per task (one, or each entry of a ``mix``; §5 fits one curve per task):
``pass_rate/<task>``, ``response_length/<task>``, ``truncation_rate/<task>`` and the rate
of each outcome flag the task reports (code: ``timeout_rate/<task>``, ``crash_rate/<task>``).
Per problem kind (arith: ``add``, ``mul``): ``pass_rate/<kind>``.
"""
from __future__ import annotations

import torch

from scalerl.generation.engines import mix_seed
from scalerl.train.rollout import sample_and_score

EVAL_CHUNK = 1024  # sequences per generate call; bounds KV-cache memory on big models
EVAL_STREAM = 1 << 41  # keeps eval seeds apart from the training steps' seeds


def share(n: int, rank: int, world: int) -> slice:
    """Rank ``rank``'s contiguous share of ``n`` items, as even as possible."""
    q, r = divmod(n, world)
    lo = rank * q + min(rank, r)
    return slice(lo, lo + q + (rank < r))


@torch.no_grad()
def heldout_pass_rate(task, *, samples: int, seed: int, step: int, dist, draw_lengths, **gen_kw) -> dict:
    n = len(task.heldout)
    rank_prompts = share(n, dist.rank, dist.world)
    rng = torch.Generator().manual_seed(mix_seed(seed, step, EVAL_STREAM))
    limits = draw_lengths(n * samples, rng)  # the whole split's limits: rank-invariant
    seeds = torch.tensor([mix_seed(seed, step, EVAL_STREAM, i) for i in range(n)], dtype=torch.long)
    per_chunk = max(1, EVAL_CHUNK // samples)
    names = list(task.names)
    kinds = sorted({p.kind for p in task.heldout if p.kind})
    flags = sorted({f for fs in task.flags.values() for f in fs})
    # rows: one per task, one per kind, the last for all; columns: correct, samples,
    # generated tokens, truncated, then one per flag. Sums, so the ranks' shares all-reduce.
    sums = torch.zeros(len(names) + len(kinds) + 1, 4 + len(flags), dtype=torch.float64)
    for start in range(rank_prompts.start, rank_prompts.stop, per_chunk):
        stop = min(start + per_chunk, rank_prompts.stop)
        chunk = task.heldout[start:stop]
        ro = sample_and_score(chunk, range(start, stop), samples, seeds=seeds[start:stop],
                              limits=limits.select(slice(start * samples, stop * samples)), task=task, **gen_kw)
        lengths = ro.gen.lengths.cpu().view_as(ro.correct).double()
        truncated = ro.gen.truncated.cpu().view_as(ro.correct).double()
        for row, p in enumerate(chunk):
            cols = [ro.correct[row].sum(), samples, lengths[row].sum(), truncated[row].sum()]
            cols += [ro.flags[f][row].sum() if f in ro.flags else 0.0 for f in flags]
            values = torch.tensor([float(c) for c in cols], dtype=torch.float64)
            sums[-1] += values
            if p.task in names:
                sums[names.index(p.task)] += values
            if p.kind:
                sums[len(names) + kinds.index(p.kind)] += values
    total = dist.all_sum(sums)
    count = total[:, 1].clamp(min=1)
    out = {"pass_rate": (total[-1, 0] / count[-1]).item()}
    for i, name in enumerate(names):
        if total[i, 1] == 0:
            continue
        out[f"pass_rate/{name}"] = (total[i, 0] / count[i]).item()
        out[f"response_length/{name}"] = (total[i, 2] / count[i]).item()
        out[f"truncation_rate/{name}"] = (total[i, 3] / count[i]).item()
        out.update({f"{f}_rate/{name}": (total[i, 4 + j] / count[i]).item() for j, f in enumerate(flags)
                    if f in task.flags.get(name, ())})
    for k, kind in enumerate(kinds):
        out[f"pass_rate/{kind}"] = (total[len(names) + k, 0] / count[len(names) + k]).item()
    return out
