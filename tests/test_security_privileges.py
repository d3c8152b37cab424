"""Least privilege with a real server and two non-admin users (alice, bob): what a job's scoped
token may and may not do, project membership and priority ceilings, who sees a job's env and
logs, disabling and deleting users, and secrets that a job uses but nobody sees.

Jobs run /usr/bin/python3 with inline code from "/" so that they work whether the server runs
them as its own account or as each user's mapped OS account (ty-priv-alice, ty-priv-bob).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time

import pytest
import requests

from conftest import TRAINYARD_BIN, ServerFactory

API = "/api/trainyard/v1"
MLFLOW = "/api/2.0/mlflow"
PY = "/usr/bin/python3"
OS_USERS = {"alice": "ty-priv-alice", "bob": "ty-priv-bob", "carol": "ty-priv-carol",
            "admin": "ty-priv-admin"}


def _remove_os_user(name: str) -> None:
    subprocess.run(["userdel", "-r", name], capture_output=True)
    subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture(scope="module")
def os_users():
    """OS accounts the users map to; leftovers of an aborted earlier run are replaced."""
    for name in OS_USERS.values():
        _remove_os_user(name)
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True,
                       capture_output=True)
    try:
        yield OS_USERS
    finally:
        for name in OS_USERS.values():
            _remove_os_user(name)


@pytest.fixture(scope="module")
def server(backend, tmp_path_factory, request):
    """A multi-user server (the tests run as root): every job runs as its owner's OS account."""
    factory = ServerFactory(tmp_path_factory.mktemp(f"srv-priv-{backend}"), backend, request)
    try:
        yield factory.new(single_user=False)
    finally:
        factory.close()


class Env:
    """The server and a session per user."""

    def __init__(self, server, os_users):
        self.server = server
        self.admin = server.session()
        self.tokens = {}
        r = self.admin.patch(server.api(f"{API}/users/admin"), json={"os_user": os_users["admin"]})
        assert r.status_code == 200, r.text
        for user in ("alice", "bob"):
            self.tokens[user] = self.create_user(user, os_users[user])
        self.alice = server.session(self.tokens["alice"])
        self.bob = server.session(self.tokens["bob"])

    def create_user(self, name: str, os_user: str) -> str:
        url = self.server.api(f"{API}/users")
        r = self.admin.post(url, json={"name": name, "os_user": os_user})
        assert r.status_code == 200, r.text
        r = self.admin.post(self.server.api(f"{API}/tokens"), json={"user": name})
        assert r.status_code == 200, r.text
        return r.json()["token"]

    def url(self, path: str) -> str:
        return self.server.api(path)

    def submit(self, session, spec: dict, expect: int = 200) -> dict:
        spec.setdefault("working_dir", "/")
        r = session.post(self.url(f"{API}/jobs"), json={"spec": spec})
        assert r.status_code == expect, r.text
        return r.json()

    def job(self, job_id: str, session=None) -> dict:
        r = (session or self.admin).get(self.url(f"{API}/jobs/{job_id}"))
        assert r.status_code == 200, r.text
        return r.json()["job"]

    def logs(self, job_id: str, session=None) -> requests.Response:
        return (session or self.admin).get(self.url(f"{API}/jobs/{job_id}/logs"))

    def wait(self, job_id: str, pred, what: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if pred(job):
                return job
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} did not reach {what} within {timeout}s: "
                            f"{json.dumps(job)[:2000]}\nlogs: {self.logs(job_id).text[-2000:]}")
            self.server.assert_alive()
            time.sleep(0.05)  # polling, bounded by the deadline

    def wait_state(self, job_id: str, state: str, timeout: float = 60) -> dict:
        return self.wait(job_id, lambda j: j["state"] == state, state, timeout)

    def wait_log(self, job_id: str, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            r = self.logs(job_id)
            if r.status_code == 200 and text in r.text:
                return r.text
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} did not print {text!r} within {timeout}s: "
                            f"{r.status_code} {r.text[-2000:]}")
            self.server.assert_alive()
            time.sleep(0.05)  # polling, bounded by the deadline

    def cancel(self, job_id: str) -> None:
        self.admin.post(self.url(f"{API}/jobs/{job_id}/cancel"))

    def cli(self, *args: str, token: str | None = None, stdin: str = "") -> subprocess.CompletedProcess:
        env = dict(os.environ, TRAINYARD_URL=self.server.url,
                   TRAINYARD_TOKEN=token or self.server.token)
        return subprocess.run([str(TRAINYARD_BIN), *args], input=stdin, capture_output=True,
                              text=True, env=env, timeout=60)


