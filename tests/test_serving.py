"""Serving endpoints end to end against a real server: MLflow pyfunc models logged and
registered with the real `mlflow` client, served by replicas the server starts (each the
model's own `mlflow models serve`), queried through /serving-endpoints/{name}/invocations.

Covers the three pyfunc input formats, the traffic split between two versions, a killed
replica restarted, scale to zero and back (the cold start), authorization (401/403 and a
QUERY grant), bad input, and request capture.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from conftest import module_server

TY = "/api/trainyard/v1"
MODEL_CODE = str(Path(__file__).resolve().parent / "workloads" / "serving_model.py")
# A stand-in for trainyard-serve-model (the replica contract), for the OpenAI routes.
FAKE_ENGINE = str(Path(__file__).resolve().parent / "workloads" / "fake_serve_model.py")
READY_TIMEOUT_S = 180


def ok(r: requests.Response) -> dict:
    assert r.status_code == 200, f"HTTP {r.status_code}: {r.text[:1000]}"
    return r.json()


def error_of(r: requests.Response, status: int, *fragments: str) -> str:
    assert r.status_code == status, f"HTTP {r.status_code} (want {status}): {r.text[:500]}"
    body = r.json()
    message = body.get("message") or body.get("error", {}).get("message")
    assert message, body
    for fragment in fragments:
        assert fragment.lower() in message.lower(), f"{fragment!r} not in {message!r}"
    return message


def wait_for(predicate, what: str, timeout: float = READY_TIMEOUT_S, interval: float = 0.2):
    """Polls `predicate` until it returns something truthy, failing after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)  # polling interval, bounded by the deadline


@pytest.fixture(scope="module")
def server(backend, tmp_path_factory, request):
    """The module's server, told where `mlflow` is (the test venv's): pyfunc replicas run it."""
    mlflow_program = Path(sys.executable).parent / "mlflow"
    # Replicas are jobs on the local pool: room for all the module keeps at once.
    yield from module_server(tmp_path_factory, backend, request, "serving",
                             ["--local-cpus", "64", "--serving-mlflow", str(mlflow_program),
                              "--serving-engine", FAKE_ENGINE, "--serving-cold-start-s", "180"])


@pytest.fixture(scope="module")
def models(server):
    """A registered model with versions 1 (k=1) and 2 (k=10); alias champion -> 1."""
    import mlflow
    from mlflow import MlflowClient

    os.environ["MLFLOW_TRACKING_URI"] = server.url
    os.environ["MLFLOW_TRACKING_TOKEN"] = server.token
    try:
        mlflow.set_tracking_uri(server.url)
        name = f"scale-{uuid.uuid4().hex[:6]}"
        mlflow.set_experiment(f"serving-{name}")
        for k in (1, 10):
            with mlflow.start_run():
                mlflow.pyfunc.log_model(name="model", python_model=MODEL_CODE,
                                        model_config={"k": k},
                                        pip_requirements=["mlflow", "pandas"],
                                        registered_model_name=name)
        MlflowClient().set_registered_model_alias(name, "champion", 1)
        yield name
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.environ.pop("MLFLOW_TRACKING_TOKEN", None)
        mlflow.set_tracking_uri(None)



def create(admin, server, **body) -> dict:
    return ok(admin.post(server.api(f"{TY}/endpoints"), json=body))


def endpoint(admin, server, name) -> dict:
    return ok(admin.get(server.api(f"{TY}/endpoints/{name}")))


def ready_replicas(admin, server, name) -> list[dict]:
    return [r for r in endpoint(admin, server, name)["replicas"] if r["state"] == "READY"]


def invoke(session, server, name, body):
    return session.post(server.api(f"/serving-endpoints/{name}/invocations"), json=body,
                        timeout=READY_TIMEOUT_S)


