"""Advantage normalization (config group ``adv_norm``), arXiv 2510.13786 §3.2.

``fn(rewards (P, G), trained (P,) bool, *, cfg) -> advantages (P, G)`` (the
``AdvNormFn`` contract in ``base.py``). Every option centres rewards on the
group mean; they differ in the scale. Rows of groups with ``trained=False``
(dropped by the data filter) get advantage 0 and do not enter any batch
statistic. Must not know about losses or models.
"""
from scalerl.adv_norm import batch, none, prompt
from scalerl.core.option import Option

ADV_NORMS: dict[str, Option] = {
    "batch": Option(batch.BatchAdvNormConfig, batch.batch_normalized),
    "prompt": Option(prompt.PromptAdvNormConfig, prompt.prompt_normalized),
    "none": Option(none.NoAdvNormConfig, none.centered),
}
