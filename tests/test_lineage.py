"""Lineage recorded by the real components and queried through the API and the CLI.

A real job (a child process of the server's local executor) logs to its MLflow run with the
unmodified `mlflow` client, logs a dataset input whose source is a Trainyard table at a Delta
version (MLflow's own DeltaDatasetSource; the table itself need not exist yet) and a plain
file dataset (which is not lineage), and saves a checkpoint through the Python SDK. A model
version is registered from the run with the `mlflow` client. Then lineage answers: upstream of
the model version is the run, the job and table@version; downstream of the table version is
the run and the model version; bad queries are 400 naming the field, unknown objects 404.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TRAINYARD_BIN, point_mlflow_at, reset_mlflow_state
from jobs_client import JobsClient

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
API = "/api/trainyard/v1"
TABLE = "main.support.train"

WORKLOAD = f"""
import numpy as np
import mlflow
from mlflow.data.delta_dataset_source import DeltaDatasetSource
from mlflow.data.meta_dataset import MetaDataset
from mlflow.data.http_dataset_source import HTTPDatasetSource
import trainyard.checkpoint

with mlflow.start_run():  # MLFLOW_RUN_ID: the job's run
    table = MetaDataset(DeltaDatasetSource(delta_table_name="{TABLE}", delta_table_version=7),
                        name="{TABLE}", digest="7")
    mlflow.log_input(table, context="training")
    local = MetaDataset(HTTPDatasetSource("https://example.com/eval.jsonl"), name="eval",
                        digest="abc")
    mlflow.log_input(local, context="eval")
    mlflow.log_metric("loss", 0.5)
