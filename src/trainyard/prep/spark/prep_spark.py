"""The Spark engine of `trainyard prep` (issue 18, docs/prep.md "Spark engine").

Runs a pipeline spec (the YAML `trainyard prep` reads) on Spark with Spark's own operators:
the rows are a DataFrame; filters are column expressions (lengths, required fields) and
vectorised pandas UDFs (regular expressions with PCRE2, as the native engine: see
prep_algorithms.Regex; repetition, English score); exact dedup is a
window over the normalized text's XXH3-128; near dedup computes MinHash signatures in a pandas
UDF (numpy, the same permutations as prep/minhash.h), explodes the band keys, groups by
(band, key) to each bucket's smallest document, joins the edges (filtered on the estimated
Jaccard with Spark array functions when threshold > 0) and labels connected components by
iterated min-label joins; redaction, templates and the split are UDFs over the same Python
algorithms (prep_algorithms.py). Outputs are Delta tables written by delta-spark.

Every deterministic result equals the native engine's (src/trainyard/prep/pipeline.cc):
doc ids, filters, exact and near dedup, redaction, template, tokens (Hugging Face `tokenizers`
on the same tokenizer.json) and split, and the dropped table's (doc_id, step, reason).

Catalog tables are the CLI's part (cli/prep_spark_command.cc, --staging): it reads a source
table at one version through the server's rows API (the native engine's reader: the same row
order, row filters and column masks applied) into a Parquet file with each row's ordinal, and
imports the outputs this program writes as Parquet into catalog tables through the tables
import API, with lineage. Run directly, this program reads local files and writes local Delta
directories only.

Usage (what `trainyard prep SPEC --engine spark` runs):
    python prep_spark.py SPEC.yaml [--master local[*]] [--report report.json]
                         [--staging staging.json] [--quiet]
Library use (tests): run_pipeline(spark, spec_path, staging=None) -> report dict.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import prep_algorithms as alg  # noqa: E402


class SpecError(ValueError):
    pass


# ---- the spec ---------------------------------------------------------------------------------

STEP_KINDS = ("filter", "dedup_exact", "dedup_near", "redact_pii", "template", "tokenize", "split")


def load_spec(path: str) -> dict:
    """The spec as the Spark engine needs it. Validation is the native parser's job: the CLI
    parses the spec with it before starting Spark; here only what this engine relies on."""
    with open(path, "rb") as f:
        raw = f.read()
    doc = yaml.safe_load(raw.decode("utf-8"))
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: the pipeline spec must be a mapping")
    spec = {
        "name": doc["name"],
        "version": hashlib.sha256(raw).hexdigest(),
        "base_dir": os.path.dirname(os.path.abspath(path)),
        "text_column": doc.get("text_column", "text"),
        "source": doc["source"],
        "steps": [],
        "outputs": {},
    }
    for index, item in enumerate(doc.get("steps") or []):
        (kind, body), = item.items()
        if kind not in STEP_KINDS:
            raise SpecError(f"{path}: steps[{index}]: unknown step {kind!r}")
        body = dict(body or {})
        body.setdefault("column", spec["text_column"])
        spec["steps"].append({"kind": kind, "label": f"{index}_{kind}", "index": index, **body})
    for name, target in (doc.get("outputs") or {}).items():
        if isinstance(target, dict):
            spec["outputs"][name] = {"path": target["path"]}
        else:
            spec["outputs"][name] = {"table": target}
    return spec


def check_supported(spec: dict, staging: dict | None = None) -> None:
    """Catalog tables need the CLI's staging (it talks to the server); found before a JVM
    starts."""
    staging = staging or {}
    via_cli = ("; run it with 'trainyard prep SPEC --engine spark', which reads and writes "
               "catalog tables through the server")
    if "table" in spec["source"] and "source" not in staging:
        raise SpecError("source.table: this program reads local files only" + via_cli)
    for name, target in spec["outputs"].items():
        if "table" in target and name not in staging.get("outputs", {}):
            raise SpecError(f"outputs.{name}: this program writes local Delta directories "
                            "only" + via_cli)
    for step in spec["steps"]:
        if step["kind"] == "tokenize" or (step["kind"] == "filter" and (
                "min_tokens" in step or "max_tokens" in step)):
            try:
                import tokenizers  # noqa: F401
            except ImportError:
                raise SpecError(f"steps[{step['index']}].{step['kind']}: tokenizing on Spark "
                                "needs the Python package tokenizers (0.19.1, "
                                "scripts/install-deps installs it)") from None
            _tokenizer_json(spec, step, f"steps[{step['index']}].{step['kind']}")


def _join(base: str, path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(base, path)


# ---- the session ------------------------------------------------------------------------------

DELTA_VERSION = "3.3.2"
DELTA_PACKAGES = (f"io.delta:delta-spark_2.12:{DELTA_VERSION}",
                  f"io.delta:delta-storage:{DELTA_VERSION}")


def start_session(master: str = "local[*]"):
    """A SparkSession with Delta (jars from the Ivy cache tests/spark_session.py fills, else
    resolved from Maven Central)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    ivy = os.environ.get("TRAINYARD_IVY_DIR",
                         os.path.join(os.path.expanduser("~"), ".cache", "trainyard", "ivy"))
    builder = (SparkSession.builder.master(master).appName("trainyard-prep")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               # Staged catalog outputs: microsecond timestamps, as Arrow and Delta write them.
               .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
               .config("spark.jars.ivy", ivy)
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog",
                       "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
    if master.startswith("local"):
        # One machine: few shuffle partitions (Spark's 200 are for clusters) and no web UI.
        cores = os.cpu_count() or 2
        builder = (builder.config("spark.sql.shuffle.partitions", str(2 * cores))
                   .config("spark.default.parallelism", str(2 * cores))
                   .config("spark.ui.enabled", "false")
                   # Delta replays its log in 50 partitions by default: seconds per commit here.
                   .config("spark.databricks.delta.snapshotPartitions", str(2 * cores)))
    jars = [os.path.join(ivy, "jars", f"io.delta_{c.split(':')[1]}-{DELTA_VERSION}.jar")
            for c in DELTA_PACKAGES]
    if all(os.path.isfile(j) for j in jars):
        builder = builder.config("spark.jars", ",".join(jars))
    else:
        builder = builder.config("spark.jars.packages", ",".join(DELTA_PACKAGES))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# ---- the engine -------------------------------------------------------------------------------

def _regex_reason(pattern: str, dropped_when: int, reason: str):
    """A pandas UDF: `reason` for the texts whose PCRE2 search (prep_algorithms.Regex, the
    native engine's BoundedRegex::Search) gives `dropped_when`, regex_limit for those it could
    not decide within the limits, null for the rest."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    alg.regex(pattern)  # a bad pattern fails here, on the driver, before any task runs

    @F.pandas_udf(StringType())
    def regex_reason(s):
        import prep_algorithms as a
        rx = a.regex(pattern)

        def one(t):
            o = rx.search(t if isinstance(t, str) else "")
            return "regex_limit" if o == a.Regex.LIMIT else reason if o == dropped_when else None
        return s.map(one)
    return regex_reason


def _tokenizer_json(spec: dict, step: dict, field: str) -> str:
    """The tokenizer.json's text, read on the driver (workers need not see the file)."""
    path = _join(spec["base_dir"], step["tokenizer"])
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        from tokenizers import Tokenizer
        Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises plain Exceptions for a bad file
        raise SpecError(f"{field}.tokenizer: cannot load {step['tokenizer']}: {e}") from None
    return text


class SparkPipeline:
    def __init__(self, spark, spec: dict, staging: dict | None = None):
        from pyspark.sql import functions as F  # noqa: F401

        self.staging = staging or {}
        check_supported(spec, self.staging)
        self.spark = spark
        self.spec = spec
        self.steps = spec["steps"]
        spark.sparkContext.addPyFile(os.path.join(HERE, "prep_algorithms.py"))
        self.changes: dict[int, dict] = {}

    # -- source --

    def read_source(self):
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, StructField, StructType

        source = self.spec["source"]
        if "table" in source:
            return self._with_doc_ids(*self.read_staged_table())
        frames = []
        offset = 0
        columns = None
        for file_index, name in enumerate(source["files"]):
            path = _join(self.spec["base_dir"], name)
            ext = name.rsplit(".", 1)[-1].lower()
            if ext == "jsonl":
                df = self.spark.read.json(path)
                with open(path, encoding="utf-8") as f:
                    first = next((line for line in f if line.strip()), "{}")
                order = list(json.loads(first).keys())
                df = df.select(*[c for c in order if c in df.columns],
                               *[c for c in df.columns if c not in order])
            elif ext == "csv":
                df = self.spark.read.option("header", True).option("inferSchema", True) \
                    .option("multiLine", True).option("escape", '"').csv(path)
                # Arrow's CSV reader (the native engine's) infers 64-bit ints and doubles.
                df = df.select(*[F.col(f.name).cast("long") if f.dataType.typeName() in (
                    "integer", "short", "byte") else F.col(f.name).cast("double")
                    if f.dataType.typeName() == "float" else F.col(f.name)
                    for f in df.schema.fields])
            elif ext == "parquet":
                df = self.spark.read.parquet(path)
            else:
                raise SpecError(f"source.files: {name} must be a .jsonl, .csv or .parquet file")
            if columns is None:
                columns = df.columns
                schema = df.schema
            df = df.select(*columns)
            # One file is read in order (its splits keep file order): zipWithIndex numbers
            # the rows as the native engine does (per file, from 0).
            indexed = df.rdd.zipWithIndex().map(lambda r: (*r[0], r[1]))
            df = self.spark.createDataFrame(
                indexed, StructType([*schema.fields, StructField("_ord", LongType(), False)]))
            df = (df.withColumn("_src", F.lit(name))
                  .withColumn("_gidx", F.col("_ord") + F.lit(offset)))
            if file_index + 1 < len(source["files"]):
                offset += df.count()  # the next file's documents are numbered after these
            frames.append(df)
        df = frames[0]
        for other in frames[1:]:
            df = df.unionByName(other)
        self.description = ", ".join(source["files"])
        self.source_version = None
        return self._with_doc_ids(df, columns, schema)

    def read_staged_table(self):
        """The catalog table the CLI staged: one Parquet file in the rows API's order, with
        each row's ordinal in the table version (so doc ids are the native engine's)."""
        from pyspark.sql import functions as F

        staged = self.staging["source"]
        ordinal = staged["ordinal_column"]
        df = self.spark.read.parquet(staged["parquet"])
        columns = [c for c in df.columns if c != ordinal]
        schema = df.select(*columns).schema
        df = (df.withColumnRenamed(ordinal, "_ord")
              .withColumn("_src", F.lit(staged["name"]))
              .withColumn("_gidx", F.col("_ord")))
        self.description = staged["name"]
        self.source_version = int(staged["version"])
        return df, columns, schema

    def _with_doc_ids(self, df, columns, schema):
        from pyspark.sql import functions as F

        source = self.spec["source"]
        if "doc_id" in columns:
            raise SpecError("the source has a column doc_id, which prep adds to every row; "
                            "rename it")
        self.source_columns = list(columns)
        self.source_types = {f.name: f.dataType for f in schema.fields}
        id_column = source.get("id_column")
        if id_column:
            if id_column not in columns:
                raise SpecError(f'source.id_column: the source has no column "{id_column}" '
                                f"(columns: {', '.join(columns)})")
            key = F.col(id_column).cast("string")
        else:
            key = F.col("_ord").cast("string")
        doc_id = F.substring(F.sha2(F.concat(F.lit("trainyard-prep-v1\u0000"), F.col("_src"),
                                             F.lit("\u0000"), key), 256), 1, 16)
        df = (df.withColumn("doc_id", doc_id)
              .withColumn("_drop", F.lit(None).cast("int"))
              .withColumn("_reason", F.lit(None).cast("string"))
              .withColumn("_dup_of", F.lit(None).cast("string")))
        if id_column:
            self._check_unique_ids(df, id_column)
        return df

    @staticmethod
    def _check_unique_ids(df, id_column):
        """Fails as the native engine does: on the first row (in source order) whose id an
        earlier row of the same file has, naming both rows (1-based) and the value."""
        from pyspark.sql import functions as F
        dup = (df.groupBy("_src", "doc_id")
               .agg(F.count(F.lit(1)).alias("n"),
                    F.sort_array(F.collect_list(F.struct("_gidx", "_ord"))).alias("rows"),
                    F.first(F.col(id_column)).alias("value"))
               .filter(F.col("n") > 1)
               .orderBy(F.col("rows")[1]["_gidx"])
               .first())
        if dup is None:
            return
        first, second = dup["rows"][0]["_ord"] + 1, dup["rows"][1]["_ord"] + 1
        value = json.dumps(dup["value"], ensure_ascii=False)
        raise SpecError(f'{dup["_src"]} rows {first} and {second} have the same '
                        f'source.id_column "{id_column}" value {value}; ids must be unique '
                        "within a source (drop or fix the duplicate rows, or drop id_column to "
                        "use each row's position as its id)")

    # -- helpers --

    @staticmethod
    def _alive():
        from pyspark.sql import functions as F
        return F.col("_drop").isNull()

    def _drop_where(self, df, step, reason_expr, duplicate_of=None):
        from pyspark.sql import functions as F
        hit = self._alive() & reason_expr.isNotNull()
        if duplicate_of is not None:  # the doc_id of the row kept in a duplicate's place
            df = df.withColumn("_dup_of", F.when(hit, duplicate_of).otherwise(F.col("_dup_of")))
        return (df.withColumn("_reason", F.when(hit, reason_expr).otherwise(F.col("_reason")))
                .withColumn("_drop", F.when(hit, F.lit(step["index"])).otherwise(F.col("_drop"))))

    def _text(self, df, column):
        from pyspark.sql import functions as F
        if column not in df.columns:
            raise SpecError(f'the source has no column "{column}" '
                            f"(columns: {', '.join(self.source_columns)})")
        return F.coalesce(F.col(column).cast("string"), F.lit(""))

    # -- steps --

    def filter_step(self, df, step):
        from pyspark.sql import Column
        from pyspark.sql import functions as F
        from pyspark.sql.types import DoubleType

        text = self._text(df, step["column"]) if any(
            k in step for k in ("min_chars", "max_chars", "min_tokens", "max_tokens",
                                "drop_regex", "keep_regex", "max_repetition", "language")) \
            else None
        conds = []
        if "min_chars" in step:
            conds.append((F.length(text) < step["min_chars"], "min_chars"))
        if "max_chars" in step:
            conds.append((F.length(text) > step["max_chars"], "max_chars"))
        if "min_tokens" in step or "max_tokens" in step:
            from pyspark.sql.types import LongType
            tok_json = _tokenizer_json(self.spec, step, f"steps[{step['index']}].filter")

            @F.pandas_udf(LongType())
            def count_tokens(s):
                import pandas as pd
                import prep_algorithms as a
                tok = a.load_tokenizer(tok_json)
                encoded = tok.encode_batch([t if isinstance(t, str) else "" for t in s],
                                           add_special_tokens=False)
                return pd.Series([len(e.ids) for e in encoded], dtype="int64")
            n_tokens = count_tokens(text)
            if "min_tokens" in step:
                conds.append((n_tokens < step["min_tokens"], "min_tokens"))
            if "max_tokens" in step:
                conds.append((n_tokens > step["max_tokens"], "max_tokens"))
        # PCRE2, as the native engine (not Java's regex, whose syntax and byte/char semantics
        # differ): the reason, or regex_limit where a pattern hit PCRE2's limits.
        for key, dropped_when in (("drop_regex", alg.Regex.MATCH),
                                  ("keep_regex", alg.Regex.NO_MATCH)):
            if key in step:
                why = _regex_reason(step[key], dropped_when, key)(text)
                conds.append((why.isNotNull(), why))
        for column in step.get("required", []):
            if column not in df.columns:
                raise SpecError(f'steps[{step["index"]}].filter.required: the source has no '
                                f'column "{column}"')
            missing = F.col(column).isNull()
            if dict(df.dtypes)[column] == "string":
                missing = missing | (F.col(column) == "")
            conds.append((missing, f"required:{column}"))
        if "max_repetition" in step:
            @F.pandas_udf(DoubleType())
            def repetition(s):
                import prep_algorithms as a
                return s.map(a.repetition_ratio)
            conds.append((repetition(text) > float(step["max_repetition"]), "max_repetition"))
        if "language" in step:
            @F.pandas_udf(DoubleType())
            def english(s):
                import prep_algorithms as a
                return s.map(a.english_score)
            conds.append((english(text) < float(step.get("min_score", 0)), "language"))
        if not conds:
            return df
        reason = None
        for cond, name in conds:
            value = name if isinstance(name, Column) else F.lit(name)
            reason = F.when(cond, value) if reason is None else reason.when(cond, value)
        # No checkpoint: consecutive filters run in one pass with the next global step.
        return self._drop_where(df, step, reason)

    def dedup_exact_step(self, df, step):
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType

        @F.pandas_udf(StringType())
        def exact(s):
            import prep_algorithms as a
            return s.map(a.exact_hash_hex)

        df = df.withColumn("_h", F.when(self._alive(), exact(self._text(df, step["column"]))))
        group = Window.partitionBy("_h").orderBy("_gidx")
        df = (df.withColumn("_rank", F.when(F.col("_h").isNotNull(), F.row_number().over(group)))
              .withColumn("_first", F.first("doc_id").over(group)))
        df = self._drop_where(df, step, F.when(F.col("_rank") > 1, F.lit("duplicate")),
                              F.col("_first"))
        return df.drop("_h", "_rank", "_first").localCheckpoint()

    def dedup_near_step(self, df, step):
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, LongType, StructField, StructType

        k = int(step.get("shingle_words", 5))
        bands = int(step.get("bands", 14))
        rows = int(step.get("rows", 8))
        threshold = float(step.get("threshold", 0.0))
        seed = int(step.get("seed", 1))
        keep = step.get("keep", "first")
        perm = bands * rows
        out_type = StructType([StructField("keys", ArrayType(LongType())),
                               StructField("sig", ArrayType(LongType()))])

        @F.pandas_udf(out_type)
        def minhash(s):
            import pandas as pd
            import prep_algorithms as a
            hasher = a.MinHasher(k, bands, rows, seed)
            keys, sigs = [], []
            for text in s:
                sig = hasher.signature(text)
                if sig is None:
                    keys.append(None)
                    sigs.append(None)
                    continue
                keys.append([a.to_signed64(x) for x in hasher.band_keys(sig)])
                sigs.append(sig.astype("int64").tolist() if threshold > 0 else None)
            return pd.DataFrame({"keys": keys, "sig": sigs})

        mh = minhash(self._text(df, step["column"]))
        df = df.withColumn("_mh", F.when(self._alive(), mh)).localCheckpoint()
        docs = df.where(F.col("_mh.keys").isNotNull()).select(
            "_gidx", F.col("_mh.keys").alias("keys"), F.col("_mh.sig").alias("sig"),
            F.length(self._text(df, step["column"])).alias("len"))
        banded = docs.select("_gidx", F.posexplode("keys").alias("band", "key"))
        roots = banded.groupBy("band", "key").agg(F.min("_gidx").alias("root"))
        edges = (banded.join(roots, ["band", "key"]).where(F.col("_gidx") != F.col("root"))
                 .select(F.col("_gidx").alias("src"), F.col("root").alias("dst")).distinct())
        if threshold > 0:
            sa = docs.select(F.col("_gidx").alias("src"), F.col("sig").alias("sa"))
            sb = docs.select(F.col("_gidx").alias("dst"), F.col("sig").alias("sb"))
            same = F.size(F.filter(F.arrays_zip("sa", "sb"), lambda z: z["sa"] == z["sb"]))
            edges = (edges.join(sa, "src").join(sb, "dst")
                     .where(same.cast("double") / F.lit(float(perm)) >= F.lit(threshold))
                     .select("src", "dst"))
        both = edges.unionByName(edges.select(F.col("dst").alias("src"),
                                              F.col("src").alias("dst"))).localCheckpoint()
        # Connected components: every node takes the smallest label among itself and its
        # neighbours until nothing changes; the label is then the component's smallest doc.
        labels = docs.select(F.col("_gidx").alias("id"), F.col("_gidx").alias("label"))
        while True:
            offered = (both.join(labels.withColumnRenamed("id", "dst"), "dst")
                       .groupBy("src").agg(F.min("label").alias("offer")))
            updated = (labels.join(offered.withColumnRenamed("src", "id"), "id", "left")
                       .select("id", F.least("label", F.coalesce("offer", "label")).alias("new"),
                               "label")).localCheckpoint()
            changed = updated.where(F.col("new") < F.col("label")).count()
            labels = updated.select("id", F.col("new").alias("label"))
            if changed == 0:
                break
        members = docs.join(labels.withColumnRenamed("id", "_gidx"), "_gidx")
        if keep == "longest":
            order = Window.partitionBy("label").orderBy(F.col("len").desc(), F.col("_gidx"))
            kept = members.withColumn("_r", F.row_number().over(order)).where("_r = 1")
        else:
            kept = members.where(F.col("label") == F.col("_gidx"))
        kept_ids = df.select(F.col("_gidx").alias("_kept"), F.col("doc_id").alias("_kept_id"))
        kept = kept.select("label", F.col("_gidx").alias("_kept")).join(kept_ids, "_kept")
        dropped = (members.join(kept, "label").where(F.col("_gidx") != F.col("_kept"))
                   .select("_gidx", F.lit(1).alias("_near"), "_kept_id"))
        df = df.join(dropped, "_gidx", "left")
        df = self._drop_where(df, step, F.when(F.col("_near") == 1, F.lit("near_duplicate")),
                              F.col("_kept_id"))
        return df.drop("_near", "_kept_id", "_mh").localCheckpoint()

    def redact_step(self, df, step):
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

        column = step["column"]
        if column not in df.columns:
            raise SpecError(f'steps[{step["index"]}].redact_pii.column: the source has no '
                            f'column "{column}"')
        kinds = list(step.get("kinds") or [])
        patterns = list((step.get("patterns") or {}).items())
        replacement = step.get("replacement", "[{kind}]")
        alg.PiiRedactor(kinds, patterns, replacement)  # errors here, not in a worker
        out_type = StructType([StructField("text", StringType()),
                               StructField("counts", MapType(StringType(), LongType()))])

        @F.pandas_udf(out_type)
        def redact(s):
            import pandas as pd
            import prep_algorithms as a
            r = a.PiiRedactor(kinds, patterns, replacement)
            texts, counts = [], []
            for text in s:
                if text is None:
                    texts.append(None)
                    counts.append({})
                    continue
                t, c = r.redact(text)
                texts.append(t)
                counts.append(c)
            return pd.DataFrame({"text": texts, "counts": counts})

        df = df.withColumn("_red", F.when(self._alive(), redact(F.col(column)))).localCheckpoint()
        exploded = df.where(F.col("_red").isNotNull()).select(
            F.explode("_red.counts").alias("kind", "n"))
        by_kind = {r["kind"]: int(r["total"]) for r in
                   exploded.groupBy("kind").agg(F.sum("n").alias("total")).collect()}
        rows_changed = df.where(F.size("_red.counts") > 0).count()
        self.changes[step["index"]] = {"rows_changed": rows_changed, "changed": by_kind}
        df = df.withColumn(column, F.when(F.col("_red").isNotNull(), F.col("_red.text"))
                           .otherwise(F.col(column)))
        return df.drop("_red").localCheckpoint()

    def template_step(self, df, step):
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType

        fmt = step["format"]
        system = step.get("system", "")
        prompt = step["prompt_column"]
        response = step.get("response_column", "")
        output = step.get("output_column", "text")
        alg.render_template(fmt, "", "", None)  # unknown formats fail here

        @F.udf(StringType())
        def render(p, r):
            import prep_algorithms as a
            return a.render_template(fmt, system, p, r)

        reason = F.when(F.col(prompt).isNull(), F.lit("missing_prompt"))
        if response:
            reason = reason.when(F.col(response).isNull(), F.lit("missing_response"))
        df = self._drop_where(df, step, reason)
        value = render(F.col(prompt), F.col(response) if response else F.lit(None).cast("string"))
        if output in df.columns:
            value = F.when(self._alive(), value).otherwise(F.col(output))
        else:
            self.new_columns.append(output)
            value = F.when(self._alive(), value)
        return df.withColumn(output, value)

    def tokenize_step(self, df, step):
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, IntegerType

        column = step["column"]
        if column not in df.columns:
            raise SpecError(f'steps[{step["index"]}].tokenize.column: the source has no column '
                            f'"{column}" (columns: {", ".join(self.source_columns)})')
        output = step.get("output_column", "input_ids")
        if output in df.columns or output == "doc_id" or output in self.token_columns:
            raise SpecError(f'steps[{step["index"]}].tokenize.output_column: a column "{output}" '
                            "exists already; choose another name")
        tok_json = _tokenizer_json(self.spec, step, f"steps[{step['index']}].tokenize")
        special = bool(step.get("add_special_tokens", True))

        @F.pandas_udf(ArrayType(IntegerType()))
        def encode(s):
            import pandas as pd
            import prep_algorithms as a
            tok = a.load_tokenizer(tok_json)
            texts = [t if isinstance(t, str) else "" for t in s]  # nulls: NaN or None
            encoded = tok.encode_batch(texts, add_special_tokens=special)
            return pd.Series([e.ids for e in encoded])

        df = self._drop_where(df, step, F.when(F.col(column).isNull(), F.lit("missing_text")))
        self.token_columns.append(output)
        return df.withColumn(output, F.when(self._alive(), encode(F.col(column))))

    def split_step(self, df, step):
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType

        ratios = [(str(k), float(v)) for k, v in step["ratios"].items()]
        seed = int(step.get("seed", 0))
        group_by = step.get("group_by", "")
        if group_by:
            if group_by not in df.columns:
                raise SpecError(f'steps[{step["index"]}].split.group_by: the source has no '
                                f'column "{group_by}"')
            key = F.coalesce(F.col(group_by).cast("string"), F.col("doc_id"))
        else:
            key = F.col("doc_id")

        @F.pandas_udf(StringType())
        def assign(s):
            import prep_algorithms as a
            return s.map(lambda g: a.assign_split(ratios, seed, g))

        self.split_names = [n for n, _ in ratios]
        return df.withColumn("_split", F.when(self._alive(), assign(key)))

    # -- run --

    def run(self) -> dict:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        began = time.monotonic()
        self.new_columns: list[str] = []
        self.token_columns: list[str] = []
        self.split_names = None
        df = self.read_source()
        for step in self.steps:
            kind = step["kind"]
            handler = {"filter": self.filter_step, "dedup_exact": self.dedup_exact_step,
                       "dedup_near": self.dedup_near_step, "redact_pii": self.redact_step,
                       "template": self.template_step, "tokenize": self.tokenize_step,
                       "split": self.split_step}[kind]
            df = handler(df, step)
        df = df.localCheckpoint()

        # The report: where rows were dropped and why, with the first 3 doc ids per reason.
        first = Window.partitionBy("_drop", "_reason").orderBy("_gidx")
        split = F.col("_split") if self.split_names is not None else F.lit(None).cast("string")
        groups = (df.withColumn("_n", F.row_number().over(first)).withColumn("_s", split)
                  .groupBy("_drop", "_reason", "_s")
                  .agg(F.count(F.lit(1)).alias("rows"),
                       F.sort_array(F.collect_list(F.when(F.col("_n") <= 3, F.struct(
                           "_gidx", "doc_id")))).alias("ex")).collect())
        self.rows_in = sum(int(r["rows"]) for r in groups)
        dropped_rows = [r for r in groups if r["_drop"] is not None]
        kept_rows = {r["_s"]: int(r["rows"]) for r in groups if r["_drop"] is None}
        steps_report = []
        alive = self.rows_in
        for step in self.steps:
            reasons = {r["_reason"]: {"rows": int(r["rows"]),
                                      "examples": [e["doc_id"] for e in r["ex"]]}
                       for r in dropped_rows if r["_drop"] == step["index"]}
            n = sum(v["rows"] for v in reasons.values())
            entry = {"step": step["label"], "kind": step["kind"], "rows_in": alive,
                     "rows_out": alive - n, "rows_dropped": n,
                     "dropped": dict(sorted(reasons.items()))}
            alive -= n
            if step["kind"] == "redact_pii":
                c = self.changes.get(step["index"], {"rows_changed": 0, "changed": {}})
                entry["rows_changed"] = c["rows_changed"]
                entry["changed"] = dict(sorted(c["changed"].items()))
            steps_report.append(entry)

        kept = df.where(F.col("_drop").isNull())
        columns = ["doc_id", *self.source_columns, *self.new_columns, *self.token_columns]
        outputs = []
        props = {"trainyard.prep.pipeline": self.spec["name"],
                 "trainyard.prep.version": self.spec["version"]}
        names = self.split_names or ["rows"]
        split_rows = {}
        for name in names:
            rows = kept if self.split_names is None else kept.where(F.col("_split") == name)
            n = kept_rows.get(name if self.split_names is not None else None, 0)
            outputs.append(self.write(name, rows.orderBy("_gidx").select(*columns), props, n))
            split_rows[name] = n
        if "dropped" in self.spec["outputs"]:
            labels = F.element_at(F.array(*[F.lit(s["label"]) for s in self.steps]),
                                  F.col("_drop") + 1)
            dropped = (df.where(F.col("_drop").isNotNull()).orderBy("_gidx")
                       .select("doc_id", labels.alias("step"), F.col("_reason").alias("reason"),
                               F.col("_dup_of").alias("duplicate_of")))
            outputs.append(self.write("dropped", dropped, props,
                                      sum(int(r["rows"]) for r in dropped_rows)))
        for entry, step in zip(steps_report, self.steps):
            if step["kind"] == "split":
                entry["splits"] = split_rows
        report = {"pipeline": self.spec["name"], "version": self.spec["version"],
                  "source": self.description, "engine": "spark",
                  "master": self.spark.sparkContext.master, "rows_in": self.rows_in,
                  "rows_out": alive, "rows_dropped": self.rows_in - alive,
                  "steps": steps_report, "outputs": outputs,
                  "seconds": time.monotonic() - began}
        if self.source_version is not None:
            report["source_version"] = self.source_version
        return report

    def write(self, name: str, df, props: dict, rows: int) -> dict:
        target = self.spec["outputs"].get(name)
        if target is None:
            raise SpecError(f"outputs.{name} is required")
        if "table" in target:
            # Parquet for the CLI to import into the catalog table (one file, in order); the
            # table's version is the import's, which the CLI fills in.
            staged = self.staging["outputs"][name]
            df.coalesce(1).write.mode("overwrite").parquet(staged)
            return {"name": name, "target": target["table"], "rows": rows}
        path = _join(self.spec["base_dir"], target["path"])
        df = df.coalesce(1)
        # Every commit (the write and the properties') carries the pipeline's name and version
        # as its commitInfo.userMetadata, the same string as the native engine's.
        meta_key = "spark.databricks.delta.commitInfo.userMetadata"
        self.spark.conf.set(meta_key, json.dumps(props, sort_keys=True, separators=(",", ":")))
        try:
            (df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
             .save(path))
            quoted = path.replace("`", "``")
            settings = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
            self.spark.sql(f"ALTER TABLE delta.`{quoted}` SET TBLPROPERTIES ({settings})")
        finally:
            self.spark.conf.unset(meta_key)
        # The version just committed: the newest commit file of the (local) table's log.
        log = os.path.join(path, "_delta_log")
        version = max(int(f[:20]) for f in os.listdir(log) if f.endswith(".json") and
                      f[:20].isdigit())
        return {"name": name, "target": target["path"], "rows": rows, "version": int(version)}


def run_pipeline(spark, spec_path: str, staging: dict | None = None) -> dict:
    return SparkPipeline(spark, load_spec(spec_path), staging).run()


def print_report(report: dict) -> None:
    print(f"pipeline {report['pipeline']} on Spark ({report['master']}): "
          f"{report['rows_in']:,} rows in, {report['rows_out']:,} out, "
          f"{report['rows_dropped']:,} dropped in {report['seconds']:.1f} s")
    header = ("STEP", "ROWS IN", "ROWS OUT", "DROPPED", "DETAIL")
    table = [header]
    for s in report["steps"]:
        detail = ", ".join(f"{k} {v['rows']}" for k, v in s["dropped"].items())
        if s.get("changed"):
            detail = ", ".join(f"{k} {v}" for k, v in s["changed"].items()) + " redacted"
        if s.get("splits"):
            detail = ", ".join(f"{k} {v}" for k, v in s["splits"].items())
        table.append((s["step"], f"{s['rows_in']:,}", f"{s['rows_out']:,}",
                      f"{s['rows_dropped']:,}", detail))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for o in report["outputs"]:
        version = f" (version {o['version']})" if "version" in o else ""
        print(f"  -> {o['name']}: {o['rows']:,} rows in {o['target']}{version}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="trainyard prep --engine spark",
                                description="Runs a prep pipeline spec on Spark.")
    p.add_argument("spec")
    p.add_argument("--master", default="local[*]")
    p.add_argument("--report", default="")
    p.add_argument("--staging", default="",
                   help="JSON from the CLI: the staged catalog source and outputs")
    p.add_argument("--quiet", action="store_true", help="no report on stdout (the CLI prints it)")
    args = p.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        staging = None
        if args.staging:
            with open(args.staging, encoding="utf-8") as f:
                staging = json.load(f)
        check_supported(spec, staging)
    except (OSError, ValueError, yaml.YAMLError, KeyError, SpecError) as e:
        print(f"trainyard prep: {args.spec}: {e}", file=sys.stderr)
        return 2
    spark = start_session(args.master)
    try:
        report = SparkPipeline(spark, spec, staging).run()
    except SpecError as e:
        print(f"trainyard prep: {args.spec}: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    if not args.quiet:
        print_report(report)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
