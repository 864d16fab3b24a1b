"""Asynchrony (config group ``async``), arXiv 2510.13786 §3.1: how generation
and training interleave.

An option (an *async mode*) is two things. Its schema, which extends ``AsyncConfig``
(``base.py``), holds its settings and names the schedule that carries it out
(``schedule()``: ``"<module>.<Class>"`` of ``scalerl/train/schedules/``, e.g.
``IN_PROCESS`` or ``GENERATOR_PROCESSES``). Its function ``fn(*, cfg) -> Interleaving``
(the ``InterleavingFn`` contract) makes the run's frozen ``Interleaving``: how many
policy versions a consumed token may lag the trainer (``max_lag``), how often the
trainer pushes weights to the generators (``push_every``), whether a push may land
between decode steps (``in_flight``), and how many generator processes own a copy of
the weights. ``base.py`` also holds the pure version arithmetic (staleness, the lag
bound) that the schedules and their tests share.

The package is named ``asynchrony`` because ``async`` is a Python keyword;
the config group, ``conf/async/`` and the overrides are ``async``
(``async=pipeline_rl async.max_lag=4``). Must not know about models,
processes or the training loop: it names its schedule and never imports it (this
layer sits below ``train/``, which resolves the name, ``schedules.schedule_class``);
where the batches come from (``generators``) fixes the road the weights take
(``train/run_plan.py:road_kind``). To add an option (docs/architecture.md, 'Adding an
async mode'): a module here, ``conf/async/<name>.yaml``, one line below, and, only if no
existing schedule carries it out, its schedule in ``scalerl/train/schedules/``.
"""
from scalerl.asynchrony import pipeline_rl, ppo_off_policy, sync
from scalerl.core.option import Option

ASYNC_MODES: dict[str, Option] = {
    "sync": Option(sync.SyncConfig, sync.sync_interleaving),
    "ppo_off_policy": Option(ppo_off_policy.PPOOffPolicyConfig, ppo_off_policy.ppo_off_policy_interleaving),
    "pipeline_rl": Option(pipeline_rl.PipelineRLConfig, pipeline_rl.pipeline_rl_interleaving),
}
