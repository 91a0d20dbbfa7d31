"""What people actually upload, made from a data set's own test images, seeded, no downloads:
enlarged low-resolution scans of digits, digits written on paper and photographed, photos framed,
enlarged or letterboxed, and pictures from outside a model's classes. `bench/real_inputs.py`
and the tests measure the bundled models on these (docs/reliability.md). Here, not in the
library: nothing the app or the trainer runs needs it.

Each maker takes a numpy Generator and returns what a person would hand the app: an encoded
file (bytes) or a PIL image. The trainer does not use this module: a test set built from the
generator a model was trained on would only measure memory (vit/data/negatives.py and
vit/data/degrade.py make the training's own).
"""
from __future__ import annotations

import io
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

# --- digits ---------------------------------------------------------------------------------------


def enlarged_scan(digit: np.ndarray, rng: np.random.Generator) -> Image.Image:
    """A 28x28 MNIST digit (uint8, white on black) as a small, low-resolution scan of a printed
    or written digit that someone enlarged: dark on light paper, shrunk to 8-16 px (box-averaged),
    16 grey levels with a little scanner noise, then enlarged to 80-128 px (bilinear or bicubic:
    soft edges, visible steps)."""
    small_side = int(rng.integers(8, 17))
    paper = rng.uniform(0.8, 0.98)
    ink = rng.uniform(0.0, 0.25)
    page = paper - (paper - ink) * digit.astype(np.float32) / 255
    im = Image.fromarray(page.astype(np.float32), "F").resize((small_side, small_side), Image.BOX)
    a = np.asarray(im) + rng.normal(0, 0.015, (small_side, small_side))
    a = np.round(np.clip(a, 0, 1) * 15) / 15                              # 16 grey levels
    big = int(rng.integers(80, 129))
    how = Image.BILINEAR if rng.random() < 0.5 else Image.BICUBIC
    out = Image.fromarray((a * 255 + 0.5).astype(np.uint8), "L").resize((big, big), how)
    return out


def _smooth_noise(rng, h: int, w: int, cells: int) -> np.ndarray:
    """Low-frequency noise in about [-1, 1]: a `cells`-wide random grid, upscaled bicubically."""
    small = rng.standard_normal((cells, cells)).astype(np.float32)
    return np.asarray(Image.fromarray(small, "F").resize((w, h), Image.BICUBIC))


def _step(x: np.ndarray, soft: float) -> np.ndarray:
    """A soft step from 0 (x << 0) to 1 (x >> 0) over about `soft`: the logistic, as tanh (no
    overflow far from the edge)."""
    return 0.5 + 0.5 * np.tanh(x / (2 * soft))


def _light(rng, h: int, w: int, shadows: int, bands: int = 0) -> np.ndarray:
    """Illumination (h, w): a linear gradient, a vignette, `shadows` soft shadows (a half-plane
    or a wide band: a hand, the phone) and `bands` narrow soft shadow bands (a pen's shadow,
    a ruler's), which at the digit's scale look like strokes."""
    ys = (np.arange(h, dtype=np.float32) / max(h, w))[:, None]            # broadcast, not (h, w)
    xs = (np.arange(w, dtype=np.float32) / max(h, w))[None, :]
    t = rng.uniform(0, 2 * np.pi)
    ramp = float(np.cos(t)) * xs + float(np.sin(t)) * ys
    ramp = (ramp - ramp.min()) / max(np.ptp(ramp), 1e-6)                  # 0 .. 1 across the photo
    light = np.float32(rng.uniform(0.85, 1.0)) * (1 - np.float32(rng.uniform(0.3, 0.55)) * ramp)
    cy, cx = rng.uniform(0, h / max(h, w)), rng.uniform(0, w / max(h, w))
    light *= 1 - rng.uniform(0.1, 0.35) * np.clip(((ys - cy) ** 2 + (xs - cx) ** 2) / 0.5, 0, 1)
    for i in range(shadows + bands):
        t = rng.uniform(0, 2 * np.pi)
        d = float(np.cos(t)) * (xs - rng.uniform(0.2, 0.8) * w / max(h, w)) \
            + float(np.sin(t)) * (ys - rng.uniform(0.2, 0.8) * h / max(h, w))
        if i >= shadows:                                   # narrow: 1-4 % of the photo, soft
            half, soft = rng.uniform(0.005, 0.02), rng.uniform(0.005, 0.015)
            light *= 1 - rng.uniform(0.3, 0.5) * _step(half - np.abs(d), soft)
            continue
        soft = rng.uniform(0.01, 0.08)
        if rng.random() < 0.5:
            inside = _step(d, soft)
        else:
            half = rng.uniform(0.1, 0.25)
            inside = _step(half - np.abs(d), soft)
        light *= 1 - rng.uniform(0.4, 0.6) * inside
    return light


