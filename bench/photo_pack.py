"""CIFAR-10 training photos for a lent GPU machine, in one lossless file.

The trainer's photo outliers are 10,000 of CIFAR-10's training photos (vit/training/batches.py
`outlier_photos`). As 10,000 JPEG files they count as ~40 MB of disk blocks against the 64 MiB
a call may carry; as one lossless WebP mosaic of the decoded pixels they are 15 MB. Unpacked
there as PNG files of the same pixels, in the same class folders and order, the trainer reads
the same photos (the same SHA-256), so a run there is the run the CPU command makes here.

    python -m bench.photo_pack pack ../shared/data gpu_pack/photos.webp      # here
    python -m bench.photo_pack unpack gpu_pack/photos.webp gpu_data          # there
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
from PIL import Image

SIDE = 32
PER_ROW = 100


def pack(data_dir: str, out: str) -> None:
    from vit.data.folders import list_images
    from vit.data.specs import builtin_spec
    from vit.training.batches import PHOTOS, outlier_photos
    from vit.training.config import TrainConfig
    photos = outlier_photos(TrainConfig(data_dir=data_dir, download=False, outliers="photo"),
                            builtin_spec("mnist"), print)
    root = Path(data_dir) / "CIFAR-10-images" / "train"
    _, files, _ = list_images(root, builtin_spec("cifar10").class_names)
    names = [f for f, _ in files][::max(1, len(files) // PHOTOS)][:PHOTOS]
    rows = -(-len(photos) // PER_ROW)
    grid = np.zeros((rows * PER_ROW, SIDE, SIDE, 3), np.uint8)
    grid[:len(photos)] = photos
    mosaic = grid.reshape(rows, PER_ROW, SIDE, SIDE, 3).transpose(0, 2, 1, 3, 4)
    Image.fromarray(mosaic.reshape(rows * SIDE, PER_ROW * SIDE, 3)).save(
        out, "WEBP", lossless=True, quality=100, method=6)
    Path(out).with_suffix(".json").write_text(json.dumps(
        {"names": names, "sha256": hashlib.sha256(photos.tobytes()).hexdigest()}))
    print(f"{len(photos)} photos -> {out} ({Path(out).stat().st_size / 1e6:.1f} MB)")


def unpack(packed: str, data_dir: str) -> None:
    meta = json.loads(Path(packed).with_suffix(".json").read_text())
    names = meta["names"]
    a = np.asarray(Image.open(packed).convert("RGB"))
    rows = a.shape[0] // SIDE
    photos = a.reshape(rows, SIDE, PER_ROW, SIDE, 3).transpose(0, 2, 1, 3, 4).reshape(-1, SIDE, SIDE, 3)
    photos = photos[:len(names)]
    if hashlib.sha256(photos.tobytes()).hexdigest() != meta["sha256"]:
        raise SystemExit("the packed photos are not the ones packed")
    root = Path(data_dir) / "CIFAR-10-images" / "train"
    for name, photo in zip(names, photos):
        path = (root / name).with_suffix(".png")
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(photo).save(path)
    print(f"{len(names)} photos -> {root}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("pack", "unpack"))
    ap.add_argument("source")
    ap.add_argument("target")
    args = ap.parse_args()
    (pack if args.what == "pack" else unpack)(args.source, args.target)
