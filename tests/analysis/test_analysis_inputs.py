"""Bad input to `python -m analysis`: one clear line naming the file, exit code 2, and a
good earlier result never replaced (writes are atomic, an empty result is refused)."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis import io, writing
from analysis.__main__ import main
from analysis.synthetic import synthetic_sweep

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def good(tmp_path):
    """A points CSV and a leaderboard already fitted from it."""
    path = tmp_path / "points.csv"
    synthetic_sweep(2, 20, seed=3).to_csv(path, index=False)
    out = tmp_path / "results"
    assert main(["fit", str(path), "--out", str(out), "--n-boot", "0", "--plots", "none", "--quiet"]) == 0
    return path, out, (out / "leaderboard.csv").read_bytes()


def refused(capsys, argv, *, match):
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and match in err[0], err
    return err[0]


def test_a_header_only_csv_is_refused_and_the_leaderboard_kept(good, capsys):
    path, out, board = good
    path.write_text("run,compute,reward\n")
    refused(capsys, ["fit", str(path), "--out", str(out)], match="no rows under the header")
    assert (out / "leaderboard.csv").read_bytes() == board


def test_a_directory_without_runs_is_refused_and_the_leaderboard_kept(good, tmp_path, capsys):
    _, out, board = good
    (tmp_path / "nothing").mkdir()
    refused(capsys, ["fit", str(tmp_path / "nothing"), "--out", str(out)], match="no runs found")
    refused(capsys, ["extrapolate", str(tmp_path / "nothing"), "--out", str(out)], match="no runs found")
    assert (out / "leaderboard.csv").read_bytes() == board and not (out / "extrapolation.csv").exists()


BAD_CSVS = {
    "empty": (b"", "empty file"),
    "missing_column": (b"run,x\n1,2\n", "missing column(s) ['compute', 'reward']"),
    "binary": (bytes(range(256)) * 4, "not a text CSV file"),
    "ragged": (b"run,compute,reward\na,0,0.1\na,1,0.2,9\n", "line 3: 4 field(s), the header has 3"),
    "reward_above_one": (b"run,compute,reward\na,0,1.5\na,10,0.2\n", "line 2: reward 1.5 is outside [0, 1]"),
    "negative_compute": (b"run,compute,reward\na,0,0.1\na,-10,0.2\n", "line 3: compute -10.0 is negative"),
    "text_compute": (b"run,compute,reward\na,0,0.1\na,lots,0.2\n", "line 3: compute 'lots' is not a number"),
}


@pytest.mark.parametrize("name", sorted(BAD_CSVS))
def test_a_bad_csv_is_one_line_naming_the_file(tmp_path, capsys, name):
    data, why = BAD_CSVS[name]
    path = tmp_path / f"{name}.csv"
    path.write_bytes(data)
    line = refused(capsys, ["fit", str(path), "--out", str(tmp_path / "o")], match=why)
    assert str(path) in line and not (tmp_path / "o").exists()


def test_a_missing_path_and_an_out_that_is_a_file(good, tmp_path, capsys):
    path, _, _ = good
    refused(capsys, ["fit", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o")], match="nope.csv: no such")
    (tmp_path / "file").write_text("x")
    refused(capsys, ["fit", str(path), "--out", str(tmp_path / "file")], match="is a file")


def test_a_corrupt_or_reordered_metrics_file_names_its_line(make_run, tmp_path, capsys):
    run = make_run("r", compute=[0.0, 1e12, 2e12], reward=[0.1, 0.2, 0.3])
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([lines[0], lines[1][:20], lines[2]]) + "\n")
    refused(capsys, ["fit", str(tmp_path), "--out", str(tmp_path / "o")], match="metrics.jsonl line 2: not a JSON row")
    (run / "metrics.jsonl").write_text("\n".join([lines[0], lines[2], lines[1]]) + "\n")
    refused(capsys, ["fit", str(tmp_path), "--out", str(tmp_path / "o")], match="line 3: step 10 after step 20")


@pytest.mark.parametrize("argv,why", [
    (["extrapolate", "--n-final", "0"], "--n-final: must be an integer >= 1"),  # printed "last 0 evals", used all
    (["extrapolate", "--fraction", "2"], "--fraction: must be a finite number in (0, 1)"),  # scored on seen data
    (["extrapolate", "--fraction", "1"], "--fraction: must be a finite number in (0, 1)"),
    (["extrapolate", "--fraction", "-1"], "--fraction: must be a finite number in (0, 1)"),
    (["fit", "--n-boot", "-5"], "--n-boot: must be an integer >= 0"),
    (["fit", "--r0", "nan"], "--r0: must be a finite number in [0, 1]"),
    (["fit", "--r0", "1.5"], "--r0: must be a finite number in [0, 1]"),
    (["fit", "--min-compute", "-1"], "--min-compute: must be a finite number >= 0"),
    (["fit", "--target-compute", "0"], "--target-compute: must be a finite number in (0, 1e+40]"),
])
def test_arguments_that_mean_nothing_are_refused(good, capsys, argv, why):
    path, out, board = good
    with pytest.raises(SystemExit) as exit_info:
        main([argv[0], str(path), "--out", str(out), *argv[1:]])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(err) == 1 and why in err[0], err
    assert (out / "leaderboard.csv").read_bytes() == board


def test_a_write_that_fails_midway_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "leaderboard.csv"
    path.write_text("run,rank\nold,1\n")

    def half_then_fail(self, target, **kwargs):
        Path(target).write_text("run,ra")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_fail)
    with pytest.raises(OSError):
        writing.write_csv(pd.DataFrame({"run": ["new"], "rank": [1]}), path)
    assert path.read_text() == "run,rank\nold,1\n" and [p.name for p in tmp_path.iterdir()] == ["leaderboard.csv"]


def test_the_command_exits_2_without_a_traceback(tmp_path):
    (tmp_path / "points.csv").write_text("run,compute,reward\n")
    done = subprocess.run([sys.executable, "-m", "analysis", "fit", str(tmp_path / "points.csv"), "--out",
                           str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert json.dumps(done.stderr).count("points.csv") == 1
