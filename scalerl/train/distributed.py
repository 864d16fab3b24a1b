"""Data-parallel ranks: torchrun (``torchrun --nproc_per_node N -m scalerl.sweep ...``)
or SLURM tasks started by srun (``hydra.launcher.tasks_per_node=N``).

Every rank generates for its share of the step's prompts and trains on it
through the FSDP2-sharded trainer (``sharding.py``). Small per-step statistics
(rewards, unit counts, metric sums) are all-reduced so batch-level quantities
are exact. Collectives get tensors on ``Dist.device``: the rank's GPU under
NCCL, the CPU under gloo; results come back on the caller's device.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from scalerl.core.slurm_env import job_nodes
from scalerl.generation.transfer import decode, encode

_EXIT_BARRIER_S = 300  # ranks reach the end together; a slow final checkpoint on a busy node still fits


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    """This rank's device; collectives run on it."""
    mesh: object = None
    """The 1-D device mesh FSDP2 shards over (None: not sharded)."""

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_sum(self, x: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return x
        y = x.to(self.device, copy=True)
        dist.all_reduce(y)
        return y.to(x.device)

    def all_cat(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate equal-shaped tensors from every rank along dim 0, rank order."""
        if self.world == 1:
            return x
        y = x.to(self.device).contiguous()
        parts = [torch.empty_like(y) for _ in range(self.world)]
        dist.all_gather(parts, y)
        return torch.cat(parts, 0).to(x.device)

    # Plain data between ranks travels in the transport's wire format (JSON plus raw tensor bytes,
    # generation/transfer/wire.py), never pickled as torch's *_object_list collectives do: a process that
    # reaches this group's sockets cannot make a rank run code (docs/async.md, docs/sandbox.md).
    def scatter_data(self, parts: list | None, types=()):
        """Rank k's item of rank 0's ``parts`` (one per rank; None elsewhere): plain data and CPU
        tensors; ``types``: the dataclasses it may hold."""
        if self.world == 1:
            return parts[0]
        blobs = [encode(p) for p in parts] if self.main else None
        sizes = torch.tensor([len(b) for b in blobs] if self.main else [0] * self.world, device=self.device)
        dist.broadcast(sizes, src=0)
        width = int(sizes.max())
        out = torch.empty(width, dtype=torch.uint8, device=self.device)
        send = [_bytes_tensor(b, width, self.device) for b in blobs] if self.main else None
        dist.scatter(out, send, src=0)
        return decode(out[: int(sizes[self.rank])].cpu().numpy().tobytes(), types)

    def from_main(self, obj, types=()):
        """Rank 0's ``obj`` (plain data and CPU tensors) on every rank."""
        return obj if self.world == 1 else self.scatter_data([obj] * self.world if self.main else None, types)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def _bytes_tensor(blob: bytes, width: int, device) -> torch.Tensor:
    return torch.frombuffer(bytearray(blob.ljust(width, b"\0")), dtype=torch.uint8).to(device)


def trainer_tasks(generator_nodes: int, env=os.environ) -> int:
    """The SLURM step's tasks that are trainer ranks: all of them, or, with node roles
    (``async.generator_nodes``), those on the job's first nodes. SLURM's default block
    distribution puts tasks 0..k-1 on the first node, so those are the lowest task ids."""
    ntasks = int(env.get("SLURM_NTASKS", "1"))
    if not generator_nodes:
        return ntasks
    nodes = job_nodes(env) or 1
    return ntasks // nodes * (nodes - generator_nodes)


def _slurm_env(generator_nodes: int = 0) -> dict[str, str] | None:
    """torch.distributed variables derived from a multi-task SLURM step (its trainer tasks)."""
    ntasks = trainer_tasks(generator_nodes)
    if "SLURM_PROCID" not in os.environ or (ntasks <= 1 and not generator_nodes):
        return None  # one rank and no generator node to reach it: nothing to set
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    master = "127.0.0.1"
    if nodelist:
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10)
            hosts = out.stdout.split()
            if len(hosts) > 1:  # single node: loopback always works
                master = hosts[0]
        except (OSError, subprocess.SubprocessError):
            pass
    job = int(os.environ.get("SLURM_JOB_ID", "0"))
    return {
        "RANK": os.environ["SLURM_PROCID"],
        "WORLD_SIZE": str(ntasks),
        "LOCAL_RANK": os.environ.get("SLURM_LOCALID", "0"),
        "MASTER_ADDR": os.environ.get("MASTER_ADDR", master),
        "MASTER_PORT": os.environ.get("MASTER_PORT", str(20000 + job % 20000)),
    }


def launched_world(generator_nodes: int = 0) -> int:
    """Trainer ranks this process was started with (torchrun's WORLD_SIZE, or srun's tasks on the
    trainer nodes)."""
    env = _slurm_env(generator_nodes)
    return int((env or os.environ).get("WORLD_SIZE", "1"))


def init_distributed(device: torch.device, *, sharded: bool, generator_nodes: int = 0) -> Dist:
    """Join the process group if launched with several ranks (a 1-rank group when a
    single process still shards, for mixed precision); else single-process.
    ``generator_nodes``: the job's last nodes run generators, not ranks (``launch/roles.py``)."""
    env = _slurm_env(generator_nodes)
    if env:
        os.environ.update(env)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if device.type == "cuda":  # one GPU per rank; modulo: SLURM may bind each task to its own single GPU
        local = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count() if world > 1 else None
        device = torch.device("cuda", torch.cuda.current_device() if local is None else local)
        torch.cuda.set_device(device)
    if world <= 1 and not sharded:
        return Dist(device=device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        if world > 1:
            dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
        else:  # one process: an in-memory store, no port to pick
            dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    world = dist.get_world_size()
    mesh = None
    if sharded:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (world,))
    return Dist(rank=dist.get_rank(), world=world, device=device, mesh=mesh)


def shutdown(d: Dist) -> None:
    """Leave the process group at the end of a run that every rank finished (a failed rank never
    gets here: it raises, and torchrun or srun ends the others)."""
    if not ((d.world > 1 or d.mesh is not None) and dist.is_initialized()):
        return
    if d.world > 1:
        # Every rank reaches this point before any tears its group down: without it, a rank can
        # still be in gloo's teardown when rank 0 (the store's host) exits, and it aborted there
        # ("terminate called without an active exception") in 1 of several CI runs on a loaded
        # machine. Gloo's monitored barrier names a rank that never arrives instead of hanging.
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timedelta(seconds=_EXIT_BARRIER_S))
        else:
            dist.barrier()
    dist.destroy_process_group()
