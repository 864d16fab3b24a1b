"""The sweep report: one self-contained HTML page per sweep (report.html), read from its files alone.

    python -m analysis report SWEEP_DIR            # regenerate SWEEP_DIR/report.html

Owns: gathering what the page shows from a sweep's files (content), the Plotly charts
(charts) and the HTML around them (render).  Must not know about the trainer: it reads
leaderboard.csv, analysis.json and the run directories, like the rest of `analysis`.
Written at the end of a sweep and after `python -m analysis fit`; docs/outputs.md says
what each section means.  To add a diagnostic panel: its metrics.jsonl key in
content.DIAGNOSTICS.
"""
from __future__ import annotations

from pathlib import Path

REPORT = "report.html"


def build_report(sweep_dir, results_dir=None, *, command=None, fits=None):
    """(html text, Content) of the report for `sweep_dir`, its leaderboard in `results_dir`."""
    from analysis.page import charts, render
    from analysis.page.content import gather

    content = gather(sweep_dir, results_dir, command=command, fits=fits)
    config = {"displaylogo": False, "responsive": True}
    # plotly.js goes inline once, with the first figure; the second reuses it.
    curves = charts.curves_figure(content).to_html(full_html=False, include_plotlyjs=True, div_id="curves-plot",
                                                   config=config)
    diagnostics = (charts.diagnostics_figure(content).to_html(full_html=False, include_plotlyjs=False,
                                                              div_id="diagnostics-plot", config=config)
                   if content.diagnostics else '<p class="note">No diagnostics logged.</p>')
    explanation = ("Dots: held-out evals. Solid line: the fitted sigmoid over the points it was fitted on;"
                   " shaded: its bootstrap band; dotted vertical: the fit's compute cut-off (earlier evals are not"
                   " fitted); dashed: the extrapolation beyond the last fitted eval. Click an arm in the legend to"
                   " hide or show it; the buttons switch the x-axis between FLOPs and device-hours.")
    return render.page(content, curves, diagnostics, explanation), content


def write_report(sweep_dir, results_dir=None, *, command=None, fits=None, quiet=False):
    """Write results_dir/report.html (results_dir: default the sweep directory); returns (path, Content)."""
    from analysis import writing

    out = Path(results_dir if results_dir is not None else sweep_dir) / REPORT
    text, content = build_report(sweep_dir, results_dir, command=command, fits=fits)
    writing.atomic(out, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    if not quiet:
        print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return out, content
