"""`trainyard prep --engine spark` (issue 18, deliverable 3): the same pipeline spec run by the
Spark engine (src/trainyard/prep/spark/prep_spark.py, on the session's local[2] SparkSession)
and by the native engine (`build/trainyard prep`) on a small hand-made set of tickets with
junk rows, exact and near duplicates, PII with false-positive traps and customers that repeat
(a grouped split). For every deterministic step the outputs are identical: doc ids, kept rows
and their redacted/templated text, the split of each row, the dropped table (doc_id, step,
reason) and the per-step report. Near dedup is compared pair by pair (documents in one
cluster); the agreement is printed and, on this set, must be 100%."""
from __future__ import annotations

import csv
import json
import os
import random
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests
from deltalake import DeltaTable

from conftest import REPO, TRAINYARD_BIN
from test_cli import cli
from test_prep import (api_rows, auth, backend, columns, describe,  # noqa: F401 (fixture)
                       make_schema)
from test_prep import tickets as numbered_tickets

sys.path.insert(0, str(REPO / "src" / "trainyard" / "prep" / "spark"))
import prep_algorithms as alg  # noqa: E402
import prep_spark  # noqa: E402

VOCAB = ("order parcel refund invoice login password account delivery courier screen battery "
         "charger warranty subscription plan upgrade discount coupon address billing card "
         "driver printer router cable update install error crash sync backup folder photo "
         "message support agent manager branch store return label tracking number week "
         "monday friday morning evening kitchen garden office laptop phone tablet").split()


# Llama 3's tokenizer.json (byte-level BPE, a BOS token added by its post-processor).
TOKENIZER = REPO / "tests" / "fixtures" / "train" / "tokenizers" / "llama3" / "tokenizer.json"


def sentence(rng: random.Random, n: int) -> str:
    # English enough for the language filter: function words between the nouns.
    glue = ["the", "and", "with", "for", "my", "is", "not", "was", "to", "of"]
    return " ".join(rng.choice(VOCAB) if i % 2 else rng.choice(glue) for i in range(n))


def tickets() -> list[dict]:
    rng = random.Random(18)
    long_a = sentence(rng, 60)
    rows = [
        {"text": "Hello, " + long_a + ".", "answer": "We are on it."},
        {"text": "HELLO " + long_a.upper() + " !!", "answer": "Duplicate."},        # exact dup
        {"text": "hi", "answer": "?"},                                               # min_chars
        {"text": "Lorem ipsum dolor sit amet " + sentence(rng, 10), "answer": "x"},  # drop_regex
        {"text": sentence(rng, 20), "answer": "x", "customer_id": None},             # required
        {"text": "\n".join(["buy now and save"] * 6), "answer": "x"},                # repetition
        {"text": "Der Kunde kann sich seit gestern nicht mehr anmelden und bittet um "
                 "einen Rueckruf heute", "answer": "x"},                             # language
        {"text": "Near: " + long_a + " thanks", "answer": "Near duplicate kept."},   # near of 0
        {"text": "Mail me at jane.doe@example.com or call +44 20 7946 0958, card 4111 1111 "
                 "1111 1111 and IBAN DE89 3704 0044 0532 0130 00 for " + sentence(rng, 8),
         "answer": "Redacted."},
        {"text": "Server 192.168.1.20 runs version 1.2.3.4 since 2024-01-15 at 10:30 for "
                 "order ORD-123456 and " + sentence(rng, 8), "answer": "Traps."},
        {"text": "Call (415) 555-2671 about invoice 1234567812345678 of $1,299.00 for "
                 + sentence(rng, 8), "answer": "Phone."},
        {"text": "Please " + sentence(rng, 14), "answer": None},                     # template
    ]
    for i in range(24):
        rows.append({"text": f"Ticket {i}: " + sentence(rng, 16 + i % 7), "answer": f"Reply {i}."})
    # A second near-duplicate pair among the generic rows (differs in the last word only).
    rows.append({"text": rows[20]["text"] + " today", "answer": "near 20"})
    for i, row in enumerate(rows):
        row["ticket_id"] = 1000 + i
        row.setdefault("customer_id", f"c{i % 5}")
    return [{"ticket_id": r["ticket_id"], "customer_id": r["customer_id"], "text": r["text"],
             "answer": r["answer"]} for r in rows]


