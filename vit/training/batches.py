"""The data a run trains on (validation carved out, the served view, non-digits) and the
batch of each step (`make_batch`), the same on every rank.
"""
from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from vit.data import trivial_augment
from vit.data.affine import draw_erasing, erase
from vit.data.coarse import coarse
from vit.data.degrade import degrade
from vit.data.filled import filled
from vit.data.loading import Split, normalize, to_unit_float
from vit.data.specs import DatasetSpec
from vit.data.thicken import thicken
from vit.preprocessing.styles import Style
from vit.training import distributed
from vit.training.config import TrainConfig, TrainingError, outlier_kinds
from vit.training.prepared import cached, code_digest
from vit.training.seeds import (
    STREAM_AUGMENT,
    STREAM_COARSE,
    STREAM_DEGRADE,
    STREAM_ERASE,
    STREAM_FILLED,
    STREAM_NEG,
    STREAM_ORDER,
    STREAM_POLICY,
    STREAM_SUBSET,
    STREAM_THICKEN,
    STREAM_VAL,
    STREAM_VIEW,
    _generator,
    mix_seed,
)
from vit.training.session import Session, TrainData

# Held-out synthetic non-digits (never trained on) that measure "not a digit" on validation.
HELD_OUT_NEGATIVES = 1000


def carve_validation(split: Split, size: int) -> tuple[Split, Split | None]:
    """(training part, validation part): `size` images drawn by a fixed generator, the same for
    every seed, so runs with different seeds are compared on the same held-out images."""
    if size == 0:
        return split, None
    if size > len(split) // 5:
        raise TrainingError(f"--val-size {size} is more than a fifth of the {len(split):,} "
                            f"training images: choose at most {len(split) // 5}")
    perm = torch.randperm(len(split), generator=_generator(STREAM_VAL))
    val_idx, train_idx = perm[:size].sort().values, perm[size:].sort().values
    return (Split(split.images[train_idx], split.labels[train_idx], split.source),
            Split(split.images[val_idx], split.labels[val_idx], split.source))


def take_subset(split: Split, size: int) -> Split:
    """`size` of the training images (all when 0), drawn by a fixed generator: every run of a sweep
    trains on the same ones, whatever its seed."""
    if size == 0:
        return split
    if size > len(split):
        raise TrainingError(f"--subset {size:,} is more than the {len(split):,} training images "
                            "left after the validation split")
    idx = torch.randperm(len(split), generator=_generator(STREAM_SUBSET))[:size].sort().values
    return Split(split.images[idx], split.labels[idx], split.source)


def as_served(images: torch.Tensor, style: Style, size: int, desc: str | None = None) -> torch.Tensor:
    """uint8 images -> the same images laid out by vit.preprocessing.layout.to_model_image, as the
    app does to every drawing and upload (an image it can't lay out, e.g. a blank one, stays as
    is). `desc`: a progress bar's title (on a terminal)."""
    from tqdm import tqdm

    from vit.preprocessing.decode import PreprocessError
    from vit.preprocessing.layout import to_model_image
    out = images.clone()
    for i, img in enumerate(tqdm(images.numpy(), desc=desc, leave=False, dynamic_ncols=True,
                                 disable=None if desc else True, file=sys.stderr)):
        try:
            out[i] = torch.from_numpy(np.round(to_model_image(img, style, size) * 255).astype(np.uint8))
        except PreprocessError:
            pass
    return out


def outlier_digits(tc: TrainConfig, spec: DatasetSpec, train_split: Split, say: Callable):
    """Handwritten digits (uint8 (N, 28, 28), white on black) for the outlier kinds drawn from
    them (`--outliers`), or None: a digit model's own training images (none of the validation's);
    for another data set, MNIST's training digits where the data directory has them (else said:
    those kinds are left out)."""
    from vit.data import negatives as negatives_module
    from vit.data.loading import DataError, load_split
    if not set(negatives_module.FROM_DIGITS) & set(outlier_kinds(tc, spec.style)):
        return None
    if spec.style.name == "digits":
        return train_split.images[:5000]
    try:
        return load_split("mnist", tc.data_dir, True, tc.download).images[:10000]
    except DataError:
        say(f"MNIST's training digits are not in {tc.data_dir}: no handwritten digits are shown "
            f"as outside {spec.title}, pen-drawn digits only (python -m vit.data --dataset mnist "
            f"fetches them)", flush=True)
        return None


