"""Synthetic drawings that are not digits, for outlier exposure (Hendrycks et al. 2019).

The trainer shows the model these beside the digits and asks for a flat (uniform) answer on them,
so that a letter, a scribble, a dot, a dash, a shape or two digits side by side get a low top
probability, which the app reads as "not a digit" (vit/explain/calibration.py fits the threshold).

Each drawing is made the way a person would make it on the page's canvas (black pen on white, a
few hundred pixels, a pen of some width) and then laid out by `vit.preprocessing.layout.to_model_image`
itself: the model trains on exactly what the app would hand it for that drawing. Every drawing
comes from its own seed, so a bank is the same whatever order or process makes it.

The tests judge "not a digit" on drawings of their own (fonts, other shapes), not on these.
"""
from __future__ import annotations

import math
import os
import random
import sys

import numpy as np
import torch
from PIL import Image, ImageDraw

from vit.data.examples import render_digit
from vit.preprocessing.decode import PreprocessError
from vit.preprocessing.layout import to_model_image
from vit.preprocessing.styles import DIGITS, Style

# Capital letters as pen strokes in a unit box (y down), chosen not to look like digits.
LETTERS = {
    "A": [[(0, 1), (0.5, 0), (1, 1)], [(0.25, 0.55), (0.75, 0.55)]],
    "E": [[(1, 0), (0, 0), (0, 1), (1, 1)], [(0, 0.5), (0.7, 0.5)]],
    "F": [[(1, 0), (0, 0), (0, 1)], [(0, 0.5), (0.7, 0.5)]],
    "H": [[(0, 0), (0, 1)], [(1, 0), (1, 1)], [(0, 0.5), (1, 0.5)]],
    "K": [[(0, 0), (0, 1)], [(1, 0), (0, 0.55), (1, 1)]],
    "M": [[(0, 1), (0, 0), (0.5, 0.6), (1, 0), (1, 1)]],
    "N": [[(0, 1), (0, 0), (1, 1), (1, 0)]],
    "W": [[(0, 0), (0.25, 1), (0.5, 0.4), (0.75, 1), (1, 0)]],
    "X": [[(0, 0), (1, 1)], [(1, 0), (0, 1)]],
    "V": [[(0, 0), (0.5, 1), (1, 0)]],
    "#": [[(0.3, 0), (0.3, 1)], [(0.7, 0), (0.7, 1)], [(0, 0.3), (1, 0.3)], [(0, 0.7), (1, 0.7)]],
}
# Every kind this module draws. A data set's style names the ones its model is shown
# (`Style.outliers` in vit/preprocessing/styles.py: a digit is "none of these" to a clothing model).
KINDS = ("scribble", "dots", "dash", "shape", "letter", "two digits", "digit", "handwritten digit",
         "photo")
# The kinds drawn from real handwritten digits (make_bank's `digits`): left out without them.
FROM_DIGITS = ("two digits", "handwritten digit")
# The kinds made from real photographs (make_bank's `photos`: CIFAR-10's training images from the
# data directory): left out without them.
FROM_PHOTOS = ("photo",)


def _pen(rng: random.Random, side: int) -> int:
    return max(2, round(side * rng.uniform(0.02, 0.09)))


def _scribble(d: ImageDraw.ImageDraw, rng: random.Random, side: int) -> None:
    """A long wandering line: 14 to 26 steps with turns of up to ~100 degrees (shorter ones can
    pass for a 2 or a 9, and teaching the model to doubt those would teach it to doubt digits)."""
    x, y = rng.uniform(0.3, 0.7) * side, rng.uniform(0.3, 0.7) * side
    angle, pts = rng.uniform(0, 2 * math.pi), []
    for _ in range(rng.randint(14, 26)):
        pts.append((x, y))
        angle += rng.uniform(-1.8, 1.8)
        step = rng.uniform(0.08, 0.25) * side
        x = min(max(x + step * math.cos(angle), 0.05 * side), 0.95 * side)
        y = min(max(y + step * math.sin(angle), 0.05 * side), 0.95 * side)
    d.line(pts, fill=0, width=_pen(rng, side), joint="curve")


