"""Hostile files and links under a sweep directory (issue 29 points 2-4, issue 27 point 3).

Each gives a one-line error or a status within seconds: never a hang, a traceback, a
silently dropped row, or a walk of the filesystem.  The CLI runs in a subprocess with a
timeout, so a regression that hangs fails the test instead of stalling the suite.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pandas as pd

from analysis import io
from analysis.__main__ import main
from analysis.baseline import fit_power_law
from analysis.models import sigmoid

ROOT = Path(__file__).resolve().parents[2]
C = np.concatenate([[0.0], np.linspace(1e13, 4e14, 30)])
R = sigmoid(C, 0.6, 1.5, 1e14, 0.2)


def cli(*argv, timeout=120):
    """`python -m analysis ...` in a subprocess: (returncode, stderr lines)."""
    proc = subprocess.run([sys.executable, "-m", "analysis", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, [line for line in proc.stderr.splitlines() if line.strip()]


def one_line(capsys, argv, match):
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and match in err[0], err


# ------------------------------------------------------------------ point 3: files that are not files
def test_a_fifo_named_metrics_jsonl_is_refused_not_waited_on(make_run, tmp_path):
    run = make_run("sweep/a", compute=C, reward=R)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    rc, err = cli("fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0", timeout=60)
    assert rc == 2 and len(err) == 1 and "a FIFO, not a regular file" in err[0], err


def test_a_fifo_named_summary_json_is_refused_too(make_run, tmp_path, capsys):
    run = make_run("sweep/a", compute=C, reward=R)
    (run / "summary.json").unlink()
    os.mkfifo(run / "summary.json")
    one_line(capsys, ["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0"],
             "summary.json: a FIFO")


def test_a_link_to_dev_zero_is_refused_without_reading_it(make_run, tmp_path, capsys):
    run = make_run("sweep/a", compute=C, reward=R)
    (run / "metrics.jsonl").unlink()
    os.symlink("/dev/zero", run / "metrics.jsonl")
    one_line(capsys, ["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0"],
             "a device or socket, not a regular file")


def test_a_file_over_the_size_bound_is_refused(make_run, tmp_path, capsys, monkeypatch):
    make_run("sweep/a", compute=C, reward=R)
    monkeypatch.setattr(io, "MAX_BYTES", 1000)          # the real bound is 256 MiB
    one_line(capsys, ["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0"],
             "bound on an input file")


def test_a_long_unended_last_line_is_an_error_not_a_cut_short_row(make_run, tmp_path, capsys):
    run = make_run("sweep/a", compute=C, reward=R)
    with open(run / "metrics.jsonl", "a") as f:
        f.write("x" * (io.MAX_CUT_LINE + 10))            # the 1 GB file of the issue, scaled down
    one_line(capsys, ["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0"],
             "with no newline and no JSON row")


def test_a_short_cut_last_line_is_still_the_killed_runs_row(make_run, tmp_path):
    make_run("sweep/a", compute=C, reward=R, partial_line=True)
    assert len(io.read_sweep(tmp_path / "sweep")) == C.size


def test_compute_that_falls_while_the_step_rises_is_refused(make_run, tmp_path, capsys):
    bad = C.copy()
    bad[10] = bad[9] / 2
    make_run("sweep/a", compute=bad, reward=R)
    one_line(capsys, ["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0"],
             "line 11: compute")


# ------------------------------------------------------------------ issue 27 point 3: links
def test_a_link_to_the_root_is_not_walked(make_run, tmp_path):
    make_run("sweep/a", compute=C, reward=R)
    os.symlink("/", tmp_path / "sweep" / "root")
    os.symlink("/proc/self", tmp_path / "sweep" / "proc")
    rc, err = cli("fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0",
                  "--plots", "none", "--quiet", timeout=60)
    assert rc == 0, err
    assert pd.read_csv(tmp_path / "out" / "leaderboard.csv")["run"].tolist() == ["sweep_a"]


def test_links_to_reused_runs_are_read_but_not_descended(make_run, tmp_path):
    source = make_run("outputs/sweeps/old/loss=cispo-abc", compute=C, reward=R)
    make_run("outputs/sweeps/new/loss=dapo-def", compute=C, reward=R, loss="dapo")
    os.symlink("../old/loss=cispo-abc", tmp_path / "outputs/sweeps/new/loss=cispo-abc")   # as link_run makes it
    os.symlink("../../..", source / "up")                 # a link inside the linked run: never followed
    dirs = io.find_run_dirs(tmp_path / "outputs/sweeps/new")
    assert [d.name for d in dirs] == ["loss=cispo-abc", "loss=dapo-def"]


# ------------------------------------------------------------------ point 2: the power-law baseline
def declining(seed):
    rng = np.random.default_rng(seed)
    compute = np.linspace(0, 10 ** rng.uniform(10, 17), 30)
    reward = (0.4 + rng.normal(0, 0.03, 30) + rng.uniform(-0.2, 0.2) * np.sqrt(compute / compute.max())
              + rng.uniform(-0.2, 0.2) * (compute > 0.8 * compute.max()))
    return compute, np.clip(reward, 0, 1)


def test_the_power_law_gives_a_status_where_it_overflowed():
    # seeds 0-299 of this family: 6 raised OverflowError (D * scale**B in Python floats) at a01f570
    for seed in range(300):
        fit = fit_power_law(*declining(seed))
        assert fit.status in ("ok", "A_unidentified", "flat", "decreasing", "too_few_points", "fit_failed")
        if fit.fitted:
            assert np.isfinite(fit.predict(declining(seed)[0][1:])).all()


def test_a_declining_run_is_decreasing_for_the_power_law_and_extrapolate_does_not_crash(make_run, tmp_path):
    compute = np.linspace(0, 3e16, 40)
    reward = np.clip(0.5 - 0.2 * compute / compute.max() + np.random.default_rng(0).normal(0, 0.01, 40), 0, 1)
    assert fit_power_law(compute, reward).status == "decreasing"
    make_run("sweep/cispo", compute=compute, reward=reward)
    assert main(["extrapolate", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "20",
                 "--plots", "none", "--quiet"]) == 0
    assert pd.read_csv(tmp_path / "out" / "extrapolation.csv")["status_power_law"].tolist() == ["decreasing"]


# ------------------------------------------------------------------ point 4: budget keeps an old forecast
def test_plan_moves_an_other_plan_to_previous(make_run, tmp_path):
    make_run("sweep/a", compute=C, reward=R)
    out = tmp_path / "out"
    argv = ["plan", str(tmp_path / "sweep"), "--out", str(out), "--n-boot", "0", "--quiet"]
    assert main(argv + ["--budget", "1e15"]) == 0
    first = (out / "plan.csv").read_text()
    assert main(argv + ["--budget", "1e15"]) == 0                   # the same forecast: replaced in place
    assert not (out / "previous").exists()
    assert main(argv + ["--budget", "2e15"]) == 0                   # another budget: the old one is kept
    (kept,) = (out / "previous").iterdir()
    assert (kept / "plan.csv").read_text() == first and (kept / "plan.png").exists()
    assert json.loads((out / "analysis.json").read_text())["plan"]["settings"]["budget"] == 2e15


# ------------------------------------------------------------------ a new user's attacks, second round
def test_a_link_to_the_root_given_as_the_sweep_is_refused_not_walked(tmp_path):
    os.symlink("/", tmp_path / "root")
    rc, err = cli("fit", str(tmp_path / "root"), "--out", str(tmp_path / "out"), "--n-boot", "0", timeout=60)
    assert rc == 2 and len(err) == 1 and "a link to /, which is not a run directory" in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_link_to_a_run_given_as_the_sweep_is_still_read(make_run, tmp_path, capsys):
    make_run("sweep/a", compute=C, reward=R)
    os.symlink(tmp_path / "sweep" / "a", tmp_path / "latest")
    assert main(["fit", str(tmp_path / "latest"), "--out", str(tmp_path / "out"), "--n-boot", "0",
                 "--plots", "none", "--quiet"]) == 0
    assert pd.read_csv(tmp_path / "out" / "leaderboard.csv")["run"].tolist() == ["sweep_a"]


def test_a_run_over_the_row_bound_is_refused_before_it_is_parsed(make_run, tmp_path, capsys, monkeypatch):
    make_run("sweep/a", compute=C, reward=R)                  # 31 rows
    monkeypatch.setattr(io, "MAX_ROWS", 30)                   # the real bound is 10,000 (a 100k-row fit took 5.3 GB)
    one_line(capsys, ["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0"],
             "metrics.jsonl: 31 rows, over the bound of 30 evals per run")
    monkeypatch.setattr(io, "MAX_ROWS", 31)                   # at the bound: fitted
    assert main(["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0",
                 "--plots", "none", "--quiet"]) == 0


def test_a_csv_run_over_the_row_bound_is_refused(tmp_path, capsys, monkeypatch):
    pd.DataFrame({"run": ["a"] * 31 + ["b"] * 3, "compute": list(C) + [1.0, 2.0, 3.0],
                  "reward": list(R) + [0.1, 0.2, 0.3]}).to_csv(tmp_path / "p.csv", index=False)
    monkeypatch.setattr(io, "MAX_ROWS", 30)
    one_line(capsys, ["fit", str(tmp_path / "p.csv"), "--out", str(tmp_path / "out"), "--n-boot", "0"],
             "run 'a' has 31 rows, over the bound of 30")


def test_a_ragged_csv_names_its_first_ragged_line(tmp_path, capsys):
    # every row one field longer than the header: pandas took the run as an index, shifting the columns
    (tmp_path / "long.csv").write_text("run,compute,reward\na,1e13,0.1,5\na,2e13,0.2,6\n")
    one_line(capsys, ["fit", str(tmp_path / "long.csv"), "--out", str(tmp_path / "out"), "--n-boot", "0"],
             "long.csv line 2: 4 field(s), the header has 3")
    (tmp_path / "short.csv").write_text("run,compute,reward\na,1e13,0.1\na,2e13,0.2\nb\n")   # padded with NaN
    one_line(capsys, ["fit", str(tmp_path / "short.csv"), "--out", str(tmp_path / "out"), "--n-boot", "0"],
             "short.csv line 4: 1 field(s), the header has 3")


def test_an_impossible_budget_is_refused_up_front_naming_the_flag(make_run, tmp_path):
    make_run("sweep/a", compute=C, reward=R)
    for argv in (["plan", "--budget", "1e300"], ["fit", "--target-compute", "1e300"]):
        rc, err = cli(argv[0], str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0", *argv[1:])
        assert rc == 2 and len(err) == 1 and f"argument {argv[1]}: must be a finite number in (0, 1e+40]" in err[0]
    assert not (tmp_path / "out").exists()


def test_a_plan_whose_figure_fails_leaves_no_plan_csv(make_run, tmp_path, monkeypatch):
    import analysis.budget

    make_run("sweep/a", compute=C, reward=R)

    def overflow(*args, **kwargs):
        raise OverflowError("cannot convert float infinity to integer")   # what 1e300 raised in savefig
    monkeypatch.setattr(analysis.budget.writing, "save_figure", overflow)
    try:
        main(["plan", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0", "--quiet",
              "--budget", "1e15"])
    except OverflowError:
        pass
    assert not (tmp_path / "out" / "plan.csv").exists() and not (tmp_path / "out" / "analysis.json").exists()


def test_a_bootstrap_too_big_for_memory_is_refused_naming_n_boot(make_run, tmp_path, capsys, monkeypatch):
    from analysis import uncertainty

    make_run("sweep/a", compute=C, reward=R)                            # 31 points
    monkeypatch.setattr(uncertainty, "memory_bytes", lambda: 1 << 30)  # a 1 GiB machine: 0.5 GiB for the bootstrap
    argv = ["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--quiet", "--plots", "none"]
    # up front: 1,000,000 x 5 points (the fewest a fit takes) x 128 B = 0.6 GiB > 0.5 GiB
    with pytest.raises(SystemExit) as stop:
        main(argv + ["--n-boot", "1000000"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "argument --n-boot: 1000000 replicates" in err[0], err
    # after reading: 200,000 x 31 points x 128 B = 0.74 GiB > 0.5 GiB; at most 2**29 // (128 * 31) = 135300
    one_line(capsys, argv + ["--n-boot", "200000"], "--n-boot 200000: the bootstrap of run 'sweep_a' (31 points)")
    assert not (tmp_path / "out").exists()


def test_a_metric_pattern_that_matches_nothing_says_so_and_lists_the_columns(make_run, tmp_path, capsys):
    make_run("sweep/a", compute=C, reward=R)
    one_line(capsys, ["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--n-boot", "0",
                      "--metric", "nothing*"], "--metric nothing* matched no metrics.jsonl column of its 1 run(s)")


def test_every_command_exits_quietly_when_its_reader_goes_away(make_run, tmp_path):
    make_run("sweep/a", compute=C, reward=R)
    base = [str(tmp_path / "sweep"), "--n-boot", "0", "--plots", "none"]
    for argv in (["--help"], ["fit", "--help"], ["fit", *base, "--out", str(tmp_path / "f")],
                 ["plan", *base, "--out", str(tmp_path / "p"), "--budget", "1e15"],
                 ["extrapolate", *base, "--out", str(tmp_path / "e")]):
        read, write = os.pipe()
        os.close(read)                         # `| head` that has already gone
        try:
            proc = subprocess.run([sys.executable, "-m", "analysis", *argv], cwd=ROOT, stdout=write,
                                  stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(write)
        assert proc.returncode in (0, 141) and proc.stderr == "", (argv, proc.returncode, proc.stderr)
