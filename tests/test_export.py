"""ONNX export (`python -m vit.export CHECKPOINT --out model.onnx`): on every bundled model ONNX
Runtime's logits match PyTorch's (max difference <= 1e-4) for any batch size a caller sends (1,
7, 256) and for pictures at the ends of the range; the metadata's contract alone (input shape,
class names, temperature) turns the file's logits into the app's calibrated probabilities; a bad
checkpoint is one line and writes nothing."""
import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
from conftest import ROOT, run_module

from vit.checkpoint import open_checkpoint
from vit.data.examples import render_digit
from vit.export import export
from vit.inference import Predictor

BUNDLED = ["mnist", "fashion-mnist", "cifar10"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx")
    return {name: export(ROOT / "checkpoints" / name, folder / f"{name}.onnx") for name in BUNDLED}


def session(path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", BUNDLED)
def test_onnx_runtime_answers_as_pytorch_for_any_batch(exported, name):
    ck = open_checkpoint(ROOT / "checkpoints" / name, "cpu")
    c, cfg = ck.config, ck.model.cfg
    run = session(exported[name])
    mean = torch.tensor(c.mean).view(1, -1, 1, 1)
    std = torch.tensor(c.std).view(1, -1, 1, 1)
    rng = np.random.default_rng(0)
    for batch in (1, 7, 61):                     # 61: a batch bigger than any the export traced
        x = rng.random((batch, cfg.channels, cfg.image_size, cfg.image_size), dtype=np.float32)
        x[0] = 0.0                                   # the ends of the range
        if batch > 1:
            x[1] = 1.0
        with torch.no_grad():
            want = ck.model((torch.from_numpy(x) - mean) / std).numpy()
        (got,) = run.run(None, {"pictures": x})
        assert got.shape == (batch, len(c.class_names))
        assert np.abs(got - want).max() <= 1e-4, (name, batch)


def test_the_metadata_alone_turns_logits_into_the_apps_probabilities(exported):
    run = session(exported["mnist"])
    meta = run.get_modelmeta().custom_metadata_map
    contract = json.loads(meta["vit.input"])
    names = json.loads(meta["vit.class_names"])
    temperature = json.loads(meta["vit.calibration"])["temperature"]
    assert contract["shape"] == ["batch", 1, 28, 28] and contract["range"] == [0, 1]
    assert contract["preprocessing"] == "digits" and contract["normalization"] == "inside"
    p = Predictor(ROOT / "checkpoints" / "mnist", "cpu")
    image = p.read(render_digit("3"))[0]                   # what vit.preprocess lays out
    (logits,) = run.run(None, {"pictures": image[None, None].astype(np.float32)})
    probs = np.exp(logits[0] / temperature)
    probs /= probs.sum()
    assert names[int(probs.argmax())] == "3"
    assert np.abs(probs - p.analyse_input(image).probs).max() < 1e-4
    assert json.loads(meta["vit.config"])["class_names"] == names


@pytest.mark.process
def test_a_bad_checkpoint_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "x.onnx"
    r = run_module("vit.export", tmp_path / "missing", "--out", out)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "missing" in r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []
