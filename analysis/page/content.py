"""What the sweep report shows, gathered from a sweep's files alone (no plotting, no HTML).

Inputs: the results directory's leaderboard.csv and analysis.json (the fit's settings), the
run directories under the sweep directory (metrics.jsonl, config.yaml, summary.json), and,
where `python -m analysis extrapolate` wrote one, extrapolation.csv.  The fits are redone
with the recorded settings and seed, so the drawn curves and bands are those the
leaderboard came from.  Run names are paths relative to the sweep directory: a copied
sweep gives the same content, except the provenance block.
"""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from analysis import io, writing
from analysis.board_text import ranked_units
from analysis.fit import STATUSES, FitOptions
from analysis.points_csv import read_points
from analysis.runs import fit_runs

# Diagnostics over compute (docs/outputs.md lists each metrics.jsonl field).  These explain
# a tie or a collapse: a policy that stops exploring (entropy), overruns its budget
# (truncation), learns from stale or mismatched tokens (staleness, mismatch, ratio deviation).
DIAGNOSTICS = (
    ("train_reward", "train reward"),
    ("response_length", "response length (tokens)"),
    ("truncation_rate", "truncation rate"),
    ("interrupt_rate", "interruption rate"),
    ("entropy", "entropy"),
    ("staleness_mean", "staleness, mean (versions)"),
    ("staleness_p90", "staleness, p90 (versions)"),
    ("logp_mismatch", "generator-trainer log-prob mismatch"),
    ("ratio_dev", "ratio deviation"),
    ("clip_frac", "clip fraction"),
    ("effective_batch", "effective batch"),
    ("retired", "retired prompts (NPR)"),
    ("step_time_s", "step time (s)"),
)
MISMATCH_WORDS = ("mismatch",)      # any further mismatch statistic a run logs is shown too

EXPLAIN = {     # one sentence per status, for a reader who has not read analysis/fit.py
    "ok": "The fit is usable: A, B and C_mid are identified by the data.",
    "nan_dropped": "The fit is usable; some non-finite evals were dropped before fitting.",
    "A_unidentified": ("A is not identified: the curve has not bent toward its plateau (A on a bound, the run"
                       " ends before C_mid, or its interval is too wide), so the arm is ranked by its predicted"
                       " reward at a compute every arm reached. Train longer or add seeds to pin A down."),
    "too_few_points": "Too few evals above the fit's compute threshold to fit a sigmoid; nothing is ranked.",
    "flat": ("Flat: the pass rate never rose above its step-0 value (R0) by more than the eval noise, so there"
             " is no curve to fit; the arm did not learn in this budget."),
    "decreasing": ("Decreasing: the pass rate ends significantly below R0, the run got worse with compute"
                   " (a collapse); see its diagnostics."),
    "fit_failed": "The optimizer found no finite fit for this curve (or its inputs were malformed).",
    "run_failed": "The run itself failed (summary.json status failed); it was not fitted.",
}


def explain(status):
    return EXPLAIN.get(status, STATUSES.get(status, f"status {status}"))


@dataclass
class RunData:
    """One run: its name, directory, eval rows and config."""
    run: str
    run_dir: Path
    records: list
    config: dict
    summary: dict
    fit: object = None

    def series(self, key):
        """(compute, device_hours, values) of a metrics.jsonl column, finite values only."""
        rows = [(r.get("compute"), r.get("device_hours"), r.get(key)) for r in self.records]
        rows = [(c, d, v) for c, d, v in rows if _finite(c) and _finite(v)]
        c, d, v = (np.array([row[k] if _finite(row[k]) else np.nan for row in rows], float) for k in range(3))
        return c, d, v


@dataclass
class Content:
    title: str
    board: pd.DataFrame                 # leaderboard.csv as text, exactly as written
    runs: dict                          # run -> RunData
    varying: list                       # [(key, {run: value})]
    constant: list                      # [(key, value)]
    diagnostics: list                   # [(key, label)] present in at least one run
    forecasts: pd.DataFrame | None
    options: FitOptions
    margin: float
    notes: list = field(default_factory=list)       # tie and status sentences
    provenance: dict = field(default_factory=dict)


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number(text):
    """A leaderboard cell as a float (NaN for empty or text)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _flatten(tree, prefix=""):
    out = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def _varying(configs):
    """(varying, constant): the flattened config keys that differ between runs, and the rest."""
    flat = {run: _flatten(cfg) for run, cfg in configs.items()}
    keys = sorted(set().union(*[set(f) for f in flat.values()])) if flat else []
    varying, constant = [], []
    for key in keys:
        values = {run: f.get(key, "(absent)") for run, f in flat.items()}
        texts = {json.dumps(v, sort_keys=True, default=str) for v in values.values()}
        (varying.append((key, values)) if len(texts) > 1 else constant.append((key, next(iter(values.values())))))
    return varying, constant


def _options(manifest):
    """The fit's FitOptions as analysis.json recorded them (defaults for anything missing)."""
    settings = (manifest.get("fit") or {}).get("settings") or {}
    names = {f.name for f in fields(FitOptions)}
    chosen = {k: (tuple(v) if isinstance(v, list) else v) for k, v in settings.items() if k in names}
    try:
        return replace(FitOptions(), **chosen), float(settings.get("margin", 0.02))
    except (TypeError, ValueError):
        return FitOptions(), 0.02


