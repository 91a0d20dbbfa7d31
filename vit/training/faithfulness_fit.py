"""Measure which explanation map a checkpoint should lead with (vit/explain/faithful.py) and
write it to its config.json: `python -m vit.fit_faithfulness` is the command.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from vit.checkpoint import CONFIG, CheckpointError, read_config
from vit.data.loading import load_split
from vit.device import pick_device
from vit.explain.faithful import LEADS
from vit.hub import CARD, model_card
from vit.inference import Predictor
from vit.storage import save_json, save_text
from vit.training.batches import carve_validation
from vit.training.records import git_commit


def fit_faithfulness(folder, data_dir, n: int = 300, steps: int = 16, command: str | None = None,
                     say=print, device: str | None = "cpu") -> dict:
    """Measure and write config.json's `faithfulness` for a checkpoint folder; returns it.
    `device`: where the maps are computed (None: a GPU where there is one; a 490 k-parameter
    model with 196 patches takes most of an hour on 2 CPU cores). Raises CheckpointError,
    DataError."""
    started, folder = time.time(), Path(folder)
    p = Predictor(folder, pick_device(device))
    c = p.config
    if c.spec is None:
        raise CheckpointError(f"{folder}: its data set ({c.dataset}) is not a built-in one")
    _, val = carve_validation(load_split(c.spec, data_dir, train=True),
                              int(c.training.get("val_size", 5000)))
    if val is None:
        raise CheckpointError(f"{folder}: trained without a validation split (--val-size 0)")
    aucs: dict[str, list[float]] = {}
    for img in val.images[:n].numpy():
        a = p.analyse_input(img.astype(np.float32) / 255.0)
        for name, v in p.faithfulness(a, steps).items():
            aucs.setdefault(name, []).append(v)
    deletion = {k: round(float(np.mean(v)), 4) for k, v in aucs.items()}
    lead = min(LEADS, key=deletion.get)
    record = {"lead": lead, "deletion": deletion,
              "measured_on": f"deletion test ({steps} steps) of each map for the model's answer "
                             f"on {min(n, len(val)):,} validation images (held out of training; "
                             f"not the test set); lower = the map found what the answer rests on",
              "command": command, "commit": git_commit()}
    config = read_config(folder).to_dict()
    config["faithfulness"] = record
    save_json(folder / CONFIG, config)
    save_text(folder / CARD, model_card(config))
    read_config(folder)                                   # reads back, or raises
    say(f"{folder}: lead {lead}; deletion " + ", ".join(f"{k} {v:.3f}" for k, v in deletion.items())
        + f"; {time.time() - started:.0f} s")
    return record
