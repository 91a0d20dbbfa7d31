"""Data sets as in-memory tensors, and batched augmentation.

Each split is read once into a uint8 tensor (N, 28, 28) plus int64 labels: no per-sample PIL work in
the training loop (that alone costs ~12 s per MNIST epoch on a 2-core machine).
"""
from __future__ import annotations

import gzip
import math
import os
import sys
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
# Where the trainer downloads data sets and the app's test-set explorer looks for them.
DEFAULT_DATA_DIR = "data"
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
    source: str = ""       # the folder it was read from

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
    # The raw IDX files are read directly wherever they are (torchvision's layout included):
    # the same bytes torchvision would read, without importing it (~1 s) in the app.
    flat = _flat_idx_folder(folder / tv_name / "raw", train) or _flat_idx_folder(folder, train)
    if flat is None and dataset == "fashion-mnist" and not download:
        flat = _flat_idx_folder(Path(DEBIAN_FASHION_DIR), train)
    if flat is not None:
        images, labels = (_read_idx(p) for p in flat)
        return Split(torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64)),
                     str(flat[0].parent))

    import torchvision.datasets as tvd  # imported here: the app never needs it
    try:
        ds = getattr(tvd, tv_name)(root=str(folder), train=train, download=download)
    except RuntimeError as e:  # torchvision: "Dataset not found. You can use download=True …"
        raise DataError(
            f"{dataset} not found under {folder}/{tv_name}/raw"
            + ("" if download else " (pass --download to fetch it)") + f": {e}") from None
    return Split(ds.data.clone(), ds.targets.clone().long(), str(folder / tv_name / "raw"))


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
    flips would turn a 2 into something else, so they are off by default. Clothes photographed
    upright are mirror-symmetric classes but are not written at a slant: see AUGMENT.
    """
    degrees: float = 10.0
    scale: tuple = (0.9, 1.1)
    shift: float = 2.0 / 28   # fraction of the image size
    shear: float = 0.15       # radians-ish, as a matrix entry
    flip: bool = False        # mirror left-right with probability 1/2

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """x: (B, 1, S, S) float with background 0 -> same shape, transformed."""
        return self.apply(x, self.draw(x.shape[0], gen))

    def draw(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        """Random transforms for `batch` images, as affine matrices theta (batch, 2, 3) mapping
        output coordinates to input ones. Drawn apart from `apply` so that data-parallel ranks can
        draw for the whole global batch and each apply only its own rows."""
        u = torch.rand(batch, 5, generator=gen) * 2 - 1                   # uniform in [-1, 1]
        ang = u[:, 0] * math.radians(self.degrees)
        lo, hi = self.scale
        s = lo + (u[:, 1] + 1) / 2 * (hi - lo)
        sh = u[:, 2] * self.shear
        tx, ty = u[:, 3] * self.shift * 2, u[:, 4] * self.shift * 2       # grid coords span 2
        cos, sin = torch.cos(ang) / s, torch.sin(ang) / s
        # [rotation/scale · shear | shift]
        theta = torch.stack([torch.stack([cos, -sin + cos * sh, tx], 1),
                             torch.stack([sin, cos + sin * sh, ty], 1)], 1)
        if self.flip:   # drawn after the rest, so flip-free draws stay what they always were
            mirror = torch.rand(batch, generator=gen) < 0.5
            theta[:, :, 0] = torch.where(mirror[:, None], -theta[:, :, 0], theta[:, :, 0])
        return theta

    @staticmethod
    def apply(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """x: (B, 1, S, S), theta: (B, 2, 3) -> (B, 1, S, S), resampled bilinearly."""
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


# The augmentation each data set trains with (--no-augment: none).
AUGMENT = {"mnist": Augment(),
           "fashion-mnist": Augment(degrees=5.0, shear=0.05, flip=True)}


def main(argv=None) -> int:
    """`python -m vit.data`: fetch a data set (or check that it is there) and say where it is."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m vit.data", description=main.__doc__.split(": ", 1)[1])
    p.add_argument("--dataset", choices=list(DATASETS), default="mnist")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help=f"folder to put it in / read it from (default: {DEFAULT_DATA_DIR})")
    p.add_argument("--download", action=argparse.BooleanOptionalAction, default=True,
                   help="download what is missing (default: yes)")
    args = p.parse_args(argv)
    try:
        for train in (True, False):
            split = load_split(args.dataset, args.data_dir, train, args.download)
            print(f"{args.dataset} {'train' if train else 'test'}: {len(split):,} images "
                  f"in {split.source}")
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
