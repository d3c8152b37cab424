"""bench/run prep [--quick | --size-mb N] [--sides ours,datatrove,text-dedup,spark]: exact + MinHash
near-duplicate removal on one generated corpus, side by side in one run:

- ours: `build/trainyard prep SPEC.yaml` (dedup_exact + dedup_near, local Delta outputs, the
  dropped rows read back with the `deltalake` package);
- datatrove's MinHash pipeline and text-dedup's MinHash, installed by this script into
  .venv-bench-prep (pinned, from PyPI), run offline on the local files;
- Spark local[2] (the project's .venv pyspark): exact + Spark ML MinHashLSH, banded 14 x 8.

Every side gets the same corpus (gen_corpus.py: ticket-like texts with planted exact and near
duplicates, and junk) and the same parameters (5-word shingles, 14 bands x 8 rows). Per side: wall
time of its process, documents/s, MB/s, peak RSS of its process tree (polled /proc), and the set
of documents it removed, scored against the planted pairs (recall, precision; README.md defines
them). Prints a table to stderr and one JSON line per figure to stdout.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality import HIGH_J, score  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OURS = ROOT / "build" / "trainyard"
BENCH_VENV = ROOT / ".venv-bench-prep"
# What the anchors' venv gets (pip, PyPI). spaCy is datatrove's English word tokenizer (its
# default `language`); orjson its JSONL reader.
ANCHOR_PINS = ["datatrove[processing]==0.10.1", "orjson==3.13.0", "spacy==3.8.18",
               "text-dedup==0.4.0", "datasets==5.2.0", "numpy==2.4.6"]
ALL_SIDES = ["ours", "datatrove", "text-dedup", "spark"]

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--size-mb", type=float, default=1024.0, help="corpus size (default 1024)")
ap.add_argument("--quick", action="store_true", help="a 20 MB corpus")
ap.add_argument("--seed", type=int, default=25)
ap.add_argument("--corpus", type=Path, help="reuse (or create) the corpus in this directory")
ap.add_argument("--sides", default=",".join(ALL_SIDES), help="comma-separated: " + ",".join(ALL_SIDES))
ap.add_argument("--threads", type=int, default=2, help="workers/cores for every side (local[N] for Spark)")
ap.add_argument("--memory-limit", type=int, default=1 << 30,
                help="ours: --memory-limit BYTES (default 1 GiB); its peak RSS is checked against it")
ap.add_argument("--spark-memory", default="4g", help="Spark's driver memory")
ap.add_argument("--ours", type=Path, default=OURS, help="the trainyard binary to measure")
ap.add_argument("--no-install", action="store_true", help="do not pip-install the anchors' venv")
ap.add_argument("--keep", action="store_true", help="keep the work directory")
args = ap.parse_args()
size_mb = 20.0 if args.quick else args.size_mb
sides = [s.strip() for s in args.sides.split(",") if s.strip()]
for s in sides:
    if s not in ALL_SIDES:
        ap.error(f"--sides: unknown side {s!r}; known: {', '.join(ALL_SIDES)}")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Measuring a process tree


PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root_pid: int) -> int:
    """Sum of the resident set sizes of root_pid and all its descendants (bytes). Pages shared
    between processes (fork's copy-on-write) count once per process: an upper bound."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            pass
        todo.extend(children.get(pid, []))
    return total


def measure(cmd: list[str], log_path: Path, env: dict | None = None, cwd: Path | None = None) -> dict:
    """Runs cmd; wall seconds, peak RSS of its tree (polled every 50 ms), exit code, stdout."""
    with open(log_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, cwd=cwd)
        peak = 0
        stop = threading.Event()

        def poll():
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, tree_rss(proc.pid))
                stop.wait(0.05)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        out, _ = proc.communicate()
        wall = time.perf_counter() - t0
        stop.set()
        poller.join()
    return {"seconds": wall, "peak_rss": peak, "rc": proc.returncode,
            "stdout": out.decode(errors="replace")}


def tail(path: Path, n: int = 2500) -> str:
    return path.read_bytes()[-n:].decode(errors="replace") if path.exists() else ""


# ---------------------------------------------------------------------------------------------
# The sides


