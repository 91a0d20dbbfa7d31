"""How the bundled models read what people actually upload (bench/realistic.py): enlarged
low-resolution scans and paper photos of MNIST test digits, CIFAR-10 test photos framed four
ways, and pictures from outside each model's classes. Every input goes through the app's own
path (`Predictor.analyse`: preprocessing, calibrated probabilities, "not one of these").

    python -m bench.real_inputs [--n 300] [--models mnist fashion-mnist cifar10] [--seed 1]

Prints, per set: how many were refused with an error, answered "not one of these", and right.
The goals are issue 25's (docs/reliability.md). Data: ../shared/data (CIFAR-10 is a JPEG copy,
quality 75), Fashion-MNIST from /usr/share/datasets/fashion-mnist.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench import realistic
from vit.data.loading import load_split
from vit.inference import Predictor
from vit.preprocessing.decode import PreprocessError

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"


def read_all(predictor: Predictor, inputs, labels=None) -> dict:
    """Each input through the app's path: counts of errors, "not one of these" and right answers."""
    errors = refused = right = 0
    for i, x in enumerate(inputs):
        try:
            a = predictor.analyse(x)
        except PreprocessError:
            errors += 1
            continue
        if not a.is_class:
            refused += 1
        elif labels is not None and int(a.probs.argmax()) == int(labels[i]):
            right += 1
    n = len(inputs)
    return {"n": n, "errors": errors / n, "not one of these": refused / n,
            "right": right / n if labels is not None else None}


def show(name: str, r: dict) -> None:
    right = "" if r["right"] is None else f"  right {100 * r['right']:5.1f} %"
    print(f"  {name:<28} n={r['n']:<4} errors {100 * r['errors']:5.1f} %  "
          f"'not one of these' {100 * r['not one of these']:5.1f} %{right}", flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=300, help="inputs per set")
    p.add_argument("--models", nargs="+", default=["mnist", "fashion-mnist", "cifar10"])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--checkpoints", default=str(ROOT / "checkpoints"))
    args = p.parse_args(argv)
    outside = realistic.outside_set(max(1, args.n // len(realistic.OUTSIDE_KINDS)), args.seed)
    for name in args.models:
        started = time.perf_counter()
        predictor = Predictor(str(Path(args.checkpoints) / name), "cpu")
        test = load_split(predictor.config.dataset, DATA, train=False)
        rng = np.random.default_rng(args.seed)
        idx = rng.choice(len(test), args.n, replace=False)
        images, labels = test.images[idx].numpy(), test.labels[idx].numpy()
        print(f"{name} (test accuracy {100 * predictor.config.test_accuracy:.2f} %):")
        if predictor.config.dataset == "mnist":
            show("enlarged scans", read_all(predictor, [realistic.enlarged_scan(d, rng)
                                                        for d in images], labels))
            show("paper photos", read_all(predictor, [realistic.paper_photo(d, rng)
                                                      for d in images], labels))
            show("paper photos, a shadow band", read_all(
                predictor, [realistic.paper_photo(d, rng, bands=1) for d in images], labels))
        for how in realistic.FRAMINGS:
            pictures = [realistic.framed(np.asarray(np.broadcast_to(d[..., None], d.shape + (3,))
                                                    if d.ndim == 2 else d), how, rng)
                        for d in images]
            show(f"test images, {how}", read_all(predictor, pictures, labels))
        for kind in realistic.OUTSIDE_KINDS:
            show(f"outside: {kind}", read_all(predictor, [x for k, x in outside if k == kind]))
        print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
