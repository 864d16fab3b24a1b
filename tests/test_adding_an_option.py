"""The README's "adding an option" recipe is exactly what it takes.

In a copy of the repository, add a loss the way the README says (a module,
a YAML file, one line in ``LOSSES``), then sweep it against CISPO through the
command line and find it on the leaderboard, labelled and hashed as itself.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from helpers import REPO

pytestmark = pytest.mark.slow

TOY_MODULE = '''"""REINFORCE: -A * logp per token, no importance ratio (a toy option for the tests)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.losses.base import LossConfig, masked_mean


@dataclass
class ToyConfig(LossConfig):
    scale: float = 1.0

    def clamp(self) -> str:
        return "none"


def toy_loss(logp, behav_logp, adv, mask, *, cfg: ToyConfig):
    return -cfg.scale * adv[:, None] * logp, {"clip_frac": masked_mean(mask.float() * 0, mask)}
'''
TOY_YAML = """defaults:
  - /schema/loss/toy@_here_
  - _self_
scale: 1.0
"""


def test_a_new_loss_added_as_the_readme_says_trains_and_is_ranked(tmp_path):
    readme = (REPO / "README.md").read_text()
    assert "scalerl/losses/mine.py" in readme and "conf/loss/mine.yaml" in readme and "`LOSSES`" in readme
    repo = tmp_path / "repo"
    for part in ("conf", "scalerl", "sweeps", "hydra_plugins", "analysis"):
        shutil.copytree(REPO / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    # 1. the module, 2. the YAML, 3. one line in the registry dict.
    (repo / "scalerl/losses/toy.py").write_text(TOY_MODULE)
    (repo / "conf/loss/toy.yaml").write_text(TOY_YAML)
    init = repo / "scalerl/losses/__init__.py"
    text = init.read_text()
    text = text.replace("from scalerl.losses import cispo, dapo, grpo, gspo", "from scalerl.losses import cispo, dapo, grpo, gspo, toy")
    text = re.sub(r"(LOSSES: dict\[str, Option\] = \{\n)", r'\1    "toy": Option(toy.ToyConfig, toy.toy_loss),\n', text)
    init.write_text(text)

    env = {**os.environ, "PYTHONPATH": str(repo), "SCALERL_OUTPUT": str(tmp_path / "out"), "SCALERL_NO_BAR": "1"}
    args = ["-m", "loss=toy,cispo", "train.steps=2", "train.eval_every=1", "train.eval_samples=1", "logger=none",
            "task.n_heldout=64"]
    proc = subprocess.run([sys.executable, "-m", "scalerl.sweep", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (home,) = (tmp_path / "out" / "sweeps").iterdir()       # the sweep's home, named from its overrides
    board = pd.read_csv(home / "leaderboard.csv")
    assert set(board["loss"]) == {"toy", "cispo"}
    toy_dir = next(home.glob("loss=toy,*"))
    assert (toy_dir / "config.yaml").read_text().count("name: toy") == 1
    assert "scale: 1.0" in (toy_dir / "config.yaml").read_text()