def paper_photo(digit: np.ndarray | None, rng: np.random.Generator, size=None,
                bands: int | None = None) -> bytes:
    """A JPEG of `digit` (an MNIST image, 28x28 uint8 white on black) written on paper and
    photographed, 300-800 px a side (or `size`, (h, w)): pen or pencil ink on tinted paper under
    a light gradient, a vignette, one or two soft shadows, `bands` narrow shadow bands (0 or 1
    at random by default), grain, blur and JPEG. `digit=None` photographs the blank page."""
    h, w = size or (int(rng.integers(300, 801)), int(rng.integers(300, 801)))
    alpha = np.zeros((h, w), np.float32)
    if digit is not None:
        ys, xs = np.nonzero(digit > 0)
        crop = digit[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
        # the digit's 20x20 box is 150-400 px, and fits in the photo with a margin
        side = min(rng.uniform(150, 400) * max(1, min(h, w) / 800), 0.8 * min(h, w))
        s = side / 20
        dh, dw = max(1, round(crop.shape[0] * s)), max(1, round(crop.shape[1] * s))
        big = np.asarray(Image.fromarray(crop).resize((dw, dh), Image.BICUBIC), np.float32) / 255
        big = np.clip((big - 0.5) * 1.6 + 0.5, 0, 1)                        # crisper, like a pen
        m = round(0.04 * min(h, w))                                       # framed, not cut
        y, x = int(rng.integers(m, h - dh - m + 1)), int(rng.integers(m, w - dw - m + 1))
        pressure = np.clip(rng.uniform(0.85, 1.0) + 0.08 * _smooth_noise(rng, dh, dw, 6), 0, 1)
        alpha[y:y + dh, x:x + dw] = big * pressure
    paper = rng.uniform(0.82, 0.95) * np.array([1.0, rng.uniform(0.97, 1.0), rng.uniform(0.9, 1.0)],
                                               np.float32)
    if rng.random() < 0.5:                                                # dark grey pencil/pen
        ink = np.full(3, rng.uniform(0.12, 0.3), np.float32)
    else:                                                                 # blue ballpoint
        ink = np.array([rng.uniform(0.1, 0.25), rng.uniform(0.15, 0.3), rng.uniform(0.4, 0.6)],
                       np.float32)
    grain = (rng.uniform(0.01, 0.03) * _smooth_noise(rng, h, w, 64)
             + rng.uniform(0.015, 0.035) * rng.standard_normal((h, w), np.float32))  # + sensor noise
    bands = int(rng.integers(0, 2)) if bands is None else bands
    light = _light(rng, h, w, int(rng.integers(1, 3)), bands)
    a = alpha[..., None]
    rgb = light[..., None] * ((paper * (1 + grain[..., None])) * (1 - a) + ink * a)
    im = Image.fromarray(np.clip(rgb * 255 + 0.5, 0, 255).astype(np.uint8), "RGB")
    im = im.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 1.5)))
    return jpeg(im, int(rng.integers(60, 91)))


def jpeg(im: Image.Image, quality: int) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


# --- photos ---------------------------------------------------------------------------------------
FRAMINGS = ("as stored", "enlarged", "white border", "letterboxed")


