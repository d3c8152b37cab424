"""The dependency rule's checker (scripts/check-includes): its own checks, the real tree passes
it, and an include against the rule (tracking/ including api/) in a copy of the tree fails it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "scripts" / "check-includes"
# The build writes the rules from CMakeLists.txt's TY_COMPONENT_TABLE next to the binary.
BUILD = Path(os.environ.get("TRAINYARD_BIN", ROOT / "build" / "trainyard")).parent
RULES = BUILD / "include_rules.txt"


def run_checker(*args):
    return subprocess.run([sys.executable, str(CHECKER), *args], capture_output=True, text=True,
                          timeout=120)


def test_self_test_passes():
    r = run_checker("--self-test")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "self-test passed" in r.stdout


def test_the_tree_follows_the_rule():
    assert RULES.is_file(), f"{RULES} is missing: build first (scripts/build)"
    r = run_checker("--rules", str(RULES), str(ROOT / "src" / "trainyard"))
    assert r.returncode == 0, r.stderr


def test_a_domain_service_including_api_fails(tmp_path):
    src = tmp_path / "trainyard"
    shutil.copytree(ROOT / "src" / "trainyard", src,
                    ignore=shutil.ignore_patterns("nn"))
    header = src / "tracking" / "types.h"
    header.write_text(header.read_text() + '\n#include "trainyard/api/api.h"\n')
    r = run_checker("--rules", str(RULES), str(src))
    assert r.returncode == 1
    assert "src/trainyard/tracking/types.h:" in r.stderr
    assert "tracking/ may not include api/" in r.stderr
