#!/usr/bin/env python3
"""bench/tracking: Trainyard's tracking API against the real MLflow server, in the same run.

Starts `build/trainyard server` and `mlflow server` (SQLite backend) side by side, seeds both
with the same data, alternates the timed work between them and reports medians and ratios.
Workloads: ingest (runs/log-batch of 1000 metrics), get-history of one long metric, and
runs/search with a metric+param filter (with and without order_by). README.md says what is
measured and how; the run ends with one JSON line per figure.

Usage: bench/run tracking [--quick] [--keep] [--verbose] [--only STEP] [--ours-only]
"""
from __future__ import annotations

import argparse
import array
import http.client
import json
import math
import multiprocessing
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "build" / "trainyard"
MLFLOW = ROOT / ".venv" / "bin" / "mlflow"
API = "/api/2.0/mlflow"
# One uvicorn worker process per core: MLflow's handlers are Python (one GIL per process), so
# more processes than cores only adds context switches; see README.md for the check.
MLFLOW_WORKERS = 2
# Ingest batches: KEYS x STEPS metrics per runs/log-batch (MLflow caps a batch at 1000).
KEYS = ("loss", "acc", "lr", "grad_norm")
STEPS = 250
TS0 = 1_700_000_000_000
HISTORY_KEY = "loss"
LRS = ("0.01", "0.001", "0.1")
SEARCH_FILTER = "metrics.acc > 0.5 and params.lr = '0.01'"
CLK_TCK = os.sysconf("SC_CLK_TCK")

VERBOSE = sys.stderr.isatty()


def say(msg: str) -> None:
    if VERBOSE:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# HTTP


class Client:
    """One persistent keep-alive connection. Not thread-safe; one per process."""

    def __init__(self, port: int, headers: dict[str, str]):
        self.port = port
        self.headers = {"Content-Type": "application/json", **headers}
        self.conn: http.client.HTTPConnection | None = None

    def connect(self) -> None:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=900)
            self.conn.connect()
            self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        # A keep-alive connection the server closed while idle (uvicorn does after 5 s) fails
        # on first use; reconnect once for that case only.
        for attempt in (0, 1):
            fresh = self.conn is None
            self.connect()
            try:
                self.conn.request(method, path, body=body, headers=self.headers)
                resp = self.conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if fresh or attempt:
                    raise
                continue
            if resp.will_close:
                self.close()
            return resp.status, data
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, obj: dict | None = None) -> dict:
        body = None if obj is None else json.dumps(obj).encode()
        status, data = self.request(method, API + path, body)
        if status != 200:
            raise RuntimeError(f"{method} {path} -> HTTP {status}: {data[:300]!r}")
        return json.loads(data)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# Servers


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total / CLK_TCK


def machine_busy_seconds() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


class LoadMeter:
    """CPU used on the machine during a phase, less what the servers and this benchmark (its
    reaped children included) used: other people's work on a shared machine."""

    def __init__(self, servers: list["Server"]):
        self.pids = [p for s in servers for p in s.pids()]
        self.other_cores = 0.0

    @staticmethod
    def _mine() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def __enter__(self) -> "LoadMeter":
        self.t0, self.busy0 = time.time(), machine_busy_seconds()
        self.srv0, self.me0 = cpu_seconds(self.pids), self._mine()
        return self

    def __exit__(self, *exc) -> None:
        wall = time.time() - self.t0
        used = (machine_busy_seconds() - self.busy0) - (cpu_seconds(self.pids) - self.srv0) - \
            (self._mine() - self.me0)
        self.other_cores = max(0.0, used / wall)


class Server:
    name = ""
    port = 0
    headers: dict[str, str] = {}
    proc: subprocess.Popen | None = None
    log_path: Path

    def client(self) -> Client:
        return Client(self.port, self.headers)

    def pids(self) -> list[int]:
        return descendants(self.proc.pid) if self.proc else []

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} server exited with {self.proc.returncode}; its log "
                               f"({self.log_path}) ends:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class OursServer(Server):
    name = "trainyard"

    def __init__(self, workdir: Path):
        self.data = workdir / "trainyard"
        self.port_file = workdir / "trainyard.port"
        self.log_path = workdir / "trainyard.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(BINARY), "server", "--data-dir", str(self.data), "--port", "0",
                 "--port-file", str(self.port_file), "--log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.check_alive()
            text = self.port_file.read_text().strip() if self.port_file.exists() else ""
            if text:
                self.port = int(text)
                token = (self.data / "admin.token").read_text().strip()
                self.headers = {"Authorization": f"Bearer {token}"}
                return
            time.sleep(0.05)
        raise RuntimeError(f"trainyard server did not write {self.port_file} in {timeout} s")


