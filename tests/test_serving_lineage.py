"""Lineage through serving, against a real server: a job's run reads a table version (an MLflow
dataset input) and logs two pyfunc models registered as versions 1 and 2 with the real `mlflow`
client; an endpoint serving the model (through an alias, then pinned) records `serves` edges as
it changes, keeping history (`ended_at` marks the versions it no longer serves). Upstream of the
endpoint reaches the model version, run, job and table version; downstream of the table version
reaches the endpoint; the endpoint is visible in lineage to whoever may query it. No replica is
started (min_replicas 0), so this stays cheap.
"""

from __future__ import annotations

import sys
import time
import uuid

import pytest
import requests

from conftest import point_mlflow_at, reset_mlflow_state
from jobs_client import JobsClient
from test_cli import cli
from test_serving import MODEL_CODE, create, error_of, ok

TY = "/api/trainyard/v1"
TABLE = "main.support.train"


@pytest.fixture(scope="module", params=["sqlite"])
def backend(request) -> str:
    return request.param



@pytest.fixture(scope="module")
def trained(server):
    """A job whose run read TABLE@4 and logged the models of versions 1 and 2; alias
    champion -> 1."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.data.delta_dataset_source import DeltaDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    jobs = JobsClient(server)
    job = jobs.submit({"name": "train-intent", "command": f"{sys.executable} -c pass",
                       "max_restarts": 0})
    run_id = jobs.wait_state(job["job_id"], "SUCCEEDED", timeout=120)["run_id"]
    name = f"intent-{uuid.uuid4().hex[:6]}"
    with pytest.MonkeyPatch.context() as mp:
        point_mlflow_at(server, mp)
        try:
            with mlflow.start_run(run_id=run_id):
                mlflow.log_input(MetaDataset(DeltaDatasetSource(delta_table_name=TABLE,
                                                                delta_table_version=4),
                                             name=TABLE, digest="4"), context="training")
                for k in (1, 10):
                    mlflow.pyfunc.log_model(name=f"model{k}", python_model=MODEL_CODE,
                                            model_config={"k": k},
                                            pip_requirements=["mlflow", "pandas"],
                                            registered_model_name=name)
            MlflowClient().set_registered_model_alias(name, "champion", 1)
        finally:
            reset_mlflow_state()
    return {"job": job["job_id"], "run": run_id, "model": name}


def lineage(session, server, expect: int = 200, **params) -> dict:
    r = session.get(server.api(f"{TY}/lineage"), params=params, timeout=30)
    assert r.status_code == expect, r.text
    return r.json()


def serves(admin, server, endpoint: str) -> dict[str, int]:
    """The endpoint's serves edges: model version id -> ended_at (0: serves it now)."""
    g = lineage(admin, server, object=f"endpoint:{endpoint}", direction="upstream", depth=1)
    return {e["from"]: e["ended_at"] for e in g["edges"] if e["kind"] == "serves"}


def wait_for_serves(admin, server, endpoint: str, want_open: set[str], timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        got = serves(admin, server, endpoint)
        if {k for k, v in got.items() if v == 0} == want_open:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{endpoint} serves {got}, want open {want_open}")
        time.sleep(0.1)  # polling the control loop's alias check, bounded by the deadline


def test_endpoint_lineage_end_to_end(server, admin, trained):
    model = trained["model"]
    v1, v2 = f"model_version:{model}@1", f"model_version:{model}@2"
    run, job, table = f"run:{trained['run']}", f"job:{trained['job']}", f"table:{TABLE}@4"
    name = f"bot-{uuid.uuid4().hex[:6]}"
    create(admin, server, name=name, served_entities=[{"model": model, "alias": "champion"}],
           min_replicas=0, scale_to_zero_seconds=60)
    endpoint = f"endpoint:{name}"
    assert serves(admin, server, name) == {v1: 0}

    # Upstream of the endpoint: the model version, its run, the run's job and table version.
    g = lineage(admin, server, object=endpoint, direction="upstream")
    assert {n["id"] for n in g["nodes"]} == {endpoint, v1, run, job, table}
    edges = {(e["from"], e["kind"], e["to"]) for e in g["edges"]}
    assert {(v1, "serves", endpoint), (run, "produced", v1), (job, "logged_to", run),
            (table, "read", run)} <= edges
    # Downstream of the table version reaches the endpoint.
    g = lineage(admin, server, object=table, direction="downstream")
    assert endpoint in {n["id"] for n in g["nodes"]}

    # The alias moves: the endpoint rolls to v2; v1 keeps its edge, ended.
    from mlflow import MlflowClient
    with pytest.MonkeyPatch.context() as mp:
        point_mlflow_at(server, mp)
        try:
            MlflowClient().set_registered_model_alias(model, "champion", 2)
        finally:
            reset_mlflow_state()
    got = wait_for_serves(admin, server, name, {v2})
    assert got[v1] > 0
    # Pinned back to version 1 by an update: v1 serves again, v2 is history.
    ok(admin.patch(server.api(f"{TY}/endpoints/{name}"),
                   json={"served_entities": [{"model": model, "version": 1}]}))
    got = serves(admin, server, name)
    assert got[v1] == 0 and got[v2] > 0, got
    out = cli(server, "lineage", "upstream", endpoint, "--depth", "1").stdout
    assert f"serves <- {v1}" in out and f"serves (until " in out, out

    # Who may see the endpoint in lineage: whoever may query it.
    user = f"eve{uuid.uuid4().hex[:6]}"
    eve = server.session(server.create_user(user))
    error_of(eve.get(server.api(f"{TY}/lineage"), params={"object": endpoint}), 403)
    ok(admin.post(server.api(f"{TY}/endpoints/{name}/permissions"),
                  json={"principal": user, "privilege": "QUERY"}))
    g = lineage(eve, server, object=endpoint, direction="upstream", depth=1)
    assert g["root"] == endpoint and not g["nodes"][0]["redacted"]

    # Deleted: it serves nothing now; the history stays, for admins.
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
    got = serves(admin, server, name)
    assert set(got) == {v1, v2} and all(v > 0 for v in got.values()), got
