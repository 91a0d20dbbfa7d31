"""ViT Explorer: draw or upload a digit, see what a Vision Transformer predicts and where it looks.

This file only builds the page and wires events; the work lives in the `vit` package.
Run: `python app.py` (honours GRADIO_SERVER_NAME / GRADIO_SERVER_PORT; VIT_DEVICE picks the device).
"""
from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path

import gradio as gr
import numpy as np
import torch

from vit import explain as ex
from vit import testset as ts
from vit.checkpoint import CheckpointError, read_config
from vit.data import DataError, load_split
from vit.examples import write_examples
from vit.inference import Predictor, find_checkpoints
from vit.preprocess import PreprocessError, compact

ROOT = Path(__file__).resolve().parent


def _never_rewrite_cached_images() -> None:
    """Work around a Gradio 6.31 race that cut off downloads under load (bench/load.py: 4 of 500).

    Gradio saves every output picture to a file named by the hash of its bytes, and rewrites that
    file in place each time the same picture is produced again (`save_pil_to_cache`). Two users who
    get one identical picture (the same example, the colour bar of a blank map...) then race: the
    rewrite truncates the file while the first user's browser is downloading it, and the server
    fails with "Too little data for declared Content-Length". A hash-named file never needs
    rewriting, so: write it once, under a temporary name, and rename it into place.
    """
    from gradio import processing_utils as pu

    def save_pil_to_cache(img, cache_dir, name="image", format="webp"):
        data = pu.encode_pil_to_bytes(img, format)
        folder = Path(cache_dir) / pu.hash_bytes(data)
        path = (folder / f"{name}.{format}").resolve()
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        return str(path)

    pu.save_pil_to_cache = save_pil_to_cache


_never_rewrite_cached_images()


def user_error(message: str) -> gr.Error:
    """An error for the person (or client) on the other end: shown to them, not logged as a crash."""
    return gr.Error(message, print_exception=False)

# VIT_CHECKPOINTS: another folder of checkpoint folders (default: the bundled ones).
CHECKPOINTS = find_checkpoints(os.environ.get("VIT_CHECKPOINTS", ROOT / "checkpoints"))
DEFAULT_MODEL = next(iter(CHECKPOINTS), None)
EXAMPLES = write_examples(Path(tempfile.gettempdir()) / "vit-explorer-examples")
PICK_SIZE = 336                      # pixels of the clickable patch picture
_predictors: dict[str, Predictor] = {}
# The test-set explorer reads test splits from VIT_DATA_DIR (default: data/, where the trainer
# downloads them). On a Hugging Face Space without the data the tab is not shown at all.
DATA_DIR = ts.data_dir_for_app()
GALLERY_SIZE = 60
_results: dict[str, ts.Answers] = {}
# One thread per request on the CPU: with two cores, two concurrent requests on one thread each
# beat one request whose two threads fight the other request's (measured: bench/app_latency.py).
torch.set_num_threads(int(os.environ.get("VIT_THREADS", "1")))


def get_predictor(name: str | None) -> Predictor:
    """Load a checkpoint once per process; raise gr.Error with the loader's one-line message."""
    if not name or name not in CHECKPOINTS:
        raise user_error(f"No model named {name!r}. Available: {', '.join(CHECKPOINTS) or 'none'}.")
    if name not in _predictors:
        try:
            _predictors[name] = Predictor(CHECKPOINTS[name])
        except CheckpointError as e:
            raise user_error(f"Can't load the model {name!r}: {e}") from None
    return _predictors[name]


def _empty(message: str):
    """The page's resting state: no prediction, no pictures, a hint."""
    return (message, None, None, None, None, None, None, None, None)


def _views(p: Predictor, a, shared: bool, layer: int, head: int, patch: int):
    """All pictures for one analysis."""
    attn, grid = a.explanation.attn, p.grid
    roll = ex.rollout(attn)[0, 1:].reshape(grid, grid)
    return (
        ex.patch_grid_picture(a.img28, grid),
        ex.token_strip(a.img28, grid),
        ex.attention_grid_picture(a.img28, a.explanation.cls_maps, shared_scale=shared),
        ex.single_map_picture(a.img28, roll, "rollout: share of the final [CLS]"),
        *_explorer(p, a, layer, head, patch),
    )


