"""Make any picture of a digit (or a garment) look like the data the model was trained on.

MNIST was made like this: the digit's ink was cropped to its bounding box, scaled to fit a 20x20
box keeping its aspect ratio (anti-aliased), and placed in a 28x28 image so that its centre of mass
sits at the centre. White ink on black. `to_model_image` repeats those steps for a drawing, a photo
or a scan; `preprocess` adds the model's normalisation. Fashion-MNIST instead fills the whole 28x28
frame and centres the bounding box, which `style="objects"` does. A digit written on paper and
photographed under uneven light (a gradient, a shadow) first has the paper's light divided out
and only the digit's strokes kept (`_photo_ink`); clean drawings and scans never take that path.

Everything here is a pure function of its input: the app, the CLI and the tests call the same code.
"""
from __future__ import annotations

import functools
import io
import math
import os
import threading
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

MAX_PIXELS = 40_000_000      # ~6300x6300: beyond this we refuse before decoding (memory, time)
MAX_FILE_BYTES = 50_000_000  # larger files are refused before they are opened
WORK_SIDE = 1024             # larger inputs are area-downscaled to this first: no visible change at 28 px
INK_THRESHOLD = 0.25         # fraction of the ink's contrast that counts as "ink" for the bounding box
RIM = 1                      # pixels kept around that box: the strokes' fainter edges...
RIM_OUT = 1 if RIM else 0    # ...which end as one pixel of the model's input, at any scale
MIN_CONTRAST = 0.08          # below this (on a 0..1 scale) the image is taken as blank


class PreprocessError(ValueError):
    """The input can't be turned into a digit image. The message is for people: it says what is
    wrong and what to do, and the app shows it as it is."""


class BlankInputError(PreprocessError):
    """Nothing to read: no image, an empty canvas, no contrast. The app shows a resting state
    ("Draw a digit") for a drawing, not an error."""


def _never_crashes(fn):
    """Whatever a caller hands in, the public functions below answer with a PreprocessError (one
    line for people), never with an exception from deep inside PIL or numpy (a 0x0 image, layers
    of different sizes, a dict nested a thousand deep...)."""
    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PreprocessError:
            raise
        except (ValueError, TypeError, IndexError, KeyError, AttributeError, RecursionError,
                OSError, EOFError, SyntaxError) as e:
            raise PreprocessError(f"That image could not be read ({type(e).__name__}).") from None
        except MemoryError:
            raise PreprocessError("That image is too large to read here.") from None
    return guarded


def _too_big(w: int, h: int) -> PreprocessError:
    return PreprocessError(f"The image is {w}x{h} pixels; the limit is "
                           f"{MAX_PIXELS // 1_000_000} megapixels. Please scale it down first.")


# Formats a picture of a digit or a photo comes in. Anything else (ICO/CUR, which may hold a
# 13000x13000 PNG behind a 256-pixel header; EPS, which runs Ghostscript; PSD, …) is refused
# before a decoder runs. (Many phones' JPEGs open as MPO, through the JPEG opener.)
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")
# What decoding costs beside the picture itself, in bytes per pixel, where it is more than the
# decoded picture's 4 (measured on 40-megapixel files: libwebp's animation decoder holds two
# canvases and a copy, +607 MB; a progressive JPEG keeps every component's coefficients at full
# resolution, 2 bytes each, even when decoded at a reduced scale: +268 MB RGB, +344 MB CMYK).
DECODE_BUDGET = 200_000_000      # bytes one decode may take
# At most this many decodes at once in the process: each handler has its own Gradio concurrency
# limit, so without it seven handlers could decode two pictures each at the same moment.
_DECODES = threading.BoundedSemaphore(2)
# EXIF orientation -> the PIL transpose that shows the picture upright (as ImageOps.exif_transpose).
_UPRIGHT = {2: 0, 3: 3, 4: 1, 5: 5, 6: 4, 7: 6, 8: 2}   # FLIP_LEFT_RIGHT=0 … TRANSVERSE=6


