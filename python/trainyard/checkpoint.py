"""Checkpoints through the Trainyard server: save a training state, load it back on restart.

    import trainyard.checkpoint as ckpt

    state = ckpt.load()            # the checkpoint this attempt resumes from, or None
    start = state.step if state else 0
    ...
    ckpt.save(model.state_dict(), step=step, metrics={"loss": loss})

`state` is a mapping of name → value, where a value is bytes (saved as a file), a numpy array
(when numpy is importable) or a torch tensor (when torch is importable); tensors keep their
dtype and shape. Each rank saves its own part (RANK / WORLD_SIZE from the environment); the
checkpoint is complete when every rank has saved, and only then becomes what the job's next
attempt resumes from (TRAINYARD_RESUME_FROM). A rank that saves the whole state alone passes
rank=0, world_size=1.

Standard library only; numpy and torch are used when they are importable.
"""

from __future__ import annotations

import os
import urllib.parse
from collections import namedtuple
from typing import Any, Mapping

from trainyard._client import Client, TrainyardError, default_client

URI_SCHEME = "trainyard-checkpoint://"

# A tensor returned when neither torch nor numpy can hold it: safetensors dtype, shape, bytes.
RawTensor = namedtuple("RawTensor", ["dtype", "shape", "data"])

_TORCH_DTYPES = {  # safetensors name → torch attribute name
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}
_NUMPY_DTYPES = {  # numpy dtype name → safetensors name
    "float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}


class Checkpoint(dict):
    """A loaded checkpoint: a dict of name → tensor or bytes, plus what was saved beside it."""

    def __init__(self, blobs: Mapping[str, Any], *, step: int, uri: str,
                 metrics: Mapping[str, float], metadata: Any, rank: int):
        super().__init__(blobs)
        self.step = step
        self.uri = uri
        self.metrics = dict(metrics)
        self.metadata = metadata
        self.rank = rank

    def __repr__(self) -> str:
        return f"Checkpoint(step={self.step}, uri={self.uri!r}, blobs={list(self.keys())!r})"


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def _numpy():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def _quote(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise TrainyardError(f"{name} must be an integer (got {value!r})") from None


def _job(job_id: str | None) -> str:
    job = job_id or os.environ.get("TRAINYARD_JOB_ID", "")
    if not job:
        raise TrainyardError("TRAINYARD_JOB_ID is not set: run this inside a Trainyard job, "
                             "or pass job_id=")
    return job


def parse_uri(uri: str) -> tuple[str, str, int]:
    """trainyard-checkpoint://PROJECT/JOB/STEP → (project, job, step)."""
    if not uri.startswith(URI_SCHEME):
        raise ValueError(f"{uri!r} is not a checkpoint URI ({URI_SCHEME}PROJECT/JOB/STEP)")
    parts = uri[len(URI_SCHEME):].split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        raise ValueError(f"{uri!r} is not a checkpoint URI ({URI_SCHEME}PROJECT/JOB/STEP)")
    return parts[0], parts[1], int(parts[2])


def _encode(name: str, value: Any) -> tuple[dict[str, str], Any]:
    """A state value → (query parameters naming its kind, its bytes as a buffer)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {}, value
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach()
        dtype = next((k for k, v in _TORCH_DTYPES.items() if getattr(torch, v, None) == t.dtype),
                     None)
        if dtype is None:
            raise TypeError(f"state[{name!r}]: torch dtype {t.dtype} cannot be checkpointed")
        shape = list(t.shape)
        flat = t.cpu().contiguous().reshape(-1)
        data = memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else b""
        return {"dtype": dtype, "shape": ",".join(map(str, shape))}, data
    np = _numpy()
    if np is not None and isinstance(value, (np.ndarray, np.generic)):
        a = np.ascontiguousarray(value)
        dtype = _NUMPY_DTYPES.get(a.dtype.name)
        if dtype is None or a.dtype.byteorder == ">":
            raise TypeError(f"state[{name!r}]: numpy dtype {a.dtype} cannot be checkpointed")
        data = memoryview(a.reshape(-1).view(np.uint8)) if a.size else b""
        return {"dtype": dtype, "shape": ",".join(map(str, a.shape))}, data
    if isinstance(value, str):
        raise TypeError(f"state[{name!r}] is a str: encode it to bytes to save it as a file")
    raise TypeError(f"state[{name!r}] is a {type(value).__name__}: values must be bytes, numpy "
                    f"arrays or torch tensors")


def _decode(kind: str, dtype: str, shape: list[int], data: bytes, tensors: str) -> Any:
    if kind != "tensor":
        return data
    torch = _torch() if tensors in ("auto", "torch") else None
    if tensors == "torch" and torch is None:
        raise TrainyardError("tensors='torch' but torch cannot be imported")
    if torch is not None:
        tdtype = getattr(torch, _TORCH_DTYPES[dtype])
        if not data:
            return torch.empty(shape, dtype=tdtype)
        return torch.frombuffer(bytearray(data), dtype=tdtype).reshape(shape)
    np = _numpy() if tensors in ("auto", "numpy") else None
    if tensors == "numpy" and np is None:
        raise TrainyardError("tensors='numpy' but numpy cannot be imported")
    npname = next((k for k, v in _NUMPY_DTYPES.items() if v == dtype), None)
    if np is not None and npname is not None:
        return np.frombuffer(bytearray(data), dtype=np.dtype(npname)).reshape(shape)
    return RawTensor(dtype, tuple(shape), data)


def save(state: Mapping[str, Any], step: int, metrics: Mapping[str, float] | None = None, *,
         metadata: Any = None, rank: int | None = None, world_size: int | None = None,
         job_id: str | None = None, client: Client | None = None) -> dict:
    """Saves this rank's `state` as checkpoint `step` of the job; returns the server's answer
    (uri, complete, registered, written_bytes, ...). Blocks until the checkpoint is durable.

    metrics: numbers the job's retention policy can rank checkpoints by (e.g. eval_loss).
    metadata: anything JSON-serializable, stored beside the blobs.
    """
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step must be a non-negative integer (got {step!r})")
    if not isinstance(state, Mapping) or not state:
        raise ValueError("state must be a non-empty mapping of name → bytes/array/tensor")
    c = client or default_client()
    rank = _env_int("RANK", 0) if rank is None else rank
    world_size = _env_int("WORLD_SIZE", 1) if world_size is None else world_size
    clean_metrics = {str(k): float(v) for k, v in (metrics or {}).items()}
    encoded = [(str(name), *_encode(str(name), value)) for name, value in state.items()]
    upload = c.call("POST", "/checkpoints/uploads",
                    {"job_id": _job(job_id), "step": step, "rank": rank,
                     "world_size": world_size})
    upload_id = upload["upload_id"]
    try:
        for name, params, data in encoded:
            c.request("PUT", f"/api/trainyard/v1/checkpoints/uploads/{upload_id}/blob",
                      data=data, params={"name": name, **params})
        body = {"blobs": [name for name, _, _ in encoded], "metrics": clean_metrics}
        if metadata is not None:
            body["metadata"] = metadata
        return c.call("POST", f"/checkpoints/uploads/{upload_id}/commit", body)
    except BaseException:
        try:
            c.call("DELETE", f"/checkpoints/uploads/{upload_id}")
        except TrainyardError:
            pass  # committed, or already gone; stale uploads are collected by the server
        raise


def latest(job_id: str | None = None, client: Client | None = None) -> dict | None:
    """The job's latest complete checkpoint (step, uri, metrics, sizes), or None."""
    c = client or default_client()
    try:
        return c.call("GET", f"/checkpoints/jobs/{_quote(_job(job_id))}/latest")["checkpoint"]
    except TrainyardError as e:
        if e.status == 404 and "no complete checkpoint" in str(e):
            return None
        raise


def load(step: int | None = None, *, job_id: str | None = None, rank: int | None = None,
         tensors: str = "auto", client: Client | None = None) -> Checkpoint | None:
    """Loads one rank's part of a checkpoint, every byte verified.

    Which checkpoint: `step` of the job when given; else the one this attempt resumes from
    (TRAINYARD_RESUME_FROM); else the job's latest; None when there is none.
    tensors: "auto" (torch if importable, else numpy, else RawTensor), "torch", "numpy", "raw".
    """
    if tensors not in ("auto", "torch", "numpy", "raw"):
        raise ValueError("tensors must be 'auto', 'torch', 'numpy' or 'raw'")
    c = client or default_client()
    job = _job(job_id)
    if step is None:
        resume = os.environ.get("TRAINYARD_RESUME_FROM", "") if job_id is None else ""
        if resume:
            _, job, step = parse_uri(resume)
        else:
            info = latest(job, client=c)
            if info is None:
                return None
            step = info["step"]
    info = c.call("GET", f"/checkpoints/jobs/{_quote(job)}/steps/{int(step)}")["checkpoint"]
    ranks = info["ranks"]
    want = _env_int("RANK", 0) if rank is None else rank
    if len(ranks) == 1 and rank is None:
        want = 0  # a checkpoint saved by one rank is every rank's
    if not 0 <= want < len(ranks):
        raise TrainyardError(f"checkpoint {info['uri']} has {len(ranks)} rank(s); there is no "
                             f"rank {want}")
    manifest = ranks[want]
    blobs = {}
    for b in manifest["blobs"]:
        _, _, data = c.request(
            "GET", f"/api/trainyard/v1/checkpoints/jobs/{_quote(job)}/steps/{int(step)}/blob",
            params={"name": b["name"], "rank": want})
        blobs[b["name"]] = _decode(b["kind"], b.get("dtype", ""), b.get("shape", []), data,
                                   tensors)
    return Checkpoint(blobs, step=info["step"], uri=info["uri"], metrics=manifest["metrics"],
                      metadata=manifest.get("metadata"), rank=want)
