"""The page's handlers, over one set of models. Each takes the visitor's `Visit` (the page's one
gr.State, vit/ui/record.py) and what Gradio passes, and returns {component name: value}; those
that change what the page shows commit a new record and send `render` (vit/ui/render.py) of the
components it changed. vit/ui/app.py wires them to the components. Every message a visitor sees
is one line without server paths; nothing a client sends can raise anything but `gr.Error`.

`Page` holds what every handler shares — the models, the visitor's record and its one commit
path, the views — and takes its handlers from the modules of what they serve:

| handlers of | module |
|---|---|
| the canvas | vit/ui/draw_tab.py `DrawingHandlers` |
| uploads | vit/ui/upload_tab.py `UploadHandlers` |
| the test set | vit/ui/testset_tab.py `TestSetHandlers` |
| the model menu | vit/ui/model_menu.py `ModelHandlers` |
| the panels' sliders and picks | vit/ui/panel_controls.py `PanelControls` |
| reading an input through a model | vit/ui/reading.py `Reading` |
"""
from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import gradio as gr

from vit.checkpoint import CheckpointError
from vit.data.examples import write_test_examples
from vit.data.loading import DataError
from vit.inference import Predictor, Recent
from vit.preprocessing.decode import PreprocessError
from vit.ui import mechanism_panel, testset_tab, why_panel
from vit.ui.boundary import user_error
from vit.ui.compare_panel import SAME_MODEL
from vit.ui.draw_tab import DrawingHandlers
from vit.ui.model_menu import ModelHandlers
from vit.ui.panel_controls import PanelControls
from vit.ui.reading import LAID_OUT_BYTES, Reading
from vit.ui.record import Record, Visit
from vit.ui.render import (
    ANALYSIS,
    COMPARE,
    EVERY,
    QUICK,
    Given,
    answered,
    changed,
    render,
)
from vit.ui.testset_tab import TestSetHandlers
from vit.ui.upload_tab import UploadHandlers
from vit.ui.uploads import pin

TESTSET = ("testset_status", "confusion", "reliability", "gallery", "testset_body")


