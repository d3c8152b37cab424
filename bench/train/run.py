"""bench/run train [--quick]: training tokens/s of the native trainer (trainyard-train, libtorch)
against the same model, batch and LoRA setup in PyTorch eager from Python (transformers
LlamaForCausalLM + PEFT on the same Debian torch), side by side, alternating rounds.

On a machine with an NVIDIA GPU (libtorch built with CUDA) it adds the GPU comparison with
bf16 autocast. Prints one JSON line per figure. See README.md in this directory.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINER = ROOT / "build" / "trainyard-train"
HF_PY = ROOT / ".venv-hf" / "bin" / "python"
MODEL = ROOT / "examples" / "quickstart" / "model" / "config.json"
TOKENIZER = ROOT / "examples" / "quickstart" / "tokenizer.json"

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--rounds", type=int, default=0)
ap.add_argument("--method", choices=["lora", "full"], default="lora")
args = ap.parse_args()

rounds = args.rounds or (1 if args.quick else 3)
steps = 6 if args.quick else 20
warmup = 3
batch, seq = 8, 128
threads = os.cpu_count() or 1

if not TRAINER.exists():
    subprocess.run([str(ROOT / "scripts" / "build")], check=True)

work = Path(tempfile.mkdtemp(prefix="bench-train-"))
subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart" / "make_support_tickets.py"),
                "--out", str(work / "data"), "--train", "2000", "--val", "8", "--test", "8",
                "--seed", "3"], check=True, capture_output=True)


def ours(device: str) -> float:
    out = work / f"out-{device}"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    cfg = {
        "model": {"config": str(MODEL), "tokenizer": str(TOKENIZER)},
        "method": args.method,
        "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        "data": {"train": str(work / "data" / "train.jsonl"),
                 "validation": str(work / "data" / "val.jsonl"), "template": "mistral",
                 "max_seq_len": seq, "packing": True},
        "training": {"max_steps": warmup + steps, "micro_batch_size": batch,
                     "learning_rate": 1e-4, "device": device, "seed": 1},
        "eval": {"max_examples": 0, "accuracy": False},
        "checkpoint": {"every_steps": 0},
        "output": {"dir": str(out), "adapter": False, "merged": False},
        "logging": {"every_steps": 1},
    }
    path = work / f"bench-{device}.yaml"
    path.write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINYARD_", "MLFLOW_"))}
    r = subprocess.run([str(TRAINER), str(path)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"trainyard-train failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    tps = [float(m.group(1)) for m in re.finditer(r"\| (\d+) tok/s \|", r.stdout)]
    return statistics.median(tps[warmup:])


def anchor(device: str) -> float:
    r = subprocess.run([str(HF_PY), str(Path(__file__).parent / "torch_side.py"), "--config",
                        str(MODEL), "--batch", str(batch), "--seq", str(seq), "--steps",
                        str(steps), "--warmup", str(warmup), "--method", args.method,
                        "--threads", str(threads), "--device", device],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"torch_side.py failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["tokens_per_second"]


def has_cuda() -> bool:
    r = subprocess.run([str(HF_PY), "-c", "import torch; print(torch.cuda.is_available())"],
                       capture_output=True, text=True)
    return r.stdout.strip() == "True"


def compare(device: str, anchor_name: str, target: str, name: str) -> None:
    a, b = [], []
    for i in range(rounds):
        a.append(ours(device))
        b.append(anchor(device))
        print(f"round {i + 1}/{rounds} ({device}): trainyard-train {a[-1]:,.0f} tok/s, "
              f"{anchor_name} {b[-1]:,.0f} tok/s", file=sys.stderr)
    ma, mb = statistics.median(a), statistics.median(b)
    print(json.dumps({"bench": name, "value": round(ma), "unit": "tokens/s",
                      "anchor": anchor_name, "anchor_value": round(mb),
                      "ratio": round(ma / mb, 3), "target": target,
                      "config": {"model": "quickstart llama (hidden 256, 4 layers)",
                                 "batch": batch, "seq_len": seq, "method": args.method,
                                 "threads": threads}}))


compare("cpu", "PyTorch eager (transformers + PEFT, Debian torch 1.13, CPU)", ">= 1.0x",
        f"train_{args.method}_cpu_tokens_per_s")
if has_cuda():
    compare("cuda", "transformers + PEFT (bf16 autocast)", ">= 1.2x",
            f"train_{args.method}_gpu_tokens_per_s")
else:
    print("no CUDA GPU here: the GPU comparison (>= 1.2x transformers + PEFT) was not run",
          file=sys.stderr)
