"""CSV formula injection (OWASP "CSV Injection"): every CSV the analysis writes neutralises a
text cell that a spreadsheet would run (one starting with = + - @, a tab or a carriage return)
with a leading single quote, and leaves numbers, negative ones included, as numbers."""
import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.models import sigmoid
from analysis.writing import neutralise_cell, neutralised, restore_cell, restored, write_csv

ROOT = Path(__file__).resolve().parents[2]
C = np.concatenate([[0.0], np.linspace(1e13, 4e14, 30)])
HOSTILE = ["=cmd|' /C calc'!A0", "@SUM(1+1)*cmd|x", "+1+1", "-2+3", "\tTAB", "\rCR", "=HYPERLINK(\"http://x\")"]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_formula_cell_gets_one_leading_quote_and_reads_back_exactly(text):
    assert neutralise_cell(text) == "'" + text
    assert restore_cell(neutralise_cell(text)) == text


@pytest.mark.parametrize("value", [-0.5, 3, 0.0, "-0.5", "-1e-3", "cispo", "loss=dapo", "a=b", "", "'quoted"])
def test_numbers_and_plain_text_are_left_alone(value):
    assert neutralise_cell(value) == value
    assert restore_cell(value) == value


def test_text_that_already_starts_with_a_quote_round_trips():
    assert neutralise_cell("'=x") == "''=x" and restore_cell("''=x") == "'=x"


def test_a_table_keeps_its_numeric_columns_numeric():
    table = pd.DataFrame({"run": ["=bad", "ok"], "A": [-0.25, 0.5], "n": [-3, 4], "=col": ["x", "-y"]})
    safe = neutralised(table)
    assert list(safe["run"]) == ["'=bad", "ok"] and list(safe["'=col"]) == ["x", "'-y"]
    assert safe["A"].tolist() == [-0.25, 0.5] and safe["n"].tolist() == [-3, 4]
    assert restored(safe).equals(table)
    assert list(table["run"]) == ["=bad", "ok"]  # the caller's table is not changed


def test_write_csv_writes_the_neutralised_cells(tmp_path):
    write_csv(pd.DataFrame({"run": ["@SUM(1)", "fine"], "B": [-1.5, 2.0]}), tmp_path / "t.csv")
    rows = list(csv.reader(open(tmp_path / "t.csv", newline="")))
    assert rows == [["run", "B"], ["'@SUM(1)", "-1.5"], ["fine", "2.0"]]


def test_the_leaderboard_of_hostile_run_names_has_no_formula_cell(tmp_path):
    names = ["=cmd|' /C calc'!A0", "@SUM(1+1)*cmd|x", "-2+3"]
    rows = [{"run": name, "compute": c, "reward": sigmoid(c, 0.6 + 0.05 * i, 1.5, 1e14, 0.2)}
            for i, name in enumerate(names) for c in C]
    pd.DataFrame(rows).to_csv(tmp_path / "points.csv", index=False)
    proc = subprocess.run([sys.executable, "-m", "analysis", "fit", str(tmp_path / "points.csv"), "--out",
                           str(tmp_path / "out"), "--n-boot", "0", "--plots", "none"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.reader(open(tmp_path / "out" / "leaderboard.csv", newline="")))
    header, body = rows[0], rows[1:]
    cells = [cell for row in body for cell in row]
    assert sorted(row[header.index("run")] for row in body) == sorted("'" + n for n in names)
    assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")]
    # numbers stay numbers: every cell starting with '-' is a number
    assert all(float(c) <= 0 for c in cells if c.startswith("-"))
