"""`create_app(...)`: the whole page, built from arguments. Nothing happens at import.

The page: a model selector, Draw / Upload / Test set tabs, the prediction, then the analysis
panels (vit/ui/views.py). Every handler that analyses an input returns a `PageUpdate`; every
message a visitor sees is one line without server paths; nothing a client sends can raise
anything but `gr.Error`.
"""
from __future__ import annotations

import atexit
import itertools
import math
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import gradio as gr
import numpy as np
import torch

from vit.checkpoint import CheckpointError
from vit.data.examples import example_name, write_examples
from vit.data.loading import DataError
from vit.device import pick_device
from vit.inference import Analysis, Predictor, Recent, array_key
from vit.pictures.attention_maps import patch_at
from vit.pictures.confusion import cell_at
from vit.preprocessing.decode import MAX_FILE_BYTES, BlankInputError, PreprocessError, decode
from vit.preprocessing.layout import compact
from vit.preprocessing.styles import STYLES
from vit.testset import data_dir_for_app
from vit.text import md
from vit.ui import draw_tab, mechanism_panel, testset_tab, upload_tab, views, why_panel
from vit.ui.canvas import colour_picture, load_value, read_drawing, seq
from vit.ui.gradio_patches import (
    FreeDropdown,
    ImageFile,
    VerdictLabel,
    bounded_connections,
    hide_server_paths,
    never_rewrite_cached_images,
    raise_file_limit,
    short_errors,
    small_sessions,
)
from vit.ui.limits import CACHE_LIFETIME, FIRST_REQUEST_SECONDS, Limits, env_int
from vit.ui.models import Models, StartupError
from vit.ui.state import KEEP, PageUpdate, Shown

ROOT = Path(__file__).resolve().parents[2]
CSS = (Path(__file__).parent / "page.css").read_text()
# A burst of requests must not make the next visitor wait for answers nobody will read: the
# queue holds a few per worker; beyond that a client is told at once that the server is busy.
CONCURRENCY = 2
# After a test image is chosen, bring its result into view (it appears above the tab).
SCROLL_TO_RESULT = "() => document.querySelector('#status')?.scrollIntoView({block: 'start'})"
FIRST_EXAMPLE = {"digits": "7", "objects": "Ankle boot", "photos": "ship"}   # on the canvas at load


def user_error(message: str) -> gr.Error:
    """An error for the person (or client) on the other end: shown to them, not logged as a crash."""
    return gr.Error(message, print_exception=False)


