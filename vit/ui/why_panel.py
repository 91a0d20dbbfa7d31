"""The "What drove the answer" panel: class-specific relevance and occlusion side by side, how
faithful each map is on this input (deletion curves), and heads switched off. `build()` makes the
components; `render()` is a pure function from an analysed input to what they show."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import numpy as np

from vit.inference import Analysis, Predictor
from vit.pictures.attention_maps import single_map_picture
from vit.text import md
from vit.ui.words import caption, term

ANSWER = -1                       # the target dropdown's "the model's answer"
OCCLUSION_TOP = 0.2               # an occlusion map's scale reaches at least this drop
FLAT = 0.05                       # no patch moving P(answer) by this much leaves a blank map...
LOG_ODDS_TOP = 1.0                # ...so its log-odds are shown, on a scale reaching at least this
RANDOM_ORDERS = 3                 # random deletion orders averaged as the chance baseline
STEPS = 16                        # points of a deletion curve (17 images each, whatever the grid)


@dataclass
class WhyPanel:
    target: gr.Dropdown
    heads: gr.CheckboxGroup
    relevance: gr.Image
    occlusion: gr.Image
    measure: gr.Button
    faithfulness: gr.Markdown
    ablation: gr.Markdown

    @property
    def outputs(self) -> list:
        return [self.relevance, self.occlusion, self.faithfulness, self.ablation]


def target_choices(p: Predictor) -> list[tuple[str, int]]:
    return [("the model's answer", ANSWER)] + [(n, i) for i, n in enumerate(p.class_names)]


def head_choices(p: Predictor) -> list[tuple[str, str]]:
    cfg = p.model.cfg
    return [(f"L{layer + 1} H{head + 1}", f"{layer},{head}")
            for layer in range(cfg.depth) for head in range(cfg.heads)]


def parse_heads(p: Predictor, values) -> list[tuple[int, int]]:
    """Checkbox values ("layer,head", 0-based) -> valid pairs for this model; anything else a
    client sends is dropped."""
    cfg, out = p.model.cfg, []
    for v in values if isinstance(values, (list, tuple)) else []:
        try:
            layer, head = (int(s) for s in str(v).split(","))
        except ValueError:
            continue
        if 0 <= layer < cfg.depth and 0 <= head < cfg.heads and (layer, head) not in out:
            out.append((layer, head))
    return out


def build(p: Predictor) -> WhyPanel:
    gr.Markdown("## What drove the answer\n" + caption(
        f"Which patches the answer for one class rests on: {term('relevance')} follows the "
        f"answer back through the layers, occlusion hides each patch and watches the "
        f"probability drop.",
        "Attention shows where [CLS] looked, whatever the class. These ask what the answer "
        "**for one class** rests on. *Relevance* (Chefer et al. 2021) weighs each layer's "
        "attention by how much it raises that class's score and follows it back to the patches. "
        "*Occlusion* blanks each patch in turn and measures how much that class's probability "
        "drops (its log-odds, when the model is so sure that the probability hardly moves). "
        "Pick another class to ask \"why this and not that?\" (why 7 and not 1; why ship and "
        "not airplane). The deletion test checks which map removes the answer fastest."))
    with gr.Row():
        target = gr.Dropdown(target_choices(p), value=ANSWER, label="Explain the class",
                             elem_id="target", scale=1)
        measure = gr.Button("Which map to believe for the answer? (deletion test)", elem_id="measure",
                            scale=1)
    faithfulness = gr.Markdown(elem_id="faithfulness")
    with gr.Row():
        relevance = gr.Image(label="Relevance for that class (relative: 0 to this map's max)",
                             interactive=False, elem_id="relevance", buttons=["download"],
                             height=400)
        occlusion = gr.Image(label="Occlusion: how that class's probability changes when a "
                                   "patch is blanked (its log-odds when the model is very sure: "
                                   "the picture's own title says which)",
                             interactive=False, elem_id="occlusion",
                             buttons=["download"], height=400)
    gr.Markdown("### Switch heads off\nTick heads to remove them and see whether the answer "
                "changes.")
    heads = gr.CheckboxGroup(head_choices(p), label="Heads switched off", elem_id="heads")
    ablation = gr.Markdown(elem_id="ablation")
    return WhyPanel(target, heads, relevance, occlusion, measure, faithfulness, ablation)


def _target(p: Predictor, probs: np.ndarray, target) -> int:
    """A target value from the page (ANSWER, a class index, or anything a client sends) -> a
    class index; anything but a valid class means the model's answer."""
    try:
        t = int(target)
    except (TypeError, ValueError, OverflowError):
        t = ANSWER
    return t if 0 <= t < len(p.class_names) else int(probs.argmax())


def faithfulness(p: Predictor, a: Analysis) -> str:
    """The deletion test of rollout, relevance and occlusion (and random orders) on this input,
    for the model's answer (Predictor.faithfulness), in words."""
    aucs = p.faithfulness(a, STEPS, RANDOM_ORDERS)
    name = md(p.class_names[int(a.probs.argmax())])
    ranked = " · ".join(f"{k} **{v:.2f}**" for k, v in sorted(aucs.items(), key=lambda kv: kv[1]))
    return (f"**Which map to believe for the answer {name}?** {verdict(aucs)} "
            + caption("", f"Blank the patches each map ranks first, one by one: the faster "
                          f"P({name}) falls, the more the map found what the answer rests on. "
                          f"Mean P({name}) along the way (lower = more faithful): {ranked}."))


