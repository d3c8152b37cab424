"""The serving engine's greedy output against Hugging Face transformers' `generate`, token for
token: for the tiny Llama, Qwen2 and GPT-2 fixtures and a tiny Mistral with a sliding window
made here, several prompts, with and without a PEFT LoRA adapter, stopping at eos or not.

Our side is build/engine_tool (tests/tools/engine_tool.cc), which submits all prompts at once,
so they run as one continuous batch with the KV cache. The transformers side runs in
<repo>/.venv-hf (torch + transformers + peft), as in test_hf_interop.py.

Env: ENGINE_TOOL_BIN (default <repo>/build/engine_tool), ENGINE_TOOL_DEVICE (default cpu; cuda for
the GPU check), HF_PYTHON (default
<repo>/.venv-hf/bin/python).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOL = Path(os.environ.get("ENGINE_TOOL_BIN", REPO / "build" / "engine_tool"))
HF_PYTHON = Path(os.environ.get("HF_PYTHON", REPO / ".venv-hf" / "bin" / "python"))
FIXTURES = REPO / "tests" / "fixtures" / "train" / "models"

PROMPTS = [[5, 17, 99, 3, 42, 8, 11, 250], [1, 2, 3], [7], [300, 12, 44, 9, 81, 100, 2, 6, 19]]
MAX_NEW = 24

# Runs in .venv-hf: greedy generate for each request, one prompt at a time (no padding).
HF_SIDE = r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM
from peft import PeftModel

model_dir, requests, adapters = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
base = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
models = {"": base}
for name, path in adapters.items():
    fresh = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    models[name] = PeftModel.from_pretrained(fresh, path).eval()
eos = base.config.eos_token_id
out = []
with torch.no_grad():
    for r in requests:
        m = models[r.get("adapter", "")]
        ids = torch.tensor([r["prompt"]])
        kwargs = dict(max_new_tokens=r["max_tokens"], do_sample=False, num_beams=1,
                      pad_token_id=0, attention_mask=torch.ones_like(ids))
        if r.get("ignore_eos"):
            kwargs["eos_token_id"] = None
        gen = m.generate(input_ids=ids, **kwargs)[0, ids.shape[1]:].tolist()
        if not r.get("ignore_eos") and gen and gen[-1] == eos:
            gen = gen[:-1]
        out.append(gen)
print(json.dumps({"outputs": out}))
"""

# Runs in .venv-hf: a tiny random Mistral with a sliding window shorter than the sequences.
MAKE_MISTRAL = r"""
import sys, torch, transformers
torch.manual_seed(3)
config = transformers.MistralConfig(vocab_size=320, hidden_size=32, intermediate_size=64,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=128, sliding_window=6, rms_norm_eps=1e-5, bos_token_id=1,
    eos_token_id=2, initializer_range=0.2, tie_word_embeddings=False)
model = transformers.MistralForCausalLM(config).eval()
model.save_pretrained(sys.argv[1], safe_serialization=True)
"""


def _require(path: Path, how: str) -> None:
    if not path.exists():
        pytest.fail(f"{path} does not exist; {how}")


def _requests(adapter: str | None) -> list[dict]:
    out = []
    for ignore_eos in (True, False):
        for i, prompt in enumerate(PROMPTS):
            r = {"prompt": prompt, "max_tokens": MAX_NEW - 3 * i, "ignore_eos": ignore_eos}
            if adapter and i % 2 == 1:
                r["adapter"] = adapter
            out.append(r)
    return out


def _ours(model_dir: Path, requests: list[dict], adapters: dict, tmp_path: Path) -> list:
    spec = tmp_path / "requests.json"
    spec.write_text(json.dumps(requests))
    args = [str(TOOL), str(model_dir), str(spec)] + [f"{k}={v}" for k, v in adapters.items()]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["outputs"]


def _theirs(model_dir: Path, requests: list[dict], adapters: dict) -> list:
    done = subprocess.run(
        [str(HF_PYTHON), "-c", HF_SIDE, str(model_dir), json.dumps(requests),
         json.dumps({k: str(v) for k, v in adapters.items()})],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["outputs"]


@pytest.mark.parametrize("name,adapter", [("llama", "llama_lora"), ("qwen2", None),
                                          ("gpt2", "gpt2_lora"), ("mistral", None)])
def test_greedy_tokens_equal_transformers_generate(tmp_path, name, adapter):
    _require(TOOL, "build it: ninja -C build engine_tool")
    _require(HF_PYTHON, "create .venv-hf with torch, transformers and peft")
    if name == "mistral":
        model_dir = tmp_path / "mistral"
        made = subprocess.run([str(HF_PYTHON), "-c", MAKE_MISTRAL, str(model_dir)],
                              capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr[-4000:]
    else:
        model_dir = FIXTURES / name
    adapters = {"tuned": FIXTURES / adapter} if adapter else {}
    requests = _requests("tuned" if adapter else None)
    ours = _ours(model_dir, requests, adapters, tmp_path)
    theirs = _theirs(model_dir, requests, adapters)
    assert len(ours) == len(requests)
    for i, (r, a, b) in enumerate(zip(requests, ours, theirs)):
        assert a == b, f"request {i} ({r}): ours {a} != transformers {b}"
    # Not vacuous: the ignore-eos half has every token; an adapter changes the output.
    assert [len(o) for o in ours[:len(PROMPTS)]] == [MAX_NEW - 3 * i for i in range(len(PROMPTS))]
    if adapter:
        base_only = _ours(model_dir, [dict(r, adapter="") for r in requests[:len(PROMPTS)]], {},
                          tmp_path)
        assert base_only[1] != ours[1]
