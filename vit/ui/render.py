"""The page as a pure function of its record: `render(r, given, names)` gives every named
component's value for a record (vit/ui/record.py) and what the page computed for its input on
screen before drawing (`Given`: the model, its analysis, the explanation maps, the second model's
analysis, the logit lens, the answer with heads switched off). Each view reads the record
through `Seen`, which notes every field it reads; `changed` then names the views whose last
reads include a field that moved — the components a change touches are derived from what each
view reads (as MobX or Svelte do), never listed by hand.
Every view belongs to a panel module registered in vit/ui/panels.py (its `VIEWS` and `OPEN`).
Nothing here touches Gradio's events or a server, nor computes a map."""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from vit.explain.ood import best_guess
from vit.inference import Analysis, Explained, Predictor
from vit.text import confidence, md
from vit.ui import compare_panel, lens_panel, mechanism_panel, pipeline, training_panel, views, why_panel
from vit.ui.panels import PANELS
from vit.ui.record import KIND_OF, Record, Refused, Shown, same
from vit.ui.words import unsure_words

# What the answer on screen is for, as a tab that is not its input's says it.
SHOWING = {"drawing": "your drawing", "upload": "your upload", "test": "the test image you picked"}
# The headline of a tab whose own input is not on screen (yet).
PROMPT = {"upload": "### Upload or paste a picture",
          "test": "### Click a test image to explain it"}
NO_TEST_SET = "### This model's test set is not on this machine"
NOTHING_YET = "Draw or upload something first."


FIELDS = frozenset(f.name for f in fields(Record))


@dataclass(frozen=True)
class Given:
    """What the page computed for the record's input on screen before drawing it: the model
    (`p`), its analysis (`a`, None when nothing is answered), the explanation maps (`explained`,
    None on the answer's lane, which never waits for them) and the second model's analysis
    (`other`: (model, analysis), a one-line reason it has none, or None), and whether this is
    the "why" lane's drawing (`why`: what the answer rests on is sent with it). What one panel alone
    draws (its logit lens, the walk through one head…) is computed when a view first reads it
    (`Seen`), once per drawing, in `computed`."""
    p: Predictor
    a: Analysis | None = None
    explained: Explained | None = None
    other: tuple | str | None = None
    why: bool = False
    computed: dict = field(default_factory=dict, compare=False, repr=False)


class Seen:
    """Record `r` as one view reads it: each record field it reads is added to `reads`, and so
    are the fields each computed value follows (`a`: the input on screen and the model). A
    property or method of Record runs with this as `self`, so its reads are noted too. A value
    one panel computes from the record (`lens`, `ablated`, `walk`, `frames`) is computed here,
    from what it reads, the first time a view reads it: nothing lists those reads by hand."""

    def __init__(self, r: Record, given: Given):
        self._r, self._given, self.reads = r, given, set()

    def __getattr__(self, name):
        if name in FIELDS:
            self.reads.add(name)
            return getattr(self._r, name)
        attr = getattr(Record, name)
        if isinstance(attr, property):
            return attr.fget(self)
        return attr.__get__(self)                  # a method, bound to this view of the record

    def _once(self, key: str, compute):
        """`compute()` (a forward pass or more, kept per input by the Predictor) once per
        drawing of the page; None while nothing is answered. Its reads are noted by the caller,
        which reads the fields it passes before calling this."""
        if self._given.a is None:
            return None
        if key not in self._given.computed:
            self._given.computed[key] = compute()
        return self._given.computed[key]

    @property
    def p(self) -> Predictor:
        self.reads.add("model")
        return self._given.p

    @property
    def a(self) -> Analysis | None:
        self.reads.add("model")
        _ = self.shown
        return self._given.a

    @property
    def explained(self) -> Explained | None:
        _ = self.a, self.target
        return self._given.explained

    @property
    def why_lane(self) -> bool:
        return self._given.why

    @property
    def lens(self):
        """Its logit lens (vit/explain/logit_lens.py)."""
        p, a = self.p, self.a
        return self._once("lens", lambda: p.lens(a.image))

    @property
    def ablated(self) -> np.ndarray | None:
        """Its probabilities with the ticked heads switched off (None: none ticked)."""
        p, a, ticked = self.p, self.a, self.heads_off

        def ablate():
            off = why_panel.parse_heads(p, ticked)
            return p.ablate(a.image, off) if off else None
        return self._once("ablated", ablate)

    @property
    def walk(self):
        """One token's trip through one head (mechanism_panel)."""
        p, a, chosen = self.p, self.a, (self.layer, self.head, self.patch, self.follow_cls)
        return self._once("walk", lambda: mechanism_panel.walk_of(p, a, *chosen))

    @property
    def frames(self):
        """It through the training snapshots (training_panel)."""
        p, a, patch = self.p, self.a, self.patch
        return self._once("frames", lambda: training_panel.frames_of(p, a, patch))

    @property
    def other(self):
        _ = self.a, self.compare
        return self._given.other