class Page:
    """The handlers, over one set of models. Methods take what Gradio passes, positionally."""

    def __init__(self, models: Models, data_dir: Path, examples: dict[str, list[str]]):
        self.models, self.examples = models, examples      # {preprocessing style: PNG paths}
        self.answers = testset_tab.Answers(models, data_dir)
        self._loads = itertools.count(1)       # each canvas load differs, so the page redraws it
        self._latest: OrderedDict[str, int] = OrderedDict()    # session -> newest drawing number
        self._uploads: OrderedDict[str, tuple] = OrderedDict()  # session -> (file, model, time)
        # (an input's kept source, model) -> the model input laid out from the original, so a
        # switch back to a model shows exactly its first answer (and reuses its forward pass)
        # rather than one laid out again from the session's smaller copy.
        self._laid_out = Recent(LAID_OUT_BYTES)

    # --- helpers ----------------------------------------------------------------------------
    def predictor(self, name) -> Predictor:
        try:
            return self.models.get(name)
        except CheckpointError as e:
            raise user_error(str(e)) from None

    def _update(self, p: Predictor, a: Analysis, shown: Shown, shared, layer, head, patch,
                status: str | None = None) -> PageUpdate:
        return PageUpdate("", p.label(a.probs, a.verdict), views.render(p, a, shared, layer, head,
                                                                      patch),
                          shown).with_headline(status or headline(p, a))

    def _analyse(self, kind: str, source, name, shared, layer, head, patch,
                 pictures: bool = True, number: int = 0) -> PageUpdate:
        """`pictures`: False while the pen is still down — the label and status follow the pen;
        the pictures below wait until it lifts."""
        p = self.predictor(name)
        try:
            if kind == "drawing":        # its PNG, read once for the input and the copy
                source = colour_picture(source) if p.config.style.colour else decode(source)
            image, ink = p.read(source)
            # A drawing's session copy is its ink map (the same compact copy) when it has one; a
            # colour model's (a photo, maybe drawn over) its RGB picture, at most 224 px a side.
            if kind != "drawing":
                kept = source
            elif ink is not None:
                kept = ink
            else:
                kept = (shrunk(source, KEPT_COLOUR_SIDE) if p.config.style.colour
                        else compact(source))
        except PreprocessError as e:
            if kind == "drawing" and isinstance(e, BlankInputError):
                if not inked_all_over(source):                     # an erased canvas: rest
                    return PageUpdate(rest_message(p))
                e = (f"The whole box is ink, so nothing stands out to read: Undo, or clear it and "
                     f"draw a {p.config.noun}.")
            gr.Warning(str(e))
            return PageUpdate(f"### ⚠️ {e}")
        a = p.analyse_input(image, ink) if pictures else p.glance(image, ink)
        shown = Shown(kind, kept, image, name, number)
        self._laid_out.put(_source_key(shown, name), image, image.nbytes)
        if not pictures:
            return PageUpdate("", p.label(a.probs, a.verdict), KEEP, shown).with_headline(
                headline(p, a))
        return self._update(p, a, shown, shared, layer, head, patch)

    def _reanalysis(self, shown: Shown, name, judged: bool = False) -> tuple[Predictor, Analysis]:
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

    # --- events -----------------------------------------------------------------------------
    def follow_drawing(self, value, name, request: gr.Request = None):
        """While the pen moves: (status, label, drawing number) — the answer alone, for the
        canvas's "live" event. An answer overtaken by a newer drawing of the same visitor (the
        pen lifted meanwhile) changes nothing, so a stale answer never replaces a fresh one."""
        key = getattr(request, "session_hash", None)
        if self._newer(key, value):
            return gr.update(), gr.update(), gr.update()
        status, label, *_, number = self.analyse_drawing(value, name, None, None, None, None,
                                                         request=None, pictures=False)
        if self._newer(key, value):
            return gr.update(), gr.update(), gr.update()
        return status, label, number

    def _newer(self, key, value) -> bool:
        """Whether this visitor has sent a drawing newer than `value`; notes `value` as seen."""
        n = seq(value)
        if key is None or not n:
            return False
        latest = self._latest.get(key, 0)
        remember(self._latest, key, max(latest, int(n)))
        return latest > int(n)

    def analyse_drawing(self, value, name, shared, layer, head, patch, tab=None, shown=None,
                        request: gr.Request = None, pictures: bool = True):
        """The canvas's PNG (vit/ui/canvas.py) when the pen lifts: the answer and every picture.
        A value that came from an example says so in the status. The last output echoes the
        drawing's number (#answered on the page). `tab`, `shown`: the tab in view and the input
        on screen — a hidden canvas (a model switch puts the new model's example on it) never
        replaces an upload's or a test image's answer (nor the Upload tab's file whose answer is
        that the new model can't read it); back on Draw, `to_draw_tab` answers it."""
        key = getattr(request, "session_hash", None)
        if tab not in (None, "draw") and ((isinstance(shown, Shown) and shown.kind != "drawing")
                                          or (tab == "upload" and key in self._uploads)):
            return *unchanged(), gr.update()     # not noted as newer: it replaced nothing
        self._newer(key, value)
        p = self.predictor(name)
        try:
            source = read_drawing(value)
        except PreprocessError as e:
            gr.Warning(str(e))
            return *PageUpdate(f"### ⚠️ {e}").outputs(), seq(value)
        if source is None:                          # an empty or erased canvas: rest
            return *PageUpdate(rest_message(p)).outputs(), seq(value)
        u = self._analyse("drawing", source, name, shared, layer, head, patch, pictures,
                          int(seq(value) or 0))
        example = value.get("example") if isinstance(value, dict) else None
        if u.label and example in map(example_name, self.examples[p.config.style.name]):
            made, again = (("a picture of a", f"Draw over it, upload your own {p.config.noun} on "
                                               f"the Upload tab")
                           if p.config.style.colour else
                           ("a drawn", f"Draw over it, clear it and draw your own {p.config.noun}"))
            u = u.with_headline(f"### Example: {made} {example} — read as "
                                f"**{top_label(u.label)}**\n{again}, or pick another example "
                                f"below the canvas.")
        return *for_tab(u, tab, "draw").outputs(), seq(value)

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

    def upload_changed(self, path, name, shared, layer, head, patch, request: gr.Request = None):
        """The upload's change event. When one picture replaces another, Gradio fires it twice
        with the same file within milliseconds: the second changes nothing (its answer and its
        warning would only repeat the first's)."""
        key, now = getattr(request, "session_hash", None), time.monotonic()
        if path is None:                    # removed: the same file uploaded again is new
            self._uploads.pop(key, None)
        elif key is not None:
            last = self._uploads.get(key)
            remember(self._uploads, key, (path, name, now))
            if last is not None and last[:2] == (path, name) and now - last[2] < 2.0:
                return unchanged()
        return self.analyse_upload(path, name, shared, layer, head, patch)

    def analyse_upload(self, path, name, shared, layer, head, patch):
        if path is None:
            return PageUpdate("### Upload a picture (examples are on the Draw tab)").outputs()
        return self._analyse("upload", path, name, shared, layer, head, patch).outputs()

    # --- tabs: the answer follows the input in view ----------------------------------------
    def to_draw_tab(self, value, shown, name, shared, layer, head, patch,
                    request: gr.Request = None):
        """Back on the Draw tab after an upload or a test image (or a model switch that put a new
        example on the hidden canvas): the canvas's drawing again — the answer beside it must be
        the drawing's —, or the canvas's prompt when it is empty."""
        if (isinstance(shown, Shown) and shown.kind == "drawing" and shown.model == name
                and str(shown.number) == seq(value)):
            return *status_only(shown.headline), gr.update()       # its own headline back
        # The canvas as it was at the click: a drawing the visitor sent since (a Clear clicked
        # right after the tab, whose lift ran beside this) has its own answer, which stands.
        key = getattr(request, "session_hash", None)
        if self._newer(key, value):
            return *unchanged(), gr.update()
        out = self.analyse_drawing(value, name, shared, layer, head, patch, request=request)
        return (*unchanged(), gr.update()) if self._newer(key, value) else out

    def to_upload_tab(self, path, shown, name, shared, layer, head, patch):
        """On the Upload tab: its picture's answer; with none yet, a headline asking for one that
        says what the answer below still belongs to."""
        if path is None:
            return status_only(PROMPT["upload"] + still_showing(shown))
        if (isinstance(shown, Shown) and shown.kind == "upload" and shown.source == path
                and shown.model == name):
            return status_only(shown.headline)
        return self.analyse_upload(path, name, shared, layer, head, patch)

    def to_test_tab(self, shown, name):
        """On the Test set tab, once it is open: the test image's headline on screen, or until
        one is clicked, a headline saying so (without a test set on disk, that there is none)."""
        if isinstance(shown, Shown) and shown.kind == "test":
            return status_only(shown.headline)
        prompt = PROMPT["test"] if self.answers.ready(name) else NO_TEST_SET
        return status_only(prompt + still_showing(shown))

    def first_view(self, name):
        """At page load, a worked example on the canvas rather than empty boxes: the canvas
        sends it back as a drawing, and the answer and its explanation follow."""
        p = self.predictor(name)
        paths = self.examples[p.config.style.name]
        first = FIRST_EXAMPLE.get(p.config.style.name)
        return self.canvas_value(next((x for x in paths if example_name(x) == first), paths[0]), p)

    def reanalyse(self, shown, name, shared, layer, head, patch, tab=None,
                  request: gr.Request = None):
        """After a model switch: the same input, through the new model — unless the visitor sent
        a newer drawing (or cleared the canvas) meanwhile: its own answer then stands."""
        if not isinstance(shown, Shown):
            return PageUpdate(rest_message(self.predictor(name))).outputs()
        if shown.kind == "drawing" and self._crosses(shown.model, name):
            return unchanged()                     # the new model's example is on its way
        key = getattr(request, "session_hash", None)
        # Newer than a drawing re-read: any drawing sent after it (even one whose answer had not
        # yet replaced `shown` when this started); than anything else: one sent during this.
        before = shown.number or self._latest.get(key, 0)
        try:
            p, a = self._reanalysis(shown, name, judged=True)
        except PreprocessError as e:               # an upload's file gone from the cache
            return PageUpdate(f"### ⚠️ {e}").outputs()
        if key is not None and self._latest.get(key, 0) > before:
            return unchanged()
        kept = Shown(shown.kind, shown.source, a.image, name, shown.number, shown.caption)
        # A test image keeps saying where it comes from (another model's test set, maybe).
        status = headline(p, a) + (f"\nThis is {shown.caption}." if shown.caption else "")
        u = self._update(p, a, kept, shared, layer, head, patch, status)
        return for_tab(u, tab, TAB_OF[shown.kind]).outputs()

    def _analysed(self, shown, name) -> tuple[Predictor, Analysis] | None:
        """The input on screen as it was analysed for model `name`; None while it belongs to
        another model: a model switch's re-analysis is on its way and redraws every view (the
        input may not even be readable by the new model, a photo by a digit model say)."""
        if not isinstance(shown, Shown) or shown.model != name:
            return None
        return self._reanalysis(shown, name)

    def rescale(self, shown, name, shared, layer=None):
        if not isinstance(shown, Shown):
            return None
        got = self._analysed(shown, name)
        return gr.update() if got is None else views.attention_grid(*got, shared, layer)

    def regrid(self, shown, name, shared, layer):
        """A big model's attention picture shows the chosen layer's heads: it follows the slider."""
        if not isinstance(shown, Shown) or not views.big(self.predictor(name)):
            return gr.update()
        return self.rescale(shown, name, shared, layer)

    def explore(self, shown, name, layer, head, patch):
        """The one-patch explorer, and the layer and head sliders back in range if a typed value
        was out of it."""
        p = self.predictor(name)
        sliders = views.snapped(p, layer, head)
        if not isinstance(shown, Shown):
            return None, None, *sliders
        got = self._analysed(shown, name)
        if got is None:
            return gr.update(), gr.update(), *sliders
        return *views.explorer(*got, layer, head, patch), *sliders

    def pick_patch(self, shown, name, layer, head, evt: gr.SelectData):
        p = self.predictor(name)
        try:
            x, y = (float(v) for v in evt.index[:2])
        except (TypeError, ValueError):
            x = y = float("nan")
        if not (math.isfinite(x) and math.isfinite(y)):        # a click can't be at NaN or inf
            return gr.update(), gr.update(), gr.update()
        patch = patch_at(x, y, views.PICK_SIZE, p.grid)
        if not isinstance(shown, Shown):
            return patch, None, None
        got = self._analysed(shown, name)
        if got is None:
            return patch, gr.update(), gr.update()
        return patch, *views.explorer(*got, layer, head, patch)

    def pick_head(self, name, evt: gr.SelectData):
        """A click on a map of the layers x heads picture opens that layer and head below."""
        p = self.predictor(name)
        try:
            x, y = (float(v) for v in evt.index[:2])
        except (TypeError, ValueError):
            return gr.update(), gr.update()
        hit = views.grid_hit(p, x, y) if math.isfinite(x) and math.isfinite(y) else None
        if hit is None:
            return gr.update(), gr.update()
        return tuple(gr.update() if v is None else v + 1 for v in hit)

    def choose_model(self, name, previous):
        """Switch models; on a broken one say why and stay on the previous one."""
        try:
            p = self.predictor(name)
        except gr.Error as e:
            gr.Warning(e.message)
            return (gr.update(value=previous, choices=self.models.choices()), previous,
                    *[gr.update()] * 11)
        # A drawing means nothing to a photo model, nor a photo to a drawing model: across that
        # line the new model's own first example goes on the canvas (reanalyse then waits).
        canvas = self.first_view(name) if self._crosses(previous, name) else gr.update()
        return (gr.update(), name, p.card(), *views.slider_updates(p), None,
                *why_panel.model_updates(p), draw_tab.hint(p.config.noun, p.config.style.name),
                gr.update(value=self.gallery(p), selected_index=None),
                *mechanism_panel.slider_updates(p), canvas)

    def _crosses(self, before, after) -> bool:
        """Whether models `before` and `after` are on different sides of photo / drawing."""
        try:
            photo = [self.predictor(n).config.style.colour for n in (before, after)]
        except (gr.Error, TypeError):
            return False
        return photo[0] != photo[1]

    def gallery(self, p: Predictor) -> list[tuple[str, str]]:
        """The examples under the canvas for a model: (picture, caption)."""
        return [(x, example_name(x)) for x in self.examples[p.config.style.name]]

    def _on_screen(self, shown, name) -> tuple[Predictor, Analysis] | str:
        """The input on screen through model `name`, or one line saying why there is none."""
        if not isinstance(shown, Shown):
            return "Draw or upload something first."
        try:
            return self._reanalysis(shown, name)
        except PreprocessError as e:               # an upload's file gone from the cache
            return f"⚠️ {e}"

    def why(self, shown, name, target, heads):
        """The "What drove the answer" panel for the input on screen (and the small copy of its
        relevance map beside the answer)."""
        got = self._on_screen(shown, name)
        if isinstance(got, str):
            return None, None, "" if shown is None else got, "", None
        return why_panel.render(*got, target, heads)

    def mechanism(self, opened, shown, name, layer, head, patch, cls):
        """The step-by-step walk through one attention head, while its panel is open."""
        if not opened:
            return gr.update(), gr.update()
        got = self._on_screen(shown, name)
        if isinstance(got, str):
            return None, got
        return mechanism_panel.render(*got, layer, head, patch, cls)

    def mechanism_model(self, opened, name):
        """The Figure 7 views of a model (cached per model), while the panel is open."""
        if not opened:
            return (gr.update(),) * 4
        return mechanism_panel.model_images(self.predictor(name), self.answers.data_dir).as_tuple()

    def switch_heads(self, shown, name, heads):
        got = self._on_screen(shown, name)
        return got if isinstance(got, str) else why_panel.switch_heads(*got, heads)

    def measure(self, shown, name):
        """The deletion test of the three maps on the input on screen."""
        got = self._on_screen(shown, name)
        return got if isinstance(got, str) else why_panel.faithfulness(*got)

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
    def testset_view(self, name, kind, true, pred, progress=gr.Progress()):
        self.predictor(name)                   # an unknown model: one line, not a traceback
        return self.answers.view(name, kind, true, pred, _progress(progress))

    def open_testset(self, name, kind, true, pred, progress=gr.Progress()):
        return (True, *self.testset_view(name, kind, true, pred, progress))

    def pick_cell(self, name, evt: gr.SelectData, progress=gr.Progress()):
        """A click on the confusion matrix filters the gallery to that cell."""
        p = self.predictor(name)
        try:
            cell = cell_at(float(evt.index[0]), float(evt.index[1]), len(p.class_names))
        except (TypeError, ValueError, IndexError, KeyError, OverflowError):
            cell = None
        if cell is None:
            return (gr.update(),) * 9
        true, pred = cell
        kind = "mistakes" if true != pred else "least confident"
        return (kind, true, pred, *self.testset_view(name, kind, true, pred, progress))

    def show_test_image(self, shown_idx, name, shared, layer, head, patch, evt: gr.SelectData):
        """A gallery click: that test image, as the model saw it (no preprocessing), in every view."""
        p = self.predictor(name)
        try:
            i = int(shown_idx[int(evt.index)])
            r = self.answers.get(name)
            image = r.images[i] / 255.0
        except (TypeError, ValueError, IndexError, KeyError, DataError):
            raise user_error("That test image is no longer listed; pick another.") from None
        a = p.analyse_input(image.astype(np.float32))
        best = int(a.probs.argmax())
        verdict = "✓ right" if best == r.labels[i] else "✗ wrong"
        status = (f"### Test image #{i} (true class **{md(p.class_names[r.labels[i]])}**): read as "
                  f"**{md(p.class_names[best])}** ({100 * a.probs[best]:.1f} %) — {verdict}")
        if not a.is_class:
            status += (f"\n{md(a.verdict.reason, 400)} A drawing like it would be answered "
                       f"\"{p.not_label}\".")
        true = md(p.class_names[r.labels[i]])
        shown = Shown("test", a.image, a.image, name,
                      caption=f"{md(p.config.title)} test image #{i}, true class **{true}**")
        return self._update(p, a, shown, shared, layer, head, patch, status).outputs()

    def clear_testset(self, opened, name):
        """At a model switch, until the new model's answers are in: no stale gallery whose
        pictures a click would mistake for the new model's test images."""
        if not opened:
            return (gr.update(),) * 6
        return (f"Loading the {md(self.predictor(name).config.title)} test set…", None, None,
                gr.update(value=[], selected_index=None), [], gr.update())

    def refresh_testset(self, opened, name, kind, true, pred, progress=gr.Progress()):
        """After a model switch: its class names in the filters, and its answers if the tab is open."""
        p = self.predictor(name)
        choices = gr.update(choices=testset_tab.class_choices(p.class_names), value=-1)
        if not opened:
            return choices, choices, *[gr.update()] * 6
        status, confusion, reliability, gallery, *rest = self.testset_view(name, kind, -1, -1,
                                                                           progress)
        # No thumbnail highlighted: the one clicked before was another model's test image.
        return (choices, choices, status, confusion, reliability,
                gr.update(value=gallery, selected_index=None), *rest)


LAID_OUT_BYTES = 32 << 20     # model inputs laid out per (source, model): ~10,000 MNIST-sized ones


def _source_key(shown: Shown, name: str) -> tuple:
    """An input's identity across models: its kept source (an upload's path, or an array's bytes)."""
    src = shown.source
    return (shown.kind, src if isinstance(src, str) else array_key(np.asarray(src)), name)


def _progress(progress):
    return lambda done, total: progress(done / total, desc="Testing the model on the test set")


def top_label(label: dict) -> str:
    """The top of a Label value (Predictor.label): a verdict such as "not a digit", or the most
    probable class."""
    if isinstance(label.get("confidences"), list) and "label" in label:
        return str(label["label"])
    return max(label, key=label.get)


def remember(per_visitor: OrderedDict, key, value, keep: int = 10_000) -> None:
    """Note a small value for a visitor, keeping the `keep` most recent visitors' only."""
    per_visitor[key] = value
    per_visitor.move_to_end(key)
    while len(per_visitor) > keep:
        per_visitor.popitem(last=False)


def unchanged() -> tuple:
    """An analysing handler's outputs that leave the page as it is."""
    return tuple(gr.update() for _ in PageUpdate("").outputs())


# A colour picture kept per visitor, to lay out again for another model: as large as the largest
# input a model here reads (a converted ViT-B/16: 224 px), 150 KB instead of the canvas's 480.
KEPT_COLOUR_SIDE = 224


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


