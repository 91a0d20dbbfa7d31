"""What reading an input costs before the model sees it, on this machine (timings belong here,
not in tests: a shared CI machine makes a timed assert flaky or meaningless).

    python -m bench.preprocess_costs [--n 30]

1. The ink checks on a drawing's ink map (vit/explain/ood.py), on the costliest kind of drawing:
   a scribble of 16 segments on a 160-px map. docs/reliability.md: a few ms at most.
2. Laying out a 1024-px photo of a digit on paper (vit/preprocessing/layout.py `to_model_image`),
   median over --n photos. docs/reliability.md: ~35 ms on 2 cores.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))    # tests/drawings.py


def timed(f, n: int) -> list[float]:
    f()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        out.append(1000 * (time.perf_counter() - t))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=30)
    args = ap.parse_args()
    from drawings import scribble

    from bench import realistic
    from vit.data.examples import render_digit
    from vit.explain import ood
    from vit.preprocessing.layout import to_model_image
    ink = ood.ink_map(scribble(np.random.default_rng(3)))
    ms = timed(lambda: ood.check_ink(ood.measure(ink)), 5 * args.n)
    print(f"ink checks (16-segment scribble, 160 px): median {statistics.median(ms):.2f} ms, "
          f"max {max(ms):.2f} ms (n={len(ms)})")
    rng = np.random.default_rng(7)
    photos = [realistic.paper_photo(rendered(render_digit, str(d % 10)), rng, size=(1024, 1024))
              for d in range(args.n)]
    times = []
    for p in photos:
        times += timed(lambda p=p: to_model_image(p), 1)
    print(f"1024-px paper photo -> model input: median {statistics.median(times):.1f} ms "
          f"(n={len(times)})")


def rendered(render_digit, digit: str) -> np.ndarray:
    """The project's own stroke digit, white on black, 28 px (as tests/test_photos.py's)."""
    return 255 - np.asarray(render_digit(digit, size=28, width=2), np.uint8)


if __name__ == "__main__":
    main()
