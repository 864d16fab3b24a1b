"""Follow a run's config through its set-up, and one weight push through its files, by tracing
a real run (``sys.settrace``): what docs/architecture.md, "Following a run's start", reports.

    PYTHONPATH=$PWD python benchmarks/follow_cfg.py                       # the default recipe (pipeline_rl: generator processes)
    PYTHONPATH=$PWD python benchmarks/follow_cfg.py async=sync            # one process: the torch engine's own weights
    PYTHONPATH=$PWD python benchmarks/follow_cfg.py model.dtype=bfloat16  # a sharded trainer: the copy road
    PYTHONPATH=$PWD python benchmarks/follow_cfg.py precision.generator_body=bf16  # an engine with its own weights
    PYTHONPATH=$PWD python benchmarks/follow_cfg.py --entry run_arm       # from where each arm lands

It trains one step of the tiny model and prints:

- set-up, from ``train()`` to the first rollout, following ``cfg``: a call is followed when one of
  its arguments (``self`` aside) is the config, one of its nodes, or an object holding it as
  ``.cfg`` (the plan). It lists the scalerl modules those calls enter, how many times
  ``train/setup.py`` is entered from another module, and how many times the reader climbs back
  up to the entry (a followed call from ``train/loop.py`` into another module returns there);
- the files of scalerl code run by one ``publish`` (the loop's one call after the update, step 1),
  the loop's own file included;
- how many times set-up enters ``models/load.py`` from another module, and how many times it
  loads a tokenizer (``load_tokenizer``, any module).

``--entry run_arm`` starts one step higher, where each arm of a sweep lands
(``launch/task.py: run_arm``, through ``python -m scalerl.sweep``'s own entry, in process): the
config is then Hydra's ``DictConfig`` until ``validate`` types it, so a call is followed when an
argument is a ``DictConfig``, a config dataclass (a ``...Config``) or an object holding one as
``.cfg``; the climbs are the followed calls that ``run_arm``'s module and ``train()``'s make into
other modules.
"""
from __future__ import annotations

import sys
import tempfile
from dataclasses import fields, is_dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "scalerl"
DEFAULT = ["logger=none", "train.threads=1", "train.steps=1", "train.eval_samples=1",
           "task.think=0", "length.max_new_tokens=8", "model.warmstart.final_steps=0"]


def config_nodes(cfg) -> set[int]:
    """ids of the config and of every dataclass node under it."""
    out, todo = set(), [cfg]
    while todo:
        node = todo.pop()
        if is_dataclass(node) and id(node) not in out:
            out.add(id(node))
            todo += [getattr(node, f.name) for f in fields(node)]
        elif isinstance(node, dict):
            todo += list(node.values())
    return out


def module_of(frame) -> str | None:
    path = Path(frame.f_code.co_filename)
    return str(path.relative_to(PKG)) if path.is_relative_to(PKG) else None


def is_config(v) -> bool:
    """A config in any of its forms: Hydra's ``DictConfig`` or one of scalerl's config dataclasses."""
    from omegaconf import DictConfig

    return isinstance(v, DictConfig) or (is_dataclass(v) and type(v).__name__.endswith("Config"))


def follow(overrides: list[str], entry: str = "train") -> dict:
    from scalerl.config import compose, validate
    from scalerl.train.loop import train

    cfg = validate(compose([*DEFAULT, *overrides]))
    nodes = config_nodes(cfg)
    tops = {"train": ("train/loop.py",), "run_arm": ("launch/task.py", "train/loop.py")}[entry]
    seen = {"modules": set(), "setup_entries": 0, "climbs": [], "push_files": None, "load_entries": [],
            "tokenizer_loads": []}
    state = {"setup": True, "push": None}

    def carries_cfg(frame) -> bool:
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        for name in names:
            if name == "self":
                continue
            v = frame.f_locals.get(name)
            if id(v) in nodes or id(getattr(v, "cfg", None)) in nodes:
                return True
            if entry == "run_arm" and (is_config(v) or is_config(getattr(v, "cfg", None))):
                return True
        return False

    def tracer(frame, event, arg):
        if event != "call":
            return None
        mod = module_of(frame)
        if mod is None:
            return None
        caller = frame.f_back
        while caller is not None and module_of(caller) is None:
            caller = caller.f_back
        up = module_of(caller) if caller is not None else None
        name = frame.f_code.co_name
        if state["setup"] and name == "rollout" and mod in ("train/schedules/local.py", "train/schedules/pipeline.py"):
            state["setup"] = False  # the first step begins: set-up is over
        if state["setup"] and mod == "models/load.py" and up != mod:
            seen["load_entries"].append(f"{up}:{name}")
        if state["setup"] and name == "load_tokenizer":
            seen["tokenizer_loads"].append(str(up))
        if state["setup"] and mod != up and carries_cfg(frame):
            seen["modules"].add(mod)
            seen["setup_entries"] += mod == "train/setup.py"
            if up in tops:
                seen["climbs"].append(f"{mod}:{name}")
        if name == "publish" and up == "train/loop.py" and seen["push_files"] is None:
            state["push"] = {"train/loop.py", mod}
            seen["push_files"] = state["push"]
            return lambda f, e, a: _end_push(f, e) if e == "return" else None
        if state["push"] is not None:
            state["push"].add(mod)
        return None

    def _end_push(frame, event):
        state["push"] = None  # the publish call returned

    with tempfile.TemporaryDirectory() as d:
        sys.settrace(tracer)
        try:
            if entry == "run_arm":
                from scalerl.launch.app import main as sweep_main

                sweep_main([*DEFAULT, *overrides, f"hydra.run.dir={d}/run"])
            else:
                train(cfg, Path(d) / "run", run_name="follow", group="follow", config_dict={})
        finally:
            sys.settrace(None)
    return seen


def main() -> None:
    args = sys.argv[1:]
    entry = "train"
    if args[:1] == ["--entry"]:
        entry, args = args[1], args[2:]
    seen = follow(args, entry)
    print(f"from {entry}(): set-up follows cfg through {len(seen['modules'])} scalerl modules: {sorted(seen['modules'])}")
    print(f"train/setup.py entered {seen['setup_entries']} time(s); climbs back up to {entry}(): "
          f"{len(seen['climbs'])} ({', '.join(seen['climbs'])})")
    files = sorted(seen["push_files"] or [])
    print(f"one publish reads {len(files)} files: {files}")
    print(f"set-up enters models/load.py {len(seen['load_entries'])} time(s) ({', '.join(seen['load_entries'])}); "
          f"loads a tokenizer {len(seen['tokenizer_loads'])} time(s) (from {', '.join(seen['tokenizer_loads'])})")


if __name__ == "__main__":
    main()
