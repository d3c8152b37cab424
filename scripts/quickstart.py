"""The quickstart's follow-up after the fine-tuning job, with the plain mlflow client and with
Hugging Face transformers.

`quickstart.py report JOB_ID DOWNLOAD_DIR` (mlflow client, .venv): prints the job's run, the
table versions it trained on (its dataset inputs), its metrics and eval accuracy before and
after fine-tuning, and where the adapter and the merged model are; registers the merged model
(the run's `model` artifacts) as support-intent-model, points the `champion` alias at it,
downloads `models:/support-intent-model@champion` into DOWNLOAD_DIR and writes the version's
number to champion.version beside it.

`quickstart.py classify MODEL_DIR TEST_JSONL` (transformers, .venv-hf): loads the downloaded
model with transformers' AutoModelForCausalLM and classifies held-out tickets by greedy
generation with the training prompt template.

`quickstart.py serve ENDPOINT TEST_JSONL OUT_ID_FILE` (openai and mlflow clients, .venv):
classifies held-out tickets through the endpoint (the server's native engine) with the `openai`
client; then registers the champion's files again as a second version, splits the endpoint's
traffic 50/50 between the two and sends tickets until both have answered. Writes the first
answer's id to OUT_ID_FILE (for `trainyard lineage request`).
"""
import json
import os
import sys
import urllib.request

SYSTEM = "Classify the customer support ticket into one intent."


def api(path):
    req = urllib.request.Request(f"{os.environ['TRAINYARD_URL']}/api/trainyard/v1{path}",
                                 headers={"Authorization": f"Bearer {os.environ['TRAINYARD_TOKEN']}"})
    return json.loads(urllib.request.urlopen(req, timeout=30).read())


def report(job_id, download_dir):
    import mlflow
    from mlflow import MlflowClient

    job = api(f"/jobs/{job_id}")["job"]
    client = MlflowClient()
    run = client.get_run(job["run_id"])
    m = run.data.metrics
    before = client.get_metric_history(run.info.run_id, "eval_accuracy")
    first = min(before, key=lambda x: x.step).value if before else float("nan")
    print(f"Job {job_id}: {job['state'].lower()} after {job['attempts']} attempt(s); "
          f"MLflow run {run.info.run_id} in experiment '{job['spec']['experiment']}'")
    print(f"  eval accuracy before fine-tuning: {100 * first:5.1f}%")
    print(f"  eval accuracy after fine-tuning:  {100 * m['eval_accuracy']:5.1f}%")
    print(f"  eval loss {m['eval_loss']:.4f} (perplexity {m['eval_perplexity']:.2f}), "
          f"final train loss {m['loss']:.4f}, {m['tokens_per_second']:,.0f} tokens/s")
    for d in run.inputs.dataset_inputs:
        context = {t.key: t.value for t in d.tags}.get("mlflow.data.context", "?")
        print(f"  {context} data: table {d.dataset.name} at version {d.dataset.digest} "
              f"(an MLflow dataset input of the run)")
    arts = [f.path for f in client.list_artifacts(run.info.run_id)]
    print(f"  run artifacts: {', '.join(arts)} ({run.info.artifact_uri})")
    # The merged model is plain Hugging Face files (not an MLflow "logged model"), so the
    # version's source is the run's model/ artifacts.
    try:
        client.create_registered_model("support-intent-model")
    except mlflow.exceptions.MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version("support-intent-model",
                                          f"{run.info.artifact_uri}/model",
                                          run_id=run.info.run_id)
    client.set_registered_model_alias("support-intent-model", "champion", version.version)
    with open(os.path.join(os.path.dirname(os.path.abspath(download_dir)), "champion.version"),
              "w") as f:
        f.write(f"{version.version}\n")
    path = mlflow.artifacts.download_artifacts("models:/support-intent-model@champion",
                                               dst_path=download_dir)
    print(f"Registered support-intent-model version {version.version} as @champion; "
          f"downloaded models:/support-intent-model@champion to {path}: "
          f"{', '.join(sorted(os.listdir(path)))}")


