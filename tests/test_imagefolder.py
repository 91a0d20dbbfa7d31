"""Image folders (train/<class>/*.jpg) as data sets: CIFAR-10's JPEG copy and any folder,
decoded once and cached beside the data, the cache rebuilt when a file changes.

Labels by class folder; resize and centre crop; the cache used, rebuilt after an edit or damage,
kept out of a read-only folder; hidden files skipped and counted; bad folders, pictures over the
pixel limit and decoder failures one line each; CIFAR-10's JPEG layout; `python -m vit.train
--dataset cifar10` end to end and `vit.predict` on a photo."""
import os

import numpy as np
import pytest
import torch
from PIL import Image

from vit.data.folders import CACHE_DIR, FolderError, read_image_folder
from vit.data.loading import DataError, load_split
from vit.data.specs import builtin_spec

CIFAR = builtin_spec("cifar10").class_names


def write_folder(root, classes=CIFAR[:3], per_class=4, size=(32, 32), ext="jpg", split="train"):
    for c, name in enumerate(classes):
        d = root / split / name
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = np.full((size[1], size[0], 3), 20 * c, np.uint8)
            pixels[: size[1] // 2, :, c % 3] = 200 + i                    # class-coloured top half
            Image.fromarray(pixels).save(d / f"{i}.{ext}", quality=95)
    return root / split


def test_a_folder_reads_as_uint8_images_with_labels_by_class_folder(tmp_path):
    folder = write_folder(tmp_path, ext="png")
    images, labels, classes = read_image_folder(folder, 32, 3, CIFAR)
    assert images.shape == (12, 32, 32, 3) and images.dtype == torch.uint8
    assert labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4 and classes == list(CIFAR)
    assert images[0, 0, 0, 0] == 200 and images[4, 0, 0, 1] == 200     # what was written


def test_other_sizes_are_resized_and_centre_cropped(tmp_path):
    folder = write_folder(tmp_path, size=(64, 40), ext="png")
    images, _, classes = read_image_folder(folder, 32, 3)
    assert images.shape == (12, 32, 32, 3) and classes == list(CIFAR[:3])


def test_the_cache_is_used_and_rebuilt_when_a_file_changes(tmp_path, monkeypatch):
    folder = write_folder(tmp_path)
    first = read_image_folder(folder, 32, 3, CIFAR)
    cache = tmp_path / CACHE_DIR / "train-32px-3ch.safetensors"
    assert cache.is_file()
    import vit.data.folders as imf
    real = imf.decode
    monkeypatch.setattr(imf, "decode", lambda *a: pytest.fail("decoded although cached"))
    again = read_image_folder(folder, 32, 3, CIFAR)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    # Editing one image (new bytes, new mtime) invalidates the cache.
    monkeypatch.setattr(imf, "decode", real)
    path = folder / CIFAR[1] / "2.jpg"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(path)
    os.utime(path, ns=(1, 1))
    changed = read_image_folder(folder, 32, 3, CIFAR)
    assert changed[0][6].max() < 10 and not torch.equal(changed[0], first[0])


def test_a_damaged_cache_is_rebuilt_not_trusted(tmp_path):
    folder = write_folder(tmp_path)
    first = read_image_folder(folder, 32, 3, CIFAR)
    (tmp_path / CACHE_DIR / "train-32px-3ch.safetensors").write_bytes(b"not safetensors")
    assert torch.equal(read_image_folder(folder, 32, 3, CIFAR)[0], first[0])


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / CIFAR[0] / "0.jpg").write_bytes(b"garbage"), "can't be read as an image"),
    (lambda f: (f / "spaceship").mkdir(), "spaceship: not one of the data set's classes"),
])
def test_bad_folders_get_one_line(tmp_path, damage, message):
    folder = write_folder(tmp_path)
    damage(folder)
    with pytest.raises(FolderError, match=message):
        read_image_folder(folder, 32, 3, CIFAR)


