"""The unmodified `mlflow` client against a real Trainyard server, on SQLite and PostgreSQL.

All tests of this module share one server per backend; each test works in experiments and
models of its own (unique names), so the tests do not depend on each other's state.
"""

from __future__ import annotations

import contextlib
import filecmp
import math
import os
import random
import time
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag, ViewType
from mlflow.exceptions import MlflowException


@contextlib.contextmanager
def raises_mlflow(code: str, *fragments: str):
    """Expects an MlflowException with this error code whose message contains every fragment."""
    with pytest.raises(MlflowException) as info:
        yield info
    e = info.value
    assert e.error_code == code, f"error_code {e.error_code} (want {code}): {e.message}"
    for fragment in fragments:
        assert fragment.lower() in e.message.lower(), \
            f"message does not mention {fragment!r}: {e.message}"


def new_experiment(client: MlflowClient, unique: str, label: str = "exp", **kw) -> str:
    return client.create_experiment(f"{label}-{unique}", **kw)


def assert_same_tree(a: Path, b: Path) -> None:
    """Same relative file names and the same bytes in each."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), f"{rel} differs"


# --- experiments


def test_set_experiment_and_get_by_name(client, unique):
    name = f"set-exp-{unique}"
    assert mlflow.get_experiment_by_name(name) is None
    assert client.get_experiment_by_name(name) is None
    exp = mlflow.set_experiment(name)
    assert exp.name == name
    assert exp.lifecycle_stage == "active"
    assert exp.artifact_location, "an experiment needs an artifact location"
    again = mlflow.set_experiment(name)
    assert again.experiment_id == exp.experiment_id
    got = mlflow.get_experiment_by_name(name)
    assert got.experiment_id == exp.experiment_id
    assert mlflow.get_experiment(exp.experiment_id).name == name
    # Runs started without an explicit experiment land in the active one.
    with mlflow.start_run() as run:
        pass
    assert run.info.experiment_id == exp.experiment_id
    by_id = mlflow.set_experiment(experiment_id=exp.experiment_id)
    assert by_id.name == name


def test_experiment_create_rename_delete_restore(client, unique):
    name = f"lifecycle-{unique}"
    eid = client.create_experiment(name, tags={"team": "nlp", "note": "x y"})
    exp = client.get_experiment(eid)
    assert exp.name == name
    assert exp.tags["team"] == "nlp"
    assert exp.tags["note"] == "x y"

    with raises_mlflow("RESOURCE_ALREADY_EXISTS", name):
        client.create_experiment(name)

    client.rename_experiment(eid, f"{name}-renamed")
    assert client.get_experiment(eid).name == f"{name}-renamed"
    assert client.get_experiment_by_name(name) is None
    assert client.get_experiment_by_name(f"{name}-renamed").experiment_id == eid

    client.delete_experiment(eid)
    assert client.get_experiment(eid).lifecycle_stage == "deleted"
    active = client.search_experiments(filter_string=f"name = '{name}-renamed'")
    assert active == []
    deleted = client.search_experiments(view_type=ViewType.DELETED_ONLY,
                                        filter_string=f"name = '{name}-renamed'")
    assert [e.experiment_id for e in deleted] == [eid]
    # Runs cannot be created in a deleted experiment.
    with pytest.raises(MlflowException):
        client.create_run(eid)

    client.restore_experiment(eid)
    assert client.get_experiment(eid).lifecycle_stage == "active"
    assert [e.experiment_id for e in
            client.search_experiments(filter_string=f"name = '{name}-renamed'")] == [eid]

    with raises_mlflow("RESOURCE_DOES_NOT_EXIST"):
        client.get_experiment("987654321")


def test_experiment_tags(client, unique):
    eid = new_experiment(client, unique, "tags")
    client.set_experiment_tag(eid, "stage", "dev")
    client.set_experiment_tag(eid, "unicode", "данные ✓")
    mlflow.set_experiment(experiment_id=eid)
    mlflow.set_experiment_tags({"a": "1", "b": "2"})
    tags = client.get_experiment(eid).tags
    assert tags["stage"] == "dev"
    assert tags["unicode"] == "данные ✓"
    assert tags["a"] == "1" and tags["b"] == "2"
    client.set_experiment_tag(eid, "stage", "prod")  # overwrite
    client.delete_experiment_tag(eid, "a")
    tags = client.get_experiment(eid).tags
    assert tags["stage"] == "prod"
    assert "a" not in tags


def test_search_experiments_filter_order_paging(client, unique):
    prefix = f"search-{unique}"
    ids = {}
    for i in range(7):
        ids[i] = client.create_experiment(f"{prefix}-{i}",
                                          tags={"parity": "even" if i % 2 == 0 else "odd"})

    found = client.search_experiments(filter_string=f"name LIKE '{prefix}-%'",
                                      order_by=["name DESC"])
    assert [e.name for e in found] == [f"{prefix}-{i}" for i in reversed(range(7))]

    even = client.search_experiments(
        filter_string=f"name LIKE '{prefix}%' AND tags.parity = 'even'", order_by=["name ASC"])
    assert [e.name for e in even] == [f"{prefix}-{i}" for i in (0, 2, 4, 6)]

    upper = client.search_experiments(filter_string=f"name ILIKE '{prefix.upper()}-%'")
    assert len(upper) == 7

    pages, token = [], None
    while True:
        page = client.search_experiments(filter_string=f"name LIKE '{prefix}-%'",
                                         order_by=["name ASC"], max_results=3, page_token=token)
        pages.append([e.name for e in page])
        token = page.token
        if not token:
            break
    assert [len(p) for p in pages] == [3, 3, 1]
    assert sum(pages, []) == [f"{prefix}-{i}" for i in range(7)]

    by_time = client.search_experiments(filter_string=f"name LIKE '{prefix}-%'",
                                        order_by=["creation_time ASC", "name ASC"])
    times = [e.creation_time for e in by_time]
    assert times == sorted(times)

    # The fluent API and the pandas-free view.
    assert len(mlflow.search_experiments(filter_string=f"name LIKE '{prefix}-%'",
                                         max_results=5)) == 5


# --- runs


def test_run_status_and_name(client, unique):
    eid = new_experiment(client, unique, "status")
    mlflow.set_experiment(experiment_id=eid)
    run = mlflow.start_run(run_name="first-run")
    rid = run.info.run_id
    assert run.info.status == "RUNNING"
    assert client.get_run(rid).info.status == "RUNNING"
    assert client.get_run(rid).info.run_name == "first-run"
    assert client.get_run(rid).data.tags["mlflow.runName"] == "first-run"
    mlflow.end_run()
    info = client.get_run(rid).info
    assert info.status == "FINISHED"
    assert info.end_time and info.end_time >= info.start_time

    with mlflow.start_run() as failed:
        pass
    mlflow.end_run()  # no active run any more; a no-op
    client.set_terminated(failed.info.run_id, status="FAILED")
    assert client.get_run(failed.info.run_id).info.status == "FAILED"

    killed = client.create_run(eid, run_name="to-kill")
    client.set_terminated(killed.info.run_id, "KILLED")
    assert client.get_run(killed.info.run_id).info.status == "KILLED"

    # A run with an exception inside `with` ends FAILED.
    with pytest.raises(RuntimeError):
        with mlflow.start_run(run_name="crashes") as crashing:
            raise RuntimeError("boom")
    assert client.get_run(crashing.info.run_id).info.status == "FAILED"

    # Renaming updates both the attribute and the tag.
    client.update_run(rid, name="renamed-run")
    got = client.get_run(rid)
    assert got.info.run_name == "renamed-run"
    assert got.data.tags["mlflow.runName"] == "renamed-run"

    # A generated name when none is given.
    auto = client.create_run(eid)
    assert auto.info.run_name

    with raises_mlflow("RESOURCE_DOES_NOT_EXIST"):
        client.get_run("0" * 32)


def test_nested_runs(client, unique):
    eid = new_experiment(client, unique, "nested")
    mlflow.set_experiment(experiment_id=eid)
    with mlflow.start_run(run_name="parent") as parent:
        with mlflow.start_run(run_name="child-1", nested=True) as c1:
            with mlflow.start_run(run_name="grandchild", nested=True) as gc:
                assert mlflow.active_run().info.run_id == gc.info.run_id
            assert mlflow.active_run().info.run_id == c1.info.run_id
        with mlflow.start_run(run_name="child-2", nested=True) as c2:
            pass
        assert mlflow.active_run().info.run_id == parent.info.run_id
    assert mlflow.active_run() is None
    pid = parent.info.run_id
    assert client.get_run(c1.info.run_id).data.tags["mlflow.parentRunId"] == pid
    assert client.get_run(gc.info.run_id).data.tags["mlflow.parentRunId"] == c1.info.run_id
    children = client.search_runs([eid], f"tags.mlflow.parentRunId = '{pid}'",
                                  order_by=["attributes.run_name ASC"])
    assert [r.info.run_name for r in children] == ["child-1", "child-2"]
    assert {r.info.run_id for r in children} == {c1.info.run_id, c2.info.run_id}
    for r in (parent, c1, c2, gc):
        assert client.get_run(r.info.run_id).info.status == "FINISHED"


def test_params(client, unique):
    eid = new_experiment(client, unique, "params")
    mlflow.set_experiment(experiment_id=eid)
    with mlflow.start_run() as run:
        mlflow.log_param("lr", 0.001)
        mlflow.log_params({"batch_size": 32, "optimizer": "adam", "empty": "",
                           "unicode": "λ=ü", "nested": {"a": [1, 2]}})
        mlflow.log_param("lr", 0.001)  # the same value again is fine
        with raises_mlflow("INVALID_PARAMETER_VALUE", "lr"):
            mlflow.log_param("lr", 0.01)
        with raises_mlflow("INVALID_PARAMETER_VALUE"):
            mlflow.log_params({"optimizer": "sgd"})
    params = client.get_run(run.info.run_id).data.params
    assert params == {"lr": "0.001", "batch_size": "32", "optimizer": "adam", "empty": "",
                      "unicode": "λ=ü", "nested": "{'a': [1, 2]}"}
    # A long (but allowed) value round-trips exactly.
    with mlflow.start_run() as run2:
        long_value = "x" * 6000
        mlflow.log_param("long", long_value)
    assert client.get_run(run2.info.run_id).data.params["long"] == long_value


def test_metrics_steps_and_timestamps(client, unique):
    eid = new_experiment(client, unique, "metrics")
    mlflow.set_experiment(experiment_id=eid)
    t0 = 1_700_000_000_000
    with mlflow.start_run() as run:
        for step in range(5):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step, timestamp=t0 + step * 1000)
        mlflow.log_metrics({"acc": 0.5, "f1": 0.25}, step=7, timestamp=t0)
        mlflow.log_metrics({"acc": 0.75}, step=8)
        mlflow.log_metric("neg", -3.5e-12)
        mlflow.log_metric("big", 1.7976931348623157e308)
        mlflow.log_metric("int_valued", 42)
    rid = run.info.run_id
    hist = client.get_metric_history(rid, "loss")
    assert [m.step for m in hist] == [0, 1, 2, 3, 4]
    assert [m.value for m in hist] == [1.0 / (s + 1) for s in range(5)]
    assert [m.timestamp for m in hist] == [t0 + s * 1000 for s in range(5)]
    metrics = client.get_run(rid).data.metrics
    assert metrics["loss"] == 0.2  # the latest is the one with the largest step
    assert metrics["acc"] == 0.75
    assert metrics["f1"] == 0.25
    assert metrics["neg"] == -3.5e-12
    assert metrics["big"] == 1.7976931348623157e308
    assert metrics["int_valued"] == 42.0
    acc = client.get_metric_history(rid, "acc")
    assert [(m.step, m.value) for m in acc] == [(7, 0.5), (8, 0.75)]
    assert acc[0].timestamp == t0
    assert client.get_metric_history(rid, "no-such-metric") == []

    # Out-of-order logging: the latest value is still that of the largest step.
    with mlflow.start_run() as r2:
        mlflow.log_metric("m", 10.0, step=10, timestamp=t0 + 10)
        mlflow.log_metric("m", 3.0, step=3, timestamp=t0 + 20)
        mlflow.log_metric("m", 11.0, step=10, timestamp=t0 + 30)  # same step, later time
    assert client.get_run(r2.info.run_id).data.metrics["m"] == 11.0
    assert sorted((m.step, m.value) for m in client.get_metric_history(r2.info.run_id, "m")) == \
        [(3, 3.0), (10, 10.0), (10, 11.0)]


def test_metric_values_are_bit_exact(client, unique):
    """Every double comes back as the same double (shortest round-trip repr both ways)."""
    eid = new_experiment(client, unique, "exact")
    rid = client.create_run(eid).info.run_id
    values = [990.5011037662389, -998.4187779792749, 992.6073556948703, 0.1 + 0.2,
              1 / 3, 2.718281828459045, 1e-300, 123456789.12345679, 9007199254740993.0]
    client.log_metric(rid, "single", values[0], step=0)
    client.log_batch(rid, metrics=[Metric("batch", v, 0, i) for i, v in enumerate(values)])
    assert [m.value for m in client.get_metric_history(rid, "single")] == [values[0]]
    got = sorted(client.get_metric_history(rid, "batch"), key=lambda m: m.step)
    assert [m.value for m in got] == values
    assert client.get_run(rid).data.metrics["single"] == values[0]


def test_nan_and_infinity_round_trip(client, unique):
    eid = new_experiment(client, unique, "nan")
    rid = client.create_run(eid).info.run_id
    values = [math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324]
    for step, v in enumerate(values):
        client.log_metric(rid, "weird", v, step=step)
    client.log_batch(rid, metrics=[Metric("batch_nan", math.nan, 1, 0),
                                   Metric("batch_inf", math.inf, 1, 0),
                                   Metric("batch_ninf", -math.inf, 1, 0)])
    hist = client.get_metric_history(rid, "weird")
    got = [m.value for m in sorted(hist, key=lambda m: m.step)]
    assert math.isnan(got[0])
    assert got[1] == math.inf
    assert got[2] == -math.inf
    assert got[3] == 0.0 and got[4] == 0.0
    assert got[5] == 5e-324
    metrics = client.get_run(rid).data.metrics
    assert math.isnan(metrics["batch_nan"])
    assert metrics["batch_inf"] == math.inf
    assert metrics["batch_ninf"] == -math.inf
    assert metrics["weird"] == 5e-324  # the largest step's value


def test_log_batch_and_its_limits(client, unique):
    eid = new_experiment(client, unique, "batch")
    rid = client.create_run(eid).info.run_id
    t = 1_700_000_000_000
    client.log_batch(
        rid,
        metrics=[Metric("m", float(i), t + i, i) for i in range(1000)],
        params=[Param(f"p{i}", str(i)) for i in range(100)],
        tags=[RunTag(f"t{i}", f"v{i}") for i in range(100)],
    )
    run = client.get_run(rid)
    assert run.data.metrics["m"] == 999.0
    assert len(run.data.params) == 100
    assert run.data.tags["t99"] == "v99"
    assert len(client.get_metric_history(rid, "m")) == 1000

    # MlflowClient.log_batch splits large inputs itself; its REST store sends them as given,
    # so the server's own limits are what is tested here.
    store = client._tracking_client.store
    with raises_mlflow("INVALID_PARAMETER_VALUE", "1000", "metrics"):
        store.log_batch(rid, metrics=[Metric("over", float(i), t, i) for i in range(1001)],
                        params=[], tags=[])
    with raises_mlflow("INVALID_PARAMETER_VALUE", "100", "params"):
        store.log_batch(rid, metrics=[], params=[Param(f"q{i}", "v") for i in range(101)],
                        tags=[])
    with raises_mlflow("INVALID_PARAMETER_VALUE", "100", "tags"):
        store.log_batch(rid, metrics=[], params=[],
                        tags=[RunTag(f"u{i}", "v") for i in range(101)])
    with raises_mlflow("INVALID_PARAMETER_VALUE", "1000"):
        store.log_batch(rid, metrics=[Metric("over", float(i), t, i) for i in range(1000)],
                        params=[Param("q0", "v")], tags=[])
    # A rejected batch leaves nothing behind.
    assert client.get_metric_history(rid, "over") == []
    assert "q0" not in client.get_run(rid).data.params

    # A batch that re-logs a param with a different value fails as a whole.
    with raises_mlflow("INVALID_PARAMETER_VALUE", "p0"):
        client.log_batch(rid, metrics=[Metric("atomic", 1.0, t, 0)],
                         params=[Param("p0", "changed")])
    assert client.get_run(rid).data.params["p0"] == "0"

    # The client and the fluent helpers split large inputs into allowed batches.
    client.log_batch(rid, metrics=[Metric("split", float(i), t, i) for i in range(2500)])
    assert len(client.get_metric_history(rid, "split")) == 2500
    with mlflow.start_run(run_id=rid):
        mlflow.log_metrics({f"k{i}": float(i) for i in range(1500)})
        mlflow.log_params({f"big{i}": i for i in range(250)})
    run = client.get_run(rid)
    assert run.data.metrics["k1499"] == 1499.0
    assert run.data.params["big249"] == "249"


def test_tags_set_and_delete(client, unique):
    eid = new_experiment(client, unique, "runtags")
    mlflow.set_experiment(experiment_id=eid)
    with mlflow.start_run() as run:
        mlflow.set_tag("team", "vision")
        mlflow.set_tags({"a": "1", "b": "2", "long": "v" * 5000})
        mlflow.set_tag("team", "nlp")  # tags may be overwritten
        mlflow.delete_tag("a")
    rid = run.info.run_id
    tags = client.get_run(rid).data.tags
    assert tags["team"] == "nlp"
    assert tags["b"] == "2"
    assert tags["long"] == "v" * 5000
    assert "a" not in tags
    with raises_mlflow("RESOURCE_DOES_NOT_EXIST", "a"):
        client.delete_tag(rid, "a")
    client.set_tag(rid, "after-end", "ok")  # a finished run still takes tags
    assert client.get_run(rid).data.tags["after-end"] == "ok"


def test_delete_and_restore_run(client, unique):
    eid = new_experiment(client, unique, "delrun")
    keep = client.create_run(eid).info.run_id
    gone = client.create_run(eid).info.run_id
    client.delete_run(gone)
    assert client.get_run(gone).info.lifecycle_stage == "deleted"
    assert [r.info.run_id for r in client.search_runs([eid])] == [keep]
    assert {r.info.run_id for r in client.search_runs([eid], run_view_type=ViewType.ALL)} == \
        {keep, gone}
    assert [r.info.run_id for r in
            client.search_runs([eid], run_view_type=ViewType.DELETED_ONLY)] == [gone]
    client.restore_run(gone)
    assert client.get_run(gone).info.lifecycle_stage == "active"
    assert len(client.search_runs([eid])) == 2


def test_concurrent_writers_race_cleanly(mlflow_env, unique):
    """Simultaneous creates and conflicting writes: one winner, clean 4xx for the rest."""
    from concurrent.futures import ThreadPoolExecutor

    server = mlflow_env
    api = server.api("/api/2.0/mlflow")

    def burst(n, fn):
        def call(i):
            with server.session() as s:
                return fn(s, i)
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(call, range(n)))

    def codes(responses):
        return sorted((r.status_code, r.json().get("error_code")) for r in responses)

    name = f"race-{unique}"
    rs = burst(12, lambda s, i: s.post(f"{api}/experiments/create", json={"name": name}))
    assert codes(rs) == [(200, None)] + [(400, "RESOURCE_ALREADY_EXISTS")] * 11
    eid = next(r.json()["experiment_id"] for r in rs if r.status_code == 200)
    with server.session() as s:
        rid = s.post(f"{api}/runs/create", json={"experiment_id": eid}).json()["run"]["info"][
            "run_id"]
    rs = burst(12, lambda s, i: s.post(f"{api}/runs/log-parameter",
                                       json={"run_id": rid, "key": "p", "value": str(i)}))
    assert codes(rs) == [(200, None)] + [(400, "INVALID_PARAMETER_VALUE")] * 11
    winner = [i for i, r in enumerate(rs) if r.status_code == 200][0]
    assert MlflowClient().get_run(rid).data.params["p"] == str(winner)

    model = f"race-model-{unique}"
    rs = burst(8, lambda s, i: s.post(f"{api}/registered-models/create", json={"name": model}))
    assert codes(rs) == [(200, None)] + [(400, "RESOURCE_ALREADY_EXISTS")] * 7
    rs = burst(16, lambda s, i: s.post(f"{api}/model-versions/create",
                                       json={"name": model, "source": f"runs:/{rid}/m{i}",
                                             "run_id": rid}))
    assert codes(rs) == [(200, None)] * 16
    versions = sorted(int(r.json()["model_version"]["version"]) for r in rs)
    assert versions == list(range(1, 17)), "model version numbers must be unique and dense"


# --- artifacts


def make_tree(root: Path) -> Path:
    """A nested directory with text, empty, binary and oddly named files."""
    rng = random.Random(1234)
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "top.txt").write_text("top level\n")
    (root / "empty.bin").write_bytes(b"")
    (root / "sub" / "all_bytes.bin").write_bytes(bytes(range(256)) * 64)
    (root / "sub" / "deeper" / "random.bin").write_bytes(rng.randbytes(300_000))
    (root / "sub" / "deeper" / "data.json").write_text('{"a": [1, 2, 3]}')
    (root / "sub" / "with space & ü.txt").write_text("odd name\n")
    return root


def test_artifact_file_upload_and_download(client, unique, tmp_path):
    eid = new_experiment(client, unique, "artfile")
    mlflow.set_experiment(experiment_id=eid)
    src = tmp_path / "model.txt"
    src.write_text("weights v1\n")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) + b"\x00\r\n\xff" * 1000 + os.urandom(100_000))
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(src))
        mlflow.log_artifact(str(src), artifact_path="copies")
        mlflow.log_artifact(str(binary), artifact_path="bin")
    rid = run.info.run_id

    root = {f.path: f for f in client.list_artifacts(rid)}
    assert set(root) == {"model.txt", "copies", "bin"}
    assert root["copies"].is_dir and root["bin"].is_dir
    assert not root["model.txt"].is_dir
    assert root["model.txt"].file_size == len("weights v1\n")
    assert [(f.path, f.file_size) for f in client.list_artifacts(rid, "bin")] == \
        [("bin/blob.bin", binary.stat().st_size)]

    out = tmp_path / "out1"
    out.mkdir()
    local = client.download_artifacts(rid, "model.txt", str(out))
    assert Path(local).read_text() == "weights v1\n"
    local = mlflow.artifacts.download_artifacts(run_id=rid, artifact_path="bin/blob.bin",
                                                dst_path=str(tmp_path / "out2"))
    assert Path(local).read_bytes() == binary.read_bytes()
    local = mlflow.artifacts.download_artifacts(f"runs:/{rid}/copies/model.txt",
                                                dst_path=str(tmp_path / "out3"))
    assert filecmp.cmp(local, src, shallow=False)
    # The run's artifact URI works directly too.
    local = mlflow.artifacts.download_artifacts(f"{run.info.artifact_uri}/bin/blob.bin",
                                                dst_path=str(tmp_path / "out4"))
    assert Path(local).read_bytes() == binary.read_bytes()

    with pytest.raises(Exception):
        client.download_artifacts(rid, "does/not/exist.txt", str(tmp_path / "out5"))


def test_artifact_directory_upload_and_download(client, unique, tmp_path):
    eid = new_experiment(client, unique, "artdir")
    mlflow.set_experiment(experiment_id=eid)
    tree = make_tree(tmp_path / "tree")
    with mlflow.start_run() as run:
        mlflow.log_artifacts(str(tree), artifact_path="outputs")
        mlflow.log_artifacts(str(tree))  # at the root, too
    rid = run.info.run_id

    listing = {f.path: f for f in client.list_artifacts(rid, "outputs")}
    assert set(listing) == {"outputs/top.txt", "outputs/empty.bin", "outputs/sub"}
    assert listing["outputs/sub"].is_dir
    assert listing["outputs/empty.bin"].file_size == 0
    sub = {f.path for f in client.list_artifacts(rid, "outputs/sub")}
    assert sub == {"outputs/sub/all_bytes.bin", "outputs/sub/deeper",
                   "outputs/sub/with space & ü.txt"}
    assert {f.path for f in mlflow.artifacts.list_artifacts(run_id=rid,
                                                            artifact_path="outputs/sub/deeper")} \
        == {"outputs/sub/deeper/random.bin", "outputs/sub/deeper/data.json"}

    local = client.download_artifacts(rid, "outputs", str(tmp_path / "dl1"))
    assert_same_tree(tree, Path(local))
    local = mlflow.artifacts.download_artifacts(run_id=rid, artifact_path="outputs/sub",
                                                dst_path=str(tmp_path / "dl2"))
    assert_same_tree(tree / "sub", Path(local))
    whole = mlflow.artifacts.download_artifacts(run_id=rid, dst_path=str(tmp_path / "dl3"))
    assert_same_tree(tree, Path(whole) / "outputs")
    assert (Path(whole) / "sub" / "with space & ü.txt").read_text() == "odd name\n"


def test_large_artifact_over_the_request_body_limit(client, unique, tmp_path):
    """Artifact uploads stream to disk: the 16 MiB JSON body limit does not apply to them."""
    eid = new_experiment(client, unique, "bigart")
    big = tmp_path / "weights.bin"
    big.write_bytes(os.urandom(40 << 20))
    rid = client.create_run(eid).info.run_id
    client.log_artifact(rid, str(big), artifact_path="ckpt")
    assert [(f.path, f.file_size) for f in client.list_artifacts(rid, "ckpt")] == \
        [("ckpt/weights.bin", 40 << 20)]
    local = client.download_artifacts(rid, "ckpt/weights.bin", str(tmp_path / "dl"))
    assert filecmp.cmp(local, big, shallow=False)


def test_log_text_and_log_dict(client, unique):
    eid = new_experiment(client, unique, "text")
    mlflow.set_experiment(experiment_id=eid)
    payload = {"lr": 0.1, "layers": [1, 2, 3], "name": "ü ✓"}
    with mlflow.start_run() as run:
        mlflow.log_text("line 1\nλine 2\n", "notes/readme.txt")
        mlflow.log_dict(payload, "config/params.json")
        mlflow.log_dict(payload, "config/params.yaml")
    rid = run.info.run_id
    base = run.info.artifact_uri
    assert mlflow.artifacts.load_text(f"{base}/notes/readme.txt") == "line 1\nλine 2\n"
    assert mlflow.artifacts.load_dict(f"{base}/config/params.json") == payload
    import yaml  # mlflow's own dependency; load_dict reads JSON only

    assert yaml.safe_load(mlflow.artifacts.load_text(f"{base}/config/params.yaml")) == payload
    assert {f.path for f in client.list_artifacts(rid, "config")} == \
        {"config/params.json", "config/params.yaml"}


# --- search_runs


@pytest.fixture(scope="module")
def search_fixture(server):
    """An experiment with twelve runs of known metrics, params, tags, statuses and names."""
    import uuid

    client = MlflowClient(tracking_uri=server.url)
    with pytest.MonkeyPatch.context() as mp:
        # MlflowClient reads the token from the environment at request time.
        mp.setenv("MLFLOW_TRACKING_TOKEN", server.token)
        eid = client.create_experiment(f"search-runs-{uuid.uuid4().hex[:8]}")
        runs = {}
        for i in range(12):
            name = f"{'alpha' if i < 6 else 'beta'}-{i:02d}"
            r = client.create_run(eid, run_name=name, start_time=1_700_000_000_000 + i * 1000)
            rid = r.info.run_id
            client.log_batch(
                rid,
                metrics=[Metric("acc", i / 10, 0, 0)] + (
                    [Metric("loss", 10.0 - i, 0, 0)] if i % 3 else []),
                params=[Param("lr", "0.01" if i % 2 else "0.1"),
                        Param("opt", ["adam", "sgd", "rmsprop"][i % 3])],
                tags=[RunTag("team", "Vision" if i < 4 else "nlp"),
                      RunTag("idx", str(i))],
            )
            status = ["FINISHED", "FAILED", "KILLED", "RUNNING"][i % 4]
            if status != "RUNNING":
                client.set_terminated(rid, status, end_time=1_700_000_000_000 + i * 1000 + 500)
            runs[i] = rid
    return eid, runs


def idx_of(runs_found, runs):
    by_id = {v: k for k, v in runs.items()}
    return [by_id[r.info.run_id] for r in runs_found]


@pytest.mark.parametrize("filter_string, expected", [
    ("metrics.acc > 0.5", {6, 7, 8, 9, 10, 11}),
    ("metrics.acc >= 0.5 AND metrics.acc < 0.8", {5, 6, 7}),
    ("metrics.acc = 0.3", {3}),
    ("metrics.acc != 0.3 AND metrics.acc <= 0.2", {0, 1, 2}),
    ("metrics.loss < 3", {8, 10, 11}),  # runs without loss never match
    ("params.lr = '0.1'", {0, 2, 4, 6, 8, 10}),
    ("params.lr != '0.1'", {1, 3, 5, 7, 9, 11}),
    ("params.opt = 'adam' and params.lr = '0.1'", {0, 6}),
    ("params.opt LIKE 'rms%'", {2, 5, 8, 11}),
    ("params.opt ILIKE '%SG%'", {1, 4, 7, 10}),
    ("params.missing IS NULL", set(range(12))),
    ("params.opt IS NOT NULL AND metrics.acc < 0.2", {0, 1}),
    ("tags.team = 'Vision'", {0, 1, 2, 3}),
    ("tags.team LIKE 'vis%'", set()),  # LIKE is case-sensitive
    ("tags.team ILIKE 'vis%'", {0, 1, 2, 3}),
    ("tags.`team` = 'nlp' AND tags.idx = '11'", {11}),
    # IN on params and tags: a Trainyard extension (MLflow allows lists for run_id only).
    ("params.opt IN ('adam', 'sgd')", {0, 1, 3, 4, 6, 7, 9, 10}),
    ("tags.team NOT IN ('nlp') AND params.lr = '0.1'", {0, 2}),
    ("attributes.run_name = 'beta-07'", {7}),
    ("run_name LIKE 'alpha-%'", {0, 1, 2, 3, 4, 5}),
    ("attributes.run_name ILIKE 'BETA-1%'", {10, 11}),
    ("attributes.status = 'FAILED'", {1, 5, 9}),
    ("attributes.status != 'FAILED' AND attributes.status != 'FINISHED'", {2, 3, 6, 7, 10, 11}),
    ("attributes.status != 'FINISHED' AND tags.team = 'Vision'", {1, 2, 3}),
    ("attributes.start_time >= 1700000009000", {9, 10, 11}),
    ("attributes.end_time < 1700000003000", {0, 1, 2}),
    ("metrics.`acc` > 0.95", {10, 11}),
    ("metrics.acc > 5", set()),
])
def test_search_runs_filters(search_fixture, client, filter_string, expected):
    eid, runs = search_fixture
    found = client.search_runs([eid], filter_string)
    assert set(idx_of(found, runs)) == set(expected), filter_string
    assert len(found) == len(set(expected))


def test_search_runs_by_run_id_in(search_fixture, client):
    eid, runs = search_fixture
    found = client.search_runs([eid], f"attributes.run_id IN ('{runs[3]}', '{runs[8]}')")
    assert set(idx_of(found, runs)) == {3, 8}
    pdf = mlflow.search_runs([eid], filter_string=f"attributes.run_id = '{runs[5]}'")
    assert list(pdf["run_id"]) == [runs[5]]
    assert list(pdf["params.opt"]) == ["rmsprop"]
    assert list(pdf["metrics.acc"]) == [0.5]


@pytest.mark.parametrize("filter_string", [
    # As in MLflow, only run_id takes a list.
    "run_name IN ('alpha-01', 'beta-09')",
    "attributes.status NOT IN ('FAILED')",
    # Wrong operators for the key type.
    "metrics.acc LIKE '0.1'",
    "params.lr > '0.1'",
    # Not a filter at all.
    "metrics.acc >",
    "acc > 0.5",
    "params.lr = 0.1",  # a param is a string; an unquoted number is rejected
])
def test_search_runs_rejects_invalid_filters(search_fixture, client, filter_string):
    eid, _ = search_fixture
    with raises_mlflow("INVALID_PARAMETER_VALUE"):
        client.search_runs([eid], filter_string)


def test_search_runs_order_by(search_fixture, client):
    eid, runs = search_fixture
    by_acc = client.search_runs([eid], order_by=["metrics.acc DESC"])
    assert idx_of(by_acc, runs) == list(reversed(range(12)))
    by_loss = client.search_runs([eid], order_by=["metrics.loss ASC"])
    with_loss = [i for i in range(12) if i % 3]
    # Runs without the metric come last.
    assert idx_of(by_loss, runs)[: len(with_loss)] == sorted(with_loss, key=lambda i: 10 - i)
    assert set(idx_of(by_loss, runs)[len(with_loss):]) == {0, 3, 6, 9}
    by_start = client.search_runs([eid], order_by=["attributes.start_time ASC"])
    assert idx_of(by_start, runs) == list(range(12))
    by_start_desc = client.search_runs([eid], order_by=["start_time DESC"])
    assert idx_of(by_start_desc, runs) == list(reversed(range(12)))
    by_name = client.search_runs([eid], "params.lr = '0.1'",
                                 order_by=["params.opt ASC", "attributes.run_name DESC"])
    assert idx_of(by_name, runs) == [6, 0, 8, 2, 10, 4]
    top3 = client.search_runs([eid], order_by=["metrics.acc DESC"], max_results=3)
    assert idx_of(top3, runs) == [11, 10, 9]


def test_search_runs_paging_250(client, unique):
    eid = new_experiment(client, unique, "paging")
    created = set()
    for i in range(250):
        created.add(client.create_run(eid, start_time=1_700_000_000_000 + (i % 7)).info.run_id)
    for order_by in (None, ["attributes.start_time DESC"]):
        seen, token, pages = [], None, 0
        while True:
            page = client.search_runs([eid], max_results=100, page_token=token, order_by=order_by)
            pages += 1
            assert len(page) == (100 if pages < 3 else 50)
            seen += [r.info.run_id for r in page]
            token = page.token
            if not token:
                break
            assert pages < 10, "paging does not end"
        assert pages == 3
        assert len(seen) == len(set(seen)) == 250, "duplicates across pages"
        assert set(seen) == created, "runs missing from the pages"
    # The fluent API pages internally.
    assert len(mlflow.search_runs([eid], max_results=1000)) == 250


# --- metric history


def test_metric_history_100k_points(client, unique):
    eid = new_experiment(client, unique, "history")
    rid = client.create_run(eid).info.run_id
    n, t0 = 100_000, 1_700_000_000_000

    def value(i: int) -> float:
        return math.sin(i) * 1e3 + i / 7.0

    for start in range(0, n, 1000):
        client.log_batch(rid, metrics=[Metric("loss", value(i), t0 + i, i)
                                       for i in range(start, start + 1000)])
    started = time.monotonic()
    hist = client.get_metric_history(rid, "loss")
    elapsed = time.monotonic() - started
    assert len(hist) == n
    assert elapsed < 30, f"get_metric_history of {n} points took {elapsed:.1f}s"
    assert [m.step for m in hist] == list(range(n))
    assert [m.timestamp for m in hist] == [t0 + i for i in range(n)]
    assert [m.key for m in hist[:1]] == ["loss"]
    # Values must come back bit-exact, as the client sent them.
    got = [m.value for m in hist]
    want = [value(i) for i in range(n)]
    wrong = [i for i in range(n) if got[i] != want[i]]
    assert not wrong, (f"{len(wrong)} of {n} values changed, e.g. step {wrong[0]}: sent "
                       f"{want[wrong[0]]!r}, got {got[wrong[0]]!r}")
    assert client.get_run(rid).data.metrics["loss"] == value(n - 1)


# --- datasets


def test_log_input_dataset_and_search(client, unique):
    eid = new_experiment(client, unique, "datasets")
    mlflow.set_experiment(experiment_id=eid)
    arr = np.arange(30, dtype=np.float64).reshape(10, 3)
    ds_np = mlflow.data.from_numpy(arr, source="file:///data/train.npy", name=f"np-{unique}")
    df = pd.DataFrame({"text": ["a", "b", "c"], "label": [0, 1, 0]})
    ds_pd = mlflow.data.from_pandas(df, source="file:///data/eval.csv", name=f"pd-{unique}",
                                    targets="label")
    with mlflow.start_run() as run:
        mlflow.log_input(ds_np, context="training")
        mlflow.log_input(ds_pd, context="eval", tags={"split": "eval"})
        mlflow.log_input(ds_np, context="training")  # the same input twice is stored once
    with mlflow.start_run() as other:
        mlflow.log_param("x", 1)
    rid = run.info.run_id

    inputs = client.get_run(rid).inputs.dataset_inputs
    by_name = {d.dataset.name: d for d in inputs}
    assert set(by_name) == {f"np-{unique}", f"pd-{unique}"}
    assert len(inputs) == 2
    np_in = by_name[f"np-{unique}"]
    assert np_in.dataset.digest == ds_np.digest
    assert np_in.dataset.source_type == "local"
    assert {t.key: t.value for t in np_in.tags}["mlflow.data.context"] == "training"
    pd_tags = {t.key: t.value for t in by_name[f"pd-{unique}"].tags}
    assert pd_tags["mlflow.data.context"] == "eval"
    assert pd_tags["split"] == "eval"
    loaded = mlflow.data.get_source(np_in)
    assert loaded.to_dict()["uri"] == "file:///data/train.npy"

    found = client.search_runs([eid], f"datasets.name = 'np-{unique}'")
    assert [r.info.run_id for r in found] == [rid]
    found = client.search_runs([eid], f"datasets.name IN ('pd-{unique}', 'zzz')")
    assert [r.info.run_id for r in found] == [rid]
    found = client.search_runs([eid], "datasets.context = 'eval'")
    assert [r.info.run_id for r in found] == [rid]
    found = client.search_runs([eid], f"datasets.digest = '{ds_pd.digest}'")
    assert [r.info.run_id for r in found] == [rid]
    assert client.search_runs([eid], "datasets.name = 'nothing'") == []
    assert {r.info.run_id for r in client.search_runs([eid])} == {rid, other.info.run_id}


# --- models: logged models, registry


class Doubler(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        return model_input["x"] * 2 + (params or {}).get("offset", 0)


def log_doubler(name: str = "model", **kw):
    return mlflow.pyfunc.log_model(name=name, python_model=Doubler(),
                                   pip_requirements=["mlflow", "pandas"], **kw)


def test_pyfunc_log_and_load(client, unique):
    eid = new_experiment(client, unique, "pyfunc")
    mlflow.set_experiment(experiment_id=eid)
    with mlflow.start_run() as run:
        info = log_doubler(params={"alpha": "0.5"}, tags={"kind": "doubler"})
        mlflow.log_metric("val_loss", 0.125, model_id=info.model_id)
    assert info.model_uri == f"models:/{info.model_id}"
    df = pd.DataFrame({"x": [1.0, 2.5, -3.0]})
    model = mlflow.pyfunc.load_model(info.model_uri)
    assert list(model.predict(df)) == [2.0, 5.0, -6.0]
    assert list(mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model").predict(df)) == \
        [2.0, 5.0, -6.0]

    lm = mlflow.get_logged_model(info.model_id)
    assert lm.name == "model"
    assert lm.experiment_id == eid
    assert lm.source_run_id == run.info.run_id
    assert str(lm.status) in ("READY", "LoggedModelStatus.READY")
    assert lm.params == {"alpha": "0.5"}
    assert lm.tags["kind"] == "doubler"
    assert [(m.key, m.value) for m in lm.metrics] == [("val_loss", 0.125)]

    found = mlflow.search_logged_models(experiment_ids=[eid], output_format="list")
    assert [m.model_id for m in found] == [info.model_id]
    found = mlflow.search_logged_models(experiment_ids=[eid], filter_string="name = 'model'",
                                        output_format="list")
    assert [m.model_id for m in found] == [info.model_id]
    found = mlflow.search_logged_models(experiment_ids=[eid],
                                        filter_string="params.alpha = '0.5'",
                                        output_format="list")
    assert [m.model_id for m in found] == [info.model_id]
    found = mlflow.search_logged_models(experiment_ids=[eid],
                                        filter_string="metrics.val_loss < 0.2",
                                        output_format="list")
    assert [m.model_id for m in found] == [info.model_id]
    assert mlflow.search_logged_models(experiment_ids=[eid], filter_string="name = 'other'",
                                       output_format="list") == []
    pdf = mlflow.search_logged_models(experiment_ids=[eid])
    assert list(pdf["model_id"]) == [info.model_id]


def test_model_registry_end_to_end(client, unique, tmp_path):
    eid = new_experiment(client, unique, "registry")
    mlflow.set_experiment(experiment_id=eid)
    name = f"doubler-{unique}"
    with mlflow.start_run() as run:
        info1 = log_doubler()
        info2 = log_doubler(name="model2")
    rid = run.info.run_id
    mv1 = mlflow.register_model(info1.model_uri, name)
    assert (mv1.name, mv1.version) == (name, "1")
    mv2 = mlflow.register_model(f"runs:/{rid}/model2", name, tags={"candidate": "yes"})
    assert mv2.version == "2"
    assert client.get_model_version(name, "2").run_id == rid
    assert client.get_model_version(name, "2").tags["candidate"] == "yes"
    assert client.get_model_version(name, "1").status == "READY"

    # Aliases.
    client.set_registered_model_alias(name, "champion", "1")
    client.set_registered_model_alias(name, "challenger", "2")
    assert client.get_model_version_by_alias(name, "champion").version == "1"
    assert set(client.get_registered_model(name).aliases) == {"champion", "challenger"}
    client.set_registered_model_alias(name, "champion", "2")  # aliases move
    assert client.get_model_version_by_alias(name, "champion").version == "2"
    client.set_registered_model_alias(name, "champion", "1")
    client.delete_registered_model_alias(name, "challenger")
    with raises_mlflow("RESOURCE_DOES_NOT_EXIST"):
        client.get_model_version_by_alias(name, "challenger")

    df = pd.DataFrame({"x": [4.0]})
    assert list(mlflow.pyfunc.load_model(f"models:/{name}@champion").predict(df)) == [8.0]
    assert list(mlflow.pyfunc.load_model(f"models:/{name}/2").predict(df)) == [8.0]

    local = mlflow.artifacts.download_artifacts(f"models:/{name}@champion",
                                                dst_path=str(tmp_path / "champ"))
    assert (Path(local) / "MLmodel").is_file()
    assert (Path(local) / "python_model.pkl").is_file()
    local = client.download_artifacts(rid, "model2", str(tmp_path / "viarun"))
    assert (Path(local) / "MLmodel").is_file()
    assert client.get_model_version_download_uri(name, "1")

    # Stages (deprecated in MLflow, still served).
    client.transition_model_version_stage(name, "1", "Staging")
    client.transition_model_version_stage(name, "2", "Production")
    assert client.get_model_version(name, "2").current_stage == "Production"
    latest = {v.current_stage: v.version for v in client.get_latest_versions(name)}
    assert latest == {"Staging": "1", "Production": "2"}
    assert [v.version for v in client.get_latest_versions(name, stages=["Production"])] == ["2"]
    mv3 = mlflow.register_model(info1.model_uri, name)
    assert mv3.version == "3"
    client.transition_model_version_stage(name, "3", "Production",
                                          archive_existing_versions=True)
    assert client.get_model_version(name, "2").current_stage == "Archived"
    assert [v.version for v in client.get_latest_versions(name, stages=["Production"])] == ["3"]
    assert {v.version for v in client.get_latest_versions(name, stages=["None"])} == set()

    # Tags and descriptions.
    client.set_registered_model_tag(name, "owner", "team-a")
    client.update_registered_model(name, description="doubles x")
    client.set_model_version_tag(name, "3", "validated", "true")
    client.update_model_version(name, "3", description="v3")
    rm = client.get_registered_model(name)
    assert rm.tags["owner"] == "team-a"
    assert rm.description == "doubles x"
    assert client.get_model_version(name, "3").tags["validated"] == "true"
    assert client.get_model_version(name, "3").description == "v3"

    # Searches.
    assert [m.name for m in client.search_registered_models(f"name = '{name}'")] == [name]
    assert [m.name for m in client.search_registered_models(f"name LIKE 'doubler-{unique}%'")] \
        == [name]
    assert [m.name for m in client.search_registered_models("tags.owner = 'team-a'")] == [name]
    versions = client.search_model_versions(f"name = '{name}'", order_by=["version_number ASC"])
    assert [v.version for v in versions] == ["1", "2", "3"]
    assert {v.version for v in client.search_model_versions(
        f"name = '{name}' AND run_id = '{rid}'")} == {"1", "2", "3"}
    assert [v.version for v in client.search_model_versions(
        f"name = '{name}' AND tags.validated = 'true'")] == ["3"]
    assert [v.version for v in client.search_model_versions(
        f"name = '{name}' AND version_number > 1", order_by=["version_number DESC"])] == \
        ["3", "2"]
    assert client.search_model_versions("name = 'no-such-model-xyz'") == []

    # Rename: versions and aliases follow; the old name is gone.
    new_name = f"{name}-renamed"
    client.rename_registered_model(name, new_name)
    with raises_mlflow("RESOURCE_DOES_NOT_EXIST"):
        client.get_registered_model(name)
    assert client.get_model_version_by_alias(new_name, "champion").version == "1"
    assert [v.version for v in client.search_model_versions(
        f"name = '{new_name}'", order_by=["version_number ASC"])] == ["1", "2", "3"]
    assert list(mlflow.pyfunc.load_model(f"models:/{new_name}@champion").predict(df)) == [8.0]

    with raises_mlflow("RESOURCE_ALREADY_EXISTS"):
        client.create_registered_model(new_name)

    # Delete a version, then the model.
    client.delete_model_version(new_name, "2")
    assert [v.version for v in client.search_model_versions(
        f"name = '{new_name}'", order_by=["version_number ASC"])] == ["1", "3"]
    with raises_mlflow("RESOURCE_DOES_NOT_EXIST"):
        client.get_model_version(new_name, "2")
    client.delete_registered_model(new_name)
    with raises_mlflow("RESOURCE_DOES_NOT_EXIST"):
        client.get_registered_model(new_name)
    assert client.search_model_versions(f"name = '{new_name}'") == []
    assert client.search_registered_models(f"name LIKE 'doubler-{unique}%'") == []


def test_registered_model_search_paging_and_order(client, unique):
    prefix = f"rm-page-{unique}"
    for i in range(5):
        client.create_registered_model(f"{prefix}-{i}", tags={"i": str(i)})
    names, token = [], None
    while True:
        page = client.search_registered_models(f"name LIKE '{prefix}-%'", max_results=2,
                                               order_by=["name DESC"], page_token=token)
        names += [m.name for m in page]
        token = page.token
        if not token:
            break
    assert names == [f"{prefix}-{i}" for i in reversed(range(5))]
    assert [m.name for m in client.search_registered_models(
        f"name ILIKE '{prefix.upper()}-%' AND tags.i = '3'")] == [f"{prefix}-3"]
    # mlflow.search_registered_models pages through everything.
    assert len([m for m in mlflow.search_registered_models(
        filter_string=f"name LIKE '{prefix}-%'")]) == 5
