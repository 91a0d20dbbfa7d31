"""The "What drove the answer" panel: class-specific relevance and occlusion side by side, how
faithful each map is on this input (deletion curves), and heads switched off. `build()` makes the
components; `render()` is a pure function from an analysed input to what they show."""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import gradio as gr
import numpy as np

from vit.explain.faithful import AGREE, LEADS, agreement, lead_map
from vit.explain.scoreboard import METHODS, RANDOM
from vit.inference import Analysis, Explained, Predictor
from vit.pictures.attention_maps import single_map_picture, uniform_level
from vit.pictures.sanity import ATTENTION, sanity_picture
from vit.text import confidence, correlation, md, percent
from vit.ui.boundary import HeadsOff, Target
from vit.ui.record import ANSWER, Shown
from vit.ui.words import alt, caption, term

OCCLUSION_TOP = 0.2               # an occlusion map's scale reaches at least this drop
FLAT = 0.05                       # no patch moving P(answer) by this much: a nearly dark map, said
RANDOM_ORDERS = 3                 # random deletion orders averaged as the chance baseline
STEPS = 16                        # points of a deletion curve (17 images each, whatever the grid)


@dataclass
class WhyPanel:
    accordion: gr.Accordion | None
    target: gr.Dropdown
    heads: gr.CheckboxGroup
    relevance: gr.Image
    occlusion: gr.Image
    measure: gr.Button
    faithfulness: gr.Markdown
    ablation: gr.Markdown
    sanity: gr.Image


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
        "drops, on one scale for every input (0 to at least 20 %). "
        "Pick another class to ask \"why this and not that?\" (why 7 and not 1; why ship and "
        "not airplane). The deletion test checks which map removes the answer fastest."))
    with gr.Row():
        target = gr.Dropdown(target_choices(p), value=ANSWER, label="Explain the class",
                             elem_id="target", scale=1)
        measure = gr.Button("Which map to believe for the answer? (scoreboard)", elem_id="measure",
                            scale=1)
    faithfulness = gr.Markdown(elem_id="faithfulness")
    sanity = gr.Image(label="Model randomisation: each map on the trained model (top) and with its "
                            "later layers re-initialised (bottom); a map that stays alike does not "
                            "show what those layers learned",
                      interactive=False,
                          alt_text=alt("sanity"), elem_id="sanity", buttons=["download", "fullscreen"])
    with gr.Row():
        relevance = gr.Image(label="Relevance for that class (relative: 0 to this map's max)",
                             interactive=False,
                                 alt_text=alt("relevance"), elem_id="relevance", buttons=["download"],
                             height=400)
        occlusion = gr.Image(label="Occlusion: how much that class's probability changes when "
                                   "a patch is blanked (0 to at least 20 %, for every input)",
                             interactive=False, alt_text=alt("occlusion"), elem_id="occlusion",
                             buttons=["download"], height=400)
    gr.Markdown("### Switch heads off\nTick heads to remove them and see whether the answer "
                "changes.")
    heads = gr.CheckboxGroup(head_choices(p), label="Heads switched off", elem_id="heads")
    ablation = gr.Markdown(elem_id="ablation")
    return WhyPanel(None, target, heads, relevance, occlusion, measure, faithfulness, ablation, sanity)


def target_class(p: Predictor, probs: np.ndarray, target) -> int:
    """A target value from the page (ANSWER, a class index, or anything a client sends) -> a
    class index; anything but a valid class means the model's answer."""
    try:
        t = int(target)
    except (TypeError, ValueError, OverflowError):
        t = ANSWER
    return t if 0 <= t < len(p.class_names) else int(probs.argmax())


