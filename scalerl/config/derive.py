"""Derive once: one pure function turns the primary knobs into every derived
quantity. Its result is written next to config.yaml as ``derived.json``."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from scalerl.config.eval_schedule import eval_steps


@dataclass(frozen=True)
class Derived:
    world_size: int
    samples_per_step: int
    prompts_per_rank: int
    prompts_per_minibatch: int
    samples_per_minibatch: int
    steps_per_epoch: float
    epochs: float
    max_completion_tokens: int
    eval_points: int

    def to_dict(self) -> dict:
        return asdict(self)


def derive(cfg, world_size: int = 1, phrase_tokens: int | None = None) -> Derived:
    """``cfg`` is the validated ``Config`` (its rules, those of ``world_size`` ranks included,
    are ``validate``'s and ``check_ranks``'s); ``world_size`` the data-parallel ranks of one run;
    ``phrase_tokens`` the interruption phrase's length in tokens (None: in characters, a bound)."""
    b = cfg.batch
    per_rank = b.prompts // world_size  # minibatches are global (train/update.py): no per-rank divisibility
    # File-based tasks (math, code, mix) know their pool size only once the data is read:
    # 0 here means "unknown"; metrics.jsonl's `epoch` comes from the real pool.
    n_train = getattr(cfg.task, "n_train", None) or 0
    steps_per_epoch = n_train / b.prompts
    return Derived(
        world_size=world_size,
        samples_per_step=b.prompts * b.generations,
        prompts_per_rank=per_rank,
        prompts_per_minibatch=b.prompts // b.minibatches,
        samples_per_minibatch=b.prompts // b.minibatches * b.generations,
        steps_per_epoch=steps_per_epoch,
        epochs=cfg.train.steps / steps_per_epoch if steps_per_epoch else 0.0,
        max_completion_tokens=cfg.length.completion_budget(phrase_tokens),
        eval_points=len(eval_steps(cfg.train.steps, every=cfg.train.eval_every, points=cfg.train.eval_points,
                                   first=cfg.train.eval_first)),
    )
