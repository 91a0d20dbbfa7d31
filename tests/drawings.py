"""Seeded drawings for the tests, pure PIL + numpy: MNIST test digits redrawn as big canvas-style
drawings, and things that are not digits at all.

Everything is black ink on white, as a person draws on the app's canvas. The non-digits are made
here, independently of the trainer's own negatives (vit/data/negatives.py, deliberately not
imported): a test set built from the generator a model was trained on would only measure memory.
"""
from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from bench import realistic

# Letters that don't look like any digit (no O, I, l, S, Z, B, G, q, g, b…).
LETTERS = "AEFHKMNRWXYkmwx"
NON_DIGIT_KINDS = ("letter", "scribble", "dot", "dash", "two digits", "shape", "near-empty")


def _canvas(rng, lo: int = 400, hi: int = 800) -> tuple[Image.Image, int]:
    side = int(rng.integers(lo, hi + 1))
    return Image.new("L", (side, side), 255), side


def redraw(digit: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One 28x28 MNIST digit (white on black, uint8) -> a black-on-white canvas of 400-800 px,
    the digit upscaled to 25-80 % of the canvas height, somewhere off-centre, its strokes
    thickened or thinned a little at random (people draw with pens of every width)."""
    ys, xs = np.nonzero(digit > 30)
    crop = Image.fromarray(digit[ys.min():ys.max() + 1, xs.min():xs.max() + 1])
    im, side = _canvas(rng)
    scale = rng.uniform(0.25, 0.8) * side / crop.size[1]
    scale = min(scale, 0.95 * side / crop.size[0])
    # The pen's width is changed at 6x (cheap; the final upscale keeps the edges smooth): grown
    # by up to ~1 MNIST pixel, or thinned by up to ~1/3 of one.
    change = rng.choice(["none", "thicker", "thinner"], p=[0.4, 0.4, 0.2])
    if change != "none":
        k = 2 * int(rng.integers(1, 4 if change == "thicker" else 2)) + 1
        mid = crop.resize((crop.size[0] * 6, crop.size[1] * 6), Image.BILINEAR)
        mid = Image.fromarray(np.pad(np.asarray(mid), k))
        mid = mid.filter(ImageFilter.MaxFilter(k) if change == "thicker" else ImageFilter.MinFilter(k))
        box = mid.point(lambda v: 255 if v > 30 else 0).getbbox()
        if box:
            crop, scale = mid.crop(box), scale / 6
    w = max(1, min(side, round(crop.size[0] * scale)))
    h = max(1, min(side, round(crop.size[1] * scale)))
    big = np.asarray(crop.resize((w, h), Image.BILINEAR))
    y, x = int(rng.integers(0, side - h + 1)), int(rng.integers(0, side - w + 1))
    canvas = np.asarray(im).copy()
    canvas[y:y + h, x:x + w] = 255 - big
    return canvas


def redrawn_digits(images: np.ndarray, labels: np.ndarray, n: int, seed: int = 0):
    """n MNIST test digits redrawn as canvases: (list of uint8 arrays, labels (n,), indices)."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(images), n, replace=False)
    return [redraw(images[i], rng) for i in idx], np.asarray(labels)[idx], idx


# --- things that are not digits ----------------------------------------------------------------

_font = realistic.font


def _pen(rng, side: int) -> int:
    """A brush width like the app's (16 px on a 500-px canvas), varied."""
    return max(2, int(side * rng.uniform(0.015, 0.06)))


def _poly(draw, pts, width):
    draw.line(pts, fill=0, width=width, joint="curve")
    for x, y in (pts[0], pts[-1]):
        r = width / 2
        draw.ellipse([x - r, y - r, x + r, y + r], fill=0)


def letter(rng) -> np.ndarray:
    im, side = _canvas(rng)
    ch = LETTERS[int(rng.integers(len(LETTERS)))]
    size = int(side * rng.uniform(0.35, 0.75))
    glyph = Image.new("L", (2 * size, 2 * size), 0)
    d = ImageDraw.Draw(glyph)
    d.text((size // 2, size // 4), ch, fill=255, font=_font(size),
           stroke_width=int(rng.integers(0, max(1, size // 20) + 1)), stroke_fill=255)
    glyph = glyph.rotate(float(rng.uniform(-12, 12)), resample=Image.BILINEAR)
    box = glyph.getbbox()
    glyph = glyph.crop(box)
    w, h = glyph.size
    x, y = int(rng.integers(0, side - w + 1)), int(rng.integers(0, side - h + 1))
    im.paste(0, (x, y), glyph)
    return np.asarray(im)


def scribble(rng) -> np.ndarray:
    """A long random polyline (8-16 points) over a region of the canvas; one time in three,
    4-7 short squiggles scattered over it instead."""
    im, side = _canvas(rng)
    draw, pen = ImageDraw.Draw(im), _pen(rng, side)
    box = rng.uniform(0.4, 0.9) * side
    x0, y0 = rng.uniform(0, side - box, 2)
    if rng.uniform() < 2 / 3:
        pts = [(x0 + rng.uniform(0, box), y0 + rng.uniform(0, box))
               for _ in range(int(rng.integers(8, 17)))]
        _poly(draw, pts, pen)
    else:
        cells = rng.permutation(9)[:int(rng.integers(4, 8))]       # one squiggle per cell of 3x3
        for c in cells:
            cx, cy = x0 + (c % 3 + 0.5) * box / 3, y0 + (c // 3 + 0.5) * box / 3
            r = box / 9
            _poly(draw, [(cx + rng.uniform(-r, r), cy + rng.uniform(-r, r))
                         for _ in range(int(rng.integers(2, 5)))], pen)
    return np.asarray(im)


def dot(rng) -> np.ndarray:
    im, side = _canvas(rng)
    r = side * rng.uniform(0.01, 0.05)
    x, y = rng.uniform(r, side - r, 2)
    ImageDraw.Draw(im).ellipse([x - r, y - r, x + r, y + r], fill=0)
    return np.asarray(im)


def dash(rng) -> np.ndarray:
    """A short stroke within 15 degrees of horizontal."""
    im, side = _canvas(rng)
    length = side * rng.uniform(0.1, 0.5)
    a = math.radians(rng.uniform(-15, 15))
    cx, cy = rng.uniform(length / 2 + 10, side - length / 2 - 10), rng.uniform(0.1 * side, 0.9 * side)
    dx, dy = length / 2 * math.cos(a), length / 2 * math.sin(a)
    _poly(ImageDraw.Draw(im), [(cx - dx, cy - dy), (cx + dx, cy + dy)], _pen(rng, side))
    return np.asarray(im)


def two_digits(images: np.ndarray, rng) -> np.ndarray:
    """Two MNIST test digits side by side, a clear gap between them (a number, not a digit)."""
    im, side = _canvas(rng, 500, 800)
    i, j = rng.choice(len(images), 2, replace=False)
    crops = []
    for k in (i, j):
        a = images[k]
        ys, xs = np.nonzero(a > 30)
        crops.append(a[ys.min():ys.max() + 1, xs.min():xs.max() + 1])
    height = rng.uniform(0.25, 0.45) * side
    gap_share = rng.uniform(0.15, 0.5)                      # of the digits' height
    widths = sum(c.shape[1] / c.shape[0] for c in crops) + gap_share
    height = min(height, 0.95 * side / widths)              # both fit on the canvas
    parts = [Image.fromarray(c).resize((max(1, round(c.shape[1] * height / c.shape[0])),
                                        round(height)), Image.BILINEAR) for c in crops]
    gap = int(height * gap_share)
    total = parts[0].size[0] + gap + parts[1].size[0]
    x = int(rng.integers(0, max(1, side - total)))
    y = int(rng.integers(0, side - round(height) + 1))
    canvas = np.asarray(im).copy()
    for p in parts:
        w, h = p.size
        canvas[y:y + h, x:x + w] = np.minimum(canvas[y:y + h, x:x + w], 255 - np.asarray(p))
        x += w + gap
    return canvas


def _star(cx, cy, r, n=5):
    return [(cx + (r if k % 2 == 0 else 0.45 * r) * math.cos(math.pi * k / n - math.pi / 2),
             cy + (r if k % 2 == 0 else 0.45 * r) * math.sin(math.pi * k / n - math.pi / 2))
            for k in range(2 * n + 1)]


def _heart(cx, cy, r):
    return [(cx + r * 16 * math.sin(t) ** 3 / 17,
             cy - r * (13 * math.cos(t) - 5 * math.cos(2 * t) - 2 * math.cos(3 * t) - math.cos(4 * t)) / 17)
            for t in np.linspace(0, 2 * math.pi, 60)]


def shape(rng) -> np.ndarray:
    """A triangle, square, star, plus-cross or heart, outlined (no circles or ovals: those are 0s)."""
    im, side = _canvas(rng)
    d = ImageDraw.Draw(im)
    r = side * rng.uniform(0.15, 0.35)
    cx, cy = rng.uniform(r + 5, side - r - 5, 2)
    w = _pen(rng, side)
    kind = ["triangle", "square", "star", "cross", "heart"][int(rng.integers(5))]
    if kind == "triangle":
        pts = [(cx + r * math.cos(a), cy + r * math.sin(a))
               for a in np.radians([-90, 30, 150, 270]) + rng.uniform(-0.2, 0.2)]
        _poly(d, pts, w)
    elif kind == "square":
        a = rng.uniform(-0.2, 0.2)
        pts = [(cx + r * math.cos(a + t), cy + r * math.sin(a + t))
               for t in np.radians([45, 135, 225, 315, 405])]
        _poly(d, pts, w)
    elif kind == "star":
        _poly(d, _star(cx, cy, r), w)
    elif kind == "cross":
        _poly(d, [(cx - r, cy), (cx + r, cy)], w)
        _poly(d, [(cx, cy - r), (cx, cy + r)], w)
    else:
        _poly(d, _heart(cx, cy, r), w)
    return np.asarray(im)


def near_empty(rng) -> np.ndarray:
    """A speck or a tiny scratch on a big canvas."""
    im, side = _canvas(rng)
    size = side * rng.uniform(0.005, 0.04)
    x, y = rng.uniform(0.05 * side, 0.95 * side, 2)
    pts = [(x + rng.uniform(-size, size), y + rng.uniform(-size, size))
           for _ in range(int(rng.integers(2, 4)))]
    _poly(ImageDraw.Draw(im), pts, max(1, int(side * rng.uniform(0.003, 0.012))))
    return np.asarray(im)


def non_digits(images: np.ndarray, per_kind: int = 40, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """per_kind drawings of each of NON_DIGIT_KINDS, as (kind, black-on-white uint8 canvas).
    `images`: MNIST test images (for two digits side by side)."""
    rng = np.random.default_rng(seed)
    make = {"letter": letter, "scribble": scribble, "dot": dot, "dash": dash,
            "two digits": lambda r: two_digits(images, r), "shape": shape, "near-empty": near_empty}
    return [(kind, make[kind](rng)) for kind in NON_DIGIT_KINDS for _ in range(per_kind)]
