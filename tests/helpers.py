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


def compose(overrides: list[str] | None = None):
    """Compose the run config exactly as the CLI does (no launching)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from scalerl.config.store import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides or []))
