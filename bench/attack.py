"""Attack a local `python app.py` as the public Space would be attacked, and print what happened.

    python -m bench.attack [--sessions 3000] [--uploads 400] [--sockets 1500]

Starts the app on a loopback port with small limits (VIT_UPLOAD_CACHE_MB=200, VIT_SESSIONS=500),
then replays, over raw HTTP:
1. reading server files: a path with and without Gradio's `meta` marker, to the upload
   endpoint, the API and a private handler; a file that exists and one that does not;
2. decompression: a data: URL, an ICO hiding a 13000² PNG, 36-megapixel 16-bit, float and RGBA
   pictures — the server's peak memory (VmHWM) after each;
3. growth: events from thousands of made-up session ids, a long session id and an oversized
   body, uploads from many addresses, half-open sockets — the server's memory, open files and
   upload folder along the way, and whether a real visitor's drawing is still answered;
4. checkpoints that pass validation: a second server over a folder with a 65,537-token config
   and weights x 1e30 — whether it starts and how much memory it holds.
Traffic goes to 127.0.0.1 only. Every figure is from the machine this runs on.
"""
from __future__ import annotations

import argparse
import base64
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


def growth(base: str, pid: int, sessions: int, uploads: int, sockets: int) -> None:
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
    folder = Path(tempfile.gettempdir()) / "gradio"
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


def checkpoints() -> None:
    print("\n4. Checkpoints that pass validation")
    import shutil

    from safetensors.torch import load_file, save_file
    root = Path(tempfile.mkdtemp())
    for name in ("mnist", "tokens", "overflow"):
        shutil.copytree(ROOT / "checkpoints" / "mnist", root / name,
                        ignore=shutil.ignore_patterns("best", "*.png", "*.csv"))
    config = json.loads((root / "tokens" / "config.json").read_text())
    config["model"].update(image_size=1024, patch_size=4)
    (root / "tokens" / "config.json").write_text(json.dumps(config))
    weights = {k: v * 1e30 for k, v in load_file(root / "overflow" / "model.safetensors").items()}
    save_file(weights, root / "overflow" / "model.safetensors")
    log = root / "app.log"
    proc, url, took = start(["app.py"], str(log), {"VIT_CHECKPOINTS": str(root)})
    try:
        warnings = [line for line in log.read_text().splitlines() if "warning" in line]
        print(f"  started in {took:.1f} s, RSS {rss_mb(proc.pid):.0f} MB; it said:")
        for line in warnings:
            print(f"    {line[:150]}")
        line = call(url, "analyse_drawing", [drawing(), "overflow", True, 6, 1, None, None, None])
        print(f"  a drawing sent to 'overflow' anyway -> {line[:110]}")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=3000)
    ap.add_argument("--uploads", type=int, default=400)
    ap.add_argument("--sockets", type=int, default=1500)
    args = ap.parse_args()
    log = Path(tempfile.mkdtemp()) / "app.log"
    proc, base, took = start(["app.py"], str(log),
                             {"VIT_UPLOAD_CACHE_MB": "200", "VIT_SESSIONS": "500",
                              "VIT_UPLOADS_PER_MINUTE": "30"})
    print(f"app.py on {base} in {took:.1f} s; RSS {rss_mb(proc.pid):.0f} MB; a visitor is "
          f"answered: {answers_a_visitor(base)}")
    try:
        read_files(base, proc.pid)
        decompression(base, proc.pid)
        growth(base, proc.pid, args.sessions, args.uploads, args.sockets)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    crashes = log.read_text().count("Traceback")
    print(f"\nserver log: {crashes} tracebacks")
    checkpoints()


if __name__ == "__main__":
    main()