def _explorer(p: Predictor, a, layer: int, head: int, patch: int):
    cfg = p.model.cfg   # sliders may come from another model: keep them in range
    layer, head = min(int(layer), cfg.depth) - 1, min(int(head), cfg.heads) - 1
    row = ex.patch_attention_row(a.explanation.attn, layer, head, patch, p.grid)
    return (ex.patch_grid_picture(a.img28, p.grid, PICK_SIZE, marked=patch),
            ex.single_map_picture(a.img28, row, f"patch {patch + 1} looks at, layer {layer + 1}, "
                                                f"head {head + 1}", marked=patch))


def _headline(p: Predictor, probs: np.ndarray) -> str:
    order = np.argsort(probs)[::-1]
    best, second = order[0], order[1]
    text = f"### The model reads this as **{p.class_names[best]}** ({100 * probs[best]:.1f} %)"
    if probs[best] < 0.6:
        text += f"\nNot sure: it could also be **{p.class_names[second]}** ({100 * probs[second]:.1f} %)."
    return text


def analyse(image, model_name, shared, layer, head, patch, from_canvas: bool):
    p = get_predictor(model_name)
    try:
        a = p.analyse(image)
    except PreprocessError as e:
        if from_canvas:   # an empty or erased canvas is a resting state, not an error
            return _empty(f"### ✏️ Draw a {_noun(p)} in the box")
        gr.Warning(str(e))
        return _empty(f"### ⚠️ {e}")
    return (_headline(p, a.probs), p.label(a.probs), *_views(p, a, shared, layer, head, patch),
            _session_state(image, from_canvas, a))


def _session_state(image, from_canvas: bool, a) -> dict:
    """What a visitor's session keeps: enough to redraw any view (the 28x28 input: the model
    re-runs in ~5 ms) and to re-read the input after a model switch. Gradio holds it for up to an
    hour after the visitor leaves, so it is kept small: a file path as it is, a drawing as its
    uint8 ink (250 KB) instead of the canvas's arrays and the attention weights (2.3 MB)."""
    source = image if isinstance(image, (str, os.PathLike)) else compact(image)
    return {"source": source, "from_canvas": from_canvas, "img28": a.img28}


def _analysis(state: dict, model_name: str):
    return get_predictor(model_name).analyse_28(state["img28"])


def _noun(p: Predictor) -> str:
    return "digit" if p.style == "digits" else "piece of clothing"


def analyse_drawing(image, model_name, shared, layer, head, patch):
    return analyse(image, model_name, shared, layer, head, patch, from_canvas=True)


@lru_cache(maxsize=8)
def first_view(model_name, shared, layer, head, patch):
    """At page load, show a worked example rather than empty boxes. Every visitor gets the same
    one, so it is computed once per model (and slider setting)."""
    out = analyse(EXAMPLES[7], model_name, shared, layer, head, patch, from_canvas=False)
    state = out[-1]
    if state is not None:
        p = get_predictor(model_name)
        best = p.class_names[int(_analysis(state, model_name).probs.argmax())]
        out = (f"### Example: a drawn 7 — read as **{best}**\n"
               "Draw your own in the box (the brush is ready), or upload a picture.", *out[1:])
    return out


def analyse_upload(image, model_name, shared, layer, head, patch):
    if image is None:
        return _empty("### Upload a picture, or pick an example below")
    return analyse(image, model_name, shared, layer, head, patch, from_canvas=False)


def rescale(state, model_name, shared):
    if state is None:
        return None
    a = _analysis(state, model_name)
    return ex.attention_grid_picture(a.img28, a.explanation.cls_maps, shared_scale=shared)


def explore(state, model_name, layer, head, patch):
    if state is None:
        return None, None
    return _explorer(get_predictor(model_name), _analysis(state, model_name), layer, head, patch)


def pick_patch(state, model_name, layer, head, evt: gr.SelectData):
    p = get_predictor(model_name)
    patch = ex.patch_at(evt.index[0], evt.index[1], PICK_SIZE, p.grid)
    if state is None:
        return patch, None, None
    return patch, *_explorer(p, _analysis(state, model_name), layer, head, patch)


def reanalyse(state, model_name, shared, layer, head, patch):
    """After a model switch: the same input, through the new model."""
    if state is None:
        return _empty(f"### ✏️ Draw a {_noun(get_predictor(model_name))} in the box")
    return analyse(state["source"], model_name, shared, layer, head, patch, state["from_canvas"])


def classify(path):
    """API: one image file -> {class: probability} from the default model."""
    if path is None:
        raise user_error("Send an image file.")
    p = get_predictor(DEFAULT_MODEL)
    try:
        return p.label(p.analyse(path).probs)
    except PreprocessError as e:
        raise user_error(str(e)) from None


