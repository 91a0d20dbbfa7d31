"""The page as a pure function of its record: `render(record, p, a, names)` gives every named
component's value for a record (vit/ui/record.py) and the analysis `a` of its input on screen
through model `p`. `changed(before, after)` names the components whose value can differ between
two records, so a handler sends only those. Nothing here touches Gradio's events or a server."""
from __future__ import annotations

import numpy as np

from vit.inference import Analysis, Predictor
from vit.pictures.attention_maps import patch_grid_picture, single_map_picture, token_strip, uniform_level
from vit.text import md, percent
from vit.ui import compare_panel, lens_panel, mechanism_panel, pipeline, training_panel, views, why_panel
from vit.ui.record import KIND_OF, Record, Shown, same
from vit.ui.words import unsure_words

PICTURES = ("seen", "strip", "grid", "rollout", "pick", "row")
WHY = ("relevance", "occlusion", "faithfulness", "ablation", "glance", "sanity", "glance_text")
# What the "why" lane sends after each analysis: its panel, and the strip again, which then
# carries the lead map the lane has just computed (pipeline.strip_value).
EXPLAINED = WHY + ("pipeline",)
WALK = ("walk", "walk_text")
LENS = ("lens", "lens_text")
LEARNED = ("learned", "learned_frame", "learned_text")
COMPARE = ("compare_text", "compare_strip", "compare_maps")
# The panels drawn only while open: their views, and the record field that says each is open.
FOLDED = {**dict.fromkeys(WALK, "mechanism_open"), **dict.fromkeys(LENS, "lens_open"),
          **dict.fromkeys(LEARNED, "learned_open"), **dict.fromkeys(COMPARE, "compare_open")}
FOLDED_VIEWS = tuple(FOLDED)
EXPLORER = ("pick", "row")                # one patch's grid and its attention row
ANSWER = ("status", "label", "answered", "pipeline")
EVERY = ANSWER + PICTURES + WHY + WALK + LENS + LEARNED + COMPARE

# What each component's value depends on: record fields, and "shown" (the input on screen and
# the model it is answered by).
DEPENDS = {
    "status": ("tab", "shown", "drawing", "upload", "test", "testset_open"),
    "label": ("shown",),
    "pipeline": ("shown", "layer", "head", "patch"),
    "answered": ("drawing",),
    "seen": ("shown",), "strip": ("shown",), "rollout": ("shown",),
    "grid": ("shown", "shared", "layer"),
    "pick": ("shown", "patch"),
    "row": ("shown", "layer", "head", "patch"),
    **{name: ("shown", "target") for name in ("relevance", "occlusion", "faithfulness", "glance",
                                              "sanity", "glance_text")},
    "ablation": ("shown", "heads_off"),
    "walk": ("shown", "mechanism_open", "follow_cls", "layer", "head", "patch"),
    "walk_text": ("shown", "mechanism_open", "follow_cls", "layer", "head", "patch"),
    **{name: ("shown", "lens_open", "target") for name in LENS},
    **{name: ("shown", "learned_open", "patch", "learned_at") for name in LEARNED},
    **{name: ("shown", "compare", "compare_open", "layer", "head", "patch") for name in COMPARE},
}

# What the answer on screen is for, as a tab that is not its input's says it.
SHOWING = {"drawing": "your drawing", "upload": "your upload", "test": "the test image you picked"}
# The headline of a tab whose own input is not on screen (yet).
PROMPT = {"upload": "### Upload or paste a picture",
          "test": "### Click a test image to explain it"}
NO_TEST_SET = "### This model's test set is not on this machine"
NOTHING_YET = "Draw or upload something first."
NO_SECOND = "Pick a second model above to see it beside this one."


def _value(r: Record, field: str):
    return (r.shown, r.model) if field == "shown" else getattr(r, field)


def changed(before: Record, after: Record, names=EVERY) -> tuple[str, ...]:
    """The components among `names` whose value may differ between the two records."""
    moved = {f for f in {f for n in names for f in DEPENDS[n]}
             if not same(_value(before, f), _value(after, f))}
    return tuple(n for n in names if moved.intersection(DEPENDS[n]))


def answered(r: Record) -> bool:
    """Whether the input on screen has been analysed by the record's model (after a model switch
    its re-analysis is on its way, and until then the views stay as they are)."""
    return isinstance(r.shown, Shown) and r.shown.model == r.model


def headline(r: Record, p: Predictor, test_set_here: bool = True) -> str:
    """The line above the answer: the answer of the tab in view's input, or what that tab asks
    for — and then what the answer and pictures below still belong to."""
    shown, own = r.shown, r.input_of(r.tab)
    if shown is not None and (r.tab == "draw" or own is shown):
        return shown.headline
    if r.tab == "draw" or r.tab not in KIND_OF:
        return rest_message(p)
    prompt = PROMPT[r.tab] if r.tab != "test" or test_set_here else NO_TEST_SET
    if shown is None:
        return prompt
    return f"{prompt}\nUntil then, the answer and pictures below are still for {SHOWING[shown.kind]}."


