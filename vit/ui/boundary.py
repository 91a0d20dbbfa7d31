"""Every value a client sends, parsed once into its type and range before a handler sees it.

A raw client may send anything in any parameter of any event, private ones too (a 1.9 MB list
of empty objects as a layer number, a file object as a click). Nothing of that may reach the
visitor's record, a log or an error message as sent: a record that keeps "the layer as a client
sent it" grew by ~50 MB a request. So every handler parameter a client fills is annotated with one
of the types below (`value: Drawing`, `layer: Layer`), each carrying its `Parser`, and
`parsed(fn, models)` wraps the handler: each such value goes through its parser — a slider is an
int in range, a choice one of the choices, a flag a bool, a drawing a small dict of the canvas's
own keys, a click an index — and what does not parse is one line to the client (`gr.Error`) and
one line in the log, never the value. A parameter a client fills without such a type is refused
when the page is built.

The ranges here are the page's widest (any model's); a handler still fits a layer or a class to
the model in use (vit/ui/views.py `clamp`, why_panel.target_class), because a model switch can
land between a slider's move and its event.
"""
from __future__ import annotations

import functools
import inspect
import logging
import math
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Annotated

import gradio as gr

from vit.checkpoint import MAX_DEPTH
from vit.testset import KINDS
from vit.ui.canvas import MAX_CHARS, PREFIX

log = logging.getLogger("vit.ui")

MAX_SLIDER = 1024            # layers and heads: MAX_DEPTH (256) and any width a model may have
MAX_CLASSES = 100_000
MAX_HEADS_OFF = MAX_DEPTH * 64       # "layer,head" ticks: every head of the largest model here
MAX_PATH_CHARS = 4096
MAX_EXAMPLE_CHARS = 200
MAX_INDEX = 10 ** 7          # a click's coordinates or a gallery's position: far beyond any picture
HEAD = re.compile(r"\d{1,4},\d{1,4}")



def user_error(message: str) -> gr.Error:
    """An error for the person (or client) on the other end: shown to them, not logged as a crash."""
    return gr.Error(message, print_exception=False)

class BadValue(ValueError):
    """A value a client sent that does not parse: the message says what was expected (one line,
    never the value)."""


MAX_NUMBER = 1e15            # JSON carries integers of any size: 10**400 is no float


def _number(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or \
            (isinstance(v, int) and abs(v) > MAX_NUMBER) or not math.isfinite(v):
        raise BadValue(f"{what} must be a number.")
    return float(v)


def flag(v, what: str = "This switch") -> bool:
    if v is None:
        return False
    if not isinstance(v, bool):
        raise BadValue(f"{what} is true or false.")
    return v


def slider(v, what: str = "A layer or head") -> int | None:
    """1-based, in 1..MAX_SLIDER; None (nothing chosen) stays None."""
    if v is None:
        return None
    return int(min(max(round(_number(v, what)), 1), MAX_SLIDER))


def percent(v) -> int:
    return int(min(max(round(_number(v, "How far into training")), 0), 100))


def class_index(v, what: str = "A class") -> int:
    """-1 (any / the model's answer) or a class's index."""
    if v is None:
        return -1
    n = _number(v, what)
    if n != int(n) or not -1 <= n < MAX_CLASSES:
        raise BadValue(f"{what} is -1 or a class's number.")
    return int(n)


def model_name(v, names) -> str:
    if not isinstance(v, str) or v not in names:
        raise BadValue("There is no such model here; pick one from the menu (or list_models).")
    return v


def second_model(v, names) -> str:
    """The compare panel's choice: "" (none) or a model of this page."""
    return "" if v is None or v == "" else model_name(v, names)


def test_kind(v) -> str:
    if v is None:
        return KINDS[0]
    if not isinstance(v, str) or v not in KINDS:
        raise BadValue(f"Show is one of: {', '.join(KINDS)}.")
    return v


def heads_off(v) -> tuple[str, ...]:
    """The ticked heads, "layer,head" (0-based), each once, in the order sent."""
    if v is None:
        return ()
    if not isinstance(v, (list, tuple)) or len(v) > MAX_HEADS_OFF or \
            not all(isinstance(h, str) and HEAD.fullmatch(h) for h in v):
        raise BadValue('Heads switched off are a list of "layer,head" pairs.')
    return tuple(dict.fromkeys(v))


def upload_path(v) -> str | None:
    """What the upload component handed on: None or the path of a file this server received
    (vit/ui/uploads.py `received_file` checked it already)."""
    if v is None:
        return None
    if not isinstance(v, str) or not 0 < len(v) <= MAX_PATH_CHARS:
        raise BadValue("An upload is a picture file sent to this server.")
    return v


def canvas(v) -> dict | None:
    """The drawing canvas's value (vit/ui/canvas.py): {"png": data URL or None, "seq": n,
    "example": name or None}, nothing else kept."""
    if v is None or v == "":
        return None
    if not isinstance(v, dict):
        raise BadValue('A drawing is sent as {"png": "data:image/png;base64,…", "seq": n}.')
    png, seq, example = v.get("png"), v.get("seq"), v.get("example")
    if png is not None and not (isinstance(png, str) and png.startswith(PREFIX)):
        raise BadValue("A drawing must be a PNG data URL (data:image/png;base64,…).")
    if png is not None and len(png) > MAX_CHARS:
        raise BadValue(f"The drawing is {len(png) / 1e6:.1f} MB; a drawing is a few KB. Upload "
                       f"large pictures on the Upload tab.")
    ok_seq = isinstance(seq, int) and not isinstance(seq, bool) and 0 <= seq < 2 ** 53
    ok_example = isinstance(example, str) and len(example) <= MAX_EXAMPLE_CHARS
    return {"png": png, "seq": seq if ok_seq else None, "example": example if ok_example else None}


def strip_choice(v) -> dict:
    """The pipeline strip's value when tapped: {"pick": patch} or {"layer": l, "head": h}, small
    whole numbers, nothing else kept."""
    if not isinstance(v, dict):
        raise BadValue('The strip sends {"pick": n} or {"layer": l, "head": h}.')
    out = {k: v[k] for k in ("pick", "layer", "head") if k in v}
    if not out or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < MAX_INDEX
                          for n in out.values()):
        raise BadValue('The strip sends {"pick": n} or {"layer": l, "head": h}.')
    return out


