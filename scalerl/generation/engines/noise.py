"""Counter-based sampling noise: every random number is a pure function of
(prompt seed, sample index, token position).

A completion therefore does not depend on which rank, batch or batch slot
generates it. That is what makes a run on 2 data-parallel ranks draw exactly
the samples of the same run on 1 rank (and lets a run resume on a different
number of ranks without changing its trajectory), and what a backend with
per-request seeds (vLLM's ``SamplingParams.seed``) can reproduce. Only one
uniform per row and token is needed: tokens are drawn by inverting the CDF,
which is exact for the categorical distribution.
"""
from __future__ import annotations

from scalerl.core.lazy import torch  # config composition imports this package: torch only when used

_M64 = (1 << 64) - 1


def _s64(c: int) -> int:
    """An unsigned 64-bit constant as the signed int64 torch stores."""
    return c - (1 << 64) if c >= 1 << 63 else c


_GOLDEN = _s64(0x9E3779B97F4A7C15)
_MUL1, _MUL2 = _s64(0xBF58476D1CE4E5B9), _s64(0x94D049BB133111EB)


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 tensors (wrapping arithmetic): a bijection
    whose outputs pass BigCrush as a counter-based generator."""
    x = (x ^ _shr(x, 30)) * _MUL1
    x = (x ^ _shr(x, 27)) * _MUL2
    return x ^ _shr(x, 31)


def mix_seed(*parts: int) -> int:
    """Combine integers (run seed, step, position, ...) into one 63-bit seed, in Python."""
    h = 0
    for p in parts:
        h = (h ^ (p & _M64)) * 0x9E3779B97F4A7C15 & _M64
        h ^= h >> 29
    return h & ((1 << 63) - 1)


def row_keys(seeds: torch.Tensor, n: int) -> torch.Tensor:
    """(P,) prompt seeds -> (P*n,) keys of their samples, grouped by prompt."""
    j = torch.arange(n, dtype=torch.long, device=seeds.device)
    return mix64(mix64(seeds.long()[:, None] * _GOLDEN + j[None, :] + 1).flatten())


def uniforms(keys: torch.Tensor, steps: int) -> torch.Tensor:
    """(N,) row keys -> (N, steps) float64 uniforms in [0, 1) with 53 random bits.

    Drawn for all positions at once: one small table per generate call instead
    of a dozen integer ops per decode step (N x steps x 8 bytes: 6 MB for 48 x 16k).
    """
    t = torch.arange(1, steps + 1, dtype=torch.long, device=keys.device)
    bits = mix64(keys[:, None] ^ (t[None, :] * _GOLDEN))
    return _shr(bits, 11).double() * (1.0 / (1 << 53))


def sample_inverse_cdf(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row from softmax(logp), by inverting its CDF at ``u``.

    logp (N, V) normalised log-probs; u (N,) float64 in [0, 1) -> (N,) long.
    The CDF is accumulated in float64, so tokens far below fp32 resolution
    keep their probability.
    """
    cdf = logp.double().exp().cumsum(-1)  # (N, V)
    x = (u * cdf[:, -1]).unsqueeze(-1)  # (N, 1): rescaled, as fp32 probabilities sum to 1 +- 1e-6
    return torch.searchsorted(cdf, x, right=True).squeeze(-1).clamp_(max=logp.shape[-1] - 1)
