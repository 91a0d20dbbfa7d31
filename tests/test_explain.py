"""Attention maps, rollout and every picture the app shows, as pure functions
(vit/explain/attention.py, vit/pictures/attention_maps.py).

Rollout and attention rows against their definitions; every picture for grids from 2x2 to 14x14,
other image sizes and colour input; honest scales: a nearly even map stays dull, the bar's tick
sits at 1/T, captions give each map's max (or range) and [CLS]'s self-share; a click on a map
names its layer and head; a title too long for its bar fits inside the picture."""
import numpy as np
import pytest
import torch

from vit.explain.attention import explain, patch_attention_row, rollout
from vit.model import ViT, ViTConfig
from vit.pictures.attention_maps import (
    BAR_HEIGHT,
    CAPTION,
    HEAT_ALPHA,
    MINI,
    _attention_grid_template,
    _bar_span,
    _lut,
    _strip_template,
    attention_grid_picture,
    head_at,
    heat_overlay,
    patch_at,
    patch_grid_picture,
    single_map_picture,
    tile_caption,
    token_strip,
)

G = 7


@pytest.fixture(scope="module")
def attn():
    torch.manual_seed(0)
    model = ViT(ViTConfig(dim=32, depth=3, heads=2, mlp_dim=64)).eval()
    for blk in model.blocks:
        torch.nn.init.normal_(blk.attn.qkv.weight, std=0.3)
    return explain(model, torch.randn(1, 1, 28, 28))


@pytest.fixture
def img():
    a = np.zeros((28, 28), np.float32)
    a[6:22, 12:16] = 1.0
    return a


def test_explanation_shapes(attn):
    assert attn.probs.shape == (10,) and attn.probs.sum() == pytest.approx(1, abs=1e-5)
    assert attn.attn.shape == (3, 2, 50, 50)
    cls = attn.cls_maps
    assert cls.shape == (3, 2, 7, 7)
    np.testing.assert_allclose(cls[1, 0].ravel(), attn.attn[1, 0, 0, 1:])


def test_rollout_is_row_stochastic_and_matches_definition(attn):
    r = rollout(attn.attn)
    assert r.shape == (50, 50) and (r >= 0).all()
    np.testing.assert_allclose(r.sum(-1), 1, atol=1e-9)
    # by hand for the first layer alone
    a = 0.5 * attn.attn[0].mean(0) + 0.5 * np.eye(50)
    np.testing.assert_allclose(rollout(attn.attn[:1]), a / a.sum(-1, keepdims=True), atol=1e-9)


def test_rollout_of_uniform_attention_is_uniform_plus_identity():
    T = 50
    uniform = np.full((4, 3, T, T), 1 / T)
    r = rollout(uniform)
    assert r[0, 0] > r[0, 1] and np.allclose(r[0, 1:], r[0, 1])   # only [CLS] itself stands out


def test_clicked_patch_row_is_that_patchs_attention_row(attn):
    size = 336
    cell = size // G
    x, y = 3 * cell + 5, 2 * cell + 40                 # column 3, row 2 -> patch 2*7+3 = 17
    patch = patch_at(x, y, size, G)
    assert patch == 17
    row = patch_attention_row(attn.attn, layer=2, head=1, patch=patch, grid=G)
    np.testing.assert_allclose(row.ravel(), attn.attn[2, 1, 1 + 17, 1:])
    assert patch_at(size + 50, -3, size, G) == 6    # clicks off the edge clamp to the grid


def test_patch_grid_picture(img):
    pic = patch_grid_picture(img, G, 336)
    assert pic.shape == (336, 336, 3) and pic.dtype == np.uint8
    marked = patch_grid_picture(img, G, 336, marked=10)
    diff = np.any(marked != pic, axis=2)
    ys, xs = np.nonzero(diff)                          # only patch 10's outline changed
    assert ys.min() >= 48 and ys.max() < 96 and xs.min() >= 144 and xs.max() < 192


def test_token_strip_shows_cls_then_patches_in_order(img):
    strip = token_strip(img, G)
    template, corners = _strip_template(G, 10, 36)
    assert strip.shape == template.shape and len(corners) == 50
    y, x = corners[0]
    assert tuple(strip[y + 2, x + 2]) == (30, 90, 200)  # [CLS] is the blue box
    for t in (1, 10, 25):                                 # token t = patch t-1, upscaled 9x
        r, c = divmod(t - 1, G)
        y, x = corners[t]
        patch = img[r * 4:(r + 1) * 4, c * 4:(c + 1) * 4]
        np.testing.assert_array_equal(strip[y:y + 36:9, x:x + 36:9, 0], (patch * 255).astype(np.uint8))


