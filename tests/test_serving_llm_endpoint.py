"""An LLM serving endpoint end to end with the real engine: a Hugging Face directory logged with
the real mlflow client and registered, an endpoint on it, and the `openai` client talking to
the server (base_url <server>/serving-endpoints), which starts a `trainyard-serve-model`
replica from zero and routes to it. Then an A/B split between two versions: both answer, and
the capture log names the version of each answer.

The model is test_serving_api.py's tiny random Qwen2 (made in .venv-hf around the committed
Qwen2 tokenizer fixture); a second version is the same model with other random weights.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import module_server
from test_serving_api import HF_PYTHON, MAKE_MODEL, TOKENIZER

TY = "/api/trainyard/v1"
READY_TIMEOUT_S = 180


def ok(r):
    assert r.status_code < 300, f"{r.status_code}: {r.text[:2000]}"
    return r.json()


@pytest.fixture(scope="module")
def server(backend, tmp_path_factory, request):
    yield from module_server(tmp_path_factory, backend, request, "llm-endpoint",
                             ["--local-cpus", "64", "--serving-device", "cpu",
                              "--serving-cold-start-s", str(READY_TIMEOUT_S)])



def make_model(work: Path, seed: int) -> Path:
    made = subprocess.run([str(HF_PYTHON), "-c", MAKE_MODEL.replace("torch.manual_seed(5)",
                                                                    f"torch.manual_seed({seed})"),
                           str(work)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-4000:]
    shutil.copy(TOKENIZER, work / "model" / "tokenizer.json")
    return work / "model"


@pytest.fixture(scope="module")
def llm(server, tmp_path_factory):
    """A registered model with two versions (two random weight sets), each an HF directory."""
    import mlflow
    from mlflow import MlflowClient

    os.environ["MLFLOW_TRACKING_URI"] = server.url
    os.environ["MLFLOW_TRACKING_TOKEN"] = server.token
    try:
        mlflow.set_tracking_uri(server.url)
        name = f"tiny-{uuid.uuid4().hex[:6]}"
        mlflow.set_experiment(f"serving-{name}")
        client = MlflowClient()
        client.create_registered_model(name)
        for seed in (5, 6):
            model_dir = make_model(tmp_path_factory.mktemp(f"model{seed}"), seed)
            with mlflow.start_run() as run:
                mlflow.log_artifacts(str(model_dir), "model")
            client.create_model_version(name, f"runs:/{run.info.run_id}/model", run.info.run_id)
        client.set_registered_model_alias(name, "champion", 1)
        yield name
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.environ.pop("MLFLOW_TRACKING_TOKEN", None)
        mlflow.set_tracking_uri(None)


def test_openai_client_through_the_server_to_the_engine(server, admin, llm):
    from openai import OpenAI

    name = f"support-{uuid.uuid4().hex[:6]}"
    created = ok(admin.post(server.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": llm, "alias": "champion"}],
        "min_replicas": 0, "scale_to_zero_seconds": 600}))
    assert created["state"] == "SCALED_TO_ZERO"
    client = OpenAI(base_url=f"{server.url}/serving-endpoints", api_key=server.token,
                    max_retries=0, timeout=READY_TIMEOUT_S)

    # The first request waits while a replica of the real engine starts, then is served.
    raw = client.chat.completions.with_raw_response.create(
        model=name, messages=[{"role": "user", "content": "my card was charged twice"}],
        max_tokens=8, temperature=0)
    reply = raw.parse()
    # The engine names its answer after the router's request id (the key of its capture and
    # of GET /api/trainyard/v1/lineage/requests/{id}).
    assert reply.id == "chatcmpl-" + raw.headers["x-request-id"]
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert 0 < reply.usage.completion_tokens <= 8 and reply.usage.prompt_tokens > 3
    state = ok(admin.get(server.api(f"{TY}/endpoints/{name}")))
    assert state["replicas"][0]["flavor"] == "llm" and state["replicas"][0]["state"] == "READY"

    # Greedy and deterministic: streamed pieces join into the whole answer.
    prompt = "the parcel never arrived"
    whole = client.completions.create(model=name, prompt=prompt, max_tokens=12, temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=name, prompt=prompt, max_tokens=12, temperature=0, stream=True) if c.choices)
    assert streamed == whole.choices[0].text
    again = client.completions.create(model=name, prompt=prompt, max_tokens=12, temperature=0)
    assert again.choices[0].text == whole.choices[0].text
    assert name in [m.id for m in client.models.list().data]

    # A prompt longer than the context is the replica's 400, passed through.
    from openai import BadRequestError
    with pytest.raises(BadRequestError) as e:
        client.completions.create(model=name, prompt="word " * 400, max_tokens=4)
    assert "context" in str(e.value).lower()
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))


def test_ab_split_between_two_versions_both_answer(server, admin, llm):
    name = f"ab-{uuid.uuid4().hex[:6]}"
    ok(admin.post(server.api(f"{TY}/endpoints"), json={
        "name": name,
        "served_entities": [{"name": "a", "model": llm, "version": 1},
                            {"name": "b", "model": llm, "version": 2}],
        "routes": [{"served_entity": "a", "percent": 50}, {"served_entity": "b", "percent": 50}],
        "min_replicas": 1, "scale_to_zero_seconds": 0}))
    seen: dict[str, set[str]] = {}
    deadline = time.monotonic() + READY_TIMEOUT_S
    for _ in range(40):
        r = admin.post(server.api("/serving-endpoints/completions"),
                       json={"model": name, "prompt": "refund please", "max_tokens": 6,
                             "temperature": 0}, timeout=READY_TIMEOUT_S)
        body = ok(r)
        seen.setdefault(r.headers["x-served-entity"], set()).add(body["choices"][0]["text"])
        if len(seen) == 2 or time.monotonic() > deadline:
            break
    assert set(seen) == {"a", "b"}, seen
    # Each version answers the same greedy text every time it is asked.
    assert all(len(texts) == 1 for texts in seen.values()), seen
    capture = Path(ok(admin.get(server.api(f"{TY}/endpoints/{name}")))["capture"]["path"])
    deadline = time.monotonic() + 30
    while not (capture.exists() and capture.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)  # the capture writer appends in the background
    records = [json.loads(line) for line in capture.read_text().splitlines()]
    assert {str(r.get("model_version")) for r in records} >= {"1", "2"}, records[:2]
    ok(admin.delete(server.api(f"{TY}/endpoints/{name}")))
