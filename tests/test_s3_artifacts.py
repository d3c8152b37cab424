"""`trainyard server --artifacts s3://bucket/prefix`: the real mlflow client logs, lists and
downloads artifacts through the server, and the objects land in a real S3-compatible server
(moto's, started by tests/moto_s3.py with signature verification on), where boto3 sees them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import mlflow
import pytest

from conftest import LOG_LEVEL, TRAINYARD_BIN, _die_with_parent, point_mlflow_at

BUCKET = "trainyard-artifacts"
PREFIX = "mlflow"


@pytest.fixture(scope="module")
def backend() -> str:
    """Artifacts do not depend on the metadata store: SQLite only."""
    return "sqlite"


@pytest.fixture(scope="module")
def moto_s3():
    script = Path(__file__).resolve().parent / "moto_s3.py"
    proc = subprocess.Popen([sys.executable, str(script), "--bucket", BUCKET],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=_die_with_parent)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout=90)
    if not line or not line[0].strip():
        proc.kill()
        proc.wait()
        pytest.fail("tests/moto_s3.py did not start moto's S3 server (is moto[server] installed? "
                    "run scripts/install-deps)")
    info = json.loads(line[0])
    try:
        yield info
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def s3_env(info: dict, secret: str | None = None) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": info["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": secret or info["secret_access_key"],
            "AWS_REGION": info["region"],
            "AWS_ENDPOINT_URL_S3": info["endpoint"]}


def boto3_s3(info: dict):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=info["endpoint"], region_name=info["region"],
                        aws_access_key_id=info["access_key_id"],
                        aws_secret_access_key=info["secret_access_key"],
                        config=Config(s3={"addressing_style": "path"}))


def test_mlflow_artifacts_go_to_s3(moto_s3, server_factory, monkeypatch, tmp_path):
    for name, value in s3_env(moto_s3).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    server = server_factory.new(extra_args=["--artifacts", f"s3://{BUCKET}/{PREFIX}"])
    point_mlflow_at(server, monkeypatch)

    small = tmp_path / "notes.txt"
    small.write_text("stored in S3\n")
    big = tmp_path / "weights.bin"
    big.write_bytes(os.urandom((12 << 20) + 5))  # over the 8 MiB part size: multipart upload
    mlflow.set_experiment("s3-artifacts")
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(small), artifact_path="outputs")
        mlflow.log_artifact(str(big), artifact_path="ckpt")
        mlflow.log_text("λ text", "outputs/sub/t.txt")
    rid = run.info.run_id
    client = mlflow.MlflowClient()

    listing = {f.path: f for f in client.list_artifacts(rid, "outputs")}
    assert set(listing) == {"outputs/notes.txt", "outputs/sub"}
    assert listing["outputs/sub"].is_dir
    assert listing["outputs/notes.txt"].file_size == len("stored in S3\n")
    assert [(f.path, f.file_size) for f in client.list_artifacts(rid, "ckpt")] == \
        [("ckpt/weights.bin", big.stat().st_size)]

    got = client.download_artifacts(rid, "outputs/notes.txt", str(tmp_path / "dl1"))
    assert Path(got).read_text() == "stored in S3\n"
    got = mlflow.artifacts.download_artifacts(run_id=rid, artifact_path="ckpt/weights.bin",
                                              dst_path=str(tmp_path / "dl2"))
    assert Path(got).read_bytes() == big.read_bytes()
    whole = Path(mlflow.artifacts.download_artifacts(run_id=rid, dst_path=str(tmp_path / "dl3")))
    assert (whole / "outputs" / "sub" / "t.txt").read_text() == "λ text"
    with pytest.raises(Exception):
        client.download_artifacts(rid, "outputs/missing.txt", str(tmp_path / "dl4"))

    # The objects are in the bucket under the prefix, as S3 itself reports them.
    s3 = boto3_s3(moto_s3)
    keys = {o["Key"]: o for o in
            s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/")["Contents"]}
    small_key = next(k for k in keys if k.endswith(f"/{rid}/artifacts/outputs/notes.txt"))
    big_key = next(k for k in keys if k.endswith(f"/{rid}/artifacts/ckpt/weights.bin"))
    assert s3.get_object(Bucket=BUCKET, Key=small_key)["Body"].read() == b"stored in S3\n"
    head = s3.head_object(Bucket=BUCKET, Key=big_key)
    assert head["ContentLength"] == big.stat().st_size
    assert head["ETag"].strip('"').endswith("-2"), f"not a 2-part multipart ETag: {head['ETag']}"

    # Deleting through the server removes the objects.
    with server.session() as s:
        r = s.delete(server.api(f"/api/2.0/mlflow-artifacts/artifacts/{small_key[len(PREFIX) + 1:]}"))
        assert r.status_code == 200, r.text
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix=small_key)


def test_server_refuses_to_start_with_a_wrong_secret(moto_s3, tmp_path):
    env = {**os.environ, **s3_env(moto_s3, secret="wrong-" + moto_s3["secret_access_key"])}
    for name in ("AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE"):
        env.pop(name, None)
    proc = subprocess.run(
        [str(TRAINYARD_BIN), "server", "--data-dir", str(tmp_path / "data"), "--port", "0",
         "--log-level", LOG_LEVEL, "--artifacts", f"s3://{BUCKET}/{PREFIX}"],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "SignatureDoesNotMatch" in out, out
    assert BUCKET in out and "AWS_SECRET_ACCESS_KEY" in out, out


def test_checkpoints_on_s3_resume_a_crashed_job(moto_s3, server_factory, monkeypatch, tmp_path):
    """`--checkpoints s3://...`: the SDK's saves land in the bucket as chunks and manifests, a
    crashed job resumes from them, and verify reads them back."""
    from test_checkpoints import PY, WORKLOADS, Jobs

    for name, value in s3_env(moto_s3).items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    server = server_factory.new(extra_args=["--checkpoints", f"s3://{BUCKET}/ckpt",
                                            "--local-cpus", "4"])
    jobs = Jobs(server)
    cmd = f"{PY} {WORKLOADS / 'sdk_counter_train.py'}"
    j = jobs.submit("s3-crashy", cmd, restart_backoff="200ms",
                    env={"STEPS": "8", "CHECKPOINT_EVERY": "1", "CRASH_AT_STEP": "4",
                         "OUT": str(tmp_path / "out")})
    done = jobs.wait_state(j["job_id"], "SUCCEEDED", timeout=120)
    assert [a["state"] for a in done["attempt_list"]] == ["failed", "succeeded"]
    assert done["attempt_list"][1]["resumed_from"].endswith(f"/{j['job_id']}/4")
    assert json.loads((tmp_path / "out").read_text())["step"] == 8
    r = jobs.s.post(server.api(f"/api/trainyard/v1/checkpoints/jobs/{j['job_id']}/steps/8/verify"))
    assert r.status_code == 200, r.text
    keys = [o["Key"] for o in boto3_s3(moto_s3).list_objects_v2(
        Bucket=BUCKET, Prefix="ckpt/").get("Contents", [])]
    assert any("/chunks/" in k or "chunks" in k for k in keys), keys[:20]
    assert any(j["job_id"] in k for k in keys), keys[:20]
