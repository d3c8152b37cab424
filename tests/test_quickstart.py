"""The README's main command walks the journey end to end: synthetic support tickets imported
into a catalog table, cleaned by a prep job into the training table, a LoRA
fine-tuning job of a small Llama-style model on the native trainer that crashes once and
resumes exactly from its checkpoint, logging to its MLflow run; then eval accuracy before and
after, the model registered as @champion, the merged model classifying held-out tickets in
Hugging Face transformers, the model version's lineage back to the table versions, and the
model served: the openai client through an endpoint, an A/B split, a request id's lineage."""

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_quickstart_runs_the_journey(tmp_path):
    env = {**os.environ, "TRAINYARD_QUICKSTART_DIR": str(tmp_path / "qs")}
    r = subprocess.run([str(REPO / "quickstart")], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "stopping after 60 steps" in out  # the first attempt's simulated crash
    assert "resumed from trainyard-checkpoint://support/" in out and "at step 50" in out
    assert "exit code 3 on rank 0" in out  # trainyard describe shows the failed attempt
    assert "after 2 attempt(s)" in out
    before = float(re.search(r"eval accuracy before fine-tuning:\s+([\d.]+)%", out).group(1))
    after = float(re.search(r"eval accuracy after fine-tuning:\s+([\d.]+)%", out).group(1))
    assert before < 20 and after >= 60, (before, after)
    assert "as @champion" in out
    # The job read the tables at the versions finetune.yaml pins, recorded on its run and in
    # lineage upstream of the registered model version.
    assert re.search(r"data\.train: \d+ rows of main\.support\.train@1", out), out[-4000:]
    assert "training data: table main.support.train at version 1" in out, out[-4000:]
    assert "validation data: table main.support.val at version 1" in out, out[-4000:]
    assert "read <- table:main.support.train@1" in out, out[-4000:]
    assert "read <- table:main.support.val@1" in out, out[-4000:]
    # The prep job cleaned the raw import into main.support.train: its report accounts for
    # every row, and lineage reaches the raw table through the prep run.
    report = re.search(r"2,000 rows from main\.support\.tickets@1, ([\d,]+) kept, ([\d,]+) dropped",
                       out)
    assert report, out[-6000:]
    kept, dropped = (int(g.replace(",", "")) for g in report.groups())
    assert kept + dropped == 2000 and dropped > 100, report.group(0)
    for step in ("dedup_exact", "dedup_near", "redact_pii"):
        assert step in out, step
    assert re.search(r"wrote <- run:\w+\s+\(prep-support-tickets\)", out), out[-3000:]
    assert "read <- table:main.support.tickets@1" in out, out[-3000:]
    right = int(re.search(r"(\d+)/6 right", out).group(1))
    assert right >= 3, out[-3000:]
    job = re.search(r"Adapter \(PEFT format\): (\S+)", out).group(1)
    assert (Path(job) / "adapter_model.safetensors").exists()
    # Served: the endpoint on @champion (the native engine) classified held-out tickets through
    # the openai client, an A/B split had both versions answer, and an answer's id led back to
    # the model version, its job and the training table.
    served = int(re.search(r"(\d+)/6 right through the endpoint", out).group(1))
    assert served >= 3, out[-3000:]
    split = re.search(r"answers by served entity: v(\d+): (\d+), v(\d+): (\d+)", out)
    assert split and int(split.group(2)) > 0 and int(split.group(4)) > 0, out[-3000:]
    lineage = out[out.index("== trainyard lineage request"):]
    assert "support-intent-model v" in lineage and "main.support.train@1" in lineage, lineage
    assert "main.support.requests" in lineage, lineage
