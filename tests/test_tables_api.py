"""Catalog tables' data against a real server (both backends): import (JSONL, CSV, Parquet),
describe, rows (JSON lines and Arrow IPC, paged at a pinned version), history, delete, export,
the CLI, grants, lineage, and the managed table read by delta-rs from its storage location."""

from __future__ import annotations

import io
import json
import uuid

import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
import requests
from deltalake import DeltaTable

from test_cli import cli, parse_table

UC = "/api/2.1/unity-catalog"
TABLES = "/api/trainyard/v1/tables"


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def schema(server):
    """A fresh catalog.schema owned by the admin."""
    cat, sch = name("cat"), name("sch")
    h = auth(server.token)
    r = requests.post(server.api(f"{UC}/catalogs"), json={"name": cat}, headers=h, timeout=30)
    assert r.status_code == 200, r.text
    r = requests.post(server.api(f"{UC}/schemas"), json={"name": sch, "catalog_name": cat},
                      headers=h, timeout=30)
    assert r.status_code == 200, r.text
    return f"{cat}.{sch}"


def import_body(server, table: str, body: bytes, fmt: str, mode: str = "append",
                token: str | None = None, expect: int = 200, **extra) -> dict:
    r = requests.post(server.api(f"{TABLES}/{table}/import"),
                      params={"format": fmt, "mode": mode, **extra}, data=body,
                      headers=auth(token or server.token), timeout=60)
    assert r.status_code == expect, r.text
    return r.json()


def rows(server, table: str, token: str | None = None, expect: int = 200, **params):
    r = requests.get(server.api(f"{TABLES}/{table}/rows"), params=params,
                     headers=auth(token or server.token), timeout=60)
    assert r.status_code == expect, r.text
    return r


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(x) + "\n" for x in records).encode()


