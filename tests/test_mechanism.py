"""The step-by-step attention walk-through and the Figure 7 views (vit/explain/mechanism.py, the
pictures in vit/pictures/mechanism_views.py, the panel in vit/ui/mechanism_panel.py): the hand
computation must give the very weights the model uses (<= 1e-5, with and without the stem),
distances must match a computation written out by hand, and every picture must be drawn — for
every layer and head, [CLS] and a corner patch, models without a stem, drawn digits or the test
set; position-embedding similarity is a cosine similarity."""
import math

import numpy as np
import pytest
import torch
from conftest import ROOT

from vit.explain.mechanism import (
    CLS,
    attention_distance,
    embed,
    embedding_filters,
    mean_attention_distance,
    patch_distances,
    position_similarity,
    stem_rim,
    walk_through,
    window_tokens,
)
from vit.inference import Predictor
from vit.model import ViT, ViTConfig
from vit.pictures.mechanism_views import (
    WALK_WIDTH,
    attention_distance_picture,
    filters_picture,
    position_similarity_picture,
    walk_through_picture,
)
from vit.ui import mechanism_panel as panel
from vit.ui import views


def tiny(stem_channels=4, seed=0):
    torch.manual_seed(seed)
    model = ViT(ViTConfig(dim=32, depth=3, heads=2, mlp_dim=64, stem_channels=stem_channels,
                          stem_layers=2)).eval()
    for blk in model.blocks:                       # sharper attention than at initialisation
        torch.nn.init.normal_(blk.attn.qkv.weight, std=0.3)
    torch.nn.init.normal_(model.pos_embed, std=0.5)
    return model


@pytest.fixture(scope="module", params=[4, 0], ids=["stem", "no-stem"])
def model(request):
    return tiny(request.param)


@pytest.fixture(scope="module")
def x():
    torch.manual_seed(1)
    return torch.randn(1, 1, 28, 28)


@pytest.fixture(scope="module")
def bundled():
    return {name: Predictor(ROOT / "checkpoints" / name, "cpu") for name in ("mnist", "fashion-mnist")}


@pytest.fixture(scope="module")
def analysed(bundled):
    from vit.data.examples import render_digit
    return {name: (p, p.analyse(render_digit("4"))) for name, p in bundled.items()}


# --- the walk-through against the model itself --------------------------------------------------

def head_outputs(model, x):
    """Each block's per-head attention output (B, T, D) before the projection, as the model ran."""
    seen = {}
    hooks = [blk.attn.proj.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, i[0]))
             for n, blk in enumerate(model.blocks)]
    with torch.no_grad():
        _, maps = model.tokens_and_maps(x, return_attention=True)
    for h in hooks:
        h.remove()
    return maps, seen


@pytest.mark.parametrize("patch", [CLS, 0, 24, 48])
def test_hand_computed_attention_is_the_models_own(model, x, patch):
    maps, outs = head_outputs(model, x)
    Dh = model.cfg.dim // model.cfg.heads
    for layer in range(model.cfg.depth):
        for head in range(model.cfg.heads):
            w = walk_through(model, x, patch, layer, head)
            assert w.token == (0 if patch == CLS else patch + 1)
            np.testing.assert_allclose(w.weights, maps[layer][0, head, w.token].numpy(), atol=1e-5)
            np.testing.assert_allclose(w.out, outs[layer][0, w.token, head * Dh:(head + 1) * Dh].numpy(),
                                       atol=1e-5)
            assert w.weights.sum() == pytest.approx(1, abs=1e-5) and (w.weights > 0).all()
            np.testing.assert_allclose(w.scores, w.k @ w.q / math.sqrt(Dh), rtol=1e-4, atol=1e-5)
            assert w.k.shape == w.v.shape == (50, Dh) and w.q.shape == w.out.shape == (Dh,)