def status_only(text: str) -> tuple:
    """An analysing handler's outputs that change the headline alone."""
    return text, *unchanged()[1:]


# What the answer on screen is for, as a tab that is not its input's says it.
SHOWING = {"drawing": "your drawing", "upload": "your upload", "test": "the test image you picked"}
TAB_OF = {"drawing": "draw", "upload": "upload", "test": "test"}      # an input's own tab
# The headline of a tab whose own input is not on screen (yet).
PROMPT = {"upload": "### Upload or paste a picture",
          "test": "### Click a test image to explain it"}
NO_TEST_SET = "### This model's test set is not on this machine"


def for_tab(u: PageUpdate, tab, origin: str) -> PageUpdate:
    """The headline for the tab in view: an update from another tab's input (an answer in
    flight when the tab changed, a model switch re-reading it) keeps its answer and pictures,
    and the headline says what this tab wants; the input's own headline stays in its Shown for
    the switch back."""
    if not isinstance(tab, str) or tab not in PROMPT or tab == origin:
        return u
    return PageUpdate(PROMPT[tab] + still_showing(u.shown), u.label, u.pictures, u.shown)


def still_showing(shown) -> str:
    """A second headline line for a tab whose input is not (yet) the one on screen."""
    if not isinstance(shown, Shown):
        return ""
    return f"\nUntil then, the answer and pictures below are still for {SHOWING[shown.kind]}."


