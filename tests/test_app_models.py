"""The app built by `create_app` over test folders of checkpoints: bad checkpoints are skipped at
start-up with one line, a folder without a usable one says how to get one, a broken model is
refused at a switch while the previous one stays, and every view works for any patch grid.

Also: a bad default replaced by a good one; no usable checkpoint (empty, misspelt, all bad) is
one line from `python app.py` too; every view for 2x2, 4x4, 14x14 grids and 56-px inputs; hostile
slider, patch and model values, model names of any JSON type; the canvas: hostile drawing values
one line each, Sketchpad-style file paths never read, live answers overtaken by a newer drawing
change nothing, a 13000x13000 drawing refused undecoded, a canvas inked all over says so;
examples and the first view; the step-by-step panel works only while open; a big model's
attention picture (each layer's mean and the chosen layer's heads, clicks); small session state;
model switches: a test image kept as is and keeping its origin, a re-read never replacing a newer
drawing or a Clear, drawing <-> photo models putting the new model's example on the canvas, the
open test-set gallery emptied until the new answers are in; the answer follows the tab in view
and the headline is the tab's own (Upload with nothing uploaded, back on Draw after an upload or
a removed upload, back on a tab whose input is on screen, answers landing on another tab, Test
set with and without data); Gradio's repeated upload event answered once (and a removed file
uploaded again answered); a layer or head typed out of range put back in range on its slider."""
import json
import pickle
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
import torch
from conftest import ROOT
from PIL import Image

from vit.checkpoint import save_checkpoint
from vit.data.examples import render_digit
from vit.model import ViT, ViTConfig
from vit.pictures.attention_maps import (
    CAPTION,
    MINI,
    _attention_grid_template,
    _factor,
    attention_grid_picture,
)
from vit.ui import NoModelsError, create_app, mechanism_panel, views, why_panel
from vit.ui.canvas import drawing_value as canvas_value
from vit.ui.models import Models
from vit.ui.record import Record, Refused, Shown
from vit.ui.render import EVERY, PICTURES, WHY, top_label

META = {"dataset": "mnist", "class_names": [str(i) for i in range(10)],
        "normalization": {"mean": [0.1307], "std": [0.3081]}}



def switch(page, visit, tab: str, *args):
    """A tab selected, as the page sends it: the tab noted at once, then that tab's answer."""
    page.note_tab(visit, tab)
    return getattr(page, f"to_{tab}_tab")(visit, *args)

def tiny(folder, patch_size=4, image_size=28, seed=0, **meta):
    torch.manual_seed(seed)
    cfg = ViTConfig(image_size=image_size, patch_size=patch_size, dim=16, depth=2, heads=2, mlp_dim=16)
    save_checkpoint(folder, ViT(cfg), {**META, **meta})
    return folder


def pickled(folder, marker):
    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    (folder / "model.safetensors").write_bytes(pickle.dumps(Payload()))


