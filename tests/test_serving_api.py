"""trainyard-serve-model's OpenAI-compatible API, driven by the real `openai` client: chat and
text completions (whole and streamed as server-sent events), the model list, token usage,
adapters chosen by the request's `model`, stop sequences, seeded sampling, concurrent requests,
and OpenAI-shaped 400/404 errors for bad input.

The model is a tiny random Qwen2 made here with transformers (in .venv-hf) around the
committed Qwen2 tokenizer fixture, plus a PEFT LoRA adapter with random weights.

Env: SERVE_MODEL_BIN (default next to TRAINYARD_BIN), HF_PYTHON (default <repo>/.venv-hf).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
import requests

from conftest import REPO, TRAINYARD_BIN, tail

SERVE = Path(os.environ.get("SERVE_MODEL_BIN", TRAINYARD_BIN.parent / "trainyard-serve-model"))
HF_PYTHON = Path(os.environ.get("HF_PYTHON", REPO / ".venv-hf" / "bin" / "python"))
TOKENIZER = REPO / "tests" / "fixtures" / "train" / "tokenizers" / "qwen2" / "tokenizer.json"
CONTEXT = 128

MAKE_MODEL = r"""
import sys, torch, transformers
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from safetensors.torch import save_file
out = sys.argv[1]
torch.manual_seed(5)
config = transformers.Qwen2Config(vocab_size=1024, hidden_size=32, intermediate_size=64,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=%d, rms_norm_eps=1e-6, eos_token_id=1000,
    initializer_range=0.3, tie_word_embeddings=False)
