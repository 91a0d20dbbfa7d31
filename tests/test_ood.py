"""Not a digit (vit/explain/ood.py): the ink checks on drawings people make — real digits drawn in
odd ways pass (two-stroke 4s and 5s, thin 1s, ring 0s), dots, dashes, specks, scattered marks and
two digits side by side are refused — the decision with the learned threshold, the label the app
shows, and `vit.predict`'s answer; photos are judged by the model alone."""
import numpy as np
import pytest
import torch
from conftest import ROOT, run_module
from PIL import Image, ImageDraw

from vit.checkpoint import parse_config, save_checkpoint
from vit.data.examples import render_digit
from vit.explain import ood
from vit.inference import Predictor
from vit.model import ViT, ViTConfig

TINY = ViTConfig(dim=16, depth=2, heads=2, mlp_dim=16)
META = {"dataset": "mnist", "class_names": [str(i) for i in range(10)],
        "normalization": {"mean": 0.1307, "std": 0.3081}}


def config(calibration=None, **changes):
    obj = {"model": TINY.to_dict(), **META, **changes}
    if calibration is not None:
        obj["calibration"] = calibration
    return obj


def tiny_checkpoint(folder, calibration=None, seed=0, **meta):
    torch.manual_seed(seed)
    save_checkpoint(folder, ViT(TINY), {**META, **meta,
                                        **({"calibration": calibration} if calibration else {})})
    return folder


