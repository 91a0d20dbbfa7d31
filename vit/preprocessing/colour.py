"""Colour pictures for colour models: the picture's centre square, resized (anti-aliased),
transparency flattened onto white.
"""
from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from vit.preprocessing.decode import (
    MAX_PIXELS,
    _from_array,
    _never_crashes,
    _shrink,
    _to_array,
    _too_big,
    open_image,
)


def on_white(image):
    """A PIL image of any mode -> RGB, its transparency flattened onto white (the page)."""
    rgba = image.convert("RGBA")
    flat = Image.new("RGB", rgba.size, "white")
    flat.paste(rgba, mask=rgba.getchannel("A"))
    return flat


@_never_crashes
def to_rgb_image(image, size: int) -> np.ndarray:
    """Any image -> float32 (size, size, 3) in [0, 1] for colour models: the picture's centre
    square, resized (anti-aliased). Transparency is flattened onto white. Raises PreprocessError."""
    if isinstance(image, dict) and isinstance(image.get("composite"), (bytes, str, os.PathLike)):
        image = image["composite"]          # a canvas or Sketchpad: its picture, colours kept
    if isinstance(image, (str, os.PathLike, bytes, bytearray)):
        with open_image(image) as im:
            return to_rgb_image(im.copy(), size)
    if (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3
            and image.shape[2] in (3, 4) and min(image.shape[:2]) > 0):
        return to_rgb_image(Image.fromarray(image), size)           # colour arrays keep colour
    if isinstance(image, Image.Image):
        w, h = image.size
        if w * h > MAX_PIXELS:
            raise _too_big(w, h)
        if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
            image = on_white(image)
        bands = [_shrink(b) for b in image.convert("RGB").split()]     # 8-bit, shrunk first
        a = np.stack([np.asarray(b, np.float32) for b in bands], axis=-1) / 255.0
    else:
        a = _from_array(np.asarray(image.detach().cpu() if torch.is_tensor(image) else image)
                        if not isinstance(image, dict) else _to_array(image))
        if a.ndim == 3:                                 # grey + alpha from _from_array
            a = a[..., 0]
        a = np.repeat(a[..., None], 3, axis=2)
    h, w = a.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    square = np.ascontiguousarray(a[top:top + side, left:left + side].transpose(2, 0, 1))
    t = torch.from_numpy(square)[None]                               # (1, 3, side, side)
    out = F.interpolate(t, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return out[0].permute(1, 2, 0).clamp_(0, 1).numpy()
