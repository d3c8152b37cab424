"""The web UI end to end: the server serves the built app (headers, caching, CSP, no
traversal), the downsampling endpoint behind its charts, and the pages in a real headless
Chromium driven by playwright-core (web/tests/browser_checks.mjs): sign-in, the runs table
with MLflow filters and sorting, a chart of two runs zoomed, a link printed by the mlflow
client, the jobs and models pages.

Chromium is Debian's (scripts/install-deps), started once per test session; playwright-core
comes from web/node_modules (scripts/build). The page may reach only the server under test.
"""

import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from conftest import REPO, TrainyardServer

WEB = REPO / "web"
API = "/api/trainyard/v1"
MLFLOW = "/api/2.0/mlflow"
UC = "/api/2.1/unity-catalog"
NODE_TIMEOUT_S = 120


@pytest.fixture(scope="module", params=["sqlite"])
def backend(request) -> str:
    # The UI reads through the same APIs on either store; one backend is enough here.
    return request.param


# --- the browser: one headless Chromium for the whole session


@pytest.fixture(scope="session")
def chromium_cdp(tmp_path_factory):
    """The DevTools URL of a headless Chromium started once for the session."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: run scripts/install-deps")
    if not (WEB / "node_modules" / "playwright-core").is_dir():
        pytest.fail("web/node_modules lacks playwright-core: run scripts/build")
    profile = tmp_path_factory.mktemp("chromium-profile")
    log = open(profile.parent / "chromium.log", "wb")
    argv = [exe, "--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", "--disable-default-apps", "--no-pings",
            "--disable-dev-shm-usage",
            # No name resolves but the local server's address: nothing leaves the machine.
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"]
    if os.geteuid() == 0:
        argv.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    try:
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None:
                pytest.fail(f"chromium exited with {proc.returncode}: "
                            f"{(profile.parent / 'chromium.log').read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("chromium did not open its DevTools port within 60 s")
            time.sleep(0.05)  # polling for the port file, bounded by the deadline
        port = int(port_file.read_text().split()[0])
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def run_browser_check(scenario: str, cdp: str, server: TrainyardServer, data: dict) -> None:
    shots = Path(tempfile.mkdtemp(prefix=f"ui-{scenario}-"))
    config = {"cdp": cdp, "url": server.url, "token": server.token,
              "screenshot_dir": str(shots), **data}
    env = dict(os.environ, TRAINYARD_UI_TEST=json.dumps(config))
    r = subprocess.run(["node", str(WEB / "tests" / "browser_checks.mjs"), scenario], cwd=WEB,
                       env=env, capture_output=True, text=True, timeout=NODE_TIMEOUT_S)
    assert r.returncode == 0, (f"browser check {scenario} failed (screenshots in {shots}):\n"
                               f"{r.stdout}\n{r.stderr}")
    assert f"ok {scenario}" in r.stdout
    shutil.rmtree(shots, ignore_errors=True)


# --- data the pages show


def log_runs(s: requests.Session, server: TrainyardServer, experiment_id: str, runs: list[dict]):
    ids = []
    for run in runs:
        r = s.post(server.api(f"{MLFLOW}/runs/create"),
                   json={"experiment_id": experiment_id, "run_name": run["name"],
                         "start_time": run.get("start_time", 0)})
        assert r.status_code == 200, r.text
        run_id = r.json()["run"]["info"]["run_id"]
        params = [{"key": k, "value": v} for k, v in run["params"].items()]
        metrics = run["metrics"]
        for at in range(0, max(len(metrics), 1), 900):  # log-batch takes 1000 items at most
            r = s.post(server.api(f"{MLFLOW}/runs/log-batch"),
                       json={"run_id": run_id, "params": params if at == 0 else [],
                             "metrics": metrics[at:at + 900]})
            assert r.status_code == 200, r.text
        ids.append(run_id)
    return ids


def create_experiment(s, server, name) -> str:
    r = s.post(server.api(f"{MLFLOW}/experiments/create"), json={"name": name})
    assert r.status_code == 200, r.text
    return r.json()["experiment_id"]


@pytest.fixture(scope="module")
def ui_data(server, unique_module):
    """80 runs with params and a final loss; two runs with 5,000-step loss curves; a job; a
    registered model with an alias."""
    data = {}
    with server.session() as s:
        name = f"ui-table-{unique_module}"
        eid = create_experiment(s, server, name)
        runs = []
        for i in range(80):
            loss = round(0.05 + (i * 37 % 80) / 100.0, 4)
            runs.append({"name": f"run-{i:03d}", "start_time": 1_700_000_000_000 + i * 1000,
                         "params": {"lr": str(0.001 * (1 + i % 5)), "batch": str(8 << (i % 3))},
                         "metrics": [{"key": "final_loss", "value": loss, "timestamp": 0,
                                      "step": 0}]})
        log_runs(s, server, eid, runs)
        cut = 0.25
        kept = [r for r in runs if r["metrics"][0]["value"] < cut]
        kept.sort(key=lambda r: r["metrics"][0]["value"])
        data.update(experiment_name=name, total_runs=len(runs),
                    filter=f"metrics.final_loss < {cut}", filtered_runs=len(kept),
                    sort_metric="final_loss", filtered_min_run=kept[0]["name"],
                    filtered_max_run=kept[-1]["name"], hidden_param="lr")

        chart_eid = create_experiment(s, server, f"ui-chart-{unique_module}")
        points = 5000
        curves = []
        for name, phase in (("curve-a", 0.0), ("curve-b", 1.0)):
            metrics = [{"key": "loss", "value": 2.0 / (1 + step / 500) + 0.1 * math.sin(step / 50 + phase),
                        "timestamp": 1_700_000_000_000 + step, "step": step}
                       for step in range(points)]
            curves.append({"name": name, "params": {"phase": str(phase)}, "metrics": metrics})
        curve_ids = log_runs(s, server, chart_eid, curves)
        data.update(chart_experiment_id=chart_eid, chart_runs=["curve-a", "curve-b"],
                    chart_metric="loss", chart_points=2 * points)

        r = s.post(server.api(f"{API}/jobs"),
                   json={"spec": {"name": f"ui-job-{unique_module}",
                                  "command": "echo hello-from-the-ui-job",
                                  "priority": 3}})
        assert r.status_code == 200, r.text
        body = r.json()
        data.update(job_id=body.get("job_id") or body["job"]["job_id"],
                    job_name=f"ui-job-{unique_module}")

        # Cancelled from the UI (bounded, should the test stop before that).
        r = s.post(server.api(f"{API}/jobs"),
                   json={"spec": {"name": f"ui-long-{unique_module}", "command": "echo long-job-started; sleep 120"}})
        assert r.status_code == 200, r.text
        data.update(long_job_id=r.json()["job"]["job_id"])

        # Each curve run holds an MLmodel with the python_function flavor, so the model's
        # versions can back an endpoint (scaled to zero: nothing is started).
        for run_id in curve_ids:
            r = s.put(server.api(f"/api/2.0/mlflow-artifacts/artifacts/{chart_eid}/{run_id}"
                                 "/artifacts/model/MLmodel"),
                      data=b"flavors:\n  python_function:\n    loader_module: mlflow.pyfunc.model\n")
            assert r.status_code == 200, r.text
        data.update(curve_run_ids=curve_ids)

        model = f"ui-model-{unique_module}"
        assert s.post(server.api(f"{MLFLOW}/registered-models/create"),
                      json={"name": model}).status_code == 200
        r = s.post(server.api(f"{MLFLOW}/model-versions/create"),
                   json={"name": model, "source": f"runs:/{curve_ids[0]}/model",
                         "run_id": curve_ids[0]})
        assert r.status_code == 200, r.text
        r = s.post(server.api(f"{MLFLOW}/model-versions/create"),
                   json={"name": model, "source": f"runs:/{curve_ids[1]}/model",
                         "run_id": curve_ids[1]})
        assert r.status_code == 200, r.text
        r = s.post(server.api(f"{MLFLOW}/registered-models/alias"),
                   json={"name": model, "alias": "champion", "version": "1"})
        assert r.status_code == 200, r.text
        data.update(model_name=model, model_alias="champion")
    return data


@pytest.fixture(scope="module")
def governed_data(server, ui_data, unique_module):
    """A catalog table written by a run (lineage), with a masked column; a second user who may
    read it (and query an endpoint) but manage nothing; a served endpoint with a 70/30 split;
    a long job of the admin's that the reader may not cancel."""
    data = {}
    reader = f"ui-reader-{unique_module}"
    data["reader_token"] = server.create_user(reader)
    data["reader"] = reader
    with server.session() as s:
        catalog, schema = f"ui_{unique_module}", "support"
        for path, body in ((f"{UC}/catalogs", {"name": catalog}),
                           (f"{UC}/schemas", {"name": schema, "catalog_name": catalog})):
            r = s.post(server.api(path), json=body)
            assert r.status_code == 200, r.text
        table = f"{catalog}.{schema}.people"
        (writer_run,) = log_runs(s, server, ui_data["chart_experiment_id"],
                                 [{"name": "table-writer", "params": {}, "metrics": []}])
        rows = "".join(json.dumps(p) + "\n" for p in PEOPLE).encode()
        r = s.post(server.api(f"{API}/tables/{table}/import"), data=rows,
                   params={"format": "jsonl", "run_id": writer_run})
        assert r.status_code == 200, r.text
        version = r.json()["version"]
        r = s.put(server.api(f"{API}/tables/{table}/columns/email/mask"), json={"kind": "last4"})
        assert r.status_code == 200, r.text
        r = s.patch(server.api(f"{UC}/permissions/catalog/{catalog}"), json={
            "changes": [{"principal": reader, "add": ["USE CATALOG", "USE SCHEMA", "SELECT"]}]})
        assert r.status_code == 200, r.text
        data.update(catalog=catalog, schema=schema, table=table, table_version=version,
                    writer_run=writer_run, writer_run_name="table-writer", table_writer="admin",
                    preview_name=PEOPLE[0]["name"],
                    raw_email=PEOPLE[0]["email"],
                    masked_email="*" * (len(PEOPLE[0]["email"]) - 4) + PEOPLE[0]["email"][-4:])

        endpoint = f"ui-ep-{unique_module}"
        r = s.post(server.api(f"{API}/endpoints"), json={
            "name": endpoint, "min_replicas": 0,
            "served_entities": [{"name": "a", "model": ui_data["model_name"], "version": 1},
                                {"name": "b", "model": ui_data["model_name"], "version": 2}],
            "routes": [{"served_entity": "a", "percent": 70},
                       {"served_entity": "b", "percent": 30}]})
        assert r.status_code == 200, r.text
        r = s.post(server.api(f"{API}/endpoints/{endpoint}/permissions"),
                   json={"principal": reader, "privilege": "QUERY"})
        assert r.status_code == 200, r.text
        data["endpoint"] = endpoint

        r = s.post(server.api(f"{API}/jobs"),
                   json={"spec": {"name": f"ui-guarded-{unique_module}", "command": "sleep 300"}})
        assert r.status_code == 200, r.text
        data["guarded_job_id"] = r.json()["job"]["job_id"]
    yield data
    with server.session() as s:
        s.post(server.api(f"{API}/jobs/{data['guarded_job_id']}/cancel"), json={})
        s.delete(server.api(f"{API}/endpoints/{data['endpoint']}"))


