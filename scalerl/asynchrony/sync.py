"""Synchronous RL: generate a batch with the current weights, then train on it
(arXiv 2510.13786 §3.1, PPO-off-policy-1). Every token is on-policy for the
first minibatch of its step. With ``generators: 0`` (the default) the trainer's
own module generates, exactly as before the async axis existed."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.asynchrony.base import GENERATOR_PROCESSES, IN_PROCESS, AsyncConfig, Interleaving


@dataclass
class SyncConfig(AsyncConfig):
    def schedule(self) -> str:
        return IN_PROCESS if self.generators == 0 else GENERATOR_PROCESSES


def sync_interleaving(*, cfg: SyncConfig) -> Interleaving:
    return Interleaving(max_lag=0, push_every=1, in_flight=False, generators=cfg.generators,
                generator_threads=cfg.generator_threads, timeout_s=cfg.timeout_s)
