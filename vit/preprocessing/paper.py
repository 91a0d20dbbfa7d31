"""A digit written on paper and photographed under uneven light (a gradient, a shadow): the
paper's light divided out and only the digit's strokes kept (`_photo_ink`). Clean drawings and
scans never take this path. Also the small morphology kit it uses (dilate, closing, connected runs).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from vit.preprocessing.decode import WORK_SIDE, PreprocessError

# --- photos of digits on paper ------------------------------------------------------------------
# Photographed paper lies under uneven light: a gradient, a vignette, the shadow of a hand or of
# the phone. Taking "darker than the border" for ink then reads the shadow, not the digit. For
# such photos the paper's own brightness is estimated (a morphological closing, which removes
# every dark feature as thin as a stroke and keeps the light's slow changes and the shadows'
# edges) and divided out; ink is what stays clearly darker than its paper, and only the stroke
# components that form the digit are kept. Clean drawings never come here: their background is
# one exact grey level, or flat.
PHOTO_MIN_SIDE = 160         # smaller: icons, scans, drawings (too few pixels to tell light from ink)
PHOTO_SMALL = 128            # the paper's light and the strokes' scale are measured at this size
PHOTO_PARTS = 256            # the ink's connected components are found at this size
PHOTO_UNEVEN = 0.1           # paper whose brightness spans more than this (2nd-98th pct) is "uneven"
PHOTO_MIN_INK = 0.28         # ink is on average this much darker than its paper; shadows' edges are not
PHOTO_CUTS = (0.4, 0.55, 0.7)  # ink: darker than this share of the ink's contrast, strictest last
PHOTO_RADII = (1, 2, 3, 4, 6, 8, 11, 15, 20, 26)    # closing radii tried, in pixels at PHOTO_SMALL
NO_INK_IN_PHOTO = ("Couldn't find a dark digit on a lighter background in that photo: try more "
                   "light or a closer crop.")


def _run_max(x: np.ndarray, r: int, axis: int) -> np.ndarray:
    """Running maximum over windows of 2r+1 along `axis` (clipped at the edges): maxima over
    2, 4, 8... pixels by doubling, then two overlapping ones cover the window (log2 r steps,
    each one whole-array np.maximum)."""
    if r <= 0:
        return x
    x = np.moveaxis(x, axis, 0)
    n, length = x.shape[0], 2 * r + 1
    m = np.full((n + 2 * r,) + x.shape[1:], -np.inf, np.float32)
    m[r:r + n] = x
    span = 1
    while 2 * span <= length:
        m = np.maximum(m[:-span], m[span:])             # m[i] = max over [i, i + 2 span)
        span *= 2
    return np.moveaxis(np.maximum(m[:n], m[length - span:length - span + n]), 0, axis)


def dilate(x: np.ndarray, r: int) -> np.ndarray:
    """Grey dilation (running maximum) with a (2r+1)^2 square."""
    return _run_max(_run_max(x, r, 0), r, 1)


def _closing(x: np.ndarray, r: int) -> np.ndarray:
    """Grey closing with a (2r+1)^2 square: dark features narrower than the square vanish."""
    return -dilate(-dilate(x, r), r)


def _spread(x: np.ndarray) -> float:
    lo, hi = np.percentile(x, [2, 98])
    return float(hi - lo)


def connected_runs(mask: np.ndarray):
    """The 8-connected components of a boolean mask, as runs: row, start, end (exclusive) and a
    component label per run, plus the number of components. Union-find over runs, vectorised."""
    h, w = mask.shape
    padded = np.zeros((h, w + 2), np.int8)
    padded[:, 1:-1] = mask
    step = np.diff(padded, axis=1)
    rows, starts = np.nonzero(step == 1)
    ends = np.nonzero(step == -1)[1]
    n = rows.size
    if n == 0:
        return rows, starts, ends, np.zeros(0, np.int64), 0
    # Runs of the row above that touch run j (8-connected): start <= end_j and end >= start_j.
    # Keyed by row * (w + 2) + column, runs are sorted both by start and by end.
    first = np.searchsorted(rows, np.arange(h + 1))
    j = np.flatnonzero(rows > 0)
    above = rows[j] - 1
    lo = np.maximum(np.searchsorted(rows * (w + 2) + ends, above * (w + 2) + starts[j]), first[above])
    hi = np.minimum(np.searchsorted(rows * (w + 2) + starts, above * (w + 2) + ends[j], "right"),
                    first[above + 1])
    count = np.maximum(hi - lo, 0)
    a = np.repeat(j, count)
    b = np.repeat(lo, count) + np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    label = np.arange(n)
    while True:
        before = label.copy()
        low = np.minimum(label[a], label[b])
        np.minimum.at(label, label[a], low)         # hook each root to the smaller root
        np.minimum.at(label, label[b], low)
        while True:                                 # and flatten: every run points at its root
            root = label[label]
            if np.array_equal(root, label):
                break
            label = root
        if np.array_equal(label, before):
            break
    _, label = np.unique(label, return_inverse=True)
    return rows, starts, ends, label, int(label.max()) + 1


def _box3(x: np.ndarray) -> np.ndarray:
    """3x3 mean, edges repeated."""
    p = np.pad(x, 1, mode="edge")
    rows = p[:-2] + p[1:-1] + p[2:]
    return (rows[:, :-2] + rows[:, 1:-1] + rows[:, 2:]) / 9


def _pil_resize(x: np.ndarray, shape: tuple[int, int], box=None, area: bool = False) -> np.ndarray:
    """Float image resized by PIL (one thread, no pool to wait on): bilinear, or box-averaged
    (area) to shrink; `box` (left, top, right, bottom) in x's pixels picks the part resized."""
    im = Image.fromarray(np.ascontiguousarray(x, np.float32), "F")
    return np.asarray(im.resize((shape[1], shape[0]), Image.BOX if area else Image.BILINEAR, box=box))


