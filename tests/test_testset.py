"""The test-set explorer's library: the model's answers on a test split, cached beside the
checkpoint and invalidated when the weights or the data change; selections; the clickable
confusion matrix.

Also: the tab hidden on a Space without data, and elsewhere without data saying how to get it with
no empty boxes; an empty selection says what to do; `python -m vit.data` says where the data is."""
import shutil

import numpy as np
import pytest
import torch
from conftest import ROOT, run_main, run_module, write_dataset

from vit.checkpoint import open_checkpoint, save_checkpoint
from vit.data.loading import DataError
from vit.model import ViT, ViTConfig
from vit.pictures.confusion import CELL, LEFT, TOP, cell_at, confusion_picture
from vit.testset import CACHE, Results, load_results

TINY = ViTConfig(dim=16, depth=2, heads=2, mlp_dim=32)
META = {"dataset": "mnist", "class_names": [str(i) for i in range(10)],
        "normalization": {"mean": 0.1307, "std": 0.3081}}


def make_checkpoint(folder, seed=0):
    torch.manual_seed(seed)
    save_checkpoint(folder, ViT(TINY), META)
    return open_checkpoint(folder)


def results(labels, probs) -> Results:
    labels = np.asarray(labels)
    return Results("mnist", [str(i) for i in range(3)], np.zeros((len(labels), 28, 28), np.uint8),
                       labels, np.asarray(probs, np.float32))


def test_answers_are_computed_once_then_read_from_the_cache(tiny_data, tmp_path):
    ckpt = make_checkpoint(tmp_path / "ck")
    first = load_results(ckpt, tiny_data)
    assert not first.from_cache and (tmp_path / "ck" / CACHE).is_file()
    assert first.probs.shape == (80, 10) and np.allclose(first.probs.sum(1), 1, atol=1e-5)
    # The cached answers are the model's answers.
    with torch.no_grad():
        x = (torch.from_numpy(first.images[:5]).float() / 255 - 0.1307) / 0.3081
        direct = ckpt.model(x.unsqueeze(1)).softmax(1).numpy()
    np.testing.assert_allclose(first.probs[:5], direct, atol=1e-5)
    again = load_results(ckpt, tiny_data)
    assert again.from_cache and np.array_equal(again.probs, first.probs)
    assert again.accuracy == first.accuracy == float((first.preds == first.labels).mean())


def test_new_weights_or_new_data_invalidate_the_cache(tiny_data, tmp_path):
    folder = tmp_path / "ck"
    load_results(make_checkpoint(folder, seed=0), tiny_data)
    retrained = make_checkpoint(folder, seed=1)              # same folder, other weights
    fresh = load_results(retrained, tiny_data)
    assert not fresh.from_cache
    other_data = write_dataset(tmp_path / "other", n_train=10, n_test=30)
    assert not load_results(retrained, other_data).from_cache
    # A damaged cache file is recomputed, not an error.
    (folder / CACHE).write_bytes(b"garbage")
    assert not load_results(retrained, other_data).from_cache
    assert load_results(retrained, other_data).from_cache