def ensure_anchor_venv() -> Path:
    py = BENCH_VENV / "bin" / "python"
    # installed, and at the pinned versions
    check = ("import importlib.metadata as m, sys; import datatrove, text_dedup, spacy, orjson, datasets; "
             "sys.exit(0 if all(m.version(p.split('[')[0].split('==')[0]) == p.split('==')[1] "
             f"for p in {ANCHOR_PINS!r}) else 1)")
    if py.exists() and subprocess.run([str(py), "-c", check], capture_output=True).returncode == 0:
        return py
    if args.no_install:
        raise RuntimeError(f"{BENCH_VENV} lacks datatrove/text-dedup and --no-install was given")
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    log(f"installing {' '.join(ANCHOR_PINS)} into {BENCH_VENV.name} (a few minutes, once)")
    subprocess.run([str(py), "-m", "pip", "install", "-q", *ANCHOR_PINS], check=True)
    return py


def ours_supports_prep() -> tuple[bool, str, bool]:
    """(prep available, why not, --memory-limit accepted)."""
    if not args.ours.exists():
        return False, f"{args.ours} does not exist (build it: scripts/build)", False
    res = subprocess.run([str(args.ours), "prep", "--help"], capture_output=True, text=True)
    text = res.stdout + res.stderr
    usage = next((line for line in text.splitlines() if line.startswith("Usage:")), "")
    if res.returncode != 0 or " prep" not in usage:
        return False, (f"{args.ours} has no `prep` subcommand: issue 18's engine is not in this "
                       f"build (build a branch that has it, or pass --ours PATH)"), False
    return True, "", "--memory-limit" in text


def doc_id(source: str, key: str) -> str:
    """prep/doc_id.h: the first 16 hex digits of SHA-256("trainyard-prep-v1" NUL source NUL key)."""
    return hashlib.sha256(b"trainyard-prep-v1\0" + source.encode() + b"\0" + key.encode()).hexdigest()[:16]


def run_ours(corpus: Path, work: Path, meta: dict) -> dict:
    ok, why, has_limit = ours_supports_prep()
    if not ok:
        raise RuntimeError(why)
    files = meta["files"]
    spec = work / "ours.yaml"
    rel = os.path.relpath(corpus, work)
    file_list = ", ".join(json.dumps(f"{rel}/{f}") for f in files)
    spec.write_text(f"""name: bench-prep
source:
  files: [{file_list}]
  id_column: id
text_column: text
steps:
  - dedup_exact: {{}}
  - dedup_near: {{shingle_words: 5, bands: 14, rows: 8, threshold: 0.0, keep: first}}
outputs:
  rows: {{path: ours-out/rows}}
  dropped: {{path: ours-out/dropped}}
""")
    cmd = [str(args.ours), "prep", str(spec), "--threads", str(args.threads),
           "--report", str(work / "ours-report.json")]
    if has_limit:
        cmd += ["--memory-limit", str(args.memory_limit)]
    res = measure(cmd, work / "ours.log", cwd=work)
    if res["rc"] != 0:
        raise RuntimeError(f"trainyard prep exited with {res['rc']}: {tail(work / 'ours.log')}")

    from deltalake import DeltaTable  # the project's .venv has it (scripts/install-deps)

    dropped = DeltaTable(str(work / "ours-out" / "dropped")).to_pyarrow_table(
        columns=["doc_id", "step"]).to_pylist()
    dedup_ids = {r["doc_id"] for r in dropped if "dedup" in (r["step"] or "")}
    other = len(dropped) - len(dedup_ids)
    # doc ids back to corpus ids: DocId(source, id), where source is the file as named
    ids = [f"TCK-{r:09d}" for r in range(meta["counts"]["rows"])]
    shard_of = {i: files[r % len(files)] for r, i in enumerate(ids)}
    for form in ("as_written", "basename", "absolute"):
        def source(f: str) -> str:
            return {"as_written": f"{rel}/{f}", "basename": f,
                    "absolute": str((corpus / f).resolve())}[form]
        mapping = {doc_id(source(shard_of[i]), i): i for i in ids}
        if all(d in mapping for d in dedup_ids):
            removed = [mapping[d] for d in dedup_ids]
            break
    else:
        raise RuntimeError("cannot map the dropped table's doc_id values back to the corpus ids "
                           "(tried the file as written, its base name and its absolute path as "
                           "DocId's source)")
    res["removed_ids"] = removed
    res["rows"] = meta["counts"]["rows"]
    rep = json.loads((work / "ours-report.json").read_text())
    if rep.get("rows_in") != res["rows"]:
        raise RuntimeError(f"trainyard prep read {rep.get('rows_in')} rows; the corpus has {res['rows']}")
    kept = DeltaTable(str(work / "ours-out" / "rows")).to_pyarrow_dataset().count_rows()
    if kept + len(dropped) != res["rows"]:
        raise RuntimeError(f"trainyard prep's outputs do not add up: {kept} kept + {len(dropped)} "
                           f"dropped != {res['rows']} rows")
    res["engine_seconds"] = rep.get("seconds")
    res["note"] = f"dropped by other steps: {other}" if other else ""
    res["memory_limit"] = args.memory_limit if has_limit else None
    return res


