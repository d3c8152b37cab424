"""The `trainyard` CLI against a real server (both backends): readable tables, right exit codes."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest
import requests

from conftest import TRAINYARD_BIN

MLFLOW = "/api/2.0/mlflow"


def cli(server, *args, token: str | None = None, use_data_dir: bool = False,
        expect_rc: int | None = 0) -> subprocess.CompletedProcess:
    argv = [str(TRAINYARD_BIN), *args, "--url", server.url]
    if use_data_dir:
        argv += ["--data-dir", str(server.data_dir)]
    else:
        argv += ["--token", token if token is not None else server.token]
    # Bytes, not text: the output must be valid UTF-8, which is checked here.
    p = subprocess.run(argv, capture_output=True, timeout=60, env={"PATH": "/usr/bin:/bin"},
                       cwd="/")
    out, err = p.stdout.decode("utf-8"), p.stderr.decode("utf-8")
    result = subprocess.CompletedProcess(argv, p.returncode, out, err)
    if expect_rc is not None:
        assert p.returncode == expect_rc, f"{' '.join(args)} exited {p.returncode}:\n{out}\n{err}"
    return result


def parse_table(text: str, header_first: str) -> tuple[list[str], list[dict[str, str]]]:
    """Parses a table whose header row starts with `header_first`. Checks that every cell starts
    exactly under its column's header (a readable, aligned table) and returns the rows."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_first))
    header = lines[start]
    names = re.split(r" {2,}", header.strip())
    offsets = [header.index(n) for n in names]
    assert offsets == sorted(offsets)
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        if line == "(none)":
            break
        row = {}
        for i, (name, off) in enumerate(zip(names, offsets)):
            end = offsets[i + 1] if i + 1 < len(offsets) else None
            cell = line[off:end]
            if off > 0 and off <= len(line):
                assert line[off - 1] == " ", \
                    f"column {name!r} misaligned (character before it is {line[off - 1]!r}):\n" \
                    f"{header}\n{line}"
            if end is not None and end <= len(line) and cell.strip():
                assert cell.endswith("  ") or line[end - 1] == " ", \
                    f"cell {cell!r} runs into column {names[i + 1]!r}:\n{header}\n{line}"
            row[name] = cell.strip()
        rows.append(row)
    return names, rows


@pytest.fixture(scope="module")
def populated(server):
    """An experiment with runs, a registered model with versions and an alias."""
    s = server.session()
    u = uuid.uuid4().hex[:6]

    def post(path, body):
        r = s.post(server.api(f"{MLFLOW}/{path}"), json=body)
        assert r.status_code == 200, r.text
        return r.json()

    exp_name = f"cli-exp-{u}"
    eid = post("experiments/create", {"name": exp_name,
                                      "tags": [{"key": "team", "value": "nlp"}]})["experiment_id"]
    runs = {}
    for i, (name, loss) in enumerate([("baseline", 0.9), ("lora-r8", 0.42), ("lora-r16", 0.31)]):
        rid = post("runs/create", {"experiment_id": eid, "run_name": f"{name}-{u}",
                                   "start_time": 1_700_000_000_000 + i})["run"]["info"]["run_id"]
        post("runs/log-batch", {"run_id": rid,
                                "metrics": [{"key": "loss", "value": loss, "timestamp": 1,
                                             "step": 3}],
                                "params": [{"key": "lr", "value": f"0.00{i + 1}"}],
                                "tags": [{"key": "stage", "value": "sft"}]})
        post("runs/update", {"run_id": rid, "status": "FINISHED",
                             "end_time": 1_700_000_000_000 + i + 65_000})
        runs[name] = rid
    model = f"cli-model-{u}"
    post("registered-models/create", {"name": model, "description": "intent classifier"})
    for name in ("lora-r8", "lora-r16"):
        post("model-versions/create", {"name": model, "run_id": runs[name],
                                       "source": f"runs:/{runs[name]}/model"})
    post("registered-models/alias", {"name": model, "alias": "champion", "version": "2"})
    yield {"u": u, "exp": exp_name, "eid": eid, "runs": runs, "model": model}
    s.close()


def test_experiments_list(server, populated):
    out = cli(server, "experiments", "list").stdout
    names, rows = parse_table(out, "ID")
    assert names[:3] == ["ID", "NAME", "STATE"]
    mine = [r for r in rows if r["NAME"] == populated["exp"]]
    assert len(mine) == 1
    assert mine[0]["ID"] == populated["eid"]
    assert mine[0]["STATE"] == "active"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", mine[0]["CREATED"])
    assert any(r["NAME"] == "Default" for r in rows)


def test_experiments_list_all_shows_deleted(server, populated):
    s = server.session()
    name = f"cli-deleted-{populated['u']}"
    eid = s.post(server.api(f"{MLFLOW}/experiments/create"), json={"name": name}).json()[
        "experiment_id"]
    assert s.post(server.api(f"{MLFLOW}/experiments/delete"),
                  json={"experiment_id": eid}).status_code == 200
    _, rows = parse_table(cli(server, "experiments", "list").stdout, "ID")
    assert name not in {r["NAME"] for r in rows}
    _, rows = parse_table(cli(server, "experiments", "list", "--all").stdout, "ID")
    assert {r["NAME"]: r["STATE"] for r in rows}[name] == "deleted"


