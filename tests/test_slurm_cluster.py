"""The Slurm test cluster itself (tests/slurm_cluster.py): two slurmd nodes in network
namespaces, run the way Trainyard's Slurm executor will use them — gang jobs whose ranks
talk over TCP, cancellation, pending reasons, and a node taken down under a running job.

These tests need root and Debian's slurm-wlm and munge (scripts/install-deps); they fail,
not skip, when the cluster cannot be built, with the reason.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from slurm_cluster import SlurmCluster, parse_scontrol_record

PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives here, not in the tests' venv

# Every rank reports what it saw and all-reduces (rank + 1) through Gloo.
GLOO_RANK = r"""
import os, socket, sys
import torch, torch.distributed as dist
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
print("host", socket.gethostname(), "procid", rank, "nodeid", os.environ["SLURM_NODEID"],
      "master", os.environ["MASTER_ADDR"], flush=True)
dist.init_process_group("gloo", init_method="tcp://%s:%s" % (os.environ["MASTER_ADDR"],
                        os.environ["MASTER_PORT"]), rank=rank, world_size=world)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print("allreduce", int(t.item()), flush=True)
dist.destroy_process_group()
"""


@pytest.fixture
def workdir(cluster) -> Path:
    d = cluster.shared_dir / uuid.uuid4().hex[:8]
    d.mkdir()
    return d


def sbatch(cluster: SlurmCluster, workdir: Path, script: str, *args: str) -> str:
    path = workdir / "job.sh"
    path.write_text("#!/bin/sh\n" + script)
    r = cluster.run("sbatch", "--parsable", f"--chdir={workdir}",
                    f"--output={workdir}/batch-%j.log", *args, str(path))
    return r.stdout.strip().split(";")[0]


def test_srun_runs_on_two_distinct_nodes(cluster):
    out = cluster.run("srun", "-N2", "--ntasks-per-node=1", "hostname").stdout.split()
    assert sorted(out) == cluster.node_names


def test_two_node_batch_job_ranks_see_each_other_through_gloo(cluster, workdir):
    (workdir / "rank.py").write_text(GLOO_RANK)
    job = sbatch(cluster, workdir, f"""
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
# Node network namespaces hold only this cluster's processes, so a fixed port is free there.
export MASTER_PORT=29511
srun --output={workdir}/rank-%t.log {PYTHON} {workdir}/rank.py
""", "-N2", "--ntasks-per-node=1", "--time=5")
    rec = cluster.wait_job_state(job, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL",
                                       "TIMEOUT"}, timeout=120)
    logs = [(workdir / f"rank-{r}.log").read_text() for r in range(2)]
    assert rec["JobState"] == "COMPLETED", f"{rec}\n{logs}"
    assert rec["ExitCode"] == "0:0"
    seen = []
    for r, log in enumerate(logs):
        m = re.search(r"host (\S+) procid (\d) nodeid (\d) master (\S+)", log)
        assert m, log
        seen.append(m.groups())
        assert "allreduce 3" in log, log  # (0+1) + (1+1)
    assert {s[0] for s in seen} == set(cluster.node_names)
    assert [s[1] for s in seen] == ["0", "1"]
    assert {s[2] for s in seen} == {"0", "1"}
    assert {s[3] for s in seen} == {"node1"}


def test_scancel_signals_the_steps_then_cancels_the_job(cluster, workdir):
    job = sbatch(cluster, workdir, f"""
srun sh -c 'trap "echo term > {workdir}/term-$SLURM_PROCID; exit 143" TERM;
            echo started > {workdir}/started-$SLURM_PROCID; while :; do sleep 0.1; done'
