"""Fetch a built-in data set's test split when it is missing, so that the app's Test set tab works
on a fresh clone and on a Space: `fetch_test_split(spec, data_dir, progress)`.

The files land where the loader looks (`data_dir/<torchvision name>/raw/`, vit/data/loading.py),
each written to a temporary file and renamed only once whole and checked: at most `MAX_BYTES`
read, gunzipped within the same bound, and the content's SHA-256 compared with the published
file's (mirrors may recompress, so the check is on the IDX bytes, not the archive): a plain-http
mirror, or anyone on the path to it, can withhold the files but never change them. A mirror's
failure, whatever it answered, is one line of our own words, remembered for `Fetches.RETRY`. One fetch per
data set at a time, whoever asks: `Fetches.run` joins a fetch already under way. Where the files
come from: the mirrors torchvision uses, or `$VIT_DATA_URL` (a mirror of your own; the tests' local
file server). No network: a `FetchError` in one line, and the tab says so.
"""
from __future__ import annotations

import gzip
import hashlib
import http.client
import io
import os
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Callable

from vit.data.loading import DataError
from vit.settings import Settings

MAX_BYTES = 16 << 20            # a test split's largest file (MNIST's images: 7.8 MB unpacked)
TIMEOUT = 20                    # seconds without a byte before a mirror is given up
DEADLINE = 180                  # seconds for one file in all
# (file name, SHA-256 of its unpacked IDX bytes, unpacked size) of each test split's files.
FILES = {
    "mnist": (("t10k-images-idx3-ubyte.gz",
               "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7", 7_840_016),
              ("t10k-labels-idx1-ubyte.gz",
               "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2", 10_008)),
    "fashion-mnist": (("t10k-images-idx3-ubyte.gz",
                       "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b", 7_840_016),
                      ("t10k-labels-idx1-ubyte.gz",
                       "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34", 10_008)),
}
MIRRORS = {"mnist": ("https://ossci-datasets.s3.amazonaws.com/mnist/",
                     "http://yann.lecun.com/exdb/mnist/"),
           "fashion-mnist": ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)}


class FetchError(DataError):
    """The test split could not be fetched: one line, no server path."""


def fetchable(name: str | None) -> bool:
    return name in FILES


def mirrors(name: str) -> tuple[str, ...]:
    own = Settings.read("data_url")
    return (own.rstrip("/") + "/",) if own else MIRRORS[name]


def _download(url: str, limit: int, say: Callable[[int], None]) -> bytes:
    """The body at `url`, at most `limit` bytes (more: FetchError); `say(bytes so far)`."""
    if not url.startswith(("http://", "https://")):
        raise FetchError(f"not an http(s) address: {url[:60]}")
    deadline = time.monotonic() + DEADLINE
    with urllib.request.urlopen(url, timeout=TIMEOUT) as r:        # noqa: S310 (http(s) only)
        chunks, got = [], 0
        while chunk := r.read(1 << 16):
            if time.monotonic() > deadline:         # a byte every few seconds, for ever
                raise FetchError(f"{url.rsplit('/', 1)[-1]} came too slowly")
            got += len(chunk)
            if got > limit:
                raise FetchError(f"{url.rsplit('/', 1)[-1]} is larger than {limit >> 20} MB")
            chunks.append(chunk)
            say(got)
    return b"".join(chunks)


def _unpacked(body: bytes, name: str, size: int) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(body)) as f:
            data = f.read(size + 1)
    except (OSError, EOFError, ValueError, zlib.error):
        raise FetchError(f"{name} is not a whole gzip file") from None
    return data


def _host(base: str) -> str:
    return base.split("/")[2][:60] if base.count("/") >= 2 else "the mirror"


def _said(e: BaseException) -> str:
    """Why a mirror failed, in words for a visitor: never the mirror's own bytes (a broken or
    hostile mirror's status line was shown as it came) nor an exception's name."""
    if isinstance(e, urllib.error.HTTPError):
        return f"the mirror answered HTTP {e.code}"
    if isinstance(e, http.client.HTTPException):
        return "the mirror's answer was not HTTP"
    if isinstance(e, (urllib.error.URLError, OSError)):
        return "no network, or no mirror answered"
    return "the mirror's answer could not be read"


def fetch_test_split(spec, data_dir, progress: Callable[[float, str], None] | None = None) -> Path:
    """Fetch `spec`'s test split into `data_dir`; returns its raw folder. Raises FetchError."""
    say = progress or (lambda fraction, text: None)
    folder = Path(data_dir) / spec.torchvision / "raw"
    files = FILES[spec.name]
    total = sum(size for _, _, size in files)
    done = 0
    for name, digest, size in files:
        target = folder / name
        if target.exists():
            done += size
            continue
        why = "no mirror answered"
        for base in mirrors(spec.name):
            try:
                body = _download(base + name, MAX_BYTES,
                                 lambda got, before=done: say(min(1.0, (before + got) / total),
                                                              f"fetching the {spec.title} test set"))
            except FetchError as e:
                why = str(e)
                continue
            except Exception as e:      # noqa: BLE001 (a mirror may answer anything at all)
                why = _said(e)
                continue
            try:
                data = _unpacked(body, name, size)
            except FetchError as e:
                why = f"{e} from {_host(base)}"
                continue
            if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
                why = f"{name} from {_host(base)} is not the published file"
                continue
            folder.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{name}.{os.getpid()}.tmp")
            tmp.write_bytes(body)
            os.replace(tmp, target)
            break
        else:
            raise FetchError(f"The {spec.title} test set could not be fetched ({why})")
        done += size
    say(1.0, f"the {spec.title} test set is here")
    return folder


class Fetches:
    """One fetch per data set at a time, shared by whoever asks (the app's warm-up thread and
    visitors opening the Test set tab); a failed fetch is remembered for `RETRY` seconds, so an
    offline server says so at once instead of trying again for every visitor."""
    RETRY = 300.0

    def __init__(self):
        self._lock = threading.Lock()
        self._running: dict[str, threading.Event] = {}
        self._failed: dict[str, tuple[float, str]] = {}
        self.fraction: dict[str, float] = {}

    def run(self, spec, data_dir, progress=None) -> None:
        """Fetch (or wait for the fetch under way of) `spec`'s test split. Raises FetchError."""
        with self._lock:
            failed = self._failed.get(spec.name)
            if failed and time.monotonic() - failed[0] < self.RETRY:
                raise FetchError(failed[1])
            running = self._running.get(spec.name)
            mine = running is None
            if mine:
                running = self._running[spec.name] = threading.Event()
        if not mine:
            while not running.wait(0.25):
                if progress:
                    progress(self.fraction.get(spec.name, 0.0), f"fetching the {spec.title} test set")
            return self.run(spec, data_dir, progress) if spec.name in self._failed else None
        try:
            def say(fraction, text):
                self.fraction[spec.name] = fraction
                if progress:
                    progress(fraction, text)
            fetch_test_split(spec, data_dir, say)
            self._failed.pop(spec.name, None)
        except FetchError as e:
            self._failed[spec.name] = (time.monotonic(), str(e))
            raise
        except Exception as e:      # noqa: BLE001 (a disk that fails, anything else: remembered)
            why = f"The {spec.title} test set could not be fetched ({_said(e)})"
            self._failed[spec.name] = (time.monotonic(), why)
            raise FetchError(why) from None
        finally:
            with self._lock:
                self._running.pop(spec.name, None)
            running.set()


FETCHES = Fetches()
