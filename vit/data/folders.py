"""Image folders in torchvision's ImageFolder layout (`split/<class>/<image>`) as in-memory uint8
tensors: decoded once, then cached beside the data.

Decoding 60,000 small JPEGs costs tens of seconds on a 2-core CPU; a run (or a resumed one, or the
app's test-set tab) then reads one safetensors file instead. The cache is keyed by every file's
path, size, modification and change times and inode, so adding, removing, editing or replacing an
image rebuilds it — also a file replaced within the same second by one of the same size, or copied
over with its old modification time kept (the change time can't be set back). Pictures are read
by the app's guarded decoder (vit.preprocessing.decode.open_image: size and pixel limits, EXIF
orientation), then resized (shorter side) and centre-cropped to the requested size, as the app
does with a photo. Hidden files (names starting with ".", such as macOS's `._*.jpg`) are skipped,
and how many is said.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import torch

from vit.data.affine import Augment
from vit.data.specs import FOLDER, DatasetSpec
from vit.preprocessing.styles import PHOTOS
from vit.settings import user_cache

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff"}
SPLIT_DIRS = {True: ("train",), False: ("test", "val")}
CACHE_DIR = ".vit-cache"
_NOTED: set[tuple[str, int]] = set()      # folders whose skipped hidden files were reported


class FolderError(RuntimeError):
    """The folder can't be read as an image data set; one line saying which file or folder."""


def split_dir(root, train: bool) -> Path | None:
    """`root/train`, or `root/test` / `root/val`, if it is there."""
    for name in SPLIT_DIRS[train]:
        d = Path(root) / name
        if d.is_dir():
            return d
    return None


def list_images(folder: Path, class_names=None) -> tuple[list[str], list[tuple[str, int]], int]:
    """(class names, [(path relative to folder, class index)] in a fixed order, the number of
    hidden files skipped). `class_names`: the classes the data set must have (by folder name),
    else the sorted sub-folders."""
    found = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not found:
        raise FolderError(f"{folder} has no class folders (expected {folder}/<class>/<images>)")
    classes = list(class_names) if class_names is not None else found
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise FolderError(f"{folder}/{unknown[0]}: not one of the data set's classes "
                          f"({', '.join(classes)})")
    index = {c: i for i, c in enumerate(classes)}
    entries = [(c, p) for c in found for p in sorted((folder / c).iterdir())
               if p.suffix.lower() in IMAGE_EXTS and p.is_file()]
    files = [(f"{c}/{p.name}", index[c]) for c, p in entries if not p.name.startswith(".")]
    if not files:
        raise FolderError(f"{folder} holds no images ({', '.join(sorted(IMAGE_EXTS))})")
    return classes, files, len(entries) - len(files)


def fingerprint(folder: Path, files, size: int, channels: int) -> str:
    """SHA-256 over every file's path, size, mtime, ctime and inode, and the requested layout."""
    h = hashlib.sha256(f"{size}:{channels}".encode())
    for rel, label in files:
        st = (folder / rel).stat()
        h.update(f"{rel}\0{label}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0"
                 f"{st.st_ino}\n".encode())
    return h.hexdigest()


def decode(path: Path, size: int, channels: int) -> np.ndarray:
    """One image file -> uint8 (size, size, C), or (size, size) for C = 1, upright."""
    from PIL import Image

    from vit.preprocessing.decode import PreprocessError, open_image
    try:
        with open_image(path) as im:
            im = im.convert("RGB" if channels == 3 else "L")
            w, h = im.size
            if (w, h) != (size, size):
                s = size / min(w, h)                    # shorter side to `size`, then the centre
                im = im.resize((max(size, round(w * s)), max(size, round(h * s))), Image.BICUBIC)
                left, top = (im.width - size) // 2, (im.height - size) // 2
                im = im.crop((left, top, left + size, top + size))
            return np.asarray(im, dtype=np.uint8)
    except PreprocessError as e:
        raise FolderError(f"{path}: can't be read as an image: {e}") from None
    except MemoryError:
        raise
    except Exception as e:      # PIL's decoders raise OSError, ValueError, EOFError, struct.error…
        text = " ".join(str(e).split())[:80] or type(e).__name__
        raise FolderError(f"{path}: can't be read as an image ({text})") from None


