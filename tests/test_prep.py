"""`trainyard prep` (issue 18) against a real server: a JSONL file imported into a catalog
table with `trainyard tables import`, a pipeline reading it at a pinned version and writing
catalog tables through the tables API, the outputs read back with the real `deltalake` package
(from the tables' storage locations) and through the rows API; a user without MODIFY on the
output schema gets a clear error; a run killed once its first output exists, then rerun, leaves
the same outputs as an uninterrupted run, with no duplicates."""
from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests
from deltalake import DeltaTable

from conftest import TRAINYARD_BIN
from test_cli import cli, parse_table

UC = "/api/2.1/unity-catalog"
TABLES = "/api/trainyard/v1/tables"


@pytest.fixture(scope="module", params=["sqlite"])
def backend(request) -> str:
    return request.param


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


def tickets(n: int) -> list[dict]:
    """Support tickets with planted junk: short rows, exact duplicates (after normalization),
    emails to redact; customers repeat so the split is grouped."""
    rows = []
    for i in range(n):
        text = (f"Order {i} arrived late and the box was damaged; customer {i % 17} asks for a "
                f"refund of {i * 3} dollars.")
        if i % 10 == 3:
            text = "too short"
        if i % 10 == 7:
            text = rows[i - 1]["text"].upper() + "!!"  # a duplicate of the row before
        if i % 25 == 5:
            text += f" Reply to user{i}@example.com please."
        rows.append({"id": i, "customer": f"c{i % 17}", "text": text})
    return rows


def write_spec(path: Path, source: str, outputs: dict, version: int | None = None) -> Path:
    out_lines = "\n".join(f"  {k}: {v}" for k, v in outputs.items())
    pin = f"\n  version: {version}" if version is not None else ""
    path.write_text(f"""name: support-prep
source:
  table: {source}{pin}
  id_column: id
steps:
  - filter: {{min_chars: 20}}
  - dedup_exact: {{}}
  - redact_pii: {{kinds: [email]}}
  - split: {{ratios: {{train: 0.8, val: 0.2}}, seed: 42, group_by: customer}}
outputs:
{out_lines}
""")
    return path


