"""A job that runs as a service principal (`run_as` in its spec; issue 16: "a service
principal's token scoped to a job can read only what the job was granted").

A multi-user server (the tests run as root) with two non-admin users mapped to OS accounts:
alice may use the service principal `reader-bot` (an admin granted it with `trainyard
service-principals grant-use`), bob may not. The service principal has SELECT on table A only;
alice herself has SELECT on B only. alice's job with `run_as: reader-bot` runs
tests/workloads/catalog_reader.py, which reads both tables through the API with the job's
TRAINYARD_TOKEN: A is read, B is 403, so the workload has the service principal's grants and not
its submitter's. The job's token still writes its own MLflow run. bob's submit is 403 naming
run_as; run_as naming a user or nobody is 400. SQLite only (the store suites cover PostgreSQL).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

from conftest import TRAINYARD_BIN, ServerFactory

API = "/api/trainyard/v1"
UC = "/api/2.1/unity-catalog"
PY = "/usr/bin/python3"
READER = Path(__file__).resolve().parent / "workloads" / "catalog_reader.py"
OS_USERS = {"alice": "ty-runas-alice", "bob": "ty-runas-bob"}
SP = "reader-bot"


@pytest.fixture(scope="module")
def backend() -> str:
    return "sqlite"


def _remove_os_user(name: str) -> None:
    subprocess.run(["userdel", "-r", name], capture_output=True)
    subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture(scope="module")
def os_users():
    """OS accounts the users map to; leftovers of an aborted earlier run are replaced."""
    for name in OS_USERS.values():
        _remove_os_user(name)
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True,
                       capture_output=True)
    try:
        yield OS_USERS
    finally:
        for name in OS_USERS.values():
            _remove_os_user(name)


@pytest.fixture(scope="module")
def server(backend, tmp_path_factory, request):
    factory = ServerFactory(tmp_path_factory.mktemp("srv-runas"), backend, request)
    try:
        yield factory.new(single_user=False)
    finally:
        factory.close()


def check(r: requests.Response, status: int = 200) -> dict:
    assert r.status_code == status, f"{r.status_code}: {r.text[:2000]}"
    return r.json() if r.content else {}


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def import_rows(admin, server, table: str, rows: list[dict]) -> None:
    body = "".join(json.dumps(x) + "\n" for x in rows).encode()
    check(admin.post(server.api(f"{API}/tables/{table}/import"),
                     params={"format": "jsonl", "mode": "append"}, data=body, timeout=60))


def grant(admin, server, securable: str, full_name: str, principal: str, *privileges) -> None:
    check(admin.patch(server.api(f"{UC}/permissions/{securable}/{full_name}"),
                      json={"changes": [{"principal": principal, "add": list(privileges)}]}))


def cli(server, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRAINYARD_URL=server.url, TRAINYARD_TOKEN=server.token)
    return subprocess.run([str(TRAINYARD_BIN), *args], capture_output=True, text=True, env=env,
                          timeout=60)


def wait_state(session, server, job_id: str, states: set[str], timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = check(session.get(server.api(f"{API}/jobs/{job_id}"), timeout=30))["job"]
        if job["state"] in states:
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} did not reach {states} within {timeout}s: "
                        f"{json.dumps(job)[:2000]}")
        server.assert_alive()
        time.sleep(0.05)  # polling, bounded by the deadline


def test_a_job_run_as_a_service_principal_reads_with_its_grants_only(server, os_users):
    admin = server.session()
    tokens = {}
    for user, account in os_users.items():
        check(admin.post(server.api(f"{API}/users"), json={"name": user, "os_user": account}))
        tokens[user] = check(admin.post(server.api(f"{API}/tokens"), json={"user": user}))["token"]
    alice, bob = server.session(tokens["alice"]), server.session(tokens["bob"])

    cat, sch = name("cat"), name("sch")
    check(admin.post(server.api(f"{UC}/catalogs"), json={"name": cat}))
    check(admin.post(server.api(f"{UC}/schemas"), json={"name": sch, "catalog_name": cat}))
    table_a, table_b = f"{cat}.{sch}.tickets", f"{cat}.{sch}.salaries"
    rows_a = [{"id": i, "text": f"ticket {i}"} for i in range(1, 4)]
    import_rows(admin, server, table_a, rows_a)
    import_rows(admin, server, table_b, [{"id": 1, "text": "secret"}])

    check(admin.post(server.api(f"{API}/service-principals"), json={"name": SP}))
    for principal in (SP, "alice"):
        grant(admin, server, "catalog", cat, principal, "USE CATALOG", "USE SCHEMA")
    grant(admin, server, "table", table_a, SP, "SELECT")
    grant(admin, server, "table", table_b, "alice", "SELECT")  # alice's, not the job's

    # Only admins (or MANAGE holders) grant its use; then alice may run jobs as it.
    r = alice.post(server.api(f"{API}/grants/service_principal"),
                   json={"id": SP, "user": "alice", "privilege": "EDIT"})
    assert r.status_code == 403, r.text
    out = cli(server, "service-principals", "grant-use", SP, "alice")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"run_as: {SP}" in out.stdout
    out = cli(server, "service-principals", "grant-use", "alice", "bob")
    assert out.returncode != 0 and "no service principal" in out.stdout + out.stderr

    spec = {"name": "read-tables", "run_as": SP, "working_dir": "/", "max_restarts": 0,
            "command": [PY, "-c", READER.read_text(), table_a, table_b]}
    job = check(alice.post(server.api(f"{API}/jobs"), json={"spec": spec}))["job"]
    assert job["owner"] == "alice" and job["spec"]["run_as"] == SP
    done = wait_state(alice, server, job["job_id"], {"SUCCEEDED", "FAILED"})
    logs = check_text(alice.get(server.api(f"{API}/jobs/{job['job_id']}/logs"), timeout=30))
    assert done["state"] == "SUCCEEDED", logs
    lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    whoami = next(x for x in lines if "whoami" in x)
    assert whoami["whoami"]["user"] == SP and whoami["whoami"]["is_admin"] is False
    read = {x["table"]: x for x in lines if "table" in x}
    assert read[table_a]["status"] == 200, read[table_a]
    assert sorted(((x["id"], x["text"]) for x in read[table_a]["rows"])) == \
        [(x["id"], x["text"]) for x in rows_a]
    assert read[table_b]["status"] == 403, read[table_b]
    assert json.loads(read[table_b]["rows"])["error_code"] == "PERMISSION_DENIED"
    assert SP in read[table_b]["rows"] and "SELECT" in read[table_b]["rows"]
    # Its own MLflow run is the job's to write; the run says whom the job ran as.
    assert next(x for x in lines if "log_metric" in x)["log_metric"] == 200
    run = check(alice.get(server.api("/api/2.0/mlflow/runs/get"),
                          params={"run_id": job["run_id"]}))["run"]
    assert {"key": "trainyard.run_as", "value": SP} in run["data"]["tags"]
    assert any(m["key"] == "tables_read" and m["value"] == 2 for m in run["data"]["metrics"])
    out = cli(server, "describe", job["job_id"])
    assert out.returncode == 0 and f"runs as service principal {SP}" in out.stdout, out.stdout
    # The audit log names the service principal as the reader, allowed on A, denied on B
    # (decisions are written in the background: poll, bounded by a deadline).
    wanted = {(table_a, "ALLOW"), (table_b, "DENY")}
    deadline = time.monotonic() + 30
    while True:
        events = check(admin.get(server.api(f"{API}/catalog/audit"),
                                 params={"user": SP}))["events"]
        decisions = {(e["securable"], e["outcome"]) for e in events
                     if e["securable_type"] == "table" and e["privilege"] == "SELECT"}
        if wanted <= decisions:
            break
        assert time.monotonic() < deadline, events
        time.sleep(0.05)  # polling, bounded by the deadline

    # bob may not use it: 403 naming run_as at submit. run_as must name a service principal.
    r = bob.post(server.api(f"{API}/jobs"), json={"spec": dict(spec)})
    assert r.status_code == 403, r.text
    assert r.json()["message"].startswith(f"run_as: user 'bob' may not run jobs as service "
                                          f"principal '{SP}'"), r.text
    for bad, says in (("alice", "is a user"), ("nobody-here", "no service principal")):
        r = alice.post(server.api(f"{API}/jobs"), json={"spec": dict(spec, run_as=bad)})
        assert r.status_code == 400 and says in r.json()["message"], r.text
    r = alice.post(server.api(f"{API}/jobs"), json={"spec": dict(spec, run_as="a b")})
    assert r.status_code == 400 and "spec: run_as must name a service principal" in \
        r.json()["message"], r.text


def check_text(r: requests.Response) -> str:
    assert r.status_code == 200, f"{r.status_code}: {r.text[:2000]}"
    return r.text
