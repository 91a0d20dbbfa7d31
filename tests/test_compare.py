"""Two models side by side (vit/ui/compare_panel.py) through the page's own handlers: the second
model's answer, strip and matching maps for the input on screen, where they disagree, what a
client may send as the second model, and the test images one gets right and the other wrong."""
from types import SimpleNamespace

import numpy as np
import pytest

from vit.data.examples import render_digit
from vit.testset import Results
from vit.ui import compare_panel, create_app, views
from vit.ui import page as page_module
from vit.ui.canvas import drawing_value
from vit.ui.render import COMPARE, NO_SECOND


@pytest.fixture(scope="module")
def page():
    return create_app().page


@pytest.fixture
def seven(page):
    visit = page.visit()
    ink = 255 - np.asarray(render_digit("7", 400, 26), np.uint8)
    page.open_panel(visit, views.OPEN, True)
    page.analyse_drawing(visit, drawing_value(ink), "mnist", True, 6, 1)
    page.why(visit)                              # as the page's lane follows every analysis
    # Opening the panel sends its views alone: no other view reads whether it is open.
    assert page.open_panel(visit, compare_panel.OPEN, True) == {
        "compare_text": NO_SECOND, "compare_strip": None, "compare_maps": None}
    return visit


def test_a_model_beside_itself_is_refused_and_the_two_mnist_models_are_compared(page, seven):
    """Beside itself a model only agrees with itself: the panel says to pick another. The
    bundled small MNIST model (139 k parameters, 7-px patches: a 4x4 grid) is the one to pick."""
    from vit.ui.compare_panel import SAME_MODEL
    out = compare_panel.choose_compare(page, seven, "mnist")
    assert set(out) == set(COMPARE)
    assert out["compare_text"] == SAME_MODEL and out["compare_maps"] is None
    out = compare_panel.choose_compare(page, seven, "mnist-small")
    text = out["compare_text"]
    # Named as the Model menu names them, not by their folders (a trial: "mnist-small reads 7").
    assert "Handwritten digits (MNIST), 514 k parameters reads **7**" in text, text
    assert "Handwritten digits (MNIST), 139 k parameters reads **7**" in text, text
    assert "mnist" not in text.replace("(MNIST)", "") and "They agree." in text
    assert out["compare_strip"]["grid"] == 4 and out["compare_maps"].ndim == 3


def test_a_photo_model_beside_the_digit_model(page, seven):
    out = compare_panel.choose_compare(page, seven, "cifar10")
    text = out["compare_text"]
    assert "514 k parameters reads **7**" in text and "CIFAR-10" in text, text
    # Models of different classes neither agree nor disagree (a trial: a digit model and the
    # clothing model "disagree" on a 7).
    assert "know different classes" in text and "agree" not in text, text
    assert out["compare_strip"]["grid"] == 8 and out["compare_strip"]["colour"]
    assert out["compare_maps"].shape[0] > 2 * 168
    # the second model follows the page's layer and head: layer 3 of 6 is layer 3 of 6 there too
    moved = page.explore(seven, 3, 2)
    assert moved["compare_strip"]["layer"] == 3 and moved["compare_strip"]["head"] == 2


@pytest.mark.parametrize("sent", [None, 3, "../../etc/passwd", "MNIST", ["mnist"], "x" * 10_000])
def test_anything_else_a_client_sends_means_no_second_model(page, seven, sent):
    """As the page wires it (vit/ui/boundary.py): none, or one line and no second model."""
    import functools

    import gradio as gr

    from vit.ui import boundary
    try:
        out = boundary.parsed(functools.partial(compare_panel.choose_compare, page),
                             page.models.names)(seven, sent)
    except gr.Error as e:
        assert "no such model" in e.message and "\n" not in e.message
    else:
        assert out == {} or out["compare_text"] == NO_SECOND
    assert seven.record.compare == ""


def test_nothing_is_computed_while_the_panel_is_closed(page, seven):
    page.open_panel(seven, compare_panel.OPEN, False)
    assert compare_panel.choose_compare(page, seven, "cifar10") == {}
    assert seven.record.compare == "cifar10"              # remembered for when it opens
    assert "(CIFAR-10) reads" in page.open_panel(seven, compare_panel.OPEN, True)["compare_text"]


