"""The quickstart's workload and its follow-up, with the plain mlflow client.

`quickstart.py train` is the command of a Trainyard job (examples/quickstart/train-intents.yaml).
It generates a synthetic support-ticket dataset (six intents, with noise and near-duplicates),
trains a small bag-of-words classifier with numpy while logging params and per-epoch metrics to
the job's MLflow run, checkpoints every 10 epochs, and logs the dataset as an input and the
model as an MLflow pyfunc model. With QUICKSTART_CRASH_AT_EPOCH it crashes once, so the job's
recovery (restart from the latest checkpoint) can be seen.

`quickstart.py register JOB_ID` registers the job's model, points the `champion` alias at it,
and loads `models:/support-intent-model@champion` back to classify new tickets.
"""
import json
import os
import random
import sys
import tempfile
import urllib.request

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient

INTENTS = {
    "shipping_delay": ["where is my order", "package has not arrived", "delivery is late",
                       "tracking shows no update", "order still not shipped"],
    "refund_request": ["i want my money back", "please refund my purchase", "request a refund",
                       "refund the charge", "return and get a refund"],
    "account_access": ["cannot log in", "forgot my password", "account is locked",
                       "reset my login", "two factor code not working"],
    "billing_error": ["charged twice", "wrong amount on my invoice", "billing mistake",
                      "unexpected charge on card", "invoice total is wrong"],
    "product_defect": ["item arrived broken", "product stopped working", "screen is cracked",
                       "device is defective", "missing parts in the box"],
    "cancel_subscription": ["cancel my subscription", "stop my plan", "end my membership",
                            "do not renew", "unsubscribe me from the service"],
}
FILLERS = ["hi", "hello", "please help", "thanks", "asap", "urgent", "order 4411", "again",
           "this is frustrating", "kind regards"]


def make_dataset(n, seed):
    rng = random.Random(seed)
    rows = []
    labels = sorted(INTENTS)
    for _ in range(n):
        label = rng.choice(labels)
        text = rng.choice(INTENTS[label])
        words = text.split()
        if rng.random() < 0.3:  # typos / word drops
            words = [w for w in words if rng.random() > 0.15] or words
        text = " ".join(rng.sample(FILLERS, rng.randint(0, 2)) + words + rng.sample(FILLERS, rng.randint(0, 2)))
        if rng.random() < 0.05:  # label noise
            label = rng.choice(labels)
        rows.append({"message": text, "label": label})
    return pd.DataFrame(rows)


class BagOfWordsClassifier(mlflow.pyfunc.PythonModel):
    def __init__(self, vocab, labels, weights):
        self.vocab, self.labels, self.weights = vocab, labels, weights

    def featurize(self, messages):
        x = np.zeros((len(messages), len(self.vocab) + 1))
        for i, m in enumerate(messages):
            for w in str(m).lower().split():
                j = self.vocab.get(w)
                if j is not None:
                    x[i, j] = 1.0
            x[i, -1] = 1.0
        return x

    def predict(self, context, model_input):
        messages = model_input["message"] if isinstance(model_input, pd.DataFrame) else model_input
        scores = self.featurize(list(messages)) @ self.weights
        return [self.labels[k] for k in scores.argmax(axis=1)]


