"""The leaderboard as plain text: ranked rows, each non-ok status explained, notes and warnings."""
from __future__ import annotations

import numpy as np

from analysis.fit import USABLE

NAN = float("nan")


def ranked_units(board):
    """The rows that are ranked as units: arm rows of arms with 2+ seeds, run rows otherwise."""
    multi = set(board.loc[board["level"] == "arm", "arm"])
    return board[(board["level"] == "arm") | ~board["arm"].isin(multi)]


def _cell(row, p, fmt):
    v, lo, hi = row.get(p, NAN), row.get(f"{p}_lo", NAN), row.get(f"{p}_hi", NAN)
    if not np.isfinite(v):
        return "-"
    return f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]" if np.isfinite(lo) else f"{v:{fmt}}"


def _axis_value(value):
    if value is None or value != value:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _text_table(cells, left):
    """Columns padded to width: text columns left-aligned, numbers right-aligned."""
    columns = list(dict.fromkeys(k for c in cells for k in c))
    width = {k: max(len(k), *(len(c.get(k, "")) for c in cells)) for k in columns}
    pad = lambda k, v: v.ljust(width[k]) if k in left else v.rjust(width[k])   # noqa: E731
    rows = [[pad(k, k) for k in columns]] + [[pad(k, c.get(k, "")) for k in columns] for c in cells]
    return "\n".join("  ".join(r).rstrip() for r in rows)


def format_leaderboard(board, axes=(), max_rows=60):
    """The ranked table as plain text, with each non-ok status explained underneath.

    A is never printed for A_unidentified rows (it sits on a bound or is unsupported by
    the data).  A rank shared by tied rows is printed "1="; R(C_ref) is shown when some
    rows are ranked by it.
    """
    if board.empty:
        return "(no runs)"
    lines, cells = [], []
    multi_seed_arms = set(board.loc[board["level"] == "arm", "arm"])
    units = ranked_units(board)
    shared = set(units.loc[units["rank"].duplicated(keep=False), "rank"].dropna())
    by_reward = board["rank_basis"].fillna("").str.startswith("reward").any() and "pred_target" not in board.columns
    for row in board.head(max_rows).to_dict("records"):
        identified = row["status"] in USABLE
        rank = row.get("rank", NAN)
        cell = {
            "rank": (f"{int(rank)}" + ("=" if rank in shared else "")) if np.isfinite(rank) else "-",
            "run": ("  " if row["level"] == "run" and row["arm"] in multi_seed_arms else "") + str(row["run"]),
            "status": row["status"],
            "A [95%]": _cell(row, "A", ".3f") if identified else (
                "not identified" if row["status"] == "A_unidentified" else "-"),
            "B [95%]": _cell(row, "B", ".2f") if np.isfinite(row.get("B", NAN)) else "-",
            "C_mid": f"{row['C_mid']:.3g}" if np.isfinite(row.get("C_mid", NAN)) else "-",
            "R0": f"{row['R0']:.3f}" if np.isfinite(row.get("R0", NAN)) else "-",
            "pts": f"{int(row['n_points'])}",
        }
        if by_reward:
            ref = {"p": row.get("R_ref", NAN), "p_lo": row.get("R_ref_lo", NAN), "p_hi": row.get("R_ref_hi", NAN)}
            cell["R(C_ref) [95%]"] = _cell(ref, "p", ".3f")
        if np.isfinite(row.get("B_common", NAN)):
            cell["B@common A"] = f"{row['B_common']:.2f}"
        if "pred_target" in row and np.isfinite(row.get("pred_target", NAN)):
            cell["R(C*) [95%]"] = _cell({"p": row["pred_target"], "p_lo": row.get("pred_target_lo", NAN),
                                         "p_hi": row.get("pred_target_hi", NAN)}, "p", ".3f")
        if "pred_final" in row:
            cell["pred/obs final"] = (f"{row['pred_final']:.3f}/{row['obs_final']:.3f}"
                                      if np.isfinite(row["pred_final"]) else "-")
        for axis in axes:
            cell[axis] = _axis_value(row.get(axis))
        cells.append(cell)
    lines.append(_text_table(cells, left={"run", "status"} | set(axes)))
    if len(board) > max_rows:
        lines.append(f"... {len(board) - max_rows} more rows in leaderboard.csv")
    explained = board[~board["status"].isin(USABLE) & (board["reasons"].fillna("") != "")]
    for row in explained.head(max_rows).itertuples():
        lines.append(f"  {row.run}: {row.status} - {row.reasons}")
    if by_reward:
        lines.append(f"C_ref = {board['C_ref'].dropna().iloc[0]:.4g}" if board["C_ref"].notna().any() else "")
    lines += [f"note: {n}" for n in board.attrs.get("notes", [])]
    lines += [f"WARNING: {w}" for w in board.attrs.get("warnings", [])]
    return "\n".join(lines)