def run_python_side(script: str, py: Path, corpus: Path, work: Path, extra: list[str],
                    env: dict | None = None) -> dict:
    name = Path(script).stem
    side_work = work / name
    side_work.mkdir()
    res = measure([str(py), str(HERE / script), str(corpus), str(side_work), *extra],
                  work / f"{name}.log", env=env)
    if res["rc"] != 0:
        raise RuntimeError(f"{script} exited with {res['rc']}: {tail(work / f'{name}.log')}")
    summary = json.loads(res["stdout"].strip().splitlines()[-1])
    res["rows"] = summary["rows"]
    res["removed_ids"] = (side_work / "removed_ids.txt").read_text().split()
    return res


# ---------------------------------------------------------------------------------------------


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-prep-"))
    try:
        corpus = args.corpus or (work / "corpus")
        meta_path = corpus / "meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
        if not meta or meta["seed"] != args.seed or meta["size_mb"] != size_mb:
            log(f"generating a {size_mb:g} MB corpus (seed {args.seed}) in {corpus}")
            subprocess.run([sys.executable, str(HERE / "gen_corpus.py"), str(corpus),
                            "--size-mb", str(size_mb), "--seed", str(args.seed)], check=True)
            meta = json.loads(meta_path.read_text())
        c = meta["counts"]
        log(f"corpus: {c['rows']:,} rows, {meta['bytes'] / 1e6:.1f} MB in {meta['shards']} shards; "
            f"planted: {c['exact_pairs']} exact pairs, {c['near_pairs']} near pairs "
            f"({c['near_pairs_ge_0.8']} with Jaccard >= {HIGH_J}), {c['junk']} junk rows")
        truth = [json.loads(line) for line in open(corpus / "truth.jsonl")]

        anchor_py = None
        if any(s in sides for s in ("datatrove", "text-dedup")):
            try:
                anchor_py = ensure_anchor_venv()
            except Exception as e:
                log(f"the anchors' venv could not be set up: {e}")
        offline = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
        threads = ["--workers", str(args.threads)]
        runners = {
            "ours": lambda: run_ours(corpus, work, meta),
            "datatrove": lambda: run_python_side("datatrove_side.py", anchor_py, corpus, work,
                                                 threads, offline),
            "text-dedup": lambda: run_python_side("text_dedup_side.py", anchor_py, corpus, work,
                                                  threads, offline),
            "spark": lambda: run_python_side("spark_side.py", Path(sys.executable), corpus, work,
                                             ["--master", f"local[{args.threads}]",
                                              "--driver-memory", args.spark_memory]),
        }
        results: dict[str, dict] = {}
        errors: dict[str, str] = {}
        for side in sides:
            if side in ("datatrove", "text-dedup") and anchor_py is None:
                errors[side] = "the anchors' venv (.venv-bench-prep) could not be set up"
                continue
            log(f"running {side}")
            try:
                res = runners[side]()
            except Exception as e:  # a side that cannot run is reported, not fatal
                errors[side] = str(e)[-2000:]
                log(f"{side}: {errors[side]}")
                continue
            if res["rows"] != c["rows"]:
                errors[side] = f"saw {res['rows']} rows; the corpus has {c['rows']}"
                log(f"{side}: {errors[side]}")
                continue
            if not args.keep:  # its outputs are scored; the next side gets the disk back
                out_dir = {"ours": "ours-out", "datatrove": "datatrove_side",
                           "text-dedup": "text_dedup_side", "spark": "spark_side"}[side]
                shutil.rmtree(work / out_dir, ignore_errors=True)
            res.update(score(res["removed_ids"], truth))
            res["docs_per_s"] = res["rows"] / res["seconds"]
            res["mb_per_s"] = meta["bytes"] / 1e6 / res["seconds"]
            results[side] = res
            log(f"{side}: {res['seconds']:.1f} s, removed {res['removed']} documents")

        report(meta, results, errors)
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def fmt(x, pct=False):
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:,.1f}"


