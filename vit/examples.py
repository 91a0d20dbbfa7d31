"""Sample drawings the project makes itself: each digit is a few pen strokes defined here,
rendered with PIL. No image from MNIST or any other data set is shipped."""
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


def write_examples(folder) -> list[str]:
    """Render one PNG per digit into `folder` (created if needed); returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in STROKES:
        path = folder / f"drawn_{d}.png"
        if not path.exists():
            render_digit(d).save(path)
        paths.append(str(path))
    return paths
