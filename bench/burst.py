"""What a burst of requests costs the next visitor.

    python -m bench.burst [--requests 80] [--queue-size 64]

Starts `python app.py` on a loopback port. A second process sends --requests drawing analyses at
once (the canvas endpoint, a 500x500 PNG of ink) and then either leaves at once ("leaves":
nobody will read the answers) or waits for them ("stays"). Six seconds later a new visitor sends
one drawing; the script prints how long it waited, or that it was told the server is busy.
`--queue-size` sets VIT_QUEUE_SIZE (the app's default is 64; Gradio's own is unbounded). Note
that on a 2-core machine the flooding client competes with the server for the CPU.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from bench.app_latency import start

FLOOD = """
import os, sys, threading
from gradio_client import Client
from vit.ui.canvas import drawing_value
url, layer, n, leave = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "leaves"
c = Client(url, verbose=False)
jobs = []
def go():
    value = drawing_value(layer)
    jobs.append(c.submit(value, "mnist", True, 6, 1, None, api_name="/analyse_drawing"))
threads = [threading.Thread(target=go) for _ in range(n)]
[t.start() for t in threads]; [t.join() for t in threads]
if leave:
    os._exit(0)
for j in jobs:
    try:
        j.result()
    except Exception:
        pass
"""


def visit(url: str, layer: str) -> str:
    from gradio_client import Client

    from vit.ui.canvas import drawing_value
    t = time.perf_counter()
    value = drawing_value(layer)
    try:
        Client(url, verbose=False).predict(value, "mnist", True, 6, 1, None, api_name="/analyse_drawing")
        return f"waited {time.perf_counter() - t:.1f} s for its answer"
    except Exception as e:
        return f"was told after {time.perf_counter() - t:.1f} s: {str(e).splitlines()[0][:60]}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=80)
    p.add_argument("--queue-size", type=int, default=64)
    args = p.parse_args()
    from vit.data.examples import render_digit
    layer = os.path.join(tempfile.mkdtemp(), "layer.png")
    rgba = np.zeros((500, 500, 4), np.uint8)
    rgba[..., 3] = 255 - np.asarray(render_digit("4", 500, 34), np.uint8)
    Image.fromarray(rgba, "RGBA").save(layer)
    os.environ["VIT_QUEUE_SIZE"] = str(args.queue_size)
    proc, url, _ = start(["app.py"])
    try:
        print(f"before any burst: a visitor {visit(url, layer)}")
        for mode in ("leaves", "stays"):
            flood = subprocess.Popen([sys.executable, "-c", FLOOD, url, layer, str(args.requests), mode],
                                     cwd=Path(__file__).resolve().parent.parent)
            time.sleep(6)
            print(f"{args.requests} requests from a client that {mode}, queue size {args.queue_size}: "
                  f"the next visitor {visit(url, layer)}")
            flood.wait()
    finally:
        proc.terminate()


if __name__ == "__main__":
    main()