def _dots(d: ImageDraw.ImageDraw, rng: random.Random, side: int) -> None:
    """One dot, or a few scattered ones; sometimes a tiny tick (a near-empty mark)."""
    for _ in range(rng.choice([1, 1, 2, 3, 4])):
        x, y, r = rng.uniform(0.1, 0.9) * side, rng.uniform(0.1, 0.9) * side, _pen(rng, side)
        if rng.random() < 0.3:
            d.line([(x, y), (x + rng.uniform(-2, 2) * r, y + rng.uniform(-2, 2) * r)], fill=0,
                   width=r)
        else:
            d.ellipse([x - r, y - r, x + r, y + r], fill=0)


def _dash(d: ImageDraw.ImageDraw, rng: random.Random, side: int) -> None:
    """A flat stroke (or two: an equals sign), within 25 degrees of horizontal: a steeper one is a 1."""
    length, angle = rng.uniform(0.2, 0.8) * side, math.radians(rng.uniform(-25, 25))
    cx, cy, pen = rng.uniform(0.3, 0.7) * side, rng.uniform(0.3, 0.7) * side, _pen(rng, side)
    dx, dy = length / 2 * math.cos(angle), length / 2 * math.sin(angle)
    for off in ([0] if rng.random() < 0.7 else [-0.12 * side, 0.12 * side]):
        d.line([(cx - dx, cy - dy + off), (cx + dx, cy + dy + off)], fill=0, width=pen)


def _polygon(rng: random.Random, kind: str) -> list[tuple[float, float]]:
    if kind == "triangle":
        return [(0.5, 0.0), (1.0, 0.9), (0.0, 0.9)]
    if kind == "square":
        return [(0, 0), (1, 0), (1, rng.uniform(0.5, 1)), (0, rng.uniform(0.5, 1))]
    if kind == "star":
        return [(0.5 + (0.5 if i % 2 == 0 else 0.2) * math.sin(i * math.pi / 5),
                 0.5 - (0.5 if i % 2 == 0 else 0.2) * math.cos(i * math.pi / 5)) for i in range(10)]
    # a cross / plus, as an outline
    a, b = 0.35, 0.65
    return [(a, 0), (b, 0), (b, a), (1, a), (1, b), (b, b), (b, 1), (a, 1), (a, b), (0, b), (0, a), (a, a)]


def _place(points, rng: random.Random, side: int, jitter: float = 0.0):
    """Unit-box points -> canvas points: random size, position, rotation and a little wobble."""
    size = rng.uniform(0.35, 0.8) * side
    ox, oy = rng.uniform(0.05, 0.95 - size / side) * side, rng.uniform(0.05, 0.95 - size / side) * side
    rot = math.radians(rng.uniform(-15, 15))
    c, s = math.cos(rot), math.sin(rot)
    out = []
    for x, y in points:
        x, y = x + rng.uniform(-jitter, jitter) - 0.5, y + rng.uniform(-jitter, jitter) - 0.5
        out.append((ox + size * (0.5 + c * x - s * y), oy + size * (0.5 + s * x + c * y)))
    return out


def _shape(d: ImageDraw.ImageDraw, rng: random.Random, side: int) -> None:
    pts = _place(_polygon(rng, rng.choice(["triangle", "square", "star", "cross"])), rng, side, 0.04)
    if rng.random() < 0.2:
        d.polygon(pts, fill=0)
    else:
        d.line(pts + pts[:1], fill=0, width=_pen(rng, side), joint="curve")


def _letter(d: ImageDraw.ImageDraw, rng: random.Random, side: int) -> None:
    strokes = LETTERS[rng.choice(sorted(LETTERS))]
    pen = _pen(rng, side)
    # One placement for the whole letter (its strokes must meet), drawn stroke by stroke.
    flat = [p for stroke in strokes for p in stroke]
    placed = iter(_place(flat, rng, side, 0.05))
    for stroke in strokes:
        d.line([next(placed) for _ in stroke], fill=0, width=pen, joint="curve")


