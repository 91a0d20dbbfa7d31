"""The "Where the answer forms" panel: the patch logit lens (vit/explain/logit_lens.py) of the
input on screen, for the class the Why panel explains. Drawn only while the panel is open."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import numpy as np

from vit.explain.logit_lens import LogitLens
from vit.inference import Analysis, Predictor
from vit.pictures.logit_lens import lens_picture
from vit.text import confidence, md, percent
from vit.ui.why_panel import target_class
from vit.ui.words import alt, caption

PLAIN = ("Each map asks the model's own classifier what it would answer if the network stopped "
         "after that layer: from each patch's token (the colours) and from [CLS] (under each map).")
PRECISE = (
    "After every layer, each token goes through the final LayerNorm and the classifier head, "
    "then the checkpoint's temperature and a softmax: the \"logit lens\" (nostalgebraist, 2020), "
    "here for every patch token as well as [CLS]. The colour is one patch token's probability of "
    "the chosen class, on the same 0–1 scale on every map; the tick marks chance (1 / classes).\n\n"
    "**What it shows:** at which depth [CLS] already carries the answer, and which patch tokens "
    "point in the direction of a class. **What it does not show:** the head was trained only on "
    "the last layer's [CLS], so early layers speak another \"language\": a flat or wrong early "
    "answer does not prove the information is absent there (a tuned lens, Belrose et al. 2023, "
    "fits a probe per layer instead). A patch token that \"answers 7\" is not evidence that this "
    "patch caused the 7: the deletion test under \"What drove the answer\" measures that.")


@dataclass(frozen=True)
class LensPanel:
    accordion: gr.Accordion
    picture: gr.Image
    text: gr.Markdown


def build() -> LensPanel:
    with gr.Accordion("Where the answer forms (logit lens)", open=False, elem_id="lens") as accordion:
        gr.Markdown(caption(PLAIN, PRECISE))
        picture = gr.Image(label="What each layer's tokens would answer", interactive=False,
                           buttons=["download", "fullscreen"],
                               alt_text=alt("lens-picture"), elem_id="lens-picture")
        text = gr.Markdown(elem_id="lens-text")
    return LensPanel(accordion, picture, text)


def summary(p: Predictor, lens: LogitLens, target: int, image: np.ndarray | None = None) -> str:
    """In words: where [CLS] settles on the class, and where its patches speak for it most;
    `image` (the model's input), to say when that patch holds no ink."""
    name, depth = md(p.class_names[target]), lens.depth
    at = lens.forms_at(target)
    if at is None:
        settles = (f"[CLS] never gives **{name}** half the probability and keeps it: after the "
                   f"last layer it gives it {confidence(lens.cls[-1, target])}.")
    elif at == 1:
        settles = f"[CLS] gives **{name}** more than half the probability from layer 1 on."
    else:
        settles = (f"[CLS] settles on **{name}** after layer {at} of {depth} (more than half the "
                   f"probability from there to the end).")
    last = lens.patches[-1, :, :, target]
    g = p.grid
    row, col = divmod(int(last.argmax()), g)
    share = float((lens.patches[-1].argmax(-1) == target).mean())
    said = (f"{settles} After the last layer, {percent(share)} of the patch tokens would "
            f"answer **{name}** themselves; the most sure is patch {row * g + col + 1} "
            f"(row {row + 1}, column {col + 1}), at {confidence(float(last.max()))}.")
    if image is not None and blank(image, g, row, col):
        # A visitor reads "most sure" as "the patch that shows it": after the last layer a
        # token holds what attention brought it from the others, so say so where it has no ink.
        said += (" That patch is blank: its token answers with what attention carried to it "
                 "from the inked patches, not with anything drawn there.")
    return said


def blank(image: np.ndarray, grid: int, row: int, col: int) -> bool:
    """Whether patch (row, col) of a drawing (white ink on black) holds no ink; a colour
    picture's patches are never called blank."""
    if image.ndim != 2:
        return False
    s = image.shape[0] // grid
    return float(image[row * s:(row + 1) * s, col * s:(col + 1) * s].max()) < 0.1


def render(p: Predictor, a: Analysis, target, lens: LogitLens) -> tuple[np.ndarray, str]:
    """(the picture, its words) for the analysed input, the page's target class and the input's
    logit lens (`Predictor.lens`, computed before)."""
    t = target_class(p, a.probs, target)
    return lens_picture(a.image, lens, t, p.class_names), summary(p, lens, t, a.image)


OPEN = "lens_open"           # drawn only while open (vit/ui/panels.py)
LENS = ("lens", "lens_text")
VIEWS = {LENS: lambda v: render(v.p, v.a, v.target, v.lens)}


def place(ctx) -> LensPanel:
    return build()


def components(c: LensPanel) -> dict:
    return {"lens": c.picture, "lens_text": c.text}


def wire(w, c: LensPanel) -> None:
    w.opens(OPEN, c.accordion)
