"""Jobs with real processes: submit, gang scheduling, recovery from crashes and hangs,
preemption with a grace signal, backfill, fair share, cost, and a server SIGKILL while jobs run.

The workloads are real child processes started by the server's local executor. The pool is this
machine, optionally presented as several nodes and with virtual GPU slots (--local-gpus), so
the scheduling rules can be exercised without GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TRAINYARD_BIN
from jobs_client import JobsClient

WORKLOADS = Path(__file__).resolve().parent / "workloads"
PY = sys.executable
COUNTER = f"{PY} {WORKLOADS / 'counter_train.py'}"
API = "/api/trainyard/v1"


@pytest.fixture(scope="module", params=["sqlite"])
def backend(request) -> str:
    # One backend is enough for process behaviour; the store suite covers PostgreSQL, and
    # test_jobs_on_postgresql below runs the basic path there.
    return request.param


class Jobs(JobsClient):
    """The jobs client, with the workloads as the default working directory."""

    def __init__(self, server):
        super().__init__(server, spec_defaults={"working_dir": str(WORKLOADS)})


def job(name: str, command: str, **kw) -> dict:
    spec = {"name": name, "command": command}
    spec.update(kw)
    return spec


def after_a_scheduling_pass(jobs: Jobs, name: str, **resources) -> None:
    """Returns once the scheduler has decided about every job queued so far, at least twice.

    Submits a short probe job that fits the free `resources` now and waits for it to succeed:
    every scheduling pass considers the whole queue, so the pass that started the probe and the
    one that saw it exit both decided about every job queued before it. An assertion that a job
    has still not started then checks decisions made after this point, not the passing of time.
    """
    probe = jobs.submit(job(name, "true", time_limit="5s", resources=resources))
    jobs.wait_state(probe["job_id"], "SUCCEEDED")


def test_multi_rank_job_sees_torchrun_env_and_logs_to_its_mlflow_run(server_factory, tmp_path):
    server = server_factory.new(["--local-cpus", "8"])
    jobs = Jobs(server)
    script = tmp_path / "envdump.py"
    script.write_text(
        "import json, os, mlflow\n"
        "keys = ['RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'NODE_RANK', "
        "'MASTER_ADDR', 'MASTER_PORT', 'CUDA_VISIBLE_DEVICES', 'TRAINYARD_JOB_ID', "
        "'TRAINYARD_ATTEMPT', 'MLFLOW_RUN_ID', 'MLFLOW_TRACKING_URI', 'GREETING']\n"
        "env = {k: os.environ.get(k) for k in keys}\n"
        "open(os.environ['OUT_DIR'] + '/rank-' + os.environ['RANK'] + '.json', 'w')"
        ".write(json.dumps(env))\n"
        "if os.environ['RANK'] == '0':\n"
        "    with mlflow.start_run():\n"
        "        mlflow.log_param('lr', 0.001)\n"
        "        for step in range(3):\n"
        "            mlflow.log_metric('loss', 1.0 / (step + 1), step=step)\n"
        "print('rank', os.environ['RANK'], 'done')\n")
    j = jobs.submit(job("envdump", f"{PY} {script}", processes_per_node=3,
                        env={"OUT_DIR": str(tmp_path), "GREETING": "hi"}))
    done = jobs.wait_state(j["job_id"], "SUCCEEDED")
    envs = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(3)]
    assert sorted(e["RANK"] for e in envs) == ["0", "1", "2"]
    for e in envs:
        assert e["WORLD_SIZE"] == "3" and e["LOCAL_WORLD_SIZE"] == "3"
        assert e["NODE_RANK"] == "0" and e["RANK"] == e["LOCAL_RANK"]
        assert e["MASTER_ADDR"] == "127.0.0.1" and int(e["MASTER_PORT"]) > 0
        assert e["CUDA_VISIBLE_DEVICES"] == ""
        assert e["TRAINYARD_JOB_ID"] == j["job_id"] and e["TRAINYARD_ATTEMPT"] == "1"
        assert e["MLFLOW_RUN_ID"] == j["run_id"]
        assert e["MLFLOW_TRACKING_URI"] == server.url
        assert e["GREETING"] == "hi"
    assert len({e["MASTER_PORT"] for e in envs}) == 1
    for r in range(3):
        assert f"rank {r} done" in jobs.logs(j["job_id"], rank=r)
    # The workload logged through the unmodified mlflow client, with the job's scoped token.
    r = jobs.s.get(server.api("/api/2.0/mlflow/runs/get"), params={"run_id": j["run_id"]})
    run = r.json()["run"]
    assert run["info"]["status"] == "FINISHED"
    assert {"key": "lr", "value": "0.001"} in run["data"]["params"]
    assert [m["value"] for m in run["data"]["metrics"] if m["key"] == "loss"] == [1.0 / 3]
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["trainyard.job_id"] == j["job_id"]
    assert done["attempt_list"][0]["state"] == "succeeded"
    assert done["attempt_list"][0]["ranks"] == 3


def test_crash_resumes_from_checkpoint_with_the_same_final_state(server_factory, tmp_path):
    server = server_factory.new(["--local-cpus", "4"])
    jobs = Jobs(server)
    common = {"STEPS": "12", "STEP_SECONDS": "0.01"}
    ref = jobs.submit(job("reference", COUNTER, env={**common, "OUT": str(tmp_path / "ref")}))
    crashy = jobs.submit(job("crashy", COUNTER, restart_backoff="200ms",
                             env={**common, "OUT": str(tmp_path / "crashy"),
                                  "CRASH_AT_STEP": "5", "CHECKPOINT_EVERY": "1"}))
    jobs.wait_state(ref["job_id"], "SUCCEEDED")
    done = jobs.wait_state(crashy["job_id"], "SUCCEEDED")
    assert json.loads((tmp_path / "crashy").read_text()) == json.loads(
        (tmp_path / "ref").read_text())
    attempts = done["attempt_list"]
    assert [a["state"] for a in attempts] == ["failed", "succeeded"]
    assert attempts[0]["exit_code"] == 3 and attempts[0]["failed_rank"] == 0
    assert "exit code 3 on rank 0" in attempts[0]["cause"]
    assert attempts[1]["resumed_from"].endswith("step-5.json")
    assert "starts at step 5" in jobs.logs(crashy["job_id"], attempt=2)
    assert "crashing at step 5" in jobs.logs(crashy["job_id"], attempt=1)
    assert done["restarts"] == 1
    assert done["latest_checkpoint"]["step"] == 12
    # The failed attempt's work up to its checkpoint counts as productive.
    assert 0 < done["goodput"] <= 1
    # The CLI's describe shows the attempts and their causes.
    out = subprocess.run([str(TRAINYARD_BIN), "describe", crashy["job_id"], "--url", server.url,
                          "--token", server.token], capture_output=True, text=True, check=True)
    assert "exit code 3 on rank 0" in out.stdout and "succeeded" in out.stdout


def test_hung_job_is_detected_and_restarted(server_factory, tmp_path):
    server = server_factory.new(["--local-cpus", "4"])
    jobs = Jobs(server)
    j = jobs.submit(job("hangs", COUNTER, hang_timeout="1500ms", preemption_grace="500ms",
                        restart_backoff="100ms",
                        env={"STEPS": "6", "HANG_AT_STEP": "3", "OUT": str(tmp_path / "o")}))
    done = jobs.wait_state(j["job_id"], "SUCCEEDED", timeout=60)
    first, second = done["attempt_list"]
    assert first["state"] == "hung", first
    assert "no heartbeat or metric" in first["cause"]
    assert second["state"] == "succeeded"
    assert second["resumed_from"].endswith("step-3.json")
    assert json.loads((tmp_path / "o").read_text())["step"] == 6


def test_logged_metrics_count_as_progress(server_factory, tmp_path):
    server = server_factory.new(["--local-cpus", "4"])
    jobs = Jobs(server)
    script = tmp_path / "metrics.py"
    # The metrics go to the job's run through the MLflow REST API with the standard library:
    # importing the mlflow client takes several seconds on a loaded machine, a silence before
    # the first metric that would itself exceed the hang timeout (test_multi_rank_... covers
    # the mlflow client).
    script.write_text(
        "import json, os, time, urllib.request\n"
        "url = os.environ['MLFLOW_TRACKING_URI'] + '/api/2.0/mlflow/runs/log-metric'\n"
        "headers = {'Authorization': 'Bearer ' + os.environ['MLFLOW_TRACKING_TOKEN'],\n"
        "           'Content-Type': 'application/json'}\n"
        "for step in range(24):\n"
        "    body = {'run_id': os.environ['MLFLOW_RUN_ID'], 'key': 'loss',\n"
        "            'value': 1.0 / (step + 1), 'timestamp': int(time.time() * 1000),\n"
        "            'step': step}\n"
        "    req = urllib.request.Request(url, data=json.dumps(body).encode(),\n"
        "                                 headers=headers, method='POST')\n"
        "    urllib.request.urlopen(req, timeout=30).read()\n"
        "    time.sleep(0.25)\n")
    # 6 s of work, a metric every 0.25 s, no heartbeats: never hung with a 4 s timeout.
    j = jobs.submit(job("metrics-only", f"{PY} {script}", hang_timeout="4s"))
    done = jobs.wait_state(j["job_id"], "SUCCEEDED")
    assert done["attempts"] == 1, done["attempt_list"]
    r = jobs.s.get(server.api("/api/2.0/mlflow/metrics/get-history"),
                   params={"run_id": j["run_id"], "metric_key": "loss"})
    assert len(r.json()["metrics"]) == 24, r.text[:2000]


def test_preemption_sends_the_grace_signal_and_requeues(server_factory, tmp_path):
    server = server_factory.new(["--local-cpus", "2"])
    jobs = Jobs(server)
    low = jobs.submit(job("low", COUNTER, priority=0, preemptible=True,
                          resources={"cpus_per_node": 2}, preemption_grace="10s",
                          env={"STEPS": "400", "STEP_SECONDS": "0.05",
                               "CHECKPOINT_EVERY": "1000", "OUT": str(tmp_path / "low")}))
    jobs.wait_state(low["job_id"], "RUNNING")
    jobs.wait(low["job_id"], lambda j: "starts at step" in jobs.logs(j["job_id"]), "started")
    high = jobs.submit(job("high", "echo high priority work", priority=10,
                           resources={"cpus_per_node": 2}))
    jobs.wait_state(high["job_id"], "SUCCEEDED")
    victim = jobs.wait(low["job_id"], lambda j: len(j["attempt_list"]) >= 2, "second attempt")
    first = victim["attempt_list"][0]
    assert first["state"] == "preempted"
    assert high["job_id"] in first["cause"]
    log = jobs.logs(low["job_id"], attempt=1)
    assert "got SIGTERM" in log and "checkpointed step" in log
    # The checkpoint written on SIGTERM is where the second attempt resumes.
    assert victim["attempt_list"][1]["resumed_from"] != ""
    assert victim["restarts"] == 0  # a preemption is not a failure
    jobs.cancel(low["job_id"])
    jobs.wait_state(low["job_id"], "CANCELLED")


def test_gang_job_never_starts_on_fewer_slots_and_explains_why(server_factory):
    server = server_factory.new(["--local-gpus", "4", "--local-cpus", "8"])
    jobs = Jobs(server)
    holder = jobs.submit(job("holder", "sleep 60", resources={"gpus_per_node": 2}))
    jobs.wait_state(holder["job_id"], "RUNNING")
    gang = jobs.submit(job("gang", "echo ran on $CUDA_VISIBLE_DEVICES", processes_per_node=1,
                           resources={"gpus_per_node": 3}))
    pending = jobs.wait(gang["job_id"], lambda j: "3" in j["message"], "a pending reason")
    assert pending["state"] == "PENDING" and pending["attempts"] == 0
    assert pending["queue_position"] == 1
    assert "largest free block is 2" in pending["message"], pending["message"]
    # A CPU-only probe leaves the 2 free GPUs, and the pending reason, as they are.
    after_a_scheduling_pass(jobs, "gang-probe", cpus_per_node=1)
    assert jobs.get(gang["job_id"])["attempts"] == 0
    out = subprocess.run([str(TRAINYARD_BIN), "jobs", "--url", server.url, "--token",
                          server.token], capture_output=True, text=True, check=True).stdout
    assert "largest free block is 2" in out
    jobs.cancel(holder["job_id"])
    jobs.wait_state(gang["job_id"], "SUCCEEDED")
    gpus = jobs.logs(gang["job_id"]).split("ran on ")[1].strip().split(",")
    assert len(gpus) == 3


def test_request_larger_than_the_pool_is_rejected_at_submit(server_factory):
    server = server_factory.new(["--local-gpus", "2", "--local-nodes", "2"])
    jobs = Jobs(server)
    r = jobs.submit(job("huge", "true", resources={"gpus_per_node": 4}), expect=400)
    assert "GPU" in r["message"] and "resources" in r["message"]
    r = jobs.submit(job("wide", "true", resources={"nodes": 3}), expect=400)
    assert "node" in r["message"]


def test_backfill_uses_idle_slots_without_delaying_the_reserved_job(server_factory):
    server = server_factory.new(["--local-gpus", "4", "--local-cpus", "16"])
    jobs = Jobs(server)
    big_runner = jobs.submit(job("runner", "sleep 60", time_limit="60s",
                                 resources={"gpus_per_node": 3}))
    jobs.wait_state(big_runner["job_id"], "RUNNING")
    top = jobs.submit(job("needs-all", "echo top", priority=5, resources={"gpus_per_node": 4}))
    unbounded = jobs.submit(job("no-limit", "sleep 30", resources={"gpus_per_node": 1}))
    short = jobs.submit(job("short", "echo short", time_limit="5s",
                            resources={"gpus_per_node": 1}))
    # The short job ends before the reservation starts: it backfills the idle GPU.
    jobs.wait_state(short["job_id"], "SUCCEEDED")
    # The job without a time limit would delay the reservation: it must wait, while a job that
    # ends in time takes the same free GPU (queued after it, so decided in the same passes).
    after_a_scheduling_pass(jobs, "backfill-probe", gpus_per_node=1)
    assert jobs.get(unbounded["job_id"])["attempts"] == 0
    assert jobs.get(top["job_id"])["state"] == "PENDING"
    jobs.cancel(big_runner["job_id"])
    jobs.wait_state(top["job_id"], "SUCCEEDED")
    jobs.wait_state(unbounded["job_id"], "RUNNING")
    jobs.cancel(unbounded["job_id"])
    jobs.wait_state(unbounded["job_id"], "CANCELLED")


def test_fair_share_alternates_between_projects(server_factory):
    server = server_factory.new(["--local-cpus", "1"])
    jobs = Jobs(server)
    blocker = jobs.submit(job("blocker", "sleep 1"))
    jobs.wait_state(blocker["job_id"], "RUNNING")
    ids = []
    for i in range(4):
        ids.append(("alpha", jobs.submit(job(f"a{i}", "sleep 0.2", project="alpha"))["job_id"]))
    for i in range(4):
        ids.append(("beta", jobs.submit(job(f"b{i}", "sleep 0.2", project="beta"))["job_id"]))
    for _, jid in ids:
        jobs.wait_state(jid, "SUCCEEDED")
    order = sorted(ids, key=lambda p: jobs.get(p[1])["attempt_list"][0]["started_at"])
    first_half = [p for p, _ in order[:4]]
    # FIFO would run all of alpha first; fair share interleaves the projects.
    assert first_half.count("beta") >= 2, [p for p, _ in order]


def test_failure_policies_and_crash_loop_guard(server_factory):
    server = server_factory.new(["--local-cpus", "4", "--local-nodes", "2"])
    jobs = Jobs(server)
    oom = jobs.submit(job("oom", "echo 'RuntimeError: CUDA out of memory. Tried to allocate'; "
                          "exit 1", restart_backoff="100ms"))
    done = jobs.wait_state(oom["job_id"], "FAILED")
    assert done["attempts"] == 1
    assert "CUDA out of memory" in done["message"] and "not retried" in done["message"]

    flaky = jobs.submit(job("flaky-node", "if [ $TRAINYARD_ATTEMPT = 1 ]; then echo 'NCCL "
                            "error: bad link on this node'; exit 1; fi; echo ok",
                            restart_backoff="100ms",
                            failure_policies=[{"pattern": "NCCL error", "action":
                                               "avoid_node"}]))
    done = jobs.wait_state(flaky["job_id"], "SUCCEEDED")
    first, second = done["attempt_list"]
    assert done["excluded_nodes"] == first["nodes"]
    assert second["nodes"] != first["nodes"]

    loop = jobs.submit(job("crash-loop", "exit 7", max_restarts=10, crash_loop_limit=3,
                           restart_backoff="50ms"))
    done = jobs.wait_state(loop["job_id"], "FAILED")
    assert done["attempts"] == 3
    assert "crash loop" in done["message"]
    backoffs = [b["started_at"] - a["ended_at"] for a, b in zip(done["attempt_list"],
                                                                 done["attempt_list"][1:])]
    assert backoffs[1] >= backoffs[0] >= 50  # exponential backoff

    capped = jobs.submit(job("gives-up", "exit 2", max_restarts=1, restart_backoff="50ms"))
    done = jobs.wait_state(capped["job_id"], "FAILED")
    assert done["attempts"] == 2 and "gave up after 2 attempt(s)" in done["message"]


def test_cost_and_goodput(server_factory, tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("pools:\n  local:\n    provider: test\n    gpu_type: virtual\n"
                      "    gpu_hour_on_demand: 3600\n    gpu_hour_spot: 1800\n")
    server = server_factory.new(["--local-gpus", "2", "--local-cpus", "4",
                                 "--price-catalog", str(prices)])
    jobs = Jobs(server)
    j = jobs.submit(job("priced", "sleep 0.5", resources={"gpus_per_node": 2}))
    done = jobs.wait_state(j["job_id"], "SUCCEEDED")
    a = done["attempt_list"][0]
    seconds = (a["ended_at"] - a["started_at"]) / 1000
    # $3600 per GPU-hour is $1 per GPU-second: 2 GPUs.
    assert done["cost_usd"] == pytest.approx(2 * seconds, rel=0.01)
    assert done["goodput"] == pytest.approx(1.0)
    spot = jobs.submit(job("spot", "sleep 0.3", preemptible=True,
                           resources={"gpus_per_node": 1}))
    done = jobs.wait_state(spot["job_id"], "SUCCEEDED")
    a = done["attempt_list"][0]
    assert done["cost_usd"] == pytest.approx(0.5 * (a["ended_at"] - a["started_at"]) / 1000,
                                             rel=0.01)
    # A failed attempt without a checkpoint is paid but not productive.
    lost = jobs.submit(job("wasted", "sleep 0.3; exit 1", max_restarts=0,
                           resources={"gpus_per_node": 1}))
    done = jobs.wait_state(lost["job_id"], "FAILED")
    assert done["goodput"] == 0 and done["cost_usd"] > 0


def test_server_sigkill_while_jobs_run(server_factory, tmp_path):
    server = server_factory.new(["--local-cpus", "4"])
    jobs = Jobs(server)
    long = jobs.submit(job("survivor", COUNTER, env={"STEPS": "60", "STEP_SECONDS": "0.05",
                                                     "OUT": str(tmp_path / "survivor")}))
    short = jobs.submit(job("ends-while-down", "sleep 0.5; echo finished"))
    jobs.wait_state(long["job_id"], "RUNNING")
    jobs.wait_state(short["job_id"], "RUNNING")
    server.kill()
    # The short job ends while no server is watching: its shim leaves the exit file.
    exit_file = server.data_dir / "jobs" / short["job_id"] / "attempt-1" / "rank-0.exit"
    deadline = time.monotonic() + 30
    while not exit_file.exists():
        assert time.monotonic() < deadline, f"{exit_file} never appeared"
        time.sleep(0.02)  # polling, bounded by the deadline
    # Back on the same address: the running workloads hold TRAINYARD_URL.
    server.extra_args += ["--port", str(server.port)]
    server.start()
    jobs = Jobs(server)
    done = jobs.wait_state(short["job_id"], "SUCCEEDED")
    assert done["attempts"] == 1  # resolved from its exit file, not rerun
    done = jobs.wait_state(long["job_id"], "SUCCEEDED", timeout=90)
    assert done["attempts"] == 1  # re-adopted, never restarted
    assert json.loads((tmp_path / "survivor").read_text())["step"] == 60


def test_bad_input_and_scoped_tokens(server_factory, tmp_path):
    server = server_factory.new(["--local-cpus", "2"])
    jobs = Jobs(server)
    s = jobs.s
    r = s.post(server.api(f"{API}/jobs"), data="{not json")
    assert r.status_code == 400
    r = s.post(server.api(f"{API}/jobs"), json={"spec": {"name": "x", "command": "true",
                                                        "resources": {"nodes": "2"}}})
    assert r.status_code == 400 and "spec: resources.nodes" in r.json()["message"]
    r = s.post(server.api(f"{API}/jobs"), json={"spec": {"name": "x", "command": "true",
                                                        "priorty": 1}})
    assert r.status_code == 400 and "priorty is not a known key" in r.json()["message"]
    r = s.post(server.api(f"{API}/jobs"), json={"spec_yaml": "name: x\ncommand: true\n"
                                                             "time_limit: soon\n"})
    assert r.status_code == 400 and "job.yaml:3: time_limit" in r.json()["message"]
    r = s.get(server.api(f"{API}/jobs/j-nope"))
    assert r.status_code == 404
    r = s.get(server.api(f"{API}/jobs"), params={"state": "SLEEPING"})
    assert r.status_code == 400 and "state" in r.json()["message"]
    r = s.get(server.api(f"{API}/jobs/j-nope/logs"))
    assert r.status_code == 404

    # A job's token may report for its own job only, and may not mint tokens.
    out = tmp_path / "scoped"
    a = jobs.submit(job("a", "sleep 30"))
    b = jobs.submit(job("b", f"echo $TRAINYARD_TOKEN > {out}; sleep 30"))
    jobs.wait_state(a["job_id"], "RUNNING")
    jobs.wait(b["job_id"], lambda j: out.exists() and out.read_text().strip(), "token written")
    scoped = server.session(out.read_text().strip())
    r = scoped.post(server.api(f"{API}/jobs/{b['job_id']}/heartbeat"))
    assert r.status_code == 200, r.text
    r = scoped.post(server.api(f"{API}/jobs/{a['job_id']}/checkpoints"),
                    json={"step": 1, "path": "/x"})
    assert r.status_code == 403
    r = scoped.post(server.api(f"{API}/tokens"), json={})
    assert r.status_code == 403
    r = scoped.post(server.api(f"{API}/jobs/{b['job_id']}/checkpoints"), json={"step": "x"})
    assert r.status_code == 400 and "step" in r.json()["message"]
    # Another user may read but not cancel.
    mallory = server.session(server.create_user("mallory"))
    assert mallory.get(server.api(f"{API}/jobs/{a['job_id']}")).status_code == 200
    assert mallory.post(server.api(f"{API}/jobs/{a['job_id']}/cancel")).status_code == 403
    jobs.cancel(a["job_id"])
    jobs.cancel(b["job_id"])
    jobs.wait_state(a["job_id"], "CANCELLED")
    done = jobs.wait_state(b["job_id"], "CANCELLED")
    assert done["attempt_list"][0]["state"] == "cancelled"
    # The attempt's token was revoked when it ended.
    r = scoped.post(server.api(f"{API}/jobs/{b['job_id']}/heartbeat"))
    assert r.status_code == 401
    server.assert_alive()


def test_cli_submit_follow_logs_and_errors(server_factory, tmp_path):
    server = server_factory.new(["--local-cpus", "2"])
    env = {**os.environ, "TRAINYARD_URL": server.url, "TRAINYARD_TOKEN": server.token}
    spec = tmp_path / "job.yaml"
    spec.write_text("name: cli-job\ncommand: echo \"hello from rank $RANK\"\n"
                    "processes_per_node: 2\n")
    r = subprocess.run([str(TRAINYARD_BIN), "submit", str(spec), "--follow"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "hello from rank 0" in r.stdout
    assert "SUCCEEDED" in r.stderr and "attempt 1 started" in r.stderr
    job_id = r.stderr.split("Submitted job ")[1].split()[0]
    r = subprocess.run([str(TRAINYARD_BIN), "logs", job_id, "--rank", "1"], env=env,
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "hello from rank 1"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: cli-job\ncommand: true\nresources:\n  gpus_per_node: two\n")
    r = subprocess.run([str(TRAINYARD_BIN), "submit", str(bad)], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 1
    assert f"{bad}:4: resources.gpus_per_node must be a non-negative integer" in r.stderr
    failing = tmp_path / "fail.yaml"
    failing.write_text("name: fails\ncommand: exit 4\nmax_restarts: 0\n")
    r = subprocess.run([str(TRAINYARD_BIN), "submit", str(failing), "-f"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "FAILED" in r.stderr


@pytest.mark.parametrize("backend", ["postgresql"], indirect=False)
def test_jobs_on_postgresql(server_factory, backend):
    server = server_factory.new(["--local-cpus", "2"])
    jobs = Jobs(server)
    j = jobs.submit(job("pg-job", "exit 1", max_restarts=1, restart_backoff="50ms"))
    done = jobs.wait_state(j["job_id"], "FAILED")
    assert [a["state"] for a in done["attempt_list"]] == ["failed", "failed"]
    r = jobs.s.get(server.api(f"{API}/jobs"), params={"state": "FAILED"})
    assert j["job_id"] in [x["job_id"] for x in r.json()["jobs"]]
