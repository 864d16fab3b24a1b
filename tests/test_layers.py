"""The architecture, checked: imports go one way through the layers, the Hydra
plugins and the command line's config path load no heavy library, and the
test gear stays out of the runtime package (and the local SLURM cluster needs only the stdlib)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

# Bottom to top. A module may import from its own package or from a lower layer;
# packages that share a layer are independent of each other.
LAYERS = [
    ["core"],
    ["losses", "aggregation", "adv_norm", "filters", "length", "precision", "asynchrony", "correction",
     "routing"],  # the design axes
    ["registry"],  # AXES and the recipe built from them
    ["models", "tasks", "loggers"],
    ["generation"],
    ["config"],
    ["train"],
    ["launch"],
    ["sweep"],  # the entry point
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def unit(module: str) -> str | None:
    """The layer unit of a scalerl module name (its first component under scalerl)."""
    parts = module.split(".")
    if parts[0] != "scalerl" or len(parts) == 1:
        return None
    return parts[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import in the file."""
    tree = ast.parse(path.read_text())
    out = []

    def visit(node, nested):
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                out.append((child.module, child.lineno, inner))
                out.extend((f"{child.module}.{a.name}", child.lineno, inner) for a in child.names)
            visit(child, inner)

    visit(tree, False)
    return out


def runtime_modules():
    for path in sorted((REPO / "scalerl").rglob("*.py")):
        name = module_name(path)
        if unit(name) is not None:
            yield path, name


