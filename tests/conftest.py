"""Fixtures for the cross-process tests: real `trainyard server` processes, on SQLite and on a
real throwaway PostgreSQL, driven by the unmodified `mlflow` client and by plain HTTP.

- `server`: one server per test module and backend (the module's tests share it; they use
  unique experiment/model names so they do not interfere).
- `server_factory`: start servers of your own (fresh, or restarted on the same data directory
  and database), stopped at the end of the test.
- `mlflow_env`: points the `mlflow` client at `server` (MLFLOW_TRACKING_URI/TOKEN) for one test
  and resets mlflow's global fluent state around it.

Env: TRAINYARD_BIN (default <repo>/build/trainyard), TRAINYARD_TEST_BACKENDS (default
"sqlite,postgresql"), TRAINYARD_TEST_LOG_LEVEL (the servers' --log-level, default warn).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from pg import PostgresCluster

REPO = Path(__file__).resolve().parent.parent
TRAINYARD_BIN = Path(os.environ.get("TRAINYARD_BIN", REPO / "build" / "trainyard"))
BACKENDS = [b for b in os.environ.get("TRAINYARD_TEST_BACKENDS", "sqlite,postgresql").split(",")
            if b]
LOG_LEVEL = os.environ.get("TRAINYARD_TEST_LOG_LEVEL", "warn")
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30

# The mlflow client retries 5xx answers for minutes by default; a server fault should fail a
# test quickly instead.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
for _var in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
             "MLFLOW_TRACKING_INSECURE_TLS"):
    os.environ.pop(_var, None)


def _die_with_parent() -> None:
    """preexec_fn: the server gets SIGKILL when pytest dies, so none outlives a crashed run."""
    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def tail(path: Path, limit: int = 4000) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return text if len(text) <= limit else "..." + text[-limit:]


@dataclass
class TrainyardServer:
    """One `trainyard server` process; `restart()` brings it back on the same state."""

    data_dir: Path
    backend: str
    db_url: str | None = None
    extra_args: list[str] = field(default_factory=list)
    # Tests run as root, which would make the server multi-user (jobs as their users' mapped
    # OS accounts); the tests that want that mode set this to False.
    single_user: bool = True
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    port: int | None = None
    token: str | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.server.log"

    def start(self) -> "TrainyardServer":
        assert self.proc is None, "server already running"
        if not TRAINYARD_BIN.exists():
            pytest.fail(f"{TRAINYARD_BIN} does not exist: build it with "
                        "`ninja -C build trainyard` or set TRAINYARD_BIN")
        self.starts += 1
        port_file = self.data_dir.parent / f"{self.data_dir.name}.port{self.starts}"
        argv = [str(TRAINYARD_BIN), "server", "--data-dir", str(self.data_dir), "--port", "0",
                "--port-file", str(port_file), "--log-level", LOG_LEVEL, *self.extra_args]
        if self.single_user:
            argv.append("--single-user")
        if self.db_url:
            argv += ["--db", self.db_url]
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts}: {' '.join(argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                                         env=self.env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if port_file.exists():
                text = port_file.read_text().strip()
                if text:
                    self.port = int(text)
                    break
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                pytest.fail(f"trainyard server exited with {rc} before listening:\n"
                            f"{tail(self.log_path)}")
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"trainyard server did not write {port_file} within "
                            f"{START_TIMEOUT_S}s:\n{tail(self.log_path)}")
            time.sleep(0.02)  # polling for the port file, bounded by the deadline
        token_file = self.data_dir / "admin.token"
        assert token_file.exists(), f"{token_file} missing after start"
        mode = token_file.stat().st_mode & 0o777
        assert mode == 0o600, f"admin.token has mode {oct(mode)}, want 0600"
        self.token = token_file.read_text().strip()
        assert self.token
        return self

    def stop(self, expect_code: int | None = 0) -> int:
        """SIGTERM, wait, and (by default) assert a clean exit."""
        assert self.proc is not None, "server not running"
        self.assert_alive()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            pytest.fail(f"trainyard server ignored SIGTERM for {STOP_TIMEOUT_S}s:\n"
                        f"{tail(self.log_path)}")
        self.proc = None
        if expect_code is not None:
            assert rc == expect_code, (f"trainyard server exited with {rc} after SIGTERM:\n"
                                       f"{tail(self.log_path)}")
        return rc

    def assert_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            rc = self.proc.returncode
            self.proc = None
            pytest.fail(f"trainyard server died (exit status {rc}):\n{tail(self.log_path)}")

    def kill(self) -> None:
        """SIGKILL: no draining, no flushing."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> "TrainyardServer":
        if self.proc is not None:
            self.stop()
        return self.start()

    def session(self, token: str | None = None) -> requests.Session:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token if token is not None else self.token}"
        return s

    def api(self, path: str) -> str:
        return f"{self.url}{path}"

    def create_user(self, name: str, is_admin: bool = False) -> str:
        """Creates a user and a token for them; returns the token."""
        with self.session() as s:
            r = s.post(self.api("/api/trainyard/v1/users"), json={"name": name,
                                                                   "is_admin": is_admin})
            assert r.status_code == 200, r.text
            r = s.post(self.api("/api/trainyard/v1/tokens"),
                       json={"user": name, "description": "test token"})
            assert r.status_code == 200, r.text
            return r.json()["token"]


# --- PostgreSQL: one cluster per session, started only when a postgresql test runs


@pytest.fixture(scope="session")
def pg_cluster():
    cluster = PostgresCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


