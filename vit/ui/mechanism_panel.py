"""The "How attention works (step by step)" panel: one token's trip through one attention head
(pixels -> embedding + position -> q.k scores -> softmax -> weighted sum), and the ViT paper's
Figure 7 views of the loaded model. `build()` makes the components; `render()` and
`model_images()` are pure functions (the second cached per model) for the handlers and tests.

Wiring (vit/ui/app.py):

- `mech = mechanism_panel.build(p)` where the panel should appear (it opens a closed Accordion).
- Per input and per query: the page's record (vit/ui/record.py) keeps the page's one layer, head
  and patch (the explorer's sliders, the strip's and the explorer's patch: 0-based, None = the
  centre), the panel's [CLS] switch and whether it is open; vit/ui/render.py calls
  render(p, a, layer, head, patch, cls) for the walk-through picture and its text while it is
  open (~40 ms: one partial forward pass and a numpy/PIL picture).
- Per model: when the panel opens and on a model switch while it is open:
      [position similarity, attention distance, filters, caption] = model_images(p, data_dir)
  `data_dir`: where the test sets are (the test-set tab's); without one, or with no test set
  there, the model-level views use the project's own drawn digits and say so. The first call per
  model costs ~1-3 s on a 2-core CPU; later calls return the cached pictures, and a served app
  computes them for every model at start (`warm`), so the panel opens filled.
"""
from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import astuple, dataclass

import gradio as gr
import numpy as np
import torch

from vit.device import gpu_task
from vit.explain.mechanism import (
    CLS,
    Filters,
    WalkThrough,
    embedding_filters,
    mean_attention_distance,
    position_similarity,
    stem_rim,
    walk_through,
)
from vit.inference import Analysis, Predictor
from vit.pictures.attention_maps import share
from vit.pictures.mechanism_views import (
    attention_distance_picture,
    filters_picture,
    position_similarity_picture,
    walk_through_picture,
)
from vit.preprocessing.styles import DIGITS
from vit.text import md
from vit.ui import views
from vit.ui.boundary import FollowCls
from vit.ui.words import alt, caption

# The panel's passes of the model, marked for a ZeroGPU Space (vit/device.py).
_walk_through = gpu_task(walk_through)
_mean_attention_distance = gpu_task(mean_attention_distance)
TEST_IMAGES = 64          # test images averaged over for mean attention distance (paper: 128)
COMPONENTS = 16           # principal components of the embedding filters shown


@dataclass
class MechanismPanel:
    accordion: gr.Accordion
    cls: gr.Checkbox
    walk: gr.Image
    walk_text: gr.Markdown
    position: gr.Image
    distance: gr.Image
    filters: gr.Image
    model_caption: gr.Markdown


INTRO_PLAIN = ("One token's trip through one attention head, with the model's real numbers: "
               "from its pixels to the mix of other tokens it takes in.")
INTRO = """\
Attention lets every token look at every other token and take in a mix of what it finds. The
picture follows **one token through one head**, with the model's real numbers:

- **Steps 1–2, embedding.** A patch of pixels becomes a list of numbers, a vector, through a
  learned map (in these models a small convolution stem, then a projection). [CLS] has no
  pixels: its vector is learned.
- **Steps 3–5, position.** A learned position vector is added, so the token also says *where*
  it was.
- **Step 6, normalise.** Before each layer the token is rescaled (LayerNorm). In later layers it
  has already taken in what the earlier layers gathered.
- **Step 7, query.** The head turns the token into a query q, "what am I looking for?", and
  every token into a key k, "what do I contain?", and a value v, "what do I pass on?".
- **Step 8, scores.** q · k for every token, divided by √(length of q) so they don't grow with it.
- **Step 9, softmax.** The scores become weights, all positive and summing to 1: big scores win.
- **Step 10, output.** The weighted sum of all the values. The heads' outputs are joined and
  added back to the token; then a small MLP works on each token on its own.

Click a patch in "Explore one patch" to follow it, or tick the box to follow [CLS]: the answer is
read from [CLS] after the last layer.
"""

FIGURE7 = """\
### The model itself (Figure 7 of Dosovitskiy et al. 2020)
These don't depend on your input: they describe what this model learned (each picture's exact
meaning is in the text under them).
"""


def build(p: Predictor) -> MechanismPanel:
    with gr.Accordion("Tokens and one head's arithmetic, step by step", open=False,
                      elem_id="mechanism") as accordion:
        gr.Markdown(caption(INTRO_PLAIN, INTRO))
        gr.Markdown("It follows the layer, head and patch chosen above: in the strip, on the "
                    "head maps, or in \"Explore one patch\".", elem_id="mech-shared")
        cls = gr.Checkbox(False, label="Follow [CLS] instead of the chosen patch",
                          elem_id="mech-cls")
        walk = gr.Image(label="One token through one attention head", interactive=False,
                        buttons=["download", "fullscreen"], alt_text=alt("mech-walk"), elem_id="mech-walk")
        walk_text = gr.Markdown(elem_id="mech-walk-text")
        gr.Markdown(FIGURE7)
        with gr.Row():
            position = gr.Image(label="Position embedding similarity", interactive=False,
                                buttons=["download", "fullscreen"],
                                    alt_text=alt("mech-position"), elem_id="mech-position")
            distance = gr.Image(label="Mean attention distance per head, by layer", interactive=False,
                                buttons=["download"], alt_text=alt("mech-distance"), elem_id="mech-distance")
        filters = gr.Image(label="Embedding filters: what turns a patch's pixels into its token",
                           interactive=False,
                           buttons=["download", "fullscreen"],
                               alt_text=alt("mech-filters"), elem_id="mech-filters")
        model_caption = gr.Markdown(elem_id="mech-model-caption")
    return MechanismPanel(accordion, cls, walk, walk_text, position, distance, filters,
                          model_caption)


# --- per input: the walk-through -------------------------------------------------------------

def _name(token: int) -> str:
    return "[CLS]" if token == 0 else f"patch {token}"


def walk_text(w: WalkThrough) -> str:
    """The walk-through's numbers in words."""
    T, Dh = len(w.weights), len(w.q)
    order = np.argsort(w.weights)[::-1]
    top = ", ".join(f"**{_name(int(j))}** {share(float(w.weights[j]))}" for j in order[:3])
    together = float(w.weights[order[:3]].sum())
    me = _name(w.token)
    own = "" if w.token == 0 else f"; itself {share(float(w.weights[w.token]))}"
    where = (f"\"Explore one patch\" shows for {me}" if w.token else
             "\"Where each head looks\" shows for [CLS]")
    return (f"**{me[0].upper() + me[1:]}, layer {w.layer + 1}, head {w.head + 1}.** The largest "
            f"weights: {top} (together {share(together)} of the output's mix). [CLS] gets "
            f"{share(float(w.weights[0]))}{own}. Spread evenly, each of the {T} tokens would "
            f"get 1/{T} = {share(1 / T)}. The output (step 10) is {Dh} numbers: the values "
            f"v of all {T} tokens, mixed in these proportions. These weights are {me}'s row "
            f"of the attention matrix of layer {w.layer + 1}, head {w.head + 1}: the numbers "
            f"{where}, computed here by hand from the model's weights.")


def walk_of(p: Predictor, a: Analysis, layer, head, patch, cls=False) -> WalkThrough:
    """The numbers of one token's trip through one head (a forward pass to that layer), for an
    analysed input, the 1-based layer and head the page shares (the explorer's sliders), the
    chosen patch (0-based; None: the centre) and whether to follow [CLS] instead. Values out of
    range are clamped; anything else falls back to the last layer, head 1, the centre
    (views.clamp). Computed before the panel is drawn (vit/ui/page.py `view`)."""
    layer, head, patch = views.clamp(p, layer, head, patch)
    return _walk_through(p.model, p.tensor(a.image), CLS if cls else patch, layer, head)


def render(p: Predictor, a: Analysis, w: WalkThrough) -> tuple[np.ndarray, str]:
    """(walk-through picture, its text) for an analysed input and its walk (`walk_of`)."""
    return walk_through_picture(w, a.image, p.model.cfg.patch_size, stem_rim(p.model)), walk_text(w)


# --- per model: Figure 7 ---------------------------------------------------------------------

@dataclass
class ModelPictures:
    position: np.ndarray
    distance: np.ndarray
    filters: np.ndarray
    caption: str                      # Markdown: what each picture is, exactly

    def as_tuple(self) -> tuple:
        return astuple(self)


def drawn_inputs(p: Predictor) -> np.ndarray:
    """(30, S, S) or (30, S, S, 3): the project's own drawn digits (vit/data/examples.py), each in
    three fixed placements, laid out as this model's input. Needs no data set."""
    from vit.data.examples import STROKES, render_digit
    out = []
    for d in STROKES:
        for offset, angle in (((0, 0), 0.0), ((-6, 4), -10.0), ((5, -3), 8.0)):
            out.append(p.prepare(render_digit(d, offset=offset, angle=angle)))
    return np.stack(out)


def testset_inputs(p: Predictor, data_dir, n: int = TEST_IMAGES) -> np.ndarray | None:
    """`n` images spread evenly over the model's test split as its inputs, or None if the split
    is not under `data_dir` (or is not this model's input shape)."""
    from vit.data.loading import DataError, load_split
    try:
        split = load_split(p.config.dataset or "mnist", data_dir, train=False)
    except (DataError, OSError, ValueError):
        return None
    idx = np.linspace(0, len(split) - 1, min(n, len(split))).round().astype(int)
    images = split.images[torch.from_numpy(idx)].numpy().astype(np.float32) / 255.0
    return images if p.fits(images[0]) else None


