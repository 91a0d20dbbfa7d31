"""Two models side by side: the input on screen through a second checkpoint (its answer, its
pipeline strip, the [CLS] maps of the matching layer) beside the page's model, where they
disagree, and on request the test images one gets right and the other wrong."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import gradio as gr
import numpy as np
from PIL import Image, ImageDraw

from vit.explain.faithful import spearman
from vit.inference import Analysis, Predictor
from vit.pictures.attention_maps import VIVID, load_font, share, single_map_picture, uniform_level
from vit.text import confidence, correlation, md, percent
from vit.ui import pipeline, testset_tab, views
from vit.ui.boundary import SecondModel
from vit.ui.pipeline import PipelineStrip
from vit.ui.words import alt, caption

NOBODY = ""                     # the dropdown's "no second model"
NO_SECOND = "Pick a second model above to see it beside this one."
# A model beside itself agrees with itself: nothing to compare.
SAME_MODEL = "That is the page's own model: pick another one to see where two models differ."
PLAIN = ("Pick a second model: the input on screen goes through both, and you see where they "
         "agree, where they look, and where they part.")
PRECISE = (
    "The second model reads the same input through its own preprocessing (a drawing laid out as "
    "that model's data set is). Its strip and maps follow the page's layer, head and patch: a "
    "model of another depth is shown at the matching depth (layer l of L ↔ the layer at the same "
    "fraction of its own depth), a head it lacks as its last head. Each map is on the page's "
    "attention scale: from 0 to five times an even spread (ticked \"even\"), or to the map's "
    "largest weight (ticked \"max\") if higher. \"Look alike\" is "
    "Spearman's rank correlation of the two models' rollout maps (on the finer grid when the "
    "grids differ). The test-set comparison scores both models on their test set (the same data "
    "set only) and shows the images one gets right and the other wrong.")
SHOW = 12                       # test images shown each way


@dataclass(frozen=True)
class ComparePanel:
    accordion: gr.Accordion
    choice: gr.Dropdown
    text: gr.Markdown
    strip: PipelineStrip
    maps: gr.Image
    differ: gr.Button
    differences_text: gr.Markdown
    differences: gr.Image


def choices(names: list[str], labels: dict[str, str], page_model: str) -> list[tuple[str, str]]:
    """The menu: every model but the page's own (compared with itself it shows nothing; a
    trial picked it)."""
    return [("no second model", NOBODY)] + [(labels.get(n, n), n) for n in names
                                            if n != page_model]


def build(names: list[str], labels: dict[str, str], page_model: str,
          visible: bool = True) -> ComparePanel:
    with gr.Accordion("Compare with another model", open=False, elem_id="compare",
                      visible=visible) as accordion:
        gr.Markdown(caption(PLAIN, PRECISE))
        choice = gr.Dropdown(choices(names, labels, page_model), value=NOBODY, label="Second model",
                             elem_id="compare-choice")
        text = gr.Markdown(elem_id="compare-text")
        strip = PipelineStrip(elem_id="compare-strip", label="second model's pipeline strip")
        maps = gr.Image(label="[CLS] maps of the matching layers: the page's model (top), the "
                              "second model (bottom)", interactive=False,
                        buttons=["download", "fullscreen"],
                            alt_text=alt("compare-maps"), elem_id="compare-maps")
        differ = gr.Button("Where do they differ on the test set?", elem_id="compare-differ")
        differences_text = gr.Markdown(elem_id="compare-differences-text")
        differences = gr.Image(label="Test images one model gets right and the other wrong",
                               interactive=False, buttons=["download", "fullscreen"],
                               alt_text=alt("compare-differences"), elem_id="compare-differences")
    return ComparePanel(accordion, choice, text, strip, maps, differ, differences_text, differences)


def matching_layer(layer: int, depth: int, other_depth: int) -> int:
    """0-based layer of a model `other_depth` deep at the same fraction of depth as `layer` of `depth`."""
    return min(other_depth - 1, max(0, -(-(layer + 1) * other_depth // depth) - 1))   # ceil


def _on_grid(m: np.ndarray, grid: int) -> np.ndarray:
    """A (g, g) map on a finer (grid, grid) one, each cell repeated (grid a multiple of g)."""
    r = grid // m.shape[0]
    return np.kron(m, np.ones((r, r))) if r * m.shape[0] == grid else m


def look_alike(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rho of two rollout maps, on the finer grid; None when one grid does not divide
    the other."""
    g = max(a.shape[0], b.shape[0])
    a, b = _on_grid(a, g), _on_grid(b, g)
    return spearman(a, b) if a.shape == b.shape else None


