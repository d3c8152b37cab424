"""The transformers anchor of bench/serving: Hugging Face `generate` behind a minimal
OpenAI-style HTTP server (POST /v1/completions, streaming or not; GET /health).

One generation at a time (a lock around `generate`), as a plain "model behind Flask" service
runs: no batching, no KV-cache sharing between requests. Runs in .venv-hf (torch +
transformers); greedy when temperature is 0.

Usage: hf_server.py MODEL_DIR PORT [--threads N] [--device cpu|cuda] [--dtype float32|bfloat16]
"""

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, TextIteratorStreamer

ap = argparse.ArgumentParser()
ap.add_argument("model_dir")
ap.add_argument("port", type=int)
ap.add_argument("--threads", type=int, default=0)
ap.add_argument("--device", default="cpu")
ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
args = ap.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)

tok = AutoTokenizer.from_pretrained(args.model_dir)
# transformers 5 names the argument dtype, 4.x torch_dtype.
dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
model = AutoModelForCausalLM.from_pretrained(args.model_dir, **{dtype_arg: getattr(torch, args.dtype)})
model = model.to(args.device).eval()
eos = model.config.eos_token_id
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *unused):
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {"status": "ready"})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        if self.path != "/v1/completions":
            self._send(404, {"error": {"message": "not found"}})
            return
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        ids = tok(req["prompt"], return_tensors="pt").input_ids.to(args.device)
        max_tokens = int(req.get("max_tokens", 16))
        gen = {"max_new_tokens": max_tokens, "do_sample": False, "pad_token_id": eos,
               "eos_token_id": eos}
        if not req.get("stream"):
            with lock, torch.no_grad():
                out = model.generate(ids, **gen)
            new = out[0, ids.shape[1]:].tolist()
            self._send(200, {"object": "text_completion", "choices": [
                {"index": 0, "text": tok.decode(new), "finish_reason": "length"}],
                "usage": {"prompt_tokens": ids.shape[1], "completion_tokens": len(new)}})
            return
        streamer = TextIteratorStreamer(tok, skip_prompt=True)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        count = [0]

        def run():
            with lock, torch.no_grad():
                out = model.generate(ids, streamer=streamer, **gen)
            count[0] = out.shape[1] - ids.shape[1]

        t = threading.Thread(target=run)
        t.start()
        for piece in streamer:
            if piece:
                chunk = {"object": "text_completion", "created": int(time.time()),
                         "choices": [{"index": 0, "text": piece, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
        t.join()
        final = {"object": "text_completion", "choices": [],
                 "usage": {"prompt_tokens": ids.shape[1], "completion_tokens": count[0]}}
        self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    # The default listen backlog (5) resets connections when 32 clients connect at once.
    request_queue_size = 128


Server(("127.0.0.1", args.port), Handler).serve_forever()
