"""The Upload tab: a picture from disk or the clipboard (examples are on the Draw tab)."""
from __future__ import annotations

from .gradio_patches import SafeImage


def build():
    return SafeImage(type="filepath", image_mode=None, sources=["upload", "clipboard"],
                     label="Upload or paste a picture (for digits, a photo of one on paper works too)",
                     elem_id="upload", height=420)
