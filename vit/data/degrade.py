"""What a picture loses on its way to the model, for training (`--degrade`): a low-resolution
scan enlarged (shrunk to 7-14 px, enlarged back: soft edges), few grey levels, blur, a contrast
stretched too far or not far enough, and sensor noise. Each training image is degraded with
probability `p`, at a random strength; a few ms a batch on a CPU.

The tests measure the models on pictures made another way (bench/realistic.py: PIL resizes
of dark-on-light pages, then the app's layout), so they measure what this teaches, not memory.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SMALLEST = 7                 # the low-resolution copy's side: 7 ... image_size // 2 pixels
LEVELS = (4, 8, 16, 32)      # grey levels kept, one of these


def degrade(x: torch.Tensor, p: float, gen: torch.Generator, total: int | None = None,
            mine=slice(None)) -> torch.Tensor:
    """x (B, C, S, S) in [0, 1] -> the same with each image degraded with probability p. The
    random numbers are drawn on the CPU from `gen` for the `total` images of the global batch
    (default: B), of which x holds the rows `mine`: every run, and every rank, draws the same."""
    B, C, S, _ = x.shape
    total = B if total is None else total
    draws = _draw(total, C, S, p, gen)
    pick, side, levels, blur, gain, noise, grain = (d[mine] for d in draws)
    if not pick.any():
        return x
    out = x.clone()
    for i in torch.nonzero(pick).flatten().tolist():
        img = x[i:i + 1]
        n = int(side[i])
        img = F.interpolate(F.interpolate(img, size=(n, n), mode="area"), size=(S, S),
                            mode="bilinear", align_corners=False)
        img = _blur(img, float(blur[i]))
        # The app stretches every input's contrast (its strongest ink -> 1): so does this, with
        # a random overshoot or shortfall of the stretch.
        img = (img * gain[i] / img.amax().clamp(min=0.05)).clamp(0, 1)
        img = (img + noise[i] * grain[i:i + 1].to(img.device)).clamp(0, 1)
        q = float(levels[i] - 1)
        out[i:i + 1] = torch.round(img * q) / q
    return out


def _draw(B: int, C: int, S: int, p: float, gen: torch.Generator):
    """Every random number of a batch's degradations, drawn whether an image is picked or not."""
    pick = torch.rand(B, generator=gen) < p
    side = torch.randint(SMALLEST, max(SMALLEST + 1, S // 2 + 1), (B,), generator=gen)
    levels = torch.tensor(LEVELS)[torch.randint(len(LEVELS), (B,), generator=gen)]
    blur = torch.rand(B, generator=gen) * 1.2                     # Gaussian sigma, 0-1.2 px
    gain = 0.8 + 0.5 * torch.rand(B, generator=gen)               # contrast 0.8-1.3x
    noise = 0.04 * torch.rand(B, generator=gen)
    grain = torch.randn(B, C, S, S, generator=gen)
    return pick, side, levels, blur, gain, noise, grain


def _blur(img: torch.Tensor, sigma: float) -> torch.Tensor:
    """A separable Gaussian blur of (1, C, S, S) (sigma < 0.3: unchanged)."""
    if sigma < 0.3:
        return img
    r = max(1, round(2.5 * sigma))
    t = torch.arange(-r, r + 1, dtype=img.dtype, device=img.device)
    k = torch.exp(-t ** 2 / (2 * sigma ** 2))
    k = k / k.sum()
    C = img.shape[1]
    img = F.conv2d(F.pad(img, (r, r, 0, 0), mode="replicate"), k.view(1, 1, 1, -1).repeat(C, 1, 1, 1),
                   groups=C)
    return F.conv2d(F.pad(img, (0, 0, r, r), mode="replicate"), k.view(1, 1, -1, 1).repeat(C, 1, 1, 1),
                    groups=C)