def test_attention_grid_shared_and_per_map_scale(attn, img):
    shared = attention_grid_picture(img, attn.cls_maps, shared_scale=True)
    per_map = attention_grid_picture(img, attn.cls_maps, shared_scale=False)
    template, corners = _attention_grid_template(3, 2, 112)
    assert shared.shape[:2] == (template.shape[0] + 44, template.shape[1])
    assert shared.dtype == np.uint8 and not np.array_equal(shared, per_map)
    # In a per-map picture each map's hottest patch reaches the top of the colour map.
    top = _lut()[255].astype(int)
    y, x = corners[0][0]
    tile = per_map[y:y + 112, x:x + 112].astype(int)
    r, c = np.unravel_index(attn.cls_maps[0, 0].argmax(), (G, G))
    expected = (0.65 * top + 0.35 * img[r * 4, c * 4] * 255).astype(int)
    assert np.abs(tile[r * 16 + 2, c * 16 + 2] - expected).max() <= 1


def test_heat_overlay_matches_vectorised_grid(attn, img):
    """The one-map path and the all-maps path draw the same tile."""
    pic = attention_grid_picture(img, attn.cls_maps, shared_scale=False)
    _, corners = _attention_grid_template(3, 2, 112)
    y, x = corners[1][1]
    m = attn.cls_maps[1, 1]
    np.testing.assert_array_equal(pic[y:y + 112, x:x + 112], heat_overlay(img, m, float(m.max()), 112))


def test_single_map_picture(img):
    m = np.zeros((G, G))
    m[3, 4] = 1.0
    pic = single_map_picture(img, m, "title", 336, marked=5)
    assert pic.shape == (336 + 44, 336, 3) and pic.dtype == np.uint8


