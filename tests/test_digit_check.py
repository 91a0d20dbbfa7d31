"""The clothing model's second opinion (vit/digit_check.py, `Predictor.checked`): a scanned digit
it took for a garment is "not a piece of clothing" once the digit model beside it reads the digit
surely; a garment it is sure of is never shown to the digit model; a check naming a path, odd
numbers or a missing digit model is refused or switched off, never followed."""
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from bench.page_drawings import filled_trouser
from vit.checkpoint import CONFIG, CheckpointError, parse_config, read_config
from vit.data.examples import render_digit
from vit.digit_check import main, set_digit_check
from vit.explain import ood
from vit.inference import Predictor

ROOT = Path(__file__).resolve().parent.parent
FASHION = ROOT / "checkpoints" / "fashion-mnist"


def scanned(digit: str, width: int = 22) -> Image.Image:
    """A digit as another writer's 8x8 scan is uploaded (dark on white, 17 grey levels, 16x
    blocky): the kind of picture the clothing model alone took for a garment six times in ten."""
    small = render_digit(digit, width=width).convert("L").resize((8, 8), Image.BOX)
    levels = np.round(np.asarray(small) / 255 * 16) / 16 * 255
    return ImageOps.invert(Image.fromarray(levels.astype(np.uint8))).resize((128, 128),
                                                                           Image.NEAREST)


@pytest.fixture(scope="module")
def clothing():
    return Predictor(str(FASHION), "cpu")


def test_a_scanned_digit_is_not_a_piece_of_clothing_and_a_garment_still_is(clothing):
    assert clothing.config.digit_check["model"] == "mnist"
    scan = scanned("2")
    alone = clothing.analyse_input(*clothing.read(scan))          # no source: no second opinion
    assert alone.is_class, "the clothing model alone takes this scan for a garment"
    a = clothing.analyse(scan)
    assert not a.is_class and a.verdict.kind == "digit"
    assert a.verdict.reason.startswith("The digit model reads this as 2 (")
    assert a.verdict.reason.endswith("%): a digit, not a piece of clothing.")
    assert a.probs.argmax() == alone.probs.argmax()                # its own answer is unchanged
    trouser = clothing.analyse(filled_trouser())
    assert trouser.is_class and clothing.class_names[int(trouser.probs.argmax())] == "Trouser"


def test_a_sure_garment_is_never_shown_to_the_digit_model(clothing, monkeypatch):
    """Only where the clothing model is unsure (its best class below `own_below`)."""
    asked = []
    digits = clothing.digit_model()
    monkeypatch.setattr(digits, "glance", lambda *a: asked.append(a) or pytest.fail("asked"))
    a = clothing.analyse(filled_trouser())
    assert a.probs.max() >= clothing.config.digit_check["own_below"] and a.is_class
    assert asked == []


@pytest.mark.parametrize("check, field", [
    ({"model": "../mnist", "digit_at_least": 0.99, "own_below": 0.9}, "model"),
    ({"model": "/tmp/x", "digit_at_least": 0.99, "own_below": 0.9}, "model"),
    ({"model": 7, "digit_at_least": 0.99, "own_below": 0.9}, "model"),
    ({"model": "mnist", "digit_at_least": 1.5, "own_below": 0.9}, "digit_at_least"),
    ({"model": "mnist", "digit_at_least": 0.99, "own_below": 0}, "own_below"),
    ({"model": "mnist", "digit_at_least": "0.99", "own_below": 0.9}, "digit_at_least"),
    ("mnist", "digit_check"),
])
def test_a_digit_check_naming_a_path_or_odd_numbers_is_refused(check, field):
    config = read_config(FASHION).to_dict()
    config["calibration"]["digit_check"] = check
    with pytest.raises(CheckpointError, match=f"digit_check.*{field}|{field}.*must"):
        parse_config(config, "config.json")


def test_without_its_digit_model_the_check_is_off_and_says_so(tmp_path, caplog):
    """A clothing checkpoint copied alone: answers as the model alone, one line in the log."""
    alone = tmp_path / "fashion-mnist"
    shutil.copytree(FASHION, alone)
    p = Predictor(str(alone), "cpu")
    with caplog.at_level(logging.WARNING, logger="vit"):
        a = p.analyse(scanned("2"))
        p.analyse(scanned("4", 36))
    assert a.is_class
    said = [m for m in caplog.messages if "digit check" in m]
    assert len(said) == 1 and said[0].startswith("the digit check is off: ") and "mnist" in said[0]
    # A digit check naming a model of other classes is off too.
    shutil.copytree(FASHION, tmp_path / "clothes")
    config = json.loads((alone / CONFIG).read_text())
    config["calibration"]["digit_check"]["model"] = "clothes"
    (alone / CONFIG).write_text(json.dumps(config))
    assert Predictor(str(alone), "cpu").digit_model() is None


def test_the_command_refuses_a_path_and_takes_the_check_away(tmp_path, capsys):
    folder = tmp_path / "fashion-mnist"
    shutil.copytree(FASHION, folder)
    before = (folder / CONFIG).read_text()
    assert main([str(folder), "--digits", "../mnist"]) == 2
    assert "digit_check.model must be a checkpoint folder's name" in capsys.readouterr().err
    assert (folder / CONFIG).read_text() == before                 # nothing written
    assert main([str(folder), "--digits", "mnist"]) == 2           # no digit model beside it
    assert "no digit model of that name" in capsys.readouterr().err
    assert set_digit_check(folder, "", 0.995, 0.9, tmp_path, "python -m vit.digit_check") is None
    assert "digit_check" not in read_config(folder).calibration
    assert Predictor(str(folder), "cpu").analyse(scanned("2")).is_class


