"""The model in the visitor's browser: while the pen moves, the page computes the answer and the
strip itself (vit/ui/inpage.js, with onnxruntime-web's WebAssembly build) and sends the server
nothing; when the pen lifts, the server answers as always and its answer replaces the page's.

What the server offers for that, under PREFIX, and nothing else there:
- `manifest.json`: which models the page may run itself, with what each needs to lay out a
  drawing and read its answer, and where and with which SHA-256 each file is;
- the runtime, pinned: onnxruntime-web 1.30.0's `ort.wasm.min.js`, `ort-wasm-simd-threaded.mjs`
  and `.wasm` (vit/ui/vendor/onnxruntime-web, copied unchanged from the npm package, the
  WebAssembly gzipped: 3.7 MB, where a Hugging Face Space's repository takes no file over 10 MB
  without LFS; RUNTIME holds their SHA-256 — the .wasm's of its unzipped bytes — checked when the
  app starts, and the page checks them again before use);
- `inpage.js`, and each page model: `page.onnx` beside a checkpoint's weights (`python -m
  vit.export CHECKPOINT --page`), offered only when its `page.json` names the weights it was
  made from and they are the weights being served.

Every URL holds its file's hash, so a browser keeps each file for a year and asks again only for
a new one. Nothing here reads a path a client sent: the files are a fixed table made at start.
No network is needed: the files come from this repository, so `python app.py` offline serves
them too. Where any of it is missing or fails its check, the page says so and the pen's
updates go to the server as before.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
from pathlib import Path

from vit.explain import ood
from vit.explain.ood import not_label
from vit.export import PAGE_FILE, weights_sha256

log = logging.getLogger("vit.ui")
HERE = Path(__file__).parent
VENDOR = HERE / "vendor" / "onnxruntime-web"
PREFIX = "/vit/inpage/"
RUNTIME = {
    "ort.wasm.min.js": "faece07e84faa9001f5104bbe4e5c70861d06cb2376a0dea1fa0ad33a67adc81",
    "ort-wasm-simd-threaded.mjs": "e13f7f94fc51b4ca72b12faeb1ee95f4ace6dfbc8939bc718aabdc0a27c4299b",
    "ort-wasm-simd-threaded.wasm": "3398c10d07d229bd91b364548e130e0e51a8e5704b88c7c083ebbeb78842dee2",
}
# Beyond this many parameters a model stays on the server: a converted ViT-B/16 (86 M) is a
# 340 MB download and seconds a frame in a page.
MAX_PAGE_PARAMETERS = 5_000_000
TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
         ".onnx": "application/octet-stream", ".json": "application/json"}
FOREVER = "public, max-age=31536000, immutable"


def parameters(config) -> int:
    """The parameters a checkpoint's weights hold, as its architecture implies them (the count
    its config states is the file's own word)."""
    import math

    from vit.checkpoint import implied_shapes
    return sum(math.prod(shape) for shape in implied_shapes(config.model).values())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sri(data: bytes) -> str:
    """A Subresource Integrity value (what a <script integrity=…> checks)."""
    return "sha384-" + base64.b64encode(hashlib.sha384(data).digest()).decode()


