"""The README's main command walks the journey end to end: a training job that crashes once
and resumes from its checkpoint, logging to its MLflow run; then the model is registered,
aliased @champion and used."""

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_quickstart_runs_the_journey(tmp_path):
    env = {**os.environ, "TRAINYARD_QUICKSTART_DIR": str(tmp_path / "qs")}
    r = subprocess.run([str(REPO / "quickstart")], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "simulated crash at epoch 35" in out
    assert "resuming from" in out and "epoch-30.npz at epoch 30" in out
    assert "after 2 attempt(s)" in out
    assert "exit code 1 on rank 0" in out  # trainyard describe shows the failed attempt
    assert "'my package never arrived'               -> shipping_delay" in out
    assert "champion" in out
