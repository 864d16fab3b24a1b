"""SLURM node roles on the local cluster's three namespaced nodes (issue 25): one arm, one job,
a trainer node with 2 ranks and two generator nodes with one generator each, under the default
``pipeline_rl``. Each node is its own network and UTS namespace (own address, own hostname), so
the trainer's store, the gloo group and the generators' connections all cross real links.

Then the failures that matter across nodes: a generator node's link taken down fails the run
within ``async.timeout_s``, naming that generator and its node; relaunching the same command
resumes with no eval row lost or duplicated; and a preemption of the multi-node job requeues it."""
from __future__ import annotations

import json
import subprocess
import time

from helpers import ANSWERS_ONLY, arms, popen_cli, read_rows, wait_for

from local_slurm import cluster, nodes

# async.timeout_s: the cut is found within it, and the generators' start-up must fit in it (at 20 s
# a resumed run failed its start-up beside a study, load 4-6: a generator task imports torch first)
TIMEOUT_S = 60
ARM = ["-m", "loss=cispo", "hydra/launcher=slurm", "hydra.launcher.timeout_min=20", "hydra.launcher.partition=nodes",
       "hydra.launcher.nodes=3", "hydra.launcher.tasks_per_node=2", "async.generators=2", "async.generator_nodes=2",
       f"async.timeout_s={TIMEOUT_S}", "logger=none", "train.threads=1", "study=default", *ANSWERS_ONLY,
       "batch.prompts=8", "batch.generations=8"]


def task_logs(sweep) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((sweep / ".submitit").rglob("*_log.out")))


def cluster_state() -> str:
    """The queue and the nodes' states: a job pending on a node that stopped responding says so here."""
    out = [subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout for cmd in
           (["squeue", "-h", "-o", "%i %j %T %R %M"], ["sinfo", "-N", "-h", "-o", "%N %P %T %E"])]
    return "squeue:\n" + out[0] + "sinfo:\n" + out[1]


def what_ran(sweep, log) -> str:
    """A timed-out wait's detail: the cluster's state, the sweep's log and its job's task logs."""
    return cluster_state() + log.read_text(errors="replace")[-1500:] + task_logs(sweep)[-2000:]


def sacct_history(job: str) -> list[str]:
    return subprocess.run(["sacct", "-D", "-X", "-n", "-P", "-j", job, "-o", "State"], capture_output=True,
                          text=True, timeout=20).stdout.split()


def test_a_trainer_node_and_two_generator_nodes_train_and_survive_a_lost_node_and_a_preemption(slurm_cluster, tmp_path):
    assert slurm_cluster.nodes >= 3, "the SLURM tests' cluster has three namespaced nodes (tests/slurm/conftest.py)"
    sweep = tmp_path / "sweeps" / "default"
    args = [*ARM, "train.steps=60", "train.eval_every=10"]
    # the three nodes up before the job asks for all of them (an earlier test may have restarted them)
    wait_for(cluster.healthy, timeout=120, what="the cluster and its nodes to be usable", detail=cluster_state)
    # ---- 1. the arm runs across the three nodes; then a generator node drops off the network
    proc = popen_cli(args, tmp_path, tmp_path / "cut.log")
    wait_for(lambda: sweep.exists() and arms(sweep) and len(read_rows(arms(sweep)[0] / "metrics.jsonl")) >= 2,
             timeout=1200, what="two eval rows", proc=proc,  # a warm start first; slow under load
             detail=lambda: what_ran(sweep, tmp_path / "cut.log"))
    (run_dir,) = arms(sweep)
    nodes.cut("rl-node3")
    t_cut = time.monotonic()
    try:
        assert proc.wait(timeout=TIMEOUT_S * 6 + 120) == 1, (tmp_path / "cut.log").read_text()[-3000:]
    finally:
        nodes.restore("rl-node3")
    failed_after = time.monotonic() - t_cut
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    # named: the cut-off node's generator, not the live one its silence starved
    assert f"generator 1 on {nodes.address('rl-node3')}" in summary["error"], summary["error"]
    # the heartbeat bound, plus the sweep's own wait for the job's end (the job's tasks must all exit)
    assert failed_after < TIMEOUT_S * 6 + 60, failed_after
    rows_before = read_rows(run_dir / "metrics.jsonl")

    # ---- 2. relaunch: it resumes; a preemption of the multi-node job on the way requeues it
    # The cut node loses its not-responding mark when it answers the controller's next ping (a
    # fraction of SlurmdTimeout): a cut of over a minute (async.timeout_s 60) can outlast a ping, and
    # 120 s were too few for the mark to clear after one.
    wait_for(lambda: set(subprocess.run(["sinfo", "-h", "-p", "nodes", "-o", "%T"], capture_output=True, text=True,
                                        timeout=20).stdout.split()) == {"idle"}, timeout=360, what="the nodes idle again",
             detail=cluster_state)
    proc = popen_cli(args, tmp_path, tmp_path / "resume.log")
    first_resumed_eval = rows_before[-1]["step"] + 10
    wait_for(lambda: any(r["step"] >= first_resumed_eval for r in read_rows(run_dir / "metrics.jsonl")),
             timeout=600, what="an eval row after the resume", proc=proc,
             detail=lambda: what_ran(sweep, tmp_path / "resume.log"))
    job = json.loads((run_dir / "launch.json").read_text())["slurm_job_id"]
    subprocess.run(["scancel", job, "--signal", "SIGTERM"], check=True)  # what preemption looks like (submitit)
    subprocess.run(["scancel", job, "--signal", "USR2"], check=True)
    assert proc.wait(timeout=900) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    rows = read_rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(0, 61, 10))  # no eval row lost or duplicated
    assert [r["pass_rate"] for r in rows[: len(rows_before)]] == [r["pass_rate"] for r in rows_before]
    history = sacct_history(job)
    assert "REQUEUED" in history and history[-1] == "COMPLETED", history
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "done"

    # ---- where it all ran: two trainer ranks on rl-node1, one generator on each other node
    assert json.loads((run_dir / "derived.json").read_text())["world_size"] == 2  # not the job's six tasks
    logs = task_logs(sweep)
    for node, j in (("rl-node2", 0), ("rl-node3", 1)):
        assert f"{node}: generator node for generator {j}" in logs and f"{node}: generator {j} exited with code 0" in logs
    # the generators joined the trainer's store at the trainer node's address, not loopback
    assert f"scalerl.generation.worker {nodes.address('rl-node1')}:" in logs
    steps = read_rows(run_dir / "steps.jsonl")
    assert {r["step"] for r in steps} == set(range(1, 61))
    assert sum(r["multi_version_frac"] for r in steps) > 0  # pushes landed mid-batch on the remote generators
