"""A garment as a person draws it (`--filled`): the page's Fill tool turns an outline into one
flat silhouette, while Fashion-MNIST's garments are shaded photographs of cloth. A model shown
only the shading read the page's own filled trousers as a shirt (docs/reliability.md). Each
training image is shown, with probability `p`, as its silhouette: every pixel with ink becomes
full ink, the edge softened as the canvas's antialiasing softens it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

INK = 0.08          # the faintest pixel that counts as part of the garment (Fashion-MNIST's
                    # background is exactly 0; its darkest cloth is about 0.1)


def filled(x: torch.Tensor, p: float, gen: torch.Generator, total: int | None = None,
           mine=slice(None)) -> torch.Tensor:
    """x (B, C, S, S) in [0, 1], ink bright -> the same with each image made a flat silhouette
    with probability p. The draws are made on the CPU for the `total` images of the global batch
    (default: B), of which x holds the rows `mine`: every run, and every rank, draws the same."""
    total = x.shape[0] if total is None else total
    pick = (torch.rand(total, generator=gen) < p)[mine].to(x.device)
    if not pick.any():
        return x
    ink = (x.amax(1, keepdim=True) > INK).to(x.dtype)
    soft = F.avg_pool2d(F.pad(ink, (1, 1, 1, 1), mode="replicate"), 3, stride=1)
    flat = torch.maximum(soft, ink * 0.75).expand_as(x)   # inside the edge stays near full ink
    return torch.where(pick[:, None, None, None], flat, x)