class MlflowServer(Server):
    name = "mlflow"

    def __init__(self, workdir: Path, workers: int):
        root = workdir / "mlflow"
        root.mkdir()
        self.db_path = root / "mlflow.db"
        self.log_path = workdir / "mlflow.log"
        self.port = free_port()
        # The GenAI job runner (huey consumers) has nothing to do with tracking; left on it keeps
        # seven more Python processes polling on these two cores.
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(MLFLOW), "server", "--backend-store-uri", f"sqlite:///{self.db_path}",
                 "--default-artifact-root", str(root / "artifacts"), "--host", "127.0.0.1",
                 "--port", str(self.port), "--workers", str(workers)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.check_alive()
            try:
                status, _ = Client(self.port, {}).request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"mlflow server did not answer /health in {timeout} s; its log "
                           f"ends:\n{self.log_tail()}")


# --------------------------------------------------------------------------------------------
# Data shared by both servers


def create_experiment(client: Client, name: str) -> str:
    return client.call("POST", "/experiments/create", {"name": name})["experiment_id"]


def create_run(client: Client, experiment_id: str, name: str, start_time: int = TS0) -> str:
    out = client.call("POST", "/runs/create",
                      {"experiment_id": experiment_id, "run_name": name, "start_time": start_time})
    return out["run"]["info"]["run_id"]


def history_value(step: int) -> float:
    return 1.0 / (1.0 + step * 1e-4)


def history_body(run_id: str, start: int, count: int) -> bytes:
    metrics = [{"key": HISTORY_KEY, "value": history_value(s), "timestamp": TS0 + s, "step": s}
               for s in range(start, start + count)]
    return json.dumps({"run_id": run_id, "metrics": metrics}).encode()


def search_run_fields(i: int) -> dict:
    acc = ((i * 7919) % 10007) / 10007
    return {"name": f"run-{i:05d}", "acc": acc, "loss": 1.0 - acc, "lr": LRS[i % 3],
            "batch_size": str(32 << (i % 4))}


def search_batch(run_id: str, f: dict) -> dict:
    return {"run_id": run_id,
            "metrics": [{"key": "acc", "value": f["acc"], "timestamp": TS0, "step": 0},
                        {"key": "loss", "value": f["loss"], "timestamp": TS0, "step": 0}],
            "params": [{"key": "lr", "value": f["lr"]},
                       {"key": "batch_size", "value": f["batch_size"]}]}


def ingest_template(run_id: str) -> bytes:
    """A log-batch body with a %d slot for each step; slots run key-major."""
    items = []
    for k, key in enumerate(KEYS):
        for j in range(STEPS):
            value = round(0.5 + 0.4 * math.sin(j * 0.1 + k), 6)
            items.append('{"key":"%s","value":%r,"timestamp":%d,"step":%%d}'
                         % (key, value, TS0 + j))
    return ('{"run_id":"%s","metrics":[' % run_id + ",".join(items) + "]}").encode()


# --------------------------------------------------------------------------------------------
# Worker processes (fork): each owns one connection.


def ingest_worker(args: tuple) -> dict:
    port, headers, method, path, ok_status, run_id, start_at, duration = args
    template = ingest_template(run_id)
    client = Client(port, headers)
    client.connect()
    lat = array.array("d")
    ok = err = batch = 0
    first_error = ""
    while time.time() < start_at:
        time.sleep(0.001)
    cpu0 = time.process_time()
    end = start_at + duration
    while time.time() < end:
        steps = tuple(range(batch * STEPS, (batch + 1) * STEPS))
        body = template % (steps * len(KEYS))
        t0 = time.perf_counter()
        try:
            status, data = client.request(method, path, body)
        except (OSError, http.client.HTTPException) as e:
            client.close()
            status, data = -1, repr(e).encode()
        lat.append(time.perf_counter() - t0)
        if status == ok_status:
            ok += 1
        else:
            err += 1
            first_error = first_error or f"HTTP {status}: {data[:200]!r}"
        batch += 1
    done = time.time()
    return {"ok": ok, "err": err, "lat": lat.tobytes(), "cpu": time.process_time() - cpu0,
            "done": done, "first_error": first_error}


def log_history_worker(args: tuple) -> int:
    port, headers, run_id, starts, batch = args
    client = Client(port, headers)
    for start in starts:
        status, data = client.request("POST", API + "/runs/log-batch",
                                      history_body(run_id, start, batch))
        if status != 200:
            raise RuntimeError(f"log-batch -> HTTP {status}: {data[:300]!r}")
    return len(starts)


def seed_search_worker(args: tuple) -> int:
    port, headers, experiment_id, indices = args
    client = Client(port, headers)
    for i in indices:
        f = search_run_fields(i)
        run_id = create_run(client, experiment_id, f["name"], TS0 + i)
        client.call("POST", "/runs/log-batch", search_batch(run_id, f))
    return len(indices)


