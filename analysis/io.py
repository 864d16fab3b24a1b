"""All reading and writing of the analysis package, and nothing else.

Readers turn a source into the tidy points table of `analysis.runs`:
    read_sweep(dir)         a scalerl sweep: any directory holding metrics.jsonl (or a
                            summary.json) is a run, at any depth (Hydra nests one level)
    read_points_csv(file)   run,compute,reward[,r0,seed,<axis>...]
    read_wandb_group(...)   a W&B group through the public API (needs network)
Writers: `write_csv`, `save_figure`, both atomic (a temporary file renamed over the
result), so a crash or a full disk never leaves half a leaderboard.
The trainer's run-directory contract:
    config.yaml    resolved config; each axis is a node with a `name`; recipe, seed,
                   batch.prompts, batch.generations
    metrics.jsonl  one eval per line, strictly increasing step: step, compute, device_hours,
                   tokens, epoch, pass_rate (= reward); a killed run may leave a partial last line
    summary.json   status, run_name, arm_hash, axes, seed, loss_clamp, error (may be absent)
Input the trainer could not have written (a corrupt middle row, steps out of order, a
reward outside [0, 1], negative compute, a CSV that is empty, ragged or binary) raises
`InputError`, one line naming the file and the line; the CLI prints it and exits 2.
"""
from __future__ import annotations

import fnmatch
import json
import math
import os
from pathlib import Path

import pandas as pd
import yaml

AXES = ("compute", "device_hours", "tokens", "wall_s")  # x-axes the trainer logs (wall_s: step wall time)
REWARD_KEY = "pass_rate"
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


# ---------------------------------------------------------------- scalerl sweep directories
def find_run_dirs(root):
    """Directories under (or equal to) `root` holding metrics.jsonl or summary.json.

    Symbolic links are followed: a sweep links in the finished runs it reuses from other
    studies (same config hash) instead of training them again.
    """
    root, found, seen = Path(root), set(), set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:                    # a link cycle, or two links to one run
            dirnames[:] = []
            continue
        seen.add(real)
        if {"metrics.jsonl", "summary.json"} & set(filenames):
            found.add(Path(dirpath))
    return sorted(found)


def read_metrics(path):
    """Eval records from a metrics.jsonl (none if it is missing).

    Only a last line without its newline (a killed run's row) may be unparseable; any
    other bad line, or a step that does not increase, raises InputError naming the line.
    """
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file") from None
    lines = text.split("\n")
    records, previous = [], None
    for number, line in enumerate(lines, 1):
        last = number == len(lines)
        if last and not line.strip():
            break
        try:
            record = json.loads(line)
        except ValueError:
            if last:                    # cut short by a kill: the run redoes it on resume
                break
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
        records.append(record)
    return records


def _read_mapping(path, loader):
    try:
        data = loader(Path(path).read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def run_axes(config, summary):
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
        **run_axes(config, summary),
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
    names = points.groupby("run_dir", sort=False)["run"].first()
    if names.duplicated().any():           # two runs claim one run_name: keep them apart
        points["run"] = points["run"] + " @" + points["run_dir"].map(
            lambda d: Path(d).relative_to(root).as_posix())
    return points


# ---------------------------------------------------------------- CSV
def read_points_csv(path, metric=None):
    """A tidy CSV with at least run,compute,reward (optional r0, seed, and axis columns);
    `metric` names another column to fit instead of reward.

    Raises InputError for an empty, ragged or binary file, a missing column, and a value
    that is not a number, a negative compute or a reward outside [0, 1] (naming the line).
    """
    with open(path, "rb") as f:
        if b"\x00" in f.read(1 << 16):
            raise InputError(f"{path}: not a text CSV file (binary data)")
    try:
        points = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty file; need a header run,compute,reward and one row per eval") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text CSV file") from None
    except pd.errors.ParserError as err:
        raise InputError(f"{path}: not a valid CSV ({str(err).strip().splitlines()[-1]})") from None
    if metric and metric != REWARD_KEY:
        if metric not in points.columns:
            raise InputError(f"{path}: no column {metric!r} (from --metric); columns: {list(points.columns)}")
        points = points.drop(columns=["reward"], errors="ignore").rename(columns={metric: "reward"})
    missing = [c for c in ("run", "compute", "reward") if c not in points.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; need run,compute,reward")
    if points.empty:
        raise InputError(f"{path}: no rows under the header")
    for column in ("compute", "reward", "r0"):
        if column not in points.columns:
            continue
        values = pd.to_numeric(points[column], errors="coerce")
        bad = values.isna() & points[column].notna()
        if bad.any():
            row = int(bad.idxmax())
            raise InputError(f"{path} line {row + 2}: {column} {points[column][row]!r} is not a number")
        for row, value in values.items():
            check_value(f"{path} line {row + 2}", "reward" if column == "r0" else column, float(value))
        points[column] = values
    points["run"] = points["run"].astype(str)
    return points


def read_points(path, *, axis="compute", metrics=(REWARD_KEY,)):
    """Sweep directory or points CSV, whichever `path` is."""
    path = Path(path)
    if path.is_dir():
        return read_sweep(path, axis=axis, metrics=metrics)
    if path.is_file():
        if is_multi(metrics):
            raise InputError("a points CSV holds one curve per run: give --metric a single column name")
        return read_points_csv(path, metrics[0])
    raise FileNotFoundError(f"{path}: neither a sweep directory nor a points CSV")


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
                "loss_clamp": summary.get("loss_clamp"), **run_axes(config, summary)}
        frames.append(_frame(rows, meta, axis=axis, reward_key=reward_key))
    if not frames:
        return pd.DataFrame(columns=["run", "compute", "reward"])
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------- writing
def _atomic(path, write):
    """Write through a temporary next to `path`, then rename it over `path`; never half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_csv(table, path):
    return _atomic(path, lambda tmp: table.to_csv(tmp, index=False))


def save_figure(fig, path, dpi=130):
    return _atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight", facecolor="white",
                                                 format=Path(path).suffix.lstrip(".") or "png"))


def safe_name(text, limit=80):
    """A file-name-safe version of a run name."""
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))
    return keep.strip("._")[:limit] or "run"

