"""A throwaway single-node SLURM cluster on localhost, for CI, the slurm tests and trying
`hydra/launcher=slurm` on a laptop or VM.

Owns: installing the Debian packages, writing /etc/slurm/{slurm,slurmdbd}.conf, and starting and
stopping munged, MariaDB, slurmdbd, slurmctld and slurmd by pid file under one state dir.
Knows nothing about training, configs or Hydra; nothing in scalerl needs it at run time.
To change a cluster setting, edit the template in `templates.py` (the comment says why each key
is there) and rerun `python3 tests/local_slurm start`, which restarts when the config changed.
"""

from .cluster import (
    ClusterError,
    env_exports,
    healthy,
    install,
    missing_binaries,
    start,
    status,
    stop,
)

__all__ = [
    "ClusterError", "env_exports", "healthy", "install", "missing_binaries", "start", "status",
    "stop",
]