def drawing(*parts, size=500):
    """Black-on-white canvas with rendered digits pasted at (digit, x, y, height)."""
    im = Image.new("L", (size, size), 255)
    for digit, x, y, h in parts:
        g = render_digit(digit, h, max(4, h // 12))
        im.paste(Image.fromarray(np.minimum(np.asarray(im.crop((x, y, x + h, y + h))),
                                            np.asarray(g))), (x, y))
    return np.asarray(im)


def verdict(image, cal=None):
    from types import SimpleNamespace
    cfg = parse_config(config(cal), "config.json")
    stats = ood.measure(ood.ink_map(image))
    return ood.check_ink(stats), SimpleNamespace(cfg=cfg, stats=stats)


def test_marks_are_the_connected_pieces_of_ink():
    m = np.zeros((40, 40), bool)
    m[2:10, 2:5] = True                       # a bar
    m[10:14, 5:8] = True                      # touching it diagonally: the same mark
    m[20:30, 20:30] = True                    # a square, apart
    m[20:30, 31:33] = True                    # one pixel from the square: joined (dilation)
    m[35, 2] = True                           # a speck
    got = sorted((k.top, k.left, k.bottom, k.right, k.area) for k in ood.marks(m))
    assert got == [(2, 2, 14, 8, 36), (20, 20, 30, 33, 120), (35, 2, 36, 3, 1)]
    assert ood.marks(np.zeros((5, 5), bool)) == []


@pytest.mark.parametrize("digit", list("0123456789"))
def test_drawn_digits_pass_the_ink_checks(digit):
    v, _ = verdict(drawing((digit, 120, 90, 300)))
    assert v, v.reason


@pytest.mark.parametrize("name, make", [
    ("a tall thin 1", lambda d: d.line([(250, 60), (258, 440)], fill=0, width=14)),
    ("a 4 in two strokes that don't touch", lambda d: (d.line([(200, 80), (150, 300), (330, 300)],
                                                              fill=0, width=16),
                                                       d.line([(290, 150), (290, 440)], fill=0, width=16))),
    ("a 5 whose bar is apart", lambda d: (d.line([(180, 100), (170, 240)], fill=0, width=16),
                                          d.arc([150, 200, 350, 420], 200, 140, fill=0, width=16),
                                          d.line([(200, 80), (330, 80)], fill=0, width=16))),
    ("a 7 with a crossbar", lambda d: (d.line([(140, 90), (360, 90), (220, 440)], fill=0, width=16),
                                       d.line([(200, 260), (330, 260)], fill=0, width=16))),
    ("a 0 as a ring", lambda d: d.ellipse([150, 60, 350, 440], outline=0, width=18)),
    ("an i-like dot beside a stroke", lambda d: (d.line([(250, 150), (250, 440)], fill=0, width=16),
                                                  d.ellipse([240, 70, 262, 92], fill=0))),
    ("a bold small 8", lambda d: (d.ellipse([200, 200, 260, 260], outline=0, width=22),
                                  d.ellipse([195, 250, 265, 320], outline=0, width=22))),
])
def test_digits_people_draw_in_odd_ways_are_not_refused(name, make):
    im = Image.new("L", (500, 500), 255)
    make(ImageDraw.Draw(im))
    v, info = verdict(np.asarray(im))
    assert v, f"{name}: {v.reason} {info.stats}"


@pytest.mark.parametrize("name, kind, make", [
    ("a dot", "dot", lambda d: d.ellipse([240, 240, 272, 272], fill=0)),
    ("a speck", "tiny", lambda d: d.line([(100, 100), (110, 104)], fill=0, width=4)),
    ("a dash", "dash", lambda d: d.line([(150, 250), (330, 262)], fill=0, width=16)),
    ("scattered marks", "scattered", lambda d: [d.line([(x, y), (x + 30, y + 20)], fill=0, width=14)
                                                for x, y in ((60, 60), (300, 80), (120, 330), (380, 380))]),
])
def test_obvious_non_digits_are_refused_by_the_ink_checks(name, kind, make):
    im = Image.new("L", (500, 500), 255)
    make(ImageDraw.Draw(im))
    v, _ = verdict(np.asarray(im))
    assert not v and v.kind == kind, name
    assert v.reason.endswith(".") and "\n" not in v.reason


def test_two_digits_side_by_side_are_refused():
    v, _ = verdict(drawing(("4", 20, 100, 220), ("7", 260, 100, 220)))
    assert not v and v.kind == "side by side"
    assert v.reason == "Two separate marks side by side — this model reads one digit at a time."


def test_judge_uses_the_threshold_only_where_the_checkpoint_has_one():
    plain = parse_config(config(), "config.json")
    fitted = parse_config(config({"temperature": 1.0, "reject_below": 0.6}), "config.json")
    unsure = np.array([0.05] * 8 + [0.41, 0.19])
    assert ood.judge(None, unsure, plain)                    # no threshold: as before
    v = ood.judge(None, unsure, fitted)
    assert not v and v.kind == "unsure"
    assert v.reason == "The model isn't confident this is any digit (best guess 8 at 41.0 %)."
    # Two classes that read alike at one decimal are both named: naming one would pick at random.
    tie = np.array([0.05] * 6 + [0.0, 0.3002, 0.2998, 0.1])
    assert ood.judge(None, tie, fitted).reason == ("The model isn't confident this is any digit "
                                                   "(best guess 7 or 8 at 30.0 % each).")
    assert ood.judge(None, np.eye(10)[3], fitted)
    # The ink checks run for digit models only: a pair of sandals is two marks side by side.
    two = ood.ink_map(drawing(("4", 20, 100, 220), ("7", 260, 100, 220)))
    assert not ood.judge(two, np.eye(10)[3], plain)
    fashion = parse_config(config(dataset="fashion-mnist", class_names=list("abcdefghij")), "c")
    assert ood.judge(two, np.eye(10)[3], fashion)


def test_not_label_follows_the_data_set():
    assert ood.not_label(parse_config(config(), "c")) == "not a digit"
    fashion = parse_config(config(dataset="fashion-mnist", class_names=list("abcdefghij")), "c")
    assert ood.not_label(fashion) == "not a piece of clothing"
    unknown = parse_config(config(dataset="letters", class_names=list("abcdefghij")), "c")
    assert ood.not_label(unknown) == "not one of these 10 classes"
    v = ood.judge(None, np.full(10, 0.1), parse_config(
        config({"reject_below": 0.5}, dataset=None), "c"))
    assert "any of its 10 classes" in v.reason


def test_predictor_label_keeps_the_classes_under_the_verdict(tmp_path):
    p = Predictor(tiny_checkpoint(tmp_path / "ck", {"reject_below": 0.99}), "cpu")
    a = p.analyse(drawing(("4", 120, 90, 300)))
    assert not a.is_class and a.verdict.kind == "unsure"
    label = p.label(a.probs, a.verdict)
    assert label["label"] == "not a digit"
    conf = label["confidences"]
    assert [c["label"] for c in conf] == [p.class_names[i] for i in np.argsort(a.probs)[::-1]]
    assert sum(c["confidence"] for c in conf) == pytest.approx(1, abs=1e-5)


@pytest.mark.process
def test_predict_cli_says_not_a_digit_and_why(tmp_path):
    Image.fromarray(drawing(("3", 20, 100, 220), ("8", 260, 100, 220))).save(tmp_path / "38.png")
    Image.fromarray(drawing(("3", 120, 90, 300))).save(tmp_path / "3.png")
    r = run_module("vit.predict", tmp_path / "38.png", tmp_path / "3.png",
                   "--checkpoint", ROOT / "checkpoints" / "mnist", "--device", "cpu", timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith(f"{tmp_path / '38.png'}: not a digit: Two separate marks side by side")
    assert lines[1].startswith(f"{tmp_path / '3.png'}: 3 ")


def test_photos_are_judged_by_the_model_alone():
    """Unevenly lit paper: vit.preprocessing reads a photo's ink its own way, so the ink checks
    (which would count shadows as marks) stay out; drawings and clean scans get them."""
    two = drawing(("4", 20, 100, 220), ("7", 260, 100, 220)).astype(np.float32)
    assert ood.ink_map(two) is not None
    rng = np.random.default_rng(0)
    light = np.linspace(0.55, 1.0, 500)[None, :] * np.linspace(0.8, 1.0, 500)[:, None]
    photo = np.clip(two / 255 * light + rng.normal(0, 0.02, two.shape), 0, 1)
    assert ood.ink_map(photo) is None
    fitted = parse_config(config({"reject_below": 0.5}), "c")
    assert ood.judge(None, np.eye(10)[4], fitted)
