"""SLURM node roles (launch/roles.py, train/distributed.py): which task of an arm's job trains,
which generates, and the trainer-only rank layout, as functions of the SLURM environment. The real
jobs on a 3-node cluster are in tests/slurm/test_node_roles_slurm.py."""
import json

import pytest

from scalerl.config import ConfigError
from scalerl.generation.transfer.trust import job_rendezvous
from scalerl.launch.roles import Role, run_generator_node, slurm_role
from scalerl.train.distributed import trainer_tasks


def job(nodes: int, per_node: int, procid: int) -> dict:
    """The variables srun sets for task ``procid`` of a block-distributed job."""
    return {"SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NTASKS": str(nodes * per_node), "SLURM_PROCID": str(procid),
            "SLURM_NODEID": str(procid // per_node), "SLURM_LOCALID": str(procid % per_node), "SLURM_JOB_ID": "77"}


def test_one_trainer_node_of_two_ranks_and_two_generator_nodes():
    roles = [slurm_role(2, 3, job(3, 2, p)) for p in range(6)]
    assert roles == [Role("trainer"), Role("trainer"), Role("generator", 1), Role("idle"),
                     Role("generator", 2), Role("idle")]
    # the trainer ranks are the tasks of the first node only: world 2, not the job's 6 tasks
    assert trainer_tasks(2, job(3, 2, 0)) == 2
    assert trainer_tasks(0, job(3, 2, 0)) == 6


def test_two_trainer_nodes_and_one_generator_node():
    roles = [slurm_role(1, 1, job(3, 2, p)) for p in range(6)]
    assert [r.kind for r in roles] == ["trainer"] * 4 + ["generator", "idle"]
    assert roles[4].generator == 0
    assert trainer_tasks(1, job(3, 2, 0)) == 4


def test_without_generator_nodes_every_task_trains():
    assert {slurm_role(0, 2, job(3, 2, p)) for p in range(6)} == {Role("trainer")}


@pytest.mark.parametrize("env", [{}, job(2, 1, 0)], ids=["no SLURM job", "too few nodes"])
def test_generator_nodes_outside_a_job_with_enough_nodes_name_the_key(env):
    with pytest.raises(ConfigError, match=r"async\.generator_nodes.*hydra\.launcher\.nodes"):
        slurm_role(2, 2, env)


def test_the_rendezvous_is_per_job_attempt(tmp_path):
    first = job_rendezvous(tmp_path, {"SLURM_JOB_ID": "77"})
    again = job_rendezvous(tmp_path, {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"})
    assert first != again and first.parent == again.parent == tmp_path
    assert job_rendezvous(tmp_path, {}) is None


def test_a_generator_node_whose_trainer_ended_before_its_rendezvous_returns(tmp_path, monkeypatch):
    """A trainer that failed in its start-up writes its summary and never a rendezvous: the
    generator task leaves at once instead of waiting out its start-up allowance."""
    monkeypatch.setenv("HOME", str(tmp_path))
    summary = tmp_path / "summary.json"

    import threading
    import time
    threading.Timer(0.5, lambda: summary.write_text(json.dumps({"status": "failed"}))).start()
    t0 = time.monotonic()
    out = run_generator_node(Role("generator", 1), wait_s=60, summary=summary, env=job(3, 2, 2))
    assert out["exit_code"] is None and time.monotonic() - t0 < 10


def test_a_trainer_that_failed_while_its_generator_task_imported_is_not_waited_for(tmp_path, monkeypatch):
    """The trainer failed its start-up (summary written, rendezvous removed) before this task got past
    its imports: the task's start, not the end of its imports, tells this attempt's summary from an
    older one. Seen on a loaded machine: the generator task waited out its 30 minutes."""
    import time

    monkeypatch.setenv("HOME", str(tmp_path))
    summary = tmp_path / "summary.json"
    started = time.time()
    summary.write_text(json.dumps({"status": "failed"}))  # while the task was importing torch
    t0 = time.monotonic()
    out = run_generator_node(Role("generator", 1), wait_s=60, summary=summary, env=job(3, 2, 2), started=started)
    assert out["exit_code"] is None and time.monotonic() - t0 < 10
    # an older attempt's summary is not this one's: without a trainer the task waits, then names the file
    with pytest.raises(TimeoutError, match=r"job-77\.0\.json"):
        run_generator_node(Role("generator", 1), wait_s=1, summary=summary, env=job(3, 2, 2), started=time.time() + 1)


@pytest.mark.slow
def test_a_generator_that_reads_the_rendezvous_of_a_trainer_gone_since_gives_up_within_join_s(tmp_path, monkeypatch):
    """The trainer wrote its rendezvous, then gave up on its generators (``async.timeout_s``) before this
    one joined: the generator tries to reach it for ``join_s``, not for the task's 30-minute allowance
    for the trainer's start-up, so the job ends instead of holding its nodes until the time limit."""
    import socket
    import time

    monkeypatch.setenv("HOME", str(tmp_path))
    with socket.socket() as sock:  # a port nothing listens on: the trainer's store, gone
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    secret = tmp_path / "secret.hex"
    secret.write_text("00" * 32)
    rendezvous = job_rendezvous(env=job(3, 2, 2))
    rendezvous.parent.mkdir(parents=True)
    rendezvous.write_text(json.dumps({"address": f"127.0.0.1:{port}", "secret_file": str(secret)}))
    t0 = time.monotonic()
    # wait_s stands for the 30-minute allowance: a generator that tried for it would fail here after 300 s
    out = run_generator_node(Role("generator", 1), wait_s=300, summary=tmp_path / "summary.json", env=job(3, 2, 2),
                             join_s=5)
    assert out["exit_code"] == 1 and time.monotonic() - t0 < 120, out  # an interpreter start under load, then 5 s


def test_a_generator_node_without_a_trainer_gives_up_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(TimeoutError, match=r"job-77\.0\.json"):
        run_generator_node(Role("generator", 1), wait_s=1, summary=tmp_path / "summary.json", env=job(3, 2, 2))


def test_the_sweeps_parent_process_imports_neither_torch_nor_transformers():
    """Every ``python -m scalerl.sweep`` starts in a process that launches, reports and analyses, and
    never trains: importing torch and transformers there cost about 3 s per start (``--status``
    of a two-arm sweep took 6.1 s, now 0.9 s). A task imports the trainer's modules when it runs."""
    import subprocess
    import sys

    code = ("import sys, scalerl.launch.app, scalerl.launch.roles; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