def framed(picture: np.ndarray, how: str, rng: np.random.Generator) -> Image.Image:
    """A data set's colour picture (H, W, 3 uint8) as people's uploads hold it: `how` is one of
    FRAMINGS. "enlarged": bicubic to 96-256 px; "white border": enlarged with a white margin of
    8-20 % of the side on each edge (a screenshot, a photo of a print); "letterboxed": enlarged
    and centred in a wider frame of one dark or light flat colour with a margin above and below
    too (a picture in a window, a video frame)."""
    im = Image.fromarray(picture)
    if how == "as stored":
        return im
    side = int(rng.integers(96, 257))
    im = im.resize((side, side), Image.BICUBIC)
    if how == "enlarged":
        return im
    if how == "white border":
        m = [int(side * rng.uniform(0.08, 0.2)) for _ in range(4)]
        out = Image.new("RGB", (side + m[0] + m[2], side + m[1] + m[3]), (255, 255, 255))
        out.paste(im, (m[0], m[1]))
        return out
    if how == "letterboxed":
        grey = int(rng.choice([0, 16, 32, 224, 240]))
        h = int(side * rng.uniform(1.15, 1.5))
        w = int(h * rng.choice([4 / 3, 16 / 9]))
        out = Image.new("RGB", (w, h), (grey, grey, grey))
        out.paste(im, ((w - side) // 2, (h - side) // 2))
        return out
    raise ValueError(f"unknown framing {how!r}: choose one of {', '.join(FRAMINGS)}")


# --- pictures from outside a model's classes ------------------------------------------------------
OUTSIDE_KINDS = ("drawing", "digit", "noise", "flat colour", "text")
WORDS = ("hello", "ViT", "test", "cat", "photo", "42", "OK", "Monday", "note", "abc")


@lru_cache(maxsize=16)
def font(size: int):
    """DejaVu Sans at `size` px (PIL's own font where it is not installed)."""
    try:
        return ImageFont.truetype("DejaVuSans.ttf", size)
    except OSError:                               # CI installs fonts-dejavu-core; else PIL's own
        return ImageFont.load_default(size=size)


def _centred_text(d: ImageDraw.ImageDraw, text: str, font, side: int) -> None:
    left, top, right, bottom = d.textbbox((0, 0), text, font=font)
    d.text(((side - right + left) / 2 - left, (side - bottom + top) / 2 - top), text, fill=0,
           font=font)


def outside(kind: str, rng: np.random.Generator) -> Image.Image:
    """A picture of none of a data set's classes, as someone might try one: `kind` from
    OUTSIDE_KINDS. A drawing (a smiley, a house, a star, a scribble: black pen on white, as on
    the canvas), a digit (typed, slanted), noise (grey or colour, fine or blotchy), a flat colour
    (with a faint gradient) or a word typed in black on white."""
    side = int(rng.integers(200, 401))
    if kind == "digit":                    # typed, not drawn: the trainer draws its digits
        im = Image.new("L", (side, side), 255)
        _centred_text(ImageDraw.Draw(im), str(int(rng.integers(0, 10))),
                      font(int(side * rng.uniform(0.5, 0.8))), side)
        return im.rotate(float(rng.uniform(-15, 15)), Image.BILINEAR, fillcolor=255).convert("RGB")
    if kind == "noise":
        colour = rng.random() < 0.5
        shape = (side, side, 3) if colour else (side, side)
        if rng.random() < 0.5:
            a = rng.integers(0, 256, shape).astype(np.uint8)                # fine: every pixel
        else:
            cells = int(rng.integers(4, 17))                                # blotchy
            a = rng.integers(0, 256, (cells, cells) + shape[2:]).astype(np.uint8)
            a = np.asarray(Image.fromarray(a).resize((side, side), Image.BICUBIC))
        return Image.fromarray(a).convert("RGB")
    if kind == "flat colour":
        c = rng.integers(0, 256, 3).astype(np.float32)
        ramp = np.linspace(-1, 1, side, dtype=np.float32)[None, :, None] * rng.uniform(0, 12)
        a = np.clip(c + ramp + np.zeros((side, side, 3), np.float32), 0, 255)
        return Image.fromarray((a + 0.5).astype(np.uint8))
    im = Image.new("RGB", (side, side), "white")
    d = ImageDraw.Draw(im)
    pen = max(3, int(side * rng.uniform(0.02, 0.05)))
    if kind == "text":
        word = WORDS[int(rng.integers(len(WORDS)))]
        _centred_text(d, word, font(int(side * rng.uniform(0.12, 0.25))), side)
        return im
    if kind == "drawing":
        s = side
        what = ("smiley", "house", "star", "scribble")[int(rng.integers(4))]
        if what == "smiley":
            d.ellipse([0.15 * s, 0.15 * s, 0.85 * s, 0.85 * s], outline="black", width=pen)
            for x in (0.38, 0.62):
                d.ellipse([(x - 0.04) * s, 0.35 * s, (x + 0.04) * s, 0.43 * s], fill="black")
            d.arc([0.3 * s, 0.35 * s, 0.7 * s, 0.7 * s], 20, 160, fill="black", width=pen)
        elif what == "house":
            d.line([(0.2 * s, 0.5 * s), (0.5 * s, 0.2 * s), (0.8 * s, 0.5 * s), (0.8 * s, 0.85 * s),
                    (0.2 * s, 0.85 * s), (0.2 * s, 0.5 * s), (0.8 * s, 0.5 * s)], fill="black",
                   width=pen, joint="curve")
            d.rectangle([0.42 * s, 0.62 * s, 0.58 * s, 0.85 * s], outline="black", width=pen)
        elif what == "star":
            ang = np.pi / 2 + np.arange(11) * 4 * np.pi / 5
            d.line([(s / 2 + 0.35 * s * np.cos(a), s / 2 - 0.35 * s * np.sin(a)) for a in ang],
                   fill="black", width=pen, joint="curve")
        else:
            pts = [tuple(p) for p in rng.uniform(0.1 * s, 0.9 * s, (int(rng.integers(8, 16)), 2))]
            d.line(pts, fill="black", width=pen, joint="curve")
        return im
    raise ValueError(f"unknown kind {kind!r}: choose one of {', '.join(OUTSIDE_KINDS)}")


def outside_set(n_per_kind: int, seed: int, kinds=OUTSIDE_KINDS) -> list[tuple[str, Image.Image]]:
    """n_per_kind pictures of each kind, (kind, picture), the same for a seed."""
    rng = np.random.default_rng(seed)
    return [(k, outside(k, rng)) for k in kinds for _ in range(n_per_kind)]

