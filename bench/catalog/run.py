"""bench/run catalog [--quick]

Authorization decisions on a deep catalog (10,000 tables, 1,000 groups nested 5 deep), in
process: build/catalog_authz_bench prints p50/p99 per decision of CatalogService::Authorize
(name lookup, the caller's cached groups, the decision, the audit enqueue). The anchor is the
issue's target (< 10 us p99): Unity Catalog OSS's Java server is not on the package
registries, so it cannot run here side by side.

Ends with one JSON line per figure (see CONVENTIONS.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "build" / "catalog_authz_bench"


def main() -> int:
    if not BENCH.exists():
        subprocess.run(["ninja", "-C", str(ROOT / "build"), "catalog_authz_bench"], check=True)
    args = [str(BENCH)] + (["--quick"] if "--quick" in sys.argv[1:] else [])
    rc = subprocess.run(args).returncode
    # Then the UC API's p99 of GET /tables/{full_name} with 10,000 tables (uc_api.py).
    uc_api = [sys.executable, str(Path(__file__).with_name("uc_api.py")), *sys.argv[1:]]
    return rc or subprocess.run(uc_api).returncode


if __name__ == "__main__":
    sys.exit(main())
