"""Data filters (config group ``filter``), ScaleRL §3.

``fn(rewards (P, G)) -> keep (P,) bool`` decides which prompt groups enter
the loss. Two options also act on the data stream: ``zero_variance_npr``
retires prompts whose pass rate reached ``npr_threshold`` (see
``retire_mask``; the sampler applies it at the next epoch), and
``dapo_dynamic`` asks the rollout to refill dropped groups. Must not know
about models or losses.
"""
from scalerl.config.registry import Option
from scalerl.filters import dapo_dynamic, none, zero_variance, zero_variance_npr

FILTERS: dict[str, Option] = {
    "none": Option(none.NoFilterConfig, none.keep_all),
    "zero_variance": Option(zero_variance.ZeroVarianceConfig, zero_variance.nonzero_variance),
    "zero_variance_npr": Option(zero_variance_npr.ZeroVarianceNPRConfig, zero_variance.nonzero_variance),
    "dapo_dynamic": Option(dapo_dynamic.DapoDynamicConfig, zero_variance.nonzero_variance),
}