@pytest.fixture(scope="module")
def env(server, os_users):
    return Env(server, os_users)


def python(code: str) -> list[str]:
    return [PY, "-c", code]


# A workload that waits until it is cancelled.
WAIT_FOREVER = python("import time\nprint('waiting', flush=True)\nwhile True: time.sleep(1)")

# Tries each action with its own token and prints the HTTP statuses as one JSON line.
PROBE = r"""
import json, os, urllib.request
url = os.environ['TRAINYARD_URL']; token = os.environ['TRAINYARD_TOKEN']
def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={'Authorization': 'Bearer ' + token,
                                          'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
run = os.environ['MLFLOW_RUN_ID']; job = os.environ['TRAINYARD_JOB_ID']
other_run = os.environ['OTHER_RUN']; other_exp = os.environ['OTHER_EXP']
out = {
  'log_metric_own_run': call('POST', '/api/2.0/mlflow/runs/log-metric',
                             {'run_id': run, 'key': 'loss', 'value': 0.5, 'timestamp': 1, 'step': 0}),
  'log_param_own_run': call('POST', '/api/2.0/mlflow/runs/log-parameter',
                            {'run_id': run, 'key': 'lr', 'value': '0.1'}),
  'heartbeat_own_job': call('POST', '/api/trainyard/v1/jobs/' + job + '/heartbeat', {}),
  'read_other_experiment': call('GET', '/api/2.0/mlflow/experiments/get?experiment_id=' + other_exp),
  'log_metric_other_run': call('POST', '/api/2.0/mlflow/runs/log-metric',
                               {'run_id': other_run, 'key': 'x', 'value': 1, 'timestamp': 1}),
  'create_token': call('POST', '/api/trainyard/v1/tokens', {}),
  'revoke_owner_token': call('DELETE', '/api/trainyard/v1/tokens/' + os.environ['OWNER_TOKEN_ID']),
  'revoke_other_job_token': call('DELETE', '/api/trainyard/v1/tokens/' + os.environ['OTHER_JOB_TOKEN_ID']),
  'grant_manage': call('POST', '/api/trainyard/v1/grants/experiment',
                       {'id': os.environ['MLFLOW_EXPERIMENT_ID'], 'user': 'bob', 'privilege': 'MANAGE'}),
  'delete_other_experiment': call('POST', '/api/2.0/mlflow/experiments/delete',
                                  {'experiment_id': other_exp}),
  'delete_own_run': call('POST', '/api/2.0/mlflow/runs/delete', {'run_id': run}),
  'create_experiment': call('POST', '/api/2.0/mlflow/experiments/create', {'name': 'from-a-job'}),
  'submit_job': call('POST', '/api/trainyard/v1/jobs', {'spec': {'name': 'nested', 'command': 'true'}}),
  'cancel_other_job': call('POST', '/api/trainyard/v1/jobs/' + os.environ['OTHER_JOB'] + '/cancel', {}),
  'create_user': call('POST', '/api/trainyard/v1/users', {'name': 'mallory'}),
}
print('RESULTS ' + json.dumps(out), flush=True)
"""


def results_of(logs: str) -> dict:
    for line in logs.splitlines():
        if line.startswith("RESULTS "):
            return json.loads(line[len("RESULTS "):])
    pytest.fail(f"no RESULTS line in the job's output:\n{logs[-3000:]}")


