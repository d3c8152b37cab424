"""Metric-history endpoints beyond what the mlflow client calls, and the audit log (both backends).

- get-history-bulk-interval: the sampled history the MLflow UI's charts use.
- get-history without paging (served by the sharded, zero-copy path) equals the paged history.
- the audit log records mutating requests; only admins read it.
- `--log-format json` writes one JSON object per line.
"""

from __future__ import annotations

import json
import time

from test_auth_and_bad_input import MLFLOW, TY, error_of, ok


def make_run_with_history(s, server, name: str, points: int, key: str = "loss") -> str:
    eid = ok(s.post(server.api(f"{MLFLOW}/experiments/create"), json={"name": name}))["experiment_id"]
    run_id = ok(s.post(server.api(f"{MLFLOW}/runs/create"), json={"experiment_id": eid}))["run"]["info"]["run_id"]
    for start in range(0, points, 1000):
        metrics = [{"key": key, "value": step * 0.5, "timestamp": 1000 + step, "step": step}
                   for step in range(start, min(points, start + 1000))]
        ok(s.post(server.api(f"{MLFLOW}/runs/log-batch"), json={"run_id": run_id, "metrics": metrics}))
    return run_id


def test_bulk_interval_samples_evenly_with_first_and_last_step(server, unique):
    s = server.session()
    runs = [make_run_with_history(s, server, f"{unique}-{i}", 5000) for i in range(2)]
    body = ok(s.get(server.api(f"{MLFLOW}/metrics/get-history-bulk-interval"),
                    params={"run_ids": runs, "metric_key": "loss", "max_results": 50}))
    by_run = {}
    for m in body["metrics"]:
        assert m["key"] == "loss" and m["value"] == m["step"] * 0.5
        by_run.setdefault(m["run_id"], []).append(m["step"])
    assert set(by_run) == set(runs)
    for steps in by_run.values():
        assert len(steps) == 50 and steps == sorted(steps)
        assert steps[0] == 0 and steps[-1] == 4999
        gaps = [b - a for a, b in zip(steps, steps[1:])]
        assert max(gaps) - min(gaps) <= 1  # evenly spaced
    # A step window.
    body = ok(s.get(server.api(f"{MLFLOW}/metrics/get-history-bulk-interval"),
                    params={"run_ids": runs[0], "metric_key": "loss", "start_step": 100,
                            "end_step": 110, "max_results": 100}))
    assert [m["step"] for m in body["metrics"]] == list(range(100, 111))


def test_bulk_interval_rejects_bad_input(server, unique):
    s = server.session()
    run = make_run_with_history(s, server, unique, 10)
    url = server.api(f"{MLFLOW}/metrics/get-history-bulk-interval")
    error_of(s.get(url, params={"run_ids": run, "metric_key": "loss", "max_results": 0}), 400,
             "INVALID_PARAMETER_VALUE", "max_results")
    error_of(s.get(url, params={"run_ids": run, "metric_key": "loss", "start_step": 5,
                                "end_step": 1}), 400, "INVALID_PARAMETER_VALUE", "start_step")
    error_of(s.get(url, params={"run_ids": ["x"] * 101, "metric_key": "loss"}), 400,
             "INVALID_PARAMETER_VALUE", "run_ids")
    error_of(s.get(url, params={"run_ids": "nope", "metric_key": "loss"}), 404,
             "RESOURCE_DOES_NOT_EXIST")


def test_whole_history_equals_paged_history(server, unique):
    s = server.session()
    run = make_run_with_history(s, server, unique, 20_000)
    url = server.api(f"{MLFLOW}/metrics/get-history")
    whole = ok(s.get(url, params={"run_id": run, "metric_key": "loss"}))
    assert "next_page_token" not in whole
    paged, token = [], None
    while True:
        params = {"run_id": run, "metric_key": "loss", "max_results": 3000}
        if token:
            params["page_token"] = token
        page = ok(s.get(url, params=params))
        paged += page["metrics"]
        token = page.get("next_page_token")
        if not token:
            break
    assert whole["metrics"] == paged
    assert [m["step"] for m in paged] == list(range(20_000))
    # An unknown key of a known run is an empty history; an unknown run is a 404.
    assert ok(s.get(url, params={"run_id": run, "metric_key": "absent"}))["metrics"] == []
    error_of(s.get(url, params={"run_id": "nope", "metric_key": "loss"}), 404, "RESOURCE_DOES_NOT_EXIST")


def test_audit_log_records_mutations_for_admins_only(server, unique):
    admin = server.session()
    name = unique
    ok(admin.post(server.api(f"{MLFLOW}/experiments/create"), json={"name": name}))
    bob = server.session(server.create_user("audit-" + unique[-12:]))
    error_of(bob.post(server.api(f"{MLFLOW}/experiments/delete"), json={"experiment_id": "0"}), 403,
             "PERMISSION_DENIED")
    deadline_records = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # audit records are written in the background
        records = ok(admin.get(server.api(f"{TY}/audit"), params={"max_results": 1000}))["records"]
        paths = {(r["path"], r["status"]) for r in records}
        if (f"{MLFLOW}/experiments/create", 200) in paths and (f"{MLFLOW}/experiments/delete", 403) in paths:
            deadline_records = records
            break
        time.sleep(0.05)
    assert deadline_records is not None, "audit records did not appear"
    assert all(r["method"] != "GET" for r in deadline_records)
    error_of(bob.get(server.api(f"{TY}/audit")), 403, "PERMISSION_DENIED")


def test_json_log_format_writes_one_object_per_line(server_factory):
    srv = server_factory.new(["--log-format", "json", "--log-level", "info"])  # the last wins
    s = srv.session()
    ok(s.get(srv.api(f"{TY}/whoami")))
    srv.stop()
    # The fixture writes "--- start ..." lines of its own between server runs.
    lines = [l for l in srv.log_path.read_text().splitlines()
             if l.strip() and not l.startswith("--- ")]
    assert lines, "no log lines"
    for line in lines:
        record = json.loads(line)
        assert {"ts", "level", "msg"} <= set(record)
