"""One visitor's page as one record: the tab in view, each tab's input, the model, the chosen
patch, layer and head, the panels' settings and which panels are open. Every handler reads a
`Record` and returns a new one; `vit/ui/render.py` turns a record (and the analysis of its input
on screen) into every component's value. `Visit` is what the page's one `gr.State` holds."""
from __future__ import annotations

import threading
from dataclasses import dataclass, fields, replace
from types import NoneType

import numpy as np

KIND_OF = {"draw": "drawing", "upload": "upload", "test": "test"}      # a tab's kind of input
ANSWER = -1                      # the class explained: "the model's answer"


@dataclass(frozen=True)
class Shown:
    """An input as the page shows it. Gradio keeps a session's state for an hour after the
    visitor leaves, so it stays small: the model input (a few KB) and a compact source to lay out
    again for another model (a drawing's ink at most 160 px a side, or its colour picture at most
    224, an upload's path, a test image as is)."""
    kind: str                        # "drawing", "upload" or "test"
    source: object                   # np.ndarray (drawing ink / test image) or str (upload path)
    image: np.ndarray                # what the model saw, float32 in [0, 1]
    model: str                       # the model it was laid out for
    number: int = 0                  # a drawing's number from the canvas (0: not a drawing)
    example: str = ""                # the example it is, by name ("": the visitor's own)
    # A test image's origin: (its model, data set title, index, true class name); () otherwise.
    origin: tuple = ()


@dataclass(frozen=True)
class Refused:
    """An input the model could not read (`reason`, one plain line), or an empty canvas."""
    kind: str
    reason: str = ""
    source: object = None            # an upload's path, to read again for another model
    model: str = ""
    number: int = 0                  # a drawing's number from the canvas
    empty: bool = False              # an empty canvas: the headline says what to draw


@dataclass(frozen=True)
class Record:
    model: str
    tab: str = "draw"
    drawing: Shown | Refused | None = None        # each input tab's input, as last read
    upload: Shown | Refused | None = None
    test: Shown | Refused | None = None
    on_screen: str | None = None     # the kind of input the answer and pictures are for
    patch: int | None = None         # the clicked patch (0-based); None: the centre
    shared: bool = False             # one colour scale for all head maps (off: each its own)
    # Every value below is parsed at the boundary (vit/ui/boundary.py): none is kept as sent.
    layer: int | None = None         # the explorer's sliders (1-based; None: the last layer)
    head: int | None = None
    target: int = ANSWER             # "What drove it": the class explained
    heads_off: tuple = ()            # "What drove it": the heads switched off ("layer,head")
    why_open: bool = False           # "What drove the answer: every map, scored" (drawn only while open)
    views_open: bool = False         # "Every layer and head" (drawn only while open)
    mechanism_open: bool = False
    follow_cls: bool = False         # the step-by-step panel follows [CLS], not the patch
    lens_open: bool = False          # "Where the answer forms" (drawn only while open)
    learned_open: bool = False       # "How it learned" (drawn only while open)
    learned_at: int = 100            # its slider: how far into training, in %
    compare: str = ""                # the second model beside the page's ("": none)
    compare_open: bool = False       # its panel (drawn only while open)
    testset_open: bool = False
    test_ready: bool = True          # the model's test answers are in (its test set is here)
    test_listed: tuple = ()          # the test-set indices the gallery shows, in order
    # The visitor's last drawing for each other kind of model (digits, clothing, photos), set
    # aside when a switch put another kind's example on the canvas, and put back when they
    # return: at most one per set of classes (vit/ui/model_menu.py).
    set_aside: tuple = ()

    def input_of(self, tab: str):
        return getattr(self, KIND_OF[tab]) if tab in KIND_OF else None

    @property
    def shown(self) -> Shown | Refused | None:
        """The input the answer and the pictures are for (maybe another tab's: the tab in view
        has none yet)."""
        return getattr(self, self.on_screen) if self.on_screen else None

    def showing(self, item: Shown | Refused | None, kind: str, show: bool = True) -> Record:
        """This record with `item` as its `kind` input, and on screen if `show`: a new input
        on screen starts with no patch chosen (one chosen on the last input meant that one)."""
        changed = replace(self, **{kind: item})
        if not show:
            return changed
        new = item is not getattr(self, kind) or self.on_screen != kind
        return replace(changed, on_screen=kind, patch=None if new else self.patch)


def same(a, b) -> bool:
    """Whether two record values are the same: inputs by identity (a new one is new even when
    it looks alike), plain values (numbers, text, tuples of them) by value."""
    if a is b:
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    plain = (int, float, str, bool, NoneType)
    return isinstance(a, plain) and isinstance(b, plain) and type(a) is type(b) and a == b


def merge(base: Record, mine: Record, newest: Record) -> Record:
    """`newest` with the fields a handler changed from `base` (the record it started from) to
    `mine`: two events running side by side (the page has two workers and a lane for the slow
    panels) each land their own change, rather than the later one undoing the earlier's."""
    changed = {f.name: getattr(mine, f.name) for f in fields(Record)
               if not same(getattr(mine, f.name), getattr(base, f.name))}
    return replace(newest, **changed) if changed else newest


class Visit:
    """What the page's one `gr.State` holds for a visitor: the record, swapped under a lock,
    and the newest drawing number its canvas sent (checked by answers still in flight).
    `turn()` holds the lock while a handler lands its record and draws what changed, so that a
    visitor's updates leave in the order their records landed: an older record's picture sent
    after a newer one's would stay on the page."""

    def __init__(self, model: str):
        self.record = Record(model)
        self.drawn = 0
        self.upload_at: tuple = (None, None, 0.0)   # (file, model, time) of the last upload event
        # {view: the record fields its last drawing read} (vit/ui/render.py): which views a
        # change of the record touches. Bounded: one entry per view of the page.
        self.reads: dict[str, frozenset] = {}
        self._lock = threading.RLock()

    def __deepcopy__(self, memo) -> Visit:
        """Gradio copies the state's default for every new visitor: a fresh page."""
        return Visit(self.record.model)

    def turn(self) -> threading.RLock:
        return self._lock

    def commit(self, base: Record, mine: Record) -> Record:
        with self._lock:
            self.record = merge(base, mine, self.record)
            return self.record

    def note_drawing(self, number: int) -> bool:
        """Note drawing `number` as sent; whether the canvas has sent a newer one (a value with
        no number, 0, is never overtaken)."""
        if not number:
            return False
        with self._lock:
            newer = self.drawn > number
            self.drawn = max(self.drawn, number)
            return newer
