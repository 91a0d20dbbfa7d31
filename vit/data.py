"""Data sets as in-memory tensors, and batched augmentation.

Each split is read once into a uint8 tensor (N, 28, 28) plus int64 labels: no per-sample PIL work in
the training loop (that alone costs ~12 s per MNIST epoch on a 2-core machine).
"""
from __future__ import annotations

import gzip
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

# name -> (torchvision class name, class names, (mean, std) of the training pixels in [0, 1])
DATASETS = {
    "mnist": ("MNIST", [str(i) for i in range(10)], (0.1307, 0.3081)),
    "fashion-mnist": ("FashionMNIST",
                      ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                       "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"],
                      (0.2860, 0.3530)),
}
# Debian's `dataset-fashion-mnist` package puts the raw .gz IDX files here, flat.
DEBIAN_FASHION_DIR = "/usr/share/datasets/fashion-mnist"
_SPLIT_FILES = {True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


class DataError(RuntimeError):
    """A data set could not be found or read; the message says where it looked."""


@dataclass
class Split:
    images: torch.Tensor   # (N, 28, 28) uint8
    labels: torch.Tensor   # (N,) int64

    def __len__(self) -> int:
        return len(self.labels)


def _read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (optionally gzipped): magic 0x0000 0x08 ndim, then ndim big-endian sizes."""
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] != 0x08:
        raise DataError(f"{path} is not a uint8 IDX file")
    ndim = raw[3]
    shape = tuple(int(s) for s in np.frombuffer(raw, ">i4", ndim, offset=4))
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _flat_idx_folder(folder: Path, train: bool):
    """(images path, labels path) if `folder` holds the split's IDX files directly, else None."""
    found = []
    for name in _SPLIT_FILES[train]:
        for candidate in (folder / name, folder / (name + ".gz")):
            if candidate.is_file():
                found.append(candidate)
                break
    return found if len(found) == 2 else None


def load_split(dataset: str, data_dir: str | os.PathLike, train: bool,
               download: bool = False) -> Split:
    """One split of `dataset` as tensors.

    Looks in the torchvision layout (`data_dir/MNIST/raw/…`, downloading there if asked) and, for
    a folder that holds the IDX files directly (such as Debian's /usr/share/datasets/fashion-mnist),
    reads them from there.
    """
    if dataset not in DATASETS:
        raise DataError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    tv_name = DATASETS[dataset][0]
    folder = Path(data_dir)
    flat = _flat_idx_folder(folder, train)
    if flat is None and dataset == "fashion-mnist" and not download:
        flat = _flat_idx_folder(Path(DEBIAN_FASHION_DIR), train)
    if flat is not None:
        images, labels = (_read_idx(p) for p in flat)
        return Split(torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64)))

    import torchvision.datasets as tvd  # imported here: the app never needs it
    try:
        ds = getattr(tvd, tv_name)(root=str(folder), train=train, download=download)
    except RuntimeError as e:  # torchvision: "Dataset not found. You can use download=True …"
        raise DataError(
            f"{dataset} not found under {folder}/{tv_name}/raw"
            + ("" if download else " (pass --download to fetch it)") + f": {e}") from None
    return Split(ds.data.clone(), ds.targets.clone().long())


def normalize(images: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """uint8 (N, 28, 28) or float in [0, 1] -> normalised float (N, 1, 28, 28)."""
    x = images.float().div_(255) if images.dtype == torch.uint8 else images.float()
    if x.dim() == 3:
        x = x.unsqueeze(1)
    return (x - mean) / std


@dataclass
class Augment:
    """Random affine per image, applied to a whole batch at once with one `grid_sample`.

    Digits tolerate small rotations, scalings, shifts and shears (people write that way);
    flips would turn a 2 into something else, so there are none.
    """
    degrees: float = 10.0
    scale: tuple = (0.9, 1.1)
    shift: float = 2.0 / 28   # fraction of the image size
    shear: float = 0.15       # radians-ish, as a matrix entry

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """x: (B, 1, S, S) float with background 0 -> same shape, transformed."""
        B = x.shape[0]
        u = torch.rand(B, 5, generator=gen) * 2 - 1                       # uniform in [-1, 1]
        ang = u[:, 0] * math.radians(self.degrees)
        lo, hi = self.scale
        s = lo + (u[:, 1] + 1) / 2 * (hi - lo)
        sh = u[:, 2] * self.shear
        tx, ty = u[:, 3] * self.shift * 2, u[:, 4] * self.shift * 2       # grid coords span 2
        cos, sin = torch.cos(ang) / s, torch.sin(ang) / s
        # theta maps output coords to input coords: (B, 2, 3) = [rotation/scale · shear | shift]
        theta = torch.stack([torch.stack([cos, -sin + cos * sh, tx], 1),
                             torch.stack([sin, cos + sin * sh, ty], 1)], 1)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
