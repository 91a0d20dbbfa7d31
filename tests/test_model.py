"""The model (vit/model.py): logits and attention shapes, attention rows that are distributions,
the fused (SDPA) and explicit attention paths agreeing within 1e-5, the features/head split, the
default config, initialisation, weight decay on weight matrices only, config checks; the conv
stem keeps one token per patch and each stem layer widens a token's view by one pixel; a plain
ViT has no stem parameters."""
import pytest
import torch

from vit.model import ViT, ViTConfig
from vit.training.session import param_groups


@pytest.fixture
def model():
    torch.manual_seed(0)
    return ViT(ViTConfig(dim=32, depth=3, heads=4, mlp_dim=64)).eval()


def test_logits_and_attention_shapes(model):
    x = torch.randn(5, 1, 28, 28)
    assert model(x).shape == (5, 10)
    logits, attn = model(x, return_attention=True)
    assert logits.shape == (5, 10)
    assert attn.shape == (5, 3, 4, 50, 50)          # batch, depth, heads, 1+49, 1+49


def test_attention_rows_are_distributions(model):
    _, attn = model(torch.randn(3, 1, 28, 28), return_attention=True)
    assert (attn >= 0).all()
    torch.testing.assert_close(attn.sum(-1), torch.ones(attn.shape[:-1]), atol=1e-5, rtol=0)


def test_fused_and_explicit_paths_agree(model):
    torch.manual_seed(1)
    for blk in model.blocks:          # make attention non-trivial: random init is near-uniform
        torch.nn.init.normal_(blk.attn.qkv.weight, std=0.3)
    x = torch.randn(4, 1, 28, 28)
    fused = model(x)
    explicit, attn = model(x, return_attention=True)
    assert attn.max() > 0.2           # some head is peaked, so the check means something
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_forward_features_and_head_split(model):
    x = torch.randn(2, 1, 28, 28)
    tokens, attn = model.forward_features(x)
    assert tokens.shape == (2, 50, 32) and attn is None
    torch.testing.assert_close(model.forward_head(tokens), model(x))


def test_default_config_meets_the_brief():
    cfg = ViTConfig()
    m = ViT(cfg)
    assert m.num_parameters() <= 1_000_000
    assert cfg.grid >= 4 and cfg.grid == 7


def test_init_is_truncated_normal_002():
    torch.manual_seed(0)
    m = ViT(ViTConfig(dim=64, mlp_dim=128))
    w = m.blocks[0].mlp[0].weight
    assert abs(w.std().item() - 0.02) < 0.002 and abs(w.mean().item()) < 0.002
    assert m.blocks[0].mlp[0].bias.abs().sum() == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"patch_size": 5}, "not divisible by patch_size"),
    ({"dim": 30, "heads": 4}, "not divisible by heads"),
    ({"depth": 0}, "depth must be a positive"),
    ({"dropout": 1.5}, "dropout"),
])
def test_bad_config_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**kwargs)


def test_weight_decay_only_on_matrices(model):
    decay, no_decay = param_groups(model, 0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert "pos_embed" not in decayed and "cls_token" not in decayed
    assert not any("norm" in n or n.endswith(".bias") for n in decayed)
    assert "blocks.0.attn.qkv.weight" in decayed and "patch_embed.weight" in decayed


def test_conv_stem_keeps_one_token_per_patch():
    """The hybrid input (a 3x3 conv before patching) changes what a token sees, not the grid:
    attention maps still have 1 + 7x7 tokens, and a pixel only reaches its own patch's token
    and those of the patches next to it (one-pixel rim)."""
    torch.manual_seed(0)
    m = ViT(ViTConfig(dim=32, depth=2, heads=4, mlp_dim=64, stem_channels=8, stem_layers=1)).eval()
    _, attn = m(torch.randn(2, 1, 28, 28), return_attention=True)
    assert attn.shape == (2, 2, 4, 50, 50)
    x = torch.zeros(1, 1, 28, 28, requires_grad=True)
    emb = m.patch_embed(m.stem(x)).flatten(2)              # (1, D, 49) patch tokens
    emb[0, :, 3 * 7 + 3].sum().backward()                  # the token of patch (3, 3)
    rows, cols = torch.nonzero(x.grad[0, 0]).unbind(1)
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (11, 16, 11, 16)  # 4x4 + rim


def test_each_stem_layer_widens_the_rim_by_one_pixel():
    """The default 2-layer stem: a token of patch (3, 3) sees its 4x4 pixels and a 2-pixel rim."""
    torch.manual_seed(0)
    m = ViT(ViTConfig(dim=32, depth=1, heads=4, mlp_dim=64, stem_channels=8, stem_layers=2)).eval()
    x = torch.zeros(1, 1, 28, 28, requires_grad=True)
    m.patch_embed(m.stem(x)).flatten(2)[0, :, 3 * 7 + 3].sum().backward()
    rows, cols = torch.nonzero(x.grad[0, 0]).unbind(1)
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (10, 17, 10, 17)


def test_a_config_from_before_stem_layers_means_one_layer():
    """Checkpoints written before `stem_layers` existed had a one-layer stem: a config.json
    without the key loads as that (the weights' header would refuse any other reading)."""
    from vit.checkpoint import parse_config
    model = ViTConfig(stem_layers=1).to_dict()
    del model["stem_layers"]
    cfg = parse_config({"model": model, "class_names": [str(i) for i in range(10)],
                        "normalization": {"mean": 0.1307, "std": 0.3081}, "dataset": "mnist"}, "x")
    assert cfg.model.stem_layers == 1


def test_plain_vit_has_no_stem_parameters():
    names = {n for n, _ in ViT(ViTConfig(stem_channels=0)).named_parameters()}
    assert not any(n.startswith("stem.") for n in names)
    assert "patch_embed.weight" in names
    with pytest.raises(ValueError, match="stem_channels"):
        ViTConfig(stem_channels=-1)
