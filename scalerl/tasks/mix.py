"""``task=mix``: a weighted mixture of tasks, each with its own held-out set and curve.

arXiv 2510.13786 §5 trains on math and code together and fits one curve per task. An
entry of ``task.tasks`` is a named task config plus its weight:

    task=mix task.tasks.math.path=polaris.parquet task.tasks.code.path=deepcoder.jsonl
    '+task.tasks.arith={name: arith, weight: 0.5}'

The entry's name labels its metrics (``pass_rate/<entry>``). Each train step draws from
one pool in which every entry holds a share of the slots proportional to its weight
(its problems cycled or subsampled to fill them); every entry keeps its own held-out split.
``task.correct_reward`` and ``task.wrong_reward`` apply to every entry that does not set
its own.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any, Sequence

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from scalerl.core.errors import ConfigError, check
from scalerl.tasks.base import Grades, Problem, TaskConfig, TaskData


@dataclass
class MixConfig(TaskConfig):
    tasks: dict[str, Any] = field(default_factory=dict)
    """Entry name -> {name: <task option>, weight: <share of train prompts>, <that option's settings>}."""
    data_seed: int = 1234
    """Seed of the train pool's mixing (each entry's own data_seed fixes its split)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(len(self.tasks) > 0, "task.tasks", "a mix needs at least one task")
        self.resolved = {k: _entry(k, dict(v) if v is not None else {}, self) for k, v in self.tasks.items()}


def _registry():
    from scalerl.tasks import TASKS  # the registry lists mix itself, so it is read when used

    return TASKS


def _entry(key: str, raw: dict, mix: MixConfig) -> tuple[float, TaskConfig]:
    """(weight, validated config) of one entry; errors name ``task.tasks.<key>.<setting>``."""
    where = f"task.tasks.{key}"
    options = {k: v for k, v in _registry().items() if k != "mix"}
    name = raw.pop("name", None)
    check(name in options, f"{where}.name", f"must be one of {sorted(options)}, got {name!r}")
    weight = raw.pop("weight", 1.0)
    check(isinstance(weight, (int, float)) and weight > 0, f"{where}.weight", f"must be > 0, got {weight!r}")
    node = OmegaConf.structured(options[name].schema)
    node.name = name
    defaults = {"correct_reward": mix.correct_reward, "wrong_reward": mix.wrong_reward}
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(node, defaults, raw))
    except ConfigError as e:
        raise ConfigError(e.key.replace("task.", f"{where}.", 1), e.reason) from None
    except OmegaConfBaseException as e:
        sub = getattr(e, "full_key", None) or getattr(e, "key", None) or "?"
        raise ConfigError(f"{where}.{sub}", str(e).splitlines()[0]) from None
    return float(weight), cfg


def _tag(problems: list[Problem], key: str) -> list[Problem]:
    return [dataclasses.replace(p, task=key) for p in problems]


def build_mix(cfg: MixConfig, *, tokenizer=None) -> TaskData:
    subs = {k: (w, _registry()[c.name].fn(c, tokenizer=tokenizer)) for k, (w, c) in cfg.resolved.items()}
    total, weight_sum = sum(len(t.train) for _, t in subs.values()), sum(w for w, _ in subs.values())
    rng = random.Random(cfg.data_seed)
    train, heldout = [], []
    for key, (w, t) in subs.items():
        slots, pool = max(1, round(total * w / weight_sum)), _tag(t.train, key)
        order = [p for _ in range(-(-slots // len(pool))) for p in rng.sample(pool, len(pool))]
        train += order[:slots]
        heldout += _tag(t.heldout, key)
    flags = tuple(sorted({f for _, t in subs.values() for f in t.flags}))

    def score(texts: Sequence[str], problems: Sequence[Problem]) -> Grades:
        reward, correct = [0.0] * len(texts), [False] * len(texts)
        out_flags = {f: [False] * len(texts) for f in flags}
        for key, (_, t) in subs.items():
            idx = [i for i, p in enumerate(problems) if p.task == key]
            if not idx:
                continue
            g = t.score([texts[i] for i in idx], [problems[i] for i in idx])
            for j, i in enumerate(idx):
                reward[i], correct[i] = g.reward[j], g.correct[j]
                for f, values in g.flags.items():
                    out_flags[f][i] = values[j]
        return Grades(reward=reward, correct=correct, flags=out_flags)

    streams = {k: (w, t.sft_stream) for k, (w, t) in subs.items() if t.sft_stream is not None}

    def sft_stream(seed: int):
        pick, its = random.Random(seed), {k: s(seed) for k, (_, s) in streams.items()}
        keys, weights = list(its), [streams[k][0] for k in its]
        while True:
            key = pick.choices(keys, weights)[0]
            yield dataclasses.replace(next(its[key]), task=key)

    return TaskData(train=train, heldout=heldout, score=score, sft_stream=sft_stream if streams else None,
                    names=tuple(subs), flags=flags)
