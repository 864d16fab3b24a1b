"""The command line a researcher meets: each sweep in its own home, finished runs found by
config hash, one bootstrap for the sweep's end and the CLI, only launchers with scalerl's
failure handling, a fast --help that lists what matters, and completion for sweep=."""
from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import REPO, cli as run_cli  # cli: the entry point in a forked process, without re-importing scalerl

import scalerl.loggers.base
import scalerl.loggers.wandb_logger
from analysis.models import sigmoid
from scalerl.config import compose
from scalerl.launch import rundir
from scalerl.launch.app import hydra_argv
from scalerl.launch.sweep_summary import write_leaderboard
from scalerl.loggers.wandb_logger import WandbConfig, WandbLogger

# What this file tests is imported inside each test, so that on code without it each test fails alone.

C = np.concatenate([[0.0], np.linspace(6e10, 2.3e12, 40)])


def fake_run(run_dir: Path, *, A=0.8, seed=0, config_hash="c0", loss="cispo", status="done") -> Path:
    """A finished run directory as the trainer leaves it (metrics.jsonl, config.yaml, summary.json)."""
    run_dir.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    reward = sigmoid(C, A, 1.5, 3e12, 0.2) + np.r_[0.0, rng.normal(0, 0.01, C.size - 1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": 25 * i, "compute": c, "pass_rate": r}) + "\n"
                                                   for i, (c, r) in enumerate(zip(C, reward))))
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"loss": {"name": loss}, "seed": seed, "train": {"steps": 1000}}))
    (run_dir / "summary.json").write_text(json.dumps({
        "status": status, "run_name": run_dir.name, "config_hash": config_hash, "arm_hash": f"arm-{loss}",
        "axes": {"loss": loss}, "seed": seed, "study": "earlier"}))
    return run_dir


# ---------------------------------------------------------------------------------- sweep homes
def test_a_sweep_without_study_is_named_from_its_own_overrides():
    assert rundir.default_study([], ["loss=cispo,dapo,gspo"]) == "loss=cispo,dapo,gspo"
    # bookkeeping does not count, the order does not matter, study files come first
    assert (rundir.default_study(["loss"], ["train.steps=20", "logger=none", "hydra/launcher=slurm"])
            == rundir.default_study(["loss"], ["hydra.launcher.partition=gpu", "train.steps=20"]) == "loss+train.steps=20")
    assert rundir.default_study([], []) == "default"
    long = rundir.default_study([], [f"train.lr={i}e-4,{i + 1}e-4" for i in range(20)])
    assert len(long) <= 80 and long != rundir.default_study([], [f"train.lr={i}e-4,{i + 2}e-4" for i in range(20)])


def test_two_different_sweeps_get_two_homes(tmp_path):
    quick = run_cli(["-m", "loss=cispo,dapo,gspo", "--dry-run"], tmp_path)
    short = run_cli(["-m", "loss=cispo,dapo,gspo", "train.steps=20", "--dry-run"], tmp_path)
    assert str(tmp_path / "sweeps" / "loss=cispo,dapo,gspo") in quick.stdout          # was sweeps/default for both
    assert str(tmp_path / "sweeps" / "loss=cispo,dapo,gspo+train.steps=20") in short.stdout