def test_pyfunc_formats_and_capture(server, admin, models):
    name = f"ep-{uuid.uuid4().hex[:6]}"
    created = create(admin, server, name=name,
                     served_entities=[{"model": models, "alias": "champion"}],
                     min_replicas=1, scale_to_zero_seconds=0)
    assert created["routes"] == [{"served_entity": f"{models}-champion", "percent": 100}]
    wait_for(lambda: ready_replicas(admin, server, name), "a ready replica")

    r = invoke(admin, server, name, {"dataframe_split": {"columns": ["x"], "data": [[1], [2.5]]}})
    assert ok(r) == {"predictions": [1.0, 2.5]}
    request_id = r.headers["x-request-id"]
    assert len(request_id) == 32
    assert ok(invoke(admin, server, name,
                     {"dataframe_records": [{"x": 3}, {"x": 4}]})) == {"predictions": [3.0, 4.0]}
    assert ok(invoke(admin, server, name, {"inputs": {"x": [5.0, 6.0]}})) == \
        {"predictions": [5.0, 6.0]}

    # Every request is captured, with the served version and its request id.
    capture = Path(endpoint(admin, server, name)["capture"]["path"])
    lines = wait_for(lambda: capture.exists() and len(capture.read_text().splitlines()) >= 3
                     and capture.read_text().splitlines(), "three capture lines", timeout=30)
    records = [json.loads(line) for line in lines]
    first = records[0]
    assert first["request_id"] == request_id
    assert first["endpoint"] == name and first["model"] == models and first["model_version"] == 1
    assert first["status"] == 200 and first["latency_ms"] >= 0
    assert first["request"] == {"dataframe_split": {"columns": ["x"], "data": [[1], [2.5]]}}
    assert first["response"] == {"predictions": [1.0, 2.5]}
    stats = endpoint(admin, server, name)["capture"]
    assert stats["captured"] >= 3 and stats["dropped"] == 0

    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
    error_of(invoke(admin, server, name, {"inputs": [1]}), 404, name)


def test_traffic_split_between_two_versions(server, admin, models):
    name = f"ab-{uuid.uuid4().hex[:6]}"
    create(admin, server, name=name,
           served_entities=[{"name": "a", "model": models, "version": 1},
                            {"name": "b", "model": models, "version": 2}],
           routes=[{"served_entity": "a", "percent": 70}, {"served_entity": "b", "percent": 30}],
           min_replicas=1, scale_to_zero_seconds=0)
    wait_for(lambda: len(ready_replicas(admin, server, name)) == 2, "two ready replicas")
    n = 300
    counts = {1.0: 0, 10.0: 0}
    entities = {"a": 0, "b": 0}
    for _ in range(n):
        r = invoke(admin, server, name, {"inputs": {"x": [1.0]}})
        counts[ok(r)["predictions"][0]] += 1
        entities[r.headers["x-served-entity"]] += 1
    assert counts[1.0] == entities["a"] and counts[10.0] == entities["b"]
    # Binomial(300, 0.7): sd 7.9; 4 sd either way.
    assert abs(counts[1.0] - 0.7 * n) < 4 * (n * 0.7 * 0.3) ** 0.5, counts
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_killed_replica_is_restarted(server, admin, models):
    name = f"kill-{uuid.uuid4().hex[:6]}"
    create(admin, server, name=name, served_entities=[{"model": models, "version": 1}],
           min_replicas=1, scale_to_zero_seconds=0)
    first = wait_for(lambda: ready_replicas(admin, server, name), "a ready replica")[0]
    assert ok(invoke(admin, server, name, {"inputs": {"x": [2.0]}})) == {"predictions": [2.0]}
    os.killpg(first["pid"], signal.SIGKILL)
    replacement = wait_for(
        lambda: [r for r in ready_replicas(admin, server, name) if r["id"] != first["id"]],
        "a replacement replica")[0]
    assert replacement["pid"] != first["pid"]
    assert ok(invoke(admin, server, name, {"inputs": {"x": [3.0]}})) == {"predictions": [3.0]}
    state = endpoint(admin, server, name)
    assert state["entity_states"][0]["restarts"] == 1
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
    # Delete stops its replicas.
    def gone():
        try:
            os.killpg(replacement["pid"], 0)
            return False
        except ProcessLookupError:
            return True
    wait_for(gone, "the replica to stop after delete", timeout=60)


