"""Serving replicas placed on a real Slurm cluster (tests/slurm_cluster.py: munged, slurmctld
and two slurmd in network namespaces; decision 0018): `trainyard server --executor slurm` runs
each replica as a Slurm job pinned to the node the scheduler planned (sbatch --nodelist),
reaches it at that node's address (sinfo's NodeAddr: the node names resolve only inside the
cluster's namespaces) on the port the replica bound on its node and reported through its port
file, routes the openai client's requests to it, and cancels the Slurm jobs when the endpoint
scales to zero or is deleted; a request to the scaled-to-zero endpoint starts a replica on
Slurm again and is answered.

A server killed with SIGKILL leaves its replicas' private directories (their port files)
on the shared filesystem; its next start removes them (a link planted in one is removed, not
followed), ends the Slurm jobs of the killed run's replicas, and the endpoint serves again.

Replicas run tests/workloads/fake_serve_model.py (the replica contract of
trainyard-serve-model: --port 0 --port-file), except in the last test, where a second server
on the same cluster runs the real `trainyard-serve-model` on a node with a tiny random Qwen2
(test_serving_llm_endpoint.py's) and the openai client chats and streams through it. Needs root
and Debian's slurm-wlm and munge (scripts/install-deps); fails, not skips, otherwise.
"""

from __future__ import annotations

import os
import shlex
import socket
import uuid
from urllib.parse import urlparse

import pytest

from conftest import TRAINYARD_BIN, TrainyardServer, running
from jobs_client import JobsClient
from test_serving import FAKE_ENGINE, ok, wait_for
from test_serving_ratelimit import chat, openai_client

TY = "/api/trainyard/v1"
COLD_START_S = 120
SLURM_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}


def slurm_server(cluster, tmp_path_factory, *extra: str) -> TrainyardServer:
    # The nodes reach the server on the bridge's host address, not on their own loopback.
    with socket.socket() as s:
        s.bind((cluster.controller_addr, 0))
        port = s.getsockname()[1]
    name = tmp_path_factory.mktemp("serving-slurm").name
    return TrainyardServer(
        data_dir=cluster.shared_dir / f"server-{name}", backend="sqlite",
        extra_args=["--executor", "slurm", "--slurm-conf", str(cluster.conf_path),
                    "--host", "0.0.0.0", "--port", str(port),
                    "--advertise-url", f"http://{cluster.controller_addr}:{port}",
                    "--serving-cold-start-s", str(COLD_START_S), *extra])


@pytest.fixture(scope="module")
def server(cluster, tmp_path_factory):
    yield from running(slurm_server(cluster, tmp_path_factory, "--serving-engine", FAKE_ENGINE))



def endpoint(admin, server, name) -> dict:
    return ok(admin.get(server.api(f"{TY}/endpoints/{name}")))


def ready_replicas(admin, server, name, count) -> list[dict] | None:
    replicas = [r for r in endpoint(admin, server, name)["replicas"] if r["state"] == "READY"]
    return replicas if len(replicas) == count else None


def slurm_job_of(cluster, job: dict) -> dict:
    """Slurm's record (scontrol show job) of the replica job's attempt."""
    attempt = job["attempt_list"][-1]["attempt"]
    listed = cluster.run("squeue", "-h", "--states=all", "-n",
                         f"ty-{job['job_id']}-a{attempt}", "-o", "%i").stdout.split()
    assert len(listed) == 1, listed
    return cluster.job(listed[0]) | {"JobId": listed[0]}


