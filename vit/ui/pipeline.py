"""The pipeline strip beside the canvas: input -> what the model sees -> patches -> tokens ->
where [CLS] looks -> the answer, read left to right, live while the pen moves.

`strip_value(p, a, layer, head, patch)` is a pure function from an analysis to the few kilobytes
of numbers the browser draws (pipeline.js): the model's input as a small PNG, the chosen head's
and the rollout's [CLS] maps, the top classes and each patch's share of what drove the answer.
Hovering or tapping a patch is handled in the browser, so every step highlights it at once; a
tap also sends {"pick": n} ("pick" event), which the page turns into the chosen patch that the
explorer and the step-by-step panel follow; the "one head" menus send {"layer": l, "head": h}
("pickhead": the page's layer and head). Class names reach the page as text (the script sets
textContent), never as HTML."""
from __future__ import annotations

import base64
import functools
import html
import io
from pathlib import Path

import gradio as gr
import numpy as np
from PIL import Image

from vit.explain.faithful import AGREE, agreement, lead_map
from vit.inference import Analysis, Explained, Predictor
from vit.pictures.attention_maps import VIVID, uniform_level
from vit.ui import views, why_panel
from vit.ui.words import GLOSSARY, unsure_words

HERE = Path(__file__).parent
TOP = 5                       # classes listed in the answer step
UNSURE = 0.6                  # below this probability the answer is said with a "maybe"

# (id, title, plain caption, glossary key for its "?")
STEPS = (
    ("seen", "1 · Seen", "Your input at the model's size", "seen"),
    ("patches", "2 · Patches", "Cut into small squares", "patch"),
    ("tokens", "3 · Tokens", "Each patch becomes a token: a list of numbers, plus its place. "
                            "[CLS] is one extra token, with no pixels, that gathers the answer",
     "token"),
    # (the bar's end explained: a fifth trial's teacher could not say why it read 10.0 % over a
    # map whose largest weight was 4.0 %; one line shorter than it was, for the menus' room)
    ("attention", "4 · Attention", "Where [CLS] looked, not why it answered (step 5). The bar "
                                   "ends at 5× an even spread (green) or the largest weight "
                                   "(blue)", "attention"),
    ("answer", "5 · Answer", "Read from [CLS] after the last layer", "calibrated"),
)
# Where each step's detail opens (the accordion below the strip) and what the link says.
DETAIL = {"tokens": ("mechanism", "tokens, step by step"),
          "attention": ("mechanism", "one head's arithmetic"),
          "answer": ("why", "what drove it, every map")}
SEEN = ("The picture is laid out the way the model's training images were made, at their size: "
        "for digits, cropped to the ink, scaled into a 20×20 box in a 28×28 frame, centred by "
        "the ink's mass, white ink on black (MNIST's layout); for clothing, the shape filling a "
        "28×28 frame; for photos, the centre square resized to 32×32. Then its pixels are "
        "normalised with the training set's mean and spread.")


def more(key: str) -> str:
    """A step's link to its detail below ("" for a step without one)."""
    if key not in DETAIL:
        return ""
    target, words = DETAIL[key]
    return (f' <a class="more" href="#{target}" data-open="{target}">{html.escape(words)} '
            f'<span aria-hidden="true">↓</span></a>')