def test_a_second_model_that_cannot_answer_leaves_the_page_alone(page, seven, monkeypatch):
    compare_panel.choose_compare(page, seven, "cifar10")
    real = page.predictor

    def broken(name):
        if name == "cifar10":
            raise page_module.user_error("can't load model 'cifar10': its weights are damaged")
        return real(name)
    monkeypatch.setattr(page, "predictor", broken)
    out = page.explore(seven, 2, 1)
    assert out["compare_text"] == "⚠️ can't load model 'cifar10': its weights are damaged"
    assert out["compare_maps"] is None and out["compare_strip"] is None
    assert out["row"] is not None and out["pipeline"]["layer"] == 2      # the page's own views


def test_each_map_keeps_its_models_scale_and_says_it(page, seven, monkeypatch):
    """Issue 49, 4 (one quantity, one scale wherever it is drawn): in Compare each model's maps
    are on the scale the page draws them on everywhere else (the strip's: to 5x the model's even
    share, or the map's max), and the picture says so, since the two models' ends differ (a
    seventh trial asked why 10.0 % beside 29.4 %; an eighth, on one shared scale, read the page
    model's rollout to 29.4 % in Compare and to 10.0 % in its strip)."""
    from vit.pictures import attention_maps
    from vit.pictures.attention_maps import scale_top
    drawn, real = [], attention_maps.heat_overlay
    monkeypatch.setattr(attention_maps, "heat_overlay", lambda img, m, top, size: drawn.append(
        (float(m.max()), m.shape[0], top)) or real(img, m, top, size))
    compare_panel.choose_compare(page, seven, "mnist-small")
    first = page.models.get("mnist").config.model.heads        # tiles a row: rollout + heads
    assert [g for _, g, _ in drawn] == [7] * (1 + first) + [4] * (1 + 4)
    # every map to 5x its model's even share or its own max, as the strip and the panels draw it
    assert all(top == pytest.approx(scale_top(peak, g)) for peak, g, top in drawn), drawn
    assert drawn[0][2] != drawn[1 + first][2]            # (the two models' rollout ends differ)


def test_matching_layers_across_depths():
    assert [compare_panel.matching_layer(i, 6, 12) for i in range(6)] == [1, 3, 5, 7, 9, 11]
    assert [compare_panel.matching_layer(i, 12, 6) for i in range(12)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert compare_panel.matching_layer(0, 1, 1) == 0


def results(preds, labels, dataset="mnist"):
    probs = np.eye(10, dtype=np.float32)[preds]
    return Results(dataset, [str(i) for i in range(10)], np.zeros((len(labels), 28, 28), np.uint8),
                   np.array(labels), probs)


def test_the_test_images_one_gets_right_and_the_other_wrong():
    labels = [0, 1, 2, 3, 4, 5]
    a = results([0, 1, 2, 9, 9, 5], labels)       # wrong on 3, 4
    b = results([0, 9, 2, 3, 9, 9], labels)       # wrong on 1, 4, 5
    text, picture = compare_panel.differences(a, b, ("A", "B"), a.class_names)
    assert "Only A right: **2**" in text and "only B right: **1**" in text and "both wrong: 1" in text
    assert "A 66.7 %" in text and "B 50.0 %" in text
    assert picture.shape[0] == 2 * (20 + 84 + 30)
    _, one_way = compare_panel.differences(a, a, ("A", "A2"), a.class_names)
    assert one_way.shape[0] == 2 * 20                  # nothing either way: two short lines
    text, picture = compare_panel.differences(a, results([0] * 6, labels, "fashion-mnist"),
                                              ("A", "C"), a.class_names)
    assert "different data sets" in text and picture is None


def test_the_differences_button_without_a_second_model(page, seven):
    compare_panel.choose_compare(page, seven, "")
    out = compare_panel.compare_on_test_set(page, seven, progress=SimpleNamespace(tqdm=lambda *a, **k: a[0]))
    assert out["compare_differences_text"] == NO_SECOND
