"""What ``python -m scalerl.sweep -m ...`` does between parsing and launching.

1. Expand the arms: comma lists (Cartesian, as in Hydra) crossed with the
   explicit arms of any study file (``sweep=loo``). Without ``study=``, the
   sweep's home is named from its own overrides (``rundir.default_study``), so
   two different sweeps never share a folder, a leaderboard or a W&B group.
2. Compose and validate every arm *before* launching anything, with the data-
   parallel world size its launcher gives it; a bad value fails here, naming
   the key.
3. Look at each arm's run directory (named by config hash): skip finished
   arms, (re)launch pending, interrupted and failed ones, and wait for arms that
   another live process trains (``launch_and_adopt``). A pending arm whose
   config hash already finished in another study is linked in, not trained
   again (``--fresh`` trains it anyway).
4. When every arm has settled: report failures with their logs, and write the
   leaderboard of this sweep's arms, its W&B summary run and the sync hint
   (``scalerl.launch.sweep_summary``).
"""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from omegaconf import OmegaConf, open_dict, read_write
from rich.console import Console
from rich.table import Table

from scalerl.config import ConfigError, as_config_error, check, validate
from scalerl.core.jsonio import read_json, write_json_atomic
from scalerl.launch import cost_plan, early_stop, rundir
from scalerl.launch.inputs import check_machine
from scalerl.launch.jobs import check_launcher, launcher_world_size
from scalerl.launch.sweep_summary import sweep_wandb, write_leaderboard
from scalerl.launch.expansion import MAX_ARMS, Progress, check_size, sweep_size
from scalerl.launch.studies import expand_studies, merge, read_studies, study_size

LAUNCH_STATES = ("pending", "interrupted", "failed")
LIVE_STATES = ("running", "queued")
MAX_LAUNCHES = 3


@dataclass
class Arm:
    overrides: list[str]
    run_dir: Path
    state: str
    error: str | None = None
    key: str = "overrides"
    reused_from: Path | None = None
    """A finished run of the same config hash in another study, linked in at launch."""
    wandb: dict | None = None
    """The arm's W&B settings (project, entity, group, mode) when it logs to W&B."""
    arm_hash: str = ""
    err: ConfigError | None = None
    """Why the arm is invalid (state ``invalid``)."""
    resources: str = ""
    """The arm's memory and threads estimate against its target machine (config/resources.py)."""
    warnings: tuple = ()
    config: object = None
    """The arm's validated Config (its cost estimate, launch/cost_plan.py)."""

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def files(self) -> Path:
        """Where the arm's files are now: its own directory, or the finished run it reuses."""
        return self.reused_from if self.reused_from is not None and not self.run_dir.exists() else self.run_dir


def expand_arms(arguments: list[str], config_loader, max_arms: int = MAX_ARMS) -> tuple[str | None, list[list[str]]]:
    """Command-line overrides (+ study files) -> (study name, override sets), counted before expanding."""
    parser = OverridesParser.create(config_loader=config_loader)
    study_names: list[str] = []
    rest = []
    for o in parser.parse_overrides(list(arguments)):
        if o.get_key_element() == "sweep":
            check(not o.is_sweep_override(), "sweep", f"`{o.input_line}` is a sweep over studies; studies are crossed "
                  "as a list: sweep=[loss,seeds]")
            value = o.value()
            study_names += [str(v) for v in (value if isinstance(value, list) else [value])] if value else []
        else:
            rest.append(o)
    specs = read_studies(study_names)
    check_size({o.get_key_element(): sweep_size(o) for o in rest},
               [(name, study_size(spec)) for name, spec in zip(study_names, specs)], max_arms)
    cartesian = [list(x) for batch in BasicSweeper.split_arguments(rest, None) for x in batch] or [[]]
    study = "+".join(Path(n).stem for n in study_names) if study_names else None
    arms = [merge(a, c) for a in expand_studies(specs) for c in cartesian]
    if any(x.split("=", 1)[0] == "study" for x in arguments):
        return study, arms
    home = rundir.default_study([Path(n).stem for n in study_names], [a for a in arguments if _key(a) != "sweep"])
    return home, [a + [f"study='{home}'"] for a in arms]


def job_config(cfg):
    """The task's view of a composed config: everything but the ``hydra`` node."""
    job = copy.deepcopy(cfg)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return job


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def _trains_here(cfg) -> bool:
    """The arms train on this machine (the local and submitit-local launchers)."""
    target = str(OmegaConf.select(cfg, "hydra.launcher._target_", default="") or "")
    return "Slurm" not in target


