"""TrivialAugment on batches (vit/data/trivial_augment.py): each image its own operation and
strength, each operation the same as torchvision's own at that strength, drawn reproducibly.

Also: a full-strength shift leaves the frame, rotation is about the centre, every image draws its
own operation (all 14 in 280 images, identity unchanged), and the trainer's batches are changed
by --policy and the same after a resume."""
import math

import pytest
import torch
from conftest import Lazy

from vit.data import trivial_augment as ta

TF = Lazy("torchvision.transforms.v2.functional")
NEAREST = 0          # PIL's number for nearest, which torchvision takes as InterpolationMode.NEAREST


@pytest.fixture
def photos():
    g = torch.Generator().manual_seed(1)
    levels = torch.randint(30, 200, (6, 3, 32, 32), generator=g, dtype=torch.uint8)   # room to stretch
    return levels, levels.float() / 255


@pytest.mark.parametrize("name, strength, reference", [
    ("brightness", 0.5, lambda x: TF.adjust_brightness(x, 1.495)),
    ("brightness", -1.0, lambda x: TF.adjust_brightness(x, 0.01)),
    ("color", 0.5, lambda x: TF.adjust_saturation(x, 1.495)),
    ("contrast", -0.5, lambda x: TF.adjust_contrast(x, 0.505)),
    ("sharpness", 1.0, lambda x: TF.adjust_sharpness(x, 1.99)),
    ("posterize", 0.5, lambda x: TF.posterize(x, 5)),       # 8 - round(6 * 0.5) bits kept
    ("solarize", 0.4, lambda x: TF.solarize(x, 153.0)),     # threshold 255 * (1 - 0.4)
    ("autocontrast", 0.3, lambda x: TF.autocontrast(x)),
    ("equalize", 0.7, lambda x: TF.equalize(x)),
])
def test_each_operation_is_torchvisions_at_that_strength(photos, name, strength, reference):
    levels, x = photos
    ours = (ta._OPS[name](x, torch.full((len(x),), strength)) * 255).round()
    theirs = reference(levels).float()
    assert (ours - theirs).abs().max() <= 1            # rounding of the 8-bit levels only
    assert (ours != levels.float()).float().mean() > 0.2    # and it did change the photo


@pytest.mark.parametrize("name, strength, reference", [
    # (torchvision's sign convention is the mirror of ours for shifts: signs are drawn 50/50)
    ("shear_x", 0.5, lambda x: TF.affine(x, 0.0, [0, 0], 1.0, [math.degrees(math.atan(0.495)), 0.0],
                                         NEAREST, center=[0, 0])),
    ("shear_y", 0.5, lambda x: TF.affine(x, 0.0, [0, 0], 1.0, [0.0, math.degrees(math.atan(0.495))],
                                         NEAREST, center=[0, 0])),
    ("translate_x", -0.3, lambda x: TF.affine(x, 0.0, [9, 0], 1.0, [0.0, 0.0], NEAREST)),
    ("translate_y", -0.3, lambda x: TF.affine(x, 0.0, [0, 9], 1.0, [0.0, 0.0], NEAREST)),
    ("rotate", 0.2, lambda x: TF.rotate(x, 27.0, NEAREST)),
])
def test_each_geometric_operation_is_torchvisions_pixel_for_pixel(photos, name, strength, reference):
    """TrivialAugmentWide's own calls (torchvision/transforms/v2/_auto_augment.py): shears about
    the top-left corner, shifts of int(32 m) pixels, rotations about the centre, nearest pixel."""
    levels, x = photos
    ours = (ta._OPS[name](x, torch.full((len(x),), strength)) * 255).round()
    assert torch.equal(ours, reference(levels).float())


def test_full_strength_shift_moves_a_32px_photo_out_of_frame_and_rotation_is_about_the_centre(photos):
    _, x = photos
    assert ta._OPS["translate_x"](x, torch.ones(len(x))).max() == 0
    half = ta._OPS["rotate"](x, torch.full((len(x),), 180 / 135))   # 180 degrees
    assert torch.allclose(half, x.flip(-1).flip(-2))


def test_every_image_draws_its_own_operation_reproducibly():
    x = torch.rand(1, 3, 32, 32).expand(280, 3, 32, 32).contiguous()
    first = ta.draw(280, torch.Generator().manual_seed(5))
    out = ta.apply(x, first)
    again = ta.apply(x, ta.draw(280, torch.Generator().manual_seed(5)))
    assert torch.equal(out, again)
    assert set(first.op.tolist()) == set(range(len(ta.OPS)))      # all 14 drawn in 280 images
    unchanged = (out == x).flatten(1).all(1)
    assert torch.equal(unchanged[first.op == 0], torch.ones_like(unchanged[first.op == 0]))
    assert 0.03 < unchanged.float().mean() < 0.25      # identity (1/14) and a few weak draws
    assert len({tuple(img.flatten()[:50].tolist()) for img in out}) > 100
    signed = first.m[torch.isin(first.op, torch.tensor([1, 6]))]
    assert (signed < 0).any() and (signed > 0).any()
    assert (first.m[first.op == 10] >= 0).all()        # posterize has no sign


def test_trainer_policy_changes_only_the_photos_and_is_the_same_after_resume(tmp_path):
    from vit.data.loading import Split
    from vit.model import ViTConfig
    from vit.training.batches import epoch_order, make_batch
    from vit.training.config import TrainConfig
    from vit.training.session import new_session
    g = torch.Generator().manual_seed(0)
    split = Split(torch.randint(0, 256, (40, 32, 32, 3), generator=g, dtype=torch.uint8),
                  torch.arange(40) % 10, "test")
    mc = ViTConfig(image_size=32, channels=3, dim=16, depth=1, heads=2, mlp_dim=16)
    order = epoch_order(TrainConfig(), len(split), 0)
    batches = []
    for policy in ("none", "trivialaugment", "trivialaugment"):
        tc = TrainConfig(dataset="cifar10", batch_size=16, policy=policy, serve_view=0,
                                  negatives=0)
        s = new_session(tc, mc, split)
        batches.append(make_batch(s, order, 3).x)
    plain, policy, again = batches
    assert torch.equal(policy, again)
    assert 8 <= (plain != policy).flatten(1).any(1).sum() <= 16
