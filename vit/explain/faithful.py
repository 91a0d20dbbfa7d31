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
