"""A model's answers on its data set's test split: computed once, cached beside the checkpoint.

`load_results(checkpoint, data_dir)` returns every test image's class probabilities, calibrated
with the checkpoint's temperature (vit/calibration.py). The first call runs the model over the
test set (seconds to a minute on a CPU) and writes `FOLDER/.cache/test-predictions.safetensors`
(the logits: a calibration fitted later changes the probabilities, not the cache); later calls
read it back in milliseconds. The cache records the SHA-256 of the weights file and of the test
data, so retraining the model (or pointing at other data) recomputes it instead of showing stale
answers.

The selection helpers and `confusion_picture` are pure functions over the results, for the app's
test-set explorer and for tests.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

from .calibration import calibrated
from .checkpoint import WEIGHTS, CheckpointError, load_tensors, save_tensors
from .data import DEFAULT_DATA_DIR, DataError, load_split
from .datasets import builtin_spec
from .evaluation import confusion_matrix, predict_logits
from .explain import colorize, load_font

CACHE = Path(".cache") / "test-predictions.safetensors"
KINDS = ("mistakes", "least confident", "all")


@dataclass
class Answers:
    dataset: str
    class_names: list[str]
    images: np.ndarray         # (N, 28, 28) uint8, as stored in the data set
    labels: np.ndarray         # (N,) int64
    probs: np.ndarray          # (N, C) float32, softmax(logits / the checkpoint's temperature)
    from_cache: bool = False

    @property
    def preds(self) -> np.ndarray:
        return self.probs.argmax(1)

    @property
    def confidence(self) -> np.ndarray:
        """Probability of the predicted class, per image."""
        return self.probs.max(1)

    @property
    def accuracy(self) -> float:
        return float((self.preds == self.labels).mean())

    def confusion(self) -> np.ndarray:
        """(C, C) counts: rows = true class, columns = predicted class."""
        return confusion_matrix(self.labels, self.preds, len(self.class_names)).numpy()

    def select(self, kind: str = "mistakes", true: int | None = None, pred: int | None = None,
               limit: int | None = None) -> np.ndarray:
        """Indices of test images, most interesting first.

        mistakes: wrong answers, the most confidently wrong first; least confident: all answers
        by ascending confidence; all: in data-set order. `true`/`pred` keep one class only."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        keep = np.ones(len(self.labels), bool)
        if kind == "mistakes":
            keep &= self.preds != self.labels
        if true is not None:
            keep &= self.labels == true
        if pred is not None:
            keep &= self.preds == pred
        idx = np.flatnonzero(keep)
        if kind == "mistakes":
            idx = idx[np.argsort(-self.confidence[idx], kind="stable")]
        elif kind == "least confident":
            idx = idx[np.argsort(self.confidence[idx], kind="stable")]
        return idx if limit is None else idx[:limit]

    def caption(self, i: int) -> str:
        t, p = self.labels[i], self.preds[i]
        names = self.class_names
        verdict = f"{names[p]} ✓" if t == p else f"{names[t]}→{names[p]}"
        return f"{verdict} {100 * self.confidence[i]:.0f}%"


def _sha256(*arrays: bytes) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(a)
    return h.hexdigest()


def load_results(checkpoint, data_dir, progress=None) -> Answers:
    """The model's answers on the test split of its data set, from the cache when it is current.
    Raises DataError when the test split is not in `data_dir`."""
    folder, model, config = Path(checkpoint.folder), checkpoint.model, checkpoint.config
    dataset = config.dataset or "mnist"
    if builtin_spec(dataset) is None:
        raise DataError(f"this model was trained on {dataset!r}, which has no test set here")
    split = load_split(dataset, data_dir, train=False, download=False)
    images, labels = split.images.numpy(), split.labels.numpy()
    key = {"weights_sha256": _sha256((folder / WEIGHTS).read_bytes()),
           "data_sha256": _sha256(images.tobytes(), labels.tobytes())}
    names = list(config.class_names)
    cache = folder / CACHE
    t = config.temperature
    try:
        stored = load_tensors(cache)
        meta = json.loads(stored["key"].numpy().tobytes().decode())
        # (A cache from before calibration holds "probs", not "logits": recomputed.)
        if meta == key and stored["logits"].shape == (len(labels), len(names)):
            probs = calibrated(stored["logits"], t).numpy()
            return Answers(dataset, names, images, labels, probs, True)
    except (CheckpointError, KeyError, ValueError):
        pass                                 # no cache, or an outdated or damaged one: recompute
    logits = predict_logits(model, split.images, config.mean, config.std, 500, progress)
    try:
        key_bytes = torch.frombuffer(bytearray(json.dumps(key).encode()), dtype=torch.uint8)
        save_tensors(cache, {"logits": logits, "key": key_bytes})
    except OSError:
        pass            # a read-only checkpoint folder: the answers still serve this process
    return Answers(dataset, names, images, labels, calibrated(logits, t).numpy())


