"""The docs' "Adding an async mode" recipe (docs/architecture.md) is exactly what it takes.

In a copy of the repository, add the async mode ``mine`` the way the docs say: one step off, each
step trains on the batch the version before generated, in the trainer's process. Its module (whose
config names the schedule the docs name), its YAML written as the docs write it, the registry line
the docs give and its schedule: four files, and no other file changes. It trains through the
command line beside ``sync``, and its batches are exactly as stale as the mode says. A schema that
skips ``schedule()`` fails ``--dry-run`` with one line naming ``async``, before anything launches.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from helpers import ANSWERS_ONLY, REPO

DOCS = (REPO / "docs" / "architecture.md").read_text()
RECIPE = DOCS[DOCS.index("## Adding an async mode"):]

SCHEDULE_METHOD = '''
    def schedule(self) -> str:
        return {name}
'''
MODULE = '''"""One step off (a toy mode for the tests): each step trains on the batch the version before generated."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.asynchrony.base import AsyncConfig, Interleaving
from scalerl.core.errors import check


@dataclass
class MineConfig(AsyncConfig):
    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.generators == 0, "async.generators", f"mine generates in the trainer's process, got {{self.generators}}")
{schedule}

def mine_interleaving(*, cfg: MineConfig) -> Interleaving:
    return Interleaving(max_lag=1, push_every=1, in_flight=False, generators=0,
                        generator_threads=cfg.generator_threads, timeout_s=cfg.timeout_s)
'''
SCHEDULE = '''"""One step off (a toy schedule for the tests)."""
from __future__ import annotations

import time

from scalerl.train.schedules.base import Batch
from scalerl.train.schedules.local import LocalSchedule


class {cls}(LocalSchedule):
    def rollout(self, step: int) -> Batch:
        t0, depth = time.perf_counter(), len(self.pending)
        if step not in self.pending:  # the first step: its batch comes from the start's weights
            self.generate(step)
        if step < self.cfg.train.steps:
            self.generate(step + 1)  # the next step's batch, by the weights this step starts from
        return self.consume(step, t0, depth)
'''


def _quoted(pattern: str) -> str:
    """The one backquoted snippet of the recipe that matches ``pattern``."""
    (hit,) = [s for s in re.findall(r"`([^`]+)`", RECIPE) if re.fullmatch(pattern, s)]
    return hit


def add_mine(tmp_path, schedule: bool = True):
    """A copy of the repository with ``async=mine`` added by the recipe's four steps; returns it and
    the files the recipe named."""
    assert "scalerl/asynchrony/mine.py" in RECIPE and "schedule(self) -> str" in RECIPE and "`ASYNC_MODES`" in RECIPE
    repo = tmp_path / "repo"
    for part in ("conf", "scalerl", "sweeps", "hydra_plugins", "analysis"):
        shutil.copytree(REPO / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    name = _quoted(r'"mine\.[A-Za-z]+"')  # the schedule the docs' MineConfig names
    module, cls = name.strip('"').split(".")
    # 1. scalerl/asynchrony/mine.py: MineConfig(AsyncConfig) naming its schedule, and mine_interleaving.
    (repo / "scalerl/asynchrony/mine.py").write_text(
        MODULE.format(schedule=SCHEDULE_METHOD.format(name=name) if schedule else ""))
    # 2. conf/async/mine.yaml: the docs' defaults line, then the values.
    (repo / "conf/async/mine.yaml").write_text(_quoted(r"defaults: \[.*mine.*\]") + "\ngenerators: 0\n")
    # 3. the docs' one line in ASYNC_MODES (and the module's import).
    line = _quoted(r'"mine": Option\(.*\)')
    init = repo / "scalerl/asynchrony/__init__.py"
    text = init.read_text().replace("from scalerl.asynchrony import pipeline_rl, ppo_off_policy, sync",
                                    "from scalerl.asynchrony import mine, pipeline_rl, ppo_off_policy, sync")
    text, n = re.subn(r"(ASYNC_MODES: dict\[str, Option\] = \{\n)", rf"\1    {line},\n", text)
    assert n == 1 and "import mine," in text
    init.write_text(text)
    # 4. scalerl/train/schedules/<module>.py: the class the option names.
    (repo / f"scalerl/train/schedules/{module}.py").write_text(SCHEDULE.format(cls=cls))
    return repo, sorted(["scalerl/asynchrony/mine.py", "conf/async/mine.yaml", "scalerl/asynchrony/__init__.py",
                         f"scalerl/train/schedules/{module}.py"])


def changed_files(repo) -> list[str]:
    """The files of the copy's package and config groups that differ from the repository's."""
    out = []
    for part in ("scalerl", "conf"):
        for path in (repo / part).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                rel = path.relative_to(repo)
                if not (REPO / rel).is_file() or (REPO / rel).read_bytes() != path.read_bytes():
                    out.append(str(rel))
    return sorted(out)


def sweep_in(repo, out, args, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(repo), "SCALERL_OUTPUT": str(out), "SCALERL_NO_BAR": "1"}
    return subprocess.run([sys.executable, "-m", "scalerl.sweep", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_a_new_async_mode_takes_four_files_and_passes_dry_run(tmp_path):
    repo, files = add_mine(tmp_path)
    assert len(files) == 4 and changed_files(repo) == files  # setup.py, run_plan.py, weights.py: untouched
    proc = sweep_in(repo, tmp_path / "out", ["async=mine", "--dry-run"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
def test_a_new_async_mode_added_as_the_docs_say_trains_one_step_off(tmp_path):
    repo, _ = add_mine(tmp_path)
    args = ["-m", "async=mine,sync", "train.steps=3", "train.eval_every=3", "train.eval_samples=1", "logger=none",
            "train.threads=1", *ANSWERS_ONLY]
    proc = sweep_in(repo, tmp_path / "out", args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (home,) = (tmp_path / "out" / "sweeps").iterdir()

    def staleness(arm: str) -> list:
        (run,) = home.glob(f"async={arm},*")
        rows = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
        assert [r["lag_dropped"] for r in rows] == [0, 0, 0]  # one version old is within mine's lag bound (1)
        return [(r["staleness_max"], r["stale_frac"]) for r in rows]

    # Step 1 trains on the start's batch (version 0, trainer at 0); step s > 1 on the batch version
    # s - 2 generated during step s - 1, with the trainer at s - 1: every token one version old.
    assert staleness("mine") == [(0, 0.0), (1, 1.0), (1, 1.0)]
    assert staleness("sync") == [(0, 0.0), (0, 0.0), (0, 0.0)]


def test_a_new_async_mode_without_schedule_fails_dry_run_with_one_line_naming_async(tmp_path):
    repo, _ = add_mine(tmp_path, schedule=False)
    proc = sweep_in(repo, tmp_path / "out", ["async=mine", "--dry-run"], timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    (why,) = lines
    assert why.startswith("[scalerl] config error: async: option 'mine': MineConfig does not define schedule()"), lines
    assert "nothing was launched" in why, lines
