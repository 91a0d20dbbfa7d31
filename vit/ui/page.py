"""The page's handlers, over one set of models. Each takes the visitor's `Visit` (the page's one
gr.State, vit/ui/record.py) and what Gradio passes, and returns {component name: value}; those
that change what the page shows commit a new record and send `render` (vit/ui/render.py) of the
components it changed. vit/ui/app.py wires them to the components. Every message a visitor sees
is one line without server paths; nothing a client sends can raise anything but `gr.Error`."""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import replace
from pathlib import Path

import gradio as gr
import numpy as np

from vit.checkpoint import CheckpointError
from vit.data.examples import example_name, write_test_examples
from vit.data.loading import DataError
from vit.inference import Analysis, Predictor, Recent, array_key
from vit.pictures.attention_maps import patch_at
from vit.pictures.confusion import cell_at
from vit.preprocessing.decode import BlankInputError, PreprocessError, decode
from vit.preprocessing.layout import compact
from vit.text import md
from vit.ui import draw_tab, mechanism_panel, pipeline, testset_tab, training_panel, views, why_panel
from vit.ui.canvas import colour_picture, load_value, read_drawing, seq
from vit.ui.compare_panel import SAME_MODEL
from vit.ui.record import ANSWER, Record, Refused, Shown, Visit
from vit.ui.render import (
    AFTER_ANALYSIS,
    COMPARE,
    EVERY,
    LEARNED,
    LENS,
    PICTURES,
    WALK,
    Given,
    answered,
    changed,
    render,
    said,
)
from vit.ui.render import (
    ANSWER as ANSWER_VIEWS,
)
from vit.ui.uploads import pin

FIRST_EXAMPLE = {"digits": "7", "objects": "Ankle boot", "photos": "ship"}   # on the canvas at load
ANALYSIS = ANSWER_VIEWS + PICTURES            # what an analysing handler sends; the rest follows
# What a choice on the page may send on its own lane: every view it touched but the "why" maps,
# which wait for their own lane (a target change is one: it sends EVERY there).
QUICK = tuple(n for n in EVERY if n not in why_panel.MAPS)
TESTSET = ("testset_status", "confusion", "reliability", "gallery", "testset_body")
LAID_OUT_BYTES = 32 << 20     # model inputs laid out per (source, model): ~10,000 MNIST-sized ones
# A colour picture kept per visitor, to lay out again for another model: as large as the largest
# input a model here reads (a converted ViT-B/16: 224 px), 150 KB instead of the canvas's 480.
KEPT_COLOUR_SIDE = 224


def user_error(message: str) -> gr.Error:
    """An error for the person (or client) on the other end: shown to them, not logged as a crash."""
    return gr.Error(message, print_exception=False)


