"""The model menu's handlers: a switch to another model (its sliders, classes, examples and
card), the input on screen read again by it, and the examples offered with it. Mixed into
`Page` (vit/ui/page.py), whose `predictor`, `models`, `answers`, `examples`, `_reread`,
`_commit` and `view` they use."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gradio as gr

from vit.data.examples import example_name
from vit.inference import Predictor
from vit.text import md
from vit.ui import draw_tab, training_panel, views, why_panel
from vit.ui.boundary import ModelName
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
        # line the new model's own first example goes on the canvas (reanalyse then waits).
        crossing = self._crosses(base.model, name)
        cfg = p.model.cfg
        visit.commit(base, replace(base, model=name, patch=None, layer=cfg.depth, head=1,
                                   target=ANSWER, heads_off=(),
                                   test_ready=self.answers.ready(name)))
        layer, head = views.slider_updates(p)
        target, heads = why_panel.model_updates(p)
        return {"card": p.card(), "layer": layer, "head": head, "target": target,
                "heads_off": heads, "hint": draw_tab.hint(p.config.noun, p.config.style.name),
                "examples": gr.update(value=self.gallery(p), selected_index=None,
                                      label=self.gallery_label(p)),
                # A new model's example starts the canvas afresh: Undo would bring back a drawing
                # made for the other model.
                "pad": {**self.first_view(name), "reset": True} if crossing else gr.update(),
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

    def _crosses(self, before, after) -> bool:
        """Whether a drawing made for model `before` means nothing to model `after`: their
        classes differ (a digit is no piece of clothing; a photo model reads no pen strokes).
        The new model's own example then replaces it, rather than a silent re-read."""
        try:
            names = [tuple(self.predictor(n).class_names) for n in (before, after)]
        except (gr.Error, TypeError):
            return False
        return names[0] != names[1]

    def gallery_label(self, p: Predictor) -> str:
        if all(Path(x).name.startswith("test_") for x in self.examples[p.config.style.name]):
            return f"Examples from the {p.config.title} test set: click one"
        shown = {example_name(x) for x in self.examples[p.config.style.name]}
        # (a class without an example says so: a shirt drawn without its fabric reads as a coat)
        missing = [md(n) for n in p.class_names if n not in shown]
        none = f"; none of {', '.join(missing)}: drawn, it read as another class" if missing else ""
        return f"Examples (drawn by this project's code{none}): click one"

    def gallery(self, p: Predictor) -> list[tuple[str, str]]:
        """The examples under the canvas for a model: (picture, caption)."""
        return [(x, example_name(x)) for x in self.examples[p.config.style.name]]
