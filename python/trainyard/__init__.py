"""Trainyard's Python SDK for workloads: checkpoints and job calls (standard library only).

    import trainyard.checkpoint
    trainyard.checkpoint.save(model.state_dict(), step=step, metrics={"loss": loss})
    state = trainyard.checkpoint.load()   # what this attempt resumes from, or None

Configured by the environment a Trainyard job gets: TRAINYARD_URL, TRAINYARD_TOKEN,
TRAINYARD_JOB_ID, TRAINYARD_RESUME_FROM, RANK, WORLD_SIZE.
"""

from trainyard import checkpoint, jobs
from trainyard._client import Client, TrainyardError

__all__ = ["checkpoint", "jobs", "Client", "TrainyardError"]
