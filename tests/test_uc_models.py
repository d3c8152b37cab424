"""Unity Catalog's registered models, model versions and temporary credentials, against the
real clients: the official Python SDK (`unitycatalog-client`), MLflow's client with
`registry_uri="uc:http://..."` (its Unity Catalog OSS store) registering and loading a model,
and MLflow's own registry API seeing the same models (one registry seen two ways,
docs/decisions/0013). Both metadata backends."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import requests

from conftest import point_mlflow_at, reset_mlflow_state

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


def raw(server, method: str, path: str, token: str | None = None, **kwargs) -> requests.Response:
    with server.session(token) as s:
        return s.request(method, server.api(UC + path), timeout=30, **kwargs)


def make_schema(server, catalog: str, schema: str) -> None:
    r = raw(server, "POST", "/catalogs", json={"name": catalog})
    assert r.status_code == 200, r.text
    r = raw(server, "POST", "/schemas", json={"name": schema, "catalog_name": catalog})
    assert r.status_code == 200, r.text


def assert_error(r: requests.Response, status: int, code: str, mentions: str = "") -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error_code"] == code, body
    assert mentions in body["message"], body


def grant(server, securable: str, full_name: str, principal: str, *privileges: str) -> None:
    r = raw(server, "PATCH", f"/permissions/{securable}/{full_name}",
            json={"changes": [{"principal": principal, "add": list(privileges)}]})
    assert r.status_code == 200, r.text


class Doubler(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        return model_input["x"] * 2


def log_doubler():
    return mlflow.pyfunc.log_model(name="model", python_model=Doubler(),
                                   pip_requirements=["mlflow", "pandas"])


# --- the SDK: models and versions


def test_models_and_versions_through_the_sdk(server):
    from unitycatalog.client import (CreateModelVersion, CreateRegisteredModel,
                                     FinalizeModelVersion, GenerateTemporaryModelVersionCredential,
                                     ModelVersionOperation, ModelVersionsApi, ModelVersionStatus,
                                     RegisteredModelsApi, TemporaryCredentialsApi,
                                     UpdateModelVersion, UpdateRegisteredModel)
    from unitycatalog.client.exceptions import NotFoundException

    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    full = f"{cat}.{sch}.intent_model"

    async def body():
        async with uc_client(server) as client:
            models, versions = RegisteredModelsApi(client), ModelVersionsApi(client)
            creds = TemporaryCredentialsApi(client)
            m = await models.create_registered_model(CreateRegisteredModel(
                name="intent_model", catalog_name=cat, schema_name=sch, comment="routes tickets"))
            assert m.full_name == full and m.comment == "routes tickets" and m.owner == "admin"
            assert m.id and m.storage_location.startswith("file:///")
            assert (await models.get_registered_model(full)).id == m.id
            listed = await models.list_registered_models(catalog_name=cat, schema_name=sch)
            assert [x.full_name for x in listed.registered_models] == [full]
            everywhere = await models.list_registered_models()
            assert full in [x.full_name for x in everywhere.registered_models]

            numbers = []
            for i in range(3):
                v = await versions.create_model_version(CreateModelVersion(
                    model_name="intent_model", catalog_name=cat, schema_name=sch,
                    source=f"s3://elsewhere/model-{i}", comment=f"try {i}"))
                assert v.status == ModelVersionStatus.PENDING_REGISTRATION
                assert v.storage_location == f"{m.storage_location}/versions/{v.version}"
                numbers.append(v.version)
            assert numbers == [1, 2, 3]
            # The client writes the files where the write credential says, then finalizes.
            cred = await creds.generate_temporary_model_version_credentials(
                GenerateTemporaryModelVersionCredential(
                    catalog_name=cat, schema_name=sch, model_name="intent_model", version=1,
                    operation=ModelVersionOperation.READ_WRITE_MODEL_VERSION))
            assert cred.url == f"{m.storage_location}/versions/1"
            assert cred.expiration_time > 1_600_000_000_000
            target = Path(cred.url.removeprefix("file://"))
            target.mkdir(parents=True, exist_ok=True)
            (target / "MLmodel").write_text("flavors: {}\n")
            done = await versions.finalize_model_version(
                full, 1, FinalizeModelVersion(full_name=full, version=1))
            assert done.status == ModelVersionStatus.READY

            seen, token = [], None
            while True:
                page = await versions.list_model_versions(full, max_results=2, page_token=token)
                seen += [v.version for v in page.model_versions]
                token = page.next_page_token
                if not token:
                    break
            assert seen == [1, 2, 3]
            got = await versions.get_model_version(full, 2)
            assert got.source == "s3://elsewhere/model-1" and got.comment == "try 1"
            updated = await versions.update_model_version(full, 2, UpdateModelVersion(
                comment="second try"))
            assert updated.comment == "second try"
            await versions.delete_model_version(full, 3)
            with pytest.raises(NotFoundException):
                await versions.get_model_version(full, 3)

            renamed = await models.update_registered_model(full, UpdateRegisteredModel(
                comment="v2", new_name="router"))
            assert renamed.full_name == f"{cat}.{sch}.router" and renamed.comment == "v2"
            assert (await versions.get_model_version(renamed.full_name, 1)).status == \
                ModelVersionStatus.READY
            await models.delete_registered_model(renamed.full_name, force=True)
            with pytest.raises(NotFoundException):
                await models.get_registered_model(renamed.full_name)

    run(body())


def test_model_lists_page_with_max_results(server):
    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    for i in range(5):
        r = raw(server, "POST", "/models",
                json={"name": f"m{i}", "catalog_name": cat, "schema_name": sch})
        assert r.status_code == 200, r.text
    seen, token = [], None
    for _ in range(10):
        params = {"catalog_name": cat, "schema_name": sch, "max_results": 2}
        if token:
            params["page_token"] = token
        r = raw(server, "GET", "/models", params=params)
        assert r.status_code == 200, r.text
        assert len(r.json()["registered_models"]) <= 2
        seen += [m["name"] for m in r.json()["registered_models"]]
        token = r.json().get("next_page_token")
        if not token:
            break
    assert seen == [f"m{i}" for i in range(5)]


# --- MLflow's client through the UC API, and the same models through MLflow's API


def test_mlflow_registers_and_loads_through_the_uc_api(server, monkeypatch):
    from mlflow import MlflowClient

    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    full = f"{cat}.{sch}.intent_model"
    point_mlflow_at(server, monkeypatch)
    monkeypatch.setenv("MLFLOW_UC_OSS_TOKEN", server.token)
    mlflow.set_registry_uri(f"uc:{server.url}")
    df = pd.DataFrame({"x": [1.0, 2.5]})
    with mlflow.start_run() as active:
        log_doubler()
    mv = mlflow.register_model(f"runs:/{active.info.run_id}/model", full)
    assert (mv.name, str(mv.version)) == (full, "1")
    assert mv.status == "READY"
    model = mlflow.pyfunc.load_model(f"models:/{full}/1")
    assert list(model.predict(df)) == [2.0, 5.0]
    assert MlflowClient().get_registered_model(full).name == full

    # The UC API has it, READY, with its files in the model's storage.
    r = raw(server, "GET", f"/models/{full}/versions/1")
    assert r.status_code == 200, r.text
    version = r.json()
    assert version["status"] == "READY" and version["run_id"] == active.info.run_id
    files = Path(version["storage_location"].removeprefix("file://"))
    assert (files / "MLmodel").is_file()

    # MLflow's own registry API (registry at our server, not uc:) sees the same model and
    # loads the same files.
    reset_mlflow_state()
    point_mlflow_at(server, monkeypatch)
    client = MlflowClient()
    rm = client.get_registered_model(full)
    assert rm.name == full
    got = client.get_model_version(full, "1")
    assert got.status == "READY" and got.run_id == active.info.run_id
    assert client.get_model_version_download_uri(full, "1") == version["storage_location"]
    assert list(mlflow.pyfunc.load_model(f"models:/{full}/1").predict(df)) == [2.0, 5.0]
    client.set_registered_model_alias(full, "champion", "1")
    assert list(mlflow.pyfunc.load_model(f"models:/{full}@champion").predict(df)) == [2.0, 5.0]


def test_a_three_level_model_made_through_mlflow_is_in_the_catalog(server, monkeypatch):
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    point_mlflow_at(server, monkeypatch)
    client = MlflowClient()
    client.create_registered_model(f"{cat}.{sch}.Churn", description="who leaves")
    r = raw(server, "GET", f"/models/{cat}.{sch}.churn")
    assert r.status_code == 200, r.text
    assert r.json()["comment"] == "who leaves" and r.json()["owner"] == "admin"
    # Its schema must exist, as in the catalog; plain names stay MLflow's own.
    with pytest.raises(MlflowException) as missing:
        client.create_registered_model(f"{cat}.nowhere.m")
    assert "nowhere" in str(missing.value)
    plain = name("plain")
    client.create_registered_model(plain)
    listed = raw(server, "GET", "/models", params={"catalog_name": cat, "schema_name": sch})
    assert [m["name"] for m in listed.json()["registered_models"]] == ["churn"]
    # Its grants are the catalog's: MLflow-side grants on it are refused, pointing there.
    with server.session() as s:
        r = s.post(server.api("/api/trainyard/v1/grants/registered_model"),
                   json={"id": f"{cat}.{sch}.churn", "user": "admin", "privilege": "EDIT"},
                   timeout=30)
    assert r.status_code == 400 and "EXECUTE ON MODEL" in r.json()["message"], r.text
    client.rename_registered_model(f"{cat}.{sch}.churn", f"{cat}.{sch}.attrition")
    assert raw(server, "GET", f"/models/{cat}.{sch}.attrition").status_code == 200
    client.delete_registered_model(f"{cat}.{sch}.attrition")
    assert_error(raw(server, "GET", f"/models/{cat}.{sch}.attrition"), 404, "NOT_FOUND")


def test_a_reader_without_execute_is_refused_on_both_apis(server, monkeypatch):
    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    full = f"{cat}.{sch}.m"
    assert raw(server, "POST", "/models",
               json={"name": "m", "catalog_name": cat, "schema_name": sch}).status_code == 200
    assert raw(server, "POST", "/models/versions",
               json={"model_name": "m", "catalog_name": cat, "schema_name": sch,
                     "source": "s3://b/m"}).status_code == 200
    reader = name("reader")
    token = server.create_user(reader)
    grant(server, "catalog", cat, reader, "USE CATALOG", "USE SCHEMA")
    assert_error(raw(server, "GET", f"/models/{full}", token), 403, "PERMISSION_DENIED",
                 "EXECUTE")
    assert_error(raw(server, "GET", f"/models/{full}/versions/1", token), 403,
                 "PERMISSION_DENIED")
    assert_error(raw(server, "POST", "/temporary-model-version-credentials", token,
                     json={"catalog_name": cat, "schema_name": sch, "model_name": "m",
                           "version": 1, "operation": "READ_MODEL_VERSION"}),
                 403, "PERMISSION_DENIED")
    with server.session(token) as s:
        r = s.get(server.api("/api/2.0/mlflow/model-versions/get"),
                  params={"name": full, "version": "1"}, timeout=30)
        assert r.status_code == 403, r.text
        r = s.get(server.api("/api/2.0/mlflow/registered-models/search"), timeout=30)
        assert full not in [m["name"] for m in r.json().get("registered_models", [])]
    assert raw(server, "GET", "/models", token,
               params={"catalog_name": cat, "schema_name": sch}).json() == \
        {"registered_models": []}

    grant(server, "registered_model", full, reader, "EXECUTE")
    assert raw(server, "GET", f"/models/{full}", token).status_code == 200
    with server.session(token) as s:
        r = s.get(server.api("/api/2.0/mlflow/model-versions/get"),
                  params={"name": full, "version": "1"}, timeout=30)
        assert r.status_code == 200, r.text
    # Reading is not changing: no write credential, no new versions.
    assert_error(raw(server, "POST", "/temporary-model-version-credentials", token,
                     json={"catalog_name": cat, "schema_name": sch, "model_name": "m",
                           "version": 1, "operation": "READ_WRITE_MODEL_VERSION"}),
                 403, "PERMISSION_DENIED")
    assert_error(raw(server, "POST", "/models/versions", token,
                     json={"model_name": "m", "catalog_name": cat, "schema_name": sch,
                           "source": "s3://b/m"}), 403, "PERMISSION_DENIED")


def test_bad_input_gets_uc_errors_naming_the_field(server):
    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    full = f"{cat}.{sch}.m"
    assert raw(server, "POST", "/models",
               json={"name": "m", "catalog_name": cat, "schema_name": sch}).status_code == 200
    assert_error(raw(server, "POST", "/models",
                     json={"name": "bad name", "catalog_name": cat, "schema_name": sch}),
                 400, "INVALID_ARGUMENT", "name")
    assert_error(raw(server, "POST", "/models", json={"name": "x", "catalog_name": cat}),
                 400, "INVALID_ARGUMENT", "schema_name")
    assert_error(raw(server, "POST", "/models",
                     json={"name": "m", "catalog_name": cat, "schema_name": sch}),
                 409, "ALREADY_EXISTS")
    assert_error(raw(server, "GET", f"/models/{cat}.{sch}"), 400, "INVALID_ARGUMENT",
                 "full_name")
    assert_error(raw(server, "GET", f"/models/{cat}.{sch}.nope"), 404, "NOT_FOUND")
    assert_error(raw(server, "GET", "/models", params={"catalog_name": cat}), 400,
                 "INVALID_ARGUMENT", "schema_name")
    assert_error(raw(server, "GET", "/models", params={"max_results": -1}), 400,
                 "INVALID_ARGUMENT", "max_results")
    assert_error(raw(server, "GET", f"/models/{full}/versions/7"), 404, "NOT_FOUND")
    assert_error(raw(server, "GET", f"/models/{full}/versions/seven"), 400,
                 "INVALID_ARGUMENT", "version")
    assert_error(raw(server, "PATCH", f"/models/{full}/versions/0/finalize", json={}), 400,
                 "INVALID_ARGUMENT", "version")
    assert_error(raw(server, "POST", "/models/versions",
                     json={"model_name": "m", "catalog_name": cat, "schema_name": sch}),
                 400, "INVALID_ARGUMENT", "source")
    assert_error(raw(server, "POST", "/temporary-model-version-credentials",
                     json={"catalog_name": cat, "schema_name": sch, "model_name": "m",
                           "version": 1, "operation": "DELETE"}),
                 400, "INVALID_ARGUMENT", "operation")
    assert_error(raw(server, "POST", "/temporary-model-version-credentials",
                     json={"catalog_name": cat, "schema_name": sch, "model_name": "m",
                           "version": "x", "operation": "READ_MODEL_VERSION"}),
                 400, "INVALID_ARGUMENT", "version")
    assert_error(raw(server, "POST", "/temporary-volume-credentials",
                     json={"volume_id": "v", "operation": "READ"}),
                 400, "INVALID_ARGUMENT", "operation")
    assert_error(raw(server, "POST", "/temporary-path-credentials",
                     json={"url": "relative/path", "operation": "PATH_READ"}),
                 400, "INVALID_ARGUMENT", "url")
    assert_error(raw(server, "POST", "/temporary-path-credentials",
                     json={"url": "s3://bucket/x", "operation": "PATH_READ"}),
                 403, "PERMISSION_DENIED", "no catalog object")
    # A version being written can be finalized once; a finalized one takes no writes.
    assert raw(server, "POST", "/models/versions",
               json={"model_name": "m", "catalog_name": cat, "schema_name": sch,
                     "source": "s3://b/m"}).status_code == 200
    assert raw(server, "PATCH", f"/models/{full}/versions/1/finalize",
               json={}).status_code == 200
    assert_error(raw(server, "PATCH", f"/models/{full}/versions/1/finalize", json={}), 400,
                 "FAILED_PRECONDITION", "PENDING_REGISTRATION")
    assert_error(raw(server, "DELETE", f"/models/{full}"), 400, "FAILED_PRECONDITION",
                 "force")


# --- volume and path credentials


def test_volume_and_path_credentials(server, tmp_path):
    from unitycatalog.client import (GenerateTemporaryPathCredential,
                                     GenerateTemporaryVolumeCredential, PathOperation,
                                     TemporaryCredentialsApi, VolumeOperation)
    from unitycatalog.client.exceptions import ApiException

    cat, sch = name("cat"), name("sch")
    make_schema(server, cat, sch)
    location = f"file://{tmp_path / 'raw'}"
    r = raw(server, "POST", "/volumes",
            json={"name": "raw", "catalog_name": cat, "schema_name": sch,
                  "volume_type": "EXTERNAL", "storage_location": location})
    assert r.status_code == 200, r.text
    volume_id = r.json()["volume_id"]
    reader = name("reader")
    token = server.create_user(reader)
    grant(server, "catalog", cat, reader, "USE CATALOG", "USE SCHEMA")

    def volume(operation, who=None):
        async def body():
            async with uc_client(server, who) as client:
                return await TemporaryCredentialsApi(client).generate_temporary_volume_credentials(
                    GenerateTemporaryVolumeCredential(volume_id=volume_id, operation=operation))
        return run(body())

    def path(url, operation, who=None):
        async def body():
            async with uc_client(server, who) as client:
                return await TemporaryCredentialsApi(client).generate_temporary_path_credentials(
                    GenerateTemporaryPathCredential(url=url, operation=operation))
        return run(body())

    assert volume(VolumeOperation.WRITE_VOLUME).url == location
    with pytest.raises(ApiException) as denied:
        volume(VolumeOperation.READ_VOLUME, token)
    assert denied.value.status == 403
    grant(server, "volume", f"{cat}.{sch}.raw", reader, "READ VOLUME")
    assert volume(VolumeOperation.READ_VOLUME, token).url == location
    with pytest.raises(ApiException) as write_denied:
        volume(VolumeOperation.WRITE_VOLUME, token)
    assert write_denied.value.status == 403

    inside = f"{location}/2024/part-0.json"
    assert path(inside, PathOperation.PATH_READ, token).url == inside
    with pytest.raises(ApiException) as path_write_denied:
        path(inside, PathOperation.PATH_READ_WRITE, token)
    assert path_write_denied.value.status == 403
    grant(server, "volume", f"{cat}.{sch}.raw", reader, "WRITE FILES")
    assert path(inside, PathOperation.PATH_READ_WRITE, token).url == inside
    # Outside every object's storage, and above the volume's, nobody gets a credential.
    for outside in (f"file://{tmp_path / 'other'}", f"file://{tmp_path}"):
        with pytest.raises(ApiException) as nobody:
            path(outside, PathOperation.PATH_READ)
        assert nobody.value.status == 403
