"""Helpers shared by scalerl's tests (imported as ``helpers``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_cli(args: list[str], out_root: Path, timeout: int = 600, extra_env: dict | None = None, check: bool = True):
    """Run ``python -m scalerl.sweep ARGS`` with outputs under ``out_root``."""
    env = {**os.environ, "SCALERL_OUTPUT": str(out_root), "SCALERL_NO_BAR": "1", **(extra_env or {})}
    proc = subprocess.run([sys.executable, "-m", "scalerl.sweep", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"scalerl.sweep {args} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def popen_cli(args: list[str], out_root: Path, log: Path):
    """Start ``python -m scalerl.sweep ARGS`` in the background (for kill/resume tests)."""
    env = {**os.environ, "SCALERL_OUTPUT": str(out_root), "SCALERL_NO_BAR": "1"}
    return subprocess.Popen([sys.executable, "-m", "scalerl.sweep", *args], cwd=REPO, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def read_rows(path: Path) -> list[dict]:
    import json

    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def wait_for(predicate, timeout: float = 300, what: str = "condition", proc=None):
    import time

    t0 = time.time()
    while time.time() - t0 < timeout:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
