"""Which explanation map to lead with, measured per model, and whether the maps agree on one input.

A map shown as "what drove the answer" is a claim. `fit_faithfulness` runs the deletion test
(Petsiuk et al. 2018: blank the patches a map ranks first and watch the answer's probability
fall; lower mean = the map found what the answer rests on) of rollout, relevance and occlusion
on a checkpoint's validation split — held out of training and never the test set, as its
calibration is — and writes the result to config.json's `faithfulness`, with how it was measured.
The page leads with that map (`lead_map`), and `agreement` says in words when, for the input on
screen, the other maps rank the patches differently. `python -m vit.fit_faithfulness` runs it.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

LEADS = ("rollout", "relevance", "occlusion")
RANDOM = "random order"
DEFAULT_LEAD = "relevance"          # a checkpoint never measured: the page's choice before
AGREE = 0.5                         # Spearman's rho at or above this: two maps rank alike


def lead_map(config) -> str:
    """The map a checkpoint's own measurement found most faithful (`DEFAULT_LEAD` if never
    measured)."""
    lead = (getattr(config, "faithfulness", None) or {}).get("lead")
    return lead if lead in LEADS else DEFAULT_LEAD


def check(record, where: str) -> str | None:
    """Why config.json's `faithfulness` value is malformed, or None."""
    if not isinstance(record, dict):
        return f"{where}: faithfulness must be an object"
    lead = record.get("lead")
    if lead is not None and lead not in LEADS:
        return f"{where}: faithfulness.lead must be one of {', '.join(LEADS)}"
    deletion = record.get("deletion", {})
    if not isinstance(deletion, dict) or len(deletion) > 8 or not all(
            k in (*LEADS, RANDOM) and isinstance(v, (int, float)) and not isinstance(v, bool)
            and 0 <= v <= 1 for k, v in deletion.items()):
        return f"{where}: faithfulness.deletion must map map names to numbers in [0, 1]"
    return None


def _rank(v: np.ndarray) -> np.ndarray:
    r = np.empty(v.size)
    r[np.argsort(v.ravel(), kind="stable")] = np.arange(v.size)
    return r


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = _rank(np.asarray(a, np.float64)), _rank(np.asarray(b, np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(np.sqrt((ra ** 2).sum() * (rb ** 2).sum()))
    return float((ra * rb).sum() / den) if den > 0 else 0.0


def agreement(lead: str, maps: dict[str, np.ndarray]) -> dict[str, float]:
    """{other map: Spearman's rho with the lead map} for this input."""
    return {k: spearman(maps[lead], maps[k]) for k in LEADS if k != lead and k in maps}


def fit_faithfulness(folder, data_dir, n: int = 300, steps: int = 16, command: str | None = None,
                     say=print, device: str | None = "cpu") -> dict:
    """Measure and write config.json's `faithfulness` for a checkpoint folder; returns it.
    `device`: where the maps are computed (None: a GPU where there is one; a 490 k-parameter
    model with 196 patches takes most of an hour on 2 CPU cores). Raises CheckpointError,
    DataError."""
    from vit.checkpoint import CONFIG, CheckpointError, read_config
    from vit.data.loading import load_split
    from vit.hub import CARD, model_card
    from vit.inference import Predictor
    from vit.storage import save_json, save_text
    from vit.training.batches import carve_validation
    from vit.training.records import git_commit

    started, folder = time.time(), Path(folder)
    from vit.device import pick_device
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