def read_image_folder(folder, size: int, channels: int = 3, class_names=None,
                      cache: bool = True) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """(images (N, S, S, C) or (N, S, S) uint8, labels (N,) int64, class names) of one split
    folder, from the cache when it is current; the cache is written when the folder's parent is
    writable, else in the user's cache (cache_dir)."""
    folder = Path(folder)
    classes, files, hidden = list_images(folder, class_names)
    if hidden and (str(folder), hidden) not in _NOTED:       # once, though read twice a run
        _NOTED.add((str(folder), hidden))
        print(f"note: skipped {hidden} hidden file{'s' if hidden > 1 else ''} in {folder} (names "
              f"starting with '.', such as macOS's ._*.jpg)", file=sys.stderr, flush=True)
    key = fingerprint(folder, files, size, channels)
    path = cache_dir(folder.parent) / f"{folder.name}-{size}px-{channels}ch.safetensors"
    if cache and path.is_file():
        got = _read_cache(path, key)
        if got is not None:
            return got
    check_fits(folder, len(files), size, channels)
    images = np.empty((len(files), size, size, channels) if channels > 1 else
                      (len(files), size, size), np.uint8)
    for i, (rel, _) in enumerate(files):       # one picture at a time: never a list and a copy
        images[i] = decode(folder / rel, size, channels)
    labels = torch.tensor([label for _, label in files], dtype=torch.int64)
    out = torch.from_numpy(images), labels, classes
    if cache:
        _write_cache(path, key, *out)
    return out


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):      # pragma: no cover - Windows
        return None


def check_fits(folder: Path, n: int, size: int, channels: int) -> None:
    """FolderError before decoding when the split's pictures, at `size` px, can't be held in this
    machine's memory (with room for a model beside them: half of it at most)."""
    need, total = n * size * size * channels, machine_memory()
    if total is not None and need > total // 2:
        raise FolderError(f"{folder}: {n:,} pictures at {size}x{size} px take {need / 1e9:.2f} GB "
                          f"in memory, more than half of this machine's "
                          f"({total / 1e9:.2f} GB): choose a smaller image size")


def cache_dir(root: Path) -> Path:
    """`root/.vit-cache` where the data's folder may be written (its mode allows it: a folder
    made read-only is respected even for root), else a folder per data set in the user's cache."""
    if os.access(root, os.W_OK) and root.stat().st_mode & stat.S_IWUSR:
        return root / CACHE_DIR
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return user_cache() / "vit-explorer" / key


def _read_cache(path: Path, key: str):
    from safetensors import SafetensorError
    from safetensors.torch import safe_open
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            if meta.get("fingerprint") != key:
                return None
            return f.get_tensor("images"), f.get_tensor("labels"), json.loads(meta["classes"])
    except (OSError, SafetensorError, KeyError, ValueError):
        return None                     # a damaged cache is rebuilt, never trusted


def _write_cache(path: Path, key: str, images, labels, classes) -> None:
    from vit.storage import StorageError, save_tensors
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_tensors(path, {"images": images.contiguous(), "labels": labels},
                     metadata={"fingerprint": key, "classes": json.dumps(classes)})
    except (OSError, StorageError):  # read-only data or a full disk (atomic_write's SaveError):
        pass                            # decoded again next time


def folder_root(data_dir, name: str) -> Path | None:
    """The folder holding `train/` for a data set: `data_dir/name` or `data_dir` itself."""
    for root in (Path(data_dir) / name, Path(data_dir)) if name else (Path(data_dir),):
        if split_dir(root, True) is not None or split_dir(root, False) is not None:
            return root
    return None




def folder_spec(root, image_size: int = 32) -> DatasetSpec:
    """The spec of an image folder: its classes are train/'s sub-folders (sorted), its per-channel
    mean and std those of its training pictures at `image_size` (decoded once and cached, see
    vit/data/folders.py), laid out as photos (shorter side resized, centre cropped). Raises
    FolderError when it is not such a folder."""
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
        style=PHOTOS, noun="picture",
        # No CNN teacher (a fine-tuned ViT already knows images), TrivialAugment as for CIFAR-10.
        train_defaults=(("negatives", 0), ("serve_view", 0.0), ("distill", 0.0),
                        ("policy", "trivialaugment"),
                        ("val_size", val)))


def _channel_stats(images) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std in [0, 1] of (N, S, S, 3) uint8 pictures, summed in chunks: a big
    folder is never copied whole as floats."""
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





