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
from scalerl.launch.expansion import Progress, check_size
from scalerl.launch.precheck import check_command_line
from scalerl.launch.studies import expand_spec, read_spec, study_size
from helpers import REPO, cli, run_cli  # cli: the entry point forked from a server that imported it (helpers.ForkedCli)

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
    "arms: []\n": "`arms` is an empty list",                      # was one arm of the defaults
    "grid: {}\n": "has no arms",
    "# nothing\n": "has no arms",
    "grid: {loss: [[cispo, dapo]]}\n": "`grid.loss` holds ['cispo', 'dapo']",
    "grid:\n  loss: [cispo]\n  loss: [dapo]\n": "line 3 gives the key `loss` twice",  # the last one won
    "arms:\n  - name: a\n    name: b\n    overrides: [loss=dapo]\n": "line 3 gives the key `name` twice",
    "grid: {sweep: [loss, seeds]}\n": "sets sweep: a study cannot include another study",  # 2 identical arms
    "arms: [{overrides: [sweep=loo]}]\n": "sets sweep: a study cannot include another study",  # 1 default arm
    "grid: {seed: ['range(0,1000000)']}\n": "`grid.seed` holds 'seed=range(0,1000000)', a sweep over values",
    "arms: [{overrides: ['loss=cispo,dapo']}]\n": "`arms[0].overrides` holds 'loss=cispo,dapo', a sweep over values",
    "grid: {hydra.sweeper._target_: [x]}\n": "sets hydra.sweeper._target_: a study sets recipe keys only",
    "grid:\n  loss: " + "[" * 5000 + "x" + "]" * 5000 + "\n": "line 2 nests mappings and lists more than 8 deep",
    "grid: " + "{a: " * 5000 + "x" + "}" * 5000 + "\n": "line 1 nests mappings and lists more than 8 deep",
    "".join(" " * i + f"k{i}:\n" for i in range(1000)): "line 9 nests mappings and lists more than 8 deep",
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
    # An override that expands to nothing made no arms, which Hydra's launcher ran as one arm of the
    # defaults, dropping every other override (300 steps logged to W&B); the dry run is not needed to see it.
    "an empty range": (["-m", "seed=range(0,-5)", "loss=cispo,dapo", "train.steps=5", "logger=none"], {},
                       "seed: expands to no values"),
    "an empty range, dry run": ([*D, "seed=range(3,3)"], {}, "seed: expands to no values"),
    "a glob that matches no option": ([*D, "loss=glob(nothing*)"], {}, "loss: expands to no values"),
    "a range with step 0": ([*D, "seed=range(0,5,0)"], {}, "seed: range(0, 5, 0) has a step of 0"),
    # A million arms took ~45 h to validate; counted first, refused at once (a hang fails by timeout).
    "a million seeds": (["-m", "seed=range(0,1000000)", "logger=none"], {},
                        "hydra.sweeper.max_arms: this sweep would make 1,000,000 arms (`seed` gives 1,000,000)"),
    "a million seeds, dry run": ([*D, "seed=range(0,1000000)"], {}, "would make 1,000,000 arms"),
    "a float range past the cap": ([*D, "train.lr=range(0.0,1.0,0.0005)"], {}, "would make 2,000 arms"),
    "3 arms, a cap of 2": ([*D, "seed=range(0,3)", "hydra.sweeper.max_arms=2"], {}, "would make 3 arms"),
    # loss (4 arms) x seeds (3) x 2 learning rates = 24
    "two studies and a list past the cap": ([*D, "sweep=[loss,seeds]", "train.lr=1e-3,2e-3", "hydra.sweeper.max_arms=23"],
                                            {}, "would make 24 arms"),
    "studies as a comma list": ([*D, "sweep=loss,seeds"], {}, "sweep: `sweep=loss,seeds` is a sweep over studies"),
    "max_arms=0": ([*D, "hydra.sweeper.max_arms=0"], {}, "hydra.sweeper.max_arms: must be a whole number"),
    "max_arms=true": ([*D, "hydra.sweeper.max_arms=true"], {}, "hydra.sweeper.max_arms: must be a whole number"),
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
    proc = cli(args, out_root, extra_env=env, check=False, timeout=120)
    _one_line_refusal(proc, says, out_root)


def _short(text: str) -> str:
    return text[:40].replace("\n", "|") + (f"...({len(text)} chars)" if len(text) > 40 else "")


@pytest.mark.parametrize("text", sorted(STUDIES), ids=_short)
def test_a_misshapen_study_is_one_line_naming_the_entry(tmp_path, text):
    study = tmp_path / "s.yaml"
    study.write_text(text)
    out_root = tmp_path / "out"
    proc = cli(["-m", *D, f"sweep={study}"], out_root, check=False, timeout=120)
    _one_line_refusal(proc, f"sweep: study file '{study}'", out_root)
    assert STUDIES[text] in proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_study_that_is_a_fifo_or_a_device_is_refused_unread(tmp_path, kind):
    study = tmp_path / "f.yaml"
    os.mkfifo(study) if kind == "fifo" else study.symlink_to("/dev/zero")
    out_root = tmp_path / "out"
    proc = cli(["-m", *D, f"sweep={study}"], out_root, check=False, timeout=60)  # a hang fails by timeout
    _one_line_refusal(proc, "FIFO" if kind == "fifo" else "a device", out_root)
    with pytest.raises(BoundedReadError):
        read_bounded(study, 1 << 20)


