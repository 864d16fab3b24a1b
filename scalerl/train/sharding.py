"""The trainer on PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``).

Mixed precision the way the paper's scale needs it (arXiv 2510.13786 §2: an 8B
model, AdamW, 16 training GPUs): the master weights, gradients and AdamW state
are fp32 and sharded across ranks; each decoder layer is gathered in the
compute dtype (bf16 on GPU) for its forward and backward; the root unit (input
embeddings, final norm and the LM head) is gathered in the trainer-side head
dtype, so ``precision=fp32_head`` computes the logits from the fp32 weights
(§3.2). Gradients are reduced in fp32.

A run is sharded when it has several ranks or computes in a dtype other than
fp32 (a bf16 run needs fp32 master weights: AdamW at lr 5e-7 cannot move a
bf16 weight). A 1-rank fp32 run (the CPU default) stays a plain module.

``full_state_dict`` is the trainer's full, unsharded state dict (HF names), for
exporting the policy; ``iter_full_tensors`` yields the same tensors a group at a
time (a weight push: no rank ever holds the whole model for it).
"""
from __future__ import annotations

from typing import Iterator

import torch
from torch.distributed.tensor import DTensor


def needs_sharding(world: int, compute_dtype: torch.dtype) -> bool:
    return world > 1 or compute_dtype != torch.float32


def shard_trainer(trainer: torch.nn.Module, mesh, *, compute_dtype: torch.dtype, head_dtype: torch.dtype,
                  materialize=None) -> None:
    """Apply FSDP2 in place: one unit per decoder layer, the rest (embeddings, final
    norm, LM head) in the root unit. ``trainer`` is a ``CompletionLogits``; its
    parameters must be fp32 (they become the sharded master weights).

    ``materialize(module)``: for a model built on the meta device (``models/load.py``,
    ``CheckpointUnits``), called on each unit just before it is sharded, so its full values
    exist only until ``fully_shard`` keeps this rank's rows: the rank's peak is its shards
    plus one unit, not a full copy."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    def policy(dtype: torch.dtype) -> MixedPrecisionPolicy:
        return MixedPrecisionPolicy(param_dtype=None if dtype == torch.float32 else dtype, reduce_dtype=torch.float32)

    for layer in getattr(trainer.model.get_decoder(), "layers", []):
        if materialize is not None:
            materialize(layer)
        fully_shard(layer, mesh=mesh, mp_policy=policy(compute_dtype))
    if materialize is not None:
        materialize(trainer)  # the root unit: what the layers left (embeddings, final norm, head)
    fully_shard(trainer, mesh=mesh, mp_policy=policy(head_dtype))


def clip_grad_norm(params: list, max_norm: float) -> torch.Tensor:
    """Clip the global gradient norm (sharded or not) to ``max_norm``; returns the norm before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, 2.0)
    if isinstance(total, DTensor):  # partial norms of the shards -> the global norm
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


