"""The leaf layer: what every other layer may import, and which imports nothing of scalerl.

Owns the one error type for bad configuration (``errors``), the registry entry
type (``option``), stable hashing (``hashing``), atomic JSON and JSONL files
(``jsonio``), where the repository's ``conf/`` and ``sweeps/`` live (``paths``),
heavy libraries loaded on first use (``lazy``), whether a run's recorded process
is alive (``liveness``). Nothing here knows about
RL, models or Hydra.
"""
