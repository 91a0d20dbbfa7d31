"""Fine-tuning (`python -m vit.train --init CHECKPOINT --dataset folder --data-dir D`): a new head
for the folder's classes, the rest from the checkpoint, position embeddings resized with the grid.

Position embeddings resized as a grid with [CLS] kept; every weight but the head copied; a
converted timm ViT fine-tuned on a folder the test writes (the loss falls, the folder's classes
and normalisation, `vit.evaluate` scores it, the app answers with it); bad --init and --dataset
folder flags one line each; --resume never reads the --init checkpoint again."""
import csv
import importlib.util

import numpy as np
import pytest
import torch
from conftest import Lazy, run_main, run_module
from PIL import Image
from test_imagefolder import write_folder

from vit.checkpoint import load_checkpoint, open_checkpoint, save_checkpoint
from vit.data.loading import Split
from vit.model import ViT, ViTConfig
from vit.training.finetune import InitError, load_pretrained, resize_pos_embed

timm = Lazy("timm")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("timm") is None,
                                reason="timm (requirements-dev.txt) is not installed")


def tiny_converted(folder):
    """A small timm ViT (32 px, 8-px patches: a 4x4 grid), randomly initialised and converted:
    what `python -m vit.convert timm:NAME` writes, without a download."""
    from vit.convert import from_timm
    torch.manual_seed(0)
    source = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, num_classes=7, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2)
    model = from_timm(source.eval())
    save_checkpoint(folder, model, {"dataset": None, "class_names": [f"c{i}" for i in range(7)],
                                    "normalization": {"mean": [0.5] * 3, "std": [0.5] * 3},
                                    "provenance": {"command": "test", "source": "timm (random)"}})
    return model


def test_position_embeddings_resize_as_a_grid_and_keep_cls():
    pos = torch.randn(1, 1 + 16, 8)
    assert resize_pos_embed(pos, 4) is pos
    big = resize_pos_embed(pos, 6)
    assert big.shape == (1, 37, 8) and torch.equal(big[:, 0], pos[:, 0])
    # A smooth (linear) field stays that field's values, resampled: the corners keep their order.
    ramp = torch.arange(16.0).reshape(1, 16, 1).expand(1, 16, 8)
    up = resize_pos_embed(torch.cat([torch.zeros(1, 1, 8), ramp], 1), 8)[0, 1:, 0].reshape(8, 8)
    assert up[0, 0] < up[0, -1] < up[-1, 0] < up[-1, -1]


def test_every_weight_but_the_head_comes_from_the_checkpoint(tmp_path):
    source = tiny_converted(tmp_path / "ck")
    cfg = ViTConfig(**{**source.cfg.__dict__, "num_classes": 3, "image_size": 48})
    model = ViT(cfg)
    new_head = model.head.weight.clone()
    assert load_pretrained(model, tmp_path / "ck") == ["head.bias", "head.weight"]
    for name, value in source.state_dict().items():
        if name == "pos_embed":
            assert model.pos_embed.shape == (1, 37, 32)           # 4x4 -> 6x6 patches
        elif not name.startswith("head."):
            assert torch.equal(model.state_dict()[name], value), name
    assert torch.equal(model.head.weight, new_head) and model.head.out_features == 3
    with pytest.raises(InitError, match="has dim 32, this run 48"):
        load_pretrained(ViT(ViTConfig(**{**cfg.__dict__, "dim": 48, "heads": 2})), tmp_path / "ck")


