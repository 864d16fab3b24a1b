"""Reading runs, from disk or W&B, into the tidy points table of `analysis.runs`.

    read_sweep(dir)         a scalerl sweep: any directory holding metrics.jsonl (or a
                            summary.json) is a run, at any depth (Hydra nests one level)
    read_wandb_group(...)   a W&B group through the public API (needs network)
A points CSV is read by `analysis.points_csv` (which also picks the reader for a path), and
results are written by `analysis.writing`; both go through the bounds and checks here.
The trainer's run-directory contract:
    config.yaml    resolved config; each axis is a node with a `name`; recipe, seed,
                   batch.prompts, batch.generations
    metrics.jsonl  one eval per line, strictly increasing step: step, compute, device_hours,
                   tokens, epoch, pass_rate (= reward); a killed run may leave a partial last line
    summary.json   status, run_name, arm_hash, axes, seed, loss_clamp, error (may be absent)
Input the trainer could not have written (a corrupt middle row, steps out of order, compute
that falls while the step rises, a reward outside [0, 1], negative compute, a CSV that is
empty, ragged or binary) raises `InputError`, one line naming the file and the line; the
CLI prints it and exits 2.  Every file is read through `read_bounded`: a FIFO, a device
(a link to /dev/zero) or a file over MAX_BYTES is refused before a byte is read, so no
input can hang the analysis or fill memory.  The work is bounded too, not only the bytes:
a run of more than MAX_ROWS evals is refused (a fit's grid holds every point, ~50 kB each).
"""
from __future__ import annotations

import fnmatch
import json
import math
import os
import stat
from pathlib import Path

import pandas as pd
import yaml

AXES = ("compute", "device_hours", "tokens", "wall_s")  # x-axes the trainer logs (wall_s: step wall time)
REWARD_KEY = "pass_rate"
MAX_BYTES = 256 << 20     # any one input file: 100k evals of a 1 kB row are 100 MB
MAX_CUT_LINE = 1 << 20    # a kill cuts a row short, and a row is ~1 kB: a longer unended line is not one
MAX_ROWS = 10_000         # evals per run: a fit of 10k points peaks near 0.7 GB and a minute; 100k took 5.3 GB
CUMULATIVE = ("compute", "device_hours", "tokens")   # never fall while the step rises
WANDB_STATES = {"finished": "done", "running": "running", "failed": "failed",
                "crashed": "failed", "killed": "failed", "preempted": "preempted"}


class InputError(ValueError):
    """Input the analysis cannot trust; the message is one line naming the file (and line)."""


def check_value(where, column, value):
    """Raise InputError unless `value` is a plausible `column` value (NaN: missing, allowed)."""
    if isinstance(value, float) and math.isnan(value):
        return
    if column == "compute" and not value >= 0:
        raise InputError(f"{where}: compute {value!r} is negative or not a number")
    if column == "reward" and not 0.0 <= value <= 1.0:
        raise InputError(f"{where}: reward {value!r} is outside [0, 1]")


def read_bounded(path, limit=None):
    """The bytes of the regular file `path`; None if it does not exist.

    Opened without blocking and checked on the open descriptor, so a FIFO (which would
    block forever), a device such as /dev/zero (endless), a directory or a file over
    `limit` bytes (default MAX_BYTES) raises InputError instead of hanging or filling memory.
    """
    limit = MAX_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise InputError(f"{path}: a directory, not a file") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device or socket"
            raise InputError(f"{path}: {kind}, not a regular file; refusing to read it")
        if info.st_size > limit:
            raise InputError(f"{path}: {info.st_size / 2**20:.0f} MiB, over the {limit / 2**20:.0f} MiB"
                             f" bound on an input file (analysis.io.MAX_BYTES)")
        data = f.read(limit + 1)             # a file growing while read is bounded too
    if len(data) > limit:
        raise InputError(f"{path}: over the {limit / 2**20:.0f} MiB bound on an input file")
    return data


# ---------------------------------------------------------------- scalerl sweep directories
def is_run(path):
    return any(os.path.lexists(os.path.join(path, name)) for name in ("metrics.jsonl", "summary.json"))


def find_run_dirs(root):
    """Directories under (or equal to) `root` holding metrics.jsonl or summary.json.

    The walk never follows a symbolic link: a link is read only when it points at a run
    directory itself, and then only that directory, never below it.  That keeps the
    sweep launcher's contract, which links a finished run it reuses from another study
    (same config hash) into the new study's home (scalerl.launch.rundir.link_run), while
    a link to `/` or to anything that is not a run cannot make the analysis walk the
    filesystem.
    """
    root, found, seen = Path(root), set(), set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if {"metrics.jsonl", "summary.json"} & set(filenames):
            found.add(Path(dirpath))
        linked = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in linked:                 # a reused run: read it, do not descend into it
            path = os.path.join(dirpath, name)
            if is_run(path):
                found.add(Path(path))
    unique = {}
    for path in sorted(found):              # two links to one run: keep the first
        unique.setdefault(os.path.realpath(path), path)
    return sorted(unique.values())


