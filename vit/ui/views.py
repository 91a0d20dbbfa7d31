"""The analysis panels under the input: what the model sees, where each head looks, one patch's
attention. `build()` makes the components; `attention_grid()` / `explorer()` are pure functions
from an analysis to pictures (vit/ui/render.py draws the page with them)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import gradio as gr
import numpy as np

from vit.explain.attention import patch_attention_row
from vit.inference import Analysis, Predictor
from vit.pictures.attention_maps import (
    attention_grid_picture,
    grid_picture_height,
    head_at,
    patch_grid_picture,
    single_map_picture,
    token_strip,
    uniform_level,
)
from vit.ui.boundary import SharedScale
from vit.ui.gradio_patches import FreeSlider
from vit.ui.words import alt, caption, term

PICK_SIZE = 336                      # pixels of the clickable patch picture
# Beyond this many layers x heads, one picture of every map is unreadable (ViT-B/16: 144 maps,
# 3000 px): the picture then shows each layer's mean over its heads, and the chosen layer's heads.
BIG_GRID = 48
SMALL_SIDE = 112                     # the big layout's maps are at most this many pixels


def centre_patch(grid: int) -> int:
    return (grid // 2) * grid + grid // 2


def _fit(v, n: int, fallback: int) -> int:
    """A value from the page -> an int in 0..n-1: out-of-range numbers are clamped to the
    nearest end, anything that is not a number gives `fallback`."""
    try:
        v = int(v)
    except (TypeError, ValueError, OverflowError):
        return fallback
    return min(max(v, 0), n - 1)


def clamp(p: Predictor, layer, head, patch) -> tuple[int, int, int]:
    """1-based slider values and a 0-based clicked patch -> valid 0-based (layer, head, patch)
    for this model: they may come from another model, an old page, or a client that sends
    anything. What is not a number: the last layer, the first
    head, the centre patch."""
    cfg = p.model.cfg
    layer = _fit(layer - 1 if isinstance(layer, (int, float)) else None, cfg.depth,
                 cfg.depth - 1)
    head = _fit(head - 1 if isinstance(head, (int, float)) else None, cfg.heads, 0)
    return layer, head, _fit(patch, p.grid ** 2, centre_patch(p.grid))


def snapped(p: Predictor, layer, head) -> tuple:
    """Updates putting the layer and head sliders back in range when a typed value is out of it
    (the number box takes anything), else leaving them alone: a slider being dragged must never
    be pulled back to a value an earlier event saw."""
    fixed = clamp(p, layer, head, None)[:2]
    return tuple(gr.update() if isinstance(v, (int, float)) and v == f + 1 else gr.update(value=f + 1)
                 for v, f in zip((layer, head), fixed))


def explorer(p: Predictor, a: Analysis, layer, head, patch) -> tuple[np.ndarray, np.ndarray]:
    layer, head, patch = clamp(p, layer, head, patch)
    row = patch_attention_row(a.explanation.attn, layer, head, patch, p.grid)
    return (patch_grid_picture(a.image, p.grid, PICK_SIZE, marked=patch),
            single_map_picture(a.image, row, f"patch {patch + 1}, layer {layer + 1}, "
                                                f"head {head + 1}", marked=patch,
                                  uniform=uniform_level(p.grid)))


def big(p: Predictor) -> bool:
    return p.model.cfg.depth * p.model.cfg.heads > BIG_GRID


def _small(img: np.ndarray, grid: int) -> np.ndarray:
    """The input box-averaged by a whole factor to at most SMALL_SIDE px (still whole patches)."""
    S = img.shape[0]
    f = next((f for f in range(-(-S // SMALL_SIDE), S + 1) if S % f == 0 and (S // f) % grid == 0), 1)
    if f == 1:
        return img
    return img.reshape(S // f, f, S // f, f, *img.shape[2:]).mean(axis=(1, 3))


def attention_grid(p: Predictor, a: Analysis, shared: bool, layer=None) -> np.ndarray:
    """[CLS] attention for every layer and head, each map captioned with its maximum (or range)
    and the weight [CLS] keeps for itself. For a big model (more than BIG_GRID maps): one row of
    every layer's mean over its heads, and below it the heads of `layer` (the explorer's)."""
    e, shared = a.explanation, bool(shared)
    if not big(p):
        return attention_grid_picture(a.image, e.cls_maps, shared_scale=shared,
                                         cls_self=e.attn[:, :, 0, 0])
    L, H = e.cls_maps.shape[:2]
    chosen, _, _ = clamp(p, layer, None, None)
    img = _small(a.image, p.grid)
    every = attention_grid_picture(
        img, e.cls_maps.mean(axis=1)[None], shared, cls_self=e.attn[:, :, 0, 0].mean(axis=1)[None],
        rows=("mean",), cols=tuple(f"layer {i + 1}" for i in range(L)),
        title="each layer's mean over its heads")
    heads = attention_grid_picture(
        img, e.cls_maps[chosen][None], shared, cls_self=e.attn[chosen, :, 0, 0][None],
        rows=(f"layer {chosen + 1}",), title=f"layer {chosen + 1}'s heads")
    width = max(every.shape[1], heads.shape[1])
    pad = [np.pad(x, ((0, 0), (0, width - x.shape[1]), (0, 0)), constant_values=255)
           for x in (every, heads)]
    return np.concatenate(pad, axis=0)


def grid_hit(p: Predictor, x: float, y: float) -> tuple[int | None, int | None] | None:
    """What a click on the attention_grid picture opens: (layer, head), 0-based, None for "keep
    as it is" (the big layout's mean row picks a layer only); None for a click on no map."""
    cfg = p.model.cfg
    if not big(p):
        return head_at(x, y, cfg.depth, cfg.heads, p.size)
    side = _small(np.zeros((p.size, p.size)), p.grid).shape[0]
    hit = head_at(x, y, 1, cfg.depth, side)
    if hit is not None:
        return hit[1], None
    hit = head_at(x, y - grid_picture_height(1, cfg.depth, side), 1, cfg.heads, side)
    return None if hit is None else (None, hit[1])


