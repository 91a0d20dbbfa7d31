"""Training snapshots (`--snapshots`, vit/training/snapshots.py) and the app's "How it learned"
panel that reads them: where they are kept, turned off, replaced by --overwrite, checked against
the model, and the input on screen through each of them. The tests of a trained run are in the
train lane; the bundled model's is fast."""
import numpy as np
import pytest
import torch
from conftest import TINY_MODEL, run_main, run_module
from safetensors.torch import save_file

from vit.data.examples import render_digit
from vit.inference import Predictor
from vit.training import snapshots
from vit.ui import training_panel

ARGS = ["--no-download", "--epochs", "2", "--batch-size", "32", "--lr", "3e-3",
        "--eval-batch-size", "40", "--val-size", "40", "--negatives", "16", *TINY_MODEL]


def train(data, out, *extra):
    return run_module("vit.train", "--data-dir", data, "--out", out, *ARGS, *extra)


def train_here(capsys, data, out, *extra):
    """`train` in this process (conftest.run_main): the same run without a new Python's imports."""
    return run_main(capsys, "vit.train", "--data-dir", data, "--out", out, *ARGS, *extra)


@pytest.fixture(scope="module")
def snapped(tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("snap") / "ck"
    r = train(tiny_data, out)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


@pytest.mark.train
def test_kept_after_1_10_and_50_percent_of_the_steps(snapped):
    # 280 training images, batch 32: 9 steps an epoch, 18 in all
    assert [s.step for s in snapshots.listed(snapped)] == [1, 2, 9]
    assert snapshots.steps("0.01,0.1,0.5", 18) == {1, 2, 9}
    size = (snapped / "snapshots" / "step-0000009.safetensors").stat().st_size
    assert size < 0.6 * (snapped / "model.safetensors").stat().st_size          # float16


@pytest.mark.train
def test_the_app_shows_the_input_through_each_snapshot(snapped):
    p = Predictor(snapped, "cpu")
    a = p.analyse(np.asarray(render_digit("7")))
    frames = p.over_training(a.image, 0)
    assert [(f.step, f.of) for f in frames] == [(1, 18), (2, 18), (9, 18), (18, 18)]
    assert np.allclose(frames[-1].probs, a.probs, atol=1e-6)          # the end is the model
    assert not np.allclose(frames[0].probs, frames[-1].probs)          # it learned something
    assert frames[0].name == "5.6 % (step 1)" and frames[-1].name == "the end"
    from vit.pictures import attention_maps
    fit, drawn = attention_maps._fit_title, []
    attention_maps._colorbar_template.cache_clear()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(attention_maps, "_fit_title", lambda *args: drawn.append(fit(*args)) or drawn[-1])
        picture, large, words = training_panel.render(p, a, None)
    assert picture.shape[1] > 4 * 112 and large.shape[1] >= 280
    # Issue 49, 6: the bar's title drawn whole ("bottom: position similarity, -1 blue, 1 r…")
    assert drawn and not any(t.endswith("…") for _, t, _ in drawn), drawn
    # The bottom row's scale under it too, -1 blue to 1 red (a trial: that row's colours were
    # explained nowhere on the picture).
    ramp = picture[-44 + 18:-44 + 30].reshape(-1, 3).astype(int)
    assert ((ramp[:, 2] > 150) & (ramp[:, 0] < 100)).any() and ((ramp[:, 0] > 150) & (ramp[:, 2] < 100)).any()
    assert words.startswith("At the end it answered") and words.count("**") == 6   # top three
    _, early, words = training_panel.render(p, a, None, 3)
    assert words.startswith("At 5.6 % (step 1) it answered")
    assert not np.array_equal(early, large)


@pytest.mark.train
def test_the_slider_picks_the_nearest_kept_moment(snapped):
    p = Predictor(snapped, "cpu")
    frames = p.over_training(p.analyse(np.asarray(render_digit("7"))).image, 0)   # 5.6, 11, 50, 100 %
    pick = [training_panel.nearest(frames, at) for at in (0, 8, 9, 30, 31, 76, 100)]
    assert pick == [0, 0, 1, 1, 2, 3, 3]
    for sent in (None, "x", float("nan"), 1e300, -5, [3]):          # what a client may send
        assert training_panel.nearest(frames, sent) in (0, 3)


@pytest.mark.train
def test_a_snapshot_that_does_not_fit_is_skipped(snapped, tmp_path):
    import shutil
    out = tmp_path / "ck"
    shutil.copytree(snapped, out)
    save_file({"head.weight": torch.zeros(3)}, str(out / "snapshots" / "step-0000005.safetensors"))
    (out / "snapshots" / "notes.safetensors").write_bytes(b"not a snapshot")
    p = Predictor(out, "cpu")
    frames = p.over_training(p.analyse(np.asarray(render_digit("1"))).image, 0)
    assert [f.step for f in frames] == [1, 2, 9, 18]


@pytest.mark.train
def test_only_unreadable_snapshots_are_said_so(snapped, tmp_path):
    import shutil
    out = tmp_path / "ck"
    shutil.copytree(snapped, out)
    for path in (out / "snapshots").iterdir():
        path.write_bytes(b"damaged")
    p = Predictor(out, "cpu")
    picture, large, words = training_panel.render(p, p.analyse(np.asarray(render_digit("1"))), None)
    assert picture is None is large and "could not be read" in words


@pytest.mark.train
def test_off_and_bad_values(tiny_data, tmp_path, capsys):
    r = train_here(capsys, tiny_data, tmp_path / "none", "--snapshots", "none")
    assert r.returncode == 0 and not (tmp_path / "none" / "snapshots").exists()
    for bad, says in (("1", "above 0 and below 1"), ("x", "fractions of the run"),
                      (",".join(["0.5"] * 2 + [str(i / 100) for i in range(1, 40)]), "at most 32")):
        r = train_here(capsys, tiny_data, tmp_path / "bad", "--snapshots", bad)
        assert r.returncode == 2 and says in r.stderr, r.stderr


def test_the_no_snapshot_words_for_a_bundled_model():
    p = Predictor("checkpoints/mnist", "cpu")
    picture, large, words = training_panel.render(p, p.analyse(np.asarray(render_digit("4"))), 3)
    assert picture is None is large and "kept no training snapshots" in words
    assert "Model menu" in words                 # sent to the model that kept them, as the title
    assert "python -m" not in words and "--" not in words      # a visitor's words, no commands


@pytest.mark.train
def test_overwrite_sets_the_old_snapshots_aside(snapped, tiny_data, tmp_path, capsys):
    import shutil
    out = tmp_path / "ck"
    shutil.copytree(snapped, out)
    r = train_here(capsys, tiny_data, out, "--overwrite", "--snapshots", "0.3", "--max-steps", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    assert [s.step for s in snapshots.listed(out)] == []                # 0.3 of 18 = step 5
    assert [s.step for s in snapshots.listed(out / ".replaced-by-overwrite")] == [1, 2, 9]