model = transformers.Qwen2ForCausalLM(config).eval()
model.save_pretrained(out + "/model", safe_serialization=True)
peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
with torch.no_grad():
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            p.normal_(0.0, 0.5)
# What PeftModel.save_pretrained writes, without its model card (which needs Jinja2).
peft.peft_config["default"].save_pretrained(out + "/adapter")
save_file(get_peft_model_state_dict(peft), out + "/adapter/adapter_model.safetensors")
""" % CONTEXT


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    if not SERVE.exists():
        pytest.fail(f"{SERVE} does not exist; build it: ninja -C build trainyard-serve-model")
    if not HF_PYTHON.exists():
        pytest.fail(f"{HF_PYTHON} does not exist; create .venv-hf with transformers and peft")
    work = tmp_path_factory.mktemp("serve")
    made = subprocess.run([str(HF_PYTHON), "-c", MAKE_MODEL, str(work)], capture_output=True,
                          text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-4000:]
    shutil.copy(TOKENIZER, work / "model" / "tokenizer.json")
    port_file = work / "port"
    log = open(work / "replica.log", "w")
    proc = subprocess.Popen(
        [str(SERVE), "--model-dir", str(work / "model"), "--adapter", f"tuned={work / 'adapter'}",
         "--served-model-name", "tiny", "--port", "0", "--port-file", str(port_file),
         "--device", "cpu", "--max-batch", "8"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not port_file.exists():
        assert proc.poll() is None, tail(work / "replica.log")
        assert time.monotonic() < deadline, "the replica did not write its port file in 120 s"
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port_file.read_text().strip()}"
    yield url, work
    proc.terminate()
    assert proc.wait(timeout=30) == 0, tail(work / "replica.log")


@pytest.fixture
def client(replica):
    return openai.OpenAI(base_url=replica[0] + "/v1", api_key="unused", max_retries=0)


def greedy(client, prompt, **kw):
    return client.completions.create(model="tiny", prompt=prompt, temperature=0,
                                     extra_body={"ignore_eos": True}, **kw)


def test_health_and_models(replica, client):
    r = requests.get(replica[0] + "/health", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ready"}
    ids = sorted(m.id for m in client.models.list().data)
    assert ids == ["tiny", "tuned"]


def test_completion_usage_and_greedy_determinism(client):
    a = greedy(client, "The refund for order", max_tokens=12)
    b = greedy(client, "The refund for order", max_tokens=12)
    assert a.object == "text_completion"
    assert a.choices[0].text == b.choices[0].text and a.choices[0].text
    assert a.choices[0].finish_reason == "length"
    assert a.usage.completion_tokens == 12
    assert a.usage.prompt_tokens > 0
    assert a.usage.total_tokens == a.usage.prompt_tokens + 12


def test_chat_completion(client):
    r = client.chat.completions.create(
        model="tiny", max_tokens=10, temperature=0, extra_body={"ignore_eos": True},
        messages=[{"role": "system", "content": "You sort tickets."},
                  {"role": "user", "content": "My card was charged twice."}])
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str) and r.choices[0].message.content
    assert r.usage.completion_tokens == 10 and r.choices[0].finish_reason == "length"


def test_streamed_chat_equals_the_whole_answer(client):
    kw = dict(model="tiny", max_tokens=14, temperature=0, extra_body={"ignore_eos": True},
              messages=[{"role": "user", "content": "Where is my parcel?"}])
    whole = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True,
                                                 stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and
              c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 14
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1


def test_streamed_completion_wire_format(replica, client):
    whole = greedy(client, "Hello", max_tokens=8)
    with requests.post(replica[0] + "/v1/completions", stream=True, timeout=60, json={
            "model": "tiny", "prompt": "Hello", "max_tokens": 8, "temperature": 0,
            "ignore_eos": True, "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.content.decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    payloads = [json.loads(e[len("data: "):]) for e in events[:-2]]
    assert all(e.startswith("data: ") for e in events[:-1])
    assert "".join(p["choices"][0]["text"] for p in payloads) == whole.choices[0].text
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"
    # How many events carry the 8 tokens depends on how fast this client reads: tokens the
    # replica has not sent yet are merged into one event (backpressure), so no count is asserted.


def test_adapter_is_chosen_by_model(client):
    base = greedy(client, "Cancel my subscription", max_tokens=12).choices[0].text
    tuned = client.completions.create(model="tuned", prompt="Cancel my subscription",
                                      max_tokens=12, temperature=0,
                                      extra_body={"ignore_eos": True})
    assert tuned.model == "tuned"
    assert tuned.choices[0].text != base


def test_stop_sequence_cuts_the_text(client):
    full = greedy(client, "Reset my password", max_tokens=30).choices[0].text
    m = re.search(r"[A-Za-z]{3}", full[4:])
    assert m, f"no 3 letters to stop at in {full!r}"
    stop = m.group(0)
    r = greedy(client, "Reset my password", max_tokens=30, stop=[stop, "\x00never"])
    assert r.choices[0].text == full[:full.find(stop)]
    assert r.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(model="tiny", prompt="Reset my password",
                                              max_tokens=30, temperature=0, stop=stop,
                                              stream=True, extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in streamed) == full[:full.find(stop)]


def test_seeded_sampling_is_reproducible(client):
    def sample(seed):
        return client.completions.create(model="tiny", prompt="Invoice", max_tokens=16,
                                         temperature=1.0, top_p=0.9, seed=seed,
                                         extra_body={"ignore_eos": True, "top_k": 200}
                                         ).choices[0].text
    assert sample(11) == sample(11)
    assert sample(11) != sample(12)


def test_concurrent_requests_each_get_their_own_answer(client):
    prompts = [f"Ticket number {i} says" for i in range(8)]
    expected = [greedy(client, p, max_tokens=16).choices[0].text for p in prompts]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda p: greedy(client, p, max_tokens=16).choices[0].text,
                            prompts * 2))
    assert got == expected * 2


def test_bad_input_gets_openai_errors(replica, client):
    r = requests.post(replica[0] + "/v1/chat/completions", data="{not json", timeout=10,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    cases = [(dict(temperature=3), "temperature"), (dict(top_p=0), "top_p"),
             (dict(max_tokens=0), "max_tokens"), (dict(n=9), "n")]
    for kw, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="tiny", prompt="hi", **kw)
        assert e.value.status_code == 400
        assert e.value.body["param"] == param, e.value.body
        assert param in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="word " * 400, max_tokens=4)
    assert str(CONTEXT) in e.value.body["message"] and e.value.body["param"] == "prompt"
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[])
    assert e.value.body["param"] == "messages"
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-5", prompt="hi")
    assert e.value.body["code"] == "model_not_found" and "gpt-5" in e.value.body["message"]
    # The replica still serves after all that.
    assert greedy(client, "hi", max_tokens=2).usage.completion_tokens == 2


def test_cli_runs_the_replica_and_bad_flags_say_what_is_wrong(tmp_path):
    shown = subprocess.run([str(TRAINYARD_BIN), "serve-model", "--help"], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    for flag in ("--model-dir", "--adapter", "--served-model-name", "--port-file", "--device",
                 "--max-batch", "--chat-template"):
        assert flag in shown.stdout
    missing = subprocess.run([str(SERVE), "--model-dir", str(tmp_path / "none"), "--port", "0"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "config.json" in missing.stderr
    bad = subprocess.run([str(SERVE), "--model-dir", str(tmp_path), "--port", "0",
                          "--adapter", "no-directory"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "NAME=DIR" in bad.stderr


def test_health_is_503_until_the_model_is_loaded(replica, tmp_path):
    gate, port_file, log_path = tmp_path / "gate", tmp_path / "port", tmp_path / "replica.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(SERVE), "--model-dir", str(replica[1] / "model"), "--port", "0",
             "--port-file", str(port_file), "--device", "cpu", "--load-gate-for-test", str(gate)],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (m := re.search(r"listening on 127\.0\.0\.1:(\d+)", log_path.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, tail(log_path)
            time.sleep(0.02)
        url = f"http://127.0.0.1:{m.group(1)}"
        r = requests.get(url + "/health", timeout=10)
        assert r.status_code == 503 and r.json() == {"status": "loading"}
        r = requests.post(url + "/v1/completions", json={"model": "model", "prompt": "hi"},
                          timeout=10)
        assert r.status_code == 503
        assert r.json()["error"]["type"] == "service_unavailable_error"
        assert not port_file.exists()  # the port file means "ready"
        gate.touch()
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, tail(log_path)
            time.sleep(0.02)
        assert port_file.read_text().strip() == m.group(1)
        assert requests.get(url + "/health", timeout=10).json() == {"status": "ready"}
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, tail(log_path)


def _choices_by_index(chunks) -> dict:
    """Per choice index: (text, finish reasons) of a streamed completion's chunks."""
    out: dict = {}
    for c in chunks:
        for ch in c.choices:
            text, finals = out.setdefault(ch.index, ["", []])
            piece = ch.text if hasattr(ch, "text") else (ch.delta.content or "")
            out[ch.index][0] = text + (piece or "")
            if ch.finish_reason:
                finals.append(ch.finish_reason)
    return out


