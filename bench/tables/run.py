#!/usr/bin/env python3
"""bench/tables: Trainyard's Delta tables against delta-rs and Spark local, in the same run.

The same generated support-ticket rows (ids, timestamps, short categorical strings, 200-2000
character texts; about 3 GB of Arrow data, ~200 MB with --quick) are appended to a new Delta
table by each side and then scanned in full; then a table with 10,000 commits (checkpoints every
10) is opened. Our side is `build/delta_tool` (tests/tools/delta_tool.cc, a thin command line
over tables::DeltaTable), timed inside the process (its `elapsed_ms`/`open_ms`), as delta-rs and
Spark are timed inside this Python process: process start-up is not counted for anyone.
README.md says what is measured and how; the run ends with one JSON line per figure.

Usage: bench/run tables [--quick] [--keep] [--verbose] [--rounds N] [--no-spark]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "build" / "delta_tool"
sys.path.insert(0, str(ROOT / "tests"))

FULL = {"bytes": 3_000_000_000, "rounds": 2, "commits": 10_000, "open_rounds": 5}
QUICK = {"bytes": 200_000_000, "rounds": 1, "commits": 10_000, "open_rounds": 3}
BATCH_ROWS = 65_536
CATEGORIES = ["billing", "login", "shipping", "refund", "account", "bug", "feature", "other"]
PRIORITIES = ["low", "normal", "high", "urgent"]
WORDS = ("the printer says load letter again my order never arrived refund please password "
         "reset link expired invoice shows twice app crashes when I open settings thanks for "
         "the quick help can you escalate this ticket to billing the tracking number is wrong "
         "login fails with error code 403 after update").split()

VERBOSE = sys.stderr.isatty()


def say(msg: str) -> None:
    if VERBOSE:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Data


def ticket_batches(total_bytes: int, seed: int = 7):
    """Deterministic support-ticket batches until about `total_bytes` of Arrow data."""
    rng = np.random.default_rng(seed)
    pool = " ".join(rng.choice(WORDS, size=400_000)).encode()
    produced, next_id = 0, 0
    while produced < total_bytes:
        n = BATCH_ROWS
        lengths = rng.integers(200, 2001, size=n)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        starts = rng.integers(0, len(pool) - 2000, size=1)[0]
        reps = int(offsets[-1]) // len(pool) + 2
        data = (pool * reps)[starts:starts + int(offsets[-1])]
        text = pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data))
        ids = np.arange(next_id, next_id + n, dtype=np.int64)
        batch = pa.record_batch({
            "id": ids,
            "ts": pa.array(1_714_550_400_000_000 + ids * 997_003, pa.timestamp("us", tz="UTC")),
            "category": pa.array(np.array(CATEGORIES)[rng.integers(0, 8, size=n)]),
            "priority": pa.array(np.array(PRIORITIES)[rng.integers(0, 4, size=n)]),
            "customer": pa.array([f"c{int(x):06d}" for x in rng.integers(0, 200_000, size=n)]),
            "text": text,
        })
        produced += batch.nbytes
        next_id += n
        yield batch


def write_inputs(workdir: Path, total_bytes: int) -> dict:
    """The rows as an Arrow IPC stream (ours and delta-rs) and as Parquet (Spark's input)."""
    arrows, parquet = workdir / "tickets.arrows", workdir / "tickets-src.parquet"
    rows = nbytes = 0
    writer = pq_writer = None
    for batch in ticket_batches(total_bytes):
        if writer is None:
            writer = pa.ipc.new_stream(str(arrows), batch.schema)
            pq_writer = pq.ParquetWriter(str(parquet), batch.schema)
        writer.write_batch(batch)
        pq_writer.write_batch(batch)
        rows += batch.num_rows
        nbytes += batch.nbytes
    writer.close()
    pq_writer.close()
    return {"arrows": arrows, "parquet": parquet, "rows": rows, "bytes": nbytes}


def write_warmup(workdir: Path, inputs: dict) -> dict:
    """The first 10,000 rows, for an untimed warm-up of each side (Spark's JIT above all)."""
    with pa.ipc.open_stream(str(inputs["arrows"])) as reader:
        batch = reader.read_next_batch().slice(0, 10_000)
    arrows, parquet = workdir / "warm.arrows", workdir / "warm.parquet"
    with pa.ipc.new_stream(str(arrows), batch.schema) as writer:
        writer.write_batch(batch)
    pq.write_table(pa.Table.from_batches([batch]), str(parquet))
    return {"arrows": arrows, "parquet": parquet, "rows": batch.num_rows, "bytes": batch.nbytes}


# --------------------------------------------------------------------------------------------
# The three sides


def run_tool(*args) -> dict:
    proc = subprocess.run([str(TOOL), *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"delta_tool {' '.join(map(str, args))}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def schema_spec(schema: pa.Schema) -> str:
    names = {pa.int64(): "int64", pa.string(): "string",
             pa.timestamp("us", tz="UTC"): "timestamp"}
    return ",".join(f"{f.name}:{names[f.type]}" for f in schema)


def ours_append(inputs: dict, path: Path, schema: pa.Schema) -> float:
    run_tool("create", path, "--schema", schema_spec(schema))
    out = run_tool("append", path, inputs["arrows"])
    assert out["commits"][0]["rows_written"] == inputs["rows"], out
    return out["elapsed_ms"] / 1e3


def ours_scan(path: Path, rows: int) -> float:
    out = run_tool("read", path, "--count")
    assert out["rows"] == rows, out
    return out["elapsed_ms"] / 1e3


def rs_append(inputs: dict, path: Path) -> float:
    from deltalake import write_deltalake

    began = time.perf_counter()
    with pa.ipc.open_stream(str(inputs["arrows"])) as reader:
        write_deltalake(str(path), reader, mode="append")
    return time.perf_counter() - began


def rs_scan(path: Path, rows: int) -> float:
    from deltalake import DeltaTable

    began = time.perf_counter()
    dataset = DeltaTable(str(path)).to_pyarrow_dataset()
    seen = sum(b.num_rows for b in dataset.to_batches(batch_size=BATCH_ROWS))
    elapsed = time.perf_counter() - began
    assert seen == rows, (seen, rows)
    return elapsed


def spark_append(spark, inputs: dict, path: Path) -> float:
    began = time.perf_counter()
    spark.read.parquet(str(inputs["parquet"])).write.format("delta").save(str(path))
    return time.perf_counter() - began


def spark_scan(spark, path: Path, rows: int) -> float:
    began = time.perf_counter()
    # An aggregate over every column, so that Spark decodes all of them as the others do.
    (count, *_) = spark.read.format("delta").load(str(path)).selectExpr(
        "count(*)", "sum(id)", "max(ts)", "count(category)", "count(priority)",
        "max(customer)", "sum(length(text))").collect()[0]
    elapsed = time.perf_counter() - began
    assert count == rows, (count, rows)
    return elapsed


def one_side(side: str, inputs: dict, path: Path, schema: pa.Schema, spark, append: dict,
             scan: dict) -> None:
    """One append into a new table at `path` and one full scan of it; the table is removed."""
    if side == "ours":
        a = ours_append(inputs, path, schema)
        s = ours_scan(path, inputs["rows"])
    elif side == "delta-rs":
        a = rs_append(inputs, path)
        s = rs_scan(path, inputs["rows"])
    else:
        a = spark_append(spark, inputs, path)
        s = spark_scan(spark, path, inputs["rows"])
    append.setdefault(side, []).append(a)
    scan.setdefault(side, []).append(s)
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Opening a long log


def many_commits(workdir: Path, commits: int) -> Path:
    """A table with `commits` append commits of one small file each, and a checkpoint 10
    commits before the end (so opening reads a checkpoint and then 10 JSON commits, the state a
    table checkpointed every 10 commits is in most of the time).

    Version 0 and the checkpoint are written by delta_tool; the append commits are written here,
    as the JSON a writer commits (commitInfo + add with stats), because 10,000 real commits take
    about 55 ms each on this machine (fsyncs), far more than a benchmark run. rs_open() checks
    that delta-rs sees the same table.
    """
    path = workdir / "commits"
    run_tool("create", path, "--schema", "id:int64,note:string")
    sample = workdir / "one.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "note": ["x"]}), str(sample))
    data = sample.read_bytes()
    stats = json.dumps({"numRecords": 1, "minValues": {"id": 1, "note": "x"},
                        "maxValues": {"id": 1, "note": "x"}, "nullCount": {"id": 0, "note": 0}})
    began = time.perf_counter()
    now_ms = int(time.time() * 1000)
    for v in range(1, commits + 1):
        name = f"part-{v:05d}-bench.c000.snappy.parquet"
        (path / name).write_bytes(data)
        actions = [{"commitInfo": {"timestamp": now_ms + v, "operation": "WRITE",
                                   "operationParameters": {"mode": "Append"},
                                   "engineInfo": "bench/tables"}},
                   {"add": {"path": name, "partitionValues": {}, "size": len(data),
                            "modificationTime": now_ms + v, "dataChange": True, "stats": stats}}]
        log = path / "_delta_log" / f"{v:020d}.json"
        log.write_text("".join(json.dumps(a) + "\n" for a in actions))
        if v == commits - 10:
            run_tool("checkpoint", path)
    say(f"{commits} commits written in {time.perf_counter() - began:.1f} s")
    return path


def rs_open(path: Path) -> tuple[float, int]:
    from deltalake import DeltaTable

    began = time.perf_counter()
    dt = DeltaTable(str(path))
    files = len(dt.file_uris())
    return time.perf_counter() - began, files


# --------------------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def throughput_figures(kind: str, inputs: dict, times: dict[str, list[float]],
                       versions: dict[str, str], note: str) -> list[dict]:
    rows, mb = inputs["rows"], inputs["bytes"] / 1e6
    o = median(times["ours"])
    figures = []
    for anchor, target in (("delta-rs", ">= 1.0x"), ("spark", ">= 3x")):
        if not times.get(anchor):
            continue
        a = median(times[anchor])
        figures.append({
            "bench": f"tables_{kind}" + ("" if anchor == "delta-rs" else "_vs_spark"),
            "value": round(rows / o), "unit": "rows/s", "mb_per_s": round(mb / o, 1),
            "anchor": versions[anchor], "anchor_value": round(rows / a),
            "anchor_mb_per_s": round(mb / a, 1), "ratio": ratio(a, o), "target": target,
            "note": f"{rows:,} rows, {mb:,.0f} MB of Arrow data; median of {len(times['ours'])} "
                    f"alternating rounds ({', '.join(f'{k} {v}' for k, v in times.items())} s); "
                    + note})
    return figures


def main() -> int:
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~200 MB; about a minute")
    parser.add_argument("--keep", action="store_true", help="keep the tables")
    parser.add_argument("--verbose", action="store_true", help="progress to stderr in pipes too")
    parser.add_argument("--rounds", type=int, help="rounds of append + scan per side")
    parser.add_argument("--commits", type=int, help="commits of the table that is opened")
    parser.add_argument("--no-spark", action="store_true", help="skip Spark (no JVM)")
    args = parser.parse_args()
    VERBOSE = VERBOSE or args.verbose
    cfg = dict(QUICK if args.quick else FULL)
    cfg["rounds"] = args.rounds or cfg["rounds"]
    cfg["commits"] = args.commits or cfg["commits"]
    if not TOOL.exists():
        print(f"bench/tables: {TOOL} is missing; run scripts/build", file=sys.stderr)
        return 2
    import deltalake
    import pyspark

    versions = {"delta-rs": f"deltalake {deltalake.__version__} (delta-rs)",
                "spark": f"Spark {pyspark.__version__} local[2] + delta-spark"}
    workdir = Path(tempfile.mkdtemp(prefix="trainyard-bench-tables-"))
    spark = None
    try:
        say(f"generating ~{cfg['bytes'] / 1e6:.0f} MB of tickets in {workdir}")
        inputs = write_inputs(workdir, cfg["bytes"])
        schema = pa.ipc.open_stream(str(inputs["arrows"])).schema
        if not args.no_spark:
            from spark_session import start_spark

            began = time.perf_counter()
            spark = start_spark("bench-tables", memory="6g")
            say(f"Spark started in {time.perf_counter() - began:.1f} s")
        append = {"ours": [], "delta-rs": [], "spark": []}
        scan = {"ours": [], "delta-rs": [], "spark": []}
        warm = write_warmup(workdir, inputs)
        sides = ["ours", "delta-rs"] + ([] if spark is None else ["spark"])
        for side in sides:
            one_side(side, warm, workdir / f"warm-{side}", schema, spark, {}, {})
        for r in range(cfg["rounds"]):
            for side in (sides if r % 2 == 0 else sides[::-1]):
                one_side(side, inputs, workdir / f"{side}-{r}", schema, spark, append, scan)
                say(f"round {r} {side}: append {append[side][-1]:.2f} s, "
                    f"scan {scan[side][-1]:.2f} s")
        rounded = lambda d: {k: [round(x, 2) for x in v] for k, v in d.items() if v}  # noqa: E731
        figures = throughput_figures(
            "append", inputs, rounded(append), versions,
            "one append commit of the whole stream into a new table (snappy Parquet for all); "
            "ours and delta-rs read the Arrow IPC stream, Spark the same rows as Parquet")
        figures += throughput_figures(
            "scan", inputs, rounded(scan), versions,
            "each side scans the table it wrote, every column decoded (Spark: an aggregate over "
            "every column); files in the page cache")
        figures.append(open_figure(workdir, cfg, versions))
        for f in figures:
            print(json.dumps(f), flush=True)
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if args.keep:
            print(f"bench/tables: kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def open_figure(workdir: Path, cfg: dict, versions: dict) -> dict:
    path = many_commits(workdir, cfg["commits"])
    ours_ms, rs_ms = [], []
    rs_open(path)  # warm the page cache for both
    for r in range(cfg["open_rounds"]):
        for side in (("ours", "rs") if r % 2 == 0 else ("rs", "ours")):
            if side == "ours":
                out = run_tool("open", path)
                assert out["version"] == cfg["commits"] and out["num_files"] == cfg["commits"]
                ours_ms.append(out["open_ms"])
            else:
                elapsed, files = rs_open(path)
                assert files == cfg["commits"]
                rs_ms.append(elapsed * 1e3)
    o, a = median(ours_ms), median(rs_ms)
    return {"bench": "tables_open_10k_commits", "value": round(o, 1), "unit": "ms",
            "anchor": versions["delta-rs"], "anchor_value": round(a, 1), "ratio": ratio(a, o),
            "target": "< 100 ms",
            "note": f"open the latest snapshot of a table with {cfg['commits']:,} commits (one "
                    f"file each; our checkpoint 10 commits before the end) and list its "
                    f"{cfg['commits']:,} files; median of {len(ours_ms)} alternating; "
                    f"ours {[round(x, 1) for x in ours_ms]} ms, delta-rs "
                    f"{[round(x, 1) for x in rs_ms]} ms; ratio = anchor / ours"}


if __name__ == "__main__":
    sys.exit(main())