def faithfulness(p: Predictor, a: Analysis) -> tuple[str, np.ndarray]:
    """The scoreboard of rollout, relevance, occlusion and raw attention on this input, for the
    model's answer (Predictor.scoreboard), in words and a table; and the randomisation check's
    picture."""
    board = p.scoreboard(a, STEPS, RANDOM_ORDERS)
    name = md(p.class_names[board.target])
    depth = p.model.cfg.depth
    rows = "\n".join(
        f"| {k} | {percent(board.deletion[k])} | {percent(board.insertion[k])} | "
        + (f"{correlation(board.correlation[k])}{' ⚠️' if board.correlation[k] >= SAME else ''} |"
           if k in board.correlation else "— |")
        for k in (*METHODS, RANDOM))
    table = (f"| map | {term('deletion', 'deletion')} ↓ | {term('insertion', 'insertion')} ↑ | "
             f"{term('rank', 'rank corr.')} after re-initialising layers "
             f"{board.randomised_from}–{depth} ↓ |\n|---|---|---|---|\n{rows}")
    same = [k for k in METHODS if board.correlation[k] >= SAME]
    said, named = verdict(board.deletion, same)
    others = [k for k in same if k not in named]         # flagged maps the verdict did not name
    also = " also" if set(named) & set(same) else ""       # the verdict named one flagged map
    sanity = (f" {_listed(others, True)}{also} hardly changed when the later layers were "
              f"replaced by random ones (⚠️): {'it shows' if len(others) == 1 else 'they show'} the "
              f"picture's layout more than what those layers learned." if others else
              "" if same else
              " Every map changed when the later layers were replaced by random ones: each "
              "depends on what the model learned.")
    text = (f"**Which map to believe for the answer {name}?** {said}{sanity} "
            + caption("", f"**Deletion** blanks the patches each map ranks first, one by one, "
                          f"and takes the mean P({name}) along the way: lower = the map found "
                          f"what the answer rests on. **Insertion** starts from a blank picture "
                          f"and reveals them in that order: higher = better. Random orders are "
                          f"the line to beat (Petsiuk et al. 2018). **Rank correlation**: "
                          f"Spearman's ρ (rho, as the pictures write it) between each map and "
                          f"the same map on a copy of the "
                          f"model whose layers {board.randomised_from}–{depth}, final norm and "
                          f"head were re-initialised (Adebayo et al. 2018); near 1 (⚠️, "
                          f"≥ {SAME}) means the map hardly depends on what those layers learned. "
                          f"Raw attention is the last layer's [CLS] attention, averaged over "
                          f"heads. One input, {STEPS} steps: scores closer than "
                          f"{100 * TIE:.0f} percentage points are not told apart.")
            + "\n\n" + table)
    return text, sanity_picture(a.image, board, depth)


SAME = 0.7          # a rank correlation this high after randomising: the map barely changed


TIE = 0.03          # deletion scores closer than this are not told apart (16 steps, one input)


def _listed(names, capital: bool = False) -> str:
    text = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)
    return text[:1].upper() + text[1:] if capital else text


def verdict(aucs: dict[str, float], same=()) -> tuple[str, list[str]]:
    """Which map to believe, in one or two sentences, from the deletion test (`aucs`) and the
    randomisation check (`same`: the maps that hardly changed with random later layers, which
    show the picture more than the model); and the maps it names. A map that wins the first
    and fails the second is never simply "believed": the page said both in one breath."""
    maps = {k: v for k, v in aucs.items() if "random" not in k}
    chance = min((v for k, v in aucs.items() if "random" in k), default=None)
    order = sorted(maps, key=maps.get)
    best = order[0]
    if chance is not None and maps[best] > chance - TIE:
        return "No map does better than blanking patches at random here: believe none of them.", []
    tied = [k for k in order if maps[k] - maps[best] < TIE]
    passed = [k for k in tied if k not in same]
    failed = [k for k in tied if k in same]
    found = (f"{_listed(tied, True)} found the patches the answer rests on about equally well "
             f"(better than chance)" if len(tied) > 1 else
             f"{best.capitalize()} found the patches the answer rests on best")
    if not failed:
        return (found + (f": believe {'either' if len(tied) == 2 else 'any'} of them."
                         if len(tied) > 1 else ": believe it first."), tied)
    who = ("it" if len(failed) == 1 else "they") if failed == tied else _listed(failed)
    layout = (f"{who} hardly changed when the later layers were replaced by random ones (⚠️), "
              f"so {'it shows' if len(failed) == 1 else 'they show'} the picture's layout more "
              f"than what the model learned")
    if passed:
        return f"{found}, but {layout}: believe {_listed(passed)}.", tied
    return (f"{found}, but {layout}: read {'it' if len(failed) == 1 else 'them'} as where the "
            f"answer may rest, not as why.", tied)


