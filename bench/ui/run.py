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

With --pages every (ours only): each of the UI's 16 pages, in a workspace around an experiment
of --runs runs (README.md lists what is seeded), from navigation until its main parts are on
screen and nothing in it is still loading.

README.md gives the definitions and figures; the run ends with one JSON line per figure.

Usage: bench/run ui [--quick] [--runs N] [--chart-runs N] [--points N] [--long-points N]
                    [--repeats N] [--keep] [--ours-only] [--pages table,chart,long]
       bench/run ui --pages every --ours-only [--only PAGE,...] [--data-dir DIR] [--repeats N]
                    [--ui-dir DIR] [--server-binary PATH]
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


def _table_run(args: tuple[str, int]) -> str:
    experiment_id, i = args
    run_id = _client.call("POST", "/runs/create", {"experiment_id": experiment_id,
                                                   "run_name": f"run-{i:05d}",
                                                   "start_time": TS0 + i})["run"]["info"]["run_id"]
    params, metrics = run_fields(i)
    _client.call("POST", "/runs/log-batch", {
        "run_id": run_id,
        "params": [{"key": k, "value": v} for k, v in params.items()],
        "metrics": [{"key": k, "value": v, "timestamp": TS0, "step": 0} for k, v in metrics.items()]})
    return run_id


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
            run_ids = []
            for n, run_id in enumerate(pool.map(_table_run, [(table, i) for i in range(args.runs)],
                                                chunksize=50), 1):
                run_ids.append(run_id)
                if n % 1000 == 0:
                    say(f"{server.name}: {n} of {args.runs} runs logged ({time.time() - t0:.0f} s)")
            out["table_experiment"] = table
            if EVERY in pages:
                out.update(seed_every(server, c, table, run_ids))

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


EVERY = "every"
TY = "/api/trainyard/v1"
UC = "/api/2.1/unity-catalog"
WORKLOADS = ROOT / "tests" / "workloads"


def ty(c: Client, method: str, path: str, obj=None, body: bytes | None = None, ok=(200,)) -> dict:
    """A call to a path outside MLflow's prefix (Trainyard's and Unity Catalog's APIs)."""
    status, data = c.request(method, path, body if body is not None else
                             (None if obj is None else json.dumps(obj).encode()))
    if status not in ok:
        raise RuntimeError(f"{method} {path} -> HTTP {status}: {data[:300]!r}")
    return json.loads(data) if data else {}