class Page:
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

    # --- reading an input ---------------------------------------------------------------------
    def _read(self, kind: str, source, p: Predictor, name: str, number: int = 0,
              live: bool = False) -> tuple[Shown | Refused, Analysis | None]:
        """An input through model `p` (named `name`): what the page keeps of it, and its analysis
        (`live`: a frame while the pen is still down) — or why it can't be read."""
        try:
            if kind == "drawing":        # its PNG, read once for the input and the copy
                source = colour_picture(source) if p.config.style.colour else decode(source)
            image, ink = p.read(source)
        except PreprocessError as e:
            if kind == "drawing" and isinstance(e, BlankInputError):
                if not inked_all_over(source):                     # an erased canvas: rest
                    return Refused(kind, "", None, name, number, empty=True), None
                e = (f"The whole box is ink, so nothing stands out to read: Undo, or clear it and "
                     f"draw a {p.config.noun}.")
            gr.Warning(str(e))
            return Refused(kind, str(e), source if kind == "upload" else None, name,
                           number), None
        # A drawing's session copy is its ink map (the same compact copy) when it has one; a
        # colour model's (a photo, maybe drawn over) its RGB picture, at most 224 px a side.
        if kind != "drawing":
            kept = source
        elif ink is not None:
            kept = ink
        else:
            kept = shrunk(source, KEPT_COLOUR_SIDE) if p.config.style.colour else compact(source)
        if live and views.big(p):           # the answer alone: a big model's maps cost more
            a = p.glance(image, ink)
        else:
            a = p.analyse_input(image, ink, live)
        shown = Shown(kind, kept, image, name, number)
        self._laid_out.put(_source_key(shown, name), image, image.nbytes)
        return shown, a

    def _drawing(self, value, p: Predictor, name: str, live: bool = False):
        """The canvas's value (vit/ui/canvas.py) read as `_read` does; an example says so."""
        number = int(seq(value) or 0)
        try:
            source = read_drawing(value)
        except PreprocessError as e:
            gr.Warning(str(e))
            return Refused("drawing", str(e), None, name, number), None
        if source is None:                          # an empty or erased canvas: rest
            return Refused("drawing", "", None, name, number, empty=True), None
        item, a = self._read("drawing", source, p, name, number, live)
        example = value.get("example") if isinstance(value, dict) else None
        if a is not None and example in map(example_name, self.examples[p.config.style.name]):
            item = replace(item, example=example)
        return item, a

    def analysis(self, shown: Shown, name, judged: bool = False) -> tuple[Predictor, Analysis]:
        """The input on screen through model `name`: as it was if already that model's input
        (a test image stays exactly the test image), else laid out again from its source.
        `judged`: the verdict is shown, so a drawing's or upload's ink checks run again too
        (the pictures alone don't need them)."""
        p = self.predictor(name)
        if shown.model == name or (shown.kind == "test" and p.fits(shown.image)):
            ink = p.ink(shown.source) if judged and shown.kind != "test" else None
            return p, p.analyse_input(shown.image, ink)
        key = _source_key(shown, name)
        image = self._laid_out.get(key)
        if image is None:
            image, ink = p.read(shown.source)
            self._laid_out.put(key, image, image.nbytes)
        else:
            ink = p.ink(shown.source) if judged else None
        return p, p.analyse_input(image, ink)

    def _reread(self, item: Shown | Refused, name: str) -> tuple[Shown | Refused, Analysis | None]:
        """An input (a tab's, kept in the record) for model `name`."""
        p = self.predictor(name)
        if isinstance(item, Refused):
            if item.empty:
                return replace(item, model=name), None
            if item.kind == "upload" and item.source is not None:
                return self._read("upload", item.source, p, name)
            return replace(item, model=name), None
        try:
            p, a = self.analysis(item, name, judged=True)
        except PreprocessError as e:               # an upload's file gone from the cache
            return Refused(item.kind, str(e), None, name, item.number), None
        # A test image keeps saying where it comes from (another model's test set, maybe).
        return replace(item, image=a.image, model=name), a

    # --- the record and its views -----------------------------------------------------------
    def view(self, r: Record, names, known: tuple | None = None, visit: Visit | None = None) -> dict:
        """render() of `names` for record `r`, with what its views need computed first: the
        input on screen analysed (a kept forward pass: vit/inference.py's Recent), its maps when
        a "why" view is named, the second model's analysis when the compare panel is open.
        `known`: (input, analysis) in hand; `visit`: whose views' reads to note."""
        p, a = self.predictor(r.model), None
        if answered(r) and set(names) - {"answered"}:
            if known is not None and known[0] is r.shown and known[1] is not None \
                    and known[1].explanation is not None:
                a = known[1]
            else:
                try:       # the answer's verdict needs the ink checks; pictures alone don't
                    a = self.analysis(r.shown, r.model,
                                      judged=bool({"label", "status"} & set(names)))[1]
                except PreprocessError as e:       # an upload's file gone from the cache
                    return {n: f"⚠️ {e}" if n in ("status", "walk_text", "faithfulness") else None
                            for n in names}
        explained = other = None
        if a is not None and a.explanation is not None and set(names) & {*why_panel.MAPS, "pipeline"}:
            # The "why" lane computes the maps; the strip on any other lane shows them only if
            # they are in hand already (its lead patch), and is sent again by that lane.
            explained = p.explain(a, why_panel.target_class(p, a.probs, r.target),
                                  kept_only=not set(names) & set(why_panel.MAPS))
        if a is not None and r.compare_open and set(names) & set(COMPARE):
            other = self._second(r)
        return render(r, Given(p, a, explained, other, *self._panels_numbers(r, p, a, names)),
                      names, visit.reads if visit is not None else None)

    @staticmethod
    def _panels_numbers(r: Record, p: Predictor, a: Analysis | None, names) -> tuple:
        """What the open panels among `names` draw, computed before render (each a forward pass,
        kept per input): the logit lens, the answer with the ticked heads off, the walk through
        one head, the input through the training snapshots."""
        if a is None:
            return None, None, None, None
        wanted = set(names)
        lens = p.lens(a.image) if r.lens_open and wanted & set(LENS) else None
        off = why_panel.parse_heads(p, r.heads_off) if r.why_open and "ablation" in wanted else []
        walk = (mechanism_panel.walk_of(p, a, r.layer, r.head, r.patch, r.follow_cls)
                if r.mechanism_open and wanted & set(WALK) else None)
        frames = (training_panel.frames_of(p, a, r.patch)
                  if r.learned_open and wanted & set(LEARNED) else None)
        return lens, p.ablate(a.image, off) if off else None, walk, frames

    def _second(self, r: Record):
        """The second model's (model, analysis) of the input on screen, or why there is none
        (one line). Its trouble (an input it can't read, weights that fail to load) is said in
        its own panel and never touches the page model's views."""
        if r.compare not in self.models.names:
            return None
        if r.compare == r.model:
            return SAME_MODEL
        try:
            return self.analysis(r.shown, r.compare, judged=True)
        except PreprocessError as e:
            return f"⚠️ {e}"
        except (CheckpointError, gr.Error) as e:
            return f"⚠️ {getattr(e, 'message', None) or e}"

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

    # --- the canvas -------------------------------------------------------------------------
    def follow_drawing(self, visit: Visit, value, name):
        """While the pen moves: the answer alone (status, label, drawing number), for the
        canvas's "live" event. An answer overtaken by a newer drawing (the pen lifted meanwhile)
        changes nothing, so a stale answer never replaces a fresh one. The record changes when
        the pen lifts."""
        number = int(seq(value) or 0)
        if visit.note_drawing(number):
            return {}
        p, r = self.predictor(name), visit.record
        # The strip's attention maps too, where they cost little (every bundled model: ~2-7 ms
        # a drawing on a 2-core CPU); a big model's quick answer leaves them for the pen's lift.
        item, a = self._drawing(value, p, name, live=True)
        if visit.note_drawing(number):
            return {}
        return {"status": said(p, item, a), "label": p.label(a.probs, a.verdict) if a else None,
                "answered": seq(value),
                "pipeline": pipeline.strip_value(p, a, r.layer, r.head, r.patch, live=True,
                                                 model=name)}

    def analyse_drawing(self, visit: Visit, value, name, shared, layer, head):
        """The canvas's PNG when the pen lifts: the answer and every picture. The drawing is the
        Draw tab's input; on another tab (a model switch put its example on the hidden canvas)
        it shows only where that tab has no input of its own and a drawing was on screen."""
        base, number = visit.record, int(seq(value) or 0)
        visit.note_drawing(number)
        p = self.predictor(name)
        item, a = self._drawing(value, p, name)
        # Whether it goes on screen, by the page as it is now, not as it was when this started:
        # a switch to the Draw tab may have landed meanwhile (a Clear clicked right after it).
        now = visit.record
        show = now.tab == "draw" or (now.input_of(now.tab) is None
                                     and now.on_screen in (None, "drawing"))
        mine = replace(base.showing(item, "drawing", show), model=name, shared=shared,
                       layer=layer, head=head)
        return self._commit(visit, base, mine, known=(item, a))

    def load_example(self, name, evt: gr.SelectData):
        """A click on an example under the canvas: that drawing on the canvas (which then sends
        it back like any drawing)."""
        p = self.predictor(name)
        paths = self.examples[p.config.style.name]
        try:
            path = paths[int(evt.index)]
        except (TypeError, ValueError, IndexError):
            return gr.update()
        return self.canvas_value(path, p)

    def canvas_value(self, path: str, p: Predictor) -> dict:
        return {**load_value(Path(path).read_bytes(), next(self._loads),
                             colour=p.config.style.colour),
                "name": example_name(path)}

    def first_view(self, name):
        """At page load, a worked example on the canvas rather than empty boxes: the canvas
        sends it back as a drawing, and the answer and its explanation follow."""
        p = self.predictor(name)
        paths = self.examples[p.config.style.name]
        first = FIRST_EXAMPLE.get(p.config.style.name)
        return self.canvas_value(next((x for x in paths if example_name(x) == first), paths[0]), p)

    # --- uploads ----------------------------------------------------------------------------
    def upload_changed(self, visit: Visit, path, name, shared, layer, head):
        """The upload's change event. When one picture replaces another, Gradio fires it twice
        with the same file within milliseconds: the second changes nothing (its answer and its
        warning would only repeat the first's)."""
        now = time.monotonic()
        last, visit.upload_at = visit.upload_at, (path, name, now)
        if path is not None and last[:2] == (path, name) and now - last[2] < 2.0:
            return {}
        return self.analyse_upload(visit, path, name, shared, layer, head)

    def analyse_upload(self, visit: Visit, path, name, shared, layer, head):
        base, p = visit.record, self.predictor(name)
        if path is None:                           # removed: the Upload tab asks for a picture
            mine = replace(base, upload=None,
                           on_screen=None if base.on_screen == "upload" else base.on_screen)
            item = a = None
        else:
            item, a = self._read("upload", path, p, name)
            mine = base.showing(item, "upload")
        mine = replace(mine, model=name, shared=shared, layer=layer, head=head)
        return self._commit(visit, base, mine, known=(item, a))

    # --- tabs: the answer follows the input in view ----------------------------------------
    def note_tab(self, visit: Visit, tab: str) -> None:
        """At once, unqueued: the tab in view, for answers already in flight to see."""
        base = visit.record
        visit.commit(base, replace(base, tab=tab))

    def to_draw_tab(self, visit: Visit, value, name, shared, layer, head):
        """Back on the Draw tab: the canvas's drawing — the answer beside it must be the
        drawing's —, or the canvas's prompt when it is empty."""
        base, number = visit.record, int(seq(value) or 0)
        drawing = base.drawing
        if drawing is not None and drawing.model == name and drawing.number == number:
            item, a = drawing, None                   # already read by this model
        elif visit.note_drawing(number):
            # The canvas as it was at the click: a drawing the visitor sent since (a Clear
            # clicked right after the tab, whose lift runs beside this) has its own answer.
            return self._show_tab(visit, base, self._newer_drawing(visit, base))
        else:
            item, a = self._drawing(value, self.predictor(name), name)
            if visit.note_drawing(number):
                return self._show_tab(visit, base, self._newer_drawing(visit, base))
        mine = replace(base.showing(item, "drawing"), tab="draw", model=name, shared=shared,
                       layer=layer, head=head)
        return self._show_tab(visit, base, mine, (item, a))

    @staticmethod
    def _newer_drawing(visit: Visit, base: Record) -> Record:
        """On the Draw tab, overtaken by a newer drawing: that one on screen if its answer has
        landed (else its handler, seeing the Draw tab, puts it there when it lands)."""
        landed = visit.record.drawing is not None and visit.record.drawing is not base.drawing
        return replace(base, tab="draw", on_screen="drawing" if landed else base.on_screen)

    def to_upload_tab(self, visit: Visit, path, name, shared, layer, head):
        """On the Upload tab: its picture's answer; with none yet, a headline asking for one that
        says what the answer below still belongs to."""
        base, kept = visit.record, visit.record.upload
        if path is None:
            mine, item, a = replace(base, tab="upload"), None, None
        else:
            if kept is not None and kept.source == path and kept.model == name:
                item, a = kept, None
            else:
                item, a = self._read("upload", path, self.predictor(name), name)
            mine = replace(base.showing(item, "upload"), tab="upload")
        mine = replace(mine, model=name, shared=shared, layer=layer, head=head)
        return self._show_tab(visit, base, mine, (item, a))

    def to_test_tab(self, visit: Visit):
        """On the Test set tab, once it is open: the test image last picked (through the model
        in use), or until one is picked a headline saying so."""
        base, item, a = visit.record, visit.record.test, None
        ready = self.answers.ready(base.model)
        if item is None:
            return self._show_tab(visit, base, replace(base, tab="test", test_ready=ready))
        if item.model != base.model:
            item, a = self._reread(item, base.model)
        return self._show_tab(visit, base, replace(base.showing(item, "test"), tab="test",
                                                   test_ready=ready), (item, a))

    # --- models -----------------------------------------------------------------------------
    def choose_model(self, visit: Visit, name):
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
                # "How it learned" only for a model that kept snapshots: no empty panel.
                "learned_panel": gr.update(visible=self.models.learned(name))}

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
        return "Examples (drawn by this project's code): click one"

    def gallery(self, p: Predictor) -> list[tuple[str, str]]:
        """The examples under the canvas for a model: (picture, caption)."""
        return [(x, example_name(x)) for x in self.examples[p.config.style.name]]

    # --- the analysis panels' controls --------------------------------------------------------
    def explore(self, visit: Visit, layer, head):
        """The layer and head sliders: the one-patch explorer (and a big model's attention
        picture, which shows the chosen layer's heads), and the sliders back in range if a typed
        value was out of it."""
        base = visit.record
        p = self.predictor(base.model)
        out = self._commit(visit, base, replace(base, layer=layer, head=head), QUICK)
        return {**out, **dict(zip(("layer", "head"), views.snapped(p, layer, head)))}

    def pick_patch(self, visit: Visit, evt: gr.SelectData):
        base = visit.record
        p = self.predictor(base.model)
        try:
            x, y = (float(v) for v in evt.index[:2])
        except (TypeError, ValueError):
            x = y = float("nan")
        if not (math.isfinite(x) and math.isfinite(y)):        # a click can't be at NaN or inf
            return {}
        return self._choose_patch(visit, patch_at(x, y, views.PICK_SIZE, p.grid))

    def pick_strip_patch(self, visit: Visit, strip):
        """A tap on a patch in the pipeline strip (its value: {"pick": n}, 0-based)."""
        patch = pipeline.picked(strip)
        if patch is None or patch >= self.predictor(visit.record.model).grid ** 2:
            return {}
        return self._choose_patch(visit, patch)

    def pick_strip_head(self, visit: Visit, strip):
        """The strip's "one head" menus (its value: {"layer": l, "head": h}, 1-based): the page's
        layer and head, as the sliders set them — and the sliders follow."""
        chosen = pipeline.picked_head(strip)
        if chosen is None:
            return {}
        layer, head = (v + 1 for v in views.clamp(self.predictor(visit.record.model), *chosen,
                                                  None)[:2])
        return {**self.explore(visit, layer, head), "layer": layer, "head": head}

    def _choose_patch(self, visit: Visit, patch: int):
        """The chosen patch, which the strip, the explorer, the step-by-step panel and "How it
        learned" follow."""
        base = visit.record
        return self._commit(visit, base, replace(base, patch=patch), QUICK)

    def pick_head(self, visit: Visit, evt: gr.SelectData):
        """A click on a map of the layers x heads picture opens that layer and head below (the
        sliders then move, and their change event redraws)."""
        p = self.predictor(visit.record.model)
        try:
            x, y = (float(v) for v in evt.index[:2])
        except (TypeError, ValueError):
            return {}
        hit = views.grid_hit(p, x, y) if math.isfinite(x) and math.isfinite(y) else None
        if hit is None:
            return {}
        return {k: v + 1 for k, v in zip(("layer", "head"), hit) if v is not None}

    def why(self, visit: Visit):
        """After each analysis, for the input on screen: the lead map beside the answer, the
        strip with that map's patch, "What drove the answer" — and the panels drawn only while
        open (the step-by-step walk, the logit lens, how it learned, the second model; render
        skips a closed panel's views)."""
        return self.view(visit.record, AFTER_ANALYSIS, visit=visit)

    # --- the API ----------------------------------------------------------------------------
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

    # --- test set tab -------------------------------------------------------------------------
    def testset_view(self, visit: Visit, kind, true, pred, progress=gr.Progress()):
        base = visit.record
        self.predictor(base.model)             # an unknown model: one line, not a traceback
        status, confusion, reliability, gallery, listed, body = self.answers.view(
            base.model, kind, true, pred, testset_tab.reporter(progress))
        visit.commit(base, replace(base, test_listed=tuple(listed),
                                   test_ready=self.answers.ready(base.model)))
        return {"testset_status": status, "confusion": confusion, "reliability": reliability,
                "gallery": gallery, "testset_body": body}

    def open_testset(self, visit: Visit, kind, true, pred, progress=gr.Progress()):
        base = visit.record
        visit.commit(base, replace(base, testset_open=True, tab="test"))
        return self.testset_view(visit, kind, true, pred, progress)

    def pick_cell(self, visit: Visit, evt: gr.SelectData, progress=gr.Progress()):
        """A click on the confusion matrix filters the gallery to that cell."""
        p = self.predictor(visit.record.model)
        try:
            cell = cell_at(float(evt.index[0]), float(evt.index[1]), len(p.class_names))
        except (TypeError, ValueError, IndexError, KeyError, OverflowError):
            cell = None
        if cell is None:
            return {}
        true, pred = cell
        kind = "mistakes" if true != pred else "least confident"
        return {"kind": kind, "true": true, "pred": pred,
                **self.testset_view(visit, kind, true, pred, progress)}

    def show_test_image(self, visit: Visit, shared, layer, head, evt: gr.SelectData):
        """A gallery click: that test image, as the model saw it (no preprocessing), in every view."""
        base = visit.record
        name = base.model
        p = self.predictor(name)
        try:
            i = int(base.test_listed[int(evt.index)])
            r = self.answers.get(name)
            image = r.images[i] / 255.0
        except (TypeError, ValueError, IndexError, KeyError, DataError):
            raise user_error("That test image is no longer listed; pick another.") from None
        a = p.analyse_input(image.astype(np.float32))
        item = Shown("test", a.image, a.image, name,
                     origin=(name, p.config.title, i, p.class_names[r.labels[i]]))
        mine = replace(base.showing(item, "test"), tab="test", shared=shared, layer=layer,
                       head=head)
        return self._commit(visit, base, mine, known=(item, a))

    def clear_testset(self, visit: Visit):
        """At a model switch, until the new model's answers are in: no stale gallery whose
        pictures a click would mistake for the new model's test images."""
        base = visit.record
        if not base.testset_open:
            return {}
        visit.commit(base, replace(base, test_listed=()))
        return {"testset_status": f"Loading the {md(self.predictor(base.model).config.title)} "
                                  f"test set…", "confusion": None, "reliability": None,
                "gallery": gr.update(value=[], selected_index=None)}

    def refresh_testset(self, visit: Visit, kind, progress=gr.Progress()):
        """After a model switch: its class names in the filters, and its answers if the tab is open."""
        p = self.predictor(visit.record.model)
        choices = gr.update(choices=testset_tab.class_choices(p.class_names), value=-1)
        if not visit.record.testset_open:
            return {"true": choices, "pred": choices}
        out = self.testset_view(visit, kind, -1, -1, progress)
        # The headline too: on the Test set tab it says whether this model's test set is here.
        # No thumbnail highlighted: the one clicked before was another model's test image.
        return {**out, **self.view(visit.record, ("status",), visit=visit), "true": choices, "pred": choices,
                "gallery": gr.update(value=out["gallery"], selected_index=None)}


def _source_key(shown: Shown, name: str) -> tuple:
    """An input's identity across models: its kept source (an upload's path, or an array's bytes)."""
    src = shown.source
    return (shown.kind, src if isinstance(src, str) else array_key(np.asarray(src)), name)


def shrunk(rgb: np.ndarray, side: int) -> np.ndarray:
    """An (H, W, 3) uint8 picture with its longer side at most `side` (anti-aliased)."""
    from PIL import Image
    im = Image.fromarray(rgb)
    im.thumbnail((side, side))
    return np.asarray(im)


def inked_all_over(drawing) -> bool:
    """Whether a decoded drawing (`decode`: its ink, (H, W) with 1 = ink) is ink nearly
    everywhere — a Fill on an empty canvas, say —, so that its no-contrast refusal is no resting
    empty canvas (an empty one decodes to grey + alpha, (H, W, 2))."""
    a = np.asarray(drawing)
    return a.ndim == 2 and float(a.mean()) > 0.9
