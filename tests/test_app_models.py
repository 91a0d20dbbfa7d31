"""The app's model selector with broken checkpoints: a clear one-line message, and the app keeps
the model it had. Runs the app module in-process with VIT_CHECKPOINTS pointing at a test folder."""
import importlib
import json
import pickle
import shutil
import sys

import gradio as gr
import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    shutil.copytree(ROOT / "checkpoints" / "mnist", root / "mnist",
                    ignore=shutil.ignore_patterns("train_state", "best"))
    trunc = root / "truncated"
    shutil.copytree(root / "mnist", trunc)
    data = (trunc / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(data[: len(data) // 3])
    mism = root / "mismatched"
    shutil.copytree(root / "mnist", mism)
    cfg = json.loads((mism / "config.json").read_text())
    cfg["model"]["dim"] *= 2
    (mism / "config.json").write_text(json.dumps(cfg))
    pick = root / "pickled"
    shutil.copytree(root / "mnist", pick)
    marker = root / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (pick / "model.safetensors").write_bytes(pickle.dumps(Payload()))
    mp = pytest.MonkeyPatch()
    mp.setenv("VIT_CHECKPOINTS", str(root))
    sys.modules.pop("app", None)
    module = importlib.import_module("app")
    yield module, marker
    mp.undo()
    sys.modules.pop("app", None)


def test_selector_lists_every_checkpoint_mnist_first(app):
    module, _ = app
    assert list(module.CHECKPOINTS)[0] == "mnist"
    assert {"truncated", "mismatched", "pickled"} <= set(module.CHECKPOINTS)


@pytest.mark.parametrize("name, message", [
    ("truncated", "truncated or corrupt"),
    ("mismatched", "does not match the weights"),
    ("pickled", "truncated or corrupt"),
])
def test_broken_checkpoint_is_refused_with_one_line_and_previous_model_kept(app, name, message):
    module, marker = app
    with pytest.raises(gr.Error, match=message) as e:
        module.get_predictor(name)
    assert "\n" not in e.value.message
    selector, current, card = module.choose_model(name, "mnist")
    assert selector["value"] == "mnist" and current == "mnist"
    assert not marker.exists()                       # the pickle's payload never ran
