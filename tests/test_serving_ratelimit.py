"""Serving endpoints' rate limits, query-only tokens and the `trainyard serve` shortcut, end
to end against a real server. LLM endpoints run on tests/workloads/fake_serve_model.py (the
replica contract of trainyard-serve-model; it answers with `usage`, streamed too), the cheapest
replica there is; the invocations route goes through the same router as for pyfunc models.

Limits are per minute and these tests send a handful of requests in a few seconds, so a
budget spent stays spent for the test's duration (one query of a 2/min budget refills in 30 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import TRAINYARD_BIN, module_server
from test_serving import error_of, ok  # the serving tests' response checks

TY = "/api/trainyard/v1"
FAKE_ENGINE = str(Path(__file__).resolve().parent / "workloads" / "fake_serve_model.py")
READY_TIMEOUT_S = 180



@pytest.fixture(scope="module")
def server(backend, tmp_path_factory, request):
    yield from module_server(tmp_path_factory, backend, request, "ratelimit",
                             ["--local-cpus", "64", "--serving-engine", FAKE_ENGINE,
                              "--serving-cold-start-s", "180"])




def create(admin, server, **body) -> dict:
    return ok(admin.post(server.api(f"{TY}/endpoints"), json=body))


def openai_client(server, token):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/serving-endpoints", api_key=token, max_retries=0,
                  timeout=READY_TIMEOUT_S)


def chat(client, name, text="a b c", **kw):
    return client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": text}], **kw)


def new_user(server, admin, endpoint_names, prefix="u"):
    user = f"{prefix}{uuid.uuid4().hex[:6]}"
    token = server.create_user(user)
    for name in endpoint_names:
        ok(admin.post(server.api(f"{TY}/endpoints/{name}/permissions"),
                      json={"principal": user, "privilege": "QUERY"}))
    return user, token


def cli(server, *args, token=None, timeout=READY_TIMEOUT_S):
    env = {**os.environ, "TRAINYARD_URL": server.url, "TRAINYARD_TOKEN": token or server.token}
    return subprocess.run([str(TRAINYARD_BIN), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_per_user_query_limit_refuses_with_429_and_retry_after(server, admin, llm_model):
    from openai import RateLimitError

    name = f"rl-{uuid.uuid4().hex[:6]}"
    created = create(admin, server, name=name,
                     served_entities=[{"model": llm_model, "version": 1}],
                     min_replicas=0, scale_to_zero_seconds=0,
                     rate_limits=[{"key": "user", "queries_per_minute": 2},
                                  {"key": "endpoint", "queries_per_minute": 1000}])
    assert created["rate_limits"] == [{"key": "user", "queries_per_minute": 2},
                                      {"key": "endpoint", "queries_per_minute": 1000}]
    _, bob_token = new_user(server, admin, [name], "bob")
    client = openai_client(server, server.token)
    assert chat(client, name).choices[0].message.content == "a b c"  # cold start included
    assert chat(client, name).choices[0].message.content == "a b c"
    with pytest.raises(RateLimitError) as refused:
        chat(client, name)
    response = refused.value.response
    assert response.status_code == 429
    assert 1 <= int(response.headers["Retry-After"]) <= 30
    error = response.json()["error"]
    assert error["type"] == "requests" and error["code"] == "rate_limit_exceeded"
    assert "per user: 2 queries/min" in error["message"] and name in error["message"]

    # The invocations route is limited the same way, in MLflow/Databricks' error shape.
    r = admin.post(server.api(f"/serving-endpoints/{name}/invocations"),
                   json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 429, r.text
    assert r.json()["error_code"] == "REQUEST_LIMIT_EXCEEDED"
    assert int(r.headers["Retry-After"]) >= 1 and r.headers["x-request-id"]

    # Per user: bob has a budget of his own.
    bob = openai_client(server, bob_token)
    assert chat(bob, name, "hi bob").choices[0].message.content == "hi bob"
    assert chat(bob, name, "hi bob").choices[0].message.content == "hi bob"
    with pytest.raises(RateLimitError):
        chat(bob, name)

    # Removing the limits lifts them at once.
    updated = ok(admin.patch(server.api(f"{TY}/endpoints/{name}"), json={"rate_limits": []}))
    assert updated["rate_limits"] == []
    assert chat(client, name).choices[0].message.content == "a b c"
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_group_limit_is_shared_and_most_restrictive_wins(server, admin, llm_model):
    from openai import RateLimitError

    name = f"grp-{uuid.uuid4().hex[:6]}"
    group = f"team{uuid.uuid4().hex[:6]}"
    ok(admin.post(server.api(f"{TY}/groups"), json={"name": group}))
    create(admin, server, name=name, served_entities=[{"model": llm_model, "version": 1}],
           min_replicas=1, scale_to_zero_seconds=0)
    alice, alice_token = new_user(server, admin, [name], "alice")
    bob, bob_token = new_user(server, admin, [name], "bob")
    _, carol_token = new_user(server, admin, [name], "carol")
    for member in (alice, bob):
        ok(admin.post(server.api(f"{TY}/groups/{group}/members"), json={"member": member}))
    # The group's 2 queries a minute are shared by its members; alice's own limit is looser.
    ok(admin.patch(server.api(f"{TY}/endpoints/{name}"),
                   json={"rate_limits": [{"key": "group", "principal": group,
                                          "queries_per_minute": 2},
                                         {"key": "user", "principal": alice,
                                          "queries_per_minute": 100}]}))
    assert chat(openai_client(server, alice_token), name).choices
    assert chat(openai_client(server, bob_token), name).choices
    with pytest.raises(RateLimitError) as refused:
        chat(openai_client(server, alice_token), name)
    assert f"group {group}: 2 queries/min" in refused.value.response.json()["error"]["message"]
    # carol is in no group: no limit applies to her.
    for _ in range(3):
        assert chat(openai_client(server, carol_token), name).choices

    # Through the CLI: the limits in `endpoints show`, set with --rate-limit.
    out = cli(server, "endpoints", "show", name)
    assert out.returncode == 0, out.stderr
    assert f"group {group}: 2 queries/min; user {alice}: 100 queries/min" in out.stdout, out.stdout
    out = cli(server, "endpoints", "update", name, "--rate-limit", "endpoint:1/min",
              "--rate-limit", "user:50000tokens/min")
    assert out.returncode == 0, out.stderr
    assert "endpoint: 1 queries/min; per user: 50000 tokens/min" in out.stdout, out.stdout
    assert chat(openai_client(server, carol_token), name).choices
    with pytest.raises(RateLimitError):
        chat(openai_client(server, bob_token), name)
    out = cli(server, "endpoints", "update", name, "--rate-limit", "user:10/hour")
    assert out.returncode != 0 and "KEY[:PRINCIPAL]:N/min" in out.stderr, out.stderr
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_token_limit_is_charged_after_the_answer_streamed_too(server, admin, llm_model):
    from openai import RateLimitError

    name = f"tok-{uuid.uuid4().hex[:6]}"
    create(admin, server, name=name, served_entities=[{"model": llm_model, "version": 1}],
           min_replicas=1, scale_to_zero_seconds=0,
           rate_limits=[{"key": "user", "tokens_per_minute": 10}])
    client = openai_client(server, server.token)
    # The stand-in counts a word as a token, prompt and completion: 3 + 3.
    reply = chat(client, name, "one two three")
    assert reply.usage.total_tokens == 6
    # 4 tokens are left: the next request is admitted, and its 60 streamed tokens (30 prompt,
    # 30 completion) are charged when the stream ends, before the client sees its end. The
    # deficit is deep on purpose: at 10 a minute it takes 336 s to refill, so however slowly a
    # loaded machine runs the next lines, the budget cannot be positive again.
    words = [f"w{i}" for i in range(30)]
    pieces = [c.choices[0].delta.content for c in chat(client, name, " ".join(words), stream=True)
              if c.choices and c.choices[0].delta.content]
    assert pieces == [words[0]] + [" " + w for w in words[1:]]
    with pytest.raises(RateLimitError) as refused:
        chat(client, name, "x")
    error = refused.value.response.json()["error"]
    assert error["type"] == "tokens" and "10 tokens/min" in error["message"]
    # 56 tokens under zero at 10 a minute: 336 s until it is above zero again, less the time
    # since the first request (minutes would be a broken limiter, not a slow machine).
    assert 240 <= int(refused.value.response.headers["Retry-After"]) <= 337
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


@pytest.mark.parametrize("limits,field", [
    ([{"key": "group", "principal": "no-such-group", "queries_per_minute": 1}],
     "rate_limits[0].principal: no group named 'no-such-group'"),
    ([{"key": "user", "principal": "admin", "queries_per_minute": 1},
      {"key": "group", "principal": "admin", "queries_per_minute": 1}],
     "rate_limits[1].principal: 'admin' is a user, not a group"),
    ([{"key": "user", "principal": "nobody-here", "queries_per_minute": 1}],
     "rate_limits[0].principal: no user named 'nobody-here'"),
    ([{"key": "org", "queries_per_minute": 1}], "rate_limits[0].key must be endpoint, user or group"),
    ([{"key": "user", "queries_per_minute": 0}], "rate_limits[0].queries_per_minute must be between"),
    ([{"key": "user", "tokens_per_minute": -1}], "rate_limits[0].tokens_per_minute must be between"),
    ([{"key": "user", "queries_per_minute": 10**12}],
     "rate_limits[0].queries_per_minute must be between 1 and 1000000"),
    ([{"key": "user", "queries_per_minute": 1, "per": "hour"}],
     "rate_limits[0].per is not a field of a rate limit"),
    ({"key": "user"}, "rate_limits"),
])
def test_bad_rate_limits_name_the_field(server, admin, llm_model, limits, field):
    name = f"bad-{uuid.uuid4().hex[:6]}"
    error_of(admin.post(server.api(f"{TY}/endpoints"),
                        json={"name": name, "served_entities": [{"model": llm_model, "version": 1}],
                              "rate_limits": limits}), 400, field)
    assert admin.get(server.api(f"{TY}/endpoints/{name}")).status_code == 404


def test_query_only_token(server, admin, llm_model):
    from openai import AuthenticationError, PermissionDeniedError

    mine, other = f"qa-{uuid.uuid4().hex[:6]}", f"qb-{uuid.uuid4().hex[:6]}"
    for name in (mine, other):
        create(admin, server, name=name, served_entities=[{"model": llm_model, "version": 1}],
               min_replicas=1, scale_to_zero_seconds=0)
    user, user_token = new_user(server, admin, [mine, other], "dana")

    # Created with the CLI, as the user; printed once.
    out = cli(server, "token", "create", "--query-only", "--endpoint", mine, "--expires-in", "1h",
              token=user_token)
    assert out.returncode == 0, out.stderr
    assert "query-only token" in out.stderr and mine in out.stderr
    query_token = out.stdout.strip()
    assert query_token.startswith("ty_")

    client = openai_client(server, query_token)
    assert chat(client, mine, "only this").choices[0].message.content == "only this"
    assert [m.id for m in client.models.list().data] == [mine]
    with pytest.raises(PermissionDeniedError) as denied:
        chat(client, other)
    assert "query-only token may query only endpoint(s) " + mine in str(denied.value)
    q = server.session(query_token)
    error_of(q.post(server.api(f"/serving-endpoints/{other}/invocations"),
                    json={"messages": [{"role": "user", "content": "x"}]}), 403, "query-only")
    assert ok(q.post(server.api(f"/serving-endpoints/{mine}/invocations"),
                     json={"model": mine, "messages": [{"role": "user", "content": "x"}]}))["choices"]

    # Every other API refuses it, reads included, saying why.
    for method, path, body in [
            ("POST", "/api/2.0/mlflow/experiments/search", {"max_results": 5}),
            ("GET", "/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default", None),
            ("GET", f"{TY}/endpoints", None),
            ("GET", f"{TY}/endpoints/{mine}", None),
            ("PATCH", f"{TY}/endpoints/{mine}", {"max_replicas": 2}),
            ("POST", f"{TY}/tokens", {"description": "more"}),
            ("GET", f"{TY}/tokens", None),
            ("GET", f"{TY}/jobs", None),
            ("GET", "/api/2.1/unity-catalog/catalogs", None),
    ]:
        r = q.request(method, server.api(path), json=body)
        error_of(r, 403, "query-only token may not call", "trainyard token create")
    # The real mlflow client too.
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    os.environ["MLFLOW_TRACKING_TOKEN"] = query_token
    try:
        with pytest.raises(MlflowException, match="query-only"):
            MlflowClient(tracking_uri=server.url).search_experiments()
    finally:
        os.environ.pop("MLFLOW_TRACKING_TOKEN", None)

    # Listed and revoked like other tokens.
    out = cli(server, "token", "list", token=user_token)
    assert out.returncode == 0 and f"query-only: {mine}" in out.stdout, out.stdout
    tokens = ok(server.session(user_token).get(server.api(f"{TY}/tokens")))["tokens"]
    info = next(t for t in tokens if t.get("query_only"))
    assert info["endpoints"] == [mine] and info["scope"] == f"query:{mine}"
    assert info["expires_at"] > info["created_at"]

    # Without --endpoint: every endpoint the user may query, and nothing else.
    any_token = ok(server.session(user_token).post(server.api(f"{TY}/tokens"),
                                                   json={"query_only": True}))["token"]
    anywhere = openai_client(server, any_token)
    assert chat(anywhere, other, "other one").choices[0].message.content == "other one"
    assert sorted(m.id for m in anywhere.models.list().data) == sorted([mine, other])
    error_of(server.session(any_token).get(server.api(f"{TY}/users")), 403, "query-only")

    # Bad requests for one name the field.
    error_of(server.session(user_token).post(server.api(f"{TY}/tokens"),
                                             json={"query_only": True,
                                                   "endpoints": ["ok", "bad name!"]}),
             400, "endpoints[1]")
    error_of(server.session(user_token).post(server.api(f"{TY}/tokens"),
                                             json={"endpoints": [mine]}), 400, "query_only")

    ok(server.session(user_token).delete(server.api(f"{TY}/tokens/{info['token_id']}")))
    with pytest.raises(AuthenticationError):
        chat(client, mine)
    for name in (mine, other):
        ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_serve_shortcut_creates_waits_and_prints_the_snippet(server, admin, llm_model):
    from openai import OpenAI

    name = f"srv-{uuid.uuid4().hex[:6]}"
    out = cli(server, "serve", f"{llm_model}/1", "--name", name, "--rate-limit", "user:100/min")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Created endpoint {name} serving {llm_model}/1." in out.stdout
    assert "Ready in" in out.stdout
    assert f"Base URL: {server.url}/serving-endpoints" in out.stdout
    snippet = out.stdout[out.stdout.index("from openai import OpenAI"):].strip().splitlines()
    assert len(snippet) == 3, out.stdout
    assert f'model="{name}"' in snippet[2]
    state = ok(admin.get(server.api(f"{TY}/endpoints/{name}")))
    assert state["state"] == "READY" and state["min_replicas"] == 1
    assert state["rate_limits"] == [{"key": "user", "queries_per_minute": 100}]
    # The snippet runs as printed, with a token in place of the placeholder.
    code = "\n".join(snippet).replace(
        snippet[1][snippet[1].index('api_key="'):snippet[1].rindex('")') + 1],
        f'api_key="{server.token}"')
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=READY_TIMEOUT_S)
    assert ran.returncode == 0 and ran.stdout.strip() == "Hello", ran.stderr

    # Again with the alias: the endpoint is updated to serve it, and ready again.
    out = cli(server, "serve", f"{llm_model}@champion", "--name", name)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Updated endpoint {name} serving {llm_model}@champion." in out.stdout
    state = ok(admin.get(server.api(f"{TY}/endpoints/{name}")))
    assert state["served_entities"][0]["alias"] == "champion"
    assert any(r["state"] == "READY" and r["served_entity"] == f"{llm_model}-champion"
               for r in state["replicas"])
    client = OpenAI(base_url=f"{server.url}/serving-endpoints", api_key=server.token,
                    max_retries=0)
    assert chat(client, name, "after").choices[0].message.content == "after"

    # What is wrong is said: a bad model spec, a model that does not exist.
    out = cli(server, "serve", "no-version-here")
    assert out.returncode != 0 and "MODEL@ALIAS or MODEL/VERSION" in out.stderr, out.stderr
    out = cli(server, "serve", "no-such-model/1", "--name", f"x-{uuid.uuid4().hex[:6]}")
    assert out.returncode != 0 and "served_entities[0].model" in out.stderr, out.stderr
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_a_restart_does_not_refill_the_buckets(server, admin, llm_model):
    """The buckets are saved in the database (on a timer and when the server stops) and restored
    at start: a user who spent a 1 query/min budget is still refused right after a restart (it
    would take a minute to refill one query; a restart takes seconds)."""
    from openai import RateLimitError

    name = f"rlr-{uuid.uuid4().hex[:6]}"
    create(admin, server, name=name, served_entities=[{"model": llm_model, "version": 1}],
           min_replicas=0, scale_to_zero_seconds=0,
           rate_limits=[{"key": "user", "queries_per_minute": 1}])
    _, carol_token = new_user(server, admin, [name], "carol")
    assert chat(openai_client(server, carol_token), name).choices[0].message.content == "a b c"
    with pytest.raises(RateLimitError):
        chat(openai_client(server, carol_token), name)

    server.restart()
    with pytest.raises(RateLimitError) as refused:
        chat(openai_client(server, carol_token), name)
    assert refused.value.response.status_code == 429
    assert "per user: 1 queries/min" in refused.value.response.json()["error"]["message"]
    # Still most of the minute to wait, not a fresh bucket's.
    assert int(refused.value.response.headers["Retry-After"]) >= 20