def _with_step_time(records):
    """Adds step_time_s: wall seconds per optimizer step between consecutive evals."""
    out, last = [], None
    for r in records:
        r = dict(r)
        if last is not None and _finite(r.get("wall_s")) and _finite(last.get("wall_s")) \
                and _finite(r.get("step")) and _finite(last.get("step")) and r["step"] > last["step"]:
            r["step_time_s"] = (r["wall_s"] - last["wall_s"]) / (r["step"] - last["step"])
        out.append(r)
        last = r
    return out


def _tie_notes(board):
    """One sentence per tie group of two or more ranked units, and one per non-ok status."""
    notes = []
    units = ranked_units(board) if {"level", "arm"} <= set(board.columns) else board
    if "tie_group" in units.columns:
        for group, rows in units.groupby("tie_group", sort=True):
            if group == "" or len(rows) < 2:
                continue
            names = ", ".join(rows["run"])
            basis = rows["rank_basis"].iloc[0] if "rank_basis" in rows.columns else "A"
            notes.append(("tie", f"{names} tie (rank {number(rows['rank'].iloc[0]):.0f}): their intervals on {basis or 'A'}"
                                 " overlap or their values are within the margin, so the data does not separate them;"
                                 " they are listed by B at a common A, which is not a ranking."))
    for _, row in units.iterrows():
        if row.get("status", "ok") not in ("ok", ""):
            why = explain(row["status"])
            error = row.get("error")
            if row["status"] == "run_failed" and isinstance(error, str) and error.strip():
                why += f" Its error: {error.strip()[:300]}"  # the arm's own reason, as the terminal printed it
            notes.append((row["status"], f"{row['run']}: {why}"))
    return notes


def _git_commit():
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown (not a git checkout)"
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not found)"


def _command(run_dirs):
    """The sweep's command, rebuilt from its arms' Hydra overrides (.hydra/overrides.yaml): each key
    with the values its arms took, comma-separated, as `-m` takes them."""
    values = {}
    for run_dir in run_dirs:
        try:
            overrides = yaml.safe_load((Path(run_dir) / ".hydra" / "overrides.yaml").read_text()) or []
        except (OSError, yaml.YAMLError):
            continue
        for item in overrides if isinstance(overrides, list) else []:
            key, _, value = str(item).partition("=")
            seen = values.setdefault(key, [])
            if value not in seen:
                seen.append(value)
    if not values:
        return None
    return "python -m scalerl.sweep -m " + " ".join(f"{k}={','.join(v)}" for k, v in values.items())


def gather(sweep_dir, results_dir=None, *, command=None, fits=None):
    """The report's content for `sweep_dir` (its leaderboard in `results_dir`, default the sweep dir).

    fits: {run: FitResult} the leaderboard was made from (the end of a fit passes them);
    None: refit with the settings analysis.json recorded, which gives the same fits."""
    sweep_dir = Path(sweep_dir)
    results = Path(results_dir) if results_dir is not None else sweep_dir
    board_path = results / "leaderboard.csv"
    if not board_path.is_file():
        raise io.InputError(f"{board_path}: no leaderboard; run `python -m analysis fit {sweep_dir} --out {results}` first")
    board = writing.restored(pd.read_csv(board_path, dtype=str, keep_default_na=False))  # run names as they are
    try:
        manifest = json.loads((results / "analysis.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    options, margin = _options(manifest)

    names = set(board["run"]) if "run" in board.columns else set()
    points = read_points(sweep_dir, axis="compute")
    points = points[points["run"].isin(names)].reset_index(drop=True) if names else points
    if fits is None or not set(points["run"]) <= set(fits):
        fits = fit_runs(points, options) if len(points) else {}
    runs = {}
    for run, group in points.groupby("run", sort=False):
        run_dir = Path(group["run_dir"].iloc[0]) if "run_dir" in group.columns else sweep_dir / run
        records = _with_step_time(io.read_metrics(run_dir / "metrics.jsonl"))
        config = io._read_mapping(run_dir / "config.yaml", yaml.safe_load) if (run_dir / "config.yaml").exists() else {}
        summary = io._read_mapping(run_dir / "summary.json", json.loads) if (run_dir / "summary.json").exists() else {}
        runs[run] = RunData(str(run), run_dir, records, config or {}, summary or {}, fits.get(run))
    order = [r for r in board["run"] if r in runs] if "run" in board.columns else list(runs)
    runs = {r: runs[r] for r in order + [r for r in runs if r not in order]}

    varying, constant = _varying({r: d.config for r, d in runs.items()})
    keys = [k for k, _ in DIAGNOSTICS]
    extra = sorted({k for d in runs.values() for rec in d.records for k in rec
                    if any(w in k for w in MISMATCH_WORDS) and k not in keys and _finite(rec.get(k))})
    wanted = list(DIAGNOSTICS) + [(k, k.replace("_", " ")) for k in extra]
    diagnostics = [(k, label) for k, label in wanted
                   if any(_finite(rec.get(k)) for d in runs.values() for rec in d.records)]

    forecasts = None
    for path in (results / "extrapolation.csv", sweep_dir / "analysis" / "extrapolation.csv"):
        if path.is_file():
            forecasts = writing.restored(pd.read_csv(path))
            break

    provenance = {
        "command": command or _command([d.run_dir for d in runs.values()]) or "unknown (not recorded)",
        "commit": _git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": f"{platform.node()} ({platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()})",
        "sweep directory": str(sweep_dir.resolve()),
        "run directories": {r: str(Path(d.run_dir).resolve()) for r, d in runs.items()},
    }
    return Content(title=sweep_dir.resolve().name, board=board, runs=runs, varying=varying, constant=constant,
                   diagnostics=diagnostics, forecasts=forecasts, options=options, margin=margin,
                   notes=_tie_notes(board), provenance=provenance)
