"""Data filters (config group ``filter``), arXiv 2510.13786 §3.2.

``fn(rewards (P, G), *, cfg) -> trains_on (P,) bool`` decides which prompt groups
enter the loss (the ``FilterFn`` contract in ``base.py``). Two options also act
on the data stream, through fields only they have: ``zero_variance_npr``
retires prompts whose pass rate reached ``npr_threshold`` (the sampler applies
it from the next epoch), and ``dapo_dynamic`` asks the rollout to refill
dropped groups for up to ``max_refill_rounds``. The base schema exposes both as
``retire_at`` and ``refill_rounds`` (off unless the option sets them). Must not
know about models or losses.
"""
from scalerl.core.option import Option
from scalerl.filters import dapo_dynamic, none, zero_variance, zero_variance_npr

FILTERS: dict[str, Option] = {
    "none": Option(none.NoFilterConfig, none.keep_all),
    "zero_variance": Option(zero_variance.ZeroVarianceConfig, zero_variance.nonzero_variance),
    "zero_variance_npr": Option(zero_variance_npr.ZeroVarianceNPRConfig, zero_variance.nonzero_variance),
    "dapo_dynamic": Option(dapo_dynamic.DapoDynamicConfig, zero_variance.nonzero_variance),
}