def test_replicas_run_on_their_planned_nodes_answer_and_end_with_the_endpoint(
        cluster, server, admin, llm_model):
    name = f"slurm-{uuid.uuid4().hex[:6]}"
    # A whole node per replica: the scheduler plans one on each node.
    ok(admin.post(server.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": llm_model, "version": 1}],
        "min_replicas": 2, "max_replicas": 2, "scale_to_zero_seconds": 0,
        "resources": {"cpus": cluster.cpus_per_node}}))
    replicas = wait_for(lambda: ready_replicas(admin, server, name, 2), "two ready replicas",
                        timeout=COLD_START_S)

    jobs = JobsClient(server)
    addresses = set(cluster.node_addrs.values())
    slurm_ids, planned_nodes = [], []
    for replica in replicas:
        job = jobs.get(replica["job_id"])
        assert job["kind"] == "service" and job["state"] == "RUNNING", job
        planned = job["attempt_list"][-1]["nodes"]
        assert len(planned) == 1 and planned[0] in cluster.node_names, planned
        planned_nodes.append(planned[0])
        # Slurm runs it where the scheduler planned: asked for that node, and got it.
        record = slurm_job_of(cluster, job)
        assert record["JobState"] == "RUNNING", record
        assert record["ReqNodeList"] == planned[0], record
        assert record["NodeList"] == planned[0], record
        slurm_ids.append(record["JobId"])
        # The server reaches it at the node's address (the name does not resolve here), on the
        # port the replica bound on its node.
        url = urlparse(replica["url"])
        assert url.hostname == cluster.node_addrs[planned[0]], (replica["url"], planned)
        assert url.hostname in addresses
        assert "--port 0 --port-file" in job["spec"]["command"], job["spec"]["command"]
        port_file = server.data_dir / "jobs" / "serving-models" / replica["id"] / "port"
        assert url.port == int(port_file.read_text()), (replica["url"], port_file)
    assert sorted(planned_nodes) == sorted(cluster.node_names)

    # The openai client, through our server's OpenAI route, gets the replicas' answers.
    client = openai_client(server, server.token)
    for i in range(4):
        answer = chat(client, name, text=f"hello node {i}")
        assert answer.choices[0].message.content.split() == ["hello", "node", str(i)], answer
    served = sum(r["served"] for r in endpoint(admin, server, name)["replicas"])
    assert served == 4

    # Scaled to zero: both Slurm jobs end, and the service jobs are cancelled.
    ok(admin.patch(server.api(f"{TY}/endpoints/{name}"),
                   json={"min_replicas": 0, "scale_to_zero_seconds": 1}))
    wait_for(lambda: endpoint(admin, server, name)["state"] == "SCALED_TO_ZERO",
             "scale to zero", timeout=60)
    for replica, slurm_id in zip(replicas, slurm_ids):
        jobs.wait_state(replica["job_id"], "CANCELLED", timeout=60)
        cluster.wait_job_state(slurm_id, SLURM_ENDED, timeout=60)

    # A request to the scaled-to-zero endpoint starts a replica on Slurm and is answered.
    answer = chat(client, name, text="cold start")
    assert answer.choices[0].message.content.split() == ["cold", "start"], answer
    (replica,) = wait_for(lambda: ready_replicas(admin, server, name, 1), "the new replica")
    job = jobs.get(replica["job_id"])
    node = job["attempt_list"][-1]["nodes"][0]
    record = slurm_job_of(cluster, job)
    assert record["NodeList"] == node and urlparse(replica["url"]).hostname == \
        cluster.node_addrs[node]

    # Deleted: its Slurm job is cancelled too, and its private directory removed.
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
    jobs.wait_state(replica["job_id"], "CANCELLED", timeout=60)
    cluster.wait_job_state(record["JobId"], SLURM_ENDED, timeout=60)
    staged = server.data_dir / "jobs" / "serving-models" / replica["id"]
    wait_for(lambda: not staged.exists(), "the replica's directory removed", timeout=30)


def test_a_killed_server_removes_its_replicas_directories_and_serves_again(
        cluster, server, admin, llm_model, tmp_path):
    name = f"crash-{uuid.uuid4().hex[:6]}"
    ok(admin.post(server.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": llm_model, "version": 1}],
        "min_replicas": 1, "max_replicas": 1, "scale_to_zero_seconds": 0}))
    (old,) = wait_for(lambda: ready_replicas(admin, server, name, 1), "a ready replica",
                      timeout=COLD_START_S)
    jobs = JobsClient(server)
    old_slurm = slurm_job_of(cluster, jobs.get(old["job_id"]))
    staged = server.data_dir / "jobs" / "serving-models" / old["id"]
    assert (staged / "port").is_file()
    # A link in the replica's directory (its account may write there) must not lead the
    # cleanup out of it.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (staged / "escape").symlink_to(outside)

    server.kill()
    start = server.starts + 1
    server.start()

    wait_for(lambda: not staged.exists(), "the killed run's replica directory removed",
             timeout=60)
    log = server.log_path.read_text(errors="replace").split(f"--- start {start}:")[-1]
    assert f"removed the replica directory {staged}" in log, log
    assert (outside / "keep.txt").read_text() == "keep"
    # The killed run's replica ends on Slurm, and a new one answers.
    cluster.wait_job_state(old_slurm["JobId"], SLURM_ENDED, timeout=60)
    answer = chat(openai_client(server, server.token), name, text="after the crash")
    assert answer.choices[0].message.content.split() == ["after", "the", "crash"], answer
    (new,) = wait_for(lambda: ready_replicas(admin, server, name, 1), "the new replica")
    assert new["id"] != old["id"]
    renewed = server.data_dir / "jobs" / "serving-models" / new["id"]
    assert int((renewed / "port").read_text()) == urlparse(new["url"]).port
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
    wait_for(lambda: not renewed.exists(), "the new replica's directory removed", timeout=60)


