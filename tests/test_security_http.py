"""Security of the HTTP front door and of the data at rest (issue 13, parts 4, 6 and 7).

- Credentials are checked before a body is read: an unauthenticated 1 GB upload and an
  unauthenticated 15 MB JSON body get 401 without the server storing or buffering them.
- Connections are capped per client address and in total; other clients are still served.
- The idle timeout is between reads: a slow upload that keeps sending succeeds, a stalled
  one is dropped.
- The data directory is 0700, its files 0600 (also an older install's, after a restart);
  what a crash leaves of uploads is removed at the next start.
- An acknowledged change's audit record survives `kill -9`; failed authentications are
  audited, rate-limited per client address.
"""

from __future__ import annotations

import json
import os
import select
import socket
import stat
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "python"))

MLFLOW = "/api/2.0/mlflow"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"
TY = "/api/trainyard/v1"
MIB = 1 << 20


@pytest.fixture(scope="module", params=["sqlite"])
def backend(request) -> str:
    # The HTTP layer and the files on disk do not depend on the metadata backend; the audit
    # tests below run on both (their own parametrization).
    return request.param


# --- raw HTTP helpers (requests would buffer, retry or normalize what these tests send)


def connect(server, source: str | None = None, timeout: float = 30) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    s.connect(("127.0.0.1", server.port))
    return s


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(s: socket.socket, deadline_s: float = 30) -> tuple[int, dict, bytes]:
    """Reads one response (with a Content-Length) from `s`."""
    deadline = time.monotonic() + deadline_s
    data = b""
    while b"\r\n\r\n" not in data:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = s.recv(65536)
        assert chunk, f"connection closed before a response; got {data[:200]!r}"
        data += chunk
    header, _, body = data.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = s.recv(65536)
        assert chunk, "connection closed in the middle of a response"
        body += chunk
    return status, headers, body[:length]


def send_streaming_until_answered(s: socket.socket, total: int, deadline_s: float = 60):
    """Sends up to `total` body bytes while watching for an answer; returns (bytes sent,
    the answer's raw bytes). Stops sending once an answer arrives or the peer stops reading."""
    s.setblocking(False)
    block = b"\0" * MIB
    sent = 0
    answer = b""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        want_write = [s] if sent < total and not answer else []
        readable, writable, _ = select.select([s], want_write, [], 0.5)
        if readable:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, BlockingIOError):
                chunk = b""
            if not chunk:
                break
            answer += chunk
            if b"\r\n\r\n" in answer:
                break
        if writable:
            try:
                sent += s.send(block[: min(len(block), total - sent)])
            except (BrokenPipeError, ConnectionResetError):
                want_write = []
        if not readable and not writable and sent >= total:
            continue
    s.setblocking(True)
    return sent, answer


def tree_bytes(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def new_experiment(server) -> str:
    r = server.session().post(server.api(f"{MLFLOW}/experiments/create"),
                              json={"name": f"sec-http-{uuid.uuid4().hex[:8]}"})
    assert r.status_code == 200, r.text
    return r.json()["experiment_id"]


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)  # polling, bounded by the deadline


# --- authentication before bodies


@pytest.mark.parametrize("auth", [None, "Bearer not-a-real-token"])
def test_unauthenticated_1gb_upload_is_refused_before_anything_is_stored(server_factory, auth):
    server = server_factory.new()
    eid = new_experiment(server)
    before = tree_bytes(server.data_dir)
    s = connect(server)
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(1 << 30)}
    if auth:
        headers["Authorization"] = auth
    s.sendall(head("PUT", f"{ARTIFACTS}/{eid}/big.bin", headers))
    sent, answer = send_streaming_until_answered(s, 1 << 30)
    s.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert b"UNAUTHENTICATED" in answer
    # The answer came while the body was still being sent: nothing waited for it.
    assert sent < (1 << 30), f"the whole body ({sent} bytes) was sent before the answer"
    # Nothing of it was stored: no upload file, and the data directory did not grow (but for
    # the audit record of the refusal).
    uploads = server.data_dir / "uploads"
    assert not uploads.exists() or not any(uploads.iterdir())
    grown = tree_bytes(server.data_dir) - before
    assert grown < MIB, f"the data directory grew by {grown} bytes"
    assert not list((server.data_dir / "artifacts").rglob("big.bin"))
    # The server is fine.
    r = server.session().get(server.api("/health"))
    assert r.status_code == 200


