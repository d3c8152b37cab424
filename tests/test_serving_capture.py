"""Request capture into a catalog table ("inference tables") and request-id lineage, end to
end through a real server.

A real job logs to its MLflow run a dataset input that names a table version (as in
test_lineage.py) and the Hugging Face directory the endpoint serves (through the stand-in
engine, tests/workloads/fake_serve_model.py, which speaks trainyard-serve-model's replica
contract). The endpoint captures into `<catalog>.<schema>.support_requests`; requests go
through the `openai` client; the captured rows are read back with delta-rs (`deltalake`) at
the table's storage location and through the tables read API; the table version's lineage
shows the endpoint that wrote it; and a response's id leads, through
GET /api/trainyard/v1/lineage/requests/{id} and `trainyard lineage request`, to the endpoint,
the model version, its run, its job and the training table version.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from conftest import TRAINYARD_BIN, module_server, point_mlflow_at, reset_mlflow_state
from test_serving import error_of, ok  # the serving tests' response checks
from jobs_client import JobsClient

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
TY = "/api/trainyard/v1"
UC = "/api/2.1/unity-catalog"
FAKE_ENGINE = str(Path(__file__).resolve().parent / "workloads" / "fake_serve_model.py")
TRAIN_TABLE = "main.support.train"
TIMEOUT_S = 120

WORKLOAD = f"""
import json, pathlib, tempfile
import mlflow
from mlflow.data.delta_dataset_source import DeltaDatasetSource
from mlflow.data.meta_dataset import MetaDataset

with mlflow.start_run():  # MLFLOW_RUN_ID: the job's run
    mlflow.log_input(MetaDataset(DeltaDatasetSource(delta_table_name="{TRAIN_TABLE}",
                                                    delta_table_version=4),
                                 name="{TRAIN_TABLE}", digest="4"), context="training")
    hf = pathlib.Path(tempfile.mkdtemp())
    (hf / "config.json").write_text(json.dumps({{"model_type": "gpt2"}}))
    mlflow.log_artifacts(str(hf), "model")
print("workload done")
"""



def wait_for(predicate, what: str, timeout: float = TIMEOUT_S, state=None):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}"
                        + (f" (last seen: {state})" if state is not None else ""))
        time.sleep(0.1)  # polling interval, bounded by the deadline


@pytest.fixture(scope="module")
def server(backend, tmp_path_factory, request):
    # Batches of captured rows go to the table after 300 ms (or 500 rows).
    yield from module_server(tmp_path_factory, backend, request, "capture",
                             ["--local-cpus", "64", "--serving-engine", FAKE_ENGINE,
                              "--serving-cold-start-s", "180", "--capture-flush-ms", "300"])



@pytest.fixture(scope="module")
def trained(server, tmp_path_factory):
    """A job that trained on main.support.train@4; its run's model registered as version 1."""
    script = tmp_path_factory.mktemp("capture") / "train.py"
    script.write_text(WORKLOAD)
    jobs = JobsClient(server)
    job = jobs.submit({"name": "finetune-intent", "command": f"{PY} {script}",
                       "max_restarts": 0, "env": {"PYTHONPATH": str(REPO / "python")}})
    done = jobs.wait_state(job["job_id"], "SUCCEEDED", timeout=120)
    run_id = done["run_id"]
    from mlflow import MlflowClient

    with pytest.MonkeyPatch.context() as mp:
        point_mlflow_at(server, mp)
        client = MlflowClient()
        name = f"intent-{uuid.uuid4().hex[:6]}"
        client.create_registered_model(name)
        mv = client.create_model_version(name, source=f"runs:/{run_id}/model", run_id=run_id)
        reset_mlflow_state()
    return {"job": job["job_id"], "run": run_id, "model": name, "version": int(mv.version)}


@pytest.fixture(scope="module")
def schema(server, admin):
    cat, sch = f"cat_{uuid.uuid4().hex[:6]}", f"serving_{uuid.uuid4().hex[:6]}"
    ok(admin.post(server.api(f"{UC}/catalogs"), json={"name": cat}))
    ok(admin.post(server.api(f"{UC}/schemas"), json={"name": sch, "catalog_name": cat}))
    return f"{cat}.{sch}"


def cli(server, *args, token=None):
    return subprocess.run([str(TRAINYARD_BIN), *args, "--url", server.url,
                           "--token", token or server.token],
                          capture_output=True, text=True, timeout=60)