def describe(server, table: str, **params) -> dict:
    r = requests.get(server.api(f"{TABLES}/{table}"), params=params,
                     headers=auth(server.token), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


TICKETS = [{"id": i, "text": f"ticket {i}", "priority": i % 3} for i in range(1, 6)]


def test_import_jsonl_and_csv_then_cli_show_history_head(server, schema, tmp_path):
    table = f"{schema}.tickets"
    data = tmp_path / "tickets.jsonl"
    data.write_bytes(jsonl(TICKETS))
    out = cli(server, "tables", "import", table, str(data)).stdout
    assert f"Imported 5 rows" in out and "version 1" in out and "(table created)" in out
    csv = tmp_path / "more.csv"
    csv.write_text("id,text,priority\n6,\"six, with a comma\",0\n7,seven,1\n")
    out = cli(server, "tables", "import", table, str(csv), "--mode", "append").stdout
    assert "Imported 2 rows" in out and "version 2" in out

    d = describe(server, table)
    assert d["version"] == 2 and d["num_rows"] == 7 and d["table_type"] == "MANAGED"
    assert [(c["name"], c["type"]) for c in d["columns"]] == \
        [("id", "int64"), ("text", "string"), ("priority", "int64")]
    # The catalog's row has the columns too (UC's view of the table).
    uc = requests.get(server.api(f"{UC}/tables/{table}"), headers=auth(server.token),
                      timeout=30).json()
    assert [(c["name"], c["type_name"]) for c in uc["columns"]] == \
        [("id", "LONG"), ("text", "STRING"), ("priority", "LONG")]

    _, facts = parse_table(cli(server, "tables", "show", table).stdout, "FIELD")
    facts = {f["FIELD"]: f["VALUE"] for f in facts}
    assert facts["version"] == "2" and facts["rows"] == "7"
    _, hist = parse_table(cli(server, "tables", "history", table).stdout, "VERSION")
    assert [h["VERSION"] for h in hist] == ["2", "1", "0"]
    assert hist[-1]["OPERATION"] == "CREATE TABLE" and hist[0]["OPERATION"] == "WRITE"
    _, head = parse_table(cli(server, "tables", "head", table, "-n", "3").stdout, "id")
    assert len(head) == 3 and {h["id"] for h in head} <= {str(i) for i in range(1, 8)}
    _, old = parse_table(cli(server, "tables", "head", table, "--version", "1", "-n", "50").stdout,
                         "id")
    assert sorted(int(h["id"]) for h in old) == [1, 2, 3, 4, 5]

    out_file = tmp_path / "out.parquet"
    assert "version 2" in cli(server, "tables", "export", table, str(out_file)).stdout
    exported = pq.read_table(out_file)
    assert sorted(exported.column("id").to_pylist()) == list(range(1, 8))
    assert "six, with a comma" in exported.column("text").to_pylist()

    # Overwrite replaces every row.
    out = cli(server, "tables", "import", table, str(csv), "--mode", "overwrite").stdout
    assert "version 3" in out
    assert describe(server, table)["num_rows"] == 2


def test_malformed_line_is_400_naming_the_line_and_leaves_the_table(server, schema):
    table = f"{schema}.tickets"
    import_body(server, table, jsonl(TICKETS), "jsonl")
    bad = jsonl(TICKETS[:2]) + b'{"id": "three", "text": "x", "priority": 1}\n'
    r = requests.post(server.api(f"{TABLES}/{table}/import"),
                      params={"format": "jsonl", "source_name": "bad.jsonl"}, data=bad,
                      headers=auth(server.token), timeout=60)
    assert r.status_code == 400, r.text
    assert "line 3" in r.json()["message"] and "id" in r.json()["message"]
    d = describe(server, table)
    assert d["version"] == 1 and d["num_rows"] == 5
    # A first import that fails creates nothing.
    r = requests.post(server.api(f"{TABLES}/{schema}.never/import"), params={"format": "jsonl"},
                      data=b'{"a": 1}\n{"a": "x"}\nnot json\n', headers=auth(server.token),
                      timeout=60)
    assert r.status_code == 400, r.text
    r = requests.get(server.api(f"{UC}/tables/{schema}.never"), headers=auth(server.token),
                     timeout=30)
    assert r.status_code == 404


def test_bad_parameters_name_the_field(server, schema):
    table = f"{schema}.tickets"
    import_body(server, table, jsonl(TICKETS), "jsonl")
    body = rows(server, table, expect=404, version=9).json()
    assert "latest is 1" in body["message"]
    body = rows(server, table, expect=400, timestamp=1000).json()
    assert "timestamp" in body["message"].lower() or "first commit" in body["message"]
    assert "max_rows" in rows(server, table, expect=400, max_rows=0).json()["message"]
    assert "max_rows" in rows(server, table, expect=400, max_rows=10001).json()["message"]
    assert "filter" in rows(server, table, expect=400, filter="id >>> 3").json()["message"]
    assert "page_token" in rows(server, table, expect=400, page_token="zzz").json()["message"]
    assert "format" in rows(server, table, expect=400, format="xml").json()["message"]
    assert "mode" in import_body(server, table, b"", "jsonl", mode="merge",
                                 expect=400)["message"]
    assert "format" in import_body(server, table, b"", "xml", expect=400)["message"]


def test_paging_is_consistent_while_another_import_commits(server, schema):
    table = f"{schema}.tickets"
    import_body(server, table, jsonl(TICKETS), "jsonl")
    first = rows(server, table, max_rows=2, filter="priority >= 0", columns="id,text")
    assert first.headers["X-Trainyard-Table-Version"] == "1"
    token = first.headers["X-Trainyard-Next-Page-Token"]
    seen = [json.loads(line) for line in first.text.splitlines()]
    assert all(set(x) == {"id", "text"} for x in seen)
    # Another writer commits between the pages.
    import_body(server, table, jsonl([{"id": 100 + i, "text": "new", "priority": 1}
                                      for i in range(5)]), "jsonl")
    while token:
        page = rows(server, table, max_rows=2, page_token=token, filter="priority >= 0",
                    columns="id,text")
        assert page.headers["X-Trainyard-Table-Version"] == "1"
        seen += [json.loads(line) for line in page.text.splitlines()]
        token = page.headers.get("X-Trainyard-Next-Page-Token")
    assert sorted(x["id"] for x in seen) == [1, 2, 3, 4, 5]
    latest = rows(server, table, max_rows=100)
    assert latest.headers["X-Trainyard-Table-Version"] == "2"
    assert len(latest.text.splitlines()) == 10
    filtered = rows(server, table, filter="priority = 1 AND id < 100")
    assert sorted(json.loads(x)["id"] for x in filtered.text.splitlines()) == [1, 4]


def test_arrow_ipc_read_and_delta_rs_reads_the_storage_location(server, schema):
    table = f"{schema}.tickets"
    import_body(server, table, jsonl(TICKETS), "jsonl")
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [10, 11], "text": ["p", None], "priority": [2, 0]}), buf)
    assert import_body(server, table, buf.getvalue(), "parquet")["version"] == 2
    r = rows(server, table, format="arrow", max_rows=10000)
    assert r.headers["Content-Type"] == "application/vnd.apache.arrow.stream"
    api_rows = pa.ipc.open_stream(r.content).read_all()
    assert api_rows.num_rows == 7
    location = describe(server, table)["storage_location"]
    delta = DeltaTable(location)
    assert delta.version() == 2
    from_delta = delta.to_pyarrow_table()
    key = lambda t: sorted(t.to_pylist(), key=lambda x: x["id"])  # noqa: E731
    assert key(from_delta.select(["id", "text", "priority"])) == key(api_rows)
    # Delete by predicate: a new version without those rows.
    r = requests.post(server.api(f"{TABLES}/{table}/delete"), json={"predicate": "id >= 10"},
                      headers=auth(server.token), timeout=30)
    assert r.status_code == 200 and r.json()["rows_deleted"] == 2, r.text
    assert DeltaTable(location).to_pyarrow_table().num_rows == 5


def test_uc_create_managed_delta_table_is_readable(server, schema):
    cat, sch = schema.split(".")
    body = {"name": "events", "catalog_name": cat, "schema_name": sch, "table_type": "MANAGED",
            "data_source_format": "DELTA",
            "columns": [{"name": "id", "type_name": "LONG", "type_text": "bigint",
                         "position": 0, "nullable": True},
                        {"name": "what", "type_name": "STRING", "type_text": "string",
                         "position": 1, "nullable": True}]}
    r = requests.post(server.api(f"{UC}/tables"), json=body, headers=auth(server.token),
                      timeout=30)
    assert r.status_code == 200, r.text
    delta = DeltaTable(r.json()["storage_location"])
    assert delta.version() == 0
    assert delta.schema().to_arrow().names == ["id", "what"]
    assert delta.to_pyarrow_table().num_rows == 0
    import_body(server, f"{schema}.events", jsonl([{"id": 1, "what": "x"}]), "jsonl")
    assert DeltaTable(r.json()["storage_location"]).to_pyarrow_table().num_rows == 1


def test_second_user_needs_select(server, schema):
    table = f"{schema}.tickets"
    import_body(server, table, jsonl(TICKETS), "jsonl")
    user = name("dana")
    token = server.create_user(user)
    assert rows(server, table, token=token, expect=403).status_code == 403
    import_body(server, table, jsonl(TICKETS), "jsonl", token=token, expect=403)
    cat = schema.split(".")[0]
    cli(server, "grant", "USE", "CATALOG,", "USE", "SCHEMA", "ON", "CATALOG", cat, "TO", user)
    assert rows(server, table, token=token, expect=403).status_code == 403
    cli(server, "grant", "SELECT", "ON", "TABLE", table, "TO", user)
    assert len(rows(server, table, token=token).text.splitlines()) == 5
    # SELECT does not allow writing.
    import_body(server, table, jsonl(TICKETS), "jsonl", token=token, expect=403)


def test_lineage_shows_the_versions_written_by_imports(server, schema):
    table = f"{schema}.tickets"
    h = auth(server.token)
    exp = requests.post(server.api("/api/2.0/mlflow/experiments/create"),
                        json={"name": name("exp")}, headers=h, timeout=30).json()
    run = requests.post(server.api("/api/2.0/mlflow/runs/create"),
                        json={"experiment_id": exp["experiment_id"]}, headers=h,
                        timeout=30).json()["run"]["info"]["run_id"]
    assert import_body(server, table, jsonl(TICKETS), "jsonl", run_id=run)["version"] == 1
    assert import_body(server, table, jsonl(TICKETS), "jsonl", run_id=run)["version"] == 2
    r = requests.get(server.api("/api/trainyard/v1/lineage"),
                     params={"object": f"run:{run}", "direction": "downstream"}, headers=h,
                     timeout=30)
    assert r.status_code == 200, r.text
    written = {(e["kind"], e["to"]) for e in r.json()["edges"]}
    assert written == {("wrote", f"table:{table}@1"), ("wrote", f"table:{table}@2")}
    rows(server, table, run_id=run, version=1)
    r = requests.get(server.api("/api/trainyard/v1/lineage"),
                     params={"object": f"table:{table}@1", "direction": "downstream"},
                     headers=h, timeout=30)
    assert ("read", f"run:{run}") in {(e["kind"], e["to"]) for e in r.json()["edges"]}


def new_run(server, token: str | None = None) -> str:
    h = auth(token or server.token)
    exp = requests.post(server.api("/api/2.0/mlflow/experiments/create"),
                        json={"name": name("exp")}, headers=h, timeout=30)
    assert exp.status_code == 200, exp.text
    run = requests.post(server.api("/api/2.0/mlflow/runs/create"),
                        json={"experiment_id": exp.json()["experiment_id"]}, headers=h,
                        timeout=30)
    assert run.status_code == 200, run.text
    return run.json()["run"]["info"]["run_id"]


def test_run_id_needs_write_on_the_run(server, schema):
    """Naming a run puts the read or write in its lineage: a caller who may not log to the run
    gets 403 naming run_id, an unknown run 404, and nothing is written."""
    table = f"{schema}.tickets"
    import_body(server, table, jsonl(TICKETS), "jsonl")
    admins_run = new_run(server)
    user = name("erin")
    token = server.create_user(user)
    cat = schema.split(".")[0]
    cli(server, "grant", "USE", "CATALOG,", "USE", "SCHEMA,", "SELECT,", "MODIFY", "ON",
        "CATALOG", cat, "TO", user)
    r = import_body(server, table, jsonl(TICKETS), "jsonl", token=token, expect=403,
                    run_id=admins_run)
    assert "run_id" in r["message"], r
    assert "run_id" in rows(server, table, token=token, expect=403,
                            run_id=admins_run).json()["message"]
    r = requests.get(server.api(f"{TABLES}/{table}/export"), params={"run_id": admins_run},
                     headers=auth(token), timeout=30)
    assert r.status_code == 403 and "run_id" in r.text, r.text
    r = requests.post(server.api(f"{TABLES}/{table}/delete"),
                      json={"predicate": "id = 1", "run_id": admins_run}, headers=auth(token),
                      timeout=30)
    assert r.status_code == 403 and "run_id" in r.text, r.text
    r = import_body(server, table, jsonl(TICKETS), "jsonl", token=token, expect=404,
                    run_id="0123456789abcdef0123456789abcdef")
    assert "run_id" in r["message"], r
    assert describe(server, table)["version"] == 1  # nothing was written
    # Their own run is theirs to name; the admin's run is, once the admin grants EDIT on it.
    own = new_run(server, token)
    assert import_body(server, table, jsonl(TICKETS), "jsonl", token=token,
                       run_id=own)["version"] == 2
    g = requests.get(server.api("/api/trainyard/v1/lineage"),
                     params={"object": f"run:{admins_run}", "direction": "downstream"},
                     headers=auth(server.token), timeout=30)
    assert g.status_code == 200 and g.json()["edges"] == [], g.text


def test_a_job_token_may_name_only_its_own_run(server, schema, tmp_path):
    """A job's token (scoped to the job) may attach reads to the job's run, not to another."""
    import sys
    from pathlib import Path

    from jobs_client import JobsClient

    table = f"{schema}.tickets"
    import_body(server, table, jsonl(TICKETS), "jsonl")
    other = new_run(server)
    script = tmp_path / "probe.py"
    script.write_text(f"""
import os, requests
url, h = os.environ["TRAINYARD_URL"], {{"Authorization": "Bearer " + os.environ["TRAINYARD_TOKEN"]}}
for run in [{other!r}, os.environ["MLFLOW_RUN_ID"]]:
    r = requests.get(url + "{TABLES}/{table}/rows", params={{"run_id": run}}, headers=h)
    print("status", r.status_code, r.text[:200].replace(chr(10), " "))
""")
    jobs = JobsClient(server)
    job = jobs.submit({"name": "probe", "command": f"{sys.executable} {script}",
                       "max_restarts": 0,
                       "env": {"PYTHONPATH": str(Path(__file__).resolve().parent.parent /
                                                 "python")}})
    done = jobs.wait_state(job["job_id"], "SUCCEEDED", timeout=120)
    statuses = [line for line in jobs.logs(job["job_id"]).splitlines()
                if line.startswith("status ")]
    assert len(statuses) == 2, statuses
    assert statuses[0].startswith("status 403") and "run_id" in statuses[0], statuses
    assert statuses[1].startswith("status 200"), statuses
    g = requests.get(server.api("/api/trainyard/v1/lineage"),
                     params={"object": f"table:{table}@1", "direction": "downstream"},
                     headers=auth(server.token), timeout=30).json()
    readers = {e["to"] for e in g["edges"] if e["kind"] == "read"}
    assert readers == {f"run:{done['run_id']}"}, g