def prep(server, spec: Path, *args, token: str | None = None) -> subprocess.CompletedProcess:
    argv = [str(TRAINYARD_BIN), "prep", str(spec), "--url", server.url, "--token",
            token or server.token, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin"})


def describe(server, table: str) -> dict:
    r = requests.get(server.api(f"{TABLES}/{table}"), headers=auth(server.token), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def api_rows(server, table: str) -> list[dict]:
    """All rows through the rows API (JSON lines), following the page tokens."""
    out, token = [], None
    while True:
        params = {"format": "jsonl", "max_rows": 1000}
        if token:
            params["page_token"] = token
        r = requests.get(server.api(f"{TABLES}/{table}/rows"), params=params,
                         headers=auth(server.token), timeout=60)
        assert r.status_code == 200, r.text
        out += [json.loads(line) for line in r.text.splitlines() if line.strip()]
        token = r.headers.get("X-Trainyard-Next-Page-Token")
        if not token:
            return out


def delta_rows(server, table: str) -> list[dict]:
    """All rows read by delta-rs from the table's storage location."""
    location = describe(server, table)["storage_location"]
    return DeltaTable(location).to_pyarrow_table().to_pylist()


def import_source(server, tmp_path: Path, schema: str, n: int) -> tuple[str, list[dict]]:
    rows = tickets(n)
    data = tmp_path / "tickets.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = f"{schema}.tickets"
    cli(server, "tables", "import", table, str(data))
    return table, rows


def test_prep_reads_a_table_and_writes_tables_with_an_accounted_report(server, tmp_path):
    schema = make_schema(server)
    source, rows = import_source(server, tmp_path, schema, 300)
    version = describe(server, source)["version"]
    spec = write_spec(tmp_path / "pipeline.yaml", source,
                      {"train": f"{schema}.train", "val": f"{schema}.val",
                       "dropped": f"{schema}.dropped"})
    report_file = tmp_path / "report.json"
    r = prep(server, spec, "--threads", "2", "--report", str(report_file))
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^STEP\s+IN\s+OUT\s+DROPPED", r.stdout, re.M), r.stdout
    assert "1_dedup_exact" in r.stdout and "duplicate" in r.stdout

    report = json.loads(report_file.read_text())
    assert report["source"] == f"{source}@{version}" and report["source_version"] == version
    assert report["rows_in"] == 300
    assert report["rows_out"] + report["rows_dropped"] == 300
    rows_in = 300
    for step in report["steps"]:
        assert step["rows_in"] == rows_in, step
        assert step["rows_in"] == step["rows_out"] + step["rows_dropped"], step
        assert step["rows_dropped"] == sum(d["rows"] for d in step["dropped"].values()), step
        rows_in = step["rows_out"]
    assert report["steps"][0]["dropped"]["min_chars"]["rows"] == 30
    assert report["steps"][1]["dropped"]["duplicate"]["rows"] == 30
    redact = report["steps"][2]
    assert redact["changed"]["email"] == redact["rows_changed"] > 0

    outputs = {o["name"]: o for o in report["outputs"]}
    train, val, dropped = (delta_rows(server, f"{schema}.{n}") for n in ("train", "val", "dropped"))
    # delta-rs and the rows API see the same rows, as many as the report says.
    for name, got in (("train", train), ("val", val), ("dropped", dropped)):
        assert len(got) == outputs[name]["rows"], name
        api = api_rows(server, f"{schema}.{name}")
        assert sorted(x["doc_id"] for x in api) == sorted(x["doc_id"] for x in got), name
    assert len(train) + len(val) == report["rows_out"]
    assert len(dropped) == report["rows_dropped"]
    kept_ids = [x["id"] for x in train + val]
    assert len(set(kept_ids)) == len(kept_ids)
    # Exact dedup kept the first of each pair; the split never straddles a customer.
    assert all(i % 10 != 7 for i in kept_ids) and any(i % 10 == 6 for i in kept_ids)
    assert not {x["customer"] for x in train} & {x["customer"] for x in val}
    assert not any("@example.com" in x["text"] for x in train + val)
    assert {(x["step"], x["reason"]) for x in dropped} == {("0_filter", "min_chars"),
                                                          ("1_dedup_exact", "duplicate")}
    # Each duplicate names the row kept in its place; other drops name none.
    kept_doc_ids = {x["doc_id"] for x in train + val}
    for x in dropped:
        if x["reason"] == "duplicate":
            assert x["duplicate_of"] in kept_doc_ids, x
        else:
            assert x["duplicate_of"] is None, x

    # Every commit prep made names the pipeline and its version (the spec's SHA-256), as
    # Delta's commitInfo.userMetadata: delta-rs, the history API and the CLI show it.
    meta = json.dumps({"trainyard.prep.pipeline": "support-prep",
                       "trainyard.prep.version": report["version"]}, separators=(",", ":"))
    for name in ("train", "val", "dropped"):
        table = f"{schema}.{name}"
        written = [h for h in DeltaTable(describe(server, table)["storage_location"]).history()
                   if h["operation"] != "CREATE TABLE"]
        assert written and all(h.get("userMetadata") == meta for h in written), (name, written)
        r = requests.get(server.api(f"{TABLES}/{table}/history"), headers=auth(server.token),
                         timeout=30)
        assert r.status_code == 200, r.text
        api = [h for h in r.json()["history"] if h["operation"] != "CREATE TABLE"]
        assert [h["user_metadata"] for h in api] == [meta] * len(written), name
    _, hist = parse_table(cli(server, "tables", "history", f"{schema}.train").stdout, "VERSION")
    assert hist[0]["USER METADATA"].startswith(
        f"pipeline=support-prep version={report['version'][:12]}"), hist[0]
    assert hist[-1]["OPERATION"] == "CREATE TABLE" and not hist[-1].get("USER METADATA")


def test_the_import_apis_user_metadata_is_checked(server, tmp_path):
    schema = make_schema(server)
    url = server.api(f"{TABLES}/{schema}.notes/import")
    body = b'{"id": 1}\n'
    for value, error in (("\udcff", "user_metadata: must be UTF-8 text"),
                         ("x" * 4097, "user_metadata: at most 4096 bytes (got 4097)")):
        q = "format=jsonl&user_metadata=" + ("%FF" if value == "\udcff" else value)
        r = requests.post(f"{url}?{q}", data=body, headers=auth(server.token), timeout=30)
        assert r.status_code == 400 and error in r.text, r.text
    r = requests.post(url, params={"format": "jsonl", "user_metadata": "nightly ✓"}, data=body,
                      headers=auth(server.token), timeout=30)
    assert r.status_code == 200, r.text
    location = describe(server, f"{schema}.notes")["storage_location"]
    assert DeltaTable(location).history()[0]["userMetadata"] == "nightly ✓"


def reader(server, schema: str) -> str:
    """A new user who may read the schema's catalog (USE CATALOG, USE SCHEMA, SELECT) but not
    write to it; returns their token."""
    bob = f"bob{uuid.uuid4().hex[:6]}"
    token = server.create_user(bob)
    cat = schema.split(".")[0]
    r = requests.patch(server.api(f"{UC}/permissions/catalog/{cat}"),
                       headers=auth(server.token),
                       json={"changes": [{"principal": bob,
                                          "add": ["USE CATALOG", "USE SCHEMA", "SELECT"]}]},
                       timeout=30)
    assert r.status_code == 200, r.text
    return token


def test_a_user_without_modify_on_the_output_schema_gets_a_clear_error(server, tmp_path):
    schema = make_schema(server)
    source, _ = import_source(server, tmp_path, schema, 40)
    bob_token = reader(server, schema)
    spec = write_spec(tmp_path / "pipeline.yaml", source,
                      {"train": f"{schema}.bob_train", "val": f"{schema}.bob_val"})
    r = prep(server, spec, token=bob_token)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"writing {schema}.bob_" in r.stderr and "HTTP 403" in r.stderr, r.stderr
    assert "writing needs MODIFY on the table" in r.stderr, r.stderr
    # Reading worked: the error is about the output, not the source.
    assert "reading" not in r.stderr, r.stderr


def test_a_missing_grant_on_an_output_table_fails_before_any_row_is_read(server, tmp_path):
    """The native engine asks the import API (dry_run) before its passes: the second source
    file is not JSON, so an engine that read the rows first would fail on it instead."""
    schema = make_schema(server)
    bob = f"bob{uuid.uuid4().hex[:6]}"
    bob_token = server.create_user(bob)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tickets(20)))
    (tmp_path / "b.jsonl").write_text("this is not json\n")
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(f"""name: early-check
source: {{files: [a.jsonl, b.jsonl], id_column: id}}
steps:
  - filter: {{min_chars: 20}}
outputs:
  rows: {schema}.early_rows
""")
    r = prep(server, spec, token=bob_token)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"writing {schema}.early_rows" in r.stderr and "HTTP 403" in r.stderr, r.stderr
    assert "writing needs MODIFY on the table" in r.stderr, r.stderr
    assert "b.jsonl" not in r.stderr, r.stderr
    # With the grant the same spec gets as far as the broken file: the check let it pass.
    r = prep(server, spec)
    assert r.returncode == 1 and "b.jsonl" in r.stderr, r.stdout + r.stderr
    r = requests.get(server.api(f"{TABLES}/{schema}.early_rows"), headers=auth(server.token),
                     timeout=30)
    assert r.status_code == 404, r.text


