"""Serving in multi-user mode (decision 0018): a real server running as root, an endpoint owned
by a non-admin user mapped to an OS account; its replica is a job that runs as that account
(like the user's training jobs), reading a private copy of the model (the server's artifact
store stays unreadable to it) that the endpoint's replicas share, and answers requests. A user without a mapped account gets a
replica error saying so.

The accounts (prefixed ty-srv-) are created with useradd and deleted at the end.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import TrainyardServer, register_hf_model, running
from test_security_jobs import _remove_account, user_with_account
from test_serving import error_of, ok, wait_for
from test_serving_ratelimit import FAKE_ENGINE, chat, openai_client

TY = "/api/trainyard/v1"
ACCOUNTS = ["ty-srv-alice"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="multi-user mode needs root")


@pytest.fixture(scope="module")
def accounts():
    import subprocess

    for name in ACCOUNTS:
        _remove_account(name)
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True,
                       capture_output=True)
    try:
        yield {name: pwd.getpwnam(name) for name in ACCOUNTS}
    finally:
        for name in ACCOUNTS:
            _remove_account(name)


@pytest.fixture(scope="module")
def multi(accounts):
    base = Path(tempfile.mkdtemp(prefix="ty-srv-"))
    base.chmod(0o711)
    server = TrainyardServer(
        data_dir=base / "data", backend="sqlite", single_user=False,
        extra_args=["--job-dir", str(base / "jobs"), "--local-cpus", "64",
                    "--serving-engine", FAKE_ENGINE,
                    "--serving-cold-start-s", "30", "--serving-model-copy-grace-s", "1"])
    try:
        yield from running(server)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_replicas_run_as_their_endpoints_owner_on_one_shared_private_copy_of_the_model(
        multi, accounts, tmp_path):
    alice_token = user_with_account(multi, "alice", "ty-srv-alice")
    alice_pw = accounts["ty-srv-alice"]
    model = register_hf_model(multi, alice_token, tmp_path, prefix="mu")
    alice = multi.session(alice_token)
    name = f"mu-{uuid.uuid4().hex[:6]}"
    ok(alice.post(multi.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": model, "version": 1}],
        "min_replicas": 2, "max_replicas": 2, "scale_to_zero_seconds": 0}))
    copies = multi.data_dir.parent / "jobs" / "serving-models" / "models" / str(alice_pw.pw_uid)
    try:
        wait_for(lambda: (lambda e: e if e["state"] == "READY" and sum(
            r["state"] == "READY" for r in e["replicas"]) == 2 else None)(
            ok(alice.get(multi.api(f"{TY}/endpoints/{name}")))), "two ready replicas",
            timeout=120)
        state = ok(alice.get(multi.api(f"{TY}/endpoints/{name}")))
        for replica in state["replicas"]:
            job = ok(alice.get(multi.api(f"{TY}/jobs/{replica['job_id']}")))["job"]
            assert job["owner"] == "alice" and job["kind"] == "service"
        # The replicas' server processes (under their jobs' rank shims) are alice's, like her
        # jobs, and read one copy of the model.
        found = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                    if any(b"fake_serve_model" in a for a in cmdline) and name.encode() in cmdline:
                        found.append((proc.stat().st_uid, (proc / "environ").read_bytes()))
                except (FileNotFoundError, ProcessLookupError):
                    pass
        assert len(found) == 2, found
        model_dirs = set()
        for uid, environ in found:
            assert uid == alice_pw.pw_uid
            env = dict(kv.split("=", 1) for kv in environ.decode().split("\0") if "=" in kv)
            model_dirs.add(env["TRAINYARD_MODEL_DIR"])
        assert len(model_dirs) == 1, model_dirs
        staged = Path(model_dirs.pop())
        assert staged.parent == copies, staged
        assert [p.name for p in copies.iterdir()] == [staged.name]  # one copy, no temporary
        assert not str(staged).startswith(str(multi.data_dir)), staged
        assert staged.stat().st_uid == alice_pw.pw_uid
        assert (staged.stat().st_mode & 0o777) == 0o700
        assert (staged / "config.json").read_text() == json.dumps({"model_type": "gpt2"})
        assert (multi.data_dir.stat().st_mode & 0o077) == 0

        # It answers alice's requests.
        assert chat(openai_client(multi, alice_token), name).choices[0].message.content
    finally:
        ok(alice.delete(multi.api(f"{TY}/endpoints/{name}")))
    # The copy goes with the last replica (after the 1 s grace period the server was given).
    wait_for(lambda: not staged.exists(), "the shared copy removed", timeout=60)
    assert list(copies.iterdir()) == []


def test_an_owner_without_an_os_account_gets_a_replica_error_saying_so(multi, tmp_path):
    admin = multi.session()
    token = user_with_account(multi, "dora", None)
    model = register_hf_model(multi, token, tmp_path, prefix="mu")
    dora = multi.session(token)
    name = f"noacct-{uuid.uuid4().hex[:6]}"
    ok(dora.post(multi.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": model, "version": 1}],
        "min_replicas": 1}))
    try:
        state = wait_for(lambda: (lambda e: e if e["entity_states"][0].get("last_error") else
                                  None)(ok(admin.get(multi.api(f"{TY}/endpoints/{name}")))),
                         "the replica's error", timeout=60)
        assert "no OS account" in state["entity_states"][0]["last_error"], state
        r = dora.post(multi.api(f"/serving-endpoints/{name}/invocations"),
                      json={"prompt": "x"}, timeout=180)
        error_of(r, 503, "no OS account")
    finally:
        admin.delete(multi.api(f"{TY}/endpoints/{name}"))
