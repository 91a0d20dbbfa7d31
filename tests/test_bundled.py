"""The bundled checkpoints: they load, they meet the brief, and their recorded test accuracy is
what they really score on the full test set (when ../shared/data holds it)."""
import json

import pytest

from conftest import HAS_MNIST, ROOT, SHARED_DATA
from vit.checkpoint import load_checkpoint
from vit.data import load_split
from vit.train import evaluate

MNIST = ROOT / "checkpoints" / "mnist"


FASHION = ROOT / "checkpoints" / "fashion-mnist"


@pytest.mark.parametrize("folder", [MNIST, FASHION], ids=["mnist", "fashion-mnist"])
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


@pytest.mark.skipif(not HAS_MNIST, reason="full MNIST is not in ../shared/data")
def test_bundled_mnist_accuracy_is_what_config_records():
    model = load_checkpoint(MNIST, "cpu")
    test = load_split("mnist", SHARED_DATA, train=False)
    norm = model.config["normalization"]
    _, acc, _ = evaluate(model, test.images, test.labels, norm["mean"], norm["std"], 1000,
                         next(model.parameters()).device)
    assert acc == pytest.approx(model.config["test_accuracy"], abs=1e-4)


def _fashion_test_split():
    from vit.data import DataError
    try:
        return load_split("fashion-mnist", SHARED_DATA, train=False)   # or Debian's copy
    except DataError:
        pytest.skip("Fashion-MNIST is not on this machine")


def test_bundled_fashion_accuracy_is_what_config_records():
    test = _fashion_test_split()
    model = load_checkpoint(FASHION, "cpu")
    norm = model.config["normalization"]
    _, acc, _ = evaluate(model, test.images, test.labels, norm["mean"], norm["std"], 1000,
                         next(model.parameters()).device)
    assert acc == pytest.approx(model.config["test_accuracy"], abs=1e-4)