def switch_heads(p: Predictor, a: Analysis, heads, after: np.ndarray | None) -> str:
    """What the model reads with the ticked heads switched off (`after`: its probabilities
    then, `Predictor.ablate`, computed before), against every head on."""
    off = parse_heads(p, heads)
    if not off or after is None:
        return "Nothing switched off: tick heads above."
    probs = a.probs
    b, c = int(probs.argmax()), int(after.argmax())
    n = f"{len(off)} head{'s' if len(off) > 1 else ''}"
    change = "the same answer" if c == b else "a **different** answer"
    return (f"With {n} off the model reads **{md(p.class_names[c])}** ({confidence(after[c])}) — "
            f"{change}; with every head on: **{md(p.class_names[b])}** ({confidence(probs[b])}).")


GLANCE = 192       # px: the small copy beside the answer, drawn at about the size it is shown


def render(p: Predictor, a: Analysis, e: Explained) -> tuple:
    """The MAPS views: (relevance picture, occlusion picture, faithfulness text, the lead map
    drawn small for beside the answer — its labels then readable, not shrunk — no randomisation
    picture (the button makes it), and what the lead map says) for an analysed input and its
    maps computed before (`Predictor.explain`: for the class explained and the answer). The
    deletion test is not run here (it costs ~100 forward passes): its text invites the button.
    For the answer, occlusion shows how much blanking each patch lowers its probability; for any
    other class, how much it raises that class's: what keeps the input from being read as it."""
    image, best, t = a.image, e.answer, e.target
    raw, answer = p.class_names[t], t == best        # pictures take the name as it is;
    name = md(raw)                                   # Markdown, escaped (vit/text.py)
    rel_pic = single_map_picture(image, e.relevance, f"relevance for {raw}")
    occ, title, top, note = occlusion_view(p, e.occlusion, t, answer)
    occ_pic = single_map_picture(image, occ, title, top=top, unit="probability")
    text = (f"Explaining **{name}**"
            + ("" if answer else f" (the model's answer is {md(p.class_names[best])}: occlusion shows "
                                 f"which patches, blanked, would make it more of a {name})")
            + "." + note + " Press the button to score which map — rollout, relevance, "
              "occlusion or raw attention — finds what the answer rests on, and which depends on "
              "what the model learned.")
    glance, said = lead_view(p, a, e)
    return rel_pic, occ_pic, text, glance, None, said


