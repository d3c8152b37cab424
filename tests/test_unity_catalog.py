"""The Unity Catalog REST API against the real clients: the official Python SDK
(`unitycatalog-client` from PyPI), raw HTTP where the SDK hides the error body, and DuckDB's
`unity_catalog` extension (PyPI's `duckdb-extension-unity-catalog`, loaded offline) reading a
Delta table that `deltalake` wrote. Both metadata backends."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import requests

UC = "/api/2.1/unity-catalog"


@asynccontextmanager
async def uc_client(server, token: str | None = None):
    from unitycatalog.client import ApiClient, Configuration

    config = Configuration(host=server.url + UC)
    async with ApiClient(config, header_name="Authorization",
                         header_value=f"Bearer {token or server.token}") as client:
        yield client


def run(coro):
    return asyncio.run(coro)


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def column(col: str, type_name: str, type_text: str, json_type: str, position: int,
           partition_index: int | None = None):
    from unitycatalog.client import ColumnInfo, ColumnTypeName

    return ColumnInfo(name=col, type_name=ColumnTypeName(type_name), type_text=type_text,
                      type_json=json.dumps({"name": col, "type": json_type, "nullable": True,
                                            "metadata": {}}),
                      position=position, nullable=True, partition_index=partition_index)


def raw(server, method: str, path: str, token: str | None = None, **kwargs) -> requests.Response:
    with server.session(token) as s:
        return s.request(method, server.api(UC + path), timeout=30, **kwargs)


def make_schema(server, catalog: str, schema: str) -> None:
    r = raw(server, "POST", "/catalogs", json={"name": catalog})
    assert r.status_code == 200, r.text
    r = raw(server, "POST", "/schemas", json={"name": schema, "catalog_name": catalog})
    assert r.status_code == 200, r.text


# --- the SDK: create, list, get, update, delete


def test_catalogs_and_schemas_through_the_sdk(server):
    from unitycatalog.client import (CatalogsApi, CreateCatalog, CreateSchema, SchemasApi,
                                     UpdateCatalog, UpdateSchema)
    from unitycatalog.client.exceptions import NotFoundException

    cat, renamed, sch = name("cat"), name("renamed"), name("sch")

    async def body():
        async with uc_client(server) as client:
            catalogs, schemas = CatalogsApi(client), SchemasApi(client)
            created = await catalogs.create_catalog(
                CreateCatalog(name=cat, comment="support data", properties={"team": "ml"}))
            assert created.name == cat and created.comment == "support data"
            assert created.properties == {"team": "ml"}
            assert created.owner == "admin" and created.id
            assert created.created_at > 1_600_000_000_000  # epoch milliseconds
            got = await catalogs.get_catalog(cat)
            assert got.id == created.id
            listed = await catalogs.list_catalogs()
            assert cat in [c.name for c in listed.catalogs]
            updated = await catalogs.update_catalog(
                cat, UpdateCatalog(comment="all support data", new_name=renamed))
            assert updated.name == renamed and updated.comment == "all support data"
            with pytest.raises(NotFoundException):
                await catalogs.get_catalog(cat)

            s = await schemas.create_schema(CreateSchema(name=sch, catalog_name=renamed,
                                                         comment="tickets"))
            assert s.full_name == f"{renamed}.{sch}" and s.catalog_name == renamed
            assert s.schema_id
            listed_schemas = await schemas.list_schemas(catalog_name=renamed)
            assert [x.full_name for x in listed_schemas.schemas] == [f"{renamed}.{sch}"]
            s2 = await schemas.update_schema(f"{renamed}.{sch}",
                                             UpdateSchema(properties={"pii": "yes"}))
            assert s2.properties == {"pii": "yes"}
            assert (await schemas.get_schema(f"{renamed}.{sch}")).properties == {"pii": "yes"}
            await schemas.delete_schema(f"{renamed}.{sch}")
            with pytest.raises(NotFoundException):
                await schemas.get_schema(f"{renamed}.{sch}")
            await catalogs.delete_catalog(renamed)
            with pytest.raises(NotFoundException):
                await catalogs.get_catalog(renamed)

    run(body())


def test_tables_with_columns_through_the_sdk(server, tmp_path):
    from unitycatalog.client import (CreateTable, DataSourceFormat, TablesApi, TableType)
    from unitycatalog.client.exceptions import NotFoundException

    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    location = str(tmp_path / "tickets")

    async def body():
        async with uc_client(server) as client:
            tables = TablesApi(client)
            columns = [column("id", "LONG", "bigint", "long", 0),
                       column("text", "STRING", "string", "string", 1),
                       column("day", "DATE", "date", "date", 2, partition_index=0)]
            t = await tables.create_table(CreateTable(
                name="tickets", catalog_name=cat, schema_name=sch, table_type=TableType.EXTERNAL,
                data_source_format=DataSourceFormat.DELTA, columns=columns,
                storage_location=location, comment="raw tickets", properties={"k": "v"}))
            assert t.table_type == TableType.EXTERNAL
            assert t.data_source_format == DataSourceFormat.DELTA
            assert t.table_id and t.storage_location.rstrip("/").endswith("tickets")
            got = await tables.get_table(f"{cat}.{sch}.tickets")
            assert [c.name for c in got.columns] == ["id", "text", "day"]
            assert [c.position for c in got.columns] == [0, 1, 2]
            assert got.columns[0].type_name.value == "LONG"
            assert got.columns[0].type_text == "bigint"
            assert json.loads(got.columns[0].type_json)["type"] == "long"
            assert got.columns[2].partition_index == 0
            assert got.columns[0].partition_index is None
            assert got.properties == {"k": "v"} and got.comment == "raw tickets"
            listed = await tables.list_tables(catalog_name=cat, schema_name=sch)
            assert [x.name for x in listed.tables] == ["tickets"]
            managed = await tables.create_table(CreateTable(
                name="managed", catalog_name=cat, schema_name=sch, table_type=TableType.MANAGED,
                data_source_format=DataSourceFormat.DELTA, columns=columns[:1]))
            assert managed.table_type == TableType.MANAGED and managed.storage_location
            await tables.delete_table(f"{cat}.{sch}.tickets")
            with pytest.raises(NotFoundException):
                await tables.get_table(f"{cat}.{sch}.tickets")

    run(body())


def test_volumes_and_functions_through_the_sdk(server, tmp_path):
    from unitycatalog.client import (CreateFunction, CreateFunctionRequest,
                                     CreateVolumeRequestContent, FunctionParameterInfo,
                                     FunctionParameterInfos, FunctionsApi,
                                     UpdateVolumeRequestContent, VolumesApi, VolumeType)
    from unitycatalog.client.exceptions import NotFoundException

    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)

    async def body():
        async with uc_client(server) as client:
            volumes, functions = VolumesApi(client), FunctionsApi(client)
            v = await volumes.create_volume(CreateVolumeRequestContent(
                catalog_name=cat, schema_name=sch, name="raw", volume_type=VolumeType.EXTERNAL,
                storage_location=str(tmp_path / "raw"), comment="raw files"))
            assert v.full_name == f"{cat}.{sch}.raw" and v.volume_id
            assert v.volume_type == VolumeType.EXTERNAL
            listed = await volumes.list_volumes(catalog_name=cat, schema_name=sch)
            assert [x.name for x in listed.volumes] == ["raw"]
            v2 = await volumes.update_volume(f"{cat}.{sch}.raw",
                                             UpdateVolumeRequestContent(comment="renamed",
                                                                        new_name="raw2"))
            assert v2.name == "raw2" and v2.comment == "renamed"
            await volumes.delete_volume(f"{cat}.{sch}.raw2")
            with pytest.raises(NotFoundException):
                await volumes.get_volume(f"{cat}.{sch}.raw2")

            param = FunctionParameterInfo(name="x", type_text="int", type_json='{"type":"int"}',
                                          type_name="INT", position=0)
            f = await functions.create_function(CreateFunctionRequest(function_info=CreateFunction(
                name="add_one", catalog_name=cat, schema_name=sch,
                input_params=FunctionParameterInfos(parameters=[param]), data_type="INT",
                full_data_type="INT", routine_body="EXTERNAL", routine_definition="return x + 1",
                parameter_style="S", is_deterministic=True, sql_data_access="NO_SQL",
                is_null_call=False, security_type="DEFINER", specific_name="add_one",
                external_language="python", properties='{"a": "b"}')))
            assert f.full_name == f"{cat}.{sch}.add_one" and f.function_id
            got = await functions.get_function(f"{cat}.{sch}.add_one")
            assert got.routine_definition == "return x + 1"
            assert got.input_params.parameters[0].name == "x"
            assert json.loads(got.properties) == {"a": "b"}
            listed_f = await functions.list_functions(catalog_name=cat, schema_name=sch)
            assert [x.name for x in listed_f.functions] == ["add_one"]
            await functions.delete_function(f"{cat}.{sch}.add_one")
            with pytest.raises(NotFoundException):
                await functions.get_function(f"{cat}.{sch}.add_one")

    run(body())


def test_paging_returns_every_item_once(server):
    from unitycatalog.client import SchemasApi

    cat = name("cat")
    r = raw(server, "POST", "/catalogs", json={"name": cat})
    assert r.status_code == 200, r.text
    want = sorted(name("s") for _ in range(7))
    for s in want:
        r = raw(server, "POST", "/schemas", json={"name": s, "catalog_name": cat})
        assert r.status_code == 200, r.text

    async def body():
        async with uc_client(server) as client:
            api = SchemasApi(client)
            seen, token, pages = [], None, 0
            while True:
                page = await api.list_schemas(catalog_name=cat, max_results=3, page_token=token)
                assert len(page.schemas) <= 3
                seen += [s.name for s in page.schemas]
                pages += 1
                token = page.next_page_token
                if not token:
                    break
            assert sorted(seen) == want and pages == 3

    run(body())
    # More than 100 asked: at most 100 come back (the rest on later pages).
    for i in range(101 - 7):
        r = raw(server, "POST", "/schemas", json={"name": f"bulk{i}", "catalog_name": cat})
        assert r.status_code == 200, r.text
    r = raw(server, "GET", "/schemas", params={"catalog_name": cat, "max_results": 500})
    assert r.status_code == 200, r.text
    assert len(r.json()["schemas"]) == 100 and r.json()["next_page_token"]
    r2 = raw(server, "GET", "/schemas", params={"catalog_name": cat,
                                                "page_token": r.json()["next_page_token"]})
    assert len(r2.json()["schemas"]) == 1 and not r2.json().get("next_page_token")


def test_permissions_get_and_update_through_the_sdk(server):
    from unitycatalog.client import (GrantsApi, PermissionsChange, Privilege, SecurableType,
                                     UpdatePermissions)

    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    user = name("perm")
    server.create_user(user)

    async def body():
        async with uc_client(server) as client:
            grants = GrantsApi(client)
            empty = await grants.get(SecurableType.SCHEMA, f"{cat}.{sch}")
            assert empty.privilege_assignments == []
            after = await grants.update(SecurableType.SCHEMA, f"{cat}.{sch}", UpdatePermissions(
                changes=[PermissionsChange(principal=user,
                                           add=[Privilege.USE_SCHEMA, Privilege.SELECT],
                                           remove=[])]))
            assert [(a.principal, sorted(p.value for p in a.privileges))
                    for a in after.privilege_assignments] == [(user, ["SELECT", "USE SCHEMA"])]
            got = await grants.get(SecurableType.SCHEMA, f"{cat}.{sch}", principal=user)
            assert sorted(p.value for p in got.privilege_assignments[0].privileges) == \
                ["SELECT", "USE SCHEMA"]
            removed = await grants.update(SecurableType.SCHEMA, f"{cat}.{sch}", UpdatePermissions(
                changes=[PermissionsChange(principal=user, add=[], remove=[Privilege.SELECT])]))
            assert [p.value for p in removed.privilege_assignments[0].privileges] == \
                ["USE SCHEMA"]

    run(body())


# --- errors: UC's codes and bodies


def assert_error(r: requests.Response, status: int, code: str, mentions: str = "") -> None:
    assert r.status_code == status, f"{r.status_code}: {r.text}"
    body = r.json()
    assert body["error_code"] == code, body
    assert mentions in body["message"], body


def test_error_codes_and_bodies(server):
    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    assert_error(raw(server, "GET", f"/catalogs/{name('nope')}"), 404, "NOT_FOUND")
    assert_error(raw(server, "GET", f"/tables/{cat}.{sch}.nope"), 404, "NOT_FOUND")
    assert_error(raw(server, "POST", "/catalogs", json={"name": cat}), 409, "ALREADY_EXISTS")
    assert_error(raw(server, "POST", "/schemas", json={"name": sch, "catalog_name": cat}), 409,
                 "ALREADY_EXISTS")
    assert_error(raw(server, "POST", "/catalogs", json={"name": "bad name!"}), 400,
                 "INVALID_ARGUMENT", "name")
    assert_error(raw(server, "POST", "/catalogs", json={"comment": "no name"}), 400,
                 "INVALID_ARGUMENT", "name")
    assert_error(raw(server, "POST", "/catalogs", data="{not json",
                     headers={"Content-Type": "application/json"}), 400, "INVALID_ARGUMENT")
    assert_error(raw(server, "POST", "/tables", json={
        "name": "t", "catalog_name": cat, "schema_name": sch, "table_type": "MANAGED",
        "columns": [{"name": "a", "position": "first"}]}), 400, "INVALID_ARGUMENT", "columns[0]")
    assert_error(raw(server, "GET", f"/permissions/galaxy/{cat}"), 400, "INVALID_ARGUMENT",
                 "securable_type")
    assert_error(raw(server, "PATCH", f"/permissions/catalog/{cat}", json={"changes": "all"}),
                 400, "INVALID_ARGUMENT", "changes")
    assert_error(raw(server, "PATCH", f"/permissions/catalog/{cat}", json={
        "changes": [{"principal": "admin", "add": ["SELCT"]}]}), 400, "INVALID_ARGUMENT",
        "changes[0].add[0]")
    assert_error(raw(server, "PATCH", f"/permissions/catalog/{cat}", json={
        "changes": [{"principal": name("ghost"), "add": ["USE CATALOG"]}]}), 400,
        "INVALID_ARGUMENT", "principal")
    assert_error(raw(server, "GET", "/schemas"), 400, "INVALID_ARGUMENT", "catalog_name")
    assert_error(raw(server, "GET", "/catalogs", params={"max_results": -1}), 400,
                 "INVALID_ARGUMENT", "max_results")
    # Not empty: deleting needs force.
    r = raw(server, "DELETE", f"/catalogs/{cat}")
    assert r.status_code == 400 and r.json()["error_code"] in ("FAILED_PRECONDITION",
                                                               "INVALID_ARGUMENT"), r.text
    assert raw(server, "DELETE", f"/catalogs/{cat}", params={"force": "true"}).status_code == 200
    # No token, a bad token.
    r = requests.get(server.api(UC + "/catalogs"), timeout=30)
    assert_error(r, 401, "UNAUTHENTICATED")
    assert_error(raw(server, "GET", "/catalogs", token="ty_bogus_token"), 401, "UNAUTHENTICATED")


def test_sdk_raises_typed_errors(server):
    from unitycatalog.client import CatalogsApi, CreateCatalog
    from unitycatalog.client.exceptions import ApiException, NotFoundException

    cat = name("cat")

    async def body():
        async with uc_client(server) as client:
            api = CatalogsApi(client)
            await api.create_catalog(CreateCatalog(name=cat))
            with pytest.raises(ApiException) as dup:
                await api.create_catalog(CreateCatalog(name=cat))
            assert dup.value.status == 409
            assert json.loads(dup.value.body)["error_code"] == "ALREADY_EXISTS"
            with pytest.raises(NotFoundException):
                await api.get_catalog(name("missing"))
        async with uc_client(server, token="ty_not_a_token") as client:
            with pytest.raises(ApiException) as unauth:
                await CatalogsApi(client).list_catalogs()
            assert unauth.value.status == 401

    run(body())


# --- two ordinary users: grants, inheritance, revocation on the next request


def test_grants_inheritance_groups_and_revocation(server):
    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    r = raw(server, "POST", "/tables", json={
        "name": "tickets", "catalog_name": cat, "schema_name": sch, "table_type": "MANAGED",
        "data_source_format": "DELTA",
        "columns": [{"name": "id", "type_name": "LONG", "type_text": "bigint",
                     "type_json": "{}", "position": 0}]})
    assert r.status_code == 200, r.text
    table = f"{cat}.{sch}.tickets"
    alice, bob = name("alice"), name("bob")
    alice_token, bob_token = server.create_user(alice), server.create_user(bob)

    def change(type_: str, full_name: str, principal: str, add=(), remove=()):
        r = raw(server, "PATCH", f"/permissions/{type_}/{full_name}", json={
            "changes": [{"principal": principal, "add": list(add), "remove": list(remove)}]})
        assert r.status_code == 200, r.text

    def status(token: str) -> int:
        return raw(server, "GET", f"/tables/{table}", token=token).status_code

    assert_error(raw(server, "GET", f"/tables/{table}", token=alice_token), 403,
                 "PERMISSION_DENIED")
    # A stranger may not grant.
    r = raw(server, "PATCH", f"/permissions/table/{table}", token=alice_token,
            json={"changes": [{"principal": alice, "add": ["SELECT"]}]})
    assert_error(r, 403, "PERMISSION_DENIED")
    # SELECT granted on the catalog is inherited by its tables; USE CATALOG/SCHEMA are needed.
    change("catalog", cat, alice, add=["USE CATALOG", "SELECT"])
    assert status(alice_token) == 403  # no USE SCHEMA yet
    change("schema", f"{cat}.{sch}", alice, add=["USE SCHEMA"])
    assert status(alice_token) == 200
    assert status(bob_token) == 403
    # Listing needs USE CATALOG and USE SCHEMA; a list shows only what the caller may read.
    listing = {"catalog_name": cat, "schema_name": sch}
    assert_error(raw(server, "GET", "/tables", token=bob_token, params=listing), 403,
                 "PERMISSION_DENIED")
    r = raw(server, "GET", "/tables", token=alice_token, params=listing)
    assert [t["name"] for t in r.json()["tables"]] == ["tickets"], r.text
    change("schema", f"{cat}.{sch}", bob, add=["USE SCHEMA"])
    change("catalog", cat, bob, add=["USE CATALOG"])
    r = raw(server, "GET", "/tables", token=bob_token, params=listing)
    assert r.status_code == 200 and r.json().get("tables", []) == [], r.text
    change("schema", f"{cat}.{sch}", bob, remove=["USE SCHEMA"])
    change("catalog", cat, bob, remove=["USE CATALOG"])
    # A group's grants reach its members.
    group = name("readers")
    with server.session() as s:
        r = s.post(server.api("/api/trainyard/v1/groups"), json={"name": group}, timeout=30)
        assert r.status_code == 200, r.text
        r = s.post(server.api(f"/api/trainyard/v1/groups/{group}/members"),
                   json={"member": bob}, timeout=30)
        assert r.status_code == 200, r.text
    change("catalog", cat, group, add=["USE CATALOG", "USE SCHEMA", "SELECT"])
    assert status(bob_token) == 200
    # Revocation takes effect on the next request.
    change("catalog", cat, alice, remove=["SELECT"])
    assert_error(raw(server, "GET", f"/tables/{table}", token=alice_token), 403,
                 "PERMISSION_DENIED")
    with server.session() as s:
        r = s.delete(server.api(f"/api/trainyard/v1/groups/{group}/members/{bob}"), timeout=30)
        assert r.status_code == 200, r.text
    assert status(bob_token) == 403


# --- DuckDB's unity_catalog extension: ATTACH our server and SELECT from a Delta table


def duckdb_with_uc_extension():
    import duckdb
    import duckdb_ext
    import duckdb_extension_unity_catalog

    version = duckdb.__version__
    uc_ext = Path(duckdb_extension_unity_catalog.__file__).parent / "extensions" / \
        f"v{version}" / "unity_catalog.duckdb_extension"
    delta_ext = Path(duckdb_ext.__path__[0]) / "extensions" / f"v{version}" / "linux_amd64" / \
        "delta.duckdb_extension"
    assert uc_ext.exists(), f"{uc_ext} missing: pip install duckdb-extension-unity-catalog"
    assert delta_ext.exists(), f"{delta_ext} missing: pip install duckdb-ext-delta"
    # The extension creates an S3 secret for every table it reads, which needs httpfs.
    httpfs_ext = delta_ext.parent / "httpfs.duckdb_extension"
    assert httpfs_ext.exists(), f"{httpfs_ext} missing: pip install duckdb-ext-httpfs"
    con = duckdb.connect(config={"allow_unsigned_extensions": "true",
                                 "autoinstall_known_extensions": "false",
                                 "autoload_known_extensions": "false"})
    con.execute(f"LOAD '{httpfs_ext}'")
    con.execute(f"LOAD '{delta_ext}'")
    con.execute(f"LOAD '{uc_ext}'")
    return con


def test_duckdb_attaches_our_catalog_and_selects_a_delta_table(server, tmp_path):
    import deltalake
    import pyarrow as pa

    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    location = tmp_path / "tickets_delta"
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                     "text": pa.array(["printer jam", "refund", "login"], pa.string())})
    deltalake.write_deltalake(str(location), data)
    deltalake.write_deltalake(str(location), pa.table({
        "id": pa.array([4], pa.int64()), "text": pa.array(["vpn"], pa.string())}), mode="append")
    r = raw(server, "POST", "/tables", json={
        "name": "tickets", "catalog_name": cat, "schema_name": sch, "table_type": "EXTERNAL",
        "data_source_format": "DELTA", "storage_location": f"file://{location}",
        "columns": [
            {"name": "id", "type_name": "LONG", "type_text": "bigint", "position": 0,
             "type_json": json.dumps({"name": "id", "type": "long", "nullable": True,
                                      "metadata": {}})},
            {"name": "text", "type_name": "STRING", "type_text": "string", "position": 1,
             "type_json": json.dumps({"name": "text", "type": "string", "nullable": True,
                                      "metadata": {}})}]})
    assert r.status_code == 200, r.text

    con = duckdb_with_uc_extension()
    con.execute(f"CREATE SECRET (TYPE UC, TOKEN '{server.token}', ENDPOINT '{server.url}', "
                "AWS_REGION 'us-east-1')")
    con.execute(f"ATTACH '{cat}' AS uc (TYPE UC_CATALOG)")
    rows = con.execute(f"SELECT id, text FROM uc.{sch}.tickets ORDER BY id").fetchall()
    assert rows == [(1, "printer jam"), (2, "refund"), (3, "login"), (4, "vpn")]
    tables = {t[0] for t in con.execute(
        f"SELECT table_name FROM duckdb_tables() WHERE database_name = 'uc'").fetchall()}
    assert "tickets" in tables
    con.close()

    # A user without SELECT cannot read it through DuckDB either.
    reader = name("reader")
    token = server.create_user(reader)
    con = duckdb_with_uc_extension()
    con.execute(f"CREATE SECRET (TYPE UC, TOKEN '{token}', ENDPOINT '{server.url}', "
                "AWS_REGION 'us-east-1')")
    try:
        con.execute(f"ATTACH '{cat}' AS uc (TYPE UC_CATALOG)")
        with pytest.raises(Exception):
            con.execute(f"SELECT id FROM uc.{sch}.tickets").fetchall()
    finally:
        con.close()


def test_temporary_table_credentials_for_local_tables(server, tmp_path):
    from unitycatalog.client import (GenerateTemporaryTableCredential, TableOperation,
                                     TemporaryCredentialsApi)
    from unitycatalog.client.exceptions import ApiException

    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    location = f"file://{tmp_path / 'creds'}"
    r = raw(server, "POST", "/tables", json={
        "name": "t", "catalog_name": cat, "schema_name": sch, "table_type": "EXTERNAL",
        "data_source_format": "DELTA", "storage_location": location,
        "columns": [{"name": "id", "type_name": "LONG", "type_text": "bigint",
                     "type_json": "{}", "position": 0}]})
    assert r.status_code == 200, r.text
    table_id = r.json()["table_id"]
    reader = name("reader")
    token = server.create_user(reader)

    def ask(operation, who=None):
        async def body():
            async with uc_client(server, who) as client:
                return await TemporaryCredentialsApi(client).generate_temporary_table_credentials(
                    GenerateTemporaryTableCredential(table_id=table_id, operation=operation))
        return run(body())

    creds = ask(TableOperation.READ)
    assert creds.url.rstrip("/") == location.rstrip("/")
    assert creds.expiration_time > 1_600_000_000_000
    with pytest.raises(ApiException) as denied:
        ask(TableOperation.READ, token)
    assert denied.value.status == 403
    r = raw(server, "PATCH", f"/permissions/catalog/{cat}", json={"changes": [
        {"principal": reader, "add": ["USE CATALOG", "USE SCHEMA", "SELECT"]}]})
    assert r.status_code == 200, r.text
    assert ask(TableOperation.READ, token).url.rstrip("/") == location.rstrip("/")
    with pytest.raises(ApiException) as write_denied:
        ask(TableOperation.READ_WRITE, token)
    assert write_denied.value.status == 403
    assert_error(raw(server, "POST", "/temporary-table-credentials",
                     json={"table_id": "no-such-id", "operation": "READ"}), 404, "NOT_FOUND")
    assert_error(raw(server, "POST", "/temporary-table-credentials",
                     json={"table_id": table_id, "operation": "DELETE"}), 400,
                 "INVALID_ARGUMENT", "operation")
