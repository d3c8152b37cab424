"""bench/prep's datatrove side (runs in .venv-bench-prep): datatrove's MinHash dedup pipeline,
as its own example runs it, on the corpus's JSONL shards.

    datatrove_side.py CORPUS_DIR WORK_DIR --workers 2

Four stages with LocalPipelineExecutor (datatrove's MinhashConfig defaults: 5-grams, 14 buckets
x 8 hashes; English word tokenizer, its text normalisation):
  1. JsonlReader -> MinhashDedupSignature   (one task per shard)
  2. MinhashDedupBuckets                     (one task per bucket)
  3. MinhashDedupCluster                     (one task)
  4. JsonlReader -> MinhashDedupFilter(exclusion_writer) -> JsonlWriter  (one task per shard)
Writes WORK_DIR/removed_ids.txt (one corpus id a line: what stage 4 excluded) and prints one
JSON line {"rows", "removed"}.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from datatrove.executor.local import LocalPipelineExecutor  # noqa: E402
from datatrove.pipeline.dedup.minhash import (  # noqa: E402
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.readers import JsonlReader  # noqa: E402
from datatrove.pipeline.writers import JsonlWriter  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("work")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shingle-words", type=int, default=5)
    ap.add_argument("--bands", type=int, default=14)
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()

    shards = len(glob.glob(os.path.join(args.corpus, "part-*.jsonl")))
    cfg = MinhashConfig(n_grams=args.shingle_words, num_buckets=args.bands,
                        hashes_per_bucket=args.rows)
    w = args.work
    logs = os.path.join(w, "logs")

    def reader():
        return JsonlReader(args.corpus, glob_pattern="part-*.jsonl", id_key="id", text_key="text",
                           compression=None)

    stages = [
        ("signatures", [reader(), MinhashDedupSignature(output_folder=f"{w}/signatures", config=cfg)],
         shards),
        ("buckets", [MinhashDedupBuckets(input_folder=f"{w}/signatures", output_folder=f"{w}/buckets",
                                         config=cfg)], cfg.num_buckets),
        ("clusters", [MinhashDedupCluster(input_folder=f"{w}/buckets", output_folder=f"{w}/remove_ids",
                                          config=cfg)], 1),
        ("filter", [reader(),
                    MinhashDedupFilter(input_folder=f"{w}/remove_ids",
                                       exclusion_writer=JsonlWriter(f"{w}/removed", compression=None)),
                    JsonlWriter(f"{w}/deduplicated", compression=None)], shards),
    ]
    for name, pipeline, tasks in stages:
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=min(args.workers, tasks),
                              logging_dir=f"{logs}/{name}").run()

    removed = []
    for path in sorted(glob.glob(f"{w}/removed/*.jsonl")):
        with open(path, encoding="utf-8") as f:
            removed.extend(json.loads(line)["id"] for line in f)
    kept = 0
    for path in glob.glob(f"{w}/deduplicated/*.jsonl"):
        with open(path, "rb") as f:
            kept += sum(1 for _ in f)
    with open(os.path.join(w, "removed_ids.txt"), "w") as f:
        f.writelines(i + "\n" for i in removed)
    print(json.dumps({"rows": kept + len(removed), "removed": len(removed)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
