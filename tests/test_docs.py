"""The documentation builds, its links hold, and the README stays a short front page.

``mkdocs build --strict`` turns every warning into an error, so a link from one page to a
page or anchor that does not exist fails this test (mkdocs.yml sets the link checks to warn).
"""
from __future__ import annotations

import re
import subprocess
import sys

import yaml
from helpers import REPO

LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_docs_build_strictly(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").exists()


def test_every_docs_page_is_in_the_nav():
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    listed = {page for entry in nav for page in entry.values()}
    assert listed == {p.name for p in (REPO / "docs").glob("*.md")}


def test_the_readme_is_short_and_its_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    targets = [m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1)]
    assert targets and all((REPO / t).exists() for t in targets), [t for t in targets if not (REPO / t).exists()]
    assert "the issue" not in text.lower()


def test_the_readme_main_command_is_the_pipeline_rl_loss_sweep():
    # The main job runs the default recipe (PipelineRL), not a synchronous stand-in.
    text = (REPO / "README.md").read_text()
    main = "pip install torch==2.13.0 && pip install -e '.[cpu]' && python -m scalerl.sweep -m loss=cispo,dapo,gspo\n"
    assert main in text and "async=sync" not in text.split("<!-- test-command -->")[0]


def test_the_readme_sweep_commands_expand_and_validate(tmp_path):
    # Every `python -m scalerl.sweep` line of the README (the main job, a study, SLURM) composes
    # and validates all of its arms: `--dry-run` launches nothing.
    import shlex

    from helpers import cli

    text = (REPO / "README.md").read_text()
    lines = [line.split("python -m scalerl.sweep", 1)[1] for line in text.splitlines()
             if "python -m scalerl.sweep -m" in line and not line.lstrip().startswith("#")]
    assert len(lines) >= 3, lines
    for i, line in enumerate(lines):
        proc = cli([*shlex.split(line), "--dry-run"], tmp_path / str(i))
        assert "pending" in proc.stdout, (line, proc.stdout[-2000:], proc.stderr[-2000:])