def open_image(path):
    """Open an image file, decoded and at most 2 x WORK_SIDE pixels a side, or raise
    PreprocessError with a one-line message. Every path that reads a picture (uploads, the
    canvas, image folders for training) comes through here.

    Before any pixel is decoded: the file's size, its format (FORMATS), then the pixel count of
    the frame that will be decoded (PIL itself would only refuse above ~179 MP, with an exception
    of its own). Only the first frame of an animation or page of a TIFF is decoded; a JPEG is
    decoded at a reduced scale where it is large (draft). Right after decoding, the picture is
    shrunk strip by strip (`_shrink`): a 36-megapixel 16-bit or float picture then costs its
    decoded size (≤ 160 MB) and a few MB more, not ~900 MB. The EXIF orientation is applied, so a
    photo taken sideways is upright. Returns a PIL image (a context manager).
    """
    from PIL import Image, UnidentifiedImageError
    if isinstance(path, (bytes, bytearray, memoryview)):       # an upload still in memory
        size, source, path = len(path), io.BytesIO(path), Path("<bytes>")
    else:
        path = source = Path(path)
        try:
            if path.is_dir():
                raise PreprocessError(f"{path.name[:60]} is a folder, not an image file.")
            size = path.stat().st_size
        except FileNotFoundError:
            raise PreprocessError(f"No such file: {path.name[:60]}") from None
        except OSError:
            raise PreprocessError("That file can't be read.") from None
    if size == 0:
        raise PreprocessError("The file is empty (0 bytes).")
    if size > MAX_FILE_BYTES:
        raise PreprocessError(f"The file is {size / 1e6:.1f} MB; the limit is "
                              f"{MAX_FILE_BYTES // 1_000_000} MB. Please send a smaller image.")
    try:
        with warnings.catch_warnings():      # PIL's bomb *warning*: our own limit is lower
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            Image.init()                     # registers every plugin FORMATS names (WEBP, TIFF…)
            im = Image.open(source, formats=FORMATS)
        with im:
            im.seek(0)                               # animated GIF/WebP, TIFF pages: the first
            w, h = im.size                           # (a GIF grows to fit its first frame here)
            if w * h > MAX_PIXELS:
                raise _too_big(w, h)
            _check_decode_cost(im)
            if im.format in ("JPEG", "MPO"):
                im.draft(im.mode, (2 * WORK_SIDE, 2 * WORK_SIDE))   # decode at 1/2, 1/4, 1/8
            turn = _UPRIGHT.get(im.getexif().get(0x0112, 1))
            with _DECODES:
                im.load()
            small = _shrink(im)
            small = small.transpose(turn) if turn is not None else small
            if small is im:                          # small already: detach it from the file
                small = im.copy()
            small.info["source_mode"] = im.mode      # 16-bit, though reduced as 32-bit I
            return small
    except PreprocessError:
        raise
    except Image.DecompressionBombError:
        raise PreprocessError(f"The image has too many pixels; the limit is "
                              f"{MAX_PIXELS // 1_000_000} megapixels.") from None
    except UnidentifiedImageError:
        raise PreprocessError("That file is not an image I can read (PNG, JPEG, WebP, GIF, BMP, TIFF "
                              "work).") from None
    except (OSError, SyntaxError, ValueError, EOFError, TypeError, MemoryError) as e:
        # ValueError covers PNG text-chunk bombs ("Decompressed data too large"): one line, no path.
        text = str(e).replace(str(path), "the file")
        reason = text.splitlines()[0][:120] if text.strip() else type(e).__name__
        raise PreprocessError(
            f"The image file is damaged or truncated and can't be read ({reason}).") from None


def _bytes_per_pixel(im) -> float:
    """What decoding `im` costs per pixel (see DECODE_BUDGET)."""
    if im.format == "WEBP":
        return 16.0
    if im.format in ("JPEG", "MPO") and (im.info.get("progressive") or im.info.get("progression")):
        return 4.0 + 2.0 * len(im.getbands())
    return 4.0


