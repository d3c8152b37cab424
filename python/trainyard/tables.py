"""Catalog tables from Python (standard library + pyarrow): read a table (or a version of it)
as a pyarrow.Table through the tables API's Arrow IPC pages, and write a pyarrow.Table or a
pandas DataFrame to it (uploaded as Parquet to the import endpoint; the table is created on the
first write).

    import trainyard.tables as tables
    t = tables.read("main.support.tickets", columns=["id", "text"], filter="priority = 1")
    tables.write("main.support.tickets", t, mode="append")
    df = tables.to_pandas("main.support.tickets", version=3)

The server and token come from TRAINYARD_URL / TRAINYARD_TOKEN (or pass client=). Every page
of one read is of the same table version, even while others write. A table's row filter and
column masks apply: read() returns the rows and values the token's user may see (the server
enforces them; docs/catalog.md).
"""

from __future__ import annotations

import io
import json
from typing import Any, Sequence
from urllib.parse import quote

import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

from trainyard._client import API, Client, default_client

_PAGE_ROWS = 10000


def _path(name: str, what: str = "") -> str:
    return f"{API}/tables/{quote(name, safe='')}{what}"


def read(name: str, version: int | None = None, columns: Sequence[str] | None = None,
         filter: str | None = None, *, timestamp_ms: int | None = None,
         client: Client | None = None) -> pa.Table:
    """All rows of table `name` (at `version` or `timestamp_ms`; the latest by default)."""
    client = client or default_client()
    params: dict[str, Any] = {"format": "arrow", "max_rows": _PAGE_ROWS, "version": version,
                              "timestamp": timestamp_ms, "filter": filter or None,
                              "columns": ",".join(columns) if columns else None}
    batches: list[pa.RecordBatch] = []
    schema = None
    while True:
        _, headers, body = client.request("GET", _path(name, "/rows"), params=params)
        reader = pa.ipc.open_stream(body)
        schema = schema or reader.schema
        batches.extend(reader)
        token = headers.get("x-trainyard-next-page-token")
        if not token:
            break
        params = {"format": "arrow", "max_rows": _PAGE_ROWS, "page_token": token,
                  "filter": filter or None, "columns": params["columns"]}
    return pa.Table.from_batches(batches, schema=schema)


def to_pandas(name: str, version: int | None = None, columns: Sequence[str] | None = None,
              filter: str | None = None, **kwargs: Any):
    """read(...) as a pandas DataFrame (needs pandas)."""
    return read(name, version=version, columns=columns, filter=filter, **kwargs).to_pandas()


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_plain(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain(f.type)) for f in t])
    return t


def _without_large_types(schema: pa.Schema) -> pa.Schema:
    """pandas (>= 3) makes large_string columns; tables store string (Delta has one)."""
    return pa.schema([f.with_type(_plain(f.type)) for f in schema], metadata=schema.metadata)


def write(name: str, data: Any, mode: str = "append", *, run_id: str | None = None,
          client: Client | None = None) -> dict:
    """Appends (or with mode="overwrite" replaces) the rows of `data` (a pyarrow.Table, a
    RecordBatch or a pandas DataFrame). Returns {"version", "rows", "created"}."""
    if mode not in ("append", "overwrite"):
        raise ValueError(f"mode must be append or overwrite (got {mode!r})")
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif not isinstance(data, pa.Table):
        data = pa.Table.from_pandas(data, preserve_index=False)
    data = data.cast(_without_large_types(data.schema))
    buf = io.BytesIO()
    pq.write_table(data, buf)
    client = client or default_client()
    params = {"format": "parquet", "mode": mode, "run_id": run_id}
    _, _, body = client.request("POST", _path(name, "/import"), data=buf.getvalue(),
                                params=params)
    return json.loads(body)
