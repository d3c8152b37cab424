"""The anchor side of bench/checkpoints: torch.save / torch.load of float32 tensors of the
same sizes as checkpoint_bench's, into one file on the same disk. Prints one JSON object with
median times. Run by checkpoint_bench; usable alone:
  python3 torch_side.py --dir /tmp/x --size-mb 256 --tensor-mb 64 --rounds 2
"""
import argparse
import json
import os
import shutil
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--size-mb", type=int, required=True)
    ap.add_argument("--tensor-mb", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    total = a.size_mb << 20
    per = min(a.tensor_mb << 20, total)
    state = {}
    done = 0
    i = 0
    while done < total:
        n = min(per, total - done)
        state["layers.%d.weight" % i] = torch.rand(n // 4, dtype=torch.float32) * 2 - 1
        done += n
        i += 1
    path = os.path.join(a.dir, "state.pt")
    saves, loads = [], []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # durable, as the checkpoint store's save is
        saves.append(time.perf_counter() - t0)
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        t0 = time.perf_counter()
        loaded = torch.load(path)
        loads.append(time.perf_counter() - t0)
        assert len(loaded) == len(state)
        del loaded
        os.remove(path)
    shutil.rmtree(a.dir, ignore_errors=True)
    print(json.dumps({"torch": torch.__version__, "save_s": statistics.median(saves),
                      "load_s": statistics.median(loads), "saves": saves, "loads": loads}))


if __name__ == "__main__":
    main()
