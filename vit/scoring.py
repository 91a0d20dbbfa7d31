"""The one batched pass of a model over a set of images, and what is measured from it.

The trainer's test pass, `python -m vit.evaluate` and the app's test-set explorer all call
`predict_logits`, so they normalise, batch and score images the same way.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from vit.data.loading import normalize
from vit.model import batch_within


@torch.no_grad()
def predict_logits(model: torch.nn.Module, images: torch.Tensor, mean: Sequence[float],
                   std: Sequence[float], batch_size: int = 500,
                   progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """Logits (N, num_classes), float32 on the CPU, of `model` in eval mode over uint8 images
    (N, S, S) grey, or (N, S, S, C) / (N, C, S, S) with C = len(mean). `progress(done, total)` is
    called after each batch. The model's train/eval mode is left as it was."""
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, not {batch_size}")
    device = next(model.parameters()).device
    if hasattr(model, "cfg"):                   # a ViT: its batches within BATCH_BYTES
        batch_size = batch_within(model.cfg, batch_size)
    was_training = model.training
    model.eval()
    out = []
    try:
        for i in range(0, len(images), batch_size):
            x = normalize(images[i:i + batch_size], mean, std).to(device)   # (b, C, S, S)
            out.append(model(x).float().cpu())
            if progress is not None:
                progress(min(i + batch_size, len(images)), len(images))
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, model.cfg.num_classes)


def evaluate(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor,
             mean: Sequence[float], std: Sequence[float],
             batch_size: int = 500) -> tuple[float, float, torch.Tensor]:
    """(mean cross-entropy, accuracy, predictions (N,)) of `model` on images with labels (N,).
    An empty set (a data-parallel rank's share of a tiny test set) gives (0, 0, empty)."""
    return score(predict_logits(model, images, mean, std, batch_size), labels)


def score(logits: torch.Tensor, labels) -> tuple[float, float, torch.Tensor]:
    """(mean cross-entropy, accuracy, predictions (N,)) of logits (N, K) against labels (N,);
    an empty set gives (0, 0, empty)."""
    labels = torch.as_tensor(labels).long().cpu()
    n = max(len(labels), 1)
    loss = F.cross_entropy(logits, labels, reduction="sum").item() / n
    preds = logits.argmax(1)
    return loss, (preds == labels).sum().item() / n, preds


def confusion_matrix(labels, preds, classes: int) -> torch.Tensor:
    """(classes, classes) int64 counts: row = true class, column = predicted class. labels and
    preds: (N,) integer tensors or numpy arrays."""
    labels, preds = torch.as_tensor(labels).long(), torch.as_tensor(preds).long()
    flat = torch.bincount(labels * classes + preds, minlength=classes ** 2)   # (classes²,)
    return flat.reshape(classes, classes)
