"""Helpers shared by scalerl's tests (imported as ``helpers``)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TEST_WARM_STARTS = REPO / "tests" / "assets"
"""The answers-only shape's warm start (ANSWERS_ONLY), test gear kept out of the package."""
WARM_STARTS_ENV = "SCALERL_WARM_STARTS"
"""scalerl.train.warmstart.SEARCH_ENV (a literal here: importing the trainer costs seconds per session)."""


APT_BINARIES = frozenset((
    "bwrap",                                              # bubblewrap: task=code's namespaces sandbox
    "chromium",                                           # the report's browser test
    "sbatch", "srun", "squeue", "scancel", "sinfo", "scontrol", "sacct", "sacctmgr", "salloc",  # SLURM
    "slurmctld", "slurmd", "slurmdbd", "slurmstepd", "munged", "mariadbd", "mariadb",
))
"""Programs that only an apt package installs (.ci/run installs them; the README's pip install does not)."""


def path_without(names, path: str, farm: Path) -> str:
    """``path`` with every folder that holds one of ``names`` replaced by a folder of symlinks to
    its other entries (under ``farm``): the system's binaries stay where they are (other processes
    use them), and a process started with the result finds none of ``names``."""
    dirs = []
    for i, d in enumerate(path.split(os.pathsep)):
        if d and os.path.isdir(d) and any(os.path.lexists(os.path.join(d, n)) for n in names):
            copy = farm / str(i)
            copy.mkdir(parents=True)
            for entry in os.scandir(d):
                if entry.name not in names:
                    (copy / entry.name).symlink_to(entry.path)
            d = str(copy)
        dirs.append(d)
    return os.pathsep.join(dirs)


TIER_ENV = "SCALERL_TEST_TIER"
"""Set to ``unit`` while a unit test runs (``tests/conftest.py``)."""


def skip_without_apt_package(reason: str) -> None:
    """Skip a test whose apt package (bubblewrap, SLURM, Chromium) is missing; in the unit tier,
    which must pass without any (``tests/conftest.py``), fail instead: the test belongs in ``system``."""
    if os.environ.get(TIER_ENV) == "unit":
        pytest.fail(f"a unit test needs an apt package ({reason}); mark it @pytest.mark.system (docs/testing.md)")
    pytest.skip(reason)


