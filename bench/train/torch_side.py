"""The anchor of bench/train: the same model, batch and LoRA setup trained with Hugging Face
transformers (LlamaForCausalLM, eager attention) + PEFT on PyTorch eager from Python.

Run with the .venv-hf interpreter (Debian's torch + transformers + peft). Prints one JSON line:
{"tokens_per_second": median, "step_seconds": [...]} over the measured steps.
"""

import argparse
import json
import statistics
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--config", required=True)
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--seq", type=int, required=True)
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--method", choices=["lora", "full"], default="lora")
ap.add_argument("--rank", type=int, default=8)
ap.add_argument("--targets", default="q_proj,v_proj")
ap.add_argument("--threads", type=int, default=0)
ap.add_argument("--device", default="cpu")
args = ap.parse_args()

if args.threads:
    torch.set_num_threads(args.threads)
torch.manual_seed(0)
cfg = LlamaConfig.from_json_file(args.config)
cfg._attn_implementation = "eager"
model = LlamaForCausalLM(cfg)
if args.method == "lora":
    model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=2 * args.rank,
                                             lora_dropout=0.0,
                                             target_modules=args.targets.split(",")))
dev = torch.device(args.device)
use_bf16 = dev.type == "cuda"
model.to(dev).train()
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=dev)
labels = ids.clone()
times = []
for step in range(args.warmup + args.steps):
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=use_bf16):
        out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    if step >= args.warmup:
        times.append(time.perf_counter() - t0)
med = statistics.median(times)
print(json.dumps({"tokens_per_second": args.batch * args.seq / med, "step_seconds": times}))
