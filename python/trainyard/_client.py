"""A small HTTP client of the Trainyard API (standard library only).

Where the server is and who we are come from the environment a job's workload gets:
TRAINYARD_URL and TRAINYARD_TOKEN. Connections the server refuses (it may be restarting) are
retried for TRAINYARD_RETRY_SECONDS (default 60); so are dropped connections of requests
that are safe to repeat (GET, PUT, DELETE). Errors the server answers are raised as
TrainyardError with its message.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.parse
from typing import Any, Mapping

API = "/api/trainyard/v1"
_RETRY_PAUSE_S = 0.2


class TrainyardError(Exception):
    """An error the server answered (status >= 400), or a connection that never came up."""

    def __init__(self, message: str, status: int = 0, error_code: str = ""):
        super().__init__(message)
        self.status = status
        self.error_code = error_code


def _env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise TrainyardError(f"{name} is not set: run this inside a Trainyard job, or set "
                             f"{name} yourself")
    return value


class Client:
    def __init__(self, url: str | None = None, token: str | None = None,
                 retry_seconds: float | None = None):
        self.url = (url or _env("TRAINYARD_URL")).rstrip("/")
        self.token = token if token is not None else os.environ.get("TRAINYARD_TOKEN", "")
        if retry_seconds is None:
            retry_seconds = float(os.environ.get("TRAINYARD_RETRY_SECONDS", "60"))
        self.retry_seconds = retry_seconds
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise TrainyardError(f"TRAINYARD_URL must be http://host:port (got {self.url!r})")
        self._scheme = parsed.scheme
        self._host = parsed.hostname
        self._port = parsed.port
        self._base = parsed.path.rstrip("/")

    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=600)

    def request(self, method: str, path: str, *, json_body: Any = None, data: Any = None,
                params: Mapping[str, Any] | None = None) -> tuple[int, dict[str, str], bytes]:
        """Sends one request; returns (status, lower-case headers, body) of a 2xx answer."""
        target = self._base + path
        if params:
            target += "?" + urllib.parse.urlencode(
                {k: str(v) for k, v in params.items() if v is not None})
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        body = data
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        elif body is not None:
            headers["Content-Type"] = "application/octet-stream"
        if body is not None:
            headers["Content-Length"] = str(memoryview(body).nbytes)
        idempotent = method in ("GET", "PUT", "DELETE", "HEAD")
        deadline = time.monotonic() + self.retry_seconds
        while True:
            conn = self._connection()
            try:
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                status = resp.status
                resp_headers = {k.lower(): v for k, v in resp.getheaders()}
                break
            except ConnectionRefusedError as e:
                last: Exception = e
            except (ConnectionResetError, http.client.RemoteDisconnected, BrokenPipeError) as e:
                if not idempotent:
                    raise TrainyardError(f"{method} {self.url}{path}: the connection dropped "
                                         f"before an answer ({e}); it may or may not have "
                                         f"taken effect") from e
                last = e
            finally:
                conn.close()
            if time.monotonic() > deadline:
                raise TrainyardError(f"cannot reach the Trainyard server at {self.url} "
                                     f"(tried for {self.retry_seconds:.0f}s): {last}")
            time.sleep(_RETRY_PAUSE_S)  # the server is restarting; try again shortly
        if status >= 400:
            message, code = payload.decode(errors="replace"), ""
            try:
                parsed = json.loads(payload)
                message, code = parsed.get("message", message), parsed.get("error_code", "")
            except ValueError:
                pass
            raise TrainyardError(f"{method} {path}: server answered {status}: {message}",
                                 status=status, error_code=code)
        return status, resp_headers, payload

    def call(self, method: str, path: str, body: Any = None,
             params: Mapping[str, Any] | None = None) -> Any:
        """A JSON request; returns the parsed JSON answer."""
        _, _, payload = self.request(method, API + path, json_body=body, params=params)
        return json.loads(payload) if payload else {}


_default: Client | None = None


def default_client() -> Client:
    """The client for this process's environment (created on first use)."""
    global _default
    if _default is None or _default.url != os.environ.get("TRAINYARD_URL", _default.url).rstrip(
            "/") or _default.token != os.environ.get("TRAINYARD_TOKEN", _default.token):
        _default = Client()
    return _default
