"""Load and soak test of a local `python app.py` with concurrent gradio_client clients.

    python -m bench.load [--clients 16] [--requests 500] [--soak 2000]

Starts the app on a free loopback port, then --clients threads, each with its own Client, send
--requests mixed requests in all: drawings (the canvas endpoint, PNG data URLs) and uploads
(/classify with PNG/JPEG files). Prints errors (goal 0), p50/p95 latency, then the server's RSS
before and after --soak more requests (goal: growth < 50 MB). Traffic goes to 127.0.0.1 only.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image

from bench.app_latency import ROOT, pct, rss_mb, start


def make_inputs(folder: Path) -> tuple[list[str], list[str]]:
    from vit.data.examples import render_digit
    uploads, layers = [], []
    for d in "0123456789":
        im = Image.new("L", (400, 400), 255)
        im.paste(render_digit(d, 260, 20), (70, 70))
        for ext in ("png", "jpg"):
            uploads.append(str(folder / f"up_{d}.{ext}"))
            im.save(uploads[-1])
        layer = np.zeros((500, 500, 4), np.uint8)
        layer[..., 3] = 255 - np.asarray(render_digit(d, 500, 34), np.uint8)
        layers.append(str(folder / f"layer_{d}.png"))
        Image.fromarray(layer, "RGBA").save(layers[-1])
    return uploads, layers


def run(url: str, clients: int, total: int, uploads, layers) -> tuple[list[float], list[str]]:
    from gradio_client import Client, handle_file

    from vit.ui.canvas import drawing_value
    latencies, errors, lock = [], [], threading.Lock()
    counter = iter(range(total))

    def worker():
        client = Client(url, verbose=False)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t = time.perf_counter()
            try:
                if i % 2:
                    client.predict(handle_file(uploads[i % len(uploads)]), api_name="/classify")
                else:
                    client.predict(drawing_value(layers[i % len(layers)]), "mnist",
                                   True, 6, 1, 24, api_name="/analyse_drawing")
            except Exception as e:  # counted and reported, the run goes on
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
            with lock:
                latencies.append(1000 * (time.perf_counter() - t))

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--soak", type=int, default=2000, help="requests between the two RSS readings")
    p.add_argument("--server-log", default=str(ROOT / "artifacts" / "load-server.log"),
                   help="where the app server's output goes")
    args = p.parse_args()
    Path(args.server_log).parent.mkdir(parents=True, exist_ok=True)
    uploads, layers = make_inputs(Path(tempfile.mkdtemp()))
    proc, url, startup = start(["app.py"], log=args.server_log)
    print(f"app up in {startup:.1f} s at {url}")
    try:
        t = time.perf_counter()
        lat, errors = run(url, args.clients, args.requests, uploads, layers)
        wall = time.perf_counter() - t
        print(f"{args.requests} mixed requests from {args.clients} clients in {wall:.0f} s "
              f"({args.requests / wall:.1f}/s): errors {len(errors)}, "
              f"p50 {pct(lat, 50):.0f} ms, p95 {pct(lat, 95):.0f} ms")
        for e in errors[:5]:
            print("  error:", e)
        before = rss_mb(proc.pid)
        series, errors, done = [f"{before:.0f}"], [], 0
        while done < args.soak:          # RSS every 500 requests: a leak climbs, warm-up levels off
            n = min(500, args.soak - done)
            errors += run(url, args.clients, n, uploads, layers)[1]
            done += n
            series.append(f"{rss_mb(proc.pid):.0f}")
        after = rss_mb(proc.pid)
        print(f"soak: {args.soak} more requests, errors {len(errors)}; server RSS {before:.0f} MB -> "
              f"{after:.0f} MB (growth {after - before:+.1f} MB); every 500: {' '.join(series)} MB")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
