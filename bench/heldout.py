"""How the digit models read digits nobody here made or generated: held-out families, measured
through the app's own path (`Predictor.analyse`: preprocessing, calibrated probabilities,
"not a digit"), none of them ever used for training or for tuning anything.

    python -m bench.heldout [--models mnist mnist-small] [--split all|tune|report]

- **Other writers' scans** (UCI optdigits, the copy that ships with scikit-learn: 1,797 digits
  by 13 writers who are not MNIST's, scanned from NIST forms and reduced to 8x8 cells of 17 grey
  levels). Shown as a person would upload such a scan: dark ink on white paper, enlarged 4x, 8x
  and 16x, blocky (nearest) and smoothed (bicubic).
- **Printed digits** in every typeface that ships with the packages the app installs (DejaVu;
  matplotlib's STIX and Computer Modern; the KaTeX fonts inside gradio): 0-9 set large, and set
  at 16 px and enlarged 6x (a small printed number photographed or scanned).

- **Digits drawn with a pen's strokes, in shapes nobody here drew**: 0-9 in the seven Hershey
  stroke fonts whose digits differ (1967, shipped inside OpenCV 4), drawn white on black on a
  400-px square as the page's canvas sends them, with a thin, the default and a thick pen (the
  canvas's 10, 26 and 44 px). Interleaved halves: `tune` has Simplex, Duplex, Triplex and Script
  Complex, `report` Plain, Complex and Complex Small. Needs OpenCV
  (`pip install opencv-python-headless`); without it the family is skipped and says so.

- **Photographs and screenshots nobody here made**, as files that ship on this machine (none
  used for training or tuning): photos of people (matplotlib's Grace Hopper, gradio's Groot),
  scenes and animals (gradio's lion, cheetahs and tower, scikit-learn's temple and flower), each
  whole and as four crops; and screenshots and figures (the Rust, Node.js and valgrind manuals'
  images, networkx's and sympy's plot baselines), where present. For every model these are
  outside its classes: the figure is how often it says "not one of these". CIFAR-10's test
  photos are a row of their own, labelled: the trainer's "photo" outliers come from CIFAR-10's
  training photos, the same source.

For a model of other classes (the clothing model) the same pictures are outside its classes,
and the figure is how often it says "not a piece of clothing".

`--split tune` reads only the first half of each family (optdigits by index; fonts by name, in
alphabetical order), `report` only the second: change anything against `tune`, report `report`.
Prints, per family and model: how many were refused with an error, answered "not a digit", and
read right. Needs scikit-learn for optdigits (`pip install scikit-learn`); without it that
family is skipped and says so.
"""
from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from bench.real_inputs import read_all, show
from vit.inference import Predictor

ROOT = Path(__file__).resolve().parent.parent
ENLARGED = ((4, Image.NEAREST), (8, Image.NEAREST), (16, Image.NEAREST),
            (8, Image.BICUBIC), (16, Image.BICUBIC))


