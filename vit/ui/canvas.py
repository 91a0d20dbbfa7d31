"""A light drawing canvas of our own: `DrawingCanvas`, a gr.HTML whose script (canvas.js) draws
in the browser and sends the server a small PNG of the ink while the pen moves and when it
lifts; `read_drawing` turns what it sends into input for vit.preprocessing, refusing anything
else a client might send in its place.

Why not gr.Sketchpad: it uploaded several full-size layer files per stroke (~1.2 s from pen lift
to the label here) and nothing while the pen was down; it started with no tool selected."""
from __future__ import annotations

import base64
import binascii
import functools
import struct
from pathlib import Path

import gradio as gr
import numpy as np

from vit.preprocessing.colour import on_white
from vit.preprocessing.decode import PreprocessError, open_image

HERE = Path(__file__).parent
PREFIX = "data:image/png;base64,"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_CHARS = 1_500_000        # a 400x400 drawing is a few KB, a photo on it ~0.5 MB
CANVAS_SIDE = 400            # canvas.js's SIDE
MAX_SIDE = 2048              # a drawing sent by an API client may be larger, not a poster
BRUSH, ERASER = 13, 24       # radii in canvas pixels (of 400): strokes ~6.5 % of the side, as MNIST's

TEMPLATE = f"""
<div class="pad" data-brush="{BRUSH}" data-eraser="{ERASER}">
  <div class="tools" role="toolbar" aria-label="Drawing tools">
    <button type="button" data-tool="brush" aria-label="Brush" title="Brush"
      ><span class="ic">✎</span> Brush</button>
    <button type="button" data-tool="eraser" aria-label="Eraser" title="Eraser">Eraser</button>
    <button type="button" data-tool="fill" aria-label="Fill"
      title="Fill: tap inside a closed outline to colour it in">Fill</button>
    <button type="button" data-act="undo" aria-label="Undo" title="Undo (Ctrl+Z)"
      ><span class="ic">↶</span> Undo</button>
    <button type="button" data-act="clear" aria-label="Clear canvas" title="Clear"
      ><span class="ic">✕</span> Clear</button>
    <button type="button" data-tool="scroll" aria-label="Scroll" class="scroll-tool"
      title="Scroll: a finger on the canvas scrolls the page instead of drawing"
      ><span class="ic">↕</span> Scroll</button>
  </div>
  <canvas tabindex="0" aria-label="Drawing area: draw with a mouse, pen or finger"></canvas>
</div>
"""


@functools.cache
def _page_parts() -> tuple[str, str]:
    """The canvas's style and script, read once for every per-session copy Gradio makes."""
    return (HERE / "canvas.css").read_text(), (HERE / "canvas.js").read_text()


class DrawingCanvas(gr.HTML):
    """The canvas. Its value, as the browser sends it: {"png": a PNG data URL or None (an empty
    canvas), "seq": n (counting sends), "example": its name while an example is on it}, with a
    "live" event while the pen is down and a "lift" event when it lifts. Sent to
    it: {"load": a data URL or None, "seq": n} puts that picture on the canvas (or clears it),
    which then sends it back."""

    def __init__(self, **kwargs):
        css, js = _page_parts()
        super().__init__(value=None, html_template=TEMPLATE, css_template=css, js_on_load=js,
                         **kwargs)

    def api_info(self):
        return {"type": "object", "properties": {
            "png": {"type": "string", "description": "a PNG data URL: black ink on transparency "
                                                     "(null: an empty canvas)"},
            "seq": {"type": "integer", "description": "which send this is (the page echoes it "
                                                      "when answered)"}},
            "example": {"png": PREFIX + "…", "seq": 1}}

    def example_payload(self):
        return {"png": None}

    def example_value(self):
        return {"png": None}


def read_drawing(value) -> dict | None:
    """The canvas's value -> an input for vit.preprocessing (the PNG as the ink layer), or None
    for an empty canvas. Raises PreprocessError, with one line for people, for anything else:
    a client may send any JSON here, and no part of it may name a file on the server."""
    if value is None or value == "":
        return None
    if not isinstance(value, dict):
        raise PreprocessError('A drawing is sent as {"png": "data:image/png;base64,…"}.')
    png = value.get("png")
    if png is None:
        return None
    if not isinstance(png, str) or not png.startswith(PREFIX):
        raise PreprocessError("The drawing must be a PNG data URL (data:image/png;base64,…).")
    if len(png) > MAX_CHARS:
        raise PreprocessError(f"The drawing is {len(png) / 1e6:.1f} MB; a drawing is a few KB. "
                              "Upload large pictures on the Upload tab.")
    try:
        data = base64.b64decode(png[len(PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise PreprocessError("The drawing's PNG data is not valid base64.") from None
    # Its header, before any decoder sees it: a PNG (not a TIFF or WebP under a PNG's name),
    # of at most MAX_SIDE a side, on every path (grey models read it too, not only colour ones).
    if len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise PreprocessError("The drawing's data is not a PNG.")
    w, h = struct.unpack(">II", data[16:24])
    if max(w, h) > MAX_SIDE:
        raise PreprocessError(f"The drawing is {w}x{h} pixels; the canvas is {CANVAS_SIDE}. "
                              f"Upload large pictures on the Upload tab.")
    # Ink is the alpha channel; a PNG without one (a client's black-on-white picture) is read grey.
    return {"background": None, "layers": [data], "composite": data}


def colour_picture(drawing: dict) -> np.ndarray:
    """`read_drawing`'s result -> its picture in colour, (H, W, 3) uint8 at most 400 px a side,
    transparency flattened onto white (the page under the canvas): what a colour model reads — a
    photo put on the canvas and anything drawn over it (over 2048 px a side, `read_drawing`
    refused it from its header). Raises PreprocessError."""
    with open_image(drawing["composite"]) as im:
        flat = on_white(im)
    flat.thumbnail((CANVAS_SIDE, CANVAS_SIDE))       # kept per visitor: the canvas's size at most
    return np.asarray(flat)


def seq(value) -> str:
    """The drawing's sequence number, echoed to the page (#answered) with its answer: tests and
    bench/draw_latency.py time from the pen lifting to the answer for the finished drawing."""
    n = value.get("seq") if isinstance(value, dict) else None
    return str(n) if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**53 else ""


def drawing_value(ink, seq: int = 1) -> dict:
    """What the canvas sends for a drawing: `ink` (H, W) uint8, 255 = full ink (or a path to
    a PNG whose alpha is the ink). For API clients, tests and benches."""
    import io

    import numpy as np
    from PIL import Image
    if isinstance(ink, (str, Path)):
        data = Path(ink).read_bytes()
    else:
        rgba = np.zeros((*np.shape(ink), 4), np.uint8)
        rgba[..., 3] = ink
        buf = io.BytesIO()
        Image.fromarray(rgba, "RGBA").save(buf, "PNG")
        data = buf.getvalue()
    return {"png": PREFIX + base64.b64encode(data).decode(), "seq": seq}


def load_value(png_bytes: bytes | None, seq: int, colour: bool = False) -> dict:
    """A value that puts a picture on the canvas, or clears it (None): black on white becomes
    ink (a drawing), or with `colour` the picture goes on as it is (a photo for a colour model)."""
    url = None if png_bytes is None else PREFIX + base64.b64encode(png_bytes).decode()
    return {"load": url, "seq": seq, **({"colour": True} if colour else {})}
