"""bench/prep's text-dedup side (runs in .venv-bench-prep): text-dedup's MinHash command
(`python -m text_dedup.minhash`), run in this process, on the corpus's JSONL shards.

    text_dedup_side.py CORPUS_DIR WORK_DIR --workers 2

The rows' ids are the generator's (TCK-<row>, meta.json's row count). The dataset is loaded with Hugging Face datasets' packaged `json` builder from the local files
(HF_DATASETS_OFFLINE=1, a cache under WORK_DIR: nothing is fetched). Parameters: 5-grams,
112 permutations as 14 bands x 8 rows, --min_length 0 (so short texts are kept, as the other
sides keep them), its default hash (sha1) and seed. It writes the deduplicated dataset with
save_to_disk; the removed documents are the corpus ids missing from it. Writes
WORK_DIR/removed_ids.txt and prints one JSON line {"rows", "removed"}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("work")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shingle-words", type=int, default=5)
    ap.add_argument("--bands", type=int, default=14)
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()

    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_HOME"] = os.path.join(args.work, "hf-home")
    os.environ.setdefault("TQDM_DISABLE", "1")

    from datasets import load_from_disk
    from text_dedup.minhash import main as minhash_main

    out = os.path.join(args.work, "deduplicated")
    minhash_main([
        "--path", "json", "--data_files", os.path.join(args.corpus, "part-*.jsonl"), "--split", "train",
        "--cache_dir", os.path.join(args.work, "cache"), "--output", out,
        "--column", "text", "--ngram", str(args.shingle_words),
        "--num_perm", str(args.bands * args.rows), "--b", str(args.bands), "--r", str(args.rows),
        "--min_length", "0", "--num_proc", str(args.workers),
    ], standalone_mode=False)

    kept = set(load_from_disk(out)["id"])
    with open(os.path.join(args.corpus, "meta.json")) as f:
        rows = json.load(f)["counts"]["rows"]  # the generator's ids are TCK-<row>
    removed = [i for i in (f"TCK-{r:09d}" for r in range(rows)) if i not in kept]
    with open(os.path.join(args.work, "removed_ids.txt"), "w") as f:
        f.writelines(i + "\n" for i in removed)
    print(json.dumps({"rows": rows, "removed": len(removed)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
