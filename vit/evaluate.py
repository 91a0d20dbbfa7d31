"""Test accuracy and confusion matrix of a checkpoint:
`python -m vit.evaluate --checkpoint checkpoints/mnist --data-dir data`."""
from __future__ import annotations

import argparse
import sys

import torch

from .checkpoint import CheckpointError, open_checkpoint
from .data import DataError, load_split
from .evaluation import confusion_matrix, evaluate, pick_device


def format_confusion(cm: torch.Tensor, names: list[str]) -> str:
    short = [n[:7] for n in names]
    w = max(7, max(len(s) for s in short))
    lines = ["true \\ predicted".ljust(w + 2) + " ".join(s.rjust(w) for s in short) + "   recall"]
    for i, row in enumerate(cm.tolist()):
        recall = row[i] / max(1, sum(row))
        lines.append(short[i].ljust(w + 2) + " ".join(str(v).rjust(w) for v in row)
                     + f"   {100 * recall:6.2f}%")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m vit.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default="checkpoints/mnist", help="checkpoint folder")
    p.add_argument("--data-dir", default="data", help="data folder (as for the trainer)")
    p.add_argument("--download", action=argparse.BooleanOptionalAction, default=False,
                   help="download the test set if missing")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, mps")
    p.add_argument("--batch-size", type=int, default=1000, help="images per batch (default: 1000)")
    args = p.parse_args(argv)
    if args.batch_size < 1:
        p.error("--batch-size must be at least 1")
    try:
        device = pick_device(args.device)
    except ValueError as e:
        p.error(str(e))
    try:
        ck = open_checkpoint(args.checkpoint, device)
        cfg = ck.config
        test = load_split(cfg.dataset or "mnist", args.data_dir, False, args.download)
    except (CheckpointError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    loss, acc, preds = evaluate(ck.model, test.images, test.labels, cfg.mean, cfg.std,
                                args.batch_size)
    cm = confusion_matrix(test.labels, preds, len(cfg.class_names))
    print(f"{args.checkpoint}: test accuracy {100 * acc:.2f}% "
          f"({int(cm.trace())}/{len(test)} correct), loss {loss:.4f}")
    if cfg.test_accuracy is not None:
        print(f"config.json records {100 * cfg.test_accuracy:.2f}%")
    print(format_confusion(cm, list(cfg.class_names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
