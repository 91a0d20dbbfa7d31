"""Is the input one of the model's classes at all? "Not a digit" for letters, scribbles, dots,
dashes, several digits side by side, shapes and near-empty marks.

Two kinds of evidence, combined in one function, `judge`, that the Predictor calls (so the app,
`vit.predict` and notebooks agree):

1. Cheap checks on the input's ink, measured on the drawing before it is shrunk to the model's
   28 pixels (where two digits side by side would become one blob): how far the ink extends,
   whether it is one solid blob (a dot) or a flat horizontal stroke (a dash), and how many
   separate marks of meaningful size it holds and where they lie. Each check is tuned so that
   real digits almost never trip it: a 1 is tall and thin, a 0 is a ring, a 4, 5 or 7 drawn in
   two strokes that don't touch is still one digit (two marks refuse only when both are
   digit-sized, side by side, with a clear gap), a dot beside a stroke is not a mark.
2. The learned score: the model's calibrated top probability below the checkpoint's
   `calibration.reject_below` (fitted by the trainer on held-out digits; vit/explain/calibration.py).

The ink map is `vit.preprocessing.compact` of the input (white ink on black, at most INK_SIDE
pixels a side): what the app keeps per visitor to lay a drawing out again, so a model switch
judges the same ink. Photos get no ink checks (see `ink_map`). Pure functions of arrays: about
2 ms per input on a 2-core CPU, ink map included.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from vit.preprocessing.layout import COMPACT_SIDE, INK_THRESHOLD, compact, contrast_range
from vit.preprocessing.paper import connected_runs, dilate
from vit.text import confidence

INK_SIDE = COMPACT_SIDE          # the ink map's longer side (160 px): enough to see strokes
CLEAN_SHARE = 0.3                # a drawing or clean scan: this share of pixels has one exact level

# --- the checks' limits: none refuses any of the 10,000 MNIST test digits redrawn as canvases
# (tests/drawings.py); tests/test_ood.py holds digits drawn in odd ways that must pass.
TINY_EXTENT = 0.06               # ink spanning < 6 % of the canvas's longer side: a near-empty mark
DOT_SPAN = 3.2                   # a blob whose extent is < 3.2 stroke widths...
DOT_FILL = 0.45                  # ...that fills this much of its box...
DOT_EXTENT = 0.2                 # ...and spans < 20 % of the picture: a dot (not a bold, small 8)
DASH_ELONGATION = 3.0            # one straight-ish mark, >= 3 times as long as wide...
DASH_ANGLE = 25                  # ...lying within 25 degrees of horizontal: a dash
MARK_SHARE = 0.12                # a separate mark counts if its ink is >= 12 % of the largest one's
SIDE_HEIGHT = 0.6                # side by side: columns of marks, each >= 60 % as tall as all ink...
SIDE_OVERLAP = 0.5               # ...sharing at least half of the shorter one's rows...
SIDE_GAP = 0.05                  # ...with a gap of >= 5 % of the wider one's width between them
SIDE_GAP_STROKES = 1.0           # ...and >= one stroke width, each holding >= 20 % as much
SIDE_SHARE = 0.2                 #    ink as the other (not a scrap of a neighbouring digit)
MANY_MARKS = 4                   # this many separate marks: scattered, not one digit


def ink_limits() -> dict:
    """The ink checks' limits by name, for the page's own copy of the checks (vit/ui/inpage.js):
    one list of numbers, here."""
    return {"INK_SIDE": INK_SIDE, "CLEAN_SHARE": CLEAN_SHARE, "INK_THRESHOLD": INK_THRESHOLD,
            "TINY_EXTENT": TINY_EXTENT, "DOT_SPAN": DOT_SPAN, "DOT_FILL": DOT_FILL,
            "DOT_EXTENT": DOT_EXTENT, "DASH_ELONGATION": DASH_ELONGATION, "DASH_ANGLE": DASH_ANGLE,
            "MARK_SHARE": MARK_SHARE, "SIDE_HEIGHT": SIDE_HEIGHT, "SIDE_OVERLAP": SIDE_OVERLAP,
            "SIDE_GAP": SIDE_GAP, "SIDE_GAP_STROKES": SIDE_GAP_STROKES, "SIDE_SHARE": SIDE_SHARE,
            "MANY_MARKS": MANY_MARKS}


@dataclass(frozen=True)
class Mark:
    """One connected mark of ink (strokes closer than a pixel of the ink map are joined)."""
    top: int
    left: int
    bottom: int                  # exclusive
    right: int                   # exclusive
    area: int                    # ink pixels

    @property
    def height(self) -> int:
        return self.bottom - self.top

    @property
    def width(self) -> int:
        return self.right - self.left


@dataclass(frozen=True)
class InkStats:
    canvas: int                  # the ink map's longer side
    box: Mark                    # all the ink
    stroke: float                # mean stroke width (2 * area / perimeter), ink-map pixels
    marks: tuple[Mark, ...]      # marks of meaningful size, left to right
    elongation: float            # sqrt of the ink's principal second moments' ratio (L/w of a line)
    angle: float                 # its long axis, degrees from horizontal (-90..90)

    @property
    def extent(self) -> float:
        """The ink's longer side as a share of the canvas's."""
        return max(self.box.height, self.box.width) / max(self.canvas, 1)


@dataclass(frozen=True)
class Verdict:
    is_class: bool               # False: "not a digit"
    reason: str = ""             # one sentence for people, when not
    kind: str = ""               # "tiny", "dot", "dash", "side by side", "scattered", "unsure"

    def __bool__(self) -> bool:
        return self.is_class


ACCEPT = Verdict(True)


def ink_map(image) -> np.ndarray | None:
    """Any input the preprocessor reads (best: one it need not decode again — a decoded picture
    from `vit.preprocessing.decode`, an array, a PIL image) -> uint8 ink (H, W), white on
    black, longer side <= INK_SIDE; None for a photo. Raises PreprocessError.

    Only drawings and clean scans get ink checks: their background is one exact level (a canvas,
    white paper). A photo's paper is lit unevenly, and vit.preprocessing reads its ink its own
    way (shadows divided out, stray marks dropped); its naive ink here would count shadows as
    marks, so a photo is judged by the model's calibrated confidence alone."""
    try:
        small = _shrunk(image)
    except (ValueError, TypeError, OSError, MemoryError):    # compact says what is wrong
        small = image
    ink = compact(small, INK_SIDE)
    levels = np.bincount(ink.ravel(), minlength=256)
    return ink if levels.max() >= CLEAN_SHARE * ink.size else None


