"""A stand-in training loop that checkpoints through the Python SDK (trainyard.checkpoint).

Like counter_train.py, the state is a hash chain advanced once per step, plus a float32 weight
vector updated in place (numpy), so a resumed run reaches the same final state as an
uninterrupted one only if it resumes exactly. Every CHECKPOINT_EVERY steps it saves; on
restart trainyard.checkpoint.load() returns what TRAINYARD_RESUME_FROM names.

Env: STEPS, STEP_SECONDS, CHECKPOINT_EVERY, CRASH_AT_STEP + CRASH_ON_ATTEMPT (exit 3 there),
OUT (the final state, as JSON).
"""

import hashlib
import json
import os
import time

import numpy as np

import trainyard.checkpoint
import trainyard.jobs

STEPS = int(os.environ.get("STEPS", "10"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.01"))
EVERY = int(os.environ.get("CHECKPOINT_EVERY", "1"))
ATTEMPT = os.environ["TRAINYARD_ATTEMPT"]

ckpt = trainyard.checkpoint.load()
if ckpt is None:
    step, chain, weights = 0, "seed", np.linspace(-1, 1, 4096, dtype=np.float32)
else:
    step = ckpt.step
    chain = ckpt["chain"].decode()
    weights = ckpt["weights"].copy()
    assert ckpt.metrics["loss"] == float(np.abs(weights).mean()), ckpt.metrics
print(f"attempt {ATTEMPT} starts at step {step} "
      f"(resume_from={os.environ.get('TRAINYARD_RESUME_FROM') or '-'})", flush=True)

while step < STEPS:
    if str(step) == os.environ.get("CRASH_AT_STEP") and ATTEMPT == os.environ.get(
            "CRASH_ON_ATTEMPT", "1"):
        print(f"crashing at step {step}", flush=True)
        os._exit(3)
    time.sleep(STEP_SECONDS)
    chain = hashlib.sha256(f"{chain}:{step}".encode()).hexdigest()
    weights = weights * np.float32(0.9) + np.float32(step) / np.float32(100)
    step += 1
    trainyard.jobs.heartbeat()
    if step % EVERY == 0:
        result = trainyard.checkpoint.save(
            {"chain": chain.encode(), "weights": weights}, step=step,
            metrics={"loss": float(np.abs(weights).mean())}, metadata={"attempt": ATTEMPT})
        assert result["complete"] and result["registered"], result

if os.environ.get("OUT"):
    with open(os.environ["OUT"], "w") as f:
        json.dump({"step": step, "chain": chain,
                   "weights": hashlib.sha256(weights.tobytes()).hexdigest()}, f)
print(f"done at step {step}", flush=True)
