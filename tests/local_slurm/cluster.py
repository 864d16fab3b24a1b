"""Install, start, stop and inspect a local SLURM 22.05 cluster, as root: this machine's node,
plus namespaced nodes with their own addresses (``--nodes N``, nodes.py).

    python3 tests/local_slurm install   # apt-get the packages if a binary is missing (~10-20 s)
    python3 tests/local_slurm start     # idempotent; ~2-5 s from installed packages
    python3 tests/local_slurm start --nodes 3   # plus rl-node1..3 (partition `nodes`)
    python3 tests/local_slurm status
    python3 tests/local_slurm stop

Daemons, in start order: munged -> mariadbd -> slurmdbd -> slurmctld -> slurmd. All of them run as
root in the foreground of their own session and keep their pid files, logs, spool, controller
state, MariaDB data, munge key and job-completion log under one state dir
(`$SCALERL_SLURM_DIR`, default /var/lib/scalerl-slurm). munged and mariadbd listen on private
sockets there, so a system munge or MariaDB is never touched. Only slurm.conf and slurmdbd.conf
live in /etc/slurm, because that is where the Debian binaries look.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from . import nodes, procs
from .procs import ClusterError
from .templates import MANAGED, Layout, render_slurm_conf, render_slurmdbd_conf

log = logging.getLogger("local_slurm")

CONF_DIR = Path("/etc/slurm")
DEFAULT_STATE_DIR = Path("/var/lib/scalerl-slurm")
DEFAULT_CPUS = 8
APT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server", "iproute2")
BINARIES = (
    "munged", "mariadbd", "mariadb", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd",
    "sbatch", "scancel", "sacct", "sacctmgr", "scontrol", "sinfo", "ip",  # ip: the namespaced nodes (nodes.py)
)
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")  # start order
NODE_OK = ("idle", "mixed", "allocated", "completing")  # `sinfo -h -o %T` of a usable node


def state_dir() -> Path:
    return Path(os.environ.get("SCALERL_SLURM_DIR") or DEFAULT_STATE_DIR)


def layout(state: Path | None = None, cpus: int = DEFAULT_CPUS, n_nodes: int | None = None) -> Layout:
    """The cluster's paths and node description for this machine (hostname, memory); ``n_nodes``:
    namespaced nodes (None: as the current slurm.conf has them)."""
    return Layout(
        state_dir=Path(state or state_dir()).resolve(),
        hostname=socket.gethostname().split(".")[0],  # what `hostname -s` prints
        cpus=cpus,
        real_memory_mb=_mem_total_mb(),
        nodes=_configured_nodes() if n_nodes is None else n_nodes,
    )


def _mem_total_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise ClusterError("no MemTotal in /proc/meminfo")


def _env(**extra: str) -> dict[str, str]:
    """The environment for daemons and clients: pinned to our slurm.conf whatever the caller set."""
    path = os.environ.get("PATH", "/usr/bin:/bin")
    return {**os.environ, "SLURM_CONF": str(CONF_DIR / "slurm.conf"),
            "PATH": f"{path}:/usr/sbin:/sbin", **extra}


def _which(name: str) -> str | None:
    return shutil.which(name, path=_env()["PATH"])


# ---------------------------------------------------------------- install


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if _which(b) is None]


def install() -> float:
    """apt-get the SLURM, munge and MariaDB packages if any binary is missing; returns seconds."""
    missing = missing_binaries()
    if not missing:
        log.info("packages already installed")
        return 0.0
    if os.geteuid() != 0:
        raise ClusterError(f"missing {missing}; installing needs root: "
                           "sudo python3 tests/local_slurm install")
    if shutil.which("apt-get") is None:
        raise ClusterError(f"missing {missing} and no apt-get; "
                           f"install {' '.join(APT_PACKAGES)} yourself")
    t0 = time.monotonic()
    env = {**_env(), "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"],
                 ["apt-get", "install", "-y", "--no-install-recommends", *APT_PACKAGES]):
        res = subprocess.run(argv, env=env, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            out = "\n".join((res.stdout + res.stderr).splitlines()[-25:])
            raise ClusterError(f"{' '.join(argv)} failed with code {res.returncode}:\n{out}")
    if still := missing_binaries():
        raise ClusterError(f"apt-get install succeeded but {still} are still missing")
    dt = time.monotonic() - t0
    log.info("installed %s in %.1f s", " ".join(APT_PACKAGES), dt)
    return dt


# ---------------------------------------------------------------- status


def status(state: Path | None = None) -> dict[str, bool]:
    """Which daemons are up, judged by their pid files."""
    lay = layout(state)
    up = {d: procs.live_pid(lay.pid_file(d), d) is not None for d in DAEMONS}
    return up | {f"slurmd@{n}": procs.live_pid(lay.pid_file("slurmd", n), "slurmd") is not None
                 for n in nodes.names(lay.nodes)}


def _node_state(lay: Layout, node: str | None = None) -> str:
    rc, out = procs.probe(["sinfo", "-h", "-n", node or lay.hostname, "-o", "%T"], _env())
    return out.strip() if rc == 0 else ""


def _ctld_up() -> bool:
    rc, out = procs.probe(["scontrol", "ping"], _env())
    return rc == 0 and " is UP" in out


def _clusters() -> list[str] | None:
    rc, out = procs.probe(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], _env())
    return out.split() if rc == 0 else None


def healthy(state: Path | None = None) -> bool:
    """All daemons live, the controller answers, the node is usable, sacctmgr knows the cluster."""
    lay = layout(state)
    return (all(status(lay.state_dir).values()) and _ctld_up()
            and all(_node_state(lay, n) in NODE_OK for n in [lay.hostname, *nodes.names(lay.nodes)])
            and lay.cluster_name in (_clusters() or []))


def env_exports() -> dict[str, str]:
    """What a shell needs to reach this cluster: only SLURM_CONF, and only if set elsewhere."""
    return {"SLURM_CONF": str(CONF_DIR / "slurm.conf")}


# ---------------------------------------------------------------- start


@dataclass(frozen=True)
class _Daemon:
    name: str
    argv: Callable[[Layout], list[str]]
    ready: Callable[[Layout], bool]
    env: Callable[[Layout], dict[str, str]] = lambda lay: _env()


def _mysql(lay: Layout, sql: str) -> tuple[int, str]:
    argv = ["mariadb", "--no-defaults", f"--socket={lay.mysql_socket}", "-u", "root", "-e", sql]
    return procs.probe(argv, _env())


def _node_ready(lay: Layout, node: str | None = None) -> bool:
    state = _node_state(lay, node)
    if "drain" in state or state.startswith("down"):
        # A node left down or drained by an earlier run (ReturnToService covers the usual case).
        procs.probe(["scontrol", "update", f"nodename={node or lay.hostname}", "state=resume"], _env())
    return state in NODE_OK


_DAEMONS = (
    _Daemon(
        "munged",
        lambda lay: ["munged", "--foreground", "--force", f"--socket={lay.munge_socket}",
                     f"--key-file={lay.munge_key}", f"--pid-file={lay.pid_file('munged')}",
                     f"--log-file={lay.log_file('munged')}",
                     f"--seed-file={lay.munge_key.parent / 'munged.seed'}"],
        lambda lay: procs.probe(["munge", "-n", f"--socket={lay.munge_socket}"], _env())[0] == 0,
    ),
    _Daemon(
        "mariadbd",
        # As root, like the slurm daemons: the state dir may sit where user mysql cannot reach.
        lambda lay: ["mariadbd", "--no-defaults", "--user=root", f"--datadir={lay.mysql_datadir}",
                     f"--socket={lay.mysql_socket}", f"--pid-file={lay.pid_file('mariadbd')}",
                     f"--log-error={lay.log_file('mariadbd')}", "--skip-networking",
                     "--innodb-buffer-pool-size=128M", "--innodb-log-file-size=16M"],
        lambda lay: _mysql(lay, "SELECT 1")[0] == 0,
    ),
    _Daemon(
        "slurmdbd",
        lambda lay: ["slurmdbd", "-D"],
        lambda lay: _clusters() is not None,
        # MariaDB has no TCP listener; libmariadb takes the socket path from MYSQL_UNIX_PORT.
        lambda lay: _env(MYSQL_UNIX_PORT=str(lay.mysql_socket)),
    ),
    _Daemon(
        "slurmctld",
        lambda lay: ["slurmctld", "-D"],
        # slurmctld registers the cluster in slurmdbd by itself; sacct filters on it.
        lambda lay: _ctld_up() and lay.cluster_name in (_clusters() or []),
    ),
    _Daemon("slurmd", lambda lay: ["slurmd", "-D", "-N", lay.hostname], _node_ready),
)


def start(state: Path | None = None, cpus: int | None = None, n_nodes: int | None = None,
          timeout: float = 60.0) -> Layout:
    """Start the cluster, or return at once if it is already up, healthy and configured alike.

    `cpus` is what each node advertises; None keeps the current slurm.conf's value (else 8), so a
    plain start() never reconfigures a cluster someone started with --cpus. `n_nodes`: namespaced
    nodes besides this machine's (nodes.py); None keeps the current value (else 0). A changed config
    restarts every daemon. Creates the munge key, MariaDB data dir and accounting user if
    missing, and starts only daemons that are not running. Raises ClusterError with a log tail.
    """
    t0 = time.monotonic()
    lay = layout(state, cpus or _configured_cpus() or DEFAULT_CPUS, n_nodes)
    password = _db_password(lay, create=False)
    wanted = {"slurm.conf": render_slurm_conf(lay)}
    if password is not None:
        wanted["slurmdbd.conf"] = render_slurmdbd_conf(lay, password)
    if _configs_current(wanted) and healthy(lay.state_dir):
        log.info("cluster already up (checked in %.2f s)", time.monotonic() - t0)
        return lay
    if os.geteuid() != 0:
        raise ClusterError("the local SLURM cluster is not running (or its config changed) and "
                           "starting it needs root: sudo python3 tests/local_slurm start")
    if missing := missing_binaries():
        raise ClusterError(f"missing {missing}: run python3 tests/local_slurm install")
    for name in wanted:
        _refuse_foreign(CONF_DIR / name)
    with _locked(lay):  # pytest-xdist workers may all call start() at once
        if not _configs_current(wanted) and any(status(lay.state_dir).values()):
            log.info("configuration changed: restarting")
            _stop(lay, timeout=20.0)
        _prepare(lay)
        if lay.nodes:  # before slurmctld: its address is the bridge's
            nodes.ensure(lay.nodes, lay.hostname)
        for daemon in _DAEMONS:
            _start_one(daemon, lay, timeout)
        for node in nodes.names(lay.nodes):
            _start_node(lay, node, timeout)
    log.info("cluster up in %.1f s (state dir %s)", time.monotonic() - t0, lay.state_dir)
    return lay


@contextlib.contextmanager
def _locked(lay: Layout) -> Iterator[None]:
    try:
        lay.state_dir.mkdir(parents=True, exist_ok=True)
        fh = open(lay.state_dir / ".lock", "a")
    except OSError as exc:
        raise ClusterError(f"cannot lock {lay.state_dir} (run as root?): {exc}") from exc
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when fh closes
        yield


def _configured_cpus() -> int | None:
    try:
        text = (CONF_DIR / "slurm.conf").read_text()
    except OSError:
        return None
    match = re.search(r"^NodeName=\S+ .*\bCPUs=(\d+)", text, re.MULTILINE)
    return int(match.group(1)) if text.startswith(MANAGED) and match else None


def _configured_nodes() -> int:
    try:
        text = (CONF_DIR / "slurm.conf").read_text()
    except OSError:
        return 0
    return len(re.findall(r"^NodeName=rl-node\d+ ", text, re.MULTILINE)) if text.startswith(MANAGED) else 0


def _configs_current(wanted: dict[str, str]) -> bool:
    try:
        return all((CONF_DIR / name).read_text() == text for name, text in wanted.items())
    except PermissionError:  # slurmdbd.conf is 0600: a non-root caller can only check health
        return True
    except OSError:
        return False


def _db_password(lay: Layout, create: bool) -> str | None:
    path = lay.state_dir / "db.password"
    try:
        text = path.read_text().strip()
        if text:
            return text
    except OSError:
        pass
    if not create:
        return None
    path.unlink(missing_ok=True)  # an empty file left by a crash between its creation and its write
    _write_private(path, secrets.token_urlsafe(18).encode())
    return path.read_text().strip()


def _write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` with ``mode`` from its first byte: a secret is never world-readable, not even
    between a write and a chmod (the state directory is world-readable, so users reach the munge socket)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _prepare(lay: Layout) -> None:
    """Directories, munge key, MariaDB data dir, and both config files (slurmdbd.conf 0600)."""
    spools = [lay.state_dir / "spool" / n for n in [lay.hostname, *nodes.names(lay.nodes)]]
    for d in (lay.run_dir, lay.log_dir, lay.state_dir / "ctld", *spools, lay.munge_key.parent):
        d.mkdir(parents=True, exist_ok=True)
    # Non-root users must reach the munge socket in run/ to submit; the secrets stay private.
    lay.state_dir.chmod(0o755)
    lay.munge_key.parent.chmod(0o700)
    if not lay.munge_key.exists():
        _write_private(lay.munge_key, secrets.token_bytes(1024))
    if not (lay.mysql_datadir / "mysql").is_dir():
        _run_or_raise(["mariadb-install-db", "--no-defaults", "--user=root",
                       f"--datadir={lay.mysql_datadir}", "--auth-root-authentication-method=socket",
                       "--skip-test-db", "--innodb-log-file-size=16M"], "mariadb-install-db")
    password = _db_password(lay, create=True)
    CONF_DIR.mkdir(parents=True, exist_ok=True)
    _write_conf("slurm.conf", render_slurm_conf(lay), 0o644)
    _write_conf("slurmdbd.conf", render_slurmdbd_conf(lay, password), 0o600)


def _refuse_foreign(path: Path) -> None:
    if path.exists() and not path.read_text().startswith(MANAGED):
        raise ClusterError(f"{path} was not written by tests/local_slurm; move it away to use the "
                           "local cluster (it would be overwritten)")


def _write_conf(name: str, text: str, mode: int) -> None:
    path = CONF_DIR / name
    _refuse_foreign(path)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    _write_private(tmp, text.encode(), mode)  # slurmdbd.conf holds the database password
    tmp.replace(path)


def _run_or_raise(argv: Sequence[str], what: str) -> None:
    rc, out = procs.probe(argv, _env(), timeout=60)
    if rc != 0:
        raise ClusterError(f"{what} failed with code {rc}:\n" + "\n".join(out.splitlines()[-25:]))


def _start_one(daemon: _Daemon, lay: Layout, timeout: float) -> None:
    logs = [lay.log_file(daemon.name), lay.log_dir / f"{daemon.name}.out"]
    proc = None
    t0 = time.monotonic()
    if procs.live_pid(lay.pid_file(daemon.name), daemon.name) is None:
        lay.pid_file(daemon.name).unlink(missing_ok=True)
        proc = procs.spawn(daemon.argv(lay), lay.log_dir / f"{daemon.name}.out", daemon.env(lay))
    procs.wait_until(lambda: daemon.ready(lay), what=f"{daemon.name} did not come up",
                     timeout=timeout, logs=logs, proc=proc)
    if proc is not None and procs.read_pid(lay.pid_file(daemon.name)) is None:
        lay.pid_file(daemon.name).write_text(f"{proc.pid}\n")  # in case -D mode skips it
    if daemon.name == "mariadbd":
        _create_accounting_db(lay)
    log.info("%-9s %s in %.2f s", daemon.name, "started" if proc else "already up",
             time.monotonic() - t0)


def _start_node(lay: Layout, node: str, timeout: float) -> None:
    """A namespaced node's slurmd (nodes.py), unless it runs; waits until the controller has it."""
    pid_file = lay.pid_file("slurmd", node)
    logs = [lay.log_file("slurmd", node), lay.log_dir / f"slurmd-{node}.out"]
    proc = None
    if procs.live_pid(pid_file, "slurmd") is None:
        pid_file.unlink(missing_ok=True)
        proc = procs.spawn(nodes.slurmd_argv(node), logs[1], _env())
    procs.wait_until(lambda: _node_ready(lay, node), what=f"slurmd of {node} did not come up",
                     timeout=timeout, logs=logs, proc=proc)
    if proc is not None and procs.read_pid(pid_file) is None:
        pid_file.write_text(f"{proc.pid}\n")