def test_n_choices_share_a_prompt_and_differ_by_seed(client):
    kw = dict(model="tiny", prompt="Refund request", max_tokens=12, temperature=1.0, seed=11,
              extra_body={"ignore_eos": True})
    r = client.completions.create(n=3, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.text for c in r.choices]
    assert len(set(texts)) == 3, texts  # seed + index: every choice its own sample
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 3 * 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + 36
    # Choice i is the lone request with seed 11 + i; the same request again is the same.
    assert client.completions.create(**kw).choices[0].text == texts[0]
    assert client.completions.create(**dict(kw, seed=13)).choices[0].text == texts[2]
    assert [c.text for c in client.completions.create(n=3, **kw).choices] == texts
    chunks = list(client.completions.create(n=3, stream=True,
                                            stream_options={"include_usage": True}, **kw))
    by_index = _choices_by_index(chunks)
    assert {i: v[0] for i, v in by_index.items()} == dict(enumerate(texts))
    assert all(v[1] == ["length"] for v in by_index.values())
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 36

    chat = dict(model="tiny", max_tokens=8, temperature=1.0, seed=5, n=2,
                extra_body={"ignore_eos": True},
                messages=[{"role": "user", "content": "Where is my parcel?"}])
    whole = client.chat.completions.create(**chat)
    assert [c.index for c in whole.choices] == [0, 1]
    assert whole.choices[0].message.content != whole.choices[1].message.content
    assert whole.usage.completion_tokens == 16
    chunks = list(client.chat.completions.create(stream=True, **chat))
    roles = [ch.index for c in chunks for ch in c.choices if ch.delta.role == "assistant"]
    assert sorted(roles) == [0, 1]
    by_index = _choices_by_index(chunks)
    assert [by_index[i][0] for i in (0, 1)] == [c.message.content for c in whole.choices]
    for n in (0, 9):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="tiny", prompt="hi", n=n)
        assert e.value.body["param"] == "n" and "8" in e.value.body["message"]