def test_cifar10_reads_its_jpeg_copy_from_the_data_dir(tmp_path):
    """The layout of ../shared/data: CIFAR-10-images/{train,test}/<class>/*.jpg."""
    root = tmp_path / "CIFAR-10-images"
    write_folder(root, classes=CIFAR, per_class=2)
    write_folder(root, classes=CIFAR, per_class=1, split="test")
    train, test = load_split("cifar10", tmp_path, True), load_split("cifar10", tmp_path, False)
    assert train.images.shape == (20, 32, 32, 3) and test.images.shape == (10, 32, 32, 3)
    assert sorted(set(test.labels.tolist())) == list(range(10))
    with pytest.raises(DataError, match="no test"):
        import shutil
        shutil.rmtree(root / "test")
        load_split("cifar10", tmp_path, False, download=False)


@pytest.mark.train
def test_the_trainer_trains_cifar10_from_its_folder_and_the_checkpoint_answers_a_photo(tmp_path):
    """`python -m vit.train --dataset cifar10` on a tiny copy of the folder layout: 32x32 colour
    and 10 classes come from the data set, the checkpoint loads, a photo of any size is answered."""
    from conftest import run_module

    from vit.checkpoint import open_checkpoint
    root = tmp_path / "CIFAR-10-images"
    write_folder(root, classes=CIFAR, per_class=6)
    write_folder(root, classes=CIFAR, per_class=2, split="test")
    r = run_module("vit.train", "--dataset", "cifar10", "--data-dir", tmp_path, "--out", tmp_path / "ck",
                   "--no-download", "--epochs", "1", "--batch-size", "20", "--val-size", "10",
                   "--dim", "16", "--depth", "1", "--heads", "2", "--mlp-dim", "32",
                   "--teacher-epochs", "1", "--eval-batch-size", "20")
    assert r.returncode == 0, r.stderr[-2000:]
    ck = open_checkpoint(tmp_path / "ck")
    assert ck.config.dataset == "cifar10" and ck.model.cfg.channels == 3 and ck.model.cfg.grid == 8
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (480, 640, 3), dtype=np.uint8)).save(
        tmp_path / "photo.jpg")
    r = run_module("vit.predict", tmp_path / "photo.jpg", "--checkpoint", tmp_path / "ck")
    assert r.returncode == 0 and any(c in r.stdout for c in CIFAR), r.stderr


def test_a_read_only_data_folder_is_left_alone_and_cached_in_the_users_cache(tmp_path, monkeypatch):
    folder = write_folder(tmp_path / "data")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    os.chmod(tmp_path / "data", 0o555)
    try:
        first = read_image_folder(folder, 32, 3, CIFAR)
        assert not (tmp_path / "data" / CACHE_DIR).exists()
        assert list((tmp_path / "cache" / "vit-explorer").glob("*/train-32px-3ch.safetensors"))
        assert torch.equal(read_image_folder(folder, 32, 3, CIFAR)[0], first[0])
    finally:
        os.chmod(tmp_path / "data", 0o755)


