"""Trainyard jobs on a real Slurm cluster (tests/slurm_cluster.py: munged, slurmctld and two
slurmd in network namespaces): `trainyard server --executor slurm` runs a 2-node gang job whose
ranks see the torchrun environment and all-reduce through Gloo, recovers a job from its
checkpoint on the other node when its node is taken down, and cancels.

Needs root and Debian's slurm-wlm and munge (scripts/install-deps); fails, not skips, otherwise.
"""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from conftest import TRAINYARD_BIN, TrainyardServer, running
from slurm_cluster import SlurmCluster
from test_jobs import COUNTER, Jobs, job

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's python3-torch


@pytest.fixture
def slurm_server(cluster, tmp_path):
    # The nodes reach the server on the bridge's host address, not on their own loopback.
    with socket.socket() as s:
        s.bind((cluster.controller_addr, 0))
        port = s.getsockname()[1]
    data_dir = cluster.shared_dir / f"server-{tmp_path.name}"
    server = TrainyardServer(
        data_dir=data_dir, backend="sqlite",
        extra_args=["--executor", "slurm", "--slurm-conf", str(cluster.conf_path),
                    "--host", "0.0.0.0", "--advertise-url",
                    f"http://{cluster.controller_addr}:{port}"])
    server.extra_args += ["--port", str(port)]
    yield from running(server)


def test_two_node_gang_job_allreduces_through_gloo(cluster, slurm_server):
    jobs = Jobs(slurm_server)
    script = cluster.shared_dir / "allreduce.py"
    script.write_text(
        "import os, socket, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"  # env:// from MASTER_ADDR/PORT, RANK, WORLD_SIZE
        "t = torch.tensor([float(int(os.environ['RANK']) + 1)])\n"
        "dist.all_reduce(t)\n"
        "print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], 'node',\n"
        "      os.environ['NODE_RANK'], socket.gethostname(), 'sum', int(t.item()),\n"
        "      'run', os.environ['MLFLOW_RUN_ID'], flush=True)\n"
        "dist.destroy_process_group()\n")
    j = jobs.submit(job("gang2", f"{SYSTEM_PYTHON} {script}", working_dir=str(cluster.shared_dir),
                        resources={"nodes": 2, "cpus_per_node": 1}))
    done = jobs.wait_state(j["job_id"], "SUCCEEDED", timeout=120)
    assert sorted(done["attempt_list"][0]["nodes"]) != []
    logs = [jobs.logs(j["job_id"], rank=r) for r in range(2)]
    for r, text in enumerate(logs):
        assert f"rank {r} of 2" in text and "sum 3" in text, text
        assert f"run {j['run_id']}" in text
    hosts = {text.split(" node ")[1].split()[1] for text in logs}
    assert hosts == set(cluster.node_names)


@pytest.mark.parametrize("how", ["scontrol", "kill"])
def test_node_failure_recovers_from_checkpoint_on_the_other_node(cluster, slurm_server, tmp_path,
                                                                 how):
    """The node is set DOWN by an admin, or its slurmd and the job's processes are killed
    (Slurm notices after SlurmdTimeout)."""
    jobs = Jobs(slurm_server)
    out = cluster.shared_dir / f"out-{tmp_path.name}"
    j = jobs.submit(job("survives-node-loss", COUNTER, working_dir=str(cluster.shared_dir),
                        restart_backoff="200ms",
                        env={"STEPS": "60", "STEP_SECONDS": "0.1", "OUT": str(out)}))
    running = jobs.wait(j["job_id"], lambda x: x["latest_checkpoint"] is not None
                        if "latest_checkpoint" in x else False, "a first checkpoint", timeout=90)
    node = running["attempt_list"][0]["nodes"]
    assert running["state"] == "RUNNING"
    # Which node Slurm picked: the rank records it in its log's first line via hostname.
    log = jobs.logs(j["job_id"])
    assert "starts at step 0" in log
    victim = [n for n in cluster.node_names
              if cluster.node(n).get("State", "").startswith(("ALLOCATED", "MIXED"))]
    assert len(victim) == 1, (victim, node)
    cluster.take_down(victim[0], how=how)
    done = jobs.wait_state(j["job_id"], "SUCCEEDED", timeout=180)
    first, second = done["attempt_list"][0], done["attempt_list"][-1]
    assert first["state"] == "lost", first
    assert victim[0] in first["cause"]
    assert victim[0] in done["excluded_nodes"]
    assert second["resumed_from"] != ""
    assert json.loads(out.read_text())["step"] == 60
    cluster.restore(victim[0])


def test_cancel_reaches_the_ranks_on_slurm(cluster, slurm_server):
    jobs = Jobs(slurm_server)
    j = jobs.submit(job("to-cancel", "trap 'echo got TERM; exit 0' TERM; echo up; "
                        "while true; do sleep 0.1; done", working_dir=str(cluster.shared_dir),
                        preemption_grace="5s"))
    jobs.wait(j["job_id"], lambda x: "up" in (jobs.logs(x["job_id"]) if x["attempts"] else ""),
              "the rank running", timeout=90)
    jobs.cancel(j["job_id"])
    done = jobs.wait_state(j["job_id"], "CANCELLED", timeout=60)
    assert done["attempt_list"][0]["state"] == "cancelled"
    assert "got TERM" in jobs.logs(j["job_id"])


