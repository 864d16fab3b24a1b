"""Run untrusted Python programs in a sandbox: the host side.

``Sandbox(cfg).run(job)`` starts the harness (``harness.py``) in a fresh temporary
directory, isolated by one of two backends, gives it the job on stdin, enforces the
total wall-clock limit, makes sure no process of the run survives, and removes the
directory. ``Sandbox.map`` runs many jobs in parallel (``cfg.workers``).

Backends (docs/sandbox.md has the threat model and what each one stops):
- ``namespaces``: bubblewrap, the unprivileged sandbox tool Flatpak is built on. We use it
  rather than hand-written namespace code because setting up a mount namespace (a
  read-only view holding only the Python install), a pid namespace (the parent and every
  other process invisible; the kernel kills everything left when the run ends), a
  network namespace (loopback only) and dropping capabilities correctly is exactly what
  it is maintained and audited for.
- ``process``: a plain child process with the same limits, clean environment and
  temporary directory; it enters a network namespace where the kernel allows it and
  otherwise blocks sockets with an audit hook. As root it also runs under a throwaway uid.
"""
from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from scalerl.tasks.sandbox import asserts
from scalerl.tasks.sandbox.config import SandboxConfig

HARNESS = (Path(__file__).with_name("harness.py")).read_text()
STYLES = ("stdio", "call", "assert")
UID_BASE, UID_SPAN = 1 << 20, 1 << 24  # throwaway uids, far from any real account


@dataclass(frozen=True)
class Job:
    """One program and the tests to run it on."""

    code: str
    style: str
    """stdio: each test is stdin text; call: each test is a JSON list of arguments for
    ``fn_name`` (a function, or a method of class ``Solution``); assert: each test is Python
    source run after the program; it passes if it runs to the end and every top-level
    ``assert`` holds, judged on the host on plain values (``asserts.py``)."""
    tests: tuple[str, ...]
    fn_name: str = ""


@dataclass(frozen=True)
class TestRun:
    status: str
    """ok (exit code 0), error (exception, non-zero exit, too much output) or timeout."""
    stdout: str = ""
    result: str = ""
    """call: the JSON of the return value; assert: "ok" when the test ran to the end and every
    top-level assert held on the host (else "failed ...")."""
    seconds: float = 0.0


@dataclass(frozen=True)
class RunResult:
    status: str
    """ok (the harness reported every test), timeout (the whole run hit total_timeout_s)
    or crash (the harness died or reported nothing usable)."""
    tests: tuple[TestRun, ...] = ()
    isolation: str = ""
    network: str = ""
    """namespace (no route out) or audit_hook (process fallback, see docs/sandbox.md)."""
    stderr: str = ""
    setup: dict = field(default_factory=dict)


def _python(cfg: SandboxConfig) -> tuple[str, list[str]]:
    """(interpreter, read-only paths it needs): its binary, standard library and libpython."""
    exe = os.path.realpath(cfg.python or getattr(sys, "_base_executable", None) or sys.executable)
    if cfg.python:
        query = "import sysconfig,json;print(json.dumps([sysconfig.get_paths()['stdlib'],sysconfig.get_paths()['platstdlib'],sysconfig.get_config_var('LIBDIR') or '']))"
        stdlib, platstdlib, libdir = json.loads(subprocess.run([exe, "-I", "-S", "-c", query], capture_output=True,
                                                               text=True, check=True, timeout=60).stdout)
    else:
        paths = sysconfig.get_paths()
        stdlib, platstdlib, libdir = paths["stdlib"], paths["platstdlib"], sysconfig.get_config_var("LIBDIR") or ""
    need = [exe, stdlib, platstdlib]
    if libdir and os.path.isdir(libdir):
        need += [str(p) for p in Path(libdir).glob("libpython*.so*")]
    return exe, sorted({os.path.realpath(p) for p in need if os.path.exists(p)})


def _bwrap_args(exe: str, paths: list[str], workdir: str, root: bool) -> list[str]:
    # --as-pid-1: the harness is the pid namespace's init, which no process inside may signal
    # (a program cannot SIGSTOP it and so outlast the per-test timeout).
    args = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--as-pid-1", "--clearenv", "--hostname", "sandbox",
            "--cap-drop", "ALL"]
    if root:  # no user namespace: the harness drops to a throwaway uid itself, so process limits count per run,
        # after emptying the capability bounding set (CAP_SETPCAP) so nothing can regain a privilege
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:
        args += ["--unshare-user"]
    made: set[str] = set()

    def parents(path: str) -> list[str]:
        """Create the path's parents world-traversable: bwrap would make them 0700, and the
        harness must still load libraries and modules after dropping its uid."""
        out = []
        for d in reversed(Path(path).parents):
            if str(d) != "/" and str(d) not in made:
                made.add(str(d))
                out += ["--perms", "0755", "--dir", str(d)]
        return out

    for lib in ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/lib32", "/usr/lib32"):
        if os.path.islink(lib):
            args += parents(lib) + ["--symlink", os.readlink(lib), lib]
        elif os.path.isdir(lib):
            args += parents(lib) + ["--ro-bind", lib, lib]
    for p in ["/etc/ld.so.cache", *paths]:
        if os.path.exists(p):
            args += parents(p) + ["--ro-bind", p, p]
    for p in paths:  # the standard library holds the install's packages (torch, the project's finder): hide them
        for hidden in ("site-packages", "dist-packages"):
            if os.path.isdir(os.path.join(p, hidden)):
                args += ["--tmpfs", os.path.join(p, hidden), "--remount-ro", os.path.join(p, hidden)]
    args += ["--proc", "/proc", "--dev", "/dev", "--bind", workdir, "/work", "--chdir", "/work",
             "--setenv", "TMPDIR", "/work", "--setenv", "HOME", "/work", "--setenv", "LANG", "C.UTF-8"]
    return args