def _two_digits(im: Image.Image, rng: random.Random, side: int, digits: np.ndarray) -> None:
    """Two training digits side by side with a gap: the model reads one digit at a time."""
    h = round(side * rng.uniform(0.3, 0.5))
    gap = round(h * rng.uniform(0.1, 0.5))
    x = round(rng.uniform(0.02, 0.98) * max(1, side - 2 * h - gap))
    y = round(rng.uniform(0.05, 0.95) * (side - h))
    for _ in range(2):
        digit = Image.fromarray(255 - digits[rng.randrange(len(digits))]).resize((h, h), Image.BILINEAR)
        im.paste(Image.fromarray(np.minimum(np.array(im.crop((x, y, x + h, y + h))),
                                            np.array(digit))), (x, y))
        x += h + gap - round(h * 0.25)      # MNIST digits have a 4-px margin each side


def _digit(im: Image.Image, rng: random.Random, side: int) -> None:
    """One pen-stroke digit, anywhere, of any size: not a garment (for a clothing model)."""
    h = round(side * rng.uniform(0.4, 0.9))
    digit = render_digit(str(rng.randrange(10)), h, width=max(2, round(h * rng.uniform(0.05, 0.12))),
                         angle=rng.uniform(-20, 20))
    im.paste(digit, (rng.randrange(side - h + 1), rng.randrange(side - h + 1)))


def _handwritten(im: Image.Image, rng: random.Random, side: int, digits: np.ndarray) -> None:
    """One real handwritten digit, anywhere, of any size and slant: not a garment. Pen-drawn
    digits alone (`_digit`) taught a clothing model to refuse those, not other people's."""
    h = round(side * rng.uniform(0.4, 0.9))
    ink = Image.fromarray(255 - digits[rng.randrange(len(digits))]).resize((h, h), Image.BILINEAR)
    ink = ink.rotate(rng.uniform(-20, 20), resample=Image.BILINEAR, fillcolor=255)
    x, y = rng.randrange(side - h + 1), rng.randrange(side - h + 1)
    im.paste(Image.fromarray(np.minimum(np.array(im.crop((x, y, x + h, y + h))), np.array(ink))), (x, y))


def _photo(im: Image.Image, rng: random.Random, side: int, photos: np.ndarray) -> None:
    """A real photograph (a scene, an animal, a vehicle), as a person would upload one: in grey,
    filling the picture or set in a margin as on a screenshot, of any brightness and contrast.
    A digit model answered "9 (95.6 %)" for a face: it had only ever been shown drawings."""
    rgb = photos[rng.randrange(len(photos))].astype(np.float32)
    w = np.array([rng.uniform(0.2, 1.0) for _ in range(3)], np.float32)
    grey = rgb @ (w / w.sum())
    lo, hi = rng.uniform(0, 60), rng.uniform(180, 255)
    grey = lo + (grey - grey.min()) / max(float(np.ptp(grey)), 1.0) * (hi - lo)
    h = side if rng.random() < 0.6 else round(side * rng.uniform(0.5, 0.95))
    pic = Image.fromarray(np.uint8(np.clip(grey, 0, 255))).resize((h, h), Image.BICUBIC)
    im.paste(pic, (rng.randrange(side - h + 1), rng.randrange(side - h + 1)))