def test_pending_reason_from_slurm_is_shown(cluster, slurm_server):
    jobs = Jobs(slurm_server)
    down = cluster.node_names[1]
    cluster.take_down(down, how="scontrol")
    try:
        j = jobs.submit(job("needs-both", "echo ran", working_dir=str(cluster.shared_dir),
                            resources={"nodes": 2, "cpus_per_node": 1}))
        waiting = jobs.wait(j["job_id"], lambda x: "queued in the cluster" in x["message"],
                            "Slurm's pending reason", timeout=60)
        assert "PENDING" in waiting["message"], waiting["message"]
        out = subprocess.run([str(TRAINYARD_BIN), "jobs", "--url", slurm_server.url, "--token",
                              slurm_server.token], capture_output=True, text=True,
                             check=True).stdout
        assert "queued in the cluster" in out
    finally:
        cluster.restore(down)
    jobs.wait_state(j["job_id"], "SUCCEEDED", timeout=120)


def test_preemption_on_slurm_signals_the_ranks_and_requeues(cluster, slurm_server, tmp_path):
    jobs = Jobs(slurm_server)
    cpus = cluster.cpus_per_node
    low = jobs.submit(job("low-on-slurm", COUNTER, working_dir=str(cluster.shared_dir),
                          preemptible=True, preemption_grace="10s",
                          resources={"nodes": 2, "cpus_per_node": cpus},
                          env={"STEPS": "2000", "STEP_SECONDS": "0.05",
                               "CHECKPOINT_EVERY": "1000",
                               "OUT": str(cluster.shared_dir / f"low-{tmp_path.name}")}))
    jobs.wait(low["job_id"], lambda x: x["attempts"] >= 1 and
              "starts at step" in jobs.logs(x["job_id"]), "the low job running", timeout=90)
    high = jobs.submit(job("high-on-slurm", "echo urgent", working_dir=str(cluster.shared_dir),
                           priority=10, resources={"nodes": 2, "cpus_per_node": cpus}))
    jobs.wait_state(high["job_id"], "SUCCEEDED", timeout=120)
    victim = jobs.wait(low["job_id"], lambda x: len(x["attempt_list"]) >= 2, "a second attempt",
                       timeout=120)
    first = victim["attempt_list"][0]
    assert first["state"] == "preempted" and high["job_id"] in first["cause"]
    assert "got SIGTERM" in jobs.logs(low["job_id"], attempt=1)
    assert victim["attempt_list"][1]["resumed_from"] != ""
    assert victim["restarts"] == 0
    jobs.cancel(low["job_id"])
    jobs.wait_state(low["job_id"], "CANCELLED", timeout=60)




def test_hung_job_on_slurm_is_restarted(cluster, slurm_server, tmp_path):
    jobs = Jobs(slurm_server)
    out = cluster.shared_dir / f"hang-{tmp_path.name}"
    j = jobs.submit(job("hangs-on-slurm", COUNTER, working_dir=str(cluster.shared_dir),
                        hang_timeout="3s", preemption_grace="2s", restart_backoff="200ms",
                        env={"STEPS": "6", "HANG_AT_STEP": "3", "OUT": str(out)}))
    done = jobs.wait_state(j["job_id"], "SUCCEEDED", timeout=120)
    first, second = done["attempt_list"][0], done["attempt_list"][-1]
    assert first["state"] == "hung", first
    assert second["resumed_from"] != ""
    assert json.loads(out.read_text())["step"] == 6

PREEMPTION_CONF = """\
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=low Nodes=ALL PriorityTier=1 GraceTime=10 MaxTime=INFINITE State=UP
PartitionName=urgent Nodes=ALL PriorityTier=10 MaxTime=INFINITE State=UP
"""


def test_slurm_preempting_a_job_requeues_it_from_its_checkpoint(tmp_path):
    """Slurm itself preempts (partition priorities, PreemptMode=CANCEL with a grace time): the
    ranks get SIGTERM and checkpoint; Trainyard sees scontrol's PreemptTime, requeues the job
    without counting a failure, and it resumes from that checkpoint when Slurm lets it run."""
    c = SlurmCluster(nodes=2, extra_conf=PREEMPTION_CONF)
    c.start()
    try:
        with socket.socket() as s:
            s.bind((c.controller_addr, 0))
            port = s.getsockname()[1]
        server = TrainyardServer(
            data_dir=c.shared_dir / "server", backend="sqlite",
            extra_args=["--executor", "slurm", "--slurm-conf", str(c.conf_path),
                        "--slurm-partition", "low", "--host", "0.0.0.0", "--port", str(port),
                        "--advertise-url", f"http://{c.controller_addr}:{port}"])
        server.start()
        try:
            jobs = Jobs(server)
            out = c.shared_dir / "out"
            j = jobs.submit(job("preempted-by-slurm", COUNTER, working_dir=str(c.shared_dir),
                                resources={"nodes": 2, "cpus_per_node": c.cpus_per_node},
                                env={"STEPS": "150", "STEP_SECONDS": "0.05",
                                     "CHECKPOINT_EVERY": "1000", "OUT": str(out)}))
            jobs.wait(j["job_id"], lambda x: x["attempts"] >= 1 and
                      "starts at step" in jobs.logs(x["job_id"]), "running", timeout=90)
            urgent = c.shared_dir / "urgent.sh"
            urgent.write_text("#!/bin/sh\nsleep 3\n")
            c.run("sbatch", "--parsable", "-p", "urgent", "-N2",
                  f"--ntasks-per-node={c.cpus_per_node}", f"--output={c.shared_dir}/urgent.log",
                  str(urgent))
            done = jobs.wait_state(j["job_id"], "SUCCEEDED", timeout=180)
            first = done["attempt_list"][0]
            assert first["state"] == "preempted", first
            assert "PREEMPTED at" in first["cause"]
            assert done["restarts"] == 0
            assert "got SIGTERM" in jobs.logs(j["job_id"], attempt=1)
            assert done["attempt_list"][1]["resumed_from"] != ""
            assert json.loads(out.read_text())["step"] == 150
        finally:
            server.stop()
    finally:
        c.stop()
