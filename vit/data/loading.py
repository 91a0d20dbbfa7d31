"""Data sets as in-memory tensors, read once from their raw IDX files.

Each split is one uint8 tensor of images — (N, S, S) for grey data sets, (N, S, S, C) for colour —
plus int64 labels: no per-sample PIL work in the training loop (that alone costs ~12 s per MNIST
epoch on a 2-core machine). What a data set *is* (class names, size, normalisation, augmentation)
lives in vit/data/specs.py; this module only finds, reads and checks the files.
"""
from __future__ import annotations

import gzip
import math
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from vit.data.folders import FolderError, folder_root, read_image_folder, split_dir
from vit.data.specs import FOLDER, SPECS, DatasetSpec, builtin_spec

# Where the trainer downloads data sets and the app's test-set explorer looks for them.
DEFAULT_DATA_DIR = "data"
_SPLIT_FILES = {True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


class DataError(RuntimeError):
    """A data set could not be found or read; the message says where it looked."""


@dataclass
class Split:
    images: torch.Tensor   # (N, S, S) or (N, S, S, C) uint8
    labels: torch.Tensor   # (N,) int64
    source: str = ""       # the folder it was read from

    def __len__(self) -> int:
        return len(self.labels)

    def picture(self, i: int):
        """Image i as a picture file holds it (a PIL image, grey or RGB): what a person uploads."""
        from PIL import Image
        return Image.fromarray(np.asarray(self.images[i], np.uint8))


MAX_IDX_BYTES = 4 << 30     # a header promising more is refused before any data is read


def _read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (optionally gzipped): magic 0x0000 0x08 ndim, then ndim big-endian
    sizes, then exactly prod(sizes) bytes of data. The header is read first and at most the
    promised bytes (+1, to notice extra) after it: a 2 MB gzip that inflates to gigabytes is
    refused without being inflated."""
    try:
        with (gzip.open(path) if path.suffix == ".gz" else open(path, "rb")) as f:
            head = f.read(4)
            if len(head) < 4 or head[0] or head[1] or head[2] != 0x08:
                raise DataError(f"{path} is not a uint8 IDX file")
            ndim = head[3]
            sizes = f.read(4 * ndim)
            if len(sizes) < 4 * ndim:
                raise DataError(f"{path} is truncated: its header is cut off")
            shape = tuple(int(v) for v in np.frombuffer(sizes, ">i4"))
            if any(n < 0 for n in shape):
                raise DataError(f"{path}: its header gives a negative size {shape}")
            expected = math.prod(shape)
            if expected > MAX_IDX_BYTES:
                raise DataError(f"{path}: its header promises {expected:,} bytes of data "
                                f"(shape {shape}), more than this trainer reads into memory")
            data = f.read(expected + 1)
    except (OSError, EOFError, zlib.error) as e:   # unreadable, or a cut-off .gz
        raise DataError(f"{path}: can't be read ({e})") from None
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "longer than its header says"
        raise DataError(f"{path} is {what}: its header promises {expected:,} bytes of data "
                        f"for shape {shape}")
    return np.frombuffer(data, np.uint8).reshape(shape)


def check_split(images: torch.Tensor, labels: torch.Tensor, spec: DatasetSpec, where: str) -> None:
    """Raise DataError (one line naming `where`) unless images and labels are what `spec` trains
    on: (N, S, S) grey or (N, S, S, C) images of the spec's size, N >= 1, N labels in range."""
    S, C = spec.image_size, spec.channels
    want = (S, S) if C == 1 else (S, S, C)
    if images.dim() != 1 + len(want) or tuple(images.shape[1:]) != want:
        raise DataError(f"{where}: images have shape {tuple(images.shape)}; {spec.name} needs "
                        f"(N, {', '.join(map(str, want))})")
    if len(images) == 0:
        raise DataError(f"{where}: the file holds no images")
    if labels.dim() != 1:
        raise DataError(f"{where}: labels have shape {tuple(labels.shape)}, not (N,)")
    if len(labels) != len(images):
        raise DataError(f"{where}: {len(images):,} images but {len(labels):,} labels")
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= spec.num_classes:
        raise DataError(f"{where}: labels run from {lo} to {hi}; {spec.name} has "
                        f"{spec.num_classes} classes (0 to {spec.num_classes - 1})")


def _flat_idx_folder(folder: Path, train: bool):
    """(images path, labels path) if `folder` holds the split's IDX files directly, else None."""
    found = []
    for name in _SPLIT_FILES[train]:
        for candidate in (folder / name, folder / (name + ".gz")):
            if candidate.is_file():
                found.append(candidate)
                break
    return found if len(found) == 2 else None


def load_split(dataset: str | DatasetSpec, data_dir: str | os.PathLike, train: bool,
               download: bool = False) -> Split:
    """One split of `dataset` (a built-in data set's name, or any spec such as an image folder's
    `folder_spec`) as tensors, checked against its spec.

    Looks in the torchvision layout (`data_dir/MNIST/raw/…`, downloading there if asked) and, for
    a folder that holds the IDX files directly (such as Debian's /usr/share/datasets/fashion-mnist),
    reads them from there.
    """
    spec = dataset if isinstance(dataset, DatasetSpec) else builtin_spec(dataset)
    if spec is None:
        raise DataError(f"unknown dataset {dataset!r}; choose one of {', '.join(SPECS)}")
    folder = Path(data_dir)
    # The raw IDX files are read directly wherever they are (torchvision's layout included):
    # the same bytes torchvision would read, without importing it (~1 s) in the app.
    flat = (_flat_idx_folder(folder / spec.torchvision / "raw", train)
            or _flat_idx_folder(folder, train))
    if flat is None and spec.system_dir and not download:
        flat = _flat_idx_folder(Path(spec.system_dir), train)
    root = (folder_root(folder, spec.folder) if flat is None and (spec.folder or spec.name == FOLDER)
            else None)
    if flat is not None:
        images, labels = (_read_idx(p) for p in flat)
        split = Split(torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64)),
                      str(flat[0].parent))
    elif root is not None:
        split = _folder_split(spec, root, train)
    else:
        split = _torchvision_split(spec, folder, train, download)
    check_split(split.images, split.labels, spec,
                f"{split.source} ({'train' if train else 'test'} split)")
    return split