@pytest.mark.parametrize("by", ["name", "id"])
def test_experiments_show(server, populated, by):
    key = populated["exp"] if by == "name" else populated["eid"]
    out = cli(server, "experiments", "show", key).stdout
    assert out.splitlines()[0] == f"Experiment {populated['eid']}: {populated['exp']}"
    assert "active" in out
    assert "team = nlp" in out


def test_experiments_show_missing(server):
    r = cli(server, "experiments", "show", "no-such-experiment-xyz", expect_rc=None)
    assert r.returncode != 0
    assert "no-such-experiment-xyz" in r.stderr
    assert "404" in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("by", ["name", "id"])
def test_runs_list(server, populated, by):
    exp = populated["exp"] if by == "name" else populated["eid"]
    out = cli(server, "runs", "list", "-e", exp).stdout
    names, rows = parse_table(out, "RUN ID")
    assert names == ["RUN ID", "NAME", "STATUS", "STARTED", "DURATION", "METRICS"]
    u = populated["u"]
    got = {r["NAME"]: r for r in rows}
    assert set(got) == {f"baseline-{u}", f"lora-r8-{u}", f"lora-r16-{u}"}
    r8 = got[f"lora-r8-{u}"]
    assert r8["RUN ID"] == populated["runs"]["lora-r8"]
    assert r8["STATUS"] == "FINISHED"
    assert r8["DURATION"] == "1m 5s"
    assert r8["METRICS"] == "loss=0.42"


def test_runs_list_with_filter(server, populated):
    u = populated["u"]
    out = cli(server, "runs", "list", "-e", populated["exp"], "--filter",
              "metrics.loss < 0.5 and params.lr != '0.003'").stdout
    _, rows = parse_table(out, "RUN ID")
    assert [r["NAME"] for r in rows] == [f"lora-r8-{u}"]
    out = cli(server, "runs", "list", "-e", populated["exp"], "--filter",
              "metrics.loss > 5").stdout
    assert "(none)" in out
    bad = cli(server, "runs", "list", "-e", populated["exp"], "--filter", "metrics.loss <<< 1",
              expect_rc=None)
    assert bad.returncode != 0
    assert "400" in bad.stderr and "filter" in bad.stderr.lower()


def test_runs_show(server, populated):
    rid = populated["runs"]["lora-r16"]
    out = cli(server, "runs", "show", rid).stdout
    assert out.splitlines()[0] == f"Run {rid} (lora-r16-{populated['u']})"
    assert f"experiment: {populated['eid']}" in out
    assert "FINISHED" in out
    _, metrics = parse_table(out, "METRIC")
    assert metrics == [{"METRIC": "loss", "LATEST": "0.31", "STEP": "3"}]
    _, params = parse_table(out, "PARAM")
    assert params == [{"PARAM": "lr", "VALUE": "0.003"}]
    _, tags = parse_table(out, "TAG")
    assert {"TAG": "stage", "VALUE": "sft"} in tags
    missing = cli(server, "runs", "show", "0" * 32, expect_rc=None)
    assert missing.returncode != 0 and "404" in missing.stderr


def test_models_list_and_show(server, populated):
    model = populated["model"]
    names, rows = parse_table(cli(server, "models", "list").stdout, "NAME")
    assert names[:3] == ["NAME", "LATEST", "ALIASES"]
    row = {r["NAME"]: r for r in rows}[model]
    assert row["LATEST"] == "2"
    assert row["ALIASES"] == "champion=v2"

    out = cli(server, "models", "show", model).stdout
    assert out.splitlines()[0] == f"Model {model}"
    assert "intent classifier" in out
    names, rows = parse_table(out, "VERSION")
    assert names == ["VERSION", "STATUS", "STAGE", "ALIASES", "RUN", "CREATED"]
    by_version = {r["VERSION"]: r for r in rows}
    assert set(by_version) == {"1", "2"}
    assert by_version["2"]["ALIASES"] == "champion"
    assert by_version["1"]["RUN"] == populated["runs"]["lora-r8"]
    assert by_version["1"]["STATUS"] == "READY"
    missing = cli(server, "models", "show", "no-such-model-xyz", expect_rc=None)
    assert missing.returncode != 0 and "no-such-model-xyz" in missing.stderr