SPEC = """\
name: spark-parity
source:
  files: [tickets.jsonl]
  id_column: ticket_id
text_column: text
steps:
  - filter: {{min_chars: 20, max_chars: 5000}}
  - filter: {{drop_regex: "(?i)lorem ipsum"}}
  - filter: {{required: [customer_id, text]}}
  - filter: {{max_repetition: 0.3}}
  - filter: {{language: en, min_score: 0.1}}
  - dedup_exact: {{}}
  - redact_pii: {{kinds: [email, phone, card, iban, ip], patterns: {{order_id: "ORD-[0-9]{{6}}"}}}}
  - dedup_near: {{shingle_words: 5, bands: 14, rows: 8, threshold: {threshold}, keep: {keep}}}
  - template: {{format: chatml, prompt_column: text, response_column: answer, system: "Be kind.",
               output_column: chat}}
  - tokenize: {{tokenizer: {tokenizer}, column: chat, output_column: input_ids}}
  - split: {{ratios: {{train: 0.6, val: 0.2, test: 0.2}}, seed: 42, group_by: customer_id}}
outputs:
  train: {{path: {out}/train}}
  val: {{path: {out}/val}}
  test: {{path: {out}/test}}
  dropped: {{path: {out}/dropped}}
"""


def write_case(tmp: Path, threshold: float, keep: str) -> tuple[Path, Path]:
    """The same spec and file in two directories (one per engine): the same doc ids (the file
    is named as the spec writes it) and the same pipeline version (the spec's SHA-256)."""
    specs = []
    for engine in ("native", "spark"):
        d = tmp / engine
        d.mkdir(parents=True)
        with open(d / "tickets.jsonl", "w", encoding="utf-8") as f:
            for row in tickets():
                f.write(json.dumps(row) + "\n")
        (d / "prep.yaml").write_text(SPEC.format(threshold=threshold, keep=keep, out="out",
                                                 tokenizer=TOKENIZER))
        specs.append(d / "prep.yaml")
    return specs[0], specs[1]