def run_cli(args: list[str], out_root: Path, timeout: int = 600, extra_env: dict | None = None, check: bool = True):
    """Run ``python -m scalerl.sweep ARGS`` with outputs under ``out_root``."""
    env = {**os.environ, "SCALERL_OUTPUT": str(out_root), "SCALERL_NO_BAR": "1", **(extra_env or {})}
    proc = subprocess.run([sys.executable, "-m", "scalerl.sweep", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"scalerl.sweep {args} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def popen_cli(args: list[str], out_root: Path, log: Path):
    """Start ``python -m scalerl.sweep ARGS`` in the background (for kill/resume tests)."""
    env = {**os.environ, "SCALERL_OUTPUT": str(out_root), "SCALERL_NO_BAR": "1"}
    return subprocess.Popen([sys.executable, "-m", "scalerl.sweep", *args], cwd=REPO, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def read_rows(path: Path) -> list[dict]:
    import json

    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def wait_for(predicate, timeout: float = 300, what: str = "condition", proc=None, detail=None):
    """Poll ``predicate`` until it holds; on failure say what was awaited and, with ``detail`` (a
    callable returning text, such as a log's tail), what the awaited process had done by then."""
    import time

    t0 = time.time()
    while time.time() - t0 < timeout:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before {what}" + _detail(detail))
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}" + _detail(detail))


def _detail(detail) -> str:
    if detail is None:
        return ""
    try:
        return "\n" + str(detail())[-4000:]
    except Exception as e:  # the message must not hide the timeout
        return f"\n(no detail: {e!r})"


def _cli_in_child(args: list[str], env: dict, log: str, err_log: str | None = None, whole_env: bool = False) -> None:
    """Target of ``ForkedCli``: the entry point of ``python -m scalerl.sweep``, output to ``log``
    (stderr to ``err_log`` when given). ``whole_env``: ``env`` is the whole environment, as a
    subprocess would get it, not additions to the server's."""
    os.environ.pop("SCALERL_FAILPOINT", None)
    if whole_env:
        os.environ.clear()
    os.environ.update(env)
    os.chdir(REPO)
    out = open(log, "a", buffering=1)
    err = open(err_log, "a", buffering=1) if err_log else out
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout, sys.stderr = out, err
    from scalerl.launch.app import main

    main(list(args))


class ForkedCli:
    """``python -m scalerl.sweep ARGS`` in processes forked from a server that imported torch,
    transformers and scalerl's trainer once (multiprocessing's forkserver): the same entry point
    and a fresh process each time, without ~5 s of imports per launch (the crash tests launch one
    run a dozen times). Start it before any torch op runs in the server: it only imports."""

    def __init__(self):
        from scalerl.launch.local_pool import arm_context  # the server a sweep forks its arms from

        self.ctx = arm_context()

    def start(self, args: list[str], out_root: Path, log: Path, failpoint: str | None = None):
        env = {"SCALERL_OUTPUT": str(out_root), "SCALERL_NO_BAR": "1"}
        if failpoint:
            env["SCALERL_FAILPOINT"] = failpoint
        proc = self.ctx.Process(target=_cli_in_child, args=(list(args), env, str(log)))
        proc.start()
        return proc

    def run(self, args: list[str], out_root: Path, log: Path, failpoint: str | None = None,
            timeout: float = 600) -> int:
        proc = self.start(args, out_root, log, failpoint)
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            raise AssertionError(f"scalerl.sweep {args} did not finish in {timeout} s; log {log}")
        return proc.exitcode


_FORKED: ForkedCli | None = None


def forked_cli() -> ForkedCli:
    """The session's one ``ForkedCli`` (its server imports once, at the first call)."""
    global _FORKED
    if _FORKED is None:
        _FORKED = ForkedCli()
    return _FORKED


def cli(args: list[str], out_root: Path, timeout: int = 600, extra_env: dict | None = None, check: bool = True):
    """``run_cli`` without a fresh interpreter: the same entry point, arguments, environment,
    working directory, exit code and separate stdout/stderr, in a process forked from
    ``forked_cli()``'s server, so it skips ~5 s of imports. Not for tests that check what a
    fresh interpreter imports (``--help`` staying light): those keep ``run_cli``."""
    import tempfile

    env = {**os.environ, "SCALERL_OUTPUT": str(out_root), "SCALERL_NO_BAR": "1", **(extra_env or {})}
    with tempfile.TemporaryDirectory() as logs:
        out, err = Path(logs) / "stdout", Path(logs) / "stderr"
        proc = forked_cli().ctx.Process(target=_cli_in_child, args=(list(args), env, str(out), str(err), True))
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise AssertionError(f"scalerl.sweep {args} did not finish in {timeout} s:\n{out.read_text()[-4000:]}")
        done = subprocess.CompletedProcess(["scalerl.sweep", *args], proc.exitcode,
                                           out.read_text() if out.exists() else "", err.read_text() if err.exists() else "")
    if check and done.returncode != 0:
        raise AssertionError(f"scalerl.sweep {args} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done

# metrics.jsonl / steps.jsonl fields that depend on the wall clock: left out when runs are compared
VOLATILE = ("wall_s", "eval_s", "device_hours", "tokens_per_s", "step_time_s", "samples_per_s", "trainer_idle_frac",
            "generator_idle_frac", "push_time_s", "queue_depth", "mismatch_forward_s", "correction_forward_s")


def arms(sweep: Path) -> list[Path]:
    """A sweep directory's run directories (each has the launch record its sweep wrote first),
    not its other folders (``previous/``: results moved aside, ``.submitit``)."""
    return sorted(p for p in sweep.iterdir() if p.is_dir() and (p / "launch.json").exists())


def plant_leading_trial(out_root: Path, steps: int = 3000) -> Path:
    """Create ``<out_root>/sweeps/default/optuna.db`` with a study "planted" holding one finished
    ``train.lr`` trial at 0.99 at every even step up to ``steps``: any new trial trails it from its
    step-0 eval, so a median pruner cuts it. Returns the sweep directory."""
    import optuna
    from optuna.distributions import FloatDistribution

    sweep = out_root / "sweeps" / "default"
    sweep.mkdir(parents=True)
    space = {"train.lr": FloatDistribution(5e-5, 3e-4, log=True)}
    study = optuna.create_study(study_name="planted", storage=f"sqlite:///{sweep / 'optuna.db'}", direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={"train.lr": 1e-4}, distributions=space, value=0.99,
                                              intermediate_values={s: 0.99 for s in range(0, steps + 1, 2)}))
    return sweep


# The embedded task's answers-only shape: completions of a few tokens, so the tests of a
# mechanism (resume, ranks, schedules, losses) stay fast, with the RL settings of the rounds
# that sized it (sampling at 1.0, lr 1e-4 from the first step, no final warm-start phase). The
# default's reasoning shape (completions that think for ~40 tokens) is what
# tests/test_reasoning_task.py, the stored curve (tests/test_train.py) and the CLI tests run.
ANSWERS_ONLY = ("task.think=0", "length.max_new_tokens=8", "model.warmstart.final_steps=0",
                "train.temperature=1.0", "train.lr=1e-4", "train.warmup_steps=0")

TINY_RUN = ["logger=none", "train.threads=1", "async=sync", *ANSWERS_ONLY, "batch.prompts=8", "batch.generations=8",
            "batch.minibatches=2", "train.eval_samples=1", "precision.generator_body=auto"]
"""The small run the data-parallel tests start on one rank and on two (tests/test_distributed.py)."""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def veth_namespaces(tag: str, net: int):
    """Network namespaces A (10.NET.k.1) and B (10.NET.k.2) joined by a veth pair, removed on exit;
    yields (A, B, A's address, B's link). ``tag`` keeps two tests' namespaces and links apart.
    Skips when they cannot be made (the caller checks for root and the tools)."""
    k = os.getpid() % 200 + 20
    a, b, dev_a, dev_b = f"scalerl-{tag}a{k}", f"scalerl-{tag}b{k}", f"{tag}a{k}", f"{tag}b{k}"
    try:
        _ip("netns", "add", a)
        _ip("netns", "add", b)
    except subprocess.CalledProcessError as e:
        subprocess.run(["ip", "netns", "del", a], capture_output=True)
        pytest.skip(f"cannot make network namespaces here: {e.stderr.decode().strip()}")
    try:
        _ip("link", "add", dev_a, "type", "veth", "peer", "name", dev_b)
        _ip("link", "set", dev_a, "netns", a)
        _ip("link", "set", dev_b, "netns", b)
        for ns, dev, addr in ((a, dev_a, f"10.{net}.{k}.1/24"), (b, dev_b, f"10.{net}.{k}.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield a, b, f"10.{net}.{k}.1", dev_b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


# ------------------------------------------------ shared by several test files
def make_pool(cfg, n):
    """Generator processes for ``cfg``'s checkpoint and precision, plus the trainer's own model and policy."""
    import torch

    from scalerl.generation.fleet.pool import GeneratorPool
    from scalerl.generation.fleet.generator_loop import WorkerSpec
    from scalerl.models.load import load_checkpoint
    from scalerl.models.policy import Policy
    from scalerl.precision.base import linear_head
    from scalerl.registry import build_recipe
    from scalerl.train.setup import prepare_checkpoint

    _, ckpt = prepare_checkpoint(cfg)
    model, tok = load_checkpoint(ckpt, dtype=torch.float32, device=torch.device("cpu"))
    body = cfg.precision.generator_body
    spec = WorkerSpec(rank=0, n_generators=n, checkpoint=str(ckpt), device="cpu",
                      dtype="float32" if body in ("auto", "engine") else body, compute_dtype="float32",
                      heads=build_recipe(cfg).heads, attn_implementation=None, threads=1, timeout_s=60,
                      in_flight=True, schema=())
    pool = GeneratorPool(spec, n, model.state_dict())
    pool.start()
    return pool, model, Policy(model, gen_head=linear_head(torch.float32), train_head=linear_head(torch.float32))


def torchrun(args: list[str], run_dir: Path, nproc: int = 2, timeout: int = 900, check: bool = True):
    """``torchrun --nproc_per_node N -m scalerl.sweep ARGS`` into ``run_dir``."""
    env = {**os.environ, "SCALERL_NO_BAR": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "scalerl.sweep", *args, f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc
