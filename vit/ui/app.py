"""`create_app(...)`: the whole page, built from arguments. Nothing happens at import.

The page: a model selector, Draw / Upload / Test set tabs, the prediction, then the analysis
panels (vit/ui/views.py). Every handler that analyses an input returns a `PageUpdate`; every
message a visitor sees is one line without server paths; nothing a client sends can raise
anything but `gr.Error`.
"""
from __future__ import annotations

import math
import os
import tempfile
from collections import OrderedDict
from pathlib import Path

import gradio as gr
import numpy as np
import torch

from .. import explain as ex
from .. import testset as ts
from ..checkpoint import CheckpointError
from ..data import DataError
from ..evaluation import pick_device
from ..examples import write_examples
from ..inference import Analysis, Predictor
from ..preprocessing import BlankInputError, PreprocessError, compact, decode
from . import draw_tab, testset_tab, upload_tab, views, why_panel
from .gradio_patches import (
    ImageFile,
    VerdictLabel,
    handlers_validate,
    hide_server_paths,
    never_rewrite_cached_images,
)
from .models import Models, StartupError
from .state import PageUpdate, Shown

ROOT = Path(__file__).resolve().parents[2]
CSS = draw_tab.CSS + ".hint { color: #555; font-size: 0.95em; }\n"
# A burst of requests must not make the next visitor wait for answers nobody will read: the
# queue holds a few per worker; beyond that a client is told at once that the server is busy.
CONCURRENCY = 2
# After a test image is chosen, bring its result into view (it appears above the tab).
SCROLL_TO_RESULT = "() => document.querySelector('#status')?.scrollIntoView({block: 'start'})"
FIRST_VIEWS = 8          # first views kept (each ~2 MB of pictures): every visitor's is the same


