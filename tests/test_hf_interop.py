"""Our models against the real Hugging Face stack: what the native trainer writes (a merged
model through SavePretrained, a LoRA adapter through SavePeftAdapter) must load in
transformers' AutoModelForCausalLM and peft's PeftModel and give the logits we computed.

Our side is build/hf_roundtrip_tool (built with the trainer; tests/tools/hf_roundtrip.cc). The
transformers/peft side runs in <repo>/.venv-hf (torch + transformers + peft), because the
test venv has no torch.

Env: HF_ROUNDTRIP_BIN (default <repo>/build/hf_roundtrip_tool), HF_PYTHON (default
<repo>/.venv-hf/bin/python).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOL = Path(os.environ.get("HF_ROUNDTRIP_BIN", REPO / "build" / "hf_roundtrip_tool"))
HF_PYTHON = Path(os.environ.get("HF_PYTHON", REPO / ".venv-hf" / "bin" / "python"))
FIXTURES = REPO / "tests" / "fixtures" / "train" / "models"
ATOL = 1e-4

# Runs in .venv-hf: prints the logits transformers computes for the merged model and peft for
# base + adapter.
HF_SIDE = r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM
from peft import PeftModel

base_dir, out_dir, ids = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ids = torch.tensor(ids)
with torch.no_grad():
    merged = AutoModelForCausalLM.from_pretrained(out_dir + "/merged", torch_dtype=torch.float32)
    merged_logits = merged.eval()(input_ids=ids).logits
    base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32).eval()
    base_logits = base(input_ids=ids).logits
    peft = PeftModel.from_pretrained(base, out_dir + "/adapter").eval()
    peft_logits = peft(input_ids=ids).logits
    n_lora = sum(1 for n, _ in peft.named_parameters() if "lora_B" in n)
print(json.dumps({
    "merged": merged_logits.reshape(-1).tolist(),
    "peft": peft_logits.reshape(-1).tolist(),
    "base": base_logits.reshape(-1).tolist(),
    "shape": list(merged_logits.shape),
    "n_lora": n_lora,
    "merged_type": type(merged).__name__,
}))
"""


def _require(path: Path, how: str) -> None:
    if not path.exists():
        pytest.fail(f"{path} does not exist; {how}")


def _max_abs_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.mark.parametrize(
    "name,targets,n_layers,cls",
    [
        ("llama", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", 14,
         "LlamaForCausalLM"),
        ("qwen2", "q_proj,v_proj", 4, "Qwen2ForCausalLM"),
        ("gpt2", "c_attn,c_proj,c_fc", 8, "GPT2LMHeadModel"),
    ],
)
def test_merged_model_and_adapter_load_in_transformers_and_peft(tmp_path, name, targets,
                                                                 n_layers, cls):
    _require(TOOL, "build it: ninja -C build hf_roundtrip_tool")
    _require(HF_PYTHON, "create .venv-hf with torch, transformers and peft")
    base = FIXTURES / name
    ours = subprocess.run([str(TOOL), str(base), str(tmp_path), targets], capture_output=True,
                          text=True, timeout=300)
    assert ours.returncode == 0, ours.stderr
    ours = json.loads(ours.stdout)
    theirs = subprocess.run(
        [str(HF_PYTHON), "-c", HF_SIDE, str(base), str(tmp_path), json.dumps(ours["input_ids"])],
        capture_output=True, text=True, timeout=600)
    assert theirs.returncode == 0, theirs.stderr[-4000:]
    theirs = json.loads(theirs.stdout.strip().splitlines()[-1])

    assert theirs["merged_type"] == cls
    assert theirs["n_lora"] == n_layers  # PEFT wrapped exactly the layers we adapted
    assert theirs["shape"] == ours["shape"]
    # The adapter really changes the model (random non-zero B), so equality is not vacuous.
    assert _max_abs_diff(theirs["base"], ours["adapter_logits"]) > 1e-3
    assert all(math.isfinite(x) for x in ours["adapter_logits"])
    assert _max_abs_diff(ours["adapter_logits"], ours["merged_logits"]) < ATOL
    assert _max_abs_diff(theirs["peft"], ours["adapter_logits"]) < ATOL
    assert _max_abs_diff(theirs["merged"], ours["merged_logits"]) < ATOL

    adapter_config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["peft_type"] == "LORA"
    assert adapter_config["fan_in_fan_out"] is (name == "gpt2")
    assert sorted(adapter_config["target_modules"]) == sorted(targets.split(","))

