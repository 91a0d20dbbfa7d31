"""Checkpoint folders (vit/checkpoint.py): a save/load round trip, and every load error as one
line — a missing folder or file, truncated weights, a pickle in place of the weights (refused
without being run), a config whose shapes, layers or stem do not match the weights, unknown keys,
a config that is not JSON; a killed write leaves the old checkpoint."""
import json
import os
import pickle

import pytest
import torch

from vit.checkpoint import CheckpointError, load_checkpoint, open_checkpoint, save_checkpoint
from vit.model import ViT, ViTConfig

META = {"dataset": "mnist", "class_names": [str(i) for i in range(10)],
        "normalization": {"mean": 0.1307, "std": 0.3081}, "test_accuracy": 0.5}


@pytest.fixture
def ckpt(tmp_path):
    torch.manual_seed(0)
    model = ViT(ViTConfig(dim=16, depth=2, heads=2, mlp_dim=32))
    save_checkpoint(tmp_path / "ck", model, META)
    return tmp_path / "ck", model


def one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


def test_round_trip(ckpt):
    folder, model = ckpt
    loaded = open_checkpoint(folder, "cpu")
    assert not loaded.model.training and loaded.folder == folder
    assert loaded.class_names == META["class_names"]
    assert loaded.device == torch.device("cpu")
    cfg = loaded.config
    assert cfg.num_parameters == model.num_parameters() and cfg.model == model.cfg
    assert (cfg.mean, cfg.std, cfg.dataset, cfg.test_accuracy) == ((0.1307,), (0.3081,), "mnist", 0.5)
    x = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(loaded.model(x), model.eval()(x), atol=0, rtol=0)
    assert sorted(os.listdir(folder)) == ["README.md", "config.json", "model.safetensors"]  # no temp


def test_load_checkpoint_returns_the_plain_model(ckpt):
    folder, model = ckpt
    loaded = load_checkpoint(folder, "cpu")
    assert type(loaded) is ViT and not loaded.training and loaded.cfg == model.cfg
    assert not hasattr(loaded, "class_names") and not hasattr(loaded, "config")


def test_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint folder not found") as e:
        load_checkpoint(tmp_path / "nope")
    one_line(e)


def test_missing_files(ckpt):
    folder, _ = ckpt
    (folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors: file not found"):
        load_checkpoint(folder)
    (folder / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json: file not found"):
        load_checkpoint(folder)


def test_truncated_weights(ckpt):
    folder, _ = ckpt
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt") as e:
        load_checkpoint(folder)
    one_line(e)


def test_pickle_in_place_of_weights_is_refused_without_running_it(ckpt, tmp_path):
    folder, _ = ckpt
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (folder / "model.safetensors").write_bytes(pickle.dumps({"weights": Payload()}))
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(folder)
    assert not marker.exists()


def test_config_that_does_not_match_weights(ckpt):
    folder, _ = ckpt
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model"]["dim"] = 32
    cfg["model"]["mlp_dim"] = 64
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(folder)
    msg = one_line(e)
    assert "does not match" in msg and "cls_token" in msg and "(1, 1, 16)" in msg and "(1, 1, 32)" in msg


def test_config_with_more_layers_than_weights(ckpt):
    folder, _ = ckpt
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model"]["depth"] = 3
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"blocks\.2\.\S+ .*missing"):
        load_checkpoint(folder)


def test_stem_setting_that_does_not_match_weights(ckpt):
    """Weights trained with the conv stem, config saying there is none (an old config.json put
    beside new weights): the message names the first tensor whose shape differs."""
    folder, _ = ckpt
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model"]["stem_channels"] == 32              # the fixture uses the default
    cfg["model"]["stem_channels"] = 0
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(folder)
    msg = one_line(e)
    assert "patch_embed.weight" in msg and "(16, 32, 4, 4)" in msg and "(16, 1, 4, 4)" in msg


@pytest.mark.parametrize("where", ["top", "model"])
def test_unknown_config_keys(ckpt, where):
    folder, _ = ckpt
    cfg = json.loads((folder / "config.json").read_text())
    (cfg if where == "top" else cfg["model"])["colour"] = "blue"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="unknown .*key.*colour") as e:
        load_checkpoint(folder)
    one_line(e)


def test_config_that_is_not_json(ckpt):
    folder, _ = ckpt
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(folder)


def test_a_killed_write_leaves_the_old_checkpoint(ckpt, monkeypatch):
    folder, model = ckpt
    before = (folder / "model.safetensors").read_bytes()
    import vit.storage as cp

    def dying_save(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(cp, "save_file", dying_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(folder, model, META)
    assert (folder / "model.safetensors").read_bytes() == before
    assert sorted(os.listdir(folder)) == ["README.md", "config.json", "model.safetensors"]
    load_checkpoint(folder)
