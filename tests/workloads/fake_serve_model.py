#!/usr/bin/python3
"""A stand-in for trainyard-serve-model (the replica contract of issue 17), standard library
only, for testing the server's OpenAI routes, streaming and capture without the engine:

  fake_serve_model.py --model-dir DIR [--served-model-name NAME] [--host H] --port P
                      [--port-file F] [--device D] [--adapter NAME=DIR]...

It answers GET /health, GET /v1/models, POST /v1/chat/completions and /v1/completions by
echoing the last message (or prompt) back word by word; `stream: true` sends one SSE event per
word (chunked) and a final event with `usage`. A prompt of "die" streams one word and exits.
"""

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--model-dir", required=True)
parser.add_argument("--served-model-name", default="model")
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--port-file")
parser.add_argument("--device", default="auto")
parser.add_argument("--adapter", action="append", default=[])
args = parser.parse_args()
assert os.path.exists(os.path.join(args.model_dir, "config.json")), args.model_dir


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self.send_json(200, {"status": "ok"})
        if self.path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [
                {"id": args.served_model_name, "object": "model", "owned_by": "trainyard"}]})
        self.send_json(404, {"error": {"message": "no such route", "type": "not_found"}})

    def chunk(self, event):
        data = f"data: {event}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        chat = self.path == "/v1/chat/completions"
        if body.get("model") != args.served_model_name:
            return self.send_json(404, {"error": {"message": f"model {body.get('model')!r} is "
                                                  f"not served here", "type": "not_found"}})
        text = body["messages"][-1]["content"] if chat else body["prompt"]
        if body.get("max_tokens", 16) < 0:
            return self.send_json(400, {"error": {"message": "max_tokens must be positive",
                                                  "type": "invalid_request_error"}})
        words = text.split()
        usage = {"prompt_tokens": len(words), "completion_tokens": len(words),
                 "total_tokens": 2 * len(words)}
        kind = "chat.completion" if chat else "text_completion"
        rid = ("chatcmpl-" if chat else "cmpl-") + self.headers.get("x-request-id", "1")
        if not body.get("stream"):
            choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                       "finish_reason": "stop"} if chat else
                      {"index": 0, "text": text, "finish_reason": "stop"})
            return self.send_json(200, {"id": rid, "object": kind, "created": 0,
                                        "model": args.served_model_name, "choices": [choice],
                                        "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            choice = ({"index": 0, "delta": {"content": piece}, "finish_reason": None} if chat
                      else {"index": 0, "text": piece, "finish_reason": None})
            self.chunk(json.dumps({"id": rid, "object": kind + ".chunk", "created": 0,
                                   "model": args.served_model_name, "choices": [choice]}))
            if text == "die":
                os._exit(3)
            time.sleep(0.01)  # a token's worth of decoding, so the pieces arrive apart
        done = ({"index": 0, "delta": {}, "finish_reason": "stop"} if chat
                else {"index": 0, "text": "", "finish_reason": "stop"})
        self.chunk(json.dumps({"id": rid, "object": kind + ".chunk", "created": 0,
                               "model": args.served_model_name, "choices": [done],
                               "usage": usage}))
        self.chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


server = ThreadingHTTPServer((args.host, args.port), Handler)
if args.port_file:
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)
print(f"serving {args.model_dir} as {args.served_model_name} on port "
      f"{server.server_address[1]}", file=sys.stderr, flush=True)
server.serve_forever()
