"""What a run makes before its first step — the training images laid out as the app would, the
bank of non-digit drawings, the CNN teacher — kept on disk so that the next run of the same data
and settings starts in seconds instead of minutes.

Each is stored under a key that covers everything that changes it: the data's digest, the
settings it reads, the device kind, and the source code of the modules that compute it (an edit
to the layout rebuilds the laid-out view). The key is written into the file and compared on
every read, and a file that can't be read, or holds anything else, is rebuilt: a cache is never
trusted. Writes are atomic; a cache that can't be written (a read-only or full disk) only costs
the time to rebuild it next run.

Where: --cache-dir, else $VIT_CACHE_DIR, else ~/.cache/vit-explorer/runs ($XDG_CACHE_HOME
honoured); --cache-dir none turns it off.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import sys
from pathlib import Path
from typing import Callable

import torch

from vit.settings import Settings, user_cache

OFF = "none"


def cache_root(flag: str = "") -> Path | None:
    """The folder prepared data is kept in (None: caching off)."""
    where = flag or Settings.read("cache_dir")
    if where.lower() == OFF:
        return None
    if where:
        return Path(where)
    return user_cache() / "vit-explorer" / "runs"


def code_digest(*objects) -> str:
    """SHA-256 of the source files that define `objects` (modules, functions or classes)."""
    h = hashlib.sha256()
    for path in sorted({inspect.getsourcefile(o) for o in objects}):
        h.update(Path(path).read_bytes())
    return h.hexdigest()


def key_text(parts: dict) -> str:
    """The key as the file records it: every part, in a fixed order."""
    return json.dumps(parts, sort_keys=True, default=str)


def cached(root: Path | None, kind: str, parts: dict,
           build: Callable[[], dict[str, torch.Tensor]]) -> tuple[dict[str, torch.Tensor], bool]:
    """(tensors, whether they came from the cache): the file for `kind` and `parts` under `root`
    if it is whole and was made for exactly these parts, else `build()` (then saved)."""
    if root is None:
        return build(), False
    key = key_text({"kind": kind, **parts})
    path = root / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:24]}.safetensors"
    got = _read(path, key)
    if got is not None:
        return got, True
    tensors = build()
    _write(path, key, tensors)
    return tensors, False


def _read(path: Path, key: str) -> dict[str, torch.Tensor] | None:
    from safetensors import SafetensorError
    from safetensors.torch import safe_open
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), "pt") as f:
            if (f.metadata() or {}).get("key") != key:
                return None
            return {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError):
        return None                  # truncated, damaged or not ours: rebuilt


def _write(path: Path, key: str, tensors: dict[str, torch.Tensor]) -> None:
    from vit.storage import StorageError, save_tensors
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_tensors(path, tensors, {"key": key})
    except (OSError, StorageError) as e:     # read-only, full disk: next run rebuilds it
        print(f"note: could not keep prepared data in {path.parent} "
              f"({' '.join(str(e).split())[:160]}); the next run prepares it again",
              file=sys.stderr, flush=True)