PEOPLE = [{"id": 1, "name": "Anna Adler", "email": "anna.adler@example.eu", "score": 10},
          {"id": 2, "name": "Bill Baker", "email": "bill.baker@example.com", "score": 20}]


@pytest.fixture(scope="module")
def unique_module():
    return os.urandom(4).hex()


# --- the server's side


def test_the_ui_is_served_with_a_strict_policy_and_caching(server):
    r = requests.get(server.api("/"))
    assert r.status_code == 200, f"the UI is not built or not found: {r.text}"
    assert r.headers["Content-Type"].startswith("text/html")
    assert r.headers["Cache-Control"] == "no-cache"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    csp = r.headers["Content-Security-Policy"]
    for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'",
                      "connect-src 'self'", "object-src 'none'", "base-uri 'none'",
                      "frame-ancestors 'none'"):
        assert directive in csp, csp
    assert "unsafe" not in csp
    # The page has no inline script for the policy to block.
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", r.text), r.text
    assets = re.findall(r'(?:src|href)="(/assets/[^"]+)"', r.text)
    assert assets, r.text
    for asset in assets:
        a = requests.get(server.api(asset))
        assert a.status_code == 200, asset
        assert a.headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert a.headers["X-Content-Type-Options"] == "nosniff"
        assert a.headers["Content-Type"].startswith(("text/javascript", "text/css"))