def _row(p: Predictor, a: Analysis, layer: int, name: str, tile: int) -> np.ndarray:
    maps = a.explanation.cls_maps[layer]
    u = uniform_level(p.grid)
    tiles = [single_map_picture(a.image, a.explanation.rollout_map, "rollout", size=tile, uniform=u)]
    tiles += [single_map_picture(a.image, m, f"L{layer + 1} H{h + 1}", size=tile, uniform=u)
              for h, m in enumerate(maps)]
    h = max(t.shape[0] for t in tiles)
    tiles = [np.pad(t, ((0, h - t.shape[0]), (0, 6), (0, 0)), constant_values=255) for t in tiles]
    row = np.concatenate(tiles, axis=1)
    band = Image.new("RGB", (row.shape[1], 22), "white")
    # Each map on the scale it has everywhere on the page (the strip's, the panels'): colours to
    # VIVID times this model's even share, or to the map's largest weight. Said, since the two
    # models' even shares differ (1/50 and 1/17: bars to 10.0 and 29.4 %). On one scale shared by
    # both (tried), one map read on two scales in one panel, and the finer grid's went dark.
    # ("times": the picture's font has no "×".)
    words = (f"{name}: layer {layer + 1} of {p.model.cfg.depth} · colours to {share(VIVID * u)}, "
             f"{VIVID} times an even share over its {p.grid * p.grid + 1} tokens, or a map's max")
    ImageDraw.Draw(band).text((4, 4), words, fill="black", font=load_font(13))
    return np.concatenate([np.asarray(band), row], axis=0)


def maps_picture(p: Predictor, a: Analysis, p2: Predictor, a2: Analysis, layer: int, layer2: int,
                 names: tuple[str, str], tile: int = 168) -> np.ndarray:
    top, bottom = _row(p, a, layer, names[0], tile), _row(p2, a2, layer2, names[1], tile)
    width = max(top.shape[1], bottom.shape[1])
    pad = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in (top, bottom)]
    return np.concatenate(pad, axis=0)


def _answer(p: Predictor, a: Analysis) -> tuple[int, str]:
    """(the class read, or -1 for "not one of these"; the answer in words)."""
    best = int(a.probs.argmax())
    if not a.is_class:
        return -1, f"**{md(p.not_label)}** (its top class {md(p.class_names[best])}, " \
                   f"{confidence(float(a.probs[best]))})"
    return best, f"**{md(p.class_names[best])}** ({confidence(float(a.probs[best]))})"


def render(p: Predictor, a: Analysis, p2: Predictor, a2: Analysis, layer, head, patch,
           names: tuple[str, str]) -> tuple[str, dict | None, np.ndarray]:
    """(words, the second strip's value, the maps picture) for the input on screen through the
    page's model `p` and the second model `p2`; layer and head as the page's sliders send them."""
    l1, h1, _ = views.clamp(p, layer, head, patch)
    l2 = matching_layer(l1, p.model.cfg.depth, p2.model.cfg.depth)
    h2 = min(h1, p2.model.cfg.heads - 1)
    same_grid = p.grid == p2.grid
    strip = pipeline.strip_value(p2, a2, l2 + 1, h2 + 1, patch if same_grid else None)
    (c1, t1), (c2, t2) = _answer(p, a), _answer(p2, a2)
    n1, n2 = (md(n) for n in names)
    if list(p.class_names) != list(p2.class_names):
        # (a trial: a digit model and the clothing model on a 7 "disagree", as if either could
        # have been right about the other's classes)
        verdict = "They know different classes: only where they look can be set side by side."
    elif (p.class_names[c1] == p2.class_names[c2]) if c1 >= 0 and c2 >= 0 else c1 == c2 == -1:
        verdict = "They agree."
    else:
        verdict = "**They disagree.**"
    rho = look_alike(a.explanation.rollout_map, a2.explanation.rollout_map)
    where = ("" if rho is None else
             f" Where they look (rollout): rank correlation {correlation(rho)} — "
             + ("much the same places." if rho >= 0.7 else "partly the same places." if rho >= 0.3
                else "different places."))
    text = f"{n1} reads {t1}; {n2} reads {t2}. {verdict}{where}"
    return text, strip, maps_picture(p, a, p2, a2, l1, l2, names)


def differences(r1, r2, names: tuple[str, str], class_names: list[str]) -> tuple[str, np.ndarray | None]:
    """(words, picture) of the test images one model gets right and the other wrong. `r1`, `r2`:
    the two models' vit.testset.Results."""
    n1, n2 = (md(n) for n in names)
    if r1.dataset != r2.dataset or len(r1.labels) != len(r2.labels) or \
            not np.array_equal(r1.labels, r2.labels):
        return (f"{n1} and {n2} were trained on different data sets: there is no test set "
                f"they share."), None
    right1, right2 = r1.preds == r1.labels, r2.preds == r2.labels
    only1, only2 = np.flatnonzero(right1 & ~right2), np.flatnonzero(~right1 & right2)
    text = (f"On the {len(r1.labels):,} test images: {n1} {percent(right1.mean())}, "
            f"{n2} {percent(right2.mean())}. Only {n1} right: **{len(only1)}**; only {n2} "
            f"right: **{len(only2)}**; both wrong: {int((~right1 & ~right2).sum())}.")
    return text, _difference_picture(r1, r2, only1[:SHOW], only2[:SHOW], names, class_names)


