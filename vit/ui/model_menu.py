"""The model menu's handlers: a switch to another model (its sliders, classes, examples and
card), the input on screen read again by it, and the examples offered with it. Mixed into
`Page` (vit/ui/page.py), whose `predictor`, `models`, `answers`, `examples`, `_reread`,
`_commit` and `view` they use."""
from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import gradio as gr
import numpy as np
from PIL import Image

from vit.data.examples import example_name
from vit.inference import Predictor
from vit.text import md
from vit.ui import draw_tab, training_panel, views, why_panel
from vit.ui.boundary import ModelName
from vit.ui.canvas import load_value
from vit.ui.record import ANSWER, Shown, Visit


class ModelHandlers:
    def choose_model(self, visit: Visit, name: ModelName):
        """Switch models; on a broken one say why and stay on the previous one."""
        base = visit.record
        try:
            p = self.predictor(name)
        except gr.Error as e:
            gr.Warning(e.message)
            return {"model": gr.update(value=base.model, choices=self.models.choices())}
        if name == base.model:                     # the same model chosen again: no switch
            return {}
        # A drawing means nothing to a photo model, nor a photo to a drawing model: across that
        # line the new model's own first example goes on the canvas, or the visitor's last
        # drawing for that kind of model (reanalyse then waits for the canvas to send it).
        crossing = self._crosses(base.model, name)
        back, aside = self._set_aside(base, name) if crossing else (None, base.set_aside)
        cfg = p.model.cfg
        visit.commit(base, replace(base, model=name, patch=None, layer=cfg.depth, head=1,
                                   target=ANSWER, heads_off=(), set_aside=aside,
                                   test_ready=self.answers.ready(name)))
        layer, head = views.slider_updates(p)
        target, heads = why_panel.model_updates(p)
        return {"card": p.card(), "layer": layer, "head": head, "target": target,
                "heads_off": heads, "hint": draw_tab.hint(p.config.noun, p.config.style.name),
                "examples": gr.update(value=self.gallery(p), selected_index=None,
                                      label=self.gallery_label(p)),
                # A new kind of model's example starts the canvas afresh (Undo would bring back a
                # drawing made for the other model), or the visitor's own last drawing for it.
                "pad": ({**(self.first_view(name) if back is None else self._put_back(back, p)),
                         "reset": True} if crossing else gr.update()),
                # "How it learned": its title says which models kept snapshots.
                "learned_panel": gr.update(visible=self.models.learned(),
                                           label=training_panel.label(self.models, name))}

    def reanalyse(self, visit: Visit):
        """After a model switch: the input on screen through the new model — unless the visitor
        sent a newer drawing (or cleared the canvas) meanwhile: its own answer then stands."""
        base = visit.record
        shown, name = base.shown, base.model
        if shown is None or shown.model == name:   # nothing to read again: the headline may
            return self.view(base, ("status",), visit=visit)    # still name the model (what to draw)
        if shown.kind == "drawing" and isinstance(shown, Shown) and self._crosses(shown.model, name):
            return self.view(base, ("status",), visit=visit)   # the new model's example is on its way
        # Newer than a drawing re-read: any drawing sent after it (even one whose answer had not
        # yet replaced it when this started); than anything else: one sent during this.
        before = shown.number or visit.drawn
        item, a = self._reread(shown, name)
        if visit.drawn > before:
            return {}
        return self._commit(visit, base, base.showing(item, shown.kind), known=(item, a))

    def _set_aside(self, base, name) -> tuple[Shown | None, tuple]:
        """A switch across kinds of model: (the visitor's drawing to put back for model `name`,
        or None; the drawings set aside now) — the canvas's drawing joins them, in place of any
        older one for the same classes (trial: a visitor's 8, gone after a look at clothing)."""
        classes = self._classes
        mine = base.drawing
        kept = [d for d in base.set_aside if classes(d.model) != classes(base.model)]
        if isinstance(mine, Shown) and not mine.example and classes(mine.model) is not None:
            kept = [d for d in kept if classes(d.model) != classes(mine.model)] + [mine]
        back = next((d for d in kept if classes(d.model) == classes(name)), None)
        return back, tuple(d for d in kept if d is not back)

    def _classes(self, name) -> tuple | None:
        try:
            return tuple(self.predictor(name).class_names)
        except (gr.Error, TypeError):
            return None

    def _put_back(self, drawing: Shown, p: Predictor) -> dict:
        """A canvas value that puts a set-aside drawing back: its kept ink (white on black, at
        most 160 px) as black ink on white, or a colour model's picture as it was."""
        picture = drawing.source if p.config.style.colour else 255 - drawing.source
        buf = io.BytesIO()
        Image.fromarray(np.asarray(picture, np.uint8)).save(buf, "PNG")
        return load_value(buf.getvalue(), next(self._loads), colour=p.config.style.colour)

    def _crosses(self, before, after) -> bool:
        """Whether a drawing made for model `before` means nothing to model `after`: their
        classes differ (a digit is no piece of clothing; a photo model reads no pen strokes).
        The new model's own example then replaces it, rather than a silent re-read."""
        classes = self._classes(before), self._classes(after)
        return None not in classes and classes[0] != classes[1]

    def gallery_label(self, p: Predictor) -> str:
        if all(Path(x).name.startswith("test_") for x in self.examples[p.config.style.name]):
            return f"Examples from the {p.config.title} test set: click one"
        shown = {example_name(x) for x in self.examples[p.config.style.name]}
        # (a class without an example says so: a shirt drawn without its fabric reads as a coat)
        missing = [md(n) for n in p.class_names if n not in shown]
        if not missing:
            return "Examples (drawn by this project's code): click one"
        few = f"{missing[0]}" if len(missing) == 1 else f"{', '.join(missing[:-1])} or {missing[-1]}"
        it = "it" if len(missing) == 1 else "each"
        return (f"Examples (drawn by this project's code), click one. There is no {few}: "
                f"drawn, {it} read as another class.")

    def gallery(self, p: Predictor) -> list[tuple[str, str]]:
        """The examples under the canvas for a model: (picture, caption)."""
        return [(x, example_name(x)) for x in self.examples[p.config.style.name]]
