"""Small snapshots of the weights during training (`--snapshots 0.01,0.1,0.5`), kept in the
checkpoint folder as `snapshots/step-NNNNNNN.safetensors` (float16: half a checkpoint's size), so
that the app can show how the model's attention and answer for one input changed as it learned.
The end of training is the checkpoint itself. Data, not code: a snapshot's tensors must match the
checkpoint's model in names and shapes, or it is skipped."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from vit.storage import StorageError, load_tensors_and_metadata, save_tensors

FOLDER = "snapshots"
OFF = ("none", "off", "0", "")
MAX_SHOWN = 32              # snapshots read per input (evenly spaced): the trainer keeps 32 at most


def parse(spec: str) -> list[float]:
    """"0.01,0.1,0.5" -> [0.01, 0.1, 0.5]; "none" -> []. Raises ValueError saying why."""
    if spec.strip().lower() in OFF:
        return []
    try:
        out = sorted({float(f) for f in spec.split(",") if f.strip()})
    except ValueError:
        raise ValueError(f"--snapshots {spec!r}: give fractions of the run such as 0.01,0.1,0.5, "
                         "or none") from None
    if not out or any(not 0 < f < 1 for f in out):
        raise ValueError(f"--snapshots {spec!r}: each fraction must be above 0 and below 1 "
                         "(the end of training is the checkpoint itself)")
    if len(out) > 32:
        raise ValueError(f"--snapshots: at most 32 fractions, not {len(out)}")
    return out


def steps(spec: str, total: int) -> set[int]:
    """The optimiser steps after which a snapshot is kept (never the last: that is the checkpoint)."""
    return {max(1, round(f * total)) for f in parse(spec)} - {total}


def path_for(out: Path, step: int) -> Path:
    return Path(out) / FOLDER / f"step-{step:07d}.safetensors"


def save(out: Path, model: torch.nn.Module, step: int, total: int) -> None:
    """Keep `model`'s weights after `step` of `total` steps."""
    weights = {k: v.detach().to(torch.float16) for k, v in model.state_dict().items()}
    save_tensors(path_for(out, step), weights, {"step": str(step), "of": str(total)})


@dataclass(frozen=True)
class Snapshot:
    step: int
    of: int
    path: Path


def listed(folder: Path) -> list[Snapshot]:
    """A checkpoint folder's snapshots, in training order (files not named as the trainer names
    them are ignored)."""
    out = []
    for path in (Path(folder) / FOLDER).glob("step-*.safetensors"):
        try:
            step = int(path.stem.split("-", 1)[1])
        except ValueError:
            continue
        out.append(Snapshot(step, 0, path))
    out.sort(key=lambda s: s.step)                # by number: names pad to 7 digits only
    if len(out) > MAX_SHOWN:                      # a folder of 400 took 4.5 s per input
        keep = {round(i * (len(out) - 1) / (MAX_SHOWN - 1)) for i in range(MAX_SHOWN)}
        out = [s for i, s in enumerate(out) if i in keep]
    return out


def load(snapshot: Snapshot, model: torch.nn.Module) -> Snapshot:
    """Read a snapshot into `model` (a copy of the checkpoint's; float32 again). Returns it with
    its total step count. Raises StorageError when its tensors do not fit the model."""
    tensors, meta = load_tensors_and_metadata(snapshot.path)
    want = model.state_dict()
    if set(tensors) != set(want) or any(tensors[k].shape != want[k].shape for k in want):
        raise StorageError(f"{snapshot.path.name}: its tensors do not fit this checkpoint's model")
    if not all(torch.isfinite(v).all() for v in tensors.values()):
        raise StorageError(f"{snapshot.path.name}: it holds values that are not numbers")
    model.load_state_dict({k: v.float() for k, v in tensors.items()})
    try:
        of = int(meta.get("of", "0"))
    except ValueError:
        of = 0
    return Snapshot(snapshot.step, of if of >= snapshot.step else 0, snapshot.path)