def test_static_paths_cannot_escape_and_the_api_keeps_its_routes(server):
    # build/web is the UI's directory: build/CMakeCache.txt sits right above it.
    for path in ("/assets/../../CMakeCache.txt", "/assets/%2e%2e/%2e%2e/CMakeCache.txt",
                 "/assets/..%2f..%2fCMakeCache.txt", "/assets/%2e%2e%2f%2e%2e%2fCMakeCache.txt",
                 "/assets/nope.js", "/assets/"):
        r = requests.get(server.api(path))
        assert r.status_code == 404, (path, r.status_code)
        assert "CMAKE" not in r.text
    # The API still answers API paths, and still wants a token.
    r = requests.post(server.api(f"{MLFLOW}/experiments/search"), json={})
    assert r.status_code == 401
    r = requests.get(server.api("/api/2.0/mlflow/nothing-here"),
                     headers={"Authorization": f"Bearer {server.token}"})
    assert r.status_code == 404 and "error_code" in r.json()


def test_downsampling_keeps_peaks_and_is_exact_when_zoomed(server):
    with server.session() as s:
        eid = create_experiment(s, server, f"ds-{os.urandom(3).hex()}")
        metrics = [{"key": "loss", "value": 100.0 if step == 7777 else -50.0 if step == 2222
                    else 1.0, "timestamp": step, "step": step} for step in range(10000)]
        (run_id,) = log_runs(s, server, eid, [{"name": "r", "params": {}, "metrics": metrics}])
        url = server.api(f"{API}/metrics/downsample")
        r = s.get(url, params={"run_id": run_id, "key": "loss", "buckets": 200})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["exact"] is False and body["total_points"] == 10000
        assert len(body["steps"]) <= 400
        pairs = dict(zip(body["steps"], body["values"]))
        assert pairs.get(7777) == 100.0 and pairs.get(2222) == -50.0
        assert body["steps"] == sorted(body["steps"])
        r = s.get(url, params={"run_id": run_id, "key": "loss", "buckets": 200,
                               "min_step": 7700, "max_step": 7899})
        zoomed = r.json()
        assert zoomed["exact"] is True and zoomed["steps"] == list(range(7700, 7900))
        r = s.get(url, params={"run_id": run_id, "key": "loss", "buckets": 0})
        assert r.status_code == 400 and "buckets" in r.json()["message"]
        r = s.get(url, params={"run_id": run_id})
        assert r.status_code == 400 and "key" in r.json()["message"]
        r = s.get(url, params={"run_id": run_id, "key": "loss", "min_step": "x"})
        assert r.status_code == 400 and "min_step" in r.json()["message"]
        r = s.get(url, params={"run_id": "0" * 32, "key": "loss"})
        assert r.status_code == 404
    assert requests.get(url, params={"run_id": run_id, "key": "loss"}).status_code == 401