def _shrink_to(x: np.ndarray, side: int) -> np.ndarray:
    """Box-averaged so that the longer side is at most `side`."""
    h, w = x.shape
    if max(h, w) <= side:
        return x
    s = side / max(h, w)
    return _pil_resize(x, (max(1, round(h * s)), max(1, round(w * s))), area=True)


def _uneven_paper(g: np.ndarray, small: np.ndarray, closed) -> bool:
    """Whether `g` (grey) looks like a photo of unevenly lit paper: neither most of it one exact
    grey level (a canvas, a clean scan), nor flat once its ink is taken away."""
    step = max(1, max(g.shape) // 256)
    levels = np.bincount(np.rint(g[::step, ::step] * 255).astype(np.int64).ravel(), minlength=256)
    if levels.max() > 0.3 * levels.sum():
        return False
    r = PHOTO_RADII[-3]                           # wider than strokes, narrower than the light
    dim = dilate(-dilate(-small, r), r)         # an opening: light strokes taken away
    # A white-on-black drawing keeps its strokes in the closing but loses them in the opening:
    # the opening's spread tells flat dark paper from uneven light.
    return _spread(closed(r)) >= PHOTO_UNEVEN and _spread(dim) >= PHOTO_UNEVEN


def _stroke_radius(small: np.ndarray, closed) -> int | None:
    """The closing radius that removes this photo's ink, from its granulometry: the area that a
    closing takes away grows fast with the radius while the closing does not yet fill whole
    strokes, then slowly (shadows and soft edges). The radius where it starts to grow slowly
    fills the strokes and keeps most of the shadows. None: no such radius (very bold strokes,
    or no strokes at all)."""
    areas = np.array([np.count_nonzero(small < 0.75 * closed(r)) for r in PHOTO_RADII])
    growth = areas[1:] / np.maximum(areas[:-1], 1)
    growth[areas[:-1] < max(16, small.size // 2000)] = np.inf      # too few pixels to be strokes
    slow = np.flatnonzero(growth <= 1.3)
    return PHOTO_RADII[slow[0] + 1] if slow.size else None


def _darkness(grey: np.ndarray, paper: np.ndarray) -> tuple[np.ndarray, float, float]:
    """How much darker than its paper each pixel of `grey` is: 0 on paper, ~0.6-0.9 on ink, in
    any light. `paper` is the paper's brightness over the same frame, at any size. Also the
    paper's level (the median reflectance) and its grain's noise."""
    paper = _pil_resize(_box3(paper), grey.shape)
    flat = grey / np.maximum(paper, 1e-3)             # the reflectance: ~1 on paper, ink well below
    bright = flat[flat >= 0.7 * np.percentile(flat, 90)]  # the paper (a bold digit may fill half)
    level = max(float(np.median(bright)), 1e-3)
    noise = 1.4826 * float(np.median(np.abs(bright / level - 1)))
    return 1 - flat / level, level, noise


def _parts(dark, mask, rows, starts, ends, label, n):
    """Each connected part's ink (summed darkness), mean darkness, and box (top, bottom, left,
    right, inclusive), from `connected_runs` of `mask`."""
    h, w = dark.shape
    csum = np.zeros((h, w + 1))
    csum[:, 1:] = np.cumsum(np.where(mask, dark, 0), axis=1)
    mass = np.bincount(label, csum[rows, ends] - csum[rows, starts], n)
    shade = mass / np.maximum(np.bincount(label, ends - starts, n), 1)
    top, bottom = np.full(n, h), np.zeros(n, np.int64)
    left, right = np.full(n, w), np.zeros(n, np.int64)
    np.minimum.at(top, label, rows)
    np.maximum.at(bottom, label, rows)
    np.minimum.at(left, label, starts)
    np.maximum.at(right, label, ends - 1)
    return mass, shade, (top, bottom, left, right)


@dataclass
class _Found:
    """The ink's parts in a photo, seen against one estimate of its paper (`_find_digit`)."""
    dark: np.ndarray           # darkness against the paper, PHOTO_PARTS a side
    level: float               # the paper's reflectance
    noise: float               # its grain
    floor: float               # darkness below this is grain
    contrast: float            # the ink's darkness (95th percentile of what is above the floor)
    rows: np.ndarray           # the parts' runs (connected_runs)
    starts: np.ndarray
    ends: np.ndarray
    label: np.ndarray
    mass: np.ndarray           # each part's ink, mean darkness and box (_parts)
    shade: np.ndarray
    box: tuple
    border: np.ndarray         # which parts touch the picture's edge
    main: int                  # the digit's part


def _find_digit(grey: np.ndarray, paper: np.ndarray) -> _Found:
    """The ink's components: the digit is the one with the most ink away from the border; with
    it go (later) the pieces near it and as dark (a 5's bar, a broken stroke), not specks,
    grain, or the shadows' edges that cross the picture. A shadow band as narrow as a stroke
    that crosses the digit joins it into one part touching the border: the ink is darker than
    the band, so a stricter cut parts them (PHOTO_CUTS). Raises PreprocessError without ink."""
    dark, level, noise = _darkness(grey, paper)
    h, w = dark.shape
    floor = max(0.08, 4 * noise)
    candidates = dark[dark > floor]
    if candidates.size == 0:
        raise PreprocessError(NO_INK_IN_PHOTO)
    contrast = float(np.percentile(candidates, 95))
    for cut in PHOTO_CUTS:
        mask = dark > max(floor, cut * contrast)
        rows, starts, ends, label, n = connected_runs(mask)
        if n == 0:
            raise PreprocessError(NO_INK_IN_PHOTO)
        mass, shade, box = _parts(dark, mask, rows, starts, ends, label, n)
        top, bottom, left, right = box
        border = (top == 0) | (left == 0) | (bottom == h - 1) | (right == w - 1)
        main = int(np.argmax(np.where(border, 0.1, 1.0) * mass))
        if not border[main]:
            break
    return _Found(dark, level, noise, floor, contrast, rows, starts, ends, label, mass, shade, box,
                  border, main)


def _paint(shape, rows, starts, ends, chosen) -> np.ndarray:
    """The boolean image of the chosen runs."""
    edges = np.zeros((shape[0], shape[1] + 1), np.int32)
    np.add.at(edges, (rows[chosen], starts[chosen]), 1)
    np.add.at(edges, (rows[chosen], ends[chosen]), -1)
    return np.cumsum(edges, axis=1)[:, :shape[1]] > 0


def _photo_ink(a: np.ndarray, detail: int = 100) -> np.ndarray | None:
    """A photo of a digit on unevenly lit paper -> the digit's ink (H, W) in [0, 1], the paper,
    its shadows and its specks at 0: a crop around the digit, at most `detail` pixels along the
    digit's longer side. None when `a` is not such a photo (a drawing, a scan, a transparent or
    a small image, or ink that reaches the edge: a tight crop). Raises PreprocessError when it is
    one but holds no plausible ink."""
    if a.ndim == 3:
        if a[..., 1].min() < 0.99:
            return None                               # transparency: a drawing, not a photo
        a = a[..., 0]
    if min(a.shape) < PHOTO_MIN_SIDE:
        return None
    g = _shrink_to(a.astype(np.float32), WORK_SIDE)
    small = _shrink_to(g, PHOTO_SMALL)
    cache: dict[int, np.ndarray] = {}

    def closed(r: int) -> np.ndarray:
        if r not in cache:
            cache[r] = _closing(small, r)
        return cache[r]

    if not _uneven_paper(g, small, closed):
        return None
    radius = _stroke_radius(small, closed) or max(2, round(0.06 * max(small.shape)))
    grey = _shrink_to(g, PHOTO_PARTS)
    found = _find_digit(grey, closed(radius))
    wide = round(0.16 * max(small.shape))
    if found.shade[found.main] < PHOTO_MIN_INK and wide > radius:
        # Strokes wider than the closing (a bold digit; a shadow band set the stroke scale): the
        # paper seen at a radius no stroke survives. Shadows' edges pass at that radius too, so
        # only a clearly dark part away from the edges counts.
        try:
            wider = _find_digit(grey, closed(wide))
        except PreprocessError:
            wider = found
        ink = wider.shade[wider.main]
        if ink >= max(PHOTO_MIN_INK, 2 * wider.floor) and not wider.border[wider.main]:
            found, radius = wider, wide
    dark, level, floor, contrast = found.dark, found.level, found.floor, found.contrast
    rows, starts, ends, label, main, border = (found.rows, found.starts, found.ends, found.label,
                                               found.main, found.border)
    mass, shade, (top, bottom, left, right) = found.mass, found.shade, found.box
    h, w = dark.shape
    side = max(bottom[main] - top[main], right[main] - left[main]) + 1
    if shade[main] < PHOTO_MIN_INK or side < 0.03 * max(h, w):
        raise PreprocessError(NO_INK_IN_PHOTO)
    if border[main] or shade[main] < 2 * floor:
        # Ink that reaches the picture's edge at every cut (a tight crop), or that is barely
        # darker than the paper's grain (an enlarged scan's few grey levels read as grain): not a
        # page with a digit on it. Its light matters less than its shape: read it as a scan, and
        # let the model's calibrated confidence say when it is unsure (never refuse a digit).
        return None
    pad = 0.3 * side
    keep = ((bottom >= top[main] - pad) & (top <= bottom[main] + pad) & (right >= left[main] - pad)
            & (left <= right[main] + pad) & ~border & (mass >= 0.05 * mass[main])
            & (shade >= 0.7 * shade[main]))
    keep[main] = True
    ink = _paint((h, w), rows, starts, ends, keep[label])
    t, b = top[keep].min(), bottom[keep].max() + 1
    l, r = left[keep].min(), right[keep].max() + 1

    core = np.zeros((h, w), np.float32)
    if wide > radius:
        t, b, l, r = _fill_wide_strokes(ink, core, grey, closed(wide), small.shape, wide, (t, b, l, r))

    # The digit's crop at the detail it needs, from the photo at full size: its darkness against
    # the same paper, where the ink (grown by a pixel, for the strokes' soft edges) lies.
    t, b, l, r = max(0, t - 2), min(h, b + 2), max(0, l - 2), min(w, r + 2)
    sy, sx = g.shape[0] / h, g.shape[1] / w
    crop = g[round(t * sy):round(b * sy), round(l * sx):round(r * sx)]
    crop = _shrink_to(crop, max(1, round(max(crop.shape) * min(1.0, detail / (side * max(sy, sx))))))
    ky, kx = small.shape[0] / g.shape[0], small.shape[1] / g.shape[1]
    paper = _pil_resize(_box3(closed(radius)), crop.shape, (round(l * sx) * kx, round(t * sy) * ky,
                                                            round(r * sx) * kx, round(b * sy) * ky))
    darkness = 1 - crop / np.maximum(paper, 1e-3) / level
    where = _pil_resize(dilate(ink.astype(np.float32), 1), crop.shape, (l, t, r, b)) > 0.01
    out = np.maximum(darkness / max(contrast, 1e-3), _pil_resize(core, crop.shape, (l, t, r, b)))
    return np.where(where, np.clip(out, 0, 1), 0).astype(np.float32)


def _fill_wide_strokes(ink: np.ndarray, core: np.ndarray, grey: np.ndarray, seen_wide: np.ndarray,
                       small_shape: tuple, wide: int, box: tuple) -> tuple:
    """A stroke wider than the closing comes out as an outline around a hollow. Against the paper
    seen at a radius no stroke survives (`seen_wide`), its core is as dark as the ink, shadows are
    not: fill what is that dark between the outlines, and each hole in the ink that is that dark
    on the whole (a 0's or an 8's loop is paper, and stays). Worked out around the digit only;
    `ink` and `core` (its darkness) are filled in place. Returns the ink's box (t, b, l, r)."""
    t, b, l, r = box
    h, w = ink.shape
    reach = round(wide * max(h, w) / max(small_shape))
    y0, y1, x0, x1 = max(0, t - reach), min(h, b + reach), max(0, l - reach), min(w, r + reach)
    around = ink[y0:y1, x0:x1]
    solid, _, _ = _darkness(grey, seen_wide)
    solid = solid[y0:y1, x0:x1]
    dark_ink = float(np.median(solid[around]))
    inside = (_closing(around.astype(np.float32), reach) > 0.5) & (solid > 0.85 * dark_ink)
    rows, starts, ends, label, n = connected_runs(~around)
    hh, ww = around.shape
    hole = np.ones(n, bool)
    hole[label[(rows == 0) | (rows == hh - 1) | (starts == 0) | (ends == ww)]] = False
    if hole.any():
        sums = np.zeros((hh, ww + 1))
        sums[:, 1:] = np.cumsum(solid, axis=1)
        mean = (np.bincount(label, sums[rows, ends] - sums[rows, starts], n)
                / np.maximum(np.bincount(label, ends - starts, n), 1))
        inside |= _paint(around.shape, rows, starts, ends, (hole & (mean > 0.75 * dark_ink))[label])
    inside &= ~around
    if not inside.any():
        return box
    top_ink = max(float(np.percentile(solid[around], 95)), 1e-3)
    core[y0:y1, x0:x1] = np.where(inside, solid / top_ink, 0)
    ink[y0:y1, x0:x1] |= inside
    rows_, cols_ = np.nonzero(ink)
    return rows_.min(), rows_.max() + 1, cols_.min(), cols_.max() + 1