def plan_arms(overrides_list: list[list[str]], config, config_loader, *, reuse: bool = True) -> list[Arm]:
    arms, progress = [], Progress(len(overrides_list))
    for overrides in overrides_list:
        progress.tick(len(arms))
        try:
            cfg = config_loader.load_sweep_config(config, list(overrides))
            obj = validate(job_config(cfg), world_size=launcher_world_size(cfg))
            here = _trains_here(cfg)  # a SLURM sweep's arms run elsewhere: their machine is checked there
            if here:
                generator_nodes = int(OmegaConf.select(cfg, "async.generator_nodes", default=0) or 0)
                check(not generator_nodes, "async.generator_nodes", f"{generator_nodes} generator node(s) are the "
                      "last nodes of a SLURM job, and this launcher runs arms on this machine; use "
                      "hydra/launcher=slurm hydra.launcher.nodes=<trainer nodes + generator nodes>, or 0")
            resources, warnings = check_machine(obj, OmegaConf.select(cfg, "hydra.launcher", default=None),
                                                this_machine=here, world_size=launcher_world_size(cfg))
            run_dir = rundir.sweep_run_dir(cfg)
            arm = Arm(list(overrides), run_dir, _state(run_dir), wandb=_wandb_settings(cfg), arm_hash=rundir.arm_hash(cfg),
                      resources=resources, warnings=tuple(warnings), config=obj)
            if reuse and arm.state == "pending":
                arm.reused_from = _finished_elsewhere(cfg, run_dir)
                arm.state = "done" if arm.reused_from is not None else arm.state
            elif not reuse and run_dir.is_symlink():        # --fresh: a linked-in run is trained here instead
                arm.state = "pending"
            arms.append(arm)
        except Exception as e:  # our checks, and Hydra's (unknown option, a key the option lacks, bad syntax)
            err = as_config_error(e)
            arms.append(Arm(list(overrides), Path(" ".join(overrides) or "default"), "invalid", str(err), err.key, err=err))
    return arms


def _finished_elsewhere(cfg, run_dir: Path) -> Path | None:
    """The same config hash, finished in another study or as a single run (an arm whose own
    folder already holds files trains there instead)."""
    if run_dir.exists() and any(run_dir.iterdir()):
        return None
    out_root = Path(str(cfg.out_root))
    roots = list(dict.fromkeys([out_root / "sweeps", out_root / "runs", run_dir.parent.parent]))
    return rundir.find_finished(rundir.config_hash(cfg), roots, exclude=run_dir)


def _wandb_settings(cfg) -> dict | None:
    """What the sweep's W&B summary run needs to join its arms: project, entity, group, mode."""
    logger = cfg.logger
    if str(logger.name) != "wandb":
        return None
    return {"project": logger.project, "entity": logger.entity, "group": logger.group or str(cfg.study),
            "mode": logger.mode}


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
        prog = read_json(a.files / "progress.json") or {}
        summary = read_json(a.files / "summary.json") or {}
        pr = summary.get("final_pass_rate", prog.get("pass_rate"))
        step = f"{prog.get('step', '-')}/{prog.get('total', '-')}" if prog else "-"
        color = {"done": "green", "failed": "red", "invalid": "red", "running": "yellow", "queued": "yellow",
                 "stopped_early": "cyan"}.get(a.state, "")
        state = a.state + (" (reused)" if a.reused_from is not None else "")
        where = str(a.run_dir) + (f" -> {a.reused_from}" if a.reused_from is not None else "")
        table.add_row(str(i), " ".join(o for o in a.overrides if not o.startswith("study=")) or "(defaults)",
                      f"[{color}]{state}[/]" if color else state, step, "-" if pr is None else f"{pr:.3f}", where)
    Console(width=None if sys.stdout.isatty() else 200).print(table)


LAUNCHER_MINIMUMS = {"threads_per_arm": 1, "n_parallel": 0, "nodes": 1, "tasks_per_node": 1, "cpus_per_task": 1,
                     "gpus_per_node": 0, "mem_gb": 1, "timeout_min": 1, "array_parallelism": 1,
                     "signal_delay_s": 0, "max_num_timeout": 0}
"""Integer settings of scalerl's launchers, with their least valid value (only those a launcher has)."""


def check_launch_settings(sweeper) -> None:
    """The launcher's and sweeper's own settings, before anything launches (Hydra only stores them)."""
    launcher = OmegaConf.select(sweeper.config, "hydra.launcher", default=None) or {}
    for key, least in LAUNCHER_MINIMUMS.items():
        value = launcher.get(key) if key in launcher else None
        check(value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= least),
              f"hydra.launcher.{key}", f"must be an integer >= {least}, got {value!r}")
    if "gpus_per_arm" in launcher:
        value = launcher.get("gpus_per_arm")
        check(value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1),
              "hydra.launcher.gpus_per_arm", f"must be auto or an integer >= 1, got {value!r}")
    if "share_gpus" in launcher:
        check(isinstance(launcher.get("share_gpus"), bool), "hydra.launcher.share_gpus",
              f"must be true or false, got {launcher.get('share_gpus')!r}")
    n_boot = sweeper.n_boot  # None: the analysis default, the same as `python -m analysis fit`
    check(n_boot is None or (isinstance(n_boot, int) and not isinstance(n_boot, bool) and n_boot >= 0),
          "hydra.sweeper.n_boot", f"must be an integer >= 0 (or null for the analysis default), got {n_boot!r}")