def test_scale_to_zero_and_back(server, admin, models):
    name = f"zero-{uuid.uuid4().hex[:6]}"
    created = create(admin, server, name=name, served_entities=[{"model": models, "version": 2}],
                     min_replicas=0, scale_to_zero_seconds=2)
    assert created["replicas"] == [] and created["state"] == "SCALED_TO_ZERO"
    # The first request starts a replica and waits for it (the cold start).
    started = time.monotonic()
    assert ok(invoke(admin, server, name, {"inputs": {"x": [1.0]}})) == {"predictions": [10.0]}
    cold_start = time.monotonic() - started
    print(f"cold start: {cold_start:.1f} s")
    # Idle for 2 s: back to zero.
    wait_for(lambda: endpoint(admin, server, name)["state"] == "SCALED_TO_ZERO",
             "scale to zero", timeout=60)
    assert ok(invoke(admin, server, name, {"inputs": {"x": [2.0]}})) == {"predictions": [20.0]}
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_alias_move_rolls_without_failed_requests(server, admin, models):
    from mlflow import MlflowClient

    name = f"roll-{uuid.uuid4().hex[:6]}"
    alias = f"live{uuid.uuid4().hex[:4]}"
    client = MlflowClient(tracking_uri=server.url)
    os.environ["MLFLOW_TRACKING_TOKEN"] = server.token
    try:
        client.set_registered_model_alias(models, alias, 1)
        create(admin, server, name=name, served_entities=[{"model": models, "alias": alias}],
               min_replicas=1, scale_to_zero_seconds=0)
        wait_for(lambda: ready_replicas(admin, server, name), "a ready replica")
        assert ok(invoke(admin, server, name, {"inputs": {"x": [1.0]}})) == {"predictions": [1.0]}
        client.set_registered_model_alias(models, alias, 2)
        # Requests keep being answered (by version 1, then 2) while the endpoint rolls.
        seen = []
        def rolled():
            seen.append(ok(invoke(admin, server, name, {"inputs": {"x": [1.0]}}))["predictions"][0])
            replicas = endpoint(admin, server, name)["replicas"]
            return seen[-1] == 10.0 and all(r["model_version"] == 2 for r in replicas)
        wait_for(rolled, "the endpoint to roll to version 2")
        assert set(seen) <= {1.0, 10.0}
        assert ok(invoke(admin, server, name, {"inputs": {"x": [2.0]}})) == {"predictions": [20.0]}
    finally:
        os.environ.pop("MLFLOW_TRACKING_TOKEN", None)
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_authorization(server, admin, models):
    name = f"auth-{uuid.uuid4().hex[:6]}"
    create(admin, server, name=name, served_entities=[{"model": models, "version": 1}],
           min_replicas=0, scale_to_zero_seconds=60)
    body = {"inputs": {"x": [1.0]}}
    r = requests.post(server.api(f"/serving-endpoints/{name}/invocations"), json=body)
    assert r.status_code == 401, r.text
    user = f"bob{uuid.uuid4().hex[:6]}"
    bob = server.session(server.create_user(user))
    error_of(invoke(bob, server, name, body), 403, "QUERY")
    error_of(bob.get(server.api(f"{TY}/endpoints/{name}")), 403)
    assert name not in [e["name"] for e in ok(bob.get(server.api(f"{TY}/endpoints")))["endpoints"]]
    # Bob may not grant himself, nor change the endpoint.
    error_of(bob.post(server.api(f"{TY}/endpoints/{name}/permissions"),
                      json={"principal": user, "privilege": "QUERY"}), 403)
    error_of(bob.patch(server.api(f"{TY}/endpoints/{name}"), json={"max_replicas": 2}), 403)
    ok(admin.post(server.api(f"{TY}/endpoints/{name}/permissions"),
                  json={"principal": user, "privilege": "QUERY"}))
    assert ok(invoke(bob, server, name, body)) == {"predictions": [1.0]}
    error_of(bob.delete(server.api(f"{TY}/endpoints/{name}")), 403)
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


