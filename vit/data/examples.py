"""Sample drawings the project makes itself: each digit is a few pen strokes defined here, each
piece of clothing a filled outline, each photo-style scene a few shapes on a sky and ground,
rendered with PIL. No image from MNIST, Fashion-MNIST, CIFAR-10 or any other data set is
shipped."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


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


# Photo-style scenes for colour models (CIFAR-10): flat shapes on a sky gradient and ground, with
# film grain and a slight blur so that they are not cleaner than a photo. Shapes in a 100x100
# box: ("poly", colour, points) or ("ellipse", colour, (x0, y0, x1, y1)). Only seven classes: a
# test checks each is read as itself by the bundled model (flat shapes carry no fur or face).
SceneShape = tuple[str, tuple[int, int, int], object]
_ROAD_SKY = ((150, 180, 210), (200, 210, 220))


def _wheels(xs, top, r, hub=True) -> list[SceneShape]:
    out = []
    for x in xs:
        out.append(("ellipse", (25, 25, 25), (x - r, top, x + r, top + 2 * r)))
        if hub:
            out.append(("ellipse", (150, 150, 150), (x - r / 2.5, top + r * 0.6, x + r / 2.5,
                                                     top + r * 1.4)))
    return out


# name: (sky top colour, sky bottom colour, horizon as % of the height, ground colour, shapes)
SCENES: dict[str, tuple] = {
    "airplane": ((70, 130, 210), (170, 205, 240), 100, None, [
        ("poly", (225, 225, 230), [(8, 50), (80, 46), (92, 48), (94, 52), (80, 55), (8, 54)]),
        ("poly", (200, 200, 208), [(40, 50), (62, 50), (44, 80), (36, 80)]),
        ("poly", (185, 185, 195), [(44, 48), (58, 48), (50, 28), (44, 28)]),
        ("poly", (200, 200, 210), [(8, 50), (16, 50), (10, 34), (4, 34)])]),
    "ship": ((110, 160, 215), (190, 215, 235), 55, (30, 70, 120), [
        ("poly", (60, 60, 70), [(10, 50), (90, 50), (82, 62), (16, 62)]),
        ("poly", (235, 235, 235), [(26, 40), (64, 40), (64, 50), (26, 50)]),
        ("poly", (220, 220, 220), [(36, 30), (50, 30), (50, 40), (36, 40)]),
        ("poly", (200, 60, 50), [(44, 22), (48, 22), (48, 30), (44, 30)])]),
    "automobile": (*_ROAD_SKY, 58, (90, 90, 95), [
        ("poly", (190, 30, 35), [(8, 72), (8, 56), (26, 54), (36, 40), (66, 40), (78, 54),
                                 (94, 58), (94, 72)]),
        ("poly", (60, 80, 100), [(38, 43), (50, 43), (50, 53), (30, 53)]),
        ("poly", (60, 80, 100), [(53, 43), (64, 43), (73, 53), (53, 53)]),
        *_wheels((25, 76), 62, 10)]),
    "truck": (*_ROAD_SKY, 62, (95, 95, 100), [
        ("poly", (235, 235, 235), [(4, 22), (66, 22), (66, 72), (4, 72)]),
        ("poly", (30, 70, 160), [(68, 38), (86, 38), (96, 54), (96, 72), (68, 72)]),
        ("poly", (150, 190, 220), [(72, 42), (84, 42), (90, 54), (72, 54)]),
        *_wheels((16, 54, 84), 66, 9, hub=False)]),
    "bird": ((120, 160, 200), (180, 200, 220), 100, None, [
        ("poly", (90, 60, 40), [(0, 70), (100, 62), (100, 68), (0, 76)]),
        ("ellipse", (150, 90, 50), (35, 38, 70, 66)),
        ("ellipse", (150, 90, 50), (60, 30, 78, 48)),
        ("poly", (230, 170, 40), [(77, 38), (88, 41), (77, 44)]),
        ("ellipse", (10, 10, 10), (68, 35, 72, 39)),
        ("poly", (120, 70, 40), [(38, 52), (14, 62), (18, 66), (40, 60)])]),
    "horse": ((140, 180, 220), (200, 215, 230), 50, (90, 140, 60), [
        ("ellipse", (110, 65, 35), (22, 38, 72, 62)),
        ("poly", (110, 65, 35), [(64, 44), (74, 22), (84, 20), (90, 30), (80, 32), (74, 50)]),
        *[("poly", (110, 65, 35), [(x, 56), (x + 5, 56), (x + 5, 88), (x, 88)])
          for x in (26, 36, 60, 68)],
        ("poly", (60, 35, 20), [(22, 42), (12, 62), (16, 64), (24, 48)])]),
    "frog": ((70, 55, 35), (70, 55, 35), 100, None, [
        # on leaf litter: on flat brown it lay at the edge of what the model knows (typical.py)
        ("ellipse", (95, 75, 40), (0, 0, 30, 20)), ("ellipse", (55, 70, 30), (70, 5, 100, 25)),
        ("ellipse", (90, 70, 45), (75, 80, 100, 100)), ("ellipse", (50, 40, 25), (0, 82, 30, 100)),
        *[("ellipse", (70, 130, 40), box) for box in ((20, 35, 80, 80), (30, 28, 45, 43),
                                                       (55, 28, 70, 43))],
        ("ellipse", (60, 115, 35), (10, 60, 40, 85)),
        ("ellipse", (60, 115, 35), (60, 60, 90, 85)),
        ("ellipse", (20, 20, 10), (33, 31, 42, 40)),
        ("ellipse", (20, 20, 10), (58, 31, 67, 40)),
        ("ellipse", (40, 80, 25), (35, 50, 45, 60)),          # spots: 42 % -> 96 % frog
        ("ellipse", (40, 80, 25), (55, 55, 63, 63))]),
}


def render_scene(name: str, size: int = 256) -> Image.Image:
    """An RGB picture: sky gradient down to the horizon, flat ground below it, the shapes, then
    grain (seeded by the scene's place in SCENES: the same picture every time) and a blur."""
    top, bottom, horizon, ground, shapes = SCENES[name]
    t = np.clip(np.arange(size) / (size * horizon / 100), 0, 1)[:, None]      # (size, 1)
    sky = np.array(top) * (1 - t) + np.array(bottom) * t                      # (size, 3)
    pixels = np.repeat(sky[:, None, :], size, axis=1)                          # (size, size, 3)
    if ground is not None:
        pixels[round(size * horizon / 100):] = ground
    im = Image.fromarray(pixels.astype(np.uint8))
    draw, s = ImageDraw.Draw(im), size / 100
    for kind, colour, where in shapes:
        if kind == "poly":
            draw.polygon([(x * s, y * s) for x, y in where], fill=colour)
        else:
            draw.ellipse([v * s for v in where], fill=colour)
    grain = np.random.default_rng(list(SCENES).index(name)).normal(0, 6, (size, size, 3))
    noisy = np.clip(np.asarray(im, np.float32) + grain, 0, 255).astype(np.uint8)
    return Image.fromarray(noisy).filter(ImageFilter.GaussianBlur(1.2 * size / 256))


def write_examples(folder, style: str = "digits") -> list[str]:
    """Render one PNG per example of a preprocessing style ("digits": 0-9, "objects": clothing,
    "photos": scenes) into `folder` (created if needed); returns their paths.
    `example_name(path)` names one."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names, render = {"digits": (STROKES, render_digit), "objects": (OUTLINES, render_object),
                     "photos": (SCENES, render_scene)}[style]
    paths = []
    for n in names:
        path = folder / f"drawn_{n.replace('/', '-').replace(' ', '-')}.png"
        # Always drawn afresh (0.4 s for all of them): a file left by an older version of this
        # code would otherwise be shown instead of what the code draws now.
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        render(n).save(tmp, "PNG")
        os.replace(tmp, path)              # whole, even with two app processes sharing /tmp
        paths.append(str(path))
    return paths


def write_test_examples(folder, images, labels, class_names, side: int = 128) -> list[str]:
    """One real test image per class (the first of each in the split), enlarged to `side` px
    with Lanczos, as PNGs in `folder`: real photos to show where the drawn scenes are cartoons.
    Written only where the data set is on the machine; nothing of it is part of the project."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    labels = np.asarray(labels)
    paths = []
    for c, name in enumerate(class_names):
        hits = np.flatnonzero(labels == c)
        if not len(hits):
            continue
        im = Image.fromarray(np.asarray(images[hits[0]], np.uint8))
        path = folder / f"test_{str(name).replace('/', '-').replace(' ', '-')}.png"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        im.resize((side, side), Image.LANCZOS).save(tmp, "PNG")
        os.replace(tmp, path)
        paths.append(str(path))
    return paths


def example_name(path) -> str:
    """What an example file shows ("7", "Ankle boot")."""
    stem = Path(path).stem.removeprefix("drawn_").removeprefix("test_")
    return next((n for n in OUTLINES if n.replace("/", "-").replace(" ", "-") == stem), stem)
