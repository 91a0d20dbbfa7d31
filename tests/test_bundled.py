"""The bundled checkpoints: they load, they meet the brief, and their recorded test accuracy is
what they really score on the full test set (when ../shared/data holds it).

All three are complete (provenance from a clean commit, <= 1 M parameters, >= 4x4 patch grid)
and score their recorded accuracy (within 3 in 10,000 for a model scored in bf16 on a GPU);
CIFAR-10's meets its brief (>= 85 %, 8x8 grid, colour, trained by the default command); every
example under the canvas — digits, clothing, photo scenes — is read as what it shows."""
import json

import pytest
from conftest import ROOT, bundled_test_logits

from vit.checkpoint import load_checkpoint, open_checkpoint
from vit.data.loading import DataError
from vit.scoring import score

pytestmark = pytest.mark.data

MNIST = ROOT / "checkpoints" / "mnist"
FASHION = ROOT / "checkpoints" / "fashion-mnist"
CIFAR = ROOT / "checkpoints" / "cifar10"


@pytest.mark.parametrize("folder", [MNIST, FASHION, CIFAR], ids=["mnist", "fashion-mnist", "cifar10"])
def test_bundled_checkpoint_is_complete(folder):
    cfg = json.loads((folder / "config.json").read_text())
    prov = cfg["provenance"]
    assert prov["command"].startswith("python -m vit.train")
    assert len(prov["commit"]) == 40, "trained from a clean, committed tree"
    assert cfg["num_parameters"] <= 1_000_000
    assert cfg["model"]["image_size"] // cfg["model"]["patch_size"] >= 4
    model = load_checkpoint(folder, "cpu")
    assert model.num_parameters() == cfg["num_parameters"]
    assert cfg["dataset"] == folder.name and (folder / "metrics.csv").is_file()
    assert "cuda" in prov["device"] or "cpu" in prov["device"]


def test_cifar10_checkpoint_meets_the_brief():
    """Issue 13: >= 85 % on the test set (the last epoch's, not a chosen one), <= 1 M parameters,
    a patch grid of at least 8x8, trained by the default cifar10 command."""
    cfg = json.loads((CIFAR / "config.json").read_text())
    assert cfg["test_accuracy"] >= 0.85 and cfg["provenance"]["epochs"] == cfg["training"]["epochs"]
    assert cfg["num_parameters"] <= 1_000_000
    assert cfg["model"]["image_size"] // cfg["model"]["patch_size"] >= 8
    assert cfg["model"]["channels"] == 3 and len(cfg["normalization"]["mean"]) == 3
    words = cfg["provenance"]["command"].split()
    assert words[:5] == ["python", "-m", "vit.train", "--dataset", "cifar10"]
    assert not {w for w in words if w.startswith("--")} - {
        "--dataset", "--data-dir", "--no-download", "--threads", "--overwrite"}, \
        "only flags that say where and how it ran: the recipe is the data set's defaults"


@pytest.mark.parametrize("folder", [MNIST, FASHION, CIFAR], ids=["mnist", "fashion-mnist", "cifar10"])
def test_bundled_accuracy_is_what_config_records(folder):
    ck = open_checkpoint(folder, "cpu")
    try:   # full test split from ../shared/data (or, for Fashion-MNIST, Debian's copy)
        logits, labels = bundled_test_logits(folder.name)
    except DataError:
        pytest.skip(f"{ck.config.dataset} is not on this machine")
    acc = score(logits, labels)[1]
    # Recorded under CUDA's bf16 autocast, scored here in float32: a photo or two may flip.
    tolerance = 3e-4 if "cuda" in ck.config.provenance.get("device", "") else 1e-4
    assert acc == pytest.approx(ck.config.test_accuracy, abs=tolerance)


@pytest.mark.parametrize("folder, style", [(MNIST, "digits"), (FASHION, "objects"),
                                           (CIFAR, "photos")],
                         ids=["mnist", "fashion-mnist", "cifar10"])
def test_every_example_under_the_canvas_is_read_as_what_it_shows(folder, style, tmp_path):
    """The Draw tab's examples (vit/data/examples.py, drawn by the project's code) are answered as
    the class they show by the bundled model they are offered with."""
    from vit.data.examples import example_name, write_examples
    from vit.inference import Predictor
    p = Predictor(str(folder), "cpu")
    for path in write_examples(tmp_path, style):
        a = p.analyse(path)
        assert a.is_class and p.class_names[int(a.probs.argmax())] == example_name(path), path