def seed_every(server, c: Client, table: str, run_ids: list[str]) -> dict:
    """The rest of a workspace around the experiment of --runs runs, for --pages every: a few
    small experiments, jobs (one crashing once and resuming from its checkpoints, so it has two
    attempts, logs and checkpoints), registered models whose versions come from runs of the big
    experiment (with aliases), a catalog table written by one of those runs in three versions
    (history, lineage), and a serving endpoint scaled to zero (nothing is started)."""
    t0 = time.time()
    out = {}
    # The run the detail, lineage and model pages point at; it holds an MLmodel (so a model
    # version can back an endpoint) and a small text artifact.
    run = run_ids[len(run_ids) // 2]
    model_runs = [run, *run_ids[:4]]
    for rid in model_runs:
        ty(c, "PUT", f"/api/2.0/mlflow-artifacts/artifacts/{table}/{rid}/artifacts/model/MLmodel",
           body=b"flavors:\n  python_function:\n    loader_module: mlflow.pyfunc.model\n")
    ty(c, "PUT", f"/api/2.0/mlflow-artifacts/artifacts/{table}/{run}/artifacts/notes.txt", body=b"ui bench\n")
    out.update(detail_run=run, compare_runs=run_ids[:5])

    for e in range(3):
        eid = c.call("POST", "/experiments/create", {"name": f"ui-bench-other-{e}"})["experiment_id"]
        for i in range(5):
            c.call("POST", "/runs/create", {"experiment_id": eid, "run_name": f"other-{e}-{i}", "start_time": TS0})

    # Jobs: a handful of short ones, and one that crashes at step 5 and resumes from its
    # checkpoint (tests/workloads/sdk_counter_train.py): two attempts, logs, 12 checkpoints.
    job_ids = [ty(c, "POST", f"{TY}/jobs", {"spec": {"name": f"ui-bench-job-{j}", "command": f"echo job {j}",
                                                     "priority": j % 4}})["job"]["job_id"] for j in range(10)]
    crashy = ty(c, "POST", f"{TY}/jobs", {"spec": {
        "name": "ui-bench-resumed", "command": f"{sys.executable} sdk_counter_train.py",
        "working_dir": str(WORKLOADS), "restart_backoff": "100ms",
        "env": {"PYTHONPATH": str(ROOT / "python"), "STEPS": "12", "STEP_SECONDS": "0.01",
                "CHECKPOINT_EVERY": "1", "CRASH_AT_STEP": "5", "OUT": str(server.data / "crashy.json")}}})["job"]["job_id"]
    deadline = time.monotonic() + 120
    while (state := ty(c, "GET", f"{TY}/jobs/{crashy}")["job"]["state"]) != "SUCCEEDED":
        if state in ("FAILED", "CANCELLED") or time.monotonic() > deadline:
            raise RuntimeError(f"bench job {crashy} is {state}; see {server.log_path}")
        time.sleep(0.1)  # polling the job, bounded by the deadline
    out.update(job=crashy)

    # Models: versions made from runs of the big experiment, with aliases.
    model = "ui-bench-model"
    c.call("POST", "/registered-models/create", {"name": model})
    for rid in model_runs:
        c.call("POST", "/model-versions/create", {"name": model, "source": f"runs:/{rid}/model", "run_id": rid})
    c.call("POST", "/registered-models/alias", {"name": model, "alias": "champion", "version": "1"})
    c.call("POST", "/registered-models/alias", {"name": model, "alias": "challenger", "version": "2"})
    for m in range(4):
        c.call("POST", "/registered-models/create", {"name": f"ui-bench-other-model-{m}"})
    out.update(model=model, model_version="1")

    # The catalog: a table the detail run wrote in three appends (history; lineage run -> table).
    catalog, schema = "ui_bench", "data"
    ty(c, "POST", f"{UC}/catalogs", {"name": catalog})
    ty(c, "POST", f"{UC}/schemas", {"name": schema, "catalog_name": catalog})
    tname = f"{catalog}.{schema}.events"
    for part in range(3):
        rows = "".join(json.dumps({"id": part * 100 + i, "name": f"event-{part}-{i}", "score": i * 0.5}) + "\n"
                       for i in range(100)).encode()
        version = ty(c, "POST", f"{TY}/tables/{tname}/import?format=jsonl&run_id={run}", body=rows)["version"]
    for t in range(3):
        ty(c, "POST", f"{TY}/tables/{catalog}.{schema}.side_{t}/import?format=jsonl",
           body=b'{"id": 1}\n')
    out.update(catalog=catalog, schema=schema, uc_table=tname, uc_table_version=version)

    # A serving endpoint with a 70/30 split over two versions, scaled to zero.
    endpoint = "ui-bench-endpoint"
    ty(c, "POST", f"{TY}/endpoints", {
        "name": endpoint, "min_replicas": 0,
        "served_entities": [{"name": "a", "model": model, "version": 1}, {"name": "b", "model": model, "version": 2}],
        "routes": [{"served_entity": "a", "percent": 70}, {"served_entity": "b", "percent": 30}]})
    out.update(endpoint=endpoint, lineage_object=f"run:{run}")
    say(f"{server.name}: the other pages' data seeded in {time.time() - t0:.0f} s")
    return out


# Every page of the web UI (--pages every): its name, what it shows. measure.mjs has each
# one's URL and "ready" condition.
EVERY_PAGES = {
    "experiments": "the experiments list",
    "runs": "the runs table of --runs runs (rows visible)",
    "run": "a run of that experiment: info, params, metrics, artifacts, charts on screen",
    "compare": "5 runs of it compared: the charts on screen drawn",
    "jobs": "the jobs queue and the cluster",
    "job": "a job: 2 attempts, 12 checkpoints, its log",
    "models": "the registered models",
    "model": "a model: 5 versions from runs, aliases, the alias form",
    "model-version": "a model version",
    "catalogs": "the catalogs",
    "catalog": "a catalog's schemas",
    "schema": "a schema's tables, volumes, models",
    "table": "a table: columns, preview, history, grants",
    "lineage": "the lineage graph around the run",
    "endpoints": "the serving endpoints",
    "endpoint": "an endpoint: split, replicas, request samples",
}


class SingleUserServer(OursServer):
    """Our server in single-user mode (as tests/conftest.py starts it), so that the bench's jobs
    run as this machine's user without an OS account mapped to the admin."""

    def __init__(self, workdir: Path, ui_dir: Path | None = None, binary: Path | None = None):
        self.data = workdir / "trainyard"
        self.port_file = workdir / "trainyard.port"
        self.port_file.unlink(missing_ok=True)
        self.log_path = workdir / "trainyard.log"
        ui = ["--ui-dir", str(ui_dir)] if ui_dir else []
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(binary or tracking.BINARY), "server", "--data-dir", str(self.data), "--port", "0",
                 "--port-file", str(self.port_file), "--log-level", "warn", "--single-user", *ui],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)


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