# --- test-set explorer ----------------------------------------------------------------------
def _dataset_title(name: str) -> str:
    dataset = get_predictor(name).config.get("dataset", "mnist")
    return {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST"}.get(dataset, dataset)


def _test_results(name: str, progress=None) -> ts.Answers:
    """Once per model and process; from the on-disk cache after the first time ever."""
    if name not in _results:
        p = get_predictor(name)
        _results[name] = ts.load_results(p.folder, p.model, DATA_DIR, progress)
    return _results[name]


def _class_choices(p: Predictor):
    return [("any", -1)] + [(n, i) for i, n in enumerate(p.class_names)]


def testset_view(name, kind, true, pred, progress=gr.Progress()):
    """Status line, clickable confusion matrix, gallery and the indices it shows."""
    p = get_predictor(name)
    try:
        r = _test_results(name, lambda done, total: progress(done / total,
                                                             desc="Testing the model on the test set"))
    except DataError:
        title = _dataset_title(name)
        return (f"The {title} test set is not on this machine, so there is nothing to browse "
                f"yet. Fetch it with `python -m vit.data --dataset {p.config.get('dataset', 'mnist')}` "
                f"(it lands in `data/`), or start the app with `VIT_DATA_DIR` naming a folder that "
                f"holds it; then reload this page.", None, [], [])
    true = None if true in (None, -1) else int(true)
    pred = None if pred in (None, -1) else int(pred)
    idx = r.select(kind or "mistakes", true, pred)
    conf = r.confusion()
    wrong = int(conf.sum() - np.trace(conf))
    names = p.class_names
    what = {"mistakes": "mistakes, most confidently wrong first",
            "least confident": "answers, least confident first", "all": "images"}[kind or "mistakes"]
    filters = "".join([f", true class **{names[true]}**" if true is not None else "",
                       f", predicted **{names[pred]}**" if pred is not None else ""])
    status = (f"**{_dataset_title(name)} test set**: {len(r.labels):,} images, {100 * r.accuracy:.2f} % "
              f"right, {wrong} wrong. Showing {min(len(idx), GALLERY_SIZE)} of {len(idx):,} "
              f"{what}{filters}. Click an image to see it in the views below.")
    selected = (true, pred) if true is not None and pred is not None else None
    shown = [int(i) for i in idx[:GALLERY_SIZE]]
    gallery = [(ex.digit_picture(r.images[i] / 255.0, 84), r.caption(i)) for i in shown]
    return status, ts.confusion_picture(conf, names, selected), gallery, shown


def open_testset(name, kind, true, pred, progress=gr.Progress()):
    return (True, *testset_view(name, kind, true, pred, progress))


def pick_cell(name, evt: gr.SelectData, progress=gr.Progress()):
    """A click on the confusion matrix filters the gallery to that cell."""
    p = get_predictor(name)
    cell = ts.cell_at(evt.index[0], evt.index[1], len(p.class_names))
    if cell is None:
        return (gr.update(), gr.update(), gr.update(), *[gr.update()] * 4)
    true, pred = cell
    kind = "mistakes" if true != pred else "least confident"
    return (kind, true, pred, *testset_view(name, kind, true, pred, progress))


def show_test_image(shown, name, shared, layer, head, patch, evt: gr.SelectData):
    """A gallery click: that test image, as the model saw it, in every view."""
    p = get_predictor(name)
    r = _test_results(name)
    i = shown[evt.index]
    img28 = r.images[i] / 255.0                      # already MNIST-shaped: no preprocessing
    a = p.analyse_28(img28)
    best = int(a.probs.argmax())
    verdict = "✓ right" if best == r.labels[i] else "✗ wrong"
    status = (f"### Test image #{i} (true class **{p.class_names[r.labels[i]]}**): read as "
              f"**{p.class_names[best]}** ({100 * a.probs[best]:.1f} %) — {verdict}")
    return (status, p.label(a.probs), *_views(p, a, shared, layer, head, patch),
            _session_state(img28, False, a))


def refresh_testset(opened, name, kind, true, pred, progress=gr.Progress()):
    """After a model switch: new class names in the filters, and its answers if the tab is open."""
    p = get_predictor(name)
    choices = gr.update(choices=_class_choices(p), value=-1)
    if not opened:
        return choices, choices, *[gr.update()] * 4
    return choices, choices, *testset_view(name, kind, -1, -1, progress)


def _testset_on_disk() -> bool:
    """Whether any model's test split is under DATA_DIR (reads configs only, not weights)."""
    for folder in CHECKPOINTS.values():
        try:
            load_split(read_config(folder).get("dataset", "mnist"), DATA_DIR, train=False)
            return True
        except (CheckpointError, DataError):
            continue
    return False


def choose_model(name, previous):
    """Switch models; on a broken checkpoint say why and stay on the previous one."""
    try:
        p = get_predictor(name)
    except gr.Error as e:
        gr.Warning(e.message)
        return gr.update(value=previous), previous, gr.update()
    return gr.update(), name, p.card()


# Keep the brush selected: Gradio's Sketchpad starts with no tool chosen (and drops the tool again
# after "Clear canvas"), showing "select the draw tool to start" while a visitor's drag draws nothing.
JS = """
() => {
  let queued = false;
  const pick = () => {
    queued = false;
    const pad = document.querySelector('#drawpad');
    if (!pad || !pad.innerText.includes('select the draw tool')) return;
    const brush = pad.querySelector('button[aria-label="Brush"]');
    if (brush) brush.click();
  };
  new MutationObserver(() => {
    if (!queued) { queued = true; requestAnimationFrame(pick); }
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
  pick();
}
"""
CSS = """
#drawpad canvas { touch-action: none; }
.hint { color: #555; font-size: 0.95em; }
"""


def build() -> gr.Blocks:
    with gr.Blocks(title="ViT Explorer") as demo:
        gr.Markdown("# ViT Explorer\nDraw a digit (or upload a picture). A small Vision Transformer, "
                    "trained from scratch, cuts it into patches, reads them as a sequence of tokens and "
                    "predicts the class. Below: what it sees, and where every attention head looks.")
        state = gr.State(None)
        patch = gr.State(24)                       # the clicked patch (0-based); 24 = centre of 7x7
        current_model = gr.State(DEFAULT_MODEL)
        model = gr.Dropdown(list(CHECKPOINTS), value=DEFAULT_MODEL, label="Model",
                            info="checkpoints found in checkpoints/", visible=len(CHECKPOINTS) > 1)
        with gr.Row(equal_height=False):
            with gr.Column(scale=5, min_width=380):
                with gr.Tabs():
                    with gr.Tab("Draw", id="draw"):
                        pad = gr.Sketchpad(
                            type="numpy", image_mode="RGBA", canvas_size=(500, 500),
                            brush=gr.Brush(default_size=16, colors=["#000000"], color_mode="fixed"),
                            eraser=gr.Eraser(default_size=24), layers=False, transforms=(),
                            label="Draw here (mouse, pen or finger)", elem_id="drawpad",
                            height=560)
                    with gr.Tab("Upload", id="upload"):
                        upload = gr.Image(type="filepath", image_mode=None,
                                          sources=["upload", "clipboard"], label="Upload or paste a picture",
                                          elem_id="upload", height=420)
                        gr.Examples(EXAMPLES, inputs=upload, label="Examples (drawn by this project's code)",
                                    examples_per_page=10, cache_examples=False)
                    # On a Space the tab appears only when the data was put there too.
                    with gr.Tab("Test set", id="testset", elem_id="testset-tab",
                                visible="SPACE_ID" not in os.environ or _testset_on_disk()) as ts_tab:
                        ts_status = gr.Markdown("Loading the test set…", elem_id="testset-status")
                        with gr.Row():
                            kind = gr.Radio(list(ts.KINDS), value="mistakes", label="Show",
                                            elem_id="testset-kind")
                        with gr.Row():
                            choices = _class_choices(get_predictor(DEFAULT_MODEL)) if DEFAULT_MODEL else []
                            true_dd = gr.Dropdown(choices, value=-1, label="True class",
                                                  elem_id="testset-true")
                            pred_dd = gr.Dropdown(choices, value=-1, label="Predicted class",
                                                  elem_id="testset-pred")
                        conf_img = gr.Image(label="Confusion matrix — click a cell to filter",
                                            interactive=False, buttons=[], elem_id="confusion",
                                            height=500)
                        gallery = gr.Gallery(label="Click an image to explain it (caption: true→predicted, "
                                                   "confidence)", columns=6,
                                             height=520, allow_preview=False, elem_id="testset-gallery")
                        shown = gr.State([])
                        ts_open = gr.State(False)
            with gr.Column(scale=4, min_width=320):
                status = gr.Markdown("### ✏️ Draw a digit in the box", elem_id="status")
                label = gr.Label(num_top_classes=10, label="Prediction (probability per class)",
                                 elem_id="prediction")
        gr.Markdown("## What the model sees\nYour input, cropped, scaled and centred like the training "
                    "data, at 28×28 pixels, cut into a grid of patches. Each patch becomes one token "
                    "(\"About this model\" at the bottom says whether a 3×3 convolution first lets it "
                    "see a pixel past its patch); a learned [CLS] token is put in front and the answer "
                    "is read from it.")
        with gr.Row():
            seen = gr.Image(label="Input with its patch grid (patch numbers = token order)",
                            interactive=False, height=340, buttons=["download"], elem_id="seen")
            strip = gr.Image(label="The token sequence: [CLS], then patches 1…N",
                             interactive=False, height=340, buttons=["download"], elem_id="strip")
        gr.Markdown("## Where each head looks\nFor every layer (rows) and head (columns): how much the "
                    "[CLS] token attends to each patch. Bright = more attention. Rollout combines all "
                    "layers (Abnar & Zuidema 2020) into one map of what the final answer draws on.")
        shared = gr.Checkbox(True, label="One colour scale for all maps (untick: scale each map "
                                         "to its own maximum)")
        with gr.Row():
            grid_img = gr.Image(label="[CLS] attention, layers × heads", interactive=False, scale=3,
                                buttons=["download", "fullscreen"], elem_id="attention")
            roll_img = gr.Image(label="Attention rollout", interactive=False, scale=2,
                                buttons=["download"], elem_id="rollout")
        gr.Markdown("## Explore one patch\nClick a patch on the left to see where *that patch* looks in "
                    "the chosen layer and head (its own row of the attention matrix).")
        with gr.Row():
            depth, heads = _shape()
            layer = gr.Slider(1, depth, value=depth, step=1, label="Layer")
            head = gr.Slider(1, heads, value=1, step=1, label="Head")
        with gr.Row():
            pick_img = gr.Image(label="Click a patch", interactive=False, height=380)
            row_img = gr.Image(label="That patch's attention", interactive=False, height=380)
        with gr.Accordion("About this model", open=False):
            card = gr.Markdown(_card(DEFAULT_MODEL))

        outs = [status, label, seen, strip, grid_img, roll_img, pick_img, row_img, state]
        ins = [model, shared, layer, head, patch]
        pad.change(analyse_drawing, [pad, *ins], outs, trigger_mode="always_last",
                   show_progress="hidden", api_name="analyse_drawing")
        upload.change(analyse_upload, [upload, *ins], outs, show_progress="hidden",
                      api_name="analyse_upload")
        shared.change(rescale, [state, model, shared], grid_img, show_progress="hidden",
                      api_visibility="private")
        for s in (layer, head):
            s.change(explore, [state, model, layer, head, patch], [pick_img, row_img],
                     show_progress="hidden", trigger_mode="always_last", api_visibility="private")
        pick_img.select(pick_patch, [state, model, layer, head], [patch, pick_img, row_img],
                        show_progress="hidden", api_visibility="private")
        model.change(choose_model, [model, current_model], [model, current_model, card],
                     api_visibility="private").then(
            reanalyse, [state, *ins], outs, show_progress="hidden", api_visibility="private").then(
            refresh_testset, [ts_open, model, kind, true_dd, pred_dd],
            [true_dd, pred_dd, ts_status, conf_img, gallery, shown], api_visibility="private")
        ts_views = [ts_status, conf_img, gallery, shown]
        ts_tab.select(open_testset, [model, kind, true_dd, pred_dd], [ts_open, *ts_views],
                      api_visibility="private")
        for f in (kind, true_dd, pred_dd):
            f.input(testset_view, [model, kind, true_dd, pred_dd], ts_views, api_visibility="private")
        conf_img.select(pick_cell, [model], [kind, true_dd, pred_dd, *ts_views],
                        api_visibility="private")
        gallery.select(show_test_image, [shown, *ins], outs, show_progress="hidden",
                       api_visibility="private")
        demo.load(first_view, ins, outs, show_progress="hidden", api_visibility="private")
        api_file = gr.File(visible=False, type="filepath")
        api_label = gr.Label(visible=False)
        api_file.upload(classify, api_file, api_label, api_name="classify")
    return demo


def _shape():
    try:
        cfg = get_predictor(DEFAULT_MODEL).model.cfg
        return cfg.depth, cfg.heads
    except gr.Error:
        return 1, 1


def _card(name) -> str:
    try:
        return get_predictor(name).card()
    except gr.Error as e:
        return f"⚠️ {e.message}"


demo = build()
demo.queue(max_size=64, default_concurrency_limit=2)

if __name__ == "__main__":
    demo.launch(js=JS, css=CSS, show_error=True)
