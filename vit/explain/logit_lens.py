"""A patch logit lens: what the classifier would answer from each layer's tokens.

After every block, each token (the [CLS] token and every patch's) is read by the model's own final
LayerNorm and classifier head, as if the network stopped there (nostalgebraist's "logit lens",
2020, applied to a ViT's tokens). The [CLS] row says at which depth the answer forms; the patch
maps say where in the image tokens already point at a class.

What it is not: the head was trained on the last layer's [CLS] token only. An early layer's
tokens live in another basis, so a flat or wrong early answer does not mean the information is
absent there (a "tuned lens", Belrose et al. 2023, fits one probe per layer for that reason), and a
patch that "answers 7" points in the direction of the head's 7 row, which is not the same as
causing the answer (the Why panel's deletion test measures that).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vit.explain.mechanism import embed
from vit.model import ViT


@dataclass(frozen=True)
class LogitLens:
    cls: np.ndarray          # (L, classes): probabilities from [CLS] after each block
    patches: np.ndarray      # (L, G, G, classes): the same from every patch token

    @property
    def depth(self) -> int:
        return len(self.cls)

    def forms_at(self, cls_index: int, share: float = 0.5) -> int | None:
        """The first block (counted from 1) after which [CLS] gives `cls_index` at least `share`
        of the probability and keeps it to the end; None if it never does."""
        above = self.cls[:, cls_index] >= share
        if not above[-1]:
            return None
        first = len(above)
        while first > 0 and above[first - 1]:
            first -= 1
        return first + 1


@torch.no_grad()
def logit_lens(model: ViT, x: torch.Tensor, temperature: float = 1.0) -> LogitLens:
    """`x`: one normalised image (1, C, S, S) -> the lens at every block, calibrated by the
    checkpoint's `temperature` as the real answer is. One forward pass, block by block (no hooks
    on the shared model: another request may run it at the same time); then every block's tokens
    go through the final norm and head at once."""
    t = embed(model, x)[1]
    caught = []
    for blk in model.blocks:
        t, _ = blk(t)
        caught.append(t[0])
    tokens = torch.stack(caught)                                 # (L, T, D)
    logits = model.head(model.norm(tokens)).float() / temperature  # (L, T, classes)
    probs = logits.softmax(-1).cpu().numpy()
    g = model.cfg.grid
    return LogitLens(cls=probs[:, 0], patches=probs[:, 1:].reshape(len(caught), g, g, -1))