def test_every_package_has_a_layer():
    packages = {p.name if p.is_dir() else p.stem for p in (REPO / "scalerl").iterdir()
                if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")}
    assert packages == set(RANK)


@pytest.mark.parametrize("path,name", list(runtime_modules()), ids=lambda x: x if isinstance(x, str) else "")
def test_imports_go_down_the_layers(path, name):
    me = unit(name)
    bad = []
    for target, line, _ in imports(path):
        other = unit(target)
        if other is None or other == me:
            continue
        if other not in RANK:
            bad.append(f"{path.name}:{line} imports {target} (not a runtime layer)")
        elif RANK[other] >= RANK[me]:
            bad.append(f"{path.name}:{line} imports {target}: layer {other} is not below {me}")
    assert not bad, "\n".join(bad)


# Inside scalerl.generation, bottom to top (its docstring): a subpackage imports only from itself or one below.
GENERATION_LAYERS = ["transfer", "engines", "fleet"]
GENERATION_DOORS = {"scalerl.generation"} | {f"scalerl.generation.{sub}" for sub in GENERATION_LAYERS}


def from_modules(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every import statement, with the module itself (not the names taken from it)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
    return out


def test_generation_subpackages_go_one_way():
    assert sorted(p.name for p in (REPO / "scalerl" / "generation").iterdir()
                  if (p / "__init__.py").exists()) == sorted(GENERATION_LAYERS)
    bad = []
    for path in sorted((REPO / "scalerl" / "generation").rglob("*.py")):
        parts = module_name(path).split(".")
        if len(parts) < 3:
            continue  # the package's own __init__: the door outside code comes in by
        # generation/worker.py is only the command-line name of fleet's worker: above every layer
        me = len(GENERATION_LAYERS) if parts[2:] == ["worker"] else GENERATION_LAYERS.index(parts[2])
        for target, line in from_modules(path):
            t = target.split(".")
            if t[:2] != ["scalerl", "generation"]:
                continue
            if len(t) == 2:
                bad.append(f"{path.name}:{line} imports scalerl.generation (the door is for outside code)")
            elif GENERATION_LAYERS.index(t[2]) > me:
                bad.append(f"{path.name}:{line} imports {target}: {t[2]} is above {parts[2]}")
    assert not bad, "\n".join(bad)


def test_outside_code_imports_generation_through_its_doors():
    # The trainer sees interfaces, not modules: a subpackage's __init__ names what it offers.
    bad = [f"{path.relative_to(REPO)}:{line} imports {target}"
           for path, name in runtime_modules() if unit(name) != "generation"
           for target, line in from_modules(path)
           if target.startswith("scalerl.generation") and target not in GENERATION_DOORS]
    assert not bad, "\n".join(bad)


def import_graph() -> dict[str, set[str]]:
    """scalerl module -> the scalerl modules it imports, at module level or inside a function (a lazy
    import is for heavy optional libraries, never to dodge a cycle: docs/architecture.md).
    ``from pkg import sub`` names the submodule ``sub``, not ``pkg``'s ``__init__``."""
    mods = {name: path for path, name in runtime_modules()}
    graph = {}
    for name, path in mods.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                            for a in node.names}
        graph[name] = {t for t in targets if t in mods and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                comp.append(stack.pop())
                if comp[-1] == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycles_finds_a_circle_and_only_a_circle():
    # a -> b -> c -> a is one circle; d -> a hangs off it; e stands alone.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_anywhere_under_scalerl():
    # Between packages the layers forbid circles; this catches them inside one package too.
    assert cycles(import_graph()) == []


def test_the_local_cluster_needs_only_the_standard_library():
    # .ci/run starts it with the system's python3 before anything is pip-installed.
    paths = sorted((REPO / "tests" / "local_slurm").rglob("*.py"))
    assert len(paths) >= 5
    for path in paths:
        for target, line, _ in imports(path):
            top = target.split(".")[0]
            assert top in sys.stdlib_module_names or top == "local_slurm", f"{path}:{line} imports {target}"


def test_analysis_knows_nothing_of_scalerl_or_torch():
    for path in (REPO / "analysis").rglob("*.py"):
        for target, line, _ in imports(path):
            assert target.split(".")[0] not in ("scalerl", "torch"), f"{path}:{line} imports {target}"


def test_plugins_reach_scalerl_only_lazily():
    # Hydra imports every module under hydra_plugins in every Hydra app on the machine.
    for path in (REPO / "hydra_plugins").rglob("*.py"):
        for target, line, nested in imports(path):
            if target.startswith("scalerl"):
                assert nested, f"{path}:{line} imports {target} at module level"


def fresh(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_importing_the_plugins_loads_nothing_heavy_and_registers_nothing():
    out = fresh(
        "import sys, pkgutil, importlib\n"
        "import hydra_plugins.scalerl_plugins as p\n"
        "for m in pkgutil.iter_modules(p.__path__): importlib.import_module(f'{p.__name__}.{m.name}')\n"
        "from hydra.core.config_store import ConfigStore\n"
        "from omegaconf import OmegaConf\n"
        "repo = ConfigStore.instance().repo\n"
        "print(sorted(m for m in ('torch', 'transformers', 'scalerl.train', 'scalerl.config') if m in sys.modules),"
        " 'base_config.yaml' in repo, 'schema' in repo, OmegaConf.has_resolver('scalerl_run_name'))")
    assert out == "[] False False False"


def test_composing_and_validating_loads_neither_torch_nor_transformers():
    out = fresh(
        "import pathlib, sys, tempfile\n"
        "from scalerl.config import compose, validate\n"
        "from scalerl.registry import build_recipe\n"
        "hf = pathlib.Path(tempfile.mkdtemp()); (hf / 'config.json').write_text('{}')\n"
        "for o in (['loss=dapo'], ['recipe=minimax'], ['model=hf', f'model.path={hf}']): build_recipe(validate(compose(o)))\n"
        "print([m for m in ('torch', 'transformers', 'tokenizers', 'wandb', 'pandas') if m in sys.modules])")
    assert out == "[]"


def test_only_building_a_run_looks_up_a_registry():
    # The loop, the rollout and the update call the run's Recipe; registries are read once, in setup.py.
    registries = {"LOSSES", "AGGREGATIONS", "ADV_NORMS", "FILTERS", "LENGTHS", "PRECISIONS", "ASYNC_MODES", "CORRECTIONS",
                  "MODELS", "TASKS", "LOGGERS", "GENERATORS", "AXES", "OPTION_GROUPS"}
    for path in (REPO / "scalerl" / "train").glob("*.py"):
        used = {t.rsplit(".", 1)[-1] for t, _, _ in imports(path)} & registries
        assert path.name == "setup.py" or not used, f"{path.name} looks up {sorted(used)}"


def test_code_says_why_not_which_ticket():
    # Comments and docstrings cite the paper or docs/, never an issue number: a user has only the repository.
    import re

    # A CSS colour (`color:#222`, analysis/page) follows a colon; a ticket number never does.
    ticket = re.compile(r"\b[Ii]ssues? \d+|(?<![\w/:])#\d{2,}\b")
    assert ticket.search("see #29") and ticket.search("issue 29") and not ticket.search("color:#222")
    bad = [f"{p.relative_to(REPO)}:{n}" for root in ("scalerl", "analysis") for p in (REPO / root).rglob("*.py")
           for n, line in enumerate(p.read_text().splitlines(), 1) if ticket.search(line) and "submitit #" not in line]
    assert not bad, bad


def test_no_test_imports_another_test():
    # Shared test code lives in library modules (helpers.py, vllm_helpers.py, push_worker.py, ...):
    # importing a test module runs its module-level set-up and registers its tests twice. The scan is
    # textual, so it also sees scripts a test writes out and starts in a subprocess.
    import re

    pattern = re.compile(r"^\s*(?:from\s+test_\w+\s+import|import\s+test_\w+)", re.M)
    bad = [f"{p.relative_to(REPO)}" for p in (REPO / "tests").rglob("*.py") if pattern.search(p.read_text())]
    assert not bad, bad


_IMPORT_TRACE = '''
import os, sys

HEAVY = ("transformers", "torch._dynamo", "torch.distributed.tensor", "sympy")


class _Trace:
    """Writes, per process, every module name it is asked to find (never finds one itself)."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith(HEAVY) or name == "scalerl.train.loop":
            with open(os.path.join(os.environ["SCALERL_IMPORT_TRACE"], f"{os.getpid()}.txt"), "a") as f:
                f.write(name + "\\n")
        return None


sys.meta_path.insert(0, _Trace())
'''


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny", "tiny_moe"])
def test_an_embedded_run_imports_no_transformers_dynamo_or_dtensor(tmp_path, model):
    # Every process of a one-step run of the default recipe through the entry point (the sweep, the
    # arms' forkserver, the arm, its generator process) records the modules it imports (a
    # sitecustomize on PYTHONPATH, inherited by each Python process, forked ones included): the
    # trainer is imported, never transformers (the model is models/llama.py or models/qwen3_moe.py,
    # the tokenizer models/tokenizer.py's PlainTokenizer: about 4 CPU-s a process, docs/testing.md)
    # nor torch._dynamo (torch's optimizers import it behind a guard that train/optimizer.py skips:
    # 1.1 CPU-s) nor torch.distributed.tensor and its sympy (0.6 CPU-s: an unsharded trainer has no
    # DTensor to ask about, train/sharding.py). The random-init checkpoint is built first, as any
    # earlier run on this cache did: building it (once per cache) still uses transformers' modeling
    # (docs/embedded.md).
    from helpers import ANSWERS_ONLY, run_cli

    from scalerl.config import compose, validate
    from scalerl.models import MODELS

    # tiny: the answers-only shape, whose warm start the tests ship; tiny_moe: the default shape, whose
    # warm start scalerl ships (another shape would train one first)
    args = [f"model={model}", "train.steps=1", "train.eval_every=1", "logger=none", *(ANSWERS_ONLY if model == "tiny" else [])]
    cfg = validate(compose(args))
    MODELS[model].fn(cfg.model, Path(cfg.cache_dir).expanduser(), log=lambda line: None)
    hook, trace = tmp_path / "hook", tmp_path / "trace"
    hook.mkdir(), trace.mkdir()
    (hook / "sitecustomize.py").write_text(_IMPORT_TRACE)
    env = {"PYTHONPATH": f"{hook}:{REPO}", "SCALERL_IMPORT_TRACE": str(trace)}
    run_cli(args, tmp_path / "out", extra_env=env)
    per_pid = {p.stem: p.read_text().split() for p in trace.glob("*.txt")}
    trainers = [pid for pid, names in per_pid.items() if "scalerl.train.loop" in names]
    assert trainers, f"the trace saw no process import the trainer: {sorted(per_pid)}"
    heavy = sorted({n for names in per_pid.values() for n in names if n != "scalerl.train.loop"})
    assert heavy == [], heavy
