"""What a process reads of the SLURM job it runs in (pure and stdlib-only: the sweep's parent and
the trainer both use it)."""
from __future__ import annotations

import os
from typing import Mapping


def job_nodes(env: Mapping[str, str] = os.environ) -> int:
    """Nodes of this SLURM job (0 outside one)."""
    return int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 0)
