"""The trainer's weights as the generator receives them.

One function, so that the sharded trainer (FSDP2) can swap in its gather of the
full, unsharded state dict without the loop or the generators changing.
"""
from __future__ import annotations

from typing import Iterator

import torch


def full_state_dict(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(checkpoint name, tensor)`` for every weight, as ``save_pretrained`` would name them."""
    return iter(model.state_dict().items())
