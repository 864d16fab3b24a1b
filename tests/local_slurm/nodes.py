"""Several SLURM nodes on one machine: each extra ``slurmd`` in its own network and UTS namespace.

    python3 tests/local_slurm start --nodes 3   # rl-node1..3 in partition `nodes`

Each node ``rl-nodeI`` is a named network namespace (``scalerl-rl-nodeI``) with one veth link to a
bridge in the root namespace (``rlslurm0``, 10.233.0.1/24) at 10.233.0.(10+I), and its own
hostname (``unshare --uts``). Its slurmd, and so every job step it runs, sees only that link and
its own loopback, so a job whose tasks span nodes has tasks at different addresses and a loopback
shortcut between them fails as it would between machines. slurmctld stays in the root namespace
and is reached at the bridge's address. The file system and the munge socket are shared, as a
cluster's shared file system and munge key would be.

Names resolve per node: its slurmd, and so every job step, sees ``/etc/netns/<ns>/hosts`` bound over
``/etc/hosts`` in a mount namespace of its own, so inside a node every node's name (and the
controller's) maps to its bridge address; the machine's own ``/etc/hosts`` is never touched.

``cut(node)`` / ``restore(node)`` take a node's link down and up (``ip link set ... down``): a node
that vanished from the network without a word. Linux only, as root, with iproute2.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .procs import ClusterError

BRIDGE = "rlslurm0"
SUBNET = "10.233.0"
CONTROLLER_IP = f"{SUBNET}.1"
PARTITION = "nodes"
NETNS_ETC = Path("/etc/netns")


def names(n: int) -> list[str]:
    return [f"rl-node{i}" for i in range(1, n + 1)]


def address(node: str) -> str:
    return f"{SUBNET}.{10 + int(node.removeprefix('rl-node'))}"


def netns(node: str) -> str:
    return f"scalerl-{node}"


def link(node: str) -> str:
    """The node's veth end in the root namespace (the one ``cut`` takes down)."""
    return f"rlslv{node.removeprefix('rl-node')}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)} failed: {res.stderr.strip()}")
    return res


def _exists(kind: str, name: str) -> bool:
    if kind == "netns":
        return name in _ip("netns", "list").stdout.split()
    return _ip("link", "show", name, check=False).returncode == 0


def hosts_text(n: int, controller: str) -> str:
    lines = ["127.0.0.1 localhost", f"{CONTROLLER_IP} {controller}"]
    lines += [f"{address(node)} {node}" for node in names(n)]
    return "\n".join(lines) + "\n"


def ensure(n: int, controller: str) -> None:
    """The bridge and ``n`` namespaced nodes with their links up; idempotent."""
    if not _exists("link", BRIDGE):
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{CONTROLLER_IP}/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    for node in names(n):
        ns = netns(node)
        if not _exists("netns", ns):
            _ip("netns", "add", ns)
        if not _exists("link", link(node)):
            _ip("link", "add", link(node), "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", link(node), "master", BRIDGE)
            _ip("-n", ns, "addr", "add", f"{address(node)}/24", "dev", "eth0")
        for args in (("link", "set", link(node), "up"), ("-n", ns, "link", "set", "eth0", "up"),
                     ("-n", ns, "link", "set", "lo", "up")):
            _ip(*args)
        etc = NETNS_ETC / ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(hosts_text(n, controller))


def slurmd_argv(node: str) -> list[str]:
    """slurmd in the node's network namespace, with its own hostname and its own ``/etc/hosts``
    (a private mount namespace binds the node's file over it; mounts made here do not leak out).
    Not ``ip netns exec``: it also remounts /sys, which hides the cgroup mounts slurmd reads.
    Each step replaces the process, so its pid is slurmd's."""
    hosts = NETNS_ETC / netns(node) / "hosts"
    return ["nsenter", f"--net=/run/netns/{netns(node)}", "unshare", "--uts", "--mount", "--propagation", "slave",
            "sh", "-c", f"mount --bind {hosts} /etc/hosts && hostname {node} && exec slurmd -D -N {node}"]


def remove(n: int) -> None:
    """Delete the nodes' namespaces and links, and the bridge once no node is left."""
    for node in names(n):
        _ip("link", "del", link(node), check=False)  # takes its peer in the namespace with it
        _ip("netns", "del", netns(node), check=False)
        hosts = NETNS_ETC / netns(node) / "hosts"
        hosts.unlink(missing_ok=True)
        if hosts.parent.exists():
            hosts.parent.rmdir()
    if _exists("link", BRIDGE):
        _ip("link", "del", BRIDGE, check=False)


def cut(node: str) -> None:
    _ip("link", "set", link(node), "down")


def restore(node: str) -> None:
    _ip("link", "set", link(node), "up")
