"""Attack a local `python app.py` as the public Space would be attacked, and print what happened.

    python -m bench.attack [--only 1,5] [--sessions 3000] [--uploads 400] [--sockets 1500]
                           [--hostile-sessions 100] [--distinct] [--no-junk] [--drawings 400]
                           [--prefill-mb 200] [--server-env NAME=VALUE]

Every server is `python app.py` on a loopback port with its own Gradio cache folder
(GRADIO_TEMP_DIR, so that the folder measured is its own). Sections 1-3, 8 and 9 share one started
with small limits (VIT_UPLOAD_CACHE_MB=200, VIT_SESSIONS=500); the others start their own.
Each replays, over raw HTTP (or MCP), and `--only` picks sections by number:
1. reading server files: a path with and without Gradio's `meta` marker, to the upload
   endpoint, the API and a private handler; a file that exists and one that does not;
2. decompression: a data: URL, an ICO hiding a 13000² PNG, 36-megapixel 16-bit, float and RGBA
   pictures — the server's peak memory (VmHWM) after each;
3. growth: events from thousands of made-up session ids, a long session id and an oversized
   body, uploads from many addresses, half-open sockets — the server's memory, open files and
   upload folder along the way, and whether a real visitor's drawing is still answered;
4. checkpoints that pass validation: a second server over a folder with a 65,537-token config,
   weights x 1e30, a 4,097-token config whose explanations would not fit (7 layers), one that
   fits (2 layers: its drawing's answer and "What drove it", with the server's peak memory), a
   90 KB class name and a 200-character one (how long its answer and explanation take) —
   issue 36, findings 2 and 3;
5. hostile sessions (issue 36, finding 1): --hostile-sessions fresh session ids, each sending
   every event of the page that takes a value the largest value the server accepts (a drawing
   PNG data URL just under the canvas's 1.5 MB, 2048 px a side; every head the page offers
   switched off — 16,384 "layer,head" pairs are refused as outside the choices; a 39-megapixel
   JPEG with a 200-character name uploaded from the session's own address; a test image
   clicked; every panel opened; a model switch), the events a browser sends after them, and
   1.9 MB of `[{}, {}, …]` as a layer, head or switch to four events — the server's RSS before,
   after each session's accepted values, after its junk and 2 s after all (the same values each
   session, so that the models' bounded caches of analyses do not grow; --distinct: a new
   drawing each session; --no-junk: the accepted values alone). Two sessions first, not
   counted, also press the scoreboard and differences buttons;
6. six decodes at once (finding 4): six 36-megapixel RGBA PNGs whose EXIF follows the pixel
   data, uploaded, then read by six events at once (three endpoints, two workers each) — the
   server's peak memory;
7. the picture cache (finding 5): a server with VIT_UPLOAD_CACHE_MB=200 whose folder is first
   filled with uploads (--prefill-mb), then --drawings different drawings answered with their
   explanation — the folder's size along the way, and whether every example picture the page
   names still answers;
8. MCP (finding 6): classify_image with a JPEG's base64 (it starts with "/9j/");
9. tracebacks (finding 7): values outside a Radio's, Dropdown's, CheckboxGroup's and Slider's
   choices and file objects as a click's event data, each a few times — what the server logged;
10. the fourth attack (issue 46), on a server with every setting at its default: a checkpoint
   folder with a FIFO page.onnx, a 2 GB sparse one whose hashes match, a typical.safetensors of
   [6291456, 64] and a .cache link out of the folder; a data mirror answering bytes that are no
   HTTP; 60 clients that never read the in-page runtime; 45 uploads and 70 joins each with a
   fresh forged X-Forwarded-For; NaN bodies and a 1.9 MB refused value; 100 MCP calls at once.
Traffic goes to 127.0.0.1 only. Every figure is from the machine this runs on.
"""
from __future__ import annotations

import argparse
import base64
import functools
import io
import json
import os
import socket
import struct
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

from bench.app_latency import ROOT, rss_mb, start


def status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6 if folder.is_dir() else 0.0


def post(url: str, body: bytes, headers: dict, timeout: float = 60) -> tuple[int, bytes]:
    req = urllib.request.Request(url, body, headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except urllib.error.URLError as e:         # answered (413) before the body was all sent
        return 0, f"connection closed while sending ({e.reason})".encode()


def call(base: str, api: str, data: list) -> str:
    """The event stream's last message for /gradio_api/call/API."""
    status, body = post(f"{base}gradio_api/call/{api}", json.dumps({"data": data}).encode(),
                        {"Content-Type": "application/json"})
    if status != 200:
        return f"HTTP {status}: {body.decode()[:120]}"
    event = json.loads(body)["event_id"]
    stream = urllib.request.urlopen(f"{base}gradio_api/call/{api}/{event}", timeout=120).read()
    return stream.decode().strip().splitlines()[-1][:160]


def upload(base: str, name: str, data: bytes, address: str = "10.0.0.1") -> tuple[int, str]:
    boundary = "attackboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\""
            f"\r\nContent-Type: application/octet-stream\r\n\r\n").encode() + data + \
        f"\r\n--{boundary}--\r\n".encode()
    status, answer = post(base + "gradio_api/upload", body,
                          {"Content-Type": f"multipart/form-data; boundary={boundary}",
                           "X-Forwarded-For": address})
    return status, answer.decode()


def as_file(path: str) -> dict:
    return {"path": path, "meta": {"_type": "gradio.FileData"}}