HYDRA_ROUTES = {  # how a study file could reach hydra's settings -> the key its one line must name
    "env_set PYTHONPATH in an arm": ("arms", "+hydra.job.env_set.PYTHONPATH={site}", "hydra.job.env_set.PYTHONPATH"),
    "env_set PYTHONPATH in the grid": ("grid", "+hydra.job.env_set.PYTHONPATH={site}", "hydra.job.env_set.PYTHONPATH"),
    "env_set LD_PRELOAD, ++": ("arms", "++hydra.job.env_set.LD_PRELOAD={site}/x.so", "hydra.job.env_set.LD_PRELOAD"),
    "env_set deleted": ("arms", "~hydra.job.env_set", "hydra.job.env_set"),
    "a callback": ("arms", "+hydra.callbacks.mark._target_=scalerl_marker.Mark", "hydra.callbacks.mark._target_"),
    "the launcher's target": ("arms", "hydra.launcher._target_=scalerl_marker.Mark", "hydra.launcher._target_"),
    "the sweeper's target": ("arms", "hydra.sweeper._target_=scalerl_marker.Mark", "hydra.sweeper._target_"),
    "the search path": ("arms", "hydra.searchpath=[file://{site}]", "hydra.searchpath"),
    "a hydra group": ("arms", "hydra/launcher=submitit_local", "hydra/launcher"),
    "a group placed in hydra": ("arms", "model@hydra.launcher=tiny", "model@hydra.launcher"),
    "all of hydra": ("grid", "hydra", "hydra"),
}


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("route", sorted(HYDRA_ROUTES))
def test_a_study_file_cannot_reach_hydra_and_nothing_runs(tmp_path, route, dry):
    # Through hydra.job.env_set.PYTHONPATH an arm's generator imported a sitecustomize.py from anywhere
    # (the sweep exited 0). Each file a route could import writes the marker; none may be written.
    where, override, key = HYDRA_ROUTES[route]
    site, mods, marker = tmp_path / "site", tmp_path / "mods", tmp_path / "marker"
    site.mkdir(), mods.mkdir()
    plant = f"open({str(marker)!r}, 'a').write('ran\\n')\n"
    (site / "sitecustomize.py").write_text(plant)
    (mods / "scalerl_marker.py").write_text(plant + "class Mark:\n    def __init__(self, *a, **k): pass\n")
    override = override.format(site=site)
    study = tmp_path / "hostile.yaml"
    if where == "arms":
        study.write_text(f"arms:\n  - overrides: [{json.dumps(override)}, train.steps=2]\n")
    else:
        k, _, v = override.partition("=")
        study.write_text(f"grid:\n  {json.dumps(k)}: [{json.dumps(v or 'x')}]\n  train.steps: 2\n")
    out_root = tmp_path / "out"
    args = ["-m", "logger=none", f"sweep={study}", *(["--dry-run"] if dry else [])]
    proc = run_cli(args, out_root, extra_env={"PYTHONPATH": f"{REPO}:{mods}"}, check=False, timeout=300)
    _one_line_refusal(proc, f"sweep: study file '{study}' sets {key}: a study sets recipe keys only", out_root)
    assert not marker.exists(), marker.read_text()


def test_a_study_of_ten_thousand_arms_is_refused_before_building_one(tmp_path):
    # 10^4 arms were still silent after 120 s of a dry run; 4 keys x 10 values are counted, not built
    study = tmp_path / "huge.yaml"
    study.write_text("grid:\n" + "".join(f"  {k}: {list(range(10))}\n" for k in ("seed", "train.lr", "train.steps", "x")))
    out_root = tmp_path / "out"
    proc = cli(["-m", "logger=none", f"sweep={study}"], out_root, check=False, timeout=120)
    _one_line_refusal(proc, f"hydra.sweeper.max_arms: this sweep would make 10,000 arms (study {study} gives 10,000)",
                      out_root)


def test_the_hydra_routes_work_from_the_command_line(tmp_path):
    # The same keys are the user's own to give: only a study file is refused them.
    proc = cli([*D, "seed=1,2", "+hydra.job.env_set.SCALERL_X=1", "hydra.sweeper.max_arms=2"], tmp_path / "out",
               timeout=120)
    assert proc.stdout.count("pending") == 2