_PROBES: dict[tuple, str] = {}
_PROBE_LOCK = threading.Lock()


def namespaces_available(cfg: SandboxConfig) -> str:
    """"" if bubblewrap works here, else why not (cached per interpreter)."""
    exe, paths = _python(cfg)
    with _PROBE_LOCK:
        if exe not in _PROBES:
            if shutil.which("bwrap") is None:
                _PROBES[exe] = "bubblewrap (bwrap) is not installed"
            else:
                with tempfile.TemporaryDirectory(prefix="scalerl-sandbox-probe-") as d:
                    os.chmod(d, 0o777)
                    cmd = _bwrap_args(exe, paths, d, os.geteuid() == 0) + [exe, "-I", "-S", "-c", "pass"]
                    try:
                        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={})
                        _PROBES[exe] = "" if p.returncode == 0 else f"bwrap failed: {p.stderr.strip()[:300]}"
                    except (OSError, subprocess.TimeoutExpired) as e:
                        _PROBES[exe] = f"bwrap failed: {e}"
        return _PROBES[exe]


def isolation(cfg: SandboxConfig) -> str:
    """The isolation ``cfg`` gets on this machine: namespaces, or process."""
    if cfg.isolation == "process":
        return "process"
    return "process" if namespaces_available(cfg) else "namespaces"


def refusal(cfg: SandboxConfig) -> str:
    """Why ``cfg`` cannot grade on this machine ("" if it can). Asked by ``Sandbox`` and, before any
    process starts, by the launch's input checks (a sweep's --dry-run included)."""
    exe, paths = _python(cfg)
    if cfg.isolation != "process":
        why = namespaces_available(cfg)
        if why and cfg.isolation == "namespaces":
            return f"task.sandbox.isolation=namespaces: {why} (docs/sandbox.md)"
        if why and not cfg.unsafe_process_isolation:
            return (f"sandbox: bubblewrap is unavailable ({why}); install it (apt-get install bubblewrap), or set "
                    "task.sandbox.unsafe_process_isolation=true to grade under process isolation, which leaves the "
                    "file system, /dev/shm, SysV IPC and (as a non-root user) the grader's processes open to the "
                    "programs (docs/sandbox.md)")
    elif not cfg.unsafe_process_isolation:
        return ("task.sandbox.isolation=process leaves the file system, /dev/shm, SysV IPC and (as a non-root user) "
                "the grader's processes open to the programs; set task.sandbox.unsafe_process_isolation=true to "
                "accept that (docs/sandbox.md)")
    if isolation(cfg) == "process" and os.geteuid() == 0:
        hidden = [q for q in paths if not _world_readable(q)]
        if hidden:
            return (f"task.sandbox.isolation=process runs code under a throwaway uid, which cannot read {hidden[0]}; "
                    "install bubblewrap (namespaces) or set task.sandbox.python to a world-readable interpreter")
    return ""