def rest_message(p: Predictor) -> str:
    """The headline over an empty canvas: what to draw — or, for a photo model (a black pen
    draws no photo), where the pictures are."""
    if p.config.style.colour:
        return f"### 🖼️ Pick a picture below the canvas, or upload a {p.config.noun}"
    return f"### ✏️ Draw a {p.config.noun} in the box"


def headline(p: Predictor, a: Analysis) -> str:
    """The status line above the probabilities: what the model reads, or why it is not one of
    its classes (one sentence)."""
    probs = a.probs
    order = np.argsort(probs)[::-1]
    best, second = order[0], order[min(1, len(order) - 1)]
    if not a.is_class:
        text = f"### 🚫 {p.not_label.capitalize()}\n{md(a.verdict.reason, 400)}"
        if a.verdict.kind != "unsure":         # the sentence says why; this, what the model saw
            text += (f" (On its own the model would read it as **{md(p.class_names[best])}**, "
                     f"{100 * probs[best]:.0f} %.)")
        return text
    text = f"### The model reads this as **{md(p.class_names[best])}** ({100 * probs[best]:.1f} %)"
    if probs[best] < 0.6 and second != best:
        text += (f"\nNot sure: it could also be **{md(p.class_names[second])}** "
                 f"({100 * probs[second]:.1f} %).")
    return text