def test_a_jobs_token_logs_to_its_run_and_can_do_nothing_else(env):
    other = env.submit(env.alice, {"name": "priv-other", "command": WAIT_FOREVER})["job"]
    env.wait_log(other["job_id"], "waiting")
    tokens = env.alice.get(env.url(f"{API}/tokens")).json()["tokens"]
    other_token = [t for t in tokens if other["job_id"] in t["description"]]
    assert len(other_token) == 1, tokens
    owner_token = [t for t in tokens if t["description"] == "" or "job " not in t["description"]]
    assert owner_token, tokens
    probe = env.submit(env.alice, {
        "name": "priv-probe", "command": python(PROBE),
        "env": {"OTHER_RUN": other["run_id"], "OTHER_EXP": other["experiment_id"],
                "OTHER_JOB": other["job_id"], "OWNER_TOKEN_ID": owner_token[0]["token_id"],
                "OTHER_JOB_TOKEN_ID": other_token[0]["token_id"]}})["job"]
    env.wait_state(probe["job_id"], "SUCCEEDED")
    got = results_of(env.logs(probe["job_id"], env.alice).text)
    allowed = ["log_metric_own_run", "log_param_own_run", "heartbeat_own_job",
               "read_other_experiment"]
    forbidden = ["log_metric_other_run", "create_token", "revoke_owner_token",
                 "revoke_other_job_token", "grant_manage", "delete_other_experiment",
                 "delete_own_run", "create_experiment", "submit_job", "cancel_other_job",
                 "create_user"]
    assert {k: got[k] for k in allowed} == {k: 200 for k in allowed}, got
    assert {k: got[k] for k in forbidden} == {k: 403 for k in forbidden}, got
    # Nothing happened behind the 403s.
    assert env.alice.get(env.url(f"{API}/whoami")).status_code == 200
    assert env.job(other["job_id"])["state"] == "RUNNING"
    r = env.alice.get(env.url(f"{MLFLOW}/experiments/get"),
                      params={"experiment_id": other["experiment_id"]})
    assert r.json()["experiment"]["lifecycle_stage"] == "active", r.text
    run = env.alice.get(env.url(f"{MLFLOW}/runs/get"), params={"run_id": probe["run_id"]}).json()
    assert [m["key"] for m in run["run"]["data"]["metrics"]] == ["loss"]
    env.cancel(other["job_id"])
    env.wait_state(other["job_id"], "CANCELLED")


def test_projects_need_membership_and_cap_priority(env):
    r = env.cli("projects", "create", "priv-nlp", "--ceiling", "5")
    assert r.returncode == 0, r.stderr
    spec = {"name": "p", "project": "priv-nlp", "command": "true"}
    denied = env.submit(env.bob, dict(spec), expect=403)
    assert "trainyard projects add-member priv-nlp bob" in denied["message"]
    r = env.cli("projects", "add-member", "priv-nlp", "bob", token=env.tokens["alice"])
    assert r.returncode != 0 and "only admins" in r.stderr
    assert env.cli("projects", "add-member", "priv-nlp", "bob").returncode == 0
    too_high = env.submit(env.bob, dict(spec, priority=6), expect=403)
    assert "ceiling of 5" in too_high["message"]
    ok = env.submit(env.bob, dict(spec, priority=5))["job"]
    env.wait_state(ok["job_id"], "SUCCEEDED")
    r = env.bob.post(env.url(f"{API}/projects/priv-nlp/ceiling"), json={"priority_ceiling": 1000})
    assert r.status_code == 403, r.text
    assert env.cli("projects", "set-ceiling", "priv-nlp", "100").returncode == 0
    env.submit(env.bob, dict(spec, priority=100))
    shown = env.cli("projects", "show", "priv-nlp")
    assert "bob" in shown.stdout and "100" in shown.stdout, shown.stdout
    assert env.cli("projects", "remove-member", "priv-nlp", "bob").returncode == 0
    env.submit(env.bob, dict(spec), expect=403)
    # The default project is open to everyone at priority 0 and below.
    env.submit(env.bob, {"name": "d", "command": "true", "priority": 1}, expect=403)
    env.submit(env.bob, {"name": "d", "command": "true"})
    # A project that does not exist: non-admins are told to ask; an admin's submit creates it.
    missing = env.submit(env.bob, {"name": "m", "project": "priv-new", "command": "true"},
                         expect=403)
    assert "ask an admin" in missing["message"]
    env.submit(env.admin, {"name": "m", "project": "priv-new", "command": "true", "priority": 50})
    listed = env.admin.get(env.url(f"{API}/projects")).json()["projects"]
    new = [p for p in listed if p["name"] == "priv-new"]
    assert new and new[0]["members"] == ["admin"], listed


