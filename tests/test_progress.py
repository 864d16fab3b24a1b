"""Long phases say what they do: a starting arm's phase reaches train.log and the live table, and
the table printed without a terminal never repeats a line unchanged for minutes."""
from __future__ import annotations

import json

from scalerl.launch import local_pool
from scalerl.train.progress import announce


def test_announce_writes_the_phase_and_keeps_the_runs_identity(tmp_path, capsys, monkeypatch):
    (tmp_path / "progress.json").write_text(json.dumps({"status": "starting", "pid": 7}))
    clock = iter([100.0, 130.0])
    monkeypatch.setattr("scalerl.train.progress.time.time", lambda: next(clock))
    announce(tmp_path, "loading the model and the task", main=True)
    announce(tmp_path, "evaluating the start", main=True)
    p = json.loads((tmp_path / "progress.json").read_text())
    assert (p["status"], p["pid"], p["phase"], p["phase_since"], p["started_at"]) == (
        "starting", 7, "evaluating the start", 130.0, 100.0)
    assert capsys.readouterr().out.splitlines() == ["[scalerl] loading the model and the task (0s since start)",
                                                    "[scalerl] evaluating the start (30s since start)"]
    assert local_pool._status(p, now=175.0) == "evaluating the start (45s)"
    assert local_pool._status({"status": "running", "phase": "x"}, now=0) == "running"  # steps show instead
    announce(tmp_path / "other", "x", main=False)  # other ranks write nothing
    assert not (tmp_path / "other").exists()


def test_the_plain_table_prints_a_line_when_it_changes_or_every_two_minutes(tmp_path, capsys, monkeypatch):
    arm = tmp_path / "arm"
    arm.mkdir()
    (arm / "progress.json").write_text(json.dumps({"status": "starting", "phase": "loading", "phase_since": 0.0}))
    now = {"t": 0.0}
    monkeypatch.setattr(local_pool.time, "time", lambda: now["t"])
    ticks = iter(range(1, 400))

    class Arms:  # local_pool.ArmProcesses as _watch drives it: one poll = one second; the arm's phase
        queue: list = []  # changes at 200 s and it ends at 300 s
        live = {0: None}

        def start_more(self):
            pass

        def poll(self, timeout):
            now["t"] = float(next(ticks))
            if now["t"] == 200:
                (arm / "progress.json").write_text(json.dumps({"status": "running", "step": 1, "total": 5}))
            if now["t"] >= 300:
                self.live = {}

    monkeypatch.setattr(local_pool.sys.stdout, "isatty", lambda: False, raising=False)
    local_pool._watch(Arms(), [arm])
    lines = capsys.readouterr().out.splitlines()
    # t=1 first, t=122 (2 min, the phase's age shown), t=200 changed, t=300 the end.
    assert lines == ["[scalerl] arm: loading (1s) step 0/? pass_rate -",
                     "[scalerl] arm: loading (122s) step 0/? pass_rate -",
                     "[scalerl] arm: running step 1/5 pass_rate -",
                     "[scalerl] arm: running step 1/5 pass_rate -"]
