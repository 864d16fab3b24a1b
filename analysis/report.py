"""Log a sweep's analysis to W&B as one summary run: leaderboard table, plots, parameters.

Offline by default, so it works on a laptop or a cluster node without network:
mode is WANDB_MODE when set, "online" when an API key is configured (WANDB_API_KEY, or
api.wandb.ai in ~/.netrc), else "offline"; an offline run is uploaded later with the
`wandb sync <dir>` command this prints.  wandb is imported lazily.
wandb-core writes the offline record log asynchronously: it can complete a second or two
after finish() returns, and at the latest when the process exits, which is before anyone
can run the printed sync command from a shell.
"""
from __future__ import annotations

import math
import netrc
import os
from dataclasses import dataclass
from pathlib import Path

PARAMS = ("A", "A_lo", "A_hi", "B", "B_lo", "B_hi", "C_mid", "C_mid_lo", "C_mid_hi", "R0", "rank")


def api_key_configured(env=None, home=None):
    """Whether W&B could log online: WANDB_API_KEY, or a ~/.netrc entry for api.wandb.ai."""
    env = os.environ if env is None else env
    if env.get("WANDB_API_KEY"):
        return True
    path = Path(home or Path.home()) / ".netrc"
    try:
        return netrc.netrc(path).authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode(env=None, home=None):
    env = os.environ if env is None else env
    if env.get("WANDB_MODE"):
        return env["WANDB_MODE"]
    return "online" if api_key_configured(env, home) else "offline"


@dataclass(frozen=True)
class LoggedReport:
    run_id: str
    mode: str
    run_dir: str          # the offline-run-* (or run-*) folder
    sync_command: str     # "wandb sync <run_dir>" ("" when online)


def _plain(value):
    """A summary-safe value: finite floats and ints, strings; None for NaN."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    return None if value is None else str(value)


def log_report(board, figures, *, out_dir, project="scalerl-analysis", group=None,
               name="analysis", config=None, mode=None, entity=None, tags=(), quiet=False, page=None):
    """One W&B run holding the leaderboard (wandb.Table), the PNGs (wandb.Image) and,
    per ranked row, its fitted parameters as summary values `fit/<run>/<param>`.
    page: (report.html path, its analysis.page Content): the sweep report too, as `report`
    (the whole page), `verdict` (leaderboard and a sentence per tie and status) and Plotly
    charts `curves` and `diagnostics`, so a team on W&B sees what the page shows.

    At the end of a scalerl sweep this is the sweep's summary run: same project, entity
    and group as its arms, `job_type="analysis"`, tagged `summary`."""
    import wandb

    mode = mode or wandb_mode()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=project, entity=entity, group=group, name=name, job_type="analysis", dir=str(out_dir),
                     mode=mode, config=dict(config or {}), reinit="create_new", tags=list(tags),
                     settings=wandb.Settings(silent=True, console="off"))   # its banner adds nothing to `sync`
    try:
        table = board.copy()
        for col in table.columns:            # W&B tables want one type per column
            if table[col].dtype == object:
                table[col] = table[col].map(lambda v: "" if v is None or v != v else str(v))
        run.log({"leaderboard": wandb.Table(dataframe=table)})
        run.log({f"plots/{Path(p).stem}": wandb.Image(str(p)) for p in figures})
        if page is not None:
            from analysis.page import charts, render
            path, content = page
            run.log({"report": wandb.Html(Path(path).read_text(encoding="utf-8")),
                     "verdict": wandb.Html(render.verdict_html(content)),
                     "curves": wandb.Plotly(charts.curves_figure(content)),
                     "diagnostics": wandb.Plotly(charts.diagnostics_figure(content))})
        for row in board.to_dict("records"):
            for key in PARAMS + ("status",):
                value = _plain(row.get(key))
                if value is not None:
                    run.summary[f"fit/{row['run']}/{key}"] = value
        run_id, run_dir = run.id, str(Path(run.dir).parent)
    finally:
        run.finish()
    sync = f"wandb sync {run_dir}" if mode == "offline" else ""
    if sync and not quiet:
        print(f"W&B run logged offline; upload it with:\n  {sync}")
    return LoggedReport(run_id=run_id, mode=mode, run_dir=run_dir, sync_command=sync)
