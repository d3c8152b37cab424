"""A stand-in training loop for the jobs tests (standard library only).

The state is a hash chain advanced once per step, so a resumed run reaches the same final state
as an uninterrupted one only if it resumes exactly. Rank 0 checkpoints atomically every
CHECKPOINT_EVERY steps into TRAINYARD_CHECKPOINT_DIR and reports each checkpoint to the server;
a restart resumes from TRAINYARD_RESUME_FROM. On SIGTERM it checkpoints and exits 0.

Env: STEPS, STEP_SECONDS, CHECKPOINT_EVERY, CRASH_AT_STEP + CRASH_ON_ATTEMPT (exit 3 there),
HANG_AT_STEP + HANG_ON_ATTEMPT (stop making progress), OUT (rank 0 writes the final state).
"""

import hashlib
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

STEPS = int(os.environ.get("STEPS", "10"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.02"))
EVERY = int(os.environ.get("CHECKPOINT_EVERY", "1"))
ATTEMPT = os.environ["TRAINYARD_ATTEMPT"]
RANK = int(os.environ.get("RANK", "0"))
stop_requested = False


def on_term(signum, frame):
    global stop_requested
    stop_requested = True
    print(f"rank {RANK}: got SIGTERM", flush=True)


signal.signal(signal.SIGTERM, on_term)


def api(path, body):
    req = urllib.request.Request(
        os.environ["TRAINYARD_URL"] + "/api/trainyard/v1/jobs/" + os.environ["TRAINYARD_JOB_ID"]
        + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["TRAINYARD_TOKEN"],
                 "Content-Type": "application/json"})
    # The server may be restarting: retry refused connections for a while, as an SDK would.
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                r.read()
            return
        except urllib.error.URLError as e:
            if isinstance(e, urllib.error.HTTPError) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def checkpoint(state):
    path = os.path.join(os.environ["TRAINYARD_CHECKPOINT_DIR"], f"step-{state['step']}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    api("/checkpoints", {"step": state["step"], "path": path})


state = {"step": 0, "h": "seed"}
resume = os.environ.get("TRAINYARD_RESUME_FROM", "")
if resume:
    with open(resume) as f:
        state = json.load(f)
print(f"rank {RANK}/{os.environ.get('WORLD_SIZE')} attempt {ATTEMPT} starts at step "
      f"{state['step']} (resume_from={resume or '-'})", flush=True)

while state["step"] < STEPS:
    if (str(state["step"]) == os.environ.get("CRASH_AT_STEP")
            and ATTEMPT == os.environ.get("CRASH_ON_ATTEMPT", "1")):
        print(f"rank {RANK}: crashing at step {state['step']}", flush=True)
        os._exit(3)
    if (str(state["step"]) == os.environ.get("HANG_AT_STEP")
            and ATTEMPT == os.environ.get("HANG_ON_ATTEMPT", "1")):
        print(f"rank {RANK}: hanging at step {state['step']}", flush=True)
        while True:
            time.sleep(1)
    time.sleep(STEP_SECONDS)
    digest = hashlib.sha256((state["h"] + ":" + str(state["step"])).encode()).hexdigest()
    state = {"step": state["step"] + 1, "h": digest}
    if RANK == 0 and (state["step"] % EVERY == 0 or stop_requested):
        checkpoint(state)
    if stop_requested:
        print(f"rank {RANK}: checkpointed step {state['step']} after SIGTERM; exiting",
              flush=True)
        sys.exit(0)

if RANK == 0 and os.environ.get("OUT"):
    with open(os.environ["OUT"], "w") as f:
        json.dump(state, f)
print(f"rank {RANK}: done at step {state['step']}", flush=True)
