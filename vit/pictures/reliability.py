"""The reliability diagram: does "90 %" mean right nine times in ten?

Per bin of top probability (vit.explain.calibration's 15 equal-width bins): the share of right answers
against the bin's mean confidence, the gap to the diagonal shaded, the raw softmax beside the
calibrated probabilities when both are given, and how many answers fall in each bin below. Drawn
with matplotlib's object API (no pyplot, no global state), so servers and tests can call it from
any thread; `python -m vit.evaluate --reliability PATH` writes one, and the app can show
`reliability_picture`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vit.explain.calibration import ECE_BINS, ece, reliability


def reliability_figure(probs, labels, raw_probs=None, title: str = "", bins: int = ECE_BINS):
    """A matplotlib Figure: reliability of `probs` (N, K) against `labels` (N,), and of
    `raw_probs` (the uncalibrated softmax) beside it when given."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(5.6, 6.4), dpi=100, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    series = [("calibrated" if raw_probs is not None else "model", probs, "#1f6fd1")]
    if raw_probs is not None:
        series.insert(0, ("raw softmax", raw_probs, "#d1651f"))
    width = 1 / bins
    top.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="perfectly calibrated")
    for k, (name, p, colour) in enumerate(series):
        rows = reliability(p, labels, bins)
        lo = np.array([r[0] for r in rows])
        count = np.array([r[2] for r in rows])
        conf = np.array([r[3] for r in rows])
        acc = np.array([r[4] for r in rows])
        shift = (k - (len(series) - 1) / 2) * width / len(series)
        e = 100 * ece(p, labels, bins)
        top.plot(conf, acc, marker="o", ms=4, color=colour, label=f"{name} (ECE {e:.2f} %)")
        top.fill_between(conf, acc, conf, color=colour, alpha=0.12)
        bottom.bar(lo + width / 2 + shift, count, width / len(series), color=colour, alpha=0.8)
    top.set_xlim(0, 1)
    top.set_ylim(0, 1.02)
    top.set_ylabel("share right")
    top.set_title(title or "Reliability", fontsize=11)
    # Lower right: confident answers that are mostly wrong, which no usable model has; the top
    # left holds the rare low-confidence bins that happen to be all right.
    top.legend(loc="lower right", fontsize=8, title="share right against mean confidence, per bin",
               title_fontsize=8)
    bottom.set_yscale("log")
    bottom.set_ylabel("answers")
    bottom.set_xlabel(f"top-class probability ({bins} equal bins)")
    return fig


def save_reliability_diagram(path, probs, labels, raw_probs=None, title: str = "") -> Path:
    """Write the diagram as a PNG at `path` (folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    reliability_figure(probs, labels, raw_probs, title).savefig(path, format="png")
    return path


def reliability_picture(probs, labels, raw_probs=None, title: str = "") -> np.ndarray:
    """The diagram as an RGB uint8 array (for a gr.Image)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = reliability_figure(probs, labels, raw_probs, title)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