trainyard.checkpoint.save({{"w": np.zeros(4, dtype=np.float32)}}, step=3)
print("workload done")
"""


def lineage(server, expect: int = 200, **params) -> dict:
    with server.session() as s:
        r = s.get(server.api(f"{API}/lineage"), params=params, timeout=30)
    assert r.status_code == expect, r.text
    return r.json()


def ids(graph: dict) -> set[str]:
    return {n["id"] for n in graph["nodes"]}


def edges(graph: dict) -> set[tuple[str, str, str]]:
    return {(e["from"], e["kind"], e["to"]) for e in graph["edges"]}


@pytest.fixture(scope="module")
def trained(server, tmp_path_factory):
    """One job that trained on table@7 and a model version registered from its run."""
    script = tmp_path_factory.mktemp("lineage") / "train.py"
    script.write_text(WORKLOAD)
    jobs = JobsClient(server)
    job = jobs.submit({"name": "finetune", "command": f"{PY} {script}",
                       "max_restarts": 0, "env": {"PYTHONPATH": str(REPO / "python")}})
    done = jobs.wait_state(job["job_id"], "SUCCEEDED", timeout=120)
    assert "workload done" in jobs.logs(job["job_id"])
    run_id = done["run_id"]

    from mlflow import MlflowClient

    with pytest.MonkeyPatch.context() as mp:
        point_mlflow_at(server, mp)
        client = MlflowClient()
        name = f"intent_model_{job['job_id'][2:8]}"
        client.create_registered_model(name)
        mv = client.create_model_version(name, source=f"runs:/{run_id}/model", run_id=run_id)
        reset_mlflow_state()
    return {"job": job["job_id"], "run": run_id, "model": name, "version": int(mv.version)}


def test_upstream_of_the_model_version_is_run_job_and_table_version(server, trained):
    mv = f"model_version:{trained['model']}@{trained['version']}"
    run = f"run:{trained['run']}"
    job = f"job:{trained['job']}"
    table = f"table:{TABLE}@7"
    g = lineage(server, object=mv, direction="upstream")
    assert g["root"] == mv and g["direction"] == "upstream" and g["truncated"] is False
    assert ids(g) == {mv, run, job, table}
    assert edges(g) == {(run, "produced", mv), (job, "logged_to", run), (table, "read", run)}
    nodes = {n["id"]: n for n in g["nodes"]}
    assert nodes[table]["type"] == "table" and nodes[table]["version"] == 7
    assert nodes[table]["key"] == TABLE
    assert nodes[mv]["depth"] == 0 and nodes[run]["depth"] == 1 and nodes[job]["depth"] == 2
    assert all(not n["redacted"] for n in g["nodes"])
    assert all(e["recorded_by"] == "admin" for e in g["edges"])
    # The table was read in the job's run: the edge carries both as its context.
    read = next(e for e in g["edges"] if e["kind"] == "read")
    assert read["job_id"] == trained["job"] and read["run_id"] == trained["run"]
    # The file dataset is not a table: no lineage node for it.
    assert not any("eval" in i for i in ids(g))
    # Depth 1 stops at the run and says there is more.
    g1 = lineage(server, object=mv, direction="upstream", depth=1)
    assert ids(g1) == {mv, run} and g1["truncated"] is True


def test_downstream_of_the_table_version_reaches_the_model_version(server, trained):
    mv = f"model_version:{trained['model']}@{trained['version']}"
    g = lineage(server, object=f"table:{TABLE}@7", direction="downstream")
    assert ids(g) == {f"table:{TABLE}@7", f"run:{trained['run']}", mv}
    # Both directions from the job: nothing upstream (the run read the table); the run, the
    # model version and the job's checkpoint downstream.
    g = lineage(server, object=f"job:{trained['job']}")
    assert g["direction"] == "both"
    assert ids(g) == {f"job:{trained['job']}", f"run:{trained['run']}", mv,
                      f"checkpoint:{trained['job']}@3"}
    assert (f"job:{trained['job']}", "checkpointed", f"checkpoint:{trained['job']}@3") in edges(g)


def test_cli_prints_the_tree(server, trained):
    mv = f"model_version:{trained['model']}@{trained['version']}"
    out = subprocess.run([str(TRAINYARD_BIN), "lineage", "upstream", mv, "--url", server.url,
                          "--token", server.token], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"upstream of {mv}")
    assert any(f"produced <- run:{trained['run']}" in line for line in lines), out.stdout
    assert any(f"logged_to <- job:{trained['job']}" in line for line in lines), out.stdout
    assert any(f"read <- table:{TABLE}@7" in line for line in lines), out.stdout
    out = subprocess.run([str(TRAINYARD_BIN), "lineage", "downstream", f"table:{TABLE}@7",
                          "--depth", "1", "--json", "--url", server.url, "--token", server.token],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["truncated"] is True
    bad = subprocess.run([str(TRAINYARD_BIN), "lineage", "upstream", "table:main.support.train",
                          "--url", server.url, "--token", server.token],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "needs a version" in bad.stderr


@pytest.mark.parametrize("params, field", [
    ({"object": "bogus:x"}, "object"),
    ({"object": "table:main.support.train"}, "version"),
    ({"object": "table:not-three-levels@1"}, "catalog.schema.table"),
    ({"object": "model_version:m@zero"}, "object"),
    ({"object": "run:abc", "depth": "0"}, "depth"),
    ({"object": "run:abc", "depth": "101"}, "depth"),
    ({"object": "run:abc", "depth": "deep"}, "depth"),
    ({"object": "run:abc", "direction": "sideways"}, "direction"),
    ({"object": "run:abc", "max_nodes": "0"}, "max_nodes"),
    ({"object": "run:abc", "kinds": "read,teleported"}, "kinds"),
    ({}, "object"),
])
def test_bad_queries_are_400_naming_the_field(server, params, field):
    body = lineage(server, expect=400, **params)
    assert body["error_code"] == "INVALID_PARAMETER_VALUE"
    assert field in body["message"]


def test_unknown_objects_are_404(server, trained):
    for obj in ["run:0000000000000000000000000000dead", f"table:{TABLE}@8", "job:j-nosuchjob",
                f"model_version:{trained['model']}@99"]:
        body = lineage(server, expect=404, object=obj)
        assert body["error_code"] == "RESOURCE_DOES_NOT_EXIST"


def test_unauthenticated_callers_get_401(server):
    import requests

    r = requests.get(server.api(f"{API}/lineage"), params={"object": f"table:{TABLE}@7"},
                     timeout=30)
    assert r.status_code == 401
