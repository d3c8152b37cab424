"""The importers and exporters of tables/ against the reference readers: what we import from JSON
lines and CSV must equal what pyarrow and Python's csv module (RFC 4180) read from the same file,
and what we export (Parquet, Arrow IPC stream, CSV, JSON lines) must read back in pyarrow and
Python's csv/json with the same values.

Our side is build/table_io_tool (tests/tools/table_io.cc): IN -> OUT by file extension.
Env: TABLE_IO_BIN (default <repo>/build/table_io_tool).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parent.parent
TOOL = Path(os.environ.get("TABLE_IO_BIN", REPO / "build" / "table_io_tool"))
UTC = dt.timezone.utc


def convert(src: Path, dst: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    if not TOOL.exists():
        pytest.fail(f"{TOOL} is missing: build it with ninja -C build table_io_tool")
    r = subprocess.run([str(TOOL), str(src), str(dst), *args], capture_output=True, text=True,
                       timeout=120)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def test_jsonl_with_chat_messages_and_timestamps(tmp_path):
    rows = [
        {"id": 1, "priority": 2, "score": 0.5, "urgent": True, "opened": "2024-05-01T12:00:00Z",
         "lang": None, "text": "naïve café ☕, \"quoted\"\nnext line",
         "messages": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "hello"}]},
        {"id": 2, "priority": 1, "score": 3, "urgent": False,
         "opened": "2024-05-01T14:30:00.125+02:00", "text": "",
         "messages": []},
        {"id": 3, "score": -1.25e10, "opened": None, "text": "tab\there",
         "messages": [{"role": "system", "content": "be brief"}]},
    ]
    src = tmp_path / "tickets.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    out = tmp_path / "tickets.parquet"
    convert(src, out)
    table = pq.read_table(out)
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("score").type == pa.float64()  # int and double mixed
    assert table.schema.field("urgent").type == pa.bool_()
    assert table.schema.field("opened").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("lang").type == pa.string()  # null-only
    assert table.schema.field("messages").type == pa.list_(
        pa.struct([("role", pa.string()), ("content", pa.string())]))
    got = table.to_pylist()
    assert [r["id"] for r in got] == [1, 2, 3]
    assert [r["priority"] for r in got] == [2, 1, None]
    assert [r["score"] for r in got] == [0.5, 3.0, -1.25e10]
    assert [r["opened"] for r in got] == [
        dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
        dt.datetime(2024, 5, 1, 12, 30, 0, 125000, tzinfo=UTC), None]
    assert [r["text"] for r in got] == [r["text"] for r in rows]
    assert [r["messages"] for r in got] == [r["messages"] for r in rows]

    # Our JSON lines export reads back in Python's json as the same records.
    back = tmp_path / "back.jsonl"
    convert(out, back)
    lines = [json.loads(line) for line in back.read_text("utf-8").splitlines()]
    assert [r["messages"] for r in lines] == [r["messages"] for r in rows]
    assert [r["opened"] for r in lines] == ["2024-05-01T12:00:00Z",
                                           "2024-05-01T12:30:00.125000Z", None]
    assert lines[0]["text"] == rows[0]["text"]


def test_csv_matches_pythons_csv_module(tmp_path):
    records = [
        ["id", "name", "comment", "amount"],
        ["1", "Ann", 'said "hello, world"', "1.5"],
        ["2", "Bob", "two\r\nlines, with a comma", "-2"],
        ["3", "  spaced  ", "", "1e3"],
        ["4", "Zoë", "tail", "7"],
    ]
    src = tmp_path / "people.csv"
    with open(src, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, quoting=csv.QUOTE_MINIMAL).writerows(records)
    out = tmp_path / "people.parquet"
    convert(src, out)
    table = pq.read_table(out)
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("amount").type == pa.float64()
    with open(src, newline="", encoding="utf-8") as f:
        reference = list(csv.reader(f))[1:]
    got = table.to_pylist()
    assert [r["name"] for r in got] == [r[1] for r in reference]
    # An empty unquoted field is null; Python's writer leaves "" unquoted, so it is null here.
    assert [r["comment"] for r in got] == [r[2] or None for r in reference]
    assert [r["amount"] for r in got] == [float(r[3]) for r in reference]

    # Our CSV export: Python's csv module reads the same fields back.
    back = tmp_path / "back.csv"
    convert(out, back)
    with open(back, newline="", encoding="utf-8") as f:
        exported = list(csv.reader(f))
    assert exported[0] == records[0]
    assert [r[1:3] for r in exported[1:]] == [[r[1], r[2]] for r in reference]


def test_parquet_and_arrow_stream_from_pyarrow_round_trip(tmp_path):
    source = pa.table({
        "id": pa.array([1, 2, None], pa.int64()),
        "text": ["a", None, "ç"],
        "at": pa.array([dt.datetime(2020, 1, 1, tzinfo=UTC), None,
                        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)],
                       pa.timestamp("us", tz="UTC")),
        "blob": pa.array([b"\x00\xff", b"", None], pa.binary()),
        "tags": pa.array([["x", "y"], [], None], pa.list_(pa.string())),
    })
    src = tmp_path / "src.parquet"
    pq.write_table(source, src)
    stream = tmp_path / "out.arrows"
    convert(src, stream)
    with ipc.open_stream(pa.OSFile(str(stream))) as reader:
        assert reader.read_all().equals(source)
    jsonl = tmp_path / "out.jsonl"
    convert(src, jsonl)
    first = json.loads(jsonl.read_text().splitlines()[0])
    assert first == {"id": 1, "text": "a", "at": "2020-01-01T00:00:00Z", "blob": "AP8=",
                     "tags": ["x", "y"]}
    # JSON lines back into a table with the source's schema: the same table.
    again = tmp_path / "again.parquet"
    convert(jsonl, again, "--schema-like", str(src))
    assert pq.read_table(again).equals(source)


def test_schema_check_names_the_first_offending_line(tmp_path):
    schema_file = tmp_path / "schema.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.int64()), "priority": pa.array([], pa.int64()),
                             "text": pa.array([], pa.string())}), schema_file)
    src = tmp_path / "data.jsonl"
    with open(src, "w") as f:
        for i in range(1, 2001):
            priority = '"high"' if i == 1834 else str(i % 3)
            f.write(f'{{"id": {i}, "priority": {priority}, "text": "t{i}"}}\n')
    out = tmp_path / "out.parquet"
    r = convert(src, out, "--schema-like", str(schema_file), "--batch-rows", "256", ok=False)
    assert r.returncode == 1
    assert "data.jsonl line 1834: field 'priority': expected int64, got string \"high\"" in r.stderr
    assert not out.exists()  # nothing half-written
    assert not list(tmp_path.glob("out.parquet*"))