""", "-N2", "--ntasks-per-node=1")
    cluster.wait_for(lambda: all((workdir / f"started-{r}").exists() for r in range(2)),
                     60, "both ranks to start")
    cluster.run("scancel", "--signal=TERM", job)
    cluster.wait_for(lambda: all((workdir / f"term-{r}").exists() for r in range(2)),
                     30, "both ranks to see SIGTERM")
    cluster.run("scancel", job)
    rec = cluster.wait_job_state(job, {"CANCELLED", "COMPLETED", "FAILED"}, timeout=30)
    # The steps exited on TERM, so the batch script may end on its own before the final
    # scancel arrives; either way the job is over and no rank is left running.
    assert rec["JobState"] in ("CANCELLED", "FAILED", "COMPLETED"), rec
    assert cluster.run("squeue", "-h", "-j", job, check=False).stdout.strip() == ""


def test_a_job_that_does_not_fit_shows_its_pending_reason(cluster, workdir):
    too_big = sbatch(cluster, workdir, "srun true\n", "-N3")
    cluster.wait_for(lambda: cluster.job(too_big).get("Reason") == "PartitionConfig", 30,
                     "reason PartitionConfig for a 3-node job on a 2-node partition")
    assert cluster.run("squeue", "-h", "-j", too_big, "-o", "%T %r").stdout.split() == [
        "PENDING", "PartitionConfig"]
    blocker = sbatch(cluster, workdir, "srun sleep 300\n", "-N2", "--exclusive")
    cluster.wait_job_state(blocker, {"RUNNING"})
    waiting = sbatch(cluster, workdir, "srun true\n", "-N2", "--exclusive")
    cluster.wait_for(lambda: cluster.job(waiting).get("Reason") in ("Resources", "Priority"),
                     30, "reason Resources while the nodes are busy")
    assert cluster.job(waiting)["JobState"] == "PENDING"
    cluster.run("scancel", too_big, blocker, waiting)
    cluster.wait_for(lambda: cluster.job(blocker).get("JobState") == "CANCELLED", 30,
                     "the blocker cancelled")


def test_node_killed_under_a_job_ends_it_as_node_fail(cluster, workdir):
    job = sbatch(cluster, workdir, f"""
srun sh -c 'echo started > {workdir}/started-$SLURM_PROCID; sleep 300'
echo "srun exited $?"
""", "-N2", "--ntasks-per-node=1", "--no-requeue")
    cluster.wait_for(lambda: all((workdir / f"started-{r}").exists() for r in range(2)),
                     60, "both ranks to start")
    victim = "node2"
    try:
        cluster.take_down(victim, how="kill")
        rec = cluster.wait_job_state(job, {"NODE_FAIL", "FAILED", "COMPLETED"}, timeout=90)
        assert rec["JobState"] == "NODE_FAIL", rec
        assert rec["Reason"] == "NodeDown"
        node = cluster.node(victim)
        assert "DOWN" in node["State"], node
        assert "Not responding" in node["Reason"]
        batch_log = (workdir / f"batch-{job}.log").read_text()
        assert f"Node failure on {victim}" in batch_log, batch_log
    finally:
        cluster.restore(victim)
    assert cluster.node(victim)["State"] == "IDLE"


def test_node_set_down_requeues_a_requeueable_job(cluster, workdir):
    job = sbatch(cluster, workdir, "srun sleep 300\n", "-N2", "--ntasks-per-node=1",
                 "--requeue")
    cluster.wait_job_state(job, {"RUNNING"})
    try:
        cluster.take_down("node2", how="scontrol")
        # Slurm puts it back in the queue, held until EligibleTime (about two minutes later).
        rec = cluster.wait_for(
            lambda: (lambda j: j if j.get("Restarts") == "1" and j["JobState"] in
                     ("PENDING", "REQUEUED") else None)(cluster.job(job)), 30,
            "the job requeued")
        assert rec["Reason"] in ("BeginTime", "NodeDown", "None"), rec
    finally:
        cluster.run("scancel", job, check=False)
        cluster.restore("node2")


def test_parse_scontrol_record_keeps_values_with_spaces_and_equals():
    rec = parse_scontrol_record(
        "JobId=7 JobName=a b JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 "
        "Command=/bin/x --flag=1 WorkDir=/tmp")
    assert rec["JobId"] == "7"
    assert rec["JobName"] == "a b"
    assert rec["ExitCode"] == "3:0"
    assert rec["WorkDir"] == "/tmp"