def changed(reads: dict, before: Record, after: Record, names) -> tuple[str, ...]:
    """The views among `names` whose last drawing (`reads`: {view: the fields it read}) read a
    field that differs between the two records, and those never drawn."""
    moved = {f for f in FIELDS if not same(getattr(before, f), getattr(after, f))}
    return tuple(n for n in names if n not in reads or reads[n] & moved)


def answered(r: Record) -> bool:
    """Whether the input on screen has been analysed by the record's model (after a model switch
    its re-analysis is on its way, and until then the views stay as they are)."""
    return isinstance(r.shown, Shown) and r.shown.model == r.model


def headline(r: Record, p: Predictor, a: Analysis | None) -> str | None:
    """The line above the answer: the answer of the tab in view's input, or what that tab asks
    for — and then what the answer and pictures below still belong to. None (left as it is):
    the input's answer by the record's model is on its way."""
    shown, own = r.shown, r.input_of(r.tab)
    if shown is not None and (r.tab == "draw" or own is shown):
        if isinstance(shown, Shown) and (shown.model != r.model or a is None):
            return None
        return said(p, shown, a)
    if r.tab == "draw" or r.tab not in KIND_OF:
        return rest_message(p)
    prompt = PROMPT[r.tab] if r.tab != "test" or r.test_ready else NO_TEST_SET
    # (an input that could not be read shows nothing below: a seventh trial read "still for your
    # upload" over an empty strip, after a file that was no picture)
    if shown is None or isinstance(shown, Refused):
        return prompt
    # (an example is nobody's drawing: an eighth trial read "still for your drawing" of the 7
    # the page had put on the canvas)
    showing = f"the example {md(shown.example)}" if shown.example else SHOWING[shown.kind]
    return f"{prompt}\nUntil then, the answer and pictures below are still for {showing}."


def said(p: Predictor, item: Shown | Refused, a: Analysis | None) -> str:
    """The headline of an input as model `p` read it (`a`: its analysis): the answer — an
    example's or a test image's in their own words — or why it could not be read."""
    if isinstance(item, Refused):
        return rest_message(p) if item.empty else f"### ⚠️ {item.reason}"
    if item.origin and item.origin[0] == item.model:
        return test_headline(p, a, item.origin)
    if item.example:
        return example_headline(p, a, item.example)
    if (item.kind == "drawing" and not a.is_class and a.verdict.kind != "digit"
            and p.config.style.name == "objects"):
        text = fill_headline(p, a)
    else:
        text = answer_headline(p, a)
    if item.origin:           # another model's test image keeps saying where it comes from
        _, title, i, true = item.origin
        text += f"\nThis is {md(title)} test image #{i}, true class **{md(true)}**."
    return text


def fill_headline(p: Predictor, a: Analysis) -> str:
    """A drawing a model of filled shapes (clothing) refuses: what to do, in the headline's two
    lines (a trial: an outline refused, and nothing on screen said the model reads filled shapes)."""
    best, at = best_guess(p.class_names, a.probs)
    return (f"### ⊘ {p.not_label.capitalize()}\nNot like any {p.config.noun} it learnt "
            f"(best guess **{md(best)}** at {at}). An "
            f"outline? "
            f"Tap inside it with **Fill**.")