class Page(Reading, DrawingHandlers, UploadHandlers, TestSetHandlers, ModelHandlers, PanelControls):
    EVERY = EVERY          # for a choice on the "why" lane (why_panel.choose_target)

    def __init__(self, models, data_dir: Path, examples: dict[str, list[str]]):
        self.models, self.examples = models, examples      # {preprocessing style: PNG paths}
        self.answers = testset_tab.Answers(models, data_dir)
        self._loads = itertools.count(1)       # each canvas load differs, so the page redraws it
        # (an input's kept source, model) -> the model input laid out from the original, so a
        # switch back to a model shows exactly its first answer (and reuses its forward pass)
        # rather than one laid out again from the session's smaller copy.
        self._laid_out = Recent(LAID_OUT_BYTES)

    def warm(self) -> None:
        """Before the first visitor asks: every model's step-by-step pictures and its answers on
        its test set (where the data is here), so the panel and the Test set tab open filled.
        Run in the background by `launch` (a few seconds to a minute of CPU, once)."""
        for name in self.models.names:
            try:
                p = self.models.get(name)
                mechanism_panel.model_images(p, self.answers.data_dir)
                r = self.answers.get(name)
                if p.config.style.colour and r.images.ndim == 4:
                    self.use_test_photos(p, r)
            except (CheckpointError, DataError, OSError, ValueError):
                continue            # a broken model or no test set: said when a visitor asks

    def use_test_photos(self, p: Predictor, r) -> None:
        """A photo model's examples become real test photos, one per class (its data set is on
        this machine): the drawn scenes are cartoons."""
        style = p.config.style.name
        folder = Path(self.examples[style][0]).parent.parent / f"{style}-test"
        paths = write_test_examples(folder, r.images, r.labels, p.class_names)
        if len(paths) == len(p.class_names):
            pin(paths)                        # the gallery's files: never deleted to make room
            self.examples[style] = paths

    def visit(self) -> Visit:
        """A new visitor's page (the gr.State's default; Gradio copies it per visitor)."""
        return Visit(self.models.default)

    def predictor(self, name) -> Predictor:
        try:
            return self.models.get(name)
        except CheckpointError as e:
            raise user_error(str(e)) from None

    def view(self, r: Record, names, known: tuple | None = None, visit: Visit | None = None) -> dict:
        """render() of `names` for record `r`, with what several views share computed first: the
        input on screen analysed (a kept forward pass: vit/inference.py's Recent), its maps when
        a "why" view is named, the second model's analysis when the compare panel is open. (What
        one panel alone draws is computed when its view reads it: render.Seen.)
        `known`: (input, analysis) in hand; `visit`: whose views' reads to note."""
        p, a = self.predictor(r.model), None
        if answered(r) and set(names) - {"answered"}:
            if known is not None and known[0] is r.shown and known[1] is not None \
                    and known[1].explanation is not None:
                a = known[1]
            else:
                # Always with every check the answer's verdict has (the ink checks, the digit
                # check): the strip, the "why" words and the headline all say the verdict, and a
                # lane that named only some of them once showed "Probably an airplane" in the
                # strip under "Not a photo" (the digit check left out; tests/test_page_events.py).
                try:
                    a = self.analysis(r.shown, r.model)[1]
                except PreprocessError as e:       # an upload's file gone from the cache
                    return {n: f"⚠️ {e}" if n in ("status", "walk_text", "faithfulness") else None
                            for n in names}
        explained = other = None
        why = bool(set(names) & set(why_panel.MAPS))          # the "why" lane
        if a is not None and a.explanation is not None and set(names) & {*why_panel.MAPS, "pipeline"}:
            # The "why" lane computes the maps; the strip on any other lane shows them only if
            # they are in hand already (its lead patch), and is sent again by that lane.
            explained = p.explain(a, why_panel.target_class(p, a.probs, r.target),
                                  kept_only=not why)
        if a is not None and r.compare_open and set(names) & set(COMPARE):
            other = self._second(r)
        return render(r, Given(p, a, explained, other, why), names,
                      visit.reads if visit is not None else None)

    def _second(self, r: Record):
        """The second model's (model, analysis, both models' names as the Model menu says them)
        of the input on screen, or why there is none (one line). Its trouble (an input it can't
        read, weights that fail to load) is said in its own panel and never touches the page
        model's views."""
        if r.compare not in self.models.names:
            return None
        if r.compare == r.model:
            return SAME_MODEL
        try:
            p2, a2 = self.analysis(r.shown, r.compare)
        except PreprocessError as e:
            return f"⚠️ {e}"
        except (CheckpointError, gr.Error) as e:
            return f"⚠️ {getattr(e, 'message', None) or e}"
        return p2, a2, (self.models.label(r.model), self.models.label(r.compare))

    def _commit(self, visit: Visit, base: Record, mine: Record, names=ANALYSIS,
                known: tuple | None = None, also: tuple = ()) -> dict:
        """Land `mine` (made from `base`) and send the views among `names` whose last drawing
        read a field it changed (render.changed), and those in `also`."""
        with visit.turn():
            now = visit.commit(base, mine)
            changes = changed(visit.reads, base, now, names)
            # A view this change touched that another lane draws is stale until that lane draws
            # it: forgetting what it read makes any later change (or that lane) draw it again.
            for n in changed(visit.reads, base, now, EVERY):
                if n not in names:
                    visit.reads.pop(n, None)
            return self.view(now, changes + tuple(n for n in also if n not in changes), known,
                             visit)

    def choose(self, visit: Visit, names=None, **changes) -> dict:
        """A visitor's choice (a panel opened, a class to explain, a second model…): the record
        with `changes`, and every view among `names` (default QUICK) whose drawing read them."""
        base = visit.record
        return self._commit(visit, base, replace(base, **changes), QUICK if names is None else names)

    def open_panel(self, visit: Visit, field: str, opened: bool, names=None) -> dict:
        """A panel's accordion opened or closed: its OPEN `field` in the record, and the views
        among `names` (the event's lane, default QUICK) whose drawing read it."""
        return self.choose(visit, names, **{field: bool(opened)})

    def _show_tab(self, visit: Visit, base: Record, mine: Record, known=None) -> dict:
        """`_commit` for a tab switch: its headline always (`note_tab` changed the record's tab
        already, unseen) — unless the visitor has left the tab since (`note_tab` named another):
        then this changes nothing, and the tab now in view keeps its own answer. (The Test set
        tab's answer waits for the tab's pictures, so a Draw tab clicked meanwhile was undone.)"""
        with visit.turn():
            if visit.record.tab != mine.tab:
                return {}
            return self._commit(visit, base, mine, known=known, also=("status",))

    def note_tab(self, visit: Visit, tab: str) -> None:
        """At once, unqueued: the tab in view, for answers already in flight to see."""
        base = visit.record
        visit.commit(base, replace(base, tab=tab))

    def classify(self, image):
        """API: one image file (a path) -> {class: probability} from the default model."""
        if image is None:
            raise user_error("Send an image file.")
        p = self.predictor(self.models.default)
        try:
            a = p.analyse(image)
            return p.label(a.probs, a.verdict)
        except PreprocessError as e:
            raise user_error(str(e)) from None
