"""The Test set tab: the selected model's answers on its data set's test split — a gallery of
mistakes / least confident / all, class filters, and a clickable confusion matrix; and
`TestSetHandlers`, the page's handlers of it (mixed into `Page`, vit/ui/page.py)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr
import numpy as np

from vit.data.fetch import FETCHES, FetchError, fetchable
from vit.data.loading import DataError, load_split
from vit.pictures.attention_maps import digit_picture
from vit.pictures.confusion import cell_at, confusion_picture
from vit.testset import KINDS, Results, load_results
from vit.text import md, percent
from vit.ui.boundary import ClassIndex, Click, Head, Layer, SharedScale, TestKind, user_error
from vit.ui.models import Models
from vit.ui.record import Shown, Visit
from vit.ui.words import alt, caption

GALLERY_SIZE = 60


@dataclass
class Tab:
    tab: gr.Tab
    status: gr.Markdown
    kind: gr.Radio
    true: gr.Dropdown
    pred: gr.Dropdown
    confusion: gr.Image
    reliability: gr.Image
    gallery: gr.Gallery
    body: gr.Column                  # all but the status: hidden while there is no test set


def class_choices(names) -> list:
    return [("any", -1)] + [(n, i) for i, n in enumerate(names)]


def _reporting(progress):
    """A fetch's progress as the tab's progress bar shows it (gr.Progress), or nothing."""
    if progress is None:
        return None
    return lambda fraction, text: progress(fraction, desc=text)


def data_available(models: Models, data_dir: Path) -> bool:
    """Whether any model's test split is under data_dir or can be fetched there (reads configs
    only, not weights)."""
    if any(fetchable(c.spec.name) for c in models.configs.values() if c.spec is not None):
        return True
    for config in models.configs.values():
        try:
            load_split(config.dataset or "mnist", data_dir, train=False)
            return True
        except DataError:
            continue
    return False


def build(models: Models, data_dir: Path, visible: bool) -> Tab:
    with gr.Tab("Test set", id="testset", elem_id="testset-tab", visible=visible) as tab:
        status = gr.Markdown("Loading the test set…", elem_id="testset-status")
        # Without a test set on disk the status says how to get one, and no empty boxes show.
        with gr.Column(elem_id="testset-body") as body:
            kind = gr.Radio(list(KINDS), value="mistakes", label="Show", elem_id="testset-kind")
            with gr.Row():
                choices = class_choices(models.configs[models.default].class_names)
                true = gr.Dropdown(choices, value=-1, label="True class", elem_id="testset-true")
                pred = gr.Dropdown(choices, value=-1, label="Predicted class",
                                   elem_id="testset-pred")
            # The images first: they are what a visitor came for; the matrix filters them.
            gallery = gr.Gallery(label="Click an image to explain it (caption: true→predicted, "
                                       "confidence)", columns=6, height=520, allow_preview=False,
                                 elem_id="testset-gallery")
            confusion = gr.Image(label="Confusion matrix — click a cell to filter",
                                 interactive=False, buttons=[],
                                     alt_text=alt("confusion"), elem_id="confusion", height=500)
            reliability = gr.Image(label="Is the confidence right? Accuracy per confidence bin "
                                         "(on the diagonal = calibrated)", interactive=False,
                                   buttons=["download"],
                                       alt_text=alt("reliability"), elem_id="reliability", height=420)
    return Tab(tab, status, kind, true, pred, confusion, reliability, gallery, body)


class Answers:
    """The models' answers on their test sets, once per model and process (and from the on-disk
    cache after the first time ever)."""

    def __init__(self, models: Models, data_dir: Path):
        self.models, self.data_dir = models, data_dir
        self._results: dict[str, Results] = {}
        self._reliability: dict[str, np.ndarray] = {}
        # One lock a model: a visitor and the start-up work score a model once, and a visitor
        # of one model never waits on another's scoring.
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def get(self, name: str, progress=None) -> Results:
        if name not in self._results:
            with self._locks_lock:
                lock = self._locks.setdefault(name, threading.Lock())
            with lock:
                if name not in self._results:
                    p = self.models.get(name)
                    try:
                        self._results[name] = load_results(p.checkpoint, self.data_dir, progress)
                    except DataError:
                        # Missing here: fetched (once, whoever asks first: the start-up work
                        # or a visitor), then read. Offline: FetchError, said in one line.
                        spec = p.config.spec
                        if spec is None or not fetchable(spec.name):
                            raise
                        FETCHES.run(spec, self.data_dir, _reporting(progress))
                        self._results[name] = load_results(p.checkpoint, self.data_dir, progress)
        return self._results[name]

    def ready(self, name: str) -> bool:
        """Whether model `name`'s test answers are in (its test set was found and scored)."""
        return isinstance(name, str) and name in self._results

    def reliability(self, name: str, r: Results) -> np.ndarray:
        """The reliability diagram of a model's calibrated test answers (drawn once per model)."""
        if name not in self._reliability:
            from vit.pictures.reliability import reliability_picture
            self._reliability[name] = reliability_picture(
                r.probs, r.labels, title=f"{self.models.get(name).config.title} test set")
        return self._reliability[name]

    def view(self, name, kind, true, pred, progress=None):
        """Status line, clickable confusion matrix, reliability diagram, gallery, the indices
        the gallery shows and the tab body's visibility (`Tab.views`)."""
        config = self.models.get(name).config
        try:
            r = self.get(name, progress)
        except FetchError as e:
            return (f"⚠️ {md(str(e), 300)}: it is not on this server, so there are no test images "
                    f"to browse for this model: draw or upload your own on the other tabs.",
                    None, None, [], [], gr.update(visible=False))
        except DataError:
            return (caption(
                f"The {md(config.title)} test set is not on this server, so there are no test "
                f"images to browse for this model: draw or upload your own on the other tabs.",
                f"Running the app yourself? Fetch it with `python -m vit.data --dataset "
                f"{config.dataset if config.spec else 'NAME'}` (it lands in `data/`), or start "
                f"the app with `VIT_DATA_DIR` naming a folder that holds it; then reload the page."),
                    None, None, [], [], gr.update(visible=False))
        kind = kind if kind in KINDS else "mistakes"
        names = r.class_names
        true = int(true) if isinstance(true, (int, float)) and 0 <= true < len(names) else None
        pred = int(pred) if isinstance(pred, (int, float)) and 0 <= pred < len(names) else None
        idx = r.select(kind, true, pred)
        conf = r.confusion()
        wrong = int(conf.sum() - np.trace(conf))
        what = {"mistakes": "mistakes, most confidently wrong first",
                "least confident": "answers, least confident first", "all": "images"}[kind]
        filters = "".join([f", true class **{md(names[true])}**" if true is not None else "",
                           f", predicted **{md(names[pred])}**" if pred is not None else ""])
        status = (f"**{md(config.title)} test set**: {len(r.labels):,} images, {percent(r.accuracy)} "
                  f"right, {wrong} wrong. ")
        if len(idx):
            status += (f"Showing {min(len(idx), GALLERY_SIZE)} of {len(idx):,} {what}{filters}. "
                       f"Click an image: it is answered and explained as a drawing is.")
        else:
            status += (f"**Nothing to show**: there are no {what.split(',')[0]}{filters}. Choose "
                       f"\"all\", or set a class filter back to \"any\".")
        selected = (true, pred) if true is not None and pred is not None else None
        shown = [int(i) for i in idx[:GALLERY_SIZE]]
        gallery = [(digit_picture(r.images[i] / 255.0, 84), r.caption(i)) for i in shown]
        return (status, confusion_picture(conf, names, selected), self.reliability(name, r),
                gallery, shown, gr.update(visible=True))