def report(meta: dict, results: dict, errors: dict) -> None:
    head = (f"{'side':<11} {'wall s':>8} {'docs/s':>9} {'MB/s':>7} {'peak RSS':>9} {'removed':>8} "
            f"{'recall exact':>12} {'recall J>=.8':>12} {'recall J<.8':>11} {'precision':>9}")
    lines = [head, "-" * len(head)]
    for side in sides:
        if side in results:
            r = results[side]
            lines.append(f"{side:<11} {r['seconds']:>8.1f} {r['docs_per_s']:>9,.0f} {r['mb_per_s']:>7.2f} "
                         f"{r['peak_rss'] / 2**20:>7.0f}MB {r['removed']:>8} "
                         f"{fmt(r['recall_exact'], True):>12} {fmt(r['recall_near_ge_0_8'], True):>12} "
                         f"{fmt(r['recall_near_lt_0_8'], True):>11} {fmt(r['precision'], True):>9}")
        else:
            lines.append(f"{side:<11} not measured: {errors.get(side, '?')[:300]}")
    print("\n".join(lines), file=sys.stderr, flush=True)

    ours = results.get("ours")
    for side in sides:
        fig = {"bench": f"prep_{side.replace('-', '_')}", "side": side,
               "corpus_mb": round(meta["bytes"] / 1e6, 1), "rows": meta["counts"]["rows"],
               "threads": args.threads}
        if side in results:
            r = results[side]
            fig.update({k: r[k] for k in ("seconds", "docs_per_s", "mb_per_s", "peak_rss", "removed",
                                          "true_removed", "false_removed", "precision", "recall_exact",
                                          "recall_near_ge_0_8", "recall_near_lt_0_8",
                                          "clusters_fully_removed", "pairs")})
            for k in ("seconds", "docs_per_s", "mb_per_s"):
                fig[k] = round(fig[k], 3)
            if r.get("note"):
                fig["note"] = r["note"]
            if side == "ours":
                fig["engine_seconds"] = r.get("engine_seconds")  # its own report's, without start-up
                lim = r.get("memory_limit")
                fig["memory_limit"] = lim
                fig["within_memory_limit"] = (r["peak_rss"] <= lim) if lim else None
            elif ours:
                ratio = ours["docs_per_s"] / r["docs_per_s"]
                fig["ours_throughput_ratio"] = round(ratio, 2)
                same = sum(1 for x, y in zip(ours["found"], r["found"]) if x == y)
                fig["pair_agreement_with_ours"] = round(same / len(r["found"]), 4) if r["found"] else 1.0
                if side in ("datatrove", "spark"):
                    fig["target"] = ">= 10x throughput, recall and precision >= the anchor's"
                    fig["throughput_target_met"] = ratio >= 10
                fig["recall_ge_anchor"] = _ge(ours["recall_near_ge_0_8"], r["recall_near_ge_0_8"])
                fig["recall_within_noise"] = _within_noise(ours["recall_near_ge_0_8"],
                                                           r["recall_near_ge_0_8"], r["pairs"]["near_hi"])
                fig["precision_ge_anchor"] = _ge(ours["precision"], r["precision"])
        else:
            fig["error"] = errors.get(side)
        print(json.dumps(fig), flush=True)
    if ours:
        for side in sides:
            if side != "ours" and side in results:
                r = results[side]
                log(f"ours vs {side}: {ours['docs_per_s'] / r['docs_per_s']:.1f}x documents/s"
                    f"{' (target >= 10x)' if side in ('datatrove', 'spark') else ''}; recall J>=0.8 "
                    f"{fmt(ours['recall_near_ge_0_8'], True)} vs {fmt(r['recall_near_ge_0_8'], True)}, "
                    f"precision {fmt(ours['precision'], True)} vs {fmt(r['precision'], True)}")
        lim = ours.get("memory_limit")
        if lim:
            log(f"ours: peak RSS {ours['peak_rss'] / 2**20:.0f} MB, limit {lim / 2**20:.0f} MB")


def _within_noise(a, b, n: int) -> bool | None:
    """a >= b, or below it by at most two standard errors of the difference of two recalls
    measured on the same n pairs (LSH is random: two sides with different hash functions miss
    different pairs near the threshold)."""
    if a is None or b is None or not n:
        return None
    se = ((a * (1 - a) + b * (1 - b)) / n) ** 0.5
    return a >= b - max(2 * se, 1e-3)


def _ge(a, b) -> bool | None:
    """a >= b, with one part in a thousand for rounding (the planted pairs are thousands)."""
    if a is None or b is None:
        return None
    return a >= b - 1e-3


if __name__ == "__main__":
    sys.exit(main())