def pool_map(fn, args: list) -> list:
    with multiprocessing.get_context("fork").Pool(len(args)) as pool:
        return pool.map(fn, args)


# --------------------------------------------------------------------------------------------
# Seeding


def seed_history_ours(server: Server, experiment_id: str, points: int, procs: int) -> str:
    run_id = create_run(server.client(), experiment_id, f"history-{points}")
    starts = list(range(0, points, 1000))
    assert points % 1000 == 0
    pool_map(log_history_worker, [(server.port, server.headers, run_id, starts[i::procs], 1000)
                                  for i in range(procs)])
    return run_id


def seed_history_mlflow(server: MlflowServer, experiment_id: str, points: int) -> str:
    """Logs the first 1000 points through MLflow's REST API, checks that the rows MLflow wrote
    are exactly the rows this function writes, then bulk-inserts the rest into its SQLite."""
    client = server.client()
    run_id = create_run(client, experiment_id, f"history-{points}")
    client.call("POST", "/runs/log-batch", json.loads(history_body(run_id, 0, 1000)))
    con = sqlite3.connect(server.db_path, timeout=60)
    try:
        got = con.execute("SELECT key, value, timestamp, step, is_nan FROM metrics "
                          "WHERE run_uuid = ? ORDER BY step", (run_id,)).fetchall()
        want = [(HISTORY_KEY, history_value(s), TS0 + s, s, 0) for s in range(1000)]
        if got != want:
            raise RuntimeError("MLflow stored log-batch rows differently than the seeder would "
                               f"(first row {got[:1]} vs {want[:1]}); fix seed_history_mlflow")
        con.executemany(
            "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
            "VALUES (?, ?, ?, ?, ?, 0)",
            ((HISTORY_KEY, history_value(s), TS0 + s, run_id, s) for s in range(1000, points)))
        last = points - 1
        con.execute("UPDATE latest_metrics SET value = ?, timestamp = ?, step = ? "
                    "WHERE run_uuid = ? AND key = ?",
                    (history_value(last), TS0 + last, last, run_id, HISTORY_KEY))
        con.commit()
    finally:
        con.close()
    return run_id


def seed_search_ours(server: Server, runs: int, procs: int) -> str:
    experiment_id = create_experiment(server.client(), "bench-search")
    pool_map(seed_search_worker, [(server.port, server.headers, experiment_id,
                                   range(i, runs, procs)) for i in range(procs)])
    return experiment_id


def seed_search_mlflow(server: MlflowServer, runs: int) -> str:
    """Creates run 0 through MLflow's REST API exactly as seed_search_ours does, then clones its
    rows in MLflow's SQLite for runs 1..N-1, substituting the per-run values."""
    client = server.client()
    experiment_id = create_experiment(client, "bench-search")
    f0 = search_run_fields(0)
    template = create_run(client, experiment_id, f0["name"], TS0)
    client.call("POST", "/runs/log-batch", search_batch(template, f0))
    con = sqlite3.connect(server.db_path, timeout=60)
    try:
        tables = {}
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            if "run_uuid" not in cols:
                continue
            rows = con.execute(f'SELECT * FROM "{table}" WHERE run_uuid = ?',
                               (template,)).fetchall()
            if rows:
                tables[table] = (cols, rows)
        known = {"runs", "tags", "params", "metrics", "latest_metrics"}
        if not set(tables) <= known:
            raise RuntimeError(f"MLflow wrote the template run into {sorted(set(tables) - known)} "
                               "too; teach seed_search_mlflow to clone those rows")
        new_ids = {i: uuid.uuid4().hex for i in range(1, runs)}
        for table, (cols, rows) in tables.items():
            placeholders = ", ".join("?" * len(cols))
            names = ", ".join(f'"{c}"' for c in cols)

            def clones():
                for i in range(1, runs):
                    f = search_run_fields(i)
                    new_id = new_ids[i]
                    for row in rows:
                        r = dict(zip(cols, row))
                        for c, v in r.items():
                            if isinstance(v, str) and template in v:
                                r[c] = v.replace(template, new_id)
                        if table == "runs":
                            r["name"], r["start_time"] = f["name"], TS0 + i
                        elif table == "tags" and r["key"] == "mlflow.runName":
                            r["value"] = f["name"]
                        elif table == "params" and r["key"] in ("lr", "batch_size"):
                            r["value"] = f[r["key"]]
                        elif table in ("metrics", "latest_metrics") and r["key"] in ("acc",
                                                                                      "loss"):
                            r["value"] = f[r["key"]]
                        yield tuple(r[c] for c in cols)

            con.executemany(f'INSERT INTO "{table}" ({names}) VALUES ({placeholders})', clones())
        con.commit()
    finally:
        con.close()
    return experiment_id