def test_headline(p: Predictor, a: Analysis, origin: tuple) -> str:
    """A test image of the model's own test set: its answer, right or wrong. One the page refuses
    is said so first, as the strip's answer says it (a sixth trial read "read as 2 — ✓ right"
    over a strip saying "Not a digit"); the test set's score, which counts only the best guess,
    comes second."""
    _, _, i, true = origin
    best = int(a.probs.argmax())
    right = p.class_names[best] == true
    verdict = "✓ right" if right else "✗ wrong"
    guess = f"**{md(p.class_names[best])}** ({confidence(a.probs[best])})"
    if a.is_class:
        return f"### Test image #{i} (true class **{md(true)}**): read as {guess} — {verdict}"
    return (f"### Test image #{i} (true class **{md(true)}**): {p.not_label} — best guess {guess}\n"
            f"{md(a.verdict.reason, 400)} The test set's score counts only the best guess: "
            f"{verdict} there.")


def example_headline(p: Predictor, a: Analysis, example: str) -> str:
    """An example put on the canvas: what it is, what the model read, and then what to do next
    (a digit model) or which classes the model knows (any other)."""
    made = "a picture of a" if p.config.style.colour else "a drawn"
    read = md(top_label(p.label(a.probs, a.verdict)))
    head = f"### Example: {made} {md(example)} — read as **{read}**\n"
    if p.config.style.name == "digits":
        return (head + f"Draw over it, clear it and draw your own {p.config.noun}, or pick another "
                       "example below the canvas.")
    # What the model knows, where its noun does not say it all ("a digit" does): alone, so that
    # the line is one line down to 1024 px (as two, the strip moved down 21 px and back up at the
    # next answer; what to draw is said above the canvas). A word joiner after each hyphen:
    # "T-shirt/top" broke as "T-" / "shirt".
    knows = (", ".join(md(n, 40).replace("-", "-\u2060") for n in p.class_names[:12])
             + (", …" if len(p.class_names) > 12 else ""))
    return head + f"It knows: {knows}."


def top_label(label: dict) -> str:
    """The top of a Label value (Predictor.label): a verdict such as "not a digit", or the most
    probable class."""
    if isinstance(label.get("confidences"), list) and "label" in label:
        return str(label["label"])
    return max(label, key=label.get)


def rest_message(p: Predictor) -> str:
    """The headline over an empty canvas: what to draw — or, for a photo model (a black pen
    draws no photo), where the pictures are."""
    if p.config.style.colour:
        return f"### Pick a picture below the canvas, or upload a {p.config.noun}"
    return f"### ✏️ Draw a {p.config.noun} in the box"


def answer_headline(p: Predictor, a: Analysis) -> str:
    """What the model reads, or why it is not one of its classes (one sentence)."""
    probs = a.probs
    order = np.argsort(probs)[::-1]
    best, second = order[0], order[min(1, len(order) - 1)]
    if not a.is_class:
        text = f"### ⊘ {p.not_label.capitalize()}\n{md(a.verdict.reason, 400)}"
        if a.verdict.kind != "unsure":         # the sentence says why; this, what the model saw
            guess, at = best_guess(p.class_names, probs)
            text += f" (On its own the model would read it as **{md(guess)}**, {at}.)"
        return text
    name, other = md(p.class_names[best]), md(p.class_names[second])
    if probs[best] < pipeline.UNSURE and second != best:
        # As a person says it: "probably a 7; maybe a 2", then the numbers.
        return (f"### {unsure_words(f'**{name}**', f'**{other}**')}\n"
                f"The model reads this as **{name}** ({confidence(probs[best])}); "
                f"**{other}** gets {confidence(probs[second])}.")
    return f"### The model reads this as **{name}** ({confidence(probs[best])})"