def report_checkpoint(step, path):
    """Tells the server about a complete checkpoint (the next attempt resumes from it)."""
    req = urllib.request.Request(
        f"{os.environ['TRAINYARD_URL']}/api/trainyard/v1/jobs/{os.environ['TRAINYARD_JOB_ID']}"
        "/checkpoints", data=json.dumps({"step": step, "path": path}).encode(), method="POST",
        headers={"Authorization": f"Bearer {os.environ['TRAINYARD_TOKEN']}",
                 "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()


def train():
    """Runs as the job's command: trains, checkpoints every 10 epochs, resumes after a crash."""
    train_set, val = make_dataset(1200, seed=1), make_dataset(300, seed=2)
    vocab = {w: i for i, w in enumerate(sorted({w for m in train_set["message"] for w in m.split()}))}
    labels = sorted(INTENTS)
    y = np.array([labels.index(l) for l in train_set["label"]])
    yv = np.array([labels.index(l) for l in val["label"]])
    model = BagOfWordsClassifier(vocab, labels, np.zeros((len(vocab) + 1, len(labels))))
    x, xv = model.featurize(train_set["message"]), model.featurize(val["message"])
    params = {"model": "bag-of-words softmax", "lr": 4.0, "epochs": 60, "l2": 1e-4}
    attempt = int(os.environ.get("TRAINYARD_ATTEMPT", "1"))
    crash_at = int(os.environ.get("QUICKSTART_CRASH_AT_EPOCH", "-1"))
    first_epoch, w = 0, model.weights
    resume = os.environ.get("TRAINYARD_RESUME_FROM")
    if resume:
        with np.load(resume) as ck:
            first_epoch, w = int(ck["epoch"]), ck["weights"]
        print(f"attempt {attempt}: resuming from {resume} at epoch {first_epoch}", flush=True)
    # MLFLOW_RUN_ID (set by the job) makes start_run continue the job's run.
    with mlflow.start_run() as run:
        if first_epoch == 0:
            mlflow.log_params(params)
            mlflow.log_input(mlflow.data.from_pandas(train_set, name="support_tickets_train"),
                             context="training")
        for epoch in range(first_epoch, params["epochs"]):
            if epoch == crash_at and attempt == 1:
                print(f"attempt {attempt}: simulated crash at epoch {epoch}", flush=True)
                os._exit(1)
            logits = x @ w
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            loss = -np.log(p[np.arange(len(y)), y] + 1e-12).mean()
            grad = x.T @ (p - np.eye(len(labels))[y]) / len(y) + params["l2"] * w
            w -= params["lr"] * grad
            acc = ((xv @ w).argmax(axis=1) == yv).mean()
            mlflow.log_metrics({"train_loss": float(loss), "val_accuracy": float(acc)}, step=epoch)
            if (epoch + 1) % 10 == 0:
                path = os.path.join(os.environ["TRAINYARD_CHECKPOINT_DIR"], f"epoch-{epoch + 1}.npz")
                np.savez(path + ".tmp.npz", epoch=epoch + 1, weights=w)
                os.replace(path + ".tmp.npz", path)
                report_checkpoint(epoch + 1, path)
                print(f"epoch {epoch + 1:2d}/{params['epochs']}  loss {loss:.3f}  "
                      f"val_accuracy {acc:.3f}  (checkpoint {path})", flush=True)
        model.weights = w
        with tempfile.TemporaryDirectory() as d:
            val.to_csv(f"{d}/validation.csv", index=False)
            mlflow.log_artifact(f"{d}/validation.csv", "data")
        info = mlflow.pyfunc.log_model(name="intent_model", python_model=model,
                                       input_example=pd.DataFrame({"message": ["where is my order"]}))
        mlflow.set_tag("quickstart.model_uri", info.model_uri)
    print(f"run {run.info.run_id}: final val_accuracy {acc:.3f}", flush=True)


def register(job_id):
    """After the job: registers its model, points @champion at it and uses it."""
    s = urllib.request.Request(f"{os.environ['TRAINYARD_URL']}/api/trainyard/v1/jobs/{job_id}",
                               headers={"Authorization": f"Bearer {os.environ['TRAINYARD_TOKEN']}"})
    job = json.loads(urllib.request.urlopen(s, timeout=30).read())["job"]
    client = MlflowClient()
    run = client.get_run(job["run_id"])
    version = mlflow.register_model(run.data.tags["quickstart.model_uri"], "support-intent-model")
    client.set_registered_model_alias("support-intent-model", "champion", version.version)
    champion = mlflow.pyfunc.load_model("models:/support-intent-model@champion")
    tickets = ["my package never arrived", "you charged me twice this month", "i forgot my password again"]
    print(f"Job {job_id} trained run {run.info.run_id}: val_accuracy "
          f"{run.data.metrics['val_accuracy']:.3f} after {job['attempts']} attempt(s)")
    print(f"Registered support-intent-model version {version.version} as @champion")
    for t, label in zip(tickets, champion.predict(pd.DataFrame({"message": tickets}))):
        print(f"  {t!r:40} -> {label}")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "train":
        train()
    elif len(sys.argv) == 3 and sys.argv[1] == "register":
        register(sys.argv[2])
    else:
        sys.exit("usage: quickstart.py train | register JOB_ID")