def draw(seed, digits: np.ndarray | None = None, kinds=DIGITS.outliers,
         photos: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """One drawing of one of `kinds` (of KINDS) on a canvas (uint8 (side, side), black on white)
    and its kind. The kinds in FROM_DIGITS need `digits`, those in FROM_PHOTOS `photos`
    (uint8 (N, H, W, 3))."""
    rng = random.Random(seed)
    kinds = [k for k in kinds if (k not in FROM_DIGITS or (digits is not None and len(digits)))
             and (k not in FROM_PHOTOS or (photos is not None and len(photos)))]
    kind = rng.choice(kinds)
    side = rng.randint(200, 500)
    im = Image.new("L", (side, side), 255)
    d = ImageDraw.Draw(im)
    if kind == "two digits":
        _two_digits(im, rng, side, digits)
    elif kind == "digit":
        _digit(im, rng, side)
    elif kind == "handwritten digit":
        _handwritten(im, rng, side, digits)
    elif kind == "photo":
        _photo(im, rng, side, photos)
    elif kind in KINDS:
        {"scribble": _scribble, "dots": _dots, "dash": _dash, "shape": _shape,
         "letter": _letter}[kind](d, rng, side)
    else:
        raise ValueError(f"unknown kind {kind!r}: choose among {', '.join(KINDS)}")
    return np.array(im), kind


# Drawing is pure Python and PIL, one core each: a bank of 21,000 took 195 s on one core here.
# Worker processes share the inputs by fork (nothing is pickled but the indices and the results).
_WORK: dict = {}
SERIAL_BELOW = 512          # smaller banks are drawn in this process: a pool costs more than it saves


def _drawn(i: int) -> np.ndarray:
    """Drawing i of the bank `_WORK` describes, laid out (uint8 (size, size)); black if ten
    tries were all too faint to lay out."""
    w = _WORK
    for attempt in range(10):       # a mark too faint to lay out is drawn again
        # str seeds: hashed by sha512, so neighbouring seeds draw unrelated pictures
        canvas, _ = draw(f"{w['seed']}-{i}-{attempt}", w["pool"], w["kinds"], w["photos"])
        try:
            img = to_model_image(canvas, w["style"], w["size"])
        except PreprocessError:
            continue
        return np.round(img * 255).astype(np.uint8)
    return np.zeros((w["size"], w["size"]), np.uint8)


def _worker_start() -> None:
    """A drawing process dies when the pool ends it: the trainer's own SIGTERM/SIGINT handlers
    (save a resumable state) are for the trainer, not its helpers."""
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def workers(n: int) -> int:
    """Processes to draw n drawings with: the cores this process may use, 1 for a small bank or
    where processes cannot be forked."""
    import multiprocessing
    if n < SERIAL_BELOW or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, 16))


def make_bank(n: int, seed: int, digits: torch.Tensor | None = None, size: int = 28,
              desc: str | None = None, style: Style = DIGITS, kinds=None,
              photos: np.ndarray | None = None) -> torch.Tensor:
    """n drawings of none of a data set's classes, of `kinds` (default: those its `style` names,
    `outliers`), laid out as the app lays out a drawing in that style: uint8 (n, size, size). `digits`
    (uint8 (N, 28, 28) handwritten digits, white on black) feed the kinds in FROM_DIGITS, `photos`
    (uint8 (N, H, W, 3)) those in FROM_PHOTOS. `desc`: a progress bar's title (on a terminal).
    Drawn by several processes where there are cores: the same bank either way."""
    import multiprocessing

    from tqdm import tqdm
    _WORK.update(seed=seed, pool=None if digits is None else digits.cpu().numpy(),
                 kinds=kinds or style.outliers, photos=photos, style=style, size=size)
    out = torch.zeros(n, size, size, dtype=torch.uint8)
    bar = tqdm(total=n, desc=desc, leave=False, dynamic_ncols=True, disable=None if desc else True,
               file=sys.stderr)
    try:
        procs = workers(n)
        if procs == 1:
            rows = map(_drawn, range(n))
            for i, row in enumerate(rows):
                out[i] = torch.from_numpy(row)
                bar.update()
        else:
            with multiprocessing.get_context("fork").Pool(procs, _worker_start) as pool:
                for i, row in enumerate(pool.imap(_drawn, range(n), chunksize=64)):
                    out[i] = torch.from_numpy(row)
                    bar.update()
    finally:
        bar.close()
        _WORK.clear()
    return out
