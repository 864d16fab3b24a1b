"""The docs' "Adding an option" recipe (docs/architecture.md) is exactly what it takes.

In a copy of the repository, add the loss ``mine`` the way the docs say (a module whose config
defines ``clamp()``, a YAML file written as the docs write it, the registry line the docs give),
then sweep it against CISPO through the command line and find it on the leaderboard, labelled
and hashed as itself. And a loss that skips ``clamp()`` fails ``--dry-run`` with one line
naming ``loss``, before anything launches.
"""
from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from helpers import ANSWERS_ONLY, REPO

DOCS = (REPO / "docs" / "architecture.md").read_text()
RECIPE = DOCS[DOCS.index("## Adding an option"):]

CLAMP = '''
    def clamp(self) -> str:
        return "none"
'''
MODULE = '''"""REINFORCE: -A * logp per token, no importance ratio (a toy option for the tests)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.losses.base import LossConfig, masked_mean


@dataclass
class MineConfig(LossConfig):
    scale: float = 1.0
{clamp}

def mine_loss(logp, behav_logp, adv, mask, *, cfg: MineConfig):
    return -cfg.scale * adv[:, None] * logp, {{"clip_frac": masked_mean(mask.float() * 0, mask)}}
'''


def _quoted(pattern: str) -> str:
    """The one backquoted snippet of the recipe that matches ``pattern``."""
    (hit,) = [s for s in re.findall(r"`([^`]+)`", RECIPE) if re.fullmatch(pattern, s)]
    return hit


def add_mine(tmp_path, clamp: bool):
    """A copy of the repository with ``loss=mine`` added by the recipe's three steps."""
    assert "scalerl/losses/mine.py" in RECIPE and "clamp(self) -> str" in RECIPE and "`LOSSES`" in RECIPE
    repo = tmp_path / "repo"
    for part in ("conf", "scalerl", "sweeps", "hydra_plugins", "analysis"):
        shutil.copytree(REPO / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    # 1. scalerl/losses/mine.py: MineConfig(LossConfig) with its settings and clamp(), and mine_loss.
    (repo / "scalerl/losses/mine.py").write_text(MODULE.format(clamp=CLAMP if clamp else ""))
    # 2. conf/loss/mine.yaml: the docs' defaults line, then the values.
    (repo / "conf/loss/mine.yaml").write_text(_quoted(r"defaults: \[.*mine.*\]") + "\nscale: 1.0\n")
    # 3. the docs' one line in LOSSES (and the module's import).
    line = _quoted(r'"mine": Option\(.*\)')
    init = repo / "scalerl/losses/__init__.py"
    text = init.read_text().replace("from scalerl.losses import cispo, dapo, grpo, gspo",
                                    "from scalerl.losses import cispo, dapo, grpo, gspo, mine")
    text, n = re.subn(r"(LOSSES: dict\[str, Option\] = \{\n)", rf"\1    {line},\n", text)
    assert n == 1
    init.write_text(text)
    return repo


def sweep_in(repo, out, args, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(repo), "SCALERL_OUTPUT": str(out), "SCALERL_NO_BAR": "1"}
    return subprocess.run([sys.executable, "-m", "scalerl.sweep", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_a_new_loss_added_as_the_docs_say_trains_and_is_ranked(tmp_path):
    repo = add_mine(tmp_path, clamp=True)
    # The answers-only warm start, the one the suite shares. Not task.n_heldout: the held-out split
    # is part of the warm start's key, so a smaller one made each run train its own SFT first.
    args = ["-m", "loss=mine,cispo", "train.steps=2", "train.eval_every=1", "train.eval_samples=1", "logger=none",
            *ANSWERS_ONLY]
    proc = sweep_in(repo, tmp_path / "out", args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (home,) = (tmp_path / "out" / "sweeps").iterdir()       # the sweep's home, named from its overrides
    board = pd.read_csv(home / "leaderboard.csv")
    assert set(board["loss"]) == {"mine", "cispo"}
    assert set(board.loc[board["loss"] == "mine", "loss_clamp"]) == {"none"}
    mine_dir = next(home.glob("loss=mine,*"))
    assert (mine_dir / "config.yaml").read_text().count("name: mine") == 1
    assert "scale: 1.0" in (mine_dir / "config.yaml").read_text()


def test_a_new_loss_without_clamp_fails_dry_run_with_one_line_naming_loss(tmp_path):
    repo = add_mine(tmp_path, clamp=False)
    proc = sweep_in(repo, tmp_path / "out", ["loss=mine", "--dry-run"], timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    (why,) = lines                                                 # one line says what is wrong, naming `loss`
    assert why.startswith("[scalerl] config error: loss: option 'mine': MineConfig does not define clamp()"), lines
    assert "nothing was launched" in why, lines
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("config.yaml"))


def test_every_path_the_architecture_page_names_exists():
    # The page's folder map and its walk-through name real folders and files; `mine` is the
    # walk-through's new option, `<...>` and NAME are placeholders.
    named = set(re.findall(r"`((?:scalerl|conf|tests|analysis|sweeps|docs|hydra_plugins|benchmarks)/[^`\s]*)`", DOCS))
    assert len(named) >= 10
    missing = [p for p in sorted(named) if "mine" not in p and "<" not in p and "NAME" not in p
               and not (REPO / p).exists()]
    assert not missing, missing
    tree = DOCS[DOCS.index("```\nscalerl/"):]
    tree = tree[:tree.index("```", 4)]
    listed = re.findall(r"(?:^|\s)([a-z_]+(?:/|\.py))(?=\s)", tree)
    inside = [n for n in listed if n not in ("scalerl/", "hydra_plugins/", "analysis/", "conf/", "sweeps/", "docs/",
                                             "benchmarks/", "tests/")]
    assert {"core/", "losses/", "asynchrony/", "generation/", "train/", "sweep.py", "loop.py"} <= set(inside)
    gone = [n for n in inside if not any((base / n.rstrip("/")).exists() for base in
                                        (REPO / "scalerl", REPO / "scalerl" / "train", REPO / "scalerl" / "generation",
                                         REPO / "scalerl" / "devtools"))]
    assert not gone, gone


def test_the_axis_table_names_each_axis_group_package_and_registry():
    from scalerl.registry import AXES

    rows = re.findall(r"^\| `conf/(\w+)/` \| `scalerl/(\w+)/` \| `(\w+)` \|$", DOCS, re.M)
    assert {group for group, _, _ in rows} == set(AXES)
    for group, package, registry in rows:
        module = importlib.import_module(f"scalerl.{package}")
        assert getattr(module, registry) is AXES[group], (group, package, registry)
        assert set(AXES[group]) == {p.stem for p in (REPO / "conf" / group).glob("*.yaml")}, group
