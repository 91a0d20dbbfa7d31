"""Pretrained ViTs become this project's ViT (vit/convert.py): randomly initialised torchvision
and timm models — nothing is downloaded — give the same logits and the same per-head attention
once converted (ViT-B/16 at full size within 1e-4, attention equal to nn.MultiheadAttention's own);
variants this model lacks and bad sources are refused in one line; the command writes a
checkpoint the app opens, replaces one only with --overwrite, and a full disk is one line."""
import importlib.util
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import Lazy
from PIL import Image

from vit.checkpoint import load_checkpoint, open_checkpoint
from vit.convert import ConvertError, from_timm, from_torchvision, main
from vit.ui.render import PICTURES

torchvision, timm = Lazy("torchvision"), Lazy("timm")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("timm") is None,
                                reason="timm (requirements-dev.txt) is not installed")


def randomised(model):
    """Every parameter random (libraries zero-initialise heads: equal zero logits prove nothing)."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


def images(n, size, seed=1):
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def torchvision_attention(tv, x, layer: int = 0):
    """torchvision's own per-head attention weights of one layer, (B, H, T, T)."""
    tokens = tv._process_input(x)
    tokens = torch.cat([tv.class_token.expand(x.shape[0], -1, -1), tokens], dim=1)
    tokens = tokens + tv.encoder.pos_embedding
    for blk in list(tv.encoder.layers)[:layer]:
        tokens = blk(tokens)
    blk = tv.encoder.layers[layer]
    h = blk.ln_1(tokens)
    return blk.self_attention(h, h, h, need_weights=True, average_attn_weights=False)[1]


def test_a_small_torchvision_vit_converts_to_the_same_logits_and_attention():
    tv = randomised(torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=3, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=5))
    model = from_torchvision(tv)
    x = images(4, 32)
    with torch.no_grad():
        logits, attn = model(x, return_attention=True)
        torch.testing.assert_close(logits, tv(x), atol=1e-5, rtol=1e-5)
        for layer in range(3):
            torch.testing.assert_close(attn[:, layer], torchvision_attention(tv, x, layer),
                                       atol=1e-5, rtol=1e-5)
    assert model.cfg.grid == 4 and model.cfg.stem_channels == 0 and model.cfg.norm_eps == 1e-6


def test_vit_b16_at_full_size():
    """The seeds' ViT-Base/16: 12 blocks, 12 heads, width 768, 224x224 — logits within 1e-4,
    attention (1, 12, 12, 197, 197)."""
    tv = randomised(torchvision.models.vit_b_16(weights=None))
    model = from_torchvision(tv)
    x = images(1, 224)
    with torch.no_grad():
        logits, attn = model(x, return_attention=True)
        assert (logits - tv(x)).abs().max().item() <= 1e-4
        torch.testing.assert_close(attn[:, 11], torchvision_attention(tv, x, 11), atol=1e-5, rtol=1e-4)
    assert attn.shape == (1, 12, 12, 197, 197)
    assert (model.cfg.dim, model.cfg.mlp_dim, model.cfg.depth, model.cfg.heads) == (768, 3072, 12, 12)


def test_a_timm_vit_converts_to_the_same_logits():
    tm = randomised(timm.create_model("vit_tiny_patch16_224", pretrained=False))
    model = from_timm(tm)
    x = images(2, 224)
    with torch.no_grad():
        assert (model(x) - tm(x)).abs().max().item() <= 1e-4
    assert (model.cfg.dim, model.cfg.depth, model.cfg.heads, model.cfg.grid) == (192, 12, 3, 14)


@pytest.mark.parametrize("kwargs, message", [
    (dict(init_values=0.1), "LayerScale"),
    (dict(global_pool="avg", fc_norm=False), "pooled by 'avg'"),
    (dict(reg_tokens=4), "[CLS]"),
])
def test_timm_variants_this_model_lacks_are_refused(kwargs, message):
    from timm.models.vision_transformer import VisionTransformer
    tm = VisionTransformer(img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2,
                           num_classes=3, **kwargs)
    with pytest.raises(ConvertError, match=message.replace("[", r"\[").replace("]", r"\]")):
        from_timm(tm)


def test_not_a_vit_is_refused_in_one_line():
    with pytest.raises(ConvertError, match="not a torchvision VisionTransformer"):
        from_torchvision(torchvision.models.resnet18())


