"""Serving in multi-user mode (decision 0018): a real server running as root, an endpoint owned
by a non-admin user mapped to an OS account; its replica is a job that runs as that account
(like the user's training jobs), reading a private copy of the model (the server's artifact
store stays unreadable to it) that the endpoint's replicas share, and answers requests. A user
without a mapped account gets a replica error saying so. An MLflow pyfunc model is served the
same way, by `mlflow models serve` running as the owner's account. A server killed with
SIGKILL leaves its replicas' directories behind; the next start removes them (without following
the links a replica's account planted) and serves again.

The replicas' `mlflow` must be one every account can run: the test venv's interpreter may live
where other accounts cannot reach it (a pyenv under /root), so the module makes a venv on the
system's python3 that sees the test venv's packages (shared_mlflow), as an admin would install
mlflow for all accounts.

The accounts (prefixed ty-srv-) are created with useradd and deleted at the end.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import TrainyardServer, register_hf_model, running
from test_security_jobs import _remove_account, user_with_account
from test_serving import MODEL_CODE, error_of, invoke, ok, wait_for
from test_serving_ratelimit import FAKE_ENGINE, chat, openai_client

TY = "/api/trainyard/v1"
ACCOUNTS = ["ty-srv-alice", "ty-srv-pat"]

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


SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.fixture(scope="module")
def shared_mlflow(tmp_path_factory):
    """An `mlflow` (and the `uvicorn` its scoring server runs) every account can run: a venv on
    the system's python3 whose site-packages point at the test venv's (same Python minor
    version, so its compiled packages load)."""
    version = subprocess.run([str(SYSTEM_PYTHON), "-c",
                              "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == str(sys.version_info[:2]), (
        f"{SYSTEM_PYTHON} is Python {version}, the test venv {sys.version_info[:2]}: "
        "the replicas' mlflow needs the same minor version")
    base = Path(tempfile.mkdtemp(prefix="ty-srv-mlflow-"))
    base.chmod(0o755)
    venv = base / "venv"
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "trainyard-test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for name, entry in (("mlflow", "from mlflow.cli import cli as main"),
                        ("uvicorn", "from uvicorn.main import main")):
        script = venv / "bin" / name
        script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n{entry}\n"
                          "sys.exit(main())\n")
        script.chmod(0o755)
    for d in [base, *base.rglob("*")]:
        if d.is_dir() and not d.is_symlink():
            d.chmod(0o755)
    try:
        yield venv / "bin" / "mlflow"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def multi_user_server(base: Path, mlflow: Path, *extra: str) -> TrainyardServer:
    return TrainyardServer(
        data_dir=base / "data", backend="sqlite", single_user=False,
        extra_args=["--job-dir", str(base / "jobs"), "--local-cpus", "64",
                    "--serving-engine", FAKE_ENGINE, "--serving-mlflow", str(mlflow),
                    "--serving-cold-start-s", "30", *extra])


@pytest.fixture(scope="module")
def multi(accounts, shared_mlflow):
    base = Path(tempfile.mkdtemp(prefix="ty-srv-"))
    base.chmod(0o711)
    server = multi_user_server(base, shared_mlflow, "--serving-model-copy-grace-s", "1")
    try:
        yield from running(server)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def ready(session, server, name, count):
    state = ok(session.get(server.api(f"{TY}/endpoints/{name}")))
    replicas = [r for r in state["replicas"] if r["state"] == "READY"]
    return replicas if len(replicas) == count else None


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


def log_pyfunc_model(server, token) -> str:
    """Logs and registers (as the token's user) the pyfunc model of test_serving.py with k=3."""
    import mlflow

    os.environ["MLFLOW_TRACKING_URI"] = server.url
    os.environ["MLFLOW_TRACKING_TOKEN"] = token
    try:
        mlflow.set_tracking_uri(server.url)
        name = f"mu-scale-{uuid.uuid4().hex[:6]}"
        mlflow.set_experiment(f"serving-{name}")
        with mlflow.start_run():
            mlflow.pyfunc.log_model(name="model", python_model=MODEL_CODE, model_config={"k": 3},
                                    pip_requirements=["mlflow", "pandas"],
                                    registered_model_name=name)
        return name
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.environ.pop("MLFLOW_TRACKING_TOKEN", None)
        mlflow.set_tracking_uri(None)


def test_a_pyfunc_model_is_served_by_mlflow_as_its_endpoints_owner(multi, accounts):
    pat_token = user_with_account(multi, "pat", "ty-srv-pat")
    pat_pw = accounts["ty-srv-pat"]
    model = log_pyfunc_model(multi, pat_token)
    pat = multi.session(pat_token)
    name = f"mu-py-{uuid.uuid4().hex[:6]}"
    ok(pat.post(multi.api(f"{TY}/endpoints"), json={
        "name": name, "served_entities": [{"model": model, "version": 1}],
        "min_replicas": 1, "max_replicas": 1, "scale_to_zero_seconds": 0}))
    try:
        state = wait_for(lambda: (lambda e: e if ready(pat, multi, name, 1) or
                                  e["entity_states"][0].get("last_error") else None)(
            ok(pat.get(multi.api(f"{TY}/endpoints/{name}")))), "a ready replica", timeout=180)
        assert ready(pat, multi, name, 1), state
        # The scoring server runs as pat, on her copy of the model.
        (replica,) = ready(pat, multi, name, 1)
        job = ok(pat.get(multi.api(f"{TY}/jobs/{replica['job_id']}")))["job"]
        assert job["owner"] == "pat" and "models serve" in job["spec"]["command"], job
        servers = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                    environ = (proc / "environ").read_bytes()
                    if any(b"uvicorn" in a for a in cmdline) and \
                            f"TRAINYARD_REPLICA_ID={replica['id']}".encode() in environ:
                        servers.append(proc.stat().st_uid)
                except OSError:  # gone, or not ours to read
                    pass
        assert servers and set(servers) == {pat_pw.pw_uid}, servers

        # The three input formats, through the server's invocations route.
        r = invoke(pat, multi, name, {"dataframe_split": {"columns": ["x"], "data": [[1], [2]]}})
        assert ok(r) == {"predictions": [3.0, 6.0]}
        assert ok(invoke(pat, multi, name, {"dataframe_records": [{"x": 4}]})) == \
            {"predictions": [12.0]}
        assert ok(invoke(pat, multi, name, {"inputs": {"x": [5.0]}})) == {"predictions": [15.0]}
    finally:
        ok(pat.delete(multi.api(f"{TY}/endpoints/{name}")))


def test_a_killed_server_removes_the_replica_directories_it_left_and_serves_again(
        accounts, shared_mlflow, tmp_path):
    base = Path(tempfile.mkdtemp(prefix="ty-srv-"))
    base.chmod(0o711)
    # Grace long enough that only the restart can remove the copy.
    server = multi_user_server(base, shared_mlflow, "--serving-model-copy-grace-s", "600")
    outside = base / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    alice_pw = accounts["ty-srv-alice"]
    try:
        server.start()
        token = user_with_account(server, "alice", "ty-srv-alice")
        model = register_hf_model(server, token, tmp_path, prefix="crash")
        alice = server.session(token)
        name = f"crash-{uuid.uuid4().hex[:6]}"
        ok(alice.post(server.api(f"{TY}/endpoints"), json={
            "name": name, "served_entities": [{"model": model, "version": 1}],
            "min_replicas": 1, "max_replicas": 1, "scale_to_zero_seconds": 0}))
        (old,) = wait_for(lambda: ready(alice, server, name, 1), "a ready replica", timeout=120)
        copies = base / "jobs" / "serving-models" / "models" / str(alice_pw.pw_uid)
        (copy,) = copies.iterdir()
        # Besides the copy, a killed run may leave one half written; and alice's account can
        # write into her copy: a link out of it must not lead the cleanup outside.
        half = copies / f"{copy.name}.tmp-9"
        half.mkdir()
        (half / "config.json").write_text("{")
        (copy / "escape").symlink_to(outside)
        (copy / "left-by-the-killed-run").write_text("x")

        server.kill()
        server.start()

        # The next start removed them (the model copy is made anew for the new replica) and
        # said so; the link's target is untouched.
        def log():
            return server.log_path.read_text(errors="replace").split("--- start 2:")[-1]

        wait_for(lambda: f"removed the model copy {copy}, left by an earlier run" in log(),
                 "the removal logged", timeout=60)
        assert f"removed the model copy {half}, left by an earlier run" in log(), log()
        assert not half.exists()
        assert not (copy / "left-by-the-killed-run").exists()
        assert not (copy / "escape").is_symlink()
        assert (outside / "keep.txt").read_text() == "keep"
        # The killed run's replica job is ended, and the endpoint serves again.
        admin = server.session()
        job = wait_for(lambda: (lambda j: j if j["state"] in ("CANCELLED", "FAILED") else None)(
            ok(admin.get(server.api(f"{TY}/jobs/{old['job_id']}")))["job"]),
            "the old replica's job ended", timeout=60)
        assert job["kind"] == "service", job
        assert chat(openai_client(server, token), name).choices[0].message.content
        (new,) = ready(alice, server, name, 1)
        assert new["id"] != old["id"]
        assert [p.name for p in copies.iterdir()] == [copy.name]
        assert not (copy / "escape").exists()
        ok(alice.delete(server.api(f"{TY}/endpoints/{name}")))
    finally:
        if server.proc is not None:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)