def read_metrics(path):
    """Eval records from a metrics.jsonl (none if it is missing).

    Only a last line without its newline (a killed run's row) may be unparseable; any
    other bad line, or a step that does not increase, raises InputError naming the line.
    """
    data = read_bounded(path)
    if data is None:
        return []
    rows = data.count(b"\n")
    if rows > MAX_ROWS:                  # before parsing: 2M JSON rows would take GBs as dicts
        raise InputError(f"{path}: {rows} rows, over the bound of {MAX_ROWS} evals per run (analysis.io.MAX_ROWS);"
                         f" thin it (e.g. keep every {-(-rows // MAX_ROWS)}th row) before fitting")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file") from None
    lines = text.split("\n")
    records, previous, totals = [], None, {}
    for number, line in enumerate(lines, 1):
        last = number == len(lines)
        if last and not line.strip():
            break
        try:
            record = json.loads(line)
        except ValueError:
            if last and len(line) <= MAX_CUT_LINE:   # cut short by a kill: the run redoes it on resume
                break
            if last:
                raise InputError(f"{path} line {number}: {len(line)} characters with no newline and no"
                                 f" JSON row; a row cut short by a kill is under {MAX_CUT_LINE} characters") from None
            raise InputError(f"{path} line {number}: not a JSON row: {line[:60]!r}") from None
        if not isinstance(record, dict):
            raise InputError(f"{path} line {number}: not a JSON object: {line[:60]!r}")
        step = record.get("step")
        if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float))):
            raise InputError(f"{path} line {number}: step {step!r} is not a number")
        if step is not None:
            if previous is not None and not step > previous:
                raise InputError(f"{path} line {number}: step {step} after step {previous};"
                                 " rows must be strictly increasing in step")
            previous = step
        check_value(f"{path} line {number}", "reward", _number(record.get(REWARD_KEY)))
        for axis in AXES:
            check_value(f"{path} line {number}", "compute", _number(record.get(axis)))
        for axis in CUMULATIVE:         # cumulative: R0 and the fit window read them as ordered
            value = _number(record.get(axis))
            if math.isnan(value):
                continue
            if axis in totals and value < totals[axis][0]:
                raise InputError(f"{path} line {number}: {axis} {value:g} at step {step} is below"
                                 f" {totals[axis][0]:g} at line {totals[axis][1]}; it must not fall as the step rises")
            totals[axis] = (value, number)
        records.append(record)
    return records


def _read_mapping(path, loader):
    """The mapping in a JSON or YAML file; {} if it is missing or not a mapping.  A FIFO,
    a device or an oversized file raises InputError (read_bounded)."""
    try:
        raw = read_bounded(path, limit=min(MAX_BYTES, 16 << 20))
        data = {} if raw is None else loader(raw.decode())
    except InputError:
        raise
    except (OSError, ValueError, yaml.YAMLError):     # UnicodeDecodeError is a ValueError
        return {}
    return data if isinstance(data, dict) else {}


def axis_labels(config, summary):
    """Axis columns: summary.json's `axes`, else every config node with a `name` field.

    Adds recipe, batch_prompts and batch_generations from the config when present.
    """
    if isinstance(summary.get("axes"), dict) and summary["axes"]:
        axes = {str(k): v for k, v in summary["axes"].items()}
    else:
        axes = {k: v["name"] for k, v in config.items() if isinstance(v, dict) and "name" in v}
    if "recipe" in config and "recipe" not in axes:
        axes["recipe"] = config["recipe"]
    batch = config.get("batch") if isinstance(config.get("batch"), dict) else {}
    for key in ("prompts", "generations"):
        if key in batch:
            axes[f"batch_{key}"] = batch[key]
    return axes


def _number(value):
    """float(value), or nan for None, strings and other non-numbers."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _frame(records, meta, *, axis, reward_key):
    """Tidy points from eval records (one NaN row when there are none) plus per-run columns."""
    def value(record, key):
        if key == "step" and "step" not in record:      # W&B history has its own _step
            key = "_step"
        return _number(record.get(key))

    columns = {"compute": axis, "reward": reward_key, "step": "step", "epoch": "epoch"}
    frame = pd.DataFrame({col: [value(r, key) for r in records] or [math.nan]
                          for col, key in columns.items()})
    for key, value in meta.items():
        frame[key] = value
    return frame


def is_multi(metrics):
    """Several curves per run: more than one metric, or a pattern such as 'pass_rate/*'."""
    return len(metrics) > 1 or any(ch in m for m in metrics for ch in "*?[")


def expand_metrics(metrics, records):
    """The metric columns `metrics` (names or fnmatch patterns) select among the records' keys."""
    keys = sorted({k for r in records for k in r})
    out = []
    for m in metrics:
        out += [k for k in keys if fnmatch.fnmatchcase(k, m) and k not in out] if is_multi([m]) else [m]
    return out