# ---------------------------------------------------------------------- reuse by config hash
def test_finished_runs_are_found_by_config_hash_and_linked_into_a_new_study(tmp_path):
    study = tmp_path / "three.yaml"
    study.write_text(yaml.safe_dump({"grid": {"loss": ["cispo", "dapo", "gspo"]}}))
    hashes = {loss: rundir.config_hash(compose([f"loss={loss}", "train.steps=7"])) for loss in ("cispo", "dapo")}
    for i, (loss, h) in enumerate(hashes.items()):          # finished earlier, in another study, under other tags
        fake_run(tmp_path / "out" / "sweeps" / "earlier" / f"quick-{h}", A=0.8 - 0.01 * i, seed=i, config_hash=h, loss=loss)
    args = ["-m", f"sweep={study}", "train.steps=7", "logger=none"]
    status = run_cli([*args, "--status"], tmp_path / "out").stdout
    assert status.count("done (reused)") == 2 and status.count("pending") == 1    # was: 3 pending

    study.write_text(yaml.safe_dump({"grid": {"loss": ["cispo", "dapo"]}}))       # only finished arms: train nothing
    launched = run_cli(args, tmp_path / "out").stdout
    assert "launching 0 arm(s); 2 already done" in launched and "reusing 2 finished run(s)" in launched
    home = tmp_path / "out" / "sweeps" / "three+train.steps=7"
    links = sorted(p for p in home.iterdir() if p.is_symlink())
    assert sorted(p.resolve().name for p in links) == sorted(f"quick-{h}" for h in hashes.values())
    board = pd.read_csv(home / "leaderboard.csv")
    assert sorted(board["loss"]) == ["cispo", "dapo"]
    fresh = run_cli([*args, "--status", "--fresh"], tmp_path / "out").stdout      # --fresh would train them here
    assert fresh.count("pending") == 2 and "reused" not in fresh


# --------------------------------------------------------------- one bootstrap, and what next
def test_the_end_of_a_sweep_and_the_cli_give_the_same_intervals(tmp_path, capsys):
    from analysis.cli import main as analysis_main

    sweep = tmp_path / "sweep"
    runs = [fake_run(sweep / f"loss={loss}-h{i}", A=A, seed=i, config_hash=f"h{i}", loss=loss)
            for i, (loss, A) in enumerate((("cispo", 0.80), ("dapo", 0.79)))]
    n_boot = yaml.safe_load((REPO / "conf" / "hydra" / "sweeper" / "scalerl.yaml").read_text())["n_boot"]
    write_leaderboard(sweep, runs, n_boot=n_boot)
    printed = capsys.readouterr().out
    assert analysis_main(["fit", str(sweep), "--out", str(tmp_path / "cli"), "--quiet", "--plots", "none"]) == 0
    end, cli = pd.read_csv(sweep / "leaderboard.csv"), pd.read_csv(tmp_path / "cli" / "leaderboard.csv")
    cols = ["run", "rank", "B_lo", "B_hi", "C_mid_lo", "C_mid_hi"]
    pd.testing.assert_frame_equal(end[cols], cli[cols])                       # was: 100 vs 500 draws
    assert f"results: {sweep}/leaderboard.csv" in printed
    assert "are A_unidentified" in printed and "add seeds" in printed and "train longer" in printed


# ------------------------------------------------------------------------------ command line
def test_only_launchers_with_scalerl_failure_handling_are_offered(tmp_path):
    from scalerl.launch.app import complete

    bad = run_cli(["-m", "loss=cispo", "hydra/launcher=submitit_slurm", "--dry-run"], tmp_path, check=False)
    assert bad.returncode != 0 and "bypasses scalerl's failure handling" in bad.stdout + bad.stderr
    assert "['local', 'slurm', 'submitit_local']" in bad.stdout + bad.stderr
    with pytest.raises(Exception, match="bypasses scalerl's sweeper"):
        hydra_argv(["-m", "loss=cispo", "hydra/sweeper=basic"])
    assert complete("scalerl-sweep -m hydra/launcher=") == [f"hydra/launcher={n}" for n in ("local", "slurm", "submitit_local")]
    assert hydra_argv(["-m", "--fresh"]) == ["-m", "hydra.sweeper.reuse=false"]