TIE = 0.03          # deletion scores closer than this are not told apart (16 steps, one input)


def verdict(aucs: dict[str, float]) -> str:
    """The deletion test's result in one sentence: which map to believe, or that they tie."""
    maps = {k: v for k, v in aucs.items() if "random" not in k}
    chance = min((v for k, v in aucs.items() if "random" in k), default=None)
    order = sorted(maps, key=maps.get)
    best = order[0]
    if chance is not None and maps[best] > chance - TIE:
        return "No map does better than blanking patches at random here: believe none of them."
    tied = [k for k in order if maps[k] - maps[best] < TIE]
    if len(tied) > 1:
        names = ", ".join(tied[:-1]) + " and " + tied[-1]
        return (f"{names[0].upper() + names[1:]} found the patches the answer rests on about "
                f"equally well (better than chance): believe {'either' if len(tied) == 2 else 'any'}"
                f" of them.")
    return f"{best.capitalize()} found the patches the answer rests on best: believe it first."


def switch_heads(p: Predictor, a: Analysis, heads) -> str:
    """What the model reads with the ticked heads switched off, against every head on."""
    off = parse_heads(p, heads)
    if not off:
        return "Nothing switched off: tick heads above."
    probs, after = a.probs, p.ablate(a.image, off)
    b, c = int(probs.argmax()), int(after.argmax())
    n = f"{len(off)} head{'s' if len(off) > 1 else ''}"
    change = "the same answer" if c == b else "a **different** answer"
    return (f"With {n} off the model reads **{md(p.class_names[c])}** ({100 * after[c]:.1f} %) — "
            f"{change}; with every head on: **{md(p.class_names[b])}** ({100 * probs[b]:.1f} %).")


GLANCE = 192       # px: the small copy beside the answer, drawn at about the size it is shown


def render(p: Predictor, a: Analysis, target, heads) -> tuple:
    """(relevance picture, occlusion picture, faithfulness text, head-switch text, the relevance
    picture drawn small for beside the answer — its labels then readable, not shrunk) for an
    analysed input, a target class (ANSWER or a class index) and the heads switched off. The
    deletion test is not run here (it costs ~100 forward passes): its text invites the button.
    For the answer, occlusion shows how much blanking each patch lowers its probability; for any
    other class, how much it raises that class's: what keeps the input from being read as it."""
    image, best = a.image, int(a.probs.argmax())
    t = _target(p, a.probs, target)
    raw, answer = p.class_names[t], t == best        # pictures take the name as it is;
    name = md(raw)                                   # Markdown, escaped (vit/text.py)
    rel = p.relevance(image, t)
    rel_pic = single_map_picture(image, rel, f"relevance for {raw}")
    occ, title, top, note = occlusion_view(p, image, t, answer)
    occ_pic = single_map_picture(image, occ, title, top=top)
    text = (f"Explaining **{name}**"
            + ("" if answer else f" (the model's answer is {md(p.class_names[best])}: occlusion shows "
                                 f"which patches, blanked, would make it more of a {name})")
            + "." + note + " Press the button to test which map — rollout, relevance or "
              "occlusion — finds what the answer rests on.")
    glance = single_map_picture(image, rel, f"relevance for {raw}", size=GLANCE)
    return rel_pic, occ_pic, text, switch_heads(p, a, heads), glance


def occlusion_view(p: Predictor, image: np.ndarray, t: int,
                   answer: bool) -> tuple[np.ndarray, str, float, str]:
    """(map, title, colour-scale top, a sentence for the page or "") of how much blanking each
    patch lowers P(answer), or raises P(another class). An answer the model is so sure of that
    no patch, blanked, moves its probability by FLAT would get a blank map: the drop in its
    log-odds then shows which patches it rests on, and the sentence says so. Another class keeps
    its probability map even when blank: a vivid map of log-odds rising from P ~ 0 would
    exaggerate changes nobody could see in the answer."""
    name, b = p.class_names[t], p.occlusion_block
    squares = f"; {b}x{b} squares" if b > 1 else ""
    maps = p.occlusion_maps(image, t)
    moved = float(np.abs(maps["probability"]).max())
    if not answer or moved >= FLAT:
        shown = np.clip(maps["probability"] if answer else -maps["probability"], 0, None)
        peak = float(shown.max())
        return (shown, f"{'drop' if answer else 'rise'} in P({name}), max {peak:.2f}{squares}",
                max(peak, OCCLUSION_TOP), "")
    shown = np.clip(maps["log-odds"], 0, None)
    peak = float(shown.max())
    note = (f" Blanking any one patch moves P({md(name)}) by less than {FLAT:.2f} (at most "
            f"{moved:.3f}), so occlusion shows the drop in its log-odds instead (a drop of 1 "
            f"divides the odds by e ≈ 2.7).")
    return shown, f"drop in log-odds of {name}, max {peak:.1f}{squares}", max(peak, LOG_ODDS_TOP), note


def model_updates(p: Predictor) -> tuple[dict, dict]:
    """The target and head choices for a newly chosen model."""
    return (gr.update(choices=target_choices(p), value=ANSWER),
            gr.update(choices=head_choices(p), value=[]))
