#!/usr/bin/env python3
"""bench/ui: Trainyard's web UI against MLflow's own UI, in the same headless Chromium.

Starts `build/trainyard server` (serving build/web at /) and `mlflow server` (SQLite backend,
its UI bundled in the pinned wheel) side by side, logs the same data into both through MLflow's
REST API (runs/create + runs/log-batch), starts Debian's Chromium once and has
bench/ui/measure.mjs (playwright-core over CDP) time three pages in each UI, alternating:

  table:  an experiment of --runs runs (5 params, 8 metrics each): navigation until the rows
          are visible, then a click on the `acc` column header until the run with the highest
          acc (over all runs) is the first row: "interactive".
  chart:  --chart-runs runs x --points points of `loss` in one chart: navigation until the
          chart holds every run's series and is drawn.
  long:   one run x --long-points points of `loss`: navigation until its chart is drawn.

README.md gives the definitions and figures; the run ends with one JSON line per figure.

Usage: bench/run ui [--quick] [--runs N] [--chart-runs N] [--points N] [--long-points N]
                    [--repeats N] [--keep] [--ours-only]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
MEASURE = Path(__file__).resolve().parent / "measure.mjs"

# The servers, the keep-alive client and the load meter are bench/tracking's.
_spec = importlib.util.spec_from_file_location("bench_tracking", ROOT / "bench" / "tracking" / "run.py")
tracking = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tracking)
Client, OursServer, MlflowServer, LoadMeter = (tracking.Client, tracking.OursServer,
                                                tracking.MlflowServer, tracking.LoadMeter)

TS0 = 1_700_000_000_000
PARAMS = ("lr", "batch_size", "optimizer", "warmup", "seed")
METRICS = ("acc", "loss", "f1", "precision", "recall", "lr_final", "grad_norm", "throughput")
BATCH = 1000  # MLflow's cap on metrics per runs/log-batch
MLFLOW_VERSION = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c",
                                 "import importlib.metadata as m; print(m.version('mlflow'))"],
                                capture_output=True, text=True).stdout.strip() or "3.x"
VERBOSE = sys.stderr.isatty() or os.environ.get("BENCH_VERBOSE") == "1"


def say(msg: str) -> None:
    if VERBOSE:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_fields(i: int) -> tuple[dict, dict]:
    acc = ((i * 7919) % 10007) / 10007
    params = {"lr": ("0.01", "0.001", "0.1")[i % 3], "batch_size": str(32 << (i % 4)),
              "optimizer": ("adam", "sgd")[i % 2], "warmup": str(i % 10), "seed": str(i)}
    metrics = {"acc": acc, "loss": 1 - acc, "f1": acc * 0.9, "precision": acc * 0.95,
               "recall": acc * 0.85, "lr_final": 1e-5 * (i % 7), "grad_norm": 1 + i % 13,
               "throughput": 1000 + i % 101}
    return params, metrics


def loss_value(run: int, step: int) -> float:
    return 1.0 / (1.0 + step * 1e-3) + 0.05 * math.sin(step * 0.01 + run)


# --- seeding, in worker processes (one keep-alive connection each)

_client: Client | None = None


def _init_worker(port: int, headers: dict) -> None:
    global _client
    _client = Client(port, headers)


def _table_run(args: tuple[str, int]) -> None:
    experiment_id, i = args
    run_id = _client.call("POST", "/runs/create", {"experiment_id": experiment_id,
                                                   "run_name": f"run-{i:05d}",
                                                   "start_time": TS0 + i})["run"]["info"]["run_id"]
    params, metrics = run_fields(i)
    _client.call("POST", "/runs/log-batch", {
        "run_id": run_id,
        "params": [{"key": k, "value": v} for k, v in params.items()],
        "metrics": [{"key": k, "value": v, "timestamp": TS0, "step": 0} for k, v in metrics.items()]})


def _history(args: tuple[str, int, int, int]) -> None:
    run_id, run, start, count = args
    metrics = [{"key": "loss", "value": loss_value(run, s), "timestamp": TS0 + s, "step": s}
               for s in range(start, start + count)]
    _client.call("POST", "/runs/log-batch", {"run_id": run_id, "metrics": metrics})


def seed(server, args, pool_size: int, pages: list[str]) -> dict:
    """Logs the experiments of `pages` into `server`; returns the ids the pages need."""
    c = server.client()
    t0 = time.time()
    out = {}
    # A worker that dies makes the executor raise (BrokenProcessPool) where a Pool would hang.
    with ProcessPoolExecutor(pool_size, mp_context=multiprocessing.get_context("fork"),
                             initializer=_init_worker,
                             initargs=(server.port, server.headers)) as pool:
        if "table" in pages:
            table = c.call("POST", "/experiments/create", {"name": "ui-bench-table"})["experiment_id"]
            for n, _ in enumerate(pool.map(_table_run, [(table, i) for i in range(args.runs)],
                                           chunksize=50), 1):
                if n % 1000 == 0:
                    say(f"{server.name}: {n} of {args.runs} runs logged ({time.time() - t0:.0f} s)")
            out["table_experiment"] = table

        if "chart" in pages:
            charts = c.call("POST", "/experiments/create", {"name": "ui-bench-chart"})["experiment_id"]
            chart_runs = [c.call("POST", "/runs/create", {"experiment_id": charts, "run_name": f"chart-{r:03d}",
                                                          "start_time": TS0})["run"]["info"]["run_id"]
                          for r in range(args.chart_runs)]
            list(pool.map(_history, [(rid, r, s, min(BATCH, args.points - s))
                                     for r, rid in enumerate(chart_runs) for s in range(0, args.points, BATCH)]))
            out["chart_experiment"], out["chart_runs"] = charts, chart_runs

        if "long" in pages:
            long_exp = c.call("POST", "/experiments/create", {"name": "ui-bench-long"})["experiment_id"]
            long_run = c.call("POST", "/runs/create", {"experiment_id": long_exp, "run_name": "long",
                                                       "start_time": TS0})["run"]["info"]["run_id"]
            list(pool.map(_history, [(long_run, 0, s, min(BATCH, args.long_points - s))
                                     for s in range(0, args.long_points, BATCH)], chunksize=10))
            out["long_experiment"], out["long_run"] = long_exp, long_run
    say(f"{server.name}: seeded in {time.time() - t0:.0f} s")
    return out


def acc_ends(runs: int) -> tuple[str, str]:
    """The runs with the highest and the lowest acc."""
    order = sorted(range(runs), key=lambda i: run_fields(i)[1]["acc"])
    return f"run-{order[-1]:05d}", f"run-{order[0]:05d}"


# --- the browser


def start_chromium(profile: Path) -> tuple[subprocess.Popen, str]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        sys.exit("bench/ui: chromium is not installed; run scripts/install-deps")
    # The same flags as tests/test_web_ui.py; a fixed window size so both UIs draw the same area.
    argv = [exe, "--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", "--disable-default-apps", "--no-pings", "--disable-dev-shm-usage",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"]
    if os.geteuid() == 0:
        argv.insert(1, "--no-sandbox")
    log = open(profile.parent / "chromium.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit("bench/ui: chromium did not open its DevTools port; see "
                     f"{profile.parent / 'chromium.log'}")
        time.sleep(0.05)  # polling the port file, bounded by the deadline
    return proc, f"http://127.0.0.1:{int(port_file.read_text().split()[0])}"


def measure(cdp: str, ui: str, page: str, config: dict) -> dict:
    env = dict(os.environ, UI_BENCH=json.dumps({"cdp": cdp, "ui": ui, "page": page, **config}))
    r = subprocess.run(["node", str(MEASURE)], cwd=WEB, env=env, capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"measure {ui} {page} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def spread(ms: list[dict]) -> dict:
    """Each part of a page's time (rows_visible_ms, sort_click_ms, total_ms, ...) over the
    repeats: median, best and every repeat's value, since a loaded machine moves single runs."""
    out = {}
    for k in ms[0]:
        values = [m[k] for m in ms if k in m]
        out[k] = round(statistics.median(values))
        if len(values) > 1:
            out[k.removesuffix("_ms") + "_best_ms" if k.endswith("_ms") else k + "_best"] = min(values)
            out[k.removesuffix("_ms") + "_all_ms" if k.endswith("_ms") else k + "_all"] = values
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small data: 1000 runs, 20 x 2000 points, 100,000 points")
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--chart-runs", type=int, default=100)
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--long-points", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3, help="timed page loads per UI and page")
    ap.add_argument("--timeout", type=int, default=300, help="seconds one page may take")
    ap.add_argument("--pages", default="table,chart,long",
                    help="which pages to time, comma-separated (table, chart, long)")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--ours-only", action="store_true", help="skip MLflow")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.chart_runs, args.points, args.long_points, args.repeats = 1000, 20, 2000, 100_000, 1
    pages = [p for p in args.pages.split(",") if p]
    if not pages or set(pages) - {"table", "chart", "long"}:
        sys.exit(f"bench/ui: --pages takes table, chart and/or long, not {args.pages!r}")
    if not (WEB / "node_modules" / "playwright-core").is_dir():
        sys.exit("bench/ui: web/node_modules lacks playwright-core; run scripts/build")
    if not (ROOT / "build" / "web" / "index.html").exists():
        sys.exit("bench/ui: build/web/index.html is missing; run scripts/build (needs node)")

    # A SIGTERM (timeout, Ctrl-C from a wrapper) still stops the servers and the browser.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    servers = [OursServer(work)]
    if not args.ours_only:
        servers.append(MlflowServer(work, tracking.MLFLOW_WORKERS))
    chromium = None
    try:
        for s in servers:
            s.wait_ready()
        data = {s.name: seed(s, args, 2, pages) for s in servers}
        (work / "profile").mkdir()
        chromium, cdp = start_chromium(work / "profile")
        top, bottom = acc_ends(args.runs)
        results: dict[tuple[str, str], list[dict]] = {}
        with LoadMeter(servers) as load:
            for rep in range(args.repeats):
                for page in pages:
                    for s in servers:
                        d = data[s.name]
                        config = {"url": f"http://127.0.0.1:{s.port}",
                                  "token": s.headers.get("Authorization", "").removeprefix("Bearer "),
                                  "runs": args.runs, "top_run": top, "bottom_run": bottom, "chart_points": args.points,
                                  "long_points": args.long_points, "timeout_ms": args.timeout * 1000, **d}
                        m = measure(cdp, s.name, page, config)
                        say(f"{s.name} {page} #{rep + 1}: {m}")
                        results.setdefault((s.name, page), []).append(m)
        figures = []
        what = {"table": f"{args.runs} runs: rows visible + sort answered",
                "chart": f"{args.chart_runs} runs x {args.points} points drawn",
                "long": f"1 run x {args.long_points} points drawn"}
        for page in pages:
            ours = statistics.median(m["total_ms"] for m in results[("trainyard", page)])
            fig = {"bench": f"ui_{page}", "what": what[page], "value": round(ours), "unit": "ms",
                   "detail": spread(results[("trainyard", page)])}
            if not args.ours_only:
                theirs = statistics.median(m["total_ms"] for m in results[("mlflow", page)])
                fig.update(anchor=f"mlflow {MLFLOW_VERSION} UI", anchor_value=round(theirs),
                           anchor_detail=spread(results[("mlflow", page)]),
                           ratio=round(theirs / ours, 2) if ours else None)
            fig["target"] = ">= 10x" + (", < 1000 ms" if page == "table" else "")
            fig["other_load_cores"] = round(load.other_cores, 2)
            figures.append(fig)
        for fig in figures:
            line = f"{fig['bench']:9} {fig['what']:42} trainyard {fig['value']:7} ms"
            if "anchor_value" in fig:
                line += f"   mlflow {fig['anchor_value']:7} ms   ratio {fig['ratio']}x"
            print(line, file=sys.stderr)
        print(f"(other work on the machine meanwhile: {load.other_cores:.2f} cores of "
              f"{os.cpu_count()})", file=sys.stderr)
        for fig in figures:
            print(json.dumps(fig))
    finally:
        if chromium is not None:
            os.killpg(chromium.pid, signal.SIGTERM)
            chromium.wait()
        for s in servers:
            s.stop()
        if args.keep:
            print(f"bench/ui: data kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