def run_sweep(sweeper, arguments: list[str]) -> list:
    """Plan, validate and launch the arms; ``sweeper.action`` is run, status or dry-run."""
    action = sweeper.action
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and action == "run":
        raise ConfigError("hydra/launcher", "a sweep (-m) cannot run under torchrun: torchrun starts the ranks of one run "
                          "(drop -m), and hydra/launcher=slurm hydra.launcher.tasks_per_node=N gives every arm N ranks")
    check_launcher(sweeper.config)
    loader = sweeper.hydra_context.config_loader
    check_launch_settings(sweeper)
    study, overrides_list = expand_arms(arguments, loader, getattr(sweeper, "max_arms", MAX_ARMS))
    if getattr(sweeper, "early_stop", False):
        early_stop.stop_rule(sweeper.stop_rule)  # a bad setting fails here, naming its key
    arms = plan_arms(overrides_list, sweeper.config, loader, reuse=getattr(sweeper, "reuse", True))
    parents = {a.run_dir.parent for a in arms if a.state != "invalid"}
    sweep_dir = parents.pop() if len(parents) == 1 else Path(str(sweeper.config.hydra.sweep.dir))
    bad = [a for a in arms if a.state == "invalid"]
    if bad:
        raise invalid_arms(bad, len(arms))
    check_scheduler(sweeper.config, action)
    print_table(arms, f"{len(arms)} arm(s) in {sweep_dir}" + (f" (study {study})" if study else ""))
    print_resources(arms)
    costs = cost_plan.report(arms, sweeper, LAUNCH_STATES) if action != "status" else None
    if action in ("status", "dry-run"):
        return []
    if costs:
        cost_plan.record(*costs)
    reused = [a for a in arms if a.reused_from is not None]
    for a in reused:
        rundir.link_run(a.run_dir, a.reused_from)
    if reused:
        print(f"[scalerl] reusing {len(reused)} finished run(s) of the same config hash from other studies "
              "(linked in; --fresh trains such runs here instead)")
    for a in arms:
        if a.state in LAUNCH_STATES and a.run_dir.is_symlink():  # --fresh, or a reused run deleted since:
            a.run_dir.unlink()                                     # train here (the link goes, not its target)
    with early_stop.watching(sweeper, arms) as watcher:
        returns = launch_and_adopt(early_stop.race_order(arms) if watcher else arms, sweeper.launcher)
    failed = [(a, (read_json(a.run_dir / "summary.json") or {}).get("error")) for a in arms if a.state == "failed"]
    _report(arms, failed, sweep_dir, sweeper)
    if failed:
        sys.exit(1)
    return returns


def invalid_arms(bad: list[Arm], n: int, what: str = "arms") -> ConfigError:
    """One line per distinct error (the arms that share it counted), the first one returned to be raised:
    the last line the user sees repeats the reason and names the key."""
    by_error: dict[str, list[Arm]] = {}
    for a in bad:
        by_error.setdefault(a.error or "", []).append(a)
    first, *others = by_error.values()
    for group in others:
        print(f"[scalerl] config error: {group[0].error} [{_which(group)}]", file=sys.stderr)
    err = first[0].err or ConfigError(first[0].key, first[0].error or "invalid")
    return ConfigError(err.key, f"{err.reason} [{_which(first)}; {len(bad)} of {n} {what} invalid, nothing was launched]",
                       err.fix)


def _which(group: list[Arm]) -> str:
    label = " ".join(o for o in group[0].overrides if not o.startswith("study=")) or "the defaults"
    return f"arm `{label}`" + (f" and {len(group) - 1} more" if len(group) > 1 else "")


def check_scheduler(config, action: str) -> None:
    """A SLURM sweep needs SLURM here: submitit submits with sbatch and polls with squeue. A dry run
    only warns, so a SLURM sweep's arms can be validated on a laptop before it goes to the cluster."""
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    if "Slurm" in target and (shutil.which("sbatch") is None or shutil.which("squeue") is None):
        why = "slurm submits with sbatch and watches with squeue, and this machine's PATH lacks them"
        check(action != "run", "hydra/launcher", f"{why}; run it from a SLURM login node, or use hydra/launcher=local")
        print(f"[scalerl] warning: {why}: this sweep would be refused here", file=sys.stderr)


