"""Data parallelism across ranks (torchrun, or SLURM tasks started by srun).

Every rank generates for its shard of the step's prompts and trains on it;
gradients are summed with all_reduce. Small per-step statistics (rewards,
unit counts) are gathered so batch-level quantities are exact.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_sum(self, x: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            x = x.clone()
            dist.all_reduce(x)
        return x

    def all_cat(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate equal-shaped tensors from every rank along dim 0, rank order."""
        if self.world == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, 0)

    def sum_grads(self, params) -> None:
        if self.world > 1:
            for p in params:
                if p.grad is not None:
                    dist.all_reduce(p.grad)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def _slurm_env() -> dict[str, str] | None:
    """torch.distributed variables derived from a multi-task SLURM step."""
    ntasks = int(os.environ.get("SLURM_NTASKS", "1"))
    if ntasks <= 1 or "SLURM_PROCID" not in os.environ:
        return None
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


def init_distributed(device_type: str) -> Dist:
    """Join the process group if launched with several ranks; else single-process."""
    env = _slurm_env()
    if env:
        os.environ.update(env)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size())


def shutdown(d: Dist) -> None:
    if d.world > 1 and dist.is_initialized():
        dist.destroy_process_group()