def per_metric(frame_for, meta, records, metrics):
    """One tidy frame per selected metric; with several, each curve is its own run `<run> [<metric>]`
    (and its own arm), with a `metric` column the leaderboard shows like an axis."""
    if not is_multi(metrics):
        return frame_for(metrics[0], meta)
    frames = []
    for metric in expand_metrics(metrics, records):
        arm = meta.get("arm")
        frames.append(frame_for(metric, {**meta, "run": f"{meta['run']} [{metric}]", "metric": metric,
                                         "arm": f"{arm}|{metric}" if arm else None}))
    return pd.concat(frames, ignore_index=True) if frames else frame_for(metrics[0], meta).iloc[0:0]


def read_run(run_dir, *, name=None, axis="compute", metrics=(REWARD_KEY,)):
    """Tidy points of one run directory (one NaN row if it has no evals).

    metrics: the column(s) to fit, default pass_rate; e.g. ('pass_rate/math', 'pass_rate/code')
    or ('pass_rate/*',) for one curve per task of a `task=mix` run."""
    run_dir = Path(run_dir)
    summary = _read_mapping(run_dir / "summary.json", json.loads)
    config = _read_mapping(run_dir / "config.yaml", yaml.safe_load)
    records = read_metrics(run_dir / "metrics.jsonl")
    meta = {
        "run": summary.get("run_name") or name or run_dir.name,
        "seed": summary.get("seed", config.get("seed")),
        "arm": summary.get("arm_hash"),
        "run_status": summary.get("status"),
        "loss_clamp": summary.get("loss_clamp"),
        "error": summary.get("error"),
        "run_dir": str(run_dir),
        "study": summary.get("study", config.get("study")),
        "train_steps": (config.get("train") or {}).get("steps") if isinstance(config.get("train"), dict) else None,
        **axis_labels(config, summary),
    }
    return per_metric(lambda key, m: _frame(records, m, axis=axis, reward_key=key), meta, records, list(metrics))


def read_stop_records(points):
    """{run: record} for the runs a sweep stopped early: summary.json's `early_stop`, else a
    pending stop.json (the run had not yet seen it).  Runs without a run_dir are skipped."""
    if "run_dir" not in getattr(points, "columns", ()):
        return {}
    records = {}
    for run, run_dir in points.groupby("run", sort=False)["run_dir"].first().items():
        if not isinstance(run_dir, str):
            continue
        summary = _read_mapping(Path(run_dir) / "summary.json", json.loads)
        record = summary.get("early_stop") or _read_mapping(Path(run_dir) / "stop.json", json.loads)
        if isinstance(record, dict) and record:
            records[run] = record
    return records


def read_sweep(path, *, axis="compute", metrics=(REWARD_KEY,)):
    """Tidy points of every run under a sweep directory; names default to relative paths."""
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    root = Path(path)
    frames = []
    for run_dir in find_run_dirs(root):
        rel = run_dir.relative_to(root).as_posix()
        frames.append(read_run(run_dir, name=rel if rel != "." else root.name, axis=axis, metrics=metrics))
    if not frames:
        return pd.DataFrame(columns=["run", "compute", "reward"])
    points = pd.concat(frames, ignore_index=True)
    if points.empty and is_multi(metrics):   # runs exist; the pattern picked none of their columns
        columns = sorted({k for d in find_run_dirs(root) for r in read_metrics(d / "metrics.jsonl") for k in r})
        raise InputError(f"{path}: --metric {' '.join(metrics)} matched no metrics.jsonl column of its {len(frames)}"
                         f" run(s); columns: {', '.join(columns) or 'none'}")
    names = points.groupby("run_dir", sort=False)["run"].first()
    if names.duplicated().any():           # two runs claim one run_name: keep them apart
        points["run"] = points["run"] + " @" + points["run_dir"].map(
            lambda d: Path(d).relative_to(root).as_posix())
    return points


# ---------------------------------------------------------------- W&B
def read_wandb_group(project, group, *, entity=None, api=None, axis="compute", reward_key=REWARD_KEY):
    """Tidy points of every run in a W&B group, through the public API.

    Needs network and a W&B login, so it cannot run in offline tests: they pass a fake
    `api` with the same surface (api.runs(path, filters=...) yielding runs with .name,
    .id, .config, .summary, .state and .scan_history()).  Nothing else here is mocked.
    """
    if api is None:
        import wandb  # lazy: reading disk must not need wandb
        api = wandb.Api()
    path = f"{entity}/{project}" if entity else project
    frames, seen = [], set()
    for run in api.runs(path, filters={"group": group}):
        config, summary = dict(run.config or {}), dict(run.summary or {})
        rows = [r for r in run.scan_history() if reward_key in r]
        name = run.name if run.name not in seen else f"{run.name}-{run.id}"
        seen.add(name)
        meta = {"run": name, "seed": config.get("seed"),
                "arm": summary.get("arm_hash", config.get("arm_hash")),
                "run_status": WANDB_STATES.get(str(run.state), str(run.state)),
                "loss_clamp": summary.get("loss_clamp"), **axis_labels(config, summary)}
        frames.append(_frame(rows, meta, axis=axis, reward_key=reward_key))
    if not frames:
        return pd.DataFrame(columns=["run", "compute", "reward"])
    return pd.concat(frames, ignore_index=True)
