"""App latency and memory, measured the way users meet them.

    python -m bench.app_latency [--n 200] [--rss-requests 2000]

1. In-process: the full response of a drawing (preprocess + forward with attention + every
   picture the page shows), p50/p95 over --n runs. Goal: p50 <= 30 ms on a 2-core CPU.
2. Start-up: seconds from `python app.py` to a served page. Goal: <= 15 s.
3. Round trip: gradio_client -> /classify on a local `python app.py`, and on a bare Gradio app with
   the same endpoint shape (image file in, Label out, doing nothing), both in this run; p50 each and
   `ratio: X`. Goal: ratio <= 1.3.
4. Memory: the app server's RSS before and after --rss-requests /classify calls. Goal: < 50 MB.
`--fill-cache N` starts the app with N files already in its cache folder, as a busy page has.

    python -m bench.app_latency --devices cpu,cuda [--n 200]

instead starts one `python app.py` per device (VIT_DEVICE) and times /classify on each, the
requests taking turns in one run; p50 each and the ratio to the first device.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

BARE_APP = '''
import gradio as gr
def classify(path):
    return {str(i): 0.1 for i in range(10)}
with gr.Blocks() as demo:
    f = gr.File(type="filepath"); out = gr.Label()
    f.upload(classify, f, out, api_name="classify")
demo.queue(default_concurrency_limit=2).launch()
'''


def pct(xs, q):
    return float(np.percentile(xs, q))


def in_process(n: int) -> None:

    import torch

    from vit.data.examples import render_digit
    from vit.ui import create_app
    torch.set_num_threads(1)                # one torch thread, as app.py runs the app
    page = create_app().page
    from vit.ui.canvas import drawing_value
    ink = 255 - np.asarray(render_digit("7", 400, 26), np.uint8)
    value = drawing_value(ink)                       # what the page's canvas sends
    name = page.models.default
    for _ in range(5):
        page.analyse_drawing(page.visit(), value, name, True, 6, 1)
    ts = []
    for _ in range(n):                               # each a new visitor: every view is sent
        visit = page.visit()
        t = time.perf_counter()
        page.analyse_drawing(visit, value, name, True, 6, 1)
        ts.append(1000 * (time.perf_counter() - t))
    print(f"in-process full response: p50 {pct(ts, 50):.1f} ms, p95 {pct(ts, 95):.1f} ms (n={n})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], log: str | None = None,
          env: dict | None = None) -> tuple[subprocess.Popen, str, float]:
    """Start `python *args` on a free loopback port (with `env` added to the environment); its
    output goes to `log` (or nowhere)."""
    port = free_port()
    env = {**os.environ, **(env or {}), "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False"}
    t = time.perf_counter()
    out = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env,
                            stdout=out, stderr=subprocess.STDOUT)
    import urllib.request
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).read()
            break
        except OSError:
            if proc.poll() is not None:
                said = Path(log).read_text()[-1500:] if log else ""
                raise SystemExit(f"{args} exited during start-up\n{said}") from None
            time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}/", time.perf_counter() - t


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def round_trips(client, path, n: int) -> list[float]:
    from gradio_client import handle_file
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        client.predict(handle_file(path), api_name="/classify")
        ts.append(1000 * (time.perf_counter() - t))
    return ts


def per_device(devices: list[str], n: int, path: str) -> None:
    """/classify's round trip on one app server per device, taking turns."""
    from gradio_client import Client
    servers = {}
    try:
        for device in devices:
            servers[device] = start(["app.py"], log=os.path.join(tempfile.gettempdir(), f"app-{device}.log"),
                                    # one client sends every request: past the app's 30
                                    # uploads a minute per visitor it would get HTTP 429
                                    env={"VIT_DEVICE": device, "VIT_WARM": "0",
                                         "VIT_UPLOADS_PER_MINUTE": "1000000"})
            print(f"VIT_DEVICE={device} python app.py serves its page after "
                  f"{servers[device][2]:.1f} s")
        clients = {d: Client(url, verbose=False) for d, (_, url, _) in servers.items()}
        times = {d: [] for d in devices}
        for c in clients.values():
            round_trips(c, path, 5)
        for _ in range(4):
            for d, c in clients.items():
                times[d] += round_trips(c, path, n // 4)
        first = statistics.median(times[devices[0]])
        for d in devices:
            print(f"/classify on {d}: p50 {pct(times[d], 50):.1f} ms (p95 {pct(times[d], 95):.1f}, "
                  f"n={len(times[d])}); ratio to {devices[0]}: "
                  f"{statistics.median(times[d]) / first:.2f}")
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=20)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=200, help="requests per latency measurement")
    p.add_argument("--rss-requests", type=int, default=2000, help="requests for the memory check")
    p.add_argument("--devices", default="", help="e.g. cpu,cuda: compare /classify across devices")
    p.add_argument("--fill-cache", type=int, default=0, metavar="N",
                   help="start the app with N earlier uploads and pictures in its cache folder "
                        "(an hour of a busy page leaves thousands)")
    args = p.parse_args()
    if args.devices:
        from vit.data.examples import render_digit
        path = os.path.join(tempfile.mkdtemp(), "seven.png")
        render_digit("7").save(path)
        per_device(args.devices.split(","), args.n, path)
        return
    in_process(args.n)

    from gradio_client import Client

    from vit.data.examples import render_digit
    path = os.path.join(tempfile.mkdtemp(), "seven.png")
    render_digit("7").save(path)
    bare_file = os.path.join(tempfile.mkdtemp(), "bare_app.py")
    Path(bare_file).write_text(BARE_APP)

    env = {"VIT_WARM": "0"}            # nothing computed beside the timed requests
    if args.fill_cache:
        import hashlib
        cache = Path(tempfile.mkdtemp(prefix="vit-bench-cache-"))
        for i in range(args.fill_cache):
            folder = cache / hashlib.sha256(str(i).encode()).hexdigest()
            folder.mkdir()
            (folder / "image.webp").write_bytes(b"x" * 20_000)
        env["GRADIO_TEMP_DIR"] = str(cache)
        print(f"the app's cache folder holds {args.fill_cache} earlier files")
    app_proc, app_url, startup = start(["app.py"], env=env)
    print(f"python app.py serves its page after {startup:.1f} s")
    bare_proc, bare_url, _ = start([bare_file])
    try:
        app_client, bare_client = Client(app_url, verbose=False), Client(bare_url, verbose=False)
        round_trips(app_client, path, 5), round_trips(bare_client, path, 5)
        a, b = [], []
        for _ in range(4):                 # interleave so both see the same machine load
            a += round_trips(app_client, path, args.n // 4)
            b += round_trips(bare_client, path, args.n // 4)
        print(f"/classify round trip: app p50 {pct(a, 50):.0f} ms (p95 {pct(a, 95):.0f}), "
              f"bare Gradio p50 {pct(b, 50):.0f} ms (p95 {pct(b, 95):.0f})")
        print(f"ratio: {statistics.median(a) / statistics.median(b):.2f}")
        before = rss_mb(app_proc.pid)
        round_trips(app_client, path, args.rss_requests)
        after = rss_mb(app_proc.pid)
        print(f"app RSS: {before:.0f} MB before, {after:.0f} MB after {args.rss_requests} requests "
              f"(growth {after - before:+.1f} MB)")
    finally:
        for proc in (app_proc, bare_proc):
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
