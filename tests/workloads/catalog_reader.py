"""A workload that reads catalog tables through the Trainyard API with the job's own token.

Standard library only (urllib), so it runs under any OS account and Python. For each table
named on the command line it GETs /api/trainyard/v1/tables/<name>/rows with TRAINYARD_TOKEN and
prints one JSON line: {"table", "status", "rows"} (rows: the JSON-lines rows on 200, else the
error body). It also prints whom the token acts as (/whoami) and logs a metric to its MLflow run
(MLFLOW_RUN_ID), so the job's own writes are checked too. Exits 0 unless a call could not be
made at all.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

URL = os.environ["TRAINYARD_URL"].rstrip("/")
TOKEN = os.environ["TRAINYARD_TOKEN"]


def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {TOKEN}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


status, body = call("GET", "/api/trainyard/v1/whoami")
print(json.dumps({"whoami": json.loads(body) if status == 200 else body, "status": status}),
      flush=True)

for table in sys.argv[1:]:
    status, body = call("GET", f"/api/trainyard/v1/tables/{urllib.parse.quote(table)}/rows")
    rows = [json.loads(line) for line in body.splitlines() if line] if status == 200 else body
    print(json.dumps({"table": table, "status": status, "rows": rows}), flush=True)

status, body = call("POST", "/api/2.0/mlflow/runs/log-metric",
                    {"run_id": os.environ["MLFLOW_RUN_ID"], "key": "tables_read",
                     "value": len(sys.argv) - 1, "timestamp": int(time.time() * 1000), "step": 0})
print(json.dumps({"log_metric": status, "body": body[:500]}), flush=True)