def print_resources(arms: list[Arm]) -> None:
    """Each arm's memory and threads estimate (once when all agree), then the warnings, each once."""
    lines = list(dict.fromkeys(a.resources for a in arms if a.resources))
    if len(lines) == 1:
        print(f"[scalerl] resources: {lines[0]}")
    else:
        for i, a in enumerate(arms):
            print(f"[scalerl] resources of arm {i}: {a.resources}")
    for w in dict.fromkeys(w for a in arms for w in a.warnings):
        print(f"[scalerl] warning: {w}", file=sys.stderr)


def launch_and_adopt(arms: list[Arm], launcher) -> list:
    """Launch the arms nobody trains, wait for the ones another live process trains, until all settle.

    Another process may own an arm: a second sweep on the same directory, the arms of a
    killed sweep finishing their last step, a queued SLURM job. Launching those would
    only bounce off the run's lock (or double-submit), and not waiting for them would
    write a leaderboard they are missing; so they are adopted: waited for, and launched
    in a later round if their owner stops before finishing them. An arm this sweep ran
    is not run again (its failure is reported), nor is one that failed in its owner's
    hands; a launch that found the arm busy does not count, up to ``MAX_LAUNCHES`` times.
    """
    ran: set[Path] = set()
    bounced: dict[Path, int] = {}
    adopted: set[Path] = set()
    returns, first = [], True

    def launchable(a: Arm) -> bool:
        return (a.state in LAUNCH_STATES and a.run_dir not in ran and bounced.get(a.run_dir, 0) < MAX_LAUNCHES
                and not (a.state == "failed" and a.run_dir in adopted))

    while True:
        todo = [a for a in arms if launchable(a)]
        if first:
            stopped = sum(a.state == "stopped_early" for a in arms)
            print(f"[scalerl] launching {len(todo)} arm(s); {sum(a.state == 'done' for a in arms)} already done"
                  + (f", {stopped} stopped early (not restarted)" if stopped else ""))
        elif todo:
            print(f"[scalerl] launching {len(todo)} arm(s) whose owner stopped: {', '.join(a.name for a in todo)}")
        first = False
        rets = launcher.launch([a.overrides for a in todo], initial_job_idx=len(returns)) if todo else []
        for arm, ret in zip(todo, rets):
            value = ret._return_value
            if ret.status == JobStatus.COMPLETED and isinstance(value, dict) and value.get("status") == "busy":
                bounced[arm.run_dir] = bounced.get(arm.run_dir, 0) + 1
            else:
                ran.add(arm.run_dir)
            arm.state = _state(arm.run_dir)
            if ret.status == JobStatus.FAILED and arm.state not in ("done", "failed", *LIVE_STATES):
                _mark_failed(arm, repr(ret._return_value))  # killed or cancelled before it wrote its own summary
        returns += rets
        for a in arms:
            if a.state not in ("done", "failed"):
                a.state = _state(a.run_dir)
        live = [a for a in arms if a.state in LIVE_STATES]
        if not live and not any(launchable(a) for a in arms):
            return returns
        adopted |= {a.run_dir for a in live}
        wait_for_owners(live)


def wait_for_owners(live: list[Arm]) -> None:
    """Block until none of ``live`` is running or queued in another process (polling its record)."""
    for a in live:
        p = read_json(a.run_dir / "progress.json") or {}
        who = (f"pid {p.get('pid')} on {p.get('host')}" if a.state == "running"
               else f"SLURM job {(read_json(a.run_dir / 'launch.json') or {}).get('slurm_job_id')}")
        print(f"[scalerl] waiting for {a.name}: {a.state} in another process ({who})", flush=True)
    poll = 1.0 if all(a.state == "running" for a in live) else 15.0  # squeue is not for tight loops
    last = time.time()
    while live:
        time.sleep(poll)
        for a in live:
            a.state = _state(a.run_dir)
        live = [a for a in live if a.state in LIVE_STATES]
        if live and time.time() - last > 60:
            last = time.time()
            print(f"[scalerl] still waiting for {len(live)} arm(s): {', '.join(a.name for a in live)}", flush=True)


def _mark_failed(arm: Arm, err: str) -> None:
    arm.run_dir.mkdir(parents=True, exist_ok=True)
    if rundir.arm_state(arm.run_dir) in ("done", "running"):  # never over a finished or live run's record
        return
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
        write_leaderboard(sweep_dir, [a.run_dir for a in arms], n_boot=sweeper.n_boot,
                          wandb=sweep_wandb([a.wandb for a in arms]))

