"""Does the picture look like anything the model was trained on? A model's softmax answers
"which of my classes?" even for noise, a flat colour or a word: the CIFAR-10 model read noise
as "frog" at 96 %. Its features tell better: the [CLS] token after the last block lies near
its class's training images for a photo of a class, and far from every class for the rest.

The measure is the Mahalanobis distance of that token to the nearest class mean, with one
covariance shared by the classes (Lee et al. 2018, "A Simple Unified Framework for Detecting
Out-of-Distribution Samples"). Means and covariance are fitted on the training images the
trainer trains on (its validation split held out); the threshold `far_above` is the distance
that only FAR_SHARE of the validation images exceed. Never the test set. Stored beside the
weights as `typical.safetensors`, the threshold and how it was fitted in config.json's
"calibration" (`python -m vit.fit_typical` adds them to a checkpoint).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

TYPICAL_FILE = "typical.safetensors"
FAR_SHARE = 0.01           # of validation images beyond `far_above` (answered "not one of these")
RIDGE = 1e-4               # added to the covariance's diagonal, relative to its mean variance


@dataclass(frozen=True)
class Typical:
    means: np.ndarray          # (classes, D) the classes' mean [CLS] token
    precision: np.ndarray      # (D, D) the inverse of their shared covariance

    def distance(self, features) -> np.ndarray:
        """[CLS] tokens (N, D) or (D,) -> the squared Mahalanobis distance of each to the
        nearest class mean, (N,) or a float."""
        f = np.asarray(features, np.float64)
        one = f.ndim == 1
        d = np.atleast_2d(f)[:, None, :] - self.means[None]                 # (N, C, D)
        out = np.einsum("ncd,de,nce->nc", d, self.precision, d).min(1)
        return float(out[0]) if one else out

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"means": torch.from_numpy(self.means).float(),
                "precision": torch.from_numpy(self.precision).float()}


def fit(features: np.ndarray, labels: np.ndarray, classes: int) -> Typical:
    """Class means and the shared covariance's inverse from training features (N, D)."""
    f, y = np.asarray(features, np.float64), np.asarray(labels)
    means = np.stack([f[y == k].mean(0) if (y == k).any() else f.mean(0) for k in range(classes)])
    centred = f - means[y]
    cov = centred.T @ centred / max(len(f) - classes, 1)
    cov += RIDGE * np.trace(cov) / len(cov) * np.eye(len(cov))
    return Typical(means, np.linalg.inv(cov))


def from_tensors(tensors: dict, classes: int, dim: int, where: str) -> Typical:
    """The stored tensors, checked: shapes (classes, dim) and (dim, dim), finite. Raises
    ValueError with a one-line message."""
    if set(tensors) != {"means", "precision"}:
        raise ValueError(f"{where}: expected tensors means and precision, found "
                         f"{', '.join(sorted(tensors)) or 'none'}")
    means, precision = (tensors[k].detach().double().numpy() for k in ("means", "precision"))
    if means.shape != (classes, dim) or precision.shape != (dim, dim):
        raise ValueError(f"{where}: means {means.shape} and precision {precision.shape} do not fit "
                         f"a model of {classes} classes and width {dim}")
    if not (np.isfinite(means).all() and np.isfinite(precision).all()):
        raise ValueError(f"{where}: NaN or infinite values")
    return Typical(means, precision)


@torch.no_grad()
def cls_features(model, images: torch.Tensor, mean, std, batch_size: int = 500) -> np.ndarray:
    """uint8 images (N, S, S) or (N, S, S, C), or floats in [0, 1] -> the model's [CLS] token
    after its last block (N, D)."""
    from vit.data.loading import normalize
    device = next(model.parameters()).device
    if hasattr(model, "cfg"):
        from vit.model import batch_within
        batch_size = batch_within(model.cfg, batch_size)
    out = []
    for i in range(0, len(images), batch_size):
        x = normalize(images[i:i + batch_size], mean, std).to(device)
        tokens, _ = model.forward_features(x)
        out.append(tokens[:, 0].float().cpu())
    return torch.cat(out).numpy() if out else np.zeros((0, model.cfg.dim), np.float32)
