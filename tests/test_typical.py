"""'Looks like nothing it was trained on' (vit/explain/typical.py, `python -m vit.fit_typical`):
the distance is small near a class and large far from all; a checkpoint's typical.safetensors
is checked like its weights; the app's verdict says so in one line; the trainer's degradations
(vit/data/degrade.py) are seeded and keep the digit.
"""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import ROOT, run_main, run_module

from vit.checkpoint import CheckpointError, open_checkpoint, save_checkpoint
from vit.data.coarse import coarse
from vit.data.degrade import degrade
from vit.data.filled import filled
from vit.data.thicken import thicken
from vit.explain.typical import TYPICAL_FILE, Typical, fit, from_tensors
from vit.inference import Predictor
from vit.model import ViT, ViTConfig
from vit.storage import save_tensors


def test_distance_is_small_near_a_class_and_large_far_from_all():
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 5, (3, 8))
    labels = rng.integers(0, 3, 3000)
    features = centres[labels] + rng.normal(0, 1, (3000, 8))
    typical = fit(features, labels, 3)
    near = typical.distance(centres[1] + rng.normal(0, 1, 8))
    far = typical.distance(centres.mean(0) + 20)
    assert isinstance(near, float) and near < 30 < far       # chi-square with 8 dof: ~8 near
    assert typical.distance(features[:5]).shape == (5,)


def test_stored_tensors_are_checked_in_one_line():
    good = {"means": torch.zeros(10, 4), "precision": torch.eye(4)}
    assert isinstance(from_tensors(good, 10, 4, "t"), Typical)
    for bad, words in (({"means": torch.zeros(10, 4)}, "expected tensors"),
                       ({**good, "precision": torch.eye(5)}, "do not fit"),
                       ({**good, "means": torch.full((10, 4), float("nan"))}, "NaN")):
        with pytest.raises(ValueError, match=words) as e:
            from_tensors(bad, 10, 4, "t")
        assert "\n" not in str(e.value)


def _checkpoint(folder, far_above=None):
    torch.manual_seed(0)
    model = ViT(ViTConfig(image_size=28, channels=1, patch_size=7, dim=16, depth=1, heads=2,
                          mlp_dim=32, num_classes=10))
    calibration = {"temperature": 1.0} | ({"far_above": far_above} if far_above else {})
    save_checkpoint(folder, model, {"dataset": "mnist", "class_names": [str(i) for i in range(10)],
                                    "normalization": {"mean": [0.1307], "std": [0.3081]},
                                    "training": {"val_size": 50}, "calibration": calibration})
    return model


def test_a_checkpoint_promising_a_typical_file_must_have_it(tmp_path):
    _checkpoint(tmp_path, far_above=50.0)
    with pytest.raises(CheckpointError, match="typical.safetensors is missing"):
        open_checkpoint(tmp_path, "cpu")
    save_tensors(tmp_path / TYPICAL_FILE, {"means": torch.zeros(10, 16), "precision": torch.eye(16)})
    assert open_checkpoint(tmp_path, "cpu").typical.means.shape == (10, 16)
    config = json.loads((tmp_path / "config.json").read_text())
    config["calibration"]["far_above"] = -1
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="far_above must be a number > 0"):
        open_checkpoint(tmp_path, "cpu")


def test_saving_new_weights_drops_a_typical_file_fitted_to_old_ones(tmp_path):
    _checkpoint(tmp_path, far_above=50.0)
    save_tensors(tmp_path / TYPICAL_FILE, {"means": torch.zeros(10, 16), "precision": torch.eye(16)})
    _checkpoint(tmp_path)                         # the trainer's next epoch: no far_above
    assert not (tmp_path / TYPICAL_FILE).exists()
    assert open_checkpoint(tmp_path, "cpu").typical is None