def test_python_sdk_write_read_to_pandas(server, schema):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    from trainyard import tables
    from trainyard._client import Client, TrainyardError

    client = Client(server.url, server.token)
    table = f"{schema}.sdk"
    data = pa.table({"id": list(range(25000)), "text": [f"t{i}" for i in range(25000)]})
    assert tables.write(table, data, client=client) == {"version": 1, "rows": 25000,
                                                        "created": True}
    import pandas as pd
    tables.write(table, pd.DataFrame({"id": [-1], "text": ["from pandas"]}), client=client)
    # 25001 rows: three pages of Arrow IPC, one version.
    back = tables.read(table, client=client)
    assert back.num_rows == 25001 and back.column_names == ["id", "text"]
    assert sorted(back.column("id").to_pylist()) == list(range(-1, 25000))
    v1 = tables.read(table, version=1, columns=["id"], filter="id < 3", client=client)
    assert v1.column_names == ["id"] and sorted(v1.column("id").to_pylist()) == [0, 1, 2]
    df = tables.to_pandas(table, filter="text = 'from pandas'", client=client)
    assert list(df["id"]) == [-1]
    with pytest.raises(TrainyardError) as e:
        tables.read(table, version=7, client=client)
    assert e.value.status == 404 and "latest is 2" in str(e.value)


def test_csv_bad_value_names_the_line_and_timestamp_reads_travel(server, schema):
    table = f"{schema}.tickets"
    import_body(server, table, b"id,text,priority\n1,a,0\n2,b,1\n", "csv")
    r = requests.post(server.api(f"{TABLES}/{table}/import"),
                      params={"format": "csv", "source_name": "more.csv"},
                      data=b"id,text,priority\n3,c,2\n4,d,high\n", headers=auth(server.token),
                      timeout=60)
    assert r.status_code == 400, r.text
    assert "more.csv line 3" in r.json()["message"] and "priority" in r.json()["message"]
    assert describe(server, table)["version"] == 1
    import_body(server, table, b"id,text,priority\n3,c,2\n", "csv")
    history = requests.get(server.api(f"{TABLES}/{table}/history"), headers=auth(server.token),
                           timeout=30).json()["history"]
    at_v1 = next(h["timestamp_ms"] for h in history if h["version"] == 1)
    old = rows(server, table, timestamp=at_v1)
    assert old.headers["X-Trainyard-Table-Version"] == "1"
    assert len(old.text.splitlines()) == 2
    assert describe(server, table, timestamp=at_v1)["version"] == 1


def test_history_names_who_made_each_version(server, schema):
    """Each commit's commitInfo names the user who made it (userId/userName, the fields Spark on
    Databricks fills): the history API, the CLI's USER column, and delta-rs reading the log."""
    table = f"{schema}.tickets"
    import_body(server, table, jsonl(TICKETS), "jsonl")  # v0 CREATE TABLE and v1, the admin's
    writer = name("erin")
    token = server.create_user(writer)
    cat = schema.split(".")[0]
    cli(server, "grant", "USE", "CATALOG,", "USE", "SCHEMA,", "SELECT,", "MODIFY", "ON",
        "CATALOG", cat, "TO", writer)
    import_body(server, table, jsonl(TICKETS[:2]), "jsonl", token=token)  # v2: append
    r = requests.post(server.api(f"{TABLES}/{table}/delete"), json={"predicate": "id = 1"},
                      headers=auth(token), timeout=30)  # v3: delete
    assert r.status_code == 200, r.text
    import_body(server, table, jsonl(TICKETS), "jsonl", mode="overwrite")  # v4: the admin's

    r = requests.get(server.api(f"{TABLES}/{table}/history"), headers=auth(server.token),
                     timeout=30)
    assert r.status_code == 200, r.text
    made_by = {h["version"]: (h["operation"], h["user_name"]) for h in r.json()["history"]}
    assert made_by == {0: ("CREATE TABLE", "admin"), 1: ("WRITE", "admin"), 2: ("WRITE", writer),
                       3: ("DELETE", writer), 4: ("WRITE", "admin")}, made_by
    assert all(h["user_id"] == h["user_name"] for h in r.json()["history"])

    _, hist = parse_table(cli(server, "tables", "history", table).stdout, "VERSION")
    assert [(h["VERSION"], h["USER"]) for h in hist] == \
        [("4", "admin"), ("3", writer), ("2", writer), ("1", "admin"), ("0", "admin")]

    # delta-rs reads the same log: the fields are commitInfo's own, the interop stays valid.
    delta = DeltaTable(describe(server, table)["storage_location"])
    by_version = {h["version"]: h for h in delta.history()}
    assert set(by_version) == {0, 1, 2, 3, 4}
    assert (by_version[3]["userId"], by_version[3]["userName"]) == (writer, writer)
    assert by_version[3]["operation"] == "DELETE"
    assert by_version[4]["userName"] == "admin" and by_version[0]["userName"] == "admin"
    assert delta.to_pyarrow_table().num_rows == len(TICKETS)