def png_flat(w: int, h: int) -> bytes:
    """A PNG of w x h black pixels: a few KB on disk whatever its size."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = zlib.compress(b"\0" * (w + 1) * h, 9)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">II", w, h) + b"\x08\x00\x00\x00\x00")
            + chunk(b"IDAT", rows) + chunk(b"IEND", b""))


def wide_pictures() -> dict[str, bytes]:
    a = np.zeros((6000, 6000), np.float32)
    a[1000:5000, 2900:3100] = 0.9
    out = {}
    for name, im, kw in (("sixteen.png", Image.fromarray((a * 65535).astype(np.uint16)), {}),
                         ("float.tif", Image.fromarray(a), {"compression": "tiff_adobe_deflate"}),
                         ("rgba.png", Image.fromarray(np.dstack([(a * 255).astype(np.uint8)] * 4)), {})):
        buf = io.BytesIO()
        im.save(buf, name.split(".")[1].replace("tif", "tiff").upper(), **kw)
        out[name] = buf.getvalue()
    png = png_flat(13000, 13000)
    out["icon.ico"] = struct.pack("<HHH", 0, 1, 1) + struct.pack("<BBBBHHII", 0, 0, 0, 0, 1, 32,
                                                                   len(png), 22) + png
    return out


def drawing() -> dict:
    from vit.data.examples import render_digit
    from vit.ui.canvas import drawing_value
    return drawing_value(255 - np.asarray(render_digit("7", 400, 26)), seq=1)


def answers_a_visitor(base: str) -> str:
    t = time.perf_counter()
    line = call(base, "analyse_drawing", [drawing(), "mnist", True, 6, 1, None, None, None])
    ok = "reads this as" in line and "**7**" in line
    return f"{'yes' if ok else 'NO'} ({time.perf_counter() - t:.2f} s)"


def read_files(base: str, pid: int) -> None:
    print("\n1. Reading files the server did not receive")
    secret = Path(tempfile.mkdtemp()) / "secret.png"
    Image.new("L", (64, 64), 255).save(secret)
    for path in (str(secret), str(secret.with_name("missing.png"))):
        for payload in ({"path": path}, as_file(path)):
            for api, rest in (("analyse_upload", ["mnist", True, 1, 1, None]), ("classify", [])):
                line = call(base, api, [payload, *rest])
                read = "reads this as" in line or "blank" in line or "No such file" in line
                print(f"  {api:15s} meta={'meta' in payload!s:5s} {Path(path).name:11s} -> "
                      f"{'READ' if read else 'refused'}: {line[:100]}")


def decompression(base: str, pid: int) -> None:
    print("\n2. Decoding before the checks (server peak memory, VmHWM)")
    url = "data:image/png;base64," + base64.b64encode(png_flat(8000, 8000)).decode()
    print(f"  data: URL of {len(url) / 1e3:.0f} KB -> "
          f"{call(base, 'analyse_upload', [{'path': 'x.png', 'url': url}, 'mnist', True, 1, 1, None])[:90]}")
    print(f"  peak {status_kb(pid, 'VmHWM') / 1024:.0f} MB")
    for name, data in wide_pictures().items():
        status, paths = upload(base, name, data, address=f"10.1.0.{len(name)}")
        if status != 200:
            print(f"  {name}: upload refused, HTTP {status}")
            continue
        line = call(base, "analyse_upload", [as_file(json.loads(paths)[0]), "mnist", True, 1, 1, None])
        print(f"  {name:12s} ({len(data) / 1e6:5.1f} MB file) -> {line[line.find('['):][:70]!s:72s}"
              f" peak {status_kb(pid, 'VmHWM') / 1024:.0f} MB")


def growth(base: str, pid: int, sessions: int, uploads: int, sockets: int,
           folder: Path) -> None:
    print("\n3. What grows: sessions, uploads, connections")
    config = json.loads(urllib.request.urlopen(base + "config", timeout=30).read())
    fn = next(i for i, d in enumerate(config["dependencies"]) if d.get("api_name") == "analyse_drawing")
    body = {"data": [drawing(), "mnist", True, 6, 1, None, None, None], "fn_index": fn,
            "event_data": None, "trigger_id": None}
    join = base + "gradio_api/queue/join"
    for probe, payload in (("session id of 100 KB", {**body, "session_hash": "s" * 100_000}),
                           ("body of 3 MB", {**body, "session_hash": "x", "pad": "p" * 3_000_000})):
        status, answer = post(join, json.dumps(payload).encode(), {"Content-Type": "application/json"})
        said = answer.decode()[:80] if status else "closed by the server before the body was all sent"
        print(f"  {probe}: HTTP {status or 413} {said}")
    print(f"  {'sessions':>9s} {'RSS MB':>7s}")
    step = max(1, sessions // 6)
    for i in range(sessions):
        post(join, json.dumps({**body, "session_hash": f"made-up-{i}"}).encode(),
             {"Content-Type": "application/json"})
        if (i + 1) % step == 0:
            time.sleep(1)
            print(f"  {i + 1:9d} {rss_mb(pid):7.0f}")
    noise = np.random.default_rng(0).integers(0, 256, 2_000_000, dtype=np.uint8)
    print(f"  {'uploads':>9s} {'folder MB':>9s} {'refused':>8s}")
    refused, step = 0, max(1, uploads // 6)
    for i in range(uploads):
        noise[:8] = np.frombuffer(struct.pack(">Q", i), np.uint8)        # a new file each time
        status, _ = upload(base, f"n{i}.bin", noise.tobytes(), address=f"10.2.{i // 250}.{i % 250}")
        refused += status != 200
        if (i + 1) % step == 0:
            print(f"  {i + 1:9d} {folder_mb(folder):9.0f} {refused:8d}")
    same = [upload(base, "same.bin", b"x" * 100, address="10.9.9.9")[0] for _ in range(40)]
    print(f"  40 uploads a minute from one address: {same.count(200)} taken, "
          f"{same.count(429)} refused (429)")
    print(f"  open files before the sockets: {fds(pid)}")
    held = []
    host, port = base.split("//")[1].rstrip("/").split(":")
    for _ in range(sockets):
        try:
            held.append(socket.create_connection((host, int(port)), timeout=2))
        except OSError:
            break
    time.sleep(1)
    print(f"  {len(held)} half-open sockets: server has {fds(pid)} open files; "
          f"a visitor is answered: {answers_a_visitor(base)}")
    time.sleep(12)
    print(f"  12 s later: server has {fds(pid)} open files (sockets without a request closed)")
    for s in held:
        s.close()
    print(f"  after all that: RSS {rss_mb(pid):.0f} MB, upload folder {folder_mb(folder):.0f} MB, "
          f"a visitor is answered: {answers_a_visitor(base)}")


# --- the page's own protocol: one session over Gradio's queue ---------------------------------

def page_config(base: str) -> dict:
    return json.loads(urllib.request.urlopen(base + "config", timeout=30).read())


def events(config: dict) -> dict[str, dict]:
    """{name: dependency} of the page's events that run on the server: the API's names, the
    private handlers' their function's (explore, explore_1, why_6, …)."""
    return {d["api_name"]: d for d in config["dependencies"] if d.get("api_name")
            and d.get("backend_fn", True)}


class Visitor:
    """One session, as the page's client speaks to the queue: POST queue/join with the event's
    values (the gr.State's place None), then the session's event stream read to the event's end.
    `address`: the X-Forwarded-For it sends (the visitor a proxy would name)."""

    def __init__(self, base: str, deps: dict[str, dict], sid: str, address: str = "10.0.0.1"):
        self.base, self.deps, self.sid, self.address = base, deps, sid, address

    def send(self, name: str, data=(), event_data=None, timeout: float = 600) -> tuple[str, list]:
        """Event `name` -> ("ok", its output values), or (the one line that refused it, [])."""
        dep = self.deps[name]
        data = [*data, *[None] * (len(dep["inputs"]) - len(data))]
        body = json.dumps({"data": data, "fn_index": dep["id"], "event_data": event_data,
                           "session_hash": self.sid, "trigger_id": None})
        return self.join(body.replace(json.dumps(JUNK), junk_json()).encode(), timeout)

    def join(self, body: bytes, timeout: float = 600) -> tuple[str, list]:
        status, answer = post(self.base + "gradio_api/queue/join", body,
                              {"Content-Type": "application/json", "X-Forwarded-For": self.address})
        if status != 200:
            return f"HTTP {status or 413}: {answer.decode(errors='replace')[:200]}", []
        event = json.loads(answer)["event_id"]
        req = urllib.request.Request(f"{self.base}gradio_api/queue/data?session_hash={self.sid}",
                                     headers={"X-Forwarded-For": self.address})
        with urllib.request.urlopen(req, timeout=timeout) as stream:
            for line in stream:
                if not line.startswith(b"data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "unexpected_error":
                    return f"error: {msg.get('message')}", []
                if msg.get("msg") == "process_completed" and msg.get("event_id") == event:
                    out = msg.get("output") or {}
                    if msg.get("success"):
                        return "ok", out.get("data") or []
                    return f"error: {out.get('error')}", []
        return "the event stream ended before the event did", []

    def upload(self, name: str, data: bytes) -> dict | str:
        """A file sent as the Upload tab sends it -> its FileData for an event, or the refusal."""
        status, paths = upload(self.base, name, data, address=self.address)
        if status != 200:
            return f"upload refused, HTTP {status}: {paths[:100]}"
        return {**as_file(json.loads(paths)[0]), "orig_name": name}


def one_line(text: str) -> bool:
    return "\n" not in text.strip() and "Traceback" not in text and len(text) < 400


def headline(out: list) -> str:
    """The answer's headline among an event's outputs (the first Markdown-like text)."""
    for v in out:
        if isinstance(v, str) and v.startswith("#"):
            return " ".join(v.split())
        if isinstance(v, dict) and isinstance(v.get("value"), str) and v["value"].startswith("#"):
            return " ".join(v["value"].split())
    return ""


def peak_mb(pid: int) -> float:
    return status_kb(pid, "VmHWM") / 1024


SERVER_ENV: dict[str, str] = {}      # --server-env: added to every server's environment


def scratch(prefix: str) -> Path:
    """A fresh folder, removed when this bench exits (a run writes ~1 GB of uploads, pictures and
    checkpoint copies)."""
    import atexit
    import shutil
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def serve(env: dict, log: Path) -> tuple:
    """`python app.py` with `env`, its own Gradio cache folder: (process, url, seconds, folder).
    As on a Space, one proxy is trusted (VIT_TRUSTED_PROXIES=1), so that the X-Forwarded-For
    each client sends here stands for the address a Space's proxy would add: the attacks come
    from many visitors. (An empty value in `env` takes the default: no proxy, section 10.)"""
    cache = scratch("attack-gradio-")
    proc, url, took = start(["app.py"], str(log), {"GRADIO_TEMP_DIR": str(cache),
                                                   "VIT_TRUSTED_PROXIES": "1", **env,
                                                   **SERVER_ENV})
    return proc, url, took, cache


def stop(proc) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def bundled_copy() -> Path:
    """The bundled checkpoints, copied: the test sets' answers a server caches beside a
    checkpoint land in the copy, not in this checkout."""
    import shutil
    root = scratch("attack-checkpoints-")
    for folder in sorted((ROOT / "checkpoints").iterdir()):
        if (folder / "config.json").is_file():
            shutil.copytree(folder, root / folder.name,
                            ignore=shutil.ignore_patterns(".cache", "train_state"))
    return root


def small_testset(n: int = 120) -> Path:
    """A test split of `n` drawn digits in MNIST's IDX layout (`VIT_DATA_DIR`): the Test set tab
    opens in a second, wherever this runs."""
    from vit.data.examples import render_digit
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    images = np.stack([255 - np.asarray(render_digit(str(d), size=28, width=3,
                                                     offset=tuple(rng.uniform(-6, 6, 2))))
                       for d in labels]).astype(np.uint8)
    root = scratch("attack-data-")
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name, a in (("t10k-images-idx3-ubyte", images), ("t10k-labels-idx1-ubyte", labels)):
        (raw / name).write_bytes(bytes([0, 0, 8, a.ndim]) + struct.pack(f">{a.ndim}i", *a.shape)
                                 + a.tobytes())
    return root


def noise_png(side: int, rows: int, seed: int) -> str:
    """A side x side PNG data URL: its first `rows` rows coloured noise, the rest transparent."""
    from vit.ui.canvas import PREFIX
    rgba = np.zeros((side, side, 4), np.uint8)
    rgba[:rows] = np.random.default_rng(seed).integers(0, 256, (rows, side, 4), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, "PNG", compress_level=1)
    return PREFIX + base64.b64encode(buf.getvalue()).decode()


@functools.cache
def noise_rows() -> int:
    """How many rows of noise fill a drawing's data URL to just under MAX_CHARS."""
    from vit.ui.canvas import MAX_CHARS, MAX_SIDE
    empty, some = len(noise_png(MAX_SIDE, 0, 0)), len(noise_png(MAX_SIDE, 64, 0))
    return int(64 * (MAX_CHARS - 2000 - empty) / (some - empty))


def big_drawing(seed: int) -> dict:
    """The largest drawing the canvas's parser takes: a 2048 x 2048 PNG (its largest side) of
    coloured noise, its data URL just under MAX_CHARS (1.5 MB)."""
    from vit.ui.canvas import MAX_CHARS, MAX_SIDE
    rows = noise_rows()
    data = noise_png(MAX_SIDE, rows, seed)
    while len(data) > MAX_CHARS:
        rows -= 2
        data = noise_png(MAX_SIDE, rows, seed)
    return {"png": data, "final": True, "seq": seed + 1}


JUNK = "<1.9 MB of junk>"        # in a Visitor's values: sent as `junk_json()`


@functools.cache
def junk_json() -> str:
    """1.9 MB of JSON: [{}, {}, …] (what left ~50 MB in a session before)."""
    return json.dumps([{}] * 475_000)


def photo(megapixels: float = 39, seed: int = 0) -> bytes:
    """A baseline JPEG of about `megapixels` (the decoder's limit is 40): smooth colours."""
    w = int((megapixels * 1e6 * 4 / 3) ** 0.5)
    h = int(w * 3 / 4)
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
    im = Image.fromarray(small).resize((w, h), Image.BILINEAR)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=85)
    return buf.getvalue()


