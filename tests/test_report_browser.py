"""The report of a small real sweep, rendered in headless Chromium (Debian's `chromium`, installed by .ci/run).

Driven through the DevTools protocol by Playwright with the system browser (no browser
download): the page must load with no console error and no network request, its
leaderboard must equal leaderboard.csv value for value, it must draw one curve per arm,
list exactly the config keys that differ, and show the verdict and the curves on the
first screen.
"""
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.page.render import fmt
from helpers import ANSWERS_ONLY, cli

# One xdist group: the sweep below is a session fixture, and each pytest-xdist worker has its own
# session, so under `-n 3 --dist load` three workers each ran the sweep (about 200 s each in CI).
pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.xdist_group("report_browser")]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREEN = {"width": 1400, "height": 900}


@pytest.fixture(scope="session")
def real_sweep(tmp_path_factory):
    """2 arms x 12 steps, an eval every 2 steps, synchronous: the smallest sweep with a curve to fit.
    The answers-only shape (8 tokens, the shipped warm start) is enough: the page is what is
    tested, and it draws whatever the arms logged."""
    out = tmp_path_factory.mktemp("report_sweep")
    proc = cli(["-m", "loss=cispo,dapo", "train.steps=12", "train.eval_every=2", "logger=none", "async=sync",
                *ANSWERS_ONLY], out)
    (sweep,) = [p.parent for p in out.glob("sweeps/*/report.html")]
    assert f"report: {sweep}/report.html" in proc.stdout          # printed beside leaderboard.csv
    return sweep


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        skip_without_apt_package("Debian's chromium is not installed (.ci/run installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def loaded(real_sweep, browser):
    """The page, opened from file://, with every console message and request it made."""
    page = browser.new_page(viewport=SCREEN)
    console, requests = [], []
    page.on("console", lambda m: console.append((m.type, m.text)))
    page.on("pageerror", lambda e: console.append(("pageerror", str(e))))
    page.on("request", lambda r: requests.append(r.url))
    page.goto((real_sweep / "report.html").as_uri())
    page.wait_for_selector("#curves-plot .main-svg")
    page.wait_for_timeout(500)
    yield page, console, requests
    page.close()


def test_loads_with_no_console_error_and_no_network_request(loaded, real_sweep):
    page, console, requests = loaded
    assert [m for m in console if m[0] in ("error", "pageerror", "warning")] == []
    assert requests == [(real_sweep / "report.html").as_uri()]       # the page itself, nothing else


def test_leaderboard_in_the_dom_equals_leaderboard_csv(loaded, real_sweep):
    page, _, _ = loaded
    csv = pd.read_csv(real_sweep / "leaderboard.csv", dtype=str, keep_default_na=False)
    full = page.eval_on_selector_all("#leaderboard-full tbody tr",
                                     "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    head = page.eval_on_selector_all("#leaderboard-full thead th", "cells => cells.map(c => c.textContent)")
    assert head == list(csv.columns)
    assert full == [[v if v.strip() else "—" for v in row] for row in csv.itertuples(index=False)]
    main = page.eval_on_selector_all("#leaderboard tbody td",
                                     "cells => cells.map(c => [c.parentNode.dataset.run, c.dataset.col,"
                                     " c.dataset.value, c.textContent])")
    assert len(main) >= len(csv) * 4
    rows = csv.set_index("run", drop=False)
    for run, col, value, text in main:
        assert value == rows.at[run, col], (run, col)
        shown = text.split(" [")[0]          # A, B, C_mid carry their interval after the value
        assert shown == (value or "—" if col in ("run", "status") else fmt(value)), (run, col, text)


def test_one_curve_per_arm(loaded, real_sweep):
    page, _, _ = loaded
    arms = pd.read_csv(real_sweep / "leaderboard.csv")["run"].tolist()
    observed = page.evaluate("document.getElementById('curves-plot').data"
                             ".filter(t => t.meta.kind === 'observed').map(t => t.meta.run)")
    assert sorted(observed) == sorted(arms) and len(observed) == 2
    drawn = page.eval_on_selector_all("#curves-plot .scatterlayer .trace", "t => t.length")
    assert drawn == page.evaluate("document.getElementById('curves-plot').data.length")


def test_varying_keys_are_exactly_those_that_differ(loaded, real_sweep):
    page, _, _ = loaded

    def flat(tree, prefix=""):
        if not isinstance(tree, dict):
            return {prefix[:-1]: tree}
        return {k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
    configs = [flat(yaml.safe_load(p.read_text())) for p in sorted(real_sweep.glob("*/config.yaml"))]
    assert len(configs) == 2
    differ = {k for k in set(configs[0]) | set(configs[1]) if configs[0].get(k, "?absent") != configs[1].get(k, "?absent")}
    assert any(k.startswith("loss.") for k in differ)
    shown = page.eval_on_selector_all("#varying tbody tr", "rows => rows.map(r => r.dataset.key)")
    assert sorted(shown) == sorted(differ)


def test_x_axis_switches_to_device_hours(loaded):
    page, _, _ = loaded
    # Wait for the relayout itself (a fixed 300 ms was sized for an idle machine); a button that
    # does nothing times out after 30 s and fails.
    title = "document.getElementById('curves-plot').layout.xaxis.title.text"
    page.locator("#curves-plot .updatemenu-button").nth(1).click()
    page.wait_for_function(f"{title} === 'device-hours'", timeout=30_000)
    page.locator("#curves-plot .updatemenu-button").nth(0).click()
    page.wait_for_function(f"{title}.startsWith('compute')", timeout=30_000)
    assert page.evaluate(title).startswith("compute")


def test_first_screen_shows_the_verdict_and_the_curves(loaded, real_sweep, tmp_path_factory):
    page, _, _ = loaded
    shot = tmp_path_factory.mktemp("shot") / "first_screen.png"
    page.screenshot(path=str(shot))                          # the first screen only
    assert shot.stat().st_size > 20_000                      # a drawn page, not a blank one
    for selector in ("#leaderboard", "#verdict p", "#curves-plot .main-svg"):
        box = page.locator(selector).first.bounding_box()
        assert box is not None and box["width"] > 100 and box["y"] + min(box["height"], 200) <= SCREEN["height"], selector
    points = page.evaluate("document.querySelectorAll('#curves-plot .scatterlayer .point').length")
    evals = sum(1 for p in real_sweep.glob("*/metrics.jsonl") for line in p.read_text().splitlines()
                if json.loads(line).get("pass_rate") is not None)
    assert points == evals >= 2 * 2                          # every eval of both arms is drawn