def lead_view(p: Predictor, a: Analysis, e: Explained) -> tuple:
    """The small picture beside the answer — the map measured most faithful for this model
    (config.json's faithfulness) for the model's answer, whatever class the panel below explains,
    drawn small so that its labels stay readable — and what it says, in words: which map it is,
    how it was measured, and whether the other maps agree on this input (so no one patch is named
    as the cause when they do not). Its maps are the ones the strip then shows (cached)."""
    lead, t, maps = lead_map(p.config), e.answer, e.maps
    raw = p.class_names[t]
    if lead == "occlusion":
        shown, title, top, note = occlusion_view(p, e.answer_occlusion, t, True)
        pic = single_map_picture(a.image, shown, title, size=GLANCE, top=top, unit="probability")
    else:       # an attention map on the scale the page draws attention on everywhere
        pic = single_map_picture(a.image, maps[lead], f"{lead} for {raw}", size=GLANCE,
                                 uniform=uniform_level(p.grid) if lead in ATTENTION else None)
    rho = agreement(lead, maps)
    deletion = p.config.faithfulness.get("deletion", {})
    # (on average over many inputs: this input's own scoreboard may rank the maps otherwise, and
    # a trial read the two as at odds when only the folded words said so)
    measured = (f"on average the map that removed the answer fastest when this model was "
                f"tested ({term('deletion', 'deletion test')}; one input may differ)"
                if deletion else "this model was never tested for which map to trust")
    differ = [k for k, r in rho.items() if r < AGREE]
    if not differ:
        agree = "Here the other maps rank the patches alike."
    else:
        agree = (f"**Here {_listed([term(k) for k in differ])} "
                 f"point{'s' if len(differ) == 1 else ''} at other patches**: read the bright "
                 f"area as where the answer may rest, not as one cause.")
    how = ("Deletion test on held-out images: blank the patches a map ranks first and watch "
           "the answer fade; mean probability left, lower is better: "
           + ", ".join(f"{k} {percent(deletion[k])}" for k in LEADS if k in deletion) + ". "
           "(Averaged over many images when the model was made, so the scoreboard below, which "
           "tests this one input, gives other figures.) "
           if deletion else "") + (f"{term('rank', 'Rank correlation')} with it here: "
                                   + ", ".join(f"{k} {correlation(r)}" for k, r in rho.items()) + ".")
    # Words a person can check by erasing: a sure answer that no single patch moves much rests
    # on many (a trial erased the "most" patch and the answer stayed at 99.5 %).
    many = ""
    if lead == "occlusion" and slight(e.answer_occlusion):
        # (in % as the map's bar writes the same drop: a trial read "percentage points" here
        # beside a bar of "%" as two units)
        many = (f" **No single patch matters much here**: hiding any one changes P({md(raw)}) by "
                f"at most {percent(moved(e.answer_occlusion))} (the map's bar), so erasing it would "
                f"not change the answer, and the map is nearly dark: it rests on many patches together.")
    outside = "" if a.is_class else (
        f"**{md(p.not_label[:1].upper() + p.not_label[1:])}**: below is only what its best "
        f"guess, {md(raw)}, would rest on. ")
    # (blank lines round its inside: Markdown in an HTML block is read only after one, and the
    # glossary link there showed as "[Rank correlation](#term-rank)")
    text = (f"{outside}**What the answer rests on, by {term(lead)}**: {measured}.{many} {agree}\n\n"
            f"<details><summary>How this was measured</summary>\n\n{how}\n\n</details>")
    return pic, text


def moved(maps: dict[str, np.ndarray]) -> float:
    """The most that blanking any one patch moves the class's probability (occlusion `maps`)."""
    return float(np.abs(maps["probability"]).max())


def slight(maps: dict[str, np.ndarray]) -> bool:
    """Whether no single patch matters much (occlusion `maps`): erasing the "most" one leaves the
    answer. The map is then nearly dark, and the words beside it and the strip say so."""
    return moved(maps) < FLAT


def occlusion_view(p: Predictor, maps: dict[str, np.ndarray], t: int,
                   answer: bool) -> tuple[np.ndarray, str, float, str]:
    """(map, title, colour-scale top, a sentence for the page or "") of how much blanking each
    patch lowers P(answer), or raises P(another class), from class `t`'s occlusion `maps`
    (`Predictor.occlusion_maps`): always in percentage points of the probability, on a scale
    reaching at least OCCLUSION_TOP, so that two inputs' maps compare. An answer so sure that no
    patch moves it by FLAT gets a nearly dark map, and the sentence says why. (It once switched
    to the drop in log-odds there, whose vivid map a teacher could not set beside another
    input's; the ranking is the same either way, log-odds being monotone in P.)"""
    name, b = p.class_names[t], p.occlusion_block
    squares = f"; {b}x{b} squares" if b > 1 else ""
    shown = np.clip(maps["probability"] if answer else -maps["probability"], 0, None)
    note = "" if not answer or not slight(maps) else (
        f" Blanking any one patch moves P({md(name)}) by less than {percent(FLAT)} (at most "
        f"{percent(moved(maps))}, the map's bar), so the map is nearly dark: no single patch "
        f"matters much.")
    return (shown, f"{'drop' if answer else 'rise'} in P({name}){squares}",
            max(float(shown.max()), OCCLUSION_TOP), note)