class ServerFactory:
    def __init__(self, base: Path, backend: str, request: pytest.FixtureRequest):
        self.base = base
        self.backend = backend
        self.request = request
        self.servers: list[TrainyardServer] = []

    def new(self, extra_args: list[str] | None = None,
            single_user: bool = True) -> TrainyardServer:
        data_dir = self.base / f"server-{len(self.servers)}-{uuid.uuid4().hex[:6]}"
        db_url = None
        if self.backend == "postgresql":
            db_url = self.request.getfixturevalue("pg_cluster").create_database()
        server = TrainyardServer(data_dir=data_dir, backend=self.backend, db_url=db_url,
                                 extra_args=extra_args or [], single_user=single_user)
        self.servers.append(server)
        return server.start()

    def close(self) -> None:
        errors = []
        for s in self.servers:
            if s.proc is not None:
                try:
                    s.stop()
                except BaseException as e:  # noqa: BLE001 - report after stopping the rest
                    errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def server(backend, tmp_path_factory, request):
    factory = ServerFactory(tmp_path_factory.mktemp(f"srv-{backend}"), backend, request)
    try:
        yield factory.new()
    finally:
        factory.close()


@pytest.fixture
def server_factory(backend, tmp_path, request):
    factory = ServerFactory(tmp_path, backend, request)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def admin(server):
    """A session on the module's server with its admin token."""
    s = server.session()
    yield s
    s.close()


def running(server: TrainyardServer):
    """The body of a fixture that owns `server`: `yield from running(server)` starts it, yields
    it, and stops it afterwards (unless a test stopped it already)."""
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None:
            server.stop()


def module_server(tmp_path_factory, backend: str, request, prefix: str, extra_args: list[str]):
    """The body of a module-scoped `server` fixture: `yield from module_server(...)` gives one
    server started with `extra_args` on the module's backend, closed after the module."""
    factory = ServerFactory(tmp_path_factory.mktemp(f"{prefix}-{backend}"), backend, request)
    try:
        yield factory.new(extra_args=extra_args)
    finally:
        factory.close()


def register_hf_model(server: TrainyardServer, token: str, work: Path, prefix: str = "llm",
                      alias: str | None = None) -> str:
    """Registers a model owned by the token's user whose version 1 is a Hugging Face
    directory (a config.json only: enough for the fake serving engine); returns its name."""
    import mlflow
    from mlflow import MlflowClient

    hf = work / f"hf-{uuid.uuid4().hex[:6]}"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text('{"model_type": "gpt2"}')
    os.environ["MLFLOW_TRACKING_URI"] = server.url
    os.environ["MLFLOW_TRACKING_TOKEN"] = token
    try:
        mlflow.set_tracking_uri(server.url)
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        mlflow.set_experiment(f"serving-{name}")
        with mlflow.start_run() as run:
            mlflow.log_artifacts(str(hf), "model")
        client = MlflowClient()
        client.create_registered_model(name)
        client.create_model_version(name, f"runs:/{run.info.run_id}/model", run.info.run_id)
        if alias:
            client.set_registered_model_alias(name, alias, 1)
        return name
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.environ.pop("MLFLOW_TRACKING_TOKEN", None)
        mlflow.set_tracking_uri(None)


@pytest.fixture(scope="module")
def llm_model(server, tmp_path_factory):
    """A model registered by the admin on the module's server, version 1 a Hugging Face
    directory; alias champion -> 1."""
    return register_hf_model(server, server.token, tmp_path_factory.mktemp("hf"),
                             alias="champion")


# --- the mlflow client


def reset_mlflow_state() -> None:
    import mlflow
    from mlflow.tracking import fluent
    from mlflow.tracking._tracking_service import utils as tracking_utils

    while mlflow.active_run() is not None:
        mlflow.end_run()
    fluent._active_experiment_id = None
    fluent._last_active_run_id.set(None)
    fluent._reset_last_logged_model_id()
    try:
        fluent._ACTIVE_MODEL_CONTEXT.set(fluent.ActiveModelContext())
    except AttributeError:
        pass
    tracking_utils._tracking_uri = None
    tracking_utils._artifact_repos_cache.clear()
    try:
        from mlflow.tracking._model_registry import utils as registry_utils
        registry_utils._registry_uri = None
    except (ImportError, AttributeError):
        pass


def point_mlflow_at(server: TrainyardServer, monkeypatch, token: str | None = None) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token or server.token)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    reset_mlflow_state()


@pytest.fixture(autouse=True)
def _isolate_tests(request):
    """Every test starts with clean mlflow fluent state; a module server that died during a
    test fails that test with the server's log instead of failing every later test obscurely."""
    reset_mlflow_state()
    yield
    reset_mlflow_state()
    if "server" in request.fixturenames:
        request.getfixturevalue("server").assert_alive()


@pytest.fixture
def mlflow_env(server, monkeypatch):
    point_mlflow_at(server, monkeypatch)
    try:
        yield server
    finally:
        reset_mlflow_state()


@pytest.fixture
def client(mlflow_env):
    from mlflow import MlflowClient

    return MlflowClient()


@pytest.fixture
def unique():
    """A short unique suffix for names inside a shared module server."""
    return uuid.uuid4().hex[:8]


# --- Slurm: a real two-node cluster (tests/slurm_cluster.py), one per test module that asks


@pytest.fixture(scope="module")
def cluster():
    from slurm_cluster import SlurmCluster

    c = SlurmCluster(nodes=2)
    c.start()
    try:
        yield c
    finally:
        c.stop()


# The session's one local SparkSession with Delta (tests/spark_session.py), started on first use.
from spark_session import spark  # noqa: E402,F401