def test_a_long_dry_run_shows_its_progress(tmp_path):
    # The first line is due after SCALERL_PROGRESS_AFTER_S (3 s for a user; 0 here, so that the test
    # does not depend on how fast this machine validates), then one every 5 s (100 arms were silent
    # for 17.5 s before). The timing itself: test_progress_waits_then_prints_every_interval.
    proc = cli([*D, "seed=range(0,6)"], tmp_path / "out", timeout=600, extra_env={"SCALERL_PROGRESS_AFTER_S": "0"})
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[scalerl] validated ")]
    assert progress and all(line.endswith("/6 arms") for line in progress), proc.stdout[-2000:]
    done = [int(line.split()[2].split("/")[0]) for line in progress]
    assert done == sorted(done) and done[-1] < 6 and proc.stdout.count("pending") == 6


def test_slurm_without_slurm_is_refused_before_submitting(tmp_path):  # a 50-line traceback before
    out_root = tmp_path / "out"
    # A unit test's PATH holds no SLURM client, even where SLURM is installed (tests/conftest.py).
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    assert not any(os.path.exists(os.path.join(d, "sbatch")) for d in env["PATH"].split(os.pathsep))
    proc = cli(["-m", "logger=none", "hydra/launcher=slurm"], out_root, extra_env=env, check=False, timeout=120)
    _one_line_refusal(proc, "hydra/launcher: slurm submits with sbatch", out_root)
    # a dry run validates the arms (a laptop checks a cluster sweep) and says the launch would be refused
    dry = cli([*D, "hydra/launcher=slurm"], out_root, extra_env=env, timeout=120)
    assert "would be refused here" in dry.stderr and "pending" in dry.stdout


def test_every_invalid_arm_is_one_line_that_repeats_the_reason(tmp_path):
    # Two arms, the same bad value: one line, with the reason, the key and the count (was three lines,
    # the last "2 of 2 arms are invalid" without the reason).
    proc = cli(["-m", *D, "loss=cispo,dapo", "batch.generations=1"], tmp_path / "out", check=False, timeout=120)
    _one_line_refusal(proc, "batch.generations: must be >= 2", tmp_path / "out")
    assert "2 of 2 arms invalid, nothing was launched" in proc.stderr


def test_a_huge_legal_value_is_warned_with_its_cost(tmp_path):
    proc = cli([*D, "model.warmstart.max_steps=1000000000"], tmp_path / "out", timeout=120)
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
    # fp32 weights and gradients 4 B each, AdamW's moments 8 B a parameter; on a CPU its temporaries are
    # two slices of 32 MiB (train/optimizer.py); foreach on CUDA: 4 B a parameter
    assert (est.weights, est.gradients, est.optimizer) == (4 * 494_005_120, 4 * 494_005_120,
                                                           8 * 494_005_120 + 2 * (32 << 20))
    on_gpu = estimate(validate(compose([*_hf(tmp_path), "batch.prompts=2", "batch.generations=4", "batch.minibatches=1",
                                        "length.max_new_tokens=512", "train.device=cuda"])), model_shape(small.model))
    assert on_gpu.optimizer == 12 * 494_005_120
    assert est.tokens_per_microbatch % 8 == 0                       # 2 prompts x 4 completions, one minibatch
    assert 9.02e9 < est.total < 24 * GiB and "a 24 GiB, 2-core machine" in summary   # measured peak 9.02 GB
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
    assert "from SCALERL_OUTPUT=/proc/x" in str(e.value)  # the message says where the path came from


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


def test_progress_waits_then_prints_every_interval():
    now, lines = [0.0], []

    class Out:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    p = Progress(10, after_s=3.0, every_s=5.0, clock=lambda: now[0], out=Out())
    for done, t in enumerate([0.0, 1.0, 2.9, 3.0, 4.0, 7.9, 8.0, 12.0, 13.5, 20.0]):
        now[0] = t
        p.tick(done)
    now[0] = 30.0
    p.tick(10)                       # all done: the table follows, no progress line
    # 3.0 reaches the first threshold (arm 3), then 8.0 (>= 3.0 + 5, arm 6), 13.5 (>= 8.0 + 5, arm 8)
    # and 20.0 (>= 13.5 + 5, arm 9)
    assert "".join(lines).split("\n")[:-1] == [f"[scalerl] validated {i}/10 arms" for i in (3, 6, 8, 9)]


def test_sizes_are_counted_without_expanding(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("grid:\n  loss: [cispo, dapo, gspo]\n  seed: [0, 1]\n  train.lr: 1e-3\n"
                     "arms:\n  - overrides: [filter=none]\n  - overrides: [filter=zero_variance]\n")
    spec = read_spec(study)
    assert study_size(spec) == 3 * 2 * 1 * 2 == len(expand_spec(spec))
    assert check_size({"seed": 5, "loss": 2}, [("s", 12)], max_arms=120) == 120
    with pytest.raises(ConfigError) as e:
        check_size({"seed": 5, "loss": 2}, [("s", 12)], max_arms=119)
    assert e.value.key == "hydra.sweeper.max_arms" and "(study s gives 12)" in str(e.value)
    with pytest.raises(ConfigError) as e:
        check_size({"seed": 0, "loss": 2}, [], max_arms=1000)
    assert e.value.key == "seed"