def optdigits() -> tuple[np.ndarray, np.ndarray] | None:
    """(1797, 8, 8) ink in [0, 1] and labels, or None without scikit-learn."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        return None
    d = load_digits()
    return d.images / 16.0, d.target


def scan(cells: np.ndarray, factor: int, how) -> Image.Image:
    """An 8x8 ink map as an enlarged scan: dark ink on white paper."""
    small = Image.fromarray(np.uint8(255 - 255 * cells), "L")
    return small.resize((8 * factor, 8 * factor), how)


PENS = (10, 26, 44)               # the canvas's thin, default and thick pen (canvas.js: 2 x size)


def stroke_faces(split: str) -> list[tuple[str, int]]:
    """(name, OpenCV font id) of the seven Hershey stroke fonts, for `split`
    (interleaved by font so that each half has a script face), or [] without OpenCV."""
    try:
        import cv2
    except ImportError:
        return []
    # (SCRIPT_SIMPLEX draws its digits as SIMPLEX does: left out.)
    names = ("SIMPLEX", "PLAIN", "DUPLEX", "COMPLEX", "TRIPLEX", "COMPLEX_SMALL", "SCRIPT_COMPLEX")
    keep = {"tune": 0, "report": 1}.get(split)
    # (FONT_ITALIC slants a Hershey font's letters, not its digits: not a face of its own.)
    return [(n.lower(), getattr(cv2, f"FONT_HERSHEY_{n}"))
            for i, n in enumerate(names) if keep is None or i % 2 == keep]


def stroked(font: int, digit: int, pen: int, side: int = 400) -> Image.Image:
    """Digit `digit` drawn in Hershey font `font` with a round pen `pen` px wide, white on black
    on a `side`-px square (as the canvas sends a drawing), its glyph about 60 % of the height."""
    import cv2
    (w, h), _ = cv2.getTextSize(str(digit), font, 1.0, 1)
    scale = 0.6 * side / h
    (w, h), base = cv2.getTextSize(str(digit), font, scale, pen)
    im = np.zeros((side, side), np.uint8)
    cv2.putText(im, str(digit), ((side - w) // 2, (side + h) // 2), font, scale, 255, pen,
                cv2.LINE_AA)
    return Image.fromarray(im, "L")


def fonts() -> list[Path]:
    """Every TrueType face shipped with matplotlib and gradio, and the system's DejaVu, that
    draws all ten digits as digits (symbol and size-variant faces left out), by name."""
    import gradio
    import matplotlib
    places = [Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf",
              Path(gradio.__file__).parent / "templates", Path("/usr/share/fonts")]
    skip = ("Siz", "Size", "NonUni", "cmex", "cmsy", "cmmi", "Math-", "AMS", "LastResort",
            "Fraktur", "Script", "Caligraphic", "DejaVuMath")
    # One face per look: gradio ships KaTeX twice, matplotlib another DejaVu.
    by_look = {}
    for place in places:
        for face in sorted(place.rglob("*.ttf")) if place.exists() else ():
            if not any(s in face.name for s in skip):
                look = _digits(face)
                if look is not None and face.name not in {f.name for f in by_look.values()}:
                    by_look.setdefault(look, face)
    return sorted(by_look.values(), key=lambda p: p.name)


def _digits(face: Path) -> bytes | None:
    """The ten digits as `face` draws them, or None where they are not ten different glyphs
    (a face without digits draws one box for all)."""
    glyphs = [np.asarray(printed(face, d, False).resize((40, 40))).tobytes() for d in range(10)]
    if len(set(glyphs)) < 10 or any(min(g) >= 128 for g in glyphs):
        return None
    return hashlib.sha256(b"".join(glyphs)).digest()


def printed(face: Path, digit: int, small: bool) -> Image.Image:
    """Digit `digit` in `face`, black on white: set at 160 px, or at 16 px and enlarged 6x."""
    size = 16 if small else 160
    font = ImageFont.truetype(str(face), size)
    side = int(size * 1.6)
    im = Image.new("L", (side, side), 255)
    d = ImageDraw.Draw(im)
    left, top, right, bottom = d.textbbox((0, 0), str(digit), font=font)
    d.text(((side - right + left) / 2 - left, (side - bottom + top) / 2 - top), str(digit),
           fill=0, font=font)
    return im.resize((side * 6, side * 6), Image.BICUBIC) if small else im


SITE = Path(np.__file__).resolve().parent.parent          # site-packages
PEOPLE = ("matplotlib/mpl-data/sample_data/grace_hopper.jpg", "gradio/media_assets/images/groot.jpeg")
SCENES = ("gradio/media_assets/images/lion.jpg", "gradio/media_assets/images/cheetah.jpg",
          "gradio/media_assets/images/cheetah1.jpg", "gradio/media_assets/images/tower.jpg",
          "gradio/test_data/cheetah2.jpg", "sklearn/datasets/images/china.jpg",
          "sklearn/datasets/images/flower.jpg")
SCREENSHOTS = ("/usr/share/doc/nodejs/contributing/doc_img", "/usr/share/doc/valgrind/html/images",
               str(Path.home() / ".rustup/toolchains"), str(SITE / "networkx/drawing/tests/baseline"),
               str(SITE / "sympy/plotting/tests"))


def crops(path: Path) -> list[Image.Image]:
    """A picture whole and four crops of it (each corner's 60 %), in RGB."""
    with Image.open(path) as im:
        im = im.convert("RGB")
    w, h = im.size
    cw, ch = int(w * 0.6), int(h * 0.6)
    return [im] + [im.crop((x, y, x + cw, y + ch)) for x in (0, w - cw) for y in (0, h - ch)]


def photo_families(split: str) -> dict[str, list[Image.Image]]:
    """{family: pictures} of the photographs and screenshots on this machine (half of each
    family's files for `split`)."""
    out = {}
    for name, files in (("photos of people", PEOPLE), ("scenes and animals", SCENES)):
        found = half(sorted(SITE / f for f in files if (SITE / f).is_file()), split)
        out[name] = [c for f in found for c in crops(f)]
    shots = sorted({f for place in SCREENSHOTS if Path(place).is_dir()
                    for f in Path(place).rglob("*.png") if f.stat().st_size > 8000})
    out["screenshots and figures"] = [Image.open(f).convert("RGB") for f in half(shots, split)]
    return out


def cifar_photos(split: str, n: int = 300) -> list[Image.Image]:
    """CIFAR-10 test photos (the JPEG copy in ../shared/data), n of them, or [] without it."""
    files = sorted((ROOT.parent / "shared" / "data" / "CIFAR-10-images" / "test").glob("*/*.jpg"))
    if not files:
        return []
    pick = np.random.default_rng(0).choice(len(files), min(2 * n, len(files)), replace=False)
    return [Image.open(files[i]).convert("RGB") for i in half(sorted(pick), split)]


def own(predictor: Predictor, n: int) -> None:
    """The model's own test images (the first `n`, or all for -1), each uploaded as stored."""
    from vit.data.loading import load_split
    if predictor.config.spec is None:
        print("  own test images: skipped (not a built-in data set)")
        return
    test = load_split(predictor.config.spec, ROOT.parent / "shared" / "data", train=False)
    count = len(test.labels) if n < 0 else min(n, len(test.labels))
    pictures = [test.picture(i) for i in range(count)]
    show(f"own test images (first {count:,})", read_all(predictor, pictures,
                                                       test.labels[:count].numpy()))


def half(items: list, split: str) -> list:
    """The first half ("tune"), the second ("report") or all."""
    middle = len(items) // 2
    return items[:middle] if split == "tune" else items[middle:] if split == "report" else items


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["mnist", "mnist-small", "fashion-mnist"])
    p.add_argument("--split", choices=("all", "tune", "report"), default="all")
    p.add_argument("--checkpoints", default=str(ROOT / "checkpoints"))
    p.add_argument("--photos", action="store_true",
                   help="also the photographs and screenshots (outside every model's classes)")
    p.add_argument("--own", type=int, default=0,
                   help="also this many of the model's own test images (-1: all), uploaded as "
                        "stored: the share refused and read right (the test set: reported, "
                        "never tuned on)")
    args = p.parse_args(argv)
    opt = optdigits()
    faces = half(fonts(), args.split)
    for name in args.models:
        started = time.perf_counter()
        predictor = Predictor(str(Path(args.checkpoints) / name), "cpu")
        # For a model of other classes (clothing) these are pictures outside them: what counts
        # is how often it says "not one of these".
        digits = predictor.config.class_names == tuple(str(d) for d in range(10))
        print(f"{name} (test accuracy {100 * predictor.config.test_accuracy:.2f} %), "
              f"split {args.split}{'' if digits else ', every input outside its classes'}:")
        if opt is None:
            print("  other writers' scans: skipped (pip install scikit-learn for optdigits)")
        else:
            idx = half(list(range(len(opt[1]))), args.split)
            cells, labels = opt[0][idx], opt[1][idx]
            for factor, how in ENLARGED:
                kind = "blocky" if how == Image.NEAREST else "smoothed"
                show(f"optdigits x{factor} {kind}",
                     read_all(predictor, [scan(c, factor, how) for c in cells],
                              labels if digits else None))
        labels = np.tile(np.arange(10), len(faces)) if digits else None
        for small in (False, True):
            show(f"printed, {len(faces)} faces, " + ("16 px x6" if small else "160 px"),
                 read_all(predictor, [printed(f, d, small) for f in faces for d in range(10)],
                          labels))
        strokes = stroke_faces(args.split)
        if not strokes:
            print("  pen strokes: skipped (pip install opencv-python-headless for Hershey fonts)")
        for pen in PENS if strokes else ():
            show(f"strokes, {len(strokes)} faces, pen {pen} px",
                 read_all(predictor, [stroked(f, d, pen) for _, f in strokes for d in range(10)],
                          np.tile(np.arange(10), len(strokes)) if digits else None))
        if args.photos:
            for family, pictures in photo_families(args.split).items():
                if pictures:
                    show(family, read_all(predictor, pictures))
            cifar = cifar_photos(args.split)
            if cifar:
                show("CIFAR-10 test photos (same source as the photo outliers)",
                     read_all(predictor, cifar))
        if args.own:
            own(predictor, args.own)
        print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
