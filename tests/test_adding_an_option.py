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
RECIPE = DOCS[DOCS.index("## Adding an option"):DOCS.index("## Adding an async mode")]

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
    tree = DOCS[DOCS.index("```\nscalerl/") + 4:]
    tree = tree[:tree.index("```")]
    entries = map_entries(tree)
    inside = {path for path in entries if path.startswith("scalerl/")}
    assert {"scalerl/core", "scalerl/losses", "scalerl/asynchrony", "scalerl/generation/engines",
            "scalerl/train/loop.py", "scalerl/sweep.py"} <= inside
    gone = [path for path in sorted(entries) if not (REPO / path).exists()]
    assert not gone, gone
    # ... and the map leaves out no package: every folder of scalerl/ and of scalerl/generation/.
    packages = {str(p.parent.relative_to(REPO)) for p in (REPO / "scalerl").glob("*/__init__.py")}
    packages |= {str(p.parent.relative_to(REPO)) for p in (REPO / "scalerl" / "generation").glob("*/__init__.py")}
    assert packages <= inside, sorted(packages - inside)


def map_entries(tree: str) -> set[str]:
    """Every path the folder map names, resolved against the folder of its line: an entry is a
    line indented 0, 2 or 4 spaces that starts with folders (``name/``) or one module (indent 2
    nests under the last indent-0 folder, 4 under the last indent-2 one); the description after
    it, and the deeper-indented lines that continue it, name files of that folder."""
    parents = {0: ""}
    entries: set[str] = set()
    here = ""
    for line in tree.splitlines():
        indent = len(line) - len(line.lstrip())
        words = line.split()
        heads = []
        if indent in (0, 2, 4):
            for w in words:  # sibling folders ("losses/ aggregation/ ..."), or one module
                if not re.fullmatch(r"[a-z_]+(?:/|\.py)", w) or (heads and w.endswith(".py")):
                    break
                heads.append(w)
                if w.endswith(".py"):
                    break
        if heads:
            base = parents[indent]
            for w in heads:
                entries.add(base + w.rstrip("/"))
            last = base + heads[-1]
            here = last if last.endswith("/") else base
            parents[indent + 2] = last if last.endswith("/") else base
            words = words[len(heads):]
        for w in words:
            name = re.fullmatch(r"\(?([a-z_]+\.py)[),:;]*", w)
            if name:
                entries.add(here + name[1])
    return entries


def test_map_entries_resolves_nesting_and_continuations():
    tree = ("a/\n  b/  x.py one\n      (y.py), z\n    c/  d.py\n  e.py  top\n  g/ h/  two\nf/\n")
    assert map_entries(tree) == {"a", "a/b", "a/b/x.py", "a/b/y.py", "a/b/c", "a/b/c/d.py", "a/e.py", "a/g", "a/h",
                                 "f"}


def test_the_axis_table_names_each_axis_group_package_and_registry():
    from scalerl.registry import AXES

    rows = re.findall(r"^\| `conf/(\w+)/` \| `scalerl/(\w+)/` \| `(\w+)` \|$", DOCS, re.M)
    assert {group for group, _, _ in rows} == set(AXES)
    for group, package, registry in rows:
        module = importlib.import_module(f"scalerl.{package}")
        assert getattr(module, registry) is AXES[group], (group, package, registry)
        assert set(AXES[group]) == {p.stem for p in (REPO / "conf" / group).glob("*.yaml")}, group