def test_a_picture_far_from_every_class_is_not_one_of_these(tmp_path):
    """With means far from any token the model makes, everything is 'unfamiliar', in one line;
    with the threshold past every distance, nothing is."""
    _checkpoint(tmp_path, far_above=1.0)
    save_tensors(tmp_path / TYPICAL_FILE, {"means": torch.full((10, 16), 100.0),
                                           "precision": torch.eye(16)})
    drawing = np.zeros((200, 200), np.uint8)
    drawing[40:160, 90:110] = 255
    a = Predictor(str(tmp_path), "cpu").analyse(drawing)
    assert not a.is_class and a.verdict.kind == "unfamiliar"
    assert a.verdict.reason.startswith("This doesn't look like anything the model was trained on")
    config = json.loads((tmp_path / "config.json").read_text())
    config["calibration"]["far_above"] = 1e9
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert Predictor(str(tmp_path), "cpu").analyse(drawing).verdict.kind != "unfamiliar"


@pytest.mark.process
def test_fit_typical_fits_on_training_images_and_records_how(tmp_path, tiny_data, capsys):
    _checkpoint(tmp_path / "ck")
    r = run_module("vit.fit_typical", str(tmp_path / "ck"), "--data-dir", str(tiny_data),
                   "--share", "0.1")
    assert r.returncode == 0, r.stderr
    ck = open_checkpoint(tmp_path / "ck", "cpu")
    record = ck.config.calibration
    assert record["far_above"] > 0 and ck.typical is not None
    assert "270 training images" in record["typical"]["fitted_on"]      # 320 less 50 held out
    assert record["typical"]["command"].startswith("python -m vit.fit_typical ")
    assert 0.02 <= record["typical"]["validation_far"] <= 0.2
    # (the real process above; a refusal in this process)
    bad = run_main(capsys, "vit.fit_typical", str(tmp_path / "nowhere"), "--data-dir", str(tiny_data))
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


