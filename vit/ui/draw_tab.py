"""The Draw tab: our own light canvas (vit/ui/canvas.py), what to draw for the loaded model, and
that model's examples — a click puts one on the canvas."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .canvas import DrawingCanvas


@dataclass
class DrawTab:
    pad: DrawingCanvas
    hint: gr.Markdown
    examples: gr.Gallery
    answered: gr.HTML         # the number of the last drawing answered (in the page, unseen)


def hint(noun: str, style: str) -> str:
    """What to draw, per model: clothing pictures are filled shapes, digits are strokes, and a
    photo model wants a photo: an example to draw over, or an upload."""
    if style == "photos":
        return (f"**Pick a picture below** or upload a {noun} on the Upload tab; draw over it with "
                f"the brush and the answer follows as you draw.")
    text = f"**Draw a {noun}** with a mouse, pen or finger — the answer follows as you draw."
    if style == "objects":
        text += " Draw its outline, then tap inside with **Fill**: the model learnt filled shapes."
    return text


def build(noun: str, style: str, examples: list[tuple[str, str]]) -> DrawTab:
    text = gr.Markdown(hint(noun, style), elem_id="draw-hint")
    pad = DrawingCanvas(elem_id="drawpad")
    gallery = gr.Gallery(examples, label="Examples (drawn by this project's code): click one",
                         columns=10, rows=1, height=120, allow_preview=False,
                         object_fit="contain", elem_id="draw-examples", buttons=[])
    answered = gr.HTML("", visible="hidden", elem_id="answered", js_on_load=None,
                       label="drawing number")
    return DrawTab(pad, text, gallery, answered)
