"""What ``python -m scalerl.sweep -m ...`` does between parsing and launching.

1. Expand the arms: comma lists (Cartesian, as in Hydra) crossed with the
   explicit arms of any study file (``sweep=loo``).
2. Compose and validate every arm *before* launching anything, with the data-
   parallel world size its launcher gives it; a bad value fails here, naming
   the key.
3. Look at each arm's run directory (named by config hash): skip finished and
   live arms, (re)launch pending, interrupted and failed ones.
4. After the launcher returns: report failures with their logs, and write the
   leaderboard for the arms that finished.
"""
from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from omegaconf import open_dict, read_write
from rich.console import Console
from rich.table import Table

from scalerl.config import ConfigError, as_config_error, validate
from scalerl.config.derive import derive
from scalerl.core.jsonio import read_json, write_json_atomic
from scalerl.launch import early_stop, rundir
from scalerl.launch.jobs import launcher_world_size
from scalerl.launch.leaderboard import write_leaderboard
from scalerl.launch.studies import load_study, merge

LAUNCH_STATES = ("pending", "interrupted", "failed")


@dataclass
class Arm:
    overrides: list[str]
    run_dir: Path
    state: str
    error: str | None = None
    key: str = "overrides"
    arm_hash: str = ""

    @property
    def name(self) -> str:
        return self.run_dir.name


def expand_arms(arguments: list[str], config_loader) -> tuple[str | None, list[list[str]]]:
    """Command-line overrides (+ study files) -> (study name, override sets)."""
    parser = OverridesParser.create(config_loader=config_loader)
    study_names: list[str] = []
    rest = []
    for o in parser.parse_overrides(list(arguments)):
        if o.get_key_element() == "sweep":
            value = o.value()
            study_names += [str(v) for v in (value if isinstance(value, list) else [value])] if value else []
        else:
            rest.append(o)
    cartesian = [list(x) for batch in BasicSweeper.split_arguments(rest, None) for x in batch] or [[]]
    if not study_names:
        return None, cartesian
    study, study_arms = load_study(study_names)
    arms = [merge(a, c) for a in study_arms for c in cartesian]
    explicit_study = any(x.split("=", 1)[0] == "study" for x in arguments)
    return study, [a if explicit_study else a + [f"study={study}"] for a in arms]


def job_config(cfg):
    """The task's view of a composed config: everything but the ``hydra`` node."""
    job = copy.deepcopy(cfg)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return job


def plan_arms(overrides_list: list[list[str]], config, config_loader) -> list[Arm]:
    arms = []
    for overrides in overrides_list:
        try:
            cfg = config_loader.load_sweep_config(config, list(overrides))
            derive(validate(job_config(cfg)), world_size=launcher_world_size(cfg))
            run_dir = rundir.sweep_run_dir(cfg)
            arms.append(Arm(list(overrides), run_dir, _state(run_dir), arm_hash=rundir.arm_hash(cfg)))
        except Exception as e:  # our checks, and Hydra's (unknown option, a key the option lacks, bad syntax)
            err = as_config_error(e)
            arms.append(Arm(list(overrides), Path(" ".join(overrides) or "default"), "invalid", str(err), err.key))
    return arms


def _state(run_dir: Path) -> str:
    state = rundir.arm_state(run_dir)
    if state in ("pending", "interrupted") and _slurm_job_alive(run_dir):
        return "queued"
    return state


def _slurm_job_alive(run_dir: Path) -> bool:
    """A SLURM job launched earlier for this arm that is still pending or running."""
    job = (read_json(run_dir / "launch.json") or {}).get("slurm_job_id")
    if not job:
        return False
    try:
        out = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() in ("PENDING", "RUNNING", "CONFIGURING", "REQUEUED", "SUSPENDED")


