"""Delta interop (issue 15, item 6): Trainyard's Delta tables against the real tools.

Our side is `build/delta_tool` (tests/tools/delta_tool.cc), a thin command line over
tables::DeltaTable. The other side is the real thing, pinned by scripts/install-deps: delta-rs
(`deltalake`), DuckDB with its `delta` extension (`duckdb-ext-delta`, loaded offline from the
wheel) and Spark with `delta-spark` (one local SparkSession per test session, tests/spark_session.py).

- A table Trainyard writes (create, appends, delete, update, add columns, overwrite, a
  checkpoint after 10+ commits; and a partitioned table) reads as the same rows, at every version
  checked, in delta-rs, DuckDB (`delta_scan`, and `ATTACH ... (TYPE delta, VERSION v)` for time
  travel) and Spark (`versionAsOf`).
- Tables delta-rs and Spark write (appends, overwrite, schema evolution, checkpoints,
  partitions) read the same in Trainyard, by version and by timestamp.
- Concurrent appenders (our tool and delta-rs, in parallel processes) lose no commit.
- Faults: a writer killed between its data file and its commit leaves the previous version
  and a vacuumable orphan; a truncated or corrupt log entry is an error naming the version;
  deletion vectors (written by Spark) are refused naming the feature.

Rows are compared in a canonical form: a list of dicts sorted by `id`, timestamps as integer
microseconds since the epoch, strings as str (each tool has its own Arrow string and timestamp
types).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.ipc
import pytest
from deltalake import DeltaTable, write_deltalake
from test_s3_artifacts import moto_s3, s3_env  # noqa: F401 (moto_s3 is a fixture)

REPO = Path(__file__).resolve().parent.parent
DELTA_TOOL = Path(os.environ.get("TRAINYARD_DELTA_TOOL", REPO / "build" / "delta_tool"))
TOOL_TIMEOUT_S = 120

SCHEMA_SPEC = "id:int64!,ts:timestamp,category:string,text:string,score:float64,flag:bool"
CATEGORIES = ("billing", "login", "shipping", "refund")
TS0_US = 1_714_550_400_000_000  # 2024-05-01T08:00:00Z


# ---- our side: delta_tool


def tool(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    if not DELTA_TOOL.exists():
        pytest.fail(f"{DELTA_TOOL} does not exist: build it with `ninja -C build delta_tool`")
    proc = subprocess.run([str(DELTA_TOOL), *map(str, args)], capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S, env=env)
    if check and proc.returncode != 0:
        pytest.fail(f"delta_tool {' '.join(map(str, args))} exited {proc.returncode}:\n"
                    f"{proc.stderr}{proc.stdout[-2000:]}")
    return proc


def tool_json(*args: str, env: dict | None = None) -> dict:
    return json.loads(tool(*args, env=env).stdout.strip().splitlines()[-1])


def tool_error(*args: str) -> str:
    """Runs a command that must fail with a Status (exit 1); returns its message."""
    proc = tool(*args, check=False)
    assert proc.returncode == 1, (f"expected delta_tool {' '.join(map(str, args))} to fail, "
                                  f"got {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr}")
    return proc.stderr


def ours(path: Path | str, tmp_path: Path, version: int | None = None,
         timestamp_ms: int | None = None, env: dict | None = None) -> list[dict]:
    out = tmp_path / f"read-{time.monotonic_ns()}.arrow"
    args = ["read", path, "--out", out]
    if version is not None:
        args += ["--version", version]
    if timestamp_ms is not None:
        args += ["--timestamp", timestamp_ms]
    result = tool_json(*args, env=env)
    if version is not None:
        assert result["version"] == version
    with pa.ipc.open_file(out) as reader:
        table = reader.read_all()
    assert table.num_rows == result["rows"]
    return canonical(table)


# ---- the other tools


def delta_rs(path: Path, version: int | None = None) -> list[dict]:
    dt = DeltaTable(str(path)) if version is None else DeltaTable(str(path), version=version)
    return canonical(dt.to_pyarrow_table())


@pytest.fixture(scope="module")
def duck():
    import duckdb_ext

    extensions = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
    con = duckdb.connect(config={"extension_directory": extensions,
                                 "autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    con.execute("LOAD delta")  # from the wheel: no network
    yield con
    con.close()


_attached = iter(range(1_000_000))


def duckdb_rows(con, path: Path, version: int | None = None) -> list[dict]:
    if version is None:
        table = con.execute("SELECT * FROM delta_scan(?)", [str(path)]).fetch_arrow_table()
    else:
        alias = f"t{next(_attached)}"
        con.execute(f"ATTACH '{path}' AS {alias} (TYPE delta, VERSION {int(version)})")
        try:
            table = con.execute(f"SELECT * FROM {alias}").fetch_arrow_table()
        finally:
            con.execute(f"DETACH {alias}")
    return canonical(table)


def spark_rows(spark, path: Path, version: int | None = None) -> list[dict]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    df = reader.load(str(path))
    exprs = [f"unix_micros(`{f.name}`) AS `{f.name}`" if f.dataType.typeName() == "timestamp"
             else f"`{f.name}`" for f in df.schema.fields]
    rows = [r.asDict() for r in df.selectExpr(*exprs).collect()]
    return sorted(rows, key=lambda r: r["id"])


def canonical(table: pa.Table) -> list[dict]:
    columns = {}
    for name, column in zip(table.column_names, table.columns):
        t = column.type
        if pa.types.is_timestamp(t):
            column = column.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
        elif pa.types.is_dictionary(t):
            column = column.cast(t.value_type)
        columns[name] = column.to_pylist()
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    return sorted(rows, key=lambda r: r["id"])


# ---- rows


def make_rows(start: int, n: int, with_lang: bool = False) -> list[dict]:
    rows = []
    for i in range(start, start + n):
        row = {"id": i, "ts": TS0_US + i * 1_000_003, "category": CATEGORIES[i % 4],
               "text": f"ticket {i}: " + "the printer says PC LOAD LETTER. " * (1 + i % 5),
               "score": (i % 17) / 4.0, "flag": i % 3 == 0}
        if i % 11 == 0:
            row["text"] = None
        if with_lang:
            row["lang"] = ("en", "de", "fr")[i % 3]
        rows.append(row)
    return rows


def as_arrow(rows: list[dict], lang: bool = False) -> pa.Table:
    fields = [pa.field("id", pa.int64(), nullable=False),
              pa.field("ts", pa.timestamp("us", tz="UTC")),
              pa.field("category", pa.string()), pa.field("text", pa.string()),
              pa.field("score", pa.float64()), pa.field("flag", pa.bool_())]
    if lang:
        fields.append(pa.field("lang", pa.string()))
    schema = pa.schema(fields)
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in fields} for r in rows],
                                schema=schema)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    def encode(row: dict) -> dict:
        out = dict(row)
        out["ts"] = _iso(row["ts"])
        return out

    path.write_text("".join(json.dumps(encode(r)) + "\n" for r in rows))
    return path


def _iso(micros: int) -> str:
    seconds, us = divmod(micros, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{us:06d}Z"


def expected(rows: list[dict], lang: bool = False) -> list[dict]:
    keys = ("id", "ts", "category", "text", "score", "flag") + (("lang",) if lang else ())
    return sorted(({k: r.get(k) for k in keys} for r in rows), key=lambda r: r["id"])


# ---- a table Trainyard writes, read by the others


@pytest.fixture(scope="module")
def our_table(tmp_path_factory):
    """Our table through 13 versions; returns (path, {version: expected rows})."""
    base = tmp_path_factory.mktemp("ours")
    path = base / "tickets"
    states: dict[int, list[dict]] = {}
    assert tool_json("create", path, "--schema", SCHEMA_SPEC, "--name", "tickets")["version"] == 0
    states[0] = []
    rows = make_rows(0, 100)
    assert _append(path, base, rows) == 1
    states[1] = expected(rows)
    rows += make_rows(100, 100)
    assert _append(path, base, make_rows(100, 100)) == 2
    states[2] = expected(rows)
    deleted = tool_json("delete", path, "--where", "id < 20 OR category = 'refund'")
    rows = [r for r in rows if not (r["id"] < 20 or r["category"] == "refund")]
    assert (deleted["version"], deleted["rows_affected"]) == (3, 200 - len(rows))
    states[3] = expected(rows)
    updated = tool_json("update", path, "--where", "category = 'billing' AND score > 2",
                        "--set", "score=0.5", "--set", "text='escalated'")
    hit = [r for r in rows if r["category"] == "billing" and r["score"] > 2]
    for r in hit:
        r.update(score=0.5, text="escalated")
    assert (updated["version"], updated["rows_affected"]) == (4, len(hit))
    states[4] = expected(rows)
    assert tool_json("add-columns", path, "--schema", "lang:string")["version"] == 5
    states[5] = expected(rows, lang=True)
    new = make_rows(200, 50, with_lang=True)
    assert _append(path, base, new) == 6
    rows += new
    states[6] = expected(rows, lang=True)
    rows = make_rows(300, 40, with_lang=True)
    assert tool_json("overwrite", path, write_jsonl(base / "ow.jsonl", rows))["version"] == 7
    states[7] = expected(rows, lang=True)
    for v in range(8, 13):  # past the default checkpoint interval (10)
        new = make_rows(1000 + 10 * v, 10, with_lang=True)
        assert _append(path, base, new) == v
        rows += new
        states[v] = expected(rows, lang=True)
    return path, states


def _append(path: Path, base: Path, rows: list[dict]) -> int:
    file = write_jsonl(base / f"rows-{rows[0]['id']}.jsonl", rows)
    (commit,) = tool_json("append", path, file)["commits"]
    assert commit["rows_written"] == len(rows)
    return commit["version"]


CHECKED_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 10, 12)


def test_our_table_reads_back_in_trainyard(our_table, tmp_path):
    path, states = our_table
    for v in CHECKED_VERSIONS:
        assert ours(path, tmp_path, version=v) == states[v], f"version {v}"
    assert ours(path, tmp_path) == states[12]


def test_our_table_in_delta_rs(our_table):
    path, states = our_table
    for v in CHECKED_VERSIONS:
        assert delta_rs(path, v) == states[v], f"version {v}"
    dt = DeltaTable(str(path))
    assert dt.version() == 12
    assert dt.metadata().name == "tickets"
    assert [h["version"] for h in dt.history()] == list(range(12, -1, -1))


def test_our_table_in_duckdb(our_table, duck):
    path, states = our_table
    assert duckdb_rows(duck, path) == states[12]
    for v in CHECKED_VERSIONS:
        assert duckdb_rows(duck, path, v) == states[v], f"version {v}"


def test_our_table_in_spark(our_table, spark):
    path, states = our_table
    # Fewer versions than the others: each Spark read costs seconds on 2 shared cores.
    for v in (1, 3, 4, 5, 7, 12):
        assert spark_rows(spark, path, v) == states[v], f"version {v}"
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert sorted(r["version"] for r in history) == list(range(13))


def test_our_checkpoint_is_used_by_the_others(our_table, tmp_path, duck, spark):
    path, states = our_table
    log = path / "_delta_log"
    assert (log / f"{10:020d}.checkpoint.parquet").is_file()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 10
    # A copy without the commits before the checkpoint can only be read through it.
    copy = tmp_path / "from-checkpoint"
    shutil.copytree(path, copy)
    for v in range(0, 10):
        (copy / "_delta_log" / f"{v:020d}.json").unlink()
    assert delta_rs(copy) == states[12]
    assert duckdb_rows(duck, copy) == states[12]
    assert spark_rows(spark, copy) == states[12]
    assert ours(copy, tmp_path) == states[12]
    # An explicit checkpoint at the latest version is read by them too: without the commits
    # and the checkpoint before it, only the new checkpoint holds the table's files.
    assert tool_json("checkpoint", copy)["version"] == 12
    assert json.loads((copy / "_delta_log" / "_last_checkpoint").read_text())["version"] == 12
    for name in (f"{10:020d}.json", f"{11:020d}.json", f"{10:020d}.checkpoint.parquet"):
        (copy / "_delta_log" / name).unlink()
    assert delta_rs(copy) == states[12]
    assert duckdb_rows(duck, copy) == states[12]
    assert spark_rows(spark, copy) == states[12]
    assert ours(copy, tmp_path) == states[12]


@pytest.fixture(scope="module")
def our_partitioned(tmp_path_factory):
    base = tmp_path_factory.mktemp("ours-part")
    path = base / "tickets"
    tool_json("create", path, "--schema", SCHEMA_SPEC, "--partition", "category")
    states = {0: []}
    rows = make_rows(0, 60)
    assert _append(path, base, rows) == 1
    states[1] = expected(rows)
    rows += make_rows(60, 40)
    assert _append(path, base, make_rows(60, 40)) == 2
    states[2] = expected(rows)
    tool_json("delete", path, "--where", "category = 'login'")
    rows = [r for r in rows if r["category"] != "login"]
    states[3] = expected(rows)
    return path, states


def test_our_partitioned_table_in_every_tool(our_partitioned, tmp_path, duck, spark):
    path, states = our_partitioned
    assert sorted(p.name for p in path.iterdir() if p.is_dir()) == [
        "_delta_log", "category=billing", "category=login", "category=refund",
        "category=shipping"]
    assert DeltaTable(str(path)).metadata().partition_columns == ["category"]
    for v in (1, 2, 3):
        assert ours(path, tmp_path, version=v) == states[v], f"ours, version {v}"
        assert delta_rs(path, v) == states[v], f"delta-rs, version {v}"
        assert duckdb_rows(duck, path, v) == states[v], f"duckdb, version {v}"
        assert spark_rows(spark, path, v) == states[v], f"spark, version {v}"
    # Partition pruning gives the same rows as a filter.
    out = tool_json("read", path, "--where", "category = 'billing'", "--count")
    assert out["rows"] == sum(1 for r in states[3] if r["category"] == "billing")


# ---- tables the others write, read by Trainyard


def commit_times_ms(path: Path) -> dict[int, int]:
    """Each version's commit time as the protocol defines it without in-commit timestamps:
    the modification time of its log entry, in milliseconds."""
    return {int(p.name[:20]): p.stat().st_mtime_ns // 1_000_000
            for p in (path / "_delta_log").glob("*.json")}


def latest_at(times: dict[int, int], t_ms: int) -> int:
    """The version time travel to `t_ms` must give (two commits can share a millisecond)."""
    return max(v for v, t in times.items() if t <= t_ms)


def test_delta_rs_table_in_trainyard(tmp_path):
    path = tmp_path / "rs"
    states = {}
    rows = make_rows(0, 50)
    write_deltalake(str(path), as_arrow(rows), mode="append")
    states[0] = expected(rows)
    for v in range(1, 4):
        new = make_rows(100 * v, 30)
        write_deltalake(str(path), as_arrow(new), mode="append")
        rows += new
        states[v] = expected(rows)
    rows = make_rows(500, 25)
    write_deltalake(str(path), as_arrow(rows), mode="overwrite")
    states[4] = expected(rows)
    new = make_rows(600, 20, with_lang=True)
    write_deltalake(str(path), as_arrow(new, lang=True), mode="append", schema_mode="merge")
    rows += new
    states[5] = expected(rows, lang=True)
    DeltaTable(str(path)).create_checkpoint()
    new = make_rows(700, 10, with_lang=True)
    write_deltalake(str(path), as_arrow(new, lang=True), mode="append")
    rows += new
    states[6] = expected(rows, lang=True)

    assert (path / "_delta_log" / f"{5:020d}.checkpoint.parquet").is_file()
    for v in range(7):
        assert ours(path, tmp_path, version=v) == states[v], f"version {v}"
    assert ours(path, tmp_path) == states[6]
    # Time travel by timestamp. Without in-commit timestamps a version's time is its log
    # entry's modification time (PROTOCOL.md; Spark and delta-rs do so). The entries get times a
    # minute apart, an hour before their commitInfo timestamps, so that only this definition
    # gives these answers; delta-rs gives them too.
    base_ms = (int(time.time()) - 3600) * 1000
    for v in range(7):
        t = (base_ms + v * 60_000) / 1000
        os.utime(path / "_delta_log" / f"{v:020d}.json", (t, t))
    for v in (0, 3, 5):
        at_ms = base_ms + v * 60_000 + 30_000
        dt = DeltaTable(str(path))
        dt.load_as_version(datetime.datetime.fromtimestamp(at_ms / 1000, datetime.timezone.utc))
        assert dt.version() == v
        assert ours(path, tmp_path, timestamp_ms=at_ms) == states[v], f"at version {v}"
    assert "99" in tool_error("read", path, "--version", 99)
    assert "first commit" in tool_error("read", path, "--timestamp", base_ms - 1)
    info = tool_json("describe", path)
    assert info["version"] == 6 and [c["name"] for c in info["columns"]][-1] == "lang"


def test_delta_rs_partitioned_table_in_trainyard(tmp_path):
    path = tmp_path / "rs-part"
    rows = make_rows(0, 80)
    write_deltalake(str(path), as_arrow(rows), mode="append", partition_by=["category", "flag"])
    more = make_rows(80, 40)
    write_deltalake(str(path), as_arrow(more), mode="append", partition_by=["category", "flag"])
    assert ours(path, tmp_path, version=0) == expected(rows)
    assert ours(path, tmp_path) == expected(rows + more)
    out = tool_json("read", path, "--where", "category = 'shipping' AND flag = TRUE", "--count")
    assert out["rows"] == sum(1 for r in rows + more if r["category"] == "shipping" and r["flag"])


SPARK_SCHEMA = "id long, ts timestamp, category string, text string, score double, flag boolean"
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def spark_df(spark, rows: list[dict], lang: bool = False):
    keys = ("id", "ts", "category", "text", "score", "flag") + (("lang",) if lang else ())
    data = [tuple(EPOCH + datetime.timedelta(microseconds=r[k]) if k == "ts" else r[k]
                  for k in keys) for r in rows]
    return spark.createDataFrame(data, SPARK_SCHEMA + (", lang string" if lang else ""))


def test_spark_table_in_trainyard(spark, tmp_path):
    path = str(tmp_path / "spark")
    states = {}
    rows = make_rows(0, 40)
    spark_df(spark, rows).write.format("delta").save(path)
    states[0] = expected(rows)
    for v in range(1, 12):  # Spark writes a checkpoint at version 10
        new = make_rows(100 * v, 5)
        spark_df(spark, new).write.format("delta").mode("append").save(path)
        rows += new
        states[v] = expected(rows)
    assert (Path(path) / "_delta_log" / f"{10:020d}.checkpoint.parquet").is_file()
    rows = make_rows(5000, 20)
    spark_df(spark, rows).write.format("delta").mode("overwrite").save(path)
    states[12] = expected(rows)
    new = make_rows(6000, 10, with_lang=True)
    (spark_df(spark, new, lang=True).write.format("delta").mode("append")
     .option("mergeSchema", "true").save(path))
    rows += new
    states[13] = expected(rows, lang=True)

    for v in (0, 1, 9, 10, 11, 12):
        assert ours(Path(path), tmp_path, version=v) == states[v], f"version {v}"
    assert ours(Path(path), tmp_path) == states[13]
    assert ours(Path(path), tmp_path, version=12) == states[12]
    times = commit_times_ms(Path(path))
    for v in (4, 12):
        at = latest_at(times, times[v])
        assert ours(Path(path), tmp_path, timestamp_ms=times[v]) == states[at], f"at {v}"
    # Our history lists Spark's operations.
    history = tool_json("history", path, "--limit", 3)["history"]
    assert [h["version"] for h in history] == [13, 12, 11]
    assert history[1]["operation"] == "WRITE" and "Apache-Spark" in history[1]["engine_info"]


def test_spark_partitioned_table_in_trainyard(spark, tmp_path):
    path = str(tmp_path / "spark-part")
    rows = make_rows(0, 60)
    spark_df(spark, rows).write.format("delta").partitionBy("category").save(path)
    more = make_rows(60, 30)
    spark_df(spark, more).write.format("delta").mode("append").partitionBy("category").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE category = 'refund'")
    both = rows + more
    assert ours(Path(path), tmp_path, version=0) == expected(rows)
    assert ours(Path(path), tmp_path, version=1) == expected(both)
    assert ours(Path(path), tmp_path) == expected([r for r in both if r["category"] != "refund"])


# ---- concurrent appenders


_RS_APPENDER = r"""
import sys, pyarrow as pa
from deltalake import write_deltalake
path, start, commits, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                    pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("category", pa.string()),
                    pa.field("text", pa.string()), pa.field("score", pa.float64()),
                    pa.field("flag", pa.bool_())])