def test_token_create_list_revoke(server):
    created = cli(server, "token", "create", "--description", "ci token", "--expires-in", "2h")
    token = created.stdout.strip()
    assert len(created.stdout.splitlines()) == 1, "only the token goes to stdout"
    assert re.fullmatch(r"\S{20,}", token)
    m = re.search(r"Created token (\S+) for admin", created.stderr)
    assert m, created.stderr
    token_id = m.group(1)
    assert requests.get(server.api(f"{MLFLOW}/experiments/search"),
                        headers={"Authorization": f"Bearer {token}"}).status_code == 200

    names, rows = parse_table(cli(server, "token", "list").stdout, "ID")
    assert names == ["ID", "USER", "STATE", "CREATED", "EXPIRES", "SCOPE", "DESCRIPTION"]
    row = {r["ID"]: r for r in rows}[token_id]
    assert row["USER"] == "admin" and row["STATE"] == "active"
    assert row["SCOPE"] == "-"  # a full token (query-only tokens say "query-only")
    assert row["DESCRIPTION"] == "ci token"
    assert row["EXPIRES"]
    assert token not in cli(server, "token", "list").stdout

    # The new token works for the CLI itself.
    cli(server, "experiments", "list", token=token)
    out = cli(server, "token", "revoke", token_id).stdout
    assert f"Revoked token {token_id}" in out
    r = requests.get(server.api(f"{MLFLOW}/experiments/search"),
                     headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401
    _, rows = parse_table(cli(server, "token", "list").stdout, "ID")
    assert {r["ID"]: r for r in rows}[token_id]["STATE"] == "revoked"
    denied = cli(server, "experiments", "list", token=token, expect_rc=None)
    assert denied.returncode != 0
    assert "401" in denied.stderr and "revoked" in denied.stderr
    again = cli(server, "token", "revoke", "no-such-token-id", expect_rc=None)
    assert again.returncode != 0 and "404" in again.stderr

    bad = cli(server, "token", "create", "--expires-in", "soon", expect_rc=None)
    assert bad.returncode != 0 and "--expires-in" in bad.stderr


def test_users_and_tokens_for_them(server):
    name = f"cliuser{uuid.uuid4().hex[:6]}"
    assert f"Created user {name}" in cli(server, "users", "create", name).stdout
    names, rows = parse_table(cli(server, "users", "list").stdout, "USER")
    assert names == ["USER", "ADMIN", "OS USER", "CREATED"]
    users = {r["USER"]: r for r in rows}
    assert users[name]["ADMIN"] == "no"
    assert users[name]["OS USER"] == "-"
    assert users["admin"]["ADMIN"] == "yes"
    token = cli(server, "token", "create", "--user", name).stdout.strip()
    who = requests.get(server.api("/api/trainyard/v1/whoami"),
                       headers={"Authorization": f"Bearer {token}"}).json()
    assert who == {"user": name, "is_admin": False}
    # A non-admin may not create users.
    r = cli(server, "users", "create", f"{name}x", token=token, expect_rc=None)
    assert r.returncode != 0 and "403" in r.stderr


def test_data_dir_supplies_the_admin_token(server, populated):
    out = cli(server, "experiments", "list", use_data_dir=True).stdout
    assert populated["exp"] in out


def test_missing_token_explains_what_to_do(server, tmp_path):
    r = cli(server, "experiments", "list", token="", expect_rc=None)
    # No --token and the default data dir holds no admin.token.
    assert r.returncode != 0
    assert "401" in r.stderr
    assert "TRAINYARD_TOKEN" in r.stderr


def test_unicode_names_stay_aligned(server):
    """Cells are padded by characters, not bytes."""
    s = server.session()
    u = uuid.uuid4().hex[:6]
    eid = s.post(server.api(f"{MLFLOW}/experiments/create"),
                 json={"name": f"données-é-{u}"}).json()["experiment_id"]
    for name in ("ascii-run", f"exécution-ü-{u}"):
        r = s.post(server.api(f"{MLFLOW}/runs/create"),
                   json={"experiment_id": eid, "run_name": name})
        assert r.status_code == 200, r.text
    _, rows = parse_table(cli(server, "runs", "list", "-e", eid).stdout, "RUN ID")
    assert {r["NAME"] for r in rows} == {"ascii-run", f"exécution-ü-{u}"}
    assert {r["STATUS"] for r in rows} == {"RUNNING"}
    _, rows = parse_table(cli(server, "experiments", "list").stdout, "ID")
    assert {r["NAME"]: r["ID"] for r in rows}[f"données-é-{u}"] == eid


def test_long_unicode_cells_are_cut_between_characters(server):
    """A cell longer than the column limit is shortened without splitting a UTF-8 character."""
    s = server.session()
    eid = s.post(server.api(f"{MLFLOW}/experiments/create"),
                 json={"name": f"long-{uuid.uuid4().hex[:6]}"}).json()["experiment_id"]
    long_name = "é" * 70
    r = s.post(server.api(f"{MLFLOW}/runs/create"),
               json={"experiment_id": eid, "run_name": long_name})
    assert r.status_code == 200, r.text
    out = cli(server, "runs", "list", "-e", eid).stdout  # raises if not valid UTF-8
    _, rows = parse_table(out, "RUN ID")
    (row,) = rows
    assert row["NAME"].startswith("ééé") and row["NAME"].endswith("~")
    assert len(row["NAME"]) <= 64