def print_table(arms: list[Arm], title: str) -> None:
    table = Table(title=title, show_lines=False)
    for col in ("#", "arm", "state", "step", "pass rate", "run dir"):
        table.add_column(col)
    for i, a in enumerate(arms):
        prog = read_json(a.run_dir / "progress.json") or {}
        summary = read_json(a.run_dir / "summary.json") or {}
        pr = summary.get("final_pass_rate", prog.get("pass_rate"))
        step = f"{prog.get('step', '-')}/{prog.get('total', '-')}" if prog else "-"
        color = {"done": "green", "failed": "red", "invalid": "red", "running": "yellow", "queued": "yellow",
                 "stopped_early": "cyan"}.get(a.state, "")
        table.add_row(str(i), " ".join(a.overrides) or "(defaults)", f"[{color}]{a.state}[/]" if color else a.state,
                      step, "-" if pr is None else f"{pr:.3f}", str(a.run_dir))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def run_sweep(sweeper, arguments: list[str]) -> list:
    """Plan, validate and launch the arms; ``sweeper.action`` is run, status or dry-run."""
    action = sweeper.action
    loader = sweeper.hydra_context.config_loader
    study, overrides_list = expand_arms(arguments, loader)
    if getattr(sweeper, "early_stop", False):
        early_stop.stop_rule(sweeper.stop_rule)  # a bad setting fails here, naming its key
    arms = plan_arms(overrides_list, sweeper.config, loader)
    parents = {a.run_dir.parent for a in arms if a.state != "invalid"}
    sweep_dir = parents.pop() if len(parents) == 1 else Path(str(sweeper.config.hydra.sweep.dir))
    bad = [a for a in arms if a.state == "invalid"]
    if bad:
        for a in bad:
            print(f"[scalerl] invalid arm {' '.join(a.overrides)}:\n  {a.error}", file=sys.stderr)
        raise ConfigError(bad[0].key, f"{len(bad)} of {len(arms)} arms are invalid; nothing was launched")
    print_table(arms, f"{len(arms)} arm(s) in {sweep_dir}" + (f" (study {study})" if study else ""))
    if action in ("status", "dry-run"):
        return []
    todo = [a for a in arms if a.state in LAUNCH_STATES]
    live = [a for a in arms if a.state in ("running", "queued")]
    for a in live:
        print(f"[scalerl] not relaunching {a.name}: already {a.state} elsewhere")
    stopped = sum(a.state == "stopped_early" for a in arms)
    print(f"[scalerl] launching {len(todo)} arm(s); {sum(a.state == 'done' for a in arms)} already done"
          + (f", {stopped} stopped early (not restarted)" if stopped else ""))
    with early_stop.watching(sweeper, arms):
        returns = sweeper.launcher.launch([a.overrides for a in todo], initial_job_idx=0) if todo else []
    failed = []
    for arm, ret in zip(todo, returns):
        arm.state = rundir.arm_state(arm.run_dir)
        if ret.status == JobStatus.FAILED or arm.state == "failed":
            err = (read_json(arm.run_dir / "summary.json") or {}).get("error") or repr(ret._return_value)
            failed.append((arm, err))
            if arm.state != "failed":  # killed or cancelled before it could write its own summary
                _mark_failed(arm, err)
    _report(arms, failed, sweep_dir, sweeper)
    if failed:
        sys.exit(1)
    return returns


def _mark_failed(arm: Arm, err: str) -> None:
    arm.run_dir.mkdir(parents=True, exist_ok=True)
    launch = read_json(arm.run_dir / "launch.json") or {}
    write_json_atomic(arm.run_dir / "summary.json", {"status": "failed", "run_name": arm.name, "error": err,
                                                     "log": launch.get("log")})
    arm.state = "failed"


def _report(arms: list[Arm], failed, sweep_dir: Path, sweeper) -> None:
    print_table(arms, f"sweep finished: {sweep_dir}")
    for arm, err in failed:
        log = (read_json(arm.run_dir / "summary.json") or {}).get("log")
        print(f"[scalerl] FAILED {arm.name}: {str(err).splitlines()[0] if err else ''}\n          log: {log}")
    if sweeper.leaderboard:
        write_leaderboard(sweep_dir, [a.run_dir for a in arms], n_boot=sweeper.n_boot)

