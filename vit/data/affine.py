"""Batched random-affine augmentation: one `grid_sample` for a whole batch, no per-image PIL work."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Augment:
    """Random affine per image, applied to a whole batch at once with one `grid_sample`.

    Digits tolerate small rotations, scalings, shifts and shears (people write that way);
    flips would turn a 2 into something else, so they are off by default. Clothes photographed
    upright are mirror-symmetric classes but are not written at a slant: each data set's spec
    (vit/data/specs.py) says which it trains with.
    """
    degrees: float = 10.0
    scale: tuple = (0.9, 1.1)
    shift: float = 2.0 / 28   # fraction of the image size
    shear: float = 0.15       # radians-ish, as a matrix entry
    flip: bool = False        # mirror left-right with probability 1/2
    # >0: the image side in pixels, and shifts are then whole pixels (-n..n, each equally likely,
    # n = shift * size: "pad and random crop"), so a shifted photo stays as sharp as the test
    # photos instead of being resampled between pixels (a blur the test set never has).
    size: int = 0
    # >0: each image is also made wider and shorter (or narrower and taller) by a factor up to
    # 1 + stretch, its area kept. Writers whose digits were normalised to fill a square (UCI
    # optdigits) send ones as wide as they are tall; MNIST kept each digit's own proportions.
    stretch: float = 0.0

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """x: (B, C, S, S) float with background 0 -> same shape, transformed."""
        return self.apply(x, self.draw(x.shape[0], gen))

    def draw(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        """Random transforms for `batch` images, as affine matrices theta (batch, 2, 3) mapping
        output coordinates to input ones. Drawn apart from `apply` so that data-parallel ranks can
        draw for the whole global batch and each apply only its own rows."""
        u = torch.rand(batch, 5, generator=gen) * 2 - 1                   # uniform in [-1, 1]
        ang = u[:, 0] * math.radians(self.degrees)
        lo, hi = self.scale
        s = lo + (u[:, 1] + 1) / 2 * (hi - lo)
        sh = u[:, 2] * self.shear
        tx, ty = u[:, 3] * self.shift * 2, u[:, 4] * self.shift * 2       # grid coords span 2
        if self.size:
            n = round(self.shift * self.size)
            whole = ((u[:, 3:5] + 1) / 2 * (2 * n + 1)).floor().clamp(max=2 * n) - n    # -n..n
            tx, ty = whole[:, 0] * 2 / self.size, whole[:, 1] * 2 / self.size
        cos, sin = torch.cos(ang) / s, torch.sin(ang) / s
        # [rotation/scale · shear | shift]
        theta = torch.stack([torch.stack([cos, -sin + cos * sh, tx], 1),
                             torch.stack([sin, cos + sin * sh, ty], 1)], 1)
        if self.flip:   # drawn after the rest, so flip-free draws stay what they always were
            mirror = torch.rand(batch, generator=gen) < 0.5
            theta[:, :, 0] = torch.where(mirror[:, None], -theta[:, :, 0], theta[:, :, 0])
        if self.stretch:  # also drawn last: output (x, y) is read from input (x / r, y * r)
            r = torch.exp((torch.rand(batch, generator=gen) * 2 - 1) * math.log1p(self.stretch))
            theta[:, :, 0] = theta[:, :, 0] / r[:, None]
            theta[:, :, 1] = theta[:, :, 1] * r[:, None]
        return theta

    @staticmethod
    def apply(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """x: (B, C, S, S), theta: (B, 2, 3) -> (B, C, S, S), resampled bilinearly."""
        grid = F.affine_grid(theta.to(x.device, x.dtype), list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def draw_erasing(batch: int, size: int, p: float, gen: torch.Generator) -> torch.Tensor:
    """Random erasing (Zhong et al. 2020), drawn for a batch: a (batch, 1, size, size) bool mask,
    True inside one rectangle per chosen image. Each image is chosen with probability p; its
    rectangle covers 2-25 % of the image with an aspect ratio between 0.3 and 3.3 (the paper's
    ranges), so a model can't lean on any one part of the object."""
    u = torch.rand(batch, 5, generator=gen)
    area = (0.02 + u[:, 0] * 0.23) * size * size
    aspect = torch.exp(math.log(0.3) + u[:, 1] * (math.log(3.3) - math.log(0.3)))
    h = (area * aspect).sqrt().round().clamp(1, size)
    w = (area / aspect).sqrt().round().clamp(1, size)
    top, left = (u[:, 2] * (size - h + 1)).floor(), (u[:, 3] * (size - w + 1)).floor()
    r = torch.arange(size, dtype=torch.float32)
    rows = (r >= top[:, None]) & (r < (top + h)[:, None])                  # (batch, size)
    cols = (r >= left[:, None]) & (r < (left + w)[:, None])
    chosen = u[:, 4] < p
    return (rows[:, :, None] & cols[:, None, :] & chosen[:, None, None])[:, None]


def erase(x: torch.Tensor, mask: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """x: (B, C, S, S) in [0, 1] -> the same with the masked pixels replaced by `noise`, uniform
    in [0, 1] (the paper's best filling: neither the background nor a colour the model could learn
    to skip)."""
    return torch.where(mask.to(x.device), noise.to(x.device, x.dtype), x)
