"""One description per data set: everything the trainer, the preprocessing, the app and the CLIs
need to know about it. Adding a data set is adding one `DatasetSpec` to `SPECS` (and, if its files
are in a new format, a reader in vit/data/loading.py)."""
from __future__ import annotations

from dataclasses import dataclass

from vit.data.affine import Augment
from vit.preprocessing.styles import DIGITS, OBJECTS, PHOTOS, Style


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
    # How its pictures were made, so that any picture is laid out like them
    # (vit/preprocessing/styles.py: DIGITS as MNIST, OBJECTS as Fashion-MNIST, PHOTOS).
    style: Style = DIGITS
    noun: str = "digit"             # "Draw a digit", "not a digit"
    torchvision: str = ""           # torchvision.datasets class that downloads it
    folder: str = ""                # an image-folder copy's name under --data-dir (train/, test/)
    system_dir: str = ""            # a system package's folder of its raw files, if any
    # `python -m vit.train` defaults that differ for this data set (TrainConfig or ViTConfig field
    # names): what its bundled checkpoint was trained with, measured in docs/training.md.
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
                style=OBJECTS, noun="piece of clothing", torchvision="FashionMNIST",
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
                style=PHOTOS, noun="photo", torchvision="CIFAR10", folder="CIFAR-10-images",
                # Measured on an H100 (docs/training.md, "What each idea bought"): without TrivialAugment
                # the model overfits from epoch 65 (validation peaks at 75.7 %); with it, +2.1
                # points at epoch 72 and still rising; distilling the CNN teacher, +4.8 at epoch
                # 51; 180 epochs with whole-pixel shifts: 87.0 % on the test set.
                train_defaults=(("patch_size", 4), ("negatives", 0), ("serve_view", 0.0),
                                ("epochs", 180), ("batch_size", 512), ("lr", 2e-3),
                                ("warmup_epochs", 5.0), ("dim", 128), ("mlp_dim", 256),
                                ("policy", "trivialaugment"), ("teacher_width", 64),
                                ("teacher_epochs", 40))),
]}

# `--dataset folder --data-dir D`: any image folder in torchvision's ImageFolder layout
# (D/train/<class>/*, D/test/ or D/val/), described when a run starts: see vit/data/folders.py.
FOLDER = "folder"


def builtin_spec(name: str | None) -> DatasetSpec | None:
    """A data set described in this file, else None — never a run's image folder: a folder
    model's checkpoint carries its own classes, size and normalisation (an image folder is described
    by vit/data/folders.py's `folder_spec`, and that description travels with the run)."""
    return SPECS.get(name or "")
