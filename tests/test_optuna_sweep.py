"""``hydra/sweeper=optuna``: the search-space syntax, bad settings, a study that runs in parallel
batches and continues on relaunch (trials left running are resumed), and pruning."""
import json

import optuna
import pytest
from helpers import ANSWERS_ONLY, cli as run_cli, plant_leading_trial, read_rows  # cli: the entry point in a forked process, without re-importing scalerl
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from scalerl.core.errors import ConfigError
from scalerl.launch.search_space import corners, format_value, parse_space, trial_overrides

OPTUNA = ["-m", "hydra/sweeper=optuna", "logger=none", "async=sync", "hydra.sweeper.poll_s=0.5"]  # sync: 1 thread per trial


def test_the_search_space_reads_like_hydras_optuna_sweeper():
    space, fixed = parse_space(["train.lr=tag(log, interval(1e-5, 1e-3))", "batch=small,default,large",
                                "loss=choice(cispo, dapo)", "train.eval_every=int(interval(5, 25))",
                                "seed=range(0, 3)", "train.steps=600"],
                               {"train.temperature": "interval(0.5, 1.5)", "train.steps": "100"})
    assert space == {"train.lr": FloatDistribution(1e-5, 1e-3, log=True),
                     "batch": CategoricalDistribution(("small", "default", "large")),
                     "loss": CategoricalDistribution(("cispo", "dapo")),
                     "train.eval_every": IntDistribution(5, 25),
                     "seed": CategoricalDistribution((0, 1, 2)),
                     "train.temperature": FloatDistribution(0.5, 1.5)}
    assert fixed == ["train.steps=600"]           # the command line wins over hydra.sweeper.params
    assert trial_overrides({"train.lr": 1.5e-4, "batch": "small", "x": True, "y": "a b"}, fixed) == [
        "train.steps=600", "train.lr=0.00015", "batch=small", "x=true", "y='a b'"]
    assert format_value(None) == "null"
    # every bound and every choice, each once, from a middle point of lows and first choices
    assert corners({"a": FloatDistribution(1.0, 2.0), "b": CategoricalDistribution(("x", "y"))}) == [
        {"a": 1.0, "b": "x"}, {"a": 2.0, "b": "x"}, {"a": 1.0, "b": "y"}]


@pytest.mark.parametrize("override,key", [("train.lr=interval(1e-3, 1e-5)", "train.lr"),
                                          ("train.lr=tag(log, interval(0, 1e-3))", "train.lr"),
                                          ("train.lr=tag(linear, interval(1e-5, 1e-3))", "train.lr"),
                                          ("sweep=loss", "sweep")])
def test_a_bad_dimension_names_its_key(override, key):
    with pytest.raises(ConfigError) as err:
        parse_space([override])
    assert err.value.key == key


@pytest.mark.slow
def test_bad_settings_fail_before_anything_runs(tmp_path):
    bad = run_cli([*OPTUNA, "train.lr=interval(1e-5, 1e-3)", "hydra.sweeper.objective=target", "--dry-run"],
                  tmp_path, check=False)
    assert bad.returncode != 0 and "hydra.sweeper.target_compute" in bad.stderr + bad.stdout
    bad = run_cli([*OPTUNA, "train.lr=interval(-1e-3, 1e-3)", "--dry-run"], tmp_path, check=False)
    assert bad.returncode != 0 and "train.lr" in bad.stderr and "must be > 0" in bad.stderr   # a corner is invalid
    assert not (tmp_path / "sweeps").exists()


def trials(sweep, name=None):
    storage = f"sqlite:///{sweep / 'optuna.db'}"
    (name,) = [name] if name else optuna.study.get_all_study_names(storage)    # one search, one study
    study = optuna.load_study(study_name=name, storage=storage)
    return study, study.get_trials()


@pytest.mark.slow
def test_a_study_runs_in_parallel_batches_and_a_relaunch_continues_it(tmp_path):
    # The answers-only shape (less its train.lr, searched here): the study's bookkeeping is what
    # is tested, and 8-token answers cost a fraction of the thinking shape's steps and evals.
    shape = [o for o in ANSWERS_ONLY if not o.startswith("train.lr=")]
    args = [*OPTUNA, "train.lr=tag(log, interval(5e-5, 3e-4))", "batch=small,default", "train.steps=4",
            "train.eval_every=2", "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler=random", *shape]
    first = run_cli([*args, "hydra.sweeper.n_trials=3"], tmp_path)
    assert first.stdout.count("running 2 arm(s), 2 at a time") == 1       # a batch of 2, then 1
    sweep = tmp_path / "sweeps" / "default"
    study, done = trials(sweep)
    assert [t.state.name for t in done] == ["COMPLETE"] * 3
    for t in done:
        run_dir = sweep / t.user_attrs["run_dir"].split("/")[-1]
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "done"
        assert t.value == pytest.approx(t.user_attrs["obs_final"])     # 3 evals: no fit, scored by what it reached
        assert f"train.lr={t.params['train.lr']!r}" in t.user_attrs["overrides"]
    mtimes = {t.number: (sweep / t.user_attrs["run_dir"].split("/")[-1] / "metrics.jsonl").stat().st_mtime_ns
              for t in done}
    # An earlier launch left a trial RUNNING (as a killed sweep does): the relaunch resumes it first.
    left = study.ask({"train.lr": FloatDistribution(5e-5, 3e-4, log=True),
                      "batch": CategoricalDistribution(("small", "default"))})
    left.set_user_attr("overrides", ["train.steps=4", "train.eval_every=2", "logger=none",
                                     "train.lr=0.0001", "batch=small"])
    again = run_cli([*args, "hydra.sweeper.n_trials=5"], tmp_path)
    assert "4 of 5 trial(s) so far" in again.stdout
    study, after = trials(sweep)
    assert [t.state.name for t in after] == ["COMPLETE"] * 5
    assert after[3].user_attrs["run_dir"].endswith(tuple(
        p.name for p in sweep.glob("train.steps=4,train.eval_every=2,train.lr=0.0001,batch=small-*")))
    for number, mtime in mtimes.items():      # finished trials were not run again
        assert (sweep / after[number].user_attrs["run_dir"].split("/")[-1] / "metrics.jsonl").stat().st_mtime_ns == mtime
    assert (sweep / "leaderboard.csv").exists()
    status = run_cli([*args, "hydra.sweeper.n_trials=5", "--status"], tmp_path)
    assert "5 of 5 trial(s)" in status.stdout and "complete" in status.stdout


@pytest.mark.slow
def test_median_pruning_stops_a_trial_that_trails_a_finished_one(tmp_path):
    # a finished trial far ahead at every step: any new trial is below the median from its step-0 eval on
    sweep = plant_leading_trial(tmp_path)
    args = [*OPTUNA, "train.lr=tag(log, interval(5e-5, 3e-4))", "train.steps=3000", "train.eval_every=2",
            "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1", "hydra.sweeper.pruner=median",
            "hydra.sweeper.study_name=planted",
            "+hydra.sweeper.pruner_kwargs.n_startup_trials=1"]
    log = run_cli(args, tmp_path, timeout=900).stdout
    _, after = trials(sweep, "planted")
    assert after[1].state.name == "PRUNED"
    run_dir = sweep / after[1].user_attrs["run_dir"].split("/")[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped_early" and summary["step"] < 3000
    assert summary["early_stop"]["pruner"] == "MedianPruner"
    assert [r["step"] for r in read_rows(run_dir / "metrics.jsonl")][0] == 0
    assert "pruning trial 1" in log