def test_capture_table_read_back_and_request_lineage(server, admin, trained, schema, tmp_path):
    from deltalake import DeltaTable
    from openai import OpenAI

    table = f"{schema}.support_requests"
    name = f"intent-{uuid.uuid4().hex[:6]}"
    created = ok(admin.post(server.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": trained["model"], "version": 1}],
        "min_replicas": 0, "scale_to_zero_seconds": 60, "capture": {"table": table}}))
    assert created["capture"]["table"] == table
    assert created["capture"]["table_captured"] == 0

    client = OpenAI(base_url=f"{server.url}/serving-endpoints", api_key=server.token,
                    max_retries=0, timeout=180)
    tickets = ["my card was charged twice", "how do I reset my password", "cancel my order"]
    ids = []
    for ticket in tickets:
        raw = client.chat.completions.with_raw_response.create(
            model=name, messages=[{"role": "user", "content": ticket}])
        reply = raw.parse()
        assert reply.choices[0].message.content == ticket
        # The OpenAI id carries the request id the router put in x-request-id.
        assert reply.id == "chatcmpl-" + raw.headers["x-request-id"]
        ids.append(raw.headers["x-request-id"])
    streamed = "".join(c.choices[0].text for c in
                       client.completions.create(model=name, prompt="a b c", stream=True))
    assert streamed == "a b c"

    last = {}

    def captured():
        last.update(ok(admin.get(server.api(f"{TY}/endpoints/{name}")))["capture"])
        return dict(last) if last["table_captured"] >= 4 else None

    state = wait_for(captured, "4 rows in the capture table", timeout=60, state=last)
    assert state["table_dropped"] == 0 and state["table_pending"] == 0
    assert "table_error" not in state
    version = state["table_version"]

    # delta-rs reads the table at its storage location.
    location = ok(admin.get(server.api(f"{TY}/tables/{table}")))["storage_location"]
    rows = DeltaTable(location).to_pyarrow_table().to_pylist()
    assert len(rows) == 4
    by_id = {r["request_id"]: r for r in rows}
    assert set(ids) <= set(by_id)
    first = by_id[ids[0]]
    assert first["endpoint"] == name and first["model"] == trained["model"]
    assert first["model_version"] == 1 and first["status"] == 200
    assert first["path"] == "/v1/chat/completions" and first["user"] == "admin"
    assert json.loads(first["request"])["messages"][0]["content"] == tickets[0]
    assert json.loads(first["response"])["choices"][0]["message"]["content"] == tickets[0]
    assert first["total_tokens"] == 2 * len(tickets[0].split())
    assert first["request_truncated"] is False and first["latency_ms"] >= 0
    stream_row = next(r for r in rows if r["path"] == "/v1/completions")
    assert "data:" in stream_row["response"] and stream_row["completion_tokens"] == 3

    # The tables read API serves the same rows, and the next fine-tune can pin this version.
    r = admin.get(server.api(f"{TY}/tables/{table}/rows"),
                  params={"version": version, "columns": "request_id,total_tokens"})
    assert r.status_code == 200, r.text
    api_rows = [json.loads(line) for line in r.text.splitlines() if line]
    assert {x["request_id"] for x in api_rows} == set(by_id)

    # The next training set starts here: a prep pipeline takes the capture table at that
    # version as its source (dedup on the request text) and writes a catalog table from it.
    spec = tmp_path / "capture-prep.yaml"
    spec.write_text(f"""name: capture-prep
source: {{table: {table}, version: {version}, id_column: request_id}}
text_column: request
steps:
  - dedup_exact: {{}}
outputs:
  rows: {schema}.next_train
  dropped: {schema}.next_train_dropped
""")
    out = cli(server, "prep", str(spec))
    assert out.returncode == 0, out.stdout + out.stderr
    location = ok(admin.get(server.api(f"{TY}/tables/{schema}.next_train")))["storage_location"]
    next_rows = DeltaTable(location).to_pyarrow_table().to_pylist()
    assert sorted(r["request_id"] for r in next_rows) == sorted(by_id)

    # The table version's lineage: the endpoint wrote it.
    g = ok(admin.get(server.api(f"{TY}/lineage"),
                     params={"object": f"table:{table}@{version}", "direction": "upstream"}))
    assert (f"endpoint:{name}", "wrote", f"table:{table}@{version}") in \
        {(e["from"], e["kind"], e["to"]) for e in g["edges"]}

    # A response's id leads to the endpoint, the model version, its run, job and data.
    for key in (ids[1], "chatcmpl-" + ids[1]):
        lin = ok(admin.get(server.api(f"{TY}/lineage/requests/{key}")))
        assert lin["request_id"] == ids[1]
        assert lin["endpoint"] == name and lin["served_entity"] == f"{trained['model']}-1"
        assert lin["model"] == trained["model"] and lin["model_version"] == 1
        assert lin["run_id"] == trained["run"] and lin["job_id"] == trained["job"]
        assert lin["training_tables"] == [{"table": TRAIN_TABLE, "version": 4}]
        assert lin["upstream_tables"] == [{"table": TRAIN_TABLE, "version": 4}]
        mv = f"model_version:{trained['model']}@1"
        assert lin["lineage"]["root"] == mv
        assert (f"run:{trained['run']}", "produced", mv) in \
            {(e["from"], e["kind"], e["to"]) for e in lin["lineage"]["edges"]}
        assert lin["capture"]["table"] == table and lin["capture"]["version"] >= 1
        assert lin["status"] == 200
    out = cli(server, "lineage", "request", "chatcmpl-" + ids[1])
    assert out.returncode == 0, out.stderr
    assert trained["job"] in out.stdout and f"{TRAIN_TABLE}@4" in out.stdout
    assert f"{trained['model']} v1" in out.stdout and table in out.stdout

    # Who may trace: MANAGE (or admin). QUERY alone is 403; no grant at all 404.
    bob_name, carol_name = f"bob{uuid.uuid4().hex[:6]}", f"carol{uuid.uuid4().hex[:6]}"
    bob, carol = server.create_user(bob_name), server.create_user(carol_name)
    ok(admin.post(server.api(f"{TY}/endpoints/{name}/permissions"),
                  json={"principal": bob_name, "privilege": "QUERY"}))
    url = server.api(f"{TY}/lineage/requests/{ids[1]}")
    error_of(requests.get(url, headers={"Authorization": f"Bearer {bob}"}), 403, "MANAGE")
    error_of(requests.get(url, headers={"Authorization": f"Bearer {carol}"}), 404)
    assert requests.get(url).status_code == 401
    ok(admin.post(server.api(f"{TY}/endpoints/{name}/permissions"),
                  json={"principal": bob_name, "privilege": "MANAGE"}))
    assert ok(requests.get(url, headers={"Authorization": f"Bearer {bob}"}))["endpoint"] == name
    error_of(admin.get(server.api(f"{TY}/lineage/requests/{'0' * 32}")), 404, "not captured")
    error_of(admin.get(server.api(f"{TY}/lineage/requests/not-an-id")), 400, "request_id")

    # Stopping capture into the table: the JSON lines go on, the table stays as it was.
    updated = ok(admin.patch(server.api(f"{TY}/endpoints/{name}"), json={"capture": None}))
    assert "table" not in updated["capture"]
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_capture_table_is_checked_at_create_and_update(server, admin, trained, schema):
    base = {"served_entities": [{"model": trained["model"], "version": 1}], "min_replicas": 0}
    name = f"chk-{uuid.uuid4().hex[:6]}"
    error_of(admin.post(server.api(f"{TY}/endpoints"),
                        json={**base, "name": name, "capture": {"table": "two.levels"}}),
             400, "capture.table")
    error_of(admin.post(server.api(f"{TY}/endpoints"),
                        json={**base, "name": name, "capture": {"tbl": "a.b.c"}}),
             400, "capture.tbl")
    error_of(admin.post(server.api(f"{TY}/endpoints"),
                        json={**base, "name": name, "capture": {"table": "nocat.nosch.t"}}),
             400, "capture.table")
    # A user without CREATE TABLE on the schema may not capture into it.
    user = f"dora{uuid.uuid4().hex[:6]}"
    token = server.create_user(user)
    dora = server.session(token)
    ok(admin.post(server.api(f"{TY}/endpoints"), json={**base, "name": name}))
    ok(admin.post(server.api(f"{TY}/endpoints/{name}/permissions"),
                  json={"principal": user, "privilege": "MANAGE"}))
    # Dora may change the endpoint; its capture table is written as its owner (admin).
    updated = ok(dora.patch(server.api(f"{TY}/endpoints/{name}"),
                            json={"capture": {"table": f"{schema}.dora_requests"}}))
    assert updated["capture"]["table"] == f"{schema}.dora_requests"
    # Dora may read the model, but not create tables in the schema.
    ok(admin.post(server.api(f"{TY}/grants/registered_model"),
                  json={"id": trained["model"], "user": user, "privilege": "EDIT"}))
    out = cli(server, "endpoints", "create", f"{name}-cli", "--model", trained["model"],
              "--version", "1", "--min-replicas", "0", "--capture-table", f"{schema}.t",
              token=token)
    assert out.returncode != 0 and "capture.table" in out.stderr, out.stderr
    out = cli(server, "endpoints", "show", name)
    assert out.returncode == 0 and f"{schema}.dora_requests (0 captured" in out.stdout, out.stdout
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
