"""What opening the app's Test set tab costs: the first time ever, and every time after.

    python -m bench.testset_open --data-dir ../shared/data [--checkpoint checkpoints/mnist] [--n 20]

1. First time ever: no cache beside the checkpoint, so the model runs over the whole test set
   (one torch thread, as the app runs). Measured on a copy of the checkpoint folder.
2. After a restart: a fresh process's first opening — read the test split, hash weights and data,
   read the cached answers — p50 over --n fresh processes. Goal: well under a second.
3. In the running app: the tab's whole response (status, confusion matrix, 60-image gallery) from
   answers held in memory, p50 over --n calls.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FRESH = """
import sys, time, torch
torch.set_num_threads(1)
from vit.checkpoint import open_checkpoint
from vit.testset import load_results
checkpoint = open_checkpoint(sys.argv[1])
t = time.perf_counter()
r = load_results(checkpoint, sys.argv[2])
assert r.from_cache
print(1000 * (time.perf_counter() - t))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "mnist"))
    p.add_argument("--n", type=int, default=20)
    args = p.parse_args()
    import torch
    torch.set_num_threads(1)
    from vit.checkpoint import open_checkpoint
    from vit.testset import load_results

    folder = Path(tempfile.mkdtemp()) / "ck"
    shutil.copytree(args.checkpoint, folder, ignore=shutil.ignore_patterns(".cache", "train_state"))
    t = time.perf_counter()
    r = load_results(open_checkpoint(folder), args.data_dir)
    first = time.perf_counter() - t
    print(f"first opening ever: {first:.1f} s to run the model over {len(r.labels):,} test images "
          f"(accuracy {100 * r.accuracy:.2f} %), answers cached")

    ms = []
    for _ in range(args.n):
        out = subprocess.run([sys.executable, "-c", FRESH, str(folder), args.data_dir], cwd=ROOT,
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        ms.append(float(out.stdout.strip()))
    print(f"after a restart (fresh process, cached answers): p50 {statistics.median(ms):.0f} ms "
          f"(max {max(ms):.0f}, n={args.n})")

    from vit.ui import create_app
    page = create_app(folder.parent, args.data_dir).page
    visit = page.visit()                             # the app's one model, "ck"
    page.testset_view(visit, "mistakes", -1, -1, progress=lambda *a, **k: None)
    ms = []
    for i in range(args.n):
        t = time.perf_counter()
        page.testset_view(visit, ("mistakes", "least confident", "all")[i % 3], -1, -1,
                         progress=lambda *a, **k: None)
        ms.append(1000 * (time.perf_counter() - t))
    print(f"in the running app (answers in memory, full tab response): p50 {statistics.median(ms):.0f} ms")


if __name__ == "__main__":
    main()
