"""Calls a running job's workload makes: heartbeats (a sign of life for hang detection)."""

from __future__ import annotations

import os
import urllib.parse

from trainyard._client import Client, TrainyardError, default_client


def job_id() -> str:
    """This workload's job (TRAINYARD_JOB_ID)."""
    value = os.environ.get("TRAINYARD_JOB_ID", "")
    if not value:
        raise TrainyardError("TRAINYARD_JOB_ID is not set: run this inside a Trainyard job")
    return value


def heartbeat(client: Client | None = None) -> None:
    """Tells the server this job is making progress (resets its hang_timeout)."""
    (client or default_client()).call(
        "POST", f"/jobs/{urllib.parse.quote(job_id(), safe='')}/heartbeat", {})
