"""Checkpoints shaped like the Hugging Face Hub's (vit/hub.py), never touching the network: the
trainer's checkpoint carries a model card with the Hub's metadata (library, tags, data set, a
model-index with its test accuracy) that hostile provenance cannot break; `vit.from_pretrained`
reads a folder, and a Hub model (hf://user/repo) from a folder laid out as the Hub cache
(offline), as do the CLIs and the app (VIT_HUB_MODELS); a plain "a/b" is never looked up on the
Hub; `save_pretrained` round-trips and refuses a model without class
names in one line; `push_to_hub` sends the checkpoint's files and nothing else; an unknown id is one
line."""
import json
import shutil

import huggingface_hub
import pytest
import torch
import yaml
from conftest import ROOT, run_module
from test_app_models import META, tiny

import vit
from vit import ViT, ViTConfig
from vit.checkpoint import CheckpointError, load_checkpoint, open_checkpoint
from vit.hub import CARD, push_to_hub

REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(tmp_path, repo="someone/mnist-vit", source=ROOT / "checkpoints" / "mnist"):
    """A Hub cache holding `repo` as snapshot_download leaves it."""
    cache = tmp_path / "hub"
    folder = cache / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / REVISION
    snap.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(source / name, snap / name)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(REVISION)
    return cache


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_the_trainers_checkpoint_carries_a_model_card_hostile_provenance_cannot_break(tmp_path):
    hostile = {"command": "python -m vit.train | x\n---\nlicense: evil `rm`", "device": "a|b"}
    folder = tiny(tmp_path / "ck", test_accuracy=0.9876, provenance=hostile,
                  class_names=["---", "a|b", "`x`", "3", "4", "5", "6", "7", "8", "9"])
    card = (folder / CARD).read_text()
    meta = front_matter(card)
    assert meta["library_name"] == "vit-explorer" and meta["license"] == "mit"
    assert meta["pipeline_tag"] == "image-classification" and "vision-transformer" in meta["tags"]
    assert meta["datasets"] == ["ylecun/mnist"]
    (result,) = meta["model-index"][0]["results"]
    assert result["metrics"][0] == {"type": "accuracy", "value": 98.76, "name": "Test accuracy (%)"}
    assert result["dataset"]["split"] == "test"
    body = card.split("---\n", 2)[2]
    rows = [r for r in body.splitlines() if r.startswith("|")]
    assert all(r.count("|") - r.count("\\|") == 3 for r in rows)            # two cells each
    assert "98.76 %" in body and "Handwritten digits (MNIST)" in body
    for ck in ("mnist", "fashion-mnist", "cifar10"):          # the bundled checkpoints' cards
        bundled = front_matter((ROOT / "checkpoints" / ck / CARD).read_text())
        config = json.loads((ROOT / "checkpoints" / ck / "config.json").read_text())
        value = bundled["model-index"][0]["results"][0]["metrics"][0]["value"]
        assert value == round(100 * config["test_accuracy"], 2), ck


def test_from_pretrained_and_save_pretrained_round_trip(tmp_path):
    model = vit.from_pretrained(str(ROOT / "checkpoints" / "mnist"))
    assert not model.training
    vit.save_pretrained(model, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["README.md", "config.json",
                                                                     "model.safetensors"]
    again = load_checkpoint(tmp_path / "copy", "cpu")
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(model(x), again(x))
    assert open_checkpoint(tmp_path / "copy").config.class_names == tuple(META["class_names"])
    with pytest.raises(CheckpointError, match="no class names"):
        vit.save_pretrained(ViT(ViTConfig()), tmp_path / "bare")


def test_a_hub_id_loads_from_the_hub_cache_offline(tmp_path):
    cache = hub_cache(tmp_path)
    assert huggingface_hub.constants.HF_HUB_OFFLINE            # conftest: never the network
    model = vit.from_pretrained("hf://someone/mnist-vit", cache_dir=cache)
    want = load_checkpoint(ROOT / "checkpoints" / "mnist", "cpu")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                   want.state_dict().values()))
    with pytest.raises(CheckpointError, match="no Hub model someone/other in the Hub cache"):
        vit.from_pretrained("hf://someone/other", cache_dir=cache)


@pytest.mark.process
def test_the_clis_take_a_hub_id(tmp_path, monkeypatch):
    cache = hub_cache(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))           # (HF_HUB_OFFLINE=1: conftest)
    from vit.data.examples import render_digit
    render_digit("3").save(tmp_path / "3.png")
    r = run_module("vit.predict", tmp_path / "3.png", "--checkpoint", "hf://someone/mnist-vit")
    assert r.returncode == 0 and r.stdout.startswith(f"{tmp_path / '3.png'}: 3 "), r.stderr
    r = run_module("vit.predict", tmp_path / "3.png", "--checkpoint", "hf://someone/missing")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "no Hub model someone/missing" in r.stderr and str(cache) not in r.stderr


def test_the_app_offers_hub_models_by_id_and_skips_a_missing_one(tmp_path, monkeypatch):
    from vit.ui.models import Models
    cache = hub_cache(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    (tmp_path / "empty").mkdir()
    warned = []
    models = Models(tmp_path / "empty", "cpu", warn=warned.append,
                    hub=["someone/mnist-vit", "hf://someone/missing"])
    assert models.names == ["someone/mnist-vit"] and models.default == "someone/mnist-vit"
    assert models.get("someone/mnist-vit").class_names[3] == "3"
    assert len(warned) == 1 and "someone/missing" in warned[0] and str(cache) not in warned[0]


def test_push_to_hub_sends_the_checkpoint_files_and_nothing_else(tmp_path, monkeypatch):
    calls = []

    class FakeApi:
        def __init__(self, token=None):
            calls.append(("token", token))

        def create_repo(self, repo_id, **kw):
            calls.append(("create", repo_id, kw["exist_ok"]))

        def upload_folder(self, **kw):
            calls.append(("upload", kw["repo_id"], kw["allow_patterns"], kw["folder_path"]))
            return "https://huggingface.co/me/vit/commit/abc"
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    folder = ROOT / "checkpoints" / "mnist"
    assert push_to_hub(folder, "me/vit", token="t").endswith("/commit/abc")
    assert calls == [("token", "t"), ("create", "me/vit", True),
                     ("upload", "me/vit", ["config.json", "model.safetensors",
                                           "typical.safetensors", "README.md"], str(folder))]


def test_the_model_file_knows_nothing_of_checkpoints_or_the_hub():
    """No import circle: vit/model.py imports nothing of this project, and the Hub and the
    checkpoint code build on it (timm keeps its Hub code outside the model files too)."""
    import ast
    tree = ast.parse((ROOT / "vit" / "model.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and (m == "vit" or m.startswith("vit."))}, imported
    assert "huggingface_hub" not in imported
