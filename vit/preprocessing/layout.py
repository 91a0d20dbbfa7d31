"""Make any picture of a digit (or a garment) look like the data the model was trained on.

MNIST was made like this: the digit's ink was cropped to its bounding box, scaled to fit a 20x20
box keeping its aspect ratio (anti-aliased), and placed in a 28x28 image so that its centre of mass
sits at the centre. White ink on black. `to_model_image` repeats those steps for a drawing, a photo
or a scan. Fashion-MNIST instead fills the whole 28x28 frame and centres the bounding box, which
`style="objects"` does. A photo of paper first goes through vit/preprocessing/paper.py.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from vit.preprocessing.decode import WORK_SIDE, BlankInputError, _never_crashes, _to_array
from vit.preprocessing.paper import _photo_ink, _pil_resize, dilate
from vit.preprocessing.styles import DIGITS, Style, style_of

INK_THRESHOLD = 0.25         # fraction of the ink's contrast that counts as "ink" for the bounding box
RIM = 1                      # pixels kept around that box: the strokes' fainter edges...
RIM_OUT = 1 if RIM else 0    # ...which end as one pixel of the model's input, at any scale
MIN_CONTRAST = 0.08          # below this (on a 0..1 scale) the image is taken as blank


def _ink(a: np.ndarray) -> np.ndarray:
    """grey (H, W) or grey+alpha (H, W, 2) in [0, 1] -> ink (H, W): 0 background, 1 full ink."""
    if a.ndim == 3:
        grey, alpha = a[..., 0], a[..., 1]
        if alpha.min() < 0.99:
            # Transparency marks the background. Ink is the opaque part, dark or light:
            # whichever way the opaque pixels lean decides the polarity.
            opaque = alpha > 0.5
            dark = grey[opaque].mean() < 0.5 if opaque.any() else True
            return alpha * ((1 - grey) if dark else grey)
        a = grey
    # Background = the typical border pixel. Light background -> dark ink -> invert.
    b = max(1, min(a.shape) // 50)
    border = np.concatenate([a[:b].ravel(), a[-b:].ravel(), a[:, :b].ravel(), a[:, -b:].ravel()])
    bg = float(np.median(border))
    ink = (1 - a) if bg > 0.5 else a
    return ink


def _area_downscale(ink: np.ndarray, side: int = WORK_SIDE) -> np.ndarray:
    """Shrink (area average) so the longer side is at most `side`; smaller images pass through."""
    h, w = ink.shape
    if max(h, w) <= side:
        return ink
    s = side / max(h, w)
    size = (max(1, round(h * s)), max(1, round(w * s)))
    t = torch.from_numpy(np.ascontiguousarray(ink))[None, None]
    return F.interpolate(t, size=size, mode="area")[0, 0].numpy()


def _rescale(x: np.ndarray, scale: float) -> np.ndarray:
    """x, a box of ink inside a rim of RIM pixels, resized by exactly `scale` (bilinear,
    averaging when it shrinks), with the box's corner on a corner of an output pixel (as MNIST
    lays its 20-px boxes) and the rim one output pixel wide whatever the scale (an enlarged rim
    would spread a soft ramp around small ink). Rounding the output size instead would stretch
    the ink by up to half a pixel and shift it off the pixel grid."""
    k = RIM_OUT
    nh, nw = (max(1, math.ceil((n - 2 * RIM) * scale - 1e-6)) + 2 * k for n in x.shape)
    pad = math.ceil((k + 1) / scale) + 1                     # room for the source region
    start = pad + RIM - k / scale                            # of the region, in the padded x
    return np.clip(_pil_resize(np.pad(x, pad), (nh, nw),
                               (start, start, start + nw / scale, start + nh / scale)), 0, 1)


def _crop_to_ink(ink: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(crop, h, w): the bounding box (h, w) of the pixels that count as ink, cropped with a rim
    of RIM pixels around it (zeros where the image ends). The rim keeps the strokes' faint
    anti-aliased edges beyond the box: cutting them off changes a digit that is already laid out
    (every MNIST digit has such an edge) and cost the bundled model 0.12 point on its validation
    digits."""
    mask = ink > INK_THRESHOLD
    rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    if rows.size == 0:
        raise BlankInputError("The image looks blank: draw or upload a digit with some contrast.")
    padded = np.pad(ink, RIM)                  # index i of `ink` is i + RIM here
    crop = padded[rows[0]:rows[-1] + 1 + 2 * RIM, cols[0]:cols[-1] + 1 + 2 * RIM]
    return crop, int(rows[-1] - rows[0] + 1), int(cols[-1] - cols[0] + 1)