def render(r: Record, given: Given, names, reads: dict | None = None) -> dict:
    """{component name: value} for `names`. A view of an input not yet answered by the record's
    model is left out (left as it is on the page), and so is a panel's while it is closed (its
    OPEN field). `reads`, when given, gets {view: the record fields its drawing read}."""
    out, wanted = {}, set(names)
    for group, show, open_field in GROUPS:
        asked = wanted.intersection(group)
        if not asked:
            continue
        v = Seen(r, given)
        values = _draw(v, group, show, open_field)
        if values is not None:
            out.update((n, x) for n, x in zip(group, values) if n in asked)
        if reads is not None:
            reads.update(dict.fromkeys(asked, frozenset(v.reads)))
    return out


def _draw(v: Seen, group: tuple, show, open_field) -> tuple | None:
    """One group of views drawn from `v`, or None to leave them as they are."""
    if show is _status or show is _answered:
        return show(v)
    if open_field is not None and not getattr(v, open_field):
        return None
    live = answered(v) and v.a is not None
    if not live:
        if isinstance(v.shown, Shown):             # its model's answer is on its way
            return None
        return tuple(NOTHING_YET if n in TEXTS else "" if n in BLANK_TEXTS else None for n in group)
    return show(v)


def _status(v: Seen) -> tuple | None:
    text = headline(v, v.p, v.a)
    return None if text is None else (text,)


def _answered(v: Seen) -> tuple:
    return (str(_drawing(v) or ""),)


def _drawing(v: Seen) -> int:
    """The number of the canvas's last drawing answered (0: none)."""
    d = v.drawing
    return d.number if d is not None and d.number else 0


# The first screen's own views; the panels' come from their modules (vit/ui/panels.py).
FIRST = {
    ("status",): _status,
    ("answered",): _answered,
    ("label",): lambda v: (v.p.label(v.a.probs, v.a.verdict),),
    ("pipeline",): lambda v: (pipeline.strip_value(v.p, v.a, v.layer, v.head, v.patch,
                                                   e=v.explained, model=v.model,
                                                   drawing=_drawing(v), why=v.why_lane),),
    why_panel.BESIDE: why_panel.glance,
}
# (views, how they are drawn from a Seen record, the record field that says their panel is open)
GROUPS = tuple((group, show, None) for group, show in FIRST.items()) + tuple(
    (group, show, panel.OPEN) for panel in PANELS for group, show in panel.VIEWS.items())
EVERY = tuple(n for group, _, _ in GROUPS for n in group)
# A view with nothing to draw yet: these say so in words, these stay empty, pictures are blank.
TEXTS = ("walk_text", "lens_text", "learned_text", "compare_text")
BLANK_TEXTS = ("faithfulness", "ablation", "glance_text")

# The views by panel, for the events that send them.
PICTURES, WHY, WALK = views.PICTURES, why_panel.WHY, mechanism_panel.WALK
LENS, LEARNED, COMPARE = lens_panel.LENS, training_panel.LEARNED, compare_panel.COMPARE
ANSWER = ("status", "label", "answered", "pipeline")
# What the "why" lane sends after each analysis: its panel, and the strip again, which then
# carries the lead map the lane has just computed (pipeline.strip_value).
EXPLAINED = WHY + ("pipeline",)
# The panels drawn only while open, after each analysis (the "why" lane sends its own).
FOLDED_VIEWS = tuple(n for group, _, open_field in GROUPS if open_field for n in group
                     if n not in WHY)
# All that event sends (Page.why), and the headline again: a new visitor's headline once stayed
# at "Draw a digit in the box" beside the example's strip and maps (the Draw tab's select at
# load landing after the example: draw_tab._overtaken). Whatever else may lose it, the lane that
# draws the maps also says the headline of the record it draws, so the two always agree (an
# unchanged headline is not redrawn, nor announced again).
AFTER_ANALYSIS = EXPLAINED + FOLDED_VIEWS + ("status",)
NO_SECOND = compare_panel.NO_SECOND
# What a handler that analyses an input sends on its own lane; the rest follows on the "why" lane.
ANALYSIS = ANSWER + PICTURES
# What a choice on the page may send on its own lane: every view it touched but the "why" maps,
# which wait for their own lane (a target change is one: it sends EVERY there).
QUICK = tuple(n for n in EVERY if n not in why_panel.MAPS)
