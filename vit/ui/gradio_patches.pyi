"""Everything this app changes about Gradio 6.31, in one place, each with the reason.

1. `save_pil_to_cache` rewrites hash-named output files in place: two visitors who get the same
   picture race, and a download is cut off ("Too little data for declared Content-Length";
   bench/load.py: 4 of 500 before). Written once, atomically, instead.
2. `gr.Image` and `gr.Sketchpad` decode uploads with PIL before the app sees them: an empty file,
   random bytes, HEIC, a PNG text-chunk bomb or a >179-megapixel image then fails inside Gradio
   with a multi-line message showing server paths, and a 13000x13000 drawing is decoded in full
   (the server went from 1.5 to 4.5 GB). `SafeImage` and `SafeSketchpad` hand the app the
   uploaded file's path (or bytes) untouched; vit.preprocessing checks size and pixel count before
   decoding anything, and answers in one line.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import gradio as gr
from gradio.data_classes import FileData

_patched = False


def never_rewrite_cached_images() -> None:
    """Patch 1 (idempotent): a hash-named file is written once, under a temporary name, then
    renamed into place."""
    global _patched
    if _patched:
        return
    from gradio import processing_utils as pu

    def save_pil_to_cache(img, cache_dir, name="image", format="webp"):
        data = pu.encode_pil_to_bytes(img, format)
        folder = Path(cache_dir) / pu.hash_bytes(data)
        path = (folder / f"{name}.{format}").resolve()
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        return str(path)

    pu.save_pil_to_cache = save_pil_to_cache
    _patched = True

from gradio.events import Dependency

class SafeImage(gr.Image):
    """gr.Image(type="filepath") that passes the uploaded file on without opening it."""

    def preprocess(self, payload):
        if payload is None:
            return None
        if payload.path and not (payload.url or "").startswith("data:"):
            return str(payload.path)
        try:                                   # a pasted data: URL: Gradio decodes it
            return super().preprocess(payload)
        except Exception:
            raise gr.Error("That picture could not be read; try saving it as PNG or JPEG.",
                           print_exception=False) from None
    from typing import Callable, Literal, Sequence, Any, TYPE_CHECKING
    from gradio.blocks import Block
    if TYPE_CHECKING:
        from gradio.components import Timer
        from gradio.components.base import Component


class SafeSketchpad(gr.Sketchpad):
    """gr.Sketchpad whose background, layers and composite reach the app as file paths (or
    bytes), never decoded by Gradio."""

    def convert_and_format_image(self, file, flatten_on_white: bool = False):
        if file is None:
            return None
        return str(file.path) if isinstance(file, FileData) else bytes(file)
    from typing import Callable, Literal, Sequence, Any, TYPE_CHECKING
    from gradio.blocks import Block
    if TYPE_CHECKING:
        from gradio.components import Timer
        from gradio.components.base import Component