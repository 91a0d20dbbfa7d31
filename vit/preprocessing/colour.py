"""Colour pictures for colour models: the picture's centre square, resized (anti-aliased),
transparency flattened onto white, and a flat frame around it (a screenshot's margin, a print's
white border, a letterbox's bars) trimmed first.
"""
from __future__ import annotations

import os

import numpy as np
import torch
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


# A frame is rows and columns at the picture's edges that are one flat colour: each within
# FRAME_TOLERANCE of the edge's colour, but for FRAME_STRAY of its pixels (JPEG ringing, a logo).
# A photo's sky or a studio backdrop is never that flat, so a picture without a frame passes
# through untouched. At least FRAME_KEEP of each side is kept whatever the frame's size.
FRAME_TOLERANCE = 10 / 255
FRAME_STRAY = 0.02
FRAME_KEEP = 0.25


def trim_frame(a: np.ndarray) -> np.ndarray:
    """An (H, W, 3) picture in [0, 1] without the flat frame around it (see FRAME_TOLERANCE)."""
    h, w = a.shape[:2]
    if min(h, w) < 8:
        return a
    top, bottom, left, right = 0, h, 0, w
    for _ in range(2):        # a frame's colour is found on the edge, once more inside a bar
        edge = np.concatenate([a[top, left:right], a[bottom - 1, left:right],
                               a[top:bottom, left], a[top:bottom, right - 1]])
        colour = np.median(edge, axis=0)
        off = (np.abs(a - colour) > FRAME_TOLERANCE).any(axis=2)           # (H, W): not frame
        rows = off[:, left:right].mean(axis=1) > FRAME_STRAY
        cols = off[top:bottom].mean(axis=0) > FRAME_STRAY
        if not rows.any() or not cols.any():
            return a                                     # all one colour: nothing to trim to
        t, b = np.flatnonzero(rows)[[0, -1]]
        l, r = np.flatnonzero(cols)[[0, -1]]
        t, b = max(top, t), min(bottom, b + 1)
        l, r = max(left, l), min(right, r + 1)
        if (t, b, l, r) == (top, bottom, left, right):
            break
        top, bottom, left, right = t, b, l, r
    if bottom - top < FRAME_KEEP * h or right - left < FRAME_KEEP * w:
        return a
    return a[top:bottom, left:right]


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
    a = trim_frame(a)
    h, w = a.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    square = a[top:top + side, left:left + side]
    # Lanczos keeps the detail that an enlarged picture still holds: a CIFAR-10 test photo
    # enlarged 3-8x and brought back reads 1.6 points below the photo itself, 3.4 with bilinear
    # (1,000 test photos, bench/real_inputs.py).
    bands = [Image.fromarray(np.ascontiguousarray(square[..., c], np.float32), "F")
             .resize((size, size), Image.LANCZOS) for c in range(3)]
    return np.clip(np.stack([np.asarray(b) for b in bands], axis=-1), 0, 1).astype(np.float32)
