"""Row filters and column masks against a real server (both backends), with two non-admin users:
alice reads and modifies but is in no group; bob is a support lead, and support leads are pii
readers (nested groups). The table's filter shows EU rows unless the reader is a support lead;
email is masked (last4) and name hashed unless the reader is a pii reader. alice must never see a
US row or a raw email or name through any path: rows as JSON lines and Arrow IPC, export in every
format, the CLI's head and show, the Python SDK, her own filters, deletes, temporary credentials
and the storage location; bob sees everything, until his membership is revoked."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.csv
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
import requests

from test_cli import cli, parse_table
from test_unity_catalog import duckdb_with_uc_extension, run, uc_client

UC = "/api/2.1/unity-catalog"
TABLES = "/api/trainyard/v1/tables"

PEOPLE = [
    {"id": 1, "region": "EU", "name": "Anna Adler", "email": "anna.adler@example.eu", "score": 10},
    {"id": 2, "region": "US", "name": "Bill Baker", "email": "bill.baker@example.com", "score": 20},
    {"id": 3, "region": "EU", "name": "Cleo Chen", "email": "cleo.chen@example.eu", "score": 30},
    {"id": 4, "region": "US", "name": "Dana Diaz", "email": "dana.diaz@example.com", "score": 40},
]
SECRETS = [p[k] for p in PEOPLE for k in ("name", "email")] + ["example.com", "US"]


def last4(s: str) -> str:
    return "*" * (len(s) - 4) + s[-4:]


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


# What alice sees: the EU rows, masked.
ALICE_VIEW = sorted([{**p, "name": sha(p["name"]), "email": last4(p["email"])}
                     for p in PEOPLE if p["region"] == "EU"], key=lambda r: r["id"])


def uid(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(x) + "\n" for x in records).encode()


def assert_no_secret(body: bytes | str, what: str) -> None:
    text = body if isinstance(body, str) else body.decode("latin-1")
    for secret in SECRETS:
        if secret == "US":  # two letters: only meaningful in text formats
            if what.endswith(("parquet", "arrow")):
                continue
            assert '"US"' not in text and ",US," not in text, f"a US row in {what}"
            continue
        assert secret not in text, f"{secret!r} in {what}"


class Governed:
    def __init__(self, server):
        self.server = server
        h = auth(server.token)
        cat, sch = uid("cat"), uid("sch")
        for path, body in ((f"{UC}/catalogs", {"name": cat}),
                           (f"{UC}/schemas", {"name": sch, "catalog_name": cat})):
            r = requests.post(server.api(path), json=body, headers=h, timeout=30)
            assert r.status_code == 200, r.text
        self.table = f"{cat}.{sch}.people"
        r = requests.post(server.api(f"{TABLES}/{self.table}/import"), params={"format": "jsonl"},
                          data=jsonl(PEOPLE), headers=h, timeout=60)
        assert r.status_code == 200, r.text
        self.alice, self.bob = uid("alice"), uid("bob")
        self.alice_token = server.create_user(self.alice)
        self.bob_token = server.create_user(self.bob)
        self.leads, self.pii = uid("support-leads"), uid("pii-readers")
        with server.session() as s:
            for g in (self.leads, self.pii):
                r = s.post(server.api("/api/trainyard/v1/groups"), json={"name": g}, timeout=30)
                assert r.status_code == 200, r.text
            for group, member in ((self.leads, self.bob), (self.pii, self.leads)):
                r = s.post(server.api(f"/api/trainyard/v1/groups/{group}/members"),
                           json={"member": member}, timeout=30)
                assert r.status_code == 200, r.text
        for who in (self.alice, self.bob):
            r = requests.patch(server.api(f"{UC}/permissions/catalog/{cat}"), headers=h, json={
                "changes": [{"principal": who,
                             "add": ["USE CATALOG", "USE SCHEMA", "SELECT", "MODIFY"]}]},
                timeout=30)
            assert r.status_code == 200, r.text

    def rows(self, token: str, expect: int = 200, **params) -> requests.Response:
        r = requests.get(self.server.api(f"{TABLES}/{self.table}/rows"), params=params,
                         headers=auth(token), timeout=60)
        assert r.status_code == expect, r.text
        return r

    def jsonl_rows(self, token: str, **params) -> list[dict]:
        body = self.rows(token, format="jsonl", **params).text
        return sorted((json.loads(line) for line in body.splitlines() if line),
                      key=lambda r: r["id"])


@pytest.fixture
def gov(server):
    g = Governed(server)
    # The owner (the admin) sets the policies through the CLI.
    out = cli(server, "tables", "set-row-filter", g.table,
              f"region = 'EU' OR is_member('{g.leads}')").stdout
    assert "Set the row filter" in out and "is_member" in out
    out = cli(server, "tables", "set-mask", g.table, "email", "--kind", "last4",
              "--except", g.pii).stdout
    assert "last4 except " + g.pii in out
    cli(server, "tables", "set-mask", g.table, "name", "--kind", "hash", "--except", g.pii)
    return g


def test_setting_policies_needs_owner_or_manage_and_bad_ones_are_400(server, gov):
    t = gov.table
    r = requests.put(server.api(f"{TABLES}/{t}/row-filter"), json={"predicate": "TRUE"},
                     headers=auth(gov.alice_token), timeout=30)
    assert r.status_code == 403, r.text
    r = requests.put(server.api(f"{TABLES}/{t}/columns/email/mask"), json={"kind": "null"},
                     headers=auth(gov.alice_token), timeout=30)
    assert r.status_code == 403, r.text
    h = auth(server.token)
    for path, body, field in (
            ("row-filter", {"predicate": "country = 'EU'"}, "country"),
            ("row-filter", {"predicate": "region = "}, "predicate"),
            ("row-filter", {"predicate": "score = current_user()"}, "score"),
            ("row-filter", {}, "predicate"),
            ("columns/phone/mask", {"kind": "null"}, "phone"),
            ("columns/email/mask", {"kind": "blur"}, "kind"),
            ("columns/score/mask", {"kind": "last4"}, "score"),
            ("columns/email/mask", {"kind": "hash", "except": ["no-such-group"]}, "except[0]")):
        r = requests.put(server.api(f"{TABLES}/{t}/{path}"), json=body, headers=h, timeout=30)
        assert r.status_code == 400, (path, body, r.text)
        assert field in r.json()["message"], r.text
    # The policies are unchanged by the refusals.
    d = requests.get(server.api(f"{TABLES}/{t}"), headers=h, timeout=30).json()
    assert d["row_filter"]["predicate"] == f"region = 'EU' OR is_member('{gov.leads}')"
    assert {c["name"]: c.get("mask", {}).get("kind") for c in d["columns"]} == \
        {"id": None, "region": None, "name": "hash", "email": "last4", "score": None}
    # Each attempt is audited (asynchronously: poll, bounded by a deadline).
    deadline = time.monotonic() + 20
    while True:
        r = requests.get(server.api("/api/trainyard/v1/catalog/audit"), headers=h, timeout=30,
                         params={"securable": f"table {t}", "user": gov.alice, "outcome": "deny"})
        reasons = [e["reason"] for e in r.json()["events"]]
        if any("set row filter" in x for x in reasons) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert any("refused: set row filter: TRUE" in x for x in reasons), reasons


def test_reader_outside_the_groups_never_sees_filtered_rows_or_raw_values(server, gov, tmp_path):
    # Rows as JSON lines.
    r = gov.rows(gov.alice_token, format="jsonl")
    assert_no_secret(r.content, "rows jsonl")
    assert gov.jsonl_rows(gov.alice_token) == ALICE_VIEW
    # Rows as Arrow IPC, read with pyarrow: the table's types, masked values.
    r = gov.rows(gov.alice_token, format="arrow")
    assert_no_secret(r.content, "rows arrow")
    t = pa.ipc.open_stream(r.content).read_all()
    assert t.schema.field("email").type == pa.string() and t.schema.field("id").type == pa.int64()
    assert sorted(t.to_pylist(), key=lambda x: x["id"]) == ALICE_VIEW
    # Paging keeps to the visible rows.
    page = gov.rows(gov.alice_token, format="jsonl", max_rows=1)
    token = page.headers["X-Trainyard-Next-Page-Token"]
    rest = gov.rows(gov.alice_token, format="jsonl", max_rows=1, page_token=token)
    assert "X-Trainyard-Next-Page-Token" not in rest.headers
    assert sorted(json.loads(x.text)["id"] for x in (page, rest)) == [1, 3]
    # Export in every format.
    for fmt in ("jsonl", "csv", "parquet", "arrow"):
        r = requests.get(server.api(f"{TABLES}/{gov.table}/export"), params={"format": fmt},
                         headers=auth(gov.alice_token), timeout=60)
        assert r.status_code == 200, r.text
        assert_no_secret(r.content, f"export {fmt}")
        if fmt == "jsonl":
            got = [json.loads(x) for x in r.text.splitlines()]
        elif fmt == "csv":
            got = pa.csv.read_csv(io.BytesIO(r.content)).to_pylist()
        elif fmt == "parquet":
            got = pq.read_table(io.BytesIO(r.content)).to_pylist()
        else:
            got = pa.ipc.open_stream(r.content).read_all().to_pylist()
        assert sorted(got, key=lambda x: x["id"]) == ALICE_VIEW, fmt
    # The CLI: head, export and show.
    out = cli(server, "tables", "head", gov.table, "-n", "50", token=gov.alice_token).stdout
    assert_no_secret(out, "cli head")
    _, head = parse_table(out, "id")
    assert sorted((h["id"], h["email"]) for h in head) == \
        [("1", last4("anna.adler@example.eu")), ("3", last4("cleo.chen@example.eu"))]
    exported = tmp_path / "alice.parquet"
    cli(server, "tables", "export", gov.table, str(exported), token=gov.alice_token)
    assert sorted(pq.read_table(exported).to_pylist(), key=lambda x: x["id"]) == ALICE_VIEW
    out = cli(server, "tables", "show", gov.table, token=gov.alice_token).stdout
    _, facts = parse_table(out, "FIELD")
    facts = {f["FIELD"]: f["VALUE"] for f in facts}
    assert "(applies to you)" in facts["row filter"] and "hidden" in facts["location"]
    _, columns = parse_table(out[out.index("COLUMN"):], "COLUMN")
    masks = {c["COLUMN"]: c["MASK"] for c in columns}
    assert masks["email"] == f"last4 except {gov.pii} (applies to you)" and masks["id"] == "-"
    # The Python SDK reads through the API: the same view.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    from trainyard import tables
    from trainyard._client import Client

    sdk = tables.read(gov.table, client=Client(server.url, gov.alice_token))
    assert sorted(sdk.to_pylist(), key=lambda x: x["id"]) == ALICE_VIEW


def test_own_filters_and_deletes_cannot_probe_or_reach_hidden_rows(server, gov):
    raw = PEOPLE[0]["email"]
    # A filter over a masked column sees masked values only; over others it is ANDed.
    assert gov.jsonl_rows(gov.alice_token, filter=f"email = '{raw}'") == []
    assert gov.jsonl_rows(gov.alice_token, filter="region = 'US'") == []
    assert gov.jsonl_rows(gov.alice_token, filter="name IS NOT NULL AND score > 10",
                          columns="id") == [{"id": 3}]
    hashed = sha(PEOPLE[2]["name"])
    assert gov.jsonl_rows(gov.alice_token, filter=f"name = '{hashed}'", columns="id") == \
        [{"id": 3}]
    # A delete by a masked column's raw value would probe it: refused.
    r = requests.post(server.api(f"{TABLES}/{gov.table}/delete"), json={"predicate":
                      f"email = '{raw}'"}, headers=auth(gov.alice_token), timeout=30)
    assert r.status_code == 403 and "masked" in r.json()["message"], r.text
    # Deleting everything deletes only what alice sees.
    r = requests.post(server.api(f"{TABLES}/{gov.table}/delete"), json={"predicate": "TRUE"},
                      headers=auth(gov.alice_token), timeout=30)
    assert r.status_code == 200 and r.json()["rows_deleted"] == 2, r.text
    assert [x["id"] for x in gov.jsonl_rows(gov.bob_token)] == [2, 4]
    # An overwrite would replace rows she cannot see; an append is fine.
    r = requests.post(server.api(f"{TABLES}/{gov.table}/import"),
                      params={"format": "jsonl", "mode": "overwrite"}, data=jsonl(PEOPLE[:1]),
                      headers=auth(gov.alice_token), timeout=60)
    assert r.status_code == 403 and "row filter" in r.json()["message"], r.text
    r = requests.post(server.api(f"{TABLES}/{gov.table}/import"), params={"format": "jsonl"},
                      data=jsonl(PEOPLE[:1]), headers=auth(gov.alice_token), timeout=60)
    assert r.status_code == 200, r.text
    # History hides the delete's predicate from her, not from bob.
    def history(token):
        r = requests.get(server.api(f"{TABLES}/{gov.table}/history"), headers=auth(token),
                         timeout=30)
        assert r.status_code == 200, r.text
        return [e for e in r.json()["history"] if e["operation"] == "DELETE"]
    assert all("hidden" in e["operation_parameters"]["predicate"] for e in history(gov.alice_token))
    assert "region" in history(gov.bob_token)[0]["operation_parameters"]["predicate"]


def test_temporary_credentials_and_storage_location_are_refused(server, gov):
    from unitycatalog.client import (GenerateTemporaryTableCredential, TableOperation,
                                     TemporaryCredentialsApi)
    from unitycatalog.client.exceptions import ApiException

    uc = requests.get(server.api(f"{UC}/tables/{gov.table}"), headers=auth(gov.alice_token),
                      timeout=30)
    assert uc.status_code == 200, uc.text
    info = uc.json()
    assert "storage_location" not in info
    assert info["row_filter"]["input_column_names"] == ["region"]
    assert info["row_filter"]["function_name"] == "trainyard.row_filter"
    email = next(c for c in info["columns"] if c["name"] == "email")
    assert email["mask"]["kind"] == "last4" and email["mask"]["except"] == [gov.pii]
    # Nor through the tables API's describe, or a list.
    d = requests.get(server.api(f"{TABLES}/{gov.table}"), headers=auth(gov.alice_token),
                     timeout=30).json()
    assert d["storage_location"] == "" and d["row_filter"]["applies_to_caller"] is True
    cat, sch, _ = gov.table.split(".")
    listed = requests.get(server.api(f"{UC}/tables"), params={"catalog_name": cat,
                          "schema_name": sch}, headers=auth(gov.alice_token), timeout=30).json()
    assert [t.get("storage_location") for t in listed["tables"]] == [None]
    # bob, whom neither applies to, sees the location; credentials are still refused to all.
    bob_info = requests.get(server.api(f"{UC}/tables/{gov.table}"), headers=auth(gov.bob_token),
                            timeout=30).json()
    assert bob_info["storage_location"]

    def ask(token):
        async def body():
            async with uc_client(server, token) as client:
                return await TemporaryCredentialsApi(client).generate_temporary_table_credentials(
                    GenerateTemporaryTableCredential(table_id=info["table_id"],
                                                     operation=TableOperation.READ))
        return run(body())

    for token in (gov.alice_token, gov.bob_token, server.token):
        with pytest.raises(ApiException) as refused:
            ask(token)
        assert refused.value.status == 403
        assert "row filter" in str(refused.value.body)
    # DuckDB's unity_catalog extension reads through storage and those credentials: it cannot
    # read the table, neither for alice (no location) nor for bob (no credentials).
    for token in (gov.alice_token, gov.bob_token):
        con = duckdb_with_uc_extension()
        try:
            con.execute(f"CREATE SECRET (TYPE UC, TOKEN '{token}', ENDPOINT '{server.url}', "
                        "AWS_REGION 'us-east-1')")
            con.execute(f"ATTACH '{cat}' AS uc (TYPE UC_CATALOG)")
            with pytest.raises(Exception) as duck:
                con.execute(f"SELECT * FROM uc.{sch}.people").fetchall()
            assert "temporary-table-credentials" in str(duck.value), duck.value
        finally:
            con.close()
    r = requests.post(server.api(f"{UC}/temporary-table-credentials"), headers=auth(gov.bob_token),
                      json={"table_id": info["table_id"], "operation": "READ"}, timeout=30)
    assert r.status_code == 403 and r.json()["error_code"] == "PERMISSION_DENIED", r.text
    # A path credential for the table's storage (or a file in it) is the same bypass.
    for url in (bob_info["storage_location"], bob_info["storage_location"] + "/_delta_log"):
        r = requests.post(server.api(f"{UC}/temporary-path-credentials"),
                          headers=auth(gov.bob_token), json={"url": url, "operation": "PATH_READ"},
                          timeout=30)
        assert r.status_code == 403 and "row filter" in r.text, r.text
    # Without policies the table gets credentials again.
    for path in ("row-filter", "columns/email/mask", "columns/name/mask"):
        r = requests.delete(server.api(f"{TABLES}/{gov.table}/{path}"), headers=auth(server.token),
                            timeout=30)
        assert r.status_code == 200, r.text
    assert r.json()["column_masks"] == {} and "row_filter" not in r.json()
    assert ask(gov.alice_token).url
    con = duckdb_with_uc_extension()
    try:
        con.execute(f"CREATE SECRET (TYPE UC, TOKEN '{gov.alice_token}', ENDPOINT '{server.url}', "
                    "AWS_REGION 'us-east-1')")
        con.execute(f"ATTACH '{cat}' AS uc (TYPE UC_CATALOG)")
        assert con.execute(f"SELECT count(*) FROM uc.{sch}.people").fetchone() == (4,)
    finally:
        con.close()


def test_member_sees_everything_until_revoked(server, gov):
    everyone = sorted(PEOPLE, key=lambda p: p["id"])
    assert gov.jsonl_rows(gov.bob_token) == everyone
    r = gov.rows(gov.bob_token, format="arrow")
    assert sorted(pa.ipc.open_stream(r.content).read_all().to_pylist(),
                  key=lambda x: x["id"]) == everyone
    r = requests.get(server.api(f"{TABLES}/{gov.table}/export"), params={"format": "csv"},
                     headers=auth(gov.bob_token), timeout=60)
    assert PEOPLE[1]["email"] in r.text
    out = cli(server, "tables", "show", gov.table, token=gov.bob_token).stdout
    assert "(not to you)" in out
    # Owners and admins are filtered like anyone (the admin is in no group).
    assert [x["id"] for x in gov.jsonl_rows(server.token)] == [1, 3]
    # Revoking bob's membership takes effect on the next request.
    with server.session() as s:
        r = s.delete(server.api(f"/api/trainyard/v1/groups/{gov.leads}/members/{gov.bob}"),
                     timeout=30)
        assert r.status_code == 200, r.text
    assert gov.jsonl_rows(gov.bob_token) == ALICE_VIEW


def test_the_uc_get_sees_each_policy_change_and_revocation_on_the_next_request(server, gov):
    """GET /tables/{full_name} is answered from memory once the table was read (the catalog's
    TableCache, on the HTTP I/O thread): every change must still show on the next request."""
    t = gov.table
    h = auth(server.token)

    def uc_get(token: str, expect: int = 200) -> dict:
        r = requests.get(server.api(f"{UC}/tables/{t}"), headers=auth(token), timeout=30)
        assert r.status_code == expect, r.text
        return r.json()

    for _ in range(3):  # the first read fills the cache; the others are served from it
        assert "storage_location" not in uc_get(gov.alice_token)
    # Clearing the row filter and the masks gives alice the location; setting one takes it away.
    r = requests.delete(server.api(f"{TABLES}/{t}/row-filter"), headers=h, timeout=30)
    assert r.status_code == 200, r.text
    info = uc_get(gov.alice_token)
    assert "row_filter" not in info and "storage_location" not in info  # masks still apply
    for column in ("email", "name"):
        r = requests.delete(server.api(f"{TABLES}/{t}/columns/{column}/mask"), headers=h,
                            timeout=30)
        assert r.status_code == 200, r.text
    info = uc_get(gov.alice_token)
    assert info["storage_location"] and all("mask" not in c for c in info["columns"])
    r = requests.put(server.api(f"{TABLES}/{t}/row-filter"),
                     json={"predicate": f"id > 1 OR is_member('{gov.leads}')"}, headers=h,
                     timeout=30)
    assert r.status_code == 200, r.text
    info = uc_get(gov.alice_token)
    assert "storage_location" not in info
    assert info["row_filter"]["input_column_names"] == ["id"]
    # A revocation and a deletion apply to the cached table at once.
    cat = t.split(".")[0]
    r = requests.patch(server.api(f"{UC}/permissions/catalog/{cat}"), headers=h, json={
        "changes": [{"principal": gov.alice, "remove": ["SELECT", "MODIFY"]}]}, timeout=30)
    assert r.status_code == 200, r.text
    assert uc_get(gov.alice_token, 403)["error_code"] == "PERMISSION_DENIED"
    assert "storage_location" in uc_get(gov.bob_token)
    # A revoked token is refused on its next request.
    r = requests.get(server.api("/api/trainyard/v1/tokens"), headers=h, timeout=30)
    bobs = [x["token_id"] for x in r.json()["tokens"] if x["user"] == gov.bob]
    assert len(bobs) == 1, r.text
    r = requests.delete(server.api(f"/api/trainyard/v1/tokens/{bobs[0]}"), headers=h, timeout=30)
    assert r.status_code == 200, r.text
    assert uc_get(gov.bob_token, 401)["error_code"] == "UNAUTHENTICATED"
    # A deleted table is gone at once.
    r = requests.delete(server.api(f"{UC}/tables/{t}"), headers=h, timeout=30)
    assert r.status_code == 200, r.text
    assert uc_get(server.token, 404)["error_code"] == "NOT_FOUND"