def test_unauthenticated_15mb_json_body_gets_401_without_being_read(server_factory):
    server = server_factory.new()
    s = connect(server)
    s.sendall(head("POST", f"{MLFLOW}/runs/log-batch",
                   {"Content-Type": "application/json", "Content-Length": str(15 * MIB),
                    "Authorization": "Bearer ty_nope_0000"}))
    s.sendall(b'{"run_id": "x", "metrics": [')  # and not one byte more
    status, headers, body = read_response(s)
    assert status == 401, body
    assert json.loads(body)["error_code"] == "UNAUTHENTICATED"
    assert headers.get("connection", "").lower() == "close"
    s.close()
    # The same with the whole body sent: still 401, and the server keeps serving.
    s = connect(server)
    s.sendall(head("POST", f"{MLFLOW}/runs/log-batch",
                   {"Content-Type": "application/json", "Content-Length": str(15 * MIB)}))
    sent, answer = send_streaming_until_answered(s, 15 * MIB)
    s.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert server.session().get(server.api("/health")).status_code == 200


def test_authenticated_requests_still_work_with_bodies_and_expect_100_continue(server_factory):
    server = server_factory.new()
    eid = new_experiment(server)
    payload = os.urandom(3 * MIB)
    s = connect(server)
    s.sendall(head("PUT", f"{ARTIFACTS}/{eid}/expect.bin",
                   {"Authorization": f"Bearer {server.token}", "Expect": "100-continue",
                    "Content-Length": str(len(payload))}))
    status, _, _ = read_response(s)
    assert status == 100
    s.sendall(payload)
    status, _, body = read_response(s)
    assert status == 200, body
    s.close()
    r = server.session().get(server.api(f"{ARTIFACTS}/{eid}/expect.bin"))
    assert r.status_code == 200 and r.content == payload


def test_small_refused_bodies_keep_the_connection(server_factory):
    server = server_factory.new()
    s = connect(server)
    body = b'{"name": "x"}'
    for _ in range(3):
        s.sendall(head("POST", f"{MLFLOW}/experiments/create",
                       {"Content-Length": str(len(body)), "Authorization": "Bearer bad"}) + body)
        status, headers, _ = read_response(s)
        assert status == 401
        assert headers.get("connection", "").lower() != "close"
    s.close()


# --- connection caps


def test_connection_caps_refuse_one_client_and_serve_others(server_factory):
    server = server_factory.new(["--max-connections-per-client", "6", "--max-connections", "10"])
    idle = [connect(server) for _ in range(6)]
    try:
        # The 7th connection from 127.0.0.1 is answered 503 at once, and closed.
        extra = connect(server)
        status, _, body = read_response(extra)
        assert status == 503, body
        msg = json.loads(body)["message"]
        assert "too many connections from 127.0.0.1" in msg and "--max-connections-per-client" \
            in msg
        assert extra.recv(1) == b""
        extra.close()
        # Another client address is still served.
        other = connect(server, source="127.0.0.2")
        other.sendall(head("GET", "/health", {}))
        status, _, _ = read_response(other)
        assert status == 200
        # The total cap: 6 + 4 connections are open; the 11th, from a third address, is refused.
        more = [connect(server, source="127.0.0.3") for _ in range(3)]
        for m in more:  # each is admitted (it answers)
            m.sendall(head("GET", "/health", {}))
            assert read_response(m)[0] == 200
        third = connect(server, source="127.0.0.4")
        status, _, body = read_response(third)
        assert status == 503 and "--max-connections" in json.loads(body)["message"], body
        third.close()
        for m in more + [other]:
            m.close()
        # Once an idle connection of the first client closes, it may connect again.
        idle.pop().close()

        def admitted():
            s = connect(server)
            s.sendall(head("GET", "/health", {}))
            status = read_response(s)[0]
            s.close()
            return status == 200

        wait_until(admitted, 30, "a new connection to be admitted")
    finally:
        for s in idle:
            s.close()
    assert server.session().get(server.api("/health")).status_code == 200