# --------------------------------------------------------------------------------------------
# Measurements


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def ingest_round(server: Server, experiment_id: str, clients: int, duration: float,
                 ceiling: bool = False) -> dict:
    """`clients` processes, each posting log-batch requests to its own new run for `duration`.
    With ceiling=True the same bodies go to POST /health, which Trainyard answers 405 after
    reading the body: what this client can push at best on this machine."""
    client = server.client()
    run_ids = [create_run(client, experiment_id, f"ingest-{uuid.uuid4().hex[:8]}")
               for _ in range(clients)]
    if ceiling:
        method, path, ok_status = "POST", "/health", 405
    else:
        method, path, ok_status = "POST", API + "/runs/log-batch", 200
    start_at = time.time() + 0.4
    pids = server.pids()
    with multiprocessing.get_context("fork").Pool(clients) as pool:
        pending = pool.map_async(ingest_worker, [
            (server.port, server.headers, method, path, ok_status, rid, start_at, duration)
            for rid in run_ids])
        while time.time() < start_at:
            time.sleep(0.001)
        server_cpu0, busy0 = cpu_seconds(pids), machine_busy_seconds()
        results = pending.get()
        server_cpu1, busy1 = cpu_seconds(pids), machine_busy_seconds()
    wall = max(r["done"] for r in results) - start_at
    ok = sum(r["ok"] for r in results)
    lat = sorted(x for r in results for x in array.array("d", r["lat"]))
    client_cpu = sum(r["cpu"] for r in results)
    server_cpu = server_cpu1 - server_cpu0
    return {
        "points_per_s": ok * len(KEYS) * STEPS / wall,
        "requests": ok, "errors": sum(r["err"] for r in results),
        "first_error": next((r["first_error"] for r in results if r["first_error"]), ""),
        "lat": lat, "wall": wall, "run_ids": run_ids,
        "client_cores": client_cpu / wall, "server_cores": server_cpu / wall,
        "other_cores": max(0.0, (busy1 - busy0 - client_cpu - server_cpu) / wall),
    }


def verify_ingest(server: Server, run_ids: list[str], requests: int) -> None:
    """Every acknowledged batch must be readable: the runs' history lengths add up."""
    client = server.client()
    total = 0
    for rid in run_ids:
        body = client.call("GET", f"/metrics/get-history?run_id={rid}&metric_key={KEYS[0]}")
        total += len(body.get("metrics", []))
    if total != requests * STEPS:
        raise RuntimeError(f"{server.name}: acknowledged {requests} batches ({requests * STEPS} "
                           f"'{KEYS[0]}' points) but get-history returns {total}")


def timed(client: Client, method: str, path: str,
          body: bytes | None = None) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    status, data = client.request(method, path, body)
    dt = time.perf_counter() - t0
    if status != 200:
        raise RuntimeError(f"{method} {path} -> HTTP {status}: {data[:300]!r}")
    return dt, data


def check_history(name: str, data: bytes, points: int) -> None:
    metrics = json.loads(data).get("metrics", [])
    steps = {m["step"] for m in metrics}
    if len(metrics) != points or len(steps) != points or min(steps) != 0 or \
            max(steps) != points - 1:
        raise RuntimeError(f"{name}: get-history returned {len(metrics)} points "
                           f"({len(steps)} distinct steps), expected {points}")
    probe = metrics[len(metrics) // 2]
    if probe["value"] != history_value(probe["step"]) or probe["key"] != HISTORY_KEY:
        raise RuntimeError(f"{name}: get-history point {probe} has the wrong value")


def time_history(sides: list[tuple[Server, str]], points: int,
                 reps: int) -> tuple[list[list[float]], list[int]]:
    """Alternates GET get-history between the sides; checks the first answer in full and
    that every later answer has the same length in bytes."""
    clients = [s.client() for s, _ in sides]
    paths = [f"{API}/metrics/get-history?run_id={rid}&metric_key={HISTORY_KEY}"
             for _, rid in sides]
    sizes = []
    for (server, _), client, path in zip(sides, clients, paths):
        _, data = timed(client, "GET", path)  # warm-up, and the full check
        check_history(server.name, data, points)
        sizes.append(len(data))
    times: list[list[float]] = [[] for _ in sides]
    for rep in range(reps):
        order = range(len(sides)) if rep % 2 == 0 else reversed(range(len(sides)))
        for i in order:
            dt, data = timed(clients[i], "GET", paths[i])
            if len(data) != sizes[i]:
                raise RuntimeError(f"{sides[i][0].name}: get-history answer changed size "
                                   f"({len(data)} bytes, first was {sizes[i]})")
            times[i].append(dt)
    return times, sizes


def canned_server(listener: socket.socket, response: bytes) -> None:
    """Answers every request on every connection with `response`."""
    while True:
        conn, _ = listener.accept()
        with conn:
            buf = b""
            while chunk := conn.recv(65536):
                buf += chunk
                while b"\r\n\r\n" in buf:
                    _, buf = buf.split(b"\r\n\r\n", 1)
                    conn.sendall(response)


def transfer_floor(size: int, reps: int) -> float:
    """Median time for this client to GET a `size`-byte answer from a server that does nothing
    but send prebuilt bytes: the part of a get-history time no server can remove."""
    body = b'{"metrics":[' + b"0" * (size - 14) + b"]}"
    response = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % len(body)) + body
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    proc = multiprocessing.get_context("fork").Process(target=canned_server,
                                                       args=(listener, response), daemon=True)
    proc.start()
    try:
        client = Client(listener.getsockname()[1], {})
        timed(client, "GET", "/")
        return statistics.median(timed(client, "GET", "/")[0] for _ in range(reps))
    finally:
        listener.close()
        proc.terminate()
        proc.join()


