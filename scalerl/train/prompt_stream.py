"""The train-prompt stream: shuffled epochs, with No-Positive-Resampling.

Its whole state (permutation, position, epoch, retired set) goes into
checkpoints, so a resumed run draws exactly the prompts it would have drawn
(resume bugs at epoch boundaries are a common pain in RL frameworks).

Epoch boundaries inside one step's batch: the next epoch's order is built
before that step's pass rates are known, so (1) the prompts the step already
took from the old epoch go to the back of the new order (no prompt twice in
one step), and (2) ``record`` removes a newly retired prompt from whatever
part of the order is still to be drawn (a prompt retired at that step never
comes back, arXiv 2510.13786 §3.2 No-Positive-Resampling).
"""
from __future__ import annotations

import random
from typing import Optional

import torch


class PromptSampler:
    def __init__(self, n: int, seed: int, retire_at: Optional[float] = None):
        self.n = n
        self.seed = seed
        self.retire_at = retire_at
        """No-Positive-Resampling: prompts whose pass rate is >= this are retired (None: never)."""
        self.epoch = 0
        self.pos = 0
        self.drawn = 0
        self.retired: set[int] = set()
        self.order = self._permutation()

    def _permutation(self, taken: frozenset[int] = frozenset()) -> list[int]:
        """A shuffled epoch of the live prompts; ``taken`` (already in this step's batch) go last."""
        live = [i for i in range(self.n) if i not in self.retired]
        if not live:  # everything retired: fall back to the full pool rather than stall
            live = list(range(self.n))
        random.Random(self.seed * 100_003 + self.epoch).shuffle(live)
        if taken:
            live = [i for i in live if i not in taken] + [i for i in live if i in taken]
        return live

    def next(self, k: int) -> list[int]:
        """The next k prompt indices, crossing epoch boundaries as needed."""
        out: list[int] = []
        while len(out) < k:
            if self.pos >= len(self.order):
                self.epoch += 1
                self.pos = 0
                self.order = self._permutation(frozenset(out))
            take = min(k - len(out), len(self.order) - self.pos)
            out.extend(self.order[self.pos : self.pos + take])
            self.pos += take
        self.drawn += k
        return out

    @property
    def epochs_done(self) -> float:
        """Fractional passes over the pool (the analysis' first-epoch cut-off)."""
        return self.drawn / self.n

    def record(self, indices: list[int], pass_rates: torch.Tensor) -> int:
        """Retire (NPR) the prompts whose pass rate this step reached ``retire_at``.

        Returns the number of newly retired prompts.
        """
        if self.retire_at is None:
            return 0
        new = {i for i, rate in zip(indices, pass_rates.tolist()) if rate >= self.retire_at and i not in self.retired}
        self.retired |= new
        rest = self.order[self.pos :]
        if not new.isdisjoint(rest):  # a batch crossed into an epoch ordered before this (rest: the epoch; a C scan)
            self.order = self.order[: self.pos] + [i for i in rest if i not in new]
        return len(new)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos, "drawn": self.drawn, "order": list(self.order),
                "retired": sorted(self.retired), "n": self.n, "seed": self.seed}

    def load_state_dict(self, s: dict) -> None:
        if s["n"] != self.n:
            raise ValueError(f"checkpoint sampler has {s['n']} train prompts, this run has {self.n}: task config changed")
        self.epoch, self.pos, self.drawn = s["epoch"], s["pos"], s["drawn"]
        self.order = list(s["order"])
        self.retired = set(s["retired"])
