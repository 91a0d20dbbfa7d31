"""The patch logit lens (vit/explain/logit_lens.py): its last block is the model's own answer, each
block reads the tokens the model really computed, its picture keeps one 0-1 scale on every map, and
its words say where the answer settles."""
import numpy as np
import pytest
import torch

from vit.data.examples import render_digit
from vit.explain.logit_lens import LogitLens, logit_lens
from vit.inference import Predictor
from vit.pictures.attention_maps import colorize
from vit.pictures.logit_lens import lens_picture
from vit.ui import lens_panel


@pytest.fixture(scope="module", params=["mnist", "fashion-mnist", "cifar10"])
def analysed(request):
    p = Predictor(f"checkpoints/{request.param}", "cpu")
    picture = render_digit("7").convert("RGB" if request.param == "cifar10" else "L")
    return p, p.analyse(np.asarray(picture))


def test_the_last_block_is_the_models_own_answer(analysed):
    p, a = analysed
    lens = p.lens(a.image)
    assert lens.cls.shape == (p.model.cfg.depth, len(p.class_names))
    assert lens.patches.shape == (p.model.cfg.depth, p.grid, p.grid, len(p.class_names))
    assert np.allclose(lens.cls[-1], a.probs, atol=1e-5)
    assert np.allclose(lens.patches.sum(-1), 1, atol=1e-5)


def test_each_block_reads_the_tokens_the_model_computed(analysed):
    """Block 2's row, recomputed by running the first two blocks by hand."""
    p, a = analysed
    m, x = p.model, p.tensor(a.image)
    with torch.no_grad():
        t = m.patch_embed(m.stem(x)).flatten(2).transpose(1, 2)
        t = torch.cat([m.cls_token.expand(1, -1, -1), t], 1) + m.pos_embed
        for blk in m.blocks[:2]:
            t, _ = blk(t)
        want = (m.head(m.norm(t)) / p.config.temperature).softmax(-1)[0].numpy()
    lens = logit_lens(m, x, p.config.temperature)
    assert np.allclose(lens.cls[1], want[0], atol=1e-5)
    assert np.allclose(lens.patches[1].reshape(-1, want.shape[1]), want[1:], atol=1e-5)


def test_the_picture_keeps_one_scale_on_every_map():
    """A map whose patches are all 0.2 sure is drawn as 0.2 beside one that is sure, not stretched
    to look as sure (each map's own maximum would colour both alike)."""
    img = np.zeros((28, 28))
    patches = np.full((2, 7, 7, 10), 0.08)
    patches[0, :, :, 3], patches[1, :, :, 3] = 0.2, 0.9
    lens = LogitLens(cls=np.full((2, 10), 0.1), patches=patches)
    pic = lens_picture(img, lens, 3, [str(i) for i in range(10)], tile=112)
    first, second = pic[50, 50].astype(int), pic[50, 112 + 6 + 50].astype(int)
    expect = [0.65 * colorize(np.array([v]), 1.0)[0].astype(int) for v in (0.2, 0.9)]
    assert np.abs(first - expect[0]).max() <= 2 and np.abs(second - expect[1]).max() <= 2


def test_where_the_answer_settles_in_words():
    cls = np.array([[0.9, 0.1], [0.3, 0.7], [0.2, 0.8]])
    lens = LogitLens(cls=cls, patches=np.zeros((3, 2, 2, 2)))
    assert lens.forms_at(1) == 2             # from block 2 to the end
    assert lens.forms_at(0) is None          # had it, lost it
    assert LogitLens(cls=cls[:, ::-1], patches=lens.patches).forms_at(0) == 2


def test_the_panel_names_the_class_and_its_block(analysed):
    p, a = analysed
    picture, words = lens_panel.render(p, a, -1, p.lens(a.image))          # -1: the model's answer
    answer = p.class_names[int(a.probs.argmax())]
    assert picture.ndim == 3 and f"**{answer}**" in words
    assert "patch tokens would answer" in words
    other = (int(a.probs.argmax()) + 1) % len(p.class_names)
    _, other_words = lens_panel.render(p, a, other, p.lens(a.image))
    assert f"**{p.class_names[other]}**" in other_words


def test_a_blank_patch_that_is_most_sure_is_called_blank():
    """Sixth trial: the words called a blank corner "the most sure" patch with nothing to say
    that its token answers with what attention brought it, not with ink of its own."""
    from types import SimpleNamespace
    p = SimpleNamespace(class_names=["0", "1"], grid=2)
    patches = np.full((1, 2, 2, 2), 0.5)
    patches[-1, 0, 1] = [0.1, 0.9]                      # patch 2 (row 1, column 2): most sure
    lens = LogitLens(cls=np.array([[0.2, 0.8]]), patches=patches)
    image = np.zeros((28, 28))
    image[20:24, 4:10] = 1.0                            # ink in patch 3 only
    words = lens_panel.summary(p, lens, 1, image)
    assert "patch 2 (row 1, column 2)" in words and "That patch is blank" in words
    image[2:6, 18:22] = 1.0                             # now patch 2 holds ink
    assert "blank" not in lens_panel.summary(p, lens, 1, image)
    assert "blank" not in lens_panel.summary(p, lens, 1, np.zeros((28, 28, 3)))   # a photo