@pytest.mark.train
def test_fine_tuning_a_converted_model_on_a_folder_learns_and_the_app_opens_it(tmp_path):
    """The command a user runs: a tiny converted model, a tiny folder of three classes at 40x40,
    fine-tuned at 48 px (the grid grows 4x4 -> 6x6). The loss falls, the classes are the folder's,
    the normalisation is the folder's own, and the page answers a photo with it."""
    tiny_converted(tmp_path / "pretrained")
    data = tmp_path / "pets"
    write_folder(data, classes=("cat", "dog", "fox"), per_class=20, size=(40, 40))
    write_folder(data, classes=("cat", "dog", "fox"), per_class=4, size=(40, 40), split="val")
    out = tmp_path / "models" / "pets"
    r = run_module("vit.train", "--init", tmp_path / "pretrained", "--dataset", "folder",
                   "--data-dir", data, "--image-size", "48", "--out", out, "--epochs", "12",
                   "--batch-size", "15", "--lr", "1e-3", "--policy", "none", "--no-augment",
                   "--ema", "0", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    ck = open_checkpoint(out)
    assert ck.class_names == ["cat", "dog", "fox"] and ck.model.cfg.grid == 6
    assert ck.config.mean != (0.5, 0.5, 0.5) and len(ck.config.mean) == 3      # the folder's own
    assert ck.config.training["init"] == str(tmp_path / "pretrained")
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    losses = [float(row["train_loss"]) for row in rows]
    assert losses[-1] < 0.6 * losses[0], losses
    assert float(rows[-1]["test_acc"]) == 1.0                 # the colours tell the classes apart
    r = run_module("vit.evaluate", "--checkpoint", out, "--data-dir", data)
    assert r.returncode == 0 and "test accuracy 100.00% (12/12 correct)" in r.stdout, r.stderr
    from vit.ui import create_app
    page = create_app(tmp_path / "models", device="cpu").page
    assert ("pets", "pets") in page.models.choices()          # named by its checkpoint folder
    pixels = np.full((300, 400, 3), 20, np.uint8)
    pixels[:150, :, 1] = 210                                   # a "dog": green top half
    Image.fromarray(pixels).save(tmp_path / "photo.png")
    status = page.analyse_upload(page.visit(), str(tmp_path / "photo.png"), "pets", True, 2,
                                 1)["status"]
    assert "dog" in status, status


@pytest.mark.parametrize("args, message", [
    (["--init", "no/such/folder"], "checkpoint folder not found"),
    (["--dataset", "cifar10", "--init", "{ck}", "--preset", "s"], "pass only one"),
    (["--dataset", "folder", "--data-dir", "{data}/nothing"], "no train/ folder"),
    (["--dataset", "folder", "--data-dir", "{data}/one", "--init", "{ck}"], "one class folder"),
    (["--dataset", "mnist", "--init", "{ck}"], "takes 3-channel images; mnist has 1"),
])
def test_bad_init_and_folder_flags_get_one_line(tmp_path, args, message, capsys):
    """In this process (conftest.run_main): refused before anything trains."""
    tiny_converted(tmp_path / "ck")
    (tmp_path / "nothing").mkdir()
    write_folder(tmp_path / "one", classes=("cat",), per_class=3)
    argv = [a.format(ck=tmp_path / "ck", data=tmp_path) for a in args]
    r = run_main(capsys, "vit.train", *argv, "--out", tmp_path / "out")
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()[-1]) < 300


def test_a_converted_checkpoint_loads_unchanged_after_all_this(tmp_path):
    model = tiny_converted(tmp_path / "ck")
    again = load_checkpoint(tmp_path / "ck")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_a_folder_models_checkpoint_is_not_judged_by_another_folder(tmp_path):
    """A process that described one folder (a training run, a notebook) still opens, and can
    fine-tune from, a model trained on another folder with other classes and size."""
    from vit.data.folders import folder_spec
    model = ViT(ViTConfig(image_size=32, channels=3, dim=16, depth=1, heads=2, mlp_dim=16,
                          num_classes=3))
    save_checkpoint(tmp_path / "pets", model, {
        "dataset": "folder", "class_names": ["cat", "dog", "fox"],
        "normalization": {"mean": [0.4] * 3, "std": [0.2] * 3}})
    write_folder(tmp_path / "cars", classes=("bus", "van"), per_class=3, size=(64, 64))
    folder_spec(tmp_path / "cars", 64)
    assert open_checkpoint(tmp_path / "pets").class_names == ["cat", "dog", "fox"]
    bigger = ViT(ViTConfig(image_size=64, channels=3, dim=16, depth=1, heads=2, mlp_dim=16,
                           num_classes=2))
    assert load_pretrained(bigger, tmp_path / "pets") == ["head.bias", "head.weight"]


def test_a_resumed_run_does_not_read_its_init_checkpoint_again(tmp_path):
    """--init's weights start a run; a resume takes its own saved state, so the checkpoint it
    started from may have moved or gone since."""
    from vit.training.config import TrainConfig, TrainingError
    from vit.training.session import new_session
    tc = TrainConfig(init=str(tmp_path / "gone"))
    mc = ViTConfig(image_size=32, channels=3, dim=16, depth=1, heads=2, mlp_dim=16)
    split = Split(torch.zeros(4, 32, 32, 3, dtype=torch.uint8), torch.arange(4) % 2)
    with pytest.raises(TrainingError, match="checkpoint folder not found"):
        new_session(tc, mc, split)
    assert new_session(tc, mc, split, fresh=False).model.cfg.dim == 16
