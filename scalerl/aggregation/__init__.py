"""Loss aggregation (config group ``aggregation``), arXiv 2510.13786 §3.2.

``fn(tok_loss (N, T), mask (N, T) bool, group_size G, *, cfg) -> (loss, units)``
(the ``AggregateFn`` contract in ``base.py``). Rows come in consecutive groups
of G (one prompt's generations). ``units`` is the count the mean is taken over
(prompts, samples or tokens that carry mask); data-parallel ranks rescale by
local/global units so that the summed gradients equal the single-process
aggregate. Must not know about losses.
"""
from scalerl.aggregation import prompt, sample, token
from scalerl.core.option import Option

AGGREGATIONS: dict[str, Option] = {
    "prompt": Option(prompt.PromptAggConfig, prompt.prompt_mean),
    "sample": Option(sample.SampleAggConfig, sample.sample_mean),
    "token": Option(token.TokenAggConfig, token.token_mean),
}