for c in range(commits):
    ids = list(range(start + c * n, start + (c + 1) * n))
    table = pa.table({"id": ids, "ts": [0] * n, "category": ["rs"] * n, "text": ["x"] * n,
                      "score": [1.0] * n, "flag": [True] * n}, schema=schema)
    write_deltalake(path, table, mode="append")
"""


def test_concurrent_appenders_lose_no_commit(tmp_path):
    path = tmp_path / "race"
    tool_json("create", path, "--schema", SCHEMA_SPEC)
    commits, n = 12, 7
    ours_rows = make_rows(100_000, n)
    file = write_jsonl(tmp_path / "race.jsonl", ours_rows)
    ours_proc = subprocess.Popen([str(DELTA_TOOL), "append", str(path), str(file), "--repeat",
                                  str(commits)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    rs_proc = subprocess.Popen([sys.executable, "-c", _RS_APPENDER, str(path), "0", str(commits),
                                str(n)], stderr=subprocess.PIPE, text=True)
    out, err = ours_proc.communicate(timeout=TOOL_TIMEOUT_S)
    _, rs_err = rs_proc.communicate(timeout=TOOL_TIMEOUT_S)
    assert ours_proc.returncode == 0, err
    assert rs_proc.returncode == 0, rs_err
    our_versions = [c["version"] for c in json.loads(out.splitlines()[-1])["commits"]]
    assert len(set(our_versions)) == commits
    dt = DeltaTable(str(path))
    assert dt.version() == 2 * commits  # version 0 is the create
    rs_versions = set(range(1, 2 * commits + 1)) - set(our_versions)
    assert len(rs_versions) == commits
    table = dt.to_pyarrow_table()
    assert table.num_rows == 2 * commits * n
    rs_ids = sorted(i for i in table.column("id").to_pylist() if i < 100_000)
    assert rs_ids == list(range(commits * n))
    assert len(ours(path, tmp_path)) == 2 * commits * n


# ---- faults


def test_writer_killed_before_commit_leaves_previous_version(our_partitioned, tmp_path):
    src, _ = our_partitioned
    path = tmp_path / "killed"
    shutil.copytree(src, path)
    before = ours(path, tmp_path)
    version = tool_json("describe", path)["version"]
    files_before = {p for p in path.rglob("*.parquet")}
    file = write_jsonl(tmp_path / "doomed.jsonl", make_rows(9000, 25))
    proc = tool("append", path, file, "--crash-before-commit", check=False)
    assert proc.returncode == -9, proc.stderr
    orphans = {p for p in path.rglob("*.parquet")} - files_before
    assert orphans, "the killed writer left no data file"
    assert tool_json("describe", path)["version"] == version
    assert ours(path, tmp_path) == before
    assert delta_rs(path) == before
    # The orphans are not in the table, so vacuum removes them (and nothing else it reads).
    dry = tool_json("vacuum", path, "--retention-hours", 0, "--force", "--dry-run")
    assert {str(o.relative_to(path)) for o in orphans} <= set(dry["deleted"])
    assert all(o.exists() for o in orphans)
    done = tool_json("vacuum", path, "--retention-hours", 0, "--force")
    assert set(done["deleted"]) == set(dry["deleted"])
    assert not any(o.exists() for o in orphans)
    assert ours(path, tmp_path) == before
    assert delta_rs(path) == before
    # A vacuum shorter than the table's retention needs --force.
    assert "retention" in tool_error("vacuum", path, "--retention-hours", 0).lower()


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_log_entry_names_the_version(our_table, tmp_path, damage):
    src, _ = our_table
    path = tmp_path / damage
    shutil.copytree(src, path)
    entry = path / "_delta_log" / f"{12:020d}.json"
    text = entry.read_bytes()
    cut = len(text) // 2
    while text[cut - 1:cut] in (b"\n", b"}"):  # cut inside an action, never after one
        cut -= 1
    entry.write_bytes(text[:cut] if damage == "truncated" else b"\x00{not json\n")
    message = tool_error("read", path, "--count")
    assert "version 12" in message or f"{12:020d}.json" in message, message
    # Versions before the damage still read.
    assert tool_json("read", path, "--version", 11, "--count")["version"] == 11


def test_deletion_vectors_are_refused_naming_the_feature(spark, tmp_path):
    path = str(tmp_path / "dv")
    spark_df(spark, make_rows(0, 30)).coalesce(1).write.format("delta").save(path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
              "('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 0")
    log = "".join(p.read_text() for p in sorted((Path(path) / "_delta_log").glob("*.json")))
    assert '"deletionVector"' in log, "Spark did not write a deletion vector"
    assert "deletionVectors" in tool_error("read", path, "--count")
    assert "deletionVectors" in tool_error("describe", path)


# ---- on S3 (moto's S3 server)


def test_tables_on_s3_both_ways(moto_s3, tmp_path):  # noqa: F811 (the fixture)
    env = {**os.environ, **s3_env(moto_s3)}
    options = {"AWS_ENDPOINT_URL": moto_s3["endpoint"], "AWS_REGION": moto_s3["region"],
               "AWS_ACCESS_KEY_ID": moto_s3["access_key_id"],
               "AWS_SECRET_ACCESS_KEY": moto_s3["secret_access_key"], "AWS_ALLOW_HTTP": "true",
               # delta-rs needs a lock service for concurrent S3 writers; this test has one.
               "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    uri = f"s3://{moto_s3['bucket']}/delta/ours"
    tool_json("create", uri, "--schema", SCHEMA_SPEC, "--partition", "category", env=env)
    first, second = make_rows(0, 40), make_rows(40, 30)
    for rows in (first, second):
        file = write_jsonl(tmp_path / f"s3-{rows[0]['id']}.jsonl", rows)
        tool_json("append", uri, file, env=env)
    assert canonical(DeltaTable(uri, version=1, storage_options=options)
                     .to_pyarrow_table()) == expected(first)
    assert canonical(DeltaTable(uri, storage_options=options)
                     .to_pyarrow_table()) == expected(first + second)

    rs_uri = f"s3://{moto_s3['bucket']}/delta/rs"
    write_deltalake(rs_uri, as_arrow(first), mode="append", storage_options=options)
    write_deltalake(rs_uri, as_arrow(second), mode="append", storage_options=options)
    assert ours(rs_uri, tmp_path, version=0, env=env) == expected(first)
    assert ours(rs_uri, tmp_path, env=env) == expected(first + second)
