"""A throwaway PostgreSQL cluster for the cross-process tests.

`PostgresCluster.start()` runs `initdb` into a fresh temporary directory and starts `postgres`
on 127.0.0.1 with a free port and its Unix socket inside that directory. `create_database()`
hands each Trainyard server its own empty database. `stop()` shuts the cluster down (fast
shutdown) and deletes the directory.

PostgreSQL refuses to run as root; when the tests run as root (as CI does) the cluster
directory is chowned to the `postgres` user and the server programs run through
`runuser -u postgres --`.

A small guardian shell holds the read end of a pipe whose write end only this process has; when
this process dies without calling `stop()` (a crash, SIGKILL of pytest), the guardian sees end
of file, kills the postmaster and removes the directory, so no cluster outlives the test run.

Set TRAINYARD_TEST_POSTGRES_BIN to use server binaries from another directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg2

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
START_ATTEMPTS = 5  # a free port can be taken by someone else before postgres binds it

_GUARDIAN = r"""
dir=$1
fd=$2
# Wait for end of file on the pipe: the test process exited, normally or not.
while read -r -u "$fd" _; do :; done
if [ -f "$dir/data/postmaster.pid" ]; then
  pid=$(head -n 1 "$dir/data/postmaster.pid")
  [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null
  i=0
  while [ $i -lt 100 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
fi
rm -rf "$dir"
"""


def find_server_binaries() -> Path:
    candidates = []
    if env := os.environ.get("TRAINYARD_TEST_POSTGRES_BIN"):
        candidates.append(Path(env))
    for tool in ("initdb", "postgres"):
        found = shutil.which(tool)
        if found:
            candidates.append(Path(os.path.realpath(found)).parent)
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates += [Path(v) for v in versions]
    candidates.append(Path("/usr/local/pgsql/bin"))
    for d in candidates:
        if os.access(d / "initdb", os.X_OK) and os.access(d / "postgres", os.X_OK):
            return d
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, postgres) not found in PATH, "
        "/usr/lib/postgresql/*/bin or /usr/local/pgsql/bin: install them "
        "(Debian: apt-get install postgresql-15) or set TRAINYARD_TEST_POSTGRES_BIN"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return text if len(text) <= limit else "..." + text[-limit:]


class PostgresCluster:
    def __init__(self) -> None:
        self.bin_dir = find_server_binaries()
        self.as_root = os.geteuid() == 0
        self.dir: Path | None = None
        self.port: int | None = None
        self.user = "postgres" if self.as_root else pwd.getpwuid(os.geteuid()).pw_name
        self._proc: subprocess.Popen | None = None
        self._guardian: subprocess.Popen | None = None
        self._guard_fd: int | None = None
        self._databases = 0

    # --- lifecycle

    def start(self) -> "PostgresCluster":
        # Not under pytest's tmp_path: that lives below a 0700 root directory the postgres user
        # cannot enter.
        self.dir = Path(tempfile.mkdtemp(prefix="trainyard-pg-"))
        os.chmod(self.dir, 0o755)
        self._start_guardian()
        data = self.dir / "data"
        if self.as_root:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        log = self.dir / "initdb.log"
        with open(log, "wb") as out:
            rc = subprocess.call(
                self._as_pg(
                    [str(self.bin_dir / "initdb"), "-D", str(data), "-U", self.user,
                     "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"]
                ),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        if rc != 0:
            raise RuntimeError(f"initdb exited with {rc}:\n{_tail(log)}")
        last_error = ""
        for _ in range(START_ATTEMPTS):
            self.port = free_port()
            ok, last_error = self._start_postgres(data)
            if ok:
                return self
        raise RuntimeError(f"postgres did not start after {START_ATTEMPTS} attempts:\n{last_error}")

    def stop(self) -> None:
        if self._proc is not None:
            pid = self._postmaster_pid()
            try:
                # SIGINT = fast shutdown. Signal the postmaster itself, not runuser.
                os.kill(pid or self._proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                self._proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                if pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self._proc.kill()
                self._proc.wait(timeout=STOP_TIMEOUT_S)
            self._proc = None
        if self._guard_fd is not None:
            # Closing our end lets the guardian exit; it finds no postmaster.pid and removes dir.
            os.close(self._guard_fd)
            self._guard_fd = None
            if self._guardian is not None:
                self._guardian.wait(timeout=STOP_TIMEOUT_S)
                self._guardian = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # --- databases

    def connect(self, dbname: str = "postgres"):
        return psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname=dbname)

    def create_database(self, prefix: str = "trainyard") -> str:
        """Creates an empty database; returns the URL the Trainyard server takes with --db."""
        self._databases += 1
        name = f"{prefix}_{os.getpid()}_{self._databases}"
        conn = self.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def url(self, dbname: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}"

    # --- internals

    def _as_pg(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if self.as_root else argv

    def _start_guardian(self) -> None:
        read_fd, write_fd = os.pipe()
        os.set_inheritable(read_fd, True)
        self._guardian = subprocess.Popen(
            ["bash", "-c", _GUARDIAN, "guardian", str(self.dir), str(read_fd)],
            pass_fds=(read_fd,), stdin=subprocess.DEVNULL, start_new_session=True,
        )
        os.close(read_fd)
        self._guard_fd = write_fd  # stays open (and not inherited) until stop()

    def _postmaster_pid(self) -> int | None:
        try:
            first = (self.dir / "data" / "postmaster.pid").read_text().splitlines()[0]
            return int(first)
        except (OSError, IndexError, ValueError, TypeError):
            return None

    def _start_postgres(self, data: Path) -> tuple[bool, str]:
        log = self.dir / "postgres.log"
        out = open(log, "ab")
        try:
            self._proc = subprocess.Popen(
                self._as_pg(
                    [str(self.bin_dir / "postgres"), "-D", str(data), "-p", str(self.port),
                     "-h", "127.0.0.1", "-k", str(self.dir),
                     "-c", "fsync=off", "-c", "synchronous_commit=on",
                     "-c", "full_page_writes=off", "-c", "max_connections=200",
                     "-c", "shared_buffers=64MB"]
                ),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's ^C reaches pytest, not the cluster
            )
        finally:
            out.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                return False, _tail(log)
            try:
                self.connect().close()
                return True, ""
            except psycopg2.OperationalError:
                time.sleep(0.05)  # polling for readiness, bounded by the deadline
        self.stop_process_only()
        return False, "postgres did not accept connections within " \
                      f"{START_TIMEOUT_S}s:\n{_tail(log)}"

    def stop_process_only(self) -> None:
        if self._proc is None:
            return
        pid = self._postmaster_pid()
        for p in filter(None, (pid, self._proc.pid)):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc.wait(timeout=STOP_TIMEOUT_S)
        self._proc = None