def test_the_command_writes_a_checkpoint_the_app_opens(tmp_path, capsys):
    out = tmp_path / "vit-tiny"
    assert main(["timm:vit_tiny_patch16_224", "--random", "--out", str(out)]) == 0
    ck = open_checkpoint(out)
    assert len(ck.class_names) == 1000 and ck.config.mean == (0.5, 0.5, 0.5)   # timm augreg cfg
    assert ck.config.provenance["source"] == "timm:vit_tiny_patch16_224"
    assert ck.config.provenance["command"].startswith("python -m vit.convert timm:vit_tiny")
    # The app reads it: a colour picture through every view, without a crash.
    from vit.ui import create_app
    (tmp_path / "models").mkdir()
    (out).rename(tmp_path / "models" / "vit-tiny")
    page = create_app(tmp_path / "models", device="cpu").page
    rgb = (np.random.default_rng(0).random((300, 400, 3)) * 255).astype(np.uint8)
    Image.fromarray(rgb).save(tmp_path / "photo.png")
    visit = page.visit()
    visit.record = replace(visit.record, patch=100, views_open=True)
    out = page.analyse_upload(visit, str(tmp_path / "photo.png"), "vit-tiny", True, 12, 3)
    assert "reads this as" in out["status"] or "Not one of" in out["status"]
    assert all(isinstance(out[p], np.ndarray) for p in PICTURES)
    assert load_checkpoint(tmp_path / "models" / "vit-tiny").cfg.image_size == 224


@pytest.mark.parametrize("argv, message", [
    (["resnet:foo", "--out", "x"], "torchvision:NAME or timm:NAME"),
    (["torchvision:no_such_model", "--random", "--out", "x"], "torchvision has no model"),
    (["torchvision:resnet18", "--random", "--out", "x"], "not a torchvision VisionTransformer"),
])
def test_bad_sources_get_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_an_existing_checkpoint_is_replaced_only_with_overwrite(tmp_path, capsys):
    """`python -m vit.convert … --out checkpoints/mnist` replaced the bundled model unasked."""
    import hashlib
    out = tmp_path / "mnist"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"the model people use")
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}
    assert main(["timm:vit_tiny_patch16_224", "--random", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already holds a checkpoint" in err and "--overwrite" in err and err.count("\n") == 1
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()} == before
    assert main(["timm:vit_tiny_patch16_224", "--random", "--out", str(out), "--overwrite"]) == 0
    assert open_checkpoint(out).config.provenance["source"] == "timm:vit_tiny_patch16_224"


def test_evaluate_says_in_one_line_that_a_converted_model_has_no_test_set_here(tmp_path, capsys):
    """It took MNIST for a converted ImageNet model and ended in a traceback."""
    from vit.evaluate import main as evaluate
    out = tmp_path / "vit-tiny"
    assert main(["timm:vit_tiny_patch16_224", "--random", "--out", str(out)]) == 0
    capsys.readouterr()
    assert evaluate(["--checkpoint", str(out), "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "names no data set" in err and err.count("\n") == 1


def test_a_folder_holding_a_run_or_other_files_is_refused_and_a_file_too(tmp_path, capsys):
    """A trainer's run in progress (train_state/, no checkpoint yet) was written into, and an
    --out that is a file ended in a traceback."""
    out = tmp_path / "run"
    (out / "train_state").mkdir(parents=True)
    (out / "train_state" / "state.safetensors").write_bytes(b"a run in progress")
    (out / ".DS_Store").write_bytes(b"")
    assert main(["timm:vit_tiny_patch16_224", "--random", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out} already holds files (train_state): pass --overwrite" in err
    assert err.count("\n") == 1 and not (out / "config.json").exists()
    (tmp_path / "a-file").write_text("not a folder")
    assert main(["timm:vit_tiny_patch16_224", "--random", "--out", str(tmp_path / "a-file")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".DS_Store").write_bytes(b"")               # hidden files alone: still empty
    assert main(["timm:vit_tiny_patch16_224", "--random", "--out", str(empty)]) == 0


def test_a_full_disk_while_converting_is_one_line_and_keeps_the_old_checkpoint(tmp_path, capsys,
                                                                                monkeypatch):
    """A failed write (safetensors reports a full disk as its own error) was a traceback."""
    from safetensors import SafetensorError

    import vit.storage
    out = tmp_path / "vit-tiny"
    assert main(["timm:vit_tiny_patch16_224", "--random", "--out", str(out)]) == 0
    before = (out / "model.safetensors").read_bytes()
    capsys.readouterr()

    def save_file(tensors, filename, metadata=None):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                              'message: "No space left on device" })')
    monkeypatch.setattr(vit.storage, "save_file", save_file)
    assert main(["timm:vit_tiny_patch16_224", "--random", "--out", str(out), "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: could not write {out / 'model.safetensors'}: No space left on "
                          f"device; free some space") and err.count("\n") == 1
    assert (out / "model.safetensors").read_bytes() == before and not list(out.glob(".*.tmp"))