def selection(evt) -> SimpleNamespace:
    """A click (gr.SelectData) -> its index alone: a position in a gallery (an int) or a point
    on a picture ((x, y) floats)."""
    index = getattr(evt, "index", None)
    if isinstance(index, int) and not isinstance(index, bool):
        if 0 <= index < MAX_INDEX:
            return SimpleNamespace(index=index)
    elif isinstance(index, float):
        if math.isfinite(index) and index == int(index) and 0 <= index < MAX_INDEX:
            return SimpleNamespace(index=int(index))
    elif isinstance(index, (list, tuple)) and len(index) == 2:
        try:
            x, y = (_number(c, "A click") for c in index)
        except BadValue:
            pass
        else:
            if abs(x) < MAX_INDEX and abs(y) < MAX_INDEX:
                return SimpleNamespace(index=[x, y])
    raise BadValue("That click is not at a place on the picture.")


@dataclass(frozen=True)
class Parser:
    """A handler parameter's parser, carried in its type annotation (`layer: Layer`).
    `names`: it also takes the page's model names (`names=`)."""
    fn: Callable
    names: bool = False

    def bound(self, names) -> Callable:
        return functools.partial(self.fn, names=names) if self.names else self.fn


# What a client may fill, one type each; a handler names them in its annotations.
Drawing = Annotated[dict | None, Parser(canvas)]
ModelName = Annotated[str, Parser(model_name, names=True)]
SecondModel = Annotated[str, Parser(second_model, names=True)]
SharedScale = Annotated[bool, Parser(functools.partial(flag, what="One colour scale"))]
FollowCls = Annotated[bool, Parser(functools.partial(flag, what="Follow [CLS]"))]
Layer = Annotated[int | None, Parser(slider)]
Head = Layer
UploadPath = Annotated[str | None, Parser(upload_path)]
Target = Annotated[int, Parser(functools.partial(class_index, what="The class explained"))]
ClassIndex = Annotated[int, Parser(class_index)]
HeadsOff = Annotated[tuple, Parser(heads_off)]
TestKind = Annotated[str, Parser(test_kind)]
Percent = Annotated[int, Parser(percent)]
StripChoice = Annotated[dict, Parser(strip_choice)]
# Gradio fills a parameter hinted gr.SelectData with the click (typing drops the parser for it).
Click = Annotated[gr.SelectData, Parser(selection)]


def _parsers(fn, sig: inspect.Signature, names) -> dict:
    """{parameter: its parser} from `fn`'s annotations. A parameter a client fills with no
    parser is a wiring mistake, refused here (at start-up), not a value let through."""
    inner = _inner(fn)
    hints = typing.get_type_hints(inner, include_extras=True)
    table = {}
    for name, param in sig.parameters.items():
        meta = getattr(hints.get(name), "__metadata__", ())
        found = [m for m in meta if isinstance(m, Parser)]
        if found:
            table[name] = found[0].bound(names)
        elif not _server_side(name, param, hints.get(name)):
            raise TypeError(f"{getattr(inner, '__qualname__', inner)}: parameter {name!r} has "
                            f"no parser in its annotation (vit/ui/boundary.py)")
    return table


def _inner(fn):
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _server_side(name: str, param: inspect.Parameter, hint) -> bool:
    """A parameter no client fills: the visitor's record, Gradio's progress or request, or one
    with a default the wiring keeps (a partial's keyword)."""
    return name == "visit" or param.default is not param.empty or hint is gr.Request


def parsed(fn, names, order: inspect.Signature | None = None, out: Callable | None = None):
    """`fn` (a handler) taking its client-sent arguments parsed, each by the parser its
    annotation carries (see the module docstring); `names`: the models a page offers. `order`:
    the signature Gradio sees (default `fn`'s own); `out`: applied to what `fn` returns (the
    wiring's view names -> components)."""
    sig = inspect.signature(fn)
    table = _parsers(fn, sig, names)
    title = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "?")
    outer = order or sig

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        given = outer.bind(*args, **kwargs).arguments
        for p, parse in table.items():
            if p in given:
                try:
                    given[p] = parse(given[p])
                except BadValue as e:
                    log.warning("refused a value for %s(%s): %s", title, p, e)
                    raise gr.Error(str(e), print_exception=False) from None
        result = fn(**given)
        return result if out is None else out(result)

    wrapper.__signature__, wrapper.__name__ = outer, title
    # Gradio finds what it fills itself (a click's gr.SelectData) by type hint: resolved here,
    # where the handler's module is known (a partial has no annotations of its own).
    wrapper.__annotations__ = {k: v for k, v in typing.get_type_hints(_inner(fn)).items()
                               if k in outer.parameters}
    return wrapper
