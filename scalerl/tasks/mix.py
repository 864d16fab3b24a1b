"""``task=mix``: a weighted mixture of tasks, each with its own held-out set and curve.

arXiv 2510.13786 §5 trains on math and code together and fits one curve per task. Each
entry of ``task.tasks`` is an ordinary task option, composed by Hydra from
``conf/task/<option>.yaml`` (so its settings are typed and checked, and errors name
``task.tasks.<entry>.<setting>``); ``task.weights`` gives each entry's share of the
train prompts (default 1):

    task=mix task.tasks.math.path=polaris.parquet task.tasks.code.path=deepcoder.jsonl
    task=mix ~task.tasks.code ~task.weights.code +task@task.tasks.sums=arith +task.weights.sums=0.5 ...

The entry's name labels its metrics (``pass_rate/<entry>``). Each train step draws from
one pool in which every entry holds a share of the slots proportional to its weight
(its problems cycled or subsampled to fill them); every entry keeps its own held-out
split. In ``conf/task/mix.yaml`` the default entries take their rewards from the mix's
``task.correct_reward`` and ``task.wrong_reward``.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from scalerl.core.errors import check
from scalerl.tasks.base import Grades, Problem, TaskConfig, TaskData


@dataclass
class MixConfig(TaskConfig):
    tasks: dict[str, Any] = field(default_factory=dict)
    """Entry name -> a task option's config (``+task@task.tasks.NAME=OPTION`` adds one)."""
    weights: dict[str, float] = field(default_factory=dict)
    """Entry name -> its share of the train prompts (entries not listed: 1)."""
    data_seed: int = 1234
    """Seed of the train pool's mixing (each entry's own data_seed fixes its split)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(len(self.tasks) > 0, "task.tasks", "a mix needs at least one task")
        for key, sub in self.tasks.items():
            check(isinstance(sub, TaskConfig) and not isinstance(sub, MixConfig), f"task.tasks.{key}",
                  f"must be a task option other than mix (compose it with `+task@task.tasks.{key}=<option>`), got {sub!r}")
        for key, w in self.weights.items():
            check(key in self.tasks, f"task.weights.{key}",
                  f"is not an entry of task.tasks ({sorted(self.tasks)}); drop it with `~task.weights.{key}`")
            check(w > 0, f"task.weights.{key}", f"must be > 0, got {w}")

    def imitable(self) -> bool:
        return any(sub.imitable() for sub in self.tasks.values())  # the warm start imitates those that are

    def weight(self, key: str) -> float:
        return float(self.weights.get(key, 1.0))


def _tag(problems: list[Problem], key: str) -> list[Problem]:
    return [dataclasses.replace(p, task=key) for p in problems]


def build_mix(cfg: MixConfig, tasks: Mapping[str, Any], *, tokenizer=None) -> TaskData:
    """``tasks`` is the task registry (``TASKS``): it lists mix itself, so it is handed in
    rather than imported."""
    subs = {k: (cfg.weight(k), tasks[c.name].fn(c, tokenizer=tokenizer)) for k, c in cfg.tasks.items()}
    total, weight_sum = sum(len(t.train) for _, t in subs.values()), sum(w for w, _ in subs.values())
    rng = random.Random(cfg.data_seed)
    train, heldout = [], []
    for key, (w, t) in subs.items():
        slots, pool = max(1, round(total * w / weight_sum)), _tag(t.train, key)
        order = [p for _ in range(-(-slots // len(pool))) for p in rng.sample(pool, len(pool))]
        train += order[:slots]
        heldout += _tag(t.heldout, key)
    reported = {k: tuple(f for fs in t.flags.values() for f in fs) for k, (_, t) in subs.items()}
    flags = tuple(sorted({f for fs in reported.values() for f in fs}))

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

    streams = {k: (w, t.sft_stream, t.sft_final_stream or t.sft_stream) for k, (w, t) in subs.items()
               if t.sft_stream is not None}

    def mixed(which: int):
        def stream(seed: int):
            pick, its = random.Random(seed), {k: s[which](seed) for k, s in streams.items()}
            keys, weights = list(its), [streams[k][0] for k in its]
            while True:
                key = pick.choices(keys, weights)[0]
                yield dataclasses.replace(next(its[key]), task=key)
        return stream

    return TaskData(train=train, heldout=heldout, score=score, sft_stream=mixed(1) if streams else None,
                    sft_final_stream=mixed(2) if streams else None,
                    names=tuple(subs), flags={k: fs for k, fs in reported.items() if fs},
                    correct_reward=cfg.correct_reward, wrong_reward=cfg.wrong_reward)
