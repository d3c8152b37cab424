"""Job identity and isolation (issue 13, deliverable 1): a real server running as root in
multi-user mode runs each job as its owner's mapped OS account, with only the job's own
environment, in a per-attempt cgroup; a job cannot read the data directory, the database, the
admin token, another user's running job's environment or logs. Single-user mode refuses
non-admins.

Two non-admin users, alice and bob, are mapped to OS accounts this module creates with useradd
(prefixed ty-iso-) and deletes at the end.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import TRAINYARD_BIN, TrainyardServer, running

API = "/api/trainyard/v1"
ACCOUNTS = ["ty-iso-alice", "ty-iso-bob", "ty-iso-carol"]
CANARY = "canary-" + uuid.uuid4().hex[:8]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="multi-user mode needs root")


@pytest.fixture(scope="module", params=["sqlite"])
def backend(request) -> str:
    return request.param


def _remove_account(name: str) -> None:
    """Removes the account and any process of it an aborted run left (userdel refuses while
    one runs)."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if proc.stat().st_uid == uid:
                    os.kill(int(proc.name), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass
    subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture(scope="module")
def accounts():
    for name in ACCOUNTS:
        _remove_account(name)  # a leftover of an aborted run
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True,
                       capture_output=True)
    try:
        yield {name: pwd.getpwnam(name) for name in ACCOUNTS}
    finally:
        for name in ACCOUNTS:
            _remove_account(name)


@pytest.fixture(scope="module")
def base_dir():
    # Not under pytest's 0700 temp root: the data directory's own mode must be what keeps
    # jobs out, and the job directories must be reachable by the jobs' accounts.
    d = Path(tempfile.mkdtemp(prefix="ty-iso-"))
    d.chmod(0o711)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def multi(accounts, base_dir):
    server = TrainyardServer(
        data_dir=base_dir / "data", backend="sqlite", single_user=False,
        extra_args=["--job-dir", str(base_dir / "jobs")],
        env={**os.environ, "AWS_SECRET_ACCESS_KEY": CANARY, "TY_SERVER_ONLY_VAR": CANARY})
    yield from running(server)


class Client:
    def __init__(self, server, token: str):
        self.server = server
        self.s = server.session(token)

    def submit(self, spec: dict, expect: int = 200) -> dict:
        spec = {"max_restarts": 0, **spec}
        r = self.s.post(self.server.api(f"{API}/jobs"), json={"spec": spec})
        assert r.status_code == expect, r.text
        return r.json().get("job", r.json())

    def get(self, job_id: str) -> dict:
        r = self.s.get(self.server.api(f"{API}/jobs/{job_id}"))
        assert r.status_code == 200, r.text
        return r.json()["job"]

    def logs(self, job_id: str) -> str:
        r = self.s.get(self.server.api(f"{API}/jobs/{job_id}/logs"))
        assert r.status_code == 200, r.text
        return r.text

    def cancel(self, job_id: str) -> None:
        r = self.s.post(self.server.api(f"{API}/jobs/{job_id}/cancel"), json={})
        assert r.status_code == 200, r.text

    def wait(self, job_id: str, pred, what: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            j = self.get(job_id)
            if pred(j):
                return j
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id}: {what} not within {timeout}s: "
                            f"{json.dumps(j)[:1500]}\nlog:\n{self.logs(job_id)[-2000:]}")
            self.server.assert_alive()
            time.sleep(0.05)  # polling, bounded by the deadline

    def wait_state(self, job_id: str, state: str, timeout: float = 60) -> dict:
        return self.wait(job_id, lambda j: j["state"].lower() == state, f"state {state}", timeout)

    def wait_log(self, job_id: str, text: str, timeout: float = 60) -> str:
        self.wait(job_id, lambda j: text in self.logs(job_id), f"log line {text!r}", timeout)
        return self.logs(job_id)


