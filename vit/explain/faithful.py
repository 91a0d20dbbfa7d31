"""Which explanation map to lead with, measured per model, and whether the maps agree on one input.

A map shown as "what drove the answer" is a claim. `fit_faithfulness` runs the deletion test
(Petsiuk et al. 2018: blank the patches a map ranks first and watch the answer's probability
fall; lower mean = the map found what the answer rests on) of rollout, relevance and occlusion
on a checkpoint's validation split — held out of training and never the test set, as its
calibration is — and writes the result to config.json's `faithfulness`, with how it was measured
(vit/training/faithfulness_fit.py; this module is only the pure part the checkpoint reader needs).
The page leads with that map (`lead_map`), and `agreement` says in words when, for the input on
screen, the other maps rank the patches differently. `python -m vit.fit_faithfulness` runs it.
"""
from __future__ import annotations

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


def ranks(v: np.ndarray) -> np.ndarray:
    """Ranks from 0, ties given their mean rank (as Spearman's rho wants: an occlusion map's
    many patches of exactly no change would otherwise be ranked by their place on the grid)."""
    v = np.asarray(v, dtype=np.float64).ravel()
    r = np.empty(len(v))
    r[np.argsort(v, kind="stable")] = np.arange(len(v))
    _, inverse = np.unique(v, return_inverse=True)
    return (np.bincount(inverse, r) / np.bincount(inverse))[inverse]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two maps; 0 where either is constant (no order to share)."""
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def agreement(lead: str, maps: dict[str, np.ndarray]) -> dict[str, float]:
    """{other map: Spearman's rho with the lead map} for this input."""
    return {k: spearman(maps[lead], maps[k]) for k in LEADS if k != lead and k in maps}
