"""The report's HTML: sections top to bottom (docs/outputs.md says what each one means).

Every number goes through `fmt`, so a missing value reads "—", never "nan".  Figure div
ids are fixed, so the same files give the same page byte for byte (apart from provenance).
"""
from __future__ import annotations

import html
import json
import math

from analysis.page.content import number

MAIN = (("rank", "rank"), ("run", "arm"), ("status", "status"), ("A", "A"), ("B", "B"), ("C_mid", "C_mid"),
        ("R0", "R0"), ("n_points", "evals"), ("last_compute", "last compute"))
INTERVAL = {"A", "B", "C_mid"}
TEXT = {"run", "status"}
TIE_SHADES = ("#fff3cd", "#d1ecf1", "#e2d9f3", "#d4edda")


def fmt(value, digits=4):
    """A number for the reader: 4 significant digits, '—' when missing or not finite."""
    v = number(value) if isinstance(value, str) else value
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "—"
    if float(v).is_integer() and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.{digits}g}"


def esc(text):
    return html.escape(str(text))


def _cell(row, col):
    raw = row.get(col, "")
    text = esc(raw or "—") if col in TEXT else fmt(raw)
    if col in INTERVAL and math.isfinite(number(raw)):
        lo, hi = fmt(row.get(f"{col}_lo", "")), fmt(row.get(f"{col}_hi", ""))
        text += f' <span class="iv">[{lo}, {hi}]</span>'
    return f'<td data-col="{esc(col)}" data-value="{esc(raw)}">{text}</td>'