def test_only_a_digit_the_digit_model_is_sure_of_and_accepts_is_refused(clothing, tmp_path):
    """A scan the digit model itself calls "not a digit" (a thin-stroked 6 it is unsure of; the
    8 this test used before, the coarse-scan fine-tune reads) stays the clothing model's answer;
    so does one it reads below `digit_at_least`."""
    six = clothing.analyse(scanned("6", width=14))
    assert six.is_class and not clothing.digit_model().analyse(scanned("6", width=14)).is_class
    sure = float(clothing.digit_model().analyse(scanned("2")).probs.max())
    for name in ("fashion-mnist", "mnist"):
        shutil.copytree(ROOT / "checkpoints" / name, tmp_path / name)
    config = json.loads((tmp_path / "fashion-mnist" / CONFIG).read_text())
    assert sure < 1 - 1e-4          # (the check's quick path agrees with this one to ~1e-6)
    for at_least, refused in ((sure - 1e-4, True), (sure + 1e-4, False)):
        config["calibration"]["digit_check"]["digit_at_least"] = at_least
        (tmp_path / "fashion-mnist" / CONFIG).write_text(json.dumps(config))
        a = Predictor(str(tmp_path / "fashion-mnist"), "cpu").analyse(scanned("2"))
        assert a.is_class != refused, at_least


def test_the_digit_models_own_rules_and_the_clothing_models_refusals_stand(clothing, monkeypatch):
    """A picture the digit model refuses by any of its rules is no digit, however sure its
    probability; a picture the clothing model already refuses keeps its own reason."""
    zero = clothing.analyse(scanned("0"))
    assert not zero.is_class and zero.verdict.kind == "unsure"
    digits = clothing.digit_model()
    monkeypatch.setattr(digits, "judge", lambda *a: ood.Verdict(False, "Two digits.", "side by side"))
    assert clothing.analyse(scanned("2")).is_class


def test_the_page_and_the_api_say_which_digit_it_is():
    """Drawn on the canvas with the clothing model chosen, and sent to classify_image: "Not a
    piece of clothing", and the digit model's reading as the reason."""
    import base64
    import io

    from vit.ui import create_app
    from vit.ui.canvas import drawing_value
    from vit.ui.tools import Tools
    app = create_app(ROOT / "checkpoints", device="cpu")
    page = app.page
    visitor = page.visit()
    page.choose_model(visitor, "fashion-mnist")
    ink = 255 - np.asarray(scanned("2"))                  # as the canvas sends a drawing back
    shown = page.analyse_drawing(visitor, drawing_value(ink, seq=3), "fashion-mnist", False, 6, 1)
    assert "Not a piece of clothing" in shown["status"], shown["status"]
    assert "The digit model reads this as 2 (" in shown["status"]
    # A lane that names the strip alone (the "why" lane sends it again with its maps) says the
    # same verdict: it once left the digit check out, and the strip read "Probably a Bag" under
    # "Not a piece of clothing" (found by tests/test_page_events.py).
    strip = page.view(visitor.record, ["pipeline"])["pipeline"]
    assert strip["refused"] and strip["answer"] == shown["pipeline"]["answer"], strip["answer"]
    png = io.BytesIO()
    scanned("2").save(png, "PNG")
    answer = json.loads(Tools(page)._classify(base64.b64encode(png.getvalue()).decode(),
                                              "fashion-mnist"))
    assert answer["is_class"] is False and answer["answer"] == "not a piece of clothing"
    assert answer["reason"].startswith("The digit model reads this as 2 (")


def test_the_model_card_says_digits_are_not_clothing():
    from vit.hub import CARD, model_card
    config = json.loads((FASHION / CONFIG).read_text())
    card = model_card(config)
    assert "| digits are not one of these | where its best class is below 80.00 %, the digit " \
           "model `mnist` beside it reading a digit at 99.50 % or more:" in card
    assert card == (FASHION / CARD).read_text()                     # the bundled card is current


def test_a_refused_outline_on_the_clothing_model_is_told_to_fill_it_and_a_digit_is_not():
    """A trial: an outline garment was refused and nothing said the model reads filled shapes."""
    from PIL import ImageDraw

    from bench.page_drawings import TROUSER
    from vit.ui import create_app
    from vit.ui.canvas import drawing_value
    page = create_app(ROOT / "checkpoints", device="cpu").page
    visitor = page.visit()
    page.choose_model(visitor, "fashion-mnist")
    outline = Image.new("L", (280, 280), 0)
    ImageDraw.Draw(outline).line([(280 * x, 280 * y) for x, y in TROUSER], fill=255, width=8)
    shown = page.analyse_drawing(visitor, drawing_value(np.asarray(outline), seq=2),
                                 "fashion-mnist", False, 6, 1)
    assert "Not a piece of clothing" in shown["status"]
    assert "An outline? Tap inside it with **Fill**." in shown["status"]
    digit = page.analyse_drawing(visitor, drawing_value(255 - np.asarray(scanned("2")), seq=3),
                                 "fashion-mnist", False, 6, 1)
    assert "The digit model reads this as 2" in digit["status"] and "Fill" not in digit["status"]
