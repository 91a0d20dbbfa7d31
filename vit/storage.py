"""Files written whole or not at all, and tensors read back with a one-line error: what
checkpoints, a run's resumable state and the caches (image folders, prepared data, test-set
answers) are stored with. A kill or a full disk at any moment leaves the previous file intact."""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file


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


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_tensors_and_metadata(path)[0]


def load_tensors_and_metadata(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A safetensors file's tensors and its metadata (strings; {} when it has none), in one read.
    Raises StorageError with one line."""
    path = Path(path)
    if not path.is_file():
        raise StorageError(f"{path}: file not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as e:
        raise StorageError(f"{path}: truncated or corrupt safetensors file ({one_line(e)})") from None
