"""The logit lens as a picture: per layer, every patch token's probability of one class over the
image, on one fixed 0-to-1 scale (a probability means the same on every map, so none is stretched
to look sure), with what [CLS] would answer after that layer written under it."""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from vit.explain.logit_lens import LogitLens
from vit.pictures.attention_maps import _colorbar, heat_overlay, load_font
from vit.text import confidence

PER_ROW = 6          # maps per row: a 12-layer ViT-B/16 gets two rows
CAPTION = 32         # pixels under each map: two lines
GAP = 6


def _short(name: str, chars: int = 13) -> str:
    return name if len(name) <= chars else name[:chars - 1] + "…"


def lens_picture(img: np.ndarray, lens: LogitLens, target: int, class_names: list[str],
                 tile: int = 112) -> np.ndarray:
    """(H, W, 3) uint8: a map per layer of `target`'s probability from each patch token, captioned
    with [CLS]'s answer after that layer and its probability of `target`; a 0-1 colour bar marks
    chance (1 / classes)."""
    L = lens.depth
    per_row = min(L, PER_ROW)
    rows = -(-L // per_row)
    maps = [heat_overlay(img, lens.patches[i, :, :, target], 1.0, tile) for i in range(L)]
    side = maps[0].shape[0]
    width = per_row * side + (per_row - 1) * GAP
    canvas = Image.new("RGB", (width, rows * (side + CAPTION)), "white")
    draw = ImageDraw.Draw(canvas)
    font = load_font(11)
    for i, m in enumerate(maps):
        x, y = (i % per_row) * (side + GAP), (i // per_row) * (side + CAPTION)
        canvas.paste(Image.fromarray(m), (x, y))
        said = int(lens.cls[i].argmax())
        draw.text((x + 2, y + side + 2), f"after layer {i + 1}", fill="black", font=font)
        draw.text((x + 2, y + side + 16),
                  f"[CLS]: {_short(class_names[said])} ({confidence(lens.cls[i, said])})",
                  fill=(0, 90, 0) if said == target else "black", font=font)
    bar = _colorbar(width, 1.0, f"probability of {_short(class_names[target], 24)}, "
                                f"read from each patch token", uniform=1 / len(class_names))
    return np.concatenate([np.asarray(canvas), bar], axis=0)