class InPage:
    """The files the page needs to run models itself, checked once, by URL path."""

    def __init__(self, models, disabled: bool = False):
        self.files: dict[str, tuple[bytes, str]] = {}
        self.gzipped: dict[str, bytes] = {}
        self.problem = "turned off (VIT_INPAGE=0)" if disabled else None
        manifest = {"models": {}}
        if not disabled:
            manifest.update(self._runtime())
        if self.problem is None:
            for name in models.names:
                entry = self._model(name, models)
                if entry is not None:
                    manifest["models"][name] = entry
        # The page's menu shows a model's label: which model it names, and the one shown first.
        manifest["labels"] = {label: name for label, name in models.choices()}
        manifest["default"] = models.default
        manifest["problem"] = self.problem
        self.manifest = manifest
        self.files[PREFIX + "manifest.json"] = (json.dumps(manifest).encode(), "no-cache")

    def _add(self, name: str, data: bytes, zipped: bytes | None = None) -> str:
        """Serve `data` at a URL holding its hash; return that URL. Code is also kept gzipped
        (`zipped`, or made here) for the browsers that take it."""
        url = f"{PREFIX}{_sha256(data)[:16]}/{name}"
        self.files[url] = (data, FOREVER)
        if Path(name).suffix in (".js", ".mjs", ".wasm"):
            self.gzipped[url] = zipped or gzip.compress(data, 6, mtime=0)
        return url

    def _runtime(self) -> dict:
        out = {}
        for name, want in RUNTIME.items():
            try:
                zipped = None
                if (VENDOR / (name + ".gz")).exists():     # kept gzipped: a Space's repository
                    zipped = (VENDOR / (name + ".gz")).read_bytes()   # takes no file over 10 MB
                    data = gzip.decompress(zipped)
                else:
                    data = (VENDOR / name).read_bytes()
            except (OSError, EOFError, gzip.BadGzipFile):
                self.problem = f"the in-page runtime's {name} is missing"
                return {}
            if _sha256(data) != want:
                self.problem = f"the in-page runtime's {name} is not the pinned file"
                return {}
            out[name] = {"url": self._add(name, data, zipped), "sha256": want,
                         "integrity": _sri(data)}
        script = (HERE / "inpage.js").read_bytes()
        return {"runtime": out, "script": {"url": self._add("inpage.js", script),
                                           "integrity": _sri(script)}}

    def _model(self, name: str, models) -> dict | None:
        """A model's entry in the manifest, or None when the page can't run it (said in the log)."""
        folder, config = models.folders.get(name), models.configs[name]
        if not isinstance(folder, Path):
            return None                       # a Hub model: no page model beside it
        if parameters(config) > MAX_PAGE_PARAMETERS:
            return None
        # A page model holds the model's weights once in float32, plus its graph: more than that
        # is no page model (a 2 GB file was read whole, then served from memory).
        most = 4 * parameters(config) + GRAPH_BYTES
        try:
            data = bounded_read(folder / PAGE_FILE, most)
            made = json.loads(bounded_read(folder / "page.json", 64_000))
            fresh = made.get("weights_sha256") == weights_sha256(folder)
        except (OSError, ValueError, AttributeError) as e:
            if not isinstance(e, FileNotFoundError):
                log.warning("model %s: its page model is not served (%s); it is answered by the "
                            "server while drawing", name, _why(e))
            return None
        if not fresh or made.get("onnx_sha256") != _sha256(data):
            log.warning("model %s: its page model was made from other weights; it is answered "
                        "by the server while drawing (python -m vit.export %s --page)", name, name)
            return None
        cfg, style = config.model, config.style
        return {"url": self._add(f"{name}.onnx", data), "sha256": made["onnx_sha256"],
                "bytes": len(data), "size": cfg.image_size, "channels": cfg.channels,
                "grid": cfg.image_size // cfg.patch_size, "layers": cfg.depth, "heads": cfg.heads,
                "classes": list(config.class_names), "temperature": config.temperature,
                "reject_below": config.reject_below, "not_label": not_label(config),
                "unsure": ood.unsure_reason(config, "{best}", "{p}"),
                "style": {"name": style.name, "colour": style.colour, "box": style.box,
                          "by_mass": style.by_mass, "strokes": style.strokes},
                # The server's "not a digit" rules the page applies itself (inpage.js): the ink
                # checks, with vit/explain/ood.py's limits; the feature distance (the page model
                # gives no [CLS] features) and the digit check (another model) it cannot, so it
                # says it is still checking.
                "ink": ood.ink_limits() if style.drawn and cfg.channels == 1 else None,
                "server_checks": config.far_above is not None or config.digit_check is not None}

    def middleware(self):
        """An ASGI middleware class answering GET and HEAD under PREFIX from the table (404 for
        anything else there) and passing every other request on (`serve`)."""
        files, gzipped = self.files, self.gzipped

        class Serve:
            def __init__(self, app):
                self.app = app

            async def __call__(self, scope, receive, send):
                path = scope.get("path", "") if scope.get("type") == "http" else ""
                if not path.startswith(PREFIX):
                    return await self.app(scope, receive, send)
                return await serve(scope, send, files, gzipped)
        return Serve


