"""The trainer's weights as one full, unsharded state dict: what a push sends.

One function, so that a sharded trainer (FSDP) can replace its body with a
gather of the full state dict without touching the schedules that push it.
"""
from __future__ import annotations

import torch


def trainer_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and persistent buffer, by name, unsharded (detached views; do not mutate)."""
    return model.state_dict()
