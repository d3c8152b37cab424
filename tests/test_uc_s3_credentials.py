"""Temporary credentials for catalog objects on S3 (docs/decisions/0014), end to end against
moto's S3 and STS (tests/moto_s3.py, signature checks on): a catalog whose storage root is an
s3:// prefix, rows imported through the server, credentials asked for through the official
SDK (`unitycatalog-client`), and the table read by delta-rs (`deltalake`) with exactly the
credentials handed out.

What is verified here: the server assumes the configured role through STS and hands out its
session credentials in UC's shape; a reader with SELECT gets them and a user without does not;
the credentials read the table; READ credentials cannot write (moto refuses s3:PutObject) nor
read another table's objects (moto refuses s3:GetObject outside the prefix); READ_WRITE ones
write the table. moto evaluates the role's policy, and tests/moto_s3.py makes it intersect
that with the session policy as AWS does, using moto's own Action and Resource matching. Not
verified against a server: the s3:prefix condition on s3:ListBucket (moto evaluates no
StringLike conditions, so a credential could list key names outside its prefix here; it can
read none of them); the session policy's documented semantics on AWS itself. The policy
document is checked by blob/sts_test.cc.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

import pyarrow as pa
import pytest
import requests
from deltalake import DeltaTable, write_deltalake

from conftest import TRAINYARD_BIN
from test_s3_artifacts import moto_s3, s3_env  # noqa: F401 (moto_s3 is a fixture)
from test_unity_catalog import uc_client

UC = "/api/2.1/unity-catalog"
TABLES = "/api/trainyard/v1/tables"
DURATION_S = 900
# How delta-rs reports S3's 403 AccessDenied.
DENIED = "(?i)403|denied|forbidden|lacked the necessary privileges"


@pytest.fixture(scope="module")
def backend() -> str:
    """Credentials do not depend on the metadata store: SQLite only."""
    return "sqlite"


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def raw(server, method: str, path: str, token: str | None = None, **kwargs):
    with server.session(token) as s:
        return s.request(method, server.api(UC + path), timeout=60, **kwargs)


def assert_error(r: requests.Response, status: int, code: str, mentions: str = "") -> None:
    assert r.status_code == status, f"{r.status_code}: {r.text}"
    body = r.json()
    assert body["error_code"] == code, body
    assert mentions in body["message"], body


def grant(server, securable: str, full_name: str, principal: str, *privileges: str) -> None:
    r = raw(server, "PATCH", f"/permissions/{securable}/{full_name}",
            json={"changes": [{"principal": principal, "add": list(privileges)}]})
    assert r.status_code == 200, r.text


def import_rows(server, table: str, rows: list[dict]) -> None:
    body = "".join(json.dumps(x) + "\n" for x in rows).encode()
    r = requests.post(server.api(f"{TABLES}/{table}/import"),
                      params={"format": "jsonl", "mode": "append"}, data=body,
                      headers={"Authorization": f"Bearer {server.token}"}, timeout=120)
    assert r.status_code == 200, r.text


def table_info(server, full_name: str) -> dict:
    r = raw(server, "GET", f"/tables/{full_name}")
    assert r.status_code == 200, r.text
    return r.json()


def table_credentials(server, table_id: str, operation: str, token: str):
    from unitycatalog.client import (GenerateTemporaryTableCredential, TableOperation,
                                     TemporaryCredentialsApi)

    async def body():
        async with uc_client(server, token) as client:
            return await TemporaryCredentialsApi(client).generate_temporary_table_credentials(
                GenerateTemporaryTableCredential(table_id=table_id,
                                                 operation=TableOperation(operation)))
    return asyncio.run(body())


def storage_options(info: dict, creds) -> dict[str, str]:
    """delta-rs's options for exactly the vended credential, plus moto's endpoint."""
    aws = creds.aws_temp_credentials
    return {"AWS_ACCESS_KEY_ID": aws.access_key_id,
            "AWS_SECRET_ACCESS_KEY": aws.secret_access_key,
            "AWS_SESSION_TOKEN": aws.session_token,
            "AWS_ENDPOINT_URL": info["endpoint"], "AWS_REGION": info["region"],
            "AWS_ALLOW_HTTP": "true",
            # delta-rs needs a lock service for concurrent S3 writers; this test has one writer.
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def s3_env_for_server(moto_s3, monkeypatch):  # noqa: F811 (the fixture)
    for key, value in s3_env(moto_s3).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_s3["endpoint"])
    for key in ("AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(key, raising=False)


def test_a_reader_with_select_reads_an_s3_table_with_the_vended_credentials_only(
        moto_s3, s3_env_for_server, server_factory):  # noqa: F811 (the fixture)
    server = server_factory.new(extra_args=[
        "--s3-credentials-role-arn", moto_s3["role_arn"],
        "--s3-credentials-duration", str(DURATION_S)])
    cat, sch = name("cat"), name("sch")
    root = f"s3://{moto_s3['bucket']}/catalogs/{cat}"
    r = raw(server, "POST", "/catalogs", json={"name": cat, "storage_root": root})
    assert r.status_code == 200, r.text
    r = raw(server, "POST", "/schemas", json={"name": sch, "catalog_name": cat})
    assert r.status_code == 200, r.text
    tickets, other = f"{cat}.{sch}.tickets", f"{cat}.{sch}.salaries"
    rows = [{"id": i, "text": f"ticket {i}"} for i in range(1, 6)]
    import_rows(server, tickets, rows)
    import_rows(server, other, [{"id": 1, "text": "secret"}])
    info, other_info = table_info(server, tickets), table_info(server, other)
    assert info["storage_location"].startswith(root + "/"), info
    assert other_info["storage_location"].startswith(root + "/"), other_info

    reader, stranger = name("reader"), name("stranger")
    reader_token, stranger_token = server.create_user(reader), server.create_user(stranger)
    grant(server, "catalog", cat, reader, "USE CATALOG", "USE SCHEMA")
    grant(server, "catalog", cat, stranger, "USE CATALOG", "USE SCHEMA")
    grant(server, "table", tickets, reader, "SELECT")

    before_ms = int(time.time() * 1000)
    creds = table_credentials(server, info["table_id"], "READ", reader_token)
    assert creds.url == info["storage_location"].rstrip("/")
    aws = creds.aws_temp_credentials
    assert aws is not None and aws.access_key_id.startswith("ASIA")
    assert aws.secret_access_key and aws.session_token
    assert aws.access_key_id != moto_s3["access_key_id"]
    # STS's expiry: the configured duration from now.
    assert before_ms + (DURATION_S - 60) * 1000 <= creds.expiration_time
    assert creds.expiration_time <= int(time.time() * 1000) + (DURATION_S + 60) * 1000

    options = storage_options(moto_s3, creds)
    got = DeltaTable(creds.url, storage_options=options).to_pyarrow_table()
    assert sorted_rows(got.select(["id", "text"])) == rows

    # Scoped: another table's objects and writes are refused by S3.
    with pytest.raises(Exception, match=DENIED):
        DeltaTable(other_info["storage_location"], storage_options=options).to_pyarrow_table()
    extra = pa.table({"id": pa.array([99], pa.int64()), "text": ["from delta-rs"]})
    with pytest.raises(Exception, match=DENIED):
        write_deltalake(creds.url, extra, mode="append", storage_options=options)

    # No SELECT, no credential; no MODIFY, no READ_WRITE.
    from unitycatalog.client.exceptions import ApiException
    with pytest.raises(ApiException) as denied:
        table_credentials(server, info["table_id"], "READ", stranger_token)
    assert denied.value.status == 403
    with pytest.raises(ApiException) as denied:
        table_credentials(server, info["table_id"], "READ_WRITE", reader_token)
    assert denied.value.status == 403
    assert_error(raw(server, "POST", "/temporary-table-credentials", stranger_token,
                     json={"table_id": info["table_id"], "operation": "READ"}),
                 403, "PERMISSION_DENIED", "SELECT")

    # With MODIFY, READ_WRITE credentials write the table, and the server reads the commit.
    grant(server, "table", tickets, reader, "MODIFY")
    write = table_credentials(server, info["table_id"], "READ_WRITE", reader_token)
    write_deltalake(write.url, extra, mode="append", storage_options=storage_options(moto_s3, write))
    r = requests.get(server.api(f"{TABLES}/{tickets}/rows"),
                     headers={"Authorization": f"Bearer {server.token}"}, timeout=60)
    assert r.status_code == 200, r.text
    assert "from delta-rs" in r.text

    # Path credentials: a path inside the table is the table's; one in no object's storage is
    # nobody's.
    r = raw(server, "POST", "/temporary-path-credentials", reader_token,
            json={"url": creds.url + "/_delta_log", "operation": "PATH_READ"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["url"] == creds.url + "/_delta_log"
    assert set(body["aws_temp_credentials"]) == {"access_key_id", "secret_access_key",
                                                 "session_token"}
    assert_error(raw(server, "POST", "/temporary-path-credentials", stranger_token,
                     json={"url": creds.url, "operation": "PATH_READ"}),
                 403, "PERMISSION_DENIED")
    assert_error(raw(server, "POST", "/temporary-path-credentials", reader_token,
                     json={"url": f"s3://{moto_s3['bucket']}/elsewhere",
                           "operation": "PATH_READ"}),
                 403, "PERMISSION_DENIED", "no catalog object")


def test_without_a_role_s3_credentials_are_not_issued(server_factory):
    server = server_factory.new()
    cat, sch = name("cat"), name("sch")
    assert raw(server, "POST", "/catalogs", json={"name": cat}).status_code == 200
    assert raw(server, "POST", "/schemas",
               json={"name": sch, "catalog_name": cat}).status_code == 200
    r = raw(server, "POST", "/tables", json={
        "name": "ext", "catalog_name": cat, "schema_name": sch, "table_type": "EXTERNAL",
        "data_source_format": "DELTA", "storage_location": "s3://some-bucket/ext",
        "columns": [{"name": "id", "type_name": "LONG", "type_text": "bigint",
                     "type_json": "{}", "position": 0}]})
    assert r.status_code == 200, r.text
    assert_error(raw(server, "POST", "/temporary-table-credentials",
                     json={"table_id": r.json()["table_id"], "operation": "READ"}),
                 501, "UNIMPLEMENTED", "--s3-credentials-role-arn")


def test_a_bad_role_arn_stops_the_server_with_a_message(tmp_path):
    proc = subprocess.run(
        [str(TRAINYARD_BIN), "server", "--data-dir", str(tmp_path / "d"), "--port", "0",
         "--single-user", "--s3-credentials-role-arn", "arn:aws:iam::1:user/bob"],
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"})
    assert proc.returncode != 0
    assert "--s3-credentials-role-arn must be an IAM role's ARN" in proc.stdout + proc.stderr