def test_table_import_dry_run_checks_like_an_import_and_writes_nothing(server, tmp_path):
    schema = make_schema(server)
    source, _ = import_source(server, tmp_path, schema, 20)
    version = describe(server, source)["version"]
    bob_token = reader(server, schema)
    body = b'{"id": 1, "customer": "c1", "text": "a ticket"}\n'
    for table in (source, f"{schema}.new_table"):
        url = server.api(f"{TABLES}/{table}/import")
        dry = requests.post(url, params={"dry_run": "true"}, headers=auth(bob_token), timeout=30)
        real = requests.post(url, params={"format": "jsonl"}, data=body, headers=auth(bob_token),
                             timeout=30)
        # The same refusal as the import itself.
        assert dry.status_code == real.status_code == 403, (dry.text, real.text)
        assert dry.json()["message"] == real.json()["message"], (dry.text, real.text)
    # The owner may: an existing table is not created, a new one would be; nothing is written.
    url = server.api(f"{TABLES}/{source}/import")
    r = requests.post(url, params={"dry_run": "true", "mode": "overwrite"},
                      headers=auth(server.token), timeout=30)
    assert r.status_code == 200 and r.json() == {"dry_run": True, "created": False}, r.text
    assert describe(server, source)["version"] == version
    r = requests.post(server.api(f"{TABLES}/{schema}.new_table/import"),
                      params={"dry_run": "true"}, headers=auth(server.token), timeout=30)
    assert r.status_code == 200 and r.json() == {"dry_run": True, "created": True}, r.text
    r = requests.get(server.api(f"{TABLES}/{schema}.new_table"), headers=auth(server.token),
                     timeout=30)
    assert r.status_code == 404, r.text
    r = requests.post(url, params={"dry_run": "yes"}, headers=auth(server.token), timeout=30)
    assert r.status_code == 400 and "dry_run" in r.json()["message"], r.text


