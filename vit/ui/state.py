"""What one visitor's session keeps, and the named result every analysing handler returns."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vit.ui.views import Pictures

KEEP = "keep"          # PageUpdate.pictures: leave the pictures on the page as they are


@dataclass(frozen=True)
class Shown:
    """The input on screen. Gradio keeps a session's state for an hour after the visitor leaves,
    so it stays small: the model input (a few KB) and a compact source to lay out again for
    another model (a drawing's ink at most 160 px a side, or its colour picture at most 400, an
    upload's path, a test image as is)."""
    kind: str                        # "drawing", "upload" or "test"
    source: object                   # np.ndarray (drawing ink / test image) or str (upload path)
    image: np.ndarray                # what the model saw, float32 in [0, 1]
    model: str                       # the model it was laid out for
    number: int = 0                  # a drawing's number from the canvas (0: not a drawing)
    caption: str = ""                # a test image's origin: data set, number and true class
    headline: str = ""               # its answer's headline, for a tab switch to put back


@dataclass
class PageUpdate:
    """Everything an analysing handler changes, by name; `outputs()` orders it for Gradio."""
    status: str
    label: dict | None = None
    pictures: Pictures | str | None = None          # or KEEP
    shown: Shown | None = None

    def with_headline(self, status: str) -> "PageUpdate":
        """This update with `status` as its headline, which its Shown keeps too."""
        from dataclasses import replace
        shown = replace(self.shown, headline=status) if self.shown is not None else None
        return PageUpdate(status, self.label, self.pictures, shown)

    def outputs(self) -> tuple:
        if self.pictures is KEEP:
            import gradio as gr
            pics = (gr.update(),) * 6
        else:
            pics = self.pictures.as_tuple() if self.pictures is not None else (None,) * 6
        return (self.status, self.label, *pics, self.shown)
