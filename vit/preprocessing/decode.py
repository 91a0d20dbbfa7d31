"""Reading a picture, once and within bounds: every file, PIL image, array or canvas value
the app, the CLIs and the trainer read goes through `open_image` / `decode`, which check the
size and pixel count from the header before any pixel is decoded (docs/hosting.md).
"""
from __future__ import annotations

import functools
import io
import os
import threading
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image

MAX_PIXELS = 40_000_000      # ~6300x6300: beyond this we refuse before decoding (memory, time)
MAX_FILE_BYTES = 50_000_000  # larger files are refused before they are opened
WORK_SIDE = 1024             # larger inputs are area-downscaled to this first: no visible change at 28 px


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
            # Every step that touches pixels inside the limit: a PNG's EXIF can sit after its
            # pixel data, so getexif() decodes them (6 decodes at once escaped it, +1.3 GB).
            with _DECODES:
                turn = _UPRIGHT.get(im.getexif().get(0x0112, 1))
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


@_never_crashes
def decode(image) -> np.ndarray:
    """Read any input once into float32 grey (H, W) or grey+alpha (H, W, 2) in [0, 1]. Handing
    the result to `to_model_image` or `compact` gives what handing them the input would, so a
    caller that needs both decodes a drawing's files once, not twice."""
    return _to_array(image)
