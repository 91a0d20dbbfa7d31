"""One description per data set: everything the trainer, the preprocessing, the app and the CLIs
need to know about it. Adding a data set is adding one `DatasetSpec` to `SPECS` (and, if its files
are in a new format, a reader in vit/data.py)."""
from __future__ import annotations

from dataclasses import dataclass

from .augment import Augment


@dataclass(frozen=True)
class DatasetSpec:
    name: str                       # the --dataset value and config.json's "dataset"
    title: str                      # how the page writes it
    subject: str                    # what its pictures show, for people ("Handwritten digits")
    class_names: tuple[str, ...]
    mean: tuple[float, ...]         # per channel, of the training pixels in [0, 1]
    std: tuple[float, ...]
    image_size: int = 28
    channels: int = 1
    augment: Augment | None = Augment()
    # How any picture is laid out like the training data (vit/preprocessing.py):
    # "digits": ink cropped, fitted into 20/28 of the frame, centred by mass (how MNIST was made);
    # "objects": the object's box fills the frame, centred (how Fashion-MNIST was made);
    # "photos": colour pictures, the centre square resized (vit.preprocessing.to_rgb_image).
    style: str = "digits"
    noun: str = "digit"             # "Draw a digit", "not a digit"
    torchvision: str = ""           # torchvision.datasets class that downloads it
    folder: str = ""                # an image-folder copy's name under --data-dir (train/, test/)
    system_dir: str = ""            # a system package's folder of its raw files, if any
    # `python -m vit.train` defaults that differ for this data set (TrainConfig or ViTConfig field
    # names): what its bundled checkpoint was trained with, measured in the README.
    train_defaults: tuple[tuple[str, object], ...] = ()

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


SPECS: dict[str, DatasetSpec] = {s.name: s for s in [
    DatasetSpec("mnist", "MNIST", "Handwritten digits", tuple(str(i) for i in range(10)),
                (0.1307,), (0.3081,), torchvision="MNIST"),
    DatasetSpec("fashion-mnist", "Fashion-MNIST", "Clothing and shoes",
                ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                 "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"),
                (0.2860,), (0.3530,), augment=Augment(degrees=5.0, shear=0.05, flip=True),
                style="objects", noun="piece of clothing", torchvision="FashionMNIST",
                # Clothes' texture (shirt vs pullover vs coat) needs 2-px patches (a 14x14 grid:
                # +1.3 points over 4-px ones), a longer schedule and a stronger teacher.
                train_defaults=(("epochs", 60), ("patch_size", 2), ("teacher_width", 64),
                                ("teacher_epochs", 15)),
                # Debian's `dataset-fashion-mnist` package puts the raw .gz IDX files here, flat.
                system_dir="/usr/share/datasets/fashion-mnist"),
    # 32x32 colour photos. Here the data is a public JPEG (quality 75) copy in image folders
    # (`CIFAR-10-images/{train,test}/<class>/*.jpg`), not byte-identical to the original:
    # accuracies measured on it say so. Augmentation: whole-pixel shifts of up to 4 px (the usual
    # "pad 4, random crop") and mirror flips.
    DatasetSpec("cifar10", "CIFAR-10", "Photos of animals and vehicles",
                ("airplane", "automobile", "bird", "cat", "deer",
                 "dog", "frog", "horse", "ship", "truck"),
                (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), image_size=32, channels=3,
                augment=Augment(degrees=0.0, scale=(1.0, 1.0), shift=4 / 32, shear=0.0, flip=True,
                                size=32),
                style="photos", noun="photo", torchvision="CIFAR10", folder="CIFAR-10-images",
                # Measured on an H100 (README, "What each idea bought"): without TrivialAugment
                # the model overfits from epoch 65 (validation peaks at 75.7 %); with it, +2.1
                # points at epoch 72 and still rising; distilling the CNN teacher, +4.8 at epoch
                # 51; 180 epochs with whole-pixel shifts: 87.0 % on the test set.
                train_defaults=(("patch_size", 4), ("negatives", 0), ("serve_view", 0.0),
                                ("epochs", 180), ("batch_size", 512), ("lr", 2e-3),
                                ("warmup_epochs", 5.0), ("dim", 128), ("mlp_dim", 256),
                                ("policy", "trivialaugment"), ("teacher_width", 64),
                                ("teacher_epochs", 40))),
]}