class Sandbox:
    """Runs jobs under ``cfg``'s limits and isolation. Thread-safe; holds no processes between runs."""

    def __init__(self, cfg: SandboxConfig = SandboxConfig()):
        self.cfg = cfg
        self.exe, self.paths = _python(cfg)
        self.root = os.geteuid() == 0
        why = refusal(cfg)
        if why:
            raise RuntimeError(why)
        self.isolation = isolation(cfg)
        if self.isolation == "process" and cfg.isolation == "auto":
            warnings.warn(f"sandbox: namespaces unavailable ({namespaces_available(cfg)}); falling back to process "
                          "isolation, which cannot hide the file system (docs/sandbox.md)", RuntimeWarning, stacklevel=2)

    def map(self, jobs: list[Job]) -> list[RunResult]:
        """Run ``jobs`` in parallel (``cfg.workers`` at a time, default one per core); results in order."""
        if not jobs:
            return []
        workers = min(len(jobs), self.cfg.workers or os.cpu_count() or 1)
        if workers == 1:
            return [self.run(j) for j in jobs]
        with ThreadPoolExecutor(workers, thread_name_prefix="sandbox") as pool:
            return list(pool.map(self.run, jobs))

    def run(self, job: Job) -> RunResult:
        if job.style not in STYLES:
            raise ValueError(f"unknown test style {job.style!r}; expected one of {STYLES}")
        if not job.tests:
            return RunResult("ok", (), self.isolation)
        c = self.cfg
        tests, checks = list(job.tests), None
        if job.style == "assert":  # operands go in, the comparisons stay here (asserts.py)
            parts = [_split(t) for t in job.tests]
            tests, checks = [p[0] for p in parts], [p[1] for p in parts]
        uid = UID_BASE + secrets.randbelow(UID_SPAN) if self.root else None
        workdir = tempfile.mkdtemp(prefix="scalerl-sandbox-")
        payload = {"code": job.code, "style": job.style, "tests": tests, "fn_name": job.fn_name,
                   "timeout_s": c.timeout_s, "cpu_s": c.cpu_s, "memory_mb": c.memory_mb, "file_mb": c.file_mb,
                   "processes": c.processes, "output_kb": c.output_kb, "open_files": c.open_files, "uid": uid,
                   "reap_all": self.isolation == "namespaces" or uid is not None,
                   "network_isolated": self.isolation == "namespaces", "isolate_network": self.isolation == "process"}
        try:
            if uid is not None:
                os.chown(workdir, uid, uid)
            os.chmod(workdir, 0o711 if uid is not None else 0o700)
            launcher = [self.exe, "-I", "-S", "-c", HARNESS]
            if self.isolation == "namespaces":
                cmd, env, cwd = _bwrap_args(self.exe, self.paths, workdir, self.root) + launcher, {}, "/"
            else:
                cmd, cwd = launcher, workdir
                env = {"TMPDIR": workdir, "HOME": workdir, "LANG": "C.UTF-8"}
            result = self._execute(cmd, env, cwd, json.dumps(payload).encode(), uid)
            if checks is not None:
                result = dataclasses.replace(result, tests=tuple(
                    _judged(t, check) for t, check in zip(result.tests, checks)))
            return dataclasses.replace(result, setup={**result.setup, "uid": uid, "workdir": workdir})
        finally:
            _remove(workdir)

    def _execute(self, cmd, env, cwd, payload: bytes, uid) -> RunResult:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, cwd=cwd, start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(payload, timeout=self.cfg.total_timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _killpg(proc.pid)
            out, err = proc.communicate()
        finally:
            _killpg(proc.pid)
            proc.wait()
            _reap(proc.pid, uid)
        stderr = err.decode("utf-8", "replace")[-2000:]
        if timed_out:
            return RunResult("timeout", (), self.isolation, stderr=stderr)
        try:
            report = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
            tests = tuple(TestRun(t["status"], t["stdout"], t["result"], t["seconds"]) for t in report["tests"])
        except (ValueError, IndexError, KeyError, TypeError):
            return RunResult("crash", (), self.isolation, stderr=stderr)
        return RunResult("ok", tests, self.isolation, report["setup"].get("network", ""), stderr, report["setup"])


def _split(test: str) -> tuple[list, list | None]:
    try:
        return asserts.split_asserts(test)
    except (SyntaxError, ValueError, RecursionError):  # graded as failed (None), never run
        return [["exec", "raise SyntaxError('the test does not parse')"]], None


def _judged(run: TestRun, checks: list | None) -> TestRun:
    """An assert-style test's verdict, from its operands' plain values, on this side."""
    if run.status != "ok":
        return dataclasses.replace(run, result="")
    verdict = asserts.verdict(checks, run.result) if checks is not None else "failed (the test does not parse)"
    return dataclasses.replace(run, result=verdict)


def _world_readable(path: str) -> bool:
    p = Path(path)
    dirs_ok = all(os.stat(d).st_mode & 0o001 for d in p.parents)
    return dirs_ok and bool(os.stat(p).st_mode & (0o005 if p.is_dir() else 0o004))


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _procs():
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            yield int(entry.name)


def _stat_session(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _reap(session: int, uid) -> None:
    """Kill whatever the run left: its throwaway uid's processes (root), else its session's.

    Under namespaces the kernel already killed the pid namespace when its first process
    exited; this covers the process backend. Processes are stopped before they are
    killed: a fork bomb refills every slot one kill frees, but a stopped process cannot
    fork, and stopped ones still count against the process limit."""
    def mine(p):
        return (uid is not None and _uid_of(p) == uid) or _stat_session(p) == session

    stopped: set[int] = set()
    for _ in range(1000):
        left = {p for p in _procs() if mine(p)}
        if not left:
            return
        if left <= stopped:
            for p in left:
                _signal(p, signal.SIGKILL)
            stopped.clear()
        else:
            for p in left - stopped:
                _signal(p, signal.SIGSTOP)
            stopped |= left
        time.sleep(0.002)


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _remove(path: str) -> None:
    """Remove the run's directory even if the program made parts of it unreadable."""
    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
        except OSError:
            pass
        try:
            func(p)
        except OSError:
            pass

    for _ in range(3):
        shutil.rmtree(path, onerror=fix)
        if not os.path.exists(path):
            return
