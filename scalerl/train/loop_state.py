"""What the training loop carries from one step to the next, and what a checkpoint keeps of it.

Typed fields, not a string-keyed dict: a misspelt counter fails where it is written, and the
checkpoint's ``state`` entry is ``to_dict()`` of this (plain JSON-ready values, so that a sharded
checkpoint's extra state and ``torch.load(weights_only=True)`` can both hold it).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass
class LoopState:
    step: int = 0
    compute: float = 0.0
    """FLOPs spent so far: the fit's x-axis (``compute.py``)."""
    device_hours: float = 0.0
    """Wall time x devices (the trainer's and the generators')."""
    tokens: int = 0
    """New tokens generated so far."""
    wall_s: float = 0.0
    nan_skips: int = 0
    """Updates skipped for a non-finite loss or gradient, in all."""
    nan_streak: int = 0
    """... and in a row (``train.max_nan_skips`` ends the run)."""
    truncation_alarms: int = 0
    wandb_id: str | None = None
    """The W&B run to resume into."""
    window: list = field(default_factory=list)
    """Per-step stats since the last eval, averaged into its row; checkpointed, so a resume
    mid-interval averages the same steps."""

    @classmethod
    def from_dict(cls, saved: dict) -> "LoopState":
        """A checkpoint's ``state``; keys this version does not know are left behind."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in known})

    def to_dict(self) -> dict:
        return asdict(self)

    def advance(self, step: int, flops: float, new_tokens: int, wall_s: float, devices: int) -> None:
        """Account one finished step.

        >>> s = LoopState(); s.advance(1, 2e9, 40, 0.5, 2); s.advance(2, 2e9, 20, 1.0, 2)
        >>> (s.step, s.compute, s.tokens, s.wall_s, round(s.device_hours * 3600, 6))
        (2, 4000000000.0, 60, 1.5, 3.0)
        """
        self.step = step
        self.compute += flops
        self.tokens += int(new_tokens)
        self.wall_s += wall_s
        self.device_hours += wall_s * devices / 3600

    def axes(self) -> dict:
        """The x-axis values a train step's log row carries (``loggers.base.AXES``, less the epoch)."""
        return {"step": self.step, "compute": self.compute, "device_hours": self.device_hours,
                "tokens": self.tokens, "wall_s": self.wall_s}

    def result(self) -> dict:
        """The counters ``train()`` returns (the run's summary): all but the streak and the window."""
        return {k: v for k, v in self.to_dict().items() if k not in ("nan_streak", "window")}
