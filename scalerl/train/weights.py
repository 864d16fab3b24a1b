"""The trainer's weights as one full, unsharded state dict: what a push sends."""
from __future__ import annotations

import torch

from scalerl.train.sharding import full_state_dict


def trainer_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and persistent buffer, by name, unsharded (detached; do not mutate).
    Collective when the trainer is FSDP2-sharded: every rank must call it."""
    return full_state_dict(model)