def _check_decode_cost(im) -> None:
    """Refuse, before decoding, what would cost more than DECODE_BUDGET — and a TIFF whose tiles
    or strips are larger than its picture, or more of them than cover it: a 1 MB file declaring
    one 32768x65520 tile took 2.1 GB, another with 100,000 tiles over one small picture kept a
    worker decoding for hours."""
    w, h = im.size
    cost = w * h * _bytes_per_pixel(im)
    if cost > DECODE_BUDGET:
        most = DECODE_BUDGET / _bytes_per_pixel(im) / 1e6
        raise PreprocessError(f"The image is {w}x{h} pixels; in this format the limit is "
                              f"{most:.0f} megapixels. Please save it as PNG or a smaller JPEG.")
    if im.format == "TIFF":
        tags = im.tag_v2
        tile_w, tile_h = tags.get(322), tags.get(323)
        if tile_w or tile_h:
            tile_w, tile_h = int(tile_w or 0), int(tile_h or 0)
            if not (0 < tile_w <= max(w + 16, 1024) and 0 < tile_h <= max(h + 16, 1024)):
                raise PreprocessError(f"The TIFF's tiles ({tile_w}x{tile_h}) are larger than its "
                                      f"picture ({w}x{h}); please save it as PNG or JPEG.")
            offsets = tags.get(324) or ()
            planes = len(im.getbands()) if tags.get(284, 1) == 2 else 1
            if len(offsets) > -(-w // tile_w) * -(-h // tile_h) * planes:
                raise PreprocessError("The TIFF has more tiles than cover its picture; please "
                                      "save it as PNG or JPEG.")
        rows = tags.get(278)
        if rows is not None and len(tags.get(273) or ()) > -(-h // max(1, min(int(rows), h))) * 4:
            raise PreprocessError("The TIFF has more strips than cover its picture; please save "
                                  "it as PNG or JPEG.")


def _from_file(path) -> np.ndarray:
    with open_image(path) as im:
        return _from_pil(im)


def _from_pil(im) -> np.ndarray:
    """PIL image of any mode -> float array (H, W) grey or (H, W, 2) grey+alpha, in [0, 1]."""
    w, h = im.size
    if w * h > MAX_PIXELS:
        raise _too_big(w, h)
    if w == 0 or h == 0:
        raise BlankInputError("The image is empty (zero pixels).")
    im = _shrink(im)                                  # a no-op on what open_image returns
    if im.mode == "I":
        a = np.asarray(im, dtype=np.float64)
        bits16 = str(im.info.get("source_mode", "")).startswith("I;16")
        if a.min() < 0 or a.max() > 65535:            # 32-bit: its own range, as float images
            return _from_array(a)
        return np.clip(a / (65535.0 if bits16 or a.max() > 255 else 255.0), 0, 1)
    if im.mode == "F":
        return _from_array(np.asarray(im, dtype=np.float64))
    has_alpha = im.mode in ("RGBA", "LA", "PA", "La", "RGBa")
    try:
        if has_alpha:   # grey and alpha as separate 8-bit bands: PIL would premultiply RGBA
            rgba = im if im.mode in ("RGBA", "LA") else im.convert("RGBA")
            bands = [rgba.convert("L"), rgba.getchannel("A")]
        else:
            bands = [im.convert("L")]                 # CMYK, RGB, YCbCr … all end here
    except (ValueError, OSError):                     # LAB, HSV …: PIL has no conversion
        raise PreprocessError(f"Images in the {im.mode} colour mode can't be read; please save "
                              "it as an RGB or greyscale PNG or JPEG.") from None
    arrays = [np.asarray(b, dtype=np.float32) / 255.0 for b in bands]
    return arrays[0] if len(arrays) == 1 else np.stack(arrays, axis=-1)


# Modes PIL's reduce() does not take, and the mode each is reduced in.
_REDUCE_AS = {"1": "L", "I;16": "I", "I;16B": "I", "I;16L": "I", "I;16N": "I"}


def _shrink(im):
    """A PIL image box-averaged down to at most 2 x WORK_SIDE a side, in a mode reduce() takes
    (palette pictures become RGB(A), 1-bit L, 16-bit I). Built strip by strip, so that no
    full-size copy is made beside the decoded picture: a 40-megapixel upload then costs a few
    MB more, not a gigabyte of floats."""
    w, h = im.size
    factor = max(w, h) // (2 * WORK_SIDE) + 1
    mode = _REDUCE_AS.get(im.mode, im.mode)
    if im.mode in ("P", "PA"):
        mode = "RGBA" if im.mode == "PA" or "transparency" in im.info else "RGB"
    if factor == 1:
        return im if mode == im.mode else im.convert(mode)
    out = Image.new(mode, (-(-w // factor), -(-h // factor)))
    rows = 64 * factor                            # whole boxes per strip: the same result
    for top in range(0, h, rows):
        strip = im.crop((0, top, w, min(h, top + rows)))
        strip = strip if strip.mode == mode else strip.convert(mode)
        out.paste(strip.reduce(factor), (0, top // factor))
    return out


def _from_array(a: np.ndarray) -> np.ndarray:
    """numpy image -> float (H, W) or (H, W, 2) grey(+alpha) in [0, 1]."""
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise PreprocessError(f"Can't read an image from an array of {a.dtype}.")
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (2, 3, 4)):
        raise PreprocessError(f"Expected an image array of shape HxW, HxWx3 or HxWx4, got {a.shape}.")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise PreprocessError("The image is empty (zero pixels).")
    if a.shape[0] * a.shape[1] > MAX_PIXELS:
        raise _too_big(a.shape[1], a.shape[0])
    if a.dtype == bool:
        a = a.astype(np.float64)
    elif np.issubdtype(a.dtype, np.integer):
        top = {1: 255.0, 2: 65535.0}.get(a.dtype.itemsize, float(max(1, a.max())))
        a = a.astype(np.float64) / top
    else:
        a = a.astype(np.float64)
        if not np.isfinite(a).all():
            raise PreprocessError("The image contains NaN or infinite values.")
        lo, hi = a.min(), a.max()
        if lo >= 0 and hi <= 1:
            pass
        elif lo >= 0 and hi <= 255:
            a = a / 255.0
        else:                               # arbitrary range: stretch to [0, 1]
            # halved first, so that ranges near the float64 limit do not overflow to inf
            span = hi / 2 - lo / 2
            a = (a / 2 - lo / 2) / span if span > 0 else np.zeros_like(a)
    a = np.clip(a, 0, 1)
    if a.ndim == 2:
        return a
    grey = a[..., :3] @ np.array([0.299, 0.587, 0.114]) if a.shape[2] >= 3 else a[..., 0]
    if a.shape[2] in (2, 4):
        return np.stack([grey, a[..., -1]], axis=-1)
    return grey


def _layer_alpha(layer) -> np.ndarray | None:
    """A Sketchpad layer's alpha (H, W) uint8 — where the strokes are — or None without one."""
    if isinstance(layer, (str, os.PathLike, bytes, bytearray)):
        with open_image(layer) as im:
            if "A" not in im.getbands():
                return None
            return np.asarray(_shrink(im.getchannel("A")))
    a = np.asarray(layer)
    return a[..., 3] if a.ndim == 3 and a.shape[2] == 4 else None


def _from_sketchpad(value: dict) -> np.ndarray:
    """Gradio Sketchpad/ImageEditor value. With RGBA (the default) the strokes are in the layers'
    alpha; with L/RGB the layers lose alpha and only `composite` holds the strokes."""
    layers = value.get("layers")
    if layers is None:
        layers = []
    elif not isinstance(layers, (list, tuple)):   # a lone layer instead of a list of them
        layers = [layers]
    layers = [l for l in layers if l is not None]
    alpha = [a for a in map(_layer_alpha, layers) if a is not None]
    if len({a.shape for a in alpha}) > 1:
        raise PreprocessError("The drawing's layers differ in size; please clear and draw again.")
    if alpha and value.get("background") is None:
        ink = np.max(np.stack(alpha), axis=0).astype(np.float32) / 255.0
        if ink.max() > 0:
            # Black strokes on a transparent layer: ink = opacity. Present as white-on-black.
            return ink
    composite = value.get("composite")
    if composite is None:
        background = value.get("background")
        if background is None:
            raise BlankInputError("The canvas is empty: draw a digit first.")
        composite = background
    return _to_array(composite)


def _to_array(image) -> np.ndarray:
    if image is None:
        raise BlankInputError("No image was given: draw a digit or upload a picture.")
    if isinstance(image, dict):
        return _from_sketchpad(image)
    if isinstance(image, (str, os.PathLike, bytes, bytearray, memoryview)):
        return _from_file(image)
    if torch.is_tensor(image):
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        return _from_array(image)
    try:
        from PIL import Image
        if isinstance(image, Image.Image):
            return _from_pil(image)
    except ImportError:  # pragma: no cover
        pass
    raise PreprocessError(f"Can't read an image from a {type(image).__name__}.")


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


# --- photos of digits on paper ------------------------------------------------------------------
# Photographed paper lies under uneven light: a gradient, a vignette, the shadow of a hand or of
# the phone. Taking "darker than the border" for ink then reads the shadow, not the digit. For
# such photos the paper's own brightness is estimated (a morphological closing, which removes
# every dark feature as thin as a stroke and keeps the light's slow changes and the shadows'
# edges) and divided out; ink is what stays clearly darker than its paper, and only the stroke
# components that form the digit are kept. Clean drawings never come here: their background is
# one exact grey level, or flat.
PHOTO_MIN_SIDE = 96          # smaller pictures are icons or drawings, never photos of paper
PHOTO_SMALL = 128            # the paper's light and the strokes' scale are measured at this size
PHOTO_PARTS = 256            # the ink's connected components are found at this size
PHOTO_UNEVEN = 0.1           # paper whose brightness spans more than this (2nd-98th pct) is "uneven"
PHOTO_MIN_INK = 0.28         # ink is on average this much darker than its paper; shadows' edges are not
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
    from PIL import Image
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
    a small image). Raises PreprocessError when it is one but holds no plausible ink."""
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
    dark, level, noise = _darkness(grey, closed(radius))

    # The ink's components: the digit is the one with the most ink away from the border; with
    # it go the pieces near it and as dark (a 5's bar, a broken stroke), not specks, grain, or
    # the shadows' edges that cross the picture.
    h, w = dark.shape
    floor = max(0.08, 4 * noise)
    candidates = dark[dark > floor]
    if candidates.size == 0:
        raise PreprocessError(NO_INK_IN_PHOTO)
    contrast = float(np.percentile(candidates, 95))
    mask = dark > max(floor, 0.4 * contrast)
    rows, starts, ends, label, n = connected_runs(mask)
    if n == 0:
        raise PreprocessError(NO_INK_IN_PHOTO)
    csum = np.zeros((h, w + 1))
    csum[:, 1:] = np.cumsum(np.where(mask, dark, 0), axis=1)
    mass = np.bincount(label, csum[rows, ends] - csum[rows, starts], n)
    shade = mass / np.maximum(np.bincount(label, ends - starts, n), 1)        # mean darkness
    top, bottom = np.full(n, h), np.zeros(n, np.int64)
    left, right = np.full(n, w), np.zeros(n, np.int64)
    np.minimum.at(top, label, rows)
    np.maximum.at(bottom, label, rows)
    np.minimum.at(left, label, starts)
    np.maximum.at(right, label, ends - 1)
    border = (top == 0) | (left == 0) | (bottom == h - 1) | (right == w - 1)
    main = int(np.argmax(np.where(border, 0.1, 1.0) * mass))
    side = max(bottom[main] - top[main], right[main] - left[main]) + 1
    if border[main] or side < 0.03 * max(h, w) or shade[main] < max(PHOTO_MIN_INK, 2 * floor):
        raise PreprocessError(NO_INK_IN_PHOTO)
    pad = 0.3 * side
    keep = ((bottom >= top[main] - pad) & (top <= bottom[main] + pad) & (right >= left[main] - pad)
            & (left <= right[main] + pad) & ~border & (mass >= 0.05 * mass[main])
            & (shade >= 0.7 * shade[main]))
    keep[main] = True
    ink = _paint((h, w), rows, starts, ends, keep[label])
    t, b = top[keep].min(), bottom[keep].max() + 1
    l, r = left[keep].min(), right[keep].max() + 1

    # A stroke wider than the closing comes out as an outline around a hollow. Against the paper
    # seen at a radius no stroke survives, its core is as dark as the ink, shadows are not: fill
    # what is that dark between the outlines, and each hole in the ink that is that dark on the
    # whole (a 0's or an 8's loop is paper, and stays). Worked out around the digit only.
    wide = round(0.16 * max(small.shape))
    core = np.zeros((h, w), np.float32)
    if wide > radius:
        reach = round(wide * max(h, w) / max(small.shape))
        y0, y1, x0, x1 = max(0, t - reach), min(h, b + reach), max(0, l - reach), min(w, r + reach)
        around = ink[y0:y1, x0:x1]
        solid, _, _ = _darkness(grey, closed(wide))
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
        if inside.any():
            top_ink = max(float(np.percentile(solid[around], 95)), 1e-3)
            core[y0:y1, x0:x1] = np.where(inside, solid / top_ink, 0)
            ink[y0:y1, x0:x1] |= inside
            rows_, cols_ = np.nonzero(ink)
            t, b, l, r = rows_.min(), rows_.max() + 1, cols_.min(), cols_.max() + 1

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


# MNIST digits have strokes ~1.3-3.9 px wide in their 20x20 box; drawings made with a thinner or
# thicker pen are brought to a typical width before the downscale.
STROKE_RANGE = (1.25, 4.2)   # MNIST test digits: 0.5th-99.5th percentile is 1.3-3.9
STROKE_TARGET = 2.2           # MNIST median
CONTRAST = (0.05, 0.8)
SOFT_SCALE = 0.5              # resizing by this factor or further (2x either way) softens an edge
                              # by a whole pixel


def _sharpen(small: np.ndarray, scale: float) -> np.ndarray:
    """The anti-aliased downscale leaves strokes softer than MNIST's, whose cores saturate: the
    curve CONTRAST matches MNIST's share of pixels above 0.9 / 0.5 / 0.1 (measured on test
    digits). It undoes the softening of a resize, so it fades out as the scale nears 1: an input
    already at the model's scale (an MNIST digit) was not softened and keeps its levels."""
    strength = float(np.clip(abs(math.log(scale)) / math.log(1 / SOFT_SCALE), 0, 1))
    lo, hi = strength * CONTRAST[0], 1 - strength * (1 - CONTRAST[1])
    return np.clip((small - lo) / (hi - lo), 0, 1)


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
def decode(image) -> np.ndarray:
    """Read any input once into float32 grey (H, W) or grey+alpha (H, W, 2) in [0, 1]. Handing
    the result to `to_model_image` or `compact` gives what handing them the input would, so a
    caller that needs both decodes a drawing's files once, not twice."""
    return _to_array(image)


@_never_crashes
def to_model_image(image, style: str = "digits", size: int = 28) -> np.ndarray:
    """Any image -> float32 (size, size) in [0, 1], white ink on black, laid out like the training
    data (for "digits", the ink fills a box of 20/28 of the side, as in MNIST).

    `image`: a PIL image (any mode), a numpy array (H×W, H×W×3, H×W×4; uint8, uint16, float,
    bool), a file path, or a Gradio Sketchpad value dict. Raises PreprocessError (with a message
    for people) for missing, blank, unreadable or oversized input.
    """
    a = _to_array(image)
    # A photo of paper under uneven light: its ink, cropped at 5x the final digit box's detail.
    ink = _photo_ink(a, 5 * max(1, round(size * 20 / 28))) if style == "digits" else None
    if ink is None:
        ink = _area_downscale(_ink(a).astype(np.float32))
    lo, top, hi = contrast_range(ink)
    if hi - lo < MIN_CONTRAST:
        raise BlankInputError("The image looks blank: draw or upload a digit with some contrast.")
    # Stretch so that background -> 0 and the ink's strongest pixels -> 1 (paper tone, faint pencil).
    ink = np.clip((ink - lo) / max(top - lo, 1e-6), 0, 1)
    ink, h, w = _crop_to_ink(ink)                   # (h, w): the ink's box, inside the rim
    box = max(1, round(size * 20 / 28)) if style == "digits" else size
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
    if style == "digits":
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
    if style == "digits":
        small = _sharpen(small, scale)
    out = np.zeros((3 * size, 3 * size), np.float32)           # room to shift without clipping
    if style == "digits":
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


def _per_channel(v, channels: int) -> torch.Tensor:
    t = torch.as_tensor(v, dtype=torch.float32).reshape(-1)
    return t.expand(channels) if t.numel() == 1 else t


def normalize_image(img: np.ndarray, mean=0.1307, std=0.3081) -> torch.Tensor:
    """(S, S) grey or (S, S, C) in [0, 1] -> (1, C, S, S) tensor normalised per channel."""
    x = torch.from_numpy(np.ascontiguousarray(img, np.float32))
    x = x[None] if x.dim() == 2 else x.permute(2, 0, 1)                 # (C, S, S)
    C = x.shape[0]
    return ((x - _per_channel(mean, C)[:, None, None]) / _per_channel(std, C)[:, None, None])[None]


@_never_crashes
def preprocess(image, mean=0.1307, std=0.3081, style: str = "digits", size: int = 28,
               config=None) -> torch.Tensor:
    """Any image -> (1, C, S, S) float tensor normalised for a model: MNIST's layout and statistics
    by default, or those of a checkpoint's `config` (a `CheckpointConfig`: its data set's layout,
    image size, channels and per-channel normalisation). Raises PreprocessError for unusable input.
    """
    if config is not None:
        mean, std, size = config.mean, config.std, config.model.image_size
        if config.model.channels == 3:
            return normalize_image(to_rgb_image(image, size), mean, std)
        style = config.style
    return normalize_image(to_model_image(image, style, size), mean, std)


def on_white(image):
    """A PIL image of any mode -> RGB, its transparency flattened onto white (the page)."""
    from PIL import Image
    rgba = image.convert("RGBA")
    flat = Image.new("RGB", rgba.size, "white")
    flat.paste(rgba, mask=rgba.getchannel("A"))
    return flat


@_never_crashes
def to_rgb_image(image, size: int) -> np.ndarray:
    """Any image -> float32 (size, size, 3) in [0, 1] for colour models: the picture's centre
    square, resized (anti-aliased). Transparency is flattened onto white. Raises PreprocessError."""
    from PIL import Image
    if isinstance(image, dict) and isinstance(image.get("composite"), (bytes, str, os.PathLike)):
        image = image["composite"]          # a canvas or Sketchpad: its picture, colours kept
    if isinstance(image, (str, os.PathLike, bytes, bytearray)):
        with open_image(image) as im:
            return to_rgb_image(im.copy(), size)
    if (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3
            and image.shape[2] in (3, 4) and min(image.shape[:2]) > 0):
        return to_rgb_image(Image.fromarray(image), size)           # colour arrays keep colour
    if isinstance(image, Image.Image):
        w, h = image.size
        if w * h > MAX_PIXELS:
            raise _too_big(w, h)
        if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
            image = on_white(image)
        bands = [_shrink(b) for b in image.convert("RGB").split()]     # 8-bit, shrunk first
        a = np.stack([np.asarray(b, np.float32) for b in bands], axis=-1) / 255.0
    else:
        a = _from_array(np.asarray(image.detach().cpu() if torch.is_tensor(image) else image)
                        if not isinstance(image, dict) else _to_array(image))
        if a.ndim == 3:                                 # grey + alpha from _from_array
            a = a[..., 0]
        a = np.repeat(a[..., None], 3, axis=2)
    h, w = a.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    square = np.ascontiguousarray(a[top:top + side, left:left + side].transpose(2, 0, 1))
    t = torch.from_numpy(square)[None]                               # (1, 3, side, side)
    out = F.interpolate(t, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return out[0].permute(1, 2, 0).clamp_(0, 1).numpy()
