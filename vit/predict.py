"""Classify image files: `python -m vit.predict IMAGE... --checkpoint checkpoints/mnist`.
Probabilities are calibrated (the checkpoint's temperature); an input that is not one of the
model's classes is answered "not a digit: <why>" (vit/explain/ood.py), its best guesses still listed."""
from __future__ import annotations

import argparse
import sys

from vit.checkpoint import CheckpointError
from vit.inference import Predictor
from vit.preprocessing.decode import PreprocessError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m vit.predict", description=__doc__.split("\n")[0])
    p.add_argument("images", nargs="+", metavar="IMAGE", help="image files (PNG, JPEG, WebP, GIF, BMP, …)")
    p.add_argument("--checkpoint", default="checkpoints/mnist", help="checkpoint folder")
    p.add_argument("--top", type=int, default=3, help="how many classes to print per image")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, mps")
    args = p.parse_args(argv)
    if args.top < 1:
        p.error("--top must be at least 1")
    try:
        predictor = Predictor(args.checkpoint, args.device)
    except (CheckpointError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    failed = 0
    for path in args.images:
        try:
            a = predictor.analyse(path)
        except PreprocessError as e:
            print(f"{path}: {e}", file=sys.stderr)
            failed += 1
            continue
        probs = a.probs
        order = probs.argsort()[::-1][:args.top]
        top = ", ".join(f"{predictor.class_names[i]} {100 * probs[i]:.1f}%" for i in order)
        if a.is_class:
            print(f"{path}: {top}")
        else:
            print(f"{path}: {predictor.not_label}: {a.verdict.reason} ({top})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
