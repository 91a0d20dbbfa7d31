"""The Upload tab: a picture from disk or the clipboard (examples are on the Draw tab)."""
from __future__ import annotations

import gradio as gr

from vit.ui.gradio_patches import SafeImage


def build():
    # The note above the box, not in its label: a long label ran under the box's buttons.
    gr.Markdown("PNG, JPEG, WebP, GIF, BMP or TIFF. For digits, a photo of one written on paper "
                "works too.", elem_id="upload-hint")
    return SafeImage(type="filepath", image_mode=None, sources=["upload", "clipboard"],
                     label="Upload or paste a picture", elem_id="upload", height=420)
