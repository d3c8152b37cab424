"""Authentication, authorization and hostile input against a real server (both backends).

Plain HTTP (requests / http.client) where the mlflow client would refuse to send the input, the
mlflow client where it matters that the client sees the right error.
"""

from __future__ import annotations

import http.client
import json
import time
import uuid

import pytest
import requests
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

MLFLOW = "/api/2.0/mlflow"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"
TY = "/api/trainyard/v1"


def error_of(r: requests.Response, status: int, code: str | None = None, *fragments: str) -> dict:
    """Asserts an error answer: HTTP status, MLflow error_code, a message naming the problem."""
    assert r.status_code == status, f"HTTP {r.status_code} (want {status}): {r.text[:500]}"
    body = r.json()
    assert isinstance(body.get("message"), str) and body["message"], body
    if code is not None:
        assert body.get("error_code") == code, body
    for fragment in fragments:
        assert fragment.lower() in body["message"].lower(), \
            f"message does not mention {fragment!r}: {body['message']}"
    return body


def ok(r: requests.Response) -> dict:
    assert r.status_code == 200, f"HTTP {r.status_code}: {r.text[:500]}"
    return r.json()



@pytest.fixture(scope="module")
def fixture_run(server, admin):
    """An experiment and a run owned by the admin."""
    eid = ok(admin.post(server.api(f"{MLFLOW}/experiments/create"),
                        json={"name": f"owned-by-admin-{uuid.uuid4().hex[:8]}"}))["experiment_id"]
    run = ok(admin.post(server.api(f"{MLFLOW}/runs/create"),
                        json={"experiment_id": eid, "run_name": "admin-run"}))["run"]
    return eid, run["info"]["run_id"]


def log_metric(s, server, run_id, key="m", value=1.0, step=0):
    return s.post(server.api(f"{MLFLOW}/runs/log-metric"),
                  json={"run_id": run_id, "key": key, "value": value, "timestamp": 1, "step": step})


