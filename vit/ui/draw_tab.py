"""The Draw tab: our own light canvas (vit/ui/canvas.py), what to draw for the loaded model, and
that model's examples — a click puts one on the canvas; and `DrawingHandlers`, the page's
handlers of the canvas (mixed into `Page`, vit/ui/page.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr

from vit.data.examples import example_name
from vit.inference import Predictor
from vit.preprocessing.decode import PreprocessError
from vit.ui import pipeline
from vit.ui.boundary import Click, Drawing, Head, Layer, ModelName, SharedScale
from vit.ui.canvas import DrawingCanvas, load_value, read_drawing, seq
from vit.ui.record import Record, Refused, Visit
from vit.ui.render import said

FIRST_EXAMPLE = {"digits": "7", "objects": "Ankle boot", "photos": "ship"}   # on the canvas at load


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


class DrawingHandlers:
    """The canvas's events: a frame while the pen moves, the drawing when it lifts, an example
    clicked, the first example at load, the Draw tab chosen. Uses `Page`'s `predictor`, `_read`,
    `_commit`, `_show_tab` and `_loads`."""
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

    def follow_drawing(self, visit: Visit, value: Drawing, name: ModelName):
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

    def analyse_drawing(self, visit: Visit, value: Drawing, name: ModelName, shared: SharedScale,
                        layer: Layer, head: Head):
        """The canvas's PNG when the pen lifts: the answer and every picture. The drawing is the
        Draw tab's input; on another tab (a model switch put its example on the hidden canvas)
        it shows only where that tab has no input of its own and a drawing was on screen."""
        base, number = visit.record, int(seq(value) or 0)
        with visit.turn():       # the newest sent now (an API client's numbers may repeat)
            visit.note_drawing(number)
            sent = visit.drawn
        p = self.predictor(name)
        item, a = self._drawing(value, p, name)
        # Whether it goes on screen, by the page as it is now, not as it was when this started:
        # a switch to the Draw tab may have landed meanwhile (a Clear clicked right after it).
        now = visit.record
        show = now.tab == "draw" or (now.input_of(now.tab) is None
                                     and now.on_screen in (None, "drawing"))
        mine = replace(base.showing(item, "drawing", show), model=name, shared=shared,
                       layer=layer, head=head)
        # Overtaken while it was read (Clear clicked just after the lift, its empty canvas
        # answered first on the other worker): the newer drawing's answer stands. Checked under
        # the lock that lands records, so no newer drawing lands between the check and this.
        with visit.turn():
            if visit.drawn > sent:
                return {}
            return self._commit(visit, base, mine, known=(item, a))

    def load_example(self, name: ModelName, evt: Click):
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

    def first_view(self, name: ModelName):
        """At page load, a worked example on the canvas rather than empty boxes: the canvas
        sends it back as a drawing, and the answer and its explanation follow."""
        p = self.predictor(name)
        paths = self.examples[p.config.style.name]
        first = FIRST_EXAMPLE.get(p.config.style.name)
        return self.canvas_value(next((x for x in paths if example_name(x) == first), paths[0]), p)

    def to_draw_tab(self, visit: Visit, value: Drawing, name: ModelName, shared: SharedScale,
                    layer: Layer, head: Head):
        """Back on the Draw tab: the canvas's drawing — the answer beside it must be the
        drawing's —, or the canvas's prompt when it is empty."""
        base, number = visit.record, int(seq(value) or 0)
        drawing = base.drawing
        if drawing is not None and drawing.model == name and drawing.number == number:
            item, a = drawing, None                   # already read by this model
        elif self._overtaken(visit, number):
            # The canvas as it was at the click: a drawing the visitor sent since (a Clear
            # clicked right after the tab, whose lift runs beside this) has its own answer.
            return self._show_tab(visit, base, self._newer_drawing(visit, base))
        else:
            item, a = self._drawing(value, self.predictor(name), name)
        mine = replace(base.showing(item, "drawing"), tab="draw", model=name, shared=shared,
                       layer=layer, head=head)
        with visit.turn():           # checked where records land: none lands in between
            if self._overtaken(visit, number):
                return self._show_tab(visit, base, self._newer_drawing(visit, base))
            return self._show_tab(visit, base, mine, (item, a))

    @staticmethod
    def _overtaken(visit: Visit, number: int) -> bool:
        """Whether the canvas has sent a drawing newer than drawing `number` — any drawing at
        all, for a canvas value with no number: Gradio selects the Draw tab as the page loads,
        and that select read the canvas before the example on it was sent; landing after the
        example's answer, it put "Draw a digit" over it (the browser lanes, twice)."""
        return visit.note_drawing(number) or (not number and visit.drawn > 0)

    @staticmethod
    def _newer_drawing(visit: Visit, base: Record) -> Record:
        """On the Draw tab, overtaken by a newer drawing: that one on screen if its answer has
        landed (else its handler, seeing the Draw tab, puts it there when it lands)."""
        landed = visit.record.drawing is not None and visit.record.drawing is not base.drawing
        return replace(base, tab="draw", on_screen="drawing" if landed else base.on_screen)