def _template() -> str:
    steps = []
    for i, (key, title, plain, term) in enumerate(STEPS):
        precise = SEEN if term == "seen" else GLOSSARY[term][1]
        if key == "attention":     # its map is either: all layers (rollout) or one head
            precise = f"One head: {precise} All layers: {GLOSSARY['rollout'][1]}"
        elif key == "answer":      # what the step shows first, then how far to trust its numbers
            precise = (f"The bars: the model's probability of each class, its five likeliest. The "
                       f"box under them: the patch the answer rests on most, by the map measured "
                       f"most faithful for this model. The probabilities are calibrated: {precise}")
        precise = html.escape(precise)
        body = ('<div class="bars" role="list"></div>' if key == "answer" else
                f'<canvas class="c-{key}" aria-label="{html.escape(title)}"></canvas>')
        extra = ""
        if key == "attention":
            # The scale of every attention picture on the page (attention_maps.VIVID): to the
            # map's largest weight, or VIVID times an even spread if that is larger.
            extra = (f'<div class="scale" data-vivid="{VIVID}"><span class="lo">0</span><i>'
                     '<b class="even" title="green: attention spread evenly"></b>'
                     '<b class="peak" title="blue: this map\'s largest weight"></b></i>'
                     '<span class="hi"></span>'
                     '</div><div class="modes" role="radiogroup" aria-label="Which attention">'
                     '<button type="button" role="radio" data-mode="rollout" aria-checked="true">'
                     'all layers</button><button type="button" role="radio" data-mode="head" '
                     'aria-checked="false">one head</button></div>'
                     '<div class="which"><div class="pick-head" hidden>'
                     '<select data-pick="layer" aria-label="Layer"></select>'
                     '<select data-pick="head" aria-label="Head"></select></div>'
                     '<div class="showing"></div></div>')
        elif key == "answer":
            extra = '<button type="button" class="drove" hidden></button>'
        arrow = '<span class="arrow" aria-hidden="true">→</span>' if i < len(STEPS) - 1 else ""
        steps.append(
            f'<li class="step s-{key}" data-step="{key}"><div class="title">'
            f'<span class="n">{html.escape(title[:4])}</span>{html.escape(title[4:])}'
            f'<details class="q"><summary title="The precise version" aria-label="'
            f'{html.escape(title[4:].strip())}: the precise version">?</summary>'
            f'<div class="pop">{precise} <a href="#glossary">Glossary</a></div></details></div>'
            f'{body}{extra}<div class="note">{html.escape(plain)}{more(key)}</div>{arrow}</li>')
    return ('<div class="pipe" data-empty="1"><ol class="steps">' + "".join(steps) + '</ol>'
            '<div class="readout" aria-live="polite">Point at (or tap) a patch to follow it '
            'through every step.</div>'
            # Who answers while the pen moves (page.js words it): its line is here from the first
            # frame, not added when the page's model has loaded and pushing the page down a line.
            '<p id="inpage-note">While you draw, the server answers until this browser has '
            'loaded the model.</p></div>')


@functools.cache
def _page_parts() -> tuple[str, str, str]:
    """The strip's template, style and script, made once: Gradio builds a copy of the component
    for every session an answer updates it in, and each copy read them anew (~280 KB a session,
    kept as long as the session: tests/test_fourth_attack.py)."""
    return _template(), (HERE / "pipeline.css").read_text(), (HERE / "pipeline.js").read_text()


class PipelineStrip(gr.HTML):
    """The strip: its value is `strip_value(...)`'s dict (None: nothing to show yet)."""

    def __init__(self, **kwargs):
        template, css, js = _page_parts()
        super().__init__(value=None, html_template=template, css_template=css, js_on_load=js,
                         **kwargs)


def _png(image: np.ndarray) -> str:
    """The model's input (S, S) or (S, S, 3) in [0, 1] as a PNG data URL (a few hundred bytes)."""
    a = (np.clip(image, 0, 1) * 255).round().astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a, "L" if a.ndim == 2 else "RGB").save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _rounded(m: np.ndarray) -> list[float]:
    return [round(float(v), 5) for v in np.asarray(m, np.float64).ravel()]


def answer_line(p: Predictor, a: Analysis) -> str:
    """The answer in the words a person would use: "7", or "Probably a 7; maybe a 2", or the
    model's refusal ("Not a digit")."""
    order = np.argsort(a.probs)[::-1]
    first = p.class_names[order[0]]
    if not a.is_class:
        return p.not_label.capitalize()
    if a.probs[order[0]] < UNSURE and len(order) > 1:
        return unsure_words(first, p.class_names[order[1]])
    return str(first)