def reporter(progress):
    """A Gradio progress bar as `Answers.get` reports to it: (done, total)."""
    return lambda done, total: progress(done / total, desc="Testing the model on the test set")


class TestSetHandlers:
    """The Test set tab chosen, its filters, a confusion-matrix cell and a gallery picture
    clicked, and its answers after a model switch. Uses `Page`'s `predictor`, `answers`,
    `_reread`, `_commit`, `_show_tab` and `view`."""
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

    def testset_view(self, visit: Visit, kind: TestKind, true: ClassIndex, pred: ClassIndex,
                     progress=gr.Progress()):
        base = visit.record
        self.predictor(base.model)             # an unknown model: one line, not a traceback
        status, confusion, reliability, gallery, listed, body = self.answers.view(
            base.model, kind, true, pred, reporter(progress))
        visit.commit(base, replace(base, test_listed=tuple(listed),
                                   test_ready=self.answers.ready(base.model)))
        return {"testset_status": status, "confusion": confusion, "reliability": reliability,
                "gallery": gallery, "testset_body": body}

    def open_testset(self, visit: Visit, kind: TestKind, true: ClassIndex, pred: ClassIndex,
                     progress=gr.Progress()):
        base = visit.record
        visit.commit(base, replace(base, testset_open=True, tab="test"))
        return self.testset_view(visit, kind, true, pred, progress)

    def pick_cell(self, visit: Visit, evt: Click, progress=gr.Progress()):
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

    def show_test_image(self, visit: Visit, shared: SharedScale, layer: Layer, head: Head,
                        evt: Click):
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

    def refresh_testset(self, visit: Visit, kind: TestKind, progress=gr.Progress()):
        """After a model switch: its class names in the filters, and its answers if the tab is open."""
        p = self.predictor(visit.record.model)
        choices = gr.update(choices=class_choices(p.class_names), value=-1)
        if not visit.record.testset_open:
            return {"true": choices, "pred": choices}
        out = self.testset_view(visit, kind, -1, -1, progress)
        # The headline too: on the Test set tab it says whether this model's test set is here.
        # No thumbnail highlighted: the one clicked before was another model's test image.
        return {**out, **self.view(visit.record, ("status",), visit=visit), "true": choices, "pred": choices,
                "gallery": gr.update(value=out["gallery"], selected_index=None)}
