"""Asynchrony (config group ``async``), arXiv 2510.13786 §3.1: how generation
and training interleave.

``fn(*, cfg) -> Interleaving`` (the ``InterleavingFn`` contract in ``base.py``) turns an
option into a frozen ``Interleaving``: how many policy versions a consumed token may
lag the trainer (``max_lag``), how often the trainer pushes weights to the
generators (``push_every``), whether a push may land between decode steps
(``in_flight``), and how many generator processes own a copy of the weights.
``base.py`` also holds the pure version arithmetic (staleness, the lag
bound) that the schedule and its tests share.

The package is named ``asynchrony`` because ``async`` is a Python keyword;
the config group, ``conf/async/`` and the overrides are ``async``
(``async=pipeline_rl async.max_lag=4``). Must not know about models,
processes or the training loop: the schedule that carries the option out lives in
``scalerl/train/schedule.py`` and ``scalerl/train/pipeline.py``, the generator
process in ``scalerl/generation/``. To add an option: a module here,
``conf/async/<name>.yaml``, one line below.
"""
from scalerl.asynchrony import pipeline_rl, ppo_off_policy, sync
from scalerl.core.option import Option

ASYNC_MODES: dict[str, Option] = {
    "sync": Option(sync.SyncConfig, sync.sync_interleaving),
    "ppo_off_policy": Option(ppo_off_policy.PPOOffPolicyConfig, ppo_off_policy.ppo_off_policy_interleaving),
    "pipeline_rl": Option(pipeline_rl.PipelineRLConfig, pipeline_rl.pipeline_rl_interleaving),
}