def test_a_file_replaced_by_one_of_the_same_size_and_time_is_read_again(tmp_path):
    """The cache trusted size and modification time: a file swapped for another of the same
    size, its time set back (cp -p, rsync -t, or within the same second), was never re-read."""
    folder = write_folder(tmp_path, ext="png")
    first = read_image_folder(folder, 32, 3, CIFAR)
    path = folder / CIFAR[0] / "1.png"
    before = path.stat()
    swapped = path.with_name("swap.tmp")
    Image.fromarray(np.full((32, 32, 3), 77, np.uint8)).save(swapped, "PNG")
    data = swapped.read_bytes()
    swapped.write_bytes(data[:before.st_size].ljust(before.st_size, b"\0")
                        if len(data) >= before.st_size else data + b"\0" * (before.st_size - len(data)))
    os.utime(swapped, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(swapped, path)
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    again = read_image_folder(folder, 32, 3, CIFAR)
    assert again[0][1].float().mean() == pytest.approx(77, abs=1)
    assert not torch.equal(again[0], first[0])


def test_hidden_files_are_skipped_and_counted(tmp_path, capsys):
    """macOS's AppleDouble `._0.jpg` files aborted a folder run."""
    folder = write_folder(tmp_path)
    (folder / CIFAR[0] / "._0.jpg").write_bytes(b"\0\5\26\7 AppleDouble, not a picture")
    (folder / CIFAR[1] / ".hidden.png").write_bytes(b"nothing")
    images, labels, _ = read_image_folder(folder, 32, 3, CIFAR)
    assert len(images) == 12
    assert "skipped 2 hidden files" in capsys.readouterr().err


def test_folder_pictures_are_upright_as_the_app_reads_them(tmp_path):
    """EXIF orientation was ignored in training and honoured in the app."""
    folder = write_folder(tmp_path, per_class=1)
    tall = np.zeros((32, 16, 3), np.uint8)
    tall[12:20] = 255                                   # a horizontal white band, upright
    exif = Image.Exif()
    exif[0x0112] = 6                                    # stored turned; view it turned back
    Image.fromarray(tall).transpose(Image.Transpose.ROTATE_90).save(
        folder / CIFAR[0] / "0.jpg", exif=exif, quality=100)
    images, _, _ = read_image_folder(folder, 16, 3, CIFAR)
    rows = images[0].float().mean(dim=(1, 2))           # upright: dark rows, then the white band
    # Read sideways, the band would be a vertical one: every row half white (~127).
    assert rows[0] < 40 and rows[8] > 200


def test_a_picture_over_the_pixel_limit_in_a_folder_is_one_line(tmp_path):
    from test_preprocess import _png_header_only
    folder = write_folder(tmp_path, ext="png")
    (folder / CIFAR[0] / "0.png").write_bytes(_png_header_only(15_000, 12_000))   # 180 MP
    with pytest.raises(FolderError, match="megapixels") as e:
        read_image_folder(folder, 32, 3, CIFAR, cache=False)
    assert "\n" not in str(e.value)


def test_a_full_disk_while_caching_is_not_an_error(tmp_path, monkeypatch):
    """The cache is optional: a write that fails (atomic_write's one-line SaveError, not an
    OSError) ended the run although the pictures were decoded."""
    import errno

    import vit.storage
    folder = write_folder(tmp_path, ext="png")

    def save_file(tensors, filename, metadata=None):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(vit.storage, "save_file", save_file)
    images, labels, _ = read_image_folder(folder, 32, 3, CIFAR)
    assert images.shape == (12, 32, 32, 3) and not list((tmp_path / CACHE_DIR).glob("*"))


def test_pictures_that_cannot_fit_in_memory_are_refused_before_decoding(tmp_path, monkeypatch):
    import vit.data.folders as imf
    folder = write_folder(tmp_path, ext="png")
    monkeypatch.setattr(imf, "machine_memory", lambda: 10**6)
    monkeypatch.setattr(imf, "decode", lambda *a: pytest.fail("decoded"))
    with pytest.raises(FolderError, match="12 pictures at 256x256 px take") as e:
        read_image_folder(folder, 256, 3, CIFAR, cache=False)
    assert "more than half of this machine's" in str(e.value) and "\n" not in str(e.value)


def test_any_decoder_failure_is_one_line_naming_the_file(tmp_path, monkeypatch):
    """PIL's decoders raise more than OSError (EOFError, struct.error, …): those were tracebacks."""
    import struct

    import vit.preprocessing.decode
    folder = write_folder(tmp_path, ext="png")

    def open_image(path):
        raise struct.error("unpack requires a buffer of 4 bytes")
    monkeypatch.setattr(vit.preprocessing.decode, "open_image", open_image)
    with pytest.raises(FolderError, match="can't be read as an image") as e:
        read_image_folder(folder, 32, 3, CIFAR, cache=False)
    assert "0.png" in str(e.value) and "\n" not in str(e.value)


def test_skipped_hidden_files_are_said_once_though_read_twice(tmp_path, capsys):
    folder = write_folder(tmp_path, ext="png")
    (folder / CIFAR[0] / "._0.png").write_bytes(b"AppleDouble")
    read_image_folder(folder, 32, 3, CIFAR)
    read_image_folder(folder, 32, 3, CIFAR)
    assert capsys.readouterr().err.count("skipped 1 hidden file") == 1
