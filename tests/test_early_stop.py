"""Early stopping inside a sweep: the watcher's decisions on run directories, the loop's
response to a stop request, and the sweep's handling of stopped arms (no restart, status,
leaderboard)."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import ANSWERS_ONLY, cli as run_cli, popen_cli, read_rows, wait_for  # cli: the entry point in a forked process, without re-importing scalerl

from analysis.stopping import StopRule
from analysis.synthetic import simulate_curve
from scalerl.launch import rundir
from scalerl.launch.early_stop import Watcher, race_order
from scalerl.train.signals import STOP_REQUEST


def write_metrics(run_dir: Path, compute, reward, upto: int) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for i in range(upto):
            f.write(json.dumps({"step": 10 * i, "compute": float(compute[i]), "pass_rate": float(reward[i]),
                                "epoch": 0.0}) + "\n")


def curves(seed=0):
    """Three arms on a 16k budget (arXiv 2510.13786 Table 1): ScaleRL-768, a worse copy, batch-2048."""
    rng = np.random.default_rng(seed)
    spec = {"scalerl": (0.61, 1.92, 2542.0), "worse": (0.55, 1.92, 2542.0), "batch2048": (0.645, 1.70, 10909.0)}
    return {k: simulate_curve(A, B, C, 0.3, c_end=16000.0, n_points=40, rng=rng)[:2] for k, (A, B, C) in spec.items()}


def test_watcher_stops_only_the_arm_that_cannot_catch_the_leader(tmp_path):
    data = curves()
    dirs = {k: tmp_path / k for k in data}
    for k, (c, r) in data.items():
        write_metrics(dirs[k], c, r, upto=6)
    log = []
    watcher = Watcher({k: [d] for k, d in dirs.items()}, StopRule(), log=log.append)
    assert not any(d.stop for d in watcher.check().values())       # 5 evals: too early for anything
    assert not any((d / STOP_REQUEST).exists() for d in dirs.values())
    for k, (c, r) in data.items():
        write_metrics(dirs[k], c, r, upto=21)                        # half the budget
    decisions = watcher.check()
    assert decisions["worse"].stop and not decisions["scalerl"].stop
    assert not decisions["batch2048"].stop and not decisions["batch2048"].eligible   # slow start, higher A
    record = json.loads((dirs["worse"] / STOP_REQUEST).read_text())
    assert record["leader"] == "scalerl" and record["step"] == 200 and record["basis"] == "A"
    assert record["fit"]["status"] == "ok" and record["fit"]["A_hi"] < record["leader_lower"]
    assert record["rule"]["level"] == 0.95 and "cannot catch scalerl" in log[0]
    assert rundir.arm_state(dirs["worse"]) == "stopped_early"
    assert rundir.arm_state(dirs["scalerl"]) == "pending"           # no summary, no stop request
    mtime = (dirs["worse"] / STOP_REQUEST).stat().st_mtime_ns
    watcher.check()
    assert (dirs["worse"] / STOP_REQUEST).stat().st_mtime_ns == mtime and len(log) == 1   # asked once


def test_a_finished_arm_is_never_asked_to_stop_but_can_lead(tmp_path):
    data = curves(1)
    dirs = {k: tmp_path / k for k in ("scalerl", "worse")}
    for k in dirs:
        write_metrics(dirs[k], *data[k], upto=21)
    (dirs["worse"] / "summary.json").write_text(json.dumps({"status": "done"}))
    assert Watcher({k: [d] for k, d in dirs.items()}, StopRule()).check()["worse"].stop
    assert not (dirs["worse"] / STOP_REQUEST).exists()


def test_the_watcher_thread_stops_an_arm_as_its_evals_arrive(tmp_path):
    data = curves(2)
    dirs = {k: tmp_path / k for k in ("scalerl", "worse")}
    watcher = Watcher({k: [d] for k, d in dirs.items()}, StopRule(), poll_s=0.05, log=lambda *_: None).start()
    try:
        for n in range(2, 41):           # the arms' evals arrive one by one
            for k in dirs:
                write_metrics(dirs[k], *data[k], upto=n)
            if (dirs["worse"] / STOP_REQUEST).exists():
                break
            wait_for(lambda: all(watcher.fits.get(d, (0,))[0] >= min(n, 21) or n < 8 for d in dirs.values()),
                     timeout=120, what="the watcher to fit the new evals")
    finally:
        watcher.close()
    assert (dirs["worse"] / STOP_REQUEST).exists() and not (dirs["scalerl"] / STOP_REQUEST).exists()


def test_rivals_launch_side_by_side_one_seed_of_each_arm_per_round():
    arms = [("48", 0), ("48", 1), ("48", 2), ("56", 0), ("56", 1), ("64", 0)]
    order = race_order(arms, key=lambda a: a[0])
    assert order == [("48", 0), ("56", 0), ("64", 0), ("48", 1), ("56", 1), ("48", 2)]
    assert race_order([], key=lambda a: a) == []
    assert race_order(["x", "y"], key=lambda a: a) == ["x", "y"]    # one seed each: the study's order


def test_the_watcher_names_arms_by_what_sets_them_apart(tmp_path):
    from types import SimpleNamespace

    from scalerl.launch.early_stop import watching

    arms = [SimpleNamespace(overrides=[f"length.max_new_tokens={n}", f"seed={s}", "logger=none"], arm_hash=f"h{n}",
                            name=f"r{n}{s}", run_dir=tmp_path / f"r{n}{s}") for n in (48, 56) for s in (0, 1)]
    sweeper = SimpleNamespace(early_stop=True, stop_rule=None, poll_s=60.0)
    with watching(sweeper, arms) as watcher:
        assert watcher.groups == {"length.max_new_tokens=48": [tmp_path / "r480", tmp_path / "r481"],
                                  "length.max_new_tokens=56": [tmp_path / "r560", tmp_path / "r561"]}
    same = [SimpleNamespace(**{**vars(a), "overrides": ["logger=none", f"seed={i}"]}) for i, a in enumerate(arms)]
    with watching(sweeper, same) as watcher:   # nothing tells them apart but the hash: named by it
        assert sorted(watcher.groups) == ["h48", "h56"]


@pytest.mark.slow
def test_the_loop_ends_stopped_early_at_the_next_step_after_a_stop_request(tiny_cfg, tmp_path, monkeypatch):
    import scalerl.train.loop as loop

    real = loop.heldout_pass_rate

    def eval_then_request(*args, step, **kw):   # the sweep decides right after the step-10 eval
        out = real(*args, step=step, **kw)
        if step == 10:
            (tmp_path / "r" / STOP_REQUEST).write_text(json.dumps({"reason": "test"}))
        return out

    monkeypatch.setattr(loop, "heldout_pass_rate", eval_then_request)
    out = loop.train(tiny_cfg("train.steps=40", "train.eval_every=5"), tmp_path / "r", run_name="r", group="t",
                     config_dict={})
    assert out["status"] == "stopped_early" and out["step"] == 10
    assert [r["step"] for r in read_rows(tmp_path / "r" / "metrics.jsonl")] == [0, 5, 10]
    assert json.loads((tmp_path / "r" / "progress.json").read_text())["status"] == "stopped_early"
    assert (tmp_path / "r" / "checkpoints" / "step_00000010.pt").exists()


@pytest.mark.slow
def test_a_stopped_arm_is_recorded_never_restarted_and_on_the_leaderboard(tmp_path):
    study = tmp_path / "two.yaml"
    study.write_text(yaml.safe_dump({"arms": [{"overrides": ["loss=cispo", "train.steps=10"]},
                                              {"overrides": ["loss=dapo", "train.steps=3000"]},
                                              {"overrides": ["loss=gspo", "train.steps=3000"]}]}))
    # async=sync: one thread per arm; two at a time, so the third arm waits in the queue
    # the answers-only shape: what is tested is the sweep's bookkeeping, not what the arms learn
    args = ["-m", f"sweep={study}", "study=two", "train.eval_every=5", "logger=none", "async=sync",
            "hydra.sweeper.early_stop=true", "hydra.sweeper.poll_s=0.5", "hydra.launcher.n_parallel=2", *ANSWERS_ONLY]
    out = tmp_path / "out"
    proc = popen_cli(args, out, tmp_path / "sweep.log")
    sweep = out / "sweeps" / "two"
    long_arm = lambda: next(sweep.glob("*loss=dapo*"), None)  # noqa: E731
    queued = lambda: next(sweep.glob("*loss=gspo*"), None)  # noqa: E731
    # a queued arm stopped before it starts (the watcher writes stop.json to every seed of a beaten arm)
    wait_for(lambda: queued() is not None, timeout=300, what="the queued arm's run directory", proc=proc)
    assert not (queued() / "metrics.jsonl").exists(), "the third arm started although two run at a time"
    (queued() / STOP_REQUEST).write_text(json.dumps({"reason": "cannot catch cispo (queued)", "leader": "cispo"}))
    wait_for(lambda: long_arm() is not None and len(read_rows(long_arm() / "metrics.jsonl")) >= 2, timeout=900,
             what="2 evals of the long arm", proc=proc)
    # what the watcher writes when an arm cannot catch the leader (its decisions are tested above)
    (long_arm() / STOP_REQUEST).write_text(json.dumps({"reason": "cannot catch cispo (test)", "leader": "cispo",
                                                       "basis": "A", "step": 5, "fit": {"status": "ok", "A": 0.3}}))
    assert proc.wait(timeout=600) == 0, (tmp_path / "sweep.log").read_text()[-3000:]
    log = (tmp_path / "sweep.log").read_text()
    assert "early stopping on" in log
    summary = json.loads((long_arm() / "summary.json").read_text())
    assert summary["status"] == "stopped_early" and summary["step"] < 3000
    assert summary["early_stop"]["reason"] == "cannot catch cispo (test)"
    board = pd.read_csv(sweep / "leaderboard.csv").set_index("run")
    assert board.loc[long_arm().name, "run_status"] == "stopped_early"
    assert board.loc[long_arm().name, "stop_reason"] == "cannot catch cispo (test)"
    never = json.loads((queued() / "summary.json").read_text())
    assert never["status"] == "stopped_early" and never["step"] == 0 and never["early_stop"]["leader"] == "cispo"
    assert not (queued() / "metrics.jsonl").exists() and not (queued() / "checkpoints").exists()
    assert "was stopped by its sweep before it started" in (queued() / "train.log").read_text()
    assert board.loc[queued().name, "run_status"] == "stopped_early"
    rows = len(read_rows(long_arm() / "metrics.jsonl"))
    again = run_cli(args, out)
    assert "launching 0 arm(s); 1 already done, 2 stopped early (not restarted)" in again.stdout
    assert len(read_rows(long_arm() / "metrics.jsonl")) == rows
    assert "stopped_early" in run_cli([*args, "--status"], out).stdout


def test_a_bad_stop_rule_names_its_key_before_anything_runs(tmp_path):
    proc = run_cli(["-m", "loss=cispo,dapo", "hydra.sweeper.early_stop=true", "hydra.sweeper.stop_rule.level=2",
                    "--dry-run"], tmp_path, check=False)
    assert proc.returncode != 0 and "hydra.sweeper.stop_rule.level" in proc.stderr + proc.stdout
    assert not (tmp_path / "sweeps").exists()