@pytest.mark.parametrize("body,status,fragments", [
    ({"served_entities": [{"model": "m", "version": 1}]}, 400, ["name"]),
    ({"name": "bad name!", "served_entities": [{"model": "m", "version": 1}]}, 400, ["name"]),
    ({"name": "x"}, 400, ["served_entities"]),
    ({"name": "x", "served_entities": [{"version": 1}]}, 400, ["served_entities[0].model"]),
    ({"name": "x", "served_entities": [{"model": "MODEL"}]}, 400,
     ["served_entities[0]", "version", "alias"]),
    ({"name": "x", "served_entities": [{"model": "MODEL", "version": 99}]}, 404,
     ["served_entities[0]"]),
    ({"name": "x", "served_entities": [{"model": "no-such-model", "version": 1}]}, 404,
     ["served_entities[0].model"]),
    ({"name": "x", "served_entities": [{"name": "a", "model": "MODEL", "version": 1},
                                       {"name": "b", "model": "MODEL", "version": 2}],
      "routes": [{"served_entity": "a", "percent": 60}, {"served_entity": "b", "percent": 30}]},
     400, ["routes", "sum to 100", "90"]),
    ({"name": "x", "served_entities": [{"model": "MODEL", "version": 1}],
      "routes": [{"served_entity": "nope", "percent": 100}]}, 400, ["routes[0].served_entity"]),
    ({"name": "x", "served_entities": [{"model": "MODEL", "version": 1}],
      "routes": [{"served_entity": "MODEL-1", "percent": 120}]}, 400, ["routes[0].percent"]),
    ({"name": "x", "served_entities": [{"model": "MODEL", "version": 1}], "min_replicas": 3,
      "max_replicas": 2}, 400, ["min_replicas"]),
    ({"name": "x", "served_entities": [{"model": "MODEL", "version": 1}], "min_replicas": -1},
     400, ["min_replicas"]),
])
def test_bad_endpoint_definitions(server, admin, models, body, status, fragments):
    text = json.dumps(body).replace("MODEL", models)
    error_of(admin.post(server.api(f"{TY}/endpoints"), data=text,
                        headers={"Content-Type": "application/json"}), status,
             *[f.replace("MODEL", models) for f in fragments])


