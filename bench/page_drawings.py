"""The page's own drawings, read by a candidate model before the whole suite reads them: every
example the page offers (vit/data/examples.py) at the pen widths and sizes a visitor draws, and
the browser test's trouser, drawn as an outline and filled with the page's Fill tool. A fine-tune
that is better on held-out families can still lose these (a plain 1 doubted, a filled trouser
read as a shirt): this says so in a minute, on the CPU.

    python -m bench.page_drawings checkpoints/mnist /tmp/candidate [...]

Prints, per model, each drawing it does not read as itself, then how many it read right.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image, ImageDraw

from vit.data.examples import OUTLINES, STROKES, render_digit, render_object
from vit.inference import Predictor
from vit.preprocessing.decode import PreprocessError

# The browser test's trouser (tests/test_browser.py), in a unit box, outline drawn then filled.
TROUSER = [(0.3, 0.1), (0.7, 0.1), (0.75, 0.9), (0.55, 0.9), (0.5, 0.35), (0.45, 0.9),
           (0.25, 0.9), (0.3, 0.1)]


def filled_trouser(size: int = 280, pen: int = 8, scale: float = 1.0) -> Image.Image:
    im = Image.new("L", (size, size), 255)
    pts = [(size * (0.5 + (x - 0.5) * scale), size * (0.5 + (y - 0.5) * scale)) for x, y in TROUSER]
    draw = ImageDraw.Draw(im)
    draw.polygon(pts, fill=0)
    draw.line(pts, fill=0, width=pen, joint="curve")
    return im


def drawings(class_names: tuple[str, ...]) -> list[tuple[str, str, Image.Image]]:
    """(what it is, how it was drawn, picture) for the model's classes the page draws."""
    out = []
    for name in class_names:
        if name in STROKES:
            out += [(name, f"pen {w}", render_digit(name, width=w)) for w in (10, 22, 34)]
            out += [(name, "small, off-centre", render_digit(name, width=22).resize((140, 140)))]
        if name in OUTLINES:
            out += [(name, f"example at {s} px", render_object(name, s)) for s in (280, 140)]
    if "Trouser" in class_names:
        out += [("Trouser", f"outline filled, scale {s}", filled_trouser(scale=s)) for s in (1.0, 0.7)]
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", help="checkpoint folders")
    args = p.parse_args(argv)
    for folder in args.folders:
        predictor = Predictor(str(Path(folder)), "cpu")
        names = predictor.config.class_names
        items = drawings(names)
        right = 0
        for truth, how, im in items:
            try:
                a = predictor.analyse(im)
            except PreprocessError as e:
                print(f"  {truth} ({how}): refused: {e}")
                continue
            guess = names[int(a.probs.argmax())]
            if a.is_class and guess == truth:
                right += 1
            else:
                said = guess if a.is_class else "not one of these"
                print(f"  {truth} ({how}): {said} ({100 * a.probs.max():.1f} %)")
        print(f"{folder}: {right}/{len(items)} of the page's drawings read as themselves", flush=True)


if __name__ == "__main__":
    main()
