"""bench/run checkpoints [--quick] [options of build/checkpoint_bench]: runs the C++ benchmark
(the checkpoint store against raw O_DIRECT disk bandwidth and torch.save/torch.load, side by
side) and passes its output through. See README.md in this directory."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "build" / "checkpoint_bench"

if not BENCH.exists():
    subprocess.run([str(ROOT / "scripts" / "build")], check=True)
sys.exit(subprocess.run([str(BENCH), *sys.argv[1:]]).returncode)