def test_the_token_is_embedding_plus_position(model, x):
    for patch in (CLS, 10):
        w = walk_through(model, x, patch)
        np.testing.assert_allclose(w.start, w.embedding + w.position, atol=1e-6)
        np.testing.assert_array_equal(w.token_in, w.start)          # layer 1 reads it as it is
    w = walk_through(model, x, CLS)
    np.testing.assert_allclose(w.embedding, model.cls_token[0, 0].detach().numpy())
    assert w.pixels is None and w.patch is None
    w = walk_through(model, x, 10)                             # row 1, column 3 of the 7x7 grid
    np.testing.assert_array_equal(w.pixels, x[0, :, 4:8, 12:16].numpy())
    later = walk_through(model, x, 10, layer=2)
    assert not np.allclose(later.token_in, later.start)             # two blocks changed it since


# --- Figure 7 numbers -----------------------------------------------------------------------------

def test_position_similarity_is_a_cosine_similarity(model):
    sim = position_similarity(model)
    assert sim.shape == (49, 7, 7)
    flat = sim.reshape(49, 49)
    np.testing.assert_allclose(np.diag(flat), 1, atol=1e-5)
    np.testing.assert_allclose(flat, flat.T, atol=1e-6)
    assert flat.min() >= -1 - 1e-5 and flat.max() <= 1 + 1e-5


def test_the_bundled_models_learned_that_neighbours_are_alike(bundled):
    for p in bundled.values():
        sim = position_similarity(p.model).reshape(p.grid ** 2, -1)
        d = patch_distances(p.grid, 1)
        assert sim[d == 1].mean() > 0.3 > 0 > sim[d >= 3].mean()