def test_missing_test_set_is_a_data_error(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ck")
    with pytest.raises(DataError, match="not found"):
        load_results(ckpt, tmp_path / "nowhere")


def test_selections():
    r = results([0, 1, 2, 2, 1, 0],
                [[.9, .05, .05], [.2, .7, .1], [.1, .6, .3], [.5, .1, .4], [.1, .8, .1], [.4, .35, .25]])
    # Mistakes: images 2 (2 -> 1, 60 %) and 3 (2 -> 0, 50 %), most confident first.
    assert r.select("mistakes").tolist() == [2, 3]
    assert r.select("mistakes", pred=0).tolist() == [3]
    assert r.select("least confident").tolist() == [5, 3, 2, 1, 4, 0]
    assert r.select("least confident", true=1).tolist() == [1, 4]
    assert r.select("all", true=0, pred=0).tolist() == [0, 5]
    assert r.select("all", limit=2).tolist() == [0, 1]
    assert r.confusion().tolist() == [[2, 0, 0], [0, 2, 0], [1, 1, 0]]
    assert r.caption(2) == "2→1 60.0 %" and r.caption(0) == "0 ✓ 90.0 %"
    with pytest.raises(ValueError):
        r.select("best")


def test_a_click_on_a_confusion_cell_names_that_cell():
    conf = np.arange(100).reshape(10, 10)
    pic = confusion_picture(conf, [str(i) for i in range(10)], selected=(4, 9))
    assert pic.dtype == np.uint8 and pic.shape[2] == 3
    assert pic.shape[1] >= LEFT + 10 * CELL and pic.shape[0] >= TOP + 10 * CELL
    for t, p in [(0, 0), (4, 9), (9, 3)]:
        assert cell_at(LEFT + p * CELL + CELL / 2, TOP + t * CELL + CELL / 2, 10) == (t, p)
    assert cell_at(5, 5, 10) is None and cell_at(LEFT + 10 * CELL + 2, TOP + 5, 10) is None
    # The selected cell is outlined: its border differs from the same cell unselected.
    plain = confusion_picture(conf, [str(i) for i in range(10)])
    y, x = TOP + 4 * CELL + 1, LEFT + 9 * CELL + CELL // 2
    assert not np.array_equal(pic[y, x], plain[y, x])


def test_mistakes_stand_out_from_right_answers():
    conf = np.diag([1000] * 3)
    conf[2, 0] = 3
    pic = confusion_picture(conf, ["a", "b", "c"])
    at = lambda t, p: pic[TOP + t * CELL + 3, LEFT + p * CELL + 3].astype(int)   # noqa: E731
    assert tuple(at(0, 1)) == (255, 255, 255)                 # no mistakes there: white
    assert at(2, 0)[0] > at(2, 0)[1] + 50 and at(2, 0)[0] > at(2, 0)[2] + 50   # a mistake: red
    assert at(0, 0)[1] > at(0, 0)[0]                            # right answers: green tint


@pytest.mark.process
def test_data_cli_reports_where_the_data_is(tiny_data, tmp_path, capsys):
    r = run_module("vit.data", "--data-dir", tiny_data, "--no-download", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "mnist train: 320 images" in r.stdout and "mnist test: 80 images" in r.stdout
    # (the real process above; a refusal in this process)
    r = run_main(capsys, "vit.data", "--data-dir", tmp_path / "none", "--no-download")
    assert r.returncode == 1 and "not found" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("on_spaces, with_data, model, visible", [
    (True, False, "cifar10", False),   # a Space without data it cannot fetch: no empty tab
    (True, False, "mnist", True),      # ...one it can fetch (vit/data/fetch.py): the tab
    (True, True, "mnist", True),
    (False, False, "cifar10", True),   # locally: the tab says how to get the data
])
def test_tab_is_hidden_on_spaces_without_data_it_cannot_fetch(on_spaces, with_data, model, visible,
                                                               tiny_data, tmp_path, monkeypatch):
    """In-process, as a Space's environment would have it (a subprocess each took 15 s)."""
    from vit.ui import create_app
    # One model only: a Fashion-MNIST one would find Debian's copy of its data set.
    shutil.copytree(ROOT / "checkpoints" / model, tmp_path / "ck" / model,
                    ignore=shutil.ignore_patterns(".cache", "train_state", "best"))
    monkeypatch.setenv("VIT_DATA_DIR", str(tiny_data if with_data else tmp_path))
    monkeypatch.setenv("VIT_CHECKPOINTS", str(tmp_path / "ck"))
    monkeypatch.delenv("SPACE_ID", raising=False)
    if on_spaces:
        monkeypatch.setenv("SPACE_ID", "someone/vit-explorer")
    demo = create_app(device="cpu")
    tab = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "testset-tab")
    assert tab.visible is visible


def test_an_empty_selection_says_what_to_do(tiny_data):
    """Mistakes whose true and predicted class are the same: none, and the tab says how to get
    some back instead of "0 of 0"; the reliability diagram comes with every view."""
    from vit.ui.models import Models
    from vit.ui.testset_tab import Answers as TabAnswers
    models = Models(ROOT / "checkpoints", "cpu")
    status, confusion, reliability, gallery, shown, body = TabAnswers(models, tiny_data).view(
        "mnist", "mistakes", 3, 3)
    assert "Nothing to show" in status and '"any"' in status and gallery == [] == shown
    assert reliability.ndim == 3 and reliability.dtype == np.uint8 and confusion is not None
    assert body["visible"] is True


def test_without_the_test_set_the_tab_says_what_a_visitor_can_do_and_shows_no_empty_boxes(tmp_path):
    """A visitor reads what they can do; how to put the data there is behind the "?" for
    whoever runs the app."""
    from vit.ui.models import Models
    from vit.ui.testset_tab import Answers as TabAnswers
    models = Models(ROOT / "checkpoints", "cpu")
    status, confusion, reliability, gallery, shown, body = TabAnswers(models, tmp_path).view(
        "cifar10", "mistakes", -1, -1)
    plain, precise = status.split("<details", 1)
    assert "not on this server" in plain and "draw or upload" in plain and "VIT_DATA_DIR" not in plain
    assert "VIT_DATA_DIR" in precise
    assert str(tmp_path) not in status                       # no server path
    assert body["visible"] is False and confusion is None and gallery == [] == shown
