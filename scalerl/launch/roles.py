"""SLURM node roles: one job per arm, trainer nodes first, then generator nodes.

    python -m scalerl.sweep hydra/launcher=slurm hydra.launcher.nodes=3 hydra.launcher.tasks_per_node=2 \\
        async.generators=2 async.generator_nodes=2

submitit has no heterogeneous jobs (facebookincubator/submitit #1741), so, as prime-rl does, every
task of the arm's one job runs this same entry point and takes its role from the SLURM environment:

- tasks on the first ``nodes - generator_nodes`` nodes are the trainer ranks (``distributed.py``:
  rank = ``SLURM_PROCID``, world = the tasks on those nodes; SLURM's block distribution numbers
  them first);
- on each of the last ``generator_nodes`` nodes, the first task runs one generator, the last ones of
  ``async.generators`` in node order, and any other task there has nothing to do and returns.

A generator task waits for its trainer's rendezvous file (``trust.job_rendezvous``: the hub's
address and the path of the run's secret file, in the user's 0700 secrets folder, keyed by the job
and its restart count) and then runs the ordinary generator process with the address alone, exactly
as an operator would (docs/async.md). It stops when the trainer stops it, or when the trainer's store
goes away; the trainer judges it by its heartbeat, so a generator node that drops off the network
fails the run within ``async.timeout_s``, naming it, and a relaunch resumes from the checkpoint.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from scalerl.config import ConfigError
from scalerl.core.jsonio import read_json
from scalerl.core.slurm_env import job_nodes

RENDEZVOUS_POLL_S = 0.5


@dataclass(frozen=True)
class Role:
    kind: str
    """``trainer``, ``generator`` or ``idle`` (a generator node's extra task)."""
    generator: int = -1
    """A generator task's index among ``async.generators``."""


def slurm_role(generator_nodes: int, generators: int, env: Mapping[str, str] = os.environ) -> Role:
    """This task's role in its arm's job (pure: a function of the SLURM environment)."""
    if not generator_nodes:
        return Role("trainer")
    nodes = job_nodes(env)
    if "SLURM_NODEID" not in env or nodes <= generator_nodes:
        raise ConfigError("async.generator_nodes",
                          f"{generator_nodes} generator node(s) need a SLURM job with more nodes than that "
                          f"(hydra/launcher=slurm hydra.launcher.nodes=<trainer nodes + {generator_nodes}>); "
                          f"this process runs in {'a job of ' + str(nodes) + ' node(s)' if nodes else 'no SLURM job'}")
    trainer_nodes = nodes - generator_nodes
    node = int(env["SLURM_NODEID"])
    if node < trainer_nodes:
        return Role("trainer")
    if int(env.get("SLURM_LOCALID", "0")) > 0:
        return Role("idle")
    return Role("generator", generators - generator_nodes + node - trainer_nodes)


def run_generator_node(role: Role, wait_s: float, summary: Path, env: Mapping[str, str] = os.environ,
                       join_s: float | None = None, started: float | None = None) -> dict:
    """Wait up to ``wait_s`` for the trainer's rendezvous, then be generator ``role.generator``
    until the trainer stops it. A trainer that ends before it writes one (a failed start-up) writes
    the run's ``summary``: the wait ends there. ``join_s`` (default ``wait_s``): how long the
    generator then tries to reach the trainer. The trainer writes the rendezvous once it listens
    and waits ``async.timeout_s`` for its generators, so a longer try only waits on a trainer
    that gave up (it kept a job on its nodes until the time limit). ``started``: when this task
    started (``time.time()``), before its imports: a summary written since then is this attempt's,
    even if the trainer failed while this task was still importing torch. Returns the task's record
    (``status`` and the generator's exit code)."""
    from scalerl.generation.fleet import job_rendezvous  # torch: only a generator task needs it
    from scalerl.generation.transfer import SECRET_ENV

    path = job_rendezvous(env=env)
    host = socket.gethostname()
    started, deadline = time.time() if started is None else started, time.monotonic() + wait_s
    print(f"[scalerl] {host}: generator node for generator {role.generator}; waiting for the trainer "
          f"({path})", flush=True)
    while True:
        rdv = read_json(path)
        secret = _read_text(rdv.get("secret_file")) if isinstance(rdv, dict) else None
        if secret and "address" in rdv:
            break
        if _written_since(summary, started):
            print(f"[scalerl] {host}: the run ended before its generators were needed", flush=True)
            return {"status": "generator", "generator": role.generator, "host": host, "exit_code": None}
        if time.monotonic() > deadline:
            raise TimeoutError(f"{host}: the trainer never wrote {path} in {wait_s:.0f} s "
                               "(async.timeout_s after its start-up): is it running, and is the home "
                               "folder shared with this node?")
        time.sleep(RENDEZVOUS_POLL_S)
    # The ordinary generator process, as an operator starts it: the address and the index alone,
    # the secret in its environment (never argv). Its exit is this task's.
    code = subprocess.call([sys.executable, "-m", "scalerl.generation.worker", rdv["address"], str(role.generator),
                            str(wait_s if join_s is None else join_s)],
                           env={**os.environ, SECRET_ENV: secret, "TORCH_CPP_LOG_LEVEL": "ERROR"})
    print(f"[scalerl] {host}: generator {role.generator} exited with code {code}", flush=True)
    return {"status": "generator", "generator": role.generator, "host": host, "exit_code": code}


def _read_text(path) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except (OSError, TypeError):
        return None


def _written_since(path: Path, t: float) -> bool:
    try:
        return path.stat().st_mtime >= t
    except OSError:
        return False