def _survive_shrink(ink: np.ndarray, f: float) -> np.ndarray:
    """Ink about to be shrunk by f < 1, with strokes thinner than 1/f pixels first thickened to
    that: averaged down, they would fade into a haze under INK_THRESHOLD (a 2-px pen on a
    4000-px picture read as blank, a 1000-px one as a grey square). Cropped to its new box."""
    width = _stroke_width(ink > INK_THRESHOLD)
    radius = math.ceil((1 / f - width) / 2)
    if width <= 0 or radius < 1:
        return ink
    grown, _, _ = _crop_to_ink(dilate(np.pad(ink, radius), radius))
    return grown[RIM:-RIM, RIM:-RIM] if RIM else grown


def _stroke_width(mask: np.ndarray) -> float:
    """Mean stroke width of a binary mask, ~ 2 * area / perimeter (exact for long strokes)."""
    area = mask.sum()
    edges = (np.abs(np.diff(mask.astype(np.int8), axis=0)).sum()
             + np.abs(np.diff(mask.astype(np.int8), axis=1)).sum())
    return 2.0 * area / max(1, edges)


def _morph(ink: np.ndarray, radius: int, grow: bool) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(ink, dtype=np.float32))[None, None]
    k = 2 * radius + 1
    out = F.max_pool2d(t if grow else -t, k, stride=1, padding=radius)
    return (out if grow else -out)[0, 0].numpy()


# MNIST digits have strokes ~1.3-3.9 px wide in their 20x20 box; drawings made with a thinner or
# thicker pen are brought to a typical width before the downscale.
STROKE_RANGE = (1.25, 4.2)   # MNIST test digits: 0.5th-99.5th percentile is 1.3-3.9
STROKE_TARGET = 2.2           # MNIST median
CONTRAST = (0.05, 0.8)
SOFT_SCALE = 0.5              # resizing by this factor or further (2x either way) softens an edge


def _sharpen(small: np.ndarray, scale: float) -> np.ndarray:
    """The anti-aliased downscale leaves strokes softer than MNIST's, whose cores saturate: the
    curve CONTRAST matches MNIST's share of pixels above 0.9 / 0.5 / 0.1 (measured on test
    digits). It undoes the softening of a resize, so it fades out as the scale nears 1: an input
    already at the model's scale (an MNIST digit) was not softened and keeps its levels."""
    strength = float(np.clip(abs(math.log(scale)) / math.log(1 / SOFT_SCALE), 0, 1))
    lo, hi = strength * CONTRAST[0], 1 - strength * (1 - CONTRAST[1])
    return np.clip((small - lo) / (hi - lo), 0, 1)


GRAIN_SPREAD = 3.0    # paper grain reaches this many robust deviations above the paper's level


