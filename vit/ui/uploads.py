"""Which uploaded files a handler may read, and how much room uploads may take.

A client names an input file by the path that Gradio's `/upload` route handed back to it. That
path is `<upload folder>/<SHA-256 of the server's secret seed + the file's bytes>/<name>`: nobody
can name it without having uploaded that file to this server, so a path is read only if
- Gradio's `/upload` received it (the Blocks' `upload_file_set`), and
- it is, resolved, a regular file inside the upload folder (no symlink, no `..`).
Anything else — a server path such as `/etc/x.png` sent without Gradio's `meta` marker, an output
picture, a `data:` URL that Gradio would decode itself before our size checks — is refused with
one line that does not say whether the path exists on this machine.

`UploadLimits` is the ASGI middleware in front of `/upload`: per visitor (vit/ui/identity.py) at most
`per_visitor` uploads a minute, at most `in_flight` uploads being received at once, and the upload
folder kept under `cache_bytes` by deleting the oldest uploads first (Gradio's `delete_cache`
removes them after an hour anyway). A refused upload gets HTTP 429 or 503 with one line.
"""
from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path

import gradio as gr
from starlette.requests import ClientDisconnect

from vit.ui.identity import Identity

NOT_UPLOADED = ("That file was not uploaded to this server, so it can't be read; upload the "
                "picture itself.")
EXPIRED = "That upload has expired on the server (uploads are kept up to an hour); upload it again."
NO_DATA_URLS = ("Send the picture as a file upload (gradio_client's handle_file), not as a "
                "data: URL.")


def upload_folder() -> Path:
    from gradio.utils import get_upload_folder
    return Path(get_upload_folder()).resolve()


def received_file(payload) -> str:
    """The path of a file this server received by upload, from a FileData `payload`; gr.Error
    with one line for anything else."""
    from gradio.context import LocalContext
    if (getattr(payload, "url", None) or "").startswith("data:"):
        raise gr.Error(NO_DATA_URLS, print_exception=False)
    path = getattr(payload, "path", None)
    blocks = LocalContext.blocks.get(None)
    if not isinstance(path, str) or path not in getattr(blocks, "upload_file_set", ()):
        raise gr.Error(NOT_UPLOADED, print_exception=False)
    where = Path(path)
    # Received, yet it must still be where uploads live: never a link placed there afterwards.
    if where.is_symlink() or not where.resolve().is_relative_to(upload_folder()):
        raise gr.Error(NOT_UPLOADED, print_exception=False)
    if not where.is_file():
        raise gr.Error(EXPIRED, print_exception=False)
    return path


ENTRY_BYTES = 4096      # what a folder or file costs on disk beyond its data (an inode, a block)
BLOCK = 4096


def folder_bytes(folder: Path) -> list[tuple[float, int, Path]]:
    """(modification time, disk bytes, sub-folder) of each upload in `folder`, oldest first.
    Disk bytes, not sizes: 66,000 uploads of 16 bytes took 523 MB of disk and counted as 1 MB."""
    entries = []
    for sub in folder.iterdir() if folder.is_dir() else ():
        try:
            if sub.is_symlink() or not sub.is_dir():
                continue
            files = [f.stat() for f in sub.iterdir() if f.is_file()]
            entries.append((max((s.st_mtime for s in files), default=0.0),
                            ENTRY_BYTES + sum(max(s.st_blocks * 512, s.st_size) + ENTRY_BYTES
                                              for s in files), sub))
        except OSError:                      # removed meanwhile (delete_cache, another request)
            continue
    return sorted(entries, key=lambda e: e[0])


# The hash folders of the page's own files (the examples under the canvas): the page's config
# names them once for every later visitor, so making room must never delete them (it did: every
# visitor then got HTTP 403 for all ten examples until a restart).
_pinned: set[str] = set()


def pin(paths) -> None:
    """Keep the cache copies of these files (as Gradio names them) whatever room is needed."""
    from gradio.processing_utils import hash_file
    for path in paths:
        try:
            _pinned.add(hash_file(path))
        except OSError:
            continue


def make_room(folder: Path, cache_bytes: int, incoming: int) -> int:
    """Delete the oldest uploads and pictures until `incoming` more bytes fit under
    `cache_bytes`; returns the bytes the folder then holds. Only hash-named folders are touched,
    and never a pinned one."""
    entries = folder_bytes(folder)
    total = sum(size for _, size, _ in entries)
    for _, size, sub in entries:
        if total + incoming <= cache_bytes:
            break
        if len(sub.name) == 64 and all(c in "0123456789abcdef" for c in sub.name) \
                and sub.name not in _pinned:
            shutil.rmtree(sub, ignore_errors=True)
            total -= size
    return total