def _shrunk(image):
    """A picture box-averaged by a whole factor to about INK_SIDE a side, so that `compact`
    (which converts and copies in float64) runs on ~25,000 pixels instead of up to 4 million:
    a PIL image of a common mode is reduced in PIL, a uint8 or float array (a decoded picture,
    (H, W) or (H, W, 2..4)) with torch. Anything else passes through untouched."""
    from PIL import Image
    if isinstance(image, Image.Image):
        f = max(image.size) // INK_SIDE
        if f >= 2 and image.mode in ("L", "LA", "RGB", "RGBA") and min(image.size) >= f:
            return image.reduce(f)
        return image
    if not (isinstance(image, np.ndarray) and image.ndim in (2, 3)
            and image.dtype in (np.uint8, np.float32, np.float64)
            and (image.ndim == 2 or image.shape[2] in (2, 3, 4))):
        return image
    f = max(image.shape[:2]) // INK_SIDE
    h, w = (image.shape[0] // f * f, image.shape[1] // f * f) if f >= 2 else (0, 0)
    if min(h, w) == 0:
        return image
    a = image[:h, :w]
    t = torch.from_numpy(np.ascontiguousarray(a, np.float32) / (255 if a.dtype == np.uint8 else 1))
    t = t[None, None] if t.dim() == 2 else t.permute(2, 0, 1)[None]          # (1, C, h, w)
    out = F.avg_pool2d(t, f)[0]
    return (out[0] if image.ndim == 2 else out.permute(1, 2, 0)).numpy()


def ink_mask(ink: np.ndarray) -> np.ndarray:
    """Which pixels are ink: the contrast stretched the way vit.preprocessing stretches it
    (background -> 0, the strongest ink -> 1), then INK_THRESHOLD."""
    a = np.asarray(ink, np.float32)
    if a.size == 0:
        return np.zeros(a.shape, bool)
    lo, top, hi = contrast_range(a)
    if hi <= lo:
        return np.zeros(a.shape, bool)
    return a > lo + INK_THRESHOLD * max(top - lo, 1e-6)


def marks(mask: np.ndarray) -> list[Mark]:
    """Connected marks (8-neighbourhood, after a 3x3 dilation) of a boolean mask, with the area
    of the undilated ink each holds (the components are vit.preprocessing's, over row runs)."""
    if not mask.any():
        return []
    grown = dilate(mask.astype(np.float32), 1) > 0.5   # strokes a pixel apart count as touching
    H, W = grown.shape
    rows, starts, ends, label, _ = connected_runs(grown)
    # Each run's pixels get its mark's number; boxes and areas are those of the undilated ink.
    lengths = ends - starts
    flat = np.repeat(rows * W + starts - np.cumsum(np.r_[0, lengths[:-1]]), lengths) \
        + np.arange(lengths.sum())
    labels = np.zeros(H * W, np.int64)
    labels[flat] = np.repeat(label, lengths)
    ys, xs = np.nonzero(mask)
    lab = labels[ys * W + xs]
    order = np.argsort(lab, kind="stable")
    lab, ys, xs = lab[order], ys[order], xs[order]
    cut = np.flatnonzero(np.r_[True, lab[1:] != lab[:-1]])
    area = np.diff(np.r_[cut, len(lab)])
    top, bottom = np.minimum.reduceat(ys, cut), np.maximum.reduceat(ys, cut) + 1
    left, right = np.minimum.reduceat(xs, cut), np.maximum.reduceat(xs, cut) + 1
    return [Mark(int(t), int(lf), int(b), int(r), int(a))
            for t, lf, b, r, a in zip(top, left, bottom, right, area)]


def measure(ink: np.ndarray) -> InkStats | None:
    """An ink map -> what the checks look at; None when there is no ink."""
    mask = ink_mask(ink)
    if not mask.any():
        return None
    rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    area = int(mask.sum())
    box = Mark(int(rows[0]), int(cols[0]), int(rows[-1]) + 1, int(cols[-1]) + 1, area)
    m8 = mask.astype(np.int8)
    edges = np.abs(np.diff(m8, axis=0)).sum() + np.abs(np.diff(m8, axis=1)).sum() \
        + m8[0].sum() + m8[-1].sum() + m8[:, 0].sum() + m8[:, -1].sum()
    found = marks(mask)
    biggest = max(m.area for m in found)
    kept = sorted((m for m in found if m.area >= MARK_SHARE * biggest), key=lambda m: m.left)
    ys, xs = np.nonzero(mask)
    cov = np.cov(np.stack([xs, ys]).astype(np.float64)) if area > 1 else np.zeros((2, 2))
    (small, large), vectors = np.linalg.eigh(cov + np.eye(2) / 12)   # + a pixel's own spread
    vx, vy = vectors[:, 1]
    angle = float(np.degrees(np.arctan2(vy, vx)))
    angle = angle - 180 if angle > 90 else angle + 180 if angle < -90 else angle
    return InkStats(max(mask.shape), box, 2.0 * area / max(int(edges), 1), tuple(kept),
                    float(np.sqrt(large / small)), angle)


def columns(found) -> list[Mark]:
    """Marks grouped into columns, left to right: marks whose horizontal extents overlap are one
    column (a 4's two strokes, a 5's separate bar, a digit broken in two), its box their union."""
    out: list[Mark] = []
    for m in sorted(found, key=lambda m: m.left):
        if out and m.left < out[-1].right:
            c = out[-1]
            out[-1] = Mark(min(c.top, m.top), c.left, max(c.bottom, m.bottom),
                           max(c.right, m.right), c.area + m.area)
        else:
            out.append(m)
    return out


def side_by_side(s: InkStats) -> int:
    """How many columns of ink stand side by side (0 if fewer than two): columns each nearly as
    tall as all the ink, sharing their rows, each a clear gap to the right of its neighbour."""
    tall = [c for c in columns(s.marks) if c.height >= SIDE_HEIGHT * s.box.height]

    def apart(a: Mark, b: Mark) -> bool:
        overlap = min(a.bottom, b.bottom) - max(a.top, b.top)
        gap = b.left - a.right
        return (overlap >= SIDE_OVERLAP * min(a.height, b.height)
                and gap >= max(SIDE_GAP * max(a.width, b.width), SIDE_GAP_STROKES * s.stroke)
                and min(a.area, b.area) >= SIDE_SHARE * max(a.area, b.area))

    best = run = 1
    for a, b in zip(tall, tall[1:]):
        run = run + 1 if apart(a, b) else 1
        best = max(best, run)
    return best if best >= 2 else 0


def check_ink(s: InkStats | None, noun: str = "digit") -> Verdict:
    """The input checks alone: a Verdict refusing the ink, or ACCEPT."""
    if s is None:
        return Verdict(False, "There is no ink to read.", "tiny")
    span = max(s.box.height, s.box.width)
    if s.extent < TINY_EXTENT:
        return Verdict(False, f"The mark is too small to read: it spans {100 * s.extent:.0f} % "
                              f"of the picture.", "tiny")
    if (span < DOT_SPAN * s.stroke and s.box.area >= DOT_FILL * s.box.height * s.box.width
            and s.extent < DOT_EXTENT):
        # Often a small drawing whose strokes ran together under the pen: say how to fix it.
        return Verdict(False, f"A single dot or blob, {100 * s.extent:.0f} % of the box across — "
                              f"there is no {noun} shape to read. Draw it bigger: the pen is "
                              f"thick for a small drawing.", "dot")
    if len(s.marks) == 1 and s.elongation >= DASH_ELONGATION and abs(s.angle) <= DASH_ANGLE:
        return Verdict(False, f"A flat dash — no {noun} is that wide and flat.", "dash")
    n = side_by_side(s)
    if n:
        return Verdict(False, f"{_count(n)} separate marks side by side — this model reads one "
                              f"{noun} at a time.", "side by side")
    if len(s.marks) >= MANY_MARKS:
        return Verdict(False, f"{_count(len(s.marks))} separate marks scattered about — this "
                              f"model reads one {noun} at a time.", "scattered")
    return ACCEPT


def _count(n: int) -> str:
    return {2: "Two", 3: "Three", 4: "Four", 5: "Five", 6: "Six"}.get(n, str(n))


def not_label(config) -> str:
    """The label for "not one of these classes": "not a digit", or for a model of an unknown
    data set "not one of these N classes"."""
    if config.spec is None:
        return f"not one of these {len(config.class_names)} classes"
    noun = config.noun
    return f"not {'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def judge(ink: np.ndarray | None, probs: np.ndarray, config, far: float | None = None) -> Verdict:
    """Is this input one of the model's classes? `ink`: the input's ink map (`ink_map`), or None
    where there is no drawing to look at (a test-set image, a colour model's input); `probs`:
    the calibrated class probabilities; `config`: the checkpoint's CheckpointConfig; `far`: the
    input's [CLS] token's distance from the training images (vit/explain/typical.py), or None.
    The ink checks apply to digit-style models only (a pair of sandals is two marks side by
    side)."""
    known = config.spec is not None
    noun = config.noun if known else "image"
    if ink is not None and config.style.drawn and config.model.channels == 1:
        verdict = check_ink(measure(ink), noun)
        if not verdict:
            return verdict
    threshold = config.reject_below
    probs = np.asarray(probs, np.float64)
    best = int(probs.argmax())
    if far is not None and config.far_above is not None and far > config.far_above:
        return Verdict(False, "This doesn't look like anything the model was trained on.",
                       "unfamiliar")
    if threshold is not None and probs[best] < threshold:
        return Verdict(False, unsure_reason(config, *best_guess(config.class_names, probs)), "unsure")
    return ACCEPT


def best_guess(class_names, probs) -> tuple[str, str]:
    """(the best guess, its probability) as a refusal writes them: "3", "45.2 %"; two classes that
    read alike at one decimal are both named, "3 or 5", "45.2 % each" (a trial saw one named as
    the best guess where two tied). The page's own model writes the same (vit/ui/inpage.js)."""
    order = np.argsort(-np.asarray(probs, np.float64), kind="stable")
    first, p = class_names[order[0]], confidence(float(probs[order[0]]))
    if len(order) > 1 and confidence(float(probs[order[1]])) == p:
        return f"{first} or {class_names[order[1]]}", f"{p} each"
    return first, p


def unsure_reason(config, best: str, p: str) -> str:
    """The sentence for a top class below the threshold (`p`: its probability, as written); the
    page's own model fills the same words in ("{best}", "{p}": vit/ui/inpage.py)."""
    what = (f"any {config.noun}" if config.spec is not None
            else f"any of its {len(config.class_names)} classes")
    return f"The model isn't confident this is {what} (best guess {best} at {p})."