def admin_call(server, method: str, path: str, body: dict | None = None):
    with server.session() as s:
        return s.request(method, server.api(API + path), json=body)


def user_with_account(server, name: str, os_user: str | None) -> str:
    body = {"name": name}
    if os_user:
        body["os_user"] = os_user
    r = admin_call(server, "POST", "/users", body)
    assert r.status_code == 200, r.text
    r = admin_call(server, "POST", "/tokens", {"user": name})
    assert r.status_code == 200, r.text
    return r.json()["token"]


@pytest.fixture(scope="module")
def alice(multi):
    return Client(multi, user_with_account(multi, "alice", "ty-iso-alice"))


@pytest.fixture(scope="module")
def bob(multi):
    return Client(multi, user_with_account(multi, "bob", "ty-iso-bob"))


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_dead(pid: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still alive after {timeout}s"
        time.sleep(0.05)  # polling, bounded by the deadline


def test_user_mapping_is_validated_and_listed(multi, accounts):
    r = admin_call(multi, "POST", "/users", {"name": "rooty", "os_user": "root"})
    assert r.status_code == 400 and "root" in r.json()["message"], r.text
    r = admin_call(multi, "POST", "/users", {"name": "ghost", "os_user": "ty-iso-nobody-here"})
    assert r.status_code == 400 and "does not exist" in r.json()["message"], r.text
    user_with_account(multi, "dave", None)
    r = admin_call(multi, "PATCH", "/users/dave", {"os_user": "ty-iso-carol"})
    assert r.status_code == 200 and r.json()["user"]["os_user"] == "ty-iso-carol", r.text
    r = admin_call(multi, "PATCH", "/users/nobody-such", {"os_user": "ty-iso-carol"})
    assert r.status_code == 404, r.text
    # Only admins map accounts.
    token = user_with_account(multi, "erin", "ty-iso-carol")
    with multi.session(token) as s:
        r = s.patch(multi.api(f"{API}/users/erin"), json={"os_user": "ty-iso-alice"})
    assert r.status_code == 403, r.text
    out = subprocess.run([str(TRAINYARD_BIN), "users", "list", "--url", multi.url, "--token",
                          multi.token], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "OS USER" in out.stdout
    assert any(line.split()[:3] == ["dave", "no", "ty-iso-carol"]
               for line in out.stdout.splitlines()), out.stdout
    out = subprocess.run([str(TRAINYARD_BIN), "users", "update", "dave", "--os-user", "",
                          "--url", multi.url, "--token", multi.token],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    users = {u["name"]: u for u in admin_call(multi, "GET", "/users").json()["users"]}
    assert users["dave"]["os_user"] == "", users["dave"]


def test_unmapped_user_cannot_submit(multi):
    client = Client(multi, user_with_account(multi, "frank", None))
    r = client.submit({"name": "nope", "command": "true"}, expect=400)
    assert "user frank has no OS account" in r["message"], r
    assert "trainyard users update frank --os-user ACCT" in r["message"], r


def test_cluster_shows_the_mode(multi):
    out = subprocess.run([str(TRAINYARD_BIN), "cluster", "--url", multi.url, "--token",
                          multi.token], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "Mode multi-user" in out.stdout, out.stdout
    assert "Cgroups " in out.stdout, out.stdout
    r = admin_call(multi, "GET", "/cluster")
    assert r.json()["mode"] == "multi-user", r.text


def test_job_runs_as_its_owner_and_sees_nothing_of_the_server(multi, alice, bob, accounts):
    data = multi.data_dir
    # bob's job: a running process holding its token in its environment.
    bob_job = bob.submit({"name": "bob-secret", "command": "echo pid=$$; exec sleep 1000",
                          "env": {"BOB_SECRET": "bob-" + CANARY}})
    log = bob.wait_log(bob_job["job_id"], "pid=")
    bob_pid = int(log.split("pid=")[1].split()[0])
    assert pid_alive(bob_pid)
    assert ("bob-" + CANARY).encode() in Path(f"/proc/{bob_pid}/environ").read_bytes()
    assert os.stat(f"/proc/{bob_pid}").st_uid == accounts["ty-iso-bob"].pw_uid
    bob_log = data / "jobs" / bob_job["job_id"] / "attempt-1" / "rank-0.log"
    assert bob_log.exists()

    probes = {
        "token": f"cat {data}/admin.token",
        "db": f"cat {data}/trainyard.db",
        "datadir": f"ls {data}",
        "environ": f"cat /proc/{bob_pid}/environ",
        "boblog": f"cat {bob_log}",
        "bobdir": f"ls {multi.data_dir.parent / 'jobs' / bob_job['job_id']}",
    }
    command = "echo uid=$(id -u) gid=$(id -g); "
    for name, probe in probes.items():
        command += f"if {probe} >/dev/null 2>&1; then echo LEAK-{name}; else echo denied-{name}; fi; "
    command += "echo ENV-BEGIN; env; echo ENV-END"
    job = alice.submit({"name": "alice-probe", "command": command,
                        "env": {"SPEC_VAR": "from-the-spec"}})
    done = alice.wait_state(job["job_id"], "succeeded")
    out = alice.logs(job["job_id"])
    alice_pw = accounts["ty-iso-alice"]
    assert f"uid={alice_pw.pw_uid} gid={alice_pw.pw_gid}" in out, out
    for name in probes:
        assert f"denied-{name}" in out and f"LEAK-{name}" not in out, out
    env = dict(line.split("=", 1) for line in
               out.split("ENV-BEGIN\n", 1)[1].split("ENV-END", 1)[0].splitlines() if "=" in line)
    assert CANARY not in out, out
    assert "AWS_SECRET_ACCESS_KEY" not in env and "TY_SERVER_ONLY_VAR" not in env, env
    server_env = {**os.environ}
    shared = {k for k in env if k in server_env and env[k] == server_env[k]}
    assert shared <= {"PATH", "LANG", "SHLVL", "PWD", "_"}, shared
    assert env["SPEC_VAR"] == "from-the-spec"
    assert env["USER"] == "ty-iso-alice" and env["HOME"] == alice_pw.pw_dir, env
    private = multi.data_dir.parent / "jobs" / job["job_id"]
    assert env["TMPDIR"] == str(private / "tmp"), env
    assert env["TRAINYARD_CHECKPOINT_DIR"] == str(private / "checkpoints"), env
    assert env["PWD"] == str(private / "work"), env
    st = private.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (alice_pw.pw_uid, 0o700)

    bob.cancel(bob_job["job_id"])
    bob.wait_state(bob_job["job_id"], "cancelled")
    wait_dead(bob_pid)


ESCAPE = ("setsid sh -c 'echo $$ > escapee.tmp && mv escapee.tmp escapee; exec sleep 1000' & "
          "while [ ! -s escapee ]; do sleep 0.01; done; echo escaped")


def escapee_of(multi, job_id: str) -> int:
    path = multi.data_dir.parent / "jobs" / job_id / "work" / "escapee"
    pid = int(path.read_text())
    # It really left the rank's process group and session: only the cgroup holds it.
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat[3]) == pid, "the escapee did not start a session of its own"
    return pid


def test_setsid_escapee_dies_when_the_job_ends(multi, alice):
    job = alice.submit({"name": "escape-end", "command": ESCAPE + "; sleep 0.5"})
    alice.wait_log(job["job_id"], "escaped")
    pid = escapee_of(multi, job["job_id"])
    assert pid_alive(pid)
    alice.wait_state(job["job_id"], "succeeded")
    wait_dead(pid)


def test_setsid_escapee_dies_when_the_job_is_cancelled(multi, alice):
    job = alice.submit({"name": "escape-cancel", "command": ESCAPE + "; exec sleep 1000"})
    alice.wait_log(job["job_id"], "escaped")
    pid = escapee_of(multi, job["job_id"])
    alice.cancel(job["job_id"])
    alice.wait_state(job["job_id"], "cancelled")
    wait_dead(pid)


def test_job_over_its_memory_request_is_killed(multi, alice):
    r = admin_call(multi, "GET", "/cluster")
    containment = r.json()["containment"]
    if "memory requests are not enforced" in containment or containment.startswith("none"):
        pytest.skip(f"no memory controller here: {containment}")
    # dd fills a 512 MiB buffer against a 64 MiB request: the OOM killer ends it.
    job = alice.submit({"name": "oom", "command": "dd if=/dev/zero of=/dev/null bs=512M count=1",
                        "resources": {"memory": "64MiB"}})
    j = alice.wait(job["job_id"], lambda j: j["state"].lower() in ("failed", "succeeded"), "an end")
    assert j["state"].lower() == "failed", (j, alice.logs(job["job_id"]))
    assert "137" in json.dumps(j) or "signal 9" in json.dumps(j), j
    # Within the request, the same program runs.
    job = alice.submit({"name": "fits", "command": "dd if=/dev/zero of=/dev/null bs=8M count=1",
                        "resources": {"memory": "64MiB"}})
    alice.wait_state(job["job_id"], "succeeded")


def test_vanished_account_fails_the_attempt_with_a_clear_cause(multi):
    client = Client(multi, user_with_account(multi, "carol", "ty-iso-carol"))
    _remove_account("ty-iso-carol")
    try:
        job = client.submit({"name": "orphaned", "command": "true"})
        j = client.wait_state(job["job_id"], "failed")
        detail = json.dumps(j)
        assert "ty-iso-carol" in detail and "no longer usable" in detail, detail
    finally:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", "ty-iso-carol"],
                       capture_output=True)


def test_single_user_mode_refuses_non_admins(server_factory):
    server = server_factory.new()  # conftest gives its servers --single-user
    client = Client(server, user_with_account(server, "alice", None))
    r = client.submit({"name": "nope", "command": "true"}, expect=403)
    assert "single-user mode" in r["message"] and "only admins" in r["message"], r
    admin = Client(server, server.token)
    job = admin.submit({"name": "admin-ok", "command": "id -u"})
    admin.wait_state(job["job_id"], "succeeded")
    assert admin.logs(job["job_id"]).strip() == str(os.geteuid())
    out = subprocess.run([str(TRAINYARD_BIN), "cluster", "--url", server.url, "--token",
                          server.token], capture_output=True, text=True, timeout=30)
    assert "Mode single-user" in out.stdout, out.stdout


def test_slurm_job_is_submitted_as_its_owner(cluster, accounts):
    """On the Slurm test cluster (tests/slurm_cluster.py), alice's job is submitted with
    sbatch as ty-iso-alice, so Slurm runs it with her uid, and sees none of the server's
    environment."""
    import socket

    with socket.socket() as s:
        s.bind((cluster.controller_addr, 0))
        port = s.getsockname()[1]
    server = TrainyardServer(
        data_dir=cluster.shared_dir / f"iso-{uuid.uuid4().hex[:6]}", backend="sqlite",
        single_user=False,
        env={**os.environ, "AWS_SECRET_ACCESS_KEY": CANARY},
        extra_args=["--executor", "slurm", "--slurm-conf", str(cluster.conf_path),
                    "--host", "0.0.0.0", "--advertise-url",
                    f"http://{cluster.controller_addr}:{port}", "--port", str(port)])
    server.start()
    try:
        alice = Client(server, user_with_account(server, "alice", "ty-iso-alice"))
        job = alice.submit({"name": "slurm-identity",
                            "command": "echo uid=$(id -u) node=$(hostname); "
                                       "env | grep -c " + CANARY + " || true; "
                                       f"cat {server.data_dir}/admin.token || echo denied-token"})
        alice.wait_state(job["job_id"], "succeeded", timeout=90)
        out = alice.logs(job["job_id"])
        assert f"uid={accounts['ty-iso-alice'].pw_uid} node=node" in out, out
        assert "denied-token" in out and CANARY not in out, out
        # Slurm itself says whose job it was.
        private = Path(f"{server.data_dir}-jobs") / job["job_id"]
        slurm_id = (private / "attempt-1" / "slurm-job-id").read_text().strip()
        assert cluster.job(slurm_id)["UserId"].startswith(
            f"ty-iso-alice({accounts['ty-iso-alice'].pw_uid})"), cluster.job(slurm_id)
        # A setsid escapee leaves the step (the test cluster's proctrack/linuxproc loses it):
        # the rank wrapper kills it when the workload ends.
        job = alice.submit({"name": "slurm-escape", "command": ESCAPE + "; sleep 0.5"})
        alice.wait_log(job["job_id"], "escaped", timeout=90)
        work = Path(f"{server.data_dir}-jobs") / job["job_id"] / "work"
        pid = int((work / "escapee").read_text())
        assert pid_alive(pid)
        alice.wait_state(job["job_id"], "succeeded", timeout=90)
        wait_dead(pid, timeout=60)
        # Cancelling goes through scancel as alice, which Slurm accepts for her own job, and
        # ends what escaped from it too.
        job = alice.submit({"name": "slurm-cancel",
                            "command": ESCAPE + "; echo started; exec sleep 300"})
        alice.wait_log(job["job_id"], "started", timeout=90)
        work = Path(f"{server.data_dir}-jobs") / job["job_id"] / "work"
        pid = int((work / "escapee").read_text())
        assert pid_alive(pid)
        alice.cancel(job["job_id"])
        alice.wait_state(job["job_id"], "cancelled", timeout=90)
        wait_dead(pid, timeout=60)
        # After a restart the server adopts the running job and still cancels it as alice
        # (the batch script's owner names the account).
        job = alice.submit({"name": "slurm-adopted", "command": "echo started; exec sleep 300"})
        alice.wait_log(job["job_id"], "started", timeout=90)
        slurm_id = (Path(f"{server.data_dir}-jobs") / job["job_id"] / "attempt-1" /
                    "slurm-job-id").read_text().strip()
        server.restart()
        alice.cancel(job["job_id"])
        alice.wait_state(job["job_id"], "cancelled", timeout=90)
        kills = [line for line in (cluster.dir / "log" / "slurmctld.log").read_text().splitlines()
                 if "KILL" in line.upper() and f"JobId={slurm_id}" in line]
        uid = accounts["ty-iso-alice"].pw_uid
        assert kills and all(line.endswith(f"uid {uid}") for line in kills), kills
    finally:
        server.stop()


def test_submit_env_passes_variables_the_job_would_no_longer_inherit(server_factory, tmp_path):
    server = server_factory.new()
    spec = tmp_path / "job.yaml"
    spec.write_text("name: env-pass\ncommand: echo \"outputs=$OUTPUTS home=$HOME\"\n")
    env = {**os.environ, "OUTPUTS": "from-the-submitter", "TRAINYARD_URL": server.url,
           "TRAINYARD_TOKEN": server.token}
    out = subprocess.run([str(TRAINYARD_BIN), "submit", str(spec), "--env", "OUTPUTS=/x/y"],
                         capture_output=True, text=True, env=env, timeout=30, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    admin = Client(server, server.token)
    job_id = out.stdout.strip()
    admin.wait_state(job_id, "succeeded")
    assert f"outputs=/x/y home={pwd.getpwuid(os.geteuid()).pw_dir}" in admin.logs(job_id)
    bad = subprocess.run([str(TRAINYARD_BIN), "submit", str(spec), "--env", "NOEQUALS"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert bad.returncode != 0 and "NAME=VALUE" in bad.stderr, bad.stderr
