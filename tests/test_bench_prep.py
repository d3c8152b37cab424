"""bench/prep's corpus generator and scoring (issue 18's benchmark): the corpus is deterministic,
its ground truth is right (the planted pairs' Jaccard values, and no unplanted duplicates), and
recall/precision follow README.md's definitions. Small corpora only; no anchors are installed."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "prep"
sys.path.insert(0, str(BENCH))

import gen_corpus  # noqa: E402
from quality import score  # noqa: E402


def generate(out: Path, size_mb: float = 1.0, seed: int = 25) -> dict:
    subprocess.run([sys.executable, str(BENCH / "gen_corpus.py"), str(out), "--size-mb", str(size_mb),
                    "--seed", str(seed)], check=True, capture_output=True)
    return json.loads((out / "meta.json").read_text())


def rows(corpus: Path) -> dict[str, dict]:
    out = {}
    for path in sorted(corpus.glob("part-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            out[r["id"]] = r
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    generate(out, size_mb=1.0)
    return out


def test_same_seed_same_bytes_other_seed_other_bytes(corpus, tmp_path):
    again = tmp_path / "again"
    generate(again, size_mb=1.0)
    for name in ["part-00000.jsonl", "part-00001.jsonl", "truth.jsonl"]:
        assert (again / name).read_bytes() == (corpus / name).read_bytes(), name
    other = tmp_path / "other"
    generate(other, size_mb=1.0, seed=26)
    assert (other / "part-00000.jsonl").read_bytes() != (corpus / "part-00000.jsonl").read_bytes()


def test_size_shape_and_planted_counts(corpus):
    meta = json.loads((corpus / "meta.json").read_text())
    data = rows(corpus)
    c = meta["counts"]
    assert len(data) == c["rows"]
    assert 0.95e6 <= meta["bytes"] <= 1.1e6
    assert sum(p.stat().st_size for p in corpus.glob("part-*.jsonl")) == meta["bytes"]
    tickets = [r["text"] for r in data.values() if r["text"].startswith("Subject:")]
    avg = sum(len(t.encode()) for t in tickets) / len(tickets)
    assert 2200 <= avg <= 3200, avg
    assert c["exact_pairs"] > 0 and c["near_pairs"] > 0 and c["junk"] > 0
    near = [json.loads(line) for line in (corpus / "truth.jsonl").read_text().splitlines()]
    near = [p["jaccard"] for p in near if p["kind"] == "near"]
    assert min(near) < 0.7 and max(near) > 0.9  # both sides of the 0.8 threshold
    assert 0.2 < sum(j >= 0.8 for j in near) / len(near) < 0.8


def test_truth_is_exact_and_nothing_else_is_a_duplicate(corpus):
    data = rows(corpus)
    truth = [json.loads(line) for line in (corpus / "truth.jsonl").read_text().splitlines()]
    cluster = {i: i for i in data}  # union-find over the planted pairs

    def find(x):
        while cluster[x] != x:
            x = cluster[x]
        return x

    for p in truth:
        a, b = data[p["a"]]["text"], data[p["b"]]["text"]
        cluster[find(p["a"])] = find(p["b"])
        if p["kind"] == "exact":
            assert gen_corpus.normalize_words(a) == gen_corpus.normalize_words(b)
        else:
            assert gen_corpus.jaccard(a, b) == pytest.approx(p["jaccard"], abs=1e-4)
            assert a != b
    # every other pair of documents: Jaccard below 0.3 on 5-word shingles (an inverted index
    # finds the pairs that share any shingle at all)
    shingles = {i: gen_corpus.shingles(r["text"]) for i, r in data.items()}
    index = defaultdict(list)
    for i, sh in shingles.items():
        for s in sh:
            index[s].append(i)
    candidates = {(x, y) for docs in index.values() if len(docs) > 1
                  for x in docs for y in docs if x < y and find(x) != find(y)}
    assert candidates  # templates make some shingles common: the check is not vacuous
    worst = max(gen_corpus.jaccard_sets(shingles[x], shingles[y]) for x, y in candidates)
    assert worst < 0.3, worst


def test_score_follows_the_readme_definitions():
    truth = [
        {"a": "A", "b": "B", "kind": "near", "jaccard": 0.9},
        {"a": "A", "b": "C", "kind": "near", "jaccard": 0.7},
        {"a": "B", "b": "C", "kind": "near", "jaccard": 0.6},
        {"a": "D", "b": "E", "kind": "exact", "jaccard": 1.0},
        {"a": "F", "b": "G", "kind": "near", "jaccard": 0.85},
    ]
    s = score(["B", "X", "F", "G"], truth)
    assert s["removed"] == 4 and s["true_removed"] == 3 and s["false_removed"] == 1
    assert s["precision"] == 0.75
    assert s["recall_exact"] == 0.0  # neither D nor E removed
    assert s["recall_near_ge_0_8"] == 1.0  # A-B (B removed), F-G
    assert s["recall_near_lt_0_8"] == 0.5  # B-C yes (B), A-C no
    assert s["clusters_fully_removed"] == 1  # F and G both gone
    assert s["found"] == [True, False, True, False, True]
    empty = score([], truth)
    assert empty["precision"] is None and empty["recall_near_ge_0_8"] == 0.0