def test_env_and_logs_are_for_owner_members_and_admins(env):
    assert env.cli("projects", "create", "priv-vis").returncode == 0
    assert env.cli("projects", "add-member", "priv-vis", "alice").returncode == 0
    j = env.submit(env.alice, {"name": "vis", "project": "priv-vis", "env": {"API_KEY": "k-123"},
                               "command": python("print('visible output', flush=True)")})["job"]
    env.wait_state(j["job_id"], "SUCCEEDED")
    assert env.job(j["job_id"], env.alice)["spec"]["env"] == {"API_KEY": "k-123"}
    assert env.job(j["job_id"], env.admin)["spec"]["env"] == {"API_KEY": "k-123"}
    assert env.job(j["job_id"], env.bob)["spec"]["env"] == {"API_KEY": "***"}
    listed = env.bob.get(env.url(f"{API}/jobs"), params={"project": "priv-vis"}).json()["jobs"]
    assert listed and all("k-123" not in json.dumps(x) for x in listed), listed
    r = env.logs(j["job_id"], env.bob)
    assert r.status_code == 403 and "visible output" not in r.text, r.text
    described = env.cli("describe", j["job_id"], token=env.tokens["bob"])
    assert "k-123" not in described.stdout + described.stderr
    assert env.logs(j["job_id"], env.alice).status_code == 200
    assert env.cli("projects", "add-member", "priv-vis", "bob").returncode == 0
    assert "visible output" in env.logs(j["job_id"], env.bob).text
    assert env.job(j["job_id"], env.bob)["spec"]["env"] == {"API_KEY": "k-123"}


HEARTBEAT_UNTIL_REFUSED = r"""
import os, time, urllib.request
url = os.environ['TRAINYARD_URL'] + '/api/trainyard/v1/jobs/' + os.environ['TRAINYARD_JOB_ID'] + '/heartbeat'
while True:
    req = urllib.request.Request(url, data=b'{}', method='POST',
                                 headers={'Authorization': 'Bearer ' + os.environ['TRAINYARD_TOKEN']})
    try:
        urllib.request.urlopen(req, timeout=30).read()
        print('beat', flush=True)
    except urllib.error.HTTPError as e:
        print('refused', e.code, flush=True)
        break
    time.sleep(0.05)
"""


def test_disabled_and_deleted_users_tokens_stop_at_once(env, server, os_users):
    carol = env.create_user("carol", os_users["carol"])
    s = server.session(carol)
    j = env.submit(s, {"name": "beats", "command": python(HEARTBEAT_UNTIL_REFUSED)})["job"]
    env.wait_log(j["job_id"], "beat")
    assert env.bob.post(env.url(f"{API}/users/carol/disable")).status_code == 403
    r = env.cli("users", "disable", "carol")
    assert r.returncode == 0, r.stderr
    r = s.get(env.url(f"{API}/whoami"))
    assert r.status_code == 401 and "disabled" in r.json()["message"], r.text
    # The running job's scoped token died with it.
    env.wait_log(j["job_id"], "refused 401")
    env.wait_state(j["job_id"], "SUCCEEDED")
    users = {u["name"]: u for u in env.admin.get(env.url(f"{API}/users")).json()["users"]}
    assert users["carol"]["disabled"] is True
    assert env.cli("users", "enable", "carol").returncode == 0
    assert s.get(env.url(f"{API}/whoami")).status_code == 200
    # What carol held must not pass to a later user of the same name.
    assert env.cli("projects", "create", "priv-carol").returncode == 0
    assert env.cli("projects", "add-member", "priv-carol", "carol").returncode == 0
    r = env.cli("secrets", "create", "priv-carol-key", token=carol, stdin="carol-value\n")
    assert r.returncode == 0, r.stderr
    r = env.cli("users", "delete", "carol")
    assert r.returncode == 0, r.stderr
    assert s.get(env.url(f"{API}/whoami")).status_code == 401
    names = [u["name"] for u in env.admin.get(env.url(f"{API}/users")).json()["users"]]
    assert "carol" not in names
    new_carol = env.create_user("carol", os_users["carol"])
    project = env.admin.get(env.url(f"{API}/projects/priv-carol")).json()["project"]
    assert "carol" not in project["members"], project
    assert "priv-carol-key" not in env.cli("secrets", "list", token=new_carol).stdout
    assert "priv-carol-key" not in env.admin.get(env.url(f"{API}/secrets")).text
    # Admins cannot lock themselves out.
    assert env.admin.delete(env.url(f"{API}/users/admin")).status_code == 400


USE_SECRET = r"""
import hashlib, os
value = os.environ['HF_TOKEN']
print('sha256', hashlib.sha256(value.encode()).hexdigest(), flush=True)
print('oops, printing it:', value, flush=True)
"""


