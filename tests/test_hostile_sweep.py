"""What a hostile new user gives ``python -m scalerl.sweep``: each input is refused with one line that
names the key or file (exit 2) before anything is created on disk, or works; the dry run's memory
and threads estimate (scalerl/config/resources.py) against a stated machine."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from scalerl.config import compose, validate
from scalerl.config.compose import as_config_error
from scalerl.config.resources import GiB, Machine, Shape, check_resources, estimate, model_shape
from scalerl.core.bounded import BoundedReadError, read_bounded
from scalerl.core.errors import ConfigError
from scalerl.launch.precheck import check_command_line
from scalerl.launch.studies import read_spec
from tests.helpers import REPO, run_cli

D = ["--dry-run", "logger=none"]
QWEN2_05B = dict(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=32_768)
MACHINE_24G = Machine(24 * GiB, 2, "a 24 GiB, 2-core machine")

STUDIES = {  # study file text -> the entry its one line must name
    "grid: [loss, filter]\n": "`grid` must be a mapping",
    "arms: [loss=dapo]\n": "`arms[0]` must be a mapping",
    'arms: [{overrides: "loss=dapo"}]\n': "`arms[0].overrides` must be a list",
    "grid: {+hydra.sweep.dir: [a, b]}\n": "sets hydra.sweep.dir",
    "grid: {loss: []}\n": "`grid.loss` is an empty list",
}

CASES = {  # name -> (arguments, environment, what the one line must say)
    "out_root under /proc": (["logger=none", "train.steps=2", "out_root=/proc/x"], {}, "out_root: '/proc/x'"),
    "out_root under /proc, dry run": ([*D, "out_root=/proc/x"], {}, "out_root: '/proc/x'"),
    "hydra.run.dir under /proc": (["logger=none", "train.steps=2", "hydra.run.dir=/proc/x"], {}, "hydra.run.dir: '/proc/x'"),
    "cache_dir under /proc": ([*D, "cache_dir=/proc/nope"], {}, "cache_dir: '/proc/nope'"),
    "generator nodes outside SLURM": ([*D, "async.generators=3", "async.generator_nodes=2"], {}, "async.generator_nodes:"),
    "SCALERL_NUM_THREADS=abc": (D, {"SCALERL_NUM_THREADS": "abc"}, "SCALERL_NUM_THREADS:"),
    "a list of options": ([*D, "loss=[cispo,dapo]"], {}, "loss: takes one option"),
    "a bogus sweeper action": (["-m", "logger=none", "hydra.sweeper.action=bogus"], {}, "hydra.sweeper.action: must be one of"),
    "an empty option": ([*D, "loss="], {}, "loss: no option given"),
    "a study without -m": (["logger=none", "sweep=loss"], {}, "sweep: a study runs several arms and needs -m"),
    "poll_s=-1": ([*D, "hydra.sweeper.early_stop=true", "hydra.sweeper.poll_s=-1"], {}, "hydra.sweeper.poll_s: must be"),
    "poll_s=nan": ([*D, "hydra.sweeper.poll_s=nan"], {}, "hydra.sweeper.poll_s: must be"),
    "48 layers x 8192 hidden": ([*D, "model.num_layers=48", "model.hidden_size=8192", "model.num_heads=64",
                                 "model.intermediate_size=28672"], {}, "model.hidden_size: one arm needs about"),
    "train.steps past int64": ([*D, "train.steps=99999999999999999999"], {}, "train.steps: 99999999999999999999 does not fit"),
    "1000 generators": ([*D, "async.generators=1000"], {}, "async.generators: one arm needs"),
    "100000 generations": ([*D, "batch.generations=100000"], {}, "batch.generations: one arm needs"),
    "1000 threads per arm": ([*D, "hydra.launcher.threads_per_arm=1000"], {}, "hydra.launcher.threads_per_arm: 1000"),
    "1000 torch threads": ([*D, "train.threads=1000"], {}, "train.threads: 1000"),
}


def _one_line_refusal(proc, says: str, out_root) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("[scalerl] config error: ") and says in lines[0], proc.stderr[-2000:]
    assert not out_root.exists(), sorted(out_root.rglob("*"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_value_is_one_line_naming_its_key(tmp_path, name):
    args, env, says = CASES[name]
    out_root = tmp_path / "out"
    proc = run_cli(args, out_root, extra_env=env, check=False, timeout=120)
    _one_line_refusal(proc, says, out_root)


@pytest.mark.parametrize("text", sorted(STUDIES))
def test_a_misshapen_study_is_one_line_naming_the_entry(tmp_path, text):
    study = tmp_path / "s.yaml"
    study.write_text(text)
    out_root = tmp_path / "out"
    proc = run_cli(["-m", *D, f"sweep={study}"], out_root, check=False, timeout=120)
    _one_line_refusal(proc, f"sweep: study file '{study}'", out_root)
    assert STUDIES[text] in proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_study_that_is_a_fifo_or_a_device_is_refused_unread(tmp_path, kind):
    study = tmp_path / "f.yaml"
    os.mkfifo(study) if kind == "fifo" else study.symlink_to("/dev/zero")
    out_root = tmp_path / "out"
    proc = run_cli(["-m", *D, f"sweep={study}"], out_root, check=False, timeout=60)  # a hang fails by timeout
    _one_line_refusal(proc, "FIFO" if kind == "fifo" else "a device", out_root)
    with pytest.raises(BoundedReadError):
        read_bounded(study, 1 << 20)


def test_slurm_without_slurm_is_refused_before_submitting(tmp_path):  # a 50-line traceback before
    out_root = tmp_path / "out"
    # A unit test's PATH holds no SLURM client, even where SLURM is installed (tests/conftest.py).
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    assert not any(os.path.exists(os.path.join(d, "sbatch")) for d in env["PATH"].split(os.pathsep))
    proc = run_cli(["-m", "logger=none", "hydra/launcher=slurm"], out_root, extra_env=env, check=False, timeout=120)
    _one_line_refusal(proc, "hydra/launcher: slurm submits with sbatch", out_root)
    # a dry run validates the arms (a laptop checks a cluster sweep) and says the launch would be refused
    dry = run_cli([*D, "hydra/launcher=slurm"], out_root, extra_env=env, timeout=120)
    assert "would be refused here" in dry.stderr and "pending" in dry.stdout


def test_every_invalid_arm_is_one_line_that_repeats_the_reason(tmp_path):
    # Two arms, the same bad value: one line, with the reason, the key and the count (was three lines,
    # the last "2 of 2 arms are invalid" without the reason).
    proc = run_cli(["-m", *D, "loss=cispo,dapo", "batch.generations=1"], tmp_path / "out", check=False, timeout=120)
    _one_line_refusal(proc, "batch.generations: must be >= 2", tmp_path / "out")
    assert "2 of 2 arms invalid, nothing was launched" in proc.stderr


def test_a_huge_legal_value_is_warned_with_its_cost(tmp_path):
    proc = run_cli([*D, "model.warmstart.max_steps=1000000000"], tmp_path / "out", timeout=120)
    # 1e9 steps x 6 FLOPs x 0.2M parameters x 128 sequences x 256 tokens: about 6e19 FLOPs
    assert "[scalerl] warning: model.warmstart.max_steps=1000000000:" in proc.stderr and "e+19 FLOPs" in proc.stderr
    assert "[scalerl] resources: about" in proc.stdout and "target this machine" in proc.stdout


def test_help_into_a_closed_pipe_exits_quietly():
    cmd = f"{sys.executable} -m scalerl.sweep --help | head -1"
    proc = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.startswith("scalerl") and proc.stderr == "", proc.stderr


# ---------------------------------------------------------------- in process: the estimate and the checks
def _hf(tmp_path, **shape):
    (tmp_path / "config.json").write_text(json.dumps({**QWEN2_05B, **shape}))
    return ["model=hf", f"model.path={tmp_path}", "logger=none"]


def test_qwen2_05b_shape_has_its_parameter_count(tmp_path):
    shape = model_shape(validate(compose(_hf(tmp_path))).model)
    # per layer: q, o 896^2 each; k, v 896 x 128 (2 of 14 heads); gate, up, down 896 x 4864; 2 norms of 896
    #   = 1,605,632 + 229,376 + 13,074,432 + 1,792 = 14,911,232; x 24 = 357,869,568
    # + tied embedding 151,936 x 896 = 136,134,656 + final norm 896 -> 494,005,120 (HF's 494,032,768 adds q/k/v biases)
    assert shape == Shape(151_936, 896, 24, 14, 2, 4864, 32_768, tied=True)
    assert shape.parameters() == 494_005_120


def test_one_step_of_the_05b_shape_fits_24_gib_and_48_x_8192_does_not(tmp_path):
    small = validate(compose([*_hf(tmp_path), "batch.prompts=2", "batch.generations=4", "batch.minibatches=1",
                              "length.max_new_tokens=512"]))
    summary, _ = check_resources(small, machine=MACHINE_24G)
    est = estimate(small, model_shape(small.model))
    # fp32 weights and gradients 4 B each, AdamW's moments 8 B plus its 4 B temporary: 20 B a parameter
    assert (est.weights, est.gradients, est.optimizer) == (4 * 494_005_120, 4 * 494_005_120, 12 * 494_005_120)
    assert est.tokens_per_microbatch % 8 == 0                       # 2 prompts x 4 completions, one minibatch
    assert 9.7e9 < est.total < 24 * GiB and "a 24 GiB, 2-core machine" in summary   # measured peak 9.7 GB
    big = validate(compose(["logger=none", "model.num_layers=48", "model.hidden_size=8192", "model.num_heads=64",
                            "model.intermediate_size=28672"]))
    with pytest.raises(ConfigError) as e:
        check_resources(big, machine=MACHINE_24G)
    assert e.value.key == "model.hidden_size" and "a 24 GiB, 2-core machine" in str(e.value)


def test_threads_beyond_the_cores_are_warned_not_refused():
    two_cores = Machine(64 * GiB, 2, "2 cores")
    c = validate(compose(["logger=none", "async.generators=3"]))
    _, warnings = check_resources(c, {"threads_per_arm": 1}, machine=two_cores)
    assert any("runs 4 threads" in w and "0.5x" in w for w in warnings)   # the trainer's one + 3 generators on 2 cores
    _, warnings = check_resources(validate(compose(["logger=none"])), {"threads_per_arm": 2}, machine=two_cores)
    assert warnings == []          # 2 threads split between the trainer and its one generator
    _, warnings = check_resources(validate(compose(["logger=none", "train.threads=16"])), machine=two_cores)
    assert any("runs 17 threads" in w for w in warnings)                  # 8 a core: still legal
    with pytest.raises(ConfigError) as e:
        check_resources(validate(compose(["logger=none", "train.threads=17"])), machine=two_cores)
    assert e.value.key == "train.threads" and "at most 16" in str(e.value)


@pytest.mark.parametrize("args, key", [
    (["-m", "logger=none", "sweep=loss"], None),           # a study with -m: fine
    (["logger=none", "sweep=null"], None),                  # no study: fine
    (["logger=none", "sweep=loss"], "sweep"),
    (["out_root=/proc/x"], "out_root"),
])
def test_check_command_line(args, key):
    if key is None:
        check_command_line(args, env={})
    else:
        with pytest.raises(ConfigError) as e:
            check_command_line(args, env={})
        assert e.value.key == key


def test_out_root_from_the_environment_is_checked():
    with pytest.raises(ConfigError) as e:
        check_command_line(["logger=none"], env={"SCALERL_OUTPUT": "/proc/x"})
    assert e.value.key == "out_root" and "SCALERL_OUTPUT" in e.value.fix


def test_empty_option_and_option_lists_name_their_group():
    for overrides, key in ((["loss="], "loss"), (["loss=[cispo,dapo]"], "loss")):
        with pytest.raises(Exception) as e:
            compose(overrides)
        assert as_config_error(e.value).key == key


def test_study_shapes_in_process(tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text("arms:\n  - name: a\n    overrides: [loss=dapo, ~train.threads]\n")
    assert read_spec(ok)["arms"][0]["overrides"] == ["loss=dapo", "~train.threads"]
    for text, says in STUDIES.items():
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ConfigError) as e:
            read_spec(bad)
        assert e.value.key == "sweep" and says in str(e.value)