# Runs in .venv-hf: greedy decoding with the full forward at every step; each step's chosen
# token, its log-softmax and the top 5.
HF_LOGPROBS = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32).eval()
ids, steps = json.loads(sys.argv[2]), int(sys.argv[3])
out = []
with torch.no_grad():
    for _ in range(steps):
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
        top = lp.topk(5)
        token = int(top.indices[0])
        out.append({"token": token, "logprob": float(lp[token]),
                    "top": [float(v) for v in top.values]})
        ids = ids + [token]
print(json.dumps(out))
"""


def test_logprobs_equal_transformers_log_softmax(replica, client):
    prompt, steps = [5, 17, 99, 3, 42, 8, 11, 250], 8
    done = subprocess.run([str(HF_PYTHON), "-c", HF_LOGPROBS, str(replica[1] / "model"),
                           json.dumps(prompt), str(steps)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    kw = dict(model="tiny", prompt=prompt, max_tokens=steps, temperature=0, logprobs=5,
              extra_body={"ignore_eos": True})
    r = client.completions.create(**kw)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == steps
    for i, (ours, want) in enumerate(zip(lp.token_logprobs, theirs)):
        assert abs(ours - want["logprob"]) < 1e-3, (i, ours, want)
        top = lp.top_logprobs[i]
        # Tokens whose text is the same (bytes of one UTF-8 character) share a key.
        assert 1 <= len(top) <= 5
        assert abs(max(top.values()) - want["top"][0]) < 1e-3
        for v in top.values():
            assert min(abs(v - t) for t in want["top"]) < 1e-3, (i, top, want)
    assert lp.text_offset[0] == 0
    assert lp.text_offset == sorted(lp.text_offset)
    # Streamed: the same tokens and log-probabilities, spread over the chunks.
    chunks = list(client.completions.create(stream=True, **kw))
    streamed = [(t, v) for c in chunks for ch in c.choices if ch.logprobs
                for t, v in zip(ch.logprobs.tokens, ch.logprobs.token_logprobs)]
    assert streamed == list(zip(lp.tokens, lp.token_logprobs))
    assert client.completions.create(**dict(kw, logprobs=None)).choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**dict(kw, logprobs=6))
    assert e.value.body["param"] == "logprobs"


def test_chat_logprobs_in_openai_shape(client):
    kw = dict(model="tiny", max_tokens=10, temperature=0, logprobs=True, top_logprobs=20,
              extra_body={"ignore_eos": True},
              messages=[{"role": "user", "content": "My card was charged twice."}])
    r = client.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    assert len(content) == 10
    # The tokens' bytes are the text (invalid UTF-8 aside, which both sides replace with U+FFFD,
    # not always alike).
    joined = b"".join(bytes(t.bytes) for t in content).decode(errors="replace")
    assert joined.replace("\ufffd", "") == r.choices[0].message.content.replace("\ufffd", "")
    for t in content:
        assert len(t.top_logprobs) == 20
        values = [a.logprob for a in t.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert t.logprob == values[0] and t.bytes == t.top_logprobs[0].bytes  # greedy
        assert sum(math.exp(v) for v in values) <= 1 + 1e-4
    chunks = list(client.chat.completions.create(stream=True, **kw))
    streamed = [t for c in chunks for ch in c.choices if ch.logprobs for t in ch.logprobs.content]
    assert [(t.bytes, t.logprob) for t in streamed] == [(t.bytes, t.logprob) for t in content]
    plain = client.chat.completions.create(**dict(kw, logprobs=False, top_logprobs=None))
    assert plain.choices[0].logprobs is None
    for bad in (dict(top_logprobs=21), dict(logprobs=False, top_logprobs=2)):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(**dict(kw, **bad))
        assert e.value.body["param"] == "top_logprobs", e.value.body