def brute_mean_distance(attn_row_fn, G, P):
    """Mean over query patches of sum_j a_ij d_ij / sum_j a_ij, the loops written out."""
    total = 0.0
    for i in range(G * G):
        row = attn_row_fn(i)
        num = sum(row[j] * P * math.hypot(i // G - j // G, i % G - j % G) for j in range(G * G))
        total += num / sum(row)
    return total / (G * G)


def test_mean_attention_distance_of_constructed_patterns():
    G, P = 5, 4
    T = G * G + 1
    attn = np.zeros((2, 1, 3, T, T))                            # 2 images, 1 layer, 3 heads
    attn[:, :, 0] = np.eye(T)                                   # every token looks only at itself
    attn[:, :, 1] = 1 / T                                       # evenly over all, [CLS] included
    for i in range(G * G):                                      # half on [CLS], half on the right
        r, c = divmod(i, G)                                     # neighbour (itself at the edge)
        attn[:, :, 2, 1 + i, 0] = 0.5
        attn[:, :, 2, 1 + i, 1 + (i + 1 if c < G - 1 else i)] = 0.5
    attn[:, :, 2, 0, 0] = 1
    d = attention_distance(attn, G, P)
    assert d.shape == (1, 3)
    assert d[0, 0] == pytest.approx(0)
    assert d[0, 1] == pytest.approx(brute_mean_distance(lambda i: [1.0] * (G * G), G, P))
    assert d[0, 1] == pytest.approx(patch_distances(G, P).mean())
    # [CLS]'s half is dropped and the rest renormalised: P px for 4 patches in 5 of each row.
    assert d[0, 2] == pytest.approx(P * (G - 1) / G)


def test_mean_attention_distance_averages_the_models_own_maps_over_images(model):
    torch.manual_seed(2)
    xs = torch.randn(5, 1, 28, 28)
    with torch.no_grad():
        maps = torch.stack(model.tokens_and_maps(xs, return_attention=True)[1], 1).numpy()
    want = attention_distance(maps, 7, 4)
    np.testing.assert_allclose(mean_attention_distance(model, xs), want, rtol=1e-5)
    np.testing.assert_allclose(mean_attention_distance(model, xs, batch=2), want, rtol=1e-5)
    one = [mean_attention_distance(model, xs[i:i + 1]) for i in range(5)]
    np.testing.assert_allclose(np.mean(one, 0), want, rtol=1e-5)


def test_linear_patch_embedding_filters_are_its_principal_components():
    model = tiny(stem_channels=0)
    f = embedding_filters(model, k=6)
    assert f.stem is None and f.rim == 0 and f.components.shape == (6, 1, 4, 4)
    _, s, vh = torch.linalg.svd(model.patch_embed.weight.detach().flatten(1), full_matrices=False)
    got = f.components.reshape(6, -1)
    np.testing.assert_allclose(np.abs(got @ vh[:6].T.numpy()), np.eye(6), atol=1e-4)  # up to sign
    np.testing.assert_allclose(f.energy, (s[:6] ** 2 / (s ** 2).sum()).numpy(), rtol=1e-4)


def test_hybrid_filters_linearise_the_real_pixels_to_token_map(x):
    model = tiny(stem_channels=4)
    assert stem_rim(model) == 2
    emb, _ = embed(model, x)
    window = x[:, :, 2 * 4 - 2:3 * 4 + 2, 3 * 4 - 2:4 * 4 + 2]        # patch (2, 3) and its rim
    np.testing.assert_allclose(window_tokens(model, window)[0].detach().numpy(),
                               emb[0, 2 * 7 + 3].numpy(), atol=1e-5)
    f = embedding_filters(model, k=8, x=x)
    assert f.components.shape == (8, 1, 8, 8) and f.stem.shape == (4, 1, 3, 3)
    assert f.linearised_at == 25                                       # the 5x5 inner patches
    c = f.components.reshape(8, -1)
    np.testing.assert_allclose(c @ c.T, np.eye(8), atol=1e-4)
    assert (np.diff(f.energy) <= 1e-7).all() and 0 < f.energy.sum() <= 1 + 1e-6


# --- pictures and the panel -----------------------------------------------------------------------

def not_blank(pic):
    assert pic.dtype == np.uint8 and pic.ndim == 3 and pic.shape[2] == 3
    packed = pic[..., 0].astype(np.int32) << 16 | pic[..., 1].astype(np.int32) << 8 | pic[..., 2]
    assert len(np.unique(packed)) > 20                                  # colours, not a flat fill


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_render_for_cls_and_a_corner_patch(analysed, name):
    p, a = analysed[name]
    for patch, cls in ((None, True), (0, False), (p.grid ** 2 - 1, False)):
        pic, text = panel.render(p, a, panel.walk_of(p, a, 1, 1, patch, cls))
        assert pic.shape == (590, WALK_WIDTH, 3)
        not_blank(pic)
        assert text.startswith("**[CLS], layer 1" if cls else f"**Patch {patch + 1}, layer 1")


def test_render_every_layer_and_head_and_its_text_names_the_top_token(analysed):
    p, a = analysed["mnist"]
    cfg = p.model.cfg
    for layer in range(1, cfg.depth + 1):
        for head in range(1, cfg.heads + 1):
            pic, text = panel.render(p, a, panel.walk_of(p, a, layer, head, 17))
            w = walk_through(p.model, p.tensor(a.image), 17, layer - 1, head - 1)
            top = int(w.weights.argmax())
            assert f"layer {layer}, head {head}" in text
            assert f"The largest weights: **{'[CLS]' if top == 0 else f'patch {top}'}**" in text
            # the same numbers the explorer shows for that patch
            np.testing.assert_allclose(w.weights, a.explanation.attn[layer - 1, head - 1, 18], atol=1e-5)


def test_render_clamps_what_a_client_sends(analysed):
    p, a = analysed["mnist"]
    cfg, N = p.model.cfg, p.grid ** 2
    assert views.clamp(p, 99, 99, 10 ** 6) == (cfg.depth - 1, cfg.heads - 1, N - 1)
    assert views.clamp(p, -4, 0, -3) == (0, 0, 0)
    assert views.clamp(p, "x", None, "y") == (cfg.depth - 1, 0, (p.grid // 2) * p.grid + p.grid // 2)
    pic, text = panel.render(p, a, panel.walk_of(p, a, 99, 99, 10 ** 6))
    assert f"Patch {N}, layer {cfg.depth}, head {cfg.heads}" in text
    not_blank(pic)


def test_model_pictures_from_drawn_digits_are_cached(bundled):
    p = bundled["fashion-mnist"]
    m = panel.model_images(p)
    assert panel.model_images(p) is m                             # per model, computed once
    G = p.grid
    assert m.position.shape[0] > 14 * G * 3 and m.distance.shape == (430, 640, 3)
    for pic in (m.position, m.distance, m.filters):
        not_blank(pic)
    assert "30 drawn digits" in m.caption and "first-layer filters" in m.caption
    assert "[CLS] is left out as query and as key" in m.caption


def test_model_pictures_from_the_test_set(bundled, tiny_data):
    p = bundled["mnist"]
    m = panel.model_images(p, tiny_data)
    assert f"{panel.TEST_IMAGES} images of the MNIST test set" in m.caption
    assert panel.testset_inputs(p, tiny_data / "nowhere") is None    # no data there: drawn digits
    assert "drawn digits" in panel.model_images(p, tiny_data / "nowhere").caption


def test_figure7_pictures_of_a_model_without_a_stem():
    model = tiny(stem_channels=0)
    pic = filters_picture(embedding_filters(model, 16), 4)
    not_blank(pic)
    sim = position_similarity_picture(position_similarity(model))
    not_blank(sim)
    dist = attention_distance_picture(np.full((3, 2), 5.0), 7, 4, "averaged over nothing")
    not_blank(dist)


@pytest.mark.parametrize("cfg", [
    dict(image_size=32, channels=3, patch_size=4, stem_channels=4, stem_layers=1),   # colour
    dict(image_size=28, patch_size=14, stem_channels=4, stem_layers=2),              # 2x2 grid
    dict(image_size=56, patch_size=8, stem_channels=0),                              # bigger input
], ids=["colour", "grid2", "56px"])
def test_pictures_for_other_models(cfg):
    torch.manual_seed(0)
    model = ViT(ViTConfig(dim=16, depth=2, heads=2, mlp_dim=16, **cfg)).eval()
    S, C, G = model.cfg.image_size, model.cfg.channels, model.cfg.grid
    image = np.random.default_rng(0).random((S, S, C) if C == 3 else (S, S)).astype(np.float32)
    x = torch.from_numpy(image).permute(2, 0, 1)[None] if C == 3 else torch.from_numpy(image)[None, None]
    for patch in (CLS, G * G - 1):
        w = walk_through(model, x, patch, 1, 1)
        pic = walk_through_picture(w, image, model.cfg.patch_size, stem_rim(model))
        assert pic.shape == (590, WALK_WIDTH, 3)
        not_blank(pic)
    f = embedding_filters(model, 16, x)
    R = model.cfg.patch_size + 2 * stem_rim(model)
    assert f.components.shape == (min(16, C * R * R), C, R, R)
    not_blank(filters_picture(f, model.cfg.patch_size))
    not_blank(position_similarity_picture(position_similarity(model)))


def test_the_panel_has_no_layer_or_head_of_its_own(analysed):
    """It follows the page's one layer, head and patch: two sets of sliders used to disagree."""
    import gradio as gr
    p, a = analysed["mnist"]
    with gr.Blocks() as demo:
        mp = panel.build(p)
    assert mp.walk.elem_id == "mech-walk"
    assert not [b for b in demo.blocks.values() if isinstance(b, gr.Slider)]
    _, text = panel.render(p, a, panel.walk_of(p, a, 2, 3, 10))
    assert "patch 11, layer 2, head 3" in text.lower()


def test_walk_through_refuses_what_is_not_in_the_model(x):
    model = tiny()
    for patch, layer, head in ((49, 0, 0), (-2, 0, 0), (0, 3, 0), (0, -1, 0), (0, 0, 2)):
        with pytest.raises(ValueError):
            walk_through(model, x, patch, layer, head)
