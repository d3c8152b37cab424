"""Serving replicas as scheduled jobs (decision 0018), end to end against a real server: an
endpoint's replica is a job of kind service on the training pool (here the local executor with
one virtual GPU slot, --local-gpus 1), visible in the jobs API and `trainyard jobs`, holding the
GPU it asks for, priced like a job, and never restarted by the job recovery policy (serving
replaces it). A replica waiting for its GPU shows the scheduler's reason on the endpoint, and a
request to it gets a 503 saying so once its cold-start wait runs out.

Replicas run tests/workloads/fake_serve_model.py (the replica contract of trainyard-serve-model).
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid

import pytest

from conftest import TRAINYARD_BIN, ServerFactory
from jobs_client import JobsClient
from test_serving import error_of, ok, wait_for
from test_serving_ratelimit import FAKE_ENGINE, chat, openai_client

TY = "/api/trainyard/v1"
COLD_START_S = 20


@pytest.fixture(scope="module")
def server(backend, tmp_path_factory, request):
    base = tmp_path_factory.mktemp(f"placement-{backend}")
    prices = base / "prices.yaml"
    # $3600 per GPU-hour: $1 per GPU-second, so a replica's cost is its GPU-seconds.
    prices.write_text("pools:\n  local:\n    provider: test\n    gpu_type: virtual\n"
                      "    gpu_hour_on_demand: 3600\n    gpu_hour_spot: 1800\n")
    factory = ServerFactory(base, backend, request)
    try:
        yield factory.new(extra_args=["--serving-engine", FAKE_ENGINE,
                                      "--serving-cold-start-s", str(COLD_START_S),
                                      "--local-gpus", "1", "--local-cpus", "8",
                                      "--price-catalog", str(prices)])
    finally:
        factory.close()



@pytest.fixture
def jobs(server):
    return JobsClient(server)


def endpoint(admin, server, name) -> dict:
    return ok(admin.get(server.api(f"{TY}/endpoints/{name}")))


def replica_jobs(admin, server, name) -> list[dict]:
    listed = ok(admin.get(server.api(f"{TY}/jobs"), params={"max_results": 200}))["jobs"]
    return [j for j in listed if j.get("kind") == "service" and j.get("endpoint") == name]


def gpu_job(name: str, command: str) -> dict:
    return {"name": name, "command": command, "resources": {"gpus_per_node": 1},
            "max_restarts": 0}


def cli(server, *args):
    env = {**os.environ, "TRAINYARD_URL": server.url, "TRAINYARD_TOKEN": server.token}
    return subprocess.run([str(TRAINYARD_BIN), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_a_replica_is_a_service_job_holding_its_gpu_until_the_endpoint_is_deleted(
        server, admin, jobs, llm_model):
    name = f"gpu-{uuid.uuid4().hex[:6]}"
    ok(admin.post(server.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": llm_model, "version": 1}],
        "min_replicas": 1, "scale_to_zero_seconds": 0,
        "resources": {"gpus": 1, "cpus": 2, "memory": "64Mi"}}))
    state = wait_for(lambda: (lambda e: e if e["state"] == "READY" else None)(
        endpoint(admin, server, name)), "a ready replica")
    assert state["resources"] == {"gpus": 1, "cpus": 2, "memory": 64 << 20}
    replica = state["replicas"][0]
    assert replica["job_id"].startswith("j-")
    assert replica["url"].startswith("http://127.0.0.1:")

    # The replica is a job: kind service, naming its endpoint, holding the pool's one GPU.
    job = jobs.get(replica["job_id"])
    assert job["kind"] == "service" and job["endpoint"] == name
    assert job["state"] == "RUNNING"
    assert job["spec"]["resources"]["gpus_per_node"] == 1
    assert job["spec"]["resources"]["cpus_per_node"] == 2
    assert job["attempt_list"][0]["gpus"] == 1
    assert replica_jobs(admin, server, name)[0]["job_id"] == job["job_id"]
    listed = cli(server, "jobs")
    assert listed.returncode == 0, listed.stderr
    assert f"(endpoint {name})" in listed.stdout and job["job_id"] in listed.stdout
    shown = cli(server, "endpoints", "show", name)
    assert shown.returncode == 0, shown.stderr
    assert job["job_id"] in shown.stdout and "1 GPU, 2 CPUs" in shown.stdout

    # It answers through the endpoint.
    client = openai_client(server, server.token)
    assert chat(client, name).choices[0].message.content

    # A training job that needs the GPU queues behind the replica...
    training = jobs.submit(gpu_job(f"train-{name}", "echo trained"))
    pending = jobs.wait(training["job_id"], lambda j: j["state"] == "PENDING" and j["message"],
                        "the training job's pending reason")
    assert "gpu" in pending["message"].lower(), pending["message"]
    # ... until the endpoint is deleted: its replica job ends (cancelled, not restarted), and
    # the training job runs on the GPU it freed.
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
    jobs.wait_state(training["job_id"], "SUCCEEDED", timeout=60)
    ended = jobs.wait_state(job["job_id"], "CANCELLED", timeout=30)
    assert ended["attempts"] == 1
    # Priced like a job: $1 per GPU-second of the replica's attempt.
    a = ended["attempt_list"][0]
    seconds = (a["ended_at"] - a["started_at"]) / 1000
    assert seconds > 0
    assert ended["cost_usd"] == pytest.approx(seconds, rel=0.02)
    assert ended["goodput"] == pytest.approx(1.0)


def test_a_replica_waiting_for_its_gpu_is_pending_and_a_request_gets_a_clear_503(
        server, admin, jobs, llm_model):
    blocker = jobs.submit(gpu_job("blocker", "sleep 600"))
    jobs.wait_state(blocker["job_id"], "RUNNING")
    name = f"wait-{uuid.uuid4().hex[:6]}"
    try:
        ok(admin.post(server.api(f"{TY}/endpoints"), json={
            "name": name, "served_entities": [{"model": llm_model, "version": 1}],
            "min_replicas": 1, "scale_to_zero_seconds": 0, "resources": {"gpus": 1}}))
        state = wait_for(lambda: (lambda e: e if e["state"] == "PENDING" and
                                  e["replicas"][0]["pending_reason"] else None)(
            endpoint(admin, server, name)), "a pending replica with the scheduler's reason")
        replica = state["replicas"][0]
        assert replica["url"] == "" and replica["job_id"]
        assert jobs.get(replica["job_id"])["state"] == "PENDING"
        shown = cli(server, "endpoints", "show", name)
        assert "waits for resources" in shown.stdout, shown.stdout

        # A request waits its cold-start bound, then gets a 503 naming the wait.
        r = admin.post(server.api(f"/serving-endpoints/{name}/invocations"),
                       json={"prompt": "a b"}, timeout=COLD_START_S + 60)
        error_of(r, 503, "waits for resources", replica["job_id"])

        # The GPU frees up: the replica is placed and serves.
        jobs.cancel(blocker["job_id"])
        wait_for(lambda: endpoint(admin, server, name)["state"] == "READY", "the replica placed")
        assert chat(openai_client(server, server.token), name).choices[0].message.content
    finally:
        jobs.cancel(blocker["job_id"]) if jobs.get(blocker["job_id"])["state"] in (
            "PENDING", "RUNNING") else None
        admin.delete(server.api(f"{TY}/endpoints/{name}"))


def test_scaling_to_zero_frees_the_gpu_for_training(server, admin, jobs, llm_model):
    name = f"idle-{uuid.uuid4().hex[:6]}"
    ok(admin.post(server.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": llm_model, "version": 1}],
        "min_replicas": 0, "scale_to_zero_seconds": 3, "resources": {"gpus": 1}}))
    try:
        assert chat(openai_client(server, server.token), name).choices[0].message.content
        replica_job = replica_jobs(admin, server, name)[0]
        training = jobs.submit(gpu_job(f"train-{name}", "echo trained"))
        # The replica holds the GPU while it is busy, then the endpoint scales to zero and the
        # training job gets it.
        jobs.wait_state(training["job_id"], "SUCCEEDED", timeout=90)
        assert jobs.get(replica_job["job_id"])["state"] == "CANCELLED"
        assert endpoint(admin, server, name)["state"] == "SCALED_TO_ZERO"
    finally:
        admin.delete(server.api(f"{TY}/endpoints/{name}"))


def test_a_killed_replica_fails_its_job_and_serving_not_the_recovery_policy_replaces_it(
        server, admin, jobs, llm_model):
    name = f"kill-{uuid.uuid4().hex[:6]}"
    ok(admin.post(server.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": llm_model, "version": 1}],
        "min_replicas": 1, "scale_to_zero_seconds": 0}))
    try:
        first = wait_for(lambda: [r for r in endpoint(admin, server, name)["replicas"]
                                  if r["state"] == "READY"], "a ready replica")[0]
        assert first["pid"] > 0
        os.killpg(first["pid"], signal.SIGKILL)
        failed = jobs.wait_state(first["job_id"], "FAILED", timeout=60)
        assert failed["attempts"] == 1 and failed["restarts"] == 0
        assert "serving starts its replacement" in failed["message"], failed["message"]
        second = wait_for(lambda: [r for r in endpoint(admin, server, name)["replicas"]
                                   if r["state"] == "READY"], "the replacement")[0]
        assert second["job_id"] != first["job_id"]
        assert endpoint(admin, server, name)["entity_states"][0]["restarts"] == 1
        # The failed job stays failed: the recovery policy did not start another attempt.
        assert jobs.get(first["job_id"])["attempts"] == 1
    finally:
        admin.delete(server.api(f"{TY}/endpoints/{name}"))


def test_service_jobs_are_not_submitted_through_the_jobs_api(server, jobs):
    r = jobs.s.post(server.api(f"{TY}/jobs"), json={"spec": {
        "name": "sneaky", "command": "true", "kind": "service", "endpoint": "x"}}, timeout=30)
    error_of(r, 400, "kind: service", "trainyard endpoints create")
    r = jobs.s.post(server.api(f"{TY}/jobs"), json={"spec": {
        "name": "sneaky", "command": "true", "endpoint": "x"}}, timeout=30)
    error_of(r, 400, "endpoint is only for jobs of kind service")


def test_endpoint_resources_are_validated_naming_the_field(server, admin, llm_model):
    def create(resources):
        return admin.post(server.api(f"{TY}/endpoints"), json={
            "name": f"bad-{uuid.uuid4().hex[:6]}",
            "served_entities": [{"model": llm_model, "version": 1}], "resources": resources})
    error_of(create({"gpus": -1}), 400, "resources.gpus")
    error_of(create({"memory": "lots"}), 400, "resources.memory")
    error_of(create({"gpu": 1}), 400, "resources.gpu is not a field")
    # More GPUs than any node of the pool has: refused, saying what the pool has.
    error_of(create({"gpus": 4}), 400, "resources: a replica could never be placed", "gpu")


def test_replicas_count_against_the_endpoints_project(server, admin, jobs, llm_model):
    """An endpoint names the project its replicas count against (quotas, fair share), as a
    training job does; its owner must be allowed to submit to that project."""
    project = f"serve-{uuid.uuid4().hex[:6]}"
    user = f"pat{uuid.uuid4().hex[:6]}"
    pat = server.session(server.create_user(user))
    ok(admin.post(server.api(f"{TY}/projects"), json={"name": project}))
    name = f"proj-{uuid.uuid4().hex[:6]}"
    body = {"name": name, "served_entities": [{"model": llm_model, "version": 1}],
            "min_replicas": 1, "scale_to_zero_seconds": 0, "project": project}
    # Not a member: refused before anything starts, naming the project and what to do.
    error_of(pat.post(server.api(f"{TY}/endpoints"), json=body), 403, "project",
             f"trainyard projects add-member {project} {user}")
    error_of(pat.post(server.api(f"{TY}/endpoints"), json={**body, "project": "no such"}), 400,
             "project must be")
    ok(admin.post(server.api(f"{TY}/projects/{project}/members"), json={"user": user}))
    ok(pat.post(server.api(f"{TY}/endpoints"), json=body))
    try:
        state = wait_for(lambda: (lambda e: e if e["state"] == "READY" else None)(
            ok(pat.get(server.api(f"{TY}/endpoints/{name}")))), "a ready replica")
        assert state["project"] == project
        job = jobs.get(state["replicas"][0]["job_id"])
        assert job["spec"]["project"] == project and job["owner"] == user
        shown = cli(server, "endpoints", "show", name)
        assert shown.returncode == 0, shown.stderr
        assert project in shown.stdout
        # Moving it to a project its owner may not use is refused the same way.
        error_of(pat.patch(server.api(f"{TY}/endpoints/{name}"), json={"project": "other-x"}),
                 403, "project")
    finally:
        ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
