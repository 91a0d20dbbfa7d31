"""The Upload tab: a picture from disk or the clipboard, and the project's own examples."""
from __future__ import annotations

import gradio as gr

from .gradio_patches import SafeImage


def build(examples: list[str]):
    upload = SafeImage(type="filepath", image_mode=None, sources=["upload", "clipboard"],
                       label="Upload or paste a picture", elem_id="upload", height=420)
    gr.Examples(examples, inputs=upload, label="Examples (drawn by this project's code)",
                examples_per_page=10, cache_examples=False)
    return upload
