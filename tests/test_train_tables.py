"""The native trainer reading catalog tables (`data.train: {table: ..., version: N}`) through
the server's tables API, against a real server, real jobs and the real `mlflow` client.

One job trains from a pinned table version while later imports make newer versions: its
first attempt crashes, the second resumes and must read the very rows the first read (the
validation table, named without a version, was pinned to the latest at the first start).
The run's MLflow dataset inputs, its params and the lineage API then name exactly those
versions. Bad table sources (a version or table that does not exist, no SELECT, no server,
a column of the wrong type) fail with errors that name the table and say what to do.

The model is the tiny random-init Llama of tests/test_train.py; the rows come from the
quickstart's support-ticket generator, renamed to other columns to exercise the mapping.
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

from conftest import TRAINYARD_BIN, point_mlflow_at, reset_mlflow_state
from test_jobs import Jobs, job
from test_train import FIXTURES, QUICKSTART, clean_env, succeeded, write_config

UC = "/api/2.1/unity-catalog"
TABLES = "/api/trainyard/v1/tables"
COLUMNS = {"message": "text", "label": "intent"}


@pytest.fixture(scope="module", params=["sqlite"])
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def tickets(tmp_path_factory) -> dict[str, list[dict]]:
    """The generator's train and val rows as {id, text, intent} (not the trainer's names)."""
    out = tmp_path_factory.mktemp("tickets")
    subprocess.run([sys.executable, str(QUICKSTART / "make_support_tickets.py"), "--out",
                    str(out), "--train", "240", "--val", "32", "--test", "8", "--seed", "7"],
                   check=True, capture_output=True)
    rows = {}
    for split in ("train", "val"):
        lines = (out / f"{split}.jsonl").read_text().splitlines()
        rows[split] = [{"id": i, "text": r["message"], "intent": r["label"]}
                       for i, r in enumerate(json.loads(line) for line in lines if line.strip())]
    return rows


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def make_schema(server) -> str:
    cat, sch = f"cat_{uuid.uuid4().hex[:8]}", "support"
    h = auth(server.token)
    r = requests.post(server.api(f"{UC}/catalogs"), json={"name": cat}, headers=h, timeout=30)
    assert r.status_code == 200, r.text
    r = requests.post(server.api(f"{UC}/schemas"), json={"name": sch, "catalog_name": cat},
                      headers=h, timeout=30)
    assert r.status_code == 200, r.text
    return f"{cat}.{sch}"


def import_rows(server, table: str, rows: list[dict], mode: str = "append") -> int:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    r = requests.post(server.api(f"{TABLES}/{table}/import"),
                      params={"format": "jsonl", "mode": mode}, data=body,
                      headers=auth(server.token), timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["version"]


def table_config(path: Path, out: Path, **data) -> Path:
    """tests/test_train.py's small config with `data` merged in (None removes a key)."""
    over = {k: data.pop(k) for k in ("training",) if k in data}
    return write_config(path, Path("/unused"), out, data=data, **over)


def server_env(server, token: str | None = None) -> dict:
    env = clean_env()
    env["TRAINYARD_URL"] = server.url
    env["TRAINYARD_TOKEN"] = token or server.token
    return env