def session_events(v: Visitor, drawing: dict, heads: list, target: int, picture: bytes,
                   picture_name: str, listed: int, everything: bool) -> list[tuple[str, str, float]]:
    """Every event of the page that takes a value, once, with the largest value each accepts,
    and the events a browser sends after them: [(event, line, seconds)]. `everything`: the two
    buttons that only read the record too (the scoreboard, 0.8 s; the models' differences)."""
    from vit.ui.boundary import MAX_INDEX, MAX_SLIDER
    far = {"index": [MAX_INDEX - 1, MAX_INDEX - 1], "value": None, "selected": True}
    at = [True, MAX_SLIDER, MAX_SLIDER]
    done = []

    def send(name, data=(), event_data=None):
        t = time.perf_counter()
        line, out = v.send(name, data, event_data)
        done.append((name, line, time.perf_counter() - t))
        return out

    send("first_view", ["mnist"])
    send("follow_drawing", [drawing, "cifar10"])
    send("analyse_drawing", [drawing, "cifar10", *at])        # a colour model: a colour copy kept
    send("why")
    send("open_why")
    send("open_views")
    for name, data in (("explore", [MAX_SLIDER, MAX_SLIDER]), ("explore_1", [MAX_SLIDER, 1]),
                       ("rescale", [True]), ("choose_target", [target]), ("heads_switched", [heads]),
                       ("pick_strip_patch", [{"pick": MAX_INDEX - 1}]),
                       ("pick_strip_head", [{"layer": MAX_INDEX - 1, "head": MAX_INDEX - 1}]),
                       ("open_mechanism", []), ("mechanism_model", []), ("follow_cls", [True]),
                       ("open_lens", []), ("open_compare", []), ("choose_compare", ["fashion-mnist"]),
                       ("open_learned", []), ("learned_when", [100])):
        send(name, data)
    send("pick_patch", [], far)
    send("pick_head", [], far)
    if everything:
        send("measure")
    file = v.upload(picture_name, picture)
    if isinstance(file, str):
        done.append(("upload", file, 0.0))
    else:
        send("analyse_upload", [file, "mnist", *at])
        send("why_1")
        send("to_upload_tab", [file, "mnist", *at])
    send("open_testset", ["all", -1, -1])
    send("to_test_tab")
    send("show_test_image", at, {"index": listed - 1, "value": None, "selected": True})
    send("why_6")
    send("testset_view_1", ["least confident", target, -1])
    send("pick_cell", [], far)
    if everything:
        send("compare_on_test_set")
    send("load_example", ["mnist"], {"index": 9, "value": None, "selected": True})
    send("to_draw_tab", [drawing, "cifar10", *at])
    send("choose_model", ["fashion-mnist"])            # per-session copies of updated components
    send("refresh_testset", ["all"])
    return done