def _difference_picture(r1, r2, only1, only2, names, class_names, cell: int = 84) -> np.ndarray:
    font = load_font(11)
    rows = []
    for idx, who in ((only1, names[0]), (only2, names[1])):
        band = Image.new("RGB", (SHOW * cell, 20 + (cell + 30 if len(idx) else 0)), "white")
        d = ImageDraw.Draw(band)
        d.text((4, 3), f"only {who} right: " + (f"the first {len(idx)}" if len(idx) else "none"),
               fill="black", font=font)
        for k, i in enumerate(idx):
            im = Image.fromarray(np.ascontiguousarray(r1.images[i])).convert("RGB")
            band.paste(im.resize((cell - 6, cell - 6), Image.NEAREST), (k * cell, 20))
            d.text((k * cell, 20 + cell - 4), f"is {class_names[r1.labels[i]][:10]}",
                   fill=(0, 110, 0), font=font)
            wrong = r2.preds[i] if who == names[0] else r1.preds[i]
            d.text((k * cell, 20 + cell + 9), f"other: {class_names[wrong][:8]}", fill=(170, 0, 0),
                   font=font)
        rows.append(np.asarray(band))
    return np.concatenate(rows, axis=0)


def show(v) -> tuple:
    """The panel's views from a record seen through vit/ui/render.py's Seen: the second model's
    analysis of the same input was computed before (`Seen.other`), or why there is none."""
    other = v.other
    if other is None or isinstance(other, str):
        return other or NO_SECOND, None, None
    p2, a2, names = other
    return render(v.p, v.a, p2, a2, v.layer, v.head, v.patch, names)


COMPARE = ("compare_text", "compare_strip", "compare_maps")
OPEN = "compare_open"        # drawn only while open (vit/ui/panels.py)
VIEWS = {COMPARE: show}


def place(ctx) -> ComparePanel:
    """Shown only where two models share a data set: a digit model beside a clothing one
    compares nothing on the test set."""
    models = ctx.models
    return build(models.names, labels(models), models.default, visible=models.comparable())


def labels(models) -> dict[str, str]:
    return dict((n, label) for label, n in models.choices())


def components(c: ComparePanel) -> dict:
    return {"compare_text": c.text, "compare_strip": c.strip, "compare_maps": c.maps,
            "compare_differences_text": c.differences_text,
            "compare_differences": c.differences}


def choose_compare(page, visit, second: SecondModel) -> dict:
    """The second model's dropdown: a model of this page, or none ("")."""
    return page.choose(visit, compare=second)


def compare_on_test_set(page, visit, progress=gr.Progress()) -> dict:
    """The test images the page's model gets right and the second model wrong, and back."""
    from vit.checkpoint import CheckpointError
    from vit.data.loading import DataError
    r = visit.record
    if r.compare not in page.models.names or r.compare == r.model:
        return {"compare_differences_text": NO_SECOND if r.compare != r.model else SAME_MODEL,
                "compare_differences": None}
    try:
        r1, r2 = (page.answers.get(name, testset_tab.reporter(progress)) for name in (r.model, r.compare))
    except DataError:           # its message names server folders: say it in our words
        return {"compare_differences_text": "⚠️ The test set of these models is not on this "
                                            "machine, so they can't be compared on it.",
                "compare_differences": None}
    except CheckpointError as e:   # the models' messages name models, never server paths
        return {"compare_differences_text": f"⚠️ {md(str(e), 300)}", "compare_differences": None}
    text, picture = differences(r1, r2, (r.model, r.compare), page.predictor(r.model).class_names)
    return {"compare_differences_text": text, "compare_differences": picture}


def follow_model(models, name: str, second: str):
    """The page's model switched: the menu offers every other model, and "no second model" in
    place of the one that is now the page's own (its change then clears the record's)."""
    keep = second in models.names and second != name      # (both are client values)
    return gr.update(choices=choices(models.names, labels(models), name),
                     value=second if keep else NOBODY)


def wire(w, c: ComparePanel) -> None:
    page = w.page
    w.opens(OPEN, c.accordion)
    # Gradio's own event, not w.on: it reads no record and changes none.
    w.ui.model.change(functools.partial(follow_model, page.models), [w.ui.model, c.choice],
                      c.choice, show_progress="hidden", api_visibility="private", queue=False)
    w.on(c.choice.change, functools.partial(choose_compare, page), [c.choice], w.QUICK,
         trigger_mode="always_last", **w.QUIET)
    w.on(c.differ.click, functools.partial(compare_on_test_set, page), [],
         ("compare_differences_text", "compare_differences"), api_visibility="private",
         show_progress_on=c.differences)
