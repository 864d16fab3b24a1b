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

import sys
from typing import TYPE_CHECKING, Iterator

import torch

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor


def needs_sharding(world: int, compute_dtype: torch.dtype) -> bool:
    return world > 1 or compute_dtype != torch.float32


def is_dtensor(t) -> bool:
    """Whether ``t`` is an FSDP2 shard (a ``DTensor``), asked without importing
    torch.distributed.tensor (0.6 CPU-s a process, sympy among it), which an unsharded run never
    needs: no DTensor can exist before that module is imported."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


def is_sharded(model: torch.nn.Module) -> bool:
    """``model``'s parameters are FSDP2 shards (the plan was ``sharded`` when it was built)."""
    return any(is_dtensor(p) for p in model.parameters())


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

    from scalerl.models.policy import decoder

    def policy(dtype: torch.dtype) -> MixedPrecisionPolicy:
        return MixedPrecisionPolicy(param_dtype=None if dtype == torch.float32 else dtype, reduce_dtype=torch.float32)

    for layer in getattr(decoder(trainer.model), "layers", []):
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
    if is_dtensor(total):  # partial norms of the shards -> the global norm
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
        t = full[name] if name in full else (t.full_tensor() if is_dtensor(t) else t).detach()
        out[name] = t.to(dtype) if dtype is not None and t.is_floating_point() else t
    return out


@torch.no_grad()
def iter_full_tensors(model: torch.nn.Module, dtype: torch.dtype | None = None, bucket_bytes: int = 64 << 20
                      ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """``full_state_dict(model, dtype)`` in groups of ``(name, tensor)``, in state-dict order, each
    group at most ``bucket_bytes`` (in ``dtype``; a larger tensor is a group of its own).

    Collective when sharded: every rank must exhaust it, and each tensor is gathered only when
    its group is reached (one all-gather per row-sharded tensor, the same order on every rank),
    so a rank holds its shards plus two groups' buffers (and one larger tensor), never the full
    model. A shard is cast to ``dtype`` before the gather (bf16 for a bf16 generator: half the
    bytes; a cast commutes with the gather, so the values are the full tensor's cast).

    Gathered tensors are views of two buffers taken in turn, one per group: a group is valid
    until the one after the next is requested (copy what must live longer); every push reuses
    the same pages instead of faulting in fresh ones. A tensor larger than a bucket is gathered
    in slices (``_full_tensor``). On a Qwen2-0.5B shape, 2 ranks, 64 MB buckets, a push adds
    +453 MB on rank 1 against +810 MB with a fresh tensor per gather (benchmarks/bench_push.py).
    Unsharded, the tensors are the module's own (detached; cast copies if ``dtype`` differs).
    On GPU the gather is NCCL's and the buffers are on the GPU (untested here: no GPU)."""
    scratch = _Scratch(bucket_bytes)
    group: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in model.state_dict().items():
        cast = dtype if dtype is not None and t.is_floating_point() else t.dtype
        nbytes = _gathered_bytes(t, cast)
        if group and size + nbytes > bucket_bytes:
            yield group
            group, size = [], 0
            scratch.flip()
        group.append((name, _full_tensor(t, cast, scratch)))
        size += nbytes
    if group:
        yield group


class _Scratch:
    """Two flat buffers of ``nbytes`` that gathered tensors are carved from (one per group, in
    turn), and one for the shard a rank sends; a tensor that does not fit gets its own."""

    def __init__(self, nbytes: int):
        self.nbytes, self.bufs, self.turn, self.at = nbytes, {}, 0, 0

    def flip(self) -> None:
        self.turn, self.at = 1 - self.turn, 0

    def _buf(self, key, device) -> torch.Tensor:
        if key not in self.bufs:
            self.bufs[key] = torch.empty(self.nbytes, dtype=torch.uint8, device=device)
        return self.bufs[key]

    def take(self, shape, dtype: torch.dtype, device, *, send: bool = False, keep: bool = True) -> torch.Tensor:
        """A view of ``shape``: the send buffer's start, or the next free part of this group's
        buffer (``keep=False``: its start, not kept); a fresh tensor when it does not fit."""
        n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        at = 0 if send or not keep else -(-self.at // 16) * 16  # 16-aligned: a view of any dtype
        if at + n > self.nbytes:
            return torch.empty(shape, dtype=dtype, device=device)
        if not send and keep:
            self.at = at + n
        return self._buf("send" if send else self.turn, device)[at : at + n].view(dtype).view(shape)


def _gathered_bytes(t: torch.Tensor, dtype: torch.dtype) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    if not _row_sharded(t):
        return t.numel() * size
    world = t.device_mesh.size()
    return world * -(-t.shape[0] // world) * t.shape[1:].numel() * size


def _full_tensor(t: torch.Tensor, dtype: torch.dtype, scratch: _Scratch) -> torch.Tensor:
    """One tensor of a state dict, full and in ``dtype`` (collective when it is a DTensor)."""
    import torch.distributed as dist

    if not is_dtensor(t):
        return t.detach().to(dtype)
    if not _row_sharded(t):
        return t.full_tensor().to(dtype)
    group, world = t.device_mesh.get_group(), t.device_mesh.size()
    rows, rest = t.shape[0], tuple(t.shape[1:])
    chunk = -(-rows // world)  # rank r holds rows [r*chunk, (r+1)*chunk) (torch.chunk), the last ones fewer
    local, dev = t.to_local().detach(), t.to_local().device
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    row_bytes = max(1, torch.Size(rest).numel() * torch.empty((), dtype=dtype).element_size())
    # Rows per gather: all of them when the tensor fits a group buffer; a larger one (an embedding)
    # is gathered a slice of each rank's rows at a time through this group's buffer (it is a group
    # of its own), since gloo stages every all-gather through a temporary of its output's size.
    step = chunk if world * chunk * row_bytes <= scratch.nbytes else max(1, scratch.nbytes // (world * row_bytes))
    out = scratch.take((world * chunk, *rest), dtype, dev) if step == chunk else torch.empty((world * chunk, *rest),
                                                                                            dtype=dtype, device=dev)
    for r0 in range(0, chunk, step):
        n = min(step, chunk - r0)
        send = scratch.take((n, *rest), dtype, dev, send=True)
        mine = local[r0 : r0 + n]
        send[: mine.shape[0]].copy_(mine)  # casts
        send[mine.shape[0] :].zero_()
        if step == chunk:
            gather(out, send, group=group)
            break
        part = scratch.take((world * n, *rest), dtype, dev, keep=False)
        gather(part, send, group=group)
        for q in range(world):  # rank q's slice goes to its rows
            out[q * chunk + r0 : q * chunk + r0 + n].copy_(part[q * n : (q + 1) * n])
    return out[:rows]  # contiguous: the padding rows are all at the end


def _row_sharded(t) -> bool:
    if not is_dtensor(t):
        return False
    from torch.distributed.tensor import Shard

    return t.device_mesh.ndim == 1 and tuple(t.placements) == (Shard(0),)


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
def copy_weights(trainer_model: torch.nn.Module, policy) -> None:
    """Copy the trainer's current weights into a generator ``Policy`` with its own copy
    of the model (cast to its dtype); and its separate head weight, if it has one."""
    full = full_state_dict(trainer_model)
    dst = policy.model.state_dict()
    for name, t in full.items():
        dst[name].copy_(t)
    if policy.head_weight is not policy.model.get_output_embeddings().weight:
        policy.head_weight.copy_(full[head_key(trainer_model)])