def wait_for_log(jobs: Jobs, job_id: str, text: str, attempt: int, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    # An attempt has a log only once it has started (the server answers 404 before).
    jobs.wait(job_id, lambda j: j["attempts"] >= attempt, f"attempt {attempt} started", timeout)
    while True:
        log = jobs.logs(job_id, attempt=attempt)
        if text in log:
            return log
        if time.monotonic() > deadline:
            pytest.fail(f"attempt {attempt} of {job_id} did not log {text!r} within "
                        f"{timeout}s:\n{log[-3000:]}")
        jobs.server.assert_alive()
        time.sleep(0.1)  # polling the log, bounded by the deadline


def test_a_job_reads_pinned_table_versions_and_records_them(server_factory, tmp_path, tickets,
                                                             monkeypatch):
    server = server_factory.new(["--local-cpus", "2"])
    jobs = Jobs(server)
    schema = make_schema(server)
    train_t, val_t = f"{schema}.train", f"{schema}.val"
    n = import_rows(server, train_t, tickets["train"])
    assert import_rows(server, val_t, tickets["val"]) == 1
    # A later import makes train version n+1 before the job starts; the job asks for n.
    assert import_rows(server, train_t, tickets["train"][:40]) == n + 1

    cfg = table_config(tmp_path / "job.yaml", tmp_path / "out",
                       train={"table": train_t, "version": n, "columns": COLUMNS},
                       validation={"table": val_t, "columns": COLUMNS})
    gate = tmp_path / "imported"
    # Attempt 1 crashes after 5 steps (its last checkpoint is step 3). Attempt 2 starts only
    # once the test has made newer versions of both tables, and must still read the old ones.
    crashy = jobs.submit(job(
        "tables",
        f'if [ "$TRAINYARD_ATTEMPT" = 1 ]; then exec {TRAINYARD_BIN} train {cfg} '
        f"--exit-after-steps 5; fi; "
        f"for i in $(seq 1200); do [ -e {gate} ] && break; sleep 0.1; done; "
        f"exec {TRAINYARD_BIN} train {cfg}",
        restart_backoff="200ms", env={"OMP_NUM_THREADS": "1"}))
    first = wait_for_log(jobs, crashy["job_id"], "data.validation:", attempt=1)
    assert f"data.validation: {val_t}@latest is {val_t}@1" in first, first
    assert import_rows(server, val_t, tickets["val"][:4]) == 2
    assert import_rows(server, train_t, tickets["train"][:8]) == n + 2
    gate.touch()
    done = succeeded(jobs, crashy["job_id"])
    assert [a["state"] for a in done["attempt_list"]] == ["failed", "succeeded"]
    first = jobs.logs(crashy["job_id"], attempt=1)
    second = jobs.logs(crashy["job_id"], attempt=2)
    assert f"data.train: 240 rows of {train_t}@{n}" in first, first
    assert f"data.validation: 32 rows of {val_t}@1" in first, first
    assert f"data.validation: {val_t}@1, as the checkpoint being resumed read" in second, second
    assert f"data.validation: 32 rows of {val_t}@1" in second, second
    assert f"data.train: 240 rows of {train_t}@{n}" in second, second
    assert "resumed from trainyard-checkpoint://" in second

    # The run's dataset inputs, read with the unmodified mlflow client.
    point_mlflow_at(server, monkeypatch)
    import mlflow
    from mlflow import MlflowClient
    from mlflow.data.delta_dataset_source import DeltaDatasetSource

    run = MlflowClient().get_run(done["run_id"])
    inputs = {}
    for d in run.inputs.dataset_inputs:
        tags = {t.key: t.value for t in d.tags}
        inputs[d.dataset.name] = (d.dataset.digest, tags.get("mlflow.data.context"), d.dataset)
    assert set(inputs) == {train_t, val_t}, inputs
    assert inputs[train_t][:2] == (str(n), "training")
    assert inputs[val_t][:2] == ("1", "validation")
    source = mlflow.data.get_source(inputs[train_t][2])
    assert isinstance(source, DeltaDatasetSource)
    assert source.delta_table_name == train_t and source.delta_table_version == n
    assert json.loads(inputs[train_t][2].profile) == {"num_rows": 240}
    params = run.data.params
    assert params["data.train.table"] == train_t and params["data.train.version"] == str(n)
    assert params["data.validation.version"] == "1"
    assert params["data.train.columns"] == "label=intent,message=text"
    reset_mlflow_state()

    # Lineage: exactly the versions read are upstream of the run, the newer ones are not.
    s = server.session()
    r = s.get(server.api("/api/trainyard/v1/lineage"),
              params={"object": f"run:{done['run_id']}", "direction": "upstream"}, timeout=30)
    assert r.status_code == 200, r.text
    nodes = {node["id"] for node in r.json()["nodes"]}
    assert f"table:{train_t}@{n}" in nodes and f"table:{val_t}@1" in nodes, nodes
    assert not [x for x in nodes if x.startswith("table:") and
                x not in (f"table:{train_t}@{n}", f"table:{val_t}@1")], nodes
    edges = {(e["from"], e["kind"], e["to"]) for e in r.json()["edges"]}
    assert (f"table:{train_t}@{n}", "read", f"run:{done['run_id']}") in edges
    # And downstream of the table version: the run.
    r = s.get(server.api("/api/trainyard/v1/lineage"),
              params={"object": f"table:{train_t}@{n}", "direction": "downstream"}, timeout=30)
    assert r.status_code == 200, r.text
    assert f"run:{done['run_id']}" in {node["id"] for node in r.json()["nodes"]}


def test_bad_table_sources_fail_with_errors_that_name_the_table(server, tmp_path, tickets):
    schema = make_schema(server)
    table = f"{schema}.train"
    version = import_rows(server, table, tickets["train"][:40])

    def run(train: dict, env: dict | None = None, name: str = "c") -> subprocess.CompletedProcess:
        cfg = table_config(tmp_path / f"{name}.yaml", tmp_path / name, train=train,
                           validation=None, training={"max_steps": 1})
        return subprocess.run([str(TRAINYARD_BIN), "train", str(cfg)], capture_output=True,
                              text=True, env=env or server_env(server), timeout=300)

    r = run({"table": table, "version": version + 5, "columns": COLUMNS}, name="v")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"data.train: reading table {table}@{version + 5}: HTTP 404" in r.stderr, r.stderr
    assert f"version {version + 5} does not exist" in r.stderr
    assert f"trainyard tables history {table}" in r.stderr

    r = run({"table": f"{schema}.nope", "columns": COLUMNS}, name="t")
    assert r.returncode == 1 and f"{schema}.nope@latest: HTTP 404" in r.stderr, r.stderr

    bob = server.create_user(f"bob{uuid.uuid4().hex[:6]}")
    r = run({"table": table, "version": version, "columns": COLUMNS},
            env=server_env(server, bob), name="bob")
    assert r.returncode == 1 and "HTTP 403" in r.stderr, r.stderr
    assert f"grant SELECT ON TABLE {table}" in r.stderr

    r = run({"table": table, "columns": COLUMNS}, env=clean_env(), name="noserver")
    assert r.returncode == 1 and "set TRAINYARD_URL and TRAINYARD_TOKEN" in r.stderr, r.stderr

    # A label column that is not text: the row and the column are named.
    numbers = f"{schema}.numbered"
    v = import_rows(server, numbers, [{"text": "hello", "intent": 3}])
    r = run({"table": numbers, "columns": COLUMNS}, name="num")
    assert r.returncode == 1, r.stderr
    assert (f'data.train: {numbers}@{v} row 1: column "intent" (label) must be a string (got 3)'
            in r.stderr), r.stderr

    # A bad table source in the config is a config error (exit 2) with its line.
    r = run({"table": "support.train"}, name="cfg")
    assert r.returncode == 2 and "data.train.table must be a catalog table's full name" \
        in r.stderr, r.stderr


def test_a_standalone_run_reads_the_latest_version_and_names_it(server, tmp_path, tickets):
    schema = make_schema(server)
    table = f"{schema}.instructions"
    rows = [{"q": f"Say the colour number {i}.", "a": f"Colour {i % 5}.", "extra": i}
            for i in range(40)]
    v = import_rows(server, table, rows)
    cfg = table_config(tmp_path / "c.yaml", tmp_path / "out",
                       train={"table": table, "columns": {"instruction": "q", "response": "a"}},
                       validation=None, val_fraction=0.1, training={"max_steps": 2})
    r = subprocess.run([str(TRAINYARD_BIN), "train", str(cfg)], capture_output=True, text=True,
                       env=server_env(server), timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"data.train: {table}@latest is {table}@{v}" in r.stdout, r.stdout
    assert f"data.train: 40 rows of {table}@{v}" in r.stdout
    assert "36 training examples" in r.stdout and "4 validation" in r.stdout, r.stdout


def test_two_ranks_read_the_version_rank_0_settled(server_factory, tmp_path, tickets):
    server = server_factory.new(["--local-cpus", "2"])
    jobs = Jobs(server)
    schema = make_schema(server)
    table = f"{schema}.train"
    v = import_rows(server, table, tickets["train"][:64])
    cfg = table_config(tmp_path / "two.yaml", tmp_path / "two",
                       train={"table": table, "columns": COLUMNS}, validation=None,
                       val_fraction=0.125, training={"max_steps": 2, "micro_batch_size": 2})
    j = jobs.submit(job("two", f"{TRAINYARD_BIN} train {cfg}", env={"OMP_NUM_THREADS": "1"},
                        resources={"cpus_per_node": 2}, processes_per_node=2))
    done = succeeded(jobs, j["job_id"])
    rank0 = jobs.logs(j["job_id"], attempt=1, rank=0)
    assert "2 rank(s)" in rank0 and f"data.train: {table}@latest is {table}@{v}" in rank0, rank0
    # Rank 1 took rank 0's version and read the same rows (it logs nothing itself).
    assert "error" not in jobs.logs(j["job_id"], attempt=1, rank=1)
    run = server.session().get(server.api("/api/2.0/mlflow/runs/get"),
                               params={"run_id": done["run_id"]}, timeout=30).json()["run"]
    got = [(d["dataset"]["name"], d["dataset"]["digest"])
           for d in run["inputs"]["dataset_inputs"]]
    assert got == [(table, str(v))], got