def expected_search(runs: int) -> tuple[int, float]:
    accs = [f["acc"] for f in map(search_run_fields, range(runs))
            if f["acc"] > 0.5 and f["lr"] == "0.01"]
    return len(accs), max(accs)


def check_search(name: str, data: bytes, runs: int, ordered: bool) -> None:
    count, top = expected_search(runs)
    found = json.loads(data).get("runs", [])
    if len(found) != min(100, count):
        raise RuntimeError(f"{name}: search returned {len(found)} runs, expected {min(100, count)}")
    accs = []
    for run in found:
        metrics = {m["key"]: m["value"] for m in run["data"].get("metrics", [])}
        params = {p["key"]: p["value"] for p in run["data"].get("params", [])}
        if not (metrics.get("acc", 0) > 0.5 and params.get("lr") == "0.01"):
            raise RuntimeError(f"{name}: search returned a run that fails the filter: {run}")
        accs.append(metrics["acc"])
    if ordered and (accs != sorted(accs, reverse=True) or accs[0] != top):
        raise RuntimeError(f"{name}: order_by metrics.acc DESC returned accs {accs[:5]}..., "
                           f"expected to start at {top}")


def count_search(server: Server, experiment_id: str) -> int:
    client, total, token = server.client(), 0, None
    while True:
        req = {"experiment_ids": [experiment_id], "filter": SEARCH_FILTER, "max_results": 1000}
        if token:
            req["page_token"] = token
        out = client.call("POST", "/runs/search", req)
        total += len(out.get("runs", []))
        token = out.get("next_page_token")
        if not token:
            return total


def time_search(sides: list[tuple[Server, str]], runs: int, reps: int,
                ordered: bool) -> list[list[float]]:
    bodies = []
    for _, experiment_id in sides:
        req = {"experiment_ids": [experiment_id], "filter": SEARCH_FILTER, "max_results": 100}
        if ordered:
            req["order_by"] = ["metrics.acc DESC"]
        bodies.append(json.dumps(req).encode())
    clients = [s.client() for s, _ in sides]
    path = API + "/runs/search"
    for (server, _), client, body in zip(sides, clients, bodies):
        _, data = timed(client, "POST", path, body)  # warm-up
        check_search(server.name, data, runs, ordered)
    times: list[list[float]] = [[] for _ in sides]
    for rep in range(reps):
        order = range(len(sides)) if rep % 2 == 0 else reversed(range(len(sides)))
        for i in order:
            dt, data = timed(clients[i], "POST", path, bodies[i])
            check_search(sides[i][0].name, data, runs, ordered)
            times[i].append(dt)
    return times


# --------------------------------------------------------------------------------------------
# Driver


# history: (points, timed requests per side) for each size measured on both servers.
QUICK = dict(ingest_clients=4, ingest_seconds=1.5, ingest_rounds=2, single_seconds=1.0,
             single_rounds=1, ceiling_seconds=1.0, history=[(100_000, 2)], search_runs=2_000,
             search_reps=5)
FULL = dict(ingest_clients=4, ingest_seconds=8.0, ingest_rounds=3, single_seconds=5.0,
            single_rounds=2, ceiling_seconds=3.0, history=[(100_000, 5), (1_000_000, 3)],
            search_runs=10_000, search_reps=10)


STEPS_ALL = ("ingest", "history", "search")