def test_a_secret_reaches_its_job_and_nobody_sees_it(env, server, tmp_path):
    value = "hf_" + os.urandom(12).hex()
    r = env.cli("secrets", "create", "priv-hf", token=env.tokens["alice"], stdin=value + "\n")
    assert r.returncode == 0, r.stderr
    assert value not in r.stdout + r.stderr
    listed = env.cli("secrets", "list", token=env.tokens["alice"])
    assert "priv-hf" in listed.stdout and value not in listed.stdout
    assert "priv-hf" not in env.cli("secrets", "list", token=env.tokens["bob"]).stdout
    api_list = env.alice.get(env.url(f"{API}/secrets")).text
    assert "priv-hf" in api_list and value not in api_list

    spec_yaml = ("name: uses-secret\n"
                 "working_dir: /\n"
                 "command: " + json.dumps(python(USE_SECRET)) + "\n"
                 "secrets:\n"
                 "  HF_TOKEN: priv-hf\n")
    r = env.alice.post(env.url(f"{API}/jobs"), json={"spec_yaml": spec_yaml,
                                                     "filename": "job.yaml"})
    assert r.status_code == 200, r.text
    j = r.json()["job"]
    assert j["spec"]["secrets"] == {"HF_TOKEN": "priv-hf"}
    env.wait_state(j["job_id"], "SUCCEEDED")
    logs = env.logs(j["job_id"], env.alice).text
    assert "sha256 " + hashlib.sha256(value.encode()).hexdigest() in logs, logs
    assert value not in logs and "oops, printing it: ***" in logs, logs
    cli_logs = env.cli("logs", j["job_id"], token=env.tokens["alice"])
    assert value not in cli_logs.stdout and "***" in cli_logs.stdout, cli_logs.stdout
    for text in (json.dumps(env.job(j["job_id"], env.alice)),
                 env.cli("describe", j["job_id"], token=env.tokens["alice"]).stdout,
                 env.alice.get(env.url(f"{API}/jobs")).text,
                 server.log_path.read_text(errors="replace")):
        assert value not in text
    # Stored sealed: in no file of the data directory but the workload's own output.
    for path in server.data_dir.rglob("*"):
        if "jobs" in path.relative_to(server.data_dir).parts[:1]:
            continue
        if path.is_file() and path.stat().st_size < 64 << 20:
            assert value.encode() not in path.read_bytes(), path
    key = server.data_dir / "secrets.key"
    assert key.stat().st_mode & 0o777 == 0o600

    # Bob may not use alice's secret; a missing one is named with its line.
    r = env.bob.post(env.url(f"{API}/jobs"), json={"spec_yaml": spec_yaml,
                                                   "filename": "job.yaml"})
    assert r.status_code == 403 and "job.yaml:5: secrets.HF_TOKEN" in r.json()["message"], r.text
    r = env.alice.post(env.url(f"{API}/jobs"), json={
        "spec_yaml": spec_yaml.replace("priv-hf", "priv-missing"), "filename": "job.yaml"})
    assert r.status_code == 404, r.text
    assert "job.yaml:5: secrets.HF_TOKEN" in r.json()["message"]
    assert "trainyard secrets create priv-missing" in r.json()["message"]
    # A job's token manages no secrets; only the owner deletes.
    assert env.bob.delete(env.url(f"{API}/secrets/priv-hf")).status_code == 403
    assert env.cli("secrets", "delete", "priv-hf", token=env.tokens["alice"]).returncode == 0
    assert "priv-hf" not in env.alice.get(env.url(f"{API}/secrets")).text


def test_grants_on_registered_models(env):
    r = env.alice.post(env.url(f"{MLFLOW}/registered-models/create"), json={"name": "priv-model"})
    assert r.status_code == 200, r.text
    tag = {"name": "priv-model", "key": "k", "value": "v"}
    assert env.bob.post(env.url(f"{MLFLOW}/registered-models/set-tag"),
                        json=tag).status_code == 403
    r = env.bob.post(env.url(f"{API}/grants/registered_model"),
                     json={"id": "priv-model", "user": "bob", "privilege": "EDIT"})
    assert r.status_code == 403, r.text
    r = env.alice.post(env.url(f"{API}/grants/registered_model"),
                       json={"id": "priv-model", "user": "bob", "privilege": "EDIT"})
    assert r.status_code == 200, r.text
    assert env.bob.post(env.url(f"{MLFLOW}/registered-models/set-tag"),
                        json=tag).status_code == 200