def test_bulk_downsampling_answers_each_run_of_a_chart_in_one_request(server):
    with server.session() as s:
        eid = create_experiment(s, server, f"dsb-{os.urandom(3).hex()}")
        long_run = [{"key": "loss", "value": 100.0 if step == 7777 else 1.0, "timestamp": step,
                     "step": step} for step in range(10000)]
        short_run = [{"key": "loss", "value": -50.0 if step == 550 else 2.0, "timestamp": step,
                      "step": step} for step in range(500, 600)]
        ids = log_runs(s, server, eid, [{"name": "long", "params": {}, "metrics": long_run},
                                        {"name": "short", "params": {}, "metrics": short_run},
                                        {"name": "none", "params": {}, "metrics": []}])
        one = server.api(f"{API}/metrics/downsample")
        url = server.api(f"{API}/metrics/downsample-bulk")
        r = s.get(url, params={"run_ids": ids, "key": "loss", "buckets": 200})
        assert r.status_code == 200, r.text
        series = r.json()["series"]
        # One history per run, in the order asked, each as the one-run route answers it.
        assert [h["run_id"] for h in series] == ids
        for run_id, h in zip(ids, series):
            alone = s.get(one, params={"run_id": run_id, "key": "loss", "buckets": 200}).json()
            assert h == alone
        long_h, short_h, none_h = series
        assert long_h["exact"] is False and long_h["total_points"] == 10000
        assert dict(zip(long_h["steps"], long_h["values"])).get(7777) == 100.0
        assert short_h["exact"] is True and short_h["steps"] == list(range(500, 600))
        assert dict(zip(short_h["steps"], short_h["values"]))[550] == -50.0
        assert none_h["steps"] == [] and none_h["total_points"] == 0
        # Zoomed: exact points of every run in the range.
        r = s.get(url, params={"run_ids": ids[:2], "key": "loss", "buckets": 200,
                               "min_step": 540, "max_step": 739})
        assert r.status_code == 200, r.text
        zl, zs = r.json()["series"]
        assert zl["exact"] is True and zl["steps"] == list(range(540, 740))
        assert zs["exact"] is True and zs["steps"] == list(range(540, 600))

        def refused(params, status=400):
            r = s.get(url, params=params)
            assert r.status_code == status, (params, r.status_code, r.text)
            return r.json()["message"]

        assert "run_ids" in refused({"key": "loss"})
        many = [f"{i:032x}" for i in range(101)]
        message = refused({"run_ids": many, "key": "loss"})
        assert "run_ids" in message and "100" in message, message
        assert "run_ids" in refused({"run_ids": [ids[0], ids[0]], "key": "loss"})
        assert "key" in refused({"run_ids": ids})
        assert "buckets" in refused({"run_ids": ids, "key": "loss", "buckets": 0})
        assert "min_step" in refused({"run_ids": ids, "key": "loss", "min_step": "x"})
        assert "min_step" in refused({"run_ids": ids, "key": "loss", "min_step": 9,
                                      "max_step": 8})
        unknown = "0" * 32
        assert unknown in refused({"run_ids": [ids[0], unknown], "key": "loss"}, 404)
    # The same authorization as the one-run route: a token, and another user reads as there.
    assert requests.get(url, params={"run_ids": ids, "key": "loss"}).status_code == 401
    with server.session(server.create_user(f"dsb-reader-{os.urandom(3).hex()}")) as other:
        alone = other.get(one, params={"run_id": ids[0], "key": "loss"})
        both = other.get(url, params={"run_ids": ids, "key": "loss"})
        assert both.status_code == alone.status_code, (alone.text, both.text)
        if alone.status_code == 200:
            assert both.json()["series"][0] == alone.json()


