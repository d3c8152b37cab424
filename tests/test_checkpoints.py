"""Checkpoints through the server: the Python SDK saving and resuming a crashing job, a torch
state_dict round trip, the CLI (list/show/verify/restore), corruption, retention, garbage
collection during saves, authorization and malformed input.

The SDK (python/trainyard) runs in this process (with an explicit Client) or inside job
workloads (with PYTHONPATH pointing at python/).
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, TRAINYARD_BIN

sys.path.insert(0, str(REPO / "python"))
import trainyard.checkpoint as ckpt  # noqa: E402
from trainyard import Client, TrainyardError  # noqa: E402

WORKLOADS = Path(__file__).resolve().parent / "workloads"
PY = sys.executable
SYSTEM_PY = "/usr/bin/python3"  # Debian's python3-torch is installed for it
API = "/api/trainyard/v1"


@pytest.fixture(scope="module", params=["sqlite"])
def backend(request) -> str:
    # Checkpoints live in the blob store; the metadata backend only holds retention policies.
    return request.param


class Jobs:
    def __init__(self, server, token: str | None = None):
        self.server = server
        self.s = server.session(token)

    def submit(self, name: str, command: str, **kw) -> dict:
        spec = {"name": name, "command": command, "working_dir": str(WORKLOADS), **kw}
        env = spec.setdefault("env", {})
        env.setdefault("PYTHONPATH", str(REPO / "python"))
        r = self.s.post(self.server.api(f"{API}/jobs"), json={"spec": spec})
        assert r.status_code == 200, r.text
        return r.json()["job"]

    def get(self, job_id: str) -> dict:
        r = self.s.get(self.server.api(f"{API}/jobs/{job_id}"))
        assert r.status_code == 200, r.text
        return r.json()["job"]

    def wait_state(self, job_id: str, state: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            j = self.get(job_id)
            if j["state"] == state:
                return j
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} did not reach {state} in {timeout}s: "
                            f"{json.dumps(j, indent=1)[:2000]}\nlog:\n{self.logs(job_id)[-3000:]}")
            self.server.assert_alive()
            time.sleep(0.05)  # polling, bounded by the deadline

    def logs(self, job_id: str, attempt: int = 0) -> str:
        r = self.s.get(self.server.api(f"{API}/jobs/{job_id}/logs"), params={"attempt": attempt})
        assert r.status_code == 200, r.text
        return r.text

    def cancel(self, job_id: str) -> None:
        self.s.post(self.server.api(f"{API}/jobs/{job_id}/cancel"))


def sleeper(jobs: Jobs, name: str, token_file: Path | None = None) -> dict:
    """A running job whose checkpoints the test writes (its workload just waits)."""
    cmd = "exec sleep 120"
    if token_file is not None:
        cmd = (f'printf %s "$TRAINYARD_TOKEN" > {token_file}.tmp && '
               f"mv {token_file}.tmp {token_file} && exec sleep 120")
    j = jobs.submit(name, cmd)
    jobs.wait_state(j["job_id"], "RUNNING")
    if token_file is not None:
        deadline = time.monotonic() + 30
        while not token_file.exists():
            assert time.monotonic() < deadline, "the job never wrote its token"
            time.sleep(0.02)  # polling for the file, bounded by the deadline
    return j


def cli(server, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(TRAINYARD_BIN), "checkpoints", *args, "--url", server.url,
                          "--token", server.token], capture_output=True, text=True)
    if check:
        assert out.returncode == 0, out.stderr + out.stdout
    return out


def chunk_path(server, project: str, chunk_hash: str) -> Path:
    return server.data_dir / "checkpoints" / project / "chunks" / chunk_hash[:2] / chunk_hash


# --- resuming a crashed job through the SDK


def test_sdk_job_crashes_and_resumes_to_the_same_final_state(server_factory, tmp_path):
    server = server_factory.new(["--local-cpus", "4"])
    jobs = Jobs(server)
    common = {"STEPS": "12", "STEP_SECONDS": "0.01", "CHECKPOINT_EVERY": "1"}
    cmd = f"{PY} {WORKLOADS / 'sdk_counter_train.py'}"
    ref = jobs.submit("reference", cmd, env={**common, "OUT": str(tmp_path / "ref")})
    crashy = jobs.submit("crashy", cmd, restart_backoff="200ms",
                         env={**common, "OUT": str(tmp_path / "crashy"), "CRASH_AT_STEP": "5"})
    jobs.wait_state(ref["job_id"], "SUCCEEDED")
    done = jobs.wait_state(crashy["job_id"], "SUCCEEDED")
    final = json.loads((tmp_path / "crashy").read_text())
    assert final == json.loads((tmp_path / "ref").read_text())
    assert final["step"] == 12
    attempts = done["attempt_list"]
    assert [a["state"] for a in attempts] == ["failed", "succeeded"], attempts
    uri5 = f"trainyard-checkpoint://default/{crashy['job_id']}/5"
    assert attempts[1]["resumed_from"] == uri5
    assert f"starts at step 5 (resume_from={uri5})" in jobs.logs(crashy["job_id"], attempt=2)
    assert "crashing at step 5" in jobs.logs(crashy["job_id"], attempt=1)
    assert done["latest_checkpoint"]["step"] == 12
    assert done["latest_checkpoint"]["path"] == \
        f"trainyard-checkpoint://default/{crashy['job_id']}/12"
    # Every step was saved, steps 1-5 by the first attempt and 6-12 by the second.
    listed = jobs.s.get(server.api(f"{API}/checkpoints/jobs/{crashy['job_id']}")).json()
    steps = {c["step"]: c["attempt"] for c in listed["checkpoints"]}
    assert steps == {s: 1 if s <= 5 else 2 for s in range(1, 13)}
    assert listed["incomplete_steps"] == []
    # The SDK's latest() agrees, from outside the job.
    client = Client(server.url, server.token)
    assert ckpt.latest(crashy["job_id"], client=client)["step"] == 12


# --- what the SDK saves comes back


def test_torch_state_dict_round_trips_through_system_python(server, tmp_path):
    probe = subprocess.run([SYSTEM_PY, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True)
    # scripts/install-deps installs python3-torch: a missing torch is a broken setup, not a skip.
    assert probe.returncode == 0, f"{SYSTEM_PY} cannot import torch: {probe.stderr}"
    jobs = Jobs(server)
    j = sleeper(jobs, "torch-roundtrip")
    script = tmp_path / "roundtrip.py"
    script.write_text(
        "import torch, trainyard.checkpoint as ckpt\n"
        "g = torch.Generator().manual_seed(7)\n"
        "sd = {\n"
        "  'layer.weight': torch.randn(64, 32, generator=g),\n"
        "  'layer.bias': torch.randn(64, generator=g, dtype=torch.float64),\n"
        "  'emb': torch.randn(10, 8, generator=g).to(torch.bfloat16),\n"
        "  'half': torch.randn(3, 5, generator=g).half(),\n"
        "  'steps': torch.tensor(41, dtype=torch.int64),\n"
        "  'mask': torch.tensor([True, False, True]),\n"
        "  'ids': torch.arange(-5, 5, dtype=torch.int32).reshape(2, 5),\n"
        "  'empty': torch.zeros(0, 4),\n"
        "  'strided': torch.arange(12.).reshape(3, 4).t(),\n"
        "  # 20 MiB: larger than the server's in-memory body limit (16 MiB)\n"
        "  'big': torch.randn(5 * 1024 * 1024, generator=g),\n"
        "}\n"
        "r = ckpt.save(sd, step=3, metrics={'loss': torch.tensor(0.25).item()})\n"
        "assert r['complete'] and r['registered'], r\n"
        "back = ckpt.load()\n"
        "assert back.step == 3 and back.metrics == {'loss': 0.25}, back\n"
        "assert list(back.keys()) == list(sd.keys()), list(back.keys())\n"
        "for k, v in sd.items():\n"
        "    b = back[k]\n"
        "    assert b.dtype == v.dtype and b.shape == v.shape, (k, b.dtype, b.shape)\n"
        "    assert torch.equal(b, v), k\n"
        "m = torch.nn.Linear(32, 64)\n"
        "m.load_state_dict({'weight': back['layer.weight'], 'bias': back['layer.bias'].float()})\n"
        "print('ROUNDTRIP OK', ckpt.latest()['step'])\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "python"), "TRAINYARD_URL": server.url,
           "TRAINYARD_TOKEN": server.token, "TRAINYARD_JOB_ID": j["job_id"], "RANK": "0",
           "WORLD_SIZE": "1", "TRAINYARD_RESUME_FROM": ""}
    out = subprocess.run([SYSTEM_PY, str(script)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "ROUNDTRIP OK 3" in out.stdout
    assert jobs.get(j["job_id"])["latest_checkpoint"]["step"] == 3
    jobs.cancel(j["job_id"])


def test_ranks_complete_a_checkpoint_together(server):
    jobs = Jobs(server)
    j = sleeper(jobs, "two-ranks")
    client = Client(server.url, server.token)
    job_id = j["job_id"]
    r1 = ckpt.save({"shard": np.arange(10, dtype=np.int64)}, step=7, rank=1, world_size=2,
                   job_id=job_id, client=client)
    # One rank of two: saved, but not a checkpoint anyone may resume from yet.
    assert not r1["complete"] and not r1["registered"]
    assert ckpt.latest(job_id, client=client) is None
    assert "latest_checkpoint" not in jobs.get(job_id)
    listed = jobs.s.get(server.api(f"{API}/checkpoints/jobs/{job_id}")).json()
    assert listed["checkpoints"] == [] and listed["incomplete_steps"] == [7]
    r0 = ckpt.save({"shard": np.arange(10, 20, dtype=np.int64), "meta": b"rank0"}, step=7,
                   rank=0, world_size=2, job_id=job_id, client=client)
    assert r0["complete"] and r0["registered"]
    assert jobs.get(job_id)["latest_checkpoint"]["path"] == \
        f"trainyard-checkpoint://default/{job_id}/7"
    one = ckpt.load(job_id=job_id, rank=1, client=client)
    zero = ckpt.load(job_id=job_id, rank=0, client=client)
    assert one.rank == 1 and list(one) == ["shard"]
    assert (one["shard"] == np.arange(10)).all() and (zero["shard"] == np.arange(10, 20)).all()
    assert zero["meta"] == b"rank0"
    with pytest.raises(TrainyardError, match="no rank 2"):
        ckpt.load(job_id=job_id, rank=2, client=client)
    jobs.cancel(job_id)


# --- the CLI, and corruption


def test_cli_lists_shows_verifies_restores_and_names_a_flipped_byte(server, tmp_path):
    jobs = Jobs(server)
    j = sleeper(jobs, "cli")
    job_id = j["job_id"]
    client = Client(server.url, server.token)
    rng = np.random.default_rng(3)
    big = rng.standard_normal(4_500_000).astype(np.float32)  # 17 MiB: streamed to disk
    small = rng.standard_normal((3, 4)).astype(np.float16)
    state = {"model/big": big, "model/small": small, "tokenizer.json": b'{"v": 1}'}
    ckpt.save(state, step=10, metrics={"loss": 0.5}, metadata={"lr": 0.001}, job_id=job_id,
              client=client)
    ckpt.save({**state, "model/small": small + 1}, step=20, metrics={"loss": 0.25},
              job_id=job_id, client=client)

    out = cli(server, "list", job_id).stdout
    assert "STEP" in out and "20 (latest)" in out and "loss=0.25" in out and "10" in out
    assert "Retention: keep everything" in out
    show = cli(server, "show", job_id, "10").stdout
    assert f"trainyard-checkpoint://default/{job_id}/10" in show
    assert "model/big" in show and "4500000" in show and "F32" in show
    assert "tokenizer.json" in show and '"lr"' in show
    assert "OK" in cli(server, "verify", job_id, "20").stdout

    to = tmp_path / "restored"
    cli(server, "restore", job_id, "10", "--to", str(to))
    assert (to / "tokenizer.json").read_bytes() == b'{"v": 1}'
    assert (to / "model" / "big").read_bytes() == big.tobytes()
    assert (to / "model" / "small").read_bytes() == small.tobytes()
    raw = (to / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"]["trainyard.step"] == "10"
    b = header["model/big"]
    assert b["dtype"] == "F32" and b["shape"] == [4_500_000]
    begin, end = b["data_offsets"]
    assert raw[8 + n + begin:8 + n + end] == big.tobytes()
    assert "tokenizer.json" not in header

    # Flip one byte in the second chunk of the big tensor (its chunks are shared by step 10
    # and step 20: both checkpoints are damaged).
    shown = jobs.s.get(server.api(f"{API}/checkpoints/jobs/{job_id}/steps/10")).json()
    blob = next(b for b in shown["checkpoint"]["ranks"][0]["blobs"] if b["name"] == "model/big")
    assert len(blob["chunks"]) >= 2
    victim = chunk_path(server, "default", blob["chunks"][1]["hash"])
    data = bytearray(victim.read_bytes())
    data[1000] ^= 0x01
    victim.write_bytes(bytes(data))

    v = cli(server, "verify", job_id, "10", check=False)
    assert v.returncode == 1
    assert "blob 'model/big' chunk 1 " in v.stderr and "corrupt" in v.stderr, v.stderr
    r = jobs.s.post(server.api(f"{API}/checkpoints/jobs/{job_id}/steps/20/verify"))
    assert r.status_code == 400 and "blob 'model/big' chunk 1 " in r.json()["message"], r.text
    r = jobs.s.get(server.api(f"{API}/checkpoints/jobs/{job_id}/steps/20/blob"),
                   params={"name": "model/big"})
    assert r.status_code == 400 and "chunk 1" in r.json()["message"]
    # The undamaged blobs still read.
    r = jobs.s.get(server.api(f"{API}/checkpoints/jobs/{job_id}/steps/20/blob"),
                   params={"name": "model/small"})
    assert r.status_code == 200 and r.content == (small + 1).tobytes()
    assert r.headers["X-Trainyard-Dtype"] == "F16" and r.headers["X-Trainyard-Shape"] == "3,4"

    to2 = tmp_path / "refused"
    rr = cli(server, "restore", job_id, "10", "--to", str(to2), check=False)
    assert rr.returncode == 1 and "blob 'model/big' chunk 1 " in rr.stderr, rr.stderr
    assert "nothing was restored" in rr.stderr
    assert list(to2.iterdir()) == []  # not even the blobs that were fine
    with pytest.raises(TrainyardError, match="chunk 1"):
        ckpt.load(10, job_id=job_id, client=client)
    jobs.cancel(job_id)


# --- retention


def test_retention_keeps_last_best_and_every_nth(server):
    jobs = Jobs(server)
    j = sleeper(jobs, "retention")
    job_id = j["job_id"]
    client = Client(server.url, server.token)
    s = jobs.s
    path = server.api(f"{API}/checkpoints/jobs/{job_id}/retention")
    r = s.put(path, json={"keep_last": 2, "keep_best": 1, "metric": "loss", "mode": "min",
                          "keep_every": 5})
    assert r.status_code == 200, r.text
    assert r.json()["retention"] == {"keep_last": 2, "keep_best": 1, "metric": "loss",
                                     "mode": "min", "keep_every": 5}
    losses = {3: 0.1}  # step 3 is the best; every other step is worse
    deleted = []
    for step in range(1, 13):
        result = ckpt.save({"w": np.full(1000, step, dtype=np.float32)}, step=step,
                           metrics={"loss": losses.get(step, 1.0 + step)}, job_id=job_id,
                           client=client)
        deleted += result["deleted_steps"]
    kept = [c["step"] for c in s.get(server.api(f"{API}/checkpoints/jobs/{job_id}")).json()[
        "checkpoints"]]
    assert kept == [3, 5, 10, 11, 12]
    assert sorted(deleted) == [1, 2, 4, 6, 7, 8, 9]
    assert s.get(path).json()["retention"]["keep_every"] == 5  # stored
    # Tightening the policy applies it at once; the latest is always kept.
    r = s.put(path, json={"keep_last": 1})
    assert r.status_code == 200 and r.json()["deleted_steps"] == [3, 5, 10, 11]
    kept = [c["step"] for c in s.get(server.api(f"{API}/checkpoints/jobs/{job_id}")).json()[
        "checkpoints"]]
    assert kept == [12]
    assert (ckpt.load(job_id=job_id, client=client)["w"] == 12).all()
    # The CLI shows and sets the policy too.
    out = cli(server, "retention", job_id, "--keep-best", "2", "--metric", "loss", "--mode",
              "max").stdout
    assert "keep_best:  2 by 'loss' (max)" in out and "keep_last:  1" in out
    jobs.cancel(job_id)


# --- garbage collection


def test_gc_during_saves_loses_nothing(server):
    jobs = Jobs(server)
    j = sleeper(jobs, "gc-race")
    job_id = j["job_id"]
    client = Client(server.url, server.token)
    s = jobs.s
    assert s.put(server.api(f"{API}/checkpoints/jobs/{job_id}/retention"),
                 json={"keep_last": 3}).status_code == 200
    rng = np.random.default_rng(11)
    base = rng.standard_normal(300_000).astype(np.float32)  # 1.2 MiB: shared by every step
    # A staged upload that is not committed yet must survive collections too.
    pending = s.post(server.api(f"{API}/checkpoints/uploads"),
                     json={"job_id": job_id, "step": 1000}).json()["upload_id"]
    r = s.put(server.api(f"{API}/checkpoints/uploads/{pending}/blob"),
              params={"name": "base", "dtype": "F32", "shape": "300000"}, data=base.tobytes())
    assert r.status_code == 200, r.text

    stop = threading.Event()
    errors: list[str] = []
    collections = [0]

    def collect():
        while not stop.is_set():
            r = s.post(server.api(f"{API}/checkpoints/gc"), json={"project": "default"})
            if r.status_code != 200:
                errors.append(r.text)
                return
            collections[0] += 1

    collector = threading.Thread(target=collect)
    collector.start()
    try:
        for step in range(1, 25):
            own = rng.standard_normal(50_000).astype(np.float32)
            ckpt.save({"base": base, "own": own}, step=step, job_id=job_id, client=client)
    finally:
        stop.set()
        collector.join()
    assert not errors, errors
    assert collections[0] > 0
    listed = s.get(server.api(f"{API}/checkpoints/jobs/{job_id}")).json()["checkpoints"]
    assert [c["step"] for c in listed] == [22, 23, 24]
    r = s.post(server.api(f"{API}/checkpoints/gc"), json={"project": "default"})
    assert r.status_code == 200 and r.json()["projects"][0]["chunks_deleted"] >= 0
    for c in listed:
        r = s.post(server.api(f"{API}/checkpoints/jobs/{job_id}/steps/{c['step']}/verify"))
        assert r.status_code == 200, r.text
    r = s.post(server.api(f"{API}/checkpoints/uploads/{pending}/commit"), json={})
    assert r.status_code == 200 and r.json()["complete"], r.text
    back = ckpt.load(1000, job_id=job_id, client=client)
    assert (back["base"] == base).all()
    out = cli(server, "gc").stdout
    assert "default" in out and "DELETED" in out
    jobs.cancel(job_id)


# --- authorization


def test_scoped_token_of_another_job_and_other_users_are_refused(server, tmp_path):
    jobs = Jobs(server)
    a = sleeper(jobs, "auth-a", tmp_path / "a.token")
    b = sleeper(jobs, "auth-b", tmp_path / "b.token")
    token_a = (tmp_path / "a.token").read_text()
    token_b = (tmp_path / "b.token").read_text()
    begin = server.api(f"{API}/checkpoints/uploads")
    with server.session(token_b) as sb:
        r = sb.post(begin, json={"job_id": a["job_id"], "step": 1})
        assert r.status_code == 403 and f"job:{b['job_id']}" in r.json()["message"], r.text
        # Reading is open to every authenticated caller.
        assert sb.get(server.api(f"{API}/checkpoints/jobs/{a['job_id']}")).status_code == 200
        r = sb.post(server.api(f"{API}/checkpoints/gc"), json={})
        assert r.status_code == 403
    # Job A's own token writes job A's checkpoints (the SDK inside A does exactly this).
    saved = ckpt.save({"x": b"1"}, step=1, job_id=a["job_id"], client=Client(server.url, token_a))
    assert saved["registered"]
    upload_a = server.session(token_a).post(begin, json={"job_id": a["job_id"], "step": 2}).json()
    with server.session(token_b) as sb:
        r = sb.put(server.api(f"{API}/checkpoints/uploads/{upload_a['upload_id']}/blob"),
                   params={"name": "x"}, data=b"evil")
        assert r.status_code == 403, r.text
        r = sb.post(server.api(f"{API}/checkpoints/uploads/{upload_a['upload_id']}/commit"),
                    json={})
        assert r.status_code == 403, r.text
        r = sb.delete(server.api(f"{API}/checkpoints/jobs/{a['job_id']}/steps/1"))
        assert r.status_code == 403, r.text
    # Another user (neither owner nor admin) may read but not write.
    mallory = server.create_user(f"mallory-{a['job_id']}")
    with server.session(mallory) as sm:
        assert sm.post(begin, json={"job_id": a["job_id"], "step": 3}).status_code == 403
        r = sm.put(server.api(f"{API}/checkpoints/jobs/{a['job_id']}/retention"),
                   json={"keep_last": 1})
        assert r.status_code == 403
        r = sm.get(server.api(f"{API}/checkpoints/jobs/{a['job_id']}/steps/1/blob"),
                   params={"name": "x"})
        assert r.status_code == 200 and r.content == b"1"
    assert server.session(token_a).delete(
        server.api(f"{API}/checkpoints/jobs/{a['job_id']}/steps/1")).status_code == 200
    jobs.cancel(a["job_id"])
    jobs.cancel(b["job_id"])


# --- malformed input


def test_malformed_inputs_are_400_naming_the_field(server):
    jobs = Jobs(server)
    j = sleeper(jobs, "malformed")
    job_id = j["job_id"]
    s = jobs.s
    begin = server.api(f"{API}/checkpoints/uploads")

    def bad(r, field, status=400):
        assert r.status_code == status, r.text
        assert field in r.json()["message"], r.text

    bad(s.post(begin, json={"step": 1}), "job_id")
    bad(s.post(begin, json={"job_id": job_id}), "step")
    bad(s.post(begin, json={"job_id": job_id, "step": -1}), "step")
    bad(s.post(begin, json={"job_id": job_id, "step": "x"}), "step")
    bad(s.post(begin, json={"job_id": job_id, "step": 1, "rank": 2, "world_size": 2}), "rank")
    bad(s.post(begin, json={"job_id": job_id, "step": 1, "world_size": 0}), "world_size")
    bad(s.post(begin, json={"job_id": "j-nope", "step": 1}), "j-nope", 404)
    upload = s.post(begin, json={"job_id": job_id, "step": 1}).json()["upload_id"]
    put = server.api(f"{API}/checkpoints/uploads/{upload}/blob")
    bad(s.put(put, data=b"x"), "name")
    bad(s.put(put, params={"name": "t", "dtype": "F33", "shape": "1"}, data=b"xxxx"), "dtype")
    bad(s.put(put, params={"name": "t", "dtype": "F32", "shape": "2"}, data=b"xxxx"), "shape")
    bad(s.put(put, params={"name": "t", "dtype": "F32", "shape": "a,b"}, data=b"xxxx"), "shape")
    bad(s.put(put, params={"name": "t", "dtype": "F32"}, data=b"xxxx"), "shape")
    bad(s.put(put, params={"name": "t", "shape": "1"}, data=b"xxxx"), "dtype")
    bad(s.put(server.api(f"{API}/checkpoints/uploads/u-nothere/blob"), params={"name": "t"},
            data=b"x"), "u-nothere", 404)
    commit = server.api(f"{API}/checkpoints/uploads/{upload}/commit")
    bad(s.post(commit, json={}), "no blobs")
    assert s.put(put, params={"name": "t", "dtype": "F32", "shape": "1"},
                 data=b"xxxx").status_code == 200
    bad(s.post(commit, json={"metrics": {"loss": "low"}}), "metrics.loss")
    bad(s.post(commit, json={"metrics": [1]}), "metrics")
    bad(s.post(commit, json={"blobs": ["t", "u"]}), "'u'")
    bad(s.post(commit, json={"rng_state_base64": "!!"}), "rng_state_base64")
    bad(s.post(commit, data=b"{not json", headers={"Content-Type": "application/json"}),
        "JSON")
    ok = s.post(commit, json={"metrics": {"loss": 1.5}, "metadata": {"note": "x"}})
    assert ok.status_code == 200 and ok.json()["complete"], ok.text
    bad(s.post(commit, json={}), upload, 404)  # an upload commits once
    base = server.api(f"{API}/checkpoints/jobs/{job_id}")
    bad(s.get(f"{base}/steps/abc"), "step")
    bad(s.get(f"{base}/steps/99"), "step 99", 404)
    bad(s.get(f"{base}/steps/1/blob"), "name")
    bad(s.get(f"{base}/steps/1/blob", params={"name": "nope"}), "nope", 404)
    bad(s.get(f"{base}/steps/1/blob", params={"name": "t", "rank": "-1"}), "rank")
    bad(s.put(f"{base}/retention", json={"keep_best": 1}), "metric")
    bad(s.put(f"{base}/retention", json={"keep_last": 1, "mode": "avg"}), "mode")
    bad(s.put(f"{base}/retention", json={"keep_last": -1}), "keep_last")
    bad(s.put(f"{base}/retention", json={"keep_lats": 1}), "keep_lats")
    bad(s.post(server.api(f"{API}/checkpoints/gc"), json={"project": "../x"}), "project")
    # Saving a step twice is refused, clearly.
    upload = s.post(begin, json={"job_id": job_id, "step": 1}).json()["upload_id"]
    s.put(server.api(f"{API}/checkpoints/uploads/{upload}/blob"), params={"name": "t"}, data=b"y")
    r = s.post(server.api(f"{API}/checkpoints/uploads/{upload}/commit"), json={})
    assert r.status_code == 400 and "already" in r.json()["message"], r.text
    # The SDK checks what it can before talking to the server.
    client = Client(server.url, server.token)
    with pytest.raises(ValueError, match="step"):
        ckpt.save({"a": b"x"}, step=-1, job_id=job_id, client=client)
    with pytest.raises(TypeError, match="str"):
        ckpt.save({"a": "text"}, step=5, job_id=job_id, client=client)
    with pytest.raises(TrainyardError) as e:
        ckpt.save({"a": b"x"}, step=5, job_id="j-nope", client=client)
    assert e.value.status == 404
    jobs.cancel(job_id)


def test_sdk_retries_while_the_server_is_down(server_factory):
    server = server_factory.new()
    jobs = Jobs(server)
    j = jobs.submit("idle", "true")
    jobs.wait_state(j["job_id"], "SUCCEEDED")
    port = server.port
    server.stop()

    class CountingClient(Client):
        """Signals once it has been refused and is about to try again."""
        retried = threading.Event()
        connects = 0

        def _connection(self):
            CountingClient.connects += 1
            if CountingClient.connects == 2:
                CountingClient.retried.set()
            return super()._connection()

    client = CountingClient(f"http://127.0.0.1:{port}", server.token, retry_seconds=60)
    result: dict = {}

    def save():
        try:
            result["ok"] = ckpt.save({"x": b"after restart"}, step=1, job_id=j["job_id"],
                                     client=client)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            result["error"] = e

    saver = threading.Thread(target=save)
    saver.start()
    assert CountingClient.retried.wait(30), "the SDK never tried to connect"
    # The server comes back on the same port (started from this thread: its death signal
    # follows the thread that started it).
    server.extra_args = ["--port", str(port)]
    server.start()
    saver.join(90)
    assert "ok" in result, result
    r = result["ok"]
    assert r["complete"] and not r["registered"]  # the job had finished: saved, not registered
    assert ckpt.load(1, job_id=j["job_id"], client=client)["x"] == b"after restart"
    with pytest.raises(TrainyardError, match="cannot reach"):
        ckpt.latest(j["job_id"], client=Client("http://127.0.0.1:9", "t", retry_seconds=0.3))
