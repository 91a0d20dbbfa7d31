"""The "How it learned" panel: the input on screen through the checkpoint's training snapshots
(vit/explain/over_training.py) as a filmstrip, and the answer at each in words. Drawn only while
the panel is open."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import numpy as np

from vit.inference import Analysis, Predictor
from vit.pictures.over_training import filmstrip
from vit.text import md
from vit.ui.words import caption

PLAIN = ("The same input through the model as it was early in training and at the end: where "
         "[CLS] gathered from, how the positions were told apart, and what it answered.")
PRECISE = (
    "The trainer keeps the weights after 1 %, 10 % and 50 % of its steps (`--snapshots`; float16) "
    "in the checkpoint's `snapshots/` folder; the last column is the finished checkpoint. Top "
    "row: attention rollout into the final [CLS] over the input, on one scale for every column. "
    "Bottom row: the cosine similarity of the chosen patch's position embedding (outlined) with "
    "every patch's (the ViT paper's Figure 7, centre), on the fixed scale −1 to 1: random at the "
    "start, it becomes a smooth bump around the patch as the model learns where things are. "
    "The answers use the finished model's temperature for every column.")
NONE = ("This model keeps no training snapshots: it was trained before the trainer kept them, or "
        "with `--snapshots none`. Train one with `python -m vit.train` (or `python -m vit.sweep`), "
        "which keeps them, to watch it learn.")


@dataclass(frozen=True)
class TrainingPanel:
    accordion: gr.Accordion
    picture: gr.Image
    text: gr.Markdown


def build() -> TrainingPanel:
    with gr.Accordion("How it learned (attention over training)", open=False,
                      elem_id="learned") as accordion:
        gr.Markdown(caption(PLAIN, PRECISE))
        picture = gr.Image(label="This input through the model during training", interactive=False,
                           buttons=["download", "fullscreen"], elem_id="learned-picture")
        text = gr.Markdown(elem_id="learned-text")
    return TrainingPanel(accordion, picture, text)


def render(p: Predictor, a: Analysis, patch: int | None) -> tuple[np.ndarray | None, str]:
    """(the filmstrip or None, its words) for the analysed input; `patch`: the page's chosen patch
    (0-based), or None for the centre."""
    chosen = patch if isinstance(patch, int) and 0 <= patch < p.grid ** 2 else \
        (p.grid // 2) * p.grid + p.grid // 2
    frames = p.over_training(a.image, chosen)
    if len(frames) == 1:
        return None, NONE
    names = p.class_names
    said = "; ".join(f"{f.name}: **{md(names[int(f.probs.argmax())])}** "
                     f"({100 * float(f.probs.max()):.0f} %)" for f in frames)
    return filmstrip(a.image, frames, chosen, names), f"What it answered — {said}."
