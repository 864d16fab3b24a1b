"""Generator processes for ``async=pipeline_rl`` (arXiv 2510.13786 §3.1): the fleet the trainer runs.

- ``pool.py``: the trainer's side: start generators (as children, or wait for ones an
  operator starts on other nodes), order batches, push weights, collect rollouts, stop them;
  its end of the link (``Hub``) lives there too;
- ``generator_loop.py``: a generator's main loop (``python -m scalerl.generation.worker``), which
  builds its engine through ``GENERATORS`` and serves the trainer's control stream;
- ``transport.py``: the trainer <-> generator link (a TCPStore and gloo groups, every wait
  with a deadline) and the generator's end (``Spoke``); ``heartbeats.py``: how the trainer tells a
  live generator from a dead one.

The fleet sits on top of ``engines/`` and ``transfer/``; it knows nothing of tasks, rewards,
losses or the training loop: orders are token ids and sampling settings, replies are
``Generation`` shards tagged with the generator's policy version.
"""
from scalerl.generation.fleet.pool import GeneratorPool
from scalerl.generation.fleet.generator_loop import Shard, WorkerSpec
from scalerl.generation.transfer.trust import job_rendezvous

__all__ = ["GeneratorPool", "Shard", "WorkerSpec", "job_rendezvous"]
