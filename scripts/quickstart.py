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


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "report":
        report(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "classify":
        classify(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: quickstart.py report JOB_ID DOWNLOAD_DIR | classify MODEL_DIR TEST_JSONL")
