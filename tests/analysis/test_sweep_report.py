"""The sweep report (report.html) from files alone: hostile statuses, no NaN, regeneration, what varied.

The browser half (console errors, network, DOM against leaderboard.csv, screenshot) is
tests/test_report_browser.py; these run without a browser.
"""
import html
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from analysis import FitOptions, analyze_sweep
from analysis.cli import main
from analysis.page import build_report, charts
from analysis.page.content import EXPLAIN, gather
from analysis.synthetic import simulate_curve
from conftest import write_run

PROVENANCE = re.compile(r'<section id="provenance">.*?</section>', re.S)
SCRIPTS = re.compile(r"<script.*?</script>", re.S)


def visible(page):
    """The page without its scripts (plotly.js itself holds the word NaN) and without tags."""
    return re.sub(r"<[^>]+>", " ", SCRIPTS.sub("", page))


@pytest.fixture
def hostile(tmp_path):
    """A sweep with one good arm, an unidentified A, a flat arm, a decreasing arm and a failed arm."""
    root = tmp_path / "hostile"
    c, r, _ = simulate_curve(0.61, 1.9, 2500.0, 0.3, n_points=40, rng=np.random.default_rng(0))
    write_run(root, "good", compute=c * 1e12, reward=r, loss="cispo")
    line = np.linspace(0, 1000, 50)
    write_run(root, "unid", compute=line * 1e12, reward=0.1 + 0.0008 * line, loss="dapo")   # no bend: A unknown
    write_run(root, "flat", compute=line * 1e12, reward=np.full(50, 0.4), loss="gspo")
    write_run(root, "down", compute=line * 1e12, reward=np.linspace(0.5, 0.2, 50), loss="grpo",
              extra={"train": {"steps": 50}})
    write_run(root, "failed", compute=[0.0], reward=[0.3], loss="cispo", status="failed",
              error="CUDA out of memory", arm="arm-failed")      # its own arm, not a seed of "good"
    analyze_sweep(root, root, FitOptions(n_boot=30), plots="summary", quiet=True)
    return root


def test_hostile_sweep_shows_each_status_with_its_explanation_and_no_nan(hostile):
    page = (hostile / "report.html").read_text()
    board = pd.read_csv(hostile / "leaderboard.csv")
    statuses = dict(zip(board["run"], board["status"]))
    assert statuses == {"good": "ok", "unid": "A_unidentified", "flat": "flat", "down": "decreasing",
                        "failed": "run_failed"}
    for run, status in statuses.items():
        if status != "ok":      # the sentence, attached to the arm, in the verdict's notes
            assert f"<b>{status}</b>: {html.escape(run)}: {html.escape(EXPLAIN[status])}" in page
    assert "Its error: CUDA out of memory" in page  # a failed arm's own reason, not only its status
    text = visible(page)
    assert not re.search(r"\bnan\b", text, re.I), re.search(r".{40}\bnan\b.{40}", text, re.I | re.S).group(0)
    assert not re.search(r"\binf\b", text, re.I)


def test_figures_carry_no_nan(hostile):
    content = gather(hostile)
    for fig in (charts.curves_figure(content), charts.diagnostics_figure(content)):
        assert "NaN" not in fig.to_json()


def test_what_varied_lists_exactly_the_keys_that_differ(hostile):
    content = gather(hostile)
    # write_run gives every arm the same config except loss.name (cispo twice) and one train.steps
    assert [k for k, _ in content.varying] == ["loss.name", "train.steps"]
    assert content.varying[1][1] == {"good": "(absent)", "unid": "(absent)", "flat": "(absent)", "down": 50,
                                     "failed": "(absent)"}
    assert "loss.eps_max" in dict(content.constant)
    page = (hostile / "report.html").read_text()
    assert re.findall(r'<tr data-key="([^"]+)"', page) == ["loss.name", "train.steps"]


def test_one_observed_curve_per_arm_and_a_fit_only_where_there_are_parameters(hostile):
    content = gather(hostile)
    fig = charts.curves_figure(content)
    kinds = [(t.meta["kind"], t.meta["run"]) for t in fig.data]
    assert [r for k, r in kinds if k == "observed"] == list(content.runs)
    assert sorted(r for k, r in kinds if k == "fit") == ["good", "unid"]       # flat, down, failed: no sigmoid
    # the x-axis buttons carry one x array per trace, for both axes
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["compute", "device-hours"]
    assert all(len(b.args[0]["x"]) == len(fig.data) for b in buttons)


def test_regenerated_from_a_copy_gives_the_same_page_apart_from_provenance(hostile, tmp_path):
    copy = tmp_path / "elsewhere" / hostile.name       # the page is titled by the sweep's name
    shutil.copytree(hostile, copy)
    (copy / "report.html").unlink()
    assert main(["report", str(copy), "--quiet"]) == 0
    original, again = (hostile / "report.html").read_text(), (copy / "report.html").read_text()
    assert PROVENANCE.sub("", original) == PROVENANCE.sub("", again)
    for root in (hostile, copy):            # absolute paths only in the provenance block
        assert str(root) not in PROVENANCE.sub("", (root / "report.html").read_text())
        assert str(root.resolve()) in (root / "report.html").read_text()


def test_page_is_offline_one_file(hostile):
    page, _ = build_report(hostile)
    assert page.count("<script") >= 2 and not re.search(r'<script[^>]+src=', page)   # plotly.js inline
    assert not re.search(r'(href|src)="https?://', SCRIPTS.sub("", page))   # the browser test watches requests
    assert page.count("plotly.js v") <= 2          # the library once (its banner names the version)


def test_report_without_a_leaderboard_is_one_line_error(tmp_path, capsys):
    write_run(tmp_path, "a", compute=[0.0, 1.0], reward=[0.1, 0.2])
    assert main(["report", str(tmp_path)]) == 2
    assert "no leaderboard" in capsys.readouterr().err


def test_the_wandb_summary_run_logs_the_report_verdict_and_charts(hostile, monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("HOME", str(tmp_path))
    analyze_sweep(hostile, hostile, FitOptions(n_boot=30), plots="summary", quiet=True, wandb=True)
    (run,) = hostile.glob("wandb/offline-run-*")
    media = {p.parent.name: p.name for p in (run / "files" / "media").glob("*/*") if p.is_file()}
    names = sorted(p.name.split("_")[0] for p in (run / "files" / "media").glob("*/*.*"))
    assert {"report", "verdict", "curves", "diagnostics"} <= set(names), media
    (verdict,) = (run / "files" / "media" / "html").glob("verdict_*.html")
    assert html.escape(EXPLAIN["decreasing"]) in verdict.read_text()