CHUNK = 64 * 1024          # sent at a time; the next waits until the client has read it
STALLED_SECONDS = 30       # a client that reads nothing for this long is cut off
GRAPH_BYTES = 4_000_000    # a page model's graph and names beyond its float32 weights


def _why(e: BaseException) -> str:
    """A refused file's reason, without the server's path."""
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e).split(": ")[-1][:80]


def bounded_read(path: Path, most: int) -> bytes:
    """A regular file's bytes, if it holds at most `most` of them: its type and size checked
    before a byte is read (a FIFO hung start-up for good; a 2 GB sparse file was read whole).
    Raises OSError (FileNotFoundError where there is none) or ValueError."""
    import os
    import stat
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        if st.st_size > most:
            raise ValueError(f"{path.name} is {st.st_size / 1e6:.1f} MB, over the "
                             f"{most / 1e6:.1f} MB a file of its kind takes")
        data = f.read(most + 1)
    if len(data) > most:                     # it grew while read
        raise ValueError(f"{path.name} is over the {most / 1e6:.1f} MB a file of its kind takes")
    return data


def _range(header: bytes, size: int) -> tuple[int, int] | None:
    """One byte range "bytes=a-b" / "a-" / "-n" -> (start, end exclusive), else None (several
    ranges, or one that does not fit: the whole file is sent)."""
    text = header.decode("latin-1").strip()
    if not text.startswith("bytes=") or "," in text:
        return None
    first, _, last = text[6:].strip().partition("-")
    try:
        if not first:
            n = int(last)
            return (size - n, size) if 0 < n <= size else None
        start = int(first)
        end = int(last) + 1 if last else size
    except ValueError:
        return None
    return (start, min(end, size)) if 0 <= start < min(end, size) else None


async def serve(scope, send, files: dict, gzipped: dict) -> None:
    """Answer a GET or HEAD under PREFIX from `files`: the bytes in memory once for every client,
    sent CHUNK by CHUNK (each waits until the client has taken the one before, so a client that
    never reads holds one chunk, not a copy of a 14 MB file), with an ETag (the URL's hash: a
    repeat visit gets 304) and one byte range where asked."""
    import asyncio
    path = scope["path"]
    found = files.get(path) if scope.get("method") in ("GET", "HEAD") else None
    body, cache = found or (b"Not found", "no-store")
    kind = TYPES.get(Path(path).suffix, "text/plain") if found else "text/plain"
    headers = [(b"content-type", kind.encode()), (b"cache-control", cache.encode()),
               (b"x-content-type-options", b"nosniff")]
    asked = dict(scope.get("headers") or ())
    status = 200 if found else 404
    if found and cache == FOREVER:
        etag = f'"{path.split("/")[-2]}"'.encode()
        headers.append((b"etag", etag))
        if etag in asked.get(b"if-none-match", b""):
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            return await send({"type": "http.response.body", "body": b""})
    if found and path in gzipped:
        headers.append((b"vary", b"accept-encoding"))
        if b"gzip" in asked.get(b"accept-encoding", b""):
            body = gzipped[path]
            headers.append((b"content-encoding", b"gzip"))
    if found:
        headers.append((b"accept-ranges", b"bytes"))
        span = _range(asked[b"range"], len(body)) if b"range" in asked else None
        if span is not None:
            status = 206
            headers.append((b"content-range", f"bytes {span[0]}-{span[1] - 1}/{len(body)}".encode()))
            body = memoryview(body)[span[0]:span[1]]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if scope.get("method") == "HEAD":
        return await send({"type": "http.response.body", "body": b""})
    view = memoryview(body)
    try:
        for at in range(0, max(len(view), 1), CHUNK):
            last = at + CHUNK >= len(view)
            await asyncio.wait_for(send({"type": "http.response.body",
                                         "body": bytes(view[at:at + CHUNK]),
                                         "more_body": not last}), STALLED_SECONDS)
    except (TimeoutError, asyncio.TimeoutError):
        # Returning with the answer unfinished closes the connection (the server says so in
        # one line of its log): a stalled client holds nothing after STALLED_SECONDS.
        return None
