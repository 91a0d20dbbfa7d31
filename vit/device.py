"""Where a model runs: one choice of device for the app, the trainer and the CLIs, and the passes
that need that device marked for a Hugging Face ZeroGPU Space (`gpu_task`)."""
from __future__ import annotations

import torch

from vit.settings import Settings

RUNNABLE_DEVICES = ("cpu", "cuda", "mps")


def pick_device(name: str | None = None) -> torch.device:
    """'auto' / None ($VIT_DEVICE, else auto) -> cuda, then mps, then cpu; anything else must name a
    device a model can really run on here: torch also knows 'meta' (shapes without data) and
    others, on which a forward pass fails deep inside torch. Raises ValueError saying why."""
    name = name or Settings.read("device")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r} (use auto, cpu, cuda, cuda:N or mps)") from None
    if device.type not in RUNNABLE_DEVICES:
        raise ValueError(f"unknown device {name!r} for running a model "
                         "(use auto, cpu, cuda, cuda:N or mps)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but CUDA is not available here")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None)
                                     and torch.backends.mps.is_available()):
        raise ValueError(f"device {name!r} asked for, but MPS is not available here")
    return device


def on_zero_gpu() -> bool:
    """Whether this process runs on a ZeroGPU Space (which sets SPACES_ZERO_GPU, read as the
    `spaces` package reads it)."""
    return Settings.read("zero_gpu")


def gpu_task(fn):
    """`fn` (a pass of a model: tensors in, arrays out) marked as needing the GPU for the length
    of a call: on a ZeroGPU Space the `spaces` package lends one per call (`spaces.GPU`, which
    runs the call in a worker process, so only pure computations are marked, never a handler
    that changes a visitor's page); anywhere else `fn` itself, unchanged."""
    if not on_zero_gpu():
        return fn
    import spaces  # on a ZeroGPU Space it is installed, and imported first
    return spaces.GPU(fn)
