"""The two routes behind the web UI's fast pages: the runs listing (/runs/list: MLflow's filter
and order_by over keyset pages of only the shown columns) against runs/search's order on the
same runs, with its bad-input answers; and a job's log as server-sent events
(/jobs/{id}/logs/stream) read with a plain HTTP client while the job runs, resumed from an
offset, ended with the job; then the jobs page following a running job's log in Chromium.

Nothing here is timed: waits are polls or reads with deadlines.
"""

import json
import time

import pytest
import requests

from test_web_ui import chromium_cdp, create_experiment, run_browser_check  # noqa: F401

API = "/api/trainyard/v1"
MLFLOW = "/api/2.0/mlflow"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def runs_experiment(server):
    """45 runs: acc with ties, NaN, infinities and gaps; params with gaps and text that sorts
    unlike numbers; equal start times (so the tie-breakers decide)."""
    with server.session() as s:
        eid = create_experiment(s, server, f"list-{time.monotonic_ns()}")
        runs = []
        for i in range(45):
            metrics = []
            if i % 9 != 4:
                value = {0: "NaN", 1: "Infinity", 2: "-Infinity"}.get(i % 11, (i * 7) % 10 / 10)
                metrics.append({"key": "acc", "value": value, "timestamp": 0, "step": 0})
            metrics.append({"key": "loss", "value": 1.0 / (i + 1), "timestamp": 0, "step": 0})
            params = {"lr": str([1, 10, 2, 0.5][i % 4])} if i % 5 else {}
            params["width"] = f"w{i % 3}"
            runs.append({"name": f"r-{i:02d}", "start_time": 1_700_000_000_000 + (i // 4) * 1000,
                         "params": params, "metrics": metrics})
        ids = []
        for run in runs:
            r = s.post(server.api(f"{MLFLOW}/runs/create"),
                       json={"experiment_id": eid, "run_name": run["name"],
                             "start_time": run["start_time"]})
            assert r.status_code == 200, r.text
            run_id = r.json()["run"]["info"]["run_id"]
            # NaN and infinities as the mlflow client sends them (protobuf JSON strings).
            body = {"run_id": run_id, "metrics": run["metrics"],
                    "params": [{"key": k, "value": v} for k, v in run["params"].items()]}
            r = s.post(server.api(f"{MLFLOW}/runs/log-batch"), data=json.dumps(body),
                       headers={"Content-Type": "application/json"})
            assert r.status_code == 200, r.text
            ids.append(run_id)
    return {"experiment_id": eid, "ids": ids}


def search_order(s, server, eid, order_by, filter_=""):
    r = s.post(server.api(f"{MLFLOW}/runs/search"),
               json={"experiment_ids": [eid], "order_by": order_by, "filter": filter_,
                     "max_results": 1000})
    assert r.status_code == 200, r.text
    return [run["info"]["run_id"] for run in r.json().get("runs", [])], r.json().get("runs", [])


def list_all(s, server, eid, order_by, filter_="", page_size=7, columns=None):
    out, cursor, first = [], None, None
    for _ in range(100):
        params = {"experiment_id": eid, "order_by": order_by, "page_size": page_size,
                  "filter": filter_}
        if columns is not None:
            params["columns"] = columns
        if cursor:
            params["cursor"] = cursor
        r = s.get(server.api(f"{API}/runs/list"), params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        first = first or page
        columns = first["columns"]  # the next pages keep the first page's columns
        assert len(page["runs"]) <= page_size
        out += page["runs"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out, first
    pytest.fail("the listing did not end")


@pytest.mark.parametrize("order_by,filter_", [
    ([], ""),
    (["metrics.acc DESC"], ""),
    (["metrics.acc ASC"], ""),
    (["params.lr DESC"], ""),
    (["params.lr"], "metrics.loss < 0.5"),
    (["attributes.run_name DESC"], ""),
    (["attributes.start_time ASC"], "params.width = 'w1'"),
    (["params.width", "metrics.acc DESC"], ""),
])
def test_runs_list_pages_in_runs_search_order(server, runs_experiment, order_by, filter_):
    eid = runs_experiment["experiment_id"]
    with server.session() as s:
        want, full = search_order(s, server, eid, order_by, filter_)
        got, first = list_all(s, server, eid, order_by, filter_)
    assert [r["run_id"] for r in got] == want
    assert first["total"] == len(want)
    assert "metric_keys" not in first  # only asked for: it reads every run's keys
    # The default columns are the first page's metrics, then its params; cells match runs/search.
    assert first["columns"] == ["metrics.acc", "metrics.loss", "params.lr", "params.width"]
    by_id = {run["info"]["run_id"]: run for run in full}
    for row in got:
        run = by_id[row["run_id"]]
        assert row["run_name"] == run["info"]["run_name"]
        metrics = {m["key"]: m["value"] for m in run["data"].get("metrics", [])}
        params = {p["key"]: p["value"] for p in run["data"].get("params", [])}
        assert row["cells"] == [metrics.get("acc"), metrics.get("loss"), params.get("lr"),
                                params.get("width")]


def test_runs_list_lists_the_experiments_keys_when_asked(server, runs_experiment):
    eid = runs_experiment["experiment_id"]
    with server.session() as s:
        r = s.get(server.api(f"{API}/runs/list"),
                  params={"experiment_id": eid, "page_size": 1, "with_keys": "true"})
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["metric_keys"] == ["acc", "loss"] and page["param_keys"] == ["lr", "width"]
    assert page["keys_truncated"] is False and len(page["runs"]) == 1


def test_runs_list_shows_only_the_columns_asked_for(server, runs_experiment):
    eid = runs_experiment["experiment_id"]
    with server.session() as s:
        rows, first = list_all(s, server, eid, ["metrics.loss ASC"], page_size=1000,
                               columns=["params.width", "metrics.loss"])
    assert first["columns"] == ["params.width", "metrics.loss"]
    assert len(rows) == 45
    losses = [r["cells"][1] for r in rows]
    assert losses == sorted(losses)
    assert all(r["cells"][0].startswith("w") for r in rows)


def test_runs_list_refuses_bad_input_naming_the_field(server, runs_experiment):
    eid = runs_experiment["experiment_id"]
    url = server.api(f"{API}/runs/list")
    with server.session() as s:
        def bad(params, field):
            r = s.get(url, params=params)
            assert r.status_code == 400, (params, r.text)
            assert field in r.json()["message"], (params, r.text)
            return r.json()["message"]

        bad({"experiment_id": eid, "filter": "metrics.acc <<< 1"}, "filter")
        bad({"experiment_id": eid, "order_by": "metrics.acc SIDEWAYS"}, "order_by")
        bad({"experiment_id": eid, "page_size": 10_000_000}, "page_size")
        bad({"experiment_id": eid, "page_size": 0}, "page_size")
        bad({"experiment_id": eid, "cursor": "not a cursor!"}, "cursor")
        bad({"experiment_id": eid, "cursor": "x" * 60_000}, "cursor")
        bad({"experiment_id": eid, "columns": "attributes.status"}, "columns[0]")
        bad({"experiment_id": "seven"}, "experiment_id")
        bad({"experiment_id": eid, "with_keys": "maybe"}, "with_keys")
        bad({}, "experiment_id")
        # A cursor belongs to its query: another filter or order cannot reuse it.
        r = s.get(url, params={"experiment_id": eid, "page_size": 5, "order_by": "metrics.acc DESC"})
        cursor = r.json()["next_cursor"]
        message = bad({"experiment_id": eid, "page_size": 5, "order_by": "metrics.acc ASC",
                       "cursor": cursor}, "cursor")
        assert "omit cursor" in message
        r = s.get(url, params={"experiment_id": eid, "page_size": 5,
                               "order_by": "metrics.acc DESC", "cursor": cursor})
        assert r.status_code == 200 and "total" not in r.json(), r.text
    # Authorization as runs/search: a token is needed, any user may read.
    assert requests.get(url, params={"experiment_id": eid}).status_code == 401
    other = server.create_user(f"reader-{time.monotonic_ns()}")
    with server.session(other) as s:
        assert s.get(url, params={"experiment_id": eid}).status_code == 200


# --- the log stream


def read_events(response, until, deadline_s=60):
    """Reads SSE events from a streaming response until `until(events)` is true or the stream
    ends; returns the events (dicts with event, data, id). Later calls go on where the last
    stopped (one line iterator per response)."""
    if not hasattr(response, "_sse_lines"):
        response._sse_lines = response.iter_lines(chunk_size=64, decode_unicode=True)
    events, block = [], {}
    deadline = time.monotonic() + deadline_s
    for raw in response._sse_lines:
        if time.monotonic() > deadline:
            pytest.fail(f"no end of the wanted events within {deadline_s}s: {events}")
        if raw:
            if raw.startswith(":"):
                continue
            name, _, value = raw.partition(":")
            block[name] = value[1:] if value.startswith(" ") else value
            continue
        if "data" in block:
            events.append({"event": block.get("event", "message"), "id": block.get("id"),
                           "data": json.loads(block["data"])})
            if until(events):
                return events
        block = {}
    return events


def text_of(events):
    return "".join(e["data"]["text"] for e in events if e["event"] == "log")


def wait_state(s, server, job_id, pred, what, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        job = s.get(server.api(f"{API}/jobs/{job_id}")).json()["job"]
        if pred(job):
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} did not reach {what}: {job}")
        time.sleep(0.05)  # polling, bounded by the deadline


def test_log_stream_follows_a_running_job_and_resumes(server, tmp_path):
    go = tmp_path / "go"
    command = (f"echo first-line; echo second-line; while [ ! -f {go} ]; do sleep 0.05; done; "
               f"echo after-go; echo last-line")
    project = f"sse-{time.monotonic_ns()}"  # only the admin is a member: others may not read
    with server.session() as s:
        r = s.post(server.api(f"{API}/projects"), json={"name": project})
        assert r.status_code == 200, r.text
        r = s.post(server.api(f"{API}/jobs"),
                   json={"spec": {"name": "sse-follow", "command": command, "project": project}})
        assert r.status_code == 200, r.text
        job_id = r.json()["job"]["job_id"]
        wait_state(s, server, job_id, lambda j: j["attempts"] >= 1, "its first attempt")
        url = server.api(f"{API}/jobs/{job_id}/logs/stream")
        with s.get(url, params={"rank": 0}, stream=True, timeout=60) as resp:
            assert resp.status_code == 200, resp.text
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = read_events(resp, lambda ev: "second-line" in text_of(ev))
            # The lines arrived while the job still runs (it waits for `go`).
            assert s.get(server.api(f"{API}/jobs/{job_id}")).json()["job"]["state"] == "RUNNING"
            assert text_of(events) == "first-line\nsecond-line\n"
            first_id = events[0]["id"]
            assert int(events[-1]["id"]) == len("first-line\nsecond-line\n")
            go.write_text("go")
            rest = read_events(resp, lambda ev: False)  # to the end of the stream
        assert text_of(rest) == "after-go\nlast-line\n"
        assert rest[-1]["event"] == "end" and rest[-1]["data"]["state"] == "SUCCEEDED", rest
        assert rest[-1]["data"]["next"] == len("first-line\nsecond-line\nafter-go\nlast-line\n")

        # Resume from an event's id (Last-Event-ID) or an offset: only what followed it.
        with s.get(url, headers={"Last-Event-ID": first_id}, stream=True, timeout=60) as resp:
            resumed = read_events(resp, lambda ev: False)
        whole = "first-line\nsecond-line\nafter-go\nlast-line\n"
        assert text_of(resumed) == whole[int(first_id):]
        assert resumed[-1]["event"] == "end"
        with s.get(url, params={"offset": len("first-line\n")}, stream=True, timeout=60) as resp:
            assert text_of(read_events(resp, lambda ev: False)) == whole[len("first-line\n"):]

        # Bad input names the field; others' logs are refused as by /logs.
        r = s.get(url, headers={"Last-Event-ID": "yesterday"})
        assert r.status_code == 400 and "Last-Event-ID" in r.json()["message"], r.text
        r = s.get(url, params={"rank": 5})
        assert r.status_code == 400 and "rank" in r.json()["message"], r.text
    stranger = server.create_user(f"stranger-{time.monotonic_ns()}")
    with server.session(stranger) as s:
        assert s.get(url).status_code == 403
        assert s.get(server.api(f"{API}/jobs/{job_id}/logs")).status_code == 403
    assert requests.get(url).status_code == 401


def test_jobs_page_follows_a_running_jobs_log(server, chromium_cdp, tmp_path):  # noqa: F811
    go = tmp_path / "go"
    command = f"echo follow-line-1; while [ ! -f {go} ]; do sleep 0.05; done; echo follow-line-2"
    with server.session() as s:
        r = s.post(server.api(f"{API}/jobs"), json={"spec": {"name": "ui-follow", "command": command}})
        assert r.status_code == 200, r.text
        job_id = r.json()["job"]["job_id"]
        wait_state(s, server, job_id, lambda j: j["state"] == "RUNNING", "RUNNING")
    run_browser_check("follow_log", chromium_cdp, server,
                      {"follow_job_id": job_id, "follow_go_file": str(go)})
    with server.session() as s:
        wait_state(s, server, job_id, lambda j: j["state"] == "SUCCEEDED", "SUCCEEDED")
