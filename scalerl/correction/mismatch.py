"""Generator-trainer mismatch metrics, as slime's ``--get-mismatch-metrics`` and verl's
rollout-correction metrics log them (docs/mismatch.md).

Pure: flat log-probs of the same sampled tokens on both sides in, scalars out. Which tokens
enter decides what is measured: the update passes only rows of staleness 0 (wholly sampled by the
weights the trainer holds before its update), so the metrics are numerics, never staleness.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from scalerl.core.lazy import torch

if TYPE_CHECKING:
    from torch import Tensor

BAND = (0.5, 2.0)
"""A token's ratio π_train / π_gen outside this band counts in ``mismatch_out_frac``."""


def mismatch_stats(train_logp: Tensor, gen_logp: Tensor) -> dict:
    """train_logp, gen_logp: (n,) log-probs of n tokens sampled by the generator.

    - ``mismatch_kl``: KL(π_gen ‖ π_train) on the sampled tokens, the k3 estimator
      mean(r − 1 − log r) with r = π_train / π_gen (never negative, unbiased: the tokens are π_gen's);
    - ``mismatch_kl_k1``: the plain estimator mean(log π_gen − log π_train) (unbiased, can be < 0);
    - ``mismatch_abs_mean`` / ``_p99`` / ``_max``: of |log r|;
    - ``mismatch_out_frac``: the fraction of tokens with r outside ``BAND``;
    - ``mismatch_tokens``: n. No tokens: only ``mismatch_tokens`` (0).

    >>> s = mismatch_stats(torch.log(torch.tensor([0.5, 0.2])), torch.log(torch.tensor([0.5, 0.5])))
    >>> round(s["mismatch_abs_max"], 4), s["mismatch_out_frac"], s["mismatch_tokens"]
    (0.9163, 0.5, 2)
    """
    n = int(train_logp.numel())
    if n == 0:
        return {"mismatch_tokens": 0}
    log_r = (train_logp - gen_logp).double()  # (n,)
    a = log_r.abs()
    lo, hi = torch.log(torch.tensor(BAND, dtype=torch.float64))
    return {"mismatch_kl": (log_r.exp() - 1 - log_r).mean().item(), "mismatch_kl_k1": (-log_r).mean().item(),
            "mismatch_abs_mean": a.mean().item(), "mismatch_abs_p99": a.quantile(0.99).item(),
            "mismatch_abs_max": a.max().item(),
            "mismatch_out_frac": ((log_r < lo) | (log_r > hi)).double().mean().item(), "mismatch_tokens": n}