def _drop_grain(ink: np.ndarray) -> np.ndarray:
    """Stretched ink with the paper's grain taken to 0: a scan's noise, an enlarged picture's few
    grey levels, which would otherwise lie as a grey box around the digit (MNIST's background is
    exactly 0). The grain's top is estimated from the paper (the pixels below INK_THRESHOLD):
    its median plus GRAIN_SPREAD robust deviations. On a clean drawing the paper is exactly 0
    and this changes nothing."""
    step = max(1, max(ink.shape) // 256)
    sample = ink[::step, ::step]
    paper = sample[sample < INK_THRESHOLD]
    if paper.size == 0:
        return ink
    level = float(np.median(paper))
    grain = level + GRAIN_SPREAD * 1.4826 * float(np.median(np.abs(paper - level)))
    if grain <= 0:
        return ink
    grain = min(grain, 0.5 * INK_THRESHOLD)
    return np.clip((ink - grain) / (1 - grain), 0, 1)


def contrast_range(ink: np.ndarray) -> tuple[float, float, float]:
    """(background, strongest ink, maximum) levels of an ink map: its 1st percentile, the 90th
    percentile of the pixels above INK_THRESHOLD of that range, and its maximum. Stretching
    background -> 0 and strongest ink -> 1 evens out paper tone and faint pencil."""
    step = max(1, max(ink.shape) // 256)        # percentiles of a subsample: same answer, 10x faster
    lo, hi = float(np.percentile(ink[::step, ::step], 1)), float(ink.max())
    strong = ink[ink > lo + INK_THRESHOLD * (hi - lo)]
    top = float(np.percentile(strong[::max(1, strong.size // 20000)], 90)) if strong.size else hi
    return lo, top, hi


@_never_crashes
def to_model_image(image, style: Style | str = DIGITS, size: int = 28) -> np.ndarray:
    """Any image -> float32 (size, size) in [0, 1], white ink on black, laid out like the training
    data: its `style` (vit/preprocessing/styles.py, or a style's name) says how — for DIGITS the
    ink fills a box of 20/28 of the side and is centred by mass, as in MNIST.

    `image`: a PIL image (any mode), a numpy array (H×W, H×W×3, H×W×4; uint8, uint16, float,
    bool), a file path, or a Gradio Sketchpad value dict. Raises PreprocessError (with a message
    for people) for missing, blank, unreadable or oversized input.
    """
    style = style_of(style)
    a = _to_array(image)
    box = max(1, round(size * style.box))
    # A photo of paper under uneven light: its ink, cropped at 5x the final digit box's detail.
    ink = _photo_ink(a, 5 * box) if style.paper else None
    if ink is None:
        ink = _area_downscale(_ink(a).astype(np.float32))
    lo, top, hi = contrast_range(ink)
    if hi - lo < MIN_CONTRAST:
        raise BlankInputError("The image looks blank: draw or upload a digit with some contrast.")
    # Stretch so that background -> 0 and the ink's strongest pixels -> 1 (paper tone, faint pencil).
    ink = np.clip((ink - lo) / max(top - lo, 1e-6), 0, 1)
    ink = _drop_grain(ink)
    ink, h, w = _crop_to_ink(ink)                   # (h, w): the ink's box, inside the rim
    if max(h, w) > 4 * box:
        # Work on the crop at 4x the final size: stroke analysis and morphology cost little
        # there and lose nothing that survives the final downscale. (The rim would end as a
        # quarter of a pixel: zeros stand in for it.)
        ink = _area_downscale(_survive_shrink(ink[RIM:RIM + h, RIM:RIM + w], 4 * box / max(h, w)),
                              4 * box)
        h, w = ink.shape
        ink = np.pad(ink, RIM)
    mask = ink > INK_THRESHOLD
    scale = box / max(h, w)
    if style.strokes:
        width = _stroke_width(mask) * scale                    # stroke width after the downscale
        if not STROKE_RANGE[0] <= width <= STROKE_RANGE[1]:
            # Thin pens grow to a typical width; thick ones only shrink to the top of MNIST's
            # range, since eroding a blobby drawing further eats its shape.
            goal = STROKE_TARGET if width < STROKE_RANGE[0] else STROKE_RANGE[1]
            radius = round(abs(goal - width) / 2 / scale)
            grow = width < STROKE_RANGE[0]
            if radius >= 1:
                changed = _morph(np.pad(ink, radius if grow else 0), radius, grow)
                # An "eroded" drawing that lost most of its ink was one stroke wide (a bold 1):
                # keep it as it was.
                if grow or changed.sum() > 0.35 * ink.sum():
                    ink, h, w = _crop_to_ink(changed)
                    scale = box / max(h, w)
    small = _rescale(ink, scale)
    nh, nw = small.shape
    if style.strokes:
        small = _sharpen(small, scale)
    out = np.zeros((3 * size, 3 * size), np.float32)           # room to shift without clipping
    if style.by_mass:
        total = small.sum()
        if total <= 0:
            raise BlankInputError("The image looks blank: draw or upload a digit with some contrast.")
        cy = (small.sum(1) * np.arange(nh)).sum() / total       # centre of mass, in pixels
        cx = (small.sum(0) * np.arange(nw)).sum() / total
        top_, left = round(size / 2 - cy), round(size / 2 - cx)     # mass centre -> frame centre
    else:       # the box (after the rim's pixel) centred: its size is h, w times the scale
        top_, left = (round(size / 2 - RIM_OUT - n * scale / 2) for n in (h, w))
    out[size + top_:size + top_ + nh, size + left:size + left + nw] = small
    return np.ascontiguousarray(out[size:2 * size, size:2 * size])


COMPACT_SIDE = 160    # a session's copy of its input: enough to lay it out again at 28-40 px


@_never_crashes
def compact(image, max_side: int = COMPACT_SIDE) -> np.ndarray:
    """A small copy of an input's ink to lay out again later (after a model switch): uint8 (H, W)
    with the longer side at most `max_side`, white ink on black. A 500x500 Sketchpad value holds
    2 MB of RGBA arrays; this is at most 25 KB, which matters because Gradio keeps a session's
    state for an hour after the visitor leaves. Raises PreprocessError."""
    ink = _area_downscale(_ink(_to_array(image)).astype(np.float32), max_side)
    return np.clip(ink * 255 + 0.5, 0, 255).astype(np.uint8)
