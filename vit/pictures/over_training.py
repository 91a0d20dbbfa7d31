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
    BAR_HEIGHT,
    VIVID,
    _bar_span,
    _colorbar,
    _fit_title,
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
               f"says {class_names[said][:12]} ({confidence(f.probs[said])})", fill="black", font=font)
        columns.append(np.asarray(col))
    h = max(c.shape[0] for c in columns)
    columns = [np.pad(c, ((0, h - c.shape[0]), (0, GAP), (0, 0)), constant_values=255) for c in columns]
    strip = np.concatenate(columns, axis=1)
    # A bar for each row, each its own line (both in one line were cut): the top row's rollout
    # on one scale for every column; the bottom row's fixed cosine scale (a trial found that
    # row's colours explained nowhere on the picture).
    bar = _colorbar(strip.shape[1], top, "top row: rollout, one scale for every column")
    return np.concatenate([strip, bar, _similarity_bar(strip.shape[1])], axis=0)


def _similarity_bar(width: int) -> np.ndarray:
    """The bottom row's scale: cosine similarity to the green patch's position, -1 to 1."""
    im = Image.new("RGB", (width, BAR_HEIGHT), "white")
    draw = ImageDraw.Draw(im)
    x0, x1 = _bar_span(width)
    ramp = colorize(np.linspace(-1.0, 1.0, x1 - x0), 1.0, -1.0, "RdBu_r")
    im.paste(Image.fromarray(np.ascontiguousarray(np.repeat(ramp[None], 12, 0))), (x0, 18))
    font = load_font(12)
    draw.text((8, 17), "-1", fill="black", font=font)        # (the picture font lacks U+2212)
    draw.text((x1 + 6, 17), "1", fill="black", font=font)
    xy, text, title_font = _fit_title(draw, "bottom row: position similarity to the green patch "
                                            "(cosine)", x0, width)
    draw.text(xy, text, fill="black", font=title_font)
    return np.asarray(im)
