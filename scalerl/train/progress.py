"""Progress for people and for the sweep launcher.

In a terminal: a rich progress bar (step, pass rate, ETA). Otherwise (logs,
SLURM): one line per eval. Always: ``progress.json`` in the run directory,
which the local launcher renders as a live table and ``--status`` reads.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as Bar

from scalerl.core.jsonio import read_json, write_json_atomic
from scalerl.core.liveness import identity


def announce(run_dir: Path, what: str, *, main: bool | None = None) -> None:
    """A phase before the first step (loading, engines, the step-0 evaluation): printed to the run's
    log with the time since the run started, and written into ``progress.json`` (``phase``, ``phase_since``)
    so that the launcher's live table says what a starting arm is doing, not only that it is starting.
    ``main``: None = rank 0 of the launch (before the process group exists)."""
    if main is None:
        main = os.environ.get("RANK", "0") == "0"
    if not main:
        return
    path = Path(run_dir) / "progress.json"
    now = time.time()
    saved = read_json(path) or {}
    started = saved.get("started_at") or now
    print(f"[scalerl] {what} ({now - started:.0f}s since start)", flush=True)
    write_json_atomic(path, {**saved, "status": saved.get("status") if saved.get("status") == "running" else "starting",
                             "phase": what, "phase_since": now, "started_at": started, "updated_at": now})


class Progress:
    def __init__(self, run_dir: Path, name: str, total: int, start: int, enabled: bool):
        self.path = Path(run_dir) / "progress.json"
        self.name, self.total, self.start_step = name, total, start
        self.enabled = enabled
        self.t0 = time.time()
        self.who = identity()  # pid, host and start time: how the launcher tells a live run from a dead one
        self.pass_rate = None
        self.extra: dict = {}
        """Written into every progress.json (e.g. the run's generator process ids)."""
        self.bar = None
        if enabled and sys.stdout.isatty() and not os.environ.get("SCALERL_NO_BAR"):
            self.bar = Bar(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("pass {task.fields[pr]}"), TimeRemainingColumn(), transient=False)
            self.task = self.bar.add_task(name[:40], total=total, completed=start, pr="-")
            self.bar.start()

    def eta_s(self, step: int) -> float | None:
        done = step - self.start_step
        if done <= 0:
            return None
        return (time.time() - self.t0) / done * (self.total - step)

    def update(self, step: int, status: str = "running", pass_rate: float | None = None, **extra) -> None:
        if not self.enabled:
            return
        if pass_rate is not None:
            self.pass_rate = pass_rate
            if self.bar is None:
                eta = self.eta_s(step)
                eta_txt = f", eta {eta / 60:.1f} min" if eta is not None else ""
                print(f"[{self.name}] step {step}/{self.total} pass_rate {pass_rate:.3f}{eta_txt}", flush=True)
        if self.bar is not None:
            pr = "-" if self.pass_rate is None else f"{self.pass_rate:.3f}"
            self.bar.update(self.task, completed=step, pr=pr)
        write_json_atomic(self.path, {
            "status": status, "step": step, "total": self.total, "pass_rate": self.pass_rate,
            "eta_s": self.eta_s(step), "updated_at": time.time(), **self.who,
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"), **self.extra, **extra,
        })

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