@pytest.fixture(scope="module")
def engine_server(cluster, tmp_path_factory):
    """A second server on the cluster whose replicas run the real trainyard-serve-model."""
    yield from running(slurm_server(cluster, tmp_path_factory, "--serving-device", "cpu"))


def test_the_native_engine_serves_on_a_slurm_node(cluster, engine_server, tmp_path_factory):
    import mlflow
    from mlflow import MlflowClient

    from test_serving_llm_endpoint import make_model

    server = engine_server
    admin = server.session()
    os.environ["MLFLOW_TRACKING_URI"] = server.url
    os.environ["MLFLOW_TRACKING_TOKEN"] = server.token
    try:
        mlflow.set_tracking_uri(server.url)
        model = f"tiny-{uuid.uuid4().hex[:6]}"
        mlflow.set_experiment(f"serving-{model}")
        with mlflow.start_run() as run:
            mlflow.log_artifacts(str(make_model(tmp_path_factory.mktemp("tiny"), 5)), "model")
        MlflowClient().create_registered_model(model)
        MlflowClient().create_model_version(model, f"runs:/{run.info.run_id}/model",
                                            run.info.run_id)
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.environ.pop("MLFLOW_TRACKING_TOKEN", None)
        mlflow.set_tracking_uri(None)

    name = f"engine-{uuid.uuid4().hex[:6]}"
    ok(admin.post(server.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": model, "version": 1}],
        "min_replicas": 1, "max_replicas": 1, "scale_to_zero_seconds": 0}))
    (replica,) = wait_for(lambda: ready_replicas(admin, server, name, 1), "a ready replica",
                          timeout=COLD_START_S)
    assert replica["flavor"] == "llm", replica
    # It is the real engine, in a Slurm job on a cluster node, reached at the node's address.
    job = JobsClient(server).get(replica["job_id"])
    argv = shlex.split(job["spec"]["command"])
    assert argv[0] == str(TRAINYARD_BIN.parent / "trainyard-serve-model"), argv
    assert argv[1] == "--model-dir", argv
    assert "--port 0 --port-file" in job["spec"]["command"], job["spec"]
    node = job["attempt_list"][-1]["nodes"][0]
    record = slurm_job_of(cluster, job)
    assert record["JobState"] == "RUNNING" and record["NodeList"] == node, record
    assert urlparse(replica["url"]).hostname == cluster.node_addrs[node], replica

    client = openai_client(server, server.token)
    reply = chat(client, name, text="my card was charged twice", max_tokens=4, temperature=0)
    assert reply.choices[0].finish_reason in ("stop", "length"), reply
    assert 0 < reply.usage.completion_tokens <= 4 and reply.usage.prompt_tokens > 3, reply
    # Streamed: server-sent events from the node, through the router, join into the answer the
    # same greedy request gets whole.
    prompt = "the parcel never arrived"
    whole = client.completions.create(model=name, prompt=prompt, max_tokens=4, temperature=0)
    chunks = list(client.completions.create(model=name, prompt=prompt, max_tokens=4,
                                            temperature=0, stream=True))
    assert len([c for c in chunks if c.choices]) >= 1
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    served = sum(r["served"] for r in endpoint(admin, server, name)["replicas"])
    assert served == 3

    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
    cluster.wait_job_state(record["JobId"], SLURM_ENDED, timeout=60)