# --- in the browser


def test_sign_in(server, chromium_cdp, ui_data):
    run_browser_check("login", chromium_cdp, server, ui_data)


def test_runs_table_filters_sorts_and_chooses_columns(server, chromium_cdp, ui_data):
    run_browser_check("runs", chromium_cdp, server, ui_data)


def test_chart_of_two_runs_zooms_to_exact_points(server, chromium_cdp, ui_data):
    run_browser_check("chart", chromium_cdp, server, ui_data)


def test_jobs_and_models_pages_cancel_and_move_an_alias(server, chromium_cdp, ui_data):
    run_browser_check("jobs_and_models", chromium_cdp, server, ui_data)
    with server.session() as s:
        r = s.get(server.api(f"{MLFLOW}/registered-models/alias"),
                  params={"name": ui_data["model_name"], "alias": ui_data["model_alias"]})
        assert r.status_code == 200 and r.json()["model_version"]["version"] == "2", r.text
        r = s.get(server.api(f"{API}/jobs/{ui_data['long_job_id']}"))
        assert r.json()["job"]["state"] == "CANCELLED", r.text


def test_link_printed_by_mlflow_opens_the_run(server, chromium_cdp, ui_data, tmp_path):
    # The real mlflow client prints "View run ... at: <url>" when a run ends.
    script = tmp_path / "log_run.py"
    script.write_text(
        "import mlflow\n"
        "mlflow.set_experiment('ui-mlflow-link')\n"
        "with mlflow.start_run(run_name='printed') as run:\n"
        "    mlflow.log_param('optimizer', 'adamw')\n"
        "    for step in range(50):\n"
        "        mlflow.log_metric('val_loss', 1.0 / (step + 1), step=step)\n"
        "    mlflow.log_text('hello artifact', 'notes/readme.txt')\n"
        "    mlflow.log_dict({'lr': 0.001, 'layers': [1, 2]}, 'config.json')\n"
        "    mlflow.log_artifact(__file__.replace('log_run.py', 'pixel.png'))\n")
    # A 1x1 PNG, logged as an artifact the page previews as an image.
    (tmp_path / "pixel.png").write_bytes(base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="))
    env = dict(os.environ, MLFLOW_TRACKING_URI=server.url, MLFLOW_TRACKING_TOKEN=server.token)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    match = re.search(r"View run printed at: (\S+)", r.stdout)
    assert match, f"mlflow printed no run link:\n{r.stdout}"
    link = match.group(1)
    assert "/#/experiments/" in link and "/runs/" in link, link
    run_browser_check("mlflow_link", chromium_cdp, server,
                      {**ui_data, "run_link": link, "link_run_id": link.rsplit("/", 1)[1],
                       "link_param": "adamw", "link_metric": "val_loss"})


# --- the catalog, lineage and endpoint pages; actions shown disabled with the reason


def test_catalog_browser_table_page_and_its_lineage(server, chromium_cdp, ui_data, governed_data):
    run_browser_check("catalog", chromium_cdp, server, {**ui_data, **governed_data})


def test_endpoints_list_and_page(server, chromium_cdp, ui_data, governed_data):
    run_browser_check("endpoints", chromium_cdp, server, {**ui_data, **governed_data})


def test_a_reader_sees_masked_rows_and_disabled_actions(server, chromium_cdp, ui_data,
                                                        governed_data):
    run_browser_check("reader", chromium_cdp, server, {**ui_data, **governed_data})


def test_each_page_opened_by_its_address_asks_for_its_reads_at_once(server, chromium_cdp, ui_data,
                                                                   governed_data):
    # Every page's reads leave with the entry module, before React's chunk, and none is made
    # twice (a prefetch that no longer matches its page's request would be).
    run_browser_check("direct_links", chromium_cdp, server, {**ui_data, **governed_data})


def test_my_permissions_and_request_samples_routes(server, ui_data, governed_data):
    g = governed_data
    reader = {"Authorization": f"Bearer {g['reader_token']}"}
    admin = {"Authorization": f"Bearer {server.token}"}

    def actions(path, headers, **params):
        r = requests.get(server.api(path), headers=headers, params=params)
        assert r.status_code == 200, r.text
        return {a["action"]: a for a in r.json()["actions"]}

    t = actions(f"{API}/tables/{g['table']}/my-permissions", reader)
    assert t["select"]["allowed"] and t["select"]["reason"] == ""
    assert not t["modify"]["allowed"] and "MODIFY" in t["modify"]["reason"]
    assert not t["manage"]["allowed"] and t["manage"]["reason"]
    assert all(a["allowed"] for a in actions(f"{API}/tables/{g['table']}/my-permissions",
                                             admin).values())
    r = requests.get(server.api(f"{API}/tables/{g['catalog']}.nope.t/my-permissions"),
                     headers=admin)
    assert r.status_code == 404, r.text

    e = actions(f"{API}/endpoints/{g['endpoint']}/my-permissions", reader)
    assert not e["manage"]["allowed"] and "MANAGE" in e["manage"]["reason"]
    assert actions(f"{API}/endpoints/{g['endpoint']}/my-permissions", admin)["manage"]["allowed"]

    j = actions(f"{API}/jobs/{g['guarded_job_id']}/my-permissions", reader)
    assert not j["cancel"]["allowed"] and j["cancel"]["reason"]
    assert actions(f"{API}/jobs/{g['guarded_job_id']}/my-permissions", admin)["cancel"]["allowed"]

    m = actions(f"{API}/registered-models/my-permissions", reader, name=ui_data["model_name"])
    assert not m["edit"]["allowed"] and m["edit"]["reason"]
    r = requests.get(server.api(f"{API}/registered-models/my-permissions"), headers=reader)
    assert r.status_code == 400 and "name" in r.json()["message"]

    # The captured requests: managers only; a bounded limit.
    url = server.api(f"{API}/endpoints/{g['endpoint']}/requests")
    r = requests.get(url, headers=reader)
    assert r.status_code == 403 and "MANAGE" in r.json()["message"], r.text
    r = requests.get(url, headers=admin, params={"limit": 0})
    assert r.status_code == 400 and "limit" in r.json()["message"], r.text
    r = requests.get(url, headers=admin, params={"limit": 5})
    assert r.status_code == 200, r.text
    assert r.json()["requests"] == [] and r.json()["latency"]["count"] == 0
    assert requests.get(url).status_code == 401