def strip_value(p: Predictor, a: Analysis | None, layer=None, head=None, patch=None,
                live: bool = False, e: Explained | None = None, model: str | None = None,
                drawing: int = 0, why: bool = False) -> dict | None:
    """What the strip draws for analysis `a` of the input on screen by model `p`: the model's
    input, its grid, [CLS]'s attention in the chosen layer and head (1-based, as the sliders
    send them; clamped) and its rollout, and the top classes. `live`: the pen is still down.
    An analysis without attention (a big model's quick answer while drawing) leaves the maps out;
    one not yet explained (`e`: its maps, from the "why" lane) leaves out what it rests on.
    `drawing`: the number of the canvas's last drawing answered; `why`: sent by the "why" lane,
    with what the answer rests on beside it (the page waits for both)."""
    if a is None:
        return None
    L, H, P = views.clamp(p, layer, head, patch)
    order = np.argsort(a.probs)[::-1][:TOP]
    value = {
        "model": model,             # the page runs this model itself while the pen moves (inpage.js)
        "image": _png(a.image), "size": int(a.image.shape[0]), "grid": int(p.grid),
        "layer": L + 1, "head": H + 1, "layers": p.model.cfg.depth, "heads": p.model.cfg.heads,
        "patch": int(P) if patch is not None else None,
        # Rounded once, to the 0.1 % every percentage on the page shows (vit.text.percent): a
        # second rounding in the page read 95.65 % as 95.7 beside the headline's 95.6 %.
        "classes": [[str(p.class_names[i]), round(float(a.probs[i]), 3)] for i in order],
        "answer": answer_line(p, a), "refused": not a.is_class, "live": bool(live),
        # Why not, under the refusal: the bars below it are what the model alone would read (a
        # trial read "Not a digit" over "1 >99.9 %" as a broken rule; the sentence is the ink's).
        "reason": (a.verdict.reason or None) if not a.is_class else None,
        "colour": bool(p.config.style.colour),
        # Each token's weight were attention spread evenly (both maps are rows over all tokens,
        # [CLS] included): the tick on the strip's scale, as on every map's bar.
        "even": uniform_level(p.grid),
        "head_map": None, "rollout": None, "lead": None, "share": None, "drove": None,
        "agree": None, "slight": False, "drop": None,
        # Which drawing this answers, and whether the "why" lane sent it (with or without a lead
        # map; a lead map in hand also comes on the answer's lane, before "what the answer rests
        # on" is drawn): until both hold, the page hides the older drawing's parts.
        "drawing": int(drawing), "explained": bool(why) and not live,
    }
    if a.explanation is not None:
        value["head_map"] = _rounded(a.explanation.cls_maps[L, H])
        value["rollout"] = _rounded(a.explanation.rollout_map)
    maps = None if a.explanation is None or e is None or live or views.big(p) else e.maps
    if maps is not None:
        # What the answer rests on, by patch, from the map measured most faithful for this model
        # (config.json's faithfulness): each patch's share, the one it rests on most, and which
        # other maps rank the patches alike. Only once the "why" lane has computed the maps:
        # the answer never waits for them, and the strip is sent again with them.
        lead = lead_map(p.config)
        shares = np.clip(maps[lead], 0, None).ravel()
        if shares.sum() > 0:
            value.update(lead=lead, share=_rounded(shares / shares.sum()),
                         drove=int(shares.argmax()),
                         agree=[k for k, rho in agreement(lead, maps).items() if rho >= AGREE],
                         # no one patch, hidden, moves the answer much: said, so that nobody
                         # erases "the" patch and expects the answer to go (a teacher's trial)
                         slight=lead == "occlusion" and why_panel.slight(e.answer_occlusion))
            if lead == "occlusion" and not value["slight"]:
                # A patch's own figure in the unit of the map beside the answer ("drop in P(7),
                # max 79.3 %"), not its share of the map's sum (a trial read "carries 37.7 %"
                # for the patch that map put at 79.3 %).
                value["drop"] = _rounded(np.clip(e.answer_occlusion["probability"], 0, None).ravel())
    return value


def _small_int(value, key: str) -> int | None:
    n = value.get(key) if isinstance(value, dict) else None
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 1 << 16:
        return None
    return n


def picked(value) -> int | None:
    """The patch a tap on the strip chose (0-based), from what the browser sent: anything but a
    small non-negative integer is None."""
    return _small_int(value, "pick")


def picked_head(value) -> tuple[int, int] | None:
    """The layer and head (1-based) chosen in the strip's "one head" menus, from what the browser
    sent ({"layer": l, "head": h}), or None for anything else."""
    layer, head = _small_int(value, "layer"), _small_int(value, "head")
    return None if layer is None or head is None else (layer, head)
