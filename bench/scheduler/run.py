"""bench/run scheduler [--quick]

1. One scheduling pass over 10,000 nodes / 10,000 queued jobs (build/scheduler_pass_bench,
   our Scheduler against a naive linear-scan scheduler in the same binary).
2. Submit-to-running latency of a one-process local job, through the real server: from the
   moment the submit request is sent to the moment the workload's first instruction runs.
   Anchor: starting the same command with a bare subprocess.Popen (the floor any launcher pays).
3. Crash-to-next-attempt: from a rank's crash (its last instruction) to the first instruction
   of the next attempt, with restart_backoff 0. Anchor: a bare retry loop in Python (wait for
   the process, start it again).

Ends with one JSON line per figure (see CONVENTIONS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "build" / "trainyard"
PASS_BENCH = ROOT / "build" / "scheduler_pass_bench"


def now_ns() -> int:
    return time.time_ns()


def start_server(data_dir: Path) -> tuple[subprocess.Popen, str, str]:
    port_file = data_dir.parent / "port"
    proc = subprocess.Popen([str(BIN), "server", "--data-dir", str(data_dir), "--port", "0",
                             "--port-file", str(port_file), "--log-level", "warn",
                             "--local-cpus", "64", "--single-user"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit("the server did not start")
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port_file.read_text().strip()}"
    token = (data_dir / "admin.token").read_text().strip()
    return proc, url, token


def wait_file(path: Path, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = path.read_text().strip()
            if text:
                return int(text)
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"{path} never appeared")
        time.sleep(0.001)


def wait_done(s: requests.Session, url: str, job_id: str) -> None:
    deadline = time.monotonic() + 60
    while s.get(f"{url}/api/trainyard/v1/jobs/{job_id}").json()["job"]["state"] not in (
            "SUCCEEDED", "FAILED", "CANCELLED"):
        if time.monotonic() > deadline:
            sys.exit(f"job {job_id} did not finish")
        time.sleep(0.01)


def submit_latency(s, url: str, work: Path, n: int) -> tuple[list[float], list[float]]:
    ours, anchor = [], []
    for i in range(n):
        # Alternate our launcher and the anchor so that machine noise hits both.
        mark = work / f"submit-{i}"
        t0 = now_ns()
        r = s.post(f"{url}/api/trainyard/v1/jobs",
                   json={"spec": {"name": f"lat-{i}", "command": f"date +%s%N > {mark}"}})
        r.raise_for_status()
        ours.append((wait_file(mark) - t0) / 1e6)
        wait_done(s, url, r.json()["job"]["job_id"])
        mark = work / f"popen-{i}"
        t0 = now_ns()
        p = subprocess.Popen(["/bin/sh", "-c", f"date +%s%N > {mark}"])
        anchor.append((wait_file(mark) - t0) / 1e6)
        p.wait()
    return ours, anchor


def crash_latency(s, url: str, work: Path, n: int) -> tuple[list[float], list[float]]:
    ours, anchor = [], []
    for i in range(n):
        crash, restart = work / f"crash-{i}", work / f"restart-{i}"
        cmd = (f"if [ $TRAINYARD_ATTEMPT = 1 ]; then date +%s%N > {crash}; exit 1; fi; "
               f"date +%s%N > {restart}")
        r = s.post(f"{url}/api/trainyard/v1/jobs",
                   json={"spec": {"name": f"crash-{i}", "command": cmd,
                                  "restart_backoff": "0ms", "max_restarts": 1}})
        r.raise_for_status()
        ours.append((wait_file(restart) - wait_file(crash)) / 1e6)
        wait_done(s, url, r.json()["job"]["job_id"])
        crash, restart = work / f"bare-crash-{i}", work / f"bare-restart-{i}"
        p = subprocess.Popen(["/bin/sh", "-c", f"date +%s%N > {crash}; exit 1"])
        if p.wait() != 0:
            p = subprocess.Popen(["/bin/sh", "-c", f"date +%s%N > {restart}"])
            p.wait()
        anchor.append((wait_file(restart) - wait_file(crash)) / 1e6)
    return ours, anchor


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if not PASS_BENCH.exists():
        subprocess.run([str(ROOT / "scripts" / "build")], check=True)
    lines = []
    out = subprocess.run([str(PASS_BENCH)] + (["--quick"] if args.quick else []),
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            lines.append(line)
        else:
            print(line)

    n = 10 if args.quick else 50
    tmp = Path(tempfile.mkdtemp(prefix="ty-bench-sched-"))
    proc, url, token = start_server(tmp / "data")
    try:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token}"
        work = tmp / "marks"
        work.mkdir()
        ours, anchor = submit_latency(s, url, work, n)
        p50, a50 = statistics.median(ours), statistics.median(anchor)
        print(f"submit-to-running, one-process job, {n} samples: p50 {p50:.1f} ms, "
              f"p90 {pct(ours, 0.9):.1f} ms; bare Popen p50 {a50:.2f} ms")
        lines.append(json.dumps({"bench": "scheduler_submit_to_running_p50", "value": round(p50, 2),
                                 "unit": "ms", "anchor": "bare subprocess.Popen of the command",
                                 "anchor_value": round(a50, 3), "ratio": round(p50 / a50, 1),
                                 "target": "< 50 ms"}))
        ours, anchor = crash_latency(s, url, work, n)
        p50, a50 = statistics.median(ours), statistics.median(anchor)
        print(f"crash-to-next-attempt (backoff 0), {n} samples: p50 {p50:.1f} ms, "
              f"max {max(ours):.1f} ms; bare retry loop p50 {a50:.2f} ms")
        lines.append(json.dumps({"bench": "scheduler_crash_to_next_attempt_p50",
                                 "value": round(p50, 2), "unit": "ms",
                                 "anchor": "bare Python retry loop (wait, Popen again)",
                                 "anchor_value": round(a50, 3), "ratio": round(p50 / a50, 1),
                                 "target": "< 2000 ms + backoff"}))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
