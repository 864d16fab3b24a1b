"""Bad config values: caught before anything runs, named by key, printed as one line (no
Hydra traceback), exit code 2, and no run directory left behind; for one run and a sweep."""
from __future__ import annotations

import pytest
from helpers import cli as run_cli  # cli: the entry point in a forked process, without re-importing scalerl

from scalerl.config import ConfigError, compose, validate

FAST = ["train.steps=1", "logger=none"]


@pytest.mark.parametrize("override,key", [
    ("model.num_heads=0", "model.num_heads"),  # was a ZeroDivisionError reported under `overrides`
    ("model.hidden_size=0", "model.hidden_size"),
    ("model.num_heads=32", "model.num_heads"),  # head_dim 3: rotary embeddings need pairs
    ("train.adam_eps=-1", "train.adam_eps"),
    ("train.weight_decay=-1", "train.weight_decay"),
    ("train.lr=inf", "train.lr"),
    ("loss.eps_max=nan", "loss.eps_max"),
    ("train.gpus=-1", "train.gpus"),
    ("train.mismatch_groups=-1", "train.mismatch_groups"),
    ("+train.stepz=10", "train.stepz"),  # a typo, accepted and ignored before
    ("+loss.eps=0.2", "loss.eps"),
    ("model.warmstart.threads=0", "model.warmstart.threads"),
])
def test_values_that_used_to_fail_late_or_never_fail_validation(override, key):
    with pytest.raises(ConfigError) as e:
        validate(compose([override]))
    assert e.value.key == key


def test_a_typo_suggests_the_setting():
    with pytest.raises(ConfigError, match=r"did you mean `train.steps=...`"):
        validate(compose(["+train.stepz=10"]))


@pytest.mark.parametrize("path,why", [("/nonexistent", "does not exist"), ("/etc/passwd", "is a file"),
                                      ("/", "no config.json")])
def test_model_path_is_checked_at_validation(path, why):
    with pytest.raises(ConfigError, match=why) as e:
        validate(compose(["model=hf", f"model.path={path}"]))
    assert e.value.key == "model.path"


def one_line_error(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr, proc.stderr
    return lines


@pytest.mark.parametrize("args,key", [
    (["train.adam_eps=-1"], "train.adam_eps"),  # fails in validation, after Hydra made the run directory
    (["+train.stepz=10"], "train.stepz"),
    (["train.steps=abc"], "train.steps"),  # fails while Hydra composes
    (["loss=foo"], "loss"),
    (["model=hf", "model.path=/etc/passwd"], "model.path"),
])
def test_a_single_run_prints_the_message_alone_and_leaves_no_directory(tmp_path, args, key):
    lines = one_line_error(run_cli([*FAST, *args], tmp_path, check=False))
    assert len(lines) == 1 and lines[0].startswith(f"[scalerl] config error: {key}:"), lines
    assert not tmp_path.exists() or not any(tmp_path.iterdir()), sorted(tmp_path.rglob("*"))


@pytest.mark.parametrize("args,key", [
    (["model.num_heads=0"], "model.num_heads"),
    (["hydra.launcher.threads_per_arm=0"], "hydra.launcher.threads_per_arm"),  # crashed the arms at run time
    (["model=hf", "model.path=/nonexistent", "--dry-run"], "model.path"),  # a dry run validates every arm
])
def test_a_sweep_prints_the_messages_alone_and_launches_nothing(tmp_path, args, key):
    lines = one_line_error(run_cli(["-m", "loss=cispo,dapo", *FAST, *args], tmp_path, check=False))
    assert lines[-1].startswith(f"[scalerl] config error: {key}:"), lines
    assert not tmp_path.exists() or not any(tmp_path.iterdir()), sorted(tmp_path.rglob("*"))