def figure7_caption(p: Predictor, f: Filters, about: str) -> str:
    cfg = p.model.cfg
    G, P = cfg.grid, cfg.patch_size
    if f.rim:
        filt = (f"**Patch-embedding filters.** This model has a {cfg.stem_layers}-layer convolution "
                f"stem before the patch projection, so there is no single linear filter per "
                f"token as in the paper. Top: the stem's first-layer filters, the only weights "
                f"that touch pixels. Bottom: the top {len(f.energy)} principal components of the "
                f"whole pixels → token map, linearised (its Jacobian) at {f.linearised_at} patches "
                f"of the same inputs; each covers the {P}×{P} patch (boxed) and the "
                f"{f.rim}-px rim the stem lets it see. The % under each is its share of the "
                f"linearised filters' energy.")
    else:
        filt = (f"**Patch-embedding filters.** The top {len(f.energy)} principal components of the "
                f"patch projection's {cfg.dim} linear filters ({P}×{P} pixels), as in the paper's "
                f"Figure 7 left; % = share of the filters' energy.")
    return (f"**Position embedding similarity.** Map (row r, column c) of the {G}×{G} grid: the "
            f"cosine similarity of that patch's learned position embedding with every patch's, "
            f"from −1 (blue) to 1 (red). [CLS]'s position is left out.\n\n"
            f"**Mean attention distance.** For each head, how far (in pixels between patch "
            f"centres) a patch looks on average, weighted by its attention, averaged over all "
            f"query patches and over {md(about)}. [CLS] is left out as query and as key, and each "
            f"patch's weights over the other patches are renormalised to sum to 1. Dashed: the "
            f"distance if attention were spread evenly over all patches; 0: looking only at "
            f"itself. Small = local heads, large = global ones (the paper sees both in early "
            f"layers, and global ones later).\n\n{filt}")


_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()    # model -> {data_dir: pictures}
_lock = threading.Lock()


def model_images(p: Predictor, data_dir=None) -> ModelPictures:
    """The three Figure 7 pictures and their caption for this model, computed once per model
    (and data folder). Mean attention distance and the linearised filters need inputs:
    `TEST_IMAGES` test images when the model's test split is under `data_dir`, else the drawn
    digits of `drawn_inputs`."""
    key = None if data_dir is None else str(data_dir)
    with _lock:                        # two first visitors compute it once, not twice at once
        per_model = _cache.setdefault(p.model, {})
        if key not in per_model:
            per_model[key] = _model_images(p, data_dir)
        return per_model[key]


def _model_images(p: Predictor, data_dir) -> ModelPictures:
    cfg = p.model.cfg
    images = None if data_dir is None else testset_inputs(p, data_dir)
    if images is not None:
        about = f"{len(images)} images of the {p.config.title} test set"
    else:
        images = drawn_inputs(p)
        why = [] if data_dir is None else ["its test set is not on this machine"]
        if p.config.style is not DIGITS:
            why.append(f"not {p.config.title} images")
        about = f"{len(images)} drawn digits (the app's own examples" + "".join(
            f"; {w}" for w in why) + ")"
    x = torch.cat([p.tensor(im) for im in images])                             # (B, C, S, S)
    dist = _mean_attention_distance(p.model, x)
    f = embedding_filters(p.model, COMPONENTS, x)
    return ModelPictures(
        position_similarity_picture(position_similarity(p.model)),
        attention_distance_picture(dist, cfg.grid, cfg.patch_size, f"averaged over {about}"),
        filters_picture(f, cfg.patch_size),
        figure7_caption(p, f, about))


OPEN = "mechanism_open"      # drawn only while open (vit/ui/panels.py)
WALK = ("walk", "walk_text")
VIEWS = {WALK: lambda v: render(v.p, v.a, v.walk)}


MODEL_VIEWS = ("position", "distance", "filters", "model_caption")   # of the model, not the input


def place(ctx) -> MechanismPanel:
    return build(ctx.p)


def components(c: MechanismPanel) -> dict:
    return {"walk": c.walk, "walk_text": c.walk_text, "position": c.position,
            "distance": c.distance, "filters": c.filters, "model_caption": c.model_caption}


def follow_cls(page, visit, cls: FollowCls) -> dict:
    """The panel's switch: follow [CLS] rather than the chosen patch."""
    return page.choose(visit, follow_cls=cls)


def mechanism_model(page, visit) -> dict:
    """The Figure 7 views of a model (cached per model), while the panel is open."""
    r = visit.record
    if not r.mechanism_open:
        return {}
    pictures = model_images(page.predictor(r.model), page.answers.data_dir)
    return dict(zip(MODEL_VIEWS, pictures.as_tuple()))


def wire(w, c: MechanismPanel) -> None:
    page = w.page
    opened = w.opens(OPEN, c.accordion)
    w.on(opened.then, functools.partial(mechanism_model, page), [], MODEL_VIEWS, **w.QUIET)
    w.on(c.cls.change, functools.partial(follow_cls, page), [c.cls], w.QUICK,
         trigger_mode="always_last", **w.QUIET)