@dataclass
class Panel:
    accordion: gr.Accordion | None
    seen: gr.Image
    strip: gr.Image
    shared: gr.Checkbox
    grid: gr.Image
    rollout: gr.Image
    layer: gr.Slider
    head: gr.Slider
    pick: gr.Image
    row: gr.Image

    @property
    def pictures(self) -> list:
        """The pictures' components, in vit/ui/render.py's PICTURES order."""
        return [self.seen, self.strip, self.grid, self.rollout, self.pick, self.row]


def build(depth: int, heads: int) -> Panel:
    gr.Markdown("## What the model sees\n" + caption(
        f"Your input at the model's size, cut into {term('patch', 'patches')}; each patch "
        f"becomes a {term('token')}, and a {term('cls')} token goes first.",
        "The input is laid out like the training data (centred, scaled, normalised) at the "
        "model's input size and cut into non-overlapping patches, numbered from 1 in reading "
        "order. Each patch becomes one token (\"About this model\" says whether a small "
        "convolution stem first lets it see a few pixels past its patch); a learned [CLS] token "
        "is put in front and the answer is read from it."))
    with gr.Row():
        seen = gr.Image(label="Input with its patch grid (patch n is token n + 1: [CLS] is token 1)",
                        interactive=False, height=340, buttons=["download"],
                            alt_text=alt("seen"), elem_id="seen")
        strip = gr.Image(label="The token sequence: [CLS], then patches 1…N",
                         interactive=False, height=340, buttons=["download"],
                             alt_text=alt("strip"), elem_id="strip")
    gr.Markdown("## Where each head looks\n" + caption(
        f"Each small map is one {term('head')} of one {term('layer')}: brighter patches get more "
        f"of [CLS]'s {term('attention')}. Each map has its own colour scale (the bar under it); "
        f"tick the box for one scale for all. Under each map, \"[CLS] x %\" is the share [CLS] "
        f"keeps for itself, which no patch shows. Click a map to open it above and below.",
        "For every layer (rows) and head (columns): the share of the [CLS] token's attention "
        "that goes to each patch (a row of the attention matrix sums to 1, [CLS]'s share for "
        "itself included, printed under each map). With one scale for all, the bar marks the "
        "uniform level 1/(patches + 1), attention spread evenly, and no map is stretched past 5× "
        "that level; with a scale per map (the default), the green tick on each map's bar marks "
        "that level. **Rollout** (Abnar & Zuidema 2020) multiplies the layers' attention (each "
        "plus the residual path) into one map of how much each patch flows into the final "
        "[CLS]. It is the same whatever class you ask about: it shows where the model gathers "
        "information, not why it chose this class."))
    shared = gr.Checkbox(False, label="One colour scale for all maps (off: each map is scaled "
                                      "to its own range, shown by the bar under it)",
                         elem_id="shared-scale")
    with gr.Row():
        grid = gr.Image(label="[CLS] attention, layers × heads", interactive=False, scale=3,
                        buttons=["download", "fullscreen"], alt_text=alt("attention"), elem_id="attention")
        rollout = gr.Image(label="Attention rollout (class-agnostic)", interactive=False, scale=2,
                           buttons=["download"], alt_text=alt("rollout"), elem_id="rollout")
    gr.Markdown("## Explore one patch\n" + caption(
        "Click a patch on the left (or tap one in the strip at the top) to see where that "
        "patch looks in the chosen layer and head.",
        "The right picture is that patch token's own row of the attention matrix in the chosen "
        "layer and head: how much of its attention goes to each patch (and, not shown, to "
        "[CLS]). The patch, layer and head chosen here are the ones the strip at the top and the "
        "step-by-step panel show."))
    with gr.Row():
        layer = FreeSlider(1, max(depth, 2), value=depth, step=1, label="Layer", elem_id="layer")
        head = FreeSlider(1, max(heads, 2), value=1, step=1, label="Head", elem_id="head")
    with gr.Row():
        pick = gr.Image(label="Click a patch", interactive=False, height=380,
                        alt_text=alt("pick"), elem_id="pick")
        row = gr.Image(label="That patch's attention", interactive=False, height=380,
                       alt_text=alt("row"), elem_id="row")
    return Panel(None, seen, strip, shared, grid, rollout, layer, head, pick, row)