@torch.no_grad()
def full_state_dict(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The full, unsharded state dict of ``model`` (an HF model, plain or FSDP2-sharded), on
    every rank, on the model's device, optionally cast to ``dtype``.

    Collective when sharded (every rank must call it): the row-sharded tensors travel
    in one all-gather, not one per tensor. Tied weights come back under both names,
    as from ``state_dict()``.
    """
    sd = model.state_dict()
    full = _gather_row_shards({k: t for k, t in sd.items() if _row_sharded(t)})
    out = {}
    for name, t in sd.items():
        t = full[name] if name in full else (t.full_tensor() if isinstance(t, DTensor) else t).detach()
        out[name] = t.to(dtype) if dtype is not None and t.is_floating_point() else t
    return out


@torch.no_grad()
def iter_full_tensors(model: torch.nn.Module, dtype: torch.dtype | None = None, bucket_bytes: int = 64 << 20
                      ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """``full_state_dict(model, dtype)`` in groups of ``(name, tensor)``, in state-dict order, each
    group at most ``bucket_bytes`` (in ``dtype``; a larger tensor is a group of its own).

    Collective when sharded: every rank must exhaust it, and each tensor is gathered only when
    its group is reached (one all-gather per row-sharded tensor, the same order on every rank),
    so a rank holds its shards plus one group, never the full model. A shard is cast to
    ``dtype`` before the gather (bf16 for a bf16 generator: half the bytes; a cast commutes with
    the gather, so the values are the full tensor's cast). Unsharded, the tensors are the
    module's own (detached; cast copies if ``dtype`` differs). A yielded group is the caller's:
    nothing here keeps it, so dropping it frees it. On GPU the gather is NCCL's and the tensors
    stay on the GPU (untested here: no GPU)."""
    group: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in model.state_dict().items():
        cast = dtype if dtype is not None and t.is_floating_point() else t.dtype
        nbytes = t.numel() * torch.empty((), dtype=cast).element_size()
        if group and size + nbytes > bucket_bytes:
            yield group
            group, size = [], 0
        group.append((name, _full_tensor(t, cast)))
        size += nbytes
    if group:
        yield group


def _full_tensor(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One tensor of a state dict, full and in ``dtype`` (collective when it is a DTensor)."""
    import torch.distributed as dist

    if not isinstance(t, DTensor):
        return t.detach().to(dtype)
    if not _row_sharded(t):
        return t.full_tensor().to(dtype)
    group, world = t.device_mesh.get_group(), t.device_mesh.size()
    rows = t.shape[0]
    chunk = -(-rows // world)  # rank r holds rows [r*chunk, (r+1)*chunk) (torch.chunk), the last ones fewer
    local = t.to_local().detach().to(dtype)
    if local.shape[0] < chunk:
        local = torch.cat([local, local.new_zeros((chunk - local.shape[0], *t.shape[1:]))])
    out = torch.empty((world * chunk, *t.shape[1:]), dtype=dtype, device=local.device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, local.contiguous(), group=group)
    return out[:rows]  # contiguous: the padding rows are all at the end


def _row_sharded(t) -> bool:
    from torch.distributed.tensor import Shard

    return isinstance(t, DTensor) and t.device_mesh.ndim == 1 and tuple(t.placements) == (Shard(0),)


def _gather_row_shards(tensors: dict[str, DTensor]) -> dict[str, torch.Tensor]:
    """Full tensors of dim-0-sharded DTensors (FSDP2's layout) with a single all-gather.

    Rank r holds rows [r*c, (r+1)*c) of a tensor with c = ceil(rows / world)
    (torch.chunk), the last ranks possibly fewer: each rank pads its shards to c
    rows, packs them into one buffer per dtype, and the gathered buffers are
    unpacked rank by rank.
    """
    import torch.distributed as dist

    if not tensors:
        return {}
    mesh = next(iter(tensors.values())).device_mesh
    group, world = mesh.get_group(), mesh.size()
    out: dict[str, torch.Tensor] = {}
    by_dtype: dict[torch.dtype, list[str]] = {}
    for name, t in tensors.items():
        by_dtype.setdefault(t.dtype, []).append(name)
    for dt, names in by_dtype.items():
        chunk = {n: -(-tensors[n].shape[0] // world) for n in names}
        row = {n: tensors[n].shape[1:].numel() for n in names}
        parts = []
        for n in names:
            local = tensors[n].to_local().reshape(-1)
            parts.append(torch.nn.functional.pad(local, (0, chunk[n] * row[n] - local.numel())))
        send = torch.cat(parts)
        recv = torch.empty(world * send.numel(), dtype=dt, device=send.device)
        # all_gather_single: the newer name of all_gather_into_tensor (older torch has only that).
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(recv, send, group=group)
        per_rank = recv.view(world, -1)
        offset = 0
        for n in names:
            size = chunk[n] * row[n]
            rows = per_rank[:, offset : offset + size].reshape(world * chunk[n], *tensors[n].shape[1:])
            out[n] = rows[: tensors[n].shape[0]].clone()
            offset += size
    return out


def head_key(model: torch.nn.Module) -> str:
    """The state-dict name of the LM head weight (the embedding's, when tied)."""
    head, keys = model.get_output_embeddings().weight, set(model.state_dict())
    for name, p in model.named_parameters(remove_duplicate=False):
        if p is head and name in keys:
            return name
    raise KeyError("the model's LM head weight is not among its parameters")


@torch.no_grad()
def push_weights(trainer_model: torch.nn.Module, policy) -> None:
    """Copy the trainer's current weights into a generator ``Policy`` with its own copy
    of the model (cast to its dtype); and its separate head weight, if it has one."""
    full = full_state_dict(trainer_model)
    dst = policy.model.state_dict()
    for name, t in full.items():
        dst[name].copy_(t)
    if policy.head_weight is not policy.model.get_output_embeddings().weight:
        policy.head_weight.copy_(full[head_key(trainer_model)])
