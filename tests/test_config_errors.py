"""Errors that came late or named the wrong key (issue 29 point 9).

Each bad input is one line that names the key to change, before anything runs; at a01f570
these were accepted, named another key, or failed a minute in with a run directory left.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO

from scalerl.config import ConfigError, as_config_error, check_environment, compose, validate
from scalerl.launch.studies import read_spec


def error_of(*overrides: str) -> ConfigError:
    try:
        validate(compose(list(overrides)))
    except ConfigError as e:
        return e
    except Exception as e:          # composition: Hydra's errors, as the command line turns them
        return as_config_error(e)
    raise AssertionError(f"{overrides} was accepted")


@pytest.mark.parametrize("override,key,says", [
    ("train.stepz=10", "train.stepz", "did you mean `train.steps=...`?"),
    ("recipe=nonexistent", "recipe", "unknown option 'nonexistent'"),
    ("task.mix={add2:1}", "task.mix.add2", "did you mean `task.mix.add3`?"),
    ("seed=-1", "seed", "must be an integer in [0, 2^32)"),
    ("task.n_train=1", "task.n_train", "must be >= batch.prompts"),
    ("study=../../..", "study", "must be a plain name"),
    ("study=a/b", "study", "must be a plain name"),
])
def test_bad_values_name_their_key(override, key, says):
    err = error_of(override)
    assert err.key == key and says in str(err), str(err)
    assert "not in struct" not in str(err) and "\n" not in str(err)


def test_eval_every_above_steps_is_allowed_and_documented():
    validate(compose(["train.steps=4", "train.eval_every=10"]))     # evals at step 0 and step 4 only
    import inspect

    from scalerl.config.schema import TrainConfig
    assert "Above train.steps is allowed" in inspect.getsource(TrainConfig)


def test_cuda_without_a_device_and_vllm_without_vllm_fail_in_validation(monkeypatch):
    import scalerl.config as config

    monkeypatch.setattr(config, "cuda_devices", lambda: 0)
    with pytest.raises(ConfigError, match="train.device: cuda was asked for"):
        check_environment(validate(compose(["train.device=cuda"])))
    monkeypatch.setattr(config.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="generation: vllm is not installed"):
        check_environment(validate(compose(["generation=vllm"])))


def test_a_study_file_with_bad_yaml_or_placement_keys_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid:\n  loss: [cispo, dapo\n  x: : :\n")
    with pytest.raises(ConfigError, match=r"line 3 is not valid YAML"):
        read_spec(bad)
    placed = tmp_path / "placed.yaml"
    placed.write_text("grid:\n  loss: [cispo]\n  hydra.sweep.dir: [/tmp/anywhere]\n")
    with pytest.raises(ConfigError, match="sets hydra.sweep.dir: a study cannot choose where its outputs go"):
        read_spec(placed)


@pytest.mark.slow
def test_cuda_on_a_cpu_machine_leaves_no_run_directory(tmp_path):
    env = {**os.environ, "SCALERL_OUTPUT": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "scalerl.sweep", "train.device=cuda", "train.steps=2"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("[scalerl] config error: train.device"), proc.stderr
    assert not any(p.is_dir() for p in (tmp_path / "runs").glob("*")), list(tmp_path.rglob("*"))