@pytest.fixture(scope="module")
def broken_root(tmp_path_factory):
    """mnist is fine; the others are broken in the ways people and attackers break them."""
    root = tmp_path_factory.mktemp("ckpts")
    tiny(root / "mnist")
    trunc = tiny(root / "truncated")
    data = (trunc / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(data[: len(data) // 3])
    mism = tiny(root / "mismatched")
    cfg = json.loads((mism / "config.json").read_text())
    cfg["model"]["dim"] *= 2
    (mism / "config.json").write_text(json.dumps(cfg))
    pickled(tiny(root / "pickled"), root / "payload-ran")
    nan = tiny(root / "nan")                  # passes the header check; refused when loaded
    from safetensors.torch import load_file, save_file
    w = load_file(nan / "model.safetensors")
    w["head.weight"][0, 0] = float("nan")
    save_file(w, nan / "model.safetensors")
    return root


def test_bad_checkpoints_are_skipped_at_start_up_with_one_line_each(broken_root):
    warnings = []
    models = Models(broken_root, "cpu", warn=warnings.append)
    assert models.default == "mnist" and set(models.names) == {"mnist", "nan"}
    assert len(warnings) == 3 and all("\n" not in w for w in warnings)
    assert not any(str(broken_root) in w for w in warnings)          # no server paths
    assert not (broken_root / "payload-ran").exists()                # the pickle never ran


def test_a_switch_to_a_model_that_fails_to_load_keeps_the_previous_one(broken_root):
    page = create_app(broken_root, device="cpu").page
    with pytest.warns(UserWarning, match="NaN") as w:       # gr.Warning outside a request
        visit = page.visit()
        out = page.choose_model(visit, "nan")
    message = str(w[0].message)
    assert "\n" not in message and str(broken_root) not in message
    assert out["model"]["value"] == "mnist" and visit.record.model == "mnist"
    assert "nan" not in page.models.names                  # not offered again


def test_a_bad_default_model_is_skipped_for_a_good_one(tmp_path):
    pickled(tiny(tmp_path / "mnist"), tmp_path / "ran")
    tiny(tmp_path / "fashion-mnist", dataset="fashion-mnist")
    warnings = []
    models = Models(tmp_path, "cpu", warn=warnings.append)
    assert models.default == "fashion-mnist" and models.names == ["fashion-mnist"]
    assert len(warnings) == 1 and "mnist" in warnings[0]


@pytest.mark.parametrize("setup", ["empty", "missing", "all bad"])
def test_no_usable_checkpoint_says_how_to_get_one(tmp_path, setup):
    root = tmp_path / "ckpts"
    if setup != "missing":
        root.mkdir()
    if setup == "all bad":
        pickled(tiny(root / "mnist"), tmp_path / "ran")
    with pytest.raises(NoModelsError, match="python -m vit.train") as e:
        Models(root, "cpu", warn=lambda line: None)
    assert "\n" not in str(e.value)


@pytest.mark.server
def test_app_py_with_a_misspelt_checkpoints_folder_exits_with_one_line(tmp_path):
    """The one real `python app.py` of these checks: its exit status and stderr as a user sees
    them."""
    import os
    env = {**os.environ, "VIT_CHECKPOINTS": str(tmp_path / "chekpoints"), "GRADIO_SERVER_PORT": "1"}
    r = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "python -m vit.train" in lines[0]


@pytest.fixture(scope="module")
def grids_page(tmp_path_factory):
    root = tmp_path_factory.mktemp("grids")
    tiny(root / "mnist", patch_size=4)
    tiny(root / "grid4", patch_size=7)
    tiny(root / "grid2", patch_size=14)
    tiny(root / "grid14", patch_size=2)
    tiny(root / "big", image_size=56, patch_size=8, dataset=None)     # no data set: any size
    return create_app(root, device="cpu").page


def drawing_value(tmp_path, digit="4", angle=0.0):
    ink = 255 - np.asarray(render_digit(digit, 500, 34, angle=angle), np.uint8)
    layer = np.zeros((500, 500, 4), np.uint8)
    layer[..., 3] = ink
    Image.fromarray(layer, "RGBA").save(tmp_path / "layer.png")
    return canvas_value(tmp_path / "layer.png")


@pytest.mark.parametrize("name, grid, size", [("grid4", 4, 28), ("grid2", 2, 28), ("grid14", 14, 28),
                                              ("big", 7, 56)])
def test_every_view_works_for_any_grid_and_size(grids_page, tmp_path, name, grid, size):
    """A --patch-size 7 or 14 checkpoint crashed the app (clicked patch 24, token strip tiles)."""
    page, visit = grids_page, grids_page.visit()
    page.open_panel(visit, views.OPEN, True)              # the folded panels, opened: drawn from now on
    page.open_panel(visit, why_panel.OPEN, True, page.EVERY)
    out = page.analyse_drawing(visit, drawing_value(tmp_path), name, True, 2, 1)
    shown = visit.record.shown
    assert "reads this as" in out["status"] and len(out["label"]) == 10
    assert all(isinstance(out[n], np.ndarray) and out[n].dtype == np.uint8 for n in PICTURES)
    assert isinstance(shown, Shown) and shown.image.shape == (size, size)
    # The patch clicked on another model (24 of 7x7, say) is out of range here: no crash.
    visit.record = replace(visit.record, patch=48)
    out = page.explore(visit, 2, 2)
    pick = page.pick_patch(visit, SimpleNamespace(index=[1.0, 1.0]))["pick"]
    assert pick.shape[0] == pick.shape[1] and out["row"].dtype == np.uint8
    assert out["layer"] == out["head"] == gr.update()
    cell = pick.shape[0] / grid
    evt = SimpleNamespace(index=[cell * (grid - 0.5), cell * (grid - 0.5)])
    assert {"pick", "row"} <= set(page.pick_patch(visit, evt))
    assert visit.record.patch == grid * grid - 1
    assert views.rescale(page, visit, False)["grid"] is not None
    # A click on the last map of the layers x heads picture opens layer 2, head 2 (1-based).
    L, H = 2, 2
    tile = size * max(1, 112 // size)
    y, x = _attention_grid_template(L, H, tile)[1][L - 1][H - 1]
    assert page.pick_head(visit, SimpleNamespace(index=[x + 3, y + 3])) == {"layer": L, "head": H}
    assert page.pick_head(visit, SimpleNamespace(index=[float("nan"), 3])) == {}
    # What drove the answer: both maps, for the answer and for another class, and heads off.
    why = page.why(visit)
    rel, occ, text, heads, glance, sanity, said = (why[n] for n in WHY)
    assert sanity is None                 # the randomisation check waits for the button
    # A model never measured leads with relevance, and says it was never measured.
    assert "by [relevance](#term-relevance)" in said and "never tested" in said
    assert rel.shape[1] == occ.shape[1] and rel.dtype == occ.dtype == np.uint8
    # The small copy beside the answer: the same map, drawn at about the size it is shown (its
    # labels were ~7 px tall when the big picture was shrunk into the box).
    w = glance.shape[1]                   # 192 px, less to fit the grid's patches whole
    assert 160 <= w <= 192 < rel.shape[1]
    small = np.asarray(Image.fromarray(rel[:rel.shape[1]]).resize((w, w), Image.BILINEAR))
    assert np.abs(small.astype(int) - glance[:w].astype(int)).mean() < 12
    assert "Explaining" in text and "Nothing switched off" in heads
    why_panel.heads_switched(page, visit, ["0,0", "1,1"])
    assert "Explaining **3**" in why_panel.choose_target(page, visit, 3)["faithfulness"]
    assert "With 2 heads off" in page.why(visit)["ablation"]
    assert "With 1 head off" in why_panel.heads_switched(page, visit, ["1,0"])["ablation"]
    measured = why_panel.measure(page, visit)
    assert all(k in measured["faithfulness"] for k in ("rollout", "relevance", "occlusion",
                                                       "raw attention", "random order", "insertion"))
    assert measured["sanity"].ndim == 3
    # Switch to the 7x7 model: the same input goes through it.
    page.choose_model(visit, "mnist")
    again = page.reanalyse(visit)
    assert "reads this as" in again["status"] and visit.record.shown.model == "mnist"


def test_hostile_target_and_head_values_are_ignored(grids_page, tmp_path):
    visit = grids_page.visit()
    grids_page.open_panel(visit, why_panel.OPEN, True, grids_page.EVERY)
    label = grids_page.analyse_drawing(visit, drawing_value(tmp_path), "grid4", True, 2, 1)["label"]
    answer = label["label"] if "confidences" in label else max(label, key=label.get)
    for target in (None, "x", 99, -7, 1e30, [1], {"a": 1}):
        chosen = why_panel.choose_target(grids_page, visit, target)
        assert f"Explaining **{answer}**" in chosen["faithfulness"]
    heads = why_panel.heads_switched(grids_page, visit, ["9,9", "a,b", "0", None, "0,0", "0,0"])["ablation"]
    assert "With 1 head off" in heads
    assert "Nothing switched off" in why_panel.heads_switched(grids_page, visit, "0,0")["ablation"]
    # Nothing on screen: the answer's map says nothing, the headline asks for a drawing; the
    # closed panels are not drawn.
    assert grids_page.why(grids_page.visit()) == {"glance": None, "glance_text": "",
                                                  "pipeline": None,
                                                  "status": "### ✏️ Draw a digit in the box"}


def test_hostile_slider_and_patch_values_are_clamped(grids_page, tmp_path):
    visit = grids_page.visit()
    out = grids_page.analyse_drawing(visit, drawing_value(tmp_path), "grid4", True, 99, -5)
    assert "reads this as" in out["status"]
    out = grids_page.analyse_drawing(grids_page.visit(), drawing_value(tmp_path), "grid4", None,
                                     "x", None)
    assert "reads this as" in out["status"]
    assert grids_page.explore(visit, [], {"a": 1})["layer"]["value"] == 2      # back in range
    with pytest.raises(gr.Error, match="no model named"):
        grids_page.analyse_drawing(visit, drawing_value(tmp_path), "../../etc", True, 1, 1)


def test_session_state_is_small(grids_page, tmp_path):
    """Gradio keeps state an hour after a visitor leaves: a drawing keeps < 40 KB, not the
    500x500 canvas (2 MB as arrays)."""
    visit = grids_page.visit()
    grids_page.analyse_drawing(visit, drawing_value(tmp_path), "mnist", True, 2, 1)
    shown = visit.record.shown
    assert shown.source.nbytes + shown.image.nbytes < 40_000


@pytest.mark.process
def test_a_huge_drawing_is_refused_before_it_is_decoded(grids_page, tmp_path):
    """A 13000x13000 Sketchpad value took the server from 1.5 to 4.5 GB."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    bomb = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 13000, 13000, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b""))
    (tmp_path / "bomb.png").write_bytes(bomb)
    value = canvas_value(tmp_path / "bomb.png")
    with pytest.warns(UserWarning, match="13000x13000 pixels; the canvas is 400"):
        out = grids_page.analyse_drawing(grids_page.visit(), value, "mnist", True, 2, 1)
    assert out["label"] is None and "13000x13000 pixels; the canvas is 400" in out["status"]
    # Its memory in a fresh process: a high-water mark means nothing in a long one.
    from conftest import PEAK
    code = PEAK + (
        "import sys\n"
        "from vit.preprocessing.decode import PreprocessError, decode\n"
        "from vit.ui.canvas import drawing_value, read_drawing\n"
        "value = drawing_value(sys.argv[1])\n"
        "before = peak()\n"
        "try:\n"
        "    decode(read_drawing(value))\n"
        "except PreprocessError as e:\n"
        "    print('refused:', e)\n"
        "print((peak() - before) // 1024)\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "bomb.png")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "refused: " in r.stdout, r.stderr[-1000:]
    assert int(r.stdout.split()[-1]) < 100, r.stdout          # MB; decoded: 676 MB


def test_test_image_is_not_preprocessed_again_after_a_switch(grids_page):
    """A test-set image is already a model input: switching to another model of the same input
    size must show exactly it, not a re-laid-out copy."""
    img = np.zeros((28, 28), np.float32)
    img[4:10, 2:6] = 1.0                     # off-centre: preprocessing would move it
    shown = Shown("test", img, img, "mnist", origin=("mnist", "MNIST", 5, "3"))
    visit = grids_page.visit()
    visit.record = Record("mnist").showing(shown, "test")
    grids_page.choose_model(visit, "grid4")
    out = grids_page.reanalyse(visit)
    assert np.array_equal(visit.record.shown.image, img)
    # The headline still says where the image comes from (it may be another model's test set).
    assert "This is MNIST test image #5, true class **3**." in out["status"]
    assert visit.record.shown.origin == shown.origin


def test_queue_is_bounded_and_the_cache_is_cleaned(tmp_path):
    """A burst of requests is refused beyond 64 queued (about a second of work; a crowd of 48
    drawing at once was refused with 16, `python -m bench.inpage --crowd`), one visitor holds at
    most 8 of them (`python -m bench.fairness`), and Gradio's upload and picture cache is cleaned
    of files older than an hour every 30 minutes."""
    root = tmp_path / "ck"
    tiny(root / "mnist")
    demo = create_app(root, device="cpu")
    assert demo._queue.max_size == 64 and demo.delete_cache == (1800, 3600)
    (gate, *_) = demo.limits.middleware()
    assert gate.kwargs["per_visitor"] == 8


def test_a_click_at_nan_or_infinity_changes_nothing(grids_page, tmp_path):
    visit = grids_page.visit()
    grids_page.analyse_drawing(visit, drawing_value(tmp_path), "mnist", True, 2, 1)
    for index in (["nan", "nan"], ["inf", 3], [None, 2], "x", None):
        assert grids_page.pick_patch(visit, SimpleNamespace(index=index)) == {}   # nothing changes
    assert visit.record.patch is None


def test_the_first_view_puts_an_example_on_the_canvas(grids_page):
    """At load the canvas gets the drawn 7 (which it sends back like a drawing); each load value
    differs, so the page redraws it even when the same example is asked for twice."""
    a, b = grids_page.first_view("mnist"), grids_page.first_view("mnist")
    assert a["name"] == "7" and a["load"].startswith("data:image/png;base64,")
    assert a["seq"] != b["seq"] and a["load"] == b["load"]
    picked = grids_page.load_example("mnist", SimpleNamespace(index=2))
    assert picked["name"] == "2"
    assert isinstance(grids_page.load_example("mnist", SimpleNamespace(index=99)), dict)   # no-op
    assert "__type__" in grids_page.load_example("mnist", SimpleNamespace(index="x"))


def test_an_example_drawing_says_so_and_a_made_up_name_does_not(grids_page):
    value = {**canvas_value(_example_ink("4")), "example": "4"}
    assert grids_page.analyse_drawing(grids_page.visit(), value, "mnist", True, 2, 1)[
        "status"].startswith("### Example: a drawn 4")
    value["example"] = "<img src=x onerror=alert(1)>"          # not one of the examples: ignored
    assert "Example" not in grids_page.analyse_drawing(grids_page.visit(), value, "mnist", True,
                                                       2, 1)["status"]


def _example_ink(digit):
    return 255 - np.asarray(render_digit(digit, 400, 26), np.uint8)


@pytest.mark.parametrize("value, message", [
    ({"png": "data:text/html;base64,PGI+"}, "must be a PNG data URL"),
    ({"png": "data:image/png;base64,%%%"}, "not valid base64"),
    ({"png": "data:image/png;base64," + "A" * 4_000_000}, "a drawing is a few KB"),
    ({"png": 12}, "must be a PNG data URL"),
    ("just text", "A drawing is sent as"),
    ({"png": "data:image/png;base64,iVBORw0KGgo="}, "not a PNG"),
])
def test_what_a_client_sends_as_a_drawing_gets_one_line(grids_page, value, message):
    with pytest.warns(UserWarning, match=message):
        out = grids_page.analyse_drawing(grids_page.visit(), value, "mnist", True, 2, 1)
    status = out["status"]
    assert message in status and out["label"] is None and "\n" not in status.strip()


def test_a_drawing_value_cannot_name_a_server_file(grids_page, tmp_path):
    """Only the PNG inside the value is read: Sketchpad-style layer paths are ignored."""
    secret = tmp_path / "secret.png"
    Image.fromarray(_example_ink("4")).save(secret)
    value = {"background": None, "layers": [str(secret)], "composite": str(secret)}
    out = grids_page.analyse_drawing(grids_page.visit(), value, "mnist", True, 2, 1)
    assert "Draw a digit" in out["status"] and out["label"] is None


def test_while_the_pen_moves_only_the_answer_follows_and_never_a_stale_one(grids_page):
    """The canvas's "live" event: status, label and the drawing's number; a live answer for an
    older drawing than the newest the visitor sent (the pen lifted meanwhile) changes nothing."""
    visitor = grids_page.visit()
    seven = {**canvas_value(_example_ink("7"), seq=5), "final": False}
    out = grids_page.follow_drawing(visitor, seven, "mnist")
    assert "reads this as" in out["status"] and out["label"] and out["answered"] == "5"
    assert visitor.record.drawing is None                       # the record waits for the lift
    grids_page.analyse_drawing(visitor, {**seven, "seq": 6, "final": True}, "mnist", True, 2, 1)
    assert grids_page.follow_drawing(visitor, seven, "mnist") == {}
    other = grids_page.visit()                                  # another visitor is not held up
    assert grids_page.follow_drawing(other, seven, "mnist")["answered"] == "5"


def test_a_model_that_failed_tells_every_later_visitor_why(broken_root):
    """A page built before the failure still lists it: its visitors get the reason, not
    "no model named"."""
    page = create_app(broken_root, device="cpu").page
    with pytest.warns(UserWarning):
        page.choose_model(page.visit(), "nan")
    with pytest.raises(gr.Error, match="NaN"):
        page.predictor("nan")


@pytest.mark.parametrize("env, message", [
    ({"VIT_DEVICE": "meta"}, "VIT_DEVICE"), ({"VIT_DEVICE": "bogus"}, "VIT_DEVICE"),
    ({"VIT_THREADS": "abc"}, "VIT_THREADS"), ({"VIT_QUEUE_SIZE": "0"}, "VIT_QUEUE_SIZE"),
    ({"VIT_CHECKPOINTS": "/nonexistent/chekpoints"}, "python -m vit.train"),
    ({"VIT_INPAGE": "yes"}, "VIT_INPAGE"), ({"VIT_GRADIO_SPEEDUPS": "2"}, "VIT_GRADIO_SPEEDUPS"),
])
def test_bad_settings_stop_start_up_with_one_line(env, message, monkeypatch, capsys):
    """app.py's own start-up, in-process (the real process: the test below)."""
    import app
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(app, "launch", lambda demo: pytest.fail("it served the page"))
    assert app.main([]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("error: "), lines


def test_the_mechanism_panel_works_only_while_open(grids_page, tmp_path):
    visit = grids_page.visit()
    grids_page.analyse_drawing(visit, drawing_value(tmp_path), "grid4", True, 2, 1)
    # Closed: nothing of it drawn.
    assert not set(grids_page.why(visit)) & {"walk", "walk_text"}
    assert mechanism_panel.mechanism_model(grids_page, visit) == {}
    out = grids_page.open_panel(visit, mechanism_panel.OPEN, True)
    assert out["walk"].dtype == np.uint8 and "largest weights" in out["walk_text"].lower()
    # The page's one layer and head: the explorer's sliders move the walk too.
    assert "layer 2, head 2" in grids_page.explore(visit, 2, 2)["walk_text"]
    assert "[CLS], layer 2, head 2" in mechanism_panel.follow_cls(grids_page, visit, True)["walk_text"]
    nothing = grids_page.visit()
    grids_page.view(nothing.record, EVERY, visit=nothing)      # the page as it first opens
    # Only the panel's own views read whether it is open: they alone are sent.
    assert grids_page.open_panel(nothing, mechanism_panel.OPEN, True) == {"walk": None,
                                                        "walk_text": "Draw or upload something first."}
    out = mechanism_panel.mechanism_model(grids_page, visit)
    pos, dist, filters = out["position"], out["distance"], out["filters"]
    assert pos.dtype == dist.dtype == filters.dtype == np.uint8 and out["model_caption"]


def test_a_big_model_shows_each_layers_mean_and_the_chosen_layers_heads(tmp_path):
    """7 layers x 8 heads (56 maps, past views.BIG_GRID): one row of every layer's mean over its
    heads, the chosen layer's heads below; a click on the mean row opens that layer (the head
    stays), a click on a head opens it; the picture follows the layer slider."""
    torch.manual_seed(0)
    root = tmp_path / "ck"
    save_checkpoint(root / "deep", ViT(ViTConfig(dim=16, depth=7, heads=8, mlp_dim=16)), META)
    page = create_app(root, device="cpu").page
    visit = page.visit()
    page.open_panel(visit, views.OPEN, True)
    grid = page.analyse_drawing(visit, drawing_value(tmp_path), "deep", True, 3, 1)["grid"]
    shown = visit.record.shown
    full = attention_grid_picture(shown.image, np.zeros((7, 8, 7, 7)))
    assert grid.shape[0] < full.shape[0] / 2                  # two rows of maps, not seven
    p = page.predictor("deep")
    tile = 28 * _factor(28, 112)
    GAP = 6 + MINI + CAPTION                                  # between maps: scale bar, caption
    first_row = (64 + 4 * (tile + GAP) + 5, 30)              # the mean map of layer 5
    assert page.pick_head(visit, SimpleNamespace(index=list(first_row))) == {"layer": 5}
    second_row = (64 + 6 * (tile + GAP) + 5, grid.shape[0] // 2 + 60)     # head 7 of the chosen layer
    assert views_hit(p, *second_row) == (None, 6)
    other = page.explore(visit, 6, 1)["grid"]
    assert other.shape == grid.shape and not np.array_equal(other, grid)
    assert page.explore(visit, 3, 1)["grid"] is not None
    fresh = page.visit()
    page.open_panel(fresh, views.OPEN, True)
    assert page.explore(fresh, 3, 1).get("grid") is None             # nothing on screen


def views_hit(p, x, y):
    from vit.ui import views
    return views.grid_hit(p, x, y)


def test_a_model_name_of_any_json_type_gets_one_line_naming_the_models(grids_page, tmp_path):
    for name in ({"a": 1}, ["mnist"], 7, None, "Handwritten digits (MNIST)"):
        with pytest.raises(gr.Error, match="no model named .*; the models are .*mnist") as e:
            grids_page.analyse_drawing(grids_page.visit(), drawing_value(tmp_path), name, True, 2, 1)
        assert "\n" not in e.value.message


def test_a_model_switchs_rereading_never_replaces_a_newer_drawing(grids_page, monkeypatch):
    """The model switch re-reads the input on screen; if the visitor cleared the canvas (or drew
    again) while it ran, the newer drawing's own answer stands ("Draw a digit" stays)."""
    visitor = grids_page.visit()
    seven = canvas_value(_example_ink("7"), seq=3)
    grids_page.analyse_drawing(visitor, seven, "mnist", True, 2, 1)
    assert isinstance(visitor.record.shown, Shown)
    grids_page.choose_model(visitor, "grid4")
    fresh = grids_page.reanalyse(visitor)["status"]
    assert "reads this as" in fresh or "Not" in fresh                    # undisturbed: re-read
    grids_page.choose_model(visitor, "mnist")
    grids_page.reanalyse(visitor)
    slow = grids_page.analysis

    def cleared_meanwhile(*args, **kwargs):
        out = slow(*args, **kwargs)
        cleared = {"png": None, "final": True, "seq": 4}
        assert "Draw a digit" in grids_page.analyse_drawing(visitor, cleared, "grid4", True, 2,
                                                            1)["status"]
        return out
    monkeypatch.setattr(grids_page, "analysis", cleared_meanwhile)
    grids_page.choose_model(visitor, "grid4")
    assert grids_page.reanalyse(visitor) == {}
    assert visitor.record.shown.empty and visitor.record.shown.number == 4


def test_a_lifts_answer_overtaken_by_a_clear_changes_nothing(grids_page, monkeypatch):
    """Clear clicked just after the pen lifted (a trial: within 50 ms, 3 tries of 8): with two
    requests at a time the empty canvas was answered first, then the 7's answer landed over it,
    and the page showed "reads this as 7" and its maps beside an empty canvas. The older
    drawing's answer now changes nothing."""
    visitor = grids_page.visit()
    slow = grids_page._drawing

    def cleared_meanwhile(value, *args, **kwargs):
        out = slow(value, *args, **kwargs)
        if value["seq"] == 3:                   # the 7 is being read: Clear's lift overtakes it
            cleared = {"png": None, "seq": 4}
            assert "Draw a digit" in grids_page.analyse_drawing(visitor, cleared, "mnist", True,
                                                                2, 1)["status"]
        return out
    monkeypatch.setattr(grids_page, "_drawing", cleared_meanwhile)
    seven = canvas_value(_example_ink("7"), seq=3)
    assert grids_page.analyse_drawing(visitor, seven, "mnist", True, 2, 1) == {}
    assert visitor.record.shown.empty and visitor.record.drawing.number == 4
    assert "Draw a digit" in grids_page.why(visitor)["status"]


def test_the_draw_tabs_select_at_load_never_hides_the_example(grids_page, monkeypatch):
    """Gradio selects the Draw tab as the page loads, and its handler reads the canvas before the
    example put on it is sent: landing after the example's answer, it put "Draw a digit" over it
    (the browser lanes: the headline so, beside the example's strip and maps). The example's
    answer now stays on screen, headline and all."""
    visitor = grids_page.visit()
    slow = grids_page._drawing

    def example_meanwhile(value, *args, **kwargs):
        out = slow(value, *args, **kwargs)
        if not value.get("seq"):                       # the Draw tab's read of the bare canvas
            grids_page.analyse_drawing(visitor, canvas_value(_example_ink("7"), seq=1), "mnist",
                                       True, 2, 1)
        return out
    monkeypatch.setattr(grids_page, "_drawing", example_meanwhile)
    out = grids_page.to_draw_tab(visitor, {"png": None}, "mnist", True, 2, 1)
    assert isinstance(visitor.record.shown, Shown) and visitor.record.shown.number == 1
    assert "Draw a digit" not in out["status"] and "reads this as" in out["status"], out["status"]


def test_a_model_switch_never_rereads_a_drawing_older_than_one_already_sent(grids_page):
    """With two requests at a time, drawing 8's answer may still be on its way when the switch
    starts from drawing 7's record: the switch then leaves the page to drawing 8."""
    visitor = grids_page.visit()
    grids_page.analyse_drawing(visitor, canvas_value(_example_ink("7"), seq=7), "mnist", True, 2, 1)
    assert visitor.record.shown.number == 7
    visitor.note_drawing(8)                                 # drawing 8 arrived, not yet answered
    grids_page.choose_model(visitor, "grid4")
    assert grids_page.reanalyse(visitor) == {}


def test_switching_between_drawing_and_photo_models_puts_the_new_models_example_on_the_canvas():
    """A digit means nothing to the CIFAR-10 model, nor a photo to the digit model, nor a digit
    to the clothing model: between models of different classes the switch puts the new model's
    first example on the canvas (its headline says what the model knows), or the visitor's own
    last drawing for it, and the old drawing is not silently re-read; between models of the
    same classes the drawing stays and is re-read."""
    page = create_app(ROOT / "checkpoints", device="cpu").page
    visitor = page.visit()
    page.analyse_drawing(visitor, canvas_value(_example_ink("7"), seq=2), "mnist", True, 2, 1)
    to_photos = page.choose_model(visitor, "cifar10")
    assert to_photos["pad"]["colour"] is True and to_photos["pad"]["name"] == "ship"
    assert "label" not in page.reanalyse(visitor)       # no answer for the digit by this model
    back = page.choose_model(visitor, "mnist")          # the visitor's own 7 put back
    assert "name" not in back["pad"] and "colour" not in back["pad"] and back["pad"]["load"]
    to_clothes = page.choose_model(visitor, "fashion-mnist")
    assert to_clothes["pad"]["name"] == "Ankle boot" and "label" not in page.reanalyse(visitor)
    boot = next(x for x in page.examples["objects"] if x.endswith("Ankle-boot.png"))
    ink = 255 - np.asarray(Image.open(boot).convert("L"))        # as the canvas sends it back
    sent = {**canvas_value(ink, seq=3), "example": "Ankle boot"}
    shown = page.analyse_drawing(visitor, sent, "fashion-mnist", False, 6, 1)
    assert "It knows: T-\u2060shirt/top, Trouser" in shown["status"]   # no break after "T-"


def test_a_visitors_drawing_comes_back_when_they_return_to_its_kind_of_model():
    """A trial: a visitor's 8, replaced by the clothing model's example at a switch, was gone
    when they switched back (the digit model's example 7 instead). Now each kind of model's
    last drawing is set aside and put back, one per set of classes, examples never."""
    import base64
    import io
    page = create_app(ROOT / "checkpoints", device="cpu").page
    visitor = page.visit()
    eight = _example_ink("8")
    page.analyse_drawing(visitor, canvas_value(eight, seq=2), "mnist", True, 2, 1)
    to_clothes = page.choose_model(visitor, "fashion-mnist")
    assert to_clothes["pad"]["name"] == "Ankle boot"
    boot = next(x for x in page.examples["objects"] if x.endswith("Ankle-boot.png"))
    ink = 255 - np.asarray(Image.open(boot).convert("L"))
    page.analyse_drawing(visitor, {**canvas_value(ink, seq=3), "example": "Ankle boot"},
                         "fashion-mnist", False, 6, 1)
    to_photos = page.choose_model(visitor, "cifar10")             # nothing of its kind aside
    assert to_photos["pad"]["name"] == "ship"
    back = page.choose_model(visitor, "mnist")
    assert back["pad"]["reset"] and "name" not in back["pad"]      # not the example 7
    png = base64.b64decode(back["pad"]["load"].split(",", 1)[1])
    put_back = 255 - np.asarray(Image.open(io.BytesIO(png)).convert("L").resize((28, 28)))
    drawn = np.asarray(Image.fromarray(eight).resize((28, 28)), np.float64)
    assert np.corrcoef(put_back.ravel(), drawn.ravel())[0, 1] > 0.9
    # The canvas sends it back: read as the visitor's 8 again.
    again = page.analyse_drawing(visitor, canvas_value(eight, seq=5), "mnist", False, 6, 1)
    assert top_label(again["label"]) == "8"
    assert len(visitor.record.set_aside) <= 3 and all(
        not d.example for d in visitor.record.set_aside)


def test_the_answer_follows_the_tab_in_view(tmp_path):
    """An answer beside an input that is not on screen misleads. The headline is always the
    tab's own: on the Upload tab with nothing uploaded it asks for a picture and says the answer
    below is still the drawing's; back on a tab, its input returns (read again if it changed
    meanwhile, else as it was: no pass again); an answer that lands on another tab (in flight
    when the tab changed, or a model switch re-reading it) keeps that tab's headline."""
    from vit.ui.render import top_label
    page = create_app(ROOT / "checkpoints", device="cpu").page
    visit = page.visit()
    seven = canvas_value(_example_ink("7"), seq=3)
    drawn = page.analyse_drawing(visit, seven, "mnist", True, 2, 1)
    assert "7" in drawn["status"] and top_label(drawn["label"]) == "7"
    drawing = visit.record.shown
    assert page.view(visit.record, ("status",))["status"] == drawn["status"]

    empty = switch(page, visit, "upload", None, "mnist", True, 2, 1)
    assert "Upload or paste a picture" in empty["status"]
    assert "still for your drawing" in empty["status"]
    assert set(empty) == {"status"}                           # the drawing's answer stays
    back = switch(page, visit, "draw", seven, "mnist", True, 2, 1)
    assert back == {"status": drawn["status"]}                # nothing new: its headline back
    one = Image.new("L", (200, 200), 255)
    one.paste(0, (90, 40, 110, 160))
    one.save(tmp_path / "one.png")
    path = str(tmp_path / "one.png")
    uploaded = switch(page, visit, "upload", path, "mnist", True, 2, 1)
    assert top_label(uploaded["label"]) == "1" and visit.record.shown.kind == "upload"
    again = switch(page, visit, "upload", path, "mnist", True, 2, 1)         # already shown
    assert again == {"status": uploaded["status"]}

    back = switch(page, visit, "draw", seven, "mnist", True, 2, 1)
    assert top_label(back["label"]) == "7" and visit.record.shown is drawing
    # A model switch put a new example on the hidden canvas (a newer drawing number), or the
    # model changed: back on Draw, it is answered.
    switch(page, visit, "draw", {**seven, "seq": 5}, "mnist", True, 2, 1)
    assert visit.record.shown.number == 5
    switch(page, visit, "draw", {**seven, "seq": 5}, "fashion-mnist", True, 2, 1)
    assert visit.record.shown.model == "fashion-mnist"
    # The upload removed, nothing is on screen: back on Draw, the canvas is answered.
    switch(page, visit, "upload", path, "mnist", True, 2, 1)
    removed = page.upload_changed(visit, None, "mnist", True, 2, 1)
    assert visit.record.shown is None and removed["label"] is None
    assert removed["status"] == "### Upload or paste a picture"
    assert top_label(switch(page, visit, "draw", {**seven, "seq": 5}, "mnist", True, 2, 1)[
        "label"]) == "7"
    cleared = switch(page, visit, "draw", {"png": None, "final": True, "seq": 8}, "mnist", True, 2, 1)
    assert "Draw a digit" in cleared["status"] and cleared["label"] is None   # an empty canvas

    # While an upload is on screen, the hidden canvas's lift changes nothing on screen; over a
    # drawing it answers (an example that replaced the drawing), under the tab's own headline.
    switch(page, visit, "upload", path, "mnist", True, 2, 1)
    hidden = page.analyse_drawing(visit, {**seven, "seq": 9}, "mnist", True, 2, 1)
    # Nothing on screen read the drawing: nothing is sent (the headline stays the upload's).
    assert "label" not in hidden and "status" not in hidden
    assert visit.record.shown.kind == "upload" and visit.record.drawing.number == 9
    page.upload_changed(visit, None, "mnist", True, 2, 1)
    switch(page, visit, "draw", {**seven, "seq": 9}, "mnist", True, 2, 1)
    switch(page, visit, "upload", None, "mnist", True, 2, 1)
    landed = page.analyse_drawing(visit, {**seven, "seq": 10}, "mnist", True, 2, 1)
    assert top_label(landed["label"]) == "7" and landed["status"].startswith("### Upload or paste")
    assert "still for your drawing" in landed["status"]
    assert visit.record.shown.kind == "drawing"
    # An example on the canvas is nobody's drawing: said as the example it is.
    switch(page, visit, "draw", {**seven, "seq": 11, "example": "7"}, "mnist", True, 2, 1)
    assert "still for the example 7" in switch(page, visit, "upload", None, "mnist", True, 2, 1)["status"]
    switch(page, visit, "draw", {**seven, "seq": 12}, "mnist", True, 2, 1)
    switch(page, visit, "upload", None, "mnist", True, 2, 1)
    page.note_tab(visit, "test")
    page.choose_model(visit, "fashion-mnist")
    assert page.reanalyse(visit)["status"].startswith("### This model's test set is not on")

    # The Test set tab: a test image's own headline, or a prompt that fits the data on disk.
    test = Shown("test", drawing.image, drawing.image, "mnist", origin=("mnist", "MNIST", 4, "7"))
    tested = page.visit()
    tested.record = Record("mnist").showing(test, "test", show=False)
    assert switch(page, tested, "test")["status"].startswith(
        "### Test image #4 (true class **7**): read as **7**")
    upload = page.visit()
    switch(page, upload, "upload", path, "mnist", True, 2, 1)
    assert "not on this machine" in switch(page, upload, "test")["status"]
    page.answers._results["mnist"] = object()              # as if its answers were in
    switch(page, upload, "upload", path, "mnist", True, 2, 1)
    prompt = switch(page, upload, "test")["status"]
    assert "Click a test image" in prompt and "still for your upload" in prompt
    assert "Until then" not in switch(page, page.visit(), "test")["status"]
    # An upload that could not be read leaves nothing below to belong to it (a seventh trial
    # read "still for your upload" over an empty strip).
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image at all")
    failed = page.visit()
    switch(page, failed, "upload", str(bad), "mnist", True, 2, 1)
    assert isinstance(failed.record.shown, Refused)
    assert "Until then" not in switch(page, failed, "test")["status"]


def test_gradios_repeated_upload_event_is_answered_once(grids_page, tmp_path):
    """Gradio fires the upload's change event twice, with the same file, when one picture
    replaces another: the repeat changes nothing, so its warning does not pop up twice."""
    Image.new("L", (9, 9), 255).save(tmp_path / "blank.png")
    one = Image.new("L", (200, 200), 255)
    one.paste(0, (90, 40, 110, 160))
    one.save(tmp_path / "one.png")
    visitor, other = grids_page.visit(), grids_page.visit()
    grids_page.note_tab(visitor, "upload")
    blank, digit = str(tmp_path / "blank.png"), str(tmp_path / "one.png")
    args = ("mnist", True, 2, 1)
    assert "blank" in grids_page.upload_changed(visitor, blank, *args)["status"]
    assert grids_page.upload_changed(visitor, blank, *args) == {}
    assert "blank" in grids_page.upload_changed(other, blank, *args)["status"]   # another visitor
    assert "reads this as" in grids_page.upload_changed(visitor, digit, *args)["status"]
    assert "blank" in grids_page.upload_changed(visitor, blank, "grid4", True, 2, 1)[
        "status"]                                                   # another model: answered
    # Removed, then the same file again at once: a new upload, answered.
    assert "Upload or paste" in grids_page.upload_changed(visitor, None, "grid4", True, 2, 1)[
        "status"]
    assert "blank" in grids_page.upload_changed(visitor, blank, "grid4", True, 2, 1)["status"]


def test_a_model_switch_empties_the_open_test_set_gallery_until_the_new_answers_are_in(grids_page):
    """A click on the old model's gallery would otherwise explain the new model's image of
    the same number."""
    visit = grids_page.visit()
    assert grids_page.clear_testset(visit) == {}                 # the tab was never opened
    visit.record = replace(visit.record, testset_open=True, test_listed=(3, 4))
    out = grids_page.clear_testset(visit)
    assert "Loading" in out["testset_status"] and out["confusion"] is None
    assert visit.record.test_listed == ()
    assert out["gallery"]["value"] == [] and out["gallery"]["selected_index"] is None


def test_a_canvas_filled_all_over_says_so_instead_of_resting(grids_page):
    """Fill tapped on an empty canvas inks every pixel: no contrast, like an empty canvas, but
    the page must not pretend the canvas is empty."""
    full = grids_page.analyse_drawing(grids_page.visit(), canvas_value(
        np.full((400, 400), 255, np.uint8)), "mnist", True, 2, 1)["status"]
    assert "whole box is ink" in full and "Undo" in full
    empty = grids_page.analyse_drawing(grids_page.visit(), canvas_value(
        np.zeros((400, 400), np.uint8)), "mnist", True, 2, 1)["status"]
    assert "Draw a digit" in empty


def test_a_typed_layer_or_head_out_of_range_puts_the_slider_back_in_range(grids_page, tmp_path):
    """The slider's number box takes any number; the map would show the nearest layer while the
    box kept saying 9. A valid value (a slider being dragged) is never sent back."""
    visit = grids_page.visit()
    grids_page.analyse_drawing(visit, drawing_value(tmp_path), "mnist", True, 2, 1)
    depth = 2                               # tiny(): the test checkpoints' depth
    out = grids_page.explore(visit, 9, 0)
    assert out["layer"]["value"] == depth and out["head"]["value"] == 1
    out = grids_page.explore(visit, 1, 2.0)
    assert out["layer"] == gr.update() and out["head"] == gr.update()
    out = grids_page.explore(visit, "x", 1.5)
    assert out["layer"]["value"] == depth and out["head"]["value"] == 1


def test_one_forward_with_attention_per_input_and_model(grids_page, tmp_path, monkeypatch):
    """A drawing's lift, its explanations, the step-by-step panel, sliders, a patch click and a
    switch away and back reuse one forward pass with attention (vit.inference.Recent) — the one
    made while the pen was still down, for the pipeline strip's maps (a small model: a few ms). A
    new drawing is one more pass."""
    import vit.inference
    calls = []
    real = vit.inference._explain            # the forward with attention (vit.device.gpu_task)
    monkeypatch.setattr(vit.inference, "_explain", lambda *a, **k: calls.append(1) or real(*a, **k))
    page, visit = grids_page, grids_page.visit()
    four = {**drawing_value(tmp_path, "4", angle=7.0), "seq": 901}      # drawn by no other test
    live = page.follow_drawing(visit, {**four, "final": False}, "grid4")   # pen still down
    assert len(calls) == 1 and live["pipeline"]["head_map"] is not None
    page.analyse_drawing(visit, four, "grid4", True, 2, 1)
    page.why(visit)
    page.open_panel(visit, mechanism_panel.OPEN, True)
    mechanism_panel.follow_cls(page, visit, True)
    page.explore(visit, 2, 2)
    page.explore(visit, 1, 1)
    views.rescale(page, visit, False)
    page.pick_patch(visit, SimpleNamespace(index=[10.0, 10.0]))
    page.note_tab(visit, "upload")
    switch(page, visit, "draw", four, "grid4", True, 1, 1)
    assert len(calls) == 1
    page.choose_model(visit, "grid2")
    page.reanalyse(visit)
    page.choose_model(visit, "grid4")
    page.reanalyse(visit)
    assert len(calls) == 2                       # grid2's pass; grid4's came back from memory
    page.analyse_drawing(visit, {**drawing_value(tmp_path, "7", angle=7.0), "seq": 902}, "grid4",
                         True, 2, 1)
    assert len(calls) == 3


def test_every_event_that_changes_the_input_on_screen_refreshes_both_panels(grids_page):
    """Wherever the input on screen can change — a lift, an upload, a tab switch, a test image,
    a model switch — the event's chain goes on to "What drove the answer" and to the panels drawn
    only while open, the step-by-step panel among them (each skips its work while closed). The
    step-by-step panel used to follow a lift only."""
    demo = create_app(grids_page.models.root, device="cpu", models=grids_page.models)
    fns = list(demo.fns.values())

    def after(f):                       # every function chained (.then) after f
        out = [g for g in fns if g.trigger_after == f._id]
        return out + [h for g in out for h in after(g)]

    changers = {"analyse_drawing", "upload_changed", "to_draw_tab", "to_upload_tab",
                "to_test_tab", "show_test_image", "reanalyse"}
    seen = set()
    for f in fns:
        name = getattr(f.fn, "__name__", "")
        if name in changers:
            seen.add(name)
            chained = {getattr(g.fn, "__name__", "") for g in after(f)}
            assert "why" in chained, (name, chained)
    assert seen == changers


def test_the_public_api_keeps_its_parameters(grids_page):
    """Clients call these by position over raw HTTP (bench/attack.py does): a page change must
    not add a parameter to them."""
    demo = create_app(grids_page.models.root, device="cpu", models=grids_page.models)
    got = {k: [p["parameter_name"] for p in v["parameters"]]
           for k, v in demo.get_api_info()["named_endpoints"].items()}
    assert got == {"/classify": ["image"],
                   "/analyse_drawing": ["value", "name", "shared", "layer", "head"],
                   "/analyse_upload": ["path", "name", "shared", "layer", "head"],
                   "/classify_image": ["image", "model"], "/explain_image": ["image", "model"],
                   "/list_models": []}


def test_explaining_the_same_input_again_computes_nothing_again(grids_page, tmp_path, monkeypatch):
    """A tab switch back, or a panel re-rendering, asks "What drove the answer" for the same input
    and class again: its relevance and occlusion maps come back from memory, the same arrays."""
    import vit.inference
    calls = []
    for name in ("relevance", "occlusion_maps"):       # the passes Predictor makes (gpu_task)
        real = getattr(vit.inference, "_" + name)
        monkeypatch.setattr(vit.inference, "_" + name,
                            lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
    visit = grids_page.visit()
    grids_page.analyse_drawing(visit, {**drawing_value(tmp_path, "2", angle=-9.0), "seq": 911},
                               "grid4", True, 2, 1)
    first, again = grids_page.why(visit), grids_page.why(visit)
    assert sorted(calls) == ["occlusion_maps", "relevance"]
    assert first.keys() == again.keys() and all(_same(first[k], again[k]) for k in first)


def _same(a, b) -> bool:
    return np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b


def test_a_late_answer_for_an_older_drawing_never_replaces_a_newer_one(grids_page):
    """Back on Draw, the tab's re-read of the canvas and the Clear clicked right after it run at
    once; if the re-read lands last, the page showed the answer for a drawing no longer on the
    canvas (seen in the browser test). An older drawing's answer now changes nothing."""
    visitor = grids_page.visit()
    seven = canvas_value(_example_ink("7"), seq=5)
    grids_page.analyse_drawing(visitor, seven, "mnist", True, 2, 1)
    cleared = grids_page.analyse_drawing(visitor, {"png": None, "final": True, "seq": 6}, "mnist",
                                         True, 2, 1)
    assert "Draw a digit" in cleared["status"]
    grids_page.note_tab(visitor, "upload")
    late = switch(grids_page, visitor, "draw", seven, "mnist", True, 2, 1)
    assert late == {"status": cleared["status"]} and visitor.record.shown.empty


def test_a_tabs_answer_that_lands_after_the_visitor_left_the_tab_changes_nothing(grids_page):
    """The Test set tab's answer waits for the tab's pictures: a visitor who clicked Draw and
    Clear meanwhile was sent back to the test image's headline over the empty canvas (the
    record said the Test set tab was in view; seen in the browser). The tab now in view keeps
    its own answer."""
    visitor = grids_page.visit()
    test = Shown("test", np.zeros((28, 28), np.float32), np.zeros((28, 28), np.float32), "mnist",
                 origin=("mnist", "MNIST", 4, "7"))
    visitor.record = Record("mnist").showing(test, "test", show=False)
    grids_page.note_tab(visitor, "test")
    grids_page.note_tab(visitor, "draw")                    # left before the tab's answer
    cleared = grids_page.analyse_drawing(visitor, {"png": None, "final": True, "seq": 6}, "mnist",
                                         True, 2, 1)
    assert "Draw a digit" in cleared["status"]
    assert grids_page.to_test_tab(visitor) == {}
    assert visitor.record.tab == "draw" and visitor.record.shown.empty
    assert "Draw a digit" in grids_page.view(visitor.record, ("status",))["status"]


def test_a_clear_clicked_right_after_going_back_to_draw_shows_the_empty_canvas(tmp_path,
                                                                                monkeypatch):
    """The race the full suite's browser test met once: from another tab's input, the Draw tab
    clicked and Clear clicked at once. The Clear's lift started before the tab was noted, and
    the tab's re-read of the older drawing ran after: both must leave the empty canvas's prompt
    on screen, not the other tab's answer."""
    page = create_app(ROOT / "checkpoints", device="cpu").page
    visit = page.visit()
    page.analyse_drawing(visit, canvas_value(_example_ink("7"), seq=3), "mnist", True, 6, 1)
    digit = tmp_path / "digit.png"
    Image.fromarray(_example_ink("3")).save(digit)
    page.note_tab(visit, "upload")
    page.upload_changed(visit, str(digit), "mnist", True, 6, 1)
    assert visit.record.on_screen == "upload"
    real = page._drawing

    def tab_noted_meanwhile(*args, **kwargs):         # the Draw tab lands while the lift reads
        page.note_tab(visit, "draw")
        return real(*args, **kwargs)
    monkeypatch.setattr(page, "_drawing", tab_noted_meanwhile)
    cleared = page.analyse_drawing(visit, {"png": None, "final": True, "seq": 4}, "mnist", True,
                                   6, 1)
    monkeypatch.setattr(page, "_drawing", real)
    assert "Draw a digit" in cleared["status"] and visit.record.on_screen == "drawing"
    late = page.to_draw_tab(visit, canvas_value(_example_ink("7"), seq=3), "mnist", True, 6, 1)
    assert "Draw a digit" in late["status"] and visit.record.shown.empty
