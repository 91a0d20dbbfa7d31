"""A digit read by a form reader at low resolution (`--coarse`), as UCI optdigits stores other
writers' digits: NIST's reader scaled each digit's box to the full height of a 32 x 32 square and
to a nearly fixed width (measured on optdigits' tune half: every digit's ink is 8 cells tall and
5 to 6 wide, where MNIST's ones are a third as wide as they are tall), kept it black and white,
and counted the ink of each 4 x 4 block: 8 x 8 cells of 17 grey levels. MNIST kept every digit's
own proportions, and the model had never seen a one as wide as that (docs/reliability.md, "Other
writers' ones").

Each training digit is shown this way with probability `p`: its box made WIDTH of its height
wide, its cells enlarged 3 to 16 times, blocky or smoothed (equally likely), and laid out by the
app's own layout (vit/preprocessing), as an upload of such a scan is. This teaches the process
such scans go through, not their writers: the held-out scans' writers stay unseen.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from vit.preprocessing.decode import PreprocessError
from vit.preprocessing.layout import to_model_image
from vit.preprocessing.styles import DIGITS

CELLS = 8          # optdigits' 8 x 8 cells of a 32 x 32 bitmap
INK = 0.1          # a pixel brighter than this is ink, for the box
FACTORS = (3, 17)  # a scan is enlarged 3 to 16 times before it is uploaded
WIDTH = (0.5, 0.8)  # the box's width, as a share of its height (optdigits: 0.5-0.75)


def coarse(x: torch.Tensor, p: float, gen: torch.Generator, total: int | None = None,
           mine=slice(None)) -> torch.Tensor:
    """x (B, 1, S, S) in [0, 1], ink bright -> the same with each image read coarsely with
    probability p. The draws are made on the CPU for the `total` images of the global batch
    (default: B), of which x holds the rows `mine`: every run, and every rank, draws the same."""
    total = x.shape[0] if total is None else total
    pick = (torch.rand(total, generator=gen) < p)[mine]
    smooth = (torch.rand(total, generator=gen) < 0.5)[mine]
    factor = torch.randint(*FACTORS, (total,), generator=gen)[mine]
    width = (WIDTH[0] + (WIDTH[1] - WIDTH[0]) * torch.rand(total, generator=gen))[mine]
    if not pick.any():
        return x
    out = x.clone()
    for i in torch.nonzero(pick).flatten().tolist():
        out[i, 0] = read_coarsely(x[i, 0], float(width[i]), int(factor[i]),
                                   bool(smooth[i]))
    return out


def cells(img: torch.Tensor, width: float) -> torch.Tensor | None:
    """One (S, S) digit -> its 8 x 8 cells in [0, 1] (the ink's share of each 4 x 4 block of its
    box scaled to 32 px tall and `width` x 32 wide, centred, made black and white), or None if
    it has no ink."""
    rows, cols = torch.nonzero(img > INK, as_tuple=True)
    if not len(rows):
        return None
    crop = img[rows.min():rows.max() + 1, cols.min():cols.max() + 1][None, None].float()
    side = 4 * CELLS
    w = max(1, round(side * width))
    box = F.interpolate(crop, size=(side, w), mode="bilinear", align_corners=False)
    square = torch.zeros(1, 1, side, side)
    square[..., (side - w) // 2:(side - w) // 2 + w] = box
    return F.avg_pool2d((square > 0.5).float(), 4)[0, 0]


def read_coarsely(img: torch.Tensor, width: float, factor: int, smooth: bool) -> torch.Tensor:
    """One (S, S) digit -> its cells (`cells`) uploaded as a scan (dark ink on white, enlarged `factor`
    times, blocky or smoothed) and laid out by the app's own layout; unchanged if it has no ink
    or the layout refuses it."""
    c = cells(img, width)
    if c is None:
        return img
    scan = Image.fromarray(np.uint8(np.round(255 - 255 * c.numpy())), "L")
    side = CELLS * factor
    scan = scan.resize((side, side), Image.BICUBIC if smooth else Image.NEAREST)
    try:
        laid = to_model_image(scan, DIGITS, img.shape[-1])
    except PreprocessError:
        return img
    return torch.from_numpy(laid).to(img.dtype).to(img.device)