def run_native(spec: Path) -> dict:
    report = spec.parent / "report.json"
    r = subprocess.run([str(TRAINYARD_BIN), "prep", str(spec), "--threads", "2",
                        "--report", str(report)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(report.read_text())


def table(path: Path) -> list[dict]:
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: r["doc_id"])


def compare(tmp: Path, native: dict, spark: dict) -> dict:
    """Asserts the two engines' outputs and reports are identical; the doc ids per output."""
    ids = {}
    for name in ("train", "val", "test", "dropped"):
        a = table(tmp / "native" / "out" / name)
        b = table(tmp / "spark" / "out" / name)
        assert [r["doc_id"] for r in a] == [r["doc_id"] for r in b], name
        assert a == b, name
        ids[name] = [r["doc_id"] for r in a]
    for name in ("train", "dropped"):
        na = DeltaTable(str(tmp / "native" / "out" / name))
        sa = DeltaTable(str(tmp / "spark" / "out" / name))
        assert [(f.name, str(f.type)) for f in na.schema().fields] == \
            [(f.name, str(f.type)) for f in sa.schema().fields], name
        # The pipeline's name and version (the spec's SHA-256) as table properties, and on
        # every commit as its userMetadata.
        assert na.metadata().configuration == sa.metadata().configuration, name
        meta = json.dumps({"trainyard.prep.pipeline": native["pipeline"],
                           "trainyard.prep.version": native["version"]}, separators=(",", ":"))
        for t in (na, sa):
            assert [h.get("userMetadata") for h in t.history()] == \
                [meta] * len(t.history()), name
    assert native["version"] == spark["version"]
    for s_native, s_spark in zip(native["steps"], spark["steps"], strict=True):
        for key in ("step", "kind", "rows_in", "rows_out", "rows_dropped", "dropped",
                    "rows_changed", "changed", "splits"):
            assert s_native.get(key) == s_spark.get(key), (s_native["step"], key)
    for key in ("rows_in", "rows_out", "rows_dropped", "source"):
        assert native[key] == spark[key], key
    assert [(o["name"], o["rows"]) for o in native["outputs"]] == \
        [(o["name"], o["rows"]) for o in spark["outputs"]]
    return ids


def test_algorithms_match_the_documented_values():
    # The spec's own worked values (docs/prep.md), independent of either engine.
    assert alg.normalize_for_dedup("  Hello, WORLD!! Straße—ΣΑΣ ") == "hello world strasse σασ"
    assert alg.repetition_ratio("a\nb\na") == pytest.approx(1 / 3)
    assert alg.repetition_ratio("x y z x y z") == 0.5  # words 3-5 repeat an earlier 3-gram
    assert alg.english_score("The cat and the dog") == pytest.approx(3 / 5)
    assert alg.doc_id("t.jsonl", "0") == alg.doc_id("t.jsonl", "0") != alg.doc_id("t.jsonl", "1")
    assert alg.luhn_valid(b"4111111111111111") and not alg.luhn_valid(b"4111111111111112")
    r = alg.PiiRedactor(["email", "phone", "card", "iban", "ip"], [("order_id", "ORD-[0-9]{6}")])
    text, counts = r.redact("v1.2.3.4 on 2024-01-15, mail a.b@x.org, ip 10.0.0.1, ORD-123456")
    assert text == "v1.2.3.4 on 2024-01-15, mail [EMAIL], ip [IP], [ORDER_ID]"
    assert counts == {"email": 1, "ip": 1, "order_id": 1}
    h = alg.MinHasher(5, 14, 8, 1)
    s1 = h.signature("one two three four five six seven eight nine ten eleven twelve")
    s2 = h.signature("one two three four five six seven eight nine ten eleven twelve!")
    assert s1 is not None and (s1 == s2).all() and h.signature(" ,. ") is None


@pytest.mark.parametrize("threshold,keep", [(0.0, "first"), (0.5, "longest")])
def test_spark_engine_equals_native(spark, tmp_path, threshold, keep):
    native_spec, spark_spec = write_case(tmp_path, threshold, keep)
    native = run_native(native_spec)
    spark_report = prep_spark.run_pipeline(spark, str(spark_spec))
    ids = compare(tmp_path, native, spark_report)

    # The planted rows went where they should (not only equal: right).
    by_reason = {}
    for s in spark_report["steps"]:
        for reason, r in s["dropped"].items():
            by_reason[(s["step"], reason)] = r["rows"]
    assert by_reason[("0_filter", "min_chars")] == 1
    assert by_reason[("1_filter", "drop_regex")] == 1
    assert by_reason[("2_filter", "required:customer_id")] == 1
    assert by_reason[("3_filter", "max_repetition")] == 1
    assert by_reason[("4_filter", "language")] == 1
    assert by_reason[("5_dedup_exact", "duplicate")] == 1
    assert by_reason[("7_dedup_near", "near_duplicate")] == 2
    assert by_reason[("8_template", "missing_response")] == 1
    redact = spark_report["steps"][6]
    assert redact["changed"] == {"card": 1, "email": 1, "iban": 1, "ip": 1, "order_id": 1,
                                 "phone": 2}
    kept = [r for name in ("train", "val", "test") for r in table(tmp_path / "spark" / "out" / name)]
    pii_row = next(r for r in kept if r["ticket_id"] == 1008)
    assert pii_row["text"].startswith("Mail me at [EMAIL] or call [PHONE], card [CARD] and IBAN "
                                      "[IBAN] for ")
    trap_row = next(r for r in kept if r["ticket_id"] == 1009)
    assert trap_row["text"].startswith("Server [IP] runs version 1.2.3.4 since 2024-01-15 at "
                                       "10:30 for order [ORDER_ID] and ")
    assert pii_row["chat"].startswith("<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\n"
                                      "Mail me at [EMAIL]")
    # keep: first keeps the earlier row of each near pair, longest the longer one.
    kept_tickets = {r["ticket_id"] for r in kept}
    if keep == "first":
        assert {1000, 1020} <= kept_tickets and not {1007, 1036} & kept_tickets
    else:
        assert {1007, 1036} <= kept_tickets and not {1000, 1020} & kept_tickets
    # A customer's rows never straddle splits.
    split_of = {}
    for name in ("train", "val", "test"):
        for r in table(tmp_path / "spark" / "out" / name):
            assert split_of.setdefault(r["customer_id"], name) == name
    assert len(set(split_of.values())) >= 2

    # Near dedup, pair by pair: (dropped document, the document kept in its place).
    def near(out: Path) -> set[tuple[str, str]]:
        return {(r["doc_id"], r["duplicate_of"]) for r in table(out / "dropped")
                if r["reason"] == "near_duplicate"}
    native_near, spark_near = near(tmp_path / "native" / "out"), near(tmp_path / "spark" / "out")
    agreement = len(native_near & spark_near) / max(1, len(native_near | spark_near))
    print(f"near-dedup pair agreement (threshold {threshold}, keep {keep}): {agreement:.0%} of "
          f"{len(native_near | spark_near)} pairs")
    assert agreement == 1.0 and len(spark_near) == 2
    # Exact duplicates name the first row with their text.
    dropped = table(tmp_path / "spark" / "out" / "dropped")
    first_id = alg.doc_id("tickets.jsonl", "1000")
    assert [r["duplicate_of"] for r in dropped if r["reason"] == "duplicate"] == [first_id]
    assert all(r["duplicate_of"] is None for r in dropped if "duplicate" not in r["reason"])
    assert ids["dropped"]


def test_duplicate_ids_fail_the_same_way_on_both_engines(spark, tmp_path):
    """Two rows with one source.id_column value are an error naming the value and both rows
    (1-based, in file order), before anything is written, on either engine."""
    rows = [{"id": f"t-{i}", "text": f"ticket {i}"} for i in range(6)]
    rows.append({"id": "t-2", "text": "again"})
    (tmp_path / "dup.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "pipeline.yaml"
    spec.write_text("name: dup\nsource: {files: [dup.jsonl], id_column: id}\nsteps:\n"
                    "  - filter: {min_chars: 1}\noutputs: {rows: {path: out}}\n")
    expected = 'dup.jsonl rows 3 and 7 have the same source.id_column "id" value "t-2"'
    r = subprocess.run([str(TRAINYARD_BIN), "prep", str(spec), "--threads", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and expected in r.stderr, r.stdout + r.stderr
    with pytest.raises(prep_spark.SpecError, match=re.escape(expected)):
        prep_spark.run_pipeline(spark, str(spec))
    assert not (tmp_path / "out").exists()


def test_cli_runs_the_spark_engine(tmp_path):
    """`trainyard prep --engine spark --master local[2]`: the CLI checks the spec and runs
    prep_spark.py in its own JVM (a small pipeline: the JVM's start is most of its time), on a
    CSV source this time; the outputs (values and types) equal the native engine's."""
    spec_text = ("name: cli\nsource: {files: [t.csv], id_column: ticket_id}\nsteps:\n"
                 "  - filter: {min_chars: 20}\n  - dedup_exact: {}\n"
                 "  - split: {ratios: {train: 0.5, test: 0.5}, seed: 7, group_by: customer_id}\n"
                 "outputs:\n  train: {path: out/train}\n  test: {path: out/test}\n"
                 "  dropped: {path: out/dropped}\n")
    reports = {}
    for engine in ("native", "spark"):
        d = tmp_path / engine
        d.mkdir()
        with open(d / "t.csv", "w", encoding="utf-8", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["ticket_id", "customer_id", "text", "answer"])
            w.writeheader()
            w.writerows(tickets())  # quoted fields with commas, quotes and newlines
        (d / "prep.yaml").write_text(spec_text)
        cmd = [str(TRAINYARD_BIN), "prep", str(d / "prep.yaml"), "--report", str(d / "r.json")]
        if engine == "spark":
            cmd += ["--engine", "spark", "--master", "local[2]"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "TRAINYARD_PYTHON": sys.executable})
        assert r.returncode == 0, r.stdout + r.stderr
        assert "1_dedup_exact" in r.stdout, r.stdout
        reports[engine] = json.loads((d / "r.json").read_text())
    assert "on Spark (local[2])" in r.stdout, r.stdout
    for name in ("train", "test", "dropped"):
        assert table(tmp_path / "native" / "out" / name) == \
            table(tmp_path / "spark" / "out" / name), name
    assert [s["dropped"] for s in reports["native"]["steps"]] == \
        [s["dropped"] for s in reports["spark"]["steps"]]
    assert reports["spark"]["rows_dropped"] == 2  # "hi" and the exact duplicate
    assert DeltaTable(str(tmp_path / "spark" / "out" / "train")).schema().fields[1].type == \
        DeltaTable(str(tmp_path / "native" / "out" / "train")).schema().fields[1].type


CATALOG_SPEC = """\
name: catalog-parity
source:
  table: {source}
  version: {version}
steps:
  - filter: {{min_chars: 20}}
  - filter: {{min_tokens: 20, tokenizer: {tokenizer}}}
  - dedup_exact: {{}}
  - redact_pii: {{kinds: [email]}}
  - tokenize: {{tokenizer: {tokenizer}}}
  - split: {{ratios: {{train: 0.8, val: 0.2}}, seed: 42, group_by: customer}}
outputs:
  train: {schema}.{engine}_train
  val: {schema}.{engine}_val
  dropped: {schema}.{engine}_dropped
"""


def test_catalog_tables_on_spark_as_a_job_equal_the_native_engine(server, tmp_path):
    """A catalog table at a pinned version (two commits, so several files, and a third commit
    after the pin that must not be read) through both engines' CLIs as a job would run them
    (TRAINYARD_URL/TOKEN, MLFLOW_RUN_ID): the same rows and doc ids (ordinals: no id_column)
    in catalog outputs, the same token ids, the report logged to each run, and lineage
    source@version -> run -> outputs with the same column lineage."""
    schema = make_schema(server)
    source = f"{schema}.tickets"
    rows = numbered_tickets(50)
    rows += [{"id": 100 + i, "customer": f"c{i}", "text": f"Thanks, all good now {i}!"}
             for i in range(4)]  # long enough in characters, too few tokens
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in rows[:30]))
    second.write_text("".join(json.dumps(r) + "\n" for r in rows[30:]))
    cli(server, "tables", "import", source, str(first))
    cli(server, "tables", "import", source, str(second), "--mode", "append")
    pinned = describe(server, source)["version"]
    cli(server, "tables", "import", source, str(first), "--mode", "append")  # not read

    h = auth(server.token)
    exp = requests.post(server.api("/api/2.0/mlflow/experiments/create"),
                        json={"name": f"spark-{uuid.uuid4().hex[:8]}"}, headers=h, timeout=30)
    assert exp.status_code == 200, exp.text
    reports, runs = {}, {}
    for engine in ("native", "spark"):
        run = requests.post(server.api("/api/2.0/mlflow/runs/create"),
                            json={"experiment_id": exp.json()["experiment_id"]}, headers=h,
                            timeout=30)
        runs[engine] = run.json()["run"]["info"]["run_id"]
        spec = tmp_path / f"{engine}.yaml"
        spec.write_text(CATALOG_SPEC.format(source=source, version=pinned, schema=schema,
                                            engine=engine, tokenizer=TOKENIZER))
        cmd = [str(TRAINYARD_BIN), "prep", str(spec), "--report", str(tmp_path / f"{engine}.json")]
        if engine == "spark":
            cmd += ["--engine", "spark", "--master", "local[2]"]
        env = {**os.environ, "TRAINYARD_PYTHON": sys.executable, "TRAINYARD_URL": server.url,
               "TRAINYARD_TOKEN": server.token, "MLFLOW_RUN_ID": runs[engine]}
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "warning" not in r.stderr, r.stderr
        reports[engine] = json.loads((tmp_path / f"{engine}.json").read_text())
    assert "on Spark (local[2])" in r.stdout and f"{schema}.spark_train" in r.stdout, r.stdout

    native, spark = reports["native"], reports["spark"]
    assert native["source"] == spark["source"] == f"{source}@{pinned}"
    assert native["source_version"] == spark["source_version"] == pinned
    assert native["rows_in"] == spark["rows_in"] == len(rows)
    for a, b in zip(native["steps"], spark["steps"], strict=True):
        assert a == b, a["step"]
    assert spark["steps"][1]["dropped"]["min_tokens"]["rows"] == 4
    for name in ("train", "val", "dropped"):
        a = sorted(api_rows(server, f"{schema}.native_{name}"), key=lambda x: x["doc_id"])
        b = sorted(api_rows(server, f"{schema}.spark_{name}"), key=lambda x: x["doc_id"])
        assert a and a == b, name
        na = DeltaTable(describe(server, f"{schema}.native_{name}")["storage_location"])
        sa = DeltaTable(describe(server, f"{schema}.spark_{name}")["storage_location"])
        assert [(f.name, str(f.type)) for f in na.schema().fields] == \
            [(f.name, str(f.type)) for f in sa.schema().fields], name
    # Doc ids are ordinals in the pinned version's row order; token ids are tokenizer.json's.
    kept = api_rows(server, f"{schema}.spark_train") + api_rows(server, f"{schema}.spark_val")
    assert alg.doc_id(f"{source}@{pinned}", "0") in {r["doc_id"] for r in kept}
    tok = alg.load_tokenizer(TOKENIZER.read_text())
    assert all(r["input_ids"] == tok.encode(r["text"]).ids for r in kept)
    assert {o["name"]: o["rows"] for o in spark["outputs"]} == \
        {o["name"]: o["rows"] for o in native["outputs"]}

    run = runs["spark"]
    got = requests.get(server.api("/api/2.0/mlflow/runs/get"), params={"run_id": run},
                       headers=h, timeout=30).json()["run"]["data"]
    metrics = {m["key"]: m["value"] for m in got["metrics"]}
    tags = {t["key"]: t["value"] for t in got["tags"]}
    assert metrics["prep.rows_in"] == len(rows)
    assert metrics["prep.1_filter.dropped.min_tokens"] == 4
    assert metrics["prep.2_dedup_exact.rows_out"] == spark["steps"][2]["rows_out"]
    assert tags["trainyard.prep.version"] == spark["version"]
    listed = requests.get(server.api("/api/2.0/mlflow/artifacts/list"),
                          params={"run_id": run, "path": "prep"}, headers=h, timeout=30)
    assert [f["path"] for f in listed.json()["files"]] == ["prep/report.json"], listed.text
    lineage = requests.get(server.api("/api/trainyard/v1/lineage"),
                           params={"object": f"run:{run}", "direction": "both", "depth": 1},
                           headers=h, timeout=30)
    text = json.dumps(lineage.json())
    assert f"table:{source}@{pinned}" in text and f"table:{schema}.spark_train@" in text, text
    outputs = {o["name"]: o for o in spark["outputs"]}
    native_outputs = {o["name"]: o for o in native["outputs"]}
    for name in ("train", "dropped"):
        mine = columns(server, table=f"{schema}.spark_{name}", version=outputs[name]["version"])
        theirs = columns(server, table=f"{schema}.native_{name}",
                         version=native_outputs[name]["version"])
        assert [(c["column"], c["source_columns"], c["transform"], c["source"])
                for c in mine["columns"]] == \
            [(c["column"], c["source_columns"], c["transform"], c["source"])
             for c in theirs["columns"]], name
        assert all(c["run_id"] == run for c in mine["columns"])

    # A rerun (after a kill, say) overwrites the outputs on its first commit: no duplicates.
    before = sorted(api_rows(server, f"{schema}.spark_train"), key=lambda x: x["doc_id"])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(api_rows(server, f"{schema}.spark_train"), key=lambda x: x["doc_id"]) == before
    assert describe(server, f"{schema}.spark_train")["version"] > outputs["train"]["version"]


def test_spark_engine_refuses_what_it_cannot_run_before_starting_spark(tmp_path):
    """Bad tokenizers, unreachable catalogs and bad flags fail fast in the CLI, naming the
    field, with no JVM."""
    (tmp_path / "t.jsonl").write_text('{"text": "hello there"}\n')
    cases = {
        "source: {files: [t.jsonl]}\nsteps:\n  - tokenize: {tokenizer: tok.json}\n"
        "outputs:\n  rows: {path: out}\n": "steps[0].tokenize.tokenizer: cannot load tok.json",
        "source: {files: [t.jsonl]}\nsteps:\n  - filter: {min_tokens: 3, tokenizer: tok.json}\n"
        "outputs:\n  rows: {path: out}\n": "steps[0].filter.tokenizer: cannot load tok.json",
        # The source table is staged through the server before Spark starts.
        "source: {table: main.s.t}\nsteps:\n  - dedup_exact: {}\noutputs:\n"
        "  rows: {path: out}\n": "main.s.t",
    }
    for body, expected in cases.items():
        spec = tmp_path / "p.yaml"
        spec.write_text("name: p\n" + body)
        r = subprocess.run([str(TRAINYARD_BIN), "prep", str(spec), "--engine", "spark",
                            "--url", "http://127.0.0.1:9"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and expected in r.stderr, r.stderr
        assert "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "out").exists()
    # A bad spec gets the native parser's file:line error, also before Spark starts.
    spec.write_text("name: p\nsource: {files: [t.jsonl]}\nsteps:\n  - dedup_near: {bands: 0}\n"
                    "outputs:\n  rows: {path: out}\n")
    r = subprocess.run([str(TRAINYARD_BIN), "prep", str(spec), "--engine", "spark"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "p.yaml:4" in r.stderr and "bands" in r.stderr, r.stderr
    r = subprocess.run([str(TRAINYARD_BIN), "prep", str(spec), "--master", "local[2]"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--master is for --engine spark" in r.stderr, r.stderr


def test_spark_engine_checks_output_grants_before_staging_or_starting_spark(server, tmp_path):
    """A user without CREATE TABLE / MODIFY gets the import's refusal before the source is
    staged or a JVM starts (the TRAINYARD_PREP_SPARK program would fail loudly if started)."""
    schema = make_schema(server)
    bob = f"bob{uuid.uuid4().hex[:6]}"
    bob_token = server.create_user(bob)
    (tmp_path / "t.jsonl").write_text('{"text": "hello there, a ticket long enough"}\n')
    never = tmp_path / "never.py"
    never.write_text("import sys\nsys.exit('the Spark program was started')\n")
    spec = tmp_path / "p.yaml"
    spec.write_text(f"name: p\nsource: {{files: [t.jsonl]}}\nsteps:\n  - dedup_exact: {{}}\n"
                    f"outputs:\n  rows: {schema}.spark_rows\n")
    env = {"PATH": "/usr/bin:/bin", "TRAINYARD_PREP_SPARK": str(never)}
    r = subprocess.run([str(TRAINYARD_BIN), "prep", str(spec), "--engine", "spark", "--url",
                        server.url, "--token", bob_token],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"writing {schema}.spark_rows" in r.stderr and "HTTP 403" in r.stderr, r.stderr
    assert "writing needs MODIFY on the table" in r.stderr, r.stderr
    assert "the Spark program was started" not in r.stderr, r.stderr
    # The owner passes the check and gets as far as the program.
    r = subprocess.run([str(TRAINYARD_BIN), "prep", str(spec), "--engine", "spark", "--url",
                        server.url, "--token", server.token],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode != 0 and "the Spark program was started" in r.stderr, r.stderr



REGEX_SPEC = """\
name: regex-parity
source: {files: [rows.jsonl]}
steps:
  - filter: {drop_regex: "^[[:alpha:]]+ [[:digit:]]+$"}
  - filter: {drop_regex: "^.{6}$"}
  - filter: {drop_regex: "(?|ref (\\\\d+)|id-(\\\\d+)) again \\\\1"}
  - filter: {drop_regex: "order\\\\K #\\\\d+"}
  - filter: {drop_regex: "^(a+)+$"}
  - redact_pii: {patterns: {code: "[[:upper:]]{3}-\\\\d{3}"}}
outputs:
  rows: {path: out/rows}
  dropped: {path: out/dropped}
"""

REGEX_ROWS = [
    "order 42",             # POSIX classes: PCRE2 matches; Java reads [[:alpha:]] as [:alph]
    "résumé",               # 6 characters, 8 bytes: byte-wise PCRE2 does not match .{6}
    "ref 7 again 7",        # branch reset (?|...): PCRE2 only (Java rejects the pattern)
    "id-9 again 9",
    "your order #12",       # \K: PCRE2 only
    "a" * 28,               # ^(a+)+$ matches (dropped)...
    "a" * 40 + "b",         # ...or backtracks catastrophically: PCRE2's limits, regex_limit
    "see ABC-123 and DEF-456 today",  # redacted by a POSIX-class pattern
    "nothing to see here 1",
]


def test_spark_engine_matches_regular_expressions_with_pcre2_as_native(spark, tmp_path):
    """Filters' drop_regex/keep_regex and redaction's patterns are PCRE2 on both engines (the
    Spark engine calls Debian's libpcre2-8 from a pandas UDF with the native engine's options
    and limits), so patterns whose Java (rlike) or Python (re) meaning differs, or that only
    PCRE2 accepts, keep, drop and redact the same rows."""
    from pyspark.sql import functions as F

    specs = []
    for engine in ("native", "spark"):
        d = tmp_path / engine
        d.mkdir()
        (d / "rows.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in REGEX_ROWS),
                                      encoding="utf-8")
        (d / "prep.yaml").write_text(REGEX_SPEC)
        specs.append(d / "prep.yaml")
    native = run_native(specs[0])
    spark_report = prep_spark.run_pipeline(spark, str(specs[1]))
    for name in ("rows", "dropped"):
        assert table(tmp_path / "native" / "out" / name) == \
            table(tmp_path / "spark" / "out" / name), name
    for s_native, s_spark in zip(native["steps"], spark_report["steps"], strict=True):
        for key in ("step", "rows_in", "rows_out", "dropped", "rows_changed", "changed"):
            assert s_native.get(key) == s_spark.get(key), (s_native["step"], key)

    # And they are PCRE2's answers (not only equal).
    text_of = {alg.doc_id("rows.jsonl", str(i)): t for i, t in enumerate(REGEX_ROWS)}
    dropped = {text_of[r["doc_id"]]: (r["step"], r["reason"])
               for r in table(tmp_path / "spark" / "out" / "dropped")}
    assert dropped == {
        "order 42": ("0_filter", "drop_regex"),
        "ref 7 again 7": ("2_filter", "drop_regex"),
        "id-9 again 9": ("2_filter", "drop_regex"),
        "your order #12": ("3_filter", "drop_regex"),
        "a" * 28: ("4_filter", "drop_regex"),
        "a" * 40 + "b": ("4_filter", "regex_limit"),
    }
    kept = [r["text"] for r in table(tmp_path / "spark" / "out" / "rows")]
    assert sorted(kept) == sorted(["résumé", "see [CODE] and [CODE] today",
                                   "nothing to see here 1"])
    assert spark_report["steps"][5]["changed"] == {"code": 2}

    # Java's regex (what the Spark engine used before) answers otherwise, or not at all.
    df = spark.createDataFrame([(t,) for t in ("order 42", "résumé")], ["t"])
    java = [r[0] for r in df.select(F.col("t").rlike("^[[:alpha:]]+ [[:digit:]]+$")).collect()]
    assert java == [False, False]
    java = [r[0] for r in df.select(F.col("t").rlike("^.{6}$")).collect()]
    assert java == [False, True]
    for pattern in (r"(?|ref (\d+)|id-(\d+)) again \1", r"order\K #\d+"):
        with pytest.raises(Exception, match="(?i)regex|pattern|escape|syntax"):
            df.select(F.col("t").rlike(pattern)).collect()
