"""TrivialAugment (Müller & Hutter 2021, "TrivialAugment: Tuning-free Yet State-of-the-Art Data
Augmentation"), applied to a whole batch at once with a different operation per image.

torchvision.transforms.v2.TrivialAugmentWide draws one operation and strength per call, so a
batched tensor gets the same one for every image; calling it per image costs a Python round trip
per image. Here each image draws its own operation (uniformly among the 14 of the "wide" space)
and its own strength (one of 31 bins, with a random sign where the operation has one), as the
paper does per image, and each operation runs once on the images that drew it.

The ranges are torchvision's `TrivialAugmentWide` ones; the pixel operations follow
torchvision.transforms.v2.functional (blends clamp to [0, 1]; solarize, posterize and equalize on
8-bit levels). Like `Augment`, drawing (`draw`, from a seeded generator, for the whole global
batch) is apart from applying (`apply`, to this rank's rows), so runs resume exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

OPS = ("identity", "shear_x", "shear_y", "translate_x", "translate_y", "rotate", "brightness",
       "color", "contrast", "sharpness", "posterize", "solarize", "autocontrast", "equalize")
BINS = 31
SIGNED = {"shear_x", "shear_y", "translate_x", "translate_y", "rotate",
          "brightness", "color", "contrast", "sharpness"}
GEOMETRIC = ("shear_x", "shear_y", "translate_x", "translate_y", "rotate")


@dataclass
class Draw:
    """One batch's draws: op (B,) index into OPS; m (B,) signed strength in [-1, 1]."""
    op: torch.Tensor
    m: torch.Tensor

    def rows(self, index) -> Draw:
        return Draw(self.op[index], self.m[index])


def draw(batch: int, gen: torch.Generator) -> Draw:
    op = torch.randint(len(OPS), (batch,), generator=gen)
    level = torch.randint(BINS, (batch,), generator=gen).float() / (BINS - 1)     # 0, 1/30 .. 1
    flip = torch.rand(batch, generator=gen) < 0.5
    signed = torch.tensor([name in SIGNED for name in OPS])[op]
    return Draw(op, torch.where(flip & signed, -level, level))


def apply(x: torch.Tensor, d: Draw) -> torch.Tensor:
    """x: (B, C, S, S) in [0, 1] -> the same shape, each image through the operation it drew."""
    out = x.clone()
    op, m = d.op.to(x.device), d.m.to(x.device, x.dtype)
    for k, name in enumerate(OPS):
        rows = (op == k).nonzero().squeeze(1)
        if name == "identity" or len(rows) == 0:
            continue
        out[rows] = _OPS[name](x[rows], m[rows])
    return out


def _geometric(name: str, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """As torchvision's TrivialAugmentWide does them: shear (0.99 at full strength) about the
    top-left corner, translate by whole pixels (int(32 m): the whole side of a CIFAR image at full
    strength), rotate (135 degrees) about the centre; black outside, nearest pixel."""
    b = len(x)
    theta = torch.zeros(b, 2, 3, device=x.device, dtype=x.dtype)
    theta[:, 0, 0] = theta[:, 1, 1] = 1
    shift = torch.trunc(32 * m)                           # pixels, towards zero as int() does
    if name == "shear_x":                                 # x_in = x + s (y + 1): row 0 stays
        theta[:, 0, 1] = theta[:, 0, 2] = 0.99 * m
    elif name == "shear_y":
        theta[:, 1, 0] = theta[:, 1, 2] = 0.99 * m
    elif name == "translate_x":
        theta[:, 0, 2] = 2 * shift / x.shape[-1]          # grid coordinates span 2
    elif name == "translate_y":
        theta[:, 1, 2] = 2 * shift / x.shape[-2]
    else:
        a = m * math.radians(135)
        theta[:, 0, 0], theta[:, 0, 1] = a.cos(), -a.sin()
        theta[:, 1, 0], theta[:, 1, 1] = a.sin(), a.cos()
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)


def _blend(a: torch.Tensor, b: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """factor * a + (1 - factor) * b, per image; factor (B,)."""
    f = factor[:, None, None, None]
    return (f * a + (1 - f) * b).clamp(0, 1)


def _grey(x: torch.Tensor) -> torch.Tensor:
    """(B, C, S, S) -> (B, 1, S, S): ITU-R 601 luma for colour, the image itself for grey."""
    if x.shape[1] == 1:
        return x
    return (0.2989 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2])[:, None]


def _smooth(x: torch.Tensor) -> torch.Tensor:
    """PIL's SMOOTH kernel inside, the border pixels unchanged (as torchvision's sharpness)."""
    k = torch.tensor([[1.0, 1, 1], [1, 5, 1], [1, 1, 1]], device=x.device, dtype=x.dtype) / 13
    c = x.shape[1]
    inner = F.conv2d(x, k.expand(c, 1, 3, 3), groups=c)                 # (B, C, S-2, S-2)
    out = x.clone()
    out[:, :, 1:-1, 1:-1] = inner
    return out


def _levels(x: torch.Tensor) -> torch.Tensor:
    return (x * 255).round()


def _posterize(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Keep 8 bits at strength 0 down to 2 at full strength (torchvision: 8 - round(6 m))."""
    drop = 2.0 ** (6 * m).round()[:, None, None, None]                  # 2 ** bits dropped
    return (torch.div(_levels(x), drop, rounding_mode="floor") * drop) / 255


def _solarize(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Invert the levels at or above a threshold going from 255 (nothing) to 0 (everything)."""
    t = (255 * (1 - m))[:, None, None, None]              # unrounded, as torchvision
    v = _levels(x)
    return torch.where(v >= t, 255 - v, v) / 255


def _autocontrast(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Each channel stretched to the full range (a flat channel stays as it is)."""
    lo = x.amin((2, 3), keepdim=True)
    hi = x.amax((2, 3), keepdim=True)
    span = hi - lo
    return torch.where(span > 0, (x - lo) / span.clamp_min(1e-12), x).clamp(0, 1)


def _equalize(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    from torchvision.transforms.v2.functional import equalize
    return equalize(_levels(x).to(torch.uint8)).to(x.dtype) / 255


_OPS = {
    **{name: partial(_geometric, name) for name in GEOMETRIC},
    "brightness": lambda x, m: _blend(x, torch.zeros_like(x), 1 + 0.99 * m),
    "color": lambda x, m: _blend(x, _grey(x).expand_as(x), 1 + 0.99 * m),
    "contrast": lambda x, m: _blend(x, _grey(x).mean((1, 2, 3), keepdim=True).expand_as(x),
                                    1 + 0.99 * m),
    "sharpness": lambda x, m: _blend(x, _smooth(x), 1 + 0.99 * m),
    "posterize": _posterize,
    "solarize": _solarize,
    "autocontrast": _autocontrast,
    "equalize": _equalize,
}