def test_bad_requests(server, admin, models):
    r = admin.post(server.api("/serving-endpoints/no-such-endpoint/invocations"),
                   json={"inputs": [1]})
    error_of(r, 404, "no-such-endpoint")
    assert r.headers.get("x-request-id")
    r = admin.post(server.api("/serving-endpoints/anything/invocations"), data="{not json",
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    # OpenAI routes answer in OpenAI's error shape.
    r = admin.post(server.api("/serving-endpoints/chat/completions"),
                   json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "model" in r.json()["error"]["message"], r.text
    r = admin.post(server.api("/serving-endpoints/chat/completions"),
                   json={"model": "no-such-endpoint", "messages": []})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error", r.text
    error_of(admin.patch(server.api(f"{TY}/endpoints/no-such-endpoint"), json={}), 404)


def test_cli_lists_and_shows(server, admin, models, tmp_path):
    import subprocess

    from conftest import TRAINYARD_BIN

    name = f"cli-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "TRAINYARD_URL": server.url, "TRAINYARD_TOKEN": server.token}
    def cli(*args):
        return subprocess.run([str(TRAINYARD_BIN), "endpoints", *args], env=env,
                              capture_output=True, text=True, timeout=60)
    out = cli("create", name, "--model", models, "--alias", "champion", "--scale-to-zero-s", "30")
    assert out.returncode == 0, out.stderr
    assert f"Created endpoint {name}" in out.stdout and "SCALED_TO_ZERO" in out.stdout
    out = cli("list")
    assert out.returncode == 0 and name in out.stdout and "champion" in out.stdout, out.stdout
    out = cli("update", name, "--max-replicas", "3")
    assert out.returncode == 0 and "max 3" in out.stdout, out.stdout + out.stderr
    out = cli("show", name)
    assert out.returncode == 0 and "/serving-endpoints/" + name in out.stdout
    out = cli("update", name, "--route", "nope=100")
    assert out.returncode != 0 and "routes[0].served_entity" in out.stderr, out.stderr
    assert cli("delete", name).returncode == 0
    out = cli("show", name)
    assert out.returncode != 0 and "does not exist" in out.stderr


# --- LLM endpoints: the OpenAI routes, against the stand-in engine (tests/workloads/
# fake_serve_model.py, the replica contract); the real engine's end-to-end test comes with it.



def test_openai_client_chat_completions_streaming_and_models(server, admin, llm_model):
    from openai import OpenAI

    name = f"chat-{uuid.uuid4().hex[:6]}"
    created = create(admin, server, name=name, served_entities=[{"model": llm_model, "version": 1}],
                     min_replicas=0, scale_to_zero_seconds=60)
    assert created["state"] == "SCALED_TO_ZERO"
    client = OpenAI(base_url=f"{server.url}/serving-endpoints", api_key=server.token,
                    max_retries=0, timeout=READY_TIMEOUT_S)
    reply = client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "the card was charged twice"}])
    assert reply.choices[0].message.content == "the card was charged twice"
    assert reply.usage.total_tokens == 10
    assert endpoint(admin, server, name)["replicas"][0]["flavor"] == "llm"

    # Streamed: the pieces come one event at a time, in order.
    stream = client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "one two three four"}], stream=True)
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert pieces == ["one", " two", " three", " four"]

    text = client.completions.create(model=name, prompt="hello there", max_tokens=4)
    assert text.choices[0].text == "hello there"
    streamed = "".join(c.choices[0].text for c in
                       client.completions.create(model=name, prompt="a b c", stream=True))
    assert streamed == "a b c"
    assert name in [m.id for m in client.models.list().data]

    # The same at /v1 and through invocations; the replica's 4xx comes back as it is.
    r = admin.post(server.api("/v1/chat/completions"),
                   json={"model": name, "messages": [{"role": "user", "content": "x y"}]})
    assert ok(r)["choices"][0]["message"]["content"] == "x y"
    r = admin.post(server.api(f"/serving-endpoints/{name}/invocations"),
                   json={"model": name, "prompt": "p q", "max_tokens": -1})
    assert r.status_code == 400 and "max_tokens" in r.text
    r = admin.post(server.api(f"/serving-endpoints/{name}/invocations"), json={"inputs": [1]})
    error_of(r, 400, "messages", "prompt")

    # Captured with the token counts of `usage`, streamed ones too.
    capture = Path(endpoint(admin, server, name)["capture"]["path"])
    lines = wait_for(lambda: capture.exists() and len(capture.read_text().splitlines()) >= 6
                     and capture.read_text().splitlines(), "six capture lines", timeout=30)
    records = [json.loads(line) for line in lines]
    assert records[0]["path"] == "/v1/chat/completions" and records[0]["total_tokens"] == 10
    assert records[1]["completion_tokens"] == 4 and "data:" in records[1]["response"]
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_replica_killed_mid_stream(server, admin, llm_model):
    from openai import APIError, OpenAI

    name = f"die-{uuid.uuid4().hex[:6]}"
    create(admin, server, name=name, served_entities=[{"model": llm_model, "version": 1}],
           min_replicas=1, scale_to_zero_seconds=0)
    first = wait_for(lambda: ready_replicas(admin, server, name), "a ready replica")[0]
    client = OpenAI(base_url=f"{server.url}/serving-endpoints", api_key=server.token,
                    max_retries=0, timeout=READY_TIMEOUT_S)
    with pytest.raises(APIError, match="failed"):
        for _ in client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "die"}], stream=True):
            pass
    # The next request is served by a new replica.
    reply = client.chat.completions.create(model=name,
                                           messages=[{"role": "user", "content": "again"}])
    assert reply.choices[0].message.content == "again"
    assert all(r["id"] != first["id"] for r in endpoint(admin, server, name)["replicas"])
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
