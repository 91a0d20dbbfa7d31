"""Attention over training as a filmstrip: a column per training snapshot, the last the finished
model. Top row: attention rollout into [CLS] over the input, on one scale for every column (the
same quantity, so a map that looks hotter is hotter). Bottom row: the chosen patch's
position-embedding similarity to every patch, on the fixed cosine scale -1 to 1. Under each
column, the answer then."""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from vit.explain.over_training import Frame
from vit.pictures.attention_maps import (
    VIVID,
    _colorbar,
    _mark,
    colorize,
    heat_overlay,
    load_font,
    uniform_level,
)
from vit.text import confidence

TITLE = 18
CAPTION = 18
GAP = 6


def _similarity_tile(sim: np.ndarray, patch: int, side: int) -> np.ndarray:
    G = sim.shape[0]
    cell = max(1, side // G)
    tile = np.repeat(np.repeat(colorize(sim, 1.0, -1.0, "RdBu_r"), cell, 0), cell, 1)
    tile = np.ascontiguousarray(tile)
    _mark(tile, patch, G)
    return tile


def filmstrip(img: np.ndarray, frames: list[Frame], patch: int, class_names: list[str],
              tile: int = 112, marked: int | None = None) -> np.ndarray:
    """(H, W, 3) uint8 for `frames` in training order; column `marked` framed (the slider's)."""
    # One scale for every column, reaching at least VIVID times the even spread (as the page's
    # attention maps do): a model that has not learned to look anywhere yet stays dark.
    top = max(max(float(f.rollout.max()) for f in frames), VIVID * uniform_level(frames[0].rollout.shape[0]))
    font = load_font(11)
    columns = []
    for j, f in enumerate(frames):
        heat = heat_overlay(img, f.rollout, top, tile)
        side = heat.shape[0]
        sim = _similarity_tile(f.position, patch, side)
        said = int(f.probs.argmax())
        col = Image.new("RGB", (side, TITLE + side + GAP + sim.shape[0] + CAPTION), "white")
        d = ImageDraw.Draw(col)
        if j == marked:
            d.rectangle([0, 0, side - 1, TITLE - 2], fill=(255, 225, 120))
        d.text((2, 3), f.name, fill="black", font=font)
        col.paste(Image.fromarray(heat), (0, TITLE))
        col.paste(Image.fromarray(sim), (0, TITLE + side + GAP))
        d.text((2, TITLE + side + GAP + sim.shape[0] + 3),
               f"says {class_names[said][:12]} {confidence(f.probs[said])}", fill="black", font=font)
        columns.append(np.asarray(col))
    h = max(c.shape[0] for c in columns)
    columns = [np.pad(c, ((0, h - c.shape[0]), (0, GAP), (0, 0)), constant_values=255) for c in columns]
    strip = np.concatenate(columns, axis=1)
    # The bar is the top row's (rollout, one scale for every column); the bottom row's fixed -1
    # to 1 is said beside the picture (vit/ui/training_panel.py): both in one line were cut.
    bar = _colorbar(strip.shape[1], top, "top row: rollout, one scale for every column")
    return np.concatenate([strip, bar], axis=0)
