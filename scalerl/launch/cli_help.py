"""``python -m scalerl.sweep --help``: scalerl's own help, read from the repository's files.

Hydra's help composes the whole config and deep-copies the ConfigStore once per
group (seconds), and lists the internal ``schema/*`` groups a user never sets.
This help composes nothing and imports neither Hydra nor torch: the groups and
their options are the YAML files in ``conf/``, the defaults are the ``defaults``
lines of ``conf/config.yaml`` and the default recipe, the studies and launchers
are described by the first comment sentence of their files, and the ``train.*``
settings come from the schema's source.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from scalerl.core.paths import REPO, conf_dir, sweeps_dir

SCALERL_FLAGS = {
    "-m, --multirun": "run a sweep: every combination of the comma lists is an arm",
    "--dry-run": "expand and validate every arm, list the arms and their cost, launch nothing (implies -m)",
    "--status": "done / running / queued / failed / pending for each arm, launch nothing (implies -m)",
    "--fresh": "train every arm in this sweep's home, even one whose config hash finished in another study; "
               "a run directory holding another config's run has that run moved aside (<dir>.replaced)",
    "-h, --help": "this help",
    "--hydra-help": "Hydra's own help",
    "--cfg job": "print the composed config of a run and exit (add `--package loss` for one group)",
    "-sc install=bash": "shell completion for the installed command (see below)",
}
_DEFAULT = re.compile(r"^\s*-\s*(?:override\s+)?/?([\w/]+):\s*([\w.-]+)\s*$")


def first_sentence(path: Path) -> str:
    """The opening sentence of a YAML file's leading comment block."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("@package") or text.startswith("python -m"):
            continue
        lines.append(text)
    text = " ".join(lines)
    end = re.search(r"(?<!Fig)(?<!e\.g)(?<!i\.e)\.\s", text + " ")
    return text[:end.start()] if end else text


def defaults() -> dict[str, str]:
    """group -> default option, from conf/config.yaml and the default recipe."""
    found = {}
    for line in (conf_dir() / "config.yaml").read_text().splitlines():
        if (m := _DEFAULT.match(line)):
            found[m.group(1)] = m.group(2)
    recipe = conf_dir() / "recipe" / f"{found.get('recipe', 'scalerl')}.yaml"
    if recipe.exists():
        for line in recipe.read_text().splitlines():
            if (m := _DEFAULT.match(line)):
                found[m.group(1)] = m.group(2)
    return found


def groups() -> dict[str, list[str]]:
    """Every user-facing config group (a folder of YAML options in conf/) and its options."""
    return {d.name: sorted(p.stem for p in d.glob("*.yaml"))
            for d in sorted(conf_dir().iterdir()) if d.is_dir() and d.name != "hydra"}


def studies() -> dict[str, str]:
    return {p.stem: first_sentence(p) for p in sorted(sweeps_dir().glob("*.yaml"))}


def launchers() -> dict[str, str]:
    return {p.stem: first_sentence(p) for p in sorted((conf_dir() / "hydra" / "launcher").glob("*.yaml"))}


def train_settings() -> list[tuple[str, str, str]]:
    """(name, default, doc) of every ``TrainConfig`` field, read from the schema's source."""
    tree = ast.parse((REPO / "scalerl" / "config" / "schema.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TrainConfig")
    out, body = [], cls.body
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and value.keywords:          # field(default_factory=lambda: [...])
                value = getattr(value.keywords[0].value, "body", value)
            doc = ""
            nxt = body[i + 1] if i + 1 < len(body) else None
            if isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant):
                doc = str(nxt.value.value).split("\n")[0]
            out.append((node.target.id, ast.unparse(value) if value is not None else "", doc))
    return out


def _block(rows: dict[str, str], indent: int = 2) -> list[str]:
    width = max(map(len, rows), default=0)
    return [f"{' ' * indent}{k.ljust(width)}  {v}".rstrip() for k, v in rows.items()]


def help_text() -> str:
    chosen = defaults()
    lines = [
        "scalerl: RL runs and sweeps that study how RL for LLMs scales with compute (arXiv 2510.13786).",
        "",
        "usage:",
        "  python -m scalerl.sweep [GROUP=OPTION | KEY=VALUE ...]           one run -> outputs/runs/<tags>-<hash>/",
        "  python -m scalerl.sweep -m [KEY=V1,V2 ...] [sweep=STUDY] [FLAGS]  a sweep -> outputs/sweeps/<study>/",
        "  (`scalerl-sweep` is the same command, installed by pip)",
        "",
        "flags:",
        *_block(SCALERL_FLAGS),
        "",
        "studies (sweep=NAME, files in sweeps/; cross several: 'sweep=[loss,seeds]'; or sweep=path/to/file.yaml):",
        *_block(studies()),
        "",
        "study=NAME names the sweep's home outputs/sweeps/NAME/ and its W&B group. Without it the home is",
        "named from the sweep's own overrides (e.g. outputs/sweeps/loss=cispo,dapo,gspo/), so a relaunch",
        "finds it again and a different sweep never overwrites it. A finished run with the same config",
        "hash in another study is linked in, not trained again (--fresh trains it). A study file sets recipe",
        "keys only (never hydra.*), and a sweep past hydra.sweeper.max_arms=1000 arms is refused (docs/studies.md).",
        "",
        "config groups (GROUP=OPTION; * marks the default):",
        *_block({g: ", ".join(o + ("*" if chosen.get(g) == o else "") for o in opts) for g, opts in groups().items()}),
        "",
        "launchers (hydra/launcher=NAME, for -m; each reports failed arms and resumes them on relaunch):",
        *_block({k + ("*" if chosen.get("hydra/launcher") == k else ""): v for k, v in launchers().items()}),
        "",
        "train settings (train.KEY=VALUE; default, meaning):",
        *_block({f"train.{k}={v}": doc for k, v, doc in train_settings()}),
        "  seed=0, out_root=outputs (or $SCALERL_OUTPUT), cache_dir=~/.cache/scalerl (or $SCALERL_CACHE)",
        "",
        "shell completion (bash; Hydra's completion needs an installed command, not `python -m`):",
        '  eval "$(scalerl-sweep -sc install=bash)"     then e.g.   scalerl-sweep -m sweep=<TAB>   scalerl-sweep loss=<TAB>',
        "",
        "examples:",
        "  python -m scalerl.sweep -m loss=cispo,dapo,gspo            # the quick start: 3 arms x 300 steps",
        "  python -m scalerl.sweep -m sweep=loo --status              # leave-one-out study: state of each arm",
        "  python -m scalerl.sweep -m sweep=loss hydra/launcher=slurm hydra.launcher.partition=gpu",
        "  python -m analysis fit outputs/sweeps/<study> --out results/   # refit, rank, plot",
    ]
    return "\n".join(lines)


def print_help() -> None:
    print(help_text())
