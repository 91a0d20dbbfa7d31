"""The page and /classify when the input is not one of the model's classes: "not a digit" on the
Label with every class's calibrated probability below it, one sentence saying why, the same
verdict after a model switch; over small checkpoints whose config.json carries a calibration
object (a random tiny model is unsure of everything, so its threshold refuses anything drawn).
Also: a letter through /classify, two digits refused by the ink checks even without calibration,
"not one of these classes" for a model of an unknown data set."""
import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

from vit.checkpoint import save_checkpoint
from vit.data.examples import render_digit
from vit.model import ViT, ViTConfig
from vit.ui import create_app
from vit.ui.canvas import drawing_value
from vit.ui.gradio_patches import VerdictLabel
from vit.ui.render import top_label

META = {"dataset": "mnist", "class_names": [str(i) for i in range(10)],
        "normalization": {"mean": [0.1307], "std": [0.3081]}}


def tiny(folder, seed=0, **meta):
    torch.manual_seed(seed)
    cfg = ViTConfig(dim=16, depth=2, heads=2, mlp_dim=16)
    save_checkpoint(folder, ViT(cfg), {**META, **meta})
    return folder


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("ck")
    tiny(root / "mnist", calibration={"temperature": 0.8, "reject_below": 0.9})
    tiny(root / "plain")                                      # no calibration: never unsure
    tiny(root / "letters", dataset=None, calibration={"temperature": 1.0, "reject_below": 0.9})
    return create_app(root, device="cpu").page


def letter_file(path, ch="K"):
    im = Image.new("L", (500, 500), 255)
    try:
        font = ImageFont.truetype("DejaVuSans.ttf", 300)
    except OSError:
        font = ImageFont.load_default(size=300)
    ImageDraw.Draw(im).text((120, 60), ch, fill=0, font=font)
    im.save(path)
    return str(path)


def test_classify_a_letter_is_not_a_digit_with_every_class_listed(page, tmp_path):
    value = page.classify(letter_file(tmp_path / "k.png"))
    assert value["label"] == "not a digit"
    shown = VerdictLabel().postprocess(value)                 # what /classify sends
    assert shown.label == "not a digit" and len(shown.confidences) == 10
    confs = [c.confidence for c in shown.confidences]
    assert confs == sorted(confs, reverse=True) and sum(confs) == pytest.approx(1, abs=1e-5)


def test_the_verdict_label_survives_gradios_session_copy(page, tmp_path):
    """After a handler returns gr.update() for an output, Gradio keeps `block.__class__(**args)`
    for that session: a patched plain gr.Label lost the patch there, and every later "not a
    digit" answer of the session failed with an internal error. The copy keeps it, and the page
    still renders it as a Label."""
    from vit.ui.gradio_patches import FreeDropdown, FreeSlider
    value = page.classify(letter_file(tmp_path / "k.png"))
    original = VerdictLabel(num_top_classes=10, label="x", render=False)
    copy = original.__class__(**{**original.constructor_args, "render": False})
    assert copy.postprocess(value).label == "not a digit"
    assert copy.get_block_name() == "label"
    slider = FreeSlider(1, 2, value=1, render=False)
    again = slider.__class__(**{**slider.constructor_args, "maximum": 3, "render": False})
    assert again.preprocess(12) == 12 and again.get_block_name() == "slider"
    assert FreeDropdown(["a"], render=False).preprocess("../etc") == "../etc"


def test_the_page_says_why_in_one_sentence(page, tmp_path):
    out = page.analyse_upload(page.visit(), letter_file(tmp_path / "k.png"), "mnist", True, 2, 1)
    status, label = out["status"], out["label"]
    title, reason = status.split("\n")
    assert title == "### ⊘ Not a digit"
    assert reason.startswith("The model isn't confident this is any digit (best guess ")
    assert reason.endswith(" %).") and top_label(label) == "not a digit"


def test_a_model_without_calibration_answers_as_before(page, tmp_path):
    out = page.analyse_upload(page.visit(), letter_file(tmp_path / "k.png"), "plain", True, 2, 1)
    status, label = out["status"], out["label"]
    assert "reads this as" in status and len(label) == 10 and "confidences" not in label


def test_ink_checks_refuse_two_digits_even_without_calibration(page, tmp_path):
    im = Image.new("L", (600, 400), 255)
    im.paste(render_digit("1", 240, 20), (40, 80))
    im.paste(render_digit("2", 240, 20), (320, 80))
    im.save(tmp_path / "12.png")
    out = page.analyse_upload(page.visit(), str(tmp_path / "12.png"), "plain", True, 2, 1)
    status, label = out["status"], out["label"]
    assert "Two separate marks side by side" in status and "On its own the model would read" in status
    assert top_label(label) == "not a digit"


def test_a_model_of_an_unknown_data_set_says_not_one_of_these_classes(page, tmp_path):
    out = page.analyse_upload(page.visit(), letter_file(tmp_path / "k.png"), "letters", True, 2, 1)
    status, label = out["status"], out["label"]
    assert "Not one of these 10 classes" in status and "any of its 10 classes" in status
    assert top_label(label) == "not one of these 10 classes"


def test_the_verdict_stays_after_a_model_switch_and_back(page, tmp_path):
    ink = np.zeros((500, 500, 4), np.uint8)
    ink[..., 3] = 255 - np.asarray(Image.open(letter_file(tmp_path / "k.png")))
    Image.fromarray(ink, "RGBA").save(tmp_path / "layer.png")
    visit = page.visit()
    out = page.analyse_drawing(visit, drawing_value(tmp_path / "layer.png"), "mnist", True, 2, 1)
    shown = visit.record.shown
    assert top_label(out["label"]) == "not a digit"
    assert shown.source.shape == (160, 160) and shown.source.dtype == np.uint8    # the ink map
    page.choose_model(visit, "plain")
    assert "reads this as" in page.reanalyse(visit)["status"]
    page.choose_model(visit, "mnist")                   # back: read again, judged again
    back = page.reanalyse(visit)
    assert back["status"] == out["status"] and top_label(back["label"]) == "not a digit"


def test_the_first_view_survives_a_refused_example(page):
    ink = 255 - np.asarray(render_digit("7", 400, 26), np.uint8)
    status = page.analyse_drawing(page.visit(), {**drawing_value(ink), "example": "7"}, "mnist",
                                  True, 2, 1)["status"]
    assert status.startswith("### Example: a drawn 7 — read as **not a digit**")


def test_a_refused_test_image_is_said_refused_first_and_scored_second():
    """A sixth trial: "Test image #4176 (true class 2): read as 2 (19.5 %) — ✓ right" over a strip
    whose answer said "Not a digit". The headline says the page's answer first, as the strip
    does, then how the test set's score counts it."""
    from types import SimpleNamespace

    from vit.ui.render import test_headline
    p = SimpleNamespace(class_names=[str(d) for d in range(10)], not_label="not a digit")
    probs = np.full(10, 0.0894, np.float32)
    probs[2] = 0.195
    refused = SimpleNamespace(probs=probs, is_class=False,
                              verdict=SimpleNamespace(reason="The model isn't confident this is any digit."))
    said = test_headline(p, refused, ("mnist", "MNIST", 4176, "2"))
    head, why = said.split("\n")
    assert head == "### Test image #4176 (true class **2**): not a digit — best guess **2** (19.5 %)"
    assert why.endswith("counts only the best guess: ✓ right there.")
    read = test_headline(p, SimpleNamespace(probs=probs, is_class=True), ("mnist", "MNIST", 4, "7"))
    assert read == "### Test image #4 (true class **7**): read as **2** (19.5 %) — ✗ wrong"