def test_a_run_killed_midway_then_rerun_leaves_the_same_outputs(server, tmp_path):
    schema = make_schema(server)
    source, _ = import_source(server, tmp_path, schema, 3000)
    # The reference: one uninterrupted run into tables of its own.
    ref = write_spec(tmp_path / "ref.yaml", source,
                     {"train": f"{schema}.ref_train", "val": f"{schema}.ref_val",
                      "dropped": f"{schema}.ref_dropped"})
    r = prep(server, ref)
    assert r.returncode == 0, r.stdout + r.stderr

    spec = write_spec(tmp_path / "pipeline.yaml", source,
                      {"train": f"{schema}.train", "val": f"{schema}.val",
                       "dropped": f"{schema}.dropped"})
    # Many small commits, so the run is still writing when its first output appears.
    argv = [str(TRAINYARD_BIN), "prep", str(spec), "--url", server.url, "--token", server.token,
            "--threads", "1", "--flush-rows", "10"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 120
    while True:  # wait for the event: the first output holds its first committed rows
        r = requests.get(server.api(f"{TABLES}/{schema}.train"), headers=auth(server.token),
                         timeout=30)
        if r.status_code == 200 and r.json().get("num_rows", 0) > 0:
            break
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first output never appeared"
    proc.kill()
    proc.communicate()
    assert proc.returncode == -9, "the run finished before it could be killed"
    assert len(api_rows(server, f"{schema}.train")) > 0

    r = prep(server, spec)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("train", "val", "dropped"):
        got = delta_rows(server, f"{schema}.{name}")
        want = delta_rows(server, f"{schema}.ref_{name}")
        key = (lambda x: x["doc_id"])
        assert sorted(got, key=key) == sorted(want, key=key), name
        ids = [x["doc_id"] for x in got]
        assert len(ids) == len(set(ids)), f"{name} has duplicate rows"


def test_as_a_job_prep_logs_its_report_to_the_run(server, tmp_path):
    """With the variables a job gets (TRAINYARD_URL/TOKEN, MLFLOW_RUN_ID), the report goes to
    the run: metrics per step, the spec's version as a tag, the JSON as an artifact."""
    schema = make_schema(server)
    source, _ = import_source(server, tmp_path, schema, 60)
    h = auth(server.token)
    exp = requests.post(server.api("/api/2.0/mlflow/experiments/create"),
                        json={"name": f"prep-{uuid.uuid4().hex[:8]}"}, headers=h, timeout=30)
    assert exp.status_code == 200, exp.text
    run = requests.post(server.api("/api/2.0/mlflow/runs/create"),
                        json={"experiment_id": exp.json()["experiment_id"]}, headers=h,
                        timeout=30)
    assert run.status_code == 200, run.text
    run_id = run.json()["run"]["info"]["run_id"]
    spec = write_spec(tmp_path / "pipeline.yaml", source,
                      {"train": f"{schema}.train", "val": f"{schema}.val"})
    env = {"PATH": "/usr/bin:/bin", "TRAINYARD_URL": server.url, "TRAINYARD_TOKEN": server.token,
           "MLFLOW_RUN_ID": run_id}
    r = subprocess.run([str(TRAINYARD_BIN), "prep", str(spec), "--report",
                        str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" not in r.stderr, r.stderr
    report = json.loads((tmp_path / "r.json").read_text())

    got = requests.get(server.api("/api/2.0/mlflow/runs/get"), params={"run_id": run_id},
                       headers=h, timeout=30).json()["run"]["data"]
    metrics = {m["key"]: m["value"] for m in got["metrics"]}
    tags = {t["key"]: t["value"] for t in got["tags"]}
    assert metrics["prep.rows_in"] == 60
    assert metrics["prep.1_dedup_exact.rows_out"] == report["steps"][1]["rows_out"]
    assert metrics["prep.0_filter.dropped.min_chars"] == 6
    assert tags["trainyard.prep.version"] == report["version"]
    listed = requests.get(server.api("/api/2.0/mlflow/artifacts/list"),
                          params={"run_id": run_id, "path": "prep"}, headers=h, timeout=30)
    assert listed.status_code == 200, listed.text
    assert [f["path"] for f in listed.json()["files"]] == ["prep/report.json"]
    # The tables API recorded the run's read of the source and its writes of the outputs.
    version = report["source_version"]
    lineage = requests.get(server.api("/api/trainyard/v1/lineage"),
                           params={"object": f"run:{run_id}", "direction": "both", "depth": 1},
                           headers=h, timeout=30)
    assert lineage.status_code == 200, lineage.text
    text = json.dumps(lineage.json())
    assert f"table:{source}@{version}" in text, text
    assert f"table:{schema}.train@" in text, text


def test_a_pinned_source_version_is_read_whatever_was_committed_since(server, tmp_path):
    schema = make_schema(server)
    source, rows = import_source(server, tmp_path, schema, 50)
    pinned = describe(server, source)["version"]
    more = tmp_path / "more.jsonl"
    more.write_text("".join(json.dumps(dict(r, id=r["id"] + 1000)) + "\n" for r in rows))
    cli(server, "tables", "import", source, str(more), "--mode", "append")
    assert describe(server, source)["version"] > pinned
    spec = write_spec(tmp_path / "pipeline.yaml", source,
                      {"train": f"{schema}.train", "val": f"{schema}.val"}, version=pinned)
    r = prep(server, spec, "--report", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["rows_in"] == 50 and report["source"] == f"{source}@{pinned}"
    # A version that does not exist is an error naming the table and what to run.
    spec = write_spec(tmp_path / "bad.yaml", source,
                      {"train": f"{schema}.train", "val": f"{schema}.val"}, version=pinned + 9)
    r = prep(server, spec)
    assert r.returncode == 1 and "HTTP 404" in r.stderr, r.stderr
    assert f"trainyard tables history {source}" in r.stderr, r.stderr


def test_prep_runs_as_a_job_and_logs_to_the_jobs_run(server_factory, tmp_path):
    """`command: trainyard prep ...` as a real job, with nothing but what a job gets: its own
    token reads the source table and writes the outputs (the catalog decides with the job
    principal's grants), and the report goes to the job's run."""
    from test_jobs import Jobs, job
    from test_train import succeeded

    server = server_factory.new(["--local-cpus", "2"])
    jobs = Jobs(server)
    schema = make_schema(server)
    source, _ = import_source(server, tmp_path, schema, 80)
    spec = write_spec(tmp_path / "pipeline.yaml", source,
                      {"train": f"{schema}.train", "val": f"{schema}.val",
                       "dropped": f"{schema}.dropped"})
    submitted = jobs.submit(job("prep", f"exec {TRAINYARD_BIN} prep {spec} --threads 2"))
    done = succeeded(jobs, submitted["job_id"])
    log = jobs.logs(submitted["job_id"])
    assert "1_dedup_exact" in log and "80 rows from" in log, log
    got = requests.get(server.api("/api/2.0/mlflow/runs/get"), params={"run_id": done["run_id"]},
                       headers=auth(server.token), timeout=30).json()["run"]["data"]
    metrics = {m["key"]: m["value"] for m in got["metrics"]}
    tags = {t["key"]: t["value"] for t in got["tags"]}
    assert metrics["prep.rows_in"] == 80 and "trainyard.prep.version" in tags
    train, val = api_rows(server, f"{schema}.train"), api_rows(server, f"{schema}.val")
    assert len(train) + len(val) == metrics["prep.rows_out"]


def test_outputs_that_receive_no_rows_are_empty_tables(server, tmp_path):
    schema = make_schema(server)
    source, _ = import_source(server, tmp_path, schema, 20)
    spec = tmp_path / "all.yaml"
    spec.write_text(f"""name: drop-all
source: {{table: {source}}}
steps:
  - filter: {{min_chars: 100000}}
outputs:
  rows: {schema}.kept
  dropped: {schema}.dropped
""")
    r = prep(server, spec)
    assert r.returncode == 0, r.stdout + r.stderr
    assert api_rows(server, f"{schema}.kept") == []
    assert delta_rows(server, f"{schema}.kept") == []
    assert len(api_rows(server, f"{schema}.dropped")) == 20
    assert [c["name"] for c in describe(server, f"{schema}.kept")["columns"]][:2] == ["doc_id", "id"]


def columns(server, token: str | None = None, expect: int = 200, **params) -> dict:
    r = requests.get(server.api("/api/trainyard/v1/lineage/columns"), params=params,
                     headers=auth(token or server.token), timeout=30)
    assert r.status_code == expect, r.text
    return r.json()


def test_column_lineage_of_the_outputs(server, tmp_path):
    """Each column of each output table version says which source columns it came from and
    how: through the API (all columns, or one), the CLI's table, and 4xx naming the field."""
    schema = make_schema(server)
    rows = [{"id": i, "customer": f"c{i % 5}", "question": f"Where is order {i}?",
             "answer": f"It ships tomorrow; write to desk{i}@example.com with questions."}
            for i in range(40)]
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = f"{schema}.qa"
    cli(server, "tables", "import", source, str(data))
    source_version = describe(server, source)["version"]
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(f"""name: qa-prep
source:
  table: {source}
  id_column: id
steps:
  - redact_pii: {{kinds: [email], column: answer}}
  - template: {{format: chatml, prompt_column: question, response_column: answer}}
  - split: {{ratios: {{train: 0.5, val: 0.5}}, seed: 1, group_by: customer}}
outputs:
  train: {schema}.train
  val: {schema}.val
  dropped: {schema}.dropped
""")
    report_file = tmp_path / "report.json"
    # As in a job: lineage records the run that wrote the outputs.
    h = auth(server.token)
    exp = requests.post(server.api("/api/2.0/mlflow/experiments/create"),
                        json={"name": f"qa-{uuid.uuid4().hex[:8]}"}, headers=h, timeout=30)
    run_id = requests.post(server.api("/api/2.0/mlflow/runs/create"),
                           json={"experiment_id": exp.json()["experiment_id"]}, headers=h,
                           timeout=30).json()["run"]["info"]["run_id"]
    env = {"PATH": "/usr/bin:/bin", "TRAINYARD_URL": server.url, "TRAINYARD_TOKEN": server.token,
           "MLFLOW_RUN_ID": run_id}
    r = subprocess.run([str(TRAINYARD_BIN), "prep", str(spec), "--report", str(report_file)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    outputs = {o["name"]: o for o in json.loads(report_file.read_text())["outputs"]}
    train = f"{schema}.train"
    version = outputs["train"]["version"]

    got = columns(server, table=train, version=version)
    assert got["table"] == train and got["version"] == version
    by = {c["column"]: c for c in got["columns"]}
    assert set(by) == {"doc_id", "id", "customer", "question", "answer", "text"}
    for c in by.values():
        assert c["source"] == {"table": source, "version": source_version}, c
        assert c["recorded_by"] == "admin" and c["run_id"] == run_id, c
    assert (by["text"]["source_columns"], by["text"]["transform"]) == \
        (["question", "answer"], "template")
    assert (by["answer"]["source_columns"], by["answer"]["transform"]) == (["answer"], "redact")
    assert (by["customer"]["source_columns"], by["customer"]["transform"]) == \
        (["customer"], "copy")
    assert (by["doc_id"]["source_columns"], by["doc_id"]["transform"]) == (["id"], "doc_id")
    # One column; the other outputs have theirs too.
    one = columns(server, table=train, version=version, column="text")["columns"]
    assert [c["column"] for c in one] == ["text"]
    val = columns(server, table=f"{schema}.val", version=outputs["val"]["version"])
    assert {c["column"] for c in val["columns"]} == set(by)
    dropped = columns(server, table=f"{schema}.dropped", version=outputs["dropped"]["version"])
    assert {c["column"]: c["transform"] for c in dropped["columns"]}["duplicate_of"] == "doc_id"
    # The table-level graph has the same derivation, with the column mapping on its edge.
    g = requests.get(server.api("/api/trainyard/v1/lineage"),
                     params={"object": f"table:{train}@{version}", "direction": "upstream",
                             "depth": 1}, headers=auth(server.token), timeout=30).json()
    derived = [e for e in g["edges"] if e["kind"] == "derived_from"]
    assert len(derived) == 1 and derived[0]["from"] == f"table:{source}@{source_version}", g
    assert derived[0]["column_mapping"]["text"] == ["question", "answer"]

    # The CLI prints a table: column | derived from | transform.
    out = cli(server, "lineage", f"{train}@{version}", "--columns").stdout
    lines = out.splitlines()
    assert re.match(r"^COLUMN\s+DERIVED FROM\s+TRANSFORM", lines[1]), out
    text_line = next(line for line in lines if line.startswith("text "))
    assert f"{source}@{source_version}.question, {source}@{source_version}.answer" in text_line
    assert text_line.rstrip().endswith("template"), text_line
    out = cli(server, "lineage", f"{train}@{version}", "--columns", "--column", "doc_id").stdout
    assert len([line for line in out.splitlines() if line.startswith("doc_id")]) == 1, out

    # Bad input names the field; a reader without SELECT on the table sees nothing.
    for params, status, field in [
        ({"version": version}, 400, "table"),
        ({"table": "no-dots", "version": version}, 400, "table"),
        ({"table": train}, 400, "version"),
        ({"table": train, "version": "x"}, 400, "version"),
        ({"table": train, "version": -1}, 400, "version"),
        ({"table": f"{schema}.nosuch", "version": 1}, 404, "table"),
        ({"table": train, "version": version + 5}, 404, "table"),
        ({"table": train, "version": version, "column": "nosuch"}, 404, "column"),
        ({"table": train, "version": version, "colum": "text"}, 400, "colum"),
    ]:
        body = columns(server, expect=status, **params)
        assert body["message"].startswith(field), (params, body)
    user = f"cl_{uuid.uuid4().hex[:6]}"
    token = server.create_user(user)
    columns(server, token=token, expect=403, table=train, version=version)
    cat = schema.split(".")[0]
    cli(server, "grant", "USE", "CATALOG,", "USE", "SCHEMA,", "SELECT", "ON", "CATALOG", cat,
        "TO", user)
    assert len(columns(server, token=token, table=train, version=version)["columns"]) == 6


def test_column_lineage_sent_to_the_import_api_is_checked(server, tmp_path):
    """The import API's column_lineage: malformed is 400 naming the field and writes nothing;
    a source the writer may not read is refused; without a run it is refused."""
    schema = make_schema(server)
    source, _ = import_source(server, tmp_path, schema, 5)
    h = auth(server.token)
    exp = requests.post(server.api("/api/2.0/mlflow/experiments/create"),
                        json={"name": f"cl-{uuid.uuid4().hex[:8]}"}, headers=h, timeout=30)
    run = requests.post(server.api("/api/2.0/mlflow/runs/create"),
                        json={"experiment_id": exp.json()["experiment_id"]}, headers=h,
                        timeout=30).json()["run"]["info"]["run_id"]
    target = f"{schema}.out"
    body = b'{"a": "x"}\n'

    def imp(lineage, expect, run_id=run, token=None):
        params = {"format": "jsonl", "column_lineage": json.dumps(lineage)}
        if run_id:
            params["run_id"] = run_id
        r = requests.post(server.api(f"{TABLES}/{target}/import"), params=params, data=body,
                          headers=auth(token or server.token), timeout=30)
        assert r.status_code == expect, r.text
        return r.json()

    good = {"source": f"{source}@1", "columns": [{"column": "a", "from": "text",
                                                  "transform": "copy"}]}
    for lineage, field in [
        ({"columns": []}, "column_lineage.source"),
        ({"source": source, "columns": []}, "column_lineage.source"),
        ({"source": f"{source}@1", "columns": [{"column": "a"}]},
         "column_lineage.columns[0].transform"),
        ({"source": f"{source}@1", "columns": [{"column": "a", "transform": "Bad Name"}]},
         "column_lineage.columns[0].transform"),
        ({"source": f"{source}@1", "columns": [{"column": "b", "transform": "copy"}]},
         "column_lineage.columns[0].column"),
    ]:
        assert imp(lineage, 400)["message"].startswith(field), lineage
    assert imp(good, 400, run_id=None)["message"].startswith("column_lineage")
    r = requests.get(server.api(f"{TABLES}/{target}"), headers=h, timeout=30)
    assert r.status_code == 404, r.text  # nothing was created
    assert imp(good, 200)["version"] == 1
    got = columns(server, table=target, version=1)["columns"]
    assert [(c["column"], c["source_columns"], c["transform"]) for c in got] == \
        [("a", ["text"], "copy")]
    # A writer who may not read the source cannot claim to derive from it.
    user = f"cw_{uuid.uuid4().hex[:6]}"
    token = server.create_user(user)
    own_exp = requests.post(server.api("/api/2.0/mlflow/experiments/create"),
                            json={"name": f"cw-{uuid.uuid4().hex[:8]}"}, headers=auth(token),
                            timeout=30)
    own_run = requests.post(server.api("/api/2.0/mlflow/runs/create"),
                            json={"experiment_id": own_exp.json()["experiment_id"]},
                            headers=auth(token), timeout=30).json()["run"]["info"]["run_id"]
    cat = schema.split(".")[0]
    cli(server, "grant", "MODIFY", "ON", "TABLE", target, "TO", user)
    cli(server, "grant", "USE", "CATALOG", "ON", "CATALOG", cat, "TO", user)
    cli(server, "grant", "USE", "SCHEMA", "ON", "SCHEMA", schema, "TO", user)
    body_denied = imp(good, 403, run_id=own_run, token=token)
    assert body_denied["message"].startswith("column_lineage.columns[0].source"), body_denied