def test_degrade_is_seeded_keeps_the_digit_and_touches_only_the_picked(tmp_path):
    x = torch.zeros(20, 1, 28, 28)
    x[:, :, 6:22, 12:16] = 1.0                                            # a "1"
    a = degrade(x, 0.5, torch.Generator().manual_seed(3))
    b = degrade(x, 0.5, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    changed = (a != x).flatten(1).any(1)
    assert 0 < changed.sum() < 20
    for img in a[changed]:
        assert img[0, 6:22, 12:16].mean() > 0.5 > img[0, :, :6].mean()   # the stroke still there
    # A rank's rows of the global batch get the numbers the whole batch would have drawn.
    whole = degrade(x, 0.5, torch.Generator().manual_seed(4))
    part = degrade(x[10:], 0.5, torch.Generator().manual_seed(4), total=20, mine=slice(10, 20))
    assert torch.equal(whole[10:], part)


def test_stretch_makes_a_one_wide_and_short_or_narrow_and_tall_and_keeps_old_runs_draws():
    """--stretch shows digits as writers normalised to a square send them (a one as wide as it
    is tall: docs/reliability.md); without it, a resumed run draws what it always drew."""
    from vit.data.affine import Augment
    plain = Augment(degrees=0.0, scale=(1.0, 1.0), shift=0.0, shear=0.0)
    x = torch.zeros(64, 1, 28, 28)
    x[:, :, 4:24, 12:16] = 1.0                                            # a "1", 20 x 4
    theta = replace(plain, stretch=0.35).draw(64, torch.Generator().manual_seed(0))
    ink = Augment.apply(x, theta)
    y = ink > 0.5
    tall = y.any(3).sum((1, 2)).float()
    wide = y.any(2).sum((1, 2)).float()
    assert (wide > 4.5).any() and (tall < 18).any() and (tall > 20.5).any()
    assert torch.corrcoef(torch.stack([wide, tall]))[0, 1] < -0.5        # one grows, the other shrinks
    assert (ink.sum((1, 2, 3)) / 80).sub(1).abs().max() < 0.1            # the ink's area kept
    for seed in range(3):
        assert torch.equal(Augment().draw(8, torch.Generator().manual_seed(seed)),
                           Augment(stretch=0.0).draw(8, torch.Generator().manual_seed(seed)))


def test_filled_makes_a_shaded_garment_one_flat_silhouette_and_is_seeded():
    """--filled shows a garment as the page's Fill tool makes one: the shading gone, the shape kept."""
    x = torch.zeros(20, 1, 28, 28)
    x[:, :, 4:24, 8:20] = torch.linspace(0.1, 0.9, 12)                  # shaded cloth
    x[:, :, 14:24, 13:15] = 0.0                                          # the gap between legs
    a = filled(x, 0.5, torch.Generator().manual_seed(3))
    assert torch.equal(a, filled(x, 0.5, torch.Generator().manual_seed(3)))
    changed = (a != x).flatten(1).any(1)
    assert 0 < changed.sum() < 20
    for img in a[changed]:
        assert img[0, 6:12, 10:18].min() == 1.0                          # flat inside
        assert img[0, 16:24, 13:15].max() < 0.5 and img[0, :, :6].max() == 0   # gap, background
    whole = filled(x, 0.5, torch.Generator().manual_seed(4))
    part = filled(x[10:], 0.5, torch.Generator().manual_seed(4), total=20, mine=slice(10, 20))
    assert torch.equal(whole[10:], part)


def test_thicken_widens_every_stroke_by_a_pixel_each_side_and_is_seeded():
    """--thicken shows a digit as a thick pen writes it: a 2-px stroke becomes 4 px, a small
    loop's hole shrinks; the grey edge is kept, the background stays black."""
    x = torch.zeros(20, 1, 28, 28)
    x[:, :, 4:24, 13:15] = 1.0                                           # a 2-px "1"
    x[:, :, 4:24, 12] = 0.4                                              # its soft left edge
    a = thicken(x, 0.5, torch.Generator().manual_seed(3))
    assert torch.equal(a, thicken(x, 0.5, torch.Generator().manual_seed(3)))
    changed = (a != x).flatten(1).any(1)
    assert 0 < changed.sum() < 20
    for img in a[changed]:
        assert (img[0, 10] == 1.0).sum() == 4                             # 2 px -> 4 px of full ink
        assert img[0, 10, 11] == 0.4 and img[0, 10, :11].max() == 0      # edge kept, then black
    assert torch.equal(a[~changed], x[~changed])
    whole = thicken(x, 0.5, torch.Generator().manual_seed(4))
    part = thicken(x[10:], 0.5, torch.Generator().manual_seed(4), total=20, mine=slice(10, 20))
    assert torch.equal(whole[10:], part)


def test_coarse_shows_a_thin_one_as_a_form_reader_stores_it_and_is_seeded():
    """--coarse shows a digit as UCI optdigits stores other writers' digits: its box scaled to a
    nearly fixed shape, so a thin 1 arrives half to four fifths as wide as it is tall, in few grey
    levels, laid out as the app lays out an upload (its box 20 px, inside 28); a blank image stays
    blank."""
    x = torch.zeros(20, 1, 28, 28)
    x[:, :, 4:24, 13:15] = 1.0                                           # a 2-px "1"
    x[7] = 0                                                             # a blank one
    a = coarse(x, 0.5, torch.Generator().manual_seed(3))
    assert torch.equal(a, coarse(x, 0.5, torch.Generator().manual_seed(3)))
    changed = (a != x).flatten(1).any(1)
    assert 0 < changed.sum() < 19 and not changed[7]
    for img in a[changed]:
        cols = torch.nonzero(img[0].amax(0) > 0.5).flatten()
        rows = torch.nonzero(img[0].amax(1) > 0.5).flatten()
        assert 7 <= cols.max() - cols.min() + 1 <= 17 and 18 <= rows.max() - rows.min() + 1 <= 21
        assert img.max() == 1.0 and img[0, :3].max() == 0                # stretched ink, black rim
    assert torch.equal(a[~changed], x[~changed])
    whole = coarse(x, 0.5, torch.Generator().manual_seed(4))
    part = coarse(x[10:], 0.5, torch.Generator().manual_seed(4), total=20, mine=slice(10, 20))
    assert torch.equal(whole[10:], part)


def test_the_bundled_cifar_model_says_noise_is_not_a_photo():
    """The CIFAR-10 model read 32-px random noise as "frog" at 96 %: now none of 50 is taken for a
    photo. (Noise enlarged, which the resize averages towards grey, is caught less often: see
    docs/reliability.md.)"""
    folder = ROOT / "checkpoints" / "cifar10"
    if not (folder / TYPICAL_FILE).exists():
        pytest.skip("no typical.safetensors")
    rng = np.random.default_rng(0)
    p = Predictor(str(folder), "cpu")
    for _ in range(50):
        noise = rng.integers(0, 256, (32, 32, 3)).astype(np.uint8)
        assert p.analyse(noise).verdict.kind == "unfamiliar"


@pytest.mark.process
def test_fit_typical_takes_an_image_folders_model(tmp_path):
    """A model of your own folder (`--dataset folder`) is fitted on that folder's train/."""
    from test_imagefolder import write_folder
    write_folder(tmp_path / "photos", classes=("a", "b", "c"), per_class=30)
    torch.manual_seed(0)
    model = ViT(ViTConfig(image_size=32, channels=3, patch_size=8, dim=16, depth=1, heads=2,
                          mlp_dim=32, num_classes=3))
    save_checkpoint(tmp_path / "ck", model, {
        "dataset": "folder", "class_names": ["a", "b", "c"],
        "normalization": {"mean": [0.5] * 3, "std": [0.25] * 3}, "training": {"val_size": 9}})
    r = run_module("vit.fit_typical", str(tmp_path / "ck"), "--data-dir", str(tmp_path / "photos"),
                   "--share", "0.2")
    assert r.returncode == 0, r.stderr
    assert "81 training images" in open_checkpoint(tmp_path / "ck", "cpu").config.calibration[
        "typical"]["fitted_on"]


def test_the_page_says_so_for_noise_with_the_bundled_cifar_model(tmp_path):
    """/classify, as a client calls it, with the CIFAR-10 model as the page's only model."""
    from PIL import Image

    from vit.ui import create_app
    if not (ROOT / "checkpoints" / "cifar10" / TYPICAL_FILE).exists():
        pytest.skip("no typical.safetensors")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "cifar10").symlink_to(ROOT / "checkpoints" / "cifar10")
    page = create_app(tmp_path / "models", device="cpu").page
    noise = np.random.default_rng(1).integers(0, 256, (32, 32, 3)).astype(np.uint8)
    Image.fromarray(noise).save(tmp_path / "noise.png")
    value = page.classify(str(tmp_path / "noise.png"))
    assert value["label"].startswith("not a")
    assert len(value["confidences"]) == 10


@pytest.mark.process
def test_fit_faithfulness_measures_the_maps_on_validation_and_the_page_leads_with_the_best(
        tmp_path, tiny_data, capsys):
    """`python -m vit.fit_faithfulness` writes which map removes the answer fastest, measured on
    the validation split, and the page's choice (`lead_map`) follows what it wrote."""
    from vit.explain.faithful import LEADS, lead_map
    _checkpoint(tmp_path / "ck")
    r = run_module("vit.fit_faithfulness", str(tmp_path / "ck"), "--data-dir", str(tiny_data),
                   "--n", "4")
    assert r.returncode == 0, r.stderr
    config = open_checkpoint(tmp_path / "ck", "cpu").config
    record = config.faithfulness
    assert set(LEADS) <= set(record["deletion"]) and record["lead"] in LEADS
    assert record["lead"] == min(LEADS, key=record["deletion"].get) == lead_map(config)
    assert "4 validation images" in record["measured_on"]
    bad = run_main(capsys, "vit.fit_faithfulness", str(tmp_path / "nowhere"), "--data-dir",
                   str(tiny_data))
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr
