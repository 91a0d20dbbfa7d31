"""A model's answers on its data set's test split: computed once, cached beside the checkpoint.

`load_results(checkpoint, data_dir)` returns every test image's class probabilities, calibrated
with the checkpoint's temperature (vit/explain/calibration.py). The first call runs the model over
the test set (seconds to a minute on a CPU) and writes `FOLDER/.cache/test-predictions.safetensors`
(the logits: a calibration fitted later changes the probabilities, not the cache); later calls
read it back in milliseconds. The cache records the SHA-256 of the weights file and of the test
data, so retraining the model (or pointing at other data) recomputes it instead of showing stale
answers.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vit.checkpoint import WEIGHTS
from vit.data.loading import DEFAULT_DATA_DIR, DataError, load_split
from vit.data.specs import builtin_spec
from vit.device import gpu_task, on_zero_gpu
from vit.explain.calibration import calibrated
from vit.scoring import confusion_matrix, predict_logits
from vit.settings import Settings
from vit.storage import StorageError, load_tensors, save_tensors
from vit.text import confidence

CACHE = Path(".cache") / "test-predictions.safetensors"
KINDS = ("mistakes", "least confident", "all")


@dataclass
class Results:
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
        return f"{verdict} {confidence(self.confidence[i])}"     # as the headline writes it


_predict_logits = gpu_task(predict_logits)     # marked for a ZeroGPU Space (vit/device.py)


def _sha256(*arrays: bytes) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(a)
    return h.hexdigest()


def load_results(checkpoint, data_dir, progress=None) -> Results:
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
    cache = own_cache(folder)
    t = config.temperature
    try:
        if cache is None:
            raise StorageError("no cache of its own here")
        # Its shape and size checked before it is read: a cache is a file anyone who could
        # write the folder may have made.
        stored = load_tensors(cache, shapes={"logits": (len(labels), len(names)), "key": None},
                              most_bytes=4 * len(labels) * len(names) + 1_000_000)
        meta = json.loads(stored["key"].numpy().tobytes().decode())
        if meta == key:
            probs = calibrated(stored["logits"], t).numpy()
            return Results(dataset, names, images, labels, probs, True)
    except (StorageError, KeyError, ValueError):
        pass          # no cache, an outdated or damaged one, or none allowed here: recompute
    # On a ZeroGPU Space the pass runs in a worker process (vit/device.py): without a progress
    # bar, which lives in this one.
    logits = _predict_logits(model, split.images, config.mean, config.std, 500,
                             None if on_zero_gpu() else progress)
    try:
        key_bytes = torch.frombuffer(bytearray(json.dumps(key).encode()), dtype=torch.uint8)
        if cache is not None:
            save_tensors(cache, {"logits": logits, "key": key_bytes})
    except OSError:
        pass            # a read-only checkpoint folder: the answers still serve this process
    return Results(dataset, names, images, labels, calibrated(logits, t).numpy())


def own_cache(folder: Path) -> Path | None:
    """Where a checkpoint's test-set answers are cached (FOLDER/.cache/…), or None where that is
    not a plain folder of its own: a `.cache` link made the start-up work write outside it."""
    where = folder / CACHE
    try:
        inside = folder.resolve()
        for part in (where.parent, where):
            if part.is_symlink() or (part.exists() and not part.resolve().is_relative_to(inside)):
                return None
        if where.exists() and not where.is_file():
            return None
    except (OSError, RuntimeError):
        return None
    return where


# --- the confusion matrix as a clickable picture --------------------------------------------


def data_dir_for_app(settings: Settings | None = None) -> Path:
    """Where the app looks for test sets: $VIT_DATA_DIR, else the trainer's default `data/`."""
    given = settings.data_dir if settings else Settings.read("data_dir")
    return Path(given) if given else Path(__file__).resolve().parent.parent / DEFAULT_DATA_DIR
