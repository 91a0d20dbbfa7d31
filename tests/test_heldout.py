"""Digits nobody here made or generated (bench/heldout.py), read by the bundled MNIST model
through the app's own path: other writers' scans (UCI optdigits, shipped with scikit-learn) and
printed digits in every typeface shipped with the app's own packages; and the same pictures,
which are not clothing, shown to the clothing model. Neither family was ever used for training;
only their tune halves, for choosing between candidates (bench/heldout.py --split). The floors
are today's figures less a point or three: issue 47's goal of 97 % of the scans read, none
refused, is not met yet (docs/reliability.md)."""
import importlib.util

import numpy as np
import pytest
from conftest import ROOT
from PIL import Image

from bench.heldout import PENS, fonts, optdigits, printed, scan, stroke_faces, stroked
from bench.real_inputs import read_all
from vit.inference import Predictor

# Each test reads a bundled model on a whole held-out family (hundreds of pictures): the data lane.
NO_SKLEARN = importlib.util.find_spec("sklearn") is None
pytestmark = [pytest.mark.data,
              pytest.mark.skipif(NO_SKLEARN, reason="scikit-learn (requirements-dev.txt) ships optdigits")]


@pytest.fixture(scope="module")
def mnist():
    return Predictor(str(ROOT / "checkpoints" / "mnist"), "cpu")


def test_the_families_are_what_they_say():
    cells, labels = optdigits()
    assert cells.shape == (1797, 8, 8) and 0 <= cells.min() and cells.max() <= 1
    assert sorted(set(labels.tolist())) == list(range(10))
    page = np.asarray(scan(cells[0], 8, Image.NEAREST))
    assert page.shape == (64, 64) and page.max() == 255 and page.min() < 64   # dark on white
    faces = fonts()
    assert len(faces) >= 20 and len({f.name for f in faces}) == len(faces)
    glyphs = {np.asarray(printed(faces[0], d, True)).tobytes() for d in range(10)}
    assert len(glyphs) == 10


def test_other_writers_scans_are_read_and_almost_never_refused(mnist):
    cells, labels = optdigits()
    got = read_all(mnist, [scan(c, 8, Image.BICUBIC) for c in cells[::3]], labels[::3])
    assert got["errors"] == 0 and got["not one of these"] <= 0.01
    # 94.7 % of these 599 (2026-11-28; 93.7 % with the model before the coarse-scan fine-tune)
    assert got["right"] >= 0.94


def test_printed_digits_in_every_shipped_typeface_are_read(mnist):
    faces = fonts()
    labels = np.tile(np.arange(10), len(faces))
    for small in (False, True):
        got = read_all(mnist, [printed(f, d, small) for f in faces for d in range(10)], labels)
        assert got["errors"] == 0 and got["right"] >= 0.98   # 100 % and 99.5 % (2026-11-27)


def test_digits_drawn_in_stroke_fonts_nobody_here_drew_are_read_with_every_pen(mnist):
    """The Hershey fonts' digits (OpenCV), drawn white on black as the canvas sends a drawing,
    with the page's thin, default and thick pen: strokes unlike MNIST's writers'."""
    faces = stroke_faces("all")
    if not faces:
        pytest.skip("OpenCV (requirements-dev.txt) ships the Hershey fonts")
    assert len(faces) == 7 and (len(stroke_faces("tune")), len(stroke_faces("report"))) == (4, 3)
    assert len({np.asarray(stroked(f, 8, 26)).tobytes() for _, f in faces}) == 7
    thin, thick = (np.asarray(stroked(faces[0][1], 1, pen)) > 128 for pen in (PENS[0], PENS[-1]))
    assert thick.sum() > 3 * thin.sum()                   # the pen's width is the pen's
    labels = np.tile(np.arange(10), len(faces))
    for pen in PENS:
        got = read_all(mnist, [stroked(f, d, pen) for _, f in faces for d in range(10)], labels)
        assert got["errors"] == 0 and got["right"] >= (0.85 if pen == PENS[-1] else 0.95), pen


def test_the_clothing_model_says_other_writers_digits_are_not_clothing():
    """Issue 47's 85 %: alone, the clothing model took six in ten of these blocky scans for
    garments; with the digit model's second opinion (vit/digit_check.py) it refuses most of them
    (docs/reliability.md, "The clothing model, fourth round")."""
    clothing = Predictor(str(ROOT / "checkpoints" / "fashion-mnist"), "cpu")
    cells, _ = optdigits()
    smoothed = read_all(clothing, [scan(c, 8, Image.BICUBIC) for c in cells[::3]])
    blocky = read_all(clothing, [scan(c, 8, Image.NEAREST) for c in cells[::3]])
    assert smoothed["errors"] == blocky["errors"] == 0
    assert smoothed["not one of these"] >= 0.95, smoothed    # 97.3 % of these 599 (2026-11-28)
    assert blocky["not one of these"] >= 0.83, blocky        # 85.8 % (alone: 39.6 %)
