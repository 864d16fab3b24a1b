"""slurm.conf and slurmdbd.conf for the local cluster (this machine, plus namespaced nodes), as pure string templates.

Every key here is one that mattered on a real SLURM 22.05 run (see the project's SLURM notes);
the comment above each group says why it is set. `render_*` are pure functions of a `Layout`,
so a test can compare the text without starting anything.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from . import nodes

HEADER = "# Managed by tests/local_slurm (python3 tests/local_slurm start); rewritten on every start.\n"
# What a config written before the cluster moved out of the scalerl package begins with: still ours.
MANAGED = (HEADER, "# Managed by scalerl.devtools.local_slurm ")


@dataclass(frozen=True)
class Layout:
    """Every path and knob the config files mention; one state dir holds all that is written."""

    state_dir: Path
    # root of pid files, logs, spool, controller state, MariaDB data and the munge key
    hostname: str
    # `hostname -s`: slurmd derives its node name from it, so NodeName must match
    cpus: int
    # CPUs the node advertises; more than the machine has, so array tasks run side by side
    real_memory_mb: int
    # MemTotal of the machine, in MB
    cluster_name: str = "scalerl"
    # the name slurmctld registers in slurmdbd and `sacct` filters on
    partition: str = "debug"
    # the default partition: this machine's own node
    nodes: int = 0
    # namespaced nodes rl-node1..N in partition `nodes` (nodes.py); 0: none

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def munge_socket(self) -> Path:
        return self.run_dir / "munge.socket"

    @property
    def munge_key(self) -> Path:
        return self.state_dir / "munge" / "munge.key"

    @property
    def mysql_socket(self) -> Path:
        return self.run_dir / "mysqld.sock"

    @property
    def mysql_datadir(self) -> Path:
        return self.state_dir / "mysql"

    @property
    def jobcomp_log(self) -> Path:
        return self.log_dir / "jobcomp.log"

    def pid_file(self, daemon: str, node: str | None = None) -> Path:
        """A daemon's pid file; a slurmd's names its node (``node``, default this machine's)."""
        return self.run_dir / (f"slurmd-{node or self.hostname}.pid" if daemon == "slurmd" else f"{daemon}.pid")

    def log_file(self, daemon: str, node: str | None = None) -> Path:
        return self.log_dir / (f"slurmd-{node or self.hostname}.log" if daemon == "slurmd" else f"{daemon}.log")


SLURM_CONF = string.Template(
    HEADER
    + """\
ClusterName=$cluster_name
SlurmctldHost=$hostname($controller_ip)
SlurmUser=root
SlurmdUser=root

# A private munged (own key and socket under the state dir), so a system munge is never touched.
# cred_expire=10: a requeued job may restart after 10 s instead of the default 120 s.
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket,cred_expire=10

StateSaveLocation=$state_dir/ctld
# %n: the node's name, so every slurmd on this machine has its own (nodes.py).
SlurmdSpoolDir=$state_dir/spool/%n
SlurmctldPidFile=$run_dir/slurmctld.pid
SlurmdPidFile=$run_dir/slurmd-%n.pid
SlurmctldLogFile=$log_dir/slurmctld.log
SlurmdLogFile=$log_dir/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true

# No cgroups in containers and CI machines.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none

# CPUs are the only consumable; config_overrides lets the node advertise more CPUs than it has.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides

# The defaults add 3-60 s of scheduling delay to every submission.
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1
KillWait=5
ReturnToService=2
JobRequeue=1

# submitit polls sacct; without accounting a cancelled job's result() waits forever.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
# With slurmdbd this key names the munge socket for talking to it (AuthInfo covers the rest).
AccountingStoragePass=$munge_socket
JobCompType=jobcomp/filetxt
JobCompLoc=$jobcomp_log

NodeName=$hostname NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$real_memory_mb State=UNKNOWN
PartitionName=$partition Nodes=$hostname Default=YES MaxTime=INFINITE State=UP
$namespaced_nodes"""
)

SLURMDBD_CONF = string.Template(
    HEADER
    + """\
AuthType=auth/munge
AuthInfo=socket=$munge_socket
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$log_dir/slurmdbd.log
PidFile=$run_dir/slurmdbd.pid
DebugLevel=info

# MariaDB listens only on its unix socket (skip-networking); slurmdbd finds it through
# MYSQL_UNIX_PORT, which start() sets in slurmdbd's environment.
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$db_password
StorageLoc=slurm_acct_db
"""
)


def _namespaced_nodes(layout: Layout) -> str:
    """One line per namespaced node (its own address) and their partition; empty without them."""
    if not layout.nodes:
        return ""
    lines = ["# Namespaced nodes (nodes.py): own network, address and hostname each; reached over a bridge."]
    lines += [f"NodeName={n} NodeAddr={nodes.address(n)} CPUs={layout.cpus} RealMemory={layout.real_memory_mb} "
              "State=UNKNOWN" for n in nodes.names(layout.nodes)]
    lines.append(f"PartitionName={nodes.PARTITION} Nodes={','.join(nodes.names(layout.nodes))} MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _fields(layout: Layout) -> dict[str, object]:
    return {
        # with namespaced nodes, the controller is reached at the bridge: loopback is each node's own
        "controller_ip": nodes.CONTROLLER_IP if layout.nodes else "127.0.0.1",
        "namespaced_nodes": _namespaced_nodes(layout),
        "cluster_name": layout.cluster_name,
        "hostname": layout.hostname,
        "cpus": layout.cpus,
        "real_memory_mb": layout.real_memory_mb,
        "partition": layout.partition,
        "state_dir": layout.state_dir,
        "run_dir": layout.run_dir,
        "log_dir": layout.log_dir,
        "munge_socket": layout.munge_socket,
        "jobcomp_log": layout.jobcomp_log,
    }


def render_slurm_conf(layout: Layout) -> str:
    return SLURM_CONF.substitute(_fields(layout))


def render_slurmdbd_conf(layout: Layout, db_password: str) -> str:
    return SLURMDBD_CONF.substitute(_fields(layout), db_password=db_password)
