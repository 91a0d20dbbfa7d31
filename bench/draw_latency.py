"""Drawing latency as a person meets it: headless Chromium draws digits on the page's canvas.

    python -m bench.draw_latency [--n 20] [--url URL]

Starts `python app.py` on a free port (or uses --url), then --n times: clear, draw a digit
with the mouse (~1 s of pen movement), lift. Prints, median (p50) and p90 over the drawings:
- lift → answer: ms from the pen lifting to the page showing the answer for the finished
  drawing (its sequence number echoed in #answered, applied with the label). Goal: p50 <= 300.
- answers while the pen moves, per drawing, and ms from the first pen movement to the first one.
- the pipeline strip: its redraws while the pen moves, and lift → the strip drawn for the
  finished drawing (its numbers arrive with the answer; the browser draws them).
Needs chromium (apt-get install chromium) and playwright.
"""
from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Strokes in canvas-relative coordinates, drawn at ~60 moves a second like a hand.
DIGITS = {
    "7": [[(0.28, 0.20), (0.72, 0.20), (0.42, 0.85)]],
    "1": [[(0.50, 0.18), (0.50, 0.85)]],
    "0": [[(0.50 + 0.2 * math.cos(t / 20 * 2 * math.pi), 0.52 + 0.32 * math.sin(t / 20 * 2 * math.pi))
           for t in range(21)]],
}

# In the page: when the pen lifts, which drawing number that was, and when #answered shows it.
PROBE = """() => {
  const pad = document.querySelector('#drawpad [data-ready]');
  const answered = document.querySelector('#answered');
  window.__lat = {};
  window.addEventListener('pointerdown', () => {
    Object.assign(window.__lat, {down: performance.now(), from: +pad.dataset.sent || 0}); });
  window.addEventListener('pointerup', () => {
    window.__lat.up = performance.now(); window.__lat.seq = pad.dataset.sent; });
  const strip = document.querySelector('#pipeline .pipe');
  new MutationObserver(() => {
    const L = window.__lat, now = performance.now();
    if (L.down == null) return;
    if (L.up == null) L.strip++;
    else L.stripDone = now;          // the last redraw after the lift: the finished drawing's
  }).observe(strip, {attributes: true, attributeFilter: ['data-draws']});
  new MutationObserver(() => {
    const L = window.__lat, now = performance.now(), text = answered.innerText.trim();
    if (!/^[0-9]+$/.test(text) || text === L.last || L.down == null) return;   // progress text
    L.last = text;
    if (L.up == null && +text > L.from) { L.during++; if (L.first == null) L.first = now; }
    if (L.up != null && L.done == null && text === L.seq) L.done = now;
  }).observe(answered, {childList: true, subtree: true, characterData: true});
}"""
RESET = ("() => { window.__lat = {up: null, seq: null, done: null, first: null, down: null, "
         "during: 0, strip: 0, stripDone: null}; }")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app() -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1"}
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the app did not start within 60 s")


def draw(pg, strokes, box):
    x0, y0, side = box["x"], box["y"], box["width"]
    for stroke in strokes:
        pts = [(x0 + u * side, y0 + v * side) for u, v in stroke]
        pg.mouse.move(*pts[0])
        pg.mouse.down()
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            steps = max(2, int(math.hypot(bx - ax, by - ay) / 6))
            for i in range(1, steps + 1):
                pg.mouse.move(ax + (bx - ax) * i / steps, ay + (by - ay) * i / steps)
                pg.wait_for_timeout(16)
        pg.mouse.up()


def measure(url: str, n: int) -> dict:
    from playwright.sync_api import sync_playwright
    lift, first, during, strip, strip_lift = [], [], [], [], []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        pg = b.new_page(viewport={"width": 1400, "height": 1000})
        pg.add_init_script("localStorage.setItem('vit-explorer-tour', 'done')")   # no tour
        pg.goto(url)
        pg.wait_for_function("() => document.querySelector('#status')?.innerText.includes('Example')",
                             timeout=60_000)
        pg.evaluate(PROBE)
        box = pg.locator("#drawpad canvas").bounding_box()
        names = list(DIGITS)
        for i in range(n + 1):                       # the first drawing warms up; not counted
            pg.locator('#drawpad button[aria-label="Clear canvas"]').click()
            pg.wait_for_function("() => document.querySelector('#status').innerText.includes('Draw a')")
            pg.evaluate(RESET)
            draw(pg, DIGITS[names[i % len(names)]], box)
            pg.wait_for_function("() => window.__lat.done !== null && window.__lat.stripDone !== null",
                                 timeout=30_000)
            pg.wait_for_timeout(300)           # (its numbers come with the answer; let it draw)
            r = pg.evaluate("() => window.__lat")
            if i:
                lift.append(r["done"] - r["up"])
                during.append(r["during"])
                strip.append(r["strip"])
                strip_lift.append(r["stripDone"] - r["up"])
                if r["first"] is not None:
                    first.append(r["first"] - r["down"])
        b.close()
    return {"lift": lift, "first": first, "during": during, "strip": strip,
            "strip_lift": strip_lift}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="drawings measured (default 20)")
    ap.add_argument("--url", help="a running app instead of starting one")
    args = ap.parse_args(argv)
    proc, url = (None, args.url) if args.url else start_app()
    try:
        r = measure(url, args.n)
    finally:
        if proc:
            proc.kill()
    print(f"{args.n} drawings in headless Chromium, {os.cpu_count()}-core machine")
    print(f"lift → answer: p50 {statistics.median(r['lift']):.0f} ms, p90 {pct(r['lift'], 0.9):.0f} ms "
          f"(goal p50 <= 300 ms)")
    print(f"answers while the pen moves: median {statistics.median(r['during']):.0f} per drawing")
    if r["first"]:
        print(f"first movement → first answer: p50 {statistics.median(r['first']):.0f} ms")
    print(f"pipeline strip: median {statistics.median(r['strip']):.0f} redraws while the pen moves; "
          f"lift → strip drawn: p50 {statistics.median(r['strip_lift']):.0f} ms, "
          f"p90 {pct(r['strip_lift'], 0.9):.0f} ms")


if __name__ == "__main__":
    main()
