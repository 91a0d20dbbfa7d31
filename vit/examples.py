"""Sample drawings the project makes itself: each digit is a few pen strokes defined here, each
piece of clothing a filled outline, rendered with PIL. No image from MNIST, Fashion-MNIST or any
other data set is shipped."""
from __future__ import annotations

import math
from pathlib import Path

from PIL import Image, ImageDraw


def _arc(cx, cy, rx, ry, a0, a1, n=24):
    """Points on an ellipse from angle a0 to a1 (degrees, 0 = right, 90 = down)."""
    return [(cx + rx * math.cos(math.radians(a0 + (a1 - a0) * i / n)),
             cy + ry * math.sin(math.radians(a0 + (a1 - a0) * i / n))) for i in range(n + 1)]


# Strokes in a 100x100 box; each stroke is a polyline.
STROKES: dict[str, list[list[tuple[float, float]]]] = {
    "0": [_arc(50, 50, 24, 38, 0, 360, 40)],
    "1": [[(38, 24), (54, 12), (54, 88)]],
    "2": [_arc(50, 32, 22, 20, 200, 360 + 20, 20) + [(30, 86), (76, 86)]],
    "3": [_arc(48, 30, 20, 18, 200, 450, 20) + _arc(48, 66, 24, 22, 270, 520, 20)],
    "4": [[(62, 88), (62, 12), (24, 64), (80, 64)]],
    "5": [[(72, 14), (36, 14), (32, 46)] + _arc(50, 62, 24, 24, 230, 500, 24)],
    "6": [[(66, 14), (44, 36), (30, 62)] + _arc(50, 66, 21, 21, 180, 540, 30)],
    "7": [[(26, 16), (76, 16), (44, 88)], [(40, 52), (66, 52)]],
    "8": [_arc(50, 30, 18, 18, 90, 450, 24), _arc(50, 67, 23, 21, -90, 270, 24)],
    "9": [_arc(48, 34, 20, 20, 0, 360, 30), [(68, 34), (64, 60), (54, 88)]],
}


def render_digit(digit: str, size: int = 280, width: int = 22, offset=(0, 0),
                 angle: float = 0.0) -> Image.Image:
    """Black strokes on white, as a person would draw them on a canvas."""
    im = Image.new("L", (size, size), 255)
    draw = ImageDraw.Draw(im)
    s = size / 100
    rad = math.radians(angle)
    for stroke in STROKES[digit]:
        pts = []
        for x, y in stroke:
            x, y = x - 50, y - 50
            x, y = x * math.cos(rad) - y * math.sin(rad), x * math.sin(rad) + y * math.cos(rad)
            pts.append(((x + 50 + offset[0]) * s, (y + 50 + offset[1]) * s))
        draw.line(pts, fill=0, width=width, joint="curve")
        for x, y in (pts[0], pts[-1]):
            r = width / 2
            draw.ellipse([x - r, y - r, x + r, y + r], fill=0)
    return im


# Clothing as Fashion-MNIST shows it: a filled silhouette seen from the front (shoes from the
# side), filling its frame. Outlines in a 100x100 box; a polyline of width w is a strap/handle,
# or a "gap" (white: a coat's opening). No shirt: drawn without texture, every shirt tried was
# read as a coat or a dress (the bundled model tells them apart by fabric and buttons).
OUTLINES: dict[str, list] = {
    "T-shirt/top": [[(30, 14), (42, 10), (50, 17), (58, 10), (70, 14), (92, 32), (80, 46), (72, 38),
                     (72, 90), (28, 90), (28, 38), (20, 46), (8, 32)]],
    "Trouser": [[(30, 6), (70, 6), (76, 94), (58, 94), (50, 32), (42, 94), (24, 94)]],
    "Pullover": [[(32, 10), (42, 8), (50, 14), (58, 8), (68, 10), (86, 30), (96, 90), (80, 92),
                  (72, 44), (72, 92), (28, 92), (28, 44), (20, 92), (4, 90), (14, 30)]],
    "Dress": [[(40, 6), (60, 6), (62, 30), (57, 40), (80, 94), (20, 94), (43, 40), (38, 30)]],
    "Coat": [[(30, 4), (42, 4), (50, 16), (58, 4), (70, 4), (88, 24), (98, 96), (82, 97),
              (74, 40), (76, 97), (24, 97), (26, 40), (18, 97), (2, 96), (12, 24)],
             ("gap", 2, [(50, 16), (50, 97)])],
    "Sandal": [[(4, 70), (96, 66), (96, 76), (4, 80)], ("strap", 5, [(12, 70), (30, 46), (48, 68)]),
               ("strap", 5, [(40, 68), (60, 44), (80, 66)]), ("strap", 5, [(30, 46), (60, 44)])],
    "Sneaker": [[(6, 52), (22, 48), (38, 38), (52, 46), (72, 52), (90, 58), (96, 70), (92, 78),
                 (6, 78)]],
    "Bag": [[(12, 36), (88, 36), (92, 90), (8, 90)], ("strap", 6, _arc(50, 36, 22, 24, 180, 360))],
    "Ankle boot": [[(22, 10), (52, 10), (54, 48), (82, 58), (94, 72), (94, 86), (14, 86), (18, 48)]],
}


def render_object(name: str, size: int = 280) -> Image.Image:
    """A filled black silhouette on white, as someone would draw and fill it on a canvas."""
    im = Image.new("L", (size, size), 255)
    draw = ImageDraw.Draw(im)
    s = size / 100
    for part in OUTLINES[name]:
        if isinstance(part, tuple):        # ("strap", width, points) or a white ("gap", …)
            kind, width, pts = part
            draw.line([(x * s, y * s) for x, y in pts], fill=255 if kind == "gap" else 0,
                      width=round(width * s), joint="curve")
        else:
            draw.polygon([(x * s, y * s) for x, y in part], fill=0)
    return im


def write_examples(folder, style: str = "digits") -> list[str]:
    """Render one PNG per example of a preprocessing style ("digits": 0-9, "objects": clothing)
    into `folder` (created if needed); returns their paths. `example_name(path)` names one."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names, render = (STROKES, render_digit) if style == "digits" else (OUTLINES, render_object)
    paths = []
    for n in names:
        path = folder / f"drawn_{n.replace('/', '-').replace(' ', '-')}.png"
        if not path.exists():
            render(n).save(path)
        paths.append(str(path))
    return paths


def example_name(path) -> str:
    """What an example file shows ("7", "Ankle boot")."""
    stem = Path(path).stem.removeprefix("drawn_")
    return next((n for n in OUTLINES if n.replace("/", "-").replace(" ", "-") == stem), stem)
