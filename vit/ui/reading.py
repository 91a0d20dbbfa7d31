"""How the page reads an input: a drawing's PNG, an upload's file or a test image through one
model — what the visitor's record keeps of it, and its analysis — and the same input through
another model (laid out again from what was kept). Mixed into `Page` (vit/ui/page.py), whose
`predictor` and `_laid_out` it uses."""
from __future__ import annotations

from dataclasses import replace

import gradio as gr
import numpy as np

from vit.inference import Analysis, Predictor, array_key
from vit.preprocessing.decode import BlankInputError, PreprocessError, decode
from vit.preprocessing.layout import compact
from vit.ui import views
from vit.ui.canvas import colour_picture
from vit.ui.record import Refused, Shown

LAID_OUT_BYTES = 32 << 20     # model inputs laid out per (source, model): ~10,000 MNIST-sized ones
# A colour picture kept per visitor, to lay out again for another model: as large as the largest
# input a model here reads (a converted ViT-B/16: 224 px), 150 KB instead of the canvas's 480.
KEPT_COLOUR_SIDE = 224


class Reading:
    def _read(self, kind: str, source, p: Predictor, name: str, number: int = 0,
              live: bool = False) -> tuple[Shown | Refused, Analysis | None]:
        """An input through model `p` (named `name`): what the page keeps of it, and its analysis
        (`live`: a frame while the pen is still down) — or why it can't be read."""
        try:
            if kind == "drawing":        # its PNG, read once for the input and the copy
                source = colour_picture(source) if p.config.style.colour else decode(source)
            image, ink = p.read(source)
        except PreprocessError as e:
            if kind == "drawing" and isinstance(e, BlankInputError):
                if not inked_all_over(source):                     # an erased canvas: rest
                    return Refused(kind, "", None, name, number, empty=True), None
                e = (f"The whole box is ink, so nothing stands out to read: Undo, or clear it and "
                     f"draw a {p.config.noun}.")
            gr.Warning(str(e))
            return Refused(kind, str(e), source if kind == "upload" else None, name,
                           number), None
        # A drawing's session copy is its ink map (the same compact copy) when it has one; a
        # colour model's (a photo, maybe drawn over) its RGB picture, at most 224 px a side.
        if kind != "drawing":
            kept = source
        elif ink is not None:
            kept = ink
        else:
            kept = shrunk(source, KEPT_COLOUR_SIDE) if p.config.style.colour else compact(source)
        if live and views.big(p):           # the answer alone: a big model's maps cost more
            a = p.glance(image, ink)
        else:
            a = p.analyse_input(image, ink, live, source=source)
        shown = Shown(kind, kept, image, name, number)
        self._laid_out.put(_source_key(shown, name), image, image.nbytes)
        return shown, a

    def analysis(self, shown: Shown, name) -> tuple[Predictor, Analysis]:
        """The input on screen through model `name`, with every check of its verdict (a drawing's
        or upload's ink checks too: ~0 ms for a drawing, ~3 ms for an upload): as it was if
        already that model's input (a test image stays exactly the test image), else laid out
        again from its source. (One analysis for every view: a lane that skipped the checks once
        showed a strip reading "airplane" under a headline reading "Not a photo".)"""
        p = self.predictor(name)
        if shown.model == name or (shown.kind == "test" and p.fits(shown.image)):
            ink = p.ink(shown.source) if shown.kind != "test" else None
            source = shown.source if shown.kind != "test" else None
            return p, p.analyse_input(shown.image, ink, source=source)
        key = _source_key(shown, name)
        image = self._laid_out.get(key)
        if image is None:
            image, ink = p.read(shown.source)
            self._laid_out.put(key, image, image.nbytes)
        else:
            ink = p.ink(shown.source)
        return p, p.analyse_input(image, ink, source=shown.source)

    def _reread(self, item: Shown | Refused, name: str) -> tuple[Shown | Refused, Analysis | None]:
        """An input (a tab's, kept in the record) for model `name`."""
        p = self.predictor(name)
        if isinstance(item, Refused):
            if item.empty:
                return replace(item, model=name), None
            if item.kind == "upload" and item.source is not None:
                return self._read("upload", item.source, p, name)
            return replace(item, model=name), None
        try:
            p, a = self.analysis(item, name)
        except PreprocessError as e:               # an upload's file gone from the cache
            return Refused(item.kind, str(e), None, name, item.number), None
        # A test image keeps saying where it comes from (another model's test set, maybe).
        return replace(item, image=a.image, model=name), a

def _source_key(shown: Shown, name: str) -> tuple:
    """An input's identity across models: its kept source (an upload's path, or an array's bytes)."""
    src = shown.source
    return (shown.kind, src if isinstance(src, str) else array_key(np.asarray(src)), name)


def shrunk(rgb: np.ndarray, side: int) -> np.ndarray:
    """An (H, W, 3) uint8 picture with its longer side at most `side` (anti-aliased)."""
    from PIL import Image
    im = Image.fromarray(rgb)
    im.thumbnail((side, side))
    return np.asarray(im)


def inked_all_over(drawing) -> bool:
    """Whether a decoded drawing (`decode`: its ink, (H, W) with 1 = ink) is ink nearly
    everywhere — a Fill on an empty canvas, say —, so that its no-contrast refusal is no resting
    empty canvas (an empty one decodes to grey + alpha, (H, W, 2))."""
    a = np.asarray(drawing)
    return a.ndim == 2 and float(a.mean()) > 0.9
