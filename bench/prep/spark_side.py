"""bench/prep's Spark side (runs in the project's .venv: pyspark 3.5, Java 17): exact + MinHash
LSH dedup with Spark's own operators on local[N].

    spark_side.py CORPUS_DIR WORK_DIR --master local[2] [--driver-memory 4g]

- read the JSONL shards (explicit schema); the source order is monotonically_increasing_id();
- exact: xxhash64 of the normalised text (lower case, runs of non-word characters and `_` one
  space, trimmed); within a hash, every row but the first (smallest order) is removed;
- near, on the rows exact dedup kept: words of the normalised text, Spark ML's NGram(5) (a text
  with fewer words is one shingle), HashingTF (binary, 2^30 features; MinHashLSH takes at most its prime, ~2^31), MinHashLSH with
  bands x rows = 112 hash functions; the hash values are cut into 14 bands of 8, each band's key
  is xxhash64(band index, its 8 values); rows sharing a (band, key) are candidates: edges from
  each to the smallest order in the bucket, collected to the driver (they are few) and joined
  with union-find; every member of a component but the smallest order is removed;
- the kept rows are written as Parquet (left anti join on the removed orders).
Writes WORK_DIR/removed_ids.txt and prints one JSON line {"rows", "removed", "exact", "near"}.
Spark ML's MinHashLSH alone is OR-amplified (one hash per table, no bands); the banding here is
what makes it the same 14 x 8 scheme as the other sides.
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
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--shingle-words", type=int, default=5)
    ap.add_argument("--bands", type=int, default=14)
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()

    from pyspark.ml.feature import HashingTF, MinHashLSH, NGram
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    spark = (SparkSession.builder.master(args.master).appName("bench-prep")
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "16")
             .config("spark.local.dir", os.path.join(args.work, "spark-local"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schema = StructType([StructField("id", StringType()), StructField("customer_id", StringType()),
                         StructField("text", StringType())])
    src = (spark.read.schema(schema).json(os.path.join(args.corpus, "part-*.jsonl"))
           .withColumn("ord", F.monotonically_increasing_id()))
    norm = F.trim(F.regexp_replace(F.lower(F.col("text")), r"(?U)[\W_]+", " "))
    docs = src.select("ord", "id", norm.alias("norm"))

    # exact: the first row of each normalised-text hash stays
    docs = docs.withColumn("h", F.xxhash64("norm"))
    ranked = docs.withColumn("rn", F.row_number().over(Window.partitionBy("h").orderBy("ord")))
    ranked = ranked.persist()
    exact_removed = [(r.ord, r.id) for r in ranked.where("rn > 1").select("ord", "id").collect()]

    # near: MinHash signatures of the 5-word shingles, banded
    n = args.shingle_words
    kept = (ranked.where("rn = 1 AND norm != ''")
            .withColumn("words", F.split("norm", " ")))
    kept = NGram(n=n, inputCol="words", outputCol="grams").transform(kept)
    kept = kept.withColumn("grams", F.when(F.size("words") < n, F.array(F.col("norm")))
                           .otherwise(F.col("grams")))
    kept = HashingTF(inputCol="grams", outputCol="features", numFeatures=1 << 30,
                     binary=True).transform(kept)
    lsh = MinHashLSH(inputCol="features", outputCol="hashes", numHashTables=args.bands * args.rows,
                     seed=1).fit(kept)
    sig = lsh.transform(kept).select("ord", F.transform("hashes", lambda v: vector_to_array(v)[0])
                                     .alias("sig"))
    r = args.rows
    bands = sig.select("ord", F.posexplode(F.transform(
        F.sequence(F.lit(0), F.lit(args.bands - 1)),
        lambda j: F.xxhash64(j, F.slice("sig", j * r + 1, r)))).alias("band", "key"))
    buckets = (bands.groupBy("band", "key").agg(F.collect_list("ord").alias("docs"))
               .where(F.size("docs") > 1))
    edges = (buckets.select(F.array_min("docs").alias("root"), F.explode("docs").alias("other"))
             .where("other != root").distinct().collect())

    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    for e in edges:
        a, b = find(e.root), find(e.other)
        if a != b:
            parent[max(a, b)] = min(a, b)
    near_removed_ords = [x for x in parent if find(x) != x]
    removed_ords = spark.createDataFrame([(o,) for o in near_removed_ords] + [(o,) for o, _ in exact_removed],
                                         "ord long")
    near_ids = (ranked.join(F.broadcast(removed_ords), "ord").where("rn = 1").select("id")
                .collect()) if near_removed_ords else []
    (src.join(F.broadcast(removed_ords), "ord", "left_anti").drop("ord")
     .write.mode("overwrite").parquet(os.path.join(args.work, "deduplicated")))
    rows = ranked.count()
    spark.stop()

    removed = [i for _, i in exact_removed] + [r.id for r in near_ids]
    with open(os.path.join(args.work, "removed_ids.txt"), "w") as f:
        f.writelines(i + "\n" for i in removed)
    print(json.dumps({"rows": rows, "removed": len(removed), "exact": len(exact_removed),
                      "near": len(near_ids)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