# Preprocessing styles a config may name; a checkpoint of an unknown data set uses "digits" when
# it is one grey channel and "photos" for colour.
STYLES = ("digits", "objects", "photos")

# `--dataset folder --data-dir D`: any image folder in torchvision's ImageFolder layout
# (D/train/<class>/*, D/test/ or D/val/), described when a run starts: see `use_folder`.
FOLDER = "folder"
_FOLDERS: dict[tuple[str, int], DatasetSpec] = {}     # (folder, image size) -> its spec
_current: DatasetSpec | None = None                    # what get_spec("folder") answers


def folder_spec(root, image_size: int = 32) -> DatasetSpec:
    """The spec of an image folder: its classes are train/'s sub-folders (sorted), its per-channel
    mean and std those of its training pictures at `image_size` (decoded once and cached, see
    vit/imagefolder.py), laid out as photos (shorter side resized, centre cropped). Raises
    FolderError when it is not such a folder."""
    from pathlib import Path

    from .imagefolder import FolderError, read_image_folder, split_dir
    root = Path(root)
    train = split_dir(root, True)
    if train is None:
        raise FolderError(f"{root} has no train/ folder (expected train/<class>/<images>, and "
                          f"test/ or val/ alike, inside it)")
    images, labels, classes = read_image_folder(train, image_size, 3)
    counts = labels.bincount(minlength=len(classes))
    if len(classes) < 2:
        raise FolderError(f"{train.name}/ has one class folder ({classes[0]}): a classifier needs "
                          f"at least two")
    if (counts == 0).any():
        raise FolderError(f"{train.name}/{classes[int((counts == 0).nonzero()[0])]}/ holds no images")
    mean, std = _channel_stats(images)
    # A tenth held out to choose best/ and fit the temperature: only where that is at least 100
    # pictures (a temperature fitted on a handful swings to 0.05 or 20); else none (--val-size).
    val = min(5000, len(images) // 10) if len(images) >= 1000 else 0
    return DatasetSpec(
        FOLDER, root.resolve().name or "folder", f"Your images ({root.resolve().name})",
        tuple(classes), mean, std, image_size=image_size,
        channels=3, augment=Augment(degrees=0.0, scale=(1.0, 1.0), shift=4 / 32, shear=0.0,
                                    flip=True, size=image_size),
        style="photos", noun="picture",
        # No CNN teacher (a fine-tuned ViT already knows images), TrivialAugment as for CIFAR-10.
        train_defaults=(("negatives", 0), ("serve_view", 0.0), ("distill", 0.0),
                        ("policy", "trivialaugment"),
                        ("val_size", val)))


def _channel_stats(images) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std in [0, 1] of (N, S, S, 3) uint8 pictures, summed in chunks: a big
    folder is never copied whole as floats."""
    import torch
    total = torch.zeros(3, dtype=torch.float64)
    squares = torch.zeros(3, dtype=torch.float64)
    for chunk in images.split(1024):
        x = chunk.reshape(-1, 3).double() / 255
        total += x.sum(0)
        squares += (x * x).sum(0)
    n = images[..., 0].numel()
    mean = total / n
    std = (squares / n - mean * mean).clamp_min(1e-6).sqrt()
    return (tuple(round(v, 4) for v in mean.tolist()),
            tuple(round(max(v, 1e-3), 4) for v in std.tolist()))


def use_folder(root, image_size: int = 32) -> DatasetSpec:
    """Describe an image folder and make it what get_spec("folder") answers in this process."""
    global _current
    key = (str(root), image_size)
    if key not in _FOLDERS:
        _FOLDERS[key] = folder_spec(root, image_size)
    _current = _FOLDERS[key]
    return _current


def builtin_spec(name: str | None) -> DatasetSpec | None:
    """A data set described in this file, else None — never a run's image folder: a folder
    model's checkpoint carries its own classes, size and normalisation, and what a process last
    described with `use_folder` says nothing about it."""
    return SPECS.get(name or "")


def get_spec(name: str | None) -> DatasetSpec | None:
    """The spec for a data-set name, or None for a data set this code does not know (or for
    "folder" before `use_folder` described one)."""
    if name == FOLDER:
        return _current
    return SPECS.get(name or "")