def _create_accounting_db(lay: Layout) -> None:
    pw = _db_password(lay, create=True)
    sql = ("CREATE DATABASE IF NOT EXISTS slurm_acct_db; "
           f"CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '{pw}'; "
           f"ALTER USER 'slurm'@'localhost' IDENTIFIED BY '{pw}'; "
           "GRANT ALL PRIVILEGES ON slurm_acct_db.* TO 'slurm'@'localhost';")
    rc, out = _mysql(lay, sql)
    if rc != 0:
        raise ClusterError(f"creating the accounting database failed:\n{out}\n"
                           + procs.logs_tail([lay.log_file("mariadbd")]))


# ---------------------------------------------------------------- stop


def stop(state: Path | None = None, timeout: float = 20.0) -> dict[str, bool]:
    """Stop every daemon by the PID in its pid file, in reverse start order; never by name.

    Returns which daemons were running. Stale pid files (dead, zombie or reused PID) are removed.
    """
    t0 = time.monotonic()
    lay = layout(state)
    with _locked(lay):
        was_up = _stop(lay, timeout)
    log.info("stopped %s in %.1f s", [n for n, up in was_up.items() if up] or "nothing",
             time.monotonic() - t0)
    return was_up


def _stop(lay: Layout, timeout: float) -> dict[str, bool]:
    # Every namespaced node's slurmd that has a pid file (also of a layout since changed), then
    # the machine's own daemons, then the nodes' network.
    node_pids = sorted(lay.run_dir.glob("slurmd-rl-node*.pid"))
    was_up = {f"slurmd@{p.stem.removeprefix('slurmd-')}": procs.terminate(p, "slurmd", timeout) for p in node_pids}
    procs.terminate(lay.run_dir / "slurmd.pid", "slurmd", timeout)  # the single-node layout's name before nodes.py
    was_up |= {name: procs.terminate(lay.pid_file(name), name, timeout) for name in reversed(DAEMONS)}
    nodes.remove(max(lay.nodes, len(node_pids)))
    return was_up