class Room:
    """The cap on the cache folder for the pictures this server writes (answers' maps, ~100 KB
    an answered drawing): uploads make room before they arrive (`UploadLimits`), pictures before
    they are written. The folder is scanned only when the running total nears the cap, or after
    RESCAN_SECONDS (uploads add to it unseen)."""
    RESCAN_SECONDS = 30.0

    def __init__(self):
        self.cap: int | None = None
        self._total: int | None = None
        self._scanned = 0.0
        self._lock = threading.Lock()

    def configure(self, cap_bytes: int | None) -> None:
        with self._lock:
            self.cap, self._total = cap_bytes, None

    def reserve(self, folder: Path, size: int) -> bool:
        """Room for a file of `size` bytes about to be written in `folder`: whether it fits
        (the oldest files deleted to make it). Scanning the folder cost 130-300 ms with 5,000
        files in it (an hour of a busy page's pictures): it was done on every upload."""
        if self.cap is None:
            return True
        cost = -(-size // BLOCK) * BLOCK + 2 * ENTRY_BYTES       # on disk: whole blocks
        with self._lock:
            now = time.monotonic()
            if self._total is None or self._total + cost > self.cap or \
                    now - self._scanned > self.RESCAN_SECONDS:
                # Down to 90 % of the cap, not just below it: at the cap, every write would
                # scan the folder again.
                self._total = make_room(folder, self.cap - self.cap // 10, cost)
                self._scanned = now
            if self._total + cost > self.cap:
                return False
            self._total += cost
            return True


ROOM = Room()


MULTIPART_SLACK = 1_000_000      # a multipart body's boundaries and headers around the file
GRACE_SECONDS, MIN_RATE = 10.0, 20_000      # after 10 s, a body must arrive at 20 KB/s or more


def paced(receive):
    """`receive` for a request body that must keep arriving: after GRACE_SECONDS, slower than
    MIN_RATE on average ends it as a disconnect (a socket sending a byte every 7 seconds held
    an upload slot, or a connection, for as long as it liked)."""
    start, got = time.monotonic(), 0

    async def wrapped():
        nonlocal got
        try:                                     # nothing at all for GRACE_SECONDS: gone too
            message = await asyncio.wait_for(receive(), GRACE_SECONDS)
        except TimeoutError:
            raise ClientDisconnect() from None
        got += len(message.get("body", b""))
        elapsed = time.monotonic() - start
        if message["type"] == "http.request" and elapsed > GRACE_SECONDS and \
                got < MIN_RATE * elapsed and message.get("more_body"):
            raise ClientDisconnect()
        return message

    return wrapped


def forget_gone(scope, keep: int = 10_000) -> None:
    """Gradio's set of received paths only grows: past `keep`, drop the files already deleted
    (by make_room or Gradio's delete_cache)."""
    app = scope.get("app")
    received = getattr(app.get_blocks(), "upload_file_set", None) if hasattr(app, "get_blocks") \
        else None
    if received is not None and len(received) > keep:
        received.difference_update([p for p in list(received) if not Path(p).is_file()])


class UploadLimits:
    """ASGI middleware for `POST …/upload` (see the module docstring); other requests pass."""

    def __init__(self, app, per_visitor: int = 30, in_flight: int = 4,
                 cache_bytes: int = 1 << 30, max_file_bytes: int = 50_000_000,
                 folder: Path | None = None, visitors: int = 10_000,
                 identity: Identity = Identity()):
        self.app, self.per_visitor, self.in_flight = app, per_visitor, in_flight
        self.identity = identity
        self.cache_bytes, self.max_file_bytes = cache_bytes, max_file_bytes
        self.folder = folder
        self.visitors = visitors
        self._recent: OrderedDict[str, deque] = OrderedDict()    # visitor -> upload times
        self._room = Room()
        self._room.configure(cache_bytes)
        self._busy = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or \
                not scope["path"].rstrip("/").endswith("/upload"):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers", ())).get(b"content-length", b"")
        # One request carries at most one file's worth (Gradio's parser takes 1,000 files of
        # 50 MB each), and says how much before sending it, as browsers and gradio_client do.
        if not declared.isdigit():
            return await plain(send, 411, "An upload must say its size (Content-Length).")
        size = int(declared)
        if size > self.max_file_bytes + MULTIPART_SLACK:
            return await plain(send, 413, f"An upload is at most {self.max_file_bytes // 1_000_000} "
                                          f"MB (this one is {size / 1e6:.1f} MB).")
        refusal = self._refusal(scope)
        if refusal is not None:
            return await plain(send, *refusal)
        self._busy += 1
        try:
            # Room for this request, before a byte of it is written.
            folder = self.folder or upload_folder()
            fits = await asyncio.to_thread(self._room.reserve, folder, size)
            forget_gone(scope)
            if not fits:
                return await plain(send, 503, "The server's room for uploads is full; try again "
                                               "in a few minutes.")
            started = False

            async def watched(message):
                nonlocal started
                started = started or message["type"] == "http.response.start"
                return await send(message)
            try:
                return await self.app(scope, paced(receive), watched)
            except TypeError:
                # Gradio's route raised TypeError, with a traceback, for a part without a file
                # name (`name="files"` and no `filename=`).
                if started:
                    raise
                return await plain(send, 400, "An upload is a file: each part needs a file name.")
        except ClientDisconnect:          # the visitor left (or was too slow): nothing to answer
            return None
        finally:
            self._busy -= 1

    def _refusal(self, scope) -> tuple[int, str] | None:
        if self._busy >= self.in_flight:
            return 503, "Too many uploads are arriving at once; try again in a moment."
        if self.identity.unlimited(scope):
            return None
        now, who = time.monotonic(), self.identity.visitor(scope)
        times = self._recent.pop(who, None) or deque()
        while times and now - times[0] > 60:
            times.popleft()
        self._recent[who] = times                   # most recent visitor last
        while len(self._recent) > self.visitors:    # the table itself stays bounded
            self._recent.popitem(last=False)
        if len(times) >= self.per_visitor:
            return 429, f"At most {self.per_visitor} uploads a minute; try again shortly."
        times.append(now)
        return None


async def plain(send, status: int, text: str) -> None:
    """A one-line plain-text answer."""
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

