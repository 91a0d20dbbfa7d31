"""A digit written with a thicker pen (`--thicken`): MNIST's strokes are 2-3 px wide at 28 px, a
felt pen or the page's thick brush sends 4-5 px, and a thick pen fills the small loop of a serif 6
or 9 until the model reads 8 (docs/reliability.md, the Hershey stroke fonts). Each training image
is shown, with probability `p`, with every stroke widened by one pixel on each side: a grey
dilation (the brightest pixel of each 3 x 3 neighbourhood), which keeps a stroke's own grey edge.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def thicken(x: torch.Tensor, p: float, gen: torch.Generator, total: int | None = None,
            mine=slice(None)) -> torch.Tensor:
    """x (B, C, S, S) in [0, 1], ink bright -> the same with each image's strokes widened with
    probability p. The draws are made on the CPU for the `total` images of the global batch
    (default: B), of which x holds the rows `mine`: every run, and every rank, draws the same."""
    total = x.shape[0] if total is None else total
    pick = (torch.rand(total, generator=gen) < p)[mine].to(x.device)
    if not pick.any():
        return x
    wide = F.max_pool2d(x, 3, stride=1, padding=1)
    return torch.where(pick[:, None, None, None], wide, x)
