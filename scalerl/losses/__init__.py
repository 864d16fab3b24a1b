"""Policy-gradient losses (config group ``loss``), arXiv 2510.13786 §3.2.

Each loss is a pure function ``fn(logp, behav_logp, adv, mask, *, cfg) ->
(per_token_loss (N, T), metrics)`` (the ``LossFn`` contract in ``base.py``): it
returns *per-token* losses and leaves the reduction to the ``aggregation``
axis. ``logp`` carries gradients; ``behav_logp`` are the generator's
log-probs. Losses must not know about models, batches or filters.
To add one: a module here, ``conf/loss/<name>.yaml``, one line below.
"""
from scalerl.core.option import Option
from scalerl.losses import cispo, dapo, grpo, gspo

LOSSES: dict[str, Option] = {
    "cispo": Option(cispo.CispoConfig, cispo.cispo_loss),
    "dapo": Option(dapo.DapoConfig, dapo.dapo_loss),
    "gspo": Option(gspo.GspoConfig, gspo.gspo_loss),
    "grpo": Option(grpo.GrpoConfig, grpo.grpo_loss),
}
