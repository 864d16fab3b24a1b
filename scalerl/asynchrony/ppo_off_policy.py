"""PPO-off-policy-k (arXiv 2510.13786 §3.1; used by Qwen2.5 DAPO, DeepSeek GRPO
and MiniMax-M1 in the paper's comparison): one policy version generates the
batches of k steps, then k optimizer steps are taken on them, one batch each.
The j-th step of a phase trains on data j versions old; k=1 is ``sync``.
Synchronous: generators are idle while the trainer works."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.asynchrony.base import GENERATOR_PROCESSES, IN_PROCESS, AsyncConfig, Interleaving
from scalerl.core.errors import check


@dataclass
class PPOOffPolicyConfig(AsyncConfig):
    k: int = 8
    """Steps (generation batches) per generation phase; the paper compares k = 1 and 8."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.k >= 1, "async.k", f"must be >= 1, got {self.k}")

    def schedule(self) -> str:
        return IN_PROCESS if self.generators == 0 else GENERATOR_PROCESSES


def ppo_off_policy_interleaving(*, cfg: PPOOffPolicyConfig) -> Interleaving:
    return Interleaving(max_lag=cfg.k - 1, push_every=cfg.k, in_flight=False, generators=cfg.generators,
                generator_threads=cfg.generator_threads, timeout_s=cfg.timeout_s)