JUNK_TO = (("analyse_drawing", 2, "shared"), ("analyse_drawing", 3, "layer"),
           ("analyse_drawing", 4, "head"), ("explore", 0, "layer"), ("explore", 1, "head"),
           ("rescale", 0, "shared"), ("analyse_upload", 3, "layer"))


def send_junk(v: Visitor, i: int, small: dict) -> list[tuple[str, str]]:
    """1.9 MB of junk to four events (analyse_upload with no picture); which parameter of
    analyse_drawing and explore holds it turns with `i`: [(event(parameter), line)]."""
    rows = {"analyse_drawing": [small, "mnist", True, 6, 1], "explore": [6, 1], "rescale": [True],
            "analyse_upload": [None, "mnist", True, 6, 1]}
    said = []
    for name, place, what in (JUNK_TO[i % 3], JUNK_TO[3 + i % 2], JUNK_TO[5], JUNK_TO[6]):
        data = list(rows[name])
        data[place] = JUNK
        said.append((f"{name}({what})", v.send(name, data)[0]))
    return said


def hostile_sessions(n: int, distinct: bool, junk: bool = True) -> None:
    print(f"\n5. {n} hostile sessions (issue 36, finding 1)")
    log = Path(tempfile.mkdtemp()) / "app.log"
    proc, base, took, _ = serve({"VIT_CHECKPOINTS": str(bundled_copy()),
                                 "VIT_DATA_DIR": str(small_testset()),
                                 "VIT_SESSIONS": str(max(500, 2 * n))}, log)
    try:
        config = page_config(base)
        deps = events(config)
        choices = {c["props"].get("label"): [x[1] for x in c["props"].get("choices") or []]
                   for c in config["components"] if "choices" in c.get("props", {})}
        heads = choices["Heads switched off"]           # every head of the page's model
        target = max(choices["Explain the class"])
        picture = photo()
        name = "p" * 196 + ".jpg"                  # a long file name, kept as the upload's path
        from vit.data.examples import render_digit
        from vit.ui.canvas import drawing_value
        small = drawing_value(255 - np.asarray(render_digit("7", 400, 26)), seq=1)
        drawing = big_drawing(0)
        print(f"  server up in {took:.1f} s; each session sends a {len(drawing['png']) / 1e6:.2f} MB "
              f"drawing (2048² px) three times, all {len(heads)} heads switched off, a "
              f"{len(picture) / 1e6:.1f} MB 39-megapixel JPEG upload, a test image clicked, every "
              f"panel opened" + (f", and 4 x {len(junk_json()) / 1e6:.2f} MB of junk" if junk else ""))
        probe = Visitor(base, deps, "attack-probe", "10.35.0.1")
        from vit.ui.boundary import MAX_HEADS_OFF
        many = [f"{1000 + i // 100},{1000 + i % 100}" for i in range(MAX_HEADS_OFF)]
        print(f"  {len(many):,} heads switched off ({len(json.dumps(many)) / 1e3:.0f} KB) -> "
              f"{probe.send('heads_switched', [many])[0][:100]}")
        _, out = probe.send("open_testset", ["all", -1, -1])
        gallery = next((x for x in out if isinstance(x, list)), [])
        listed = max(1, len(gallery))

        def values(i: int, sid: str, everything: bool = False) -> tuple[Visitor, list]:
            v = Visitor(base, deps, sid, address=f"10.36.{i // 250 % 250}.{i % 250}")
            d = big_drawing(i) if distinct else drawing
            return v, session_events(v, d, heads, target, picture, name, listed, everything)

        t = time.perf_counter()
        v, warm = values(1000, "attack-warm-up", everything=True)   # lazy pictures, caches
        refused = send_junk(v, 1000, small) if junk else []
        v, _ = values(1001, "attack-warm-up-2", everything=True)
        if junk:
            send_junk(v, 1001, small)
        slow = sorted(warm, key=lambda e: -e[2])[:4]
        print(f"  two sessions first, not counted, with the scoreboard and the models' differences "
              f"too: {len(warm)} events and {len(refused)} of junk each, "
              f"{(time.perf_counter() - t) / 2:.1f} s a session; slowest: "
              + ", ".join(f"{e} {s:.1f} s" for e, _, s in slow))
        failed = [(e, line) for e, line, _ in warm if line != "ok"]
        for e, line in failed:
            print(f"    {e} -> {line[:140]}")
        for e, line in refused:
            print(f"  junk to {e} -> {line[:140]}")
        time.sleep(2)
        before = last = highest = rss_mb(proc.pid)
        grew, unexpected, junk_lines, t = [], {}, 0, time.perf_counter()
        step = 10 if n >= 20 else max(1, n // 5)
        print(f"  {'sessions':>9s} {'RSS MB':>7s}")
        for i in range(n):
            v, done = values(i, f"hostile-{i}")
            for e, line, _ in done:
                if line != "ok" and (e, line) not in failed:
                    unexpected[(e, line[:140])] = unexpected.get((e, line[:140]), 0) + 1
            time.sleep(0.1)
            mid = rss_mb(proc.pid)
            said = send_junk(v, i, small) if junk else []
            junk_lines += sum(one_line(line) and line.startswith("error:") for _, line in said)
            time.sleep(0.1)
            end = rss_mb(proc.pid)
            grew.append((mid - last, end - mid))       # (the accepted values, the junk)
            last, highest = end, max(highest, mid, end)
            if (i + 1) % step == 0:
                print(f"  {i + 1:9d} {end:7.0f}")
        took = time.perf_counter() - t
        time.sleep(2)
        after = rss_mb(proc.pid)
        whole = [a + b for a, b in grew]
        worst = int(np.argmax(whole))
        print(f"  RSS {before:.0f} MB before, {after:.0f} MB 2 s after the last: "
              f"{after - before:+.1f} MB for {n} sessions, {(after - before) / n:+.2f} MB a session; "
              f"largest single session {whole[worst]:+.1f} MB (session {worst + 1}); highest RSS "
              f"seen {highest:.0f} MB ({took:.0f} s)")
        print(f"  while sending the accepted values: {sum(a for a, _ in grew):+.0f} MB in all, "
              f"{sum(a for a, _ in grew) / n:+.2f} MB a session, largest "
              f"{max(a for a, _ in grew):+.1f} MB"
              + (f"; while sending the junk: {sum(b for _, b in grew):+.0f} MB in all, "
                 f"{sum(b for _, b in grew) / n:+.2f} MB a session, largest "
                 f"{max(b for _, b in grew):+.1f} MB" if junk else ""))
        if junk:
            print(f"  junk refused in one line: {junk_lines} of {4 * n}")
        for waited in (30, 60, 120):
            time.sleep(waited - (0 if waited == 30 else waited // 2))
            print(f"  idle {waited} s after the last session: RSS {rss_mb(proc.pid):.0f} MB")
        for (e, line), count in unexpected.items():
            print(f"  unexpected: {e} -> {line} (x{count})")
        text = log.read_text()
        print(f"  server log: {text.count('Traceback')} tracebacks, {len(text.splitlines())} lines; "
              f"server threads {status_kb(proc.pid, 'Threads')}")
    finally:
        stop(proc)


def exif_png(side: int, seed: int) -> bytes:
    """A side x side RGBA PNG (a bar on transparency) whose eXIf chunk (orientation 6) follows
    the pixel data: reading its EXIF decodes every pixel first."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = np.zeros((side, 1 + 4 * side), np.uint8)
    lo = 100 + 37 * seed
    rows[lo:side - lo, 1 + 4 * (side // 2 - 200):1 + 4 * (side // 2 + 200)] = 200 + seed
    exif = Image.Exif()
    exif[0x0112] = 6
    raw = exif.tobytes()
    raw = raw[6:] if raw.startswith(b"Exif\0\0") else raw
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">II", side, side) + b"\x08\x06\x00\x00\x00")
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 1)) + chunk(b"eXIf", raw)
            + chunk(b"IEND", b""))


def six_decodes() -> None:
    print("\n6. Six large PNGs decoded at once, their EXIF after the pixels (issue 36, finding 4)")
    import threading
    log = Path(tempfile.mkdtemp()) / "app.log"
    proc, base, took, _ = serve({"VIT_WARM": "0"}, log)
    try:
        deps = events(page_config(base))
        pictures = [exif_png(6000, i) for i in range(7)]
        visitors = [Visitor(base, deps, f"decode-{i}", f"10.46.0.{i + 1}") for i in range(7)]
        files = [v.upload(f"big{i}.png", data) for i, (v, data) in enumerate(zip(visitors, pictures))]
        if any(isinstance(f, str) for f in files):
            print(f"  {next(f for f in files if isinstance(f, str))}")
            return
        # Two workers per endpoint: three endpoints take six at once.
        calls = [("analyse_upload", [files[0], "mnist", True, 6, 1]),
                 ("analyse_upload", [files[1], "mnist", True, 6, 1]),
                 ("to_upload_tab", [files[2], "mnist", True, 6, 1]),
                 ("to_upload_tab", [files[3], "mnist", True, 6, 1]),
                 ("classify", [files[4]]), ("classify", [files[5]])]
        time.sleep(1)
        rss0 = rss_mb(proc.pid)
        t = time.perf_counter()
        line, out = visitors[6].send("analyse_upload", [files[6], "mnist", True, 6, 1])
        alone = peak_mb(proc.pid)
        print(f"  one PNG of 6000² RGBA ({len(pictures[6]) / 1e3:.0f} KB; 144 MB decoded) alone: "
              f"{time.perf_counter() - t:.1f} s -> {(headline(out) or line)[:60]}; server peak "
              f"{alone - rss0:+.0f} MB above its RSS before ({rss0:.0f} MB)")
        said = [None] * 6
        go = threading.Barrier(6)

        def one(i):
            go.wait()
            t = time.perf_counter()
            line, out = visitors[i].send(*calls[i])
            said[i] = (line, headline(out) or json.dumps(out)[:60], time.perf_counter() - t)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        print("  six more sent at once to analyse_upload x2, to_upload_tab x2, classify x2:")
        for (name, _), (line, what, s) in zip(calls, said):
            print(f"    {name:15s} {s:5.1f} s -> {line if line != 'ok' else what[:90]}")
        six = peak_mb(proc.pid)
        time.sleep(1)
        print(f"  server peak {six - rss0:+.0f} MB above its RSS before "
              f"({(six - rss0) / max(alone - rss0, 1):.1f} x one decode's); RSS 1 s later "
              f"{rss_mb(proc.pid) - rss0:+.0f} MB (memory the handlers' threads freed and kept)")
        print(f"  server log: {log.read_text().count('Traceback')} tracebacks")
    finally:
        stop(proc)


def example_urls(base: str) -> list[str]:
    """The example pictures under the canvas, as the page's config names them for a visitor."""
    config = page_config(base)
    gallery = next(c for c in config["components"] if c.get("props", {}).get("elem_id")
                   == "draw-examples")
    return [item["image"]["url"] for item in gallery["props"]["value"]]


def url_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def picture_cache(drawings: int, prefill_mb: int) -> None:
    print("\n7. Pictures and the cache folder's cap (issue 36, finding 5)")
    import threading
    cap = 200
    log = Path(tempfile.mkdtemp()) / "app.log"
    proc, base, took, cache = serve({"VIT_UPLOAD_CACHE_MB": str(cap), "VIT_WARM": "0"}, log)
    try:
        deps = events(page_config(base))
        urls = example_urls(base)
        print(f"  VIT_UPLOAD_CACHE_MB={cap}; the page names {len(urls)} example pictures: "
              f"{sorted(set(map(url_status, urls)))} at start; folder {folder_mb(cache):.1f} MB")
        noise = np.random.default_rng(1).integers(0, 256, 40_000_000, dtype=np.uint8)
        sent = 0
        for i in range(max(0, prefill_mb) // 40):
            noise[:8] = np.frombuffer(struct.pack(">Q", i), np.uint8)
            status, _ = upload(base, f"fill{i}.bin", noise.tobytes(), address=f"10.57.0.{i + 1}")
            sent += 40 * (status == 200)
        print(f"  {sent} MB uploaded first (40 MB files, one per address): folder "
              f"{folder_mb(cache):.0f} MB")
        from vit.data.examples import render_digit
        from vit.ui.canvas import drawing_value
        rng = np.random.default_rng(5)
        lock, count, largest, lines = threading.Lock(), [0], [0.0], {}
        step = max(1, drawings // 6)
        print(f"  {'drawings':>9s} {'folder MB':>9s}")

        def worker(k):
            v = Visitor(base, deps, f"cache-{k}", f"10.58.0.{k + 1}")
            while True:
                with lock:
                    if count[0] >= drawings:
                        return
                    count[0] += 1
                    i = count[0]
                    ink = 255 - np.asarray(render_digit(str(i % 10), 400, int(rng.integers(14, 34)),
                                                        offset=tuple(rng.uniform(-60, 60, 2)),
                                                        angle=float(rng.uniform(-30, 30))))
                for name, data in (("analyse_drawing",
                                    [drawing_value(ink, seq=i), "mnist", bool(i % 2), 1 + i % 6,
                                     1 + i % 4]), ("why", [])):
                    line, _ = v.send(name, data)
                    if line != "ok":
                        with lock:
                            lines[line[:120]] = lines.get(line[:120], 0) + 1
                size = folder_mb(cache)
                with lock:
                    largest[0] = max(largest[0], size)
                    if i % step == 0:
                        print(f"  {i:9d} {size:9.0f}")

        t = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        took = time.perf_counter() - t
        pictures = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()
                       and f.suffix in (".webp", ".png") and "fill" not in f.name)
        statuses = [url_status(u) for u in example_urls(base)]
        first = [url_status(u) for u in urls]
        print(f"  {drawings} drawings answered with their explanation in {took:.0f} s (2 visitors); "
              f"folder now {folder_mb(cache):.0f} MB, largest seen {largest[0]:.0f} MB "
              f"(cap {cap} MB); pictures in it {pictures / 1e6:.0f} MB")
        for line, k in lines.items():
            print(f"  an answer refused: {line} (x{k})")
        print(f"  example pictures: the page's config now names {len(statuses)}: "
              + ", ".join(f"HTTP {s} x{statuses.count(s)}" for s in sorted(set(statuses)))
              + "; the URLs named at start: "
              + ", ".join(f"HTTP {s} x{first.count(s)}" for s in sorted(set(first))))
        print(f"  server log: {log.read_text().count('Traceback')} tracebacks")
    finally:
        stop(proc)


def mcp_jpeg(base: str) -> None:
    print("\n8. MCP: classify_image with a JPEG (issue 36, finding 6)")
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from vit.data.examples import render_digit
    buf = io.BytesIO()
    render_digit("4").convert("RGB").save(buf, "JPEG", quality=90)
    text = base64.b64encode(buf.getvalue()).decode()

    async def run():
        async with streamable_http_client(base + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool("classify_image", {"image": text})

    got = asyncio.run(run())
    said = " ".join(c.text for c in got.content if c.type == "text")
    print(f"  a {len(buf.getvalue()) / 1e3:.1f} KB JPEG of a 4, base64 starting {text[:4]!r} -> "
          f"{'REFUSED' if got.isError else 'answered'}: {' '.join(said.split())[:150]}")


def tracebacks(base: str, log: Path, times: int = 3) -> None:
    print("\n9. Values outside a component's choices, file objects as clicks (issue 36, finding 7)")
    deps = events(page_config(base))
    v = Visitor(base, deps, "attack-tracebacks", "10.90.0.1")
    v.send("analyse_drawing", [drawing(), "mnist", True, 6, 1])
    file = {"index": {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}, "value": None}
    probes = [("Radio 'Show'", "testset_view", ["everything", -1, -1], None),
              ("Dropdown 'True class'", "testset_view_1", ["all", 12345, -1], None),
              ("Dropdown 'Explain the class'", "choose_target", [12345], None),
              ("Dropdown 'Second model'", "choose_compare", ["no-such-model"], None),
              ("Dropdown 'Model'", "choose_model", ["no-such-model"], None),
              ("CheckboxGroup 'Heads switched off'", "switch_heads", [["99,99", "x"]], None),
              ("Slider 'How far into training'", "learned_when", [1000], None),
              ("Slider 'Layer'", "explore", [10 ** 9, -5], None),
              ("a file object to pick_patch", "pick_patch", [], file),
              ("a file object to pick_head", "pick_head", [], file),
              ("a file object to show_test_image", "show_test_image", [True, 6, 1], file),
              ("a file object to load_example", "load_example", ["mnist"], file)]
    size = log.stat().st_size
    for what, name, data, event_data in probes:
        said = [v.send(name, data, event_data)[0] for _ in range(times)]
        print(f"  {what:36s} x{times} -> {said[0][:100]}")
    time.sleep(1)
    new = log.read_bytes()[size:].decode(errors="replace")
    added = new.splitlines()
    print(f"  the server wrote {len(added)} log lines, {len(new.encode()):,} bytes for these "
          f"{len(probes) * times} requests; {new.count('Traceback')} tracebacks among them "
          f"({log.read_text().count('Traceback')} in its whole log); e.g.:")
    for line in list(dict.fromkeys(added))[:4]:
        print(f"    {line[:150]}")


def many_tokens(folder: Path, depth: int) -> None:
    """A 4,097-token checkpoint (256 px in 4-px patches, 2 heads of width 16, random weights, no
    data set named, so no data set's 28 px applies): inside every loader limit but the
    explanation's at depth 7 (its attention maps alone 0.94 GB), inside that too at depth 2.
    The config is written as it is, whatever this loader thinks of it."""
    import torch

    from vit.checkpoint import FORMAT, save_checkpoint
    from vit.model import ViT, ViTConfig
    from vit.storage import save_tensors
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=256, patch_size=4, dim=16, depth=depth, heads=2, mlp_dim=32,
                    stem_channels=0)
    model = ViT(cfg)
    meta = {"class_names": [str(i) for i in range(10)],
            "normalization": {"mean": [0.1307], "std": [0.3081]}}
    if depth <= 2:
        save_checkpoint(folder, model, meta)
        return
    folder.mkdir(parents=True)
    save_tensors(folder / "model.safetensors", model.state_dict(), metadata={"format": FORMAT})
    (folder / "config.json").write_text(json.dumps({"format": FORMAT, "model": cfg.to_dict(),
                                                    "num_parameters": model.num_parameters(),
                                                    **meta}))


def checkpoints() -> None:
    print("\n4. Checkpoints that pass validation (issue 36, findings 2 and 3)")
    import shutil

    from safetensors.torch import load_file, save_file
    root = scratch("attack-hostile-checkpoints-")
    for name in ("mnist", "tokens", "overflow", "long-name", "name-200"):
        shutil.copytree(ROOT / "checkpoints" / "mnist", root / name,
                        ignore=shutil.ignore_patterns("best", "*.png", "*.csv", ".cache"))
    config = json.loads((root / "tokens" / "config.json").read_text())
    config["model"].update(image_size=1024, patch_size=4)
    (root / "tokens" / "config.json").write_text(json.dumps(config))
    weights = {k: v * 1e30 for k, v in load_file(root / "overflow" / "model.safetensors").items()}
    save_file(weights, root / "overflow" / "model.safetensors")
    long_name = "a seven drawn with a long tail " * 3000                  # 90 KB
    name_200 = ("a seven, as people from many countries write it, with or without a bar across "
                "its stem and with a tail that may curl " * 3)[:200]
    for name, seven in (("long-name", long_name), ("name-200", name_200)):
        config = json.loads((root / name / "config.json").read_text())
        config["class_names"][7] = seven
        (root / name / "config.json").write_text(json.dumps(config))
    many_tokens(root / "tokens-4097-deep", depth=7)
    many_tokens(root / "tokens-4097", depth=2)
    log = root / "app.log"
    # VIT_WARM=0: the peak memory below is the visitor's, not the warm-up's pictures.
    proc, url, took = start(["app.py"], str(log), {"VIT_CHECKPOINTS": str(root), "VIT_WARM": "0",
                                                   "GRADIO_TEMP_DIR": str(root / "gradio"),
                                                   **SERVER_ENV})
    try:
        warnings = [line for line in log.read_text().splitlines() if "warning" in line]
        print(f"  started in {took:.1f} s, RSS {rss_mb(proc.pid):.0f} MB; it said:")
        for line in warnings:
            print(f"    {line[:150]}")
        line = call(url, "analyse_drawing", [drawing(), "overflow", True, 6, 1, None, None, None])
        print(f"  a drawing sent to 'overflow' anyway -> {line[:110]}")
        deps = events(page_config(url))
        for name in ("tokens-4097", "name-200"):
            v = Visitor(url, deps, f"attack-{name}", "10.4.0.1")
            rss0, peak0 = rss_mb(proc.pid), peak_mb(proc.pid)
            said = []
            for event, data in (("analyse_drawing", [drawing(), name, True, 2, 1]), ("why", [])):
                t = time.perf_counter()
                line, out = v.send(event, data)
                said.append(f"{event} {time.perf_counter() - t:.1f} s, peak {peak_mb(proc.pid):.0f} MB"
                            + ("" if line == "ok" else f" ({line[:80]})"))
                if event == "analyse_drawing":
                    said[-1] += f" ({len(headline(out))}-character headline)"
            if name == "tokens-4097":
                print(f"  '{name}' (accepted): RSS {rss0:.0f} MB, peak so far {peak0:.0f} MB; "
                      + "; ".join(said) + f"; peak {peak_mb(proc.pid) - rss0:+.0f} MB above RSS")
            else:
                print(f"  '{name}' (class 7's name is 200 characters): "
                      + "; ".join(x.split(", peak")[0] + x.split(" MB")[-1] for x in said))
        text = log.read_text()
        print(f"  server log: {text.count('Traceback')} tracebacks")
    finally:
        stop(proc)


# --- 10. the fourth attack (issue 46): the page model, the data fetch, identity -----------------

def hostile_folder(outside: Path) -> Path:
    """A folder of checkpoints as the fourth attack made them: `mnist` whose `.cache` is a link to
    `outside`, `fifo` (mnist-small) whose page.onnx is a FIFO, `sparse` (mnist-small) whose
    page.onnx is 2 GB of sparse zeros with page.json's hashes matching, and `typical`
    (fashion-mnist) whose typical.safetensors holds means of [6291456, 64]."""
    import hashlib
    import shutil
    root = scratch("attack-four-")
    skip = shutil.ignore_patterns(".cache", "train_state", "snapshots")
    for name, source in (("mnist", "mnist"), ("fifo", "mnist-small"), ("sparse", "mnist-small"),
                         ("typical", "fashion-mnist")):
        shutil.copytree(ROOT / "checkpoints" / source, root / name, ignore=skip)
    (root / "mnist" / ".cache").symlink_to(outside)
    (root / "fifo" / "page.onnx").unlink()
    os.mkfifo(root / "fifo" / "page.onnx")
    size, h, zeros = 2 << 30, hashlib.sha256(), bytes(1 << 24)
    with open(root / "sparse" / "page.onnx", "wb") as f:
        f.truncate(size)
    for _ in range(size // len(zeros)):
        h.update(zeros)
    made = json.loads((root / "sparse" / "page.json").read_text())
    (root / "sparse" / "page.json").write_text(json.dumps({**made, "onnx_sha256": h.hexdigest()}))
    header = json.dumps({"means": {"dtype": "F32", "shape": [6291456, 64],
                                   "data_offsets": [0, 4 * 6291456 * 64]},
                         "precision": {"dtype": "F32", "shape": [64, 64],
                                       "data_offsets": [4 * 6291456 * 64, 4 * (6291456 + 64) * 64]}})
    header += " " * (-len(header) % 8)
    with open(root / "typical" / "typical.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header.encode())
        f.truncate(8 + len(header) + 4 * (6291456 + 64) * 64)
    return root


def garbage_mirror() -> tuple[str, list]:
    """A 'data mirror' answering every connection with bytes that are no HTTP: (its URL, the
    connections it took)."""
    import socket
    import threading
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    taken = []

    def answer():
        while True:
            conn, _ = server.accept()
            taken.append(time.perf_counter())
            conn.recv(4096)
            conn.sendall(b"MIRROR-BYTES <script>alert(1)</script>\r\n\r\n")
            conn.close()
    threading.Thread(target=answer, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}/", taken


def never_reading(base: str, path: str, pid: int, n: int = 60) -> None:
    import socket
    port = int(base.rstrip("/").rsplit(":", 1)[1])
    before = rss_mb(pid)
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        socks.append(s)
    time.sleep(5)
    held = rss_mb(pid)
    time.sleep(30)
    cut = sum(1 for s in socks if _closed_by_server(s))
    for s in socks:
        s.close()
    time.sleep(5)
    print(f"  {n} clients that never read the 14.2 MB runtime (4 KB receive buffer): RSS "
          f"{before:.0f} -> {held:.0f} MB held ({(held - before) / n:+.2f} MB each), "
          f"{rss_mb(pid):.0f} MB 5 s after they left; cut off by the server after 30 s: {cut} of {n}")


def _closed_by_server(s) -> bool:
    s.settimeout(2)
    try:
        while chunk := s.recv(1 << 20):
            del chunk
        return True
    except OSError:
        return False


def forged_addresses(base: str, deps: dict) -> None:
    import threading
    codes = [upload(base, f"u{i}.png", png_flat(8, 8) + bytes([i]), f"198.51.100.{i}")[0]
             for i in range(45)]
    print(f"  45 uploads in a minute, a fresh forged X-Forwarded-For each: "
          f"{codes.count(200)} taken, {codes.count(429)} refused (HTTP 429)")
    d = drawing()
    dep = deps["analyse_drawing"]
    answers = []

    def one(i):
        body = json.dumps({"data": [d, "mnist", None], "fn_index": dep["id"], "event_data": None,
                           "session_hash": f"forged-{i}", "trigger_id": None}).encode()
        answers.append(post(base + "gradio_api/queue/join", body,
                            {"Content-Type": "application/json",
                             "X-Forwarded-For": f"203.0.113.{i}"})[0])
    threads = [threading.Thread(target=one, args=(i,)) for i in range(70)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The honest visitor from an address of its own (127.0.0.2: another peer on this machine).
    import http.client
    port = int(base.rstrip("/").rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=("127.0.0.2", 0))
    conn.request("POST", "/gradio_api/queue/join", json.dumps(
        {"data": [d, "mnist", None], "fn_index": dep["id"], "event_data": None,
         "session_hash": "honest-visitor", "trigger_id": None}), {"Content-Type": "application/json"})
    honest = conn.getresponse().status
    conn.close()
    print(f"  70 joins at once, a fresh forged address each: {answers.count(200)} accepted, "
          f"{answers.count(429)} refused (429), {answers.count(503)} 'queue full'; an honest "
          f"visitor's join from another address (127.0.0.2) at once after: HTTP {honest}")


def bodies(base: str) -> None:
    said = []
    for path in ("gradio_api/queue/join", "gradio_api/call/classify",
                 "gradio_api/call/analyse_drawing"):
        for body in (b"NaN", b"-Infinity", b'{"data": NaN}'):
            status, text = post(base + path, body, {"Content-Type": "application/json"})
            said.append((status, one_line(text.decode(errors="replace"))))
    print(f"  NaN / -Infinity / {{\"data\": NaN}} to three routes: HTTP "
          f"{sorted({s for s, _ in said})}, one line each: {all(o for _, o in said)}")
    status, text = post(base + "gradio_api/call/classify",
                        json.dumps({"data": "x" * 1_900_000}).encode(),
                        {"Content-Type": "application/json"})
    print(f"  {{\"data\": \"x\" * 1,900,000}}: HTTP {status}, {len(text):,} bytes back")


def mcp_burst(base: str, pid: int, n: int = 100) -> None:
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from vit.data.examples import render_digit
    buf = io.BytesIO()
    render_digit("2").save(buf, "PNG")
    picture = base64.b64encode(buf.getvalue()).decode()

    async def one():
        async with streamable_http_client(base + "gradio_api/mcp/") as (r, w, _):
            async with ClientSession(r, w) as s:
                await s.initialize()
                got = await s.call_tool("explain_image", {"image": picture})
                return got.content[0].text if got.isError else "ok"

    async def burst():
        return await asyncio.gather(*[one() for _ in range(n)], return_exceptions=True)
    before = status_kb(pid, "Threads")
    out = [str(x) for x in asyncio.run(burst())]
    errors = [x for x in out if x != "ok"]
    print(f"  MCP: {n} explain_image calls at once: {n - len(errors)} answered, {len(errors)} "
          f"refused (naming an address: {sum('http' in e or '127.0.0.1' in e for e in errors)}; "
          f"{sorted(set(errors))}); server threads {before} -> {status_kb(pid, 'Threads')}")


def fourth_attack() -> None:
    print("\n10. The fourth attack (issue 46): hostile checkpoint files and mirror, non-reading "
          "clients, forged addresses, NaN bodies, an MCP burst — every setting at its default")
    outside = scratch("attack-outside-")
    t = time.perf_counter()
    folder = hostile_folder(outside)
    mirror, taken = garbage_mirror()
    log = Path(tempfile.mkdtemp()) / "app.log"
    proc, base, took, _ = serve({"VIT_CHECKPOINTS": str(folder), "VIT_DATA_URL": mirror,
                                 "VIT_DATA_DIR": str(scratch("attack-nodata-")),
                                 "VIT_TRUSTED_PROXIES": "", "VIT_UPLOADS_PER_MINUTE": "30"}, log)
    try:
        for _ in range(600):
            if "* Warm:" in log.read_text():
                break
            time.sleep(0.1)
        manifest = json.loads(urllib.request.urlopen(base + "vit/inpage/manifest.json").read())
        text = log.read_text()
        print(f"  the folder made in {time.perf_counter() - t - took:.0f} s; app.py up in "
              f"{took:.1f} s, peak RSS {peak_mb(proc.pid):.0f} MB; page models offered: "
              f"{sorted(manifest['models'])}; models served: {sorted(manifest['labels'].values())}")
        print(f"  written through the .cache link: {len(list(outside.iterdir()))} files; "
              f"the mirror's connections during warm-up: {len(taken)}")
        deps = events(page_config(base))
        said = set()
        for i in range(5):
            line, out = Visitor(base, deps, f"tab-{i}", f"10.46.0.{i}").send(
                "open_testset", ["all", -1, -1])
            said |= {line} | {" ".join(str(v.get("value", v) if isinstance(v, dict) else v).split())[:160]
                              for v in out if "fetched" in str(v)}
        print(f"  5 visitors open the Test set tab: the mirror's connections {len(taken)} in all; "
              f"what they were told: {sorted(said)}")
        runtime = manifest["runtime"]["ort-wasm-simd-threaded.wasm"]["url"]
        never_reading(base, runtime, proc.pid)
        forged_addresses(base, deps)
        bodies(base)
        mcp_burst(base, proc.pid)
    finally:
        stop(proc)
    text = log.read_text()
    print(f"  server log: {text.count('Traceback')} tracebacks, {len(text.splitlines())} lines; "
          f"of them naming the mirror's bytes: {text.count('MIRROR')}")


SECTIONS = {1: "reading files", 2: "decompression", 3: "growth", 4: "checkpoints",
            5: "hostile sessions", 6: "six decodes at once", 7: "the picture cache", 8: "MCP",
            9: "tracebacks", 10: "the fourth attack"}
SHARED = {1, 2, 3, 8, 9}          # the sections that share the first server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(map(str, SECTIONS)),
                    help="sections to run, by number: " + "; ".join(f"{k} {v}" for k, v in
                                                                  SECTIONS.items()))
    ap.add_argument("--sessions", type=int, default=3000)
    ap.add_argument("--uploads", type=int, default=400)
    ap.add_argument("--sockets", type=int, default=1500)
    ap.add_argument("--hostile-sessions", type=int, default=100)
    ap.add_argument("--distinct", action="store_true",
                    help="section 5: a new drawing in each session (the models' caches grow too)")
    ap.add_argument("--no-junk", action="store_true",
                    help="section 5: the accepted values alone, no 1.9 MB junk")
    ap.add_argument("--drawings", type=int, default=400, help="section 7: drawings answered")
    ap.add_argument("--prefill-mb", type=int, default=200,
                    help="section 7: uploads sent before the drawings (40 MB each)")
    ap.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                    help="added to every server's environment (e.g. MALLOC_ARENA_MAX=2)")
    args = ap.parse_args()
    SERVER_ENV.update(a.split("=", 1) for a in args.server_env)
    if SERVER_ENV:
        print("every server started with " + " ".join(args.server_env))
    only = {int(x) for x in args.only.split(",") if x.strip()}
    if only - set(SECTIONS):
        ap.error(f"--only: sections are {', '.join(map(str, SECTIONS))}")
    t = time.perf_counter()
    if only & SHARED:
        log = Path(tempfile.mkdtemp()) / "app.log"
        proc, base, took, cache = serve({"VIT_UPLOAD_CACHE_MB": "200", "VIT_SESSIONS": "500",
                                         "VIT_UPLOADS_PER_MINUTE": "30"}, log)
        print(f"app.py on {base} in {took:.1f} s; RSS {rss_mb(proc.pid):.0f} MB; a visitor is "
              f"answered: {answers_a_visitor(base)}")
        try:
            if 1 in only:
                read_files(base, proc.pid)
            if 2 in only:
                decompression(base, proc.pid)
            if 3 in only:
                growth(base, proc.pid, args.sessions, args.uploads, args.sockets, cache)
            if 8 in only:
                mcp_jpeg(base)
            if 9 in only:
                tracebacks(base, log)
        finally:
            stop(proc)
        crashes = log.read_text().count("Traceback")
        print(f"\nserver log: {crashes} tracebacks")
    if 4 in only:
        checkpoints()
    if 5 in only:
        hostile_sessions(args.hostile_sessions, args.distinct, not args.no_junk)
    if 6 in only:
        six_decodes()
    if 7 in only:
        picture_cache(args.drawings, args.prefill_mb)
    if 10 in only:
        fourth_attack()
    print(f"\nsections {','.join(map(str, sorted(only)))} in {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
