"""Attention over training: the input on screen through the checkpoint's training snapshots
(vit/training/snapshots.py) and the finished model, one frame each: the answer, the attention
rollout into [CLS], and one patch's position-embedding similarity to every other patch."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from vit.explain.attention import explain
from vit.explain.mechanism import position_similarity
from vit.storage import StorageError
from vit.text import percent
from vit.training import snapshots


@dataclass(frozen=True)
class Frame:
    step: int            # optimiser steps trained (the last frame: the finished checkpoint's)
    of: int              # of the run's steps (0 when a snapshot does not say)
    probs: np.ndarray    # (classes,) calibrated with the checkpoint's temperature
    rollout: np.ndarray  # (G, G)
    position: np.ndarray  # (G, G): the chosen patch's position embedding against every patch's

    @property
    def name(self) -> str:
        if self.of and self.step >= self.of:
            return "the end"
        if self.of:
            return f"{percent(self.step / self.of)} (step {self.step:,})"     # the page's one format
        return f"step {self.step:,}"


def frames(model: torch.nn.Module, folder, x: torch.Tensor, patch: int,
           temperature: float) -> list[Frame]:
    """One frame per snapshot in `folder` that fits `model`, then the model itself; [] when no
    snapshot fits (nothing to show, so nothing is computed). `x`: the normalised input
    (1, C, S, S); `patch`: 0-based."""
    out = []
    found = snapshots.listed(folder)
    work = copy.deepcopy(model) if found else None
    for snap in found:
        try:
            snap = snapshots.load(snap, work)
        except StorageError:
            continue                      # damaged or from another model: shown as absent
        out.append(_frame(work, x, patch, temperature, snap.step, snap.of))
    if not out:
        return []
    last_of = max(f.of for f in out)
    out.append(_frame(model, x, patch, temperature, last_of, last_of))
    return out


@torch.no_grad()
def _frame(model, x, patch, temperature, step, of) -> Frame:
    e = explain(model, x, temperature)
    return Frame(step, of, e.probs, e.rollout_map, position_similarity(model)[patch])
