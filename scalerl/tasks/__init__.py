"""Verifiable tasks (config group ``task``).

``fn(cfg) -> TaskData`` (the ``BuildTaskFn`` contract in ``base.py``): a
fixed train pool, a fixed held-out split and a pure reward function
``reward(completion_text, answer) -> float``. Real math
and code tasks plug in here with the same interface (code rewards must run in
a sandbox). Must not know about models or losses.
"""
from scalerl.core.option import Option
from scalerl.tasks import arith

TASKS: dict[str, Option] = {
    "arith": Option(arith.ArithConfig, arith.build_arith),
}