def test_inflight_bytes_per_client_are_capped(server_factory):
    server = server_factory.new(["--max-inflight-bytes-per-client", str(2 * MIB)])
    auth = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    # One request of 1.5 MiB in flight (its body not finished)...
    first = connect(server)
    first.sendall(head("POST", f"{MLFLOW}/runs/log-batch",
                       {**auth, "Content-Length": str(3 * MIB // 2), "Expect": "100-continue"}))
    assert read_response(first)[0] == 100  # admitted: its bytes are counted
    first.sendall(b"{")
    # ... a second one that would pass 2 MiB is refused at once.
    second = connect(server)
    second.sendall(head("POST", f"{MLFLOW}/runs/log-batch", {**auth,
                                                              "Content-Length": str(MIB)}))
    status, _, body = read_response(second)
    assert status == 503, body
    assert "--max-inflight-bytes-per-client" in json.loads(body)["message"]
    second.close()
    first.close()
    # Once the first is gone, the same request is read (and answered as a bad body).
    def answered_400():
        s = connect(server)
        s.sendall(head("POST", f"{MLFLOW}/runs/log-batch", {**auth, "Content-Length": str(MIB)})
                  + b" " * MIB)
        status = read_response(s)[0]
        s.close()
        return status == 400
    wait_until(answered_400, 30, "the in-flight bytes to be released")


# --- idle timeout


def test_slow_upload_succeeds_and_a_stalled_one_is_dropped(server_factory):
    server = server_factory.new(["--idle-timeout", "2"])
    eid = new_experiment(server)
    piece = os.urandom(64 * 1024)
    pieces = 11  # one every 0.5 s: about 5 s in all, more than twice the idle timeout
    s = connect(server)
    s.sendall(head("PUT", f"{ARTIFACTS}/{eid}/slow.bin",
                   {"Authorization": f"Bearer {server.token}",
                    "Content-Length": str(len(piece) * pieces)}))
    started = time.monotonic()
    for _ in range(pieces):
        s.sendall(piece)
        time.sleep(0.5)  # pacing the upload, not synchronization
    status, _, body = read_response(s)
    assert time.monotonic() - started > 4
    assert status == 200, body
    s.close()
    r = server.session().get(server.api(f"{ARTIFACTS}/{eid}/slow.bin"))
    assert r.status_code == 200 and r.content == piece * pieces

    # A client that stops sending is dropped after the idle timeout, its partial upload removed.
    s = connect(server)
    s.sendall(head("PUT", f"{ARTIFACTS}/{eid}/stalled.bin",
                   {"Authorization": f"Bearer {server.token}", "Content-Length": str(10 * MIB)}))
    s.sendall(piece)
    uploads = server.data_dir / "uploads"
    wait_until(lambda: uploads.exists() and any(uploads.iterdir()), 30, "the upload file")
    stalled_at = time.monotonic()
    s.settimeout(60)
    try:
        got = s.recv(65536)
    except ConnectionResetError:
        got = b""
    waited = time.monotonic() - stalled_at
    assert got == b"", got[:200]
    assert 1.5 < waited < 30, waited
    s.close()
    wait_until(lambda: not any(uploads.iterdir()), 30, "the partial upload to be removed")
    assert server.session().get(server.api(f"{ARTIFACTS}/{eid}/stalled.bin")).status_code == 404


# --- data at rest


def modes_under(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    files, dirs = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath) / d
            dirs[str(p.relative_to(root))] = p.lstat().st_mode & 0o7777
        for f in filenames:
            p = Path(dirpath) / f
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue
            files[str(p.relative_to(root))] = st.st_mode & 0o7777
    return files, dirs


def use_everything(server) -> None:
    """Artifacts, a job (with its log) and a checkpoint."""
    s = server.session()
    eid = new_experiment(server)
    assert s.put(server.api(f"{ARTIFACTS}/{eid}/a/b.txt"), data=b"hello").status_code == 200
    assert s.put(server.api(f"{ARTIFACTS}/{eid}/big.bin"), data=os.urandom(2 * MIB)).status_code \
        == 200
    r = s.post(server.api(f"{TY}/jobs"), json={"spec": {
        "name": "modes", "command": "echo hello from the job; exec sleep 60"}})
    assert r.status_code == 200, r.text
    job_id = r.json()["job"]["job_id"]

    def running():
        j = s.get(server.api(f"{TY}/jobs/{job_id}")).json()["job"]
        assert j["state"] not in ("FAILED", "SUCCEEDED", "CANCELLED"), j
        return j["state"] == "RUNNING"

    wait_until(running, 60, "the job to run")
    wait_until(lambda: "hello from the job" in s.get(server.api(f"{TY}/jobs/{job_id}/logs"),
                                                     params={"attempt": 0}).text,
               60, "the job's log")
    up = s.post(server.api(f"{TY}/checkpoints/uploads"), json={"job_id": job_id, "step": 1})
    assert up.status_code == 200, up.text
    upload_id = up.json()["upload_id"]
    r = s.put(server.api(f"{TY}/checkpoints/uploads/{upload_id}/blob"),
              params={"name": "w", "dtype": "F32", "shape": "1024"}, data=os.urandom(4096))
    assert r.status_code == 200, r.text
    r = s.post(server.api(f"{TY}/checkpoints/uploads/{upload_id}/commit"), json={})
    assert r.status_code == 200 and r.json()["complete"], r.text
    # One more upload left staged (not committed).
    up = s.post(server.api(f"{TY}/checkpoints/uploads"), json={"job_id": job_id, "step": 2})
    r = s.put(server.api(f"{TY}/checkpoints/uploads/{up.json()['upload_id']}/blob"),
              params={"name": "w"}, data=b"staged")
    assert r.status_code == 200, r.text
    s.post(server.api(f"{TY}/jobs/{job_id}/cancel"))


def assert_private(root: Path) -> None:
    assert root.stat().st_mode & 0o7777 == 0o700, oct(root.stat().st_mode)
    files, dirs = modes_under(root)
    assert files and dirs
    for what in ("trainyard.db", "trainyard.db-wal", "admin.token"):
        assert what in files, sorted(files)
    assert any("chunks" in f for f in files), sorted(files)
    assert any(f.startswith("jobs/") or "log" in f for f in files), sorted(files)
    bad_files = {f: oct(m) for f, m in files.items() if m != 0o600}
    bad_dirs = {d: oct(m) for d, m in dirs.items() if m != 0o700}
    assert not bad_files, bad_files
    assert not bad_dirs, bad_dirs


def test_data_directory_is_private_and_older_installs_are_tightened(server_factory):
    server = server_factory.new()
    use_everything(server)
    assert_private(server.data_dir)
    server.stop()
    # An install from before: everything readable by all.
    os.chmod(server.data_dir, 0o755)
    files, dirs = modes_under(server.data_dir)
    for d in dirs:
        os.chmod(server.data_dir / d, 0o755)
    for f in files:
        os.chmod(server.data_dir / f, 0o644)
    server.start()
    assert_private(server.data_dir)
    use_everything(server)
    assert_private(server.data_dir)


def test_crash_leftovers_are_removed_at_restart(server_factory):
    server = server_factory.new()
    eid = new_experiment(server)
    s = server.session()
    # A staged checkpoint upload that may still be resumed after the restart.
    r = s.post(server.api(f"{TY}/jobs"), json={"spec": {"name": "leftovers",
                                                        "command": "exec sleep 120"}})
    job_id = r.json()["job"]["job_id"]
    wait_until(lambda: s.get(server.api(f"{TY}/jobs/{job_id}")).json()["job"]["state"]
               == "RUNNING", 60, "the job to run")
    upload_id = s.post(server.api(f"{TY}/checkpoints/uploads"),
                       json={"job_id": job_id, "step": 7}).json()["upload_id"]
    assert s.put(server.api(f"{TY}/checkpoints/uploads/{upload_id}/blob"),
                 params={"name": "kept"}, data=b"kept").status_code == 200
    # An upload in progress when the server dies.
    up = connect(server)
    up.sendall(head("PUT", f"{ARTIFACTS}/{eid}/interrupted.bin",
                    {"Authorization": f"Bearer {server.token}", "Content-Length": str(64 * MIB)}))
    up.sendall(os.urandom(4 * MIB))
    uploads = server.data_dir / "uploads"
    wait_until(lambda: uploads.exists() and any(f.stat().st_size > 0 for f in uploads.iterdir()),
               30, "the upload to reach the disk")
    server.kill()
    up.close()
    # Other leftovers of a crash: a half-written artifact, an export, a staged upload that
    # never got its session, a half-written file of a staged one.
    staging = server.data_dir / "checkpoint-staging"
    planted = [server.data_dir / "artifacts" / eid / ".tmp-x.bin-999999-0",
               staging / "exports" / "export-0123abcd.safetensors",
               staging / "u-000000000000" / "blobs" / "a.bin",
               staging / upload_id / "session.json.tmp"]
    for p in planted:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"leftover")
    server.start()
    assert not any(uploads.iterdir()), list(uploads.iterdir())
    for p in planted:
        assert not p.exists(), p
    assert not (staging / "u-000000000000").exists()
    # The resumable upload is still there and commits.
    r = s.post(server.api(f"{TY}/checkpoints/uploads/{upload_id}/commit"), json={},
               headers={"Authorization": f"Bearer {server.token}"})
    assert r.status_code == 200 and r.json()["complete"], r.text
    server.session().post(server.api(f"{TY}/jobs/{job_id}/cancel"))


# --- audit


@pytest.fixture(params=["sqlite", "postgresql"])
def audit_factory(request, tmp_path):
    from conftest import ServerFactory

    if request.param not in os.environ.get("TRAINYARD_TEST_BACKENDS",
                                           "sqlite,postgresql").split(","):
        pytest.skip(f"TRAINYARD_TEST_BACKENDS excludes {request.param}")
    factory = ServerFactory(tmp_path, request.param, request)
    try:
        yield factory
    finally:
        factory.close()


def audit_records(server, **params) -> list[dict]:
    r = server.session().get(server.api(f"{TY}/audit"), params={"max_results": 10000, **params})
    assert r.status_code == 200, r.text
    return r.json()["records"]


def test_acknowledged_changes_are_audited_before_kill_9(audit_factory):
    server = audit_factory.new()
    names = [f"audited-{uuid.uuid4().hex[:8]}-{i}" for i in range(24)]
    acked: list[str] = []
    lock = threading.Lock()

    def create(name):
        with server.session() as s:
            r = s.post(server.api(f"{MLFLOW}/experiments/create"), json={"name": name})
            if r.status_code == 200:
                with lock:
                    acked.append(r.json()["experiment_id"])

    threads = [threading.Thread(target=create, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    server.kill()  # at once: no drain, no flush
    assert len(acked) == len(names)
    server.start()
    creates = [r for r in audit_records(server, user="admin")
               if r["path"] == f"{MLFLOW}/experiments/create" and r["status"] == 200]
    assert len(creates) >= len(names), f"{len(creates)} of {len(names)} audit records survived"


def test_failed_authentications_are_audited_and_rate_limited(audit_factory):
    server = audit_factory.new(["--audit-failed-auth-per-minute", "5"])
    attempts = 40
    for i in range(attempts):
        s = connect(server)
        auth = {} if i % 2 else {"Authorization": f"Bearer ty_bad{i}_secret"}
        s.sendall(head("GET", f"{MLFLOW}/experiments/search", auth))
        assert read_response(s)[0] == 401
        s.close()
    # Another address has its own allowance.
    s = connect(server, source="127.0.0.2")
    s.sendall(head("POST", f"{MLFLOW}/experiments/create", {"Content-Length": "2"}) + b"{}")
    assert read_response(s)[0] == 401
    s.close()

    def is_summary(r):
        return "more failed authentication" in r.get("detail", "")

    def suppressed():
        return sum(int(r["detail"].split()[0])
                   for r in audit_records(server, user="(unauthenticated)")
                   if r["remote"] == "127.0.0.1" and is_summary(r))

    # The suppressed ones are summed up in a summary record every few seconds.
    wait_until(lambda: suppressed() >= attempts - 5, 60,
               "the summary of suppressed failed authentications")
    assert suppressed() == attempts - 5
    records = audit_records(server, user="(unauthenticated)")
    one_by_one = [r for r in records if r["remote"] == "127.0.0.1" and not is_summary(r)]
    assert len(one_by_one) == 5, one_by_one
    assert all(r["status"] == 401 and r["path"] == f"{MLFLOW}/experiments/search"
               for r in one_by_one)
    details = " ".join(r["detail"] for r in one_by_one)
    assert "missing credentials" in details and "invalid token" in details
    other = [r for r in records if r["remote"] == "127.0.0.2"]
    assert len(other) == 1 and other[0]["method"] == "POST", other
