"""Strings that come from a file (class names, a data set's name, provenance), made safe to show.

A checkpoint or an image folder is data anyone can write: a class folder named
`<img src=x onerror=…>` or holding a newline must show as those characters, never run as HTML,
start a Markdown heading, break a table, or make a link. `md` is applied wherever such a string
enters Markdown (the page's headlines, captions, the model card); plain-text places (gr.Label,
dropdown choices, pictures) take the string as it is.
"""
from __future__ import annotations

import html
import math
import re
from decimal import ROUND_HALF_UP, Decimal

# What makes structure inside a line: emphasis, code, links and images ([…](…), ![…]), table
# cells, strike-through, escapes. Parentheses, dots and dashes stay as they are ("T-shirt/top").
_INLINE = re.compile(r"([\\`*_\[\]|~])")
_LINE_START = re.compile(r"^([#>+\-]|\d+[.)])")      # a heading, quote or list if a line began so


def md(text, limit: int = 200) -> str:
    """`text` as literal characters inside Markdown (and its HTML): one line (runs of white space,
    newlines included, become one space), at most `limit` characters, `<`, `>` and `&` as HTML
    entities, and Markdown's inline punctuation (and a heading's or list's first character)
    backslash-escaped."""
    line = " ".join(str(text).split())
    if len(line) > limit:
        line = line[:limit - 1] + "…"
    line = _INLINE.sub(r"\\\1", html.escape(line, quote=False))
    return _LINE_START.sub(r"\\\1", line)


def code(text, limit: int = 300) -> str:
    """A config string as a Markdown code span inside a table cell: one line, no backtick to end
    the span early, column bars escaped (GFM splits cells on them even inside code)."""
    line = " ".join(str(text).split()).replace("`", "'")
    line = line if len(line) <= limit else line[:limit - 1] + "…"
    return "`" + line.replace("|", "\\|") + "`"


def short_paths(command: str) -> str:
    """A command as the model card shows it: every path cut to its last part (`--init
    /tmp/ft/run` -> `--init run`), so a public page shows no folder of the machine that trained
    it; the whole command stays in the checkpoint's config.json."""
    def cut(m: re.Match) -> str:
        word = m.group(0)
        if "/" not in word or "://" in word or word[:1] in "\"'":
            return word
        return word.rstrip("/").rsplit("/", 1)[-1] or word
    return re.sub(r"\S+", cut, str(command))


def percent(p: float) -> str:
    """A probability or share as the page writes every one: "99.5 %" (one decimal, a space
    before the sign), so the same number never reads three ways on one screen. An exact half
    rounds away from zero, as the page's JavaScript (`toFixed`) rounds it: Python's format
    rounds it to even, and the server wrote "1.2 %" where the strip wrote "1.3 %"."""
    x = 100 * float(p) + 0.0            # (-0.0 is "0.0 %", as in JavaScript)
    if not math.isfinite(x):
        return f"{x:.1f} %"
    return f"{Decimal(x).quantize(Decimal('0.1'), ROUND_HALF_UP)} %"


# Below and above what one decimal shows.
LOW, HIGH = "<0.1 %", ">99.9 %"


def confidence(p: float) -> str:
    """A model's probability for a class, as `percent` writes it, but never "100.0 %" or
    "0.0 %": those say the model is certain, and a calibrated 0.99996 is not (a trial found
    every confident drawing reading "100.0 %"). pipeline.js `conf` writes the strip's the same."""
    v = float(p)
    return HIGH if v >= 0.9995 else LOW if v < 0.0005 else percent(v)


def correlation(r: float) -> str:
    """A correlation as the page writes every one: signed, two decimals ("+0.35", "-0.41"), and
    a value that rounds to zero as "0.00", never "-0.00" (a trial read "relevance -0.00")."""
    text = f"{float(r):+.2f}"
    return "0.00" if text in ("+0.00", "-0.00") else text