@pytest.mark.parametrize("image_size, patch_size", [(28, 14), (28, 7), (28, 4), (28, 2), (32, 8), (56, 4)])
def test_every_picture_works_for_any_grid(image_size, patch_size):
    """Grids from 2x2 to 14x14 and other image sizes: a 4x4-grid checkpoint (--patch-size 7)
    crashed the app's token strip (tile 36 is not a multiple of 7) and its clicked-patch state."""
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=image_size, patch_size=patch_size, dim=16, depth=2, heads=2, mlp_dim=16)
    e = explain(ViT(cfg).eval(), torch.randn(1, 1, image_size, image_size))
    g, S = cfg.grid, image_size
    img = np.random.default_rng(0).random((S, S)).astype(np.float32)
    assert e.cls_maps.shape == (2, 2, g, g)
    strip = token_strip(img, g)
    _, corners = _strip_template(g, max(10, g + 1), patch_size * max(1, round(36 / patch_size)))
    assert len(corners) == g * g + 1
    last = g * g - 1                                       # the last patch, bottom right, in its tile
    y, x = corners[-1]
    rep = max(1, round(36 / patch_size))
    np.testing.assert_array_equal(
        strip[y:y + patch_size * rep:rep, x:x + patch_size * rep:rep, 0],
        (img[-patch_size:, -patch_size:] * 255).astype(np.uint8))
    centre = (g // 2) * g + g // 2
    for marked in (0, centre, last):
        pic = patch_grid_picture(img, g, 336, marked=marked)
        assert pic.shape[0] == pic.shape[1] == S * max(1, 336 // S)
        row = patch_attention_row(e.attn, 1, 1, marked, g)
        assert row.shape == (g, g)
        single = single_map_picture(img, row, "t", 336, marked=marked)
        assert single.shape[1] == pic.shape[1]
        cell = pic.shape[0] / g
        assert patch_at((marked % g + 0.5) * cell, (marked // g + 0.5) * cell, pic.shape[0], g) == marked
    grid_pic = attention_grid_picture(img, e.cls_maps)
    assert grid_pic.dtype == np.uint8 and grid_pic.shape[1] > 2 * S


def test_colour_images_are_drawn_in_colour():
    """An RGB input (S, S, 3) keeps its colours under the grid and in the token strip."""
    img = np.zeros((32, 32, 3), np.float32)
    img[..., 0] = 1.0                                      # pure red
    pic = patch_grid_picture(img, 4, 320)
    assert tuple(pic[20, 20]) == (255, 0, 0)
    strip = token_strip(img, 4)
    _, corners = _strip_template(4, 10, 40)
    y, x = corners[1]
    assert tuple(strip[y + 5, x + 5]) == (255, 0, 0)
    assert heat_overlay(img, np.zeros((4, 4)), 1.0, 64).shape == (64, 64, 3)


def _cell_colour(t: float, ink: float) -> np.ndarray:
    """The blended colour of a heat-map cell at scale position t over a pixel of value ink."""
    return (HEAT_ALPHA * _lut()[int(t * 255)] + (1 - HEAT_ALPHA) * ink * 255).astype(int)


def test_a_nearly_even_map_stays_dull_and_the_bar_marks_the_even_level(img):
    """Attention spread evenly over 50 tokens with one patch at 0.03 (against 1/50 = 0.02) used
    to be stretched until that patch glowed at the top of the scale; with the uniform level given,
    the scale reaches 5x it (0.1), the patch sits at 30 % of it, and the bar's tick marks 1/50."""
    m = np.full((G, G), 0.02)
    m[0, 0] = 0.03
    pic = single_map_picture(img, m, "t", 336, uniform=1 / 50)
    assert np.abs(pic[2, 2].astype(int) - _cell_colour(0.3, 0.0)).max() <= 1
    stretched = single_map_picture(img, m, "t", 336)           # no uniform level: its own max
    assert np.abs(stretched[2, 2].astype(int) - _cell_colour(1.0, 0.0)).max() <= 1
    bar = pic[336:]
    x0, x1 = _bar_span(336)
    tick = x0 + round(0.2 * (x1 - x0 - 1))                        # 0.02 of a 0..0.1 bar
    from vit.pictures.attention_maps import EVEN_INK  # the strip's green
    assert np.abs(bar[15, tick].astype(int) - EVEN_INK).sum() < 30 and (bar[15, tick + 3] > 200).all()


def test_one_scale_for_all_maps_is_absolute_and_each_map_is_captioned(attn, img):
    """Evenly spread [CLS] attention (every weight 1/50) is drawn at 1/5 of the shared scale, not
    at its top; captions give each map's maximum or range and [CLS]'s own share."""
    even = np.full((3, 2, G, G), 1 / 50)
    pic = attention_grid_picture(img, even, shared_scale=True, cls_self=np.full((3, 2), 0.02))
    _, corners = _attention_grid_template(3, 2, 112)
    y, x = corners[2][1]
    assert np.abs(pic[y + 2, x + 2].astype(int) - _cell_colour(0.2, 0.0)).max() <= 1
    below = pic[y + 112 + MINI + 1:y + 112 + MINI + CAPTION, x:x + 112]
    assert (below < 100).any()                                     # a caption is written there
    # shares as the page writes every share ("5.4 %"), the strip's readout of a map included
    assert tile_caption(0.354, 0.0004, True) == "max 35.4 % · [CLS] <0.1 %"
    assert tile_caption(0.0054, 0.02, False) == "0 to 0.5 % · [CLS] 2.0 %"
    assert tile_caption(0.5, None, True) == "max 50.0 %"


def test_an_attention_maps_title_and_bar_tell_one_scale(img, monkeypatch):
    """Issue 49, 4: a map titled "(max 0.05)" sat over a bar ending at 0.10, and a fourth trial
    still read "rollout (max 4.0 %)" over a bar to 10.0 % as two numbers at odds. The bar ends
    at VIVID times an even spread (a near-flat map stays dull); the map's own maximum is said
    once, as a share ("5.0 %"): beside its tick on the bar, or in the title where no room is
    left beside the tick, never both."""
    from PIL import ImageDraw

    from vit.pictures import attention_maps
    said, draw_text = [], ImageDraw.ImageDraw.text
    monkeypatch.setattr(ImageDraw.ImageDraw, "text", lambda self, xy, text, *a, **k:
                        said.append(text) or draw_text(self, xy, text, *a, **k))

    def drawn(grid_map, title, **kw):
        said.clear()
        attention_maps._colorbar_template.cache_clear()
        return attention_maps.single_map_picture(img, grid_map, title, **kw), list(said)

    m = np.full((G, G), 1 / (G * G + 1))
    m[0, 0] = 0.05
    pic, words = drawn(m, "rollout", uniform=1 / (G * G + 1))
    assert "rollout" in words and "max 5.0 %" in words and "10.0 %" in words, words
    assert sum("5.0 %" in w for w in words) == 1, words
    bar = pic[-attention_maps.BAR_HEIGHT:]
    x0, x1 = attention_maps._bar_span(pic.shape[1])
    tick = x0 + round(0.05 / 0.10 * (x1 - x0 - 1))
    assert (np.abs(bar[20, tick - 1:tick + 2].astype(int) - attention_maps.PEAK_INK).sum(1) < 30).any()
    # A small tile (Compare's): the maximum keeps its words on the bar before "even" does.
    _, words = drawn(m, "rollout", size=146, uniform=1 / (G * G + 1))
    assert "rollout" in words and "max 5.0 %" in words, words
    # A probability's drop on a scale with a floor (occlusion's 20 %): its maximum on its tick
    # (a teacher read "drop in P(7), max 9.3 %" over a bar to 20.0 % as two numbers at odds).
    drop = np.zeros((G, G))
    drop[2, 2] = 0.093
    pic, words = drawn(drop, "drop in P(7)", top=0.2, unit="probability")
    assert "drop in P(7)" in words and "max 9.3 %" in words and "20.0 %" in words, words
    bar = pic[-attention_maps.BAR_HEIGHT:]
    tick = x0 + round(0.093 / 0.2 * (x1 - x0 - 1))
    assert (np.abs(bar[20, tick - 1:tick + 2].astype(int) - attention_maps.PEAK_INK).sum(1) < 30).any()
    # A small tile with no room beside a tick near 0: the title says the number.
    drop[2, 2] = 0.005
    _, words = drawn(drop, "drop in P(7)", size=146, top=0.2, unit="probability")
    assert sum("0.5 %" in w for w in words) == 1 and "drop in P(7) (max 0.5 %)" in words, words
    # A scale that ends at the map's maximum says it at its end, once.
    drop[2, 2] = 0.454
    _, words = drawn(drop, "drop in P(7)", top=0.454, unit="probability")
    assert words.count("45.4 %") == 1 and not any("max" in w for w in words), words
    # A map in log-odds (the randomisation check's occlusion) scaled to a small maximum: its
    # bar ends at that number, not at "0.0" under bright patches (a sixth trial).
    drop[2, 2] = 0.031
    _, words = drawn(drop, "occlusion, log-odds", top=0.031, unit="log-odds")
    assert "0.031" in words and "0.0" not in words, words


def test_patch_numbers_are_readable_over_white_ink():
    """Issue 49, 6: the patch numbers were yellow, unreadable where they lay over white ink. Over
    an all-white input each number now has a dark edge (the grid's blue lines are lighter)."""
    from vit.pictures.attention_maps import patch_grid_picture
    pic = patch_grid_picture(np.ones((28, 28), np.float32), 7).astype(float)
    cell = pic.shape[0] // 7
    corner = pic[2:cell // 2, 4:cell // 2]                      # where patch 1's number is drawn
    luminance = corner @ np.array([0.2126, 0.7152, 0.0722])
    assert (luminance < 60).sum() >= 10
    assert ((corner[..., 0] > 200) & (corner[..., 2] < 80)).sum() >= 5     # and the yellow itself


def test_a_click_on_a_map_names_its_layer_and_head(attn, img):
    """What the page uses to open a clicked thumbnail in the explorer: every map's centre and
    its caption name that map; labels, gaps and the colour bar name none."""
    pic = attention_grid_picture(img, attn.cls_maps)
    _, corners = _attention_grid_template(3, 2, 112)
    for layer in range(3):
        for head in range(2):
            y, x = corners[layer][head]
            assert head_at(x + 56, y + 56, 3, 2, 28) == (layer, head)
            assert head_at(x + 5, y + 112 + 5, 3, 2, 28) == (layer, head)      # its caption
    assert head_at(10, 60, 3, 2, 28) is None                                    # "layer 1"
    assert head_at(30, pic.shape[0] - 5, 3, 2, 28) is None                      # the bar


def test_a_long_map_title_fits_in_the_picture(img):
    """A title too long for the space above the bar (Fashion-MNIST's "drop in log-odds of
    T-shirt/top, max 4.0; 2x2 squares") moves to the left edge and, if need be, shrinks: it is
    never cut by the picture's right edge, as it was. A short one keeps its place over the bar."""
    grid = np.random.default_rng(0).random((7, 7))
    for title in ("drop in log-odds of T-shirt/top, max 4.0; 2x2 squares",
                  "a title far too long to fit at any of the sizes tried, so it loses its end " * 2):
        pic = single_map_picture(img, grid, title)
        rows = pic[-BAR_HEIGHT:-BAR_HEIGHT + 16]               # the title's line
        ink = np.flatnonzero((rows.min(axis=2) < 128).any(axis=0))
        assert ink.size and ink[-1] < pic.shape[1] - 3
    short = single_map_picture(img, grid, "relevance for 7")[-BAR_HEIGHT:-BAR_HEIGHT + 16]
    assert np.flatnonzero((short.min(axis=2) < 128).any(axis=0))[0] >= _bar_span(336)[0]


def test_how_it_learned_says_when_attention_hardly_moved():
    """Issue 49, 7: over training, the 139 k model's rollout maps stay near even on one honest
    scale, so the filmstrip's top row looks unchanged. The words then say that attention hardly
    moved, and where the learning shows instead; a map that did move gets no such words."""
    from vit.explain.over_training import Frame
    from vit.ui.training_panel import settled
    even = np.full((4, 4), 1 / 17)
    frame = lambda step, m: Frame(step, 100, np.full(10, 0.1), m, np.zeros((4, 4)))   # noqa: E731
    nudged = even.copy()
    nudged[1, 1] += 0.02                          # 2 points: under half an even share (2.9)
    said = settled([frame(1, even), frame(100, nudged)])
    assert "hardly moved" in said and "by 2.9 percentage points or more" in said
    moved = even.copy()
    moved[1, 1] += 0.05
    assert settled([frame(1, even), frame(100, moved)]) == ""
