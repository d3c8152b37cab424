"""The quickstart's journey through tracking and the registry, with the plain mlflow client.

Generates a synthetic support-ticket dataset (six intents, with noise and
near-duplicates), trains a small bag-of-words classifier with numpy while logging
params and per-epoch metrics, logs the dataset as an input, the model as an MLflow
pyfunc model, registers it, points the `champion` alias at it, and loads
`models:/support-intent-model@champion` back to classify new tickets.
"""
import random
import sys
import tempfile

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


def main():
    train, val = make_dataset(1200, seed=1), make_dataset(300, seed=2)
    vocab = {w: i for i, w in enumerate(sorted({w for m in train["message"] for w in m.split()}))}
    labels = sorted(INTENTS)
    y = np.array([labels.index(l) for l in train["label"]])
    yv = np.array([labels.index(l) for l in val["label"]])
    model = BagOfWordsClassifier(vocab, labels, np.zeros((len(vocab) + 1, len(labels))))
    x, xv = model.featurize(train["message"]), model.featurize(val["message"])

    mlflow.set_experiment("support-intents")
    params = {"model": "bag-of-words softmax", "lr": 4.0, "epochs": 60, "l2": 1e-4}
    with mlflow.start_run(run_name="intent-baseline") as run:
        mlflow.log_params(params)
        mlflow.log_input(mlflow.data.from_pandas(train, name="support_tickets_train"), context="training")
        w = model.weights
        for epoch in range(params["epochs"]):
            logits = x @ w
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            loss = -np.log(p[np.arange(len(y)), y] + 1e-12).mean()
            grad = x.T @ (p - np.eye(len(labels))[y]) / len(y) + params["l2"] * w
            w -= params["lr"] * grad
            acc = ((xv @ w).argmax(axis=1) == yv).mean()
            mlflow.log_metrics({"train_loss": float(loss), "val_accuracy": float(acc)}, step=epoch)
            if sys.stderr.isatty():  # progress on a terminal, quiet in pipes
                print(f"\r  epoch {epoch + 1:2d}/{params['epochs']}  loss {loss:.3f}  "
                      f"val_accuracy {acc:.3f}", end="", file=sys.stderr, flush=True)
        if sys.stderr.isatty():
            print(file=sys.stderr)
        with tempfile.TemporaryDirectory() as d:
            val.to_csv(f"{d}/validation.csv", index=False)
            mlflow.log_artifact(f"{d}/validation.csv", "data")
        info = mlflow.pyfunc.log_model(name="intent_model", python_model=model,
                                       input_example=pd.DataFrame({"message": ["where is my order"]}))
    version = mlflow.register_model(info.model_uri, "support-intent-model")
    client = MlflowClient()
    client.set_registered_model_alias("support-intent-model", "champion", version.version)

    champion = mlflow.pyfunc.load_model("models:/support-intent-model@champion")
    tickets = ["my package never arrived", "you charged me twice this month", "i forgot my password again"]
    print(f"\nRun {run.info.run_id}: final val_accuracy {acc:.3f}")
    print(f"Registered support-intent-model version {version.version} as @champion")
    for t, label in zip(tickets, champion.predict(pd.DataFrame({"message": tickets}))):
        print(f"  {t!r:40} -> {label}")


if __name__ == "__main__":
    main()
