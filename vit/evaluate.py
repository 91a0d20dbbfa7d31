"""Test accuracy, confusion matrix and calibration of a checkpoint:
`python -m vit.evaluate --checkpoint checkpoints/mnist --data-dir data [--reliability PNG]`."""
from __future__ import annotations

import argparse
import sys

import torch

from vit.checkpoint import CheckpointError, open_checkpoint
from vit.data.loading import DataError, folder_split, load_split
from vit.data.specs import FOLDER
from vit.device import pick_device
from vit.explain.calibration import calibrated, ece
from vit.explain.ood import not_label
from vit.scoring import confusion_matrix, predict_logits, score


def format_confusion(cm: torch.Tensor, names: list[str]) -> str:
    """The confusion matrix as aligned text: a row per true class (its name whole, up to 20
    characters), a column per predicted class (names cut at 10), recall at the end."""
    corner = "true \\ predicted"
    rows = [n[:20] for n in names]
    cols = [n[:10] for n in names]
    first = max(len(corner), *(len(r) for r in rows)) + 2
    w = max(6, *(len(c) for c in cols), *(len(str(v)) for v in cm.flatten().tolist()))
    lines = [corner.ljust(first) + " ".join(c.rjust(w) for c in cols) + "   recall"]
    for i, row in enumerate(cm.tolist()):
        recall = row[i] / max(1, sum(row))
        lines.append(rows[i].ljust(first) + " ".join(str(v).rjust(w) for v in row)
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
    p.add_argument("--reliability", metavar="PNG", default=None,
                   help="also write a reliability diagram (calibrated and raw softmax) to this file")
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
        if cfg.dataset is None:         # a converted model: its classes are not a set here
            raise DataError(f"{args.checkpoint} names no data set (a converted model, "
                            f"{len(cfg.class_names)} classes): there is no test set here to "
                            f"evaluate it on")
        if cfg.dataset == FOLDER:       # an image folder's model: its own test/ (or val/)
            test = folder_split(args.data_dir, False, cfg.model.image_size, cfg.model.channels,
                                cfg.class_names)
        else:
            test = load_split(cfg.dataset or "mnist", args.data_dir, False, args.download)
    except (CheckpointError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:                # a data folder that can't be listed or read
        print(f"error: can't read the test set in --data-dir {args.data_dir}: "
              f"{e.strerror or ' '.join(str(e).split())}", file=sys.stderr)
        return 1
    try:
        logits = predict_logits(ck.model, test.images, cfg.mean, cfg.std, args.batch_size)
    except ValueError as e:             # a test set whose pictures this model does not take
        print(f"error: the {cfg.title} test set does not fit {args.checkpoint} ({e})",
              file=sys.stderr)
        return 1
    labels = test.labels.long()
    loss, acc, preds = score(logits, labels)
    cm = confusion_matrix(labels, preds, len(cfg.class_names))
    print(f"{args.checkpoint}: test accuracy {100 * acc:.2f}% "
          f"({int(cm.trace())}/{len(test)} correct), loss {loss:.4f}")
    if cfg.test_accuracy is not None:
        print(f"config.json records {100 * cfg.test_accuracy:.2f}%")
    print(format_confusion(cm, list(cfg.class_names)))
    raw, probs = logits.softmax(1), calibrated(logits, cfg.temperature)
    print(calibration_report(cfg, probs, raw, labels))
    if args.reliability:
        from vit.pictures.reliability import save_reliability_diagram
        title = f"{cfg.title} test set, {len(test):,} images"
        try:
            path = save_reliability_diagram(args.reliability, probs, labels,
                                            raw if cfg.calibration else None, title)
        except (OSError, ValueError) as e:
            print(f"error: can't write {args.reliability}: {e}", file=sys.stderr)
            return 1
        print(f"reliability diagram: {path}")
    return 0


def calibration_report(cfg, probs: torch.Tensor, raw: torch.Tensor, labels: torch.Tensor) -> str:
    """Lines on how far the shown confidence can be believed: 15-bin ECE of the calibrated and
    the raw probabilities, and how many test images the probability threshold refuses."""
    if not cfg.calibration:
        return (f"confidence: ECE {100 * ece(raw, labels):.2f}% (15 bins; raw softmax: this "
                f"checkpoint has no fitted temperature)")
    lines = [f"confidence: ECE {100 * ece(probs, labels):.2f}% calibrated (temperature "
             f"{cfg.temperature:.3g}), {100 * ece(raw, labels):.2f}% raw softmax (15 bins)"]
    if cfg.reject_below is not None:
        refused = (probs.max(1).values < cfg.reject_below).float().mean().item()
        lines.append(f"\"{not_label(cfg)}\" below {100 * cfg.reject_below:.1f}% top probability: "
                     f"{100 * refused:.2f}% of the test images refused")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
