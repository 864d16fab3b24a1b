"""W&B report: mode selection, and an offline run with the table, images and summary values."""
import json
import time

import pandas as pd
import pytest

from analysis import FitOptions, analyze_sweep
from analysis.report import api_key_configured, wandb_mode


@pytest.fixture
def no_wandb_env(monkeypatch, tmp_path):
    for key in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def wait_for_record(run_dir, key, timeout=30.0):
    """The run-<id>.wandb record log, once it holds `key`.

    wandb-core writes it asynchronously: finish() can return before the records land
    (seen in ~1 of 4 runs in one process), and they land within a second or two, or at
    process exit at the latest.
    """
    deadline = time.monotonic() + timeout
    while True:
        record = next(run_dir.glob("run-*.wandb")).read_bytes()
        if key in record or time.monotonic() > deadline:
            return record
        time.sleep(0.1)


def test_mode_is_offline_without_key_and_follows_the_environment(no_wandb_env):
    home = no_wandb_env
    assert wandb_mode(env={}, home=home) == "offline"
    assert wandb_mode(env={"WANDB_MODE": "disabled"}, home=home) == "disabled"
    assert wandb_mode(env={"WANDB_API_KEY": "x" * 40}, home=home) == "online"
    (home / ".netrc").write_text("machine example.com login a password b\n")
    assert not api_key_configured(env={}, home=home)
    (home / ".netrc").write_text("machine api.wandb.ai login user password secret\n")
    (home / ".netrc").chmod(0o600)
    assert wandb_mode(env={}, home=home) == "online"


def test_fit_with_wandb_logs_an_offline_summary_run(sweep, tmp_path, no_wandb_env, capsys):
    out = tmp_path / "out"
    board = analyze_sweep(sweep, out, FitOptions(n_boot=10), plots="summary", wandb=True,
                          wandb_group="test-sweep")
    printed = capsys.readouterr().out
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert f"wandb sync {runs[0]}" in printed
    record = wait_for_record(runs[0], b"leaderboard")
    for key in (b"leaderboard", b"plots/overview", b"plots/params", b"fit/cispo-s1/A", b"test-sweep"):
        assert key in record, key
    tables = list((runs[0] / "files" / "media" / "table").glob("*.table.json"))
    logged = json.loads(tables[0].read_text())
    frame = pd.DataFrame(logged["data"], columns=logged["columns"])
    assert sorted(frame["run"]) == sorted(board["run"])
    assert set(frame["status"]) >= {"run_failed", "too_few_points"}
    images = {p.name.split("_")[0] for p in (runs[0] / "files" / "media" / "images").rglob("*.png")}
    assert images == {"overview", "params"}