def leaderboard_table(board):
    shades, k = {}, 0
    counts = board["tie_group"].value_counts() if "tie_group" in board.columns else {}
    rows = []
    for _, row in board.iterrows():
        group = row.get("tie_group", "")
        style = ""
        if group and counts.get(group, 0) > 1:
            if group not in shades:
                shades[group], k = TIE_SHADES[k % len(TIE_SHADES)], k + 1
            style = f' style="background:{shades[group]}" title="tie group {esc(group)}"'
        cells = "".join(_cell(row, col) for col, _ in MAIN if col in board.columns)
        rows.append(f'<tr data-run="{esc(row.get("run", ""))}"{style}>{cells}</tr>')
    head = "".join(f"<th>{esc(label)}</th>" for col, label in MAIN if col in board.columns)
    return (f'<div class="scroll"><table id="leaderboard"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            '</tbody></table></div>')


def full_table(board, table_id="leaderboard-full"):
    """Every column of leaderboard.csv, each cell exactly as written there ('—' when empty)."""
    head = "".join(f"<th>{esc(c)}</th>" for c in board.columns)
    body = "".join("<tr>" + "".join(f'<td data-col="{esc(c)}">{esc(v) if str(v).strip() else "—"}</td>'
                                    for c, v in row.items()) + "</tr>" for _, row in board.iterrows())
    return f'<div class="scroll"><table id="{table_id}" class="small"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def notes_list(notes):
    if not notes:
        return '<p class="note">Every arm has a usable fit and the intervals separate the ranks.</p>'
    items = "".join(f'<li data-status="{esc(kind)}"><b>{esc(kind)}</b>: {esc(text)}</li>' for kind, text in notes)
    return f'<ul id="notes">{items}</ul>'


def verdict_sentence(content):
    board = content.board
    if "rank" not in board.columns or not len(board):
        return "No arm could be ranked."
    first = board[board["rank"].map(number) == 1]
    if not len(first):
        return "No arm has a usable fit, so none is ranked; the notes below say why."
    names = ", ".join(esc(r) for r in first["run"])
    basis = first["rank_basis"].iloc[0] if "rank_basis" in first.columns and first["rank_basis"].iloc[0] else "A"
    return (f"<b>{names}</b> {'rank' if len(first) > 1 else 'ranks'} first (by {esc(basis)}, margin {fmt(content.margin)}"
            f"{'; tied: the data does not separate them' if len(first) > 1 and 'tied' not in basis else ''}).")


def verdict_html(content):
    """The verdict: one sentence, the leaderboard, and a sentence per tie and status (also logged to W&B)."""
    return f"""<p>{verdict_sentence(content)}</p>
{leaderboard_table(content.board)}
<p class="note">A: the asymptotic pass rate; B: how fast it is approached; C_mid: the compute at half the gain;
R0: the step-0 pass rate (arXiv 2510.13786 §2). Brackets: {fmt(100 * content.options.level)}% intervals.
Shaded rows share a tie group.</p>
{notes_list(content.notes)}"""


def varied_table(content):
    if not content.varying:
        return '<p class="note">The arms share one config (seeds of one arm, or a single run).</p>'
    runs = list(content.runs)
    head = "<th>key</th>" + "".join(f"<th>{esc(r)}</th>" for r in runs)
    body = "".join(f'<tr data-key="{esc(key)}"><td><code>{esc(key)}</code></td>'
                   + "".join(f"<td>{esc(_value(values.get(r)))}</td>" for r in runs) + "</tr>"
                   for key, values in content.varying)
    return f'<div class="scroll"><table id="varying"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def constant_block(content):
    rows = "".join(f"<tr><td><code>{esc(k)}</code></td><td>{esc(_value(v))}</td></tr>" for k, v in content.constant)
    return (f'<details id="constant"><summary>{len(content.constant)} keys shared by every arm</summary>'
            f'<table class="small"><tbody>{rows}</tbody></table></details>')


def _value(v):
    if isinstance(v, float):
        return fmt(v, 6)
    return v if isinstance(v, str) else json.dumps(v, default=str)


def forecasts_section(content):
    rows = []
    board = content.board
    if "pred_final" in board.columns:
        for _, r in board.iterrows():
            if math.isfinite(number(r["pred_final"])):
                rows.append((r["run"], "fit --fit-until", r["pred_final"], r.get("pred_final_lo", ""),
                             r.get("pred_final_hi", ""), r.get("obs_final", "")))
    if content.forecasts is not None:
        for _, r in content.forecasts.iterrows():
            rows.append((r.get("run"), f"extrapolate (fraction {fmt(r.get('fraction'))})", r.get("pred_final"),
                         r.get("pred_final_lo"), r.get("pred_final_hi"), r.get("obs_final")))
    if not rows:
        return ('<p class="note">No forecast: run <code>python -m analysis extrapolate SWEEP --out SWEEP</code> (or'
                ' <code>fit --fit-until C</code>) to fit on part of the compute and predict the rest.</p>')
    body = ""
    for run, how, pred, lo, hi, obs in rows:
        inside = number(lo) <= number(obs) <= number(hi)
        verdict = "—" if not all(math.isfinite(number(x)) for x in (lo, hi, obs)) else ("yes" if inside else "no")
        body += (f"<tr><td>{esc(run)}</td><td>{esc(how)}</td><td>{fmt(pred)} <span class='iv'>[{fmt(lo)}, {fmt(hi)}]"
                 f"</span></td><td>{fmt(obs)}</td><td>{verdict}</td></tr>")
    return ("<table id='forecasts'><thead><tr><th>arm</th><th>from</th><th>predicted final</th><th>observed final</th>"
            f"<th>inside interval</th></tr></thead><tbody>{body}</tbody></table>")


def cost_section(content):
    body, total_h, total_c, saved = "", 0.0, 0.0, 0.0
    stops = {}
    if "stop_step" in content.board.columns:
        stops = {r["run"]: r for _, r in content.board.iterrows() if math.isfinite(number(r["stop_step"]))}
    for run, data in content.runs.items():
        c, d, _ = data.series("compute")
        last_c = float(c[-1]) if c.size else math.nan
        last_h = float(d[-1]) if d.size and math.isfinite(d[-1]) else math.nan
        total_c += last_c if math.isfinite(last_c) else 0.0
        total_h += last_h if math.isfinite(last_h) else 0.0
        note = ""
        if run in stops:
            steps = number(((data.config.get("train") or {}).get("steps")))
            last_step = number(data.records[-1].get("step")) if data.records else math.nan
            if math.isfinite(steps) and last_step > 0 and math.isfinite(last_c):
                spared = (steps - last_step) * last_c / last_step
                saved += spared
                note = f"stopped early at step {fmt(last_step)} of {fmt(steps)}: saved ~{fmt(spared, 3)} FLOPs"
        status = (data.summary.get("status") or "—")
        body += (f"<tr><td>{esc(run)}</td><td>{esc(status)}</td><td>{fmt(last_h, 3)}</td><td>{fmt(last_c, 3)}</td>"
                 f"<td>{esc(note)}</td></tr>")
    body += (f"<tr class='total'><td>total</td><td></td><td>{fmt(total_h, 3)}</td><td>{fmt(total_c, 3)}</td>"
             f"<td>{'saved ~' + fmt(saved, 3) + ' FLOPs by early stopping' if saved else ''}</td></tr>")
    return ("<table id='cost'><thead><tr><th>arm</th><th>run status</th><th>device-hours</th><th>FLOPs</th>"
            f"<th>early stop</th></tr></thead><tbody>{body}</tbody></table>")


def provenance_section(prov):
    runs = "".join(f"<li>{esc(r)}: <code>{esc(d)}</code></li>" for r, d in prov["run directories"].items())
    items = "".join(f"<dt>{esc(k)}</dt><dd><code>{esc(v)}</code></dd>" for k, v in prov.items() if k != "run directories")
    return f'<dl>{items}<dt>run directories</dt><dd><ul>{runs}</ul></dd></dl>'


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:8px 18px;color:#222}
h1{font-size:1.25em;margin:6px 0}h2{font-size:1.05em;margin:18px 0 6px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
th{background:#f3f3f3}.small{font-size:11px}.iv{color:#666;font-size:11px}.note{color:#444;font-size:13px}
#notes{font-size:13px;margin:6px 0;padding-left:18px}.scroll{overflow-x:auto}
.top{display:grid;grid-template-columns:minmax(420px,1fr) minmax(520px,1.3fr);gap:18px;align-items:start}
@media (max-width:1000px){.top{grid-template-columns:1fr}}tr.total td{font-weight:bold}
details summary{cursor:pointer;font-size:13px;color:#333}
#leaderboard td[data-col=run],#varying th,#cost td:first-child{min-width:170px;max-width:240px;word-break:break-all;font-size:12px}
"""


def page(content, curves_html, diagnostics_html, explanation):
    p = content.provenance
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>scalerl sweep report: {esc(content.title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>
<body>
<h1>scalerl sweep report: {esc(content.title)}</h1>
<div class="top">
<section id="verdict"><h2>Verdict</h2>{verdict_html(content)}
<details><summary>all leaderboard.csv columns</summary>{full_table(content.board)}</details>
</section>
<section id="curves"><h2>Curves</h2>{curves_html}
<p class="note">{esc(explanation)}</p></section>
</div>
<section id="varied"><h2>What varied</h2>{varied_table(content)}{constant_block(content)}</section>
<section id="diagnostics"><h2>Diagnostics over compute, per arm</h2>{diagnostics_html}</section>
<section id="forecast"><h2>Forecasts</h2>{forecasts_section(content)}</section>
<section id="cost-section"><h2>Cost</h2>{cost_section(content)}</section>
<section id="provenance"><h2>Provenance</h2>{provenance_section(p)}</section>
</body></html>
"""