def warn_if_stale_binary() -> None:
    newest = max((p.stat().st_mtime, p) for p in (ROOT / "src").rglob("*")
                 if p.suffix in (".cc", ".h"))
    if newest[0] > BINARY.stat().st_mtime:
        print(f"bench/tracking: warning: {newest[1].relative_to(ROOT)} is newer than "
              f"build/trainyard; run scripts/build to measure the current code",
              file=sys.stderr)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def main() -> int:
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="scaled down; under a minute")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--verbose", action="store_true", help="progress to stderr in pipes too")
    parser.add_argument("--clients", type=int, help="ingest client processes (default 4)")
    parser.add_argument("--mlflow-workers", type=int, default=MLFLOW_WORKERS,
                        help=f"uvicorn worker processes for MLflow (default {MLFLOW_WORKERS})")
    parser.add_argument("--only", choices=STEPS_ALL, action="append",
                        help="run only this step (repeatable); default: all of them")
    parser.add_argument("--ours-only", action="store_true",
                        help="do not start MLflow: our figures only, no ratios (for iterating)")
    args = parser.parse_args()
    steps = set(args.only or STEPS_ALL)
    VERBOSE = VERBOSE or args.verbose
    cfg = dict(QUICK if args.quick else FULL)
    if args.clients:
        cfg["ingest_clients"] = args.clients
    if not BINARY.exists():
        print(f"bench/tracking: {BINARY} is missing; run scripts/build", file=sys.stderr)
        return 2
    warn_if_stale_binary()
    mlflow_version = subprocess.run([str(ROOT / ".venv/bin/python"), "-c",
                                     "import mlflow; print(mlflow.__version__)"],
                                    capture_output=True, text=True, check=True).stdout.strip()
    anchor = f"mlflow {mlflow_version} server (sqlite, {args.mlflow_workers} uvicorn workers)"

    workdir = Path(tempfile.mkdtemp(prefix="trainyard-bench-tracking-"))
    t_start = time.time()
    servers: list[Server] = []
    try:
        # MLflow takes 15-30 s to start; seed ours meanwhile (nothing is timed yet).
        say(f"starting servers in {workdir}")
        mlflow = None if args.ours_only else MlflowServer(workdir, args.mlflow_workers)
        if mlflow:
            servers.append(mlflow)
        ours = OursServer(workdir)
        servers.append(ours)
        ours.wait_ready()
        sizes = [points for points, _ in cfg["history"]] if "history" in steps else []
        search_runs = cfg["search_runs"] if "search" in steps else 0
        say(f"seeding trainyard: histories of {sizes} points, {search_runs:,} runs")
        ours_exp = create_experiment(ours.client(), "bench")
        ours_hist = {p: seed_history_ours(ours, ours_exp, p, 4) for p in sizes}
        ours_search = seed_search_ours(ours, search_runs, 4) if search_runs else ""
        ml_exp, ml_hist, ml_search = "", {}, ""
        if mlflow:
            mlflow.wait_ready()
            say(f"mlflow ready after {time.time() - t_start:.0f} s; seeding it")
            ml_exp = create_experiment(mlflow.client(), "bench")
            ml_hist = {p: seed_history_mlflow(mlflow, ml_exp, p) for p in sizes}
            ml_search = seed_search_mlflow(mlflow, search_runs) if search_runs else ""
        expected, _ = expected_search(cfg["search_runs"])
        for server, exp in ((ours, ours_search), (mlflow, ml_search)):
            if server and search_runs:
                got = count_search(server, exp)
                if got != expected:
                    raise RuntimeError(f"{server.name}: search over all pages found {got} runs, "
                                       f"expected {expected}")

        # 1. Ingest, alternating.
        n = cfg["ingest_clients"]
        rounds: dict[str, list[dict]] = {"ours": [], "mlflow": [], "ours1": [], "mlflow1": [],
                                         "ceiling": []}
        sides = {"ours": (ours, ours_exp), "mlflow": (mlflow, ml_exp)}
        keys = ("ours", "mlflow") if mlflow else ("ours",)
        if "ingest" not in steps:
            cfg["ingest_rounds"] = cfg["single_rounds"] = 0
        say(f"ingest: {n} clients x {cfg['ingest_seconds']} s x {cfg['ingest_rounds']} rounds")
        for r in range(cfg["ingest_rounds"]):
            for key in (keys if r % 2 == 0 else keys[::-1]):
                server, exp = sides[key]
                res = ingest_round(server, exp, n, cfg["ingest_seconds"])
                verify_ingest(server, res["run_ids"], res["requests"])
                rounds[key].append(res)
                say(f"  {key}: {res['points_per_s']:,.0f} points/s, {res['errors']} errors, "
                    f"cores: server {res['server_cores']:.2f}, client {res['client_cores']:.2f}, "
                    f"other {res['other_cores']:.2f}")
            # The client's ceiling, measured in every round as the machine's load drifts.
            res = ingest_round(ours, ours_exp, n, cfg["ceiling_seconds"], ceiling=True)
            rounds["ceiling"].append(res)
            say(f"  client ceiling: {res['points_per_s']:,.0f} points/s")
        say("ingest: 1 client")
        for r in range(cfg["single_rounds"]):
            for key in (keys if r % 2 == 0 else keys[::-1]):
                server, exp = sides[key]
                res = ingest_round(server, exp, 1, cfg["single_seconds"])
                verify_ingest(server, res["run_ids"], res["requests"])
                rounds[key + "1"].append(res)
                say(f"  {key}: {res['points_per_s']:,.0f} points/s")

        # 2. get-history.
        say("get-history")
        hist = {}
        for points, reps in cfg["history"] if "history" in steps else []:
            with LoadMeter(servers) as load:
                t, nbytes = time_history([(ours, ours_hist[points])] +
                                         ([(mlflow, ml_hist[points])] if mlflow else []),
                                         points, reps)
            floor = transfer_floor(nbytes[0], reps)
            hist[points] = (t[0], t[1] if mlflow else None, nbytes, floor, load.other_cores)
            say(f"  {points:,}: ours {statistics.median(t[0]) * 1e3:.1f} ms, mlflow "
                + (f"{statistics.median(t[1]) * 1e3:.1f} ms" if mlflow else "not run"))

        # 3. search.
        say("search")
        search = {}
        for ordered in (False, True) if "search" in steps else ():
            with LoadMeter(servers) as load:
                t = time_search([(ours, ours_search)] +
                                ([(mlflow, ml_search)] if mlflow else []), cfg["search_runs"],
                                cfg["search_reps"], ordered)
            search[ordered] = (t[0], t[1] if mlflow else None, load.other_cores)
        for s in servers:
            s.check_alive()
    finally:
        for s in servers:
            s.stop()
        if args.keep:
            print(f"bench/tracking: data kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    # ---- Report.
    def med(rs: list[dict], k: str) -> float:
        return statistics.median(r[k] for r in rs)

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 1) if b > 0 else None

    def pooled(rs: list[dict]) -> list[float]:
        return sorted(x for r in rs for x in r["lat"])

    figures = []
    if rounds["ours"] and rounds["mlflow"]:
        o, m, c = rounds["ours"], rounds["mlflow"], rounds["ceiling"]
        o_pts, m_pts = med(o, "points_per_s"), med(m, "points_per_s")
        o_lat, m_lat = pooled(o), pooled(m)
        ceiling = med(c, "points_per_s")
        client_bound = o_pts >= 0.7 * ceiling
        ingest_note = (
            f"{n} client processes, {len(o)} alternating rounds of {cfg['ingest_seconds']} s, "
            f"median; client ceiling {ceiling:,.0f} points/s (same bodies to POST /health -> 405, "
            f"median of {len(c)} rounds interleaved); "
            f"ours used {o_pts / ceiling:.0%} of it"
            + (" -- CLIENT-BOUND, the server may be faster" if client_bound else "")
            + f"; CPU cores during ours: server {med(o, 'server_cores'):.2f}, client "
            f"{med(o, 'client_cores'):.2f}, other processes {med(o, 'other_cores'):.2f}; during "
            f"mlflow: server {med(m, 'server_cores'):.2f}, client {med(m, 'client_cores'):.2f}, "
            f"other {med(m, 'other_cores'):.2f}; errors ours {sum(r['errors'] for r in o)}, "
            f"mlflow {sum(r['errors'] for r in m)}")
        for name, rs in (("ours", o), ("mlflow", m)):
            first = next((r["first_error"] for r in rs if r["first_error"]), "")
            if first:
                ingest_note += f"; first {name} error: {first}"
        figures.append({
            "bench": "tracking_ingest", "value": round(o_pts), "unit": "points/s", "anchor": anchor,
            "anchor_value": round(m_pts), "ratio": ratio(o_pts, m_pts),
            "target": ">= 100x and >= 500000 points/s",
            "p50_ms": ms(percentile(o_lat, 0.5)), "p99_ms": ms(percentile(o_lat, 0.99)),
            "anchor_p50_ms": ms(percentile(m_lat, 0.5)), "anchor_p99_ms": ms(percentile(m_lat, 0.99)),
            "note": ingest_note, "other_cores": round(med(o, "other_cores"), 2),
            "anchor_other_cores": round(med(m, "other_cores"), 2)})
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            a, b = percentile(o_lat, q), percentile(m_lat, q)
            figures.append({
                "bench": f"tracking_ingest_latency_{label}", "value": ms(a), "unit": "ms",
                "anchor": anchor, "anchor_value": ms(b), "ratio": ratio(b, a), "target": None,
                "note": f"log-batch of 1000 metrics, {n} concurrent clients; ratio = anchor / ours"})
        o1, m1 = rounds["ours1"], rounds["mlflow1"]
        o1_pts, m1_pts = med(o1, "points_per_s"), med(m1, "points_per_s")
        figures.append({
            "bench": "tracking_ingest_1client", "value": round(o1_pts), "unit": "points/s",
            "anchor": anchor, "anchor_value": round(m1_pts), "ratio": ratio(o1_pts, m1_pts),
            "target": None, "p50_ms": ms(percentile(pooled(o1), 0.5)),
            "p99_ms": ms(percentile(pooled(o1), 0.99)),
            "anchor_p50_ms": ms(percentile(pooled(m1), 0.5)),
            "note": f"one client, one request in flight (latency-bound), median of {len(o1)} "
                    f"alternating rounds of {cfg['single_seconds']} s",
            "other_cores": round(med(o1, "other_cores"), 2),
            "anchor_other_cores": round(med(m1, "other_cores"), 2)})
        figures.append({
            "bench": "tracking_client_ceiling", "value": round(ceiling), "unit": "points/s",
            "anchor": None, "anchor_value": None, "ratio": None, "target": None,
            "note": f"{n} client processes posting the same 1000-metric bodies to trainyard's "
                    f"POST /health (405 after reading the body): the most this load generator "
                    f"can push here (median of {len(c)} rounds); client used "
                    f"{med(c, 'client_cores'):.2f} cores, server {med(c, 'server_cores'):.2f}, other "
                    f"processes {med(c, 'other_cores'):.2f}"})
    elif rounds["ours"]:
        o_pts = med(rounds["ours"], "points_per_s")
        figures.append({"bench": "tracking_ingest", "value": round(o_pts), "unit": "points/s",
                        "anchor": None, "anchor_value": None, "ratio": None, "target": None,
                        "note": "--ours-only: MLflow not run"})
    for points, (ot, mt, nbytes, floor, other) in sorted(hist.items()):
        o_ms = statistics.median(ot)
        m_ms = statistics.median(mt) if mt else None
        figures.append({
            "bench": "tracking_get_history_" + ("1m" if points == 1_000_000 else
                                                f"{points // 1000}k"),
            "value": ms(o_ms), "unit": "ms", "anchor": anchor if mt else None,
            "anchor_value": ms(m_ms) if mt else None, "ratio": ratio(m_ms, o_ms) if mt else None,
            "target": "< 200 ms" if points >= 1_000_000 else None,
            "note": f"GET get-history of one {points:,}-point metric, no max_results, time to the "
                    f"last byte, median of {len(ot)} alternating; answers {nbytes[0] / 1e6:.1f} MB "
                    f"(ours)" + (f" and {nbytes[1] / 1e6:.1f} MB (mlflow)" if mt else "") +
                    "; this client needs "
                    f"{floor * 1e3:.1f} ms just to receive {nbytes[0] / 1e6:.1f} MB from a canned "
                    f"socket server; ratio = anchor / ours",
            "other_cores": round(other, 2)})
    for ordered, (ot, mt, other) in search.items():
        figures.append({
            "bench": "tracking_search_order" if ordered else "tracking_search_filter",
            "value": ms(statistics.median(ot)), "unit": "ms", "anchor": anchor if mt else None,
            "anchor_value": ms(statistics.median(mt)) if mt else None,
            "ratio": ratio(statistics.median(mt), statistics.median(ot)) if mt else None,
            "target": "< 50 ms",
            "note": f"runs/search over {cfg['search_runs']:,} runs, filter \"{SEARCH_FILTER}\""
                    + (", order_by metrics.acc DESC" if ordered else "")
                    + f", max_results 100 ({min(100, expected)} returned of {expected} "
                      f"matching), median of {len(ot)}; ratio = anchor / ours",
            "other_cores": round(other, 2)})

    print(f"\nbench/tracking ({'quick' if args.quick else 'full'}, {time.time() - t_start:.0f} s)"
          + (f": trainyard vs {anchor}" if mlflow else ": trainyard only"))
    print(f"{'figure':<34}{'trainyard':>14}{'mlflow':>14}{'ratio':>9}  target")
    for f in figures:
        av = "-" if f["anchor_value"] is None else f"{f['anchor_value']:,}"
        ratio = "-" if f["ratio"] is None else f"{f['ratio']}x"
        print(f"{f['bench']:<34}{f['value']:>14,}{av:>14}{ratio:>9}  "
              f"{f['target'] or ''} ({f['unit']})")
    print()
    for f in figures:
        print(json.dumps(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