def create_app(checkpoints=None, data_dir=None, device=None, threads: int | None = None,
               examples_dir=None, models: Models | None = None) -> gr.Blocks:
    """Build the page. `checkpoints`: a folder of checkpoint folders (default $VIT_CHECKPOINTS,
    else the bundled checkpoints/); `data_dir`: where test sets are ($VIT_DATA_DIR, else data/);
    `threads`: torch CPU threads ($VIT_THREADS, else 1: with two cores, two concurrent requests on
    one thread each beat one request whose two threads fight the other's). Raises NoModelsError."""
    never_rewrite_cached_images()
    hide_server_paths()
    small_sessions()
    short_errors()
    limits = Limits.from_env()
    torch.set_num_threads(threads or env_int("VIT_THREADS", 1, 1, 4 * (os.cpu_count() or 1)))
    try:
        device = pick_device(device or os.environ.get("VIT_DEVICE") or "auto")
    except ValueError as e:
        raise StartupError(f"VIT_DEVICE: {e}") from None
    models = models or Models(checkpoints or os.environ.get("VIT_CHECKPOINTS", ROOT / "checkpoints"),
                              device)
    data_dir = Path(data_dir) if data_dir else data_dir_for_app()
    # A fresh private folder (0700) per process, removed at exit: a fixed /tmp path could be
    # another user's.
    if examples_dir is None:
        examples_dir = tempfile.mkdtemp(prefix="vit-explorer-examples-")
        atexit.register(shutil.rmtree, examples_dir, ignore_errors=True)
    base = Path(examples_dir)
    examples = {style: write_examples(base / style, style) for style in STYLES}
    page = Page(models, data_dir, examples)
    p = models.get(models.default)
    on_space = "SPACE_ID" in os.environ

    with gr.Blocks(title="ViT Explorer", delete_cache=CACHE_LIFETIME) as demo:
        with gr.Row(equal_height=True):
            with gr.Column(scale=3, min_width=300):
                gr.Markdown("# ViT Explorer\nA small Vision Transformer, trained from scratch, "
                            "cuts your drawing into patches, reads them as a sequence of tokens and "
                            "names the class. Below: what it sees, where every attention head "
                            "looks, and what drove the answer.", elem_id="intro")
            model = FreeDropdown(models.choices(), value=models.default, label="Model",
                                info="what it was trained to recognise", elem_id="model",
                                visible=len(models.names) > 1, scale=0, min_width=360)
        shown = gr.State(None)
        patch = gr.State(None)                   # the clicked patch (0-based); None = the centre
        current = gr.State(models.default)
        tab = gr.State("draw")                   # the input tab in view
        with gr.Row(equal_height=False, elem_id="top"):
            with gr.Column(scale=5, min_width=300, elem_id="input-col"):
                with gr.Tabs():
                    with gr.Tab("Draw", id="draw") as draw_el:
                        draw = draw_tab.build(p.config.noun, p.config.style.name,
                                              page.gallery(p))
                        pad = draw.pad
                    with gr.Tab("Upload", id="upload") as upload_el:
                        upload = upload_tab.build()
                    # On a Space the tab appears only when the data was put there too.
                    tst = testset_tab.build(models, data_dir, visible=not on_space
                                            or testset_tab.data_on_disk(models, data_dir))
            with gr.Column(scale=4, min_width=300, elem_id="result-col"):
                status = gr.Markdown(rest_message(p), elem_id="status",
                                     label="headline")
                with gr.Row(equal_height=False):
                    label = VerdictLabel(num_top_classes=10, label="Probability per class",
                                         elem_id="prediction", scale=3, min_width=200)
                    glance = gr.Image(label="What drove it (relevance; more below)",
                                      interactive=False, elem_id="glance", height=260,
                                      buttons=[], scale=2, min_width=160)
        panel = views.build(p.model.cfg.depth, p.model.cfg.heads)
        why = why_panel.build(p)
        mech = mechanism_panel.build(p)
        mech_open = gr.State(False)
        with gr.Accordion("About this model", open=False, elem_id="about-model"):
            card = gr.Markdown(p.card())

        # Sliders follow the chosen model's depth and heads (FreeSlider, vit/ui/views.py); the
        # handlers clamp what arrives.
        outs = [status, label, *panel.pictures, shown]
        ins = [model, panel.shared, panel.layer, panel.head, patch]
        quiet = dict(show_progress="hidden", api_visibility="private")
        # The API's own endpoint, defined first so that it heads the "Use via API" page.
        api_file = ImageFile(visible=False, type="filepath", label="image")
        api_label = VerdictLabel(visible=False, label="prediction")
        api_file.upload(page.classify, api_file, api_label, api_name="classify")
        # After every analysis (the label first): the class-specific maps, a moment later.
        why_args = ([shown, model, why.target, why.heads], [*why.outputs, glance])
        # The test set's first pass shows its progress over the confusion matrix's box alone,
        # not over the status line and filters (where it overprinted the text).
        tst_progress = dict(api_visibility="private", show_progress_on=tst.confusion)
        # The mechanism panel works only while open (a walk-through costs ~40 ms per change).
        mech_args = ([mech_open, shown, model, mech.layer, mech.head, patch, mech.cls],
                     mech.outputs)
        # One lane for these, apart from the label's: they never hold up the next drawing's label.
        later = dict(quiet, concurrency_limit=1, concurrency_id="why")
        # The canvas sends its PNG while the pen moves ("live": the answer alone) and when it
        # lifts ("lift": everything); always_last: a request waiting behind a running one is
        # replaced by the newest, never queued up.
        pad.live(page.follow_drawing, [pad, model], [status, label, draw.answered],
                 trigger_mode="always_last", **quiet)
        pad.lift(page.analyse_drawing, [pad, *ins, tab, shown], [*outs, draw.answered],
                 trigger_mode="always_last", show_progress="hidden",
                 api_name="analyse_drawing").then(page.why, *why_args, **later).then(
            page.mechanism, *mech_args, **quiet)
        draw.examples.select(page.load_example, [model], pad, **quiet)
        upload.change(page.upload_changed, [upload, *ins], outs, show_progress="hidden",
                      api_name="analyse_upload").then(page.why, *why_args, **later).then(
            page.mechanism, *mech_args, **quiet)
        # A tab's answer follows its input: back on Draw, the canvas's drawing is answered again.
        for el, name in ((draw_el, "draw"), (upload_el, "upload"), (tst.tab, "test")):
            el.select(lambda n=name: n, None, tab, queue=False, api_visibility="private")
        draw_el.select(page.to_draw_tab, [pad, shown, *ins], [*outs, draw.answered],
                       **quiet).then(page.why, *why_args, **later).then(
            page.mechanism, *mech_args, **quiet)
        upload_el.select(page.to_upload_tab, [upload, shown, *ins], outs, **quiet).then(
            page.why, *why_args, **later).then(page.mechanism, *mech_args, **quiet)
        why.target.change(page.why, *why_args, trigger_mode="always_last", **later)
        why.heads.change(page.switch_heads, [shown, model, why.heads], why.ablation,
                         trigger_mode="always_last", **quiet)
        why.measure.click(page.measure, [shown, model], why.faithfulness,
                          api_visibility="private")
        panel.shared.change(page.rescale, [shown, model, panel.shared, panel.layer], panel.grid,
                            **quiet)
        panel.layer.change(page.regrid, [shown, model, panel.shared, panel.layer], panel.grid,
                           trigger_mode="always_last", **quiet)
        for s in (panel.layer, panel.head):
            s.change(page.explore, [shown, model, panel.layer, panel.head, patch],
                     [panel.pick, panel.row, panel.layer, panel.head], trigger_mode="always_last",
                     **quiet)
        panel.grid.select(page.pick_head, [model], [panel.layer, panel.head], **quiet)
        mech.accordion.expand(lambda: True, None, mech_open, **quiet).then(
            page.mechanism_model, [mech_open, model], mech.model_outputs, **quiet).then(
            page.mechanism, *mech_args, **quiet)
        mech.accordion.collapse(lambda: False, None, mech_open, **quiet)
        for c in (mech.layer, mech.head, mech.cls):
            c.change(page.mechanism, *mech_args, trigger_mode="always_last", **quiet)
        panel.pick.select(page.pick_patch, [shown, model, panel.layer, panel.head],
                          [patch, panel.pick, panel.row], **quiet).then(
            page.mechanism, *mech_args, **quiet)
        model.change(page.choose_model, [model, current],
                     [model, current, card, panel.layer, panel.head, patch, why.target, why.heads,
                      draw.hint, draw.examples, mech.layer, mech.head, pad],
                     api_visibility="private").then(
            page.reanalyse, [shown, *ins, tab], outs, **quiet).then(
            page.why, *why_args, **later).then(
            page.mechanism_model, [mech_open, model], mech.model_outputs, **quiet).then(
            page.mechanism, *mech_args, **quiet).then(
            page.refresh_testset, [tst.opened, model, tst.kind, tst.true, tst.pred],
            [tst.true, tst.pred, *tst.views], **tst_progress)
        model.change(page.clear_testset, [tst.opened, model], tst.views, **quiet)
        tst.tab.select(page.open_testset, [model, tst.kind, tst.true, tst.pred],
                       [tst.opened, *tst.views], **tst_progress).then(
            page.to_test_tab, [shown, model], outs, **quiet)
        # always_last: quick clicks on the filters are never dropped; the last one wins.
        for f in (tst.kind, tst.true, tst.pred):
            f.input(page.testset_view, [model, tst.kind, tst.true, tst.pred], tst.views,
                    trigger_mode="always_last", **tst_progress)
        tst.confusion.select(page.pick_cell, [model], [tst.kind, tst.true, tst.pred, *tst.views],
                             **tst_progress)
        tst.gallery.select(page.show_test_image, [tst.shown, *ins], outs, **quiet).then(
            None, js=SCROLL_TO_RESULT).then(page.why, *why_args, **later).then(
            page.mechanism, *mech_args, **quiet)
        # At load the example goes on the canvas, which sends it back like a drawing.
        demo.load(page.first_view, model, pad, **quiet)
    demo.queue(max_size=limits.queue_size, default_concurrency_limit=CONCURRENCY)
    demo.limits = limits
    demo.page = page                    # for tests and notebooks: the handlers over these models
    return demo


def launch(demo: gr.Blocks, **kwargs):
    """Serve the page with its script, style and limits (vit/ui/limits.py; GRADIO_SERVER_NAME /
    GRADIO_SERVER_PORT honoured)."""
    limits = getattr(demo, "limits", None) or Limits()
    files = raise_file_limit()
    # Idle sockets count as connections: a low cap would let a few hundred of them shut visitors
    # out, so it is high, and below the open-file limit (sockets are files), which it protects.
    bounded_connections(min(limits.connections, max(64, files - 64)), FIRST_REQUEST_SECONDS)
    # run_history=False: Gradio 6.31 otherwise copies every event's inputs and outputs (each
    # drawing's PNG, every picture) into the browser's localStorage, ~250 ms of the page's main
    # thread per event here — the page stuttered while drawing — and keeps drawings there.
    return demo.launch(css=CSS, show_error=True, max_file_size=MAX_FILE_BYTES, run_history=False,
                       state_session_capacity=limits.sessions,
                       app_kwargs={"middleware": limits.middleware()}, **kwargs)
