"""The native trainer (`trainyard train`, the trainyard-train program) end to end, with real
processes: standalone runs, runs as jobs of a real server (the job's MLflow run, checkpoints
through the server, exact resume after a crash, SIGTERM), data parallelism over two CPU
processes started by the local executor, and bad configs.

The model is a tiny random-init Llama (tests/fixtures/train/tiny-llama) with the quickstart's
byte-level BPE tokenizer; the data comes from the quickstart's support-ticket generator.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from conftest import REPO, TRAINYARD_BIN, tail
from test_jobs import Jobs, job

FIXTURES = REPO / "tests" / "fixtures" / "train"
QUICKSTART = REPO / "examples" / "quickstart"
TRAINER = TRAINYARD_BIN.parent / "trainyard-train"


@pytest.fixture(scope="module", params=["sqlite"])
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tickets")
    subprocess.run([sys.executable, str(QUICKSTART / "make_support_tickets.py"), "--out",
                    str(out), "--train", "240", "--val", "32", "--test", "8", "--seed", "7"],
                   check=True, capture_output=True)
    return out


def write_config(path: Path, tickets: Path, out: Path, **over) -> Path:
    """A small training config; `over` replaces sections (dicts are merged)."""
    cfg = {
        "model": {"config": str(FIXTURES / "tiny-llama" / "config.json"),
                  "tokenizer": str(QUICKSTART / "tokenizer.json")},
        "method": "lora",
        "lora": {"rank": 4, "alpha": 8, "dropout": 0.0,
                 "target_modules": ["q_proj", "v_proj", "o_proj"]},
        "data": {"train": str(tickets / "train.jsonl"),
                 "validation": str(tickets / "val.jsonl"),
                 "template": "mistral", "max_seq_len": 96, "packing": True},
        "training": {"max_steps": 8, "micro_batch_size": 4, "grad_accum_steps": 1,
                     "learning_rate": 0.005, "warmup_steps": 2, "lr_schedule": "cosine",
                     "seed": 11, "device": "cpu"},
        "eval": {"max_examples": 16, "max_new_tokens": 6},
        "checkpoint": {"every_steps": 3, "async": True},
        "output": {"dir": str(out)},
        "logging": {"every_steps": 1},
    }
    for k, v in over.items():  # a None value removes the key
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {kk: vv for kk, vv in {**cfg[k], **v}.items() if vv is not None}
        else:
            cfg[k] = v
    path.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
    return path


def clean_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRAINYARD_", "MLFLOW_")) and k not in ("RANK", "WORLD_SIZE")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def train(args, *, env=None, timeout=300, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(TRAINYARD_BIN), "train", *map(str, args)], capture_output=True,
                       text=True, env=env or clean_env(), timeout=timeout)
    if check and r.returncode != 0:
        pytest.fail(f"trainyard train exited {r.returncode}:\n{r.stdout[-3000:]}\n"
                    f"{r.stderr[-3000:]}")
    return r


def step_losses(stdout: str) -> dict[int, float]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("step ") and "| loss " in line:
            step = int(line.split()[1].split("/")[0])
            out[step] = float(line.split("| loss ")[1].split()[0])
    return out


def test_standalone_lora_run_writes_peft_adapter_and_hf_model(tmp_path, data_dir):
    out = tmp_path / "out"
    cfg = write_config(tmp_path / "c.yaml", data_dir, out,
                       training={"max_steps": 12})
    r = train([cfg])
    losses = step_losses(r.stdout)
    assert sorted(losses) == list(range(1, 13)), r.stdout
    assert losses[12] < losses[1], r.stdout  # it learns
    assert "before training: eval loss" in r.stdout and "after training: eval loss" in r.stdout
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["steps"] == 12
    assert summary["eval_loss"] < summary["eval_loss_before"]
    assert 0 <= summary["eval_accuracy"] <= 1
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["peft_type"] == "LORA" and adapter["r"] == 4
    assert sorted(adapter["target_modules"]) == ["o_proj", "q_proj", "v_proj"]
    for f in ("adapter/adapter_model.safetensors", "model/config.json",
              "model/model.safetensors", "model/tokenizer.json", "base_model/config.json",
              "base_model/model.safetensors"):
        assert (out / f).stat().st_size > 0, f
    # Checkpoints went to the local store under the output directory; a second run in the
    # same directory refuses to start over it unless told to resume.
    r2 = train([cfg], check=False)
    assert r2.returncode == 1 and "--resume" in r2.stderr, r2.stderr


def test_resume_after_a_crash_is_exact(tmp_path, data_dir):
    ref = train([write_config(tmp_path / "ref.yaml", data_dir, tmp_path / "ref")])
    cfg = write_config(tmp_path / "crash.yaml", data_dir, tmp_path / "crash")
    crashed = train([cfg, "--exit-after-steps", "5"], check=False)
    assert crashed.returncode == 3, crashed.stdout + crashed.stderr
    resumed = train([cfg, "--resume"])
    assert "resumed from trainyard-checkpoint://local/train/3 at step 3" in resumed.stdout
    a, b = step_losses(ref.stdout), step_losses(resumed.stdout)
    assert sorted(b) == [4, 5, 6, 7, 8]
    for s in b:  # the same data order, RNG and optimizer state: the same losses
        assert math.isclose(a[s], b[s], rel_tol=1e-5), (s, a[s], b[s])


def test_sigterm_checkpoints_and_exits(tmp_path, data_dir):
    cfg = write_config(tmp_path / "c.yaml", data_dir, tmp_path / "out",
                       training={"max_steps": 400}, checkpoint={"every_steps": 0})
    p = subprocess.Popen([str(TRAINYARD_BIN), "train", str(cfg)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=clean_env())
    lines = []
    deadline = time.monotonic() + 120
    for line in p.stdout:
        lines.append(line)
        if line.startswith("step     2/"):
            p.send_signal(signal.SIGTERM)
            break
        assert time.monotonic() < deadline, "".join(lines)
    rest, _ = p.communicate(timeout=120)
    text = "".join(lines) + rest
    assert p.returncode == 128 + signal.SIGTERM, text
    assert "saving a checkpoint" in text and "checkpoint saved: trainyard-checkpoint://local/train/" in text
    step = int(text.split("checkpoint saved: trainyard-checkpoint://local/train/")[1].split()[0])
    assert step >= 2
    r = train([cfg, "--resume", "--max-steps", str(step + 2)])
    assert f"resumed from trainyard-checkpoint://local/train/{step} at step {step}" in r.stdout


def test_bad_configs_name_the_problem(tmp_path, data_dir):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  config: x.json\n  tokenizer: t.json\nmethod: lora\n"
                   "data:\n  train: t.jsonl\ntraining:\n  learning_rate: fast\n")
    r = train([bad], check=False)
    assert r.returncode == 2 and "bad.yaml:8" in r.stderr and "learning_rate" in r.stderr, r.stderr
    r = train([tmp_path / "missing.yaml"], check=False)
    assert r.returncode == 2 and "missing.yaml" in r.stderr
    (tmp_path / "rows.jsonl").write_text('{"message": "hi", "label": "x"}\n{not json\n')
    cfg = write_config(tmp_path / "c.yaml", data_dir, tmp_path / "out",
                       data={"train": str(tmp_path / "rows.jsonl")})
    r = train([cfg], check=False)
    assert r.returncode == 1 and "rows.jsonl:2" in r.stderr, r.stderr
    r = train([write_config(tmp_path / "d.yaml", data_dir, tmp_path / "o2",
                            training={"device": "cuda:7"})], check=False)
    assert r.returncode == 1 and "training.device" in r.stderr, r.stderr


def succeeded(jobs: Jobs, job_id: str, timeout: float = 300) -> dict:
    """Waits for the job to end; fails fast, with its rank logs, when it did not succeed."""
    done = jobs.wait(job_id, lambda j: j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"),
                     "an end state", timeout)
    if done["state"] != "SUCCEEDED":
        logs = "\n".join(f"--- attempt {a['attempt']} rank {r}:\n"
                         + jobs.logs(job_id, attempt=a["attempt"], rank=r)[-2000:]
                         for a in done["attempt_list"] for r in range(a["ranks"]))
        pytest.fail(f"job {job_id} ended {done['state']}:\n{logs}")
    return done


def run_history(server, run_id: str, key: str) -> dict[int, float]:
    s = server.session()
    r = s.get(server.api("/api/2.0/mlflow/metrics/get-history"),
              params={"run_id": run_id, "metric_key": key})
    assert r.status_code == 200, r.text
    return {m["step"]: m["value"] for m in r.json().get("metrics", [])}


def test_as_a_job_logs_to_its_run_and_resumes_exactly_after_a_crash(server_factory, tmp_path,
                                                                     data_dir):
    server = server_factory.new(["--local-cpus", "2"])
    jobs = Jobs(server)
    ref_cfg = write_config(tmp_path / "ref.yaml", data_dir, tmp_path / "ref")
    cfg = write_config(tmp_path / "job.yaml", data_dir, tmp_path / "job")
    ref = jobs.submit(job("ref", f"{TRAINYARD_BIN} train {ref_cfg}", env={"OMP_NUM_THREADS": "1"}))
    # The first attempt dies after 5 steps (its last checkpoint is step 3); the second resumes.
    crashy = jobs.submit(job(
        "crashy",
        f'if [ "$TRAINYARD_ATTEMPT" = 1 ]; then X="--exit-after-steps 5"; fi; '
        f"exec {TRAINYARD_BIN} train {cfg} $X",
        restart_backoff="200ms", env={"OMP_NUM_THREADS": "1"}))
    r = succeeded(jobs, ref["job_id"])
    done = succeeded(jobs, crashy["job_id"])
    assert [a["state"] for a in done["attempt_list"]] == ["failed", "succeeded"]
    assert done["attempt_list"][1]["resumed_from"].endswith("/3")
    assert "resumed from trainyard-checkpoint://" in jobs.logs(crashy["job_id"], attempt=2)
    a = run_history(server, r["run_id"], "loss")
    b = run_history(server, done["run_id"], "loss")
    assert sorted(a) == sorted(b) == list(range(1, 9))
    for s in range(4, 9):
        assert math.isclose(a[s], b[s], rel_tol=1e-5), (s, a[s], b[s])
    for key in ("learning_rate", "grad_norm", "tokens_per_second", "eval_loss",
                "eval_accuracy", "eval_perplexity"):
        assert run_history(server, r["run_id"], key), key
    s = server.session()
    got = s.get(server.api("/api/2.0/mlflow/runs/get"), params={"run_id": r["run_id"]}).json()
    params = {p["key"]: p["value"] for p in got["run"]["data"].get("params", [])}
    assert params["method"] == "lora" and params["lora.rank"] == "4", params
    arts = s.get(server.api("/api/2.0/mlflow/artifacts/list"),
                 params={"run_id": r["run_id"], "path": "adapter"}).json()
    names = sorted(Path(f["path"]).name for f in arts.get("files", []))
    assert names == ["adapter_config.json", "adapter_model.safetensors"], arts
    # The final checkpoint is the job's latest.
    assert done["latest_checkpoint"]["step"] == 8


def test_two_ranks_equal_one_rank_with_the_same_global_batch(server_factory, tmp_path,
                                                               data_dir):
    server = server_factory.new(["--local-cpus", "2"])
    jobs = Jobs(server)
    one = write_config(tmp_path / "one.yaml", data_dir, tmp_path / "one",
                       training={"micro_batch_size": 4, "max_steps": 5})
    two = write_config(tmp_path / "two.yaml", data_dir, tmp_path / "two",
                       training={"micro_batch_size": 2, "max_steps": 5})
    j1 = jobs.submit(job("one", f"{TRAINYARD_BIN} train {one}", env={"OMP_NUM_THREADS": "1"}))
    j2 = jobs.submit(job("two", f"{TRAINYARD_BIN} train {two}", env={"OMP_NUM_THREADS": "1"},
                         resources={"cpus_per_node": 2}, processes_per_node=2))
    a = succeeded(jobs, j1["job_id"])
    b = succeeded(jobs, j2["job_id"])
    assert "2 rank(s)" in jobs.logs(j2["job_id"], attempt=1, rank=0)
    la, lb = run_history(server, a["run_id"], "loss"), run_history(server, b["run_id"], "loss")
    assert sorted(la) == sorted(lb) == [1, 2, 3, 4, 5]
    for s in la:
        assert math.isclose(la[s], lb[s], rel_tol=1e-4), (s, la[s], lb[s])


def test_instruction_data_gpt2_and_continuing_from_a_saved_hf_model(tmp_path, data_dir):
    # Instruction data ({instruction, response}) with the ChatML template on a GPT-2 model.
    rows = [{"instruction": f"Say the colour number {i}.", "response": f"Colour {i % 5}."}
            for i in range(40)]
    (tmp_path / "inst.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gpt2 = tmp_path / "gpt2.json"
    gpt2.write_text(json.dumps({"model_type": "gpt2", "vocab_size": 2048, "n_embd": 64,
                                "n_layer": 2, "n_head": 4, "n_positions": 128,
                                "bos_token_id": 2043, "eos_token_id": 2044}))
    out = tmp_path / "gpt2-out"
    cfg = write_config(tmp_path / "g.yaml", data_dir, out,
                       model={"config": str(gpt2), "tokenizer": str(QUICKSTART / "tokenizer.json")},
                       lora={"rank": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["c_attn"]},
                       data={"train": str(tmp_path / "inst.jsonl"), "validation": None,
                             "val_fraction": 0.2, "template": "chatml"},
                       training={"max_steps": 4, "activation_checkpointing": True})
    r = train([cfg])
    assert "model: gpt2 (2 layers, hidden 64)" in r.stdout, r.stdout
    assert "accuracy" not in r.stdout.split("after training:")[1]  # no labels: loss only
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["fan_in_fan_out"] is True and adapter["target_modules"] == ["c_attn"]
    # The merged model is a Hugging Face directory; a full fine-tune continues from it.
    cfg2 = write_config(tmp_path / "full.yaml", data_dir, tmp_path / "full-out",
                        model={"path": str(out / "model"), "config": None, "tokenizer": None},
                        method="full",
                        data={"train": str(tmp_path / "inst.jsonl"), "validation": None,
                              "val_fraction": 0.2, "template": "alpaca"},
                        training={"max_steps": 3})
    r2 = train([cfg2])
    assert "model: gpt2" in r2.stdout and "trainable" in r2.stdout
    assert not (tmp_path / "full-out" / "adapter").exists()
    assert (tmp_path / "full-out" / "model" / "model.safetensors").stat().st_size > 0
