"""PipelineRL-k (the ScaleRL choice, arXiv 2510.13786 §3.1): generator
processes stream without stopping. After every optimizer step the trainer
pushes its weights, and each generator swaps them in between two decode steps,
keeping its sequences in flight and their KV cache, so one completion can span
several policy versions (each token records its own). A generator does not
start tokens for step s with a version older than s-1-max_lag: it pauses
instead, so no consumed token is ever more than ``max_lag`` versions stale. The
paper found k=8 and k=4 equally good; the gain is mostly throughput (B), not
the asymptote (A)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.asynchrony.base import GENERATOR_PROCESSES, AsyncConfig, Interleaving
from scalerl.core.errors import check


@dataclass
class PipelineRLConfig(AsyncConfig):
    generators: int = 1
    max_lag: int = 8
    """The most policy versions a consumed token may lag the trainer (the paper's k)."""
    lookahead: int = 1
    """Steps beyond the one being trained whose batches the generators may work on (-1: up to
    ``max_lag``). 1 keeps the generator one batch ahead, so a push lands while it generates and
    staleness comes from completions spanning updates, as in the paper (docs/async.md)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.generators >= 1, "async.generators",
              f"pipeline_rl streams from generator processes: must be >= 1, got {self.generators}")
        check(self.max_lag >= 0, "async.max_lag", f"must be >= 0, got {self.max_lag}")
        check(self.lookahead >= -1, "async.lookahead", f"must be >= 0, or -1 (up to async.max_lag), got {self.lookahead}")

    def schedule(self) -> str:
        return GENERATOR_PROCESSES


def pipeline_rl_interleaving(*, cfg: PipelineRLConfig) -> Interleaving:
    return Interleaving(max_lag=cfg.max_lag, push_every=1, in_flight=True, generators=cfg.generators,
                generator_threads=cfg.generator_threads, timeout_s=cfg.timeout_s, lookahead=cfg.lookahead)
