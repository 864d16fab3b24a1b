"""Derive once: one pure function turns the primary knobs into every derived
quantity. Its result is written next to config.yaml as ``derived.json``."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from scalerl.core.errors import check
from scalerl.registry import async_node


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
    """``cfg`` is the validated ``Config``; ``world_size`` the data-parallel ranks of one run.

    Raises ``ConfigError`` when the batch cannot be split over the ranks; the
    sweep calls this for every arm with its launcher's world size before
    anything launches.
    """
    b = cfg.batch
    check(b.prompts % world_size == 0, "batch.prompts",
          f"batch.prompts={b.prompts} must be divisible by the number of ranks ({world_size})")
    check(not (cfg.filter.refill_rounds and world_size > 1), "filter",
          f"{cfg.filter.name} refills batches per rank and is not supported with {world_size} ranks yet; "
          "use filter=zero_variance or one rank")
    generators = async_node(cfg).generators  # with several ranks, rank 0 owns them (train/pipeline.py)
    tp = getattr(cfg.generation, "tensor_parallel_size", 1)  # engines that shard the model (vLLM)
    check(not (generators and tp > 1), "generation.tensor_parallel_size",
          f"a generator process drives one device, so generation.tensor_parallel_size={tp} needs async=sync or "
          "async=ppo_off_policy (the trainer's process) for now; use generation.tensor_parallel_size=1 with "
          f"async={async_node(cfg).name}")
    gen_body = getattr(cfg.precision, "generator_body", "auto")
    check(not (cfg.generation.name != "torch" and gen_body != "auto"), "precision.generator_body",
          f"generation={cfg.generation.name} sets its own body dtype with generation.dtype; use that instead of "
          f"precision.generator_body={gen_body}")
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
        eval_points=1 + math.ceil(cfg.train.steps / cfg.train.eval_every),
    )