def classify(model_dir, test_jsonl, limit=6):
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(model_dir, "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    rows = [json.loads(l) for l in open(test_jsonl) if l.strip()][:limit]
    right = 0
    print(f"transformers {__import__('transformers').__version__} loaded {model_dir}:")
    for row in rows:
        prompt = f"[INST] {SYSTEM}\n\n{row['message']} [/INST]"
        ids = [model.config.bos_token_id] + tok.encode(prompt, add_special_tokens=False)
        x = torch.tensor([ids])
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=8,
                             do_sample=False,
                             eos_token_id=model.config.eos_token_id,
                             pad_token_id=model.config.eos_token_id)
        label = tok.decode(out[0, len(ids):], skip_special_tokens=True).strip()
        right += label == row["label"]
        print(f"  {row['message'][:60]!r:64} -> {label:20} (true: {row['label']})")
    print(f"  {right}/{len(rows)} right")


def serve(endpoint, test_jsonl, out_id_file, limit=6):
    from mlflow import MlflowClient
    from openai import OpenAI

    client = OpenAI(base_url=f"{os.environ['TRAINYARD_URL']}/serving-endpoints",
                    api_key=os.environ["TRAINYARD_TOKEN"], max_retries=0, timeout=300)
    rows = [json.loads(l) for l in open(test_jsonl) if l.strip()][:limit]

    def classify_one(message):
        # The prompt as the model was trained on it (finetune.yaml: the mistral template); the
        # engine's tokenizer adds <|begin_of_text|> as the trainer did.
        raw = client.completions.with_raw_response.create(
            model=endpoint, prompt=f"[INST] {SYSTEM}\n\n{message} [/INST]", max_tokens=8,
            temperature=0)
        return raw.parse(), raw.headers["x-served-entity"]

    print(f"openai client -> {client.base_url} model={endpoint!r}:")
    right = 0
    for i, row in enumerate(rows):
        answer, _ = classify_one(row["message"])
        if i == 0:
            with open(out_id_file, "w") as f:
                f.write(answer.id)
        label = answer.choices[0].text.strip()
        right += label == row["label"]
        print(f"  {row['message'][:60]!r:64} -> {label:20} (true: {row['label']})")
    print(f"  {right}/{len(rows)} right through the endpoint")

    # A/B: the champion's files registered again as a second version, half the traffic each.
    mlflow_client = MlflowClient()
    champion = mlflow_client.get_model_version_by_alias("support-intent-model", "champion")
    second = mlflow_client.create_model_version("support-intent-model", champion.source,
                                                champion.run_id)
    body = {"served_entities": [
        {"name": f"v{champion.version}", "model": "support-intent-model",
         "version": int(champion.version)},
        {"name": f"v{second.version}", "model": "support-intent-model",
         "version": int(second.version)}],
        "routes": [{"served_entity": f"v{champion.version}", "percent": 50},
                   {"served_entity": f"v{second.version}", "percent": 50}]}
    req = urllib.request.Request(
        f"{os.environ['TRAINYARD_URL']}/api/trainyard/v1/endpoints/{endpoint}",
        data=json.dumps(body).encode(), method="PATCH",
        headers={"Authorization": f"Bearer {os.environ['TRAINYARD_TOKEN']}",
                 "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=60).read()
    print(f"A/B: {endpoint} now routes 50% to version {champion.version} and 50% to version "
          f"{second.version}")
    answered = {}
    for i in range(40):
        row = rows[i % len(rows)]
        answer, entity = classify_one(row["message"])
        answered[entity] = answered.get(entity, 0) + 1
        if len(answered) == 2 and i >= 5:
            break
    print("  answers by served entity: " +
          ", ".join(f"{k}: {v}" for k, v in sorted(answered.items())))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3], sys.argv[4])
        sys.exit(0)
    if len(sys.argv) == 4 and sys.argv[1] == "report":
        report(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "classify":
        classify(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: quickstart.py report JOB_ID DOWNLOAD_DIR | classify MODEL_DIR TEST_JSONL"
                 " | serve ENDPOINT TEST_JSONL OUT_ID_FILE")