def rest_message(p: Predictor) -> str:
    """The headline over an empty canvas: what to draw — or, for a photo model (a black pen
    draws no photo), where the pictures are."""
    if p.config.style.colour:
        return f"### 🖼️ Pick a picture below the canvas, or upload a {p.config.noun}"
    return f"### ✏️ Draw a {p.config.noun} in the box"


def answer_headline(p: Predictor, a: Analysis) -> str:
    """What the model reads, or why it is not one of its classes (one sentence)."""
    probs = a.probs
    order = np.argsort(probs)[::-1]
    best, second = order[0], order[min(1, len(order) - 1)]
    if not a.is_class:
        text = f"### 🚫 {p.not_label.capitalize()}\n{md(a.verdict.reason, 400)}"
        if a.verdict.kind != "unsure":         # the sentence says why; this, what the model saw
            text += (f" (On its own the model would read it as **{md(p.class_names[best])}**, "
                     f"{percent(probs[best])}.)")
        return text
    name, other = md(p.class_names[best]), md(p.class_names[second])
    if probs[best] < pipeline.UNSURE and second != best:
        # As a person says it: "probably a 7; maybe a 2", then the numbers.
        return (f"### {unsure_words(f'**{name}**', f'**{other}**')}\n"
                f"The model reads this as **{name}** ({percent(probs[best])}); "
                f"**{other}** gets {percent(probs[second])}.")
    return f"### The model reads this as **{name}** ({percent(probs[best])})"


def render(r: Record, p: Predictor, a: Analysis | None, names=EVERY,
           test_set_here: bool = True, other: tuple | None = None) -> dict:
    """{component name: value} for `names`. `a`: the analysis of `r.shown` by `p` (None when
    there is no answered input). A view of an input not yet answered by the record's model is
    left out (left as it is on the page); the panels in FOLDED only while they are open.
    `other`: (second model, its analysis of the same input) when the record names one, or why
    the second model could not answer (a one-line message)."""
    out, live = {}, answered(r) and a is not None
    waiting = isinstance(r.shown, Shown) and not live
    why = walk = explored = lens = learned = compared = None
    for name in names:
        if name == "status":
            out[name] = headline(r, p, test_set_here)
        elif name == "answered":
            out[name] = str(r.drawing.number) if r.drawing is not None and r.drawing.number else ""
        elif waiting or (name in FOLDED and not getattr(r, FOLDED[name])):
            continue
        elif not live:
            out[name] = (NOTHING_YET if name in ("walk_text", "lens_text", "learned_text", "compare_text")
                         else "" if name in ("faithfulness", "ablation", "glance_text") else None)
        elif name == "label":
            out[name] = p.label(a.probs, a.verdict)
        elif name == "pipeline":
            out[name] = pipeline.strip_value(p, a, r.layer, r.head, r.patch)
        elif name == "ablation":             # heads switched off: this text alone changes
            out[name] = why_panel.switch_heads(p, a, r.heads_off)
        elif name in WHY:
            why = why or why_panel.render(p, a, r.target, r.heads_off)
            out[name] = why[WHY.index(name)]
        elif name in WALK:
            walk = walk or mechanism_panel.render(p, a, r.layer, r.head, r.patch, r.follow_cls)
            out[name] = walk[WALK.index(name)]
        elif name in LENS:
            lens = lens or lens_panel.render(p, a, r.target)
            out[name] = lens[LENS.index(name)]
        elif name in COMPARE:
            if other is None or isinstance(other, str):
                out[name] = (other or NO_SECOND) if name == "compare_text" else None
                continue
            compared = compared or compare_panel.render(p, a, *other, r.layer, r.head, r.patch,
                                                        (r.model, r.compare))
            out[name] = compared[COMPARE.index(name)]
        elif name in LEARNED:
            learned = learned or training_panel.render(p, a, r.patch, r.learned_at)
            out[name] = learned[LEARNED.index(name)]
        elif name in EXPLORER:                # both drawn by one call
            explored = explored or views.explorer(p, a, r.layer, r.head, r.patch)
            out[name] = explored[EXPLORER.index(name)]
        else:
            out[name] = picture(name, r, p, a)
    return out


def picture(name: str, r: Record, p: Predictor, a: Analysis) -> np.ndarray:
    """One of the analysis panels' pictures (vit/ui/views.py) but the explorer's two."""
    grid = p.grid
    if name == "seen":
        return patch_grid_picture(a.image, grid)
    if name == "strip":
        return token_strip(a.image, grid)
    if name == "grid":
        return views.attention_grid(p, a, r.shared, r.layer)
    if name == "rollout":
        return single_map_picture(a.image, a.explanation.rollout_map, "rollout into the final [CLS]",
                                  uniform=uniform_level(grid))
    raise KeyError(name)