def raw_request(server, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None) -> tuple[int, bytes]:
    """Sends `path` exactly as given (requests and urllib3 would normalize dot segments)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        h = {"Authorization": f"Bearer {server.token}"}
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def assert_server_healthy(server, admin, fixture_run):
    eid, rid = fixture_run
    assert requests.get(server.api("/health"), timeout=10).status_code == 200
    got = ok(admin.get(server.api(f"{MLFLOW}/runs/get"), params={"run_id": rid}))
    assert got["run"]["info"]["experiment_id"] == eid
    ok(admin.post(server.api(f"{MLFLOW}/runs/search"),
                  json={"experiment_ids": [eid], "max_results": 10}))


# --- authentication


def test_health_needs_no_token(server):
    r = requests.get(server.api("/health"), timeout=10)
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer not-a-real-token"},
    {"Authorization": "Bearer "},
    {"Authorization": "Basic YWRtaW46cGFzc3dvcmQ="},
    {"Authorization": "not-even-a-scheme"},
])
@pytest.mark.parametrize("method, path", [
    ("GET", f"{MLFLOW}/experiments/search"),
    ("POST", f"{MLFLOW}/experiments/create"),
    ("GET", f"{ARTIFACTS}?path=1"),
    ("PUT", f"{ARTIFACTS}/1/x.txt"),
    ("GET", f"{TY}/tokens"),
    ("GET", f"{MLFLOW}/registered-models/search"),
])
def test_unauthenticated_requests_get_401(server, headers, method, path):
    r = requests.request(method, server.api(path), headers=headers,
                         data=b'{"name": "x"}' if method != "GET" else None, timeout=10)
    body = error_of(r, 401, "UNAUTHENTICATED")
    assert "bearer" in r.headers.get("WWW-Authenticate", "").lower()
    assert "token" in body["message"].lower()


def test_admin_token_is_the_admin(server, admin):
    assert ok(admin.get(server.api(f"{TY}/whoami"))) == {"user": "admin", "is_admin": True}


def test_mlflow_client_with_a_bad_token_fails(server, monkeypatch):
    from conftest import point_mlflow_at

    point_mlflow_at(server, monkeypatch, token="bogus")
    with pytest.raises(MlflowException) as info:
        MlflowClient().search_experiments()
    assert "401" in str(info.value) or "UNAUTHENTICATED" in str(info.value)


# --- authorization


def test_second_user_reads_but_cannot_write_until_granted(server, admin, fixture_run,
                                                          monkeypatch, tmp_path):
    eid, rid = fixture_run
    name = f"bob{uuid.uuid4().hex[:6]}"
    bob = server.session(server.create_user(name))
    assert ok(bob.get(server.api(f"{TY}/whoami"))) == {"user": name, "is_admin": False}
    ok(log_metric(admin, server, rid, "m", 1.0))
    ok(admin.put(server.api(f"{ARTIFACTS}/{eid}/{rid}/artifacts/admin.txt"), data=b"hi"))

    # Reads are open to every authenticated user.
    assert ok(bob.get(server.api(f"{MLFLOW}/experiments/get"),
                      params={"experiment_id": eid}))["experiment"]["name"]
    assert ok(bob.get(server.api(f"{MLFLOW}/runs/get"), params={"run_id": rid}))
    assert ok(bob.post(server.api(f"{MLFLOW}/runs/search"), json={"experiment_ids": [eid]}))[
        "runs"]
    assert ok(bob.get(server.api(f"{MLFLOW}/metrics/get-history"),
                      params={"run_id": rid, "metric_key": "m", "max_results": 100}))["metrics"]
    assert bob.get(server.api(f"{ARTIFACTS}/{eid}/{rid}/artifacts/admin.txt")).content == b"hi"
    assert ok(bob.get(server.api(ARTIFACTS), params={"path": f"{eid}/{rid}/artifacts"}))["files"]

    # Writes to the admin's experiment, its runs and artifacts are denied.
    writes = [
        ("post", f"{MLFLOW}/runs/log-metric",
         {"run_id": rid, "key": "m", "value": 2.0, "timestamp": 1, "step": 1}),
        ("post", f"{MLFLOW}/runs/log-parameter", {"run_id": rid, "key": "p", "value": "v"}),
        ("post", f"{MLFLOW}/runs/set-tag", {"run_id": rid, "key": "t", "value": "v"}),
        ("post", f"{MLFLOW}/runs/log-batch",
         {"run_id": rid, "metrics": [{"key": "b", "value": 1, "timestamp": 1, "step": 0}]}),
        ("post", f"{MLFLOW}/runs/update", {"run_id": rid, "status": "FINISHED"}),
        ("post", f"{MLFLOW}/runs/delete", {"run_id": rid}),
        ("post", f"{MLFLOW}/runs/create", {"experiment_id": eid}),
        ("post", f"{MLFLOW}/experiments/update", {"experiment_id": eid, "new_name": "stolen"}),
        ("post", f"{MLFLOW}/experiments/set-experiment-tag",
         {"experiment_id": eid, "key": "k", "value": "v"}),
        ("post", f"{MLFLOW}/experiments/delete", {"experiment_id": eid}),
        ("post", f"{MLFLOW}/logged-models", {"experiment_id": eid, "name": "m"}),
        ("post", f"{TY}/grants/experiment", {"id": eid, "user": name, "privilege": "EDIT"}),
    ]
    for method, path, body in writes:
        r = getattr(bob, method)(server.api(path), json=body)
        error_of(r, 403, "PERMISSION_DENIED", name)
    r = bob.put(server.api(f"{ARTIFACTS}/{eid}/{rid}/artifacts/bob.txt"), data=b"nope")
    error_of(r, 403, "PERMISSION_DENIED")
    r = bob.delete(server.api(f"{ARTIFACTS}/{eid}/{rid}/artifacts/admin.txt"))
    error_of(r, 403, "PERMISSION_DENIED")
    # Admin-only endpoints.
    error_of(bob.post(server.api(f"{TY}/users"), json={"name": "mallory"}), 403,
             "PERMISSION_DENIED")
    error_of(bob.post(server.api(f"{TY}/tokens"), json={"user": "admin"}), 403,
             "PERMISSION_DENIED")

    # Nothing changed.
    run = ok(admin.get(server.api(f"{MLFLOW}/runs/get"), params={"run_id": rid}))["run"]
    assert run["info"]["lifecycle_stage"] == "active"
    assert "params" not in run["data"] or not run["data"]["params"]
    assert admin.get(server.api(f"{ARTIFACTS}/{eid}/{rid}/artifacts/admin.txt")).content == b"hi"
    assert admin.get(server.api(f"{ARTIFACTS}/{eid}/{rid}/artifacts/bob.txt")).status_code == 404
    assert ok(admin.get(server.api(f"{MLFLOW}/experiments/get"),
                        params={"experiment_id": eid}))["experiment"]["name"] != "stolen"

    # The mlflow client sees the same.
    from conftest import point_mlflow_at

    point_mlflow_at(server, monkeypatch, token=bob.headers["Authorization"][7:])
    client = MlflowClient()
    with pytest.raises(MlflowException) as info:
        client.log_metric(rid, "m", 3.0)
    assert info.value.error_code == "PERMISSION_DENIED"
    assert client.get_run(rid).info.run_id == rid

    # Bob owns what he creates.
    own = client.create_experiment(f"bobs-{uuid.uuid4().hex[:6]}")
    own_run = client.create_run(own)
    client.log_metric(own_run.info.run_id, "mine", 1.0)
    path = tmp_path / "bob.txt"
    path.write_text("bob's")
    client.log_artifact(own_run.info.run_id, str(path))
    assert [f.path for f in client.list_artifacts(own_run.info.run_id)] == ["bob.txt"]

    # After a grant, Bob may write.
    ok(admin.post(server.api(f"{TY}/grants/experiment"),
                  json={"id": eid, "user": name, "privilege": "EDIT"}))
    ok(log_metric(bob, server, rid, "m", 2.0, step=1))
    ok(bob.post(server.api(f"{MLFLOW}/runs/set-tag"), json={"run_id": rid, "key": "by",
                                                             "value": name}))
    ok(bob.put(server.api(f"{ARTIFACTS}/{eid}/{rid}/artifacts/bob.txt"), data=b"granted"))
    new_run = ok(bob.post(server.api(f"{MLFLOW}/runs/create"), json={"experiment_id": eid}))
    assert new_run["run"]["info"]["experiment_id"] == eid
    client.log_metric(rid, "m", 3.0, step=2)
    hist = ok(admin.get(server.api(f"{MLFLOW}/metrics/get-history"),
                        params={"run_id": rid, "metric_key": "m", "max_results": 100}))["metrics"]
    assert sorted(m["value"] for m in hist) == [1.0, 2.0, 3.0]
    # EDIT does not include MANAGE: Bob cannot grant others.
    error_of(bob.post(server.api(f"{TY}/grants/experiment"),
                      json={"id": eid, "user": "admin", "privilege": "EDIT"}),
             403, "PERMISSION_DENIED")


@pytest.mark.parametrize("body, status, fragment", [
    ({"id": "999999", "user": "admin", "privilege": "EDIT"}, 404, "999999"),
    ({"id": None, "user": "nobody-at-all", "privilege": "EDIT"}, 404, "nobody-at-all"),
    ({"id": None, "user": "admin", "privilege": "OWN"}, 400, "privilege"),
    ({"id": None, "user": "admin"}, 400, "privilege"),
    ({"id": None, "privilege": "EDIT"}, 400, "user"),
])
def test_bad_grants(server, admin, fixture_run, body, status, fragment):
    eid, _ = fixture_run
    body = {k: (eid if k == "id" and v is None else v) for k, v in body.items()}
    error_of(admin.post(server.api(f"{TY}/grants/experiment"), json=body), status, None, fragment)


def test_revoked_token_gets_401(server, admin):
    created = ok(admin.post(server.api(f"{TY}/tokens"), json={"description": "to revoke"}))
    token, token_id = created["token"], created["info"]["token_id"]
    s = server.session(token)
    ok(s.get(server.api(f"{MLFLOW}/experiments/search")))
    listed = {t["token_id"]: t for t in ok(admin.get(server.api(f"{TY}/tokens")))["tokens"]}
    assert listed[token_id]["description"] == "to revoke"
    assert "revoked_at" not in listed[token_id]
    assert token not in json.dumps(listed), "token secrets must not be listed"
    ok(admin.delete(server.api(f"{TY}/tokens/{token_id}")))
    error_of(s.get(server.api(f"{MLFLOW}/experiments/search")), 401, "UNAUTHENTICATED", "revoked")
    listed = {t["token_id"]: t for t in ok(admin.get(server.api(f"{TY}/tokens")))["tokens"]}
    assert listed[token_id]["revoked_at"] > 0
    error_of(admin.delete(server.api(f"{TY}/tokens/no-such-token")), 404,
             "RESOURCE_DOES_NOT_EXIST")
    # A user cannot revoke someone else's token.
    bob = server.session(server.create_user(f"carol{uuid.uuid4().hex[:6]}"))
    admin_id = next(t["token_id"] for t in ok(admin.get(server.api(f"{TY}/tokens")))["tokens"]
                    if t["user"] == "admin" and "revoked_at" not in t)
    error_of(bob.delete(server.api(f"{TY}/tokens/{admin_id}")), 403, "PERMISSION_DENIED")
    ok(admin.get(server.api(f"{TY}/whoami")))


def test_expired_token_gets_401(server, admin):
    created = ok(admin.post(server.api(f"{TY}/tokens"),
                            json={"description": "short-lived", "expires_in_seconds": 1}))
    info = created["info"]
    assert info["expires_at"] - info["created_at"] == 1000
    s = server.session(created["token"])
    first = s.get(server.api(f"{MLFLOW}/experiments/search"))
    assert first.status_code in (200, 401)  # 200 unless this machine stalled for a second
    # Expiry is what is tested here: poll (bounded) until the server says it has expired.
    deadline = time.monotonic() + 10
    while True:
        r = s.get(server.api(f"{MLFLOW}/experiments/search"))
        if r.status_code != 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    error_of(r, 401, "UNAUTHENTICATED", "expired")


@pytest.mark.parametrize("ttl", [0, -5, "soon", 10**12])
def test_bad_token_lifetimes(server, admin, ttl):
    error_of(admin.post(server.api(f"{TY}/tokens"), json={"expires_in_seconds": ttl}), 400,
             "INVALID_PARAMETER_VALUE", "expires_in_seconds")


# --- malformed requests


@pytest.mark.parametrize("body", [
    b"{not json",
    b'{"experiment_id": "0", ',
    b"[1, 2, 3]",
    b'"just a string"',
    b"\xff\xfe\x00garbage",
    b'{"name": "\xff\xfe"}',  # invalid UTF-8 inside a string
])
def test_malformed_json_is_400(server, admin, body):
    r = admin.post(server.api(f"{MLFLOW}/experiments/create"), data=body,
                   headers={"Content-Type": "application/json"})
    error_of(r, 400)


@pytest.mark.parametrize("field, value, fragment", [
    ("step", "abc", "step"),
    ("step", 1.5, "step"),
    ("step", [1], "step"),
    ("value", {}, "value"),
    ("value", "twelve", "value"),
    ("value", [1.0], "value"),
    ("timestamp", "yesterday", "timestamp"),
    ("key", 12, "key"),
    ("key", None, "key"),
    ("run_id", 123, "run_id"),
])
def test_wrong_types_in_log_metric(server, admin, fixture_run, field, value, fragment):
    _, rid = fixture_run
    body = {"run_id": rid, "key": "typed", "value": 1.0, "timestamp": 1, "step": 0}
    body[field] = value
    error_of(admin.post(server.api(f"{MLFLOW}/runs/log-metric"), json=body), 400,
             "INVALID_PARAMETER_VALUE", fragment)


@pytest.mark.parametrize("path, body, fragment", [
    ("runs/log-metric", {"key": "m", "value": 1, "timestamp": 1}, "run_id"),
    ("runs/log-metric", {"run_id": "RID", "value": 1, "timestamp": 1}, "key"),
    ("runs/log-metric", {"run_id": "RID", "key": "m", "timestamp": 1}, "value"),
    ("runs/log-parameter", {"run_id": "RID", "key": "p"}, "value"),
    ("runs/set-tag", {"run_id": "RID", "value": "v"}, "key"),
    ("experiments/create", {}, "name"),
    ("experiments/create", {"name": ""}, "name"),
    ("experiments/update", {"experiment_id": "EID"}, "new_name"),
    ("runs/log-batch", {"metrics": []}, "run_id"),
    ("runs/log-batch", {"run_id": "RID", "metrics": {"key": "m"}}, "metrics"),
    ("runs/log-batch", {"run_id": "RID", "metrics": [{"key": "m", "timestamp": 1}]}, "value"),
    ("runs/log-batch", {"run_id": "RID", "params": [{"value": "v"}]}, "key"),
    ("runs/log-batch", {"run_id": "RID", "metrics": [5]}, "metrics"),
    ("registered-models/create", {}, "name"),
    ("runs/search", {"experiment_ids": "not-a-list", "max_results": "lots"}, "max_results"),
])
def test_missing_and_malformed_fields(server, admin, fixture_run, path, body, fragment):
    eid, rid = fixture_run
    body = json.loads(json.dumps(body).replace("RID", rid).replace("EID", eid))
    error_of(admin.post(server.api(f"{MLFLOW}/{path}"), json=body), 400,
             "INVALID_PARAMETER_VALUE", fragment)


@pytest.mark.parametrize("method, path, body", [
    ("get", "runs/get", {"run_id": "0" * 32}),
    ("post", "runs/log-metric",
     {"run_id": "0" * 32, "key": "m", "value": 1, "timestamp": 1, "step": 0}),
    ("post", "runs/log-batch", {"run_id": "0" * 32, "params": [{"key": "a", "value": "b"}]}),
    ("post", "runs/update", {"run_id": "0" * 32, "status": "FINISHED"}),
    ("get", "experiments/get", {"experiment_id": "99999999"}),
    ("get", "experiments/get-by-name", {"experiment_name": "no-such-experiment-anywhere"}),
    ("post", "runs/create", {"experiment_id": "99999999"}),
    ("post", "experiments/delete", {"experiment_id": "99999999"}),
    ("get", "registered-models/get", {"name": "no-such-model-anywhere"}),
    ("get", "model-versions/get", {"name": "no-such-model-anywhere", "version": "1"}),
    ("get", "metrics/get-history", {"run_id": "0" * 32, "metric_key": "m"}),
])
def test_unknown_ids_are_404(server, admin, method, path, body):
    if method == "get":
        r = admin.get(server.api(f"{MLFLOW}/{path}"), params=body)
    else:
        r = admin.post(server.api(f"{MLFLOW}/{path}"), json=body)
    error_of(r, 404, "RESOURCE_DOES_NOT_EXIST")


@pytest.mark.parametrize("experiment_id", ["abc", "-1", "1; DROP TABLE runs", "1e3",
                                           "99999999999999999999999"])
def test_malformed_experiment_ids(server, admin, experiment_id):
    r = admin.get(server.api(f"{MLFLOW}/experiments/get"), params={"experiment_id": experiment_id})
    assert r.status_code in (400, 404), r.text
    assert "experiment" in r.json()["message"].lower()


def test_oversized_batches_and_values(server, admin, fixture_run):
    _, rid = fixture_run
    url = server.api(f"{MLFLOW}/runs/log-batch")
    metric = {"key": "big", "value": 1.0, "timestamp": 1, "step": 0}
    error_of(admin.post(url, json={"run_id": rid, "metrics": [metric] * 1001}), 400,
             "INVALID_PARAMETER_VALUE", "1000")
    error_of(admin.post(url, json={"run_id": rid, "params": [
        {"key": f"p{i}", "value": "v"} for i in range(101)]}), 400, "INVALID_PARAMETER_VALUE",
        "100")
    error_of(admin.post(url, json={"run_id": rid, "tags": [
        {"key": f"t{i}", "value": "v"} for i in range(101)]}), 400, "INVALID_PARAMETER_VALUE",
        "100")
    error_of(admin.post(url, json={"run_id": rid, "metrics": [metric] * 950, "params": [
        {"key": f"p{i}", "value": "v"} for i in range(51)]}), 400, "INVALID_PARAMETER_VALUE",
        "1000")
    # Params longer than 6000 characters, keys longer than 250.
    long_value = "v" * 6001
    error_of(admin.post(server.api(f"{MLFLOW}/runs/log-parameter"),
                        json={"run_id": rid, "key": "long", "value": long_value}),
             400, "INVALID_PARAMETER_VALUE", "6000")
    error_of(admin.post(url, json={"run_id": rid,
                                   "params": [{"key": "long", "value": long_value}]}),
             400, "INVALID_PARAMETER_VALUE", "6000")
    error_of(admin.post(server.api(f"{MLFLOW}/runs/log-parameter"),
                        json={"run_id": rid, "key": "k" * 251, "value": "v"}),
             400, "INVALID_PARAMETER_VALUE", "250")
    error_of(admin.post(server.api(f"{MLFLOW}/runs/log-metric"),
                        json={"run_id": rid, "key": "k" * 251, "value": 1, "timestamp": 1,
                              "step": 0}),
             400, "INVALID_PARAMETER_VALUE", "250")
    error_of(admin.post(server.api(f"{MLFLOW}/runs/set-tag"),
                        json={"run_id": rid, "key": "t", "value": "v" * 8001}),
             400, "INVALID_PARAMETER_VALUE", "8000")
    # None of it was stored.
    run = ok(admin.get(server.api(f"{MLFLOW}/runs/get"), params={"run_id": rid}))["run"]
    assert not any(p["key"] == "long" for p in run["data"].get("params", []))
    assert not any(m["key"] == "big" for m in run["data"].get("metrics", []))


def test_body_over_16_mib_is_413(server, admin, fixture_run):
    _, rid = fixture_run
    # A valid request padded with whitespace to 17 MiB: only its size is wrong.
    payload = json.dumps({"run_id": rid, "tags": [{"key": "padded", "value": "v"}]})
    payload = payload[:-1] + " " * (17 << 20) + "}"
    r = admin.post(server.api(f"{MLFLOW}/runs/log-batch"), data=payload,
                   headers={"Content-Type": "application/json"})
    body = error_of(r, 413)
    assert "limit" in body["message"].lower() or "large" in body["message"].lower()
    run = ok(admin.get(server.api(f"{MLFLOW}/runs/get"), params={"run_id": rid}))["run"]
    assert "padded" not in {t["key"] for t in run["data"].get("tags", [])}
    # Just under the limit is fine.
    payload = json.dumps({"run_id": rid, "tags": [{"key": "padded2", "value": "v"}]})
    payload = payload[:-1] + " " * ((16 << 20) - len(payload) - 1024) + "}"
    ok(admin.post(server.api(f"{MLFLOW}/runs/log-batch"), data=payload,
                  headers={"Content-Type": "application/json"}))
    # Also when the client announces the size up front and streams it in chunks.
    def chunks():
        block = b"x" * (1 << 20)
        yield b'{"run_id": "' + rid.encode() + b'", "tags": [{"key": "t", "value": "'
        for _ in range(17):
            yield block
        yield b'"}]}'
    r = admin.post(server.api(f"{MLFLOW}/runs/log-batch"), data=chunks(),
                   headers={"Content-Type": "application/json"})
    error_of(r, 413)
    ok(admin.get(server.api(f"{MLFLOW}/runs/get"), params={"run_id": rid}))


# --- artifact paths


@pytest.mark.parametrize("rel", [
    "../../../../etc/passwd",
    "{eid}/../../outside.txt",
    "{eid}/{rid}/artifacts/../../../../../outside.txt",
    "{eid}/%2E%2E/%2E%2E/outside.txt",
    "{eid}/..%2F..%2Foutside.txt",
    "%2Fetc%2Fpasswd",
    "/etc/passwd",
    "{eid}/{rid}/artifacts/a/./../../x",
    "{eid}/{rid}/artifacts/nul%00byte.txt",
])
def test_artifact_path_traversal_is_rejected(server, admin, fixture_run, rel):
    eid, rid = fixture_run
    rel = rel.format(eid=eid, rid=rid)
    path = f"{ARTIFACTS}/{rel}"
    before = {p for p in server.data_dir.parent.rglob("*")}
    status, body = raw_request(server, "PUT", path, body=b"pwned")
    assert status in (400, 403, 404), (status, body[:300])
    if status == 400:
        msg = json.loads(body)["message"].lower()
        assert "path" in msg or ".." in msg, msg
    after = {p for p in server.data_dir.parent.rglob("*")}
    assert not any(p.name in ("outside.txt", "passwd", "x") for p in after - before)
    status, body = raw_request(server, "GET", path)
    assert status in (400, 403, 404), (status, body[:300])
    assert b"root:" not in body
    status, body = raw_request(server, "DELETE", path)
    assert status in (400, 403, 404), (status, body[:300])


@pytest.mark.parametrize("listing", ["..", "../..", "/etc", "1/../..", "1/../../..",
                                     "./../etc"])
def test_artifact_listing_outside_the_store_is_rejected(server, admin, listing):
    r = admin.get(server.api(ARTIFACTS), params={"path": listing})
    body = error_of(r, 400, "INVALID_PARAMETER_VALUE")
    assert "path" in body["message"].lower() or ".." in body["message"]


def test_artifact_dot_segments_answered_with_400_naming_the_path(server, admin, fixture_run):
    eid, rid = fixture_run
    status, body = raw_request(server, "PUT", f"{ARTIFACTS}/{eid}/{rid}/../../escape.txt",
                               body=b"x")
    assert status == 400, body
    err = json.loads(body)
    assert err["error_code"] == "INVALID_PARAMETER_VALUE"
    assert ".." in err["message"] or "path" in err["message"].lower()


# --- hostile search filters


HOSTILE_FILTERS = [
    "params.x = 'a' OR 1=1 --",
    "params.x = 'a' OR '1'='1'",
    "params.x = 'a'; DROP TABLE runs; --",
    "params.x = 'a' UNION SELECT token_hash FROM tokens --",
    "metrics.m > 0 OR metrics.m < 0",
    "params.x = 'a",
    "params.x = \"a",
    "params.`x = 'a'",
    "tags.t = 'it's'",
    "metrics.m > 1 AND (",
    "(metrics.m > 1)",
    "((((((((((((((((((((metrics.m > 1))))))))))))))))))))",
    "(" * 10000 + "metrics.m > 1" + ")" * 10000,
    "(" * 100000,
    "NOT " * 20000 + "metrics.m > 1",
    "metrics.m > 1 AND " * 6000 + "junk",
    "junk " * 20000,
    "'" * 100000,
    "params.x = '" + "a" * 102400,  # unterminated 100 KB string
    "metrics.m > 1e999999",
    "metrics.m > --1",
    "metrics.m > 0x10",
    "params.x LIKE '%' OR 1=1",
    "attributes.run_id IN ('a', (SELECT run_uuid FROM runs))",
    "attributes.run_id IN ()",
    "attributes.status = FINISHED",
    "\x00",
    "params.x = 'a' \x00 AND 1=1",
    "datasets.name = 'a' OR 1=1",
    "tags.t IS NULL OR 1=1",
    "attributes.start_time > 1; SELECT pg_sleep(10)",
]


@pytest.mark.parametrize("filter_string", HOSTILE_FILTERS,
                         ids=[f"f{i}" for i in range(len(HOSTILE_FILTERS))])
def test_hostile_run_filters_are_400(server, admin, fixture_run, filter_string):
    eid, _ = fixture_run
    started = time.monotonic()
    r = admin.post(server.api(f"{MLFLOW}/runs/search"),
                   json={"experiment_ids": [eid], "filter": filter_string})
    elapsed = time.monotonic() - started
    error_of(r, 400, "INVALID_PARAMETER_VALUE")
    assert elapsed < 5, f"rejecting took {elapsed:.1f}s"


@pytest.mark.parametrize("path, body", [
    ("experiments/search", {"filter": "name = 'a' OR 1=1 --"}),
    ("experiments/search", {"filter": "name = 'a"}),
    ("experiments/search", {"filter": "(" * 50000}),
    ("registered-models/search", {"filter": "name = 'a' OR 1=1 --"}),
    ("registered-models/search", {"filter": "name LIKE 'a%' UNION SELECT 1"}),
    ("model-versions/search", {"filter": "name = 'a'; DROP TABLE model_versions"}),
    ("model-versions/search", {"filter": "run_id = '" + "x" * 102400}),
    ("logged-models/search", {"experiment_ids": ["0"], "filter": "name = 'a' OR 1=1"}),
    ("runs/search", {"experiment_ids": ["0"], "order_by": ["metrics.m; DROP TABLE runs"]}),
    ("runs/search", {"experiment_ids": ["0"], "order_by": ["(SELECT 1) DESC"]}),
    ("runs/search", {"experiment_ids": ["0"], "order_by": ["metrics.m SIDEWAYS"]}),
    ("runs/search", {"experiment_ids": ["0"], "page_token": "not-a-token"}),
    ("runs/search", {"experiment_ids": ["0"], "page_token": "eyJvZmZzZXQiOiAtMTB9"}),
    ("runs/search", {"experiment_ids": ["0"], "max_results": -1}),
    ("runs/search", {"experiment_ids": ["0"], "max_results": 10**9}),
    ("experiments/search", {"max_results": 10**9}),
    ("experiments/search", {"page_token": "%%%"}),
    ("registered-models/search", {"order_by": ["name; DROP TABLE registered_models"]}),
])
def test_hostile_search_requests_are_400(server, admin, path, body):
    r = admin.post(server.api(f"{MLFLOW}/{path}"), json=body)
    error_of(r, 400, "INVALID_PARAMETER_VALUE")


def test_injection_through_quoted_keys_matches_nothing(server, admin, fixture_run):
    """A backquoted key may contain anything; it is a name, never SQL."""
    eid, rid = fixture_run
    for key in ["x' OR '1'='1", "x\") OR 1=1 --", "x`); DROP TABLE params; --"]:
        for kind in ("params", "tags", "metrics"):
            op_value = "> 0" if kind == "metrics" else "= 'a'"
            k = key.replace("`", "")
            r = admin.post(server.api(f"{MLFLOW}/runs/search"),
                           json={"experiment_ids": [eid], "filter": f"{kind}.`{k}` {op_value}"})
            assert ok(r).get("runs", []) == [], (kind, key)
    # A value that looks like SQL is just a value.
    ok(admin.post(server.api(f"{MLFLOW}/runs/log-parameter"),
                  json={"run_id": rid, "key": "sql", "value": "'; DROP TABLE runs; --"}))
    r = ok(admin.post(server.api(f"{MLFLOW}/runs/search"),
                      json={"experiment_ids": [eid],
                            "filter": "params.sql = '''; DROP TABLE runs; --'"}))
    # MLflow has no quote escaping; whether '' is accepted or not, nothing is dropped.
    r = ok(admin.post(server.api(f"{MLFLOW}/runs/search"),
                      json={"experiment_ids": [eid], "filter": "params.sql LIKE '%DROP TABLE%'"}))
    assert [x["info"]["run_id"] for x in r["runs"]] == [rid]


@pytest.mark.parametrize("field, value", [
    ("name", "nul\u0000inside"),
    ("name", "lone surrogate \ud800"),
    ("tag", "nul\u0000inside"),
    ("param", "nul\u0000inside"),
])
def test_strange_strings_are_stored_or_rejected_never_500(server, admin, fixture_run, field,
                                                          value):
    """NUL and unpaired surrogates: a clean 400 or an exact round trip, never a server fault."""
    eid, rid = fixture_run
    unique = uuid.uuid4().hex[:6]
    if field == "name":
        r = admin.post(server.api(f"{MLFLOW}/experiments/create"),
                       data=json.dumps({"name": f"{unique}-{value}"}),
                       headers={"Content-Type": "application/json"})
    elif field == "tag":
        r = admin.post(server.api(f"{MLFLOW}/runs/set-tag"),
                       data=json.dumps({"run_id": rid, "key": f"t{unique}", "value": value}),
                       headers={"Content-Type": "application/json"})
    else:
        r = admin.post(server.api(f"{MLFLOW}/runs/log-parameter"),
                       data=json.dumps({"run_id": rid, "key": f"p{unique}", "value": value}),
                       headers={"Content-Type": "application/json"})
    assert r.status_code in (200, 400), f"HTTP {r.status_code}: {r.text[:300]}"
    if r.status_code == 400:
        assert r.json()["error_code"] == "INVALID_PARAMETER_VALUE"
        return
    if field == "name":
        got = ok(admin.get(server.api(f"{MLFLOW}/experiments/get"),
                           params={"experiment_id": r.json()["experiment_id"]}))
        assert got["experiment"]["name"] == f"{unique}-{value}"
    else:
        data = ok(admin.get(server.api(f"{MLFLOW}/runs/get"), params={"run_id": rid}))["run"][
            "data"]
        items = {x["key"]: x["value"] for x in data.get("tags" if field == "tag" else "params",
                                                        [])}
        assert items[f"{field[0]}{unique}"] == value


def test_unknown_endpoints_and_methods(server, admin):
    r = admin.get(server.api(f"{MLFLOW}/no/such/endpoint"))
    assert r.status_code == 404
    assert r.json()["error_code"] == "ENDPOINT_NOT_FOUND"
    r = admin.delete(server.api(f"{MLFLOW}/runs/get"))
    assert r.status_code in (404, 405)
    assert r.json()["message"]


def test_server_still_serves_after_all_that(server, admin, fixture_run):
    assert_server_healthy(server, admin, fixture_run)
    eid, rid = fixture_run
    ok(log_metric(admin, server, rid, "after", 42.0))
    hist = ok(admin.get(server.api(f"{MLFLOW}/metrics/get-history"),
                        params={"run_id": rid, "metric_key": "after", "max_results": 100}))[
        "metrics"]
    assert [m["value"] for m in hist] == [42.0]
    assert server.proc.poll() is None, "the server died"


# --- optional fields and names MLflow rejects


def test_get_history_without_max_results(server, admin, fixture_run):
    """max_results is optional on get-history (the MLflow REST docs; curl users omit it)."""
    _, rid = fixture_run
    ok(log_metric(admin, server, rid, "optional_max", 5.0, step=7))
    body = ok(admin.get(server.api(f"{MLFLOW}/metrics/get-history"),
                        params={"run_id": rid, "metric_key": "optional_max"}))
    assert [(m["step"], m["value"]) for m in body["metrics"]] == [(7, 5.0)]
    body = ok(admin.post(server.api(f"{MLFLOW}/runs/search"), json={"experiment_ids": [
        fixture_run[0]]}))
    assert body["runs"]


@pytest.mark.parametrize("name", ["team/model", "scheme:model", "a/b/1"])
def test_registered_model_names_with_slash_or_colon_are_rejected(server, admin, name):
    """As in MLflow: '/' and ':' would make models:/<name>/<version> URIs ambiguous."""
    error_of(admin.post(server.api(f"{MLFLOW}/registered-models/create"), json={"name": name}),
             400, "INVALID_PARAMETER_VALUE", "name")
    ok_name = f"plain-{uuid.uuid4().hex[:6]}"
    ok(admin.post(server.api(f"{MLFLOW}/registered-models/create"), json={"name": ok_name}))
    error_of(admin.post(server.api(f"{MLFLOW}/registered-models/rename"),
                        json={"name": ok_name, "new_name": name}),
             400, "INVALID_PARAMETER_VALUE", "name")
