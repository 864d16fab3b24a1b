"""Property-based: `analysis fit`, `extrapolate` and `budget` on whatever a run directory may hold
(issue 29 "done when", points 2-4).

Declining, flat, collapsing, NaN-laden, non-monotone, single-point and oversized inputs:
each command gives exit 0 (every curve gets a status) or exit 2 with one line on stderr;
never a traceback (an exception out of `main`) or a hang.
"""
from __future__ import annotations

import contextlib
import io as stdio
import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis import io
from analysis.__main__ import main

KINDS = ("rising", "declining", "flat", "collapsing", "nan", "non_monotone", "single", "empty", "zeros", "ones")


def curve(kind, n, rng):
    """(compute, reward) of one hostile kind; compute in FLOPs like the trainer's."""
    C = np.concatenate([[0.0], np.sort(rng.uniform(1e12, 1e16, n))])
    t = C / C.max()
    R = {"rising": 0.2 + 0.5 * t / (t + 0.3), "declining": 0.6 - 0.4 * t, "flat": np.full(C.size, 0.4),
         "collapsing": np.where(t < 0.6, 0.2 + 0.6 * t, 0.05), "nan": 0.3 + 0.3 * t,
         "non_monotone": 0.4 + 0.2 * np.sin(12 * t), "single": np.full(C.size, 0.5), "empty": np.zeros(C.size),
         "zeros": np.zeros(C.size), "ones": np.ones(C.size)}[kind]
    R = np.clip(R + rng.normal(0, 0.02, C.size), 0, 1)
    if kind == "nan":
        R[rng.random(C.size) < 0.4] = np.nan
    if kind == "single":
        C, R = C[:1], R[:1]
    if kind == "empty":
        C, R = C[:0], R[:0]
    return C, R


def write(root: Path, name: str, C, R, summary: bool):
    run = root / name
    run.mkdir(parents=True)
    with open(run / "metrics.jsonl", "w") as f:
        for i, (c, r) in enumerate(zip(C, R)):
            f.write(json.dumps({"step": i * 10, "compute": float(c),
                                "pass_rate": None if not np.isfinite(r) else float(r)}) + "\n")
    if summary:
        (run / "summary.json").write_text(json.dumps({"status": "done", "run_name": name, "arm_hash": name}))


def run_cli(argv):
    """(exit code, stderr lines); an exception escaping main fails the test with its traceback."""
    err = stdio.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdio.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:      # argparse
            code = e.code
    return code, [line for line in err.getvalue().splitlines() if line.strip()]


SWEEPS = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(1, 40), st.booleans()), min_size=1, max_size=4)
SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def check(command, sweep, seed, extra=()):
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "sweep"
        root.mkdir()
        for i, (kind, n, summary) in enumerate(sweep):
            write(root, f"{i}-{kind}", *curve(kind, n, rng), summary)
        code, err = run_cli([command, str(root), "--out", str(Path(d) / "out"), "--quiet", *extra])
    assert code in (0, 2), (code, err)
    if code == 2:
        assert len(err) == 1 and "error:" in err[0], err


@SETTINGS
@given(SWEEPS, st.integers(0, 2**16))
def test_fit_gives_a_status_or_one_line(sweep, seed):
    check("fit", sweep, seed, ("--n-boot", "20", "--plots", "summary"))


@SETTINGS
@given(SWEEPS, st.integers(0, 2**16))
def test_extrapolate_gives_a_status_or_one_line(sweep, seed):
    check("extrapolate", sweep, seed, ("--n-boot", "20"))


@SETTINGS
@given(SWEEPS, st.integers(0, 2**16), st.sampled_from(["1e14", "1e16", "1e19"]))
def test_plan_gives_a_status_or_one_line(sweep, seed, budget):
    check("plan", sweep, seed, ("--n-boot", "20", "--budget", budget))


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(SWEEPS, st.integers(0, 2**16), st.sampled_from(["fit", "extrapolate", "plan"]))
def test_oversized_inputs_are_one_line(sweep, seed, command):
    bound = io.MAX_BYTES
    io.MAX_BYTES = 200          # every metrics.jsonl of more than a row or two is "oversized"
    try:
        extra = ("--n-boot", "0") + (("--budget", "1e16") if command == "plan" else ())
        check(command, sweep, seed, extra)
    finally:
        io.MAX_BYTES = bound
