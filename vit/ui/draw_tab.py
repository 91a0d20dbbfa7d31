"""The Draw tab: our own light canvas (vit/ui/canvas.py), what to draw for the loaded model, and
that model's examples — a click puts one on the canvas."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from vit.ui.canvas import DrawingCanvas


@dataclass
class DrawTab:
    pad: DrawingCanvas
    hint: gr.Markdown
    examples: gr.Gallery
    answered: gr.HTML         # the number of the last drawing answered (in the page, unseen)


# What to draw, per preprocessing style (vit/preprocessing/styles.py): digits are strokes,
# clothing pictures are filled shapes, and a photo model wants a photo to draw over, or an upload.
DRAW = "**Draw a {noun}** with a mouse, pen or finger — the answer follows as you draw."
HINTS = {"digits": DRAW,
         "objects": DRAW + " Draw its outline, then tap inside with **Fill**: the model learnt "
                           "filled shapes.",
         "photos": "**Pick a picture below** or upload a {noun} on the Upload tab. Then try "
                   "hiding part of it with the brush: the answer follows as you draw, and shows "
                   "what the model needed to see."}


def hint(noun: str, style: str) -> str:
    """What to draw for a model: `noun` ("digit") and its style's name."""
    return HINTS.get(style, DRAW).format(noun=noun)


def build(noun: str, style: str, examples: list[tuple[str, str]]) -> DrawTab:
    text = gr.Markdown(hint(noun, style), elem_id="draw-hint")
    pad = DrawingCanvas(elem_id="drawpad")
    # Shown on phones only (page.css): there a finger on the canvas draws.
    gr.Markdown("A finger on the canvas draws: to scroll the page, swipe beside it or choose "
                "**↕ Scroll**.", elem_id="scroll-hint")
    gallery = gr.Gallery(examples, label="Examples (drawn by this project's code): click one",
                         columns=5, rows=2, height="auto", allow_preview=False,
                         object_fit="contain", elem_id="draw-examples", buttons=[])
    answered = gr.HTML("", visible="hidden", elem_id="answered", js_on_load=None,
                       label="drawing number")
    return DrawTab(pad, text, gallery, answered)
