"""What the trainer shows a model as "none of its classes" (vit/data/negatives.py): with
`--outliers … handwritten digit`, a clothing model is shown real handwritten digits (MNIST's)
where the data directory has them, and is told when it has not."""
import numpy as np
import torch
from conftest import write_dataset

from vit.data import negatives
from vit.data.specs import builtin_spec
from vit.preprocessing.styles import OBJECTS
from vit.training.batches import outlier_digits
from vit.training.config import TrainConfig, outlier_kinds


def a_one() -> np.ndarray:
    """One handwritten-looking 1, white on black as MNIST stores it."""
    digit = np.zeros((28, 28), np.uint8)
    digit[4:24, 12:16] = 255
    return digit[None]


def test_a_handwritten_digit_is_drawn_dark_on_white_anywhere_from_the_digits_given():
    seen = set()
    for seed in range(20):
        canvas, kind = negatives.draw(seed, a_one(), ("handwritten digit",))
        assert kind == "handwritten digit" and canvas.dtype == np.uint8
        ink = canvas < 128
        assert canvas.mean() > 200 and 0.005 < ink.mean() < 0.3      # a dark digit on white
        rows = np.flatnonzero(ink.any(1))
        seen.add((rows[0] // 50, rows[-1] - rows[0] > canvas.shape[0] // 2))
    assert len(seen) > 3                                                # of many places and sizes
    # Without digits the kind is left out; the clothing model's other kinds remain.
    kinds = {negatives.draw(seed, None, OBJECTS.outliers)[1] for seed in range(60)}
    assert "handwritten digit" not in kinds and {"scribble", "letter", "digit"} <= kinds


def test_a_clothing_model_is_shown_mnists_digits_when_asked_and_the_data_directory_has_them(tmp_path):
    spec = builtin_spec("fashion-mnist")
    split = None                         # (a clothing model never shows its own images as digits)
    said = []
    kinds = "scribble,shape,letter,digit,handwritten digit"
    with_mnist = TrainConfig(data_dir=str(write_dataset(tmp_path / "with")), download=False,
                             outliers=kinds)
    assert outlier_kinds(with_mnist, OBJECTS)[-1] == "handwritten digit"
    digits = outlier_digits(with_mnist, spec, split, said.append)
    assert isinstance(digits, torch.Tensor) and digits.shape[1:] == (28, 28) and len(digits) == 320
    assert not said
    # Not asked for (a clothing model's default kinds): no digits read at all.
    assert outlier_digits(TrainConfig(data_dir=with_mnist.data_dir), spec, split, said.append) is None
    (tmp_path / "without").mkdir()
    without = TrainConfig(data_dir=str(tmp_path / "without"), download=False, outliers=kinds)
    assert outlier_digits(without, spec, split, lambda text, **_: said.append(text)) is None
    assert len(said) == 1 and "no handwritten digits are shown" in said[0] and "Fashion-MNIST" in said[0]
    bank = negatives.make_bank(8, 0, digits, 28, style=OBJECTS, kinds=("handwritten digit",))
    assert bank.shape == (8, 28, 28) and bank.dtype == torch.uint8 and (bank.float().mean((1, 2)) > 0).all()


def photo_folder(root) -> str:
    """CIFAR-10's layout (train/<class>/*.jpg) with two small photos a class."""
    from PIL import Image

    from vit.data.specs import builtin_spec
    rng = np.random.default_rng(0)
    for name in builtin_spec("cifar10").class_names:
        for split in ("train", "test"):
            folder = root / "CIFAR-10-images" / split / name
            folder.mkdir(parents=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(
                    folder / f"{i}.jpg")
    return str(root)


def test_a_photo_is_shown_as_a_person_would_upload_one_where_the_data_directory_has_them(tmp_path):
    """Issue 47: a digit model read a face as "9 (95.6 %)": it had only been shown drawings.
    `--outliers … photo` shows it CIFAR-10's training photos, in grey, whole or set in a margin;
    without them the kind is left out and said."""
    from vit.training.batches import outlier_photos
    spec = builtin_spec("mnist")
    kinds = "scribble,letter,photo"
    said = []
    tc = TrainConfig(data_dir=photo_folder(tmp_path / "with"), download=False, outliers=kinds)
    photos = outlier_photos(tc, spec, said.append)
    assert photos.shape == (20, 32, 32, 3) and photos.dtype == np.uint8 and not said
    assert outlier_photos(TrainConfig(data_dir=tc.data_dir), spec, said.append) is None
    (tmp_path / "without").mkdir()
    without = TrainConfig(data_dir=str(tmp_path / "without"), download=False, outliers=kinds)
    assert outlier_photos(without, spec, lambda text, **_: said.append(text)) is None
    assert len(said) == 1 and "no photos are shown" in said[0]
    grey_levels = []
    for seed in range(12):
        canvas, kind = negatives.draw(seed, None, ("photo",), photos)
        assert kind == "photo" and canvas.ndim == 2
        grey_levels.append(len(np.unique(canvas)))
    assert min(grey_levels) > 50                    # a photograph's tones, not a pen's two
    assert negatives.draw(0, None, ("photo", "letter"), None)[1] == "letter"   # none: left out
    bank = negatives.make_bank(6, 0, None, 28, kinds=("photo",), photos=photos)
    assert bank.shape == (6, 28, 28) and (bank.float().std((1, 2)) > 0).all()


def test_the_photos_shown_come_from_every_class_of_the_folder(tmp_path, monkeypatch):
    """The folder's photos come class by class: the bank's share must still take every class
    (it once took the first 10,000 of 50,000: planes and cars only)."""
    from vit.training import batches
    monkeypatch.setattr(batches, "PHOTOS", 10)
    tc = TrainConfig(data_dir=photo_folder(tmp_path), download=False, outliers="photo")
    photos = batches.outlier_photos(tc, builtin_spec("mnist"), lambda *a, **k: None)
    from vit.data.loading import load_split
    every = load_split("cifar10", tc.data_dir, True, False)
    chosen = {bytes(p.tobytes()) for p in photos}
    classes = {int(label) for image, label in zip(every.images.numpy(), every.labels)
               if bytes(image.tobytes()) in chosen}
    assert len(photos) == 10 and classes == set(range(10))


def test_a_bank_drawn_by_several_processes_is_the_one_drawn_by_one(monkeypatch):
    """The trainer draws its 21,000 non-digits on every core (195 s on one core here): the bank,
    and so a run, must not depend on how many there were."""
    monkeypatch.setattr(negatives, "SERIAL_BELOW", 10 ** 9)
    one = negatives.make_bank(40, 3, None, 28)
    monkeypatch.setattr(negatives, "SERIAL_BELOW", 1)
    monkeypatch.setattr(negatives.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert negatives.workers(40) == 3
    several = negatives.make_bank(40, 3, None, 28)
    assert torch.equal(one, several) and int(one.float().std(dim=(1, 2)).gt(0).sum()) == 40