PHOTOS = 10_000      # CIFAR-10 training photos a bank draws its "photo" outliers from
# The folder's images come class by class: an even stride takes every class alike (the first
# 10,000 were planes and cars only).


def outlier_photos(tc: TrainConfig, spec: DatasetSpec, say: Callable):
    """Real photographs (uint8 (N, 32, 32, 3)) for the outlier kinds made from them
    (`--outliers photo`): CIFAR-10's training images where the data directory has them (never
    its test images: those measure), else None, and said."""
    from vit.data import negatives as negatives_module
    from vit.data.loading import DataError, load_split
    if not set(negatives_module.FROM_PHOTOS) & set(outlier_kinds(tc, spec.style)):
        return None
    try:
        images = load_split("cifar10", tc.data_dir, True, False).images
        images = images[::max(1, len(images) // PHOTOS)][:PHOTOS]
    except DataError:
        say(f"CIFAR-10's training photos are not in {tc.data_dir}: no photos are shown as "
            f"outside {spec.title}", flush=True)
        return None
    return images.numpy() if hasattr(images, "numpy") else np.asarray(images)


def prepare_data(tc: TrainConfig, spec: DatasetSpec, split: Split, say: Callable, digest: str = "",
                 cache: Path | None = None) -> tuple[Split, TrainData]:
    """Carve the validation split and build the laid-out views and the non-digit bank. Pure
    functions of the data and the seed-independent streams: a resumed run rebuilds the same, and
    the next run of the same data (`digest`: data_digest of `split`) takes them from `cache`
    (vit/training/prepared.py)."""
    from vit.data import negatives as negatives_module
    from vit.preprocessing import decode, layout, paper
    train_split, val = carve_validation(split, tc.val_size)
    train_split = take_subset(train_split, tc.subset)
    grey = spec.channels == 1
    served = val_served = negatives = held_out = None
    data = {"data": digest, "val_size": tc.val_size, "subset": tc.subset, "size": spec.image_size}
    code = code_digest(decode, layout, paper, as_served)
    if grey and (tc.serve_view > 0 or val is not None):
        t0 = time.time()
        parts = [(n, images) for n, images in (("train", train_split.images if tc.serve_view else None),
                                               ("validation", None if val is None else val.images))
                 if images is not None]
        views, reused = cached(cache, "laid-out", {**data, "style": spec.style.name, "code": code,
                                                   "parts": [n for n, _ in parts]},
                               lambda: {n: as_served(images, spec.style, spec.image_size,
                                                     f"laying out {n} images")
                                        for n, images in parts})
        served, val_served = views.get("train"), views.get("validation")
        say(f"Laid out {sum(len(x) for _, x in parts):,} images as the app would: "
            f"{'taken from the cache' if reused else 'done'} in {time.time() - t0:.0f} s", flush=True)
    kinds = outlier_kinds(tc, spec.style)
    if tc.negatives and kinds:
        t0 = time.time()
        digits = outlier_digits(tc, spec, train_split, say)
        photos = outlier_photos(tc, spec, say)
        n_held = min(HELD_OUT_NEGATIVES, max(1, tc.negatives // 10))
        bank, reused = cached(cache, "non-digits", {
            **data, "negatives": tc.negatives, "held_out": n_held, "kinds": kinds,
            "digits": None if digits is None else hashlib.sha256(digits.numpy().tobytes()).hexdigest(),
            "photos": None if photos is None else hashlib.sha256(photos.tobytes()).hexdigest(),
            "code": code_digest(decode, layout, paper, negatives_module)}, lambda: {
            "train": negatives_module.make_bank(tc.negatives, mix_seed(STREAM_NEG, 0), digits,
                                                spec.image_size, "drawing non-digits", spec.style, kinds,
                                                photos),
            "held_out": negatives_module.make_bank(n_held, mix_seed(STREAM_NEG, 1), digits,
                                                   spec.image_size, "drawing held-out non-digits",
                                                   spec.style, kinds, photos)})
        negatives, held_out = bank["train"], bank["held_out"]
        say(f"Drew {len(negatives) + len(held_out):,} non-digit drawings: "
            f"{'taken from the cache' if reused else 'done'} in {time.time() - t0:.0f} s", flush=True)
    return train_split, TrainData(served, val, val_served, negatives, held_out)


@dataclass
class Batch:
    x: torch.Tensor       # (b + n, C, S, S) normalised: this rank's digits, then its non-digits
    y: torch.Tensor       # (b,) labels of the digits
    size: int             # digits in the global batch, all ranks together
    negatives: int = 0    # non-digits in the global batch (this rank's: len(x) - len(y))


def epoch_order(tc: TrainConfig, n: int, epoch: int) -> torch.Tensor:
    """The epoch's shuffle of the training set: the same on every rank."""
    return torch.randperm(n, generator=_generator(tc.seed, STREAM_ORDER, epoch))


def make_batch(s: Session, order: torch.Tensor, step: int) -> Batch:
    """The batch of global step `step` (in the epoch `order` shuffles), this rank's share of it."""
    i = step % s.plan.steps_per_epoch
    batch = order[i * s.tc.batch_size:(i + 1) * s.tc.batch_size]    # the global batch
    mine = distributed.shard(s.d, len(batch))                        # this rank's rows of it
    idx = batch[mine]
    images = s.train_split.images[idx]
    data = s.data
    if data is not None and data.served is not None:     # some images as the app lays them out
        view = torch.rand(len(batch), generator=_generator(s.tc.seed, STREAM_VIEW, step))[mine]
        images = torch.where(view.to(images.device)[:, None, None] < s.tc.serve_view,
                             data.served[idx], images)
    n_neg, neg_mine = 0, slice(0, 0)
    if data is not None and data.negatives is not None:
        n_neg = max(1, len(batch) // 8)
        pick = torch.randint(len(data.negatives), (n_neg,),
                             generator=_generator(s.tc.seed, STREAM_NEG, step))
        neg_mine = distributed.shard(s.d, n_neg)
        images = torch.cat([images, data.negatives[pick[neg_mine]]])
    x = to_unit_float(images, s.spec.channels)                       # (b + n, C, S, S) in [0, 1]
    if s.augment is not None:   # drawn for the global batch: every rank draws the same numbers
        theta = s.augment.draw(len(batch) + n_neg, _generator(s.tc.seed, STREAM_AUGMENT, step))
        x = s.augment.apply(x, torch.cat([theta[:len(batch)][mine], theta[len(batch):][neg_mine]]))
    if s.tc.policy == "trivialaugment":     # the digits only, like erasing
        drawn = trivial_augment.draw(len(batch), _generator(s.tc.seed, STREAM_POLICY, step))
        x[:len(idx)] = trivial_augment.apply(x[:len(idx)], drawn.rows(mine))
    if s.tc.thicken:            # the digits only: before degrading, as a thick pen writes first
        x[:len(idx)] = thicken(x[:len(idx)], s.tc.thicken,
                               _generator(s.tc.seed, STREAM_THICKEN, step), len(batch), mine)
    if s.tc.coarse:             # the digits only: a coarse scan is already degraded
        x[:len(idx)] = coarse(x[:len(idx)], s.tc.coarse,
                              _generator(s.tc.seed, STREAM_COARSE, step), len(batch), mine)
    if s.tc.degrade:            # the digits only: drawn for the global batch, as erasing
        x[:len(idx)] = degrade(x[:len(idx)], s.tc.degrade,
                               _generator(s.tc.seed, STREAM_DEGRADE, step), len(batch), mine)
    if s.tc.filled:             # the garments only: an outside picture filled is still outside
        x[:len(idx)] = filled(x[:len(idx)], s.tc.filled,
                              _generator(s.tc.seed, STREAM_FILLED, step), len(batch), mine)
    if s.tc.erase:              # the digits only: a non-digit with a hole is still one
        gen = _generator(s.tc.seed, STREAM_ERASE, step)
        S = s.spec.image_size
        mask = draw_erasing(len(batch), S, s.tc.erase, gen)           # for the global batch
        noise = torch.rand(len(batch), s.spec.channels, S, S, generator=gen)
        x[:len(idx)] = erase(x[:len(idx)], mask[mine], noise[mine])
    x = normalize(x, s.spec.mean, s.spec.std)
    return Batch(x.to(s.device, non_blocking=True),
                 s.train_split.labels[idx].to(s.device, non_blocking=True), len(batch), n_neg)
