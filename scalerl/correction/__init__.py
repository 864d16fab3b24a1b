"""Generator-trainer mismatch correction (config group ``correction``).

A serving engine samples the rollouts with its own numerics (bf16 weights and kernels), the
trainer recomputes log-probs in its own, so even at the same weights π_gen(y_t) ≠ π_train(y_t)
(docs/mismatch.md). ``none`` is ScaleRL's recipe (arXiv 2510.13786 §3.2): the loss's ratio is
taken straight against the generator's log-probs. The other options need π_old, the trainer's
own log-prob under the weights before this step's update (one extra forward without gradient,
``needs_old_logp``); the loss's ratio is then taken against π_old, and each token's loss term is
multiplied by the option's weight, a function of w_t = π_old(y_t) / π_gen(y_t):

``fn(old_logp (N, T), gen_logp (N, T), mask (N, T), *, cfg) -> (weight (N, T), metrics)``
(the ``CorrectionFn`` contract in ``base.py``). Must not know about models, losses or batches.
To add one: a module here, ``conf/correction/<name>.yaml``, one line below.
"""
from scalerl.core.option import Option
from scalerl.correction import icepop, none, seq_mask, tis

CORRECTIONS: dict[str, Option] = {
    "none": Option(none.NoCorrectionConfig, none.no_correction),
    "tis": Option(tis.TisConfig, tis.tis_weight),
    "icepop": Option(icepop.IcePopConfig, icepop.icepop_weight),
    "seq_mask": Option(seq_mask.SeqMaskConfig, seq_mask.seq_mask_weight),
}