def model_updates(p: Predictor) -> tuple[dict, dict]:
    """The target and head choices for a newly chosen model."""
    return (gr.update(choices=target_choices(p), value=ANSWER),
            gr.update(choices=head_choices(p), value=[]))


# Drawn from a record seen through vit/ui/render.py's Seen (vit/ui/panels.py): the maps from
# what the "why" lane computed before (`Seen.explained`); none yet, the views stay as they are.
WHY = ("relevance", "occlusion", "faithfulness", "ablation", "glance", "sanity", "glance_text")
MAPS = tuple(n for n in WHY if n != "ablation")      # the views drawn from the maps
BESIDE = ("glance", "glance_text")     # the lead map beside the answer: the first screen's
SCORED = ("relevance", "occlusion", "faithfulness", "sanity")
# Drawn only while open: each picture costs ~20 ms of the server's CPU to send (PNG, cache
# file), and most visitors never open the panel.
OPEN = "why_open"
VIEWS = {
    SCORED: lambda v: None if v.explained is None else _scored(render(v.p, v.a, v.explained)),
    ("ablation",): lambda v: (switch_heads(v.p, v.a, v.heads_off, v.ablated),),
}


def _scored(views: tuple) -> tuple:
    """render()'s views (MAPS order) -> SCORED's."""
    return tuple(views[MAPS.index(n)] for n in SCORED)


def glance(v) -> tuple | None:
    """The first screen's lead map and its words, from the maps computed before."""
    return None if v.explained is None else lead_view(v.p, v.a, v.explained)


def place(ctx) -> WhyPanel:
    with gr.Accordion("What drove the answer: every map, scored", open=False,
                      elem_id="why") as accordion:
        return replace(build(ctx.p), accordion=accordion)


def components(c: WhyPanel) -> dict:
    """Its views and controls; the lead map beside the answer ("glance") is on the first screen."""
    return {"relevance": c.relevance, "occlusion": c.occlusion, "faithfulness": c.faithfulness,
            "ablation": c.ablation, "target": c.target, "heads_off": c.heads, "sanity": c.sanity}


def choose_target(page, visit, target: Target) -> dict:
    """The class explained: the maps are computed for it, so on the "why" lane."""
    return page.choose(visit, page.EVERY, target=target)


def heads_switched(page, visit, heads: HeadsOff) -> dict:
    """The heads ticked to switch off."""
    return page.choose(visit, heads_off=heads)


def measure(page, visit) -> dict:
    """The scoreboard of the four maps on the input on screen, and the randomisation check."""
    from vit.preprocessing.decode import PreprocessError
    r = visit.record
    if not isinstance(r.shown, Shown):
        return {"faithfulness": "Draw or upload something first.", "sanity": None}
    try:
        text, picture = faithfulness(*page.analysis(r.shown, r.model))
        return {"faithfulness": text, "sanity": picture}
    except PreprocessError as e:               # an upload's file gone from the cache
        return {"faithfulness": f"⚠️ {e}", "sanity": None}


def wire(w, c: WhyPanel) -> None:
    page = w.page
    # Opened, it is drawn from the maps the "why" lane keeps: on that lane.
    w.opens(OPEN, c.accordion, w.EVERY, **w.LATER)
    w.on(c.target.change, functools.partial(choose_target, page), [c.target], w.EVERY,
         **w.LATER)                                                    # (always_last)
    w.on(c.heads.change, functools.partial(heads_switched, page), [c.heads], w.QUICK,
         trigger_mode="always_last", **w.QUIET)
    w.on(c.measure.click, functools.partial(measure, page), [], ("faithfulness", "sanity"),
         api_visibility="private")