def test_hydra_reads_its_mode_from_the_overrides_without_composing_the_config(monkeypatch):
    from hydra._internal.hydra import Hydra

    from scalerl.launch.app import mode_from_overrides

    composed, calls = Hydra.get_mode, []
    monkeypatch.setattr(Hydra, "compose_config", lambda *a, **k: calls.append(k["overrides"]))
    hydra = object.__new__(Hydra)
    with mode_from_overrides(["-m", "loss=dapo", "hydra.sweeper.action=dry-run"]):
        assert Hydra.get_mode(hydra, "config", ["loss=dapo"]) is None  # what Hydra's gives when nothing sets it
    assert calls == [] and Hydra.get_mode is composed
    # where an override or another config tree may set hydra.mode, Hydra composes to read it, as before
    for argv in (["hydra.mode=RUN"], ["+hydra.mode=MULTIRUN"], ["--config-dir", "/x"], ["--config-dir=/x"],
                 ["hydra.searchpath=[file:///x]"]):
        with mode_from_overrides(argv):
            Hydra.get_mode(hydra, "config", argv)
    assert len(calls) == 5


def test_help_lists_what_a_user_needs_and_composes_nothing():
    from scalerl.launch.cli_help import help_text

    text = help_text()
    for needed in ("--dry-run", "--status", "--fresh", "study=NAME", "sweep=NAME", "scalerl-sweep -sc install=bash",
                   "hydra/launcher", "train.steps=300", "loss         cispo*, dapo, grpo, gspo"):
        assert needed in text, needed
    for name in (p.stem for p in (REPO / "sweeps").glob("*.yaml")):
        assert f"\n  {name} " in text, name
    assert "schema/" not in text and "submitit_slurm" not in text
    code = ("import sys; from scalerl.sweep import main; main(['--help']); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf', 'torch', 'transformers'}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout[-500:] + proc.stderr


def test_bash_completion_of_the_installed_command_completes_studies(tmp_path):
    bin_dir = tmp_path / "bin"                 # stands in for pip's `scalerl-sweep` script
    bin_dir.mkdir()
    (bin_dir / "scalerl-sweep").write_text(f"#!/bin/sh\nexec {sys.executable} -m scalerl.sweep \"$@\"\n")
    (bin_dir / "scalerl-sweep").chmod(0o755)
    script = textwrap.dedent("""
        eval "$(scalerl-sweep -sc install=bash)"
        complete -p scalerl-sweep
        COMP_LINE="scalerl-sweep -m sweep=lo"; COMP_POINT=${#COMP_LINE}; COMP_CWORD=2
        hydra_bash_completion; echo "REPLY ${COMPREPLY[*]}"
    """)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert "hydra_bash_completion scalerl-sweep" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "REPLY sweep=loo sweep=loss"


# ----------------------------------------------------------------------------------- W&B
def test_namespaces_and_tags_doctests_hold():
    from scalerl.loggers.base import namespaced

    for module in (scalerl.loggers.base, scalerl.loggers.wandb_logger):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
    # an eval row's training averages are train/ metrics averaged: not logged a second time
    record = namespaced("eval", {"step": 5, "compute": 1.0, "pass_rate": 0.5, "loss": 0.1, "entropy": 0.2})
    assert set(record) == {"axis/step", "axis/compute", "eval/pass_rate"}


def test_the_per_run_sync_hint_names_a_path_that_exists(tmp_path, capsys, monkeypatch):
    import glob

    monkeypatch.delenv("WANDB_MODE", raising=False)
    run_dir = tmp_path / "sweep" / "run"
    run_dir.mkdir(parents=True)
    logger = WandbLogger(WandbConfig(name="wandb", mode="offline"))
    logger.start(run_dir, "run", "group", {"axes": {"loss": "cispo"}, "study": "s"})
    logger.log({"eval/pass_rate": 0.2}, 0)
    logger.finish()
    (command,) = [line.split("upload with: ", 1)[1] for line in capsys.readouterr().out.splitlines() if "upload with" in line]
    assert command.startswith("wandb sync ")
    assert glob.glob(command.split(" ", 2)[2]) == [str(p) for p in (run_dir / "wandb").glob("offline-run-*")] != []
    from scalerl.launch.sweep_summary import sync_hint  # the sweep's hint covers the same folders

    hint = sync_hint(run_dir.parent, [run_dir])
    assert glob.glob(hint.split(" ", 2)[2]) == glob.glob(command.split(" ", 2)[2])
