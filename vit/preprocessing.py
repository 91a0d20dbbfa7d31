"""Make any picture of a digit (or a garment) look like the data the model was trained on.

MNIST was made like this: the digit's ink was cropped to its bounding box, scaled to fit a 20x20
box keeping its aspect ratio (anti-aliased), and placed in a 28x28 image so that its centre of mass
sits at the centre. White ink on black. `to_model_image` repeats those steps for a drawing, a photo
or a scan; `preprocess` adds the model's normalisation. Fashion-MNIST instead fills the whole 28x28
frame and centres the bounding box, which `style="objects"` does.

Everything here is a pure function of its input: the app, the CLI and the tests call the same code.
"""
from __future__ import annotations

import functools
import io
import os
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

MAX_PIXELS = 40_000_000      # ~6300x6300: beyond this we refuse before decoding (memory, time)
MAX_FILE_BYTES = 50_000_000  # larger files are refused before they are opened
WORK_SIDE = 1024             # larger inputs are area-downscaled to this first: no visible change at 28 px
INK_THRESHOLD = 0.25         # fraction of the ink's contrast that counts as "ink" for the bounding box
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


def open_image(path):
    """Open an image file for reading, or raise PreprocessError with a one-line message.

    Checks run before any pixel is decoded: the file's size, then the pixel count from the header
    (PIL itself would only refuse above ~179 MP, with an exception of its own). The first frame of
    an animation is used, and the EXIF orientation applied, so a photo taken sideways is upright.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError
    if isinstance(path, (bytes, bytearray, memoryview)):       # an upload still in memory
        size, source, path = len(path), io.BytesIO(path), Path("<bytes>")
    else:
        path = source = Path(path)
        if path.is_dir():
            raise PreprocessError(f"{path.name} is a folder, not an image file.")
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise PreprocessError(f"No such file: {path.name}") from None
        except OSError:
            raise PreprocessError("That file can't be read.") from None
    if size == 0:
        raise PreprocessError("The file is empty (0 bytes).")
    if size > MAX_FILE_BYTES:
        raise PreprocessError(f"The file is {size / 1e6:.0f} MB; the limit is "
                              f"{MAX_FILE_BYTES // 1_000_000} MB. Please send a smaller image.")
    try:
        with warnings.catch_warnings():      # PIL's bomb *warning*: our own limit is lower
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(source)
        w, h = im.size
        if w * h > MAX_PIXELS:
            im.close()
            raise _too_big(w, h)
        im.seek(0)                                  # animated GIF/WebP: the first frame
        im.load()
        if im.getexif().get(0x0112, 1) == 1:        # upright already: no copy (40 MP = 160 MB)
            return im
        upright = ImageOps.exif_transpose(im)       # a copy, turned as its EXIF orientation says
        if upright is not None and upright is not im:
            im.close()                              # the copy holds the pixels: free the file
            return upright
        return im
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
    if im.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        a = np.asarray(im, dtype=np.float64)
        top = 65535.0 if im.mode.startswith("I;16") or a.max() > 255 else 255.0
        return np.clip(a / top, 0, 1)
    if im.mode == "F":
        return _from_array(np.asarray(im, dtype=np.float64))
    has_alpha = im.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        im.mode == "P" and "transparency" in im.info)
    try:
        if has_alpha:   # grey and alpha as separate 8-bit bands: PIL would premultiply RGBA
            rgba = im if im.mode in ("RGBA", "LA") else im.convert("RGBA")
            bands = [rgba.convert("L"), rgba.getchannel("A")]
        else:
            bands = [im.convert("L")]                 # CMYK, P, 1, RGB, YCbCr … all end here
    except (ValueError, OSError):                     # LAB, HSV …: PIL has no conversion
        raise PreprocessError(f"Images in the {im.mode} colour mode can't be read; please save "
                              "it as an RGB or greyscale PNG or JPEG.") from None
    arrays = [np.asarray(_shrink(b), dtype=np.float32) / 255.0 for b in bands]
    return arrays[0] if len(arrays) == 1 else np.stack(arrays, axis=-1)


def _shrink(im):
    """A single-band PIL image box-averaged down to at most 2 x WORK_SIDE a side: a
    40-megapixel upload then costs a few MB of floats, not a gigabyte."""
    factor = max(im.size) // (2 * WORK_SIDE)
    return im.reduce(factor + 1) if factor else im


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


def _resize(x: np.ndarray, h: int, w: int) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[None, None]
    return F.interpolate(t, size=(h, w), mode="bilinear", antialias=True,
                         align_corners=False)[0, 0].clamp_(0, 1).numpy()


def _crop_to_ink(ink: np.ndarray) -> np.ndarray:
    """Crop to the bounding box of the pixels that count as ink."""
    mask = ink > INK_THRESHOLD
    rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    if rows.size == 0:
        raise BlankInputError("The image looks blank: draw or upload a digit with some contrast.")
    return ink[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]


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
    ink = _area_downscale(_ink(_to_array(image)).astype(np.float32))
    step = max(1, max(ink.shape) // 256)        # percentiles of a subsample: same answer, 10x faster
    lo, hi = float(np.percentile(ink[::step, ::step], 1)), float(ink.max())
    if hi - lo < MIN_CONTRAST:
        raise BlankInputError("The image looks blank: draw or upload a digit with some contrast.")
    # Stretch so that background -> 0 and the ink's strongest pixels -> 1 (paper tone, faint pencil).
    strong = ink[ink > lo + INK_THRESHOLD * (hi - lo)]
    top = float(np.percentile(strong[::max(1, strong.size // 20000)], 90)) if strong.size else hi
    ink = np.clip((ink - lo) / max(top - lo, 1e-6), 0, 1)
    ink = _crop_to_ink(ink)
    mask = ink > INK_THRESHOLD
    h, w = ink.shape
    box = max(1, round(size * 20 / 28)) if style == "digits" else size
    if max(h, w) > 4 * box:
        # Work on the crop at 4x the final size: stroke analysis and morphology cost little
        # there and lose nothing that survives the final downscale.
        ink = _area_downscale(ink, 4 * box)
        mask = ink > INK_THRESHOLD
        h, w = ink.shape
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
                    ink = _crop_to_ink(changed)
                    h, w = ink.shape
                    scale = box / max(h, w)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    small = _resize(ink, nh, nw)
    if style == "digits":
        # The anti-aliased downscale leaves strokes softer than MNIST's, whose cores saturate:
        # this curve matches MNIST's share of pixels above 0.9 / 0.5 / 0.1 (measured on test digits).
        small = np.clip((small - CONTRAST[0]) / (CONTRAST[1] - CONTRAST[0]), 0, 1)
    out = np.zeros((3 * size, 3 * size), np.float32)           # room to shift without clipping
    if style == "digits":
        total = small.sum()
        if total <= 0:
            raise BlankInputError("The image looks blank: draw or upload a digit with some contrast.")
        cy = (small.sum(1) * np.arange(nh)).sum() / total       # centre of mass, in pixels
        cx = (small.sum(0) * np.arange(nw)).sum() / total
        top_, left = round(size / 2 - cy), round(size / 2 - cx)     # mass centre -> frame centre
    else:
        top_, left = (size - nh) // 2, (size - nw) // 2
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


@_never_crashes
def to_rgb_image(image, size: int) -> np.ndarray:
    """Any image -> float32 (size, size, 3) in [0, 1] for colour models: the picture's centre
    square, resized (anti-aliased). Transparency is flattened onto white. Raises PreprocessError."""
    from PIL import Image
    if isinstance(image, (str, os.PathLike)):
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
            flat = Image.new("RGB", image.size, "white")
            flat.paste(image.convert("RGBA"), mask=image.convert("RGBA").getchannel("A"))
            image = flat
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
