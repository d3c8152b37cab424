"""A thin client of the jobs API for one server, shared by the job tests."""

from __future__ import annotations

import json
import time

import pytest

API = "/api/trainyard/v1"


class JobsClient:
    """Calls as `token` (default: the server's admin token). `spec_defaults` fill keys a spec
    leaves out. Requests time out, so that a stuck server fails a test instead of hanging it."""

    def __init__(self, server, token: str | None = None, spec_defaults: dict | None = None):
        self.server = server
        self.s = server.session(token)
        self.spec_defaults = spec_defaults or {}

    def submit(self, spec: dict, expect: int = 200) -> dict:
        for key, value in self.spec_defaults.items():
            spec.setdefault(key, value)
        r = self.s.post(self.server.api(f"{API}/jobs"), json={"spec": spec}, timeout=60)
        assert r.status_code == expect, r.text[:2000]
        return r.json().get("job", r.json())

    def get(self, job_id: str) -> dict:
        r = self.s.get(self.server.api(f"{API}/jobs/{job_id}"), timeout=30)
        assert r.status_code == 200, r.text
        return r.json()["job"]

    def cancel(self, job_id: str) -> None:
        r = self.s.post(self.server.api(f"{API}/jobs/{job_id}/cancel"), timeout=30)
        assert r.status_code in (200, 400), r.text

    def logs(self, job_id: str, attempt: int = 0, rank: int = 0) -> str:
        r = self.s.get(self.server.api(f"{API}/jobs/{job_id}/logs"),
                       params={"attempt": attempt, "rank": rank}, timeout=30)
        assert r.status_code == 200, r.text
        return r.text

    def wait(self, job_id: str, pred, what: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if pred(job):
                return job
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} did not reach '{what}' within {timeout}s: "
                            f"{json.dumps(job, indent=1)[:3000]}")
            self.server.assert_alive()
            time.sleep(0.05)  # polling, bounded by the deadline

    def wait_state(self, job_id: str, state: str, timeout: float = 60) -> dict:
        return self.wait(job_id, lambda j: j["state"] == state, state, timeout)
