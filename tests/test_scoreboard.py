"""The explanation scoreboard (vit/explain/scoreboard.py): insertion curves, the randomised model,
rank correlation, and the Why panel's table and picture, on the bundled models."""
import re

import numpy as np
import pytest
import torch

from vit.data.examples import render_digit
from vit.explain import attribution
from vit.explain.faithful import spearman
from vit.explain.scoreboard import METHODS, RANDOM, randomised
from vit.inference import Predictor
from vit.ui import why_panel


@pytest.fixture(scope="module")
def seven():
    p = Predictor("checkpoints/mnist", "cpu")
    return p, p.analyse(np.asarray(render_digit("7")))


def test_insertion_runs_from_a_blank_picture_to_the_whole_one(seven):
    p, a = seven
    t = int(a.probs.argmax())
    x = p.tensor(a.image)
    counts, curve = attribution.insertion_curve(p.model, x, t, np.arange(p.grid ** 2, dtype=float),
                                                p.background, p.config.temperature)
    assert counts[0] == 0 and counts[-1] == p.grid ** 2
    assert curve[-1] == pytest.approx(a.probs[t], abs=1e-5)            # every patch kept
    blank = attribution.blank_patches(x, torch.ones(1, p.grid ** 2, dtype=torch.bool), p.grid,
                                      p.background)
    with torch.no_grad():
        empty = (p.model(blank) / p.config.temperature).softmax(-1)[0, t].item()
    assert curve[0] == pytest.approx(empty, abs=1e-5)                   # none kept


def test_randomising_replaces_the_later_blocks_only(seven):
    p, _ = seven
    before = {k: v.clone() for k, v in p.model.state_dict().items()}
    r = randomised(p.model, 3)
    for k, v in r.state_dict().items():
        later = k.startswith(("blocks.3.", "blocks.4.", "blocks.5.", "norm.", "head."))
        assert torch.equal(v, before[k]) != later or ("norm" in k and "bias" in k), k
    assert all(torch.equal(v, before[k]) for k, v in p.model.state_dict().items())  # untouched
    again = randomised(p.model, 3)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in r.state_dict().items())  # seeded


def test_spearman_reads_orders_and_their_ties():
    a = np.arange(16.0)
    assert spearman(a, a * 3 + 1) == pytest.approx(1)
    assert spearman(a, -a) == pytest.approx(-1)
    assert spearman(np.ones(16), a) == 0
    tied = np.repeat([0.0, 1.0], 8)                 # occlusion's 2x2 squares give ties like this
    assert spearman(tied, a) == pytest.approx(np.corrcoef(np.repeat([3.5, 11.5], 8), a)[0, 1])


@pytest.mark.parametrize("name", ["mnist", "cifar10"])
def test_the_scoreboard_on_a_bundled_model(name):
    p = Predictor(f"checkpoints/{name}", "cpu")
    a = p.analyse(np.asarray(render_digit("7").convert("RGB" if name == "cifar10" else "L")))
    board = p.scoreboard(a)
    assert set(board.deletion) == set(board.insertion) == {*METHODS, RANDOM}
    # Relevance finds what the answer rests on better than chance, both ways.
    assert board.deletion["relevance"] < board.deletion[RANDOM]
    assert board.insertion["relevance"] > board.insertion[RANDOM]
    # Adebayo et al.'s finding, here too: rollout, mostly the input's layout, survives the later
    # blocks' randomisation better than relevance, which follows the learned weights.
    assert board.correlation["rollout"] > 0.9
    assert board.correlation["rollout"] > board.correlation["relevance"] + 0.1
    assert board.randomised_from == p.model.cfg.depth // 2 + 1


def test_the_why_panel_scoreboard(seven, monkeypatch):
    from vit.pictures import attention_maps
    p, a = seven
    fit, drawn = attention_maps._fit_title, []
    monkeypatch.setattr(attention_maps, "_fit_title", lambda *args: drawn.append(fit(*args)) or drawn[-1])
    attention_maps._colorbar_template.cache_clear()
    text, picture = why_panel.faithfulness(p, a)
    # Issue 49, 6: every map's title is drawn whole ("rollout: rank corr. +0.99 (max 0.0…")
    titles = [t for _, t, _ in drawn]
    assert len(titles) == 2 * len(METHODS) and not any(t.endswith("…") for t in titles), titles
    assert any(t.startswith("rollout: rho ") for t in titles)   # the font has no ρ
    assert ("| map | [deletion](#term-deletion) ↓ | [insertion](#term-insertion) ↑ | "
            "[rank corr.](#term-rank) after re-initialising layers 4–6 ↓ |") in text
    for k in (*METHODS, RANDOM):
        assert f"| {k} |" in text
    assert "hardly changed when the later layers were replaced by random ones" in text
    # The maps the table flags (⚠️) are never the ones the words say to believe (issue 49, 3).
    flagged = [k for k in METHODS if f"| {k} |" in text and
               text.split(f"| {k} |")[1].split("\n")[0].rstrip(" |").endswith("⚠️")]
    assert "rollout" in flagged
    words = text.split("<")[0].split("| map |")[0]
    believed = set(re.findall(r"believe (rollout|relevance|occlusion|raw attention)", words))
    assert not believed & set(flagged) and "believe either" not in words and "believe any" not in words
    for k in flagged:
        assert f"{k.capitalize()} found the patches the answer rests on best: believe" not in words
    assert picture.ndim == 3 and picture.shape[1] > 4 * 160


def test_a_long_class_name_is_shortened_before_the_maps_maximum():
    """A fourth trial read the clothing model's map beside the answer as "drop in P(Ankle
    boot), max 70.9...": a title too long for its picture shortens the class name first."""
    from PIL import Image, ImageDraw

    from vit.pictures import attention_maps
    draw = ImageDraw.Draw(Image.new("RGB", (140, 40)))
    for title in ("drop in P(Ankle boot), max 70.9 %", "drop in P(T-shirt/top), max 70.9 %; 2x2 squares"):
        _, text, font = attention_maps._fit_title(draw, title, attention_maps._bar_span(140)[0], 140)
        assert text.endswith("max 70.9 %") and "…)" in text, text
        assert draw.textlength(text, font=font) <= 140 - 8, text