def slider_updates(p: Predictor) -> tuple[dict, dict]:
    """Layer and head sliders for this model (a slider needs minimum < maximum: a one-layer or
    one-head model gets a range of 1..2 and the handlers clamp)."""
    cfg = p.model.cfg
    return (gr.update(maximum=max(cfg.depth, 2), value=cfg.depth),
            gr.update(maximum=max(cfg.heads, 2), value=1))


# Drawn from a record seen through vit/ui/render.py's Seen (vit/ui/panels.py).
PICTURES = ("seen", "strip", "grid", "rollout", "pick", "row")
# Drawn only while open: six pictures cost ~130 ms of the server's CPU to send at every answer.
OPEN = "views_open"
VIEWS = {
    ("seen",): lambda v: (patch_grid_picture(v.a.image, v.p.grid),),
    ("strip",): lambda v: (token_strip(v.a.image, v.p.grid),),
    # A big model's picture shows the chosen layer's heads: only its grid follows the layer.
    ("grid",): lambda v: (attention_grid(v.p, v.a, v.shared, v.layer if big(v.p) else None),),
    ("rollout",): lambda v: (single_map_picture(v.a.image, v.a.explanation.rollout_map,
                                                "rollout into the final [CLS]",
                                                uniform=uniform_level(v.p.grid)),),
    ("pick", "row"): lambda v: explorer(v.p, v.a, v.layer, v.head, v.patch),
}


def place(ctx) -> Panel:
    with gr.Accordion("Every layer and head, and one patch's attention", open=False,
                      elem_id="views") as accordion:
        return replace(build(ctx.p.model.cfg.depth, ctx.p.model.cfg.heads), accordion=accordion)


def components(c: Panel) -> dict:
    return {**dict(zip(PICTURES, (c.seen, c.strip, c.grid, c.rollout, c.pick, c.row))),
            "layer": c.layer, "head": c.head}


def rescale(page, visit, shared: SharedScale) -> dict:
    """One colour scale for every head's map, or each its own."""
    return page.choose(visit, shared=shared)


# A click on a head map opens it in the explorer just below: bring that into view.
TO_EXPLORER = ("() => document.querySelector('#pick')?.scrollIntoView({block: 'nearest', "
               "behavior: matchMedia('(prefers-reduced-motion: reduce)').matches ? "
               "'instant' : 'smooth'})")


def wire(w, c: Panel) -> None:
    """The sliders and clicks choose the page's layer, head and patch (Page.explore,
    Page.pick_patch: the strip, the walk and the second model follow them too)."""
    page = w.page
    w.opens(OPEN, c.accordion)
    w.on(c.shared.change, functools.partial(rescale, page), [c.shared], w.QUICK, **w.QUIET)
    for s in (c.layer, c.head):
        w.on(s.change, page.explore, [c.layer, c.head], (*w.QUICK, "layer", "head"),
             trigger_mode="always_last", **w.QUIET)
    w.on(c.grid.select, page.pick_head, [], ("layer", "head"), **w.QUIET).then(None, js=TO_EXPLORER)
    w.on(c.pick.select, page.pick_patch, [], w.QUICK, **w.QUIET)