# --- the confusion matrix as a clickable picture --------------------------------------------
CELL, LEFT, TOP = 38, 92, 58          # cell side; room for row labels on the left, title on top


def confusion_picture(conf: np.ndarray, class_names: list[str],
                      selected: tuple[int, int] | None = None) -> np.ndarray:
    """(C, C) counts -> RGB picture: rows = true class, columns = predicted class, each cell
    labelled with its count. Right answers (the diagonal) are pale green; mistakes are shaded
    on their own scale, up to the largest mistake count, so that a cell of 2 stands out beside
    cells of 1,000. `selected` (true, pred) is outlined."""
    C = conf.shape[0]
    W, H = LEFT + C * CELL + 8, TOP + C * CELL + 8
    off = conf * (1 - np.eye(C, dtype=conf.dtype))
    colours = colorize(0.15 + 0.85 * off / max(int(off.max()), 1), 1.0, cmap="OrRd")   # (C, C, 3)
    colours[off == 0] = 255                                                   # no mistakes: white
    colours[np.eye(C, dtype=bool)] = (200, 235, 200)                          # right answers
    pix = np.full((H, W, 3), 255, np.uint8)
    pix[TOP:TOP + C * CELL, LEFT:LEFT + C * CELL] = np.repeat(np.repeat(colours, CELL, 0), CELL, 1)
    pix[TOP:TOP + C * CELL + 1:CELL, LEFT:LEFT + C * CELL] = 220               # cell borders
    pix[TOP:TOP + C * CELL, LEFT:LEFT + C * CELL + 1:CELL] = 220
    im = Image.fromarray(pix)
    draw = ImageDraw.Draw(im)
    small, font = load_font(11), load_font(12)
    draw.text((LEFT, 4), "predicted class", fill="black", font=font)
    draw.text((4, TOP - 16), "true class", fill="black", font=font)
    short = [n if len(n) <= 6 else n[:5] + "…" for n in class_names]
    # Column names centred over their cells, on two staggered lines only when one is wider
    # than a cell; row names right-aligned against the grid; counts centred in their cells.
    stagger = any(draw.textlength(n, font=small) > CELL - 4 for n in short)
    for c in range(C):
        middle = c * CELL + CELL // 2
        draw.text((LEFT + middle, TOP - 6 - (12 if stagger and c % 2 == 0 else 0)), short[c],
                  fill="black", font=small, anchor="ms")
        draw.text((LEFT - 6, TOP + middle), class_names[c][:13], fill="black", font=small,
                  anchor="rm")
    dark = off > 0.6 * max(int(off.max()), 1)                  # dark cells get white text
    for t in range(C):
        for p in range(C):
            if conf[t, p]:
                draw.text((LEFT + p * CELL + CELL // 2, TOP + t * CELL + CELL // 2),
                          str(conf[t, p]), fill="white" if dark[t, p] else "black", font=small,
                          anchor="mm")
    if selected is not None:
        t, p = selected
        x, y = LEFT + p * CELL, TOP + t * CELL
        draw.rectangle([x, y, x + CELL, y + CELL], outline=(30, 110, 255), width=3)
    return np.asarray(im)


def cell_at(x: float, y: float, n_classes: int) -> tuple[int, int] | None:
    """(true, predicted) under pixel (x, y) of `confusion_picture`, or None off the matrix."""
    c, r = int((x - LEFT) // CELL), int((y - TOP) // CELL)
    if x < LEFT or y < TOP or not (0 <= r < n_classes and 0 <= c < n_classes):
        return None
    return r, c


def data_dir_for_app() -> Path:
    """Where the app looks for test sets: $VIT_DATA_DIR, else the trainer's default `data/`."""
    return Path(os.environ.get("VIT_DATA_DIR",
                               Path(__file__).resolve().parent.parent / DEFAULT_DATA_DIR))
