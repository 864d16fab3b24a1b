"""Verifiable tasks (config group ``task``).

``fn(cfg, *, tokenizer) -> TaskData`` (the ``BuildTaskFn`` contract in ``base.py``): a
fixed train pool, a fixed held-out split and a batched, pure grader
``score(completions, problems) -> Grades``. The tokenizer is only used to render
prompts (its chat template, ``prompting.py``). Code is graded in a sandbox
(``sandbox/``, generic infrastructure with its own docs). Must not know about models'
weights, losses or training.

Adding a task: its module (a ``TaskConfig`` subclass without ``name`` and a build
function), ``conf/task/<name>.yaml``, and one line below.
"""
from scalerl.core.option import Option
from scalerl.tasks import arith, code, math, mix

TASKS: dict[str, Option] = {
    "arith": Option(arith.ArithConfig, arith.build_arith),
    "math": Option(math.MathConfig, math.build_math),
    "code": Option(code.CodeConfig, code.build_code),
    "mix": Option(mix.MixConfig, lambda cfg, *, tokenizer=None: mix.build_mix(cfg, TASKS, tokenizer=tokenizer)),
}
