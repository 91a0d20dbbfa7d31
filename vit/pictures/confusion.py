"""The confusion matrix as a picture, and which cell a click on it lands in.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from vit.pictures.attention_maps import colorize, load_font

CELL, LEFT, TOP = 38, 92, 58          # cell side; room for row labels on the left, title on top


def confusion_picture(conf: np.ndarray, class_names: list[str],
                      selected: tuple[int, int] | None = None) -> np.ndarray:
    """(C, C) counts -> RGB picture: rows = true class, columns = predicted class, each cell
    labelled with its count. Right answers (the diagonal) are pale green; mistakes are shaded
    on their own scale, up to the largest mistake count, so that a cell of 2 stands out beside
    cells of 1,000. `selected` (true, pred) is outlined."""
    C = conf.shape[0]
    W, H = LEFT + C * CELL + 8, TOP + C * CELL + 8
    off = conf * (1 - np.eye(C, dtype=conf.dtype))
    colours = colorize(0.15 + 0.85 * off / max(int(off.max()), 1), 1.0, cmap="OrRd")   # (C, C, 3)
    colours[off == 0] = 255                                                   # no mistakes: white
    colours[np.eye(C, dtype=bool)] = (200, 235, 200)                          # right answers
    pix = np.full((H, W, 3), 255, np.uint8)
    pix[TOP:TOP + C * CELL, LEFT:LEFT + C * CELL] = np.repeat(np.repeat(colours, CELL, 0), CELL, 1)
    pix[TOP:TOP + C * CELL + 1:CELL, LEFT:LEFT + C * CELL] = 220               # cell borders
    pix[TOP:TOP + C * CELL, LEFT:LEFT + C * CELL + 1:CELL] = 220
    im = Image.fromarray(pix)
    draw = ImageDraw.Draw(im)
    small, font = load_font(11), load_font(12)
    draw.text((LEFT, 4), "predicted class", fill="black", font=font)
    draw.text((4, TOP - 16), "true class", fill="black", font=font)
    names = [" ".join(n.split()) for n in class_names]        # a line break measures as none
    short = [n if len(n) <= 6 else n[:5] + "…" for n in names]
    # Column names centred over their cells, on two staggered lines only when one is wider
    # than a cell; row names right-aligned against the grid; counts centred in their cells.
    stagger = any(draw.textlength(n, font=small) > CELL - 4 for n in short)
    for c in range(C):
        middle = c * CELL + CELL // 2
        draw.text((LEFT + middle, TOP - 6 - (12 if stagger and c % 2 == 0 else 0)), short[c],
                  fill="black", font=small, anchor="ms")
        draw.text((LEFT - 6, TOP + middle), names[c][:13], fill="black", font=small,
                  anchor="rm")
    dark = off > 0.6 * max(int(off.max()), 1)                  # dark cells get white text
    for t in range(C):
        for p in range(C):
            if conf[t, p]:
                draw.text((LEFT + p * CELL + CELL // 2, TOP + t * CELL + CELL // 2),
                          str(conf[t, p]), fill="white" if dark[t, p] else "black", font=small,
                          anchor="mm")
    if selected is not None:
        t, p = selected
        x, y = LEFT + p * CELL, TOP + t * CELL
        draw.rectangle([x, y, x + CELL, y + CELL], outline=(30, 110, 255), width=3)
    return np.asarray(im)


def cell_at(x: float, y: float, n_classes: int) -> tuple[int, int] | None:
    """(true, predicted) under pixel (x, y) of `confusion_picture`, or None off the matrix."""
    c, r = int((x - LEFT) // CELL), int((y - TOP) // CELL)
    if x < LEFT or y < TOP or not (0 <= r < n_classes and 0 <= c < n_classes):
        return None
    return r, c
