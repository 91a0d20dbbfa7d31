"""Files written whole or not at all, and tensors read back with a one-line error: what
checkpoints, a run's resumable state and the caches (image folders, prepared data, test-set
answers) are stored with. A kill or a full disk at any moment leaves the previous file intact."""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from vit.settings import Settings


def one_line(e: BaseException) -> str:
    """An exception's message on one line (library messages sometimes span several)."""
    return " ".join(str(e).split())


def _umask() -> int:
    mask = os.umask(0o022)      # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask


# Read once, at import (single-threaded): files get the permissions a plain open() would give.
_FILE_MODE = 0o666 & ~_umask()


class StorageError(RuntimeError):
    """A file can't be read or written; the message is one line naming it."""


class SaveError(StorageError):
    """A file could not be written (a full disk, permissions): one line naming it; the file that
    was there before is intact."""


# atomic_write's temporary files: mkstemp(prefix=".NAME.", suffix=".tmp") -> .NAME.<8 characters>.tmp
TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
STALE_AFTER_S = 600        # older than this, no atomic_write still writes it: it was killed


def atomic_write(path: Path, write) -> None:
    """Call write(tmp_path), then rename tmp over `path` (atomic on POSIX and Windows). The file
    gets the usual permissions (mkstemp's are owner-only: an app server running as another
    user could not read a freshly trained checkpoint). A write that fails — safetensors reports
    a full disk as a SafetensorError, not an OSError — raises SaveError with one line."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        write(tmp)
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(e, (OSError, SafetensorError)):
            raise SaveError(f"could not write {path}: {_write_failure(e)}") from None
        raise


def remove_stale_temporaries(folder: Path, older_than_s: float = STALE_AFTER_S) -> list[str]:
    """Delete what an atomic_write killed mid-write (kill -9, a power cut) left in `folder`: plain
    files named as its temporaries (.NAME.XXXXXXXX.tmp) and untouched for `older_than_s`. Nothing
    else is ever removed. Returns the names removed."""
    removed = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    now = time.time()
    for p in entries:
        try:
            if (TEMPORARY.match(p.name) and p.is_file() and not p.is_symlink()
                    and now - p.stat().st_mtime > older_than_s):
                p.unlink()
                removed.append(p.name)
        except OSError:
            pass
    return removed


# --- where a command may write ----------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent        # the repository (or site-packages)


def bundled_folder() -> Path:
    """The bundled models, which app.py serves: the checkout's checkpoints/, or, installed with
    `pip install .`, the copy the wheel put in <prefix>/share/vit-explorer/checkpoints
    (pyproject.toml's data-files)."""
    here = ROOT / "checkpoints"
    if here.is_dir():
        return here
    return Path(sys.prefix) / "share" / "vit-explorer" / "checkpoints"


BUNDLED = bundled_folder()


def _served() -> list[tuple[Path, str]]:
    """The folders the app serves models from: the repository's checkpoints/ and $VIT_CHECKPOINTS."""
    found = [(BUNDLED.resolve(), "the bundled checkpoints folder the app serves")]
    served = Settings.read("checkpoints")
    if served:
        found.append((Path(served).expanduser().resolve(),
                      "the folder the app serves ($VIT_CHECKPOINTS)"))
    return found


def out_problem(out, flag: str = "--out", file: bool = False) -> str | None:
    """Why a command must not write to `out` (one line), or None. Every command with an output
    flag asks this before anything else: no folder a command writes into (`out` itself; with
    `file`, the folder holding it) may be the folder of models the app serves (the bundled
    checkpoints/ or $VIT_CHECKPOINTS: a sweep there would put its models among the app's), a
    filesystem root or, for a folder of a command's own, the home folder itself."""
    try:
        where = Path(out).resolve()      # symlinks and .. followed: what will really be written
    except (OSError, RuntimeError):      # a symlink loop: the write itself will say so
        where = Path(os.path.abspath(out))
    folder = where.parent if file else where
    what = "a file directly in " if file else ""
    for served, name in _served():
        if folder == served:
            return (f"{flag} {out} is {what}{name}: choose a folder of its own, such as a new "
                    f"folder inside it or runs/NAME")
    # (a file may go to a mounted disk's top folder, a USB stick say; a command's folder not)
    if folder == Path(folder.anchor) or (not file and os.path.ismount(folder)):
        return f"{flag} {out} is {what}a filesystem root ({folder}): choose a folder of its own"
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError, OSError):        # no home folder known
        home = None
    if not file and folder == home:
        return f"{flag} {out} is your home folder itself: choose a folder of its own inside it"
    return None


def _write_failure(e: BaseException) -> str:
    """"No space left on device", from an OSError or safetensors' Rust I/O error text."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    found = re.search(r'message: "([^"]+)"', str(e))
    return found.group(1) if found else one_line(e)


def save_json(path: Path, obj: dict) -> None:
    atomic_write(Path(path), lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=2) + "\n"))


def save_text(path: Path, text: str) -> None:
    atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text))


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict | None = None) -> None:
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    atomic_write(Path(path), lambda tmp: save_file(tensors, tmp, metadata=metadata))


def load_tensors(path: Path, shapes: dict | None = None, most_bytes: int | None = None
                 ) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors (see load_tensors_and_metadata for `shapes`, `most_bytes`)."""
    return load_tensors_and_metadata(path, shapes, most_bytes)[0]


def load_tensors_and_metadata(path: Path, shapes: dict | None = None, most_bytes: int | None = None
                              ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A safetensors file's tensors and its metadata (strings; {} when it has none), in one read.
    `shapes` ({name: shape}, a None shape taking any): the names and shapes the file must hold,
    checked in its header before any tensor is read (a crafted file of [6291456, 64] took 5.3 GB
    before its shape was refused); `most_bytes`: the file's largest size. Raises StorageError
    with one line."""
    path = Path(path)
    if not path.is_file():
        raise StorageError(f"{path}: file not found")
    if most_bytes is not None and path.stat().st_size > most_bytes:
        raise StorageError(f"{path}: {path.stat().st_size / 1e6:.1f} MB, more than the "
                           f"{most_bytes / 1e6:.1f} MB it can hold")
    try:
        with safe_open(str(path), framework="pt") as f:
            if shapes is not None:
                _check_header(path, f, shapes)
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as e:
        raise StorageError(f"{path}: truncated or corrupt safetensors file ({one_line(e)})") from None


def _check_header(path: Path, f, shapes: dict) -> None:
    """The tensors' names and shapes from an open file's header, against `shapes`."""
    found = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    if set(found) != set(shapes):
        raise StorageError(f"{path}: expected tensors {', '.join(sorted(shapes))}, found "
                           f"{', '.join(sorted(found)) or 'none'}")
    for name, shape in shapes.items():
        if shape is not None and found[name] != tuple(shape):
            raise StorageError(f"{path}: {name} has shape {list(found[name])}, not "
                               f"{list(shape)}")
