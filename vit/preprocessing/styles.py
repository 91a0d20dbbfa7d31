"""How a data set's pictures were made, as one object: everything that lays a picture out like
them, and what follows from it elsewhere (ink checks, drawn non-digits, the canvas).

MNIST's digits were cropped to their ink, fitted into 20/28 of the frame and centred by mass;
Fashion-MNIST's garments fill the frame, their box centred; CIFAR-10's photos are colour
pictures, the centre square resized. A data set names its style in vit/data/specs.py, and a
checkpoint of an unknown data set gets DIGITS when it is grey and PHOTOS when it is colour.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Style:
    name: str                  # as config.json and the CLIs write it
    colour: bool = False       # colour pictures: the centre square resized (colour.py)
    box: float = 1.0           # the share of the frame the ink's longer side fills
    by_mass: bool = False      # centred by the ink's centre of mass (else by its box)
    paper: bool = False        # a photo of paper: its strokes found under uneven light (paper.py)
    strokes: bool = False      # pen strokes brought to the training data's width and sharpness
    # People draw these: vit.explain.ood's checks of a drawing's ink apply ("not a digit"), and
    # the trainer shows the model drawn non-digits (vit/data/negatives.py).
    drawn: bool = False
    # What the trainer shows the model as "none of these" (outlier exposure, vit/data/negatives.py):
    # the kinds of drawing people try that are not of the data set's classes.
    outliers: tuple[str, ...] = ()


DIGITS = Style("digits", box=20 / 28, by_mass=True, paper=True, strokes=True, drawn=True,
               outliers=("scribble", "dots", "dash", "shape", "letter", "two digits"))
# A clothing model is shown scribbles, outlines, letters and digits: people draw those to try it.
# (`--outliers` can add MNIST's handwritten digits: docs/reliability.md says what that traded.)
OBJECTS = Style("objects", outliers=("scribble", "shape", "letter", "digit"))
PHOTOS = Style("photos", colour=True)
STYLES = {s.name: s for s in (DIGITS, OBJECTS, PHOTOS)}


def style_of(style: Style | str) -> Style:
    """A Style, from itself or its name. Raises ValueError naming the styles there are."""
    if isinstance(style, Style):
        return style
    if not isinstance(style, str) or style not in STYLES:
        raise ValueError(f"unknown style {style!r}: choose one of {', '.join(STYLES)}")
    return STYLES[style]
