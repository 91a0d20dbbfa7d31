"""The "How it learned" panel: the input on screen through the checkpoint's training snapshots
(vit/explain/over_training.py) as a filmstrip, and the answer at each in words. Drawn only while
the panel is open."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import gradio as gr
import numpy as np

from vit.explain.faithful import spearman
from vit.inference import Analysis, Predictor
from vit.pictures.attention_maps import uniform_level
from vit.pictures.over_training import filmstrip
from vit.text import confidence, correlation, md
from vit.training import snapshots
from vit.ui.boundary import Percent
from vit.ui.gradio_patches import FreeSlider
from vit.ui.words import alt, caption

PLAIN = ("The same input through the model as it was early in training and at the end: where "
         "[CLS] gathered from, how the positions were told apart, and what it answered.")
PRECISE = (
    "The trainer keeps the weights after 1 %, 10 % and 50 % of its steps (`--snapshots`; float16) "
    "in the checkpoint's `snapshots/` folder; the last column is the finished checkpoint. Top "
    "row: attention rollout into the final [CLS] over the input, on one scale for every column. "
    "Bottom row: the cosine similarity of the chosen patch's position embedding (outlined) with "
    "every patch's (the ViT paper's Figure 7, centre), on the fixed scale −1 (blue) to 1 (red): "
    "random at the start, it becomes a smooth bump around the patch as the model learns where "
    "things are. "
    "The answers use the finished model's temperature for every column.")
# (Where another model kept them, the panel's title names it: these words send the visitor there
# first, as the title does — a trial read the title's "choose it in the Model menu" and, below
# it, only "train one", and a slider that moved nothing.)
# (in a visitor's words: an eighth trial read the flags and commands once here as a teacher's
# dead end; how to keep snapshots is docs/experiments.md's)
NONE = ("This model kept no training snapshots: no pictures of itself while it learned, so there "
        "is nothing to show here. The model this panel's title names kept them: choose it in the "
        "Model menu at the top of the page to watch it learn. (A model you train yourself with "
        "this project's trainer keeps them too.)")


UNREADABLE = ("This model's training snapshots could not be read (damaged, or made for another "
              "model), so there is nothing to show.")


@dataclass(frozen=True)
class TrainingPanel:
    accordion: gr.Accordion
    when: gr.Slider
    frame: gr.Image
    picture: gr.Image
    text: gr.Markdown


TITLE = "How it learned (attention over training)"


def label(models, name: str) -> str:
    """The panel's title for model `name`: for a model that kept no snapshots, which models did
    (a visitor on the default model otherwise never learns the panel exists)."""
    if models.learned(name):
        return TITLE
    titles = [t for t, n in models.choices() if models.learned(n)]
    # (short: a phone wrapped the sentence it was to four centred lines, its arrow pushed out)
    return f"How it learned: only for {' or '.join(titles)}, in the Model menu"


def build(visible: bool = True, title: str = TITLE) -> TrainingPanel:
    with gr.Accordion(title, open=False, visible=visible, elem_id="learned") as accordion:
        gr.Markdown(caption(PLAIN, PRECISE))
        when = FreeSlider(0, 100, value=100, step=1, label="How far into training (%)",
                         info="the kept snapshot nearest to it is shown large",
                         elem_id="learned-when")
        frame = gr.Image(label="That moment", interactive=False,
                         alt_text=alt("learned-frame"), elem_id="learned-frame",
                         buttons=["download"], height=360)
        picture = gr.Image(label="Every kept moment, in order", interactive=False,
                           buttons=["download", "fullscreen"],
                               alt_text=alt("learned-picture"), elem_id="learned-picture")
        text = gr.Markdown(elem_id="learned-text")
    return TrainingPanel(accordion, when, frame, picture, text)


def nearest(frames: list, at) -> int:
    """The frame nearest to `at` percent of training (anything not a number: the end)."""
    try:
        at = float(at)
    except (TypeError, ValueError, OverflowError):
        at = 100.0
    at = min(100.0, max(0.0, at)) if at == at else 100.0            # NaN: the end
    done = [100 * f.step / f.of if f.of else 100.0 for f in frames]
    return min(range(len(frames)), key=lambda i: (abs(done[i] - at), -i))


def chosen_patch(p: Predictor, patch) -> int:
    """The page's chosen patch (0-based), or the centre."""
    return patch if isinstance(patch, int) and 0 <= patch < p.grid ** 2 else \
        (p.grid // 2) * p.grid + p.grid // 2


def frames_of(p: Predictor, a: Analysis, patch) -> list:
    """The input through the training snapshots (forward passes, kept per input and patch):
    computed before the panel is drawn (vit/ui/page.py `view`)."""
    return p.over_training(a.image, chosen_patch(p, patch))


def render(p: Predictor, a: Analysis, patch: int | None, at=100,
           frames: list | None = None) -> tuple[np.ndarray | None, np.ndarray | None, str]:
    """(the filmstrip or None, the frame nearest `at` % of training drawn large or None, the
    words) for the analysed input and its `frames` (`frames_of`); `patch`: the page's chosen
    patch (0-based), or None for the centre."""
    chosen = chosen_patch(p, patch)
    frames = frames_of(p, a, patch) if frames is None else frames
    if not frames:
        return None, None, (UNREADABLE if snapshots.listed(p.checkpoint.folder) else NONE)
    names = p.class_names
    i = nearest(frames, at)
    f = frames[i]
    order = np.argsort(f.probs)[::-1][:3]
    then = ", ".join(f"**{md(names[c])}** ({confidence(float(f.probs[c]))})" for c in order)
    said = "; ".join(f"{g.name}: {md(names[int(g.probs.argmax())])} "
                     f"({confidence(float(g.probs.max()))})" for g in frames)
    text = f"At {f.name} it answered {then}. Over training — {said}." + settled(frames)
    return (filmstrip(a.image, frames, chosen, names, marked=i),
            filmstrip(a.image, [f], chosen, names, tile=300), text)


# No patch's rollout share moving by half an even share over training: "hardly moved" (with
# 17 tokens, as the 139 k model's, 2.9 points).
SETTLED = 0.5


def settled(frames: list) -> str:
    """Where attention hardly moved over training, the words say so: the top row's maps are on
    one honest scale, so a near-even rollout that barely changes shows as barely changing."""
    first, last = frames[0].rollout, frames[-1].rollout
    limit = SETTLED * uniform_level(first.shape[0])
    if len(frames) < 2 or float(np.abs(last - first).max()) >= limit:
        return ""
    rho = spearman(first.ravel(), last.ravel())
    return (f" Where [CLS] gathered from hardly moved over training (no patch's share changed "
            f"by {100 * limit:.1f} percentage points or more; rank correlation of the first and last maps "
            f"{correlation(rho)}), so the top row barely changes: what the model learnt is elsewhere, in "
            f"what its layers do with the tokens, and (bottom row) in where each patch is.")


OPEN = "learned_open"        # drawn only while open (vit/ui/panels.py)
LEARNED = ("learned", "learned_frame", "learned_text")
VIEWS = {LEARNED: lambda v: render(v.p, v.a, v.patch, v.learned_at, v.frames)}


def place(ctx) -> TrainingPanel:
    """Shown where some model kept snapshots; its title says which (`label`), and follows a
    model switch."""
    return build(visible=ctx.models.learned(), title=label(ctx.models, ctx.models.default))


def components(c: TrainingPanel) -> dict:
    return {"learned": c.picture, "learned_text": c.text, "learned_frame": c.frame,
            "learned_panel": c.accordion}


def learned_when(page, visit, at: Percent) -> dict:
    """The slider: how far into training (the nearest snapshot is shown)."""
    return page.choose(visit, learned_at=at)


def wire(w, c: TrainingPanel) -> None:
    w.on(c.when.change, functools.partial(learned_when, w.page), [c.when], w.QUICK,
         trigger_mode="always_last", **w.QUIET)
    w.opens(OPEN, c.accordion)
