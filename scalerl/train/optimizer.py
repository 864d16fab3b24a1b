"""The trainer's AdamW (arXiv 2510.13786 §2: AdamW, a constant learning rate after warm-up).

On CUDA it is torch's own with ``foreach``: one kernel over all (sharded) tensors. On a CPU,
torch's foreach is a loop of the same per-tensor ops that holds every tensor's temporary at once
(4 bytes a parameter), and its single-tensor path still makes two full-size temporaries of each
tensor (``sqrt``, then the division by the bias correction): 2 x 0.54 GB for Qwen2-0.5B's tied
embedding, at the step's peak (benchmarks/RESULTS.md). ``SlicedAdamW`` runs the single-tensor
path's ops in the same order on slices of each tensor, so its weights and state are torch's bit
for bit (tests/test_optimizer.py) and its temporaries are two slices'. Not fused: fused AdamW
rounds differently, and 1 and 2 ranks must sample the same tokens (tests/test_distributed.py).
"""
from __future__ import annotations

import torch

from scalerl.train.sharding import is_dtensor

SLICE_BYTES = 32 << 20
"""The most bytes of one tensor stepped at once on a CPU (its two temporaries are this size)."""


def _undecorated(name: str):
    """torch's own ``Optimizer.<name>`` without its ``torch._disable_dynamo`` wrapper, whose first call
    imports torch._dynamo (about 1.1 CPU-s in every trainer process) only to keep a compiler out of a
    method that scalerl never compiles."""
    method = getattr(torch.optim.Optimizer, name)
    return getattr(method, "__wrapped__", method)


def build_adamw(params: list, device: torch.device, *, lr: float, betas, eps: float, weight_decay: float
                ) -> torch.optim.AdamW:
    kw = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
    if device.type == "cuda":
        return torch.optim.AdamW(params, foreach=True, **kw)
    return SlicedAdamW(params, **kw)


class SlicedAdamW(torch.optim.AdamW):
    """torch's AdamW (decoupled weight decay, no amsgrad), each plain tensor stepped at most
    ``slice_bytes`` at a time. Its state and ``state_dict`` are torch's, so a checkpoint moves
    between the two. A sharded tensor (FSDP2's ``DTensor``, already a rank's share) is stepped whole."""

    add_param_group = _undecorated("add_param_group")
    zero_grad = _undecorated("zero_grad")
    state_dict = _undecorated("state_dict")
    load_state_dict = _undecorated("load_state_dict")

    def __init__(self, params, *, slice_bytes: int = SLICE_BYTES, **kw):
        super().__init__(params, foreach=False, **kw)
        self.slice_bytes = slice_bytes

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("SlicedAdamW.step takes no closure")
        for group in self.param_groups:
            if group["amsgrad"] or group["maximize"] or group["capturable"] or group["differentiable"]:
                raise ValueError("SlicedAdamW: amsgrad, maximize, capturable and differentiable are torch's AdamW's alone")
            params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            self._init_group(group, params, grads, exp_avgs, exp_avg_sqs, [], steps)  # torch's own lazy state
            beta1, beta2 = group["betas"]
            lr, eps, weight_decay = float(group["lr"]), group["eps"], group["weight_decay"]
            for p, g, m, v, step_t in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
                # torch.optim.adam._single_tensor_adam's order, for a real tensor on the CPU
                step_t += 1
                step = step_t.item()
                if weight_decay != 0:
                    p.mul_(1 - lr * weight_decay)
                step_size = lr / (1 - beta1**step)
                bias_correction2_sqrt = (1 - beta2**step) ** 0.5
                for x, gs, ms, vs in self._slices(p, g, m, v):
                    ms.lerp_(gs, 1 - beta1)
                    vs.mul_(beta2).addcmul_(gs, gs, value=1 - beta2)
                    denom = (vs.sqrt() / bias_correction2_sqrt).add_(eps)
                    x.addcdiv_(ms, denom, value=-step_size)
        return None

    def _slices(self, *tensors):
        """Matching flat slices of ``tensors`` (same shape), or the tensors whole."""
        first = tensors[0]
        if is_dtensor(first) or not all(t.is_contiguous() for t in tensors):
            yield tensors
            return
        flat = [t.view(-1) for t in tensors]
        n = max(1, self.slice_bytes // first.element_size())
        for i in range(0, first.numel(), n):
            yield tuple(f[i:i + n] for f in flat)