def _folder_split(spec: DatasetSpec, root: Path, train: bool) -> Split:
    return folder_split(root, train, spec.image_size, spec.channels, spec.class_names)


def folder_split(root, train: bool, size: int, channels: int, class_names) -> Split:
    """An image folder's split (`root/train/<class>/…`, or test/ or val/) at `size` pixels, for
    these classes, decoded once and cached (vit/data/folders.py). Raises DataError."""
    root = Path(root)
    where = split_dir(root, train)
    if where is None:
        raise DataError(f"{root} has no {'train' if train else 'test (or val)'} folder")
    try:
        images, labels, _ = read_image_folder(where, size, channels, class_names)
    except FolderError as e:
        raise DataError(str(e)) from None
    return Split(images, labels, str(where))


# Where torchvision keeps each data set under the data folder: CIFAR-10 in its archive's folder.
_TORCHVISION_FOLDERS = {"CIFAR10": "cifar-10-batches-py"}


def _torchvision_split(spec: DatasetSpec, folder: Path, train: bool, download: bool) -> Split:
    where = folder / _TORCHVISION_FOLDERS.get(spec.torchvision, f"{spec.torchvision}/raw")
    if not download and not where.is_dir():
        # Said without importing torchvision (~4 s on 2 cores): the app asks this of every
        # model whose data set is not on the machine, at start-up.
        raise DataError(f"{spec.name} not found under {where} (pass --download to fetch it)")
    import torchvision.datasets as tvd  # imported here: the app never needs it
    try:
        ds = getattr(tvd, spec.torchvision)(root=str(folder), train=train, download=download)
    except RuntimeError as e:  # torchvision: "Dataset not found. You can use download=True …"
        raise DataError(
            f"{spec.name} not found under {where}"
            + ("" if download else " (pass --download to fetch it)") + f": {e}") from None
    # MNIST-like sets hold tensors; CIFAR10 holds a numpy array and a list
    return Split(torch.as_tensor(np.asarray(ds.data)).clone(), torch.as_tensor(ds.targets).long(),
                 str(folder / spec.torchvision / "raw"))


def _per_channel(v: float | Sequence[float]) -> tuple[float, ...]:
    return (float(v),) if isinstance(v, (int, float)) else tuple(float(x) for x in v)


def to_unit_float(images: torch.Tensor, channels: int = 1) -> torch.Tensor:
    """Images -> float (N, C, S, S) in [0, 1]. Takes uint8 (0..255) or float (already in [0, 1])
    as (N, S, S) grey, (N, C, S, S) or (N, S, S, C)."""
    x = images.float().div_(255) if images.dtype == torch.uint8 else images.float()
    if x.dim() == 3 and channels == 1:
        return x.unsqueeze(1)                      # (N, S, S) -> (N, 1, S, S)
    if x.dim() == 4 and x.shape[1] == channels:
        return x                                   # (N, C, S, S) already
    if x.dim() == 4 and x.shape[-1] == channels:
        return x.permute(0, 3, 1, 2)               # (N, S, S, C) -> (N, C, S, S)
    raise ValueError(f"images of shape {tuple(images.shape)} don't have {channels} channel(s)")


def normalize(images: torch.Tensor, mean: float | Sequence[float],
              std: float | Sequence[float]) -> torch.Tensor:
    """Images (any layout `to_unit_float` takes) -> float (N, C, S, S), (x - mean) / std per
    channel. mean/std: one number per channel (C = their length), or a bare number for grey."""
    mean, std = _per_channel(mean), _per_channel(std)
    if len(mean) != len(std):
        raise ValueError(f"{len(mean)} means but {len(std)} standard deviations")
    x = to_unit_float(images, len(mean))
    m = torch.tensor(mean, device=x.device).view(1, -1, 1, 1)
    return (x - m) / torch.tensor(std, device=x.device).view(1, -1, 1, 1)


def main(argv=None) -> int:
    """`python -m vit.data`: fetch a data set (or check that it is there) and say where it is."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m vit.data", description=main.__doc__.split(": ", 1)[1])
    p.add_argument("--dataset", choices=list(SPECS), default="mnist")
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