def env_int(name: str, default: int, lo: int, hi: int) -> int:
    """An integer setting from the environment, or StartupError with one line."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise StartupError(f"{name}={raw[:20]!r} is not a whole number") from None
    if not lo <= value <= hi:
        raise StartupError(f"{name} must be between {lo} and {hi}, not {value}")
    return value


def user_error(message: str) -> gr.Error:
    """An error for the person (or client) on the other end: shown to them, not logged as a crash."""
    return gr.Error(message, print_exception=False)


class Page:
    """The handlers, over one set of models. Methods take what Gradio passes, positionally."""

    def __init__(self, models: Models, data_dir: Path, examples: list[str]):
        self.models, self.examples = models, examples
        self.answers = testset_tab.Answers(models, data_dir)
        self._first: OrderedDict[tuple, tuple] = OrderedDict()      # at most FIRST_VIEWS

    # --- helpers ----------------------------------------------------------------------------
    def predictor(self, name) -> Predictor:
        try:
            return self.models.get(name)
        except CheckpointError as e:
            raise user_error(str(e)) from None

    def _update(self, p: Predictor, a: Analysis, shown: Shown, shared, layer, head, patch,
                status: str | None = None) -> PageUpdate:
        return PageUpdate(status or headline(p, a), p.label(a.probs, a.verdict),
                          views.render(p, a, shared, layer, head, patch), shown)

    def _analyse(self, kind: str, source, name, shared, layer, head, patch) -> PageUpdate:
        p = self.predictor(name)
        try:
            if kind == "drawing":        # its layer files, read once for the input and the copy
                source = decode(source)
            image, ink = p.read(source)
            # A drawing's session copy is its ink map (the same compact copy) when it has one.
            kept = (compact(source) if ink is None else ink) if kind == "drawing" else source
        except PreprocessError as e:
            if kind == "drawing" and isinstance(e, BlankInputError):   # an erased canvas: rest
                return PageUpdate(f"### ✏️ Draw a {p.config.noun} in the box")
            gr.Warning(str(e))
            return PageUpdate(f"### ⚠️ {e}")
        a = p.analyse_input(image, ink)
        return self._update(p, a, Shown(kind, kept, image, name), shared, layer, head, patch)

    def _reanalysis(self, shown: Shown, name, judged: bool = False) -> tuple[Predictor, Analysis]:
        """The input on screen through model `name`: as it was if already that model's input
        (a test image stays exactly the test image), else laid out again from its source.
        `judged`: the verdict is shown, so a drawing's or upload's ink checks run again too
        (the pictures alone don't need them)."""
        p = self.predictor(name)
        if shown.model == name or (shown.kind == "test" and p.fits(shown.image)):
            ink = p.ink(shown.source) if judged and shown.kind != "test" else None
            return p, p.analyse_input(shown.image, ink)
        return p, p.analyse(shown.source)

    # --- events -----------------------------------------------------------------------------
    def analyse_drawing(self, value, name, shared, layer, head, patch):
        return self._analyse("drawing", value, name, shared, layer, head, patch).outputs()

    def analyse_upload(self, path, name, shared, layer, head, patch):
        if path is None:
            return PageUpdate("### Upload a picture, or pick an example below").outputs()
        return self._analyse("upload", path, name, shared, layer, head, patch).outputs()

    def first_view(self, name, shared, layer, head, patch):
        """At page load, a worked example rather than empty boxes; the same for every visitor,
        so computed once per model and setting."""
        p = self.predictor(name)
        # Keyed by the clamped values, so a client sending odd numbers can't grow the cache.
        key = (name, bool(shared), *views.clamp(p, layer, head, patch))
        if key not in self._first:
            u = self._analyse("upload", self.examples[7], name, shared, layer, head, patch)
            if u.label:
                u.status = (f"### Example: a drawn 7 — read as **{top_label(u.label)}**\nDraw "
                            f"your own {p.config.noun} in the box (the brush is ready), or upload a "
                            f"picture.")
            self._first[key] = u.outputs()
            while len(self._first) > FIRST_VIEWS:   # valid settings still number in thousands
                self._first.popitem(last=False)
        self._first.move_to_end(key)
        return self._first[key]

    def reanalyse(self, shown, name, shared, layer, head, patch):
        """After a model switch: the same input, through the new model."""
        if not isinstance(shown, Shown):
            p = self.predictor(name)
            return PageUpdate(f"### ✏️ Draw a {p.config.noun} in the box").outputs()
        try:
            p, a = self._reanalysis(shown, name, judged=True)
        except PreprocessError as e:               # an upload's file gone from the cache
            return PageUpdate(f"### ⚠️ {e}").outputs()
        kept = Shown(shown.kind, shown.source, a.image, name)
        return self._update(p, a, kept, shared, layer, head, patch).outputs()

    def rescale(self, shown, name, shared):
        if not isinstance(shown, Shown):
            return None
        p, a = self._reanalysis(shown, name)
        return views.attention_grid(p, a, shared)

    def explore(self, shown, name, layer, head, patch):
        if not isinstance(shown, Shown):
            return None, None
        p, a = self._reanalysis(shown, name)
        return views.explorer(p, a, layer, head, patch)

    def pick_patch(self, shown, name, layer, head, evt: gr.SelectData):
        p = self.predictor(name)
        try:
            x, y = (float(v) for v in evt.index[:2])
        except (TypeError, ValueError):
            x = y = float("nan")
        if not (math.isfinite(x) and math.isfinite(y)):        # a click can't be at NaN or inf
            return gr.update(), gr.update(), gr.update()
        patch = ex.patch_at(x, y, views.PICK_SIZE, p.grid)
        if not isinstance(shown, Shown):
            return patch, None, None
        _, a = self._reanalysis(shown, name)
        return patch, *views.explorer(p, a, layer, head, patch)

    def pick_head(self, name, evt: gr.SelectData):
        """A click on a map of the layers x heads picture opens that layer and head below."""
        p = self.predictor(name)
        try:
            x, y = (float(v) for v in evt.index[:2])
        except (TypeError, ValueError):
            return gr.update(), gr.update()
        cfg = p.model.cfg
        hit = (ex.head_at(x, y, cfg.depth, cfg.heads, p.size)
               if math.isfinite(x) and math.isfinite(y) else None)
        if hit is None:
            return gr.update(), gr.update()
        return hit[0] + 1, hit[1] + 1

    def choose_model(self, name, previous):
        """Switch models; on a broken one say why and stay on the previous one."""
        try:
            p = self.predictor(name)
        except gr.Error as e:
            gr.Warning(e.message)
            return (gr.update(value=previous, choices=self.models.choices()), previous,
                    *[gr.update()] * 6)
        return (gr.update(), name, p.card(), *views.slider_updates(p), None,
                *why_panel.model_updates(p))

    def _on_screen(self, shown, name) -> tuple[Predictor, Analysis] | str:
        """The input on screen through model `name`, or one line saying why there is none."""
        if not isinstance(shown, Shown):
            return "Draw or upload something first."
        try:
            return self._reanalysis(shown, name)
        except PreprocessError as e:               # an upload's file gone from the cache
            return f"⚠️ {e}"

    def why(self, shown, name, target, heads):
        """The "What drove the answer" panel for the input on screen."""
        got = self._on_screen(shown, name)
        if isinstance(got, str):
            return None, None, "" if shown is None else got, ""
        return why_panel.render(*got, target, heads)

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
        return self.answers.view(name, kind, true, pred, _progress(progress))

    def open_testset(self, name, kind, true, pred, progress=gr.Progress()):
        return (True, *self.testset_view(name, kind, true, pred, progress))

    def pick_cell(self, name, evt: gr.SelectData, progress=gr.Progress()):
        """A click on the confusion matrix filters the gallery to that cell."""
        p = self.predictor(name)
        try:
            cell = ts.cell_at(float(evt.index[0]), float(evt.index[1]), len(p.class_names))
        except (TypeError, ValueError, IndexError):
            cell = None
        if cell is None:
            return (gr.update(),) * 8
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
        status = (f"### Test image #{i} (true class **{p.class_names[r.labels[i]]}**): read as "
                  f"**{p.class_names[best]}** ({100 * a.probs[best]:.1f} %) — {verdict}")
        if not a.is_class:
            status += f"\n{a.verdict.reason} A drawing like it would be answered \"{p.not_label}\"."
        shown = Shown("test", a.image, a.image, name)
        return self._update(p, a, shown, shared, layer, head, patch, status).outputs()

    def refresh_testset(self, opened, name, kind, true, pred, progress=gr.Progress()):
        """After a model switch: its class names in the filters, and its answers if the tab is open."""
        p = self.predictor(name)
        choices = gr.update(choices=testset_tab.class_choices(p.class_names), value=-1)
        if not opened:
            return choices, choices, *[gr.update()] * 5
        return choices, choices, *self.testset_view(name, kind, -1, -1, progress)


def _progress(progress):
    return lambda done, total: progress(done / total, desc="Testing the model on the test set")


def top_label(label: dict) -> str:
    """The top of a Label value (Predictor.label): a verdict such as "not a digit", or the most
    probable class."""
    if isinstance(label.get("confidences"), list) and "label" in label:
        return str(label["label"])
    return max(label, key=label.get)


def headline(p: Predictor, a: Analysis) -> str:
    """The status line above the probabilities: what the model reads, or why it is not one of
    its classes (one sentence)."""
    probs = a.probs
    order = np.argsort(probs)[::-1]
    best, second = order[0], order[min(1, len(order) - 1)]
    if not a.is_class:
        text = f"### 🚫 {p.not_label.capitalize()}\n{a.verdict.reason}"
        if a.verdict.kind != "unsure":         # the sentence says why; this, what the model saw
            text += (f" (On its own the model would read it as **{p.class_names[best]}**, "
                     f"{100 * probs[best]:.0f} %.)")
        return text
    text = f"### The model reads this as **{p.class_names[best]}** ({100 * probs[best]:.1f} %)"
    if probs[best] < 0.6 and second != best:
        text += f"\nNot sure: it could also be **{p.class_names[second]}** ({100 * probs[second]:.1f} %)."
    return text


def create_app(checkpoints=None, data_dir=None, device=None, threads: int | None = None,
               examples_dir=None, models: Models | None = None) -> gr.Blocks:
    """Build the page. `checkpoints`: a folder of checkpoint folders (default $VIT_CHECKPOINTS,
    else the bundled checkpoints/); `data_dir`: where test sets are ($VIT_DATA_DIR, else data/);
    `threads`: torch CPU threads ($VIT_THREADS, else 1: with two cores, two concurrent requests on
    one thread each beat one request whose two threads fight the other's). Raises NoModelsError."""
    never_rewrite_cached_images()
    hide_server_paths()
    torch.set_num_threads(threads or env_int("VIT_THREADS", 1, 1, 4 * (os.cpu_count() or 1)))
    try:
        device = pick_device(device or os.environ.get("VIT_DEVICE") or "auto")
    except ValueError as e:
        raise StartupError(f"VIT_DEVICE: {e}") from None
    models = models or Models(checkpoints or os.environ.get("VIT_CHECKPOINTS", ROOT / "checkpoints"),
                              device)
    data_dir = Path(data_dir) if data_dir else ts.data_dir_for_app()
    examples = write_examples(examples_dir or Path(tempfile.gettempdir()) / "vit-explorer-examples")
    page = Page(models, data_dir, examples)
    p = models.get(models.default)
    on_space = "SPACE_ID" in os.environ

    with gr.Blocks(title="ViT Explorer", delete_cache=(1800, 3600)) as demo:
        gr.Markdown("# ViT Explorer\nDraw a digit (or upload a picture). A small Vision Transformer, "
                    "trained from scratch, cuts it into patches, reads them as a sequence of tokens and "
                    "predicts the class. Below: what it sees, and where every attention head looks.")
        shown = gr.State(None)
        patch = gr.State(None)                   # the clicked patch (0-based); None = the centre
        current = gr.State(models.default)
        model = gr.Dropdown(models.choices(), value=models.default, label="Model",
                            info="the data set each model was trained on",
                            visible=len(models.names) > 1)
        with gr.Row(equal_height=False):
            with gr.Column(scale=5, min_width=380):
                with gr.Tabs():
                    with gr.Tab("Draw", id="draw"):
                        pad = draw_tab.build(p.config.noun)
                    with gr.Tab("Upload", id="upload"):
                        upload = upload_tab.build(examples)
                    # On a Space the tab appears only when the data was put there too.
                    tst = testset_tab.build(models, data_dir, visible=not on_space
                                            or testset_tab.data_on_disk(models, data_dir))
            with gr.Column(scale=4, min_width=320):
                status = gr.Markdown(f"### ✏️ Draw a {p.config.noun} in the box", elem_id="status")
                label = VerdictLabel(num_top_classes=10, label="Prediction (probability per class)",
                                     elem_id="prediction")
        panel = views.build(p.model.cfg.depth, p.model.cfg.heads)
        why = why_panel.build(p)
        with gr.Accordion("About this model", open=False):
            card = gr.Markdown(p.card())

        # Sliders follow the chosen model's depth and heads; the handlers clamp what arrives.
        handlers_validate(panel.layer, panel.head, model)
        outs = [status, label, *panel.pictures, shown]
        ins = [model, panel.shared, panel.layer, panel.head, patch]
        quiet = dict(show_progress="hidden", api_visibility="private")
        # The API's own endpoint, defined first so that it heads the "Use via API" page.
        api_file = ImageFile(visible=False, type="filepath", label="image")
        api_label = VerdictLabel(visible=False, label="prediction")
        api_file.upload(page.classify, api_file, api_label, api_name="classify")
        # After every analysis (the label first): the class-specific maps, a moment later.
        why_args = ([shown, model, why.target, why.heads], why.outputs)
        # One lane for these, apart from the label's: they never hold up the next drawing's label.
        later = dict(quiet, concurrency_limit=1, concurrency_id="why")
        pad.change(page.analyse_drawing, [pad, *ins], outs, trigger_mode="always_last",
                   show_progress="hidden", api_name="analyse_drawing").then(
            page.why, *why_args, **later)
        upload.change(page.analyse_upload, [upload, *ins], outs, show_progress="hidden",
                      api_name="analyse_upload").then(page.why, *why_args, **later)
        why.target.change(page.why, *why_args, trigger_mode="always_last", **later)
        why.heads.change(page.switch_heads, [shown, model, why.heads], why.ablation,
                         trigger_mode="always_last", **quiet)
        why.measure.click(page.measure, [shown, model], why.faithfulness,
                          api_visibility="private")
        panel.shared.change(page.rescale, [shown, model, panel.shared], panel.grid, **quiet)
        for s in (panel.layer, panel.head):
            s.change(page.explore, [shown, model, panel.layer, panel.head, patch],
                     [panel.pick, panel.row], trigger_mode="always_last", **quiet)
        panel.grid.select(page.pick_head, [model], [panel.layer, panel.head], **quiet)
        panel.pick.select(page.pick_patch, [shown, model, panel.layer, panel.head],
                          [patch, panel.pick, panel.row], **quiet)
        model.change(page.choose_model, [model, current],
                     [model, current, card, panel.layer, panel.head, patch, why.target, why.heads],
                     api_visibility="private").then(
            page.reanalyse, [shown, *ins], outs, **quiet).then(
            page.why, *why_args, **later).then(
            page.refresh_testset, [tst.opened, model, tst.kind, tst.true, tst.pred],
            [tst.true, tst.pred, *tst.views], api_visibility="private")
        tst.tab.select(page.open_testset, [model, tst.kind, tst.true, tst.pred],
                       [tst.opened, *tst.views], api_visibility="private")
        # always_last: quick clicks on the filters are never dropped; the last one wins.
        for f in (tst.kind, tst.true, tst.pred):
            f.input(page.testset_view, [model, tst.kind, tst.true, tst.pred], tst.views,
                    trigger_mode="always_last", api_visibility="private")
        tst.confusion.select(page.pick_cell, [model], [tst.kind, tst.true, tst.pred, *tst.views],
                             api_visibility="private")
        tst.gallery.select(page.show_test_image, [tst.shown, *ins], outs, **quiet).then(
            None, js=SCROLL_TO_RESULT).then(page.why, *why_args, **later)
        demo.load(page.first_view, ins, outs, **quiet).then(page.why, *why_args, **later)
    demo.queue(max_size=env_int("VIT_QUEUE_SIZE", 16, 1, 10_000),
               default_concurrency_limit=CONCURRENCY)
    demo.page = page                    # for tests and notebooks: the handlers over these models
    return demo


def launch(demo: gr.Blocks, **kwargs):
    """Serve the page with its script, style and upload limit (GRADIO_SERVER_NAME/PORT honoured)."""
    return demo.launch(js=draw_tab.JS, css=CSS, show_error=True, max_file_size="50mb", **kwargs)
