"""Training: the one RL loop (``loop.train``) and the helpers it calls.

Owns building a run (``setup``, including the supervised warm start), rollout,
the async schedules that decide which weights generate which step's batch
(``schedule``, ``pipeline``), evaluation, the policy update, the data-parallel
ranks and the FSDP2 trainer (``distributed``, ``sharding``), compute
accounting, checkpoints (plain and sharded), the final export and progress.
Design-axis behaviour comes only from the run's recipe (``scalerl.registry``),
never from ``if name == ...`` branches or registry lookups here. Must not know
about Hydra or launchers.
"""