def report_every(results: dict, args, load) -> None:
    """--pages every: a table of the pages (median, best, every repeat) on stderr, one JSON
    line per page on stdout."""
    figures = []
    for name, what in EVERY_PAGES.items():
        ms = results.get(("trainyard", f"page:{name}"))
        if not ms:
            continue
        value = round(statistics.median(m["total_ms"] for m in ms))
        figures.append({"bench": f"ui_page_{name.replace('-', '_')}", "what": what.replace("--runs", str(args.runs)),
                        "value": value, "unit": "ms", "detail": spread(ms), "target": "< 1000 ms",
                        "other_load_cores": round(load.other_cores, 2)})
    print(f"{'page':15} {'median':>8} {'best':>8}  repeats (ms; navigation until ready)", file=sys.stderr)
    for fig in figures:
        d = fig["detail"]
        print(f"{fig['bench'].removeprefix('ui_page_'):15} {fig['value']:8} {d.get('total_best_ms', fig['value']):8}  "
              f"{', '.join(str(v) for v in d.get('total_all_ms', [fig['value']]))}"
              f"{'   over 1 s' if fig['value'] >= 1000 else ''}", file=sys.stderr)
    print(f"({args.runs} runs in the experiment; other work on the machine meanwhile: "
          f"{load.other_cores:.2f} cores of {os.cpu_count()})", file=sys.stderr)
    for fig in figures:
        print(json.dumps(fig))


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
                    help="which pages to time, comma-separated (table, chart, long); or 'every' "
                         "(with --ours-only): each page of the UI, around an experiment of --runs runs")
    ap.add_argument("--only", default="", help="with --pages every: just these pages, comma-separated")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--data-dir", default="", help="work in this directory and keep it; a later run with "
                    "the same sizes reuses its data instead of seeding again (for iterating; ours only)")
    ap.add_argument("--ours-only", action="store_true", help="skip MLflow")
    ap.add_argument("--ui-dir", default="", help="with --pages every: serve this build of the web UI "
                    "instead of build/web (e.g. another branch's, to time two UIs on the same data)")
    ap.add_argument("--server-binary", default="", help="with --pages every: run this trainyard binary "
                    "instead of build/trainyard (e.g. another branch's build, with --ui-dir and --data-dir)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.chart_runs, args.points, args.long_points, args.repeats = 1000, 20, 2000, 100_000, 1
    pages = [p for p in args.pages.split(",") if p]
    if pages in (["every"], ["all"]):
        if not args.ours_only:
            sys.exit("bench/ui: --pages every times our pages only; add --ours-only")
        pages = ["table", EVERY]
    elif not pages or set(pages) - {"table", "chart", "long"}:
        sys.exit(f"bench/ui: --pages takes table, chart and/or long, or every, not {args.pages!r}")
    # What is timed: the three figures, or (every) each page of the UI once per repeat.
    only = [p for p in args.only.split(",") if p]
    if set(only) - set(EVERY_PAGES):
        sys.exit(f"bench/ui: --only takes pages of {', '.join(EVERY_PAGES)}")
    timed = [f"page:{name}" for name in (only or EVERY_PAGES)] if EVERY in pages else pages
    if not (WEB / "node_modules" / "playwright-core").is_dir():
        sys.exit("bench/ui: web/node_modules lacks playwright-core; run scripts/build")
    ui_dir = Path(args.ui_dir).resolve() if args.ui_dir else None
    binary = Path(args.server_binary).resolve() if args.server_binary else None
    if (ui_dir or binary) and EVERY not in pages:
        sys.exit("bench/ui: --ui-dir and --server-binary are for --pages every")
    if binary and not binary.is_file():
        sys.exit(f"bench/ui: --server-binary {binary} is not a file")
    if not ((ui_dir or ROOT / "build" / "web") / "index.html").exists():
        sys.exit(f"bench/ui: {(ui_dir or ROOT / 'build' / 'web') / 'index.html'} is missing; "
                 "run scripts/build (needs node)")

    # A SIGTERM (timeout, Ctrl-C from a wrapper) still stops the servers and the browser.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.data_dir:
        work = Path(args.data_dir).resolve()
        work.mkdir(parents=True, exist_ok=True)
        args.keep = True
    else:
        work = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    # The seeding this directory holds already, if it was seeded with the same sizes.
    seeded_file = work / "seeded.json"
    sizes = {"runs": args.runs, "chart_runs": args.chart_runs, "points": args.points,
             "long_points": args.long_points, "pages": pages}
    seeded = json.loads(seeded_file.read_text()) if seeded_file.exists() else None
    if seeded is not None and seeded["sizes"] != sizes:
        sys.exit(f"bench/ui: {work} holds data of other sizes ({seeded['sizes']}); use another --data-dir")
    servers = [SingleUserServer(work, ui_dir, binary) if EVERY in pages else OursServer(work)]
    if not args.ours_only:
        if args.data_dir:
            sys.exit("bench/ui: --data-dir is for --ours-only runs")
        servers.append(MlflowServer(work, tracking.MLFLOW_WORKERS))
    chromium = None
    try:
        for s in servers:
            s.wait_ready()
        if seeded is not None:
            data = seeded["data"]
            say(f"reusing the data seeded in {work}")
        else:
            data = {s.name: seed(s, args, 2, pages) for s in servers}
            if args.data_dir:
                seeded_file.write_text(json.dumps({"sizes": sizes, "data": data}))
        shutil.rmtree(work / "profile", ignore_errors=True)
        (work / "profile").mkdir()
        chromium, cdp = start_chromium(work / "profile")
        top, bottom = acc_ends(args.runs)
        results: dict[tuple[str, str], list[dict]] = {}
        with LoadMeter(servers) as load:
            for rep in range(args.repeats):
                for page in timed:
                    for s in servers:
                        d = data[s.name]
                        config = {"url": f"http://127.0.0.1:{s.port}",
                                  "token": s.headers.get("Authorization", "").removeprefix("Bearer "),
                                  "runs": args.runs, "top_run": top, "bottom_run": bottom, "chart_points": args.points,
                                  "long_points": args.long_points, "timeout_ms": args.timeout * 1000, **d}
                        m = measure(cdp, s.name, page, config)
                        say(f"{s.name} {page} #{rep + 1}: {m}")
                        results.setdefault((s.name, page), []).append(m)
        if EVERY in pages:
            report_every(results, args, load)
            return
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
